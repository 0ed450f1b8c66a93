/*  key.h: a block's key (a content hash, as bytes) and the keyed hashes
    every table of p2pkv uses, plus hex.

    Keys come from peers, so their table hash is keyed SipHash (libsodium's
    crypto_shorthash) under a key drawn at start: a peer cannot choose
    keys that collide in our tables.  Our own ids (transfers, rounds) get
    a cheaper keyed mix.
*/
#ifndef PK_KEY_H_INCLUDED
#define PK_KEY_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

/*  One key: a content hash as bytes, with its hash for our tables computed
    once (pk_key_make; the decoder fills it).  Keys decoded from a frame
    point into one arena owned by their pk_keys_t.  */
typedef struct {
    const uint8_t *bytes;
    uint32_t len;
    uint64_t hash;
} pk_key_t;

/*  Keyed SipHash of the bytes: the same value for the same bytes within one
    process, unpredictable to peers (the key is drawn at start).  */
uint64_t pk_key_hash(const uint8_t *bytes, size_t len);
pk_key_t pk_key_make(const uint8_t *bytes, size_t len);
/*  A fast keyed hash of two 64-bit ids, for tables keyed by our own ids
    (transfer ids, rounds); not for keys a peer chooses freely.  */
uint64_t pk_hash_id(uint64_t a, uint64_t b);
static inline bool
pk_key_eq(const pk_key_t *a, const pk_key_t *b)
{
    if (a->hash != b->hash || a->len != b->len)
        return false;
    //  Word by word, inlined: an equal hash almost always means equal
    //  keys, so this runs on every successful table lookup.
    uint32_t i = 0;
    for (; i + 8 <= a->len; i += 8) {
        uint64_t x, y;
        memcpy(&x, a->bytes + i, 8);
        memcpy(&y, b->bytes + i, 8);
        if (x != y)
            return false;
    }
    for (; i < a->len; i++)
        if (a->bytes[i] != b->bytes[i])
            return false;
    return true;
}

typedef struct {
    size_t count;
    pk_key_t *v;
    uint8_t *arena;         /* NULL when v[] points at caller-owned bytes */
} pk_keys_t;

/*  Lowercase hex of len bytes into out (2*len+1 bytes, NUL-terminated).  */
void pk_hex_encode(const uint8_t *bytes, size_t len, char *out);

/*  Decode lowercase hex; returns the byte count or -EINVAL.  */
int pk_hex_decode(const char *hex, size_t hexlen, uint8_t *out);

/*  Decodes hexlen (even) chars into out; returns -1 when all were
    lowercase hex, else the index of the first bad char (what the codec's
    error message names).  */
ssize_t pk_hex_decode_at(const char *hex, size_t hexlen, uint8_t *out);

#endif
