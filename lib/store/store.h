/*  store.h: the block store, the node's pool of KV-cache blocks and the
    server role's parent.

    The pool is num_blocks x block_len bytes of shared memory (pool.h) that
    the local engine maps and writes into; the store keeps the index from
    key to block and each block's state: FREE, WRITING (reserved by the
    engine, under a lease) or READY (index.h).  Remote lookups pin READY
    blocks for as long as a transfer may read them (pins.h); unpinned READY
    blocks are evicted least recently used when the engine needs room, and
    handed to the tier under the pool first (tier.h; the null tier by
    default).  All actors of a node share one store: every call is
    thread-safe and holds one short critical section, and costs in
    proportion to its own input.

    Keys are copied into the store (up to PK_MAX_KEY_BYTES bytes); the
    caller's pk_key_t must carry pk_key_make's hash.

    Namespaces (namespace.h): every operation names one; PK_NS_SHARED is
    the one a store made without namespaces has.  Writes (reserve,
    commit, put, drop) act on their namespace only; reads on behalf of
    namespace ns (lookup, pin) see ns and shared, and always probe both:
    a key held only by another namespace answers exactly like an absent
    one, at the same cost.
*/
#ifndef PK_STORE_H_INCLUDED
#define PK_STORE_H_INCLUDED

#include "base/clock.h"
#include "base/counts.h"
#include "base/key.h"
#include "base/parent.h"
#include "store/evicted.h"
#include "store/namespace.h"
#include "store/pool.h"
#include "store/tier.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*  blocks[i] of a key that was not pinned.  */
#define PK_STORE_NO_BLOCK UINT32_MAX

/*  The owner under which pk_store_put holds its reservation while it
    copies; reserve, commit and release_owner refuse it.  */
#define PK_STORE_OWNER_PUT UINT64_MAX

typedef struct {
    double lease_timeout;       //  a reservation not committed by then is freed (30 s)
    size_t namespaces;          //  0 or 1: the shared one only; at most PK_NS_MAX
    bool no_checksums;          //  take no block checksums at commit (--block-checksums
                                //  off: lookup answers then carry none)
} pk_store_config_t;

#define PK_STORE_CONFIG_DEFAULT { 30.0, 1, false }

/*  Where pk_store_new says that it reclaimed a dead owner's pool.  */
typedef pk_pool_log_fn pk_store_log_fn;

/*  The store's counts, each with the metric the daemon exports for it, if
    any (base/counts.h; metric_families.h): blocks by state (free +
    writing + ready = num_blocks; gauges, read from the index by
    pk_store_stats), the pins and lookups open, and counters.  A new count
    is a row here and its line in store.c (the count, and its line in
    pk_store_stats; one the index counts is also a field of index.h).  */
#define PK_STORE_COUNTS(M, F) \
    M(free, POOL_FREE, "p2pkv_pool_free_blocks", GAUGE, "Pool blocks free", NONE) \
    M(writing, POOL_WRITING, "p2pkv_pool_writing_blocks", GAUGE, \
      "Pool blocks reserved by the engine", NONE) \
    M(ready, POOL_READY, "p2pkv_pool_ready_blocks", GAUGE, "Pool blocks holding a key", NONE) \
    M(pinned, POOL_PINNED, "p2pkv_pool_pinned_blocks", GAUGE, \
      "Pool blocks pinned by transfers", NONE)  /* READY ones with at least one pin */ \
    F(jobs)                         /* pin jobs not yet released */ \
    F(open_lookups)                 /* the parent's on_new_request minus on_request_finished */ \
    M(evictions, POOL_EVICTIONS, "p2pkv_pool_evictions_total", COUNTER, \
      "Blocks evicted from the pool", NONE) \
    F(lookups)                      /* = hits + pending + misses */ \
    F(hits) \
    F(pending)                      /* answered HIT_PENDING (being written, or the tier's) */ \
    F(misses) \
    F(expired)                      /* leases that ran out */ \
    F(probes)                       /* index probes of lookups and pins: 2 a key, 1 in shared */ \
    M(sums_taken, POOL_SUMS_TAKEN, "p2pkv_pool_checksums_taken_total", COUNTER, \
      "Blocks the server read to take their checksum at commit (none came from the writer)", \
      NONE)

typedef struct {
    PK_STORE_COUNTS(PK_COUNT_FIELD, PK_COUNT_FIELD_ONLY)
} pk_store_stats_t;

/*  One namespace's share, each count with its metric (labelled by the
    namespace's name): its blocks READY and pinned (by the block's
    namespace), and the lookups made on its behalf (by the asker's
    namespace; a hit may be on a shared block).  A new count is a row
    here and its lines in store.c (the count, and pk_store_ns_stats).  */
#define PK_STORE_NS_COUNTS(M, F) \
    M(ready, NS_READY, "p2pkv_namespace_ready_blocks", GAUGE, \
      "Pool blocks holding a key, by namespace", NAMESPACE) \
    M(pinned, NS_PINNED, "p2pkv_namespace_pinned_blocks", GAUGE, \
      "Pool blocks pinned by transfers, by namespace", NAMESPACE) \
    M(lookups, NS_LOOKUPS, "p2pkv_namespace_lookups_total", COUNTER, \
      "Keys looked up in the pool, by the consumer's namespace", NAMESPACE) \
    M(hits, NS_HITS, "p2pkv_namespace_hits_total", COUNTER, \
      "Keys looked up and found ready (own or shared), by the consumer's namespace", \
      NAMESPACE) \
    F(pending)                      /* answered HIT_PENDING */ \
    M(misses, NS_MISSES, "p2pkv_namespace_misses_total", COUNTER, \
      "Keys looked up and not found (another namespace's count as absent), by the " \
      "consumer's namespace", NAMESPACE)

typedef struct {
    PK_STORE_NS_COUNTS(PK_COUNT_FIELD, PK_COUNT_FIELD_ONLY)
} pk_store_ns_stats_t;

typedef struct _pk_store_t pk_store_t;

/*  Creates the pool (pool.h: in the shared-memory object name, "/p2pkv-
    <something>", or in anonymous shared memory if name is NULL; a named
    one locked, a dead owner's reclaimed with one line to log, NULL:
    standard error) and an empty index.  num_blocks is 1..2^31, block_len
    at least 1, and the pool must fit in an off_t.  config NULL means
    PK_STORE_CONFIG_DEFAULT; a clock without now means CLOCK_MONOTONIC.
    Returns NULL on failure with the reason in *rc_p (may be NULL) and,
    when a named pool fails, a sentence naming it in err (PK_ERRLEN bytes,
    or NULL): -EINVAL, -EEXIST (a live store holds the name), -ENOMEM,
    -ENOSPC, or what shm_open, flock, ftruncate, posix_fallocate or mmap
    said.  */
pk_store_t *pk_store_new(const char *name, uint64_t num_blocks, uint64_t block_len,
                         const pk_store_config_t *config, pk_clock_t clock,
                         pk_store_log_fn *log, void *log_arg, int *rc_p, char *err);

/*  Unmaps the pool, removes its shared-memory object and drops its
    lock.  Pins and reservations still held die with it.  The tier is
    the caller's.  */
void pk_store_destroy(pk_store_t **self_p);

void *pk_store_base(const pk_store_t *self);
uint64_t pk_store_num_blocks(const pk_store_t *self);
uint64_t pk_store_block_len(const pk_store_t *self);
const char *pk_store_name(const pk_store_t *self);      //  NULL for anonymous memory
size_t pk_store_namespaces(const pk_store_t *self);

/*  Puts a tier under the pool (tier.h): ops and its self, or NULL for the
    null tier.  -EINVAL for a table shorter than the ops the store calls.
    The tier must stay alive until another replaces it or the store is
    destroyed.  */
int pk_store_set_tier(pk_store_t *self, const pk_tier_ops_t *ops, void *tier);

/*  On behalf of namespace ns: ns's block if READY (HIT, a use for the
    LRU), else shared's if READY, else HIT_PENDING if either is being
    written, else what the tier says (HIT_PENDING while it brings the key
    up), else MISS.  An ns the store has not (>= namespaces) looks at
    shared only.  */
pk_lookup_result_t pk_store_lookup(pk_store_t *self, unsigned ns, const pk_key_t *key);

/*  Why key, answered as a miss to a reader in namespace ns, is one
    (base/miss_reason.h), seen as pk_store_lookup sees it: WRITING when
    ns's or shared's block is reserved and not committed, EVICTED when
    neither holds it and one of them evicted it recently (evicted.h),
    else ABSENT (a key only other namespaces hold, write or evicted is
    absent to ns).  No lookup is counted.  */
pk_miss_reason_t pk_store_miss_reason(pk_store_t *self, unsigned ns, const pk_key_t *key);

/*  The engine's write path, in namespace ns (-EINVAL for one the store
    has not).  reserve takes n blocks in WRITING state for n new keys,
    under owner's lease, evicting LRU blocks if nothing is free, and
    returns them in blocks[]; all or nothing: -EEXIST if a key is present
    in ns itself (or repeated), whatever other namespaces hold, -ENOSPC at
    once if fewer than n blocks are free or evictable, -EINVAL for a bad
    key or PK_STORE_OWNER_PUT.  */
int pk_store_reserve(pk_store_t *self, uint64_t owner, unsigned ns, const pk_key_t *keys,
                     size_t n, uint32_t *blocks);
/*  Makes them READY; all or nothing: -ENOENT if a key is not WRITING
    under owner (its lease may have expired).  Each block's checksum
    (base/checksum.h) is the writer's where given[i] (sums[i], taken while
    it wrote them), else the store takes it from the bytes; sums NULL:
    all the store's.  */
int pk_store_commit_sums(pk_store_t *self, uint64_t owner, unsigned ns, const pk_key_t *keys,
                         size_t n, const uint64_t *sums, const bool *given);

/*  Reserve, copy and commit one block by value in ns; len must be
    block_len (-EINVAL).  The copy runs outside the lock.  -ETIMEDOUT if
    the lease ran out during the copy.  */
int pk_store_put(pk_store_t *self, unsigned ns, const pk_key_t *key, const void *data,
                 size_t len);

/*  Removes READY keys of ns (and tells the tier to forget them); absent
    keys are ignored.  All or nothing: -EBUSY if a key is pinned or
    WRITING (a reservation ends by commit, lease or release_owner, never
    by drop).  */
int pk_store_drop(pk_store_t *self, unsigned ns, const pk_key_t *keys, size_t n);

/*  Pins, on behalf of namespace ns, the READY keys of keys[] (each
    resolved as pk_store_lookup does; the tier is not asked) as one new
    job: *job_id is the next id of the store's one counter, and for each
    key pinned[i] and blocks[i] (PK_STORE_NO_BLOCK when not pinned:
    absent or still WRITING, e.g. evicted since the caller's lookup).
    The job exists even if nothing was pinned.  Returns 0, or -EINVAL /
    -ENOMEM with nothing pinned.  */
int pk_store_pin(pk_store_t *self, unsigned ns, const pk_key_t *keys, size_t n,
                 uint64_t *job_id, uint32_t *blocks, bool *pinned);

/*  The same under an id from pk_store_new_job_id (the engine's
    prefill/decode stores): -EINVAL if the counter never gave it, -EEXIST
    if a job with that id is live.  */
int pk_store_pin_job(pk_store_t *self, unsigned ns, uint64_t job_id, const pk_key_t *keys,
                     size_t n, uint32_t *blocks, bool *pinned);

/*  Takes the next id from the counter pk_store_pin uses (the first is 1).  */
uint64_t pk_store_new_job_id(pk_store_t *self);

/*  Unpins every block of the job and forgets it; -ENOENT for an unknown job.  */
int pk_store_release_job(pk_store_t *self, uint64_t job_id);

/*  The checksums (base/checksum.h) of n pinned blocks, taken at their
    commit: 0, -EINVAL when one is not a pinned READY block, -ENOTSUP when
    the store takes none (no_checksums).  */
int pk_store_block_sums(pk_store_t *self, const uint32_t *blocks, size_t n, uint64_t *sums);

/*  Frees every reservation whose lease ran out; returns how many.  Reserve,
    commit, lookup and pin sweep too.  */
size_t pk_store_expire_leases(pk_store_t *self);

/*  Frees every WRITING block of owner (its engine connection went away);
    returns how many.  */
size_t pk_store_release_owner(pk_store_t *self, uint64_t owner);

/*  The whole store's counts, and namespace ns's share of them (0, or
    -EINVAL past namespaces): two structs, not one call, because the
    metrics and `p2pkv stats` read the whole once and the shares per
    namespace.  */
void pk_store_stats(pk_store_t *self, pk_store_stats_t *out);
int pk_store_ns_stats(pk_store_t *self, unsigned ns, pk_store_ns_stats_t *out);

/*  The directory's feed (issue 14): fn hears every change of the set of
    keys the store holds READY, added (commit, put: WRITING -> READY) or
    removed (drop, eviction: READY -> FREE; an eviction the tier under
    the pool took is none, and a drop of a key only the tier holds is
    one: tier.h).  It runs inside the store's
    critical section, on the thread that made the change, so it sees the
    changes in their true order; it must be short and must not call the
    store (the directory copies the key into its bounded queue).  A lease
    that runs out is no change: a WRITING key was never held.  fn NULL
    stops it.  */
typedef void (pk_store_watch_fn)(void *arg, bool added, const pk_key_t *key);
void pk_store_watch(pk_store_t *self, pk_store_watch_fn *fn, void *arg);

/*  Under one hold of the lock: begin(arg), then fn(arg, true, key) for
    every READY key, and every key the tier under the pool holds
    (tier.h: those are held too, and an eviction the tier took is no
    removal for the watch).  The watch's calls after it are exactly the changes
    since, so begin may discard what the watch queued before.  Costs one
    pass over the pool's blocks inside the critical section (a resync
    after start, a lost directory or a full queue, not a steady cost).  */
void pk_store_snapshot(pk_store_t *self, void (*begin)(void *arg), pk_store_watch_fn *fn,
                       void *arg);

/*  Under one hold of the lock: fn for every READY block, its namespace,
    key (with pk_key_make's hash), bytes and checksum (0: none taken): a
    clean stop's write-out of the pool to the tier under it
    (tier/disk_tier.h).  fn may wait, bounded: every other call of the
    store waits meanwhile, which is why only a stop calls it.  */
typedef void (pk_store_block_fn)(void *arg, unsigned ns, const pk_key_t *key,
                                 const void *bytes, size_t len, uint64_t sum);
void pk_store_each_ready(pk_store_t *self, pk_store_block_fn *fn, void *arg);

/*  Starts the promotions the lookups since the last kick asked of the
    tier, together (tier.h, kick): a caller that looked keys up kicks
    once after its pass (the role through its parent seam, the engine's
    pull).  One lock hold; nothing when no lookup promoted.  */
void pk_store_kick(pk_store_t *self);

/*  The server role's parent seam (base/parent.h), served by this store in
    the shared namespace: lookup is pk_store_lookup, create_store_job
    pk_store_pin, store_result pk_store_release_job, block_sums
    pk_store_block_sums, miss_reason pk_store_miss_reason, kick
    pk_store_kick, and the request brackets keep open_lookups.  */
pk_parent_t pk_store_parent(pk_store_t *self);

#endif
