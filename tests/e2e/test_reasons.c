/*  test_reasons.c: miss reasons (issue 36, point 4; protocol.md,
    capability `reasons`), from outside a real p2pkv-server.

    One server with a pool of 8 blocks, a pin quota of 2, a lookup
    deadline of 2 s and two tenant namespaces (--tenants: every keyless
    consumer is in alpha; an engine handle in beta publishes what alpha
    must not learn of).  Raw consumers (tests/consumer.c) list `reasons`
    in their connect, or nothing (as the seed's and every older consumer
    do), and read each lookup_resp whole; the client library, p2pkv
    lookup and the metrics are checked against the same server.  Each
    reason a consumer can see is made to happen by what the engine does,
    never by sleeping: evicted by puts past the pool's size, pending by a
    reservation never committed, writing by one made after the lookup's
    first poll (seen in the pool's lookup count), quota by a lookup of
    more hits than the quota, draining by SIGTERM while a session holds
    pins (the drain waits for it).
*/
#include "p2pkv.h"
#include "p2pkv_engine.h"
#include "base/clock.h"
#include "blocks.h"
#include "consumer.h"
#include "daemon.h"
#include "shell.h"
#include "base/key.h"
#include "wire/protocol.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BOUND 60.0                  //  seconds any one wait may take
#define LONG "120"                  //  the server's timeouts the tests never reach

//  Keys: E1..E9 published in shared, B1..B3 in beta, X never, P and W
//  reserved and never committed.
enum { E1 = 0, E9 = 8, B1 = 9, B2, B3, X, P, W, NKEYS };
static p2pkv_key_t *s_keys;
static pk_key_t s_wire[NKEYS];

static void
s_make_keys(void)
{
    s_keys = bk_keys(36, 0, NKEYS);
    for (int i = 0; i < NKEYS; i++)
        s_wire[i] = pk_key_make(s_keys[i].bytes, s_keys[i].len);
}

static void
s_put(p2pkv_engine_t *engine, int k)
{
    static uint8_t data[TD_BLOCK_LEN];
    memset(data, k + 1, sizeof data);
    char err[P2PKV_ERRLEN] = "";
    ck_assert_msg(p2pkv_engine_put(engine, &s_keys[k], data, sizeof data, err) == 0, "put %d: %s",
                  k, err);
}

static void
s_reserve(p2pkv_engine_t *engine, int k)
{
    uint32_t block;
    char err[P2PKV_ERRLEN] = "";
    ck_assert_msg(p2pkv_engine_reserve(engine, &s_keys[k], 1, &block, err) == 0,
                  "reserve %d: %s", k, err);
}

//  A consumer in alpha (keyless), with the reasons capability or none.
static tc_t *
s_consumer(td_t *s, const char *id, bool reasons)
{
    tc_t *tc = tc_new_caps(&(tc_config_t) { s->endpoint, id, 8, TD_BLOCK_LEN, TD_FINGERPRINT,
                                            TD_HASH_SEED, 0 },
                           reasons ? "reasons" : NULL);
    ck_assert_ptr_nonnull(tc);
    pk_msg_t *ack = tc_connect(tc, BOUND);
    ck_assert_msg(ack && ack->type == PK_MSG_CONNECT_ACK, "%s: no connect_ack", id);
    ck_assert(pk_caps_has(ack->caps, "reasons"));
    pk_msg_destroy(&ack);
    return tc;
}

//  Sends a lookup of the keys (indexes into s_keys, -1 ends) in round 1
//  of request kv.
static void
s_ask(tc_t *tc, const char *kv, const int *which)
{
    pk_key_t keys[16];
    size_t n = 0;
    while (which[n] >= 0) {
        keys[n] = s_wire[which[n]];
        n++;
    }
    ck_assert_int_eq(tc_send(tc, tc_lookup(kv, 1, keys, n)), 0);
}

static pk_msg_t *
s_answer(tc_t *tc, const char *kv)
{
    pk_msg_t *m = tc_expect(tc, PK_MSG_LOOKUP_RESP, BOUND);
    ck_assert_ptr_nonnull(m);
    ck_assert_str_eq(m->kv_request_id, kv);
    return m;
}

//  The answer's hits as 0/1 and its reasons ("-" when it has none).
static void
s_expect(pk_msg_t *m, const char *hits, const char *reasons)
{
    char got[32] = "";
    for (size_t i = 0; i < m->keys.count && i < sizeof got - 1; i++)
        got[i] = m->hits[i] ? '1' : '0';
    ck_assert_str_eq(got, hits);
    ck_assert_str_eq(m->present & PK_BIT(PK_F_REASONS) ? m->reasons : "-", reasons);
    pk_msg_destroy(&m);
}

//  The server's count of misses for one reason (its metric, via stats).
static json_int_t
s_misses(td_t *s, const char *reason)
{
    json_t *st = td_stats_json(s);
    json_t *f = json_object_get(json_object_get(st, "metrics"),
                                "p2pkv_lookup_misses_by_reason_total");
    json_t *v = json_object_get(json_object_get(f, "reasons"), reason);
    json_int_t n = json_integer_value(v);
    json_decref(st);
    return n;
}

//  Waits (bounded) until the server's metric for reason reaches want
//  (the session publishes its counts at its next step).
static void
s_expect_misses(td_t *s, const char *reason, json_int_t want)
{
    double deadline = pk_clock_monotonic() + BOUND;
    json_int_t n;
    while ((n = s_misses(s, reason)) < want && pk_clock_monotonic() < deadline)
        zclock_sleep(20);
    ck_assert_msg(n == want, "misses{reason=%s}: %lld, want %lld", reason, (long long) n,
                  (long long) want);
}

START_TEST(test_each_reason)
{
    char dir[64], tenants[128];
    sh_tmpdir(dir, "reasons");
    snprintf(tenants, sizeof tenants, "%s/tenants", dir);
    //  a real CURVE public key that nobody here holds: it only brings
    //  namespace beta into being; every keyless consumer is in alpha
    static const char map[] = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID beta\n* alpha\n";
    sh_write(map, sizeof map - 1, "%s", tenants);
    td_t s;
    td_start(&s, (const char *[]) {
        "--pool-blocks", "8", "--pin-quota", "2", "--lookup-timeout", "2", "--tenants", tenants,
        "--silence-timeout", LONG, "--store-timeout", LONG, "--shutdown-timeout", LONG,
        "--drain-timeout", LONG, NULL });
    s_make_keys();
    p2pkv_engine_t *shared = td_api(&s);
    p2pkv_engine_t *beta = td_engine_open(&s, NULL, NULL);
    char err[P2PKV_ERRLEN] = "";
    ck_assert_msg(p2pkv_engine_set_namespace(beta, "beta", err) == 0, "%s", err);

    //  B3 in beta first (the oldest), then E1..E9 in shared: E8 evicts
    //  B3, E9 evicts E1
    s_put(beta, B3);
    for (int k = E1; k <= E9; k++)
        s_put(shared, k);
    ck_assert_uint_eq(td_stats(shared).evictions, 2);

    //  absent, evicted; beta's evicted key is absent to alpha
    tc_t *c1 = s_consumer(&s, "c-why", true);
    s_ask(c1, "gone", (const int[]) { X, E1, B3, E9, -1 });
    s_expect(s_answer(c1, "gone"), "0001", "aea");
    //  beta's held key and its key being written: absent to alpha too
    s_put(beta, B1);
    s_reserve(beta, B2);
    s_ask(c1, "beta", (const int[]) { B1, B2, -1 });
    s_expect(s_answer(c1, "beta"), "00", "aa");

    //  quota: the third hit of a lookup is past the quota of 2
    tc_t *c2 = s_consumer(&s, "c-quota", true);
    s_ask(c2, "many", (const int[]) { E9, E9 - 1, E9 - 2, -1 });
    s_expect(s_answer(c2, "many"), "110", "q");

    //  pending: P is reserved and never committed, so the lookup waits
    //  its deadline (2 s) for it.  writing: W was absent when the lookup
    //  first polled it (the pool counted both keys' lookups), and is
    //  being written when the answer is made
    tc_t *c3 = s_consumer(&s, "c-wait", true);
    s_reserve(shared, P);
    uint64_t before = td_stats(shared).lookups;
    s_ask(c3, "wait", (const int[]) { P, W, -1 });
    double deadline = pk_clock_monotonic() + BOUND;
    while (td_stats(shared).lookups < before + 2) {
        ck_assert_msg(pk_clock_monotonic() < deadline, "the lookup was never polled");
        zclock_sleep(5);
    }
    s_reserve(shared, W);
    s_expect(s_answer(c3, "wait"), "00", "pw");

    //  a consumer without the capability sees plain misses (the seed's
    //  answer), counted by reason all the same
    tc_t *old = s_consumer(&s, "c-old", false);
    s_ask(old, "old", (const int[]) { X, E1, -1 });
    s_expect(s_answer(old, "old"), "00", "-");

    //  the client library's per-key results, and p2pkv lookup
    p2pkv_config_t cfg = { .peer_id = "c-lib", .fingerprint = TD_FINGERPRINT,
                           .hash_seed = TD_HASH_SEED, .provider = "tcp",
                           .progress_thread = true };
    p2pkv_client_t *lib = p2pkv_client_new(&cfg, NULL, 4, TD_BLOCK_LEN,
                                           (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_msg(lib, "%s", err);
    int srv = p2pkv_client_connect(lib, s.endpoint, BOUND, err);
    ck_assert_msg(srv >= 0, "%s", err);
    p2pkv_key_result_t res[3];
    p2pkv_key_t ask[3] = { s_keys[X], s_keys[E1], s_keys[E9] };
    int got = p2pkv_client_get_results(lib, srv, "lib", ask, (const uint32_t[]) { 0, 1, 2 }, 3,
                                       false, BOUND, res, NULL, NULL, err);
    ck_assert_msg(got == 1, "%d: %s", got, err);
    ck_assert_int_eq(res[0].status, P2PKV_KEY_MISSING);
    ck_assert_int_eq(res[0].reason, P2PKV_MISS_ABSENT);
    ck_assert_int_eq(res[1].status, P2PKV_KEY_MISSING);
    ck_assert_int_eq(res[1].reason, P2PKV_MISS_EVICTED);
    ck_assert_int_eq(res[2].status, P2PKV_KEY_LANDED);
    ck_assert_str_eq(p2pkv_miss_reason_name(res[1].reason), "evicted");
    p2pkv_client_destroy(&lib);
    char hx[NKEYS][2 * 32 + 1];
    for (int k = 0; k < NKEYS; k++)
        pk_hex_encode(s_keys[k].bytes, s_keys[k].len, hx[k]);
    int status;
    char *out = sh_output(&status, "bin/p2pkv lookup --server %s %s %s %s", s.endpoint, hx[X],
                          hx[E1], hx[E9]);
    char want[512];
    snprintf(want, sizeof want, "%s miss absent\n%s miss evicted\n%s hit\n", hx[X], hx[E1],
             hx[E9]);
    ck_assert_str_eq(out, want);
    ck_assert_int_eq(status, 1);        //  some keys missing
    free(out);
    out = sh_output(&status, "bin/p2pkv lookup --json --server %s %s", s.endpoint, hx[E1]);
    snprintf(want, sizeof want, "[{\"key\":\"%s\",\"status\":\"miss\",\"reason\":\"evicted\"}]\n",
             hx[E1]);
    ck_assert_str_eq(out, want);
    free(out);

    //  draining: SIGTERM while c2 holds pins (the drain waits for them);
    //  once a reserve is refused as draining, every key misses as such
    ck_assert_int_eq(kill(s.pid, SIGTERM), 0);
    deadline = pk_clock_monotonic() + BOUND;
    while (true) {
        uint32_t block;
        int rc = p2pkv_engine_reserve(shared, &s_keys[E9], 1, &block, err);
        if (rc == -ESHUTDOWN)
            break;
        ck_assert_msg(rc == -EEXIST, "reserve of a key held: %d %s", rc, err);
        ck_assert_msg(pk_clock_monotonic() < deadline, "no drain within %g s", BOUND);
    }
    s_ask(c1, "drain", (const int[]) { E9, X, -1 });
    s_expect(s_answer(c1, "drain"), "00", "dd");

    //  the metrics count every miss by its reason, with or without the
    //  capability: absent X,B3 B1,B2 X(old) X(lib) X(cli) = 7; evicted
    //  E1 E1(old) E1(lib) E1(cli) E1(json) = 5
    s_expect_misses(&s, "absent", 7);
    s_expect_misses(&s, "evicted", 5);
    s_expect_misses(&s, "quota", 1);
    s_expect_misses(&s, "pending", 1);
    s_expect_misses(&s, "writing", 1);
    s_expect_misses(&s, "draining", 2);
    s_expect_misses(&s, "unknown", 0);

    tc_destroy(&c1);
    tc_destroy(&c2);
    tc_destroy(&c3);
    tc_destroy(&old);
    p2pkv_engine_close(&beta);
    td_kill(&s);
    sh_rmrf(dir);
    bk_keys_free(s_keys);
}
END_TEST

int
main(void)
{
    int rc = td_suite_start();
    if (rc)
        return rc;
    td_sweep();
    Suite *suite = suite_create("reasons");
    TCase *tc = td_case(suite, "reasons", 180);
    tcase_add_test(tc, test_each_reason);
    return td_run_and_sweep("reasons", suite);
}
