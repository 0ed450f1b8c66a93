/*  fair.c: the fair share of a server's writes (issue 37, point 5): a
    consumer fetching one block at a time, alone and beside greedy ones
    fetching whole rounds back to back, against a server with its
    scheduler (--fair-inflight 4194304) and one without (0, the default), in the
    same repetition.

    Every consumer is a thread of one process (consumer.c's threads),
    each with a client of its own: the consumers' own scheduling on a
    small machine then is one process's threads, not the kernel's choice
    among processes.  The small one keeps one request at a time (its
    fetch latency is a round trip with nothing of its own queued ahead);
    each greedy one keeps two (its next round's lookup overlaps its
    transfer, as fetch's consumers do).  Reported per mode: the small
    one's fetch p50 and p99 alone and in the crowd, the ratio of its p99
    in the crowd over alone, the greedy ones' GB/s together, and the
    server's queueing delay per session (the engine API's stats: a
    transfer's wait for its first write, mean, for the small session and
    for the greedy ones); and across modes, the greedy GB/s with the
    scheduler over without it, in the same repetition.
*/
#include "bench.h"
#include "base/clock.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define S_SMALL_ID 100          //  the small consumer's id: its peer id names it
#define S_MAX_GREEDY 16

typedef struct {
    double alone_p50, alone_p99, crowd_p50, crowd_p99;
    double greedy_gbps;
    double wait_small_us, wait_greedy_us;       //  mean queueing delay per transfer
} s_mode_t;

//  The mean queueing delay (us) of the sessions whose peer id starts with
//  prefix, from the engine API's stats.  NAN when none counted.
static double
s_wait_us(json_t *stats, const char *prefix, bool negate)
{
    json_t *counts = json_object_get(stats, "session_counts");
    const char *peer;
    json_t *mine;
    double us = 0, n = 0;
    json_object_foreach(counts, peer, mine) {
        bool match = strncmp(peer, prefix, strlen(prefix)) == 0;
        if (match == negate)
            continue;
        us += (double) json_integer_value(json_object_get(mine, "write_queue_wait_us"));
        n += (double) json_integer_value(json_object_get(mine, "write_queue_waits"));
    }
    return n > 0 ? us / n : NAN;
}

//  The phase's samples of consumer c: fetch times (s) appended to *ft.
static int
s_run(pkb_consumer_t *cs, size_t nc, double **ft, size_t *nft, size_t small, double *span,
      uint64_t *greedy_bytes, char *err, size_t size)
{
    int rc = 0;
    double t0 = 1e300, t1 = 0;
    *greedy_bytes = 0;
    for (size_t i = 0; rc == 0 && i < nc; i++)
        rc = pkb_consumer_go(&cs[i]);
    for (size_t i = 0; rc == 0 && i < nc; i++) {
        pkb_phase_t ph;
        double *lk = NULL, *none = NULL;
        size_t nlk = 0, nnone = 0;
        rc = i == small ? pkb_consumer_result(&cs[i], &ph, &lk, &nlk, ft, nft)
                        : pkb_consumer_result(&cs[i], &ph, &lk, &nlk, &none, &nnone);
        free(lk);
        free(none);
        if (rc) {
            snprintf(err, size, "consumer %zu: %s", i, ph.rc ? ph.err : strerror(-rc));
            break;
        }
        if (i != small) {
            *greedy_bytes += ph.bytes;
            t0 = ph.t0 < t0 ? ph.t0 : t0;
            t1 = ph.t1 > t1 ? ph.t1 : t1;
        }
    }
    *span = t1 - t0;
    return rc;
}

static json_t *
s_stats(pkb_server_t *s)
{
    return pkb_server_ask(s, json_pack("{s:s}", "cmd", "stats"));
}

//  One mode of one repetition: a server (with extra), the small consumer
//  alone, then beside the greedy ones.
static int
s_mode(const pkb_opts_t *o, uint64_t block, uint64_t nblocks, size_t ngreedy, bool on,
       s_mode_t *out, char *err, size_t size)
{
    pkb_server_t srv;
    static const char *const off[] = { "--fair-inflight", "0", NULL };
    static const char *const with[] = { "--fair-inflight", "4194304", NULL };
    //  a pin holds pool room: room for every greedy request's pins, and
    //  the blocks themselves (issue 37: "a pool large enough for their pins")
    uint64_t pool = (uint64_t) ngreedy * 2 * nblocks + nblocks + 64;
    int rc = pkb_server_start(&srv, o, block, pool, 64, on ? with : off);
    if (rc == 0)
        rc = pkb_server_populate(&srv, nblocks);
    if (rc) {
        snprintf(err, size, "cannot start the server: %s", strerror(-rc));
        pkb_server_stop(&srv);
        return rc;
    }
    double secs = o->seconds > 0 ? o->seconds : o->quick ? 1 : 2;
    pkb_consumer_cfg_t cfg[S_MAX_GREEDY + 1];
    for (size_t i = 0; i <= ngreedy; i++)
        cfg[i] = (pkb_consumer_cfg_t) { .endpoint = srv.endpoint, .block_len = block,
                                        .nkeys = nblocks, .fetch = true, .seconds = secs,
                                        .id = (int) i, .threads = true, .in_flight = 2 };
    //  the small one: one block, one request at a time
    pkb_consumer_cfg_t small = cfg[0];
    small.nkeys = 1;
    small.in_flight = 1;
    small.id = S_SMALL_ID;
    double *ft = NULL;
    size_t nft = 0;
    double span;
    uint64_t bytes;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "pkbench-consumer-%d-", S_SMALL_ID);

    //  alone
    pkb_consumer_t one;
    rc = pkb_consumer_start_threads(&one, &small, 1);
    if (rc == 0) {
        if ((rc = pkb_consumer_ready(&one, err, size)) == 0)
            rc = s_run(&one, 1, &ft, &nft, 0, &span, &bytes, err, size);
        pkb_consumer_stop(&one);
    }
    else
        snprintf(err, size, "cannot start the small consumer: %s", strerror(-rc));
    if (rc == 0 && nft) {
        out->alone_p50 = pkb_quantile(ft, nft, 0.50) * 1e3;
        out->alone_p99 = pkb_quantile(ft, nft, 0.99) * 1e3;
    }
    free(ft);
    ft = NULL;
    nft = 0;

    //  in the crowd: the greedy ones first (ids 0..), the small one last
    pkb_consumer_t cs[S_MAX_GREEDY + 1];
    cfg[ngreedy] = small;
    json_t *st0 = NULL, *st1 = NULL;
    if (rc == 0 && (rc = pkb_consumer_start_threads(cs, cfg, ngreedy + 1)) == 0) {
        for (size_t i = 0; rc == 0 && i <= ngreedy; i++)
            rc = pkb_consumer_ready(&cs[i], err, size);
        st0 = rc == 0 ? s_stats(&srv) : NULL;
        if (rc == 0)
            rc = s_run(cs, ngreedy + 1, &ft, &nft, ngreedy, &span, &bytes, err, size);
        st1 = rc == 0 ? s_stats(&srv) : NULL;
        pkb_load_stop(cs, ngreedy + 1);
    }
    if (rc == 0 && nft) {
        out->crowd_p50 = pkb_quantile(ft, nft, 0.50) * 1e3;
        out->crowd_p99 = pkb_quantile(ft, nft, 0.99) * 1e3;
        out->greedy_gbps = (double) bytes / span / 1e9;
        //  the session's whole life: the untimed first fetch of each
        //  consumer is counted too (one of hundreds)
        out->wait_small_us = s_wait_us(st1, prefix, false);
        out->wait_greedy_us = s_wait_us(st1, prefix, true);
    }
    json_decref(st0);
    json_decref(st1);
    free(ft);
    pkb_server_stop(&srv);
    return rc;
}

int
pkb_fair(const pkb_opts_t *o)
{
    uint64_t block = o->block_sizes.n ? o->block_sizes.v[0] : 65536;
    uint64_t nblocks = o->blocks.n ? o->blocks.v[0] : o->quick ? 256 : 1024;
    size_t ngreedy = o->consumers.n ? (size_t) o->consumers.v[0] : 4;
    int reps = o->reps ? o->reps : o->quick ? 2 : 5;
    if (ngreedy > S_MAX_GREEDY) {
        fprintf(stderr, "p2pkv-bench fair: --consumers: at most %d greedy consumers\n",
                S_MAX_GREEDY);
        return 2;
    }
    char what[128];
    snprintf(what, sizeof what, "%zu greedy consumers' pools of 2 x %llu x %llu bytes", ngreedy,
             (unsigned long long) nblocks, (unsigned long long) block);
    if (pkb_check_memory("fair", what, (double) ngreedy * 2 * nblocks * block
                                       + (double) ((ngreedy * 2 + 1) * nblocks + 64) * block))
        return 2;
    printf("fair: one consumer fetching 1 block (one request at a time) alone, then beside "
           "%zu greedy consumers fetching %llu x %llu KiB rounds back to back (two requests "
           "each); all threads of one process, each with its own client; p2pkv-server over "
           "tcp on 127.0.0.1 with its scheduler (on: --fair-inflight 4194304) and without (off, the default), in "
           "each repetition; latencies in ms, queueing delay (a transfer's wait for its "
           "first write, mean per session) in us; median, and [min..max] of %d repetitions\n",
           ngreedy, (unsigned long long) nblocks, (unsigned long long) (block >> 10), reps);
    pkb_report_t *rep = pkb_report_new(o, "tcp");
    enum { A50, A99, C50, C99, RATIO, GBPS, KEEP, WS, WG, NFIG };
    static const char *const keys[NFIG] = {
        "alone_p50_ms", "alone_p99_ms", "crowd_p50_ms", "crowd_p99_ms", "p99_crowd_over_alone",
        "greedy_gbps", "greedy_on_over_off", "queue_wait_small_us", "queue_wait_greedy_us" };
    double v[2][NFIG][PKB_MAX_REPS];
    int rc = 0;
    char err[256] = "";
    for (int r = 0; rc == 0 && r < reps; r++) {
        s_mode_t m[2] = { 0 };
        //  off first, then on: neither always follows the other's warm caches
        for (int k = r % 2, n = 0; rc == 0 && n < 2; k = !k, n++)
            rc = s_mode(o, block, nblocks, ngreedy, k == 0, &m[k], err, sizeof err);
        for (int k = 0; rc == 0 && k < 2; k++) {
            double row[NFIG] = { m[k].alone_p50, m[k].alone_p99, m[k].crowd_p50,
                                 m[k].crowd_p99, m[k].crowd_p99 / m[k].alone_p99,
                                 m[k].greedy_gbps, m[0].greedy_gbps / m[1].greedy_gbps,
                                 m[k].wait_small_us, m[k].wait_greedy_us };
            for (int f = 0; f < NFIG; f++)
                v[k][f][r] = row[f];
        }
        if (rc == 0)
            fprintf(stderr, "fair: repetition %d of %d: small p99 alone/crowd %.3f/%.3f ms "
                    "(on), %.3f/%.3f ms (off); greedy %.2f GB/s on, %.2f off\n", r + 1, reps,
                    m[0].alone_p99, m[0].crowd_p99, m[1].alone_p99, m[1].crowd_p99,
                    m[0].greedy_gbps, m[1].greedy_gbps);
    }
    if (rc) {
        fprintf(stderr, "p2pkv-bench fair: %s\n", err);
        pkb_report_destroy(&rep);
        return 1;
    }
    static const char *const names[] = { "mode", "alone p50", "alone p99", "crowd p50",
                                          "crowd p99", "p99 x", "greedy GB/s", "on/off",
                                          "wait small", "wait greedy" };
    static const int pw[] = { 5 };
    static const int fw[] = { 10, 10, 10, 10, 8, 12, 8, 11, 12 };
    int w[10] = { 5, 10, 10, 10, 10, 8, 12, 8, 11, 12 };
    pkb_table_head(names, w, 10);
    static const char *const fmts[NFIG] = { "%.3f", "%.3f", "%.3f", "%.3f", "%.2fx", "%.2f",
                                            "%.2fx", "%.0f", "%.0f" };
    for (int k = 0; k < 2; k++) {
        pkb_fig_t g[NFIG];
        for (int f = 0; f < NFIG; f++)
            g[f] = pkb_fig(v[k][f], (size_t) reps);
        const char *mode = k == 0 ? "on" : "off";
        pkb_table_row(&mode, pw, 1, g, fmts, fw, NFIG);
        json_t *row = pkb_report_row(rep);
        json_object_set_new(row, "scheduler", json_string(mode));
        json_object_set_new(row, "block_size", json_integer((json_int_t) block));
        json_object_set_new(row, "greedy_blocks_per_fetch", json_integer((json_int_t) nblocks));
        json_object_set_new(row, "greedy_consumers", json_integer((json_int_t) ngreedy));
        json_object_set_new(row, "repetitions", json_integer(reps));
        for (int f = 0; f < NFIG; f++)
            json_object_set_new(row, keys[f], pkb_fig_json(g[f]));
    }
    rc = pkb_report_finish(rep);
    pkb_report_destroy(&rep);
    return rc ? 1 : 0;
}
