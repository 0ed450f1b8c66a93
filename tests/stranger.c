/*  stranger.c: a stranger on the data plane (stranger.h).

    It drives the raw endpoint of an ofi channel of its own (ofi_bench.h),
    connected to the target's address, and never lets the channel's own
    progress read its queue: every completion on it is one of ours.  Each
    guess goes out on a fresh channel: tcp's target drops a connection at
    its first write under an unknown key ("invalid rma iov received"), and
    the writes after it on that connection would complete at the stranger
    without ever being checked at the target, so they would not be tries.
*/
#include "stranger.h"
#include "base/clock.h"
#include "base/err.h"
#include "ofi/ofi.h"
#include "ofi/ofi_bench.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_BLOCKS 4

struct _ts_stranger_t;
static int s_fresh_channel(struct _ts_stranger_t *self, char *err);

struct _ts_stranger_t {
    uint8_t *pool;
    pk_ofi_t *ofi;
    pk_ofi_channel_t *ch;           //  the one the current guess goes out on
    pk_ofi_raw_t raw;
    uint8_t *blob;
    size_t len;
    uint64_t block_len;
    struct fi_context ctx;
};

//  A new endpoint, connected to the target's address: a new connection.
static int
s_fresh_channel(ts_stranger_t *self, char *err)
{
    int rc = 0;
    pk_ofi_channel_destroy(&self->ch);
    self->ch = pk_ofi_channel_new(self->ofi, false, &rc, err);
    if (!self->ch)
        return rc;
    if ((rc = pk_ofi_channel_connect(self->ch, self->blob, self->len, err)) != 0
        || (rc = pk_ofi_bench_raw((pk_channel_t *) self->ch, &self->raw)) != 0) {
        pk_ofi_channel_destroy(&self->ch);
        return rc;
    }
    return 0;
}

ts_stranger_t *
ts_stranger_new(const uint8_t *blob, size_t len, uint64_t block_len, uint8_t fill, char *err)
{
    int rc = 0;
    ts_stranger_t *self = calloc(1, sizeof *self);
    if (!self) {
        pk_err(err, -ENOMEM, "out of memory");
        return NULL;
    }
    self->block_len = block_len;
    self->pool = aligned_alloc(4096, S_BLOCKS * block_len);
    if (!self->pool) {
        pk_err(err, -ENOMEM, "out of memory");
        goto fail_self;
    }
    memset(self->pool, fill, S_BLOCKS * block_len);
    pk_ofi_config_t config = { "tcp", "127.0.0.1", 2.0 };
    self->ofi = pk_ofi_new(&config, self->pool, S_BLOCKS, block_len, &rc, err);
    if (!self->ofi)
        goto fail_pool;
    self->blob = malloc(len);
    if (!self->blob) {
        pk_err(err, -ENOMEM, "out of memory");
        goto fail_ofi;
    }
    memcpy(self->blob, blob, len);
    self->len = len;
    if (s_fresh_channel(self, err) != 0)
        goto fail_blob;
    return self;

fail_blob:
    free(self->blob);
fail_ofi:
    pk_ofi_destroy(&self->ofi);
fail_pool:
    free(self->pool);
fail_self:
    free(self);
    return NULL;
}

void
ts_stranger_destroy(ts_stranger_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ts_stranger_t *self = *self_p;
    pk_ofi_channel_destroy(&self->ch);
    pk_ofi_destroy(&self->ofi);
    free(self->blob);
    free(self->pool);
    free(self);
    *self_p = NULL;
}

uint64_t
ts_stranger_blob_key(const ts_stranger_t *self)
{
    return self->raw.key;
}

//  The one write in flight ended: 1 completed, 0 failed, or -EAGAIN.
static int
s_reap(ts_stranger_t *self)
{
    struct fi_cq_data_entry entry;
    ssize_t got = fi_cq_read(self->raw.cq, &entry, 1);
    if (got == 1)
        return 1;
    if (got == -FI_EAVAIL) {
        struct fi_cq_err_entry e = { 0 };
        if (fi_cq_readerr(self->raw.cq, &e, 0) == 1)
            return 0;
    }
    return -EAGAIN;
}

int64_t
ts_stranger_write(ts_stranger_t *self, const uint64_t *keys, size_t n, uint64_t blocks,
                  double timeout, ts_progress_fn *progress, void *arg)
{
    double deadline = pk_clock_monotonic() + timeout;
    int64_t completed = 0;
    uint64_t data = (UINT64_C(1) << 12) | 1;       //  round tag 1, one block
    char err[PK_ERRLEN] = "";
    for (size_t i = 0; i < n; i++) {
        if (s_fresh_channel(self, err) != 0)
            return -ENOTCONN;
        uint64_t remote = self->raw.remote_base + (i % blocks) * self->block_len;
        ssize_t rc;
        while ((rc = fi_writedata(self->raw.ep, self->raw.base, self->block_len,
                                  self->raw.desc, data, self->raw.peer, remote, keys[i],
                                  &self->ctx)) == -FI_EAGAIN) {
            (void) s_reap(self);
            if (progress)
                progress(arg);
            if (pk_clock_monotonic() > deadline)
                return -ETIMEDOUT;
        }
        if (rc != 0)
            continue;               //  refused at once: nothing was sent
        int ended;
        while ((ended = s_reap(self)) == -EAGAIN) {
            if (progress)
                progress(arg);
            if (pk_clock_monotonic() > deadline)
                return -ETIMEDOUT;
        }
        completed += ended;
    }
    return completed;
}

uint64_t *
ts_guessed_keys(size_t count)
{
    if (sodium_init() < 0)
        return NULL;
    uint64_t *keys = malloc(2 * count * sizeof *keys);
    if (!keys)
        return NULL;
    for (size_t i = 0; i < count; i++)
        keys[i] = i + 1;
    randombytes_buf(keys + count, count * sizeof *keys);
    return keys;
}
