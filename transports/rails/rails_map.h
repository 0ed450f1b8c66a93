/*  rails_map.h: which chunk of which write a rail's completion is for.

    A rails channel hands each chunk of a write to one rail's sub-channel
    and gets back that sub-channel's transfer id; a completion names only
    (rail, that id).  This map finds the chunk in one probe, where a scan
    of every open write's chunks cost O(writes x chunks) per completion,
    O(n^2) per round (issue 38, the rails hot path).  One flat
    open-addressed table (linear probing, backward-shift deletion, no
    tombstones): an entry is 24 bytes, no allocation per entry, and
    reserve() before a chunk is posted makes the insert after it
    infallible, so a chunk out is never untracked.
*/
#ifndef PK_RAILS_MAP_H_INCLUDED
#define PK_RAILS_MAP_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t key;               //  0: an empty slot (pk_rails_map_key is never 0)
    void *xfer;
    size_t chunk;
} pk_rails_map_entry_t;

typedef struct {
    pk_rails_map_entry_t *slots;
    size_t mask;                //  capacity - 1, a power of two
    size_t count;
} pk_rails_map_t;

/*  The key of sub-channel transfer tid (> 0) on rail (< 8).  */
static inline uint64_t
pk_rails_map_key(size_t rail, uint64_t tid)
{
    return tid << 3 | (uint64_t) rail;
}

void pk_rails_map_fini(pk_rails_map_t *self);

/*  Room for n more entries, so that the next n puts cannot fail: 0 or
    -ENOMEM.  The table stays at most half full.  */
int pk_rails_map_reserve(pk_rails_map_t *self, size_t n);

/*  Inserts key (absent; room reserved).  */
void pk_rails_map_put(pk_rails_map_t *self, uint64_t key, void *xfer, size_t chunk);

/*  Removes key: true with its values where it was there.  */
bool pk_rails_map_take(pk_rails_map_t *self, uint64_t key, void **xfer_p, size_t *chunk_p);

#endif
