/*  index.h: the store's blocks, their states and the key index.

    A block is FREE, WRITING (reserved under an owner's lease) or READY,
    and sits on exactly one intrusive list chosen by its state, so one pair
    of links serves them all: the free list (FREE), the lease FIFO
    (WRITING, ordered by deadline because every lease has the same length
    and the clock is monotonic), the LRU list (READY and unpinned) or none
    (READY and pinned: neither evictable nor reusable).  WRITING blocks are
    also on their owner's list, so an owner's departure costs what it held.
    Lookups by key and owner are pk_keymap probes; the blocks are scanned
    only by init, fini and a snapshot.

    The index is keyed by (namespace, key) (namespace.h says how); it
    knows neither the pool's bytes nor pins' jobs nor locks: the store
    holds its lock around every call and tells it, through two hooks, who
    hears a change of the READY keys (the directory's watch) and who takes
    a block's bytes before it is evicted (the tier under the pool).

    An internal class of the store layer, embedded by value (like
    pk_keymap_t): pk_index_init / pk_index_fini.
*/
#ifndef PK_INDEX_H_INCLUDED
#define PK_INDEX_H_INCLUDED

#include "base/key.h"
#include "base/keymap.h"
#include "wire/protocol.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*  The index is keyed by (namespace, key) (namespace.h): a key's index
    hash is its SipHash mixed with its namespace's id, and the shared
    namespace, 0, keeps the plain hash, so a store without tenants hashes
    exactly as before.  pk_hash_id is keyed and its input is already a
    keyed SipHash, so a peer can choose no collisions.  */
#define PK_NS_SHARED 0

static inline uint64_t
pk_ns_hash(uint64_t hash, unsigned ns)
{
    return ns == PK_NS_SHARED ? hash : pk_hash_id(hash, ns);
}

#define PK_INDEX_NONE UINT32_MAX

//  Keys up to a SHA-256 digest live inside the block record; longer ones
//  get a heap buffer kept for the block's reuse, so steady state allocates
//  nothing per block.
#define PK_INDEX_INLINE_KEY 32

typedef enum { PK_BLOCK_FREE = 0, PK_BLOCK_WRITING, PK_BLOCK_READY } pk_block_state_t;

typedef struct {
    uint64_t owner;             //  WRITING: also the owner map's key bytes (index.c)
    double deadline;            //  WRITING: end of the lease
    uint64_t key_hash;          //  the index hash: the key's, mixed with ns
    uint64_t sum;               //  READY: the checksum of its bytes at commit
    uint8_t *key;               //  inline_key or heap
    uint8_t *heap;
    uint32_t heap_cap;
    uint32_t key_len;
    uint32_t pins;
    uint32_t prev, next;        //  free list, lease FIFO or LRU
    uint32_t oprev, onext;      //  owner list (WRITING)
    uint16_t ns;                //  its namespace (0: shared)
    uint8_t state;
    uint8_t inline_key[PK_INDEX_INLINE_KEY];
} pk_block_t;

typedef struct {
    uint32_t head, tail;
    size_t count;
} pk_block_list_t;

/*  A change of the set of READY keys: added (WRITING -> READY) or removed
    (READY -> FREE: drop or eviction).  */
typedef void (pk_index_change_fn)(void *arg, bool added, const pk_key_t *key);
/*  Block b, READY and unpinned, is about to be evicted: its key, ns, sum
    and bytes are still its own for the length of the call.  True when
    the key is still held elsewhere (a tier under the pool took it): the
    eviction is then no change of the keys held (no removal told).  */
typedef bool (pk_index_evict_fn)(void *arg, uint32_t b, const pk_block_t *blk);

typedef struct {
    pk_block_t *blocks;
    uint64_t num_blocks;
    pk_block_list_t free, leases, lru;
    pk_keymap_t keys;           //  (ns, key) -> a: block
    pk_keymap_t owners;         //  owner -> a: first block of its list
    size_t ready, pinned;       //  READY blocks, and those with a pin
    size_t *ns_ready, *ns_pinned;   //  the same by the block's namespace (nns each)
    size_t nns;
    uint64_t evictions, expired;
    pk_index_change_fn *change; //  or NULL
    void *change_arg;
    pk_index_evict_fn *evict;   //  or NULL
    void *evict_arg;
} pk_index_t;

/*  num_blocks FREE blocks of namespaces 0 .. nns - 1; the key index sized
    once for a full pool, so no insert rehashes it inside the store's
    critical section.  0 or -ENOMEM (nothing left to fini).  */
int pk_index_init(pk_index_t *self, uint64_t num_blocks, size_t nns);
void pk_index_fini(pk_index_t *self);

/*  Whether the index takes these keys: 1..PK_MAX_KEY_BYTES bytes each
    (the wire's limit; wire/protocol.h), keys NULL only when n is 0.  */
bool pk_index_keys_ok(const pk_key_t *keys, size_t n);

/*  The key a block holds, as a view (its index hash, not the bare key's).  */
pk_key_t pk_index_key(const pk_block_t *blk);

/*  The block of key in namespace ns, or NULL; *b_p its number.  */
pk_block_t *pk_index_find(pk_index_t *self, unsigned ns, const pk_key_t *key, uint32_t *b_p);

/*  Blocks a reservation may take: free ones and evictable ones.  */
size_t pk_index_room(const pk_index_t *self);

/*  Takes a block for key in ns as WRITING under owner until deadline: a
    free one, else the LRU's oldest (evicted: the evict hook, then the
    change hook hear it).  -EEXIST if ns holds the key, -ENOMEM; call only
    with room (pk_index_room).  The block stays evicted on failure.  */
int pk_index_reserve(pk_index_t *self, uint64_t owner, unsigned ns, const pk_key_t *key,
                     double deadline, uint32_t *b_p);

/*  WRITING -> READY with its checksum, at the LRU's young end.  */
void pk_index_commit(pk_index_t *self, uint32_t b, uint64_t sum);

/*  WRITING -> FREE (a reservation undone, a lease ended).  */
void pk_index_free_writing(pk_index_t *self, uint32_t b);

/*  READY, unpinned -> FREE (a drop).  */
void pk_index_free_ready(pk_index_t *self, uint32_t b);

/*  Frees every WRITING block whose lease ended by now; how many.  */
size_t pk_index_expire(pk_index_t *self, double now);

/*  Frees every WRITING block of owner; how many.  */
size_t pk_index_release_owner(pk_index_t *self, uint64_t owner);

/*  A READY block was read: to the LRU's young end (unless pinned).  */
void pk_index_use(pk_index_t *self, uint32_t b);

/*  One more or one fewer pin of a READY block: the first takes it off
    the LRU, the last puts it back at the young end (it was just read).  */
void pk_index_pin(pk_index_t *self, uint32_t b);
void pk_index_unpin(pk_index_t *self, uint32_t b);

#endif
