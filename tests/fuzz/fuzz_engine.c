/*  fuzz_engine.c: the engine API's JSON commands (lib/daemon/engine_api.c,
    pk_engine_api_answer: the dispatch the local socket feeds) against a
    real store, without the daemon: the class alone, no node.  Built as a
    libFuzzer target (make fuzz) and, with driver.c, as the plain driver
    make check runs on tests/fuzz/engine.

    The class is given a store (16 blocks of 64 bytes in a named pool,
    /p2pkv-fuzz-engine-PID, on a virtual clock), the defaults of the
    server's configuration, and ops of the harness's: no sessions (so
    stores and finishes are held), events sent down an inproc pair to a
    sink that is drained and checked, a fake puller actor that "lands"
    every other key of a pull, and stats that add nothing of a node's.

    The input is lines: each a request body from one engine connection,
    except '!' lines of harness operations: tN moves the clock N seconds
    (leases run out), e fails every held store (their timeout), and
    rN switches to engine connection N (its reservations are its own).

    What it asserts after each command: the answer is an object with a
    boolean "ok" (and an "error" string when false); the store's blocks add
    up (free + writing + ready = num_blocks), pinned <= ready, lookups =
    hits + pending + misses, and its live jobs are exactly the held
    stores'.  At the end, every held store failed: no job, no pin, no
    engine job left.
*/
#include "daemon/engine_api.h"
#include "daemon/pointer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define S_BLOCKS 16
#define S_BLOCK_LEN 64

static void
s_fail(const char *what)
{
    fprintf(stderr, "fuzz_engine: %s\n", what);
    abort();
}

//  --------------------------------------------------------------------------
//  What lives as long as the process: sockets and threads are not made
//  per input

static zsock_t *s_local, *s_sink;
static zactor_t *s_puller;

//  The puller's stand-in: every other key landed, the rest not.
static void
s_fake_puller(zsock_t *pipe, void *args)
{
    zsock_signal(pipe, 0);
    while (true) {
        zmsg_t *msg = zmsg_recv(pipe);
        if (!msg)
            break;
        char *cmd = zmsg_popstr(msg);
        bool term = !cmd || streq(cmd, "$TERM");
        pk_pull_t *p = !term && streq(cmd, "PULL") ? pk_pointer_pop(msg) : NULL;
        if (p) {
            for (size_t i = 0; i < p->n; i++)
                p->landed[i] = (p->id + i) % 2 == 0;
            zsock_send(pipe, "sp", "PULLED", p);
        }
        zstr_free(&cmd);
        zmsg_destroy(&msg);
        if (term)
            break;
    }
}

static void
s_process_fini(void)
{
    zactor_destroy(&s_puller);
    zsock_destroy(&s_sink);
    zsock_destroy(&s_local);
}

static void
s_process_init(void)
{
    if (s_local)
        return;
    zsys_init();
    zsys_set_linger(0);
    s_local = zsock_new_pair("@inproc://fuzz-engine");
    s_sink = zsock_new_pair(">inproc://fuzz-engine");
    s_puller = zactor_new(s_fake_puller, NULL);
    if (!s_local || !s_sink || !s_puller)
        s_fail("no sockets");
    zsock_set_rcvtimeo(s_sink, 0);
    atexit(s_process_fini);
}

//  Every event sent to the engine since the last call: JSON objects.
static void
s_drain(void)
{
    zmsg_t *msg;
    while ((msg = zmsg_recv(s_sink))) {
        zframe_t *text = zmsg_last(msg);
        json_t *ev = text ? json_loadb((const char *) zframe_data(text), zframe_size(text), 0,
                                       NULL) : NULL;
        if (!json_is_object(ev) || !json_is_string(json_object_get(ev, "event")))
            s_fail("an event that is not {\"event\": NAME, ...}");
        json_decref(ev);
        zmsg_destroy(&msg);
    }
}

//  --------------------------------------------------------------------------
//  The class and what it is given

typedef struct {
    double now;
    pk_server_config_t config;
    pk_store_t *store;
    pk_engine_api_t *api;
} s_world_t;

static double
s_now(void *arg)
{
    return ((s_world_t *) arg)->now;
}

static void
s_send(void *arg, const void *rid, size_t rlen, json_t *msg)
{
    char *text = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!text)
        s_fail("a message that does not print");
    zmsg_t *m = zmsg_new();
    zmsg_addmem(m, rid, rlen);
    zmsg_addstr(m, text);
    zmsg_send(&m, s_local);
    free(text);
}

//  No consumer has a session: every store and finish is held.
static int
s_session(void *arg, const char *consumer, unsigned *ns)
{
    return -ENOENT;
}

static int
s_deliver(void *arg, const char *consumer, pk_held_t *h)
{
    s_fail("a store delivered to a session that does not exist");
    return -ENOENT;
}

static int
s_pull(void *arg, pk_pull_t *p)
{
    return zsock_send(s_puller, "sp", "PULL", p) == 0 ? 0 : -EAGAIN;
}

static void
s_stats(void *arg, json_t *answer)
{
}

static const pk_engine_api_ops_t s_ops_table = { s_send, s_session, s_deliver, s_pull, s_stats };

static int
s_world_init(s_world_t *w)
{
    memset(w, 0, sizeof *w);
    w->now = 100.0;
    if (pk_server_config_defaults(&w->config) != 0)
        return -1;
    w->config.store_timeout = 0;    //  held stores fail at the first '!e'
    //  named, as the daemon's always is (describe answers with the name)
    char name[64];
    snprintf(name, sizeof name, "/p2pkv-fuzz-engine-%d", (int) getpid());
    w->store = pk_store_new(name, S_BLOCKS, S_BLOCK_LEN, NULL, (pk_clock_t) { w, s_now },
                            NULL, NULL, NULL, NULL);
    w->api = w->store ? pk_engine_api_new(&w->config, w->store, "tcp://127.0.0.1:5555",
                                          &s_ops_table, w) : NULL;
    return w->api ? 0 : -1;
}

static void
s_world_fini(s_world_t *w)
{
    pk_engine_api_destroy(&w->api);
    pk_store_destroy(&w->store);
    pk_server_config_fini(&w->config);
}

//  The store against the class's books: the held stores own every job.
static void
s_check(s_world_t *w)
{
    pk_store_stats_t st;
    pk_store_stats(w->store, &st);
    size_t held_jobs = pk_held_list_jobs(pk_engine_api_held(w->api));
    if (st.free + st.writing + st.ready != S_BLOCKS)
        s_fail("store: free + writing + ready != num_blocks");
    if (st.pinned > st.ready)
        s_fail("store: more blocks pinned than ready");
    if (st.lookups != st.hits + st.pending + st.misses)
        s_fail("store: lookups != hits + pending + misses");
    if (st.jobs != held_jobs || pk_engine_api_jobs(w->api) != held_jobs)
        s_fail("store: its jobs are not the held stores'");
}

static void
s_answer(s_world_t *w, const uint8_t *body, size_t len, const char *rid)
{
    json_t *answer = pk_engine_api_answer(w->api, body, len, rid, strlen(rid));
    const json_t *ok = json_object_get(answer, "ok");
    if (!json_is_boolean(ok)
        || (!json_is_true(ok) && !json_is_string(json_object_get(answer, "error"))))
        s_fail("an answer without \"ok\", or a refusal without \"error\"");
    //  a pull that started comes back from the (fake) puller
    if (json_is_true(ok) && json_object_get(answer, "pull")) {
        zmsg_t *msg = zmsg_recv(s_puller);
        char *cmd = msg ? zmsg_popstr(msg) : NULL;
        pk_pull_t *p = cmd && streq(cmd, "PULLED") ? pk_pointer_pop(msg) : NULL;
        if (p)
            pk_engine_api_pulled(w->api, p);
        zstr_free(&cmd);
        zmsg_destroy(&msg);
    }
    char *text = json_dumps(answer, JSON_COMPACT);
    if (!text)
        s_fail("an answer that does not print");
    if (getenv("PK_FUZZ_VERBOSE"))      //  to see what a seed does
        fprintf(stderr, "%s\n", text);
    free(text);
    json_decref(answer);
}

static void
s_ops(s_world_t *w, const char *at, const char *end, char *rid)
{
    while (at < end) {
        char op = *at++;
        unsigned n = 0;
        while (at < end && *at >= '0' && *at <= '9' && n < 100000)
            n = n * 10 + (unsigned) (*at++ - '0');
        if (op == 't')
            w->now += n;
        else if (op == 'e')
            pk_engine_api_expire(w->api);
        else if (op == 'r')
            snprintf(rid, 16, "engine-%u", n % 4);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_process_init();
    s_world_t w;
    if (s_world_init(&w) != 0)
        s_fail("the engine API could not be made");
    char rid[16] = "engine-0";
    const uint8_t *at = data, *end = data + size;
    while (at < end) {
        const uint8_t *nl = memchr(at, '\n', (size_t) (end - at));
        const uint8_t *stop = nl ? nl : end;
        if (stop > at && at[0] == '!')
            s_ops(&w, (const char *) at + 1, (const char *) stop, rid);
        else if (stop > at)
            s_answer(&w, at, (size_t) (stop - at), rid);
        s_drain();
        s_check(&w);
        at = stop + 1;
    }
    pk_engine_api_expire(w.api);
    s_drain();
    s_check(&w);
    pk_store_stats_t st;
    pk_store_stats(w.store, &st);
    if (pk_held_list_size(pk_engine_api_held(w.api)) || st.jobs || st.pinned)
        s_fail("a held store outlived its timeout");
    s_world_fini(&w);
    return 0;
}
