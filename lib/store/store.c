/*  store.c: the store, one lock around its parts (store.h).

    The parts are a class each: the pool's memory (pool.c), the blocks and
    their index (index.c), what a namespace sees (namespace.c), the pins'
    jobs (pins.c) and the tier under the pool (tier.h).  This file holds
    the one mutex, the clock and the counters of lookups, and says in
    which order the parts are asked: every public call takes the mutex
    once, for one short critical section, sweeps the expired leases where
    the call may meet them, and leaves copies of a block's bytes (put)
    outside it.
*/
#include "store/store.h"
#include "base/checksum.h"
#include "base/err.h"
#include "store/index.h"
#include "store/pins.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(PK_STORE_NO_BLOCK == PK_INDEX_NONE, "pins.c answers PK_INDEX_NONE");

//  The lookups made on behalf of one namespace.
typedef struct {
    uint64_t lookups, hits, pending, misses;
} s_ns_lookups_t;

struct _pk_store_t {
    pthread_mutex_t mutex;
    bool no_checksums;          //  config's: commits take no checksum
    pk_clock_t clock;
    double lease_timeout;
    pk_pool_t *pool;
    uint8_t *base;
    uint64_t num_blocks;
    uint64_t block_len;
    pk_index_t index;
    pk_pins_t pins;
    const pk_tier_ops_t *tier;  //  pk_tier_null_ops until set
    void *tier_self;
    bool kick_due;              //  a promote since the last pk_store_kick
    size_t open_lookups;
    uint64_t lookups, hits, pending, misses, probes;
    uint64_t sums_taken;            //  checksums taken here at commit (s_commit)
    s_ns_lookups_t *ns;         //  nns of them
    size_t nns;
    pk_evicted_t evicted;       //  recently evicted keys, for miss reasons
};

static double
s_now(pk_store_t *self)
{
    return self->clock.now(self->clock.self);
}

static bool
s_key_ok(const pk_key_t *key)
{
    return key && pk_index_keys_ok(key, 1);
}

//  The evict hook of the index: the tier takes the block's bytes before
//  they are reused.  It is given the key with pk_key_make's hash (the
//  index keeps the namespace's mix of it), one SipHash per eviction
//  outside the shared namespace.
static bool
s_evict(void *arg, uint32_t b, const pk_block_t *blk)
{
    pk_store_t *self = arg;
    pk_key_t key = { blk->key, blk->key_len,
                     blk->ns == PK_NS_SHARED ? blk->key_hash
                                             : pk_key_hash(blk->key, blk->key_len) };
    self->tier->evicted(self->tier_self, blk->ns, &key,
                        self->base + (size_t) b * self->block_len, self->block_len, blk->sum);
    pk_evicted_add(&self->evicted, blk->ns, &key);
    //  still held, below: no removal for the watch (the directory)
    return self->tier->query(self->tier_self, blk->ns, &key) != PK_TIER_ABSENT;
}

//  ---------------------------------------------------------------------------
//  Construction

pk_store_t *
pk_store_new(const char *name, uint64_t num_blocks, uint64_t block_len,
             const pk_store_config_t *config, pk_clock_t clock, pk_store_log_fn *log,
             void *log_arg, int *rc_p, char *err)
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
    self->clock = clock.now ? clock : pk_clock_system();
    self->lease_timeout = config->lease_timeout;
    self->no_checksums = config->no_checksums;
    self->num_blocks = num_blocks;
    self->block_len = block_len;
    self->tier = &pk_tier_null_ops;
    self->nns = config->namespaces ? config->namespaces : 1;
    pk_pins_init(&self->pins);
    if ((rc = -pthread_mutex_init(&self->mutex, NULL)))
        goto fail_self;
    rc = -ENOMEM;
    if (!(self->ns = calloc(self->nns, sizeof *self->ns)))
        goto fail_mutex;
    if ((rc = pk_evicted_init(&self->evicted, num_blocks)))
        goto fail_ns;
    //  The pool before the index: a pool the host cannot hold is refused
    //  before the index of its blocks is built (8 Mi blocks: some 10 s).
    self->pool = pk_pool_new(name, (size_t) (num_blocks * block_len), log, log_arg, &rc, err);
    if (!self->pool)
        goto fail_evicted;
    self->base = pk_pool_base(self->pool);
    if ((rc = pk_index_init(&self->index, num_blocks, self->nns)))
        goto fail_pool;
    self->index.evict = s_evict;
    self->index.evict_arg = self;
    if (rc_p)
        *rc_p = 0;
    return self;

fail_pool:
    pk_pool_destroy(&self->pool);
fail_evicted:
    pk_evicted_fini(&self->evicted);
fail_ns:
    free(self->ns);
fail_mutex:
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
    pk_pins_fini(&self->pins);
    pk_pool_destroy(&self->pool);
    pk_index_fini(&self->index);
    pk_evicted_fini(&self->evicted);
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
    return pk_pool_name(self->pool);
}

size_t
pk_store_namespaces(const pk_store_t *self)
{
    return self->nns;
}

int
pk_store_set_tier(pk_store_t *self, const pk_tier_ops_t *ops, void *tier)
{
    if (ops && ops->size < offsetof(pk_tier_ops_t, forget) + sizeof ops->forget)
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    self->tier = ops ? ops : &pk_tier_null_ops;
    self->tier_self = ops ? tier : NULL;
    pthread_mutex_unlock(&self->mutex);
    return 0;
}

//  ---------------------------------------------------------------------------
//  Lookup

//  A key the pool lacks, asked of the tier on behalf of ns: in ns and in
//  shared, always both (a tier need not know the namespace rule, and a
//  foreign key costs what an absent one does), own first.  A key the tier
//  holds still is promoted now.
static pk_lookup_result_t
s_tier_lookup(pk_store_t *self, unsigned ns, const pk_key_t *key)
{
    pk_tier_answer_t own = self->tier->query(self->tier_self, ns, key);
    pk_tier_answer_t shared = ns != PK_NS_SHARED
                              ? self->tier->query(self->tier_self, PK_NS_SHARED, key)
                              : PK_TIER_ABSENT;
    unsigned from = own != PK_TIER_ABSENT ? ns : PK_NS_SHARED;
    pk_tier_answer_t answer = own != PK_TIER_ABSENT ? own : shared;
    if (answer == PK_TIER_PRESENT) {
        if (self->tier->promote(self->tier_self, from, key) != 0)
            answer = PK_TIER_ABSENT;
        else
            self->kick_due = true;
    }
    return answer == PK_TIER_ABSENT ? PK_LOOKUP_MISS : PK_LOOKUP_HIT_PENDING;
}

pk_lookup_result_t
pk_store_lookup(pk_store_t *self, unsigned ns, const pk_key_t *key)
{
    if (ns >= self->nns)
        ns = PK_NS_SHARED;      //  an id the store was not made for sees shared only
    s_ns_lookups_t *c = &self->ns[ns];
    pthread_mutex_lock(&self->mutex);
    pk_index_expire(&self->index, s_now(self));
    uint32_t b = PK_INDEX_NONE;
    bool ok = s_key_ok(key);
    pk_block_t *blk = ok ? pk_ns_resolve(&self->index, ns, key, &b, &self->probes) : NULL;
    pk_lookup_result_t result = blk && blk->state == PK_BLOCK_READY ? PK_LOOKUP_HIT
                                : blk ? PK_LOOKUP_HIT_PENDING
                                : ok ? s_tier_lookup(self, ns, key) : PK_LOOKUP_MISS;
    self->lookups++;
    c->lookups++;
    if (result == PK_LOOKUP_HIT) {
        pk_index_use(&self->index, b);
        self->hits++;
        c->hits++;
    }
    else if (result == PK_LOOKUP_HIT_PENDING) {
        self->pending++;
        c->pending++;
    }
    else {
        self->misses++;
        c->misses++;
    }
    pthread_mutex_unlock(&self->mutex);
    return result;
}

pk_miss_reason_t
pk_store_miss_reason(pk_store_t *self, unsigned ns, const pk_key_t *key)
{
    if (ns >= self->nns)
        ns = PK_NS_SHARED;
    if (!s_key_ok(key))
        return PK_MISS_ABSENT;
    pthread_mutex_lock(&self->mutex);
    pk_index_expire(&self->index, s_now(self));
    uint64_t probes = 0;        //  not a lookup's: not counted
    pk_block_t *blk = pk_ns_resolve(&self->index, ns, key, NULL, &probes);
    //  READY now: it was not when the role polled it, and a lookup
    //  asked again finds it; the answer made was still a fair "absent"
    pk_miss_reason_t why = blk && blk->state == PK_BLOCK_WRITING ? PK_MISS_WRITING
                           : blk ? PK_MISS_ABSENT
                           : pk_evicted_has(&self->evicted, ns, key)
                             || (ns != PK_NS_SHARED
                                 && pk_evicted_has(&self->evicted, PK_NS_SHARED, key))
                           ? PK_MISS_EVICTED : PK_MISS_ABSENT;
    pthread_mutex_unlock(&self->mutex);
    return why;
}

//  ---------------------------------------------------------------------------
//  The engine's write path

int
pk_store_reserve(pk_store_t *self, uint64_t owner, unsigned ns, const pk_key_t *keys,
                 size_t n, uint32_t *blocks)
{
    if (owner == PK_STORE_OWNER_PUT || ns >= self->nns || !pk_index_keys_ok(keys, n)
        || (n && !blocks))
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    double now = s_now(self);
    pk_index_expire(&self->index, now);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        if (pk_index_find(&self->index, ns, &keys[i], NULL))
            rc = -EEXIST;
    if (!rc && pk_index_room(&self->index) < n)
        rc = -ENOSPC;
    size_t done = 0;
    while (!rc && done < n) {
        rc = pk_index_reserve(&self->index, owner, ns, &keys[done], now + self->lease_timeout,
                              &blocks[done]);
        if (!rc)
            done++;
    }
    //  The failed one undid itself; blocks evicted on the way stay free.
    for (size_t i = 0; rc && i < done; i++)
        pk_index_free_writing(&self->index, blocks[i]);
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

//  Mutex held.
static int
s_commit(pk_store_t *self, uint64_t owner, unsigned ns, const pk_key_t *keys, size_t n,
         const uint64_t *sums, const bool *given)
{
    pk_index_expire(&self->index, s_now(self));
    for (size_t i = 0; i < n; i++) {
        pk_block_t *blk = pk_index_find(&self->index, ns, &keys[i], NULL);
        if (!blk || blk->state != PK_BLOCK_WRITING || blk->owner != owner)
            return -ENOENT;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        pk_block_t *blk = pk_index_find(&self->index, ns, &keys[i], &b);
        if (blk->state != PK_BLOCK_WRITING)
            continue;           //  a repeated key
        //  The end-to-end checksum (base/checksum.h), taken once the
        //  writer is done and before anyone can pin the block: about 3 us
        //  for 64 KiB, under the mutex (a 1,024-block commit holds it
        //  about 3 ms; the writer's lease is what keeps others off the
        //  bytes, the mutex keeps the lease from ending meanwhile).
        uint64_t sum = blk->sum;
        if (self->no_checksums)
            ;
        else if (sums && given && given[i])
            sum = sums[i];      //  the writer's, taken while the bytes were in its cache
        else {
            sum = pk_checksum(self->base + (size_t) b * self->block_len, self->block_len);
            self->sums_taken++;
        }
        pk_index_commit(&self->index, b, sum);
        pk_evicted_forget(&self->evicted, ns, &keys[i]);
    }
    return 0;
}

int
pk_store_commit_sums(pk_store_t *self, uint64_t owner, unsigned ns, const pk_key_t *keys,
                     size_t n, const uint64_t *sums, const bool *given)
{
    if (owner == PK_STORE_OWNER_PUT || ns >= self->nns || !pk_index_keys_ok(keys, n))
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    int rc = s_commit(self, owner, ns, keys, n, sums, given);
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

int
pk_store_put(pk_store_t *self, unsigned ns, const pk_key_t *key, const void *data,
             size_t len)
{
    if (ns >= self->nns || !s_key_ok(key) || !data || len != self->block_len)
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    double now = s_now(self);
    pk_index_expire(&self->index, now);
    uint32_t b = 0;
    int rc = pk_index_room(&self->index) < 1
             ? -ENOSPC
             : pk_index_reserve(&self->index, PK_STORE_OWNER_PUT, ns, key,
                                now + self->lease_timeout, &b);
    pthread_mutex_unlock(&self->mutex);
    if (rc)
        return rc;
    //  A WRITING block is nobody else's to touch until its lease ends.
    memcpy(self->base + (size_t) b * self->block_len, data, len);
    pthread_mutex_lock(&self->mutex);
    rc = s_commit(self, PK_STORE_OWNER_PUT, ns, key, 1, NULL, NULL);
    pthread_mutex_unlock(&self->mutex);
    return rc == -ENOENT ? -ETIMEDOUT : rc;
}

int
pk_store_drop(pk_store_t *self, unsigned ns, const pk_key_t *keys, size_t n)
{
    if (ns >= self->nns || !pk_index_keys_ok(keys, n))
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        pk_block_t *blk = pk_index_find(&self->index, ns, &keys[i], NULL);
        if (blk && (blk->state != PK_BLOCK_READY || blk->pins))
            rc = -EBUSY;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        uint32_t b;
        if (pk_index_find(&self->index, ns, &keys[i], &b))
            pk_index_free_ready(&self->index, b);
        else if (self->index.change
                 && self->tier->query(self->tier_self, ns, &keys[i]) != PK_TIER_ABSENT)
            self->index.change(self->index.change_arg, false, &keys[i]);    //  held below only
        self->tier->forget(self->tier_self, ns, &keys[i]);
    }
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

//  ---------------------------------------------------------------------------
//  Pins and jobs

int
pk_store_pin(pk_store_t *self, unsigned ns, const pk_key_t *keys, size_t n,
             uint64_t *job_id, uint32_t *blocks, bool *pinned)
{
    if (!job_id || ns >= self->nns)
        return -EINVAL;
    int rc;
    pk_pin_job_t *job = pk_pins_job_new(keys, n, blocks, pinned, &rc);
    if (!job)
        return rc;
    pthread_mutex_lock(&self->mutex);
    pk_index_expire(&self->index, s_now(self));
    job->id = pk_pins_next_id(&self->pins);
    rc = pk_pins_file(&self->pins, &self->index, ns, job, keys, n, blocks, pinned,
                      &self->probes);
    pthread_mutex_unlock(&self->mutex);
    if (rc)
        free(job);
    else
        *job_id = job->id;
    return rc;
}

int
pk_store_pin_job(pk_store_t *self, unsigned ns, uint64_t job_id, const pk_key_t *keys,
                 size_t n, uint32_t *blocks, bool *pinned)
{
    if (ns >= self->nns)
        return -EINVAL;
    int rc;
    pk_pin_job_t *job = pk_pins_job_new(keys, n, blocks, pinned, &rc);
    if (!job)
        return rc;
    job->id = job_id;
    pthread_mutex_lock(&self->mutex);
    rc = pk_pins_id_free(&self->pins, job_id);
    if (!rc) {
        pk_index_expire(&self->index, s_now(self));
        rc = pk_pins_file(&self->pins, &self->index, ns, job, keys, n, blocks, pinned,
                          &self->probes);
    }
    pthread_mutex_unlock(&self->mutex);
    if (rc)
        free(job);
    return rc;
}

uint64_t
pk_store_new_job_id(pk_store_t *self)
{
    pthread_mutex_lock(&self->mutex);
    uint64_t id = pk_pins_next_id(&self->pins);
    pthread_mutex_unlock(&self->mutex);
    return id;
}

int
pk_store_release_job(pk_store_t *self, uint64_t job_id)
{
    pthread_mutex_lock(&self->mutex);
    pk_pin_job_t *job = pk_pins_release(&self->pins, &self->index, job_id);
    pthread_mutex_unlock(&self->mutex);
    if (!job)
        return -ENOENT;
    free(job);
    return 0;
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
        const pk_block_t *blk = blocks[i] < self->num_blocks
                                ? &self->index.blocks[blocks[i]] : NULL;
        if (!blk || blk->state != PK_BLOCK_READY || !blk->pins)
            rc = -EINVAL;
        else
            sums[i] = blk->sum;
    }
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

//  ---------------------------------------------------------------------------
//  Leases

size_t
pk_store_expire_leases(pk_store_t *self)
{
    pthread_mutex_lock(&self->mutex);
    size_t count = pk_index_expire(&self->index, s_now(self));
    pthread_mutex_unlock(&self->mutex);
    return count;
}

size_t
pk_store_release_owner(pk_store_t *self, uint64_t owner)
{
    if (owner == PK_STORE_OWNER_PUT)
        return 0;
    pthread_mutex_lock(&self->mutex);
    size_t count = pk_index_release_owner(&self->index, owner);
    pthread_mutex_unlock(&self->mutex);
    return count;
}

//  ---------------------------------------------------------------------------
//  Statistics, the directory's feed

void
pk_store_stats(pk_store_t *self, pk_store_stats_t *out)
{
    pthread_mutex_lock(&self->mutex);
    *out = (pk_store_stats_t) {
        .free = self->index.free.count,
        .writing = self->index.leases.count,
        .ready = self->index.ready,
        .pinned = self->index.pinned,
        .jobs = pk_pins_count(&self->pins),
        .open_lookups = self->open_lookups,
        .evictions = self->index.evictions,
        .lookups = self->lookups,
        .hits = self->hits,
        .pending = self->pending,
        .misses = self->misses,
        .expired = self->index.expired,
        .probes = self->probes,
        .sums_taken = self->sums_taken,
    };
    pthread_mutex_unlock(&self->mutex);
}

int
pk_store_ns_stats(pk_store_t *self, unsigned ns, pk_store_ns_stats_t *out)
{
    if (ns >= self->nns || !out)
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    const s_ns_lookups_t *c = &self->ns[ns];
    *out = (pk_store_ns_stats_t) {
        .ready = self->index.ns_ready[ns],
        .pinned = self->index.ns_pinned[ns],
        .lookups = c->lookups,
        .hits = c->hits,
        .pending = c->pending,
        .misses = c->misses,
    };
    pthread_mutex_unlock(&self->mutex);
    return 0;
}

void
pk_store_watch(pk_store_t *self, pk_store_watch_fn *fn, void *arg)
{
    pthread_mutex_lock(&self->mutex);
    self->index.change = fn;
    self->index.change_arg = arg;
    pthread_mutex_unlock(&self->mutex);
}

typedef struct {
    pk_store_watch_fn *fn;
    void *arg;
} s_snap_t;

static void
s_snap_tier(void *arg, unsigned ns, const pk_key_t *key)
{
    s_snap_t *snap = arg;
    snap->fn(snap->arg, true, key);
}

void
pk_store_snapshot(pk_store_t *self, void (*begin)(void *arg), pk_store_watch_fn *fn, void *arg)
{
    pthread_mutex_lock(&self->mutex);
    if (begin)
        begin(arg);
    for (uint64_t b = 0; b < self->num_blocks; b++)
        if (self->index.blocks[b].state == PK_BLOCK_READY) {
            pk_key_t key = pk_index_key(&self->index.blocks[b]);
            fn(arg, true, &key);
        }
    //  and the tier's (a key in both is listed twice: an add is idempotent)
    s_snap_t snap = { fn, arg };
    if (self->tier->size >= offsetof(pk_tier_ops_t, each) + sizeof self->tier->each
        && self->tier->each)
        self->tier->each(self->tier_self, s_snap_tier, &snap);
    pthread_mutex_unlock(&self->mutex);
}

void
pk_store_each_ready(pk_store_t *self, pk_store_block_fn *fn, void *arg)
{
    pthread_mutex_lock(&self->mutex);
    for (uint64_t b = 0; b < self->num_blocks; b++) {
        const pk_block_t *blk = &self->index.blocks[b];
        if (blk->state != PK_BLOCK_READY)
            continue;
        pk_key_t key = { blk->key, blk->key_len,
                         blk->ns == PK_NS_SHARED ? blk->key_hash
                                                 : pk_key_hash(blk->key, blk->key_len) };
        fn(arg, blk->ns, &key, self->base + (size_t) b * self->block_len, self->block_len,
           blk->sum);
    }
    pthread_mutex_unlock(&self->mutex);
}

void
pk_store_kick(pk_store_t *self)
{
    pthread_mutex_lock(&self->mutex);
    if (self->kick_due && self->tier->size >= offsetof(pk_tier_ops_t, kick)
                                              + sizeof self->tier->kick
        && self->tier->kick)
        self->tier->kick(self->tier_self);
    self->kick_due = false;
    pthread_mutex_unlock(&self->mutex);
}

//  ---------------------------------------------------------------------------
//  The parent seam (base/parent.h), in the shared namespace

static pk_lookup_result_t
s_parent_lookup(void *self, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    return pk_store_lookup(self, PK_NS_SHARED, key);
}

static int
s_parent_create_store_job(void *self, const pk_lookup_ctx_t *ctx, const pk_key_t *keys,
                          size_t n, uint64_t *job_id, uint32_t *blocks, bool *pinned,
                          uint8_t *why)
{
    (void) why;                 //  its keys' reasons are miss_reason's
    return pk_store_pin(self, PK_NS_SHARED, keys, n, job_id, blocks, pinned);
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

static int
s_parent_block_sums(void *self, const uint32_t *blocks, size_t n, uint64_t *sums)
{
    return pk_store_block_sums(self, blocks, n, sums);
}

static pk_miss_reason_t
s_parent_miss_reason(void *self, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    return pk_store_miss_reason(self, PK_NS_SHARED, key);
}

static void
s_parent_kick(void *self)
{
    pk_store_kick(self);
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
        .miss_reason = s_parent_miss_reason,
        .kick = s_parent_kick,
    };
}
