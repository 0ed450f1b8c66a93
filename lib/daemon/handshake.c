/*  handshake.c: the handshake actor: describe and connect from routing ids
    without a session.

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
#include "daemon/door.h"
#include "base/thread.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    pk_node_t *node;
    zsock_t *pipe;
    bool stopped;
} self_t;

static self_t *
s_self_new(zsock_t *pipe, pk_node_t *node)
{
    self_t *self = calloc(1, sizeof *self);
    if (self) {
        self->node = node;
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
    pk_server_session_disconnect_frame(&self->node->id, code, reason, NULL, NULL, &frame, &len);
    s_reply(self, rid, rlen, frame ? frame : "", frame ? len : 0);
    free(frame);
}

//  An accepted connect becomes a peer; the connect message goes with it.
static void
s_accept(self_t *self, const uint8_t *rid, size_t rlen, const char *key, size_t fabric,
         pk_msg_t **m_p)
{
    pk_peer_t *peer = calloc(1, sizeof *peer);
    if (peer && pthread_mutex_init(&peer->lock, NULL) != 0) {
        free(peer);
        peer = NULL;
    }
    if (!peer || rlen > sizeof peer->rid || !(peer->consumer = strdup((*m_p)->peer_id))) {
        if (peer)
            pthread_mutex_destroy(&peer->lock);
        free(peer);
        s_reply(self, rid, rlen, "", 0);
        return;
    }
    peer->node = self->node;
    peer->fabric = fabric;
    snprintf(peer->curve_key, sizeof peer->curve_key, "%s", key);
    memcpy(peer->rid, rid, rlen);
    peer->rlen = rlen;
    peer->connect = *m_p;
    *m_p = NULL;
    zsock_send(self->pipe, "sbp", "PEER", rid, rlen, peer);
}

static void
s_hello(self_t *self, const uint8_t *rid, size_t rlen, const void *data, size_t len,
        const char *key)
{
    pk_node_t *node = self->node;
    char err[PK_ERRLEN];
    pk_msg_t *m = NULL;
    if (pk_msg_decode(data, len, &m, err) != 0) {
        pk_node_log(node, PK_LOG_DEBUG, "frame from an unknown peer dropped: %s", err);
        s_reply(self, rid, rlen, "", 0);
        return;
    }
    char reason[PK_ERRLEN];
    int fabric = 0;
    if (m->type == PK_MSG_DESCRIBE) {
        char *frame = NULL;
        size_t flen = 0;
        pk_server_session_description(&node->id, &frame, &flen);
        s_reply(self, rid, rlen, frame ? frame : "", frame ? flen : 0);
        free(frame);
    }
    else if (m->type != PK_MSG_CONNECT)
        s_disconnect(self, rid, rlen, PK_DISC_NO_SESSION, "no session: send connect");
    //  the address blob is checked before any data-plane object exists: a
    //  flood of junk connects costs a parse each, nothing that stays.  Its
    //  provider picks the fabric (one per provider offered) that checks it
    else if (pk_server_session_check_connect(&node->id, m, reason, sizeof reason) != 0
             || (fabric = pk_node_fabric_for(node, m->agent_metadata, m->agent_metadata_len,
                                             reason, sizeof reason)) < 0
             || pk_fabric_check_blob(node->fabrics[fabric].fabric, m->agent_metadata,
                                     m->agent_metadata_len, reason) != 0) {
        pk_node_log(node, PK_LOG_INFO, "connect from %s refused: %s", m->peer_id, reason);
        s_disconnect(self, rid, rlen, PK_DISC_INCOMPATIBLE, reason);
    }
    else
        s_accept(self, rid, rlen, key, (size_t) fabric, &m);
    pk_msg_destroy(&m);
}

static void
s_self_handle_pipe(self_t *self, zmsg_t *msg, const char *cmd)
{
    if (streq(cmd, "HELLO")) {
        zframe_t *rid = zmsg_pop(msg), *frame = zmsg_pop(msg);
        char *key = zmsg_popstr(msg);
        atomic_fetch_add(&self->node->handshakes_done, 1);
        atomic_fetch_add(&self->node->handshake_bytes_done, frame ? zframe_size(frame) : 0);
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

zactor_t *
pk_handshake_new(pk_node_t *node)
{
    zactor_t *actor = zactor_new(s_handshake_actor, node);
    //  the door never waits on it: a full pipe drops the frame
    if (actor)
        zsock_set_sndtimeo(zactor_sock(actor), 0);
    return actor;
}

//  Stops the actor, drained: a peer it handed back that was never
//  registered is freed here, not leaked.
void
pk_handshake_destroy(zactor_t **self_p)
{
    zactor_t *actor = *self_p;
    if (!actor)
        return;
    zsock_set_sndtimeo(zactor_sock(actor), -1);
    if (zstr_send(actor, "STOP") == 0) {
        zmsg_t *msg;
        while ((msg = zmsg_recv(actor))) {
            char *cmd = zmsg_popstr(msg);
            bool stopped = !cmd || streq(cmd, "STOPPED");
            if (cmd && streq(cmd, "PEER")) {
                zframe_t *rid = zmsg_pop(msg);
                zframe_destroy(&rid);
                pk_peer_t *peer = pk_node_pop_ptr(msg);
                if (peer)
                    pk_door_peer_free(peer);
            }
            zstr_free(&cmd);
            zmsg_destroy(&msg);
            if (stopped)
                break;
        }
    }
    zactor_destroy(self_p);
}
