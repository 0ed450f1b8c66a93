/*  test_directory.c: the cluster directory (issue 14) against a real
    redis-server on a free loopback port and real p2pkv-server processes:
    servers publish what they hold, a consumer fetches by key only from
    any holder, with failover when a holder dies or evicted a key, and
    Redis going away degrades to "no directory" without an error on the
    data path.  Skipped (77), saying why, without redis-server.

    No sleep-and-hope: every wait is on a condition, with a bound.
*/
#include "p2pkv.h"
#include "base/clock.h"
#include "base/host_id.h"
#include "cluster/dir_entry.h"
#include "daemon.h"
#include "redis.h"
#include "shell.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK 4096
#define BOUND 60.0                  //  seconds any one wait may take (the house's bound)

//  ---------------------------------------------------------------------------
//  Keys, blocks, servers and consumers

typedef struct {
    size_t n;
    p2pkv_key_t *keys;
    uint8_t *bytes;                 //  the keys' bytes, 32 each
    uint8_t *data;                  //  the blocks, BLOCK each
} s_set_t;

//  n keys of 32 bytes and their blocks, a pattern of (seed, i).
static void
s_set_make(s_set_t *set, size_t n, unsigned seed)
{
    set->n = n;
    set->keys = calloc(n, sizeof *set->keys);
    set->bytes = calloc(n, 32);
    set->data = malloc(n * BLOCK);
    ck_assert(set->keys && set->bytes && set->data);
    for (size_t i = 0; i < n; i++) {
        uint8_t *k = set->bytes + 32 * i;
        snprintf((char *) k, 32, "dir-%u-%d-%zu", seed, (int) getpid(), i);
        set->keys[i] = (p2pkv_key_t) { k, 32 };
        for (size_t j = 0; j < BLOCK; j++)
            set->data[i * BLOCK + j] = (uint8_t) (seed * 131 + i * 31 + j * 7);
    }
}

static void
s_set_free(s_set_t *set)
{
    free(set->keys);
    free(set->bytes);
    free(set->data);
}

static void
s_put(td_t *server, const s_set_t *set, size_t i)
{
    td_put(td_api(server), &set->keys[i], set->data + i * BLOCK, 1, BLOCK);
}

//  Every key of the set into server.
static void
s_put_all(td_t *server, const s_set_t *set)
{
    for (size_t i = 0; i < set->n; i++)
        s_put(server, set, i);
}

//  A server of the directory at r, named peer.
static void
s_server(td_t *s, const char *peer, const tr_redis_t *r)
{
    td_start(s, (const char *[]) { "--peer-id", peer, "--directory", r->url, NULL });
}

//  A Redis on a free port and two servers of its directory, a and b.
static void
s_redis_and_two(tr_redis_t *r, td_t *a, const char *peer_a, td_t *b, const char *peer_b)
{
    tr_redis_start(r, 0);
    s_server(a, peer_a, r);
    s_server(b, peer_b, r);
}

//  A consumer of the directory: a pool of n blocks, short timeouts so a
//  lost holder is noticed within a second, and no reconnecting: a killed
//  server's ephemeral port may go to another suite's server at once, and
//  a session there would disturb that suite's counts.
static p2pkv_client_t *
s_client_at(const char *name, const char *url, size_t n)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = name, .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .silence_timeout = 1, .stall_timeout = 1,
                           .keepalive_interval = 0.3, .connect_retry = 0.1,
                           .load_timeout = 5, .directory = url, .progress_thread = true,
                           .no_reconnect = true };
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, n, BLOCK, (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_msg(c != NULL, "p2pkv_client_new: %s", err);
    return c;
}

static p2pkv_client_t *
s_client(const char *name, const tr_redis_t *r, size_t n)
{
    return s_client_at(name, r->url, n);
}

//  What a locate said: each key's holders, as "peer,peer," (in any order).
typedef struct {
    size_t n;
    char (*holders)[256];
    size_t *count;
} s_found_t;

static void
s_on_found(void *arg, size_t i, const p2pkv_holder_t *h, size_t nh)
{
    s_found_t *f = arg;
    f->count[i] = nh;
    f->holders[i][0] = '\0';
    for (size_t k = 0; k < nh; k++) {
        strncat(f->holders[i], h[k].peer_id, 200);
        strcat(f->holders[i], ",");
        ck_assert_uint_eq(h[k].block_len, BLOCK);
        ck_assert(strncmp(h[k].endpoint, "tcp://127.0.0.1:", 16) == 0);
        //  every server here runs on this host, in these namespaces
        char host[PK_HOST_ID_LEN];
        ck_assert_int_eq(pk_host_id(host, sizeof host), 0);
        ck_assert_str_eq(h[k].host_id, host);
    }
}

static int
s_locate(p2pkv_client_t *c, const s_set_t *set, s_found_t *f, char *err)
{
    if (f->n != set->n) {           //  sized for this set's keys
        free(f->holders);
        free(f->count);
        f->holders = calloc(set->n, sizeof *f->holders);
        f->count = calloc(set->n, sizeof *f->count);
        f->n = set->n;
    }
    return p2pkv_client_locate(c, set->keys, set->n, s_on_found, f, err);
}

static void
s_found_free(s_found_t *f)
{
    free(f->holders);
    free(f->count);
}

//  Whether holders (as s_on_found writes them) lists peer.
static bool
s_lists(const char *holders, const char *peer)
{
    char needle[128];
    snprintf(needle, sizeof needle, "%s,", peer);
    for (const char *at = holders; (at = strstr(at, needle)); at++)
        if (at == holders || at[-1] == ',')
            return true;
    return false;
}

//  Waits until each key i has want[i] holders (exactly), within BOUND.
static void
s_wait_counts(p2pkv_client_t *c, const s_set_t *set, const size_t *want, s_found_t *f)
{
    double deadline = pk_clock_monotonic() + BOUND;
    char err[P2PKV_ERRLEN];
    while (true) {
        bool ok = s_locate(c, set, f, err) == 0;
        for (size_t i = 0; ok && i < set->n; i++)
            ok = f->count[i] == want[i];
        if (ok)
            return;
        ck_assert_msg(pk_clock_monotonic() < deadline, "the directory never showed the holders "
                      "expected (last: %s)", err);
        zclock_sleep(10);
    }
}

static void
s_wait_all(p2pkv_client_t *c, const s_set_t *set, size_t holders, s_found_t *f)
{
    size_t *want = calloc(set->n, sizeof *want);
    for (size_t i = 0; i < set->n; i++)
        want[i] = holders;
    s_wait_counts(c, set, want, f);
    free(want);
}

//  A consumer of the directory (s_client) sized for set, once every key
//  of it has holders holders; f has what the last locate said.
static p2pkv_client_t *
s_client_seeing(const char *name, const tr_redis_t *r, const s_set_t *set, size_t holders,
                s_found_t *f)
{
    p2pkv_client_t *c = s_client(name, r, set->n);
    *f = (s_found_t) { 0 };
    s_wait_all(c, set, holders, f);
    return c;
}

//  Gets every key by key only (P2PKV_ANY_SERVER) and checks every byte.
static void
s_get_all(p2pkv_client_t *c, const s_set_t *set)
{
    uint32_t *dest = calloc(set->n, sizeof *dest);
    bool *landed = calloc(set->n, sizeof *landed);
    for (size_t i = 0; i < set->n; i++)
        dest[i] = (uint32_t) i;
    char err[P2PKV_ERRLEN] = "";
    int got = p2pkv_client_get(c, P2PKV_ANY_SERVER, "by-key", set->keys, dest, set->n, true,
                               5, landed, NULL, NULL, err);
    ck_assert_msg(got == (int) set->n, "got %d of %zu: %s", got, set->n, err);
    const uint8_t *pool = p2pkv_client_pool(c);
    for (size_t i = 0; i < set->n; i++) {
        ck_assert(landed[i]);
        ck_assert_msg(memcmp(pool + i * BLOCK, set->data + i * BLOCK, BLOCK) == 0,
                      "block %zu differs", i);
    }
    free(dest);
    free(landed);
}

//  A test's consumer gone, with its last locate and its set.
static void
s_consumer_end(p2pkv_client_t **c, s_found_t *f, s_set_t *set)
{
    p2pkv_client_destroy(c);
    s_found_free(f);
    s_set_free(set);
}

static p2pkv_directory_stats_t
s_stats(p2pkv_client_t *c)
{
    p2pkv_directory_stats_t st;
    ck_assert_int_eq(p2pkv_client_directory_stats(c, &st), 0);
    return st;
}

//  A server's metric (its stats answer's "metrics"): the total.
static double
s_metric(td_t *s, const char *family)
{
    json_t *st = td_stats_json(s);
    json_t *f = json_object_get(json_object_get(st, "metrics"), family);
    double v = json_number_value(json_object_get(f, "total"));
    json_decref(st);
    return v;
}

//  Waits until a server's metric satisfies v >= at_least (or, at_least
//  negative, v == 0), within BOUND.
static void
s_wait_metric(td_t *s, const char *family, double at_least)
{
    double deadline = pk_clock_monotonic() + BOUND;
    while (at_least >= 0 ? s_metric(s, family) < at_least : s_metric(s, family) != 0) {
        ck_assert_msg(pk_clock_monotonic() < deadline, "%s never reached %g", family,
                      at_least);
        zclock_sleep(20);
    }
}

static long long
s_int(tr_redis_t *r, const char *fmt, const char *a, const char *b)
{
    redisReply *rep = tr_redis(r, fmt, a, b);
    ck_assert_int_eq(rep->type, REDIS_REPLY_INTEGER);
    long long v = rep->integer;
    freeReplyObject(rep);
    return v;
}

static void
s_key_name(const p2pkv_key_t *key, char *name)
{
    ck_assert_int_gt(pk_dir_key_name(key->bytes, key->len, name, 256), 0);
}

//  ---------------------------------------------------------------------------
//  Tests

//  Three servers with keys spread across them (a few on two), a consumer
//  that knows only the directory: locate names exactly the holders, in one
//  round trip once the servers are known, and a get by key fetches every
//  block, every byte right.
START_TEST(test_three_servers_fetch_by_key)
{
    tr_redis_t r;
    tr_redis_start(&r, 0);
    td_t s[3];
    const char *names[3] = { "dir-a", "dir-b", "dir-c" };
    for (int i = 0; i < 3; i++)
        s_server(&s[i], names[i], &r);
    s_set_t set;
    s_set_make(&set, 96, 1);
    size_t want[96] = { 0 };
    for (size_t i = 0; i < set.n; i++) {
        s_put(&s[i % 3], &set, i);
        want[i] = 1;
        if (i % 8 == 0) {           //  a replica on the next server
            s_put(&s[(i + 1) % 3], &set, i);
            want[i] = 2;
        }
    }
    p2pkv_client_t *c = s_client("dir-consumer", &r, set.n);
    s_found_t f = { 0 };
    s_wait_counts(c, &set, want, &f);
    for (size_t i = 0; i < set.n; i++) {
        ck_assert_msg(s_lists(f.holders[i], names[i % 3]), "key %zu: %s", i, f.holders[i]);
        if (i % 8 == 0)
            ck_assert(s_lists(f.holders[i], names[(i + 1) % 3]));
    }
    //  the servers are known now: one pipelined round trip for all keys
    p2pkv_directory_stats_t before = s_stats(c);
    char err[P2PKV_ERRLEN];
    ck_assert_int_eq(s_locate(c, &set, &f, err), 0);
    p2pkv_directory_stats_t after = s_stats(c);
    ck_assert_uint_eq(after.round_trips - before.round_trips, 1);
    ck_assert_uint_eq(after.junk, 0);
    s_get_all(c, &set);
    ck_assert_uint_eq(s_stats(c).failovers, 0);
    //  each server served its share
    for (int i = 0; i < 3; i++)
        ck_assert_uint_gt(td_stats(td_api(&s[i])).hits, 0);
    s_consumer_end(&c, &f, &set);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(td_stop(&s[i]), 0);
    tr_redis_stop(&r);
}
END_TEST

typedef struct {
    td_t *victim;
    atomic_bool killed;
} s_killer_t;

//  Kills the victim with SIGKILL once the consumer's session on it is
//  open (its actor held still by $P2PKV_TEST_HOLD_SESSION): mid-get.
static void *
s_killer(void *arg)
{
    s_killer_t *k = arg;
    double deadline = pk_clock_monotonic() + BOUND;
    while (td_stats(td_api(k->victim)).sessions == 0 && pk_clock_monotonic() < deadline)
        zclock_sleep(5);
    td_kill(k->victim);
    atomic_store(&k->killed, true);
    return NULL;
}

//  Two servers hold every key; one is killed with SIGKILL while the
//  consumer's get is on it: the same call fetches the rest from the
//  other, nothing lost, every byte right.
START_TEST(test_holder_killed_mid_get)
{
    tr_redis_t r;
    tr_redis_start(&r, 0);
    td_t a, b;
    setenv("P2PKV_TEST_HOLD_SESSION", "dir-killed-consumer:/nonexistent/p2pkv-hold", 1);
    s_server(&a, "dir-victim", &r);
    unsetenv("P2PKV_TEST_HOLD_SESSION");
    s_server(&b, "dir-survivor", &r);
    s_set_t set;
    s_set_make(&set, 64, 2);
    s_put_all(&a, &set);
    s_put_all(&b, &set);
    s_found_t f;
    p2pkv_client_t *c = s_client_seeing("dir-killed-consumer", &r, &set, 2, &f);
    s_killer_t k = { .victim = &a };
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, s_killer, &k), 0);
    s_get_all(c, &set);
    pthread_join(thread, NULL);
    ck_assert(atomic_load(&k.killed));
    //  the victim failed mid-get (failovers); or, when another test's
    //  server took its port at once and the client's session reconnected
    //  there, that server answered misses and the victim's entries were
    //  corrected: either way its keys came from the survivor
    p2pkv_directory_stats_t st = s_stats(c);
    ck_assert_uint_ge(st.failovers + st.corrected, 1);
    s_consumer_end(&c, &f, &set);
    ck_assert_int_eq(td_stop(&b), 0);
    tr_redis_stop(&r);
}
END_TEST

//  Redis stopped: gets by server go on without an error, a get by key is
//  a clear error, the server counts the loss and says it is down; Redis
//  restarted (empty): the server republishes its pool, keys stored while
//  it was down included, and gets by key work again.
START_TEST(test_redis_stopped_and_restarted)
{
    tr_redis_t r;
    tr_redis_start(&r, 0);
    td_t a;
    s_server(&a, "dir-steady", &r);
    s_set_t set;
    s_set_make(&set, 24, 3);
    for (size_t i = 0; i < 16; i++)
        s_put(&a, &set, i);
    s_set_t first = set;
    first.n = 16;
    p2pkv_client_t *c = s_client("dir-steady-consumer", &r, set.n);
    s_found_t f = { 0 };
    s_wait_all(c, &first, 1, &f);
    s_wait_metric(&a, "p2pkv_directory_up", 1);
    char err[P2PKV_ERRLEN] = "";
    int server = p2pkv_client_connect(c, a.endpoint, 5, err);
    ck_assert_msg(server >= 0, "%s", err);

    tr_redis_stop(&r);
    s_wait_metric(&a, "p2pkv_directory_up", -1);
    ck_assert_double_ge(s_metric(&a, "p2pkv_directory_errors_total"), 1);
    for (size_t i = 16; i < set.n; i++)     //  stored while Redis is down: no error
        s_put(&a, &set, i);
    uint32_t dest[24];
    bool landed[24];
    for (size_t i = 0; i < set.n; i++)
        dest[i] = (uint32_t) i;
    ck_assert_int_eq(p2pkv_client_get(c, server, "by-server", set.keys, dest, set.n, true, 5,
                                      landed, NULL, NULL, err), (int) set.n);
    ck_assert_int_eq(p2pkv_client_get(c, P2PKV_ANY_SERVER, "by-key", set.keys, dest, set.n,
                                      true, 5, landed, NULL, NULL, err), -ENOTCONN);
    ck_assert_msg(strstr(err, "directory redis://127.0.0.1:") != NULL, "%s", err);
    ck_assert(!s_stats(c).up);

    tr_redis_start(&r, r.port);
    s_wait_all(c, &set, 1, &f);             //  all 24, the late 8 too
    s_wait_metric(&a, "p2pkv_directory_up", 1);
    ck_assert_double_ge(s_metric(&a, "p2pkv_directory_resyncs_total"), 2);
    memset(p2pkv_client_pool(c), 0, set.n * BLOCK);
    s_get_all(c, &set);
    s_consumer_end(&c, &f, &set);
    ck_assert_int_eq(td_stop(&a), 0);
    tr_redis_stop(&r);
}
END_TEST

//  A key evicted on its holder but still listed: the holder answers a
//  miss, the same get fetches the key from another holder, and the stale
//  entry is removed.  And the real thing: a small pool's evictions (and a
//  drop) leave the directory, kept current by the server.
START_TEST(test_evicted_but_listed)
{
    tr_redis_t r;
    td_t a, b;
    s_redis_and_two(&r, &a, "dir-holds", &b, "dir-evicted");
    s_set_t set;
    s_set_make(&set, 8, 4);
    s_put_all(&a, &set);
    s_found_t f;
    p2pkv_client_t *c = s_client_seeing("dir-evict-consumer", &r, &set, 1, &f);
    //  b listed for every key it does not (any more) hold
    char name[256];
    for (size_t i = 0; i < set.n; i++) {
        s_key_name(&set.keys[i], name);
        ck_assert_int_eq(s_int(&r, "SADD %s %s", name, "dir-evicted"), 1);
    }
    s_wait_all(c, &set, 2, &f);
    s_get_all(c, &set);
    p2pkv_directory_stats_t st = s_stats(c);
    ck_assert_uint_ge(st.corrected, 1);
    size_t still = 0;
    for (size_t i = 0; i < set.n; i++) {
        s_key_name(&set.keys[i], name);
        still += (size_t) s_int(&r, "SISMEMBER %s %s", name, "dir-evicted");
    }
    ck_assert_uint_eq(still + st.corrected, set.n);   //  each one asked was corrected
    ck_assert_uint_eq(st.failovers, 0);                //  b answered: it is not dead

    //  a pool of 4: the first two of 6 keys are evicted, then one dropped
    td_t e;
    td_start(&e, (const char *[]) { "--peer-id", "dir-small", "--directory", r.url,
                                    "--pool-blocks", "4", NULL });
    s_set_t six;
    s_set_make(&six, 6, 5);
    s_put_all(&e, &six);
    s_found_t g = { 0 };
    s_wait_counts(c, &six, (size_t[]) { 0, 0, 1, 1, 1, 1 }, &g);
    char err[P2PKV_ERRLEN] = "";
    ck_assert_int_eq(p2pkv_engine_drop(td_api(&e), &six.keys[3], 1, err), 0);
    s_wait_counts(c, &six, (size_t[]) { 0, 0, 1, 0, 1, 1 }, &g);
    p2pkv_client_destroy(&c);
    s_found_free(&f);
    s_found_free(&g);
    s_set_free(&set);
    s_set_free(&six);
    ck_assert_int_eq(td_stop(&a), 0);
    ck_assert_int_eq(td_stop(&b), 0);
    ck_assert_int_eq(td_stop(&e), 0);
    tr_redis_stop(&r);
}
END_TEST

//  A server with a disk tier (--spill-dir) keeps listing what its pool
//  evicted to disk (it still holds it: a get by key reads it back), not
//  a key the engine dropped; stopped, it leaves the directory, and
//  started again on the same spill directory it publishes again every
//  key it took back (issue 39, point 4), each served by key, byte-checked.
START_TEST(test_spilled_keys_republished)
{
    tr_redis_t r;
    tr_redis_start(&r, tr_free_port());
    char dir[64], size[32];
    sh_tmpdir(dir, "dir-spill");
    snprintf(size, sizeof size, "%d", 64 * (4096 + BLOCK));    //  64 slots
    const char *args[] = { "--peer-id", "dir-spill", "--directory", r.url, "--pool-blocks", "4",
                           "--spill-dir", dir, "--spill-size", size, NULL };
    td_t e;
    td_start(&e, args);
    enum { N = 12 };
    s_set_t set;
    s_set_make(&set, N, 6);
    s_put_all(&e, &set);
    s_found_t f = { 0 };
    //  8 on disk, 4 in the pool: all listed
    p2pkv_client_t *c = s_client_seeing("dir-spill-consumer", &r, &set, 1, &f);
    ck_assert_int_ge(td_stat(&e, "spill.blocks") + td_stat(&e, "spill.staged"), N - 4);
    //  key 0, on disk only, dropped: no longer listed
    char err[P2PKV_ERRLEN] = "";
    ck_assert_int_eq(p2pkv_engine_drop(td_api(&e), &set.keys[0], 1, err), 0);
    size_t want[N];
    for (size_t i = 0; i < N; i++)
        want[i] = i != 0;
    s_wait_counts(c, &set, want, &f);
    //  a clean stop leaves the directory
    ck_assert_int_eq(td_stop(&e), 0);
    size_t none[N] = { 0 };
    s_wait_counts(c, &set, none, &f);
    //  started again: every key it took back listed again, and served
    td_start(&e, args);
    ck_assert_int_eq(td_stat(&e, "spill.recovered"), N - 1);
    s_wait_counts(c, &set, want, &f);
    //  three keys a get: the pool of 4 must hold a get's blocks at once
    for (size_t at = 1; at < N; at += 3) {
        s_set_t some = { .n = N - at < 3 ? N - at : 3, .keys = set.keys + at,
                         .bytes = set.bytes + 32 * at, .data = set.data + at * BLOCK };
        s_get_all(c, &some);
    }
    ck_assert_int_ge(td_stat(&e, "spill.reads"), N - 1 - 4);
    p2pkv_client_destroy(&c);
    s_found_free(&f);
    s_set_free(&set);
    ck_assert_int_eq(td_stop(&e), 0);
    tr_redis_stop(&r);
    sh_rmrf(dir);
}
END_TEST

//  A --directory that does not parse is a usage error (2) naming it; one
//  with no Redis there is an error at start (1) naming it; with
//  --directory-optional the server starts with a warning and publishes
//  once Redis is there.
START_TEST(test_bad_directory)
{
    char out[4096], url[64];
    const char *base[] = { "--bind", "tcp://127.0.0.1:*", "--pool-blocks", "4", "--peer-id",
                           "dir-bad", "--local", "ipc:///tmp/p2pkv-dir-bad.sock",
                           "--pool-name", "/p2pkv-dir-bad", "--directory" };
    const char *args[16];
    memcpy(args, base, sizeof base);
    size_t at = sizeof base / sizeof *base;
    const char *bad[] = { "localhost:6379", "redis://h:99999", "redis://h:6379/16" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        args[at] = bad[i];
        args[at + 1] = NULL;
        ck_assert_int_eq(td_run(args, out, sizeof out), 2);
        ck_assert_msg(strstr(out, "--directory: expected redis://HOST:PORT[,HOST:PORT...][/DB]"),
                      "%s", out);
    }
    int port = tr_free_port();
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    args[at] = url;
    args[at + 1] = NULL;
    ck_assert_int_eq(td_run(args, out, sizeof out), 1);
    char said[128];
    snprintf(said, sizeof said, "directory %s: cannot connect", url);
    ck_assert_msg(strstr(out, said), "%s", out);

    //  optional: a warning, then published once Redis comes
    char log[] = "/tmp/p2pkv-dir-optional-XXXXXX";
    int fd = mkstemp(log);
    ck_assert_int_ge(fd, 0);
    td_t a;
    td_start_logged(&a, (const char *[]) { "--peer-id", "dir-optional", "--directory-optional",
                                           url, "--log-level", "info", NULL }, fd);
    s_set_t set;
    s_set_make(&set, 4, 6);
    s_put_all(&a, &set);
    tr_redis_t r;
    tr_redis_start(&r, port);
    s_found_t f;
    p2pkv_client_t *c = s_client_seeing("dir-optional-consumer", &r, &set, 1, &f);
    s_get_all(c, &set);
    ck_assert_int_eq(td_stop(&a), 0);
    FILE *text = fdopen(fd, "r");
    rewind(text);
    size_t n = fread(out, 1, sizeof out - 1, text);
    out[n] = '\0';
    fclose(text);
    unlink(log);
    ck_assert_msg(strstr(out, said) && strstr(out, "--directory-optional"), "%s", out);
    ck_assert_msg(strstr(out, "up, "), "%s", out);
    s_consumer_end(&c, &f, &set);
    tr_redis_stop(&r);
}
END_TEST

//  A Redis Cluster of three primaries: servers and consumers given any one
//  node's URL find the whole Cluster, the keys' sets spread over every
//  primary, a locate is still one round trip, and every byte of a get by
//  key arrives.  A DB other than 0 is refused at start, naming why.
START_TEST(test_redis_cluster)
{
    const char *why = tr_redis_cluster_skip();
    if (why) {
        fprintf(stderr, "SKIP: test_redis_cluster: %s\n", why);
        return;
    }
    tr_cluster_t rc;
    tr_redis_cluster_start(&rc);
    td_t a, b;
    s_server(&a, "dir-cl-a", &rc.node[0]);
    s_server(&b, "dir-cl-b", &rc.node[1]);
    s_set_t set;
    s_set_make(&set, 48, 21);
    size_t want[48] = { 0 };
    for (size_t i = 0; i < set.n; i++) {
        s_put(i % 2 ? &b : &a, &set, i);
        want[i] = 1;
        if (i % 6 == 0) {
            s_put(i % 2 ? &a : &b, &set, i);
            want[i] = 2;
        }
    }
    p2pkv_client_t *c = s_client("dir-cl-consumer", &rc.node[2], set.n);
    s_found_t f = { 0 };
    s_wait_counts(c, &set, want, &f);
    for (size_t i = 0; i < set.n; i++)
        ck_assert_msg(s_lists(f.holders[i], i % 2 ? "dir-cl-b" : "dir-cl-a"), "key %zu: %s", i,
                      f.holders[i]);
    p2pkv_directory_stats_t before = s_stats(c);
    char err[P2PKV_ERRLEN];
    ck_assert_int_eq(s_locate(c, &set, &f, err), 0);
    ck_assert_uint_eq(s_stats(c).round_trips - before.round_trips, 1);
    ck_assert_uint_eq(s_stats(c).junk, 0);
    s_get_all(c, &set);
    for (int i = 0; i < TR_CLUSTER_NODES; i++) {
        redisReply *r = tr_redis(&rc.node[i], "DBSIZE");
        ck_assert_msg(r->type == REDIS_REPLY_INTEGER && r->integer > 0,
                      "cluster node %d holds nothing", i);
        freeReplyObject(r);
    }
    char url[80], out[4096];
    snprintf(url, sizeof url, "%s/1", rc.url);
    const char *args[] = { "--bind", "tcp://127.0.0.1:*", "--pool-blocks", "4", "--peer-id",
                           "dir-cl-db", "--local", "ipc:///tmp/p2pkv-dir-cl-db.sock",
                           "--pool-name", "/p2pkv-dir-cl-db", "--directory", url, NULL };
    ck_assert_int_eq(td_run(args, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "a Redis Cluster has only DB 0"), "%s", out);
    s_consumer_end(&c, &f, &set);
    ck_assert_int_eq(td_stop(&a), 0);
    ck_assert_int_eq(td_stop(&b), 0);
    tr_redis_cluster_stop(&rc);
}
END_TEST

//  Issue 36: the directory survives the Redis node it used.  A Cluster of
//  three primaries and a replica each (node timeout 2 s); a server given
//  as its directory only one primary, and a consumer whose seed list
//  starts with it.  It is killed: once its replica is promoted, the
//  server has found the Cluster again through the nodes it named and
//  republished what it holds (a second resync: what the replica had not
//  received is back), and the consumer, past its dead first seed,
//  locates and fetches every key intact.  How long after the promotion
//  is printed, not asserted.
//  full_coverage false: every node set to cluster-require-full-coverage
//  no, so the live primaries keep answering for their own slots while the
//  dead one's are uncovered: no CLUSTERDOWN reaches the server, and only
//  its heartbeat's PING of every primary can find the dead one.
static void
s_cluster_master_killed(const char *name, bool full_coverage)
{
    const char *why = tr_redis_cluster_skip();
    if (why) {
        fprintf(stderr, "SKIP: %s: %s\n", name, why);
        return;
    }
    tr_cluster_t rc;
    tr_redis_cluster_start_with(&rc, 3, 1, 2000);
    for (int i = 0; !full_coverage && i < rc.n; i++) {
        redisReply *r = tr_redis(&rc.node[i], "CONFIG SET cluster-require-full-coverage no");
        ck_assert_msg(r->type == REDIS_REPLY_STATUS, "node %d: CONFIG SET: %s", i, r->str);
        freeReplyObject(r);
    }
    //  a primary that does not hold the servers' records (their hash
    //  tag's slot; another primary answers MOVED): the server's record
    //  stays up, so only its heartbeat's PING of every primary finds the
    //  dead one, and then only the nodes the Cluster named lead it back
    int dead = -1;
    for (int i = 0; i < 3 && dead < 0; i++) {
        redisReply *r = tr_redis(&rc.node[i], "EXISTS %s", PK_DIR_SERVERS);
        if (r->type == REDIS_REPLY_ERROR)
            dead = i;
        freeReplyObject(r);
    }
    ck_assert_int_ge(dead, 0);
    int other = (dead + 1) % 3;
    td_t a;
    td_start(&a, (const char *[]) { "--peer-id", "dir-fo-a", "--directory", rc.node[dead].url,
                                    "--directory-ttl", "3", "--directory-timeout", "0.5",
                                    NULL });
    s_set_t set;
    s_set_make(&set, 24, 36);
    s_put_all(&a, &set);
    char seeds[160];
    snprintf(seeds, sizeof seeds, "redis://127.0.0.1:%d,127.0.0.1:%d", rc.node[dead].port,
             rc.node[other].port);
    p2pkv_client_t *c = s_client_at("dir-fo-consumer", seeds, set.n);
    s_found_t f = { 0 };
    s_wait_all(c, &set, 1, &f);

    tr_redis_kill(&rc.node[dead]);
    //  its replica (one of node 3..5) takes over: the failover's own pace
    double deadline = pk_clock_monotonic() + 60;
    int promoted = -1;
    while (promoted < 0) {
        for (int i = 3; i < rc.n && promoted < 0; i++)
            if (tr_redis_cluster_primary(&rc.node[i]))
                promoted = i;
        ck_assert_msg(pk_clock_monotonic() < deadline, "no replica was promoted within 60 s");
        if (promoted < 0)
            zclock_sleep(20);
    }
    double at = pk_clock_monotonic();
    //  the server's keys found again (bounded, generously: a failure
    //  here means it never came back, not that it was slow)
    char err[P2PKV_ERRLEN] = "";
    deadline = at + 30;
    while (true) {
        bool ok = s_locate(c, &set, &f, err) == 0;
        for (size_t i = 0; ok && i < set.n; i++)
            ok = f.count[i] == 1 && s_lists(f.holders[i], "dir-fo-a");
        if (ok)
            break;
        ck_assert_msg(pk_clock_monotonic() < deadline,
                      "the server's keys were not found again within 30 s of the promotion "
                      "(last: %s)", err[0] ? err : "a key without its holder");
        zclock_sleep(20);
    }
    fprintf(stderr, "%s: keys found again %.2f s after the promotion\n", name,
            pk_clock_monotonic() - at);
    s_wait_metric(&a, "p2pkv_directory_resyncs_total", 2);   //  it connected again
    s_get_all(c, &set);
    s_consumer_end(&c, &f, &set);
    ck_assert_int_eq(td_stop(&a), 0);
    tr_redis_cluster_stop(&rc);
}

START_TEST(test_cluster_master_killed)
{
    s_cluster_master_killed("test_cluster_master_killed", true);
}
END_TEST

START_TEST(test_cluster_master_killed_partial_coverage)
{
    s_cluster_master_killed("test_cluster_master_killed_partial_coverage", false);
}
END_TEST

//  Entries that do not parse are ignored and counted, never trusted:
//  another program's key of another type under a key's name, a record
//  that is truncated, a record that names another server, holders with no
//  record, junk in a server's own index.
START_TEST(test_junk_entries_ignored_and_counted)
{
    tr_redis_t r;
    tr_redis_start(&r, 0);
    s_set_t set;
    s_set_make(&set, 3, 7);
    char k0[256], k1[256], k2[256];
    s_key_name(&set.keys[0], k0);
    s_key_name(&set.keys[1], k1);
    s_key_name(&set.keys[2], k2);
    freeReplyObject(tr_redis(&r, "SET %s %s", k0, "another program's string"));
    freeReplyObject(tr_redis(&r, "SADD %s %s %s", PK_DIR_SERVERS, "dir-ghost", "dir-liar"));
    freeReplyObject(tr_redis(&r, "SET %s %s", PK_DIR_SERVERS ":rec:dir-ghost", "{\"v\":1,\"peer"));
    freeReplyObject(tr_redis(&r, "SET %s %s", PK_DIR_SERVERS ":rec:dir-liar",
                             "{\"v\":1,\"peer_id\":\"dir-junk\",\"endpoint\":\"tcp://10.9.9.9:1\","
                             "\"host\":\"x\",\"block_len\":4096,\"pool_blocks\":1,"
                             "\"provider\":\"tcp\",\"fingerprint\":\"fp\"}"));
    freeReplyObject(tr_redis(&r, "SADD %s %s %s %s", k1, "dir-ghost", "dir-liar", "dir-nobody"));
    freeReplyObject(tr_redis(&r, "SADD %s %s", k2, "dir-ghost"));
    freeReplyObject(tr_redis(&r, "SADD %s %s", "p2pkv:held:{dir-junk}", "zz-not-hex"));
    td_t a;
    s_server(&a, "dir-junk", &r);
    s_put_all(&a, &set);
    p2pkv_client_t *c = s_client("dir-junk-consumer", &r, set.n);
    s_found_t f = { 0 };
    //  k0 cannot be listed (a string is there), k1 and k2 only by dir-junk
    s_wait_counts(c, &set, (size_t[]) { 0, 1, 1 }, &f);
    ck_assert_str_eq(f.holders[1], "dir-junk,");
    ck_assert_str_eq(f.holders[2], "dir-junk,");
    p2pkv_directory_stats_t st = s_stats(c);
    ck_assert_uint_ge(st.junk, 3);          //  k0's string, the truncated and the lying record
    ck_assert_uint_ge(st.stale, 3);         //  ghost and liar (no live record), nobody
    //  the server: its index's junk removed, the string under k0 counted
    s_wait_metric(&a, "p2pkv_directory_junk_total", 2);
    ck_assert_int_eq(s_int(&r, "SISMEMBER %s %s", "p2pkv:held:{dir-junk}", "zz-not-hex"), 0);
    //  what parses is fetched; what does not was never trusted
    uint32_t dest[3] = { 0, 1, 2 };
    bool landed[3];
    char err[P2PKV_ERRLEN] = "";
    ck_assert_int_eq(p2pkv_client_get(c, P2PKV_ANY_SERVER, "junk", set.keys, dest, 3, true, 5,
                                      landed, NULL, NULL, err), 2);
    ck_assert(!landed[0] && landed[1] && landed[2]);
    s_consumer_end(&c, &f, &set);
    ck_assert_int_eq(td_stop(&a), 0);
    tr_redis_stop(&r);
}
END_TEST

//  A clean exit removes the server: its record, its index, its name in
//  every key's set and in the servers' set.
START_TEST(test_clean_exit_removes_the_server)
{
    tr_redis_t r;
    td_t a, b;
    s_redis_and_two(&r, &a, "dir-leaves", &b, "dir-stays");
    s_set_t set;
    s_set_make(&set, 10, 8);
    for (size_t i = 0; i < set.n; i++) {
        s_put(&a, &set, i);
        if (i < 5)
            s_put(&b, &set, i);
    }
    p2pkv_client_t *c = s_client("dir-exit-consumer", &r, set.n);
    s_found_t f = { 0 };
    s_wait_counts(c, &set, (size_t[]) { 2, 2, 2, 2, 2, 1, 1, 1, 1, 1 }, &f);
    ck_assert_int_eq(td_stop(&a), 0);
    //  at once, not when a TTL runs out
    char name[256];
    ck_assert_int_eq(s_int(&r, "EXISTS %s", PK_DIR_SERVERS ":rec:dir-leaves", NULL), 0);
    ck_assert_int_eq(s_int(&r, "EXISTS %s", "p2pkv:held:{dir-leaves}", NULL), 0);
    ck_assert_int_eq(s_int(&r, "SISMEMBER %s %s", PK_DIR_SERVERS, "dir-leaves"), 0);
    for (size_t i = 0; i < set.n; i++) {
        s_key_name(&set.keys[i], name);
        ck_assert_int_eq(s_int(&r, "SISMEMBER %s %s", name, "dir-leaves"), 0);
        ck_assert_int_eq(s_int(&r, "EXISTS %s", name, NULL), i < 5);
    }
    s_consumer_end(&c, &f, &set);
    ck_assert_int_eq(td_stop(&b), 0);
    tr_redis_stop(&r);
}
END_TEST

//  --directory-ttl: the record lives that long in Redis, so a server
//  killed with SIGKILL stops being a holder after it, while one of the
//  default TTL (3 s) beside it is still listed for its whole TTL.
START_TEST(test_ttl_setting_ends_a_killed_holder)
{
    tr_redis_t r;
    tr_redis_start(&r, 0);
    td_t a, b;
    td_start(&a, (const char *[]) { "--peer-id", "dir-short-ttl", "--directory", r.url,
                                     "--directory-ttl", "0.6", "--directory-timeout", "0.5",
                                     NULL });
    s_server(&b, "dir-default-ttl", &r);
    s_set_t set;
    s_set_make(&set, 4, 11);
    s_put_all(&a, &set);
    s_put_all(&b, &set);
    s_found_t f;
    p2pkv_client_t *c = s_client_seeing("dir-ttl-consumer", &r, &set, 2, &f);
    long long short_ttl = s_int(&r, "PTTL %s", PK_DIR_SERVERS ":rec:dir-short-ttl", NULL);
    long long long_ttl = s_int(&r, "PTTL %s", PK_DIR_SERVERS ":rec:dir-default-ttl", NULL);
    ck_assert_msg(short_ttl > 0 && short_ttl <= 600, "PTTL %lld ms", short_ttl);
    ck_assert_msg(long_ttl > 600 && long_ttl <= 3000, "PTTL %lld ms", long_ttl);

    double killed = pk_clock_monotonic();
    td_kill(&a);
    s_wait_all(c, &set, 1, &f);
    double gone = pk_clock_monotonic() - killed;
    for (size_t i = 0; i < set.n; i++)
        ck_assert_str_eq(f.holders[i], "dir-default-ttl,");
    //  the killed server's record expired, not the default's 3 s
    ck_assert_msg(gone < 3.0, "the killed holder stayed %.2f s", gone);
    ck_assert_int_eq(s_int(&r, "EXISTS %s", PK_DIR_SERVERS ":rec:dir-short-ttl", NULL), 0);
    s_consumer_end(&c, &f, &set);
    ck_assert_int_eq(td_stop(&b), 0);
    tr_redis_stop(&r);
}
END_TEST

//  What `p2pkv get -o dir` wrote: each key's block, byte for byte, in
//  dir/HEX (removed after).
static void
s_check_files(const char *dir, const s_set_t *set, char (*hex)[65])
{
    for (size_t i = 0; i < set->n; i++) {
        char path[512];
        uint8_t got[BLOCK];
        snprintf(path, sizeof path, "%s/%s", dir, hex[i]);
        FILE *in = fopen(path, "rb");
        ck_assert_msg(in != NULL, "no %s", path);
        ck_assert_uint_eq(fread(got, 1, BLOCK, in), BLOCK);
        fclose(in);
        unlink(path);
        ck_assert_msg(memcmp(got, set->data + i * BLOCK, BLOCK) == 0, "block %zu", i);
    }
}

//  `p2pkv get --directory` of a CURVE server: with --curve-secret and
//  --server-key the holders the directory names are reached over CURVE;
//  without them the server refuses, and nothing is written; the command
//  says the holder requires CURVE and the options to give, as for
//  --server (tests/bin/cli_errors.sh), --verbose naming the holder once.
START_TEST(test_cli_by_key_over_curve)
{
    tr_redis_t r;
    tr_redis_start(&r, 0);
    char keys[] = "/tmp/p2pkv-dir-curve-XXXXXX", cmd[2048], allow[64], dir[64];
    ck_assert_ptr_nonnull(mkdtemp(keys));
    snprintf(allow, sizeof allow, "%s/allow", keys);
    snprintf(dir, sizeof dir, "%s/out", keys);
    ck_assert_int_eq(mkdir(allow, 0700), 0);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(cmd, sizeof cmd, "bin/p2pkv keygen %s/server >/dev/null && bin/p2pkv keygen "
             "%s/alice >/dev/null && cp %s/alice %s/", keys, keys, keys, allow);
    ck_assert_int_eq(system(cmd), 0);
    char secret[96];
    snprintf(secret, sizeof secret, "%s/server_secret", keys);
    td_t a;
    td_start(&a, (const char *[]) { "--peer-id", "dir-curve", "--directory", r.url,
                                     "--curve-secret", secret, "--curve-allow", allow, NULL });
    s_set_t set;
    s_set_make(&set, 3, 13);
    s_put_all(&a, &set);
    s_found_t f;
    p2pkv_client_t *c = s_client_seeing("dir-curve-consumer", &r, &set, 1, &f);
    char hex[3][65];
    for (size_t i = 0; i < set.n; i++)
        pk_hex_encode(set.keys[i].bytes, set.keys[i].len, hex[i]);
    int status;
    char *said = sh_output(&status, "bin/p2pkv get --directory %s --verbose --timeout 5 -o %s "
                           "%s %s %s 2>&1", r.url, dir, hex[0], hex[1], hex[2]);
    ck_assert_msg(status == 2, "plain: exit %d, not 2: %s", status, said);   //  refused
    ck_assert_msg(strstr(said, "requires CURVE") && strstr(said, "--curve-secret FILE")
                  && strstr(said, "--server-key FILE"), "plain get by key: %s", said);
    char twice[2 * sizeof a.endpoint + 8];
    snprintf(twice, sizeof twice, "%s: %s", a.endpoint, a.endpoint);
    ck_assert_msg(!strstr(said, twice), "the holder named twice: %s", said);
    free(said);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, hex[0]);
    ck_assert_int_eq(access(path, F_OK), -1);
    snprintf(cmd, sizeof cmd, "bin/p2pkv get --directory %s --curve-secret %s/alice_secret "
             "--server-key %s/server -o %s %s %s %s >/dev/null 2>&1", r.url, keys, keys, dir,
             hex[0], hex[1], hex[2]);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 0);
    s_check_files(dir, &set, hex);
    s_consumer_end(&c, &f, &set);
    ck_assert_int_eq(td_stop(&a), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", keys);
    ck_assert_int_eq(system(cmd), 0);
    tr_redis_stop(&r);
}
END_TEST

//  The command line by key (p2pkv lookup/get --directory), and the
//  daemon's pull without a server (from whoever holds the keys).
START_TEST(test_cli_and_pull_by_key)
{
    tr_redis_t r;
    td_t a, b;
    s_redis_and_two(&r, &a, "dir-source", &b, "dir-puller");
    s_set_t set;
    s_set_make(&set, 4, 9);
    s_put_all(&a, &set);
    s_found_t f;
    p2pkv_client_t *c = s_client_seeing("dir-cli-consumer", &r, &set, 1, &f);
    char hex[4][65], dir[64];
    for (size_t i = 0; i < set.n; i++)
        pk_hex_encode(set.keys[i].bytes, set.keys[i].len, hex[i]);
    int status;
    char *out = sh_output(&status, "bin/p2pkv lookup --directory %s %s %s 0abc", r.url, hex[0],
                          hex[1]);
    ck_assert_msg(status == 1, "exit %d: %s", status, out);     //  one key missing
    char want[512];
    snprintf(want, sizeof want, "%s hit dir-source\n%s hit dir-source\n0abc miss\n", hex[0],
             hex[1]);
    ck_assert_str_eq(out, want);
    free(out);
    sh_tmpdir(dir, "dir-cli");
    ck_assert_int_eq(sh_run("bin/p2pkv get --directory %s -o %s %s %s %s %s >/dev/null 2>&1",
                            r.url, dir, hex[0], hex[1], hex[2], hex[3]), 0);
    s_check_files(dir, &set, hex);
    sh_rmrf(dir);
    //  the engine's pull without a server: b gets them from a, then holds them too
    uint64_t id;
    char err[P2PKV_ERRLEN] = "";
    p2pkv_engine_t *engine = td_api(&b);
    ck_assert_int_eq(p2pkv_engine_pull(engine, NULL, set.keys, set.n, &id, NULL, NULL, err), 0);
    p2pkv_engine_event_t ev = { 0 };
    double deadline = pk_clock_monotonic() + BOUND;
    while (ev.kind != P2PKV_EVENT_PULL || ev.id != id) {
        ck_assert(pk_clock_monotonic() < deadline);
        ck_assert_int_eq(p2pkv_engine_next_event(engine, BOUND, &ev), 0);
    }
    ck_assert_msg(ev.landed == set.n && ev.missing == 0, "%s", ev.reason);
    s_wait_all(c, &set, 2, &f);
    s_consumer_end(&c, &f, &set);
    ck_assert_int_eq(td_stop(&a), 0);
    ck_assert_int_eq(td_stop(&b), 0);
    tr_redis_stop(&r);
}
END_TEST

//  Issue 36: every path that fetches by key moves past a dead holder.
//  Server a holds every key, b all but key 0; a hangs (SIGSTOP: its port
//  stays bound, so no other server of the machine can take it, and it
//  answers nothing) while its record reads live.  `p2pkv get --directory`
//  no longer gives up when the holder it describes first (a, the only one
//  of key 0, asked first) does not answer: keys 1.. come from b, said
//  with --verbose and in the JSON, and key 0 is reported failed (exit 1,
//  not 2); the engine's pull without a server lands keys 1.. from b, and
//  so does `p2pkv pull` by key (key 0 missing: exit 1).
START_TEST(test_dead_holder_every_path)
{
    tr_redis_t r;
    tr_redis_start(&r, 0);
    td_t a, b, c;
    td_start(&a, (const char *[]) { "--peer-id", "dir-dead-a", "--directory", r.url,
                                    "--directory-ttl", "120", NULL });
    s_server(&b, "dir-dead-b", &r);
    td_start(&c, (const char *[]) { "--peer-id", "dir-dead-puller", "--directory", r.url,
                                    "--load-timeout", "4", "--silence-timeout", "4", NULL });
    td_t d;                             //  the CLI's puller (c's pull lands the keys in c)
    td_start(&d, (const char *[]) { "--peer-id", "dir-dead-cli", "--directory", r.url,
                                    "--load-timeout", "4", "--silence-timeout", "4", NULL });
    s_set_t set;
    s_set_make(&set, 5, 17);
    s_put_all(&a, &set);
    for (size_t i = 1; i < set.n; i++)
        s_put(&b, &set, i);
    s_found_t f = { 0 };
    p2pkv_client_t *watch = s_client("dir-dead-watch", &r, set.n);
    s_wait_counts(watch, &set, (size_t[]) { 1, 2, 2, 2, 2 }, &f);
    ck_assert_int_eq(kill(a.pid, SIGSTOP), 0);

    char hex[5][65], keys[5 * 66] = "", dir[64];
    for (size_t i = 0; i < set.n; i++) {
        pk_hex_encode(set.keys[i].bytes, set.keys[i].len, hex[i]);
        strcat(strcat(keys, " "), hex[i]);
    }
    sh_tmpdir(dir, "dir-dead");
    int status;         //  its log too, for a failure
    char *out = sh_output(&status, "bin/p2pkv get --directory %s --verbose --timeout 4 -o %s%s "
                          "2>&1", r.url, dir, keys);
    ck_assert_msg(status == 1, "%s", out);      //  key 0 only: not an error
    for (size_t i = 1; i < set.n; i++) {
        char want[512];
        snprintf(want, sizeof want, "%s fetched from %s\n", hex[i], b.endpoint);
        ck_assert_msg(strstr(out, want), "no \"%s\" in:\n%s", want, out);
    }
    char failed[128];
    snprintf(failed, sizeof failed, "%s failed", hex[0]);
    ck_assert_msg(strstr(out, failed), "%s", out);
    ck_assert_msg(strstr(out, "trying the next holder"), "%s", out);
    free(out);
    s_set_t rest = set;
    rest.n = set.n - 1;
    rest.data = set.data + BLOCK;
    s_check_files(dir, &rest, hex + 1);
    ck_assert_msg(sh_run("test -e %s/%s", dir, hex[0]) != 0, "key 0 was written");
    //  the JSON says where each came from (the same keys, so that the
    //  holder asked first is again the hung one); its log after it
    out = sh_output(&status, "bin/p2pkv get --directory %s --json --verbose --timeout 4 -o %s%s "
                    "2>%s/log", r.url, dir, keys, dir);
    int cat;
    char *said = sh_output(&cat, "cat %s/log && rm %s/log", dir, dir);
    ck_assert_msg(status == 1, "exit %d: %s\n%s", status, out, said);
    json_t *arr = json_loads(out, 0, NULL);
    ck_assert_msg(json_is_array(arr) && json_array_size(arr) == set.n, "%s\n%s", out, said);
    ck_assert_ptr_null(json_object_get(json_array_get(arr, 0), "from"));
    for (size_t i = 1; i < set.n; i++) {
        const char *from = json_string_value(json_object_get(json_array_get(arr, i), "from"));
        ck_assert_msg(from && strcmp(from, b.endpoint) == 0, "key %zu: %s\n%s", i, out, said);
    }
    json_decref(arr);
    free(out);
    free(said);
    s_check_files(dir, &rest, hex + 1);
    sh_rmrf(dir);

    //  the engine's pull without a server
    uint64_t id;
    char err[P2PKV_ERRLEN] = "";
    p2pkv_engine_t *engine = td_api(&c);
    ck_assert_int_eq(p2pkv_engine_pull(engine, NULL, set.keys, set.n, &id, NULL, NULL, err), 0);
    p2pkv_engine_event_t ev = { 0 };
    double deadline = pk_clock_monotonic() + BOUND;
    while (ev.kind != P2PKV_EVENT_PULL || ev.id != id) {
        ck_assert(pk_clock_monotonic() < deadline);
        ck_assert_int_eq(p2pkv_engine_next_event(engine, BOUND, &ev), 0);
    }
    ck_assert_msg(ev.landed == set.n - 1, "landed %zu, missing %zu: %s", (size_t) ev.landed,
                  (size_t) ev.missing, ev.reason);
    //  each key's source: b for keys 1.., none for key 0 (not landed)
    p2pkv_engine_pull_key_t res[5];
    ck_assert_int_eq(p2pkv_engine_pull_keys(engine, id, set.keys, set.n, res, err), 0);
    ck_assert_msg(res[0].status != P2PKV_KEY_LANDED && !res[0].source, "key 0: %d",
                  res[0].status);
    for (size_t i = 1; i < set.n; i++)
        ck_assert_msg(res[i].status == P2PKV_KEY_LANDED && res[i].source
                      && strcmp(res[i].source, b.endpoint) == 0, "key %zu: %d from %s", i,
                      res[i].status, res[i].source ? res[i].source : "(none)");
    ck_assert_int_eq(p2pkv_engine_pull_keys(engine, id + 1, set.keys, set.n, res, err), -ENOENT);

    //  `p2pkv pull` by key (no --server): the CLI's own path over the
    //  same pull, into d, which holds none of them: keys 1.. land from b
    //  or c (which holds them now), said with --verbose; key 0 (its one
    //  holder hung) is missing, with why; the pull itself worked
    out = sh_output(&status, "bin/p2pkv pull --verbose --local %s%s 2>&1", d.local, keys);
    for (size_t i = 0; i < set.n; i++) {
        char want[640], or[640];
        snprintf(want, sizeof want, i == 0 ? "%s missing " : "%s landed from %s\n", hex[i],
                 b.endpoint);
        snprintf(or, sizeof or, "%s landed from %s\n", hex[i], c.endpoint);
        ck_assert_msg(strstr(out, want) || (i && strstr(out, or)), "no \"%s\" in:\n%s", want,
                      out);
    }
    ck_assert_msg(status == 1, "p2pkv pull exit %d (want 1: a key missing):\n%s", status, out);
    free(out);
    p2pkv_engine_stats_t dst = td_stats(td_api(&d));
    ck_assert_uint_eq(dst.ready, set.n - 1);
    s_consumer_end(&watch, &f, &set);
    kill(a.pid, SIGCONT);
    td_kill(&a);
    ck_assert_int_eq(td_stop(&b), 0);
    ck_assert_int_eq(td_stop(&c), 0);
    ck_assert_int_eq(td_stop(&d), 0);
    tr_redis_stop(&r);
}
END_TEST


//  Issue 36: a hung holder in any place of the order.  a holds keys 0-2
//  and hangs (SIGSTOP, its record live), b holds 1 and 2.  Each pair of
//  keys, in both orders, is asked with `p2pkv get --directory`: whichever
//  holder the command describes first and whichever the get asks first,
//  every key b holds is fetched from b, and key 0 (only a's) is reported
//  failed (exit 1), never the others.
START_TEST(test_dead_holder_any_order)
{
    tr_redis_t r;
    tr_redis_start(&r, 0);
    td_t a, b;
    td_start(&a, (const char *[]) { "--peer-id", "dir-order-a", "--directory", r.url,
                                    "--directory-ttl", "120", NULL });
    s_server(&b, "dir-order-b", &r);
    s_set_t set;
    s_set_make(&set, 3, 19);
    s_put_all(&a, &set);
    s_put(&b, &set, 1);
    s_put(&b, &set, 2);
    s_found_t f = { 0 };
    p2pkv_client_t *watch = s_client("dir-order-watch", &r, set.n);
    s_wait_counts(watch, &set, (size_t[]) { 1, 2, 2 }, &f);
    ck_assert_int_eq(kill(a.pid, SIGSTOP), 0);
    char hex[3][65];
    for (size_t i = 0; i < set.n; i++)
        pk_hex_encode(set.keys[i].bytes, set.keys[i].len, hex[i]);
    const int orders[][2] = { { 1, 2 }, { 2, 1 }, { 0, 1 }, { 1, 0 }, { 2, 0 }, { 0, 2 } };
    for (size_t o = 0; o < sizeof orders / sizeof *orders; o++) {
        char dir[64];
        sh_tmpdir(dir, "dir-order");
        int status;
        char *out = sh_output(&status, "bin/p2pkv get --directory %s --verbose --timeout 3 "
                              "-o %s %s %s 2>&1", r.url, dir, hex[orders[o][0]],
                              hex[orders[o][1]]);
        bool zero = orders[o][0] == 0 || orders[o][1] == 0;
        ck_assert_msg(status == (zero ? 1 : 0), "keys %d,%d: exit %d\n%s", orders[o][0],
                      orders[o][1], status, out);
        for (int k = 0; k < 2; k++) {
            int key = orders[o][k];
            char want[512];
            if (key == 0)
                snprintf(want, sizeof want, "%s failed\n", hex[0]);
            else
                snprintf(want, sizeof want, "%s fetched from %s\n", hex[key], b.endpoint);
            ck_assert_msg(strstr(out, want), "keys %d,%d: no \"%s\" in:\n%s", orders[o][0],
                          orders[o][1], want, out);
            if (key != 0)
                sh_expect_file(set.data + (size_t) key * BLOCK, BLOCK, "%s/%s", dir, hex[key]);
        }
        free(out);
        sh_rmrf(dir);
    }
    s_consumer_end(&watch, &f, &set);
    kill(a.pid, SIGCONT);
    td_kill(&a);
    ck_assert_int_eq(td_stop(&b), 0);
    tr_redis_stop(&r);
}
END_TEST

//  A record carries the providers and the host identity; one an older
//  server wrote (neither) parses as its provider alone; bad ones are
//  refused.
START_TEST(test_record_providers_and_host_id)
{
    pk_dir_record_t r = { .peer_id = "a", .endpoint = "tcp://h:1", .host = "h",
                          .block_len = 4096, .pool_blocks = 8, .provider = "shm",
                          .fingerprint = "fp", .providers = { "shm", "tcp;ofi_rxm" },
                          .nproviders = 2, .host_id = "boot/net:1/ipc:2" };
    char *text = pk_dir_record_encode(&r);
    ck_assert_ptr_nonnull(text);
    pk_dir_record_t back;
    ck_assert_int_eq(pk_dir_record_parse(text, strlen(text), &back), 0);
    free(text);
    ck_assert_uint_eq(back.nproviders, 2);
    ck_assert_str_eq(back.providers[0], "shm");
    ck_assert_str_eq(back.providers[1], "tcp;ofi_rxm");
    ck_assert_str_eq(back.host_id, "boot/net:1/ipc:2");
    const char *old = "{\"v\":1,\"peer_id\":\"a\",\"endpoint\":\"tcp://h:1\",\"host\":\"h\","
                      "\"block_len\":4096,\"pool_blocks\":8,\"provider\":\"tcp\","
                      "\"fingerprint\":\"fp\"}";
    ck_assert_int_eq(pk_dir_record_parse(old, strlen(old), &back), 0);
    ck_assert_uint_eq(back.nproviders, 1);
    ck_assert_str_eq(back.providers[0], "tcp");
    ck_assert_str_eq(back.host_id, "");
    const char *bad[] = { "\"providers\":\"shm\"", "\"providers\":[]", "\"providers\":[\"\"]",
                          "\"providers\":[7]", "\"host_id\":7",
                          "\"providers\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char junk[512];
        snprintf(junk, sizeof junk, "%.*s,%s}", (int) strlen(old) - 1, old, bad[i]);
        ck_assert_msg(pk_dir_record_parse(junk, strlen(junk), &back) == -EINVAL, "%s", junk);
    }
}
END_TEST

//  A server's counts of get, lookup and fetch messages, from one answer
//  of its stats (a get counts in all three at once).
typedef struct {
    json_int_t gets, lookups, fetches;
} s_msgs_t;

static s_msgs_t
s_msgs(td_t *s)
{
    json_t *st = td_stats_json(s);
    json_t *m = json_object_get(st, "metrics");
    s_msgs_t out = {
        json_integer_value(json_object_get(json_object_get(m, "p2pkv_gets_total"), "total")),
        json_integer_value(json_object_get(json_object_get(m, "p2pkv_lookups_total"), "total")),
        json_integer_value(json_object_get(json_object_get(m, "p2pkv_fetches_total"), "total"))
    };
    json_decref(st);
    return out;
}

//  A server's counts since before, once it has counted at least one get
//  (or, gets false, once fetches passed lookups: the two steps' terminal
//  fetch goes out after the get returned), within BOUND.
static s_msgs_t
s_msgs_since(td_t *s, s_msgs_t before, bool gets)
{
    double deadline = pk_clock_monotonic() + BOUND;
    while (true) {
        s_msgs_t now = s_msgs(s);
        now.gets -= before.gets;
        now.lookups -= before.lookups;
        now.fetches -= before.fetches;
        if ((gets ? now.gets >= 1 : now.fetches > now.lookups)
            || pk_clock_monotonic() >= deadline)
            return now;
        zclock_sleep(10);
    }
}

//  Issue 37, point 1: a get through the directory sends one get message
//  to each holder that offers the capability, and takes the two steps
//  with one run with --gets off.  a (gets) holds keys 0..15, b (--gets
//  off) 16..35; 32..35 are listed for a too (stale: a evicted them), and
//  36 for a only, held by no one.  Every key held lands from the holder
//  that has it (its source), whichever of a and b was asked first for
//  32..35 (a's miss fails over to b); 36 is missing as a says why
//  (absent), its entry corrected.  a counts only gets (each one lookup
//  and one fetch, no lookup alone), b only lookups and fetches.  Then the
//  daemon's pull by directory (the engine's pull with no server, on c)
//  asks a with gets too.
START_TEST(test_any_server_gets_in_one_message)
{
    tr_redis_t r;
    tr_redis_start(&r, 0);
    td_t a, b, c;
    s_server(&a, "dir-get-a", &r);
    td_start(&b, (const char *[]) { "--peer-id", "dir-get-b", "--directory", r.url,
                                    "--gets", "off", NULL });
    s_server(&c, "dir-get-puller", &r);
    enum { N = 37, STALE = 32, NOWHERE = 36 };
    s_set_t set;
    s_set_make(&set, N, 23);
    size_t want[N];
    char name[256];
    for (size_t i = 0; i < N; i++) {
        want[i] = i >= STALE && i < NOWHERE ? 2 : 1;
        if (i < 16)
            s_put(&a, &set, i);
        else if (i < NOWHERE)
            s_put(&b, &set, i);
        if (i >= STALE) {
            s_key_name(&set.keys[i], name);
            ck_assert_int_eq(s_int(&r, "SADD %s %s", name, "dir-get-a"), 1);
        }
    }
    s_found_t f = { 0 };
    p2pkv_client_t *cl = s_client("dir-get-consumer", &r, N);
    s_wait_counts(cl, &set, want, &f);
    s_msgs_t a0 = s_msgs(&a), b0 = s_msgs(&b);
    uint32_t dest[N];
    p2pkv_key_result_t res[N];
    for (size_t i = 0; i < N; i++)
        dest[i] = (uint32_t) i;
    char err[P2PKV_ERRLEN] = "";
    int got = p2pkv_client_get_results(cl, P2PKV_ANY_SERVER, "any", set.keys, dest, N, true, 5,
                                       res, NULL, NULL, err);
    ck_assert_msg(got == N - 1, "got %d of %d: %s", got, N - 1, err);
    const uint8_t *pool = p2pkv_client_pool(cl);
    for (size_t i = 0; i < N; i++) {
        if (i == NOWHERE) {
            ck_assert_int_eq(res[i].status, P2PKV_KEY_MISSING);
            ck_assert_msg(res[i].reason == P2PKV_MISS_ABSENT, "reason %s",
                          p2pkv_miss_reason_name(res[i].reason));
            continue;
        }
        ck_assert_msg(res[i].status == P2PKV_KEY_LANDED, "key %zu: %d", i, res[i].status);
        ck_assert(res[i].verified);
        char from[256] = "";
        ck_assert_int_eq(p2pkv_client_server_endpoint(cl, res[i].holder, from, sizeof from), 0);
        ck_assert_msg(strcmp(from, i < 16 ? a.endpoint : b.endpoint) == 0, "key %zu from %s",
                      i, from);
        ck_assert_msg(memcmp(pool + i * BLOCK, set.data + i * BLOCK, BLOCK) == 0,
                      "block %zu differs", i);
    }
    s_key_name(&set.keys[NOWHERE], name);
    ck_assert_int_eq(s_int(&r, "SISMEMBER %s %s", name, "dir-get-a"), 0);
    ck_assert_uint_eq(s_stats(cl).failovers, 0);
    //  a: gets only (each a lookup and a fetch); b: the two steps
    s_msgs_t da = s_msgs_since(&a, a0, true), db = s_msgs_since(&b, b0, false);
    ck_assert_int_ge(da.gets, 1);
    ck_assert_int_eq(da.lookups, da.gets);
    ck_assert_int_eq(da.fetches, da.gets);
    ck_assert_int_eq(db.gets, 0);
    ck_assert_int_ge(db.lookups, 1);
    ck_assert_int_gt(db.fetches, db.lookups);

    //  the daemon's pull by directory: c gets keys 0..15 from a, in gets
    a0 = s_msgs(&a);
    uint64_t id;
    p2pkv_engine_t *engine = td_api(&c);
    ck_assert_int_eq(p2pkv_engine_pull(engine, NULL, set.keys, 16, &id, NULL, NULL, err), 0);
    p2pkv_engine_event_t ev = { 0 };
    double deadline = pk_clock_monotonic() + BOUND;
    while (ev.kind != P2PKV_EVENT_PULL || ev.id != id) {
        ck_assert(pk_clock_monotonic() < deadline);
        ck_assert_int_eq(p2pkv_engine_next_event(engine, BOUND, &ev), 0);
    }
    ck_assert_msg(ev.landed == 16 && ev.missing == 0, "%s", ev.reason);
    da = s_msgs_since(&a, a0, true);
    ck_assert_int_ge(da.gets, 1);
    ck_assert_int_eq(da.lookups, da.gets);
    ck_assert_int_eq(da.fetches, da.gets);
    s_consumer_end(&cl, &f, &set);
    ck_assert_int_eq(td_stop(&a), 0);
    ck_assert_int_eq(td_stop(&b), 0);
    ck_assert_int_eq(td_stop(&c), 0);
    tr_redis_stop(&r);
}
END_TEST

int
main(void)
{
    int rc = td_suite_start();
    if (rc == 0)
        rc = tr_redis_suite_start();
    if (rc)
        return rc;
    td_sweep();
    Suite *suite = suite_create("directory");
    //  the sum of a test's generous bounds, not what it takes
    TCase *tc = td_case(suite, "redis", 300);
    tcase_add_test(tc, test_record_providers_and_host_id);
    tcase_add_test(tc, test_three_servers_fetch_by_key);
    tcase_add_test(tc, test_any_server_gets_in_one_message);
    tcase_add_test(tc, test_holder_killed_mid_get);
    tcase_add_test(tc, test_ttl_setting_ends_a_killed_holder);
    tcase_add_test(tc, test_redis_stopped_and_restarted);
    tcase_add_test(tc, test_evicted_but_listed);
    tcase_add_test(tc, test_spilled_keys_republished);
    tcase_add_test(tc, test_bad_directory);
    tcase_add_test(tc, test_junk_entries_ignored_and_counted);
    tcase_add_test(tc, test_clean_exit_removes_the_server);
    tcase_add_test(tc, test_cli_and_pull_by_key);
    tcase_add_test(tc, test_dead_holder_every_path);
    tcase_add_test(tc, test_dead_holder_any_order);
    tcase_add_test(tc, test_cli_by_key_over_curve);
    tcase_add_test(tc, test_redis_cluster);
    tcase_add_test(tc, test_cluster_master_killed);
    tcase_add_test(tc, test_cluster_master_killed_partial_coverage);
    return pk_test_run("directory", suite);
}
