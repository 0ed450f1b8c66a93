/*  copier.h: block copies for the mmap transport, on more than one core.

    One core's memcpy is the whole cost of a same-host fetch (about 9 GB/s
    here), and two cores copy 64 KiB blocks at 20-28 GB/s (doc/design.md,
    "Same-host copies"), so a large batch is
    shared with helper threads: as many as the machine has cores less one,
    at most PK_COPIER_MAX_HELPERS, started at the first batch that needs
    them and sleeping on a condition variable otherwise (no idle CPU).  A
    batch under PK_COPIER_PARALLEL_MIN bytes is copied by the caller alone:
    waking a helper costs tens of microseconds.

    A process forked after the helpers started has none of them: its
    copier notices (the pid changed) and starts its own.

    The cut-off rule of mmap.h holds per block, on whichever thread copies
    it: the flag is read after the copy (behind a full fence) and a block
    copied while it was set is not counted.
*/
#ifndef PK_MMAP_COPIER_H_INCLUDED
#define PK_MMAP_COPIER_H_INCLUDED

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PK_COPIER_MAX_HELPERS 3
#define PK_COPIER_PARALLEL_MIN (1u << 20)

typedef struct _pk_copier_t pk_copier_t;

/*  One copy: block src_index of src to block dst_index of dst.  */
typedef struct {
    uint32_t src, dst;
} pk_copy_pair_t;

/*  The consumer's end-to-end check in the copy (mmap_target.c): a block
    whose dst wants() is hashed as it is copied (pk_checksum_copy) and its
    checksum handed to found(), on the thread that copied it.  */
typedef struct {
    bool (*wants)(void *arg, uint32_t dst);
    void (*found)(void *arg, uint32_t dst, uint64_t sum);
    void *arg;
} pk_copy_check_t;

pk_copier_t *pk_copier_new(void);
/*  Joins the helpers.  Nulls *self_p.  */
void pk_copier_destroy(pk_copier_t **self_p);
/*  Copies n pairs of block_len bytes (indices checked by the caller),
    sharing them with the helpers when the batch is large; check (NULL:
    none) hashes the blocks it wants as they are copied.  Returns the blocks that landed:
    copied with *closed clear after the copy.  */
size_t pk_copier_run(pk_copier_t *self, uint8_t *dst, const uint8_t *src,
                     const pk_copy_pair_t *pairs, size_t n, size_t block_len,
                     const _Atomic uint32_t *closed, const pk_copy_check_t *check);
/*  Helper threads started so far (0 until a large batch).  */
size_t pk_copier_helpers(const pk_copier_t *self);

#endif
