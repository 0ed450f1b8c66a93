/*  handshake.h: the handshake actor: describe and connect from routing ids
    without a session (private to lib/daemon).

    The door hands it each frame from a routing id it has no peer for
    (pk_handshake_hello) and reads what it hands back from its actor
    (handshake.c lists the words): a frame to send back, or an accepted
    connect as a pk_peer_t to register.  Which fabric a connect is for is
    the node's to say (pick: its blob's provider, and that fabric's check
    of the blob); the actor calls pick on its own thread.
*/
#ifndef PK_HANDSHAKE_H_INCLUDED
#define PK_HANDSHAKE_H_INCLUDED

#include "daemon/peer.h"

#include <czmq.h>
#include <stdint.h>

/*  The fabric of a connect's address blob into *fabric: 0, or a negative
    errno with reason (a refusal the consumer is told).  Any thread.  */
typedef int (pk_handshake_pick_fn)(void *arg, const uint8_t *blob, size_t len,
                                   pk_peer_fabric_t *fabric, char *reason, size_t cap);

typedef struct _pk_handshake_t pk_handshake_t;

/*  Starts the actor; the peers it accepts share env.  NULL: out of
    memory, descriptors or threads.  */
pk_handshake_t *pk_handshake_new(const pk_peer_env_t *env, pk_handshake_pick_fn *pick,
                                 void *pick_arg);

/*  Stops the actor, drained: a peer it handed back that was never
    registered is destroyed here, not leaked.  */
void pk_handshake_destroy(pk_handshake_t **self_p);

/*  The actor, for the node's poller and the door's reading.  */
zactor_t *pk_handshake_actor(const pk_handshake_t *self);

/*  Hands the actor a frame from rid, which came with CURVE key key (""
    without), without waiting: 0, or -EAGAIN (its pipe is full).  */
int pk_handshake_hello(pk_handshake_t *self, zframe_t *rid, zframe_t *frame, const char *key);

/*  Frames handed and not yet taken by the actor, and their bytes.  */
void pk_handshake_backlog(const pk_handshake_t *self, uint64_t *frames, uint64_t *bytes);

#endif
