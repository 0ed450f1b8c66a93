/*  fetch.c: end to end through a real p2pkv-server.

    One server per block size, its pool holding the largest fetch of that
    size (published through the engine API); for each point, C consumer
    processes of the client library (consumer.c), each fetching the same
    N blocks into its own pool again and again: lookup, fetch of the hits
    until landed, finish.  Every block's content is checked once, in the
    consumers' untimed first iteration.  Each repetition first measures
    fabric's bare fi_writedata loop for the same block size (batch
    min(N, 256)) in processes of its own, then the fetch phase; the ratio
    is taken within the repetition.

    With --providers shm,tcp the server offers them all (--provider
    shm,tcp) and each point runs one load per provider, every load
    connected and checked before the first repetition; a repetition then
    times the loads one after the other, so each row's "vs" figure (its
    GB/s over the last provider's) compares two runs of one repetition.
*/
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t block, n, c;
} s_point_t;

#define S_MAX_POINTS 256

//  Without lists: three sweeps; with any list: the product.
static size_t
s_points(const pkb_opts_t *o, s_point_t *p)
{
    size_t k = 0;
    if (o->block_sizes.n || o->blocks.n || o->consumers.n) {
        pkb_list_t b = o->block_sizes.n ? o->block_sizes : (pkb_list_t) { 1, { 64 << 10 } };
        pkb_list_t n = o->blocks.n ? o->blocks : (pkb_list_t) { 1, { 32 } };
        pkb_list_t c = o->consumers.n ? o->consumers : (pkb_list_t) { 1, { 1 } };
        for (size_t i = 0; i < b.n; i++)
            for (size_t j = 0; j < n.n; j++)
                for (size_t l = 0; l < c.n && k < S_MAX_POINTS; l++)
                    p[k++] = (s_point_t) { b.v[i], n.v[j], c.v[l] };
        return k;
    }
    static const uint64_t full_b[] = { 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20 };
    static const uint64_t quick_b[] = { 16 << 10, 64 << 10, 1 << 20 };
    const uint64_t *bs = o->quick ? quick_b : full_b;
    size_t nb = o->quick ? 3 : 5;
    for (size_t i = 0; i < nb; i++)
        p[k++] = (s_point_t) { bs[i], 32, 1 };
    static const uint64_t full_n[] = { 1, 256, 4096 }, quick_n[] = { 1, 256 };
    for (size_t i = 0; i < (o->quick ? 2u : 3u); i++)
        p[k++] = (s_point_t) { 64 << 10, o->quick ? quick_n[i] : full_n[i], 1 };
    static const uint64_t full_c[] = { 4, 16, 64 }, quick_c[] = { 4 };
    for (size_t i = 0; i < (o->quick ? 1u : 3u); i++)
        p[k++] = (s_point_t) { 64 << 10, 32, o->quick ? quick_c[i] : full_c[i] };
    return k;
}

static uint64_t
s_pool_blocks(const pkb_opts_t *o, const s_point_t *p, size_t np, uint64_t block)
{
    uint64_t m = 0;
    for (size_t i = 0; i < np; i++)
        if (p[i].block == block && p[i].n > m)
            m = p[i].n;
    //  each consumer has --in-flight requests, each pinning its hits under
    //  the pin quota (the pool's size)
    return (uint64_t) PKB_IN_FLIGHT(o) * m;
}

//  Refusals before anything starts: consumers beyond --max-sessions, pools
//  beyond memory.
static int
s_check(const pkb_opts_t *o, const s_point_t *p, size_t np, uint64_t max_sessions)
{
    size_t loads = o->providers.n ? o->providers.n : 1;
    for (size_t i = 0; i < np; i++) {
        if (p[i].c * loads > max_sessions) {
            fprintf(stderr, "p2pkv-bench fetch: --consumers %llu%s is more than the server's "
                    "--max-sessions %llu\n", (unsigned long long) p[i].c,
                    loads > 1 ? " per provider" : "", (unsigned long long) max_sessions);
            return 2;
        }
        double need = (double) s_pool_blocks(o, p, np, p[i].block) * (double) p[i].block
                      + (double) PKB_IN_FLIGHT(o) * (double) (p[i].c * loads) * (double) p[i].n
                        * (double) p[i].block
                      + 2.0 * 256 * (double) p[i].block;
        char what[160];
        snprintf(what, sizeof what, "--block-sizes %lluK x --blocks %llu x --consumers %llu "
                 "(server pool, consumer pools of --in-flight requests each and the raw pair)",
                 (unsigned long long) (p[i].block >> 10), (unsigned long long) p[i].n,
                 (unsigned long long) p[i].c);
        if (pkb_check_memory("fetch", what, need))
            return 2;
    }
    return 0;
}

static const char *const s_names[] = { "block", "blocks", "cons", "GB/s", "raw GB/s",
                                       "ratio", "fetch/s", "lkp p50", "p99", "p999",
                                       "fetch p50", "p99", "p999", "abort", "srv s/GB",
                                       "cli s/GB" };
static const int s_w[] = { 6, 6, 4, 14, 14, 12, 14, 12, 12, 12, 12, 12, 12, 5, 12, 12 };

//  --providers: the provider beside the point, and its GB/s over the
//  last provider's after the figures.
static const int s_pw[] = { 6, 6, 4, 12 }, s_vw = 14;

//  prov (NULL without --providers) and vs[i], this provider's GB/s over
//  the last one's in repetition i.
static void
s_row(pkb_report_t *rep, const s_point_t *p, const pkb_rep_t *r, const double *raw, int reps,
      const char *prov, const char *last, const double *vs)
{
    double v[15][PKB_MAX_REPS];
    for (int i = 0; i < reps; i++) {
        double f[15] = { r[i].gbps, raw[i], r[i].gbps / raw[i], r[i].ops_per_s, r[i].lk[0],
                         r[i].lk[1], r[i].lk[2], r[i].ft[0], r[i].ft[1], r[i].ft[2], 0,
                         r[i].srv_cpu_gb, r[i].cli_cpu_gb, vs ? vs[i] : 0,
                         (double) r[i].samples };
        for (int j = 0; j < 15; j++)
            v[j][i] = f[j];
    }
    pkb_fig_t g[15];
    for (int j = 0; j < 15; j++)
        g[j] = pkb_fig(v[j], (size_t) reps);
    g[10].valid = false;        //  abort -> abort_ack: the library has no abort call
    g[13].valid = vs != NULL;
    char b[24], n[24], c[24];
    snprintf(b, sizeof b, "%lluK", (unsigned long long) (p->block >> 10));
    snprintf(n, sizeof n, "%llu", (unsigned long long) p->n);
    snprintf(c, sizeof c, "%llu", (unsigned long long) p->c);
    const char *params[] = { b, n, c, prov };
    static const char *const fmts[] = { "%.2f", "%.2f", "%.2fx", "%.0f", "%.3f", "%.3f",
                                        "%.3f", "%.3f", "%.3f", "%.3f", "", "%.3f", "%.3f",
                                        "%.2fx" };
    int fw[14];
    memcpy(fw, s_w + 3, 13 * sizeof *fw);
    fw[13] = s_vw;
    pkb_table_row(params, prov ? s_pw : s_w, prov ? 4 : 3, g, fmts, fw, prov ? 14 : 13);
    json_t *row = pkb_report_row(rep);
    static const char *const keys[] = { "gbps", "raw_gbps", "ratio", "fetches_per_s",
                                        "lookup_p50_ms", "lookup_p99_ms", "lookup_p999_ms",
                                        "fetch_p50_ms", "fetch_p99_ms", "fetch_p999_ms",
                                        "abort_ack_ms", "server_cpu_s_per_gb",
                                        "client_cpu_s_per_gb", "gbps_vs_last_provider",
                                        "samples" };
    json_object_set_new(row, "block_size", json_integer((json_int_t) p->block));
    json_object_set_new(row, "blocks_per_fetch", json_integer((json_int_t) p->n));
    json_object_set_new(row, "consumers", json_integer((json_int_t) p->c));
    json_object_set_new(row, "raw_batch", json_integer(p->n < 256 ? (json_int_t) p->n : 256));
    json_object_set_new(row, "repetitions", json_integer(reps));
    if (prov) {
        json_object_set_new(row, "provider", json_string(prov));
        json_object_set_new(row, "last_provider", json_string(last));
    }
    for (int j = 0; j < 15; j++)
        if (j != 13 || vs)
            json_object_set_new(row, keys[j], pkb_fig_json(g[j]));
    char series[96];
    snprintf(series, sizeof series, "p2pkv fetch%s%s, %llu per fetch, %llu consumer%s",
             prov ? " over " : "", prov ? prov : "", (unsigned long long) p->n,
             (unsigned long long) p->c, p->c > 1 ? "s" : "");
    pkb_report_point(rep, series, p->block, g[0].med);
    if (prov && strcmp(prov, last) != 0)
        return;                 //  the raw series once per point
    snprintf(series, sizeof series, "raw fi_writedata, batch %llu",
             (unsigned long long) (p->n < 256 ? p->n : 256));
    pkb_report_point(rep, series, p->block, g[1].med);
}

static int
s_point(pkb_report_t *rep, const pkb_opts_t *o, pkb_server_t *srv, const s_point_t *p)
{
    int reps = o->reps ? o->reps : o->quick ? 2 : 5;
    size_t nl = o->providers.n ? o->providers.n : 1;
    static pkb_consumer_t cs[PKB_MAX_PROVIDERS][1024];
    static pkb_rep_t r[PKB_MAX_PROVIDERS][PKB_MAX_REPS];
    double raw[PKB_MAX_REPS], vs[PKB_MAX_PROVIDERS][PKB_MAX_REPS];
    char err[256] = "";
    size_t started = 0;
    int rc = 0;
    for (; rc == 0 && started < nl; started += rc == 0) {
        pkb_consumer_cfg_t cfg = { srv->endpoint, p->block, p->n, true, false,
                                   o->seconds ? o->seconds : o->quick ? 0.5 : 2, 0, false,
                                   NULL, NULL, NULL, o->threads,
                                   o->providers.n ? o->providers.v[started] : NULL,
                                   PKB_IN_FLIGHT(o), o->answer_spin };
        rc = pkb_load_start(cs[started], p->c, &cfg, err, sizeof err);
    }
    for (int i = 0; rc == 0 && i < reps; i++) {
        rc = pkb_fabric_raw_gbps(p->block, p->n, o->quick, &raw[i]);
        if (rc)
            snprintf(err, sizeof err, "the raw fi_writedata loop failed");
        for (size_t k = 0; rc == 0 && k < nl; k++)
            rc = pkb_load_rep(cs[k], p->c, srv->pid, p->n, &r[k][i], err, sizeof err);
        for (size_t k = 0; rc == 0 && k < nl; k++)
            vs[k][i] = r[k][i].gbps / r[nl - 1][i].gbps;
    }
    while (started)
        pkb_load_stop(cs[--started], p->c);
    if (rc) {
        fprintf(stderr, "p2pkv-bench fetch: %lluK x %llu, %llu consumers%s%s: %s\n",
                (unsigned long long) (p->block >> 10), (unsigned long long) p->n,
                (unsigned long long) p->c, o->providers.n ? ", providers " : "",
                o->providers.n ? o->providers.joined : "", err);
        return rc;
    }
    for (size_t k = 0; k < nl; k++)
        s_row(rep, p, r[k], raw, reps, o->providers.n ? o->providers.v[k] : NULL,
              o->providers.n ? o->providers.v[nl - 1] : NULL, o->providers.n ? vs[k] : NULL);
    return 0;
}

static int
s_cmp_point(const void *a, const void *b)
{
    const s_point_t *x = a, *y = b;
    return x->block < y->block ? -1 : x->block > y->block;
}

int
pkb_fetch(const pkb_opts_t *o)
{
    s_point_t p[S_MAX_POINTS];
    size_t np = s_points(o, p);
    uint64_t max_sessions = o->max_sessions ? o->max_sessions : 256;
    if (s_check(o, p, np, max_sessions))
        return 2;
    qsort(p, np, sizeof *p, s_cmp_point);   //  stable enough: one server per size
    int reps = o->reps ? o->reps : o->quick ? 2 : 5;
    const char *prov = o->providers.n ? o->providers.joined : "tcp";
    printf("fetch: p2pkv-server and consumer %s (client library: lookup + fetch until "
           "landed + finish), %s%s on 127.0.0.1, libfabric %s; every block checked once "
           "outside the timed part; raw = bare fi_writedata loop over tcp, batch min(blocks, "
           "256), same run; latencies in ms; abort: n/a (p2pkv.h has no abort call); median, "
           "and [min..max] of %d repetitions\n",
           o->threads ? "threads of one process" : "processes", o->providers.n ? "providers " : "",
           prov, pkb_fabric_version(), reps);
    if (o->providers.n) {
        const char *names[18];
        memcpy(names, s_names, 3 * sizeof *names);
        names[3] = "provider";
        memcpy(names + 4, s_names + 3, 13 * sizeof *names);
        char vs[80];
        snprintf(vs, sizeof vs, "vs %s", o->providers.v[o->providers.n - 1]);
        names[17] = vs;
        int w[18];
        memcpy(w, s_pw, 4 * sizeof *w);
        memcpy(w + 4, s_w + 3, 13 * sizeof *w);
        w[17] = s_vw;
        pkb_table_head(names, w, 18);
    }
    else
        pkb_table_head(s_names, s_w, 16);
    pkb_report_t *rep = pkb_report_new(o, prov);
    pkb_report_note(rep, "abort_ack", json_string("n/a: p2pkv.h exposes no abort"));
    pkb_report_note(rep, "consumers_are", json_string(o->threads ? "threads" : "processes"));
    pkb_report_note(rep, "answer_spin_us", json_real(pkb_answer_spin_us(o)));
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < np;) {
        pkb_server_t srv;
        const char *extra[] = { "--provider", o->providers.joined, NULL };
        rc = pkb_server_start(&srv, o, p[i].block, s_pool_blocks(o, p, np, p[i].block),
                              max_sessions, o->providers.n ? extra : NULL);
        if (rc == 0)
            rc = pkb_server_populate(&srv, srv.pool_blocks);
        size_t j = i;
        for (; rc == 0 && j < np && p[j].block == p[i].block; j++)
            rc = s_point(rep, o, &srv, &p[j]);
        pkb_server_stop(&srv);
        i = j;
    }
    if (rc == 0)
        rc = pkb_report_finish(rep);
    pkb_report_destroy(&rep);
    return rc ? 1 : 0;
}
