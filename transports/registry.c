/*  registry.c: the data planes by name, and the providers they serve by
    the rows of their ops tables (base/transport.h).

    A static table: a transport is added here and in Makefile.am, never
    discovered at run time, so a daemon configured by name gets exactly a
    transport that was built and tested with it.  The in-memory transport
    of lib/sim is left out on purpose (see base/transport.h).  What a
    provider is (same-host only, its place under auto) is read from its
    transport's row, so no caller keeps a list of names.
*/
#include "base/transport.h"
#include "mmap/mmap.h"
#include "ofi/ofi.h"
#include "rails/rails.h"

#include <errno.h>
#include <string.h>

static const pk_transport_ops_t *const s_transports[] = {
    &pk_ofi_transport_ops,          //  first: the default
    &pk_mmap_transport_ops,         //  same-host copies, provider "mmap"
    &pk_rails_transport_ops,        //  several rails, over the default's (no provider rows)
};

#define S_TRANSPORTS (sizeof s_transports / sizeof s_transports[0])

const pk_transport_ops_t *
pk_transport_find(const char *name)
{
    size_t n = S_TRANSPORTS;
    if (!name)
        return s_transports[0];
    for (size_t i = 0; i < n; i++)
        if (strcmp(s_transports[i]->name, name) == 0)
            return s_transports[i];
    return NULL;
}

//  The row naming provider (NULL: the row named NULL), with its transport;
//  else the default's row named NULL, which serves every other name.
static const pk_provider_t *
s_row(const char *provider, const pk_transport_ops_t **ops_p)
{
    const pk_provider_t *other = NULL;
    for (size_t i = 0; i < S_TRANSPORTS; i++)
        for (size_t k = 0; k < s_transports[i]->nproviders; k++) {
            const pk_provider_t *r = &s_transports[i]->providers[k];
            if (r->name ? provider && strcmp(r->name, provider) == 0 : !provider) {
                *ops_p = s_transports[i];
                return r;
            }
            if (!r->name && !other) {
                other = r;
                *ops_p = s_transports[i];
            }
        }
    return other;
}

const pk_transport_ops_t *
pk_transport_for(const char *provider)
{
    const pk_transport_ops_t *ops = s_transports[0];
    (void) s_row(provider, &ops);
    return ops;
}

const pk_transport_ops_t *
pk_transport_for_node(const char *provider, const char *node)
{
    const pk_transport_ops_t *ops;
    const pk_provider_t *row = s_row(provider, &ops);
    if (node && strchr(node, ',') && !(row && row->same_host) && ops == s_transports[0])
        return &pk_rails_transport_ops;
    return pk_transport_for(provider);
}

int
pk_transport_check_node(const char *node, char *err)
{
    pk_rails_addr_t addrs[PK_RAILS_MAX];
    size_t n;
    return node && strchr(node, ',') ? pk_rails_addrs(node, addrs, PK_RAILS_MAX, &n, err) : 0;
}

const pk_provider_t *
pk_transport_provider(const char *provider)
{
    const pk_transport_ops_t *ops;
    return s_row(provider, &ops);
}

//  A handful of rows: a selection of the next rank above the last is
//  cheaper than keeping a sorted copy (auto runs once, at start).
const pk_provider_t *
pk_transport_auto(size_t i)
{
    const pk_provider_t *best = NULL;
    unsigned after = 0;
    for (size_t n = 0; n <= i; n++, after = best->auto_rank) {
        best = NULL;
        for (size_t t = 0; t < S_TRANSPORTS; t++)
            for (size_t k = 0; k < s_transports[t]->nproviders; k++) {
                const pk_provider_t *r = &s_transports[t]->providers[k];
                if (r->auto_rank > after && (!best || r->auto_rank < best->auto_rank))
                    best = r;
            }
        if (!best)
            return NULL;
    }
    return best;
}

int
pk_transport_blob_provider(const uint8_t *blob, size_t len, char *out, size_t cap, char *err)
{
    size_t n = S_TRANSPORTS;
    int rc = -EPROTO;
    //  each reads its own blobs only; the default's refusal is the one told
    for (size_t i = n; rc != 0 && i-- > 0;)
        rc = s_transports[i]->blob_provider(blob, len, out, cap, err);
    return rc;
}
