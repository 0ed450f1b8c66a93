/*  ofi_blob.c: a channel's address blob (agent_metadata): ours described,
    a peer's checked before any libfabric object exists, then imported.  */
#include "base/err.h"
#include "ofi/ofi.h"
#include "ofi/ofi_priv.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
pk_ofi_blob_provider(const uint8_t *blob, size_t len, char *out, size_t cap, char *err)
{
    uint16_t provlen;
    if (!blob || len < 12 || memcmp(blob, S_BLOB_MAGIC, 4) != 0)
        return pk_err(err, -EPROTO, "agent_metadata: not a p2pkv libfabric address");
    memcpy(&provlen, blob + 8, 2);          //  after the magic and the version
    if (len - 10 < provlen || provlen == 0 || provlen >= cap)
        return pk_err(err, -EPROTO, "agent_metadata: truncated");
    snprintf(out, cap, "%.*s", (int) provlen, (const char *) blob + 10);
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

