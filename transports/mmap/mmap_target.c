/*  mmap_target.c: the consumer's side of an mmap channel (mmap_priv.h):
    accept the one writer, map its pool read-only, copy its writes (on
    every core for a large batch, copier.h), answer what landed, count
    each round.  */
#include "mmap/mmap_priv.h"
#include "base/checksum.h"
#include "base/clock.h"
#include "base/err.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

//  A round's landed count (made on first use when make): rounds in flight
//  on one channel are few, so a short array.
static pk_mmap_round_t *
s_round(pk_mmap_channel_t *self, uint64_t seq, bool make)
{
    for (size_t i = 0; i < self->nrounds; i++)
        if (self->rounds[i].seq == seq)
            return &self->rounds[i];
    if (!make)
        return NULL;
    if (self->nrounds == self->caprounds) {
        size_t cap = self->caprounds ? 2 * self->caprounds : 8;
        pk_mmap_round_t *r = realloc(self->rounds, cap * sizeof *r);
        if (!r)
            return NULL;
        self->rounds = r;
        self->caprounds = cap;
    }
    self->rounds[self->nrounds] = (pk_mmap_round_t) { seq, 0 };
    return &self->rounds[self->nrounds++];
}

static int
s_accept(pk_mmap_channel_t *self)
{
    int fd = accept4(self->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    char why[PK_ERRLEN];
    if (pk_mmap_peer_is(fd, why) != 0) {
        close(fd);              //  another user's: refused, keep listening
        self->stats.errors++;
        return 0;
    }
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        return -errno;
    }
    close(self->listen_fd);     //  one writer per channel
    self->listen_fd = -1;
    self->fd = fd;
    return 1;
}

static int
s_take_hello(pk_mmap_channel_t *self, const pk_mmap_hello_t *h, size_t len, const int *fds,
             size_t nfds)
{
    struct stat st;
    if (len != sizeof *h || nfds != 2 || h->block_len != self->fabric->block_len
        || h->num_blocks == 0 || h->num_blocks > UINT32_MAX || fstat(fds[0], &st) != 0
        || (uint64_t) st.st_size / h->block_len < h->num_blocks || self->src)
        return -EPROTO;
    size_t plen = h->num_blocks * h->block_len;
    void *src = mmap(NULL, plen, PROT_READ, MAP_SHARED, fds[0], 0);
    if (src == MAP_FAILED)
        return -errno;
    void *ctrl = mmap(NULL, sizeof *self->ctrl, PROT_READ, MAP_SHARED, fds[1], 0);
    if (ctrl == MAP_FAILED) {
        munmap(src, plen);
        return -errno;
    }
    self->src = src;
    self->src_len = plen;
    self->src_blocks = h->num_blocks;
    self->ctrl = ctrl;
    return 0;
}

//  One message from the writer into self->msg; 1 read, 0 none, <0 gone.
static int
s_recv(pk_mmap_channel_t *self)
{
    union {
        struct cmsghdr h;
        char bytes[CMSG_SPACE(2 * sizeof (int))];
    } cm;
    struct iovec iov = { self->msg, PK_MMAP_MSG_MAX };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.bytes,
                         .msg_controllen = sizeof cm.bytes };
    ssize_t n = recvmsg(self->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    if (n == 0)
        return -EPIPE;
    int fds[2];
    size_t nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof (int);
            for (size_t i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof fd, sizeof fd);
                if (nfds < 2)
                    fds[nfds++] = fd;
                else
                    close(fd);
            }
        }
    int rc = 0;
    uint32_t type = n >= 4 ? *(uint32_t *) self->msg : 0;
    if (type == PK_MMAP_HELLO)
        rc = s_take_hello(self, (const pk_mmap_hello_t *) self->msg, (size_t) n, fds, nfds);
    else if (type == PK_MMAP_WRITE && nfds == 0 && self->src
             && (size_t) n >= sizeof (pk_mmap_write_t)) {
        const pk_mmap_write_t *w = (const pk_mmap_write_t *) self->msg;
        if (w->n == 0 || w->n > PK_MMAP_PAIRS_MAX
            || (size_t) n != sizeof *w + w->n * sizeof (pk_copy_pair_t))
            rc = -EPROTO;
        else {
            if (w->tid != self->cur_tid) {
                self->cur_tid = w->tid;
                self->cur_landed = 0;
                self->cur_failed = false;
            }
            self->msg_open = true;
            self->msg_at = 0;
        }
    }
    else
        rc = -EPROTO;
    for (size_t i = 0; i < nfds; i++)
        close(fds[i]);
    return rc ? rc : 1;
}

//  --------------------------------------------------------------------------
//  The end-to-end check in the copy (transport.h, channel_expect;
//  base/block_check.h): a block expected is hashed on the thread that
//  copied it, right after its copy.

static bool
s_check_wants(void *arg, uint32_t dst)
{
    pk_mmap_channel_t *self = arg;
    return pk_block_check_wants(&self->check, dst);
}

static void
s_check_found(void *arg, uint32_t dst, uint64_t sum)
{
    pk_mmap_channel_t *self = arg;
    pk_block_check_found(&self->check, dst, sum);
}

int
pk_mmap_channel_expect(pk_channel_t *channel, const uint32_t *dest, const uint64_t *sums,
                       size_t n)
{
    pk_mmap_channel_t *self = (pk_mmap_channel_t *) channel;
    if (!self->target)
        return -EINVAL;
    return pk_block_check_expect(&self->check, self->fabric->num_blocks, dest, sums, n);
}

void
pk_mmap_channel_verdicts(pk_channel_t *channel, const uint32_t *dest, uint8_t *verdict,
                         size_t n)
{
    pk_mmap_channel_t *self = (pk_mmap_channel_t *) channel;
    pk_block_check_verdicts(&self->check, dest, verdict, n);
}

//  Copies the open write's next pairs, within *budget bytes.
static void
s_copy(pk_mmap_channel_t *self, size_t *budget)
{
    const pk_mmap_write_t *w = (const pk_mmap_write_t *) self->msg;
    const pk_copy_pair_t *p = (const pk_copy_pair_t *) (w + 1);
    uint64_t bl = self->fabric->block_len;
    pk_mmap_round_t *r = s_round(self, w->round_seq, true);
    //  the pairs within the budget, at least one
    size_t k = *budget / bl < w->n - self->msg_at ? *budget / bl : w->n - self->msg_at;
    if (k == 0)
        k = 1;
    const pk_copy_pair_t *chunk = p + self->msg_at;
    self->msg_at += k;
    *budget = *budget > k * bl ? *budget - k * bl : 0;
    for (size_t i = 0; i < k && !self->cur_failed; i++)
        if (chunk[i].src >= self->src_blocks || chunk[i].dst >= self->fabric->num_blocks)
            self->cur_failed = true;
    if (self->cur_failed || self->revoked || !r || atomic_load(&self->ctrl->closed))
        self->cur_failed = true;        //  nothing more of this transfer lands
    else {
        pk_copy_check_t check = { s_check_wants, s_check_found, self };
        size_t landed = pk_copier_run(self->fabric->copier, self->fabric->base, self->src,
                                      chunk, k, bl, &self->ctrl->closed,
                                      self->check.state ? &check : NULL);
        if (landed < k)
            self->cur_failed = true;    //  cut off meanwhile
        r->count += landed;
        self->cur_landed += landed;
        self->stats.blocks_landed += landed;
    }
    if (self->msg_at < w->n)
        return;
    self->msg_open = false;
    if (w->last) {
        pk_mmap_done_t d = { PK_MMAP_DONE, !self->cur_failed, w->tid, self->cur_landed };
        if (pk_mmap_queue(self, 0, &d, sizeof d) != 0)
            pk_mmap_shut(self);       //  the writer's stall check ends its transfer
        self->cur_tid = 0;
    }
}

int
pk_mmap_target_progress(pk_mmap_channel_t *self)
{
    int did = 0;
    if (self->listen_fd >= 0 && (did = s_accept(self)) <= 0) {
        if (did < 0)
            pk_mmap_shut(self);
        return 0;
    }
    //  one block at least, however large
    size_t bl = self->fabric->block_len;
    size_t budget = PK_MMAP_COPY_BUDGET > bl ? PK_MMAP_COPY_BUDGET : bl;
    while (self->fd >= 0 && budget >= bl) {
        if (!self->msg_open) {
            int rc = s_recv(self);
            if (rc < 0) {
                pk_mmap_shut(self);
                break;
            }
            if (rc == 0)
                break;
            did++;
        }
        if (self->msg_open)
            s_copy(self, &budget);
        if (pk_mmap_flush(self) != 0)
            break;
    }
    return did;
}

uint64_t
pk_mmap_channel_landed(pk_channel_t *channel, uint64_t round_seq)
{
    pk_mmap_round_t *r = s_round((pk_mmap_channel_t *) channel, round_seq, false);
    return r ? r->count : 0;
}

void
pk_mmap_channel_forget(pk_channel_t *channel, uint64_t round_seq)
{
    pk_mmap_channel_t *self = (pk_mmap_channel_t *) channel;
    pk_mmap_round_t *r = s_round(self, round_seq, false);
    if (r)
        *r = self->rounds[--self->nrounds];
}

//  A lent round (capability lend, transport.h channel_lend_copy): the
//  server's get_resp named the blocks; they are copied here, on the
//  caller's thread (or shared with the copier's helpers for a large
//  round), checked as they are copied, counted for the round, and the
//  server told at once (LENT) so that it unpins them.  The cut-off rule
//  is mmap.h's: a block copied after the control page's flag was set is
//  not counted, and the report says so.
int64_t
pk_mmap_channel_lend_copy(pk_channel_t *channel, uint64_t round_seq, const uint32_t *src,
                          const uint32_t *dst, size_t n)
{
    pk_mmap_channel_t *self = (pk_mmap_channel_t *) channel;
    if (!self->target)
        return -EINVAL;
    //  the server's pool mapped (its hello read): the connection may not
    //  have been looked at since it came
    if (!self->src && !self->closed)
        (void) pk_mmap_target_progress(self);
    if (self->closed || self->revoked || !self->src || self->fd < 0)
        return -ENOTCONN;
    for (size_t i = 0; i < n; i++)
        if (src[i] >= self->src_blocks || dst[i] >= self->fabric->num_blocks)
            return -EINVAL;
    pk_mmap_round_t *r = s_round(self, round_seq, true);
    if (!r)
        return -ENOMEM;
    pk_copy_pair_t stackpairs[64];
    pk_copy_pair_t *pairs = n <= 64 ? stackpairs : malloc(n * sizeof *pairs);
    if (!pairs)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        pairs[i] = (pk_copy_pair_t) { src[i], dst[i] };
    size_t landed = 0;
    if (n && !atomic_load(&self->ctrl->closed)) {
        pk_copy_check_t check = { s_check_wants, s_check_found, self };
        landed = pk_copier_run(self->fabric->copier, self->fabric->base, self->src, pairs, n,
                               self->fabric->block_len, &self->ctrl->closed,
                               self->check.state ? &check : NULL);
    }
    if (pairs != stackpairs)
        free(pairs);
    r->count += landed;
    self->stats.blocks_landed += landed;
    //  n 0: the round's answer came to nobody (its load ended): the
    //  report alone, so the server unpins now, not at its stall
    pk_mmap_done_t d = { PK_MMAP_LENT, n && landed == n, round_seq, landed };
    if (pk_mmap_queue(self, 0, &d, sizeof d) != 0 || pk_mmap_flush(self) != 0)
        pk_mmap_shut(self);     //  the server's stall ends the lend, fenced by its flag
    return (int64_t) landed;
}
