/*  mmap_writer.c: the server's side of an mmap channel (mmap_priv.h):
    connect to the consumer's socket and hand it the pool, one message of
    block pairs per write, the consumer's answers, cancel, the stall.  */
#include "mmap/mmap_priv.h"
#include "base/clock.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

pk_mmap_xfer_t *
pk_mmap_xfer_find(pk_mmap_channel_t *self, uint64_t tid)
{
    for (pk_mmap_xfer_t *x = self->xfers; x; x = x->next)
        if (x->tid == tid)
            return x;
    return NULL;
}

//  Takes x out of the open transfers (its memory freed).
static bool
s_unlink(pk_mmap_channel_t *self, uint64_t tid)
{
    pk_mmap_xfer_t **at = &self->xfers;
    while (*at && (*at)->tid != tid)
        at = &(*at)->next;
    if (!*at)
        return false;           //  released, or a peer's stray answer
    pk_mmap_xfer_t *x = *at;
    *at = x->next;
    free(x);
    return true;
}

//  An open transfer ends, to be reported by poll (write_blocks reserved
//  its slot in finished[], so this never fails).
void
pk_mmap_finish(pk_mmap_channel_t *self, uint64_t tid, bool ok, uint64_t landed)
{
    if (!s_unlink(self, tid))
        return;
    self->finished[self->nfinished++] = (pk_mmap_finished_t) { tid, landed, ok };
    if (ok)
        self->stats.blocks_written += landed;
    else
        self->stats.errors++;
}

//  A transfer goes unreported: open (its queued parts dropped) or finished.
static void
s_release(pk_mmap_channel_t *self, uint64_t tid)
{
    pk_mmap_drop_queued(self, tid);
    bool gone = s_unlink(self, tid);
    for (size_t f = 0; !gone && f < self->nfinished; f++)
        if (self->finished[f].tid == tid) {
            self->finished[f] = self->finished[--self->nfinished];
            gone = true;
        }
    if (gone)
        self->ntransfers--;
}

//  What a write and a lend both check first: a live channel of a server,
//  blocks of its pool, and room to report one more transfer.
static int
s_admit(pk_mmap_channel_t *self, const uint32_t *local, size_t n)
{
    if (self->closed || !self->connected || self->target)
        return -ENOTCONN;
    if (n == 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (local[i] >= self->fabric->num_blocks)
            return -EINVAL;
    if (self->capfinished < self->ntransfers + 1) {
        size_t cap = 2 * self->ntransfers + 16;
        pk_mmap_finished_t *f = realloc(self->finished, cap * sizeof *f);
        if (!f)
            return -ENOMEM;
        self->finished = f;
        self->capfinished = cap;
    }
    return 0;
}

static int64_t
s_write_blocks(void *arg, uint64_t round_seq, const uint32_t *local, const uint32_t *remote,
               size_t n)
{
    pk_mmap_channel_t *self = arg;
    int rc = s_admit(self, local, n);
    if (rc)
        return rc;
    pk_mmap_xfer_t *x = calloc(1, sizeof *x);
    uint8_t *buf = malloc(PK_MMAP_MSG_MAX);
    if (!x || !buf) {
        free(x);
        free(buf);
        return -ENOMEM;
    }
    if (!self->xfers)
        self->last_motion = pk_clock_monotonic();
    x->tid = ++self->next_tid;
    x->nblocks = n;
    x->parts = (n + PK_MMAP_PAIRS_MAX - 1) / PK_MMAP_PAIRS_MAX;
    x->next = self->xfers;
    self->xfers = x;
    self->ntransfers++;
    for (size_t at = 0; at < n; at += PK_MMAP_PAIRS_MAX) {
        size_t k = n - at < PK_MMAP_PAIRS_MAX ? n - at : PK_MMAP_PAIRS_MAX;
        pk_mmap_write_t *w = (pk_mmap_write_t *) buf;
        *w = (pk_mmap_write_t) { PK_MMAP_WRITE, (uint32_t) k, x->tid, round_seq, at + k == n, 0 };
        pk_copy_pair_t *p = (pk_copy_pair_t *) (w + 1);
        for (size_t i = 0; i < k; i++)
            p[i] = (pk_copy_pair_t) { local[at + i], remote[at + i] };
        if (pk_mmap_queue(self, x->tid, buf, sizeof *w + k * sizeof *p) != 0) {
            free(buf);
            s_release(self, x->tid);        //  refused: never reported
            return -ENOMEM;
        }
    }
    free(buf);
    //  a connection found gone here fails the transfer (x freed): it is
    //  reported by poll like any other
    int64_t tid = (int64_t) x->tid;
    (void) pk_mmap_flush(self);
    return tid;
}

//  A lent transfer (transport.h, lend): nothing goes on the socket; the
//  round's answer tells the consumer which blocks to copy, and its LENT
//  report ends the transfer.  Counted as sent: cancel holds it until the
//  report (the consumer may be copying), and the stall clock runs on it.
static int64_t
s_lend(void *arg, uint64_t round_seq, const uint32_t *local, const uint32_t *remote, size_t n)
{
    pk_mmap_channel_t *self = arg;
    (void) remote;              //  the consumer's own, in its get
    int rc = s_admit(self, local, n);
    if (rc)
        return rc;
    pk_mmap_xfer_t *x = calloc(1, sizeof *x);
    if (!x)
        return -ENOMEM;
    if (!self->xfers)
        self->last_motion = pk_clock_monotonic();
    *x = (pk_mmap_xfer_t) { self->xfers, ++self->next_tid, n, 1, 1, true, round_seq };
    self->xfers = x;
    self->ntransfers++;
    self->stats.writes_posted++;
    return (int64_t) x->tid;
}

//  The consumer's LENT report for a round: its lent transfers end, what it
//  copied shared out over them in order.  More than was lent is a lie:
//  false (the caller shuts the channel).
static bool
s_lent(pk_mmap_channel_t *self, uint64_t round_seq, bool ok, uint64_t landed)
{
    uint64_t lent = 0;
    for (pk_mmap_xfer_t *x = self->xfers; x; x = x->next)
        if (x->lent && x->round_seq == round_seq)
            lent += x->nblocks;
    if (landed > lent)
        return false;
    bool more = true;
    while (more) {
        more = false;
        for (pk_mmap_xfer_t *x = self->xfers; x; x = x->next)
            if (x->lent && x->round_seq == round_seq) {
                uint64_t mine = landed < x->nblocks ? landed : x->nblocks;
                landed -= mine;
                pk_mmap_finish(self, x->tid, ok && mine == x->nblocks, mine);
                more = true;
                break;
            }
    }
    return true;
}

static int
s_cmp_finished(const void *a, const void *b)
{
    const pk_mmap_finished_t *x = a, *y = b;
    if (x->ok != y->ok)
        return x->ok ? -1 : 1;
    return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static void
s_poll(void *arg, pk_transfer_fn *each, void *each_arg)
{
    pk_mmap_channel_t *self = arg;
    if (!self->nfinished)
        return;
    qsort(self->finished, self->nfinished, sizeof *self->finished, s_cmp_finished);
    //  a callback may write (and so finish) more: report a copy
    size_t n = self->nfinished;
    pk_mmap_finished_t *done = malloc(n * sizeof *done);
    if (!done)
        return;                 //  the next poll reports them
    memcpy(done, self->finished, n * sizeof *done);
    self->nfinished = 0;
    self->ntransfers -= n;
    for (size_t i = 0; i < n; i++)
        each(each_arg, done[i].tid, done[i].ok, done[i].landed);
    free(done);
}

static size_t
s_cancel(void *arg, const uint64_t *tids, size_t n, pk_cancel_mode_t mode, uint64_t *still)
{
    pk_mmap_channel_t *self = arg;
    size_t nstill = 0;
    for (size_t i = 0; i < n; i++) {
        pk_mmap_xfer_t *x = pk_mmap_xfer_find(self, tids[i]);
        bool held = false;
        if (mode == PK_CANCEL_WAIT && x)
            held = x->sent > 0;             //  its copy may run: reported when done
        else if (mode == PK_CANCEL_WAIT)
            for (size_t f = 0; f < self->nfinished; f++)
                if (self->finished[f].tid == tids[i])
                    held = self->finished[f].landed > 0;
        if (held)
            still[nstill++] = tids[i];
        else
            s_release(self, tids[i]);
    }
    if (mode == PK_CANCEL_IMMEDIATE) {
        pk_mmap_shut(self);           //  the flag first: no block read from now lands
        return 0;
    }
    return nstill;
}

//  Writer: connect to the target's socket, check who listens there, and
//  send it the pool and the control page.
int
pk_mmap_channel_connect(pk_channel_t *channel, const uint8_t *blob, size_t len, char *err)
{
    pk_mmap_channel_t *self = (pk_mmap_channel_t *) channel;
    if (self->connected)
        return -EISCONN;
    pk_mmap_blob_t b;
    int rc = pk_mmap_parse_blob(self->fabric, blob, len, &b, err);
    if (rc)
        return rc == -EPERM ? -EPROTO : rc;
    if (self->target || !b.target) {
        //  a target given its writer's blob: nothing to do (the writer calls)
        if (self->target && !b.target) {
            self->connected = true;
            return 0;
        }
        return pk_err(err, -EPROTO, "agent_metadata: mmap: two %s", self->target
                      ? "consumers" : "writers");
    }
    //  non-blocking from the start: a listener whose backlog is full (or
    //  a hostile one that never accepts) refuses at once instead of
    //  holding this session's actor in connect
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return pk_err(err, -errno, "mmap: socket: %s", strerror(errno));
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t nlen = strlen(b.sock + 1);
    memcpy(sa.sun_path, b.sock, nlen + 1);
    if (connect(fd, (struct sockaddr *) &sa,
                (socklen_t) (offsetof(struct sockaddr_un, sun_path) + 1 + nlen)) != 0) {
        rc = pk_err(err, -EPROTO, "agent_metadata: mmap: the consumer's socket: %s",
                    strerror(errno));
        goto fail_socket;
    }
    if ((rc = pk_mmap_peer_is(fd, err)) != 0) {
        rc = -EPROTO;
        goto fail_socket;
    }
    pk_mmap_hello_t hello = { PK_MMAP_HELLO, 0, self->fabric->num_blocks,
                              self->fabric->block_len };
    int fds[2] = { self->fabric->ro_fd, self->ctrl_fd };
    union {
        struct cmsghdr h;
        char bytes[CMSG_SPACE(sizeof fds)];
    } cm;
    memset(&cm, 0, sizeof cm);
    struct iovec iov = { &hello, sizeof hello };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.bytes,
                         .msg_controllen = sizeof cm.bytes };
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t) sizeof hello) {
        rc = pk_err(err, -EPROTO, "mmap: hello to the consumer: %s", strerror(errno));
        goto fail_socket;
    }
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        rc = pk_err(err, -errno, "mmap: %s", strerror(errno));
        goto fail_socket;
    }
    self->fd = fd;
    self->connected = true;
    return 0;

fail_socket:
    close(fd);
    self->fabric->refused++;
    return rc;
}

//  Writer: answers, the queue, the stall deadline.
int
pk_mmap_writer_progress(pk_mmap_channel_t *self)
{
    int did = 0;
    while (self->fd >= 0) {
        pk_mmap_done_t d;
        ssize_t n = recv(self->fd, &d, sizeof d, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (n != (ssize_t) sizeof d || (d.type != PK_MMAP_DONE && d.type != PK_MMAP_LENT)) {
            pk_mmap_shut(self);       //  gone, or not ours to believe
            break;
        }
        if (d.type == PK_MMAP_LENT) {
            if (!s_lent(self, d.tid, d.ok != 0, d.landed)) {
                pk_mmap_shut(self);
                break;
            }
            self->last_motion = pk_clock_monotonic();
            did++;
            continue;
        }
        pk_mmap_xfer_t *x = pk_mmap_xfer_find(self, d.tid);
        if (x && (d.landed > x->nblocks || x->sent < x->parts || x->lent)) {
            pk_mmap_shut(self);
            break;
        }
        pk_mmap_finish(self, d.tid, d.ok != 0, d.landed);
        self->last_motion = pk_clock_monotonic();
        did++;
    }
    (void) pk_mmap_flush(self);
    //  transfers open and nothing moved this long: the consumer is stuck
    if (self->xfers && pk_clock_monotonic() - self->last_motion > self->fabric->stall_timeout)
        pk_mmap_shut(self);
    return did;
}

pk_transport_t
pk_mmap_channel_transport(pk_channel_t *channel)
{
    return (pk_transport_t) { .self = channel, .write_blocks = s_write_blocks, .poll = s_poll,
                              .cancel = s_cancel, .lend = s_lend };
}
