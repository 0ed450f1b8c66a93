/*  engine.c: what an engine's publishing costs, with the block checksum
    and without (issue 34).

    Two servers side by side, one taking each block's checksum at commit
    (the default) and one started with --block-checksums off; one engine
    handle (p2pkv_engine.h) on each.  Each repetition times, on each server
    in turn, N blocks published two ways: put (reserve, copy, commit: one
    block per call) and reserve + write into the mapping + commit of all N
    at once; then drops them so the next repetition publishes into the
    same free pool.  The ratio of the two servers' rates is taken within
    the repetition (p2pkv-bench's rule: ratios from one run), and the
    table gives median and [min..max] over the repetitions.
*/
#include "bench.h"
#include "base/clock.h"
#include "p2pkv_engine.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_BLOCK (64u << 10)

typedef struct {
    pkb_server_t srv;
    p2pkv_engine_t *engine;
    bool started;
} s_side_t;

//  N distinct blocks and their keys (the bench's content, pkb_fill).
typedef struct {
    uint64_t n;
    uint8_t *data;
    uint8_t (*key)[PKB_KEY_LEN];
    p2pkv_key_t *keys;
    uint32_t *blocks;
} s_set_t;

static int
s_side_start(s_side_t *s, const pkb_opts_t *o, uint64_t pool, bool checksums)
{
    const char *off[] = { "--block-checksums", "off", NULL };
    int rc = pkb_server_start(&s->srv, o, S_BLOCK, pool, 4, checksums ? NULL : off);
    s->started = rc == 0;
    char err[P2PKV_ERRLEN] = "";
    if (rc == 0 && !(s->engine = p2pkv_engine_open(s->srv.local, 10, NULL, NULL, err))) {
        fprintf(stderr, "p2pkv-bench engine: %s\n", err);
        rc = -ENOTCONN;
    }
    return rc;
}

static void
s_side_stop(s_side_t *s)
{
    p2pkv_engine_close(&s->engine);
    if (s->started)
        pkb_server_stop(&s->srv);
}

//  One way of publishing the set, timed: blocks per second, or NAN with
//  the reason said.
static double
s_publish(s_side_t *s, s_set_t *set, bool put)
{
    char err[P2PKV_ERRLEN] = "";
    int rc = 0;
    double t0 = pk_clock_monotonic();
    if (put)
        for (uint64_t i = 0; rc == 0 && i < set->n; i++)
            rc = p2pkv_engine_put(s->engine, &set->keys[i], set->data + i * S_BLOCK, S_BLOCK,
                                  err);
    else {
        rc = p2pkv_engine_reserve(s->engine, set->keys, set->n, set->blocks, err);
        for (uint64_t i = 0; rc == 0 && i < set->n; i++)
            rc = p2pkv_engine_write(s->engine, set->blocks[i], 0, set->data + i * S_BLOCK,
                                    S_BLOCK, err);
        if (rc == 0)
            rc = p2pkv_engine_commit(s->engine, set->keys, set->n, err);
    }
    double t = pk_clock_monotonic() - t0;
    if (rc == 0)
        rc = p2pkv_engine_drop(s->engine, set->keys, set->n, err);
    if (rc) {
        fprintf(stderr, "p2pkv-bench engine: %s: %s\n", put ? "put" : "commit", err);
        return NAN;
    }
    return (double) set->n / t;
}

int
pkb_engine(const pkb_opts_t *o)
{
    int reps = o->reps ? o->reps : o->quick ? 3 : 7;
    s_set_t set = { .n = o->quick ? 256 : 1024 };
    set.data = malloc(set.n * S_BLOCK);
    set.key = malloc(set.n * sizeof *set.key);
    set.keys = malloc(set.n * sizeof *set.keys);
    set.blocks = malloc(set.n * sizeof *set.blocks);
    int rc = set.data && set.key && set.keys && set.blocks ? 0 : -ENOMEM;
    for (uint64_t i = 0; rc == 0 && i < set.n; i++) {
        pkb_fill(i, set.data + i * S_BLOCK, S_BLOCK);
        pkb_key(i, set.key[i]);
        set.keys[i] = (p2pkv_key_t) { set.key[i], PKB_KEY_LEN };
    }
    s_side_t with = { 0 }, without = { 0 };
    if (rc == 0)
        rc = s_side_start(&with, o, set.n, true);
    if (rc == 0)
        rc = s_side_start(&without, o, set.n, false);
    printf("engine: %llu blocks of %u KiB published by one engine handle, to a server "
           "taking each block's checksum at commit (+chk, the default) and to one started "
           "with --block-checksums off (-chk), alternating within each repetition; put = "
           "p2pkv_engine_put per block, commit = reserve + write + commit of all at once; "
           "blocks/s, median and [min..max] of %d repetitions; ratio = +chk over -chk in "
           "the same repetition\n", (unsigned long long) set.n, S_BLOCK >> 10, reps);
    static const char *const names[] = { "how", "+chk blk/s", "-chk blk/s", "ratio" };
    static const int w[] = { 8, 24, 24, 20 };
    pkb_table_head(names, w, 4);
    pkb_report_t *rep = pkb_report_new(o, "engine");
    for (int way = 0; rc == 0 && way < 2; way++) {
        bool put = way == 0;
        double a[PKB_MAX_REPS], b[PKB_MAX_REPS], r[PKB_MAX_REPS];
        for (int i = 0; i < reps; i++) {
            //  the order alternates, so neither side always goes first
            if (i % 2 == 0) {
                a[i] = s_publish(&with, &set, put);
                b[i] = s_publish(&without, &set, put);
            }
            else {
                b[i] = s_publish(&without, &set, put);
                a[i] = s_publish(&with, &set, put);
            }
            r[i] = a[i] / b[i];
        }
        pkb_fig_t g[3] = { pkb_fig(a, (size_t) reps), pkb_fig(b, (size_t) reps),
                           pkb_fig(r, (size_t) reps) };
        const char *params[] = { put ? "put" : "commit" };
        static const char *const fmts[] = { "%.0f", "%.0f", "%.3fx" };
        pkb_table_row(params, w, 1, g, fmts, w + 1, 3);
        json_t *row = pkb_report_row(rep);
        json_object_set_new(row, "how", json_string(put ? "put" : "commit"));
        json_object_set_new(row, "block_size", json_integer(S_BLOCK));
        json_object_set_new(row, "blocks", json_integer((json_int_t) set.n));
        json_object_set_new(row, "checksum_blocks_per_s", pkb_fig_json(g[0]));
        json_object_set_new(row, "no_checksum_blocks_per_s", pkb_fig_json(g[1]));
        json_object_set_new(row, "ratio", pkb_fig_json(g[2]));
    }
    if (rc == 0)
        rc = pkb_report_finish(rep);
    pkb_report_destroy(&rep);
    s_side_stop(&without);
    s_side_stop(&with);
    free(set.data);
    free(set.key);
    free(set.keys);
    free(set.blocks);
    return rc ? 1 : 0;
}
