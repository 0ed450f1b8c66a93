/*  session.c: the consumer's session on a server, between the wire and the
    server role.

    Everything the role says during one entry point is held in a queue and
    sent when the entry point returns.  That is what lets the session keep
    its promise of protocol.md section 7: when the role had to cancel
    writes in immediate mode, bytes already queued may still land, so the
    session drops what the role published in that call and sends
    `disconnect retired` instead; the consumer then closes this server's
    endpoint and registration before it reuses anything.
*/
#include "roles/server_session.h"
#include "base/keymap.h"
#include "roles/quota.h"

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *frame;
    size_t len;
} s_out_t;

struct _pk_session_t {
    pk_server_identity_t id;
    pk_server_session_config_t config;
    pk_clock_t clock;
    pk_server_session_out_fn *out;
    void *out_arg;
    pk_quota_t *quota;              //  the store's seam, decorated with the pin quota
    pk_server_role_t *role;

    char *consumer_id;
    uint8_t consumer_epoch[PK_EPOCH_LEN];
    uint8_t epoch[PK_EPOCH_LEN];    //  ours
    uint64_t consumer_blocks;
    bool checksums;                 //  the consumer's caps list checksum
    const char *caps;               //  ours, in the connect_ack
    char caps_text[PK_MAX_CAPS + 1];
    bool rejoin;                    //  rail_offer is read (capability rejoin)
    pk_transport_t transport;       //  the write path: rail_rejoin
    bool keyless_answers;           //  the consumer speaks wire 1.1 or later:
                                    //  its lookup_resps go without keys
    char *connect_canon;            //  the connect, canonical, target epoch zeroed

    double last_heard;
    pk_server_session_status_t status;
    char reason[PK_ERRLEN];
    pk_server_session_counters_t counters;

    s_out_t *queue;
    size_t nqueue, capqueue;
    pk_latency_fn *latency;         //  NULL: latencies are not timed
    void *latency_arg;
    pk_server_session_room_fn *room;    //  NULL: every frame goes out
    void *room_arg;
    pk_keymap_t started;            //  (lookup|fetch, kv, round) -> time received
};

//  The key of a latency timer: kind byte, round, then the request id.
static pk_key_t
s_timer_key(uint8_t *buf, size_t cap, char kind, const char *kv, uint64_t round, size_t *len_p)
{
    size_t kvlen = strlen(kv);
    if (kvlen > cap - 9)
        kvlen = cap - 9;
    buf[0] = (uint8_t) kind;
    memcpy(buf + 1, &round, 8);
    memcpy(buf + 9, kv, kvlen);
    *len_p = kvlen + 9;
    return pk_key_make(buf, kvlen + 9);
}

static void
s_timer_start(pk_server_session_t *self, char kind, const char *kv, uint64_t round)
{
    if (!self->latency)
        return;
    uint8_t tmp[256];
    size_t len;
    pk_key_t key = s_timer_key(tmp, sizeof tmp, kind, kv, round, &len);
    //  bounded: lookups dropped unanswered leave their timer until the end
    if (pk_keymap_find(&self->started, &key)
        || pk_keymap_size(&self->started) >= 2 * self->config.max_requests)
        return;
    uint8_t *copy = malloc(len);
    if (!copy)
        return;
    memcpy(copy, tmp, len);
    key.bytes = copy;
    double now = self->clock.now(self->clock.self);
    uint64_t bits;
    memcpy(&bits, &now, sizeof bits);
    if (pk_keymap_put(&self->started, &key, bits, (uintptr_t) copy) < 0)
        free(copy);
}

static void
s_timer_stop(pk_server_session_t *self, char kind, const char *kv, uint64_t round,
             pk_latency_t which)
{
    if (!self->latency)
        return;
    uint8_t tmp[256];
    size_t len;
    pk_key_t key = s_timer_key(tmp, sizeof tmp, kind, kv, round, &len);
    uint64_t bits, copy;
    if (!pk_keymap_take(&self->started, &key, &bits, &copy))
        return;
    double t0;
    memcpy(&t0, &bits, sizeof t0);
    free((void *) (uintptr_t) copy);
    double dt = self->clock.now(self->clock.self) - t0;
    self->latency(self->latency_arg, which, self->consumer_id, dt > 0 ? dt : 0);
}

static double
s_now(pk_server_session_t *self)
{
    return self->clock.now(self->clock.self);
}

//  --------------------------------------------------------------------------
//  Frames that need no session

int
pk_server_session_description(const pk_server_identity_t *id, char **frame_p, size_t *len_p)
{
    pk_msg_t m = { .type = PK_MSG_DESCRIPTION, .wire_major = PK_WIRE_MAJOR,
                   .wire_minor = PK_WIRE_MINOR, .peer_id = (char *) id->peer_id,
                   .block_len = id->block_len, .config_fingerprint = (char *) id->fingerprint,
                   .hash_seed = (char *) id->hash_seed, .provider = (char *) id->provider,
                   .providers = (char **) id->providers, .nproviders = id->nproviders,
                   .host = (char *) id->host,
                   .present = PK_BIT(PK_F_WIRE_MAJOR) | PK_BIT(PK_F_WIRE_MINOR)
                              | PK_BIT(PK_F_PEER_ID) | PK_BIT(PK_F_BLOCK_LEN)
                              | PK_BIT(PK_F_CONFIG_FINGERPRINT) | PK_BIT(PK_F_HASH_SEED)
                              | PK_BIT(PK_F_PROVIDER) };
    if (id->nproviders)
        m.present |= PK_BIT(PK_F_PROVIDERS);
    if (id->host && *id->host)
        m.present |= PK_BIT(PK_F_HOST);
    //  rails: a consumer of several sends its rails blob only to a server
    //  that says it has several (an older one would refuse the blob)
    if (id->caps && *id->caps) {
        m.caps = (char *) id->caps;
        m.present |= PK_BIT(PK_F_CAPS);
    }
    return pk_msg_encode(&m, frame_p, len_p, NULL);
}

int
pk_server_session_check_connect(const pk_server_identity_t *id, const pk_msg_t *c, char *reason,
                         size_t len)
{
    if (c->wire_major != PK_WIRE_MAJOR)
        snprintf(reason, len, "wire_major: server %d, consumer %llu", PK_WIRE_MAJOR,
                 (unsigned long long) c->wire_major);
    else if (c->block_len != id->block_len)
        snprintf(reason, len, "block_len: server %llu, consumer %llu",
                 (unsigned long long) id->block_len, (unsigned long long) c->block_len);
    else if (strcmp(c->config_fingerprint, id->fingerprint) != 0)
        snprintf(reason, len, "config_fingerprint: server \"%.100s\", consumer \"%.100s\"",
                 id->fingerprint, c->config_fingerprint);
    else if (strcmp(c->hash_seed, id->hash_seed) != 0)
        snprintf(reason, len, "hash_seed: server \"%.100s\", consumer \"%.100s\"", id->hash_seed,
                 c->hash_seed);
    else
        return 0;
    return -EPROTO;
}

int
pk_server_session_disconnect_frame(const pk_server_identity_t *id, pk_disconnect_code_t code,
                            const char *reason, const uint8_t *source_epoch,
                            const uint8_t *target_epoch, char **frame_p, size_t *len_p)
{
    pk_msg_t m = { .type = PK_MSG_DISCONNECT, .code = code, .reason = (char *) reason,
                   .present = PK_BIT(PK_F_CODE) | PK_BIT(PK_F_REASON) };
    if (code == PK_DISC_INCOMPATIBLE) {
        m.wire_major = PK_WIRE_MAJOR;
        m.wire_minor = PK_WIRE_MINOR;
        m.block_len = id->block_len;
        m.config_fingerprint = (char *) id->fingerprint;
        m.hash_seed = (char *) id->hash_seed;
        m.present |= PK_BIT(PK_F_WIRE_MAJOR) | PK_BIT(PK_F_WIRE_MINOR) | PK_BIT(PK_F_BLOCK_LEN)
                     | PK_BIT(PK_F_CONFIG_FINGERPRINT) | PK_BIT(PK_F_HASH_SEED);
    }
    if (source_epoch && target_epoch)
        pk_msg_set_epochs(&m, source_epoch, target_epoch);
    return pk_msg_encode(&m, frame_p, len_p, NULL);
}

//  --------------------------------------------------------------------------
//  Output

static void
s_queue(pk_server_session_t *self, char *frame, size_t len)
{
    if (self->nqueue == self->capqueue) {
        size_t cap = self->capqueue ? 2 * self->capqueue : 16;
        s_out_t *q = realloc(self->queue, cap * sizeof *q);
        if (!q) {
            free(frame);        //  the consumer's timeouts cover a lost answer
            return;
        }
        self->queue = q;
        self->capqueue = cap;
    }
    self->queue[self->nqueue++] = (s_out_t) { frame, len };
}

//  The role's sender: stamp epochs, encode, hold until the entry point ends.
static void
s_role_send(void *arg, const pk_msg_t *msg)
{
    pk_server_session_t *self = arg;
    if (msg->type == PK_MSG_LOOKUP_RESP)
        s_timer_stop(self, 'l', msg->kv_request_id, msg->round_seq, PK_LATENCY_LOOKUP);
    else if (msg->type == PK_MSG_TRANSFER_DONE || msg->type == PK_MSG_ABORT_ACK
             || msg->type == PK_MSG_GET_RESP)
        s_timer_stop(self, 'f', msg->kv_request_id, msg->round_seq, PK_LATENCY_FETCH);
    pk_msg_t m = *msg;
    if (m.type == PK_MSG_LOOKUP_RESP && self->keyless_answers)
        m.present &= ~PK_BIT(PK_F_KEYS);        //  the hits still count them
    if ((m.type == PK_MSG_LOOKUP_RESP || m.type == PK_MSG_GET_RESP) && !self->checksums)
        m.present &= ~PK_BIT(PK_F_CHECKSUMS);   //  a consumer that does not check
    pk_msg_set_epochs(&m, self->epoch, self->consumer_epoch);
    char *frame;
    size_t len;
    if (pk_msg_encode(&m, &frame, &len, NULL) == 0)
        s_queue(self, frame, len);
}

static pk_server_session_status_t s_violation(pk_server_session_t *self, pk_violation_t class,
                                              const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

//  Ends an entry point: flush what it queued, or, when the role had to
//  cancel in immediate mode, drop it and retire.
static pk_server_session_status_t
s_finish_call(pk_server_session_t *self)
{
    if (self->role && pk_server_role_take_forced(self->role)) {
        for (size_t i = 0; i < self->nqueue; i++)
            free(self->queue[i].frame);
        self->nqueue = 0;
        pk_server_session_retire(self, PK_DISC_RETIRED,
                          "writes cancelled in immediate mode; bytes may still land");
    }
    for (size_t i = 0; i < self->nqueue; i++) {
        char why[160];
        if (self->room && self->room(self->room_arg, self->queue[i].len, why, sizeof why) != 0) {
            //  the consumer does not read what it asked for: what it would
            //  cost to hold more is what the bound is for
            for (size_t j = i; j < self->nqueue; j++)
                free(self->queue[j].frame);
            self->nqueue = 0;
            s_violation(self, PK_VIOLATION_UNREAD, "limit: %s", why);
            break;
        }
        self->out(self->out_arg, self->queue[i].frame, self->queue[i].len);
        free(self->queue[i].frame);
    }
    self->nqueue = 0;
    return self->status;
}

//  --------------------------------------------------------------------------
//  Construction

static char *
s_canonical_connect(const pk_msg_t *connect)
{
    pk_msg_t m = *connect;
    memset(m.target_epoch, 0, sizeof m.target_epoch);
    char *text = NULL;
    if (pk_msg_encode(&m, &text, NULL, NULL) != 0)
        return NULL;
    return text;
}

pk_server_session_t *
pk_server_session_new(const pk_server_identity_t *id, const pk_server_session_config_t *config,
               const pk_msg_t *connect, pk_clock_t clock, pk_transport_t transport,
               pk_parent_t parent, pk_server_session_out_fn *out, void *out_arg)
{
    pk_server_session_t *self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    self->id = *id;
    self->config = *config;
    self->clock = clock;
    self->out = out;
    self->out_arg = out_arg;
    self->consumer_id = strdup(connect->peer_id);
    self->connect_canon = s_canonical_connect(connect);
    if (!self->consumer_id || !self->connect_canon)
        goto fail_strings;
    memcpy(self->consumer_epoch, connect->source_epoch, PK_EPOCH_LEN);
    self->consumer_blocks = connect->num_blocks;
    self->keyless_answers = connect->wire_minor >= 1;
    self->checksums = pk_caps_has(connect->caps, PK_CAP_CHECKSUM);
    do
        randombytes_buf(self->epoch, sizeof self->epoch);
    while (sodium_is_zero(self->epoch, sizeof self->epoch));
    self->last_heard = s_now(self);
    self->quota = pk_quota_new(config->pin_quota, parent);
    if (!self->quota)
        goto fail_strings;
    //  misses say why only to a consumer that lists reasons: an older one
    //  (the seed's) sees the plain misses it knows
    pk_server_role_config_t role_config = config->role;
    role_config.reasons = pk_caps_has(connect->caps, PK_CAP_REASONS);
    //  lend where the write path lends (mmap; the scheduler passes it by) and
    //  gets are offered; a consumer that does not list it gets writes
    bool lends = transport.lend && !config->no_get;
    //  rails where the channel has several and the consumer sent every
    //  rail (never with lend: rails are network providers only)
    bool rails = transport.rails_landing && pk_caps_has(connect->caps, PK_CAP_RAILS);
    self->caps = config->no_get ? (rails ? PK_CAPS_WITHOUT_GET " " PK_CAP_RAILS
                                         : PK_CAPS_WITHOUT_GET)
                 : lends ? PK_CAPS " " PK_CAP_LEND
                 : rails ? PK_CAPS " " PK_CAP_RAILS : PK_CAPS;
    //  rejoin where rails are paired, the channel can pair a rail again
    //  and the consumer asked for it
    self->rejoin = rails && transport.rail_rejoin && pk_caps_has(connect->caps, PK_CAP_REJOIN);
    if (self->rejoin) {
        snprintf(self->caps_text, sizeof self->caps_text, "%s " PK_CAP_REJOIN, self->caps);
        self->caps = self->caps_text;
    }
    //  slices where the channel slices (the owner turned it on for a
    //  consumer that lists the word: its write path then counts slices)
    if (rails && transport.rails_slices && pk_caps_has(connect->caps, PK_CAP_SLICES)) {
        char words[PK_MAX_CAPS + 1];
        snprintf(words, sizeof words, "%s " PK_CAP_SLICES, self->caps);
        snprintf(self->caps_text, sizeof self->caps_text, "%s", words);
        self->caps = self->caps_text;
    }
    self->transport = transport;
    role_config.lend = lends && pk_caps_has(connect->caps, PK_CAP_LEND);
    role_config.rails = rails;
    self->role = pk_server_role_new(self->consumer_id, &role_config, clock,
                                    (pk_sender_t) { self, s_role_send }, transport,
                                    pk_quota_parent(self->quota));
    if (!self->role)
        goto fail_quota;
    pk_server_role_count_into(self->role, &self->counters.role);
    pk_msg_t ack = { .type = PK_MSG_CONNECT_ACK, .wire_major = PK_WIRE_MAJOR,
                     .wire_minor = PK_WIRE_MINOR, .peer_id = (char *) id->peer_id,
                     .block_len = id->block_len, .num_blocks = id->num_blocks,
                     .caps = (char *) self->caps,
                     .present = PK_BIT(PK_F_WIRE_MAJOR) | PK_BIT(PK_F_WIRE_MINOR)
                                | PK_BIT(PK_F_PEER_ID) | PK_BIT(PK_F_BLOCK_LEN)
                                | PK_BIT(PK_F_NUM_BLOCKS) | PK_BIT(PK_F_CAPS) };
    s_role_send(self, &ack);
    s_finish_call(self);
    return self;

fail_quota:
    pk_quota_destroy(&self->quota);
fail_strings:
    free(self->consumer_id);
    free(self->connect_canon);
    free(self);
fail:
    return NULL;
}

void
pk_server_session_destroy(pk_server_session_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_server_session_t *self = *self_p;
    pk_server_session_retire(self, PK_DISC_SHUTDOWN, "server shutting down");
    pk_quota_destroy(&self->quota);
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->started, &at)); )
        free((void *) (uintptr_t) e->b);
    pk_keymap_fini(&self->started);
    for (size_t i = 0; i < self->nqueue; i++)
        free(self->queue[i].frame);
    free(self->queue);
    free(self->consumer_id);
    free(self->connect_canon);
    free(self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------------
//  Retirement

static void
s_close_role(pk_server_session_t *self)
{
    if (!self->role)
        return;
    uint64_t *jobs;
    size_t njobs, owed;
    if (pk_server_role_close(self->role, &jobs, &njobs, &owed) == 0) {
        //  every job still owed a result fails, so the store unpins it
        pk_parent_t parent = pk_quota_parent(self->quota);
        for (size_t i = 0; i < njobs; i++)
            parent.store_result(parent.self, jobs[i], false);
        free(jobs);
        //  and every parked lookup's bracket closes: the role reports only
        //  how many, so the store's open_lookups would never come back
        //  down (fuzz_session found it)
        pk_lookup_ctx_t none = { "", 0, 0 };
        for (size_t i = 0; i < owed; i++)
            parent.on_request_finished(parent.self, &none);
    }
    pk_server_role_destroy(&self->role);
}

static void
s_retire(pk_server_session_t *self, pk_disconnect_code_t code, const char *reason)
{
    if (self->status == PK_SERVER_SESSION_RETIRED)
        return;
    self->status = PK_SERVER_SESSION_RETIRED;
    snprintf(self->reason, sizeof self->reason, "%s: %s", pk_disconnect_code_name(code), reason);
    s_close_role(self);
    char *frame;
    size_t len;
    if (pk_server_session_disconnect_frame(&self->id, code, reason, self->epoch, self->consumer_epoch,
                                    &frame, &len) == 0) {
        self->out(self->out_arg, frame, len);
        free(frame);
    }
}

void
pk_server_session_retire(pk_server_session_t *self, pk_disconnect_code_t code, const char *reason)
{
    //  the session's own violations come through s_violation, which
    //  counts their class; one from outside is the node's door's
    if (self->status != PK_SERVER_SESSION_RETIRED && code == PK_DISC_VIOLATION) {
        self->counters.violations++;
        self->counters.by_reason[PK_VIOLATION_FLOOD]++;
    }
    s_retire(self, code, reason);
}

const char *
pk_violation_name(pk_violation_t reason)
{
    static const char *const names[PK_VIOLATION_COUNT] = {
        [PK_VIOLATION_MALFORMED] = "malformed",
        [PK_VIOLATION_DIRECTION] = "direction",
        [PK_VIOLATION_CONNECT_CHANGED] = "connect_changed",
        [PK_VIOLATION_LIMIT_REQUESTS] = "limit_requests",
        [PK_VIOLATION_LIMIT_LOOKUP_KEYS] = "limit_lookup_keys",
        [PK_VIOLATION_LIMIT_ROUNDS] = "limit_rounds",
        [PK_VIOLATION_BLOCK_INDEX] = "block_index",
        [PK_VIOLATION_DUPLICATE_FETCH] = "duplicate_fetch",
        [PK_VIOLATION_FLOOD] = "flood",
        [PK_VIOLATION_UNREAD] = "unread",
        [PK_VIOLATION_RAIL_OFFER] = "rail_offer",
    };
    return (unsigned) reason < PK_VIOLATION_COUNT ? names[reason] : "unknown";
}

static pk_server_session_status_t
s_violation(pk_server_session_t *self, pk_violation_t class, const char *fmt, ...)
{
    char reason[PK_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (self->status == PK_SERVER_SESSION_RETIRED)
        return self->status;
    self->counters.violations++;
    self->counters.by_reason[class]++;
    for (size_t i = 0; i < self->nqueue; i++)
        free(self->queue[i].frame);
    self->nqueue = 0;
    s_retire(self, PK_DISC_VIOLATION, reason);
    return self->status;
}

//  --------------------------------------------------------------------------
//  Frames from the consumer

static bool
s_epochs_match(const pk_server_session_t *self, const pk_msg_t *m)
{
    return memcmp(m->source_epoch, self->consumer_epoch, PK_EPOCH_LEN) == 0
           && memcmp(m->target_epoch, self->epoch, PK_EPOCH_LEN) == 0;
}

//  describe and connect: answered whatever the epochs.
static void
s_on_handshake(pk_server_session_t *self, const pk_msg_t *m)
{
    if (m->type == PK_MSG_DESCRIBE) {
        char *frame;
        size_t flen;
        if (pk_server_session_description(&self->id, &frame, &flen) == 0)
            s_queue(self, frame, flen);
        return;
    }
    //  a repeat of this session's connect gets the same answer; a new
    //  epoch (a restarted consumer) is the node's to handle
    if (memcmp(m->source_epoch, self->consumer_epoch, PK_EPOCH_LEN) != 0) {
        self->counters.dropped_stale++;
        return;
    }
    if (!pk_server_session_same_connect(self, m)) {
        s_violation(self, PK_VIOLATION_CONNECT_CHANGED, "connect repeated with different fields");
        return;
    }
    pk_msg_t ack = { .type = PK_MSG_CONNECT_ACK, .wire_major = PK_WIRE_MAJOR,
                     .wire_minor = PK_WIRE_MINOR, .peer_id = (char *) self->id.peer_id,
                     .block_len = self->id.block_len, .num_blocks = self->id.num_blocks,
                     .caps = (char *) self->caps,
                     .present = PK_BIT(PK_F_WIRE_MAJOR) | PK_BIT(PK_F_WIRE_MINOR)
                                | PK_BIT(PK_F_PEER_ID) | PK_BIT(PK_F_BLOCK_LEN)
                                | PK_BIT(PK_F_NUM_BLOCKS) | PK_BIT(PK_F_CAPS) };
    s_role_send(self, &ack);
}

//  The live-request limit, shared by lookup and fetch: false (and the
//  session retired) when a new request would pass it.
static bool
s_room_for_request(pk_server_session_t *self, const char *kv, size_t *rounds_p)
{
    pk_server_role_state_t st;
    pk_server_role_state(self->role, &st);
    bool exists;
    size_t rounds = pk_server_role_rounds(self->role, kv, &exists);
    if (rounds_p)
        *rounds_p = rounds;
    if (!exists && st.requests >= self->config.max_requests) {
        s_violation(self, PK_VIOLATION_LIMIT_REQUESTS, "limit: more than %llu live requests",
                    (unsigned long long) self->config.max_requests);
        return false;
    }
    return true;
}

static void
s_on_lookup(pk_server_session_t *self, const pk_msg_t *m)
{
    if (!s_room_for_request(self, m->kv_request_id, NULL))
        return;
    pk_server_role_state_t st;
    pk_server_role_state(self->role, &st);
    if (st.lookup_keys + m->keys.count > self->config.max_parked_keys) {
        s_violation(self, PK_VIOLATION_LIMIT_LOOKUP_KEYS, "limit: more than %llu keys in lookups",
                    (unsigned long long) self->config.max_parked_keys);
        return;
    }
    self->counters.lookups++;
    self->counters.keys += m->keys.count;
    s_timer_start(self, 'l', m->kv_request_id, m->round_seq);
    pk_server_role_on_lookup(self->role, m->kv_request_id, m->keys.v, m->keys.count,
                             m->round_seq);
    //  resolved right after dispatch: no tick latency
    pk_server_role_serve(self->role);
}

//  What a fetch and a get (named by what) must both respect: destination
//  blocks inside the consumer's pool, room for the request and for one
//  more round of it.  false: a violation ended the session.
static bool
s_fetch_admits(pk_server_session_t *self, const pk_msg_t *m, const char *what)
{
    for (size_t i = 0; i < m->keys.count; i++)
        if (m->block_indexes[i] >= self->consumer_blocks) {
            s_violation(self, PK_VIOLATION_BLOCK_INDEX, "%s.block_indexes[%zu]: %u is outside "
                        "the consumer's pool of %llu blocks", what, i, m->block_indexes[i],
                        (unsigned long long) self->consumer_blocks);
            return false;
        }
    size_t rounds;
    if (!s_room_for_request(self, m->kv_request_id, &rounds))
        return false;
    if (rounds >= self->config.max_rounds) {
        s_violation(self, PK_VIOLATION_LIMIT_ROUNDS, "limit: more than %llu rounds in request %.64s",
                    (unsigned long long) self->config.max_rounds, m->kv_request_id);
        return false;
    }
    return true;
}

//  A fetch's or get's rail_offer (capability rejoin; protocol.md section
//  7, "a rail that rejoins"): the consumer's fresh registration of a rail
//  we took out, handed to the channel, which pairs it after its back-off.
//  false: a violation ended the session (not offered, or refused).
static bool
s_rail_offer(pk_server_session_t *self, const pk_msg_t *m)
{
    if (!(m->present & PK_BIT(PK_F_RAIL_OFFER)))
        return true;
    const char *what = pk_msg_type_name(m->type);
    if (!self->rejoin) {
        s_violation(self, PK_VIOLATION_RAIL_OFFER, "%s.rail_offer: capability %s was not "
                    "agreed in connect_ack", what, PK_CAP_REJOIN);
        return false;
    }
    uint8_t *blob = malloc(PK_MAX_RAIL_BLOB);
    size_t rail, len;
    char err[PK_ERRLEN] = "";
    int rc = !blob ? -ENOMEM : pk_wire_rail_offer_parse(m->rail_offer, &rail, blob, &len);
    if (!rc)
        rc = self->transport.rail_rejoin(self->transport.self, rail, blob, len, err);
    free(blob);
    if (rc) {
        s_violation(self, PK_VIOLATION_RAIL_OFFER, "%s.%s", what,
                    *err ? err : "rail_offer: refused");
        return false;
    }
    return true;
}

static void
s_on_fetch(pk_server_session_t *self, const pk_msg_t *m)
{
    if (!s_fetch_admits(self, m, "fetch") || !s_rail_offer(self, m))
        return;
    self->counters.fetches++;
    if (m->keys.count)
        s_timer_start(self, 'f', m->kv_request_id, m->round_seq);
    int rc = pk_server_role_on_fetch(self->role, m->kv_request_id, m->keys.v, m->block_indexes,
                                     m->keys.count, m->round_seq);
    if (rc == -EPROTO)
        s_violation(self, PK_VIOLATION_DUPLICATE_FETCH, "duplicate fetch for %.64s round %llu",
                    m->kv_request_id, (unsigned long long) m->round_seq);
}

//  A get is a lookup and a fetch in one (capability get): the limits of
//  both hold, and it counts as one of each.
static void
s_on_get(pk_server_session_t *self, const pk_msg_t *m)
{
    if (!s_fetch_admits(self, m, "get") || !s_rail_offer(self, m))
        return;
    pk_server_role_state_t st;
    pk_server_role_state(self->role, &st);
    if (st.lookup_keys + m->keys.count > self->config.max_parked_keys) {
        s_violation(self, PK_VIOLATION_LIMIT_LOOKUP_KEYS, "limit: more than %llu keys in lookups",
                    (unsigned long long) self->config.max_parked_keys);
        return;
    }
    self->counters.lookups++;
    self->counters.fetches++;
    self->counters.gets++;
    self->counters.keys += m->keys.count;
    s_timer_start(self, 'f', m->kv_request_id, m->round_seq);
    int rc = pk_server_role_on_get(self->role, m->kv_request_id, m->keys.v, m->block_indexes,
                                   m->keys.count, m->round_seq);
    if (rc == -EPROTO) {
        s_violation(self, PK_VIOLATION_DUPLICATE_FETCH, "get for %.64s round %llu, a round "
                    "the request has already", m->kv_request_id,
                    (unsigned long long) m->round_seq);
        return;
    }
    //  resolved right after dispatch, as a lookup is: no tick latency
    pk_server_role_serve(self->role);
}

//  State messages: only this session's epochs are applied.
static void
s_on_state(pk_server_session_t *self, const pk_msg_t *m)
{
    if ((m->type == PK_MSG_DISCONNECT && !(m->present & PK_BIT(PK_F_SOURCE_EPOCH)))
        || !s_epochs_match(self, m)) {
        self->counters.dropped_stale++;
        return;
    }
    self->last_heard = s_now(self);
    switch (m->type) {
        case PK_MSG_PING: {
            pk_msg_t pong = { .type = PK_MSG_PONG };
            s_role_send(self, &pong);
            break;
        }
        case PK_MSG_DISCONNECT:
            //  the consumer leaves: nothing to tell it
            self->status = PK_SERVER_SESSION_RETIRED;
            snprintf(self->reason, sizeof self->reason, "consumer disconnected: %s", m->reason);
            s_close_role(self);
            break;
        case PK_MSG_LOOKUP:
            s_on_lookup(self, m);
            break;
        case PK_MSG_FETCH:
            s_on_fetch(self, m);
            break;
        case PK_MSG_GET:
            //  not offered (--gets off): unknown, as to an older server
            if (self->config.no_get)
                self->counters.dropped_unknown++;
            else
                s_on_get(self, m);
            break;
        case PK_MSG_ABORT_FETCH:
            self->counters.aborts++;
            pk_server_role_on_abort(self->role, m->kv_request_id, m->round_seq);
            break;
        default:
            break;
    }
}

pk_server_session_status_t
pk_server_session_on_frame(pk_server_session_t *self, const void *data, size_t len)
{
    if (self->status == PK_SERVER_SESSION_RETIRED)
        return self->status;
    self->counters.frames++;
    char err[PK_ERRLEN];
    pk_msg_t *m = NULL;
    int rc = pk_msg_decode(data, len, &m, err);
    if (rc == -EBADMSG || rc == -ENOMEM) {
        self->counters.dropped_bad++;
        return self->status;
    }
    if (rc == -ENOMSG) {
        self->counters.dropped_unknown++;
        return self->status;
    }
    if (rc)
        return s_violation(self, PK_VIOLATION_MALFORMED, "%s", err);
    if (!(pk_msg_direction(m->type) & PK_TO_SERVER))
        s_violation(self, PK_VIOLATION_DIRECTION, "%s flows from server to consumer only",
                    pk_msg_type_name(m->type));
    else if (m->type == PK_MSG_DESCRIBE || m->type == PK_MSG_CONNECT)
        s_on_handshake(self, m);
    else
        s_on_state(self, m);
    pk_msg_destroy(&m);
    return s_finish_call(self);
}

pk_server_session_status_t
pk_server_session_tick(pk_server_session_t *self)
{
    if (self->status == PK_SERVER_SESSION_RETIRED)
        return self->status;
    if (s_now(self) >= self->last_heard + self->config.silence_timeout) {
        char reason[64];
        snprintf(reason, sizeof reason, "nothing heard for %.1f s", self->config.silence_timeout);
        pk_server_session_retire(self, PK_DISC_SILENT, reason);
        return self->status;
    }
    return pk_server_session_collect(self);
}

pk_server_session_status_t
pk_server_session_collect(pk_server_session_t *self)
{
    if (self->status == PK_SERVER_SESSION_RETIRED)
        return self->status;
    pk_server_role_collect(self->role);
    pk_server_role_drain(self->role);
    pk_server_role_serve(self->role);
    return s_finish_call(self);
}

int
pk_server_session_store(pk_server_session_t *self, const char *kv, const pk_key_t *keys, const uint32_t *blocks,
                 size_t n, uint64_t job_id, bool has_round, uint64_t round)
{
    if (self->status == PK_SERVER_SESSION_RETIRED)
        return -EPIPE;
    //  A prefill store pins for this consumer too: it counts against the
    //  same quota as its lookups' hits, all or nothing.
    int rc = pk_quota_charge(self->quota, job_id, n);
    if (rc)
        return rc;
    rc = pk_server_role_store(self->role, kv, keys, blocks, n, job_id, has_round, round);
    if (rc)
        pk_quota_discharge(self->quota, job_id);
    s_finish_call(self);
    return rc;
}

int
pk_server_session_finish(pk_server_session_t *self, const char *kv)
{
    if (self->status == PK_SERVER_SESSION_RETIRED)
        return -EPIPE;
    int rc = pk_server_role_finish(self->role, kv);
    s_finish_call(self);
    return rc;
}

bool
pk_server_session_has_inflight(const pk_server_session_t *self)
{
    return self->role && pk_server_role_has_inflight(self->role);
}

bool
pk_server_session_has_writes(const pk_server_session_t *self)
{
    return self->role && pk_server_role_has_writes(self->role);
}

bool
pk_server_session_has_parked(const pk_server_session_t *self)
{
    return self->role && pk_server_role_has_parked(self->role);
}

bool
pk_server_session_settled(const pk_server_session_t *self)
{
    if (!self->role)
        return true;
    pk_server_role_state_t st;
    pk_server_role_state(self->role, &st);
    return st.inflight == 0 && st.store_jobs == 0 && st.aborts == 0 && st.lookup_keys == 0
           && st.serve_pending == 0;
}

const uint8_t *
pk_server_session_consumer_epoch(const pk_server_session_t *self)
{
    return self->consumer_epoch;
}

const char *
pk_server_session_consumer_id(const pk_server_session_t *self)
{
    return self->consumer_id;
}

bool
pk_server_session_same_connect(const pk_server_session_t *self, const pk_msg_t *connect)
{
    char *canon = s_canonical_connect(connect);
    bool same = canon && strcmp(canon, self->connect_canon) == 0;
    free(canon);
    return same;
}

void
pk_server_session_set_latency(pk_server_session_t *self, pk_latency_fn *fn, void *arg)
{
    self->latency = fn;
    self->latency_arg = arg;
}

void
pk_server_session_set_room(pk_server_session_t *self, pk_server_session_room_fn *fn, void *arg)
{
    self->room = fn;
    self->room_arg = arg;
}

void
pk_server_session_counters(const pk_server_session_t *self, pk_server_session_counters_t *out)
{
    *out = self->counters;
}

const char *
pk_server_session_reason(const pk_server_session_t *self)
{
    return self->reason;
}
