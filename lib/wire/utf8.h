/*  utf8.h: strict UTF-8, the rules jansson applies (no overlong forms, no
    surrogates, nothing past U+10FFFF), so that the scanner, the writer and
    pk_utf8_ok (protocol.h) agree on what a text is.
*/
#ifndef PK_UTF8_H_INCLUDED
#define PK_UTF8_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*  Length (2..4) of the valid multi-byte sequence at p (avail bytes, p[0]
    >= 0x80), or 0 when it is not one.  */
size_t pk_utf8_seq(const uint8_t *p, size_t avail);

/*  Writes code point cp (valid, not a surrogate) as UTF-8; returns its
    length.  */
size_t pk_utf8_put(uint32_t cp, char *out);

/*  The whole text is strict UTF-8 (also declared in protocol.h, for the
    layers above).  */
bool pk_utf8_ok(const char *text, size_t len);

#endif
