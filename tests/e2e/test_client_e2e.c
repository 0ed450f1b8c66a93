/*  test_client_e2e.c: the client library (p2pkv.h) against real
    p2pkv-server processes (tests/fixtures/daemon.c) over the tcp provider on
    127.0.0.1.

    Servers are filled through the engine API the way a local engine does
    it, with tests/fixtures/blocks.h's blocks and keys: every byte that lands is
    checked against where it belongs.

    The restarted-consumer test runs a consumer in a process of its own:
    this binary again, executed with --consumer (see s_consumer_main).
*/
#include "p2pkv.h"
#include "base/clock.h"
#include "blocks.h"
#include "daemon.h"
#include "wire/protocol.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define SMALL 4096                  //  block length of tests 1 and 2
#define BIG (64 * 1024)             //  block length of the large loads
#define NBIG 4096                   //  blocks of a large load: 256 MiB

static char s_self[4096];           //  this binary, for the consumer process

//  Bounds for what must happen, not what is measured: generous, since the
//  suite must pass on a loaded 2-core machine under ASan, where filling
//  256 MiB took 10 s.  S_STORE_TIMEOUT is the servers' --store-timeout for
//  rounds of thousands of blocks.
#define S_BOUND 60
#define S_STORE_TIMEOUT "60"

static json_int_t
s_stat(json_t *st, const char *group, const char *name)
{
    return json_integer_value(json_object_get(group ? json_object_get(st, group) : st, name));
}

static json_int_t
s_metric_total(json_t *st, const char *family)
{
    json_t *f = json_object_get(json_object_get(st, "metrics"), family);
    return json_integer_value(json_object_get(f, "total"));
}

//  ---------------------------------------------------------------------------
//  A client and what its callbacks saw

typedef struct {
    p2pkv_client_t *client;
    int server;
    size_t pool_len;
    //  the last lookup's answer
    int lookups;
    uint64_t round;
    char kv[64];
    size_t nhits;
    bool *hits;
    bool keys_echoed;
    const p2pkv_key_t *asked;
    //  the fetches that ended
    int fetches;
    uint64_t fetch_id;
    p2pkv_status_t status;
    char reason[256];
    double ended_at;
    uint8_t *snapshot;              //  the pool at on_fetch, when asked for
    bool want_snapshot;
} s_client_t;

static void
s_on_lookup(void *arg, int server, const char *kv, uint64_t round, const p2pkv_key_t *keys,
            const bool *hits, size_t n)
{
    s_client_t *c = arg;
    //  no ck_assert here: the consumer process runs this outside a test
    if (!hits)
        return;         //  the server went away: the test sees no answer
    c->lookups++;
    c->round = round;
    snprintf(c->kv, sizeof c->kv, "%s", kv);
    free(c->hits);
    c->hits = malloc(n * sizeof *c->hits);
    memcpy(c->hits, hits, n * sizeof *hits);
    c->nhits = n;
    c->keys_echoed = c->asked != NULL;
    for (size_t i = 0; c->asked && i < n; i++)
        if (keys[i].len != c->asked[i].len
            || memcmp(keys[i].bytes, c->asked[i].bytes, keys[i].len) != 0)
            c->keys_echoed = false;
}

static void
s_on_fetch(void *arg, int server, uint64_t fetch_id, p2pkv_status_t status, const char *reason)
{
    s_client_t *c = arg;
    //  when the library reported, not after the copy below (256 MiB, which
    //  took seconds on a loaded machine and counted as the library's)
    c->ended_at = pk_clock_monotonic();
    //  first of all, before anything else can land
    if (c->want_snapshot) {
        c->snapshot = malloc(c->pool_len);
        ck_assert_ptr_nonnull(c->snapshot);
        memcpy(c->snapshot, p2pkv_client_pool(c->client), c->pool_len);
    }
    c->fetches++;
    c->fetch_id = fetch_id;
    c->status = status;
    snprintf(c->reason, sizeof c->reason, "%s", reason ? reason : "");
}

static const char *
s_status_name(p2pkv_status_t s)
{
    return s == P2PKV_LANDED ? "LANDED" : s == P2PKV_ABORTED ? "ABORTED" : "FAILED";
}

//  Timeouts of a client; 0: the library's defaults, but for keepalive
//  (0.5 s: well inside the servers' silence timeout, even when a check
//  of a large pool keeps the test from polling for a while).
typedef struct {
    double load, abort_ack, keepalive, silence;
} s_timeouts_t;

static void
s_client_open(s_client_t *c, td_t *d, const char *peer, uint64_t num_blocks, uint64_t block_len,
              s_timeouts_t t)
{
    memset(c, 0, sizeof *c);
    p2pkv_config_t cfg = { .peer_id = peer, .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = "127.0.0.1", .load_timeout = t.load,
                           .abort_ack_timeout = t.abort_ack,
                           .keepalive_interval = t.keepalive > 0 ? t.keepalive : 0.5,
                           .silence_timeout = t.silence };
    p2pkv_callbacks_t cb = { .arg = c, .on_lookup = s_on_lookup, .on_fetch = s_on_fetch };
    char err[256] = "";
    c->client = p2pkv_client_new(&cfg, NULL, num_blocks, block_len, cb, err);
    ck_assert_msg(c->client != NULL, "p2pkv_client_new: %s", err);
    c->pool_len = num_blocks * block_len;
    c->server = p2pkv_client_connect(c->client, d->endpoint, 10, err);
    ck_assert_msg(c->server >= 0, "p2pkv_client_connect: %s", err);
}

static void
s_client_close(s_client_t *c)
{
    p2pkv_client_destroy(&c->client);
    free(c->hits);
    free(c->snapshot);
    memset(c, 0, sizeof *c);
}

//  Polls until cond holds or timeout seconds passed; cond's value.
#define S_POLL_UNTIL(c, cond, timeout) ({                                      \
        double deadline_ = pk_clock_monotonic() + (timeout);                   \
        while (!(cond) && pk_clock_monotonic() < deadline_)                    \
            ck_assert_int_ge(p2pkv_client_poll((c)->client, 0.005), 0);        \
        (cond);                                                                \
    })

//  Polls for seconds whatever happens.
static void
s_poll_for(s_client_t *c, double seconds)
{
    double deadline = pk_clock_monotonic() + seconds;
    while (pk_clock_monotonic() < deadline)
        ck_assert_int_ge(p2pkv_client_poll(c->client, 0.005), 0);
}

//  Looks up keys under kv; waits for the answer; returns its round.
static uint64_t
s_lookup(s_client_t *c, const char *kv, const p2pkv_key_t *keys, size_t n)
{
    int before = c->lookups;
    c->asked = keys;
    ck_assert_int_eq(p2pkv_client_lookup(c->client, c->server, kv, keys, n), 0);
    ck_assert_msg(S_POLL_UNTIL(c, c->lookups > before, S_BOUND),
                  "no answer to the lookup of %zu keys", n);
    ck_assert_int_eq(c->lookups, before + 1);
    ck_assert_str_eq(c->kv, kv);
    ck_assert_uint_eq(c->nhits, n);
    ck_assert_msg(c->keys_echoed, "on_lookup: the keys are not the ones asked, in order");
    c->asked = NULL;
    return c->round;
}

//  Fetches and waits for the end; returns the status.
static p2pkv_status_t
s_fetch_wait(s_client_t *c, const char *kv, const p2pkv_key_t *keys, const uint32_t *dest,
             size_t n, uint64_t round, double timeout)
{
    int before = c->fetches;
    uint64_t id;
    ck_assert_int_eq(p2pkv_client_fetch(c->client, c->server, kv, keys, dest, n, round, 0, &id),
                     0);
    ck_assert_msg(S_POLL_UNTIL(c, c->fetches > before, timeout),
                  "the fetch of %zu blocks did not end within %.0f s", n, timeout);
    ck_assert_int_eq(c->fetches, before + 1);
    ck_assert_uint_eq(c->fetch_id, id);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c->client), 0);
    return c->status;
}

//  The server's stats once cond holds on them, or at timeout.
static json_t *
s_stats_until(td_t *d, bool (*cond)(json_t *st), double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    json_t *st = td_stats_json(d);
    while (!cond(st) && pk_clock_monotonic() < deadline) {
        json_decref(st);
        zclock_sleep(10);
        st = td_stats_json(d);
    }
    return st;
}

static bool
s_unpinned(json_t *st)
{
    return s_stat(st, "pool", "pinned") == 0;
}

//  One session left, the old one retired, nothing pinned.
static bool
s_restart_settled(json_t *st)
{
    return s_stat(st, NULL, "sessions") == 1 && s_stat(st, "pool", "pinned") == 0
           && s_metric_total(st, "p2pkv_sessions_retired_total") == 1;
}

//  ---------------------------------------------------------------------------
//  1. lookup, then fetch of the hits under the lookup's round

START_TEST(test_symmetric_lookup_fetch)
{
    enum { FILLED = 10101, POOL = 10240 };
    td_t d;
    td_start(&d, (const char *[]) { "--pool-blocks", "16384", "--pin-quota", "16384",
                                    "--silence-timeout", "10",
                                    "--store-timeout", S_STORE_TIMEOUT, NULL });
    bk_fill(&d, 1, FILLED, SMALL);
    s_client_t c;
    s_client_open(&c, &d, "c-sym", POOL, SMALL, (s_timeouts_t) { 0 });
    uint8_t *pool = p2pkv_client_pool(c.client);
    //  1 block, 100 blocks (and a key the server lacks), 10,000 blocks:
    //  each a fresh set of the fill's blocks
    struct { size_t first, n; bool miss; } cases[] = { { 0, 1, false }, { 1, 100, true },
                                                       { 101, 10000, false } };
    for (int t = 0; t < 3; t++) {
        size_t n = cases[t].n, nask = n + cases[t].miss;
        p2pkv_key_t *k = bk_keys(1, cases[t].first, n), *missing = bk_keys(99, 0, 1);
        p2pkv_key_t *ask = malloc(nask * sizeof *ask);
        //  the missing key in the middle
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            if (cases[t].miss && i == n / 2)
                ask[at++] = missing[0];
            ask[at++] = k[i];
        }
        char kv[32];
        snprintf(kv, sizeof kv, "sym-%zu", n);
        uint64_t round = s_lookup(&c, kv, ask, nask);
        ck_assert_uint_gt(round, 0);
        //  the hits, in the order asked; into scattered destination blocks
        p2pkv_key_t *hit = malloc(nask * sizeof *hit);
        uint32_t *dest = malloc(nask * sizeof *dest);
        size_t nhit = 0;
        for (size_t i = 0; i < nask; i++) {
            bool is_missing = cases[t].miss && i == n / 2;
            ck_assert_msg(c.hits[i] == !is_missing, "%zu blocks: hits[%zu] is %d", n, i,
                          c.hits[i]);
            if (c.hits[i]) {
                hit[nhit] = ask[i];
                //  reversed for 10,000 (no two writes merge), strided for 100
                dest[nhit] = n == 10000 ? (uint32_t) (POOL - 1 - nhit)
                           : (uint32_t) ((nhit * 7919 + 5) % POOL);
                nhit++;
            }
        }
        ck_assert_uint_eq(nhit, n);
        memset(pool, 0, c.pool_len);
        p2pkv_status_t st = s_fetch_wait(&c, kv, hit, dest, nhit, round, S_BOUND);
        ck_assert_msg(st == P2PKV_LANDED, "%zu blocks: %s (%s)", n, s_status_name(st), c.reason);
        ck_assert_int_eq(p2pkv_client_finish(c.client, c.server, kv), 0);
        //  every byte where it belongs, and nothing elsewhere
        bool *is_dest = calloc(POOL, sizeof *is_dest);
        for (size_t i = 0; i < nhit; i++) {
            ck_assert_msg(bk_block_ok(pool + (size_t) dest[i] * SMALL, 1, cases[t].first + i,
                                     SMALL), "%zu blocks: block %zu (pool block %u) differs",
                          n, i, dest[i]);
            is_dest[dest[i]] = true;
        }
        for (size_t b = 0; b < POOL; b++)
            ck_assert_msg(is_dest[b] || bk_block_zero(pool + b * SMALL, SMALL),
                          "%zu blocks: pool block %zu written, not a destination", n, b);
        free(is_dest);
        free(hit);
        free(dest);
        free(ask);
        bk_keys_free(k);
        bk_keys_free(missing);
    }
    //  the fetches' pins are gone once they ended
    json_t *st = s_stats_until(&d, s_unpinned, S_BOUND);
    ck_assert_int_eq(s_stat(st, "pool", "pinned"), 0);
    json_decref(st);
    s_client_close(&c);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  ---------------------------------------------------------------------------
//  2. Prefill-decode: the engine stores for a consumer; its fetch of the
//  request (no lookup) is served once both are there, in either order.

START_TEST(test_pd_store_then_fetch_and_fetch_then_store)
{
    td_t d;
    td_start(&d, (const char *[]) { "--silence-timeout", "10", NULL });
    bk_fill(&d, 2, 4, SMALL);
    p2pkv_key_t *k = bk_keys(2, 0, 4);
    //  stored before the consumer even connected: held, then bound
    char err[P2PKV_ERRLEN] = "";
    uint64_t job;
    ck_assert_msg(p2pkv_engine_store(td_api(&d), "c-pd", "req-1", k, 2, -1, &job, err) == 0,
                  "store: %s", err);
    s_client_t c;
    s_client_open(&c, &d, "c-pd", 64, SMALL, (s_timeouts_t) { 0 });
    uint8_t *pool = p2pkv_client_pool(c.client);
    uint32_t dest[2] = { 3, 4 };
    p2pkv_status_t st = s_fetch_wait(&c, "req-1", k, dest, 2, 0, 10);
    ck_assert_msg(st == P2PKV_LANDED, "store then fetch: %s (%s)", s_status_name(st), c.reason);
    ck_assert(bk_block_ok(pool + 3 * SMALL, 2, 0, SMALL));
    ck_assert(bk_block_ok(pool + 4 * SMALL, 2, 1, SMALL));
    p2pkv_engine_event_t ev;
    ck_assert_int_eq(p2pkv_engine_next_event(td_api(&d), 10, &ev), 0);
    ck_assert_int_eq(ev.kind, P2PKV_EVENT_STORE);
    ck_assert_uint_eq(ev.id, job);
    ck_assert(ev.success);
    //  fetch first: nothing ends until the engine stores
    uint32_t dest2[2] = { 20, 21 };
    uint64_t id;
    ck_assert_int_eq(p2pkv_client_fetch(c.client, c.server, "req-2", k + 2, dest2, 2, 0, 0,
                                        &id), 0);
    s_poll_for(&c, 0.3);
    ck_assert_int_eq(c.fetches, 1);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c.client), 1);
    ck_assert(bk_block_zero(pool + 20 * SMALL, 2 * SMALL));
    ck_assert_msg(p2pkv_engine_store(td_api(&d), "c-pd", "req-2", k + 2, 2, -1, &job,
                                     err) == 0, "store: %s", err);
    ck_assert_msg(S_POLL_UNTIL(&c, c.fetches == 2, S_BOUND), "fetch then store: no end");
    ck_assert_uint_eq(c.fetch_id, id);
    ck_assert_msg(c.status == P2PKV_LANDED, "fetch then store: %s (%s)", s_status_name(c.status),
                  c.reason);
    ck_assert(bk_block_ok(pool + 20 * SMALL, 2, 2, SMALL));
    ck_assert(bk_block_ok(pool + 21 * SMALL, 2, 3, SMALL));
    ck_assert_int_eq(p2pkv_engine_next_event(td_api(&d), 10, &ev), 0);
    ck_assert_int_eq(ev.kind, P2PKV_EVENT_STORE);
    ck_assert_uint_eq(ev.id, job);
    ck_assert(ev.success);
    bk_keys_free(k);
    s_client_close(&c);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  What changed in the pool since the snapshot taken at on_fetch: "" if
//  nothing, else how many blocks changed, the first and last, and what
//  they hold now (for the failure message).
static void
s_changes(const s_client_t *c, uint64_t tag, size_t block_len, char *out, size_t cap)
{
    const uint8_t *pool = p2pkv_client_pool(c->client);
    size_t nblocks = c->pool_len / block_len, changed = 0, first = 0, last = 0, whole = 0,
           was_zero = 0;
    for (size_t b = 0; b < nblocks; b++) {
        const uint8_t *now = pool + b * block_len, *then = c->snapshot + b * block_len;
        if (memcmp(now, then, block_len) == 0)
            continue;
        if (!changed++)
            first = b;
        last = b;
        whole += bk_block_ok(now, tag, b, block_len);
        was_zero += bk_block_zero(then, block_len);
    }
    if (!changed)
        snprintf(out, cap, "%s", "");
    else
        snprintf(out, cap, "%zu blocks changed after the report (blocks %zu..%zu; %zu of them "
                 "untouched at the report, %zu whole now)", changed, first, last, was_zero, whole);
}

//  ---------------------------------------------------------------------------
//  The large loads: NBIG blocks of BIG bytes

static void
s_big_server(td_t *d, const char *const *more)
{
    //  --store-timeout: a round of 256 MiB that the loaded server cannot
    //  write within daemon.c's 3 s must not fail by it (seen under a CPU
    //  hog: "the server could not serve the round", and with
    //  --drain-timeout 1 a session retired for its forced cancel)
    const char *flags[16] = { "--pool-blocks", "4096", "--block-len", "65536",
                              "--pin-quota", "4096", "--silence-timeout", "10",
                              "--store-timeout", S_STORE_TIMEOUT };
    size_t n = 10;
    for (size_t i = 0; more && more[i]; i++)
        flags[n++] = more[i];
    flags[n] = NULL;
    td_start(d, flags);
    bk_fill(d, 3, NBIG, BIG);
}

//  Any sampled word of the destination no longer zero?
static bool
s_touched(const uint8_t *pool, size_t nblocks, size_t block_len)
{
    for (size_t b = 0; b < nblocks; b++)
        for (size_t off = 0; off < block_len; off += 4096)
            if (*(const uint64_t *) (pool + b * block_len + off))
                return true;
    return false;
}

//  Looks up all NBIG keys and starts their fetch into blocks 0.. in order.
static void
s_big_fetch(s_client_t *c, const p2pkv_key_t *keys, const char *kv, double deadline,
            uint64_t *id_p)
{
    uint64_t round = s_lookup(c, kv, keys, NBIG);
    for (size_t i = 0; i < NBIG; i++)
        ck_assert_msg(c->hits[i], "a miss for key %zu of the large load", i);
    uint32_t *dest = malloc(NBIG * sizeof *dest);
    for (size_t i = 0; i < NBIG; i++)
        dest[i] = (uint32_t) i;
    ck_assert_int_eq(p2pkv_client_fetch(c->client, c->server, kv, keys, dest, NBIG, round,
                                        deadline, id_p), 0);
    free(dest);
}

//  3. The server is SIGKILLed while the load is landing.

START_TEST(test_server_killed_mid_transfer)
{
    td_t d;
    s_big_server(&d, NULL);
    p2pkv_key_t *k = bk_keys(3, 0, NBIG);
    s_client_t c;
    s_timeouts_t t = { .load = 3, .abort_ack = 1, .keepalive = 0.2, .silence = 1 };
    s_client_open(&c, &d, "c-kill", NBIG, BIG, t);
    uint8_t *pool = p2pkv_client_pool(c.client);
    c.want_snapshot = true;
    uint64_t id;
    s_big_fetch(&c, k, "kill", 0, &id);
    //  poll until the first bytes land, then kill
    double deadline = pk_clock_monotonic() + S_BOUND;
    bool touched = false;
    while (!touched && c.fetches == 0 && pk_clock_monotonic() < deadline) {
        ck_assert_int_ge(p2pkv_client_poll(c.client, 0), 0);
        touched = s_touched(pool, NBIG, BIG);
    }
    ck_assert_msg(touched, "nothing landed within %d s (fetch ended: %d, %s)", S_BOUND, c.fetches,
                  c.reason);
    ck_assert_msg(c.fetches == 0, "the load ended (%s) before the kill: make it larger",
                  s_status_name(c.status));
    td_kill(&d);
    double killed = pk_clock_monotonic();
    //  failed within the client's timeouts: silence after the kill (or
    //  the load timeout plus the abort-ack timeout, whichever first)
    double bound = t.silence < t.load + t.abort_ack ? t.silence : t.load + t.abort_ack;
    ck_assert_msg(S_POLL_UNTIL(&c, c.fetches > 0, bound + 5), "no end %.1f s after the kill",
                  bound + 5);
    ck_assert_int_eq(c.fetches, 1);
    ck_assert_uint_eq(c.fetch_id, id);
    ck_assert_msg(c.status == P2PKV_FAILED, "status %s (%s)", s_status_name(c.status), c.reason);
    //  3 s of slack: a loaded 2-core machine (CI under ASan, or builds
    //  beside it) was seen to take 2 s; the defaults it must beat are 10-40 s
    ck_assert_msg(c.ended_at - killed <= bound + 3.0,
                  "failed %.2f s after the kill; the timeouts allow %.2f s (%s)",
                  c.ended_at - killed, bound, c.reason);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c.client), 0);
    //  nothing lands after the report
    s_poll_for(&c, 1.5);
    char changes[256];
    s_changes(&c, 3, BIG, changes, sizeof changes);
    ck_assert_msg(!*changes, "after FAILED (%s): %s", c.reason, changes);
    s_client_close(&c);
    bk_keys_free(k);
}
END_TEST

//  4. A load aborted (its deadline passed at once) while its writes run.

//  The writes are held back on an event, not on the speed of the machine:
//  the write scheduler with a credit of one block (--fair-inflight and
//  --fair-quantum of one block) grants the round's next write only when
//  the one before completed, so 4,095 of the 4,096 wait for credit while
//  the session's actor reads the abort, and the cancel drops them
//  (fair_channel.c, s_drop_rest).  Without it the server posted the whole
//  round at once, and under ASan in CI every write was once posted before
//  the abort was read: the round landed whole, LANDED, and the test failed.
START_TEST(test_abort_with_writes_in_flight)
{
    td_t d;
    const char *const one_block_credit[] = { "--fair-inflight", "65536", "--fair-quantum",
                                             "65536", NULL };
    s_big_server(&d, one_block_credit);
    p2pkv_key_t *k = bk_keys(3, 0, NBIG);
    s_client_t c;
    s_timeouts_t t = { .load = 10, .abort_ack = 5, .keepalive = 0.5, .silence = 5 };
    s_client_open(&c, &d, "c-abort", NBIG, BIG, t);
    uint8_t *pool = p2pkv_client_pool(c.client);
    //  a first small fetch connects the data path (the server's first
    //  writes to a new peer wait for the connection), so the large load's
    //  first write is posted at once and the abort finds it in flight
    uint32_t warm_dest[16];
    for (uint32_t i = 0; i < 16; i++)
        warm_dest[i] = i;
    uint64_t warm_round = s_lookup(&c, "warm", k, 16);
    ck_assert_int_eq(s_fetch_wait(&c, "warm", k, warm_dest, 16, warm_round, S_BOUND),
                     P2PKV_LANDED);
    ck_assert_int_eq(p2pkv_client_finish(c.client, c.server, "warm"), 0);
    memset(pool, 0, c.pool_len);
    c.want_snapshot = true;
    uint64_t id;
    int before = c.fetches;
    s_big_fetch(&c, k, "abort", 0.001, &id);
    double fetched = pk_clock_monotonic();
    ck_assert_msg(S_POLL_UNTIL(&c, c.fetches > before, t.abort_ack + 5),
                  "the aborted load never ended");
    ck_assert_uint_eq(c.fetch_id, id);
    ck_assert_msg(c.status == P2PKV_ABORTED, "status %s (%s): the abort should have caught the "
                  "writes in flight", s_status_name(c.status), c.reason);
    //  nothing lands after the report
    s_poll_for(&c, 1.0);
    char changes[256];
    s_changes(&c, 3, BIG, changes, sizeof changes);
    ck_assert_msg(!*changes, "after ABORTED (%s, %.3f s after the fetch): %s", c.reason,
                  c.ended_at - fetched, changes);
    //  each block untouched or whole
    size_t whole = 0;
    for (size_t i = 0; i < NBIG; i++) {
        const uint8_t *at = pool + i * BIG;
        bool ok = bk_block_ok(at, 3, i, BIG);
        ck_assert_msg(ok || bk_block_zero(at, BIG), "block %zu is neither untouched nor whole",
                      i);
        whole += ok;
    }
    ck_assert_msg(whole < NBIG, "every block landed: the abort stopped nothing (%s)", c.reason);
    ck_assert_int_eq(p2pkv_client_finish(c.client, c.server, "abort"), 0);
    //  the session goes on: another fetch on it lands whole
    memset(pool, 0, c.pool_len);
    p2pkv_key_t *k2 = bk_keys(3, 100, 256);
    uint64_t round = s_lookup(&c, "after", k2, 256);
    uint32_t dest[256];
    for (size_t i = 0; i < 256; i++) {
        ck_assert(c.hits[i]);
        dest[i] = (uint32_t) (1000 + 2 * i);
    }
    c.want_snapshot = false;
    p2pkv_status_t st = s_fetch_wait(&c, "after", k2, dest, 256, round, S_BOUND);
    ck_assert_msg(st == P2PKV_LANDED, "after the abort: %s (%s)", s_status_name(st), c.reason);
    for (size_t i = 0; i < 256; i++)
        ck_assert_msg(bk_block_ok(pool + (size_t) dest[i] * BIG, 3, 100 + i, BIG),
                      "after the abort: block %zu differs", i);
    ck_assert_int_eq(p2pkv_client_finish(c.client, c.server, "after"), 0);
    bk_keys_free(k2);
    s_client_close(&c);
    bk_keys_free(k);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  ---------------------------------------------------------------------------
//  5. A consumer restarted while a transfer to it ran

//  The consumer process: connect as PEER, look up and fetch blocks 0..N-1
//  of fill tag 3, and tell the parent on fd 3: "C" connected, "W" the
//  first bytes landed, "E status" the load ended, "X why" trouble.  Runs
//  until killed (or 3 * S_BOUND).  No Check assertions here: this process runs
//  no test.
static int
s_consumer_main(int argc, char *argv[])
{
    if (argc != 5)
        return 2;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    zsys_handler_set(NULL);
    const char *endpoint = argv[2], *peer = argv[3];
    size_t n = (size_t) atol(argv[4]);
    s_client_t c = { 0 };
    p2pkv_config_t cfg = { .peer_id = peer, .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = "127.0.0.1", .keepalive_interval = 0.5 };
    p2pkv_callbacks_t cb = { .arg = &c, .on_lookup = s_on_lookup, .on_fetch = s_on_fetch };
    char err[256] = "";
    c.client = p2pkv_client_new(&cfg, NULL, n, BIG, cb, err);
    if (!c.client || (c.server = p2pkv_client_connect(c.client, endpoint, 10, err)) < 0) {
        dprintf(3, "X %s\n", err);
        return 1;
    }
    dprintf(3, "C\n");
    p2pkv_key_t *k = bk_keys(3, 0, n);
    p2pkv_client_lookup(c.client, c.server, "restart", k, n);
    double deadline = pk_clock_monotonic() + 3 * S_BOUND;
    while (c.lookups == 0 && pk_clock_monotonic() < deadline)
        p2pkv_client_poll(c.client, 0.005);
    uint32_t *dest = malloc(n * sizeof *dest);
    for (size_t i = 0; i < n; i++)
        dest[i] = (uint32_t) i;
    uint64_t id;
    if (c.lookups == 0
        || p2pkv_client_fetch(c.client, c.server, "restart", k, dest, n, c.round, 0, &id)) {
        dprintf(3, "X no lookup answer or fetch refused\n");
        return 1;
    }
    uint8_t *pool = p2pkv_client_pool(c.client);
    bool told = false;
    while (pk_clock_monotonic() < deadline) {
        p2pkv_client_poll(c.client, 0);
        if (!told && s_touched(pool, n, BIG)) {
            dprintf(3, "W\n");
            told = true;
        }
        if (c.fetches) {
            dprintf(3, "E %s\n", s_status_name(c.status));
            break;
        }
    }
    while (pk_clock_monotonic() < deadline)
        p2pkv_client_poll(c.client, 0.01);
    return 0;
}

//  Lines from the consumer process until one starts with want (returned
//  in line), the pipe closes, or timeout.
static bool
s_child_line(int fd, char want, char *buf, size_t *got, double timeout, char *line, size_t cap)
{
    double deadline = pk_clock_monotonic() + timeout;
    for (;;) {
        char *nl;
        while ((nl = memchr(buf, '\n', *got))) {
            size_t len = (size_t) (nl - buf);
            size_t keep = len < cap - 1 ? len : cap - 1;
            memcpy(line, buf, keep);
            line[keep] = '\0';
            memmove(buf, nl + 1, *got - len - 1);
            *got -= len + 1;
            if (line[0] == want)
                return true;
            if (line[0] == 'X')
                return false;
        }
        double left = deadline - pk_clock_monotonic();
        struct pollfd pfd = { fd, POLLIN, 0 };
        if (left <= 0 || poll(&pfd, 1, (int) (left * 1000) + 1) <= 0)
            return false;
        ssize_t r = read(fd, buf + *got, 1023 - *got);
        if (r <= 0)
            return false;
        *got += (size_t) r;
    }
}

START_TEST(test_consumer_restarted_mid_transfer)
{
    td_t d;
    s_big_server(&d, (const char *[]) { "--stall-timeout", "1", "--drain-timeout", "1", NULL });
    char peer[64], count[16];
    snprintf(peer, sizeof peer, "c-restart-%d", getpid());
    snprintf(count, sizeof count, "%d", NBIG);
    int out[2];
    ck_assert_int_eq(pipe(out), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(out[0]);
        dup2(out[1], 3);
        if (out[1] != 3)
            close(out[1]);
        execl(s_self, s_self, "--consumer", d.endpoint, peer, count, (char *) NULL);
        _exit(127);
    }
    close(out[1]);
    char buf[1024], line[512] = "";
    size_t got = 0;
    bool connected = s_child_line(out[0], 'C', buf, &got, S_BOUND, line, sizeof line);
    bool landing = connected && s_child_line(out[0], 'W', buf, &got, S_BOUND, line, sizeof line);
    kill(child, SIGKILL);
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(connected && landing, "the consumer process never saw its load land: \"%s\"",
                  line);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    //  whatever it said before the kill: not that its load ended
    bool ended = s_child_line(out[0], 'E', buf, &got, 0.05, line, sizeof line);
    ck_assert_msg(!ended, "the load ended (%s) before the kill: make it larger", line);
    close(out[0]);
    json_t *st = td_stats_json(&d);
    ck_assert_int_eq(s_metric_total(st, "p2pkv_sessions_opened_total"), 1);
    json_decref(st);
    //  the restarted consumer, same peer id: the same keys, every byte
    p2pkv_key_t *k = bk_keys(3, 0, NBIG);
    s_client_t c;
    s_client_open(&c, &d, peer, NBIG, BIG, (s_timeouts_t) { 0 });
    uint8_t *pool = p2pkv_client_pool(c.client);
    uint64_t round = s_lookup(&c, "restart", k, NBIG);
    uint32_t *dest = malloc(NBIG * sizeof *dest);
    for (size_t i = 0; i < NBIG; i++) {
        ck_assert_msg(c.hits[i], "after the restart: a miss for key %zu", i);
        dest[i] = (uint32_t) i;
    }
    p2pkv_status_t s = s_fetch_wait(&c, "restart", k, dest, NBIG, round, S_BOUND);
    ck_assert_msg(s == P2PKV_LANDED, "after the restart: %s (%s)", s_status_name(s), c.reason);
    for (size_t i = 0; i < NBIG; i++)
        ck_assert_msg(bk_block_ok(pool + i * BIG, 3, i, BIG), "after the restart: block %zu", i);
    ck_assert_int_eq(p2pkv_client_finish(c.client, c.server, "restart"), 0);
    //  the server serves on: one session, the new one; the old one retired
    //  (by the new connect, or silent); no pin left behind
    st = s_stats_until(&d, s_restart_settled, S_BOUND);
    ck_assert_int_eq(s_stat(st, NULL, "sessions"), 1);
    json_t *peers = json_object_get(st, "peers");
    ck_assert_uint_eq(json_array_size(peers), 1);
    ck_assert_str_eq(json_string_value(json_array_get(peers, 0)), peer);
    ck_assert_int_eq(s_metric_total(st, "p2pkv_sessions_opened_total"), 2);
    ck_assert_int_eq(s_metric_total(st, "p2pkv_sessions_retired_total"), 1);
    ck_assert_int_eq(s_stat(st, "pool", "pinned"), 0);
    ck_assert_int_eq(s_stat(st, "pool", "ready"), NBIG);
    json_decref(st);
    free(dest);
    s_client_close(&c);
    bk_keys_free(k);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

int
main(int argc, char *argv[])
{
    if (argc > 1 && strcmp(argv[1], "--consumer") == 0)
        return s_consumer_main(argc, argv);
    int skip = td_suite_start();
    if (skip)
        return skip;
    ssize_t len = readlink("/proc/self/exe", s_self, sizeof s_self - 1);
    if (len <= 0)
        return 1;
    s_self[len] = '\0';
    Suite *s = suite_create("client_e2e");
    //  the sum of a test's generous bounds, not what it takes
    TCase *tc = td_case(s, "e2e", 300);
    tcase_add_test(tc, test_symmetric_lookup_fetch);
    tcase_add_test(tc, test_pd_store_then_fetch_and_fetch_then_store);
    tcase_add_test(tc, test_server_killed_mid_transfer);
    tcase_add_test(tc, test_consumer_restarted_mid_transfer);
    //  a case of its own, so that CK_RUN_CASE=abort runs it alone (it was
    //  the flaky one: run it in a loop under load)
    TCase *abort = td_case(s, "abort", 120);
    tcase_add_test(abort, test_abort_with_writes_in_flight);
    return td_run_and_sweep("client_e2e", s);
}
