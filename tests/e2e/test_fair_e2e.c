/*  test_fair_e2e.c: the writes' fair share (lib/daemon/scheduler.c)
    through a real p2pkv-server: a consumer fetching one block at a time
    beside greedy ones fetching whole rounds back to back, all served
    through a credit of one block, so that every write of every session
    waits for the scheduler's grant.

    What is asserted is progress, by events, never by time: the small
    consumer's fetches all end well while the greedy ones' keep running
    and end well too; a greedy one cut off in the middle of its round
    gives its credit back (with a credit of one block, a leak would stop
    every session, and the test at its bound); the per-session queueing
    delay is counted in the engine API's stats.  A round aborted while
    its blocks wait for credit gives the credit back with its session
    alive, and the scheduler is off by default.  One thread drives every
    consumer, so each is served only as fast as the loop comes back to it.
*/
#include "e2e.h"
#include "base/clock.h"
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#define NGREEDY 2
#define ROUND 32                    //  blocks of a greedy round: every block held
#define SMALL_FETCHES 10

typedef struct {
    tc_t *tc;
    const char *name;
    size_t n;                       //  blocks per fetch
    uint32_t first;                 //  destination blocks first..first+n-1
    uint64_t round;                 //  the fetch in flight's, or the last one's
    bool busy;                      //  a fetch in flight
    int done;                       //  fetches ended well
} s_consumer_t;

static void
s_start_fetch(s_consumer_t *c, const pk_key_t *keys)
{
    char kv[64];
    c->round++;
    snprintf(kv, sizeof kv, "%s-%llu", c->name, (unsigned long long) c->round);
    tc_lookup_hits(c->tc, kv, c->round, keys, c->n);
    uint32_t idx[ROUND];
    for (size_t i = 0; i < c->n; i++)
        idx[i] = c->first + (uint32_t) i;
    ck_assert_int_eq(tc_send(c->tc, tc_fetch(kv, c->round, keys, idx, c->n)), 0);
    c->busy = true;
}

//  One look at c: its next message, if one came; a transfer_done ends
//  its fetch (well: asserted).
static void
s_look(s_consumer_t *c)
{
    pk_msg_t *m = tc_recv(c->tc, 0.001);
    if (!m)
        return;
    if (m->type == PK_MSG_TRANSFER_DONE) {
        ck_assert_msg(m->success, "%s: round %llu failed", c->name,
                      (unsigned long long) m->round_seq);
        ck_assert_uint_eq(m->round_seq, c->round);
        ck_assert_uint_eq(m->landing, c->n);
        c->busy = false;
        c->done++;
    }
    else
        ck_assert_msg(m->type == PK_MSG_PONG, "%s: unexpected message %d (%s)", c->name,
                      m->type, m->reason ? m->reason : "");
    pk_msg_destroy(&m);
}

//  Drives every consumer until the small one has ended want more
//  fetches and every greedy one still in play has ended at least one
//  more round, within 60 s.
static void
s_run(s_consumer_t *small, s_consumer_t *greedy, size_t ngreedy, const pk_key_t *keys,
      int want)
{
    int small_goal = small->done + want;
    int goal[NGREEDY];
    for (size_t g = 0; g < ngreedy; g++)
        goal[g] = greedy[g].done + 1;
    double deadline = pk_clock_monotonic() + 60;
    while (true) {
        bool met = small->done >= small_goal;
        for (size_t g = 0; g < ngreedy; g++)
            met = met && (!greedy[g].tc || greedy[g].done >= goal[g]);
        if (met)
            return;
        ck_assert_msg(pk_clock_monotonic() < deadline,
                      "no progress within 60 s: small %d of %d fetches", small->done,
                      small_goal);
        for (size_t g = 0; g < ngreedy; g++)
            if (greedy[g].tc) {
                if (!greedy[g].busy)
                    s_start_fetch(&greedy[g], keys);
                s_look(&greedy[g]);
            }
        if (!small->busy && small->done < small_goal)
            s_start_fetch(small, keys);
        s_look(small);
    }
}

START_TEST(test_small_beside_greedy_makes_progress)
{
    te_t e;
    //  a credit of one block and a quantum of one: every write waits its
    //  turn.  A round is then slow on a loaded machine, and this loop
    //  sends no keepalive: the silence timeout is out of the way.
    const char *const extra[] = { "--fair-inflight", "4096", "--fair-quantum", "4096",
                                  "--silence-timeout", "120", NULL };
    te_start(&e, extra, ROUND, NULL);
    s_consumer_t small = { tc_to(e.server.endpoint, "c-small"), "c-small", 1, 40, 0, false, 0 };
    s_consumer_t greedy[NGREEDY] = {
        { tc_to(e.server.endpoint, "c-greedy0"), "c-greedy0", ROUND, 0, 0, false, 0 },
        { tc_to(e.server.endpoint, "c-greedy1"), "c-greedy1", ROUND, 0, 0, false, 0 },
    };
    s_run(&small, greedy, NGREEDY, e.keys, SMALL_FETCHES);
    //  the small one's last block is the one it asked for, byte for byte
    double deadline = pk_clock_monotonic() + 60;
    while (tc_landed(small.tc, small.round) < 1 && pk_clock_monotonic() < deadline)
        tc_progress(small.tc, 0.01);
    ck_assert_int_eq(memcmp(tc_block(small.tc, 40), bk_hashed(0), TD_BLOCK_LEN), 0);

    //  a greedy one cut off in the middle of a round (a duplicate fetch
    //  is a violation): the others go on
    s_consumer_t *cut = &greedy[0];
    //  its round in flight ended first: its transfer_done may be on its
    //  way already, and a fetch of an ended round is no duplicate (this
    //  failed once on a loaded machine); then a new round and at once its
    //  duplicate, which the server reads before that round can end (its
    //  writes wait for this thread to progress the consumer)
    deadline = pk_clock_monotonic() + 60;
    while (cut->busy) {
        ck_assert_msg(pk_clock_monotonic() < deadline, "the greedy round did not end");
        for (size_t g = 0; g < NGREEDY; g++)
            s_look(&greedy[g]);
    }
    s_start_fetch(cut, e.keys);
    char kv[64];
    snprintf(kv, sizeof kv, "%s-%llu", cut->name, (unsigned long long) cut->round);
    uint32_t idx[ROUND];
    for (uint32_t i = 0; i < ROUND; i++)
        idx[i] = cut->first + i;
    ck_assert_int_eq(tc_send(cut->tc, tc_fetch(kv, cut->round, e.keys, idx, ROUND)), 0);
    pk_msg_t *m;
    while ((m = tc_recv(cut->tc, 60)) && m->type != PK_MSG_DISCONNECT)
        pk_msg_destroy(&m);
    ck_assert_ptr_nonnull(m);
    ck_assert_msg(strncmp(m->reason, "duplicate fetch for c-greedy0-", 30) == 0, "%s",
                  m->reason);
    pk_msg_destroy(&m);
    tc_destroy(&cut->tc);
    s_run(&small, greedy, NGREEDY, e.keys, SMALL_FETCHES);
    ck_assert_int_ge(greedy[1].done, 2);

    //  once the others are idle, the credit is whole again: the session
    //  cut off left nothing granted, in flight or wanted
    deadline = pk_clock_monotonic() + 60;
    while ((small.busy || greedy[1].busy) && pk_clock_monotonic() < deadline) {
        s_look(&small);
        s_look(&greedy[1]);
    }
    ck_assert(!small.busy && !greedy[1].busy);
    while (td_stat(&e.server, "fair.flows") != 2 && pk_clock_monotonic() < deadline)
        zclock_sleep(10);
    ck_assert_int_eq(td_stat(&e.server, "fair.flows"), 2);
    ck_assert_int_eq(td_stat(&e.server, "fair.free"), 1);
    ck_assert_int_eq(td_stat(&e.server, "fair.inflight") + td_stat(&e.server, "fair.granted")
                     + td_stat(&e.server, "fair.wanted"), 0);

    //  the queueing delay, per session (the engine API's stats)
    ck_assert_int_ge(td_stat(&e.server, "session_counts.c-small.write_queue_waits"),
                     2 * SMALL_FETCHES);
    ck_assert_int_ge(td_stat(&e.server, "session_counts.c-greedy1.write_queue_waits"), 2);
    tc_destroy(&small.tc);
    tc_destroy(&greedy[1].tc);
    te_stop(&e);
}
END_TEST

//  A round aborted while most of its blocks wait for credit gives that
//  credit back at once, and the session stays: the session's end (the
//  flow's destruction, which returns everything) is no backstop here.
//  With a credit of one block and a consumer that reads nothing until its
//  abort is sent, the server has at most one block of the round out when
//  the abort comes; the other 31 were wanted from the scheduler, and the
//  cancel must drop them (fair_channel.c, s_drop_rest).
START_TEST(test_abort_returns_the_credit)
{
    te_t e;
    const char *const extra[] = { "--fair-inflight", "4096", "--fair-quantum", "4096", NULL };
    te_start(&e, extra, ROUND, "c-abort");
    tc_t *tc = e.consumer;
    tc_lookup_hits(tc, "c-abort-1", 1, e.keys, ROUND);
    uint32_t idx[ROUND];
    for (uint32_t i = 0; i < ROUND; i++)
        idx[i] = i;
    ck_assert_int_eq(tc_send(tc, tc_fetch("c-abort-1", 1, e.keys, idx, ROUND)), 0);
    pk_msg_t *m = pk_msg_new(PK_MSG_ABORT_FETCH);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, "c-abort-1");
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, 1);
    ck_assert_int_eq(tc_send(tc, m), 0);
    //  acknowledged once the block out landed (the fence), the rest never
    //  written: the cancel really cut the round short
    m = tc_expect(tc, PK_MSG_ABORT_ACK, 60);
    ck_assert_uint_eq(m->round_seq, 1);
    ck_assert_uint_lt(m->landing, ROUND);
    pk_msg_destroy(&m);

    //  the session is still there, and the credit is whole: nothing of the
    //  aborted round is wanted, granted or in flight.  No wait: the ack
    //  leaves only once the block out was reported, after its credit came
    //  back, and the rest was dropped at the cancel, before it (a wait
    //  here would last until the session's silence timeout, whose end
    //  returns everything)
    ck_assert_int_eq(td_stat(&e.server, "fair.wanted"), 0);
    ck_assert_int_eq(td_stat(&e.server, "fair.granted"), 0);
    ck_assert_int_eq(td_stat(&e.server, "fair.inflight"), 0);
    ck_assert_int_eq(td_stat(&e.server, "fair.free"), 1);
    ck_assert_int_eq(td_stat(&e.server, "fair.flows"), 1);
    ck_assert_int_eq(td_stat(&e.server, "sessions"), 1);
    //  and the same session's next fetch is served with it
    tc_get(tc, "c-abort-2", 2, e.keys, 4, 10, bk_hashed(0));
    te_stop(&e);
}
END_TEST

//  The scheduler is off by default (design.md, "Off by default, for what
//  it costs the greedy ones"): a server started without --fair-* options
//  has none in its stats and counts no queueing delay; --fair-inflight
//  with the default quantum sizes its credit by the block length (4 MiB
//  or 16 blocks, whichever is more).
START_TEST(test_off_by_default)
{
    te_t e;
    te_start(&e, NULL, 4, "c-default");
    tc_get(e.consumer, "r1", 1, e.keys, 4, 10, bk_hashed(0));
    json_t *st = td_stats_json(&e.server);
    ck_assert_ptr_null(json_object_get(st, "fair"));
    json_decref(st);
    ck_assert_int_eq(td_stat(&e.server, "session_counts.c-default.write_queue_waits"), 0);
    te_stop(&e);
    const char *const on[] = { "--fair-inflight", "4194304", NULL };
    te_start(&e, on, 4, "c-on");
    tc_get(e.consumer, "r1", 1, e.keys, 4, 10, bk_hashed(0));
    ck_assert_int_eq(td_stat(&e.server, "fair.flows"), 1);
    ck_assert_int_eq(td_stat(&e.server, "fair.free"), (UINT64_C(4) << 20) / TD_BLOCK_LEN);
    ck_assert_int_ge(td_stat(&e.server, "session_counts.c-on.write_queue_waits"), 1);
    te_stop(&e);
}
END_TEST

//  --fair-inflight 0: the scheduler is off, the sessions write as before
//  (no queueing delay counted), and --fair-weights names namespaces.
START_TEST(test_off_and_bad_weights)
{
    te_t e;
    const char *const extra[] = { "--fair-inflight", "0", NULL };
    te_start(&e, extra, 4, "c-off");
    tc_get(e.consumer, "r1", 1, e.keys, 4, 10, bk_hashed(0));
    ck_assert_int_eq(td_stat(&e.server, "session_counts.c-off.write_queue_waits"), 0);
    te_stop(&e);

    char said[4096];
    const char *const bad[] = { "--fair-weights", "nosuch=2", NULL };
    ck_assert_int_eq(td_run(bad, said, sizeof said), 2);
    ck_assert_msg(strstr(said, "--fair-weights: \"nosuch\" is not a namespace"), "%s", said);
    const char *const badw[] = { "--fair-weights", "shared=0", NULL };
    ck_assert_int_eq(td_run(badw, said, sizeof said), 2);
    ck_assert_msg(strstr(said, "--fair-weights: expected NAMESPACE=WEIGHT"), "%s", said);
}
END_TEST

int
main(void)
{
    int skip = td_suite_start();
    if (skip)
        return skip;
    Suite *s = suite_create("fair_e2e");
    TCase *tc = td_case(s, "e2e", 0);
    tcase_add_test(tc, test_small_beside_greedy_makes_progress);
    tcase_add_test(tc, test_abort_returns_the_credit);
    tcase_add_test(tc, test_off_by_default);
    tcase_add_test(tc, test_off_and_bad_weights);
    return td_run_and_sweep("fair_e2e", s);
}
