/*  fuzz_session.c: a stream of frames into one server session, with the
    real server role, the real store (an anonymous pool) as its parent,
    the in-memory transport and a virtual clock.  Built as a libFuzzer
    target (make fuzz) and, with driver.c, as the plain driver make check
    runs on tests/fuzz/session.

    The input is lines.  A line that starts with '!' is a list of harness
    operations, one letter each, some followed by a decimal number:

        tN  the clock moves N tenths of a second, then the session ticks
        k   the session ticks
        c   every transfer in flight completes; f: fails; h: ignores a
            wait-mode cancel from now on
        r   the next write is refused
        sN  the engine stores keys aa<N>, aa<N+1> for request req-<N%8>
            (unbound), SN the same bound to round N; eN finishes req-<N%8>
        x   the node retires the session (a flooded door)

    Any other line is one frame from the consumer, as is.  The first line,
    if it is a connect the server accepts, makes the session; otherwise a
    built-in connect does (peer "node-b", epoch 0123456789abcdef x2, 1024
    blocks) and the first line is a frame like the others.  The server's
    epoch is fedcba9876543210 x2: libsodium's random source is replaced, so
    a corpus can hold frames the session applies.

    What it asserts: every frame the session sends decodes; every latency
    it reports is a finite time >= 0; the session is live with no reason
    or retired with one; it counted at most one violation, of one class,
    exactly when it retired for one; every write stays inside the
    consumer's declared pool and the store's; and once the session is
    destroyed, the store holds no pin, no job and no open lookup, and its
    blocks add up (free + writing + ready = num_blocks).
*/
#include "store/store.h"
#include "roles/server_session.h"
#include "sim/memtransport.h"
#include "wire/protocol.h"

#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define S_POOL_BLOCKS 64
#define S_BLOCK_LEN 4096

static const char S_DEFAULT_CONNECT[] =
    "{\"type\":\"connect\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"node-b\","
    "\"source_epoch\":\"0123456789abcdef0123456789abcdef\","
    "\"target_epoch\":\"00000000000000000000000000000000\","
    "\"agent_metadata\":\"cDJwa3YtYWRkcmVzcw==\",\"base_addr\":0,\"num_blocks\":1024,"
    "\"block_len\":4096,\"config_fingerprint\":\"fp\",\"hash_seed\":\"42\"}";

typedef struct {
    double now;
    pk_store_t *store;
    pk_memtransport_t *mem;
    pk_transport_t inner;
    uint64_t consumer_blocks;
    pk_server_session_t *session;
} s_world_t;

static void
s_fail(const char *what)
{
    fprintf(stderr, "fuzz_session: %s\n", what);
    abort();
}

//  --------------------------------------------------------------------------
//  A deterministic random source: the server's epoch is known

static const uint8_t S_EPOCH[8] = { 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10 };

static const char *
s_rand_name(void)
{
    return "fuzz-fixed";
}

static uint32_t
s_rand_random(void)
{
    return 0x76543210;
}

static void
s_rand_buf(void *const buf, const size_t size)
{
    for (size_t i = 0; i < size; i++)
        ((uint8_t *) buf)[i] = S_EPOCH[i % sizeof S_EPOCH];
}

static randombytes_implementation s_rand = {
    .implementation_name = s_rand_name, .random = s_rand_random, .buf = s_rand_buf,
};

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    randombytes_set_implementation(&s_rand);
    return 0;
}

//  --------------------------------------------------------------------------
//  The seams

static double
s_now(void *arg)
{
    return ((s_world_t *) arg)->now;
}

static void
s_out(void *arg, const char *frame, size_t len)
{
    pk_msg_t *m = NULL;
    char err[PK_ERRLEN];
    if (pk_msg_decode(frame, len, &m, err) != 0) {
        fprintf(stderr, "the session sent an invalid frame: %s: %.300s\n", err, frame);
        abort();
    }
    pk_msg_destroy(&m);
}

//  The daemon times lookups and fetches: so does the harness.
static void
s_latency(void *arg, pk_latency_t which, const char *peer, double seconds)
{
    if (!isfinite(seconds) || seconds < 0 || !peer)
        s_fail("a latency that is not a time");
}

//  The write path, checked: nothing outside either pool.
static int64_t
s_write_blocks(void *arg, uint64_t round, const uint32_t *local, const uint32_t *remote, size_t n)
{
    s_world_t *w = arg;
    for (size_t i = 0; i < n; i++) {
        if (remote[i] >= w->consumer_blocks)
            s_fail("a write outside the consumer's declared pool");
        if (local[i] >= S_POOL_BLOCKS)
            s_fail("a write from outside the store's pool");
    }
    return w->inner.write_blocks(w->inner.self, round, local, remote, n);
}

static void
s_poll(void *arg, pk_transfer_fn *each, void *each_arg)
{
    s_world_t *w = arg;
    w->inner.poll(w->inner.self, each, each_arg);
}

static size_t
s_cancel(void *arg, const uint64_t *tids, size_t n, pk_cancel_mode_t mode, uint64_t *still)
{
    s_world_t *w = arg;
    return w->inner.cancel(w->inner.self, tids, n, mode, still);
}

//  --------------------------------------------------------------------------
//  The world: a store with keys aa00..aa1f READY and bb00..bb07 WRITING

static int
s_world_init(s_world_t *w)
{
    *w = (s_world_t) { .now = 100.0 };
    w->store = pk_store_new(NULL, S_POOL_BLOCKS, S_BLOCK_LEN, NULL,
                            (pk_clock_t) { w, s_now }, NULL, NULL, NULL, NULL);
    w->mem = pk_memtransport_new();
    if (!w->store || !w->mem)
        return -1;
    w->inner = pk_memtransport_iface(w->mem);
    static uint8_t block[S_BLOCK_LEN];
    for (int i = 0; i < 32; i++) {
        uint8_t kb[2] = { 0xaa, (uint8_t) i };
        pk_key_t k = pk_key_make(kb, 2);
        if (pk_store_put(w->store, PK_NS_SHARED, &k, block, sizeof block) != 0)
            return -1;
    }
    for (int i = 0; i < 8; i++) {
        uint8_t kb[2] = { 0xbb, (uint8_t) i };
        pk_key_t k = pk_key_make(kb, 2);
        uint32_t b;
        if (pk_store_reserve(w->store, 7, PK_NS_SHARED, &k, 1, &b) != 0)
            return -1;
    }
    return 0;
}

static void
s_world_check(s_world_t *w)
{
    pk_store_stats_t st;
    pk_store_stats(w->store, &st);
    if (st.free + st.writing + st.ready != S_POOL_BLOCKS)
        s_fail("store: free + writing + ready != num_blocks");
    if (st.pinned || st.jobs)
        s_fail("store: a pin or job outlived its session");
    if (st.open_lookups)
        s_fail("store: on_new_request without on_request_finished");
    if (st.lookups != st.hits + st.pending + st.misses)
        s_fail("store: lookups != hits + pending + misses");
}

//  --------------------------------------------------------------------------
//  Input

static uint64_t
s_number(const char **at, const char *end)
{
    uint64_t n = 0;
    int digits = 0;
    while (*at < end && **at >= '0' && **at <= '9' && digits++ < 6)
        n = n * 10 + (uint64_t) (*(*at)++ - '0');
    return n;
}

//  The engine's prefill store, as the node's peer actor does it.
static void
s_store(s_world_t *w, uint64_t n, bool has_round)
{
    uint8_t kb[2][2] = { { 0xaa, (uint8_t) n }, { 0xaa, (uint8_t) (n + 1) } };
    pk_key_t keys[2] = { pk_key_make(kb[0], 2), pk_key_make(kb[1], 2) };
    uint32_t blocks[2];
    bool pinned[2];
    uint64_t job = pk_store_new_job_id(w->store);
    if (pk_store_pin_job(w->store, PK_NS_SHARED, job, keys, 2, blocks, pinned) != 0)
        return;
    char kv[32];
    snprintf(kv, sizeof kv, "req-%u", (unsigned) (n % 8));
    if (!pinned[0] || !pinned[1]
        || pk_server_session_store(w->session, kv, keys, blocks, 2, job, has_round, n) != 0)
        pk_store_release_job(w->store, job);
}

static void
s_transfers(s_world_t *w, char op)
{
    uint64_t next = pk_memtransport_next_tid(w->mem);
    for (uint64_t tid = 1; tid < next; tid++) {
        if (op == 'h')
            pk_memtransport_hold(w->mem, &tid, 1);
        else
            pk_memtransport_complete(w->mem, &tid, 1, op == 'c');
    }
}

static void
s_ops(s_world_t *w, const char *at, const char *end)
{
    char kv[32];
    while (at < end) {
        char op = *at++;
        uint64_t n = s_number(&at, end);
        switch (op) {
            case 't': w->now += (double) n / 10; pk_server_session_tick(w->session); break;
            case 'k': pk_server_session_tick(w->session); break;
            case 'c': case 'f': case 'h': s_transfers(w, op); break;
            case 'r': pk_memtransport_refuse(w->mem, 1); break;
            case 's': s_store(w, n, false); break;
            case 'S': s_store(w, n, true); break;
            case 'e':
                snprintf(kv, sizeof kv, "req-%u", (unsigned) (n % 8));
                pk_server_session_finish(w->session, kv);
                break;
            case 'x': pk_server_session_retire(w->session, PK_DISC_VIOLATION, "flood"); break;
            default: break;
        }
    }
}

//  The session at the end of the stream: its status, reason and counters
//  agree.
static void
s_check_end(s_world_t *w)
{
    pk_server_session_status_t st = pk_server_session_tick(w->session);
    const char *reason = pk_server_session_reason(w->session);
    if ((st == PK_SERVER_SESSION_LIVE) != (reason[0] == '\0'))
        s_fail("a live session with a reason, or a retired one without");
    pk_server_session_counters_t c;
    pk_server_session_counters(w->session, &c);
    uint64_t sum = 0;
    for (int i = 0; i < PK_VIOLATION_COUNT; i++)
        sum += c.by_reason[i];
    if (sum != c.violations || c.violations > 1)
        s_fail("violations are not one class each, or more than one was counted");
    if ((c.violations == 1) != (strncmp(reason, "violation:", 10) == 0))
        s_fail("a violation counted without retiring for it, or the other way");
}

//  The session for the first line when it is an acceptable connect, else
//  for the built-in one; true when the first line was used up.
static bool
s_open(s_world_t *w, const uint8_t *line, size_t len)
{
    static const pk_server_identity_t id = { "server-a", S_BLOCK_LEN, S_POOL_BLOCKS, "fp", "42",
                                             "mem", NULL, 0, NULL, NULL };
    static const pk_server_session_config_t config = { PK_SERVER_ROLE_CONFIG_DEFAULT, 10.0,
                                                       4, 16, 3, 8, false };
    char err[PK_ERRLEN];
    pk_msg_t *connect = NULL;
    bool used = pk_msg_decode(line, len, &connect, err) == 0 && connect->type == PK_MSG_CONNECT
                && pk_server_session_check_connect(&id, connect, err, sizeof err) == 0;
    if (!used) {
        pk_msg_destroy(&connect);
        if (pk_msg_decode(S_DEFAULT_CONNECT, strlen(S_DEFAULT_CONNECT), &connect, err) != 0)
            s_fail(err);
    }
    w->consumer_blocks = connect->num_blocks;
    w->session = pk_server_session_new(&id, &config, connect, (pk_clock_t) { w, s_now },
                                       (pk_transport_t) { .self = w,
                                                          .write_blocks = s_write_blocks,
                                                          .poll = s_poll, .cancel = s_cancel },
                                       pk_store_parent(w->store), s_out, w);
    pk_msg_destroy(&connect);
    if (!w->session)
        s_fail("the session could not be made");
    pk_server_session_set_latency(w->session, s_latency, w);
    return used;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_world_t w;
    if (s_world_init(&w) != 0)
        s_fail("the world could not be made");
    const uint8_t *at = data, *end = data + size;
    bool first = true;
    while (at <= end) {
        const uint8_t *nl = memchr(at, '\n', (size_t) (end - at));
        const uint8_t *stop = nl ? nl : end;
        size_t len = (size_t) (stop - at);
        if (!(first && s_open(&w, at, len))) {
            if (len && at[0] == '!')
                s_ops(&w, (const char *) at + 1, (const char *) stop);
            else if (len)
                pk_server_session_on_frame(w.session, at, len);
        }
        first = false;
        at = stop + 1;
    }
    s_check_end(&w);
    pk_server_session_destroy(&w.session);
    s_world_check(&w);
    pk_memtransport_destroy(&w.mem);
    pk_store_destroy(&w.store);
    return 0;
}
