/*  test_settings_e2e.c: settings of p2pkv-server that only a running
    server shows taking effect, each on the real server (tests/fixtures/daemon.c)
    over the tcp provider on 127.0.0.1.

    Each test sets one setting far from both its default and the
    fixture's, then waits (with a generous deadline) for what the setting
    makes happen: a pending key answered as a miss, a store job failed, a
    lease freed, a connection dropped, a line logged or not.  Where a
    bound shows the setting rather than its default, the test says which.
    doc/architecture.md ("Settings, and the tests that show them") maps
    every setting to its test.
*/
#include "consumer.h"
#include "blocks.h"
#include "daemon.h"
#include "base/clock.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <dirent.h>
#include <jansson.h>
#include <poll.h>
#include <sodium.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK TD_BLOCK_LEN

//  A random key, as bytes (raw) and for the engine API.
static pk_key_t
s_random_key(uint8_t raw[32], p2pkv_key_t *key)
{
    randombytes_buf(raw, 32);
    *key = (p2pkv_key_t) { raw, 32 };
    return pk_key_make(raw, 32);
}

//  A block published on the server under key (its SHA-256 into raw).
static void
s_put(td_t *s, uint8_t raw[32], p2pkv_key_t *key)
{
    static uint8_t data[BLOCK];
    randombytes_buf(data, sizeof data);
    crypto_hash_sha256(raw, data, sizeof data);
    *key = (p2pkv_key_t) { raw, 32 };
    td_put(td_api(s), key, data, 1, BLOCK);
}

//  --lookup-timeout: a key the engine is still writing is answered as a
//  miss once the lookup timeout passes: not at once (it is pending), and
//  well before the default 5 s.
START_TEST(test_lookup_timeout_expires_pending_to_miss)
{
    td_t s;
    td_start(&s, (const char *const[]) { "--lookup-timeout", "0.2", NULL });
    uint8_t raw[32];
    p2pkv_key_t ekey;
    uint32_t block;
    pk_key_t key = s_random_key(raw, &ekey);
    td_reserve(&s, &ekey, 1, &block);
    tc_t *tc = tc_to(s.endpoint, "c-pending");
    double t0 = pk_clock_monotonic();
    ck_assert_int_eq(tc_send(tc, tc_lookup("r1", 1, &key, 1)), 0);
    pk_msg_t *resp = tc_expect(tc, PK_MSG_LOOKUP_RESP, 10);
    double took = pk_clock_monotonic() - t0;
    ck_assert_uint_eq(resp->keys.count, 1);
    ck_assert_msg(!resp->hits[0], "a key still being written answered as a hit");
    pk_msg_destroy(&resp);
    ck_assert_msg(took >= 0.19, "answered after %.3f s, before the lookup timeout", took);
    ck_assert_msg(took < 4.0, "answered after %.3f s: the default 5 s, not 0.2", took);
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  --store-timeout: an engine's store for a consumer that never fetches
//  fails at the store timeout (store_result false) and its pins go; the
//  fixture's own is 3 s, the default 30.
START_TEST(test_store_timeout_fails_an_unfetched_store)
{
    td_t s;
    td_start(&s, (const char *const[]) { "--store-timeout", "0.5", NULL });
    uint8_t raw[32];
    p2pkv_key_t key;
    s_put(&s, raw, &key);
    double t0 = pk_clock_monotonic();
    char err[P2PKV_ERRLEN] = "";
    uint64_t job;
    ck_assert_int_eq(p2pkv_engine_store(td_api(&s), "c-never", "req-1", &key, 1, -1, &job,
                                        err), 0);
    ck_assert_int_eq(td_stats(td_api(&s)).pinned, 1);
    p2pkv_engine_event_t ev = td_event(td_api(&s), P2PKV_EVENT_STORE, job, 10);
    double took = pk_clock_monotonic() - t0;
    ck_assert(!ev.success);
    ck_assert_msg(took >= 0.45, "failed after %.3f s, before the store timeout", took);
    ck_assert_msg(took < 2.5, "failed after %.3f s: the fixture's 3 s, not 0.5", took);
    ck_assert_int_eq(td_stats(td_api(&s)).pinned, 0);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  A round that fails at the store timeout is said in the log, naming the
//  setting: it bounds a round's whole transfer, so on a slow link a large
//  round fails by it, and the consumer hears only that it could not be
//  served (found by p2pkv-bench rails at 150 Mbit/s).
START_TEST(test_store_timeout_said_in_the_log)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    td_t s;
    td_start_logged(&s, (const char *const[]) { "--store-timeout", "0.5", NULL }, p[1]);
    close(p[1]);
    tc_t *tc = tc_to(s.endpoint, "c-slow");
    uint8_t raw[32];
    p2pkv_key_t key;
    s_put(&s, raw, &key);
    char err[P2PKV_ERRLEN] = "";
    uint64_t job;
    ck_assert_int_eq(p2pkv_engine_store(td_api(&s), "c-slow", "req-1", &key, 1, -1, &job,
                                        err), 0);
    p2pkv_engine_event_t ev = td_event(td_api(&s), P2PKV_EVENT_STORE, job, 60);
    ck_assert(!ev.success);
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
    char *text = td_read_log(p[0]);
    ck_assert_msg(strstr(text, "warn: session c-slow: 1 round(s) failed at --store-timeout "
                               "(0.5 s)"),
                  "no line naming --store-timeout; log:\n%s", text);
    free(text);
}
END_TEST

//  --lease-timeout: a reservation the engine never commits is freed at
//  the lease timeout (default 30 s), and committing it then is refused.
START_TEST(test_lease_timeout_frees_an_uncommitted_block)
{
    td_t s;
    td_start(&s, (const char *const[]) { "--lease-timeout", "1", NULL });
    uint8_t raw[32];
    p2pkv_key_t key;
    uint32_t block;
    s_random_key(raw, &key);
    double t0 = pk_clock_monotonic();
    td_reserve(&s, &key, 1, &block);
    ck_assert_int_eq(td_stats(td_api(&s)).writing, 1);
    double deadline = t0 + 15;
    uint64_t writing = 1;
    while (writing && pk_clock_monotonic() < deadline)
        if ((writing = td_stats(td_api(&s)).writing))
            zclock_sleep(50);
    double took = pk_clock_monotonic() - t0;
    ck_assert_msg(writing == 0, "still reserved after %.1f s", took);
    ck_assert_msg(took >= 0.95, "freed after %.3f s, before the lease timeout", took);
    //  this handle reserved it, so the server is asked, and refuses
    char err[P2PKV_ERRLEN] = "";
    ck_assert_int_eq(p2pkv_engine_commit(td_api(&s), &key, 1, err), -ENOENT);
    ck_assert_msg(strstr(err, "not reserved by this connection"), "commit after the lease: %s",
                  err);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  A frame from a peer without a session, then a describe from the same
//  socket, repeated until answered: the door hands one frame per routing
//  id at a time to the handshake, in order, so the answer means the junk
//  frame was judged (and, at debug, logged) first.
static void
s_junk_then_describe(td_t *s)
{
    zsock_t *d = zsock_new_dealer(s->endpoint);
    ck_assert_ptr_nonnull(d);
    zsock_set_rcvtimeo(d, 200);
    zstr_send(d, "not json at all");
    double deadline = pk_clock_monotonic() + 15;
    zframe_t *f = NULL;
    while (!f && pk_clock_monotonic() < deadline) {
        zstr_send(d, "{\"type\":\"describe\"}");
        f = zframe_recv(d);
    }
    ck_assert_msg(f != NULL, "no description within 15 s");
    zframe_destroy(&f);
    zsock_destroy(&d);
}

//  --log-level: session events are said at info, frames from unknown
//  peers at debug, neither at error.  The server's stderr is read to its
//  end once it exited, so what is absent was never written.
START_TEST(test_log_level_filters_lines)
{
    const struct { const char *level; bool info, debug; } cases[] = {
        { "error", false, false }, { "info", true, false }, { "debug", true, true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int p[2];
        ck_assert_int_eq(pipe(p), 0);
        td_t s;
        td_start_logged(&s, (const char *const[]) { "--log-level", cases[i].level, NULL }, p[1]);
        close(p[1]);
        s_junk_then_describe(&s);
        tc_t *tc = tc_to(s.endpoint, "c-log");
        tc_destroy(&tc);
        ck_assert_int_eq(td_stop(&s), 0);
        char *text = td_read_log(p[0]);
        bool info = strstr(text, "info: session c-log opened")
                    && strstr(text, "info: shutting down");
        bool debug = strstr(text, "debug: frame from an unknown peer dropped") != NULL;
        ck_assert_msg(info == cases[i].info && debug == cases[i].debug,
                      "--log-level %s: info lines %s, debug lines %s; log:\n%s", cases[i].level,
                      info ? "present" : "absent", debug ? "present" : "absent", text);
        free(text);
    }
}
END_TEST

//  A describe of exactly len bytes (an unknown member pads it).
static void
s_send_describe(zsock_t *d, size_t len)
{
    const char *head = "{\"type\":\"describe\",\"pad\":\"";
    char *frame = malloc(len + 1);
    size_t at = (size_t) snprintf(frame, len + 1, "%s", head);
    memset(frame + at, 'x', len - at - 2);
    memcpy(frame + len - 2, "\"}", 2);
    frame[len] = '\0';
    ck_assert_int_eq(zmq_send(zsock_resolve(d), frame, len, 0), (int) len);
    free(frame);
}

//  A DEALER connected to endpoint, watched for its disconnection
//  (*monitor_p: czmq's zmonitor on it, started before the connect).
static zsock_t *
s_watched_dealer(const char *endpoint, zactor_t **monitor_p)
{
    zsock_t *d = zsock_new(ZMQ_DEALER);
    ck_assert_ptr_nonnull(d);
    zactor_t *monitor = zactor_new(zmonitor, d);
    ck_assert_ptr_nonnull(monitor);
    zstr_sendx(monitor, "LISTEN", "DISCONNECTED", NULL);
    zstr_sendx(monitor, "START", NULL);
    zsock_wait(monitor);
    ck_assert_int_eq(zsock_connect(d, "%s", endpoint), 0);
    *monitor_p = monitor;
    return d;
}

//  The watched dealer's connection was dropped within 10 s, for what.
static void
s_expect_disconnected(zactor_t *monitor, const char *what)
{
    zsock_set_rcvtimeo(monitor, 10000);
    zmsg_t *ev = zmsg_recv(monitor);
    ck_assert_msg(ev != NULL, "%s did not cost its connection within 10 s", what);
    char *name = zmsg_popstr(ev);
    ck_assert_str_eq(name, "DISCONNECTED");
    zstr_free(&name);
    zmsg_destroy(&ev);
}

//  --max-frame: a frame over the limit makes libzmq drop the sender's
//  connection (ZMQ_MAXMSGSIZE); one under it is answered.
START_TEST(test_max_frame_drops_a_larger_frame)
{
    td_t s;
    td_start(&s, (const char *const[]) { "--max-frame", "4096", NULL });
    zactor_t *monitor;
    zsock_t *d = s_watched_dealer(s.endpoint, &monitor);
    zsock_set_rcvtimeo(d, 10000);
    s_send_describe(d, 3000);
    zframe_t *f = zframe_recv(d);
    ck_assert_msg(f != NULL, "a 3000-byte describe under --max-frame 4096 was not answered");
    ck_assert_ptr_nonnull(strstr((const char *) zframe_data(f), "description"));
    zframe_destroy(&f);
    s_send_describe(d, 8000);
    s_expect_disconnected(monitor, "an 8000-byte frame");
    zactor_destroy(&monitor);
    zsock_destroy(&d);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  --max-frame holds on the engine's local socket too: an engine request
//  over it costs its connection, one under it is answered.  (Without it, a
//  process that reaches the socket had the server take any frame whole:
//  gigabytes of one, before a byte was parsed.)
START_TEST(test_max_frame_holds_on_the_local_socket)
{
    td_t s;
    td_start(&s, (const char *const[]) { "--max-frame", "4096", NULL });
    zactor_t *monitor;
    zsock_t *d = s_watched_dealer(s.local, &monitor);
    zsock_set_rcvtimeo(d, 10000);
    for (size_t len = 3000; len <= 8000; len += 5000) {
        char *frame = malloc(len);
        ck_assert_ptr_nonnull(frame);
        size_t at = (size_t) sprintf(frame, "{\"cmd\":\"describe\",\"pad\":\"");
        memset(frame + at, 'x', len - at - 2);
        memcpy(frame + len - 2, "\"}", 2);
        ck_assert_int_eq(zmq_send(zsock_resolve(d), frame, len, 0), (int) len);
        free(frame);
        if (len > 4096)
            break;
        zframe_t *f = zframe_recv(d);
        ck_assert_msg(f != NULL, "a 3000-byte describe under --max-frame 4096 was not answered");
        ck_assert_ptr_nonnull(strstr((const char *) zframe_data(f), "\"instance\""));
        zframe_destroy(&f);
    }
    s_expect_disconnected(monitor, "an 8000-byte request on the local socket");
    zactor_destroy(&monitor);
    zsock_destroy(&d);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  Once the door counted a frame dropped (the flood seen), releases the
//  actor and counts its answers of type want until the session's end:
//  disconnect violation naming says.  The count.
static int
s_release_and_count(td_t *s, tc_t *tc, const char *release, pk_msg_type_t want,
                    const char *says)
{
    json_int_t dropped = 0;
    double until = pk_clock_monotonic() + 10;
    while (dropped < 1 && pk_clock_monotonic() < until) {
        json_t *st = td_stats_json(s);
        json_t *f = json_object_get(json_object_get(st, "metrics"), "p2pkv_frames_dropped_total");
        dropped = json_integer_value(json_object_get(f, "total"));
        json_decref(st);
        if (dropped < 1)
            zclock_sleep(10);
    }
    ck_assert_msg(dropped >= 1, "no frame counted dropped within 10 s");
    int fd = open(release, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    int answers = 0;
    pk_msg_t *m;
    while ((m = tc_recv(tc, 10)) && m->type == want) {
        answers++;
        pk_msg_destroy(&m);
    }
    ck_assert_msg(m != NULL, "neither %s nor disconnect within 10 s", pk_msg_type_name(want));
    ck_assert_int_eq(m->type, PK_MSG_DISCONNECT);
    ck_assert_int_eq(m->code, PK_DISC_VIOLATION);
    ck_assert_msg(strstr(m->reason, says), "reason: %s", m->reason);
    pk_msg_destroy(&m);
    unlink(release);
    return answers;
}

//  --max-queued-frames 4: with its actor held still, a consumer's fifth
//  frame finds four queued: the door counts it dropped and ends the
//  session as a flood.  Released, the actor answers the four it was given
//  (pongs), then says disconnect violation, naming the limit; the frames
//  past it were never given to it.
START_TEST(test_max_queued_frames_ends_a_flood)
{
    char release[] = "/tmp/p2pkv-hold-XXXXXX";
    td_t s;
    td_start_held(&s, "c-held", release, (const char *const[]) { "--max-queued-frames", "4",
                                                               NULL });
    tc_t *tc = tc_to(s.endpoint, "c-held");
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(tc_send(tc, pk_msg_new(PK_MSG_PING)), 0);
    ck_assert_int_eq(s_release_and_count(&s, tc, release, PK_MSG_PONG,
                                         "more than 4 frames queued"), 4);
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  --max-queued-bytes: the same flood counted in bytes.  Aborts of about
//  3,000 bytes each (a long request id) to an actor held still, frames
//  being no limit (--max-queued-frames 100): two fit in 8,192 bytes, the
//  third ends the session.  Released, the actor answers exactly the two
//  it was given, then disconnect violation naming the limit.
START_TEST(test_max_queued_bytes_ends_a_flood)
{
    char release[] = "/tmp/p2pkv-hold-XXXXXX";
    td_t s;
    td_start_held(&s, "c-heavy", release, (const char *const[]) { "--max-queued-frames", "100",
                                                                "--max-queued-bytes", "8192",
                                                                NULL });
    tc_t *tc = tc_to(s.endpoint, "c-heavy");
    char kv[2900];
    memset(kv, 'k', sizeof kv - 1);
    kv[sizeof kv - 1] = '\0';
    for (int i = 0; i < 10; i++) {
        pk_msg_t *m = pk_msg_new(PK_MSG_ABORT_FETCH);
        pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
        pk_msg_set_uint(m, PK_F_ROUND_SEQ, (uint64_t) i + 1);
        ck_assert_int_eq(tc_send(tc, m), 0);
    }
    ck_assert_int_eq(s_release_and_count(&s, tc, release, PK_MSG_ABORT_ACK,
                                         "more than 8192 bytes queued"), 2);
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  --provider and --peer-id: the server serves with the provider asked
//  for under the name asked for (the description says both), and refuses
//  to start with a provider libfabric lacks, naming it.
START_TEST(test_provider_and_peer_id_are_the_ones_asked_for)
{
    td_t s;
    td_start(&s, (const char *const[]) { "--provider", "tcp", "--peer-id", "node-settings",
                                          NULL });
    p2pkv_description_t d;
    char err[PK_ERRLEN] = "";
    ck_assert_msg(p2pkv_describe(s.endpoint, 10, &d, err) == 0, "describe: %s", err);
    ck_assert_msg(strncmp(d.provider, "tcp", 3) == 0, "provider %s", d.provider);
    ck_assert_str_eq(d.peer_id, "node-settings");
    ck_assert_int_eq(td_stop(&s), 0);
    char pool[64], local[96], said[2048];
    snprintf(pool, sizeof pool, "/p2pkv-e2e-%d-prov", getpid());
    snprintf(local, sizeof local, "ipc:///tmp/p2pkv-e2e-%d-prov.sock", getpid());
    const char *args[] = { "--peer-id", "srv-prov", "--bind", "tcp://127.0.0.1:*", "--local",
                           local, "--pool-name", pool, "--pool-blocks", "4", "--block-len",
                           "4096", "--provider", "nosuchprovider", NULL };
    ck_assert_int_eq(td_run(args, said, sizeof said), 1);
    ck_assert_msg(strstr(said, "nosuchprovider"), "said: %s", said);
    //  in a list too, beside one that opens: named, never skipped
    args[13] = "shm,nosuchprovider";
    ck_assert_int_eq(td_run(args, said, sizeof said), 1);
    ck_assert_msg(strstr(said, "nosuchprovider"), "said: %s", said);
}
END_TEST

#define BIG (64 * 1024)
#define NBIG 2048

//  The server's gauge of transfers in flight (the tests here have one
//  consumer, id).
static double
s_in_flight(td_t *s, const char *id)
{
    json_t *st = td_stats_json(s);
    json_t *f = json_object_get(json_object_get(st, "metrics"), "p2pkv_transfers_in_flight");
    double n = json_number_value(json_object_get(f, "total"));
    json_decref(st);
    return n;
}

//  A server (flags after the big pool's) holding NBIG blocks of BIG bytes,
//  and a consumer ("c-stuck") whose fetch of all of them is stuck: it
//  progressed its endpoint until the first blocks landed and never again,
//  and the server says the transfer is in flight.
static tc_t *
s_stuck_transfer(td_t *s, const char *const *flags)
{
    char nbig[16], big[16];
    snprintf(nbig, sizeof nbig, "%d", NBIG);
    snprintf(big, sizeof big, "%d", BIG);
    const char *all[32] = { "--pool-blocks", nbig, "--block-len", big, "--pin-quota", nbig };
    size_t n = 6;
    for (size_t i = 0; flags[i]; i++) {
        ck_assert_uint_lt(n + 1, sizeof all / sizeof all[0]);
        all[n++] = flags[i];
    }
    all[n] = NULL;
    td_start(s, all);
    static pk_key_t keys[NBIG];
    static uint32_t idx[NBIG];
    p2pkv_key_t *ekeys = bk_keys(1, 0, NBIG);
    for (size_t i = 0; i < NBIG; i++) {
        keys[i] = pk_key_make(ekeys[i].bytes, ekeys[i].len);
        idx[i] = (uint32_t) i;
    }
    bk_publish(s, ekeys, NBIG, 1, BIG);
    tc_config_t c = { s->endpoint, "c-stuck", NBIG, BIG, "fp", "7", 0 };
    tc_t *tc = tc_new(&c);
    ck_assert_ptr_nonnull(tc);
    pk_msg_t *answer = tc_connect(tc, 10);
    ck_assert_msg(answer && answer->type == PK_MSG_CONNECT_ACK, "no connect_ack");
    pk_msg_destroy(&answer);
    ck_assert_int_eq(tc_send(tc, tc_lookup("stuck", 1, keys, NBIG)), 0);
    pk_msg_t *resp = tc_expect(tc, PK_MSG_LOOKUP_RESP, 10);
    size_t hits = 0;
    for (size_t i = 0; i < resp->keys.count; i++)
        hits += resp->hits[i];
    pk_msg_destroy(&resp);
    ck_assert_uint_eq(hits, NBIG);
    ck_assert_int_eq(tc_send(tc, tc_fetch("stuck", 1, keys, idx, NBIG)), 0);
    double deadline = pk_clock_monotonic() + 10;
    while (tc_landed(tc, 1) == 0) {
        ck_assert_msg(pk_clock_monotonic() < deadline, "nothing landed within 10 s");
        tc_progress(tc, 0.0005);
    }
    ck_assert_msg(tc_landed(tc, 1) < NBIG, "every block landed before the consumer stopped");
    deadline = pk_clock_monotonic() + 10;
    while (s_in_flight(s, "c-stuck") < 1) {
        ck_assert_msg(pk_clock_monotonic() < deadline, "no transfer in flight within 10 s");
        zclock_sleep(20);
    }
    ck_assert_uint_lt(tc_landed(tc, 1), NBIG);
    bk_keys_free(ekeys);
    return tc;
}

//  --shutdown-timeout: SIGTERM while a write is stuck (the stall, drain
//  and silence timeouts at 30 s) ends the server within about the
//  shutdown timeout, 1 s here: not at once (the drain is held open, the
//  write in flight) and not after the 30 s it would wait.
START_TEST(test_shutdown_timeout_bounds_a_stuck_drain)
{
    const double shutdown = 1.0;
    td_t s;
    tc_t *tc = s_stuck_transfer(&s, (const char *const[]) {
        "--shutdown-timeout", "1", "--stall-timeout", "30", "--drain-timeout", "30",
        "--silence-timeout", "30", NULL });
    double t0 = pk_clock_monotonic();
    int status = td_stop(&s);
    double took = pk_clock_monotonic() - t0;
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    ck_assert_msg(took >= shutdown - 0.1, "exited %.2f s after SIGTERM: the drain was not held",
                  took);
    ck_assert_msg(took < shutdown + 2.5, "exited %.2f s after SIGTERM, shutdown timeout %.1f",
                  took, shutdown);
    tc_destroy(&tc);
}
END_TEST

//  --stall-timeout (the server's data plane): a write to a consumer that
//  stopped progressing is given up (no transfer in flight any more, the
//  round answered transfer_done false) within about the stall timeout,
//  1 s here; the default is 5 s, the drain and silence timeouts 30.
START_TEST(test_stall_timeout_gives_up_a_stuck_write)
{
    const double stall = 1.0;
    td_t s;
    tc_t *tc = s_stuck_transfer(&s, (const char *const[]) {
        "--stall-timeout", "1", "--drain-timeout", "30", "--silence-timeout", "30", NULL });
    double t0 = pk_clock_monotonic();
    double deadline = t0 + 10;
    while (s_in_flight(&s, "c-stuck") >= 1) {
        ck_assert_msg(pk_clock_monotonic() < deadline, "still in flight after 10 s");
        zclock_sleep(20);
    }
    double took = pk_clock_monotonic() - t0;
    ck_assert_msg(took < stall + 2.0, "given up %.2f s after it was seen stuck, stall %.1f",
                  took, stall);
    //  and the consumer is told: the round failed (its landing blocks may
    //  still arrive)
    pk_msg_t *done = tc_expect(tc, PK_MSG_TRANSFER_DONE, 5);
    ck_assert_str_eq(done->kv_request_id, "stuck");
    ck_assert_msg(!done->success, "a stalled transfer reported a success");
    ck_assert_uint_lt(done->landing, NBIG);
    pk_msg_destroy(&done);
    ck_assert_uint_lt(tc_landed(tc, 1), NBIG);
    ck_assert_int_eq(td_stop(&s), 0);
    tc_destroy(&tc);
}
END_TEST

//  How many TCP sockets process pid holds bound to IPv4 address a
//  (dotted): /proc/net/tcp's local addresses matched to the process's
//  descriptors by inode.
static int
s_sockets_on(pid_t pid, const char *a)
{
    struct in_addr want;
    ck_assert_int_eq(inet_pton(AF_INET, a, &want), 1);
    char hex[16];
    snprintf(hex, sizeof hex, "%08X:", (unsigned) want.s_addr);   //  as /proc prints it
    FILE *f = fopen("/proc/net/tcp", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    unsigned long inodes[256];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        char local[64];
        unsigned long inode;
        if (sscanf(line, " %*d: %63s %*s %*s %*s %*s %*s %*s %*s %lu", local, &inode) == 2
            && strncmp(local, hex, strlen(hex)) == 0 && n < 256)
            inodes[n++] = inode;
    }
    fclose(f);
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int) pid);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int found = 0;
    for (struct dirent *e; (e = readdir(d)); ) {
        char path[320], target[128];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        unsigned long inode;
        if (len <= 0)
            continue;
        target[len] = '\0';
        if (sscanf(target, "socket:[%lu]", &inode) != 1)
            continue;
        for (int i = 0; i < n; i++)
            found += inodes[i] == inode;
    }
    closedir(d);
    return found;
}

//  --fabric-addr: a session's fabric endpoint is on that address: with
//  127.0.0.2 the server holds a TCP socket bound there once a consumer's
//  session opened (the peers' socket is on 127.0.0.1), and none before;
//  with an address this host does not have, every session's endpoint
//  fails to open and the consumer is refused, the fabric naming why.
START_TEST(test_fabric_addr_is_the_endpoints_address)
{
    td_t s;
    td_start(&s, (const char *const[]) { "--fabric-addr", "127.0.0.2", NULL });
    ck_assert_int_eq(s_sockets_on(s.pid, "127.0.0.2"), 0);
    tc_t *tc = tc_to(s.endpoint, "c-fabric");
    ck_assert_int_ge(s_sockets_on(s.pid, "127.0.0.2"), 1);
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
    td_start(&s, (const char *const[]) { "--fabric-addr", "192.0.2.1", NULL });
    tc_config_t c = tc_defaults(s.endpoint, "c-nowhere");
    tc = tc_new(&c);
    ck_assert_ptr_nonnull(tc);
    pk_msg_t *answer = tc_connect(tc, 10);
    ck_assert_msg(answer != NULL, "no answer to connect");
    ck_assert_int_eq(answer->type, PK_MSG_DISCONNECT);
    ck_assert_msg(answer->reason && strstr(answer->reason, "fi_endpoint"), "reason: %s",
                  answer->reason ? answer->reason : "(none)");
    pk_msg_destroy(&answer);
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

int
main(void)
{
    int skip = td_suite_start();
    if (skip)
        return skip;
    td_sweep();
    Suite *s = suite_create("settings_e2e");
    TCase *tc = td_case(s, "settings", 0);
    tcase_add_test(tc, test_lookup_timeout_expires_pending_to_miss);
    tcase_add_test(tc, test_store_timeout_fails_an_unfetched_store);
    tcase_add_test(tc, test_store_timeout_said_in_the_log);
    tcase_add_test(tc, test_lease_timeout_frees_an_uncommitted_block);
    tcase_add_test(tc, test_log_level_filters_lines);
    tcase_add_test(tc, test_max_frame_drops_a_larger_frame);
    tcase_add_test(tc, test_max_frame_holds_on_the_local_socket);
    tcase_add_test(tc, test_provider_and_peer_id_are_the_ones_asked_for);
    tcase_add_test(tc, test_shutdown_timeout_bounds_a_stuck_drain);
    tcase_add_test(tc, test_stall_timeout_gives_up_a_stuck_write);
    tcase_add_test(tc, test_fabric_addr_is_the_endpoints_address);
    tcase_add_test(tc, test_max_queued_frames_ends_a_flood);
    tcase_add_test(tc, test_max_queued_bytes_ends_a_flood);
    return pk_test_run("settings_e2e", s);
}
