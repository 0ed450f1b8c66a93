/*  fabrics.c: the client's data plane, one fabric per provider it uses.

    A named config.provider is every server's: its fabric opens with the
    client, so a provider libfabric lacks fails p2pkv_client_new as it
    always did.  Under auto (NULL or "auto") nothing opens until a connect
    has the server's description: then the best provider both sides have:
    when the server runs on this host (its host identity is ours: the
    same boot and network and IPC namespaces, base/host_id.h), the
    first same-host provider (mmap, shm) the server lists; else the first
    network provider of the server's list, best first.  Which providers
    reach only this host their transports say (pk_transport_provider),
    never a name here.  A fabric, once open, serves every server of its provider (one channel
    each), so a client talking to a same-host server and a remote one
    holds two fabrics, each registering the pool once.

    A same-host provider the server refuses (mmap serves its own user
    only; another user or namespace) is passed over at the next try of
    the same connect (client.c, s_connect), which then uses the next
    provider both sides have, over the network.
*/
#include "client/client_internal.h"
#include "base/host_id.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

//  The fabric of provider name (as asked, or as libfabric named it: a
//  server announces "tcp;ofi_rxm" where it was asked for tcp), opened
//  when none is.  NULL with *rc_p a negative errno and err.
static const pk_client_fabric_t *
s_fabric(p2pkv_client_t *self, const char *name, int *rc_p, char *err)
{
    for (size_t i = 0; i < self->nfabrics; i++)
        if (strcmp(self->fabrics[i].asked, name) == 0
            || strcmp(pk_fabric_provider(self->fabrics[i].fabric), name) == 0)
            return &self->fabrics[i];
    if (self->nfabrics == S_MAX_FABRICS) {
        *rc_p = pk_err(err, -ENOSPC, "at most %d providers at once", S_MAX_FABRICS);
        return NULL;
    }
    pk_fabric_config_t fc = { name, self->node, self->config.stall_timeout, 0, false };
    char why[PK_ERRLEN];
    pk_fabric_t *fabric = pk_fabric_open(pk_transport_for_node(name, self->node), &fc, self->pool,
                                         self->num_blocks, self->block_len, rc_p, why);
    if (!fabric) {
        *rc_p = pk_err(err, *rc_p, "%s", why);
        return NULL;
    }
    pk_client_fabric_t *slot = &self->fabrics[self->nfabrics++];
    snprintf(slot->asked, sizeof slot->asked, "%s", name);
    slot->fabric = fabric;
    return slot;
}

int
pk_client_fabrics_open(p2pkv_client_t *self, char *err)
{
    int rc;
    (void) pk_host_id(self->host_id, sizeof self->host_id);
    self->auto_provider = !self->provider || strcmp(self->provider, "auto") == 0;
    if (self->auto_provider)
        return 0;
    return s_fabric(self, self->provider, &rc, err) ? 0 : rc;
}

void
pk_client_fabrics_close(p2pkv_client_t *self)
{
    while (self->nfabrics) {
        pk_client_fabric_t *f = &self->fabrics[--self->nfabrics];
        pk_fabric_close(&f->fabric);
    }
}

const pk_client_fabric_t *
pk_client_fabric_for(p2pkv_client_t *self, const p2pkv_description_t *d, unsigned skip,
                     int *index_p, char *err)
{
    if (index_p)
        *index_p = -1;
    if (!self->auto_provider)
        return &self->fabrics[0];
    bool same_host = *d->host && strcmp(d->host, self->host_id) == 0;
    char why[PK_ERRLEN] = "";
    int rc;
    //  first pass: the same-host providers (mmap, shm), on one host;
    //  second: the network ones, in the server's order
    for (int pass = same_host ? 0 : 1; pass < 2; pass++)
        for (size_t i = 0; i < d->nproviders; i++) {
            if (pk_transport_provider(d->providers[i])->same_host != (pass == 0)
                || (skip >> i) & 1)
                continue;
            const pk_client_fabric_t *fabric = s_fabric(self, d->providers[i], &rc, why);
            if (fabric && index_p)
                *index_p = (int) i;
            if (fabric)
                return fabric;
        }
    char offered[P2PKV_MAX_PROVIDERS * 66] = "";
    for (size_t i = 0, at = 0; i < d->nproviders && at < sizeof offered; i++)
        at += (size_t) snprintf(offered + at, sizeof offered - at, "%s%s", i ? ", " : "",
                                d->providers[i]);
    if (!*why)
        snprintf(why, sizeof why, "mmap and shm need the same host and namespaces, and %.60s "
                 "runs elsewhere", d->peer_id[0] ? d->peer_id : "the server");
    (void) pk_err(err, -EPROTONOSUPPORT, "%.60s offers %.120s, none usable here: %.200s",
                  d->peer_id, offered, why);
    return NULL;
}
