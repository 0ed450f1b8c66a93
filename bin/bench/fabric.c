/*  fabric.c: the same process pair (a writer, and a target in a child
    process that progresses its channel all the time, over tcp on
    127.0.0.1), the same blocks, three ways: a bare loop posting one
    fi_writedata per block at depth 16; for contiguous layouts, the same
    bare loop posting the merged writes write_blocks makes (runs of up to
    PK_OFI_MAX_WRITE_BYTES), so that ratio compares like with like; and
    write_blocks itself (merging, splitting, its own depth).  A batch
    counts as done when the writer's completions say so.  Each
    repetition moves at least 64 MiB (16 in --quick) or 16 batches each
    way, interleaved; figures are min, median, max over repetitions.

    pkb_fabric_raw_gbps runs the bare loop alone for fetch, in processes
    of its own, as many pairs at once as fetch has consumers.
*/
#include "bench.h"
#include "base/clock.h"
#include "base/transport.h"
#include "ofi/ofi_bench.h"           //  the bare loop only

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
//  libfabric itself only for the bare loop, over ofi_bench.h's raw objects:
//  with report.c's fi_version, the one place outside transports/ofi that
//  names it
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define FAB_POOL 256
#define FAB_DEPTH 16

//  Both loops use the ofi transport through the seam; only the bare loop
//  reaches under it (ofi_bench.h), on the same channel.

typedef struct {
    uint64_t block;
    uint8_t *pool;
    pk_fabric_t *fabric;
    pk_channel_t *ch;
} s_fab_side_t;

static int
s_fab_open(s_fab_side_t *side, uint64_t block, uint32_t blocks, bool expose)
{
    char err[PK_ERRLEN];
    int rc;
    side->block = block;
    side->pool = aligned_alloc(4096, blocks * block);
    if (!side->pool)
        return -ENOMEM;
    memset(side->pool, expose ? 0 : 0x5a, blocks * block);
    pk_fabric_config_t config = { "tcp", "127.0.0.1", 5.0, 0, false };
    side->fabric = pk_fabric_open(pk_transport_find("ofi"), &config, side->pool, blocks, block,
                                  &rc, err);
    if (side->fabric)
        side->ch = pk_channel_new(side->fabric, expose, &rc, err);
    if (!side->fabric || !side->ch) {
        fprintf(stderr, "p2pkv-bench: %s\n", err);
        return rc;
    }
    return 0;
}

static void
s_fab_close(s_fab_side_t *side)
{
    if (side->ch)
        pk_channel_close(&side->ch);
    if (side->fabric)
        pk_fabric_close(&side->fabric);
    free(side->pool);
}

static void
s_fab_count(void *arg, uint64_t tid, bool ok, uint64_t landed)
{
    int *n = arg;
    *n += ok ? 1 : 1000000;
}

//  One batch through write_blocks; returns 0 when it completed and landed.
static int
s_fab_transport(s_fab_side_t *w, s_fab_side_t *t, uint64_t round, const uint32_t *local,
                const uint32_t *remote, size_t n)
{
    pk_transport_t tr = pk_channel_transport(w->ch);
    if (tr.write_blocks(tr.self, round, local, remote, n) <= 0)
        return -EIO;
    int done = 0;
    while (done == 0) {
        if (t)
            pk_channel_progress(t->ch);
        tr.poll(tr.self, s_fab_count, &done);
    }
    return done == 1 ? 0 : -EIO;
}

//  The same batch as a bare loop: one fi_writedata per run of `run`
//  blocks (1: one per block; more: the merged writes write_blocks makes of
//  a contiguous layout, which is then what remote[] must be).  yield: an
//  empty look gives the core away, as the server's writing actors do, so
//  that many writers at once share two cores as fetch's servers would.
static int
s_fab_raw(s_fab_side_t *w, s_fab_side_t *t, uint64_t round, const uint32_t *local,
          const uint32_t *remote, size_t n, size_t run, bool yield)
{
    pk_ofi_raw_t raw;
    if (pk_ofi_bench_raw(w->ch, &raw) != 0)
        return -ENOTCONN;
    struct fi_context ctx[FAB_DEPTH];
    size_t posted = 0, completed = 0, inflight = 0;
    size_t nw = (n + run - 1) / run;
    while (completed < nw) {
        while (posted < nw && inflight < FAB_DEPTH) {
            size_t first = posted * run, len = n - first < run ? n - first : run;
            uint64_t imm = ((round & PK_OFI_TAG_MASK) << 12) | len;
            ssize_t rc = fi_writedata(raw.ep, raw.base + local[first] * raw.block_len,
                                      raw.block_len * len, raw.desc, imm, raw.peer,
                                      raw.remote_base + remote[first] * raw.block_len, raw.key,
                                      &ctx[posted % FAB_DEPTH]);
            if (rc == -FI_EAGAIN)
                break;
            if (rc)
                return (int) rc;
            posted++;
            inflight++;
        }
        struct fi_cq_data_entry e[16];
        ssize_t got = fi_cq_read(raw.cq, e, 16);
        if (got > 0) {
            completed += (size_t) got;
            inflight -= (size_t) got;
        }
        else if (got == -FI_EAVAIL)
            return -EIO;
        else if (yield)
            sched_yield();
        if (t)
            pk_channel_progress(t->ch);
    }
    return 0;
}

//  Wires a channel to the other process: exchange address blobs.
static int
s_fab_wire(pk_channel_t *ch, int in, int out, bool send_first)
{
    char err[PK_ERRLEN];
    int rc = send_first ? pk_channel_send_blob_fd(ch, out) : pk_channel_connect_fd(ch, in, err);
    if (rc == 0)
        rc = send_first ? pk_channel_connect_fd(ch, in, err) : pk_channel_send_blob_fd(ch, out);
    if (rc)
        fprintf(stderr, "p2pkv-bench: cannot wire the two processes' channels\n");
    return rc;
}

//  The target: progress until the writer closes its pipe.
static void __attribute__((noreturn))
s_fab_target(uint64_t block, uint32_t blocks, int in, int out)
{
    s_fab_side_t t = { 0 };
    if (s_fab_open(&t, block, blocks, true) || s_fab_wire(t.ch, in, out, true))
        _exit(2);
    //  An empty look gives the core away, as a consumer of the library
    //  does: where the scheduler put both processes on one core, a target
    //  that never yielded took its whole time slices from the writer, and
    //  every figure of a row fell to about 0.5 GB/s (64 KiB x 32, two runs
    //  in three once).
    struct pollfd pfd = { in, POLLIN, 0 };
    for (unsigned i = 0;; i++) {
        if (pk_channel_progress(t.ch) == 0)
            sched_yield();
        if (i % 4096 == 0 && poll(&pfd, 1, 0) > 0)
            break;
    }
    s_fab_close(&t);
    _exit(0);
}

//  A writer here and its target in a child, wired.
typedef struct {
    s_fab_side_t w;
    pid_t pid;
    int down, up;
    uint64_t round;
} s_fab_pair_t;

static int
s_pair_open(s_fab_pair_t *p, uint64_t block, uint32_t blocks)
{
    memset(p, 0, sizeof *p);
    p->down = p->up = -1;       //  closable whatever fails below
    int down[2], up[2], rc;
    if (pipe(down))
        return -errno;
    if (pipe(up)) {
        rc = -errno;
        goto close_down;
    }
    p->pid = pkb_fork();
    if (p->pid < 0) {
        rc = -errno;
        goto close_up;
    }
    if (p->pid == 0) {
        close(down[1]);
        close(up[0]);
        s_fab_target(block, blocks, down[0], up[1]);
    }
    close(down[0]);
    close(up[1]);
    p->down = down[1];
    p->up = up[0];
    p->round = 1;
    rc = s_fab_open(&p->w, block, blocks, false);
    if (rc == 0)
        rc = s_fab_wire(p->w.ch, p->up, p->down, false);
    if (rc == 0)        //  connection warm-up
        rc = s_fab_transport(&p->w, NULL, p->round++, (uint32_t[]) { 0 }, (uint32_t[]) { 0 }, 1);
    return rc;

close_up:
    close(up[0]);
    close(up[1]);
close_down:
    close(down[0]);
    close(down[1]);
    return rc;
}

static void
s_pair_close(s_fab_pair_t *p)
{
    s_fab_close(&p->w);
    if (p->down >= 0)
        close(p->down);     //  the target's cue to stop
    if (p->up >= 0)
        close(p->up);
    if (p->pid > 0)
        pkb_reap(p->pid, 10);
}

typedef enum { S_RAW, S_MERGED, S_OURS } s_way_t;

//  GB/s of one way: at least `count` batches and at least `secs` seconds.
//  A count alone made a 64 KiB x 32 figure 10-20 ms of writes, and the raw
//  figure beside a fetch swung 2-5 GB/s from one repetition to the next.
static int
s_time(s_fab_pair_t *p, s_way_t way, const uint32_t *local, const uint32_t *remote, size_t n,
       int count, double secs, double *gbps)
{
    size_t run = PK_OFI_MAX_WRITE_BYTES / p->w.block;
    if (run == 0)
        run = 1;
    double t0 = pk_clock_monotonic(), t = t0;
    int done = 0;
    while (done < count || t - t0 < secs) {
        int rc = way == S_OURS ? s_fab_transport(&p->w, NULL, p->round++, local, remote, n)
                 : s_fab_raw(&p->w, NULL, p->round++, local, remote, n,
                             way == S_MERGED ? run : 1, false);
        if (rc)
            return rc;
        done++;
        t = pk_clock_monotonic();
    }
    *gbps = (double) (n * p->w.block) * (double) done / (t - t0) / 1e9;
    return 0;
}

static int
s_batches_per_rep(uint64_t bytes, bool quick)
{
    uint64_t want = quick ? 16u << 20 : 64u << 20;
    uint64_t k = want / bytes;
    return k < 16 ? 16 : (int) k;
}

//  The shortest timed run of one way (seconds).
#define S_SECS(quick) ((quick) ? 0.05 : 0.2)

//  One row: R repetitions of raw, merged (contiguous) and ours, interleaved.
static int
s_fab_row(s_fab_pair_t *p, pkb_report_t *rep, const pkb_opts_t *o, size_t n, bool scattered,
          const uint32_t *local, const uint32_t *remote)
{
    int reps = o->reps ? o->reps : o->quick ? 3 : 5;
    double g[3][PKB_MAX_REPS], ratio[2][PKB_MAX_REPS];
    uint64_t bytes = n * p->w.block;
    int count = s_batches_per_rep(bytes, o->quick);
    for (int r = 0; r < reps; r++) {
        for (int way = S_RAW; way <= S_OURS; way++) {
            if (way == S_MERGED && scattered)
                continue;
            int rc = s_time(p, (s_way_t) way, local, remote, n, count, S_SECS(o->quick),
                            &g[way][r]);
            if (rc)
                return rc;
        }
        ratio[0][r] = g[S_OURS][r] / g[S_RAW][r];
        ratio[1][r] = scattered ? 0 : g[S_OURS][r] / g[S_MERGED][r];
    }
    pkb_fig_t raw = pkb_fig(g[S_RAW], (size_t) reps), ours = pkb_fig(g[S_OURS], (size_t) reps);
    pkb_fig_t merged = scattered ? (pkb_fig_t) { 0 } : pkb_fig(g[S_MERGED], (size_t) reps);
    pkb_fig_t r0 = pkb_fig(ratio[0], (size_t) reps);
    pkb_fig_t r1 = scattered ? (pkb_fig_t) { 0 } : pkb_fig(ratio[1], (size_t) reps);
    char a[48], b[48], c[48], d[48], e[48];
    printf("  %7lluK %6zu %-10s %-20s %-20s %-20s %-18s %-18s\n",
           (unsigned long long) (p->w.block >> 10), n, scattered ? "scattered" : "contiguous",
           pkb_fig_str(raw, "%.2f", a, sizeof a), pkb_fig_str(merged, "%.2f", b, sizeof b),
           pkb_fig_str(ours, "%.2f", c, sizeof c), pkb_fig_str(r0, "%.2f", d, sizeof d),
           pkb_fig_str(r1, "%.2f", e, sizeof e));
    fflush(stdout);
    json_t *row = pkb_report_row(rep);
    json_object_set_new(row, "block_size", json_integer((json_int_t) p->w.block));
    json_object_set_new(row, "batch", json_integer((json_int_t) n));
    json_object_set_new(row, "layout", json_string(scattered ? "scattered" : "contiguous"));
    json_object_set_new(row, "repetitions", json_integer(reps));
    json_object_set_new(row, "raw_gbps", pkb_fig_json(raw));
    json_object_set_new(row, "raw_merged_gbps", pkb_fig_json(merged));
    json_object_set_new(row, "ours_gbps", pkb_fig_json(ours));
    json_object_set_new(row, "ours_over_raw", pkb_fig_json(r0));
    json_object_set_new(row, "ours_over_raw_merged", pkb_fig_json(r1));
    if (n == 32 && !scattered) {
        pkb_report_point(rep, "raw fi_writedata, 32 per batch", p->w.block, raw.med);
        pkb_report_point(rep, "raw merged, 32 contiguous", p->w.block, merged.med);
        pkb_report_point(rep, "write_blocks, 32 contiguous", p->w.block, ours.med);
    }
    return 0;
}

static int
s_fab_size(pkb_report_t *rep, const pkb_opts_t *o, uint64_t block, const pkb_list_t *batches,
           bool *header)
{
    uint32_t local[FAB_POOL], contiguous[FAB_POOL], scattered[FAB_POOL];
    for (uint32_t i = 0; i < FAB_POOL; i++) {
        local[i] = i;
        contiguous[i] = i;
        scattered[i] = (i * 101) % FAB_POOL;      //  no two neighbours adjacent
    }
    s_fab_pair_t p;
    int rc = s_pair_open(&p, block, FAB_POOL);
    if (rc == 0 && *header) {
        *header = false;
        char line[256];
        pk_fabric_describe(p.w.fabric, line, sizeof line);
        printf("  %s\n", line);
        printf("  %8s %6s %-10s %-20s %-20s %-20s %-18s %-18s\n", "block", "batch", "layout",
               "raw GB/s", "raw merged GB/s", "ours GB/s", "ours/raw", "ours/merged");
    }
    for (size_t bi = 0; rc == 0 && bi < batches->n; bi++)
        for (int layout = 0; rc == 0 && layout < 2; layout++) {
            size_t n = batches->v[bi];
            if (n == 1 && layout == 1)
                continue;
            rc = s_fab_row(&p, rep, o, n, layout, local, layout ? scattered : contiguous);
        }
    s_pair_close(&p);
    return rc;
}

int
pkb_fabric(const pkb_opts_t *o)
{
    pkb_list_t sizes = { 5, { 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20 } };
    pkb_list_t batches = { 3, { 1, 32, 256 } };
    if (o->quick) {
        sizes = (pkb_list_t) { 3, { 16 << 10, 64 << 10, 1 << 20 } };
        batches = (pkb_list_t) { 2, { 1, 32 } };
    }
    if (o->block_sizes.n)
        sizes = o->block_sizes;
    if (o->batches.n)
        batches = o->batches;
    printf("fabric: tcp provider on 127.0.0.1, writer and target in two processes: bare "
           "fi_writedata loop (depth %d, one write per block; merged: one per run of up to "
           "%u bytes, as write_blocks merges contiguous blocks) vs write_blocks; GB/s and "
           "ratios median [min..max] of %d repetitions\n", FAB_DEPTH, PK_OFI_MAX_WRITE_BYTES,
           o->reps ? o->reps : o->quick ? 3 : 5);
    pkb_report_t *rep = pkb_report_new(o, "tcp");
    bool header = true;
    int rc = 0;
    for (size_t si = 0; rc == 0 && si < sizes.n; si++)
        rc = s_fab_size(rep, o, sizes.v[si], &batches, &header);
    if (rc == 0)
        rc = pkb_report_finish(rep);
    else
        fprintf(stderr, "p2pkv-bench fabric: %s\n", strerror(rc < 0 ? -rc : rc));
    pkb_report_destroy(&rep);
    return rc ? 1 : 0;
}

//  --------------------------------------------------------------------------
//  For fetch: the bare loop in `pairs` writer processes of their own (each
//  forks its target), timed together (crowd.c), beside fetch's as many
//  consumers.  Pools are one batch per side (64 pairs of 64 KiB x 32:
//  256 MiB in all, not 64 x 2 x 16 MiB).

typedef struct {
    uint64_t block;
    uint32_t batch;
} s_raw_arg_t;

typedef struct {
    s_fab_pair_t p;
    uint32_t batch;
    uint32_t idx[FAB_POOL];
} s_raw_t;

static void *
s_raw_open(void *arg)
{
    const s_raw_arg_t *a = arg;
    s_raw_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->batch = a->batch;
    for (uint32_t i = 0; i < a->batch; i++)
        self->idx[i] = i;
    if (s_pair_open(&self->p, a->block, a->batch) != 0) {
        s_pair_close(&self->p);
        free(self);
        return NULL;
    }
    return self;
}

static int64_t
s_raw_step(void *state)
{
    s_raw_t *self = state;
    int rc = s_fab_raw(&self->p.w, NULL, self->p.round++, self->idx, self->idx, self->batch,
                       1, true);
    return rc ? rc : (int64_t) (self->batch * self->p.w.block);
}

static void
s_raw_close(void *state)
{
    s_raw_t *self = state;
    s_pair_close(&self->p);
    free(self);
}

int
pkb_fabric_raw_gbps(uint64_t block, size_t batch, size_t pairs, bool quick, double *gbps)
{
    static const pkb_crowd_ops_t ops = { s_raw_open, s_raw_step, s_raw_close };
    s_raw_arg_t arg = { block, (uint32_t) (batch > FAB_POOL ? FAB_POOL : batch) };
    return pkb_crowd_gbps(&ops, &arg, pairs, PKB_CROWD_WARM(quick), PKB_CROWD_SECS(quick),
                          gbps);
}
