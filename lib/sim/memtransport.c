/*  memtransport.c: the in-memory transport.  Ids are dense, so a transfer's
    state is one byte in a vector indexed by id; poll sorts only what
    finished since the last poll.  */
#include "sim/memtransport.h"
#include "base/err.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S_GONE = 0, S_INFLIGHT, S_DONE, S_FAILED };

static const pk_transport_ops_t s_ops;      //  every fabric's and channel's (below)

//  The seam's fabric: nothing but the pool's shape and the counters.
typedef struct {
    pk_fabric_t head;       //  first: a pk_fabric_t of the seam (transport.h)
    void *base;
    uint64_t num_blocks, block_len;
    pk_fabric_stats_t stats;
} s_fabric_t;

typedef struct {
    uint64_t round, count;
} s_round_t;

#define S_MEM_MAGIC "PKMM"
#define S_MEM_BLOB_LEN (4 + 8 + 8 + 1)
#define S_HELD 0x10

struct _pk_memtransport_t {
    pk_channel_t head;      //  first: a pk_channel_t of the seam
    uint8_t *state;         //  by id; id 0 unused
    size_t cap;
    uint64_t next_tid;
    size_t inflight;        //  submitted, not yet reported or released
    size_t refuse;
    uint64_t *finished;     //  ids completed since the last poll
    size_t nfinished, capfinished;
    //  the seam's channel: NULL fabric when made by pk_memtransport_new
    s_fabric_t *fabric;
    bool expose, connected, closed;
    uint64_t peer_blocks;
    s_round_t *landed;      //  what the test said landed, by full round
    size_t nlanded;
    pk_channel_stats_t stats;
};

pk_memtransport_t *
pk_memtransport_new(void)
{
    pk_memtransport_t *self = calloc(1, sizeof *self);
    if (self)
        *self = (pk_memtransport_t) { .head = { &s_ops }, .next_tid = 1 };
    return self;
}

void
pk_memtransport_destroy(pk_memtransport_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->state);
    free((*self_p)->finished);
    free((*self_p)->landed);
    free(*self_p);
    *self_p = NULL;
}

static uint8_t *
s_state(pk_memtransport_t *self, uint64_t tid)
{
    return tid > 0 && tid < self->next_tid ? &self->state[tid] : NULL;
}

static int64_t
s_write_blocks(void *arg, uint64_t round_seq, const uint32_t *local, const uint32_t *remote,
               size_t n)
{
    pk_memtransport_t *self = arg;
    if (self->refuse > 0) {
        self->refuse--;
        return -ECONNREFUSED;
    }
    if (self->next_tid >= self->cap) {
        size_t cap = self->cap ? 2 * self->cap : 1024;
        uint8_t *state = realloc(self->state, cap);
        if (!state)
            return -ENOMEM;
        memset(state + self->cap, 0, cap - self->cap);
        self->state = state;
        self->cap = cap;
    }
    uint64_t tid = self->next_tid++;
    self->state[tid] = S_INFLIGHT;
    self->inflight++;
    self->stats.writes_posted++;
    self->stats.blocks_written += n;
    return (int64_t) tid;
}

static int
s_cmp_tid(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

static void
s_poll(void *arg, pk_transfer_fn *each, void *each_arg)
{
    pk_memtransport_t *self = arg;
    if (!self->nfinished)
        return;
    //  Take the list first: the callback may complete or cancel others.
    uint64_t *list = self->finished;
    size_t n = self->nfinished;
    self->finished = NULL;
    self->nfinished = self->capfinished = 0;
    qsort(list, n, sizeof *list, s_cmp_tid);
    for (int pass = 0; pass < 2; pass++) {
        int want = pass == 0 ? S_DONE : S_FAILED;
        for (size_t i = 0; i < n; i++) {
            uint8_t *st = s_state(self, list[i]);
            if ((*st & 0x0f) != want)
                continue;
            *st = S_GONE;
            self->inflight--;
            each(each_arg, list[i], want == S_DONE, 0);
        }
    }
    free(list);
}

static size_t
s_cancel(void *arg, const uint64_t *tids, size_t n, pk_cancel_mode_t mode, uint64_t *still)
{
    pk_memtransport_t *self = arg;
    size_t nstill = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t *st = s_state(self, tids[i]);
        if (!st || (*st & 0x0f) == S_GONE)
            continue;
        if (mode == PK_CANCEL_WAIT && (*st & S_HELD) && (*st & 0x0f) == S_INFLIGHT) {
            still[nstill++] = tids[i];
            continue;
        }
        *st = S_GONE;
        self->inflight--;
    }
    return nstill;
}

pk_transport_t
pk_memtransport_iface(pk_memtransport_t *self)
{
    return (pk_transport_t) { .self = self, .write_blocks = s_write_blocks, .poll = s_poll,
                              .cancel = s_cancel };
}

void
pk_memtransport_complete(pk_memtransport_t *self, const uint64_t *tids, size_t n, bool ok)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t *st = s_state(self, tids[i]);
        if (!st || (*st & 0x0f) != S_INFLIGHT)
            continue;
        if (self->nfinished == self->capfinished) {
            size_t cap = self->capfinished ? 2 * self->capfinished : 64;
            uint64_t *list = realloc(self->finished, cap * sizeof *list);
            if (!list)
                abort();        //  a test harness: no way to report it
            self->finished = list;
            self->capfinished = cap;
        }
        self->finished[self->nfinished++] = tids[i];
        *st = (uint8_t) ((*st & S_HELD) | (ok ? S_DONE : S_FAILED));
    }
}

void
pk_memtransport_hold(pk_memtransport_t *self, const uint64_t *tids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t *st = s_state(self, tids[i]);
        if (st && (*st & 0x0f) != S_GONE)
            *st |= S_HELD;
    }
}

void
pk_memtransport_refuse(pk_memtransport_t *self, size_t n)
{
    self->refuse += n;
}

size_t
pk_memtransport_inflight(const pk_memtransport_t *self)
{
    return self->inflight;
}

uint64_t
pk_memtransport_next_tid(const pk_memtransport_t *self)
{
    return self->next_tid;
}

void
pk_memtransport_land(pk_memtransport_t *self, uint64_t round_seq, uint64_t n)
{
    for (size_t i = 0; i < self->nlanded; i++)
        if (self->landed[i].round == round_seq) {
            self->landed[i].count += n;
            self->stats.blocks_landed += n;
            return;
        }
    //  a test scripts a handful of rounds: a vector is enough
    s_round_t *l = realloc(self->landed, (self->nlanded + 1) * sizeof *l);
    if (!l)
        abort();
    self->landed = l;
    self->landed[self->nlanded++] = (s_round_t) { round_seq, n };
    self->stats.blocks_landed += n;
}

//  --------------------------------------------------------------------------
//  The seam (base/transport.h) over in-memory fabrics and channels

_Static_assert(offsetof(s_fabric_t, head) == 0, "a fabric begins with its pk_fabric_t");
_Static_assert(offsetof(pk_memtransport_t, head) == 0, "a channel begins with its pk_channel_t");

static pk_fabric_t *
s_fabric_open(const pk_fabric_config_t *config, void *base, uint64_t num_blocks,
              uint64_t block_len, int *rc_p, char *err)
{
    if (!base || !num_blocks || !block_len) {
        pk_err_null(rc_p, pk_err(err, -EINVAL, "mem: no pool"));
        return NULL;
    }
    s_fabric_t *self = calloc(1, sizeof *self);
    if (!self) {
        pk_err_null(rc_p, pk_err(err, -ENOMEM, "out of memory"));
        return NULL;
    }
    *self = (s_fabric_t) { { &s_ops }, base, num_blocks, block_len, { 0, 0, 0 } };
    if (rc_p)
        *rc_p = 0;
    return (pk_fabric_t *) self;
}

static void
s_fabric_close(pk_fabric_t **fabric_p)
{
    if (!fabric_p || !*fabric_p)
        return;
    free(*fabric_p);
    *fabric_p = NULL;
}

static void
s_fabric_describe(const pk_fabric_t *fabric, char *buf, size_t len)
{
    const s_fabric_t *self = (const s_fabric_t *) fabric;
    snprintf(buf, len, "in-memory transport, %llu blocks of %llu bytes",
             (unsigned long long) self->num_blocks, (unsigned long long) self->block_len);
}

static const char *
s_fabric_provider(const pk_fabric_t *fabric)
{
    return "mem";
}

static bool
s_fabric_has_cq_data(const pk_fabric_t *fabric)
{
    return true;
}

//  Blob: "PKMM", u64 num_blocks, block_len, u8 exposed.
static int
s_check_blob(pk_fabric_t *fabric, const uint8_t *blob, size_t len, char *err)
{
    s_fabric_t *self = (s_fabric_t *) fabric;
    uint64_t blocks, block_len;
    int rc = 0;
    if (!blob || len != S_MEM_BLOB_LEN || memcmp(blob, S_MEM_MAGIC, 4) != 0)
        rc = pk_err(err, -EPROTO, "agent_metadata: not a p2pkv in-memory address");
    else {
        memcpy(&blocks, blob + 4, 8);
        memcpy(&block_len, blob + 12, 8);
        if (block_len != self->block_len)
            rc = pk_err(err, -EPROTO, "agent_metadata: blocks of %llu bytes, ours are %llu",
                        (unsigned long long) block_len, (unsigned long long) self->block_len);
        else if (blob[20] > 1 || (blob[20] && blocks == 0))
            rc = pk_err(err, -EPROTO, "agent_metadata: a bad pool");
    }
    if (rc)
        self->stats.blobs_refused++;
    return rc;
}

static int
s_blob_provider(const uint8_t *blob, size_t len, char *out, size_t cap, char *err)
{
    if (!blob || len != S_MEM_BLOB_LEN || memcmp(blob, S_MEM_MAGIC, 4) != 0)
        return pk_err(err, -EPROTO, "agent_metadata: not a p2pkv in-memory address");
    snprintf(out, cap, "mem");
    return 0;
}

static void
s_fabric_stats(const pk_fabric_t *fabric, pk_fabric_stats_t *stats)
{
    *stats = ((const s_fabric_t *) fabric)->stats;
}

static pk_channel_t *
s_channel_new(pk_fabric_t *fabric, bool expose, int *rc_p, char *err)
{
    pk_memtransport_t *self = pk_memtransport_new();
    if (!self) {
        pk_err_null(rc_p, pk_err(err, -ENOMEM, "out of memory"));
        return NULL;
    }
    self->fabric = (s_fabric_t *) fabric;
    self->expose = expose;
    self->fabric->stats.channels_opened++;
    self->fabric->stats.channels_open++;
    if (rc_p)
        *rc_p = 0;
    return (pk_channel_t *) self;
}

static void
s_channel_close(pk_channel_t **channel_p)
{
    if (!channel_p || !*channel_p)
        return;
    pk_memtransport_t *self = (pk_memtransport_t *) *channel_p;
    if (self->fabric)
        self->fabric->stats.channels_open--;
    pk_memtransport_destroy(&self);
    *channel_p = NULL;
}

static int
s_channel_blob(pk_channel_t *channel, uint8_t **blob_p, size_t *len_p)
{
    pk_memtransport_t *self = (pk_memtransport_t *) channel;
    uint8_t *blob = malloc(S_MEM_BLOB_LEN);
    if (!blob)
        return -ENOMEM;
    memcpy(blob, S_MEM_MAGIC, 4);
    memcpy(blob + 4, &self->fabric->num_blocks, 8);
    memcpy(blob + 12, &self->fabric->block_len, 8);
    blob[20] = self->expose;
    *blob_p = blob;
    *len_p = S_MEM_BLOB_LEN;
    return 0;
}

static int
s_channel_connect(pk_channel_t *channel, const uint8_t *blob, size_t len, char *err)
{
    pk_memtransport_t *self = (pk_memtransport_t *) channel;
    int rc = s_check_blob((pk_fabric_t *) self->fabric, blob, len, err);
    if (rc)
        return rc;
    if (self->connected)
        return pk_err(err, -EISCONN, "mem: channel already has a peer");
    memcpy(&self->peer_blocks, blob + 4, 8);
    self->connected = true;
    return 0;
}

static int
s_channel_progress(pk_channel_t *channel)
{
    return 0;       //  the test moves everything
}

static int
s_channel_wait_fd(const pk_channel_t *channel)
{
    return -1;
}

static bool
s_channel_trywait(pk_channel_t *channel)
{
    return true;    //  nothing is ever due without the test
}

static uint64_t
s_channel_landed(pk_channel_t *channel, uint64_t round_seq)
{
    pk_memtransport_t *self = (pk_memtransport_t *) channel;
    for (size_t i = 0; i < self->nlanded; i++)
        if (self->landed[i].round == round_seq)
            return self->landed[i].count;
    return 0;
}

static void
s_channel_forget(pk_channel_t *channel, uint64_t round_seq)
{
    pk_memtransport_t *self = (pk_memtransport_t *) channel;
    for (size_t i = 0; i < self->nlanded; i++)
        if (self->landed[i].round == round_seq) {
            self->landed[i] = self->landed[--self->nlanded];
            return;
        }
}

static void
s_channel_revoke(pk_channel_t *channel)
{
    ((pk_memtransport_t *) channel)->expose = false;
}

static bool
s_channel_closed(const pk_channel_t *channel)
{
    return ((const pk_memtransport_t *) channel)->closed;
}

static void
s_channel_stats(const pk_channel_t *channel, pk_channel_stats_t *stats)
{
    const pk_memtransport_t *self = (const pk_memtransport_t *) channel;
    *stats = self->stats;
    stats->transfers = self->inflight;
}

static pk_transport_t
s_channel_transport(pk_channel_t *channel)
{
    return pk_memtransport_iface((pk_memtransport_t *) channel);
}

//  Never registered, so auto never finds it (rank 0).
static const pk_provider_t s_providers[] = {
    { "mem", false, 0 },
};

static const pk_transport_ops_t s_ops = {
    .size = sizeof (pk_transport_ops_t),
    .name = "mem",
    .fabric_open = s_fabric_open,
    .fabric_close = s_fabric_close,
    .fabric_describe = s_fabric_describe,
    .fabric_provider = s_fabric_provider,
    .fabric_has_cq_data = s_fabric_has_cq_data,
    .check_blob = s_check_blob,
    .blob_provider = s_blob_provider,
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
    .providers = s_providers,
    .nproviders = 1,
};

const pk_transport_ops_t *
pk_memtransport_ops(void)
{
    return &s_ops;
}

pk_memtransport_t *
pk_memtransport_of(pk_channel_t *channel)
{
    return (pk_memtransport_t *) channel;
}
