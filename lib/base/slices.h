/*  slices.h: how one large block is cut into slices (capability slices,
    protocol.md section 7), from its length alone.

    Both sides derive the layout from block_len, which the handshake
    makes equal, so nothing about it goes on the wire: a block of at
    least PK_SLICES_FROM bytes is cut into n = min(PK_SLICES_MAX,
    block_len / PK_SLICE_MIN) slices, each slice_len = block_len / n
    rounded down to 4 KiB, and the last one takes what is left (so
    every slice is at least 1 MiB and a page-aligned run).  A smaller
    block is one slice: it goes whole.  A slice's index fits the 6 bits
    the immediate keeps for it (ofi_priv.h).
*/
#ifndef PK_SLICES_H_INCLUDED
#define PK_SLICES_H_INCLUDED

#include <stdint.h>

#define PK_SLICES_MAX 64
#define PK_SLICE_MIN (UINT64_C(1) << 20)
#define PK_SLICES_FROM (2 * PK_SLICE_MIN)
/*  A slice's immediate names block * 64 + slice in 31 bits (protocol.md
    section 7): a block from this one on is written whole.  */
#define PK_SLICE_BLOCKS (UINT32_C(1) << 25)

typedef struct {
    uint32_t n;                 //  slices a block (1: not sliced)
    uint64_t len;               //  each but the last
    uint64_t block_len;
} pk_slices_t;

/*  The layout of a block of block_len bytes.  */
pk_slices_t pk_slices_of(uint64_t block_len);

/*  Slice i's bytes within its block: *off_p, and its length returned.  */
uint64_t pk_slice_range(const pk_slices_t *layout, uint32_t i, uint64_t *off_p);

/*  The mask of a block whose every slice landed.  */
static inline uint64_t
pk_slices_full(const pk_slices_t *layout)
{
    return layout->n >= 64 ? UINT64_MAX : (UINT64_C(1) << layout->n) - 1;
}

#endif
