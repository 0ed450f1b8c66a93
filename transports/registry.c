/*  registry.c: the data planes by name (base/transport.h).

    A static table: a transport is added here and in Makefile.am, never
    discovered at run time, so a daemon configured by name gets exactly a
    transport that was built and tested with it.  The in-memory transport
    of lib/sim is left out on purpose (see base/transport.h).
*/
#include "base/transport.h"
#include "mmap/mmap.h"
#include "ofi/ofi.h"

#include <errno.h>
#include <string.h>

static const pk_transport_ops_t *const s_transports[] = {
    &pk_ofi_transport_ops,          //  first: the default
    &pk_mmap_transport_ops,         //  same-host copies, provider "mmap"
};

const pk_transport_ops_t *
pk_transport_find(const char *name)
{
    size_t n = sizeof s_transports / sizeof s_transports[0];
    if (!name)
        return s_transports[0];
    for (size_t i = 0; i < n; i++)
        if (strcmp(s_transports[i]->name, name) == 0)
            return s_transports[i];
    return NULL;
}

const pk_transport_ops_t *
pk_transport_for(const char *provider)
{
    size_t n = sizeof s_transports / sizeof s_transports[0];
    for (size_t i = 1; provider && i < n; i++)
        if (strcmp(s_transports[i]->name, provider) == 0)
            return s_transports[i];
    return s_transports[0];
}

int
pk_transport_blob_provider(const uint8_t *blob, size_t len, char *out, size_t cap, char *err)
{
    size_t n = sizeof s_transports / sizeof s_transports[0];
    int rc = -EPROTO;
    //  each reads its own blobs only; the default's refusal is the one told
    for (size_t i = n; rc != 0 && i-- > 0;)
        rc = s_transports[i]->blob_provider(blob, len, out, cap, err);
    return rc;
}
