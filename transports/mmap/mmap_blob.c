/*  mmap_blob.c: the mmap transport's address blob (mmap_priv.h): which
    process, user, host and socket a consumer is, and the checks a server
    makes before it builds anything for it (a parse, nothing more).  */
#include "mmap/mmap_priv.h"
#include "base/clock.h"
#include "base/err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int
pk_mmap_blob_provider(const uint8_t *blob, size_t len, char *out, size_t cap, char *err)
{
    if (len < 4 || memcmp(blob, PK_MMAP_MAGIC, 4) != 0)
        return pk_err(err, -EPROTO, "agent_metadata: not an mmap blob");
    snprintf(out, cap, "%s", PK_MMAP_PROVIDER);
    return 0;
}

int
pk_mmap_parse_blob(pk_mmap_fabric_t *self, const uint8_t *bytes, size_t len,
                   pk_mmap_blob_t *b, char *err)
{
    if (len != sizeof *b || memcmp(bytes, PK_MMAP_MAGIC, 4) != 0)
        return pk_err(err, -EPROTO, "agent_metadata: an mmap blob is %zu bytes, not %zu",
                      sizeof *b, len);
    memcpy(b, bytes, sizeof *b);
    if (b->version != PK_MMAP_VERSION)
        return pk_err(err, -EPROTO, "agent_metadata: mmap blob version %u, ours is %u",
                      b->version, PK_MMAP_VERSION);
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

int
pk_mmap_check_blob(pk_fabric_t *fabric, const uint8_t *blob, size_t len, char *err)
{
    pk_mmap_fabric_t *self = (pk_mmap_fabric_t *) fabric;
    pk_mmap_blob_t b;
    int rc = pk_mmap_parse_blob(self, blob, len, &b, err);
    if (rc == 0 && b.target && self->ro_fd < 0)
        rc = pk_err(err, -EPROTO, "mmap: this side serves no writes: %s", self->no_fd);
    if (rc)
        self->refused++;
    return rc;
}

int
pk_mmap_channel_blob(pk_channel_t *channel, uint8_t **blob_p, size_t *len_p)
{
    pk_mmap_channel_t *self = (pk_mmap_channel_t *) channel;
    pk_mmap_blob_t *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    memcpy(b->magic, PK_MMAP_MAGIC, 4);
    b->version = PK_MMAP_VERSION;
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
