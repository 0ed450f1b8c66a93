/*  test_spill_stream.c: a get whose keys are on the disk tier has its hits
    written as they land (--stream-gets, on by default; lib/roles'
    s_stream, design.md "A get's disk hits are written as they land"), on
    a real p2pkv-server over tcp on 127.0.0.1, the client driven by the
    test's own loop (p2pkv_client_poll), its ends to on_fetch.

    A get of keys some in the pool, some on disk, one missing and one
    whose slot was changed on disk ends with every result right and every
    byte checked, the same results as with --stream-gets off.  With the
    disk hung (P2PKV_TEST_SPILL_HUNG, the tier's reader never reads), the
    get's pool hits reach the consumer's memory while its disk keys are
    still pending, before any answer; cancelled then, it ends ABORTED once
    the written part is fenced, nothing left pinned; and with a short
    --lookup-timeout the same get ends at the deadline, its pool hits
    landed and its disk keys missing with reason pending.
*/
#include "p2pkv.h"
#include "p2pkv_engine.h"
#include "base/clock.h"
#include "blocks.h"
#include "callbacks.h"
#include "daemon.h"
#include "shell.h"
#include "testutil.h"
#include "tier/disk_tier.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BOUND 60.0                  //  seconds any one wait may take
#define S_LEN TD_BLOCK_LEN
#define S_POOL 24                   //  the server's pool, in blocks
#define S_PUT 40                    //  blocks put: the first 16 go to disk
#define S_ONDISK (S_PUT - S_POOL)
#define S_TAG 77

static char s_size[32];
static char s_pool[16];

//  The server: a pool of S_POOL over a spill of 64 slots, with more flags
//  (may be NULL, at most 6).
static void
s_start(td_t *d, const char *dir, const char *const *more)
{
    snprintf(s_size, sizeof s_size, "%llu",
             (unsigned long long) (64 * pk_disk_tier_slot_len(S_LEN)));
    snprintf(s_pool, sizeof s_pool, "%d", S_POOL);
    //  one get may pin the whole pool (the default quota is a quarter)
    const char *flags[16] = { "--pool-blocks", s_pool, "--pin-quota", s_pool, "--spill-dir",
                              dir, "--spill-size", s_size };
    size_t n = 8;
    for (size_t i = 0; more && more[i]; i++)
        flags[n++] = more[i];
    flags[n] = NULL;
    td_start(d, flags);
}

//  Waits up to BOUND until the server's stats say path >= want.
static void
s_wait_stat(td_t *d, const char *path, json_int_t want)
{
    double until = pk_clock_monotonic() + BOUND;
    json_int_t v = td_stat(d, path);
    while (v < want && pk_clock_monotonic() < until) {
        zclock_sleep(10);
        v = td_stat(d, path);
    }
    ck_assert_msg(v >= want, "%s is %lld, waited for %lld", path, (long long) v,
                  (long long) want);
}

//  S_PUT blocks of S_TAG put: keys 0..S_ONDISK-1 on disk once this returns
//  (the first evicted is slot 0's, the free slots taken in order).
static p2pkv_key_t *
s_put(td_t *d)
{
    p2pkv_key_t *keys = bk_keys(S_TAG, 0, S_PUT);
    uint8_t *data = malloc((size_t) S_PUT * S_LEN);
    ck_assert_ptr_nonnull(data);
    for (size_t i = 0; i < S_PUT; i++)
        bk_block_fill(data + i * S_LEN, S_TAG, i, S_LEN);
    td_put(td_api(d), keys, data, S_PUT, S_LEN);
    free(data);
    s_wait_stat(d, "spill.writes", S_ONDISK);
    ck_assert_int_eq(td_stat(d, "spill.blocks"), S_ONDISK);
    return keys;
}

//  ---------------------------------------------------------------------------
//  The client

static p2pkv_client_t *
s_client(td_t *d, cb_ends_t *seen, int *server_p)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = "c-stream", .fingerprint = TD_FINGERPRINT,
                           .hash_seed = TD_HASH_SEED, .provider = "tcp", .node = "127.0.0.1",
                           .load_timeout = 60, .abort_ack_timeout = 60 };
    p2pkv_callbacks_t cb = { .arg = seen, .on_fetch = cb_ends_record };
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 64, S_LEN, cb, err);
    ck_assert_msg(c != NULL, "p2pkv_client_new: %s", err);
    *server_p = p2pkv_client_connect(c, d->endpoint, BOUND, err);
    ck_assert_msg(*server_p >= 0, "connect: %s", err);
    return c;
}

//  The end of id, polled for up to BOUND: its status.
static p2pkv_status_t
s_end_of(p2pkv_client_t *c, cb_ends_t *e, uint64_t id)
{
    return e->status[cb_end_of(c, e, id, BOUND)];
}

static bool
s_unpinned(p2pkv_client_t *c, td_t *d)
{
    double deadline = pk_clock_monotonic() + BOUND;
    while (td_stats(td_api(d)).pinned != 0) {
        if (pk_clock_monotonic() >= deadline)
            return false;
        p2pkv_client_poll(c, 0.01);
    }
    return true;
}

//  ---------------------------------------------------------------------------
//  Every result right, both ways

//  The get: disk keys 0..15 (0's slot changed on disk), pool keys 30..33,
//  and one never put; into blocks 0..20.
enum { S_NGET = S_ONDISK + 4 + 1, S_FIRST_POOL = 30 };

static void
s_get_keys(const p2pkv_key_t *put, const p2pkv_key_t *missing, p2pkv_key_t *keys,
           uint32_t *dest)
{
    for (int i = 0; i < S_NGET; i++) {
        keys[i] = i < S_ONDISK ? put[i] : i < S_ONDISK + 4 ? put[S_FIRST_POOL + i - S_ONDISK]
                                                           : missing[0];
        dest[i] = (uint32_t) i;
    }
}

//  Which put block the get's key i is (-1: the missing one).
static int
s_block_of(int i)
{
    return i < S_ONDISK ? i : i < S_ONDISK + 4 ? S_FIRST_POOL + i - S_ONDISK : -1;
}

static void
s_mixed(bool stream, p2pkv_key_result_t *res)
{
    char dir[64];
    sh_tmpdir(dir, "stream");
    td_t d;
    s_start(&d, dir, stream ? NULL : (const char *const[]) { "--stream-gets", "off", NULL });
    p2pkv_key_t *put = s_put(&d);
    p2pkv_key_t *missing = bk_keys(S_TAG, 1000, 1);
    //  slot 0's bytes (key 0's) changed on disk
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, PK_DISK_TIER_FILE);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    uint8_t junk[16];
    memset(junk, 0x5a, sizeof junk);
    ck_assert_int_eq(pwrite(fd, junk, sizeof junk, PK_DISK_TIER_HEADER + 100), sizeof junk);
    close(fd);

    cb_ends_t seen = { 0 };
    int server;
    p2pkv_client_t *c = s_client(&d, &seen, &server);
    p2pkv_key_t keys[S_NGET];
    uint32_t dest[S_NGET];
    s_get_keys(put, missing, keys, dest);
    uint64_t id;
    ck_assert_int_eq(p2pkv_client_get_async(c, server, "mixed", keys, dest, S_NGET, 0, res,
                                            &id), 0);
    p2pkv_status_t st = s_end_of(c, &seen, id);
    ck_assert_msg(st == P2PKV_LANDED, "ended %d: %s", st, seen.reason[0]);
    const uint8_t *pool = p2pkv_client_pool(c);
    for (int i = 0; i < S_NGET; i++) {
        int b = s_block_of(i);
        if (b <= 0) {
            //  the missing key, and the one whose slot was changed: misses
            //  whose blocks were never written
            ck_assert_msg(res[i].status == P2PKV_KEY_MISSING, "key %d: status %d", b,
                          res[i].status);
            ck_assert_msg(bk_block_zero(pool + (size_t) dest[i] * S_LEN, S_LEN),
                          "a miss's block %u was written", dest[i]);
            continue;
        }
        ck_assert_msg(res[i].status == P2PKV_KEY_LANDED && res[i].verified,
                      "stream %d, key %d (%s): status %d (%s), verified %d", stream, b,
                      b < S_ONDISK ? "on disk" : "in the pool", res[i].status,
                      p2pkv_miss_reason_name(res[i].reason), res[i].verified);
        ck_assert_msg(bk_block_ok(pool + (size_t) dest[i] * S_LEN, S_TAG, (uint64_t) b, S_LEN),
                      "key %d came back with other bytes", b);
    }
    ck_assert_int_eq(res[S_NGET - 1].reason, P2PKV_MISS_ABSENT);
    ck_assert_int_eq(td_stat(&d, "spill.corrupt"), 1);
    ck_assert_int_ge(td_stat(&d, "spill.reads"), S_ONDISK - 1);
    ck_assert_int_eq(p2pkv_client_finish(c, server, "mixed"), 0);
    ck_assert_msg(s_unpinned(c, &d), "the server still pins blocks");
    p2pkv_client_destroy(&c);
    bk_keys_free(missing);
    bk_keys_free(put);
    ck_assert_int_eq(td_stop(&d), 0);
    sh_rmrf(dir);
}

START_TEST(test_stream_mixed_results_as_without)
{
    p2pkv_key_result_t res[2][S_NGET];
    s_mixed(true, res[0]);
    s_mixed(false, res[1]);
    //  field by field the same, the holder aside, and the changed slot's
    //  reason: evicted while the store's table of recent evictions (64
    //  fingerprints, evicted.c) still holds its key, else absent, by which
    //  of the landings' evictions shared its slot
    for (int i = 0; i < S_NGET; i++) {
        p2pkv_key_result_t a = res[0][i], b = res[1][i];
        a.holder = b.holder = 0;
        if (i == 0) {
            ck_assert(a.reason == P2PKV_MISS_EVICTED || a.reason == P2PKV_MISS_ABSENT);
            ck_assert(b.reason == P2PKV_MISS_EVICTED || b.reason == P2PKV_MISS_ABSENT);
            a.reason = b.reason = 0;
        }
        ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "key %d: streamed status %d reason %d, "
                      "not %d %d", s_block_of(i), a.status, a.reason, b.status, b.reason);
    }
}
END_TEST

//  ---------------------------------------------------------------------------
//  A hung disk

//  The get: disk keys 1..4 and pool keys 30..33 into blocks 0..7.
enum { S_NHUNG = 8 };

//  A server whose disk is hung; its lookups' deadline lookup_timeout.
static p2pkv_key_t *
s_hung_start(td_t *d, char *dir, const char *lookup_timeout, p2pkv_key_t *keys, uint32_t *dest)
{
    sh_tmpdir(dir, "stream");
    setenv("P2PKV_TEST_SPILL_HUNG", "1", 1);
    s_start(d, dir, (const char *const[]) { "--lookup-timeout", lookup_timeout, NULL });
    unsetenv("P2PKV_TEST_SPILL_HUNG");
    p2pkv_key_t *put = s_put(d);
    for (int i = 0; i < S_NHUNG; i++) {
        keys[i] = i < 4 ? put[1 + i] : put[S_FIRST_POOL + i - 4];
        dest[i] = (uint32_t) i;
    }
    return put;
}

//  Polls c until the get's pool hits (blocks 4..7) hold their bytes, for
//  up to BOUND: true when they all did.
static bool
s_pool_hits_written(p2pkv_client_t *c)
{
    const uint8_t *pool = p2pkv_client_pool(c);
    double deadline = pk_clock_monotonic() + BOUND;
    for (;;) {
        bool all = true;
        for (int i = 4; i < S_NHUNG && all; i++)
            all = bk_block_ok(pool + (size_t) i * S_LEN, S_TAG,
                              (uint64_t) (S_FIRST_POOL + i - 4), S_LEN);
        if (all)
            return true;
        if (pk_clock_monotonic() >= deadline)
            return false;
        p2pkv_client_poll(c, 0.01);
    }
}

//  The disk never answers and the deadline is far: the pool hits are
//  written while the get still looks up its disk keys (no answer yet);
//  cancelled then, it ends ABORTED, its written blocks fenced, nothing
//  left pinned.
START_TEST(test_stream_writes_before_the_answer_and_aborts)
{
    char dir[64];
    td_t d;
    p2pkv_key_t keys[S_NHUNG];
    uint32_t dest[S_NHUNG];
    p2pkv_key_t *put = s_hung_start(&d, dir, "120", keys, dest);
    cb_ends_t seen = { 0 };
    int server;
    p2pkv_client_t *c = s_client(&d, &seen, &server);
    p2pkv_key_result_t res[S_NHUNG];
    uint64_t id;
    ck_assert_int_eq(p2pkv_client_get_async(c, server, "hung", keys, dest, S_NHUNG, 0, res,
                                            &id), 0);
    ck_assert_msg(s_pool_hits_written(c), "the pool hits were not written before the answer");
    ck_assert_msg(!cb_ended(&seen, id), "the get ended before its disk keys' deadline");
    ck_assert_int_eq(td_stat(&d, "spill.reads"), 0);
    ck_assert_int_eq(p2pkv_client_cancel(c, id), 0);
    p2pkv_status_t st = s_end_of(c, &seen, id);
    ck_assert_int_eq(st, P2PKV_ABORTED);
    ck_assert_msg(s_unpinned(c, &d), "the server still pins blocks");
    ck_assert_int_eq(p2pkv_client_server_state(c, server, NULL), P2PKV_SERVER_UP);
    p2pkv_client_destroy(&c);
    bk_keys_free(put);
    ck_assert_int_eq(td_stop(&d), 0);
    sh_rmrf(dir);
}
END_TEST

//  The disk never answers and the deadline is 1 s: the get ends then, its
//  pool hits landed, byte-checked, its disk keys missing as pending.
START_TEST(test_stream_hung_disk_ends_at_the_deadline)
{
    char dir[64];
    td_t d;
    p2pkv_key_t keys[S_NHUNG];
    uint32_t dest[S_NHUNG];
    p2pkv_key_t *put = s_hung_start(&d, dir, "1", keys, dest);
    cb_ends_t seen = { 0 };
    int server;
    p2pkv_client_t *c = s_client(&d, &seen, &server);
    p2pkv_key_result_t res[S_NHUNG];
    uint64_t id;
    ck_assert_int_eq(p2pkv_client_get_async(c, server, "late", keys, dest, S_NHUNG, 0, res,
                                            &id), 0);
    p2pkv_status_t st = s_end_of(c, &seen, id);
    ck_assert_msg(st == P2PKV_LANDED, "ended %d: %s", st, seen.reason[0]);
    const uint8_t *pool = p2pkv_client_pool(c);
    for (int i = 0; i < S_NHUNG; i++)
        if (i < 4) {
            ck_assert_msg(res[i].status == P2PKV_KEY_MISSING
                          && res[i].reason == P2PKV_MISS_PENDING,
                          "disk key %d: status %d reason %s", 1 + i, res[i].status,
                          p2pkv_miss_reason_name(res[i].reason));
        }
        else {
            ck_assert_msg(res[i].status == P2PKV_KEY_LANDED && res[i].verified,
                          "pool key %d: status %d", S_FIRST_POOL + i - 4, res[i].status);
            ck_assert(bk_block_ok(pool + (size_t) i * S_LEN, S_TAG,
                                  (uint64_t) (S_FIRST_POOL + i - 4), S_LEN));
        }
    ck_assert_int_eq(p2pkv_client_finish(c, server, "late"), 0);
    ck_assert_msg(s_unpinned(c, &d), "the server still pins blocks");
    p2pkv_client_destroy(&c);
    bk_keys_free(put);
    ck_assert_int_eq(td_stop(&d), 0);
    sh_rmrf(dir);
}
END_TEST

int
main(void)
{
    int skip = td_suite_start();
    if (skip)
        return skip;
    Suite *s = suite_create("spill_stream");
    TCase *tc = td_case(s, "spill_stream", 300);
    tcase_add_test(tc, test_stream_mixed_results_as_without);
    tcase_add_test(tc, test_stream_writes_before_the_answer_and_aborts);
    tcase_add_test(tc, test_stream_hung_disk_ends_at_the_deadline);
    return td_run_and_sweep("spill_stream", s);
}
