/*  bell.h: wakes the peer actors parked on lookups when a block arrived
    in the pool from below (the disk tier's landing, disk_tier.h).

    A lookup of a spilled key answers HIT_PENDING and the role parks it,
    re-polling at each tick of its actor; without a wake the actor ticks
    every 2 ms while anything is parked (peer.c), so a block read back in
    100 us would wait up to 2 ms more.  An actor with parked lookups
    listens with an eventfd of its own that it adds to its poll; a ring
    bumps the sequence and writes every listener's fd.  An actor compares
    the sequence it saw before its last re-poll with the current one
    before it sleeps, so a ring between the two is never lost.  Only
    actors with something parked listen: a ring costs a write per parked
    actor, nothing per idle one.
*/
#ifndef PK_BELL_H_INCLUDED
#define PK_BELL_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

typedef struct _pk_bell_t pk_bell_t;

pk_bell_t *pk_bell_new(void);
void pk_bell_destroy(pk_bell_t **self_p);

/*  Any thread: the sequence moves, every listener's fd is written.  */
void pk_bell_ring(pk_bell_t *self);

/*  The rings so far.  */
uint64_t pk_bell_seq(pk_bell_t *self);

/*  fd (an eventfd) hears the rings from now on, until it leaves; a
    second listen of the same fd is a no-op.  0 or -ENOMEM.  */
int pk_bell_listen(pk_bell_t *self, int fd);
void pk_bell_leave(pk_bell_t *self, int fd);

#endif
