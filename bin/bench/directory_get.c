/*  directory_get.c: the directory suite's get by key (issue 37, point 1):
    what a p2pkv_client_get of P2PKV_ANY_SERVER costs end to end, with
    real p2pkv-servers of the directory.

    Two servers publish the same 32 blocks of 64 KiB into the suite's
    Redis; a client of the library (in this process, no progress thread:
    the get drives it) gets the 32 keys by key again and again, each get
    locating them (one pipelined round trip to Redis) and asking each
    holder for its half.  Once with servers that offer the capability get
    (one message per holder), once with servers run with --gets off (the
    two steps: lookup, fetch, and the terminal fetch that ends the
    request): latency percentiles of the whole get, and the consumer's
    messages per get as the servers count them (a get counts as a lookup
    and a fetch there, so it is subtracted once).
*/
#include "bench.h"
#include "base/clock.h"
#include "p2pkv.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_KEYS 32
#define S_BLOCK 65536
#define S_SERVERS 2

//  The consumer's messages the servers counted so far: lookups and
//  fetches, a get (counted as both) once.  -1 when a stats answer fails.
static double
s_messages(pkb_server_t *servers)
{
    double sum = 0;
    for (int i = 0; i < S_SERVERS; i++) {
        json_t *st = pkb_server_ask(&servers[i], json_pack("{s:s}", "cmd", "stats"));
        json_t *m = json_object_get(st, "metrics");
        if (!m) {
            json_decref(st);
            return -1;
        }
        const char *names[3] = { "p2pkv_lookups_total", "p2pkv_fetches_total",
                                 "p2pkv_gets_total" };
        double v[3];
        for (int k = 0; k < 3; k++)
            v[k] = json_number_value(json_object_get(json_object_get(m, names[k]), "total"));
        sum += v[0] + v[1] - v[2];
        json_decref(st);
    }
    return sum;
}

//  The count once it holds still (a server publishes its counters after
//  its answers went out, and the two steps' terminal fetch follows the
//  get's return): two reads 50 ms apart agree, within 5 s.
static double
s_messages_settled(pkb_server_t *servers)
{
    double last = s_messages(servers), deadline = pk_clock_monotonic() + 5;
    while (last >= 0 && pk_clock_monotonic() < deadline) {
        zclock_sleep(50);
        double now = s_messages(servers);
        if (now == last)
            break;
        last = now;
    }
    return last;
}

//  Until the directory lists both servers for every key: 0 or -ETIMEDOUT.
typedef struct {
    size_t short_of;
} s_seen_t;

static void
s_on_locate(void *arg, size_t i, const p2pkv_holder_t *h, size_t n)
{
    (void) i;
    (void) h;
    ((s_seen_t *) arg)->short_of += n < S_SERVERS;
}

static int
s_wait_listed(p2pkv_client_t *c, const p2pkv_key_t *keys)
{
    double deadline = pk_clock_monotonic() + 30;
    char err[P2PKV_ERRLEN];
    while (pk_clock_monotonic() < deadline) {
        s_seen_t seen = { 0 };
        if (p2pkv_client_locate(c, keys, S_KEYS, s_on_locate, &seen, err) == 0
            && seen.short_of == 0)
            return 0;
        zclock_sleep(20);
    }
    return -ETIMEDOUT;
}

//  n gets of the 32 keys; their p50 and p99 (ms), every byte checked.
static int
s_gets(p2pkv_client_t *c, const p2pkv_key_t *keys, int n, int *seq, double *p50, double *p99)
{
    double *ms = malloc((size_t) n * sizeof *ms);
    uint32_t dest[S_KEYS];
    p2pkv_key_result_t res[S_KEYS];
    for (uint32_t i = 0; i < S_KEYS; i++)
        dest[i] = i;
    char kv[64], err[P2PKV_ERRLEN] = "";
    int rc = ms ? 0 : -ENOMEM;
    for (int i = 0; rc == 0 && i < n; i++) {
        snprintf(kv, sizeof kv, "bench-any-%d", (*seq)++);
        double t0 = pk_clock_monotonic();
        int got = p2pkv_client_get_results(c, P2PKV_ANY_SERVER, kv, keys, dest, S_KEYS, true,
                                           30, res, NULL, NULL, err);
        ms[i] = (pk_clock_monotonic() - t0) * 1e3;
        if (got != S_KEYS) {
            fprintf(stderr, "p2pkv-bench directory: get by key: %d of %d: %s\n", got, S_KEYS,
                    err);
            rc = -EIO;
        }
        const uint8_t *pool = p2pkv_client_pool(c);
        for (uint64_t k = 0; rc == 0 && k < S_KEYS; k++)
            if (!pkb_check(k, pool + k * S_BLOCK, S_BLOCK)) {
                fprintf(stderr, "p2pkv-bench directory: get by key: block %llu differs\n",
                        (unsigned long long) k);
                rc = -EIO;
            }
    }
    if (rc == 0) {
        *p50 = pkb_quantile(ms, (size_t) n, 0.5);
        *p99 = pkb_quantile(ms, (size_t) n, 0.99);
    }
    free(ms);
    return rc;
}

//  One mode: servers started with extra, the client's gets, rep by rep.
static int
s_mode(const pkb_opts_t *o, const char *url, const char *gets, int reps, pkb_dirget_t *out)
{
    pkb_server_t servers[S_SERVERS] = { 0 };
    const char *extra[] = { "--directory", url, "--gets", gets, NULL };
    int rc = 0, started = 0;
    for (; rc == 0 && started < S_SERVERS; started++)
        if ((rc = pkb_server_start(&servers[started], o, S_BLOCK, 64, 16, extra)) == 0)
            rc = pkb_server_populate(&servers[started], S_KEYS);
    uint8_t bytes[S_KEYS][PKB_KEY_LEN];
    p2pkv_key_t keys[S_KEYS];
    for (uint64_t i = 0; i < S_KEYS; i++) {
        pkb_key(i, bytes[i]);
        keys[i] = (p2pkv_key_t) { bytes[i], PKB_KEY_LEN };
    }
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = "bench-get-any", .fingerprint = "pkbench",
                           .provider = "tcp", .directory = url };
    p2pkv_client_t *c = rc == 0 ? p2pkv_client_new(&cfg, NULL, S_KEYS, S_BLOCK,
                                                   (p2pkv_callbacks_t) { 0 }, err) : NULL;
    if (rc == 0 && !c) {
        fprintf(stderr, "p2pkv-bench directory: %s\n", err);
        rc = -EIO;
    }
    if (rc == 0 && (rc = s_wait_listed(c, keys)) != 0)
        fprintf(stderr, "p2pkv-bench directory: the servers were never listed\n");
    int seq = 0, n = o->quick ? 50 : 200;
    double w50, w99, p50[PKB_MAX_REPS], p99[PKB_MAX_REPS], msgs = 0, rtt = 0;
    if (rc == 0)
        rc = s_gets(c, keys, 5, &seq, &w50, &w99);         //  warm: both sessions open
    for (int i = 0; rc == 0 && i < reps; i++) {
        double m0 = s_messages_settled(servers);
        p2pkv_directory_stats_t d0, d1;
        p2pkv_client_directory_stats(c, &d0);
        rc = s_gets(c, keys, n, &seq, &p50[i], &p99[i]);
        p2pkv_client_directory_stats(c, &d1);
        double m1 = s_messages_settled(servers);
        if (rc == 0 && (m0 < 0 || m1 < 0)) {
            fprintf(stderr, "p2pkv-bench directory: a server's stats did not answer\n");
            rc = -EIO;
        }
        msgs = (m1 - m0) / n;
        rtt = (double) (d1.round_trips - d0.round_trips) / n;
    }
    if (rc == 0) {
        out->p50 = pkb_fig(p50, (size_t) reps);
        out->p99 = pkb_fig(p99, (size_t) reps);
        out->messages = msgs;
        out->redis_round_trips = rtt;
    }
    p2pkv_client_destroy(&c);
    for (int i = 0; i < started; i++)
        pkb_server_stop(&servers[i]);
    return rc;
}

int
pkb_directory_get(const pkb_opts_t *o, const char *url, int reps, pkb_dirget_t *with_get,
                  pkb_dirget_t *two_steps)
{
    int rc = s_mode(o, url, "on", reps, with_get);
    return rc ? rc : s_mode(o, url, "off", reps, two_steps);
}
