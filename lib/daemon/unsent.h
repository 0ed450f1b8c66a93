/*  unsent.h: the bytes of answers handed to ZeroMQ and not yet written
    (private to lib/daemon).

    libzmq counts a ROUTER's outgoing queue in messages (ZMQ_SNDHWM), never
    in bytes, and says nothing per peer; a consumer that never reads could
    leave a thousand answers of 64 MiB each in it (issue 34, point 5: a
    wire 1.0 session left 619 MiB).  What libzmq does say is when it lets
    go of a message: the free function of zmq_msg_init_data runs once the
    message was written to the kernel, dropped (a full pipe, a closed
    connection) or discarded at the socket's close.  So each answer goes to
    ZeroMQ as a counted message (pk_unsent_msg): its bytes are added to its
    session's counter and to the server's before it is sent, and taken off
    when libzmq frees it, on whatever thread that is.  The counters are
    atomics with a reference count, so a message that outlives its session
    (a consumer that never reads keeps its connection, and libzmq the
    answers queued on it) or the node still finds its counter.

    What it costs: one malloc and one copy per answer, as before (the door
    copied each answer into a new message), two atomic adds when it is
    made and two when it is freed; the copy the door made is gone (the
    message crosses the actors socket and the ROUTER as it is).
*/
#ifndef PK_UNSENT_H_INCLUDED
#define PK_UNSENT_H_INCLUDED

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

typedef struct pk_unsent pk_unsent_t;

/*  A counter of its own (parent NULL: the server's), or one whose bytes
    also count in parent (a session's, parent the server's): it holds a
    reference on parent.  NULL when out of memory.  */
pk_unsent_t *pk_unsent_new(pk_unsent_t *parent);

/*  Lets go of the caller's reference; the counter lives on until the last
    message counted in it was freed.  Any thread.  */
void pk_unsent_release(pk_unsent_t **self_p);

/*  The bytes counted in self now: handed to ZeroMQ and not yet freed by
    it.  Any thread.  */
uint64_t pk_unsent_bytes(const pk_unsent_t *self);

/*  msg made a copy of frame, counted in self (and its parent) until
    libzmq frees it: 0, or -ENOMEM (msg not made, nothing counted).  The
    caller sends msg, or closes it (which frees it).  */
int pk_unsent_msg(pk_unsent_t *self, const void *frame, size_t len, zmq_msg_t *msg);

#endif
