/*  p2pkv-bench: benchmarks, one subcommand per component.

    Each reports ratios measured within one run (the two sides interleaved,
    medians of several repetitions), because absolute times from different
    runs on a shared 2-core machine are not comparable.

      codec   decode+validate of a 65,536-key fetch vs jansson's json_loadb
      role    the server role in process: keys per second, and memory per
              10,000 live requests
      fabric  a bare fi_writedata loop against write_blocks over the tcp
              provider on 127.0.0.1, GB/s side by side
*/
#include "base/clock.h"
#include "base/keymap.h"
#include "base/transport.h"
#include "ofi/ofi_bench.h"           //  the bare loop only: fabric
#include "wire/protocol.h"
#include "roles/server_role.h"
#include "sim/memtransport.h"
#include "base/version.h"

#include <malloc.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
//  libfabric itself only for fabric's bare loop, over ofi_bench.h's raw objects:
//  the one place outside transports/ofi that names it
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int
s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static double
s_median(double *v, int n)
{
    qsort(v, (size_t) n, sizeof *v, s_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

//  A fetch of n distinct random 32-byte keys (64 hex chars) and a shuffled
//  permutation of block indexes, as a consumer would send it.
static char *
s_make_fetch(size_t n, size_t *len_p)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_FETCH);
    pk_key_t *keys = malloc(n * sizeof *keys);
    uint8_t *bytes = malloc(n * 32);
    uint32_t *idx = malloc(n * sizeof *idx);
    randombytes_buf(bytes, n * 32);
    for (size_t i = 0; i < n; i++) {
        keys[i] = pk_key_make(bytes + 32 * i, 32);
        idx[i] = (uint32_t) i;
    }
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = randombytes_uniform((uint32_t) i + 1);
        uint32_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    uint8_t se[PK_EPOCH_LEN], te[PK_EPOCH_LEN];
    randombytes_buf(se, sizeof se);
    randombytes_buf(te, sizeof te);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, "bench-request");
    pk_msg_set_keys(m, keys, n);
    pk_msg_set_block_indexes(m, idx, n);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, 1);
    pk_msg_set_epochs(m, se, te);
    char *text = NULL;
    char err[PK_ERRLEN];
    if (pk_msg_encode(m, &text, len_p, err) != 0) {
        fprintf(stderr, "p2pkv-bench: cannot encode the fetch: %s\n", err);
        exit(2);
    }
    pk_msg_destroy(&m);
    free(keys);
    free(bytes);
    free(idx);
    return text;
}

static int
s_bench_codec(int reps)
{
    size_t len;
    char *text = s_make_fetch(PK_MAX_LIST, &len);
    double *tj = calloc((size_t) reps, sizeof *tj);
    double *tp = calloc((size_t) reps, sizeof *tp);
    char err[PK_ERRLEN];
    for (int r = -1; r < reps; r++) {       //  r = -1 warms up both paths
        double t0 = pk_clock_monotonic();
        json_error_t jerr;
        json_t *root = json_loadb(text, len, 0, &jerr);
        double t1 = pk_clock_monotonic();
        json_decref(root);
        double t2 = pk_clock_monotonic();
        pk_msg_t *msg = NULL;
        if (pk_msg_decode(text, len, &msg, err) != 0 || !root) {
            fprintf(stderr, "p2pkv-bench: decode failed: %s\n", err);
            return 2;
        }
        double t3 = pk_clock_monotonic();
        pk_msg_destroy(&msg);
        if (r >= 0) {
            tj[r] = t1 - t0;
            tp[r] = t3 - t2;
        }
    }
    double j = s_median(tj, reps), p = s_median(tp, reps);
    printf("codec: fetch of %d keys (64 hex chars each), %zu bytes, median of %d runs\n",
           PK_MAX_LIST, len, reps);
    printf("  json_loadb alone            %8.2f ms\n", j * 1e3);
    printf("  pk_msg_decode (parse+check) %8.2f ms\n", p * 1e3);
    printf("  ratio decode/json_loadb     %8.2f  (target <= 1.50)\n", p / j);
    free(tj);
    free(tp);
    free(text);
    return 0;
}


//  --------------------------------------------------------------------------
//  role: lookup 32 keys (all hit) -> serve -> fetch -> complete -> collect ->
//  terminal fetch, for many requests, 64 requests per tick as an actor would
//  batch them.  The store is a small in-memory table (64 requests' worth of
//  distinct keys, cache-resident) and the transport the in-memory one, so
//  what is measured is the role's own cost; scripts/bench-seed-role gives
//  the seed's role the same store.

#define ROLE_KEYS 32
#define ROLE_BATCH 64
#define ROLE_DISTINCT 64
#define ROLE_KEYPOOL (ROLE_KEYS * ROLE_DISTINCT)

typedef struct {
    pk_keymap_t table;
    uint64_t next_job;
    size_t sent, results;
} s_role_world_t;

static double
s_role_now(void *arg)
{
    return 1000.0;
}

static void
s_role_send(void *arg, const pk_msg_t *m)
{
    ((s_role_world_t *) arg)->sent++;
}

static pk_lookup_result_t
s_role_lookup(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    pk_keymap_entry_t *e = pk_keymap_find(&((s_role_world_t *) arg)->table, key);
    return e ? PK_LOOKUP_HIT : PK_LOOKUP_MISS;
}

static int
s_role_pin(void *arg, const pk_lookup_ctx_t *ctx, const pk_key_t *keys, size_t n,
           uint64_t *job, uint32_t *blocks, bool *pinned)
{
    s_role_world_t *w = arg;
    *job = w->next_job++;
    for (size_t i = 0; i < n; i++) {
        blocks[i] = (uint32_t) pk_keymap_find(&w->table, &keys[i])->b;
        pinned[i] = true;
    }
    return 0;
}

static void
s_role_bracket(void *arg, const pk_lookup_ctx_t *ctx)
{
}

static void
s_role_result(void *arg, uint64_t job, bool success)
{
    ((s_role_world_t *) arg)->results++;
}

static size_t
s_heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

//  Memory: 10,000 requests held live (lookups answered and pinned, no
//  fetch yet), measured as heap growth.
static size_t
s_role_memory(pk_server_role_t *role, const pk_key_t *pool, pk_server_role_state_t *st)
{
    size_t before = s_heap_in_use();
    for (long r = 0; r < 10000; r++) {
        char id[32];
        snprintf(id, sizeof id, "live-%ld", r);
        pk_server_role_on_lookup(role, id, &pool[(size_t) (r % ROLE_DISTINCT) * ROLE_KEYS],
                                 ROLE_KEYS, 1);
        if (r % ROLE_BATCH == ROLE_BATCH - 1)
            pk_server_role_serve(role);
    }
    pk_server_role_serve(role);
    size_t after = s_heap_in_use();
    pk_server_role_state(role, st);
    return after - before;
}

static int
s_bench_role(long requests)
{
    s_role_world_t w = { PK_KEYMAP_INIT, 1, 0, 0 };
    uint8_t *bytes = malloc(ROLE_KEYPOOL * 32);
    pk_key_t *pool = malloc(ROLE_KEYPOOL * sizeof *pool);
    uint32_t *idx = malloc(ROLE_KEYS * sizeof *idx);
    randombytes_buf(bytes, ROLE_KEYPOOL * 32);
    for (size_t i = 0; i < ROLE_KEYPOOL; i++) {
        pool[i] = pk_key_make(bytes + 32 * i, 32);
        if (pk_keymap_put(&w.table, &pool[i], 0, i) < 0) {
            fprintf(stderr, "p2pkv-bench: out of memory\n");
            exit(2);
        }
    }
    for (uint32_t i = 0; i < ROLE_KEYS; i++)
        idx[i] = i;
    pk_memtransport_t *mem = pk_memtransport_new();
    pk_server_role_t *role = pk_server_role_new(
        "bench", NULL, (pk_clock_t) { &w, s_role_now }, (pk_sender_t) { &w, s_role_send },
        pk_memtransport_iface(mem),
        (pk_parent_t) { &w, s_role_lookup, s_role_pin, s_role_bracket, s_role_bracket,
                        s_role_result });
    char kv[ROLE_BATCH][32];
    long done = 0;
    double t0 = pk_clock_monotonic();
    while (done < requests) {
        int batch = requests - done < ROLE_BATCH ? (int) (requests - done) : ROLE_BATCH;
        for (int b = 0; b < batch; b++) {
            long r = done + b;
            snprintf(kv[b], sizeof kv[b], "req-%ld", r);
            const pk_key_t *keys = &pool[(size_t) (r % ROLE_DISTINCT) * ROLE_KEYS];
            pk_server_role_on_lookup(role, kv[b], keys, ROLE_KEYS, 1);
        }
        pk_server_role_serve(role);
        uint64_t first = pk_memtransport_next_tid(mem);
        for (int b = 0; b < batch; b++) {
            long r = done + b;
            const pk_key_t *keys = &pool[(size_t) (r % ROLE_DISTINCT) * ROLE_KEYS];
            pk_server_role_on_fetch(role, kv[b], keys, idx, ROLE_KEYS, 1);
        }
        uint64_t last = pk_memtransport_next_tid(mem);
        for (uint64_t tid = first; tid < last; tid++)
            pk_memtransport_complete(mem, &tid, 1, true);
        pk_server_role_collect(role);
        for (int b = 0; b < batch; b++)
            pk_server_role_on_fetch(role, kv[b], NULL, NULL, 0, 2);
        done += batch;
    }
    double t1 = pk_clock_monotonic();
    pk_server_role_collect(role);
    pk_server_role_state_t st;
    pk_server_role_state(role, &st);
    if (w.results != (size_t) requests || st.requests || st.inflight || st.store_jobs) {
        fprintf(stderr, "p2pkv-bench: role scenario did not complete (%zu results)\n",
                w.results);
        return 2;
    }
    double keys_per_s = (double) requests * ROLE_KEYS / (t1 - t0);

    size_t held = s_role_memory(role, pool, &st);

    printf("role: %ld requests of %d keys (lookup all hit -> serve -> fetch -> complete -> "
           "collect -> terminal fetch), %d requests per tick\n", requests, ROLE_KEYS, ROLE_BATCH);
    printf("  %.2f million keys/s, %.0f requests/s\n", keys_per_s / 1e6,
           (double) requests / (t1 - t0));
    printf("  %zu live requests (looked up and pinned, %zu jobs) hold %.1f MiB: %.0f bytes each\n",
           st.requests, st.store_jobs, held / 1048576.0,
           (double) held / (double) st.requests);
    pk_server_role_destroy(&role);
    pk_memtransport_destroy(&mem);
    pk_keymap_fini(&w.table);
    free(bytes);
    free(pool);
    free(idx);
    return 0;
}

//  --------------------------------------------------------------------------
//  fabric: the same process pair (a writer, and a target in a child process
//  that progresses its channel all the time, over tcp on 127.0.0.1), the
//  same blocks, two ways: a bare loop posting one fi_writedata per block at
//  depth 16, and write_blocks (merging, splitting, its own depth).  A batch
//  counts as done when the writer's completions say so.  Each configuration
//  moves at least 256 MiB (or 64 batches) both ways, interleaved.

#define FAB_POOL 256
#define FAB_DEPTH 16

//  Both loops use the ofi transport through the seam; only the bare loop
//  reaches under it (ofi_bench.h), on the same channel.
static const pk_transport_ops_t *s_fab_ops;

typedef struct {
    uint8_t *pool;
    pk_fabric_t *fabric;
    pk_channel_t *ch;
} s_fab_side_t;

static int
s_fab_open(s_fab_side_t *side, uint64_t block, bool expose)
{
    char err[PK_ERRLEN];
    int rc;
    side->pool = aligned_alloc(4096, FAB_POOL * block);
    if (!side->pool)
        return -ENOMEM;
    memset(side->pool, expose ? 0 : 0x5a, FAB_POOL * block);
    s_fab_ops = pk_transport_find("ofi");
    rc = pk_transport_ops_check(s_fab_ops, PK_TRANSPORT_OPS_SIZE, err);
    if (rc) {
        fprintf(stderr, "p2pkv-bench: %s\n", err);
        return rc;
    }
    pk_fabric_config_t config = { "tcp", "127.0.0.1", 5.0 };
    side->fabric = s_fab_ops->fabric_open(&config, side->pool, FAB_POOL, block, &rc, err);
    if (side->fabric)
        side->ch = s_fab_ops->channel_new(side->fabric, expose, &rc, err);
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
        s_fab_ops->channel_close(&side->ch);
    if (side->fabric)
        s_fab_ops->fabric_close(&side->fabric);
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
    pk_transport_t tr = s_fab_ops->channel_transport(w->ch);
    if (tr.write_blocks(tr.self, round, local, remote, n) <= 0)
        return -EIO;
    int done = 0;
    while (done == 0) {
        if (t)
            s_fab_ops->channel_progress(t->ch);
        tr.poll(tr.self, s_fab_count, &done);
    }
    return done == 1 ? 0 : -EIO;
}

//  The same batch as a bare loop: one fi_writedata per block.
static int
s_fab_raw(s_fab_side_t *w, s_fab_side_t *t, uint64_t round, const uint32_t *local,
          const uint32_t *remote, size_t n)
{
    pk_ofi_raw_t raw;
    if (pk_ofi_bench_raw(w->ch, &raw) != 0)
        return -ENOTCONN;
    struct fi_context ctx[FAB_DEPTH];
    size_t posted = 0, completed = 0, inflight = 0;
    while (completed < n) {
        while (posted < n && inflight < FAB_DEPTH) {
            uint64_t imm = ((round & PK_OFI_TAG_MASK) << 12) | 1;
            ssize_t rc = fi_writedata(raw.ep, raw.base + local[posted] * raw.block_len,
                                      raw.block_len, raw.desc, imm, raw.peer,
                                      raw.remote_base + remote[posted] * raw.block_len, raw.key,
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
        if (t)
            s_fab_ops->channel_progress(t->ch);
    }
    return 0;
}

//  Wires a channel to the other process: exchange address blobs.
static int
s_fab_wire(pk_channel_t *ch, int in, int out, bool send_first)
{
    char err[PK_ERRLEN];
    const pk_transport_ops_t *o = s_fab_ops;
    int rc = send_first ? pk_channel_send_blob_fd(o, ch, out) : pk_channel_connect_fd(o, ch, in, err);
    if (rc == 0)
        rc = send_first ? pk_channel_connect_fd(o, ch, in, err) : pk_channel_send_blob_fd(o, ch, out);
    if (rc)
        fprintf(stderr, "p2pkv-bench: cannot wire the two processes' channels\n");
    return rc;
}

//  The target: progress until the writer closes its pipe.
static void __attribute__((noreturn))
s_fab_target(uint64_t block, int in, int out)
{
    s_fab_side_t t = { 0 };
    if (s_fab_open(&t, block, true) || s_fab_wire(t.ch, in, out, true))
        _exit(2);
    struct pollfd pfd = { in, POLLIN, 0 };
    for (unsigned i = 0;; i++) {
        s_fab_ops->channel_progress(t.ch);
        if (i % 4096 == 0 && poll(&pfd, 1, 0) > 0)
            break;
    }
    s_fab_close(&t);
    _exit(0);
}

//  only_block, only_batch: run just those (0: all).
static int
s_bench_fabric(uint64_t only_block, size_t only_batch)
{
    static const uint64_t sizes[] = { 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20 };
    static const size_t batches[] = { 1, 32, 256 };
    uint32_t local[FAB_POOL], contiguous[FAB_POOL], scattered[FAB_POOL];
    for (uint32_t i = 0; i < FAB_POOL; i++) {
        local[i] = i;
        contiguous[i] = i;
        scattered[i] = (i * 101) % FAB_POOL;      //  no two neighbours adjacent
    }
    printf("fabric: tcp provider on 127.0.0.1, writer and target in two processes, bare "
           "fi_writedata loop (depth %d, one write per block) vs write_blocks\n", FAB_DEPTH);
    uint64_t round = 1;
    bool header = true;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        if (only_block && sizes[si] != only_block)
            continue;
        int down[2], up[2];
        if (pipe(down) || pipe(up))
            return 2;
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0)
            return 2;
        if (pid == 0) {
            close(down[1]);
            close(up[0]);
            s_fab_target(sizes[si], down[0], up[1]);
        }
        close(down[0]);
        close(up[1]);
        s_fab_side_t w = { 0 };
        if (s_fab_open(&w, sizes[si], false) || s_fab_wire(w.ch, up[0], down[1], false))
            return 2;
        s_fab_side_t *t = NULL;
        if (header) {
            header = false;
            char line[256];
            s_fab_ops->fabric_describe(w.fabric, line, sizeof line);
            printf("  %s\n", line);
            printf("  %8s %6s %-10s %10s %10s %7s\n", "block", "batch", "layout", "raw GB/s",
                   "ours GB/s", "ratio");
        }
        s_fab_transport(&w, t, round++, local, contiguous, 1);       //  connection warm-up
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
            for (int layout = 0; layout < 2; layout++) {
                size_t n = batches[bi];
                if ((n == 1 && layout == 1) || (only_batch && n != only_batch))
                    continue;
                const uint32_t *remote = layout ? scattered : contiguous;
                uint64_t bytes = n * sizes[si];
                int reps = (int) ((256u << 20) / bytes);
                if (reps < 64)
                    reps = 64;
                double traw = 0, tours = 0;
                for (int r = 0; r < reps; r++) {
                    double t0 = pk_clock_monotonic();
                    if (s_fab_raw(&w, t, round++, local, remote, n))
                        return 2;
                    double t1 = pk_clock_monotonic();
                    if (s_fab_transport(&w, t, round++, local, remote, n))
                        return 2;
                    double t2 = pk_clock_monotonic();
                    traw += t1 - t0;
                    tours += t2 - t1;
                }
                double graw = bytes * reps / traw / 1e9, gours = bytes * reps / tours / 1e9;
                printf("  %7lluK %6zu %-10s %10.2f %10.2f %6.2fx\n",
                       (unsigned long long) (sizes[si] >> 10), n,
                       layout ? "scattered" : "contiguous", graw, gours, gours / graw);
                fflush(stdout);
            }
        }
        s_fab_close(&w);
        close(down[1]);         //  the target's cue to stop
        close(up[0]);
        waitpid(pid, NULL, 0);
    }
    return 0;
}

int
main(int argc, char *argv[])
{
    if (sodium_init() < 0)
        return 2;
    const char *what = argc > 1 ? argv[1] : "codec";
    int reps = argc > 2 ? atoi(argv[2]) : strcmp(what, "role") == 0 ? 200000 : 15;
    if (strcmp(what, "--help") == 0 || strcmp(what, "-h") == 0) {
        printf("usage: p2pkv-bench [codec [REPETITIONS] | role [REQUESTS] | fabric [BLOCK_KIB [BATCH]]]\n"
               "  codec  decode+validate of a 65,536-key fetch vs jansson's json_loadb\n"
               "  role   the server role in process: keys/s, memory per live request\n"
               "  fabric bare fi_writedata loop vs write_blocks over tcp on 127.0.0.1\n");
        return 0;
    }
    if (strcmp(what, "--version") == 0) {
        printf("p2pkv-bench %s\n", PK_VERSION);
        return 0;
    }
    if (reps < 1) {
        fprintf(stderr, "p2pkv-bench: repetitions must be a positive integer\n");
        return 2;
    }
    if (strcmp(what, "codec") == 0)
        return s_bench_codec(reps);
    if (strcmp(what, "role") == 0)
        return s_bench_role(reps);
    if (strcmp(what, "fabric") == 0) {
        //  fabric [BLOCK_KIB [BATCH]]: one block size, one batch size
        uint64_t kib = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
        size_t batch = argc > 3 ? (size_t) strtoull(argv[3], NULL, 10) : 0;
        static const uint64_t known[] = { 16, 64, 256, 1024, 2048 };
        bool ok = kib == 0;
        for (size_t i = 0; i < 5; i++)
            ok = ok || kib == known[i];
        if (!ok || (batch && batch != 1 && batch != 32 && batch != 256)) {
            fprintf(stderr, "p2pkv-bench fabric: BLOCK_KIB is one of 16 64 256 1024 2048, "
                    "BATCH one of 1 32 256\n");
            return 2;
        }
        return s_bench_fabric(kib << 10, batch);
    }
    fprintf(stderr, "p2pkv-bench: unknown benchmark '%s' (see --help)\n", what);
    return 2;
}
