/*  namespace.h: the store's namespaces (--tenants; daemon/tenants.h maps
    consumers to them), and what a reader in one sees.

    Every key lives in one namespace, numbered 0 (shared) .. namespaces -
    1, and the same key may be in several.  The index is keyed by
    (namespace, key): a block's index hash is its key's SipHash mixed with
    its namespace id (the shared namespace keeps the plain hash, so a store
    without tenants hashes exactly as before), and an entry is that
    namespace's only if the block's ns says so.  Writes act on their
    namespace only.  A reader on behalf of namespace ns (a lookup, a pin)
    sees ns and shared, and always makes both probes before it chooses:
    a key held only by another namespace costs the same two probes as an
    absent one and answers the same (doc/design.md, "Tenant namespaces").
*/
#ifndef PK_NAMESPACE_H_INCLUDED
#define PK_NAMESPACE_H_INCLUDED

#include "store/index.h"

#define PK_NS_MAX 256               //  namespaces, shared included (PK_NS_SHARED: index.h)

/*  What namespace ns sees of key: its own block if READY, else the
    shared one if READY, else either being written (own first), else
    NULL; *b_p its number.  Both probes always run, whatever the first
    found, and *probes counts them (2, or 1 for shared).  */
pk_block_t *pk_ns_resolve(pk_index_t *index, unsigned ns, const pk_key_t *key, uint32_t *b_p,
                          uint64_t *probes);

#endif
