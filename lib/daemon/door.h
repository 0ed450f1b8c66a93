/*  door.h: the ROUTER door's record of each peer (private to lib/daemon).

    The door (door.c) owns every pk_peer_t: it registers the peers the
    handshake actor hands back, starts their actors, routes frames to them
    by routing id and reaps them from its list of gone peers.  The peer
    actor (peer.c) reads node, connect and consumer, owns channel while it
    runs, and counts consumed; the door frees the peer only after the
    actor has been joined.  The session itself is the actor's, under lock:
    the door takes the lock only to run one frame inline (pk_peer_try_frame).
*/
#ifndef PK_DOOR_H_INCLUDED
#define PK_DOOR_H_INCLUDED

#include "daemon/node_internal.h"

#include <pthread.h>

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
    atomic_uint_fast64_t consumed_bytes;    //  the same in bytes (--max-queued-bytes)
    uint64_t sent_bytes;
    pk_unsent_t *unsent;            //  its answers' bytes libzmq holds (unsent.h),
                                    //  counted in the node's too (--max-unread-bytes)
    bool flooding;                  //  VIOLATION sent: its frames are dropped
    bool retired;                   //  GONE received: on the node's gone list
    bool quit_sent;                 //  QUIT delivered at shutdown
    pk_peer_t *next_gone;
    //  The door's fast path (peer.c, pk_peer_try_frame).  The actor holds
    //  lock whenever it is not waiting, and running is its state while the
    //  session runs (NULL before and after).  words counts what the door
    //  put in the pipe, words_done what the actor handled of it (under
    //  lock); said counts the actor's words to the door, heard those the
    //  door read: a frame runs inline only when both pairs are equal, so
    //  nothing overtakes what came or went before it.
    pthread_mutex_t lock;
    void *running;
    uint64_t words;
    uint64_t words_done;
    atomic_uint_fast64_t said;
    uint64_t heard;
};

/*  Sends the peer's actor a word (zsock_send's picture and arguments)
    without waiting, counting it: 0, or -EAGAIN (its pipe is full).  */
int pk_door_tell(pk_peer_t *peer, const char *picture, ...);

/*  Sends a frame to a routing id on the ROUTER (the door's thread only).  */
void pk_door_reply(pk_node_t *node, const void *rid, size_t rlen, const char *frame, size_t len);

/*  Sends a counted message (pk_unsent_msg) to a routing id on the
    ROUTER, moving it (the door's thread only; msg is closed either way).  */
void pk_door_reply_msg(pk_node_t *node, const void *rid, size_t rlen, zmq_msg_t *msg);

/*  The door's thread: runs one frame of a peer's session here, when its
    actor is waiting and has nothing queued either way (a lookup's answer
    then crosses no thread of ours but the door's).  1 when it ran and the
    actor must wake (writes run, lookups parked, the session ended), 0
    when it ran, -EAGAIN when the frame must go down the pipe.  */
int pk_peer_try_frame(pk_peer_t *peer, const void *frame, size_t len);

/*  A frame on the ROUTER socket.  */
void pk_door_from_router(pk_node_t *node, zmsg_t *msg);

/*  What the handshake actor handed back (REPLY or PEER).  */
void pk_door_from_handshake(pk_node_t *node, zmsg_t *msg);

/*  What the peers' actors said (id, then FRAME, JOB or GONE), on the
    one socket they all push to.  */
void pk_door_from_actors(pk_node_t *node, zmsg_t *msg);

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
