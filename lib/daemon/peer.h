/*  peer.h: one connected consumer: its record and its actor (private to
    lib/daemon).

    The handshake actor makes a pk_peer_t for each connect it accepts; the
    door registers it, starts its actor (pk_peer_start), routes frames to
    it and destroys it once the actor said GONE.  The actor (peer.c) owns
    the peer's data-plane channel and its session, under the peer's lock:
    the door takes the lock only to run one frame inline
    (pk_peer_try_frame).  Fields the door keeps (backlog counts, flags)
    are the door's thread's; the actor reads the rest, set before it starts.

    What every peer shares is a pk_peer_env_t the node fills once: the
    settings, the store, the metrics, and the two things the door's thread
    does for a frame it runs inline (send to the ROUTER, report a job's
    result), so that a peer never calls up into the door or the node.
*/
#ifndef PK_PEER_H_INCLUDED
#define PK_PEER_H_INCLUDED

#include "base/transport.h"
#include "daemon/metrics.h"
#include "daemon/bell.h"
#include "daemon/poller.h"
#include "daemon/scheduler.h"
#include "daemon/server_config.h"
#include "store/store.h"
#include "daemon/unsent.h"
#include "roles/server_session.h"

#include <czmq.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const pk_server_config_t *config;
    const pk_server_identity_t *id;
    const pk_server_session_config_t *session_config;
    pk_store_t *store;
    pk_metrics_t *metrics;
    pk_unsent_t *unsent;            //  every session's unread bytes (--max-unread-bytes)
    zsock_t *router;                //  the peers' ROUTER: the door's thread's only
    pk_poller_t *poller;            //  the node's, told what the door's thread sent
    /*  A job's result (the engine's when it was its prefill store), on
        the door's thread: a JOB word, or a frame the door ran inline.  */
    void (*job)(void *arg, uint64_t job, bool success);
    void *job_arg;
    const char *fail_session;       //  test only: $P2PKV_TEST_FAIL_SESSION
    const char *hold_session;       //  test only: $P2PKV_TEST_HOLD_SESSION
    int idle_look_ms;               //  test only: $P2PKV_TEST_IDLE_LOOK_MS (0: the config's)
    /*  The node's drain (SIGTERM) has begun: every lookup from then on is
        a miss (peer.c, s_actor_lookup).  Set once by the node, read by
        every actor; NULL: never.  */
    const atomic_bool *draining;
    /*  The server's writes' fair share (scheduler.h): every session's
        writes go through it (fair_channel.h); NULL: --fair-inflight 0,
        each session writes in arrival order.  */
    pk_sched_t *sched;
    /*  Rung when a block lands in the pool from the disk tier (bell.h):
        an actor with parked lookups re-polls them at once; NULL: no
        tier, the 2 ms tick only.  */
    pk_bell_t *bell;
} pk_peer_env_t;

/*  The fabric a peer's connect is for (the node's, by its blob's provider).  */
typedef struct {
    pk_fabric_t *fabric;            //  carries its transport's ops (base/transport.h)
    const char *provider;           //  the fabric's own name, for the log
} pk_peer_fabric_t;

typedef struct pk_peer pk_peer_t;

struct pk_peer {
    const pk_peer_env_t *env;
    uint8_t rid[256];
    size_t rlen;
    char *consumer;
    char curve_key[41];         //  the consumer's CURVE public key (Z85), "" without CURVE
    pk_msg_t *connect;
    pk_channel_t *channel;      //  opened by the peer's actor, closed at destroy
    pk_peer_fabric_t fabric;    //  its blob's provider's (handshake)
    zactor_t *actor;
    unsigned ns;                    //  its namespace (tenants.h): the door's reading of
                                    //  curve_key, set before the actor starts
    uint64_t id;                    //  names it on the door's actors socket
    zsock_t *out;                   //  PUSH to the door's actors socket: the actor's
                                    //  words, made and closed by pk_peer_start/destroy
    atomic_uint_fast64_t consumed;  //  frames the actor took (the backlog's other end)
    uint64_t sent;
    atomic_uint_fast64_t consumed_bytes;    //  the same in bytes (--max-queued-bytes)
    uint64_t sent_bytes;
    pk_unsent_t *unsent;            //  its answers' bytes libzmq holds (unsent.h),
                                    //  counted in env's too (--max-unread-bytes)
    bool flooding;                  //  VIOLATION sent: its frames are dropped
    bool retired;                   //  GONE received: on the door's gone list
    bool quit_sent;                 //  QUIT delivered at shutdown
    bool drain_sent;                //  DRAIN delivered at the drain's start
    //  The actor's: after DRAIN, whether its session owes its consumer
    //  nothing (pk_server_session_settled) as of its last step; the door
    //  reads it to know when the drain is done (pk_door_settled).
    atomic_bool settled;
    pk_peer_t *next_gone;
    //  The door's fast path (pk_peer_try_frame).  The actor holds lock
    //  whenever it is not waiting, and running is its state while the
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
    //  The session's and the channel's counts as the actor last published
    //  them (metric_sources.h), by metric: the engine API's stats shows
    //  them per session, where the metrics carry no consumer's id.
    atomic_uint_fast64_t counted[PK_M_COUNT];
    //  The session's transfers' waits for their first write (the
    //  scheduler's queueing delay): how many, their sum and the longest,
    //  in microseconds; the engine API's stats shows them per session.
    atomic_uint_fast64_t queue_waits;
    atomic_uint_fast64_t queue_wait_us;
    atomic_uint_fast64_t queue_wait_max_us;
    //  A channel of several rails (transports/rails): its pairs, written
    //  once by the actor before nrails is stored, and each rail's counts
    //  as it last published them; the engine API's stats shows them.
    struct {
        char local[64], peer[64];
        int peer_rail;
        atomic_uint_fast64_t writes, bytes, slices, failures, rejoins;
        atomic_bool failed;         //  taken out (--rail-stall, a failed write)
        atomic_uint_fast64_t rate;  //  bytes per second it measured (0: none yet)
    } rails[PK_RAILS_MAX];
    atomic_size_t nrails;
};

/*  A peer for an accepted connect (taken from *connect_p): NULL when out
    of memory or rid is too long (*connect_p is then still the caller's).  */
pk_peer_t *pk_peer_new(const pk_peer_env_t *env, const uint8_t *rid, size_t rlen,
                       const char *key, pk_peer_fabric_t fabric, pk_msg_t **connect_p);

/*  Joins the actor (if started), closes the channel, frees.  */
void pk_peer_destroy(pk_peer_t **self_p);

/*  Starts the actor, which says its words on actors_endpoint tagged with
    id.  The actor opens the channel and the session itself, so connects
    open in parallel.  0, or -ENOMEM (nothing started).  */
int pk_peer_start(pk_peer_t *self, uint64_t id, const char *actors_endpoint);

/*  Sends the actor a word (zsock_send's picture and arguments) without
    waiting, counting it: 0, or -EAGAIN (its pipe is full).  */
int pk_peer_tell(pk_peer_t *self, const char *picture, ...);

/*  The door's thread: runs one frame of the session here, when the actor
    is waiting and has nothing queued either way (a lookup's answer then
    crosses no thread of ours but the door's).  1 when it ran and the
    actor must wake (writes run, lookups parked, the session ended), 0
    when it ran, -EAGAIN when the frame must go down the pipe.  */
int pk_peer_try_frame(pk_peer_t *self, const void *frame, size_t len);

/*  The capability words the session uses: ours that its connect listed
    too (protocol.md section 4), one space apart (a buffer of the
    caller's thread, good until its next call).  */
const char *pk_peer_caps(const pk_peer_t *self);

#endif
