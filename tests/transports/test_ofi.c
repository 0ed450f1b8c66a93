/*  test_ofi.c: the libfabric transport over the real tcp provider on
    127.0.0.1, two sides in one process (a server writing, a consumer
    exposing its pool), each with its own fabric, domain and channel; and
    the seam's shared life (seam.c) over it and over the in-memory
    transport.

    Exits 77 (automake's SKIP) with a message where the machine has no tcp
    provider at all.
*/
#include "base/checksum.h"
#include "base/clock.h"
#include "ofi/ofi.h"
#include "seam.h"
#include "sim/memtransport.h"
#include "stranger.h"
#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define BLOCKS 2048
#define PER_WRITE (PK_OFI_MAX_WRITE_BYTES / BLOCK)     //  blocks merged into one write

typedef struct {
    uint8_t *pool;
    pk_ofi_t *ofi;
    pk_ofi_channel_t *ch;
} s_side_t;

static s_side_t S, C;       //  server (writer) and consumer (target)
static pk_transport_t T;

static void
s_open(s_side_t *side, bool expose, uint8_t fill)
{
    char err[PK_ERRLEN] = "";
    int rc;
    side->pool = aligned_alloc(4096, (size_t) BLOCK * BLOCKS);
    ck_assert_ptr_nonnull(side->pool);
    memset(side->pool, fill, (size_t) BLOCK * BLOCKS);
    pk_ofi_config_t config = { "tcp", "127.0.0.1", 2.0, false };
    side->ofi = pk_ofi_new(&config, side->pool, BLOCKS, BLOCK, &rc, err);
    ck_assert_msg(side->ofi != NULL, "pk_ofi_new: %d %s", rc, err);
    side->ch = pk_ofi_channel_new(side->ofi, expose, &rc, err);
    ck_assert_msg(side->ch != NULL, "pk_ofi_channel_new: %d %s", rc, err);
}

static void
s_setup(void)
{
    s_open(&S, false, 0);
    s_open(&C, true, 0xee);
    //  the server's pool: block i filled with bytes i, i+1, ...
    for (size_t b = 0; b < BLOCKS; b++)
        for (size_t k = 0; k < BLOCK; k++)
            S.pool[b * BLOCK + k] = (uint8_t) (b * 7 + k);
    uint8_t *blob;
    size_t len;
    char err[PK_ERRLEN] = "";
    ck_assert_int_eq(pk_ofi_channel_blob(C.ch, &blob, &len), 0);
    ck_assert_int_eq(pk_ofi_channel_connect(S.ch, blob, len, err), 0);
    free(blob);
    ck_assert_int_eq(pk_ofi_channel_blob(S.ch, &blob, &len), 0);
    ck_assert_int_eq(pk_ofi_channel_connect(C.ch, blob, len, err), 0);
    free(blob);
    T = pk_ofi_channel_transport(S.ch);
}

static void
s_teardown(void)
{
    s_side_t *sides[2] = { &S, &C };
    for (int i = 0; i < 2; i++) {
        pk_ofi_channel_destroy(&sides[i]->ch);
        pk_ofi_destroy(&sides[i]->ofi);
        free(sides[i]->pool);
    }
}

typedef struct {
    uint64_t tid;
    bool ok;
    int count;
    uint64_t landed;
} s_seen_t;

static void
s_each(void *arg, uint64_t tid, bool ok, uint64_t landed)
{
    s_seen_t *seen = arg;
    seen->tid = tid;
    seen->ok = ok;
    seen->landed = landed;
    seen->count++;
}

//  Progresses both sides until the server reports the transfer (or the
//  deadline passes) and, when want_landed, the consumer counted that many
//  blocks for the round.
static s_seen_t
s_wait(uint64_t round, uint64_t want_landed, bool poll_target)
{
    s_seen_t seen = { 0, false, 0, 0 };
    double deadline = pk_clock_monotonic() + 20;
    while (pk_clock_monotonic() < deadline) {
        if (poll_target)
            pk_ofi_channel_progress(C.ch);
        if (!seen.count)
            T.poll(T.self, s_each, &seen);
        if (seen.count && pk_ofi_channel_landed(C.ch, round) >= want_landed)
            break;
    }
    return seen;
}

static bool
s_block_is(uint32_t consumer_block, uint32_t server_block)
{
    for (size_t k = 0; k < BLOCK; k++)
        if (C.pool[(size_t) consumer_block * BLOCK + k] != (uint8_t) (server_block * 7 + k))
            return false;
    return true;
}

static bool
s_block_untouched(uint32_t consumer_block)
{
    for (size_t k = 0; k < BLOCK; k++)
        if (C.pool[(size_t) consumer_block * BLOCK + k] != 0xee)
            return false;
    return true;
}

//  N blocks, contiguous on both sides or scattered; every byte lands at
//  the right block, nothing else changes, and merging shows in the count
//  of writes.
static void
s_write_and_verify(uint32_t n, bool contiguous, uint64_t round)
{
    uint32_t *local = malloc(n * sizeof *local), *remote = malloc(n * sizeof *remote);
    for (uint32_t i = 0; i < n; i++) {
        local[i] = contiguous ? 100 + i : (i * 37) % BLOCKS;
        remote[i] = contiguous ? 20 + i : (i * 53 + 11) % BLOCKS;
    }
    pk_ofi_stats_t before, after;
    pk_ofi_channel_stats(S.ch, &before);
    int64_t tid = T.write_blocks(T.self, round, local, remote, n);
    ck_assert_int_gt(tid, 0);
    s_seen_t seen = s_wait(round, n, true);
    ck_assert_int_eq(seen.count, 1);
    ck_assert_uint_eq(seen.tid, (uint64_t) tid);
    ck_assert(seen.ok);
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, round), n);
    pk_ofi_channel_stats(S.ch, &after);
    uint64_t writes = after.writes_posted - before.writes_posted;
    if (contiguous)
        ck_assert_uint_eq(writes, (n + PER_WRITE - 1) / PER_WRITE);
    else
        ck_assert_uint_eq(writes, n);
    bool *written = calloc(BLOCKS, sizeof *written);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_msg(s_block_is(remote[i], local[i]), "block %u", remote[i]);
        written[remote[i]] = true;
    }
    for (uint32_t b = 0; b < BLOCKS; b++)
        if (!written[b])
            ck_assert_msg(s_block_untouched(b), "block %u changed", b);
    free(written);
    free(local);
    free(remote);
}

//  Loading libfabric pulls in libinfinipath, whose constructor takes
//  SIGINT, SIGTERM, SIGSEGV, ... and exits(1) on them; the transport's
//  constructor gives them back (ofi.c, s_give_back_signals).  Vacuous, and
//  said so, where libinfinipath is not loaded.
START_TEST(test_signals_given_back)
{
    bool loaded = dlopen("libinfinipath.so.4", RTLD_NOW | RTLD_NOLOAD) != NULL;
    if (!loaded)
        fprintf(stderr, "test_signals_given_back: libinfinipath not loaded here\n");
    const int sigs[] = { SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGQUIT, SIGHUP };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        ck_assert_int_eq(sigaction(sigs[i], NULL, &sa), 0);
        if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN)
            continue;
        void *fn = (sa.sa_flags & SA_SIGINFO) ? (void *) (uintptr_t) sa.sa_sigaction
                                              : (void *) (uintptr_t) sa.sa_handler;
        Dl_info info;
        bool psm = dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, "libinfinipath");
        ck_assert_msg(!psm, "signal %d is still handled by %s", sigs[i], info.dli_fname);
    }
}
END_TEST

START_TEST(test_write_1)
{
    s_write_and_verify(1, true, 1);
}
END_TEST

START_TEST(test_write_7_scattered)
{
    s_write_and_verify(7, false, 2);
}
END_TEST

START_TEST(test_write_1000_contiguous)
{
    s_write_and_verify(1000, true, 3);
}
END_TEST

START_TEST(test_write_1000_scattered)
{
    s_write_and_verify(1000, false, 4);
}
END_TEST

START_TEST(test_write_split_over_4mib)
{
    //  1,500 contiguous 4 KiB blocks: six 1 MiB writes (5 x 256 + 220)
    s_write_and_verify(1500, true, 5);
}
END_TEST

static atomic_bool s_target_asleep;

//  The writer on its own thread, progressing only its side.
static void *
s_writer_thread(void *arg)
{
    s_seen_t *seen = arg;
    uint32_t local[64], remote[64];
    for (uint32_t i = 0; i < 64; i++) {
        local[i] = i * 3;
        remote[i] = 1000 + i * 5;
    }
    //  write only once the target sleeps on its wait object
    while (!atomic_load(&s_target_asleep))
        sched_yield();
    ck_assert_int_gt(T.write_blocks(T.self, 6, local, remote, 64), 0);
    double deadline = pk_clock_monotonic() + 20;
    while (!seen->count && pk_clock_monotonic() < deadline)
        T.poll(T.self, s_each, seen);
    return NULL;
}

//  An idle target sleeps on its queue's wait object, and the writes of
//  its peer wake it: every sleep ends by the fd, none by the 10 s limit.
START_TEST(test_wait_fd_wakes_idle_target)
{
    int fd = pk_ofi_channel_wait_fd(C.ch);
    ck_assert_msg(fd >= 0, "the tcp provider's completion queue has no wait fd");
    s_seen_t seen = { 0, false, 0, 0 };
    pthread_t writer;
    ck_assert_int_eq(pthread_create(&writer, NULL, s_writer_thread, &seen), 0);
    int sleeps = 0;
    double deadline = pk_clock_monotonic() + 20;
    while (pk_ofi_channel_landed(C.ch, 6) < 64 && pk_clock_monotonic() < deadline) {
        if (pk_ofi_channel_trywait(C.ch)) {
            struct pollfd p = { fd, POLLIN, 0 };
            atomic_store(&s_target_asleep, true);
            ck_assert_msg(poll(&p, 1, 10000) == 1, "slept 10 s on the wait fd while written to");
            sleeps++;
        }
        pk_ofi_channel_progress(C.ch);
    }
    pthread_join(writer, NULL);
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, 6), 64);
    ck_assert(seen.ok);
    ck_assert_int_ge(sleeps, 1);
    for (uint32_t i = 0; i < 64; i++)
        ck_assert(s_block_is(1000 + i * 5, i * 3));
}
END_TEST

//  The target of test_writer_sleeps_while_its_writes_wait: reads nothing
//  until the writer sleeps, then progresses until every block landed.
static atomic_bool s_writer_asleep;

static void *
s_late_target(void *arg)
{
    uint64_t want = *(uint64_t *) arg;
    double deadline = pk_clock_monotonic() + 60;
    while (!atomic_load(&s_writer_asleep) && pk_clock_monotonic() < deadline)
        sched_yield();
    while (pk_ofi_channel_landed(C.ch, 9) < want && pk_clock_monotonic() < deadline)
        pk_ofi_channel_progress(C.ch);
    return NULL;
}

//  A writer whose writes wait on a target that reads nothing stops
//  spinning: after a quarter of a millisecond without a write moving it
//  may sleep on its wait fd (pk_ofi_channel_trywait), and the fd wakes it
//  when its socket drains (every sleep ends by the fd, none by the 10 s
//  limit), until every write completed and every block landed.  96 MiB:
//  loopback's socket buffers may grow to 36 MiB (tcp_rmem's 32 and
//  tcp_wmem's 4 here), so writes stay out until the target reads (a
//  writer that never sleeps never starts it: its writes fail at the
//  channel's 2 s stall deadline).
START_TEST(test_writer_sleeps_while_its_writes_wait)
{
    int fd = pk_ofi_channel_wait_fd(S.ch);
    ck_assert_msg(fd >= 0, "the tcp provider gave the writer's completion queue no wait fd");
    uint32_t *blocks = malloc(BLOCKS * sizeof *blocks);
    for (uint32_t i = 0; i < BLOCKS; i++)
        blocks[i] = i;
    //  the connection first, both sides progressing: it needs the
    //  target's, and a writer whose write waits for it spins
    ck_assert_int_gt(T.write_blocks(T.self, 8, blocks, blocks, 1), 0);
    ck_assert_int_eq(s_wait(8, 1, true).count, 1);
    int writes = 12;
    for (int i = 0; i < writes; i++)
        ck_assert_int_gt(T.write_blocks(T.self, 9, blocks, blocks, BLOCKS), 0);
    uint64_t want = (uint64_t) writes * BLOCKS;
    pthread_t target;
    ck_assert_int_eq(pthread_create(&target, NULL, s_late_target, &want), 0);
    s_seen_t seen = { 0, true, 0, 0 };
    int sleeps = 0, ended = 0;
    bool ok = true;
    double deadline = pk_clock_monotonic() + 60;
    while (ended < writes && pk_clock_monotonic() < deadline) {
        seen.count = 0;
        T.poll(T.self, s_each, &seen);
        ended += seen.count;
        ok &= seen.count == 0 || seen.ok;
        if (ended < writes && pk_ofi_channel_trywait(S.ch)) {
            struct pollfd p = { fd, POLLIN, 0 };
            atomic_store(&s_writer_asleep, true);
            ck_assert_msg(poll(&p, 1, 10000) == 1, "slept 10 s on the wait fd while writes ran");
            sleeps++;
        }
    }
    atomic_store(&s_writer_asleep, true);       //  the target ends, whatever happened
    pthread_join(target, NULL);
    ck_assert_msg(sleeps >= 1, "the writer never slept while its writes waited (%d of %d ended, %s)",
                  ended, writes, ok ? "completed" : "some failed");
    ck_assert_int_eq(ended, writes);
    ck_assert(ok);
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, 9), want);
    for (uint32_t i = 0; i < BLOCKS; i += 97)
        ck_assert(s_block_is(i, i));
    free(blocks);
}
END_TEST

START_TEST(test_describe)
{
    char line[256];
    pk_ofi_describe(S.ofi, line, sizeof line);
    ck_assert_msg(strstr(line, "provider tcp;ofi_rxm") != NULL, "%s", line);
    ck_assert_msg(strstr(line, "remote CQ data") != NULL, "%s", line);
    ck_assert(pk_ofi_has_cq_data(S.ofi));
    //  tcp asks for no mr_mode bit in 1.17: offset addressing, our keys
    ck_assert_uint_eq(pk_ofi_mr_mode(S.ofi), 0);
    //  a provider asked for by name is never replaced by another
    char err[PK_ERRLEN] = "";
    int rc;
    pk_ofi_config_t config = { "no-such-provider", "127.0.0.1", 2.0, false };
    ck_assert_ptr_null(pk_ofi_new(&config, S.pool, BLOCKS, BLOCK, &rc, err));
    ck_assert_int_lt(rc, 0);
    ck_assert_msg(strstr(err, "provider \"no-such-provider\" is not available") != NULL, "%s", err);
}
END_TEST

//  A channel costs kilobytes of the heap, whatever glibc's mmap threshold
//  does: rxm's queue sized for FI_UNIVERSE_SIZE peers was 12 MiB a channel,
//  and a process that had freed one served the next from the heap, zeroed
//  (resident).  Counted from glibc's malloc counters, heap and mmap'ed
//  blocks both; under a sanitizer's allocator they do not move, and the
//  test says so.
START_TEST(test_channel_costs_kilobytes)
{
    struct mallinfo2 m0 = mallinfo2();
    char err[PK_ERRLEN] = "";
    int rc;
    pk_ofi_channel_t *w = pk_ofi_channel_new(S.ofi, false, &rc, err);
    ck_assert_msg(w != NULL, "writer channel: %d %s", rc, err);
    pk_ofi_channel_t *t = pk_ofi_channel_new(C.ofi, true, &rc, err);
    ck_assert_msg(t != NULL, "target channel: %d %s", rc, err);
    struct mallinfo2 m1 = mallinfo2();
    size_t before = m0.uordblks + m0.hblkhd, after = m1.uordblks + m1.hblkhd;
    pk_ofi_channel_destroy(&w);
    pk_ofi_channel_destroy(&t);
    if (after == before) {
        fprintf(stderr, "test_channel_costs_kilobytes: skipped: malloc's counters did not "
                "move: not glibc's allocator\n");
        return;
    }
    ck_assert_msg(after > before && (after - before) / 2 < 1024 * 1024,
                  "two channels took %zu bytes of the heap (at most 1 MiB each)", after - before);
}
END_TEST

START_TEST(test_remote_index_out_of_range)
{
    uint32_t local[2] = { 0, 1 }, remote[2] = { 5, BLOCKS };
    pk_ofi_stats_t before, after;
    pk_ofi_channel_stats(S.ch, &before);
    ck_assert_int_eq(T.write_blocks(T.self, 1, local, remote, 2), -ERANGE);
    uint32_t bad_local[1] = { BLOCKS }, ok_remote[1] = { 0 };
    ck_assert_int_eq(T.write_blocks(T.self, 1, bad_local, ok_remote, 1), -ERANGE);
    pk_ofi_channel_stats(S.ch, &after);
    ck_assert_uint_eq(after.writes_posted, before.writes_posted);
    ck_assert_uint_eq(after.transfers, 0);
    ck_assert(s_block_untouched(5));
}
END_TEST

START_TEST(test_landed_per_round)
{
    uint32_t local[3] = { 1, 2, 9 }, remote[3] = { 4, 5, 30 };
    int64_t t1 = T.write_blocks(T.self, 10, local, remote, 2);
    int64_t t2 = T.write_blocks(T.self, 11, local + 2, remote + 2, 1);
    ck_assert_int_gt(t1, 0);
    ck_assert_int_gt(t2, t1);
    s_seen_t seen = { 0, false, 0, 0 };
    double deadline = pk_clock_monotonic() + 20;
    while (pk_clock_monotonic() < deadline && (seen.count < 2 || pk_ofi_channel_landed(C.ch, 10) < 2
                                    || pk_ofi_channel_landed(C.ch, 11) < 1)) {
        pk_ofi_channel_progress(C.ch);
        T.poll(T.self, s_each, &seen);
    }
    ck_assert_int_eq(seen.count, 2);
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, 10), 2);
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, 11), 1);
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, 12), 0);
    //  the tag is the round's low 20 bits, but a tag's count belongs to
    //  the full round that claimed it: a round whose tag wraps onto round
    //  10's never sees its count (it was 2 here before issue 10's fix)
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, 10 + (1u << 20)), 0);
}
END_TEST

//  Block marks (capability "marks"): with them, the target checks each
//  expected block at the immediate that landed it, and a block whose bytes
//  differ from its expected checksum is found corrupt there; without
//  them the verdicts are left to the owner (it hashes after the round).
//  Scattered and contiguous runs, so a mark names a run's first block.
static void
s_marks_round(bool marks, uint64_t round)
{
    enum { N = 40 };
    uint32_t local[N], remote[N];
    uint64_t sums[N];
    uint8_t verdict[N];
    for (uint32_t i = 0; i < N; i++) {
        local[i] = 200 + (i < 20 ? i : i * 3);      //  20 contiguous, then scattered
        remote[i] = 600 + (i < 20 ? i : i * 5);
        sums[i] = pk_checksum(S.pool + (size_t) local[i] * BLOCK, BLOCK);
    }
    sums[7] ^= 1;                                   //  in the contiguous run
    sums[33] ^= 1;                                  //  a scattered one
    if (marks)
        pk_ofi_channel_marks(S.ch);
    ck_assert_int_eq(pk_ofi_channel_expect(C.ch, remote, sums, N), 0);
    ck_assert_int_gt(T.write_blocks(T.self, round, local, remote, N), 0);
    s_seen_t seen = s_wait(round, N, true);
    ck_assert(seen.ok);
    memset(verdict, PK_VERDICT_NONE, sizeof verdict);
    pk_ofi_channel_verdicts(C.ch, remote, verdict, N);
    for (uint32_t i = 0; i < N; i++) {
        int want = !marks ? PK_VERDICT_NONE
                   : i == 7 || i == 33 ? PK_VERDICT_CORRUPT : PK_VERDICT_OK;
        ck_assert_msg(verdict[i] == want, "block %u: verdict %d, want %d", i, verdict[i], want);
        ck_assert(s_block_is(remote[i], local[i]));
    }
    //  the verdicts were taken: a second read leaves them as they are
    memset(verdict, PK_VERDICT_NONE, sizeof verdict);
    pk_ofi_channel_verdicts(C.ch, remote, verdict, N);
    for (uint32_t i = 0; i < N; i++)
        ck_assert_int_eq(verdict[i], PK_VERDICT_NONE);
    if (!marks)
        return;
    //  A block that lands again after it was judged is left to the owner
    //  (judged by its last landing, hashed once the round landed), and a
    //  repeated mark costs no hash: block 0 is judged OK at its first
    //  landing, then overwritten with other bytes under marks, thrice.
    ck_assert_int_eq(pk_ofi_channel_expect(C.ch, remote, sums, 1), 0);
    uint32_t again = local[0] + 1;
    ck_assert_int_gt(T.write_blocks(T.self, round + 1, local, remote, 1), 0);
    ck_assert(s_wait(round + 1, 1, true).ok);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_gt(T.write_blocks(T.self, round + 1, &again, remote, 1), 0);
        ck_assert(s_wait(round + 1, 2 + (uint64_t) k, true).ok);
    }
    ck_assert(s_block_is(remote[0], again));
    verdict[0] = PK_VERDICT_NONE;
    pk_ofi_channel_verdicts(C.ch, remote, verdict, 1);
    ck_assert_int_eq(verdict[0], PK_VERDICT_NONE);
}

START_TEST(test_marks_check_at_landing)
{
    s_marks_round(false, 40);
    s_marks_round(true, 41);
    //  a writer channel has nothing to check
    uint32_t d = 1;
    uint64_t sum = 0;
    ck_assert_int_eq(pk_ofi_channel_expect(S.ch, &d, &sum, 1), -EINVAL);
    //  a destination outside the pool is refused
    d = BLOCKS;
    ck_assert_int_eq(pk_ofi_channel_expect(C.ch, &d, &sum, 1), -ERANGE);
}
END_TEST

//  After the consumer closes the registration it gave this server, nothing
//  from the server lands: the consumer's memory is unchanged and no
//  immediate is counted.  (Over tcp the writer's own completion may still
//  say success: it confirms transmission, not delivery; the consumer's
//  immediates are what it trusts, protocol.md section 7.)
START_TEST(test_revoked_registration)
{
    uint32_t local[2] = { 3, 4 }, remote[2] = { 40, 41 };
    ck_assert_int_gt(T.write_blocks(T.self, 1, local, remote, 1), 0);
    s_seen_t seen = s_wait(1, 1, true);
    ck_assert(seen.ok);
    ck_assert(s_block_is(40, 3));
    pk_ofi_channel_revoke(C.ch);
    ck_assert_int_gt(T.write_blocks(T.self, 2, local + 1, remote + 1, 1), 0);
    seen = s_wait(2, 0, true);
    ck_assert_int_eq(seen.count, 1);
    //  keep the consumer progressing a while longer: still nothing lands
    double until = pk_clock_monotonic() + 0.5;
    while (pk_clock_monotonic() < until)
        pk_ofi_channel_progress(C.ch);
    ck_assert(s_block_untouched(41));
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, 2), 0);
    //  Over tcp a write completes at the writer once sent, so a write after
    //  the revocation may report success there.  Whether the writer ever
    //  hears of the refusal is the endpoint's business (rxm drops the
    //  connection and the next write fails; tcp's own RDM endpoint may
    //  connect again): what holds on every endpoint is that the target
    //  counts nothing and its memory stays as it was, write after write.
    for (uint64_t round = 3; round < 6; round++) {
        ck_assert_int_gt(T.write_blocks(T.self, round, local + 1, remote + 1, 1), 0);
        seen = s_wait(round, 0, true);
        ck_assert_int_eq(seen.count, 1);
        ck_assert(s_block_untouched(41));
        ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, round), 0);
    }
}
END_TEST

START_TEST(test_blob_mismatch_refused)
{
    uint8_t *blob;
    size_t len;
    char err[PK_ERRLEN] = "";
    ck_assert_int_eq(pk_ofi_channel_blob(C.ch, &blob, &len), 0);
    //  another provider name of the same length
    size_t at = 4 + 4 + 2;
    blob[at] = 'X';
    ck_assert_int_eq(pk_ofi_channel_connect(C.ch, blob, len, err), -EPROTO);
    ck_assert_msg(strstr(err, "provider Xcp;ofi_rxm, ours is tcp;ofi_rxm") != NULL, "%s", err);
    blob[at] = 't';
    uint32_t version = 0x00010001;
    memcpy(blob + 4, &version, 4);
    ck_assert_int_eq(pk_ofi_channel_connect(C.ch, blob, len, err), -EPROTO);
    ck_assert_msg(strstr(err, "libfabric 1.1, ours is") != NULL, "%s", err);
    ck_assert_int_eq(pk_ofi_channel_connect(C.ch, blob, 7, err), -EPROTO);
    ck_assert_int_eq(pk_ofi_channel_connect(C.ch, blob, len - 1, err), -EPROTO);
    ck_assert_msg(strstr(err, "truncated") != NULL, "%s", err);
    free(blob);
    //  a raw key where the domain has no FI_MR_RAW (tcp): refused, and a
    //  raw key longer than the blob is truncation
    ck_assert_int_eq(pk_ofi_channel_blob(C.ch, &blob, &len), 0);
    uint16_t rawlen;
    memcpy(&rawlen, blob + len - 2, 2);
    ck_assert_uint_eq(rawlen, 0);
    uint8_t *raw = malloc(len + 4);
    memcpy(raw, blob, len);
    rawlen = 4;
    memcpy(raw + len - 2, &rawlen, 2);
    memcpy(raw + len, "\1\2\3\4", 4);
    ck_assert_int_eq(pk_ofi_channel_connect(S.ch, raw, len + 3, err), -EPROTO);
    ck_assert_msg(strstr(err, "truncated") != NULL, "%s", err);
    ck_assert_int_eq(pk_ofi_channel_connect(S.ch, raw, len + 4, err), -EPROTO);
    ck_assert_msg(strstr(err, "an unexpected raw memory key") != NULL, "%s", err);
    free(raw);
    free(blob);
}
END_TEST

START_TEST(test_cancel_wait_and_immediate)
{
    //  Warm the path up first: the first write to a new peer meets
    //  -FI_EAGAIN while the connection is made.
    uint32_t wl[1] = { 0 }, wr[1] = { 0 };
    ck_assert_int_gt(T.write_blocks(T.self, 6, wl, wr, 1), 0);
    ck_assert(s_wait(6, 1, true).ok);
    //  More writes than the transmit depth, scattered: some stay queued
    uint32_t n = 300;
    uint32_t *local = malloc(n * sizeof *local), *remote = malloc(n * sizeof *remote);
    for (uint32_t i = 0; i < n; i++) {
        local[i] = 2 * i;
        remote[i] = 2 * i + 1;
    }
    int64_t tid = T.write_blocks(T.self, 7, local, remote, n);
    ck_assert_int_gt(tid, 0);
    uint64_t tids[1] = { (uint64_t) tid }, still[1];
    size_t nstill = T.cancel(T.self, tids, 1, PK_CANCEL_WAIT, still);
    pk_ofi_stats_t st;
    pk_ofi_channel_stats(S.ch, &st);
    ck_assert_uint_lt(st.writes_posted, n + 1);    //  the queued ones were dropped
    ck_assert_uint_eq(nstill, 1);                   //  the posted ones still run
    ck_assert_uint_eq(still[0], (uint64_t) tid);
    s_seen_t seen = s_wait(7, st.blocks_written - 1, true);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(!seen.ok);                            //  not every block was written
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, 7), st.blocks_written - 1);
    //  the failed transfer says how many of its blocks completed: what the
    //  target may still see arrive (the server's `landing`)
    ck_assert_uint_eq(seen.landed, st.blocks_written - 1);

    //  a transfer that completed before the cancel is reported, not
    //  forgotten: its blocks landed
    ck_assert_int_gt(tid = T.write_blocks(T.self, 11, local, remote, 5), 0);
    double until = pk_clock_monotonic() + 20;
    while (pk_ofi_channel_landed(C.ch, 11) < 5 && pk_clock_monotonic() < until) {
        pk_ofi_channel_progress(S.ch);
        pk_ofi_channel_progress(C.ch);
    }
    tids[0] = (uint64_t) tid;
    ck_assert_uint_eq(T.cancel(T.self, tids, 1, PK_CANCEL_WAIT, still), 1);
    seen = (s_seen_t) { 0, false, 0, 0 };
    until = pk_clock_monotonic() + 20;
    while (!seen.count && pk_clock_monotonic() < until)
        T.poll(T.self, s_each, &seen);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(seen.ok);
    ck_assert_uint_eq(seen.landed, 5);

    //  immediate: the endpoint closes, listed transfers are released, the
    //  others end failed, and the channel takes no more writes
    int64_t a = T.write_blocks(T.self, 8, local, remote, 10);
    int64_t b = T.write_blocks(T.self, 9, local + 10, remote + 10, 10);
    tids[0] = (uint64_t) a;
    ck_assert_uint_eq(T.cancel(T.self, tids, 1, PK_CANCEL_IMMEDIATE, still), 0);
    ck_assert(pk_ofi_channel_closed(S.ch));
    seen = (s_seen_t) { 0, false, 0, 0 };
    T.poll(T.self, s_each, &seen);
    ck_assert_int_eq(seen.count, 1);
    ck_assert_uint_eq(seen.tid, (uint64_t) b);
    ck_assert(!seen.ok);
    ck_assert_int_eq(T.write_blocks(T.self, 10, local, remote, 1), -ENOTCONN);
    free(local);
    free(remote);
}
END_TEST


//  ---------------------------------------------------------------------------
//  Two processes: the consumer (target) runs in a child that exchanges
//  address blobs over pipes, progresses its channel, and checks bytes.

typedef struct {
    pid_t pid;
    int to_child, from_child;
} s_child_t;

//  Waits until the consumer counted `blocks` more immediates in total,
//  without asking landed() for any round (which would claim a tag).
static void
s_wait_counted(uint64_t before, uint64_t blocks)
{
    pk_ofi_stats_t st;
    s_seen_t seen = { 0, false, 0, 0 };
    double deadline = pk_clock_monotonic() + 20;
    do {
        pk_ofi_channel_progress(C.ch);
        if (!seen.count)
            T.poll(T.self, s_each, &seen);
        pk_ofi_channel_stats(C.ch, &st);
    } while ((st.blocks_landed < before + blocks || !seen.count)
             && pk_clock_monotonic() < deadline);
    ck_assert_uint_eq(st.blocks_landed, before + blocks);
    ck_assert(seen.ok);
}

//  Issue 10, defect 1: round tags are 20 bits, so after 2^20 rounds a
//  new round shares a tag with an old one.  Rounds R, R + 2^20, R + 2^21
//  ... collide here on purpose (the writer masks any round); a round
//  never sees an older round's count, whether the older one was forgotten
//  (the consumer's load ended), claimed and never forgotten, or never
//  asked about at all.
START_TEST(test_landed_tag_wrap)
{
    pk_channel_t *c = (pk_channel_t *) C.ch;
    const uint64_t wrap = PK_OFI_TAG_MASK + 1, r0 = 5;
    uint32_t local[3] = { 1, 2, 3 }, remote[3] = { 10, 11, 12 };
    pk_ofi_stats_t st;

    //  round r0: two blocks, counted and claimed by r0
    ck_assert_int_gt(T.write_blocks(T.self, r0, local, remote, 2), 0);
    ck_assert(s_wait(r0, 2, true).ok);
    ck_assert_uint_eq(pk_channel_landed(c, r0), 2);

    //  claimed and never forgotten: the next round on the tag starts at 0,
    //  and counts only its own block
    uint64_t r1 = r0 + wrap;
    ck_assert_uint_eq(pk_channel_landed(c, r1), 0);
    ck_assert_int_gt(T.write_blocks(T.self, r1, local, remote, 1), 0);
    ck_assert(s_wait(r1, 1, true).ok);
    ck_assert_uint_eq(pk_channel_landed(c, r1), 1);
    //  forgetting another round leaves r1's count alone; its own goes
    pk_channel_forget(c, r0);
    ck_assert_uint_eq(pk_channel_landed(c, r1), 1);
    pk_channel_forget(c, r1);
    ck_assert_uint_eq(pk_channel_landed(c, r1), 0);

    //  never asked about (a round whose load ended without a look), then
    //  forgotten at the load's end: the next round on the tag sees 0
    uint64_t r2 = r0 + 2 * wrap, r3 = r0 + 3 * wrap;
    pk_ofi_channel_stats(C.ch, &st);
    ck_assert_int_gt(T.write_blocks(T.self, r2, local, remote, 3), 0);
    s_wait_counted(st.blocks_landed, 3);
    pk_channel_forget(c, r2);
    ck_assert_uint_eq(pk_channel_landed(c, r3), 0);
    ck_assert_int_gt(T.write_blocks(T.self, r3, local, remote, 1), 0);
    ck_assert(s_wait(r3, 1, true).ok);
    ck_assert_uint_eq(pk_channel_landed(c, r3), 1);
    //  and an old round asking again after a newer one claimed the tag
    //  does not get the newer one's count either
    ck_assert_uint_eq(pk_channel_landed(c, r0), 0);
    //  other tags are untouched by all this
    ck_assert_int_gt(T.write_blocks(T.self, r0 + 1, local, remote, 2), 0);
    ck_assert(s_wait(r0 + 1, 2, true).ok);
    ck_assert_uint_eq(pk_channel_landed(c, r0 + 1), 2);
}
END_TEST

//  Issue 10, defect 2: a connect's blob is checked before any libfabric
//  object exists for it.  Junk is refused with a message naming what is
//  wrong, and the fabric opened no channel (no endpoint, queue or address
//  vector) for it; a good blob passes, also without a channel.
START_TEST(test_check_blob_before_any_channel)
{
    pk_fabric_t *f = (pk_fabric_t *) S.ofi;
    pk_fabric_stats_t before, after;
    pk_fabric_stats(f, &before);
    ck_assert_uint_eq(before.channels_opened, 1);         //  the fixture's
    ck_assert_uint_eq(before.channels_open, 1);
    uint8_t *good;
    size_t len;
    ck_assert_int_eq(pk_ofi_channel_blob(C.ch, &good, &len), 0);
    uint8_t *bad = malloc(len + 8);
    char err[PK_ERRLEN] = "";
    size_t refused = 0;
#define S_REFUSED(blob, n, text) do { \
        err[0] = 0; \
        ck_assert_int_eq(pk_fabric_check_blob(f, (blob), (n), err), -EPROTO); \
        ck_assert_msg(strstr(err, (text)) != NULL, "%s", err); \
        refused++; \
    } while (0)
    S_REFUSED(NULL, 0, "not a p2pkv libfabric address");
    S_REFUSED((const uint8_t *) "hello, world, this is junk", 26, "not a p2pkv libfabric address");
    memset(bad, 0xff, len);
    memcpy(bad, "PKOF", 4);
    S_REFUSED(bad, len, "truncated");
    memcpy(bad, good, len);
    S_REFUSED(bad, len - 1, "truncated");
    bad[4 + 4 + 2] = 'X';
    S_REFUSED(bad, len, "provider Xcp;ofi_rxm, ours is tcp;ofi_rxm");
    memcpy(bad, good, len);
    uint32_t version = 0x00010001;
    memcpy(bad + 4, &version, 4);
    S_REFUSED(bad, len, "libfabric 1.1, ours is");
    //  sizes: the block length (the 4th u64 after the address), the
    //  address's length, the exposed flag
    uint16_t provlen, addrlen;
    memcpy(&provlen, good + 8, 2);
    size_t at_addrlen = 10 + provlen, at_fields = at_addrlen + 2;
    memcpy(&addrlen, good + at_addrlen, 2);
    at_fields += addrlen;
    memcpy(bad, good, len);
    uint64_t other = BLOCK * 2;
    memcpy(bad + at_fields + 24, &other, 8);
    S_REFUSED(bad, len, "blocks of 8192 bytes, ours are 4096");
    memcpy(bad, good, len);
    bad[at_fields + 32] = 7;
    S_REFUSED(bad, len, "exposed flag 7");
    memcpy(bad, good, len);
    uint64_t none = 0;
    memcpy(bad + at_fields + 16, &none, 8);
    S_REFUSED(bad, len, "a pool of 0 blocks");
    //  an empty address: the same bytes less the address
    memcpy(bad, good, at_addrlen);
    uint16_t zero = 0;
    memcpy(bad + at_addrlen, &zero, 2);
    memcpy(bad + at_addrlen + 2, good + at_fields, len - at_fields);
    S_REFUSED(bad, len - addrlen, "an address of 0 bytes");
#undef S_REFUSED
    ck_assert_int_eq(pk_fabric_check_blob(f, good, len, err), 0);
    pk_fabric_stats(f, &after);
    ck_assert_uint_eq(after.channels_opened, before.channels_opened);
    ck_assert_uint_eq(after.channels_open, before.channels_open);
    ck_assert_uint_eq(after.blobs_refused, before.blobs_refused + refused);
    //  connect runs the same checks (and counts the refusal)
    memcpy(bad, good, len);
    memcpy(bad + at_fields + 24, &other, 8);
    pk_ofi_channel_t *fresh = (pk_ofi_channel_t *) pk_channel_new(f, false, NULL, err);
    ck_assert_ptr_nonnull(fresh);
    ck_assert_int_eq(pk_ofi_channel_connect(fresh, bad, len, err), -EPROTO);
    ck_assert_msg(strstr(err, "blocks of 8192 bytes") != NULL, "%s", err);
    pk_fabric_stats(f, &after);
    ck_assert_uint_eq(after.channels_opened, before.channels_opened + 1);
    ck_assert_uint_eq(after.channels_open, before.channels_open + 1);
    ck_assert_uint_eq(after.blobs_refused, before.blobs_refused + refused + 1);
    pk_channel_close((pk_channel_t **) &fresh);
    ck_assert_ptr_null(fresh);
    pk_fabric_stats(f, &after);
    ck_assert_uint_eq(after.channels_open, before.channels_open);
    free(bad);
    free(good);
}
END_TEST

//  The registry and the ops table's version: a caller refuses a table
//  shorter than the ops it uses.
START_TEST(test_registry_and_versions)
{
    const pk_transport_ops_t *o = pk_transport_find("ofi");
    ck_assert_ptr_eq(o, &pk_ofi_transport_ops);
    ck_assert_ptr_eq(pk_transport_find(NULL), o);
    ck_assert_ptr_null(pk_transport_find("mem"));           //  passed in, never found
    ck_assert_ptr_null(pk_transport_find("nope"));
    char err[PK_ERRLEN] = "";
    ck_assert_int_eq(pk_transport_ops_check(o, PK_TRANSPORT_OPS_SIZE, err), 0);
    ck_assert_int_eq(pk_transport_ops_check(pk_memtransport_ops(), PK_TRANSPORT_OPS_SIZE, err), 0);
    pk_transport_ops_t old = *o;
    old.size = offsetof(pk_transport_ops_t, channel_forget);
    ck_assert_int_eq(pk_transport_ops_check(&old, PK_TRANSPORT_OPS_SIZE, err), -ENOSYS);
    ck_assert_msg(strstr(err, "transport ofi") && strstr(err, "older implementation"), "%s", err);
    ck_assert_int_eq(pk_transport_ops_check(NULL, PK_TRANSPORT_OPS_SIZE, err), -ENOSYS);
    //  the seam's view of the fabric matches ofi's own
    char a[256], b[256];
    pk_fabric_describe((pk_fabric_t *) S.ofi, a, sizeof a);
    pk_ofi_describe(S.ofi, b, sizeof b);
    ck_assert_str_eq(a, b);
    ck_assert_str_eq(pk_fabric_provider((pk_fabric_t *) S.ofi), "tcp;ofi_rxm");
    ck_assert(pk_fabric_has_cq_data((pk_fabric_t *) S.ofi));
}
END_TEST

//  The memtransport moves nothing itself: the test completes the write
//  at the writer and lands its blocks at the target.
static void
s_script_mem(pk_channel_t *writer, pk_channel_t *target, uint64_t tid, uint64_t round,
             uint64_t n)
{
    pk_memtransport_complete(pk_memtransport_of(writer), &tid, 1, true);
    pk_memtransport_land(pk_memtransport_of(target), round, n);
}

START_TEST(test_seam_ofi)
{
    ts_seam_life(&(ts_seam_t) { pk_transport_find("ofi"), { "tcp", "127.0.0.1", 2.0, 0, false }, NULL });
}
END_TEST

START_TEST(test_seam_mem)
{
    ts_seam_life(&(ts_seam_t) { pk_memtransport_ops(), { NULL, NULL, 2.0, 0, false }, s_script_mem });
}
END_TEST

//  The child: expose a pool, then progress until `expect` blocks of round
//  1 landed (exit 0 if every landed block holds the writer's pattern at
//  its permuted place, 1 otherwise), or forever when expect is 0; with a
//  pace, one progress every `pace` seconds (a reader that keeps up slowly).
static void
s_child_main(int in, int out, uint32_t expect, double pace)
{
    s_side_t side = { 0 };
    s_open(&side, true, 0xee);
    char err[PK_ERRLEN];
    if (pk_channel_send_blob_fd((pk_channel_t *) side.ch, out)
        || pk_channel_connect_fd((pk_channel_t *) side.ch, in, err))
        _exit(3);
    for (;;) {
        pk_ofi_channel_progress(side.ch);
        if (pace > 0)
            nanosleep(&(struct timespec) { 0, (long) (pace * 1e9) }, NULL);
        if (expect && pk_ofi_channel_landed(side.ch, 1) >= expect) {
            C = side;
            for (uint32_t i = 0; i < expect; i++)
                if (!s_block_is((i * 53 + 11) % BLOCKS, i))
                    _exit(1);
            _exit(0);
        }
    }
}

static s_child_t
s_spawn_paced(uint32_t expect, double pace)
{
    int down[2], up[2];
    ck_assert_int_eq(pipe(down), 0);
    ck_assert_int_eq(pipe(up), 0);
    s_child_t child = { fork(), down[1], up[0] };
    ck_assert_int_ge(child.pid, 0);
    if (child.pid == 0) {
        close(down[1]);
        close(up[0]);
        s_child_main(down[0], up[1], expect, pace);
    }
    close(down[0]);
    close(up[1]);
    return child;
}

static s_child_t
s_spawn(uint32_t expect)
{
    return s_spawn_paced(expect, 0);
}

static pk_ofi_channel_t *
s_writer_channel(s_child_t *child)
{
    int rc;
    char err[PK_ERRLEN];
    pk_ofi_channel_t *ch = pk_ofi_channel_new(S.ofi, false, &rc, err);
    ck_assert_ptr_nonnull(ch);
    ck_assert_int_eq(pk_channel_connect_fd((pk_channel_t *) ch, child->from_child, err), 0);
    ck_assert_int_eq(pk_channel_send_blob_fd((pk_channel_t *) ch, child->to_child), 0);
    return ch;
}

static void
s_setup_writer(void)
{
    s_open(&S, false, 0);
    for (size_t b = 0; b < BLOCKS; b++)
        for (size_t k = 0; k < BLOCK; k++)
            S.pool[b * BLOCK + k] = (uint8_t) (b * 7 + k);
}

static void
s_teardown_writer(void)
{
    pk_ofi_channel_destroy(&S.ch);
    pk_ofi_destroy(&S.ofi);
    free(S.pool);
}

static s_seen_t
s_wait_writer(pk_transport_t *t, double seconds)
{
    s_seen_t seen = { 0, false, 0, 0 };
    double deadline = pk_clock_monotonic() + seconds;
    while (!seen.count && pk_clock_monotonic() < deadline)
        t->poll(t->self, s_each, &seen);
    return seen;
}

START_TEST(test_two_processes_bytes_land)
{
    uint32_t n = 1000;
    s_child_t child = s_spawn(n);
    pk_ofi_channel_t *ch = s_writer_channel(&child);
    pk_transport_t t = pk_ofi_channel_transport(ch);
    uint32_t *local = malloc(n * sizeof *local), *remote = malloc(n * sizeof *remote);
    for (uint32_t i = 0; i < n; i++) {
        local[i] = i;
        remote[i] = (i * 53 + 11) % BLOCKS;
    }
    ck_assert_int_gt(t.write_blocks(t.self, 1, local, remote, n), 0);
    s_seen_t seen = s_wait_writer(&t, 20);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(seen.ok);
    int status;
    ck_assert_int_eq(waitpid(child.pid, &status, 0), child.pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the consumer found wrong bytes (status %d)", status);
    pk_ofi_channel_destroy(&ch);
    free(local);
    free(remote);
    close(child.to_child);
    close(child.from_child);
}
END_TEST

START_TEST(test_peer_killed_mid_transfer)
{
    s_child_t child = s_spawn(0);
    pk_ofi_channel_t *ch = s_writer_channel(&child);
    pk_transport_t t = pk_ofi_channel_transport(ch);
    uint32_t n = 1500;
    uint32_t *local = malloc(n * sizeof *local), *remote = malloc(n * sizeof *remote);
    for (uint32_t i = 0; i < n; i++) {
        local[i] = i % BLOCKS;
        remote[i] = (i * 53 + 11) % BLOCKS;
    }
    //  warm up, then kill the consumer while a large scattered batch runs
    ck_assert_int_gt(t.write_blocks(t.self, 1, local, remote, 1), 0);
    ck_assert(s_wait_writer(&t, 20).ok);
    ck_assert_int_gt(t.write_blocks(t.self, 2, local, remote, n), 0);
    kill(child.pid, SIGKILL);
    waitpid(child.pid, NULL, 0);
    //  ends failed within the stall deadline (2 s here), never hangs: the
    //  provider reports the writes failed (tcp's own endpoint sees the
    //  connection reset), or reports nothing for writes posted to a dead
    //  peer (rxm) and the stall deadline closes the channel
    double t0 = pk_clock_monotonic();
    s_seen_t seen = s_wait_writer(&t, 30);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(!seen.ok);
    ck_assert_double_lt(pk_clock_monotonic() - t0, 10);
    pk_ofi_stats_t st;
    pk_ofi_channel_stats(ch, &st);
    ck_assert_msg(pk_ofi_channel_closed(ch) || st.cq_errors > 0,
                  "a failed transfer with neither a stall nor an error from the fabric");
    pk_ofi_channel_destroy(&ch);
    close(child.to_child);
    close(child.from_child);

    //  a restarted consumer is added as a new channel and served
    child = s_spawn(1000);
    ch = s_writer_channel(&child);
    t = pk_ofi_channel_transport(ch);
    for (uint32_t i = 0; i < 1000; i++)
        local[i] = i;
    ck_assert_int_gt(t.write_blocks(t.self, 1, local, remote, 1000), 0);
    seen = s_wait_writer(&t, 20);
    ck_assert(seen.ok);
    int status;
    ck_assert_int_eq(waitpid(child.pid, &status, 0), child.pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    pk_ofi_channel_destroy(&ch);
    close(child.to_child);
    close(child.from_child);
    free(local);
    free(remote);
}
END_TEST

//  A reader that keeps up, slowly, is not a stalled one: a deep queue of
//  writes to a consumer that progresses once every 40 ms takes more than
//  the stall deadline (2 s) to drain (about 5 s here), so its last writes wait in
//  line far longer than the deadline, yet writes complete every few
//  milliseconds all along.  The channel stays open and the transfer ends
//  ok (a rule on the oldest write's age closed it, as 64 consumers of 2
//  MiB blocks on one server did in p2pkv-bench fetch).
START_TEST(test_slow_reader_not_stalled)
{
    s_child_t child = s_spawn_paced(0, 0.04);
    pk_ofi_channel_t *ch = s_writer_channel(&child);
    pk_transport_t t = pk_ofi_channel_transport(ch);
    uint32_t n = BLOCKS * 16;
    uint32_t *idx = malloc(n * sizeof *idx);
    for (uint32_t i = 0; i < n; i++)
        idx[i] = i % BLOCKS;
    double t0 = pk_clock_monotonic();
    ck_assert_int_gt(t.write_blocks(t.self, 1, idx, idx, n), 0);
    s_seen_t seen = s_wait_writer(&t, 120);
    double took = pk_clock_monotonic() - t0;
    ck_assert_int_eq(seen.count, 1);
    ck_assert_msg(seen.ok && !pk_ofi_channel_closed(ch),
                  "a transfer to a slow but live reader ended failed after %.1f s", took);
    //  the case stood: the queue outlasted the deadline (the old rule
    //  closed this channel at 2.1 s)
    ck_assert_msg(took > 3.0, "the transfer took %.1f s, not beyond the 2 s deadline: "
                  "the reader was not slow enough to show anything", took);
    kill(child.pid, SIGKILL);
    waitpid(child.pid, NULL, 0);
    pk_ofi_channel_destroy(&ch);
    close(child.to_child);
    close(child.from_child);
    free(idx);
}
END_TEST

//  A stranger with the consumer's address but no session guesses keys:
//  counting up from 1 (what the keys were until issue 34) and random.  The
//  consumer holds a second session's registration too (a consumer of two
//  servers), whose key the counting guesses once found.  Nothing lands in
//  either: the pool keeps its bytes and no immediate is counted.  The
//  control, the blob's own key through the same stranger, lands: the
//  check can fail.
static void
s_progress_target(void *arg)
{
    pk_ofi_channel_progress(C.ch);
    pk_ofi_channel_progress((pk_ofi_channel_t *) arg);
}

START_TEST(test_stranger_lands_nothing)
{
    char err[PK_ERRLEN] = "";
    int rc;
    pk_ofi_channel_t *second = pk_ofi_channel_new(C.ofi, true, &rc, err);
    ck_assert_msg(second != NULL, "second session: %s", err);
    uint8_t *blob;
    size_t len;
    ck_assert_int_eq(pk_ofi_channel_blob(C.ch, &blob, &len), 0);
    ts_stranger_t *x = ts_stranger_new(blob, len, BLOCK, 0x5a, err);
    free(blob);
    ck_assert_msg(x != NULL, "stranger: %s", err);
    const size_t count = 1000;          //  2,000 guesses; the hardening suite tries 10,000
    uint64_t *keys = ts_guessed_keys(count);
    ck_assert_ptr_nonnull(keys);
    int64_t done = ts_stranger_write(x, keys, 2 * count, 8, 60, s_progress_target, second);
    ck_assert_msg(done >= 0, "the stranger's writes did not end within 60 s");
    for (uint32_t b = 0; b < BLOCKS; b++)
        ck_assert_msg(s_block_untouched(b), "block %u changed by a stranger", b);
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, 1), 0);
    ck_assert_uint_eq(pk_ofi_channel_landed(second, 1), 0);
    //  the control: the key the blob announced lands through the same path.
    //  Sent after every guess completed at the stranger (was in the
    //  target's socket buffers), it lands after the target read them.
    uint64_t right = ts_stranger_blob_key(x);
    ck_assert_int_eq(ts_stranger_write(x, &right, 1, 1, 20, s_progress_target, second), 1);
    double deadline = pk_clock_monotonic() + 20;
    while (pk_ofi_channel_landed(C.ch, 1) < 1 && pk_clock_monotonic() < deadline)
        s_progress_target(second);
    ck_assert_uint_eq(pk_ofi_channel_landed(C.ch, 1), 1);
    ck_assert_uint_eq(C.pool[0], 0x5a);
    free(keys);
    ts_stranger_destroy(&x);
    pk_ofi_channel_destroy(&second);
}
END_TEST

int
main(void)
{
    //  Skip (77) only when the machine has no tcp provider at all.
    uint8_t probe[4096];
    int rc;
    char err[PK_ERRLEN] = "";
    pk_ofi_config_t config = { "tcp", "127.0.0.1", 2.0, false };
    pk_ofi_t *ofi = pk_ofi_new(&config, probe, 1, sizeof probe, &rc, err);
    if (!ofi) {
        printf("SKIP: no libfabric tcp provider on 127.0.0.1: %s\n", err);
        return 77;
    }
    pk_ofi_destroy(&ofi);

    Suite *s = suite_create("ofi");
    TCase *tc = tcase_create("tcp");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_signals_given_back);
    tcase_add_test(tc, test_write_1);
    tcase_add_test(tc, test_write_7_scattered);
    tcase_add_test(tc, test_write_1000_contiguous);
    tcase_add_test(tc, test_write_1000_scattered);
    tcase_add_test(tc, test_write_split_over_4mib);
    tcase_add_test(tc, test_wait_fd_wakes_idle_target);
    tcase_add_test(tc, test_writer_sleeps_while_its_writes_wait);
    tcase_add_test(tc, test_describe);
    tcase_add_test(tc, test_channel_costs_kilobytes);
    tcase_add_test(tc, test_remote_index_out_of_range);
    tcase_add_test(tc, test_landed_per_round);
    tcase_add_test(tc, test_marks_check_at_landing);
    tcase_add_test(tc, test_revoked_registration);
    tcase_add_test(tc, test_blob_mismatch_refused);
    tcase_add_test(tc, test_cancel_wait_and_immediate);
    tcase_add_test(tc, test_landed_tag_wrap);
    tcase_add_test(tc, test_check_blob_before_any_channel);
    tcase_add_test(tc, test_registry_and_versions);
    tcase_add_test(tc, test_stranger_lands_nothing);
    suite_add_tcase(s, tc);
    TCase *ts = tcase_create("seam");
    tcase_add_test(ts, test_seam_ofi);
    tcase_add_test(ts, test_seam_mem);
    suite_add_tcase(s, ts);
    TCase *tp = tcase_create("processes");
    tcase_add_checked_fixture(tp, s_setup_writer, s_teardown_writer);
    tcase_add_test(tp, test_two_processes_bytes_land);
    tcase_add_test(tp, test_peer_killed_mid_transfer);
    tcase_add_test(tp, test_slow_reader_not_stalled);
    suite_add_tcase(s, tp);
    return pk_test_run("ofi", s);
}
