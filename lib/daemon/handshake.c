/*  handshake.c: the handshake actor: describe and connect from routing ids
    without a session (handshake.h).

    It decodes, answers describe, and checks a connect's compatibility; an
    accepted connect becomes a peer (pk_peer_t) that the door registers.
    It opens no channel: the peer's own actor does (peer.c), so a crowd of
    connects costs this actor microseconds each, not an endpoint each.

    Words, door -> handshake:
        HELLO rid frame key a frame from a routing id without a session, and
                            the CURVE key it came with ("" without CURVE)
        STOP                answer STOPPED; nothing follows it
        $TERM               (zactor) end
    handshake -> door, exactly one per HELLO:
        REPLY rid frame     a frame to send back (empty: none)
        PEER rid peer       an accepted connect: a pk_peer_t to register
        STOPPED             the answer to STOP
*/
#include "daemon/handshake.h"
#include "base/thread.h"
#include "daemon/log.h"
#include "daemon/pointer.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

struct _pk_handshake_t {
    const pk_peer_env_t *env;
    pk_handshake_pick_fn *pick;
    void *pick_arg;
    zactor_t *actor;
    //  the backlog: what the door handed, what the actor took
    uint64_t sent, bytes_sent;
    atomic_uint_fast64_t done, bytes_done;
};

typedef struct {
    pk_handshake_t *owner;          //  read only but for the counters of what it took
    zsock_t *pipe;
    bool stopped;
} self_t;

static self_t *
s_self_new(zsock_t *pipe, pk_handshake_t *owner)
{
    self_t *self = calloc(1, sizeof *self);
    if (self) {
        self->owner = owner;
        self->pipe = pipe;
    }
    return self;
}

static void
s_self_destroy(self_t **self_p)
{
    free(*self_p);
    *self_p = NULL;
}

static void
s_reply(self_t *self, const uint8_t *rid, size_t rlen, const char *frame, size_t len)
{
    zsock_send(self->pipe, "sbb", "REPLY", rid, rlen, frame, len);
}

static void
s_disconnect(self_t *self, const uint8_t *rid, size_t rlen, pk_disconnect_code_t code,
             const char *reason)
{
    char *frame = NULL;
    size_t len = 0;
    pk_server_session_disconnect_frame(self->owner->env->id, code, reason, NULL, NULL, &frame,
                                       &len);
    s_reply(self, rid, rlen, frame ? frame : "", frame ? len : 0);
    free(frame);
}

//  An accepted connect becomes a peer; the connect message goes with it.
static void
s_accept(self_t *self, const uint8_t *rid, size_t rlen, const char *key,
         pk_peer_fabric_t fabric, pk_msg_t **m_p)
{
    pk_peer_t *peer = pk_peer_new(self->owner->env, rid, rlen, key, fabric, m_p);
    if (peer)
        zsock_send(self->pipe, "sbp", "PEER", rid, rlen, peer);
    else
        s_reply(self, rid, rlen, "", 0);
}

static void
s_hello(self_t *self, const uint8_t *rid, size_t rlen, const void *data, size_t len,
        const char *key)
{
    const pk_peer_env_t *env = self->owner->env;
    char err[PK_ERRLEN];
    pk_msg_t *m = NULL;
    if (pk_msg_decode(data, len, &m, err) != 0) {
        pk_log(env->config, PK_LOG_DEBUG, "frame from an unknown peer dropped: %s", err);
        s_reply(self, rid, rlen, "", 0);
        return;
    }
    char reason[PK_ERRLEN];
    pk_peer_fabric_t fabric = { 0 };
    if (m->type == PK_MSG_DESCRIBE) {
        char *frame = NULL;
        size_t flen = 0;
        pk_server_session_description(env->id, &frame, &flen);
        s_reply(self, rid, rlen, frame ? frame : "", frame ? flen : 0);
        free(frame);
    }
    else if (m->type != PK_MSG_CONNECT)
        s_disconnect(self, rid, rlen, PK_DISC_NO_SESSION, "no session: send connect");
    //  the address blob is checked before any data-plane object exists: a
    //  flood of junk connects costs a parse each, nothing that stays.  Its
    //  provider picks the fabric (one per provider offered) that checks it
    else if (pk_server_session_check_connect(env->id, m, reason, sizeof reason) != 0
             || self->owner->pick(self->owner->pick_arg, m->agent_metadata,
                                  m->agent_metadata_len, &fabric, reason, sizeof reason) != 0) {
        pk_log(env->config, PK_LOG_INFO, "connect from %s refused: %s", m->peer_id, reason);
        s_disconnect(self, rid, rlen, PK_DISC_INCOMPATIBLE, reason);
    }
    else
        s_accept(self, rid, rlen, key, fabric, &m);
    pk_msg_destroy(&m);
}

static void
s_self_handle_pipe(self_t *self, zmsg_t *msg, const char *cmd)
{
    if (streq(cmd, "HELLO")) {
        zframe_t *rid = zmsg_pop(msg), *frame = zmsg_pop(msg);
        char *key = zmsg_popstr(msg);
        atomic_fetch_add(&self->owner->done, 1);
        atomic_fetch_add(&self->owner->bytes_done, frame ? zframe_size(frame) : 0);
        if (rid && frame && key)
            s_hello(self, zframe_data(rid), zframe_size(rid), zframe_data(frame),
                    zframe_size(frame), key);
        else
            s_reply(self, rid ? zframe_data(rid) : (const uint8_t *) "",
                    rid ? zframe_size(rid) : 0, "", 0);
        zstr_free(&key);
        zframe_destroy(&rid);
        zframe_destroy(&frame);
    }
    else if (streq(cmd, "STOP")) {
        zstr_send(self->pipe, "STOPPED");
        self->stopped = true;
    }
}

static void
s_handshake_actor(zsock_t *pipe, void *args)
{
    pk_thread_block_signals();
    self_t *self = s_self_new(pipe, args);
    zsock_signal(pipe, 0);
    while (self) {
        zmsg_t *msg = zmsg_recv(pipe);
        if (!msg)
            break;
        char *cmd = zmsg_popstr(msg);
        bool term = !cmd || streq(cmd, "$TERM");
        if (!term && !self->stopped)
            s_self_handle_pipe(self, msg, cmd);
        zstr_free(&cmd);
        zmsg_destroy(&msg);
        if (term)
            break;
    }
    s_self_destroy(&self);
}

pk_handshake_t *
pk_handshake_new(const pk_peer_env_t *env, pk_handshake_pick_fn *pick, void *pick_arg)
{
    pk_handshake_t *self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    self->env = env;
    self->pick = pick;
    self->pick_arg = pick_arg;
    self->actor = zactor_new(s_handshake_actor, self);
    if (!self->actor)
        goto fail_self;
    //  the door never waits on it: a full pipe drops the frame
    zsock_set_sndtimeo(zactor_sock(self->actor), 0);
    return self;

fail_self:
    free(self);
fail:
    return NULL;
}

void
pk_handshake_destroy(pk_handshake_t **self_p)
{
    pk_handshake_t *self = *self_p;
    if (!self)
        return;
    zactor_t *actor = self->actor;
    zsock_set_sndtimeo(zactor_sock(actor), -1);
    if (zstr_send(actor, "STOP") == 0) {
        zmsg_t *msg;
        while ((msg = zmsg_recv(actor))) {
            char *cmd = zmsg_popstr(msg);
            bool stopped = !cmd || streq(cmd, "STOPPED");
            if (cmd && streq(cmd, "PEER")) {
                zframe_t *rid = zmsg_pop(msg);
                zframe_destroy(&rid);
                pk_peer_t *peer = pk_pointer_pop(msg);
                pk_peer_destroy(&peer);
            }
            zstr_free(&cmd);
            zmsg_destroy(&msg);
            if (stopped)
                break;
        }
    }
    zactor_destroy(&self->actor);
    free(self);
    *self_p = NULL;
}

zactor_t *
pk_handshake_actor(const pk_handshake_t *self)
{
    return self->actor;
}

int
pk_handshake_hello(pk_handshake_t *self, zframe_t *rid, zframe_t *frame, const char *key)
{
    if (zsock_send(self->actor, "sffs", "HELLO", rid, frame, key) != 0)
        return -EAGAIN;
    self->sent++;
    self->bytes_sent += zframe_size(frame);
    return 0;
}

void
pk_handshake_backlog(const pk_handshake_t *self, uint64_t *frames, uint64_t *bytes)
{
    *frames = self->sent - atomic_load(&self->done);
    *bytes = self->bytes_sent - atomic_load(&self->bytes_done);
}
