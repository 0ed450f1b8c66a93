/*  door.h: the ROUTER door and its sessions (private to lib/daemon).

    The door owns every registered pk_peer_t: it registers the peers the
    handshake actor hands back, starts their actors, routes the ROUTER's
    frames to them by routing id, forwards what they say, and reaps them
    from its list of gone peers.  The node owns the sockets and hands the
    door each message they read; the door sends on the ROUTER and to the
    actors.  It asks admission whether a CURVE key is (still) admitted and
    counts its refusals there; a job's result goes to env's job callback.
    The main thread's.
*/
#ifndef PK_DOOR_H_INCLUDED
#define PK_DOOR_H_INCLUDED

#include "daemon/admission.h"
#include "daemon/handshake.h"
#include "daemon/peer.h"

#include <czmq.h>

typedef struct _pk_door_t pk_door_t;

/*  A door over env's ROUTER; actors is the PULL every peer's actor says
    its words to (bound at actors_endpoint).  Borrows them all.  NULL: out
    of memory.  */
pk_door_t *pk_door_new(const pk_peer_env_t *env, zsock_t *actors, const char *actors_endpoint,
                       pk_handshake_t *handshake, pk_admission_t *admission);

/*  Destroys every peer, then the door.  */
void pk_door_destroy(pk_door_t **self_p);

/*  A message on the ROUTER socket (taken).  */
void pk_door_from_router(pk_door_t *self, zmsg_t *msg);

/*  What the handshake actor handed back (REPLY or PEER; taken): the peer
    registered and started by it, or NULL.  */
pk_peer_t *pk_door_from_handshake(pk_door_t *self, zmsg_t *msg);

/*  What the peers' actors said (id, then FRAME, JOB or GONE), on the one
    socket they all push to (taken).  */
void pk_door_from_actors(pk_door_t *self, zmsg_t *msg);

/*  The session of consumer (a peer_id), or NULL.  */
pk_peer_t *pk_door_peer_by_consumer(pk_door_t *self, const char *consumer);

/*  The registered peers in no order: *at starts at 0; NULL at the end.  */
pk_peer_t *pk_door_next(pk_door_t *self, size_t *at);

/*  Sessions registered (reaped ones gone).  */
size_t pk_door_sessions(const pk_door_t *self);

/*  After a SIGHUP reload: ends the session of every peer whose CURVE key
    admission no longer admits (disconnect retired, "CURVE key revoked");
    the number ended.  */
size_t pk_door_revoke(pk_door_t *self);

/*  Tears down the peers whose actor said GONE (and only those): how many.  */
size_t pk_door_reap(pk_door_t *self);

/*  At the drain's start (SIGTERM): from now on accepted connects are
    refused (disconnect shutdown), and each peer's actor is told DRAIN
    with deadline (monotonic seconds); called on every wake while
    draining, it retries those whose pipe was full.  */
void pk_door_drain(pk_door_t *self, double deadline);

/*  Whether every peer's session owes its consumer nothing (its actor said
    so after DRAIN) or has ended.  */
bool pk_door_settled(const pk_door_t *self);

/*  At shutdown: from now on accepted connects are refused, and each
    peer's actor is told QUIT; called on every wake while quitting, it
    retries those whose pipe was full.  */
void pk_door_quit(pk_door_t *self);

#endif
