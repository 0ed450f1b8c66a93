/*  fair_channel.h: a session's write path through the server's scheduler
    (scheduler.h; private to lib/daemon).

    The role writes through a pk_transport_t (base/transport.h).  This
    one stands between the role and its channel's: write_blocks queues the
    transfer and returns its id at once; its blocks go to the channel as
    the scheduler grants them, as writes of at most what was granted (a
    turn's quantum), each a transfer of the channel's own.  poll reports
    a transfer once every write of it ended, with what landed; cancel
    drops what was not handed to the channel and cancels the rest there.
    So the role's rules hold unchanged: a transfer is reported once
    nothing of it runs, and one with writes out or landed is held by a
    wait-mode cancel (protocol.md section 7's fence).  The stall timeout
    stays the channel's, over what was handed to it: waiting for a grant
    is not a stall.

    Differences from the channel's own write path: a refused write (the
    channel closed, a bad index) fails its transfer when it is handed
    over, not at write_blocks (unless the grant was there at once); and
    a transfer whose write failed hands nothing more of itself over.

    Under its session's actor (the peer's lock), like the channel.
*/
#ifndef PK_FAIR_CHANNEL_H_INCLUDED
#define PK_FAIR_CHANNEL_H_INCLUDED

#include "base/transport.h"
#include "daemon/scheduler.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct _pk_fair_channel_t pk_fair_channel_t;

/*  A transfer's wait for its first write: from write_blocks to the
    channel's accepting it (the queueing delay), in seconds.  */
typedef void (pk_fair_wait_fn)(void *arg, double seconds);

/*  Over inner (the channel's write path), as a flow of weight on sched.
    now: a monotonic clock in seconds.  NULL when out of memory.  */
pk_fair_channel_t *pk_fair_channel_new(pk_sched_t *sched, unsigned weight, pk_transport_t inner,
                                       double (*now)(void), pk_fair_wait_fn *on_wait,
                                       void *wait_arg);

/*  Gives back every block it holds to the scheduler; what is still out
    on the channel is the channel's close's (its owner's next step).
    Nulls *self_p.  */
void pk_fair_channel_destroy(pk_fair_channel_t **self_p);

/*  The write path for the role.  */
pk_transport_t pk_fair_channel_transport(pk_fair_channel_t *self);

/*  Hands what the scheduler granted to the channel; every step of the
    owner calls it.  Returns the blocks handed over.  */
uint64_t pk_fair_channel_pump(pk_fair_channel_t *self);

/*  Blocks queued here, not yet handed to the channel: while there are,
    the owner must not sleep on the channel (the grant comes from
    another thread, unannounced).  */
uint64_t pk_fair_channel_queued(const pk_fair_channel_t *self);

#endif
