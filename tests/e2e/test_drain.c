/*  test_drain.c: SIGTERM drains (issue 36, point 3; p2pkv-server(8),
    SIGNALS).  A rolling restart loses nothing: the server leaves the
    directory, answers new lookups as misses, lets the fetches consumers
    asked for finish and be answered as ever, and only then tells them
    `disconnect shutdown` and exits 0; a second signal still exits at once
    (status 1).

    Real p2pkv-server processes (tests/daemon.c) over the tcp provider on
    127.0.0.1, raw consumers (tests/consumer.c) that decide when their
    endpoint progresses, so a write is truly in flight when the signal
    comes, a held actor ($P2PKV_TEST_HOLD_SESSION) to hold a drain open,
    and a real redis-server (tests/redis.c) for the directory.  The drain
    is seen to have begun when the engine API refuses a reserve with
    "the server is draining" (it is set in the same step as the lookups'
    misses), never by sleeping; every timeout a server is given is far
    beyond what the tests wait, so only the drain itself can end it.
*/
#include "p2pkv.h"
#include "p2pkv_engine.h"
#include "base/clock.h"
#include "blocks.h"
#include "cluster/dir_entry.h"
#include "consumer.h"
#include "daemon.h"
#include "redis.h"
#include "wire/protocol.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BOUND 20.0                  //  seconds any one wait may take
#define LONG "60"                   //  the servers' timeouts: never reached here

//  Signals and waits

//  Waits (bounded) until the server's engine API refuses a reserve of
//  key, a key it holds, as draining: until then it answers -EEXIST.
static void
s_wait_draining(td_t *s, const p2pkv_key_t *key)
{
    double deadline = pk_clock_monotonic() + BOUND;
    while (true) {
        uint32_t block;
        char err[P2PKV_ERRLEN] = "";
        int rc = p2pkv_engine_reserve(td_api(s), key, 1, &block, err);
        if (rc == -ESHUTDOWN) {
            ck_assert_msg(strstr(err, "draining"), "refused as: %s", err);
            return;
        }
        ck_assert_msg(rc == -EEXIST, "reserve of a key held: %d %s", rc, err);
        ck_assert_msg(pk_clock_monotonic() < deadline, "no drain within %g s of SIGTERM",
                      BOUND);
    }
}

//  The server's exit status, waited for within bound seconds (the test
//  fails past it: the server is then killed); its engine sockets closed.
static int
s_reap(td_t *s, double bound)
{
    zsock_destroy(&s->engine);
    p2pkv_engine_close(&s->api);
    double deadline = pk_clock_monotonic() + bound;
    int status = -1;
    while (waitpid(s->pid, &status, WNOHANG) != s->pid) {
        if (pk_clock_monotonic() >= deadline) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            ck_abort_msg("the server did not exit within %g s", bound);
        }
        zclock_sleep(5);
    }
    return status;
}

//  Whether the server is still running (its drain held open).
static bool
s_running(td_t *s)
{
    int status;
    return waitpid(s->pid, &status, WNOHANG) == 0;
}

//  Lets a held actor (td_start_held) go.
static void
s_release(const char *release)
{
    int fd = open(release, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static bool
s_all_misses(const pk_msg_t *m)
{
    for (size_t i = 0; i < m->keys.count; i++)
        if (m->hits[i])
            return false;
    return m->keys.count > 0;
}

//  ---------------------------------------------------------------------------
//  (1) fetches in flight finish, new lookups miss, exit 0 after them

#define BIG (64 * 1024)
#define NBIG 1024                   //  64 MiB: more than loopback's buffers hold
#define NEARLY 8                    //  keys looked up before the signal, fetched after

//  The server's gauge of transfers in flight.
static double
s_in_flight(td_t *s)
{
    json_t *st = td_stats_json(s);
    json_t *f = json_object_get(json_object_get(st, "metrics"), "p2pkv_transfers_in_flight");
    double n = json_number_value(json_object_get(f, "total"));
    json_decref(st);
    return n;
}

//  Every block of round landed in tc's pool at block i, whole.
static void
s_check_blocks(tc_t *tc, uint64_t round, size_t n)
{
    //  transfer_done may come before the last immediates are read
    double deadline = pk_clock_monotonic() + BOUND;
    while (tc_landed(tc, round) < n && pk_clock_monotonic() < deadline)
        tc_progress(tc, 0.001);
    ck_assert_uint_eq(tc_landed(tc, round), n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(bk_block_ok(tc_pool(tc) + i * BIG, 1, i, BIG), "block %zu differs", i);
}

//  SIGTERM while consumer c-stuck has a fetch of NBIG blocks in flight
//  (it progressed its endpoint until the first blocks landed, then
//  stopped: nothing more can land) and c-early holds hits of a lookup it
//  has not fetched yet.  Then: a reserve is refused as draining, a new
//  connect is refused with disconnect shutdown, c-early's new lookup is
//  all misses, c-stuck's fetch completes (transfer_done true, every block
//  whole), c-early's fetch after the signal is served too, and only then
//  both get disconnect shutdown and the server exits 0, long before its
//  60 s shutdown timeout.
START_TEST(test_fetches_in_flight_finish)
{
    char nbig[16], big[16];
    snprintf(nbig, sizeof nbig, "%d", NBIG);
    snprintf(big, sizeof big, "%d", BIG);
    td_t s;
    td_start(&s, (const char *[]) {
        "--pool-blocks", nbig, "--block-len", big, "--pin-quota", nbig,
        "--shutdown-timeout", LONG, "--stall-timeout", LONG, "--drain-timeout", LONG,
        "--silence-timeout", LONG, "--store-timeout", LONG, NULL });
    static pk_key_t keys[NBIG];
    static uint32_t idx[NBIG];
    p2pkv_key_t *ekeys = bk_keys(1, 0, NBIG);
    for (size_t i = 0; i < NBIG; i++) {
        keys[i] = pk_key_make(ekeys[i].bytes, ekeys[i].len);
        idx[i] = (uint32_t) i;
    }
    bk_publish(&s, ekeys, NBIG, 1, BIG);

    tc_t *early = tc_connected(&(tc_config_t) { s.endpoint, "c-early", NEARLY, BIG, "fp", "7",
                                                0 });
    ck_assert_int_eq(tc_send(early, tc_lookup("early", 1, keys, NEARLY)), 0);
    pk_msg_t *m = tc_expect(early, PK_MSG_LOOKUP_RESP, BOUND);
    for (size_t i = 0; i < NEARLY; i++)
        ck_assert(m->hits[i]);
    pk_msg_destroy(&m);

    tc_t *tc = tc_connected(&(tc_config_t) { s.endpoint, "c-stuck", NBIG, BIG, "fp", "7", 0 });
    ck_assert_int_eq(tc_send(tc, tc_lookup("stuck", 1, keys, NBIG)), 0);
    m = tc_expect(tc, PK_MSG_LOOKUP_RESP, BOUND);
    ck_assert_uint_eq(m->keys.count, NBIG);
    for (size_t i = 0; i < NBIG; i++)
        ck_assert(m->hits[i]);
    pk_msg_destroy(&m);
    ck_assert_int_eq(tc_send(tc, tc_fetch("stuck", 1, keys, idx, NBIG)), 0);
    double deadline = pk_clock_monotonic() + BOUND;
    while (tc_landed(tc, 1) == 0) {
        ck_assert_msg(pk_clock_monotonic() < deadline, "nothing landed");
        tc_progress(tc, 0.0005);
    }
    while (s_in_flight(&s) < 1) {
        ck_assert_msg(pk_clock_monotonic() < deadline, "no transfer in flight");
        zclock_sleep(20);
    }

    ck_assert_int_eq(kill(s.pid, SIGTERM), 0);
    s_wait_draining(&s, &ekeys[0]);
    //  truly in flight: c-stuck has not progressed since
    ck_assert_uint_lt(tc_landed(tc, 1), NBIG);
    //  a new connect is refused, so that the consumer goes elsewhere
    tc_t *late = tc_new(&(tc_config_t) { s.endpoint, "c-late", 4, BIG, "fp", "7", 0 });
    ck_assert_ptr_nonnull(late);
    m = tc_connect(late, BOUND);
    ck_assert_msg(m && m->type == PK_MSG_DISCONNECT && m->code == PK_DISC_SHUTDOWN,
                  "a connect during the drain: %s", m ? pk_msg_type_name(m->type) : "nothing");
    pk_msg_destroy(&m);
    tc_destroy(&late);

    //  a new lookup misses (c-early has room in its pin quota: only the
    //  drain makes these keys misses)
    ck_assert_int_eq(tc_send(early, tc_lookup("after", 1, keys + NEARLY, 4)), 0);
    m = tc_expect(early, PK_MSG_LOOKUP_RESP, BOUND);
    ck_assert_str_eq(m->kv_request_id, "after");
    ck_assert_msg(s_all_misses(m), "a lookup during the drain found a key");
    pk_msg_destroy(&m);
    //  the fetch in flight lands whole and is answered
    m = tc_expect(tc, PK_MSG_TRANSFER_DONE, BOUND);
    ck_assert_str_eq(m->kv_request_id, "stuck");
    ck_assert_msg(m->success, "the fetch in flight failed");
    pk_msg_destroy(&m);
    s_check_blocks(tc, 1, NBIG);
    ck_assert_msg(s_running(&s), "the server exited with hits still pinned for c-early");

    //  the hits looked up before the signal are fetched after it
    ck_assert_int_eq(tc_send(early, tc_fetch("early", 1, keys, idx, NEARLY)), 0);
    m = tc_expect(early, PK_MSG_TRANSFER_DONE, BOUND);
    ck_assert_msg(m->success, "c-early's fetch failed");
    pk_msg_destroy(&m);
    s_check_blocks(early, 1, NEARLY);

    //  then, and only then, shutdown
    m = tc_expect(early, PK_MSG_DISCONNECT, BOUND);
    ck_assert_int_eq(m->code, PK_DISC_SHUTDOWN);
    pk_msg_destroy(&m);
    m = tc_expect(tc, PK_MSG_DISCONNECT, BOUND);
    ck_assert_int_eq(m->code, PK_DISC_SHUTDOWN);
    pk_msg_destroy(&m);
    int status = s_reap(&s, BOUND);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    tc_destroy(&tc);
    tc_destroy(&early);
    bk_keys_free(ekeys);
}
END_TEST

//  ---------------------------------------------------------------------------
//  (2) the directory: gone at the drain's start, others serve

#define NKEYS 10

static long long
s_redis_int(tr_redis_t *r, const char *fmt, const char *a, const char *b)
{
    redisReply *rep = tr_redis(r, fmt, a, b);
    ck_assert_int_eq(rep->type, REDIS_REPLY_INTEGER);
    long long v = rep->integer;
    freeReplyObject(rep);
    return v;
}

//  Waits (60 s at most) until a server's goodbye is all in Redis: its
//  record and its index deleted and its name out of the set.  The goodbye
//  unpublishes the keys' entries first and deletes these after, so a
//  consumer may see the keys go a moment before (directory.c, s_goodbye).
static void
s_wait_gone(tr_redis_t *r, const char *peer)
{
    char rec[128], held[128];
    snprintf(rec, sizeof rec, PK_DIR_SERVERS ":rec:%s", peer);
    snprintf(held, sizeof held, "p2pkv:held:{%s}", peer);
    double deadline = pk_clock_monotonic() + 60;
    while (s_redis_int(r, "EXISTS %s", rec, NULL) || s_redis_int(r, "EXISTS %s", held, NULL)
           || s_redis_int(r, "SISMEMBER %s %s", PK_DIR_SERVERS, peer)) {
        ck_assert_msg(pk_clock_monotonic() < deadline, "%s's record, index or name stayed in "
                      "the directory", peer);
        zclock_sleep(10);
    }
}

static p2pkv_client_t *
s_client(const char *name, const tr_redis_t *r)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = name, .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .silence_timeout = 2, .connect_retry = 0.1,
                           .load_timeout = 5, .directory = r->url, .progress_thread = true,
                           .no_reconnect = true };
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, NKEYS, 4096, (p2pkv_callbacks_t) { 0 },
                                         err);
    ck_assert_msg(c != NULL, "p2pkv_client_new: %s", err);
    return c;
}

typedef struct {
    size_t holders[NKEYS];
    bool lists_a[NKEYS];
} s_found_t;

static void
s_on_found(void *arg, size_t i, const p2pkv_holder_t *h, size_t n)
{
    s_found_t *f = arg;
    f->holders[i] = n;
    f->lists_a[i] = false;
    for (size_t k = 0; k < n; k++)
        f->lists_a[i] = f->lists_a[i] || strcmp(h[k].peer_id, "drain-a") == 0;
}

//  Waits (bounded) until every key has want holders, drain-a among them
//  or not as with_a says.
static void
s_wait_holders(p2pkv_client_t *c, const p2pkv_key_t *keys, size_t want, bool with_a)
{
    double deadline = pk_clock_monotonic() + BOUND;
    while (true) {
        s_found_t f;
        char err[P2PKV_ERRLEN] = "";
        bool ok = p2pkv_client_locate(c, keys, NKEYS, s_on_found, &f, err) == 0;
        for (size_t i = 0; ok && i < NKEYS; i++)
            ok = f.holders[i] == want && f.lists_a[i] == with_a;
        if (ok)
            return;
        ck_assert_msg(pk_clock_monotonic() < deadline, "the directory never showed %zu "
                      "holders %s drain-a (%s)", want, with_a ? "with" : "without", err);
        zclock_sleep(10);
    }
}

//  drain-a and drain-b both hold every key; drain-a's drain is held open
//  by a held session.  After SIGTERM, and while drain-a still runs, its
//  record, its index and its keys' entries are gone from Redis, and a
//  consumer getting by key (P2PKV_ANY_SERVER) gets every key, whole, from
//  drain-b; once the session is let go, drain-a exits 0.
START_TEST(test_directory_left_first)
{
    tr_redis_t r;
    tr_redis_start(&r, 0);
    char release[] = "/tmp/p2pkv-drain-XXXXXX";
    td_t a, b;
    td_start_held(&a, "c-hold", release, (const char *[]) {
        "--peer-id", "drain-a", "--directory", r.url, "--shutdown-timeout", LONG,
        "--silence-timeout", LONG, NULL });
    td_start(&b, (const char *[]) { "--peer-id", "drain-b", "--directory", r.url, NULL });
    p2pkv_key_t *keys = bk_keys(2, 0, NKEYS);
    bk_publish(&a, keys, NKEYS, 2, 4096);
    bk_publish(&b, keys, NKEYS, 2, 4096);
    p2pkv_client_t *watcher = s_client("drain-watcher", &r);
    s_wait_holders(watcher, keys, 2, true);
    ck_assert_int_eq(s_redis_int(&r, "EXISTS %s", PK_DIR_SERVERS ":rec:drain-a", NULL), 1);

    tc_t *held = tc_connected(&(tc_config_t) { a.endpoint, "c-hold", 4, 4096, "fp", "7", 0 });
    ck_assert_int_eq(kill(a.pid, SIGTERM), 0);
    s_wait_draining(&a, &keys[0]);
    s_wait_holders(watcher, keys, 1, false);
    s_wait_gone(&r, "drain-a");
    ck_assert_msg(s_running(&a), "drain-a exited with a session held");

    p2pkv_client_t *c = s_client("drain-getter", &r);
    uint32_t dest[NKEYS];
    p2pkv_key_result_t res[NKEYS];
    for (size_t i = 0; i < NKEYS; i++)
        dest[i] = (uint32_t) i;
    char err[P2PKV_ERRLEN] = "";
    int got = p2pkv_client_get_results(c, P2PKV_ANY_SERVER, "by-key", keys, dest, NKEYS, true,
                                       BOUND, res, NULL, NULL, err);
    ck_assert_msg(got == NKEYS, "got %d of %d during the drain: %s", got, NKEYS, err);
    for (size_t i = 0; i < NKEYS; i++) {
        ck_assert_int_eq(res[i].status, P2PKV_KEY_LANDED);
        ck_assert_int_eq(res[i].holder, res[0].holder);
        ck_assert_msg(bk_block_ok(p2pkv_client_pool(c) + i * 4096, 2, i, 4096),
                      "block %zu differs", i);
    }
    //  from drain-b: its only session besides none is the getter's
    json_t *st = td_stats_json(&b);
    json_t *peers = json_object_get(st, "peers");
    ck_assert_uint_eq(json_array_size(peers), 1);
    ck_assert_str_eq(json_string_value(json_array_get(peers, 0)), "drain-getter");
    json_decref(st);
    ck_assert_msg(s_running(&a), "drain-a exited with a session held");

    s_release(release);
    pk_msg_t *m = tc_expect(held, PK_MSG_DISCONNECT, BOUND);
    ck_assert_int_eq(m->code, PK_DISC_SHUTDOWN);
    pk_msg_destroy(&m);
    int status = s_reap(&a, BOUND);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    unlink(release);
    tc_destroy(&held);
    p2pkv_client_destroy(&c);
    p2pkv_client_destroy(&watcher);
    ck_assert_int_eq(td_stop(&b), 0);
    bk_keys_free(keys);
    tr_redis_stop(&r);
}
END_TEST

//  ---------------------------------------------------------------------------
//  (3) a second signal

//  A drain held open (a held session, a 60 s shutdown timeout): a second
//  SIGTERM ends the server at once with status 1, its pool unlinked and
//  its engine socket removed.
START_TEST(test_second_signal_exits_at_once)
{
    char release[] = "/tmp/p2pkv-drain-XXXXXX";
    td_t s;
    td_start_held(&s, "c-hold", release, (const char *[]) {
        "--shutdown-timeout", LONG, "--silence-timeout", LONG, NULL });
    p2pkv_key_t *keys = bk_keys(3, 0, 1);
    bk_publish(&s, keys, 1, 3, 4096);
    tc_t *held = tc_connected(&(tc_config_t) { s.endpoint, "c-hold", 4, 4096, "fp", "7", 0 });
    ck_assert_int_eq(kill(s.pid, SIGTERM), 0);
    s_wait_draining(&s, &keys[0]);
    ck_assert_msg(s_running(&s), "the server exited with a session held");
    ck_assert_int_eq(kill(s.pid, SIGTERM), 0);
    int status = s_reap(&s, BOUND);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d", status);
    int fd = shm_open(s.pool, O_RDONLY, 0);
    ck_assert_msg(fd < 0 && errno == ENOENT, "the pool %s is left", s.pool);
    struct stat st;
    ck_assert_msg(lstat(s.local + strlen("ipc://"), &st) != 0, "the socket %s is left", s.local);
    s_release(release);
    unlink(release);
    tc_destroy(&held);
    bk_keys_free(keys);
}
END_TEST

int
main(void)
{
    int rc = td_suite_start();
    if (rc)
        return rc;
    td_sweep();
    Suite *suite = suite_create("drain");
    TCase *tc = td_case(suite, "sigterm", 120);
    tcase_add_test(tc, test_fetches_in_flight_finish);
    tcase_add_test(tc, test_second_signal_exits_at_once);
    if (tr_redis_suite_start() == 0) {
        TCase *dir = td_case(suite, "directory", 120);
        tcase_add_test(dir, test_directory_left_first);
    }
    return td_run_and_sweep("drain", suite);
}
