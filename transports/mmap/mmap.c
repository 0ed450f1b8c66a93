/*  mmap.c: the same-host data plane (mmap.h): the pool mapped into the
    consumer, copied by memcpy, writes and completions over a unix socket.

    What a channel costs: a socket pair's kernel buffers, an epoll
    descriptor (the constant wait fd the owner watches, over the listening
    socket and then the connection), one receive buffer of S_MSG_MAX
    bytes, and on the consumer a read-only mapping of the server's pool
    (address space only: its pages are the server's).  No thread.
*/
#include "mmap/mmap.h"
#include "mmap/copier.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/host_id.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
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

#define S_PROVIDER      "mmap"
#define S_MAGIC         "PKMM"
#define S_VERSION       1
#define S_PAIRS_MAX     2048                //  pairs of blocks per message
#define S_MSG_MAX       (sizeof (s_write_t) + S_PAIRS_MAX * sizeof (s_pair_t))
//  Bytes one progress call copies at most: a consumer's owner gets back
//  to its sockets every few milliseconds even in a 256 MiB fetch.
#define S_COPY_BUDGET   (32u << 20)

//  --------------------------------------------------------------------------
//  What goes over the socket.  Both ends run on one host, of one build or
//  another of the same ABI: the blob's version says which layout.

enum { S_HELLO = 1, S_WRITE = 2, S_DONE = 3 };

typedef struct {
    char magic[4];
    uint8_t version;
    uint8_t target;             //  1: a consumer's (exposes its pool)
    uint16_t zero;
    uint32_t pid;
    uint32_t uid;
    uint64_t block_len;
    char host[PK_HOST_ID_LEN];  //  base/host_id.h, NUL-terminated
    char sock[48];              //  the abstract socket's name, after its NUL
} s_blob_t;

typedef struct {
    uint32_t type;              //  S_HELLO; the pool's and the control
    uint32_t zero;              //  page's descriptors ride with it
    uint64_t num_blocks;
    uint64_t block_len;
} s_hello_t;

typedef pk_copy_pair_t s_pair_t;       //  local (the server's), remote (ours)

typedef struct {
    uint32_t type;              //  S_WRITE, then n pairs
    uint32_t n;
    uint64_t tid;
    uint64_t round_seq;
    uint32_t last;              //  the transfer's last part
    uint32_t zero;
} s_write_t;

typedef struct {
    uint32_t type;              //  S_DONE
    uint32_t ok;
    uint64_t tid;
    uint64_t landed;
} s_done_t;

//  The control page: the server writes it, the consumer maps it read-only.
typedef struct {
    _Atomic uint32_t closed;    //  set by an immediate cancel or close
} s_ctrl_t;

//  --------------------------------------------------------------------------

typedef struct _s_out_t {
    struct _s_out_t *next;
    uint64_t tid;               //  the transfer it belongs to (0: none)
    size_t len;
    uint8_t bytes[];
} s_out_t;

typedef struct _s_xfer_t {
    struct _s_xfer_t *next;
    uint64_t tid;
    size_t nblocks;
    size_t parts, sent;         //  messages of it, and sent of those
} s_xfer_t;

typedef struct {
    uint64_t tid, landed;
    bool ok;
} s_finished_t;

typedef struct {
    uint64_t seq, count;
} s_round_t;

typedef struct {
    uint8_t *base;
    uint64_t num_blocks, block_len;
    int ro_fd;                  //  the pool, opened read-only; -1: not a file
    char no_fd[160];            //  why not
    double stall_timeout;
    char host[PK_HOST_ID_LEN];
    uint64_t opened, open, refused;
    uint32_t serial;
    pk_copier_t *copier;        //  a consumer's copies, on its cores (copier.h)
} s_fabric_t;

typedef struct {
    s_fabric_t *fabric;
    bool target;
    bool closed, connected;
    int epfd, listen_fd, fd;
    char sock[48];
    s_ctrl_t *ctrl;             //  the writer's read-write, the target's read-only
    int ctrl_fd;                //  writer: read-only descriptor sent to the target
    s_out_t *out_head, *out_tail;
    //  writer
    s_xfer_t *xfers;
    s_finished_t *finished;
    size_t nfinished, capfinished, ntransfers;
    uint64_t next_tid;
    double last_motion;         //  a part sent or an answer read, for the stall
    //  target
    const uint8_t *src;
    size_t src_len;
    uint64_t src_blocks;
    bool revoked;
    uint8_t *msg;               //  the write being copied
    size_t msg_at;              //  its next pair
    bool msg_open;
    uint64_t msg_landed, msg_ok;
    uint64_t cur_tid, cur_landed;
    bool cur_failed;
    s_round_t *rounds;
    size_t nrounds, caprounds;
    pk_channel_stats_t stats;
} s_channel_t;

//  --------------------------------------------------------------------------
//  The pool as a file: the descriptor this process maps it from (a POSIX
//  shm object, a memfd), found by the mapping's device and inode in
//  /proc/self/maps, then reopened read-only so the consumer can never
//  write through what it is given.

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

static pk_fabric_t *
s_fabric_open(const pk_fabric_config_t *config, void *base, uint64_t num_blocks,
              uint64_t block_len, int *rc_p, char *err)
{
    if (config && config->provider && strcmp(config->provider, S_PROVIDER) != 0) {
        *rc_p = pk_err(err, -ENOENT, "provider \"%s\" is not available (this transport is "
                       "%s)", config->provider, S_PROVIDER);
        return NULL;
    }
    if (!base || !num_blocks || !block_len || num_blocks > UINT32_MAX) {
        *rc_p = pk_err(err, -EINVAL, "mmap: a pool of 1..2^32 blocks is required");
        return NULL;
    }
    s_fabric_t *self = calloc(1, sizeof *self);
    if (!self) {
        *rc_p = pk_err(err, -ENOMEM, "mmap: out of memory");
        return NULL;
    }
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
    s_fabric_t *self = (s_fabric_t *) *fabric_p;
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
    const s_fabric_t *self = (const s_fabric_t *) fabric;
    snprintf(buf, len, "provider %s: same-host consumers of this user map the pool "
             "read-only and copy it by memcpy; writes and completions over a unix "
             "socket%s%s", S_PROVIDER, self->ro_fd < 0 ? "; serves no writes: " : "",
             self->ro_fd < 0 ? self->no_fd : "");
}

static const char *
s_fabric_provider(const pk_fabric_t *fabric)
{
    (void) fabric;
    return S_PROVIDER;
}

static bool
s_fabric_has_cq_data(const pk_fabric_t *fabric)
{
    (void) fabric;
    return true;
}

static int
s_blob_provider(const uint8_t *blob, size_t len, char *out, size_t cap, char *err)
{
    if (len < 4 || memcmp(blob, S_MAGIC, 4) != 0)
        return pk_err(err, -EPROTO, "agent_metadata: not an mmap blob");
    snprintf(out, cap, "%s", S_PROVIDER);
    return 0;
}

static int
s_parse_blob(s_fabric_t *self, const uint8_t *bytes, size_t len, s_blob_t *b, char *err)
{
    if (len != sizeof *b || memcmp(bytes, S_MAGIC, 4) != 0)
        return pk_err(err, -EPROTO, "agent_metadata: an mmap blob is %zu bytes, not %zu",
                      sizeof *b, len);
    memcpy(b, bytes, sizeof *b);
    if (b->version != S_VERSION)
        return pk_err(err, -EPROTO, "agent_metadata: mmap blob version %u, ours is %u",
                      b->version, S_VERSION);
    if (b->block_len != self->block_len)
        return pk_err(err, -EPROTO, "agent_metadata: block_len %" PRIu64 ", ours is %" PRIu64,
                      b->block_len, self->block_len);
    if (!memchr(b->host, 0, sizeof b->host) || !memchr(b->sock + 1, 0, sizeof b->sock - 1)
        || b->sock[0] != 0 || b->target > 1)
        return pk_err(err, -EPROTO, "agent_metadata: a malformed mmap blob");
    if (strcmp(b->host, self->host) != 0)
        return pk_err(err, -EPROTO, "agent_metadata: mmap needs the same host and "
                      "namespaces (the peer is %.60s, this is %.60s)", b->host, self->host);
    if (b->uid != (uint32_t) getuid())
        return pk_err(err, -EPERM, "agent_metadata: mmap serves peers of its own user only "
                      "(the peer says uid %u, this is %u)", b->uid, (unsigned) getuid());
    return 0;
}

static int
s_check_blob(pk_fabric_t *fabric, const uint8_t *blob, size_t len, char *err)
{
    s_fabric_t *self = (s_fabric_t *) fabric;
    s_blob_t b;
    int rc = s_parse_blob(self, blob, len, &b, err);
    if (rc == 0 && b.target && self->ro_fd < 0)
        rc = pk_err(err, -EPROTO, "mmap: this side serves no writes: %s", self->no_fd);
    if (rc)
        self->refused++;
    return rc;
}

static void
s_fabric_stats(const pk_fabric_t *fabric, pk_fabric_stats_t *stats)
{
    const s_fabric_t *self = (const s_fabric_t *) fabric;
    *stats = (pk_fabric_stats_t) { self->opened, self->open, self->refused };
}

//  --------------------------------------------------------------------------
//  Messages out: sent at once when the socket takes them, else queued and
//  sent by progress.

static int
s_queue(s_channel_t *self, uint64_t tid, const void *bytes, size_t len)
{
    s_out_t *o = malloc(sizeof *o + len);
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

static s_xfer_t *
s_xfer_find(s_channel_t *self, uint64_t tid)
{
    for (s_xfer_t *x = self->xfers; x; x = x->next)
        if (x->tid == tid)
            return x;
    return NULL;
}

static void s_shut(s_channel_t *self);

//  0, or -EPIPE when the connection is gone (then shut).
static int
s_flush(s_channel_t *self)
{
    while (self->out_head && self->fd >= 0) {
        s_out_t *o = self->out_head;
        ssize_t n = send(self->fd, o->bytes, o->len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        if (n < 0) {
            s_shut(self);
            return -EPIPE;
        }
        if (o->tid) {
            s_xfer_t *x = s_xfer_find(self, o->tid);
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

static void
s_drop_queued(s_channel_t *self, uint64_t tid)
{
    s_out_t **at = &self->out_head, *last = NULL;
    while (*at) {
        if (!tid || (*at)->tid == tid) {
            s_out_t *o = *at;
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

//  --------------------------------------------------------------------------
//  Writer: transfers and their ends

//  Takes x out of the open transfers (its memory freed).
static bool
s_unlink(s_channel_t *self, uint64_t tid)
{
    s_xfer_t **at = &self->xfers;
    while (*at && (*at)->tid != tid)
        at = &(*at)->next;
    if (!*at)
        return false;           //  released, or a peer's stray answer
    s_xfer_t *x = *at;
    *at = x->next;
    free(x);
    return true;
}

//  An open transfer ends, to be reported by poll (write_blocks reserved
//  its slot in finished[], so this never fails).
static void
s_finish(s_channel_t *self, uint64_t tid, bool ok, uint64_t landed)
{
    if (!s_unlink(self, tid))
        return;
    self->finished[self->nfinished++] = (s_finished_t) { tid, landed, ok };
    if (ok)
        self->stats.blocks_written += landed;
    else
        self->stats.errors++;
}

//  A transfer goes unreported: open (its queued parts dropped) or finished.
static void
s_release(s_channel_t *self, uint64_t tid)
{
    s_drop_queued(self, tid);
    bool gone = s_unlink(self, tid);
    for (size_t f = 0; !gone && f < self->nfinished; f++)
        if (self->finished[f].tid == tid) {
            self->finished[f] = self->finished[--self->nfinished];
            gone = true;
        }
    if (gone)
        self->ntransfers--;
}

//  The connection ends: every open transfer fails (writer), nothing more
//  lands (target), and the peer sees end of file.
static void
s_shut(s_channel_t *self)
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
    s_drop_queued(self, 0);
    while (self->xfers)
        s_finish(self, self->xfers->tid, false, 0);
}

static int64_t
s_write_blocks(void *arg, uint64_t round_seq, const uint32_t *local, const uint32_t *remote,
               size_t n)
{
    s_channel_t *self = arg;
    if (self->closed || !self->connected || self->target)
        return -ENOTCONN;
    if (n == 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (local[i] >= self->fabric->num_blocks)
            return -EINVAL;
    if (self->capfinished < self->ntransfers + 1) {
        size_t cap = 2 * self->ntransfers + 16;
        s_finished_t *f = realloc(self->finished, cap * sizeof *f);
        if (!f)
            return -ENOMEM;
        self->finished = f;
        self->capfinished = cap;
    }
    s_xfer_t *x = calloc(1, sizeof *x);
    uint8_t *buf = malloc(S_MSG_MAX);
    if (!x || !buf) {
        free(x);
        free(buf);
        return -ENOMEM;
    }
    if (!self->xfers)
        self->last_motion = pk_clock_monotonic();
    x->tid = ++self->next_tid;
    x->nblocks = n;
    x->parts = (n + S_PAIRS_MAX - 1) / S_PAIRS_MAX;
    x->next = self->xfers;
    self->xfers = x;
    self->ntransfers++;
    for (size_t at = 0; at < n; at += S_PAIRS_MAX) {
        size_t k = n - at < S_PAIRS_MAX ? n - at : S_PAIRS_MAX;
        s_write_t *w = (s_write_t *) buf;
        *w = (s_write_t) { S_WRITE, (uint32_t) k, x->tid, round_seq, at + k == n, 0 };
        s_pair_t *p = (s_pair_t *) (w + 1);
        for (size_t i = 0; i < k; i++)
            p[i] = (s_pair_t) { local[at + i], remote[at + i] };
        if (s_queue(self, x->tid, buf, sizeof *w + k * sizeof *p) != 0) {
            free(buf);
            s_release(self, x->tid);        //  refused: never reported
            return -ENOMEM;
        }
    }
    free(buf);
    //  a connection found gone here fails the transfer (x freed): it is
    //  reported by poll like any other
    int64_t tid = (int64_t) x->tid;
    (void) s_flush(self);
    return tid;
}

static int
s_cmp_finished(const void *a, const void *b)
{
    const s_finished_t *x = a, *y = b;
    if (x->ok != y->ok)
        return x->ok ? -1 : 1;
    return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static void
s_poll(void *arg, pk_transfer_fn *each, void *each_arg)
{
    s_channel_t *self = arg;
    if (!self->nfinished)
        return;
    qsort(self->finished, self->nfinished, sizeof *self->finished, s_cmp_finished);
    //  a callback may write (and so finish) more: report a copy
    size_t n = self->nfinished;
    s_finished_t *done = malloc(n * sizeof *done);
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
    s_channel_t *self = arg;
    size_t nstill = 0;
    for (size_t i = 0; i < n; i++) {
        s_xfer_t *x = s_xfer_find(self, tids[i]);
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
        s_shut(self);           //  the flag first: no block read from now lands
        return 0;
    }
    return nstill;
}

//  --------------------------------------------------------------------------
//  Channels

static void
s_channel_free(s_channel_t *self)
{
    s_shut(self);
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
    free(self->msg);
    free(self);
}

static pk_channel_t *
s_channel_new(pk_fabric_t *fabric, bool expose, int *rc_p, char *err)
{
    s_fabric_t *fab = (s_fabric_t *) fabric;
    if (!expose && fab->ro_fd < 0) {
        *rc_p = pk_err(err, -EPROTO, "mmap: this side serves no writes: %s", fab->no_fd);
        return NULL;
    }
    s_channel_t *self = calloc(1, sizeof *self);
    if (!self) {
        *rc_p = pk_err(err, -ENOMEM, "mmap: out of memory");
        return NULL;
    }
    self->fabric = fab;
    self->target = expose;
    self->epfd = self->listen_fd = self->fd = self->ctrl_fd = -1;
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        *rc_p = pk_err(err, -errno, "mmap: epoll_create1: %s", strerror(errno));
        goto fail_channel;
    }
    if (expose) {
        self->msg = malloc(S_MSG_MAX);
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
        if (fd < 0 || ftruncate(fd, sizeof *self->ctrl) != 0
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
    s_channel_t *self = (s_channel_t *) *channel_p;
    if (!self)
        return;
    self->fabric->open--;
    s_channel_free(self);
    *channel_p = NULL;
}

static int
s_channel_blob(pk_channel_t *channel, uint8_t **blob_p, size_t *len_p)
{
    s_channel_t *self = (s_channel_t *) channel;
    s_blob_t *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    memcpy(b->magic, S_MAGIC, 4);
    b->version = S_VERSION;
    b->target = self->target;
    b->pid = (uint32_t) getpid();
    b->uid = (uint32_t) getuid();
    b->block_len = self->fabric->block_len;
    memcpy(b->host, self->fabric->host, sizeof b->host);
    memcpy(b->sock, self->sock, sizeof b->sock);
    *blob_p = (uint8_t *) b;
    *len_p = sizeof *b;
    return 0;
}

//  The peer of a unix socket runs as our user, by the kernel's word (its
//  pid is not compared: another PID namespace numbers it otherwise).
static int
s_peer_is(int fd, char *err)
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

//  Writer: connect to the target's socket, check who listens there, and
//  send it the pool and the control page.
static int
s_channel_connect(pk_channel_t *channel, const uint8_t *blob, size_t len, char *err)
{
    s_channel_t *self = (s_channel_t *) channel;
    if (self->connected)
        return -EISCONN;
    s_blob_t b;
    int rc = s_parse_blob(self->fabric, blob, len, &b, err);
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
    if ((rc = s_peer_is(fd, err)) != 0) {
        rc = -EPROTO;
        goto fail_socket;
    }
    s_hello_t hello = { S_HELLO, 0, self->fabric->num_blocks, self->fabric->block_len };
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

//  --------------------------------------------------------------------------
//  Target: accept the writer, map its pool, copy its writes

static s_round_t *
s_round(s_channel_t *self, uint64_t seq, bool make)
{
    for (size_t i = 0; i < self->nrounds; i++)
        if (self->rounds[i].seq == seq)
            return &self->rounds[i];
    if (!make)
        return NULL;
    if (self->nrounds == self->caprounds) {
        size_t cap = self->caprounds ? 2 * self->caprounds : 8;
        s_round_t *r = realloc(self->rounds, cap * sizeof *r);
        if (!r)
            return NULL;
        self->rounds = r;
        self->caprounds = cap;
    }
    self->rounds[self->nrounds] = (s_round_t) { seq, 0 };
    return &self->rounds[self->nrounds++];
}

static int
s_accept(s_channel_t *self)
{
    int fd = accept4(self->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    char why[PK_ERRLEN];
    if (s_peer_is(fd, why) != 0) {
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
s_take_hello(s_channel_t *self, const s_hello_t *h, size_t len, const int *fds, size_t nfds)
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
s_recv(s_channel_t *self)
{
    union {
        struct cmsghdr h;
        char bytes[CMSG_SPACE(2 * sizeof (int))];
    } cm;
    struct iovec iov = { self->msg, S_MSG_MAX };
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
    if (type == S_HELLO)
        rc = s_take_hello(self, (const s_hello_t *) self->msg, (size_t) n, fds, nfds);
    else if (type == S_WRITE && nfds == 0 && self->src && (size_t) n >= sizeof (s_write_t)) {
        const s_write_t *w = (const s_write_t *) self->msg;
        if (w->n == 0 || w->n > S_PAIRS_MAX
            || (size_t) n != sizeof *w + w->n * sizeof (s_pair_t))
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

//  Copies the open write's next pairs, within *budget bytes.
static void
s_copy(s_channel_t *self, size_t *budget)
{
    const s_write_t *w = (const s_write_t *) self->msg;
    const s_pair_t *p = (const s_pair_t *) (w + 1);
    uint64_t bl = self->fabric->block_len;
    s_round_t *r = s_round(self, w->round_seq, true);
    //  the pairs within the budget, at least one
    size_t k = *budget / bl < w->n - self->msg_at ? *budget / bl : w->n - self->msg_at;
    if (k == 0)
        k = 1;
    const s_pair_t *chunk = p + self->msg_at;
    self->msg_at += k;
    *budget = *budget > k * bl ? *budget - k * bl : 0;
    for (size_t i = 0; i < k && !self->cur_failed; i++)
        if (chunk[i].src >= self->src_blocks || chunk[i].dst >= self->fabric->num_blocks)
            self->cur_failed = true;
    if (self->cur_failed || self->revoked || !r || atomic_load(&self->ctrl->closed))
        self->cur_failed = true;        //  nothing more of this transfer lands
    else {
        size_t landed = pk_copier_run(self->fabric->copier, self->fabric->base, self->src,
                                      chunk, k, bl, &self->ctrl->closed);
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
        s_done_t d = { S_DONE, !self->cur_failed, w->tid, self->cur_landed };
        if (s_queue(self, 0, &d, sizeof d) != 0)
            s_shut(self);       //  the writer's stall check ends its transfer
        self->cur_tid = 0;
    }
}

static int
s_target_progress(s_channel_t *self)
{
    int did = 0;
    if (self->listen_fd >= 0 && (did = s_accept(self)) <= 0) {
        if (did < 0)
            s_shut(self);
        return 0;
    }
    //  one block at least, however large
    size_t bl = self->fabric->block_len, budget = S_COPY_BUDGET > bl ? S_COPY_BUDGET : bl;
    while (self->fd >= 0 && budget >= bl) {
        if (!self->msg_open) {
            int rc = s_recv(self);
            if (rc < 0) {
                s_shut(self);
                break;
            }
            if (rc == 0)
                break;
            did++;
        }
        if (self->msg_open)
            s_copy(self, &budget);
        if (s_flush(self) != 0)
            break;
    }
    return did;
}

//  Writer: answers, the queue, the stall deadline.
static int
s_writer_progress(s_channel_t *self)
{
    int did = 0;
    while (self->fd >= 0) {
        s_done_t d;
        ssize_t n = recv(self->fd, &d, sizeof d, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (n != (ssize_t) sizeof d || d.type != S_DONE) {
            s_shut(self);       //  gone, or not ours to believe
            break;
        }
        s_xfer_t *x = s_xfer_find(self, d.tid);
        if (x && (d.landed > x->nblocks || x->sent < x->parts)) {
            s_shut(self);
            break;
        }
        s_finish(self, d.tid, d.ok != 0, d.landed);
        self->last_motion = pk_clock_monotonic();
        did++;
    }
    (void) s_flush(self);
    //  transfers open and nothing moved this long: the consumer is stuck
    if (self->xfers && pk_clock_monotonic() - self->last_motion > self->fabric->stall_timeout)
        s_shut(self);
    return did;
}

static int
s_channel_progress(pk_channel_t *channel)
{
    s_channel_t *self = (s_channel_t *) channel;
    if (self->closed)
        return 0;
    return self->target ? s_target_progress(self) : s_writer_progress(self);
}

static int
s_channel_wait_fd(const pk_channel_t *channel)
{
    const s_channel_t *self = (const s_channel_t *) channel;
    return self->closed ? -1 : self->epfd;
}

static bool
s_channel_trywait(pk_channel_t *channel)
{
    s_channel_t *self = (s_channel_t *) channel;
    //  a copy under way, or messages the socket did not take yet: spin;
    //  a writer with transfers out watches the stall clock on its timer
    return !self->msg_open && !self->out_head;
}

static uint64_t
s_channel_landed(pk_channel_t *channel, uint64_t round_seq)
{
    s_round_t *r = s_round((s_channel_t *) channel, round_seq, false);
    return r ? r->count : 0;
}

static void
s_channel_forget(pk_channel_t *channel, uint64_t round_seq)
{
    s_channel_t *self = (s_channel_t *) channel;
    s_round_t *r = s_round(self, round_seq, false);
    if (r)
        *r = self->rounds[--self->nrounds];
}

static void
s_channel_revoke(pk_channel_t *channel)
{
    s_channel_t *self = (s_channel_t *) channel;
    self->revoked = true;
    s_shut(self);
}

static bool
s_channel_closed(const pk_channel_t *channel)
{
    return ((const s_channel_t *) channel)->closed;
}

static void
s_channel_stats(const pk_channel_t *channel, pk_channel_stats_t *stats)
{
    const s_channel_t *self = (const s_channel_t *) channel;
    *stats = self->stats;
    stats->transfers = self->ntransfers;
}

static pk_transport_t
s_channel_transport(pk_channel_t *channel)
{
    return (pk_transport_t) { channel, s_write_blocks, s_poll, s_cancel };
}

const pk_transport_ops_t pk_mmap_transport_ops = {
    .size = sizeof (pk_transport_ops_t),
    .name = S_PROVIDER,
    .fabric_open = s_fabric_open,
    .fabric_close = s_fabric_close,
    .fabric_describe = s_fabric_describe,
    .fabric_provider = s_fabric_provider,
    .fabric_has_cq_data = s_fabric_has_cq_data,
    .check_blob = s_check_blob,
    .fabric_stats = s_fabric_stats,
    .channel_new = s_channel_new,
    .channel_close = s_channel_close,
    .channel_blob = s_channel_blob,
    .channel_connect = s_channel_connect,
    .channel_progress = s_channel_progress,
    .channel_wait_fd = s_channel_wait_fd,
    .channel_trywait = s_channel_trywait,
    .channel_landed = s_channel_landed,
    .channel_forget = s_channel_forget,
    .channel_revoke = s_channel_revoke,
    .channel_closed = s_channel_closed,
    .channel_stats = s_channel_stats,
    .channel_transport = s_channel_transport,
    .blob_provider = s_blob_provider,
};
