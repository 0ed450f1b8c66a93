/*  test_server_e2e.c: the real p2pkv-server, started as a process, with
    test consumers (tests/fixtures/consumer.c) over the tcp provider on 127.0.0.1
    and the engine's JSON API on the local socket.

    Each test starts its own server (tests/fixtures/daemon.c) with short
    timeouts and its own pool and sockets, and stops it with SIGTERM; most
    start from tests/fixtures/e2e.h: a server holding hashed blocks
    (tests/fixtures/blocks.h, whose keys are their SHA-256) and a consumer.
*/
#include "connect_msg.h"
#include "e2e.h"
#include "shell.h"
#include "base/clock.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <sodium.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK TD_BLOCK_LEN

//  ---------------------------------------------------------------------------

START_TEST(test_handshake_and_mismatches)
{
    td_t s;
    td_start(&s, NULL);
    struct { uint64_t len; const char *fp, *seed, *reason; } cases[] = {
        { 512, "fp", "7", "block_len: server 4096, consumer 512" },
        { BLOCK, "other", "7", "config_fingerprint: server \"fp\", consumer \"other\"" },
        { BLOCK, "fp", "8", "hash_seed: server \"7\", consumer \"8\"" },
    };
    for (int i = 0; i < 3; i++) {
        tc_config_t c = tc_defaults(s.endpoint, "c-bad");
        c.block_len = cases[i].len;
        c.fingerprint = cases[i].fp;
        c.hash_seed = cases[i].seed;
        tc_t *tc;
        pk_msg_t *answer = tc_answer(c, &tc);
        ck_assert_int_eq(answer->type, PK_MSG_DISCONNECT);
        ck_assert_int_eq(answer->code, PK_DISC_INCOMPATIBLE);
        ck_assert_str_eq(answer->reason, cases[i].reason);
        ck_assert_uint_eq(answer->block_len, BLOCK);
        pk_msg_destroy(&answer);
        tc_destroy(&tc);
    }
    tc_t *tc;
    pk_msg_t *answer = tc_answer(tc_defaults(s.endpoint, "c-good"), &tc);
    ck_assert_int_eq(answer->type, PK_MSG_CONNECT_ACK);
    ck_assert_uint_eq(answer->block_len, BLOCK);
    ck_assert_uint_eq(answer->num_blocks, 256);
    pk_msg_destroy(&answer);
    //  a state message with a stale epoch is dropped; the session lives on
    pk_msg_t *stale = pk_msg_new(PK_MSG_PING);
    uint8_t old[PK_EPOCH_LEN] = { 1 }, other[PK_EPOCH_LEN] = { 2 };
    pk_msg_set_epochs(stale, old, other);
    tc_send(tc, stale);
    ck_assert_ptr_null(tc_recv(tc, 0.3));
    tc_ping(tc);
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

START_TEST(test_symmetric_transfer)
{
    te_t e;
    te_start(&e, NULL, 8, "c-sym");
    tc_get(e.consumer, "r1", 1, e.keys, 8, 10, bk_hashed(0));
    te_stop(&e);
}
END_TEST

//  The door runs a small frame itself when the peer's actor waits with
//  nothing queued, and leaves the rest to the actor (lib/daemon/door.c):
//  a large lookup (the actor's) and the small ones sent right behind it
//  (the door's, were nothing queued) are still answered in the order sent,
//  and so are small lookups sent after a large one was answered.  (All
//  misses: hits would pin blocks up to the session's quota.)
START_TEST(test_frames_answered_in_order_by_either_thread)
{
    te_t e;
    te_start(&e, NULL, 8, "c-order");
    tc_t *tc = e.consumer;
    enum { BIG_KEYS = 3000, SMALL = 40 };
    static uint8_t bytes[BIG_KEYS][32];
    static pk_key_t big[BIG_KEYS];
    for (int i = 0; i < BIG_KEYS; i++) {
        memset(bytes[i], 0, 32);
        memcpy(bytes[i], &i, sizeof i);
        big[i] = pk_key_make(bytes[i], 32);
    }
    uint64_t round = 1;
    for (int pass = 0; pass < 3; pass++) {
        char kv[32];
        snprintf(kv, sizeof kv, "big-%d", pass);
        uint64_t first = round;
        ck_assert_int_eq(tc_send(tc, tc_lookup(kv, round++, big, BIG_KEYS)), 0);
        for (int i = 0; i < SMALL; i++) {
            snprintf(kv, sizeof kv, "small-%d-%d", pass, i);
            ck_assert_int_eq(tc_send(tc, tc_lookup(kv, round++, &big[i], 1)), 0);
        }
        for (uint64_t want = first; want < round; want++) {
            pk_msg_t *resp = tc_expect(tc, PK_MSG_LOOKUP_RESP, 10);
            ck_assert_msg(resp->round_seq == want, "pass %d: answer of round %llu came where "
                          "round %llu's was due", pass, (unsigned long long) resp->round_seq,
                          (unsigned long long) want);
            bool is_big = want == first;
            ck_assert_uint_eq(resp->keys.count, is_big ? BIG_KEYS : 1);
            ck_assert(!resp->hits[0]);
            pk_msg_destroy(&resp);
        }
    }
    //  a small frame sent while the actor answers a large one, at spacings
    //  that sweep the moment the actor's answer is on its way to the door
    for (int i = 0; i < 200; i++) {
        char kv[32];
        snprintf(kv, sizeof kv, "mid-%d", i);
        uint64_t first = round;
        ck_assert_int_eq(tc_send(tc, tc_lookup(kv, round++, big, 100)), 0);
        double until = pk_clock_monotonic() + (i % 40) * 10e-6;
        while (pk_clock_monotonic() < until)
            ;
        snprintf(kv, sizeof kv, "tail-%d", i);
        ck_assert_int_eq(tc_send(tc, tc_lookup(kv, round++, &big[i], 1)), 0);
        for (uint64_t want = first; want < round; want++) {
            pk_msg_t *resp = tc_expect(tc, PK_MSG_LOOKUP_RESP, 10);
            ck_assert_msg(resp->round_seq == want, "spacing %d us: answer of round %llu came "
                          "where round %llu's was due", (i % 40) * 10,
                          (unsigned long long) resp->round_seq, (unsigned long long) want);
            pk_msg_destroy(&resp);
        }
    }
    //  the session is whole: a lookup and fetch land every byte
    tc_get(tc, "after", round, e.keys, 8, 10, bk_hashed(0));
    te_stop(&e);
}
END_TEST

START_TEST(test_bad_peer_does_not_disturb_another)
{
    te_t e;
    te_start(&e, NULL, 8, "c-good");
    tc_t *good = e.consumer, *bad = tc_to(e.server.endpoint, "c-bad");
    //  garbage, a non-object, an unknown type: dropped and counted
    const char *junk[] = { "\xff\xfe garbage", "[1,2,3]", "{\"type\":\"teleport\"}" };
    for (int i = 0; i < 3; i++)
        tc_send_raw(bad, junk[i], strlen(junk[i]));
    //  and the good consumer's transfer runs meanwhile
    tc_get(good, "r1", 1, e.keys, 8, 10, bk_hashed(0));
    //  a wrong type is a violation: only the bad session ends
    const char *wrong = "{\"type\":\"lookup\",\"kv_request_id\":7,\"keys\":[\"aa\"],\"round_seq\":1,"
                        "\"source_epoch\":\"0123456789abcdef0123456789abcdef\","
                        "\"target_epoch\":\"0123456789abcdef0123456789abcdef\"}";
    tc_send_raw(bad, wrong, strlen(wrong));
    tc_expect_disconnect(bad, PK_DISC_VIOLATION, "lookup.kv_request_id: expected string, got 7",
                         5);
    tc_get(good, "r2", 2, e.keys, 8, 10, bk_hashed(0));
    //  an oversize list from a third peer: a violation, and the good one goes on
    tc_t *big = tc_to(e.server.endpoint, "c-big");
    size_t n = PK_MAX_LIST + 1, cap = 256 + n * 8, at = 0;
    char *frame = malloc(cap);
    at += (size_t) snprintf(frame, cap, "{\"type\":\"lookup\",\"kv_request_id\":\"r\","
                            "\"round_seq\":1,\"source_epoch\":\"%s\",\"target_epoch\":\"%s\","
                            "\"keys\":[", "0123456789abcdef0123456789abcdef",
                            "0123456789abcdef0123456789abcdef");
    for (size_t i = 0; i < n; i++)
        at += (size_t) snprintf(frame + at, cap - at, "%s\"%04zx\"", i ? "," : "", i % 65536);
    snprintf(frame + at, cap - at, "]}");
    tc_send_raw(big, frame, strlen(frame));
    free(frame);
    tc_expect_disconnect(big, PK_DISC_VIOLATION,
                         "lookup.keys: expected at most 65536 items, got 65537", 10);
    tc_get(good, "r3", 3, e.keys, 8, 10, bk_hashed(0));
    tc_destroy(&big);
    tc_destroy(&bad);
    te_stop(&e);
}
END_TEST

START_TEST(test_duplicate_fetch_ends_only_that_session)
{
    te_t e;
    te_start(&e, NULL, 2, "c-a");
    tc_t *a = e.consumer, *b = tc_to(e.server.endpoint, "c-b");
    uint32_t idx[1] = { 0 };
    tc_send(a, tc_fetch("r1", 1, e.keys, idx, 1));
    tc_send(a, tc_fetch("r1", 1, e.keys, idx, 1));
    tc_expect_disconnect(a, PK_DISC_VIOLATION, "duplicate fetch for r1 round 1", 5);
    tc_get(b, "r1", 1, e.keys, 2, 10, bk_hashed(0));
    tc_destroy(&b);
    te_stop(&e);
}
END_TEST

START_TEST(test_silent_consumer_retired_pins_released)
{
    te_t e;
    te_start(&e, NULL, 4, "c-silent");
    tc_lookup_hits(e.consumer, "r1", 1, e.keys, 4);
    ck_assert_uint_eq(td_stats(td_api(&e.server)).pinned, 4);
    //  silent for the silence timeout (1.5 s here)
    tc_expect_disconnect(e.consumer, PK_DISC_SILENT, NULL, 5);
    double deadline = pk_clock_monotonic() + 5;
    uint64_t pinned = 1, sessions = 1;
    while (pk_clock_monotonic() < deadline && (pinned || sessions)) {
        p2pkv_engine_stats_t st = td_stats(td_api(&e.server));
        pinned = st.pinned;
        sessions = st.sessions;
    }
    ck_assert_int_eq(pinned, 0);
    ck_assert_int_eq(sessions, 0);
    te_stop(&e);
}
END_TEST

START_TEST(test_pd_store_then_fetch_and_fetch_then_store)
{
    te_t e;
    te_start(&e, NULL, 4, NULL);
    p2pkv_key_t ekeys[4];
    for (int i = 0; i < 4; i++)
        ekeys[i] = td_key(&e.keys[i]);
    //  stored before the consumer even connected: held, then bound
    char err[P2PKV_ERRLEN] = "";
    uint64_t job;
    ck_assert_int_eq(p2pkv_engine_store(td_api(&e.server), "c-pd", "req-1", ekeys, 2, -1, &job,
                                        err), 0);
    tc_t *tc = e.consumer = tc_to(e.server.endpoint, "c-pd");
    tc_fetch_into(tc, "req-1", 5, e.keys, 2, 3, bk_hashed(0));
    ck_assert(td_event(td_api(&e.server), P2PKV_EVENT_STORE, job, 10).success);
    //  fetch first, then the engine stores
    uint32_t idx2[2] = { 20, 21 };
    tc_send(tc, tc_fetch("req-2", 6, e.keys + 2, idx2, 2));
    ck_assert_ptr_null(tc_recv(tc, 0.2));
    ck_assert_int_eq(p2pkv_engine_store(td_api(&e.server), "c-pd", "req-2", ekeys + 2, 2, -1,
                                        &job, err), 0);
    tc_expect_done(tc, 6, 2);
    ck_assert_mem_eq(tc_block(tc, 20), bk_hashed(2), 2 * BLOCK);
    te_stop(&e);
}
END_TEST

//  Connects whose address blob is junk are refused with the reason, and
//  no data-plane channel is opened for any of them (before, each built an
//  endpoint, queue and address vector first: ~65 MB resident for a flood).
START_TEST(test_junk_blobs_refused_before_any_channel)
{
    td_t s;
    td_start(&s, NULL);
    zsock_t *d = zsock_new_dealer(s.endpoint);
    ck_assert_ptr_nonnull(d);
    zsock_set_rcvtimeo(d, 10000);
    const char *junk[] = { "addr", "PKOF", "PKOF\x01\x02\x03\x04\x00\x05tcp;x" };
    const char *why[] = { "not a p2pkv libfabric address", "agent_metadata: ", "agent_metadata: " };
    int n = 30;
    for (int i = 0; i < n; i++) {
        char *frame;
        size_t len;
        tf_connect_frame("c-junk", NULL, junk[i % 3], strlen(junk[i % 3]), 64, BLOCK, &frame,
                         &len);
        zframe_t *f = zframe_new(frame, len);
        free(frame);
        ck_assert_int_eq(zframe_send(&f, d, 0), 0);
        f = zframe_recv(d);
        ck_assert_msg(f != NULL, "no answer to junk connect %d", i);
        pk_msg_t *m = NULL;
        ck_assert_int_eq(pk_msg_decode(zframe_data(f), zframe_size(f), &m, NULL), 0);
        zframe_destroy(&f);
        ck_assert_int_eq(m->type, PK_MSG_DISCONNECT);
        ck_assert_int_eq(m->code, PK_DISC_INCOMPATIBLE);
        ck_assert_msg(strstr(m->reason, why[i % 3]), "reason: %s", m->reason);
        ck_assert_msg(strstr(m->reason, "agent_metadata"), "reason: %s", m->reason);
        pk_msg_destroy(&m);
    }
    zsock_destroy(&d);
    ck_assert_int_eq(td_stat(&s, "fabric.channels_opened"), 0);
    ck_assert_int_eq(td_stat(&s, "fabric.channels_open"), 0);
    ck_assert_int_eq(td_stat(&s, "fabric.blobs_refused"), n);
    ck_assert_int_eq(td_stat(&s, "sessions"), 0);
    //  a good consumer still gets its channel, and only it
    tc_t *tc = tc_to(s.endpoint, "c-good");
    ck_assert_int_eq(td_stat(&s, "fabric.channels_opened"), 1);
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

START_TEST(test_allow_list)
{
    //  a CIDR range that does not hold 127.0.0.1: never answered
    td_t s;
    td_start(&s, (const char *[]) { "--allow", "10.0.0.0/8", NULL });
    tc_config_t c = tc_defaults(s.endpoint, "c-out");
    tc_t *tc = tc_new(&c);
    ck_assert_ptr_null(tc_connect(tc, 1.5));
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
    //  one that does: served
    td_start(&s, (const char *[]) { "--allow", "192.168.0.0/16,127.0.0.0/8", NULL });
    tc = tc_to(s.endpoint, "c-in");
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  GET url from 127.0.0.1:port; returns the body (malloc'd) or NULL.
//  GLIBC_TUNABLES of the server's running image, from /proc: what it
//  started (again) with, not what the first image set.  NULL if unset.
//  glibc, parsing the variable at start, writes a NUL over each ':' in
//  place, so the tunables after the first read as entries of their own.
static char *
s_server_tunables(const td_t *s)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int) s->pid);
    FILE *file = fopen(path, "r");
    ck_assert_ptr_nonnull(file);
    char *entry = NULL, *found = NULL;
    size_t cap = 0;
    bool in = false;
    while (getdelim(&entry, &cap, 0, file) > 0) {
        if (strncmp(entry, "GLIBC_TUNABLES=", 15) == 0) {
            free(found);
            found = strdup(entry + 15);
            in = true;
        }
        else if (in && strncmp(entry, "glibc.", 6) == 0) {
            char *joined = zsys_sprintf("%s:%s", found, entry);
            free(found);
            found = joined;
        }
        else
            in = false;
    }
    free(entry);
    fclose(file);
    return found;
}

//  The daemon runs without malloc's per-thread caches (bin/p2pkv-server.c:
//  what they pin after sessions close), keeps the operator's other
//  tunables, and keeps an operator's own cache setting as given.
START_TEST(test_started_without_thread_caches)
{
    const char *given = getenv("GLIBC_TUNABLES");
    if ((given && *given) || getenv("P2PKV_SERVER")) {
        printf("test_started_without_thread_caches: skipped (GLIBC_TUNABLES or "
               "P2PKV_SERVER set by the caller)\n");
        return;
    }
    struct { const char *set, *want; } cases[] = {
        { NULL, "glibc.malloc.tcache_count=0" },
        { "glibc.malloc.perturb=0", "glibc.malloc.perturb=0:glibc.malloc.tcache_count=0" },
        { "glibc.malloc.tcache_count=3", "glibc.malloc.tcache_count=3" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].set)
            setenv("GLIBC_TUNABLES", cases[i].set, 1);
        td_t s;
        td_start(&s, NULL);
        unsetenv("GLIBC_TUNABLES");
        char *have = s_server_tunables(&s);
        ck_assert_msg(have && strcmp(have, cases[i].want) == 0,
                      "given %s: the server runs with GLIBC_TUNABLES=%s, not %s",
                      cases[i].set ? cases[i].set : "(unset)", have ? have : "(unset)",
                      cases[i].want);
        free(have);
        //  and it serves: a consumer's handshake is answered
        tc_t *tc;
        pk_msg_t *answer = tc_answer(tc_defaults(s.endpoint, "c-tcache"), &tc);
        ck_assert_int_eq(answer->type, PK_MSG_CONNECT_ACK);
        pk_msg_destroy(&answer);
        tc_destroy(&tc);
        ck_assert_int_eq(td_stop(&s), 0);
    }
}
END_TEST

START_TEST(test_metrics_endpoint)
{
    char bind[64];
    //  drawn below the ephemeral range: 20000 + pid % 20000 once collided
    //  with a client's source port in CI ("Address already in use")
    int port = td_free_port();
    snprintf(bind, sizeof bind, "127.0.0.1:%d", port);
    te_t e;
    te_start(&e, (const char *[]) { "--metrics-bind", bind, NULL }, 4, "c-metrics");
    tc_get(e.consumer, "r1", 1, e.keys, 4, 10, bk_hashed(0));
    //  counters reach the registry at the actor's next tick
    char *text = NULL;
    double deadline = pk_clock_monotonic() + 5;
    while (pk_clock_monotonic() < deadline) {
        free(text);
        text = td_http_get(port, "/metrics");
        if (text && strstr(text, "\np2pkv_blocks_written_total 4\n"))
            break;
        zclock_sleep(20);
    }
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(strstr(text, "HTTP/1.0 200") || strstr(text, "HTTP/1.1 200"), "%.200s", text);
    ck_assert_msg(strstr(text, "\np2pkv_blocks_written_total 4\n"), "%s", text);
    ck_assert(strstr(text, "# TYPE p2pkv_lookup_seconds histogram"));
    ck_assert(strstr(text, "\np2pkv_lookup_seconds_count 1\n"));
    ck_assert(strstr(text, "\np2pkv_fetch_seconds_count 1\n"));
    ck_assert(!strstr(text, "c-metrics"));          //  no label is a consumer's id
    ck_assert(strstr(text, "p2pkv_sessions_opened_total 1"));
    free(text);
    //  the same counters through the engine API's stats
    ck_assert_int_eq(td_stat(&e.server, "metrics.p2pkv_lookup_keys_total.total"), 4);
    te_stop(&e);
}
END_TEST

//  p2pkv put and stats against the daemon's engine socket.
START_TEST(test_cli_put_and_stats)
{
    td_t s;
    td_start(&s, NULL);
    char dir[64];
    sh_tmpdir(dir, "e2e");
    char block[BLOCK];
    for (int i = 0; i < BLOCK; i++)
        block[i] = (char) (i * 13);
    sh_write(block, BLOCK, "%s/block", dir);
    uint8_t hash[32];
    crypto_hash_sha256(hash, (const uint8_t *) block, BLOCK);
    char hex[65], want[256];
    pk_hex_encode(hash, 32, hex);
    snprintf(want, sizeof want, "%s %s/block\n", hex, dir);
    int status;
    char *said = sh_output(&status, "bin/p2pkv put --local %s %s/block", s.local, dir);
    ck_assert_int_eq(status, 0);
    ck_assert_str_eq(said, want);
    free(said);
    //  a file that is not one block long: a clear error, exit 2
    sh_write("short", 5, "%s/short", dir);
    said = sh_output(&status, "bin/p2pkv put --local %s %s/short 2>&1", s.local, dir);
    ck_assert_int_eq(status, 2);
    ck_assert_msg(strstr(said, "5 bytes, blocks are 4096 bytes"), "%s", said);
    free(said);
    said = sh_output(&status, "bin/p2pkv stats --json --local %s", s.local);
    ck_assert_int_eq(status, 0);
    json_t *j = json_loads(said, 0, NULL);
    free(said);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "pool"), "ready")), 1);
    json_decref(j);
    sh_rmrf(dir);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  p2pkv put on the server, p2pkv get from it: every byte comes back, more
//  blocks than the server's pin quota (a quarter of 256), one key missing.
START_TEST(test_cli_get_verifies_bytes)
{
    td_t s;
    td_start(&s, NULL);
    char dir[64];
    sh_tmpdir(dir, "get");
    enum { N = 150 };
    static uint8_t blocks[N][BLOCK];
    char cmd[N * 140 + 512];
    int at = snprintf(cmd, sizeof cmd, "bin/p2pkv put --local %s", s.local);
    for (int i = 0; i < N; i++) {
        randombytes_buf(blocks[i], BLOCK);
        sh_write(blocks[i], BLOCK, "%s/in-%03d", dir, i);
        at += snprintf(cmd + at, sizeof cmd - (size_t) at, " %s/in-%03d", dir, i);
    }
    int status;
    char *said = sh_output(&status, "%s", cmd);
    ck_assert_int_eq(status, 0);
    char keys[N][65];
    const char *line = said;
    for (int i = 0; i < N; i++) {
        ck_assert_msg(line && sscanf(line, "%64s", keys[i]) == 1, "put said: %s", said);
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    free(said);
    char out[128];
    snprintf(out, sizeof out, "%s/out", dir);
    ck_assert_int_eq(mkdir(out, 0700), 0);
    at = snprintf(cmd, sizeof cmd, "bin/p2pkv get --server %s -o %s 00aa", s.endpoint, out);
    for (int i = 0; i < N; i++)
        at += snprintf(cmd + at, sizeof cmd - (size_t) at, " %s", keys[i]);
    snprintf(cmd + at, sizeof cmd - (size_t) at, " > %s/report 2>&1", dir);
    ck_assert_int_eq(sh_run("%s", cmd), 1);         //  one key missing
    for (int i = 0; i < N; i++)
        sh_expect_file(blocks[i], BLOCK, "%s/%s", out, keys[i]);
    //  the missing key says why (the server's miss reason)
    ck_assert_int_eq(sh_run("grep -c ' fetched$' %s/report | grep -qx %d && "
                            "grep -q '^00aa missing absent$' %s/report", dir, N, dir), 0);
    sh_rmrf(dir);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  p2pkv get of a block changed at rest in the server's pool after its
//  commit: "KEY corrupt", its file not written, exit 1; the other key of
//  the same get fetched and written.  --no-verify lands it unchecked.
START_TEST(test_cli_get_says_corrupt)
{
    td_t s;
    td_start(&s, NULL);
    static uint8_t blocks[2][BLOCK];
    p2pkv_key_t keys[2];
    uint8_t raw[2][32];
    char hex[2][65];
    for (int i = 0; i < 2; i++) {
        randombytes_buf(blocks[i], BLOCK);
        crypto_hash_sha256(raw[i], blocks[i], BLOCK);
        keys[i] = (p2pkv_key_t) { raw[i], 32 };
        sodium_bin2hex(hex[i], sizeof hex[i], raw[i], 32);
    }
    td_put(td_api(&s), keys, &blocks[0][0], 2, BLOCK);
    size_t len;
    uint8_t *pool = td_pool_map(&s, &len);
    bool flipped = false;
    for (size_t off = 0; !flipped && off + BLOCK <= len; off += BLOCK)
        if (memcmp(pool + off, blocks[1], BLOCK) == 0) {
            pool[off + 17] ^= 0x80;
            flipped = true;
        }
    ck_assert(flipped);
    munmap(pool, len);
    char dir[64];
    sh_tmpdir(dir, "corrupt");
    ck_assert_int_eq(sh_run("bin/p2pkv get --server %s -o %s %s %s > %s/report 2>&1",
                            s.endpoint, dir, hex[0], hex[1], dir), 1);
    sh_expect_file(blocks[0], BLOCK, "%s/%s", dir, hex[0]);
    ck_assert_int_eq(sh_run("grep -qx '%s fetched' %s/report && grep -qx '%s corrupt' "
                            "%s/report && test ! -e %s/%s", hex[0], dir, hex[1], dir, dir,
                            hex[1]), 0);
    ck_assert_int_eq(sh_run("bin/p2pkv get --no-verify --server %s -o %s %s > %s/report2 "
                            "2>&1 && grep -qx '%s fetched' %s/report2", s.endpoint, dir, hex[1],
                            dir, hex[1], dir), 0);
    sh_rmrf(dir);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  p2pkv get --repeat: the passes after the first run on the same session
//  (one session opened, on the server's counter) and report their rate;
//  the blocks written are the ones put.  A count that is not one, or
//  --repeat by --directory, is refused naming --repeat, before any work.
START_TEST(test_cli_get_repeat)
{
    enum { N = 8 };
    te_t e;
    te_start(&e, NULL, N, NULL);
    char dir[64];
    sh_tmpdir(dir, "repeat");
    char cmd[N * 80 + 512];
    int at = snprintf(cmd, sizeof cmd, "bin/p2pkv get --repeat 3 --server %s -o %s",
                      e.server.endpoint, dir);
    char hex[N][65];
    for (int i = 0; i < N; i++) {
        pk_hex_encode(e.keys[i].bytes, e.keys[i].len, hex[i]);
        at += snprintf(cmd + at, sizeof cmd - (size_t) at, " %s", hex[i]);
    }
    snprintf(cmd + at, sizeof cmd - (size_t) at, " > %s/report 2>&1", dir);
    ck_assert_int_eq(sh_run("%s", cmd), 0);
    ck_assert_msg(sh_run("grep -c ' fetched$' %s/report | grep -qx %d && grep -q 'again on "
                         "the open session, 2 passes: .* GB/s median' %s/report", dir, N,
                         dir) == 0, "no report of the two passes after the first");
    for (int i = 0; i < N; i++)
        sh_expect_file(bk_hashed((unsigned) i), BLOCK, "%s/%s", dir, hex[i]);
    p2pkv_engine_stats_t st = td_stats(td_api(&e.server));
    ck_assert_uint_eq(st.hits, 3 * N);                  //  three passes ...
    ck_assert_msg(sh_run("bin/p2pkv stats --local %s --json | grep -q "
                         "'\"p2pkv_sessions_opened_total\":{\"total\":1[,}]'",
                         e.server.local) == 0,
                  "the passes did not share one session");      //  ... one session
    ck_assert_msg(sh_run("bin/p2pkv lookup --repeat 2 --server %s %s 2>&1 | grep -q '^p2pkv "
                         "lookup: again on the open session, 1 pass: .* ms median'",
                         e.server.endpoint, hex[0]) == 0,
                  "lookup --repeat 2: no report of its second pass");
    static const char *bad[] = { "--repeat 0 --server tcp://127.0.0.1:1",
                                 "--repeat 2x --server tcp://127.0.0.1:1",
                                 "--repeat 1001 --server tcp://127.0.0.1:1",
                                 "--repeat 2 --directory redis://127.0.0.1:1" };
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++)
        ck_assert_msg(sh_run("bin/p2pkv get %s %s > %s/bad 2>&1; [ $? -eq 2 ] && "
                             "grep -q -- '^p2pkv get: --repeat: ' %s/bad", bad[b], hex[0], dir,
                             dir) == 0, "%s: not refused (exit 2) naming --repeat", bad[b]);
    sh_rmrf(dir);
    te_stop(&e);
}
END_TEST

//  The daemon as consumer: b pulls keys from a into its own pool; they are
//  READY there and a consumer of b gets the same bytes.
START_TEST(test_pull_between_servers)
{
    te_t a;
    te_start(&a, NULL, 8, NULL);
    td_t b;
    td_start(&b, NULL);
    static const uint8_t absent[2] = { 0x00, 0xff };          //  a has no such key
    p2pkv_key_t pulled[9];
    for (int i = 0; i < 8; i++)
        pulled[i] = td_key(&a.keys[i]);
    pulled[8] = (p2pkv_key_t) { absent, 2 };
    char err[P2PKV_ERRLEN] = "";
    uint64_t id;
    size_t fetching;
    ck_assert_msg(p2pkv_engine_pull(td_api(&b), a.server.endpoint, pulled, 9, &id, &fetching,
                                    NULL, err) == 0, "%s", err);
    ck_assert_uint_eq(fetching, 9);
    p2pkv_engine_event_t ev = td_event(td_api(&b), P2PKV_EVENT_PULL, id, 30);
    ck_assert_uint_eq(ev.landed, 8);
    ck_assert_uint_eq(ev.missing, 1);
    ck_assert_uint_eq(ev.missing_keys[0].len, 2);
    ck_assert_mem_eq(ev.missing_keys[0].bytes, absent, 2);
    p2pkv_engine_stats_t st = td_stats(td_api(&b));
    ck_assert_uint_eq(st.ready, 8);
    ck_assert_uint_eq(st.writing, 0);
    tc_t *tc = tc_to(b.endpoint, "c-of-b");
    tc_get(tc, "r1", 1, a.keys, 8, 10, bk_hashed(0));
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&b), 0);
    te_stop(&a);
}
END_TEST

START_TEST(test_sigterm_during_transfers_leaves_no_pool)
{
    te_t e;
    te_start(&e, NULL, 32, "c-term");
    tc_t *tc = e.consumer;
    tc_lookup_hits(tc, "r1", 1, e.keys, 32);
    uint32_t idx[32];
    for (int i = 0; i < 32; i++)
        idx[i] = (uint32_t) (i * 2);
    tc_send(tc, tc_fetch("r1", 1, e.keys, idx, 32));
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", e.server.pool);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    int status = td_stop(&e.server);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(stat(path, &sb), -1);
    ck_assert_int_eq(errno, ENOENT);
    tc_destroy(&e.consumer);
}
END_TEST

//  Defect 1: a peer actor whose session cannot be created reports it
//  ("GONE"), so the door frees its slot at once.  The failure is injected
//  with the test-only P2PKV_TEST_FAIL_SESSION (lib/daemon/peer.c).  With
//  --max-sessions 2, two failed connects followed by two good ones must all
//  be answered, and the server stays responsive.
START_TEST(test_failed_session_frees_its_slot)
{
    setenv("P2PKV_TEST_FAIL_SESSION", "c-doomed", 1);
    td_t s;
    td_start(&s, (const char *const[]) { "--max-sessions", "2", NULL });
    unsetenv("P2PKV_TEST_FAIL_SESSION");
    for (int i = 0; i < 2; i++) {
        tc_config_t c = tc_defaults(s.endpoint, "c-doomed");
        tc_t *tc = tc_new(&c);
        ck_assert_ptr_nonnull(tc);
        pk_msg_t *answer = tc_connect(tc, 1.5);
        //  no session: a disconnect, or nothing at all
        ck_assert(!answer || answer->type == PK_MSG_DISCONNECT);
        pk_msg_destroy(&answer);
        tc_destroy(&tc);
    }
    td_expect_no_sessions(&s, 5);
    tc_t *a = tc_to(s.endpoint, "c-one");
    tc_t *b = tc_to(s.endpoint, "c-two");
    ck_assert_int_eq(td_stat(&s, "sessions"), 2);
    tc_ping(b);
    tc_destroy(&a);
    tc_destroy(&b);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  Defect 2: 64 consumers connecting at once, below --max-sessions, are
//  all answered within a bound (20 s: generous for two cores under the
//  sanitizers; unloaded it is well under a second).
#define S_CROWD 64
#define S_CROWD_BOUND 20.0

typedef struct {
    td_t *s;
    int i;
    zsock_t *go;                    //  the start line: every thread waits on it
    double elapsed;
    int type;
} s_crowd_t;

static void *
s_crowd_member(void *arg)
{
    s_crowd_t *m = arg;
    char id[32];
    snprintf(id, sizeof id, "c-crowd-%d", m->i);
    tc_config_t c = tc_defaults(m->s->endpoint, id);
    tc_t *tc = tc_new(&c);
    m->type = -1;
    char *go = zstr_recv(m->go);
    zstr_free(&go);
    double t0 = pk_clock_monotonic();
    pk_msg_t *answer = tc ? tc_connect(tc, S_CROWD_BOUND + 5) : NULL;
    m->elapsed = pk_clock_monotonic() - t0;
    m->type = answer ? (int) answer->type : -1;
    pk_msg_destroy(&answer);
    //  stay connected until every member has its answer (the slot count)
    char *done = zstr_recv(m->go);
    zstr_free(&done);
    tc_destroy(&tc);
    return NULL;
}

START_TEST(test_crowd_connects_within_a_bound)
{
    td_t s;
    td_start(&s, (const char *const[]) { "--max-sessions", "80", "--silence-timeout", "30",
                                          NULL });
    zsock_t *start = zsock_new_pub("inproc://crowd");
    ck_assert_ptr_nonnull(start);
    pthread_t th[S_CROWD];
    s_crowd_t m[S_CROWD];
    for (int i = 0; i < S_CROWD; i++) {
        m[i] = (s_crowd_t) { &s, i, zsock_new_sub("inproc://crowd", ""), 0, -1 };
        ck_assert_ptr_nonnull(m[i].go);
        ck_assert_int_eq(pthread_create(&th[i], NULL, s_crowd_member, &m[i]), 0);
    }
    zclock_sleep(3000);             //  every member built its channel
    zstr_send(start, "GO");
    double deadline = pk_clock_monotonic() + S_CROWD_BOUND + 10;
    while (pk_clock_monotonic() < deadline && td_stat(&s, "sessions") < S_CROWD)
        zclock_sleep(100);
    zstr_send(start, "DONE");
    double worst = 0;
    int acked = 0;
    for (int i = 0; i < S_CROWD; i++) {
        pthread_join(th[i], NULL);
        zsock_destroy(&m[i].go);
        if (m[i].type == PK_MSG_CONNECT_ACK && m[i].elapsed <= S_CROWD_BOUND)
            acked++;
        if (m[i].elapsed > worst)
            worst = m[i].elapsed;
    }
    zsock_destroy(&start);
    fprintf(stderr, "crowd: %d of %d acked within %.0f s, slowest %.2f s\n", acked, S_CROWD,
            S_CROWD_BOUND, worst);
    ck_assert_msg(acked == S_CROWD, "%d of %d consumers acked within %.0f s (slowest %.2f s)",
                  acked, S_CROWD, S_CROWD_BOUND, worst);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  Defect 3: many sessions opened and retired leave no peer behind (the
//  door reaps from its list of retired peers).
START_TEST(test_retired_sessions_leave_no_peers)
{
    td_t s;
    //  a silence timeout longer than a round's connects (each may wait for
    //  its DEALER's first 0.5 s retry)
    td_start(&s, (const char *const[]) { "--max-sessions", "8", "--silence-timeout", "5", NULL });
    for (int round = 0; round < 3; round++) {
        tc_t *tc[8];
        for (int i = 0; i < 8; i++) {
            char id[32];
            snprintf(id, sizeof id, "c-churn-%d-%d", round, i);
            tc[i] = tc_to(s.endpoint, id);
        }
        ck_assert_int_eq(td_stat(&s, "sessions"), 8);
        //  every slot is taken: one more is refused, not queued
        tc_t *extra;
        pk_msg_t *answer = tc_answer(tc_defaults(s.endpoint, "c-churn-extra"), &extra);
        ck_assert_int_eq(answer->type, PK_MSG_DISCONNECT);
        pk_msg_destroy(&answer);
        tc_destroy(&extra);
        for (int i = 0; i < 8; i++)
            tc_destroy(&tc[i]);
        //  silent consumers retire at the silence timeout
        td_expect_no_sessions(&s, 15);
    }
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  The engine's JSON protocol itself (the C API of p2pkv_engine.h covers
//  its use): what it refuses, with which sentence, and the base64 put the
//  C API does not use.
static void
s_refused(td_t *s, json_t *answer, const char *says)
{
    ck_assert_msg(!json_is_true(json_object_get(answer, "ok")), "accepted, want \"%s\"", says);
    const char *error = json_string_value(json_object_get(answer, "error"));
    ck_assert_msg(error && strstr(error, says), "error \"%s\", want \"%s\"", error, says);
    json_decref(answer);
}

START_TEST(test_engine_json_protocol)
{
    td_t s;
    td_start(&s, NULL);
    zstr_send(s.engine, "not json");
    char *text = zstr_recv(s.engine);
    ck_assert_ptr_nonnull(text);
    s_refused(&s, json_loads(text, 0, NULL), "not a JSON object");
    zstr_free(&text);
    s_refused(&s, td_engine(&s, "{s:i}", "x", 1), "expected a JSON object with a \"cmd\" string");
    s_refused(&s, td_engine(&s, "{s:s}", "cmd", "nope"), "unknown cmd \"nope\"");
    s_refused(&s, td_engine(&s, "{s:s, s:[]}", "cmd", "reserve", "keys"),
              "reserve: keys: expected an array of 1..65536 hex strings");
    s_refused(&s, td_engine(&s, "{s:s, s:[s]}", "cmd", "commit", "keys", "ABC"),
              "commit: keys[0]: expected lowercase hex of even length");
    //  a commit's checksums (the engine's, of blocks it wrote whole)
    s_refused(&s, td_engine(&s, "{s:s, s:[s], s:[]}", "cmd", "commit", "keys", "00", "sums"),
              "commit: sums: expected an array of 1 items (one per key)");
    s_refused(&s, td_engine(&s, "{s:s, s:[s], s:[s]}", "cmd", "commit", "keys", "00", "sums",
                            "0123456789ABCDEF"),
              "commit: sums[0]: expected null or 16 lowercase hex characters");
    s_refused(&s, td_engine(&s, "{s:s, s:[s, s], s:[n, i]}", "cmd", "commit", "keys", "00",
                            "01", "sums", 5),
              "commit: sums[1]: expected null or 16 lowercase hex characters");
    s_refused(&s, td_engine(&s, "{s:s, s:s, s:s, s:[s], s:i}", "cmd", "store", "peer", "c",
                            "kv", "k", "keys", "00", "round", -1),
              "store: round: expected an integer >= 0");
    s_refused(&s, td_engine(&s, "{s:s, s:s}", "cmd", "finish", "peer", "c"),
              "finish: expected \"peer\" and \"kv\" strings");
    s_refused(&s, td_engine(&s, "{s:s, s:[s]}", "cmd", "pull", "keys", "00"),
              "pull: expected \"server\"");
    //  put by value: base64 of exactly one block
    static uint8_t block[BLOCK];
    randombytes_buf(block, sizeof block);
    char b64[sodium_base64_ENCODED_LEN(BLOCK, sodium_base64_VARIANT_ORIGINAL)];
    sodium_bin2base64(b64, sizeof b64, block, BLOCK, sodium_base64_VARIANT_ORIGINAL);
    s_refused(&s, td_engine(&s, "{s:s, s:s, s:s}", "cmd", "put", "key", "00aa", "data", "@@"),
              "put: data is not base64");
    s_refused(&s, td_engine(&s, "{s:s, s:s, s:s}", "cmd", "put", "key", "00aa", "data", "aGVsbG8="),
              "put: data is 5 bytes, blocks are 4096");
    json_t *a = td_engine(&s, "{s:s, s:s, s:s}", "cmd", "put", "key", "00aa", "data", b64);
    ck_assert(json_is_true(json_object_get(a, "ok")));
    ck_assert_ptr_null(json_object_get(a, "existed"));
    json_decref(a);
    a = td_engine(&s, "{s:s, s:s, s:s}", "cmd", "put", "key", "00aa", "data", b64);
    ck_assert(json_is_true(json_object_get(a, "existed")));
    json_decref(a);
    a = td_engine(&s, "{s:s}", "cmd", "describe");
    ck_assert_str_eq(json_string_value(json_object_get(a, "pool_name")), s.pool);
    ck_assert_int_eq(json_integer_value(json_object_get(a, "block_len")), BLOCK);
    json_decref(a);
    //  the block is there for a consumer
    pk_key_t key = pk_key_make((const uint8_t *) "\x00\xaa", 2);
    tc_t *tc = tc_to(s.endpoint, "c-json");
    tc_get(tc, "r1", 1, &key, 1, 7, block);
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
    Suite *s = suite_create("server_e2e");
    TCase *tc = td_case(s, "e2e", 0);
    tcase_add_test(tc, test_handshake_and_mismatches);
    tcase_add_test(tc, test_symmetric_transfer);
    tcase_add_test(tc, test_frames_answered_in_order_by_either_thread);
    tcase_add_test(tc, test_bad_peer_does_not_disturb_another);
    tcase_add_test(tc, test_duplicate_fetch_ends_only_that_session);
    tcase_add_test(tc, test_silent_consumer_retired_pins_released);
    tcase_add_test(tc, test_pd_store_then_fetch_and_fetch_then_store);
    tcase_add_test(tc, test_allow_list);
    tcase_add_test(tc, test_started_without_thread_caches);
    tcase_add_test(tc, test_junk_blobs_refused_before_any_channel);
    tcase_add_test(tc, test_metrics_endpoint);
    tcase_add_test(tc, test_cli_put_and_stats);
    tcase_add_test(tc, test_cli_get_verifies_bytes);
    tcase_add_test(tc, test_cli_get_says_corrupt);
    tcase_add_test(tc, test_cli_get_repeat);
    tcase_add_test(tc, test_pull_between_servers);
    tcase_add_test(tc, test_engine_json_protocol);
    tcase_add_test(tc, test_sigterm_during_transfers_leaves_no_pool);
    //  the actors' failure paths, the crowd at the door and reaping
    TCase *load = td_case(s, "load", 0);
    tcase_add_test(load, test_failed_session_frees_its_slot);
    tcase_add_test(load, test_crowd_connects_within_a_bound);
    tcase_add_test(load, test_retired_sessions_leave_no_peers);
    return pk_test_run("server_e2e", s);
}
