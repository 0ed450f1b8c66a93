/*  pins.h: the store's pins, filed as jobs, and the policy of what a pin
    may take.

    A job is what one transfer may read: the READY blocks of its keys that
    its namespace sees (namespace.h: its own, else shared; a key of another
    namespace is absent), each pinned once per job that holds it.  A pinned
    block is off the LRU, so it is neither evicted nor rewritten until its
    last job is released.  Ids come from one counter, so a job the store
    files itself and one the engine's prefill store names never collide.

    The other half of pin policy, the per-session quota (how many blocks
    one consumer may hold pinned), stays in roles/quota.c: it decorates the
    role's seam and is charged by the session, which the store layer may
    not see (doc/design.md, "The store is a layer of its own").

    An internal class of the store layer, embedded by value, run under the
    store's lock; a job's record is allocated before the lock is taken
    (pk_pins_job_new), so filing it allocates nothing inside.
*/
#ifndef PK_PINS_H_INCLUDED
#define PK_PINS_H_INCLUDED

#include "store/index.h"

typedef struct {
    uint64_t id;                //  the jobs map's key bytes
    size_t n;
    uint32_t blocks[];          //  what it pinned, each once per pin
} pk_pin_job_t;

typedef struct {
    pk_keymap_t jobs;           //  job id -> a: pk_pin_job_t *
    uint64_t next_id;           //  the first is 1
} pk_pins_t;

void pk_pins_init(pk_pins_t *self);
/*  Frees every job's record; their pins die with the index.  */
void pk_pins_fini(pk_pins_t *self);

/*  A record with room for n blocks, outside the lock: NULL with *rc_p
    -EINVAL (a bad key, no blocks or pinned) or -ENOMEM.  */
pk_pin_job_t *pk_pins_job_new(const pk_key_t *keys, size_t n, const uint32_t *blocks,
                              const bool *pinned, int *rc_p);

/*  The next id of the counter.  */
uint64_t pk_pins_next_id(pk_pins_t *self);

/*  Whether id may name a new job: 0, -EINVAL if the counter never gave
    it, -EEXIST if a job with that id is live.  */
int pk_pins_id_free(pk_pins_t *self, uint64_t id);

/*  Files job (its id set) and pins, for each key, what namespace ns sees
    of it if READY: pinned[i] and blocks[i] (PK_INDEX_NONE, which is
    store.h's PK_STORE_NO_BLOCK, when not pinned).  *probes counts the
    index probes.  0, or -ENOMEM with nothing filed or pinned.  */
int pk_pins_file(pk_pins_t *self, pk_index_t *index, unsigned ns, pk_pin_job_t *job,
                 const pk_key_t *keys, size_t n, uint32_t *blocks, bool *pinned,
                 uint64_t *probes);

/*  Unpins every block of job id and unfiles it: its record for the
    caller to free (outside the lock), or NULL for an unknown job.  */
pk_pin_job_t *pk_pins_release(pk_pins_t *self, pk_index_t *index, uint64_t id);

/*  Live jobs.  */
size_t pk_pins_count(const pk_pins_t *self);

#endif
