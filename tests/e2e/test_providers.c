/*  test_providers.c: one server offering several data-plane providers
    (--provider shm,tcp), and consumers choosing among them, against real
    p2pkv-server processes (tests/fixtures/daemon.c) on 127.0.0.1.

    What is held: the description lists the providers best first with the
    server's host identity; a same-host consumer under auto connects over
    mmap while one forcing shm and one forcing tcp connect over those, all
    to one server at once, every byte checked; a tcp-only server gives an auto consumer
    tcp; a shm-only server refuses a tcp consumer naming what it offers;
    a consumer forcing a provider the server lacks, or one this machine
    lacks, gets a clear error.  Which provider a session runs over is read
    on both sides: the client's (p2pkv_client_server_provider) and the
    server's channels per fabric (stats "fabrics").

    The shm provider needs nothing but this host, so nothing here skips;
    a consumer in another network namespace is tests/e2e/netns.sh's.  mmap
    (transports/mmap) is offered beside them: an auto consumer on this
    host takes it first.  Under --provider auto a server offers mmap and
    a network provider, not shm beside mmap.
*/
#include "p2pkv.h"
#include "base/clock.h"
#include "base/host_id.h"
#include "daemon.h"
#include "blocks.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#define BLOCK (64 * 1024)
#define NBLOCKS 512                 //  32 MiB moved per consumer per get

static const char *const s_shm_tcp[] = { "--provider", "shm,tcp", "--fabric-addr", "127.0.0.1",
                                         "--pool-blocks", "1024", "--block-len", "65536",
                                         "--pin-quota", "1024", NULL };
static const char *const s_all3[] = { "--provider", "mmap,shm,tcp", "--fabric-addr", "127.0.0.1",
                                      "--pool-blocks", "1024", "--block-len", "65536",
                                      "--pin-quota", "1024", NULL };

//  A consumer of the fixture's fingerprint and seed over provider (NULL:
//  auto), its pool NBLOCKS blocks; asserts it opened.
static p2pkv_client_t *
s_client(const char *name, const char *provider)
{
    p2pkv_config_t cfg = { .peer_id = name, .fingerprint = "fp", .hash_seed = "7",
                           .provider = provider,
                           .node = provider && strncmp(provider, "tcp", 3) == 0 ? "127.0.0.1"
                                                                                  : NULL };
    char err[P2PKV_ERRLEN] = "";
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, NBLOCKS, BLOCK,
                                         (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_msg(c != NULL, "client %s: %s", name, err);
    return c;
}

//  The provider the client's session to server runs over.
static void
s_assert_provider(p2pkv_client_t *c, int server, const char *want)
{
    char got[64] = "";
    ck_assert_int_eq(p2pkv_client_server_provider(c, server, got, sizeof got), 0);
    ck_assert_msg(strncmp(got, want, strlen(want)) == 0, "provider %s, want %s", got, want);
}

//  One get of every block into the client's pool, then every byte checked.
typedef struct {
    p2pkv_client_t *client;
    int server;
    const char *kv;
    int rounds;
    int rc;
    size_t bad;                     //  bytes that differ from the pattern
    char err[P2PKV_ERRLEN];
} s_getter_t;

static void *
s_get_all(void *arg)
{
    s_getter_t *g = arg;
    p2pkv_key_t *keys = bk_keys(1, 0, NBLOCKS);
    uint32_t dest[NBLOCKS];
    bool landed[NBLOCKS];
    for (uint32_t i = 0; i < NBLOCKS; i++)
        dest[i] = i;
    uint8_t *pool = p2pkv_client_pool(g->client);
    for (int r = 0; r < g->rounds && g->rc == 0; r++) {
        memset(pool, 0, (size_t) NBLOCKS * BLOCK);
        char kv[64];
        snprintf(kv, sizeof kv, "%s-%d", g->kv, r);
        int got = p2pkv_client_get(g->client, g->server, kv, keys, dest, NBLOCKS, true, 30,
                                   landed, NULL, NULL, g->err);
        if (got != NBLOCKS)
            g->rc = got < 0 ? got : -EIO;
        for (size_t i = 0; g->rc == 0 && i < NBLOCKS; i++)
            g->bad += bk_block_diff(pool + i * BLOCK, 1, i, BLOCK);
    }
    bk_keys_free(keys);
    return NULL;
}

//  A counter of the server's fabric of provider (a prefix: the server
//  names tcp "tcp;ofi_rxm"): channels_opened or channels_open.
static json_int_t
s_fabric_count(td_t *d, const char *provider, const char *what)
{
    json_t *st = td_stats_json(d);
    json_t *fabrics = json_object_get(st, "fabrics");
    const char *name;
    json_t *f;
    json_int_t n = -1;
    json_object_foreach(fabrics, name, f)
        if (strncmp(name, provider, strlen(provider)) == 0)
            n = json_integer_value(json_object_get(f, what));
    json_decref(st);
    return n;
}

//  Waits until the fabric of provider has n channels open, for 10 s.
static bool
s_channels_open_reach(td_t *d, const char *provider, json_int_t n)
{
    double deadline = pk_clock_monotonic() + 10;
    while (s_fabric_count(d, provider, "channels_open") != n) {
        if (pk_clock_monotonic() >= deadline)
            return false;
        zclock_sleep(10);
    }
    return true;
}

//  The description: providers best first, the best one as provider (what
//  an old consumer reads), and the server's host identity, ours.
START_TEST(test_description_lists_providers_and_host)
{
    td_t d;
    td_start(&d, s_shm_tcp);
    p2pkv_description_t desc;
    char err[P2PKV_ERRLEN] = "", host[PK_HOST_ID_LEN];
    ck_assert_msg(p2pkv_describe(d.endpoint, 10, &desc, err) == 0, "describe: %s", err);
    ck_assert_uint_eq(desc.nproviders, 2);
    ck_assert_str_eq(desc.providers[0], "shm");
    ck_assert_msg(strncmp(desc.providers[1], "tcp", 3) == 0, "second %s", desc.providers[1]);
    ck_assert_str_eq(desc.provider, "shm");
    ck_assert_int_eq(pk_host_id(host, sizeof host), 0);
    ck_assert_str_eq(desc.host, host);
    ck_assert_int_eq(td_stop(&d), 0);
    //  auto opens what this machine has: one same-host provider, mmap
    //  (shm not beside it: node.c says why), then a network provider
    td_start(&d, (const char *const[]) { "--provider", "auto", NULL });
    ck_assert_msg(p2pkv_describe(d.endpoint, 10, &desc, err) == 0, "describe: %s", err);
    ck_assert_uint_eq(desc.nproviders, 2);
    ck_assert_str_eq(desc.providers[0], "mmap");
    ck_assert_str_ne(desc.providers[1], "shm");
    ck_assert_str_ne(desc.providers[1], "mmap");
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  One server offering all three, three consumers at once: the same-host
//  one under auto over mmap, one forcing shm, one forcing tcp; each gets
//  every block, twice, every byte right, while the others' sessions are
//  open and fetching.
START_TEST(test_mmap_shm_and_tcp_consumers_at_once)
{
    td_t d;
    td_start(&d, s_all3);
    bk_fill(&d, 1, NBLOCKS, BLOCK);
    char err[P2PKV_ERRLEN] = "";
    const char *asked[3] = { NULL, "shm", "tcp" }, *want[3] = { "mmap", "shm", "tcp" };
    const char *names[3] = { "prov-near", "prov-shm", "prov-far" };
    p2pkv_client_t *c[3];
    s_getter_t g[3];
    for (int i = 0; i < 3; i++) {
        c[i] = s_client(names[i], asked[i]);
        int server = p2pkv_client_connect(c[i], d.endpoint, 10, err);
        ck_assert_msg(server >= 0, "%s: %s", names[i], err);
        s_assert_provider(c[i], server, want[i]);
        g[i] = (s_getter_t) { c[i], server, names[i], 2, 0, 0, "" };
    }
    //  all sessions are open on the server now (connect returns once UP)
    ck_assert_int_eq(td_stats(td_api(&d)).sessions, 3);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, s_get_all, &g[i]), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(g[i].rc == 0, "%s: %d %s", g[i].kv, g[i].rc, g[i].err);
        ck_assert_msg(g[i].bad == 0, "%s: %zu bytes wrong", g[i].kv, g[i].bad);
        ck_assert_int_eq(s_fabric_count(&d, want[i], "channels_opened"), 1);
    }
    //  one session ending closes its channel on its fabric alone: the
    //  other fabrics' sessions keep theirs and fetch on
    p2pkv_client_destroy(&c[0]);
    ck_assert_msg(s_channels_open_reach(&d, "mmap", 0), "the mmap channel is still open");
    ck_assert_int_eq(s_fabric_count(&d, "shm", "channels_open"), 1);
    ck_assert_int_eq(s_fabric_count(&d, "tcp", "channels_open"), 1);
    for (int i = 1; i < 3; i++) {
        g[i].kv = i == 1 ? "shm-after" : "far-after";
        s_get_all(&g[i]);
        ck_assert_msg(g[i].rc == 0 && g[i].bad == 0, "after: %d %s, %zu bytes wrong", g[i].rc,
                      g[i].err, g[i].bad);
        p2pkv_client_destroy(&c[i]);
    }
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  A tcp-only server: an auto consumer on the same host gets tcp (shm is
//  not offered), and its blocks.
static double
s_cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double) ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6
           + (double) ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

//  shm has no wait object: an idle session over it must still sleep (its
//  owner progresses it on a short timer), not spin a core; an mmap one
//  sleeps on its socket.  Measured as this process's CPU over 1.5 s of
//  idling with the progress thread on, after a get: a spin costs the
//  whole 1.5 s.  _i: 0 shm, 1 mmap.
START_TEST(test_idle_same_host_session_does_not_spin)
{
    const char *want = _i ? "mmap" : "shm";
    td_t s;
    td_start(&s, _i ? s_all3 : s_shm_tcp);
    bk_fill(&s, 1, 8, BLOCK);
    //  pings well inside the test server's 1.5 s --silence-timeout: with
    //  the default 2 s keepalive the 1.5 s idle below raced the server's
    //  retiring of a silent consumer (seen under ASan: DOWN, not UP)
    p2pkv_config_t cfg = { .peer_id = "idle-shm", .fingerprint = "fp", .hash_seed = "7",
                           .progress_thread = true, .keepalive_interval = 0.3 };
    char err[P2PKV_ERRLEN] = "";
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 8, BLOCK, (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_msg(c != NULL, "%s", err);
    int server = p2pkv_client_connect(c, s.endpoint, 10, err);
    ck_assert_msg(server >= 0, "%s", err);
    s_assert_provider(c, server, want);
    p2pkv_key_t *keys = bk_keys(1, 0, 8);
    uint32_t dest[8];
    bool landed[8];
    for (uint32_t i = 0; i < 8; i++)
        dest[i] = i;
    ck_assert_int_eq(p2pkv_client_get(c, server, "idle", keys, dest, 8, true, 10, landed, NULL,
                                      NULL, err), 8);
    double cpu0 = s_cpu_seconds(), t0 = pk_clock_monotonic();
    zclock_sleep(1500);
    double cpu = s_cpu_seconds() - cpu0, wall = pk_clock_monotonic() - t0;
    ck_assert_msg(cpu < 0.3 * wall, "an idle %s session took %.2f s of CPU in %.2f s", want,
                  cpu, wall);
    ck_assert_int_eq(p2pkv_client_server_state(c, server, err), P2PKV_SERVER_UP);
    bk_keys_free(keys);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

START_TEST(test_tcp_server_auto_client_uses_tcp)
{
    td_t d;
    td_start(&d, (const char *const[]) { "--provider", "tcp", "--fabric-addr", "127.0.0.1",
                                          "--pool-blocks", "1024", "--block-len", "65536",
                                          "--pin-quota", "1024", NULL });
    bk_fill(&d, 1, NBLOCKS, BLOCK);
    char err[P2PKV_ERRLEN] = "";
    p2pkv_client_t *c = s_client("prov-auto", "auto");
    int s = p2pkv_client_connect(c, d.endpoint, 10, err);
    ck_assert_msg(s >= 0, "connect: %s", err);
    s_assert_provider(c, s, "tcp");
    s_getter_t g = { c, s, "auto", 1, 0, 0, "" };
    s_get_all(&g);
    ck_assert_msg(g.rc == 0 && g.bad == 0, "get: %d %s, %zu bytes wrong", g.rc, g.err, g.bad);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&d), 0);
}
END_TEST

//  Refusals: a shm-only server refuses a tcp consumer, naming what it
//  offers; a tcp-only one a consumer forcing shm; a provider this machine
//  lacks fails the client at once, named.
START_TEST(test_refusals_name_the_providers)
{
    td_t d;
    td_start(&d, (const char *const[]) { "--provider", "shm", "--block-len", "65536", NULL });
    char err[P2PKV_ERRLEN] = "";
    p2pkv_client_t *c = s_client("prov-tcp", "tcp");
    ck_assert_int_eq(p2pkv_client_connect(c, d.endpoint, 10, err), -EPROTO);
    ck_assert_msg(strstr(err, "this server offers shm") && strstr(err, "provider tcp"),
                  "err: %s", err);
    p2pkv_client_destroy(&c);
    //  the refusal is counted, unlabelled: no fabric of that provider
    json_t *st = td_stats_json(&d);
    ck_assert_int_ge(json_integer_value(json_object_get(json_object_get(st, "fabric"),
                                                        "blobs_refused")), 1);
    json_decref(st);
    ck_assert_int_eq(td_stop(&d), 0);

    td_start(&d, (const char *const[]) { "--provider", "tcp", "--fabric-addr", "127.0.0.1",
                                          "--block-len", "65536", NULL });
    c = s_client("prov-shm", "shm");
    ck_assert_int_eq(p2pkv_client_connect(c, d.endpoint, 10, err), -EPROTO);
    ck_assert_msg(strstr(err, "provider shm, this server offers tcp"), "err: %s", err);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&d), 0);

    //  mmap: an mmap-only server names itself to a tcp consumer, and a
    //  tcp-only server to a consumer forcing mmap
    td_start(&d, (const char *const[]) { "--provider", "mmap", "--block-len", "65536", NULL });
    c = s_client("prov-tcp2", "tcp");
    ck_assert_int_eq(p2pkv_client_connect(c, d.endpoint, 10, err), -EPROTO);
    ck_assert_msg(strstr(err, "this server offers mmap") && strstr(err, "provider tcp"),
                  "err: %s", err);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&d), 0);
    td_start(&d, (const char *const[]) { "--provider", "tcp", "--fabric-addr", "127.0.0.1",
                                          "--block-len", "65536", NULL });
    c = s_client("prov-mmap", "mmap");
    ck_assert_int_eq(p2pkv_client_connect(c, d.endpoint, 10, err), -EPROTO);
    ck_assert_msg(strstr(err, "provider mmap, this server offers tcp"), "err: %s", err);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&d), 0);

    p2pkv_config_t cfg = { .peer_id = "prov-none", .provider = "nosuchprovider" };
    c = p2pkv_client_new(&cfg, NULL, 4, 4096, (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err, "nosuchprovider"), "err: %s", err);
}
END_TEST

//  The end-to-end check over each provider: over mmap the consumer hashes
//  each block in its copy (channel_expect), over shm and tcp after the
//  round landed; either way a block changed at rest in the server's pool
//  is a corrupt result and the others land, verified.
START_TEST(test_corrupt_block_caught_over_each_provider)
{
    td_t d;
    td_start(&d, s_all3);
    enum { N = 64 };
    p2pkv_key_t *keys = bk_keys(3, 0, N);
    bk_publish(&d, keys, N, 3, BLOCK);
    size_t len;
    uint8_t *pool = td_pool_map(&d, &len);
    size_t flipped = 0;
    for (size_t off = 0; off + BLOCK <= len; off += BLOCK)
        if (bk_block_ok(pool + off, 3, 5, BLOCK) || bk_block_ok(pool + off, 3, 40, BLOCK)) {
            pool[off + BLOCK - 1] ^= 0x04;
            flipped++;
        }
    ck_assert_uint_eq(flipped, 2);
    const char *provs[3] = { "mmap", "shm", "tcp" };
    uint32_t dest[N];
    for (int i = 0; i < N; i++)
        dest[i] = (uint32_t) i;
    for (int p = 0; p < 3; p++) {
        p2pkv_client_t *c = s_client(provs[p], provs[p]);
        char err[P2PKV_ERRLEN] = "";
        int server = p2pkv_client_connect(c, d.endpoint, 10, err);
        ck_assert_msg(server >= 0, "%s: %s", provs[p], err);
        s_assert_provider(c, server, provs[p]);
        p2pkv_key_result_t res[N];
        int got = p2pkv_client_get_results(c, server, "chk", keys, dest, N, true, 20, res, NULL,
                                           NULL, err);
        ck_assert_msg(got == N - 2, "%s: %d landed: %s", provs[p], got, err);
        uint8_t *mine = p2pkv_client_pool(c);
        for (int i = 0; i < N; i++) {
            bool bad = i == 5 || i == 40;
            ck_assert_msg(res[i].status == (bad ? P2PKV_KEY_CORRUPT : P2PKV_KEY_LANDED),
                          "%s: key %d: %d", provs[p], i, res[i].status);
            ck_assert(res[i].verified);
            if (!bad)
                ck_assert(bk_block_ok(mine + (size_t) i * BLOCK, 3, (uint64_t) i, BLOCK));
        }
        p2pkv_check_stats_t cs;
        p2pkv_client_checks(c, &cs);
        ck_assert_uint_eq(cs.checked, N - 2);
        ck_assert_uint_eq(cs.corrupt, 2);
        p2pkv_client_destroy(&c);
    }
    munmap(pool, len);
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
    Suite *s = suite_create("providers");
    TCase *tc = td_case(s, "providers", 60);
    tcase_add_test(tc, test_description_lists_providers_and_host);
    tcase_add_test(tc, test_mmap_shm_and_tcp_consumers_at_once);
    tcase_add_test(tc, test_tcp_server_auto_client_uses_tcp);
    tcase_add_test(tc, test_refusals_name_the_providers);
    tcase_add_test(tc, test_corrupt_block_caught_over_each_provider);
    tcase_add_loop_test(tc, test_idle_same_host_session_does_not_spin, 0, 2);
    return td_run_and_sweep("providers", s);
}
