/*  block_check.c: the expected checksums of a pool's blocks and what
    their landing found (block_check.h).  */
#include "base/block_check.h"
#include "base/checksum.h"
#include "base/transport.h"

#include <errno.h>
#include <stdlib.h>

//  RELANDED: landed again after it was judged; the owner hashes it once
//  the round landed (its verdict is left as it was)
enum { S_UNEXPECTED = 0, S_EXPECTED, S_OK, S_CORRUPT, S_RELANDED };

int
pk_block_check_expect(pk_block_check_t *self, uint64_t blocks, const uint32_t *dest,
                      const uint64_t *sums, size_t n)
{
    if (!self->state) {
        self->sum = malloc(blocks * sizeof *self->sum);
        self->state = calloc(blocks, sizeof *self->state);
        if (!self->sum || !self->state) {
            pk_block_check_fini(self);
            return -ENOMEM;
        }
        self->blocks = blocks;
    }
    for (size_t i = 0; i < n; i++)
        if (dest[i] >= self->blocks)
            return -ERANGE;
    for (size_t i = 0; i < n; i++) {
        self->sum[dest[i]] = sums[i];
        atomic_store_explicit(&self->state[dest[i]], S_EXPECTED, memory_order_relaxed);
    }
    return 0;
}

bool
pk_block_check_wants(pk_block_check_t *self, uint64_t dst)
{
    if (!self->state || dst >= self->blocks)
        return false;
    uint8_t st = atomic_load_explicit(&self->state[dst], memory_order_relaxed);
    //  A block landed again after it was judged is left to the owner's
    //  hash once the round landed, so it is judged by its last landing,
    //  never by bytes overwritten since; and a peer that repeats marks
    //  (4,095 blocks per immediate, a write of no bytes) costs a state
    //  change each, never a hash of blocks it did not write.
    if (st == S_OK || st == S_CORRUPT)
        atomic_store_explicit(&self->state[dst], S_RELANDED, memory_order_relaxed);
    return st == S_EXPECTED;
}

void
pk_block_check_found(pk_block_check_t *self, uint64_t dst, uint64_t sum)
{
    if (self->state && dst < self->blocks)
        atomic_store_explicit(&self->state[dst], sum == self->sum[dst] ? S_OK : S_CORRUPT,
                              memory_order_relaxed);
}

void
pk_block_check_landed(pk_block_check_t *self, const uint8_t *pool, uint64_t block_len,
                      uint64_t first, uint64_t count)
{
    if (!self->state || first >= self->blocks || count > self->blocks - first)
        return;
    for (uint64_t b = first; b < first + count; b++)
        if (pk_block_check_wants(self, b))
            pk_block_check_found(self, b, pk_checksum(pool + b * block_len, block_len));
}

void
pk_block_check_verdicts(pk_block_check_t *self, const uint32_t *dest, uint8_t *verdict,
                        size_t n)
{
    for (size_t i = 0; self->state && i < n; i++) {
        if (dest[i] >= self->blocks)
            continue;
        uint8_t st = atomic_exchange_explicit(&self->state[dest[i]], S_UNEXPECTED,
                                              memory_order_relaxed);
        if (st == S_OK || st == S_CORRUPT)
            verdict[i] = st == S_OK ? PK_VERDICT_OK : PK_VERDICT_CORRUPT;
    }
}

void
pk_block_check_fini(pk_block_check_t *self)
{
    free(self->sum);
    free((void *) self->state);
    *self = (pk_block_check_t) { 0 };
}
