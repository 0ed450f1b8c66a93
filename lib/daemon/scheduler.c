/*  scheduler.c: deficit round robin over the sessions' writes, with a
    shared credit (scheduler.h).

    Every flow is on at most one of three lists: new (it asked while it had
    nothing granted nor in flight), old (its first turn is spent) and capped
    (it holds its cap while others want credit).  The grant loop serves the
    head of new, else the head of old: it grants min(deficit, wanted, free
    credit); a flow whose deficit ran out goes to the back of old with a
    fresh quantum, one that wants nothing more leaves its list (its deficit
    with it: an idle flow saves no turn), and when the credit runs out the
    head keeps its place and what is left of its deficit.  A grant costs
    O(1) list work per turn; the loop runs on every want, drop and done,
    under the mutex, and ends when the credit or the wanting flows run out.

    The cap yields when nobody else wants: the scheduler counts the flows
    that want (waiting) and those holding more than their cap (over), so
    "alone" and "someone borrowed" are one comparison each, not a walk.
*/
#include "daemon/scheduler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef enum { S_NONE, S_NEW, S_OLD, S_CAP } s_list_t;

struct _pk_sched_flow_t {
    pk_sched_t *sched;
    pk_sched_flow_t *prev, *next;   //  on the list named by list
    s_list_t list;
    uint64_t quantum;               //  the scheduler's times the weight
    uint64_t cap;                   //  granted + inflight at most (depth turns)
    uint64_t deficit;               //  what is left of this turn
    uint64_t wanted;                //  asked for, not granted
    _Atomic uint64_t granted;       //  granted, not taken
    uint64_t inflight;              //  taken, not done
    bool over;                      //  granted + inflight > cap (counted in over)
};

struct _pk_sched_t {
    pthread_mutex_t lock;
    pk_sched_config_t config;
    uint64_t free;
    pk_sched_flow_t *head[4], *tail[4];     //  by s_list_t (S_NONE unused)
    uint64_t waiting;                       //  flows that want (wanted > 0)
    uint64_t over;                          //  flows holding more than their cap
    pk_sched_stats_t stats;
};

pk_sched_t *
pk_sched_new(const pk_sched_config_t *config)
{
    if (!config || config->credit < 1 || config->quantum < 1
        || config->reserve >= config->credit)
        goto fail;
    pk_sched_t *self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    if (pthread_mutex_init(&self->lock, NULL) != 0)
        goto fail_self;
    self->config = *config;
    self->free = config->credit;
    return self;

fail_self:
    free(self);
fail:
    return NULL;
}

void
pk_sched_destroy(pk_sched_t **self_p)
{
    pk_sched_t *self = *self_p;
    if (!self)
        return;
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

void
pk_sched_stats(pk_sched_t *self, pk_sched_stats_t *stats)
{
    pthread_mutex_lock(&self->lock);
    *stats = self->stats;
    stats->free = self->free;
    pthread_mutex_unlock(&self->lock);
}

static void
s_unlink(pk_sched_t *self, pk_sched_flow_t *f)
{
    if (f->list == S_NONE)
        return;
    if (f->prev)
        f->prev->next = f->next;
    else
        self->head[f->list] = f->next;
    if (f->next)
        f->next->prev = f->prev;
    else
        self->tail[f->list] = f->prev;
    f->prev = f->next = NULL;
    f->list = S_NONE;
}

static void
s_append(pk_sched_t *self, pk_sched_flow_t *f, s_list_t list)
{
    f->list = list;
    f->next = NULL;
    f->prev = self->tail[list];
    if (self->tail[list])
        self->tail[list]->next = f;
    else
        self->head[list] = f;
    self->tail[list] = f;
}

static uint64_t
s_held(pk_sched_flow_t *f)
{
    return atomic_load(&f->granted) + f->inflight;
}

//  f's wanted went from was to what it is: the count of flows that want
//  follows.
static void
s_waiting(pk_sched_t *self, pk_sched_flow_t *f, uint64_t was)
{
    if (was == 0 && f->wanted > 0)
        self->waiting++;
    else if (was > 0 && f->wanted == 0)
        self->waiting--;
}

//  f's hold changed: whether it is over its cap (borrowed credit) follows.
static void
s_over(pk_sched_t *self, pk_sched_flow_t *f)
{
    bool over = s_held(f) > f->cap;
    if (over != f->over) {
        f->over = over;
        if (over)
            self->over++;
        else
            self->over--;
    }
}

//  A flow held back at its cap is back in line, behind the others, once
//  it holds less than its cap.
static void
s_uncap(pk_sched_t *self, pk_sched_flow_t *f)
{
    if (f->list == S_CAP && s_held(f) < f->cap) {
        s_unlink(self, f);
        f->deficit = f->quantum;
        s_append(self, f, S_OLD);
    }
}

//  Hands the free credit out in turns (the file's comment).
static void
s_grant(pk_sched_t *self)
{
    //  The cap yields when nobody else wants: a flow held back at its cap
    //  that is now the only one wanting takes what is free.  (Held flows
    //  want, so waiting == 1 with one held means it is that one.)
    if (self->waiting == 1 && self->head[S_CAP]) {
        pk_sched_flow_t *f = self->head[S_CAP];
        s_unlink(self, f);
        f->deficit = f->quantum;
        s_append(self, f, S_OLD);
    }
    while (self->free > 0) {
        pk_sched_flow_t *f = self->head[S_NEW] ? self->head[S_NEW] : self->head[S_OLD];
        if (!f)
            return;
        bool alone = self->waiting == 1;        //  f wants: it is the one
        uint64_t held = s_held(f);
        if (held >= f->cap && !alone) {
            //  at its cap and others want: nothing more until a write of
            //  it ends under its cap (s_uncap) or the others are gone
            s_unlink(self, f);
            f->deficit = 0;
            s_append(self, f, S_CAP);
            continue;
        }
        //  alone, a flow may go past its cap: there is no one to starve
        uint64_t room = self->free, limit = alone ? UINT64_MAX : f->cap - held;
        if (f->list == S_OLD) {
            if (self->over > (f->over ? 1 : 0) && held < f->cap) {
                //  others borrowed past their caps (while alone) and their
                //  writes hold it: the reserve serves the flows under their
                //  caps, up to them, else a flow that came after a stalled
                //  one would be served once from the reserve, then never
                //  until the stall timeout
                if (limit > f->cap - held)
                    limit = f->cap - held;
            }
            else    //  the reserve is the new flows'
                room = room > self->config.reserve ? room - self->config.reserve : 0;
        }
        if (room == 0)
            return;             //  the head of old waits; no new flow wants
        uint64_t g = f->deficit < f->wanted ? f->deficit : f->wanted;
        if (g > room)
            g = room;
        if (g > limit)
            g = limit;
        f->deficit -= g;
        f->wanted -= g;
        atomic_fetch_add(&f->granted, g);
        self->free -= g;
        self->stats.wanted -= g;
        self->stats.granted += g;
        s_over(self, f);
        if (f->wanted == 0) {
            s_unlink(self, f);
            f->deficit = 0;
            self->waiting--;
            self->stats.turns++;
        }
        else if (f->deficit == 0) {
            s_unlink(self, f);
            f->deficit = f->quantum;
            s_append(self, f, S_OLD);
            self->stats.turns++;
        }
    }
}

pk_sched_flow_t *
pk_sched_flow_new(pk_sched_t *self, unsigned weight)
{
    if (weight < 1 || weight > PK_SCHED_MAX_WEIGHT)
        return NULL;
    pk_sched_flow_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->sched = self;
    f->quantum = self->config.quantum * weight;
    uint64_t depth = self->config.depth;
    f->cap = depth && f->quantum <= self->config.credit / depth ? f->quantum * depth
                                                                : self->config.credit;
    pthread_mutex_lock(&self->lock);
    self->stats.flows++;
    pthread_mutex_unlock(&self->lock);
    return f;
}

void
pk_sched_flow_destroy(pk_sched_flow_t **flow_p)
{
    pk_sched_flow_t *f = *flow_p;
    if (!f)
        return;
    pk_sched_t *self = f->sched;
    pthread_mutex_lock(&self->lock);
    s_unlink(self, f);
    if (f->wanted > 0)
        self->waiting--;
    if (f->over)
        self->over--;
    uint64_t granted = atomic_load(&f->granted);
    self->stats.wanted -= f->wanted;
    self->stats.granted -= granted;
    self->stats.inflight -= f->inflight;
    self->free += granted + f->inflight;
    self->stats.flows--;
    s_grant(self);
    pthread_mutex_unlock(&self->lock);
    free(f);
    *flow_p = NULL;
}

void
pk_sched_want(pk_sched_flow_t *f, uint64_t n)
{
    if (n == 0)
        return;
    pk_sched_t *self = f->sched;
    pthread_mutex_lock(&self->lock);
    uint64_t was = f->wanted;
    f->wanted += n;
    self->stats.wanted += n;
    s_waiting(self, f, was);
    if (f->list == S_NONE) {
        //  a flow idle until now (nothing granted nor in flight) is new
        bool idle = atomic_load(&f->granted) == 0 && f->inflight == 0;
        f->deficit = f->quantum;
        s_append(self, f, idle ? S_NEW : S_OLD);
    }
    s_grant(self);
    pthread_mutex_unlock(&self->lock);
}

void
pk_sched_drop(pk_sched_flow_t *f, uint64_t n)
{
    if (n == 0)
        return;
    pk_sched_t *self = f->sched;
    pthread_mutex_lock(&self->lock);
    uint64_t was = f->wanted;
    uint64_t w = n < f->wanted ? n : f->wanted;
    f->wanted -= w;
    self->stats.wanted -= w;
    s_waiting(self, f, was);
    n -= w;
    uint64_t granted = atomic_load(&f->granted);
    uint64_t g = n < granted ? n : granted;
    atomic_fetch_sub(&f->granted, g);
    self->stats.granted -= g;
    self->free += g;
    s_over(self, f);
    if (f->wanted == 0) {
        s_unlink(self, f);
        f->deficit = 0;
    }
    else
        s_uncap(self, f);       //  it may hold less than its cap now
    s_grant(self);
    pthread_mutex_unlock(&self->lock);
}

uint64_t
pk_sched_quantum(const pk_sched_flow_t *f)
{
    return f->quantum;
}

bool
pk_sched_contended(pk_sched_flow_t *f)
{
    pk_sched_t *self = f->sched;
    pthread_mutex_lock(&self->lock);
    bool others = self->waiting > (f->wanted > 0 ? 1 : 0);
    pthread_mutex_unlock(&self->lock);
    return others;
}

uint64_t
pk_sched_granted(const pk_sched_flow_t *f)
{
    return atomic_load(&((pk_sched_flow_t *) f)->granted);
}

uint64_t
pk_sched_take(pk_sched_flow_t *f, uint64_t max)
{
    if (atomic_load(&f->granted) == 0 || max == 0)
        return 0;               //  the common look: no lock
    pk_sched_t *self = f->sched;
    pthread_mutex_lock(&self->lock);
    uint64_t granted = atomic_load(&f->granted);
    uint64_t t = max < granted ? max : granted;
    atomic_fetch_sub(&f->granted, t);
    f->inflight += t;
    self->stats.granted -= t;
    self->stats.inflight += t;
    pthread_mutex_unlock(&self->lock);
    return t;
}

void
pk_sched_done(pk_sched_flow_t *f, uint64_t n)
{
    if (n == 0)
        return;
    pk_sched_t *self = f->sched;
    pthread_mutex_lock(&self->lock);
    if (n > f->inflight)
        n = f->inflight;        //  never more than it took: the credit stays exact
    f->inflight -= n;
    self->stats.inflight -= n;
    self->free += n;
    s_over(self, f);
    s_uncap(self, f);
    s_grant(self);
    pthread_mutex_unlock(&self->lock);
}
