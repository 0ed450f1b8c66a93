/*  fair_channel.c: a session's transfers, handed to its channel as the
    scheduler grants them (fair_channel.h).

    Transfers are kept on one list in id order (ids ascend as they come),
    each with a copy of its block pairs (the role's arrays are scratch);
    the writes handed to the channel are kept in an array (the chunks),
    which is as long as this flow's share of the credit divided by the
    writes' size: a few dozen at most, so it is searched, not indexed.
    Every transfer is on the list until poll reported it or a cancel
    released it.
*/
#include "daemon/fair_channel.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct s_xfer {
    struct s_xfer *prev, *next;
    uint64_t tid;
    uint64_t round_seq;
    size_t n;                   //  blocks
    size_t handed;              //  blocks handed to the channel (or dropped)
    size_t out;                 //  its chunks the channel has not reported
    uint64_t landed;
    bool failed;
    bool waited;                //  its queueing delay was reported
    int refused;                //  the channel's error for a write refused
    double since;               //  write_blocks
    uint32_t *local, *remote;   //  n each, after the struct
} s_xfer_t;

typedef struct {
    uint64_t ctid;              //  the channel's transfer id
    s_xfer_t *x;
    uint64_t blocks;
} s_chunk_t;

struct _pk_fair_channel_t {
    pk_transport_t inner;
    pk_sched_flow_t *flow;
    double (*now)(void);
    pk_fair_wait_fn *on_wait;
    void *wait_arg;
    s_xfer_t *head, *tail;
    s_chunk_t *chunks;
    size_t nchunks, capchunks;
    uint64_t next_tid;
    uint64_t queued;            //  blocks not handed over, over every transfer
};

pk_fair_channel_t *
pk_fair_channel_new(pk_sched_t *sched, unsigned weight, pk_transport_t inner,
                    double (*now)(void), pk_fair_wait_fn *on_wait, void *wait_arg)
{
    pk_fair_channel_t *self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    if (!(self->flow = pk_sched_flow_new(sched, weight)))
        goto fail_self;
    self->inner = inner;
    self->now = now;
    self->on_wait = on_wait;
    self->wait_arg = wait_arg;
    self->next_tid = 1;
    return self;

fail_self:
    free(self);
fail:
    return NULL;
}

static void
s_xfer_unlink(pk_fair_channel_t *self, s_xfer_t *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        self->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    else
        self->tail = x->prev;
    free(x);
}

void
pk_fair_channel_destroy(pk_fair_channel_t **self_p)
{
    pk_fair_channel_t *self = *self_p;
    if (!self)
        return;
    while (self->head)
        s_xfer_unlink(self, self->head);
    //  wanted, granted and in flight all go back to the credit
    pk_sched_flow_destroy(&self->flow);
    free(self->chunks);
    free(self);
    *self_p = NULL;
}

//  What of x was not handed over is dropped: the scheduler forgets it.
static void
s_drop_rest(pk_fair_channel_t *self, s_xfer_t *x)
{
    size_t rest = x->n - x->handed;
    x->handed = x->n;
    self->queued -= rest;
    pk_sched_drop(self->flow, rest);
}

static int
s_chunk_add(pk_fair_channel_t *self, uint64_t ctid, s_xfer_t *x, uint64_t blocks)
{
    if (self->nchunks == self->capchunks) {
        size_t cap = self->capchunks ? 2 * self->capchunks : 16;
        s_chunk_t *c = realloc(self->chunks, cap * sizeof *c);
        if (!c)
            return -ENOMEM;
        self->chunks = c;
        self->capchunks = cap;
    }
    self->chunks[self->nchunks++] = (s_chunk_t) { ctid, x, blocks };
    return 0;
}

static s_chunk_t *
s_chunk_find(pk_fair_channel_t *self, uint64_t ctid)
{
    for (size_t i = 0; i < self->nchunks; i++)
        if (self->chunks[i].ctid == ctid)
            return &self->chunks[i];
    return NULL;
}

//  The chunk ended (reported, or released by a cancel): its credit goes
//  back.  The array keeps no order.
static void
s_chunk_end(pk_fair_channel_t *self, s_chunk_t *c)
{
    pk_sched_done(self->flow, c->blocks);
    c->x->out--;
    *c = self->chunks[--self->nchunks];
}

//  Hands up to g granted blocks of x to the channel as one write of at
//  most max blocks.  What was granted and not handed (a refused write)
//  goes back.
static uint64_t
s_hand(pk_fair_channel_t *self, s_xfer_t *x, uint64_t g, uint64_t max)
{
    uint64_t k = x->n - x->handed < g ? x->n - x->handed : g;
    if (k > max)
        k = max;
    int64_t ctid = self->inner.write_blocks(self->inner.self, x->round_seq,
                                            x->local + x->handed, x->remote + x->handed, k);
    if (ctid > 0 && s_chunk_add(self, (uint64_t) ctid, x, k) != 0) {
        //  the write is out and we cannot track it: cut it off
        uint64_t t = (uint64_t) ctid;
        self->inner.cancel(self->inner.self, &t, 1, PK_CANCEL_IMMEDIATE, &t);
        ctid = -ENOMEM;
    }
    if (ctid <= 0) {
        pk_sched_done(self->flow, k);
        x->failed = true;
        x->refused = ctid < 0 ? (int) ctid : -EIO;
        s_drop_rest(self, x);
        return k;
    }
    if (!x->waited) {
        x->waited = true;
        if (self->on_wait)
            self->on_wait(self->wait_arg, self->now() - x->since);
    }
    x->handed += k;
    x->out++;
    self->queued -= k;
    return k;
}

uint64_t
pk_fair_channel_pump(pk_fair_channel_t *self)
{
    if (self->queued == 0)
        return 0;
    uint64_t g = pk_sched_take(self->flow, self->queued), handed = 0;
    //  a turn per write while others want credit: it comes back as finely.
    //  Alone, one write of all that was granted: one consumer's 64 KiB x 32
    //  round in 8 writes of a quantum ran 0.74-0.94x of the same round
    //  without the scheduler over tcp (design.md, "On by default"); a
    //  session arriving meanwhile has the reserve at once
    uint64_t max = g > 0 && pk_sched_contended(self->flow) ? pk_sched_quantum(self->flow)
                                                           : UINT64_MAX;
    for (s_xfer_t *x = self->head; x && g > 0; x = x->next)
        while (g > 0 && x->handed < x->n) {
            uint64_t k = s_hand(self, x, g, max);
            g -= k;
            handed += k;
        }
    pk_sched_done(self->flow, g);       //  nothing left to hand it to
    return handed;
}

uint64_t
pk_fair_channel_queued(const pk_fair_channel_t *self)
{
    return self->queued;
}

static void
s_xfer_append(pk_fair_channel_t *self, s_xfer_t *x)
{
    x->prev = self->tail;
    if (self->tail)
        self->tail->next = x;
    else
        self->head = x;
    self->tail = x;
}

static int64_t
s_write_blocks(void *arg, uint64_t round_seq, const uint32_t *local, const uint32_t *remote,
               size_t n)
{
    pk_fair_channel_t *self = arg;
    if (n == 0)
        return -EINVAL;
    if (n > (SIZE_MAX - sizeof (s_xfer_t)) / (2 * sizeof *local))
        return -ENOMEM;
    s_xfer_t *x = calloc(1, sizeof *x + 2 * n * sizeof *local);
    if (!x)
        return -ENOMEM;
    x->local = (uint32_t *) (x + 1);
    x->remote = x->local + n;
    memcpy(x->local, local, n * sizeof *local);
    memcpy(x->remote, remote, n * sizeof *remote);
    x->tid = self->next_tid++;
    x->round_seq = round_seq;
    x->n = n;
    x->since = self->now();
    s_xfer_append(self, x);
    self->queued += n;
    pk_sched_want(self->flow, n);
    //  granted at once (credit was free): handed over now, so that the
    //  channel's refusal is the caller's, as without the scheduler
    pk_fair_channel_pump(self);
    if (x->failed && x->out == 0 && x->landed == 0 && x->handed == x->n && x == self->tail
        && !x->waited) {
        int rc = x->refused;
        s_xfer_unlink(self, x);
        self->next_tid--;
        return rc;
    }
    return (int64_t) x->tid;
}

static void
s_on_chunk(void *arg, uint64_t ctid, bool ok, uint64_t landed)
{
    pk_fair_channel_t *self = arg;
    s_chunk_t *c = s_chunk_find(self, ctid);
    if (!c)
        return;                 //  released by a cancel meanwhile
    s_xfer_t *x = c->x;
    x->landed += landed;
    if (!ok) {
        x->failed = true;
        s_drop_rest(self, x);
    }
    s_chunk_end(self, c);
}

//  Reports (and frees) the transfers nothing of which runs: every
//  successful one in ascending id, then every failed one (transport.h).
static void
s_poll(void *arg, pk_transfer_fn *each, void *earg)
{
    pk_fair_channel_t *self = arg;
    self->inner.poll(self->inner.self, s_on_chunk, self);
    for (int pass = 0; pass < 2; pass++)
        for (s_xfer_t *x = self->head, *next; x; x = next) {
            next = x->next;
            if (x->handed < x->n || x->out > 0 || x->failed != (pass == 1))
                continue;
            uint64_t tid = x->tid, landed = x->landed;
            bool ok = !x->failed;
            s_xfer_unlink(self, x);
            each(earg, tid, ok, landed);
        }
}

static s_xfer_t *
s_xfer_find(pk_fair_channel_t *self, uint64_t tid)
{
    for (s_xfer_t *x = self->head; x; x = x->next)
        if (x->tid == tid)
            return x;
    return NULL;
}

//  Cancels x's chunks on the channel; the ones it released end here.
static void
s_cancel_chunks(pk_fair_channel_t *self, s_xfer_t *x, pk_cancel_mode_t mode)
{
    if (x->out == 0)
        return;
    uint64_t *ctids = malloc(2 * x->out * sizeof *ctids);
    size_t n = 0;
    if (!ctids)
        return;                 //  they end when the channel reports them
    for (size_t i = 0; i < self->nchunks; i++)
        if (self->chunks[i].x == x)
            ctids[n++] = self->chunks[i].ctid;
    uint64_t *still = ctids + n;
    size_t nstill = self->inner.cancel(self->inner.self, ctids, n, mode, still);
    if (mode == PK_CANCEL_IMMEDIATE)
        nstill = 0;
    for (size_t i = 0; i < n; i++) {
        bool held = false;
        for (size_t j = 0; j < nstill && !held; j++)
            held = still[j] == ctids[i];
        s_chunk_t *c = held ? NULL : s_chunk_find(self, ctids[i]);
        if (c)
            s_chunk_end(self, c);
    }
    free(ctids);
}

static size_t
s_cancel(void *arg, const uint64_t *tids, size_t n, pk_cancel_mode_t mode, uint64_t *still)
{
    pk_fair_channel_t *self = arg;
    size_t nstill = 0;
    for (size_t i = 0; i < n; i++) {
        s_xfer_t *x = s_xfer_find(self, tids[i]);
        if (!x)
            continue;
        if (x->handed < x->n) {
            x->failed = true;
            s_drop_rest(self, x);
        }
        s_cancel_chunks(self, x, mode);
        if (mode == PK_CANCEL_WAIT && (x->out > 0 || x->landed > 0)) {
            //  writes run or some landed: reported by poll, with what landed
            still[nstill++] = x->tid;
            continue;
        }
        //  nothing of it can still land (immediate: the channel cut it
        //  off): released, never reported
        for (size_t c = 0; c < self->nchunks; )
            if (self->chunks[c].x == x)
                s_chunk_end(self, &self->chunks[c]);
            else
                c++;
        s_xfer_unlink(self, x);
    }
    return nstill;
}

//  A lent transfer (transport.h, lend) passes by the scheduler: the
//  server writes nothing of it, the consumer copies with its own core, so
//  there is no credit of the server's to share.  It is tracked as a
//  transfer of one chunk of no credit, so that poll and cancel treat it
//  as the channel does.
static int64_t
s_lend(void *arg, uint64_t round_seq, const uint32_t *local, const uint32_t *remote, size_t n)
{
    pk_fair_channel_t *self = arg;
    if (n == 0)
        return -EINVAL;
    s_xfer_t *x = calloc(1, sizeof *x);
    if (!x)
        return -ENOMEM;
    int64_t ctid = self->inner.lend(self->inner.self, round_seq, local, remote, n);
    if (ctid > 0 && s_chunk_add(self, (uint64_t) ctid, x, 0) != 0) {
        uint64_t t = (uint64_t) ctid;
        self->inner.cancel(self->inner.self, &t, 1, PK_CANCEL_IMMEDIATE, &t);
        ctid = -ENOMEM;
    }
    if (ctid <= 0) {
        free(x);
        return ctid < 0 ? ctid : -EIO;
    }
    x->tid = self->next_tid++;
    x->round_seq = round_seq;
    x->n = x->handed = n;
    x->out = 1;
    x->waited = true;           //  it never queued
    x->since = self->now();
    s_xfer_append(self, x);
    return (int64_t) x->tid;
}

//  The rails' per-rail counts are the inner channel's: the scheduler
//  only delays writes, it never moves them between rails.
static size_t
s_rails_landing(void *arg, uint64_t round_seq, uint64_t *counts, size_t cap)
{
    pk_fair_channel_t *self = arg;
    return self->inner.rails_landing(self->inner.self, round_seq, counts, cap);
}

static size_t
s_rails_slices(void *arg, uint64_t round_seq, uint64_t *counts, size_t cap)
{
    pk_fair_channel_t *self = arg;
    return self->inner.rails_slices(self->inner.self, round_seq, counts, cap);
}

static uint32_t
s_rails_failed(void *arg, uint64_t round_seq)
{
    pk_fair_channel_t *self = arg;
    return self->inner.rails_failed(self->inner.self, round_seq);
}

//  A rail's rejoining is the inner channel's too: the scheduler's credit
//  is per session, not per rail.
static int
s_rail_rejoin(void *arg, size_t peer_rail, const uint8_t *blob, size_t len, char *err)
{
    pk_fair_channel_t *self = arg;
    return self->inner.rail_rejoin(self->inner.self, peer_rail, blob, len, err);
}

pk_transport_t
pk_fair_channel_transport(pk_fair_channel_t *self)
{
    return (pk_transport_t) { .self = self, .write_blocks = s_write_blocks, .poll = s_poll,
                              .cancel = s_cancel, .lend = self->inner.lend ? s_lend : NULL,
                              .rails_landing = self->inner.rails_landing ? s_rails_landing : NULL,
                              .rails_failed = self->inner.rails_failed ? s_rails_failed : NULL,
                              .rail_rejoin = self->inner.rail_rejoin ? s_rail_rejoin : NULL,
                              .rails_slices = self->inner.rails_slices ? s_rails_slices : NULL };
}
