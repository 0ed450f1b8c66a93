/*  control.c: the control plane alone: lookups per second and their round
    trip, through a real p2pkv-server and consumer processes of the
    client library (lookup, wait for the answer, finish; no fetch), of
    keys all present (hits: the server pins them until finish) or all
    absent (misses); and the cancel's latency (cancel: the hits fetched
    and cancelled at once, timed from p2pkv_client_cancel to its end,
    ABORTED, which waits for the server's abort_ack and the fence).
    Last, CURVE's cost (issue 13): the same hit lookups against a second
    server with --curve-secret (kind "curve"), each repetition right
    after one against the plain server, and the ratio of their p50s.  */
#include "bench.h"

#include <czmq.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t keys, c;
    bool miss;
    bool cancel;                    //  hits, fetched and cancelled at once
    bool curve;                     //  against the CURVE server (s_curve)
} s_point_t;

#define S_MAX_POINTS 256
#define S_BLOCK 4096

static size_t
s_points(const pkb_opts_t *o, s_point_t *p)
{
    size_t k = 0;
    if (o->keys.n || o->consumers.n) {
        pkb_list_t n = o->keys.n ? o->keys : (pkb_list_t) { 1, { 1 } };
        pkb_list_t c = o->consumers.n ? o->consumers : (pkb_list_t) { 1, { 1 } };
        for (size_t j = 0; j < n.n; j++)
            for (size_t l = 0; l < c.n; l++)
                for (int m = 0; m < 3 && k < S_MAX_POINTS; m++)
                    p[k++] = (s_point_t) { n.v[j], c.v[l], m == 1, m == 2, false };
        return k;
    }
    static const uint64_t full_n[] = { 1, 64, 1024, 4096 }, quick_n[] = { 1, 1024 };
    for (size_t i = 0; i < (o->quick ? 2u : 4u); i++)
        for (int m = 0; m < 2; m++)
            p[k++] = (s_point_t) { o->quick ? quick_n[i] : full_n[i], 1, m, false, false };
    static const uint64_t full_c[] = { 8, 64 }, quick_c[] = { 8 };
    for (size_t i = 0; i < (o->quick ? 1u : 2u); i++)
        p[k++] = (s_point_t) { 1, o->quick ? quick_c[i] : full_c[i], false, false, false };
    p[k++] = (s_point_t) { 256, 1, false, true, false };
    return k;
}

static const char *const s_names[] = { "keys", "cons", "kind", "lookups/s", "keys/s",
                                       "rtt p50 ms", "p99", "p999", "srv cpu",
                                       "zmq echo p50", "rtt/zmq", "us/key" };
static const int s_w[] = { 5, 4, 6, 16, 18, 16, 16, 16, 12, 16, 16, 16 };
#define S_FIGS 10

//  A cancel row's own figures: p2pkv_client_cancel -> on_fetch ABORTED
//  (its fetch samples), p50 and p99 of each repetition, as median
//  [min..max] over them, on a line of their own under the row.
static void
s_cancel_row(json_t *row, const pkb_rep_t *r, int reps)
{
    double p50[PKB_MAX_REPS], p99[PKB_MAX_REPS];
    for (int i = 0; i < reps; i++) {
        p50[i] = r[i].ft[0];
        p99[i] = r[i].ft[1];
    }
    pkb_fig_t f50 = pkb_fig(p50, (size_t) reps), f99 = pkb_fig(p99, (size_t) reps);
    char a[64], b[64];
    printf("    cancel -> ABORTED, ms: p50 %s, p99 %s\n", pkb_fig_str(f50, "%.3f", a, sizeof a),
           pkb_fig_str(f99, "%.3f", b, sizeof b));
    fflush(stdout);
    json_object_set_new(row, "cancel_p50_ms", pkb_fig_json(f50));
    json_object_set_new(row, "cancel_p99_ms", pkb_fig_json(f99));
}

//  A lookup's cost per key: its round trip's p50 over its keys, in us.
static double
s_per_key_us(const s_point_t *p, const pkb_rep_t *r)
{
    return r->lk[0] * 1000 / (double) p->keys;
}

//  z: the bare ZeroMQ echo's p50 of each repetition (zecho.c), in ms.
static void
s_row(pkb_report_t *rep, const s_point_t *p, const pkb_rep_t *r, const double *z, int reps)
{
    double v[S_FIGS][PKB_MAX_REPS];
    for (int i = 0; i < reps; i++) {
        double f[S_FIGS] = { r[i].ops_per_s, r[i].keys_per_s, r[i].lk[0], r[i].lk[1],
                             r[i].lk[2], r[i].srv_cpu_s, z[i], r[i].lk[0] / z[i],
                             s_per_key_us(p, &r[i]), (double) r[i].samples };
        for (int j = 0; j < S_FIGS; j++)
            v[j][i] = f[j];
    }
    pkb_fig_t g[S_FIGS];
    for (int j = 0; j < S_FIGS; j++)
        g[j] = pkb_fig(v[j], (size_t) reps);
    char n[24], c[24];
    snprintf(n, sizeof n, "%llu", (unsigned long long) p->keys);
    snprintf(c, sizeof c, "%llu", (unsigned long long) p->c);
    const char *kind = p->curve ? "curve" : p->cancel ? "cancel" : p->miss ? "miss" : "hit";
    const char *params[] = { n, c, kind };
    static const char *const fmts[] = { "%.0f", "%.0f", "%.3f", "%.3f", "%.3f", "%.2f",
                                        "%.3f", "%.2fx", "%.3f" };
    pkb_table_row(params, s_w, 3, g, fmts, s_w + 3, 9);
    json_t *row = pkb_report_row(rep);
    static const char *const keys[] = { "lookups_per_s", "keys_per_s", "rtt_p50_ms",
                                        "rtt_p99_ms", "rtt_p999_ms",
                                        "server_cpu_cores", "zmq_echo_p50_ms",
                                        "rtt_over_zmq_echo", "us_per_key_p50", "samples" };
    json_object_set_new(row, "keys_per_lookup", json_integer((json_int_t) p->keys));
    json_object_set_new(row, "consumers", json_integer((json_int_t) p->c));
    json_object_set_new(row, "kind", json_string(kind));
    json_object_set_new(row, "repetitions", json_integer(reps));
    for (int j = 0; j < S_FIGS; j++)
        json_object_set_new(row, keys[j], pkb_fig_json(g[j]));
    if (p->cancel)
        s_cancel_row(row, r, reps);
}

static pkb_consumer_cfg_t
s_cfg(const pkb_opts_t *o, const pkb_server_t *srv, const s_point_t *p)
{
    return (pkb_consumer_cfg_t) { srv->endpoint, S_BLOCK, p->keys, p->cancel, p->miss,
                                  o->seconds ? o->seconds : o->quick ? 0.5 : 2, 0, p->cancel,
                                  NULL, NULL, NULL, o->threads, NULL, PKB_IN_FLIGHT(o),
                                  o->answer_spin, false, false };
}

//  A repetition of a load already started, and the bare ZeroMQ echo of
//  a frame the lookup's size beside it (with CURVE for a CURVE row): 0, or
//  a negative errno with err.
static int
s_rep(const pkb_opts_t *o, pkb_consumer_t *cs, const s_point_t *p, pid_t pid, pkb_rep_t *r,
      double *z, char *err, size_t size)
{
    //  a lookup frame is about 100 bytes plus 67 per key (64 hex and quotes)
    size_t frame = 100 + 67 * (size_t) p->keys;
    double z99;
    int rc = pkb_load_rep(cs, p->c, pid, p->keys, r, err, size);
    if (rc == 0
        && (rc = pkb_zmq_echo_ms(frame, o->quick ? 500 : 2000, p->curve, pkb_answer_spin_us(o) / 1e6, z, &z99)) != 0)
        snprintf(err, size, "the bare ZeroMQ echo failed");
    return rc;
}

//  per_key: each repetition's cost per key (s_per_key_us), for s_ratios.
static int
s_point(pkb_report_t *rep, const pkb_opts_t *o, pkb_server_t *srv, const s_point_t *p,
        double *per_key)
{
    int reps = o->reps ? o->reps : o->quick ? 2 : 5;
    pkb_consumer_cfg_t cfg = s_cfg(o, srv, p);
    static pkb_consumer_t cs[1024];
    pkb_rep_t r[PKB_MAX_REPS];
    double z[PKB_MAX_REPS];
    char err[256] = "";
    int rc = pkb_load_start(cs, p->c, &cfg, err, sizeof err);
    bool started = rc == 0;
    for (int i = 0; rc == 0 && i < reps; i++)
        rc = s_rep(o, cs, p, srv->pid, &r[i], &z[i], err, sizeof err);
    if (started)
        pkb_load_stop(cs, p->c);
    if (rc) {
        fprintf(stderr, "p2pkv-bench control: %llu keys, %llu consumers: %s\n",
                (unsigned long long) p->keys, (unsigned long long) p->c, err);
        return rc;
    }
    s_row(rep, p, r, z, reps);
    for (int i = 0; i < reps; i++)
        per_key[i] = s_per_key_us(p, &r[i]);
    return 0;
}

//  Whether lookups stay linear in their keys (issue 37): for each kind and
//  number of consumers run at several key counts, each count's cost per
//  key over that of 1,024 keys (or of the fewest keys run, without 1,024),
//  repetition by repetition, on a line of their own.
static void
s_ratios(pkb_report_t *rep, const s_point_t *p, size_t np,
         double (*per_key)[PKB_MAX_REPS], int reps)
{
    for (size_t b = 0; b < np; b++) {
        size_t base = b;
        bool first = true;
        for (size_t j = 0; j < np; j++) {
            bool same = p[j].miss == p[b].miss && p[j].cancel == p[b].cancel && p[j].c == p[b].c;
            if (!same)
                continue;
            first = first && j >= b;
            if (p[base].keys != 1024 && (p[j].keys == 1024 || p[j].keys < p[base].keys))
                base = j;
        }
        if (!first)
            continue;           //  the group was reported at its first point
        const char *kind = p[b].cancel ? "cancel" : p[b].miss ? "miss" : "hit";
        char line[1024];
        int at = snprintf(line, sizeof line, "    per-key cost over %llu keys', %s, %llu "
                          "consumer%s:", (unsigned long long) p[base].keys, kind,
                          (unsigned long long) p[b].c, p[b].c == 1 ? "" : "s");
        json_t *row = NULL;
        for (size_t j = 0; j < np; j++) {
            bool same = p[j].miss == p[b].miss && p[j].cancel == p[b].cancel && p[j].c == p[b].c;
            if (!same || j == base)
                continue;
            double v[PKB_MAX_REPS];
            for (int i = 0; i < reps; i++)
                v[i] = per_key[j][i] / per_key[base][i];
            pkb_fig_t f = pkb_fig(v, (size_t) reps);
            char a[64];
            if (at > 0 && (size_t) at < sizeof line)
                at += snprintf(line + at, sizeof line - (size_t) at, " %llu keys %s,",
                               (unsigned long long) p[j].keys,
                               pkb_fig_str(f, "%.2fx", a, sizeof a));
            if (!row) {
                row = pkb_report_row(rep);
                json_object_set_new(row, "kind", json_string(kind));
                json_object_set_new(row, "consumers", json_integer((json_int_t) p[b].c));
                json_object_set_new(row, "per_key_base_keys",
                                    json_integer((json_int_t) p[base].keys));
                json_object_set_new(row, "per_key_over_base", json_object());
            }
            char name[24];
            snprintf(name, sizeof name, "%llu", (unsigned long long) p[j].keys);
            json_object_set_new(json_object_get(row, "per_key_over_base"), name,
                                pkb_fig_json(f));
        }
        if (row) {
            line[at > 0 && (size_t) at < sizeof line ? at - 1 : 0] = '\0';
            printf("%s (targets, issue 37: at most 1.2x at 4096 keys, 1.5x at 65536 over "
                   "1024)\n", line);
            fflush(stdout);
        }
    }
}

//  --------------------------------------------------------------------------
//  CURVE's cost: a second server with --curve-secret and one allowed key

typedef struct {
    char dir[64], secret[96], allow[96];
    zcert_t *server, *consumer;
} s_curve_t;

//  The server's certificate and the consumer's public one in dir/allow,
//  as p2pkv keygen would write them.  0 or -errno.
static int
s_curve_keys(s_curve_t *k)
{
    snprintf(k->dir, sizeof k->dir, "/tmp/p2pkv-bench-curve-XXXXXX");
    if (!mkdtemp(k->dir))
        return -errno;
    snprintf(k->secret, sizeof k->secret, "%s/server_secret", k->dir);
    snprintf(k->allow, sizeof k->allow, "%s/allow", k->dir);
    char pub[160];
    snprintf(pub, sizeof pub, "%s/consumer", k->allow);
    k->server = zcert_new();
    k->consumer = zcert_new();
    if (!k->server || !k->consumer || mkdir(k->allow, 0700) != 0
        || zcert_save_secret(k->server, k->secret) != 0
        || zcert_save_public(k->consumer, pub) != 0)
        return -EIO;
    return 0;
}

static void
s_curve_free(s_curve_t *k)
{
    char path[160];
    snprintf(path, sizeof path, "%s/consumer", k->allow);
    unlink(path);
    rmdir(k->allow);
    unlink(k->secret);
    rmdir(k->dir);
    zcert_destroy(&k->server);
    zcert_destroy(&k->consumer);
}

//  The curve row, and the ratio of each repetition's p50 to the plain
//  one's just before it.
static void
s_curve_rows(pkb_report_t *rep, const s_point_t *p, const pkb_rep_t *plain,
             const pkb_rep_t *curve, const double *zp, const double *zc, int reps)
{
    s_point_t plain_p = *p, curve_p = *p;
    plain_p.curve = false;
    curve_p.curve = true;
    s_row(rep, &plain_p, plain, zp, reps);
    s_row(rep, &curve_p, curve, zc, reps);
    double ratio[PKB_MAX_REPS], bare[PKB_MAX_REPS];
    for (int i = 0; i < reps; i++) {
        ratio[i] = curve[i].lk[0] / plain[i].lk[0];
        bare[i] = zc[i] / zp[i];
    }
    pkb_fig_t f = pkb_fig(ratio, (size_t) reps), g = pkb_fig(bare, (size_t) reps);
    char a[64], b[64];
    printf("    curve/plain rtt p50, %llu keys: %s (target: at most 1.3x); a bare ZeroMQ "
           "echo of a lookup's bytes, curve/plain: %s\n", (unsigned long long) p->keys,
           pkb_fig_str(f, "%.3fx", a, sizeof a), pkb_fig_str(g, "%.3fx", b, sizeof b));
    fflush(stdout);
    json_t *row = pkb_report_row(rep);
    json_object_set_new(row, "curve_over_plain_rtt_p50", pkb_fig_json(f));
    json_object_set_new(row, "curve_over_plain_zmq_echo_p50", pkb_fig_json(g));
}

//  One point, plain and CURVE repetitions alternating (the machine's load
//  drifts alike over both).
static int
s_curve_point(pkb_report_t *rep, const pkb_opts_t *o, pkb_server_t *plain, pkb_server_t *cs_srv,
              const s_curve_t *k, const s_point_t *p)
{
    int reps = o->reps ? o->reps : o->quick ? 2 : 5;
    pkb_consumer_cfg_t pc = s_cfg(o, plain, p), cc = s_cfg(o, cs_srv, p);
    cc.curve_public = zcert_public_txt(k->consumer);
    cc.curve_secret = zcert_secret_txt(k->consumer);
    cc.curve_server = zcert_public_txt(k->server);
    //  one consumer on each server, both started: the one not timed waits
    pkb_consumer_t cp, ccs;
    pkb_rep_t rp[PKB_MAX_REPS], rc_[PKB_MAX_REPS];
    double zp[PKB_MAX_REPS], zc[PKB_MAX_REPS];
    char err[256] = "";
    int rc = pkb_load_start(&cp, 1, &pc, err, sizeof err);
    bool plain_up = rc == 0;
    if (rc == 0)
        rc = pkb_load_start(&ccs, 1, &cc, err, sizeof err);
    bool curve_up = plain_up && rc == 0;
    for (int i = 0; rc == 0 && i < reps; i++) {
        rc = s_rep(o, &cp, p, plain->pid, &rp[i], &zp[i], err, sizeof err);
        s_point_t curve_p = *p;
        curve_p.curve = true;
        if (rc == 0)
            rc = s_rep(o, &ccs, &curve_p, cs_srv->pid, &rc_[i], &zc[i], err, sizeof err);
    }
    if (curve_up)
        pkb_load_stop(&ccs, 1);
    if (plain_up)
        pkb_load_stop(&cp, 1);
    if (rc) {
        fprintf(stderr, "p2pkv-bench control: CURVE, %llu keys: %s\n",
                (unsigned long long) p->keys, err);
        return rc;
    }
    s_curve_rows(rep, p, rp, rc_, zp, zc, reps);
    return 0;
}

static int
s_curve(pkb_report_t *rep, const pkb_opts_t *o, pkb_server_t *plain, uint64_t pool,
        uint64_t max_sessions)
{
    s_curve_t k = { 0 };
    int rc = s_curve_keys(&k);
    const char *const extra[] = { "--curve-secret", k.secret, "--curve-allow", k.allow, NULL };
    pkb_server_t srv;
    bool started = rc == 0 && (rc = pkb_server_start(&srv, o, S_BLOCK, 2 * pool, max_sessions,
                                                     extra)) == 0;
    if (rc == 0)
        rc = pkb_server_populate(&srv, pool);
    static const uint64_t keys[] = { 1, 1024 };
    for (size_t i = 0; rc == 0 && i < 2; i++)
        if (keys[i] <= pool)
            rc = s_curve_point(rep, o, plain, &srv, &k,
                               &(s_point_t) { keys[i], 1, false, false, false });
    if (started)
        pkb_server_stop(&srv);
    if (rc && !started)
        fprintf(stderr, "p2pkv-bench control: cannot start the CURVE server\n");
    s_curve_free(&k);
    return rc;
}

int
pkb_control(const pkb_opts_t *o)
{
    s_point_t p[S_MAX_POINTS];
    size_t np = s_points(o, p);
    uint64_t max_sessions = o->max_sessions ? o->max_sessions : 256, pool = 0;
    for (size_t i = 0; i < np; i++) {
        if (p[i].c > max_sessions) {
            fprintf(stderr, "p2pkv-bench control: --consumers %llu is more than the server's "
                    "--max-sessions %llu\n", (unsigned long long) p[i].c,
                    (unsigned long long) max_sessions);
            return 2;
        }
        pool = p[i].keys > pool ? p[i].keys : pool;
    }
    if (pkb_check_memory("control", "--keys", (double) PKB_IN_FLIGHT(o) * (double) pool * S_BLOCK))
        return 2;
    int reps = o->reps ? o->reps : o->quick ? 2 : 5;
    printf("control: lookup round trips through p2pkv-server (pool of %llu blocks of %d bytes) "
           "from consumer %s of the client library, tcp on 127.0.0.1; hit: every key "
           "present (pinned until finish), miss: none, cancel: hits fetched and cancelled at "
           "once (p2pkv_client_cancel), rtt still the lookup's; srv cpu in cores; zmq echo: a bare "
           "ZeroMQ DEALER->ROUTER echo of a frame the lookup's size between two processes, "
           "one client, in the same repetition (CURVE on both sockets in a curve row), whose "
           "client waits for its answer as the library's does (looking without sleeping for "
           "%.0f us, then sleeping); us/key: rtt p50 over the keys; median, and [min..max] of %d "
           "repetitions\n",
           (unsigned long long) pool, S_BLOCK,
           o->threads ? "threads (of one process)" : "processes", pkb_answer_spin_us(o), reps);
    pkb_report_t *rep = pkb_report_new(o, "tcp");
    pkb_table_head(s_names, s_w, 11);
    pkb_report_note(rep, "consumers_are", json_string(o->threads ? "threads" : "processes"));
    pkb_report_note(rep, "answer_spin_us", json_real(pkb_answer_spin_us(o)));
    pkb_server_t srv;
    //  each consumer has --in-flight lookups (consumer.c), each pinning its
    //  hits under the pin quota, which is the pool's size
    int rc = pkb_server_start(&srv, o, S_BLOCK, (uint64_t) PKB_IN_FLIGHT(o) * pool, max_sessions,
                              NULL);
    if (rc == 0)
        rc = pkb_server_populate(&srv, pool);
    static double per_key[S_MAX_POINTS][PKB_MAX_REPS];
    for (size_t i = 0; rc == 0 && i < np; i++)
        rc = s_point(rep, o, &srv, &p[i], per_key[i]);
    if (rc == 0)
        s_ratios(rep, p, np, per_key, reps);
    if (rc == 0)
        rc = s_curve(rep, o, &srv, pool, max_sessions);
    pkb_server_stop(&srv);
    if (rc == 0)
        rc = pkb_report_finish(rep);
    pkb_report_destroy(&rep);
    return rc ? 1 : 0;
}
