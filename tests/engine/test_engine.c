/*  test_engine.c: the engine C API (p2pkv_engine.h) against a real
    p2pkv-server: every call, its events by callback and by fd, and the
    checks it makes before asking; and the daemon's side of it, the
    engine API class (lib/daemon/engine_api.c), alone over a store, its
    sessions and puller the test's (ops).  */
#include "consumer.h"
#include "daemon.h"
#include "base/clock.h"
#include "daemon/engine_api.h"
#include "testutil.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sodium.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define BLOCK TD_BLOCK_LEN
#define NKEYS 8

static uint8_t s_data[NKEYS][BLOCK];
static uint8_t s_bytes[NKEYS][32];
static p2pkv_key_t s_keys[NKEYS];      //  for the engine
static pk_key_t s_pkeys[NKEYS];        //  the same, for the test consumer

static void
s_setup(void)
{
    for (int i = 0; i < NKEYS; i++) {
        randombytes_buf(s_data[i], BLOCK);
        crypto_hash_sha256(s_bytes[i], s_data[i], BLOCK);
        s_keys[i] = (p2pkv_key_t) { s_bytes[i], 32 };
        s_pkeys[i] = pk_key_make(s_bytes[i], 32);
    }
}

//  Whether fd is readable now (poll(2), not waiting).
static bool
s_readable(int fd, int ms)
{
    struct pollfd pfd = { fd, POLLIN, 0 };
    return poll(&pfd, 1, ms) == 1 && (pfd.revents & POLLIN);
}

//  A server started with flags (NULL: the defaults) and its engine.
static p2pkv_engine_t *
s_open(td_t *s, const char *const *flags, p2pkv_engine_event_fn *on_event, void *arg)
{
    td_start(s, flags);
    return td_engine_open(s, on_event, arg);
}

//  The engine closed, then its server stopped cleanly.
static void
s_close(td_t *s, p2pkv_engine_t **e)
{
    p2pkv_engine_close(e);
    ck_assert_ptr_null(*e);
    ck_assert_int_eq(td_stop(s), 0);
}

//  Two servers: a holds s_keys[0..na), b holds s_keys[na] (for b's pulls
//  from a).
static void
s_open_pair(td_t *a, td_t *b, p2pkv_engine_t **ea, p2pkv_engine_t **eb, size_t na)
{
    *ea = s_open(a, NULL, NULL, NULL);
    *eb = s_open(b, NULL, NULL, NULL);
    td_put(*ea, s_keys, &s_data[0][0], na, BLOCK);
    td_put(*eb, &s_keys[na], s_data[na], 1, BLOCK);
}

static void
s_close_pair(td_t *a, td_t *b, p2pkv_engine_t **ea, p2pkv_engine_t **eb)
{
    p2pkv_engine_close(ea);
    s_close(b, eb);
    ck_assert_int_eq(td_stop(a), 0);
}

//  err names the argument: it starts with name and a colon.
#define S_NAMES(err, name) \
    ck_assert_msg(strncmp((err), name ":", strlen(name ":")) == 0, \
                  "err \"%s\" does not name %s", (err), name)

START_TEST(test_open_fails_clearly_and_in_bounded_time)
{
    char err[P2PKV_ERRLEN] = "";
    ck_assert_ptr_null(p2pkv_engine_open(NULL, 1, NULL, NULL, err));
    S_NAMES(err, "local_endpoint");
    ck_assert_ptr_null(p2pkv_engine_open("nonsense://x", 1, NULL, NULL, err));
    S_NAMES(err, "local_endpoint");
    ck_assert_ptr_null(p2pkv_engine_open("ipc:///tmp/x", 0, NULL, NULL, err));
    S_NAMES(err, "timeout");
    //  nobody there: no answer within the timeout, and not much longer
    char ep[128];
    snprintf(ep, sizeof ep, "ipc:///tmp/p2pkv-e2e-%d-none.sock", (int) getpid());
    double t0 = pk_clock_monotonic();
    ck_assert_ptr_null(p2pkv_engine_open(ep, 0.3, NULL, NULL, err));
    double took = pk_clock_monotonic() - t0;
    ck_assert_msg(took >= 0.25 && took < 2, "open took %.2f s", took);
    S_NAMES(err, "local_endpoint");
    ck_assert_ptr_nonnull(strstr(err, "no answer"));
}
END_TEST

//  An engine's process out of file descriptors gets an error naming them,
//  and lives: the engine's DEALER was made without asking, and czmq aborts
//  a process whose socket cannot be made (it did, in zsock_new).  Once
//  descriptors are free the same call opens the server's engine socket.
START_TEST(test_open_without_descriptors_fails_clearly)
{
    td_t s;
    td_start(&s, NULL);
    struct rlimit mine, low;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &mine), 0);
    low = (struct rlimit) { 256, mine.rlim_max };
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    int fill[256], n = 0;
    while (n < 256 && (fill[n] = dup(2)) >= 0)
        n++;
    ck_assert_msg(n < 256 && errno == EMFILE, "%d descriptors taken: %s", n, strerror(errno));
    char err[P2PKV_ERRLEN] = "";
    ck_assert_ptr_null(p2pkv_engine_open(s.local, 5, NULL, NULL, err));
    ck_assert_msg(strstr(err, "file descriptors"), "open with none free: %s", err);
    while (n > 0)
        close(fill[--n]);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &mine), 0);
    p2pkv_engine_t *e = p2pkv_engine_open(s.local, 5, NULL, NULL, err);
    ck_assert_msg(e != NULL, "open once descriptors were free: %s", err);
    p2pkv_engine_close(&e);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  info says what describe says; bytes the engine writes (both ways) are
//  what a consumer fetches; put publishes one block.
START_TEST(test_info_pool_reserve_write_commit_put)
{
    td_t s;
    p2pkv_engine_t *e = s_open(&s, NULL, NULL, NULL);
    const p2pkv_engine_info_t *info = p2pkv_engine_info(e);
    ck_assert_uint_eq(info->num_blocks, 256);
    ck_assert_uint_eq(info->block_len, BLOCK);
    ck_assert_str_eq(info->pool_name, s.pool);
    ck_assert_str_eq(info->endpoint, s.endpoint);
    ck_assert(strncmp(info->peer_id, "srv-", 4) == 0);
    char err[P2PKV_ERRLEN] = "";
    uint32_t blocks[2];
    ck_assert_int_eq(p2pkv_engine_reserve(e, s_keys, 2, blocks, err), 0);
    ck_assert_uint_lt(blocks[0], 256);
    ck_assert_uint_ne(blocks[0], blocks[1]);
    //  block 0 by p2pkv_engine_write in two halves, block 1 straight into the mapping
    ck_assert_int_eq(p2pkv_engine_write(e, blocks[0], 0, s_data[0], BLOCK / 2, err), 0);
    ck_assert_int_eq(p2pkv_engine_write(e, blocks[0], BLOCK / 2, s_data[0] + BLOCK / 2,
                                        BLOCK / 2, err), 0);
    memcpy(p2pkv_engine_pool(e) + (size_t) blocks[1] * BLOCK, s_data[1], BLOCK);
    ck_assert_uint_eq(td_stats(e).writing, 2);
    ck_assert_int_eq(p2pkv_engine_commit(e, s_keys, 2, err), 0);
    //  committed: no longer this handle's to write
    ck_assert_int_eq(p2pkv_engine_write(e, blocks[0], 0, s_data[0], 1, err), -EINVAL);
    S_NAMES(err, "block");
    ck_assert_int_eq(p2pkv_engine_put(e, &s_keys[2], s_data[2], BLOCK, err), 0);
    ck_assert_int_eq(p2pkv_engine_put(e, &s_keys[2], s_data[2], BLOCK, err), 1);
    ck_assert_int_eq(p2pkv_engine_put(e, &s_keys[3], s_data[3], BLOCK - 1, err), -EINVAL);
    S_NAMES(err, "len");
    p2pkv_engine_stats_t st = td_stats(e);
    ck_assert_uint_eq(st.ready, 3);
    ck_assert_uint_eq(st.writing, 0);
    ck_assert_uint_eq(st.free, 253);
    tc_t *tc = tc_to(s.endpoint, "c-map");
    tc_get(tc, "r1", 1, s_pkeys, 3, 10, s_data[0]);
    ck_assert_uint_eq(td_stats(e).sessions, 1);
    ck_assert_uint_eq(td_stats(e).hits, 3);
    tc_destroy(&tc);
    s_close(&s, &e);
}
END_TEST

START_TEST(test_drop_and_stats_json)
{
    td_t s;
    p2pkv_engine_t *e = s_open(&s, NULL, NULL, NULL);
    td_put(e, s_keys, &s_data[0][0], 3, BLOCK);
    char err[P2PKV_ERRLEN] = "";
    ck_assert_int_eq(p2pkv_engine_drop(e, &s_keys[1], 1, err), 0);
    p2pkv_engine_stats_t st = td_stats(e);
    ck_assert_uint_eq(st.ready, 2);
    ck_assert_uint_eq(st.free, 254);
    char *text = p2pkv_engine_stats_json(e, err);
    ck_assert_ptr_nonnull(text);
    json_t *j = json_loads(text, 0, NULL);
    free(text);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "pool"), "ready")), 2);
    ck_assert_ptr_nonnull(json_object_get(j, "metrics"));
    json_decref(j);
    s_close(&s, &e);
}
END_TEST

//  What the library refuses before asking, each naming the argument, and
//  what the server refuses, with its sentence.
START_TEST(test_bad_input)
{
    td_t s;
    p2pkv_engine_t *e = s_open(&s, NULL, NULL, NULL);
    char err[P2PKV_ERRLEN] = "";
    uint32_t block;
    uint8_t big[P2PKV_ENGINE_MAX_KEY + 1] = { 0 };
    p2pkv_key_t empty = { s_bytes[0], 0 }, toolong = { big, sizeof big };
    ck_assert_int_eq(p2pkv_engine_reserve(e, &empty, 1, &block, err), -EINVAL);
    S_NAMES(err, "keys[0]");
    p2pkv_key_t two[2] = { s_keys[0], toolong };
    ck_assert_int_eq(p2pkv_engine_reserve(e, two, 2, &block, err), -EINVAL);
    S_NAMES(err, "keys[1]");
    ck_assert_int_eq(p2pkv_engine_put(e, &toolong, big, BLOCK, err), -EINVAL);
    S_NAMES(err, "key");
    ck_assert_int_eq(p2pkv_engine_drop(e, s_keys, 0, err), -EINVAL);
    S_NAMES(err, "n");
    ck_assert_int_eq(p2pkv_engine_drop(e, s_keys, P2PKV_ENGINE_MAX_LIST + 1, err), -EINVAL);
    S_NAMES(err, "n");
    ck_assert_int_eq(p2pkv_engine_commit(e, NULL, 1, err), -EINVAL);
    S_NAMES(err, "keys");
    ck_assert_int_eq(p2pkv_engine_reserve(e, s_keys, 1, NULL, err), -EINVAL);
    S_NAMES(err, "blocks");
    //  writes outside this handle's reservations
    ck_assert_int_eq(p2pkv_engine_write(e, 0, 0, s_data[0], 1, err), -EINVAL);
    S_NAMES(err, "block");
    ck_assert_int_eq(p2pkv_engine_write(e, 1000000, 0, s_data[0], 1, err), -EINVAL);
    S_NAMES(err, "block");
    ck_assert_int_eq(p2pkv_engine_reserve(e, s_keys, 1, &block, err), 0);
    ck_assert_int_eq(p2pkv_engine_write(e, block, BLOCK + 1, s_data[0], 1, err), -EINVAL);
    S_NAMES(err, "offset");
    ck_assert_int_eq(p2pkv_engine_write(e, block, 1, s_data[0], BLOCK, err), -EINVAL);
    S_NAMES(err, "len");
    //  a commit of a key this handle did not reserve
    ck_assert_int_eq(p2pkv_engine_commit(e, &s_keys[1], 1, err), -ENOENT);
    S_NAMES(err, "keys[0]");
    ck_assert_int_eq(p2pkv_engine_commit(e, s_keys, 1, err), 0);
    uint64_t id;
    ck_assert_int_eq(p2pkv_engine_pull(e, "", s_keys, 1, &id, NULL, NULL, err), -EINVAL);
    S_NAMES(err, "endpoint");
    ck_assert_int_eq(p2pkv_engine_store(e, "", "kv", s_keys, 1, -1, &id, err), -EINVAL);
    S_NAMES(err, "consumer");
    ck_assert_int_eq(p2pkv_engine_finish(e, "c", NULL, err), -EINVAL);
    S_NAMES(err, "kv");
    //  the server's refusals: a key in the pool, a store of keys it lacks
    ck_assert_int_eq(p2pkv_engine_reserve(e, s_keys, 1, &block, err), -EEXIST);
    ck_assert_str_eq(err, "reserve: a key is already in the pool");
    ck_assert_int_eq(p2pkv_engine_store(e, "c", "kv", &s_keys[5], 1, -1, &id, err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "is not ready in the pool"));
    s_close(&s, &e);
}
END_TEST

//  A key pinned by a store cannot be dropped (-EBUSY); a full pool
//  cannot be reserved in (-ENOSPC).
START_TEST(test_busy_and_full)
{
    td_t s;
    p2pkv_engine_t *e = s_open(&s, (const char *const[]) { "--pool-blocks", "4", NULL }, NULL,
                               NULL);
    char err[P2PKV_ERRLEN] = "";
    td_put(e, s_keys, &s_data[0][0], 1, BLOCK);
    uint64_t job;
    ck_assert_int_eq(p2pkv_engine_store(e, "c-never", "kv", s_keys, 1, -1, &job, err), 0);
    ck_assert_int_eq(p2pkv_engine_drop(e, s_keys, 1, err), -EBUSY);
    ck_assert_str_eq(err, "drop: a key is pinned by a transfer");
    uint32_t blocks[4];
    ck_assert_int_eq(p2pkv_engine_reserve(e, &s_keys[1], 3, blocks, err), 0);
    ck_assert_int_eq(p2pkv_engine_reserve(e, &s_keys[4], 1, blocks, err), -ENOSPC);
    ck_assert_str_eq(err, "reserve: every block is pinned or being written");
    ck_assert_int_eq(p2pkv_engine_put(e, &s_keys[4], s_data[4], BLOCK, err), -ENOSPC);
    s_close(&s, &e);
}
END_TEST

//  A consumer's get of s_keys[i] from s: landed, verified, s_data[i]'s bytes.
static void
s_expect_served(td_t *s, size_t i)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = "c-served", .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = "127.0.0.1" };
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 1, BLOCK, (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_msg(c != NULL, "%s", err);
    int server = p2pkv_client_connect(c, s->endpoint, 10, err);
    ck_assert_msg(server >= 0, "%s", err);
    uint32_t dest = 0;
    p2pkv_key_result_t r;
    ck_assert_int_eq(p2pkv_client_get_results(c, server, "served", &s_keys[i], &dest, 1, true,
                                              10, &r, NULL, NULL, err), 1);
    ck_assert_int_eq(r.status, P2PKV_KEY_LANDED);
    ck_assert(r.verified);
    ck_assert_int_eq(memcmp(p2pkv_client_pool(c), s_data[i], BLOCK), 0);
    p2pkv_client_destroy(&c);
}

//  A checksum the engine took for a whole-block write goes with that
//  block's commit only: a block whose reservation ran out uncommitted, then
//  reserved anew (the pool's one block) and written through the mapping,
//  is committed with the server's own checksum, and a consumer gets it
//  whole and verified, not corrupt.
START_TEST(test_write_checksum_not_reused_after_a_lease)
{
    td_t s;
    p2pkv_engine_t *e = s_open(&s, (const char *const[]) { "--pool-blocks", "1",
                                                          "--lease-timeout", "1", NULL },
                               NULL, NULL);
    char err[P2PKV_ERRLEN] = "";
    uint32_t b;
    ck_assert_int_eq(p2pkv_engine_reserve(e, &s_keys[0], 1, &b, err), 0);
    ck_assert_int_eq(p2pkv_engine_write(e, b, 0, s_data[0], BLOCK, err), 0);
    //  the lease runs out: the block is free again (waited for, bounded)
    double until = pk_clock_monotonic() + 20;
    while (td_stats(e).free != 1 && pk_clock_monotonic() < until)
        zclock_sleep(20);
    ck_assert_uint_eq(td_stats(e).free, 1);
    uint32_t b2;
    ck_assert_int_eq(p2pkv_engine_reserve(e, &s_keys[1], 1, &b2, err), 0);
    ck_assert_uint_eq(b2, b);
    memcpy((uint8_t *) p2pkv_engine_pool(e) + (size_t) b2 * BLOCK, s_data[1], BLOCK);
    ck_assert_int_eq(p2pkv_engine_commit(e, &s_keys[1], 1, err), 0);
    s_expect_served(&s, 1);
    s_close(&s, &e);
}
END_TEST

//  A handle whose reservation ran out may not copy into the block any
//  more: the server freed it and another handle reserved, wrote and
//  committed it (the pool's one block); the late write is refused
//  (-ETIMEDOUT, naming the lease) and the committed bytes stay the other
//  writer's, which a consumer gets verified.  Before, the late copy
//  returned 0 and changed a served block under its checksum.
START_TEST(test_write_after_its_lease_refused)
{
    td_t s;
    p2pkv_engine_t *a = s_open(&s, (const char *const[]) { "--pool-blocks", "1",
                                                          "--lease-timeout", "1", NULL },
                               NULL, NULL);
    p2pkv_engine_t *b = td_engine_open(&s, NULL, NULL);
    char err[P2PKV_ERRLEN] = "";
    uint32_t ba, bb;
    ck_assert_int_eq(p2pkv_engine_reserve(a, &s_keys[0], 1, &ba, err), 0);
    //  the one block is a's until its lease ends: b's reserve waits for it
    double until = pk_clock_monotonic() + 60;
    int rc;
    while ((rc = p2pkv_engine_reserve(b, &s_keys[1], 1, &bb, err)) != 0
           && pk_clock_monotonic() < until)
        zclock_sleep(20);
    ck_assert_msg(rc == 0, "b's reserve: %s", err);
    ck_assert_uint_eq(bb, ba);
    ck_assert_int_eq(p2pkv_engine_write(b, bb, 0, s_data[1], BLOCK, err), 0);
    ck_assert_int_eq(p2pkv_engine_commit(b, &s_keys[1], 1, err), 0);
    ck_assert_int_eq(p2pkv_engine_write(a, ba, 0, s_data[0], BLOCK, err), -ETIMEDOUT);
    ck_assert_msg(strstr(err, "lease"), "the refusal names the lease: %s", err);
    ck_assert_int_eq(p2pkv_engine_write(a, ba, 16, s_data[0], 16, err), -ETIMEDOUT);
    ck_assert_int_eq(memcmp(p2pkv_engine_pool(b) + (size_t) bb * BLOCK, s_data[1], BLOCK), 0);
    s_expect_served(&s, 1);
    p2pkv_engine_close(&b);
    s_close(&s, &a);
}
END_TEST

//  A metric's total in the server's stats (its metrics as last
//  published), or -1 when it is not there yet.
static int64_t
s_metric(td_t *s, const char *name)
{
    json_t *st = td_stats_json(s);
    json_t *v = json_object_get(json_object_get(json_object_get(st, "metrics"), name), "total");
    int64_t n = json_is_integer(v) ? json_integer_value(v)
                : json_is_real(v) ? (int64_t) json_real_value(v) : -1;
    json_decref(st);
    return n;
}

//  Waits (60 s bound) until the metric name reaches want: its total.
static int64_t
s_metric_reach(td_t *s, const char *name, int64_t want)
{
    double until = pk_clock_monotonic() + 60;
    int64_t n;
    while ((n = s_metric(s, name)) < want && pk_clock_monotonic() < until)
        zclock_sleep(20);
    return n;
}

//  Blocks written through the mapping (and one in halves) are committed
//  with the checksums the engine takes, so the server reads none of them:
//  a server taking them held its door and its store for the whole commit
//  (4,096 blocks of 64 KiB: 0.45 s idle, 2.2 s loaded, no session
//  answered; doc/design.md, "A commit's checksums are the writer's").
//  The sums are right (a consumer gets every block verified); a pull,
//  which has no writer's sums, is still summed by the server, and counted.
START_TEST(test_mapping_writes_summed_by_the_writer)
{
    td_t a, b;
    p2pkv_engine_t *ea = s_open(&a, NULL, NULL, NULL), *eb = s_open(&b, NULL, NULL, NULL);
    char err[P2PKV_ERRLEN] = "";
    uint32_t blocks[NKEYS];
    ck_assert_int_eq(p2pkv_engine_reserve(ea, s_keys, NKEYS, blocks, err), 0);
    for (int i = 1; i < NKEYS; i++)
        memcpy(p2pkv_engine_pool(ea) + (size_t) blocks[i] * BLOCK, s_data[i], BLOCK);
    ck_assert_int_eq(p2pkv_engine_write(ea, blocks[0], 0, s_data[0], BLOCK / 2, err), 0);
    ck_assert_int_eq(p2pkv_engine_write(ea, blocks[0], BLOCK / 2, s_data[0] + BLOCK / 2,
                                        BLOCK / 2, err), 0);
    ck_assert_int_eq(p2pkv_engine_commit(ea, s_keys, NKEYS, err), 0);
    //  the metrics as published once the commit's blocks are counted ready
    ck_assert_int_eq(s_metric_reach(&a, "p2pkv_pool_ready_blocks", NKEYS), NKEYS);
    ck_assert_int_eq(s_metric(&a, "p2pkv_pool_checksums_taken_total"), 0);
    tc_t *tc = tc_to(a.endpoint, "c-summed");
    tc_get(tc, "r1", 1, s_pkeys, NKEYS, 10, s_data[0]);
    tc_destroy(&tc);
    //  the puller's commit: the server takes each landed block's sum
    uint64_t id = 0;
    size_t fetching = 0;
    bool present[NKEYS];
    ck_assert_int_eq(p2pkv_engine_pull(eb, a.endpoint, s_keys, NKEYS, &id, &fetching, present,
                                       err), 0);
    ck_assert_uint_eq(td_event(eb, P2PKV_EVENT_PULL, id, 30).landed, NKEYS);
    ck_assert_int_eq(s_metric_reach(&b, "p2pkv_pool_checksums_taken_total", NKEYS), NKEYS);
    p2pkv_engine_close(&ea);
    ck_assert_int_eq(td_stop(&a), 0);
    s_close(&b, &eb);
}
END_TEST

typedef struct {
    int n;
    p2pkv_engine_event_t last;
} s_seen_t;

static void
s_on_event(void *arg, const p2pkv_engine_event_t *event)
{
    s_seen_t *seen = arg;
    seen->n++;
    seen->last = *event;
}

//  Prefill/decode: the store's end arrives as P2PKV_EVENT_STORE, by the
//  callback through p2pkv_engine_poll.
START_TEST(test_store_event_by_callback)
{
    td_t s;
    s_seen_t seen = { 0 };
    p2pkv_engine_t *e = s_open(&s, NULL, s_on_event, &seen);
    td_put(e, s_keys, &s_data[0][0], 2, BLOCK);
    char err[P2PKV_ERRLEN] = "";
    uint64_t job = 0;
    ck_assert_int_eq(p2pkv_engine_store(e, "c-pd", "req-1", s_keys, 2, -1, &job, err), 0);
    ck_assert_uint_gt(job, 0);
    ck_assert_int_eq(p2pkv_engine_poll(e, 0), 0);
    tc_t *tc = tc_to(s.endpoint, "c-pd");
    tc_fetch_into(tc, "req-1", 5, s_pkeys, 2, 10, s_data[0]);
    double deadline = pk_clock_monotonic() + 10;
    while (seen.n == 0 && pk_clock_monotonic() < deadline)
        ck_assert_int_ge(p2pkv_engine_poll(e, 0.1), 0);
    ck_assert_int_eq(seen.n, 1);
    //  the store job ended, and the consumer got its blocks
    ck_assert_int_eq(seen.last.kind, P2PKV_EVENT_STORE);
    ck_assert_uint_eq(seen.last.id, job);
    ck_assert(seen.last.success);
    ck_assert_int_eq(p2pkv_engine_finish(e, "c-pd", "req-1", err), 0);
    ck_assert_uint_eq(td_stats(e).pinned, 0);
    tc_destroy(&tc);
    s_close(&s, &e);
}
END_TEST

//  The same event by fd and next_event.  The fd stays readable when a
//  request read the event off the socket first (ZMQ_FD alone would not
//  signal again), and goes quiet once the event is taken.
START_TEST(test_store_event_by_fd)
{
    td_t s;
    p2pkv_engine_t *e = s_open(&s, NULL, NULL, NULL);
    int fd = p2pkv_engine_fd(e);
    ck_assert_int_ge(fd, 0);
    td_put(e, s_keys, &s_data[0][0], 2, BLOCK);
    char err[P2PKV_ERRLEN] = "";
    uint64_t job = 0;
    ck_assert_int_eq(p2pkv_engine_store(e, "c-fd", "req-1", s_keys, 2, 3, &job, err), 0);
    ck_assert(!s_readable(fd, 0));
    p2pkv_engine_event_t ev;
    ck_assert_int_eq(p2pkv_engine_next_event(e, 0, &ev), -ETIMEDOUT);
    tc_t *tc = tc_to(s.endpoint, "c-fd");
    tc_fetch_into(tc, "req-1", 3, s_pkeys, 2, 10, s_data[0]);
    ck_assert_msg(s_readable(fd, 10000), "no event on the fd within 10 s");
    //  a request reads the event into the queue on its way to the answer
    td_stats(e);
    ck_assert(s_readable(fd, 0));
    ck_assert(td_event(e, P2PKV_EVENT_STORE, job, 0).success);
    ck_assert(!s_readable(fd, 0));
    ck_assert_int_eq(p2pkv_engine_next_event(e, 0, &ev), -ETIMEDOUT);
    tc_destroy(&tc);
    s_close(&s, &e);
}
END_TEST

//  b pulls from a: a key b has is present, a key a lacks is missing, and
//  the P2PKV_EVENT_PULL event says so.
START_TEST(test_pull_event)
{
    td_t a, b;
    p2pkv_engine_t *ea, *eb;
    s_open_pair(&a, &b, &ea, &eb, 3);
    static uint8_t absent_bytes[2] = { 0x00, 0xff };
    p2pkv_key_t keys[5] = { s_keys[0], s_keys[3], s_keys[1], s_keys[2], { absent_bytes, 2 } };
    char err[P2PKV_ERRLEN] = "";
    uint64_t id = 0;
    size_t fetching = 0;
    bool present[5];
    ck_assert_int_eq(p2pkv_engine_pull(eb, a.endpoint, keys, 5, &id, &fetching, present, err),
                     0);
    ck_assert_uint_eq(fetching, 4);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(present[i], i == 1);
    p2pkv_engine_event_t ev = td_event(eb, P2PKV_EVENT_PULL, id, 30);
    ck_assert(!ev.success);
    ck_assert_uint_eq(ev.landed, 3);
    ck_assert_uint_eq(ev.missing, 1);
    ck_assert_uint_eq(ev.missing_keys[0].len, 2);
    ck_assert_mem_eq(ev.missing_keys[0].bytes, absent_bytes, 2);
    //  per key (issue 36): the landed ones from a, the present one from
    //  nowhere, the absent one missing as absent (a has the reasons)
    p2pkv_engine_pull_key_t res[5];
    ck_assert_int_eq(p2pkv_engine_pull_keys(eb, id, keys, 5, res, err), 0);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(res[i].status, P2PKV_KEY_LANDED);
        ck_assert_msg(i == 1 ? !res[i].source
                             : res[i].source && strcmp(res[i].source, a.endpoint) == 0,
                      "key %d from %s", i, res[i].source ? res[i].source : "(none)");
    }
    ck_assert_int_eq(res[4].status, P2PKV_KEY_MISSING);
    ck_assert_int_eq(res[4].reason, P2PKV_MISS_ABSENT);
    ck_assert_uint_eq(td_stats(eb).ready, 4);
    //  nothing to fetch: the answer says present, and an event still follows
    uint64_t id2 = 0;
    ck_assert_int_eq(p2pkv_engine_pull(eb, a.endpoint, &s_keys[3], 1, &id2, &fetching, present,
                                       err), 0);
    ck_assert_uint_eq(fetching, 0);
    ck_assert(present[0]);
    ck_assert_uint_eq(td_event(eb, P2PKV_EVENT_PULL, id2, 30).missing, 0);
    //  another event delivered since: the first pull's are no longer kept
    ck_assert_int_eq(p2pkv_engine_pull_keys(eb, id, keys, 5, res, err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "not pull"));
    //  the pulled bytes are in b's pool
    tc_t *tc = tc_to(b.endpoint, "c-of-b");
    tc_get(tc, "r1", 1, s_pkeys, 4, 10, s_data[0]);
    tc_destroy(&tc);
    s_close_pair(&a, &b, &ea, &eb);
}
END_TEST

//  A request that timed out (the server stopped) leaves its answer to come
//  late; it is dropped, not taken for the next request's answer.
START_TEST(test_late_answer_is_not_the_next_ones)
{
    td_t s;
    p2pkv_engine_t *e = s_open(&s, NULL, NULL, NULL);
    char err[P2PKV_ERRLEN] = "";
    ck_assert_int_eq(kill(s.pid, SIGSTOP), 0);
    p2pkv_engine_set_timeout(e, 0.3);
    uint32_t block;
    double t0 = pk_clock_monotonic();
    ck_assert_int_eq(p2pkv_engine_reserve(e, s_keys, 1, &block, err), -ETIMEDOUT);
    ck_assert_double_lt(pk_clock_monotonic() - t0, 2);
    ck_assert_ptr_nonnull(strstr(err, "no answer"));
    ck_assert_int_eq(kill(s.pid, SIGCONT), 0);
    p2pkv_engine_set_timeout(e, 10);
    //  the reserve's answer comes first: a stats that took it would see no pool
    p2pkv_engine_stats_t st = td_stats(e);
    ck_assert_uint_eq(st.writing, 1);
    ck_assert_uint_eq(st.free, 255);
    s_close(&s, &e);
}
END_TEST

//  p2pkv pull (bin/p2pkv.c, through this API): each key's fate, and the
//  exit status 1 for a missing one; with --verbose, where each landed key
//  came from and why a missing one missed; --json, the same as objects.
static int
s_cli(const char *cmd, char *got, size_t cap)
{
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(got, 1, cap - 1, p);
    got[n] = '\0';
    return WEXITSTATUS(pclose(p));
}

START_TEST(test_cli_pull)
{
    td_t a, b;
    p2pkv_engine_t *ea, *eb;
    s_open_pair(&a, &b, &ea, &eb, 2);
    char hex[3][65], cmd[1024], want[1024], got[1024] = "";
    for (int i = 0; i < 3; i++)
        pk_hex_encode(s_bytes[i], 32, hex[i]);
    snprintf(cmd, sizeof cmd, "bin/p2pkv pull --local %s --server %s --verbose %s %s 00ff",
             b.local, a.endpoint, hex[0], hex[2]);
    snprintf(want, sizeof want, "%s landed from %s\n%s present\n00ff missing absent\n",
             hex[0], a.endpoint, hex[2]);
    ck_assert_int_eq(s_cli(cmd, got, sizeof got), 1);
    ck_assert_str_eq(got, want);
    snprintf(cmd, sizeof cmd, "bin/p2pkv pull --local %s --server %s %s %s %s 00ff", b.local,
             a.endpoint, hex[0], hex[2], hex[1]);
    snprintf(want, sizeof want, "%s present\n%s present\n%s landed\n00ff missing\n", hex[0],
             hex[2], hex[1]);
    ck_assert_int_eq(s_cli(cmd, got, sizeof got), 1);
    ck_assert_str_eq(got, want);
    snprintf(cmd, sizeof cmd, "bin/p2pkv pull --local %s --server %s --json %s 00fe", b.local,
             a.endpoint, hex[1]);
    snprintf(want, sizeof want, "[{\"key\":\"%s\",\"status\":\"present\"},"
             "{\"key\":\"00fe\",\"status\":\"missing\",\"reason\":\"absent\"}]\n", hex[1]);
    ck_assert_int_eq(s_cli(cmd, got, sizeof got), 1);
    ck_assert_str_eq(got, want);
    ck_assert_uint_eq(td_stats(eb).ready, 3);
    s_close_pair(&a, &b, &ea, &eb);
}
END_TEST

//  --------------------------------------------------------------------------
//  The engine API class alone: a store and the test's ops, no node

typedef struct {
    json_t *sent[8];                //  what send was given (answers, events)
    size_t nsent;
    bool connected;                 //  whether "c1" has a session
    pk_held_t *delivered;           //  the last store deliver was given
} s_ops_t;

static void
s_api_send(void *arg, const void *rid, size_t rlen, json_t *msg)
{
    s_ops_t *o = arg;
    ck_assert_uint_lt(o->nsent, 8);
    o->sent[o->nsent++] = msg;
}

static int
s_api_session(void *arg, const char *consumer, unsigned *ns)
{
    s_ops_t *o = arg;
    *ns = 0;
    return o->connected && streq(consumer, "c1") ? 0 : -ENOENT;
}

static int
s_api_deliver(void *arg, const char *consumer, pk_held_t *h)
{
    s_ops_t *o = arg;
    ck_assert_str_eq(consumer, "c1");
    ck_assert_ptr_null(o->delivered);
    o->delivered = h;
    return 0;
}

static int
s_api_pull(void *arg, pk_pull_t *p)
{
    return -EAGAIN;
}

static void
s_api_stats(void *arg, json_t *answer)
{
    json_object_set_new(answer, "sessions", json_integer(((s_ops_t *) arg)->connected));
}

static const pk_engine_api_ops_t s_api_ops = {
    s_api_send, s_api_session, s_api_deliver, s_api_pull, s_api_stats
};

static json_t *
s_ask(pk_engine_api_t *api, const char *fmt, ...)
{
    char body[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    return pk_engine_api_answer(api, body, strlen(body), "engine-1", 8);
}

//  describe names this start's instance, a request naming another is
//  refused; a store for a consumer without a session is held until it
//  connects, then delivered; its job's end is a store_result event.
START_TEST(test_engine_api_alone)
{
    pk_server_config_t config;
    ck_assert_int_eq(pk_server_config_defaults(&config), 0);
    char name[64];
    snprintf(name, sizeof name, "/p2pkv-test-engine-api-%d", (int) getpid());
    pk_store_t *store = pk_store_new(name, 4, BLOCK, NULL, pk_clock_system(), NULL, NULL,
                                     NULL, NULL);
    ck_assert_ptr_nonnull(store);
    s_ops_t o = { 0 };
    pk_engine_api_t *api = pk_engine_api_new(&config, store, "tcp://127.0.0.1:1", &s_api_ops,
                                              &o);
    ck_assert_ptr_nonnull(api);

    json_t *a = s_ask(api, "{\"cmd\":\"describe\"}");
    ck_assert(json_is_true(json_object_get(a, "ok")));
    ck_assert_str_eq(json_string_value(json_object_get(a, "endpoint")), "tcp://127.0.0.1:1");
    const char *instance = json_string_value(json_object_get(a, "instance"));
    ck_assert_uint_eq(strlen(instance), 32);
    json_t *b = s_ask(api, "{\"cmd\":\"stats\",\"instance\":\"%s\"}", instance);
    ck_assert(json_is_true(json_object_get(b, "ok")));
    ck_assert_int_eq(json_integer_value(json_object_get(b, "sessions")), 0);   //  the ops'
    ck_assert_ptr_nonnull(json_object_get(b, "namespaces"));                  //  the class's
    json_decref(b);
    b = s_ask(api, "{\"cmd\":\"stats\",\"instance\":\"%032d\"}", 7);
    ck_assert(json_is_false(json_object_get(b, "ok")));
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(b, "error")),
                                 "the server restarted"));
    json_decref(b);
    json_decref(a);

    char *data = malloc(sodium_base64_ENCODED_LEN(BLOCK, sodium_base64_VARIANT_ORIGINAL));
    sodium_bin2base64(data, sodium_base64_ENCODED_LEN(BLOCK, sodium_base64_VARIANT_ORIGINAL),
                      s_data[0], BLOCK, sodium_base64_VARIANT_ORIGINAL);
    char hex[65];
    sodium_bin2hex(hex, sizeof hex, s_bytes[0], 32);
    a = pk_engine_api_answer(api, "{\"cmd\":\"put\",\"key\":\"\"}", 21, "e", 1);
    ck_assert(json_is_false(json_object_get(a, "ok")));
    json_decref(a);
    char *put = malloc(strlen(data) + 128);
    ck_assert_ptr_nonnull(put);
    sprintf(put, "{\"cmd\":\"put\",\"key\":\"%s\",\"data\":\"%s\"}", hex, data);
    a = pk_engine_api_answer(api, put, strlen(put), "e", 1);
    ck_assert(json_is_true(json_object_get(a, "ok")));
    json_decref(a);
    free(put);
    free(data);

    //  held: c1 has no session
    a = s_ask(api, "{\"cmd\":\"store\",\"peer\":\"c1\",\"kv\":\"r1\",\"keys\":[\"%s\"]}", hex);
    ck_assert(json_is_true(json_object_get(a, "ok")));
    uint64_t job = (uint64_t) json_integer_value(json_object_get(a, "job"));
    json_decref(a);
    ck_assert_uint_eq(pk_held_list_jobs(pk_engine_api_held(api)), 1);
    ck_assert_uint_eq(pk_engine_api_jobs(api), 1);
    ck_assert_ptr_null(o.delivered);
    pk_engine_api_connected(api, "c2", 0);                  //  someone else's connect
    ck_assert_ptr_null(o.delivered);
    o.connected = true;
    pk_engine_api_connected(api, "c1", 0);
    ck_assert_ptr_nonnull(o.delivered);
    ck_assert_uint_eq(o.delivered->job, job);
    ck_assert_str_eq(o.delivered->kv, "r1");
    ck_assert_uint_eq(pk_held_list_size(pk_engine_api_held(api)), 0);

    //  the session's job ends: the engine that stored is told
    pk_store_release_job(store, job);
    pk_engine_api_job(api, job, true);
    ck_assert_uint_eq(o.nsent, 1);
    ck_assert_str_eq(json_string_value(json_object_get(o.sent[0], "event")), "store_result");
    ck_assert_int_eq(json_integer_value(json_object_get(o.sent[0], "job")), (json_int_t) job);
    ck_assert(json_is_true(json_object_get(o.sent[0], "success")));
    ck_assert_uint_eq(pk_engine_api_jobs(api), 0);
    pk_held_destroy(&o.delivered);

    //  a pull the puller cannot take is refused, its blocks released
    a = s_ask(api, "{\"cmd\":\"pull\",\"server\":\"tcp://x:1\",\"keys\":[\"%064d\"]}", 1);
    ck_assert(json_is_false(json_object_get(a, "ok")));
    json_decref(a);
    pk_store_stats_t st;
    pk_store_stats(store, &st);
    ck_assert_uint_eq(st.writing, 0);
    ck_assert_uint_eq(st.pinned, 0);

    for (size_t i = 0; i < o.nsent; i++)
        json_decref(o.sent[i]);
    pk_engine_api_destroy(&api);
    ck_assert_ptr_null(api);
    pk_store_destroy(&store);
    pk_server_config_fini(&config);
}
END_TEST

int
main(void)
{
    int skip = td_suite_start();
    if (skip)
        return skip;
    s_setup();
    Suite *suite = suite_create("engine");
    TCase *tc = td_case(suite, "engine", 0);
    tcase_add_test(tc, test_open_fails_clearly_and_in_bounded_time);
    tcase_add_test(tc, test_open_without_descriptors_fails_clearly);
    tcase_add_test(tc, test_info_pool_reserve_write_commit_put);
    tcase_add_test(tc, test_drop_and_stats_json);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_busy_and_full);
    tcase_add_test(tc, test_write_checksum_not_reused_after_a_lease);
    tcase_add_test(tc, test_write_after_its_lease_refused);
    tcase_add_test(tc, test_mapping_writes_summed_by_the_writer);
    tcase_add_test(tc, test_store_event_by_callback);
    tcase_add_test(tc, test_store_event_by_fd);
    tcase_add_test(tc, test_pull_event);
    tcase_add_test(tc, test_late_answer_is_not_the_next_ones);
    tcase_add_test(tc, test_cli_pull);
    tcase_add_test(tc, test_engine_api_alone);
    return pk_test_run("engine", suite);
}
