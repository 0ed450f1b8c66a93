/*  disk_tier.c: the disk tier (disk_tier.h).

    One mutex guards the slots, the index, the LRU and both queues; the
    store's ops take it inside the store's lock (store -> tier, never the
    other way: the threads let go of it before they call the store).
    A slot is FREE, WRITING (staged or being written), HELD (on disk, in
    the LRU) or READING (a promotion's read and land).  Only HELD slots
    are in the LRU, so a slot is never reused under its own I/O; a key
    forgotten (or replaced) meanwhile leaves the index at once and its
    slot is freed when the I/O ends (stale).
*/
#include "tier/disk_tier.h"
#include "base/checksum.h"
#include "base/err.h"
#include "base/keymap.h"
#include "base/thread.h"
#include "tier/disk_io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

//  Staged blocks at most: 16 MiB of them, at least 4 (and no more than
//  slots).  A burst of evictions larger than the disk absorbs meanwhile
//  is dropped, counted: the pool's eviction never waits for the disk.
#define S_STAGING_BYTES (16u << 20)
//  Ops handed to the disk in one batch, per thread.
#define S_WRITE_DEPTH 32
//  Reads: a chunk of 8 is read, checked, landed and rung before the next
//  is read, so that the role writes a get's first hits to its consumer
//  while the reader reads the rest (the role's stream_gets; design.md,
//  "A get's disk hits are written as they land").  What it costs: up to
//  4 rings and actor wakes for a 32-block fetch rather than 1.
#define S_READ_DEPTH 8

#define S_NONE UINT32_MAX
#define S_MAGIC "p2pkvSP1"
//  2: the header's own check is a MAC under the spill key (version 1's
//  plain checksum is refused at start, counted: an upgrade starts cold)
#define S_VERSION 2

enum { S_FREE, S_WRITING, S_HELD, S_READING };

typedef struct {
    uint8_t state;
    bool want;                  //  WRITING: a promote came; read it back once written
    bool stale;                 //  WRITING/READING: out of the index; free it after
    bool forgot;                //  stale by a forget: its header is cleared once freed
    bool clearing;              //  queued in clears
    uint32_t prev, next;        //  the LRU (HELD) or the free list (next)
    uint64_t gen;               //  the tier's write sequence at its write, in the header:
                                //  of two slots of one key found at start, the later
    uint64_t sum;               //  the store's checksum (0: it takes none)
    double asked;               //  READING: when promote asked
    uint16_t len;               //  mkey's bytes: the namespace, then the key
    uint8_t mkey[1 + PK_DISK_TIER_MAX_KEY];
} s_slot_t;

//  The header on disk, the first bytes of its PK_DISK_TIER_HEADER.
typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t key_len;
    uint64_t identity;
    uint64_t block_len;
    uint64_t gen;
    uint64_t sum;               //  the store's (0: none)
    uint64_t data_sum;          //  the bytes' pk_checksum (= sum when there is one)
    uint8_t ns;
    uint8_t pad[7];
    uint64_t slot;              //  where it was written: a slot copied elsewhere does not check
    uint8_t mac[16];            //  keyed BLAKE2b of the header with this field 0 (spill_key.h)
    uint8_t key[PK_DISK_TIER_MAX_KEY];
} s_header_t;

_Static_assert(sizeof(s_header_t) <= PK_DISK_TIER_HEADER, "a header fits its 4 KiB");
_Static_assert(offsetof(s_header_t, sum) == 40 && offsetof(s_header_t, mac) == 72
               && offsetof(s_header_t, key) == 88, "test_spill's forged slot writes these");

typedef struct {
    uint32_t slot;
    uint8_t *bytes;             //  block_len
} s_staged_t;

struct _pk_disk_tier_t {
    pk_disk_tier_config_t config;
    pk_store_t *store;
    uint64_t block_len;
    uint64_t slot_len;
    int fd;
    bool found;                 //  the data file was there, of this size: recover it
    pthread_mutex_t mutex;
    pthread_cond_t write_cond, read_cond;
    pthread_cond_t room_cond;   //  the writer took a batch (CLOCK_MONOTONIC: flush)
    bool stop;
    bool off;                   //  a write failed: no more
    s_slot_t *slots;
    uint32_t nslots;
    uint32_t free_head;
    uint32_t lru_head, lru_tail;    //  head: most recently used
    pk_keymap_t index;          //  mkey -> slot (a)
    s_staged_t *staged;         //  a ring of nstaged
    uint32_t nstaged, staged_head, staged_count;
    uint32_t *reads;            //  a ring of nslots slot ids
    uint32_t reads_head, reads_count;
    uint32_t *clears;           //  a ring of nslots slot ids: headers to zero
    uint32_t clears_head, clears_count;
    uint64_t seq;               //  the last write's gen
    pk_disk_tier_stats_t st;
    pk_disk_io_t *wio, *rio;
    pthread_t writer, reader;
    bool writer_on, reader_on;
};

static double
s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

uint64_t
pk_disk_tier_slot_len(uint64_t block_len)
{
    return PK_DISK_TIER_HEADER + (block_len + 4095) / 4096 * 4096;
}

//  ---------------------------------------------------------------------------
//  Slots, the LRU and the index (mutex held)

static pk_key_t
s_mkey(const s_slot_t *s)
{
    return pk_key_make(s->mkey, s->len);
}

static void
s_lru_unlink(pk_disk_tier_t *self, uint32_t i)
{
    s_slot_t *s = &self->slots[i];
    if (s->prev != S_NONE)
        self->slots[s->prev].next = s->next;
    else
        self->lru_head = s->next;
    if (s->next != S_NONE)
        self->slots[s->next].prev = s->prev;
    else
        self->lru_tail = s->prev;
    s->prev = s->next = S_NONE;
}

static void
s_lru_push(pk_disk_tier_t *self, uint32_t i)
{
    s_slot_t *s = &self->slots[i];
    s->prev = S_NONE;
    s->next = self->lru_head;
    if (self->lru_head != S_NONE)
        self->slots[self->lru_head].prev = i;
    else
        self->lru_tail = i;
    self->lru_head = i;
}

static void
s_free(pk_disk_tier_t *self, uint32_t i)
{
    s_slot_t *s = &self->slots[i];
    //  a dropped key's header is zeroed, so a restart never finds it
    //  (the writer does it before any later write of the slot)
    if (s->forgot && !s->clearing) {
        s->clearing = true;
        self->clears[(self->clears_head + self->clears_count++) % self->nslots] = i;
        pthread_cond_signal(&self->write_cond);
    }
    s->state = S_FREE;
    s->want = s->stale = s->forgot = false;
    s->prev = S_NONE;
    s->next = self->free_head;
    self->free_head = i;
}

//  Takes slot i out of the index (its key is gone, forgot: dropped, or
//  replaced).  A HELD one is freed now; one under I/O when that ends.
static void
s_unindex(pk_disk_tier_t *self, uint32_t i, bool forgot)
{
    s_slot_t *s = &self->slots[i];
    pk_key_t k = s_mkey(s);
    pk_keymap_take(&self->index, &k, NULL, NULL);
    s->forgot = forgot;
    if (s->state == S_HELD) {
        s_lru_unlink(self, i);
        self->st.blocks--;
        s_free(self, i);
    }
    else
        s->stale = true;
}

//  The index's key of (ns, key) in buf: the namespace's byte first.
static bool
s_make_mkey(unsigned ns, const pk_key_t *key, uint8_t *buf, pk_key_t *out)
{
    if (key->len > PK_DISK_TIER_MAX_KEY)
        return false;
    buf[0] = (uint8_t) ns;
    memcpy(buf + 1, key->bytes, key->len);
    *out = pk_key_make(buf, key->len + 1);
    return true;
}

static uint32_t
s_find(pk_disk_tier_t *self, unsigned ns, const pk_key_t *key)
{
    uint8_t buf[1 + PK_DISK_TIER_MAX_KEY];
    pk_key_t k;
    if (!s_make_mkey(ns, key, buf, &k))
        return S_NONE;
    pk_keymap_entry_t *e = pk_keymap_find(&self->index, &k);
    return e ? (uint32_t) e->a : S_NONE;
}

//  ---------------------------------------------------------------------------
//  The store's ops (tier.h), under the store's lock

static pk_tier_answer_t
s_query(void *self_, unsigned ns, const pk_key_t *key)
{
    pk_disk_tier_t *self = self_;
    pthread_mutex_lock(&self->mutex);
    uint32_t i = s_find(self, ns, key);
    pk_tier_answer_t answer = PK_TIER_ABSENT;
    if (i != S_NONE) {
        const s_slot_t *s = &self->slots[i];
        answer = s->state == S_READING || (s->state == S_WRITING && s->want) ? PK_TIER_PENDING
                 : PK_TIER_PRESENT;
    }
    pthread_mutex_unlock(&self->mutex);
    return answer;
}

static int
s_promote(void *self_, unsigned ns, const pk_key_t *key)
{
    pk_disk_tier_t *self = self_;
    pthread_mutex_lock(&self->mutex);
    uint32_t i = s_find(self, ns, key);
    int rc = 0;
    if (i == S_NONE)
        rc = -ENOENT;
    else if (self->slots[i].state == S_WRITING)
        self->slots[i].want = true;     //  read back once written
    else if (self->slots[i].state == S_HELD) {
        s_slot_t *s = &self->slots[i];
        s_lru_unlink(self, i);
        s->state = S_READING;
        s->asked = s_now();
        //  queued; the reader starts at the kick that ends the lookups'
        //  pass, with every key of it (s_kick)
        self->reads[(self->reads_head + self->reads_count++) % self->nslots] = i;
        self->st.promotions++;
    }
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

//  The lookups' pass ended: the reader takes what it promoted, in chunks
//  of S_READ_DEPTH.  Woken at each promote, it took the first one or few
//  keys while the role promoted the rest, and each batch rang the parked
//  lookup awake again (design.md, "A warm fetch from disk").
static void
s_kick(void *self_)
{
    pk_disk_tier_t *self = self_;
    pthread_mutex_lock(&self->mutex);
    if (self->reads_count)
        pthread_cond_signal(&self->read_cond);
    pthread_mutex_unlock(&self->mutex);
}

//  A slot for a new block: a free one, else the least recently used
//  HELD one; S_NONE when every slot is under I/O.
static uint32_t
s_take_slot(pk_disk_tier_t *self)
{
    uint32_t i = self->free_head;
    if (i != S_NONE) {
        self->free_head = self->slots[i].next;
        return i;
    }
    i = self->lru_tail;
    if (i == S_NONE)
        return S_NONE;
    s_unindex(self, i, false);  //  HELD: freed, now take it off the free list
    self->free_head = self->slots[i].next;
    self->st.evictions++;
    return i;
}

static void
s_evicted(void *self_, unsigned ns, const pk_key_t *key, const void *bytes, size_t len,
          uint64_t sum)
{
    pk_disk_tier_t *self = self_;
    pthread_mutex_lock(&self->mutex);
    uint8_t buf[1 + PK_DISK_TIER_MAX_KEY];
    pk_key_t k;
    if (self->off || len != self->block_len || !s_make_mkey(ns, key, buf, &k)) {
        self->st.dropped++;
        self->st.too_long += key->len > PK_DISK_TIER_MAX_KEY;
        goto done;
    }
    pk_keymap_entry_t *e = pk_keymap_find(&self->index, &k);
    if (e) {
        uint32_t i = (uint32_t) e->a;
        s_slot_t *s = &self->slots[i];
        //  the same bytes on disk already (a promoted block evicted
        //  again): a use, no write
        if (s->state == S_HELD && sum && s->sum == sum) {
            s_lru_unlink(self, i);
            s_lru_push(self, i);
            goto done;
        }
        s_unindex(self, i, false);  //  the later write wins at a restart
    }
    if (self->staged_count == self->nstaged) {
        self->st.dropped++;
        goto done;
    }
    uint32_t i = s_take_slot(self);
    if (i == S_NONE) {
        self->st.dropped++;
        goto done;
    }
    s_slot_t *s = &self->slots[i];
    s->state = S_WRITING;
    s->want = s->stale = false;
    s->gen = ++self->seq;
    s->sum = sum;
    s->len = (uint16_t) k.len;
    memcpy(s->mkey, buf, k.len);
    pk_key_t mine = s_mkey(s);
    if (pk_keymap_put(&self->index, &mine, i, 0) < 0) {
        s_free(self, i);
        self->st.dropped++;
        goto done;
    }
    s_staged_t *g = &self->staged[(self->staged_head + self->staged_count++) % self->nstaged];
    g->slot = i;
    memcpy(g->bytes, bytes, len);   //  the one copy under the store's lock
    pthread_cond_signal(&self->write_cond);
done:
    pthread_mutex_unlock(&self->mutex);
}

static void
s_forget(void *self_, unsigned ns, const pk_key_t *key)
{
    pk_disk_tier_t *self = self_;
    pthread_mutex_lock(&self->mutex);
    uint32_t i = s_find(self, ns, key);
    if (i != S_NONE)
        s_unindex(self, i, true);
    pthread_mutex_unlock(&self->mutex);
}

//  Every key held: in the index (a slot written, being written or read;
//  not one forgotten or replaced meanwhile).
static void
s_each(void *self_, pk_tier_key_fn *fn, void *arg)
{
    pk_disk_tier_t *self = self_;
    pthread_mutex_lock(&self->mutex);
    for (uint32_t i = 0; i < self->nslots; i++) {
        const s_slot_t *s = &self->slots[i];
        if (s->state == S_FREE || s->stale)
            continue;
        pk_key_t key = pk_key_make(s->mkey + 1, s->len - 1u);
        fn(arg, s->mkey[0], &key);
    }
    pthread_mutex_unlock(&self->mutex);
}

static const pk_tier_ops_t s_ops = {
    .size = sizeof(pk_tier_ops_t),
    .name = "disk",
    .query = s_query,
    .promote = s_promote,
    .evicted = s_evicted,
    .forget = s_forget,
    .each = s_each,
    .kick = s_kick,
};

//  ---------------------------------------------------------------------------
//  The writer

static void
s_log(pk_disk_tier_t *self, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
s_log(pk_disk_tier_t *self, const char *fmt, ...)
{
    if (!self->config.log)
        return;
    char line[PK_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    self->config.log(self->config.log_arg, line);
}

//  The header's MAC under the spill key (spill_key.h): over every field,
//  the block's checksum (data_sum) and the slot among them, so neither a
//  header nor, through data_sum, its bytes can be changed on disk
//  without the key.  Keyed BLAKE2b of 344 bytes: 2.3-2.6 us a slot here, at
//  each read back and each header read at start; the bytes are checked
//  against data_sum by the XXH3 they had already (design.md).
static void
s_header_mac(const pk_disk_tier_t *self, s_header_t *h, uint8_t mac[16])
{
    uint8_t kept[16];
    memcpy(kept, h->mac, sizeof kept);
    memset(h->mac, 0, sizeof h->mac);
    crypto_generichash(mac, 16, (const uint8_t *) h, sizeof *h, self->config.key,
                       sizeof self->config.key);
    memcpy(h->mac, kept, sizeof kept);
}

static void
s_header_seal(const pk_disk_tier_t *self, s_header_t *h, uint64_t slot)
{
    uint8_t mac[16];
    h->slot = slot;
    s_header_mac(self, h, mac);
    memcpy(h->mac, mac, sizeof mac);
}

//  Whether h is sealed by our key, for slot.
static bool
s_header_sealed(const pk_disk_tier_t *self, s_header_t *h, uint64_t slot)
{
    uint8_t mac[16];
    s_header_mac(self, h, mac);
    return h->slot == slot && sodium_memcmp(mac, h->mac, sizeof mac) == 0;
}

static void *
s_writer(void *arg)
{
    pk_thread_block_signals();
    pk_disk_tier_t *self = arg;
    s_header_t *heads = calloc(S_WRITE_DEPTH, PK_DISK_TIER_HEADER);
    uint8_t *zeros = calloc(1, PK_DISK_TIER_HEADER);
    pk_disk_op_t ops[S_WRITE_DEPTH], cops[S_WRITE_DEPTH];
    uint32_t slots[S_WRITE_DEPTH], cslots[S_WRITE_DEPTH];
    pthread_mutex_lock(&self->mutex);
    while (heads && zeros) {
        //  at stop, what is staged is written out first
        while (!self->stop && !self->staged_count && !self->clears_count)
            pthread_cond_wait(&self->write_cond, &self->mutex);
        if (!self->staged_count && !self->clears_count)
            break;
        //  the headers to clear first: each was queued before any later
        //  write of its slot, which may be in this batch
        uint32_t nc = self->clears_count < S_WRITE_DEPTH ? self->clears_count : S_WRITE_DEPTH;
        for (uint32_t j = 0; j < nc; j++) {
            cslots[j] = self->clears[(self->clears_head + j) % self->nslots];
            cops[j] = (pk_disk_op_t) {
                .write = true, .iov = { { zeros, PK_DISK_TIER_HEADER }, { zeros, 0 } },
                .offset = (off_t) (cslots[j] * self->slot_len) };
        }
        self->clears_head = (self->clears_head + nc) % self->nslots;
        self->clears_count -= nc;
        uint32_t n = self->staged_count < S_WRITE_DEPTH ? self->staged_count : S_WRITE_DEPTH;
        for (uint32_t j = 0; j < n; j++) {
            s_staged_t *g = &self->staged[(self->staged_head + j) % self->nstaged];
            const s_slot_t *s = &self->slots[g->slot];
            s_header_t *h = (s_header_t *) ((uint8_t *) heads + (size_t) j * PK_DISK_TIER_HEADER);
            memset(h, 0, sizeof *h);
            memcpy(h->magic, S_MAGIC, 8);
            h->version = S_VERSION;
            h->key_len = s->len - 1u;
            h->identity = self->config.identity;
            h->block_len = self->block_len;
            h->gen = s->gen;
            h->sum = s->sum;
            h->ns = s->mkey[0];
            memcpy(h->key, s->mkey + 1, h->key_len);
            slots[j] = g->slot;
            ops[j] = (pk_disk_op_t) {
                .write = true,
                .iov = { { h, PK_DISK_TIER_HEADER }, { g->bytes, self->block_len } },
                .offset = (off_t) (g->slot * self->slot_len) };
        }
        pthread_mutex_unlock(&self->mutex);
        if (nc) {
            pk_disk_io_run(self->wio, cops, nc);
            pthread_mutex_lock(&self->mutex);
            for (uint32_t j = 0; j < nc; j++)
                self->slots[cslots[j]].clearing = false;
            pthread_mutex_unlock(&self->mutex);
        }
        //  the staged entries are ours until staged_head moves
        for (uint32_t j = 0; j < n; j++) {
            s_header_t *h = ops[j].iov[0].iov_base;
            h->data_sum = h->sum ? h->sum : pk_checksum(ops[j].iov[1].iov_base, self->block_len);
            s_header_seal(self, h, slots[j]);
        }
        pk_disk_io_run(self->wio, ops, n);
        int failed = 0;
        pthread_mutex_lock(&self->mutex);
        bool wake_reader = false;
        for (uint32_t j = 0; j < n; j++) {
            s_slot_t *s = &self->slots[slots[j]];
            if (ops[j].res < 0) {
                self->st.write_errors++;
                if (!failed)
                    failed = (int) -ops[j].res;
                if (!s->stale) {
                    pk_key_t k = s_mkey(s);
                    pk_keymap_take(&self->index, &k, NULL, NULL);
                }
                s_free(self, slots[j]);
                continue;
            }
            self->st.writes++;
            if (s->stale) {
                s_free(self, slots[j]);
                continue;
            }
            if (s->want) {
                s->want = false;
                s->state = S_READING;
                s->asked = s_now();
                self->reads[(self->reads_head + self->reads_count++) % self->nslots] = slots[j];
                self->st.promotions++;
                wake_reader = true;
            }
            else {
                s->state = S_HELD;
                s_lru_push(self, slots[j]);
            }
            self->st.blocks++;
        }
        self->staged_head = (self->staged_head + n) % self->nstaged;
        self->staged_count -= n;
        pthread_cond_broadcast(&self->room_cond);
        if (wake_reader)
            pthread_cond_signal(&self->read_cond);
        if (failed && !self->off) {
            self->off = true;
            self->st.off = 1;
            pthread_mutex_unlock(&self->mutex);
            s_log(self, "spill directory %s: a write failed (%s): the disk tier writes "
                  "nothing more (what it holds is still read back)", self->config.dir,
                  strerror(failed));
            pthread_mutex_lock(&self->mutex);
        }
    }
    pthread_mutex_unlock(&self->mutex);
    free(heads);
    free(zeros);
    return NULL;
}

//  ---------------------------------------------------------------------------
//  The reader

//  What a read slot must say: the expected header, taken when the batch
//  was.
typedef struct {
    uint32_t slot;
    uint64_t gen, sum;
    uint16_t len;
    uint8_t mkey[1 + PK_DISK_TIER_MAX_KEY];
    double asked;
} s_read_t;

//  Whether the slot read back is the block asked for, whole.
static bool
s_check(pk_disk_tier_t *self, const s_read_t *r, s_header_t *h, const void *bytes)
{
    return memcmp(h->magic, S_MAGIC, 8) == 0 && s_header_sealed(self, h, r->slot)
           && h->version == S_VERSION && h->identity == self->config.identity
           && h->block_len == self->block_len && h->gen == r->gen && h->sum == r->sum
           && h->ns == r->mkey[0] && h->key_len == r->len - 1u
           && memcmp(h->key, r->mkey + 1, h->key_len) == 0
           && pk_checksum(bytes, self->block_len) == h->data_sum;
}

//  Lands a checked block through the store's write path.  0, or what
//  reserve said (-EEXIST: written meanwhile, nothing to do).
static int
s_land(pk_disk_tier_t *self, const s_read_t *r, const s_header_t *h, const void *bytes)
{
    pk_key_t key = pk_key_make(r->mkey + 1, r->len - 1u);
    uint32_t b;
    int rc = pk_store_reserve(self->store, PK_STORE_OWNER_TIER, r->mkey[0], &key, 1, &b);
    if (rc)
        return rc;
    memcpy((uint8_t *) pk_store_base(self->store) + (size_t) b * self->block_len, bytes,
           self->block_len);
    //  the checksum handed at eviction (none: the store takes it, or not)
    bool given = r->sum != 0;
    return pk_store_commit_sums(self->store, PK_STORE_OWNER_TIER, r->mkey[0], &key, 1, &r->sum,
                                &given);
}

static void *
s_reader(void *arg)
{
    pk_thread_block_signals();
    pk_disk_tier_t *self = arg;
    s_read_t *rs = calloc(S_READ_DEPTH, sizeof *rs);
    uint8_t *bufs = aligned_alloc(4096, S_READ_DEPTH * self->slot_len);
    pk_disk_op_t ops[S_READ_DEPTH];
    int outcome[S_READ_DEPTH];
    bool landed[S_READ_DEPTH];
    double seconds[S_READ_DEPTH];
    //  a test's hung disk: nothing promoted ever lands (only the tests
    //  set it: test_spill_stream's deadline)
    bool hung = getenv("P2PKV_TEST_SPILL_HUNG") != NULL;
    pthread_mutex_lock(&self->mutex);
    while (rs && bufs) {
        while (!self->stop && (!self->reads_count || hung))
            pthread_cond_wait(&self->read_cond, &self->mutex);
        if (self->stop)
            break;
        uint32_t n = self->reads_count < S_READ_DEPTH ? self->reads_count : S_READ_DEPTH;
        for (uint32_t j = 0; j < n; j++) {
            uint32_t i = self->reads[(self->reads_head + j) % self->nslots];
            const s_slot_t *s = &self->slots[i];
            rs[j] = (s_read_t) { .slot = i, .gen = s->gen, .sum = s->sum, .len = s->len,
                                 .asked = s->asked };
            memcpy(rs[j].mkey, s->mkey, s->len);
            uint8_t *buf = bufs + (size_t) j * self->slot_len;
            ops[j] = (pk_disk_op_t) {
                .write = false,
                .iov = { { buf, PK_DISK_TIER_HEADER }, { buf + PK_DISK_TIER_HEADER,
                                                         self->block_len } },
                .offset = (off_t) (i * self->slot_len) };
        }
        self->reads_head = (self->reads_head + n) % self->nslots;
        self->reads_count -= n;
        pthread_mutex_unlock(&self->mutex);
        //  every read of the batch at once (one submit with io_uring)
        pk_disk_io_run(self->rio, ops, n);
        for (uint32_t j = 0; j < n; j++) {
            s_header_t *h = ops[j].iov[0].iov_base;
            outcome[j] = ops[j].res < 0 ? (int) ops[j].res
                         : !s_check(self, &rs[j], h, ops[j].iov[1].iov_base) ? -EBADMSG
                         : s_land(self, &rs[j], h, ops[j].iov[1].iov_base);
        }
        double now = s_now();
        pthread_mutex_lock(&self->mutex);
        for (uint32_t j = 0; j < n; j++) {
            uint32_t i = rs[j].slot;
            s_slot_t *s = &self->slots[i];
            if (outcome[j] == -EBADMSG || ops[j].res < 0) {
                //  never served: out of the index, the slot free
                if (outcome[j] == -EBADMSG)
                    self->st.corrupt++;
                if (!s->stale) {
                    pk_key_t k = s_mkey(s);
                    pk_keymap_take(&self->index, &k, NULL, NULL);
                }
                self->st.blocks--;
                s_free(self, i);
                continue;
            }
            if (outcome[j] == 0) {
                self->st.reads++;
                self->st.read_us += (uint64_t) ((now - rs[j].asked) * 1e6);
            }
            //  kept on disk: evicted again, the same bytes cost no write;
            //  not landed (-EEXIST: an engine wrote it meanwhile; -ENOSPC:
            //  the pool is all pinned or being written now), a lookup may
            //  ask again
            if (s->stale) {
                self->st.blocks--;
                s_free(self, i);
            }
            else {
                s->state = S_HELD;
                s_lru_push(self, i);
            }
        }
        pthread_mutex_unlock(&self->mutex);
        //  once per chunk: one wake of the lookups parked on it
        if (self->config.landed) {
            for (uint32_t j = 0; j < n; j++) {
                landed[j] = outcome[j] == 0;
                seconds[j] = now - rs[j].asked;
            }
            self->config.landed(self->config.landed_arg, n, landed, seconds);
        }
        pthread_mutex_lock(&self->mutex);
    }
    pthread_mutex_unlock(&self->mutex);
    free(rs);
    free(bufs);
    return NULL;
}

//  ---------------------------------------------------------------------------
//  Construction

//  The data file in dir: created or reused, sized, locked.  0 or a
//  negative errno with err.
static int
s_open_file(pk_disk_tier_t *self, char *err)
{
    const char *dir = self->config.dir;
    struct stat st;
    if (stat(dir, &st) != 0)
        return pk_err(err, -errno, "%s", strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return pk_err(err, -ENOTDIR, "not a directory");
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, PK_DISK_TIER_FILE) >= (int) sizeof path)
        return pk_err(err, -ENAMETOOLONG, "the path is too long");
    self->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (self->fd < 0)
        return pk_err(err, -errno, "cannot open %s: %s", PK_DISK_TIER_FILE, strerror(errno));
    if (flock(self->fd, LOCK_EX | LOCK_NB) != 0)
        return pk_err(err, errno == EWOULDBLOCK ? -EBUSY : -errno,
                      "%s is held by another server", PK_DISK_TIER_FILE);
    //  the room the file may still grow into: what it has, and what the
    //  file system has free for us
    struct stat fst;
    struct statvfs vfs;
    if (fstat(self->fd, &fst) != 0 || fstatvfs(self->fd, &vfs) != 0)
        return pk_err(err, -errno, "cannot stat %s: %s", PK_DISK_TIER_FILE, strerror(errno));
    uint64_t have = (uint64_t) fst.st_blocks * 512
                    + (uint64_t) vfs.f_bavail * (uint64_t) vfs.f_frsize;
    uint64_t want = (uint64_t) self->nslots * self->slot_len;
    if (have < want)
        return pk_err(err, -ENOSPC, "%llu bytes free for the disk tier, %llu asked "
                      "(%u slots of %llu bytes)", (unsigned long long) have,
                      (unsigned long long) want, self->nslots,
                      (unsigned long long) self->slot_len);
    self->found = (uint64_t) fst.st_size == want;
    //  sparse: written as blocks come (a disk shared with others may
    //  still fill: ENOSPC then turns the writes off)
    if (ftruncate(self->fd, (off_t) want) != 0)
        return pk_err(err, -errno, "cannot size %s: %s", PK_DISK_TIER_FILE, strerror(errno));
    return 0;
}

static int
s_by_gen(const void *a, const void *b, void *slots_)
{
    const s_slot_t *slots = slots_;
    uint64_t x = slots[*(const uint32_t *) a].gen, y = slots[*(const uint32_t *) b].gen;
    return x < y ? -1 : x > y;
}

//  A warm start on a data file of this size: every slot whose header
//  checks (magic, the header's checksum, this server's identity and
//  block length) is HELD again, the later write of two of one key; the
//  others are free, those that looked like ours but did not check
//  counted (refused).  A slot's bytes are checked when it is read back,
//  so a torn write (a crash) is a miss then, never bytes served.  One
//  4 KiB read per slot, before the server is ready.
static void
s_recover(pk_disk_tier_t *self)
{
    s_header_t *h = aligned_alloc(4096, PK_DISK_TIER_HEADER);
    if (!h)
        return;
    for (uint32_t i = 0; i < self->nslots; i++) {
        if (pread(self->fd, h, PK_DISK_TIER_HEADER, (off_t) (i * self->slot_len))
            != PK_DISK_TIER_HEADER || memcmp(h->magic, S_MAGIC, 8) != 0)
            continue;           //  never written, or cleared (a dropped key)
        if (!s_header_sealed(self, h, i) || h->version != S_VERSION
            || h->identity != self->config.identity || h->block_len != self->block_len
            || h->key_len < 1 || h->key_len > PK_DISK_TIER_MAX_KEY) {
            self->st.refused++;
            continue;
        }
        s_slot_t *s = &self->slots[i];
        s->gen = h->gen;
        s->sum = h->sum;
        s->len = (uint16_t) (h->key_len + 1);
        s->mkey[0] = h->ns;
        memcpy(s->mkey + 1, h->key, h->key_len);
        if (h->gen > self->seq)
            self->seq = h->gen;
        pk_key_t k = s_mkey(s);
        pk_keymap_entry_t *e = pk_keymap_find(&self->index, &k);
        if (e && self->slots[e->a].gen > s->gen)
            continue;           //  an older copy: free
        if (e) {                //  the older copy's slot is free
            self->slots[e->a].state = S_FREE;
            pk_keymap_take(&self->index, &k, NULL, NULL);
        }
        if (pk_keymap_put(&self->index, &k, i, 0) < 0)
            continue;
        s->state = S_HELD;
    }
    free(h);
}

//  The free list and the LRU after s_recover (or of an empty tier): HELD
//  slots by their writes' order, the latest most recently used.
static int
s_lists(pk_disk_tier_t *self)
{
    uint32_t *held = malloc(self->nslots * sizeof *held);
    if (!held)
        return -ENOMEM;
    uint32_t nheld = 0;
    self->free_head = S_NONE;
    self->lru_head = self->lru_tail = S_NONE;
    for (uint32_t i = self->nslots; i-- > 0; ) {
        if (self->slots[i].state == S_HELD)
            held[nheld++] = i;
        else
            s_free(self, i);
    }
    qsort_r(held, nheld, sizeof *held, s_by_gen, self->slots);
    for (uint32_t j = 0; j < nheld; j++)
        s_lru_push(self, held[j]);
    self->st.blocks = self->st.recovered = nheld;
    free(held);
    return 0;
}

pk_disk_tier_t *
pk_disk_tier_new(const pk_disk_tier_config_t *config, pk_store_t *store, int *rc_p, char *err)
{
    int rc = -ENOMEM;
    pk_disk_tier_t *self = calloc(1, sizeof *self);
    if (!self) {
        pk_err(err, rc, "out of memory");
        goto fail;
    }
    self->config = *config;
    self->store = store;
    self->fd = -1;
    self->block_len = pk_store_block_len(store);
    self->slot_len = pk_disk_tier_slot_len(self->block_len);
    uint64_t nslots = config->size / self->slot_len;
    if (nslots < 1 || nslots >= S_NONE) {
        rc = pk_err(err, -EINVAL, "%llu bytes hold %s slot of %llu bytes (a 4 KiB header and "
                    "the block)", (unsigned long long) config->size,
                    nslots < 1 ? "no" : "too many", (unsigned long long) self->slot_len);
        goto fail_self;
    }
    self->nslots = (uint32_t) nslots;
    self->nstaged = (uint32_t) (S_STAGING_BYTES / self->block_len);
    if (self->nstaged < 4)
        self->nstaged = 4;
    if (self->nstaged > self->nslots)
        self->nstaged = self->nslots;
    if ((rc = s_open_file(self, err)) != 0)
        goto fail_file;
    rc = -ENOMEM;
    if (!(self->slots = calloc(self->nslots, sizeof *self->slots))
        || !(self->reads = calloc(self->nslots, sizeof *self->reads))
        || !(self->clears = calloc(self->nslots, sizeof *self->clears))
        || !(self->staged = calloc(self->nstaged, sizeof *self->staged))
        || pk_keymap_reserve(&self->index, self->nslots) != 0) {
        pk_err(err, rc, "out of memory (%u slots)", self->nslots);
        goto fail_mem;
    }
    for (uint32_t j = 0; j < self->nstaged; j++)
        if (!(self->staged[j].bytes = malloc(self->block_len))) {
            pk_err(err, rc, "out of memory (the staging queue)");
            goto fail_mem;
        }
    if (self->found)
        s_recover(self);
    if (s_lists(self) != 0) {
        pk_err(err, rc, "out of memory (%u slots)", self->nslots);
        goto fail_mem;
    }
    self->st.slots = self->nslots;
    if (!(self->wio = pk_disk_io_new(self->fd, S_WRITE_DEPTH))
        || !(self->rio = pk_disk_io_new(self->fd, S_READ_DEPTH))) {
        pk_err(err, rc, "out of memory (the I/O rings)");
        goto fail_io;
    }
    pthread_mutex_init(&self->mutex, NULL);
    pthread_cond_init(&self->write_cond, NULL);
    pthread_cond_init(&self->read_cond, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&self->room_cond, &monotonic);
    pthread_condattr_destroy(&monotonic);
    if ((rc = -pthread_create(&self->writer, NULL, s_writer, self)) != 0) {
        pk_err(err, rc, "cannot start the disk tier's writer: %s", strerror(-rc));
        goto fail_sync;
    }
    self->writer_on = true;
    if ((rc = -pthread_create(&self->reader, NULL, s_reader, self)) != 0) {
        pk_err(err, rc, "cannot start the disk tier's reader: %s", strerror(-rc));
        goto fail_threads;
    }
    self->reader_on = true;
    if ((rc = pk_store_set_tier(store, &s_ops, self)) != 0) {
        pk_err(err, rc, "the store refused the disk tier");
        goto fail_threads;
    }
    if (rc_p)
        *rc_p = 0;
    return self;

fail_threads:
    pthread_mutex_lock(&self->mutex);
    self->stop = true;
    pthread_cond_broadcast(&self->write_cond);
    pthread_cond_broadcast(&self->read_cond);
    pthread_mutex_unlock(&self->mutex);
    if (self->writer_on)
        pthread_join(self->writer, NULL);
    if (self->reader_on)
        pthread_join(self->reader, NULL);
fail_sync:
    pthread_cond_destroy(&self->room_cond);
    pthread_cond_destroy(&self->read_cond);
    pthread_cond_destroy(&self->write_cond);
    pthread_mutex_destroy(&self->mutex);
fail_io:
    pk_disk_io_destroy(&self->rio);
    pk_disk_io_destroy(&self->wio);
fail_mem:
    for (uint32_t j = 0; self->staged && j < self->nstaged; j++)
        free(self->staged[j].bytes);
    free(self->staged);
    free(self->reads);
    free(self->clears);
    free(self->slots);
    pk_keymap_fini(&self->index);
fail_file:
    if (self->fd >= 0)
        close(self->fd);
fail_self:
    sodium_memzero(self->config.key, sizeof self->config.key);
    free(self);
fail:
    if (rc_p)
        *rc_p = rc;
    return NULL;
}

void
pk_disk_tier_destroy(pk_disk_tier_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_disk_tier_t *self = *self_p;
    //  first out from under the store: no op runs after this
    pk_store_set_tier(self->store, NULL, NULL);
    pthread_mutex_lock(&self->mutex);
    self->stop = true;
    pthread_cond_broadcast(&self->write_cond);
    pthread_cond_broadcast(&self->read_cond);
    pthread_mutex_unlock(&self->mutex);
    pthread_join(self->writer, NULL);
    pthread_join(self->reader, NULL);
    pthread_cond_destroy(&self->room_cond);
    pthread_cond_destroy(&self->read_cond);
    pthread_cond_destroy(&self->write_cond);
    pthread_mutex_destroy(&self->mutex);
    pk_disk_io_destroy(&self->rio);
    pk_disk_io_destroy(&self->wio);
    for (uint32_t j = 0; j < self->nstaged; j++)
        free(self->staged[j].bytes);
    free(self->staged);
    free(self->reads);
    free(self->clears);
    free(self->slots);
    pk_keymap_fini(&self->index);
    close(self->fd);
    sodium_memzero(self->config.key, sizeof self->config.key);
    free(self);
    *self_p = NULL;
}

typedef struct {
    pk_disk_tier_t *self;
    double deadline;
    size_t held;
} s_flush_t;

//  Mutex held: waits for the writer's next batch, until deadline.
//  False once it passed.
static bool
s_wait_room(pk_disk_tier_t *self, double deadline)
{
    double now = s_now();
    if (now >= deadline)
        return false;
    struct timespec ts = { (time_t) deadline, (long) ((deadline - (time_t) deadline) * 1e9) };
    pthread_cond_timedwait(&self->room_cond, &self->mutex, &ts);
    return true;
}

//  One READY block of the pool at a clean stop (under the store's lock).
static void
s_flush_one(void *arg, unsigned ns, const pk_key_t *key, const void *bytes, size_t len,
            uint64_t sum)
{
    s_flush_t *f = arg;
    pk_disk_tier_t *self = f->self;
    pthread_mutex_lock(&self->mutex);
    while (!self->off && self->staged_count == self->nstaged && s_wait_room(self, f->deadline))
        ;
    pthread_mutex_unlock(&self->mutex);
    s_evicted(self, ns, key, bytes, len, sum);
    pthread_mutex_lock(&self->mutex);
    f->held += s_find(self, ns, key) != S_NONE;
    pthread_mutex_unlock(&self->mutex);
}

size_t
pk_disk_tier_flush(pk_disk_tier_t *self, double deadline)
{
    s_flush_t f = { self, deadline, 0 };
    pk_store_each_ready(self->store, s_flush_one, &f);
    pthread_mutex_lock(&self->mutex);
    while (self->staged_count && s_wait_room(self, deadline))
        ;
    pthread_mutex_unlock(&self->mutex);
    return f.held;
}

void
pk_disk_tier_stats(pk_disk_tier_t *self, pk_disk_tier_stats_t *out)
{
    pthread_mutex_lock(&self->mutex);
    *out = self->st;
    out->bytes = self->st.blocks * self->block_len;
    out->staged = self->staged_count;
    pthread_mutex_unlock(&self->mutex);
}

const char *
pk_disk_tier_io_kind(const pk_disk_tier_t *self)
{
    return pk_disk_io_kind(self->rio);
}
