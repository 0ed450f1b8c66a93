/*  test_spill.c: the disk tier under the pool (--spill-dir, --spill-size;
    lib/tier/disk_tier.h, issue 39) on a real p2pkv-server.

    A pool of 4 blocks over a spill of 64 slots: what the pool evicts is
    written out and every block is served back byte-checked (the lookup
    answers hit_pending, the block is read back, checked and landed, then
    the parked lookup is a hit); a slot whose bytes were changed on disk
    is a miss counted as corrupt, never wrong bytes; a spill directory
    missing, not one, read-only or too small is refused at start naming
    the option; a disk that fills at run time turns the tier's writes
    off, said once, and the server keeps serving; a server killed (-9)
    while its writer is busy, restarted on the same directory, serves
    what it took back byte-checked and counts what was torn, never
    serving other bytes.
*/
#include "p2pkv.h"
#include "p2pkv_engine.h"
#include "blocks.h"
#include "daemon.h"
#include "shell.h"
#include "testutil.h"
#include "base/checksum.h"
#include "tier/disk_tier.h"
#include "tier/spill_key.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_LEN TD_BLOCK_LEN
#define S_SLOTS 64

static char s_size[32];

//  The spill's size: S_SLOTS slots of td_start's blocks.
static const char *
s_spill_size(void)
{
    snprintf(s_size, sizeof s_size, "%llu",
             (unsigned long long) (S_SLOTS * pk_disk_tier_slot_len(S_LEN)));
    return s_size;
}

//  Waits up to 60 s until the server's stats say path >= want.
static void
s_wait_stat(td_t *d, const char *path, json_int_t want)
{
    double until = zclock_mono() / 1e3 + 60;
    json_int_t v = td_stat(d, path);
    while (v < want && zclock_mono() / 1e3 < until) {
        zclock_sleep(10);
        v = td_stat(d, path);
    }
    ck_assert_msg(v >= want, "%s is %lld, waited for %lld", path, (long long) v,
                  (long long) want);
}

//  n blocks of pattern tag put on a server of a 4-block pool: once this
//  returns, the first n - 4 were written out to the tier.  The keys are
//  returned, the bytes in *data_p (the caller frees both).
static p2pkv_key_t *
s_put_spilled(td_t *d, uint64_t tag, size_t n, uint8_t **data_p)
{
    p2pkv_key_t *keys = bk_keys(tag, 0, n);
    uint8_t *data = malloc(n * S_LEN);
    ck_assert_ptr_nonnull(data);
    for (size_t i = 0; i < n; i++)
        bk_block_fill(data + i * S_LEN, tag, i, S_LEN);
    td_put(td_api(d), keys, data, n, S_LEN);
    s_wait_stat(d, "spill.writes", (json_int_t) n - 4);
    *data_p = data;
    return keys;
}

static p2pkv_client_t *
s_client(td_t *d, const char *peer, int *server)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = peer, .fingerprint = TD_FINGERPRINT,
                           .hash_seed = TD_HASH_SEED, .provider = "tcp", .node = "127.0.0.1" };
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, 4, S_LEN, (p2pkv_callbacks_t) { 0 },
                                              err);
    ck_assert_msg(client != NULL, "p2pkv_client_new: %s", err);
    *server = p2pkv_client_connect(client, d->endpoint, 10, err);
    ck_assert_msg(*server >= 0, "connect: %s", err);
    return client;
}

//  One key got into the client's block 0: whether it landed, and then
//  that its bytes are block i of tag.
static bool
s_get_one(p2pkv_client_t *client, int server, const p2pkv_key_t *key, uint64_t tag, uint64_t i)
{
    char err[P2PKV_ERRLEN] = "", kv[32];
    snprintf(kv, sizeof kv, "kv-%llu", (unsigned long long) i);
    uint32_t dest = 0;
    bool landed = false;
    int rc = p2pkv_client_get(client, server, kv, key, &dest, 1, true, 60, &landed, NULL, NULL,
                              err);
    ck_assert_msg(rc >= 0, "get of key %llu: %d %s", (unsigned long long) i, rc, err);
    if (landed)
        ck_assert_msg(bk_block_ok(p2pkv_client_pool(client), tag, i, S_LEN),
                      "key %llu came back with other bytes", (unsigned long long) i);
    return landed;
}

static void
s_start_with(td_t *d, const char *dir, int log_fd, const char *metrics)
{
    const char *extra[] = { "--pool-blocks", "4", "--spill-dir", dir, "--spill-size",
                            s_spill_size(), metrics ? "--metrics-bind" : NULL, metrics, NULL };
    if (log_fd >= 0)
        td_start_logged(d, extra, log_fd);
    else
        td_start(d, extra);
}

static void
s_start(td_t *d, const char *dir, int log_fd)
{
    s_start_with(d, dir, log_fd, NULL);
}

//  Scrapes port's /metrics until it holds every line of want (60 s).
static void
s_expect_metrics(int port, const char *const *want)
{
    char *answer = NULL;
    bool all = false;
    double until = zclock_mono() / 1e3 + 60;
    while (!all && zclock_mono() / 1e3 < until) {
        free(answer);
        answer = td_http_get(port, "/metrics");
        all = answer != NULL;
        for (size_t i = 0; all && want[i]; i++)
            all = strstr(answer, want[i]) != NULL;
        if (!all)
            zclock_sleep(20);
    }
    for (size_t i = 0; want[i]; i++)
        ck_assert_msg(answer && strstr(answer, want[i]), "no \"%s\" in the scrape", want[i]);
    free(answer);
}

//  32 blocks through a pool of 4: 28 go to disk, and every one of the 32
//  is served back, byte-checked; by preadv/pwritev, or io_uring where
//  the kernel lets the server have it (else the tier says pwrite).
static void
s_served_back(bool uring)
{
    char dir[64];
    sh_tmpdir(dir, "spill");
    if (uring)
        setenv("P2PKV_SPILL_IO", "io_uring", 1);
    td_t d;
    s_start(&d, dir, -1);
    unsetenv("P2PKV_SPILL_IO");
    json_t *st = td_stats_json(&d);
    const char *io = json_string_value(json_object_get(json_object_get(st, "spill"), "io"));
    ck_assert_ptr_nonnull(io);
    if (uring && strcmp(io, "io_uring") != 0)
        fprintf(stderr, "test_spill: io_uring refused here, the tier uses %s\n", io);
    ck_assert_str_eq(io, uring && strcmp(io, "pwrite") != 0 ? "io_uring" : "pwrite");
    json_decref(st);
    enum { N = 32 };
    uint8_t *data;
    p2pkv_key_t *keys = s_put_spilled(&d, 39, N, &data);
    ck_assert_int_eq(td_stat(&d, "spill.blocks"), N - 4);
    ck_assert_int_eq(td_stat(&d, "spill.dropped"), 0);

    int server;
    p2pkv_client_t *client = s_client(&d, "spill-reader", &server);
    for (size_t i = 0; i < N; i++)
        ck_assert_msg(s_get_one(client, server, &keys[i], 39, i), "key %zu missed", i);
    //  the 28 on disk came up (the last 4 were in the pool; some of the
    //  early ones may be read again after newer landings evicted them)
    ck_assert_int_ge(td_stat(&d, "spill.reads"), N - 4);
    ck_assert_int_eq(td_stat(&d, "spill.corrupt"), 0);
    ck_assert_int_ge(td_stat(&d, "pool.hits"), N);
    p2pkv_client_destroy(&client);
    free(data);
    bk_keys_free(keys);
    ck_assert_int_eq(td_stop(&d), 0);
    sh_rmrf(dir);
}

START_TEST(test_spilled_blocks_served_back)
{
    s_served_back(false);
}
END_TEST

START_TEST(test_spilled_blocks_served_back_io_uring)
{
    s_served_back(true);
}
END_TEST

//  The first block evicted is slot 0's (the free slots are taken in
//  order): its bytes changed on disk make its read-back a miss, counted
//  as corrupt; the others still come back whole.
START_TEST(test_corrupt_slot_is_a_miss)
{
    char dir[64], bind[64];
    sh_tmpdir(dir, "spill");
    int port = td_free_port();
    snprintf(bind, sizeof bind, "127.0.0.1:%d", port);
    td_t d;
    s_start_with(&d, dir, -1, bind);
    enum { N = 8 };
    uint8_t *data;
    p2pkv_key_t *keys = s_put_spilled(&d, 40, N, &data);

    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, PK_DISK_TIER_FILE);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    uint8_t junk[16];
    memset(junk, 0x5a, sizeof junk);
    ck_assert_int_eq(pwrite(fd, junk, sizeof junk, PK_DISK_TIER_HEADER + 100), sizeof junk);
    close(fd);

    int server;
    p2pkv_client_t *client = s_client(&d, "spill-corrupt", &server);
    ck_assert_msg(!s_get_one(client, server, &keys[0], 40, 0),
                  "the block whose slot was changed on disk was served");
    ck_assert_int_eq(td_stat(&d, "spill.corrupt"), 1);
    for (size_t i = 1; i < N; i++)
        ck_assert_msg(s_get_one(client, server, &keys[i], 40, i), "key %zu missed", i);
    ck_assert_int_eq(td_stat(&d, "spill.corrupt"), 1);
    //  and it is gone from the tier: asked again, a plain miss
    ck_assert(!s_get_one(client, server, &keys[0], 40, 0));
    ck_assert_int_eq(td_stat(&d, "spill.corrupt"), 1);
    //  the metrics say the same: every promotion's end is observed, the
    //  corrupt one too
    char reads[64], observed[64];
    json_int_t r = td_stat(&d, "spill.reads");
    snprintf(reads, sizeof reads, "\np2pkv_spill_reads_total %lld\n", (long long) r);
    snprintf(observed, sizeof observed, "\np2pkv_spill_read_seconds_count %lld\n",
             (long long) r + 1);
    s_expect_metrics(port, (const char *const[]) { "\np2pkv_spill_corrupt_total 1\n", reads,
                                                   observed, "\np2pkv_spill_off 0\n", NULL });
    p2pkv_client_destroy(&client);
    free(data);
    bk_keys_free(keys);
    ck_assert_int_eq(td_stop(&d), 0);
    sh_rmrf(dir);
}
END_TEST

//  A server started again on the same spill directory serves what the
//  file holds, what was evicted and what its clean stop wrote out of the
//  pool (hit_pending, then hit, byte-checked), but not a key the engine
//  dropped; a server of another identity (another peer id) drops
//  every slot, counted, and serves none.
START_TEST(test_warm_restart)
{
    char dir[64];
    sh_tmpdir(dir, "spill");
    td_t d;
    //  one identity across the restart (td_start names each server anew)
    const char *same[] = { "--pool-blocks", "4", "--spill-dir", dir, "--spill-size",
                           s_spill_size(), "--peer-id", "spill-warm", NULL };
    td_start(&d, same);
    enum { N = 12 };
    uint8_t *data;
    p2pkv_key_t *keys = s_put_spilled(&d, 42, N, &data);
    //  key 1 dropped by the engine: out of the tier, its header zeroed
    char err[P2PKV_ERRLEN] = "";
    ck_assert_msg(p2pkv_engine_drop(td_api(&d), &keys[1], 1, err) == 0, "drop: %s", err);
    ck_assert_int_eq(td_stat(&d, "spill.blocks"), N - 5);
    ck_assert_int_eq(td_stop(&d), 0);

    //  the clean stop wrote the pool's 4 out too
    td_start(&d, same);
    ck_assert_int_eq(td_stat(&d, "spill.recovered"), N - 1);
    ck_assert_int_eq(td_stat(&d, "spill.refused"), 0);
    int server;
    p2pkv_client_t *client = s_client(&d, "spill-warm", &server);
    for (size_t i = 0; i < N; i++)
        ck_assert_msg(s_get_one(client, server, &keys[i], 42, i) == (i != 1),
                      "key %zu after the restart: %s", i, i == 1 ? "served" : "missed");
    ck_assert_int_eq(td_stat(&d, "spill.corrupt"), 0);
    p2pkv_client_destroy(&client);
    ck_assert_int_eq(td_stop(&d), 0);

    //  another server's files: refused, counted, nothing served
    const char *other[] = { "--pool-blocks", "4", "--spill-dir", dir, "--spill-size",
                            s_spill_size(), "--peer-id", "another-server", NULL };
    td_start(&d, other);
    ck_assert_int_eq(td_stat(&d, "spill.recovered"), 0);
    ck_assert_int_ge(td_stat(&d, "spill.refused"), N - 1);
    client = s_client(&d, "spill-other", &server);
    ck_assert(!s_get_one(client, server, &keys[0], 42, 0));
    p2pkv_client_destroy(&client);
    ck_assert_int_eq(td_stop(&d), 0);
    free(data);
    bk_keys_free(keys);
    sh_rmrf(dir);
}
END_TEST

//  The engine's pull knows the tier: a key on this server's disk is
//  present (its read back starts), not fetched from the server named,
//  and lands in the pool.
START_TEST(test_pull_of_a_spilled_key)
{
    char dir[64];
    sh_tmpdir(dir, "spill");
    td_t d;
    s_start(&d, dir, -1);
    enum { N = 8 };
    uint8_t *data;
    p2pkv_key_t *keys = s_put_spilled(&d, 43, N, &data);
    p2pkv_engine_t *engine = td_engine_open(&d, NULL, NULL);
    char err[P2PKV_ERRLEN] = "";
    uint64_t id = 0;
    size_t fetching = 9;
    bool present = false;
    //  nobody listens there: a fetch from it would fail
    ck_assert_msg(p2pkv_engine_pull(engine, "tcp://127.0.0.1:9", &keys[0], 1, &id, &fetching,
                                    &present, err) == 0, "pull: %s", err);
    ck_assert_uint_eq(fetching, 0);
    ck_assert(present);
    p2pkv_engine_event_t ev;
    ck_assert_int_eq(p2pkv_engine_next_event(engine, 30, &ev), 0);
    ck_assert_msg(ev.kind == P2PKV_EVENT_PULL && ev.missing == 0, "pull: %s", ev.reason);
    s_wait_stat(&d, "spill.reads", 1);
    //  in the pool now: a consumer's lookup is a plain hit
    json_int_t reads = td_stat(&d, "spill.reads");
    int server;
    p2pkv_client_t *client = s_client(&d, "spill-pull", &server);
    ck_assert(s_get_one(client, server, &keys[0], 43, 0));
    ck_assert_int_eq(td_stat(&d, "spill.reads"), reads);
    p2pkv_client_destroy(&client);
    p2pkv_engine_close(&engine);
    free(data);
    bk_keys_free(keys);
    ck_assert_int_eq(td_stop(&d), 0);
    sh_rmrf(dir);
}
END_TEST

//  p2pkv-server with the spill options, refused at start: its status,
//  and said must hold want.
static void
s_refused_key(const char *dir, const char *size, const char *key, int status,
              const char *want)
{
    char pool[64], local[96], said[2048];
    snprintf(pool, sizeof pool, "/p2pkv-e2e-%d-spill", getpid());
    snprintf(local, sizeof local, "ipc:///tmp/p2pkv-e2e-%d-spill.sock", getpid());
    const char *args[] = { "--peer-id", "srv-spill", "--bind", "tcp://127.0.0.1:*", "--local",
                           local, "--pool-name", pool, "--pool-blocks", "4", "--block-len",
                           "4096", "--provider", "tcp", "--spill-dir", dir, "--spill-size",
                           size, NULL, NULL, NULL };
    //  each option given or not: the ones given close up
    size_t at = 14;
    const char *opts[][2] = { { "--spill-dir", dir }, { "--spill-size", size },
                              { "--spill-key", key } };
    for (size_t i = 0; i < 3; i++)
        if (opts[i][1]) {
            args[at++] = opts[i][0];
            args[at++] = opts[i][1];
        }
    args[at] = NULL;
    ck_assert_int_eq(td_run(args, said, sizeof said), status);
    ck_assert_msg(strstr(said, want), "said \"%s\", not \"%s\"", said, want);
}

static void
s_refused(const char *dir, const char *size, int status, const char *want)
{
    s_refused_key(dir, size, NULL, status, want);
}

START_TEST(test_bad_spill_dir_refused)
{
    char dir[64], file[128];
    sh_tmpdir(dir, "spill");
    //  usage errors: one option without the other, a size of no slot
    s_refused(dir, NULL, 2, "--spill-dir: needs --spill-size");
    s_refused(dir, "100", 2, "--spill-size: 100 bytes hold no block");
    //  missing, not a directory
    s_refused("/nonexistent/p2pkv-spill", s_spill_size(), 1,
              "--spill-dir /nonexistent/p2pkv-spill: No such file or directory");
    snprintf(file, sizeof file, "%s/plain", dir);
    sh_write("x", 1, "%s", file);
    char want[256];
    snprintf(want, sizeof want, "--spill-dir %s: not a directory", file);
    s_refused(file, s_spill_size(), 1, want);
    //  another server's (the file locked)
    td_t d;
    s_start(&d, dir, -1);
    snprintf(want, sizeof want, "--spill-dir %s: %s is held by another server", dir,
             PK_DISK_TIER_FILE);
    s_refused(dir, s_spill_size(), 1, want);
    ck_assert_int_eq(td_stop(&d), 0);
    sh_rmrf(dir);
}
END_TEST

//  Servers started at once on one default key path (a fleet's node
//  started by a script, or this suite's servers): each reads the one key
//  that was made, never a file another is still writing.  Eight
//  processes released together by one pipe's close, 20 times over.
START_TEST(test_spill_key_made_once_by_racing_starts)
{
    enum { S_PROCS = 8, S_ROUNDS = 20 };
    char keydir[64], key[128];
    sh_tmpdir(keydir, "spillrace");
    for (int round = 0; round < S_ROUNDS; round++) {
        snprintf(key, sizeof key, "%s/r%d/spill.key", keydir, round);
        int go[2], back[2];
        ck_assert_int_eq(pipe(go), 0);
        ck_assert_int_eq(pipe(back), 0);
        pid_t pids[S_PROCS];
        for (int i = 0; i < S_PROCS; i++) {
            pids[i] = fork();
            ck_assert_int_ge(pids[i], 0);
            if (pids[i] == 0) {
                close(go[1]);
                char b;
                if (read(go[0], &b, 1) != 0)
                    _exit(3);
                uint8_t k[PK_SPILL_KEY_LEN + 1] = { 0 };
                char err[PK_ERRLEN];
                k[PK_SPILL_KEY_LEN] = pk_spill_key_load(key, k, err) == 0;
                _exit(write(back[1], k, sizeof k) == (ssize_t) sizeof k ? 0 : 4);
            }
        }
        close(go[0]);
        close(back[1]);
        close(go[1]);           //  all go
        uint8_t first[PK_SPILL_KEY_LEN + 1];
        for (int i = 0; i < S_PROCS; i++) {
            uint8_t k[PK_SPILL_KEY_LEN + 1];
            ck_assert_int_eq(read(back[0], k, sizeof k), sizeof k);
            ck_assert_msg(k[PK_SPILL_KEY_LEN] == 1, "round %d: a start could not load the key",
                          round);
            if (i == 0)
                memcpy(first, k, sizeof k);
            ck_assert_msg(memcmp(first, k, sizeof k) == 0, "round %d: two keys in use", round);
        }
        for (int i = 0; i < S_PROCS; i++) {
            int st;
            ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
            ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
        close(back[0]);
        uint8_t onfile[PK_SPILL_KEY_LEN];
        int fd = open(key, O_RDONLY);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(read(fd, onfile, sizeof onfile), sizeof onfile);
        close(fd);
        ck_assert(memcmp(onfile, first, PK_SPILL_KEY_LEN) == 0);
    }
    sh_rmrf(keydir);
}
END_TEST

//  The spill key (--spill-key, tier/spill_key.h): made 0600 at the first
//  start; one others may read, of another length, or inside the spill
//  directory is refused at start naming the option.
START_TEST(test_spill_key_refused)
{
    char dir[64], keydir[64], key[128], want[512];
    sh_tmpdir(dir, "spill");
    sh_tmpdir(keydir, "spillkey");
    snprintf(key, sizeof key, "%s/made/spill.key", keydir);
    td_t d;
    const char *extra[] = { "--pool-blocks", "4", "--spill-dir", dir, "--spill-size",
                            s_spill_size(), "--spill-key", key, NULL };
    td_start(&d, extra);
    ck_assert_int_eq(td_stop(&d), 0);
    struct stat st;
    ck_assert_int_eq(stat(key, &st), 0);
    ck_assert_int_eq(st.st_size, 32);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(chmod(key, 0644), 0);
    snprintf(want, sizeof want, "--spill-key %s: %s may be read or written by others "
             "(mode 644)", key, key);
    s_refused_key(dir, s_spill_size(), key, 1, want);
    sh_write("short", 5, "%s/short.key", keydir);
    snprintf(key, sizeof key, "%s/short.key", keydir);
    ck_assert_int_eq(chmod(key, 0600), 0);
    snprintf(want, sizeof want, "--spill-key %s: %s holds 5 bytes, a key is 32", key, key);
    s_refused_key(dir, s_spill_size(), key, 1, want);
    snprintf(key, sizeof key, "%s/inside.key", dir);
    snprintf(want, sizeof want, "--spill-key %s: inside --spill-dir %s", key, dir);
    s_refused_key(dir, s_spill_size(), key, 1, want);
    s_refused_key(NULL, NULL, key, 2, "--spill-key needs --spill-dir");
    sh_rmrf(dir);
    sh_rmrf(keydir);
}
END_TEST

//  The slots' MAC (--spill-key): a writer of the spill directory who
//  puts other bytes in a slot and, in its header, their checksum and a
//  header checksum recomputed as a plain one (what version 1 took), has
//  the slot refused at the restart, counted, and the key is not served;
//  the others are, byte-checked.  Header offsets: disk_tier.c's
//  s_header_t (sum at 40, data_sum at 48, the MAC at 72).
START_TEST(test_forged_slot_refused)
{
    char dir[64], keydir[64], key[128];
    sh_tmpdir(dir, "spill");
    sh_tmpdir(keydir, "spillkey");
    snprintf(key, sizeof key, "%s/spill.key", keydir);
    const char *same[] = { "--pool-blocks", "4", "--spill-dir", dir, "--spill-size",
                           s_spill_size(), "--peer-id", "spill-forged", "--spill-key", key,
                           NULL };
    td_t d;
    td_start(&d, same);
    enum { N = 8 };
    uint8_t *data;
    p2pkv_key_t *keys = s_put_spilled(&d, 43, N, &data);
    ck_assert_int_eq(td_stop(&d), 0);

    //  slot 0 holds key 0 (the first evicted): other bytes, checksums
    //  recomputed, the header's own check recomputed in the clear
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, PK_DISK_TIER_FILE);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t *h = calloc(1, PK_DISK_TIER_HEADER), *other = malloc(S_LEN);
    ck_assert_int_eq(pread(fd, h, PK_DISK_TIER_HEADER, 0), PK_DISK_TIER_HEADER);
    ck_assert_mem_eq(h + 88, keys[0].bytes, keys[0].len);
    bk_block_fill(other, 44, 0, S_LEN);
    uint64_t sum = pk_checksum(other, S_LEN);
    memcpy(h + 40, &sum, 8);
    memcpy(h + 48, &sum, 8);
    memset(h + 72, 0, 16);
    uint64_t plain = pk_checksum(h, 88 + 256);
    memcpy(h + 72, &plain, 8);
    ck_assert_int_eq(pwrite(fd, h, PK_DISK_TIER_HEADER, 0), PK_DISK_TIER_HEADER);
    ck_assert_int_eq(pwrite(fd, other, S_LEN, PK_DISK_TIER_HEADER), S_LEN);
    close(fd);

    td_start(&d, same);
    ck_assert_int_eq(td_stat(&d, "spill.refused"), 1);
    ck_assert_int_eq(td_stat(&d, "spill.recovered"), N - 1);
    int server;
    p2pkv_client_t *client = s_client(&d, "spill-forged", &server);
    ck_assert_msg(!s_get_one(client, server, &keys[0], 43, 0), "the forged slot was served");
    for (size_t i = 1; i < N; i++)
        ck_assert_msg(s_get_one(client, server, &keys[i], 43, i), "key %zu missed", i);
    ck_assert_int_eq(td_stat(&d, "spill.corrupt"), 0);
    p2pkv_client_destroy(&client);
    ck_assert_int_eq(td_stop(&d), 0);

    //  another key: every slot foreign, refused
    unlink(key);
    td_start(&d, same);
    ck_assert_int_eq(td_stat(&d, "spill.recovered"), 0);
    ck_assert_int_ge(td_stat(&d, "spill.refused"), N - 1);
    ck_assert_int_eq(td_stop(&d), 0);
    free(h);
    free(other);
    free(data);
    bk_keys_free(keys);
    sh_rmrf(dir);
    sh_rmrf(keydir);
}
END_TEST

//  A tmpfs of its own (root only): too small and read-only at start, full
//  at run time.  0 when mounted, else why not.
static const char *
s_mount(const char *dir, const char *opts)
{
    if (geteuid() != 0)
        return "not root: cannot mount a tmpfs";
    if (mount("p2pkv-spill", dir, "tmpfs", 0, opts) != 0)
        return strerror(errno);
    return NULL;
}

START_TEST(test_small_and_read_only_disk_refused)
{
    char dir[64];
    sh_tmpdir(dir, "spill");
    const char *why = s_mount(dir, "size=256k");
    if (why) {
        fprintf(stderr, "test_small_and_read_only_disk_refused skipped: %s\n", why);
        sh_rmrf(dir);
        return;
    }
    char want[256];
    snprintf(want, sizeof want, "bytes free for the disk tier, %s asked", s_spill_size());
    s_refused(dir, s_spill_size(), 1, want);
    ck_assert_int_eq(mount("p2pkv-spill", dir, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=256k"), 0);
    snprintf(want, sizeof want, "--spill-dir %s: cannot open %s: Read-only file system", dir,
             PK_DISK_TIER_FILE);
    s_refused(dir, "65536", 1, want);
    ck_assert_int_eq(umount(dir), 0);
    sh_rmrf(dir);
}
END_TEST

//  The disk fills under the tier (another file takes the rest): its
//  writes fail with ENOSPC, it says so once and writes nothing more, and
//  the server keeps serving from its pool.
START_TEST(test_full_disk_at_run_time)
{
    char dir[64];
    sh_tmpdir(dir, "spill");
    const char *why = s_mount(dir, "size=1m");
    if (why) {
        fprintf(stderr, "test_full_disk_at_run_time skipped: %s\n", why);
        sh_rmrf(dir);
        return;
    }
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    td_t d;
    s_start(&d, dir, p[1]);
    close(p[1]);
    //  the rest of the tmpfs taken by another file
    ck_assert_int_ne(sh_run("dd if=/dev/zero of=%s/filler bs=4096 2>/dev/null", dir), 0);
    enum { N = 32, FIRST = 24 };
    p2pkv_key_t *keys = bk_keys(41, 0, N);
    uint8_t *data = malloc((size_t) N * S_LEN);
    for (size_t i = 0; i < N; i++)
        bk_block_fill(data + i * S_LEN, 41, i, S_LEN);
    td_put(td_api(&d), keys, data, FIRST, S_LEN);
    s_wait_stat(&d, "spill.off", 1);
    ck_assert_int_ge(td_stat(&d, "spill.write_errors"), 1);
    ck_assert_int_eq(td_stat(&d, "spill.writes"), 0);
    //  every eviction after the writes went off is dropped, none staged
    json_int_t dropped = td_stat(&d, "spill.dropped");
    td_put(td_api(&d), keys + FIRST, data + (size_t) FIRST * S_LEN, N - FIRST, S_LEN);
    ck_assert_int_eq(td_stat(&d, "spill.dropped"), dropped + N - FIRST);
    ck_assert_int_eq(td_stat(&d, "spill.writes"), 0);
    //  and the server serves what its pool holds
    int server;
    p2pkv_client_t *client = s_client(&d, "spill-full", &server);
    for (size_t i = N - 4; i < N; i++)
        ck_assert_msg(s_get_one(client, server, &keys[i], 41, i), "key %zu missed", i);
    p2pkv_client_destroy(&client);
    ck_assert_int_eq(td_stop(&d), 0);
    char *log = td_read_log(p[0]);
    const char *line = "the disk tier writes nothing more";
    char *first = strstr(log, line);
    ck_assert_msg(first, "no warning in the log: %s", log);
    ck_assert_msg(!strstr(first + 1, line), "the warning came twice: %s", log);
    ck_assert_msg(strstr(log, "No space left on device"), "ENOSPC not named: %s", log);
    free(log);
    free(data);
    bk_keys_free(keys);
    ck_assert_int_eq(umount(dir), 0);
    sh_rmrf(dir);
}
END_TEST

//  A key longer than the tier keeps inline (256 bytes) is not spilled:
//  counted as too long (and dropped), and a miss once evicted; a key of
//  256 bytes is spilled and served back.
START_TEST(test_long_key_not_spilled)
{
    char dir[64];
    sh_tmpdir(dir, "spill");
    td_t d;
    s_start(&d, dir, -1);
    uint8_t longb[PK_DISK_TIER_MAX_KEY + 1], edge[PK_DISK_TIER_MAX_KEY];
    memset(longb, 'L', sizeof longb);
    memset(edge, 'E', sizeof edge);
    p2pkv_key_t two[2] = { { longb, sizeof longb }, { edge, sizeof edge } };
    uint8_t *data = malloc(2 * (size_t) S_LEN);
    bk_block_fill(data, 45, 0, S_LEN);
    bk_block_fill(data + S_LEN, 45, 1, S_LEN);
    td_put(td_api(&d), two, data, 2, S_LEN);
    //  four more evict both
    p2pkv_key_t *keys = bk_keys(45, 10, 4);
    uint8_t *more = malloc(4 * (size_t) S_LEN);
    for (size_t i = 0; i < 4; i++)
        bk_block_fill(more + i * S_LEN, 45, 10 + i, S_LEN);
    td_put(td_api(&d), keys, more, 4, S_LEN);
    s_wait_stat(&d, "spill.writes", 1);
    ck_assert_int_eq(td_stat(&d, "spill.too_long"), 1);
    ck_assert_int_eq(td_stat(&d, "spill.dropped"), 1);
    ck_assert_int_eq(td_stat(&d, "spill.blocks"), 1);
    int server;
    p2pkv_client_t *client = s_client(&d, "spill-long", &server);
    ck_assert(!s_get_one(client, server, &two[0], 45, 0));
    ck_assert(s_get_one(client, server, &two[1], 45, 1));
    p2pkv_client_destroy(&client);
    bk_keys_free(keys);
    free(more);
    free(data);
    ck_assert_int_eq(td_stop(&d), 0);
    sh_rmrf(dir);
}
END_TEST

//  ---------------------------------------------------------------------------
//  kill -9 while blocks are written out

#define K_LEN 65536             //  blocks of 64 KiB: a write takes a while
#define K_POOL 256              //  one reserve evicts 256 at once: the 16 MiB of the
                                //  staging queue, some milliseconds of writing
#define K_SLOTS 1024
#define K_CHUNKS 8

static p2pkv_client_t *
s_client_of(td_t *d, const char *peer, size_t nblocks, size_t len, int *server)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = peer, .fingerprint = TD_FINGERPRINT,
                           .hash_seed = TD_HASH_SEED, .provider = "tcp", .node = "127.0.0.1" };
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, nblocks, len,
                                              (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_msg(client != NULL, "p2pkv_client_new: %s", err);
    *server = p2pkv_client_connect(client, d->endpoint, 10, err);
    ck_assert_msg(*server >= 0, "connect: %s", err);
    return client;
}

//  Keys first.. of tag, content i, reserved, written and committed at once
//  (the reserve evicts n blocks of a full pool in one hold of its lock),
//  unless the spill's staged count right after the reserve says the
//  writer has evicted blocks to write: then the server is killed at
//  once (that reservation never committed) and the count returned.
static json_int_t
s_publish_or_kill(td_t *d, const p2pkv_key_t *keys, uint64_t tag, size_t first, size_t n)
{
    uint8_t *pool = p2pkv_engine_pool(td_api(d));
    uint32_t blocks[K_POOL];
    td_reserve(d, keys + first, n, blocks);
    json_int_t staged = td_stat(d, "spill.staged");
    if (staged > 0) {
        td_kill(d);
        return staged;
    }
    for (size_t i = 0; i < n; i++)
        bk_block_fill(pool + (size_t) blocks[i] * K_LEN, tag, first + i, K_LEN);
    td_commit(d, keys + first, n);
    return 0;
}

//  The offset of the first slot from `from` whose header was written (its
//  magic there), or -1.
static off_t
s_written_slot(int fd, uint32_t from, uint32_t *slot)
{
    uint64_t slot_len = pk_disk_tier_slot_len(K_LEN);
    for (uint32_t i = from; i < K_SLOTS; i++) {
        char magic[8];
        if (pread(fd, magic, 8, (off_t) (i * slot_len)) == 8 && memcmp(magic, "p2pkvSP1", 8) == 0) {
            *slot = i;
            return (off_t) (i * slot_len);
        }
    }
    return -1;
}

//  One round: a server whose writer is busy (the spill's staged count
//  seen above 0) is killed, two written slots are torn by hand as a
//  crash mid-write leaves them (one's bytes, one's header), and a server
//  started on the same directory serves every key it holds byte-checked:
//  each slot it took back is either served whole or counted corrupt when
//  read back, the torn header is refused at start, and no key is served
//  with other bytes.
static void
s_killed_mid_write(int round)
{
    char dir[64], size[32];
    sh_tmpdir(dir, "spill");
    snprintf(size, sizeof size, "%llu",
             (unsigned long long) (K_SLOTS * pk_disk_tier_slot_len(K_LEN)));
    const char *extra[] = { "--pool-blocks", "256", "--block-len", "65536", "--spill-dir", dir,
                            "--spill-size", size, "--peer-id", "spill-crash", NULL };
    td_t d;
    td_start(&d, extra);
    uint64_t tag = 50 + (uint64_t) round;
    p2pkv_key_t *keys = bk_keys(tag, 0, K_CHUNKS * K_POOL);
    size_t put = 0;
    json_int_t staged = 0;
    //  until the writer is seen with blocks staged or being written
    for (int c = 0; c < K_CHUNKS && staged == 0; c++)
        if ((staged = s_publish_or_kill(&d, keys, tag, put, K_POOL)) == 0)
            put += K_POOL;
    ck_assert_msg(staged > 0, "round %d: the writer was never seen busy", round);

    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, PK_DISK_TIER_FILE);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint32_t torn_bytes = 0, torn_head = 0;
    off_t at_bytes = s_written_slot(fd, 0, &torn_bytes);
    off_t at_head = at_bytes >= 0 ? s_written_slot(fd, torn_bytes + 1, &torn_head) : -1;
    uint8_t junk[K_LEN / 2];
    memset(junk, 0xa5, sizeof junk);
    //  the block's second half never written, the first half new
    if (at_bytes >= 0)
        ck_assert_int_eq(pwrite(fd, junk, sizeof junk, at_bytes + PK_DISK_TIER_HEADER + K_LEN / 2),
                         sizeof junk);
    //  a header half written: its key's end not there
    if (at_head >= 0)
        ck_assert_int_eq(pwrite(fd, junk, 64, at_head + 100), 64);
    close(fd);

    td_start(&d, extra);
    json_int_t recovered = td_stat(&d, "spill.recovered");
    if (at_head >= 0)
        ck_assert_int_ge(td_stat(&d, "spill.refused"), 1);
    int server;
    p2pkv_client_t *client = s_client_of(&d, "spill-crash", 16, K_LEN, &server);
    uint8_t *pool = p2pkv_client_pool(client);
    uint32_t dest[16];
    for (uint32_t i = 0; i < 16; i++)
        dest[i] = i;
    size_t hits = 0;
    for (size_t at = 0; at < put; at += 16) {
        char err[P2PKV_ERRLEN] = "", kv[32];
        snprintf(kv, sizeof kv, "crash-%zu", at);
        bool landed[16] = { false };
        memset(pool, 0, 16 * (size_t) K_LEN);
        int got = p2pkv_client_get(client, server, kv, keys + at, dest, 16, true, 60, landed,
                                   NULL, NULL, err);
        ck_assert_msg(got >= 0, "get: %d %s", got, err);
        for (size_t i = 0; i < 16; i++) {
            if (!landed[i])
                continue;
            hits++;
            ck_assert_msg(bk_block_ok(pool + i * K_LEN, tag, at + i, K_LEN),
                          "round %d: key %zu served with other bytes", round, at + i);
        }
    }
    //  the pool's blocks at the kill were never written; what the tier took
    //  back was served whole, or was torn and counted, never served
    json_int_t corrupt = td_stat(&d, "spill.corrupt");
    ck_assert_msg((json_int_t) hits + corrupt == recovered,
                  "round %d: %zu served + %lld corrupt, %lld slots taken back", round, hits,
                  (long long) corrupt, (long long) recovered);
    if (at_bytes >= 0)
        ck_assert_int_ge(corrupt, 1);
    fprintf(stderr, "test_killed_mid_write round %d: %zu put, %lld staged at the kill, "
            "%lld taken back, %zu served, %lld corrupt, %lld refused\n", round, put,
            (long long) staged, (long long) recovered, hits, (long long) corrupt,
            (long long) td_stat(&d, "spill.refused"));
    p2pkv_client_destroy(&client);
    ck_assert_int_eq(td_stop(&d), 0);
    bk_keys_free(keys);
    sh_rmrf(dir);
}

START_TEST(test_killed_mid_write)
{
    for (int round = 0; round < 3; round++)
        s_killed_mid_write(round);
}
END_TEST

int
main(void)
{
    int skip = td_suite_start();
    if (skip)
        return skip;
    Suite *s = suite_create("spill");
    TCase *tc = td_case(s, "spill", 300);
    tcase_add_test(tc, test_spilled_blocks_served_back);
    tcase_add_test(tc, test_spilled_blocks_served_back_io_uring);
    tcase_add_test(tc, test_corrupt_slot_is_a_miss);
    tcase_add_test(tc, test_warm_restart);
    tcase_add_test(tc, test_pull_of_a_spilled_key);
    tcase_add_test(tc, test_bad_spill_dir_refused);
    tcase_add_test(tc, test_small_and_read_only_disk_refused);
    tcase_add_test(tc, test_full_disk_at_run_time);
    tcase_add_test(tc, test_killed_mid_write);
    tcase_add_test(tc, test_long_key_not_spilled);
    tcase_add_test(tc, test_spill_key_refused);
    tcase_add_test(tc, test_spill_key_made_once_by_racing_starts);
    tcase_add_test(tc, test_forged_slot_refused);
    return td_run_and_sweep("spill", s);
}
