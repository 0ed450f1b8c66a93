/*  client_session.c: the consumer's half of a session (client_session.h).

    Every transition goes through s_enter, so the owner hears of each
    change once, with its reason; every end of a session's resources goes
    through s_close, so ops.close runs once per open.
*/
#include "roles/client_session.h"

#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _pk_client_session_t {
    pk_client_session_config_t config;
    char *endpoint, *peer_id, *fingerprint, *hash_seed;
    char *caps;                     //  ours, for connect (NULL: none)
    char server_caps[PK_MAX_CAPS + 1];  //  the last connect_ack's
    uint64_t num_blocks, block_len, wire_major;
    pk_clock_t clock;
    pk_client_session_ops_t ops;

    pk_client_session_state_t state;
    char reason[PK_ERRLEN + 64];
    bool opened;                    //  ops.open ran: ops.close is owed
    bool held;                      //  disconnected by the owner: no reconnect
    uint8_t epoch[PK_EPOCH_LEN];
    uint8_t server_epoch[PK_EPOCH_LEN];
    uint8_t *blob;                  //  our address, sent in every connect
    size_t bloblen;
    double next_connect;            //  CONNECTING: when connect goes out again
    double reconnect_at;            //  DOWN: when a new session opens
    double last_sent, last_heard;   //  UP: for keepalive and silence
};

static double
s_now(const pk_client_session_t *self)
{
    return self->clock.now(self->clock.self);
}

static void
s_enter(pk_client_session_t *self, pk_client_session_state_t state, const char *reason)
{
    self->state = state;
    if (reason != self->reason)
        snprintf(self->reason, sizeof self->reason, "%s", reason ? reason : "");
    if (self->ops.state)
        self->ops.state(self->ops.self, state, self->reason);
}

static void
s_close(pk_client_session_t *self)
{
    if (self->opened)
        self->ops.close(self->ops.self);
    self->opened = false;
    free(self->blob);
    self->blob = NULL;
    self->bloblen = 0;
}

static int
s_send(pk_client_session_t *self, const pk_msg_t *msg, const uint8_t *target_epoch)
{
    pk_msg_t m = *msg;
    pk_msg_set_epochs(&m, self->epoch, target_epoch);
    char *frame;
    size_t len;
    int rc = pk_msg_encode(&m, &frame, &len, NULL);
    if (rc)
        return rc;
    rc = self->ops.send(self->ops.self, frame, len);     //  the op's now
    if (rc == 0)
        self->last_sent = s_now(self);
    return rc;
}

//  --------------------------------------------------------------------------
//  Construction

pk_client_session_t *
pk_client_session_new(const pk_client_session_config_t *config, const pk_client_identity_t *id,
                      pk_clock_t clock, const pk_client_session_ops_t *ops)
{
    //  an owner built against an older header lacks members we call
    if (!ops || ops->size < sizeof *ops || !ops->open || !ops->close || !ops->send
        || !ops->up || !ops->deliver || !ops->gone)
        return NULL;
    pk_client_session_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->config = *config;
    self->clock = clock;
    self->ops = *ops;
    self->num_blocks = id->num_blocks;
    self->block_len = id->block_len;
    self->wire_major = id->wire_major ? id->wire_major : PK_WIRE_MAJOR;
    self->endpoint = strdup(id->endpoint ? id->endpoint : "the server");
    self->peer_id = strdup(id->peer_id);
    self->fingerprint = strdup(id->fingerprint);
    self->hash_seed = strdup(id->hash_seed);
    self->caps = id->caps ? strdup(id->caps) : NULL;
    if (!self->endpoint || !self->peer_id || !self->fingerprint || !self->hash_seed
        || (id->caps && !self->caps)) {
        pk_client_session_destroy(&self);
        return NULL;
    }
    self->state = PK_CLIENT_SESSION_DOWN;
    self->held = true;      //  until start
    return self;
}

void
pk_client_session_destroy(pk_client_session_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_client_session_t *self = *self_p;
    s_close(self);
    free(self->endpoint);
    free(self->peer_id);
    free(self->fingerprint);
    free(self->hash_seed);
    free(self->caps);
    free(self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------------
//  Opening and losing a session

//  A new session: fresh epoch and resources; connect goes out when due.
static int
s_open(pk_client_session_t *self, char *err)
{
    do
        randombytes_buf(self->epoch, sizeof self->epoch);
    while (sodium_is_zero(self->epoch, sizeof self->epoch));
    memset(self->server_epoch, 0, sizeof self->server_epoch);
    char why[PK_ERRLEN] = "";
    self->opened = true;
    int rc = self->ops.open(self->ops.self, self->epoch, &self->blob, &self->bloblen, why);
    if (rc) {
        s_close(self);
        self->reconnect_at = s_now(self) + self->config.reconnect_interval;
        snprintf(self->reason, sizeof self->reason, "%s", *why ? why : strerror(-rc));
        if (err)
            snprintf(err, PK_ERRLEN, "%.*s", PK_ERRLEN - 1, self->reason);
        return rc < 0 ? rc : -EIO;
    }
    self->next_connect = s_now(self);
    s_enter(self, PK_CLIENT_SESSION_CONNECTING, self->reason);
    return 0;
}

int
pk_client_session_start(pk_client_session_t *self, char *err)
{
    if (self->state != PK_CLIENT_SESSION_DOWN) {
        if (err)
            snprintf(err, PK_ERRLEN, "a session with %s is already open", self->endpoint);
        return -EALREADY;
    }
    self->held = false;
    return s_open(self, err);
}

//  The server is gone: the owner fails what is open, then the resources
//  close (cut off first); a new session follows after reconnect_interval.
static void
s_gone(pk_client_session_t *self, const char *reason)
{
    if (self->state != PK_CLIENT_SESSION_UP)
        return;
    self->ops.gone(self->ops.self, reason);
    s_close(self);
    self->reconnect_at = s_now(self) + self->config.reconnect_interval;
    s_enter(self, PK_CLIENT_SESSION_DOWN, reason);
}

//  A server that breaks the protocol ends its session, as a consumer's bad
//  frame ends its own (protocol.md section 6), and is told why.
static void
s_violation(pk_client_session_t *self, const char *why)
{
    pk_msg_t d = { .type = PK_MSG_DISCONNECT, .code = PK_DISC_VIOLATION, .reason = (char *) why,
                   .present = PK_BIT(PK_F_CODE) | PK_BIT(PK_F_REASON) };
    (void) s_send(self, &d, self->server_epoch);
    char reason[PK_ERRLEN + 48];
    snprintf(reason, sizeof reason, "protocol violation by the server: %s", why);
    s_gone(self, reason);
}

void
pk_client_session_disconnect(pk_client_session_t *self, pk_disconnect_code_t code,
                             const char *reason)
{
    if (self->state == PK_CLIENT_SESSION_UP) {
        pk_msg_t d = { .type = PK_MSG_DISCONNECT, .code = code, .reason = (char *) reason,
                       .present = PK_BIT(PK_F_CODE) | PK_BIT(PK_F_REASON) };
        (void) s_send(self, &d, self->server_epoch);
    }
    s_close(self);
    self->held = true;
    if (self->state != PK_CLIENT_SESSION_STOPPED)
        s_enter(self, PK_CLIENT_SESSION_DOWN, reason);
}

void
pk_client_session_lost(pk_client_session_t *self, const char *reason)
{
    s_gone(self, reason);
}

//  --------------------------------------------------------------------------
//  Time

static void
s_send_connect(pk_client_session_t *self, double now)
{
    static const uint8_t zero[PK_EPOCH_LEN];
    pk_msg_t c = { .type = PK_MSG_CONNECT, .wire_major = self->wire_major,
                   .wire_minor = PK_WIRE_MINOR, .peer_id = self->peer_id,
                   .agent_metadata = self->blob, .agent_metadata_len = self->bloblen,
                   .base_addr = 0, .num_blocks = self->num_blocks, .block_len = self->block_len,
                   .config_fingerprint = self->fingerprint, .hash_seed = self->hash_seed,
                   .present = PK_BIT(PK_F_WIRE_MAJOR) | PK_BIT(PK_F_WIRE_MINOR)
                              | PK_BIT(PK_F_PEER_ID) | PK_BIT(PK_F_AGENT_METADATA)
                              | PK_BIT(PK_F_BASE_ADDR) | PK_BIT(PK_F_NUM_BLOCKS)
                              | PK_BIT(PK_F_BLOCK_LEN) | PK_BIT(PK_F_CONFIG_FINGERPRINT)
                              | PK_BIT(PK_F_HASH_SEED) };
    if (self->caps) {
        c.caps = self->caps;
        c.present |= PK_BIT(PK_F_CAPS);
    }
    //  repeated every reconnect_interval until answered (the server may not
    //  be up yet); a socket not connected yet is tried again very soon
    bool sent = s_send(self, &c, zero) == 0;
    self->next_connect = now + (sent ? self->config.reconnect_interval : 0.005);
}

double
pk_client_session_due(const pk_client_session_t *self)
{
    switch (self->state) {
    case PK_CLIENT_SESSION_DOWN:
        return self->held || self->config.no_reconnect ? INFINITY : self->reconnect_at;
    case PK_CLIENT_SESSION_CONNECTING:
        return self->next_connect;
    case PK_CLIENT_SESSION_UP: {
        double a = self->last_heard + self->config.silence;
        double b = self->last_sent + self->config.keepalive;
        return a < b ? a : b;
    }
    default:
        return INFINITY;
    }
}

double
pk_client_session_tick(pk_client_session_t *self)
{
    double now = s_now(self);
    if (self->state == PK_CLIENT_SESSION_DOWN && !self->held && !self->config.no_reconnect
        && now >= self->reconnect_at)
        (void) s_open(self, NULL);
    if (self->state == PK_CLIENT_SESSION_CONNECTING && now >= self->next_connect)
        s_send_connect(self, now);
    if (self->state == PK_CLIENT_SESSION_UP) {
        if (now - self->last_heard >= self->config.silence)
            s_gone(self, "server silent");
        else if (now - self->last_sent >= self->config.keepalive) {
            pk_msg_t ping = { .type = PK_MSG_PING };
            (void) s_send(self, &ping, self->server_epoch);
        }
    }
    return pk_client_session_due(self);
}

//  --------------------------------------------------------------------------
//  What the server says

static void
s_on_connect_answer(pk_client_session_t *self, const pk_msg_t *m)
{
    if (m->type == PK_MSG_DISCONNECT && m->code == PK_DISC_INCOMPATIBLE) {
        char reason[PK_ERRLEN + 64];
        snprintf(reason, sizeof reason, "%s refused us as incompatible: %s", self->endpoint,
                 m->reason);
        s_close(self);
        s_enter(self, PK_CLIENT_SESSION_STOPPED, reason);
        return;
    }
    if (m->type == PK_MSG_DISCONNECT) {
        //  retiring an older session of ours, say: keep asking
        snprintf(self->reason, sizeof self->reason, "%s refused the connection (%s): %s",
                 self->endpoint, pk_disconnect_code_name(m->code), m->reason);
        return;
    }
    if (m->type != PK_MSG_CONNECT_ACK || memcmp(m->target_epoch, self->epoch, PK_EPOCH_LEN) != 0)
        return;
    memcpy(self->server_epoch, m->source_epoch, PK_EPOCH_LEN);
    snprintf(self->server_caps, sizeof self->server_caps, "%s",
             (m->present & PK_BIT(PK_F_CAPS)) ? m->caps : "");
    self->last_sent = self->last_heard = s_now(self);
    int rc = self->ops.up(self->ops.self);
    if (rc) {
        s_close(self);
        self->reconnect_at = s_now(self) + self->config.reconnect_interval;
        s_enter(self, PK_CLIENT_SESSION_DOWN, strerror(-rc));
        return;
    }
    s_enter(self, PK_CLIENT_SESSION_UP, "");
}

static void
s_on_live(pk_client_session_t *self, const pk_msg_t *m)
{
    if (m->type == PK_MSG_DESCRIPTION || m->type == PK_MSG_CONNECT_ACK)
        return;     //  a late answer to our repeated connect
    bool stamped = m->present & PK_BIT(PK_F_SOURCE_EPOCH);
    bool epochs = stamped && memcmp(m->source_epoch, self->server_epoch, PK_EPOCH_LEN) == 0
                  && memcmp(m->target_epoch, self->epoch, PK_EPOCH_LEN) == 0;
    if (m->type == PK_MSG_DISCONNECT && (epochs || !stamped)) {
        char reason[PK_ERRLEN + 32];
        snprintf(reason, sizeof reason, "server disconnected (%s): %s",
                 pk_disconnect_code_name(m->code), m->reason);
        s_gone(self, reason);
        return;
    }
    if (!epochs)
        return;     //  stale: an older session's
    self->last_heard = s_now(self);
    if (!(pk_msg_direction(m->type) & PK_TO_CONSUMER)) {
        char why[96];
        snprintf(why, sizeof why, "a %s from a server", pk_msg_type_name(m->type));
        s_violation(self, why);
        return;
    }
    const char *why = NULL;
    if (self->ops.deliver(self->ops.self, m, &why) == -EPROTO)
        s_violation(self, why ? why : "a message the role refused");
}

void
pk_client_session_on_message(pk_client_session_t *self, const pk_msg_t *msg)
{
    if (self->state == PK_CLIENT_SESSION_CONNECTING)
        s_on_connect_answer(self, msg);
    else if (self->state == PK_CLIENT_SESSION_UP)
        s_on_live(self, msg);
}

void
pk_client_session_on_frame(pk_client_session_t *self, const void *data, size_t len)
{
    pk_msg_t *m = NULL;
    char err[PK_ERRLEN] = "";
    if (pk_msg_decode(data, len, &m, err) != 0) {
        //  before the session is up, a frame we cannot read is noise
        if (self->state == PK_CLIENT_SESSION_UP)
            s_violation(self, err);
        return;
    }
    pk_client_session_on_message(self, m);
    pk_msg_destroy(&m);
}

int
pk_client_session_send(pk_client_session_t *self, const pk_msg_t *msg)
{
    if (self->state != PK_CLIENT_SESSION_UP)
        return -ENOTCONN;
    return s_send(self, msg, self->server_epoch);
}

//  --------------------------------------------------------------------------
//  Reading

pk_client_session_state_t
pk_client_session_state(const pk_client_session_t *self)
{
    return self->state;
}

const char *
pk_client_session_reason(const pk_client_session_t *self)
{
    return self->reason;
}

const uint8_t *
pk_client_session_epoch(const pk_client_session_t *self)
{
    return self->epoch;
}

const uint8_t *
pk_client_session_server_epoch(const pk_client_session_t *self)
{
    return self->server_epoch;
}

const char *
pk_client_session_server_caps(const pk_client_session_t *self)
{
    return self->server_caps;
}
