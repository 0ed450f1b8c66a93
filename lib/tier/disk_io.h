/*  disk_io.h: a batch of positioned reads and writes on one file, done
    together: by preadv/pwritev one after the other on the calling
    thread, or, with $P2PKV_SPILL_IO=io_uring, submitted in one
    io_uring_submit and waited for together.

    The disk tier (disk_tier.h) has two threads, a writer and a reader,
    each with its own pk_disk_io_t, and hands each batch whole.  preadv
    is the default because it measured no slower on the tier's buffered
    I/O, page cache warm or cold (doc/design.md, "A disk tier under the
    pool"): io_uring completes a cached read inline as preadv does, and
    hands an uncached one to its kernel workers, a thread hand-off more.
    Where io_uring is asked for and io_uring_queue_init is refused (a
    container's seccomp profile, kernel.io_uring_disabled), or a submit
    fails, the batch falls back to preadv: pk_disk_io_kind says which.
*/
#ifndef PK_DISK_IO_H_INCLUDED
#define PK_DISK_IO_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct {
    bool write;
    struct iovec iov[2];        //  header and block
    off_t offset;
    ssize_t res;                //  bytes moved, or a negative errno: set by run
} pk_disk_op_t;

typedef struct _pk_disk_io_t pk_disk_io_t;

/*  For batches of at most depth ops on fd (not owned).  NULL: out of
    memory.  */
pk_disk_io_t *pk_disk_io_new(int fd, unsigned depth);
void pk_disk_io_destroy(pk_disk_io_t **self_p);

/*  "io_uring" or "pwrite".  */
const char *pk_disk_io_kind(const pk_disk_io_t *self);

/*  Does n (at most depth) ops, filling each res; returns when all are
    done.  A short transfer is retried by the fallback; io_uring's is
    reported as -EIO.  */
void pk_disk_io_run(pk_disk_io_t *self, pk_disk_op_t *ops, size_t n);

#endif
