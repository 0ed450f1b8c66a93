/*  test_get_async.c: p2pkv_client_get_async against a real p2pkv-server
    that offers the capability get (one message) and one run with --gets
    off (the client takes the two steps itself, lib/client/get_steps.c),
    over tcp on 127.0.0.1, the client driven by the test's own loop
    (p2pkv_client_poll, no progress thread), its ends to on_fetch.

    Both ways give the same results for a mix of hits and misses and a
    block corrupted at rest; a get cancelled (by its id, by a finish of
    its request, by its deadline) while the server still looks it up ends
    ABORTED at once with nothing written and nothing left pinned; one
    cancelled after its lookup answered, while its fetch runs, ends
    ABORTED the same way; a server killed while the get waits ends it
    FAILED, not hung, and one the client disconnects FAILED within the
    disconnect; and a caller's own lookup of the same request, made
    beside the get, gets its own answer, once, and the get its own.
*/
#include "p2pkv.h"
#include "p2pkv_engine.h"
#include "base/clock.h"
#include "blocks.h"
#include "callbacks.h"
#include "daemon.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BOUND 60.0                  //  seconds any one wait may take
#define BLOCK TD_BLOCK_LEN
#define NPUB 4                      //  published keys K0..K3
enum { X = NPUB, P, NKEYS };        //  X never published, P reserved, never committed

//  Block i is the suites' hashed block i (blocks.h), keyed by its SHA-256;
//  made in a test (bk_hashed_key asserts), by s_server
static p2pkv_key_t s_keys[NKEYS];

static void
s_make_keys(void)
{
    for (unsigned i = 0; i < NKEYS; i++) {
        pk_key_t k = bk_hashed_key(i);
        s_keys[i] = (p2pkv_key_t) { k.bytes, k.len };
    }
}

//  The two ways: a server that offers get, and one run with --gets off.
static const char *const s_gets_off[] = { "--gets", "off", NULL };

//  A server with K0..K3 published and P reserved; gets off when off, more
//  flags in extra (may be NULL), at most 8.
static void
s_server(td_t *s, bool off, const char *const *extra)
{
    const char *flags[16];
    size_t n = 0;
    for (size_t i = 0; off && s_gets_off[i]; i++)
        flags[n++] = s_gets_off[i];
    for (size_t i = 0; extra && extra[i]; i++)
        flags[n++] = extra[i];
    flags[n] = NULL;
    s_make_keys();
    td_start(s, flags);
    td_put(td_api(s), s_keys, bk_hashed(0), NPUB, BLOCK);
    uint32_t block;
    td_reserve(s, &s_keys[P], 1, &block);
}

//  What the callbacks saw: the ends, and the caller's own lookups' answers
typedef struct {
    cb_ends_t ends;
    size_t lookups;
    char kv[64];
    uint64_t round;
    size_t nkeys;
    p2pkv_key_t keys[8];
    uint8_t key_bytes[8][32];
    bool hits[8];
} s_seen_t;

static void
s_on_fetch(void *arg, int server, uint64_t fetch_id, p2pkv_status_t status, const char *reason)
{
    cb_ends_record(&((s_seen_t *) arg)->ends, server, fetch_id, status, reason);
}

static void
s_on_lookup(void *arg, int server, const char *kv, uint64_t round, const p2pkv_key_t *keys,
            const bool *hits, size_t n)
{
    (void) server;
    s_seen_t *e = arg;
    e->lookups++;
    snprintf(e->kv, sizeof e->kv, "%s", kv);
    e->round = round;
    e->nkeys = n;
    for (size_t i = 0; i < n && i < 8; i++) {
        ck_assert_uint_eq(keys[i].len, 32);
        memcpy(e->key_bytes[i], keys[i].bytes, 32);
        e->keys[i] = (p2pkv_key_t) { e->key_bytes[i], 32 };
        e->hits[i] = hits ? hits[i] : false;
    }
}

static const char *s_provider = "tcp";

static p2pkv_client_t *
s_client(td_t *s, s_seen_t *seen, int *server_p)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = "c-aget", .fingerprint = TD_FINGERPRINT,
                           .hash_seed = TD_HASH_SEED, .provider = s_provider,
                           .node = "127.0.0.1", .load_timeout = 30, .abort_ack_timeout = 30,
                           .keepalive_interval = 0.3, .silence_timeout = 2 };
    p2pkv_callbacks_t cb = { .arg = seen, .on_fetch = s_on_fetch, .on_lookup = s_on_lookup };
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 64, BLOCK, cb, err);
    ck_assert_msg(c != NULL, "p2pkv_client_new: %s", err);
    *server_p = p2pkv_client_connect(c, s->endpoint, BOUND, err);
    ck_assert_msg(*server_p >= 0, "connect: %s", err);
    return c;
}

//  The end of id, polled for up to BOUND: its index in seen's ends.
static size_t
s_end_of(p2pkv_client_t *c, s_seen_t *e, uint64_t id)
{
    return cb_end_of(c, &e->ends, id, BOUND);
}

static p2pkv_status_t
s_status_of(p2pkv_client_t *c, s_seen_t *e, uint64_t id)
{
    return e->ends.status[s_end_of(c, e, id)];
}

static json_int_t
s_metric(td_t *s, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "metrics.%s.total", name);
    return td_stat(s, path);
}

//  Polls c until the server's metric grew by want over before (its counts
//  are published after its answers went out).
static void
s_until_metric(p2pkv_client_t *c, td_t *s, const char *name, json_int_t before,
               json_int_t want)
{
    double deadline = pk_clock_monotonic() + BOUND;
    while (s_metric(s, name) - before < want && pk_clock_monotonic() < deadline)
        p2pkv_client_poll(c, 0.01);
    ck_assert_int_eq(s_metric(s, name) - before, want);
}

static bool
s_unpinned(p2pkv_client_t *c, td_t *s)
{
    double deadline = pk_clock_monotonic() + BOUND;
    while (td_stats(td_api(s)).pinned != 0) {
        if (pk_clock_monotonic() >= deadline)
            return false;
        p2pkv_client_poll(c, 0.01);
    }
    return true;
}

//  ---------------------------------------------------------------------------
//  The same results both ways

enum { N = 5 };
static const int s_mix[N] = { 0, X, 1, 2, 3 };

//  K0, X, K1..K3 into blocks 10..14, then again with K2 corrupted at rest
//  in the server's pool: the results of both, and the blocks of the first.
static void
s_mix_get(td_t *s, bool off, p2pkv_key_result_t res[2][N], int *server_p)
{
    s_seen_t seen = { 0 };
    int server;
    p2pkv_client_t *c = s_client(s, &seen, &server);
    *server_p = server;
    p2pkv_key_t keys[N];
    uint32_t dest[N];
    for (int i = 0; i < N; i++) {
        keys[i] = s_keys[s_mix[i]];
        dest[i] = (uint32_t) (10 + i);
    }
    json_int_t gets0 = s_metric(s, "p2pkv_gets_total");
    json_int_t lookups0 = s_metric(s, "p2pkv_lookups_total");
    json_int_t fetches0 = s_metric(s, "p2pkv_fetches_total");
    uint64_t id;
    ck_assert_int_eq(p2pkv_client_get_async(c, server, "mix", keys, dest, N, 0, res[0], &id), 0);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c), 1);
    ck_assert_int_eq(p2pkv_client_fetch_status(c, id, NULL), -EINPROGRESS);
    size_t at = s_end_of(c, &seen, id);
    ck_assert_msg(seen.ends.status[at] == P2PKV_LANDED, "ended %d: %s", seen.ends.status[at],
                  seen.ends.reason[at]);
    ck_assert_uint_eq(seen.ends.n, 1);
    ck_assert_uint_eq(seen.lookups, 0);     //  the get's lookup is not the caller's
    ck_assert_uint_eq(p2pkv_client_open_fetches(c), 0);
    const uint8_t *pool = p2pkv_client_pool(c);
    for (int i = 0; i < N; i++)
        if (s_mix[i] != X)
            ck_assert_msg(memcmp(pool + (size_t) dest[i] * BLOCK, bk_hashed(s_mix[i]), BLOCK) == 0,
                          "block of key %d", s_mix[i]);
        else
            ck_assert_int_eq(pool[(size_t) dest[i] * BLOCK], 0);
    //  one message, or the two steps and the get's own terminal fetch
    s_until_metric(c, s, "p2pkv_fetches_total", fetches0, off ? 2 : 1);
    ck_assert_int_eq(s_metric(s, "p2pkv_gets_total") - gets0, off ? 0 : 1);
    ck_assert_int_eq(s_metric(s, "p2pkv_lookups_total") - lookups0, 1);
    //  K2 corrupted at rest
    size_t maplen;
    uint8_t *map = td_pool_map(s, &maplen);
    uint8_t *bad = NULL;
    for (size_t o = 0; o + BLOCK <= maplen && !bad; o += BLOCK)
        if (memcmp(map + o, bk_hashed(2), BLOCK) == 0)
            bad = map + o;
    ck_assert_ptr_nonnull(bad);
    bad[9] ^= 0x20;
    memset(p2pkv_client_pool(c), 0, 64 * BLOCK);
    ck_assert_int_eq(p2pkv_client_get_async(c, server, "mix", keys, dest, N, 0, res[1], &id), 0);
    at = s_end_of(c, &seen, id);
    ck_assert_msg(seen.ends.status[at] == P2PKV_LANDED, "ended %d: %s", seen.ends.status[at],
                  seen.ends.reason[at]);
    bad[9] ^= 0x20;
    munmap(map, maplen);
    ck_assert_int_eq(p2pkv_client_finish(c, server, "mix"), 0);
    ck_assert_msg(s_unpinned(c, s), "the server still pins blocks");
    ck_assert_int_eq(p2pkv_client_server_state(c, server, NULL), P2PKV_SERVER_UP);
    p2pkv_client_destroy(&c);
}

START_TEST(test_same_results_both_ways)
{
    p2pkv_key_result_t res[2][2][N];
    int server[2];
    for (int off = 0; off < 2; off++) {
        td_t s;
        s_server(&s, off, NULL);
        s_mix_get(&s, off, res[off], &server[off]);
        ck_assert_int_eq(td_stop(&s), 0);
    }
    for (int off = 0; off < 2; off++)
        for (int g = 0; g < 2; g++)
            for (int i = 0; i < N; i++) {
                const p2pkv_key_result_t *r = &res[off][g][i];
                if (s_mix[i] == X) {
                    ck_assert_int_eq(r->status, P2PKV_KEY_MISSING);
                    ck_assert_msg(r->reason == P2PKV_MISS_ABSENT, "gets %s: reason %s",
                                  off ? "off" : "on", p2pkv_miss_reason_name(r->reason));
                    ck_assert_int_eq(r->holder, -1);
                    continue;
                }
                int want = g == 1 && s_mix[i] == 2 ? P2PKV_KEY_CORRUPT : P2PKV_KEY_LANDED;
                ck_assert_msg(r->status == want, "gets %s, get %d, key %d: status %d, want %d",
                              off ? "off" : "on", g, s_mix[i], r->status, want);
                ck_assert(r->verified);
                ck_assert_uint_ne(r->checksum, 0);
                ck_assert_int_eq(r->holder, server[off]);
            }
    //  field by field the same, the holder aside (each its own server's)
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < N; i++) {
            p2pkv_key_result_t a = res[0][g][i], b = res[1][g][i];
            a.holder = b.holder = 0;
            ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "get %d key %d differs", g, i);
        }
}
END_TEST

//  ---------------------------------------------------------------------------
//  A caller's lookup of the same request beside the get

//  The caller looks up K0 and K1 under request "kv" and, before its answer,
//  gets K0 and X under the same request: the caller's on_lookup sees its
//  own answer (K0, K1, both hits) and only it, once; the get lands K0 and
//  says X is absent; the caller's fetch of its own hits under its round
//  then lands, and its finish lets go of everything.
static void
s_beside(bool off)
{
    td_t s;
    s_server(&s, off, NULL);
    s_seen_t seen = { 0 };
    int server;
    p2pkv_client_t *c = s_client(&s, &seen, &server);
    ck_assert_int_eq(p2pkv_client_lookup(c, server, "kv", (p2pkv_key_t[]) { s_keys[0],
                                                                             s_keys[1] }, 2), 0);
    p2pkv_key_result_t res[2];
    uint64_t id;
    ck_assert_int_eq(p2pkv_client_get_async(c, server, "kv", (p2pkv_key_t[]) { s_keys[0],
                                                                                s_keys[X] },
                                            (uint32_t[]) { 20, 21 }, 2, 0, res, &id), 0);
    size_t at = s_end_of(c, &seen, id);
    ck_assert_msg(seen.ends.status[at] == P2PKV_LANDED, "ended %d: %s", seen.ends.status[at],
                  seen.ends.reason[at]);
    ck_assert_int_eq(res[0].status, P2PKV_KEY_LANDED);
    ck_assert(res[0].verified);
    ck_assert_int_eq(res[1].status, P2PKV_KEY_MISSING);
    ck_assert_int_eq(res[1].reason, P2PKV_MISS_ABSENT);
    const uint8_t *pool = p2pkv_client_pool(c);
    ck_assert(memcmp(pool + 20 * BLOCK, bk_hashed(0), BLOCK) == 0);
    double deadline = pk_clock_monotonic() + BOUND;
    while (seen.lookups == 0 && pk_clock_monotonic() < deadline)
        p2pkv_client_poll(c, 0.05);
    ck_assert_uint_eq(seen.lookups, 1);
    ck_assert_str_eq(seen.kv, "kv");
    ck_assert_uint_eq(seen.nkeys, 2);
    ck_assert(memcmp(seen.key_bytes[0], s_keys[0].bytes, 32) == 0);
    ck_assert(memcmp(seen.key_bytes[1], s_keys[1].bytes, 32) == 0);
    ck_assert(seen.hits[0] && seen.hits[1]);
    uint64_t fid;
    ck_assert_int_eq(p2pkv_client_fetch(c, server, "kv", seen.keys, (uint32_t[]) { 30, 31 }, 2,
                                        seen.round, 0, &fid), 0);
    ck_assert_int_eq(s_status_of(c, &seen, fid), P2PKV_LANDED);
    ck_assert(memcmp(pool + 30 * BLOCK, bk_hashed(0), BLOCK) == 0);
    ck_assert(memcmp(pool + 31 * BLOCK, bk_hashed(1), BLOCK) == 0);
    ck_assert_int_eq(p2pkv_client_finish(c, server, "kv"), 0);
    ck_assert_msg(s_unpinned(c, &s), "the server still pins blocks");
    //  nothing more came: one answer to the caller, two ends
    for (int i = 0; i < 10; i++)
        p2pkv_client_poll(c, 0.01);
    ck_assert_uint_eq(seen.lookups, 1);
    ck_assert_uint_eq(seen.ends.n, 2);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&s), 0);
}

START_TEST(test_a_lookup_of_the_same_request_beside_it)
{
    s_beside(false);
    s_beside(true);
}
END_TEST

//  ---------------------------------------------------------------------------
//  Ended while the server looks the keys up

//  Gets of K0 and P, which the server parks (its lookup deadline far
//  away) with K0 pinned: one cancelled by its id, one by a finish of its
//  request, one by its deadline (2 s).  Each ends once, ABORTED, well
//  before any timeout of the server's; every key FAILED, nothing
//  written, the pins let go (the server's store timeout, which would
//  also let them go, far away); a get after them lands.
static void
s_held(bool off)
{
    td_t s;
    //  a lookup's pins are a store job: its timeout (td_start's 3 s) would
    //  let them go whatever the get did; and the seed's order, in which
    //  nothing of a get is written while it looks up (streamed, K0 would
    //  be written at once: test_spill_stream's abort covers that order)
    s_server(&s, off, (const char *const[]) { "--lookup-timeout", "120", "--store-timeout",
                                              "120", "--stream-gets", "off", NULL });
    s_seen_t seen = { 0 };
    int server;
    p2pkv_client_t *c = s_client(&s, &seen, &server);
    json_int_t asked0 = s_metric(&s, off ? "p2pkv_lookups_total" : "p2pkv_gets_total");
    p2pkv_key_t keys[2] = { s_keys[0], s_keys[P] };
    p2pkv_key_result_t res[3][2];
    uint64_t id[3];
    const char *kv[3] = { "held-a", "held-b", "held-c" };
    double t0 = pk_clock_monotonic();
    for (int g = 0; g < 3; g++) {
        uint32_t dest[2] = { (uint32_t) (20 + 2 * g), (uint32_t) (21 + 2 * g) };
        ck_assert_int_eq(p2pkv_client_get_async(c, server, kv[g], keys, dest, 2, g == 2 ? 2 : 0,
                                                res[g], &id[g]), 0);
    }
    ck_assert_uint_eq(p2pkv_client_open_fetches(c), 3);
    //  all three reach the server and park on P with K0 pinned
    double deadline = t0 + BOUND;
    while ((td_stats(td_api(&s)).pinned == 0
            || s_metric(&s, off ? "p2pkv_lookups_total" : "p2pkv_gets_total") - asked0 < 3)
           && pk_clock_monotonic() < deadline)
        p2pkv_client_poll(c, 0.01);
    ck_assert_msg(td_stats(td_api(&s)).pinned > 0, "the gets never pinned K0");
    ck_assert_uint_eq(seen.ends.n, 0);
    ck_assert_int_eq(p2pkv_client_cancel(c, id[0]), 0);
    ck_assert_int_eq(p2pkv_client_cancel(c, id[0]), -EINPROGRESS);
    ck_assert_int_eq(p2pkv_client_finish(c, server, "held-b"), 0);
    for (int g = 0; g < 3; g++) {
        size_t at = s_end_of(c, &seen, id[g]);
        ck_assert_msg(seen.ends.status[at] == P2PKV_ABORTED, "gets %s, get %d: %d (%s)",
                      off ? "off" : "on", g, seen.ends.status[at], seen.ends.reason[at]);
        for (int i = 0; i < 2; i++) {
            ck_assert_int_eq(res[g][i].status, P2PKV_KEY_FAILED);
            ck_assert_int_eq(res[g][i].holder, -1);
        }
    }
    ck_assert_uint_eq(seen.ends.n, 3);
    ck_assert_msg(pk_clock_monotonic() - t0 < 20, "the gets did not end at once");
    ck_assert_int_eq(p2pkv_client_cancel(c, id[0]), -EALREADY);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c), 0);
    ck_assert_int_eq(p2pkv_client_server_state(c, server, NULL), P2PKV_SERVER_UP);
    ck_assert_msg(s_unpinned(c, &s), "the server still pins K0");
    uint8_t zero[BLOCK] = { 0 };
    for (size_t b = 20; b < 26; b++)
        ck_assert_msg(memcmp(p2pkv_client_pool(c) + b * BLOCK, zero, BLOCK) == 0,
                      "block %zu of a cancelled get was written", b);
    ck_assert_uint_eq(seen.lookups, 0);
    //  the session serves on
    uint64_t after;
    ck_assert_int_eq(p2pkv_client_get_async(c, server, "after", s_keys, (uint32_t[]) { 30 }, 1,
                                            0, res[0], &after), 0);
    ck_assert_int_eq(s_status_of(c, &seen, after), P2PKV_LANDED);
    ck_assert_int_eq(res[0][0].status, P2PKV_KEY_LANDED);
    ck_assert_uint_eq(seen.lookups, 0);
    //  two steps name a request of their own after kv: a kv too long for
    //  that name (the wire's 4,096 bytes) is refused, nothing sent
    if (off) {
        char *big = malloc(4091);
        ck_assert_ptr_nonnull(big);
        memset(big, 'k', 4090);
        big[4090] = '\0';
        ck_assert_int_eq(p2pkv_client_get_async(c, server, big, s_keys, (uint32_t[]) { 31 }, 1,
                                                0, res[0], &after), -EINVAL);
        free(big);
        ck_assert_uint_eq(p2pkv_client_open_fetches(c), 0);
    }
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&s), 0);
}

START_TEST(test_ended_while_looking_up)
{
    s_held(false);
    s_held(true);
}
END_TEST

//  ---------------------------------------------------------------------------
//  Cancelled while its fetch runs (two steps only: a get message is one)

//  Over mmap the consumer copies the blocks itself, at its next step: the
//  poll that ran the lookup's answer (and so sent the fetch) returns with
//  nothing of the fetch landed, and the cancel then finds it running.
static const char *const s_mmap[] = { "--provider", "mmap,tcp", "--fabric-addr", "127.0.0.1",
                                      "--store-timeout", "120", NULL };

START_TEST(test_cancelled_while_fetching)
{
    td_t s;
    s_server(&s, true, s_mmap);
    s_provider = "mmap";
    s_seen_t seen = { 0 };
    int server;
    p2pkv_client_t *c = s_client(&s, &seen, &server);
    p2pkv_key_result_t res[3];
    uint64_t id;
    json_int_t fetches0 = s_metric(&s, "p2pkv_fetches_total");
    ck_assert_int_eq(p2pkv_client_get_async(c, server, "f", (p2pkv_key_t[]) { s_keys[0],
                                                                               s_keys[X],
                                                                               s_keys[1] },
                                            (uint32_t[]) { 40, 41, 42 }, 3, 0, res, &id), 0);
    double deadline = pk_clock_monotonic() + BOUND;
    while (p2pkv_client_poll(c, 0.05) == 0 && pk_clock_monotonic() < deadline)
        ;
    ck_assert_uint_eq(seen.ends.n, 0);
    ck_assert_int_eq(p2pkv_client_fetch_status(c, id, NULL), -EINPROGRESS);
    ck_assert_int_eq(p2pkv_client_cancel(c, id), 0);
    ck_assert_int_eq(p2pkv_client_cancel(c, id), -EINPROGRESS);
    size_t at = s_end_of(c, &seen, id);
    ck_assert_msg(seen.ends.status[at] == P2PKV_ABORTED, "ended %d: %s", seen.ends.status[at],
                  seen.ends.reason[at]);
    //  answered: the hits were its server's, and did not land; X missed
    ck_assert_int_eq(res[0].status, P2PKV_KEY_FAILED);
    ck_assert_int_eq(res[0].holder, server);
    ck_assert_int_eq(res[2].status, P2PKV_KEY_FAILED);
    ck_assert_int_eq(res[1].status, P2PKV_KEY_MISSING);
    ck_assert_int_eq(res[1].reason, P2PKV_MISS_ABSENT);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c), 0);
    ck_assert_msg(s_unpinned(c, &s), "the server still pins blocks");
    //  the fetch and the get's terminal fetch reached the server
    s_until_metric(c, &s, "p2pkv_fetches_total", fetches0, 2);
    ck_assert_int_eq(p2pkv_client_cancel(c, id), -EALREADY);
    ck_assert_int_eq(p2pkv_client_server_state(c, server, NULL), P2PKV_SERVER_UP);
    uint64_t after;
    ck_assert_int_eq(p2pkv_client_get_async(c, server, "f", s_keys, (uint32_t[]) { 43 }, 1, 0,
                                            res, &after), 0);
    ck_assert_int_eq(s_status_of(c, &seen, after), P2PKV_LANDED);
    ck_assert_int_eq(res[0].status, P2PKV_KEY_LANDED);
    ck_assert_uint_eq(seen.lookups, 0);
    p2pkv_client_destroy(&c);
    s_provider = "tcp";
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  ---------------------------------------------------------------------------
//  The server dies while the get waits

//  A server (gets off when off) and a client whose get of K0 and P under
//  kv, into blocks dest and dest + 1, waits parked on P with K0 pinned.
static p2pkv_client_t *
s_parked(td_t *s, bool off, s_seen_t *seen, int *server, const char *kv, uint32_t dest,
         p2pkv_key_result_t res[2], uint64_t *id)
{
    s_server(s, off, (const char *const[]) { "--lookup-timeout", "120", NULL });
    p2pkv_client_t *c = s_client(s, seen, server);
    ck_assert_int_eq(p2pkv_client_get_async(c, *server, kv, (p2pkv_key_t[]) { s_keys[0],
                                                                               s_keys[P] },
                                            (uint32_t[]) { dest, dest + 1 }, 2, 0, res, id),
                     0);
    double deadline = pk_clock_monotonic() + BOUND;
    while (td_stats(td_api(s)).pinned == 0 && pk_clock_monotonic() < deadline)
        p2pkv_client_poll(c, 0.01);
    ck_assert_msg(td_stats(td_api(s)).pinned > 0, "the get never pinned K0");
    return c;
}

//  Parked on P, the server killed: the get ends FAILED (the session goes
//  DOWN at its silence, 2 s here), every key FAILED; it does not hang.
static void
s_killed(bool off)
{
    td_t s;
    s_seen_t seen = { 0 };
    int server;
    p2pkv_key_result_t res[2];
    uint64_t id;
    p2pkv_client_t *c = s_parked(&s, off, &seen, &server, "dies", 50, res, &id);
    td_kill(&s);
    size_t at = s_end_of(c, &seen, id);
    ck_assert_msg(seen.ends.status[at] == P2PKV_FAILED, "gets %s: ended %d (%s)", off ? "off" : "on",
                  seen.ends.status[at], seen.ends.reason[at]);
    ck_assert_int_eq(res[0].status, P2PKV_KEY_FAILED);
    ck_assert_int_eq(res[1].status, P2PKV_KEY_FAILED);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c), 0);
    ck_assert_uint_eq(seen.lookups, 0);
    p2pkv_client_destroy(&c);
}

START_TEST(test_server_dies)
{
    s_killed(false);
    s_killed(true);
}
END_TEST

//  Parked on P, the server disconnected by the client: the get ends
//  FAILED within the disconnect (its server's index goes with it), once.
static void
s_disconnected(bool off)
{
    td_t s;
    s_seen_t seen = { 0 };
    int server;
    p2pkv_key_result_t res[2];
    uint64_t id;
    p2pkv_client_t *c = s_parked(&s, off, &seen, &server, "gone", 52, res, &id);
    ck_assert_int_eq(p2pkv_client_disconnect(c, server), 0);
    ck_assert_uint_eq(seen.ends.n, 1);
    ck_assert_uint_eq(seen.ends.id[0], id);
    ck_assert_msg(seen.ends.status[0] == P2PKV_FAILED, "gets %s: ended %d (%s)", off ? "off" : "on",
                  seen.ends.status[0], seen.ends.reason[0]);
    ck_assert_int_eq(res[0].status, P2PKV_KEY_FAILED);
    ck_assert_int_eq(res[1].status, P2PKV_KEY_FAILED);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c), 0);
    for (int i = 0; i < 10; i++)
        p2pkv_client_poll(c, 0.01);
    ck_assert_uint_eq(seen.ends.n, 1);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&s), 0);
}

START_TEST(test_disconnected)
{
    s_disconnected(false);
    s_disconnected(true);
}
END_TEST

int
main(void)
{
    int rc = td_suite_start();
    if (rc)
        return rc;
    td_sweep();
    Suite *suite = suite_create("get_async");
    TCase *tc = td_case(suite, "get_async", 240);
    tcase_add_test(tc, test_same_results_both_ways);
    tcase_add_test(tc, test_a_lookup_of_the_same_request_beside_it);
    tcase_add_test(tc, test_ended_while_looking_up);
    tcase_add_test(tc, test_cancelled_while_fetching);
    tcase_add_test(tc, test_server_dies);
    tcase_add_test(tc, test_disconnected);
    return td_run_and_sweep("get_async", suite);
}
