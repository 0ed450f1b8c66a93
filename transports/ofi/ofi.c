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
#include "ofi/ofi_bench.h"
#include "base/clock.h"
#include "base/keymap.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

//  The mr_mode bits this code honours.  FI_MR_RAW (keys wider than 64
//  bits, mapped by the writer with fi_mr_map_raw) is written to the
//  manual but untested: no provider here demands it.
#define S_MR_MODES (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY \
                    | FI_MR_ENDPOINT | FI_MR_RAW)
#define S_MAX_RAW_KEY 256
#define S_MAX_DEPTH 64
#define S_BLOB_MAGIC "PKOF"
#define S_MAX_ADDR 256

struct _pk_ofi_t {
    pk_ofi_config_t config;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_mr *local_mr;        //  for FI_MR_LOCAL, unless FI_MR_ENDPOINT
    uint8_t *base;
    uint64_t num_blocks, block_len;
    bool cq_data;                   //  4 bytes of remote CQ data at least
    char provider[64];
    //  What peers' blobs cost: channels may open and close on several
    //  threads at once (one actor each), hence atomics.
    atomic_uint_fast64_t channels_opened, channels_open, blobs_refused;
};

typedef struct s_op s_op_t;
typedef struct s_xfer s_xfer_t;

struct s_op {
    struct fi_context ctx;          //  first: providers may use it (FI_CONTEXT)
    s_xfer_t *xfer;
    uint64_t local_off, remote_off, len;
    uint64_t imm;
    uint32_t blocks;
    bool posted;
    double since;                   //  first -FI_EAGAIN, then the time posted
    s_op_t *prev, *next;            //  the queue of ops not yet posted, then
                                    //  the list of posted ones, oldest first
};

struct s_xfer {
    uint64_t tid;
    size_t nops, ended;
    uint64_t landed;                //  blocks of completed writes
    bool failed, released;
    s_op_t ops[];
};

//  A round tag's counter.  The immediate carries only the tag, so the
//  counter is claimed by the first full round that asks for it; asked for
//  by another round it starts over, and forget drops it when the round's
//  load ended: after 2^20 rounds a tag never hands a new round an old
//  round's count (a fetch reported landed early).
typedef struct {
    uint32_t tag;
    bool owned;
    uint64_t round;                 //  the full round, once owned
    uint64_t count;
} s_landed_t;

typedef struct {
    uint64_t tid;
    bool ok;
    uint64_t landed;
} s_finished_t;

struct _pk_ofi_channel_t {
    pk_ofi_t *ofi;
    struct fid_ep *ep;
    struct fid_cq *cq;
    int wait_fd;                    //  the CQ's wait object, or -1
    struct fid_av *av;
    struct fid_mr *expose_mr;       //  the pool, for this peer's remote writes
    struct fid_mr *local_mr;        //  per endpoint when FI_MR_ENDPOINT
    void *desc;
    uint64_t expose_key;
    uint8_t raw_key[S_MAX_RAW_KEY]; //  FI_MR_RAW: the exposed key's bytes
    size_t raw_key_len;
    uint64_t raw_base;              //  FI_MR_RAW: the address the peer uses
    bool closed;

    bool connected;
    fi_addr_t peer;
    uint64_t peer_key, peer_base, peer_blocks, peer_block_len;
    bool peer_exposed;
    bool peer_key_mapped;           //  peer_key came from fi_mr_map_raw

    size_t depth, credits;
    s_op_t *queue_head, *queue_tail;
    s_op_t *posted_head, *posted_tail;
    uint64_t next_tid;
    pk_keymap_t xfers;              //  tid -> transfer, until reported or released
    s_finished_t *finished;
    size_t nfinished, capfinished;
    pk_keymap_t landed;             //  round tag -> s_landed_t
    pk_ofi_stats_t stats;
};

static atomic_uint_fast64_t s_next_key = 1;

//  --------------------------------------------------------------------------
//  The fabric

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
    int rc = fi_getinfo(FI_VERSION(1, 17), config->node, NULL, config->node ? FI_SOURCE : 0,
                        hints, info_p);
    fi_freeinfo(hints);
    return rc;
}

static int
s_register(pk_ofi_t *ofi, uint64_t access, struct fid_ep *ep, struct fid_mr **mr_p)
{
    uint64_t key = atomic_fetch_add(&s_next_key, 1);
    int rc = fi_mr_reg(ofi->domain, ofi->base, ofi->num_blocks * ofi->block_len, access, 0, key,
                       0, mr_p, NULL);
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
    pk_ofi_config_t dflt = { NULL, NULL, 5.0 };
    self->config = config ? *config : dflt;
    self->base = base;
    self->num_blocks = num_blocks;
    self->block_len = block_len;
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
    if (rc_p)
        *rc_p = rc < 0 ? rc : -rc;
    return NULL;
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

//  A target (it exposes its pool) gets a file descriptor to sleep on while
//  idle, where the provider has one; a writer spins while its writes run
//  and needs none (signalling it costs every completion).
static int
s_cq_open(pk_ofi_t *ofi, bool expose, pk_ofi_channel_t *self)
{
    struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA,
                                  .wait_obj = expose ? FI_WAIT_FD : FI_WAIT_NONE,
                                  .size = 4 * S_MAX_DEPTH + 1024 };
    self->wait_fd = -1;
    int rc = fi_cq_open(ofi->domain, &cq_attr, &self->cq, NULL);
    if (rc == 0 && expose && fi_control(&self->cq->fid, FI_GETWAIT, &self->wait_fd) != 0) {
        fi_close(&self->cq->fid);
        self->wait_fd = -1;
        rc = -FI_ENOSYS;
    }
    if (rc && expose) {
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
    self->ofi = ofi;
    self->next_tid = 1;
    self->depth = ofi->info->tx_attr->size < S_MAX_DEPTH ? ofi->info->tx_attr->size : S_MAX_DEPTH;
    if (self->depth == 0)
        self->depth = 1;
    self->credits = self->depth;
    rc = s_cq_open(ofi, expose, self);
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
    if (rc_p)
        *rc_p = rc < 0 ? rc : -rc;
    return NULL;
}

static void
s_free_transfers(pk_ofi_channel_t *self)
{
    for (size_t i = 0; self->xfers.slots && i <= self->xfers.mask; i++)
        if (self->xfers.slots[i].key.bytes)
            free((s_xfer_t *) (uintptr_t) self->xfers.slots[i].a);
    pk_keymap_fini(&self->xfers);
    self->queue_head = self->queue_tail = NULL;
}

void
pk_ofi_channel_destroy(pk_ofi_channel_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_ofi_channel_t *self = *self_p;
    //  Registrations first: nothing the peer sends lands once they close.
    if (self->expose_mr)
        fi_close(&self->expose_mr->fid);
    if (self->local_mr)
        fi_close(&self->local_mr->fid);
    if (self->ep)
        fi_close(&self->ep->fid);
    if (self->peer_key_mapped)
        fi_mr_unmap_key(self->ofi->domain, self->peer_key);
    fi_close(&self->av->fid);
    fi_close(&self->cq->fid);
    s_free_transfers(self);
    for (size_t i = 0; self->landed.slots && i <= self->landed.mask; i++)
        if (self->landed.slots[i].key.bytes)
            free((s_landed_t *) (uintptr_t) self->landed.slots[i].a);
    pk_keymap_fini(&self->landed);
    free(self->finished);
    atomic_fetch_sub(&self->ofi->channels_open, 1);
    free(self);
    *self_p = NULL;
}

//  Blob: "PKOF", u32 libfabric version, u16 + provider, u16 + address,
//  u64 key, base, num_blocks, block_len, u8 exposed, u16 + raw key (empty
//  unless FI_MR_RAW; then base is the one fi_mr_raw_attr gave).
int
pk_ofi_channel_blob(pk_ofi_channel_t *self, uint8_t **blob_p, size_t *len_p)
{
    uint8_t addr[S_MAX_ADDR];
    size_t addrlen = sizeof addr;
    int rc = fi_getname(&self->ep->fid, addr, &addrlen);
    if (rc)
        return rc < 0 ? rc : -rc;
    const char *prov = self->ofi->provider;
    uint16_t provlen = (uint16_t) strlen(prov), alen = (uint16_t) addrlen;
    uint32_t version = fi_version();
    uint64_t base = (self->ofi->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
                    ? (uint64_t) (uintptr_t) self->ofi->base : 0;
    if (self->raw_key_len)
        base = self->raw_base;
    uint64_t fields[4] = { self->expose_key, base, self->ofi->num_blocks, self->ofi->block_len };
    uint8_t exposed = self->expose_mr != NULL;
    uint16_t rawlen = (uint16_t) self->raw_key_len;
    size_t len = 4 + 4 + 2 + provlen + 2 + addrlen + sizeof fields + 1 + 2 + rawlen;
    uint8_t *blob = malloc(len), *at = blob;
    if (!blob)
        return -ENOMEM;
    memcpy(at, S_BLOB_MAGIC, 4), at += 4;
    memcpy(at, &version, 4), at += 4;
    memcpy(at, &provlen, 2), at += 2;
    memcpy(at, prov, provlen), at += provlen;
    memcpy(at, &alen, 2), at += 2;
    memcpy(at, addr, addrlen), at += addrlen;
    memcpy(at, fields, sizeof fields), at += sizeof fields;
    *at++ = exposed;
    memcpy(at, &rawlen, 2), at += 2;
    memcpy(at, self->raw_key, rawlen);
    *blob_p = blob;
    *len_p = len;
    return 0;
}

//  A peer's blob, parsed; views into the caller's bytes.
typedef struct {
    const uint8_t *addr, *raw;
    uint16_t addrlen, rawlen;
    uint64_t key, base, num_blocks, block_len;
    bool exposed;
} s_blob_t;

//  Every check that needs no libfabric object: check_blob runs it on a
//  connect before the daemon builds a channel (an endpoint, queue and
//  address vector cost tens of megabytes on some providers), and connect
//  runs it again.
static int
s_parse_blob(const pk_ofi_t *ofi, const uint8_t *blob, size_t len, s_blob_t *b, char *err)
{
    const uint8_t *at = blob, *end = blob + len;
    uint32_t version;
    uint16_t provlen;
    uint64_t fields[4];
    if (!blob || len < 12 || memcmp(at, S_BLOB_MAGIC, 4) != 0)
        return pk_err(err, -EPROTO, "agent_metadata: not a p2pkv libfabric address");
    at += 4;
    memcpy(&version, at, 4), at += 4;
    memcpy(&provlen, at, 2), at += 2;
    if (end - at < provlen + 2)
        return pk_err(err, -EPROTO, "agent_metadata: truncated");
    char prov[64];
    snprintf(prov, sizeof prov, "%.*s", (int) provlen, (const char *) at);
    at += provlen;
    memcpy(&b->addrlen, at, 2), at += 2;
    if ((size_t) (end - at) < b->addrlen + sizeof fields + 1 + 2)
        return pk_err(err, -EPROTO, "agent_metadata: truncated");
    memcpy(&b->rawlen, at + b->addrlen + sizeof fields + 1, 2);
    if ((size_t) (end - at) != b->addrlen + sizeof fields + 1 + 2 + b->rawlen)
        return pk_err(err, -EPROTO, "agent_metadata: truncated");
    if (provlen >= sizeof prov || strcmp(prov, ofi->provider) != 0)
        return pk_err(err, -EPROTO, "agent_metadata: provider %s, ours is %s", prov,
                      ofi->provider);
    if (version != fi_version())
        return pk_err(err, -EPROTO, "agent_metadata: libfabric %u.%u, ours is %u.%u",
                      FI_MAJOR(version), FI_MINOR(version), FI_MAJOR(fi_version()),
                      FI_MINOR(fi_version()));
    b->addr = at;
    at += b->addrlen;
    memcpy(fields, at, sizeof fields), at += sizeof fields;
    b->key = fields[0];
    b->base = fields[1];
    b->num_blocks = fields[2];
    b->block_len = fields[3];
    if (b->addrlen == 0 || b->addrlen > S_MAX_ADDR)
        return pk_err(err, -EPROTO, "agent_metadata: an address of %u bytes (1..%d)",
                      (unsigned) b->addrlen, S_MAX_ADDR);
    if (*at > 1)
        return pk_err(err, -EPROTO, "agent_metadata: exposed flag %u", (unsigned) *at);
    b->exposed = *at != 0;
    if (b->block_len != ofi->block_len)
        return pk_err(err, -EPROTO, "agent_metadata: blocks of %llu bytes, ours are %llu",
                      (unsigned long long) b->block_len, (unsigned long long) ofi->block_len);
    if (b->exposed && (b->num_blocks == 0 || b->num_blocks > UINT32_MAX))
        return pk_err(err, -EPROTO, "agent_metadata: a pool of %llu blocks",
                      (unsigned long long) b->num_blocks);
    b->raw = at + 1 + 2;
    bool want_raw = (ofi->info->domain_attr->mr_mode & FI_MR_RAW) && b->exposed;
    if (want_raw != (b->rawlen > 0) || b->rawlen > S_MAX_RAW_KEY)
        return pk_err(err, -EPROTO, "agent_metadata: %s raw memory key",
                      b->rawlen > S_MAX_RAW_KEY ? "an oversized"
                      : b->rawlen ? "an unexpected" : "no");
    return 0;
}

int
pk_ofi_check_blob(pk_ofi_t *self, const uint8_t *blob, size_t len, char *err)
{
    s_blob_t b;
    int rc = s_parse_blob(self, blob, len, &b, err);
    if (rc)
        atomic_fetch_add(&self->blobs_refused, 1);
    return rc;
}

int
pk_ofi_channel_connect(pk_ofi_channel_t *self, const uint8_t *blob, size_t len, char *err)
{
    s_blob_t b;
    int rc = pk_ofi_check_blob(self->ofi, blob, len, err);
    if (rc)
        return rc;
    if (self->connected)
        return pk_err(err, -EISCONN, "ofi: channel already has a peer");
    if (self->closed)
        return pk_err(err, -ENOTCONN, "ofi: channel is closed");
    s_parse_blob(self->ofi, blob, len, &b, NULL);
    if (fi_av_insert(self->av, b.addr, 1, &self->peer, 0, NULL) != 1)
        return pk_err(err, -EPROTO, "agent_metadata: address not accepted by the fabric");
    self->peer_key = b.key;
    if (b.rawlen) {
        uint64_t key;
        rc = fi_mr_map_raw(self->ofi->domain, b.base, (uint8_t *) b.raw, b.rawlen, &key, 0);
        if (rc) {
            fi_av_remove(self->av, &self->peer, 1, 0);
            return pk_err(err, rc, "agent_metadata: raw key not accepted: %s", fi_strerror(-rc));
        }
        self->peer_key = key;
        self->peer_key_mapped = true;
    }
    self->peer_base = b.base;
    self->peer_blocks = b.num_blocks;
    self->peer_block_len = b.block_len;
    self->peer_exposed = b.exposed;
    self->connected = true;
    return 0;
}

void
pk_ofi_stats_fabric(const pk_ofi_t *self, pk_fabric_stats_t *stats)
{
    *stats = (pk_fabric_stats_t) { atomic_load(&self->channels_opened),
                                   atomic_load(&self->channels_open),
                                   atomic_load(&self->blobs_refused) };
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
        if (ofi->cq_data)
            rc = fi_writedata(self->ep, ofi->base + op->local_off, op->len, self->desc, op->imm,
                              self->peer, remote, self->peer_key, &op->ctx);
        else {
            //  Without an immediate the target cannot count: make the
            //  writer's completion mean delivered instead.
            struct iovec iov = { ofi->base + op->local_off, op->len };
            struct fi_rma_iov rma = { remote, op->len, self->peer_key };
            struct fi_msg_rma msg = { &iov, &self->desc, 1, self->peer, &rma, 1, &op->ctx, 0 };
            rc = fi_writemsg(self->ep, &msg, FI_DELIVERY_COMPLETE);
        }
        if (rc == 0) {
            s_unlink(self, op);
            op->posted = true;
            op->since = pk_clock_monotonic();
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
    s_xfer_t *x = calloc(1, sizeof *x + nops * sizeof *x->ops);
    if (!x)
        return -ENOMEM;
    x->tid = self->next_tid++;
    x->nops = nops;
    pk_key_t key = { (const uint8_t *) &x->tid, sizeof x->tid, pk_hash_id(x->tid, 1) };
    if (pk_keymap_put(&self->xfers, &key, (uintptr_t) x, 0) < 0) {
        free(x);
        return -ENOMEM;
    }
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
    }
    for (size_t i = 0; i < nops; i++) {
        op = &x->ops[i];
        op->prev = self->queue_tail;
        if (self->queue_tail)
            self->queue_tail->next = op;
        else
            self->queue_head = op;
        self->queue_tail = op;
    }
    s_post(self);
    return (int64_t) x->tid;
}

static void s_close_endpoint(pk_ofi_channel_t *self);

int
pk_ofi_channel_progress(pk_ofi_channel_t *self)
{
    if (self->closed)
        return 0;
    int total = 0;
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
            }
            else if (entries[i].op_context)
                s_op_end(self, (s_op_t *) entries[i].op_context, true);
        }
        total += (int) n;
        if (n < 16)
            break;
    }
    s_post(self);
    //  Deadlines are ours to keep: a dead peer's writes neither fail nor
    //  complete, and fi_cancel does not stop RMA writes, so a write stalled
    //  past the deadline closes the endpoint and every transfer ends failed.
    double now = pk_clock_monotonic(), limit = self->ofi->config.stall_timeout;
    if ((self->posted_head && now - self->posted_head->since > limit)
        || (self->queue_head && self->queue_head->since > 0
            && now - self->queue_head->since > limit))
        s_close_endpoint(self);
    return total;
}

int
pk_ofi_channel_wait_fd(const pk_ofi_channel_t *self)
{
    return self->closed ? -1 : self->wait_fd;
}

bool
pk_ofi_channel_trywait(pk_ofi_channel_t *self)
{
    if (self->closed || self->wait_fd < 0)
        return self->closed;
    //  writes of ours still queued need progress, not sleep
    if (self->queue_head)
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
    for (size_t i = 0; open && self->xfers.slots && i <= self->xfers.mask; i++) {
        if (!self->xfers.slots[i].key.bytes)
            continue;
        s_xfer_t *x = (s_xfer_t *) (uintptr_t) self->xfers.slots[i].a;
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
    return (pk_transport_t) { self, s_write_blocks, s_poll, s_cancel };
}

static s_landed_t *
s_landed_find(pk_ofi_channel_t *self, uint32_t tag)
{
    pk_key_t key = { (const uint8_t *) &tag, sizeof tag, pk_hash_id(tag, 2) };
    pk_keymap_entry_t *e = pk_keymap_find(&self->landed, &key);
    return e ? (s_landed_t *) (uintptr_t) e->a : NULL;
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

//  --------------------------------------------------------------------------
//  The seam: pk_transport_ops_t over the functions above.  The casts are
//  the whole adapter: a pk_fabric_t is a pk_ofi_t, a pk_channel_t a
//  pk_ofi_channel_t, never mixed with another implementation's.

static pk_fabric_t *
s_fabric_open(const pk_fabric_config_t *config, void *base, uint64_t num_blocks,
              uint64_t block_len, int *rc_p, char *err)
{
    pk_ofi_config_t oc = { NULL, NULL, 5.0 };
    if (config)
        oc = (pk_ofi_config_t) { config->provider, config->node, config->stall_timeout };
    return (pk_fabric_t *) pk_ofi_new(&oc, base, num_blocks, block_len, rc_p, err);
}

static void
s_fabric_close(pk_fabric_t **fabric_p)
{
    pk_ofi_destroy((pk_ofi_t **) fabric_p);
}

static void
s_fabric_describe(const pk_fabric_t *fabric, char *buf, size_t len)
{
    pk_ofi_describe((const pk_ofi_t *) fabric, buf, len);
}

static const char *
s_fabric_provider(const pk_fabric_t *fabric)
{
    return pk_ofi_provider((const pk_ofi_t *) fabric);
}

static bool
s_fabric_has_cq_data(const pk_fabric_t *fabric)
{
    return pk_ofi_has_cq_data((const pk_ofi_t *) fabric);
}

static int
s_check_blob(pk_fabric_t *fabric, const uint8_t *blob, size_t len, char *err)
{
    return pk_ofi_check_blob((pk_ofi_t *) fabric, blob, len, err);
}

static void
s_fabric_stats(const pk_fabric_t *fabric, pk_fabric_stats_t *stats)
{
    pk_ofi_stats_fabric((const pk_ofi_t *) fabric, stats);
}

static pk_channel_t *
s_channel_new(pk_fabric_t *fabric, bool expose, int *rc_p, char *err)
{
    return (pk_channel_t *) pk_ofi_channel_new((pk_ofi_t *) fabric, expose, rc_p, err);
}

static void
s_channel_close(pk_channel_t **channel_p)
{
    pk_ofi_channel_destroy((pk_ofi_channel_t **) channel_p);
}

static int
s_channel_blob(pk_channel_t *channel, uint8_t **blob_p, size_t *len_p)
{
    return pk_ofi_channel_blob((pk_ofi_channel_t *) channel, blob_p, len_p);
}

static int
s_channel_connect(pk_channel_t *channel, const uint8_t *blob, size_t len, char *err)
{
    return pk_ofi_channel_connect((pk_ofi_channel_t *) channel, blob, len, err);
}

static int
s_channel_progress(pk_channel_t *channel)
{
    return pk_ofi_channel_progress((pk_ofi_channel_t *) channel);
}

static int
s_channel_wait_fd(const pk_channel_t *channel)
{
    return pk_ofi_channel_wait_fd((const pk_ofi_channel_t *) channel);
}

static bool
s_channel_trywait(pk_channel_t *channel)
{
    return pk_ofi_channel_trywait((pk_ofi_channel_t *) channel);
}

static uint64_t
s_channel_landed(pk_channel_t *channel, uint64_t round_seq)
{
    return pk_ofi_channel_landed((pk_ofi_channel_t *) channel, round_seq);
}

static void
s_channel_forget(pk_channel_t *channel, uint64_t round_seq)
{
    pk_ofi_channel_forget((pk_ofi_channel_t *) channel, round_seq);
}

static void
s_channel_revoke(pk_channel_t *channel)
{
    pk_ofi_channel_revoke((pk_ofi_channel_t *) channel);
}

static bool
s_channel_closed(const pk_channel_t *channel)
{
    return pk_ofi_channel_closed((const pk_ofi_channel_t *) channel);
}

static void
s_channel_stats(const pk_channel_t *channel, pk_channel_stats_t *stats)
{
    pk_ofi_stats_t f;
    pk_ofi_channel_stats((const pk_ofi_channel_t *) channel, &f);
    *stats = (pk_channel_stats_t) { f.writes_posted, f.blocks_written, f.cq_errors,
                                    f.blocks_landed, f.transfers };
}

static pk_transport_t
s_channel_transport(pk_channel_t *channel)
{
    return pk_ofi_channel_transport((pk_ofi_channel_t *) channel);
}

const pk_transport_ops_t pk_ofi_transport_ops = {
    .size = sizeof (pk_transport_ops_t),
    .name = "ofi",
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
};
