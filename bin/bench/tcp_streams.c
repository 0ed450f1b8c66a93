/*  tcp_streams.c: the data plane's floor: bare TCP streams over
    127.0.0.1, a sender and a receiver process each, blocking send() and
    recv() of a block (at most 2 MiB) at a time, as many at once as
    fetch has consumers (crowd.c times them together).

    What fetch's rows are set beside to say where a crowd's loss is: the
    kernel's (loopback TCP on two cores moves 64 streams at least as fast
    as one: design.md, "Where the end-to-end time goes") or user space's
    (libfabric's tcp provider is progressed by the processes themselves,
    so each wake of 64 readers and writers costs system calls a blocking
    recv does not).  Both ends rotate over `batch` blocks, as a fetch's
    pools do, up to 2 MiB (S_BUF).
*/
#include "bench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    uint64_t block;
    uint32_t batch;
} s_arg_t;

//  Each end rotates over at most 2 MiB.  With 16 MiB or more per end, 16
//  to 64 streams at once crawled here at 0.07-0.11 GB/s against 2-3 for
//  one or eight (every stream alike, uniformly slow: closed receive
//  windows and the senders' probes and retransmissions, 568 in one run by
//  nstat, waiting out the kernel's timers), whatever the call's size; a
//  fetch's pools are that large and its streams do not crawl, so the
//  floor is taken where the kernel does not.
#define S_BUF(block, batch) ((block) * (batch) < (2u << 20) ? (block) * (batch) : (uint64_t) (2u << 20))

//  Bytes per send and recv: a block, at most the buffer, as a bare
//  program would move it.  At 1 MiB blocks that is the kernel's better
//  figure: one stream 4.1-5.8 GB/s and 64 streams 3.4-4.2 together (two
//  runs), against 3.7 and 2.2-2.4 with 64 KiB calls (a recv takes all
//  that has arrived, up to its size, so a crowd whose readers wait longer
//  for a core wakes less per byte).
#define S_IO(block, batch) ((block) < S_BUF(block, batch) ? (block) : S_BUF(block, batch))

//  The next offset of a call of io bytes in a buffer of size: from the
//  start again where less than io is left (a size need not be a multiple
//  of io: 2 MiB of 100 KiB blocks).
static uint64_t
s_next(uint64_t off, uint64_t io, uint64_t size)
{
    return size - off < io ? 0 : off;
}

typedef struct {
    int fd;
    pid_t sender;
    uint8_t *buf;
    uint64_t io, off, size;
} s_stream_t;

//  The sender: connect, send blocks until the receiver closes.
static void __attribute__((noreturn))
s_sender(const struct sockaddr_in *to, const s_arg_t *a)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    uint64_t size = S_BUF(a->block, a->batch), io = S_IO(a->block, a->batch);
    uint8_t *buf = malloc(size);
    if (fd < 0 || !buf || connect(fd, (const struct sockaddr *) to, sizeof *to) != 0)
        _exit(1);
    memset(buf, 0x5a, size);
    for (uint64_t off = 0;; off = s_next(off + io, io, size))
        if (send(fd, buf + off, io, MSG_NOSIGNAL) <= 0)
            _exit(0);
}

static void
s_close(void *state)
{
    s_stream_t *self = state;
    if (self->fd >= 0)
        close(self->fd);        //  the sender's cue to stop
    if (self->sender > 0)
        pkb_reap(self->sender, 10);
    free(self->buf);
    free(self);
}

static void *
s_open(void *arg)
{
    const s_arg_t *a = arg;
    s_stream_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->fd = -1;
    self->io = S_IO(a->block, a->batch);
    self->size = S_BUF(a->block, a->batch);
    self->buf = malloc(self->size);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    if (!self->buf || lfd < 0 || bind(lfd, (struct sockaddr *) &sa, sizeof sa) != 0
        || getsockname(lfd, (struct sockaddr *) &sa, &len) != 0 || listen(lfd, 1) != 0)
        goto close_listener;
    memset(self->buf, 0, self->size);
    self->sender = pkb_fork();
    if (self->sender == 0) {
        close(lfd);
        s_sender(&sa, a);
    }
    struct pollfd pfd = { lfd, POLLIN, 0 };
    if (self->sender < 0 || poll(&pfd, 1, 10000) != 1)
        goto close_listener;
    self->fd = accept(lfd, NULL, NULL);
    close(lfd);
    if (self->fd < 0) {
        s_close(self);
        return NULL;
    }
    return self;

close_listener:
    if (lfd >= 0)
        close(lfd);
    s_close(self);
    return NULL;
}

static int64_t
s_step(void *state)
{
    s_stream_t *self = state;
    ssize_t got = recv(self->fd, self->buf + self->off, self->io, 0);
    if (got <= 0)
        return got < 0 ? -errno : -EPIPE;
    self->off = s_next(self->off + (uint64_t) got, self->io, self->size);
    return got;
}

int
pkb_tcp_streams_gbps(uint64_t block, size_t batch, size_t streams, bool quick, double *gbps)
{
    static const pkb_crowd_ops_t ops = { s_open, s_step, s_close };
    s_arg_t arg = { block, (uint32_t) (batch < 1 ? 1 : batch > 256 ? 256 : batch) };
    return pkb_crowd_gbps(&ops, &arg, streams, PKB_CROWD_WARM(quick), PKB_CROWD_SECS(quick),
                          gbps);
}
