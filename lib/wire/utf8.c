/*  utf8.c: strict UTF-8 checks and encoding (see utf8.h).  */
#include "wire/utf8.h"

size_t
pk_utf8_seq(const uint8_t *p, size_t avail)
{
    uint8_t c = p[0];
    size_t n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    }
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    }
    else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    }
    else
        return 0;
    if (avail < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)
        || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return n;
}

size_t
pk_utf8_put(uint32_t cp, char *out)
{
    uint8_t *o = (uint8_t *) out;
    if (cp < 0x80) {
        o[0] = (uint8_t) cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t) (0xc0 | (cp >> 6));
        o[1] = (uint8_t) (0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t) (0xe0 | (cp >> 12));
        o[1] = (uint8_t) (0x80 | ((cp >> 6) & 0x3f));
        o[2] = (uint8_t) (0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (uint8_t) (0xf0 | (cp >> 18));
    o[1] = (uint8_t) (0x80 | ((cp >> 12) & 0x3f));
    o[2] = (uint8_t) (0x80 | ((cp >> 6) & 0x3f));
    o[3] = (uint8_t) (0x80 | (cp & 0x3f));
    return 4;
}

bool
pk_utf8_ok(const char *text, size_t len)
{
    const uint8_t *p = (const uint8_t *) text;
    for (size_t i = 0; i < len;) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = pk_utf8_seq(p + i, len - i);
        if (!n)
            return false;
        i += n;
    }
    return true;
}
