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
    STORE held, VIOLATION reason, RETIRE reason, QUIT, WAKE.  Actors answer on one socket the
    door polls (actors, a PULL), each word after the peer's id: the
    door's poller holds five sockets whatever the number of peers (peer.c
    lists the words with their payloads).
*/
#include "daemon/door.h"
#include "daemon/limits.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  Frees what a peer owns; s_peer_destroy also unregisters it.
void
pk_door_peer_free(pk_peer_t *peer)
{
    if (peer->actor) {
        //  The actor reads its pipe until $TERM on every path, and uses the
        //  peer until then, so zactor_destroy must not return before it
        //  ended.  Two ways it did: its $TERM is sent without waiting, lost
        //  to a full pipe; and its wait ends at a signal to this thread
        //  (SIGTERM at shutdown).  Either freed the peer under a running
        //  actor (a crash in s_await_term, seen in the fuzz helper's runs).
        //  So: room in the pipe first (the actor drains it), and the
        //  process's signals held for the wait (delivered right after).
        zsock_t *pipe = zactor_sock(peer->actor);
        for (int i = 0; i < 10000 && !(zsock_events(pipe) & ZMQ_POLLOUT); i++)
            zclock_sleep(1);
        sigset_t hold, was;
        sigemptyset(&hold);
        sigaddset(&hold, SIGTERM);
        sigaddset(&hold, SIGINT);
        sigaddset(&hold, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &hold, &was);
        zactor_destroy(&peer->actor);
        pthread_sigmask(SIG_SETMASK, &was, NULL);
    }
    zsock_destroy(&peer->out);
    pk_unsent_release(&peer->unsent);
    pthread_mutex_destroy(&peer->lock);
    pk_channel_close(&peer->channel);
    pk_msg_destroy(&peer->connect);
    free(peer->consumer);
    free(peer);
}

//  One word of the actors, read here without waiting (pk_poller_recv):
//  false when there was none.
static bool
s_actors_read(pk_node_t *self)
{
    zmsg_t *msg = pk_poller_recv(self->poller, self->actors);
    if (msg)
        pk_door_from_actors(self, msg);
    return msg != NULL;
}

static void
s_gone_unlink(pk_node_t *self, pk_peer_t *peer)
{
    for (pk_peer_t **at = &self->gone; *at; at = &(*at)->next_gone)
        if (*at == peer) {
            *at = peer->next_gone;
            break;
        }
    peer->next_gone = NULL;
}

static void
s_peer_destroy(pk_node_t *self, pk_peer_t *peer)
{
    //  what the actors still had to say (this one's disconnect and job
    //  results among it) goes out first
    while (peer->actor && s_actors_read(self))
        ;
    if (peer->retired)
        s_gone_unlink(self, peer);
    pk_metrics_add(self->metrics, PK_M_SESSIONS_RETIRED, NULL, 1);
    pk_key_t rk = pk_node_key(peer->rid, peer->rlen);
    pk_keymap_take(&self->by_rid, &rk, NULL, NULL);
    pk_key_t ck = pk_node_key(peer->consumer, strlen(peer->consumer));
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_consumer, &ck);
    if (e && (pk_peer_t *) (uintptr_t) e->a == peer)
        pk_keymap_take(&self->by_consumer, &ck, NULL, NULL);
    if (peer->actor) {
        pk_key_t ik = pk_node_key((const uint8_t *) &peer->id, sizeof peer->id);
        pk_keymap_take(&self->by_id, &ik, NULL, NULL);
    }
    //  bounded state: a retired peer's series go (the totals stay)
    if (!pk_door_peer_by_consumer(self, peer->consumer))
        pk_metrics_forget_peer(self->metrics, peer->consumer);
    pk_door_peer_free(peer);
    self->npeers--;
}

static pk_peer_t *
s_peer_by_rid(pk_node_t *self, const void *rid, size_t rlen)
{
    pk_key_t k = pk_node_key(rid, rlen);
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_rid, &k);
    return e ? (pk_peer_t *) (uintptr_t) e->a : NULL;
}

pk_peer_t *
pk_door_peer_by_consumer(pk_node_t *self, const char *consumer)
{
    pk_key_t k = pk_node_key(consumer, strlen(consumer));
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_consumer, &k);
    return e ? (pk_peer_t *) (uintptr_t) e->a : NULL;
}

static pk_peer_t *
s_peer_by_id(pk_node_t *self, uint64_t id)
{
    pk_key_t ik = pk_node_key((const uint8_t *) &id, sizeof id);
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_id, &ik);
    return e ? (pk_peer_t *) (uintptr_t) e->a : NULL;
}

void
pk_door_reply(pk_node_t *self, const void *rid, size_t rlen, const char *frame, size_t len)
{
    zmsg_t *msg = zmsg_new();
    zmsg_addmem(msg, rid, rlen);
    zmsg_addmem(msg, frame, len);
    zmsg_send(&msg, self->router);
    pk_poller_touch(self->poller, self->router);
}

void
pk_door_reply_msg(pk_node_t *self, const void *rid, size_t rlen, zmq_msg_t *msg)
{
    //  A ROUTER without ZMQ_ROUTER_MANDATORY never blocks: a peer gone or
    //  a full pipe drops the message, and libzmq frees it (uncounted then).
    void *router = zsock_resolve(self->router);
    if (zmq_send(router, rid, rlen, ZMQ_SNDMORE) != (int) rlen || zmq_msg_send(msg, router, 0) < 0)
        zmq_msg_close(msg);
    pk_poller_touch(self->poller, self->router);
}

static void
s_reply_disconnect(pk_node_t *self, const void *rid, size_t rlen, pk_disconnect_code_t code,
                   const char *reason)
{
    char *frame;
    size_t len;
    if (pk_server_session_disconnect_frame(&self->id, code, reason, NULL, NULL, &frame, &len) == 0) {
        pk_door_reply(self, rid, rlen, frame, len);
        free(frame);
    }
}

int
pk_door_tell(pk_peer_t *peer, const char *picture, ...)
{
    va_list args;
    va_start(args, picture);
    int rc = zsock_vsend(peer->actor, picture, args);
    va_end(args);
    if (rc != 0)
        return -EAGAIN;
    peer->words++;
    return 0;
}

int
pk_door_deliver(pk_node_t *self, pk_peer_t *peer, pk_held_t *h)
{
    return pk_door_tell(peer, "sp", "STORE", h);
}

//  Starts a registered peer's actor.  The actor opens the peer's channel
//  and its session itself, so connects are opened in parallel, one thread
//  each, not one after another at the handshake actor (tens of
//  milliseconds each, hundreds under load).
//  The actor speaks to the door on the node's one actors socket, its
//  words tagged with the peer's id, not on its pipe: the door's poller
//  then holds a fixed handful of sockets, where one pipe per peer made
//  every wake cost every peer (zmq_poll over 256 pipes, 13% of a core
//  with 256 idle sessions).
static int
s_peer_start(pk_node_t *self, pk_peer_t *peer)
{
    peer->id = ++self->next_peer_id;
    pk_key_t ik = pk_node_key((const uint8_t *) &peer->id, sizeof peer->id);
    if (pk_keymap_put(&self->by_id, &ik, (uintptr_t) peer, 0) < 0)
        return -ENOMEM;
    //  Made here and used by the actor only (the thread's start orders
    //  the hand-over); closed by the door once the actor ended.  No high
    //  water mark: an actor never blocks on the door (a door in
    //  zactor_destroy could not read it free), and what it says is
    //  bounded by what it was sent (--max-queued-frames) plus its jobs.
    peer->out = zsock_new_push(self->actors_endpoint);
    if (peer->out)
        zsock_set_sndhwm(peer->out, 0);
    peer->unsent = pk_unsent_new(self->unsent);
    peer->actor = peer->out && peer->unsent ? zactor_new(pk_peer_actor, peer) : NULL;
    if (!peer->actor) {
        zsock_destroy(&peer->out);
        pk_unsent_release(&peer->unsent);
        pk_keymap_take(&self->by_id, &ik, NULL, NULL);
        return -ENOMEM;
    }
    //  never wait on one actor: a full pipe is a drop
    zsock_set_sndtimeo(zactor_sock(peer->actor), 0);
    return 0;
}

//  A peer the handshake actor accepted: retire a restarted consumer's old
//  session first, then start the new one's actor.
static void
s_peer_register(pk_node_t *self, pk_peer_t *peer)
{
    if (self->quitting) {
        s_reply_disconnect(self, peer->rid, peer->rlen, PK_DISC_SHUTDOWN, "server shutting down");
        pk_door_peer_free(peer);
        return;
    }
    pk_peer_t *old = pk_door_peer_by_consumer(self, peer->consumer);
    if (old) {
        pk_node_log(self, PK_LOG_INFO, "consumer %s restarted: retiring its old session",
                    peer->consumer);
        s_peer_destroy(self, old);
    }
    //  Before the actor starts, which reads it: the namespace it looks up in.
    peer->ns = (unsigned) pk_tenants_of(self->config->tenant_map, peer->curve_key);
    pk_key_t rk = pk_node_key(peer->rid, peer->rlen);
    pk_key_t ck = pk_node_key(peer->consumer, strlen(peer->consumer));
    self->npeers++;             //  s_peer_destroy counts it out again
    if (pk_keymap_put(&self->by_rid, &rk, (uintptr_t) peer, 0) < 0
        || pk_keymap_put(&self->by_consumer, &ck, (uintptr_t) peer, 0) < 0) {
        s_reply_disconnect(self, peer->rid, peer->rlen, PK_DISC_NO_SESSION, "out of memory");
        s_peer_destroy(self, peer);
        return;
    }
    if (self->npeers > self->config->max_sessions) {
        s_reply_disconnect(self, peer->rid, peer->rlen, PK_DISC_NO_SESSION, "too many sessions");
        s_peer_destroy(self, peer);
        return;
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
        pk_curve_refused(self, peer->consumer, rc == -EMFILE ? "out_of_descriptors"
                                               : rc == -EAGAIN ? "out_of_threads"
                                               : "out_of_memory");
        s_reply_disconnect(self, peer->rid, peer->rlen, PK_DISC_NO_SESSION,
                           rc == -EMFILE ? "server out of file descriptors"
                           : rc == -EAGAIN ? "server cannot start a thread" : "out of memory");
        s_peer_destroy(self, peer);
        return;
    }
    pk_node_log(self, PK_LOG_INFO, "session %s opened over %s", peer->consumer,
                self->fabrics[peer->fabric].provider);
    pk_metrics_add(self->metrics, PK_M_SESSIONS_OPENED, NULL, 1);
    pk_engine_deliver_held(self, peer);
}

//  What the handshake actor handed back: REPLY rid frame (empty: none) or
//  PEER rid peer.
void
pk_door_from_handshake(pk_node_t *self, zmsg_t *msg)
{
    char *cmd = zmsg_popstr(msg);
    zframe_t *rid = zmsg_pop(msg);
    if (rid) {
        pk_key_t k = pk_node_key(zframe_data(rid), zframe_size(rid));
        uint64_t copy;
        if (pk_keymap_take(&self->pending, &k, NULL, &copy))
            free((void *) (uintptr_t) copy);
    }
    if (cmd && rid && streq(cmd, "REPLY")) {
        zframe_t *what = zmsg_pop(msg);
        if (what && zframe_size(what))
            pk_door_reply(self, zframe_data(rid), zframe_size(rid), (const char *) zframe_data(what),
                    zframe_size(what));
        zframe_destroy(&what);
    }
    else if (cmd && streq(cmd, "PEER")) {
        pk_peer_t *peer = pk_node_pop_ptr(msg);
        if (peer)
            s_peer_register(self, peer);
    }
    zstr_free(&cmd);
    zframe_destroy(&rid);
    zmsg_destroy(&msg);
}

//  One frame per unknown routing id at a time (a consumer repeats its
//  connect until answered), and a bounded backlog overall.
static void
s_to_handshake(pk_node_t *self, zframe_t *rid, zframe_t *frame, const char *key)
{
    pk_key_t k = pk_node_key(zframe_data(rid), zframe_size(rid));
    uint64_t backlog = self->handshakes_sent - atomic_load(&self->handshakes_done);
    //  in bytes too (--max-queued-bytes, for the whole handshake actor):
    //  peers without a session could leave it 64 frames of --max-frame
    uint64_t bytes = self->handshake_bytes_sent - atomic_load(&self->handshake_bytes_done);
    uint8_t *copy = NULL;
    if (pk_keymap_find(&self->pending, &k) || backlog >= self->config->max_queued_frames
        || (bytes > 0 && bytes + zframe_size(frame) > self->config->max_queued_bytes)
        || !(copy = malloc(zframe_size(rid) + 1))) {
        pk_metrics_add(self->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
        return;
    }
    memcpy(copy, zframe_data(rid), zframe_size(rid));
    k.bytes = copy;
    if (pk_keymap_put(&self->pending, &k, 0, (uintptr_t) copy) < 0) {
        free(copy);
        return;
    }
    int sent = zsock_send(self->handshake, "sffs", "HELLO", rid, frame, key);
    pk_poller_touch(self->poller, self->handshake);
    if (sent != 0) {
        pk_keymap_take(&self->pending, &k, NULL, NULL);
        free(copy);
        pk_metrics_add(self->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
        return;
    }
    self->handshakes_sent++;
    self->handshake_bytes_sent += zframe_size(frame);
}

//  The largest frame the door runs itself: a lookup or fetch of about 50
//  keys (64 hex digits and a block index each).
#define PK_DOOR_INLINE_MAX 4096

static void
s_to_peer(pk_node_t *self, pk_peer_t *peer, zframe_t *frame)
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
        if (pk_door_tell(peer, "ss", "VIOLATION", reason) == 0)
            peer->flooding = true;
        pk_metrics_add(self->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
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
        (void) pk_door_tell(peer, "s", "WAKE");
    if (ran >= 0)
        return;
    if (pk_door_tell(peer, "sb", "FRAME", zframe_data(frame), zframe_size(frame)) == 0) {
        peer->sent++;
        peer->sent_bytes += zframe_size(frame);
    }
    else
        pk_metrics_add(self->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
}

//  A frame on a session's routing id under another CURVE key: the id was
//  taken over (ROUTER handover) by another consumer's connection.  The
//  session ends; the frame goes nowhere.
static void
s_key_changed(pk_node_t *self, pk_peer_t *peer, const char *key)
{
    char who[160];
    snprintf(who, sizeof who, "CURVE key %s on the routing id of %s's session", key,
             peer->consumer);
    pk_curve_refused(self, who, "key_changed");
    if (!peer->flooding && !peer->retired
        && pk_door_tell(peer, "ss", "VIOLATION",
                        "its routing id reused by another CURVE key") == 0)
        peer->flooding = true;      //  what else comes on it is dropped
}

void
pk_door_from_router(pk_node_t *self, zmsg_t *msg)
{
    if (zmsg_size(msg) != 2) {
        pk_metrics_add(self->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
        zmsg_destroy(&msg);
        return;         //  one routing id, one JSON frame: anything else is dropped
    }
    zframe_t *rid = zmsg_pop(msg), *frame = zmsg_pop(msg);
    pk_peer_t *peer = s_peer_by_rid(self, zframe_data(rid), zframe_size(rid));
    //  ZAP's User-Id: the key this frame's connection authenticated with
    const char *key = self->curve_cert ? zframe_meta(frame, "User-Id") : "";
    if (!key)
        key = "";
    if (peer && strcmp(key, peer->curve_key) != 0)
        s_key_changed(self, peer, key);
    else if (peer)
        s_to_peer(self, peer, frame);
    //  a connection authenticated before its key was revoked stays open:
    //  its frames, not only its handshake, must find the key still allowed
    else if (self->curve_cert && !pk_curve_admits(self, key)) {
        char who[96];
        snprintf(who, sizeof who, "CURVE key %s (an open connection)", key);
        pk_curve_refused(self, who, pk_curve_refusal(self, key));
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
s_actor_frame(pk_node_t *self, pk_peer_t *peer, zmsg_t *msg)
{
    zframe_t *f = zmsg_pop(msg);
    void *router = zsock_resolve(self->router);
    if (f && zmq_send(router, peer->rid, peer->rlen, ZMQ_SNDMORE) == (int) peer->rlen) {
        (void) zframe_send(&f, router, 0);
        pk_poller_touch(self->poller, self->router);
    }
    zframe_destroy(&f);
}

static void
s_actor_job(pk_node_t *self, pk_peer_t *peer, zmsg_t *msg)
{
    char *job = zmsg_popstr(msg), *ok = zmsg_popstr(msg);
    if (job && ok)
        pk_engine_event(self, strtoull(job, NULL, 10), streq(ok, "1"));
    zstr_free(&job);
    zstr_free(&ok);
}

static void
s_actor_gone(pk_node_t *self, pk_peer_t *peer, zmsg_t *msg)
{
    if (peer->retired)
        return;
    peer->retired = true;
    peer->next_gone = self->gone;
    self->gone = peer;
}

static const struct {
    const char *word;
    void (*fn)(pk_node_t *self, pk_peer_t *peer, zmsg_t *msg);
} s_actor_words[] = {
    { "FRAME", s_actor_frame },
    { "JOB", s_actor_job },
    { "GONE", s_actor_gone },
};

//  A word from a peer already reaped (a JOB said after GONE) finds no
//  peer and is dropped: its pin was released, and the store-job timeout
//  covers the engine.
void
pk_door_from_actors(pk_node_t *self, zmsg_t *msg)
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

void
pk_door_reap(pk_node_t *self)
{
    if (!self->gone)
        return;
    self->trim_until = zclock_mono() / 1e3 + PK_TRIM_SETTLE;  //  node.c: the sweeps trim
    while (self->gone)
        s_peer_destroy(self, self->gone);       //  unlinks it from the list
    //  The maps of peers grow to the most sessions ever held (80 KB each at
    //  1,024) and would keep that table after they closed.  Here, in the
    //  node's loop, no entry pointer is held, so they may be rebuilt; a
    //  failed rebuild keeps the larger table.
    (void) pk_keymap_compact(&self->by_rid);
    (void) pk_keymap_compact(&self->by_id);
    (void) pk_keymap_compact(&self->by_consumer);
    (void) pk_keymap_compact(&self->pending);
}

size_t
pk_door_revoke(pk_node_t *self)
{
    //  Only at SIGHUP, so a walk of every peer is fine here.
    size_t ended = 0;
    for (size_t i = 0; self->by_rid.slots && i <= self->by_rid.mask; i++) {
        if (!self->by_rid.slots[i].key.bytes)
            continue;
        pk_peer_t *peer = (pk_peer_t *) (uintptr_t) self->by_rid.slots[i].a;
        if (peer->retired || peer->flooding || pk_curve_admits(self, peer->curve_key))
            continue;
        //  flooding: its frames are dropped from now on, as after VIOLATION
        if (pk_door_tell(peer, "ss", "RETIRE", "CURVE key revoked") == 0) {
            peer->flooding = true;
            ended++;
            pk_metrics_add(self->metrics, PK_M_SESSIONS_REVOKED, peer->consumer, 1);
            pk_node_log(self, PK_LOG_INFO, "session %s ended: its CURVE key %s was revoked",
                        peer->consumer, peer->curve_key);
        }
    }
    return ended;
}

void
pk_door_quit(pk_node_t *self)
{
    //  Only at shutdown, so a walk of every peer is fine here.
    for (size_t i = 0; self->by_rid.slots && i <= self->by_rid.mask; i++) {
        if (!self->by_rid.slots[i].key.bytes)
            continue;
        pk_peer_t *peer = (pk_peer_t *) (uintptr_t) self->by_rid.slots[i].a;
        if (!peer->quit_sent && !peer->retired && pk_door_tell(peer, "s", "QUIT") == 0)
            peer->quit_sent = true;
    }
}

void
pk_door_destroy_all(pk_node_t *self)
{
    while (self->by_rid.count) {
        for (size_t i = 0; i <= self->by_rid.mask; i++)
            if (self->by_rid.slots[i].key.bytes) {
                s_peer_destroy(self, (pk_peer_t *) (uintptr_t) self->by_rid.slots[i].a);
                break;
            }
    }
}
