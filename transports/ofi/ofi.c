/*  ofi.c: the libfabric transport.

    A transfer is one write_blocks call: its pairs are merged into runs
    contiguous on both sides, each run (at most 1 MiB and 4,095 blocks) is
    one op, one fi_writedata.  Ops wait in a FIFO until a transmit credit
    frees; completions come back on the channel's own queue with the op as
    context.  A transfer is reported by poll once all its ops ended.
    Branching is on the mr_mode bits the provider returned, never on its
    name.
*/
#include "base/err.h"
#include "ofi/ofi.h"
#include "ofi/ofi_priv.h"
#include "ofi/ofi_bench.h"
#include "base/clock.h"
#include "base/keymap.h"
#include "base/slices.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <sodium.h>

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

//  --------------------------------------------------------------------------
//  The fabric

//  Debian's libfabric pulls in libinfinipath (the PSM provider's), whose
//  constructor takes SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL and SIGABRT
//  for itself at load and ends the process with exit(1) on any of them:
//  an engine loading libp2pkv then dies silently on Ctrl-C (no
//  KeyboardInterrupt in Python, no cleanup) and a crash leaves no core.
//  Our constructor runs after our dependencies' (the loader's order), so
//  it gives back the default for each signal whose handler lies in that
//  library; a handler anyone else installed is left alone.  A process that
//  had handlers before it loaded us (a dlopen, as Python's ctypes does)
//  must save and restore its own around the load (python/p2pkv/_lib.py).
static bool
s_handler_is_psm(void *handler)
{
    Dl_info info;
    return dladdr(handler, &info) && info.dli_fname && strstr(info.dli_fname, "libinfinipath");
}

__attribute__((constructor)) static void
s_give_back_signals(void)
{
    const int sigs[] = { SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGQUIT, SIGHUP };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        if (sigaction(sigs[i], NULL, &sa) != 0)
            continue;
        void *fn = (sa.sa_flags & SA_SIGINFO) ? (void *) (uintptr_t) sa.sa_sigaction
                                              : (void *) (uintptr_t) sa.sa_handler;
        if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN && s_handler_is_psm(fn))
            signal(sigs[i], SIG_DFL);
    }
}

//  The choice of endpoint, made once per process before libfabric reads
//  its settings (at the first fi_getinfo).  Under tcp, libfabric 1.17
//  layers ofi_rxm over tcp's message endpoints: every RDM endpoint then
//  carries rxm's bounce-buffer pools, about 70 MB resident per channel
//  (one channel per session), which endpoint attributes do not shrink.
//  tcp has an RDM endpoint of its own, and our traffic (RMA writes with
//  remote CQ data, nothing else) needs nothing rxm adds; 1.17 offers that
//  endpoint only through rxm's pass-through switch, read from the
//  environment.  A channel then costs about 150 KB, plus about 450 KB of
//  transfer entries once its connection is made (doc/design.md, "What a
//  session costs").  Over verbs rxm stays (passthrough is for tcp only);
//  its message endpoints' receive queues are cut to 64 since we post no
//  receives (it cut connection set-up from 40 to 10 ms of CPU).  rxm also
//  reads its connection events only every FI_OFI_RXM_CM_PROGRESS_INTERVAL
//  (10 ms by default) of progress calls, pass-through included, and a
//  channel's connection is made at its first write, one event on each
//  side: that interval was most of a session's first fetch (a 1-block
//  first get 8-10 ms, the next ones 0.5 ms).  At 1 ms the first get takes
//  1.4-3.9 ms, as at 100 us, while a spinning owner looks at the event
//  queue a tenth as often (at 100 us a 64 KiB x 32 fetch lost 5-7%).
//  Under pass-through rxm still opens a queue for its message endpoints'
//  completions at every endpoint's enable, sized for FI_UNIVERSE_SIZE
//  peers (1,024 unless set) times 128 sends each: 12 MiB per channel.
//  Where glibc serves that from mmap it is only address space, but once a
//  process has freed one such block glibc raises its mmap threshold past
//  it and serves the next from the heap, zeroed, so every channel made
//  after the first one closed (a consumer reconnecting, a second client)
//  cost 11 MiB resident, where the first ones cost 130 KiB.  Every
//  endpoint of ours has one peer (its address vector holds one address),
//  so the universe is 1: the queue is 12 KiB.  The setting is the
//  process's, read once: other libfabric users in the process see it too
//  (a hint for sizing, not a limit; an operator who needs another sets
//  it).  An operator's own setting of any of the four always wins.
//  It is made when our library loads (a constructor), not at the first
//  fabric: glibc's setenv may free the environment array under another
//  thread's getenv, and by the first fabric an engine's other threads (or
//  a client in each of its workers) may be reading it; at load the
//  process is most likely one thread.
__attribute__((constructor)) static void
s_choose_endpoints(void)
{
    setenv("FI_OFI_RXM_ENABLE_PASSTHRU", "1", 0);
    setenv("FI_OFI_RXM_MSG_RX_SIZE", "64", 0);
    setenv("FI_OFI_RXM_CM_PROGRESS_INTERVAL", "1000", 0);
    setenv("FI_UNIVERSE_SIZE", "1", 0);
}

static int
s_getinfo(const pk_ofi_config_t *config, const char *provider, struct fi_info **info_p)
{
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        return -ENOMEM;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    hints->mode = FI_CONTEXT;
    hints->domain_attr->mr_mode = S_MR_MODES;
    //  One actor per peer drives its own endpoint while others create and
    //  close theirs in the same domain: the provider must serialise.
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->fabric_attr->prov_name = strdup(provider);
    //  Queues sized for what we post: at most S_MAX_DEPTH writes in flight
    //  per channel and no receives (remote CQ data needs none of ours).
    //  Under tcp it halves an unconnected channel's cost (250 -> 145 KB).
    hints->tx_attr->size = S_MAX_DEPTH;
    hints->rx_attr->size = S_RX_SIZE;
    //  We progress every channel ourselves (its owner's loop), so no
    //  provider thread need do it: under tcp's own endpoint, automatic
    //  progress is a thread per endpoint, hence one per session.
    hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
    int rc = fi_getinfo(FI_VERSION(1, 17), config->node, NULL, config->node ? FI_SOURCE : 0,
                        hints, info_p);
    fi_freeinfo(hints);
    return rc;
}

//  The key a registration asks for.  Where the provider takes requested
//  keys (no FI_MR_PROV_KEY: tcp, shm, rxm), the key is the only thing
//  between a stranger who reaches the endpoint and our memory: tcp
//  accepts a connection from anyone and honours any key of its domain on
//  whichever endpoint the write arrives.  Keys that counted up from 1 were
//  found by a stranger in a few guesses (issue 34), so every key is
//  random, as wide as the domain's keys (mr_key_size, at most 64 bits).
//  Under FI_MR_PROV_KEY the provider chooses and ignores ours
//  (doc/security.md, "The data plane", says what verbs and efa choose).
static uint64_t
s_random_key(const pk_ofi_t *ofi)
{
    uint64_t key = 0;
    randombytes_buf(&key, sizeof key);
    size_t bits = 8 * ofi->info->domain_attr->mr_key_size;
    if (bits > 0 && bits < 64)
        key &= (UINT64_C(1) << bits) - 1;
    return key;
}

static int
s_register(pk_ofi_t *ofi, uint64_t access, struct fid_ep *ep, struct fid_mr **mr_p)
{
    //  A random key may collide with one the domain holds (-FI_ENOKEY):
    //  a new draw, a few times (at 64 bits a collision is a bug's sign).
    int rc = -FI_ENOKEY;
    for (int tries = 0; tries < 8 && rc == -FI_ENOKEY; tries++)
        rc = fi_mr_reg(ofi->domain, ofi->base, ofi->num_blocks * ofi->block_len, access, 0,
                       s_random_key(ofi), 0, mr_p, NULL);
    if (rc)
        return rc;
    if (ep && (ofi->info->domain_attr->mr_mode & FI_MR_ENDPOINT)) {
        rc = fi_mr_bind(*mr_p, &ep->fid, 0);
        if (!rc)
            rc = fi_mr_enable(*mr_p);
        if (rc) {
            fi_close(&(*mr_p)->fid);
            *mr_p = NULL;
        }
    }
    return rc;
}

pk_ofi_t *
pk_ofi_new(const pk_ofi_config_t *config, void *base, uint64_t num_blocks, uint64_t block_len,
           int *rc_p, char *err)
{
    int rc = 0;
    pk_ofi_t *self = calloc(1, sizeof *self);
    if (!self) {
        rc = pk_err(err, -ENOMEM, "out of memory");
        goto fail;
    }
    self->head.ops = &pk_ofi_transport_ops;
    pk_ofi_config_t dflt = { NULL, NULL, 5.0, false };
    self->config = config ? *config : dflt;
    self->base = base;
    self->num_blocks = num_blocks;
    self->block_len = block_len;
    if (sodium_init() < 0) {        //  the registration keys' source (s_random_key)
        rc = pk_err(err, -EIO, "ofi: libsodium cannot start (no entropy source)");
        goto fail_self;
    }
    if (!base || !num_blocks || !block_len) {
        rc = pk_err(err, -EINVAL, "ofi: no pool to register");
        goto fail_self;
    }
    if (!(self->config.stall_timeout > 0)) {
        rc = pk_err(err, -EINVAL, "ofi: stall_timeout must be positive");
        goto fail_self;
    }
    if (self->config.provider) {
        rc = s_getinfo(&self->config, self->config.provider, &self->info);
        if (rc) {
            pk_err(err, rc, "ofi: provider \"%s\" is not available for RDM RMA writes: %s",
                   self->config.provider, fi_strerror(-rc));
            goto fail_self;
        }
    }
    else {
        static const char *order[] = { "verbs", "efa", "tcp" };
        for (size_t i = 0; i < 3 && !self->info; i++)
            rc = s_getinfo(&self->config, order[i], &self->info);
        if (!self->info) {
            pk_err(err, rc, "ofi: none of verbs, efa, tcp is available: %s", fi_strerror(-rc));
            goto fail_self;
        }
    }
    snprintf(self->provider, sizeof self->provider, "%s", self->info->fabric_attr->prov_name);
    self->cq_data = self->info->domain_attr->cq_data_size >= 4;
    rc = fi_fabric(self->info->fabric_attr, &self->fabric, NULL);
    if (rc) {
        pk_err(err, rc, "ofi: fi_fabric: %s", fi_strerror(-rc));
        goto fail_info;
    }
    rc = fi_domain(self->fabric, self->info, &self->domain, NULL);
    if (rc) {
        pk_err(err, rc, "ofi: fi_domain: %s", fi_strerror(-rc));
        goto fail_fabric;
    }
    //  Local descriptors are needed only under FI_MR_LOCAL; per endpoint
    //  when registrations bind to endpoints.
    uint64_t mr_mode = self->info->domain_attr->mr_mode;
    if ((mr_mode & FI_MR_LOCAL) && !(mr_mode & FI_MR_ENDPOINT)) {
        rc = s_register(self, FI_WRITE, NULL, &self->local_mr);
        if (rc) {
            pk_err(err, rc, "ofi: registering the pool: %s", fi_strerror(-rc));
            goto fail_domain;
        }
    }
    if (rc_p)
        *rc_p = 0;
    return self;

fail_domain:
    fi_close(&self->domain->fid);
fail_fabric:
    fi_close(&self->fabric->fid);
fail_info:
    fi_freeinfo(self->info);
fail_self:
    free(self);
fail:
    return pk_err_null(rc_p, (rc < 0 ? rc : -rc));
}

void
pk_ofi_destroy(pk_ofi_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_ofi_t *self = *self_p;
    if (self->local_mr)
        fi_close(&self->local_mr->fid);
    fi_close(&self->domain->fid);
    fi_close(&self->fabric->fid);
    fi_freeinfo(self->info);
    free(self);
    *self_p = NULL;
}

const char *
pk_ofi_provider(const pk_ofi_t *self)
{
    return self->provider;
}

bool
pk_ofi_has_cq_data(const pk_ofi_t *self)
{
    return self->cq_data;
}

void
pk_ofi_describe(const pk_ofi_t *self, char *buf, size_t len)
{
    uint64_t m = self->info->domain_attr->mr_mode;
    snprintf(buf, len, "libfabric %u.%u provider %s domain %s mr_mode 0x%llx%s%s%s%s%s, %s",
             FI_MAJOR(fi_version()), FI_MINOR(fi_version()), self->provider,
             self->info->domain_attr->name, (unsigned long long) m,
             m & FI_MR_LOCAL ? " LOCAL" : "", m & FI_MR_VIRT_ADDR ? " VIRT_ADDR" : "",
             m & FI_MR_ALLOCATED ? " ALLOCATED" : "", m & FI_MR_PROV_KEY ? " PROV_KEY" : "",
             m & FI_MR_ENDPOINT ? " ENDPOINT" : "",
             self->cq_data ? "remote CQ data" : "FI_DELIVERY_COMPLETE (no remote CQ data)");
}

uint32_t
pk_ofi_mr_mode(const pk_ofi_t *self)
{
    return (uint32_t) self->info->domain_attr->mr_mode;
}

//  --------------------------------------------------------------------------
//  Channels

//  Every channel's queue has a file descriptor behind it where the
//  provider offers one, and every channel hands it out: a target sleeps
//  on it while idle, a writer once its writes went quiet for a while
//  (pk_ofi_channel_trywait).  A writer's queue without one cost memory
//  that grew with the process: under tcp;ofi_rxm it makes rxm's inner
//  queue a poll set that tcp sizes by the highest descriptor number of the
//  process (24 bytes each), one per session, so 1,024 sessions held
//  144 KiB each of it (heaptrack, pk_ofi_channel_progress).  The
//  descriptor costs no signalling the writer did not pay already (tcp
//  signals its queue's wait set either way) and three descriptors more
//  per channel.
//  Sized for what can be queued: a writer's completions are its writes in
//  flight (at most S_MAX_DEPTH), a target's the remote CQ data of its one
//  writer's, so twice that leaves room for errors.  The queue is memory
//  every session holds: 1,280 entries were 96 KiB; providers built on
//  libfabric's util CQ (tcp, rxm) keep an overflow list, so a full queue
//  loses nothing there.
static int
s_cq_open(pk_ofi_t *ofi, pk_ofi_channel_t *self)
{
    struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_FD,
                                  .size = 2 * S_MAX_DEPTH };
    self->wait_fd = -1;
    int rc = fi_cq_open(ofi->domain, &cq_attr, &self->cq, NULL);
    if (rc == 0 && fi_control(&self->cq->fid, FI_GETWAIT, &self->wait_fd) != 0) {
        fi_close(&self->cq->fid);
        self->wait_fd = -1;
        rc = -FI_ENOSYS;
    }
    if (rc) {
        cq_attr.wait_obj = FI_WAIT_NONE;
        rc = fi_cq_open(ofi->domain, &cq_attr, &self->cq, NULL);
    }
    return rc;
}

//  The pool registered for this peer's remote writes, under a key never
//  reused, and its raw key where the domain wants one.  Nothing is left
//  registered on failure.
static int
s_expose(pk_ofi_t *ofi, pk_ofi_channel_t *self, char *err)
{
    int rc = s_register(ofi, FI_REMOTE_WRITE, self->ep, &self->expose_mr);
    if (rc)
        return pk_err(err, rc, "ofi: registering the pool for remote writes: %s",
                      fi_strerror(-rc));
    self->expose_key = fi_mr_key(self->expose_mr);
    if (ofi->info->domain_attr->mr_mode & FI_MR_RAW) {
        size_t size = sizeof self->raw_key;
        rc = fi_mr_raw_attr(self->expose_mr, &self->raw_base, self->raw_key, &size, 0);
        if (rc) {
            fi_close(&self->expose_mr->fid);
            self->expose_mr = NULL;
            return pk_err(err, rc, "ofi: the raw key of the pool: %s", fi_strerror(-rc));
        }
        self->raw_key_len = size;
    }
    return 0;
}

pk_ofi_channel_t *
pk_ofi_channel_new(pk_ofi_t *ofi, bool expose, int *rc_p, char *err)
{
    int rc;
    pk_ofi_channel_t *self = calloc(1, sizeof *self);
    if (!self) {
        rc = pk_err(err, -ENOMEM, "out of memory");
        goto fail;
    }
    self->head.ops = &pk_ofi_transport_ops;
    self->ofi = ofi;
    self->next_tid = 1;
    self->depth = ofi->info->tx_attr->size < S_MAX_DEPTH ? ofi->info->tx_attr->size : S_MAX_DEPTH;
    if (self->depth == 0)
        self->depth = 1;
    self->credits = self->depth;
    rc = s_cq_open(ofi, self);
    if (rc) {
        pk_err(err, rc, "ofi: fi_cq_open: %s", fi_strerror(-rc));
        goto fail_self;
    }
    struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 1 };
    rc = fi_av_open(ofi->domain, &av_attr, &self->av, NULL);
    if (rc) {
        pk_err(err, rc, "ofi: fi_av_open: %s", fi_strerror(-rc));
        goto fail_cq;
    }
    rc = fi_endpoint(ofi->domain, ofi->info, &self->ep, NULL);
    if (rc) {
        pk_err(err, rc, "ofi: fi_endpoint: %s", fi_strerror(-rc));
        goto fail_av;
    }
    rc = fi_ep_bind(self->ep, &self->cq->fid, FI_TRANSMIT | FI_RECV);
    if (!rc)
        rc = fi_ep_bind(self->ep, &self->av->fid, 0);
    if (!rc)
        rc = fi_enable(self->ep);
    if (rc) {
        pk_err(err, rc, "ofi: enabling the endpoint: %s", fi_strerror(-rc));
        goto fail_ep;
    }
    uint64_t mr_mode = ofi->info->domain_attr->mr_mode;
    if ((mr_mode & FI_MR_LOCAL) && (mr_mode & FI_MR_ENDPOINT)) {
        rc = s_register(ofi, FI_WRITE, self->ep, &self->local_mr);
        if (rc) {
            pk_err(err, rc, "ofi: registering the pool: %s", fi_strerror(-rc));
            goto fail_ep;
        }
    }
    struct fid_mr *local = self->local_mr ? self->local_mr : ofi->local_mr;
    self->desc = local ? fi_mr_desc(local) : NULL;
    if (expose && (rc = s_expose(ofi, self, err)) != 0)
        goto fail_local;
    atomic_fetch_add(&ofi->channels_opened, 1);
    atomic_fetch_add(&ofi->channels_open, 1);
    if (rc_p)
        *rc_p = 0;
    return self;

fail_local:
    if (self->local_mr)
        fi_close(&self->local_mr->fid);
fail_ep:
    fi_close(&self->ep->fid);
fail_av:
    fi_close(&self->av->fid);
fail_cq:
    fi_close(&self->cq->fid);
fail_self:
    free(self);
fail:
    return pk_err_null(rc_p, (rc < 0 ? rc : -rc));
}

static void
s_free_transfers(pk_ofi_channel_t *self)
{
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->xfers, &at)); )
        free((s_xfer_t *) (uintptr_t) e->a);
    pk_keymap_fini(&self->xfers);
    self->queue_head = self->queue_tail = NULL;
}

void
pk_ofi_channel_destroy(pk_ofi_channel_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_ofi_channel_t *self = *self_p;
    //  The endpoint first, then its registrations (fabtests' order):
    //  nothing the peer sends lands once the endpoint is closed, and
    //  closing a tcp;ofi_rxm endpoint whose peer stopped mid-write after
    //  the registration it wrote into crashed inside fi_close (valgrind).
    if (self->ep)
        fi_close(&self->ep->fid);
    if (self->expose_mr)
        fi_close(&self->expose_mr->fid);
    if (self->local_mr)
        fi_close(&self->local_mr->fid);
    if (self->peer_key_mapped)
        fi_mr_unmap_key(self->ofi->domain, self->peer_key);
    fi_close(&self->av->fid);
    fi_close(&self->cq->fid);
    s_free_transfers(self);
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->landed, &at)); )
        free((s_landed_t *) (uintptr_t) e->a);
    pk_keymap_fini(&self->landed);
    pk_block_check_fini(&self->check);
    free(self->finished);
    atomic_fetch_sub(&self->ofi->channels_open, 1);
    free(self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------------
//  Writes

static s_xfer_t *
s_xfer_find(pk_ofi_channel_t *self, uint64_t tid)
{
    pk_key_t key = { (const uint8_t *) &tid, sizeof tid, pk_hash_id(tid, 1) };
    pk_keymap_entry_t *e = pk_keymap_find(&self->xfers, &key);
    return e ? (s_xfer_t *) (uintptr_t) e->a : NULL;
}

static void
s_xfer_forget(pk_ofi_channel_t *self, s_xfer_t *x)
{
    pk_key_t key = { (const uint8_t *) &x->tid, sizeof x->tid, pk_hash_id(x->tid, 1) };
    pk_keymap_take(&self->xfers, &key, NULL, NULL);
    free(x);
}

//  Unlinks an op from the list it is on: the queue, or the posted list.
static void
s_unlink(pk_ofi_channel_t *self, s_op_t *op)
{
    s_op_t **head = op->posted ? &self->posted_head : &self->queue_head;
    s_op_t **tail = op->posted ? &self->posted_tail : &self->queue_tail;
    if (op->prev)
        op->prev->next = op->next;
    else
        *head = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        *tail = op->prev;
    op->prev = op->next = NULL;
}

static bool
s_queued(const pk_ofi_channel_t *self, const s_op_t *op)
{
    return !op->posted && (op->prev || op->next || self->queue_head == op);
}

//  A transfer whose ops have all ended: reported by the next poll, or
//  forgotten when a cancel released it.
static void
s_xfer_finish(pk_ofi_channel_t *self, s_xfer_t *x)
{
    if (x->released) {
        s_xfer_forget(self, x);
        return;
    }
    if (self->nfinished == self->capfinished) {
        size_t cap = self->capfinished ? 2 * self->capfinished : 64;
        s_finished_t *f = realloc(self->finished, cap * sizeof *f);
        if (!f)
            abort();        //  a few bytes per transfer; nothing sane remains
        self->finished = f;
        self->capfinished = cap;
    }
    self->finished[self->nfinished++] = (s_finished_t) { x->tid, !x->failed, x->landed };
}

//  An op ended (completed, failed, or dropped before posting).
static void
s_op_end(pk_ofi_channel_t *self, s_op_t *op, bool ok)
{
    s_xfer_t *x = op->xfer;
    if (op->posted) {
        s_unlink(self, op);
        self->credits++;
    }
    op->posted = false;
    if (!ok)
        x->failed = true;
    else
        x->landed += op->blocks;
    if (++x->ended == x->nops)
        s_xfer_finish(self, x);
}

static void
s_post(pk_ofi_channel_t *self)
{
    pk_ofi_t *ofi = self->ofi;
    while (self->queue_head && self->credits > 0 && !self->closed) {
        s_op_t *op = self->queue_head;
        uint64_t remote = self->peer_base + op->remote_off;
        ssize_t rc;
        if (ofi->cq_data && !ofi->config.delivered)
            rc = fi_writedata(self->ep, ofi->base + op->local_off, op->len, self->desc, op->imm,
                              self->peer, remote, self->peer_key, &op->ctx);
        else {
            //  Without an immediate the target cannot count: make the
            //  writer's completion mean delivered instead.  A rail of
            //  several asks the same (config.delivered), with the
            //  immediate: a rail taken out confirmed only what landed.
            struct iovec iov = { ofi->base + op->local_off, op->len };
            struct fi_rma_iov rma = { remote, op->len, self->peer_key };
            struct fi_msg_rma msg = { &iov, &self->desc, 1, self->peer, &rma, 1, &op->ctx,
                                      ofi->cq_data ? op->imm : 0 };
            rc = fi_writemsg(self->ep, &msg, FI_DELIVERY_COMPLETE
                                             | (ofi->cq_data ? FI_REMOTE_CQ_DATA : 0));
        }
        if (rc == 0) {
            s_unlink(self, op);
            op->posted = true;
            op->since = self->moved_at = pk_clock_monotonic();
            op->prev = self->posted_tail;
            if (self->posted_tail)
                self->posted_tail->next = op;
            else
                self->posted_head = op;
            self->posted_tail = op;
            self->credits--;
            self->stats.writes_posted++;
            self->stats.blocks_written += op->blocks;
            continue;
        }
        if (rc == -FI_EAGAIN) {
            //  progress, then retry, until the stall deadline (a peer that
            //  died leaves -FI_EAGAIN forever); see pk_ofi_channel_progress
            if (op->since == 0)
                op->since = pk_clock_monotonic();
            return;
        }
        s_unlink(self, op);
        s_op_end(self, op, false);
    }
}

//  A transfer of nops ops, in the map under a fresh id
static s_xfer_t *
s_xfer_open(pk_ofi_channel_t *self, size_t nops)
{
    s_xfer_t *x = calloc(1, sizeof *x + nops * sizeof *x->ops);
    if (!x)
        return NULL;
    x->tid = self->next_tid++;
    x->nops = nops;
    pk_key_t key = { (const uint8_t *) &x->tid, sizeof x->tid, pk_hash_id(x->tid, 1) };
    if (pk_keymap_put(&self->xfers, &key, (uintptr_t) x, 0) < 0) {
        free(x);
        return NULL;
    }
    return x;
}

//  x's ops join the queue, and what credits allow is posted
static void
s_queue(pk_ofi_channel_t *self, s_xfer_t *x)
{
    for (size_t i = 0; i < x->nops; i++) {
        s_op_t *op = &x->ops[i];
        op->prev = self->queue_tail;
        if (self->queue_tail)
            self->queue_tail->next = op;
        else
            self->queue_head = op;
        self->queue_tail = op;
    }
    s_post(self);
}

static int64_t
s_write_blocks(void *arg, uint64_t round_seq, const uint32_t *local, const uint32_t *remote,
               size_t n)
{
    pk_ofi_channel_t *self = arg;
    pk_ofi_t *ofi = self->ofi;
    if (self->closed || !self->connected || !self->peer_exposed)
        return -ENOTCONN;
    if (n == 0)
        return -EINVAL;
    if (self->peer_block_len != ofi->block_len)
        return -EPROTO;
    //  Every index checked before anything is posted: never outside a pool.
    for (size_t i = 0; i < n; i++)
        if (local[i] >= ofi->num_blocks || remote[i] >= self->peer_blocks)
            return -ERANGE;
    uint64_t max_run = PK_OFI_MAX_WRITE_BYTES / ofi->block_len;
    if (max_run == 0)
        max_run = 1;
    if (max_run > PK_OFI_MAX_WRITE_BLOCKS)
        max_run = PK_OFI_MAX_WRITE_BLOCKS;
    size_t nops = 0;
    for (size_t i = 0, run = 0; i < n; i++) {
        bool extends = i > 0 && run < max_run && local[i] == local[i - 1] + 1
                       && remote[i] == remote[i - 1] + 1;
        run = extends ? run + 1 : 1;
        nops += !extends;
    }
    s_xfer_t *x = s_xfer_open(self, nops);
    if (!x)
        return -ENOMEM;
    uint64_t tag = (round_seq & PK_OFI_TAG_MASK) << 12;
    s_op_t *op = NULL;
    for (size_t i = 0, run = 0; i < n; i++) {
        bool extends = i > 0 && run < max_run && local[i] == local[i - 1] + 1
                       && remote[i] == remote[i - 1] + 1;
        if (!extends) {
            op = op ? op + 1 : x->ops;
            op->xfer = x;
            op->local_off = local[i] * ofi->block_len;
            op->remote_off = remote[i] * ofi->block_len;
            run = 0;
        }
        run++;
        op->blocks = (uint32_t) run;
        op->len = run * ofi->block_len;
        op->imm = tag | run;
        //  the mark: the run's first block at the target (ofi.h)
        if (self->marks && remote[i + 1 - run] <= S_MARK_MAX)
            op->imm |= S_MARK_BIT | (uint64_t) remote[i + 1 - run] << 32;
    }
    s_queue(self, x);
    return (int64_t) x->tid;
}

/*  One slice of a block (transport.h write_slice): one op of its bytes,
    whose immediate counts no block and names block and slice (the bit
    rule of ofi_priv.h).  Only where the provider carries 64 bits of CQ
    data: in 32 there is no room for the block, so verbs and efa send
    blocks whole.  */
static int64_t
s_write_slice(void *arg, uint64_t round_seq, uint32_t local, uint32_t remote, uint32_t slice)
{
    pk_ofi_channel_t *self = arg;
    pk_ofi_t *ofi = self->ofi;
    if (self->closed || !self->connected || !self->peer_exposed)
        return -ENOTCONN;
    if (ofi->info->domain_attr->cq_data_size < 8)
        return -ENOTSUP;
    if (self->peer_block_len != ofi->block_len)
        return -EPROTO;
    pk_slices_t layout = pk_slices_of(ofi->block_len);
    if (local >= ofi->num_blocks || remote >= self->peer_blocks || slice >= layout.n)
        return -ERANGE;
    if (remote > S_SLICE_BLOCK_MAX)
        return -ERANGE;
    s_xfer_t *x = s_xfer_open(self, 1);
    if (!x)
        return -ENOMEM;
    uint64_t off, len = pk_slice_range(&layout, slice, &off);
    s_op_t *op = x->ops;
    op->xfer = x;
    op->local_off = local * ofi->block_len + off;
    op->remote_off = remote * ofi->block_len + off;
    op->len = len;
    op->blocks = 0;
    op->imm = (round_seq & PK_OFI_TAG_MASK) << 12 | S_MARK_BIT
              | ((uint64_t) remote << S_SLICE_BITS | slice) << 32;
    s_queue(self, x);
    return (int64_t) x->tid;
}

static void s_close_endpoint(pk_ofi_channel_t *self);

int
pk_ofi_channel_progress(pk_ofi_channel_t *self)
{
    if (self->closed)
        return 0;
    int total = 0;
    bool completed = false;
    struct fi_cq_data_entry entries[16];
    for (;;) {
        ssize_t n = fi_cq_read(self->cq, entries, 16);
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry e;
            memset(&e, 0, sizeof e);
            if (fi_cq_readerr(self->cq, &e, 0) == 1) {
                self->stats.cq_errors++;
                if (e.op_context && !(e.flags & FI_REMOTE_CQ_DATA))
                    s_op_end(self, (s_op_t *) e.op_context, false);
                total++;
            }
            continue;
        }
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            if (entries[i].flags & FI_REMOTE_CQ_DATA) {
                uint32_t tag = (uint32_t) (entries[i].data >> 12) & PK_OFI_TAG_MASK;
                uint32_t blocks = (uint32_t) entries[i].data & 0xfff;
                if (!blocks && (entries[i].data & S_MARK_BIT)) {
                    //  a slice (ofi_priv.h): its rails' owner counts it
                    uint64_t mark = (entries[i].data >> 32) & S_MARK_MAX;
                    if (self->slice_fn)
                        self->slice_fn(self->slice_arg, tag, (uint32_t) (mark >> S_SLICE_BITS),
                                       (uint32_t) (mark & ((1u << S_SLICE_BITS) - 1)));
                    continue;
                }
                pk_key_t key = { (const uint8_t *) &tag, sizeof tag, pk_hash_id(tag, 2) };
                pk_keymap_entry_t *e = pk_keymap_find(&self->landed, &key);
                s_landed_t *l = e ? (s_landed_t *) (uintptr_t) e->a : NULL;
                if (!l && (l = calloc(1, sizeof *l))) {
                    l->tag = tag;
                    key.bytes = (const uint8_t *) &l->tag;
                    if (pk_keymap_put(&self->landed, &key, (uintptr_t) l, 0) < 0) {
                        free(l);
                        l = NULL;
                    }
                }
                if (l)
                    l->count += blocks;
                self->stats.blocks_landed += blocks;
                //  a marked immediate names its blocks: each expected one
                //  is hashed now, just written, still in cache
                if (entries[i].data & S_MARK_BIT)
                    pk_block_check_landed(&self->check, self->ofi->base, self->ofi->block_len,
                                          (entries[i].data >> 32) & S_MARK_MAX, blocks);
            }
            else if (entries[i].op_context) {
                s_op_end(self, (s_op_t *) entries[i].op_context, true);
                completed = true;
            }
        }
        total += (int) n;
        if (n < 16)
            break;
    }
    s_post(self);
    //  Deadlines are ours to keep: a dead peer's writes neither fail nor
    //  complete, and fi_cancel does not stop RMA writes, so a channel whose
    //  writes stopped moving for the deadline closes its endpoint and every
    //  transfer ends failed.  Stopped moving: writes of ours are out (posted,
    //  or refused with -FI_EAGAIN), the oldest for longer than the deadline,
    //  and none of them completed within it.  Not the oldest write's age
    //  alone: a deep queue to a consumer that keeps up slowly
    //  (64 of them sharing two cores) waits in line longer than the
    //  deadline while its writes complete every few milliseconds, and was
    //  cut off (test_ofi: test_slow_reader_not_stalled).
    double now = pk_clock_monotonic(), limit = self->ofi->config.stall_timeout;
    if (completed)
        self->completed_at = self->moved_at = now;
    double out = self->posted_head ? self->posted_head->since
                 : self->queue_head ? self->queue_head->since : 0;
    if (out > 0 && now - (out > self->completed_at ? out : self->completed_at) > limit)
        s_close_endpoint(self);
    return total;
}

int
pk_ofi_channel_wait_fd(const pk_ofi_channel_t *self)
{
    return self->closed ? -1 : self->wait_fd;
}

//  A writer's sleep policy.  The providers' data progress is manual (a
//  posted write's bytes move when we progress), so a writer used to spin
//  while its writes ran: on a slow link (150 Mbit/s, railnet) the server
//  burnt 0.3-0.6 s of CPU per second of transfer looking at a queue that
//  had nothing.  Its wait fd can be trusted with writes out: tcp's
//  fi_trywait (tcpx_try_func, libfabric 1.17) adds POLLOUT on the socket
//  to the queue's epoll set while it holds bytes not yet sent, and the
//  acknowledgement a write completes on arrives as POLLIN; rxm nests
//  tcp's queue and event queue (connection events) in its own set.  But a
//  sleep costs a wake (tens of microseconds here) and fi_trywait several
//  epoll_waits, which a write about to complete should not pay: a write on
//  a fast link completes within tens of microseconds.  So a writer spins
//  while a write of its moved (posted or completed) within S_WRITER_SPIN,
//  and sleeps on the fd after that.  A slow link then costs a spin of
//  S_WRITER_SPIN per completion and per post, not the whole transfer.
#define S_WRITER_SPIN 250e-6

bool
pk_ofi_channel_trywait(pk_ofi_channel_t *self)
{
    if (self->closed)
        return true;
    //  transfers ended but not yet reported are the owner's next poll's:
    //  nothing on the fd would wake it for them
    if (self->nfinished)
        return false;
    //  a write the provider refused (-FI_EAGAIN with credits left: rxm
    //  while it connects) is retried at each progress; no event says when
    if (self->queue_head && self->credits > 0)
        return false;
    bool out = self->queue_head || self->posted_head;
    //  no wait object (shm): the owner may sleep, on the short progress
    //  timer it keeps for such a channel, when none of its writes is out;
    //  answering false when idle made an idle shm consumer spin a core
    if (self->wait_fd < 0)
        return !out;
    if (out && pk_clock_monotonic() - self->moved_at < S_WRITER_SPIN)
        return false;
    struct fid *fids[1] = { &self->cq->fid };
    return fi_trywait(self->ofi->fabric, fids, 1) == FI_SUCCESS;
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
    pk_ofi_channel_t *self = arg;
    pk_ofi_channel_progress(self);
    if (!self->nfinished)
        return;
    s_finished_t *list = self->finished;
    size_t n = self->nfinished;
    self->finished = NULL;
    self->nfinished = self->capfinished = 0;
    qsort(list, n, sizeof *list, s_cmp_finished);
    for (size_t i = 0; i < n; i++) {
        s_xfer_t *x = s_xfer_find(self, list[i].tid);
        if (!x || x->released)
            continue;
        s_xfer_forget(self, x);
        each(each_arg, list[i].tid, list[i].ok, list[i].landed);
    }
    free(list);
}

//  Ends every transfer of a closed channel: listed ones released, the
//  others reported failed by the next poll.
static void
s_close_endpoint(pk_ofi_channel_t *self)
{
    if (self->closed)
        return;
    //  Closing the endpoint is the only sure stop: fi_cancel does nothing
    //  for RMA writes (protocol.md section 7).
    fi_close(&self->ep->fid);
    self->ep = NULL;
    self->closed = true;
    //  Collect first: finishing a transfer may forget it, which moves
    //  entries of the table being walked.
    size_t n = 0, cap = pk_keymap_size(&self->xfers);
    s_xfer_t **open = malloc((cap ? cap : 1) * sizeof *open);
    size_t at = 0;
    for (pk_keymap_entry_t *e; open && (e = pk_keymap_next(&self->xfers, &at)); ) {
        s_xfer_t *x = (s_xfer_t *) (uintptr_t) e->a;
        if (x->ended < x->nops)
            open[n++] = x;
    }
    for (size_t i = 0; i < n; i++) {
        open[i]->failed = true;
        open[i]->ended = open[i]->nops;
        s_xfer_finish(self, open[i]);
    }
    free(open);
    self->queue_head = self->queue_tail = NULL;
    self->posted_head = self->posted_tail = NULL;
    self->credits = self->depth;
}

static size_t
s_cancel(void *arg, const uint64_t *tids, size_t n, pk_cancel_mode_t mode, uint64_t *still)
{
    pk_ofi_channel_t *self = arg;
    size_t nstill = 0;
    if (mode == PK_CANCEL_IMMEDIATE) {
        //  Listed transfers are released (never reported); the channel's
        //  others end failed.  Finished-but-unreported ones are dropped too.
        for (size_t i = 0; i < n; i++) {
            s_xfer_t *x = s_xfer_find(self, tids[i]);
            if (!x)
                continue;
            for (size_t f = 0; f < self->nfinished; f++)
                if (self->finished[f].tid == x->tid)
                    self->finished[f] = self->finished[--self->nfinished];
            if (x->ended == x->nops)
                s_xfer_forget(self, x);
            else
                x->released = true;
        }
        s_close_endpoint(self);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        s_xfer_t *x = s_xfer_find(self, tids[i]);
        if (!x || x->released)
            continue;
        size_t posted = 0, dropped = 0;
        for (size_t k = 0; k < x->nops; k++) {
            s_op_t *op = &x->ops[k];
            if (op->posted)
                posted++;
            else if (s_queued(self, op)) {
                s_unlink(self, op);
                x->failed = true;
                dropped++;
            }
        }
        //  ended through s_op_end's bookkeeping, so the transfer is
        //  finished (and reported) when its last write ends
        if (dropped && (x->ended += dropped) == x->nops)
            s_xfer_finish(self, x);
        if (posted || x->landed) {
            //  writes still run, or some landed: reported by poll, with
            //  how many landed
            still[nstill++] = x->tid;
        }
        else {
            //  nothing of it can still read the source or has landed:
            //  gone, unreported
            for (size_t f = 0; f < self->nfinished; f++)
                if (self->finished[f].tid == x->tid)
                    self->finished[f] = self->finished[--self->nfinished];
            s_xfer_forget(self, x);
        }
    }
    return nstill;
}

pk_transport_t
pk_ofi_channel_transport(pk_ofi_channel_t *self)
{
    //  slices only where the immediate has room to name them (ofi_priv.h)
    bool wide = self->ofi->info->domain_attr->cq_data_size >= 8;
    return (pk_transport_t) { .self = self, .write_blocks = s_write_blocks, .poll = s_poll,
                              .cancel = s_cancel, .write_slice = wide ? s_write_slice : NULL };
}

static s_landed_t *
s_landed_find(pk_ofi_channel_t *self, uint32_t tag)
{
    pk_key_t key = { (const uint8_t *) &tag, sizeof tag, pk_hash_id(tag, 2) };
    pk_keymap_entry_t *e = pk_keymap_find(&self->landed, &key);
    return e ? (s_landed_t *) (uintptr_t) e->a : NULL;
}

int
pk_ofi_channel_slice_sink(pk_ofi_channel_t *self, pk_slice_fn *fn, void *arg)
{
    if (self->ofi->info->domain_attr->cq_data_size < 8)
        return -ENOTSUP;
    self->slice_fn = fn;
    self->slice_arg = arg;
    return 0;
}

void
pk_ofi_channel_marks(pk_ofi_channel_t *self)
{
    self->marks = self->ofi->info->domain_attr->cq_data_size >= 8;
}

int
pk_ofi_channel_expect(pk_ofi_channel_t *self, const uint32_t *dest, const uint64_t *sums,
                      size_t n)
{
    if (!self->expose_mr)
        return -EINVAL;             //  a writer: nothing lands here
    return pk_block_check_expect(&self->check, self->ofi->num_blocks, dest, sums, n);
}

void
pk_ofi_channel_verdicts(pk_ofi_channel_t *self, const uint32_t *dest, uint8_t *verdict,
                        size_t n)
{
    pk_block_check_verdicts(&self->check, dest, verdict, n);
}

uint64_t
pk_ofi_channel_landed(pk_ofi_channel_t *self, uint64_t round_seq)
{
    s_landed_t *l = s_landed_find(self, (uint32_t) (round_seq & PK_OFI_TAG_MASK));
    if (!l)
        return 0;
    if (!l->owned) {
        l->owned = true;
        l->round = round_seq;
    }
    else if (l->round != round_seq) {
        //  an older round's count under the same tag, never forgotten:
        //  what landed for this round so far cannot be told from it, so
        //  the count starts over (the load may time out; it never ends
        //  early)
        l->round = round_seq;
        l->count = 0;
    }
    return l->count;
}

void
pk_ofi_channel_forget(pk_ofi_channel_t *self, uint64_t round_seq)
{
    uint32_t tag = (uint32_t) (round_seq & PK_OFI_TAG_MASK);
    s_landed_t *l = s_landed_find(self, tag);
    if (!l || (l->owned && l->round != round_seq))
        return;     //  nothing counted, or the tag now belongs to another round
    pk_key_t key = { (const uint8_t *) &tag, sizeof tag, pk_hash_id(tag, 2) };
    pk_keymap_take(&self->landed, &key, NULL, NULL);
    free(l);
}

void
pk_ofi_channel_revoke(pk_ofi_channel_t *self)
{
    if (self->expose_mr) {
        fi_close(&self->expose_mr->fid);
        self->expose_mr = NULL;
    }
}

bool
pk_ofi_channel_closed(const pk_ofi_channel_t *self)
{
    return self->closed;
}

void
pk_ofi_channel_stats(const pk_ofi_channel_t *self, pk_ofi_stats_t *stats)
{
    *stats = self->stats;
    stats->transfers = pk_keymap_size(&self->xfers);
}

int
pk_ofi_bench_raw(pk_channel_t *channel, pk_ofi_raw_t *raw)
{
    pk_ofi_channel_t *self = (pk_ofi_channel_t *) channel;
    if (self->closed || !self->connected)
        return -ENOTCONN;
    *raw = (pk_ofi_raw_t) { self->ep, self->cq, self->peer, self->peer_key, self->peer_base,
                            self->desc, self->ofi->base, self->ofi->block_len };
    return 0;
}

