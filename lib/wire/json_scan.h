/*  json_scan.h: a strict single-pass JSON scanner over one frame, for a
    decoder that knows its schema: it reads the members it expects straight
    into C values (hex strings into bytes) and skips the rest.

    The scanner accepts a subset of what RFC 8259 (as jansson reads it)
    accepts: it never accepts text jansson refuses, but it may refuse valid
    text it does not bother with (deep nesting, names with escapes inside
    skipped objects, reals with exponents, integers past 2^63).  Every
    function returns 0 or -EBADMSG ("not accepted here"); the caller then
    hands the frame to a full parser, which has the last word and the
    error text.
*/
#ifndef PK_JSON_SCAN_H_INCLUDED
#define PK_JSON_SCAN_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *p, *end;
    char *scratch;              /* strings with escapes are decoded here */
    size_t scratch_cap;
} pk_jscan_t;

void pk_jscan_init(pk_jscan_t *self, const void *data, size_t len);
void pk_jscan_fini(pk_jscan_t *self);

/*  Skips whitespace; returns the next byte (-1 at the end), not taken.  */
int pk_jscan_peek(pk_jscan_t *self);
/*  Skips whitespace and takes byte c, else -EBADMSG.  */
int pk_jscan_take(pk_jscan_t *self, char c);
/*  After an item of an object or array closed by close: 1 when another
    item follows (the comma taken), 0 at close (taken), else -EBADMSG.  */
int pk_jscan_next(pk_jscan_t *self, char close);

/*  A string; *text_p points into the frame, or into scratch when the
    string had escapes (valid until the next string).  Strict UTF-8, no
    NUL character.  */
int pk_jscan_string(pk_jscan_t *self, const char **text_p, size_t *len_p);
/*  A string of lowercase hex of even length 2..max_hex chars, decoded
    into out (room for max_hex / 2 bytes); *len_p is its byte count.  */
int pk_jscan_hex(pk_jscan_t *self, uint8_t *out, size_t max_hex, size_t *len_p);
/*  A JSON integer >= 0 without sign, fraction or exponent, below 2^63.  */
int pk_jscan_uint(pk_jscan_t *self, uint64_t *value_p);
int pk_jscan_bool(pk_jscan_t *self, bool *value_p);
/*  Any value, checked and dropped (objects: no member name twice).  */
int pk_jscan_skip(pk_jscan_t *self);
/*  Only whitespace is left.  */
int pk_jscan_end(pk_jscan_t *self);

#endif
