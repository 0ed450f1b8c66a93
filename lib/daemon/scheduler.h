/*  scheduler.h: the server's fair share of the data plane across sessions
    (issue 37, point 5; private to lib/daemon).

    Every session's writes ask this one object for room before they go to
    their channel.  The policy is deficit round robin over flows (one flow
    per session), with a shared credit: at most `credit` blocks are granted
    and not yet done, for the whole server, whichever flows hold them.
    When credit frees (a write completed) or a flow asks for more, the
    scheduler hands the free credit out in turns: a flow's turn grants it
    up to its quantum times its weight, then the next flow's turn comes.
    A flow that had nothing granted nor in flight when it asked starts on
    the list of new flows, served before the others (fq_codel's sparse
    flows): a consumer fetching one block waits for the next credit to
    free, not for every greedy flow's turn.  Once its first turn is spent,
    it goes to the back of the common list like any other.

    The last `reserve` blocks of the credit go to new flows only: the old
    ones (greedy, their turns going round) leave that much free, so that a
    flow that asks after being idle is granted at once, not at the next
    completion of someone else's write.  It costs the greedy ones that
    much less in flight.

    A flow holds at most depth turns' worth (its quantum times depth)
    granted and in flight while another flow wants credit: a consumer that
    stopped reading keeps what its writes hold until the channel's stall
    timeout ends them, and without the bound each of its turns would add
    to that until it held the whole credit, starving every other session.
    With it, a stalled session holds one depth; the others share the rest.

    The cap is work conserving: a flow that is the only one wanting may
    take past its cap whatever is free but the reserve (one consumer alone
    posts its whole round).  Once another flow wants, the one past its cap
    gets nothing more until it holds less than its cap; meanwhile the
    reserve serves every flow under its cap, up to it, not only the new
    ones, since what was borrowed may be held by a stalled consumer until
    its stall timeout.

    Counted in blocks, not bytes: every block of a server is block_len
    bytes, so a round robin by blocks is one by bytes.

    The seam.  The scheduler knows nothing of channels or transfers: a
    flow says what it wants (pk_sched_want), takes what it was granted
    (pk_sched_take) and says what completed (pk_sched_done) or what it no
    longer wants (pk_sched_drop).  fair_channel.c is its one user: it
    splits a session's transfers into writes of what was granted.  Per-rail
    queues (several NICs, a round's writes spread over rails) plug in as
    one scheduler per rail, each with its own credit (what that NIC keeps
    in flight), and one flow per session on each: fair_channel then picks
    a rail per write, and each rail is shared fairly on its own.

    Thread-safe: flows are used by their session's actor, and a grant
    made on another actor's thread (its write completed) is seen at the
    flow's next take.  One mutex, held for a few list operations; the
    owner reads its grant without it first (pk_sched_granted).
*/
#ifndef PK_SCHEDULER_H_INCLUDED
#define PK_SCHEDULER_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

typedef struct _pk_sched_t pk_sched_t;
typedef struct _pk_sched_flow_t pk_sched_flow_t;

typedef struct {
    uint64_t credit;            //  blocks granted and not done, at most (>= 1)
    uint64_t quantum;           //  blocks a flow of weight 1 is granted per turn (>= 1)
    uint64_t depth;             //  turns' worth a flow may hold (granted and in
                                //  flight) while others want; 0 = the whole credit
    uint64_t reserve;           //  credit only new flows may be granted (< credit)
} pk_sched_config_t;

typedef struct {
    uint64_t free;              //  credit not granted
    uint64_t granted;           //  granted, not yet taken by their flows
    uint64_t inflight;          //  taken, not yet done
    uint64_t wanted;            //  asked for, not yet granted
    uint64_t flows;             //  flows open
    uint64_t turns;             //  turns given (a flow granted its quantum, or less)
} pk_sched_stats_t;

/*  NULL when out of memory or config is out of range.  */
pk_sched_t *pk_sched_new(const pk_sched_config_t *config);

/*  Every flow must be destroyed first.  Nulls *self_p.  */
void pk_sched_destroy(pk_sched_t **self_p);

void pk_sched_stats(pk_sched_t *self, pk_sched_stats_t *stats);

/*  A flow of weight 1..PK_SCHED_MAX_WEIGHT, or NULL.  */
#define PK_SCHED_MAX_WEIGHT 1000
pk_sched_flow_t *pk_sched_flow_new(pk_sched_t *self, unsigned weight);

/*  What the flow wanted is dropped, and what it was granted or holds in
    flight goes back to the credit (its writes ended with its channel).
    Nulls *flow_p.  */
void pk_sched_flow_destroy(pk_sched_flow_t **flow_p);

/*  The flow wants n blocks more (queued behind what it wanted already).  */
void pk_sched_want(pk_sched_flow_t *flow, uint64_t n);

/*  The flow no longer wants n blocks it asked for and has not taken:
    first what was not yet granted, then what was (back to the credit).  */
void pk_sched_drop(pk_sched_flow_t *flow, uint64_t n);

/*  The flow's quantum (the scheduler's times its weight): the largest
    write its owner hands over at once, so that credit comes back a turn
    at a time, not a whole transfer at a time.  */
uint64_t pk_sched_quantum(const pk_sched_flow_t *flow);

/*  Whether another flow than this one wants credit now (under the lock:
    a hint once it returns).  Its owner hands a grant over a quantum at a
    time only then: alone, a write of all it was granted costs the
    channel one transfer, not one per quantum.  */
bool pk_sched_contended(pk_sched_flow_t *flow);

/*  Blocks granted to the flow (a hint, read without the lock).  */
uint64_t pk_sched_granted(const pk_sched_flow_t *flow);

/*  Takes up to max of the blocks granted to the flow: from now they are
    in flight, until pk_sched_done.  Returns how many.  */
uint64_t pk_sched_take(pk_sched_flow_t *flow, uint64_t max);

/*  n blocks the flow took are done (landed, failed or cancelled): their
    credit goes to whoever's turn it is.  */
void pk_sched_done(pk_sched_flow_t *flow, uint64_t n);

#endif
