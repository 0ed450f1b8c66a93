/*  protocol_scan.c: decoding in one pass (json_scan.h): members straight
    into the message, no tree.  It accepts only frames protocol.c's
    jansson walk accepts, with the same result; anything it does not
    accept goes to that walk, which then has the last word and words the
    error (pk_msg_decode).
*/
#include "wire/protocol_internal.h"
#include "wire/json_scan.h"
#include "base/big_cache.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define B(f) PK_BIT(PK_F_##f)

typedef struct {
    pk_jscan_t js;
    pk_msg_t *m;
    bool typed;                     //  "type" seen (members after it that
                                    //  the type does not want are skipped)
    uint64_t seen;                  //  fields whose member was seen
    size_t n_indexes, n_hits;
    const char *other[16];          //  names of the other members
    size_t other_len[16];
    int n_other;
} s_scan_t;

#define S_TYPE_FIELD PK_F_COUNT     //  s_field_named's answer for "type"

static int
s_field_named(const char *name, size_t len)
{
    if (len == 4 && memcmp(name, "type", 4) == 0)
        return S_TYPE_FIELD;
    for (int f = 0; f < PK_F_COUNT; f++)
        if (strlen(pk_wire_fields[f].name) == len && memcmp(pk_wire_fields[f].name, name, len) == 0)
            return f;
    return -1;
}

//  Room for item number count (and so all before it) of a list being
//  read; 0 or -EBADMSG.
static int
s_grow(void **v, size_t *cap, size_t count, size_t item)
{
    if (count < *cap)
        return 0;
    size_t want = *cap ? 2 * *cap : 64;
    while (want <= count)
        want *= 2;
    void *grown = realloc(*v, want * item);
    if (!grown)
        return -EBADMSG;
    *v = grown;
    *cap = want;
    return 0;
}

//  keys: hex straight into one arena that grows; the keys point into it
//  once it stops moving.
static int
s_scan_keys(s_scan_t *sc)
{
    pk_keys_t *keys = &sc->m->keys;
    size_t cap = 0, arena_cap = 0, used = 0;
    int more = pk_jscan_take(&sc->js, '[') ? -EBADMSG : 1;
    if (more == 1 && pk_jscan_peek(&sc->js) == ']') {
        sc->js.p++;
        more = 0;
    }
    for (; more == 1; more = pk_jscan_next(&sc->js, ']')) {
        size_t len;
        if (keys->count == PK_MAX_LIST
            || s_grow((void **) &keys->v, &cap, keys->count, sizeof *keys->v)
            || s_grow((void **) &keys->arena, &arena_cap, used + PK_MAX_KEY_BYTES, 1)
            || pk_jscan_hex(&sc->js, keys->arena + used, PK_MAX_KEY_HEX, &len))
            return -EBADMSG;
        keys->v[keys->count++] = pk_key_make(keys->arena + used, len);
        used += len;
    }
    if (more < 0 || (!keys->v && !(keys->v = malloc(sizeof *keys->v)))
        || (!keys->arena && !(keys->arena = malloc(1))))
        return -EBADMSG;
    for (size_t i = 0, at = 0; i < keys->count; at += keys->v[i++].len)
        keys->v[i].bytes = keys->arena + at;
    return 0;
}

//  block_indexes or hits: a list whose length is checked against the
//  keys' once every member is read.
static int
s_scan_list(s_scan_t *sc, bool hits)
{
    pk_msg_t *m = sc->m;
    size_t *n = hits ? &sc->n_hits : &sc->n_indexes, cap = 0;
    void **v = hits ? (void **) &m->hits : (void **) &m->block_indexes;
    if (pk_jscan_take(&sc->js, '[') || s_grow(v, &cap, 0, hits ? 1 : sizeof(uint32_t)))
        return -EBADMSG;
    int more = 1;
    if (pk_jscan_peek(&sc->js) == ']') {
        sc->js.p++;
        more = 0;
    }
    for (; more == 1; more = pk_jscan_next(&sc->js, ']')) {
        uint64_t x;
        bool b;
        if (*n == PK_MAX_LIST || s_grow(v, &cap, *n, hits ? 1 : sizeof(uint32_t)))
            return -EBADMSG;
        if (hits) {
            if (pk_jscan_bool(&sc->js, &b))
                return -EBADMSG;
            m->hits[(*n)++] = b;
        }
        else {
            if (pk_jscan_uint(&sc->js, &x) || x > PK_MAX_BLOCK_INDEX)
                return -EBADMSG;
            m->block_indexes[(*n)++] = (uint32_t) x;
        }
    }
    return more;
}

static int
s_scan_metadata(s_scan_t *sc, const pk_field_spec_t *spec)
{
    pk_msg_t *m = sc->m;
    const char *text;
    size_t len, out_len = 0;
    if (pk_jscan_string(&sc->js, &text, &len) || len > (PK_MAX_METADATA + 2) / 3 * 4)
        return -EBADMSG;
    size_t cap = len / 4 * 3 + 3;
    const char *end = NULL;
    m->agent_metadata = malloc(cap);
    if (!m->agent_metadata
        || sodium_base642bin(m->agent_metadata, cap, text, len, NULL, &out_len, &end,
                             sodium_base64_VARIANT_ORIGINAL) != 0
        || end != text + len || out_len < spec->min || out_len > spec->max)
        return -EBADMSG;
    m->agent_metadata_len = out_len;
    return 0;
}

//  providers: up to spec->max strings of 1..PK_MAX_PROVIDER bytes.
static int
s_scan_strings(s_scan_t *sc, const pk_field_spec_t *spec)
{
    pk_msg_t *m = sc->m;
    if (pk_jscan_take(&sc->js, '[') || pk_jscan_peek(&sc->js) == ']'
        || !(m->providers = calloc(spec->max, sizeof *m->providers)))
        return -EBADMSG;
    int more = 1;
    for (; more == 1; more = pk_jscan_next(&sc->js, ']')) {
        const char *text;
        size_t len;
        if (m->nproviders == spec->max || pk_jscan_string(&sc->js, &text, &len) || len < 1
            || len > PK_MAX_PROVIDER || !(m->providers[m->nproviders] = strndup(text, len)))
            return -EBADMSG;
        m->nproviders++;
    }
    return more < 0 || m->nproviders < spec->min ? -EBADMSG : 0;
}

//  One member's value, by its field's kind (the type may not be known yet:
//  the rules that depend on it wait for s_scan_finish).
//  strndup, with a long string (an answer's checksums: 1 MiB at 65,536
//  hits) from the kept blocks of base/big_cache.h
static char *
s_strndup(const char *text, size_t len)
{
    len = strnlen(text, len);
    char *s = pk_big_alloc(len + 1);
    if (s) {
        memcpy(s, text, len);
        s[len] = '\0';
    }
    return s;
}

static int
s_scan_field(s_scan_t *sc, pk_field_t f)
{
    const pk_field_spec_t *spec = &pk_wire_fields[f];
    pk_msg_t *m = sc->m;
    const char *text;
    size_t len;
    uint64_t v;
    switch (spec->kind) {
        case K_STRING:
            if (pk_jscan_string(&sc->js, &text, &len) || len < spec->min || len > spec->max
                || !(*pk_wire_string_slot(m, f) = s_strndup(text, len)))
                return -EBADMSG;
            return 0;
        case K_UINT:
            if (pk_jscan_uint(&sc->js, &v) || v < spec->min || v > spec->max)
                return -EBADMSG;
            *pk_wire_uint_slot(m, f) = v;
            return 0;
        case K_BOOL:
            return pk_jscan_bool(&sc->js, &m->success);
        case K_EPOCH:
            if (pk_jscan_hex(&sc->js, f == PK_F_SOURCE_EPOCH ? m->source_epoch : m->target_epoch,
                             2 * PK_EPOCH_LEN, &len) || len != PK_EPOCH_LEN)
                return -EBADMSG;
            return 0;
        case K_KEYS:
            return s_scan_keys(sc);
        case K_INDEXES:
        case K_HITS:
            return s_scan_list(sc, spec->kind == K_HITS);
        case K_METADATA:
            return s_scan_metadata(sc, spec);
        case K_STRINGS:
            return s_scan_strings(sc, spec);
        case K_CODE:
            if (pk_jscan_string(&sc->js, &text, &len))
                return -EBADMSG;
            for (int c = 0; c < PK_DISC_COUNT; c++)
                if (strlen(pk_wire_codes[c]) == len && memcmp(pk_wire_codes[c], text, len) == 0) {
                    m->code = (pk_disconnect_code_t) c;
                    return 0;
                }
            return -EBADMSG;
    }
    return -EBADMSG;
}

static int
s_scan_type(s_scan_t *sc)
{
    const char *text;
    size_t len;
    if (pk_jscan_string(&sc->js, &text, &len))
        return -EBADMSG;
    for (int t = 0; t < PK_MSG_COUNT; t++)
        if (strlen(pk_wire_messages[t].name) == len && memcmp(pk_wire_messages[t].name, text, len) == 0) {
            sc->m->type = (pk_msg_type_t) t;
            sc->typed = true;
            return 0;
        }
    return -EBADMSG;
}

//  A member the decoder has no field for: skipped, its name kept so that
//  a second one of that name is refused (names with escapes are not
//  compared here: the full parser takes those frames).
static int
s_scan_other(s_scan_t *sc, const char *name, size_t len)
{
    if (name == sc->js.scratch || sc->n_other == 16)
        return -EBADMSG;
    for (int i = 0; i < sc->n_other; i++)
        if (sc->other_len[i] == len && memcmp(sc->other[i], name, len) == 0)
            return -EBADMSG;
    sc->other[sc->n_other] = name;
    sc->other_len[sc->n_other++] = len;
    return pk_jscan_skip(&sc->js);
}

static int
s_scan_member(s_scan_t *sc)
{
    const char *name;
    size_t len;
    if (pk_jscan_string(&sc->js, &name, &len))
        return -EBADMSG;
    int f = s_field_named(name, len);
    if (f < 0) {
        const char *kept = name;
        if (pk_jscan_take(&sc->js, ':'))
            return -EBADMSG;
        return s_scan_other(sc, kept, len);
    }
    if (sc->seen & PK_BIT(f))
        return -EBADMSG;                    //  a duplicate member
    sc->seen |= PK_BIT(f);
    if (pk_jscan_take(&sc->js, ':'))
        return -EBADMSG;
    if (f == S_TYPE_FIELD)
        return s_scan_type(sc);
    uint64_t wanted = pk_wire_messages[sc->m->type].required | pk_wire_messages[sc->m->type].optional;
    if (sc->typed && !(wanted & PK_BIT(f)))
        return pk_jscan_skip(&sc->js);
    return s_scan_field(sc, (pk_field_t) f);
}

//  A field the type does not want, read before "type" was: back to unset,
//  as the walk leaves it.
static void
s_forget_field(pk_msg_t *m, pk_field_t f)
{
    switch (pk_wire_fields[f].kind) {
        case K_STRING: {
            char **slot = pk_wire_string_slot(m, f);
            free(*slot);
            *slot = NULL;
            break;
        }
        case K_UINT:     *pk_wire_uint_slot(m, f) = 0; break;
        case K_BOOL:     m->success = false; break;
        case K_CODE:     m->code = 0; break;
        case K_EPOCH:
            memset(f == PK_F_SOURCE_EPOCH ? m->source_epoch : m->target_epoch, 0, PK_EPOCH_LEN);
            break;
        case K_KEYS:     pk_wire_keys_free(&m->keys); break;
        case K_INDEXES:  free(m->block_indexes); m->block_indexes = NULL; break;
        case K_HITS:     free(m->hits); m->hits = NULL; break;
        case K_METADATA:
            free(m->agent_metadata);
            m->agent_metadata = NULL;
            m->agent_metadata_len = 0;
            break;
        case K_STRINGS:  pk_wire_strings_free(m); break;
    }
}

//  The rules that need the whole frame: the type's members, the lists'
//  lengths, the epochs, then those of pk_wire_check_message.
static int
s_scan_finish(s_scan_t *sc, char *err)
{
    pk_msg_t *m = sc->m;
    if (!sc->typed)
        return -EBADMSG;
    uint64_t required = pk_wire_messages[m->type].required;
    uint64_t wanted = required | pk_wire_messages[m->type].optional;
    uint64_t fields = sc->seen & (PK_BIT(PK_F_COUNT) - 1);
    for (uint64_t extra = fields & ~wanted; extra; extra &= extra - 1)
        s_forget_field(m, (pk_field_t) __builtin_ctzll(extra));
    m->present = fields & wanted;
    if ((m->present & B(HITS)) && !(m->present & B(KEYS)))
        m->keys.count = sc->n_hits;         //  a lookup_resp of wire 1.1
    if ((required & ~m->present)
        || ((m->present & B(BLOCK_INDEXES)) && sc->n_indexes != m->keys.count)
        || ((m->present & B(HITS)) && sc->n_hits != m->keys.count))
        return -EBADMSG;
    for (int f = PK_F_SOURCE_EPOCH; f <= PK_F_TARGET_EPOCH; f++)
        if ((m->present & PK_BIT(f)) && !pk_wire_zero_epoch_ok(m->type, (pk_field_t) f)
            && pk_wire_is_zero(f == PK_F_SOURCE_EPOCH ? m->source_epoch : m->target_epoch))
            return -EBADMSG;
    return pk_wire_check_message(m, err) ? -EBADMSG : 0;
}

int
pk_msg_decode_scan(const void *data, size_t len, pk_msg_t **msg_p)
{
    *msg_p = NULL;
    s_scan_t sc = { .m = pk_msg_new(PK_MSG_DESCRIBE) };
    if (!sc.m)
        return -EAGAIN;
    pk_jscan_init(&sc.js, data, len);
    int more = pk_jscan_take(&sc.js, '{') ? -EBADMSG : 1;
    if (more == 1 && pk_jscan_peek(&sc.js) == '}') {
        sc.js.p++;
        more = 0;
    }
    while (more == 1)
        more = s_scan_member(&sc) ? -EBADMSG : pk_jscan_next(&sc.js, '}');
    int rc = more == 0 && pk_jscan_end(&sc.js) == 0 ? s_scan_finish(&sc, NULL) : -EBADMSG;
    pk_jscan_fini(&sc.js);
    if (rc) {
        pk_msg_destroy(&sc.m);
        return -EAGAIN;
    }
    *msg_p = sc.m;
    return 0;
}

