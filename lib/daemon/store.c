/*  store.c: the block pool, its key index, pins, LRU eviction and leases.

    Every block sits on exactly one intrusive list, chosen by its state, so
    one pair of links serves them all: the free list (FREE), the lease FIFO
    (WRITING, ordered by deadline because every lease has the same length
    and the clock is monotonic), the LRU list (READY and unpinned) or none
    (READY and pinned: neither evictable nor reusable).  WRITING blocks are
    also on their owner's list, so an owner's departure costs what it held.
    Lookups by key, owner and job are pk_keymap probes; the pool is scanned
    only by new and destroy.

    Namespaces (tenants.h): the index is keyed by (namespace, key).  A
    block's index hash is its key's SipHash mixed with its namespace id
    (the shared namespace, 0, keeps the plain hash, so a store without
    tenants hashes exactly as before), and an entry is that namespace's
    only if the block's ns says so.  A lookup or pin on behalf of
    namespace ns != 0 always makes two probes, (ns, key) then (0, key),
    and only then chooses: a key of another namespace and an absent key
    cost the same two probes, the same counters and no pin.  One mutex guards it all, held for one short
    critical section per call; the bytes of put are copied outside it.
*/
#include "daemon/store.h"
#include "base/checksum.h"
#include "base/err.h"
#include "base/keymap.h"
#include "daemon/tenants.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define S_NONE UINT32_MAX

//  Keys up to a SHA-256 digest live inside the block record; longer ones
//  get a heap buffer kept for the block's reuse, so steady state allocates
//  nothing per block.
#define S_INLINE_KEY 32

typedef enum { S_FREE = 0, S_WRITING, S_READY } s_state_t;

typedef struct {
    uint64_t owner;             //  WRITING: also the owner map's key bytes (see s_owner_link)
    double deadline;            //  WRITING: end of the lease
    uint64_t key_hash;
    uint64_t sum;               //  READY: the checksum of its bytes at commit
    uint8_t *key;               //  inline_key or heap
    uint8_t *heap;
    uint32_t heap_cap;
    uint32_t key_len;
    uint32_t pins;
    uint32_t prev, next;        //  free list, lease FIFO or LRU
    uint32_t oprev, onext;      //  owner list (WRITING)
    uint16_t ns;                //  its namespace (0: shared)
    uint8_t state;
    uint8_t inline_key[S_INLINE_KEY];
} s_block_t;

typedef struct {
    uint32_t head, tail;
    size_t count;
} s_list_t;

//  One namespace's counts: blocks by the block's namespace, lookups by
//  the asker's.
typedef struct {
    size_t ready, pinned;
    uint64_t lookups, hits, pending, misses;
} s_ns_t;

typedef struct {
    uint64_t id;                //  the jobs map's key bytes
    size_t n;
    uint32_t blocks[];          //  what it pinned, each once per pin
} s_job_t;

struct _pk_store_t {
    pthread_mutex_t mutex;
    bool no_checksums;          //  config's: commits take no checksum
    pk_clock_t clock;
    double lease_timeout;
    char *name;
    int fd;                     //  the pool's file (a named pool's holds its lock)
    void *base;
    size_t pool_len;
    uint64_t num_blocks;
    uint64_t block_len;

    s_block_t *blocks;
    s_list_t free, leases, lru;
    pk_keymap_t index;          //  key -> a: block
    pk_keymap_t owners;         //  owner -> a: first block of its list
    pk_keymap_t jobs;           //  job id -> a: s_job_t *
    uint64_t next_job_id;
    size_t ready, pinned, open_lookups;
    uint64_t evictions, lookups, hits, pending, misses, expired, probes;
    s_ns_t *ns;                 //  nns of them
    size_t nns;
    pk_store_watch_fn *watch;   //  the directory's feed, or NULL
    void *watch_arg;
};

//  ---------------------------------------------------------------------------
//  Intrusive lists over the block array

static void
s_list_push(s_block_t *blocks, s_list_t *list, uint32_t b)
{
    blocks[b].prev = list->tail;
    blocks[b].next = S_NONE;
    if (list->tail != S_NONE)
        blocks[list->tail].next = b;
    else
        list->head = b;
    list->tail = b;
    list->count++;
}

static void
s_list_remove(s_block_t *blocks, s_list_t *list, uint32_t b)
{
    s_block_t *blk = &blocks[b];
    if (blk->prev != S_NONE)
        blocks[blk->prev].next = blk->next;
    else
        list->head = blk->next;
    if (blk->next != S_NONE)
        blocks[blk->next].prev = blk->prev;
    else
        list->tail = blk->prev;
    blk->prev = blk->next = S_NONE;
    list->count--;
}

//  ---------------------------------------------------------------------------
//  Keys

static bool
s_key_ok(const pk_key_t *key)
{
    return key && key->bytes && key->len >= 1 && key->len <= PK_MAX_KEY_BYTES;
}

static bool
s_keys_ok(const pk_key_t *keys, size_t n)
{
    if (n && !keys)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!s_key_ok(&keys[i]))
            return false;
    return true;
}

static pk_key_t
s_block_key(const s_block_t *blk)
{
    return (pk_key_t) { blk->key, blk->key_len, blk->key_hash };
}

//  Owner and job ids are keyed by their 8 bytes in place, so the maps hold
//  views into records the store already has and need no allocation.  The
//  ids are the node's own, so the cheap id hash will do.
static pk_key_t
s_id_key(const uint64_t *id)
{
    return (pk_key_t) { (const uint8_t *) id, sizeof *id, pk_hash_id(*id, 0) };
}

//  The index hash of key in namespace ns.  pk_hash_id is keyed and its
//  input is already a keyed SipHash, so a peer can choose no collisions.
static inline uint64_t
s_ns_hash(uint64_t hash, unsigned ns)
{
    return ns == 0 ? hash : pk_hash_id(hash, ns);
}

static int
s_block_set_key(s_block_t *blk, const pk_key_t *key, unsigned ns)
{
    if (key->len <= S_INLINE_KEY)
        blk->key = blk->inline_key;
    else {
        if (blk->heap_cap < key->len) {
            uint8_t *heap = realloc(blk->heap, key->len);
            if (!heap)
                return -ENOMEM;
            blk->heap = heap;
            blk->heap_cap = key->len;
        }
        blk->key = blk->heap;
    }
    memcpy(blk->key, key->bytes, key->len);
    blk->key_len = key->len;
    blk->key_hash = s_ns_hash(key->hash, ns);
    blk->ns = (uint16_t) ns;
    return 0;
}

//  The block of key in namespace ns, or NULL.  The ns comparison only
//  matters in a collision of the mixed hashes; the index never holds two
//  entries pk_key_eq calls equal (s_reserve_one), so one probe decides.
static s_block_t *
s_find(pk_store_t *self, unsigned ns, const pk_key_t *key, uint32_t *b_p)
{
    pk_key_t view = { key->bytes, key->len, s_ns_hash(key->hash, ns) };
    pk_keymap_entry_t *e = pk_keymap_find(&self->index, &view);
    if (!e || self->blocks[e->a].ns != ns)
        return NULL;
    if (b_p)
        *b_p = (uint32_t) e->a;
    return &self->blocks[e->a];
}

//  What namespace ns sees of key: its own block if READY, else the shared
//  one if READY, else either being written (own first), else NULL.  Both
//  probes always run, whatever the first found: the work does not depend
//  on whether another namespace holds the key.
static s_block_t *
s_resolve(pk_store_t *self, unsigned ns, const pk_key_t *key, uint32_t *b_p)
{
    uint32_t own_b = S_NONE, shared_b = S_NONE;
    s_block_t *own = s_find(self, ns, key, &own_b);
    s_block_t *shared = ns ? s_find(self, PK_NS_SHARED, key, &shared_b) : NULL;
    self->probes += ns ? 2 : 1;
    bool own_ready = own && own->state == S_READY;
    bool shared_ready = shared && shared->state == S_READY;
    bool use_own = own_ready || (own && !shared_ready);
    s_block_t *blk = use_own ? own : shared;
    if (b_p)
        *b_p = use_own ? own_b : shared_b;
    return blk;
}

//  ---------------------------------------------------------------------------
//  Owner lists: the map's entry for an owner names the first block of its
//  list and its key bytes are that block's owner field, re-pointed whenever
//  the first block changes.

static int
s_owner_link(pk_store_t *self, uint32_t b)
{
    s_block_t *blk = &self->blocks[b];
    pk_key_t key = s_id_key(&blk->owner);
    pk_keymap_entry_t *e = pk_keymap_find(&self->owners, &key);
    blk->oprev = S_NONE;
    if (!e) {
        blk->onext = S_NONE;
        int rc = pk_keymap_put(&self->owners, &key, b, 0);
        return rc < 0 ? rc : 0;
    }
    blk->onext = (uint32_t) e->a;
    self->blocks[e->a].oprev = b;
    e->a = b;
    e->key.bytes = (const uint8_t *) &blk->owner;
    return 0;
}

static void
s_owner_unlink(pk_store_t *self, uint32_t b)
{
    s_block_t *blk = &self->blocks[b];
    if (blk->oprev != S_NONE)
        self->blocks[blk->oprev].onext = blk->onext;
    else {
        pk_key_t key = s_id_key(&blk->owner);
        if (blk->onext == S_NONE)
            pk_keymap_take(&self->owners, &key, NULL, NULL);
        else {
            pk_keymap_entry_t *e = pk_keymap_find(&self->owners, &key);
            e->a = blk->onext;
            e->key.bytes = (const uint8_t *) &self->blocks[blk->onext].owner;
        }
    }
    if (blk->onext != S_NONE)
        self->blocks[blk->onext].oprev = blk->oprev;
    blk->oprev = blk->onext = S_NONE;
}

//  ---------------------------------------------------------------------------
//  State transitions (mutex held)

static void
s_unindex(pk_store_t *self, s_block_t *blk)
{
    pk_key_t key = s_block_key(blk);
    pk_keymap_take(&self->index, &key, NULL, NULL);
    blk->state = S_FREE;
}

//  WRITING -> FREE
static void
s_free_writing(pk_store_t *self, uint32_t b)
{
    s_block_t *blk = &self->blocks[b];
    s_owner_unlink(self, b);
    s_list_remove(self->blocks, &self->leases, b);
    s_unindex(self, blk);
    s_list_push(self->blocks, &self->free, b);
}

//  A change of the set of READY keys, told to the watch.
static void
s_tell(pk_store_t *self, bool added, const s_block_t *blk)
{
    if (self->watch) {
        pk_key_t key = s_block_key(blk);
        self->watch(self->watch_arg, added, &key);
    }
}

//  READY, unpinned -> FREE
static void
s_free_ready(pk_store_t *self, uint32_t b)
{
    s_tell(self, false, &self->blocks[b]);
    s_list_remove(self->blocks, &self->lru, b);
    s_unindex(self, &self->blocks[b]);
    s_list_push(self->blocks, &self->free, b);
    self->ready--;
    self->ns[self->blocks[b].ns].ready--;
}

static double
s_now(pk_store_t *self)
{
    return self->clock.now(self->clock.self);
}

static size_t
s_expire(pk_store_t *self, double now)
{
    size_t count = 0;
    while (self->leases.head != S_NONE && self->blocks[self->leases.head].deadline <= now) {
        s_free_writing(self, self->leases.head);
        count++;
    }
    self->expired += count;
    return count;
}

static void
s_use(pk_store_t *self, uint32_t b)
{
    if (self->blocks[b].pins == 0) {
        s_list_remove(self->blocks, &self->lru, b);
        s_list_push(self->blocks, &self->lru, b);
    }
}

static void
s_unpin(pk_store_t *self, uint32_t b)
{
    //  Only READY blocks are pinned, and nothing else touches a pinned one.
    //  The release puts it at the LRU's young end: it was just read.
    if (--self->blocks[b].pins == 0) {
        s_list_push(self->blocks, &self->lru, b);
        self->pinned--;
        self->ns[self->blocks[b].ns].pinned--;
    }
}

//  ---------------------------------------------------------------------------
//  Construction

//  Whether fd is still the object that name opens (it was not unlinked,
//  nor replaced, since fd was opened).
static bool
s_shm_is_named(int fd, const char *name)
{
    struct stat mine, named;
    int other = shm_open(name, O_RDONLY, 0);
    if (other < 0)
        return false;
    bool same = fstat(fd, &mine) == 0 && fstat(other, &named) == 0
                && mine.st_dev == named.st_dev && mine.st_ino == named.st_ino;
    close(other);
    return same;
}

//  Opens the shared-memory object name as its one owner, and returns the
//  descriptor, which holds an exclusive flock(2) on it for as long as it
//  is open: the kernel drops the lock when the owner exits, even by
//  SIGKILL, so an object found unlocked was left by a dead owner.  That
//  one is unlinked and created afresh (*reclaimed), never reused: an
//  engine of the dead server may still map it.  An object whose lock is
//  held is a live server's pool: -EEXIST, with err saying so.
//
//  The rule that makes the race between starters safe: an object is
//  unlinked only by a process that holds its lock and has checked that
//  the name still opens it.  Whoever locks second fails its flock and is
//  refused (a creator whose brand-new object a reclaimer locked first
//  included), and whoever locked an object since unlinked sees the name
//  no longer opens it and starts over.  Costs two extra opens and an
//  fstat at start; nothing afterwards.
static int
s_shm_claim(const char *name, char *err, bool *reclaimed, int *rc_p)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        bool created = true;
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 && errno == EEXIST) {
            created = false;
            fd = shm_open(name, O_RDWR, 0);
            if (fd < 0 && errno == ENOENT)
                continue;           //  unlinked meanwhile: create it
        }
        if (fd < 0) {
            int e = errno;
            *rc_p = pk_err(err, -e, "pool %s: %s", name, strerror(e));
            return -1;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(fd);
            if (e == EWOULDBLOCK) {
                *rc_p = -EEXIST;
                pk_err(err, -EEXIST, "pool %s is held by a live server (its owner has it "
                       "locked): stop that server or choose another --pool-name", name);
            }
            else {
                *rc_p = -e;
                pk_err(err, -e, "pool %s: cannot lock it: %s", name, strerror(e));
            }
            return -1;
        }
        if (!s_shm_is_named(fd, name)) {
            close(fd);              //  unlinked or replaced since we opened it
            continue;
        }
        if (created)
            return fd;
        //  Locked by nobody: its owner died without removing it.
        shm_unlink(name);
        close(fd);
        *reclaimed = true;
    }
    *rc_p = -EEXIST;
    pk_err(err, -EEXIST, "pool %s: other servers keep creating and removing it", name);
    return -1;
}

pk_store_t *
pk_store_new(const char *name, uint64_t num_blocks, uint64_t block_len,
             const pk_store_config_t *config, pk_clock_t clock, int *rc_p)
{
    return pk_store_new_logged(name, num_blocks, block_len, config, clock, NULL, NULL, NULL,
                               rc_p);
}

//  Where glibc's shm_open keeps its objects: the filesystem whose room
//  a named pool takes.
#define S_SHM_DIR "/dev/shm"

//  The pool's memory reserved now, every page of it, rather than at each
//  page's first write: a tmpfs (/dev/shm) or memory limit that cannot hold
//  the pool fails here, naming the sizes, instead of killing with SIGBUS
//  whichever process first writes a page there is no room for (the
//  server's pulls, its engine).  MAP_POPULATE does not do it: it gives up
//  silently where there is no room.  What it costs: nothing more; the
//  pages MAP_POPULATE would have faulted in are allocated and zeroed here
//  instead (1 GiB: about 0.6 s, fallocate then populate or populate
//  alone); the engine then maps memory that exists.  0, or a negative
//  errno with err.
static int
s_reserve(int fd, size_t len, const char *name, char *err)
{
    int e;
    do
        e = posix_fallocate(fd, 0, (off_t) len);
    while (e == EINTR);         //  a signal at start: the allocation is idempotent
    if (e == 0)
        return 0;
    struct statvfs vfs;
    //  a failed fallocate of tmpfs gives back what it took, so the room
    //  said is the room there was
    if (e == ENOSPC && name && statvfs(S_SHM_DIR, &vfs) == 0) {
        unsigned long long room = (unsigned long long) vfs.f_bavail * vfs.f_frsize;
        return pk_err(err, -ENOSPC, "pool %s: " S_SHM_DIR " cannot hold it: it needs %zu "
                      "bytes (%.1f MiB), " S_SHM_DIR " has %llu (%.1f MiB) available; make "
                      S_SHM_DIR " larger or the pool smaller", name, len,
                      (double) len / (1 << 20), room, (double) room / (1 << 20));
    }
    return pk_err(err, -e, "pool %s: cannot reserve its %zu bytes: %s",
                  name ? name : "(anonymous)", len, strerror(e));
}

//  The pool's memory: the shared-memory object name, claimed under its
//  lock (one a dead server left is reclaimed, and logged), or anonymous
//  memory when name is NULL.  0, or a negative errno with err; nothing of
//  it is left on failure.  The descriptor stays open for the store's
//  life: its lock says the pool's owner is alive.  The engine opens the
//  object by name, and destroy unlinks it.
static int
s_map_pool(pk_store_t *self, const char *name, pk_store_log_fn *log, void *log_arg, char *err)
{
    if (!name) {
        //  a memfd, not MAP_ANONYMOUS: the same memory, but a file the
        //  mmap transport can hand a same-host consumer (read-only)
        int fd = memfd_create("p2pkv-pool", MFD_CLOEXEC);
        if (fd < 0)
            return -errno;
        int rc = ftruncate(fd, (off_t) self->pool_len) != 0 ? -errno
                 : s_reserve(fd, self->pool_len, NULL, err);
        if (rc == 0 && (self->base = mmap(NULL, self->pool_len, PROT_READ | PROT_WRITE,
                                          MAP_SHARED | MAP_POPULATE, fd, 0)) == MAP_FAILED)
            rc = -errno;
        if (rc) {
            close(fd);
            return rc;
        }
        self->fd = fd;
        return 0;
    }
    bool reclaimed = false;
    int rc;
    int fd = s_shm_claim(name, err, &reclaimed, &rc);
    if (fd < 0)
        return rc;
    if (reclaimed) {
        char line[PK_ERRLEN];
        snprintf(line, sizeof line,
                 "pool %s: reclaimed the shared-memory object a dead server left", name);
        if (log)
            log(log_arg, line);
        else
            fprintf(stderr, "p2pkv-server warn: %s\n", line);
    }
    char why[PK_ERRLEN] = "";
    rc = ftruncate(fd, (off_t) self->pool_len) != 0 ? -errno
         : s_reserve(fd, self->pool_len, name, why);
    if (rc == 0) {
        self->base = mmap(NULL, self->pool_len, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_POPULATE, fd, 0);
        if (self->base != MAP_FAILED) {
            self->fd = fd;
            return 0;
        }
        rc = -errno;
    }
    shm_unlink(name);           //  ours: unlinked while the lock is held
    close(fd);
    if (*why)
        (void) pk_err(err, rc, "%s", why);
    else if (rc != -EEXIST)
        (void) pk_err(err, rc, "pool %s: %s", name, strerror(-rc));
    return rc;
}

pk_store_t *
pk_store_new_logged(const char *name, uint64_t num_blocks, uint64_t block_len,
                    const pk_store_config_t *config, pk_clock_t clock, pk_store_log_fn *log,
                    void *log_arg, char *err, int *rc_p)
{
    pk_store_config_t defaults = PK_STORE_CONFIG_DEFAULT;
    if (!config)
        config = &defaults;
    int rc = -EINVAL;
    pk_store_t *self = NULL;
    if (num_blocks < 1 || num_blocks > PK_MAX_NUM_BLOCKS || block_len < 1
        || block_len > (uint64_t) INT64_MAX / num_blocks
        || num_blocks * block_len > SIZE_MAX
        || !isfinite(config->lease_timeout) || config->lease_timeout <= 0
        || config->namespaces > PK_NS_MAX)
        goto fail;

    rc = -ENOMEM;
    self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    self->fd = -1;
    self->clock = clock.now ? clock : pk_clock_system();
    self->lease_timeout = config->lease_timeout;
    self->no_checksums = config->no_checksums;
    self->num_blocks = num_blocks;
    self->block_len = block_len;
    self->pool_len = (size_t) (num_blocks * block_len);
    self->next_job_id = 1;
    self->index = self->owners = self->jobs = (pk_keymap_t) PK_KEYMAP_INIT;
    self->free = self->leases = self->lru = (s_list_t) { S_NONE, S_NONE, 0 };
    if ((rc = -pthread_mutex_init(&self->mutex, NULL)))
        goto fail_self;

    rc = -ENOMEM;
    self->nns = config->namespaces ? config->namespaces : 1;
    self->ns = calloc(self->nns, sizeof *self->ns);
    self->blocks = self->ns ? calloc((size_t) num_blocks, sizeof *self->blocks) : NULL;
    if (!self->blocks)
        goto fail_mutex;
    for (uint32_t b = 0; b < num_blocks; b++) {
        self->blocks[b].oprev = self->blocks[b].onext = S_NONE;
        s_list_push(self->blocks, &self->free, b);
    }
    //  Sized once for a full pool, so no insert rehashes the whole index
    //  inside the critical section.
    if (pk_keymap_reserve(&self->index, (size_t) num_blocks))
        goto fail_blocks;

    if (name && !(self->name = strdup(name)))
        goto fail_blocks;
    if ((rc = s_map_pool(self, name, log, log_arg, err)) != 0)
        goto fail_name;
    if (rc_p)
        *rc_p = 0;
    return self;

fail_name:
    free(self->name);
fail_blocks:
    pk_keymap_fini(&self->index);
    free(self->blocks);
fail_mutex:
    free(self->ns);
    pthread_mutex_destroy(&self->mutex);
fail_self:
    free(self);
fail:
    return pk_err_null(rc_p, rc);
}

void
pk_store_destroy(pk_store_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_store_t *self = *self_p;
    for (size_t i = 0; self->jobs.slots && i <= self->jobs.mask; i++)
        if (self->jobs.slots[i].key.bytes)
            free((s_job_t *) (uintptr_t) self->jobs.slots[i].a);
    pk_keymap_fini(&self->jobs);
    pk_keymap_fini(&self->owners);
    pk_keymap_fini(&self->index);
    munmap(self->base, self->pool_len);
    //  Unlinked before the lock goes: a starter that locks the object
    //  afterwards finds it is no longer the name's, and creates its own.
    if (self->name)
        shm_unlink(self->name);
    if (self->fd >= 0)
        close(self->fd);
    free(self->name);
    for (uint64_t b = 0; b < self->num_blocks; b++)
        free(self->blocks[b].heap);
    free(self->blocks);
    free(self->ns);
    pthread_mutex_destroy(&self->mutex);
    free(self);
    *self_p = NULL;
}

void *
pk_store_base(const pk_store_t *self)
{
    return self->base;
}

uint64_t
pk_store_num_blocks(const pk_store_t *self)
{
    return self->num_blocks;
}

uint64_t
pk_store_block_len(const pk_store_t *self)
{
    return self->block_len;
}

const char *
pk_store_name(const pk_store_t *self)
{
    return self->name;
}

//  ---------------------------------------------------------------------------
//  Lookup

pk_lookup_result_t
pk_store_lookup(pk_store_t *self, const pk_key_t *key)
{
    return pk_store_lookup_ns(self, PK_NS_SHARED, key);
}

pk_lookup_result_t
pk_store_lookup_ns(pk_store_t *self, unsigned ns, const pk_key_t *key)
{
    pk_lookup_result_t result = PK_LOOKUP_MISS;
    if (ns >= self->nns)
        ns = PK_NS_SHARED;      //  an id the store was not made for sees shared only
    s_ns_t *c = &self->ns[ns];
    pthread_mutex_lock(&self->mutex);
    s_expire(self, s_now(self));
    self->lookups++;
    c->lookups++;
    uint32_t b = S_NONE;
    s_block_t *blk = s_key_ok(key) ? s_resolve(self, ns, key, &b) : NULL;
    if (blk && blk->state == S_READY) {
        s_use(self, b);
        self->hits++;
        c->hits++;
        result = PK_LOOKUP_HIT;
    }
    else if (blk) {
        self->pending++;
        c->pending++;
        result = PK_LOOKUP_HIT_PENDING;
    }
    else {
        self->misses++;
        c->misses++;
    }
    pthread_mutex_unlock(&self->mutex);
    return result;
}

//  ---------------------------------------------------------------------------
//  The engine's write path

//  Takes a block for a new key: a free one, else the LRU's oldest.
static uint32_t
s_take_block(pk_store_t *self)
{
    if (self->free.head == S_NONE) {
        s_free_ready(self, self->lru.head);
        self->evictions++;
    }
    uint32_t b = self->free.head;
    s_list_remove(self->blocks, &self->free, b);
    return b;
}

static int
s_reserve_one(pk_store_t *self, uint64_t owner, unsigned ns, const pk_key_t *key,
              double deadline, uint32_t *b_p)
{
    //  Checked here, not only up front, to catch a key repeated in the batch.
    if (s_find(self, ns, key, NULL))
        return -EEXIST;
    uint32_t b = s_take_block(self);
    s_block_t *blk = &self->blocks[b];
    pk_key_t view;
    pk_keymap_entry_t *e;
    int rc = s_block_set_key(blk, key, ns);
    if (rc)
        goto fail_block;
    view = s_block_key(blk);
    //  Does not fail: the index was sized for every block at construction.
    //  An entry equal to the view belongs to another namespace whose mixed
    //  hash collided with ours (odds 2^-64): refused as present, so that
    //  no two entries are ever equal and one probe always decides.
    if ((rc = pk_keymap_get_or_put(&self->index, &view, b, 0, &e)) <= 0) {
        rc = rc ? rc : -EEXIST;
        goto fail_block;
    }
    blk->owner = owner;
    if ((rc = s_owner_link(self, b)) < 0)
        goto fail_index;
    blk->state = S_WRITING;
    blk->deadline = deadline;
    s_list_push(self->blocks, &self->leases, b);
    *b_p = b;
    return 0;

fail_index:
    pk_keymap_take(&self->index, &view, NULL, NULL);
fail_block:
    s_list_push(self->blocks, &self->free, b);
    return rc;
}

int
pk_store_reserve(pk_store_t *self, uint64_t owner, const pk_key_t *keys, size_t n,
                 uint32_t *blocks)
{
    return pk_store_reserve_ns(self, owner, PK_NS_SHARED, keys, n, blocks);
}

int
pk_store_reserve_ns(pk_store_t *self, uint64_t owner, unsigned ns, const pk_key_t *keys,
                    size_t n, uint32_t *blocks)
{
    if (owner == PK_STORE_OWNER_PUT || ns >= self->nns || !s_keys_ok(keys, n) || (n && !blocks))
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    double now = s_now(self);
    s_expire(self, now);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        if (s_find(self, ns, &keys[i], NULL))
            rc = -EEXIST;
    if (!rc && self->free.count + self->lru.count < n)
        rc = -ENOSPC;
    size_t done = 0;
    while (!rc && done < n) {
        rc = s_reserve_one(self, owner, ns, &keys[done], now + self->lease_timeout,
                           &blocks[done]);
        if (!rc)
            done++;
    }
    //  The failed one undid itself; blocks evicted on the way stay free.
    for (size_t i = 0; rc && i < done; i++)
        s_free_writing(self, blocks[i]);
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

static int
s_commit(pk_store_t *self, uint64_t owner, unsigned ns, const pk_key_t *keys, size_t n,
         const uint64_t *sums, const bool *given)
{
    s_expire(self, s_now(self));
    for (size_t i = 0; i < n; i++) {
        s_block_t *blk = s_find(self, ns, &keys[i], NULL);
        if (!blk || blk->state != S_WRITING || blk->owner != owner)
            return -ENOENT;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        s_block_t *blk = s_find(self, ns, &keys[i], &b);
        if (blk->state != S_WRITING)
            continue;           //  a repeated key
        s_owner_unlink(self, b);
        s_list_remove(self->blocks, &self->leases, b);
        //  The end-to-end checksum (base/checksum.h), taken once the
        //  writer is done and before anyone can pin the block: about 3 us
        //  for 64 KiB, under the mutex (a 1,024-block commit holds it
        //  about 3 ms; the writer's lease is what keeps others off the
        //  bytes, the mutex keeps the lease from ending meanwhile).
        if (self->no_checksums)
            ;
        else if (given && given[i])
            blk->sum = sums[i];     //  the writer's, taken while the bytes were in its cache
        else
            blk->sum = pk_checksum((uint8_t *) self->base + (size_t) b * self->block_len,
                                   self->block_len);
        blk->state = S_READY;
        s_list_push(self->blocks, &self->lru, b);
        self->ready++;
        self->ns[ns].ready++;
        s_tell(self, true, blk);
    }
    return 0;
}

int
pk_store_commit(pk_store_t *self, uint64_t owner, const pk_key_t *keys, size_t n)
{
    return pk_store_commit_ns(self, owner, PK_NS_SHARED, keys, n);
}

int
pk_store_commit_ns(pk_store_t *self, uint64_t owner, unsigned ns, const pk_key_t *keys,
                   size_t n)
{
    if (owner == PK_STORE_OWNER_PUT || ns >= self->nns || !s_keys_ok(keys, n))
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    int rc = s_commit(self, owner, ns, keys, n, NULL, NULL);
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

int
pk_store_commit_sums(pk_store_t *self, uint64_t owner, unsigned ns, const pk_key_t *keys,
                     size_t n, const uint64_t *sums, const bool *given)
{
    if (owner == PK_STORE_OWNER_PUT || ns >= self->nns || !s_keys_ok(keys, n))
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    int rc = s_commit(self, owner, ns, keys, n, sums, given);
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

int
pk_store_put(pk_store_t *self, const pk_key_t *key, const void *data, size_t len)
{
    return pk_store_put_ns(self, PK_NS_SHARED, key, data, len);
}

int
pk_store_put_ns(pk_store_t *self, unsigned ns, const pk_key_t *key, const void *data,
                size_t len)
{
    if (ns >= self->nns || !s_key_ok(key) || !data || len != self->block_len)
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    double now = s_now(self);
    s_expire(self, now);
    uint32_t b = 0;
    int rc = self->free.count + self->lru.count < 1
           ? -ENOSPC
           : s_reserve_one(self, PK_STORE_OWNER_PUT, ns, key, now + self->lease_timeout, &b);
    pthread_mutex_unlock(&self->mutex);
    if (rc)
        return rc;
    //  A WRITING block is nobody else's to touch until its lease ends.
    memcpy((uint8_t *) self->base + (size_t) b * self->block_len, data, len);
    pthread_mutex_lock(&self->mutex);
    rc = s_commit(self, PK_STORE_OWNER_PUT, ns, key, 1, NULL, NULL);
    pthread_mutex_unlock(&self->mutex);
    return rc == -ENOENT ? -ETIMEDOUT : rc;
}

int
pk_store_drop(pk_store_t *self, const pk_key_t *keys, size_t n)
{
    return pk_store_drop_ns(self, PK_NS_SHARED, keys, n);
}

int
pk_store_drop_ns(pk_store_t *self, unsigned ns, const pk_key_t *keys, size_t n)
{
    if (ns >= self->nns || !s_keys_ok(keys, n))
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        s_block_t *blk = s_find(self, ns, &keys[i], NULL);
        if (blk && (blk->state != S_READY || blk->pins))
            rc = -EBUSY;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        uint32_t b;
        if (s_find(self, ns, &keys[i], &b))
            s_free_ready(self, b);
    }
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

void
pk_store_watch(pk_store_t *self, pk_store_watch_fn *fn, void *arg)
{
    pthread_mutex_lock(&self->mutex);
    self->watch = fn;
    self->watch_arg = arg;
    pthread_mutex_unlock(&self->mutex);
}

void
pk_store_snapshot(pk_store_t *self, void (*begin)(void *arg), pk_store_watch_fn *fn, void *arg)
{
    pthread_mutex_lock(&self->mutex);
    if (begin)
        begin(arg);
    for (uint64_t b = 0; b < self->num_blocks; b++)
        if (self->blocks[b].state == S_READY) {
            pk_key_t key = s_block_key(&self->blocks[b]);
            fn(arg, true, &key);
        }
    pthread_mutex_unlock(&self->mutex);
}

//  ---------------------------------------------------------------------------
//  Pins and jobs

//  Files the job and pins what it can; the job record comes allocated
//  (outside the lock) with room for n blocks.
static int
s_pin(pk_store_t *self, unsigned ns, s_job_t *job, const pk_key_t *keys, size_t n,
      uint32_t *blocks, bool *pinned)
{
    s_expire(self, s_now(self));
    pk_key_t id = s_id_key(&job->id);
    int rc = pk_keymap_put(&self->jobs, &id, (uintptr_t) job, 0);
    if (rc < 0)
        return rc;
    job->n = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        s_block_t *blk = s_resolve(self, ns, &keys[i], &b);
        pinned[i] = blk && blk->state == S_READY;
        blocks[i] = pinned[i] ? b : PK_STORE_NO_BLOCK;
        if (!pinned[i])
            continue;
        if (blk->pins++ == 0) {
            s_list_remove(self->blocks, &self->lru, b);
            self->pinned++;
            self->ns[blk->ns].pinned++;
        }
        job->blocks[job->n++] = b;
    }
    return 0;
}

static s_job_t *
s_job_new(const pk_key_t *keys, size_t n, uint32_t *blocks, bool *pinned, int *rc_p)
{
    *rc_p = -EINVAL;
    if (!s_keys_ok(keys, n) || (n && (!blocks || !pinned)))
        return NULL;
    *rc_p = -ENOMEM;
    if (n > (SIZE_MAX - sizeof(s_job_t)) / sizeof(uint32_t))
        return NULL;
    s_job_t *job = malloc(sizeof *job + n * sizeof(uint32_t));
    if (job)
        *rc_p = 0;
    return job;
}

int
pk_store_pin(pk_store_t *self, const pk_key_t *keys, size_t n, uint64_t *job_id,
             uint32_t *blocks, bool *pinned)
{
    return pk_store_pin_ns(self, PK_NS_SHARED, keys, n, job_id, blocks, pinned);
}

int
pk_store_pin_ns(pk_store_t *self, unsigned ns, const pk_key_t *keys, size_t n,
                uint64_t *job_id, uint32_t *blocks, bool *pinned)
{
    if (!job_id || ns >= self->nns)
        return -EINVAL;
    int rc;
    s_job_t *job = s_job_new(keys, n, blocks, pinned, &rc);
    if (!job)
        return rc;
    pthread_mutex_lock(&self->mutex);
    job->id = self->next_job_id++;
    rc = s_pin(self, ns, job, keys, n, blocks, pinned);
    pthread_mutex_unlock(&self->mutex);
    if (rc)
        free(job);
    else
        *job_id = job->id;
    return rc;
}

int
pk_store_pin_job(pk_store_t *self, uint64_t job_id, const pk_key_t *keys, size_t n,
                 uint32_t *blocks, bool *pinned)
{
    return pk_store_pin_job_ns(self, PK_NS_SHARED, job_id, keys, n, blocks, pinned);
}

int
pk_store_pin_job_ns(pk_store_t *self, unsigned ns, uint64_t job_id, const pk_key_t *keys,
                    size_t n, uint32_t *blocks, bool *pinned)
{
    if (ns >= self->nns)
        return -EINVAL;
    int rc;
    s_job_t *job = s_job_new(keys, n, blocks, pinned, &rc);
    if (!job)
        return rc;
    job->id = job_id;
    pk_key_t id = s_id_key(&job->id);
    pthread_mutex_lock(&self->mutex);
    if (job_id < 1 || job_id >= self->next_job_id)
        rc = -EINVAL;
    else if (pk_keymap_find(&self->jobs, &id))
        rc = -EEXIST;
    else
        rc = s_pin(self, ns, job, keys, n, blocks, pinned);
    pthread_mutex_unlock(&self->mutex);
    if (rc)
        free(job);
    return rc;
}

uint64_t
pk_store_new_job_id(pk_store_t *self)
{
    pthread_mutex_lock(&self->mutex);
    uint64_t id = self->next_job_id++;
    pthread_mutex_unlock(&self->mutex);
    return id;
}

int
pk_store_release_job(pk_store_t *self, uint64_t job_id)
{
    pk_key_t id = s_id_key(&job_id);
    uint64_t value = 0;
    pthread_mutex_lock(&self->mutex);
    s_job_t *job = NULL;
    if (pk_keymap_take(&self->jobs, &id, &value, NULL)) {
        job = (s_job_t *) (uintptr_t) value;
        for (size_t i = 0; i < job->n; i++)
            s_unpin(self, job->blocks[i]);
    }
    pthread_mutex_unlock(&self->mutex);
    if (!job)
        return -ENOENT;
    free(job);
    return 0;
}

//  ---------------------------------------------------------------------------
//  Leases

size_t
pk_store_expire_leases(pk_store_t *self)
{
    pthread_mutex_lock(&self->mutex);
    size_t count = s_expire(self, s_now(self));
    pthread_mutex_unlock(&self->mutex);
    return count;
}

size_t
pk_store_release_owner(pk_store_t *self, uint64_t owner)
{
    if (owner == PK_STORE_OWNER_PUT)
        return 0;
    pk_key_t key = s_id_key(&owner);
    size_t count = 0;
    pthread_mutex_lock(&self->mutex);
    pk_keymap_entry_t *e;
    while ((e = pk_keymap_find(&self->owners, &key))) {
        s_free_writing(self, (uint32_t) e->a);
        count++;
    }
    pthread_mutex_unlock(&self->mutex);
    return count;
}

//  ---------------------------------------------------------------------------
//  Statistics and the parent seam

void
pk_store_stats(pk_store_t *self, pk_store_stats_t *out)
{
    pthread_mutex_lock(&self->mutex);
    *out = (pk_store_stats_t) {
        .free = self->free.count,
        .writing = self->leases.count,
        .ready = self->ready,
        .pinned = self->pinned,
        .jobs = pk_keymap_size(&self->jobs),
        .open_lookups = self->open_lookups,
        .evictions = self->evictions,
        .lookups = self->lookups,
        .hits = self->hits,
        .pending = self->pending,
        .misses = self->misses,
        .expired = self->expired,
        .probes = self->probes,
    };
    pthread_mutex_unlock(&self->mutex);
}

int
pk_store_stats_ns(pk_store_t *self, unsigned ns, pk_store_ns_stats_t *out)
{
    if (ns >= self->nns || !out)
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    const s_ns_t *c = &self->ns[ns];
    *out = (pk_store_ns_stats_t) { c->ready, c->pinned, c->lookups, c->hits, c->pending,
                                   c->misses };
    pthread_mutex_unlock(&self->mutex);
    return 0;
}

size_t
pk_store_namespaces(const pk_store_t *self)
{
    return self->nns;
}

static pk_lookup_result_t
s_parent_lookup(void *self, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    return pk_store_lookup(self, key);
}

static int
s_parent_create_store_job(void *self, const pk_lookup_ctx_t *ctx, const pk_key_t *keys,
                          size_t n, uint64_t *job_id, uint32_t *blocks, bool *pinned)
{
    return pk_store_pin(self, keys, n, job_id, blocks, pinned);
}

static void
s_parent_on_new_request(void *self_, const pk_lookup_ctx_t *ctx)
{
    pk_store_t *self = self_;
    pthread_mutex_lock(&self->mutex);
    self->open_lookups++;
    pthread_mutex_unlock(&self->mutex);
}

static void
s_parent_on_request_finished(void *self_, const pk_lookup_ctx_t *ctx)
{
    pk_store_t *self = self_;
    pthread_mutex_lock(&self->mutex);
    if (self->open_lookups)
        self->open_lookups--;
    pthread_mutex_unlock(&self->mutex);
}

static void
s_parent_store_result(void *self, uint64_t job_id, bool success)
{
    //  Success or not, the transfer no longer reads the blocks.
    pk_store_release_job(self, job_id);
}

int
pk_store_block_sums(pk_store_t *self, const uint32_t *blocks, size_t n, uint64_t *sums)
{
    if (self->no_checksums)
        return -ENOTSUP;
    pthread_mutex_lock(&self->mutex);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        //  only a pinned READY block's checksum is its bytes'
        if (blocks[i] >= self->num_blocks || self->blocks[blocks[i]].state != S_READY
            || !self->blocks[blocks[i]].pins)
            rc = -EINVAL;
        else
            sums[i] = self->blocks[blocks[i]].sum;
    }
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

static int
s_parent_block_sums(void *self, const uint32_t *blocks, size_t n, uint64_t *sums)
{
    return pk_store_block_sums(self, blocks, n, sums);
}

pk_parent_t
pk_store_parent(pk_store_t *self)
{
    return (pk_parent_t) {
        .self = self,
        .lookup = s_parent_lookup,
        .create_store_job = s_parent_create_store_job,
        .on_new_request = s_parent_on_new_request,
        .on_request_finished = s_parent_on_request_finished,
        .store_result = s_parent_store_result,
        .block_sums = s_parent_block_sums,
    };
}
