/*  seam.c: one life of the data-plane seam over any transport (seam.h).  */
#include "seam.h"
#include "base/clock.h"
#include "base/err.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define S_BLOCK 4096
#define S_BLOCKS 16
#define S_ROUND 7

typedef struct {
    int count;
    uint64_t tid, landed;
    bool ok;
} s_seen_t;

static void
s_each(void *arg, uint64_t tid, bool ok, uint64_t landed)
{
    s_seen_t *seen = arg;
    *seen = (s_seen_t) { seen->count + 1, tid, landed, ok };
}

//  A pool in a memfd, as the daemon's store keeps it: the descriptor
//  stays open until the fabric is closed (mmap's writer finds it by the
//  mapping's inode when its fabric opens).
static uint8_t *
s_pool(uint8_t fill, int *fd_p)
{
    int fd = *fd_p = memfd_create("test-seam-pool", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, S_BLOCKS * S_BLOCK), 0);
    uint8_t *pool = mmap(NULL, S_BLOCKS * S_BLOCK, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(pool, MAP_FAILED);
    for (size_t i = 0; i < S_BLOCKS * S_BLOCK; i++)
        pool[i] = fill ? fill : (uint8_t) (i / S_BLOCK * 7 + i % S_BLOCK);
    return pool;
}

void
ts_seam_life(const ts_seam_t *seam)
{
    const pk_transport_ops_t *o = seam->ops;
    char err[PK_ERRLEN] = "";
    ck_assert_msg(pk_transport_ops_check(o, PK_TRANSPORT_OPS_SIZE, err) == 0, "%s", err);
    int fds[2];
    uint8_t *pools[2] = { s_pool(0, &fds[0]), s_pool(0xee, &fds[1]) };  //  writer, target
    pk_fabric_t *fab[2];
    pk_channel_t *ch[2];
    for (int i = 0; i < 2; i++) {
        int rc;
        fab[i] = pk_fabric_open(o, &seam->config, pools[i], S_BLOCKS, S_BLOCK, &rc, err);
        ck_assert_msg(fab[i] != NULL, "%s: %d %s", o->name, rc, err);
        ck_assert_ptr_eq(fab[i]->ops, o);
        ck_assert_int_eq(pk_fabric_check_blob(fab[i], (const uint8_t *) "junk", 4, err), -EPROTO);
        pk_fabric_stats_t fs;
        pk_fabric_stats(fab[i], &fs);
        ck_assert_uint_eq(fs.channels_opened, 0);
        ck_assert_uint_eq(fs.blobs_refused, 1);
        ch[i] = pk_channel_new(fab[i], i == 1, &rc, err);
        ck_assert_msg(ch[i] != NULL, "%s: %d %s", o->name, rc, err);
        ck_assert_ptr_eq(ch[i]->ops, o);
    }
    for (int i = 0; i < 2; i++) {
        uint8_t *blob;
        size_t len;
        char named[64] = "";
        ck_assert_int_eq(pk_channel_blob(ch[1 - i], &blob, &len), 0);
        ck_assert_int_eq(o->blob_provider(blob, len, named, sizeof named, err), 0);
        ck_assert_str_eq(named, pk_fabric_provider(fab[1 - i]));
        ck_assert_msg(pk_fabric_check_blob(fab[i], blob, len, err) == 0, "%s", err);
        ck_assert_msg(pk_channel_connect(ch[i], blob, len, err) == 0, "%s", err);
        ck_assert_int_eq(pk_channel_connect(ch[i], blob, len, err), -EISCONN);
        free(blob);
    }

    //  blocks 1 and 2 of the writer to 3 and 4 of the target
    pk_transport_t t = pk_channel_transport(ch[0]);
    uint32_t local[2] = { 1, 2 }, remote[2] = { 3, 4 };
    int64_t tid = t.write_blocks(t.self, S_ROUND, local, remote, 2);
    ck_assert_int_gt(tid, 0);
    if (seam->script)
        seam->script(ch[0], ch[1], (uint64_t) tid, S_ROUND, 2);
    //  where writes carry no immediate, completion at the writer means
    //  delivered and the target counts nothing (transport.h)
    uint64_t want = pk_fabric_has_cq_data(fab[1]) ? 2 : 0;
    s_seen_t seen = { 0 };
    double deadline = pk_clock_monotonic() + 20;
    while (pk_clock_monotonic() < deadline
           && (!seen.count || pk_channel_landed(ch[1], S_ROUND) < want)) {
        pk_channel_progress(ch[0]);
        pk_channel_progress(ch[1]);
        t.poll(t.self, s_each, &seen);
    }
    ck_assert_int_eq(seen.count, 1);
    ck_assert(seen.ok);
    ck_assert_uint_eq(seen.tid, (uint64_t) tid);
    ck_assert_uint_eq(pk_channel_landed(ch[1], S_ROUND), want);
    //  a scripted transport's completion carries no count of its own
    if (!seam->script) {
        ck_assert_uint_eq(seen.landed, 2);
        for (int b = 0; b < 2; b++)
            ck_assert_msg(memcmp(pools[1] + remote[b] * S_BLOCK, pools[0] + local[b] * S_BLOCK,
                                 S_BLOCK) == 0, "%s: block %u", o->name, remote[b]);
        ck_assert_uint_eq(pools[1][0], 0xee);           //  nothing else moved
        ck_assert_uint_eq(pools[1][5 * S_BLOCK], 0xee);
    }
    pk_channel_stats_t cs;
    pk_channel_stats(ch[0], &cs);
    ck_assert_uint_eq(cs.blocks_written, 2);
    ck_assert_uint_eq(cs.transfers, 0);
    pk_channel_stats(ch[1], &cs);
    ck_assert_uint_eq(cs.blocks_landed, want);
    pk_channel_forget(ch[1], S_ROUND);
    ck_assert_uint_eq(pk_channel_landed(ch[1], S_ROUND), 0);
    ck_assert(!pk_channel_closed(ch[0]));
    pk_channel_revoke(ch[1]);

    for (int i = 0; i < 2; i++) {
        pk_channel_close(&ch[i]);
        ck_assert_ptr_null(ch[i]);
        pk_fabric_stats_t fs;
        pk_fabric_stats(fab[i], &fs);
        ck_assert_uint_eq(fs.channels_opened, 1);
        ck_assert_uint_eq(fs.channels_open, 0);
        pk_fabric_close(&fab[i]);
        ck_assert_ptr_null(fab[i]);
        munmap(pools[i], S_BLOCKS * S_BLOCK);
        close(fds[i]);
    }
}
