/*  loop.c: the client's loop: what wakes it (each server's socket and
    completion queue, one timerfd, one eventfd), one step over every
    server, when to spin and when to sleep, p2pkv_client_poll and the
    optional progress thread.  Everything here runs under the client's
    lock (client_internal.h), taken by poll and the thread around a step.
*/
#include "client/client_internal.h"
#include "roles/client_role.h"
#include "roles/client_session.h"
#include "base/clock.h"
#include "base/thread.h"
#include "base/transport.h"

#include <czmq.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

//  --------------------------------------------------------------------------
//  What wakes the client: each server's socket and completion queue, and
//  one timer for everything due later (keepalive, deadlines, reconnects,
//  and progress where a provider has no wait object)

void
pk_client_watch(p2pkv_client_t *self, int fd, bool on)
{
    if (fd < 0)
        return;
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
    epoll_ctl(self->epoll_fd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fd, &ev);
}

//  Two things wake a sleeping client besides its sockets and queues: the
//  timer, for the earliest moment a step has work that no fd announces,
//  and the kick (wake_fd, an eventfd), for work due now.  A ZeroMQ
//  socket's fd only signals changes, so unread messages and a queue the
//  provider says needs progress are due now.
//
//  Why not the timer for both: arming a timerfd that becomes the CPU's
//  earliest timer reprograms the local APIC, a VM exit on a virtual
//  machine (2.2 us measured here, against 0.1 for an eventfd write), and a
//  timer due in a microsecond then fires as an interrupt, another exit.
//  With the timer re-armed at every step and kicked at every call, a
//  profile of one-key lookups pinned to one core put 43% of that core in
//  timerfd_settime.  So a kick is an eventfd write, and the timer is armed
//  only when the new moment is earlier than the armed one (or that one
//  passed): a later moment is met by the earlier fire's step, which arms
//  again.  What that costs: a step that finds nothing to do, at most once
//  per moment that moved later (keepalives move with every message).

void
pk_client_kick(p2pkv_client_t *self)
{
    if (self->kicked)
        return;
    uint64_t one = 1;
    if (write(self->wake_fd, &one, sizeof one) == sizeof one)
        self->kicked = true;
}

//  Whether s's channel may have something to land, so that it needs
//  progress and its queue's descriptor a watch: a fetch is open, or the
//  session is not up yet.  A consumer's channel posts nothing itself, so
//  with no fetch open nothing comes on it, and libfabric's progress and
//  fi_trywait (six epoll_waits per lookup on tcp, 1.3 us each on this VM)
//  are skipped.  The descriptor leaves the epoll set meanwhile: one that
//  fires then (the server's connection closing) would wake a loop that
//  does not progress it, again and again.
//
//  It leaves S_LAND_LINGER after the last load was seen open, not at
//  once: gets back to back (one load each) took it out and put it back
//  at every get, two epoll_ctl calls per get for nothing.  Meanwhile the
//  channel is progressed as while landing, so a descriptor that fires is
//  read, not a loop that wakes again and again.  What it costs: a lookup
//  within the linger of a fetch's end pays the progress it skipped
//  before (two empty epoll_waits per step on tcp).
#define S_LAND_LINGER 0.001

static bool
s_landing(p2pkv_client_t *self, s_server_t *s)
{
    double now = pk_clock_monotonic();
    bool open = s->channel && (!s->role || pk_client_role_open_loads(s->role) > 0);
    if (open)
        s->loads_seen = now;
    bool landing = s->channel && (open || now - s->loads_seen < S_LAND_LINGER);
    if (s->wait_fd >= 0 && landing != s->cq_watched) {
        pk_client_watch(self, s->wait_fd, landing);
        s->cq_watched = landing;
    }
    return landing;
}

void
pk_client_arm(p2pkv_client_t *self)
{
    double now = pk_clock_monotonic(), due = now + 1.0;
    for (int i = 0; i < self->nservers; i++) {
        s_server_t *s = self->servers[i];
        if (!s)
            continue;
        double t = pk_client_session_due(s->session);
        if (s->state == P2PKV_SERVER_DOWN || s->state == P2PKV_SERVER_STOPPED) {
            if (t < due)
                due = t;
            continue;
        }
        if (s->dealer && !s->dealer_read) {
            if (zsock_events(s->dealer) & ZMQ_POLLIN)
                due = now;
            else
                s->dealer_read = true;
        }
        //  a lingering watch (no load open) is not worth fi_trywait's
        //  epoll_waits: nothing is due on it, and what fires is read
        if (s_landing(self, s) && (!s->role || pk_client_role_open_loads(s->role) > 0)) {
            if (!pk_channel_trywait(s->channel))
                due = now;
            if (s->wait_fd < 0 && now + 0.002 < due)
                due = now + 0.002;
        }
        if (s->role && pk_client_role_has_queued(s->role))
            due = now;
        //  load deadlines are coarse (seconds): a 10 ms look is enough
        if (s->role && pk_client_role_open_loads(s->role) && now + 0.01 < t)
            t = now + 0.01;
        if (t < due)
            due = t;
    }
    //  a two-step get's deadline while it looks up, or its end decided
    double t = pk_client_steps_due(self);
    if (t < due)
        due = t;
    if (due <= now) {
        pk_client_kick(self);
        return;
    }
    if (self->armed > now && self->armed <= due)
        return;                 //  it fires first; that step arms again
    struct itimerspec its = { .it_value = { (time_t) due,
                                            (long) ((due - (time_t) due) * 1e9) } };
    if (timerfd_settime(self->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        self->armed = due;
}

//  One server's turn: what arrived, the role's work, then whatever the
//  session has due (a reconnect, connect again, ping, silence).
void
pk_client_server_step(p2pkv_client_t *self, s_server_t *s)
{
    double now = pk_clock_monotonic();
    if (s_landing(self, s) && pk_channel_progress(s->channel) > 0)
        s->last_landed = now;
    //  refused (the key, or CURVE on one side only): retrying cannot help.
    //  Before the connect returned, whatever else the watch found (nothing
    //  listens there, not a ZeroMQ port) ends it too; a session that was
    //  up retries those (the server restarts).  Only a handshake is
    //  watched, never an UP session's traffic, so the watch costs an UP
    //  server's step nothing (ZMQ_EVENTS may poll the socket's mailbox)
    char why[PK_ERRLEN];
    if (s->watch.monitor && !s->refused && s->state != P2PKV_SERVER_UP
        && (s->refused = pk_client_watch_step(&s->watch, why, sizeof why))) {
        pk_client_session_disconnect(s->session, PK_DISC_RETIRED, why);
        snprintf(s->reason, sizeof s->reason, "%s", why);
        return;
    }
    //  The session may end while reading (a violation closes the socket).
    //  Reading until nothing comes costs libzmq's look at its mailbox (a
    //  getpid and a poll) once, not once per frame as asking ZMQ_EVENTS
    //  before each read did; and a read that found nothing leaves the fd
    //  armed, so pk_client_arm need not ask again (dealer_read).
    while (s->dealer) {
        zframe_t *f = zframe_recv_nowait(s->dealer);
        if (!f) {
            s->dealer_read = true;
            break;
        }
        pk_client_session_on_frame(s->session, zframe_data(f), zframe_size(f));
        zframe_destroy(&f);
    }
    if (s->role && s->state == P2PKV_SERVER_UP) {
        pk_client_role_flush(s->role);
        pk_client_role_tick(s->role);
    }
    //  The role cut this server off (an abort not acknowledged in time,
    //  landing blocks that never came): a session without its channel can
    //  fetch nothing, so it ends as after any loss and a new one follows,
    //  with a new endpoint and registration (protocol.md section 7).
    if (s->role && s->state == P2PKV_SERVER_UP && !s->channel)
        pk_client_session_lost(s->session, "cut off: an abort was not acknowledged in time, "
                               "or blocks announced as landing never came");
    //  A stuck server (stopped, wedged) keeps its connections open and
    //  says nothing for silence_timeout; a fetch that began to land (a
    //  completion since the last fetch started or ended) and then sees
    //  nothing land for stall_timeout is not worth waiting that long for.
    //  A fetch still waiting for a prefill store has had no completion, and
    //  is left to its load timeout.  (The transport's own stall deadline never fires
    //  here: a consumer's channel posts no writes.)
    now = pk_clock_monotonic();
    if (s->role && s->state == P2PKV_SERVER_UP && pk_client_role_open_loads(s->role)
        && s->last_landed > s->stall_floor && now - s->last_landed >= self->config.stall_timeout) {
        char reason[96];
        snprintf(reason, sizeof reason, "transfer stalled: nothing landed for %.1f s",
                 now - s->last_landed);
        pk_client_session_lost(s->session, reason);
    }
    pk_client_session_tick(s->session);
}

int
p2pkv_client_fd(p2pkv_client_t *self)
{
    return self->epoll_fd;
}

//  One pass over every server; the timer is read, so it stops signalling.
//  Setting it again (pk_client_arm, with fi_trywait on every queue) is left to
//  whoever is about to sleep or return: not once per spin.
static int
s_step(p2pkv_client_t *self)
{
    //  The timer can have fired only once its moment passed, and it is
    //  one-shot: once read past its moment, nothing is armed (HUGE_VAL)
    //  until pk_client_arm sets it again, and a spin does not read it again at
    //  every turn (a failed read, 1.3 us here).  Should the read come just
    //  before the fire, pk_client_arm's timerfd_settime clears the late fire.
    uint64_t count;
    if (self->armed <= pk_clock_monotonic()) {
        if (read(self->timer_fd, &count, sizeof count) < 0) {
            //  already read, or not fired yet: nothing to clear
        }
        self->armed = HUGE_VAL;
    }
    if (self->kicked && read(self->wake_fd, &count, sizeof count) == sizeof count)
        self->kicked = false;
    self->ran = 0;
    for (int i = 0; i < self->nservers; i++)
        if (self->servers[i])
            pk_client_server_step(self, self->servers[i]);
    //  two-step gets decided outside a load, reported now (get_steps.c)
    if (self->agets)
        pk_client_steps_step(self);
    return self->ran;
}

//  Loads, and two-step gets still looking up (get_steps.c): each a fetch
//  to the caller.
static size_t
s_open_fetches(const p2pkv_client_t *self)
{
    size_t n = pk_client_steps_looking(self);
    for (int i = 0; i < self->nservers; i++)
        if (self->servers[i] && self->servers[i]->role)
            n += pk_client_role_open_loads(self->servers[i]->role);
    return n;
}

//  Spin while blocks are landing (a wakeup per write costs about 10% of
//  the throughput), or while fetches run on a channel without a wait
//  object, or for answer_spin after a request while its answer is due;
//  otherwise sleep on the fd: a fetch may wait seconds for a prefill
//  store, and spinning then burns a core.
//
//  How the spin looks differs.  While blocks land (one landed in the
//  last 2 ms), and on a channel without a wait object, it steps:
//  something is due at nearly every look, only a step (libfabric's
//  progress) finds it, and arming between looks would cost fi_trywait's
//  calls (and a kick, where a copy is under way: mmap) each time.
//  Otherwise, while an answer is due, it looks at the client's fd
//  (S_LOOK, s_look): armed, that fd says when the socket or a queue has
//  something, and one epoll_wait with no timeout costs what one of a
//  step's several calls does (progress's two epoll_waits, libzmq's
//  getpid and poll of its mailbox).  A one-block get spent most of its
//  round trip stepping there (design.md, "Where a one-block get
//  stands"), and a step it was in when the answer came delayed its
//  reading.
enum { S_SLEEP, S_LOOK, S_STEP };

static int
s_must_spin(const p2pkv_client_t *self)
{
    double now = pk_clock_monotonic();
    bool answer_due = now - self->asked < self->config.answer_spin;
    bool look = false, step = false;
    for (int i = 0; i < self->nservers; i++) {
        const s_server_t *s = self->servers[i];
        if (!s || !s->role)
            continue;
        size_t loads = pk_client_role_open_loads(s->role);
        if (s->channel && loads && s->wait_fd < 0)
            return S_STEP;          //  nothing to look at: only progress sees it
        if (answer_due && (loads || pk_client_role_open_lookups(s->role)
                           || pk_client_role_has_queued(s->role)))
            look = true;
        if (s->channel && loads && now - s->last_landed < 0.002)
            step = true;
    }
    return step ? S_STEP : look ? S_LOOK : S_SLEEP;
}

//  The spin of S_LOOK: the client was armed (its sockets read until
//  empty, its queues' fi_trywait said yes, or a kick was written), so its
//  fd is readable once anything is due; it is asked with no timeout, the
//  core given away between looks, until it is or until.
static void
s_look(p2pkv_client_t *self, double until)
{
    struct epoll_event ev[8];
    while (epoll_wait(self->epoll_fd, ev, 8, 0) == 0 && pk_clock_monotonic() < until)
        sched_yield();
}

int
p2pkv_client_poll(p2pkv_client_t *self, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    //  An arm that found something due now (a queue whose fi_trywait says
    //  no, a socket still holding messages) kicked, so the look would
    //  return at once, without yielding: this call steps from then on,
    //  as it did before looks, rather than paying fi_trywait and a kick
    //  per turn (a cancelled fetch's wait for its abort_ack did: control's
    //  cancel row fell to 0.6x)
    bool no_look = false;
    while (true) {
        pthread_mutex_lock(&self->lock);
        int ran = s_step(self);
        int spin = s_must_spin(self);
        if (spin == S_LOOK && no_look)
            spin = S_STEP;
        double left = deadline - pk_clock_monotonic();
        double look_until = self->asked + self->config.answer_spin;
        if (look_until > deadline)
            look_until = deadline;
        if (ran || left <= 0 || spin != S_STEP)
            pk_client_arm(self);
        if (spin == S_LOOK && self->kicked) {
            no_look = true;
            spin = S_STEP;
        }
        pthread_mutex_unlock(&self->lock);
        if (ran || left <= 0)
            return ran;
        //  sleep until something is due, unless only spinning sees it;
        //  a spin gives the core away where others wait for it (free on
        //  an idle core: sched_yield returns at once; on two cores with 64
        //  consumers, the server's writes and the other consumers' copies
        //  are what the spinner waits for)
        if (spin == S_SLEEP) {
            struct epoll_event ev[8];
            int ms = (int) (left * 1000) + 1;
            epoll_wait(self->epoll_fd, ev, 8, ms > 100 ? 100 : ms);
        }
        else if (spin == S_LOOK)
            s_look(self, look_until);
        else
            sched_yield();
    }
}

size_t
p2pkv_client_open_fetches(const p2pkv_client_t *self)
{
    pthread_mutex_t *lock = (pthread_mutex_t *) &self->lock;
    pthread_mutex_lock(lock);
    size_t n = s_open_fetches(self);
    pthread_mutex_unlock(lock);
    return n;
}

void *
pk_client_progress_thread(void *arg)
{
    p2pkv_client_t *self = arg;
    pk_thread_block_signals();      //  the application's signals are not ours
    while (!atomic_load(&self->stopping)) {
        struct epoll_event ev[8];
        pthread_mutex_lock(&self->lock);
        bool spin = s_must_spin(self) != S_SLEEP;
        if (!spin)
            pk_client_arm(self);
        pthread_mutex_unlock(&self->lock);
        if (!spin)
            epoll_wait(self->epoll_fd, ev, 8, 100);
        else
            sched_yield();
        pthread_mutex_lock(&self->lock);
        s_step(self);
        pthread_mutex_unlock(&self->lock);
    }
    return NULL;
}
