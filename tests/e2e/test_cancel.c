/*  test_cancel.c: p2pkv_client_cancel, and p2pkv_client_finish with
    fetches open, against real p2pkv-server processes (tests/fixtures/daemon.c) over
    the tcp provider on 127.0.0.1.

    What a cancel promises (p2pkv.h): one abort, one end, P2PKV_ABORTED,
    and only once nothing of the fetch can land any more.  The tests check
    the last part by writing a sentinel into every destination block the
    moment the fetch ends (in on_fetch), then waiting for a fence, and
    then checking that no sentinel was overwritten.

    The fence.  What could still overwrite a sentinel is a write of the
    cancelled round that the server posted before it answered the abort.
    The server's actor for our session is one thread that handles our
    messages in order, and answers abort_fetch only once none of the
    round's writes can still read its source (protocol.md section 7): so
    every write of the round was posted before any write of a fetch we
    send after the end.  All of them travel from the server's one endpoint
    for this session to our one endpoint for it: over the tcp provider one
    connection, delivered in order.  So once a later fetch on the same
    session has landed (its transfer_done and the immediates of all its
    blocks counted), every earlier write has landed too: a sentinel intact
    then stays intact.  (A sleep would prove nothing: the fence is that
    later fetch.)

    No sleep-and-hope: every wait polls the client until a condition
    holds, with a bound.
*/
#include "p2pkv.h"
#include "base/clock.h"
#include "daemon.h"
#include "blocks.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define SMALL 4096
#define BIG (64 * 1024)
#define NBIG 4096                   //  the server's pool for the large load: 256 MiB
#define NLOAD 4000                  //  blocks of the large load; 16 more for the fence
#define SENTINEL 0x5e

//  ---------------------------------------------------------------------------
//  Blocks and keys: tests/fixtures/blocks.h's

static bool
s_block_is(const uint8_t *at, uint8_t byte, size_t block_len)
{
    for (size_t k = 0; k < block_len; k++)
        if (at[k] != byte)
            return false;
    return true;
}

//  The engine's store of keys for our peer under kv: a fetch of kv is
//  served only once it came (before it, the fetch waits: nothing written).
static void
s_store(td_t *d, const char *peer, const char *kv, const p2pkv_key_t *keys, size_t n)
{
    char err[P2PKV_ERRLEN];
    uint64_t job;
    int rc = p2pkv_engine_store(td_api(d), peer, kv, keys, n, -1, &job, err);
    ck_assert_msg(rc == 0, "store: %s", err);
}

static bool
s_unpinned(td_t *d, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    while (true) {
        if (td_stats(td_api(d)).pinned == 0)
            return true;
        if (pk_clock_monotonic() >= deadline)
            return false;
        zclock_sleep(10);
    }
}

//  ---------------------------------------------------------------------------
//  A client and the ends it saw

#define S_MAX_ENDS 16

typedef struct {
    p2pkv_client_t *client;
    int server;
    size_t block_len;
    uint64_t round;                 //  the last lookup's
    size_t nhits;
    int lookups;
    struct { uint64_t id; p2pkv_status_t status; char reason[256]; } ends[S_MAX_ENDS];
    int nends;
    //  on the end of fetch sentinel_id: blocks that were whole (tag
    //  sentinel_tag) counted, then every destination block overwritten
    uint64_t sentinel_id, sentinel_tag;
    const uint32_t *sentinel_dest;
    size_t sentinel_n, whole_at_end;
} s_client_t;

static void
s_on_lookup(void *arg, int server, const char *kv, uint64_t round, const p2pkv_key_t *keys,
            const bool *hits, size_t n)
{
    s_client_t *c = arg;
    if (!hits)
        return;
    c->lookups++;
    c->round = round;
    c->nhits = 0;
    for (size_t i = 0; i < n; i++)
        c->nhits += hits[i];
}

static void
s_on_fetch(void *arg, int server, uint64_t id, p2pkv_status_t status, const char *reason)
{
    s_client_t *c = arg;
    //  first, before anything else of this poll can land: the blocks are
    //  the caller's again from this moment on
    if (id == c->sentinel_id && c->sentinel_dest) {
        uint8_t *pool = p2pkv_client_pool(c->client);
        for (size_t i = 0; i < c->sentinel_n; i++) {
            uint8_t *at = pool + (size_t) c->sentinel_dest[i] * c->block_len;
            c->whole_at_end += bk_block_ok(at, c->sentinel_tag, i, c->block_len);
            memset(at, SENTINEL, c->block_len);
        }
    }
    ck_assert_int_lt(c->nends, S_MAX_ENDS);
    c->ends[c->nends].id = id;
    c->ends[c->nends].status = status;
    snprintf(c->ends[c->nends].reason, sizeof c->ends[0].reason, "%s", reason ? reason : "");
    c->nends++;
}

//  How many ends fetch id had; *status_p gets the last one's status.
static int
s_ends_of(const s_client_t *c, uint64_t id, p2pkv_status_t *status_p, const char **reason_p)
{
    int n = 0;
    for (int i = 0; i < c->nends; i++)
        if (c->ends[i].id == id) {
            n++;
            if (status_p)
                *status_p = c->ends[i].status;
            if (reason_p)
                *reason_p = c->ends[i].reason;
        }
    return n;
}

static void
s_client_open(s_client_t *c, td_t *d, const char *peer, uint64_t num_blocks, size_t block_len,
              double abort_ack_timeout, bool callbacks)
{
    memset(c, 0, sizeof *c);
    c->block_len = block_len;
    p2pkv_config_t cfg = { .peer_id = peer, .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = "127.0.0.1", .load_timeout = 20,
                           .abort_ack_timeout = abort_ack_timeout, .keepalive_interval = 0.5 };
    p2pkv_callbacks_t cb = { .arg = c, .on_lookup = s_on_lookup,
                             .on_fetch = callbacks ? s_on_fetch : NULL };
    char err[256] = "";
    c->client = p2pkv_client_new(&cfg, NULL, num_blocks, block_len, cb, err);
    ck_assert_msg(c->client != NULL, "p2pkv_client_new: %s", err);
    c->server = p2pkv_client_connect(c->client, d->endpoint, 10, err);
    ck_assert_msg(c->server >= 0, "p2pkv_client_connect: %s", err);
}

//  Polls until cond holds or timeout seconds passed; cond's value.
#define S_POLL_UNTIL(c, cond, timeout) ({                                      \
        double deadline_ = pk_clock_monotonic() + (timeout);                   \
        while (!(cond) && pk_clock_monotonic() < deadline_)                    \
            ck_assert_int_ge(p2pkv_client_poll((c)->client, 0.005), 0);        \
        (cond);                                                                \
    })

static uint64_t
s_fetch(s_client_t *c, const char *kv, const p2pkv_key_t *keys, const uint32_t *dest, size_t n,
        uint64_t round)
{
    uint64_t id = 0;
    ck_assert_int_eq(p2pkv_client_fetch(c->client, c->server, kv, keys, dest, n, round, 0, &id),
                     0);
    return id;
}

//  Looks up keys under kv and waits for the answer: its round.
static uint64_t
s_lookup(s_client_t *c, const char *kv, const p2pkv_key_t *keys, size_t n)
{
    int before = c->lookups;
    ck_assert_int_eq(p2pkv_client_lookup(c->client, c->server, kv, keys, n), 0);
    ck_assert_msg(S_POLL_UNTIL(c, c->lookups > before, 10), "no answer to the lookup");
    ck_assert_uint_eq(c->nhits, n);
    return c->round;
}

//  The fence of the header: a fetch on the same session, of blocks the
//  server holds (looked up first, so it is served at once), that lands.
static void
s_fence(s_client_t *c, const char *kv, const p2pkv_key_t *keys, const uint32_t *dest, size_t n)
{
    uint64_t round = s_lookup(c, kv, keys, n);
    uint64_t id = s_fetch(c, kv, keys, dest, n, round);
    p2pkv_status_t st = P2PKV_FAILED;
    const char *why = "";
    ck_assert_msg(S_POLL_UNTIL(c, s_ends_of(c, id, &st, &why) > 0, 20), "the fence never ended");
    ck_assert_msg(st == P2PKV_LANDED, "the fence fetch: status %d (%s)", st, why);
    ck_assert_int_eq(p2pkv_client_finish(c->client, c->server, kv), 0);
}

//  ---------------------------------------------------------------------------
//  1. Cancelled before any byte: the fetch waits for the engine's store, so
//  the server has written nothing; it ends ABORTED, and the store that comes
//  later writes nothing into its blocks.

START_TEST(test_cancel_before_any_byte)
{
    td_t d;
    td_start(&d, NULL);
    bk_fill(&d, 2, 8, SMALL);
    p2pkv_key_t *keys = bk_keys(2, 0, 8);
    s_client_t c;
    s_client_open(&c, &d, "c-early", 64, SMALL, 0, true);
    uint8_t *pool = p2pkv_client_pool(c.client);
    uint32_t dest[4] = { 10, 11, 12, 13 };
    c.sentinel_dest = dest;
    c.sentinel_n = 4;
    c.sentinel_tag = 2;
    //  not looked up, no store yet: the server holds the round
    uint64_t id = s_fetch(&c, "req-early", keys, dest, 4, 0);
    c.sentinel_id = id;
    ck_assert_int_eq(p2pkv_client_cancel(c.client, id), 0);
    p2pkv_status_t st = P2PKV_LANDED;
    const char *why = "";
    ck_assert_msg(S_POLL_UNTIL(&c, s_ends_of(&c, id, &st, &why) > 0, 10),
                  "the cancelled fetch never ended");
    ck_assert_msg(st == P2PKV_ABORTED, "status %d (%s)", st, why);
    ck_assert_msg(strncmp(why, "cancelled", 9) == 0, "reason: %s", why);
    ck_assert_uint_eq(c.whole_at_end, 0);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c.client), 0);
    //  the store for the aborted request comes after all: nothing of it
    //  may reach the blocks, which are the caller's again
    s_store(&d, "c-early", "req-early", keys, 4);
    uint32_t fence_dest[4] = { 20, 21, 22, 23 };
    s_fence(&c, "fence", keys + 4, fence_dest, 4);
    for (size_t i = 0; i < 4; i++)
        ck_assert_msg(s_block_is(pool + (size_t) dest[i] * SMALL, SENTINEL, SMALL),
                      "block %u was written after the cancelled fetch ended", dest[i]);
    for (size_t i = 0; i < 4; i++)
        ck_assert(bk_block_ok(pool + (size_t) fence_dest[i] * SMALL, 2, 4 + i, SMALL));
    ck_assert_int_eq(s_ends_of(&c, id, NULL, NULL), 1);
    ck_assert_int_eq(p2pkv_client_finish(c.client, c.server, "req-early"), 0);
    ck_assert_msg(s_unpinned(&d, 10), "the server still pins blocks of the aborted round");
    p2pkv_client_destroy(&c.client);
    bk_keys_free(keys);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  ---------------------------------------------------------------------------
//  2. Cancelled mid-transfer: NLOAD blocks of 64 KiB, cancelled once the
//  first bytes landed.  At the end (in on_fetch) every destination block
//  gets the sentinel; after the fence none may have changed.

START_TEST(test_cancel_mid_transfer)
{
    td_t d;
    td_start(&d, (const char *[]) { "--pool-blocks", "4096", "--block-len", "65536",
                                    "--pin-quota", "4096", "--silence-timeout", "10", NULL });
    bk_fill(&d, 3, NBIG, BIG);
    p2pkv_key_t *keys = bk_keys(3, 0, NBIG);
    s_client_t c;
    s_client_open(&c, &d, "c-mid", NBIG, BIG, 5, true);
    uint8_t *pool = p2pkv_client_pool(c.client);
    uint32_t *dest = malloc(NLOAD * sizeof *dest);
    ck_assert_ptr_nonnull(dest);
    for (uint32_t i = 0; i < NLOAD; i++)
        dest[i] = i;
    //  a first small fetch connects the data path, so the large load's
    //  writes are posted at once and the cancel finds them in flight
    uint32_t fence_dest[16];
    for (uint32_t i = 0; i < 16; i++)
        fence_dest[i] = NLOAD + i;
    s_fence(&c, "warm", keys + NLOAD, fence_dest, 16);
    uint64_t round = s_lookup(&c, "big", keys, NLOAD);
    c.sentinel_dest = dest;
    c.sentinel_n = NLOAD;
    c.sentinel_tag = 3;
    uint64_t id = s_fetch(&c, "big", keys, dest, NLOAD, round);
    c.sentinel_id = id;
    //  wait for the first landed word of the first block (the server
    //  writes in order, merged), then cancel
    ck_assert_msg(S_POLL_UNTIL(&c, *(volatile uint64_t *) pool != 0 || c.nends > 1, 10),
                  "nothing of the large load landed");
    ck_assert_int_eq(p2pkv_client_cancel(c.client, id), 0);
    double cancelled = pk_clock_monotonic();
    //  The abort is on its way (cancel sends it).  Not progressing our
    //  endpoint for a moment lets the server's writes complete into the
    //  socket buffers unread: its abort_ack then counts blocks that have
    //  not landed here yet, the case the fence exists for (ending at the
    //  ack alone would report those blocks free while they still land).
    //  The pause only provokes that case; nothing below depends on it.
    zclock_sleep(200);
    p2pkv_status_t st = P2PKV_LANDED;
    const char *why = "";
    ck_assert_msg(S_POLL_UNTIL(&c, s_ends_of(&c, id, &st, &why) > 0, 15),
                  "the cancelled load never ended");
    ck_assert_msg(st == P2PKV_ABORTED, "status %d (%s)", st, why);
    ck_assert_msg(c.whole_at_end < NLOAD, "every block landed: the cancel stopped nothing "
                  "(%s, %.3f s)", why, pk_clock_monotonic() - cancelled);
    //  the session goes on; once a later fetch landed, nothing of the
    //  cancelled one is still on its way (header)
    s_fence(&c, "after", keys + NLOAD, fence_dest, 16);
    size_t overwritten = 0, first = 0;
    for (size_t i = 0; i < NLOAD; i++)
        if (!s_block_is(pool + i * BIG, SENTINEL, BIG) && !overwritten++)
            first = i;
    ck_assert_msg(overwritten == 0, "%zu blocks (first: %zu) written after the cancelled load "
                  "ended (%s; %zu were whole at the end)", overwritten, first, why,
                  c.whole_at_end);
    for (size_t i = 0; i < 16; i++)
        ck_assert(bk_block_ok(pool + (size_t) fence_dest[i] * BIG, 3, NLOAD + i, BIG));
    ck_assert_int_eq(s_ends_of(&c, id, NULL, NULL), 1);
    ck_assert_int_eq(p2pkv_client_finish(c.client, c.server, "big"), 0);
    ck_assert_msg(s_unpinned(&d, 10), "the server still pins blocks of the cancelled load");
    p2pkv_client_destroy(&c.client);
    free(dest);
    bk_keys_free(keys);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  ---------------------------------------------------------------------------
//  3. The return codes: after landed, twice, unknown ids; by callback and
//  by p2pkv_client_fetch_status.

START_TEST(test_cancel_return_codes)
{
    td_t d;
    td_start(&d, NULL);
    bk_fill(&d, 4, 8, SMALL);
    p2pkv_key_t *keys = bk_keys(4, 0, 8);
    s_client_t c;
    s_client_open(&c, &d, "c-codes", 64, SMALL, 0, true);
    //  landed: cancel changes nothing
    uint32_t dest[2] = { 1, 2 };
    s_fence(&c, "landed", keys, dest, 2);
    uint64_t landed_id = c.ends[0].id;
    ck_assert_int_eq(p2pkv_client_cancel(c.client, landed_id), -EALREADY);
    ck_assert(bk_block_ok(p2pkv_client_pool(c.client) + SMALL, 4, 0, SMALL));
    //  never issued
    ck_assert_int_eq(p2pkv_client_cancel(c.client, 0), -ENOENT);
    ck_assert_int_eq(p2pkv_client_cancel(c.client, landed_id + 1000), -ENOENT);
    //  twice: the second says it runs, and there is one end
    uint32_t dest2[2] = { 5, 6 };
    uint64_t id = s_fetch(&c, "twice", keys + 2, dest2, 2, 0);
    ck_assert_int_eq(p2pkv_client_cancel(c.client, id), 0);
    ck_assert_int_eq(p2pkv_client_cancel(c.client, id), -EINPROGRESS);
    p2pkv_status_t st = P2PKV_LANDED;
    const char *why = "";
    ck_assert(S_POLL_UNTIL(&c, s_ends_of(&c, id, &st, &why) > 0, 10));
    ck_assert_msg(st == P2PKV_ABORTED, "status %d (%s)", st, why);
    ck_assert_int_eq(p2pkv_client_cancel(c.client, id), -EALREADY);
    //  a later fetch ends after any second end would have come
    uint32_t dest3[2] = { 8, 9 };
    s_fence(&c, "later", keys + 4, dest3, 2);
    ck_assert_int_eq(s_ends_of(&c, id, NULL, NULL), 1);
    ck_assert_int_eq(c.nends, 3);
    ck_assert_int_eq(p2pkv_client_finish(c.client, c.server, "twice"), 0);
    p2pkv_client_destroy(&c.client);

    //  without on_fetch: an end not read yet is an end already
    s_client_t q;
    s_client_open(&q, &d, "c-status", 64, SMALL, 0, false);
    id = s_fetch(&q, "unread", keys, dest, 2, 0);
    ck_assert_int_eq(p2pkv_client_cancel(q.client, id), 0);
    ck_assert_int_eq(p2pkv_client_fetch_status(q.client, id, NULL), -EINPROGRESS);
    ck_assert(S_POLL_UNTIL(&q, p2pkv_client_open_fetches(q.client) == 0, 10));
    ck_assert_int_eq(p2pkv_client_cancel(q.client, id), -EALREADY);
    char reason[P2PKV_ERRLEN];
    ck_assert_int_eq(p2pkv_client_fetch_status(q.client, id, reason), P2PKV_ABORTED);
    ck_assert_int_eq(p2pkv_client_fetch_status(q.client, id, NULL), -ENOENT);     //  read once
    ck_assert_int_eq(p2pkv_client_cancel(q.client, id), -EALREADY);
    ck_assert_int_eq(p2pkv_client_finish(q.client, q.server, "unread"), 0);
    p2pkv_client_destroy(&q.client);
    bk_keys_free(keys);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  ---------------------------------------------------------------------------
//  4. Finish with fetches open: each ends once, ABORTED; the server pins
//  nothing afterwards and the session goes on.

START_TEST(test_finish_cancels_open_fetches)
{
    td_t d;
    td_start(&d, NULL);
    bk_fill(&d, 5, 8, SMALL);
    p2pkv_key_t *keys = bk_keys(5, 0, 8);
    s_client_t c;
    s_client_open(&c, &d, "c-finish", 64, SMALL, 0, true);
    //  a lookup of the request (so finish sends its terminal fetch too),
    //  and two fetches the server holds until a store that never comes
    (void) s_lookup(&c, "req", keys + 6, 1);
    uint32_t da[2] = { 1, 2 }, db[2] = { 3, 4 };
    uint64_t a = s_fetch(&c, "req", keys, da, 2, 0);
    uint64_t b = s_fetch(&c, "req", keys + 2, db, 2, 0);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c.client), 2);
    ck_assert_int_eq(p2pkv_client_finish(c.client, c.server, "req"), 0);
    ck_assert_int_eq(p2pkv_client_cancel(c.client, a), -EINPROGRESS);
    ck_assert(S_POLL_UNTIL(&c, p2pkv_client_open_fetches(c.client) == 0, 10));
    p2pkv_status_t st = P2PKV_LANDED;
    const char *why = "";
    ck_assert_int_eq(s_ends_of(&c, a, &st, &why), 1);
    ck_assert_msg(st == P2PKV_ABORTED, "first: status %d (%s)", st, why);
    ck_assert_int_eq(s_ends_of(&c, b, &st, &why), 1);
    ck_assert_msg(st == P2PKV_ABORTED, "second: status %d (%s)", st, why);
    uint32_t df[2] = { 7, 8 };
    s_fence(&c, "after", keys + 4, df, 2);
    ck_assert_int_eq(c.nends, 3);
    ck_assert_int_eq(p2pkv_client_server_state(c.client, c.server, NULL), P2PKV_SERVER_UP);
    ck_assert_msg(s_unpinned(&d, 10), "the server still pins blocks of the finished request");
    p2pkv_client_destroy(&c.client);
    bk_keys_free(keys);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  ---------------------------------------------------------------------------
//  5. A server that never acknowledges (its actor for us held still, the
//  test-only $P2PKV_TEST_HOLD_SESSION): at the abort-ack timeout it is cut
//  off, and the fetch ends once, ABORTED (p2pkv.h).  A get of the request
//  waiting for its lookup there is cancelled by finish from another thread.

typedef struct {
    s_client_t *c;
    const p2pkv_key_t *keys;
    int rc;
    char err[P2PKV_ERRLEN];
} s_get_arg_t;

static void *
s_get_thread(void *arg)
{
    s_get_arg_t *g = arg;
    uint32_t dest[2] = { 30, 31 };
    bool landed[2];
    int rc = p2pkv_client_get(g->c->client, g->c->server, "held-get", g->keys, dest, 2, true, 20,
                              landed, NULL, NULL, g->err);
    __atomic_store_n(&g->rc, rc, __ATOMIC_RELEASE);
    return NULL;
}

START_TEST(test_cancel_never_acked)
{
    char release[] = "/tmp/p2pkv-hold-XXXXXX";
    td_t d;
    //  --gets off: the get here takes the two steps and waits on its
    //  lookup (a get in one message is a load: its cancel is an abort,
    //  fenced, test_get.c)
    td_start_held(&d, "c-held", release, (const char *const[]) { "--silence-timeout", "10",
                                                                 "--gets", "off", NULL });
    bk_fill(&d, 6, 4, SMALL);
    p2pkv_key_t *keys = bk_keys(6, 0, 4);
    s_client_t c;
    s_client_open(&c, &d, "c-held", 64, SMALL, 1.0, true);
    //  a get, stuck on its lookup, cancelled by finish of its request
    //  from this thread: finish until the get returns (a finish before
    //  the get began has nothing to cancel yet)
    s_get_arg_t g = { &c, keys + 2, 1, "" };
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, s_get_thread, &g), 0);
    double until = pk_clock_monotonic() + 5;
    while (__atomic_load_n(&g.rc, __ATOMIC_ACQUIRE) == 1 && pk_clock_monotonic() < until) {
        ck_assert_int_eq(p2pkv_client_finish(c.client, c.server, "held-get"), 0);
        ck_assert_int_ge(p2pkv_client_poll(c.client, 0.005), 0);
    }
    pthread_join(thread, NULL);
    ck_assert_msg(g.rc == -ECANCELED, "the get returned %d (%s)", g.rc, g.err);
    ck_assert_int_eq(p2pkv_client_server_state(c.client, c.server, NULL), P2PKV_SERVER_UP);
    uint32_t dest[2] = { 1, 2 };
    uint64_t id = s_fetch(&c, "req-held", keys, dest, 2, 0);
    double t0 = pk_clock_monotonic();
    ck_assert_int_eq(p2pkv_client_cancel(c.client, id), 0);
    p2pkv_status_t st = P2PKV_LANDED;
    const char *why = "";
    ck_assert_msg(S_POLL_UNTIL(&c, s_ends_of(&c, id, &st, &why) > 0, 10),
                  "the unacknowledged cancel never ended");
    double took = pk_clock_monotonic() - t0;
    ck_assert_msg(st == P2PKV_ABORTED, "status %d (%s)", st, why);
    ck_assert_msg(strstr(why, "not acknowledged"), "reason: %s", why);
    ck_assert_msg(took >= 0.9, "ended after %.3f s: before the abort-ack timeout", took);
    //  cut off: the session ends, a new one is being made
    ck_assert_int_ne(p2pkv_client_server_state(c.client, c.server, NULL), P2PKV_SERVER_UP);
    ck_assert_uint_eq(p2pkv_client_open_fetches(c.client), 0);
    ck_assert_int_eq(p2pkv_client_cancel(c.client, id), -EALREADY);
    ck_assert_int_eq(s_ends_of(&c, id, NULL, NULL), 1);
    int fd = open(release, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    p2pkv_client_destroy(&c.client);
    bk_keys_free(keys);
    //  released for good: every actor of ours, the new session's too,
    //  goes on and can stop
    ck_assert_int_eq(td_stop(&d), 0);
    unlink(release);
}
END_TEST

//  ---------------------------------------------------------------------------
//  6. `p2pkv get` interrupted: SIGINT cancels the get and the tool exits
//  130 once it ended, not after the lookup's 30 s (its key is being
//  written by the engine, so the lookup waits).

START_TEST(test_cli_get_interrupted)
{
    td_t d;
    td_start(&d, (const char *[]) { "--lookup-timeout", "30", NULL });
    p2pkv_key_t *keys = bk_keys(7, 0, 1);
    uint32_t block;
    td_reserve(&d, keys, 1, &block);
    char hex[2 * BK_KEY_LEN + 1];
    for (size_t i = 0; i < BK_KEY_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", keys[0].bytes[i]);
    char dir[] = "/tmp/p2pkv-intr-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        execl("bin/p2pkv", "p2pkv", "get", "--server", d.endpoint, "-o", dir,
              hex, (char *) NULL);
        _exit(127);
    }
    //  connected: past the point where it blocks the signals for the get
    double until = pk_clock_monotonic() + 10;
    uint64_t sessions = 0;
    while (sessions < 1 && pk_clock_monotonic() < until) {
        sessions = td_stats(td_api(&d)).sessions;
        if (sessions < 1)
            zclock_sleep(10);
    }
    ck_assert_msg(sessions == 1, "p2pkv get never connected");
    double t0 = pk_clock_monotonic();
    kill(pid, SIGINT);
    int status = 0;
    pid_t got = 0;
    until = t0 + 10;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && pk_clock_monotonic() < until)
        zclock_sleep(10);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    ck_assert_msg(got == pid, "p2pkv get still ran 10 s after SIGINT");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 130,
                  "p2pkv get after SIGINT: %s %d", WIFEXITED(status) ? "exit" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    rmdir(dir);
    bk_keys_free(keys);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

int
main(void)
{
    int skip = td_suite_start();
    if (skip)
        return skip;
    Suite *s = suite_create("cancel");
    TCase *tc = td_case(s, "cancel", 60);
    tcase_add_test(tc, test_cancel_before_any_byte);
    tcase_add_test(tc, test_cancel_mid_transfer);
    tcase_add_test(tc, test_cancel_return_codes);
    tcase_add_test(tc, test_finish_cancels_open_fetches);
    tcase_add_test(tc, test_cancel_never_acked);
    tcase_add_test(tc, test_cli_get_interrupted);
    return td_run_and_sweep("cancel", s);
}
