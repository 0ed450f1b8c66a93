/*  evicted.h: the keys the pool evicted recently, so that a lookup miss
    can say "evicted" rather than "absent" (base/miss_reason.h).

    A direct-mapped table of 64-bit fingerprints of (namespace, key): an
    eviction writes its slot, overwriting whatever an older eviction left
    there, and a commit of the key clears it (the key is held again).  So
    it remembers about the last `slots` evictions, fewer where slots
    collide, and never grows: 8 bytes a slot, one slot per pool block
    rounded up to a power of two, at least 64 and at most 65,536 (512 KiB,
    for pools of 64 Ki blocks and more).  A key is "evicted" while its
    fingerprint is remembered and "absent" after.  A fingerprint is the
    key's keyed SipHash (pk_key_make's) mixed with its namespace; two
    distinct (namespace, key) pairs share one with odds of 2^-64, the only
    way a key could read "evicted" it never was.  Not thread-safe: the
    store calls it under its lock.
*/
#ifndef PK_EVICTED_H_INCLUDED
#define PK_EVICTED_H_INCLUDED

#include "base/key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *slots;            //  0: empty
    size_t mask;
} pk_evicted_t;

/*  Sized for a pool of num_blocks blocks: 0 or -ENOMEM.  */
int pk_evicted_init(pk_evicted_t *self, uint64_t num_blocks);
void pk_evicted_fini(pk_evicted_t *self);

/*  key (with pk_key_make's hash) of namespace ns was evicted.  */
void pk_evicted_add(pk_evicted_t *self, unsigned ns, const pk_key_t *key);
/*  It is held again (committed): forget its eviction.  */
void pk_evicted_forget(pk_evicted_t *self, unsigned ns, const pk_key_t *key);
bool pk_evicted_has(const pk_evicted_t *self, unsigned ns, const pk_key_t *key);

#endif
