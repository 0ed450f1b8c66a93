/*  test_mmap.c: the same-host transport (transports/mmap) through the
    seam of base/transport.h: a writer over a pool in a memfd, a target
    over any memory, in one process or two.

    What is held: blocks land byte for byte at their permuted places, in
    one process and from a child process; landed counts per round; the
    target's wait fd wakes when a write arrives; an immediate cancel lands
    nothing read after it; a dead target fails the writer's transfers and
    a silent one stalls them; bad blobs, another host, another user, a
    writer whose pool is not a file, indices out of range, are refused by
    name; the seam's shared life (seam.c) over it, and what the registered
    transports declare of their providers.  Nothing here needs more than
    Linux, so nothing skips.
*/
#include "base/checksum.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/host_id.h"
#include "base/transport.h"
#include "mmap/copier.h"
#include "seam.h"
#include "testutil.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK 4096
#define BLOCKS 2048

static const pk_transport_ops_t *O;

typedef struct {
    uint8_t *pool;
    bool mapped;
    pk_fabric_t *fabric;
    pk_channel_t *ch;
} s_side_t;

static s_side_t W, T;       //  writer (the server) and target (the consumer)

//  The writer's pool in a memfd (as the daemon's store keeps it), block b
//  filled with bytes b*7+k; the target's in plain memory, filled with fill.
static void
s_open(s_side_t *side, bool target, double stall)
{
    char err[PK_ERRLEN] = "";
    int rc;
    size_t len = (size_t) BLOCK * BLOCKS;
    if (target) {
        side->pool = aligned_alloc(4096, len);
        memset(side->pool, 0xee, len);
    }
    else {
        int fd = memfd_create("test-mmap-pool", MFD_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, (off_t) len), 0);
        side->pool = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ck_assert_ptr_ne(side->pool, MAP_FAILED);
        side->mapped = true;
        //  the descriptor stays open, as the store's does: the transport
        //  finds it by the mapping's inode
        for (size_t b = 0; b < BLOCKS; b++)
            for (size_t k = 0; k < BLOCK; k++)
                side->pool[b * BLOCK + k] = (uint8_t) (b * 7 + k);
    }
    pk_fabric_config_t config = { "mmap", NULL, stall, 0, false };
    side->fabric = pk_fabric_open(O, &config, side->pool, BLOCKS, BLOCK, &rc, err);
    ck_assert_msg(side->fabric != NULL, "fabric_open: %d %s", rc, err);
    side->ch = pk_channel_new(side->fabric, target, &rc, err);
    ck_assert_msg(side->ch != NULL, "channel_new: %d %s", rc, err);
}

static void
s_close(s_side_t *side)
{
    pk_channel_close(&side->ch);
    pk_fabric_close(&side->fabric);
    if (side->mapped)
        munmap(side->pool, (size_t) BLOCK * BLOCKS);
    else
        free(side->pool);
    memset(side, 0, sizeof *side);
}

static void
s_connect(pk_channel_t *writer, pk_channel_t *target)
{
    uint8_t *blob;
    size_t len;
    char err[PK_ERRLEN] = "";
    ck_assert_int_eq(pk_channel_blob(target, &blob, &len), 0);
    ck_assert_int_eq(pk_fabric_check_blob(W.fabric, blob, len, err), 0);
    ck_assert_msg(pk_channel_connect(writer, blob, len, err) == 0, "%s", err);
    ck_assert_int_eq(pk_channel_connect(writer, blob, len, err), -EISCONN);
    free(blob);
}

static void
s_setup(void)
{
    O = pk_transport_find("mmap");
    ck_assert_ptr_nonnull(O);
    s_open(&W, false, 0.5);
    s_open(&T, true, 0.5);
    s_connect(W.ch, T.ch);
}

static void
s_teardown(void)
{
    s_close(&W);
    s_close(&T);
}

typedef struct {
    uint64_t tid, landed;
    bool ok;
    int count;
} s_seen_t;

static void
s_each(void *arg, uint64_t tid, bool ok, uint64_t landed)
{
    s_seen_t *seen = arg;
    *seen = (s_seen_t) { tid, landed, ok, seen->count + 1 };
}

//  Progresses both sides (the target when progress_target) until the
//  writer reports a transfer, for 20 s.
static s_seen_t
s_wait(bool progress_target)
{
    s_seen_t seen = { 0 };
    pk_transport_t t = pk_channel_transport(W.ch);
    double deadline = pk_clock_monotonic() + 20;
    while (!seen.count && pk_clock_monotonic() < deadline) {
        if (progress_target)
            pk_channel_progress(T.ch);
        pk_channel_progress(W.ch);
        t.poll(t.self, s_each, &seen);
    }
    return seen;
}

static bool
s_block_is(const uint8_t *pool, uint32_t at, uint32_t from)
{
    for (size_t k = 0; k < BLOCK; k++)
        if (pool[(size_t) at * BLOCK + k] != (uint8_t) (from * 7 + k))
            return false;
    return true;
}

//  n blocks, block i of the writer to (i*53+11) % BLOCKS of the target.
static int64_t
s_write_permuted(pk_channel_t *ch, uint64_t round, uint32_t n)
{
    uint32_t *local = malloc(n * sizeof *local), *remote = malloc(n * sizeof *remote);
    for (uint32_t i = 0; i < n; i++) {
        local[i] = i;
        remote[i] = (i * 53 + 11) % BLOCKS;
    }
    pk_transport_t t = pk_channel_transport(ch);
    int64_t tid = t.write_blocks(t.self, round, local, remote, n);
    free(local);
    free(remote);
    return tid;
}

START_TEST(test_blocks_land_in_place)
{
    //  2,000 blocks: more than one message of pairs
    int64_t tid = s_write_permuted(W.ch, 7, 2000);
    ck_assert_int_gt(tid, 0);
    s_seen_t seen = s_wait(true);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(seen.ok);
    ck_assert_uint_eq(seen.tid, (uint64_t) tid);
    ck_assert_uint_eq(seen.landed, 2000);
    ck_assert_uint_eq(pk_channel_landed(T.ch, 7), 2000);
    ck_assert_uint_eq(pk_channel_landed(T.ch, 8), 0);
    for (uint32_t i = 0; i < 2000; i++)
        ck_assert_msg(s_block_is(T.pool, (i * 53 + 11) % BLOCKS, i), "block %u", i);
    pk_channel_stats_t st;
    pk_channel_stats(W.ch, &st);
    ck_assert_uint_eq(st.blocks_written, 2000);
    ck_assert_uint_eq(st.transfers, 0);
    pk_channel_stats(T.ch, &st);
    ck_assert_uint_eq(st.blocks_landed, 2000);
    pk_channel_forget(T.ch, 7);
    ck_assert_uint_eq(pk_channel_landed(T.ch, 7), 0);
    ck_assert(!pk_channel_closed(W.ch));
    ck_assert(!pk_channel_closed(T.ch));
}
END_TEST

//  The target's wait fd (the one its owner watches from the start) is
//  readable when the writer connects and when a write arrives.
//  The consumer's check in the copy (channel_expect): blocks expected with
//  their right checksums copy as OK, one expected with a wrong one as
//  CORRUPT, one not expected is left as it was; verdicts are read once.  64 blocks
//  of 4 KiB (256 KiB, under PK_COPIER_PARALLEL_MIN: the caller's thread)
//  and 512 (2 MiB: shared with the helpers).
START_TEST(test_expect_checks_in_the_copy)
{
    for (int round = 1; round <= 2; round++) {
        uint32_t n = round == 1 ? 64 : 512;
        uint32_t *local = malloc(n * sizeof *local), *remote = malloc(n * sizeof *remote);
        uint64_t *sums = malloc(n * sizeof *sums);
        uint8_t *verdict = malloc(n);
        for (uint32_t i = 0; i < n; i++) {
            local[i] = i;
            remote[i] = 1000 + i;
            sums[i] = pk_checksum(W.pool + (size_t) i * BLOCK, BLOCK);
        }
        sums[3] ^= 1;                   //  block 3 will not match
        //  block n-1 is not expected
        ck_assert_int_eq(pk_channel_expect(T.ch, remote, sums, n - 1), 0);
        pk_transport_t t = pk_channel_transport(W.ch);
        ck_assert_int_gt(t.write_blocks(t.self, (uint64_t) round, local, remote, n), 0);
        s_seen_t seen = s_wait(true);
        ck_assert(seen.ok);
        ck_assert_uint_eq(pk_channel_landed(T.ch, (uint64_t) round), n);
        //  a block not checked keeps what the caller had there (0xaa)
        memset(verdict, 0xaa, n);
        pk_channel_verdicts(T.ch, remote, verdict, n);
        for (uint32_t i = 0; i < n; i++)
            ck_assert_msg(verdict[i] == (i == 3 ? PK_VERDICT_CORRUPT
                                         : i == n - 1 ? 0xaa : PK_VERDICT_OK),
                          "round %d block %u: verdict %u", round, i, verdict[i]);
        //  read once: forgotten
        memset(verdict, 0xaa, n);
        pk_channel_verdicts(T.ch, remote, verdict, n);
        for (uint32_t i = 0; i < n; i++)
            ck_assert_uint_eq(verdict[i], 0xaa);
        free(local);
        free(remote);
        free(sums);
        free(verdict);
    }
}
END_TEST

START_TEST(test_wait_fd_wakes_target)
{
    int fd = pk_channel_wait_fd(T.ch);
    ck_assert_int_ge(fd, 0);
    struct pollfd p = { fd, POLLIN, 0 };
    ck_assert_int_eq(poll(&p, 1, 5000), 1);     //  the writer's hello
    while (pk_channel_progress(T.ch) > 0)
        ;
    ck_assert(pk_channel_trywait(T.ch));
    ck_assert_int_eq(pk_channel_wait_fd(T.ch), fd);
    p.revents = 0;
    ck_assert_int_eq(poll(&p, 1, 0), 0);
    ck_assert_int_gt(s_write_permuted(W.ch, 1, 4), 0);
    ck_assert_int_eq(poll(&p, 1, 5000), 1);
    ck_assert_int_gt(pk_channel_progress(T.ch), 0);
    ck_assert_uint_eq(pk_channel_landed(T.ch, 1), 4);
}
END_TEST

//  Cut off: writes sent but not yet copied when the writer cancels them
//  at once land nothing, and the writer's channel is closed.
START_TEST(test_cancel_immediate_lands_nothing)
{
    int64_t tid = s_write_permuted(W.ch, 3, 64);
    ck_assert_int_gt(tid, 0);
    pk_transport_t t = pk_channel_transport(W.ch);
    uint64_t id = (uint64_t) tid;
    ck_assert_uint_eq(t.cancel(t.self, &id, 1, PK_CANCEL_IMMEDIATE, &id), 0);
    ck_assert(pk_channel_closed(W.ch));
    for (int i = 0; i < 20; i++)
        pk_channel_progress(T.ch);
    ck_assert_uint_eq(pk_channel_landed(T.ch, 3), 0);
    for (uint32_t i = 0; i < 64; i++)
        ck_assert_uint_eq(T.pool[(size_t) ((i * 53 + 11) % BLOCKS) * BLOCK], 0xee);
    ck_assert(pk_channel_closed(T.ch));
    //  released: never reported; later writes refused
    s_seen_t seen = { 0 };
    t.poll(t.self, s_each, &seen);
    ck_assert_int_eq(seen.count, 0);
    ck_assert_int_lt(s_write_permuted(W.ch, 4, 1), 0);
}
END_TEST

//  A wait-mode cancel of a write whose copy may run keeps it, reported
//  once done, with what landed.
START_TEST(test_cancel_wait_reports_when_done)
{
    int64_t tid = s_write_permuted(W.ch, 5, 16);
    pk_transport_t t = pk_channel_transport(W.ch);
    uint64_t id = (uint64_t) tid, still = 0;
    ck_assert_uint_eq(t.cancel(t.self, &id, 1, PK_CANCEL_WAIT, &still), 1);
    ck_assert_uint_eq(still, id);
    s_seen_t seen = s_wait(true);
    ck_assert_int_eq(seen.count, 1);
    ck_assert_uint_eq(seen.landed, 16);
}
END_TEST

//  A target that never copies: the writer's transfer fails after the
//  stall timeout (0.5 s here) and its channel closes.
START_TEST(test_silent_target_stalls)
{
    ck_assert_int_gt(s_write_permuted(W.ch, 2, 8), 0);
    s_seen_t seen = s_wait(false);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(!seen.ok);
    ck_assert(pk_channel_closed(W.ch));
}
END_TEST

//  Indices out of range: the writer's own refused at once; the target's
//  fail the transfer, nothing of it counted past the bad pair.
START_TEST(test_indices_out_of_range)
{
    pk_transport_t t = pk_channel_transport(W.ch);
    uint32_t local[2] = { 0, BLOCKS }, remote[2] = { 0, 1 };
    ck_assert_int_eq(t.write_blocks(t.self, 1, local, remote, 2), -EINVAL);
    local[1] = 1;
    remote[0] = BLOCKS;
    ck_assert_int_gt(t.write_blocks(t.self, 1, local, remote, 2), 0);
    s_seen_t seen = s_wait(true);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(!seen.ok);
    ck_assert_uint_eq(seen.landed, 0);
}
END_TEST

//  What check_blob refuses, by name, before anything is built.
START_TEST(test_blobs_refused)
{
    char err[PK_ERRLEN] = "";
    ck_assert_int_eq(pk_fabric_check_blob(W.fabric, (const uint8_t *) "junk", 4, err), -EPROTO);
    ck_assert_msg(strstr(err, "mmap blob"), "%s", err);
    uint8_t *blob;
    size_t len;
    ck_assert_int_eq(pk_channel_blob(T.ch, &blob, &len), 0);
    //  layout of pk_mmap_blob_t (transports/mmap/mmap_priv.h): 4 magic, version,
    //  target, 2 zero, pid, uid, block_len, host[], sock[]
    uint8_t *bad = malloc(len);
    memcpy(bad, blob, len);
    bad[4] = 9;
    ck_assert_int_eq(pk_fabric_check_blob(W.fabric, bad, len, err), -EPROTO);
    ck_assert_msg(strstr(err, "version 9"), "%s", err);
    memcpy(bad, blob, len);
    bad[24] = 'X';                              //  another boot id
    ck_assert_int_eq(pk_fabric_check_blob(W.fabric, bad, len, err), -EPROTO);
    ck_assert_msg(strstr(err, "same host"), "%s", err);
    memcpy(bad, blob, len);
    uint32_t uid = (uint32_t) getuid() + 1;
    memcpy(bad + 12, &uid, 4);
    ck_assert_int_ne(pk_fabric_check_blob(W.fabric, bad, len, err), 0);
    ck_assert_msg(strstr(err, "own user"), "%s", err);
    memcpy(bad, blob, len);
    uint64_t bl = 2 * BLOCK;
    memcpy(bad + 16, &bl, 8);
    ck_assert_int_eq(pk_fabric_check_blob(W.fabric, bad, len, err), -EPROTO);
    ck_assert_msg(strstr(err, "block_len 8192"), "%s", err);
    ck_assert_int_eq(pk_fabric_check_blob(W.fabric, blob, len - 1, err), -EPROTO);
    char provider[16];
    ck_assert_int_eq(O->blob_provider(blob, len, provider, sizeof provider, err), 0);
    ck_assert_str_eq(provider, "mmap");
    free(bad);
    free(blob);
    pk_fabric_stats_t fs;
    pk_fabric_stats(W.fabric, &fs);
    ck_assert_uint_eq(fs.blobs_refused, 6);
    ck_assert_uint_eq(fs.channels_open, 1);
}
END_TEST

//  A blob naming a socket whose listener never accepts and whose backlog
//  is full: the writer's connect is refused at once, never held; once
//  the listener is gone, refused too.
START_TEST(test_busy_listener_refused)
{
    int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    const char name[] = "p2pkv-mmap-test-busy";
    memcpy(sa.sun_path + 1, name, sizeof name - 1);
    socklen_t salen = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + sizeof name);
    ck_assert_int_eq(bind(l, (struct sockaddr *) &sa, salen), 0);
    ck_assert_int_eq(listen(l, 0), 0);
    int filler[8], nfill = 0;
    for (; nfill < 8; nfill++) {
        filler[nfill] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (connect(filler[nfill], (struct sockaddr *) &sa, salen) != 0) {
            close(filler[nfill]);
            break;
        }
    }
    ck_assert_int_lt(nfill, 8);             //  the backlog filled
    uint8_t *blob;
    size_t len;
    ck_assert_int_eq(pk_channel_blob(T.ch, &blob, &len), 0);
    //  pk_mmap_blob_t: the socket's name at 24 + PK_HOST_ID_LEN, after its NUL
    memset(blob + 24 + PK_HOST_ID_LEN, 0, 48);
    memcpy(blob + 24 + PK_HOST_ID_LEN + 1, name, sizeof name - 1);
    int rc;
    char err[PK_ERRLEN] = "";
    pk_channel_t *ch = pk_channel_new(W.fabric, false, &rc, err);
    //  held in a blocking connect, this would never return (Check's
    //  timeout would end the test)
    ck_assert_int_eq(pk_channel_connect(ch, blob, len, err), -EPROTO);
    ck_assert_msg(strstr(err, "the consumer's socket"), "%s", err);
    pk_channel_close(&ch);
    for (int i = 0; i < nfill; i++)
        close(filler[i]);
    close(l);
    //  and a socket nobody listens on any more: refused, named
    ch = pk_channel_new(W.fabric, false, &rc, err);
    ck_assert_int_eq(pk_channel_connect(ch, blob, len, err), -EPROTO);
    ck_assert_msg(strstr(err, "the consumer's socket: Connection refused"), "%s", err);
    pk_channel_close(&ch);
    free(blob);
}
END_TEST

//  A writer whose pool is plain memory has nothing to hand a consumer:
//  its channel is refused, naming why; a target's is fine.
START_TEST(test_writer_needs_a_file_pool)
{
    uint8_t *pool = aligned_alloc(4096, 16 * BLOCK);
    char err[PK_ERRLEN] = "";
    int rc;
    pk_fabric_config_t config = { "mmap", NULL, 1.0, 0, false };
    pk_fabric_t *f = pk_fabric_open(O, &config, pool, 16, BLOCK, &rc, err);
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_null(pk_channel_new(f, false, &rc, err));
    ck_assert_int_eq(rc, -EPROTO);
    ck_assert_msg(strstr(err, "not a shared mapping"), "%s", err);
    pk_channel_t *ch = pk_channel_new(f, true, &rc, err);
    ck_assert_ptr_nonnull(ch);
    pk_channel_close(&ch);
    pk_fabric_close(&f);
    config.provider = "tcp";
    ck_assert_ptr_null(pk_fabric_open(O, &config, pool, 16, BLOCK, &rc, err));
    ck_assert_msg(strstr(err, "\"tcp\" is not available"), "%s", err);
    free(pool);
    ck_assert_ptr_eq(pk_transport_for("mmap"), O);
    ck_assert_ptr_eq(pk_transport_for("tcp"), pk_transport_find(NULL));
    ck_assert_ptr_eq(pk_transport_for(NULL), pk_transport_find(NULL));
}
END_TEST

//  The seam's life every transport passes (seam.c), over mmap.
START_TEST(test_seam_mmap)
{
    ts_seam_life(&(ts_seam_t) { O, { "mmap", NULL, 2.0, 0, false }, NULL });
}
END_TEST

//  What the transports declare of their providers, which the daemon's
//  auto and the client's choice read (never a name of their own): auto
//  tries mmap, then shm, then libfabric's own order; mmap and shm reach
//  this host only, any other name is the default's and reaches further.
START_TEST(test_providers_declared)
{
    const pk_provider_t *p = pk_transport_auto(0);
    ck_assert_str_eq(p->name, "mmap");
    ck_assert(p->same_host);
    ck_assert_ptr_eq(pk_transport_for(p->name), O);
    p = pk_transport_auto(1);
    ck_assert_str_eq(p->name, "shm");
    ck_assert(p->same_host);
    ck_assert_ptr_eq(pk_transport_for(p->name), pk_transport_find("ofi"));
    p = pk_transport_auto(2);
    ck_assert_ptr_null(p->name);
    ck_assert(!p->same_host);
    ck_assert_ptr_null(pk_transport_auto(3));
    ck_assert_ptr_eq(pk_transport_provider(NULL), p);
    const char *network[] = { "tcp", "tcp;ofi_rxm", "verbs", "efa", "nope" };
    for (size_t i = 0; i < sizeof network / sizeof network[0]; i++) {
        ck_assert_ptr_eq(pk_transport_provider(network[i]), p);
        ck_assert_ptr_eq(pk_transport_for(network[i]), pk_transport_find(NULL));
    }
    ck_assert(pk_transport_provider("mmap")->same_host);
    ck_assert(pk_transport_provider("shm")->same_host);
    //  every row of a registered table is found as itself
    const pk_transport_ops_t *tables[] = { O, pk_transport_find("ofi") };
    for (size_t t = 0; t < 2; t++)
        for (size_t k = 0; k < tables[t]->nproviders; k++)
            ck_assert_ptr_eq(pk_transport_provider(tables[t]->providers[k].name),
                             &tables[t]->providers[k]);
}
END_TEST

//  Two processes: a child target sends its blob up a pipe, copies until
//  round 1 landed n blocks, and checks every byte (exit 0) -- or, with
//  die, exits as soon as the writer has connected.
static pid_t
s_child(int *blob_fd, uint32_t n, bool die)
{
    int up[2];
    ck_assert_int_eq(pipe(up), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(up[0]);
        s_side_t side = { 0 };
        s_open(&side, true, 2.0);
        if (pk_channel_send_blob_fd(side.ch, up[1]) != 0)
            _exit(3);
        double deadline = pk_clock_monotonic() + 20;
        while (pk_clock_monotonic() < deadline) {
            if (pk_channel_progress(side.ch) > 0 && die)
                _exit(0);                   //  the writer's hello read: die now
            if (!die && pk_channel_landed(side.ch, 1) >= n) {
                for (uint32_t i = 0; i < n; i++)
                    if (!s_block_is(side.pool, (i * 53 + 11) % BLOCKS, i))
                        _exit(1);
                _exit(0);
            }
        }
        _exit(2);
    }
    close(up[1]);
    *blob_fd = up[0];
    return pid;
}

static void
s_connect_fd(pk_channel_t *ch, int fd)
{
    uint32_t len;
    ck_assert_int_eq(read(fd, &len, 4), 4);
    uint8_t *blob = malloc(len);
    ck_assert_int_eq(read(fd, blob, len), (ssize_t) len);
    char err[PK_ERRLEN] = "";
    ck_assert_msg(pk_channel_connect(ch, blob, len, err) == 0, "%s", err);
    free(blob);
    close(fd);
}

START_TEST(test_two_processes_bytes_land)
{
    int fd;
    pid_t pid = s_child(&fd, 1000, false);
    pk_channel_close(&W.ch);
    int rc;
    char err[PK_ERRLEN];
    W.ch = pk_channel_new(W.fabric, false, &rc, err);
    s_connect_fd(W.ch, fd);
    ck_assert_int_gt(s_write_permuted(W.ch, 1, 1000), 0);
    s_seen_t seen = s_wait(false);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(seen.ok);
    ck_assert_uint_eq(seen.landed, 1000);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}
END_TEST

START_TEST(test_dead_target_fails_transfers)
{
    int fd;
    pid_t pid = s_child(&fd, 0, true);
    pk_channel_close(&W.ch);
    int rc;
    char err[PK_ERRLEN];
    W.ch = pk_channel_new(W.fabric, false, &rc, err);
    s_connect_fd(W.ch, fd);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    int64_t tid = s_write_permuted(W.ch, 1, 8);
    if (tid > 0) {
        s_seen_t seen = s_wait(false);
        ck_assert_int_eq(seen.count, 1);
        ck_assert(!seen.ok);
    }
    else
        ck_assert_int_eq(tid, -ENOTCONN);   //  the end of file was read first
    ck_assert(pk_channel_closed(W.ch));
}
END_TEST

//  The copier alone: a large batch shared with its helpers (where the
//  machine has a second core) lands every block in place; with the
//  cut-off flag set, none lands; a small batch stays on the caller.
START_TEST(test_copier_shares_and_cuts_off)
{
    pk_copier_t *c = pk_copier_new();
    ck_assert_ptr_nonnull(c);
    uint8_t *src = W.pool, *dst = T.pool;
    pk_copy_pair_t pairs[BLOCKS];
    for (uint32_t i = 0; i < BLOCKS; i++)
        pairs[i] = (pk_copy_pair_t) { i, (i * 53 + 11) % BLOCKS };
    _Atomic uint32_t closed = 0;
    ck_assert_uint_eq(pk_copier_run(c, dst, src, pairs, 4, BLOCK, &closed, NULL), 4);
    ck_assert_uint_eq(pk_copier_helpers(c), 0);             //  16 KiB: alone
    ck_assert_uint_eq(pk_copier_run(c, dst, src, pairs, BLOCKS, BLOCK, &closed, NULL), BLOCKS);
    if (sysconf(_SC_NPROCESSORS_ONLN) > 1)
        ck_assert_uint_ge(pk_copier_helpers(c), 1);
    for (uint32_t i = 0; i < BLOCKS; i++)
        ck_assert_msg(s_block_is(dst, (i * 53 + 11) % BLOCKS, i), "block %u", i);
    atomic_store(&closed, 1);
    ck_assert_uint_eq(pk_copier_run(c, dst, src, pairs, BLOCKS, BLOCK, &closed, NULL), 0);
    ck_assert_uint_eq(pk_copier_run(c, dst, src, pairs, 1, BLOCK, &closed, NULL), 0);
    pk_copier_destroy(&c);
    ck_assert_ptr_null(c);
}
END_TEST

//  --------------------------------------------------------------------------
//  Lending (capability lend, protocol.md section 7): the server opens a
//  transfer and sends nothing; the consumer copies the blocks its answer
//  named and reports them on the socket.

//  Lends n blocks for round: block i of the writer to (i*53+11) % BLOCKS.
static int64_t
s_lend_permuted(uint64_t round, uint32_t n, uint32_t *local, uint32_t *remote)
{
    for (uint32_t i = 0; i < n; i++) {
        local[i] = i;
        remote[i] = (i * 53 + 11) % BLOCKS;
    }
    pk_transport_t t = pk_channel_transport(W.ch);
    ck_assert_ptr_nonnull(t.lend);
    return t.lend(t.self, round, local, remote, n);
}

//  Progresses the writer a while: what it reports meanwhile.
static s_seen_t
s_writer_only(int times)
{
    s_seen_t seen = { 0 };
    pk_transport_t t = pk_channel_transport(W.ch);
    for (int i = 0; i < times; i++) {
        pk_channel_progress(W.ch);
        t.poll(t.self, s_each, &seen);
    }
    return seen;
}

//  The transfer stays open (its blocks pinned above the seam) until the
//  consumer's copy reports; then it ends with what was copied, every block
//  at its place, counted for the round and checked in the copy.
START_TEST(test_lend_reports_when_copied)
{
    uint32_t local[16], remote[16];
    int64_t tid = s_lend_permuted(9, 16, local, remote);
    ck_assert_int_gt(tid, 0);
    ck_assert_int_eq(s_writer_only(50).count, 0);
    ck_assert(pk_channel_lends(T.ch));
    uint64_t sums[16];
    for (uint32_t i = 0; i < 16; i++)
        sums[i] = pk_checksum(W.pool + (size_t) local[i] * BLOCK, BLOCK);
    sums[3] ^= 1;                   //  one announced wrong: found in the copy
    ck_assert_int_eq(pk_channel_expect(T.ch, remote, sums, 16), 0);
    ck_assert_int_eq(pk_channel_lend_copy(T.ch, 9, local, remote, 16), 16);
    ck_assert_uint_eq(pk_channel_landed(T.ch, 9), 16);
    for (uint32_t i = 0; i < 16; i++)
        ck_assert_msg(s_block_is(T.pool, remote[i], local[i]), "block %u", i);
    uint8_t verdict[16] = { 0 };
    pk_channel_verdicts(T.ch, remote, verdict, 16);
    for (uint32_t i = 0; i < 16; i++)
        ck_assert_int_eq(verdict[i], i == 3 ? PK_VERDICT_CORRUPT : PK_VERDICT_OK);
    s_seen_t seen = s_wait(false);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(seen.ok);
    ck_assert_uint_eq(seen.tid, (uint64_t) tid);
    ck_assert_uint_eq(seen.landed, 16);
    ck_assert(!pk_channel_closed(W.ch));
    //  a source or destination outside its pool: refused, nothing copied
    uint32_t far = BLOCKS;
    ck_assert_int_eq(pk_channel_lend_copy(T.ch, 10, &far, remote, 1), -EINVAL);
    ck_assert_int_eq(pk_channel_lend_copy(T.ch, 10, local, &far, 1), -EINVAL);
    ck_assert_uint_eq(pk_channel_landed(T.ch, 10), 0);
}
END_TEST

//  A wait-mode cancel (an abort, a failed round) keeps a lent transfer:
//  the consumer may be copying its blocks, so it is reported only once
//  the consumer said so.
START_TEST(test_lend_cancel_wait_holds_until_report)
{
    uint32_t local[8], remote[8];
    int64_t tid = s_lend_permuted(11, 8, local, remote);
    pk_transport_t t = pk_channel_transport(W.ch);
    uint64_t id = (uint64_t) tid, still = 0;
    ck_assert_uint_eq(t.cancel(t.self, &id, 1, PK_CANCEL_WAIT, &still), 1);
    ck_assert_uint_eq(still, id);
    ck_assert_int_eq(s_writer_only(50).count, 0);
    ck_assert_int_eq(pk_channel_lend_copy(T.ch, 11, local, remote, 8), 8);
    s_seen_t seen = s_wait(false);
    ck_assert_int_eq(seen.count, 1);
    ck_assert_uint_eq(seen.landed, 8);
}
END_TEST

//  Cut off (the server's immediate cancel sets the control page's flag)
//  before the consumer copies: nothing it copies afterwards is counted,
//  and not a byte is written.
START_TEST(test_lend_cut_off_counts_nothing)
{
    uint32_t local[8], remote[8];
    int64_t tid = s_lend_permuted(12, 8, local, remote);
    //  the consumer holds the pool's mapping already (its hello read): the
    //  flag alone stands between the cut-off and its copy
    for (int i = 0; i < 20; i++)
        pk_channel_progress(T.ch);
    pk_transport_t t = pk_channel_transport(W.ch);
    uint64_t id = (uint64_t) tid;
    ck_assert_uint_eq(t.cancel(t.self, &id, 1, PK_CANCEL_IMMEDIATE, &id), 0);
    ck_assert(pk_channel_closed(W.ch));
    ck_assert_int_le(pk_channel_lend_copy(T.ch, 12, local, remote, 8), 0);
    ck_assert_uint_eq(pk_channel_landed(T.ch, 12), 0);
    for (uint32_t i = 0; i < 8; i++)
        ck_assert_uint_eq(T.pool[(size_t) remote[i] * BLOCK], 0xee);
    ck_assert_int_lt(t.lend(t.self, 13, local, remote, 1), 0);
}
END_TEST

typedef struct {
    uint32_t *local, *remote;
    uint32_t n;
    int64_t got;
} s_copy_job_t;

static void *
s_copy_thread(void *arg)
{
    s_copy_job_t *j = arg;
    j->got = pk_channel_lend_copy(T.ch, 14, j->local, j->remote, j->n);
    return NULL;
}

//  Cut off while the consumer copies (a thread copies every block of the
//  pool, the flag set once the first landed): what it counts is what it
//  reports, and the server's transfer ends failed with that count.
START_TEST(test_lend_cut_off_mid_copy)
{
    static uint32_t local[BLOCKS], remote[BLOCKS];
    int64_t tid = s_lend_permuted(14, BLOCKS, local, remote);
    ck_assert_int_gt(tid, 0);
    s_copy_job_t job = { local, remote, BLOCKS, -1 };
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, s_copy_thread, &job), 0);
    volatile uint8_t *first = T.pool + (size_t) remote[0] * BLOCK;
    double deadline = pk_clock_monotonic() + 60;
    while (*first == 0xee && pk_clock_monotonic() < deadline)
        ;
    pk_transport_t t = pk_channel_transport(W.ch);
    uint64_t id = (uint64_t) tid, still;
    ck_assert_uint_eq(t.cancel(t.self, &id, 1, PK_CANCEL_IMMEDIATE, &still), 0);
    pthread_join(th, NULL);
    ck_assert_int_ge(job.got, 0);
    ck_assert_int_le(job.got, BLOCKS);
    ck_assert_uint_eq(pk_channel_landed(T.ch, 14), (uint64_t) job.got);
    //  released by the immediate cancel: never reported, whatever came
    s_seen_t seen = s_writer_only(20);
    ck_assert_int_eq(seen.count, 0);
}
END_TEST

//  A consumer that never reports: the stall timeout (0.5 s here) ends the
//  lent transfer, failed, so its blocks are not pinned for ever, and the
//  channel closes (the flag: a copy after it lands nothing).
START_TEST(test_lend_never_reported_stalls)
{
    uint32_t local[4], remote[4];
    ck_assert_int_gt(s_lend_permuted(15, 4, local, remote), 0);
    s_seen_t seen = s_wait(false);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(!seen.ok);
    ck_assert_uint_eq(seen.landed, 0);
    ck_assert(pk_channel_closed(W.ch));
    ck_assert_int_le(pk_channel_lend_copy(T.ch, 15, local, remote, 4), 0);
    ck_assert_uint_eq(pk_channel_landed(T.ch, 15), 0);
}
END_TEST

//  A report of more blocks than the round lent is not believed: the
//  channel closes and the transfer fails.
START_TEST(test_lend_overstated_report_closes)
{
    uint32_t local[4], remote[4];
    int64_t tid = s_lend_permuted(16, 2, local, remote);
    ck_assert_int_gt(tid, 0);
    local[2] = 2, local[3] = 3, remote[2] = 100, remote[3] = 101;
    ck_assert_int_eq(pk_channel_lend_copy(T.ch, 16, local, remote, 4), 4);
    s_seen_t seen = s_wait(false);
    ck_assert_int_eq(seen.count, 1);
    ck_assert(!seen.ok);
    ck_assert(pk_channel_closed(W.ch));
}
END_TEST

//  A child forked after the helpers started has none of them: its
//  copier starts its own, copies every block, and is destroyed cleanly.
START_TEST(test_copier_after_fork)
{
    pk_copier_t *c = pk_copier_new();
    pk_copy_pair_t pairs[BLOCKS];
    for (uint32_t i = 0; i < BLOCKS; i++)
        pairs[i] = (pk_copy_pair_t) { i, (i * 53 + 11) % BLOCKS };
    _Atomic uint32_t closed = 0;
    ck_assert_uint_eq(pk_copier_run(c, T.pool, W.pool, pairs, BLOCKS, BLOCK, &closed, NULL), BLOCKS);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        memset(T.pool, 0, (size_t) BLOCK * BLOCKS);
        size_t landed = pk_copier_run(c, T.pool, W.pool, pairs, BLOCKS, BLOCK, &closed, NULL);
        bool right = landed == BLOCKS;
        for (uint32_t i = 0; right && i < BLOCKS; i++)
            right = s_block_is(T.pool, (i * 53 + 11) % BLOCKS, i);
        pk_copier_destroy(&c);
        _exit(right ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    pk_copier_destroy(&c);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("mmap");
    TCase *tc = tcase_create("mmap");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_blocks_land_in_place);
    tcase_add_test(tc, test_expect_checks_in_the_copy);
    tcase_add_test(tc, test_wait_fd_wakes_target);
    tcase_add_test(tc, test_cancel_immediate_lands_nothing);
    tcase_add_test(tc, test_cancel_wait_reports_when_done);
    tcase_add_test(tc, test_silent_target_stalls);
    tcase_add_test(tc, test_indices_out_of_range);
    tcase_add_test(tc, test_blobs_refused);
    tcase_add_test(tc, test_writer_needs_a_file_pool);
    tcase_add_test(tc, test_providers_declared);
    tcase_add_test(tc, test_seam_mmap);
    tcase_add_test(tc, test_busy_listener_refused);
    tcase_add_test(tc, test_two_processes_bytes_land);
    tcase_add_test(tc, test_dead_target_fails_transfers);
    tcase_add_test(tc, test_copier_shares_and_cuts_off);
    tcase_add_test(tc, test_copier_after_fork);
    tcase_add_test(tc, test_lend_reports_when_copied);
    tcase_add_test(tc, test_lend_cancel_wait_holds_until_report);
    tcase_add_test(tc, test_lend_cut_off_counts_nothing);
    tcase_add_test(tc, test_lend_cut_off_mid_copy);
    tcase_add_test(tc, test_lend_never_reported_stalls);
    tcase_add_test(tc, test_lend_overstated_report_closes);
    suite_add_tcase(s, tc);
    return pk_test_run("mmap", s);
}
