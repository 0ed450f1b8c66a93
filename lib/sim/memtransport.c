/*  transport.c: the in-memory transport.  Ids are dense, so a transfer's
    state is one byte in a vector indexed by id; poll sorts only what
    finished since the last poll.  */
#include "sim/memtransport.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { S_GONE = 0, S_INFLIGHT, S_DONE, S_FAILED };
#define S_HELD 0x10

struct _pk_memtransport_t {
    uint8_t *state;         //  by id; id 0 unused
    size_t cap;
    uint64_t next_tid;
    size_t inflight;        //  submitted, not yet reported or released
    size_t refuse;
    uint64_t *finished;     //  ids completed since the last poll
    size_t nfinished, capfinished;
};

pk_memtransport_t *
pk_memtransport_new(void)
{
    pk_memtransport_t *self = calloc(1, sizeof *self);
    if (self)
        self->next_tid = 1;
    return self;
}

void
pk_memtransport_destroy(pk_memtransport_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->state);
    free((*self_p)->finished);
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
    return (pk_transport_t) { self, s_write_blocks, s_poll, s_cancel };
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
