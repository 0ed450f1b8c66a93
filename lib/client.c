/*  client.c: the client library of p2pkv.h.

    Per server: one DEALER socket (routing id "P" + the session epoch), one
    libfabric channel exposing the pool under its own registration, and one
    client role.  The consumer's half of the session lives here: the
    handshake, epochs on what goes out and checked on what comes in,
    keepalive and silence (protocol.md sections 4 and 5).  A server that
    goes away (disconnect, silence, a violation) is cut off first, then its
    open fetches fail; the caller connects again for a new session.
*/
#include "p2pkv.h"
#include "client_role.h"
#include "clock.h"
#include "ofi.h"
#include "protocol.h"
#include "version.h"

#include <czmq.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_SERVERS 64

typedef struct {
    p2pkv_client_t *client;
    int index;
    zsock_t *dealer;
    pk_ofi_channel_t *channel;
    pk_client_role_t *role;
    uint8_t epoch[PK_EPOCH_LEN];
    uint8_t server_epoch[PK_EPOCH_LEN];
    bool live;
    double last_sent, last_heard;
} s_server_t;

struct _p2pkv_client_t {
    p2pkv_config_t config;
    char *peer_id, *fingerprint, *hash_seed, *provider, *node;
    uint8_t *pool;
    bool own_pool;
    uint64_t num_blocks, block_len;
    pk_ofi_t *ofi;
    p2pkv_callbacks_t callbacks;
    s_server_t *servers[S_MAX_SERVERS];
    int nservers;
    int ran;                        //  callbacks run in the current poll
};

static void
s_err(char *err, const char *fmt, ...)
{
    if (!err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, 256, fmt, ap);
    va_end(ap);
}

//  --------------------------------------------------------------------------
//  Frames

static int
s_send_frame(zsock_t *dealer, const pk_msg_t *m)
{
    char *frame;
    size_t len;
    int rc = pk_msg_encode(m, &frame, &len, NULL);
    if (rc)
        return rc;
    //  never block: a DEALER with no connected server would wait forever
    zframe_t *f = zframe_new(frame, len);
    free(frame);
    rc = zframe_send(&f, dealer, ZFRAME_DONTWAIT);
    zframe_destroy(&f);
    return rc ? -EAGAIN : 0;
}

static pk_msg_t *
s_recv_msg(zsock_t *dealer)
{
    if (!(zsock_events(dealer) & ZMQ_POLLIN))
        return NULL;
    zframe_t *f = zframe_recv(dealer);
    pk_msg_t *m = NULL;
    if (f && pk_msg_decode(zframe_data(f), zframe_size(f), &m, NULL) != 0)
        m = NULL;
    zframe_destroy(&f);
    return m;
}

int
p2pkv_describe(const char *endpoint, double timeout, p2pkv_description_t *out, char *err)
{
    zsock_t *dealer = zsock_new_dealer(endpoint);
    if (!dealer) {
        s_err(err, "cannot connect to %s", endpoint);
        return -EINVAL;
    }
    double deadline = pk_clock_monotonic() + timeout, next = 0;
    int rc = -ETIMEDOUT;
    while (rc == -ETIMEDOUT && pk_clock_monotonic() < deadline) {
        if (pk_clock_monotonic() >= next) {
            pk_msg_t d = { .type = PK_MSG_DESCRIBE };
            bool sent = s_send_frame(dealer, &d) == 0;
            next = pk_clock_monotonic() + (sent ? 0.5 : 0.005);
        }
        pk_msg_t *m = s_recv_msg(dealer);
        if (m && m->type == PK_MSG_DESCRIPTION) {
            snprintf(out->peer_id, sizeof out->peer_id, "%s", m->peer_id);
            out->block_len = m->block_len;
            snprintf(out->fingerprint, sizeof out->fingerprint, "%s", m->config_fingerprint);
            snprintf(out->hash_seed, sizeof out->hash_seed, "%s", m->hash_seed);
            snprintf(out->provider, sizeof out->provider, "%s", m->provider);
            rc = 0;
        }
        else if (!m)
            zclock_sleep(2);
        pk_msg_destroy(&m);
    }
    if (rc)
        s_err(err, "no description from %s within %.1f s", endpoint, timeout);
    zsock_destroy(&dealer);
    return rc;
}

//  --------------------------------------------------------------------------
//  The role's seams, per server

static double
s_clock_now(void *arg)
{
    return pk_clock_monotonic();
}

static void
s_role_send(void *arg, const pk_msg_t *msg)
{
    s_server_t *s = arg;
    pk_msg_t m = *msg;
    pk_msg_set_epochs(&m, s->epoch, s->server_epoch);
    if (s_send_frame(s->dealer, &m) == 0)
        s->last_sent = pk_clock_monotonic();
}

static uint64_t
s_landed(void *arg, uint64_t round)
{
    s_server_t *s = arg;
    return s->channel ? pk_ofi_channel_landed(s->channel, round) : 0;
}

//  Closing the endpoint and the registration: nothing from this server
//  lands in the pool afterwards (protocol.md section 7).
static void
s_cut_off(void *arg)
{
    s_server_t *s = arg;
    pk_ofi_channel_destroy(&s->channel);
}

static void
s_lookup_done(void *arg, const char *kv, uint64_t round, const pk_key_t *keys, const bool *hits,
              size_t n)
{
    s_server_t *s = arg;
    p2pkv_client_t *c = s->client;
    p2pkv_key_t stack[64];
    p2pkv_key_t *out = n <= 64 ? stack : malloc(n * sizeof *out);
    if (!out)
        return;
    for (size_t i = 0; i < n; i++)
        out[i] = (p2pkv_key_t) { keys[i].bytes, keys[i].len };
    c->ran++;
    if (c->callbacks.on_lookup)
        c->callbacks.on_lookup(c->callbacks.arg, s->index, kv, round, out, hits, n);
    if (out != stack)
        free(out);
}

static void
s_load_done(void *arg, uint64_t id, pk_load_status_t status, const char *reason)
{
    s_server_t *s = arg;
    p2pkv_client_t *c = s->client;
    c->ran++;
    if (c->callbacks.on_fetch)
        c->callbacks.on_fetch(c->callbacks.arg, s->index, id,
                              status == PK_LOAD_LANDED ? P2PKV_LANDED
                              : status == PK_LOAD_ABORTED ? P2PKV_ABORTED : P2PKV_FAILED,
                              reason);
}

//  --------------------------------------------------------------------------
//  Construction

p2pkv_client_t *
p2pkv_client_new(const p2pkv_config_t *config, void *pool, uint64_t num_blocks,
                 uint64_t block_len, p2pkv_callbacks_t callbacks, char *err)
{
    if (!config || !config->peer_id || !*config->peer_id || !num_blocks || !block_len
        || num_blocks > PK_MAX_NUM_BLOCKS) {
        s_err(err, "a peer_id and a pool of 1..2^31 blocks of at least 1 byte are required");
        return NULL;
    }
    if (sodium_init() < 0) {
        s_err(err, "libsodium failed to start");
        return NULL;
    }
    p2pkv_client_t *self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    self->config = *config;
    self->peer_id = strdup(config->peer_id);
    self->fingerprint = strdup(config->fingerprint ? config->fingerprint : "");
    self->hash_seed = strdup(config->hash_seed ? config->hash_seed : "0");
    self->provider = config->provider ? strdup(config->provider) : NULL;
    self->node = config->node ? strdup(config->node) : NULL;
    if (!self->peer_id || !self->fingerprint || !self->hash_seed)
        goto fail_strings;
    if (!(self->config.load_timeout > 0))
        self->config.load_timeout = 30;
    if (!(self->config.abort_ack_timeout > 0))
        self->config.abort_ack_timeout = 10;
    if (!(self->config.keepalive > 0))
        self->config.keepalive = 2;
    if (!(self->config.silence > 0))
        self->config.silence = 10;
    self->num_blocks = num_blocks;
    self->block_len = block_len;
    self->callbacks = callbacks;
    if (pool)
        self->pool = pool;
    else {
        size_t bytes = num_blocks * block_len;
        self->pool = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
        self->own_pool = true;
        if (!self->pool)
            goto fail_strings;
        memset(self->pool, 0, bytes);
    }
    char ofi_err[PK_OFI_ERRLEN];
    int rc;
    pk_ofi_config_t oc = { self->provider, self->node, 5.0 };
    self->ofi = pk_ofi_new(&oc, self->pool, num_blocks, block_len, &rc, ofi_err);
    if (!self->ofi) {
        s_err(err, "%s", ofi_err);
        goto fail_pool;
    }
    return self;

fail_pool:
    if (self->own_pool)
        free(self->pool);
fail_strings:
    free(self->peer_id);
    free(self->fingerprint);
    free(self->hash_seed);
    free(self->provider);
    free(self->node);
    free(self);
fail:
    if (err && !*err)
        s_err(err, "out of memory");
    return NULL;
}

static void
s_server_free(s_server_t **s_p)
{
    s_server_t *s = *s_p;
    if (!s)
        return;
    pk_client_role_destroy(&s->role);
    pk_ofi_channel_destroy(&s->channel);
    zsock_destroy(&s->dealer);
    free(s);
    *s_p = NULL;
}

void
p2pkv_client_destroy(p2pkv_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    p2pkv_client_t *self = *self_p;
    for (int i = 0; i < self->nservers; i++) {
        s_server_t *s = self->servers[i];
        if (s && s->live) {
            pk_msg_t d = { .type = PK_MSG_DISCONNECT, .code = PK_DISC_SHUTDOWN,
                           .reason = "client closing",
                           .present = PK_BIT(PK_F_CODE) | PK_BIT(PK_F_REASON) };
            pk_msg_set_epochs(&d, s->epoch, s->server_epoch);
            s_send_frame(s->dealer, &d);
        }
        s_server_free(&self->servers[i]);
    }
    pk_ofi_destroy(&self->ofi);
    if (self->own_pool)
        free(self->pool);
    free(self->peer_id);
    free(self->fingerprint);
    free(self->hash_seed);
    free(self->provider);
    free(self->node);
    free(self);
    *self_p = NULL;
}

uint8_t *
p2pkv_client_pool(p2pkv_client_t *self)
{
    return self->pool;
}

//  --------------------------------------------------------------------------
//  Sessions

int
p2pkv_client_connect(p2pkv_client_t *self, const char *endpoint, double timeout, char *err)
{
    if (self->nservers == S_MAX_SERVERS) {
        s_err(err, "at most %d servers", S_MAX_SERVERS);
        return -ENOSPC;
    }
    s_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        s_err(err, "out of memory");
        return -ENOMEM;
    }
    s->client = self;
    s->index = self->nservers;
    do
        randombytes_buf(s->epoch, sizeof s->epoch);
    while (sodium_is_zero(s->epoch, sizeof s->epoch));
    char ofi_err[PK_OFI_ERRLEN];
    int rc;
    s->channel = pk_ofi_channel_new(self->ofi, true, &rc, ofi_err);
    s->dealer = zsock_new(ZMQ_DEALER);
    if (!s->channel || !s->dealer) {
        s_err(err, "%s", s->channel ? "cannot create a socket" : ofi_err);
        s_server_free(&s);
        return -ENOMEM;
    }
    //  a stable routing id: a TCP reconnect keeps the session's id
    uint8_t rid[1 + PK_EPOCH_LEN] = { 'P' };
    memcpy(rid + 1, s->epoch, PK_EPOCH_LEN);
    zmq_setsockopt(zsock_resolve(s->dealer), ZMQ_ROUTING_ID, rid, sizeof rid);
    if (zsock_connect(s->dealer, "%s", endpoint) < 0) {
        s_err(err, "cannot connect to %s", endpoint);
        s_server_free(&s);
        return -EINVAL;
    }
    uint8_t *blob;
    size_t bloblen;
    if (pk_ofi_channel_blob(s->channel, &blob, &bloblen)) {
        s_err(err, "cannot describe the local endpoint");
        s_server_free(&s);
        return -EIO;
    }
    static const uint8_t zero[PK_EPOCH_LEN];
    pk_msg_t c = { .type = PK_MSG_CONNECT, .wire_major = PK_WIRE_MAJOR,
                   .wire_minor = PK_WIRE_MINOR, .peer_id = self->peer_id,
                   .agent_metadata = blob, .agent_metadata_len = bloblen, .base_addr = 0,
                   .num_blocks = self->num_blocks, .block_len = self->block_len,
                   .config_fingerprint = self->fingerprint, .hash_seed = self->hash_seed,
                   .present = PK_BIT(PK_F_WIRE_MAJOR) | PK_BIT(PK_F_WIRE_MINOR)
                              | PK_BIT(PK_F_PEER_ID) | PK_BIT(PK_F_AGENT_METADATA)
                              | PK_BIT(PK_F_BASE_ADDR) | PK_BIT(PK_F_NUM_BLOCKS)
                              | PK_BIT(PK_F_BLOCK_LEN) | PK_BIT(PK_F_CONFIG_FINGERPRINT)
                              | PK_BIT(PK_F_HASH_SEED) };
    pk_msg_set_epochs(&c, s->epoch, zero);
    //  connect, repeated every 0.5 s until its connect_ack (the server may
    //  not be up yet) or a disconnect
    double deadline = pk_clock_monotonic() + timeout, next = 0;
    rc = -ETIMEDOUT;
    while (rc == -ETIMEDOUT && pk_clock_monotonic() < deadline) {
        if (pk_clock_monotonic() >= next) {
            //  not connected yet at the socket level: try again very soon
            bool sent = s_send_frame(s->dealer, &c) == 0;
            next = pk_clock_monotonic() + (sent ? 0.5 : 0.005);
        }
        pk_ofi_channel_progress(s->channel);
        pk_msg_t *m = s_recv_msg(s->dealer);
        if (m && m->type == PK_MSG_CONNECT_ACK
            && memcmp(m->target_epoch, s->epoch, PK_EPOCH_LEN) == 0) {
            memcpy(s->server_epoch, m->source_epoch, PK_EPOCH_LEN);
            rc = 0;
        }
        else if (m && m->type == PK_MSG_DISCONNECT) {
            s_err(err, "%s refused the connection (%s): %s", endpoint,
                  pk_disconnect_code_name(m->code), m->reason);
            rc = m->code == PK_DISC_INCOMPATIBLE ? -EPROTO : -ECONNREFUSED;
        }
        else if (!m)
            zclock_sleep(1);
        pk_msg_destroy(&m);
    }
    free(blob);
    if (rc) {
        if (rc == -ETIMEDOUT)
            s_err(err, "no answer from %s within %.1f s", endpoint, timeout);
        s_server_free(&s);
        return rc;
    }
    pk_client_role_config_t rc_cfg = { self->config.load_timeout, self->config.abort_ack_timeout };
    s->role = pk_client_role_new(&rc_cfg, (pk_clock_t) { s, s_clock_now },
                                 (pk_sender_t) { s, s_role_send },
                                 (pk_client_transport_t) { s, s_landed, s_cut_off },
                                 (pk_client_events_t) { s, s_lookup_done, s_load_done });
    if (!s->role) {
        s_err(err, "out of memory");
        s_server_free(&s);
        return -ENOMEM;
    }
    s->live = true;
    s->last_sent = s->last_heard = pk_clock_monotonic();
    self->servers[self->nservers++] = s;
    return s->index;
}

static s_server_t *
s_server(p2pkv_client_t *self, int server)
{
    if (server < 0 || server >= self->nservers)
        return NULL;
    s_server_t *s = self->servers[server];
    return s && s->live ? s : NULL;
}

//  The server is gone: cut off first, then its open fetches fail.
static void
s_gone(s_server_t *s, const char *reason)
{
    if (!s->live)
        return;
    s->live = false;
    pk_client_role_server_gone(s->role, reason);
}

static void
s_keys(const p2pkv_key_t *in, size_t n, pk_key_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = pk_key_make(in[i].bytes, in[i].len);
}

int
p2pkv_client_lookup(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
                    size_t n)
{
    s_server_t *s = s_server(self, server);
    if (!s)
        return -ENOTCONN;
    if (n == 0 || n > PK_MAX_LIST)
        return -EINVAL;
    pk_key_t *k = malloc(n * sizeof *k);
    if (!k)
        return -ENOMEM;
    s_keys(keys, n, k);
    int rc = pk_client_role_probe(s->role, kv, k, n);
    free(k);
    if (rc == 0)
        pk_client_role_flush(s->role);
    return rc;
}

int
p2pkv_client_fetch(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
                   const uint32_t *dest, size_t n, uint64_t round, double deadline,
                   uint64_t *fetch_id_p)
{
    s_server_t *s = s_server(self, server);
    if (!s)
        return -ENOTCONN;
    if (n == 0 || n > PK_MAX_LIST)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (dest[i] >= self->num_blocks)
            return -ERANGE;
    pk_key_t *k = malloc(n * sizeof *k);
    if (!k)
        return -ENOMEM;
    s_keys(keys, n, k);
    int rc = pk_client_role_fetch(s->role, kv, k, dest, n, round, deadline, fetch_id_p);
    free(k);
    return rc;
}

int
p2pkv_client_finish(p2pkv_client_t *self, int server, const char *kv)
{
    s_server_t *s = s_server(self, server);
    return s ? pk_client_role_finish(s->role, kv) : -ENOTCONN;
}

//  What the server said: epochs checked, then the role's.
static void
s_on_frame(s_server_t *s, pk_msg_t *m)
{
    if (m->type == PK_MSG_DESCRIPTION || m->type == PK_MSG_CONNECT_ACK)
        return;     //  a late answer to our repeated connect
    bool epochs = (m->present & PK_BIT(PK_F_SOURCE_EPOCH))
                  && memcmp(m->source_epoch, s->server_epoch, PK_EPOCH_LEN) == 0
                  && memcmp(m->target_epoch, s->epoch, PK_EPOCH_LEN) == 0;
    if (m->type == PK_MSG_DISCONNECT && (epochs || !(m->present & PK_BIT(PK_F_SOURCE_EPOCH)))) {
        char reason[PK_ERRLEN + 32];
        snprintf(reason, sizeof reason, "server disconnected (%s): %s",
                 pk_disconnect_code_name(m->code), m->reason);
        s_gone(s, reason);
        return;
    }
    if (!epochs)
        return;     //  stale
    s->last_heard = pk_clock_monotonic();
    if (pk_client_role_on_message(s->role, m) == -EPROTO) {
        pk_msg_t d = { .type = PK_MSG_DISCONNECT, .code = PK_DISC_VIOLATION,
                       .reason = "two transfer_done for one round",
                       .present = PK_BIT(PK_F_CODE) | PK_BIT(PK_F_REASON) };
        pk_msg_set_epochs(&d, s->epoch, s->server_epoch);
        s_send_frame(s->dealer, &d);
        s_gone(s, "protocol violation by the server: two transfer_done for one round");
    }
}

static void
s_server_step(p2pkv_client_t *self, s_server_t *s)
{
    if (s->channel)
        pk_ofi_channel_progress(s->channel);
    if (!s->live)
        return;
    pk_msg_t *m;
    while (s->live && (m = s_recv_msg(s->dealer))) {
        s_on_frame(s, m);
        pk_msg_destroy(&m);
    }
    if (!s->live)
        return;
    pk_client_role_tick(s->role);
    double now = pk_clock_monotonic();
    if (now - s->last_heard >= self->config.silence) {
        s_gone(s, "server silent");
        return;
    }
    if (now - s->last_sent >= self->config.keepalive) {
        pk_msg_t ping = { .type = PK_MSG_PING };
        s_role_send(s, &ping);
    }
}

int
p2pkv_client_poll(p2pkv_client_t *self, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    self->ran = 0;
    do {
        for (int i = 0; i < self->nservers; i++)
            if (self->servers[i])
                s_server_step(self, self->servers[i]);
        if (self->ran || pk_clock_monotonic() >= deadline)
            break;
        //  spin while fetches run, else a short sleep
        if (!p2pkv_client_open_fetches(self))
            zclock_sleep(1);
    } while (true);
    return self->ran;
}

size_t
p2pkv_client_open_fetches(const p2pkv_client_t *self)
{
    size_t n = 0;
    for (int i = 0; i < self->nservers; i++)
        if (self->servers[i] && self->servers[i]->role)
            n += pk_client_role_open_loads(self->servers[i]->role);
    return n;
}
