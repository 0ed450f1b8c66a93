/*  json_out.c: the JSON writer of json_out.h.  */
#include "wire/json_out.h"
#include "wire/utf8.h"
#include "base/big_cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

//  Byte b's two hex digits are s_hex_pairs[2b], [2b+1]: one load per byte.
static const char s_hex_pairs[513] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
    "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
    "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
    "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

void
pk_jout_init(pk_jout_t *self, size_t hint)
{
    self->len = 0;
    self->cap = hint < 64 ? 64 : hint;
    self->data = pk_big_alloc(self->cap);
    self->oom = self->data == NULL;
    if (self->oom)
        self->cap = 0;
}

void
pk_jout_free(pk_jout_t *self)
{
    pk_big_free(self->data);
    self->data = NULL;
    self->len = self->cap = 0;
}

char *
pk_jout_reserve(pk_jout_t *self, size_t more)
{
    if (self->oom)
        return NULL;
    if (more > self->cap - self->len) {
        size_t cap = self->cap ? self->cap : 64;
        while (more > cap - self->len) {
            if (cap > SIZE_MAX / 2) {
                self->oom = true;
                return NULL;
            }
            cap *= 2;
        }
        char *data = realloc(self->data, cap);
        if (!data) {
            self->oom = true;
            return NULL;
        }
        self->data = data;
        self->cap = cap;
    }
    return self->data + self->len;
}

void
pk_jout_raw(pk_jout_t *self, const char *text, size_t len)
{
    char *at = pk_jout_reserve(self, len);
    if (!at)
        return;
    memcpy(at, text, len);
    self->len += len;
}

void
pk_jout_uint(pk_jout_t *self, uint64_t value)
{
    char digits[20];
    size_t n = 0;
    do {
        digits[sizeof digits - 1 - n++] = (char) ('0' + value % 10);
        value /= 10;
    } while (value);
    pk_jout_raw(self, digits + sizeof digits - n, n);
}

//  jansson's escapes: the two-character ones where JSON has them, else
//  \u00XX (upper case) for control characters; '/' and UTF-8 stay as is.
static size_t
s_escape(unsigned char c, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    const char *two = NULL;
    switch (c) {
        case '"':  two = "\\\""; break;
        case '\\': two = "\\\\"; break;
        case '\b': two = "\\b"; break;
        case '\f': two = "\\f"; break;
        case '\n': two = "\\n"; break;
        case '\r': two = "\\r"; break;
        case '\t': two = "\\t"; break;
        default: break;
    }
    if (two) {
        memcpy(out, two, 2);
        return 2;
    }
    memcpy(out, "\\u00", 4);
    out[4] = hex[c >> 4];
    out[5] = hex[c & 15];
    return 6;
}

int
pk_jout_string(pk_jout_t *self, const char *text, size_t len)
{
    //  One scan finds what the string needs: whether it is plain ASCII
    //  (then it is UTF-8 without the decoder's walk) and how many bytes
    //  its escapes add, so the buffer grows by exactly what is written
    //  and an escape-free string (a lookup answer's checksums: 1 MiB at
    //  65,536 hits) is one memcpy.  Reserving the worst case (six bytes
    //  a character) doubled a long answer's buffer, a realloc that copied
    //  it whole; counting in a second pass cost 9% of a 64-key lookup.
    const unsigned char *p = (const unsigned char *) text;
    size_t extra = 0;
    bool ascii = true;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = p[i];
        if (c >= 0x80)
            ascii = false;
        else if (c < 0x20 || c == '"' || c == '\\') {
            char spare[6];
            extra += s_escape(c, spare) - 1;
        }
    }
    if (!ascii && !pk_utf8_ok(text, len))
        return -EILSEQ;
    if (len > (SIZE_MAX - 2) / 6) {
        self->oom = true;
        return 0;
    }
    char *at = pk_jout_reserve(self, len + extra + 2);
    if (!at)
        return 0;
    char *start = at;
    *at++ = '"';
    if (!extra) {
        memcpy(at, text, len);
        at += len;
    }
    else
        for (size_t i = 0; i < len; i++) {
            if (p[i] >= 0x20 && p[i] != '"' && p[i] != '\\')
                *at++ = (char) p[i];
            else
                at += s_escape(p[i], at);
        }
    *at++ = '"';
    self->len += (size_t) (at - start);
    return 0;
}

void
pk_jout_hex(pk_jout_t *self, const uint8_t *bytes, size_t len)
{
    char *at = pk_jout_reserve(self, 2 * len + 2);
    if (!at)
        return;
    *at++ = '"';
    for (size_t i = 0; i < len; i++) {
        memcpy(at, s_hex_pairs + 2 * bytes[i], 2);
        at += 2;
    }
    *at = '"';
    self->len += 2 * len + 2;
}

int
pk_jout_finish(pk_jout_t *self, char **out_p, size_t *len_p)
{
    *out_p = NULL;
    if (!pk_jout_reserve(self, 1)) {
        pk_jout_free(self);
        return -ENOMEM;
    }
    self->data[self->len] = '\0';
    *out_p = self->data;
    if (len_p)
        *len_p = self->len;
    self->data = NULL;
    self->len = self->cap = 0;
    return 0;
}
