/*  rails.c: a fabric of several rails and its channels, over the seam of
    base/transport.h (rails.h says what and why).  */
#include "base/clock.h"
#include "base/err.h"
#include "base/keymap.h"
#include "base/slices.h"
#include "rails/rails.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define S_MAGIC "PKRL"
#define S_VERSION 1
#define S_TAG_MASK 0xfffffu         //  an immediate's round tag (transport.h)

typedef struct {
    pk_fabric_t head;               //  first: a pk_fabric_t of the seam
    const pk_transport_ops_t *inner;
    size_t n;
    pk_fabric_t *rail[PK_RAILS_MAX];
    pk_rails_addr_t addr[PK_RAILS_MAX];
    atomic_uint_fast64_t channels_opened, channels_open, blobs_refused;
    double rail_stall;
    uint64_t block_len, num_blocks;
} s_fabric_t;

/*  A write over several rails is cut into chunks of about 1 MiB (the
    sub-channel's own largest op, so the cut costs no extra op), each a
    transfer of one rail's sub-channel: what a rail confirmed is then
    known chunk by chunk, and a rail taken out has only its unconfirmed
    chunks sent again.  */
enum { S_RUNNING, S_DONE, S_LOST, S_ENDED };

struct s_xfer;

typedef struct {
    uint64_t tid;                   //  the sub-channel's transfer
    uint64_t key;                   //  the chunk map's key bytes (s_chunk_key)
    struct s_xfer *x;               //  the write it is a chunk of
    uint32_t off, cnt;              //  units [off, off + cnt) of the write: its
                                    //  blocks, or its slices where it slices
    uint64_t landed;                //  of a chunk that failed: what landed
    uint8_t pair, state;
} s_chunk_t;

/*  A write's chunks sit in slabs of 4, 8, 16, ... records, never moved:
    the chunk map holds a pointer to each record and a view of its key
    (keymap.h keeps views), where a realloc'd array would move both.  A
    resend appends a chunk, so their number has no bound at the write's
    start; 28 slabs hold a billion.  */
#define S_SLAB0 4
#define S_SLABS 28

typedef struct s_xfer {
    uint64_t tid, round;
    uint32_t *local, *remote;       //  the write's blocks, kept for resends
    s_chunk_t *slab[S_SLABS];
    size_t nchunks;
    uint32_t n, posted;             //  its units; [0, posted) given to rails
    uint32_t per;                   //  units a block: the channel's per_block,
                                    //  or 1 where a block cannot be named in a
                                    //  slice's immediate (PK_SLICE_BLOCKS)
    uint64_t unit;                  //  a unit's bytes (a slice's, or a block's)
    uint64_t *smask;                //  sliced: per block, its slices confirmed
    bool pending;                   //  on the channel's pending list
    struct s_xfer *pprev, *pnext;   //  there
    size_t open;                    //  chunks running or lost
    uint64_t landed;
    bool failed, cancelled, polled_any;
    struct s_xfer *prev, *next;
} s_xfer_t;

//  The blocks of a round confirmed per peer rail, until its answer.
typedef struct s_round {
    uint64_t round;
    uint64_t counts[PK_RAILS_MAX];
    uint64_t slices[PK_RAILS_MAX];  //  slices confirmed (rails_slices)
    uint32_t failed;                //  peer rails taken out with writes of it
    struct s_round *next;
} s_round_t;

//  A writer's pair: a local rail and the peer rail it writes to
typedef struct {
    size_t local;
    int peer;
    char peer_addr[64];
    pk_transport_t t;
    uint64_t failures;
    bool failed;                //  taken out: nothing more goes over it
    bool fail_now;              //  a chunk failed on it: take it out
    size_t running;             //  chunks out on it
    double busy_since;          //  when running last left 0
    //  its rate (s_split, s_measure): bytes confirmed over the time it
    //  had chunks out, an EWMA; 0 until its first sample
    uint64_t queued;            //  bytes of its chunks out
    double rate;                //  bytes per second
    double mark;                //  busy time counted up to here
    double busy_acc;            //  busy seconds since the last sample
    uint64_t bytes_acc;         //  bytes confirmed since the last sample
    double last_post;           //  when it was last given a chunk
    bool pinned;                //  rate set by pk_rails_test_rate
    double last_done;           //  its last chunk's completion
    uint64_t outs;              //  times taken out
    uint64_t rejoins;           //  times paired again
    double retry_at;            //  taken out: paired again from then on
    uint8_t *offer;             //  taken out: the consumer's fresh blob
    size_t offer_len;
    uint64_t slices, slice_bytes;   //  slices posted on it, and their bytes
} s_pair_t;

typedef struct s_channel {
    pk_channel_t head;              //  first: a pk_channel_t of the seam
    s_fabric_t *fab;
    bool expose, single;
    double rail_stall;              //  seconds (pk_fabric_config_t.rail_stall)
    uint32_t chunk_blocks;          //  blocks per chunk (about 1 MiB)
    bool failed[PK_RAILS_MAX];      //  consumer: rail revoked (rails_failed)
    bool marks;                     //  writer: the peer reads block marks
    //  consumer: a rail's sub-channel before its last fresh registration
    //  (channel_rail_offer), revoked, kept for the counts of rounds that
    //  were open when it was replaced, until the rail's next offer
    pk_channel_t *retired[PK_RAILS_MAX];
    uint64_t offers[PK_RAILS_MAX];  //  consumer: fresh registrations made
    //  the counters of a rail's sub-channels closed since (a rejoin
    //  replaces one): its stats go on from them, never back to 0
    pk_channel_stats_t gone[PK_RAILS_MAX];
    bool hold[PK_RAILS_MAX];        //  test hook: rail's completions unread
    size_t n;                       //  sub-channels (one per local rail)
    pk_channel_t *sub[PK_RAILS_MAX];
    int epfd;                       //  the subs' wait fds, or -1
    //  writer: the pairs made at connect, in the peer's rail order
    size_t npairs, peer_rails;
    bool rails_peer;                //  the peer sent a rails blob
    s_pair_t pair[PK_RAILS_MAX];
    size_t cursor;                  //  where s_split's ties start
    uint64_t next_tid;
    s_xfer_t *xfers;                //  open, newest first
    //  writes with blocks not yet given to a rail, oldest first (s_fill)
    s_xfer_t *pending, *pending_tail;
    size_t nopen;
    //  ended, to report at the next poll: room for every open write is
    //  made when it is accepted, so that one ends without an allocation
    s_xfer_t **finished;
    size_t nfinished, capfinished;
    pk_keymap_t chunks;             //  (rail, sub transfer) -> its running chunk
    s_round_t *rounds;
    //  slicing (capability slices; base/slices.h): a write's unit is a
    //  slice where per_block > 1 (writer: channel_slices), else a block
    pk_slices_t layout;
    uint32_t per_block;
    uint64_t unit_len;
    //  target: each slice immediate, per rail (s_on_slice), counted into
    //  its round tag's entry; a block's slices are masked per pool block,
    //  valid while the slot's gen is its round entry's
    struct s_sink {
        struct s_channel *self;
        size_t rail;
    } sink[PK_RAILS_MAX];
    struct s_sliced *sliced;
    uint64_t *slot_mask, *slot_gen, gen;
} s_channel_t;

/*  A round tag's slices at the target.  Like the sub-channels' counters
    (ofi.h): claimed by the first full round that asks, started over when
    another round asks, dropped by forget.  */
typedef struct s_sliced {
    uint32_t tag;
    bool owned;
    uint64_t round, gen;
    uint64_t full;                  //  blocks whose every slice landed
    uint64_t slices[PK_RAILS_MAX];  //  slice immediates read per rail
    struct s_sliced *next;
} s_sliced_t;

static void s_sub_close(s_channel_t *self, size_t i, pk_channel_t **c);
static pk_slice_fn s_on_slice;

//  --------------------------------------------------------------------------
//  The fabric

static void s_fabric_close(pk_fabric_t **fabric_p);

static pk_fabric_t *
s_fabric_open(const pk_fabric_config_t *config, void *base, uint64_t num_blocks,
              uint64_t block_len, int *rc_p, char *err)
{
    s_fabric_t *self = calloc(1, sizeof *self);
    if (!self) {
        *rc_p = pk_err(err, -ENOMEM, "out of memory");
        return NULL;
    }
    self->head.ops = &pk_rails_transport_ops;
    int rc = pk_rails_addrs(config && config->node ? config->node : "", self->addr,
                            PK_RAILS_MAX, &self->n, err);
    if (rc)
        goto fail;
    self->inner = pk_transport_for(config->provider);
    //  a quarter of the session's stall: a rail is taken out well before
    //  the sub-channel's own stall closes it (and with it the session)
    self->rail_stall = config->rail_stall > 0 ? config->rail_stall
                                              : config->stall_timeout / 4;
    self->block_len = block_len;
    self->num_blocks = num_blocks;
    for (size_t i = 0; i < self->n; i++) {
        pk_fabric_config_t fc = *config;
        fc.node = self->addr[i].text;
        fc.delivered = true;
        char why[PK_ERRLEN];
        self->rail[i] = pk_fabric_open(self->inner, &fc, base, num_blocks, block_len, &rc, why);
        if (!self->rail[i]) {
            (void) pk_err(err, rc, "rail %s: %.160s", self->addr[i].text, why);
            goto fail;
        }
        if (i && strcmp(pk_fabric_provider(self->rail[i]),
                        pk_fabric_provider(self->rail[0])) != 0) {
            rc = pk_err(err, -EINVAL, "rail %s: provider %s, rail %s: %s", self->addr[i].text,
                        pk_fabric_provider(self->rail[i]), self->addr[0].text,
                        pk_fabric_provider(self->rail[0]));
            goto fail;
        }
    }
    *rc_p = 0;
    return &self->head;

fail:
    *rc_p = rc < 0 ? rc : -EIO;
    pk_fabric_t *f = &self->head;
    s_fabric_close(&f);
    return NULL;
}

static void
s_fabric_close(pk_fabric_t **fabric_p)
{
    s_fabric_t *self = (s_fabric_t *) *fabric_p;
    if (!self)
        return;
    for (size_t i = 0; i < PK_RAILS_MAX; i++)
        pk_fabric_close(&self->rail[i]);
    free(self);
    *fabric_p = NULL;
}

static void
s_fabric_describe(const pk_fabric_t *fabric, char *buf, size_t len)
{
    const s_fabric_t *self = (const s_fabric_t *) fabric;
    size_t used = (size_t) snprintf(buf, len, "%zu rails:", self->n);
    bool lo = false;
    for (size_t i = 0; i < self->n && used < len; i++) {
        used += (size_t) snprintf(buf + used, len - used, " %s (%s)", self->addr[i].text,
                                  self->addr[i].ifname);
        lo |= i > 0 && self->addr[i].loopback;
    }
    if (lo && used < len)
        used += (size_t) snprintf(buf + used, len - used,
                                  " [several on loopback: a test setup, not more bandwidth]");
    if (used + 3 < len) {
        snprintf(buf + used, len - used, "; ");
        pk_fabric_describe(self->rail[0], buf + used + 2, len - used - 2);
    }
}

static const char *
s_fabric_provider(const pk_fabric_t *fabric)
{
    return pk_fabric_provider(((const s_fabric_t *) fabric)->rail[0]);
}

static bool
s_fabric_has_cq_data(const pk_fabric_t *fabric)
{
    return pk_fabric_has_cq_data(((const s_fabric_t *) fabric)->rail[0]);
}

static size_t
s_fabric_rails(const pk_fabric_t *fabric)
{
    return ((const s_fabric_t *) fabric)->n;
}

//  --------------------------------------------------------------------------
//  Blobs

typedef struct {
    size_t n;
    char addr[PK_RAILS_MAX][64];
    const uint8_t *blob[PK_RAILS_MAX];
    size_t len[PK_RAILS_MAX];
} s_blob_t;

static bool
s_is_rails_blob(const uint8_t *blob, size_t len)
{
    return blob && len >= 4 && memcmp(blob, S_MAGIC, 4) == 0;
}

//  A rails blob parsed (views into blob), or a plain one taken as one
//  rail of unknown address.
static int
s_parse(const uint8_t *blob, size_t len, s_blob_t *b, char *err)
{
    *b = (s_blob_t) { 0 };
    if (!s_is_rails_blob(blob, len)) {
        b->n = 1;
        b->blob[0] = blob;
        b->len[0] = len;
        return 0;
    }
    const uint8_t *at = blob + 4, *end = blob + len;
    if (end - at < 2 || at[0] != S_VERSION)
        return pk_err(err, -EPROTO, "agent_metadata: rails blob version %u, this side reads %u",
                      end - at < 1 ? 0u : at[0], S_VERSION);
    size_t n = at[1];
    at += 2;
    if (n == 0 || n > PK_RAILS_MAX)
        return pk_err(err, -EPROTO, "agent_metadata: %zu rails (1 to %d)", n, PK_RAILS_MAX);
    for (size_t i = 0; i < n; i++) {
        if (end - at < 1 || at[0] >= sizeof b->addr[i] || end - at < 1 + at[0] + 2)
            return pk_err(err, -EPROTO, "agent_metadata: rail %zu cut short", i);
        //  the peer's text reaches our log, stats and JSON: an address's
        //  characters only (digits, hex, '.', ':', '%' of a scope)
        for (size_t c = 0; c < at[0]; c++)
            if (!strchr("0123456789abcdefABCDEF.:%", at[1 + c]) || !at[1 + c])
                return pk_err(err, -EPROTO, "agent_metadata: rail %zu's address has a byte "
                              "0x%02x, not an IP address's", i, at[1 + c]);
        memcpy(b->addr[i], at + 1, at[0]);
        at += 1 + at[0];
        uint16_t l;
        memcpy(&l, at, 2);
        at += 2;
        if (end - at < l || l == 0)
            return pk_err(err, -EPROTO, "agent_metadata: rail %zu cut short", i);
        b->blob[i] = at;
        b->len[i] = l;
        at += l;
    }
    if (at != end)
        return pk_err(err, -EPROTO, "agent_metadata: %zu bytes after the rails", (size_t) (end - at));
    b->n = n;
    return 0;
}

static int
s_check_blob(pk_fabric_t *fabric, const uint8_t *blob, size_t len, char *err)
{
    s_fabric_t *self = (s_fabric_t *) fabric;
    s_blob_t b;
    int rc = s_parse(blob, len, &b, err);
    for (size_t i = 0; !rc && i < b.n; i++) {
        char why[PK_ERRLEN];
        if ((rc = pk_fabric_check_blob(self->rail[0], b.blob[i], b.len[i], why)) != 0)
            (void) pk_err(err, rc, "rail %zu (%s): %.160s", i, b.addr[i], why);
    }
    if (rc)
        atomic_fetch_add(&self->blobs_refused, 1);
    return rc;
}

static int
s_blob_provider(const uint8_t *blob, size_t len, char *out, size_t cap, char *err)
{
    s_blob_t b;
    if (!s_is_rails_blob(blob, len))
        return pk_err(err, -EPROTO, "agent_metadata: not a p2pkv rails address");
    int rc = s_parse(blob, len, &b, err);
    return rc ? rc : pk_transport_blob_provider(b.blob[0], b.len[0], out, cap, err);
}

static void
s_fabric_stats(const pk_fabric_t *fabric, pk_fabric_stats_t *stats)
{
    const s_fabric_t *self = (const s_fabric_t *) fabric;
    *stats = (pk_fabric_stats_t) { atomic_load(&self->channels_opened),
                                   atomic_load(&self->channels_open),
                                   atomic_load(&self->blobs_refused) };
}

//  --------------------------------------------------------------------------
//  Channels

static void s_channel_close(pk_channel_t **channel_p);

static pk_channel_t *
s_channel_new(pk_fabric_t *fabric, bool expose, int *rc_p, char *err)
{
    s_fabric_t *fab = (s_fabric_t *) fabric;
    s_channel_t *self = calloc(1, sizeof *self);
    if (!self) {
        *rc_p = pk_err(err, -ENOMEM, "out of memory");
        return NULL;
    }
    self->head.ops = &pk_rails_transport_ops;
    self->fab = fab;
    self->expose = expose;
    self->epfd = -1;
    self->next_tid = 1;
    self->rail_stall = fab->rail_stall;
    uint64_t cb = fab->block_len ? (UINT64_C(1) << 20) / fab->block_len : 1;
    self->chunk_blocks = (uint32_t) (cb < 1 ? 1 : cb > 4095 ? 4095 : cb);
    self->layout = pk_slices_of(fab->block_len);
    self->per_block = 1;
    self->unit_len = fab->block_len ? fab->block_len : 1;
    int rc = 0;
    //  a target of blocks that slice reads slices on every rail: a mask
    //  and its round's generation per pool block (16 bytes a block of
    //  2 MiB or more), so a slice that lands twice finds its bit set
    bool sliced = expose && self->layout.n > 1;
    if (sliced && (!(self->slot_mask = calloc(fab->num_blocks, sizeof *self->slot_mask))
                   || !(self->slot_gen = calloc(fab->num_blocks, sizeof *self->slot_gen)))) {
        rc = pk_err(err, -ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < fab->n; i++, self->n++) {
        char why[PK_ERRLEN];
        self->sub[i] = pk_channel_new(fab->rail[i], expose, &rc, why);
        if (!self->sub[i]) {
            (void) pk_err(err, rc, "rail %s: %.160s", fab->addr[i].text, why);
            goto fail;
        }
        self->sink[i] = (struct s_sink) { self, i };
        //  -ENOTSUP (an immediate of 32 bits): the writer never slices
        if (sliced)
            (void) pk_channel_slice_sink(self->sub[i], s_on_slice, &self->sink[i]);
    }
    //  one fd for the owner to sleep on: an epoll set of the rails' fds,
    //  readable when any is (a writer's too: its queue's fd, once its
    //  writes went quiet, ofi.h; the owner's 10 ms tick still bounds the
    //  sleep, and with it how late a rail's stall is seen)
    bool fds = true;
    for (size_t i = 0; i < self->n; i++)
        fds &= pk_channel_wait_fd(self->sub[i]) >= 0;
    if (fds) {
        if ((self->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
            rc = pk_err(err, -errno, "epoll_create1: %s", strerror(errno));
            goto fail;
        }
        for (size_t i = 0; i < self->n; i++) {
            struct epoll_event ev = { .events = EPOLLIN, .data.u64 = i };
            if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, pk_channel_wait_fd(self->sub[i]), &ev)) {
                rc = pk_err(err, -errno, "epoll_ctl: %s", strerror(errno));
                goto fail;
            }
        }
    }
    atomic_fetch_add(&fab->channels_opened, 1);
    atomic_fetch_add(&fab->channels_open, 1);
    *rc_p = 0;
    return &self->head;

fail:
    *rc_p = rc < 0 ? rc : -EIO;
    atomic_fetch_add(&fab->channels_open, 1);       //  the close takes it back
    pk_channel_t *c = &self->head;
    s_channel_close(&c);
    return NULL;
}

static void s_xfer_free(struct s_xfer *x);

static void
s_xfer_unlink(s_channel_t *self, s_xfer_t *x)
{
    self->nopen--;
    if (x->prev)
        x->prev->next = x->next;
    else
        self->xfers = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
}

static void
s_channel_close(pk_channel_t **channel_p)
{
    s_channel_t *self = (s_channel_t *) *channel_p;
    if (!self)
        return;
    //  registrations first, on every rail: nothing lands afterwards
    for (size_t i = 0; i < self->n; i++)
        if (self->sub[i] && self->expose)
            pk_channel_revoke(self->sub[i]);
    for (size_t i = 0; i < self->n; i++) {
        pk_channel_close(&self->sub[i]);
        pk_channel_close(&self->retired[i]);
    }
    for (size_t p = 0; p < self->npairs; p++)
        free(self->pair[p].offer);
    if (self->epfd >= 0)
        close(self->epfd);
    while (self->xfers) {
        s_xfer_t *x = self->xfers;
        s_xfer_unlink(self, x);
        s_xfer_free(x);
    }
    for (size_t i = 0; i < self->nfinished; i++)
        s_xfer_free(self->finished[i]);
    free(self->finished);
    pk_keymap_fini(&self->chunks);
    while (self->rounds) {
        s_round_t *r = self->rounds;
        self->rounds = r->next;
        free(r);
    }
    while (self->sliced) {
        s_sliced_t *e = self->sliced;
        self->sliced = e->next;
        free(e);
    }
    free(self->slot_mask);
    free(self->slot_gen);
    atomic_fetch_sub(&self->fab->channels_open, 1);
    free(self);
    *channel_p = NULL;
}

static void
s_channel_single(pk_channel_t *channel)
{
    s_channel_t *self = (s_channel_t *) channel;
    if (self->single)
        return;
    self->single = true;
    for (size_t i = 1; i < self->n; i++) {
        if (self->expose)
            pk_channel_revoke(self->sub[i]);
        if (self->epfd >= 0)
            (void) epoll_ctl(self->epfd, EPOLL_CTL_DEL, pk_channel_wait_fd(self->sub[i]), NULL);
        pk_channel_close(&self->sub[i]);
    }
    self->n = 1;
}

static int
s_channel_blob(pk_channel_t *channel, uint8_t **blob_p, size_t *len_p)
{
    s_channel_t *self = (s_channel_t *) channel;
    if (self->single)
        return pk_channel_blob(self->sub[0], blob_p, len_p);
    uint8_t *part[PK_RAILS_MAX] = { 0 };
    size_t plen[PK_RAILS_MAX], len = 6;
    int rc = 0;
    for (size_t i = 0; i < self->n && !rc; i++) {
        rc = pk_channel_blob(self->sub[i], &part[i], &plen[i]);
        if (!rc && plen[i] > UINT16_MAX)
            rc = -E2BIG;
        len += rc ? 0 : 1 + strlen(self->fab->addr[i].text) + 2 + plen[i];
    }
    uint8_t *blob = rc ? NULL : malloc(len), *at = blob;
    if (!rc && !blob)
        rc = -ENOMEM;
    if (!rc) {
        memcpy(at, S_MAGIC, 4);
        at[4] = S_VERSION;
        at[5] = (uint8_t) self->n;
        at += 6;
        for (size_t i = 0; i < self->n; i++) {
            const char *a = self->fab->addr[i].text;
            uint16_t l = (uint16_t) plen[i];
            *at++ = (uint8_t) strlen(a);
            memcpy(at, a, strlen(a)), at += strlen(a);
            memcpy(at, &l, 2), at += 2;
            memcpy(at, part[i], plen[i]), at += plen[i];
        }
        *blob_p = blob;
        *len_p = len;
    }
    for (size_t i = 0; i < self->n; i++)
        free(part[i]);
    return rc;
}

//  The writer's pairing (rails.h): for each of the peer's rails, a local
//  rail of its subnet first, else any left that connects.
static int
s_channel_connect(pk_channel_t *channel, const uint8_t *blob, size_t len, char *err)
{
    s_channel_t *self = (s_channel_t *) channel;
    if (self->npairs)
        return pk_err(err, -EISCONN, "rails: connected already");
    s_blob_t b;
    int rc = s_parse(blob, len, &b, err);
    if (rc) {
        atomic_fetch_add(&self->fab->blobs_refused, 1);
        return rc;
    }
    bool used[PK_RAILS_MAX] = { false };
    char first[PK_ERRLEN] = "";
    for (size_t j = 0; j < b.n; j++) {
        bool done = false;
        for (int pass = 0; pass < 2 && !done; pass++)
            for (size_t i = 0; i < self->n && !done; i++) {
                if (used[i] || (pass == 0 && !pk_rails_same_subnet(&self->fab->addr[i],
                                                                   b.addr[j])))
                    continue;
                char why[PK_ERRLEN];
                int r = pk_channel_connect(self->sub[i], b.blob[j], b.len[j], why);
                if (r) {
                    if (!*first)
                        snprintf(first, sizeof first, "rail %s to %s: %.160s",
                                 self->fab->addr[i].text, b.addr[j], why);
                    if (r == -EPROTO)
                        break;      //  the blob itself: no other rail takes it
                    continue;
                }
                used[i] = done = true;
                size_t p = self->npairs++;
                self->pair[p].local = i;
                self->pair[p].peer = (int) j;
                snprintf(self->pair[p].peer_addr, sizeof self->pair[p].peer_addr, "%s",
                         b.addr[j]);
                self->pair[p].t = pk_channel_transport(self->sub[i]);
            }
    }
    if (!self->npairs) {
        atomic_fetch_add(&self->fab->blobs_refused, 1);
        return pk_err(err, -EPROTO, "%s", *first ? first : "rails: no rail pairs");
    }
    self->peer_rails = b.n;
    self->rails_peer = s_is_rails_blob(blob, len);
    return 0;
}

static int
s_channel_progress(pk_channel_t *channel)
{
    s_channel_t *self = (s_channel_t *) channel;
    int n = 0;
    for (size_t i = 0; i < self->n; i++) {
        if (self->hold[i])
            continue;
        int r = pk_channel_progress(self->sub[i]);
        n += r > 0 ? r : 0;
        //  a retired sub's immediates of rounds still open (its key is
        //  revoked: nothing new lands there)
        r = self->retired[i] ? pk_channel_progress(self->retired[i]) : 0;
        n += r > 0 ? r : 0;
    }
    return n;
}

static int
s_channel_wait_fd(const pk_channel_t *channel)
{
    return ((const s_channel_t *) channel)->epfd;
}

static bool
s_channel_trywait(pk_channel_t *channel)
{
    s_channel_t *self = (s_channel_t *) channel;
    //  every rail's: one with work queued keeps the owner awake
    bool ok = true;
    for (size_t i = 0; i < self->n; i++)
        ok &= pk_channel_trywait(self->sub[i])
              && (!self->retired[i] || pk_channel_trywait(self->retired[i]));
    return ok;
}

//  The target's entry of round_seq's tag, claimed for it (s_sliced_t);
//  NULL where no slice of the tag landed
static s_sliced_t *
s_sliced_of(s_channel_t *self, uint64_t round_seq)
{
    uint32_t tag = (uint32_t) (round_seq & S_TAG_MASK);
    s_sliced_t *e = self->sliced;
    while (e && e->tag != tag)
        e = e->next;
    if (e && !e->owned) {
        e->owned = true;
        e->round = round_seq;
    }
    else if (e && e->round != round_seq) {
        //  an older round's, never forgotten: start over (the load may
        //  time out; it never ends early), its masks with a new gen
        *e = (s_sliced_t) { .tag = tag, .owned = true, .round = round_seq,
                            .gen = ++self->gen, .next = e->next };
    }
    return e;
}

/*  A slice immediate on rail (the sink's): counted for its rail, and its
    block once, when this slice fills its mask.  A slice past the pool or
    the layout counts nothing (the round does not land: its load times
    out).  */
static void
s_on_slice(void *arg, uint32_t tag, uint32_t block, uint32_t slice)
{
    struct s_sink *sink = arg;
    s_channel_t *self = sink->self;
    if (block >= self->fab->num_blocks || slice >= self->layout.n)
        return;
    s_sliced_t *e = self->sliced;
    while (e && e->tag != tag)
        e = e->next;
    if (!e) {
        if (!(e = calloc(1, sizeof *e)))
            return;
        e->tag = tag;
        e->gen = ++self->gen;
        e->next = self->sliced;
        self->sliced = e;
    }
    e->slices[sink->rail]++;
    if (self->slot_gen[block] != e->gen) {
        self->slot_gen[block] = e->gen;
        self->slot_mask[block] = 0;
    }
    uint64_t bit = UINT64_C(1) << slice;
    if (self->slot_mask[block] & bit)
        return;                     //  landed twice (a resend): once is its count
    self->slot_mask[block] |= bit;
    e->full += self->slot_mask[block] == pk_slices_full(&self->layout);
}

static size_t
s_channel_landed_slices(pk_channel_t *channel, uint64_t round_seq, uint64_t *counts,
                        size_t cap)
{
    s_channel_t *self = (s_channel_t *) channel;
    if (!self->slot_mask)
        return 0;
    s_sliced_t *e = s_sliced_of(self, round_seq);
    size_t n = self->n < cap ? self->n : cap;
    for (size_t i = 0; i < n; i++)
        counts[i] = e ? e->slices[i] : 0;
    return n;
}

static uint64_t
s_channel_landed(pk_channel_t *channel, uint64_t round_seq)
{
    s_channel_t *self = (s_channel_t *) channel;
    s_sliced_t *e = self->slot_mask ? s_sliced_of(self, round_seq) : NULL;
    uint64_t sum = e ? e->full : 0;
    for (size_t i = 0; i < self->n; i++)
        sum += pk_channel_landed(self->sub[i], round_seq)
               + (self->retired[i] ? pk_channel_landed(self->retired[i], round_seq) : 0);
    return sum;
}

static size_t
s_channel_landed_rails(pk_channel_t *channel, uint64_t round_seq, uint64_t *counts, size_t cap)
{
    s_channel_t *self = (s_channel_t *) channel;
    size_t n = self->n < cap ? self->n : cap;
    for (size_t i = 0; i < n; i++)
        counts[i] = pk_channel_landed(self->sub[i], round_seq)
                    + (self->retired[i] ? pk_channel_landed(self->retired[i], round_seq) : 0);
    return n;
}

static void
s_channel_forget(pk_channel_t *channel, uint64_t round_seq)
{
    s_channel_t *self = (s_channel_t *) channel;
    uint32_t tag = (uint32_t) (round_seq & S_TAG_MASK);
    for (s_sliced_t **at = &self->sliced; *at; at = &(*at)->next)
        if ((*at)->tag == tag) {
            s_sliced_t *e = *at;
            if (!e->owned || e->round == round_seq) {
                *at = e->next;
                free(e);
            }
            break;
        }
    for (size_t i = 0; i < self->n; i++)
    {
        pk_channel_forget(self->sub[i], round_seq);
        if (self->retired[i])
            pk_channel_forget(self->retired[i], round_seq);
    }
}

//  Fencing per rail (protocol.md section 7): cutting the session off
//  closes every rail's registration.
static void
s_channel_revoke(pk_channel_t *channel)
{
    s_channel_t *self = (s_channel_t *) channel;
    for (size_t i = 0; i < self->n; i++)
        pk_channel_revoke(self->sub[i]);
}

//  The consumer's side of a rail taken out (protocol.md section 7): its
//  registration goes before the round it failed in is reported, so a
//  late write on it never lands in a block reused afterwards.
static void
s_channel_revoke_rail(pk_channel_t *channel, size_t rail)
{
    s_channel_t *self = (s_channel_t *) channel;
    if (rail >= self->n || self->failed[rail])
        return;
    self->failed[rail] = true;
    pk_channel_revoke(self->sub[rail]);
}

//  The consumer's fresh registration for a rail it revoked (protocol.md
//  section 7, "a rail that rejoins"): a new sub-channel, so a new
//  endpoint and a new key (the revoked one never comes back: a late
//  write carrying it is still refused).  The old sub is kept, revoked,
//  for the counts of rounds still open, until the rail's next offer
//  (a back-off later at least: those rounds are over by then).
static int
s_channel_rail_offer(pk_channel_t *channel, size_t rail, uint8_t **blob_p, size_t *len_p)
{
    s_channel_t *self = (s_channel_t *) channel;
    if (rail >= self->n || !self->failed[rail] || !self->expose || self->single)
        return -EINVAL;
    int rc;
    char why[PK_ERRLEN];
    pk_channel_t *fresh = pk_channel_new(self->fab->rail[rail], true, &rc, why);
    if (!fresh)
        return rc < 0 ? rc : -EIO;
    if ((rc = pk_channel_blob(fresh, blob_p, len_p)) != 0)
        goto close_fresh;
    if (self->slot_mask)
        (void) pk_channel_slice_sink(fresh, s_on_slice, &self->sink[rail]);
    if (self->epfd >= 0) {
        struct epoll_event ev = { .events = EPOLLIN, .data.u64 = rail };
        if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, pk_channel_wait_fd(fresh), &ev)) {
            rc = -errno;
            goto free_blob;
        }
    }
    if (self->retired[rail]) {
        if (self->epfd >= 0)
            (void) epoll_ctl(self->epfd, EPOLL_CTL_DEL, pk_channel_wait_fd(self->retired[rail]),
                             NULL);
        s_sub_close(self, rail, &self->retired[rail]);
    }
    self->retired[rail] = self->sub[rail];
    self->sub[rail] = fresh;
    self->failed[rail] = false;
    self->offers[rail]++;
    return 0;

free_blob:
    free(*blob_p);
    *blob_p = NULL;
close_fresh:
    pk_channel_close(&fresh);
    return rc;
}

void
pk_rails_test_hold(pk_channel_t *channel, size_t rail, bool hold)
{
    if (channel->ops == &pk_rails_transport_ops && rail < PK_RAILS_MAX)
        ((s_channel_t *) channel)->hold[rail] = hold;
}

void
pk_rails_test_rate(pk_channel_t *channel, size_t rail, double rate)
{
    if (channel->ops != &pk_rails_transport_ops)
        return;
    s_channel_t *self = (s_channel_t *) channel;
    for (size_t p = 0; p < self->npairs; p++)
        if (self->pair[p].local == rail) {
            self->pair[p].rate = rate;
            self->pair[p].pinned = rate > 0;
        }
}

static bool
s_channel_closed(const pk_channel_t *channel)
{
    const s_channel_t *self = (const s_channel_t *) channel;
    if (self->npairs) {
        //  a rail taken out closed its endpoint; the others carry on
        for (size_t p = 0; p < self->npairs; p++)
            if (!self->pair[p].failed && pk_channel_closed(self->sub[self->pair[p].local]))
                return true;
        return false;
    }
    for (size_t i = 0; i < self->n; i++)
        if (pk_channel_closed(self->sub[i]))
            return true;
    return false;
}

static void
s_add_stats(pk_channel_stats_t *to, const pk_channel_stats_t *s)
{
    to->writes_posted += s->writes_posted;
    to->blocks_written += s->blocks_written;
    to->errors += s->errors;
    to->blocks_landed += s->blocks_landed;
}

//  Rail i's counters: its sub-channel's, a retired one's, and those of
//  the ones closed before
static void
s_rail_counts(const s_channel_t *self, size_t i, pk_channel_stats_t *out)
{
    pk_channel_stats_t s;
    *out = self->gone[i];
    pk_channel_stats(self->sub[i], &s);
    s_add_stats(out, &s);
    if (self->retired[i]) {
        pk_channel_stats(self->retired[i], &s);
        s_add_stats(out, &s);
    }
}

//  Sub-channel c of rail i closes: its counts stay the rail's
static void
s_sub_close(s_channel_t *self, size_t i, pk_channel_t **c)
{
    pk_channel_stats_t s;
    if (*c) {
        pk_channel_stats(*c, &s);
        s_add_stats(&self->gone[i], &s);
    }
    pk_channel_close(c);
}

static void
s_channel_stats(const pk_channel_t *channel, pk_channel_stats_t *stats)
{
    const s_channel_t *self = (const s_channel_t *) channel;
    *stats = (pk_channel_stats_t) { 0 };
    for (size_t i = 0; i < self->n; i++) {
        pk_channel_stats_t s;
        s_rail_counts(self, i, &s);
        stats->writes_posted += s.writes_posted;
        stats->blocks_written += s.blocks_written;
        stats->errors += s.errors;
        stats->blocks_landed += s.blocks_landed;
    }
    stats->transfers = self->nopen + self->nfinished;
}

static size_t
s_channel_rails(const pk_channel_t *channel, pk_rail_stats_t *out, size_t cap)
{
    const s_channel_t *self = (const s_channel_t *) channel;
    for (size_t i = 0; i < self->n && i < cap; i++) {
        pk_channel_stats_t s;
        s_rail_counts(self, i, &s);
        pk_rail_stats_t *r = &out[i];
        *r = (pk_rail_stats_t) { .peer_rail = -1, .writes_posted = s.writes_posted,
                                 .blocks_written = s.blocks_written,
                                 .blocks_landed = s.blocks_landed, .failures = s.errors,
                                 .failed = self->failed[i], .rejoins = self->offers[i],
                                 .bytes_written = s.blocks_written * self->fab->block_len };
        snprintf(r->local, sizeof r->local, "%s", self->fab->addr[i].text);
        for (size_t p = 0; p < self->npairs; p++)
            if (self->pair[p].local == i) {
                r->peer_rail = self->pair[p].peer;
                snprintf(r->peer, sizeof r->peer, "%s", self->pair[p].peer_addr);
                r->failures += self->pair[p].failures;
                r->failed = self->pair[p].failed;
                r->rejoins = self->pair[p].rejoins;
                r->rate = self->pair[p].rate;
                r->slices_written = self->pair[p].slices;
                r->bytes_written += self->pair[p].slice_bytes;
            }
    }
    return self->n;
}

static void
s_channel_marks(pk_channel_t *channel)
{
    s_channel_t *self = (s_channel_t *) channel;
    self->marks = true;             //  and a rail that rejoins (s_rejoin)
    for (size_t i = 0; i < self->n; i++)
        pk_channel_marks(self->sub[i]);
}

//  Each rail checks what lands on it: every rail is told every block
static int
s_channel_expect(pk_channel_t *channel, const uint32_t *dest, const uint64_t *sums, size_t n)
{
    s_channel_t *self = (s_channel_t *) channel;
    for (size_t i = 0; i < self->n; i++) {
        int rc = pk_channel_expect(self->sub[i], dest, sums, n);
        if (rc)
            return rc;
    }
    return 0;
}

//  A rail writes the verdicts of the blocks it checked and leaves the rest
static void
s_channel_verdicts(pk_channel_t *channel, const uint32_t *dest, uint8_t *verdict, size_t n)
{
    s_channel_t *self = (s_channel_t *) channel;
    for (size_t i = 0; i < self->n; i++) {
        pk_channel_verdicts(self->sub[i], dest, verdict, n);
        //  what a retired registration checked before it was revoked
        if (self->retired[i])
            pk_channel_verdicts(self->retired[i], dest, verdict, n);
    }
}

//  --------------------------------------------------------------------------
//  The write path

static s_round_t *
s_round(s_channel_t *self, uint64_t round, bool make)
{
    for (s_round_t *r = self->rounds; r; r = r->next)
        if (r->round == round)
            return r;
    s_round_t *r = make ? calloc(1, sizeof *r) : NULL;
    if (r) {
        r->round = round;
        r->next = self->rounds;
        self->rounds = r;
    }
    return r;
}

//  x's last chunk ended: it goes to the next poll's report (room for it
//  was made when it was accepted, s_write_blocks)
static void
s_finish(s_channel_t *self, s_xfer_t *x)
{
    s_xfer_unlink(self, x);
    self->finished[self->nfinished++] = x;
}

//  One of x's chunks ended (done, or given up): the last one ends x.
static void
s_chunk_ended(s_channel_t *self, s_xfer_t *x)
{
    if (--x->open == 0 && x->posted == x->n)
        s_finish(self, x);
}

static void
s_pend(s_channel_t *self, s_xfer_t *x)
{
    x->pending = true;
    x->pprev = self->pending_tail;
    x->pnext = NULL;
    if (self->pending_tail)
        self->pending_tail->pnext = x;
    else
        self->pending = x;
    self->pending_tail = x;
}

static void
s_unpend(s_channel_t *self, s_xfer_t *x)
{
    if (!x->pending)
        return;
    x->pending = false;
    if (x->pprev)
        x->pprev->pnext = x->pnext;
    else
        self->pending = x->pnext;
    if (x->pnext)
        x->pnext->pprev = x->pprev;
    else
        self->pending_tail = x->pprev;
    x->pprev = x->pnext = NULL;
}

/*  A rail's rate (design.md, "A slow rail gets less"): bytes its chunks
    confirmed over the time it had chunks out, sampled once S_RATE_WINDOW
    of such time passed (one 1 MiB chunk at 50 Mbit/s is 168 ms: then a
    sample a chunk), folded in with a weight of busy / (busy + tau):
    samples short beside tau add up to 1 - e^(-busy / tau), so a rate
    change is 63% followed after S_RATE_TAU of busy time, 95% after three
    (no libm for it).  A rail with nothing out measures nothing and keeps its rate;
    one not measured yet counts as the mean of those measured (all rails
    start equal).  */
#define S_RATE_WINDOW 0.02
#define S_RATE_TAU 0.25
/*  A live rail given nothing for S_PROBE while another has chunks out
    gets the next chunk whatever its rate says, so a rail measured slow
    is measured again and can recover: at most one chunk a probe beyond
    its share (1 MiB at 50 Mbit/s: 168 ms of that rail, in parallel with
    the others).  */
#define S_PROBE 0.5

static double
s_rate_of(const s_channel_t *self, size_t p)
{
    if (self->pair[p].rate > 0)
        return self->pair[p].rate;
    double sum = 0;
    size_t n = 0;
    for (size_t q = 0; q < self->npairs; q++)
        if (!self->pair[q].failed && self->pair[q].rate > 0)
            sum += self->pair[q].rate, n++;
    return n ? sum / (double) n : 1.0;
}

/*  How the n blocks of a write go over the pairs live[0..k): shares that
    every pair would finish at one time T (water filling: a pair's queue
    of queued bytes at rate r is free at queued / r; T is where the
    shares r T - queued of the pairs free before it sum to the write),
    in whole blocks, the blocks left by rounding to the largest remainders
    (ties round from the cursor, so equal rails alternate writes of one
    block).  A probe due (S_PROBE) gets a chunk's worth taken from the
    largest share.  k at most 8: a few dozen operations a write.  */
static void
s_split(s_channel_t *self, const size_t *live, size_t k, size_t n, size_t L, size_t *share,
        double now)
{
    double rate[PK_RAILS_MAX], free_at[PK_RAILS_MAX];
    size_t order[PK_RAILS_MAX];
    size_t start = self->cursor++ % k;
    for (size_t j = 0; j < k; j++) {
        size_t i = (start + j) % k, p = live[i];
        rate[i] = s_rate_of(self, p);
        free_at[i] = (double) self->pair[p].queued / rate[i];
        //  insertion sort by free_at, stable from the cursor
        size_t at = j;
        while (at > 0 && free_at[order[at - 1]] > free_at[i]) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = i;
    }
    double bytes = (double) n * (double) L, sum_q = 0, sum_r = 0, T = 0;
    size_t m = 0;
    while (m < k) {
        size_t i = order[m];
        sum_q += (double) self->pair[live[i]].queued;
        sum_r += rate[i];
        m++;
        T = (bytes + sum_q) / sum_r;
        if (m == k || T <= free_at[order[m]])
            break;
    }
    double frac[PK_RAILS_MAX];
    size_t given = 0;
    for (size_t i = 0; i < k; i++) {
        double want = 0;
        for (size_t j = 0; j < m; j++)
            if (order[j] == i)
                want = (rate[i] * T - (double) self->pair[live[i]].queued) / (double) L;
        want = want < 0 ? 0 : want > (double) n ? (double) n : want;
        share[i] = (size_t) want;
        frac[i] = want - (double) share[i];
        given += share[i];
    }
    while (given < n) {
        size_t best = start;
        for (size_t j = 0; j < k; j++)
            if (frac[(start + j) % k] > frac[best])
                best = (start + j) % k;
        share[best]++;
        frac[best] = -1;
        given++;
    }
    //  the probe: a rail measured slow but idle while others work
    bool busy = false;
    for (size_t i = 0; i < k; i++)
        busy |= self->pair[live[i]].running > 0;
    for (size_t i = 0; busy && i < k; i++) {
        size_t p = live[i];
        if (share[i] || self->pair[p].running || now - self->pair[p].last_post < S_PROBE)
            continue;
        size_t big = 0;
        for (size_t j = 1; j < k; j++)
            big = share[j] > share[big] ? j : big;
        size_t c = share[big] < self->chunk_blocks ? share[big] : self->chunk_blocks;
        share[big] -= c;
        share[i] += c;
    }
}

/*  Blocks [off, off + n) of x over the pairs live[0..k) by their rates
    (s_split), each share contiguous so the sub-channel's runs merge.  0
    or the first error (counted a failure of its pair).  */
static int s_post(s_channel_t *self, s_xfer_t *x, size_t p, uint32_t off, uint32_t cnt);

static int
s_spread(s_channel_t *self, s_xfer_t *x, const size_t *live, size_t k, uint32_t off,
         uint32_t n, double now)
{
    size_t share[PK_RAILS_MAX];
    s_split(self, live, k, n, x->unit, share, now);
    for (size_t i = 0; i < k; i++) {
        if (!share[i])
            continue;
        int err = s_post(self, x, live[i], off, (uint32_t) share[i]);
        if (err) {
            self->pair[live[i]].failures++;
            return err;
        }
        off += (uint32_t) share[i];
    }
    return 0;
}

/*  How many bytes pair p may have out: enough to keep its link busy
    between two polls and a completion's round trip, S_DEPTH of its rate,
    and at least S_DEPTH_CHUNKS chunks (a rail not measured yet, and a
    slow one: 4 MiB is 220 ms at 150 Mbit/s).  50 ms of its rate cost the
    loopback big round (test_big_round_over_two_rails) a third, one write
    0.20-0.26 s against 0.14-0.18 s; at 200 ms it is the same as posting
    everything at once (0.15-0.16 s both).  Blocks beyond it wait in
    the write (s_fill), so a rail's share is decided when it has room,
    by the rates measured by then, not once at the write's start: a round
    posted whole before any rate is known still goes 3:1 over 3:1 rails.
    The cost: a rail's queue is refilled at the poll after a completion,
    not ahead of it (the depth covers that wait).  */
#define S_DEPTH 0.2
#define S_DEPTH_CHUNKS 4

static double
s_depth(const s_channel_t *self, size_t p)
{
    double least = (double) S_DEPTH_CHUNKS * self->chunk_blocks * (double) self->unit_len;
    double by_rate = s_rate_of(self, p) * S_DEPTH;
    return by_rate > least ? by_rate : least;
}

/*  Gives the pending writes' blocks, oldest first, to the rails with room
    (s_depth), split by their rates (s_split), each rail's share capped by
    its room; what no rail has room for (or what the split gives only to
    full rails) waits for the next poll.  A post that fails fails its
    write (what its posted chunks land is reported); for fresh, a write
    not yet given to the caller, with nothing posted, the error is
    returned and fresh left to the caller.  */
static int
s_fill(s_channel_t *self, s_xfer_t *fresh)
{
    size_t live[PK_RAILS_MAX], k = 0;
    for (size_t p = 0; p < self->npairs; p++)
        if (!self->pair[p].failed)
            live[k++] = p;
    double now = pk_clock_monotonic();
    while (k && self->pending) {
        s_xfer_t *x = self->pending;
        double L = (double) x->unit;
        if (x->failed) {            //  what waited of a failed write never goes
            x->posted = x->n;
            s_unpend(self, x);
            if (!x->open)
                s_finish(self, x);
            continue;
        }
        size_t room[PK_RAILS_MAX], total = 0;
        for (size_t i = 0; i < k; i++) {
            double q = (double) self->pair[live[i]].queued, d = s_depth(self, live[i]);
            room[i] = q < d ? (size_t) ((d - q) / L) : 0;
            room[i] += room[i] == 0 && q < d;
            total += room[i];
        }
        if (!total)
            break;
        size_t left = x->n - x->posted, m = left < total ? left : total;
        size_t share[PK_RAILS_MAX], now_posted = 0;
        s_split(self, live, k, m, x->unit, share, now);
        int err = 0;
        for (size_t i = 0; i < k && !err; i++) {
            size_t c = share[i] < room[i] ? share[i] : room[i];
            if (!c)
                continue;
            if ((err = s_post(self, x, live[i], x->posted, (uint32_t) c)) != 0) {
                self->pair[live[i]].failures++;
                break;
            }
            x->posted += (uint32_t) c;
            now_posted += c;
        }
        if (err) {
            x->failed = true;
            x->posted = x->n;
            s_unpend(self, x);
            if (x == fresh && !x->nchunks)
                return err;
            if (!x->open)
                s_finish(self, x);
            continue;
        }
        if (x->posted == x->n)
            s_unpend(self, x);
        else if (!now_posted)
            break;
    }
    return 0;
}

//  bytes of pair p's confirmed at now: its busy time and bytes so far
//  make a sample once they span S_RATE_WINDOW
static void
s_measure(s_channel_t *self, size_t p, uint64_t bytes, double now)
{
    s_pair_t *r = &self->pair[p];
    r->busy_acc += now - r->mark;
    r->mark = now;
    r->bytes_acc += bytes;
    if (r->busy_acc < S_RATE_WINDOW || r->pinned)
        return;
    double sample = (double) r->bytes_acc / r->busy_acc;
    r->rate = r->rate > 0 ? r->rate + r->busy_acc / (r->busy_acc + S_RATE_TAU) * (sample - r->rate)
                          : sample;
    r->busy_acc = 0;
    r->bytes_acc = 0;
}

//  Pair p's chunks out are gone (taken out, rejoined): nothing is queued
//  and a sample in the making is dropped
static void
s_unqueue(s_channel_t *self, size_t p)
{
    self->pair[p].running = 0;
    self->pair[p].queued = 0;
    self->pair[p].busy_acc = 0;
    self->pair[p].bytes_acc = 0;
}

//  Chunk i of x: slab k holds chunks [4 (2^k - 1), 4 (2^(k+1) - 1))
static s_chunk_t *
s_chunk(const s_xfer_t *x, size_t i)
{
    size_t k = (size_t) (63 - __builtin_clzll(i / S_SLAB0 + 1));
    return &x->slab[k][i - S_SLAB0 * (((size_t) 1 << k) - 1)];
}

/*  The chunk map's key of sub transfer tid on pair p (< 8): its bytes are
    c->key, so the entry's view lives as long as the record; a lookup's
    may be on the stack.  Our own ids: pk_hash_id's mix, not SipHash.  */
static pk_key_t
s_chunk_key(const uint64_t *key)
{
    return (pk_key_t) { (const uint8_t *) key, sizeof *key, pk_hash_id(*key >> 3, *key & 7) };
}

static uint64_t
s_key_of(size_t p, uint64_t tid)
{
    return tid << 3 | (uint64_t) p;
}

//  c leaves the chunk map (it ended, or is given up)
static void
s_chunk_untrack(s_channel_t *self, s_chunk_t *c)
{
    pk_key_t k = s_chunk_key(&c->key);
    (void) pk_keymap_take(&self->chunks, &k, NULL, NULL);
}

//  Blocks [off, off + cnt) of x over pair p, as chunks (see s_chunk_t).
static int
s_post(s_channel_t *self, s_xfer_t *x, size_t p, uint32_t off, uint32_t cnt)
{
    for (uint32_t done = 0; done < cnt; ) {
        uint32_t c = cnt - done < self->chunk_blocks ? cnt - done : self->chunk_blocks;
        size_t k = (size_t) (63 - __builtin_clzll(x->nchunks / S_SLAB0 + 1));
        if (k >= S_SLABS)
            return -E2BIG;
        if (!x->slab[k] && !(x->slab[k] = malloc((S_SLAB0 << k) * sizeof (s_chunk_t))))
            return -ENOMEM;
        //  room before the post, so the insert after it cannot fail and
        //  no chunk is out untracked (keymap grows only past half full)
        if (pk_keymap_reserve(&self->chunks, self->chunks.count + 1))
            return -ENOMEM;
        //  sliced: one unit, one slice of its block (c is 1)
        uint32_t u = off + done;
        int64_t tid = x->smask
                      ? self->pair[p].t.write_slice(self->pair[p].t.self, x->round,
                                                    x->local[u / x->per], x->remote[u / x->per],
                                                    u % x->per)
                      : self->pair[p].t.write_blocks(self->pair[p].t.self, x->round,
                                                     x->local + u, x->remote + u, c);
        if (tid <= 0)
            return tid < 0 ? (int) tid : -EIO;
        if (x->smask) {
            uint64_t o;
            self->pair[p].slices++;
            self->pair[p].slice_bytes += pk_slice_range(&self->layout, u % x->per, &o);
        }
        s_chunk_t *ch = s_chunk(x, x->nchunks++);
        *ch = (s_chunk_t) { .tid = (uint64_t) tid, .key = s_key_of(p, (uint64_t) tid), .x = x,
                            .off = off + done, .cnt = c, .pair = (uint8_t) p,
                            .state = S_RUNNING };
        pk_key_t key = s_chunk_key(&ch->key);
        (void) pk_keymap_put(&self->chunks, &key, (uintptr_t) ch, 0);
        x->open++;
        double now = pk_clock_monotonic();
        if (self->pair[p].running++ == 0)
            self->pair[p].busy_since = self->pair[p].mark = now;
        self->pair[p].queued += (uint64_t) c * x->unit;
        self->pair[p].last_post = now;
        done += c;
    }
    return 0;
}

static int64_t
s_write_blocks(void *arg, uint64_t round_seq, const uint32_t *local, const uint32_t *remote,
               size_t n)
{
    s_channel_t *self = arg;
    size_t k = 0;
    for (size_t p = 0; p < self->npairs; p++)
        k += !self->pair[p].failed;
    if (!k)
        return -ENOTCONN;
    //  sliced, unless a block is past what a slice's immediate names
    //  (protocol.md section 7): then the write goes whole
    uint32_t per = self->per_block;
    for (size_t i = 0; per > 1 && i < n; i++)
        per = remote[i] < PK_SLICE_BLOCKS ? per : 1;
    if (n > UINT32_MAX / per)
        return -EINVAL;
    if (self->nopen + self->nfinished == self->capfinished) {
        size_t cap = self->capfinished ? 2 * self->capfinished : 16;
        s_xfer_t **f = realloc(self->finished, cap * sizeof *f);
        if (!f)
            return -ENOMEM;
        self->finished = f;
        self->capfinished = cap;
    }
    s_xfer_t *x = calloc(1, sizeof *x);
    size_t bytes = (n ? n : 1) * sizeof *local;
    if (!x || !(x->local = malloc(bytes)) || !(x->remote = malloc(bytes))) {
        if (x)
            free(x->local);
        free(x);
        return -ENOMEM;
    }
    if (per > 1 && n && !(x->smask = calloc(n, sizeof *x->smask))) {
        free(x->local);
        free(x->remote);
        free(x);
        return -ENOMEM;
    }
    memcpy(x->local, local, n * sizeof *local);
    memcpy(x->remote, remote, n * sizeof *remote);
    x->tid = self->next_tid++;
    x->round = round_seq;
    x->per = per;
    x->unit = per > 1 ? self->unit_len : self->fab->block_len ? self->fab->block_len : 1;
    x->n = (uint32_t) n * per;
    x->next = self->xfers;
    if (self->xfers)
        self->xfers->prev = x;
    self->xfers = x;
    self->nopen++;
    if (!n) {                       //  a write of no blocks: done at once
        s_finish(self, x);
        return (int64_t) x->tid;
    }
    //  its blocks go to the rails as they have room, by their rates
    //  (s_fill): beside a rail of three times its rate, a rail gets a
    //  quarter; a refusal after some chunks went fails the transfer with
    //  what the posted ones land
    s_pend(self, x);
    int err = s_fill(self, x);
    if (err) {
        s_xfer_unlink(self, x);
        s_xfer_free(x);
        return err;
    }
    return (int64_t) x->tid;
}

static void
s_xfer_free(s_xfer_t *x)
{
    free(x->local);
    free(x->remote);
    free(x->smask);
    for (size_t k = 0; k < S_SLABS && x->slab[k]; k++)
        free(x->slab[k]);
    free(x);
}

typedef struct {
    s_channel_t *self;
    size_t pair;
} s_poll_ctx_t;

static void
s_on_part(void *arg, uint64_t tid, bool ok, uint64_t landed)
{
    s_poll_ctx_t *ctx = arg;
    s_channel_t *self = ctx->self;
    size_t p = ctx->pair;
    //  one probe; a chunk given up since has no entry
    uint64_t kb = s_key_of(p, tid), found;
    pk_key_t key = s_chunk_key(&kb);
    if (!pk_keymap_take(&self->chunks, &key, &found, NULL))
        return;
    s_chunk_t *c = (s_chunk_t *) (uintptr_t) found;
    s_xfer_t *x = c->x;
    double now = pk_clock_monotonic();
    uint64_t bytes = (uint64_t) c->cnt * x->unit;
    if (ok)
        s_measure(self, p, bytes, now);
    self->pair[p].running--;
    self->pair[p].queued -= bytes;
    self->pair[p].last_done = now;
    x->polled_any = true;
    uint64_t blocks = ok ? c->cnt : landed;
    //  kept for the answer only where the peer reads it (rails_landing
    //  takes it then): a plain peer's rounds would pile up here
    s_round_t *r = self->rails_peer ? s_round(self, x->round, true) : NULL;
    if (x->smask) {
        //  a slice (cnt 1): counted as one on its rail; its block lands
        //  once its last slice is confirmed, on whichever rail
        if (r && ok)
            r->slices[self->pair[p].peer]++;
        if (ok) {
            uint64_t *m = &x->smask[c->off / x->per];
            uint64_t bit = UINT64_C(1) << (c->off % x->per);
            x->landed += !(*m & bit) && (*m | bit) == pk_slices_full(&self->layout);
            *m |= bit;
        }
        blocks = 0;                 //  a failed slice lands no block
    }
    else if (r)
        r->counts[self->pair[p].peer] += blocks;
    if (ok) {
        c->state = S_DONE;
        x->landed += blocks;
        s_chunk_ended(self, x);
        return;
    }
    //  a failed chunk: the rail is taken out after this poll (s_take_out),
    //  which sends the chunk again or, with no rail left, fails it
    self->pair[p].failures++;
    self->pair[p].fail_now = true;
    c->state = S_LOST;
    c->landed = landed;
}


//  Pair p is taken out (protocol.md section 7, "a rail that fails"): its
//  running chunks are released at once (the endpoint closes: no source
//  block is read afterwards), every round they belonged to marks p's peer
//  rail failed for its answer (the consumer revokes that rail before it
//  reports the round), and each unconfirmed chunk goes again over the
//  rails left, round robin.  A cancelled write's chunks are not resent.
static void
s_take_out(s_channel_t *self, size_t p, bool failure)
{
    size_t live[PK_RAILS_MAX], k = 0;
    for (size_t q = 0; q < self->npairs; q++)
        if (q != p && !self->pair[q].failed)
            live[k++] = q;
    bool by_chunk = self->pair[p].fail_now;   //  counted in failures already
    self->pair[p].fail_now = false;
    if (!k) {
        //  the last rail stays: its failed chunks fail their writes, as a
        //  single rail's do, and its own stall judges the session
        for (s_xfer_t *x = self->xfers, *next; x; x = next) {
            next = x->next;
            for (size_t i = 0; i < x->nchunks; i++)
                if (s_chunk(x, i)->pair == p && s_chunk(x, i)->state == S_LOST) {
                    s_chunk(x, i)->state = S_ENDED;
                    x->landed += s_chunk(x, i)->landed;
                    x->failed = true;
                    s_chunk_ended(self, x);
                }
        }
        return;
    }
    self->pair[p].failed = true;
    self->pair[p].fail_now = false;
    if (failure && !by_chunk)
        self->pair[p].failures++;   //  a stall: the take-out is the failure
    //  a failure doubles the back-off; the consumer's own revoke (an
    //  offer for a rail in use) keeps it
    self->pair[p].outs += failure || !self->pair[p].outs;
    self->pair[p].retry_at = pk_clock_monotonic()
                             + pk_rail_backoff(self->rail_stall, self->pair[p].outs);
    //  one cancel for every chunk still out: it closes the sub's endpoint
    size_t n = 0;
    for (s_xfer_t *x = self->xfers; x; x = x->next)
        for (size_t i = 0; i < x->nchunks; i++)
            n += s_chunk(x, i)->pair == p && s_chunk(x, i)->state == S_RUNNING;
    uint64_t *tids = n ? malloc(n * sizeof *tids) : NULL;
    size_t m = 0;
    for (s_xfer_t *x = self->xfers; x; x = x->next)
        for (size_t i = 0; i < x->nchunks; i++) {
            s_chunk_t *c = s_chunk(x, i);
            if (c->pair == p && c->state == S_RUNNING) {
                s_chunk_untrack(self, c);
                if (tids)
                    tids[m++] = c->tid;
            }
        }
    uint64_t still;
    (void) self->pair[p].t.cancel(self->pair[p].t.self, tids, m, PK_CANCEL_IMMEDIATE, &still);
    free(tids);
    s_unqueue(self, p);
    double now = pk_clock_monotonic();
    for (s_xfer_t *x = self->xfers, *later; x; x = later) {
        later = x->next;            //  x may end here (s_chunk_ended)
        bool touched = false;
        size_t nc = x->nchunks;     //  resends append: not walked again
        for (size_t i = 0; i < nc; i++) {
            s_chunk_t c = *s_chunk(x, i);
            if (c.pair != p || (c.state != S_RUNNING && c.state != S_LOST))
                continue;
            touched = true;
            s_chunk(x, i)->state = S_ENDED;
            int rc = x->cancelled || x->failed ? -ECANCELED
                                               : s_spread(self, x, live, k, c.off, c.cnt, now);
            if (rc) {
                x->landed += c.state == S_LOST ? c.landed : 0;
                x->failed = true;
            }
            //  after the resend, which opened chunks of its own
            s_chunk_ended(self, x);
        }
        s_round_t *r = touched && self->rails_peer ? s_round(self, x->round, true) : NULL;
        if (r)
            r->failed |= UINT32_C(1) << self->pair[p].peer;
    }
}

//  A rail stalled (rails.h): writes out on it and no completion for
//  rail_stall, while another rail completed since its last one.  Never
//  the last rail: then the sub-channel's own stall judges the session.
static bool
s_stalled(const s_channel_t *self, size_t p, double now)
{
    if (self->pair[p].failed || !self->pair[p].running)
        return false;
    double since = self->pair[p].busy_since > self->pair[p].last_done
                   ? self->pair[p].busy_since : self->pair[p].last_done;
    if (now - since < self->rail_stall)
        return false;
    for (size_t q = 0; q < self->npairs; q++)
        if (q != p && !self->pair[q].failed && self->pair[q].last_done > since)
            return true;
    return false;
}

//  Pair p, out, is paired again with the consumer's fresh blob (its back-
//  off passed): a new sub-channel for its local rail (the old one's
//  endpoint closed when the rail was taken out), connected to the blob.
//  A connect that fails leaves the rail out (counted a failure) and the
//  offer spent: the consumer offers again only after another take-out.
static void
s_rejoin(s_channel_t *self, size_t p)
{
    size_t i = self->pair[p].local;
    uint8_t *offer = self->pair[p].offer;
    size_t len = self->pair[p].offer_len;
    self->pair[p].offer = NULL;
    int rc;
    char why[PK_ERRLEN];
    pk_channel_t *fresh = pk_channel_new(self->fab->rail[i], self->expose, &rc, why);
    if (!fresh || pk_channel_connect(fresh, offer, len, why) != 0) {
        pk_channel_close(&fresh);
        self->pair[p].failures++;
        free(offer);
        return;
    }
    free(offer);
    if (self->marks)
        pk_channel_marks(fresh);
    if (self->epfd >= 0) {
        (void) epoll_ctl(self->epfd, EPOLL_CTL_DEL, pk_channel_wait_fd(self->sub[i]), NULL);
        struct epoll_event ev = { .events = EPOLLIN, .data.u64 = i };
        (void) epoll_ctl(self->epfd, EPOLL_CTL_ADD, pk_channel_wait_fd(fresh), &ev);
    }
    s_sub_close(self, i, &self->sub[i]);
    self->sub[i] = fresh;
    self->pair[p].t = pk_channel_transport(fresh);
    self->pair[p].failed = false;
    s_unqueue(self, p);
    //  measured again from scratch: until then it counts as the others'
    //  mean, so it gets a share and a sample at once
    self->pair[p].rate = self->pair[p].pinned ? self->pair[p].rate : 0;
    self->pair[p].busy_since = self->pair[p].last_done = 0;
    self->pair[p].rejoins++;
}

static int
s_rail_rejoin(void *arg, size_t peer_rail, const uint8_t *blob, size_t len, char *err)
{
    s_channel_t *self = arg;
    size_t p = 0;
    while (p < self->npairs && (size_t) self->pair[p].peer != peer_rail)
        p++;
    if (p == self->npairs)
        return pk_err(err, -EPROTO, "rail_offer: consumer rail %zu is paired with none of "
                      "ours", peer_rail);
    char why[PK_ERRLEN];
    int rc = pk_fabric_check_blob(self->fab->rail[self->pair[p].local], blob, len, why);
    if (rc)
        return pk_err(err, rc, "rail_offer: consumer rail %zu: %.160s", peer_rail, why);
    uint8_t *copy = malloc(len);
    if (!copy)
        return pk_err(err, -ENOMEM, "out of memory");
    if (!self->pair[p].failed) {
        //  the consumer revoked a registration we use (an answer naming
        //  the rail crossed its offer: protocol.md section 7): out now,
        //  its unconfirmed writes resent, never the last rail
        size_t live = 0;
        for (size_t q = 0; q < self->npairs; q++)
            live += !self->pair[q].failed;
        if (live < 2) {
            free(copy);
            return pk_err(err, -EPROTO, "rail_offer: consumer rail %zu is the last rail in "
                          "use", peer_rail);
        }
        s_take_out(self, p, false);
    }
    //  the consumer revoked every registration of the rail before this
    //  one: no answer needs to name it for them any more
    for (s_round_t *r = self->rounds; r; r = r->next)
        r->failed &= ~(UINT32_C(1) << peer_rail);
    free(self->pair[p].offer);      //  an earlier offer: revoked since
    self->pair[p].offer = copy;
    memcpy(copy, blob, len);
    self->pair[p].offer_len = len;
    return 0;
}

static int
s_cmp_finished(const void *a, const void *b)
{
    const s_xfer_t *x = *(s_xfer_t *const *) a, *y = *(s_xfer_t *const *) b;
    if (x->failed != y->failed)
        return x->failed ? 1 : -1;
    return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static void
s_poll(void *arg, pk_transfer_fn *each, void *each_arg)
{
    s_channel_t *self = arg;
    for (size_t p = 0; p < self->npairs; p++) {
        if (self->pair[p].failed || self->hold[self->pair[p].local])
            continue;
        s_poll_ctx_t ctx = { self, p };
        self->pair[p].t.poll(self->pair[p].t.self, s_on_part, &ctx);
    }
    double now = pk_clock_monotonic();
    for (size_t p = 0; p < self->npairs; p++) {
        if (self->pair[p].fail_now || s_stalled(self, p, now))
            s_take_out(self, p, true);
        else if (self->pair[p].failed && self->pair[p].offer && now >= self->pair[p].retry_at)
            s_rejoin(self, p);
    }
    (void) s_fill(self, NULL);
    //  a write ends where its last chunk does (s_chunk_ended), so nothing
    //  here walks the open writes
    if (!self->nfinished)
        return;
    qsort(self->finished, self->nfinished, sizeof *self->finished, s_cmp_finished);
    size_t n = self->nfinished;
    self->nfinished = 0;
    for (size_t i = 0; i < n; i++) {
        s_xfer_t *x = self->finished[i];
        each(each_arg, x->tid, !x->failed, x->landed);
        s_xfer_free(x);
    }
}

static size_t
s_cancel(void *arg, const uint64_t *tids, size_t n, pk_cancel_mode_t mode, uint64_t *still)
{
    s_channel_t *self = arg;
    size_t nstill = 0;
    for (size_t i = 0; i < n; i++) {
        s_xfer_t *x = self->xfers;
        while (x && x->tid != tids[i])
            x = x->next;
        if (!x)
            continue;
        s_unpend(self, x);
        x->posted = x->n;           //  what waited is never given to a rail
        for (size_t c = 0; c < x->nchunks; c++) {
            s_chunk_t *ch = s_chunk(x, c);
            if (ch->state == S_LOST) {
                ch->state = S_ENDED;
                x->landed += ch->landed;
                x->open--;
            }
            if (ch->state != S_RUNNING)
                continue;
            uint64_t s;
            size_t r = self->pair[ch->pair].t.cancel(self->pair[ch->pair].t.self, &ch->tid, 1,
                                                     mode, &s);
            if (mode == PK_CANCEL_IMMEDIATE || r == 0) {
                s_chunk_untrack(self, ch);
                ch->state = S_ENDED;
                x->open--;
                self->pair[ch->pair].running--;
                self->pair[ch->pair].queued -= (uint64_t) ch->cnt * x->unit;
            }
        }
        x->failed = x->cancelled = true;
        if (mode == PK_CANCEL_IMMEDIATE || (!x->open && !x->polled_any)) {
            s_xfer_unlink(self, x);
            s_xfer_free(x);
            continue;
        }
        still[nstill++] = x->tid;
        if (!x->open)
            s_finish(self, x);
    }
    return nstill;
}

static size_t
s_rails_landing(void *arg, uint64_t round_seq, uint64_t *counts, size_t cap)
{
    s_channel_t *self = arg;
    s_round_t **at = &self->rounds;
    while (*at && (*at)->round != round_seq)
        at = &(*at)->next;
    s_round_t *r = *at;
    if (r)
        *at = r->next;
    size_t n = self->rails_peer ? (self->peer_rails < cap ? self->peer_rails : cap) : 0;
    for (size_t j = 0; j < n; j++)
        counts[j] = r ? r->counts[j] : 0;
    free(r);
    return n;
}

//  Before rails_landing, which forgets the round
static size_t
s_rails_slices(void *arg, uint64_t round_seq, uint64_t *counts, size_t cap)
{
    s_channel_t *self = arg;
    s_round_t *r = s_round(self, round_seq, false);
    size_t n = self->rails_peer ? (self->peer_rails < cap ? self->peer_rails : cap) : 0;
    for (size_t j = 0; j < n; j++)
        counts[j] = r ? r->slices[j] : 0;
    return n;
}

/*  The peer reads slices (capability slices): blocks of 2 MiB or more
    go as slices from the next write on, where there are rails to
    spread them over and every pair's provider can name a slice in its
    immediate (a rail that rejoins has its provider).  */
static bool
s_channel_slices(pk_channel_t *channel)
{
    s_channel_t *self = (s_channel_t *) channel;
    if (self->npairs < 2 || !self->rails_peer || self->layout.n < 2)
        return false;
    for (size_t p = 0; p < self->npairs; p++)
        if (!self->pair[p].t.write_slice)
            return false;
    self->per_block = self->layout.n;
    self->unit_len = self->layout.len;
    return true;
}

static uint32_t
s_rails_failed(void *arg, uint64_t round_seq)
{
    s_round_t *r = s_round(arg, round_seq, false);
    return r ? r->failed : 0;
}

static pk_transport_t
s_channel_transport(pk_channel_t *channel)
{
    s_channel_t *self = (s_channel_t *) channel;
    return (pk_transport_t) { .self = channel, .write_blocks = s_write_blocks, .poll = s_poll,
                              .cancel = s_cancel, .rails_landing = s_rails_landing,
                              .rails_failed = s_rails_failed, .rail_rejoin = s_rail_rejoin,
                              .rails_slices = self->per_block > 1 ? s_rails_slices : NULL };
}

const pk_transport_ops_t pk_rails_transport_ops = {
    .size = sizeof (pk_transport_ops_t),
    .name = "rails",
    .fabric_open = s_fabric_open,
    .fabric_close = s_fabric_close,
    .fabric_describe = s_fabric_describe,
    .fabric_provider = s_fabric_provider,
    .fabric_has_cq_data = s_fabric_has_cq_data,
    .check_blob = s_check_blob,
    .fabric_stats = s_fabric_stats,
    .channel_new = s_channel_new,
    .channel_close = s_channel_close,
    .channel_blob = s_channel_blob,
    .channel_connect = s_channel_connect,
    .channel_progress = s_channel_progress,
    .channel_wait_fd = s_channel_wait_fd,
    .channel_trywait = s_channel_trywait,
    .channel_landed = s_channel_landed,
    .channel_forget = s_channel_forget,
    .channel_revoke = s_channel_revoke,
    .channel_closed = s_channel_closed,
    .channel_stats = s_channel_stats,
    .channel_transport = s_channel_transport,
    .blob_provider = s_blob_provider,
    .channel_expect = s_channel_expect,
    .channel_verdicts = s_channel_verdicts,
    .channel_marks = s_channel_marks,
    .providers = NULL,
    .nproviders = 0,
    .fabric_rails = s_fabric_rails,
    .channel_single = s_channel_single,
    .channel_rails = s_channel_rails,
    .channel_landed_rails = s_channel_landed_rails,
    .channel_revoke_rail = s_channel_revoke_rail,
    .channel_rail_offer = s_channel_rail_offer,
    .channel_slices = s_channel_slices,
    .channel_landed_slices = s_channel_landed_slices,
};
