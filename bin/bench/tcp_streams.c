/*  tcp_streams.c: the data plane's floor: bare TCP streams over
    127.0.0.1, a sender and a receiver process each, blocking send() and
    recv() of one block at a time, as many at once as fetch has
    consumers (crowd.c times them together).

    What fetch's rows are set beside to say where a crowd's loss is: the
    kernel's (loopback TCP on two cores moves 64 streams at least as fast
    as one: design.md, "Where the end-to-end time goes") or user space's
    (libfabric's tcp provider is progressed by the processes themselves,
    so each wake of 64 readers and writers costs system calls a blocking
    recv does not).  Both ends rotate over `batch` blocks, as a fetch's
    pools do, so their caches hold what a fetch's would.
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

typedef struct {
    int fd;
    int told;                   //  the sender's pipe: bytes sent when it paused
    pid_t sender;
    uint8_t *buf;
    uint64_t block, off, size, received;
    bool paused;
} s_stream_t;

//  The sender: connect, send blocks until the receiver closes.  A 'p'
//  from the receiver pauses it: it says on the pipe how many bytes it
//  sent, and waits for a 'g'.
static void __attribute__((noreturn))
s_sender(const struct sockaddr_in *to, const s_arg_t *a, int told)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    uint64_t size = a->block * a->batch, sent = 0;
    uint8_t *buf = malloc(size);
    if (fd < 0 || !buf || connect(fd, (const struct sockaddr *) to, sizeof *to) != 0)
        _exit(1);
    memset(buf, 0x5a, size);
    for (uint64_t off = 0;; off = (off + a->block) % size) {
        ssize_t n = send(fd, buf + off, a->block, MSG_NOSIGNAL);
        if (n <= 0)
            _exit(0);
        sent += (uint64_t) n;
        char cue;
        if (recv(fd, &cue, 1, MSG_DONTWAIT) == 1 && cue == 'p') {
            if (write(told, &sent, sizeof sent) != sizeof sent
                || recv(fd, &cue, 1, MSG_WAITALL) != 1)
                _exit(0);
        }
    }
}

static void
s_close(void *state)
{
    s_stream_t *self = state;
    if (self->fd >= 0)
        close(self->fd);        //  the sender's cue to stop
    if (self->told >= 0)
        close(self->told);
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
    self->fd = self->told = -1;
    self->block = a->block;
    self->size = a->block * a->batch;
    self->buf = malloc(self->size);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), told[2] = { -1, -1 };
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    if (!self->buf || lfd < 0 || bind(lfd, (struct sockaddr *) &sa, sizeof sa) != 0
        || getsockname(lfd, (struct sockaddr *) &sa, &len) != 0 || listen(lfd, 1) != 0
        || pipe(told) != 0)
        goto close_listener;
    memset(self->buf, 0, self->size);
    self->sender = pkb_fork();
    if (self->sender == 0) {
        close(lfd);
        close(told[0]);
        s_sender(&sa, a, told[1]);
    }
    close(told[1]);
    self->told = told[0];
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

//  One read of what the sender sent.
static int64_t
s_take(s_stream_t *self)
{
    ssize_t got = recv(self->fd, self->buf + self->off, self->block, 0);
    if (got <= 0)
        return got < 0 ? -errno : -EPIPE;
    self->received += (uint64_t) got;
    self->off = (self->off + (uint64_t) got) % self->size;
    //  a short read leaves the next one less than a block to its end
    if (self->size - self->off < self->block)
        self->off = 0;
    return got;
}

static int64_t
s_step(void *state)
{
    s_stream_t *self = state;
    if (self->paused) {
        self->paused = false;
        if (send(self->fd, "g", 1, MSG_NOSIGNAL) != 1)
            return -errno;
    }
    return s_take(self);
}

//  After the warm-up: pause the sender and take in all it sent, so that
//  the timed part counts no byte sent before it.
static int
s_quiesce(void *state)
{
    s_stream_t *self = state;
    if (send(self->fd, "p", 1, MSG_NOSIGNAL) != 1)
        return -errno;
    self->paused = true;
    //  reading on until it says what it sent: it may be blocked in a send
    //  that only our reads let finish
    for (;;) {
        struct pollfd pfd[2] = { { self->told, POLLIN, 0 }, { self->fd, POLLIN, 0 } };
        if (poll(pfd, 2, 10000) <= 0)
            return -ETIMEDOUT;
        if (pfd[0].revents)
            break;
        if (s_take(self) < 0)
            return -EIO;
    }
    uint64_t sent = 0;
    if (read(self->told, &sent, sizeof sent) != sizeof sent)
        return -EIO;
    while (self->received < sent)
        if (s_take(self) < 0)
            return -EIO;
    return self->received == sent ? 0 : -EPROTO;
}

int
pkb_tcp_streams_gbps(uint64_t block, size_t batch, size_t streams, bool quick, double *gbps)
{
    static const pkb_crowd_ops_t ops = { s_open, s_step, s_quiesce, s_close };
    s_arg_t arg = { block, (uint32_t) (batch < 1 ? 1 : batch > 256 ? 256 : batch) };
    return pkb_crowd_gbps(&ops, &arg, streams, PKB_CROWD_WARM(quick), PKB_CROWD_SECS(quick),
                          gbps);
}
