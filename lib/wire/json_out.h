/*  json_out.h: compact JSON written straight into one growing buffer, the
    bytes jansson's json_dumps(JSON_COMPACT) would give for the same values
    (strings escaped as jansson escapes them, UTF-8 passed through).

    Writes never fail one by one: running out of memory is sticky and
    reported once, by pk_jout_finish.
*/
#ifndef PK_JSON_OUT_H_INCLUDED
#define PK_JSON_OUT_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *data;
    size_t len, cap;
    bool oom;
} pk_jout_t;

/*  An empty buffer with room for about hint bytes.  */
void pk_jout_init(pk_jout_t *self, size_t hint);
void pk_jout_free(pk_jout_t *self);

/*  Room for more bytes past len; returns where they go, or NULL (sticky
    out of memory).  The caller then adds what it wrote to len.  */
char *pk_jout_reserve(pk_jout_t *self, size_t more);

void pk_jout_raw(pk_jout_t *self, const char *text, size_t len);
void pk_jout_uint(pk_jout_t *self, uint64_t value);
/*  A JSON string of len bytes of UTF-8; -EILSEQ (nothing written) when the
    text is not valid UTF-8.  */
int pk_jout_string(pk_jout_t *self, const char *text, size_t len);
/*  A JSON string of the lowercase hex of len bytes.  */
void pk_jout_hex(pk_jout_t *self, const uint8_t *bytes, size_t len);

/*  NUL-terminates and hands the text over (*out_p malloc'd, *len_p without
    the NUL); 0 or -ENOMEM (the buffer freed either way).  */
int pk_jout_finish(pk_jout_t *self, char **out_p, size_t *len_p);

#endif
