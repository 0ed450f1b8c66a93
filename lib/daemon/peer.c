/*  peer.c: one connected consumer (peer.h): its record's life and its
    actor, which owns its data-plane channel, its session and (inside the
    session) its server role.

    The actor opens the channel and the session itself, so connects open in
    parallel, one actor each.  It applies frames as they come, ticks the
    session, keeps the channel progressing and pushes the session's
    counters to the metrics.  It holds the peer's lock except while it
    waits; a frame that comes while it waits with nothing queued the door
    may run itself, under that lock (pk_peer_try_frame), and wakes the
    actor only when the frame left it work.  Every way out (session or channel failed at
    start, the session retired, the pipe interrupted) says GONE once, after
    everything else the actor had to say; then the actor keeps reading its
    pipe until $TERM, so the door can always reap it.

    Words, door -> peer:
        FRAME frame         a frame from the consumer (counted in consumed)
        STORE held          a pk_held_t (store or finish) the actor frees
        VIOLATION reason    retire the session: the consumer floods, or its
                            routing id came under another CURVE key
        RETIRE reason       retire the session (disconnect retired): its
                            CURVE key was revoked
        DRAIN deadline      the server drains (SIGTERM): serve what the
                            consumer asked for already, say settled once
                            the session owes nothing; deadline (monotonic
                            ms) bounds a QUIT that follows
        QUIT                shut down: drain writes (bounded: DRAIN's
                            deadline, or --shutdown-timeout from now), say
                            shutdown
        WAKE                the door ran a frame that left work (writes,
                            parked lookups, the session's end)
        $TERM               (zactor) end
    peer -> door, on the peer's out socket (a PUSH to the door's one
    actors socket), each word after the peer's id (8 bytes):
        FRAME frame         a frame for the consumer
        JOB job success     a job's result (success "1" or "0")
        GONE reason         the actor is done; nothing but JOB follows it

    Test only: when $P2PKV_TEST_FAIL_SESSION names a consumer's peer_id at
    the server's start, that consumer's session fails to be created, as
    on a failed allocation (tests/e2e/test_server_e2e.c, defect 1 of issue 10).
    When $P2PKV_TEST_HOLD_SESSION is "peer_id:path", that consumer's actor
    stands still after its connect_ack until path exists (at most 30 s),
    so a test can fill its backlog (tests/e2e/test_settings_e2e.c,
    --max-queued-frames).
*/
#include "daemon/peer.h"
#include "base/clock.h"
#include "base/thread.h"
#include "daemon/fair_channel.h"
#include "daemon/held.h"
#include "daemon/log.h"
#include "daemon/metric_sources.h"
#include "daemon/pointer.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    pk_peer_t *peer;
    const pk_peer_env_t *env;
    zsock_t *pipe;
    pk_parent_t store_parent;
    pk_server_session_t *session;
    pk_fair_channel_t *fair;        //  the channel's writes through env->sched, or NULL
    bool on_door;                   //  the door runs a frame (pk_peer_try_frame)
    pk_server_session_counters_t last;
    pk_channel_stats_t flast;
    bool draining, quitting, terminated;
    double quit_deadline;
    int idle_look;                  //  ms between looks while nothing runs
    int bell_fd;                    //  an eventfd the bell writes (env->bell), or -1
    bool listening;                 //  bell_fd is the bell's while lookups are parked
    uint64_t bell_seen;             //  the bell's sequence before the last re-poll
    //  A lent transfer's report is read within S_LENT_LOOK_MS of its
    //  coming by this wait (its timeout is that or shorter, or it
    //  watches the channel): set under the lock before each wait, read
    //  by the door under it (pk_peer_try_frame), which wakes a wait that
    //  is not, once, as it lends.
    bool lent_bound;
    //  Frames the door ran (pk_peer_try_frame), read by the actor's wait
    //  without the lock: each read the channel's reports first
    //  (s_channel_first), so the actor's look at lent transfers can wait
    //  until frames stop coming.
    atomic_uint_fast64_t door_frames;
} self_t;

//  While nothing runs or is parked, the session's only clocks are its
//  silence timeout and its store jobs' (seconds long; a lookup's timeout
//  matters only while it is parked, a stall only while writes run, and
//  both are looked at every 2 ms or less then).  An idle session looks an
//  eighth of the shorter apart, at most 2 s: a timeout fires at most 12.5%
//  late, and an idle session wakes less than once a second by default,
//  not twenty times (at a 50 ms look, 256 idle sessions cost 35% of a
//  core).  Frames wake the actor at once whatever the look.
//  How often an actor looks at its channel while only lent transfers are
//  out (design.md, "A get over mmap lends its blocks"), counted from the
//  door's last frame (s_wait): the consumer's report, which unpins its
//  blocks, is read then, and the stall clock runs.
#define S_LENT_LOOK_MS 5

static int
s_idle_look_ms(const pk_server_config_t *c)
{
    double shortest = c->silence_timeout < c->store_timeout ? c->silence_timeout
                                                             : c->store_timeout;
    int ms = shortest / 8 > 2.0 ? 2000 : (int) (shortest / 8 * 1000);
    return ms < 2 ? 2 : ms;
}

//  The door's thread sends a frame it ran on the ROUTER itself (moved;
//  msg is closed either way).  A ROUTER without ZMQ_ROUTER_MANDATORY
//  never blocks: a peer gone or a full pipe drops the message, and libzmq
//  frees it (uncounted then).
static void
s_door_reply(const pk_peer_env_t *env, const void *rid, size_t rlen, zmq_msg_t *msg)
{
    void *router = zsock_resolve(env->router);
    if (zmq_send(router, rid, rlen, ZMQ_SNDMORE) != (int) rlen || zmq_msg_send(msg, router, 0) < 0)
        zmq_msg_close(msg);
    pk_poller_touch(env->poller, env->router);
}

//  Every frame for the consumer is a counted message (unsent.h): its
//  bytes count against --max-unread-bytes from here until libzmq wrote
//  it (or dropped it), whichever thread sends it on.
static void
s_actor_out(void *arg, const char *frame, size_t len)
{
    self_t *a = arg;
    zmq_msg_t msg;
    if (pk_unsent_msg(a->peer->unsent, frame, len, &msg) != 0)
        return;                 //  out of memory: the consumer's timeouts cover it
    if (a->on_door) {
        s_door_reply(a->env, a->peer->rid, a->peer->rlen, &msg);
        return;
    }
    atomic_fetch_add(&a->peer->said, 1);
    //  id, word, frame: as zsock_send "bsb" would, the frame moved, not copied
    void *out = zsock_resolve(a->peer->out);
    if (zmq_send(out, &a->peer->id, sizeof a->peer->id, ZMQ_SNDMORE) < 0
        || zmq_send(out, "FRAME", 5, ZMQ_SNDMORE) < 0 || zmq_msg_send(&msg, out, 0) < 0)
        zmq_msg_close(&msg);
}

//  The room the session asks for before each frame (server_session.h):
//  the consumer's answers not yet written, and every session's (those of
//  sessions gone included: a consumer that never reads keeps its
//  connection, and libzmq what was queued on it), against
//  --max-unread-bytes and --max-sessions times it.  A frame alone always
//  fits: no answer is too large to send to a consumer that reads.
static int
s_actor_room(void *arg, size_t len, char *why, size_t cap)
{
    self_t *a = arg;
    const pk_server_config_t *c = a->env->config;
    uint64_t mine = pk_unsent_bytes(a->peer->unsent);
    uint64_t all = pk_unsent_bytes(a->env->unsent);
    //  saturating: both settings go up to 2^63 and 2^31
    uint64_t all_max = c->max_sessions > UINT64_MAX / c->max_unread_bytes
                       ? UINT64_MAX : c->max_unread_bytes * c->max_sessions;
    if (mine > 0 && mine + len > c->max_unread_bytes) {
        snprintf(why, cap, "more than %llu bytes of answers unread",
                 (unsigned long long) c->max_unread_bytes);
        return -ENOBUFS;
    }
    if (all > 0 && all + len > all_max) {
        snprintf(why, cap, "the server holds %llu bytes of answers unread, at most %llu",
                 (unsigned long long) all, (unsigned long long) all_max);
        return -ENOBUFS;
    }
    return 0;
}

//  Lookups and their pins see the consumer's namespace and the shared one
//  (store.h); without --tenants that is the shared one, as before.
//  While the server drains (SIGTERM, node.c) every key is a miss, so that
//  consumers take their keys from other holders and pin nothing more
//  here: the role's rules stay the seed's, only the store's answer
//  changes.  This is the one place the drain's miss is decided, and
//  s_actor_miss_reason gives it its reason, "draining".
static pk_lookup_result_t
s_actor_lookup(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    self_t *a = arg;
    if (a->env->draining && atomic_load(a->env->draining))
        return PK_LOOKUP_MISS;
    return pk_store_lookup(a->env->store, a->peer->ns, key);
}

static int
s_actor_pin(void *arg, const pk_lookup_ctx_t *ctx, const pk_key_t *keys, size_t n,
            uint64_t *job, uint32_t *blocks, bool *pinned, uint8_t *why)
{
    self_t *a = arg;
    (void) why;                 //  the store's reasons are miss_reason's
    return pk_store_pin(a->env->store, a->peer->ns, keys, n, job, blocks, pinned);
}

//  Why a key missed, for the consumer's namespace only (store.h: another
//  tenant's key is absent): draining first, as s_actor_lookup decides.
static pk_miss_reason_t
s_actor_miss_reason(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    self_t *a = arg;
    if (a->env->draining && atomic_load(a->env->draining))
        return PK_MISS_DRAINING;
    return pk_store_miss_reason(a->env->store, a->peer->ns, key);
}

//  After a pass of lookups: the tier starts the reads they asked for.
static void
s_actor_kick(void *arg)
{
    self_t *a = arg;
    pk_store_kick(a->env->store);
}

static int
s_actor_sums(void *arg, const uint32_t *blocks, size_t n, uint64_t *sums)
{
    self_t *a = arg;
    return pk_store_block_sums(a->env->store, blocks, n, sums);
}

static void
s_actor_open(void *arg, const pk_lookup_ctx_t *ctx)
{
    self_t *a = arg;
    a->store_parent.on_new_request(a->store_parent.self, ctx);
}

static void
s_actor_finished(void *arg, const pk_lookup_ctx_t *ctx)
{
    self_t *a = arg;
    a->store_parent.on_request_finished(a->store_parent.self, ctx);
}

//  A job's result unpins it, and the door tells the engine when the job
//  was its prefill store.  On the door's thread (a frame run inline: a
//  finish releases its lookup's pins) the door tells the engine itself:
//  nothing this actor said is unread then (pk_peer_try_frame), so no
//  order changes, and the word saves a trip through the actors socket
//  back to the same thread (ten system calls inside libzmq).
static void
s_actor_result(void *arg, uint64_t job, bool success)
{
    self_t *a = arg;
    a->store_parent.store_result(a->store_parent.self, job, success);
    if (a->on_door) {
        a->env->job(a->env->job_arg, job, success);
        return;
    }
    atomic_fetch_add(&a->peer->said, 1);
    zsock_send(a->peer->out, "bs8s", &a->peer->id, sizeof a->peer->id, "JOB", job,
               success ? "1" : "0");
}

static void
s_latency(void *arg, pk_latency_t which, const char *peer, double seconds)
{
    pk_metrics_observe(arg, which == PK_LATENCY_LOOKUP ? PK_M_LOOKUP_SECONDS
                                                       : PK_M_FETCH_SECONDS, NULL, seconds);
}

//  A channel of several rails: its pairs (once) and each rail's counts,
//  for the engine API's stats, and what moved since the last step to the
//  rail families (labelled by the local address, summed over sessions).
static void
s_push_rails(const pk_peer_env_t *env, pk_peer_t *peer)
{
    pk_rail_stats_t rs[PK_RAILS_MAX];
    size_t n = pk_channel_rails(peer->channel, rs, PK_RAILS_MAX);
    if (n > PK_RAILS_MAX)
        n = PK_RAILS_MAX;
    if (!n)
        return;
    bool first = atomic_load_explicit(&peer->nrails, memory_order_relaxed) == 0;
    for (size_t i = 0; i < n; i++) {
        if (first) {
            _Static_assert(sizeof peer->rails[0].local == sizeof rs[0].local, "rail address");
            _Static_assert(sizeof peer->rails[0].peer == sizeof rs[0].peer, "rail address");
            memcpy(peer->rails[i].local, rs[i].local, sizeof rs[i].local);
            memcpy(peer->rails[i].peer, rs[i].peer, sizeof rs[i].peer);
            peer->rails[i].peer_rail = rs[i].peer_rail;
        }
        uint64_t w = atomic_exchange(&peer->rails[i].writes, rs[i].writes_posted);
        uint64_t b = atomic_exchange(&peer->rails[i].bytes, rs[i].bytes_written);
        atomic_store(&peer->rails[i].slices, rs[i].slices_written);
        uint64_t f = atomic_exchange(&peer->rails[i].failures, rs[i].failures);
        uint64_t j = atomic_exchange(&peer->rails[i].rejoins, rs[i].rejoins);
        atomic_store(&peer->rails[i].failed, rs[i].failed);
        //  the rail's rate gauge is the sum of its sessions' rates (each
        //  session measures its own share of the link): this one's moves
        uint64_t rate = (uint64_t) rs[i].rate;
        uint64_t was = atomic_exchange(&peer->rails[i].rate, rate);
        if (rate != was)
            pk_metrics_shift(env->metrics, PK_M_RAIL_RATE, rs[i].local,
                             (double) rate - (double) was);
        if (rs[i].writes_posted > w)
            pk_metrics_add(env->metrics, PK_M_RAIL_WRITES, rs[i].local, rs[i].writes_posted - w);
        if (rs[i].bytes_written > b)
            pk_metrics_add(env->metrics, PK_M_RAIL_BYTES, rs[i].local, rs[i].bytes_written - b);
        if (rs[i].failures > f)
            pk_metrics_add(env->metrics, PK_M_RAIL_FAILURES, rs[i].local, rs[i].failures - f);
        if (rs[i].rejoins > j)
            pk_metrics_add(env->metrics, PK_M_RAIL_REJOINS, rs[i].local, rs[i].rejoins - j);
    }
    if (first)
        atomic_store_explicit(&peer->nrails, n, memory_order_release);
}

//  The session's and the channel's counts, published (metric_sources.h)
//  as changes since the last step: the server's samples are the sums of
//  every session's.  Each reason's count goes before the session's whole
//  struct, whose publish makes last equal to it.  What the main thread
//  shows per session (the engine API's stats) is stored in the peer.
static void
s_push_metrics(const pk_peer_env_t *env, pk_peer_t *peer, pk_server_session_t *session,
               pk_server_session_counters_t *last, pk_channel_stats_t *flast)
{
    pk_server_session_counters_t c;
    pk_channel_stats_t f;
    pk_server_session_counters(session, &c);
    pk_channel_stats(peer->channel, &f);
    //  Most steps change nothing a metric reads: then nothing is done.
    if (memcmp(&c, last, sizeof c) == 0 && memcmp(&f, flast, sizeof f) == 0)
        return;
    pk_metrics_t *m = env->metrics;
    uint64_t block_len = env->config->block_len;
    //  A store timeout bounds a round's whole life, its transfer included:
    //  on a slow link a large round fails by it, and the consumer hears
    //  only that the round could not be served.  Said here, once per step
    //  that saw any, so the operator finds the setting to raise.
    if (c.role.store_timeouts != last->role.store_timeouts)
        pk_log(env->config, PK_LOG_WARN,
               "session %s: %" PRIu64 " round(s) failed at --store-timeout (%g s), which "
               "bounds a round's whole transfer: raise it where rounds are large or links slow",
               peer->consumer, c.role.store_timeouts - last->role.store_timeouts,
               env->config->store_timeout);
    if (memcmp(c.by_reason, last->by_reason, sizeof c.by_reason) != 0)
        for (int r = 0; r < PK_VIOLATION_COUNT; r++)
            pk_metric_sources_publish(m, PK_SOURCE_REASONS,
                                      pk_violation_name((pk_violation_t) r), &c.by_reason[r],
                                      &last->by_reason[r], block_len);
    //  only the reasons that moved: a lookup's misses are mostly of one
    //  reason, and each publish of a labelled family finds its label
    //  (about 90 instructions; all 7 were 770 per one-key miss, callgrind)
    for (int r = 0; r < PK_MISS_COUNT; r++)
        if (c.role.miss_reasons[r] != last->role.miss_reasons[r])
            pk_metric_sources_publish(m, PK_SOURCE_MISSES,
                                      pk_miss_reason_name((pk_miss_reason_t) r),
                                      &c.role.miss_reasons[r], &last->role.miss_reasons[r],
                                      block_len);
    pk_metric_sources_publish_counted(m, PK_SOURCE_SESSION, NULL, &c, last, block_len,
                                      peer->counted);
    pk_metric_sources_publish_counted(m, PK_SOURCE_CHANNEL, NULL, &f, flast, block_len,
                                      peer->counted);
    s_push_rails(env, peer);
}

//  A transfer's wait for its first write (fair_channel.h): the server's
//  histogram, and the session's sums for the engine API's stats.
static void
s_queue_wait(void *arg, double seconds)
{
    self_t *a = arg;
    pk_peer_t *peer = a->peer;
    uint64_t us = seconds > 0 ? (uint64_t) (seconds * 1e6) : 0;
    pk_metrics_observe(a->env->metrics, PK_M_WRITE_QUEUE_SECONDS, NULL, seconds);
    atomic_fetch_add(&peer->queue_waits, 1);
    atomic_fetch_add(&peer->queue_wait_us, us);
    if (us > atomic_load(&peer->queue_wait_max_us))
        atomic_store(&peer->queue_wait_max_us, us);    //  the actor is its one writer
}

//  The write path the session's role uses: the channel's, through the
//  server's scheduler when there is one (its weight is the consumer's
//  namespace's, --fair-weights).
static int
s_write_path(self_t *self, pk_transport_t *out)
{
    pk_transport_t inner = pk_channel_transport(self->peer->channel);
    if (!self->env->sched) {
        *out = inner;
        return 0;
    }
    unsigned weight = self->env->config->fair_weight[self->peer->ns < PK_NS_MAX
                                                     ? self->peer->ns : 0];
    self->fair = pk_fair_channel_new(self->env->sched, weight ? weight : 1, inner,
                                     pk_clock_monotonic, s_queue_wait, self);
    if (!self->fair)
        return -ENOMEM;
    *out = pk_fair_channel_transport(self->fair);
    return 0;
}

//  Refuses the consumer's connect from the actor (no session, no epochs).
static void
s_refuse(self_t *self, pk_disconnect_code_t code, const char *reason)
{
    char *frame = NULL;
    size_t len = 0;
    if (pk_server_session_disconnect_frame(self->env->id, code, reason, NULL, NULL, &frame,
                                           &len) == 0)
        s_actor_out(self, frame, len);
    free(frame);
}

//  The peer's channel: an endpoint and an address-vector insert of the
//  consumer's address, tens of milliseconds, paid on this actor's thread.
static int
s_open_channel(self_t *self, char *reason)
{
    const pk_peer_env_t *env = self->env;
    pk_msg_t *m = self->peer->connect;
    char err[PK_ERRLEN];
    int rc;
    pk_channel_t *ch = pk_channel_new(self->peer->fabric.fabric, false, &rc, err);
    //  Out of descriptors or memory is this server's state, not the
    //  consumer's fault: no_session, which a consumer asks again after;
    //  incompatible would stop it for good.
    bool short_of = !ch && (rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM || rc == -EAGAIN);
    if (!ch || pk_channel_connect(ch, m->agent_metadata, m->agent_metadata_len, err) != 0) {
        pk_log(env->config, short_of ? PK_LOG_WARN : PK_LOG_INFO,
               "connect from %s refused: %s", m->peer_id, err);
        s_refuse(self, short_of ? PK_DISC_NO_SESSION : PK_DISC_INCOMPATIBLE, err);
        pk_channel_close(&ch);
        snprintf(reason, PK_ERRLEN, "channel: %.200s", err);
        return -EPROTO;
    }
    //  a consumer that reads block marks checks each block as it lands
    if (pk_caps_has(m->caps, PK_CAP_MARKS))
        pk_channel_marks(ch);
    //  a consumer of several rails that reads slices gets its large
    //  blocks sliced over them, where our channel can (its write path
    //  then carries rails_slices, and the session lists the word)
    if (pk_caps_has(m->caps, PK_CAP_RAILS) && pk_caps_has(m->caps, PK_CAP_SLICES))
        (void) pk_channel_slices(ch);
    self->peer->channel = ch;
    return 0;
}

//  NULL with reason when the channel or the session cannot start (the
//  consumer is told, with a disconnect).
static self_t *
s_self_new(zsock_t *pipe, pk_peer_t *peer, char *reason)
{
    const pk_peer_env_t *env = peer->env;
    self_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(reason, PK_ERRLEN, "out of memory");
        goto fail;
    }
    *self = (self_t) { .peer = peer, .env = env, .pipe = pipe,
                       .store_parent = pk_store_parent(env->store), .bell_fd = -1 };
    //  none (out of descriptors): the 2 ms tick still re-polls
    if (env->bell)
        self->bell_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s_open_channel(self, reason) != 0)
        goto fail_self;
    bool fail = env->fail_session && streq(env->fail_session, peer->consumer);
    pk_transport_t path;
    if (!fail && s_write_path(self, &path) != 0)
        fail = true;
    self->session = fail ? NULL : pk_server_session_new(
        env->id, env->session_config, peer->connect, pk_clock_system(), path,
        (pk_parent_t) { .self = self, .lookup = s_actor_lookup, .create_store_job = s_actor_pin,
                        .on_new_request = s_actor_open, .on_request_finished = s_actor_finished,
                        .store_result = s_actor_result, .block_sums = s_actor_sums,
                        .miss_reason = s_actor_miss_reason, .kick = s_actor_kick },
        s_actor_out, self);
    if (!self->session) {
        snprintf(reason, PK_ERRLEN, "the session could not be created%s",
                 fail ? " (P2PKV_TEST_FAIL_SESSION)" : "");
        s_refuse(self, PK_DISC_NO_SESSION, reason);
        goto fail_fair;
    }
    pk_server_session_set_latency(self->session, s_latency, env->metrics);
    pk_server_session_set_room(self->session, s_actor_room, self);
    self->idle_look = env->idle_look_ms > 0 ? env->idle_look_ms : s_idle_look_ms(env->config);
    return self;

fail_fair:
    pk_fair_channel_destroy(&self->fair);
fail_self:
    free(self);
fail:
    return NULL;
}

//  Job results still owed go out (as JOB) while the session closes.
static void
s_self_destroy(self_t **self_p)
{
    self_t *self = *self_p;
    if (!self)
        return;
    //  the server's gauges lose this session's part (transfers in flight)
    pk_metric_sources_end(self->env->metrics, PK_SOURCE_CHANNEL, NULL, &self->flast,
                          self->env->config->block_len);
    //  the role's end cancels every transfer (immediate) through the
    //  scheduler's path; what it held then goes back to the credit
    pk_server_session_destroy(&self->session);
    pk_fair_channel_destroy(&self->fair);
    if (self->listening)
        pk_bell_leave(self->env->bell, self->bell_fd);
    if (self->bell_fd >= 0)
        close(self->bell_fd);
    free(self);
    *self_p = NULL;
}

//  Before a frame: what the channel has to say first.  A lending
//  consumer (capability lend) reports its copies on the channel before it
//  sends its next frame, so reading the report here releases the lent
//  blocks' pins before that frame looks keys up: back to back gets of
//  the same blocks then never find them pinned (their quota full, a
//  miss).  A recv that finds nothing, only while transfers are open.  No
//  silence is judged here: the frame in hand is the peer speaking.
static void
s_channel_first(self_t *self)
{
    if (pk_server_session_has_inflight(self->session)) {
        pk_channel_progress(self->peer->channel);
        pk_server_session_collect(self->session);
    }
}

static void
s_on_frame(self_t *self, zmsg_t *msg)
{
    zframe_t *f = zmsg_pop(msg);
    atomic_fetch_add(&self->peer->consumed, 1);
    atomic_fetch_add(&self->peer->consumed_bytes, f ? zframe_size(f) : 0);
    if (f) {
        s_channel_first(self);
        pk_server_session_on_frame(self->session, zframe_data(f), zframe_size(f));
    }
    zframe_destroy(&f);
}

static void
s_on_store(self_t *self, zmsg_t *msg)
{
    pk_held_t *h = pk_pointer_pop(msg);
    if (!h)
        return;
    if (h->finish)
        pk_server_session_finish(self->session, h->kv);
    else if (pk_server_session_store(self->session, h->kv, h->keys, h->blocks, h->n, h->job,
                                     h->has_round, h->round) < 0)
        s_actor_result(self, h->job, false);
    pk_held_destroy(&h);
}

static void
s_on_violation(self_t *self, zmsg_t *msg)
{
    char *reason = zmsg_popstr(msg);
    pk_server_session_retire(self->session, PK_DISC_VIOLATION, reason ? reason : "flood");
    zstr_free(&reason);
}

static void
s_on_retire(self_t *self, zmsg_t *msg)
{
    char *reason = zmsg_popstr(msg);
    pk_server_session_retire(self->session, PK_DISC_RETIRED, reason ? reason : "retired");
    zstr_free(&reason);
}

//  The drain's start: the session goes on serving (its lookups miss,
//  s_actor_lookup), and each step says whether it owes anything still
//  (s_self_step).  The deadline is the whole drain's, so that a QUIT at
//  its end cuts off what is left at once.
static void
s_on_drain(self_t *self, zmsg_t *msg)
{
    char *ms = zmsg_popstr(msg);
    self->draining = true;
    self->quit_deadline = ms ? (double) strtoll(ms, NULL, 10) / 1e3
                             : zclock_mono() / 1e3 + self->env->config->shutdown_timeout;
    zstr_free(&ms);
}

//  After a drain, its deadline bounds the writes left; alone (a QUIT with
//  no DRAIN before it), --shutdown-timeout from now.
static void
s_on_quit(self_t *self, zmsg_t *msg)
{
    self->quitting = true;
    if (!self->draining)
        self->quit_deadline = zclock_mono() / 1e3 + self->env->config->shutdown_timeout;
}

//  The door ran a frame that left work for this thread: the wake alone
//  is the point (the loop then looks at what runs).
static void
s_on_wake(self_t *self, zmsg_t *msg)
{
}

static const struct {
    const char *word;
    void (*fn)(self_t *self, zmsg_t *msg);
} s_words[] = {
    { "FRAME", s_on_frame },
    { "STORE", s_on_store },
    { "VIOLATION", s_on_violation },
    { "RETIRE", s_on_retire },
    { "DRAIN", s_on_drain },
    { "QUIT", s_on_quit },
    { "WAKE", s_on_wake },
};

//  One message from the door; false when the actor must end.
static bool
s_self_handle_pipe(self_t *self)
{
    zmsg_t *msg = zmsg_recv(self->pipe);
    if (!msg)
        return false;           //  interrupted
    char *cmd = zmsg_popstr(msg);
    self->terminated = !cmd || streq(cmd, "$TERM");
    for (size_t i = 0; cmd && i < sizeof s_words / sizeof s_words[0]; i++)
        if (streq(cmd, s_words[i].word)) {
            s_words[i].fn(self, msg);
            break;
        }
    zstr_free(&cmd);
    zmsg_destroy(&msg);
    self->peer->words_done++;
    return !self->terminated;
}

//  Test only ($P2PKV_TEST_HOLD_SESSION): stand still until the file exists.
static void
s_test_hold(self_t *self)
{
    const char *hold = self->env->hold_session;
    const char *colon = hold ? strchr(hold, ':') : NULL;
    if (!colon || strlen(self->peer->consumer) != (size_t) (colon - hold)
        || strncmp(hold, self->peer->consumer, (size_t) (colon - hold)) != 0)
        return;
    for (int i = 0; i < 3000 && access(colon + 1, F_OK) != 0; i++)
        zclock_sleep(10);
}

//  Whether this thread may sleep on the channel while writes run: its
//  transport has a wait fd and says nothing needs our progress now.
static bool
s_sleep_on_channel(self_t *self)
{
    return pk_channel_wait_fd(self->peer->channel) >= 0
           && pk_channel_trywait(self->peer->channel);
}

//  The disk tier's bell (bell.h): listened to while lookups are parked.
//  True when it rang since the last look (before the re-poll that
//  follows this wait), so the wait must not sleep.
static bool
s_bell(self_t *self, bool parked)
{
    pk_bell_t *bell = self->env->bell;
    if (self->bell_fd < 0)
        return false;
    if (parked && !self->listening)
        self->listening = pk_bell_listen(bell, self->bell_fd) == 0;
    else if (!parked && self->listening) {
        pk_bell_leave(bell, self->bell_fd);
        self->listening = false;
    }
    uint64_t seq = pk_bell_seq(bell);
    bool rung = self->listening && seq != self->bell_seen;
    self->bell_seen = seq;
    return rung;
}

//  Waits, the peer's lock let go meanwhile, until the pipe is readable
//  or something is due.  Writes run: sleep on the channel's wait fd when
//  the transport says nothing needs our progress now (mmap: the consumer
//  copies; ofi: no write moved for 250 us, so the fd wakes us when one
//  can: ofi.c, pk_ofi_channel_trywait), for 10 ms at most (the session's
//  clocks need a tick); else spin while they run.  Lookups
//  parked on keys the engine is writing are answered at a tick after its
//  commit: tick every 2 ms then; a block the disk tier lands rings the
//  bell, which wakes the wait at once (s_bell).  Otherwise the endpoint needs little (the
//  server only writes; nobody writes to it): the idle look.  False when
//  the actor must stop; *pipe says whether a word waits.
static bool
s_wait(self_t *self, bool *pipe)
{
    pk_server_session_t *session = self->session;
    bool inflight = pk_server_session_has_inflight(session);
    bool writes = pk_server_session_has_writes(session);
    //  blocks waiting for the scheduler's grant: it comes from another
    //  session's thread, unannounced, so look again soon (a spin)
    bool queued = self->fair && pk_fair_channel_queued(self->fair) > 0;
    bool on_channel = writes && !queued && s_sleep_on_channel(self);
    bool parked = pk_server_session_has_parked(session);
    bool rung = s_bell(self, parked);
    //  Only lent transfers out (capability lend: the consumer copies and
    //  reports on the channel, which unpins its blocks): the actor does
    //  not watch the channel, since a wake per report is a wake per get,
    //  and the door reads a session's reports before each of its frames
    //  (s_channel_first).  It looks S_LENT_LOOK_MS after the door's last
    //  frame instead: back to back gets wake it once per look, not per
    //  get, and a consumer's last report is read within two looks.  The
    //  door wakes a wait reckoned longer (idle) as it lends (lent_bound).
    bool lent_look = inflight && !writes && !queued && !parked && !rung;
    zmq_pollitem_t items[3] = {
        { zsock_resolve(self->pipe), 0, ZMQ_POLLIN, 0 },
        { NULL, on_channel ? pk_channel_wait_fd(self->peer->channel) : -1,
          ZMQ_POLLIN, 0 },
        { NULL, self->bell_fd, ZMQ_POLLIN, 0 }
    };
    int nitems = 1;
    if (on_channel)
        nitems = 2;
    if (self->listening) {
        if (!on_channel)
            items[1] = items[2];
        nitems++;
    }
    long timeout = rung ? 0 : on_channel ? 10 : writes || queued ? 0
                   : inflight ? S_LENT_LOOK_MS : parked ? 2 : self->idle_look;
    self->lent_bound = on_channel || timeout <= S_LENT_LOOK_MS;
    uint64_t frames = atomic_load(&self->door_frames);
    pthread_mutex_unlock(&self->peer->lock);
    int rc;
    while ((rc = zmq_poll(items, nitems, timeout)) == 0 && lent_look) {
        uint64_t now = atomic_load(&self->door_frames);
        if (now == frames)
            break;              //  quiet for a look: read what came
        frames = now;           //  the door read the reports meanwhile
    }
    if (self->listening && rc > 0 && (items[nitems - 1].revents & ZMQ_POLLIN)) {
        uint64_t rings;         //  drained; EAGAIN: nothing to drain
        ssize_t got = read(self->bell_fd, &rings, sizeof rings);
        (void) got;
    }
    //  A spin gives the core away after each empty look (free when nobody
    //  waits for it): 64 sessions of 1 MiB x 32 spun 64 threads on two
    //  cores, 0.47 s of server CPU per GB moved, 2.5 GB/s together; with
    //  the yield 0.24-0.27 s and 3.2-3.4 GB/s (design.md).
    if (rc == 0 && timeout == 0)
        sched_yield();
    pthread_mutex_lock(&self->peer->lock);
    *pipe = rc > 0 && (items[0].revents & ZMQ_POLLIN);
    return rc >= 0 || zmq_errno() == EINTR;
}

//  What follows every wake, on the actor's thread or the door's: the
//  channel progresses, the session's clocks run, its counters go to the
//  metrics, while the server drains the door learns whether the session
//  still owes anything, and at shutdown, once writes in flight drained
//  (bounded), the session says `shutdown`.
static void
s_self_step(self_t *self)
{
    pk_server_session_t *session = self->session;
    if (self->fair)
        pk_fair_channel_pump(self->fair);
    pk_channel_progress(self->peer->channel);
    pk_server_session_tick(session);
    s_push_metrics(self->env, self->peer, session, &self->last, &self->flast);
    if (self->draining)
        atomic_store(&self->peer->settled, pk_server_session_settled(session));
    if (self->quitting && (!pk_server_session_has_inflight(session)
                           || zclock_mono() / 1e3 >= self->quit_deadline))
        pk_server_session_retire(session, PK_DISC_SHUTDOWN, "server shutting down");
}

//  Runs the session until it retires or the pipe ends, holding the peer's
//  lock except while it waits.
static void
s_self_run(self_t *self)
{
    pk_peer_t *peer = self->peer;
    pthread_mutex_lock(&peer->lock);
    s_test_hold(self);          //  under the lock: the door runs nothing meanwhile
    peer->running = self;
    while (!pk_server_session_reason(self->session)[0]) {
        bool pipe;
        if (!s_wait(self, &pipe) || (pipe && !s_self_handle_pipe(self)))
            break;
        s_self_step(self);
    }
    peer->running = NULL;
    pthread_mutex_unlock(&peer->lock);
}

//  The door's fast path.  The actor waits (the lock is free) with nothing
//  queued either way (every word the door sent handled, every word it
//  said read), so running the frame here keeps every order a frame on the
//  pipe would have: the frame's answers go straight to the ROUTER, the
//  rest (job results) down the actor's out socket as ever.
int
pk_peer_try_frame(pk_peer_t *peer, const void *frame, size_t len)
{
    if (pthread_mutex_trylock(&peer->lock) != 0)
        return -EAGAIN;
    self_t *self = peer->running;
    int rc = -EAGAIN;
    if (self && peer->words_done == peer->words
        && atomic_load(&peer->said) == peer->heard && !self->quitting
        && !pk_server_session_reason(self->session)[0]) {
        pk_server_session_t *session = self->session;
        self->on_door = true;
        atomic_fetch_add(&self->door_frames, 1);
        s_channel_first(self);
        pk_server_session_on_frame(session, frame, len);
        s_self_step(self);
        self->on_door = false;
        //  writes out wake the actor; lent transfers only where its wait
        //  would not look at them soon (s_wait): their reports are read at
        //  the next frame or the actor's next look, and so is their stall
        //  clock
        rc = pk_server_session_has_writes(session) || pk_server_session_has_parked(session)
             || pk_server_session_reason(session)[0]
             || (pk_server_session_has_inflight(session) && !self->lent_bound);
    }
    pthread_mutex_unlock(&peer->lock);
    return rc;
}

//  After GONE: a store that still reaches us fails (its pin released),
//  everything else is ignored, until $TERM.  A JOB said here may be
//  discarded by zactor_destroy if the door reaps us first; the pin is
//  released either way, and the store-job timeout covers the engine.
static void
s_await_term(zsock_t *pipe, pk_peer_t *peer)
{
    pk_parent_t parent = pk_store_parent(peer->env->store);
    while (true) {
        zmsg_t *msg = zmsg_recv(pipe);
        if (!msg)
            return;             //  interrupted: zactor_destroy no longer waits
        char *cmd = zmsg_popstr(msg);
        bool term = !cmd || streq(cmd, "$TERM");
        if (cmd && streq(cmd, "STORE")) {
            pk_held_t *h = pk_pointer_pop(msg);
            if (h && !h->finish) {
                parent.store_result(parent.self, h->job, false);
                atomic_fetch_add(&peer->said, 1);
                zsock_send(peer->out, "bs8s", &peer->id, sizeof peer->id, "JOB", h->job, "0");
            }
            pk_held_destroy(&h);
        }
        zstr_free(&cmd);
        zmsg_destroy(&msg);
        if (term)
            return;
    }
}

static void
s_peer_actor(zsock_t *pipe, void *args)
{
    pk_thread_block_signals();
    pk_peer_t *peer = args;
    const pk_server_config_t *config = peer->env->config;
    //  Signal first: zactor_new's wait discards whatever else comes down
    //  the pipe before the signal, and the session's first words (its
    //  connect_ack) go down the pipe.
    zsock_signal(pipe, 0);
    char reason[PK_ERRLEN] = "";
    self_t *self = s_self_new(pipe, peer, reason);
    bool terminated = false;
    if (self) {
        s_self_run(self);
        terminated = self->terminated;
        //  a session that ended measures nothing: its rates leave the gauge
        size_t nr = atomic_load(&peer->nrails);
        for (size_t i = 0; i < nr; i++) {
            uint64_t was = atomic_exchange(&peer->rails[i].rate, 0);
            if (was)
                pk_metrics_shift(self->env->metrics, PK_M_RAIL_RATE, peer->rails[i].local,
                                 -(double) was);
        }
        snprintf(reason, sizeof reason, "%s", pk_server_session_reason(self->session)[0]
                 ? pk_server_session_reason(self->session) : "actor interrupted");
        pk_log(config, PK_LOG_INFO, "session %s closed: %s", peer->consumer, reason);
    }
    else
        pk_log(config, PK_LOG_WARN, "session %s not started: %s", peer->consumer, reason);
    s_self_destroy(&self);
    atomic_fetch_add(&peer->said, 1);
    zsock_send(peer->out, "bss", &peer->id, sizeof peer->id, "GONE", reason);
    if (!terminated)
        s_await_term(pipe, peer);
    pk_thread_release_stack();
}

//  --------------------------------------------------------------------------
//  The record's life (the handshake makes it, the door starts and ends it)

pk_peer_t *
pk_peer_new(const pk_peer_env_t *env, const uint8_t *rid, size_t rlen, const char *key,
            pk_peer_fabric_t fabric, pk_msg_t **connect_p)
{
    if (rlen > sizeof ((pk_peer_t *) NULL)->rid)
        goto fail;
    pk_peer_t *self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    if (pthread_mutex_init(&self->lock, NULL) != 0)
        goto fail_self;
    if (!(self->consumer = strdup((*connect_p)->peer_id)))
        goto fail_lock;
    self->env = env;
    self->fabric = fabric;
    snprintf(self->curve_key, sizeof self->curve_key, "%s", key);
    memcpy(self->rid, rid, rlen);
    self->rlen = rlen;
    self->connect = *connect_p;
    *connect_p = NULL;
    return self;

fail_lock:
    pthread_mutex_destroy(&self->lock);
fail_self:
    free(self);
fail:
    return NULL;
}

void
pk_peer_destroy(pk_peer_t **self_p)
{
    pk_peer_t *self = *self_p;
    if (!self)
        return;
    if (self->actor) {
        //  The actor reads its pipe until $TERM on every path, and uses the
        //  peer until then, so zactor_destroy must not return before it
        //  ended.  Two ways it did: its $TERM is sent without waiting, lost
        //  to a full pipe; and its wait ends at a signal to this thread
        //  (SIGTERM at shutdown).  Either freed the peer under a running
        //  actor (a crash in s_await_term, seen in the fuzz helper's runs).
        //  So: room in the pipe first (the actor drains it), and the
        //  process's signals held for the wait (delivered right after).
        zsock_t *pipe = zactor_sock(self->actor);
        for (int i = 0; i < 10000 && !(zsock_events(pipe) & ZMQ_POLLOUT); i++)
            zclock_sleep(1);
        sigset_t hold, was;
        sigemptyset(&hold);
        sigaddset(&hold, SIGTERM);
        sigaddset(&hold, SIGINT);
        sigaddset(&hold, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &hold, &was);
        zactor_destroy(&self->actor);
        pthread_sigmask(SIG_SETMASK, &was, NULL);
    }
    zsock_destroy(&self->out);
    pk_unsent_release(&self->unsent);
    pthread_mutex_destroy(&self->lock);
    if (self->channel)
        pk_channel_close(&self->channel);
    pk_msg_destroy(&self->connect);
    free(self->consumer);
    free(self);
    *self_p = NULL;
}

//  The actor speaks to the door on the node's one actors socket, its
//  words tagged with the peer's id, not on its pipe: the door's poller
//  then holds a fixed handful of sockets, where one pipe per peer made
//  every wake cost every peer (zmq_poll over 256 pipes, 13% of a core
//  with 256 idle sessions).
int
pk_peer_start(pk_peer_t *self, uint64_t id, const char *actors_endpoint)
{
    self->id = id;
    //  Made here and used by the actor only (the thread's start orders
    //  the hand-over); closed once the actor ended.  No high water mark:
    //  an actor never blocks on the door (a door in zactor_destroy could
    //  not read it free), and what it says is bounded by what it was sent
    //  (--max-queued-frames) plus its jobs.
    self->out = zsock_new_push(actors_endpoint);
    if (self->out)
        zsock_set_sndhwm(self->out, 0);
    self->unsent = pk_unsent_new(self->env->unsent);
    self->actor = self->out && self->unsent ? zactor_new(s_peer_actor, self) : NULL;
    if (!self->actor) {
        zsock_destroy(&self->out);
        pk_unsent_release(&self->unsent);
        return -ENOMEM;
    }
    //  never wait on one actor: a full pipe is a drop
    zsock_set_sndtimeo(zactor_sock(self->actor), 0);
    return 0;
}

int
pk_peer_tell(pk_peer_t *self, const char *picture, ...)
{
    va_list args;
    va_start(args, picture);
    int rc = zsock_vsend(self->actor, picture, args);
    va_end(args);
    if (rc != 0)
        return -EAGAIN;
    self->words++;
    return 0;
}

const char *
pk_peer_caps(const pk_peer_t *self)
{
    static const char *const words[] = { PK_CAP_CHECKSUM, PK_CAP_MARKS, PK_CAP_REASONS,
                                         PK_CAP_GET, PK_CAP_LEND, PK_CAP_RAILS, PK_CAP_REJOIN,
                                         PK_CAP_SLICES };
    static _Thread_local char out[PK_MAX_CAPS + 1];
    out[0] = '\0';
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (self->connect && pk_caps_has(self->connect->caps, words[i])
            //  in use only where both list it: --gets off offers no get
            && !(strcmp(words[i], PK_CAP_GET) == 0 && self->env->config->no_gets)
            //  lend: gets offered, over a channel that lends (the
            //  session's own test, server_session.c; the write scheduler
            //  passes lending by, fair_channel.c)
            && !(strcmp(words[i], PK_CAP_LEND) == 0
                 && (self->env->config->no_gets || !self->channel
                     || !pk_channel_transport(self->channel).lend))
            //  rails: over a channel of several
            && !(strcmp(words[i], PK_CAP_RAILS) == 0
                 && (!self->channel || !pk_channel_transport(self->channel).rails_landing))
            //  rejoin: with rails, over a channel that pairs a rail again
            && !(strcmp(words[i], PK_CAP_REJOIN) == 0
                 && (!self->channel || !pk_channel_transport(self->channel).rails_landing
                     || !pk_channel_transport(self->channel).rail_rejoin))
            //  slices: over a channel that slices (pk_channel_slices)
            && !(strcmp(words[i], PK_CAP_SLICES) == 0
                 && (!self->channel || !pk_channel_transport(self->channel).rails_slices)))
            snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", *out ? " " : "",
                     words[i]);
    return out;
}
