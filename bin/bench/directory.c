/*  directory.c: the cluster directory (issue 14) against a redis-server
    the suite starts on a free loopback port (nothing saved to disk).

    upkeep: one server's side, in process: a store whose commits (each,
    once the pool is full, also an eviction) go through the directory
    actor into Redis; changes per second from the first commit until
    every change is in Redis (pk_directory_flush), as batches.  The
    queue is sized so that nothing is dropped (a drop would be a resync,
    not upkeep): the figure is what the actor drains, pipelined.

    locate: three publishers (stores and their directory actors in
    process, records naming endpoints nobody dials) hold 1,024 keys
    spread over them, a third of them on two; a client of the library
    locates all 1,024 at once, again and again: latency percentiles and
    round trips per locate.

    get by key: directory_get.c, with real p2pkv-servers.
*/
#include "bench.h"
#include "base/clock.h"
#include "base/key.h"
#include "daemon/directory.h"
#include "cluster/dir_redis.h"
#include "p2pkv.h"

#include <czmq.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_LOCATE_KEYS 1024
#define S_POOL 65536                    //  upkeep: blocks of the store

typedef struct {
    pid_t pid;
    int port;
    char url[64];
} s_redis_t;

static int
s_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int port = fd >= 0 && bind(fd, (struct sockaddr *) &a, sizeof a) == 0
               && getsockname(fd, (struct sockaddr *) &a, &len) == 0 ? ntohs(a.sin_port) : -1;
    if (fd >= 0)
        close(fd);
    return port;
}

static redisReply *
s_cmd(const s_redis_t *r, const char *cmd)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    redisReply *rep = c && !c->err ? redisCommand(c, cmd) : NULL;
    if (c)
        redisFree(c);
    return rep;
}

//  redis-server on a free port, answering PING within 10 s: 0 or -errno.
static int
s_redis_start(s_redis_t *r)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) {
        fprintf(stderr, "p2pkv-bench directory: redis-server is not installed (Debian "
                "package redis-server)\n");
        return -ENOENT;
    }
    r->port = s_free_port();
    snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    r->pid = pkb_fork();
    if (r->pid == 0) {
        freopen("/dev/null", "w", stdout);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save",
               "", "--appendonly", "no", "--daemonize", "no", (char *) NULL);
        _exit(127);
    }
    for (int i = 0; i < 1000; i++) {
        redisReply *rep = s_cmd(r, "PING");
        bool up = rep && rep->type == REDIS_REPLY_STATUS;
        if (rep)
            freeReplyObject(rep);
        if (up)
            return 0;
        zclock_sleep(10);
    }
    fprintf(stderr, "p2pkv-bench directory: redis-server never answered on %d\n", r->port);
    return -ETIMEDOUT;
}

static void
s_redis_stop(s_redis_t *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        pkb_reap(r->pid, 10);
    }
    r->pid = 0;
}

//  The actors' lines: errors and warnings only, the table stays readable.
static void
s_log(void *arg, int level, const char *line)
{
    if (level <= 1)
        fprintf(stderr, "p2pkv-bench directory: %s\n", line);
}

//  A directory actor over store, publishing as peer.
static pk_directory_t *
s_publisher(const s_redis_t *r, pk_store_t *store, const char *peer, size_t queue_bytes)
{
    pk_directory_config_t c = { .url = r->url, .queue_bytes = queue_bytes, .log = s_log };
    snprintf(c.record.peer_id, sizeof c.record.peer_id, "%s", peer);
    snprintf(c.record.endpoint, sizeof c.record.endpoint, "tcp://127.0.0.1:9");
    gethostname(c.record.host, sizeof c.record.host - 1);
    c.record.block_len = pk_store_block_len(store);
    c.record.pool_blocks = pk_store_num_blocks(store);
    snprintf(c.record.provider, sizeof c.record.provider, "tcp");
    char err[PK_ERRLEN];
    int rc;
    pk_directory_t *d = pk_directory_new(&c, store, &rc, err);
    if (!d)
        fprintf(stderr, "p2pkv-bench directory: %s\n", err);
    return d;
}

//  Commits keys first..first+n-1 (bench keys) in batches of 1,024.
static int
s_commit(pk_store_t *store, uint64_t first, uint64_t n)
{
    uint8_t bytes[1024][PKB_KEY_LEN];
    pk_key_t keys[1024];
    uint32_t blocks[1024];
    for (uint64_t at = 0; at < n; at += 1024) {
        size_t m = n - at < 1024 ? (size_t) (n - at) : 1024;
        for (size_t i = 0; i < m; i++) {
            pkb_key(first + at + i, bytes[i]);
            keys[i] = pk_key_make(bytes[i], PKB_KEY_LEN);
        }
        if (pk_store_reserve(store, 1, PK_NS_SHARED, keys, m, blocks)
            || pk_store_commit_sums(store, 1, PK_NS_SHARED, keys, m, NULL, NULL))
            return -EIO;
    }
    return 0;
}

//  One repetition of upkeep: changes per second, and the batches taken.
static int
s_upkeep_once(const s_redis_t *r, uint64_t commits, double *rate, double *per_batch)
{
    freeReplyObject(s_cmd(r, "FLUSHALL"));
    pk_store_t *store = pk_store_new(NULL, S_POOL, 64, NULL, (pk_clock_t) { 0 }, NULL,
                                     NULL, NULL, NULL);
    //  room for every change of the run: a drop would measure a resync
    pk_directory_t *d = store ? s_publisher(r, store, "bench-upkeep", 256u << 20) : NULL;
    int rc = d && pk_directory_flush(d, 10) == 0 ? 0 : -EIO;     //  the empty pool published
    pk_directory_stats_t st0, st1;
    if (d)
        pk_directory_stats(d, &st0);
    double t0 = pk_clock_monotonic();
    if (rc == 0)
        rc = s_commit(store, 0, commits);
    if (rc == 0)
        rc = pk_directory_flush(d, 60);
    double t1 = pk_clock_monotonic();
    if (d)
        pk_directory_stats(d, &st1);
    if (rc == 0 && st1.dropped != st0.dropped)
        rc = -ENOBUFS;
    uint64_t changes = st1.updates - st0.updates;
    *rate = changes / (t1 - t0);
    *per_batch = st1.batches > st0.batches ? (double) changes / (st1.batches - st0.batches) : 0;
    pk_directory_destroy(&d);
    pk_store_destroy(&store);
    return rc;
}

typedef struct {
    p2pkv_key_t keys[S_LOCATE_KEYS];
    uint8_t bytes[S_LOCATE_KEYS][PKB_KEY_LEN];
    size_t holders;
} s_locate_t;

static void
s_on_locate(void *arg, size_t i, const p2pkv_holder_t *h, size_t n)
{
    ((s_locate_t *) arg)->holders += n;
}

//  Three publishers of 1,024 keys (a third on two of them): 0 or -errno.
static int
s_locate_setup(const s_redis_t *r, pk_store_t **stores, pk_directory_t **dirs)
{
    char peer[32];
    for (int s = 0; s < 3; s++) {
        snprintf(peer, sizeof peer, "bench-holder-%d", s);
        stores[s] = pk_store_new(NULL, 4096, 64, NULL, (pk_clock_t) { 0 }, NULL, NULL,
                                 NULL, NULL);
        dirs[s] = stores[s] ? s_publisher(r, stores[s], peer, 0) : NULL;
        if (!dirs[s])
            return -EIO;
    }
    for (uint64_t i = 0; i < S_LOCATE_KEYS; i++)
        if (s_commit(stores[i % 3], i, 1) || (i % 3 == 0 && s_commit(stores[1], i, 1)))
            return -EIO;
    for (int s = 0; s < 3; s++)
        if (pk_directory_flush(dirs[s], 10))
            return -ETIMEDOUT;
    return 0;
}

//  One repetition: n locates of the 1,024 keys; p50, p99 (ms) and round
//  trips per locate.
static int
s_locate_once(p2pkv_client_t *c, s_locate_t *l, int n, double *p50, double *p99, double *rtt)
{
    double *ms = malloc((size_t) n * sizeof *ms);
    char err[P2PKV_ERRLEN];
    p2pkv_directory_stats_t st0, st1;
    p2pkv_client_directory_stats(c, &st0);
    int rc = ms ? 0 : -ENOMEM;
    size_t want = S_LOCATE_KEYS + (S_LOCATE_KEYS + 2) / 3;
    for (int i = 0; rc == 0 && i < n; i++) {
        l->holders = 0;
        double t0 = pk_clock_monotonic();
        rc = p2pkv_client_locate(c, l->keys, S_LOCATE_KEYS, s_on_locate, l, err);
        ms[i] = (pk_clock_monotonic() - t0) * 1e3;
        if (rc == 0 && l->holders != want) {
            fprintf(stderr, "p2pkv-bench directory: %zu holders, not %zu\n", l->holders, want);
            rc = -EIO;
        }
    }
    if (rc)
        fprintf(stderr, "p2pkv-bench directory: locate: %s\n", err);
    p2pkv_client_directory_stats(c, &st1);
    *rtt = (double) (st1.round_trips - st0.round_trips) / (st1.locates - st0.locates);
    if (rc == 0) {
        *p50 = pkb_quantile(ms, (size_t) n, 0.5);
        *p99 = pkb_quantile(ms, (size_t) n, 0.99);
    }
    free(ms);
    return rc;
}

//  The floor in the same run: the same 1,024 SMEMBERS as one raw hiredis
//  pipeline, nothing parsed or checked; p50 ms of n.
static int
s_raw_once(const s_redis_t *r, s_locate_t *l, int n, double *p50)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    double *ms = malloc((size_t) n * sizeof *ms);
    int rc = c && !c->err && ms ? 0 : -EIO;
    for (int i = 0; rc == 0 && i < n; i++) {
        double t0 = pk_clock_monotonic();
        for (size_t k = 0; k < S_LOCATE_KEYS; k++) {
            char name[PK_DIR_KEY_NAME_LEN(PKB_KEY_LEN)];
            int len = pk_dir_key_name(l->bytes[k], PKB_KEY_LEN, name, sizeof name);
            const char *argv[2] = { "SMEMBERS", name };
            size_t lens[2] = { 8, (size_t) len };
            redisAppendCommandArgv(c, 2, argv, lens);
        }
        for (size_t k = 0; rc == 0 && k < S_LOCATE_KEYS; k++) {
            void *rep = NULL;
            rc = redisGetReply(c, &rep) == REDIS_OK ? 0 : -EIO;
            if (rep)
                freeReplyObject(rep);
        }
        ms[i] = (pk_clock_monotonic() - t0) * 1e3;
    }
    if (rc == 0)
        *p50 = pkb_quantile(ms, (size_t) n, 0.5);
    free(ms);
    if (c)
        redisFree(c);
    return rc;
}

static int
s_locate(const pkb_opts_t *o, const s_redis_t *r, int reps, pkb_fig_t *f50, pkb_fig_t *f99,
         pkb_fig_t *fraw, double *rtt)
{
    pk_store_t *stores[3] = { 0 };
    pk_directory_t *dirs[3] = { 0 };
    int rc = s_locate_setup(r, stores, dirs);
    s_locate_t *l = calloc(1, sizeof *l);
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = "bench-locate", .provider = "tcp", .directory = r->url };
    p2pkv_client_t *c = rc == 0 && l ? p2pkv_client_new(&cfg, NULL, 1, 64,
                                                        (p2pkv_callbacks_t) { 0 }, err) : NULL;
    if (!c && rc == 0)
        fprintf(stderr, "p2pkv-bench directory: %s\n", err[0] ? err : "out of memory");
    rc = c ? 0 : -EIO;
    for (size_t i = 0; l && i < S_LOCATE_KEYS; i++) {
        pkb_key(i, l->bytes[i]);
        l->keys[i] = (p2pkv_key_t) { l->bytes[i], PKB_KEY_LEN };
    }
    double p50[PKB_MAX_REPS], p99[PKB_MAX_REPS], raw[PKB_MAX_REPS], w50, w99;
    if (rc == 0)
        rc = s_locate_once(c, l, 20, &w50, &w99, rtt);      //  warm: the servers known
    int n = o->quick ? 200 : 1000;
    for (int i = 0; rc == 0 && i < reps; i++) {             //  interleaved with the floor
        rc = s_locate_once(c, l, n, &p50[i], &p99[i], rtt);
        if (rc == 0)
            rc = s_raw_once(r, l, n, &raw[i]);
    }
    if (rc == 0) {
        *f50 = pkb_fig(p50, (size_t) reps);
        *f99 = pkb_fig(p99, (size_t) reps);
        *fraw = pkb_fig(raw, (size_t) reps);
    }
    p2pkv_client_destroy(&c);
    free(l);
    for (int s = 0; s < 3; s++) {
        pk_directory_destroy(&dirs[s]);
        pk_store_destroy(&stores[s]);
    }
    return rc;
}

int
pkb_directory(const pkb_opts_t *o)
{
    int reps = o->reps ? o->reps : o->quick ? 3 : 7;
    uint64_t commits = o->quick ? 200000 : 1000000;
    s_redis_t r = { 0 };
    if (s_redis_start(&r))
        return 1;
    double rate[PKB_MAX_REPS], batch[PKB_MAX_REPS], rtt = 0;
    int rc = 0;
    for (int i = 0; rc == 0 && i < reps; i++)
        rc = s_upkeep_once(&r, commits, &rate[i], &batch[i]);
    if (rc)
        fprintf(stderr, "p2pkv-bench directory: upkeep failed: %s\n", strerror(-rc));
    pkb_fig_t up = { 0 }, per = { 0 }, f50 = { 0 }, f99 = { 0 }, fraw = { 0 };
    if (rc == 0) {
        up = pkb_fig(rate, (size_t) reps);
        per = pkb_fig(batch, (size_t) reps);
        rc = s_locate(o, &r, reps, &f50, &f99, &fraw, &rtt);
    }
    pkb_dirget_t on = { 0 }, off = { 0 };
    if (rc == 0)
        rc = pkb_directory_get(o, r.url, reps, &on, &off);
    s_redis_stop(&r);
    if (rc)
        return 1;
    char a[64], b[64], c[64], d[64];
    printf("directory: redis-server on 127.0.0.1; median [min..max] of %d runs\n", reps);
    printf("  upkeep: %llu commits into a pool of %d (then each also an eviction)\n",
           (unsigned long long) commits, S_POOL);
    printf("    changes/s %-34s changes/batch %s (target >= 100000/s)\n",
           pkb_fig_str(up, "%.0f", a, sizeof a), pkb_fig_str(per, "%.0f", b, sizeof b));
    printf("  locate: %d keys over 3 servers, %d locates a run, %.2f round trips each\n",
           S_LOCATE_KEYS, o->quick ? 200 : 1000, rtt);
    printf("    p50 ms %-37s p99 ms %s (target p50 <= 2)\n", pkb_fig_str(f50, "%.3f", c, sizeof c),
           pkb_fig_str(f99, "%.3f", d, sizeof d));
    printf("    raw hiredis pipeline of the same 1024 SMEMBERS, p50 ms %s (the floor)\n",
           pkb_fig_str(fraw, "%.3f", a, sizeof a));
    printf("  get by key: 32 x 64 KiB held by 2 servers, %d gets a run, each a locate "
           "and a get per holder\n", o->quick ? 50 : 200);
    const pkb_dirget_t *modes[2] = { &on, &off };
    const char *names[2] = { "get", "two steps (--gets off)" };
    for (int m = 0; m < 2; m++)
        printf("    %-22s p50 ms %-24s p99 ms %-24s messages/get %.2f, redis %.2f\n",
               names[m], pkb_fig_str(modes[m]->p50, "%.3f", a, sizeof a),
               pkb_fig_str(modes[m]->p99, "%.3f", b, sizeof b), modes[m]->messages,
               modes[m]->redis_round_trips);
    pkb_report_t *rep = pkb_report_new(o, NULL);
    json_t *row = pkb_report_row(rep);
    json_object_set_new(row, "measure", json_string("upkeep"));
    json_object_set_new(row, "commits", json_integer((json_int_t) commits));
    json_object_set_new(row, "changes_per_s", pkb_fig_json(up));
    json_object_set_new(row, "changes_per_batch", pkb_fig_json(per));
    row = pkb_report_row(rep);
    json_object_set_new(row, "measure", json_string("locate"));
    json_object_set_new(row, "keys", json_integer(S_LOCATE_KEYS));
    json_object_set_new(row, "round_trips", json_real(rtt));
    json_object_set_new(row, "p50_ms", pkb_fig_json(f50));
    json_object_set_new(row, "p99_ms", pkb_fig_json(f99));
    json_object_set_new(row, "raw_pipeline_p50_ms", pkb_fig_json(fraw));
    for (int m = 0; m < 2; m++) {
        row = pkb_report_row(rep);
        json_object_set_new(row, "measure", json_string("get_by_key"));
        json_object_set_new(row, "mode", json_string(m == 0 ? "get" : "two_steps"));
        json_object_set_new(row, "keys", json_integer(32));
        json_object_set_new(row, "block", json_integer(65536));
        json_object_set_new(row, "p50_ms", pkb_fig_json(modes[m]->p50));
        json_object_set_new(row, "p99_ms", pkb_fig_json(modes[m]->p99));
        json_object_set_new(row, "messages_per_get", json_real(modes[m]->messages));
        json_object_set_new(row, "redis_round_trips_per_get",
                            json_real(modes[m]->redis_round_trips));
    }
    rc = pkb_report_finish(rep);
    pkb_report_destroy(&rep);
    return rc ? 1 : 0;
}
