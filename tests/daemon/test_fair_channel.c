/*  test_fair_channel.c: a session's writes through the scheduler
    (lib/daemon/fair_channel.c) over the in-memory transport: a greedy
    session's transfer is handed over a grant at a time (a quantum a
    write while another session wants credit), a small one
    beside it gets the next freed credit, the fence holds (a wait-mode
    cancel holds a transfer with writes out, reported only once they
    ended), and a session that goes leaves nothing queued.  */
#include "daemon/fair_channel.h"
#include "sim/memtransport.h"
#include "testutil.h"

#include <errno.h>

static double s_clock;
static double
s_now(void)
{
    return s_clock;
}

typedef struct {
    uint64_t tids[16];
    bool ok[16];
    uint64_t landed[16];
    size_t n;
} s_seen_t;

static void
s_each(void *arg, uint64_t tid, bool ok, uint64_t landed)
{
    s_seen_t *seen = arg;
    ck_assert_uint_lt(seen->n, 16);
    seen->tids[seen->n] = tid;
    seen->ok[seen->n] = ok;
    seen->landed[seen->n++] = landed;
}

typedef struct {
    pk_memtransport_t *mem;
    pk_fair_channel_t *fair;
    pk_transport_t t;
    double waited;
    size_t waits;
} s_session_t;

static void
s_on_wait(void *arg, double seconds)
{
    s_session_t *s = arg;
    s->waited = seconds;
    s->waits++;
}

static void
s_session(s_session_t *s, pk_sched_t *sched)
{
    s->mem = pk_memtransport_new();
    ck_assert_ptr_nonnull(s->mem);
    s->fair = pk_fair_channel_new(sched, 1, pk_memtransport_iface(s->mem), s_now, s_on_wait, s);
    ck_assert_ptr_nonnull(s->fair);
    s->t = pk_fair_channel_transport(s->fair);
}

static void
s_session_end(s_session_t *s)
{
    pk_fair_channel_destroy(&s->fair);
    ck_assert_ptr_null(s->fair);
    pk_memtransport_destroy(&s->mem);
}

static int64_t
s_write(s_session_t *s, uint64_t round, size_t n)
{
    uint32_t local[256], remote[256];
    ck_assert_uint_le(n, 256);
    for (size_t i = 0; i < n; i++)
        local[i] = remote[i] = (uint32_t) i;
    return s->t.write_blocks(s->t.self, round, local, remote, n);
}

//  Completes the inner transfer tid of s, ok.
static void
s_complete(s_session_t *s, uint64_t tid)
{
    pk_memtransport_complete(s->mem, &tid, 1, true);
}

static void
s_stats(pk_sched_t *sched, pk_sched_stats_t *st)
{
    pk_sched_stats(sched, st);
}

//  A greedy session's 100 blocks go over a grant at a time; a small
//  session's one block, asked while the credit is all out, is handed
//  over at the first completion, ahead of the greedy one's next turn,
//  and the greedy transfer is reported once, when its last write ended.
START_TEST(test_small_beside_greedy)
{
    pk_sched_config_t c = { 4, 2, 0, 0 };
    pk_sched_t *sched = pk_sched_new(&c);
    s_session_t g = { 0 }, small = { 0 };
    s_session(&g, sched);
    s_session(&small, sched);
    int64_t gt = s_write(&g, 7, 100);
    ck_assert_int_gt(gt, 0);
    //  alone: the credit's 4 blocks, handed over as one write
    ck_assert_uint_eq(pk_memtransport_inflight(g.mem), 1);
    ck_assert_uint_eq(pk_fair_channel_queued(g.fair), 96);
    s_clock = 1.0;
    int64_t st = s_write(&small, 9, 1);
    ck_assert_int_gt(st, 0);
    ck_assert_uint_eq(pk_memtransport_inflight(small.mem), 0);
    ck_assert_uint_eq(pk_fair_channel_queued(small.fair), 1);
    //  the greedy one's first write completes: its credit is the small one's
    s_complete(&g, 1);
    s_seen_t seen = { 0 };
    g.t.poll(g.t.self, s_each, &seen);
    ck_assert_uint_eq(seen.n, 0);                   //  98 blocks to go
    s_clock = 1.25;
    ck_assert_uint_eq(pk_fair_channel_pump(small.fair), 1);
    ck_assert_uint_eq(pk_memtransport_inflight(small.mem), 1);
    ck_assert_uint_eq(pk_fair_channel_pump(g.fair), 3);    //  the rest of the freed 4
    ck_assert_uint_eq(small.waits, 1);
    ck_assert(small.waited > 0.24 && small.waited < 0.26);
    s_complete(&small, 1);
    small.t.poll(small.t.self, s_each, &seen);
    ck_assert_uint_eq(seen.n, 1);
    ck_assert_uint_eq(seen.tids[0], (uint64_t) st);
    ck_assert(seen.ok[0]);
    //  the greedy one runs to its end, a write at a time
    memset(&seen, 0, sizeof seen);
    for (int guard = 0; guard < 1000 && seen.n == 0; guard++) {
        pk_fair_channel_pump(g.fair);
        uint64_t next = pk_memtransport_next_tid(g.mem);
        for (uint64_t t = 1; t < next; t++)
            s_complete(&g, t);
        g.t.poll(g.t.self, s_each, &seen);
    }
    ck_assert_uint_eq(seen.n, 1);
    ck_assert_uint_eq(seen.tids[0], (uint64_t) gt);
    ck_assert(seen.ok[0]);
    pk_sched_stats_t ss;
    s_stats(sched, &ss);
    ck_assert_uint_eq(ss.free, 4);
    s_session_end(&g);
    s_session_end(&small);
    pk_sched_destroy(&sched);
}
END_TEST

//  The fence: a wait-mode cancel drops what was not handed over, holds
//  a transfer whose writes are out (still), and poll reports it, failed,
//  only once they ended.  One never handed over is released at once.
//  A grant is handed over a quantum a write while another session wants
//  credit (credit comes back a turn at a time), and as one write while
//  nobody else does (one transfer on the channel, not one per quantum).
START_TEST(test_write_size_follows_contention)
{
    pk_sched_config_t c = { 8, 2, 0, 0 };
    pk_sched_t *sched = pk_sched_new(&c);
    s_session_t a = { 0 }, b = { 0 };
    s_session(&a, sched);
    s_session(&b, sched);
    ck_assert_int_gt(s_write(&a, 1, 100), 0);
    ck_assert_uint_eq(pk_memtransport_inflight(a.mem), 1);      //  alone: 8 in one write
    ck_assert_int_gt(s_write(&b, 1, 100), 0);
    ck_assert_uint_eq(pk_memtransport_inflight(b.mem), 0);      //  no credit yet
    s_complete(&a, 1);
    s_seen_t seen = { 0 };
    a.t.poll(a.t.self, s_each, &seen);                          //  8 free: 4 each, in turns
    ck_assert_uint_eq(pk_fair_channel_pump(a.fair), 4);
    ck_assert_uint_eq(pk_fair_channel_pump(b.fair), 4);
    ck_assert_uint_eq(pk_memtransport_inflight(a.mem), 2);      //  contended: 2 writes of 2
    ck_assert_uint_eq(pk_memtransport_inflight(b.mem), 2);
    s_session_end(&a);
    s_session_end(&b);
    pk_sched_destroy(&sched);
}
END_TEST

START_TEST(test_cancel_keeps_the_fence)
{
    pk_sched_config_t c = { 2, 2, 0, 0 };
    pk_sched_t *sched = pk_sched_new(&c);
    s_session_t a = { 0 };
    s_session(&a, sched);
    int64_t t1 = s_write(&a, 1, 10);
    int64_t t2 = s_write(&a, 1, 3);
    ck_assert_uint_eq(pk_memtransport_inflight(a.mem), 1);      //  t1's first 2
    uint64_t running = 1;       //  its write cannot be stopped (on the wire)
    pk_memtransport_hold(a.mem, &running, 1);
    uint64_t tids[2] = { (uint64_t) t1, (uint64_t) t2 }, still[2];
    size_t nstill = a.t.cancel(a.t.self, tids, 2, PK_CANCEL_WAIT, still);
    ck_assert_uint_eq(nstill, 1);
    ck_assert_uint_eq(still[0], (uint64_t) t1);
    ck_assert_uint_eq(pk_fair_channel_queued(a.fair), 0);
    s_seen_t seen = { 0 };
    a.t.poll(a.t.self, s_each, &seen);
    ck_assert_uint_eq(seen.n, 0);       //  t1's write still runs: not reported
    s_complete(&a, 1);
    a.t.poll(a.t.self, s_each, &seen);
    ck_assert_uint_eq(seen.n, 1);
    ck_assert_uint_eq(seen.tids[0], (uint64_t) t1);
    ck_assert(!seen.ok[0]);
    ck_assert_uint_eq(seen.landed[0], 0);      //  the in-memory transport counts none
    pk_sched_stats_t ss;
    s_stats(sched, &ss);
    ck_assert_uint_eq(ss.free, 2);
    ck_assert_uint_eq(ss.wanted, 0);
    s_session_end(&a);
    pk_sched_destroy(&sched);
}
END_TEST

//  A channel that lends (mmap's): the in-memory transport's writes stand
//  in for its lent transfers (a transfer id, ended by completion).
static pk_transport_t s_lender;
static int64_t
s_lend(void *self, uint64_t round_seq, const uint32_t *local, const uint32_t *remote, size_t n)
{
    return s_lender.write_blocks(self, round_seq, local, remote, n);
}

//  A lent get passes the scheduler by: the server writes nothing of it,
//  so it takes no credit even past the whole credit, is handed to the
//  channel's lend at once, reported by poll when the channel ends it,
//  and held by a wait-mode cancel like a write in flight.  Without a
//  lending channel the wrapper has no lend either.
START_TEST(test_lend_passes_the_scheduler_by)
{
    pk_sched_config_t c = { 4, 4, 0, 0 };
    pk_sched_t *sched = pk_sched_new(&c);
    s_session_t a = { 0 };
    s_session(&a, sched);
    ck_assert_ptr_null(a.t.lend);
    pk_fair_channel_destroy(&a.fair);
    s_lender = pk_memtransport_iface(a.mem);
    pk_transport_t inner = s_lender;
    inner.lend = s_lend;
    a.fair = pk_fair_channel_new(sched, 1, inner, s_now, s_on_wait, &a);
    a.t = pk_fair_channel_transport(a.fair);
    ck_assert_ptr_nonnull(a.t.lend);
    uint32_t local[64], remote[64];
    for (uint32_t i = 0; i < 64; i++)
        local[i] = remote[i] = i;
    int64_t t1 = a.t.lend(a.t.self, 1, local, remote, 64);     //  16x the credit
    int64_t t2 = a.t.lend(a.t.self, 2, local, remote, 8);
    ck_assert_int_gt(t1, 0);
    ck_assert_int_gt(t2, t1);
    ck_assert_uint_eq(pk_memtransport_inflight(a.mem), 2);      //  both at once
    pk_sched_stats_t ss;
    s_stats(sched, &ss);
    ck_assert_uint_eq(ss.free, 4);
    ck_assert_uint_eq(ss.wanted, 0);
    ck_assert_uint_eq(ss.inflight, 0);
    ck_assert_uint_eq(pk_fair_channel_queued(a.fair), 0);
    //  a write beside them still gets the whole credit
    ck_assert_int_gt(s_write(&a, 3, 4), 0);
    ck_assert_uint_eq(pk_memtransport_inflight(a.mem), 3);
    //  the first lent transfer ends: reported; the second, cancelled in
    //  wait mode while its copy may run, is held until it ends
    s_complete(&a, 1);
    s_seen_t seen = { 0 };
    a.t.poll(a.t.self, s_each, &seen);
    ck_assert_uint_eq(seen.n, 1);
    ck_assert_uint_eq(seen.tids[0], (uint64_t) t1);
    ck_assert(seen.ok[0]);
    uint64_t running = 2, tid = (uint64_t) t2, still[1];
    pk_memtransport_hold(a.mem, &running, 1);
    ck_assert_uint_eq(a.t.cancel(a.t.self, &tid, 1, PK_CANCEL_WAIT, still), 1);
    ck_assert_uint_eq(still[0], tid);
    s_complete(&a, 2);
    seen.n = 0;
    a.t.poll(a.t.self, s_each, &seen);
    ck_assert_uint_eq(seen.n, 1);
    ck_assert_uint_eq(seen.tids[0], tid);
    s_session_end(&a);
    pk_sched_destroy(&sched);
}
END_TEST

//  Poll's order: successes in ascending id, then failures.
START_TEST(test_poll_order)
{
    pk_sched_config_t c = { 16, 16, 0, 0 };
    pk_sched_t *sched = pk_sched_new(&c);
    s_session_t a = { 0 };
    s_session(&a, sched);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(s_write(&a, 1, 1), i + 1);
    uint64_t ok[2] = { 4, 2 }, bad[2] = { 1, 3 };
    pk_memtransport_complete(a.mem, bad, 2, false);
    pk_memtransport_complete(a.mem, ok, 2, true);
    s_seen_t seen = { 0 };
    a.t.poll(a.t.self, s_each, &seen);
    ck_assert_uint_eq(seen.n, 4);
    uint64_t want[4] = { 2, 4, 1, 3 };
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(seen.tids[i], want[i]);
        ck_assert(seen.ok[i] == (i < 2));
    }
    s_session_end(&a);
    pk_sched_destroy(&sched);
}
END_TEST

//  A refused write is the caller's at once when the grant was there;
//  later, it fails its transfer.
START_TEST(test_refused_write)
{
    pk_sched_config_t c = { 2, 2, 0, 0 };
    pk_sched_t *sched = pk_sched_new(&c);
    s_session_t a = { 0 };
    s_session(&a, sched);
    pk_memtransport_refuse(a.mem, 1);
    ck_assert_int_lt(s_write(&a, 1, 1), 0);
    int64_t t = s_write(&a, 1, 1);
    ck_assert_int_gt(t, 0);
    pk_sched_stats_t ss;
    s_stats(sched, &ss);
    ck_assert_uint_eq(ss.free + ss.inflight, 2);
    s_session_end(&a);
    pk_sched_destroy(&sched);
}
END_TEST

//  A session cut off (the role cancels immediately, then the path goes)
//  leaves nothing queued nor held: the scheduler's credit is whole and
//  the greedy one beside it takes all of it.
START_TEST(test_cut_off_leaves_nothing)
{
    pk_sched_config_t c = { 8, 2, 0, 0 };
    pk_sched_t *sched = pk_sched_new(&c);
    s_session_t a = { 0 }, b = { 0 };
    s_session(&a, sched);
    s_session(&b, sched);
    int64_t ta = s_write(&a, 1, 50);
    ck_assert_int_gt(s_write(&b, 1, 50), 0);
    uint64_t tid = (uint64_t) ta, still;
    ck_assert_uint_eq(a.t.cancel(a.t.self, &tid, 1, PK_CANCEL_IMMEDIATE, &still), 0);
    ck_assert_uint_eq(pk_memtransport_inflight(a.mem), 0);
    s_session_end(&a);
    pk_fair_channel_pump(b.fair);
    pk_sched_stats_t ss;
    s_stats(sched, &ss);
    ck_assert_uint_eq(ss.flows, 1);
    ck_assert_uint_eq(ss.free, 0);
    ck_assert_uint_eq(ss.inflight, 8);          //  all of it b's
    ck_assert_uint_eq(pk_fair_channel_queued(b.fair), 42);
    s_session_end(&b);
    s_stats(sched, &ss);
    ck_assert_uint_eq(ss.free, 8);
    ck_assert_uint_eq(ss.wanted + ss.granted + ss.inflight + ss.flows, 0);
    pk_sched_destroy(&sched);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("fair_channel");
    TCase *tc = tcase_create("fair_channel");
    tcase_add_test(tc, test_small_beside_greedy);
    tcase_add_test(tc, test_write_size_follows_contention);
    tcase_add_test(tc, test_cancel_keeps_the_fence);
    tcase_add_test(tc, test_poll_order);
    tcase_add_test(tc, test_lend_passes_the_scheduler_by);
    tcase_add_test(tc, test_refused_write);
    tcase_add_test(tc, test_cut_off_leaves_nothing);
    suite_add_tcase(s, tc);
    return pk_test_run("fair_channel", s);
}
