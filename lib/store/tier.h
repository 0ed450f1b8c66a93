/*  tier.h: the seam for a tier under the pool (a disk, a slower memory).

    The pool is the top tier: the only one whose blocks can be pinned and
    written to consumers.  A tier under it takes what the pool evicts and
    may give it back later.  The store calls it at two moments, under its
    lock (store.c):

      - eviction: an unpinned READY block is about to be reused for
        another key; the tier is handed its namespace, key, bytes and
        checksum (XXH3-64 taken at commit; 0 when the store takes none)
        and must copy what it keeps before it returns, since the block is
        rewritten right after;
      - a lookup of a key the pool lacks: the tier answers ABSENT (a
        miss), PENDING (it is already bringing the key up: the lookup
        answers HIT_PENDING, and the role asks again), or PRESENT (held,
        not moving: the store calls promote, and answers HIT_PENDING if
        the promotion started, a miss if it did not).  A reader in
        namespace ns asks both (ns, key) and (shared, key), always both,
        as the index does: a tier need not know the namespace rule.

    A drop of a key (the engine's) is told to the tier too (forget), so a
    dropped key never comes back up.

    A key the tier holds is still a key the server holds: an eviction the
    tier took (query no longer ABSENT after evicted) is no removal for the
    store's watch (the directory keeps listing it), a drop of a key only
    the tier held is one, and the watch's snapshot lists the tier's keys
    too (each).  A key the tier itself lets go (its own LRU, a block that
    failed its check) is not told: the directory lists it until a
    consumer asks and is answered a miss, which corrects it.

    A promotion is asynchronous and the tier's own work, started at the
    kick that follows a pass of lookups (kick, below): once it has the
    bytes it lands them through the store's ordinary write path, as an
    engine does (pk_store_reserve under PK_STORE_OWNER_TIER, a copy into
    the block, pk_store_commit_sums with the checksum it was handed at
    eviction, so a block damaged below the pool reaches consumers as
    corrupt, never as good).  That is also how everyone learns it arrived:
    the commit's return to the tier, the watch's "added" to the directory,
    and HIT to the role's next poll of its parked lookup.  A land that
    finds the key present (-EEXIST: an engine wrote it meanwhile) has
    nothing to do.

    Every op runs inside the store's critical section: it must be short
    (copy, queue, answer from memory) and must not call the store; a tier
    with I/O to do hands it to a thread of its own.  The store is given
    one tier (pk_store_set_tier); without one it calls the null tier,
    which holds nothing (pk_tier_null_ops): one indirect call per miss
    and per eviction.

    Versioning, as for the transports: .size is the sizeof the implementer
    compiled; ops are only ever appended, and the store refuses a table
    shorter than the ops it calls.
*/
#ifndef PK_TIER_H_INCLUDED
#define PK_TIER_H_INCLUDED

#include "base/key.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PK_TIER_ABSENT,             //  not held: a miss
    PK_TIER_PENDING,            //  being brought up into the pool
    PK_TIER_PRESENT             //  held, not moving: promote it
} pk_tier_answer_t;

/*  The owner under which a tier reserves the blocks it lands (engines'
    owners have the top bit clear; pulls' count up from 2^63).  */
#define PK_STORE_OWNER_TIER (UINT64_MAX - 1)

typedef void (pk_tier_key_fn)(void *arg, unsigned ns, const pk_key_t *key);

typedef struct pk_tier_ops {
    size_t size;                //  sizeof (pk_tier_ops_t) of the implementer
    const char *name;           //  for logs: "null", "disk", ...
    /*  What the tier holds of key (its bytes, len and pk_key_make's hash)
        in namespace ns.  */
    pk_tier_answer_t (*query)(void *self, unsigned ns, const pk_key_t *key);
    /*  Starts bringing key of ns up into the pool; from now on query
        answers PENDING until it landed (or gave up: ABSENT).  0, or a
        negative errno (the lookup answers a miss).  */
    int (*promote)(void *self, unsigned ns, const pk_key_t *key);
    /*  The pool evicts key of ns: len bytes at bytes, whose checksum is
        sum.  The tier copies what it keeps now, or keeps nothing.  */
    void (*evicted)(void *self, unsigned ns, const pk_key_t *key, const void *bytes,
                    size_t len, uint64_t sum);
    /*  The engine dropped key of ns: forget it.  */
    void (*forget)(void *self, unsigned ns, const pk_key_t *key);
    /*  fn for every key the tier holds (what query would not answer
        ABSENT), with its namespace: the keys a server holds are the
        pool's and its tier's, and the directory's snapshot
        (pk_store_snapshot) lists both.  Optional (NULL, or a table
        that ends before it: the snapshot lists the pool's keys only).  */
    void (*each)(void *self, pk_tier_key_fn *fn, void *arg);
    /*  Starts what the promotes since the last kick asked for, together:
        the store's callers kick once after a pass of lookups
        (pk_store_kick), so the keys of one lookup are read as one batch
        and its landing wakes the lookup once, rather than a reader
        woken at the first promote taking one or a few keys at a time.
        Optional (NULL, or a table that ends before it: promote must
        start its work itself).  */
    void (*kick)(void *self);
} pk_tier_ops_t;

/*  The tier that holds nothing: query answers ABSENT, the rest do
    nothing.  Every store starts with it.  */
extern const pk_tier_ops_t pk_tier_null_ops;

#endif
