/*  namespace.c: what a reader in one namespace sees (namespace.h).  */
#include "store/namespace.h"

pk_block_t *
pk_ns_resolve(pk_index_t *index, unsigned ns, const pk_key_t *key, uint32_t *b_p,
              uint64_t *probes)
{
    uint32_t own_b = PK_INDEX_NONE, shared_b = PK_INDEX_NONE;
    pk_block_t *own = pk_index_find(index, ns, key, &own_b);
    pk_block_t *shared = ns != PK_NS_SHARED
                         ? pk_index_find(index, PK_NS_SHARED, key, &shared_b) : NULL;
    *probes += ns != PK_NS_SHARED ? 2 : 1;
    bool own_ready = own && own->state == PK_BLOCK_READY;
    bool shared_ready = shared && shared->state == PK_BLOCK_READY;
    bool use_own = own_ready || (own && !shared_ready);
    if (b_p)
        *b_p = use_own ? own_b : shared_b;
    return use_own ? own : shared;
}
