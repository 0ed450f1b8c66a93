/*  parent.h: the seam between a server role and the store it serves
    from, its parent: look keys up, pin them as a job, hear the job's
    result, read pinned blocks' checksums, say why a key is a miss.

    Declared by its user, the role (roles/server_role.h), and implemented
    by the store (store/store.h, pk_store_parent), by the pin quota that
    decorates it (roles/quota.h), by the daemon's peer actor (per
    consumer namespace) and by replay's scripted store.  The store and
    the roles are layers side by side, so the seam lives below both, as
    the data-plane seam (transport.h) does.
*/
#ifndef PK_PARENT_H_INCLUDED
#define PK_PARENT_H_INCLUDED

#include "base/key.h"
#include "base/miss_reason.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    PK_LOOKUP_HIT,
    PK_LOOKUP_MISS,
    PK_LOOKUP_HIT_PENDING,      //  being written (or brought up from a tier): ask again later
    PK_LOOKUP_RETRY             //  busy: ask again later
} pk_lookup_result_t;

/*  Names one lookup for the store's per-request bookkeeping.  */
typedef struct {
    const char *kv_request_id;
    uint64_t round_seq;
    uint64_t lookup_id;         //  unique within the role
} pk_lookup_ctx_t;

typedef struct {
    void *self;
    pk_lookup_result_t (*lookup)(void *self, const pk_key_t *key, const pk_lookup_ctx_t *ctx);
    /*  Pins the blocks of n keys as one job.  Fills *job_id, blocks[i] (the
        local block of key i) and pinned[i]: false for a key that could not
        be pinned (evicted since its lookup), which the role answers as a
        miss.  why (NULL: not asked) holds n PK_MISS_UNKNOWN from the
        caller; an implementer that knows why a key was not pinned says
        so there (the pin quota: PK_MISS_QUOTA), and the role asks
        miss_reason for the rest.  Returns 0 or a negative error (then
        nothing is pinned).  */
    int (*create_store_job)(void *self, const pk_lookup_ctx_t *ctx, const pk_key_t *keys,
                            size_t n, uint64_t *job_id, uint32_t *blocks, bool *pinned,
                            uint8_t *why);
    /*  Bracket every lookup: each on_new_request gets one
        on_request_finished.  */
    void (*on_new_request)(void *self, const pk_lookup_ctx_t *ctx);
    void (*on_request_finished)(void *self, const pk_lookup_ctx_t *ctx);
    /*  A job's result: success or failure, once per job; unpins it.  */
    void (*store_result)(void *self, uint64_t job_id, bool success);
    /*  Optional (NULL: the lookup answers carry no checksums): the
        checksums of n pinned blocks (a pinned block's bytes and checksum
        cannot change), taken when they were committed.  0 or a negative
        error (then the answer carries none).  */
    int (*block_sums)(void *self, const uint32_t *blocks, size_t n, uint64_t *sums);
    /*  Optional (NULL: misses carry PK_MISS_UNKNOWN): why key, answered
        as a miss, is one for this lookup's consumer, asked when the answer
        is made (base/miss_reason.h): ABSENT, EVICTED, WRITING, DRAINING.
        It must say no more than the consumer's namespace may know.  */
    pk_miss_reason_t (*miss_reason)(void *self, const pk_key_t *key, const pk_lookup_ctx_t *ctx);
    /*  Optional (NULL: nothing to start): called once after a pass of
        lookups (the role's serve: new lookups and re-polls of parked
        ones) that answered HIT_PENDING, so that a tier under the store
        starts the promotions the pass asked for together (store/tier.h,
        kick): the keys of one lookup are read as one batch and land
        with one wake.  */
    void (*kick)(void *self);
} pk_parent_t;

#endif
