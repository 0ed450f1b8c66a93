/*  quota.c: the pin quota as a decorator of the store's seam (quota.h).  */
#include "roles/quota.h"

#include "base/keymap.h"

#include <errno.h>
#include <stdlib.h>

struct _pk_quota_t {
    pk_parent_t inner;
    uint64_t limit;
    uint64_t pinned;
    pk_keymap_t jobs;           //  job id (its 8 bytes, malloc'd) -> blocks charged
};

pk_quota_t *
pk_quota_new(uint64_t limit, pk_parent_t inner)
{
    pk_quota_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->inner = inner;
    self->limit = limit;
    return self;
}

void
pk_quota_destroy(pk_quota_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_quota_t *self = *self_p;
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->jobs, &at)); )
        free((void *) e->key.bytes);
    pk_keymap_fini(&self->jobs);
    free(self);
    *self_p = NULL;
}

//  The keymap holds views, so each job's id gets 8 bytes of its own.
static int
s_file(pk_quota_t *self, uint64_t job_id, uint64_t n)
{
    pk_key_t key = pk_key_make((const uint8_t *) &job_id, sizeof job_id);
    if (pk_keymap_find(&self->jobs, &key))
        return -EEXIST;
    uint64_t *id = malloc(sizeof *id);
    if (!id)
        return -ENOMEM;
    *id = job_id;
    key.bytes = (const uint8_t *) id;
    int rc = pk_keymap_put(&self->jobs, &key, n, 0);
    if (rc < 0) {
        free(id);
        return rc;
    }
    self->pinned += n;
    return 0;
}

static void
s_unfile(pk_quota_t *self, uint64_t job_id)
{
    pk_key_t key = pk_key_make((const uint8_t *) &job_id, sizeof job_id);
    pk_keymap_entry_t *e = pk_keymap_find(&self->jobs, &key);
    if (!e)
        return;
    const void *bytes = e->key.bytes;
    self->pinned -= e->a;
    pk_keymap_take(&self->jobs, &key, NULL, NULL);
    free((void *) bytes);
}

int
pk_quota_charge(pk_quota_t *self, uint64_t job_id, uint64_t n)
{
    if (n > self->limit - (self->pinned < self->limit ? self->pinned : self->limit))
        return -EDQUOT;
    return s_file(self, job_id, n);
}

void
pk_quota_discharge(pk_quota_t *self, uint64_t job_id)
{
    s_unfile(self, job_id);
}

uint64_t
pk_quota_pinned(const pk_quota_t *self)
{
    return self->pinned;
}

uint64_t
pk_quota_limit(const pk_quota_t *self)
{
    return self->limit;
}

//  --------------------------------------------------------------------------
//  The decorated seam

static pk_lookup_result_t
s_lookup(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    pk_quota_t *self = arg;
    return self->inner.lookup(self->inner.self, key, ctx);
}

static int
s_create_store_job(void *arg, const pk_lookup_ctx_t *ctx, const pk_key_t *keys, size_t n,
                   uint64_t *job_id, uint32_t *blocks, bool *pinned, uint8_t *why)
{
    pk_quota_t *self = arg;
    //  Keys beyond the room left are not offered to the store: they answer
    //  as misses (protocol.md section 6), and the consumer asks again once
    //  earlier fetches have given their blocks back.
    uint64_t room = self->pinned < self->limit ? self->limit - self->pinned : 0;
    size_t ask = n < room ? n : (size_t) room;
    int rc = self->inner.create_store_job(self->inner.self, ctx, keys, ask, job_id, blocks,
                                          pinned, why);
    if (rc)
        return rc;
    uint64_t got = 0;
    for (size_t i = 0; i < n; i++) {
        if (i >= ask) {
            pinned[i] = false;
            if (why)
                why[i] = PK_MISS_QUOTA;     //  its miss says so (miss_reason.h)
        }
        got += pinned[i];
    }
    rc = s_file(self, *job_id, got);
    if (rc) {
        //  An uncounted pin would let the consumer past its quota: give
        //  the job back, so that nothing is pinned, as the seam promises.
        self->inner.store_result(self->inner.self, *job_id, false);
        return rc;
    }
    return 0;
}

static void
s_on_new_request(void *arg, const pk_lookup_ctx_t *ctx)
{
    pk_quota_t *self = arg;
    self->inner.on_new_request(self->inner.self, ctx);
}

static void
s_on_request_finished(void *arg, const pk_lookup_ctx_t *ctx)
{
    pk_quota_t *self = arg;
    self->inner.on_request_finished(self->inner.self, ctx);
}

static void
s_store_result(void *arg, uint64_t job_id, bool success)
{
    pk_quota_t *self = arg;
    s_unfile(self, job_id);
    self->inner.store_result(self->inner.self, job_id, success);
}

static pk_miss_reason_t
s_miss_reason(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    pk_quota_t *self = arg;
    return self->inner.miss_reason(self->inner.self, key, ctx);
}

static int
s_block_sums(void *arg, const uint32_t *blocks, size_t n, uint64_t *sums)
{
    pk_quota_t *self = arg;
    return self->inner.block_sums(self->inner.self, blocks, n, sums);
}

static void
s_kick(void *self_)
{
    pk_quota_t *self = self_;
    self->inner.kick(self->inner.self);
}

pk_parent_t
pk_quota_parent(pk_quota_t *self)
{
    return (pk_parent_t) { .self = self, .lookup = s_lookup,
                           .create_store_job = s_create_store_job,
                           .on_new_request = s_on_new_request,
                           .on_request_finished = s_on_request_finished,
                           .store_result = s_store_result,
                           .block_sums = self->inner.block_sums ? s_block_sums : NULL,
                           .miss_reason = self->inner.miss_reason ? s_miss_reason : NULL,
                           .kick = self->inner.kick ? s_kick : NULL };
}
