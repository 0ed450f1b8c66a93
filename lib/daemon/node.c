/*  node.c: the daemon's front door, its peer actors and the engine's API.

    The main thread never parses a frame from a peer that has a session: it
    routes by routing id to the peer's actor and forwards what actors emit.
    It answers `describe` and `connect` from unknown routing ids itself (a
    connect costs one endpoint and one address-vector insert, a few
    milliseconds), and keeps a bound on each actor's backlog, so one peer
    never stalls the door (protocol.md section 6).

    Actor pipe messages, main -> actor: "F" frame, "S" held-store pointer,
    "X" kv (finish), "V" reason (violation by flooding), "Q" (shutdown);
    actor -> main: "O" frame, "J" job success (a prefill job's result for
    the engine), "D" (retired).
*/
#include "daemon/node.h"
#include "base/thread.h"
#include "base/clock.h"
#include "base/keymap.h"
#include "daemon/metrics.h"
#include "ofi/ofi.h"
#include "p2pkv.h"
#include "wire/protocol.h"
#include "roles/server_session.h"
#include "daemon/store.h"
#include "base/version.h"

#include <czmq.h>
#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct s_peer s_peer_t;

//  A prefill store or finish for a consumer, held until its session runs.
typedef struct s_held {
    char *consumer;
    char *kv;
    bool finish;
    uint64_t job;
    bool has_round;
    uint64_t round;
    pk_key_t *keys;             //  bytes follow the array
    uint32_t *blocks;
    size_t n;
    double expires;
    struct s_held *next;
} s_held_t;

struct s_peer {
    pk_node_t *node;
    uint8_t rid[256];
    size_t rlen;
    char *consumer;
    pk_msg_t *connect;
    pk_ofi_channel_t *channel;
    zactor_t *actor;
    atomic_uint_fast64_t consumed;
    uint64_t sent;
    bool flooding, retired;
};

typedef struct {
    uint64_t job;
    uint8_t rid[256];
    size_t rlen;
} s_engine_job_t;

//  A pull: keys fetched from a remote server into blocks reserved in our
//  pool, committed (READY) once their bytes have landed.
typedef struct {
    uint64_t id, owner;
    char *server;
    pk_key_t *keys;                 //  bytes follow the array
    uint32_t *blocks;
    bool *landed;
    size_t n;
    uint8_t rid[256];               //  the engine that asked
    size_t rlen;
    char reason[256];
} s_pull_t;

//  Owners of pull reservations: a range no engine connection hashes into.
#define S_PULL_OWNER (UINT64_C(1) << 63)

struct _pk_node_t {
    const pk_server_config_t *config;
    pk_server_identity_t id;
    pk_server_session_config_t session_config;
    pk_store_t *store;
    pk_ofi_t *ofi;
    zsock_t *router;
    zsock_t *local;
    zsock_t *zap;                   //  our ZAP handler: --allow with CIDR ranges
    zpoller_t *poller;
    char endpoint[256];
    char ready[1024];
    pk_keymap_t by_rid;             //  routing id -> peer
    pk_keymap_t by_actor;           //  the peer actor's address -> peer
    pk_keymap_t by_consumer;        //  consumer peer_id -> peer
    pk_keymap_t engine_jobs;        //  prefill job id -> the engine that stored it
    s_held_t *held;
    size_t nheld;
    size_t npeers;
    pk_metrics_t *metrics;
    uint64_t evictions_pushed;      //  the store's evictions already in PK_M_POOL_EVICTIONS
    pk_metrics_http_t *http;
    zactor_t *handshake;
    zactor_t *puller;
    uint64_t next_pull;
    bool quitting;
    pk_keymap_t pending;            //  routing ids with a frame at the handshake actor
    uint64_t handshakes_sent;
    atomic_uint_fast64_t handshakes_done;
};

#define S_MAX_HELD 1024

static void
s_log(const pk_node_t *self, int level, const char *fmt, ...)
{
    if (level > self->config->log_level)
        return;
    static const char *names[] = { "error", "warn", "info", "debug" };
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "p2pkv-server %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static pk_key_t
s_bytes_key(const void *bytes, size_t len)
{
    return pk_key_make(bytes, len);
}

//  --------------------------------------------------------------------------
//  The peer actor

typedef struct {
    s_peer_t *peer;
    zsock_t *pipe;
    pk_parent_t store_parent;
} s_actor_t;

static void
s_actor_out(void *arg, const char *frame, size_t len)
{
    s_actor_t *a = arg;
    zsock_send(a->pipe, "sb", "O", frame, len);
}

static pk_lookup_result_t
s_actor_lookup(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    s_actor_t *a = arg;
    return a->store_parent.lookup(a->store_parent.self, key, ctx);
}

static int
s_actor_pin(void *arg, const pk_lookup_ctx_t *ctx, const pk_key_t *keys, size_t n,
            uint64_t *job, uint32_t *blocks, bool *pinned)
{
    s_actor_t *a = arg;
    return a->store_parent.create_store_job(a->store_parent.self, ctx, keys, n, job, blocks,
                                            pinned);
}

static void
s_actor_open(void *arg, const pk_lookup_ctx_t *ctx)
{
    s_actor_t *a = arg;
    a->store_parent.on_new_request(a->store_parent.self, ctx);
}

static void
s_actor_finished(void *arg, const pk_lookup_ctx_t *ctx)
{
    s_actor_t *a = arg;
    a->store_parent.on_request_finished(a->store_parent.self, ctx);
}

//  A job's result unpins it, and the main thread tells the engine when the
//  job was its prefill store.
static void
s_actor_result(void *arg, uint64_t job, bool success)
{
    s_actor_t *a = arg;
    a->store_parent.store_result(a->store_parent.self, job, success);
    char text[24];
    snprintf(text, sizeof text, "%llu", (unsigned long long) job);
    zsock_send(a->pipe, "sss", "J", text, success ? "1" : "0");
}

static void
s_latency(void *arg, pk_latency_t which, const char *peer, double seconds)
{
    pk_metrics_observe(arg, which == PK_LATENCY_LOOKUP ? PK_M_LOOKUP_SECONDS
                                                       : PK_M_FETCH_SECONDS, peer, seconds);
}

static void
s_held_free(s_held_t *h)
{
    free(h->consumer);
    free(h->kv);
    free(h->keys);
    free(h->blocks);
    free(h);
}

//  The actor's counters, as deltas since the last push, labelled with the
//  consumer's peer_id.
static void
s_push_metrics(pk_node_t *node, s_peer_t *peer, pk_server_session_t *session,
               pk_server_session_counters_t *last, pk_ofi_stats_t *flast)
{
    pk_server_session_counters_t c;
    pk_ofi_stats_t f;
    pk_server_session_counters(session, &c);
    pk_ofi_channel_stats(peer->channel, &f);
    pk_metrics_t *m = node->metrics;
    const char *p = peer->consumer;
#define S_PUSH(name, now, before) \
    if ((now) != (before)) \
        pk_metrics_add(m, name, p, (now) - (before))
    S_PUSH(PK_M_FRAMES, c.frames, last->frames);
    S_PUSH(PK_M_FRAMES_DROPPED, c.dropped_bad + c.dropped_unknown + c.dropped_stale,
           last->dropped_bad + last->dropped_unknown + last->dropped_stale);
    S_PUSH(PK_M_LOOKUPS, c.lookups, last->lookups);
    S_PUSH(PK_M_LOOKUP_KEYS, c.keys, last->keys);
    S_PUSH(PK_M_FETCHES, c.fetches, last->fetches);
    S_PUSH(PK_M_ABORTS, c.aborts, last->aborts);
    S_PUSH(PK_M_VIOLATIONS, c.violations, last->violations);
    S_PUSH(PK_M_WRITES, f.writes_posted, flast->writes_posted);
    S_PUSH(PK_M_BLOCKS_WRITTEN, f.blocks_written, flast->blocks_written);
    S_PUSH(PK_M_BYTES_WRITTEN, f.blocks_written * node->config->block_len,
           flast->blocks_written * node->config->block_len);
    S_PUSH(PK_M_WRITE_ERRORS, f.cq_errors, flast->cq_errors);
    S_PUSH(PK_M_LOOKUP_HITS, c.hits, last->hits);
    S_PUSH(PK_M_LOOKUP_MISSES, c.misses, last->misses);
    S_PUSH(PK_M_LOOKUP_EXPIRED, c.expired, last->expired);
    S_PUSH(PK_M_STORE_TIMEOUTS, c.store_timeouts, last->store_timeouts);
#undef S_PUSH
    //  labelled by the rule broken, not by peer: its class set is fixed
    for (int r = 0; r < PK_VIOLATION_COUNT; r++)
        if (c.by_reason[r] != last->by_reason[r])
            pk_metrics_add(m, PK_M_VIOLATIONS_BY_REASON, pk_violation_name((pk_violation_t) r),
                           c.by_reason[r] - last->by_reason[r]);
    if (f.transfers != flast->transfers)
        pk_metrics_set(m, PK_M_TRANSFERS_IN_FLIGHT, p, (double) f.transfers);
    *last = c;
    *flast = f;
}

static void
s_peer_actor(zsock_t *pipe, void *args)
{
    pk_thread_block_signals();
    s_peer_t *peer = args;
    pk_node_t *node = peer->node;
    s_actor_t a = { peer, pipe, pk_store_parent(node->store) };
    //  Signal first: zactor_new's wait discards whatever else comes down
    //  the pipe before the signal, and the session's first words (its
    //  connect_ack) go down the pipe.
    zsock_signal(pipe, 0);
    pk_server_session_t *session = pk_server_session_new(
        &node->id, &node->session_config, peer->connect, pk_clock_system(),
        pk_ofi_channel_transport(peer->channel),
        (pk_parent_t) { &a, s_actor_lookup, s_actor_pin, s_actor_open, s_actor_finished,
                        s_actor_result },
        s_actor_out, &a);
    if (session)
        pk_server_session_set_latency(session, s_latency, node->metrics);
    pk_server_session_counters_t last = { 0 };
    pk_ofi_stats_t flast = { 0 };
    zpoller_t *poller = zpoller_new(pipe, NULL);
    bool reported = false, quitting = false;
    double quit_deadline = 0;
    while (session && poller) {
        //  Spin while writes run.  Lookups parked on keys the engine is
        //  writing are answered at a tick after its commit: tick every
        //  2 ms then.  Otherwise the endpoint needs nothing (the server
        //  only writes; nobody writes to it) and the session's timers are
        //  seconds long: a 50 ms look is enough (at 2 ms, 16 idle sessions
        //  cost 17% of a CPU).
        int timeout = pk_server_session_has_inflight(session) ? 0
                      : pk_server_session_has_parked(session) ? 2 : 50;
        zsock_t *which = zpoller_wait(poller, timeout);
        if (which == pipe) {
            zmsg_t *msg = zmsg_recv(pipe);
            if (!msg)
                break;
            char *cmd = zmsg_popstr(msg);
            bool term = cmd && streq(cmd, "$TERM");
            if (cmd && streq(cmd, "F")) {
                zframe_t *f = zmsg_pop(msg);
                atomic_fetch_add(&peer->consumed, 1);
                if (f)
                    pk_server_session_on_frame(session, zframe_data(f), zframe_size(f));
                zframe_destroy(&f);
            }
            else if (cmd && streq(cmd, "S")) {
                zframe_t *f = zmsg_pop(msg);
                s_held_t *h = NULL;
                if (f && zframe_size(f) == sizeof h)
                    memcpy(&h, zframe_data(f), sizeof h);
                zframe_destroy(&f);
                if (!h)
                    goto next;
                if (h->finish)
                    pk_server_session_finish(session, h->kv);
                else if (pk_server_session_store(session, h->kv, h->keys, h->blocks, h->n, h->job,
                                          h->has_round, h->round) < 0)
                    s_actor_result(&a, h->job, false);
                s_held_free(h);
            }
            else if (cmd && streq(cmd, "V")) {
                char *reason = zmsg_popstr(msg);
                pk_server_session_retire(session, PK_DISC_VIOLATION, reason ? reason : "flood");
                zstr_free(&reason);
            }
            else if (cmd && streq(cmd, "Q")) {
                quitting = true;
                quit_deadline = zclock_mono() / 1e3 + node->config->shutdown_timeout;
            }
        next:
            zstr_free(&cmd);
            zmsg_destroy(&msg);
            if (term)
                break;
        }
        else if (zpoller_terminated(poller))
            break;
        pk_ofi_channel_progress(peer->channel);
        pk_server_session_tick(session);
        s_push_metrics(node, peer, session, &last, &flast);
        //  at shutdown, writes in flight drain (bounded), then `shutdown`
        if (quitting && (!pk_server_session_has_inflight(session)
                         || zclock_mono() / 1e3 >= quit_deadline))
            pk_server_session_retire(session, PK_DISC_SHUTDOWN, "server shutting down");
        if (!reported && pk_server_session_reason(session)[0]) {
            s_log(node, PK_LOG_INFO, "session %s closed: %s", peer->consumer,
                  pk_server_session_reason(session));
            zsock_send(pipe, "s", "D");
            reported = true;
        }
    }
    zpoller_destroy(&poller);
    pk_server_session_destroy(&session);
}

//  --------------------------------------------------------------------------
//  Peers

static s_peer_t *s_peer_by_consumer(pk_node_t *self, const char *consumer);

//  Frees what a peer owns; s_peer_destroy also unregisters it.
static void
s_peer_free(s_peer_t *peer)
{
    if (peer->actor)
        zactor_destroy(&peer->actor);
    pk_ofi_channel_destroy(&peer->channel);
    pk_msg_destroy(&peer->connect);
    free(peer->consumer);
    free(peer);
}

static void
s_peer_destroy(pk_node_t *self, s_peer_t *peer)
{
    pk_metrics_add(self->metrics, PK_M_SESSIONS_RETIRED, NULL, 1);
    pk_key_t rk = s_bytes_key(peer->rid, peer->rlen);
    pk_keymap_take(&self->by_rid, &rk, NULL, NULL);
    pk_key_t ck = s_bytes_key(peer->consumer, strlen(peer->consumer));
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_consumer, &ck);
    if (e && (s_peer_t *) (uintptr_t) e->a == peer)
        pk_keymap_take(&self->by_consumer, &ck, NULL, NULL);
    if (peer->actor) {
        zpoller_remove(self->poller, peer->actor);
        pk_key_t ak = s_bytes_key((const uint8_t *) &peer->actor, sizeof peer->actor);
        pk_keymap_take(&self->by_actor, &ak, NULL, NULL);
    }
    //  bounded state: a retired peer's series go (the totals stay)
    if (!s_peer_by_consumer(self, peer->consumer))
        pk_metrics_forget_peer(self->metrics, peer->consumer);
    s_peer_free(peer);
    self->npeers--;
}

static s_peer_t *
s_peer_by_rid(pk_node_t *self, const void *rid, size_t rlen)
{
    pk_key_t k = s_bytes_key(rid, rlen);
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_rid, &k);
    return e ? (s_peer_t *) (uintptr_t) e->a : NULL;
}

static s_peer_t *
s_peer_by_consumer(pk_node_t *self, const char *consumer)
{
    pk_key_t k = s_bytes_key(consumer, strlen(consumer));
    pk_keymap_entry_t *e = pk_keymap_find(&self->by_consumer, &k);
    return e ? (s_peer_t *) (uintptr_t) e->a : NULL;
}

static void
s_reply(pk_node_t *self, const void *rid, size_t rlen, const char *frame, size_t len)
{
    zmsg_t *msg = zmsg_new();
    zmsg_addmem(msg, rid, rlen);
    zmsg_addmem(msg, frame, len);
    zmsg_send(&msg, self->router);
}

static void
s_reply_disconnect(pk_node_t *self, const void *rid, size_t rlen, pk_disconnect_code_t code,
                   const char *reason)
{
    char *frame;
    size_t len;
    if (pk_server_session_disconnect_frame(&self->id, code, reason, NULL, NULL, &frame, &len) == 0) {
        s_reply(self, rid, rlen, frame, len);
        free(frame);
    }
}

static void s_deliver_held(pk_node_t *self, s_peer_t *peer);

//  --------------------------------------------------------------------------
//  The handshake actor: describe and connect from routing ids without a
//  session.  It decodes, checks compatibility and opens the peer's channel
//  (an endpoint and an address-vector insert); the main thread only
//  registers what it hands back.  Main -> actor: "H" rid frame; actor ->
//  main, exactly one per "H": "R" rid frame (a reply, or empty for none)
//  or "P" rid peer (a peer ready to start).

static void
s_handshake_reply(zsock_t *pipe, const uint8_t *rid, size_t rlen, const char *frame, size_t len)
{
    zsock_send(pipe, "sbb", "R", rid, rlen, frame, len);
}

static void
s_handshake_disconnect(pk_node_t *self, zsock_t *pipe, const uint8_t *rid, size_t rlen,
                       pk_disconnect_code_t code, const char *reason)
{
    char *frame = NULL;
    size_t len = 0;
    pk_server_session_disconnect_frame(&self->id, code, reason, NULL, NULL, &frame, &len);
    s_handshake_reply(pipe, rid, rlen, frame ? frame : "", frame ? len : 0);
    free(frame);
}

static void
s_handshake_one(pk_node_t *self, zsock_t *pipe, const uint8_t *rid, size_t rlen,
                const void *data, size_t len)
{
    char err[PK_ERRLEN];
    pk_msg_t *m = NULL;
    if (pk_msg_decode(data, len, &m, err) != 0) {
        s_log(self, PK_LOG_DEBUG, "frame from an unknown peer dropped: %s", err);
        s_handshake_reply(pipe, rid, rlen, "", 0);
        return;
    }
    if (m->type == PK_MSG_DESCRIBE) {
        char *frame = NULL;
        size_t flen = 0;
        pk_server_session_description(&self->id, &frame, &flen);
        s_handshake_reply(pipe, rid, rlen, frame ? frame : "", frame ? flen : 0);
        free(frame);
        goto done;
    }
    if (m->type != PK_MSG_CONNECT) {
        s_handshake_disconnect(self, pipe, rid, rlen, PK_DISC_NO_SESSION,
                               "no session: send connect");
        goto done;
    }
    char reason[PK_ERRLEN];
    if (pk_server_session_check_connect(&self->id, m, reason, sizeof reason) != 0) {
        s_log(self, PK_LOG_INFO, "connect from %s refused: %s", m->peer_id, reason);
        s_handshake_disconnect(self, pipe, rid, rlen, PK_DISC_INCOMPATIBLE, reason);
        goto done;
    }
    int rc;
    pk_ofi_channel_t *ch = pk_ofi_channel_new(self->ofi, false, &rc, err);
    if (!ch || pk_ofi_channel_connect(ch, m->agent_metadata, m->agent_metadata_len, err) != 0) {
        s_log(self, PK_LOG_INFO, "connect from %s refused: %s", m->peer_id, err);
        s_handshake_disconnect(self, pipe, rid, rlen, PK_DISC_INCOMPATIBLE, err);
        pk_ofi_channel_destroy(&ch);
        goto done;
    }
    s_peer_t *peer = calloc(1, sizeof *peer);
    if (!peer || rlen > sizeof peer->rid || !(peer->consumer = strdup(m->peer_id))) {
        free(peer);
        pk_ofi_channel_destroy(&ch);
        s_handshake_reply(pipe, rid, rlen, "", 0);
        goto done;
    }
    peer->node = self;
    memcpy(peer->rid, rid, rlen);
    peer->rlen = rlen;
    peer->channel = ch;
    peer->connect = m;
    m = NULL;
    zsock_send(pipe, "sbp", "P", rid, rlen, peer);
done:
    pk_msg_destroy(&m);
}

static void
s_handshake_actor(zsock_t *pipe, void *args)
{
    pk_thread_block_signals();
    pk_node_t *self = args;
    zsock_signal(pipe, 0);
    while (true) {
        zmsg_t *msg = zmsg_recv(pipe);
        if (!msg)
            break;
        char *cmd = zmsg_popstr(msg);
        bool term = !cmd || streq(cmd, "$TERM");
        if (cmd && streq(cmd, "H")) {
            zframe_t *rid = zmsg_pop(msg), *frame = zmsg_pop(msg);
            atomic_fetch_add(&self->handshakes_done, 1);
            if (rid && frame)
                s_handshake_one(self, pipe, zframe_data(rid), zframe_size(rid),
                                zframe_data(frame), zframe_size(frame));
            zframe_destroy(&rid);
            zframe_destroy(&frame);
        }
        else if (cmd && streq(cmd, "STOP"))
            zstr_send(pipe, "STOPPED");         //  nothing follows it
        zstr_free(&cmd);
        zmsg_destroy(&msg);
        if (term)
            break;
    }
}

//  A peer the handshake actor opened: retire a restarted consumer's old
//  session first, then start the new one's actor.
static void
s_peer_register(pk_node_t *self, s_peer_t *peer)
{
    if (self->quitting) {
        s_reply_disconnect(self, peer->rid, peer->rlen, PK_DISC_SHUTDOWN, "server shutting down");
        s_peer_free(peer);
        return;
    }
    s_peer_t *old = s_peer_by_consumer(self, peer->consumer);
    if (old) {
        s_log(self, PK_LOG_INFO, "consumer %s restarted: retiring its old session",
              peer->consumer);
        s_peer_destroy(self, old);
    }
    pk_key_t rk = s_bytes_key(peer->rid, peer->rlen);
    pk_key_t ck = s_bytes_key(peer->consumer, strlen(peer->consumer));
    pk_keymap_put(&self->by_rid, &rk, (uintptr_t) peer, 0);
    pk_keymap_put(&self->by_consumer, &ck, (uintptr_t) peer, 0);
    self->npeers++;
    if (self->npeers > self->config->max_sessions) {
        s_reply_disconnect(self, peer->rid, peer->rlen, PK_DISC_NO_SESSION, "too many sessions");
        s_peer_destroy(self, peer);
        return;
    }
    peer->actor = zactor_new(s_peer_actor, peer);
    if (!peer->actor) {
        s_peer_destroy(self, peer);
        return;
    }
    pk_key_t ak = s_bytes_key((const uint8_t *) &peer->actor, sizeof peer->actor);
    if (pk_keymap_put(&self->by_actor, &ak, (uintptr_t) peer, 0) < 0) {
        s_peer_destroy(self, peer);
        return;
    }
    zpoller_add(self->poller, peer->actor);
    s_log(self, PK_LOG_INFO, "session %s opened", peer->consumer);
    pk_metrics_add(self->metrics, PK_M_SESSIONS_OPENED, NULL, 1);
    s_deliver_held(self, peer);
}

//  What the handshake actor handed back.
static void
s_from_handshake(pk_node_t *self)
{
    zmsg_t *msg = zmsg_recv(self->handshake);
    if (!msg)
        return;
    char *cmd = zmsg_popstr(msg);
    zframe_t *rid = zmsg_pop(msg), *what = zmsg_pop(msg);
    if (rid) {
        pk_key_t k = s_bytes_key(zframe_data(rid), zframe_size(rid));
        uint64_t copy;
        if (pk_keymap_take(&self->pending, &k, NULL, &copy))
            free((void *) (uintptr_t) copy);
    }
    if (cmd && rid && what && streq(cmd, "R") && zframe_size(what))
        s_reply(self, zframe_data(rid), zframe_size(rid), (const char *) zframe_data(what),
                zframe_size(what));
    else if (cmd && what && streq(cmd, "P") && zframe_size(what) == sizeof(void *)) {
        s_peer_t *peer;
        memcpy(&peer, zframe_data(what), sizeof peer);
        s_peer_register(self, peer);
    }
    zstr_free(&cmd);
    zframe_destroy(&rid);
    zframe_destroy(&what);
    zmsg_destroy(&msg);
}

static void
s_from_peer(pk_node_t *self)
{
    zmsg_t *msg = zmsg_recv(self->router);
    if (!msg)
        return;
    if (zmsg_size(msg) != 2) {
        pk_metrics_add(self->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
        zmsg_destroy(&msg);
        return;         //  one routing id, one JSON frame: anything else is dropped
    }
    zframe_t *rid = zmsg_pop(msg), *frame = zmsg_pop(msg);
    s_peer_t *peer = s_peer_by_rid(self, zframe_data(rid), zframe_size(rid));
    if (!peer) {
        //  One frame per unknown routing id at a time (a consumer repeats
        //  its connect until answered), and a bounded backlog overall.
        pk_key_t k = s_bytes_key(zframe_data(rid), zframe_size(rid));
        uint64_t backlog = self->handshakes_sent - atomic_load(&self->handshakes_done);
        uint8_t *copy = NULL;
        if (pk_keymap_find(&self->pending, &k) || backlog >= self->config->max_queued_frames
            || !(copy = malloc(zframe_size(rid) + 1)))
            pk_metrics_add(self->metrics, PK_M_FRAMES_DROPPED, NULL, 1);
        else {
            memcpy(copy, zframe_data(rid), zframe_size(rid));
            k.bytes = copy;
            if (pk_keymap_put(&self->pending, &k, 0, (uintptr_t) copy) < 0)
                free(copy);
            else {
                self->handshakes_sent++;
                zsock_send(self->handshake, "sff", "H", rid, frame);
            }
        }
    }
    else if (!peer->retired && !peer->flooding) {
        uint64_t backlog = peer->sent - atomic_load(&peer->consumed);
        if (backlog >= self->config->max_queued_frames) {
            //  the door never waits for one peer: a flood ends its session
            peer->flooding = true;
            char reason[96];
            snprintf(reason, sizeof reason, "limit: more than %llu frames queued",
                     (unsigned long long) self->config->max_queued_frames);
            zsock_send(peer->actor, "ss", "V", reason);
        }
        else {
            peer->sent++;
            zsock_send(peer->actor, "sb", "F", zframe_data(frame), zframe_size(frame));
        }
    }
    zframe_destroy(&rid);
    zframe_destroy(&frame);
    zmsg_destroy(&msg);
}

static void
s_engine_event(pk_node_t *self, uint64_t job, bool success);

static void
s_from_actor(pk_node_t *self, s_peer_t *peer)
{
    zmsg_t *msg = zmsg_recv(peer->actor);
    if (!msg)
        return;
    char *cmd = zmsg_popstr(msg);
    if (cmd && streq(cmd, "O")) {
        zframe_t *f = zmsg_pop(msg);
        if (f)
            s_reply(self, peer->rid, peer->rlen, (const char *) zframe_data(f), zframe_size(f));
        zframe_destroy(&f);
    }
    else if (cmd && streq(cmd, "J")) {
        char *job = zmsg_popstr(msg), *ok = zmsg_popstr(msg);
        if (job && ok)
            s_engine_event(self, strtoull(job, NULL, 10), streq(ok, "1"));
        zstr_free(&job);
        zstr_free(&ok);
    }
    else if (cmd && streq(cmd, "D"))
        peer->retired = true;
    zstr_free(&cmd);
    zmsg_destroy(&msg);
}

//  --------------------------------------------------------------------------
//  The puller: the daemon acting as a consumer for its engine.  One actor
//  with one client over the store's own pool handles one pull at a time,
//  getting the keys into their reserved blocks (p2pkv_client_get).

static void
s_pull_run(pk_node_t *node, p2pkv_client_t *client, s_pull_t *p)
{
    char err[256] = "";
    int server = p2pkv_client_connect(client, p->server, node->config->load_timeout, err);
    p2pkv_key_t *keys = server >= 0 ? calloc(p->n, sizeof *keys) : NULL;
    if (keys) {
        for (size_t i = 0; i < p->n; i++)
            keys[i] = (p2pkv_key_t) { p->keys[i].bytes, p->keys[i].len };
        char kv[64];
        snprintf(kv, sizeof kv, "pull-%llu", (unsigned long long) p->id);
        p2pkv_client_get(client, server, kv, keys, p->blocks, p->n, true,
                         node->config->load_timeout, p->landed, NULL, NULL, err);
        free(keys);
    }
    snprintf(p->reason, sizeof p->reason, "%s", err);
    //  a session per pull: between pulls nobody would keep it alive
    if (server >= 0)
        p2pkv_client_disconnect(client, server);
}

static void
s_puller_actor(zsock_t *pipe, void *args)
{
    pk_thread_block_signals();
    pk_node_t *node = args;
    zsock_signal(pipe, 0);
    p2pkv_client_t *client = NULL;
    while (true) {
        zmsg_t *msg = zmsg_recv(pipe);
        if (!msg)
            break;
        char *cmd = zmsg_popstr(msg);
        bool term = !cmd || streq(cmd, "$TERM");
        zframe_t *f = zmsg_pop(msg);
        s_pull_t *p = NULL;
        if (cmd && streq(cmd, "PULL") && f && zframe_size(f) == sizeof p) {
            memcpy(&p, zframe_data(f), sizeof p);
            //  one client for the daemon's life: a new session per pull is
            //  cheap, a new registration of the pool is not
            if (!client) {
                char name[320], err[256] = "";
                snprintf(name, sizeof name, "%s-pull", node->config->peer_id);
                p2pkv_config_t cfg = { .peer_id = name,
                                       .fingerprint = node->config->fingerprint,
                                       .hash_seed = node->config->hash_seed,
                                       .provider = node->config->provider,
                                       .node = node->config->fabric_addr,
                                       .load_timeout = node->config->load_timeout,
                                       .abort_ack_timeout = node->config->abort_ack_timeout,
                                       .keepalive = node->config->keepalive_interval,
                                       .silence = node->config->silence_timeout,
                                       .no_reconnect = true };
                client = p2pkv_client_new(&cfg, pk_store_base(node->store),
                                          pk_store_num_blocks(node->store),
                                          pk_store_block_len(node->store),
                                          (p2pkv_callbacks_t) { 0 }, err);
                if (!client)
                    snprintf(p->reason, sizeof p->reason, "%s", err);
            }
            if (client)
                s_pull_run(node, client, p);
            zsock_send(pipe, "sp", "U", p);
        }
        zframe_destroy(&f);
        zstr_free(&cmd);
        zmsg_destroy(&msg);
        if (term)
            break;
    }
    p2pkv_client_destroy(&client);
}

static void
s_pull_free(s_pull_t *p)
{
    free(p->server);
    free(p->keys);
    free(p->blocks);
    free(p->landed);
    free(p);
}

static void s_engine_send(pk_node_t *self, const void *rid, size_t rlen, json_t *answer);

//  A pull ended: commit what landed, free the rest, tell the engine.
static void
s_from_puller(pk_node_t *self)
{
    zmsg_t *msg = zmsg_recv(self->puller);
    char *cmd = msg ? zmsg_popstr(msg) : NULL;
    zframe_t *f = msg ? zmsg_pop(msg) : NULL;
    s_pull_t *p = NULL;
    if (cmd && streq(cmd, "U") && f && zframe_size(f) == sizeof p)
        memcpy(&p, zframe_data(f), sizeof p);
    if (p) {
        json_t *missing = json_array();
        size_t nlanded = 0;
        for (size_t i = 0; i < p->n; i++) {
            if (p->landed[i]) {
                if (pk_store_commit(self->store, p->owner, &p->keys[i], 1) == 0)
                    nlanded++;
                continue;
            }
            char hex[2 * PK_MAX_KEY_BYTES + 1];
            pk_hex_encode(p->keys[i].bytes, p->keys[i].len, hex);
            json_array_append_new(missing, json_string(hex));
        }
        pk_store_release_owner(self->store, p->owner);
        json_t *ev = json_pack("{s:s, s:I, s:I, s:o}", "event", "pull_result", "pull",
                               (json_int_t) p->id, "landed", (json_int_t) nlanded, "missing",
                               missing);
        if (p->reason[0])
            json_object_set_new(ev, "reason", json_string(p->reason));
        s_engine_send(self, p->rid, p->rlen, ev);
        s_pull_free(p);
    }
    zstr_free(&cmd);
    zframe_destroy(&f);
    zmsg_destroy(&msg);
}

//  --------------------------------------------------------------------------
//  The engine's API

static void
s_engine_send(pk_node_t *self, const void *rid, size_t rlen, json_t *answer)
{
    char *text = json_dumps(answer, JSON_COMPACT);
    json_decref(answer);
    if (!text)
        return;
    zmsg_t *msg = zmsg_new();
    zmsg_addmem(msg, rid, rlen);
    zmsg_addstr(msg, text);
    zmsg_send(&msg, self->local);
    free(text);
}

static json_t *
s_error(const char *fmt, ...)
{
    char text[PK_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return json_pack("{s:b, s:s}", "ok", 0, "error", text);
}

static void
s_engine_event(pk_node_t *self, uint64_t job, bool success)
{
    pk_key_t k = s_bytes_key(&job, sizeof job);
    uint64_t ptr;
    if (!pk_keymap_take(&self->engine_jobs, &k, &ptr, NULL))
        return;         //  a lookup's pin job: nobody to tell
    s_engine_job_t *ej = (s_engine_job_t *) (uintptr_t) ptr;
    s_engine_send(self, ej->rid, ej->rlen,
                  json_pack("{s:s, s:I, s:b}", "event", "store_result", "job", (json_int_t) job,
                            "success", success));
    free(ej);
}

//  Parses "keys" (hex strings) into one allocation of keys then bytes.
static pk_key_t *
s_json_keys(const json_t *arr, size_t *n_p, char *err)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > PK_MAX_LIST) {
        snprintf(err, PK_ERRLEN, "keys: expected an array of 1..%d hex strings", PK_MAX_LIST);
        return NULL;
    }
    size_t n = json_array_size(arr), total = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *k = json_array_get(arr, i);
        size_t len = json_string_length(k);
        if (!json_is_string(k) || len == 0 || len % 2 || len > PK_MAX_KEY_HEX) {
            snprintf(err, PK_ERRLEN, "keys[%zu]: expected lowercase hex of even length", i);
            return NULL;
        }
        total += len / 2;
    }
    pk_key_t *keys = malloc(n * sizeof *keys + total + 1);
    uint8_t *at = keys ? (uint8_t *) (keys + n) : NULL;
    for (size_t i = 0; keys && i < n; i++) {
        const json_t *k = json_array_get(arr, i);
        int got = pk_hex_decode(json_string_value(k), json_string_length(k), at);
        if (got < 0) {
            snprintf(err, PK_ERRLEN, "keys[%zu]: expected lowercase hex of even length", i);
            free(keys);
            return NULL;
        }
        keys[i] = pk_key_make(at, (size_t) got);
        at += got;
    }
    if (!keys)
        snprintf(err, PK_ERRLEN, "out of memory");
    *n_p = n;
    return keys;
}

static void
s_deliver(pk_node_t *self, s_peer_t *peer, s_held_t *h)
{
    zsock_send(peer->actor, "sp", "S", h);
}

static void
s_deliver_held(pk_node_t *self, s_peer_t *peer)
{
    s_held_t **at = &self->held;
    while (*at) {
        s_held_t *h = *at;
        if (strcmp(h->consumer, peer->consumer) != 0) {
            at = &h->next;
            continue;
        }
        *at = h->next;
        self->nheld--;
        s_deliver(self, peer, h);
    }
}

//  Held stores for consumers that never connected fail at the store-job
//  timeout, like any store job.
static void
s_expire_held(pk_node_t *self)
{
    double now = zclock_mono() / 1e3;
    s_held_t **at = &self->held;
    while (*at) {
        s_held_t *h = *at;
        if (now < h->expires) {
            at = &h->next;
            continue;
        }
        *at = h->next;
        self->nheld--;
        if (!h->finish) {
            pk_store_release_job(self->store, h->job);
            s_engine_event(self, h->job, false);
        }
        s_held_free(h);
    }
}

static json_t *
s_cmd_store(pk_node_t *self, const json_t *req, const void *rid, size_t rlen, bool finish)
{
    const char *consumer = json_string_value(json_object_get(req, "peer"));
    const char *kv = json_string_value(json_object_get(req, "kv"));
    if (!consumer || !kv || !*kv)
        return s_error("%s: expected \"peer\" and \"kv\" strings", finish ? "finish" : "store");
    s_held_t *h = calloc(1, sizeof *h);
    if (!h || !(h->consumer = strdup(consumer)) || !(h->kv = strdup(kv))) {
        if (h)
            s_held_free(h);
        return s_error("out of memory");
    }
    h->finish = finish;
    h->expires = zclock_mono() / 1e3 + self->config->store_timeout;
    if (!finish) {
        char err[PK_ERRLEN];
        h->keys = s_json_keys(json_object_get(req, "keys"), &h->n, err);
        const json_t *round = json_object_get(req, "round");
        if (!h->keys || (round && (!json_is_integer(round) || json_integer_value(round) < 0))) {
            json_t *answer = s_error("store: %s", h->keys ? "round: expected an integer >= 0" : err);
            s_held_free(h);
            return answer;
        }
        h->has_round = round != NULL;
        h->round = round ? (uint64_t) json_integer_value(round) : 0;
        h->blocks = calloc(h->n, sizeof *h->blocks);
        bool *pinned = calloc(h->n, sizeof *pinned);
        h->job = pk_store_new_job_id(self->store);
        int rc = h->blocks && pinned
                 ? pk_store_pin_job(self->store, h->job, h->keys, h->n, h->blocks, pinned) : -ENOMEM;
        size_t missing = h->n;
        for (size_t i = 0; rc == 0 && i < h->n; i++)
            if (!pinned[i]) {
                missing = i;
                break;
            }
        free(pinned);
        if (rc || missing < h->n) {
            char hex[2 * PK_MAX_KEY_BYTES + 1] = "";
            if (!rc)
                pk_hex_encode(h->keys[missing].bytes, h->keys[missing].len, hex);
            pk_store_release_job(self->store, h->job);
            free(h->blocks);
            h->blocks = NULL;
            s_held_free(h);
            return rc ? s_error("store: %s", strerror(-rc))
                      : s_error("store: key %.64s is not ready in the pool", hex);
        }
        //  h->blocks lives inside no other allocation: keep it with the keys
        s_engine_job_t *ej = calloc(1, sizeof *ej);
        if (ej && rlen <= sizeof ej->rid) {
            ej->job = h->job;
            memcpy(ej->rid, rid, rlen);
            ej->rlen = rlen;
            pk_key_t k = s_bytes_key(&ej->job, sizeof ej->job);
            pk_keymap_put(&self->engine_jobs, &k, (uintptr_t) ej, 0);
        }
        else
            free(ej);
    }
    json_t *answer = finish ? json_pack("{s:b}", "ok", 1)
                            : json_pack("{s:b, s:I}", "ok", 1, "job", (json_int_t) h->job);
    s_peer_t *peer = s_peer_by_consumer(self, consumer);
    if (peer && !peer->retired)
        s_deliver(self, peer, h);
    else if (self->nheld < S_MAX_HELD) {
        h->next = self->held;
        self->held = h;
        self->nheld++;
    }
    else {
        if (!finish) {
            pk_store_release_job(self->store, h->job);
            pk_key_t k = s_bytes_key(&h->job, sizeof h->job);
            uint64_t ptr;
            if (pk_keymap_take(&self->engine_jobs, &k, &ptr, NULL))
                free((void *) (uintptr_t) ptr);
        }
        s_held_free(h);
        json_decref(answer);
        return s_error("too many stores held for consumers not connected (%d)", S_MAX_HELD);
    }
    return answer;
}

//  {"cmd":"pull","server":EP,"keys":[...]}: keys already here are
//  "present"; the others get blocks reserved now (all or nothing) and are
//  fetched by the puller; a pull_result event follows.
static json_t *
s_cmd_pull(pk_node_t *self, const json_t *req, const void *rid, size_t rlen)
{
    const char *server = json_string_value(json_object_get(req, "server"));
    char err[PK_ERRLEN];
    size_t n;
    if (!server || !*server)
        return s_error("pull: expected \"server\" (an endpoint) and \"keys\"");
    pk_key_t *keys = s_json_keys(json_object_get(req, "keys"), &n, err);
    if (!keys)
        return s_error("pull: %s", err);
    s_pull_t *p = calloc(1, sizeof *p);
    json_t *present = json_array();
    if (!p || !(p->server = strdup(server)) || rlen > sizeof p->rid
        || !(p->keys = malloc(n * (sizeof *p->keys + PK_MAX_KEY_BYTES)))
        || !(p->blocks = calloc(n, sizeof *p->blocks)) || !(p->landed = calloc(n, sizeof *p->landed))) {
        if (p)
            s_pull_free(p);
        free(keys);
        json_decref(present);
        return s_error("out of memory");
    }
    uint8_t *at = (uint8_t *) (p->keys + n);
    for (size_t i = 0; i < n; i++) {
        if (pk_store_lookup(self->store, &keys[i]) != PK_LOOKUP_MISS) {
            char hex[2 * PK_MAX_KEY_BYTES + 1];
            pk_hex_encode(keys[i].bytes, keys[i].len, hex);
            json_array_append_new(present, json_string(hex));
            continue;
        }
        memcpy(at, keys[i].bytes, keys[i].len);
        p->keys[p->n++] = pk_key_make(at, keys[i].len);
        at += keys[i].len;
    }
    free(keys);
    p->id = ++self->next_pull;
    p->owner = S_PULL_OWNER | p->id;
    memcpy(p->rid, rid, rlen);
    p->rlen = rlen;
    int rc = p->n ? pk_store_reserve(self->store, p->owner, p->keys, p->n, p->blocks) : 0;
    if (rc) {
        s_pull_free(p);
        json_decref(present);
        return s_error("pull: %s", rc == -ENOSPC ? "every block is pinned or being written"
                                   : rc == -EEXIST ? "a key is already in the pool"
                                   : strerror(-rc));
    }
    if (!self->puller && (self->puller = zactor_new(s_puller_actor, self)))
        zpoller_add(self->poller, self->puller);
    if (!self->puller) {
        pk_store_release_owner(self->store, p->owner);
        s_pull_free(p);
        json_decref(present);
        return s_error("pull: cannot start the puller");
    }
    json_t *answer = json_pack("{s:b, s:I, s:I, s:o}", "ok", 1, "pull", (json_int_t) p->id,
                               "fetching", (json_int_t) p->n, "present", present);
    zsock_send(self->puller, "sp", "PULL", p);
    return answer;
}

static json_t *
s_cmd(pk_node_t *self, const json_t *req, const void *rid, size_t rlen)
{
    const char *cmd = json_string_value(json_object_get(req, "cmd"));
    if (!cmd)
        return s_error("expected a JSON object with a \"cmd\" string");
    uint64_t owner = pk_key_hash(rid, rlen) & ~(UINT64_C(1) << 63);
    char err[PK_ERRLEN];
    if (streq(cmd, "describe"))
        return json_pack("{s:b, s:s, s:s, s:I, s:I, s:s}", "ok", 1, "peer_id",
                         self->config->peer_id, "pool_name", pk_store_name(self->store),
                         "num_blocks", (json_int_t) pk_store_num_blocks(self->store),
                         "block_len", (json_int_t) pk_store_block_len(self->store), "endpoint",
                         self->endpoint);
    if (streq(cmd, "reserve") || streq(cmd, "commit") || streq(cmd, "drop")) {
        size_t n;
        pk_key_t *keys = s_json_keys(json_object_get(req, "keys"), &n, err);
        if (!keys)
            return s_error("%s: %s", cmd, err);
        json_t *answer;
        int rc;
        if (streq(cmd, "reserve")) {
            uint32_t *blocks = calloc(n, sizeof *blocks);
            rc = blocks ? pk_store_reserve(self->store, owner, keys, n, blocks) : -ENOMEM;
            answer = rc ? NULL : json_pack("{s:b, s:[]}", "ok", 1, "blocks");
            for (size_t i = 0; answer && i < n; i++)
                json_array_append_new(json_object_get(answer, "blocks"), json_integer(blocks[i]));
            free(blocks);
        }
        else {
            rc = streq(cmd, "commit") ? pk_store_commit(self->store, owner, keys, n)
                                      : pk_store_drop(self->store, keys, n);
            answer = rc ? NULL : json_pack("{s:b}", "ok", 1);
        }
        free(keys);
        if (rc == -ENOSPC)
            return s_error("%s: every block is pinned or being written", cmd);
        if (rc == -EEXIST)
            return s_error("%s: a key is already in the pool", cmd);
        if (rc == -EBUSY)
            return s_error("%s: a key is pinned by a transfer", cmd);
        if (rc == -ENOENT)
            return s_error("%s: a key is not reserved by this connection", cmd);
        return rc ? s_error("%s: %s", cmd, strerror(-rc)) : answer;
    }
    if (streq(cmd, "put")) {
        const char *hex = json_string_value(json_object_get(req, "key"));
        const char *b64 = json_string_value(json_object_get(req, "data"));
        uint8_t key[PK_MAX_KEY_BYTES];
        int klen = hex ? pk_hex_decode(hex, strlen(hex), key) : -EINVAL;
        if (klen <= 0 || !b64)
            return s_error("put: expected \"key\" (lowercase hex) and \"data\" (base64)");
        size_t cap = strlen(b64) / 4 * 3 + 3, len = 0;
        uint8_t *data = malloc(cap);
        if (!data || sodium_base642bin(data, cap, b64, strlen(b64), NULL, &len, NULL,
                                       sodium_base64_VARIANT_ORIGINAL) != 0) {
            free(data);
            return s_error("put: data is not base64");
        }
        pk_key_t k = pk_key_make(key, (size_t) klen);
        int rc = pk_store_put(self->store, &k, data, len);
        free(data);
        if (rc == -EINVAL)
            return s_error("put: data is %zu bytes, blocks are %llu", len,
                           (unsigned long long) pk_store_block_len(self->store));
        if (rc == -EEXIST)
            return json_pack("{s:b, s:b}", "ok", 1, "existed", 1);
        return rc ? s_error("put: %s", strerror(-rc)) : json_pack("{s:b}", "ok", 1);
    }
    if (streq(cmd, "pull"))
        return s_cmd_pull(self, req, rid, rlen);
    if (streq(cmd, "store"))
        return s_cmd_store(self, req, rid, rlen, false);
    if (streq(cmd, "finish"))
        return s_cmd_store(self, req, rid, rlen, true);
    if (streq(cmd, "stats")) {
        pk_store_stats_t st;
        pk_store_stats(self->store, &st);
        json_t *peers = json_array();
        for (size_t i = 0; self->by_consumer.slots && i <= self->by_consumer.mask; i++)
            if (self->by_consumer.slots[i].key.bytes)
                json_array_append_new(peers, json_string(
                    ((s_peer_t *) (uintptr_t) self->by_consumer.slots[i].a)->consumer));
        return json_pack("{s:b, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}, s:I, s:o, s:o}", "ok", 1,
                         "pool", "free", (json_int_t) st.free, "writing", (json_int_t) st.writing,
                         "ready", (json_int_t) st.ready, "pinned", (json_int_t) st.pinned,
                         "evictions", (json_int_t) st.evictions, "lookups",
                         (json_int_t) st.lookups, "hits", (json_int_t) st.hits, "misses",
                         (json_int_t) st.misses, "sessions", (json_int_t) self->npeers, "peers",
                         peers, "metrics", pk_metrics_json(self->metrics));
    }
    return s_error("unknown cmd \"%.64s\"", cmd);
}

static void
s_from_engine(pk_node_t *self)
{
    zmsg_t *msg = zmsg_recv(self->local);
    if (!msg)
        return;
    zframe_t *rid = zmsg_pop(msg), *body = zmsg_pop(msg);
    if (rid && body) {
        json_error_t jerr;
        json_t *req = json_loadb((const char *) zframe_data(body), zframe_size(body),
                                 JSON_REJECT_DUPLICATES, &jerr);
        json_t *answer = json_is_object(req) ? s_cmd(self, req, zframe_data(rid), zframe_size(rid))
                                             : s_error("not a JSON object: %s", jerr.text);
        json_decref(req);
        s_engine_send(self, zframe_data(rid), zframe_size(rid), answer);
    }
    zframe_destroy(&rid);
    zframe_destroy(&body);
    zmsg_destroy(&msg);
}

//  One ZAP request (RFC 27): version, request id, domain, address,
//  identity, mechanism, credentials.  Admit the address if --allow does.
static void
s_zap(pk_node_t *self)
{
    zmsg_t *req = zmsg_recv(self->zap);
    if (!req)
        return;
    char *version = zmsg_popstr(req), *id = zmsg_popstr(req), *domain = zmsg_popstr(req);
    char *address = zmsg_popstr(req);
    bool ok = address && pk_server_config_allows(self->config, address);
    if (!ok)
        s_log(self, PK_LOG_INFO, "connection from %s refused (--allow)", address ? address : "?");
    zmsg_t *rep = zmsg_new();
    zmsg_addstr(rep, "1.0");
    zmsg_addstr(rep, id ? id : "");
    zmsg_addstr(rep, ok ? "200" : "400");
    zmsg_addstr(rep, ok ? "OK" : "address not allowed");
    zmsg_addstr(rep, "");
    zmsg_addmem(rep, NULL, 0);
    zmsg_send(&rep, self->zap);
    zstr_free(&version);
    zstr_free(&id);
    zstr_free(&domain);
    zstr_free(&address);
    zmsg_destroy(&req);
}

//  --------------------------------------------------------------------------
//  Construction and the loop

pk_node_t *
pk_node_new(const pk_server_config_t *config, int *rc_p, char *err)
{
    int rc = -ENOMEM;
    pk_node_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, PK_ERRLEN, "out of memory");
        goto fail;
    }
    self->config = config;
    //  every family of metric_families.h (architecture.md, Observability)
    self->metrics = pk_metrics_new();
    if (!self->metrics) {
        snprintf(err, PK_ERRLEN, "out of memory");
        goto fail_self;
    }
    self->store = pk_store_new(config->pool_name, config->pool_blocks, config->block_len,
                               &(pk_store_config_t) { config->lease_timeout }, pk_clock_system(),
                               &rc);
    if (!self->store) {
        snprintf(err, PK_ERRLEN, "pool %s (%llu x %llu bytes): %s", config->pool_name,
                 (unsigned long long) config->pool_blocks,
                 (unsigned long long) config->block_len, strerror(-rc));
        goto fail_self;
    }
    char ofi_err[PK_ERRLEN];
    pk_ofi_config_t ofi_config = { config->provider, config->fabric_addr,
                                   config->stall_timeout };
    self->ofi = pk_ofi_new(&ofi_config, pk_store_base(self->store), config->pool_blocks,
                           config->block_len, &rc, ofi_err);
    if (!self->ofi) {
        snprintf(err, PK_ERRLEN, "%s", ofi_err);
        goto fail_store;
    }
    self->id = (pk_server_identity_t) { config->peer_id, config->block_len, config->pool_blocks,
                                        config->fingerprint, config->hash_seed,
                                        pk_ofi_provider(self->ofi) };
    self->session_config = (pk_server_session_config_t) {
        { config->lookup_timeout, config->store_timeout, config->drain_timeout },
        config->silence_timeout, config->max_requests, config->max_parked_keys,
        config->max_rounds, pk_server_config_pin_quota(config) };
    if (config->nallow) {
        //  czmq's zauth matches whole address strings only, so CIDR ranges
        //  need our own handler on libzmq's ZAP endpoint (RFC 27).
        self->zap = zsock_new_rep("inproc://zeromq.zap.01");
        if (!self->zap) {
            snprintf(err, PK_ERRLEN, "cannot start the --allow filter (ZAP handler)");
            goto fail_sockets;
        }
    }
    self->router = zsock_new(ZMQ_ROUTER);
    self->local = zsock_new(ZMQ_ROUTER);
    if (!self->router || !self->local) {
        snprintf(err, PK_ERRLEN, "cannot create sockets");
        goto fail_sockets;
    }
    zsock_set_router_handover(self->router, 1);
    zsock_set_maxmsgsize(self->router, (int64_t) config->max_frame);
    if (config->nallow)
        zsock_set_zap_domain(self->router, "p2pkv");
    if (zsock_bind(self->router, "%s", config->bind) < 0) {
        snprintf(err, PK_ERRLEN, "cannot bind %s: %s", config->bind, zmq_strerror(zmq_errno()));
        rc = -EADDRINUSE;
        goto fail_sockets;
    }
    if (zsock_bind(self->local, "%s", config->local) < 0) {
        snprintf(err, PK_ERRLEN, "cannot bind %s: %s", config->local, zmq_strerror(zmq_errno()));
        rc = -EADDRINUSE;
        goto fail_sockets;
    }
    const char *last = zsock_endpoint(self->router);
    snprintf(self->endpoint, sizeof self->endpoint, "%s", last ? last : config->bind);
    self->handshake = zactor_new(s_handshake_actor, self);
    self->poller = self->handshake
                   ? zpoller_new(self->router, self->local, self->handshake, self->zap, NULL)
                   : NULL;
    if (!self->poller)
        goto fail_sockets;
    if (config->metrics_bind) {
        char merr[256];
        self->http = pk_metrics_http_new(self->metrics, config->metrics_bind, &rc, merr);
        if (!self->http) {
            snprintf(err, PK_ERRLEN, "--metrics-bind: %.200s", merr);
            goto fail_poller;
        }
    }
    char fabric[256];
    pk_ofi_describe(self->ofi, fabric, sizeof fabric);
    snprintf(self->ready, sizeof self->ready,
             "p2pkv-server %s ready: peer %s, peers at %s, engine at %s, pool %s "
             "(%llu blocks of %llu bytes), %s",
             PK_VERSION, config->peer_id, self->endpoint, config->local, config->pool_name,
             (unsigned long long) config->pool_blocks, (unsigned long long) config->block_len,
             fabric);
    if (rc_p)
        *rc_p = 0;
    return self;

fail_poller:
    zpoller_destroy(&self->poller);
fail_sockets:
    zactor_destroy(&self->handshake);
    zsock_destroy(&self->local);
    zsock_destroy(&self->router);
    zsock_destroy(&self->zap);
    pk_ofi_destroy(&self->ofi);
fail_store:
    pk_store_destroy(&self->store);
fail_self:
    pk_metrics_destroy(&self->metrics);
    free(self);
fail:
    if (rc_p)
        *rc_p = rc < 0 ? rc : -EIO;
    return NULL;
}

const char *
pk_node_ready_line(const pk_node_t *self)
{
    return self->ready;
}

const char *
pk_node_endpoint(const pk_node_t *self)
{
    return self->endpoint;
}

static void
s_reap(pk_node_t *self)
{
    //  Retired peers are torn down outside the walk of the table.
    s_peer_t *dead[64];
    size_t n = 0;
    for (size_t i = 0; self->by_rid.slots && i <= self->by_rid.mask && n < 64; i++) {
        if (!self->by_rid.slots[i].key.bytes)
            continue;
        s_peer_t *p = (s_peer_t *) (uintptr_t) self->by_rid.slots[i].a;
        if (p->retired)
            dead[n++] = p;
    }
    for (size_t i = 0; i < n; i++) {
        //  what the actor still had to say (its disconnect) goes out first
        while (zsock_events(zactor_sock(dead[i]->actor)) & ZMQ_POLLIN)
            s_from_actor(self, dead[i]);
        s_peer_destroy(self, dead[i]);
    }
}

//  Pool occupancy, refreshed by the main loop twice a second.
static void
s_pool_gauges(pk_node_t *self)
{
    pk_store_stats_t st;
    pk_store_stats(self->store, &st);
    pk_metrics_set(self->metrics, PK_M_POOL_FREE, NULL, (double) st.free);
    pk_metrics_set(self->metrics, PK_M_POOL_WRITING, NULL, (double) st.writing);
    pk_metrics_set(self->metrics, PK_M_POOL_READY, NULL, (double) st.ready);
    pk_metrics_set(self->metrics, PK_M_POOL_PINNED, NULL, (double) st.pinned);
    //  the store counts evictions since start; the counter takes the news
    if (st.evictions > self->evictions_pushed)
        pk_metrics_add(self->metrics, PK_M_POOL_EVICTIONS, NULL,
                       st.evictions - self->evictions_pushed);
    self->evictions_pushed = st.evictions;
    pk_metrics_set(self->metrics, PK_M_SESSIONS, NULL, (double) self->npeers);
}

int
pk_node_run(pk_node_t *self, volatile sig_atomic_t *stop)
{
    double next_sweep = 0;
    double quit_deadline = 0;
    while (true) {
        if (*stop && quit_deadline == 0) {
            self->quitting = true;
            quit_deadline = zclock_mono() / 1e3 + self->config->shutdown_timeout + 1;
            for (size_t i = 0; self->by_rid.slots && i <= self->by_rid.mask; i++)
                if (self->by_rid.slots[i].key.bytes)
                    zstr_send(((s_peer_t *) (uintptr_t) self->by_rid.slots[i].a)->actor, "Q");
            s_log(self, PK_LOG_INFO, "shutting down: %zu sessions", self->npeers);
        }
        if (quit_deadline && (self->npeers == 0 || zclock_mono() / 1e3 >= quit_deadline))
            break;
        void *which = zpoller_wait(self->poller, 100);
        if (which == self->router)
            s_from_peer(self);
        else if (which == self->local)
            s_from_engine(self);
        else if (which && which == self->zap)
            s_zap(self);
        else if (which && which == self->handshake)
            s_from_handshake(self);
        else if (which && which == self->puller)
            s_from_puller(self);
        else if (which) {
            pk_key_t ak = s_bytes_key((const uint8_t *) &which, sizeof which);
            pk_keymap_entry_t *e = pk_keymap_find(&self->by_actor, &ak);
            if (e)
                s_from_actor(self, (s_peer_t *) (uintptr_t) e->a);
        }
        else if (zpoller_terminated(self->poller) && !*stop)
            *stop = 1;
        s_reap(self);
        double now = zclock_mono() / 1e3;
        if (now >= next_sweep) {
            s_expire_held(self);
            pk_store_expire_leases(self->store);
            s_pool_gauges(self);
            next_sweep = now + 0.5;
        }
    }
    return 0;
}

void
pk_node_destroy(pk_node_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_node_t *self = *self_p;
    while (self->by_rid.count) {
        for (size_t i = 0; i <= self->by_rid.mask; i++)
            if (self->by_rid.slots[i].key.bytes) {
                s_peer_destroy(self, (s_peer_t *) (uintptr_t) self->by_rid.slots[i].a);
                break;
            }
    }
    while (self->held) {
        s_held_t *h = self->held;
        self->held = h->next;
        s_held_free(h);
    }
    for (size_t i = 0; self->engine_jobs.slots && i <= self->engine_jobs.mask; i++)
        if (self->engine_jobs.slots[i].key.bytes)
            free((void *) (uintptr_t) self->engine_jobs.slots[i].a);
    pk_keymap_fini(&self->engine_jobs);
    pk_keymap_fini(&self->by_rid);
    pk_keymap_fini(&self->by_actor);
    pk_keymap_fini(&self->by_consumer);
    //  The handshake actor first, drained: a peer it handed back that was
    //  never registered is freed here, not leaked.
    if (self->handshake && zstr_send(self->handshake, "STOP") == 0) {
        zmsg_t *msg;
        while ((msg = zmsg_recv(self->handshake))) {
            char *cmd = zmsg_popstr(msg);
            bool stopped = !cmd || streq(cmd, "STOPPED");
            zframe_t *rid = zmsg_pop(msg), *what = zmsg_pop(msg);
            if (cmd && streq(cmd, "P") && what && zframe_size(what) == sizeof(void *)) {
                s_peer_t *peer;
                memcpy(&peer, zframe_data(what), sizeof peer);
                s_peer_free(peer);
            }
            zstr_free(&cmd);
            zframe_destroy(&rid);
            zframe_destroy(&what);
            zmsg_destroy(&msg);
            if (stopped)
                break;
        }
    }
    zactor_destroy(&self->handshake);
    if (self->puller)
        zpoller_remove(self->poller, self->puller);
    zactor_destroy(&self->puller);
    for (size_t i = 0; self->pending.slots && i <= self->pending.mask; i++)
        if (self->pending.slots[i].key.bytes)
            free((void *) (uintptr_t) self->pending.slots[i].b);
    pk_keymap_fini(&self->pending);
    zpoller_destroy(&self->poller);
    zsock_destroy(&self->local);
    zsock_destroy(&self->router);
    zsock_destroy(&self->zap);
    pk_metrics_http_destroy(&self->http);
    pk_ofi_destroy(&self->ofi);
    pk_store_destroy(&self->store);
    pk_metrics_destroy(&self->metrics);
    free(self);
    *self_p = NULL;
}
