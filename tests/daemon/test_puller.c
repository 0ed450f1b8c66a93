/*  test_puller.c: the puller (lib/daemon/puller.c) alone: made with
    pk_puller_new over a store, metrics and a poller of the test's own, no
    node, engine API or p2pkv-server.  A pull is handed to it
    (pk_puller_send) and comes back on its actor (pk_puller_recv) with
    landed[] and reason filled in.  Its source is a fake server: a czmq
    ROUTER of this test on tcp://127.0.0.1:*, which answers describe,
    connect and pings as a server would, and the lookup as each case
    wants (as tests/test_hardening.c's puller-strangers row does).

    A source that never finishes the fetch (nor acknowledges its abort):
    the pull ends unlanded with a timeout naming the fetch; one that
    answers the lookup "miss": the key is reported missing, with no
    error, and its session ended (the source told); one that says
    disconnect at the lookup: an error naming the lookup and the
    source's reason; one that never answers at all: an error naming the
    server.  */
#include "base/err.h"
#include "daemon/puller.h"
#include "wire/protocol.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <string.h>

#define BLOCK 4096
#define BLOCKS 16
//  How long a wait may take on a loaded 2-core machine under ASan.
#define WAIT_MS 60000
//  The pull's timeouts (--load-timeout, --abort-ack-timeout), in s.
#define LOAD_TIMEOUT 4
#define ABORT_ACK_TIMEOUT 1

typedef enum {
    S_NO_FETCH,             //  a hit whose fetch never finishes
    S_MISS,                 //  the lookup answered miss
    S_GONE,                 //  disconnect at the lookup
    S_SILENT,               //  nothing answered
} s_mode_t;

typedef struct {
    pk_server_config_t config;
    pk_store_t *store;
    pk_metrics_t *metrics;
    pk_poller_t *poller;
    pk_puller_t *puller;
    zsock_t *router;                //  the fake source
    char endpoint[64];
    s_mode_t mode;
    uint8_t epoch[PK_EPOCH_LEN];    //  the source's
    uint8_t consumer[PK_EPOCH_LEN]; //  the puller's session's
    //  what the source saw, by message type
    int seen[PK_MSG_COUNT];
    size_t fetched;                 //  keys in fetches (a finish is a fetch of none)
    int sessions;                   //  connects of a new consumer epoch
} s_world_t;

static void
s_world_new(s_world_t *w, s_mode_t mode)
{
    memset(w, 0, sizeof *w);
    w->mode = mode;
    ck_assert_int_eq(pk_server_config_defaults(&w->config), 0);
    w->config.log_level = PK_LOG_ERROR;
    w->config.block_len = BLOCK;
    w->config.pool_blocks = BLOCKS;
    free(w->config.provider);
    w->config.provider = strdup("tcp");
    w->config.load_timeout = LOAD_TIMEOUT;
    w->config.abort_ack_timeout = ABORT_ACK_TIMEOUT;
    w->config.silence_timeout = 600;            //  the source answers pings anyway
    char err[PK_ERRLEN] = "";
    int rc;
    w->store = pk_store_new(NULL, BLOCKS, BLOCK, NULL, pk_clock_system(), NULL, NULL, &rc,
                            err);
    ck_assert_msg(w->store != NULL, "%s", err);
    w->metrics = pk_metrics_new();
    w->poller = pk_poller_new();
    ck_assert(w->metrics && w->poller);
    w->puller = pk_puller_new(&w->config, w->store, w->metrics, w->poller, NULL, NULL);
    ck_assert_ptr_nonnull(w->puller);
    ck_assert_ptr_null(pk_puller_actor(w->puller));            //  not before a pull
    w->router = zsock_new(ZMQ_ROUTER);
    ck_assert_ptr_nonnull(w->router);
    ck_assert_int_ge(zsock_bind(w->router, "tcp://127.0.0.1:*"), 0);
    snprintf(w->endpoint, sizeof w->endpoint, "%s", zsock_endpoint(w->router));
    w->epoch[0] = 7;
}

static void
s_world_destroy(s_world_t *w)
{
    pk_puller_destroy(&w->puller);
    ck_assert_ptr_null(w->puller);
    zsock_destroy(&w->router);
    pk_poller_destroy(&w->poller);
    pk_metrics_destroy(&w->metrics);
    pk_store_destroy(&w->store);
    pk_server_config_fini(&w->config);
}

//  A pull of one key from the fake source into a block reserved for it,
//  as the engine API makes one.
static pk_pull_t *
s_pull(s_world_t *w, const char *key)
{
    size_t klen = strlen(key);
    pk_pull_t *p = calloc(1, sizeof *p);
    ck_assert_ptr_nonnull(p);
    p->id = 1;
    p->owner = PK_PULL_OWNER | 1;
    p->server = strdup(w->endpoint);
    p->keys = malloc(sizeof *p->keys + klen);        //  bytes follow the array
    p->blocks = malloc(sizeof *p->blocks);
    p->landed = calloc(1, sizeof *p->landed);
    p->from = calloc(1, sizeof *p->from);
    p->why = calloc(1, sizeof *p->why);
    ck_assert(p->server && p->keys && p->blocks && p->landed && p->from && p->why);
    memcpy(p->keys + 1, key, klen);
    p->keys[0] = pk_key_make((const uint8_t *) (p->keys + 1), klen);
    p->n = 1;
    ck_assert_int_eq(pk_store_reserve(w->store, p->owner, 0, p->keys, 1, p->blocks), 0);
    return p;
}

static void
s_send(s_world_t *w, zframe_t *rid, pk_msg_t *m)
{
    char *text, err[PK_ERRLEN] = "";
    size_t len;
    ck_assert_msg(pk_msg_encode(m, &text, &len, err) == 0, "%s", err);
    ck_assert_int_eq(zframe_send(&rid, w->router, ZFRAME_MORE | ZFRAME_REUSE), 0);
    ck_assert_int_eq(zmq_send(zsock_resolve(w->router), text, len, 0), (int) len);
    free(text);
    pk_msg_destroy(&m);
}

//  The source's wire fields on a message it says.
static pk_msg_t *
s_server_msg(s_world_t *w, pk_msg_type_t type)
{
    pk_msg_t *a = pk_msg_new(type);
    pk_msg_set_uint(a, PK_F_WIRE_MAJOR, PK_WIRE_MAJOR);
    pk_msg_set_uint(a, PK_F_WIRE_MINOR, PK_WIRE_MINOR);
    pk_msg_set_string(a, PK_F_PEER_ID, "fake-source");
    pk_msg_set_uint(a, PK_F_BLOCK_LEN, BLOCK);
    return a;
}

//  One frame at the fake source, answered as the case wants.
static void
s_source(s_world_t *w)
{
    zframe_t *rid = zframe_recv(w->router), *f = rid ? zframe_recv(w->router) : NULL;
    ck_assert_ptr_nonnull(f);
    pk_msg_t *m = NULL;
    char err[PK_ERRLEN] = "";
    ck_assert_msg(pk_msg_decode(zframe_data(f), zframe_size(f), &m, err) == 0, "%s", err);
    zframe_destroy(&f);
    w->seen[m->type]++;
    if (m->type == PK_MSG_FETCH)
        w->fetched += m->keys.count;
    pk_msg_t *a = NULL;
    if (w->mode == S_SILENT)
        ;
    else if (m->type == PK_MSG_DESCRIBE) {
        a = s_server_msg(w, PK_MSG_DESCRIPTION);
        pk_msg_set_string(a, PK_F_CONFIG_FINGERPRINT, w->config.fingerprint);
        pk_msg_set_string(a, PK_F_HASH_SEED, w->config.hash_seed);
        pk_msg_set_string(a, PK_F_PROVIDER, "tcp");
    }
    else if (m->type == PK_MSG_CONNECT) {
        //  a session repeats its connect until answered (a loaded machine
        //  answers late): a new epoch is a new session
        if (memcmp(w->consumer, m->source_epoch, PK_EPOCH_LEN) != 0)
            w->sessions++;
        memcpy(w->consumer, m->source_epoch, PK_EPOCH_LEN);
        a = s_server_msg(w, PK_MSG_CONNECT_ACK);
        pk_msg_set_uint(a, PK_F_NUM_BLOCKS, BLOCKS);
        pk_msg_set_epochs(a, w->epoch, w->consumer);
    }
    else if (m->type == PK_MSG_PING) {
        a = pk_msg_new(PK_MSG_PONG);
        pk_msg_set_epochs(a, w->epoch, w->consumer);
    }
    else if (m->type == PK_MSG_LOOKUP && w->mode == S_GONE) {
        a = pk_msg_new(PK_MSG_DISCONNECT);
        pk_msg_set_code(a, PK_DISC_SHUTDOWN);
        pk_msg_set_string(a, PK_F_REASON, "the fake source leaves");
        pk_msg_set_epochs(a, w->epoch, w->consumer);
    }
    else if (m->type == PK_MSG_LOOKUP) {
        a = pk_msg_new(PK_MSG_LOOKUP_RESP);
        bool hit = w->mode == S_NO_FETCH;
        pk_msg_set_string(a, PK_F_KV_REQUEST_ID, m->kv_request_id);
        pk_msg_set_hits(a, &hit, 1);
        a->keys.count = 1;          //  a keyless answer: its hits count (protocol.h)
        pk_msg_set_uint(a, PK_F_ROUND_SEQ, m->round_seq);
        pk_msg_set_epochs(a, w->epoch, w->consumer);
    }
    //  a fetch or an abort_fetch is never answered
    if (a)
        s_send(w, rid, a);
    pk_msg_destroy(&m);
    zframe_destroy(&rid);
}

//  Hands p to the puller and plays the source until the pull comes back
//  (at most WAIT_MS): the pull, the caller's.
static pk_pull_t *
s_run(s_world_t *w, pk_pull_t *p)
{
    ck_assert_int_eq(pk_puller_send(w->puller, p), 0);
    zactor_t *actor = pk_puller_actor(w->puller);
    ck_assert_ptr_nonnull(actor);
    zpoller_t *poller = zpoller_new(w->router, actor, NULL);
    ck_assert_ptr_nonnull(poller);
    pk_pull_t *back = NULL;
    int64_t until = zclock_mono() + WAIT_MS;
    while (!back && zclock_mono() < until) {
        void *which = zpoller_wait(poller, (int) (until - zclock_mono()));
        if (which == w->router)
            s_source(w);
        else if (which == actor) {
            back = pk_puller_recv(w->puller, zmsg_recv(actor));
            ck_assert_ptr_nonnull(back);
        }
    }
    zpoller_destroy(&poller);
    ck_assert_msg(back != NULL, "the pull did not end within %d ms", WAIT_MS);
    ck_assert_ptr_eq(back, p);
    return back;
}

//  After the pull, its session ends: the source is told (its disconnect
//  reaches it within WAIT_MS), unless the session never opened.
static void
s_source_told(s_world_t *w)
{
    zsock_set_rcvtimeo(w->router, WAIT_MS);
    while (w->seen[PK_MSG_DISCONNECT] == 0)
        s_source(w);
}

//  The pull's blocks go back as the engine API's commit would leave them.
static void
s_release(s_world_t *w, pk_pull_t **p_p)
{
    ck_assert_uint_eq(pk_store_release_owner(w->store, (*p_p)->owner), 1);
    pk_pull_destroy(p_p);
    ck_assert_ptr_null(*p_p);
}

START_TEST(test_puller_fetch_never_completes)
{
    s_world_t w;
    s_world_new(&w, S_NO_FETCH);
    pk_pull_t *p = s_run(&w, s_pull(&w, "never-lands"));
    ck_assert(!p->landed[0]);
    ck_assert_str_eq(p->why[0], "failed");          //  a hit whose fetch failed
    ck_assert_ptr_null(p->from[0]);
    //  the fetch was aborted at --load-timeout, and the abort's ack never came
    ck_assert_msg(strstr(p->reason, "fetch failed") && strstr(p->reason, "in time"),
                  "the reason names neither the fetch nor its timeout: %s", p->reason);
    ck_assert_int_eq(w.seen[PK_MSG_LOOKUP], 1);
    ck_assert_int_eq(w.seen[PK_MSG_FETCH], 1);
    ck_assert_uint_eq(w.fetched, 1);
    ck_assert_int_eq(w.seen[PK_MSG_ABORT_FETCH], 1);
    //  (the source is cut off, not told: it did not answer the abort)
    s_release(&w, &p);
    s_world_destroy(&w);
}
END_TEST

START_TEST(test_puller_miss)
{
    s_world_t w;
    s_world_new(&w, S_MISS);
    pk_pull_t *p = s_run(&w, s_pull(&w, "not-there"));
    ck_assert(!p->landed[0]);
    ck_assert_str_eq(p->why[0], "unknown");         //  the source said no reason
    ck_assert_ptr_null(p->from[0]);
    ck_assert_msg(p->reason[0] == '\0', "a miss is no error: %s", p->reason);
    ck_assert_int_eq(w.seen[PK_MSG_LOOKUP], 1);
    ck_assert_uint_eq(w.fetched, 0);            //  no key fetched
    s_source_told(&w);
    s_release(&w, &p);

    //  the same puller takes the next pull (one client for its life)
    p = s_run(&w, s_pull(&w, "not-there-either"));
    ck_assert(!p->landed[0]);
    ck_assert_str_eq(p->reason, "");
    ck_assert_int_eq(w.seen[PK_MSG_LOOKUP], 2);
    ck_assert_int_eq(w.sessions, 2);                    //  a session per pull
    s_release(&w, &p);
    s_world_destroy(&w);
}
END_TEST

START_TEST(test_puller_source_disconnects)
{
    s_world_t w;
    s_world_new(&w, S_GONE);
    pk_pull_t *p = s_run(&w, s_pull(&w, "k"));
    ck_assert(!p->landed[0]);
    ck_assert_msg(strstr(p->reason, "lookup") && strstr(p->reason, "the fake source leaves"),
                  "the reason names neither the lookup nor the source's: %s", p->reason);
    ck_assert_uint_eq(w.fetched, 0);
    s_release(&w, &p);
    s_world_destroy(&w);
}
END_TEST

START_TEST(test_puller_source_silent)
{
    s_world_t w;
    s_world_new(&w, S_SILENT);
    pk_pull_t *p = s_run(&w, s_pull(&w, "k"));
    ck_assert(!p->landed[0]);
    ck_assert_str_eq(p->why[0], "failed");          //  the pull itself failed
    ck_assert_msg(strstr(p->reason, w.endpoint) != NULL, "the reason does not name %s: %s",
                  w.endpoint, p->reason);
    ck_assert_int_eq(w.seen[PK_MSG_LOOKUP], 0);
    s_release(&w, &p);
    s_world_destroy(&w);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("puller");
    TCase *tc = tcase_create("puller");
    tcase_add_test(tc, test_puller_fetch_never_completes);
    tcase_add_test(tc, test_puller_miss);
    tcase_add_test(tc, test_puller_source_disconnects);
    tcase_add_test(tc, test_puller_source_silent);
    suite_add_tcase(s, tc);
    return pk_test_run("puller", s);
}
