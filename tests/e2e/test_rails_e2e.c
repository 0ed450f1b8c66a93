/*  test_rails_e2e.c: several rails per node (transports/rails) against a
    real p2pkv-server: --fabric-addr 127.0.0.1,127.0.0.2 on both sides (both
    on lo), a get whose blocks go over both rails (each rail's bytes read
    from the server's stats, every byte of every block checked, the session
    listing rails), one rail on one side and two on the other (the consumer
    says so in its UP reason; the server's stats show the one pair), and
    bad addresses refused at start naming the option and the address.
*/
#include "p2pkv.h"
#include "base/clock.h"
#include "daemon.h"
#include "blocks.h"
#include "testutil.h"

#include <check.h>
#include <czmq.h>
#include <jansson.h>
#include <string.h>

#define BLOCK (64 * 1024)
#define NBLOCKS 256
#define TWO "127.0.0.1,127.0.0.2"

static const char *const s_two[] = { "--provider", "tcp", "--fabric-addr", TWO,
                                     "--pool-blocks", "512", "--block-len", "65536",
                                     "--pin-quota", "512", NULL };
static const char *const s_one[] = { "--provider", "tcp", "--fabric-addr", "127.0.0.1",
                                     "--pool-blocks", "512", "--block-len", "65536",
                                     "--pin-quota", "512", NULL };

static p2pkv_client_t *
s_client(const char *name, const char *node)
{
    p2pkv_config_t cfg = { .peer_id = name, .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = node };
    char err[P2PKV_ERRLEN] = "";
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, NBLOCKS, BLOCK,
                                         (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_msg(c != NULL, "client %s: %s", name, err);
    return c;
}

//  Every block got into the pool, every byte checked.
static void
s_get_all(p2pkv_client_t *c, int server, const char *kv)
{
    p2pkv_key_t *keys = bk_keys(1, 0, NBLOCKS);
    uint32_t dest[NBLOCKS];
    bool landed[NBLOCKS];
    for (uint32_t i = 0; i < NBLOCKS; i++)
        dest[i] = i;
    uint8_t *pool = p2pkv_client_pool(c);
    memset(pool, 0, (size_t) NBLOCKS * BLOCK);
    char err[P2PKV_ERRLEN] = "";
    int got = p2pkv_client_get(c, server, kv, keys, dest, NBLOCKS, true, 60, landed, NULL, NULL,
                               err);
    ck_assert_msg(got == NBLOCKS, "%s: %d %s", kv, got, err);
    size_t bad = 0;
    for (size_t i = 0; i < NBLOCKS; i++)
        bad += bk_block_diff(pool + i * BLOCK, 1, i, BLOCK);
    ck_assert_msg(bad == 0, "%s: %zu bytes wrong", kv, bad);
    bk_keys_free(keys);
}

//  The server's rails of consumer name (stats "session_rails"): a new
//  reference, or NULL when the session has none.
static json_t *
s_rails(td_t *d, const char *name)
{
    json_t *st = td_stats_json(d);
    json_t *r = json_object_get(json_object_get(st, "session_rails"), name);
    json_incref(r);
    json_decref(st);
    return r;
}

//  Waits (60 s) until the rails of name have carried want bytes in all.
static json_t *
s_rails_carried(td_t *d, const char *name, json_int_t want)
{
    double deadline = pk_clock_monotonic() + 60;
    for (;;) {
        json_t *r = s_rails(d, name);
        json_int_t sum = 0;
        size_t i;
        json_t *one;
        json_array_foreach(r, i, one)
            sum += json_integer_value(json_object_get(one, "bytes"));
        if (sum >= want || pk_clock_monotonic() >= deadline)
            return r;
        json_decref(r);
        zclock_sleep(20);
    }
}

START_TEST(test_get_striped_over_two_rails)
{
    td_t d;
    td_start(&d, s_two);
    bk_fill(&d, 1, NBLOCKS, BLOCK);
    p2pkv_client_t *c = s_client("rails-two", TWO);
    char err[P2PKV_ERRLEN] = "", reason[256] = "";
    int server = p2pkv_client_connect(c, d.endpoint, 10, err);
    ck_assert_msg(server >= 0, "%s", err);
    ck_assert_int_eq(p2pkv_client_server_state(c, server, reason), P2PKV_SERVER_UP);
    ck_assert_msg(strstr(reason, "one rail") == NULL, "%s", reason);
    s_get_all(c, server, "striped");
    //  both rails carried blocks, every block once: split by the rates
    //  the writer measures (loopback rails differ by noise alone; until
    //  measured they are equal, so each gets chunks at the start),
    //  paired in subnet order; each shows the rate it measured
    json_t *r = s_rails_carried(&d, "rails-two", (json_int_t) NBLOCKS * BLOCK);
    ck_assert_uint_eq(json_array_size(r), 2);
    json_int_t sum = 0, carried[2];
    for (size_t i = 0; i < 2; i++) {
        json_t *one = json_array_get(r, i);
        ck_assert_int_eq(json_integer_value(json_object_get(one, "peer_rail")), (json_int_t) i);
        json_int_t bytes = json_integer_value(json_object_get(one, "bytes"));
        ck_assert_int_gt(bytes, 0);
        sum += bytes;
        carried[i] = bytes;
        ck_assert_ptr_nonnull(json_object_get(one, "rate_bytes_per_second"));
        ck_assert_int_eq(json_integer_value(json_object_get(one, "failures")), 0);
        ck_assert_ptr_nonnull(json_object_get(one, "rejoins"));
        ck_assert_int_eq(json_integer_value(json_object_get(one, "rejoins")), 0);
    }
    ck_assert_int_eq(sum, (json_int_t) NBLOCKS * BLOCK);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(r, 1), "local")),
                     "127.0.0.2");
    json_decref(r);
    json_t *st = td_stats_json(&d);
    const char *caps = json_string_value(json_object_get(json_object_get(st, "capabilities"),
                                                         "rails-two"));
    ck_assert_msg(caps && strstr(caps, "rails"), "caps %s", caps ? caps : "(none)");
    //  and a failed rail may rejoin (protocol.md section 7)
    ck_assert_msg(strstr(caps, "rejoin"), "caps %s", caps);
    //  the metrics per rail, labelled by the local address
    json_t *bytes = json_object_get(json_object_get(json_object_get(st, "metrics"),
                                                    "p2pkv_rail_bytes_written_total"), "rails");
    ck_assert_int_eq(json_integer_value(json_object_get(bytes, "127.0.0.1")), carried[0]);
    ck_assert_int_eq(json_integer_value(json_object_get(bytes, "127.0.0.2")), carried[1]);
    json_t *writes = json_object_get(json_object_get(json_object_get(st, "metrics"),
                                                     "p2pkv_rail_writes_total"), "rails");
    ck_assert_int_ge(json_integer_value(json_object_get(writes, "127.0.0.2")), 1);
    json_decref(st);
    //  a second get, and one of a single block, land whole too
    s_get_all(c, server, "striped-again");
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

START_TEST(test_one_rail_against_two)
{
    //  a consumer of two against a server of one: one rail, said
    td_t d;
    td_start(&d, s_one);
    bk_fill(&d, 1, NBLOCKS, BLOCK);
    p2pkv_client_t *c = s_client("rails-more", TWO);
    char err[P2PKV_ERRLEN] = "", reason[256] = "";
    int server = p2pkv_client_connect(c, d.endpoint, 10, err);
    ck_assert_msg(server >= 0, "%s", err);
    ck_assert_int_eq(p2pkv_client_server_state(c, server, reason), P2PKV_SERVER_UP);
    ck_assert_msg(strstr(reason, "one rail of our 2"), "reason: %s", reason);
    s_get_all(c, server, "one-of-two");
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&d), 0);

    //  a consumer of one against a server of two: one pair, in its stats
    td_start(&d, s_two);
    bk_fill(&d, 1, NBLOCKS, BLOCK);
    c = s_client("rails-fewer", "127.0.0.2");
    server = p2pkv_client_connect(c, d.endpoint, 10, err);
    ck_assert_msg(server >= 0, "%s", err);
    s_get_all(c, server, "two-of-one");
    json_t *r = s_rails_carried(&d, "rails-fewer", (json_int_t) NBLOCKS * BLOCK);
    ck_assert_uint_eq(json_array_size(r), 2);
    int paired = 0;
    size_t i;
    json_t *one;
    json_array_foreach(r, i, one)
        if (json_integer_value(json_object_get(one, "peer_rail")) == 0) {
            paired++;
            ck_assert_int_eq(json_integer_value(json_object_get(one, "bytes")),
                             (json_int_t) NBLOCKS * BLOCK);
        }
        else
            ck_assert_int_eq(json_integer_value(json_object_get(one, "peer_rail")), -1);
    ck_assert_int_eq(paired, 1);
    json_decref(r);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  Issue 38, one large block over several rails (capability slices):
//  a get of one 8 MiB block from a server of two rails lands whole,
//  every byte checked, with both rails carrying slices of it (the
//  server's stats: slices and bytes per rail), the session listing
//  slices.  Then two blocks in one get, each whole.
#define SL_BLOCK (8u << 20)

static void
s_get_sliced(p2pkv_client_t *c, int server, const char *kv, size_t n)
{
    p2pkv_key_t *keys = bk_keys(2, 0, n);
    uint32_t dest[2] = { 0, 1 };
    bool landed[2];
    uint8_t *pool = p2pkv_client_pool(c);
    memset(pool, 0, n * SL_BLOCK);
    char err[P2PKV_ERRLEN] = "";
    int got = p2pkv_client_get(c, server, kv, keys, dest, n, true, 60, landed, NULL, NULL, err);
    ck_assert_msg(got == (int) n, "%s: %d %s", kv, got, err);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += bk_block_diff(pool + i * SL_BLOCK, 2, i, SL_BLOCK);
    ck_assert_msg(bad == 0, "%s: %zu bytes wrong", kv, bad);
    bk_keys_free(keys);
}

START_TEST(test_one_block_sliced_over_two_rails)
{
    static const char *const big[] = { "--provider", "tcp", "--fabric-addr", TWO,
                                       "--pool-blocks", "4", "--block-len", "8388608",
                                       "--pin-quota", "4", NULL };
    td_t d;
    td_start(&d, big);
    bk_fill(&d, 2, 2, SL_BLOCK);
    p2pkv_config_t cfg = { .peer_id = "rails-sliced", .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = TWO };
    char err[P2PKV_ERRLEN] = "";
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 2, SL_BLOCK, (p2pkv_callbacks_t) { 0 },
                                         err);
    ck_assert_msg(c != NULL, "%s", err);
    int server = p2pkv_client_connect(c, d.endpoint, 10, err);
    ck_assert_msg(server >= 0, "%s", err);
    s_get_sliced(c, server, "sliced", 1);
    json_t *r = s_rails_carried(&d, "rails-sliced", (json_int_t) SL_BLOCK);
    ck_assert_uint_eq(json_array_size(r), 2);
    json_int_t slices = 0, bytes = 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *one = json_array_get(r, i);
        json_int_t n = json_integer_value(json_object_get(one, "slices"));
        ck_assert_msg(n > 0, "rail %zu carried no slice", i);
        ck_assert_int_gt(json_integer_value(json_object_get(one, "bytes")), 0);
        slices += n;
        bytes += json_integer_value(json_object_get(one, "bytes"));
    }
    ck_assert_int_eq(slices, 8);
    ck_assert_int_eq(bytes, (json_int_t) SL_BLOCK);
    json_decref(r);
    json_t *st = td_stats_json(&d);
    const char *caps = json_string_value(json_object_get(json_object_get(st, "capabilities"),
                                                         "rails-sliced"));
    ck_assert_msg(caps && strstr(caps, "slices"), "caps %s", caps ? caps : "(none)");
    json_decref(st);
    s_get_sliced(c, server, "sliced-two", 2);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

START_TEST(test_bad_addresses_refused)
{
    char said[4096];
    const char *const bad[] = { "--provider", "tcp", "--fabric-addr", "127.0.0.1,203.0.113.9",
                                "--pool-blocks", "16", NULL };
    ck_assert_int_ne(td_run(bad, said, sizeof said), 0);
    ck_assert_msg(strstr(said, "--fabric-addr") && strstr(said, "203.0.113.9: not an address "
                                                          "of this host"), "said: %s", said);
    const char *const twice[] = { "--provider", "auto", "--fabric-addr", "127.0.0.1,127.0.0.1",
                                  "--pool-blocks", "16", NULL };
    ck_assert_int_ne(td_run(twice, said, sizeof said), 0);
    ck_assert_msg(strstr(said, "--fabric-addr") && strstr(said, "listed twice"), "said: %s",
                  said);
    const char *const empty[] = { "--fabric-addr", "127.0.0.1,,127.0.0.2", NULL };
    ck_assert_int_ne(td_run(empty, said, sizeof said), 0);
    ck_assert_msg(strstr(said, "fabric-addr"), "said: %s", said);
    //  the client's node (the CLI's --fabric-addr)
    p2pkv_config_t cfg = { .peer_id = "bad", .provider = "tcp", .node = "127.0.0.1,203.0.113.9" };
    char err[P2PKV_ERRLEN] = "";
    ck_assert_ptr_null(p2pkv_client_new(&cfg, NULL, 4, BLOCK, (p2pkv_callbacks_t) { 0 }, err));
    ck_assert_msg(strstr(err, "--fabric-addr") && strstr(err, "203.0.113.9: not an address"),
                  "err: %s", err);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("rails_e2e");
    TCase *tc = td_case(s, "rails", 240);
    tcase_add_test(tc, test_get_striped_over_two_rails);
    tcase_add_test(tc, test_one_rail_against_two);
    tcase_add_test(tc, test_one_block_sliced_over_two_rails);
    tcase_add_test(tc, test_bad_addresses_refused);
    return td_run_and_sweep("rails_e2e", s);
}
