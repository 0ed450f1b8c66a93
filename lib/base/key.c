/*  key.c: keyed hashes of keys and ids, and hex.  One process-wide
    random key, drawn once (pthread_once) on first use.  */
#include "base/key.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>

static int8_t s_hexval[256];
static uint8_t s_siphash_key[crypto_shorthash_KEYBYTES];
static uint64_t s_index_mult;     //  odd, random: multiplicative hash of indexes

static void
s_init_once(void)
{
    memset(s_hexval, -1, sizeof s_hexval);
    for (int i = 0; i < 10; i++)
        s_hexval['0' + i] = (int8_t) i;
    for (int i = 0; i < 6; i++)
        s_hexval['a' + i] = (int8_t) (10 + i);
    //  sodium_init is idempotent and thread-safe; the key makes bucket
    //  placement unpredictable to a peer choosing keys.
    if (sodium_init() < 0)
        abort();
    randombytes_buf(s_siphash_key, sizeof s_siphash_key);
    randombytes_buf(&s_index_mult, sizeof s_index_mult);
    s_index_mult |= 1;
}

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
#define S_INIT() pthread_once(&s_once, s_init_once)

void
pk_hex_encode(const uint8_t *bytes, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * len] = '\0';
}

ssize_t
pk_hex_decode_at(const char *hex, size_t hexlen, uint8_t *out)
{
    S_INIT();
    const unsigned char *h = (const unsigned char *) hex;
    for (size_t i = 0; i < hexlen; i += 2) {
        int hi = s_hexval[h[i]], lo = s_hexval[h[i + 1]];
        if ((hi | lo) < 0)
            return (ssize_t) (hi < 0 ? i : i + 1);
        out[i / 2] = (uint8_t) (hi << 4 | lo);
    }
    return -1;
}

int
pk_hex_decode(const char *hex, size_t hexlen, uint8_t *out)
{
    if (hexlen % 2 || pk_hex_decode_at(hex, hexlen, out) >= 0)
        return -EINVAL;
    return (int) (hexlen / 2);
}

uint64_t
pk_key_hash(const uint8_t *bytes, size_t len)
{
    S_INIT();
    uint64_t h;
    crypto_shorthash((unsigned char *) &h, bytes, len, s_siphash_key);
    return h;
}

uint64_t
pk_hash_id(uint64_t a, uint64_t b)
{
    S_INIT();
    //  A keyed multiply-xorshift mix: ids are ours or bounded per session,
    //  so this needs to spread them, not to resist a chosen-input attack
    //  as key hashing must.
    uint64_t h = (a ^ s_index_mult) * UINT64_C(0x9e3779b97f4a7c15);
    h ^= h >> 32;
    h = (h ^ b) * s_index_mult;
    h ^= h >> 29;
    return h * UINT64_C(0xbf58476d1ce4e5b9) ^ (h >> 32);
}

pk_key_t
pk_key_make(const uint8_t *bytes, size_t len)
{
    return (pk_key_t) { bytes, (uint32_t) len, pk_key_hash(bytes, len) };
}

