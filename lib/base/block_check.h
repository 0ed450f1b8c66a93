/*  block_check.h: the consumer's end-to-end check inside a transport
    (transport.h, channel_expect; protocol.md section 7).

    Per block of the consumer's pool: the checksum a fetch expects there
    and what was found when its bytes landed.  A transport that knows
    which blocks just landed (mmap in its copy, ofi from the block mark of
    an immediate) hashes each expected one at once, while it is still in
    that core's cache, where a hash after the whole round landed reads it
    back from memory.  The table is made at the first expect: 9 bytes a
    block of the pool, per channel that checks.  A state is atomic because
    mmap's copier helpers set states of one batch on their own threads
    (each block by one thread; expect and verdicts run between batches).
*/
#ifndef PK_BLOCK_CHECK_H_INCLUDED
#define PK_BLOCK_CHECK_H_INCLUDED

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t blocks;                //  of the pool; 0 until the first expect
    uint64_t *sum;
    _Atomic uint8_t *state;
} pk_block_check_t;

/*  dest[i] of a pool of blocks is to hold bytes whose checksum is
    sums[i]: 0, -ENOMEM, or -ERANGE when a dest is outside the pool.  */
int pk_block_check_expect(pk_block_check_t *self, uint64_t blocks, const uint32_t *dest,
                          const uint64_t *sums, size_t n);

/*  dst landed: true when its bytes are expected and not judged yet (then
    the caller hashes them now and hands the sum to found).  A block that
    lands again after it was judged is left to the owner, who hashes it
    once the round landed: a block is judged by its last landing, and at
    most one hash per block is done at landing, whatever a peer repeats.  */
bool pk_block_check_wants(pk_block_check_t *self, uint64_t dst);

/*  What dst's bytes hashed to, once they landed.  */
void pk_block_check_found(pk_block_check_t *self, uint64_t dst, uint64_t sum);

/*  Blocks first..first+count-1 of pool (blocks of block_len bytes)
    landed: each expected one is hashed now.  A range outside the pool
    is ignored (a peer's mark; the owner hashes those blocks later).  */
void pk_block_check_landed(pk_block_check_t *self, const uint8_t *pool, uint64_t block_len,
                           uint64_t first, uint64_t count);

/*  What was found for dest[i], as PK_VERDICT_OK or PK_VERDICT_CORRUPT in
    verdict[i] (base/transport.h); the states go.  A block not checked
    since its expect, or landed again after, leaves verdict[i] as it was.  */
void pk_block_check_verdicts(pk_block_check_t *self, const uint32_t *dest, uint8_t *verdict,
                             size_t n);

void pk_block_check_fini(pk_block_check_t *self);

#endif
