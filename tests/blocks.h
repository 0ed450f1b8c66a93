/*  blocks.h: the test suites' blocks and keys.

    Block i of fill tag T holds a pattern only (T, i) produces, so every
    byte that lands can be checked against where it belongs, and no word
    of it is zero, so a landed block is never mistaken for an untouched
    (zeroed) one.  Key i of tag T is BK_KEY_LEN bytes naming (T, i).
    Servers are filled the way a local engine does it: reserve, write
    into the mapped pool, commit.

    Everything but bk_publish and bk_fill runs without Check assertions:
    child processes that run no test (a consumer killed mid-transfer) use
    it too.
*/
#ifndef PK_TEST_BLOCKS_H_INCLUDED
#define PK_TEST_BLOCKS_H_INCLUDED

#include "daemon.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BK_KEY_LEN 16

void bk_block_fill(uint8_t *at, uint64_t tag, uint64_t i, size_t block_len);
//  Bytes of the block that differ from the pattern (0: whole).
size_t bk_block_diff(const uint8_t *at, uint64_t tag, uint64_t i, size_t block_len);
//  Whether the block is whole (stops at the first word that differs).
bool bk_block_ok(const uint8_t *at, uint64_t tag, uint64_t i, size_t block_len);
//  Whether every byte of the block is zero.
bool bk_block_zero(const uint8_t *at, size_t block_len);

void bk_key(uint8_t *out, uint64_t tag, uint64_t i);
//  The keys of blocks first..first+n-1 of tag, in one allocation with
//  their bytes (abort()s when out of memory); freed with bk_keys_free.
p2pkv_key_t *bk_keys(uint64_t tag, uint64_t first, size_t n);
void bk_keys_free(p2pkv_key_t *keys);

//  Blocks 0..n-1 of tag into the server under keys[0..n-1].
void bk_publish(td_t *d, const p2pkv_key_t *keys, size_t n, uint64_t tag, size_t block_len);
//  Blocks 0..n-1 of tag into the server under their own keys.
void bk_fill(td_t *d, uint64_t tag, size_t n, size_t block_len);

#endif
