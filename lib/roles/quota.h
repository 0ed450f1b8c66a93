/*  quota.h: the pin quota (protocol.md section 6), as one decorator of the
    store's seam.

    A consumer may hold at most `limit` of the pool's blocks pinned at
    once, whichever way they were pinned: by its lookups' hits (through
    the decorated parent's create_store_job, where keys beyond the room
    left answer as misses) or by the local engine's prefill stores for its
    requests (pk_quota_charge, all or nothing).  Every pin is filed under
    its job id and given back when the job's result goes through the
    decorated parent's store_result, so the count is exact whatever order
    results arrive in.  Not thread-safe: one session owns one quota.

    Cost: one small allocation and one table entry per live job.
*/
#ifndef PK_QUOTA_H_INCLUDED
#define PK_QUOTA_H_INCLUDED

#include "roles/server_role.h"

typedef struct _pk_quota_t pk_quota_t;

/*  A quota of limit blocks over inner (the store's seam); NULL when out of
    memory.  inner.self must outlive the quota.  */
pk_quota_t *pk_quota_new(uint64_t limit, pk_parent_t inner);

/*  Jobs still charged are given back to nobody: their pins belong to the
    store, which the caller settles (e.g. by failing those jobs through
    the decorated parent first).  */
void pk_quota_destroy(pk_quota_t **self_p);

/*  The decorated seam, to hand to the role in place of inner.  */
pk_parent_t pk_quota_parent(pk_quota_t *self);

/*  Charges a job of n blocks pinned outside the role (a prefill store).
    0, or -EDQUOT when it would take the consumer past the limit (nothing
    is charged: the caller refuses the store and unpins the job), -EEXIST
    for a job already charged, -ENOMEM.  */
int pk_quota_charge(pk_quota_t *self, uint64_t job_id, uint64_t n);

/*  Gives back a job's charge without a store result (a charged store the
    role then refused).  Unknown jobs are ignored.  */
void pk_quota_discharge(pk_quota_t *self, uint64_t job_id);

/*  Blocks charged now, and the limit.  */
uint64_t pk_quota_pinned(const pk_quota_t *self);
uint64_t pk_quota_limit(const pk_quota_t *self);

#endif
