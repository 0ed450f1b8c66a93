/*  door.h: the ROUTER door's record of each peer (private to lib/daemon).

    The door (door.c) owns every pk_peer_t: it registers the peers the
    handshake actor hands back, starts their actors, routes frames to them
    by routing id and reaps them from its list of gone peers.  The peer
    actor (peer.c) reads node, connect and consumer, owns channel while it
    runs, and counts consumed; the door frees the peer only after the
    actor has been joined.
*/
#ifndef PK_DOOR_H_INCLUDED
#define PK_DOOR_H_INCLUDED

#include "daemon/node_internal.h"

struct pk_peer {
    pk_node_t *node;
    uint8_t rid[256];
    size_t rlen;
    char *consumer;
    char curve_key[41];         //  the consumer's CURVE public key (Z85), "" without CURVE
    pk_msg_t *connect;
    pk_channel_t *channel;      //  opened by the peer's actor, closed by the door
    size_t fabric;              //  node->fabrics[] its blob's provider matched (handshake)
    zactor_t *actor;
    unsigned ns;                    //  its namespace (tenants.h): the door's reading of
                                    //  curve_key, set before the actor starts
    uint64_t id;                    //  names it on the door's actors socket (by_id)
    zsock_t *out;                   //  PUSH to the door's actors socket: the actor's
                                    //  words, made and closed by the door
    atomic_uint_fast64_t consumed;  //  frames the actor took (the backlog's other end)
    uint64_t sent;
    bool flooding;                  //  VIOLATION sent: its frames are dropped
    bool retired;                   //  GONE received: on the node's gone list
    bool quit_sent;                 //  QUIT delivered at shutdown
    pk_peer_t *next_gone;
};

/*  A frame on the ROUTER socket.  */
void pk_door_from_router(pk_node_t *node);

/*  What the handshake actor handed back (REPLY or PEER).  */
void pk_door_from_handshake(pk_node_t *node);

/*  What the peers' actors said (id, then FRAME, JOB or GONE), on the
    one socket they all push to.  */
void pk_door_from_actors(pk_node_t *node);

pk_peer_t *pk_door_peer_by_consumer(pk_node_t *node, const char *consumer);

/*  Hands a held store or finish to the peer's actor without waiting: 0,
    or -EAGAIN (its pipe is full) with h still the caller's.  */
int pk_door_deliver(pk_node_t *node, pk_peer_t *peer, pk_held_t *h);

/*  After a SIGHUP reload: ends the session of every peer whose CURVE key
    is no longer allowed (disconnect retired, "CURVE key revoked"); the
    number ended.  */
size_t pk_door_revoke(pk_node_t *node);

/*  Tears down the peers on the gone list (and only those).  */
void pk_door_reap(pk_node_t *node);

/*  At shutdown: tells each peer's actor QUIT; called on every wake while
    quitting, it retries those whose pipe was full.  */
void pk_door_quit(pk_node_t *node);

/*  Destroys every peer (node destruction).  */
void pk_door_destroy_all(pk_node_t *node);

/*  Frees a peer never registered (one the handshake actor handed back at
    destruction).  */
void pk_door_peer_free(pk_peer_t *peer);

#endif
