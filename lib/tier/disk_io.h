/*  disk_io.h: a batch of positioned reads and writes on one file, done
    together: through io_uring where the kernel allows it, else by
    preadv/pwritev one after the other on the calling thread.

    The disk tier (disk_tier.h) has two threads, a writer and a reader,
    each with its own pk_disk_io_t, and hands each batch whole: the reads
    of one lookup are submitted in one io_uring_submit and complete in
    parallel on a device that has queues.  io_uring_queue_init may be
    refused (a container's seccomp profile, kernel.io_uring_disabled):
    then the fallback, said by pk_disk_io_kind.  $P2PKV_SPILL_IO=pwrite
    forces it (the benchmark's comparison, the tests of the fallback).
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
