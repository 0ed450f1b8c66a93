/*  role: lookup 32 keys (all hit) -> serve -> fetch -> complete -> collect ->
    terminal fetch, for many requests, 64 requests per tick as an actor would
    batch them.  The store is a small in-memory table (64 requests' worth of
    distinct keys, cache-resident) and the transport the in-memory one, so
    what is measured is the role's own cost; scripts/bench-seed-role gives
    the seed's role the same store.  */
#include "bench.h"
#include "base/clock.h"
#include "base/keymap.h"
#include "roles/server_role.h"
#include "sim/memtransport.h"

#include <errno.h>
#include <malloc.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


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
           uint64_t *job, uint32_t *blocks, bool *pinned, uint8_t *why)
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
s_role_run(long requests, double *kps, size_t *held_p, size_t *live_p)
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
            exit(1);
        }
    }
    for (uint32_t i = 0; i < ROLE_KEYS; i++)
        idx[i] = i;
    pk_memtransport_t *mem = pk_memtransport_new();
    pk_server_role_t *role = pk_server_role_new(
        "bench", NULL, (pk_clock_t) { &w, s_role_now }, (pk_sender_t) { &w, s_role_send },
        pk_memtransport_iface(mem),
        (pk_parent_t) { .self = &w, .lookup = s_role_lookup, .create_store_job = s_role_pin,
                        .on_new_request = s_role_bracket, .on_request_finished = s_role_bracket,
                        .store_result = s_role_result });
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
        return -EIO;
    }
    *kps = (double) requests * ROLE_KEYS / (t1 - t0);
    if (held_p) {
        *held_p = s_role_memory(role, pool, &st);
        *live_p = st.requests;
    }
    pk_server_role_destroy(&role);
    pk_memtransport_destroy(&mem);
    pk_keymap_fini(&w.table);
    free(bytes);
    free(pool);
    free(idx);
    return 0;
}

int
pkb_role(const pkb_opts_t *o)
{
    long requests = o->requests ? (long) o->requests : o->quick ? 20000 : 200000;
    int reps = o->reps ? o->reps : o->quick ? 3 : 5;
    double kps[PKB_MAX_REPS], rps[PKB_MAX_REPS];
    size_t held = 0, live = 0;
    for (int r = 0; r < reps; r++) {
        if (s_role_run(requests, &kps[r], r == 0 ? &held : NULL, &live))
            return 1;
        kps[r] /= 1e6;
        rps[r] = kps[r] * 1e6 / ROLE_KEYS;
    }
    pkb_fig_t k = pkb_fig(kps, (size_t) reps), q = pkb_fig(rps, (size_t) reps);
    double each = live ? (double) held / (double) live : 0;
    char a[64], b[64];
    printf("role: %ld requests of %d keys (lookup all hit -> serve -> fetch -> complete -> "
           "collect -> terminal fetch), %d requests per tick; median [min..max] of %d runs\n",
           requests, ROLE_KEYS, ROLE_BATCH, reps);
    printf("  %-26s %-26s %-16s %-18s\n", "million keys/s", "requests/s", "live requests",
           "bytes per request");
    printf("  %-26s %-26s %-16zu %-18.0f\n", pkb_fig_str(k, "%.2f", a, sizeof a),
           pkb_fig_str(q, "%.0f", b, sizeof b), live, each);
    pkb_report_t *rep = pkb_report_new(o, NULL);
    json_t *row = pkb_report_row(rep);
    json_object_set_new(row, "requests", json_integer(requests));
    json_object_set_new(row, "keys_per_request", json_integer(ROLE_KEYS));
    json_object_set_new(row, "requests_per_tick", json_integer(ROLE_BATCH));
    json_object_set_new(row, "repetitions", json_integer(reps));
    json_object_set_new(row, "million_keys_per_s", pkb_fig_json(k));
    json_object_set_new(row, "requests_per_s", pkb_fig_json(q));
    json_object_set_new(row, "live_requests", json_integer((json_int_t) live));
    json_object_set_new(row, "bytes_per_live_request", json_real(each));
    int rc = pkb_report_finish(rep);
    pkb_report_destroy(&rep);
    return rc ? 1 : 0;
}
