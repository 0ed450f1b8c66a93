/*  test_peer.c: one peer (lib/daemon/peer.c) alone: its record made with
    pk_peer_new and its actor started with pk_peer_start over a world of
    its own (tests/actor_world.h: store, metrics, an in-memory fabric,
    env's ROUTER), no door, node or p2pkv-server.  The test is the door:
    it tells the actor words on its pipe (pk_peer_tell), reads what the
    actor says on the actors PULL (id, then FRAME, JOB or GONE), and runs
    frames on the door's fast path (pk_peer_try_frame), whose answers go
    to env's ROUTER.

    A connect is answered connect_ack; a lookup of a key the store holds
    is a hit (pinned), of one it does not a miss, on the pipe and inline
    alike, in the peer's namespace and the shared one; the session's
    counts reach env's metrics and only rise; a VIOLATION word ends the
    session with a disconnect violation carrying the reason, counted as
    a flood in env's metrics, and GONE names it, the pin released; a
    blob the fabric refuses is a disconnect incompatible and GONE naming
    the channel; QUIT ends it with shutdown.  */
#include "actor_world.h"
#include "daemon/metrics.h"
#include "testutil.h"

#include <errno.h>
#include <string.h>

//  How long a wait may take on a loaded 2-core machine under ASan.
#define WAIT_MS 30000

//  One word the actor said, read as the door reads it.
typedef struct {
    char word[16];
    pk_msg_t *msg;              //  FRAME: the frame decoded
    char reason[256];           //  GONE
    uint64_t job;               //  JOB
    bool ok;
} s_word_t;

static void
s_word_fini(s_word_t *w)
{
    pk_msg_destroy(&w->msg);
}

//  The actor's next word within WAIT_MS; the test fails when none came,
//  or when it is not tagged with peer's id.  Counted as the door counts
//  (heard), which the fast path compares with what the actor said.
static void
s_next(ta_world_t *w, pk_peer_t *peer, s_word_t *out)
{
    memset(out, 0, sizeof *out);
    zsock_set_rcvtimeo(w->actors, WAIT_MS);
    zmsg_t *msg = zmsg_recv(w->actors);
    ck_assert_msg(msg != NULL, "the peer's actor said nothing within %d ms", WAIT_MS);
    peer->heard++;
    zframe_t *id = zmsg_pop(msg);
    ck_assert_uint_eq(zframe_size(id), sizeof peer->id);
    ck_assert_mem_eq(zframe_data(id), &peer->id, sizeof peer->id);
    zframe_destroy(&id);
    char *word = zmsg_popstr(msg);
    ck_assert_ptr_nonnull(word);
    snprintf(out->word, sizeof out->word, "%s", word);
    if (streq(word, "FRAME")) {
        zframe_t *f = zmsg_pop(msg);
        out->msg = ta_decode(zframe_data(f), zframe_size(f));
        zframe_destroy(&f);
    }
    else if (streq(word, "GONE")) {
        char *reason = zmsg_popstr(msg);
        snprintf(out->reason, sizeof out->reason, "%s", reason ? reason : "");
        zstr_free(&reason);
    }
    else if (streq(word, "JOB")) {
        char *job = zmsg_popstr(msg), *ok = zmsg_popstr(msg);
        ck_assert(job && ok);
        out->job = strtoull(job, NULL, 10);
        out->ok = streq(ok, "1");
        zstr_free(&job);
        zstr_free(&ok);
    }
    zstr_free(&word);
    zmsg_destroy(&msg);
}

//  The next word must be a frame of type: the message (caller destroys).
static pk_msg_t *
s_expect(ta_world_t *w, pk_peer_t *peer, pk_msg_type_t type)
{
    s_word_t word;
    s_next(w, peer, &word);
    ck_assert_msg(streq(word.word, "FRAME"), "said %s (%s), not a frame", word.word,
                  word.reason);
    ck_assert_msg(word.msg->type == type, "a frame of type %d, not %d%s%s", word.msg->type,
                  type, word.msg->reason ? ": " : "", word.msg->reason ? word.msg->reason : "");
    return word.msg;
}

//  Sends m down the actor's pipe, as the door does a frame it does not run.
static void
s_tell_frame(pk_peer_t *peer, pk_msg_t *m)
{
    size_t len;
    char *text = ta_encode(m, &len);
    ck_assert_int_eq(pk_peer_tell(peer, "sb", "FRAME", text, len), 0);
    peer->sent++;
    peer->sent_bytes += len;
    free(text);
}

//  A started peer for consumer c (its connect with blob), as the
//  handshake makes one and the door starts it, answered connect_ack.
static pk_peer_t *
s_started(ta_world_t *w, ta_consumer_t *c, uint64_t id)
{
    pk_msg_t *connect = ta_connect(c);
    pk_peer_t *peer = pk_peer_new(&w->env, (const uint8_t *) "r1", 2, "",
                                  (pk_peer_fabric_t) { w->fabric, "mem" }, &connect);
    ck_assert_ptr_nonnull(peer);
    ck_assert_ptr_null(connect);                    //  taken
    ck_assert_int_eq(pk_peer_start(peer, id, w->actors_endpoint), 0);
    pk_msg_t *ack = s_expect(w, peer, PK_MSG_CONNECT_ACK);
    ta_acked(c, ack);
    pk_msg_destroy(&ack);
    return peer;
}

//  Words until GONE (whose reason goes to reason): the frames among them
//  must be one disconnect, given back; JOB words are counted in *jobs.
static pk_msg_t *
s_until_gone(ta_world_t *w, pk_peer_t *peer, char *reason, size_t cap, size_t *jobs)
{
    pk_msg_t *disconnect = NULL;
    for (;;) {
        s_word_t word;
        s_next(w, peer, &word);
        if (streq(word.word, "GONE")) {
            snprintf(reason, cap, "%s", word.reason);
            return disconnect;
        }
        if (streq(word.word, "JOB"))
            ++*jobs;
        else {
            ck_assert_str_eq(word.word, "FRAME");
            ck_assert_int_eq(word.msg->type, PK_MSG_DISCONNECT);
            ck_assert_ptr_null(disconnect);
            disconnect = word.msg;
            word.msg = NULL;
        }
        s_word_fini(&word);
    }
}

//  A counter that may only rise, read again: it did not fall below was.
static uint64_t
s_rising(ta_world_t *w, const char *name, uint64_t was)
{
    uint64_t now = ta_metric(w, name, NULL);
    ck_assert_msg(now >= was, "%s fell from %llu to %llu", name, (unsigned long long) was,
                  (unsigned long long) now);
    return now;
}

//  Until the session's counts were published (after the step that
//  answered): at most WAIT_MS.
static void
s_wait_metric(ta_world_t *w, const char *name, uint64_t value)
{
    int64_t deadline = zclock_mono() + WAIT_MS;
    while (ta_metric(w, name, NULL) < value && zclock_mono() < deadline)
        zclock_sleep(2);
    ck_assert_uint_eq(ta_metric(w, name, NULL), value);
}

START_TEST(test_peer_connect_lookup)
{
    ta_world_t w;
    ta_world_new(&w, "inproc://test-peer-router");
    ta_world_put(&w, 0, "held", 0x11);
    //  the consumer's end of env's ROUTER: what the fast path answers goes there
    zsock_t *dealer = zsock_new(ZMQ_DEALER);
    ck_assert_ptr_nonnull(dealer);
    zsock_set_identity(dealer, "r1");
    zsock_set_rcvtimeo(dealer, WAIT_MS);
    ck_assert_int_eq(zsock_connect(dealer, "%s", w.router_endpoint), 0);
    zstr_send(dealer, "hello");     //  the ROUTER knows the route once this came
    zsock_set_rcvtimeo(w.router, WAIT_MS);
    zmsg_t *hello = zmsg_recv(w.router);
    ck_assert_ptr_nonnull(hello);
    zmsg_destroy(&hello);

    ta_consumer_t c;
    ta_consumer_new(&c, "consumer-1");
    pk_peer_t *peer = s_started(&w, &c, 7);
    ck_assert_ptr_nonnull(peer->channel);               //  opened by the actor
    ck_assert_str_eq(peer->consumer, "consumer-1");

    //  down the pipe: a hit (pinned), then a miss
    s_tell_frame(peer, ta_lookup(&c, "kv-1", "held"));
    pk_msg_t *r = s_expect(&w, peer, PK_MSG_LOOKUP_RESP);
    ck_assert_str_eq(r->kv_request_id, "kv-1");
    ck_assert_uint_eq(r->keys.count, 1);
    ck_assert(r->hits[0]);
    ck_assert_mem_eq(r->source_epoch, c.server_epoch, PK_EPOCH_LEN);
    pk_msg_destroy(&r);
    pk_store_stats_t st;
    pk_store_stats(w.store, &st);
    ck_assert_uint_eq(st.pinned, 1);
    s_tell_frame(peer, ta_lookup(&c, "kv-2", "absent"));
    r = s_expect(&w, peer, PK_MSG_LOOKUP_RESP);
    ck_assert(!r->hits[0]);
    pk_msg_destroy(&r);

    //  the session's counts reach env's metrics, and only rise
    s_wait_metric(&w, "p2pkv_lookups_total", 2);
    s_wait_metric(&w, "p2pkv_lookup_hits_total", 1);
    s_wait_metric(&w, "p2pkv_lookup_misses_total", 1);
    ck_assert_uint_eq(atomic_load(&peer->counted[PK_M_LOOKUPS]), 2);
    uint64_t frames = s_rising(&w, "p2pkv_frames_total", 2);
    ck_assert_uint_eq(atomic_load(&peer->consumed), 2);

    //  the fast path: once the actor waits with nothing queued, the
    //  lookup runs on this thread and its answer goes to env's ROUTER
    size_t len;
    char *text = ta_encode(ta_lookup(&c, "kv-3", "held"), &len);
    int ran = -EAGAIN;
    int64_t deadline = zclock_mono() + WAIT_MS;
    while ((ran = pk_peer_try_frame(peer, text, len)) == -EAGAIN && zclock_mono() < deadline)
        zclock_sleep(1);
    free(text);
    ck_assert_int_ge(ran, 0);
    zframe_t *f = zframe_recv(dealer);
    ck_assert_msg(f != NULL, "no answer at env's ROUTER");
    r = ta_decode(zframe_data(f), zframe_size(f));
    zframe_destroy(&f);
    ck_assert_int_eq(r->type, PK_MSG_LOOKUP_RESP);
    ck_assert_str_eq(r->kv_request_id, "kv-3");
    ck_assert(r->hits[0]);
    pk_msg_destroy(&r);
    ck_assert_uint_eq(atomic_load(&peer->consumed), 2);    //  not the pipe's
    frames = s_rising(&w, "p2pkv_frames_total", frames);
    s_wait_metric(&w, "p2pkv_lookups_total", 3);

    //  the session's end: counts stay where they were, the pins go
    ck_assert_int_eq(pk_peer_tell(peer, "s", "QUIT"), 0);
    char reason[256];
    size_t jobs = 0;
    pk_msg_t *d = s_until_gone(&w, peer, reason, sizeof reason, &jobs);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(d->code, PK_DISC_SHUTDOWN);
    pk_msg_destroy(&d);
    ck_assert_str_eq(reason, "shutdown: server shutting down");
    ck_assert_uint_eq(jobs, 2);                 //  the two hits' pins, released
    pk_store_stats(w.store, &st);
    ck_assert_uint_eq(st.pinned, 0);
    pk_peer_destroy(&peer);
    ck_assert_ptr_null(peer);
    s_rising(&w, "p2pkv_frames_total", frames);
    ck_assert_uint_eq(ta_metric(&w, "p2pkv_lookups_total", NULL), 3);

    zsock_destroy(&dealer);
    ta_consumer_destroy(&c);
    ta_world_destroy(&w);
}
END_TEST

START_TEST(test_peer_violation)
{
    ta_world_t w;
    ta_world_new(&w, "inproc://test-peer-router");
    ta_world_put(&w, 0, "held", 0x22);
    ta_consumer_t c;
    ta_consumer_new(&c, "consumer-1");
    pk_peer_t *peer = s_started(&w, &c, 1);
    s_tell_frame(peer, ta_lookup(&c, "kv-1", "held"));
    pk_msg_t *r = s_expect(&w, peer, PK_MSG_LOOKUP_RESP);
    ck_assert(r->hits[0]);
    pk_msg_destroy(&r);
    ck_assert_uint_eq(ta_metric(&w, "p2pkv_violations_total", NULL), 0);

    //  the door's word for a flood
    ck_assert_int_eq(pk_peer_tell(peer, "ss", "VIOLATION", "limit: more than 2 frames queued"),
                     0);
    char reason[256];
    size_t jobs = 0;
    pk_msg_t *d = s_until_gone(&w, peer, reason, sizeof reason, &jobs);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(d->code, PK_DISC_VIOLATION);
    ck_assert_str_eq(d->reason, "limit: more than 2 frames queued");
    ck_assert_mem_eq(d->source_epoch, c.server_epoch, PK_EPOCH_LEN);
    ck_assert_mem_eq(d->target_epoch, c.epoch, PK_EPOCH_LEN);
    pk_msg_destroy(&d);
    ck_assert_str_eq(reason, "violation: limit: more than 2 frames queued");
    ck_assert_uint_eq(jobs, 1);
    //  env told: the metrics count it as a flood (published before GONE)
    ck_assert_uint_eq(ta_metric(&w, "p2pkv_violations_total", NULL), 1);
    ck_assert_uint_eq(ta_metric(&w, "p2pkv_violations_by_reason_total", "flood"), 1);
    ck_assert_uint_eq(ta_metric(&w, "p2pkv_violations_by_reason_total", "malformed"), 0);
    pk_store_stats_t st;
    pk_store_stats(w.store, &st);
    ck_assert_uint_eq(st.pinned, 0);

    //  after GONE the actor only waits for its end: a frame does nothing
    s_tell_frame(peer, ta_lookup(&c, "kv-2", "held"));
    pk_peer_destroy(&peer);
    zsock_set_rcvtimeo(w.actors, 0);
    zmsg_t *late = zmsg_recv(w.actors);
    ck_assert_ptr_null(late);
    ck_assert_uint_eq(ta_metric(&w, "p2pkv_violations_total", NULL), 1);
    ck_assert_uint_eq(ta_metric(&w, "p2pkv_lookups_total", NULL), 1);
    ta_consumer_destroy(&c);
    ta_world_destroy(&w);
}
END_TEST

//  A peer looks up in its namespace (the door sets it before the actor
//  starts) and in the shared one: a tenant's key is a hit for a peer of
//  that tenant, a miss for one of the shared namespace.
static bool
s_hit_in(ta_world_t *w, unsigned ns, const char *key)
{
    ta_consumer_t c;
    ta_consumer_new(&c, "consumer-1");
    pk_msg_t *connect = ta_connect(&c);
    pk_peer_t *peer = pk_peer_new(&w->env, (const uint8_t *) "r1", 2, "",
                                  (pk_peer_fabric_t) { w->fabric, "mem" }, &connect);
    ck_assert_ptr_nonnull(peer);
    peer->ns = ns;
    ck_assert_int_eq(pk_peer_start(peer, 5, w->actors_endpoint), 0);
    pk_msg_t *ack = s_expect(w, peer, PK_MSG_CONNECT_ACK);
    ta_acked(&c, ack);
    pk_msg_destroy(&ack);
    s_tell_frame(peer, ta_lookup(&c, "kv-1", key));
    pk_msg_t *r = s_expect(w, peer, PK_MSG_LOOKUP_RESP);
    bool hit = r->hits[0];
    pk_msg_destroy(&r);
    ck_assert_int_eq(pk_peer_tell(peer, "s", "QUIT"), 0);
    char reason[256];
    size_t jobs = 0;
    pk_msg_t *d = s_until_gone(w, peer, reason, sizeof reason, &jobs);
    pk_msg_destroy(&d);
    pk_peer_destroy(&peer);
    ta_consumer_destroy(&c);
    return hit;
}

START_TEST(test_peer_namespace)
{
    ta_world_t w;
    ta_world_new(&w, "inproc://test-peer-router");
    ta_world_put(&w, 1, "tenant's", 0x77);
    ta_world_put(&w, 0, "shared", 0x78);
    ck_assert(s_hit_in(&w, 1, "tenant's"));
    ck_assert(s_hit_in(&w, 1, "shared"));
    ck_assert(!s_hit_in(&w, 0, "tenant's"));
    ck_assert(s_hit_in(&w, 0, "shared"));
    ta_world_destroy(&w);
}
END_TEST

//  The channel is the actor's to open: a blob the fabric refuses ends
//  the peer before any session, the consumer told incompatible.
START_TEST(test_peer_channel_refused)
{
    ta_world_t w;
    ta_world_new(&w, "inproc://test-peer-router");
    ta_consumer_t c;
    ta_consumer_new(&c, "consumer-1");
    c.blob[c.blob_len - 1] = 9;                 //  neither exposed nor not
    pk_msg_t *connect = ta_connect(&c);
    pk_peer_t *peer = pk_peer_new(&w.env, (const uint8_t *) "r1", 2, "",
                                  (pk_peer_fabric_t) { w.fabric, "mem" }, &connect);
    ck_assert_ptr_nonnull(peer);
    ck_assert_int_eq(pk_peer_start(peer, 3, w.actors_endpoint), 0);
    char reason[256];
    size_t jobs = 0;
    pk_msg_t *d = s_until_gone(&w, peer, reason, sizeof reason, &jobs);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(d->code, PK_DISC_INCOMPATIBLE);
    ck_assert_ptr_nonnull(strstr(d->reason, "agent_metadata"));
    pk_msg_destroy(&d);
    ck_assert_msg(strncmp(reason, "channel: ", 9) == 0, "GONE said \"%s\"", reason);
    ck_assert_ptr_null(peer->channel);
    ck_assert_uint_eq(jobs, 0);
    pk_peer_destroy(&peer);
    ta_consumer_destroy(&c);
    ta_world_destroy(&w);
}
END_TEST

//  A record that never started is destroyed whole; a routing id longer
//  than a ROUTER's is refused, the connect still the caller's.
START_TEST(test_peer_record)
{
    ta_world_t w;
    ta_world_new(&w, "inproc://test-peer-router");
    ta_consumer_t c;
    ta_consumer_new(&c, "consumer-1");
    pk_msg_t *connect = ta_connect(&c);
    uint8_t rid[257] = { 1 };
    ck_assert_ptr_null(pk_peer_new(&w.env, rid, sizeof rid, "", (pk_peer_fabric_t) { 0 },
                                   &connect));
    ck_assert_ptr_nonnull(connect);
    pk_msg_set_string(connect, PK_F_CAPS, "reasons checksum marks other");
    pk_peer_t *peer = pk_peer_new(&w.env, rid, 256, "K", (pk_peer_fabric_t) { 0 }, &connect);
    ck_assert_ptr_nonnull(peer);
    ck_assert_str_eq(peer->curve_key, "K");
    ck_assert_str_eq(pk_peer_caps(peer), "checksum marks reasons");
    pk_peer_destroy(&peer);
    ck_assert_ptr_null(peer);
    ta_consumer_destroy(&c);
    ta_world_destroy(&w);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("peer");
    TCase *tc = tcase_create("peer");
    tcase_add_test(tc, test_peer_connect_lookup);
    tcase_add_test(tc, test_peer_violation);
    tcase_add_test(tc, test_peer_namespace);
    tcase_add_test(tc, test_peer_channel_refused);
    tcase_add_test(tc, test_peer_record);
    suite_add_tcase(s, tc);
    return pk_test_run("peer", s);
}
