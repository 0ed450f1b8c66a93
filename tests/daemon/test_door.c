/*  test_door.c: the ROUTER door (lib/daemon/door.c) alone: made with
    pk_door_new over a world of its own (tests/actor_world.h: env's
    ROUTER bound on tcp://127.0.0.1:*, the actors PULL, a store, an
    in-memory fabric), a real handshake actor whose pick is the test's,
    and admission without CURVE; no node and no p2pkv-server.  The test
    runs the node's loop itself (s_wake: the poller over the ROUTER, the
    handshake actor and the actors socket, each message to the door's
    reader, then a reap), and its consumers are czmq DEALERs.

    A describe is answered with the description and opens no session; a
    frame other than connect from an unknown routing id is told there is
    no session, and a message of more than one frame is dropped; a
    connect goes to the pick, is answered connect_ack and registers a
    peer; a live session's frames reach its own peer; a flood past
    --max-queued-frames, and a malformed frame, each retire only that
    peer; a session's end gives back its pins (the env's job callback is
    told, whether the door ran its last frame or the actor did), is
    reaped and counted; at quit, sessions are told shutdown and new
    connects refused.  What every session held is freed by
    pk_door_destroy (LeakSanitizer in a sanitizer build).  */
#include "actor_world.h"
#include "daemon/admission.h"
#include "daemon/door.h"
#include "daemon/handshake.h"
#include "testutil.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

//  How long a wait may take on a loaded 2-core machine under ASan.
#define WAIT_MS 30000

typedef struct {
    ta_world_t w;
    pk_admission_t *admission;
    pk_handshake_t *hs;
    pk_door_t *door;
    atomic_int picks;               //  the handshake's thread calls pick
    size_t registered, reaped;
} s_door_t;

typedef struct {
    ta_consumer_t c;
    zsock_t *dealer;
} s_client_t;

//  The node's pick: the in-memory fabric, when it takes the blob.
static int
s_pick(void *arg, const uint8_t *blob, size_t len, pk_peer_fabric_t *fabric, char *reason,
       size_t cap)
{
    s_door_t *d = arg;
    atomic_fetch_add(&d->picks, 1);
    char err[PK_ERRLEN] = "";
    if (pk_fabric_check_blob(d->w.fabric, blob, len, err) != 0) {
        snprintf(reason, cap, "test pick: %s", err);
        return -EPROTO;
    }
    *fabric = (pk_peer_fabric_t) { d->w.fabric, "mem" };
    return 0;
}

static void
s_door_new(s_door_t *d)
{
    memset(d, 0, sizeof *d);
    ta_world_new(&d->w, "tcp://127.0.0.1:*");
    char err[PK_ERRLEN] = "";
    int rc;
    d->admission = pk_admission_new(&d->w.config, d->w.metrics, &rc, err);
    ck_assert_msg(d->admission != NULL, "%s", err);
    d->hs = pk_handshake_new(&d->w.env, s_pick, d);
    ck_assert_ptr_nonnull(d->hs);
    d->door = pk_door_new(&d->w.env, d->w.actors, d->w.actors_endpoint, d->hs, d->admission);
    ck_assert_ptr_nonnull(d->door);
    ck_assert_int_eq(pk_poller_add(d->w.poller, d->w.router), 0);
    ck_assert_int_eq(pk_poller_add(d->w.poller, pk_handshake_actor(d->hs)), 0);
    ck_assert_int_eq(pk_poller_add(d->w.poller, d->w.actors), 0);
}

//  In the node's order: the door's peers first, the handshake's after.
static void
s_door_destroy(s_door_t *d)
{
    pk_door_destroy(&d->door);
    ck_assert_ptr_null(d->door);
    pk_handshake_destroy(&d->hs);
    pk_admission_destroy(&d->admission);
    ta_world_destroy(&d->w);
}

//  One wake of the node's loop, at most ms long: a message of one socket
//  to the door, then the reaping of the peers whose actor ended.
static void
s_wake(s_door_t *d, int ms)
{
    void *which = pk_poller_wait(d->w.poller, ms);
    zmsg_t *msg = which ? pk_poller_recv(d->w.poller, which) : NULL;
    if (msg && which == d->w.router)
        pk_door_from_router(d->door, msg);
    else if (msg && which == pk_handshake_actor(d->hs))
        d->registered += pk_door_from_handshake(d->door, msg) != NULL;
    else if (msg) {
        ck_assert_ptr_eq(which, d->w.actors);
        pk_door_from_actors(d->door, msg);
    }
    d->reaped += pk_door_reap(d->door);
}

//  The loop runs until cond holds, at most WAIT_MS; the test fails if not.
#define S_UNTIL(d, cond) do { \
        int64_t until_ = zclock_mono() + WAIT_MS; \
        while (!(cond) && zclock_mono() < until_) \
            s_wake((d), 10); \
        ck_assert_msg((cond), "not within %d ms: %s", WAIT_MS, #cond); \
    } while (0)

static void
s_client_new(s_door_t *d, s_client_t *cl, const char *peer_id)
{
    ta_consumer_new(&cl->c, peer_id);
    cl->dealer = zsock_new(ZMQ_DEALER);
    ck_assert_ptr_nonnull(cl->dealer);
    ck_assert_int_eq(zsock_connect(cl->dealer, "%s", d->w.router_endpoint), 0);
}

static void
s_client_destroy(s_client_t *cl)
{
    zsock_destroy(&cl->dealer);
    ta_consumer_destroy(&cl->c);
}

static void
s_send_raw(s_client_t *cl, const void *data, size_t len)
{
    ck_assert_int_eq(zmq_send(zsock_resolve(cl->dealer), data, len, 0), (int) len);
}

static void
s_send(s_client_t *cl, pk_msg_t *m)
{
    size_t len;
    char *text = ta_encode(m, &len);
    s_send_raw(cl, text, len);
    free(text);
}

//  The next frame at cl's DEALER while the loop runs: decoded, or NULL
//  when none came within ms.
static pk_msg_t *
s_recv_within(s_door_t *d, s_client_t *cl, int ms)
{
    int64_t until = zclock_mono() + ms;
    do {
        if (zsock_events(cl->dealer) & ZMQ_POLLIN) {
            zframe_t *f = zframe_recv(cl->dealer);
            ck_assert_ptr_nonnull(f);
            pk_msg_t *m = ta_decode(zframe_data(f), zframe_size(f));
            zframe_destroy(&f);
            return m;
        }
        s_wake(d, 10);
    } while (zclock_mono() < until);
    return NULL;
}

static pk_msg_t *
s_expect(s_door_t *d, s_client_t *cl, pk_msg_type_t type)
{
    pk_msg_t *m = s_recv_within(d, cl, WAIT_MS);
    ck_assert_msg(m != NULL, "%s: no answer within %d ms", cl->c.peer_id, WAIT_MS);
    ck_assert_msg(m->type == type, "%s: a message of type %d, not %d%s%s", cl->c.peer_id,
                  m->type, type, m->reason ? ": " : "", m->reason ? m->reason : "");
    return m;
}

//  connect, answered connect_ack: cl's session is up.
static void
s_connected(s_door_t *d, s_client_t *cl)
{
    s_send(cl, ta_connect(&cl->c));
    pk_msg_t *ack = s_expect(d, cl, PK_MSG_CONNECT_ACK);
    ta_acked(&cl->c, ack);
    pk_msg_destroy(&ack);
    ck_assert_ptr_nonnull(pk_door_peer_by_consumer(d->door, cl->c.peer_id));
}

//  A lookup of key by cl, answered: whether it was a hit.
static bool
s_lookup(s_door_t *d, s_client_t *cl, const char *kv, const char *key)
{
    s_send(cl, ta_lookup(&cl->c, kv, key));
    pk_msg_t *r = s_expect(d, cl, PK_MSG_LOOKUP_RESP);
    ck_assert_str_eq(r->kv_request_id, kv);
    ck_assert_mem_eq(r->target_epoch, cl->c.epoch, PK_EPOCH_LEN);     //  cl's own session
    ck_assert_mem_eq(r->source_epoch, cl->c.server_epoch, PK_EPOCH_LEN);
    bool hit = r->hits[0];
    pk_msg_destroy(&r);
    return hit;
}

START_TEST(test_door_describe_without_session)
{
    s_door_t d;
    s_door_new(&d);
    s_client_t cl;
    s_client_new(&d, &cl, "consumer-1");

    //  a message of two frames (routing id and three) is dropped at the
    //  door; the describe after it on the same connection is answered
    zmsg_t *two = zmsg_new();
    zmsg_addstr(two, "{}");
    zmsg_addstr(two, "{}");
    ck_assert_int_eq(zmsg_send(&two, cl.dealer), 0);
    s_send(&cl, pk_msg_new(PK_MSG_DESCRIBE));
    pk_msg_t *m = s_expect(&d, &cl, PK_MSG_DESCRIPTION);
    ck_assert_str_eq(m->peer_id, "server-a");
    ck_assert_uint_eq(m->block_len, TA_BLOCK);
    pk_msg_destroy(&m);
    ck_assert_uint_eq(ta_metric(&d.w, "p2pkv_frames_dropped_total", NULL), 1);

    //  a frame of a session from a routing id that has none
    m = pk_msg_new(PK_MSG_PING);
    pk_msg_set_epochs(m, cl.c.epoch, cl.c.epoch);
    s_send(&cl, m);
    m = s_expect(&d, &cl, PK_MSG_DISCONNECT);
    ck_assert_int_eq(m->code, PK_DISC_NO_SESSION);
    pk_msg_destroy(&m);

    ck_assert_uint_eq(pk_door_sessions(d.door), 0);
    ck_assert_int_eq(atomic_load(&d.picks), 0);
    ck_assert_uint_eq(d.registered, 0);
    ck_assert_ptr_null(pk_door_peer_by_consumer(d.door, "consumer-1"));
    ck_assert_ptr_null(pk_door_next(d.door, &(size_t) { 0 }));
    s_client_destroy(&cl);
    s_door_destroy(&d);
}
END_TEST

START_TEST(test_door_connect_and_routing)
{
    s_door_t d;
    s_door_new(&d);
    ta_world_put(&d.w, 0, "a-key", 0xaa);
    s_client_t a, b, bad;
    s_client_new(&d, &a, "consumer-a");
    s_client_new(&d, &b, "consumer-b");
    s_client_new(&d, &bad, "consumer-bad");

    //  a connect goes to the pick, and its peer is registered
    s_connected(&d, &a);
    ck_assert_int_eq(atomic_load(&d.picks), 1);
    ck_assert_uint_eq(d.registered, 1);
    ck_assert_uint_eq(pk_door_sessions(d.door), 1);
    ck_assert_uint_eq(ta_metric(&d.w, "p2pkv_sessions_opened_total", NULL), 1);
    s_connected(&d, &b);
    ck_assert_uint_eq(pk_door_sessions(d.door), 2);

    //  a blob the pick refuses: incompatible, naming why; no session
    bad.c.blob[bad.c.blob_len - 1] = 9;
    s_send(&bad, ta_connect(&bad.c));
    pk_msg_t *m = s_expect(&d, &bad, PK_MSG_DISCONNECT);
    ck_assert_int_eq(m->code, PK_DISC_INCOMPATIBLE);
    ck_assert_ptr_nonnull(strstr(m->reason, "test pick: agent_metadata"));
    pk_msg_destroy(&m);
    ck_assert_int_eq(atomic_load(&d.picks), 3);
    ck_assert_uint_eq(pk_door_sessions(d.door), 2);
    ck_assert_ptr_null(pk_door_peer_by_consumer(d.door, "consumer-bad"));

    //  each session's frames reach its own peer (the answers carry its
    //  epochs), whichever order they come in
    ck_assert(s_lookup(&d, &a, "kv-1", "a-key"));
    ck_assert(!s_lookup(&d, &b, "kv-1", "b-key"));
    ck_assert(s_lookup(&d, &b, "kv-2", "a-key"));
    ck_assert(!s_lookup(&d, &a, "kv-2", "b-key"));
    pk_peer_t *pa = pk_door_peer_by_consumer(d.door, "consumer-a");
    pk_peer_t *pb = pk_door_peer_by_consumer(d.door, "consumer-b");
    ck_assert_ptr_ne(pa, pb);
    size_t at = 0, seen = 0;
    for (pk_peer_t *p; (p = pk_door_next(d.door, &at)); seen++)
        ck_assert(p == pa || p == pb);
    ck_assert_uint_eq(seen, 2);

    //  a's consumer restarted (a new connection, a new epoch): its old
    //  session is retired for the new one
    s_client_t a2;
    s_client_new(&d, &a2, "consumer-a");
    s_connected(&d, &a2);
    ck_assert_uint_eq(pk_door_sessions(d.door), 2);
    ck_assert_ptr_ne(pk_door_peer_by_consumer(d.door, "consumer-a"), pa);
    ck_assert(s_lookup(&d, &a2, "kv-1", "a-key"));
    ck_assert_uint_eq(ta_metric(&d.w, "p2pkv_sessions_retired_total", NULL), 1);

    s_client_destroy(&a2);
    s_client_destroy(&bad);
    s_client_destroy(&b);
    s_client_destroy(&a);
    s_door_destroy(&d);
}
END_TEST

//  A consumer that sends faster than its actor takes frames (held still
//  by env's hold_session, as $P2PKV_TEST_HOLD_SESSION does) is retired
//  once more than --max-queued-frames wait; the other session goes on.
START_TEST(test_door_flood_retires_only_that_peer)
{
    s_door_t d;
    s_door_new(&d);
    d.w.config.max_queued_frames = 4;
    char go[96], hold[128];
    snprintf(go, sizeof go, "/tmp/p2pkv-test-door-%d-go", (int) getpid());
    snprintf(hold, sizeof hold, "flooder:%s", go);
    unlink(go);
    d.w.env.hold_session = hold;
    ta_world_put(&d.w, 0, "k", 0x33);
    s_client_t calm, flood;
    s_client_new(&d, &calm, "calm");
    s_client_new(&d, &flood, "flooder");
    s_connected(&d, &calm);
    s_connected(&d, &flood);            //  its actor now stands still

    for (int i = 0; i < 10; i++) {
        char kv[16];
        snprintf(kv, sizeof kv, "kv-%d", i);
        s_send(&flood, ta_lookup(&flood.c, kv, "k"));
    }
    S_UNTIL(&d, ta_metric(&d.w, "p2pkv_frames_dropped_total", NULL) >= 1);
    pk_peer_t *fp = pk_door_peer_by_consumer(d.door, "flooder");
    ck_assert(fp->flooding);
    ck_assert_uint_eq(fp->sent, 4);
    FILE *f = fopen(go, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);

    //  the four it took are answered, then the violation ends it
    pk_msg_t *m;
    for (int i = 0; i < 4; i++) {
        m = s_expect(&d, &flood, PK_MSG_LOOKUP_RESP);
        ck_assert(m->hits[0]);
        pk_msg_destroy(&m);
    }
    m = s_expect(&d, &flood, PK_MSG_DISCONNECT);
    ck_assert_int_eq(m->code, PK_DISC_VIOLATION);
    ck_assert_str_eq(m->reason, "limit: more than 4 frames queued");
    pk_msg_destroy(&m);
    S_UNTIL(&d, d.reaped == 1);
    ck_assert_ptr_null(pk_door_peer_by_consumer(d.door, "flooder"));
    ck_assert_uint_eq(pk_door_sessions(d.door), 1);
    ck_assert_uint_eq(ta_metric(&d.w, "p2pkv_violations_by_reason_total", "flood"), 1);

    //  the calm one's session is untouched
    ck_assert(s_lookup(&d, &calm, "kv-calm", "k"));
    ck_assert_ptr_nonnull(pk_door_peer_by_consumer(d.door, "calm"));
    unlink(go);
    s_client_destroy(&flood);
    s_client_destroy(&calm);
    s_door_destroy(&d);
}
END_TEST

START_TEST(test_door_malformed_retires_only_that_peer)
{
    s_door_t d;
    s_door_new(&d);
    ta_world_put(&d.w, 0, "k", 0x44);
    s_client_t good, evil;
    s_client_new(&d, &good, "good");
    s_client_new(&d, &evil, "evil");
    s_connected(&d, &good);
    s_connected(&d, &evil);

    //  a lookup whose key is not lowercase hex breaks the schema
    size_t len;
    char *text = ta_encode(ta_lookup(&evil.c, "kv-x", "k"), &len);
    char *keys = strstr(text, "\"keys\":[\"");
    ck_assert_ptr_nonnull(keys);
    keys[strlen("\"keys\":[\"")] = 'X';
    s_send_raw(&evil, text, len);
    free(text);
    pk_msg_t *m = s_expect(&d, &evil, PK_MSG_DISCONNECT);
    ck_assert_int_eq(m->code, PK_DISC_VIOLATION);
    ck_assert_ptr_nonnull(strstr(m->reason, "lowercase hex"));
    pk_msg_destroy(&m);
    S_UNTIL(&d, d.reaped == 1);
    ck_assert_ptr_null(pk_door_peer_by_consumer(d.door, "evil"));
    ck_assert_uint_eq(pk_door_sessions(d.door), 1);
    ck_assert_uint_eq(ta_metric(&d.w, "p2pkv_violations_by_reason_total", "malformed"), 1);

    ck_assert(s_lookup(&d, &good, "kv-1", "k"));
    //  what evil says now comes from a routing id without a session
    s_send(&evil, ta_lookup(&evil.c, "kv-y", "k"));
    m = s_expect(&d, &evil, PK_MSG_DISCONNECT);
    ck_assert_int_eq(m->code, PK_DISC_NO_SESSION);
    pk_msg_destroy(&m);
    s_client_destroy(&evil);
    s_client_destroy(&good);
    s_door_destroy(&d);
}
END_TEST

//  A session's end gives back what it held: its pins (the env's job
//  callback told), its registration, and (at exit, under LeakSanitizer)
//  every byte.
START_TEST(test_door_session_end_frees)
{
    s_door_t d;
    s_door_new(&d);
    ta_world_put(&d.w, 0, "k", 0x55);
    s_client_t cl;
    s_client_new(&d, &cl, "consumer-1");
    s_connected(&d, &cl);
    ck_assert(s_lookup(&d, &cl, "kv-1", "k"));
    pk_store_stats_t st;
    pk_store_stats(d.w.store, &st);
    ck_assert_uint_eq(st.pinned, 1);
    ck_assert_uint_eq(d.w.njobs, 0);

    pk_msg_t *bye = pk_msg_new(PK_MSG_DISCONNECT);
    pk_msg_set_code(bye, PK_DISC_SHUTDOWN);
    pk_msg_set_string(bye, PK_F_REASON, "the consumer leaves");
    pk_msg_set_epochs(bye, cl.c.epoch, cl.c.server_epoch);
    s_send(&cl, bye);
    S_UNTIL(&d, d.reaped == 1);
    ck_assert_uint_eq(pk_door_sessions(d.door), 0);
    ck_assert_ptr_null(pk_door_peer_by_consumer(d.door, "consumer-1"));
    ck_assert_uint_eq(d.w.njobs, 1);                //  the lookup's pin job
    ck_assert(!d.w.job_ok[0]);
    pk_store_stats(d.w.store, &st);
    ck_assert_uint_eq(st.pinned, 0);
    ck_assert_uint_eq(ta_metric(&d.w, "p2pkv_sessions_retired_total", NULL), 1);
    ck_assert_uint_eq(pk_door_reap(d.door), 0);     //  only once

    //  a second session, left open: pk_door_destroy ends it
    s_client_t again;
    s_client_new(&d, &again, "consumer-2");
    s_connected(&d, &again);
    ck_assert(s_lookup(&d, &again, "kv-1", "k"));
    s_client_destroy(&again);
    s_client_destroy(&cl);
    s_door_destroy(&d);
}
END_TEST

START_TEST(test_door_quit)
{
    s_door_t d;
    s_door_new(&d);
    s_client_t cl, late;
    s_client_new(&d, &cl, "consumer-1");
    s_client_new(&d, &late, "consumer-late");
    s_connected(&d, &cl);
    ta_world_put(&d.w, 0, "k", 0x66);
    ck_assert(s_lookup(&d, &cl, "kv-1", "k"));
    pk_door_quit(d.door);
    pk_msg_t *m = s_expect(&d, &cl, PK_MSG_DISCONNECT);
    ck_assert_int_eq(m->code, PK_DISC_SHUTDOWN);
    pk_msg_destroy(&m);
    S_UNTIL(&d, pk_door_sessions(d.door) == 0);
    //  the actor ended the session, and said its pin's result (JOB) to
    //  the door, which told the env
    ck_assert_uint_eq(d.w.njobs, 1);

    s_send(&late, ta_connect(&late.c));
    m = s_expect(&d, &late, PK_MSG_DISCONNECT);
    ck_assert_int_eq(m->code, PK_DISC_SHUTDOWN);
    ck_assert_str_eq(m->reason, "server shutting down");
    pk_msg_destroy(&m);
    ck_assert_uint_eq(d.registered, 1);
    ck_assert_uint_eq(pk_door_sessions(d.door), 0);
    s_client_destroy(&late);
    s_client_destroy(&cl);
    s_door_destroy(&d);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("door");
    TCase *tc = tcase_create("door");
    tcase_add_test(tc, test_door_describe_without_session);
    tcase_add_test(tc, test_door_connect_and_routing);
    tcase_add_test(tc, test_door_flood_retires_only_that_peer);
    tcase_add_test(tc, test_door_malformed_retires_only_that_peer);
    tcase_add_test(tc, test_door_session_end_frees);
    tcase_add_test(tc, test_door_quit);
    suite_add_tcase(s, tc);
    return pk_test_run("door", s);
}
