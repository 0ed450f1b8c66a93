/*  door.c: the ROUTER door: routing by routing id, backlogs, reaping.

    The main thread routes frames by routing id to the peer's actor and
    forwards what actors emit.  When a peer's actor is waiting with nothing
    queued either way, the door runs the frame on the peer's session itself,
    under the peer's lock (peer.c, pk_peer_try_frame): the session stays
    the actor's, the door only borrows it between two of its waits.
    Frames from unknown routing ids go to the handshake actor, one per
    routing id at a time and a bounded number overall.  Each actor's
    backlog is bounded (--max-queued-frames), and the door never waits on
    an actor: every send to a peer's pipe is non-blocking, and a full pipe
    counts as a dropped frame (protocol.md section 6).  A peer's actor says
    GONE on every way out; the door then puts the peer on a list and reaps
    it after the wake, so a wake costs the peers that ended, not all peers.

    Words the door sends to a peer's actor (on its pipe): FRAME frame,
    STORE held, VIOLATION reason, RETIRE reason, QUIT, WAKE.  Actors
    answer on one socket the door reads (actors, a PULL), each word after
    the peer's id: the node's poller holds at most seven sockets whatever
    the number of peers (peer.c lists the words with their payloads).

    It calls down only: peers (peer.h), the handshake actor's backlog
    (handshake.h) and admission (admission.h).  What a registered peer
    means to the engine API is the node's to carry (pk_door_from_handshake
    returns it), and a job's result goes to env's callback.
*/
#include "daemon/door.h"
#include "base/keymap.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "daemon/pointer.h"
#include "daemon/tenants.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _pk_door_t {
    const pk_peer_env_t *env;
    const pk_server_config_t *config;   //  env's
    zsock_t *actors;                //  PULL: what every peer's actor says
    const char *actors_endpoint;
    pk_handshake_t *handshake;
    pk_admission_t *admission;
    pk_keymap_t by_rid;             //  routing id -> peer
    pk_keymap_t by_id;              //  a peer's id -> peer
    uint64_t next_peer_id;
    pk_keymap_t by_consumer;        //  consumer peer_id -> peer
    pk_keymap_t pending;            //  routing ids with a frame at the handshake actor
    size_t npeers;
    pk_peer_t *gone;                //  peers whose actor said GONE: reaped next
    bool quitting;
};

//  A map's key over any bytes (an id, a routing id).
static pk_key_t
s_key(const void *bytes, size_t len)
{
    return pk_key_make(bytes, len);
}

//  One word of the actors, read here without waiting (pk_poller_recv):
//  false when there was none.
static bool
s_actors_read(pk_door_t *self)
{
    zmsg_t *msg = pk_poller_recv(self->env->poller, self->actors);
    if (msg)
        pk_door_from_actors(self, msg);
    return msg != NULL;
}

static void
s_gone_unlink(pk_door_t *self, pk_peer_t *peer)
{
    for (pk_peer_t **at = &self->gone; *at; at = &(*at)->next_gone)
        if (*at == peer) {
            *at = peer->next_gone;
            break;
        }
    peer->next_gone = NULL;
}

static void
s_peer_destroy(pk_door_t *self, pk_peer_t *peer)
{
    //  what the actors still had to say (this one's disconnect and job
    //  results among it) goes out first
    while (peer->actor && s_actors_read(self))
        ;
    if (peer->retired)
        s_gone_unlink(self, peer);
    pk_metrics_add(self->env->metrics, PK_M_SESSIONS_RETIRED, NULL, 1);
    pk_key_t rk = s_key(peer->rid, peer->rlen);
    pk_keymap_take(&self->by_rid, &rk, NULL, NULL);
    pk_key_t ck = s_key(peer->consumer, strlen(peer->consumer));
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_consumer, &ck);
    if (e && (pk_peer_t *) (uintptr_t) e->a == peer)
        pk_keymap_take(&self->by_consumer, &ck, NULL, NULL);
    if (peer->actor) {
        pk_key_t ik = s_key((const uint8_t *) &peer->id, sizeof peer->id);
        pk_keymap_take(&self->by_id, &ik, NULL, NULL);
    }
    pk_peer_destroy(&peer);
    self->npeers--;
}

static pk_peer_t *
s_peer_by_rid(pk_door_t *self, const void *rid, size_t rlen)
{
    pk_key_t k = s_key(rid, rlen);
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_rid, &k);
    return e ? (pk_peer_t *) (uintptr_t) e->a : NULL;
}

pk_peer_t *
pk_door_peer_by_consumer(pk_door_t *self, const char *consumer)
{
    pk_key_t k = s_key(consumer, strlen(consumer));
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_consumer, &k);
    return e ? (pk_peer_t *) (uintptr_t) e->a : NULL;
}

static pk_peer_t *
s_peer_by_id(pk_door_t *self, uint64_t id)
{
    pk_key_t ik = s_key((const uint8_t *) &id, sizeof id);
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_id, &ik);
    return e ? (pk_peer_t *) (uintptr_t) e->a : NULL;
}

static void
s_reply(pk_door_t *self, const void *rid, size_t rlen, const char *frame, size_t len)
{
    zmsg_t *msg = zmsg_new();
    zmsg_addmem(msg, rid, rlen);
    zmsg_addmem(msg, frame, len);
    zmsg_send(&msg, self->env->router);
    pk_poller_touch(self->env->poller, self->env->router);
}

static void
s_reply_disconnect(pk_door_t *self, const void *rid, size_t rlen, pk_disconnect_code_t code,
                   const char *reason)
{
    char *frame;
    size_t len;
    if (pk_server_session_disconnect_frame(self->env->id, code, reason, NULL, NULL, &frame,
                                           &len) == 0) {
        s_reply(self, rid, rlen, frame, len);
        free(frame);
    }
}

//  Starts a registered peer's actor, known by a new id on the actors
//  socket.
static int
s_peer_start(pk_door_t *self, pk_peer_t *peer)
{
    //  the map keeps a pointer to its key's bytes: the peer's own id
    peer->id = ++self->next_peer_id;
    pk_key_t ik = s_key((const uint8_t *) &peer->id, sizeof peer->id);
    if (pk_keymap_put(&self->by_id, &ik, (uintptr_t) peer, 0) < 0)
        return -ENOMEM;
    int rc = pk_peer_start(peer, peer->id, self->actors_endpoint);
    if (rc)
        pk_keymap_take(&self->by_id, &ik, NULL, NULL);
    return rc;
}

//  A peer the handshake actor accepted: retire a restarted consumer's old
//  session first, then start the new one's actor.
static pk_peer_t *
s_peer_register(pk_door_t *self, pk_peer_t *peer)
{
    if (self->quitting) {
        s_reply_disconnect(self, peer->rid, peer->rlen, PK_DISC_SHUTDOWN, "server shutting down");
        pk_peer_destroy(&peer);
        return NULL;
    }
    pk_peer_t *old = pk_door_peer_by_consumer(self, peer->consumer);
    if (old) {
        pk_log(self->config, PK_LOG_INFO, "consumer %s restarted: retiring its old session",
                    peer->consumer);
        s_peer_destroy(self, old);
    }
    //  Before the actor starts, which reads it: the namespace it looks up in.
    peer->ns = (unsigned) pk_tenants_of(self->config->tenant_map, peer->curve_key);
    pk_key_t rk = s_key(peer->rid, peer->rlen);
    pk_key_t ck = s_key(peer->consumer, strlen(peer->consumer));
    self->npeers++;             //  s_peer_destroy counts it out again
    if (pk_keymap_put(&self->by_rid, &rk, (uintptr_t) peer, 0) < 0
        || pk_keymap_put(&self->by_consumer, &ck, (uintptr_t) peer, 0) < 0) {
        s_reply_disconnect(self, peer->rid, peer->rlen, PK_DISC_NO_SESSION, "out of memory");
        s_peer_destroy(self, peer);
        return NULL;
    }
    if (self->npeers > self->config->max_sessions) {
        s_reply_disconnect(self, peer->rid, peer->rlen, PK_DISC_NO_SESSION, "too many sessions");
        s_peer_destroy(self, peer);
        return NULL;
    }
    //  What --max-sessions sized can still run short (connections that
    //  never said HELLO hold descriptors; an operator may lower a limit
    //  under a running server): a refusal the consumer asks again after,
    //  where czmq would abort or hang the server (limits.h).  Counted, and
    //  logged at most a few lines a minute: a refused consumer asks again
    //  every connect_retry.
    int rc = pk_limits_room(PK_FDS_PER_SESSION);
    if (rc == 0)
        rc = s_peer_start(self, peer);
    if (rc != 0) {
        pk_admission_refused(self->admission, peer->consumer, rc == -EMFILE ? "out_of_descriptors"
                                               : rc == -EAGAIN ? "out_of_threads"
                                               : "out_of_memory");
        s_reply_disconnect(self, peer->rid, peer->rlen, PK_DISC_NO_SESSION,
                           rc == -EMFILE ? "server out of file descriptors"
                           : rc == -EAGAIN ? "server cannot start a thread" : "out of memory");
        s_peer_destroy(self, peer);
        return NULL;
    }
    pk_log(self->config, PK_LOG_INFO, "session %s opened over %s", peer->consumer,
           peer->fabric.provider);
    pk_metrics_add(self->env->metrics, PK_M_SESSIONS_OPENED, NULL, 1);
    return peer;
}

//  What the handshake actor handed back: REPLY rid frame (empty: none) or
//  PEER rid peer.
pk_peer_t *
pk_door_from_handshake(pk_door_t *self, zmsg_t *msg)
{
    pk_peer_t *registered = NULL;
    char *cmd = zmsg_popstr(msg);
    zframe_t *rid = zmsg_pop(msg);
    if (rid) {
        pk_key_t k = s_key(zframe_data(rid), zframe_size(rid));
        uint64_t copy;
        if (pk_keymap_take(&self->pending, &k, NULL, &copy))
            free((void *) (uintptr_t) copy);
    }
    if (cmd && rid && streq(cmd, "REPLY")) {
        zframe_t *what = zmsg_pop(msg);
        if (what && zframe_size(what))
            s_reply(self, zframe_data(rid), zframe_size(rid), (const char *) zframe_data(what),
                    zframe_size(what));
        zframe_destroy(&what);
    }
    else if (cmd && streq(cmd, "PEER")) {
        pk_peer_t *peer = pk_pointer_pop(msg);
        if (peer)
            registered = s_peer_register(self, peer);
    }
    zstr_free(&cmd);
    zframe_destroy(&rid);
    zmsg_destroy(&msg);
    return registered;
}

//  One frame per unknown routing id at a time (a consumer repeats its
//  connect until answered), and a bounded backlog overall.
static void
s_to_handshake(pk_door_t *self, zframe_t *rid, zframe_t *frame, const char *key)
{
    pk_key_t k = s_key(zframe_data(rid), zframe_size(rid));
    //  in bytes too (--max-queued-bytes, for the whole handshake actor):
    //  peers without a session could leave it 64 frames of --max-frame
    uint64_t backlog, bytes;
    pk_handshake_backlog(self->handshake, &backlog, &bytes);
    uint8_t *copy = NULL;
    if (pk_keymap_find(&self->pending, &k) || backlog >= self->config->max_queued_frames
        || (bytes > 0 && bytes + zframe_size(frame) > self->config->max_queued_bytes)
        || !(copy = malloc(zframe_size(rid) + 1))) {
        pk_metrics_add(self->env->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
        return;
    }
    memcpy(copy, zframe_data(rid), zframe_size(rid));
    k.bytes = copy;
    if (pk_keymap_put(&self->pending, &k, 0, (uintptr_t) copy) < 0) {
        free(copy);
        return;
    }
    int sent = pk_handshake_hello(self->handshake, rid, frame, key);
    pk_poller_touch(self->env->poller, pk_handshake_actor(self->handshake));
    if (sent != 0) {
        pk_keymap_take(&self->pending, &k, NULL, NULL);
        free(copy);
        pk_metrics_add(self->env->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
        return;
    }
}

//  The largest frame the door runs itself: a lookup or fetch of about 50
//  keys (64 hex digits and a block index each).
#define PK_DOOR_INLINE_MAX 4096

static void
s_to_peer(pk_door_t *self, pk_peer_t *peer, zframe_t *frame)
{
    if (peer->retired || peer->flooding)
        return;
    uint64_t backlog = peer->sent - atomic_load(&peer->consumed);
    uint64_t bytes = peer->sent_bytes - atomic_load(&peer->consumed_bytes);
    //  In bytes as well as frames: 256 frames of 64 MiB each were 16 GiB
    //  one peer could leave at its actor.  A frame alone always goes (it
    //  is within --max-frame), so the bound holds whatever the two settings.
    bool too_many = backlog >= self->config->max_queued_frames;
    if (too_many || (bytes > 0 && bytes + zframe_size(frame) > self->config->max_queued_bytes)) {
        //  the door never waits for one peer: a flood ends its session
        //  (and while the pipe is too full for the word, frames drop)
        char reason[96];
        if (too_many)
            snprintf(reason, sizeof reason, "limit: more than %llu frames queued",
                     (unsigned long long) self->config->max_queued_frames);
        else
            snprintf(reason, sizeof reason, "limit: more than %llu bytes queued",
                     (unsigned long long) self->config->max_queued_bytes);
        if (pk_peer_tell(peer, "ss", "VIOLATION", reason) == 0)
            peer->flooding = true;
        pk_metrics_add(self->env->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
        return;
    }
    //  A small frame whose actor waits with nothing queued runs here, and
    //  a lookup's answer goes out without crossing to the actor and back
    //  (two of the four thread hand-offs of a server's round trip).  Small:
    //  what a frame costs grows with its keys, and the door's time is every
    //  peer's; a large lookup or a fetch of thousands of blocks (posting its
    //  writes took 17 ms) goes to the actor.  What the actors said goes out
    //  first when this peer said something the door has not read (often
    //  the answer to its previous frame, come in the same wake: the router
    //  is polled first).  The wake finds an empty pipe (nothing was
    //  queued), so it cannot fail.
    int ran = -EAGAIN;
    if (zframe_size(frame) <= PK_DOOR_INLINE_MAX) {
        while (atomic_load(&peer->said) != peer->heard && s_actors_read(self))
            ;
        if (peer->retired)
            return;
        ran = pk_peer_try_frame(peer, zframe_data(frame), zframe_size(frame));
    }
    if (ran == 1)
        (void) pk_peer_tell(peer, "s", "WAKE");
    if (ran >= 0)
        return;
    if (pk_peer_tell(peer, "sb", "FRAME", zframe_data(frame), zframe_size(frame)) == 0) {
        peer->sent++;
        peer->sent_bytes += zframe_size(frame);
    }
    else
        pk_metrics_add(self->env->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
}

//  A frame on a session's routing id under another CURVE key: the id was
//  taken over (ROUTER handover) by another consumer's connection.  The
//  session ends; the frame goes nowhere.
static void
s_key_changed(pk_door_t *self, pk_peer_t *peer, const char *key)
{
    char who[160];
    snprintf(who, sizeof who, "CURVE key %s on the routing id of %s's session", key,
             peer->consumer);
    pk_admission_refused(self->admission, who, "key_changed");
    if (!peer->flooding && !peer->retired
        && pk_peer_tell(peer, "ss", "VIOLATION",
                        "its routing id reused by another CURVE key") == 0)
        peer->flooding = true;      //  what else comes on it is dropped
}

void
pk_door_from_router(pk_door_t *self, zmsg_t *msg)
{
    if (zmsg_size(msg) != 2) {
        pk_metrics_add(self->env->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
        zmsg_destroy(&msg);
        return;         //  one routing id, one JSON frame: anything else is dropped
    }
    zframe_t *rid = zmsg_pop(msg), *frame = zmsg_pop(msg);
    pk_peer_t *peer = s_peer_by_rid(self, zframe_data(rid), zframe_size(rid));
    //  ZAP's User-Id: the key this frame's connection authenticated with
    bool curve = pk_admission_curve(self->admission);
    const char *key = curve ? zframe_meta(frame, "User-Id") : "";
    if (!key)
        key = "";
    if (peer && strcmp(key, peer->curve_key) != 0)
        s_key_changed(self, peer, key);
    else if (peer)
        s_to_peer(self, peer, frame);
    //  a connection authenticated before its key was revoked stays open:
    //  its frames, not only its handshake, must find the key still allowed
    else if (curve && !pk_admission_admits(self->admission, key)) {
        char who[96];
        snprintf(who, sizeof who, "CURVE key %s (an open connection)", key);
        pk_admission_refused(self->admission, who, pk_admission_refusal(self->admission, key));
    }
    else
        s_to_handshake(self, rid, frame, key);
    zframe_destroy(&rid);
    zframe_destroy(&frame);
    zmsg_destroy(&msg);
}

//  --------------------------------------------------------------------------
//  What a peer's actor says: FRAME frame (to its consumer), JOB job success
//  (a job's result, for the engine when it was its prefill store), GONE
//  reason (the actor is done: reap it).

//  The frame goes on as the actor made it, not copied: it is a counted
//  message (unsent.h), whose bytes count until libzmq frees it.
static void
s_actor_frame(pk_door_t *self, pk_peer_t *peer, zmsg_t *msg)
{
    zframe_t *f = zmsg_pop(msg);
    void *router = zsock_resolve(self->env->router);
    if (f && zmq_send(router, peer->rid, peer->rlen, ZMQ_SNDMORE) == (int) peer->rlen) {
        (void) zframe_send(&f, router, 0);
        pk_poller_touch(self->env->poller, self->env->router);
    }
    zframe_destroy(&f);
}

static void
s_actor_job(pk_door_t *self, pk_peer_t *peer, zmsg_t *msg)
{
    char *job = zmsg_popstr(msg), *ok = zmsg_popstr(msg);
    if (job && ok)
        self->env->job(self->env->job_arg, strtoull(job, NULL, 10), streq(ok, "1"));
    zstr_free(&job);
    zstr_free(&ok);
}

static void
s_actor_gone(pk_door_t *self, pk_peer_t *peer, zmsg_t *msg)
{
    if (peer->retired)
        return;
    peer->retired = true;
    peer->next_gone = self->gone;
    self->gone = peer;
}

static const struct {
    const char *word;
    void (*fn)(pk_door_t *self, pk_peer_t *peer, zmsg_t *msg);
} s_actor_words[] = {
    { "FRAME", s_actor_frame },
    { "JOB", s_actor_job },
    { "GONE", s_actor_gone },
};

//  A word from a peer already reaped (a JOB said after GONE) finds no
//  peer and is dropped: its pin was released, and the store-job timeout
//  covers the engine.
void
pk_door_from_actors(pk_door_t *self, zmsg_t *msg)
{
    zframe_t *idf = zmsg_pop(msg);
    uint64_t id = 0;
    if (idf && zframe_size(idf) == sizeof id)
        memcpy(&id, zframe_data(idf), sizeof id);
    zframe_destroy(&idf);
    pk_peer_t *peer = s_peer_by_id(self, id);
    if (peer)
        peer->heard++;
    char *cmd = peer ? zmsg_popstr(msg) : NULL;
    for (size_t i = 0; cmd && i < sizeof s_actor_words / sizeof s_actor_words[0]; i++)
        if (streq(cmd, s_actor_words[i].word)) {
            s_actor_words[i].fn(self, peer, msg);
            break;
        }
    zstr_free(&cmd);
    zmsg_destroy(&msg);
}

size_t
pk_door_reap(pk_door_t *self)
{
    if (!self->gone)
        return 0;
    size_t reaped = 0;
    for (; self->gone; reaped++)
        s_peer_destroy(self, self->gone);       //  unlinks it from the list
    //  The maps of peers grow to the most sessions ever held (80 KB each at
    //  1,024) and would keep that table after they closed.  Here, in the
    //  node's loop, no entry pointer is held, so they may be rebuilt; a
    //  failed rebuild keeps the larger table.
    (void) pk_keymap_compact(&self->by_rid);
    (void) pk_keymap_compact(&self->by_id);
    (void) pk_keymap_compact(&self->by_consumer);
    (void) pk_keymap_compact(&self->pending);
    return reaped;
}

size_t
pk_door_revoke(pk_door_t *self)
{
    //  Only at SIGHUP, so a walk of every peer is fine here.
    size_t ended = 0, at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->by_rid, &at)); ) {
        pk_peer_t *peer = (pk_peer_t *) (uintptr_t) e->a;
        if (peer->retired || peer->flooding
            || pk_admission_admits(self->admission, peer->curve_key))
            continue;
        //  flooding: its frames are dropped from now on, as after VIOLATION
        if (pk_peer_tell(peer, "ss", "RETIRE", "CURVE key revoked") == 0) {
            peer->flooding = true;
            ended++;
            pk_metrics_add(self->env->metrics, PK_M_SESSIONS_REVOKED, NULL, 1);
            pk_log(self->config, PK_LOG_INFO, "session %s ended: its CURVE key %s was revoked",
                        peer->consumer, peer->curve_key);
        }
    }
    return ended;
}

void
pk_door_drain(pk_door_t *self, double deadline)
{
    self->quitting = true;
    //  Only while draining, so a walk of every peer is fine here.
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->by_rid, &at)); ) {
        pk_peer_t *peer = (pk_peer_t *) (uintptr_t) e->a;
        if (!peer->drain_sent && !peer->retired
            && pk_peer_tell(peer, "s8", "DRAIN", (uint64_t) (deadline * 1e3)) == 0)
            peer->drain_sent = true;
    }
}

bool
pk_door_settled(const pk_door_t *self)
{
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->by_rid, &at)); ) {
        pk_peer_t *peer = (pk_peer_t *) (uintptr_t) e->a;
        if (!peer->retired && !atomic_load(&peer->settled))
            return false;
    }
    return true;
}

void
pk_door_quit(pk_door_t *self)
{
    self->quitting = true;
    //  Only at shutdown, so a walk of every peer is fine here.
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->by_rid, &at)); ) {
        pk_peer_t *peer = (pk_peer_t *) (uintptr_t) e->a;
        if (!peer->quit_sent && !peer->retired && pk_peer_tell(peer, "s", "QUIT") == 0)
            peer->quit_sent = true;
    }
}

pk_door_t *
pk_door_new(const pk_peer_env_t *env, zsock_t *actors, const char *actors_endpoint,
            pk_handshake_t *handshake, pk_admission_t *admission)
{
    pk_door_t *self = calloc(1, sizeof *self);
    if (self)
        *self = (pk_door_t) { .env = env, .config = env->config, .actors = actors,
                              .actors_endpoint = actors_endpoint, .handshake = handshake,
                              .admission = admission };
    return self;
}

void
pk_door_destroy(pk_door_t **self_p)
{
    pk_door_t *self = *self_p;
    if (!self)
        return;
    //  one at a time: a destroy takes the peer out of the map, which
    //  moves entries under a walk
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->by_rid, &(size_t) { 0 })); )
        s_peer_destroy(self, (pk_peer_t *) (uintptr_t) e->a);
    pk_keymap_fini(&self->by_rid);
    pk_keymap_fini(&self->by_id);
    pk_keymap_fini(&self->by_consumer);
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->pending, &at)); )
        free((void *) (uintptr_t) e->b);
    pk_keymap_fini(&self->pending);
    free(self);
    *self_p = NULL;
}

pk_peer_t *
pk_door_next(pk_door_t *self, size_t *at)
{
    pk_keymap_entry_t *e = pk_keymap_next(&self->by_consumer, at);
    return e ? (pk_peer_t *) (uintptr_t) e->a : NULL;
}

size_t
pk_door_sessions(const pk_door_t *self)
{
    return self->npeers;
}
