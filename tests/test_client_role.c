/*  test_client_role.c: the consumer's role, with a virtual clock, a
    recording sender, a scripted landed count and a recorded cut-off.
*/
#include "client_role.h"
#include "testutil.h"

#include <errno.h>
#include <string.h>

typedef struct {
    double now;
    pk_client_role_t *role;
    //  sent messages: type, kv, round, key count
    struct { pk_msg_type_t type; char kv[16]; uint64_t round; size_t n; } sent[32];
    int nsent;
    uint64_t landed[64];
    bool cut;
    //  events
    struct { uint64_t id; pk_load_status_t status; bool cut_before; char reason[96]; } done[16];
    int ndone;
    int lookups_done;
    uint64_t last_lookup_round;
    uint8_t bytes[16];
} s_h_t;

static s_h_t *H;

static double
s_now(void *a)
{
    return H->now;
}

static void
s_send(void *a, const pk_msg_t *m)
{
    ck_assert_int_lt(H->nsent, 32);
    //  every message the role sends is a valid frame once epochs are added
    static const uint8_t e1[PK_EPOCH_LEN] = { 1 }, e2[PK_EPOCH_LEN] = { 2 };
    pk_msg_t copy = *m;
    pk_msg_set_epochs(&copy, e1, e2);
    char *text = NULL, err[PK_ERRLEN] = "";
    ck_assert_msg(pk_msg_encode(&copy, &text, NULL, err) == 0, "invalid frame: %s", err);
    free(text);
    H->sent[H->nsent].type = m->type;
    snprintf(H->sent[H->nsent].kv, sizeof H->sent[0].kv, "%s", m->kv_request_id);
    H->sent[H->nsent].round = m->round_seq;
    H->sent[H->nsent].n = m->keys.count;
    H->nsent++;
}

static uint64_t
s_landed(void *a, uint64_t round)
{
    return H->cut ? 0 : H->landed[round % 64];
}

static void
s_cut(void *a)
{
    H->cut = true;
}

static void
s_lookup_done(void *a, const char *kv, uint64_t round, const pk_key_t *keys, const bool *hits,
              size_t n)
{
    H->lookups_done++;
    H->last_lookup_round = round;
}

static void
s_load_done(void *a, uint64_t id, pk_load_status_t status, const char *reason)
{
    ck_assert_int_lt(H->ndone, 16);
    H->done[H->ndone].id = id;
    H->done[H->ndone].status = status;
    H->done[H->ndone].cut_before = H->cut;
    snprintf(H->done[H->ndone].reason, sizeof H->done[0].reason, "%s", reason);
    H->ndone++;
}

static void
s_setup(void)
{
    H = calloc(1, sizeof *H);
    H->now = 50;
    for (int i = 0; i < 16; i++)
        H->bytes[i] = (uint8_t) (0xa0 + i);
    pk_client_role_config_t cfg = { 30, 10 };
    H->role = pk_client_role_new(&cfg, (pk_clock_t) { NULL, s_now }, (pk_sender_t) { NULL, s_send },
                                 (pk_client_transport_t) { NULL, s_landed, s_cut },
                                 (pk_client_events_t) { NULL, s_lookup_done, s_load_done });
    ck_assert_ptr_nonnull(H->role);
}

static void
s_teardown(void)
{
    pk_client_role_destroy(&H->role);
    free(H);
}

static pk_key_t
K(int i)
{
    return pk_key_make(&H->bytes[i], 1);
}

static pk_msg_t *
s_msg(pk_msg_type_t type, const char *kv, uint64_t round)
{
    pk_msg_t *m = pk_msg_new(type);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, round);
    return m;
}

static int
s_deliver(pk_msg_t *m)
{
    int rc = pk_client_role_on_message(H->role, m);
    pk_msg_destroy(&m);
    return rc;
}

static pk_msg_t *
s_resp(const char *kv, uint64_t round, int n, int first_key)
{
    pk_msg_t *m = s_msg(PK_MSG_LOOKUP_RESP, kv, round);
    pk_key_t keys[8];
    bool hits[8];
    for (int i = 0; i < n; i++) {
        keys[i] = K(first_key + i);
        hits[i] = true;
    }
    pk_msg_set_keys(m, keys, (size_t) n);
    pk_msg_set_hits(m, hits, (size_t) n);
    return m;
}

static pk_msg_t *
s_done(const char *kv, uint64_t round, bool success, uint64_t landing)
{
    pk_msg_t *m = s_msg(PK_MSG_TRANSFER_DONE, kv, round);
    pk_msg_set_bool(m, PK_F_SUCCESS, success);
    pk_msg_set_uint(m, PK_F_LANDING, landing);
    return m;
}

static pk_msg_t *
s_ack(const char *kv, uint64_t round, uint64_t landing)
{
    pk_msg_t *m = s_msg(PK_MSG_ABORT_ACK, kv, round);
    pk_msg_set_uint(m, PK_F_LANDING, landing);
    return m;
}

static uint64_t
s_fetch(const char *kv, int first_key, int n, uint64_t round, double deadline)
{
    pk_key_t keys[8];
    uint32_t dest[8];
    for (int i = 0; i < n; i++) {
        keys[i] = K(first_key + i);
        dest[i] = (uint32_t) i;
    }
    uint64_t id = 0;
    ck_assert_int_eq(pk_client_role_fetch(H->role, kv, keys, dest, (size_t) n, round, deadline,
                                          &id), 0);
    return id;
}

//  ---------------------------------------------------------------------------

START_TEST(test_probes_batched_per_request)
{
    pk_key_t a[3] = { K(0), K(1), K(1) }, b[2] = { K(1), K(2) }, c[1] = { K(3) };
    pk_client_role_probe(H->role, "r1", a, 3);
    pk_client_role_probe(H->role, "r1", b, 2);
    pk_client_role_probe(H->role, "r2", c, 1);
    ck_assert_int_eq(H->nsent, 0);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 2);
    //  one lookup per request, the keys not yet sent, a fresh round each
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(H->sent[i].type, PK_MSG_LOOKUP);
        if (strcmp(H->sent[i].kv, "r1") == 0)
            ck_assert_uint_eq(H->sent[i].n, 3);
        else
            ck_assert_uint_eq(H->sent[i].n, 1);
    }
    ck_assert_uint_ne(H->sent[0].round, H->sent[1].round);
    pk_key_t d[2] = { K(0), K(4) };
    pk_client_role_probe(H->role, "r1", d, 2);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 3);
    ck_assert_uint_eq(H->sent[2].n, 1);         //  only the new key
    ck_assert_uint_eq(H->sent[2].round, 3);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 3);              //  nothing left to send
}
END_TEST

START_TEST(test_lookup_resp_matching_and_stale)
{
    pk_key_t a[2] = { K(0), K(1) };
    pk_client_role_probe(H->role, "r1", a, 2);
    pk_client_role_flush(H->role);
    uint64_t round = H->sent[0].round;
    s_deliver(s_resp("r1", round + 7, 2, 0));    //  a round never asked
    s_deliver(s_resp("r2", round, 2, 0));        //  another request
    ck_assert_int_eq(H->lookups_done, 0);
    s_deliver(s_resp("r1", round, 2, 0));
    ck_assert_int_eq(H->lookups_done, 1);
    ck_assert_uint_eq(H->last_lookup_round, round);
    s_deliver(s_resp("r1", round, 2, 0));        //  answered already: stale
    ck_assert_int_eq(H->lookups_done, 1);
    //  the hits are fetched under the lookup's round, once
    s_fetch("r1", 0, 2, round, 0);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_FETCH);
    ck_assert_uint_eq(H->sent[1].round, round);
    pk_key_t k[1] = { K(0) };
    uint32_t dest[1] = { 0 };
    uint64_t id;
    ck_assert_int_eq(pk_client_role_fetch(H->role, "r1", k, dest, 1, round, 0, &id), -EINVAL);
}
END_TEST

START_TEST(test_landed_only_when_every_block_counted)
{
    uint64_t id = s_fetch("r1", 0, 3, 0, 0);
    uint64_t round = H->sent[0].round;
    ck_assert_uint_eq(round, 1);
    s_deliver(s_done("r1", round, true, 3));
    ck_assert_int_eq(H->ndone, 0);               //  immediates not counted yet
    H->landed[round] = 2;
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->ndone, 0);
    H->landed[round] = 3;
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_LANDED);
    ck_assert(!H->cut);
    ck_assert_uint_eq(pk_client_role_open_loads(H->role), 0);
}
END_TEST

START_TEST(test_failed_waits_for_landing_blocks)
{
    s_fetch("r1", 0, 4, 0, 0);
    uint64_t round = H->sent[0].round;
    //  two blocks may still be on their way: the destination waits for them
    s_deliver(s_done("r1", round, false, 2));
    H->landed[round] = 1;
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->ndone, 0);
    H->landed[round] = 2;
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_FAILED);
    ck_assert(!H->cut);
    //  one that never gets its landing blocks: cut off first, then freed
    s_fetch("r2", 0, 2, 0, 0);
    round = H->sent[1].round;
    s_deliver(s_done("r2", round, false, 1));
    H->now += 9.9;
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->ndone, 1);
    H->now += 0.1;
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->ndone, 2);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_FAILED);
    ck_assert(H->done[1].cut_before);
}
END_TEST

START_TEST(test_timeout_abort_and_either_order)
{
    uint64_t id = s_fetch("r1", 0, 2, 0, 5);     //  the caller's own 5 s deadline
    uint64_t round = H->sent[0].round;
    H->now += 4.9;
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->nsent, 1);
    H->now += 0.1;
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->nsent, 2);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_ABORT_FETCH);
    ck_assert_uint_eq(H->sent[1].round, round);
    ck_assert_int_eq(s_deliver(s_ack("r1", round, 0)), 0);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_ABORTED);
    //  the transfer_done that crossed the abort is not a conflict, once
    ck_assert_int_eq(s_deliver(s_done("r1", round, false, 0)), 0);
    ck_assert_int_eq(H->ndone, 1);
    //  a second transfer_done for the round is a violation
    ck_assert_int_eq(s_deliver(s_done("r1", round, false, 0)), -EPROTO);
}
END_TEST

START_TEST(test_abort_ack_timeout_cuts_off)
{
    s_fetch("r1", 0, 2, 0, 0);
    H->now += 30;
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_ABORT_FETCH);
    H->now += 10;
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_FAILED);
    ck_assert(H->done[0].cut_before);
    ck_assert_str_eq(H->done[0].reason, "abort not acknowledged in time");
    uint64_t id;
    pk_key_t k[1] = { K(0) };
    uint32_t dest[1] = { 0 };
    ck_assert_int_eq(pk_client_role_fetch(H->role, "r1", k, dest, 1, 0, 0, &id), -ENOTCONN);
}
END_TEST

START_TEST(test_server_gone_cuts_off_first)
{
    s_fetch("r1", 0, 2, 0, 0);
    s_fetch("r1", 2, 2, 0, 0);      //  two loads of one request in flight
    ck_assert_uint_ne(H->sent[0].round, H->sent[1].round);
    pk_client_role_server_gone(H->role, "disconnect: retired");
    ck_assert_int_eq(H->ndone, 2);
    ck_assert(H->done[0].cut_before && H->done[1].cut_before);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_FAILED);
    ck_assert_str_eq(H->done[1].reason, "disconnect: retired");
}
END_TEST

START_TEST(test_loads_matched_by_round)
{
    uint64_t a = s_fetch("r1", 0, 1, 0, 0), b = s_fetch("r1", 1, 1, 0, 0);
    uint64_t ra = H->sent[0].round, rb = H->sent[1].round;
    H->landed[rb] = 1;
    s_deliver(s_done("r1", rb, true, 1));
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, b);
    H->landed[ra] = 1;
    s_deliver(s_done("r1", ra, true, 1));
    ck_assert_uint_eq(H->done[1].id, a);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_LANDED);
}
END_TEST

START_TEST(test_terminal_fetch_on_finish)
{
    pk_key_t a[1] = { K(0) };
    pk_client_role_probe(H->role, "r1", a, 1);
    pk_client_role_flush(H->role);
    uint64_t round = H->sent[0].round;
    pk_client_role_finish(H->role, "r1");
    ck_assert_int_eq(H->nsent, 2);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_FETCH);
    ck_assert_uint_eq(H->sent[1].n, 0);
    ck_assert_uint_eq(H->sent[1].round, round);  //  the open lookup's round
    //  its late answer is stale now
    s_deliver(s_resp("r1", round, 1, 0));
    ck_assert_int_eq(H->lookups_done, 0);
    //  a request that never looked up gets no terminal fetch
    s_fetch("r2", 0, 1, 0, 0);
    pk_client_role_finish(H->role, "r2");
    ck_assert_int_eq(H->nsent, 3);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("client_role");
    TCase *tc = tcase_create("client_role");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_probes_batched_per_request);
    tcase_add_test(tc, test_lookup_resp_matching_and_stale);
    tcase_add_test(tc, test_landed_only_when_every_block_counted);
    tcase_add_test(tc, test_failed_waits_for_landing_blocks);
    tcase_add_test(tc, test_timeout_abort_and_either_order);
    tcase_add_test(tc, test_abort_ack_timeout_cuts_off);
    tcase_add_test(tc, test_server_gone_cuts_off_first);
    tcase_add_test(tc, test_loads_matched_by_round);
    tcase_add_test(tc, test_terminal_fetch_on_finish);
    suite_add_tcase(s, tc);
    return pk_test_run("client_role", s);
}
