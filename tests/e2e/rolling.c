/*  rolling.c: the hardening suite's rolling restart (issue 36, point 3's
    target; see hardening.h, hh_rolling).

    The fleet: nservers real p2pkv-servers on fixed loopback ports, each
    with --peer-id roll-J and a real redis-server (started here) as the
    directory; key i is held by servers i % nservers and (i + 1) %
    nservers, so with three servers every key has exactly two holders and
    a restart leaves it one.  nconsumers threads, each with a client of
    its own on the directory, fetch batches of keys by key
    (P2PKV_ANY_SERVER) the whole time into blocks they zeroed first, and
    check every byte and every per-key result.

    The restart, server after server: SIGTERM (it drains: leaves the
    directory, answers lookups as misses, finishes its fetches in
    flight, exits 0), started again on the same --peer-id, port and pool
    name, its keys put again, and only once the directory lists it as a
    holder of every one of them again does the next server go.  A get
    that does not land every key whole, in time, is a failure: the
    client's failover, the drain or the directory lost it.  No sleep:
    every wait is on a condition, with a bound.

    What carries it: the drain alone does not.  A get that located the
    keys just before the server left the directory still asks it, and
    meets misses (draining) or a session told shutdown; only the
    failover inside the get (lib/client/get_any.c) saves those, which is
    why the row counts the holders given up mid-get.  With the failover
    cut to one attempt this test fails in every run (seen: "16 of 32
    landed"); with kill -9 instead of SIGTERM (no drain, the record left
    live) it passes on the failover alone, slower.
*/
#include "hardening.h"
#include "redis.h"
#include "base/clock.h"
#include "testutil.h"

#include <czmq.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#define S_BLOCK (64 * 1024)       //  a get of a batch: 2 MiB, long enough in flight
#define S_TAG 7
#define S_KEYS 96
#define S_BATCH 32
#define S_MAX_SERVERS 3
#define S_MAX_CONSUMERS 8
#define S_BOUND 60.0                //  seconds any one wait may take

typedef struct {
    const char *url;                //  the directory
    const p2pkv_key_t *keys;
    int id;
    const atomic_int *away;         //  a server is stopped or not yet back: its number + 1
    atomic_bool stop;
    atomic_uint_fast64_t gets, blocks, away_gets, failed, corrupt;
    atomic_uint_fast64_t failovers, corrected;  //  its client's directory stats, at the end
    char first_error[512];
    pthread_t thread;
} s_consumer_t;

typedef struct {
    td_t d;
    char endpoint[64], peer_id[32], pool[64], local[128];
} s_server_t;

static void
s_error(s_consumer_t *c, atomic_uint_fast64_t *counter, const char *what, const char *detail)
{
    //  said before it is counted: the test reads it once a count is seen
    if (atomic_load(&c->failed) + atomic_load(&c->corrupt) == 0)
        snprintf(c->first_error, sizeof c->first_error, "consumer %d: %s: %s", c->id, what,
                 detail);
    atomic_fetch_add(counter, 1);
}

//  One get by key of a batch of keys into blocks zeroed first: every key
//  must land, and every landed block hold its own pattern.
static void
s_get(s_consumer_t *c, p2pkv_client_t *client, uint64_t n)
{
    uint8_t *pool = p2pkv_client_pool(client);
    p2pkv_key_t batch[S_BATCH];
    uint32_t dest[S_BATCH];
    size_t which[S_BATCH];
    p2pkv_key_result_t res[S_BATCH];
    size_t first = (size_t) (n * 5 + (uint64_t) c->id * 11) % S_KEYS;
    for (size_t i = 0; i < S_BATCH; i++) {
        which[i] = (first + i) % S_KEYS;
        batch[i] = c->keys[which[i]];
        dest[i] = (uint32_t) which[i];
        memset(pool + (size_t) dest[i] * S_BLOCK, 0, S_BLOCK);
    }
    bool away = atomic_load(c->away) != 0;
    char kv[64], err[P2PKV_ERRLEN] = "";
    snprintf(kv, sizeof kv, "roll-%d-%" PRIu64, c->id, n);
    int rc = p2pkv_client_get_results(client, P2PKV_ANY_SERVER, kv, batch, dest, S_BATCH, true,
                                      S_BOUND, res, NULL, NULL, err);
    size_t bad = 0, landed = 0;
    for (size_t i = 0; i < S_BATCH; i++) {
        if (res[i].status == P2PKV_KEY_CORRUPT) {
            s_error(c, &c->corrupt, "a block reported corrupt", kv);
            continue;
        }
        if (res[i].status != P2PKV_KEY_LANDED)
            continue;
        landed++;
        if (bk_block_diff(pool + (size_t) dest[i] * S_BLOCK, S_TAG, which[i], S_BLOCK)) {
            bad++;
            s_error(c, &c->corrupt, "a landed block differs from its pattern", kv);
        }
    }
    if (rc != S_BATCH || landed != S_BATCH) {
        char detail[2 * P2PKV_ERRLEN];
        snprintf(detail, sizeof detail, "%s: %d of %d landed (%s)", kv, rc, S_BATCH,
                 *err ? err : "no error said");
        s_error(c, &c->failed, "a get failed", detail);
        return;
    }
    atomic_fetch_add(&c->blocks, landed - bad);
    atomic_fetch_add(&c->gets, 1);
    //  begun and ended while a server was away: the failover's own gets
    if (away && atomic_load(c->away) != 0)
        atomic_fetch_add(&c->away_gets, 1);
}

static void *
s_consumer_run(void *arg)
{
    s_consumer_t *c = arg;
    char name[64], err[P2PKV_ERRLEN] = "";
    snprintf(name, sizeof name, "roll-consumer-%d", c->id);
    //  a consumer as deployed: reconnecting, its own progress thread
    p2pkv_config_t cfg = { .peer_id = name, .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = "127.0.0.1", .load_timeout = 20,
                           .keepalive_interval = 0.5, .silence_timeout = 10,
                           .connect_retry = 0.1, .directory = c->url,
                           .progress_thread = true };
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, S_KEYS, S_BLOCK,
                                              (p2pkv_callbacks_t) { 0 }, err);
    if (!client) {
        s_error(c, &c->failed, "p2pkv_client_new", err);
        return NULL;
    }
    for (uint64_t n = 0; !atomic_load(&c->stop); n++)
        s_get(c, client, n);
    p2pkv_directory_stats_t ds = { 0 };
    if (p2pkv_client_directory_stats(client, &ds) == 0) {
        atomic_store(&c->failovers, ds.failovers);
        atomic_store(&c->corrected, ds.corrected);
    }
    p2pkv_client_destroy(&client);
    return NULL;
}

static uint64_t
s_sum(s_consumer_t *cs, size_t n, size_t offset)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += atomic_load((atomic_uint_fast64_t *) ((char *) &cs[i] + offset));
    return total;
}

#define S_SUM(cs, n, field) s_sum(cs, n, offsetof(s_consumer_t, field))

//  Every consumer completed at least want more gets than in since, with
//  none failed (bounded): else the test fails, naming the first error.
static void
s_consumers_advance(s_consumer_t *cs, size_t n, const uint64_t *since, uint64_t want,
                    const char *when)
{
    double deadline = pk_clock_monotonic() + S_BOUND;
    for (size_t i = 0; i < n; i++) {
        while (atomic_load(&cs[i].gets) < since[i] + want
               && atomic_load(&cs[i].failed) + atomic_load(&cs[i].corrupt) == 0) {
            ck_assert_msg(pk_clock_monotonic() < deadline, "%s: consumer %zu made no progress "
                          "in %g s", when, i, S_BOUND);
            zclock_sleep(5);
        }
        ck_assert_msg(atomic_load(&cs[i].failed) + atomic_load(&cs[i].corrupt) == 0,
                      "%s: %s", when, cs[i].first_error);
    }
}

static bool
s_holds(size_t nservers, size_t server, size_t key)
{
    return key % nservers == server || (key + 1) % nservers == server;
}

static void
s_server_start(s_server_t *s, const char *url)
{
    td_start(&s->d, (const char *const[]) {
        "--peer-id", s->peer_id, "--directory", url, "--bind", s->endpoint,
        "--pool-name", s->pool, "--local", s->local, "--pool-blocks", "128",
        "--block-len", "65536", "--pin-quota", "128", NULL });
}

//  The server's keys, put as an engine does (reserve, write, commit).
static void
s_server_fill(s_server_t *s, const p2pkv_key_t *keys, size_t nservers, size_t server)
{
    uint8_t *pool = p2pkv_engine_pool(td_api(&s->d));
    for (size_t i = 0; i < S_KEYS; i++) {
        if (!s_holds(nservers, server, i))
            continue;
        uint32_t block;
        td_reserve(&s->d, &keys[i], 1, &block);
        bk_block_fill(pool + (size_t) block * S_BLOCK, S_TAG, i, S_BLOCK);
        td_commit(&s->d, &keys[i], 1);
    }
}

typedef struct {
    const char *peer_id;
    size_t nservers, server;
    bool ok;                        //  every key lists peer_id iff it holds it
} s_listed_t;

static void
s_on_found(void *arg, size_t i, const p2pkv_holder_t *h, size_t n)
{
    s_listed_t *l = arg;
    bool listed = false;
    for (size_t k = 0; k < n; k++)
        listed = listed || strcmp(h[k].peer_id, l->peer_id) == 0;
    if (listed != s_holds(l->nservers, l->server, i))
        l->ok = false;
}

//  Waits (bounded) until the directory lists server as a holder of
//  exactly the keys it holds: it is back.
static void
s_wait_listed(p2pkv_client_t *watch, const p2pkv_key_t *keys, const char *peer_id,
              size_t nservers, size_t server)
{
    double deadline = pk_clock_monotonic() + S_BOUND;
    while (true) {
        s_listed_t l = { peer_id, nservers, server, true };
        char err[P2PKV_ERRLEN] = "";
        if (p2pkv_client_locate(watch, keys, S_KEYS, s_on_found, &l, err) == 0 && l.ok)
            return;
        ck_assert_msg(pk_clock_monotonic() < deadline, "%s not back in the directory within "
                      "%g s (%s)", peer_id, S_BOUND, err);
        zclock_sleep(10);
    }
}

void
hh_rolling(size_t nservers, size_t nconsumers, size_t restarts)
{
    ck_assert(nservers >= 2 && nservers <= S_MAX_SERVERS);
    ck_assert(nconsumers >= 1 && nconsumers <= S_MAX_CONSUMERS);
    double t0 = pk_clock_monotonic();
    tr_redis_t r;
    tr_redis_start(&r, 0);
    p2pkv_key_t *keys = bk_keys(S_TAG, 0, S_KEYS);
    s_server_t servers[S_MAX_SERVERS];
    for (size_t j = 0; j < nservers; j++) {
        s_server_t *s = &servers[j];
        td_fixed_endpoint(s->endpoint, sizeof s->endpoint);
        snprintf(s->peer_id, sizeof s->peer_id, "roll-%zu", j);
        snprintf(s->pool, sizeof s->pool, "/p2pkv-e2e-%d-roll%zu", (int) getpid(), j);
        snprintf(s->local, sizeof s->local, "ipc:///tmp/p2pkv-e2e-%d-roll%zu.sock",
                 (int) getpid(), j);
        s_server_start(s, r.url);
        s_server_fill(s, keys, nservers, j);
    }
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t wcfg = { .peer_id = "roll-watch", .fingerprint = "fp", .hash_seed = "7",
                            .provider = "tcp", .directory = r.url };
    p2pkv_client_t *watch = p2pkv_client_new(&wcfg, NULL, 1, S_BLOCK, (p2pkv_callbacks_t) { 0 },
                                             err);
    ck_assert_msg(watch != NULL, "watcher: %s", err);
    for (size_t j = 0; j < nservers; j++)
        s_wait_listed(watch, keys, servers[j].peer_id, nservers, j);

    atomic_int away = 0;
    s_consumer_t cs[S_MAX_CONSUMERS];
    uint64_t since[S_MAX_CONSUMERS] = { 0 };
    for (size_t i = 0; i < nconsumers; i++) {
        memset(&cs[i], 0, sizeof cs[i]);
        cs[i].url = r.url;
        cs[i].keys = keys;
        cs[i].id = (int) i;
        cs[i].away = &away;
        ck_assert_int_eq(pthread_create(&cs[i].thread, NULL, s_consumer_run, &cs[i]), 0);
    }
    s_consumers_advance(cs, nconsumers, since, 3, "before the restarts");

    for (size_t k = 0; k < restarts; k++) {
        size_t j = k % nservers;
        s_server_t *s = &servers[j];
        char when[96];
        //  the signal comes while consumers are fetching from it (its
        //  count of blocks written rose just now): the drain must finish
        //  what is in flight, or the consumer fetch it again elsewhere
        int64_t written = hh_metric(&s->d, "p2pkv_blocks_written_total", NULL);
        ck_assert_msg(hh_metric_reach(&s->d, "p2pkv_blocks_written_total", NULL, written + 1,
                                      S_BOUND) > written, "%s: served nothing for %g s",
                      s->peer_id, S_BOUND);
        atomic_store(&away, (int) j + 1);
        int status = td_stop(&s->d);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "%s: the drain ended with status %d", s->peer_id, status);
        //  gone: every consumer gets its keys from the others meanwhile
        for (size_t i = 0; i < nconsumers; i++)
            since[i] = atomic_load(&cs[i].gets);
        snprintf(when, sizeof when, "while %s was stopped", s->peer_id);
        s_consumers_advance(cs, nconsumers, since, 2, when);
        s_server_start(s, r.url);
        s_server_fill(s, keys, nservers, j);
        s_wait_listed(watch, keys, s->peer_id, nservers, j);
        atomic_store(&away, 0);
        //  and goes on after it
        for (size_t i = 0; i < nconsumers; i++)
            since[i] = atomic_load(&cs[i].gets);
        snprintf(when, sizeof when, "after %s came back", s->peer_id);
        s_consumers_advance(cs, nconsumers, since, 2, when);
    }
    for (size_t i = 0; i < nconsumers; i++) {
        atomic_store(&cs[i].stop, true);
        pthread_join(cs[i].thread, NULL);
    }
    uint64_t failed = S_SUM(cs, nconsumers, failed), corrupt = S_SUM(cs, nconsumers, corrupt);
    const char *first = "";
    for (size_t i = 0; i < nconsumers && !*first; i++)
        first = cs[i].first_error;
    ck_assert_msg(failed == 0 && corrupt == 0, "%" PRIu64 " failed gets, %" PRIu64 " corrupt "
                  "blocks: %s", failed, corrupt, first);
    uint64_t gets = S_SUM(cs, nconsumers, gets), blocks = S_SUM(cs, nconsumers, blocks);
    uint64_t away_gets = S_SUM(cs, nconsumers, away_gets);
    uint64_t failovers = S_SUM(cs, nconsumers, failovers);
    uint64_t corrected = S_SUM(cs, nconsumers, corrected);
    char what[512], outcome[512];
    snprintf(what, sizeof what, "rolling restart of %zu servers (SIGTERM: drain; restarted on "
             "the same --peer-id and port, keys put again; the next once it is back in the "
             "directory) under %zu consumers fetching by key (P2PKV_ANY_SERVER) keys each "
             "held by two servers, a redis-server as the directory", nservers, nconsumers);
    snprintf(outcome, sizeof outcome, "%" PRIu64 " gets of %d keys, %" PRIu64 " blocks "
             "checked (%" PRIu64 " gets while a server was away; %" PRIu64 " holders given up "
             "mid-get, %" PRIu64 " entries corrected, within the gets); each drain exited 0 "
             "and its server was listed again", gets, S_BATCH, blocks, away_gets, failovers,
             corrected);
    hh_report(what, restarts, outcome, "nothing (0 failed gets, 0 corrupt blocks)",
              pk_clock_monotonic() - t0);
    p2pkv_client_destroy(&watch);
    for (size_t j = 0; j < nservers; j++)
        ck_assert_int_eq(td_stop(&servers[j].d), 0);
    bk_keys_free(keys);
    tr_redis_stop(&r);
}
