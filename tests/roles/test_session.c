/*  test_session.c: the session against protocol.md sections 4-6, frame by
    frame: a virtual clock, the in-memory transport, a scripted store, and
    the frames a consumer would send, encoded with the codec.
*/
#include "base/err.h"
#include "base/keymap.h"
#include "wire/protocol.h"
#include "roles/server_session.h"
#include "testutil.h"
#include "sim/memtransport.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>

static const uint8_t CE[PK_EPOCH_LEN] = { 0xc0, 1, 2, 3 };     //  the consumer's epoch
static const uint8_t ZERO[PK_EPOCH_LEN] = { 0 };

typedef struct {
    double now;
    pk_memtransport_t *mem;
    pk_server_session_t *session;
    pk_server_identity_t id;
    pk_server_session_config_t config;
    pk_msg_t *out[32];
    int nout;
    uint8_t epoch[PK_EPOCH_LEN];    //  the server's, learnt from connect_ack
    int results_failed, results_ok;
    int opened, finished;           //  the parent's lookup brackets
    uint8_t keybytes[16][2];
} s_h_t;

static s_h_t *H;

static double
s_now(void *arg)
{
    return H->now;
}

static void
s_out(void *arg, const char *frame, size_t len)
{
    ck_assert_int_lt(H->nout, 32);
    char err[PK_ERRLEN];
    int rc = pk_msg_decode(frame, len, &H->out[H->nout], err);
    ck_assert_msg(rc == 0, "the session sent an invalid frame: %s: %.200s", err, frame);
    H->nout++;
}

static pk_lookup_result_t
s_lookup(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    //  0x7f: a key the engine is still writing
    if (key->bytes[0] == 0x7f)
        return PK_LOOKUP_HIT_PENDING;
    return key->bytes[0] < 0x80 ? PK_LOOKUP_HIT : PK_LOOKUP_MISS;
}

static int
s_pin(void *arg, const pk_lookup_ctx_t *ctx, const pk_key_t *keys, size_t n, uint64_t *job,
      uint32_t *blocks, bool *pinned, uint8_t *why)
{
    static uint64_t next = 100;
    *job = next++;
    for (size_t i = 0; i < n; i++) {
        blocks[i] = keys[i].bytes[0];
        pinned[i] = true;
    }
    return 0;
}

static void
s_opened(void *arg, const pk_lookup_ctx_t *ctx)
{
    H->opened++;
}

static void
s_finished(void *arg, const pk_lookup_ctx_t *ctx)
{
    H->finished++;
}

static void
s_result(void *arg, uint64_t job, bool success)
{
    if (success)
        H->results_ok++;
    else
        H->results_failed++;
}

static void
s_clear_out(void)
{
    for (int i = 0; i < H->nout; i++)
        pk_msg_destroy(&H->out[i]);
    H->nout = 0;
}

static pk_msg_t *
s_connect_msg_minor(const char *fingerprint, uint64_t block_len, uint64_t minor)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_CONNECT);
    pk_msg_set_uint(m, PK_F_WIRE_MAJOR, 1);
    pk_msg_set_uint(m, PK_F_WIRE_MINOR, minor);
    pk_msg_set_string(m, PK_F_PEER_ID, "consumer-1");
    pk_msg_set_epochs(m, CE, ZERO);
    pk_msg_set_metadata(m, "addr", 4);
    pk_msg_set_uint(m, PK_F_BASE_ADDR, 0);
    pk_msg_set_uint(m, PK_F_NUM_BLOCKS, 64);
    pk_msg_set_uint(m, PK_F_BLOCK_LEN, block_len);
    pk_msg_set_string(m, PK_F_CONFIG_FINGERPRINT, fingerprint);
    pk_msg_set_string(m, PK_F_HASH_SEED, "7");
    return m;
}

//  A consumer of wire 1.0, as the seed's (the sessions below but one).
static pk_msg_t *
s_connect_msg(const char *fingerprint, uint64_t block_len)
{
    return s_connect_msg_minor(fingerprint, block_len, 0);
}

//  H->session for a consumer speaking wire 1.minor, its connect_ack read.
static void
s_open(uint64_t minor)
{
    pk_msg_t *connect = s_connect_msg_minor("fp", 4096, minor);
    char reason[PK_ERRLEN];
    ck_assert_int_eq(pk_server_session_check_connect(&H->id, connect, reason, sizeof reason), 0);
    H->session = pk_server_session_new(&H->id, &H->config, connect, (pk_clock_t) { NULL, s_now },
                                pk_memtransport_iface(H->mem),
                                (pk_parent_t) { .lookup = s_lookup, .create_store_job = s_pin,
                                                .on_new_request = s_opened,
                                                .on_request_finished = s_finished,
                                                .store_result = s_result },
                                s_out, NULL);
    pk_msg_destroy(&connect);
    ck_assert_ptr_nonnull(H->session);
    ck_assert_int_eq(H->nout, 1);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_CONNECT_ACK);
    ck_assert_mem_eq(H->out[0]->target_epoch, CE, PK_EPOCH_LEN);
    ck_assert_str_eq(H->out[0]->peer_id, "server-a");
    ck_assert_uint_eq(H->out[0]->num_blocks, 128);
    memcpy(H->epoch, H->out[0]->source_epoch, PK_EPOCH_LEN);
    ck_assert(!sodium_is_zero(H->epoch, PK_EPOCH_LEN));
    s_clear_out();
}

static void
s_setup(void)
{
    H = calloc(1, sizeof *H);
    H->now = 100;
    H->mem = pk_memtransport_new();
    H->id = (pk_server_identity_t) { "server-a", 4096, 128, "fp", "7", "tcp", NULL, 0, NULL, NULL };
    H->config = (pk_server_session_config_t) { PK_SERVER_ROLE_CONFIG_DEFAULT, 10.0, 4, 8, 3, 6, false };
    s_open(0);
}

static void
s_teardown(void)
{
    pk_server_session_destroy(&H->session);
    pk_memtransport_destroy(&H->mem);
    s_clear_out();
    free(H);
}

//  Sends m (epochs set to this session's unless already present).
static pk_server_session_status_t
s_send(pk_msg_t *m)
{
    if (!(m->present & PK_BIT(PK_F_SOURCE_EPOCH)))
        pk_msg_set_epochs(m, CE, H->epoch);
    char *frame;
    size_t len;
    char err[PK_ERRLEN];
    ck_assert_msg(pk_msg_encode(m, &frame, &len, err) == 0, "%s", err);
    pk_server_session_status_t st = pk_server_session_on_frame(H->session, frame, len);
    free(frame);
    pk_msg_destroy(&m);
    return st;
}

static pk_key_t
K(int i, uint8_t first)
{
    H->keybytes[i][0] = first;
    H->keybytes[i][1] = (uint8_t) i;
    return pk_key_make(H->keybytes[i], 2);
}

static pk_msg_t *
s_lookup_msg(const char *kv, uint64_t round, size_t n)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_LOOKUP);
    pk_key_t keys[16];
    for (size_t i = 0; i < n; i++)
        keys[i] = K((int) i, (uint8_t) (i + 1));
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_keys(m, keys, n);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, round);
    return m;
}

static pk_msg_t *
s_fetch_msg(const char *kv, uint64_t round, size_t n, uint32_t first_index)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_FETCH);
    pk_key_t keys[16];
    uint32_t idx[16];
    for (size_t i = 0; i < n; i++) {
        keys[i] = K((int) i, (uint8_t) (i + 1));
        idx[i] = first_index + (uint32_t) i;
    }
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_keys(m, keys, n);
    pk_msg_set_block_indexes(m, idx, n);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, round);
    return m;
}

static void
s_expect_disconnect(pk_disconnect_code_t code, const char *reason)
{
    ck_assert_int_eq(H->nout, 1);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_DISCONNECT);
    ck_assert_int_eq(H->out[0]->code, code);
    ck_assert_msg(strstr(H->out[0]->reason, reason) != NULL, "reason \"%s\"", H->out[0]->reason);
    s_clear_out();
}

//  The session counted one violation, of class reason.
static void
s_violated(pk_violation_t reason)
{
    pk_server_session_counters_t c;
    pk_server_session_counters(H->session, &c);
    ck_assert_uint_eq(c.violations, 1);
    for (int i = 0; i < PK_VIOLATION_COUNT; i++)
        ck_assert_uint_eq(c.by_reason[i], i == (int) reason);
}

//  ---------------------------------------------------------------------------

START_TEST(test_connect_checks)
{
    char reason[PK_ERRLEN];
    pk_msg_t *c = s_connect_msg("other", 4096);
    ck_assert_int_eq(pk_server_session_check_connect(&H->id, c, reason, sizeof reason), -EPROTO);
    ck_assert_str_eq(reason, "config_fingerprint: server \"fp\", consumer \"other\"");
    pk_msg_destroy(&c);
    c = s_connect_msg("fp", 512);
    ck_assert_int_eq(pk_server_session_check_connect(&H->id, c, reason, sizeof reason), -EPROTO);
    ck_assert_str_eq(reason, "block_len: server 4096, consumer 512");
    pk_msg_set_uint(c, PK_F_BLOCK_LEN, 4096);
    pk_msg_set_string(c, PK_F_HASH_SEED, "8");
    ck_assert_int_eq(pk_server_session_check_connect(&H->id, c, reason, sizeof reason), -EPROTO);
    ck_assert_str_eq(reason, "hash_seed: server \"7\", consumer \"8\"");
    pk_msg_set_string(c, PK_F_HASH_SEED, "7");
    pk_msg_set_uint(c, PK_F_WIRE_MAJOR, 2);
    ck_assert_int_eq(pk_server_session_check_connect(&H->id, c, reason, sizeof reason), -EPROTO);
    ck_assert_str_eq(reason, "wire_major: server 1, consumer 2");
    pk_msg_destroy(&c);
    //  the incompatible answer carries the server's values
    char *frame;
    size_t len;
    ck_assert_int_eq(pk_server_session_disconnect_frame(&H->id, PK_DISC_INCOMPATIBLE, "hash_seed",
                                                 NULL, NULL, &frame, &len), 0);
    s_out(NULL, frame, len);
    free(frame);
    ck_assert_str_eq(H->out[0]->hash_seed, "7");
    ck_assert_uint_eq(H->out[0]->block_len, 4096);
    ck_assert_str_eq(H->out[0]->config_fingerprint, "fp");
    s_clear_out();
}
END_TEST

START_TEST(test_repeated_connect)
{
    //  the same connect again gets the same answer; other fields: violation
    ck_assert_int_eq(s_send(s_connect_msg("fp", 4096)), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->nout, 1);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_CONNECT_ACK);
    ck_assert_mem_eq(H->out[0]->source_epoch, H->epoch, PK_EPOCH_LEN);
    s_clear_out();
    pk_msg_t *c = s_connect_msg("fp", 4096);
    pk_msg_set_uint(c, PK_F_NUM_BLOCKS, 65);
    ck_assert_int_eq(s_send(c), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION, "connect repeated with different fields");
}
END_TEST

START_TEST(test_ping_and_describe)
{
    ck_assert_int_eq(s_send(pk_msg_new(PK_MSG_PING)), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->nout, 1);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_PONG);
    ck_assert_mem_eq(H->out[0]->source_epoch, H->epoch, PK_EPOCH_LEN);
    ck_assert_mem_eq(H->out[0]->target_epoch, CE, PK_EPOCH_LEN);
    s_clear_out();
    const char *describe = "{\"type\":\"describe\"}";
    pk_server_session_on_frame(H->session, describe, strlen(describe));
    ck_assert_int_eq(H->out[0]->type, PK_MSG_DESCRIPTION);
    ck_assert_str_eq(H->out[0]->provider, "tcp");
    s_clear_out();
}
END_TEST

START_TEST(test_stale_epoch_dropped)
{
    pk_msg_t *m = s_lookup_msg("r1", 1, 1);
    uint8_t old[PK_EPOCH_LEN] = { 9 };
    pk_msg_set_epochs(m, old, H->epoch);
    ck_assert_int_eq(s_send(m), PK_SERVER_SESSION_LIVE);
    m = s_lookup_msg("r1", 1, 1);
    pk_msg_set_epochs(m, CE, old);
    ck_assert_int_eq(s_send(m), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->nout, 0);                   //  never applied
    pk_server_session_counters_t c;
    pk_server_session_counters(H->session, &c);
    ck_assert_uint_eq(c.dropped_stale, 2);
    ck_assert_uint_eq(c.lookups, 0);
}
END_TEST

START_TEST(test_bad_frames_dropped)
{
    const char *frames[] = { "garbage", "[1]", "{\"type\":\"describe\",\"type\":1}",
                             "{\"type\":\"future_thing\"}" };
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pk_server_session_on_frame(H->session, frames[i], strlen(frames[i])),
                         PK_SERVER_SESSION_LIVE);
    pk_server_session_counters_t c;
    pk_server_session_counters(H->session, &c);
    ck_assert_uint_eq(c.dropped_bad, 3);
    ck_assert_uint_eq(c.dropped_unknown, 1);
    ck_assert_int_eq(H->nout, 0);
    //  a known type breaking a rule ends the session
    const char *bad = "{\"type\":\"ping\",\"source_epoch\":5,\"target_epoch\":5}";
    ck_assert_int_eq(pk_server_session_on_frame(H->session, bad, strlen(bad)), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION, "ping.source_epoch: expected 32 lowercase hex");
    s_violated(PK_VIOLATION_MALFORMED);
}
END_TEST

START_TEST(test_wrong_direction)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_PONG);
    ck_assert_int_eq(s_send(m), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION, "pong flows from server to consumer only");
    s_violated(PK_VIOLATION_DIRECTION);
}
END_TEST

START_TEST(test_lookup_fetch_and_duplicate)
{
    ck_assert_int_eq(s_send(s_lookup_msg("r1", 1, 2)), PK_SERVER_SESSION_LIVE);
    //  answered in the same call, not at the next tick
    ck_assert_int_eq(H->nout, 1);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_LOOKUP_RESP);
    ck_assert_uint_eq(H->out[0]->round_seq, 1);
    ck_assert(H->out[0]->hits[0] && H->out[0]->hits[1]);
    s_clear_out();
    ck_assert_int_eq(s_send(s_fetch_msg("r1", 1, 2, 10)), PK_SERVER_SESSION_LIVE);
    ck_assert_uint_eq(pk_memtransport_inflight(H->mem), 1);
    uint64_t tid = 1;
    pk_memtransport_complete(H->mem, &tid, 1, true);
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_TRANSFER_DONE);
    ck_assert(H->out[0]->success);
    ck_assert_uint_eq(H->out[0]->landing, 2);
    s_clear_out();
    ck_assert_int_eq(H->results_ok, 1);
    ck_assert_int_eq(s_send(s_fetch_msg("r2", 1, 1, 0)), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(s_send(s_fetch_msg("r2", 1, 1, 1)), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION, "duplicate fetch for r2 round 1");
    s_violated(PK_VIOLATION_DUPLICATE_FETCH);
}
END_TEST

//  Wire 1.1: a consumer that said minor 1 gets its answers without the
//  keys (they are its own lookup's); one of minor 0 gets them echoed.
START_TEST(test_lookup_resp_keys_by_minor)
{
    ck_assert_int_eq(s_send(s_lookup_msg("r1", 1, 3)), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->nout, 1);
    ck_assert(H->out[0]->present & PK_BIT(PK_F_KEYS));
    ck_assert_uint_eq(H->out[0]->keys.count, 3);
    ck_assert_uint_eq(H->out[0]->keys.v[2].bytes[0], 3);
    s_clear_out();

    pk_server_session_destroy(&H->session);
    s_clear_out();                  //  what the session said at its end
    s_open(1);
    ck_assert_int_eq(s_send(s_lookup_msg("r1", 1, 3)), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->nout, 1);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_LOOKUP_RESP);
    ck_assert(!(H->out[0]->present & PK_BIT(PK_F_KEYS)));
    ck_assert_ptr_null(H->out[0]->keys.v);
    ck_assert_uint_eq(H->out[0]->keys.count, 3);        //  the hits count them
    ck_assert(H->out[0]->hits[0] && H->out[0]->hits[1] && H->out[0]->hits[2]);
    ck_assert_str_eq(H->out[0]->kv_request_id, "r1");
    ck_assert_uint_eq(H->out[0]->round_seq, 1);
}
END_TEST

//  Capability get: one message, one answer after the hits landed (the
//  lookup's and the fetch's in one); a malformed get (a key twice) ends
//  the session, never the server.
START_TEST(test_get_one_answer)
{
    pk_msg_t *m = s_fetch_msg("r1", 7, 2, 10);
    m->type = PK_MSG_GET;
    ck_assert_int_eq(s_send(m), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->nout, 0);                   //  nothing before the write lands
    ck_assert_uint_eq(pk_memtransport_inflight(H->mem), 1);
    uint64_t tid = 1;
    pk_memtransport_complete(H->mem, &tid, 1, true);
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->nout, 1);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_GET_RESP);
    ck_assert_str_eq(H->out[0]->kv_request_id, "r1");
    ck_assert_uint_eq(H->out[0]->round_seq, 7);
    ck_assert(H->out[0]->success);
    ck_assert_uint_eq(H->out[0]->landing, 2);
    ck_assert_uint_eq(H->out[0]->keys.count, 2);
    ck_assert(H->out[0]->hits[0] && H->out[0]->hits[1]);
    s_clear_out();
    ck_assert_int_eq(H->results_ok, 1);
    const char *bad = "{\"type\":\"get\",\"kv_request_id\":\"r\",\"keys\":[\"0101\",\"0101\"],"
                      "\"block_indexes\":[1,2],\"round_seq\":1,"
                      "\"source_epoch\":\"00000000000000000000000000000001\","
                      "\"target_epoch\":\"00000000000000000000000000000001\"}";
    ck_assert_int_eq(pk_server_session_on_frame(H->session, bad, strlen(bad)),
                     PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION, "get.keys[1]: duplicate of keys[0]");
    s_violated(PK_VIOLATION_MALFORMED);
}
END_TEST

START_TEST(test_index_outside_consumer_pool)
{
    ck_assert_int_eq(s_send(s_fetch_msg("r1", 1, 2, 63)), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION,
                        "fetch.block_indexes[1]: 64 is outside the consumer's pool of 64 blocks");
    s_violated(PK_VIOLATION_BLOCK_INDEX);
}
END_TEST

//  Capability rejoin (protocol.md section 7): a fetch's rail_offer goes
//  to the channel where the connect_ack agreed rejoin; without it, or
//  refused by the channel, the session ends with the reason.
static struct { int calls; size_t rail; size_t len; uint8_t blob[8]; } s_offers;

static size_t
s_rails_landing(void *self, uint64_t round, uint64_t *counts, size_t cap)
{
    (void) self, (void) round, (void) counts, (void) cap;
    return 0;
}

static int
s_rail_rejoin(void *self, size_t rail, const uint8_t *blob, size_t len, char *err)
{
    (void) self;
    s_offers.calls++;
    s_offers.rail = rail;
    s_offers.len = len;
    memcpy(s_offers.blob, blob, len < 8 ? len : 8);
    return rail == 1 ? 0 : pk_err(err, -EPROTO, "rail_offer: consumer rail %zu is paired with "
                                  "none of ours", rail);
}

START_TEST(test_rail_offer)
{
    //  the session of s_setup did not agree rejoin
    pk_msg_t *m = s_fetch_msg("r1", 1, 1, 0);
    pk_msg_set_string(m, PK_F_RAIL_OFFER, "1 UEtPRgE=");
    ck_assert_int_eq(s_send(m), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION,
                        "fetch.rail_offer: capability rejoin was not agreed in connect_ack");
    s_violated(PK_VIOLATION_RAIL_OFFER);
    pk_server_session_destroy(&H->session);

    //  one whose consumer lists rails and rejoin, over a channel that can
    pk_msg_t *connect = s_connect_msg_minor("fp", 4096, 1);
    pk_msg_set_string(connect, PK_F_CAPS, PK_CAP_RAILS " " PK_CAP_REJOIN);
    pk_transport_t t = pk_memtransport_iface(H->mem);
    t.rails_landing = s_rails_landing;
    t.rail_rejoin = s_rail_rejoin;
    H->session = pk_server_session_new(&H->id, &H->config, connect, (pk_clock_t) { NULL, s_now },
                                       t, (pk_parent_t) { .lookup = s_lookup,
                                                          .create_store_job = s_pin,
                                                          .on_new_request = s_opened,
                                                          .on_request_finished = s_finished,
                                                          .store_result = s_result },
                                       s_out, NULL);
    pk_msg_destroy(&connect);
    ck_assert_ptr_nonnull(H->session);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_CONNECT_ACK);
    ck_assert(pk_caps_has(H->out[0]->caps, PK_CAP_REJOIN));
    memcpy(H->epoch, H->out[0]->source_epoch, PK_EPOCH_LEN);
    s_clear_out();
    m = s_fetch_msg("r1", 1, 1, 0);
    pk_msg_set_string(m, PK_F_RAIL_OFFER, "1 UEtPRgE=");
    ck_assert_int_eq(s_send(m), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(s_offers.calls, 1);
    ck_assert_uint_eq(s_offers.rail, 1);
    ck_assert_uint_eq(s_offers.len, 5);
    ck_assert_mem_eq(s_offers.blob, "PKOF\1", 5);
    //  refused by the channel: the channel's words
    m = s_fetch_msg("r2", 2, 1, 1);
    pk_msg_set_string(m, PK_F_RAIL_OFFER, "3 UEtPRgE=");
    ck_assert_int_eq(s_send(m), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION,
                        "fetch.rail_offer: consumer rail 3 is paired with none of ours");
    s_violated(PK_VIOLATION_RAIL_OFFER);
}
END_TEST

START_TEST(test_limits)
{
    //  live requests: 4
    for (int i = 0; i < 4; i++) {
        char kv[16];
        snprintf(kv, sizeof kv, "f%d", i);
        ck_assert_int_eq(s_send(s_fetch_msg(kv, 1, 1, 0)), PK_SERVER_SESSION_LIVE);
    }
    ck_assert_int_eq(s_send(s_fetch_msg("f4", 1, 1, 0)), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION, "limit: more than 4 live requests");
    s_violated(PK_VIOLATION_LIMIT_REQUESTS);
}
END_TEST

START_TEST(test_limit_rounds_and_keys)
{
    for (uint64_t r = 1; r <= 3; r++)
        ck_assert_int_eq(s_send(s_fetch_msg("r1", r, 1, 0)), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(s_send(s_fetch_msg("r1", 4, 1, 0)), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION, "limit: more than 3 rounds in request r1");
    s_violated(PK_VIOLATION_LIMIT_ROUNDS);
}
END_TEST

START_TEST(test_limit_parked_keys)
{
    //  9 keys in one lookup, 8 allowed
    ck_assert_int_eq(s_send(s_lookup_msg("r1", 1, 9)), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_VIOLATION, "limit: more than 8 keys in lookups");
    s_violated(PK_VIOLATION_LIMIT_LOOKUP_KEYS);
    ck_assert_str_eq(pk_violation_name(PK_VIOLATION_LIMIT_LOOKUP_KEYS), "limit_lookup_keys");
    ck_assert_str_eq(pk_violation_name(PK_VIOLATION_COUNT), "unknown");
}
END_TEST

START_TEST(test_pin_quota_answers_misses)
{
    //  quota 6: a lookup of 8 hits pins 6 and answers the other 2 as misses
    ck_assert_int_eq(s_send(s_lookup_msg("r1", 1, 8)), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_LOOKUP_RESP);
    int hits = 0;
    for (int i = 0; i < 8; i++)
        hits += H->out[0]->hits[i];
    ck_assert_int_eq(hits, 6);
    ck_assert(!H->out[0]->hits[6] && !H->out[0]->hits[7]);
    s_clear_out();
    //  the terminal fetch releases them; the quota is free again
    ck_assert_int_eq(s_send(s_fetch_msg("r1", 1, 0, 0)), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->results_ok, 1);
    ck_assert_int_eq(s_send(s_lookup_msg("r2", 1, 6)), PK_SERVER_SESSION_LIVE);
    for (int i = 0; i < 6; i++)
        ck_assert(H->out[0]->hits[i]);
    s_clear_out();
}
END_TEST

START_TEST(test_pin_quota_counts_prefill_stores)
{
    //  quota 6: a lookup pins 4; an engine's prefill store of 3 more for
    //  this consumer would pass it and is refused, one of 2 fits
    ck_assert_int_eq(s_send(s_lookup_msg("r1", 1, 4)), PK_SERVER_SESSION_LIVE);
    s_clear_out();
    pk_key_t keys[3];
    uint32_t blocks[3] = { 1, 2, 3 };
    for (int i = 0; i < 3; i++) {
        H->keybytes[i][0] = (uint8_t) (0x10 + i);
        keys[i] = pk_key_make(H->keybytes[i], 2);
    }
    ck_assert_int_eq(pk_server_session_store(H->session, "p1", keys, blocks, 3, 900, false, 0),
                     -EDQUOT);
    ck_assert_int_eq(pk_server_session_store(H->session, "p1", keys, blocks, 2, 901, false, 0), 0);
    //  the quota is full: a lookup's hits now all answer as misses
    ck_assert_int_eq(s_send(s_lookup_msg("r2", 1, 2)), PK_SERVER_SESSION_LIVE);
    ck_assert(!H->out[0]->hits[0] && !H->out[0]->hits[1]);
    s_clear_out();
    //  the lookup's terminal fetch gives its 4 back: a store of 3 fits now
    ck_assert_int_eq(s_send(s_fetch_msg("r1", 1, 0, 0)), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(pk_server_session_store(H->session, "p2", keys, blocks, 3, 902, false, 0), 0);
    s_clear_out();
}
END_TEST

START_TEST(test_silence_retires_and_releases_pins)
{
    ck_assert_int_eq(s_send(s_lookup_msg("r1", 1, 2)), PK_SERVER_SESSION_LIVE);
    s_clear_out();
    H->now += 9.99;
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(s_send(pk_msg_new(PK_MSG_PING)), PK_SERVER_SESSION_LIVE);     //  heard again
    s_clear_out();
    H->now += 9.99;
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_LIVE);
    H->now += 0.01;
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_SILENT, "nothing heard for 10.0 s");
    //  the lookup's pins were handed back as failed: the store unpins them
    ck_assert_int_eq(H->results_failed, 1);
}
END_TEST

//  A frame in hand comes before any silence verdict: collect (what the
//  actor runs before reading a frame) runs the role past the silence
//  deadline and the session lives; the frame then ends the silence.
START_TEST(test_collect_judges_no_silence)
{
    ck_assert_int_eq(s_send(s_lookup_msg("r1", 1, 2)), PK_SERVER_SESSION_LIVE);
    s_clear_out();
    H->now += 30;
    ck_assert_int_eq(pk_server_session_collect(H->session), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(s_send(pk_msg_new(PK_MSG_PING)), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->nout, 1);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_PONG);
    s_clear_out();
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_LIVE);
    H->now += 10;
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_SILENT, "nothing heard for 10.0 s");
}
END_TEST

//  A lookup parked on a key being written owes its parent an
//  on_request_finished; a retired session settles it (the store's
//  open_lookups came back down only at a serve that never came; found by
//  fuzz_session).
START_TEST(test_retire_closes_parked_brackets)
{
    pk_msg_t *m = s_lookup_msg("r1", 1, 2);
    pk_key_t keys[2] = { K(0, 0x7f), K(1, 1) };
    pk_msg_set_keys(m, keys, 2);
    ck_assert_int_eq(s_send(m), PK_SERVER_SESSION_LIVE);
    ck_assert(pk_server_session_has_parked(H->session));
    ck_assert_int_eq(H->opened, 1);
    ck_assert_int_eq(H->finished, 0);
    pk_server_session_retire(H->session, PK_DISC_SHUTDOWN, "test");
    ck_assert_int_eq(H->finished, 1);
    s_clear_out();
}
END_TEST

START_TEST(test_consumer_disconnect)
{
    ck_assert_int_eq(s_send(s_lookup_msg("r1", 1, 1)), PK_SERVER_SESSION_LIVE);
    s_clear_out();
    pk_msg_t *m = pk_msg_new(PK_MSG_DISCONNECT);
    pk_msg_set_code(m, PK_DISC_SHUTDOWN);
    pk_msg_set_string(m, PK_F_REASON, "bye");
    ck_assert_int_eq(s_send(m), PK_SERVER_SESSION_RETIRED);
    ck_assert_int_eq(H->nout, 0);                   //  nothing said back
    ck_assert_int_eq(H->results_failed, 1);
    ck_assert_str_eq(pk_server_session_reason(H->session), "consumer disconnected: bye");
}
END_TEST

//  The role's counters come through the session's and outlive the role;
//  a violation retired from outside (the node's flood check) is counted
//  once, as flood.
START_TEST(test_counters)
{
    //  3 keys the store holds and one it lacks (under the pin quota)
    pk_key_t keys[4] = { K(0, 1), K(1, 2), K(2, 3), K(3, 0x90) };
    pk_msg_t *m = pk_msg_new(PK_MSG_LOOKUP);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, "r1");
    pk_msg_set_keys(m, keys, 4);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, 1);
    ck_assert_int_eq(s_send(m), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->out[0]->type, PK_MSG_LOOKUP_RESP);
    s_clear_out();
    //  a prefill store nobody fetches times out after 30 s, and so do the
    //  lookup's pins
    pk_key_t key = K(9, 0x10);
    uint32_t block = 3;
    ck_assert_int_eq(pk_server_session_store(H->session, "p1", &key, &block, 1, 900, true, 1), 0);
    for (int i = 0; i < 4; i++) {
        H->now += 9;
        ck_assert_int_eq(s_send(pk_msg_new(PK_MSG_PING)), PK_SERVER_SESSION_LIVE);
        ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_LIVE);
    }
    s_clear_out();
    pk_server_session_counters_t c;
    pk_server_session_counters(H->session, &c);
    ck_assert_uint_eq(c.lookups, 1);
    ck_assert_uint_eq(c.keys, 4);
    ck_assert_uint_eq(c.role.hits, 3);
    ck_assert_uint_eq(c.role.misses, 1);
    ck_assert_uint_eq(c.role.expired, 0);
    ck_assert_uint_eq(c.role.store_timeouts, 2);
    ck_assert_uint_eq(c.violations, 0);
    pk_server_session_retire(H->session, PK_DISC_VIOLATION, "flood");
    s_expect_disconnect(PK_DISC_VIOLATION, "flood");
    pk_server_session_retire(H->session, PK_DISC_VIOLATION, "flood again");
    ck_assert_int_eq(H->nout, 0);
    s_violated(PK_VIOLATION_FLOOD);
    //  the role is gone; what it counted stays
    pk_server_session_counters(H->session, &c);
    ck_assert_uint_eq(c.role.hits, 3);
    ck_assert_uint_eq(c.role.misses, 1);
    ck_assert_uint_eq(c.role.store_timeouts, 2);
}
END_TEST

//  A consumer that reads nothing: every frame let out stays unread.
static size_t s_unread, s_unread_max;

static int
s_room(void *arg, size_t len, char *why, size_t cap)
{
    if (s_unread > 0 && s_unread + len > s_unread_max) {
        snprintf(why, cap, "more than %zu bytes of answers unread", s_unread_max);
        return -ENOBUFS;
    }
    s_unread += len;
    return 0;
}

//  Answers past the room the daemon gives (--max-unread-bytes) are not
//  sent: the session ends as a violation of class unread, its disconnect
//  going out without asking (the session's last frame).
START_TEST(test_unread_answers_end_the_session)
{
    s_unread = 0;
    s_unread_max = 1000;
    pk_server_session_set_room(H->session, s_room, NULL);
    int pongs = 0;
    while (H->nout == 0 || H->out[H->nout - 1]->type == PK_MSG_PONG) {
        ck_assert_int_lt(pongs, 100);
        s_send(pk_msg_new(PK_MSG_PING));
        pongs++;
    }
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_RETIRED);
    ck_assert_uint_le(s_unread, s_unread_max);
    //  every pong let out, then the disconnect (the last ping's pong not sent)
    ck_assert_int_eq(H->nout, pongs);
    pk_msg_t *last = H->out[H->nout - 1];
    ck_assert_int_eq(last->type, PK_MSG_DISCONNECT);
    ck_assert_int_eq(last->code, PK_DISC_VIOLATION);
    ck_assert_msg(strstr(last->reason, "limit: more than 1000 bytes of answers unread"), "%s",
                  last->reason);
    s_violated(PK_VIOLATION_UNREAD);
    ck_assert_str_eq(pk_violation_name(PK_VIOLATION_UNREAD), "unread");
    s_clear_out();
}
END_TEST

START_TEST(test_forced_cancel_retires)
{
    //  a write held past the drain deadline: the role cancels in immediate
    //  mode, and the session says `retired` instead of the abort_ack
    ck_assert_int_eq(s_send(s_lookup_msg("r1", 1, 1)), PK_SERVER_SESSION_LIVE);
    s_clear_out();
    ck_assert_int_eq(s_send(s_fetch_msg("r1", 1, 1, 0)), PK_SERVER_SESSION_LIVE);
    uint64_t tid = 1;
    pk_memtransport_hold(H->mem, &tid, 1);
    pk_msg_t *abort = pk_msg_new(PK_MSG_ABORT_FETCH);
    pk_msg_set_string(abort, PK_F_KV_REQUEST_ID, "r1");
    pk_msg_set_uint(abort, PK_F_ROUND_SEQ, 1);
    ck_assert_int_eq(s_send(abort), PK_SERVER_SESSION_LIVE);
    ck_assert_int_eq(H->nout, 0);
    H->now += 5;
    ck_assert_int_eq(s_send(pk_msg_new(PK_MSG_PING)), PK_SERVER_SESSION_LIVE);
    s_clear_out();
    H->now += 5;
    ck_assert_int_eq(pk_server_session_tick(H->session), PK_SERVER_SESSION_RETIRED);
    s_expect_disconnect(PK_DISC_RETIRED, "cancelled in immediate mode");
    ck_assert_uint_eq(pk_memtransport_inflight(H->mem), 0);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("session");
    TCase *tc = tcase_create("session");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_connect_checks);
    tcase_add_test(tc, test_repeated_connect);
    tcase_add_test(tc, test_ping_and_describe);
    tcase_add_test(tc, test_stale_epoch_dropped);
    tcase_add_test(tc, test_bad_frames_dropped);
    tcase_add_test(tc, test_wrong_direction);
    tcase_add_test(tc, test_lookup_fetch_and_duplicate);
    tcase_add_test(tc, test_lookup_resp_keys_by_minor);
    tcase_add_test(tc, test_index_outside_consumer_pool);
    tcase_add_test(tc, test_rail_offer);
    tcase_add_test(tc, test_get_one_answer);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_limit_rounds_and_keys);
    tcase_add_test(tc, test_limit_parked_keys);
    tcase_add_test(tc, test_pin_quota_answers_misses);
    tcase_add_test(tc, test_pin_quota_counts_prefill_stores);
    tcase_add_test(tc, test_silence_retires_and_releases_pins);
    tcase_add_test(tc, test_collect_judges_no_silence);
    tcase_add_test(tc, test_consumer_disconnect);
    tcase_add_test(tc, test_retire_closes_parked_brackets);
    tcase_add_test(tc, test_forced_cancel_retires);
    tcase_add_test(tc, test_unread_answers_end_the_session);
    tcase_add_test(tc, test_counters);
    suite_add_tcase(s, tc);
    return pk_test_run("session", s);
}
