/*  test_scheduler.c: the writes' fair share (lib/daemon/scheduler.c),
    alone: the shared credit bounds what is granted, turns go round by
    quantum and weight, a flow that was idle is served first, a flow holds
    no more than its cap while others want but all it wants while nobody
    else does (work conserving), and a flow that goes returns everything
    it held.  No threads: the policy is the
    same whoever calls it.  */
#include "daemon/scheduler.h"
#include "testutil.h"

static pk_sched_t *
s_sched(uint64_t credit, uint64_t quantum)
{
    pk_sched_config_t c = { credit, quantum, 0, 0 };
    pk_sched_t *s = pk_sched_new(&c);
    ck_assert_ptr_nonnull(s);
    return s;
}

static uint64_t
s_free(pk_sched_t *s)
{
    pk_sched_stats_t st;
    pk_sched_stats(s, &st);
    return st.free;
}

//  Nothing granted beyond the credit; what is done goes to the next.
START_TEST(test_credit_bounds_grants)
{
    pk_sched_t *s = s_sched(8, 4);
    pk_sched_flow_t *a = pk_sched_flow_new(s, 1);
    pk_sched_want(a, 100);
    ck_assert_uint_eq(pk_sched_granted(a), 8);
    ck_assert_uint_eq(s_free(s), 0);
    ck_assert_uint_eq(pk_sched_take(a, 100), 8);
    ck_assert_uint_eq(pk_sched_take(a, 100), 0);
    pk_sched_done(a, 3);
    ck_assert_uint_eq(pk_sched_granted(a), 3);
    pk_sched_stats_t st;
    pk_sched_stats(s, &st);
    ck_assert_uint_eq(st.inflight, 5);
    ck_assert_uint_eq(st.granted, 3);
    ck_assert_uint_eq(st.wanted, 89);
    pk_sched_flow_destroy(&a);
    ck_assert_ptr_null(a);
    ck_assert_uint_eq(s_free(s), 8);
    pk_sched_destroy(&s);
}
END_TEST

//  Blocks in flight, oldest first, by the flow that took them: the
//  fabric completes them in order, one per step.
typedef struct {
    pk_sched_flow_t *flows[4];
    size_t nflows;
    int fifo[4096];
    size_t head, tail;
} s_sim_t;

//  Every flow takes what it was granted; returns the flow (index) that
//  took something this step, -1 if none (one at most when credit is 1).
static void
s_sim_take(s_sim_t *sim, uint64_t *got)
{
    for (size_t k = 0; k < sim->nflows; k++) {
        uint64_t t = pk_sched_take(sim->flows[k], 1000000);
        got[k] += t;
        for (uint64_t i = 0; i < t; i++)
            sim->fifo[sim->tail++ % 4096] = (int) k;
    }
}

static void
s_sim_complete_one(s_sim_t *sim)
{
    ck_assert_uint_lt(sim->head, sim->tail);
    int k = sim->fifo[sim->head++ % 4096];
    pk_sched_done(sim->flows[k], 1);
}

//  Two greedy flows: the freed credit goes a quantum to each in turn.
START_TEST(test_turns_alternate_by_quantum)
{
    pk_sched_t *s = s_sched(4, 4);
    s_sim_t sim = { .nflows = 2 };
    sim.flows[0] = pk_sched_flow_new(s, 1);
    sim.flows[1] = pk_sched_flow_new(s, 1);
    pk_sched_want(sim.flows[0], 1000);
    pk_sched_want(sim.flows[1], 1000);
    uint64_t got[2] = { 0, 0 };
    s_sim_take(&sim, got);
    ck_assert_uint_eq(got[0], 4);       //  a's first turn took all the credit
    ck_assert_uint_eq(got[1], 0);
    for (int turn = 1; turn <= 20; turn++) {
        uint64_t before[2] = { got[0], got[1] };
        for (int i = 0; i < 4; i++) {
            s_sim_complete_one(&sim);
            s_sim_take(&sim, got);
        }
        //  each turn's four blocks went to one flow, the other's than before
        int k = turn % 2;
        ck_assert_uint_eq(got[k] - before[k], 4);
        ck_assert_uint_eq(got[!k] - before[!k], 0);
    }
    pk_sched_flow_destroy(&sim.flows[0]);
    pk_sched_flow_destroy(&sim.flows[1]);
    ck_assert_uint_eq(s_free(s), 4);
    pk_sched_destroy(&s);
}
END_TEST

//  Weights: over many turns, grants split as the weights do.
START_TEST(test_weights_split_grants)
{
    pk_sched_t *s = s_sched(2, 2);
    s_sim_t sim = { .nflows = 2 };
    sim.flows[0] = pk_sched_flow_new(s, 3);
    sim.flows[1] = pk_sched_flow_new(s, 1);
    pk_sched_want(sim.flows[0], 100000);
    pk_sched_want(sim.flows[1], 100000);
    uint64_t got[2] = { 0, 0 };
    s_sim_take(&sim, got);
    for (int i = 0; i < 8000; i++) {
        s_sim_complete_one(&sim);
        s_sim_take(&sim, got);
    }
    //  3:1, to within a turn (6 blocks)
    ck_assert_uint_eq(got[0] + got[1], 8002);
    ck_assert_uint_ge(got[0] + 6, 3 * got[1]);
    ck_assert_uint_le(got[0], 3 * got[1] + 6);
    pk_sched_flow_destroy(&sim.flows[0]);
    pk_sched_flow_destroy(&sim.flows[1]);
    pk_sched_destroy(&s);
}
END_TEST

//  A flow idle until it asks goes before the flows whose turns are
//  going round: the next freed credit is its, not the greedy ones'.
START_TEST(test_idle_flow_goes_first)
{
    pk_sched_t *s = s_sched(8, 2);
    pk_sched_flow_t *g1 = pk_sched_flow_new(s, 1), *g2 = pk_sched_flow_new(s, 1);
    pk_sched_flow_t *small = pk_sched_flow_new(s, 1);
    pk_sched_want(g1, 1000);
    pk_sched_want(g2, 1000);
    ck_assert_uint_eq(pk_sched_take(g1, 1000) + pk_sched_take(g2, 1000), 8);
    pk_sched_done(g1, 2);       //  g2's first turn: both greedy ones now take turns
    ck_assert_uint_eq(pk_sched_take(g2, 1000), 2);
    pk_sched_want(small, 1);
    ck_assert_uint_eq(pk_sched_granted(small), 0);     //  no credit yet
    pk_sched_done(g1, 1);
    ck_assert_uint_eq(pk_sched_granted(small), 1);     //  the first freed block
    ck_assert_uint_eq(pk_sched_granted(g1) + pk_sched_granted(g2), 0);
    ck_assert_uint_eq(pk_sched_take(small, 1), 1);
    pk_sched_done(small, 1);
    //  small wants nothing more: its block goes round to the greedy
    ck_assert_uint_eq(pk_sched_granted(g1) + pk_sched_granted(g2), 1);
    pk_sched_flow_destroy(&small);
    pk_sched_flow_destroy(&g1);
    pk_sched_flow_destroy(&g2);
    pk_sched_destroy(&s);
}
END_TEST

//  A flow that still has writes in flight is not new: it waits its turn.
START_TEST(test_busy_flow_is_not_new)
{
    pk_sched_t *s = s_sched(4, 4);
    pk_sched_flow_t *g = pk_sched_flow_new(s, 1), *h = pk_sched_flow_new(s, 1);
    pk_sched_want(g, 4);
    ck_assert_uint_eq(pk_sched_take(g, 4), 4);
    pk_sched_want(h, 8);        //  waits for credit, at the head of new
    pk_sched_want(g, 8);        //  g holds 4 in flight: old
    pk_sched_done(g, 4);
    ck_assert_uint_eq(pk_sched_granted(h), 4);
    ck_assert_uint_eq(pk_sched_granted(g), 0);
    pk_sched_flow_destroy(&g);
    pk_sched_flow_destroy(&h);
    pk_sched_destroy(&s);
}
END_TEST

//  Dropping what was wanted: first the ungranted part, then the grant,
//  which goes to others.
START_TEST(test_drop_returns_grant)
{
    pk_sched_t *s = s_sched(4, 4);
    pk_sched_flow_t *a = pk_sched_flow_new(s, 1), *b = pk_sched_flow_new(s, 1);
    pk_sched_want(a, 6);        //  4 granted, 2 wanted
    pk_sched_want(b, 3);
    ck_assert_uint_eq(pk_sched_granted(a), 4);
    pk_sched_drop(a, 3);        //  the 2 wanted, then 1 of the grant
    ck_assert_uint_eq(pk_sched_granted(a), 3);
    ck_assert_uint_eq(pk_sched_granted(b), 1);
    pk_sched_drop(a, 3);
    ck_assert_uint_eq(pk_sched_granted(a), 0);
    ck_assert_uint_eq(pk_sched_granted(b), 3);
    ck_assert_uint_eq(s_free(s), 1);
    pk_sched_flow_destroy(&a);
    pk_sched_flow_destroy(&b);
    ck_assert_uint_eq(s_free(s), 4);
    pk_sched_destroy(&s);
}
END_TEST

//  A flow that goes (its session cut off) leaves nothing behind: its
//  want, grant and in-flight blocks all go to the others.
START_TEST(test_gone_flow_leaves_nothing)
{
    pk_sched_t *s = s_sched(6, 2);
    pk_sched_flow_t *a = pk_sched_flow_new(s, 1), *b = pk_sched_flow_new(s, 1);
    pk_sched_want(a, 100);
    ck_assert_uint_eq(pk_sched_take(a, 2), 2);          //  2 in flight, 4 granted
    pk_sched_want(b, 100);
    pk_sched_flow_destroy(&a);
    ck_assert_uint_eq(pk_sched_granted(b), 6);
    pk_sched_stats_t st;
    pk_sched_stats(s, &st);
    ck_assert_uint_eq(st.flows, 1);
    ck_assert_uint_eq(st.inflight, 0);
    ck_assert_uint_eq(st.wanted, 94);
    pk_sched_flow_destroy(&b);
    pk_sched_stats(s, &st);
    ck_assert_uint_eq(st.free, 6);
    ck_assert_uint_eq(st.wanted, 0);
    ck_assert_uint_eq(st.granted, 0);
    pk_sched_destroy(&s);
}
END_TEST

//  A flow that stopped (its consumer reads nothing: its writes never
//  complete) after it took what nobody else wanted: once another flow
//  wants, the stalled one gets nothing more until it holds less than its
//  cap, and the other is served again and again from the reserve (up to
//  its own cap), not once and then never until the stall timeout.
START_TEST(test_stalled_flow_held_to_its_depth)
{
    pk_sched_config_t c = { 16, 2, 2, 2 };     //  cap 4, reserve 2
    pk_sched_t *s = pk_sched_new(&c);
    ck_assert_ptr_nonnull(s);
    pk_sched_flow_t *stalled = pk_sched_flow_new(s, 1), *other = pk_sched_flow_new(s, 1);
    pk_sched_want(stalled, 1000);
    ck_assert_uint_eq(pk_sched_take(stalled, 1000), 14);   //  alone: all but the reserve
    pk_sched_want(other, 1000);
    ck_assert_uint_eq(pk_sched_take(other, 1000), 2);       //  new: the reserve
    //  the other one's writes complete, over and over: the stalled one
    //  gets nothing more, the other one what is free
    for (int i = 0; i < 100; i++) {
        pk_sched_done(other, 2);
        ck_assert_uint_eq(pk_sched_take(other, 1000), 2);
        ck_assert_uint_eq(pk_sched_granted(stalled), 0);
    }
    //  the stalled one's writes end (its stall timeout), down to its cap:
    //  still nothing for it, and the other one stays within its own cap
    pk_sched_done(stalled, 10);
    ck_assert_uint_eq(pk_sched_granted(stalled), 0);
    ck_assert_uint_eq(pk_sched_take(other, 1000), 2);       //  up to its cap of 4
    pk_sched_stats_t st;
    pk_sched_stats(s, &st);
    ck_assert_uint_eq(st.inflight, 8);
    ck_assert_uint_eq(st.free, 8);
    pk_sched_done(stalled, 1);
    ck_assert_uint_eq(pk_sched_take(stalled, 1000), 1);    //  under its cap: back in line
    pk_sched_flow_destroy(&stalled);
    pk_sched_flow_destroy(&other);
    pk_sched_destroy(&s);
}
END_TEST

//  Work conserving: a flow that nobody else competes with is not held
//  to its cap; it takes every block it wants of the credit, all but the
//  reserve, which stays the new flows'.
START_TEST(test_alone_takes_the_credit)
{
    pk_sched_config_t c = { 64, 4, 4, 4 };     //  cap 16 (4 turns of 4)
    pk_sched_t *s = pk_sched_new(&c);
    ck_assert_ptr_nonnull(s);
    pk_sched_flow_t *a = pk_sched_flow_new(s, 1);
    pk_sched_want(a, 32);                       //  a round of 32 blocks, whole
    ck_assert_uint_eq(pk_sched_take(a, 1000), 32);
    pk_sched_want(a, 1000);
    ck_assert_uint_eq(pk_sched_take(a, 1000), 28);         //  up to the reserve
    ck_assert_uint_eq(s_free(s), 4);
    //  what completes goes straight back to it
    pk_sched_done(a, 20);
    ck_assert_uint_eq(pk_sched_take(a, 1000), 20);
    ck_assert_uint_eq(s_free(s), 4);
    pk_sched_flow_destroy(&a);
    ck_assert_uint_eq(s_free(s), 64);
    pk_sched_destroy(&s);
}
END_TEST

//  A flow that arrives while another holds all but the reserve is
//  granted at once from the reserve, and again within one quantum's
//  writes of the other; the other, past its cap, gets nothing more while
//  the newcomer wants, until it is under its cap.  Without a reserve, the
//  newcomer is granted the first quantum that completes.
START_TEST(test_second_flow_served_within_a_quantum)
{
    pk_sched_config_t c = { 64, 4, 4, 4 };
    pk_sched_t *s = pk_sched_new(&c);
    ck_assert_ptr_nonnull(s);
    pk_sched_flow_t *a = pk_sched_flow_new(s, 1), *b = pk_sched_flow_new(s, 1);
    pk_sched_want(a, 1000);
    ck_assert_uint_eq(pk_sched_take(a, 1000), 60);
    pk_sched_want(b, 1000);
    ck_assert_uint_eq(pk_sched_take(b, 1000), 4);          //  at once
    for (int i = 0; i < 3; i++) {
        pk_sched_done(a, 4);                                //  one write of a quantum
        ck_assert_uint_eq(pk_sched_take(b, 1000), 4);
        ck_assert_uint_eq(pk_sched_granted(a), 0);
    }
    //  b at its cap (16), a still past its: a's writes end, down to its
    //  cap, and nothing goes to it; once under, the turns go round
    pk_sched_done(a, 44 - 16);
    ck_assert_uint_eq(pk_sched_granted(a), 0);
    ck_assert_uint_eq(pk_sched_granted(b), 0);
    pk_sched_done(b, 4);
    ck_assert_uint_eq(pk_sched_take(b, 1000), 4);
    pk_sched_done(a, 4);                                    //  at its cap: not under
    ck_assert_uint_eq(pk_sched_granted(a), 0);
    pk_sched_done(a, 1);
    ck_assert_uint_eq(pk_sched_take(a, 1000), 1);          //  under: up to its cap
    pk_sched_flow_destroy(&a);
    pk_sched_flow_destroy(&b);

    //  no reserve: the first quantum that completes is the newcomer's
    c.reserve = 0;
    pk_sched_t *s0 = pk_sched_new(&c);
    ck_assert_ptr_nonnull(s0);
    a = pk_sched_flow_new(s0, 1);
    b = pk_sched_flow_new(s0, 1);
    pk_sched_want(a, 1000);
    ck_assert_uint_eq(pk_sched_take(a, 1000), 64);
    pk_sched_want(b, 8);
    ck_assert_uint_eq(pk_sched_granted(b), 0);
    for (int i = 0; i < 2; i++) {
        pk_sched_done(a, 4);
        ck_assert_uint_eq(pk_sched_take(b, 1000), 4);
        ck_assert_uint_eq(pk_sched_granted(a), 0);         //  past its cap, b wanted
    }
    //  b wants nothing more: a is alone again and takes what is free
    pk_sched_done(b, 8);
    ck_assert_uint_eq(pk_sched_take(a, 1000), 8);
    pk_sched_flow_destroy(&a);
    pk_sched_flow_destroy(&b);
    pk_sched_destroy(&s0);
    pk_sched_destroy(&s);
}
END_TEST

//  DRR shares still hold with caps: a flow that took the whole credit
//  alone, then two more of weights 3 and 1 beside it; once the first
//  one's borrowed blocks completed, every flow gets its weight's share of
//  what completes, and none holds more than its cap.
START_TEST(test_shares_hold_past_a_borrow)
{
    pk_sched_config_t c = { 32, 2, 4, 2 };      //  caps 8 (weight 1), 24 (weight 3)
    pk_sched_t *s = pk_sched_new(&c);
    ck_assert_ptr_nonnull(s);
    s_sim_t sim = { .nflows = 1 };
    sim.flows[0] = pk_sched_flow_new(s, 1);
    uint64_t got[3] = { 0, 0, 0 };
    pk_sched_want(sim.flows[0], 1000000);
    s_sim_take(&sim, got);
    ck_assert_uint_eq(got[0], 30);              //  alone: all but the reserve
    sim.flows[1] = pk_sched_flow_new(s, 1);
    sim.flows[2] = pk_sched_flow_new(s, 3);
    sim.nflows = 3;
    pk_sched_want(sim.flows[1], 1000000);
    pk_sched_want(sim.flows[2], 1000000);
    for (int i = 0; i < 30; i++) {             //  the borrowed blocks end
        s_sim_complete_one(&sim);
        s_sim_take(&sim, got);
    }
    uint64_t base[3] = { got[0], got[1], got[2] };
    for (int i = 0; i < 10000; i++) {
        s_sim_complete_one(&sim);
        s_sim_take(&sim, got);
        pk_sched_stats_t st;
        pk_sched_stats(s, &st);
        ck_assert_uint_le(st.inflight + st.granted, 30);   //  the reserve stays free
    }
    //  1:1:3, to within two turns each
    uint64_t d0 = got[0] - base[0], d1 = got[1] - base[1], d2 = got[2] - base[2];
    ck_assert_uint_eq(d0 + d1 + d2, 10000);
    ck_assert_uint_le(d0 > d1 ? d0 - d1 : d1 - d0, 4);
    ck_assert_uint_ge(d2 + 12, 3 * d1);
    ck_assert_uint_le(d2, 3 * d1 + 12);
    for (int k = 0; k < 3; k++)
        pk_sched_flow_destroy(&sim.flows[k]);
    pk_sched_destroy(&s);
}
END_TEST

//  The reserve: greedy flows leave it free, and a flow that was idle is
//  granted from it at once, before any write completes.
START_TEST(test_reserve_is_for_new_flows)
{
    pk_sched_config_t c = { 8, 2, 0, 2 };
    pk_sched_t *s = pk_sched_new(&c);
    ck_assert_ptr_nonnull(s);
    pk_sched_flow_t *g = pk_sched_flow_new(s, 1), *small = pk_sched_flow_new(s, 1);
    pk_sched_want(g, 1000);
    //  its first turn (2, as a new flow), then old: up to the reserve
    ck_assert_uint_eq(pk_sched_take(g, 1000), 6);
    pk_sched_want(small, 1);
    ck_assert_uint_eq(pk_sched_take(small, 1), 1);
    pk_sched_stats_t st;
    pk_sched_stats(s, &st);
    ck_assert_uint_eq(st.free, 1);
    ck_assert_uint_eq(pk_sched_granted(g), 0);
    pk_sched_flow_destroy(&small);
    pk_sched_flow_destroy(&g);
    c.reserve = 8;
    ck_assert_ptr_null(pk_sched_new(&c));      //  the reserve is less than the credit
    pk_sched_destroy(&s);
}
END_TEST

START_TEST(test_bad_settings)
{
    pk_sched_config_t c = { 0, 1, 0, 0 };
    ck_assert_ptr_null(pk_sched_new(&c));
    c = (pk_sched_config_t) { 1, 0, 0, 0 };
    ck_assert_ptr_null(pk_sched_new(&c));
    pk_sched_t *s = s_sched(1, 1);
    ck_assert_ptr_null(pk_sched_flow_new(s, 0));
    ck_assert_ptr_null(pk_sched_flow_new(s, PK_SCHED_MAX_WEIGHT + 1));
    pk_sched_destroy(&s);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("scheduler");
    TCase *tc = tcase_create("scheduler");
    tcase_add_test(tc, test_credit_bounds_grants);
    tcase_add_test(tc, test_turns_alternate_by_quantum);
    tcase_add_test(tc, test_weights_split_grants);
    tcase_add_test(tc, test_idle_flow_goes_first);
    tcase_add_test(tc, test_busy_flow_is_not_new);
    tcase_add_test(tc, test_drop_returns_grant);
    tcase_add_test(tc, test_gone_flow_leaves_nothing);
    tcase_add_test(tc, test_stalled_flow_held_to_its_depth);
    tcase_add_test(tc, test_alone_takes_the_credit);
    tcase_add_test(tc, test_second_flow_served_within_a_quantum);
    tcase_add_test(tc, test_shares_hold_past_a_borrow);
    tcase_add_test(tc, test_reserve_is_for_new_flows);
    tcase_add_test(tc, test_bad_settings);
    suite_add_tcase(s, tc);
    return pk_test_run("scheduler", s);
}
