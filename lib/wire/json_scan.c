/*  json_scan.c: the strict JSON scanner of json_scan.h.

    What it accepts, jansson (JSON_REJECT_DUPLICATES) accepts too: the same
    whitespace, string escapes (\uXXXX with surrogate pairs, no \u0000),
    strict UTF-8, the number grammar (no leading zeros, no NaN), literals.
    Where checking jansson's exact limits would cost code on a path no
    frame of ours takes, it refuses and lets the full parser decide.
*/
#include "wire/json_scan.h"
#include "wire/utf8.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_DEPTH     32      //  jansson allows 2048; deeper goes to it
#define S_MAX_NAMES     16      //  members of a skipped object we check
#define S_MAX_REAL      300     //  digits of a real: no overflow possible

//  A hex digit's value + 1; 0 for anything else (upper case included).
static const uint8_t s_hexv[256] = {
    ['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7,
    ['7'] = 8, ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13,
    ['d'] = 14, ['e'] = 15, ['f'] = 16
};

void
pk_jscan_init(pk_jscan_t *self, const void *data, size_t len)
{
    self->p = data;
    self->end = self->p + len;
    self->scratch = NULL;
    self->scratch_cap = 0;
}

void
pk_jscan_fini(pk_jscan_t *self)
{
    free(self->scratch);
    self->scratch = NULL;
    self->scratch_cap = 0;
}

int
pk_jscan_peek(pk_jscan_t *self)
{
    const uint8_t *p = self->p;
    while (p < self->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    self->p = p;
    return p < self->end ? *p : -1;
}

int
pk_jscan_take(pk_jscan_t *self, char c)
{
    if (pk_jscan_peek(self) != (unsigned char) c)
        return -EBADMSG;
    self->p++;
    return 0;
}

int
pk_jscan_next(pk_jscan_t *self, char close)
{
    int c = pk_jscan_peek(self);
    if (c == ',') {
        self->p++;
        return 1;
    }
    if (c == (unsigned char) close) {
        self->p++;
        return 0;
    }
    return -EBADMSG;
}

int
pk_jscan_end(pk_jscan_t *self)
{
    return pk_jscan_peek(self) == -1 ? 0 : -EBADMSG;
}

//  Four hex digits (either case) at p; the value, or -1.
static int32_t
s_hex4(const uint8_t *p, const uint8_t *end)
{
    if (end - p < 4)
        return -1;
    int32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        int d = s_hexv[c] ? s_hexv[c] - 1
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

//  The escape at *pp (its backslash) as UTF-8 into out (4 bytes of room);
//  its length, or 0 for an escape jansson refuses.
static size_t
s_escape(const uint8_t **pp, const uint8_t *end, char *out)
{
    const uint8_t *p = *pp + 1;
    if (p >= end)
        return 0;
    static const char simple[] = "\"\\/bfnrt", value[] = "\"\\/\b\f\n\r\t";
    const char *hit = *p && *p != 'u' ? strchr(simple, *p) : NULL;
    if (hit) {
        *out = value[hit - simple];
        *pp = p + 1;
        return 1;
    }
    if (*p != 'u')
        return 0;
    int32_t cp = s_hex4(p + 1, end);
    p += 5;
    if (cp <= 0 || (cp >= 0xdc00 && cp <= 0xdfff))
        return 0;                               //  \u0000, a lone low surrogate
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (end - p < 2 || p[0] != '\\' || p[1] != 'u')
            return 0;
        int32_t lo = s_hex4(p + 2, end);
        if (lo < 0xdc00 || lo > 0xdfff)
            return 0;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        p += 6;
    }
    *pp = p;
    return pk_utf8_put((uint32_t) cp, out);
}

static int
s_scratch_room(pk_jscan_t *self, size_t need)
{
    if (need <= self->scratch_cap)
        return 0;
    size_t cap = self->scratch_cap ? self->scratch_cap : 256;
    while (cap < need)
        cap *= 2;
    char *s = realloc(self->scratch, cap);
    if (!s)
        return -EBADMSG;                        //  the full parser reports it
    self->scratch = s;
    self->scratch_cap = cap;
    return 0;
}

//  The rest of a string that has escapes, from p (a backslash); the text
//  before it, from start, is copied first.
static int
s_string_escaped(pk_jscan_t *self, const uint8_t *start, const uint8_t *p,
                 const char **text_p, size_t *len_p)
{
    size_t n = (size_t) (p - start);
    if (s_scratch_room(self, n + 64))
        return -EBADMSG;
    memcpy(self->scratch, start, n);
    while (p < self->end && *p != '"') {
        if (s_scratch_room(self, n + 4))
            return -EBADMSG;
        size_t k;
        if (*p == '\\')
            k = s_escape(&p, self->end, self->scratch + n);
        else if (*p < 0x20)
            k = 0;
        else {
            k = *p < 0x80 ? 1 : pk_utf8_seq(p, (size_t) (self->end - p));
            memcpy(self->scratch + n, p, k);
            p += k;
        }
        if (!k)
            return -EBADMSG;
        n += k;
    }
    if (p >= self->end)
        return -EBADMSG;
    self->p = p + 1;
    *text_p = self->scratch;
    *len_p = n;
    return 0;
}

int
pk_jscan_string(pk_jscan_t *self, const char **text_p, size_t *len_p)
{
    if (pk_jscan_take(self, '"'))
        return -EBADMSG;
    const uint8_t *start = self->p, *p = start;
    while (p < self->end) {
        uint8_t c = *p;
        if (c == '"') {
            *text_p = (const char *) start;
            *len_p = (size_t) (p - start);
            self->p = p + 1;
            return 0;
        }
        if (c == '\\')
            return s_string_escaped(self, start, p, text_p, len_p);
        if (c < 0x20)
            return -EBADMSG;
        if (c < 0x80)
            p++;
        else {
            size_t n = pk_utf8_seq(p, (size_t) (self->end - p));
            if (!n)
                return -EBADMSG;
            p += n;
        }
    }
    return -EBADMSG;
}

//  n (even) lowercase hex chars into n / 2 bytes; 0 or -1.
static int
s_hex_run(const uint8_t *h, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i += 2) {
        unsigned hi = s_hexv[h[i]], lo = s_hexv[h[i + 1]];
        if (!hi || !lo)
            return -1;
        *out++ = (uint8_t) ((hi - 1) << 4 | (lo - 1));
    }
    return 0;
}

int
pk_jscan_hex(pk_jscan_t *self, uint8_t *out, size_t max_hex, size_t *len_p)
{
    if (pk_jscan_take(self, '"'))
        return -EBADMSG;
    const uint8_t *p = self->p;
    const uint8_t *q = memchr(p, '"', (size_t) (self->end - p));
    size_t n = q ? (size_t) (q - p) : 0;
    if (q && n && n <= max_hex && n % 2 == 0 && s_hex_run(p, n, out) == 0) {
        self->p = q + 1;
        *len_p = n / 2;
        return 0;
    }
    //  escapes (or text that is not hex): the general path decides
    self->p = p - 1;
    const char *text;
    if (pk_jscan_string(self, &text, &n) || !n || n > max_hex || n % 2
        || s_hex_run((const uint8_t *) text, n, out))
        return -EBADMSG;
    *len_p = n / 2;
    return 0;
}

int
pk_jscan_uint(pk_jscan_t *self, uint64_t *value_p)
{
    int c = pk_jscan_peek(self);
    if (c < '0' || c > '9')
        return -EBADMSG;
    const uint8_t *p = self->p;
    uint64_t v = 0;
    if (*p == '0')
        p++;
    else
        for (; p < self->end && *p >= '0' && *p <= '9'; p++) {
            unsigned d = *p - '0';
            if (v > (UINT64_C(9223372036854775807) - d) / 10)
                return -EBADMSG;                //  past int64: jansson's "too big"
            v = v * 10 + d;
        }
    if (p < self->end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E'))
        return -EBADMSG;
    self->p = p;
    *value_p = v;
    return 0;
}

static int
s_literal(pk_jscan_t *self, const char *word, size_t len)
{
    if ((size_t) (self->end - self->p) < len || memcmp(self->p, word, len) != 0)
        return -EBADMSG;
    self->p += len;
    return 0;
}

int
pk_jscan_bool(pk_jscan_t *self, bool *value_p)
{
    int c = pk_jscan_peek(self);
    *value_p = c == 't';
    return c == 't' ? s_literal(self, "true", 4) : c == 'f' ? s_literal(self, "false", 5)
                    : -EBADMSG;
}

//  -?(0|[1-9][0-9]*)(.[0-9]+)? : integers of at most 18 digits (int64 in
//  any case), reals of at most S_MAX_REAL digits and no exponent (never
//  out of double range).
static int
s_skip_number(pk_jscan_t *self)
{
    const uint8_t *p = self->p, *end = self->end;
    if (p < end && *p == '-')
        p++;
    const uint8_t *digits = p;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    size_t n = (size_t) (p - digits);
    if (n == 0 || (n > 1 && *digits == '0'))
        return -EBADMSG;
    if (p < end && *p == '.') {
        const uint8_t *frac = ++p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        if (p == frac || n + (size_t) (p - frac) > S_MAX_REAL)
            return -EBADMSG;
    }
    else if (n > 18)
        return -EBADMSG;
    if (p < end && (*p == 'e' || *p == 'E'))
        return -EBADMSG;
    self->p = p;
    return 0;
}

static int s_skip(pk_jscan_t *self, int depth);

//  Member names are compared as written, so one with escapes is refused.
static int
s_skip_object(pk_jscan_t *self, int depth)
{
    const char *names[S_MAX_NAMES];
    size_t lens[S_MAX_NAMES], count = 0;
    self->p++;
    if (pk_jscan_peek(self) == '}') {
        self->p++;
        return 0;
    }
    int more = 1;
    while (more == 1) {
        const char *name;
        size_t len;
        if (count == S_MAX_NAMES || pk_jscan_string(self, &name, &len)
            || name == self->scratch)
            return -EBADMSG;
        for (size_t i = 0; i < count; i++)
            if (lens[i] == len && memcmp(names[i], name, len) == 0)
                return -EBADMSG;
        names[count] = name;
        lens[count++] = len;
        if (pk_jscan_take(self, ':') || s_skip(self, depth))
            return -EBADMSG;
        more = pk_jscan_next(self, '}');
    }
    return more;
}

static int
s_skip_array(pk_jscan_t *self, int depth)
{
    self->p++;
    if (pk_jscan_peek(self) == ']') {
        self->p++;
        return 0;
    }
    int more = 1;
    while (more == 1) {
        if (s_skip(self, depth))
            return -EBADMSG;
        more = pk_jscan_next(self, ']');
    }
    return more;
}

static int
s_skip(pk_jscan_t *self, int depth)
{
    const char *text;
    size_t len;
    bool b;
    switch (pk_jscan_peek(self)) {
        case '"': return pk_jscan_string(self, &text, &len);
        case '{': return depth < S_MAX_DEPTH ? s_skip_object(self, depth + 1) : -EBADMSG;
        case '[': return depth < S_MAX_DEPTH ? s_skip_array(self, depth + 1) : -EBADMSG;
        case 't':
        case 'f': return pk_jscan_bool(self, &b);
        case 'n': return s_literal(self, "null", 4);
        default:  return s_skip_number(self);
    }
}

int
pk_jscan_skip(pk_jscan_t *self)
{
    //  depth 1: the frame's object holds the value
    return s_skip(self, 1);
}
