/*  mmap.c: the same-host data plane (mmap.h): the fabric, a channel's
    life and its messages out, and the ops table; the blob, the writer's
    side and the target's are files of their own (mmap_priv.h).

    What a channel costs: a socket pair's kernel buffers, an epoll
    descriptor (the constant wait fd the owner watches, over the listening
    socket and then the connection), one receive buffer of
    PK_MMAP_MSG_MAX bytes, and on the consumer a read-only mapping of the
    server's pool (address space only: its pages are the server's).  No
    thread of its own; a consumer's fabric has a copier (copier.h).
*/
#include "mmap/mmap_priv.h"
#include "base/clock.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

static int
s_pool_fd(const void *base, char *why, size_t cap)
{
    FILE *maps = fopen("/proc/self/maps", "re");
    if (!maps)
        return snprintf(why, cap, "no /proc/self/maps"), -1;
    char line[512];
    unsigned long ino = 0;
    unsigned maj = 0, min = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, maps)) {
        unsigned long start;
        char perms[8];
        if (sscanf(line, "%lx-%*x %7s %*x %x:%x %lu", &start, perms, &maj, &min, &ino) == 5
            && start == (unsigned long) (uintptr_t) base)
            found = perms[3] == 's' && ino != 0;
    }
    fclose(maps);
    if (!found)
        return snprintf(why, cap, "the pool is not a shared mapping of a file"), -1;
    DIR *fds = opendir("/proc/self/fd");
    int ro = -1;
    for (struct dirent *e; fds && ro < 0 && (e = readdir(fds));) {
        struct stat st;
        char path[300];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        if (*e->d_name != '.' && stat(path, &st) == 0 && st.st_ino == ino
            && major(st.st_dev) == maj && minor(st.st_dev) == min)
            ro = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fds)
        closedir(fds);
    if (ro < 0)
        snprintf(why, cap, "no open descriptor of the pool's file");
    return ro;
}

_Static_assert(offsetof(pk_mmap_fabric_t, head) == 0, "a fabric begins with its pk_fabric_t");
_Static_assert(offsetof(pk_mmap_channel_t, head) == 0, "a channel begins with its pk_channel_t");

static pk_fabric_t *
s_fabric_open(const pk_fabric_config_t *config, void *base, uint64_t num_blocks,
              uint64_t block_len, int *rc_p, char *err)
{
    if (config && config->provider && strcmp(config->provider, PK_MMAP_PROVIDER) != 0) {
        *rc_p = pk_err(err, -ENOENT, "provider \"%s\" is not available (this transport is "
                       "%s)", config->provider, PK_MMAP_PROVIDER);
        return NULL;
    }
    if (!base || !num_blocks || !block_len || num_blocks > UINT32_MAX) {
        *rc_p = pk_err(err, -EINVAL, "mmap: a pool of 1..2^32 blocks is required");
        return NULL;
    }
    pk_mmap_fabric_t *self = calloc(1, sizeof *self);
    if (!self) {
        *rc_p = pk_err(err, -ENOMEM, "mmap: out of memory");
        return NULL;
    }
    self->head.ops = &pk_mmap_transport_ops;
    self->base = base;
    self->num_blocks = num_blocks;
    self->block_len = block_len;
    self->stall_timeout = config && config->stall_timeout > 0 ? config->stall_timeout : 5.0;
    if (pk_host_id(self->host, sizeof self->host) != 0 || !*self->host) {
        free(self);
        *rc_p = pk_err(err, -ENOSYS, "mmap: no host identity (no /proc)");
        return NULL;
    }
    //  Only a writer needs it; a consumer's pool may be any memory.
    self->ro_fd = s_pool_fd(base, self->no_fd, sizeof self->no_fd);
    //  no copier: every copy on the caller's thread
    self->copier = pk_copier_new();
    return (pk_fabric_t *) self;
}

static void
s_fabric_close(pk_fabric_t **fabric_p)
{
    pk_mmap_fabric_t *self = (pk_mmap_fabric_t *) *fabric_p;
    if (!self)
        return;
    if (self->ro_fd >= 0)
        close(self->ro_fd);
    pk_copier_destroy(&self->copier);
    free(self);
    *fabric_p = NULL;
}

static void
s_fabric_describe(const pk_fabric_t *fabric, char *buf, size_t len)
{
    const pk_mmap_fabric_t *self = (const pk_mmap_fabric_t *) fabric;
    snprintf(buf, len, "provider %s: same-host consumers of this user map the pool "
             "read-only and copy it by memcpy; writes and completions over a unix "
             "socket%s%s", PK_MMAP_PROVIDER, self->ro_fd < 0 ? "; serves no writes: " : "",
             self->ro_fd < 0 ? self->no_fd : "");
}

static const char *
s_fabric_provider(const pk_fabric_t *fabric)
{
    (void) fabric;
    return PK_MMAP_PROVIDER;
}

static bool
s_fabric_has_cq_data(const pk_fabric_t *fabric)
{
    (void) fabric;
    return true;
}

static void
s_fabric_stats(const pk_fabric_t *fabric, pk_fabric_stats_t *stats)
{
    const pk_mmap_fabric_t *self = (const pk_mmap_fabric_t *) fabric;
    *stats = (pk_fabric_stats_t) { self->opened, self->open, self->refused };
}

int
pk_mmap_queue(pk_mmap_channel_t *self, uint64_t tid, const void *bytes, size_t len)
{
    pk_mmap_out_t *o = malloc(sizeof *o + len);
    if (!o)
        return -ENOMEM;
    o->next = NULL;
    o->tid = tid;
    o->len = len;
    memcpy(o->bytes, bytes, len);
    if (self->out_tail)
        self->out_tail->next = o;
    else
        self->out_head = o;
    self->out_tail = o;
    return 0;
}

//  0, or -EPIPE when the connection is gone (then shut).
int
pk_mmap_flush(pk_mmap_channel_t *self)
{
    while (self->out_head && self->fd >= 0) {
        pk_mmap_out_t *o = self->out_head;
        ssize_t n = send(self->fd, o->bytes, o->len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        if (n < 0) {
            pk_mmap_shut(self);
            return -EPIPE;
        }
        if (o->tid) {
            pk_mmap_xfer_t *x = pk_mmap_xfer_find(self, o->tid);
            if (x)
                x->sent++;
            self->stats.writes_posted++;
            self->last_motion = pk_clock_monotonic();
        }
        self->out_head = o->next;
        if (!self->out_head)
            self->out_tail = NULL;
        free(o);
    }
    return 0;
}

void
pk_mmap_drop_queued(pk_mmap_channel_t *self, uint64_t tid)
{
    pk_mmap_out_t **at = &self->out_head, *last = NULL;
    while (*at) {
        if (!tid || (*at)->tid == tid) {
            pk_mmap_out_t *o = *at;
            *at = o->next;
            free(o);
        }
        else {
            last = *at;
            at = &(*at)->next;
        }
    }
    self->out_tail = last;
}

//  The connection ends: every open transfer fails (writer), nothing more
//  lands (target), and the peer sees end of file.
void
pk_mmap_shut(pk_mmap_channel_t *self)
{
    if (self->ctrl && !self->target)
        atomic_store(&self->ctrl->closed, 1);
    if (self->fd >= 0)
        close(self->fd);
    if (self->listen_fd >= 0)
        close(self->listen_fd);
    self->fd = self->listen_fd = -1;
    self->closed = true;
    self->msg_open = false;
    pk_mmap_drop_queued(self, 0);
    while (self->xfers)
        pk_mmap_finish(self, self->xfers->tid, false, 0);
}

//  The peer of a unix socket runs as our user, by the kernel's word (its
//  pid is not compared: another PID namespace numbers it otherwise).
int
pk_mmap_peer_is(int fd, char *err)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return pk_err(err, -errno, "mmap: SO_PEERCRED: %s", strerror(errno));
    if (cred.uid != getuid())
        return pk_err(err, -EPERM, "mmap: the peer runs as uid %u, not this uid %u",
                      (unsigned) cred.uid, (unsigned) getuid());
    return 0;
}

static void
s_channel_free(pk_mmap_channel_t *self)
{
    pk_mmap_shut(self);
    if (self->epfd >= 0)
        close(self->epfd);
    if (self->ctrl_fd >= 0)
        close(self->ctrl_fd);
    if (self->ctrl)
        munmap(self->ctrl, sizeof *self->ctrl);
    if (self->src)
        munmap((void *) self->src, self->src_len);
    free(self->finished);
    free(self->rounds);
    pk_block_check_fini(&self->check);
    free(self->msg);
    free(self);
}

static pk_channel_t *
s_channel_new(pk_fabric_t *fabric, bool expose, int *rc_p, char *err)
{
    pk_mmap_fabric_t *fab = (pk_mmap_fabric_t *) fabric;
    if (!expose && fab->ro_fd < 0) {
        *rc_p = pk_err(err, -EPROTO, "mmap: this side serves no writes: %s", fab->no_fd);
        return NULL;
    }
    pk_mmap_channel_t *self = calloc(1, sizeof *self);
    if (!self) {
        *rc_p = pk_err(err, -ENOMEM, "mmap: out of memory");
        return NULL;
    }
    self->head.ops = &pk_mmap_transport_ops;
    self->fabric = fab;
    self->target = expose;
    self->epfd = self->listen_fd = self->fd = self->ctrl_fd = -1;
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        *rc_p = pk_err(err, -errno, "mmap: epoll_create1: %s", strerror(errno));
        goto fail_channel;
    }
    if (expose) {
        self->msg = malloc(PK_MMAP_MSG_MAX);
        self->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        uint64_t nonce = 0;
        if (!self->msg || self->listen_fd < 0
            || getrandom(&nonce, sizeof nonce, 0) != (ssize_t) sizeof nonce) {
            *rc_p = pk_err(err, -errno, "mmap: a listening socket: %s", strerror(errno));
            goto fail_channel;
        }
        //  abstract: nothing on disk, gone with the socket
        int len = snprintf(self->sock + 1, sizeof self->sock - 1, "p2pkv-mmap-%d-%u-%016" PRIx64,
                           (int) getpid(), ++fab->serial, nonce);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        memcpy(sa.sun_path, self->sock, (size_t) len + 1);
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = self->listen_fd };
        if (bind(self->listen_fd, (struct sockaddr *) &sa,
                 (socklen_t) (offsetof(struct sockaddr_un, sun_path) + 1 + (size_t) len)) != 0
            || listen(self->listen_fd, 1) != 0
            || epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->listen_fd, &ev) != 0) {
            *rc_p = pk_err(err, -errno, "mmap: a listening socket: %s", strerror(errno));
            goto fail_channel;
        }
    }
    else {
        //  the control page, its read-only descriptor for the target
        int fd = memfd_create("p2pkv-mmap-ctrl", MFD_CLOEXEC);
        //  reserved (posix_fallocate), as every shared object of ours
        //  is: a page a limit cannot hold fails here, not as a SIGBUS
        if (fd < 0 || ftruncate(fd, sizeof *self->ctrl) != 0
            || (errno = posix_fallocate(fd, 0, sizeof *self->ctrl)) != 0
            || (self->ctrl = mmap(NULL, sizeof *self->ctrl, PROT_READ | PROT_WRITE, MAP_SHARED,
                                  fd, 0)) == MAP_FAILED) {
            self->ctrl = NULL;
            *rc_p = pk_err(err, -errno, "mmap: the control page: %s", strerror(errno));
            if (fd >= 0)
                close(fd);
            goto fail_channel;
        }
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        self->ctrl_fd = open(path, O_RDONLY | O_CLOEXEC);
        close(fd);
        if (self->ctrl_fd < 0) {
            *rc_p = pk_err(err, -errno, "mmap: the control page: %s", strerror(errno));
            goto fail_channel;
        }
    }
    fab->opened++;
    fab->open++;
    return (pk_channel_t *) self;

fail_channel:
    s_channel_free(self);
    return NULL;
}

static void
s_channel_close(pk_channel_t **channel_p)
{
    pk_mmap_channel_t *self = (pk_mmap_channel_t *) *channel_p;
    if (!self)
        return;
    self->fabric->open--;
    s_channel_free(self);
    *channel_p = NULL;
}

static int
s_channel_progress(pk_channel_t *channel)
{
    pk_mmap_channel_t *self = (pk_mmap_channel_t *) channel;
    if (self->closed)
        return 0;
    return self->target ? pk_mmap_target_progress(self) : pk_mmap_writer_progress(self);
}

static int
s_channel_wait_fd(const pk_channel_t *channel)
{
    const pk_mmap_channel_t *self = (const pk_mmap_channel_t *) channel;
    return self->closed ? -1 : self->epfd;
}

static bool
s_channel_trywait(pk_channel_t *channel)
{
    pk_mmap_channel_t *self = (pk_mmap_channel_t *) channel;
    //  a copy under way, or messages the socket did not take yet: spin;
    //  a writer with transfers out watches the stall clock on its timer
    return !self->msg_open && !self->out_head;
}

static void
s_channel_revoke(pk_channel_t *channel)
{
    pk_mmap_channel_t *self = (pk_mmap_channel_t *) channel;
    self->revoked = true;
    pk_mmap_shut(self);
}

static bool
s_channel_closed(const pk_channel_t *channel)
{
    return ((const pk_mmap_channel_t *) channel)->closed;
}

static void
s_channel_stats(const pk_channel_t *channel, pk_channel_stats_t *stats)
{
    const pk_mmap_channel_t *self = (const pk_mmap_channel_t *) channel;
    *stats = self->stats;
    stats->transfers = self->ntransfers;
}

//  One provider, named after the transport; under auto, before anything
//  of libfabric's (doc/design.md, "Same-host copies").
static const pk_provider_t s_providers[] = {
    { PK_MMAP_PROVIDER, true, 10 },
};

const pk_transport_ops_t pk_mmap_transport_ops = {
    .size = sizeof (pk_transport_ops_t),
    .name = PK_MMAP_PROVIDER,
    .fabric_open = s_fabric_open,
    .fabric_close = s_fabric_close,
    .fabric_describe = s_fabric_describe,
    .fabric_provider = s_fabric_provider,
    .fabric_has_cq_data = s_fabric_has_cq_data,
    .check_blob = pk_mmap_check_blob,
    .fabric_stats = s_fabric_stats,
    .channel_new = s_channel_new,
    .channel_close = s_channel_close,
    .channel_blob = pk_mmap_channel_blob,
    .channel_connect = pk_mmap_channel_connect,
    .channel_progress = s_channel_progress,
    .channel_wait_fd = s_channel_wait_fd,
    .channel_trywait = s_channel_trywait,
    .channel_landed = pk_mmap_channel_landed,
    .channel_forget = pk_mmap_channel_forget,
    .channel_revoke = s_channel_revoke,
    .channel_closed = s_channel_closed,
    .channel_stats = s_channel_stats,
    .channel_transport = pk_mmap_channel_transport,
    .blob_provider = pk_mmap_blob_provider,
    .channel_expect = pk_mmap_channel_expect,
    .channel_verdicts = pk_mmap_channel_verdicts,
    .providers = s_providers,
    .nproviders = 1,
    .channel_lend_copy = pk_mmap_channel_lend_copy,
};
