/*  poller.c: what the node's loop waits on.  poller.h says why; the marks
    are one bit per socket, and the descriptors are in one epoll set.

    Why not zpoller with fewer sockets: the cost is per socket asked, and
    the door needs its six.  Why the sweep: every libzmq call on a socket
    may take the command its descriptor was to fire for, and the node makes
    such calls in a dozen places; each marks its socket (pk_poller_touch),
    and one it forgot would leave a message unread until the next message
    on that socket fired again, which may be never.  So every socket is
    asked at least every PK_POLLER_SWEEP_MS: a forgotten mark costs that
    long a delay, not a hang, and the sweep costs two system calls per
    socket ten times a second.
*/
#include "daemon/poller.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

//  How many marked sockets the poller hands out before it looks at the
//  descriptors again: a socket that is never empty (the router under
//  load) does not hide the others' wakes for more reads than this.  The
//  look costs an epoll_wait.
#define S_MARKED_RUN 8

struct pk_poller_t {
    int epfd;
    void *socks[PK_POLLER_MAX];     //  NULL: a free slot
    uint32_t marked;                //  bit i: socks[i] may hold something
    unsigned next;                  //  where the round of marked sockets goes on
    unsigned handed;                //  marked sockets handed out since the last look
    int64_t sweep_at;               //  zclock_mono(): every socket is marked then
};

pk_poller_t *
pk_poller_new(void)
{
    pk_poller_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        free(self);
        return NULL;
    }
    return self;
}

void
pk_poller_destroy(pk_poller_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    close((*self_p)->epfd);
    free(*self_p);
    *self_p = NULL;
}

//  sock's slot, or the first free one for NULL; -1: none
static int
s_slot(const pk_poller_t *self, const void *sock)
{
    for (int i = 0; i < PK_POLLER_MAX; i++)
        if (self->socks[i] == sock)
            return i;
    return -1;
}

int
pk_poller_add(pk_poller_t *self, void *sock)
{
    if (!sock)
        return -EINVAL;
    if (s_slot(self, sock) >= 0)
        return -EEXIST;
    int i = s_slot(self, NULL);
    if (i < 0)
        return -ENOSPC;
    struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t) i };
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, zsock_fd(sock), &ev) != 0)
        return -errno;
    self->socks[i] = sock;
    self->marked |= 1u << i;        //  what it holds already fired no descriptor of ours
    return 0;
}

int
pk_poller_remove(pk_poller_t *self, void *sock)
{
    int i = sock ? s_slot(self, sock) : -1;
    if (i < 0)
        return -ENOENT;
    (void) epoll_ctl(self->epfd, EPOLL_CTL_DEL, zsock_fd(sock), NULL);
    self->socks[i] = NULL;
    self->marked &= ~(1u << i);
    return 0;
}

void
pk_poller_touch(pk_poller_t *self, void *sock)
{
    int i = self && sock ? s_slot(self, sock) : -1;
    if (i >= 0)
        self->marked |= 1u << i;
}

zmsg_t *
pk_poller_recv(pk_poller_t *self, void *sock)
{
    zmsg_t *msg = zmsg_recv_nowait(sock);
    if (msg)
        pk_poller_touch(self, sock);
    return msg;
}

//  Marks the sockets whose descriptor fired within timeout_ms; false when
//  a signal ended the wait.  Level-triggered: a descriptor libzmq has not
//  read yet fires again.  A signal only ends the wait early (the caller's
//  loop reads the flags its handlers set): epoll_wait also fails so after
//  a stop and continue (SIGSTOP, a debugger or strace attaching), which
//  must not end a server.
static bool
s_look(pk_poller_t *self, int timeout_ms)
{
    struct epoll_event ev[PK_POLLER_MAX];
    int n = epoll_wait(self->epfd, ev, PK_POLLER_MAX, timeout_ms);
    self->handed = 0;
    for (int k = 0; k < n; k++)
        self->marked |= 1u << ev[k].data.u32;
    return n >= 0 || errno != EINTR;
}

//  The next marked socket after the last one handed out, unmarked.
static void *
s_take(pk_poller_t *self)
{
    for (unsigned k = 0; k < PK_POLLER_MAX; k++) {
        unsigned i = (self->next + k) % PK_POLLER_MAX;
        if (self->marked & (1u << i)) {
            self->marked &= ~(1u << i);
            self->next = i + 1;
            self->handed++;
            return self->socks[i];
        }
    }
    return NULL;
}

void *
pk_poller_wait(pk_poller_t *self, int timeout_ms)
{
    int64_t deadline = timeout_ms >= 0 ? zclock_mono() + timeout_ms : INT64_MAX;
    while (true) {
        if (zsys_interrupted)
            return NULL;
        int64_t now = zclock_mono();
        if (now >= self->sweep_at) {
            for (int i = 0; i < PK_POLLER_MAX; i++)
                if (self->socks[i])
                    self->marked |= 1u << i;
            self->sweep_at = now + PK_POLLER_SWEEP_MS;
        }
        if (self->marked) {
            if (self->handed >= S_MARKED_RUN)
                (void) s_look(self, 0);
            return s_take(self);
        }
        if (now >= deadline)
            return NULL;
        //  sleep until something fires, the sweep is due or the time is up
        int64_t until = deadline < self->sweep_at ? deadline : self->sweep_at;
        if (!s_look(self, (int) (until - now)))
            return NULL;
    }
}
