/*  consumer.c: the end-to-end tests' consumer (see consumer.h).  */
#include "consumer.h"
#include "testutil.h"
#include "base/clock.h"
#include "roles/client_session.h"
#include "base/transport.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _tc_t {
    tc_config_t config;
    pk_client_session_t *session;   //  the handshake and the epochs
    zsock_t *dealer;                //  the session's socket, once started
    uint8_t *pool;
    pk_fabric_t *fabric;
    pk_channel_t *ch;
    char curve[3][41];              //  public, secret, server's (Z85); "" without CURVE
};

//  The session's ops.  The channel lives as long as the consumer (the
//  tests read its pool after a session ends), so only the socket is the
//  session's; the tests read live frames themselves, so nothing is
//  delivered to a role.
static int
s_open(void *arg, const uint8_t *epoch, uint8_t **blob_p, size_t *len_p, char *err)
{
    tc_t *self = arg;
    self->dealer = zsock_new(ZMQ_DEALER);
    if (!self->dealer)
        return pk_err(err, -ENOMEM, "cannot create a socket");
    uint8_t rid[1 + PK_EPOCH_LEN] = { 'P' };
    memcpy(rid + 1, epoch, PK_EPOCH_LEN);
    zmq_setsockopt(zsock_resolve(self->dealer), ZMQ_ROUTING_ID, rid, sizeof rid);
    if (*self->curve[0]) {
        zsock_set_curve_serverkey(self->dealer, self->curve[2]);
        zsock_set_curve_publickey(self->dealer, self->curve[0]);
        zsock_set_curve_secretkey(self->dealer, self->curve[1]);
    }
    if (zsock_connect(self->dealer, "%s", self->config.endpoint) < 0)
        return pk_err(err, -EINVAL, "cannot connect to %s", self->config.endpoint);
    if (pk_channel_blob(self->ch, blob_p, len_p))
        return pk_err(err, -EIO, "cannot describe the endpoint");
    return 0;
}

void
tc_set_curve(tc_t *self, const char *public_key, const char *secret_key, const char *server_key)
{
    snprintf(self->curve[0], sizeof self->curve[0], "%s", public_key);
    snprintf(self->curve[1], sizeof self->curve[1], "%s", secret_key);
    snprintf(self->curve[2], sizeof self->curve[2], "%s", server_key);
}

size_t
tc_routing_id(tc_t *self, uint8_t *rid)
{
    rid[0] = 'P';
    memcpy(rid + 1, pk_client_session_epoch(self->session), PK_EPOCH_LEN);
    return 1 + PK_EPOCH_LEN;
}

static void
s_close(void *arg)
{
    zsock_destroy(&((tc_t *) arg)->dealer);
}

static int
s_send(void *arg, const char *frame, size_t len)
{
    return tc_send_raw(arg, frame, len) == 0 ? 0 : -EAGAIN;
}

static int
s_up(void *arg)
{
    return 0;
}

static int
s_deliver(void *arg, const pk_msg_t *msg, const char **why)
{
    return 0;
}

static void
s_gone(void *arg, const char *reason)
{
}

tc_t *
tc_new(const tc_config_t *config)
{
    tc_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->config = *config;
    size_t bytes = config->num_blocks * config->block_len;
    self->pool = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    memset(self->pool, 0xee, bytes);
    char err[PK_ERRLEN];
    int rc;
    pk_fabric_config_t fc = { "tcp", "127.0.0.1", 5.0 };
    self->fabric = pk_fabric_open(pk_transport_find("ofi"), &fc, self->pool, config->num_blocks,
                                  config->block_len, &rc, err);
    if (self->fabric)
        self->ch = pk_channel_new(self->fabric, true, &rc, err);
    //  connect is repeated every 0.5 s until answered
    pk_client_session_config_t sc = { 0.5, 3600, 3600, true };
    pk_client_identity_t id = { config->endpoint, config->peer_id, config->num_blocks,
                                config->block_len, config->fingerprint, config->hash_seed,
                                config->wire_major, NULL };
    pk_client_session_ops_t ops = { sizeof ops, self, s_open, s_close, s_send, s_up, s_deliver,
                                    s_gone, NULL };
    self->session = pk_client_session_new(&sc, &id, pk_clock_system(), &ops);
    if (!self->ch || !self->session) {
        tc_destroy(&self);
        return NULL;
    }
    return self;
}

void
tc_destroy(tc_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    tc_t *self = *self_p;
    pk_client_session_destroy(&self->session);
    zsock_destroy(&self->dealer);
    if (self->ch)
        pk_channel_close(&self->ch);
    if (self->fabric)
        pk_fabric_close(&self->fabric);
    free(self->pool);
    free(self);
    *self_p = NULL;
}

int
tc_send_raw(tc_t *self, const void *data, size_t len)
{
    //  never block: a DEALER with no connected server (not up yet, or
    //  refused by --allow) would wait forever
    if (!self->dealer)
        return -1;
    zframe_t *f = zframe_new(data, len);
    int rc = zframe_send(&f, self->dealer, ZFRAME_DONTWAIT);
    zframe_destroy(&f);
    return rc;
}

int
tc_send(tc_t *self, pk_msg_t *m)
{
    if (!(m->present & PK_BIT(PK_F_SOURCE_EPOCH)) && m->type != PK_MSG_DESCRIBE
        && m->type != PK_MSG_CONNECT)
        pk_msg_set_epochs(m, pk_client_session_epoch(self->session),
                          pk_client_session_server_epoch(self->session));
    char *frame;
    size_t len;
    int rc = pk_msg_encode(m, &frame, &len, NULL);
    if (rc == 0) {
        rc = tc_send_raw(self, frame, len);
        free(frame);
    }
    pk_msg_destroy(&m);
    return rc;
}

pk_msg_t *
tc_recv(tc_t *self, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    while (pk_clock_monotonic() < deadline) {
        pk_channel_progress(self->ch);
        if (self->dealer && (zsock_events(self->dealer) & ZMQ_POLLIN)) {
            zframe_t *f = zframe_recv(self->dealer);
            pk_msg_t *m = NULL;
            char err[PK_ERRLEN];
            if (f && pk_msg_decode(zframe_data(f), zframe_size(f), &m, err) != 0)
                m = NULL;
            zframe_destroy(&f);
            if (m)
                return m;
        }
        else
            zclock_sleep(1);
    }
    return NULL;
}

void
tc_progress(tc_t *self, double seconds)
{
    double deadline = pk_clock_monotonic() + seconds;
    while (pk_clock_monotonic() < deadline)
        pk_channel_progress(self->ch);
}

pk_msg_t *
tc_connect(tc_t *self, double timeout)
{
    if (pk_client_session_state(self->session) == PK_CLIENT_SESSION_DOWN
        && pk_client_session_start(self->session, NULL) != 0)
        return NULL;
    double deadline = pk_clock_monotonic() + timeout;
    while (pk_clock_monotonic() < deadline) {
        pk_client_session_tick(self->session);
        double left = deadline - pk_clock_monotonic();
        pk_msg_t *m = tc_recv(self, left < 0.005 ? left : 0.005);
        if (!m)
            continue;
        pk_client_session_on_message(self->session, m);
        if (m->type == PK_MSG_CONNECT_ACK || m->type == PK_MSG_DISCONNECT)
            return m;
        pk_msg_destroy(&m);
    }
    return NULL;
}

tc_t *
tc_connected(const tc_config_t *config)
{
    tc_t *self = tc_new(config);
    ck_assert_msg(self != NULL, "%s: no consumer", config->peer_id);
    pk_msg_t *answer = tc_connect(self, 10);
    ck_assert_msg(answer && answer->type == PK_MSG_CONNECT_ACK, "%s: %s within 10 s",
                  config->peer_id, answer ? pk_msg_type_name(answer->type) : "no answer");
    pk_msg_destroy(&answer);
    return self;
}

pk_msg_t *
tc_expect(tc_t *self, pk_msg_type_t type, double timeout)
{
    pk_msg_t *m = tc_recv(self, timeout);
    while (m && m->type == PK_MSG_PONG && type != PK_MSG_PONG) {
        pk_msg_destroy(&m);
        m = tc_recv(self, timeout);
    }
    ck_assert_msg(m != NULL, "no %s within %.1f s", pk_msg_type_name(type), timeout);
    ck_assert_msg(m->type == type, "got %s, want %s%s%s", pk_msg_type_name(m->type),
                  pk_msg_type_name(type), m->type == PK_MSG_DISCONNECT ? ": " : "",
                  m->type == PK_MSG_DISCONNECT ? m->reason : "");
    return m;
}

uint8_t *
tc_pool(tc_t *self)
{
    return self->pool;
}

uint64_t
tc_landed(tc_t *self, uint64_t round)
{
    return pk_channel_landed(self->ch, round);
}

pk_msg_t *
tc_lookup(const char *kv, uint64_t round, const pk_key_t *keys, size_t n)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_LOOKUP);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_keys(m, keys, n);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, round);
    return m;
}

pk_msg_t *
tc_fetch(const char *kv, uint64_t round, const pk_key_t *keys, const uint32_t *idx, size_t n)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_FETCH);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_keys(m, keys, n);
    pk_msg_set_block_indexes(m, idx, n);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, round);
    return m;
}
