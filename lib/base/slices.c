/*  slices.c: a block's slices from its length (slices.h).  */
#include "base/slices.h"

pk_slices_t
pk_slices_of(uint64_t block_len)
{
    pk_slices_t s = { 1, block_len, block_len };
    if (block_len < PK_SLICES_FROM)
        return s;
    uint64_t n = block_len / PK_SLICE_MIN;
    s.n = (uint32_t) (n > PK_SLICES_MAX ? PK_SLICES_MAX : n);
    //  4 KiB-aligned runs; the last slice takes the rest, so it is never
    //  shorter than the others (and so never below 1 MiB)
    s.len = block_len / s.n & ~UINT64_C(4095);
    return s;
}

uint64_t
pk_slice_range(const pk_slices_t *layout, uint32_t i, uint64_t *off_p)
{
    *off_p = (uint64_t) i * layout->len;
    return i + 1 == layout->n ? layout->block_len - *off_p : layout->len;
}
