/*  disk_io.c: a batch of reads and writes, io_uring or preadv/pwritev
    (disk_io.h).  */
#include "config.h"
#include "tier/disk_io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

struct _pk_disk_io_t {
    int fd;
    unsigned depth;
    bool uring;
#ifdef HAVE_LIBURING
    struct io_uring ring;
#endif
};

pk_disk_io_t *
pk_disk_io_new(int fd, unsigned depth)
{
    pk_disk_io_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->fd = fd;
    self->depth = depth ? depth : 1;
#ifdef HAVE_LIBURING
    //  preadv/pwritev unless asked: measured no slower, warm or cold, on
    //  buffered I/O (design.md, "A disk tier under the pool")
    const char *want = getenv("P2PKV_SPILL_IO");
    if (want && strcmp(want, "io_uring") == 0)
        self->uring = io_uring_queue_init(self->depth, &self->ring, 0) == 0;
#endif
    return self;
}

void
pk_disk_io_destroy(pk_disk_io_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_disk_io_t *self = *self_p;
#ifdef HAVE_LIBURING
    if (self->uring)
        io_uring_queue_exit(&self->ring);
#endif
    free(self);
    *self_p = NULL;
}

const char *
pk_disk_io_kind(const pk_disk_io_t *self)
{
    return self->uring ? "io_uring" : "pwrite";
}

//  One op by preadv/pwritev, resumed after a short transfer (a signal, a
//  file system that splits large writes).
static void
s_one(int fd, pk_disk_op_t *op)
{
    struct iovec iov[2] = { op->iov[0], op->iov[1] };
    size_t total = iov[0].iov_len + iov[1].iov_len, done = 0;
    int first = 0;
    while (done < total) {
        ssize_t n = op->write ? pwritev(fd, iov + first, 2 - first, op->offset + (off_t) done)
                              : preadv(fd, iov + first, 2 - first, op->offset + (off_t) done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            op->res = n < 0 ? -errno : -EIO;    //  0: read past the end
            return;
        }
        done += (size_t) n;
        while (first < 2 && (size_t) n >= iov[first].iov_len) {
            n -= (ssize_t) iov[first].iov_len;
            iov[first++].iov_len = 0;
        }
        if (first < 2) {
            iov[first].iov_base = (char *) iov[first].iov_base + n;
            iov[first].iov_len -= (size_t) n;
        }
    }
    op->res = (ssize_t) total;
}

#ifdef HAVE_LIBURING
static void
s_uring(pk_disk_io_t *self, pk_disk_op_t *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&self->ring);
        if (!sqe) {                 //  cannot happen below depth; stay correct
            s_one(self->fd, &ops[i]);
            continue;
        }
        if (ops[i].write)
            io_uring_prep_writev(sqe, self->fd, ops[i].iov, 2, (uint64_t) ops[i].offset);
        else
            io_uring_prep_readv(sqe, self->fd, ops[i].iov, 2, (uint64_t) ops[i].offset);
        io_uring_sqe_set_data(sqe, &ops[i]);
        ops[i].res = 1;             //  pending
    }
    int submitted = io_uring_submit(&self->ring);
    size_t pending = 0;
    for (size_t i = 0; i < n; i++)
        pending += ops[i].res == 1;
    if (submitted < 0) {
        //  nothing went: do them here, and from now on (what sits in the
        //  ring is never submitted then)
        self->uring = false;
        for (size_t i = 0; i < n; i++)
            if (ops[i].res == 1)
                s_one(self->fd, &ops[i]);
        return;
    }
    while (pending) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&self->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0)
            break;
        pk_disk_op_t *op = io_uring_cqe_get_data(cqe);
        size_t want = op->iov[0].iov_len + op->iov[1].iov_len;
        op->res = cqe->res < 0 ? cqe->res : (size_t) cqe->res == want ? cqe->res : -EIO;
        io_uring_cqe_seen(&self->ring, cqe);
        pending--;
    }
    for (size_t i = 0; i < n; i++)
        if (ops[i].res == 1)        //  the ring failed under us
            ops[i].res = -EIO;
}
#endif

void
pk_disk_io_run(pk_disk_io_t *self, pk_disk_op_t *ops, size_t n)
{
#ifdef HAVE_LIBURING
    if (self->uring) {
        s_uring(self, ops, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        s_one(self->fd, &ops[i]);
}
