/*  held.h: the prefill stores and finishes held for consumers that have no
    session yet (private to lib/daemon).

    The engine API (engine_api.c) makes a pk_held_t for each store or
    finish the engine names a consumer in.  One whose consumer is connected
    goes straight to that session's actor (peer.c frees it); the others
    wait in a pk_held_list_t until the consumer connects or the store-job
    timeout passes.  The list is bounded (the engine is told "too many"
    past it) and knows nothing of sessions or the store: whoever takes an
    item out decides what becomes of it.
*/
#ifndef PK_HELD_H_INCLUDED
#define PK_HELD_H_INCLUDED

#include "base/key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//  A prefill store or finish for a consumer, held until its session runs.
typedef struct pk_held {
    char *consumer;
    char *kv;
    bool finish;
    uint64_t job;
    bool has_round;
    uint64_t round;
    unsigned ns;                //  the namespace its blocks were pinned in
    pk_key_t *keys;             //  bytes follow the array
    uint32_t *blocks;
    size_t n;
    double expires;             //  monotonic seconds
    struct pk_held *next;       //  the list's, or the next of a list taken out
} pk_held_t;

/*  Frees one item (not its job: the caller released it or handed it on).  */
void pk_held_destroy(pk_held_t **h_p);

typedef struct _pk_held_list_t pk_held_list_t;

/*  An empty list of at most max items, or NULL (out of memory).  */
pk_held_list_t *pk_held_list_new(size_t max);

/*  Frees the list and every item still in it.  */
void pk_held_list_destroy(pk_held_list_t **self_p);

/*  Holds h: 0, or -ENOSPC when the list is full (h is still the caller's).  */
int pk_held_list_add(pk_held_list_t *self, pk_held_t *h);

/*  Takes out every item for consumer, in the list's order: a list linked
    by next (NULL: none), now the caller's.  */
pk_held_t *pk_held_list_take(pk_held_list_t *self, const char *consumer);

/*  Takes out every item whose expires is at most now: a list as above.  */
pk_held_t *pk_held_list_expire(pk_held_list_t *self, double now);

/*  Items held, and how many of them are stores (each holds a job).  */
size_t pk_held_list_size(const pk_held_list_t *self);
size_t pk_held_list_jobs(const pk_held_list_t *self);

#endif
