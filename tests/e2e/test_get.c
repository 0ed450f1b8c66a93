/*  test_get.c: a fetch of known keys in one round trip (issue 37, point
    1; protocol.md section 3, capability `get`), from outside a real
    p2pkv-server over tcp on 127.0.0.1.

    p2pkv_client_get_results against a server that offers `get` sends one
    get per batch (the server counts one fetch for it, where the two steps
    count the fetch and the terminal fetch); against one run with --gets
    off it takes the two steps, with the same results.  Either way a miss
    carries its reason, a block corrupted at rest in the server's pool is
    CORRUPT, and the others land.  A get whose lookup waits for a key the
    engine reserved and never committed is cancelled (finish of its
    request, from another thread) or reaches its deadline: it ends at
    once with the server's abort_ack, nothing of it is written into the
    consumer's blocks, and the server lets go of its pins.
*/
#include "p2pkv.h"
#include "p2pkv_engine.h"
#include "base/clock.h"
#include "daemon.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BOUND 60.0                  //  seconds any one wait may take
#define BLOCK TD_BLOCK_LEN
#define NPUB 4                      //  published keys K0..K3
enum { X = NPUB, P, NKEYS };        //  X never published, P reserved, never committed

static uint8_t s_data[NKEYS][BLOCK];
static uint8_t s_key[NKEYS][32];
static p2pkv_key_t s_keys[NKEYS];

static void
s_make_keys(void)
{
    for (int i = 0; i < NKEYS; i++) {
        for (int k = 0; k < BLOCK; k++)
            s_data[i][k] = (uint8_t) (i * 29 + k * 7 + 1);
        crypto_hash_sha256(s_key[i], s_data[i], BLOCK);
        s_keys[i] = (p2pkv_key_t) { s_key[i], 32 };
    }
}

//  A server with K0..K3 published and P reserved (flags: td_start's extra).
static void
s_server(td_t *s, const char *const *flags)
{
    td_start(s, flags);
    td_put(td_api(s), s_keys, &s_data[0][0], NPUB, BLOCK);
    uint32_t block;
    td_reserve(s, &s_keys[P], 1, &block);
}

static const char *s_provider = "tcp";    //  the consumers' (s_client)

static p2pkv_client_t *
s_client(td_t *s, int *server_p)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = "c-get", .fingerprint = TD_FINGERPRINT,
                           .hash_seed = TD_HASH_SEED, .provider = s_provider,
                           .node = "127.0.0.1",
                           .load_timeout = 30, .abort_ack_timeout = 30,
                           .keepalive_interval = 0.3,
                           .progress_thread = true };
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 64, BLOCK, (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_msg(c != NULL, "p2pkv_client_new: %s", err);
    *server_p = p2pkv_client_connect(c, s->endpoint, BOUND, err);
    ck_assert_msg(*server_p >= 0, "connect: %s", err);
    return c;
}

static json_int_t
s_fetches(td_t *s)
{
    return td_stat(s, "metrics.p2pkv_fetches_total.total");
}

static bool
s_unpinned(td_t *s, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    while (td_stats(td_api(s)).pinned != 0) {
        if (pk_clock_monotonic() >= deadline)
            return false;
        zclock_sleep(10);
    }
    return true;
}

static bool s_lends;        //  the session is expected to lend (mmap, no scheduler)

//  K0, X, K1..K3 into blocks 10.., checked: the hits land verified, X is
//  missing because it is absent; then K2 corrupted at rest is CORRUPT.
//  The server must count want fetch messages for the first get (its
//  counters are published after the answers went out, and the two steps'
//  terminal fetch follows the get's return: waited for, up to BOUND).
static void
s_get_and_check(td_t *s, json_int_t want)
{
    int server;
    p2pkv_client_t *c = s_client(s, &server);
    p2pkv_key_t keys[5] = { s_keys[0], s_keys[X], s_keys[1], s_keys[2], s_keys[3] };
    int data[5] = { 0, X, 1, 2, 3 };
    uint32_t dest[5] = { 10, 11, 12, 13, 14 };
    p2pkv_key_result_t res[5];
    char err[P2PKV_ERRLEN] = "";
    uint8_t *pool = p2pkv_client_pool(c);
    json_int_t before = s_fetches(s);
    int got = p2pkv_client_get_results(c, server, "g1", keys, dest, 5, true, BOUND, res, NULL,
                                       NULL, err);
    ck_assert_msg(got == 4, "get: %d (%s)", got, err);
    double deadline = pk_clock_monotonic() + BOUND;
    while (s_fetches(s) - before < want && pk_clock_monotonic() < deadline)
        zclock_sleep(10);
    json_int_t fetches = s_fetches(s) - before;
    ck_assert_int_eq(fetches, want);
    for (int i = 0; i < 5; i++) {
        if (data[i] == X) {
            ck_assert_int_eq(res[i].status, P2PKV_KEY_MISSING);
            ck_assert_msg(res[i].reason == P2PKV_MISS_ABSENT, "reason %s",
                          p2pkv_miss_reason_name(res[i].reason));
            ck_assert_int_eq(pool[(size_t) dest[i] * BLOCK], 0);
            continue;
        }
        ck_assert_int_eq(res[i].status, P2PKV_KEY_LANDED);
        ck_assert(res[i].verified);
        ck_assert_int_eq(res[i].holder, server);
        ck_assert_msg(memcmp(pool + (size_t) dest[i] * BLOCK, s_data[data[i]], BLOCK) == 0,
                      "block of key %d", data[i]);
    }
    //  a block corrupted at rest: CORRUPT after its check, the others land
    size_t maplen;
    uint8_t *map = td_pool_map(s, &maplen);
    uint8_t *at = NULL;
    for (size_t off = 0; off + BLOCK <= maplen && !at; off += BLOCK)
        if (memcmp(map + off, s_data[2], BLOCK) == 0)
            at = map + off;
    ck_assert_ptr_nonnull(at);
    at[7] ^= 0x10;
    memset(pool, 0, 64 * BLOCK);
    got = p2pkv_client_get_results(c, server, "g2", keys, dest, 5, true, BOUND, res, NULL, NULL,
                                   err);
    ck_assert_msg(got == 3, "get of a corrupt block: %d (%s)", got, err);
    ck_assert_int_eq(res[3].status, P2PKV_KEY_CORRUPT);
    ck_assert(res[3].verified);
    ck_assert_int_eq(res[0].status, P2PKV_KEY_LANDED);
    ck_assert_int_eq(res[4].status, P2PKV_KEY_LANDED);
    ck_assert_int_eq(res[1].status, P2PKV_KEY_MISSING);
    at[7] ^= 0x10;
    munmap(map, maplen);
    ck_assert_msg(s_unpinned(s, BOUND), "the server still pins blocks");
    ck_assert_int_eq(p2pkv_client_server_state(c, server, NULL), P2PKV_SERVER_UP);
    //  p2pkv stats says whether the session uses get
    json_t *stats = td_stats_json(s);
    const char *caps = json_string_value(json_object_get(json_object_get(stats, "capabilities"),
                                                         "c-get"));
    ck_assert_ptr_nonnull(caps);
    ck_assert_msg((strstr(caps, "get") != NULL) == (fetches == 2), "capabilities: %s", caps);
    ck_assert_msg((strstr(caps, "lend") != NULL) == s_lends, "capabilities: %s", caps);
    json_decref(stats);
    p2pkv_client_destroy(&c);
}

START_TEST(test_get_in_one_message)
{
    td_t s;
    s_server(&s, NULL);
    //  two batches (the second asks the missing X again, as the two steps
    //  do), each one get: the server counts one fetch for each
    s_get_and_check(&s, 2);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

START_TEST(test_get_without_the_capability)
{
    td_t s;
    s_server(&s, (const char *const[]) { "--gets", "off", NULL });
    //  the two steps: the fetch of the hits and the terminal fetch, then
    //  the second batch's terminal fetch (X missing: nothing to fetch)
    s_get_and_check(&s, 3);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  Over mmap the get's hits are lent (capability lend): the server's
//  answer names their blocks in its pool and the consumer copies them
//  from its mapping, checks them there (the corrupt block is CORRUPT),
//  and reports, which unpins them; the same results as writes give.
static const char *const s_mmap_server[] = { "--provider", "mmap,tcp", "--fabric-addr",
                                             "127.0.0.1", NULL };

START_TEST(test_get_lent_over_mmap)
{
    td_t s;
    s_server(&s, s_mmap_server);
    s_provider = "mmap";
    s_lends = true;
    s_get_and_check(&s, 2);
    s_lends = false;
    s_provider = "tcp";
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  A server whose sessions cannot lend (its write scheduler sits between
//  the role and the channel) leaves lend out of its connect_ack: the
//  consumer then gets the blocks written, as before lend.
START_TEST(test_get_over_mmap_without_lend)
{
    td_t s;
    s_server(&s, (const char *const[]) { "--provider", "mmap,tcp", "--fabric-addr", "127.0.0.1",
                                         "--fair-inflight", "67108864", NULL });
    s_provider = "mmap";
    s_get_and_check(&s, 2);
    s_provider = "tcp";
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  Back to back one-block gets of one key over mmap, each answered at
//  once: the consumer's report of the last copy is read before the next
//  get looks the key up, so a pin quota of one block never turns the key
//  into a quota miss.
START_TEST(test_get_lent_back_to_back)
{
    td_t s;
    s_server(&s, (const char *const[]) { "--provider", "mmap,tcp", "--fabric-addr", "127.0.0.1",
                                         "--pin-quota", "1", NULL });
    s_provider = "mmap";
    int server;
    p2pkv_client_t *c = s_client(&s, &server);
    for (int i = 0; i < 200; i++) {
        char kv[32], err[P2PKV_ERRLEN] = "";
        snprintf(kv, sizeof kv, "b%d", i);
        uint32_t dest = (uint32_t) (i % 8);
        p2pkv_key_result_t res;
        int got = p2pkv_client_get_results(c, server, kv, &s_keys[0], &dest, 1, true, BOUND,
                                           &res, NULL, NULL, err);
        ck_assert_msg(got == 1, "get %d: %d (%s), reason %s", i, got, err,
                      p2pkv_miss_reason_name(res.reason));
        ck_assert(res.verified);
    }
    ck_assert_msg(s_unpinned(&s, BOUND), "the server still pins blocks");
    p2pkv_client_destroy(&c);
    s_provider = "tcp";
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  A key still being written past the server's lookup deadline is a miss
//  with reason pending; the get's other key lands.
START_TEST(test_get_pending_miss)
{
    td_t s;
    s_server(&s, (const char *const[]) { "--lookup-timeout", "0.5", NULL });
    int server;
    p2pkv_client_t *c = s_client(&s, &server);
    p2pkv_key_t keys[2] = { s_keys[0], s_keys[P] };
    uint32_t dest[2] = { 5, 6 };
    p2pkv_key_result_t res[2];
    char err[P2PKV_ERRLEN] = "";
    int got = p2pkv_client_get_results(c, server, "gp", keys, dest, 2, true, BOUND, res, NULL,
                                       NULL, err);
    ck_assert_msg(got == 1, "get: %d (%s)", got, err);
    ck_assert_int_eq(res[0].status, P2PKV_KEY_LANDED);
    ck_assert_int_eq(res[1].status, P2PKV_KEY_MISSING);
    ck_assert_msg(res[1].reason == P2PKV_MISS_PENDING, "reason %s",
                  p2pkv_miss_reason_name(res[1].reason));
    ck_assert(memcmp(p2pkv_client_pool(c) + 5 * BLOCK, s_data[0], BLOCK) == 0);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  A get waiting for P (the server's lookup deadline far away) ends early:
//  cancelled by a finish of its request from another thread, or at its
//  own deadline.  Either way the server acknowledges at once (well before
//  the 30 s abort-ack timeout, which would cut it off), writes nothing of
//  K0 although it is a hit, and releases its pin.
typedef struct {
    p2pkv_client_t *c;
    int server;
    double timeout;
    int rc;
    char err[P2PKV_ERRLEN];
} s_getter_t;

static void *
s_getter(void *arg)
{
    s_getter_t *g = arg;
    p2pkv_key_t keys[2] = { s_keys[0], s_keys[P] };
    uint32_t dest[2] = { 20, 21 };
    p2pkv_key_result_t res[2];
    int rc = p2pkv_client_get_results(g->c, g->server, "held", keys, dest, 2, true, g->timeout,
                                      res, NULL, NULL, g->err);
    ck_assert(res[0].status == P2PKV_KEY_FAILED && res[1].status == P2PKV_KEY_FAILED);
    __atomic_store_n(&g->rc, rc, __ATOMIC_RELEASE);
    return NULL;
}

static void
s_cut_short(bool cancel)
{
    td_t s;
    s_server(&s, (const char *const[]) { "--lookup-timeout", "120", NULL });
    int server;
    p2pkv_client_t *c = s_client(&s, &server);
    s_getter_t g = { c, server, cancel ? BOUND : 1.0, 1, "" };
    double t0 = pk_clock_monotonic();
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, s_getter, &g), 0);
    if (cancel) {
        //  the get parks on P with K0 pinned: then finish its request
        double deadline = t0 + BOUND;
        while (td_stats(td_api(&s)).pinned == 0 && pk_clock_monotonic() < deadline)
            zclock_sleep(5);
        ck_assert_msg(td_stats(td_api(&s)).pinned > 0, "the get never pinned K0");
        while (__atomic_load_n(&g.rc, __ATOMIC_ACQUIRE) == 1 && pk_clock_monotonic() < deadline) {
            ck_assert_int_eq(p2pkv_client_finish(c, server, "held"), 0);
            zclock_sleep(5);
        }
    }
    pthread_join(thread, NULL);
    double took = pk_clock_monotonic() - t0;
    ck_assert_msg(g.rc == (cancel ? -ECANCELED : -ETIMEDOUT), "the get returned %d (%s)", g.rc,
                  g.err);
    ck_assert_msg(took < 20, "ended after %.1f s: the abort was not acknowledged", took);
    ck_assert_int_eq(p2pkv_client_server_state(c, server, NULL), P2PKV_SERVER_UP);
    ck_assert_msg(s_unpinned(&s, BOUND), "the server still pins K0");
    //  and the session serves on.  P committed now would resolve the ended
    //  get's lookup, had the server kept it, at the next serve (this get's):
    //  its write of K0 would come before this get's answer
    td_commit(&s, &s_keys[P], 1);
    p2pkv_key_result_t res[1];
    uint32_t dest[1] = { 30 };
    char err[P2PKV_ERRLEN] = "";
    ck_assert_int_eq(p2pkv_client_get_results(c, server, "after", s_keys, dest, 1, true, BOUND,
                                              res, NULL, NULL, err), 1);
    //  nothing of the ended get landed, though K0 was a hit
    uint8_t zero[BLOCK] = { 0 };
    ck_assert_msg(memcmp(p2pkv_client_pool(c) + 20 * BLOCK, zero, BLOCK) == 0,
                  "the ended get's block was written");
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&s), 0);
}

START_TEST(test_get_cancelled)
{
    s_cut_short(true);
}
END_TEST

START_TEST(test_get_deadline)
{
    s_cut_short(false);
}
END_TEST

int
main(void)
{
    int rc = td_suite_start();
    if (rc)
        return rc;
    td_sweep();
    s_make_keys();
    Suite *suite = suite_create("get");
    TCase *tc = td_case(suite, "get", 240);
    tcase_add_test(tc, test_get_in_one_message);
    tcase_add_test(tc, test_get_without_the_capability);
    tcase_add_test(tc, test_get_pending_miss);
    tcase_add_test(tc, test_get_cancelled);
    tcase_add_test(tc, test_get_deadline);
    tcase_add_test(tc, test_get_lent_over_mmap);
    tcase_add_test(tc, test_get_over_mmap_without_lend);
    tcase_add_test(tc, test_get_lent_back_to_back);
    return td_run_and_sweep("get", suite);
}
