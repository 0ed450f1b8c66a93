/*  test_client_session.c: the consumer's session (roles/client_session)
    against protocol.md sections 4-6 with a virtual clock: what it sends,
    when, and how it reacts to every answer a server can give, the way
    test_session.c tests the server's half.
*/
#include "roles/client_session.h"
#include "testutil.h"

#include <errno.h>
#include <math.h>
#include <string.h>

typedef struct {
    double now;
    pk_client_session_t *cs;
    int opens, closes, ups, gones, delivered;
    int open_rc, up_rc, send_rc, deliver_rc;
    uint8_t opened_epoch[PK_EPOCH_LEN];
    pk_msg_t *sent[16];
    int nsent;
    char gone_reason[512];
    pk_client_session_state_t states[16];
    int nstates;
    uint8_t server_epoch[PK_EPOCH_LEN];
} s_h_t;

static s_h_t *H;

static double
s_now(void *arg)
{
    return H->now;
}

static int
s_open(void *arg, const uint8_t *epoch, uint8_t **blob_p, size_t *len_p, char *err)
{
    H->opens++;
    memcpy(H->opened_epoch, epoch, PK_EPOCH_LEN);
    if (H->open_rc) {
        snprintf(err, PK_ERRLEN, "no endpoint for you");
        return H->open_rc;
    }
    *blob_p = (uint8_t *) strdup("blob");
    *len_p = 4;
    return 0;
}

static void
s_close(void *arg)
{
    H->closes++;
}

static int
s_send(void *arg, char *frame, size_t len)
{
    if (H->send_rc) {
        free(frame);
        return H->send_rc;
    }
    ck_assert_int_lt(H->nsent, 16);
    char err[PK_ERRLEN];
    ck_assert_msg(pk_msg_decode(frame, len, &H->sent[H->nsent], err) == 0, "%s", err);
    free(frame);
    H->nsent++;
    return 0;
}

static int
s_up(void *arg)
{
    H->ups++;
    return H->up_rc;
}

static int
s_deliver(void *arg, const pk_msg_t *msg, const char **why)
{
    H->delivered++;
    if (H->deliver_rc)
        *why = "the role did not like it";
    return H->deliver_rc;
}

static void
s_gone(void *arg, const char *reason)
{
    H->gones++;
    snprintf(H->gone_reason, sizeof H->gone_reason, "%s", reason);
}

static void
s_state(void *arg, pk_client_session_state_t state, const char *reason)
{
    if (H->nstates < 16)
        H->states[H->nstates++] = state;
}

static const pk_client_session_ops_t OPS = {
    sizeof (pk_client_session_ops_t), NULL, s_open, s_close, s_send, s_up, s_deliver, s_gone,
    s_state
};

static void
s_clear_sent(void)
{
    for (int i = 0; i < H->nsent; i++)
        pk_msg_destroy(&H->sent[i]);
    H->nsent = 0;
}

static void
s_make(bool no_reconnect)
{
    pk_client_session_config_t config = { 1.0, 2.0, 10.0, no_reconnect };
    pk_client_identity_t id = { "tcp://server:1", "consumer-1", 64, 4096, "fp", "7", 0, NULL };
    H->cs = pk_client_session_new(&config, &id, (pk_clock_t) { NULL, s_now }, &OPS);
    ck_assert_ptr_nonnull(H->cs);
}

static void
s_setup(void)
{
    H = calloc(1, sizeof *H);
    H->now = 100;
    memset(H->server_epoch, 0x5e, PK_EPOCH_LEN);
    s_make(false);
}

static void
s_teardown(void)
{
    pk_client_session_destroy(&H->cs);
    ck_assert_ptr_null(H->cs);
    //  every open was closed exactly once
    ck_assert_int_eq(H->opens, H->closes);
    s_clear_sent();
    free(H);
}

//  The server's connect_ack for the session's current epoch (or another).
static pk_msg_t *
s_ack(const uint8_t *target)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_CONNECT_ACK);
    pk_msg_set_uint(m, PK_F_WIRE_MAJOR, 1);
    pk_msg_set_uint(m, PK_F_WIRE_MINOR, 0);
    pk_msg_set_string(m, PK_F_PEER_ID, "server-a");
    pk_msg_set_uint(m, PK_F_BLOCK_LEN, 4096);
    pk_msg_set_uint(m, PK_F_NUM_BLOCKS, 128);
    pk_msg_set_epochs(m, H->server_epoch, target);
    return m;
}

static void
s_feed(pk_msg_t *m)
{
    pk_client_session_on_message(H->cs, m);
    pk_msg_destroy(&m);
}

static void
s_bring_up(void)
{
    ck_assert_int_eq(pk_client_session_start(H->cs, NULL), 0);
    pk_client_session_tick(H->cs);
    s_feed(s_ack(pk_client_session_epoch(H->cs)));
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_UP);
    s_clear_sent();
}

//  A live message from the server with the session's epochs.
static pk_msg_t *
s_live(pk_msg_type_t type)
{
    pk_msg_t *m = pk_msg_new(type);
    pk_msg_set_epochs(m, H->server_epoch, pk_client_session_epoch(H->cs));
    return m;
}

START_TEST(test_connect_is_sent_and_repeated)
{
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    //  not started: nothing happens, however long
    H->now += 100;
    ck_assert(isinf(pk_client_session_tick(H->cs)));
    ck_assert_int_eq(H->opens, 0);
    ck_assert_int_eq(pk_client_session_start(H->cs, NULL), 0);
    ck_assert_int_eq(H->opens, 1);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_CONNECTING);
    ck_assert_int_eq(memcmp(H->opened_epoch, pk_client_session_epoch(H->cs), PK_EPOCH_LEN), 0);
    ck_assert_int_eq(pk_client_session_start(H->cs, NULL), -EALREADY);
    //  the first tick sends connect: every field of section 4
    ck_assert(pk_client_session_tick(H->cs) == H->now + 1.0);
    ck_assert_int_eq(H->nsent, 1);
    pk_msg_t *c = H->sent[0];
    ck_assert_int_eq(c->type, PK_MSG_CONNECT);
    ck_assert_str_eq(c->peer_id, "consumer-1");
    ck_assert_uint_eq(c->num_blocks, 64);
    ck_assert_uint_eq(c->block_len, 4096);
    ck_assert_str_eq(c->config_fingerprint, "fp");
    ck_assert_str_eq(c->hash_seed, "7");
    ck_assert_uint_eq(c->agent_metadata_len, 4);
    ck_assert_int_eq(memcmp(c->agent_metadata, "blob", 4), 0);
    ck_assert_int_eq(memcmp(c->source_epoch, pk_client_session_epoch(H->cs), PK_EPOCH_LEN), 0);
    static const uint8_t zero[PK_EPOCH_LEN];
    ck_assert_int_eq(memcmp(c->target_epoch, zero, PK_EPOCH_LEN), 0);
    //  not again before reconnect_interval, then again
    H->now += 0.99;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(H->nsent, 1);
    H->now += 0.01;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(H->nsent, 2);
    //  a socket that cannot send yet is tried again within 5 ms
    H->send_rc = -EAGAIN;
    H->now += 1.0;
    ck_assert(fabs(pk_client_session_tick(H->cs) - (H->now + 0.005)) < 1e-9);
    H->send_rc = 0;
    H->now += 0.005;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(H->nsent, 3);
}
END_TEST

START_TEST(test_ack_for_our_epoch_brings_it_up)
{
    ck_assert_int_eq(pk_client_session_start(H->cs, NULL), 0);
    pk_client_session_tick(H->cs);
    //  an answer to another session's connect is not ours
    uint8_t other[PK_EPOCH_LEN];
    memset(other, 0x77, sizeof other);
    s_feed(s_ack(other));
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_CONNECTING);
    ck_assert_int_eq(H->ups, 0);
    s_feed(s_ack(pk_client_session_epoch(H->cs)));
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_UP);
    ck_assert_int_eq(H->ups, 1);
    ck_assert_str_eq(pk_client_session_reason(H->cs), "");
    ck_assert_int_eq(memcmp(pk_client_session_server_epoch(H->cs), H->server_epoch,
                            PK_EPOCH_LEN), 0);
    //  a repeated ack (our connect was repeated) changes nothing
    s_feed(s_ack(pk_client_session_epoch(H->cs)));
    ck_assert_int_eq(H->ups, 1);
    ck_assert_int_eq(H->delivered, 0);
    ck_assert_int_eq(H->nstates, 2);
    ck_assert_int_eq(H->states[0], PK_CLIENT_SESSION_CONNECTING);
    ck_assert_int_eq(H->states[1], PK_CLIENT_SESSION_UP);
}
END_TEST

START_TEST(test_incompatible_stops_for_good)
{
    ck_assert_int_eq(pk_client_session_start(H->cs, NULL), 0);
    pk_client_session_tick(H->cs);
    //  any other refusal: keep asking, with the reason kept
    pk_msg_t *d = pk_msg_new(PK_MSG_DISCONNECT);
    pk_msg_set_code(d, PK_DISC_RETIRED);
    pk_msg_set_string(d, PK_F_REASON, "older session retiring");
    s_feed(d);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_CONNECTING);
    ck_assert_ptr_nonnull(strstr(pk_client_session_reason(H->cs), "older session retiring"));
    d = pk_msg_new(PK_MSG_DISCONNECT);
    pk_msg_set_code(d, PK_DISC_INCOMPATIBLE);
    pk_msg_set_string(d, PK_F_REASON, "block_len: 4096, ours 8192");
    s_feed(d);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_STOPPED);
    ck_assert_str_eq(pk_client_session_reason(H->cs),
                     "tcp://server:1 refused us as incompatible: block_len: 4096, ours 8192");
    ck_assert_int_eq(H->closes, 1);
    ck_assert_int_eq(H->gones, 0);
    H->now += 1000;
    ck_assert(isinf(pk_client_session_tick(H->cs)));
    ck_assert_int_eq(H->opens, 1);
}
END_TEST

START_TEST(test_keepalive_pings_only_when_quiet)
{
    s_bring_up();
    //  due: keepalive (2 s) before silence (10 s)
    ck_assert(pk_client_session_tick(H->cs) == H->now + 2.0);
    H->now += 1.5;
    pk_msg_t *ping = pk_msg_new(PK_MSG_PING);
    ck_assert_int_eq(pk_client_session_send(H->cs, ping), 0);
    pk_msg_destroy(&ping);
    ck_assert_int_eq(H->nsent, 1);
    //  sending resets the keepalive
    H->now += 1.9;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(H->nsent, 1);
    H->now += 0.1;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(H->nsent, 2);
    ck_assert_int_eq(H->sent[1]->type, PK_MSG_PING);
    ck_assert_int_eq(memcmp(H->sent[1]->source_epoch, pk_client_session_epoch(H->cs),
                            PK_EPOCH_LEN), 0);
    ck_assert_int_eq(memcmp(H->sent[1]->target_epoch, H->server_epoch, PK_EPOCH_LEN), 0);
}
END_TEST

START_TEST(test_silence_ends_it_and_a_new_session_follows)
{
    s_bring_up();
    uint8_t first[PK_EPOCH_LEN];
    memcpy(first, pk_client_session_epoch(H->cs), PK_EPOCH_LEN);
    //  a pong at 9 s counts as heard
    H->now += 9;
    s_feed(s_live(PK_MSG_PONG));
    ck_assert_int_eq(H->delivered, 1);
    H->now += 9.99;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_UP);
    H->now += 0.01;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    ck_assert_str_eq(H->gone_reason, "server silent");
    ck_assert_str_eq(pk_client_session_reason(H->cs), "server silent");
    ck_assert_int_eq(H->gones, 1);
    ck_assert_int_eq(H->closes, 1);
    //  a new session, with a new epoch, after reconnect_interval
    H->now += 0.99;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(H->opens, 1);
    H->now += 0.01;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(H->opens, 2);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_CONNECTING);
    ck_assert_int_ne(memcmp(first, pk_client_session_epoch(H->cs), PK_EPOCH_LEN), 0);
    s_clear_sent();
}
END_TEST

START_TEST(test_stale_epochs_are_dropped)
{
    s_bring_up();
    H->now += 5;
    //  another server epoch (an old incarnation), or another target
    pk_msg_t *m = pk_msg_new(PK_MSG_PONG);
    uint8_t other[PK_EPOCH_LEN];
    memset(other, 0x99, sizeof other);
    pk_msg_set_epochs(m, other, pk_client_session_epoch(H->cs));
    s_feed(m);
    m = pk_msg_new(PK_MSG_PONG);
    pk_msg_set_epochs(m, H->server_epoch, other);
    s_feed(m);
    ck_assert_int_eq(H->delivered, 0);
    //  and they do not count as heard: silence is still from the ack
    H->now += 5;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    //  a stale disconnect is ignored too; one without epochs is not
    H->now += 1;
    pk_client_session_tick(H->cs);
    s_feed(s_ack(pk_client_session_epoch(H->cs)));
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_UP);
    m = pk_msg_new(PK_MSG_DISCONNECT);
    pk_msg_set_code(m, PK_DISC_SHUTDOWN);
    pk_msg_set_string(m, PK_F_REASON, "bye");
    pk_msg_set_epochs(m, other, pk_client_session_epoch(H->cs));
    s_feed(m);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_UP);
    m = pk_msg_new(PK_MSG_DISCONNECT);
    pk_msg_set_code(m, PK_DISC_SHUTDOWN);
    pk_msg_set_string(m, PK_F_REASON, "server shutting down");
    s_feed(m);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    ck_assert_str_eq(H->gone_reason, "server disconnected (shutdown): server shutting down");
}
END_TEST

START_TEST(test_violations_end_the_session)
{
    //  a frame that does not decode
    s_bring_up();
    pk_client_session_on_frame(H->cs, "{\"type\":", 8);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    ck_assert_int_eq(H->nsent, 1);
    ck_assert_int_eq(H->sent[0]->type, PK_MSG_DISCONNECT);
    ck_assert_int_eq(H->sent[0]->code, PK_DISC_VIOLATION);
    ck_assert_ptr_nonnull(strstr(H->gone_reason, "protocol violation by the server: "));
    s_clear_sent();
    //  a message that only flows the other way
    H->now += 1;
    pk_client_session_tick(H->cs);
    s_feed(s_ack(pk_client_session_epoch(H->cs)));
    s_clear_sent();
    s_feed(s_live(PK_MSG_PING));
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    ck_assert_str_eq(H->sent[0]->reason, "a ping from a server");
    ck_assert_str_eq(H->gone_reason, "protocol violation by the server: a ping from a server");
    s_clear_sent();
    //  one the role refuses
    H->now += 1;
    pk_client_session_tick(H->cs);
    s_feed(s_ack(pk_client_session_epoch(H->cs)));
    s_clear_sent();
    H->deliver_rc = -EPROTO;
    s_feed(s_live(PK_MSG_PONG));
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    ck_assert_str_eq(H->sent[0]->reason, "the role did not like it");
    ck_assert_int_eq(H->gones, 3);
    ck_assert_int_eq(H->closes, 3);
    //  before the session is up, an unreadable frame is only noise
    H->deliver_rc = 0;
    H->now += 1;
    pk_client_session_tick(H->cs);
    s_clear_sent();
    pk_client_session_on_frame(H->cs, "junk", 4);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_CONNECTING);
    ck_assert_int_eq(H->nsent, 0);
}
END_TEST

//  A lookup answer whose miss reasons break the rule (protocol.md, the
//  reasons capability) ends the session as the server's violation, naming
//  the field: a consumer never takes a malformed new field quietly.
START_TEST(test_bad_reasons_end_the_session)
{
    s_bring_up();
    char se[2 * PK_EPOCH_LEN + 1], te[2 * PK_EPOCH_LEN + 1], frame[512];
    pk_hex_encode(H->server_epoch, PK_EPOCH_LEN, se);
    pk_hex_encode(pk_client_session_epoch(H->cs), PK_EPOCH_LEN, te);
    int len = snprintf(frame, sizeof frame,
                       "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\","
                       "\"hits\":[true,false],\"round_seq\":1,\"source_epoch\":\"%s\","
                       "\"target_epoch\":\"%s\",\"reasons\":\"z\"}", se, te);
    pk_client_session_on_frame(H->cs, frame, (size_t) len);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    ck_assert_int_eq(H->sent[0]->type, PK_MSG_DISCONNECT);
    ck_assert_int_eq(H->sent[0]->code, PK_DISC_VIOLATION);
    ck_assert_msg(strstr(H->gone_reason, "lookup_resp.reasons[0]"), "%s", H->gone_reason);
}
END_TEST

START_TEST(test_no_reconnect_stays_down)
{
    pk_client_session_destroy(&H->cs);
    s_make(true);
    s_bring_up();
    H->now += 10;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    H->now += 100;
    ck_assert(isinf(pk_client_session_tick(H->cs)));
    ck_assert_int_eq(H->opens, 1);
}
END_TEST

START_TEST(test_owner_disconnect_says_goodbye_and_stays_down)
{
    s_bring_up();
    pk_client_session_disconnect(H->cs, PK_DISC_SHUTDOWN, "client closing");
    ck_assert_int_eq(H->nsent, 1);
    ck_assert_int_eq(H->sent[0]->type, PK_MSG_DISCONNECT);
    ck_assert_int_eq(H->sent[0]->code, PK_DISC_SHUTDOWN);
    ck_assert_str_eq(H->sent[0]->reason, "client closing");
    ck_assert_int_eq(H->gones, 0);      //  the owner's open work is its own
    ck_assert(isinf(pk_client_session_due(H->cs)));
    ck_assert_int_eq(H->closes, 1);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    H->now += 100;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(H->opens, 1);
    ck_assert_int_eq(pk_client_session_send(H->cs, &(pk_msg_t) { .type = PK_MSG_PING }),
                     -ENOTCONN);
    //  started again by the owner
    ck_assert_int_eq(pk_client_session_start(H->cs, NULL), 0);
    ck_assert_int_eq(H->opens, 2);
}
END_TEST

START_TEST(test_failures_to_open_or_come_up)
{
    H->open_rc = -ENODEV;
    char err[PK_ERRLEN] = "";
    ck_assert_int_eq(pk_client_session_start(H->cs, err), -ENODEV);
    ck_assert_str_eq(err, "no endpoint for you");
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    ck_assert_int_eq(H->closes, 1);     //  a half-open session is closed
    //  tried again after reconnect_interval, and it works now
    H->open_rc = 0;
    H->now += 1.0;
    pk_client_session_tick(H->cs);
    ck_assert_int_eq(H->opens, 2);
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_CONNECTING);
    //  the owner cannot set up what lives with the session: down, retried
    H->up_rc = -ENOMEM;
    s_feed(s_ack(pk_client_session_epoch(H->cs)));
    ck_assert_int_eq(pk_client_session_state(H->cs), PK_CLIENT_SESSION_DOWN);
    ck_assert_int_eq(H->gones, 0);
    ck_assert_int_eq(H->closes, 2);
    ck_assert(pk_client_session_tick(H->cs) == H->now + 1.0);
    s_clear_sent();
}
END_TEST

START_TEST(test_old_ops_are_refused)
{
    pk_client_session_ops_t old = OPS;
    old.size = sizeof old - sizeof (void *);
    pk_client_session_config_t config = PK_CLIENT_SESSION_CONFIG_DEFAULT;
    pk_client_identity_t id = { NULL, "c", 1, 1, "fp", "7", 0, NULL };
    ck_assert_ptr_null(pk_client_session_new(&config, &id, (pk_clock_t) { NULL, s_now }, &old));
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("client_session");
    TCase *tc = tcase_create("client_session");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_connect_is_sent_and_repeated);
    tcase_add_test(tc, test_ack_for_our_epoch_brings_it_up);
    tcase_add_test(tc, test_incompatible_stops_for_good);
    tcase_add_test(tc, test_keepalive_pings_only_when_quiet);
    tcase_add_test(tc, test_silence_ends_it_and_a_new_session_follows);
    tcase_add_test(tc, test_stale_epochs_are_dropped);
    tcase_add_test(tc, test_violations_end_the_session);
    tcase_add_test(tc, test_bad_reasons_end_the_session);
    tcase_add_test(tc, test_no_reconnect_stays_down);
    tcase_add_test(tc, test_owner_disconnect_says_goodbye_and_stays_down);
    tcase_add_test(tc, test_failures_to_open_or_come_up);
    tcase_add_test(tc, test_old_ops_are_refused);
    suite_add_tcase(s, tc);
    return pk_test_run("client_session", s);
}
