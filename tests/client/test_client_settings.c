/*  test_client_settings.c: that the client library's own settings
    (p2pkv_config_t) take effect through the library: load_timeout,
    abort_ack_timeout, silence_timeout and no_reconnect against a fake
    server on a ZeroMQ ROUTER that answers only what each test lets it
    (tests/fixtures/fake.c; the library talks to it over tcp on
    127.0.0.1, its fabric on the tcp provider), node in the address blob
    each connect carries, fingerprint and hash_seed against a real
    p2pkv-server, provider at p2pkv_client_new, and answer_spin (the
    polling thread's sleeps).  Each timeout is short and far from its
    default, so that the default would fail the test: the bound each
    asserts is the setting plus room for a loaded 2-core machine under
    ASan.
*/
#include "p2pkv.h"
#include "base/clock.h"
#include "callbacks.h"
#include "daemon.h"
#include "fake.h"
#include "wire/protocol.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>

#define BLOCK 4096

typedef cb_seen_t s_seen_t;     //  tests/fixtures/callbacks.h

//  A client with a progress thread, over cfg (peer_id, fingerprint,
//  hash seed, provider and node filled in when unset).
static p2pkv_client_t *
s_client(p2pkv_config_t cfg, s_seen_t *seen)
{
    p2pkv_callbacks_t cb = cb_seen_start(seen, CB_FETCH | CB_SERVER);
    if (!cfg.peer_id)
        cfg.peer_id = "c-settings";
    if (!cfg.fingerprint)
        cfg.fingerprint = "fp";
    if (!cfg.hash_seed)
        cfg.hash_seed = "7";
    cfg.provider = "tcp";
    cfg.node = "127.0.0.1";
    cfg.progress_thread = true;
    char err[256] = "";
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 64, BLOCK, cb, err);
    ck_assert_msg(c != NULL, "p2pkv_client_new: %s", err);
    return c;
}

//  Waits (the progress thread drives the client) until *counter reaches
//  want, or fails after limit seconds; the seconds it took.
static double
s_until(atomic_int *counter, int want, double limit)
{
    double start = pk_clock_monotonic();
    while (atomic_load(counter) < want) {
        ck_assert_msg(pk_clock_monotonic() < start + limit, "not within %.1f s", limit);
        zclock_sleep(1);
    }
    return pk_clock_monotonic() - start;
}

//  A fetch of one key into block 0 (deadline 0: the config's load_timeout).
static void
s_fetch_one(p2pkv_client_t *c, int server, const char *kv)
{
    static const uint8_t key[32] = { 0x42 };
    p2pkv_key_t k = { key, sizeof key };
    uint32_t dest = 0;
    uint64_t id;
    ck_assert_int_eq(p2pkv_client_fetch(c, server, kv, &k, &dest, 1, 0, 0, &id), 0);
}

//  ---------------------------------------------------------------------------

//  load_timeout 0.5 s (default 30): a fetch the server never answers is
//  aborted: abort_fetch reaches the server about 0.5 s after the fetch,
//  and its abort_ack (nothing landing) ends the fetch ABORTED.
START_TEST(test_load_timeout_aborts_an_unanswered_fetch)
{
    const double load = 0.5;
    fk_t f;
    fk_start(&f);
    s_seen_t seen;
    p2pkv_client_t *c = s_client((p2pkv_config_t) { .load_timeout = load,
                                                    .abort_ack_timeout = 10,
                                                    .silence_timeout = 30 }, &seen);
    int server = fk_connected(&f, c);
    s_fetch_one(c, server, "lt");
    pk_msg_t *fetch = fk_next(&f, PK_MSG_FETCH, 5);
    ck_assert_msg(fetch != NULL, "no fetch reached the fake server");
    double sent = pk_clock_monotonic();
    pk_msg_destroy(&fetch);
    pk_msg_t *abort = fk_next(&f, PK_MSG_ABORT_FETCH, 10);
    double asked = pk_clock_monotonic() - sent;
    ck_assert_msg(abort != NULL, "no abort_fetch within 10 s");
    ck_assert_str_eq(abort->kv_request_id, "lt");
    ck_assert_msg(asked > load - 0.1 && asked < load + 1.5, "abort_fetch %.2f s after the fetch",
                  asked);
    ck_assert_int_eq(atomic_load(&seen.fetches), 0);      //  open until the ack
    pk_msg_t *ack = pk_msg_new(PK_MSG_ABORT_ACK);
    pk_msg_set_string(ack, PK_F_KV_REQUEST_ID, abort->kv_request_id);
    pk_msg_set_uint(ack, PK_F_ROUND_SEQ, abort->round_seq);
    pk_msg_set_uint(ack, PK_F_LANDING, 0);
    pk_msg_destroy(&abort);
    fk_send(&f, ack);
    s_until(&seen.fetches, 1, 5);
    ck_assert_msg(atomic_load(&seen.status) == P2PKV_ABORTED, "status %d: %s",
                  atomic_load(&seen.status), seen.fetch_reason);
    ck_assert_int_eq(atomic_load(&seen.downs), 0);        //  the session lives on
    p2pkv_client_destroy(&c);
    fk_stop(&f);
}
END_TEST

//  abort_ack_timeout 0.5 s (default 10): an abort the server does not
//  acknowledge cuts it off (its endpoint closed) and fails the fetch
//  about 0.5 s after the abort_fetch; later fetches on it are refused.
START_TEST(test_abort_ack_timeout_cuts_off_the_server)
{
    const double ack_timeout = 0.5;
    fk_t f;
    fk_start(&f);
    s_seen_t seen;
    p2pkv_client_t *c = s_client((p2pkv_config_t) { .load_timeout = 0.3,
                                                    .abort_ack_timeout = ack_timeout,
                                                    .silence_timeout = 30 }, &seen);
    int server = fk_connected(&f, c);
    s_fetch_one(c, server, "aat");
    pk_msg_t *abort = fk_next(&f, PK_MSG_ABORT_FETCH, 10);
    double asked = pk_clock_monotonic();
    ck_assert_msg(abort != NULL, "no abort_fetch within 10 s");
    pk_msg_destroy(&abort);
    ck_assert_int_eq(atomic_load(&seen.fetches), 0);
    double took = s_until(&seen.fetches, 1, 8);
    ck_assert_msg(took < ack_timeout + 1.5, "failed %.2f s after the abort", took);
    ck_assert_msg(pk_clock_monotonic() - asked > ack_timeout - 0.1, "failed before the timeout");
    ck_assert_int_eq(atomic_load(&seen.status), P2PKV_FAILED);
    ck_assert_msg(strstr(seen.fetch_reason, "abort not acknowledged"), "reason: %s",
                  seen.fetch_reason);
    //  cut off: nothing more from this server can land, and the session
    //  ends (DOWN, saying why); a fetch on it is refused meanwhile, and a
    //  new session follows, with a new endpoint and registration
    //  (protocol.md section 7)
    s_until(&seen.downs, 1, 5);
    ck_assert_msg(strstr(seen.reason, "cut off"), "reason: %s", seen.reason);
    static const uint8_t key[32] = { 0x43 };
    p2pkv_key_t k = { key, sizeof key };
    uint32_t dest = 1;
    uint64_t id;
    ck_assert_int_eq(p2pkv_client_fetch(c, server, "aat2", &k, &dest, 1, 0, 0, &id), -ENOTCONN);
    pk_msg_t *again = fk_next(&f, PK_MSG_CONNECT, 5);
    ck_assert_msg(again != NULL, "no new connect within 5 s");
    pk_msg_destroy(&again);
    p2pkv_client_destroy(&c);
    fk_stop(&f);
}
END_TEST

//  silence_timeout 0.6 s (default 10): a server that stops answering
//  (pings unanswered) is DOWN about 0.6 s after its last word, and the
//  client then connects again on its own.
START_TEST(test_silence_timeout_takes_the_server_down)
{
    const double silence = 0.6;
    fk_t f;
    fk_start(&f);
    s_seen_t seen;
    p2pkv_client_t *c = s_client((p2pkv_config_t) { .keepalive_interval = 0.1,
                                                    .silence_timeout = silence,
                                                    .connect_retry = 0.1 }, &seen);
    double acked = pk_clock_monotonic();
    int server = fk_connected(&f, c);
    //  it keeps asking (pings) while it waits
    pk_msg_t *ping = fk_next(&f, PK_MSG_PING, 5);
    ck_assert_msg(ping != NULL, "no ping within 5 s");
    pk_msg_destroy(&ping);
    s_until(&seen.downs, 1, 8);
    double took = pk_clock_monotonic() - acked;
    ck_assert_msg(took > silence - 0.1 && took < silence + 1.5, "DOWN %.2f s after the ack",
                  took);
    char reason[P2PKV_ERRLEN];
    int st = p2pkv_client_server_state(c, server, reason);
    ck_assert_msg(st == P2PKV_SERVER_DOWN || st == P2PKV_SERVER_CONNECTING, "state %d", st);
    ck_assert_msg(strstr(seen.reason, "silent"), "reason: %s", seen.reason);
    //  not no_reconnect: a new session's connect follows
    pk_msg_t *again = fk_next(&f, PK_MSG_CONNECT, 5);
    ck_assert_msg(again != NULL, "no new connect within 5 s");
    pk_msg_destroy(&again);
    p2pkv_client_destroy(&c);
    fk_stop(&f);
}
END_TEST

//  no_reconnect: a server lost (silent here) stays DOWN: no connect
//  reaches it in 1.5 s at connect_retry 0.1 (where test_silence_timeout_
//  takes_the_server_down sees one within it), and its state stays DOWN.
START_TEST(test_no_reconnect_keeps_a_lost_server_down)
{
    fk_t f;
    fk_start(&f);
    s_seen_t seen;
    p2pkv_client_t *c = s_client((p2pkv_config_t) { .keepalive_interval = 0.1,
                                                    .silence_timeout = 0.5,
                                                    .connect_retry = 0.1,
                                                    .no_reconnect = true }, &seen);
    int server = fk_connected(&f, c);
    s_until(&seen.downs, 1, 8);
    //  a bounded window, fifteen retries long, in which a reconnecting
    //  client would have sent connect again
    pk_msg_t *again = fk_next(&f, PK_MSG_CONNECT, 1.5);
    ck_assert_msg(again == NULL, "connect again despite no_reconnect");
    char reason[P2PKV_ERRLEN];
    ck_assert_int_eq(p2pkv_client_server_state(c, server, reason), P2PKV_SERVER_DOWN);
    ck_assert_msg(strstr(reason, "silent"), "reason: %s", reason);
    ck_assert_int_eq(atomic_load(&seen.ups), 0);
    ck_assert_int_eq(atomic_load(&seen.downs), 1);
    p2pkv_client_destroy(&c);
    fk_stop(&f);
}
END_TEST

//  fingerprint and hash_seed: a client whose value differs from the
//  server's ("fp", "7") is refused at connect (-EPROTO), the error and
//  the STOPPED reason naming the field and both values; the same
//  client's values made equal connect.
START_TEST(test_fingerprint_and_hash_seed_mismatch_refused)
{
    td_t s;
    td_start(&s, NULL);
    struct { const char *fp, *seed, *reason; } cases[] = {
        { "other", "7", "config_fingerprint: server \"fp\", consumer \"other\"" },
        { "fp", "8", "hash_seed: server \"7\", consumer \"8\"" },
        { "fp", "7", NULL },
    };
    for (int i = 0; i < 3; i++) {
        s_seen_t seen;
        p2pkv_client_t *c = s_client((p2pkv_config_t) { .fingerprint = cases[i].fp,
                                                        .hash_seed = cases[i].seed }, &seen);
        char err[256] = "";
        int rc = p2pkv_client_connect(c, s.endpoint, 10, err);
        if (cases[i].reason) {
            ck_assert_msg(rc == -EPROTO, "case %d: connect %d: %s", i, rc, err);
            ck_assert_msg(strstr(err, cases[i].reason), "case %d: %s", i, err);
        }
        else
            ck_assert_msg(rc >= 0, "connect: %s", err);
        p2pkv_client_destroy(&c);
    }
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  The calling thread's voluntary context switches: each sleep (in
//  epoll_wait, say) is one; a sched_yield that gives the core away is not.
static long
s_sleeps(void)
{
    struct rusage ru;
    ck_assert_int_eq(getrusage(RUSAGE_THREAD, &ru), 0);
    return ru.ru_nvcsw;
}

//  Drives c in polls of 5 ms for about seconds (until == 0), or until the
//  monotonic clock reaches until: how many polls, and in *sleeps how many
//  of the thread's sleeps they made.
static int
s_poll_for(p2pkv_client_t *c, double seconds, double until, long *sleeps)
{
    double end = until > 0 ? until : pk_clock_monotonic() + seconds;
    long before = s_sleeps();
    int polls = 0;
    for (; pk_clock_monotonic() < end; polls++)
        ck_assert_int_ge(p2pkv_client_poll(c, 0.005), 0);
    *sleeps = s_sleeps() - before;
    return polls;
}

//  answer_spin: after a lookup, the thread driving the client (here
//  p2pkv_client_poll's caller) looks for the answer without sleeping for
//  answer_spin, then sleeps on the fd; negative: it sleeps at once.  The
//  fake server never answers, so each poll waits its whole timeout.
START_TEST(test_answer_spin_takes_effect)
{
    const double spins[2] = { -1, 0.6 };
    for (int i = 0; i < 2; i++) {
        p2pkv_config_t cfg = { .peer_id = "c-spin", .fingerprint = "fp", .hash_seed = "7",
                               .provider = "tcp", .node = "127.0.0.1",
                               .answer_spin = spins[i] };
        char err[256] = "";
        p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 64, BLOCK,
                                             (p2pkv_callbacks_t) { 0 }, err);
        ck_assert_msg(c != NULL, "p2pkv_client_new: %s", err);
        fk_t f;
        fk_start(&f);
        int server = fk_connected(&f, c);
        static const uint8_t key[32] = { 0x17 };
        p2pkv_key_t k = { key, sizeof key };
        double asked = pk_clock_monotonic();
        ck_assert_int_eq(p2pkv_client_lookup(c, server, "r1", &k, 1), 0);
        //  within the window: a spinner sleeps (almost) never, a sleeper
        //  at (almost) every poll
        long slept;
        int polls = s_poll_for(c, 0, asked + (spins[i] < 0 ? 0.2 : spins[i] / 2), &slept);
        pk_msg_t *m = fk_next(&f, PK_MSG_LOOKUP, 5);
        ck_assert_msg(m != NULL, "the lookup did not leave");
        pk_msg_destroy(&m);
        if (spins[i] < 0)
            ck_assert_msg(slept >= polls / 2, "answer_spin -1: %ld sleeps in %d polls", slept,
                          polls);
        else
            ck_assert_msg(slept <= 2, "answer_spin %.1f: %ld sleeps in %d polls within it",
                          spins[i], slept, polls);
        //  past the window the thread sleeps again
        if (spins[i] > 0) {
            s_poll_for(c, 0, asked + spins[i], &slept);
            polls = s_poll_for(c, 0.2, 0, &slept);
            ck_assert_msg(slept >= polls / 2, "answer_spin %.1f: %ld sleeps in %d polls past it",
                          spins[i], slept, polls);
        }
        p2pkv_client_destroy(&c);
        fk_stop(&f);
    }
    //  more than a second, or not a number, is refused by name
    const double bad[2] = { 1.5, NAN };
    for (int i = 0; i < 2; i++) {
        p2pkv_config_t cfg = { .peer_id = "c-spin", .answer_spin = bad[i] };
        char err[256] = "";
        p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 64, BLOCK,
                                             (p2pkv_callbacks_t) { 0 }, err);
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(err, "answer_spin"), "err: %s", err);
    }
}
END_TEST

//  provider: one libfabric does not have is refused at p2pkv_client_new,
//  by name; "tcp" (every other test) opens.
START_TEST(test_unknown_provider_refused_at_new)
{
    char err[256] = "";
    p2pkv_config_t cfg = { .peer_id = "c-prov", .provider = "no-such-provider",
                           .node = "127.0.0.1" };
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 64, BLOCK, (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err, "no-such-provider"), "err: %s", err);
    cfg.provider = "tcp";
    c = p2pkv_client_new(&cfg, NULL, 64, BLOCK, (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_msg(c != NULL, "tcp: %s", err);
    p2pkv_client_destroy(&c);
}
END_TEST

//  The consumer's fabric address blob in a connect holds the IPv4
//  address a (network order) as a sockaddr would.
static bool
s_blob_has_addr(const pk_msg_t *m, const uint8_t a[4])
{
    for (size_t i = 0; m->agent_metadata && i + 4 <= m->agent_metadata_len; i++)
        if (memcmp(m->agent_metadata + i, a, 4) == 0)
            return true;
    return false;
}

//  node: the fabric endpoint a client offers its servers (the address
//  blob in every connect) is on the local address asked for: 127.0.0.2
//  for one client, 127.0.0.3 for another, each blob holding its own and
//  not the other's.
START_TEST(test_node_is_the_endpoints_address)
{
    const char *nodes[2] = { "127.0.0.2", "127.0.0.3" };
    const uint8_t addr[2][4] = { { 127, 0, 0, 2 }, { 127, 0, 0, 3 } };
    for (int i = 0; i < 2; i++) {
        fk_t f;
        fk_start(&f);
        char err[256] = "";
        p2pkv_config_t cfg = { .peer_id = "c-node", .fingerprint = "fp", .hash_seed = "7",
                               .provider = "tcp", .node = nodes[i], .connect_retry = 0.1 };
        p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 64, BLOCK, (p2pkv_callbacks_t) { 0 },
                                             err);
        ck_assert_msg(c != NULL, "p2pkv_client_new on %s: %s", nodes[i], err);
        //  unanswered: connect gives up, the connect it sent is what we read
        ck_assert_int_eq(p2pkv_client_connect(c, f.endpoint, 0.3, err), -ETIMEDOUT);
        pk_msg_t *m = fk_next(&f, PK_MSG_CONNECT, 5);
        ck_assert_msg(m != NULL, "no connect reached the fake server");
        ck_assert_msg(m->agent_metadata_len > 0, "a connect without an address blob");
        ck_assert_msg(s_blob_has_addr(m, addr[i]), "%s not in the connect's blob", nodes[i]);
        ck_assert_msg(!s_blob_has_addr(m, addr[1 - i]), "%s in the blob of a client on %s",
                      nodes[1 - i], nodes[i]);
        pk_msg_destroy(&m);
        p2pkv_client_destroy(&c);
        fk_stop(&f);
    }
}
END_TEST

int
main(void)
{
    int rc = td_suite_start();
    if (rc)
        return rc;
    Suite *suite = suite_create("client_settings");
    TCase *tc = td_case(suite, "settings", 0);
    tcase_add_test(tc, test_load_timeout_aborts_an_unanswered_fetch);
    tcase_add_test(tc, test_abort_ack_timeout_cuts_off_the_server);
    tcase_add_test(tc, test_silence_timeout_takes_the_server_down);
    tcase_add_test(tc, test_no_reconnect_keeps_a_lost_server_down);
    tcase_add_test(tc, test_fingerprint_and_hash_seed_mismatch_refused);
    tcase_add_test(tc, test_unknown_provider_refused_at_new);
    tcase_add_test(tc, test_answer_spin_takes_effect);
    tcase_add_test(tc, test_node_is_the_endpoints_address);
    return pk_test_run("client_settings", suite);
}
