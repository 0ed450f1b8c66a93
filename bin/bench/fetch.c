/*  fetch.c: end to end through a real p2pkv-server.

    One server per block size, its pool holding the largest fetch of that
    size (published through the engine API); for each point, C consumer
    processes of the client library (consumer.c), each fetching the same
    N blocks into its own pool again and again: lookup, fetch of the hits
    until landed, finish.  Every block's content is checked once, in the
    consumers' untimed first iteration.  Each repetition first measures
    fabric's bare fi_writedata loop for the same block size (batch
    min(N, 256)) in processes of its own, C writer and target pairs
    writing at once (so that C consumers are set beside C raw streams on
    the same two cores), then the fetch phase; the ratio is taken within
    the repetition.

    With --providers shm,tcp the server offers them all (--provider
    shm,tcp) and each point runs one load per provider, every load
    connected and checked before the first repetition; a repetition then
    times the loads one after the other, so each row's "vs" figure (its
    GB/s over the last provider's) compares two runs of one repetition.
*/
#include "bench.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/transport.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
//  Opens a fabric of provider (NULL: the default's own order) over a
//  one-page pool, as the server would, and closes it: true with the
//  provider it got in got (as --provider names it: "tcp" of
//  "tcp;ofi_rxm"), or false with err.
static bool
s_provider_opens(const char *provider, char *got, size_t len, char *err)
{
    static uint8_t page[4096] __attribute__((aligned(4096)));
    pk_fabric_config_t config = { provider, "127.0.0.1", 5.0, 0, false };
    int rc = 0;
    pk_fabric_t *fabric = pk_fabric_open(pk_transport_for(provider), &config, page, 1,
                                         sizeof page, &rc, err);
    if (!fabric)
        return false;
    //  the name is the fabric's: copied before it goes
    snprintf(got, len, "%.*s", (int) strcspn(pk_fabric_provider(fabric), ";"),
             pk_fabric_provider(fabric));
    pk_fabric_close(&fabric);
    return true;
}

//  The child of s_providers_check: each --providers name opened here, and
//  when one does not, the names that do (each transport's named rows,
//  and what the default's own order picks), said on stderr: its exit
//  status, 0 or 2.
static int
s_providers_try(const pkb_names_t *names)
{
    char err[PK_ERRLEN] = "", got[64];
    size_t bad = 0;
    for (; bad < names->n; bad++)
        if (!s_provider_opens(names->v[bad], got, sizeof got, err))
            break;
    if (bad == names->n)
        return 0;
    char known[256] = "", why[PK_ERRLEN];
    const pk_provider_t *row;
    for (size_t i = 0; (row = pk_transport_auto(i)) != NULL; i++) {
        if (!s_provider_opens(row->name, got, sizeof got, why))
            continue;
        size_t at = strlen(known);
        snprintf(known + at, sizeof known - at, "%s%s", at ? ", " : "", got);
    }
    fprintf(stderr, "p2pkv-bench fetch: --providers: \"%s\" is not available here (%s); "
            "known here: %s\n", names->v[bad], err, *known ? known : "none");
    return 2;
}

//  Every --providers name is one this host can open, checked before
//  anything runs (a name the server refuses would otherwise end the run
//  midway, exit 1): 0, or 2 said.  In a child, since the orchestrator
//  holds no libfabric state (consumer.c).
static int
s_providers_check(const pkb_opts_t *o)
{
    if (!o->providers.n)
        return 0;
    pid_t pid = pkb_fork();
    if (pid < 0) {
        fprintf(stderr, "p2pkv-bench fetch: cannot fork: %s\n", strerror(errno));
        return 2;
    }
    if (pid == 0)
        _exit(s_providers_try(&o->providers));
    int status = pkb_reap(pid, 60);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 2)
        fprintf(stderr, "p2pkv-bench fetch: the check of --providers %s failed (status "
                "0x%x)\n", o->providers.joined, (unsigned) status);
    return 2;
}

static int
s_check(const pkb_opts_t *o, const s_point_t *p, size_t np, uint64_t max_sessions)
{
    size_t loads = (o->providers.n ? o->providers.n : 1) * (o->verify_cost ? 2 : 1);
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
                      + 2.0 * (double) p[i].c * (double) (p[i].n < 256 ? p[i].n : 256)
                        * (double) p[i].block;
        char what[160];
        snprintf(what, sizeof what, "--block-sizes %lluK x --blocks %llu x --consumers %llu "
                 "(server pool, consumer pools of --in-flight requests each and the raw pairs)",
                 (unsigned long long) (p[i].block >> 10), (unsigned long long) p[i].n,
                 (unsigned long long) p[i].c);
        if (pkb_check_memory("fetch", what, need))
            return 2;
    }
    return s_providers_check(o);
}

static const char *const s_names[] = { "block", "blocks", "cons", "GB/s", "raw GB/s",
                                       "tcp GB/s", "ratio", "fetch/s", "lkp p50", "p99",
                                       "p999", "fetch p50", "p99", "p999", "abort",
                                       "srv s/GB", "cli s/GB" };
static const int s_w[] = { 6, 6, 4, 14, 14, 14, 12, 14, 12, 12, 12, 12, 12, 12, 5, 12, 12 };
#define S_NAMES 17              //  3 parameters and 14 figures

//  A row's figures, in the table's order, then those only in the JSON.
enum { F_GBPS, F_RAW, F_TCP, F_RATIO, F_OPS, F_LK50, F_LK99, F_LK999, F_FT50, F_FT99, F_FT999,
       F_ABORT, F_SRV, F_CLI, F_VS, F_SAMPLES, F_SWITCHES, F_N };

//  --providers: the provider beside the point, and its GB/s over the
//  last provider's after the figures.
static const int s_pw[] = { 6, 6, 4, 12 }, s_vw = 14;

//  A point's medians over its repetitions, for the crowd lines: GB/s (of
//  the last provider's load), raw and tcp, and the machine's context
//  switches per MB p2pkv moved.
typedef struct {
    double gbps, raw, tcp, switches;
} s_med_t;

//  prov (NULL without --providers) and vs[i], this provider's GB/s over
//  the last one's in repetition i; med (NULL: not wanted) gets the row's
//  medians.
static void
s_row(pkb_report_t *rep, const s_point_t *p, const pkb_rep_t *r, const double *raw,
      const double *tcp, int reps, const char *prov, const char *last, const double *vs,
      s_med_t *med)
{
    double v[F_N][PKB_MAX_REPS];
    for (int i = 0; i < reps; i++) {
        double f[F_N] = { r[i].gbps, raw[i], tcp[i], r[i].gbps / raw[i], r[i].ops_per_s,
                          r[i].lk[0], r[i].lk[1], r[i].lk[2], r[i].ft[0], r[i].ft[1],
                          r[i].ft[2], 0, r[i].srv_cpu_gb, r[i].cli_cpu_gb, vs ? vs[i] : 0,
                          (double) r[i].samples, r[i].switches_per_mb };
        for (int j = 0; j < F_N; j++)
            v[j][i] = f[j];
    }
    pkb_fig_t g[F_N];
    for (int j = 0; j < F_N; j++)
        g[j] = pkb_fig(v[j], (size_t) reps);    //  n/a where a reference failed (NAN)
    g[F_ABORT].valid = false;   //  abort -> abort_ack: the library has no abort call
    g[F_VS].valid = vs != NULL;
    if (med)
        *med = (s_med_t) { g[F_GBPS].med, g[F_RAW].valid ? g[F_RAW].med : NAN,
                           g[F_TCP].valid ? g[F_TCP].med : NAN, g[F_SWITCHES].med };
    char b[24], n[24], c[24];
    snprintf(b, sizeof b, "%lluK", (unsigned long long) (p->block >> 10));
    snprintf(n, sizeof n, "%llu", (unsigned long long) p->n);
    snprintf(c, sizeof c, "%llu", (unsigned long long) p->c);
    const char *params[] = { b, n, c, prov };
    static const char *const fmts[F_SAMPLES] = { "%.2f", "%.2f", "%.2f", "%.2fx", "%.0f",
                                                 "%.3f", "%.3f", "%.3f", "%.3f", "%.3f",
                                                 "%.3f", "", "%.3f", "%.3f", "%.2fx" };
    int fw[F_SAMPLES];
    memcpy(fw, s_w + 3, F_VS * sizeof *fw);
    fw[F_VS] = s_vw;
    pkb_table_row(params, prov ? s_pw : s_w, prov ? 4 : 3, g, fmts, fw, prov ? F_VS + 1 : F_VS);
    json_t *row = pkb_report_row(rep);
    static const char *const keys[F_N] = { "gbps", "raw_gbps", "tcp_gbps", "ratio",
                                        "fetches_per_s",
                                        "lookup_p50_ms", "lookup_p99_ms", "lookup_p999_ms",
                                        "fetch_p50_ms", "fetch_p99_ms", "fetch_p999_ms",
                                        "abort_ack_ms", "server_cpu_s_per_gb",
                                        "client_cpu_s_per_gb", "gbps_vs_last_provider",
                                        "samples", "context_switches_per_mb" };
    json_object_set_new(row, "block_size", json_integer((json_int_t) p->block));
    json_object_set_new(row, "blocks_per_fetch", json_integer((json_int_t) p->n));
    json_object_set_new(row, "consumers", json_integer((json_int_t) p->c));
    json_object_set_new(row, "raw_batch", json_integer(p->n < 256 ? (json_int_t) p->n : 256));
    json_object_set_new(row, "raw_pairs", json_integer((json_int_t) p->c));
    json_object_set_new(row, "repetitions", json_integer(reps));
    if (prov) {
        json_object_set_new(row, "provider", json_string(prov));
        json_object_set_new(row, "last_provider", json_string(last));
    }
    for (int j = 0; j < F_N; j++)
        if (j != F_VS || vs)
            json_object_set_new(row, keys[j], pkb_fig_json(g[j]));
    char series[96];
    snprintf(series, sizeof series, "p2pkv fetch%s%s, %llu per fetch, %llu consumer%s",
             prov ? " over " : "", prov ? prov : "", (unsigned long long) p->n,
             (unsigned long long) p->c, p->c > 1 ? "s" : "");
    pkb_report_point(rep, series, p->block, g[F_GBPS].med);
    if (prov && strcmp(prov, last) != 0)
        return;                 //  the raw series once per point
    char pairs[32] = "";
    if (p->c > 1)
        snprintf(pairs, sizeof pairs, ", %llu pairs", (unsigned long long) p->c);
    snprintf(series, sizeof series, "raw fi_writedata, batch %llu%s",
             (unsigned long long) (p->n < 256 ? p->n : 256), pairs);
    if (g[F_RAW].valid)
        pkb_report_point(rep, series, p->block, g[F_RAW].med);
    if (p->c > 1)
        snprintf(pairs, sizeof pairs, ", %llu streams", (unsigned long long) p->c);
    snprintf(series, sizeof series, "bare TCP, batch %llu%s",
             (unsigned long long) (p->n < 256 ? p->n : 256), pairs);
    if (g[F_TCP].valid)
        pkb_report_point(rep, series, p->block, g[F_TCP].med);
}

//  The same-host reference (issue 37, point 4): one thread's memcpy of the
//  fetch's blocks, n of block bytes (at most 1 GiB of them) from one
//  buffer to another, both written first as a pool is, then copied once
//  untimed (the first pass over fresh buffers ran at 0.2 GB/s here, the
//  next ones at 12-16), then the best of five windows of 50 ms (20 ms
//  quick), so a window the machine's other work took does not count:
//  what a same-host copy could reach on one core.  GB/s, or NAN without
//  memory.
static double
s_memcpy_gbps(uint64_t block, uint64_t n, bool quick)
{
    uint64_t cap = (UINT64_C(1) << 30) / block;
    n = n < cap ? n : cap ? cap : 1;
    size_t len = (size_t) (block * n);
    char *src = malloc(len), *dst = malloc(len);
    if (!src || !dst) {
        free(src);
        free(dst);
        return NAN;
    }
    memset(src, 0x5a, len);
    memset(dst, 0, len);
    memcpy(dst, src, len);
    double best = 0;
    for (int w = 0; w < 5; w++) {
        double t0 = pk_clock_monotonic(), t = t0, bytes = 0;
        while (t - t0 < (quick ? 0.02 : 0.05)) {
            for (uint64_t i = 0; i < n; i++)
                memcpy(dst + i * block, src + i * block, (size_t) block);
            bytes += (double) len;
            t = pk_clock_monotonic();
        }
        best = bytes / (t - t0) / 1e9 > best ? bytes / (t - t0) / 1e9 : best;
    }
    //  the copies must be seen to be used, or they may be optimised away
    volatile char sink = dst[len - 1];
    (void) sink;
    free(src);
    free(dst);
    return best;
}

//  With --providers: each provider's GB/s over the memcpy of the same
//  repetition, on a line under the point's rows.
static void
s_memcpy_line(pkb_report_t *rep, const pkb_opts_t *o, const s_point_t *p,
              pkb_rep_t (*r)[PKB_MAX_REPS], const double *mc, int reps)
{
    char a[64], line[1024];
    double mcs[PKB_MAX_REPS];
    memcpy(mcs, mc, (size_t) reps * sizeof *mcs);  //  pkb_fig sorts what it is given
    pkb_fig_t m = pkb_fig(mcs, (size_t) reps);
    int at = snprintf(line, sizeof line, "    over one thread's memcpy of %lluK x %llu (%s "
                      "GB/s):", (unsigned long long) (p->block >> 10),
                      (unsigned long long) p->n, pkb_fig_str(m, "%.2f", a, sizeof a));
    json_t *row = pkb_report_row(rep), *over = json_object();
    json_object_set_new(row, "block_size", json_integer((json_int_t) p->block));
    json_object_set_new(row, "blocks_per_fetch", json_integer((json_int_t) p->n));
    json_object_set_new(row, "consumers", json_integer((json_int_t) p->c));
    json_object_set_new(row, "memcpy_gbps", pkb_fig_json(m));
    for (size_t k = 0; k < o->providers.n; k++) {
        double v[PKB_MAX_REPS];
        for (int i = 0; i < reps; i++)
            v[i] = r[k][i].gbps / mc[i];
        pkb_fig_t f = pkb_fig(v, (size_t) reps);
        if (at > 0 && (size_t) at < sizeof line)
            at += snprintf(line + at, sizeof line - (size_t) at, "%s %s %s",
                           k ? "," : "", o->providers.v[k],
                           pkb_fig_str(f, "%.3fx", a, sizeof a));
        json_object_set_new(over, o->providers.v[k], pkb_fig_json(f));
    }
    json_object_set_new(row, "gbps_over_memcpy", over);
    printf("%s\n", line);
    fflush(stdout);
}

static void
s_ref_failed(const s_point_t *p, const char *what, int rc)
{
    fprintf(stderr, "p2pkv-bench fetch: %lluK x %llu, %llu consumers: %s failed (%s); "
            "their columns are n/a in this row\n", (unsigned long long) (p->block >> 10),
            (unsigned long long) p->n, (unsigned long long) p->c, what, strerror(-rc));
}

//  A load's provider (NULL: the default, tcp) and, with --verify-cost, its
//  check: loads go provider by provider, the checked one first.
static const char *
s_load_provider(const pkb_opts_t *o, size_t k)
{
    size_t m = o->verify_cost ? 2 : 1;
    return o->providers.n ? o->providers.v[k / m] : NULL;
}

static bool
s_load_unchecked(const pkb_opts_t *o, size_t k)
{
    return o->verify_cost && k % 2 == 1;
}

//  The row's label: the provider, and "+chk" or "-chk" with --verify-cost.
static const char *
s_load_label(const pkb_opts_t *o, size_t k, char *buf, size_t len)
{
    const char *prov = s_load_provider(o, k);
    if (!o->verify_cost)
        return prov;
    snprintf(buf, len, "%s %s", prov ? prov : "tcp", s_load_unchecked(o, k) ? "-chk" : "+chk");
    return buf;
}

//  --one-trip with one consumer and one request at a time: the cycle (one
//  get, from its message to its per-key results) over a bare ZeroMQ echo
//  of a frame the get's size (zecho.c, control's echo) measured in the
//  same repetition, on a line under the point's rows: the latency target
//  of issue 37, point 1.  Nothing queued ahead on either side, so both are
//  round trips and nothing else.
static bool
s_echo_wanted(const pkb_opts_t *o, const s_point_t *p)
{
    return o->one_trip && p->c == 1 && PKB_IN_FLIGHT(o) == 1;
}

//  a get frame: about 100 bytes, 67 per key (64 hex and quotes) and its
//  destination block's index
static size_t
s_get_frame(const s_point_t *p)
{
    return 100 + 80 * (size_t) p->n;
}

static void
s_echo_line(pkb_report_t *rep, const pkb_opts_t *o, const s_point_t *p,
            pkb_rep_t (*r)[PKB_MAX_REPS], size_t nl, const double *ec, int reps)
{
    char a[64], line[1024];
    double ecs[PKB_MAX_REPS];
    memcpy(ecs, ec, (size_t) reps * sizeof *ecs);  //  pkb_fig sorts what it is given
    pkb_fig_t e = pkb_fig(ecs, (size_t) reps);
    int at = snprintf(line, sizeof line, "    cycle p50 over a bare ZeroMQ echo of %zu bytes "
                      "(p50 %s ms):", s_get_frame(p), pkb_fig_str(e, "%.3f", a, sizeof a));
    json_t *row = pkb_report_row(rep), *over = json_object();
    json_object_set_new(row, "block_size", json_integer((json_int_t) p->block));
    json_object_set_new(row, "blocks_per_fetch", json_integer((json_int_t) p->n));
    json_object_set_new(row, "consumers", json_integer((json_int_t) p->c));
    json_object_set_new(row, "zmq_echo_p50_ms", pkb_fig_json(e));
    for (size_t k = 0; k < nl; k++) {
        double v[PKB_MAX_REPS];
        for (int i = 0; i < reps; i++)
            v[i] = r[k][i].ft[0] / ec[i];
        pkb_fig_t f = pkb_fig(v, (size_t) reps);
        const char *name = o->providers.n ? s_load_provider(o, k) : "tcp";
        if (at > 0 && (size_t) at < sizeof line)
            at += snprintf(line + at, sizeof line - (size_t) at, "%s %s %s", k ? "," : "",
                           name, pkb_fig_str(f, "%.2fx", a, sizeof a));
        json_object_set_new(over, name, pkb_fig_json(f));
    }
    json_object_set_new(row, "cycle_p50_over_zmq_echo", over);
    printf("%s\n", line);
    fflush(stdout);
}

static int
s_point(pkb_report_t *rep, const pkb_opts_t *o, pkb_server_t *srv, const s_point_t *p,
        s_med_t *med)
{
    int reps = o->reps ? o->reps : o->quick ? 2 : 5;
    size_t nl = (o->providers.n ? o->providers.n : 1) * (o->verify_cost ? 2 : 1);
    static pkb_consumer_t cs[2 * PKB_MAX_PROVIDERS][1024];
    static pkb_rep_t r[2 * PKB_MAX_PROVIDERS][PKB_MAX_REPS];
    double raw[PKB_MAX_REPS], tcp[PKB_MAX_REPS], vs[2 * PKB_MAX_PROVIDERS][PKB_MAX_REPS];
    double mc[PKB_MAX_REPS], ec[PKB_MAX_REPS];
    char err[256] = "";
    size_t started = 0;
    int rc = 0;
    for (; rc == 0 && started < nl; started += rc == 0) {
        pkb_consumer_cfg_t cfg = { srv->endpoint, p->block, p->n, true, false,
                                   o->seconds ? o->seconds : o->quick ? 0.5 : 2, 0, false,
                                   NULL, NULL, NULL, o->threads, s_load_provider(o, started),
                                   PKB_IN_FLIGHT(o), o->answer_spin,
                                   s_load_unchecked(o, started), o->one_trip };
        rc = pkb_load_start(cs[started], p->c, &cfg, err, sizeof err);
    }
    //  The two references, measured alike.  One that fails leaves its
    //  columns n/a in this row and p2pkv is still measured: 64 bare
    //  fi_writedata loops of 2 MiB x 32 did not all open within 30 s here,
    //  where p2pkv's consumers ran (doc/design.md, "Where the end-to-end
    //  time goes").  Once failed, it is not tried again in the next
    //  repetitions: its column is n/a whatever they give, and each try may
    //  take 30 s.
    struct {
        const char *what;
        int (*gbps)(uint64_t block, size_t batch, size_t pairs, bool quick, double *gbps);
        double *v;
        bool ok;
    } refs[] = { { "the raw fi_writedata loops", pkb_fabric_raw_gbps, raw, true },
                 { "the bare TCP streams", pkb_tcp_streams_gbps, tcp, true } };
    for (int i = 0; rc == 0 && i < reps; i++) {
        for (size_t x = 0; x < sizeof refs / sizeof refs[0]; x++) {
            int ref = refs[x].ok ? refs[x].gbps(p->block, p->n, p->c, o->quick, &refs[x].v[i]) : 0;
            if (ref)
                s_ref_failed(p, refs[x].what, ref);
            refs[x].ok &= ref == 0;
            if (!refs[x].ok)
                refs[x].v[i] = NAN;
        }
        //  --providers: the same-host reference, memcpy, measured alike
        mc[i] = o->providers.n && !o->verify_cost ? s_memcpy_gbps(p->block, p->n, o->quick)
                                                  : NAN;
        double e99;
        ec[i] = NAN;
        if (s_echo_wanted(o, p)
            && pkb_zmq_echo_ms(s_get_frame(p), o->quick ? 500 : 2000, false,
                               pkb_answer_spin_us(o) / 1e6, &ec[i], &e99) != 0)
            s_ref_failed(p, "the bare ZeroMQ echo", -EIO);
        for (size_t k = 0; rc == 0 && k < nl; k++)
            rc = pkb_load_rep(cs[k], p->c, srv->pid, p->n, &r[k][i], err, sizeof err);
        //  --verify-cost: the checked load over its unchecked twin
        for (size_t k = 0; rc == 0 && k < nl; k++)
            vs[k][i] = o->verify_cost ? r[k][i].gbps / r[k | 1][i].gbps
                                      : r[k][i].gbps / r[nl - 1][i].gbps;
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
    bool labelled = o->providers.n || o->verify_cost;
    char label[PKB_MAX_PROVIDERS * 2][80], last[80];
    s_load_label(o, nl - 1, last, sizeof last);
    for (size_t k = 0; k < nl; k++)
        s_row(rep, p, r[k], raw, tcp, reps,
              labelled ? s_load_label(o, k, label[k], sizeof label[k]) : NULL,
              labelled ? (o->verify_cost ? "its unchecked twin" : last) : NULL,
              labelled ? vs[k] : NULL, k == nl - 1 ? med : NULL);
    if (o->providers.n && !o->verify_cost)
        s_memcpy_line(rep, o, p, r, mc, reps);
    if (s_echo_wanted(o, p) && !o->verify_cost)
        s_echo_line(rep, o, p, r, nl, ec, reps);
    return 0;
}

//  Each point of more consumers beside the point of one with the same
//  block size and blocks: what the crowd keeps of one stream's GB/s, for
//  p2pkv and for both references, so that a loss shows whose it is.
static void
s_crowd_lines(pkb_report_t *rep, const s_point_t *p, const s_med_t *med, size_t np)
{
    json_t *lines = json_array();
    for (size_t i = 0; i < np; i++)
        for (size_t j = 0; p[i].c > 1 && j < np; j++) {
            if (p[j].c != 1 || p[j].block != p[i].block || p[j].n != p[i].n)
                continue;
            //  a reference that failed (NAN) is n/a here, null in the JSON
            double k[3] = { med[i].gbps / med[j].gbps, med[i].raw / med[j].raw,
                            med[i].tcp / med[j].tcp };
            char t[3][16];
            json_t *line = json_pack("{sIsIsI}", "consumers", (json_int_t) p[i].c, "block_size",
                                     (json_int_t) p[i].block, "blocks_per_fetch",
                                     (json_int_t) p[i].n);
            static const char *const names[3] = { "p2pkv", "raw", "tcp" };
            for (int x = 0; x < 3; x++) {
                bool ok = isfinite(k[x]);
                snprintf(t[x], sizeof t[x], ok ? "%.2fx" : "n/a", k[x]);
                json_object_set_new(line, names[x], ok ? json_real(k[x]) : json_null());
            }
            json_object_set_new(line, "context_switches_per_mb",
                                json_pack("{sfsf}", "crowd", med[i].switches, "one",
                                          med[j].switches));
            printf("  %llu consumers over 1, %lluK x %llu (medians): p2pkv %s, raw "
                   "fi_writedata %s, bare TCP %s; context switches per MB %.2f against %.2f\n",
                   (unsigned long long) p[i].c, (unsigned long long) (p[i].block >> 10),
                   (unsigned long long) p[i].n, t[0], t[1], t[2], med[i].switches,
                   med[j].switches);
            json_array_append_new(lines, line);
            break;
        }
    pkb_report_note(rep, "over_one_consumer", lines);
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
    static s_med_t med[S_MAX_POINTS];
    size_t np = s_points(o, p);
    uint64_t max_sessions = o->max_sessions ? o->max_sessions : 256;
    if (s_check(o, p, np, max_sessions))
        return 2;
    qsort(p, np, sizeof *p, s_cmp_point);   //  stable enough: one server per size
    int reps = o->reps ? o->reps : o->quick ? 2 : 5;
    const char *prov = o->providers.n ? o->providers.joined : "tcp";
    printf("fetch: p2pkv-server and consumer %s (client library: lookup + fetch until "
           "landed + finish), %s%s on 127.0.0.1, libfabric %s; every block checked once "
           "outside the timed part; beside it, in the same repetition, as many streams at "
           "once as consumers: raw = bare fi_writedata loops over tcp (writer and target "
           "processes, batch min(blocks, 256)), tcp = bare TCP sockets (blocking send and "
           "recv of a block, at most 2 MiB); latencies in ms; abort: n/a (p2pkv.h has no abort call); "
           "median, and [min..max] of %d repetitions\n",
           o->threads ? "threads of one process" : "processes", o->providers.n ? "providers " : "",
           prov, pkb_fabric_version(), reps);
    pkb_report_t *rep = pkb_report_new(o, prov);
    if (o->providers.n || o->verify_cost) {
        const char *names[S_NAMES + 2];
        memcpy(names, s_names, 3 * sizeof *names);
        names[3] = "provider";
        memcpy(names + 4, s_names + 3, (S_NAMES - 3) * sizeof *names);
        char vs[80];
        snprintf(vs, sizeof vs, "vs %s", o->verify_cost ? "-chk"
                                         : o->providers.v[o->providers.n - 1]);
        names[S_NAMES + 1] = vs;
        int w[S_NAMES + 2];
        memcpy(w, s_pw, 4 * sizeof *w);
        memcpy(w + 4, s_w + 3, (S_NAMES - 3) * sizeof *w);
        w[S_NAMES + 1] = s_vw;
        pkb_table_head(names, w, S_NAMES + 2);
    }
    else
        pkb_table_head(s_names, s_w, S_NAMES);
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
            rc = s_point(rep, o, &srv, &p[j], &med[j]);
        pkb_server_stop(&srv);
        i = j;
    }
    if (rc == 0)
        s_crowd_lines(rep, p, med, np);
    if (rc == 0)
        rc = pkb_report_finish(rep);
    pkb_report_destroy(&rep);
    return rc ? 1 : 0;
}
