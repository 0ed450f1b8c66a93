/*  blocks.c: the test suites' blocks and keys (see blocks.h).  */
#include "blocks.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static uint64_t
s_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

//  Word k of block i of tag: never zero.
static inline uint64_t
s_word(uint64_t tag, uint64_t i, uint64_t k)
{
    return s_mix((tag << 44) ^ (i << 16) ^ k) | 1;
}

void
bk_block_fill(uint8_t *at, uint64_t tag, uint64_t i, size_t block_len)
{
    uint64_t *w = (uint64_t *) at;
    for (size_t k = 0; k < block_len / 8; k++)
        w[k] = s_word(tag, i, k);
}

size_t
bk_block_diff(const uint8_t *at, uint64_t tag, uint64_t i, size_t block_len)
{
    const uint64_t *w = (const uint64_t *) at;
    size_t bad = 0;
    for (size_t k = 0; k < block_len / 8; k++) {
        uint64_t want = s_word(tag, i, k);
        if (w[k] != want)
            for (int b = 0; b < 8; b++)
                bad += ((w[k] >> (8 * b)) & 0xff) != ((want >> (8 * b)) & 0xff);
    }
    return bad;
}

bool
bk_block_ok(const uint8_t *at, uint64_t tag, uint64_t i, size_t block_len)
{
    const uint64_t *w = (const uint64_t *) at;
    for (size_t k = 0; k < block_len / 8; k++)
        if (w[k] != s_word(tag, i, k))
            return false;
    return true;
}

bool
bk_block_zero(const uint8_t *at, size_t block_len)
{
    const uint64_t *w = (const uint64_t *) at;
    for (size_t k = 0; k < block_len / 8; k++)
        if (w[k])
            return false;
    return true;
}

void
bk_key(uint8_t *out, uint64_t tag, uint64_t i)
{
    memcpy(out, "blk-", 4);
    for (int b = 0; b < 4; b++)
        out[4 + b] = (uint8_t) (tag >> (8 * b));
    for (int b = 0; b < 8; b++)
        out[8 + b] = (uint8_t) (i >> (8 * b));
}

//  The key array first, its bytes behind it: one block to free.
p2pkv_key_t *
bk_keys(uint64_t tag, uint64_t first, size_t n)
{
    p2pkv_key_t *keys = malloc(n * (sizeof *keys + BK_KEY_LEN) + 1);
    if (!keys)
        abort();
    uint8_t *bytes = (uint8_t *) (keys + n);
    for (size_t i = 0; i < n; i++) {
        bk_key(bytes + i * BK_KEY_LEN, tag, first + i);
        keys[i] = (p2pkv_key_t) { bytes + i * BK_KEY_LEN, BK_KEY_LEN };
    }
    return keys;
}

void
bk_keys_free(p2pkv_key_t *keys)
{
    free(keys);
}

//  In slices, so that no one request to the server grows without bound.
#define S_SLICE 8192

void
bk_publish(td_t *d, const p2pkv_key_t *keys, size_t n, uint64_t tag, size_t block_len)
{
    uint8_t *pool = p2pkv_engine_pool(td_api(d));
    uint32_t *blocks = malloc(S_SLICE * sizeof *blocks);
    ck_assert_ptr_nonnull(blocks);
    for (size_t at = 0; at < n; at += S_SLICE) {
        size_t m = n - at < S_SLICE ? n - at : S_SLICE;
        td_reserve(d, keys + at, m, blocks);
        for (size_t i = 0; i < m; i++)
            bk_block_fill(pool + (size_t) blocks[i] * block_len, tag, at + i, block_len);
        td_commit(d, keys + at, m);
    }
    free(blocks);
}

void
bk_fill(td_t *d, uint64_t tag, size_t n, size_t block_len)
{
    p2pkv_key_t *keys = bk_keys(tag, 0, n);
    bk_publish(d, keys, n, tag, block_len);
    bk_keys_free(keys);
}
