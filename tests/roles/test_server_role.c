/*  test_server_role.c: the server role against doc/replay.md, through its
    C API.

    A harness wires one role to a virtual clock, the in-memory transport and
    a scripted store, and writes every effect as one short text line into a
    log; each test drives events and asserts the exact lines they produced.
    Every test ends in s_settle, which lets the store-job timeout pass twice
    and asserts that no per-request state is left and every lookup's
    on_new_request got its on_request_finished.
*/
#include "base/keymap.h"
#include "wire/protocol.h"
#include "roles/server_role.h"
#include "testutil.h"
#include "sim/memtransport.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

typedef struct {
    double now;
    pk_memtransport_t *mem;
    pk_transport_t inner;
    pk_server_role_t *role;
    pk_keymap_t table;          //  key -> a: pk_lookup_result_t, b: block
    pk_keymap_t unpinnable;     //  keys the store loses between lookup and pin
    uint64_t next_job;
    int opened, finished;
    int kicks;                  //  parent.kick: once per serve that parked keys
    char log[64][160];
    int nlog;
    uint8_t arena[4096];        //  bytes of every key made by K()
    size_t used;
    char sums[256];                 //  the last lookup_resp's checksums ("": none)
    char reasons[128];              //  and its miss reasons ("-": none)
} s_harness_t;

static s_harness_t *H;

static void
s_log(const char *fmt, ...)
{
    ck_assert_int_lt(H->nlog, 64);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(H->log[H->nlog++], sizeof H->log[0], fmt, ap);
    va_end(ap);
}

//  A key from hex, living as long as the harness.
static pk_key_t
K(const char *hex)
{
    size_t n = strlen(hex) / 2;
    ck_assert_uint_le(H->used + n, sizeof H->arena);
    ck_assert_int_eq(pk_hex_decode(hex, strlen(hex), H->arena + H->used), (int) n);
    pk_key_t key = pk_key_make(H->arena + H->used, n);
    H->used += n;
    return key;
}

static double
s_now(void *arg)
{
    return H->now;
}

static void
s_send(void *arg, const pk_msg_t *m)
{
    char buf[96] = "";
    if (m->type == PK_MSG_LOOKUP_RESP) {
        snprintf(H->sums, sizeof H->sums, "%s",
                 (m->present & PK_BIT(PK_F_CHECKSUMS)) ? m->checksums : "");
        snprintf(H->reasons, sizeof H->reasons, "%s",
                 (m->present & PK_BIT(PK_F_REASONS)) ? m->reasons : "-");
        for (size_t i = 0; i < m->keys.count && i < 64; i++)
            buf[i] = m->hits[i] ? '1' : '0';
        s_log("lookup_resp %s round=%llu hits=%s", m->kv_request_id,
              (unsigned long long) m->round_seq, buf);
    }
    else if (m->type == PK_MSG_TRANSFER_DONE)
        s_log("transfer_done %s round=%llu %s landing=%llu", m->kv_request_id,
              (unsigned long long) m->round_seq, m->success ? "ok" : "failed",
              (unsigned long long) m->landing);
    else if (m->type == PK_MSG_ABORT_ACK)
        s_log("abort_ack %s round=%llu landing=%llu", m->kv_request_id,
              (unsigned long long) m->round_seq, (unsigned long long) m->landing);
    else if (m->type == PK_MSG_GET_RESP) {
        for (size_t i = 0; i < m->keys.count && i < 64; i++)
            buf[i] = m->hits[i] ? '1' : '0';
        s_log("get_resp %s round=%llu hits=%s %s landing=%llu sources=%s", m->kv_request_id,
              (unsigned long long) m->round_seq, buf, m->success ? "ok" : "failed",
              (unsigned long long) m->landing,
              (m->present & PK_BIT(PK_F_SOURCES)) ? m->sources : "-");
    }
    else
        s_log("send %s", pk_msg_type_name(m->type));
}

static int64_t
s_write(void *arg, uint64_t round, const uint32_t *local, const uint32_t *remote, size_t n)
{
    int64_t tid = H->inner.write_blocks(H->inner.self, round, local, remote, n);
    char pairs[96] = "";
    size_t at = 0;
    for (size_t i = 0; i < n && at < sizeof pairs - 16; i++)
        at += (size_t) snprintf(pairs + at, sizeof pairs - at, "%s%u>%u", i ? "," : "",
                                local[i], remote[i]);
    if (tid > 0)
        s_log("write %lld round=%llu %s", (long long) tid, (unsigned long long) round, pairs);
    else
        s_log("write refused round=%llu %s", (unsigned long long) round, pairs);
    return tid;
}

//  A lend (capability lend): a transfer of the in-memory transport, as a
//  write is, logged apart.
static int64_t
s_lend(void *arg, uint64_t round, const uint32_t *local, const uint32_t *remote, size_t n)
{
    int64_t tid = H->inner.write_blocks(H->inner.self, round, local, remote, n);
    char pairs[96] = "";
    size_t at = 0;
    for (size_t i = 0; i < n && at < sizeof pairs - 16; i++)
        at += (size_t) snprintf(pairs + at, sizeof pairs - at, "%s%u>%u", i ? "," : "",
                                local[i], remote[i]);
    s_log("lend %lld round=%llu %s", (long long) tid, (unsigned long long) round, pairs);
    return tid;
}

static void
s_poll(void *arg, pk_transfer_fn *each, void *each_arg)
{
    H->inner.poll(H->inner.self, each, each_arg);
}

static size_t
s_cancel(void *arg, const uint64_t *tids, size_t n, pk_cancel_mode_t mode, uint64_t *still)
{
    char list[64] = "";
    size_t at = 0;
    for (size_t i = 0; i < n && at < sizeof list - 24; i++)
        at += (size_t) snprintf(list + at, sizeof list - at, "%s%llu", i ? "," : "",
                                (unsigned long long) tids[i]);
    s_log("cancel %s %s", mode == PK_CANCEL_WAIT ? "wait" : "immediate", list);
    return H->inner.cancel(H->inner.self, tids, n, mode, still);
}

static pk_lookup_result_t
s_lookup(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    pk_keymap_entry_t *e = pk_keymap_find(&H->table, key);
    return e ? (pk_lookup_result_t) e->a : PK_LOOKUP_MISS;
}

static int
s_pin(void *arg, const pk_lookup_ctx_t *ctx, const pk_key_t *keys, size_t n, uint64_t *job,
      uint32_t *blocks, bool *pinned, uint8_t *why)
{
    *job = H->next_job++;
    int npinned = 0;
    for (size_t i = 0; i < n; i++) {
        pk_keymap_entry_t *e = pk_keymap_find(&H->table, &keys[i]);
        blocks[i] = e ? (uint32_t) e->b : 0;
        pinned[i] = !pk_keymap_find(&H->unpinnable, &keys[i]);
        //  keys beginning 99 are beyond the consumer's pin quota
        if (keys[i].len && keys[i].bytes[0] == 0x99) {
            pinned[i] = false;
            if (why)
                why[i] = PK_MISS_QUOTA;
        }
        npinned += pinned[i];
    }
    s_log("pin %s round=%llu job=%llu n=%zu pinned=%d", ctx->kv_request_id,
          (unsigned long long) ctx->round_seq, (unsigned long long) *job, n, npinned);
    return 0;
}

static void
s_open(void *arg, const pk_lookup_ctx_t *ctx)
{
    H->opened++;
    s_log("open %s round=%llu", ctx->kv_request_id, (unsigned long long) ctx->round_seq);
}

static void
s_finished(void *arg, const pk_lookup_ctx_t *ctx)
{
    H->finished++;
    s_log("finished %s round=%llu", ctx->kv_request_id, (unsigned long long) ctx->round_seq);
}

static void
s_result(void *arg, uint64_t job, bool success)
{
    s_log("result %llu %s", (unsigned long long) job, success ? "ok" : "failed");
}

//  A pinned block's checksum, as the store keeps them: here 0x1000 + block.
static int
s_sums(void *arg, const uint32_t *blocks, size_t n, uint64_t *sums)
{
    for (size_t i = 0; i < n; i++)
        sums[i] = 0x1000 + blocks[i];
    return 0;
}

//  Why a miss is one, as the store would say: keys beginning ee were
//  evicted, 77 are being written, the rest absent.
static pk_miss_reason_t
s_why(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    uint8_t b = key->len ? key->bytes[0] : 0;
    return b == 0xee ? PK_MISS_EVICTED : b == 0x77 ? PK_MISS_WRITING : PK_MISS_ABSENT;
}

static void
s_kick(void *arg)
{
    H->kicks++;
}

static void
s_setup(void)
{
    H = calloc(1, sizeof *H);
    H->now = 1000.0;
    H->next_job = 1000;
    H->mem = pk_memtransport_new();
    H->inner = pk_memtransport_iface(H->mem);
    H->role = pk_server_role_new("peer", NULL, (pk_clock_t) { NULL, s_now },
                                 (pk_sender_t) { NULL, s_send },
                                 (pk_transport_t) { .write_blocks = s_write, .poll = s_poll,
                                                    .cancel = s_cancel },
                                 (pk_parent_t) { .lookup = s_lookup, .create_store_job = s_pin,
                                                 .on_new_request = s_open,
                                                 .on_request_finished = s_finished,
                                                 .store_result = s_result, .block_sums = s_sums,
                                                 .miss_reason = s_why, .kick = s_kick });
    ck_assert_ptr_nonnull(H->role);
}

static void
s_teardown(void)
{
    pk_server_role_destroy(&H->role);
    pk_memtransport_destroy(&H->mem);
    pk_keymap_fini(&H->table);
    pk_keymap_fini(&H->unpinnable);
    free(H);
    H = NULL;
}

//  Asserts the log holds exactly these lines (in order), then clears it.
static void
s_expect_(const char *where, ...)
{
    va_list ap;
    va_start(ap, where);
    int i = 0;
    for (const char *want; (want = va_arg(ap, const char *)); i++) {
        ck_assert_msg(i < H->nlog, "%s: missing \"%s\" (only %d lines)", where, want, H->nlog);
        ck_assert_msg(strcmp(H->log[i], want) == 0, "%s: line %d is \"%s\", want \"%s\"",
                      where, i, H->log[i], want);
    }
    va_end(ap);
    ck_assert_msg(i == H->nlog, "%s: unexpected \"%s\"", where, i < H->nlog ? H->log[i] : "");
    H->nlog = 0;
}
#define EXPECT(...) s_expect_(__FILE__ ":" PK_STR(__LINE__), __VA_ARGS__, (const char *) NULL)
#define PK_STR(x) PK_STR2(x)
#define PK_STR2(x) #x
#define NONE (const char *) NULL

static void
s_set(const char *hex, pk_lookup_result_t state, uint32_t block)
{
    pk_key_t key = K(hex);
    pk_keymap_put(&H->table, &key, state, block);
}

static void
s_state(size_t requests, size_t inflight, size_t jobs, size_t aborts, size_t serve, size_t kept)
{
    pk_server_role_state_t st;
    pk_server_role_state(H->role, &st);
    ck_assert_uint_eq(st.requests, requests);
    ck_assert_uint_eq(st.inflight, inflight);
    ck_assert_uint_eq(st.store_jobs, jobs);
    ck_assert_uint_eq(st.aborts, aborts);
    ck_assert_uint_eq(st.serve_pending, serve);
    ck_assert_uint_eq(st.kept, kept);
}

//  The end of every test: once the store-job timeout has passed (twice:
//  jobs, then what is kept of them), nothing per-request is left and the
//  store's brackets balance.
//  The role's counters (for the daemon's metrics).
static void
s_counters(uint64_t hits, uint64_t misses, uint64_t expired, uint64_t timeouts)
{
    pk_server_role_counters_t c;
    pk_server_role_counters(H->role, &c);
    ck_assert_uint_eq(c.hits, hits);
    ck_assert_uint_eq(c.misses, misses);
    ck_assert_uint_eq(c.expired, expired);
    ck_assert_uint_eq(c.store_timeouts, timeouts);
}

static void
s_settle(void)
{
    pk_server_role_serve(H->role);
    H->now += 30;
    pk_server_role_collect(H->role);
    H->now += 30;
    pk_server_role_collect(H->role);
    pk_server_role_serve(H->role);
    H->nlog = 0;
    s_state(0, 0, 0, 0, 0, 0);
    pk_server_role_state_t st;
    pk_server_role_state(H->role, &st);
    ck_assert_uint_eq(st.lookup_keys, 0);
    ck_assert_int_eq(H->opened, H->finished);
}

static void
s_lookup_ev(const char *kv, uint64_t round, int n, ...)
{
    pk_key_t keys[16];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        keys[i] = K(va_arg(ap, const char *));
    va_end(ap);
    ck_assert_int_eq(pk_server_role_on_lookup(H->role, kv, keys, (size_t) n, round), 0);
}

//  fetch(kv, round, n, "key", remote, "key", remote, ...)
static int
s_fetch(const char *kv, uint64_t round, int n, ...)
{
    pk_key_t keys[16];
    uint32_t idx[16];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        keys[i] = K(va_arg(ap, const char *));
        idx[i] = va_arg(ap, unsigned);
    }
    va_end(ap);
    return pk_server_role_on_fetch(H->role, kv, keys, idx, (size_t) n, round);
}

//  store(kv, job, round or -1 for unbound, n, "key", local, ...)
static void
s_store(const char *kv, uint64_t job, long long round, int n, ...)
{
    pk_key_t keys[16];
    uint32_t blocks[16];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        keys[i] = K(va_arg(ap, const char *));
        blocks[i] = va_arg(ap, unsigned);
    }
    va_end(ap);
    ck_assert_int_eq(pk_server_role_store(H->role, kv, keys, blocks, (size_t) n, job,
                                          round >= 0, round >= 0 ? (uint64_t) round : 0), 0);
}

static void
s_complete(uint64_t tid, bool ok)
{
    pk_memtransport_complete(H->mem, &tid, 1, ok);
}

static void
s_hold(uint64_t tid)
{
    pk_memtransport_hold(H->mem, &tid, 1);
}

//  ---------------------------------------------------------------------------
//  Lookups

START_TEST(test_lookup_all_hits)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_set("bb", PK_LOOKUP_HIT, 5);
    s_lookup_ev("r1", 1, 2, "aa", "bb");
    EXPECT(NONE);
    pk_server_role_serve(H->role);
    EXPECT("open r1 round=1", "pin r1 round=1 job=1000 n=2 pinned=2",
           "lookup_resp r1 round=1 hits=11", "finished r1 round=1");
    ck_assert_int_eq(s_fetch("r1", 1, 2, "aa", 0, "bb", 1), 0);
    EXPECT("write 1 round=1 4>0,5>1");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 ok landing=2", "result 1000 ok");
    s_fetch("r1", 2, 0);
    EXPECT(NONE);
    s_state(0, 0, 0, 0, 0, 0);
    s_counters(2, 0, 0, 0);
    s_settle();
}
END_TEST

//  The answer carries each hit's checksum, in key order, a repeated key's
//  each time it appears, none for a miss; an all-miss answer an empty list.
START_TEST(test_lookup_answer_checksums)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_set("bb", PK_LOOKUP_HIT, 7);
    s_lookup_ev("r1", 1, 4, "aa", "cc", "bb", "aa");
    pk_server_role_serve(H->role);
    ck_assert_str_eq(H->sums, "0000000000001004" "0000000000001007" "0000000000001004");
    s_lookup_ev("r2", 1, 1, "dd");
    pk_server_role_serve(H->role);
    ck_assert_str_eq(H->sums, "");
}
END_TEST

START_TEST(test_lookup_all_misses)
{
    s_lookup_ev("r1", 1, 2, "cc", "dd");
    pk_server_role_serve(H->role);
    EXPECT("open r1 round=1", "lookup_resp r1 round=1 hits=00", "finished r1 round=1");
    s_state(0, 0, 0, 0, 0, 0);
    s_counters(0, 2, 0, 0);
    s_settle();
}
END_TEST

START_TEST(test_lookup_mixed_pending_resolves)
{
    s_set("aa", PK_LOOKUP_HIT, 1);
    s_set("bb", PK_LOOKUP_HIT_PENDING, 2);
    s_set("cc", PK_LOOKUP_RETRY, 3);
    s_lookup_ev("r1", 3, 4, "aa", "bb", "cc", "dd");
    pk_server_role_serve(H->role);
    EXPECT("open r1 round=3", "pin r1 round=3 job=1000 n=1 pinned=1");
    s_state(1, 0, 1, 0, 1, 0);
    pk_server_role_state_t st;
    pk_server_role_state(H->role, &st);
    ck_assert_uint_eq(st.lookup_keys, 4);       //  held until answered
    bool exists;
    ck_assert_uint_eq(pk_server_role_rounds(H->role, "r1", &exists), 1);
    ck_assert(exists);
    ck_assert_uint_eq(pk_server_role_rounds(H->role, "nobody", &exists), 0);
    ck_assert(!exists);
    H->now += 1;
    pk_server_role_serve(H->role);
    EXPECT(NONE);
    //  parked: the owner ticks often until it is answered
    ck_assert(pk_server_role_has_parked(H->role));
    s_set("cc", PK_LOOKUP_HIT, 3);
    pk_server_role_serve(H->role);
    EXPECT("pin r1 round=3 job=1001 n=1 pinned=1");
    s_set("bb", PK_LOOKUP_MISS, 2);
    pk_server_role_serve(H->role);
    EXPECT("lookup_resp r1 round=3 hits=1010", "finished r1 round=3");
    //  a pending key the engine gave up on is a miss, not an expiry
    s_counters(2, 2, 0, 0);
    ck_assert(!pk_server_role_has_parked(H->role));
    //  the fetch of the hits pairs both pin jobs' supply in one write
    s_fetch("r1", 3, 2, "aa", 7, "cc", 8);
    EXPECT("write 1 round=3 1>7,3>8");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=3 ok landing=2", "result 1000 ok", "result 1001 ok");
    s_settle();
}
END_TEST

//  The parent is kicked once after a serve whose lookups answered
//  HIT_PENDING (the keys of every lookup of the pass: a tier reads them
//  as one batch), once per re-poll that still finds keys pending, and
//  never after a pass with none.
START_TEST(test_lookup_kicks_once_per_pass)
{
    s_set("aa", PK_LOOKUP_HIT, 1);
    s_lookup_ev("r0", 1, 1, "aa");
    pk_server_role_serve(H->role);
    ck_assert_int_eq(H->kicks, 0);
    s_set("bb", PK_LOOKUP_HIT_PENDING, 2);
    s_set("cc", PK_LOOKUP_HIT_PENDING, 3);
    s_set("dd", PK_LOOKUP_HIT_PENDING, 4);
    s_lookup_ev("r1", 1, 2, "bb", "cc");
    s_lookup_ev("r2", 1, 2, "dd", "aa");
    pk_server_role_serve(H->role);
    ck_assert_int_eq(H->kicks, 1);
    H->now += 0.001;
    pk_server_role_serve(H->role);
    ck_assert_int_eq(H->kicks, 2);      //  the re-poll found them pending
    s_set("bb", PK_LOOKUP_HIT, 2);
    s_set("cc", PK_LOOKUP_HIT, 3);
    s_set("dd", PK_LOOKUP_HIT, 4);
    pk_server_role_serve(H->role);
    ck_assert_int_eq(H->kicks, 2);      //  all up: nothing to start
    ck_assert(!pk_server_role_has_parked(H->role));
}
END_TEST

START_TEST(test_lookup_pending_expires)
{
    s_set("bb", PK_LOOKUP_HIT_PENDING, 0);
    s_lookup_ev("r1", 1, 1, "bb");
    H->now += 1;
    pk_server_role_serve(H->role);
    EXPECT("open r1 round=1");
    H->now += 3.99;
    pk_server_role_serve(H->role);
    EXPECT(NONE);
    //  5 s from receipt, not from the first serve
    H->now += 0.01;
    pk_server_role_serve(H->role);
    EXPECT("lookup_resp r1 round=1 hits=0", "finished r1 round=1");
    s_counters(0, 1, 1, 0);
    s_settle();
}
END_TEST

START_TEST(test_lookup_duplicate_keys)
{
    s_set("aa", PK_LOOKUP_HIT_PENDING, 7);
    s_set("bb", PK_LOOKUP_HIT, 8);
    s_lookup_ev("r1", 1, 5, "aa", "bb", "aa", "bb", "aa");
    pk_server_role_serve(H->role);
    EXPECT("open r1 round=1", "pin r1 round=1 job=1000 n=1 pinned=1");
    s_set("aa", PK_LOOKUP_HIT, 7);
    pk_server_role_serve(H->role);
    EXPECT("pin r1 round=1 job=1001 n=1 pinned=1", "lookup_resp r1 round=1 hits=11111",
           "finished r1 round=1");
    //  every key in wire order, repeats included
    s_counters(5, 0, 0, 0);
    s_fetch("r1", 1, 0);
    EXPECT(NONE);
    pk_server_role_collect(H->role);
    EXPECT("result 1001 ok", "result 1000 ok");
    s_settle();
}
END_TEST

START_TEST(test_lookup_resp_wire_order)
{
    s_set("01", PK_LOOKUP_HIT_PENDING, 1);
    s_set("02", PK_LOOKUP_HIT, 2);
    s_set("03", PK_LOOKUP_HIT, 3);
    s_lookup_ev("b", 1, 2, "01", "02");
    s_lookup_ev("a", 1, 1, "03");
    s_lookup_ev("b", 2, 2, "03", "02");
    pk_server_role_serve(H->role);
    EXPECT("open b round=1", "pin b round=1 job=1000 n=1 pinned=1",
           "open b round=2", "pin b round=2 job=1001 n=2 pinned=2",
           "lookup_resp b round=2 hits=11", "finished b round=2",
           "open a round=1", "pin a round=1 job=1002 n=1 pinned=1",
           "lookup_resp a round=1 hits=1", "finished a round=1");
    s_set("01", PK_LOOKUP_MISS, 1);
    pk_server_role_serve(H->role);
    EXPECT("lookup_resp b round=1 hits=01", "finished b round=1");
    s_settle();
}
END_TEST

START_TEST(test_lookup_pin_lost_key_is_miss)
{
    //  evicted between lookup and pin: answered as a miss, never supplied
    s_set("aa", PK_LOOKUP_HIT, 1);
    s_set("bb", PK_LOOKUP_HIT, 2);
    pk_key_t bb = K("bb");
    pk_keymap_put(&H->unpinnable, &bb, 0, 0);
    s_lookup_ev("r1", 1, 2, "aa", "bb");
    pk_server_role_serve(H->role);
    EXPECT("open r1 round=1", "pin r1 round=1 job=1000 n=2 pinned=1",
           "lookup_resp r1 round=1 hits=10", "finished r1 round=1");
    s_fetch("r1", 1, 1, "aa", 0);
    EXPECT("write 1 round=1 1>0");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 ok landing=1", "result 1000 ok");
    s_settle();
}
END_TEST

START_TEST(test_open_finished_balanced)
{
    s_set("aa", PK_LOOKUP_HIT_PENDING, 0);
    s_lookup_ev("r1", 1, 1, "aa");
    s_lookup_ev("r2", 1, 1, "aa");
    pk_server_role_serve(H->role);
    EXPECT("open r1 round=1", "open r2 round=1");
    s_fetch("r1", 1, 0);
    pk_server_role_finish(H->role, "r2");
    EXPECT(NONE);
    ck_assert_int_eq(H->opened, 2);
    ck_assert_int_eq(H->finished, 0);
    //  dropped lookups get their finished at the next serve, with no answer
    pk_server_role_serve(H->role);
    EXPECT("finished r1 round=1", "finished r2 round=1");
    //  a lookup dropped before any serve never opened, so it owes nothing
    s_lookup_ev("r3", 1, 1, "aa");
    s_fetch("r3", 1, 0);
    pk_server_role_serve(H->role);
    EXPECT(NONE);
    ck_assert_int_eq(H->opened, H->finished);
    s_settle();
}
END_TEST

//  ---------------------------------------------------------------------------
//  Prefill/decode and matching

START_TEST(test_pd_store_then_fetch)
{
    s_store("r1", 1, -1, 2, "aa", 3, "bb", 4);
    EXPECT(NONE);
    s_state(1, 0, 1, 0, 0, 0);
    s_fetch("r1", 7, 2, "aa", 0, "bb", 1);
    EXPECT("write 1 round=7 3>0,4>1");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=7 ok landing=2", "result 1 ok");
    s_settle();
}
END_TEST

START_TEST(test_pd_fetch_then_store)
{
    s_fetch("r1", 1, 2, "aa", 5, "bb", 6);
    EXPECT(NONE);
    s_store("r1", 1, -1, 1, "aa", 3);
    EXPECT("write 1 round=1 3>5");
    s_store("r1", 2, -1, 1, "bb", 4);
    EXPECT("write 2 round=1 4>6");
    s_complete(2, true);
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 ok landing=2",
           "result 1 ok",
           "result 2 ok");
    s_settle();
}
END_TEST

START_TEST(test_partial_matches)
{
    s_fetch("r1", 1, 3, "aa", 0, "bb", 1, "cc", 2);
    s_store("r1", 1, 1, 2, "bb", 1, "ff", 9);
    EXPECT("write 1 round=1 1>1");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    //  the seed settles a job when a write carrying it completes
    EXPECT("result 1 ok");
    s_state(1, 0, 0, 0, 0, 0);
    s_store("r1", 2, 1, 2, "aa", 0, "cc", 2);
    EXPECT("write 2 round=1 0>0,2>2");
    s_complete(2, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 ok landing=3",
           "result 2 ok");
    s_settle();
}
END_TEST

START_TEST(test_overlapping_rounds)
{
    s_set("aa", PK_LOOKUP_HIT, 1);
    s_set("bb", PK_LOOKUP_HIT, 2);
    s_lookup_ev("r1", 1, 1, "aa");
    pk_server_role_serve(H->role);
    s_lookup_ev("r1", 2, 1, "bb");
    s_fetch("r1", 1, 1, "aa", 0);
    pk_server_role_serve(H->role);
    H->nlog = 0;
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 ok landing=1",
           "result 1000 ok");
    //  round 2's pin is untouched by the end of round 1
    s_state(1, 0, 1, 0, 0, 0);
    s_fetch("r1", 2, 1, "bb", 1);
    EXPECT("write 2 round=2 2>1");
    s_complete(2, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=2 ok landing=1",
           "result 1001 ok");
    s_settle();
}
END_TEST

START_TEST(test_unbound_joins_oldest_demand)
{
    s_fetch("r1", 1, 1, "aa", 0);
    s_fetch("r1", 2, 2, "aa", 1, "bb", 2);
    s_store("r1", 1, -1, 2, "bb", 5, "aa", 6);
    EXPECT("write 1 round=1 6>0");
    s_store("r1", 2, -1, 1, "aa", 7);
    EXPECT("write 2 round=2 7>1");
    s_store("r1", 3, -1, 1, "bb", 8);
    EXPECT("write 3 round=2 8>2");
    for (uint64_t t = 1; t <= 3; t++)
        s_complete(t, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 ok landing=1",
           "transfer_done r1 round=2 ok landing=2",
           "result 1 ok",
           "result 2 ok",
           "result 3 ok");
    s_settle();
}
END_TEST

START_TEST(test_fetch_order_differs_from_lookup)
{
    //  pins wait as a list; a fetch in another order, or of a subset,
    //  pairs exactly as the map would
    s_set("aa", PK_LOOKUP_HIT, 1);
    s_set("bb", PK_LOOKUP_HIT, 2);
    s_set("cc", PK_LOOKUP_HIT, 3);
    s_lookup_ev("r1", 1, 3, "aa", "bb", "cc");
    s_lookup_ev("r2", 1, 3, "aa", "bb", "cc");
    s_lookup_ev("r3", 1, 3, "aa", "bb", "cc");
    pk_server_role_serve(H->role);
    H->nlog = 0;
    s_fetch("r1", 1, 3, "aa", 0, "cc", 1, "bb", 2);
    EXPECT("write 1 round=1 1>0,3>1,2>2");
    s_fetch("r2", 1, 2, "bb", 5, "cc", 6);
    EXPECT("write 2 round=1 2>5,3>6");
    //  a key the lookup did not pin fails the round at once, as with the map
    s_fetch("r3", 1, 2, "aa", 0, "dd", 1);
    EXPECT("transfer_done r3 round=1 failed landing=0");
    s_complete(1, true);
    s_complete(2, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 ok landing=3", "transfer_done r2 round=1 ok landing=2",
           "result 1002 failed", "result 1000 ok", "result 1001 ok");
    s_settle();
}
END_TEST

START_TEST(test_symmetric_unpinned_fails_at_once)
{
    s_set("aa", PK_LOOKUP_HIT, 1);
    s_lookup_ev("r1", 1, 2, "aa", "bb");
    pk_server_role_serve(H->role);
    H->nlog = 0;
    s_fetch("r1", 1, 2, "aa", 0, "bb", 1);
    EXPECT("transfer_done r1 round=1 failed landing=0");
    pk_server_role_collect(H->role);
    EXPECT("result 1000 failed");
    s_settle();
}
END_TEST

START_TEST(test_terminal_fetch)
{
    s_set("aa", PK_LOOKUP_HIT, 1);
    s_set("bb", PK_LOOKUP_HIT, 2);
    s_lookup_ev("r1", 1, 1, "aa");
    s_lookup_ev("r1", 2, 1, "bb");
    pk_server_role_serve(H->role);
    s_store("r1", 5, -1, 1, "cc", 3);
    H->nlog = 0;
    s_fetch("r1", 2, 0);
    EXPECT(NONE);
    s_state(0, 0, 0, 0, 0, 0);
    pk_server_role_collect(H->role);
    //  its own round's pins succeed; the others end without a transfer_done
    EXPECT("result 1000 failed", "result 1001 ok", "result 5 failed");
    s_settle();
}
END_TEST

START_TEST(test_terminal_fetch_with_writes_in_flight)
{
    s_fetch("r1", 1, 1, "aa", 0);
    s_store("r1", 1, 1, 1, "aa", 1);
    EXPECT("write 1 round=1 1>0");
    s_hold(1);
    s_fetch("r1", 2, 0);
    EXPECT("cancel wait 1");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("result 1 failed");
    s_settle();
}
END_TEST

//  ---------------------------------------------------------------------------
//  finish

START_TEST(test_finish_without_demand)
{
    //  prefiller first: a fully served fetch after finish succeeds
    s_store("r1", 1, -1, 1, "aa", 1);
    pk_server_role_finish(H->role, "r1");
    EXPECT(NONE);
    s_fetch("r1", 1, 1, "aa", 0);
    EXPECT("write 1 round=1 1>0");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 ok landing=1",
           "result 1 ok");
    //  nothing stored: the late fetch is answered at once
    pk_server_role_finish(H->role, "r2");
    s_fetch("r2", 1, 1, "bb", 0);
    EXPECT("transfer_done r2 round=1 failed landing=0");
    //  partial supply: answered after its last write
    s_store("r3", 2, -1, 1, "cc", 2);
    pk_server_role_finish(H->role, "r3");
    s_fetch("r3", 4, 2, "cc", 0, "dd", 1);
    EXPECT("write 2 round=4 2>0");
    s_complete(2, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r3 round=4 failed landing=1",
           "result 2 ok");
    s_settle();
}
END_TEST

START_TEST(test_finish_with_demand)
{
    s_fetch("r1", 1, 1, "aa", 0);
    pk_server_role_finish(H->role, "r1");
    EXPECT("transfer_done r1 round=1 failed landing=0");
    //  with a write in flight: the last completion answers
    s_fetch("r2", 1, 2, "aa", 0, "bb", 1);
    s_store("r2", 1, 1, 1, "aa", 1);
    pk_server_role_finish(H->role, "r2");
    EXPECT("write 1 round=1 1>0");
    pk_server_role_collect(H->role);
    EXPECT(NONE);
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r2 round=1 failed landing=1",
           "result 1 ok");
    s_settle();
}
END_TEST

//  ---------------------------------------------------------------------------
//  Failures and the fence

START_TEST(test_refused_write)
{
    s_fetch("r1", 1, 2, "aa", 0, "bb", 1);
    pk_memtransport_refuse(H->mem, 1);
    s_store("r1", 1, 1, 1, "aa", 1);
    EXPECT("write refused round=1 1>0", "transfer_done r1 round=1 failed landing=0");
    //  later supply for the failed round starts a new round of that number
    pk_server_role_collect(H->role);
    EXPECT("result 1 failed");
    s_settle();
}
END_TEST

START_TEST(test_refused_write_all_supply)
{
    s_set("aa", PK_LOOKUP_HIT, 1);
    s_set("bb", PK_LOOKUP_HIT, 2);
    s_lookup_ev("r1", 1, 2, "aa", "bb");
    pk_server_role_serve(H->role);
    H->nlog = 0;
    pk_memtransport_refuse(H->mem, 1);
    ck_assert_int_eq(s_fetch("r1", 1, 2, "aa", 0, "bb", 1), 0);
    //  exactly one answer, no crash (the seed finalized twice here)
    EXPECT("write refused round=1 1>0,2>1", "transfer_done r1 round=1 failed landing=0");
    pk_server_role_collect(H->role);
    EXPECT("result 1000 failed");
    s_settle();
}
END_TEST

START_TEST(test_failed_among_siblings)
{
    s_fetch("r1", 1, 3, "aa", 0, "bb", 1, "cc", 2);
    s_store("r1", 1, 1, 1, "aa", 1);
    s_store("r1", 2, 1, 1, "bb", 2);
    s_store("r1", 3, 1, 1, "cc", 3);
    H->nlog = 0;
    s_hold(3);
    s_complete(1, true);
    s_complete(2, false);
    pk_server_role_collect(H->role);
    //  nothing is published while write 3 may still read its source
    EXPECT("cancel wait 3",
           "result 1 ok");
    s_state(1, 1, 2, 0, 0, 0);
    s_complete(3, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 failed landing=2",
           "result 3 failed",
           "result 2 failed");
    s_settle();
}
END_TEST

START_TEST(test_store_timeout_write_in_flight)
{
    s_fetch("r1", 1, 2, "aa", 0, "bb", 1);
    s_store("r1", 1, 1, 1, "aa", 1);
    s_hold(1);
    H->nlog = 0;
    H->now += 29.999;
    pk_server_role_collect(H->role);
    EXPECT(NONE);
    s_counters(0, 0, 0, 0);
    H->now += 0.001;
    pk_server_role_collect(H->role);
    EXPECT("cancel wait 1");
    s_counters(0, 0, 0, 1);
    s_state(1, 1, 1, 0, 0, 0);
    pk_server_role_drain(H->role);
    EXPECT("cancel wait 1");
    pk_server_role_collect(H->role);
    EXPECT(NONE);
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 failed landing=1",
           "result 1 failed");
    s_settle();
}
END_TEST

START_TEST(test_prefill_finished_then_timeout)
{
    s_store("r1", 1, -1, 1, "aa", 1);
    pk_server_role_finish(H->role, "r1");
    H->now += 30;
    pk_server_role_collect_idle(H->role);
    EXPECT("result 1 failed");
    s_counters(0, 0, 0, 1);
    s_state(0, 0, 0, 0, 0, 2);
    //  the late fetch is answered at once, and nothing lingers afterwards
    s_fetch("r1", 1, 1, "aa", 0);
    EXPECT("transfer_done r1 round=1 failed landing=0");
    s_state(0, 0, 0, 0, 0, 1);
    s_settle();
}
END_TEST

//  ---------------------------------------------------------------------------
//  Aborts

START_TEST(test_abort_nothing_in_flight)
{
    s_set("aa", PK_LOOKUP_HIT, 1);
    s_lookup_ev("r1", 1, 1, "aa");
    pk_server_role_serve(H->role);
    H->nlog = 0;
    pk_server_role_on_abort(H->role, "r1", 1);
    EXPECT("abort_ack r1 round=1 landing=0");
    pk_server_role_collect(H->role);
    EXPECT("result 1000 failed");
    //  with demand but nothing written: acked, and no transfer_done
    s_fetch("r2", 1, 1, "bb", 0);
    pk_server_role_on_abort(H->role, "r2", 1);
    EXPECT("abort_ack r2 round=1 landing=0");
    s_settle();
}
END_TEST

START_TEST(test_abort_write_held)
{
    s_fetch("r1", 1, 1, "aa", 0);
    s_store("r1", 1, 1, 1, "aa", 1);
    s_hold(1);
    H->nlog = 0;
    pk_server_role_on_abort(H->role, "r1", 1);
    EXPECT("cancel wait 1");
    s_state(1, 1, 1, 1, 0, 0);
    pk_server_role_drain(H->role);
    EXPECT("cancel wait 1");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("abort_ack r1 round=1 landing=1", "result 1 failed");
    s_settle();
}
END_TEST

START_TEST(test_abort_forced_after_drain_timeout)
{
    s_fetch("r1", 1, 2, "aa", 0, "bb", 1);
    s_store("r1", 1, 1, 2, "aa", 1, "bb", 2);
    s_hold(1);
    pk_server_role_on_abort(H->role, "r1", 1);
    H->nlog = 0;
    H->now += 9.5;
    pk_server_role_drain(H->role);
    EXPECT("cancel wait 1");
    ck_assert(!pk_server_role_take_forced(H->role));
    H->now += 0.5;
    pk_server_role_drain(H->role);
    EXPECT("cancel immediate 1", "abort_ack r1 round=1 landing=0");
    ck_assert(pk_server_role_take_forced(H->role));
    ck_assert(!pk_server_role_take_forced(H->role));
    pk_server_role_collect(H->role);
    EXPECT("result 1 failed");
    s_settle();
}
END_TEST

START_TEST(test_repeated_aborts)
{
    s_fetch("r1", 1, 1, "aa", 0);
    s_store("r1", 1, 1, 1, "aa", 1);
    s_hold(1);
    pk_server_role_on_abort(H->role, "r1", 1);
    H->nlog = 0;
    H->now += 6;
    pk_server_role_on_abort(H->role, "r1", 1);
    EXPECT("cancel wait 1");
    s_state(1, 1, 1, 1, 0, 0);
    //  the deadline is the first abort's: forced at 10 s, not 16 s
    H->now += 4;
    pk_server_role_on_abort(H->role, "r1", 1);
    EXPECT("cancel immediate 1", "abort_ack r1 round=1 landing=0");
    pk_server_role_on_abort(H->role, "r1", 1);
    EXPECT("abort_ack r1 round=1 landing=0");
    s_settle();
}
END_TEST

START_TEST(test_abort_unknown)
{
    pk_server_role_on_abort(H->role, "nobody", 4);
    EXPECT("abort_ack nobody round=4 landing=0");
    s_state(0, 0, 0, 0, 0, 0);
    s_settle();
}
END_TEST

//  ---------------------------------------------------------------------------
//  Protocol errors and close

START_TEST(test_duplicate_fetch)
{
    s_fetch("r1", 1, 1, "aa", 0);
    ck_assert_int_eq(s_fetch("r1", 1, 1, "bb", 1), -EPROTO);
    ck_assert_int_eq(s_fetch("r1", 1, 0), -EPROTO);
    EXPECT(NONE);
    s_state(1, 0, 0, 0, 0, 0);
    //  the first fetch's demand is intact
    s_store("r1", 1, -1, 2, "bb", 2, "aa", 1);
    EXPECT("write 1 round=1 1>0");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("transfer_done r1 round=1 ok landing=1",
           "result 1 ok");
    s_settle();
}
END_TEST

START_TEST(test_close_with_writes_in_flight)
{
    s_set("aa", PK_LOOKUP_HIT_PENDING, 0);
    s_lookup_ev("r0", 1, 1, "aa");
    pk_server_role_serve(H->role);
    s_fetch("r1", 1, 2, "aa", 0, "bb", 1);
    s_store("r1", 1, 1, 1, "aa", 1);
    s_store("r2", 2, -1, 1, "cc", 3);
    s_fetch("r3", 1, 1, "dd", 0);
    pk_memtransport_refuse(H->mem, 1);
    s_store("r3", 3, 1, 1, "dd", 4);
    H->nlog = 0;
    uint64_t *jobs;
    size_t njobs, owed;
    ck_assert_int_eq(pk_server_role_close(H->role, &jobs, &njobs, &owed), 0);
    //  queued results are handed over, not dropped (the seed dropped them)
    EXPECT("cancel immediate 1", "result 3 failed");
    ck_assert_uint_eq(njobs, 2);
    ck_assert_uint_eq(jobs[0], 1);
    ck_assert_uint_eq(jobs[1], 2);
    ck_assert_uint_eq(owed, 1);
    ck_assert_uint_eq(pk_memtransport_inflight(H->mem), 0);
    free(jobs);
    ck_assert_int_eq(pk_server_role_on_abort(H->role, "r1", 1), -EPIPE);
    s_state(0, 0, 0, 0, 0, 0);
    H->opened = H->finished;        //  close reported the one owed
}
END_TEST

//  Miss reasons (issue 36, point 4).  With config.reasons each answer
//  says why each miss is one, one letter a miss in key order, repeats
//  included: the role's own (p: pending past the deadline, q: the quota
//  refused its pin) and, for the rest, the parent's when the answer is
//  made (here: ee.. evicted, 77.. writing, others absent).  Without it no
//  reasons go out, and the counts by reason are kept either way.
static void
s_role_with_reasons(bool reasons)
{
    pk_server_role_destroy(&H->role);
    pk_server_role_config_t config = PK_SERVER_ROLE_CONFIG_DEFAULT;
    config.reasons = reasons;
    H->role = pk_server_role_new("peer", &config, (pk_clock_t) { NULL, s_now },
                                 (pk_sender_t) { NULL, s_send },
                                 (pk_transport_t) { .write_blocks = s_write, .poll = s_poll,
                                                    .cancel = s_cancel },
                                 (pk_parent_t) { .lookup = s_lookup, .create_store_job = s_pin,
                                                 .on_new_request = s_open,
                                                 .on_request_finished = s_finished,
                                                 .store_result = s_result, .block_sums = s_sums,
                                                 .miss_reason = s_why, .kick = s_kick });
    ck_assert_ptr_nonnull(H->role);
}

static void
s_miss_counts(uint64_t unknown, uint64_t absent, uint64_t evicted, uint64_t pending,
              uint64_t quota, uint64_t writing)
{
    pk_server_role_counters_t c;
    pk_server_role_counters(H->role, &c);
    ck_assert_uint_eq(c.miss_reasons[PK_MISS_UNKNOWN], unknown);
    ck_assert_uint_eq(c.miss_reasons[PK_MISS_ABSENT], absent);
    ck_assert_uint_eq(c.miss_reasons[PK_MISS_EVICTED], evicted);
    ck_assert_uint_eq(c.miss_reasons[PK_MISS_PENDING], pending);
    ck_assert_uint_eq(c.miss_reasons[PK_MISS_QUOTA], quota);
    ck_assert_uint_eq(c.miss_reasons[PK_MISS_WRITING], writing);
    ck_assert_uint_eq(c.miss_reasons[PK_MISS_DRAINING], 0);
}

START_TEST(test_miss_reasons)
{
    s_role_with_reasons(true);
    s_set("aa", PK_LOOKUP_HIT, 1);
    s_set("bb", PK_LOOKUP_HIT_PENDING, 2);
    s_set("99", PK_LOOKUP_HIT, 3);              //  beyond the quota
    //  aa hit, dd absent, ee evicted, bb pending, 99 quota, 77 writing (it
    //  missed when polled, and is being written by the answer), dd again
    s_lookup_ev("r1", 1, 7, "aa", "dd", "ee", "bb", "99", "77", "dd");
    pk_server_role_serve(H->role);
    EXPECT("open r1 round=1", "pin r1 round=1 job=1000 n=2 pinned=1");
    H->now += 5;
    pk_server_role_serve(H->role);
    EXPECT("lookup_resp r1 round=1 hits=1000000", "finished r1 round=1");
    ck_assert_str_eq(H->reasons, "aepqwa");
    s_counters(1, 6, 1, 0);
    s_miss_counts(0, 2, 1, 1, 1, 1);
    //  all hits: no reasons member at all
    s_lookup_ev("r2", 2, 1, "aa");
    pk_server_role_serve(H->role);
    EXPECT("open r2 round=2", "pin r2 round=2 job=1001 n=1 pinned=1",
           "lookup_resp r2 round=2 hits=1", "finished r2 round=2");
    ck_assert_str_eq(H->reasons, "-");
    pk_server_role_finish(H->role, "r1");
    pk_server_role_finish(H->role, "r2");
    s_settle();
}
END_TEST

//  A consumer without the capability gets the seed's answer, no reasons;
//  the misses are counted by reason all the same (the metrics).
START_TEST(test_miss_reasons_off)
{
    s_role_with_reasons(false);
    s_lookup_ev("r1", 1, 2, "dd", "ee");
    pk_server_role_serve(H->role);
    EXPECT("open r1 round=1", "lookup_resp r1 round=1 hits=00", "finished r1 round=1");
    ck_assert_str_eq(H->reasons, "-");
    s_miss_counts(0, 1, 1, 0, 0, 0);
    s_settle();
}
END_TEST

//  ---------------------------------------------------------------------------
//  Lent gets (capability lend, protocol.md section 7)

//  The role again, lending: its transport has lend, its config says so.
static void
s_setup_lend(void)
{
    s_setup();
    pk_server_role_destroy(&H->role);
    pk_server_role_config_t config = PK_SERVER_ROLE_CONFIG_DEFAULT;
    config.lend = true;
    H->role = pk_server_role_new("peer", &config, (pk_clock_t) { NULL, s_now },
                                 (pk_sender_t) { NULL, s_send },
                                 (pk_transport_t) { .write_blocks = s_write, .poll = s_poll,
                                                    .cancel = s_cancel, .lend = s_lend },
                                 (pk_parent_t) { .lookup = s_lookup, .create_store_job = s_pin,
                                                 .on_new_request = s_open,
                                                 .on_request_finished = s_finished,
                                                 .store_result = s_result, .block_sums = s_sums,
                                                 .miss_reason = s_why, .kick = s_kick });
    ck_assert_ptr_nonnull(H->role);
}

//  get(kv, round, n, "key", remote, ...)
static void
s_get(const char *kv, uint64_t round, int n, ...)
{
    pk_key_t keys[16];
    uint32_t idx[16];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        keys[i] = K(va_arg(ap, const char *));
        idx[i] = va_arg(ap, unsigned);
    }
    va_end(ap);
    ck_assert_int_eq(pk_server_role_on_get(H->role, kv, keys, idx, (size_t) n, round), 0);
}

//  The answer goes as soon as the hits are lent, naming each hit's block
//  in key order; the pins stay until the consumer reports (the lent
//  transfer ends), and the round's end answers nothing more.
START_TEST(test_get_lent)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_set("bb", PK_LOOKUP_HIT, 0x2c);
    s_get("g1", 1, 3, "bb", 12, "cc", 11, "aa", 10);
    pk_server_role_serve(H->role);
    EXPECT("open g1 round=1", "pin g1 round=1 job=1000 n=2 pinned=2", "finished g1 round=1",
           "lend 1 round=1 44>12,4>10",
           "get_resp g1 round=1 hits=101 ok landing=0 sources=0000002c00000004");
    //  answered, and the blocks still pinned: the consumer may be copying
    s_state(1, 1, 1, 0, 0, 0);
    H->now += 1;
    pk_server_role_collect(H->role);
    pk_server_role_drain(H->role);
    EXPECT(NONE);
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("result 1000 ok");
    s_counters(2, 1, 0, 0);
    s_settle();
}
END_TEST

//  A consumer cut off while it copied (its report short, or the stall):
//  the transfer fails, the pins go, and no second answer follows the
//  one the consumer acted on.
START_TEST(test_get_lent_cut_off)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_get("g1", 1, 1, "aa", 10);
    pk_server_role_serve(H->role);
    H->nlog = 0;
    s_complete(1, false);
    pk_server_role_collect(H->role);
    EXPECT("result 1000 failed");
    s_settle();
}
END_TEST

//  An abort of a lent round (the consumer's deadline crossed its answer):
//  acknowledged only once the lent transfer ended, the pins held until
//  then, as for a write in flight.
START_TEST(test_get_lent_abort_waits_for_the_report)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_get("g1", 1, 1, "aa", 10);
    pk_server_role_serve(H->role);
    H->nlog = 0;
    s_hold(1);
    pk_server_role_on_abort(H->role, "g1", 1);
    EXPECT("cancel wait 1");
    s_state(1, 1, 1, 1, 0, 0);
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("abort_ack g1 round=1 landing=1", "result 1000 failed");
    s_settle();
}
END_TEST

//  A role not told to lend writes, though its transport could lend.
START_TEST(test_get_not_lent_without_the_capability)
{
    pk_server_role_destroy(&H->role);
    H->role = pk_server_role_new("peer", NULL, (pk_clock_t) { NULL, s_now },
                                 (pk_sender_t) { NULL, s_send },
                                 (pk_transport_t) { .write_blocks = s_write, .poll = s_poll,
                                                    .cancel = s_cancel, .lend = s_lend },
                                 (pk_parent_t) { .lookup = s_lookup, .create_store_job = s_pin,
                                                 .on_new_request = s_open,
                                                 .on_request_finished = s_finished,
                                                 .store_result = s_result, .block_sums = s_sums,
                                                 .miss_reason = s_why, .kick = s_kick });
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_get("g1", 1, 1, "aa", 10);
    pk_server_role_serve(H->role);
    EXPECT("open g1 round=1", "pin g1 round=1 job=1000 n=1 pinned=1", "finished g1 round=1",
           "write 1 round=1 4>10");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("get_resp g1 round=1 hits=1 ok landing=1 sources=-", "result 1000 ok");
    s_settle();
}
END_TEST

//  ---------------------------------------------------------------------------
//  Streaming gets (config.stream_gets; design.md, "A get's disk hits are
//  written as they land")

static void
s_setup_stream(void)
{
    s_setup();
    pk_server_role_destroy(&H->role);
    pk_server_role_config_t config = PK_SERVER_ROLE_CONFIG_DEFAULT;
    config.stream_gets = true;
    H->role = pk_server_role_new("peer", &config, (pk_clock_t) { NULL, s_now },
                                 (pk_sender_t) { NULL, s_send },
                                 (pk_transport_t) { .write_blocks = s_write, .poll = s_poll,
                                                    .cancel = s_cancel },
                                 (pk_parent_t) { .lookup = s_lookup, .create_store_job = s_pin,
                                                 .on_new_request = s_open,
                                                 .on_request_finished = s_finished,
                                                 .store_result = s_result, .block_sums = s_sums,
                                                 .miss_reason = s_why, .kick = s_kick });
    ck_assert_ptr_nonnull(H->role);
}

//  Each hit is written as it is pinned, while keys are still pending;
//  a write's end does not end the round while the lookup looks; the one
//  answer goes after the last write, as the old order's, with every key.
START_TEST(test_get_stream_writes_as_pinned)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_set("bb", PK_LOOKUP_HIT_PENDING, 5);
    s_set("cc", PK_LOOKUP_HIT_PENDING, 6);
    s_get("g1", 1, 4, "aa", 10, "bb", 11, "cc", 12, "dd", 13);
    pk_server_role_serve(H->role);
    EXPECT("open g1 round=1", "pin g1 round=1 job=1000 n=1 pinned=1", "write 1 round=1 4>10");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("result 1000 ok");
    s_set("bb", PK_LOOKUP_HIT, 5);
    pk_server_role_serve(H->role);
    EXPECT("pin g1 round=1 job=1001 n=1 pinned=1", "write 2 round=1 5>11");
    s_set("cc", PK_LOOKUP_HIT, 6);
    pk_server_role_serve(H->role);
    EXPECT("pin g1 round=1 job=1002 n=1 pinned=1", "write 3 round=1 6>12",
           "finished g1 round=1");
    s_complete(3, true);
    pk_server_role_collect(H->role);
    EXPECT("result 1002 ok");
    s_complete(2, true);
    pk_server_role_collect(H->role);
    EXPECT("get_resp g1 round=1 hits=1110 ok landing=3 sources=-", "result 1001 ok");
    s_counters(3, 1, 0, 0);
    s_settle();
}
END_TEST

//  A get whose keys are all found at once is the old order: written after
//  its answer was made, as without the rule.
START_TEST(test_get_stream_not_when_nothing_parks)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_get("g1", 1, 2, "aa", 10, "dd", 11);
    pk_server_role_serve(H->role);
    EXPECT("open g1 round=1", "pin g1 round=1 job=1000 n=1 pinned=1", "finished g1 round=1",
           "write 1 round=1 4>10");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("get_resp g1 round=1 hits=10 ok landing=1 sources=-", "result 1000 ok");
    s_settle();
}
END_TEST

//  The hung tier: the pending key is a miss at the lookup's deadline and
//  the answer goes then, the hit written long before.
START_TEST(test_get_stream_deadline)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_set("bb", PK_LOOKUP_HIT_PENDING, 5);
    s_get("g1", 1, 2, "bb", 11, "aa", 10);
    pk_server_role_serve(H->role);
    EXPECT("open g1 round=1", "pin g1 round=1 job=1000 n=1 pinned=1", "write 1 round=1 4>10");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("result 1000 ok");
    H->now += 5;
    pk_server_role_serve(H->role);
    EXPECT("finished g1 round=1", "get_resp g1 round=1 hits=01 ok landing=1 sources=-");
    s_counters(1, 1, 1, 0);
    s_settle();
}
END_TEST

//  An abort once something was written: the parked lookup goes, and the
//  ack waits for the fence of what is in flight and counts it.
START_TEST(test_get_stream_abort_after_writes)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_set("bb", PK_LOOKUP_HIT_PENDING, 5);
    s_get("g1", 1, 2, "aa", 10, "bb", 11);
    pk_server_role_serve(H->role);
    H->nlog = 0;
    s_hold(1);
    pk_server_role_on_abort(H->role, "g1", 1);
    EXPECT("cancel wait 1");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("abort_ack g1 round=1 landing=1", "result 1000 failed");
    //  the lookup was dropped: its bracket closes at the next serve, and
    //  the key landing later starts nothing
    s_set("bb", PK_LOOKUP_HIT, 5);
    pk_server_role_serve(H->role);
    EXPECT("finished g1 round=1");
    s_settle();
}
END_TEST

//  An abort before anything was pinned: acked at once, nothing landing.
START_TEST(test_get_stream_abort_before_any_write)
{
    s_set("bb", PK_LOOKUP_HIT_PENDING, 5);
    s_get("g1", 1, 1, "bb", 11);
    pk_server_role_serve(H->role);
    EXPECT("open g1 round=1");
    pk_server_role_on_abort(H->role, "g1", 1);
    EXPECT("abort_ack g1 round=1 landing=0");
    pk_server_role_serve(H->role);
    EXPECT("finished g1 round=1");
    s_settle();
}
END_TEST

//  A refused write fails the round: its answer (every hit false, failed)
//  goes once nothing is in flight; the keys pinned later are handed
//  back, and the lookup ends without a second answer.
START_TEST(test_get_stream_write_fails)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_set("bb", PK_LOOKUP_HIT_PENDING, 5);
    s_get("g1", 1, 2, "aa", 10, "bb", 11);
    pk_server_role_serve(H->role);
    H->nlog = 0;
    s_complete(1, false);
    pk_server_role_collect(H->role);
    EXPECT("get_resp g1 round=1 hits=00 failed landing=0 sources=-", "result 1000 failed");
    s_set("bb", PK_LOOKUP_HIT, 5);
    pk_server_role_serve(H->role);
    EXPECT("pin g1 round=1 job=1001 n=1 pinned=1", "result 1001 failed", "finished g1 round=1");
    s_settle();
}
END_TEST

//  The request finished while its get streams: the round fails as a
//  write would, its answer (failed) once what it wrote is fenced.
START_TEST(test_get_stream_finished)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_set("bb", PK_LOOKUP_HIT_PENDING, 5);
    s_get("g1", 1, 2, "aa", 10, "bb", 11);
    pk_server_role_serve(H->role);
    H->nlog = 0;
    s_hold(1);
    ck_assert_int_eq(pk_server_role_finish(H->role, "g1"), 0);
    EXPECT("cancel wait 1");
    s_complete(1, true);
    pk_server_role_collect(H->role);
    EXPECT("get_resp g1 round=1 hits=00 failed landing=1 sources=-", "result 1000 failed");
    s_settle();
}
END_TEST

//  The session closed mid-stream: the write is cut off, the undecided
//  job handed over, the parked lookup owed its bracket, nothing left.
START_TEST(test_get_stream_closed)
{
    s_set("aa", PK_LOOKUP_HIT, 4);
    s_set("bb", PK_LOOKUP_HIT_PENDING, 5);
    s_get("g1", 1, 2, "aa", 10, "bb", 11);
    pk_server_role_serve(H->role);
    H->nlog = 0;
    s_hold(1);
    uint64_t *jobs;
    size_t njobs, owed;
    ck_assert_int_eq(pk_server_role_close(H->role, &jobs, &njobs, &owed), 0);
    EXPECT("cancel immediate 1");
    ck_assert_uint_eq(njobs, 1);
    ck_assert_uint_eq(jobs[0], 1000);
    ck_assert_uint_eq(owed, 1);
    free(jobs);
    s_state(0, 0, 0, 0, 0, 0);
    H->opened = H->finished;        //  close reported the one owed
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("server_role");
    TCase *tc = tcase_create("role");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_lookup_all_hits);
    tcase_add_test(tc, test_lookup_all_misses);
    tcase_add_test(tc, test_lookup_answer_checksums);
    tcase_add_test(tc, test_lookup_mixed_pending_resolves);
    tcase_add_test(tc, test_lookup_kicks_once_per_pass);
    tcase_add_test(tc, test_lookup_pending_expires);
    tcase_add_test(tc, test_lookup_duplicate_keys);
    tcase_add_test(tc, test_lookup_resp_wire_order);
    tcase_add_test(tc, test_lookup_pin_lost_key_is_miss);
    tcase_add_test(tc, test_open_finished_balanced);
    tcase_add_test(tc, test_pd_store_then_fetch);
    tcase_add_test(tc, test_pd_fetch_then_store);
    tcase_add_test(tc, test_partial_matches);
    tcase_add_test(tc, test_overlapping_rounds);
    tcase_add_test(tc, test_unbound_joins_oldest_demand);
    tcase_add_test(tc, test_fetch_order_differs_from_lookup);
    tcase_add_test(tc, test_symmetric_unpinned_fails_at_once);
    tcase_add_test(tc, test_terminal_fetch);
    tcase_add_test(tc, test_terminal_fetch_with_writes_in_flight);
    tcase_add_test(tc, test_finish_without_demand);
    tcase_add_test(tc, test_finish_with_demand);
    tcase_add_test(tc, test_refused_write);
    tcase_add_test(tc, test_refused_write_all_supply);
    tcase_add_test(tc, test_failed_among_siblings);
    tcase_add_test(tc, test_store_timeout_write_in_flight);
    tcase_add_test(tc, test_prefill_finished_then_timeout);
    tcase_add_test(tc, test_abort_nothing_in_flight);
    tcase_add_test(tc, test_abort_write_held);
    tcase_add_test(tc, test_abort_forced_after_drain_timeout);
    tcase_add_test(tc, test_repeated_aborts);
    tcase_add_test(tc, test_abort_unknown);
    tcase_add_test(tc, test_duplicate_fetch);
    tcase_add_test(tc, test_close_with_writes_in_flight);
    tcase_add_test(tc, test_miss_reasons);
    tcase_add_test(tc, test_miss_reasons_off);
    TCase *lend = tcase_create("lend");
    tcase_add_checked_fixture(lend, s_setup_lend, s_teardown);
    tcase_add_test(lend, test_get_lent);
    tcase_add_test(lend, test_get_lent_cut_off);
    tcase_add_test(lend, test_get_lent_abort_waits_for_the_report);
    tcase_add_test(lend, test_get_not_lent_without_the_capability);
    suite_add_tcase(s, lend);
    TCase *stream = tcase_create("stream");
    tcase_add_checked_fixture(stream, s_setup_stream, s_teardown);
    tcase_add_test(stream, test_get_stream_writes_as_pinned);
    tcase_add_test(stream, test_get_stream_not_when_nothing_parks);
    tcase_add_test(stream, test_get_stream_deadline);
    tcase_add_test(stream, test_get_stream_abort_after_writes);
    tcase_add_test(stream, test_get_stream_abort_before_any_write);
    tcase_add_test(stream, test_get_stream_write_fails);
    tcase_add_test(stream, test_get_stream_finished);
    tcase_add_test(stream, test_get_stream_closed);
    suite_add_tcase(s, stream);
    suite_add_tcase(s, tc);
    return pk_test_run("server_role", s);
}
