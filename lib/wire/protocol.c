/*  protocol.c: the JSON codec of protocol.md, driven by two tables.

    pk_wire_fields says what each member is (JSON type and bounds); pk_wire_messages
    says which members each type requires or allows.  Decoding is one pass
    of protocol_scan.c's scanner over the frame, members converted as they
    are read; a frame it doubts goes to the reference walk here (a jansson
    parse, then the type's members once), which words every refusal.  Hex
    keys are decoded in place into one arena; duplicates are found with
    seeded SipHash tables, so a peer cannot choose colliding keys.  The rules that tie several members
    together live in pk_wire_check_message, which encode runs as well: nothing
    the encoder emits can be refused by the decoder.
*/
#include "wire/protocol.h"
#include "wire/protocol_internal.h"
#include "base/big_cache.h"
#include "base/miss_reason.h"
#include "wire/json_out.h"

#include <assert.h>
#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


const pk_field_spec_t pk_wire_fields[PK_F_COUNT] = {
    [PK_F_CODE]               = { "code", K_CODE, 0, 0 },
    [PK_F_REASON]             = { "reason", K_STRING, 0, PK_MAX_STRING },
    [PK_F_KV_REQUEST_ID]      = { "kv_request_id", K_STRING, 1, PK_MAX_STRING },
    [PK_F_KEYS]               = { "keys", K_KEYS, 0, PK_MAX_LIST },
    [PK_F_BLOCK_INDEXES]      = { "block_indexes", K_INDEXES, 0, PK_MAX_BLOCK_INDEX },
    [PK_F_HITS]               = { "hits", K_HITS, 0, 0 },
    [PK_F_SUCCESS]            = { "success", K_BOOL, 0, 0 },
    [PK_F_ROUND_SEQ]          = { "round_seq", K_UINT, 0, PK_MAX_ROUND_SEQ },
    [PK_F_LANDING]            = { "landing", K_UINT, 0, PK_MAX_ROUND_SEQ },
    [PK_F_WIRE_MAJOR]         = { "wire_major", K_UINT, 0, 65535 },
    [PK_F_WIRE_MINOR]         = { "wire_minor", K_UINT, 0, 65535 },
    [PK_F_PEER_ID]            = { "peer_id", K_STRING, 1, PK_MAX_STRING },
    [PK_F_SOURCE_EPOCH]       = { "source_epoch", K_EPOCH, 0, 0 },
    [PK_F_TARGET_EPOCH]       = { "target_epoch", K_EPOCH, 0, 0 },
    [PK_F_AGENT_METADATA]     = { "agent_metadata", K_METADATA, 1, PK_MAX_METADATA },
    [PK_F_BASE_ADDR]          = { "base_addr", K_UINT, 0, JSON_INT_MAX },
    [PK_F_NUM_BLOCKS]         = { "num_blocks", K_UINT, 1, PK_MAX_NUM_BLOCKS },
    [PK_F_BLOCK_LEN]          = { "block_len", K_UINT, 1, PK_MAX_ROUND_SEQ },
    [PK_F_CONFIG_FINGERPRINT] = { "config_fingerprint", K_STRING, 0, PK_MAX_STRING },
    [PK_F_HASH_SEED]          = { "hash_seed", K_STRING, 1, PK_MAX_STRING },
    [PK_F_PROVIDER]           = { "provider", K_STRING, 1, PK_MAX_STRING },
    [PK_F_PROVIDERS]          = { "providers", K_STRINGS, 1, PK_MAX_PROVIDERS },
    [PK_F_HOST]               = { "host", K_STRING, 1, PK_MAX_HOST },
    [PK_F_CAPS]               = { "caps", K_STRING, 0, PK_MAX_CAPS },
    [PK_F_CHECKSUMS]          = { "checksums", K_STRING, 0, PK_CHECKSUM_HEX * PK_MAX_LIST },
    [PK_F_REASONS]            = { "reasons", K_STRING, 0, PK_MAX_LIST },
    [PK_F_SOURCES]            = { "sources", K_STRING, 0, PK_SOURCE_HEX * PK_MAX_LIST },
    [PK_F_RAILS]              = { "rails", K_STRING, 1, PK_MAX_RAILS_TEXT },
    [PK_F_RAILS_FAILED]       = { "rails_failed", K_STRING, 1, 2 * PK_MAX_RAILS },
    [PK_F_RAIL_OFFER]         = { "rail_offer", K_STRING, 3, PK_MAX_RAIL_OFFER_TEXT },
    [PK_F_RAIL_SLICES]        = { "rail_slices", K_STRING, 1, PK_MAX_RAILS_TEXT },
};

#define B(f) PK_BIT(PK_F_##f)
#define EPOCHS (B(SOURCE_EPOCH) | B(TARGET_EPOCH))
#define INCOMPATIBLE_EXTRAS \
    (B(WIRE_MAJOR) | B(WIRE_MINOR) | B(BLOCK_LEN) | B(CONFIG_FINGERPRINT) | B(HASH_SEED))

#define TO_SERVER PK_TO_SERVER
#define TO_CONSUMER PK_TO_CONSUMER
#define EITHER (PK_TO_SERVER | PK_TO_CONSUMER)

const pk_msg_spec_t pk_wire_messages[PK_MSG_COUNT] = {
    [PK_MSG_DESCRIBE]      = { "describe", 0, 0, TO_SERVER },
    [PK_MSG_DESCRIPTION]   = { "description",
        B(WIRE_MAJOR) | B(WIRE_MINOR) | B(PEER_ID) | B(BLOCK_LEN)
        | B(CONFIG_FINGERPRINT) | B(HASH_SEED) | B(PROVIDER), B(PROVIDERS) | B(HOST) | B(CAPS),
        TO_CONSUMER },
    [PK_MSG_CONNECT]       = { "connect",
        B(WIRE_MAJOR) | B(WIRE_MINOR) | B(PEER_ID) | EPOCHS | B(AGENT_METADATA)
        | B(BASE_ADDR) | B(NUM_BLOCKS) | B(BLOCK_LEN) | B(CONFIG_FINGERPRINT)
        | B(HASH_SEED), B(CAPS), TO_SERVER },
    [PK_MSG_CONNECT_ACK]   = { "connect_ack",
        B(WIRE_MAJOR) | B(WIRE_MINOR) | B(PEER_ID) | EPOCHS | B(BLOCK_LEN)
        | B(NUM_BLOCKS), B(CAPS), TO_CONSUMER },
    [PK_MSG_DISCONNECT]    = { "disconnect", B(CODE) | B(REASON),
        INCOMPATIBLE_EXTRAS | EPOCHS, EITHER },
    [PK_MSG_PING]          = { "ping", EPOCHS, 0, TO_SERVER },
    [PK_MSG_PONG]          = { "pong", EPOCHS, 0, TO_CONSUMER },
    [PK_MSG_LOOKUP]        = { "lookup",
        B(KV_REQUEST_ID) | B(KEYS) | B(ROUND_SEQ) | EPOCHS, 0, TO_SERVER },
    [PK_MSG_LOOKUP_RESP]   = { "lookup_resp",
        B(KV_REQUEST_ID) | B(HITS) | B(ROUND_SEQ) | EPOCHS, B(KEYS) | B(CHECKSUMS) | B(REASONS),
        TO_CONSUMER },
    [PK_MSG_FETCH]         = { "fetch",
        B(KV_REQUEST_ID) | B(KEYS) | B(BLOCK_INDEXES) | B(ROUND_SEQ) | EPOCHS, B(RAIL_OFFER),
        TO_SERVER },
    [PK_MSG_TRANSFER_DONE] = { "transfer_done",
        B(KV_REQUEST_ID) | B(SUCCESS) | B(ROUND_SEQ) | B(LANDING) | EPOCHS,
        B(RAILS) | B(RAILS_FAILED) | B(RAIL_SLICES),
        TO_CONSUMER },
    [PK_MSG_ABORT_FETCH]   = { "abort_fetch",
        B(KV_REQUEST_ID) | B(ROUND_SEQ) | EPOCHS, 0, TO_SERVER },
    [PK_MSG_ABORT_ACK]     = { "abort_ack",
        B(KV_REQUEST_ID) | B(ROUND_SEQ) | B(LANDING) | EPOCHS,
        B(RAILS) | B(RAILS_FAILED) | B(RAIL_SLICES),
        TO_CONSUMER },
    [PK_MSG_GET]           = { "get",
        B(KV_REQUEST_ID) | B(KEYS) | B(BLOCK_INDEXES) | B(ROUND_SEQ) | EPOCHS, B(RAIL_OFFER),
        TO_SERVER },
    [PK_MSG_GET_RESP]      = { "get_resp",
        B(KV_REQUEST_ID) | B(HITS) | B(SUCCESS) | B(ROUND_SEQ) | B(LANDING) | EPOCHS,
        B(CHECKSUMS) | B(REASONS) | B(SOURCES) | B(RAILS) | B(RAILS_FAILED) | B(RAIL_SLICES),
        TO_CONSUMER },
};

const char *const pk_wire_codes[PK_DISC_COUNT] = {
    "incompatible", "no_session", "violation", "silent", "shutdown", "retired"
};

size_t
pk_wire_rails_parse(const char *text, uint64_t *counts, size_t cap)
{
    size_t n = 0;
    for (const char *at = text; at && *at && n < cap; n++) {
        char *end;
        counts[n] = strtoull(at, &end, 10);
        if (end == at)
            return 0;
        at = *end == ' ' ? end + 1 : end;
    }
    return n;
}

uint32_t
pk_wire_rails_failed_parse(const char *text)
{
    uint32_t mask = 0;
    for (const char *at = text; at && *at; at++)
        if (*at >= '0' && *at < '0' + PK_MAX_RAILS)
            mask |= UINT32_C(1) << (*at - '0');
    return mask;
}

void
pk_wire_rails_failed_format(uint32_t mask, char *out)
{
    size_t used = 0;
    for (int i = 0; i < PK_MAX_RAILS; i++)
        if (mask & (UINT32_C(1) << i)) {
            if (used)
                out[used++] = ' ';
            out[used++] = (char) ('0' + i);
        }
    out[used] = '\0';
}

void
pk_wire_rails_format(const uint64_t *counts, size_t n, char *out)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && i < PK_MAX_RAILS; i++)
        used += (size_t) snprintf(out + used, PK_MAX_RAILS_TEXT + 1 - used, "%s%llu",
                                  i ? " " : "", (unsigned long long) counts[i]);
}

int
pk_wire_rail_offer_parse(const char *text, size_t *rail_p, uint8_t *blob, size_t *len_p)
{
    if (!text || text[0] < '0' || text[0] >= '0' + PK_MAX_RAILS || text[1] != ' ')
        return -EPROTO;
    *rail_p = (size_t) (text[0] - '0');
    const char *end;
    if (sodium_base642bin(blob, PK_MAX_RAIL_BLOB, text + 2, strlen(text + 2), NULL, len_p,
                          &end, sodium_base64_VARIANT_ORIGINAL) != 0 || *end || !*len_p)
        return -EPROTO;
    return 0;
}

char *
pk_wire_rail_offer_format(size_t rail, const uint8_t *blob, size_t len)
{
    if (rail >= PK_MAX_RAILS || !len || len > PK_MAX_RAIL_BLOB)
        return NULL;
    size_t b64 = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(2 + b64);
    if (!out)
        return NULL;
    out[0] = (char) ('0' + rail);
    out[1] = ' ';
    sodium_bin2base64(out + 2, b64, blob, len, sodium_base64_VARIANT_ORIGINAL);
    return out;
}

bool
pk_caps_has(const char *caps, const char *word)
{
    size_t len = strlen(word);
    for (const char *at = caps; at && *at; ) {
        while (*at == ' ')
            at++;
        size_t n = strcspn(at, " ");
        if (n == len && memcmp(at, word, len) == 0)
            return true;
        at += n;
    }
    return false;
}

unsigned
pk_msg_direction(pk_msg_type_t type)
{
    return (unsigned) type < PK_MSG_COUNT ? pk_wire_messages[type].direction : 0;
}

const char *
pk_msg_type_name(pk_msg_type_t type)
{
    return (unsigned) type < PK_MSG_COUNT ? pk_wire_messages[type].name : "?";
}

const char *
pk_disconnect_code_name(pk_disconnect_code_t code)
{
    return (unsigned) code < PK_DISC_COUNT ? pk_wire_codes[code] : "?";
}

//  --------------------------------------------------------------------------
//  Errors

//  What a JSON value is, for "got ..." in an error: scalars as written,
//  containers and strings by kind (their text can be huge).
static const char *
s_got(const json_t *j, char *buf, size_t size)
{
    switch (json_typeof(j)) {
        case JSON_OBJECT: return "object";
        case JSON_ARRAY:  return "array";
        case JSON_STRING: return "string";
        case JSON_TRUE:   return "true";
        case JSON_FALSE:  return "false";
        case JSON_NULL:   return "null";
        case JSON_INTEGER:
            snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
            return buf;
        case JSON_REAL: {
            char *text = json_dumps(j, JSON_ENCODE_ANY);
            snprintf(buf, size, "%s", text ? text : "real");
            free(text);
            return buf;
        }
    }
    return "?";
}

//  --------------------------------------------------------------------------
//  Duplicate detection over a list of up to 65,536 items.  zhashx costs a
//  malloc per item and rehashes as it grows (measured: a third of the
//  decode budget of a 65,536-key fetch), so this is one flat open-addressed
//  table of item positions, sized once.  Keys are hashed with keyed SipHash
//  and indexes with a random multiplier, so a peer cannot pick collisions.

typedef struct {
    const pk_msg_t *msg;
    bool keys;          //  keys, else block_indexes
} s_list_t;

static uint64_t
s_item_hash(const s_list_t *l, size_t i)
{
    if (l->keys)
        return l->msg->keys.v[i].hash;
    return pk_hash_id(l->msg->block_indexes[i], 0);
}

static bool
s_item_eq(const s_list_t *l, size_t i, size_t j)
{
    if (l->keys)
        return pk_key_eq(&l->msg->keys.v[i], &l->msg->keys.v[j]);
    return l->msg->block_indexes[i] == l->msg->block_indexes[j];
}

//  Finds the first item (in list order) equal to an earlier one: 0 with
//  *dup = -1 when all differ, *dup and *first set otherwise, or -ENOMEM.
static int
s_find_duplicate(const s_list_t *l, size_t count, ssize_t *dup, size_t *first)
{
    *dup = -1;
    if (count < 2)
        return 0;
    int bits = 1;
    while ((size_t) 1 << bits < 2 * count)
        bits++;
    size_t mask = ((size_t) 1 << bits) - 1;
    uint32_t *slot = pk_big_calloc(mask + 1, sizeof *slot);  //  position + 1, 0 = empty
    if (!slot)
        return -ENOMEM;
    for (size_t i = 0; i < count; i++) {
        //  the top bits of a multiplicative hash are the well-mixed ones
        size_t at = (size_t) (s_item_hash(l, i) >> (64 - bits));
        while (slot[at] && !s_item_eq(l, slot[at] - 1, i))
            at = (at + 1) & mask;
        if (slot[at]) {
            *first = slot[at] - 1;
            *dup = (ssize_t) i;
            break;
        }
        slot[at] = (uint32_t) i + 1;
    }
    pk_big_free(slot);
    return 0;
}

//  --------------------------------------------------------------------------
//  Messages

pk_msg_t *
pk_msg_new(pk_msg_type_t type)
{
    assert((unsigned) type < PK_MSG_COUNT);
    pk_msg_t *self = calloc(1, sizeof *self);
    if (self)
        self->type = type;
    return self;
}

void
pk_wire_keys_free(pk_keys_t *keys)
{
    free(keys->v);
    free(keys->arena);
    memset(keys, 0, sizeof *keys);
}

void
pk_wire_strings_free(pk_msg_t *self)
{
    for (size_t i = 0; i < self->nproviders; i++)
        free(self->providers[i]);
    free(self->providers);
    self->providers = NULL;
    self->nproviders = 0;
}

void
pk_msg_destroy(pk_msg_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_msg_t *self = *self_p;
    free(self->kv_request_id);
    free(self->peer_id);
    free(self->config_fingerprint);
    free(self->hash_seed);
    free(self->provider);
    free(self->reason);
    free(self->host);
    free(self->caps);
    pk_big_free(self->checksums);       //  1 MiB at 65,536 hits
    free(self->reasons);
    free(self->sources);
    free(self->rails);
    free(self->rails_failed);
    free(self->rail_slices);
    free(self->rail_offer);
    pk_wire_strings_free(self);
    pk_wire_keys_free(&self->keys);
    free(self->block_indexes);
    free(self->hits);
    free(self->agent_metadata);
    free(self);
    *self_p = NULL;
}

char **
pk_wire_string_slot(pk_msg_t *self, pk_field_t field)
{
    switch (field) {
        case PK_F_KV_REQUEST_ID:      return &self->kv_request_id;
        case PK_F_PEER_ID:            return &self->peer_id;
        case PK_F_CONFIG_FINGERPRINT: return &self->config_fingerprint;
        case PK_F_HASH_SEED:          return &self->hash_seed;
        case PK_F_PROVIDER:           return &self->provider;
        case PK_F_REASON:             return &self->reason;
        case PK_F_HOST:               return &self->host;
        case PK_F_CAPS:               return &self->caps;
        case PK_F_CHECKSUMS:          return &self->checksums;
        case PK_F_REASONS:            return &self->reasons;
        case PK_F_SOURCES:            return &self->sources;
        case PK_F_RAILS:              return &self->rails;
        case PK_F_RAILS_FAILED:       return &self->rails_failed;
        case PK_F_RAIL_SLICES:        return &self->rail_slices;
        case PK_F_RAIL_OFFER:         return &self->rail_offer;
        default:                      return NULL;
    }
}

uint64_t *
pk_wire_uint_slot(pk_msg_t *self, pk_field_t field)
{
    switch (field) {
        case PK_F_ROUND_SEQ:  return &self->round_seq;
        case PK_F_LANDING:    return &self->landing;
        case PK_F_WIRE_MAJOR: return &self->wire_major;
        case PK_F_WIRE_MINOR: return &self->wire_minor;
        case PK_F_BASE_ADDR:  return &self->base_addr;
        case PK_F_NUM_BLOCKS: return &self->num_blocks;
        case PK_F_BLOCK_LEN:  return &self->block_len;
        default:              return NULL;
    }
}

int
pk_msg_set_string(pk_msg_t *self, pk_field_t field, const char *value)
{
    char **slot = pk_wire_string_slot(self, field);
    assert(slot && value);
    char *copy = strdup(value);
    if (!copy)
        return -ENOMEM;
    free(*slot);
    *slot = copy;
    self->present |= PK_BIT(field);
    return 0;
}

void
pk_msg_set_uint(pk_msg_t *self, pk_field_t field, uint64_t value)
{
    uint64_t *slot = pk_wire_uint_slot(self, field);
    assert(slot);
    *slot = value;
    self->present |= PK_BIT(field);
}

void
pk_msg_set_bool(pk_msg_t *self, pk_field_t field, bool value)
{
    assert(field == PK_F_SUCCESS);
    self->success = value;
    self->present |= PK_BIT(field);
}

void
pk_msg_set_epochs(pk_msg_t *self, const uint8_t *source, const uint8_t *target)
{
    memcpy(self->source_epoch, source, PK_EPOCH_LEN);
    memcpy(self->target_epoch, target, PK_EPOCH_LEN);
    self->present |= EPOCHS;
}

void
pk_msg_set_code(pk_msg_t *self, pk_disconnect_code_t code)
{
    self->code = code;
    self->present |= PK_BIT(PK_F_CODE);
}

int
pk_msg_set_keys(pk_msg_t *self, const pk_key_t *keys, size_t count)
{
    size_t total = 0;
    for (size_t i = 0; i < count; i++)
        total += keys[i].len;
    pk_keys_t copy = { count, NULL, NULL };
    copy.v = malloc((count ? count : 1) * sizeof *copy.v);
    copy.arena = malloc(total ? total : 1);
    if (!copy.v || !copy.arena) {
        pk_wire_keys_free(&copy);
        return -ENOMEM;
    }
    uint8_t *at = copy.arena;
    for (size_t i = 0; i < count; i++) {
        memcpy(at, keys[i].bytes, keys[i].len);
        copy.v[i] = (pk_key_t) { at, keys[i].len, keys[i].hash };
        at += keys[i].len;
    }
    pk_wire_keys_free(&self->keys);
    self->keys = copy;
    self->present |= PK_BIT(PK_F_KEYS);
    return 0;
}

int
pk_msg_set_strings(pk_msg_t *self, pk_field_t field, const char *const *v, size_t n)
{
    assert(field == PK_F_PROVIDERS);
    char **copy = calloc(n ? n : 1, sizeof *copy);
    if (!copy)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (!(copy[i] = strdup(v[i]))) {
            while (i--)
                free(copy[i]);
            free(copy);
            return -ENOMEM;
        }
    pk_wire_strings_free(self);
    self->providers = copy;
    self->nproviders = n;
    self->present |= PK_BIT(field);
    return 0;
}

int
pk_msg_set_block_indexes(pk_msg_t *self, const uint32_t *idx, size_t count)
{
    uint32_t *copy = malloc((count ? count : 1) * sizeof *copy);
    if (!copy)
        return -ENOMEM;
    if (count)
        memcpy(copy, idx, count * sizeof *copy);
    free(self->block_indexes);
    self->block_indexes = copy;
    self->present |= PK_BIT(PK_F_BLOCK_INDEXES);
    return 0;
}

int
pk_msg_set_hits(pk_msg_t *self, const bool *hits, size_t count)
{
    bool *copy = malloc((count ? count : 1) * sizeof *copy);
    if (!copy)
        return -ENOMEM;
    if (count)
        memcpy(copy, hits, count * sizeof *copy);
    free(self->hits);
    self->hits = copy;
    self->present |= PK_BIT(PK_F_HITS);
    return 0;
}

int
pk_msg_set_metadata(pk_msg_t *self, const void *data, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return -ENOMEM;
    if (len)
        memcpy(copy, data, len);
    free(self->agent_metadata);
    self->agent_metadata = copy;
    self->agent_metadata_len = len;
    self->present |= PK_BIT(PK_F_AGENT_METADATA);
    return 0;
}

//  --------------------------------------------------------------------------
//  Rules that tie members together; run by both decode and encode.

bool
pk_wire_is_zero(const uint8_t *epoch)
{
    uint8_t acc = 0;
    for (int i = 0; i < PK_EPOCH_LEN; i++)
        acc |= epoch[i];
    return acc == 0;
}

//  Only connect's target_epoch may be all zeros (no server epoch known yet).
bool
pk_wire_zero_epoch_ok(pk_msg_type_t type, pk_field_t field)
{
    return type == PK_MSG_CONNECT && field == PK_F_TARGET_EPOCH;
}

int
pk_wire_check_message(const pk_msg_t *m, char *err)
{
    const char *tn = pk_wire_messages[m->type].name;
    size_t n = m->keys.count;

    //  rails and rail_slices: 1..PK_MAX_RAILS decimal counts, one space
    //  apart, each at most the landing bound
    for (int f = PK_F_RAILS; f <= PK_F_RAIL_SLICES; f += PK_F_RAIL_SLICES - PK_F_RAILS) {
        if (!(m->present & PK_BIT(f)))
            continue;
        const char *text = f == PK_F_RAILS ? m->rails : m->rail_slices, *at = text;
        const char *fn = pk_wire_fields[f].name;
        size_t k = 0;
        while (*at && k <= PK_MAX_RAILS) {
            uint64_t v = 0;
            size_t digits = 0;
            for (; *at >= '0' && *at <= '9' && digits < 16; at++, digits++)
                v = v * 10 + (uint64_t) (*at - '0');
            if (!digits || v > PK_MAX_ROUND_SEQ || (*at && (*at != ' ' || !at[1])))
                return pk_err(err, -EPROTO, "%s.%s: expected 1..%d decimal counts one "
                              "space apart, got \"%.40s\"", tn, fn, PK_MAX_RAILS, text);
            k++;
            at += *at == ' ';
        }
        if (k == 0 || k > PK_MAX_RAILS)
            return pk_err(err, -EPROTO, "%s.%s: expected 1..%d counts", tn, fn, PK_MAX_RAILS);
    }

    //  rails_failed: 1..PK_MAX_RAILS rail indexes, ascending, one space
    //  apart
    if (m->present & B(RAILS_FAILED)) {
        const char *at = m->rails_failed;
        int last = -1;
        for (; *at; at += at[1] == ' ' ? 2 : 1)
            if (*at < '0' || *at >= '0' + PK_MAX_RAILS || *at - '0' <= last
                || (at[1] && (at[1] != ' ' || !at[2])))
                break;
            else
                last = *at - '0';
        if (*at || last < 0)
            return pk_err(err, -EPROTO, "%s.rails_failed: expected rail indexes 0..%d, "
                          "ascending, one space apart, got \"%.40s\"", tn, PK_MAX_RAILS - 1,
                          m->rails_failed);
    }

    //  rail_offer: a rail index 0..PK_MAX_RAILS-1, one space, and the
    //  rail's blob in base64 (1..PK_MAX_RAIL_BLOB bytes)
    if (m->present & B(RAIL_OFFER)) {
        uint8_t scratch[PK_MAX_RAIL_BLOB];
        size_t rail, len;
        if (pk_wire_rail_offer_parse(m->rail_offer, &rail, scratch, &len))
            return pk_err(err, -EPROTO, "%s.rail_offer: expected a rail index 0..%d, one space "
                          "and 1..%u bytes in base64, got \"%.40s\"", tn, PK_MAX_RAILS - 1,
                          PK_MAX_RAIL_BLOB, m->rail_offer);
    }

    switch (m->type) {
        case PK_MSG_CONNECT: {
            uint64_t bytes, end;
            if (__builtin_mul_overflow(m->num_blocks, m->block_len, &bytes)
                || __builtin_add_overflow(m->base_addr, bytes, &end))
                return pk_err(err, -EPROTO,
                              "%s: base_addr + num_blocks*block_len overflows 64 bits", tn);
            break;
        }
        case PK_MSG_DISCONNECT: {
            uint64_t epochs = m->present & EPOCHS;
            if (epochs && epochs != EPOCHS)
                return pk_err(err, -EPROTO,
                              "%s: source_epoch and target_epoch go together", tn);
            if (m->code == PK_DISC_INCOMPATIBLE) {
                uint64_t lacking = INCOMPATIBLE_EXTRAS & ~m->present;
                if (lacking)
                    return pk_err(err, -EPROTO, "%s.%s: missing (required for code incompatible)",
                                  tn, pk_wire_fields[__builtin_ctzll(lacking)].name);
            }
            break;
        }
        case PK_MSG_DESCRIPTION:
            //  old consumers read provider alone: it must be the best one
            if ((m->present & B(PROVIDERS)) && m->nproviders
                && strcmp(m->providers[0], m->provider) != 0)
                return pk_err(err, -EPROTO, "%s.providers[0]: expected the provider (%.64s), "
                              "got %.64s", tn, m->provider, m->providers[0]);
            break;
        case PK_MSG_LOOKUP:
            if (n == 0)
                return pk_err(err, -EPROTO, "%s.keys: expected at least one key, got 0", tn);
            break;
        //  a get_resp's hits, checksums and reasons are a lookup_resp's
        //  (its hits follow the get's keys, which it never carries)
        case PK_MSG_GET_RESP:
        case PK_MSG_LOOKUP_RESP:
            if (n == 0)
                return pk_err(err, -EPROTO, "%s.%s: expected at least one %s, got 0", tn,
                              m->present & B(KEYS) ? "keys" : "hits",
                              m->present & B(KEYS) ? "key" : "item");
            if (m->present & B(CHECKSUMS)) {
                size_t hits = 0, len = strlen(m->checksums);
                for (size_t i = 0; i < n; i++)
                    hits += m->hits[i];
                if (len != PK_CHECKSUM_HEX * hits)
                    return pk_err(err, -EPROTO, "%s.checksums: expected %d hex chars for each "
                                  "of %zu hits, got %zu chars", tn, PK_CHECKSUM_HEX, hits, len);
                for (size_t i = 0; i < len; i++)
                    if (!((m->checksums[i] >= '0' && m->checksums[i] <= '9')
                          || (m->checksums[i] >= 'a' && m->checksums[i] <= 'f')))
                        return pk_err(err, -EPROTO, "%s.checksums[%zu]: expected lowercase hex",
                                      tn, i);
            }
            if (m->present & B(REASONS)) {
                //  one letter of base/miss_reason.h per miss, in key order:
                //  a new reason is a new capability word, never a new letter
                size_t misses = 0, len = strlen(m->reasons);
                for (size_t i = 0; i < n; i++)
                    misses += !m->hits[i];
                if (len != misses)
                    return pk_err(err, -EPROTO, "%s.reasons: expected one letter for each of "
                                  "%zu misses, got %zu", tn, misses, len);
                for (size_t i = 0; i < len; i++)
                    if (pk_miss_reason_of_letter(m->reasons[i]) < 0)
                        return pk_err(err, -EPROTO, "%s.reasons[%zu]: expected one of %s, "
                                      "got '%c'", tn, i, "uaepqwd",
                                      m->reasons[i] >= 0x20 && m->reasons[i] < 0x7f
                                      ? m->reasons[i] : '?');
            }
            //  a lent answer's blocks (capability lend): 8 hex chars per
            //  hit, and only on a successful answer (nothing to copy else)
            if (m->present & B(SOURCES)) {
                size_t hits = 0, len = strlen(m->sources);
                for (size_t i = 0; i < n; i++)
                    hits += m->hits[i];
                if (!m->success)
                    return pk_err(err, -EPROTO, "%s.sources: only with success true", tn);
                if (len != PK_SOURCE_HEX * hits)
                    return pk_err(err, -EPROTO, "%s.sources: expected %d hex chars for each "
                                  "of %zu hits, got %zu chars", tn, PK_SOURCE_HEX, hits, len);
                for (size_t i = 0; i < len; i++)
                    if (!((m->sources[i] >= '0' && m->sources[i] <= '9')
                          || (m->sources[i] >= 'a' && m->sources[i] <= 'f')))
                        return pk_err(err, -EPROTO, "%s.sources[%zu]: expected lowercase hex",
                                      tn, i);
            }
            break;
        case PK_MSG_GET:
            if (n == 0)
                return pk_err(err, -EPROTO, "%s.keys: expected at least one key, got 0", tn);
            //  and no key or block index twice, as in a fetch
            __attribute__((fallthrough));
        case PK_MSG_FETCH: {
            ssize_t dup;
            size_t first = 0;
            s_list_t keys = { m, true }, indexes = { m, false };
            int rc = s_find_duplicate(&keys, n, &dup, &first);
            if (rc)
                return pk_err(err, rc, "out of memory");
            if (dup >= 0)
                return pk_err(err, -EPROTO, "%s.keys[%zd]: duplicate of keys[%zu]",
                              tn, dup, first);
            rc = s_find_duplicate(&indexes, n, &dup, &first);
            if (rc)
                return pk_err(err, rc, "out of memory");
            if (dup >= 0)
                return pk_err(err, -EPROTO,
                              "%s.block_indexes[%zd]: duplicate of block_indexes[%zu] (%" PRIu32 ")",
                              tn, dup, first, m->block_indexes[dup]);
            break;
        }
        default:
            break;
    }
    return 0;
}

//  --------------------------------------------------------------------------
//  Decoding one member

//  Keys: every item a string of lowercase hex, even length, 2..8192 chars,
//  decoded straight into one arena sized in a first pass.
static int
s_decode_keys(pk_msg_t *m, const json_t *arr, const char *tn, char *err)
{
    char got[64];
    size_t n = json_array_size(arr);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_array_get(arr, i);
        if (!json_is_string(s))
            return pk_err(err, -EPROTO, "%s.keys[%zu]: expected string, got %s",
                          tn, i, s_got(s, got, sizeof got));
        size_t len = json_string_length(s);
        if (len == 0 || len > PK_MAX_KEY_HEX || len % 2)
            return pk_err(err, -EPROTO,
                          "%s.keys[%zu]: expected lowercase hex of even length 2..%d chars, got %zu chars",
                          tn, i, PK_MAX_KEY_HEX, len);
        total += len / 2;
    }
    m->keys.count = n;
    m->keys.v = malloc((n ? n : 1) * sizeof *m->keys.v);
    m->keys.arena = malloc(total ? total : 1);
    if (!m->keys.v || !m->keys.arena)
        return pk_err(err, -ENOMEM, "out of memory");
    uint8_t *at = m->keys.arena;
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_array_get(arr, i);
        size_t len = json_string_length(s);
        const char *hex = json_string_value(s);
        ssize_t bad = pk_hex_decode_at(hex, len, at);
        if (bad >= 0) {
            unsigned char c = (unsigned char) hex[bad];
            if (c >= 0x20 && c < 0x7f)
                return pk_err(err, -EPROTO, "%s.keys[%zu]: expected lowercase hex, got '%c' at char %zd",
                              tn, i, c, bad);
            return pk_err(err, -EPROTO, "%s.keys[%zu]: expected lowercase hex, got byte 0x%02x at char %zd",
                          tn, i, c, bad);
        }
        m->keys.v[i] = pk_key_make(at, len / 2);
        at += len / 2;
    }
    return 0;
}

//  block_indexes or hits: keys come first in field order, so their count
//  is known here; hits without keys (wire 1.1) count themselves.
static int
s_decode_list(pk_msg_t *m, pk_field_t f, const json_t *j, char *err)
{
    const pk_field_spec_t *spec = &pk_wire_fields[f];
    const char *tn = pk_wire_messages[m->type].name, *fn = spec->name;
    char got[64];
    size_t n = m->keys.count;
    if (!json_is_array(j))
        return pk_err(err, -EPROTO, "%s.%s: expected array, got %s",
                      tn, fn, s_got(j, got, sizeof got));
    if (spec->kind == K_HITS && !(m->present & B(KEYS))) {
        if (json_array_size(j) > PK_MAX_LIST)
            return pk_err(err, -EPROTO, "%s.hits: expected at most %d items, got %zu",
                          tn, PK_MAX_LIST, json_array_size(j));
        n = m->keys.count = json_array_size(j);
    }
    if (json_array_size(j) != n)
        return pk_err(err, -EPROTO, "%s.%s: expected %zu items (one per key), got %zu",
                      tn, fn, n, json_array_size(j));
    if (spec->kind == K_HITS) {
        m->hits = malloc(n ? n : 1);
        if (!m->hits)
            return pk_err(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const json_t *b = json_array_get(j, i);
            if (!json_is_boolean(b))
                return pk_err(err, -EPROTO, "%s.hits[%zu]: expected boolean, got %s",
                              tn, i, s_got(b, got, sizeof got));
            m->hits[i] = json_is_true(b);
        }
        return 0;
    }
    m->block_indexes = malloc((n ? n : 1) * sizeof(uint32_t));
    if (!m->block_indexes)
        return pk_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(j, i);
        json_int_t v = json_is_integer(x) ? json_integer_value(x) : -1;
        if (!json_is_integer(x) || v < 0 || v > (json_int_t) spec->max)
            return pk_err(err, -EPROTO, "%s.block_indexes[%zu]: expected integer 0..%"
                          PRIu64 ", got %s", tn, i, spec->max, s_got(x, got, sizeof got));
        m->block_indexes[i] = (uint32_t) v;
    }
    return 0;
}

//  agent_metadata: base64, bounded before anything is allocated.
static int
s_decode_metadata(pk_msg_t *m, pk_field_t f, const json_t *j, char *err)
{
    const pk_field_spec_t *spec = &pk_wire_fields[f];
    const char *tn = pk_wire_messages[m->type].name, *fn = spec->name;
    char got[64];
    if (!json_is_string(j))
        return pk_err(err, -EPROTO, "%s.%s: expected base64 string, got %s",
                      tn, fn, s_got(j, got, sizeof got));
    //  refuse before allocating for text too long to fit the bound
    size_t len = json_string_length(j);
    size_t cap = len / 4 * 3 + 3;
    if (len > (PK_MAX_METADATA + 2) / 3 * 4)
        return pk_err(err, -EPROTO, "%s.%s: expected at most %u bytes decoded, got %zu base64 chars",
                      tn, fn, PK_MAX_METADATA, len);
    m->agent_metadata = malloc(cap);
    if (!m->agent_metadata)
        return pk_err(err, -ENOMEM, "out of memory");
    size_t out_len = 0;
    const char *end = NULL;
    if (sodium_base642bin(m->agent_metadata, cap, json_string_value(j), len, NULL,
                          &out_len, &end, sodium_base64_VARIANT_ORIGINAL) != 0
        || end != json_string_value(j) + len)
        return pk_err(err, -EPROTO, "%s.%s: expected base64 (with padding), got invalid text",
                      tn, fn);
    if (out_len < spec->min || out_len > spec->max)
        return pk_err(err, -EPROTO, "%s.%s: expected %" PRIu64 "..%" PRIu64
                      " bytes decoded, got %zu", tn, fn, spec->min, spec->max, out_len);
    m->agent_metadata_len = out_len;
    return 0;
}

//  providers: a list of short names.
static int
s_decode_strings(pk_msg_t *m, pk_field_t f, const json_t *j, char *err)
{
    const pk_field_spec_t *spec = &pk_wire_fields[f];
    const char *tn = pk_wire_messages[m->type].name, *fn = spec->name;
    char got[64];
    if (!json_is_array(j))
        return pk_err(err, -EPROTO, "%s.%s: expected array, got %s",
                      tn, fn, s_got(j, got, sizeof got));
    size_t n = json_array_size(j);
    if (n < spec->min || n > spec->max)
        return pk_err(err, -EPROTO, "%s.%s: expected %" PRIu64 "..%" PRIu64
                      " items, got %zu", tn, fn, spec->min, spec->max, n);
    m->providers = calloc(n, sizeof *m->providers);
    if (!m->providers)
        return pk_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_array_get(j, i);
        if (!json_is_string(s))
            return pk_err(err, -EPROTO, "%s.%s[%zu]: expected string, got %s",
                          tn, fn, i, s_got(s, got, sizeof got));
        size_t len = json_string_length(s);
        if (len < 1 || len > PK_MAX_PROVIDER)
            return pk_err(err, -EPROTO, "%s.%s[%zu]: expected string of 1..%d bytes, "
                          "got %zu bytes", tn, fn, i, PK_MAX_PROVIDER, len);
        if (!(m->providers[i] = strndup(json_string_value(s), len)))
            return pk_err(err, -ENOMEM, "out of memory");
        m->nproviders = i + 1;
    }
    return 0;
}

static int
s_decode_field(pk_msg_t *m, pk_field_t f, const json_t *j, char *err)
{
    const pk_field_spec_t *spec = &pk_wire_fields[f];
    const char *tn = pk_wire_messages[m->type].name;
    const char *fn = spec->name;
    char got[64];

    switch (spec->kind) {
        case K_STRING: {
            if (!json_is_string(j))
                return pk_err(err, -EPROTO, "%s.%s: expected string, got %s",
                              tn, fn, s_got(j, got, sizeof got));
            size_t len = json_string_length(j);
            if (len < spec->min || len > spec->max)
                return pk_err(err, -EPROTO, "%s.%s: expected string of %" PRIu64 "..%" PRIu64
                              " bytes, got %zu bytes", tn, fn, spec->min, spec->max, len);
            //  jansson refuses \u0000, so the value is a C string of len bytes
            char *copy = strndup(json_string_value(j), len);
            if (!copy)
                return pk_err(err, -ENOMEM, "out of memory");
            *pk_wire_string_slot(m, f) = copy;
            break;
        }
        case K_UINT: {
            json_int_t v = json_is_integer(j) ? json_integer_value(j) : -1;
            if (!json_is_integer(j) || v < 0 || (uint64_t) v < spec->min
                || (uint64_t) v > spec->max)
                return pk_err(err, -EPROTO, "%s.%s: expected integer %" PRIu64 "..%" PRIu64
                              ", got %s", tn, fn, spec->min, spec->max, s_got(j, got, sizeof got));
            *pk_wire_uint_slot(m, f) = (uint64_t) v;
            break;
        }
        case K_BOOL:
            if (!json_is_boolean(j))
                return pk_err(err, -EPROTO, "%s.%s: expected boolean, got %s",
                              tn, fn, s_got(j, got, sizeof got));
            m->success = json_is_true(j);
            break;
        case K_EPOCH: {
            uint8_t *epoch = f == PK_F_SOURCE_EPOCH ? m->source_epoch : m->target_epoch;
            if (!json_is_string(j) || json_string_length(j) != 2 * PK_EPOCH_LEN
                || pk_hex_decode_at(json_string_value(j), 2 * PK_EPOCH_LEN, epoch) >= 0)
                return pk_err(err, -EPROTO, "%s.%s: expected %d lowercase hex chars, got %s",
                              tn, fn, 2 * PK_EPOCH_LEN,
                              json_is_string(j) ? "other text" : s_got(j, got, sizeof got));
            if (pk_wire_is_zero(epoch) && !pk_wire_zero_epoch_ok(m->type, f))
                return pk_err(err, -EPROTO, "%s.%s: expected a nonzero epoch, got all zeros",
                              tn, fn);
            break;
        }
        case K_KEYS:
            if (!json_is_array(j))
                return pk_err(err, -EPROTO, "%s.keys: expected array, got %s",
                              tn, s_got(j, got, sizeof got));
            if (json_array_size(j) > PK_MAX_LIST)
                return pk_err(err, -EPROTO, "%s.keys: expected at most %d items, got %zu",
                              tn, PK_MAX_LIST, json_array_size(j));
            return s_decode_keys(m, j, tn, err);
        case K_INDEXES:
        case K_HITS:
            return s_decode_list(m, f, j, err);
        case K_METADATA:
            return s_decode_metadata(m, f, j, err);
        case K_STRINGS:
            return s_decode_strings(m, f, j, err);
        case K_CODE: {
            if (json_is_string(j))
                for (int c = 0; c < PK_DISC_COUNT; c++)
                    if (strcmp(json_string_value(j), pk_wire_codes[c]) == 0) {
                        m->code = (pk_disconnect_code_t) c;
                        return 0;
                    }
            return pk_err(err, -EPROTO, "%s.code: expected one of incompatible, no_session, "
                          "violation, silent, shutdown, retired, got %s",
                          tn, json_is_string(j) ? "other text" : s_got(j, got, sizeof got));
        }
    }
    return 0;
}

int
pk_msg_decode_reference(const void *data, size_t len, pk_msg_t **msg_p, char *err)
{
    *msg_p = NULL;
    char got[64];
    json_error_t jerr;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        //  jansson names its flag; the peer needs the rule instead
        if (strstr(jerr.text, "\\u0000"))
            return pk_err(err, -EBADMSG, "invalid JSON at byte %d: NUL character in string",
                          jerr.position);
        return pk_err(err, -EBADMSG, "invalid JSON at byte %d: %s", jerr.position, jerr.text);
    }
    int rc;
    if (!json_is_object(root)) {
        rc = pk_err(err, -EBADMSG, "frame is not a JSON object (got %s)",
                    s_got(root, got, sizeof got));
        goto fail_root;
    }
    const json_t *jtype = json_object_get(root, "type");
    if (!jtype) {
        rc = pk_err(err, -EBADMSG, "type: missing");
        goto fail_root;
    }
    if (!json_is_string(jtype)) {
        rc = pk_err(err, -EBADMSG, "type: expected string, got %s", s_got(jtype, got, sizeof got));
        goto fail_root;
    }
    int type = 0;
    while (type < PK_MSG_COUNT && strcmp(pk_wire_messages[type].name, json_string_value(jtype)) != 0)
        type++;
    if (type == PK_MSG_COUNT) {
        rc = pk_err(err, -ENOMSG, "unknown type \"%.64s\"", json_string_value(jtype));
        goto fail_root;
    }
    pk_msg_t *m = pk_msg_new((pk_msg_type_t) type);
    if (!m) {
        rc = pk_err(err, -ENOMEM, "out of memory");
        goto fail_root;
    }
    uint64_t wanted = pk_wire_messages[type].required | pk_wire_messages[type].optional;
    for (int f = 0; f < PK_F_COUNT; f++) {
        if (!(wanted & PK_BIT(f)))
            continue;
        const json_t *j = json_object_get(root, pk_wire_fields[f].name);
        if (!j) {
            if (pk_wire_messages[type].required & PK_BIT(f)) {
                rc = pk_err(err, -EPROTO, "%s.%s: missing", pk_wire_messages[type].name,
                            pk_wire_fields[f].name);
                goto fail_msg;
            }
            continue;
        }
        rc = s_decode_field(m, (pk_field_t) f, j, err);
        if (rc)
            goto fail_msg;
        m->present |= PK_BIT(f);
    }
    rc = pk_wire_check_message(m, err);
    if (rc)
        goto fail_msg;
    json_decref(root);
    *msg_p = m;
    return 0;

fail_msg:
    pk_msg_destroy(&m);
fail_root:
    json_decref(root);
    return rc;
}

int
pk_msg_decode(const void *data, size_t len, pk_msg_t **msg_p, char *err)
{
    if (pk_msg_decode_scan(data, len, msg_p) == 0)
        return 0;
    return pk_msg_decode_reference(data, len, msg_p, err);
}

//  --------------------------------------------------------------------------
//  Encoding

//  The field rules, checked on a struct (the decoder checks them on JSON,
//  where it also has to reject wrong types).
static int
s_check_field(const pk_msg_t *m, pk_field_t f, char *err)
{
    const pk_field_spec_t *spec = &pk_wire_fields[f];
    const char *tn = pk_wire_messages[m->type].name;
    const char *fn = spec->name;
    switch (spec->kind) {
        case K_STRING: {
            const char *s = *pk_wire_string_slot((pk_msg_t *) m, f);
            size_t len = s ? strlen(s) : 0;
            if (!s || len < spec->min || len > spec->max)
                return pk_err(err, -EPROTO, "%s.%s: expected string of %" PRIu64 "..%" PRIu64
                              " bytes, got %zu bytes", tn, fn, spec->min, spec->max, len);
            break;
        }
        case K_UINT: {
            uint64_t v = *pk_wire_uint_slot((pk_msg_t *) m, f);
            if (v < spec->min || v > spec->max)
                return pk_err(err, -EPROTO, "%s.%s: expected integer %" PRIu64 "..%" PRIu64
                              ", got %" PRIu64, tn, fn, spec->min, spec->max, v);
            break;
        }
        case K_EPOCH: {
            const uint8_t *e = f == PK_F_SOURCE_EPOCH ? m->source_epoch : m->target_epoch;
            if (pk_wire_is_zero(e) && !pk_wire_zero_epoch_ok(m->type, f))
                return pk_err(err, -EPROTO, "%s.%s: expected a nonzero epoch, got all zeros",
                              tn, fn);
            break;
        }
        case K_KEYS:
            if (m->keys.count > PK_MAX_LIST)
                return pk_err(err, -EPROTO, "%s.keys: expected at most %d items, got %zu",
                              tn, PK_MAX_LIST, m->keys.count);
            for (size_t i = 0; i < m->keys.count; i++)
                if (m->keys.v[i].len == 0 || m->keys.v[i].len > PK_MAX_KEY_BYTES)
                    return pk_err(err, -EPROTO, "%s.keys[%zu]: expected 1..%d bytes, got %" PRIu32,
                                  tn, i, PK_MAX_KEY_BYTES, m->keys.v[i].len);
            break;
        case K_INDEXES:
            for (size_t i = 0; i < m->keys.count; i++)
                if (m->block_indexes[i] > spec->max)
                    return pk_err(err, -EPROTO, "%s.block_indexes[%zu]: expected integer 0..%"
                                  PRIu64 ", got %" PRIu32, tn, i, spec->max, m->block_indexes[i]);
            break;
        case K_METADATA:
            if (m->agent_metadata_len < spec->min || m->agent_metadata_len > spec->max)
                return pk_err(err, -EPROTO, "%s.%s: expected %" PRIu64 "..%" PRIu64
                              " bytes decoded, got %zu", tn, fn, spec->min, spec->max,
                              m->agent_metadata_len);
            break;
        case K_CODE:
            if ((unsigned) m->code >= PK_DISC_COUNT)
                return pk_err(err, -EPROTO, "%s.code: unknown code %d", tn, (int) m->code);
            break;
        case K_STRINGS:
            if (m->nproviders < spec->min || m->nproviders > spec->max)
                return pk_err(err, -EPROTO, "%s.%s: expected %" PRIu64 "..%" PRIu64
                              " items, got %zu", tn, fn, spec->min, spec->max, m->nproviders);
            for (size_t i = 0; i < m->nproviders; i++) {
                size_t len = m->providers[i] ? strlen(m->providers[i]) : 0;
                if (len < 1 || len > PK_MAX_PROVIDER)
                    return pk_err(err, -EPROTO, "%s.%s[%zu]: expected string of 1..%d bytes, "
                                  "got %zu bytes", tn, fn, i, PK_MAX_PROVIDER, len);
            }
            break;
        case K_HITS:
        case K_BOOL:
            break;
    }
    return 0;
}

//  Bytes the frame will need about, so the buffer is sized once.
static size_t
s_encoded_size(const pk_msg_t *m, uint32_t emit)
{
    size_t size = 512;
    if (emit & B(KEYS))
        for (size_t i = 0; i < m->keys.count; i++)
            size += 2 * (size_t) m->keys.v[i].len + 3;
    if (emit & (B(BLOCK_INDEXES) | B(HITS)))
        size += 12 * m->keys.count;
    if (emit & B(AGENT_METADATA))
        size += m->agent_metadata_len / 3 * 4 + 8;
    if (emit & B(PROVIDERS))
        size += m->nproviders * (6 * PK_MAX_PROVIDER + 3);
    if (emit & B(CHECKSUMS))
        size += strlen(m->checksums);
    if (emit & B(REASONS))
        size += strlen(m->reasons);
    if (emit & B(SOURCES))
        size += strlen(m->sources);
    if (emit & B(RAILS))
        size += strlen(m->rails);
    if (emit & B(RAILS_FAILED))
        size += strlen(m->rails_failed);
    if (emit & B(RAIL_SLICES))
        size += strlen(m->rail_slices);
    if (emit & B(RAIL_OFFER))
        size += strlen(m->rail_offer);
    if (emit & B(CAPS))
        size += 6 * strlen(m->caps);
    return size;
}

//  One list member's items: hex keys, integers or booleans.
static void
s_encode_list(pk_jout_t *o, const pk_msg_t *m, pk_field_kind_t kind)
{
    pk_jout_raw(o, "[", 1);
    for (size_t i = 0; i < m->keys.count; i++) {
        if (i)
            pk_jout_raw(o, ",", 1);
        if (kind == K_KEYS)
            pk_jout_hex(o, m->keys.v[i].bytes, m->keys.v[i].len);
        else if (kind == K_HITS)
            pk_jout_raw(o, m->hits[i] ? "true" : "false", m->hits[i] ? 4 : 5);
        else
            pk_jout_uint(o, m->block_indexes[i]);
    }
    pk_jout_raw(o, "]", 1);
}

//  One member's value; 0, or -EILSEQ for a string that is not UTF-8.
static int
s_encode_field(pk_jout_t *o, const pk_msg_t *m, pk_field_t f)
{
    switch (pk_wire_fields[f].kind) {
        case K_STRING: {
            const char *s = *pk_wire_string_slot((pk_msg_t *) m, f);
            return pk_jout_string(o, s, strlen(s));
        }
        case K_UINT:
            pk_jout_uint(o, *pk_wire_uint_slot((pk_msg_t *) m, f));
            break;
        case K_BOOL:
            pk_jout_raw(o, m->success ? "true" : "false", m->success ? 4 : 5);
            break;
        case K_EPOCH:
            pk_jout_hex(o, f == PK_F_SOURCE_EPOCH ? m->source_epoch : m->target_epoch,
                        PK_EPOCH_LEN);
            break;
        case K_CODE:
            return pk_jout_string(o, pk_wire_codes[m->code], strlen(pk_wire_codes[m->code]));
        case K_METADATA: {
            size_t b64len = sodium_base64_ENCODED_LEN(m->agent_metadata_len,
                                                      sodium_base64_VARIANT_ORIGINAL);
            char *at = pk_jout_reserve(o, b64len + 2);
            if (!at)
                break;
            at[0] = '"';
            sodium_bin2base64(at + 1, b64len, m->agent_metadata, m->agent_metadata_len,
                              sodium_base64_VARIANT_ORIGINAL);
            at[b64len] = '"';           //  over the NUL
            o->len += b64len + 1;
            break;
        }
        case K_KEYS:
        case K_INDEXES:
        case K_HITS:
            s_encode_list(o, m, pk_wire_fields[f].kind);
            break;
        case K_STRINGS:
            pk_jout_raw(o, "[", 1);
            for (size_t i = 0; i < m->nproviders; i++) {
                if (i)
                    pk_jout_raw(o, ",", 1);
                if (pk_jout_string(o, m->providers[i], strlen(m->providers[i])) != 0)
                    return -EILSEQ;
            }
            pk_jout_raw(o, "]", 1);
            break;
    }
    return 0;
}

int
pk_msg_encode(const pk_msg_t *self, char **out_p, size_t *len_p, char *err)
{
    *out_p = NULL;
    if ((unsigned) self->type >= PK_MSG_COUNT)
        return pk_err(err, -EPROTO, "unknown message type %d", (int) self->type);
    const char *tn = pk_wire_messages[self->type].name;
    uint64_t required = pk_wire_messages[self->type].required;
    uint64_t emit = self->present & (required | pk_wire_messages[self->type].optional);
    if (required & ~self->present)
        return pk_err(err, -EPROTO, "%s.%s: missing", tn,
                      pk_wire_fields[__builtin_ctzll(required & ~self->present)].name);
    //  Lists share the keys' count; block indexes set without keys are a
    //  caller bug the rules below would not see.  Hits may go without
    //  (wire 1.1): keys.count still counts them.
    if ((emit & B(BLOCK_INDEXES)) && !(emit & B(KEYS)))
        return pk_err(err, -EPROTO, "%s: block_indexes without keys", tn);
    if ((emit & B(HITS)) && !(emit & B(KEYS)) && self->keys.count > PK_MAX_LIST)
        return pk_err(err, -EPROTO, "%s.hits: expected at most %d items, got %zu", tn,
                      PK_MAX_LIST, self->keys.count);

    for (int f = 0; f < PK_F_COUNT; f++) {
        if (!(emit & PK_BIT(f)))
            continue;
        int rc = s_check_field(self, (pk_field_t) f, err);
        if (rc)
            return rc;
    }
    int rc = pk_wire_check_message(self, err);
    if (rc)
        return rc;

    //  Written straight into one buffer, members in field order: the bytes
    //  json_dumps(JSON_COMPACT) gave for the same tree.
    pk_jout_t o;
    pk_jout_init(&o, s_encoded_size(self, emit));
    pk_jout_raw(&o, "{\"type\":", 8);
    pk_jout_string(&o, tn, strlen(tn));
    for (int f = 0; f < PK_F_COUNT; f++) {
        if (!(emit & PK_BIT(f)))
            continue;
        const char *fn = pk_wire_fields[f].name;
        char *at = pk_jout_reserve(&o, strlen(fn) + 4);
        if (at)
            o.len += (size_t) sprintf(at, ",\"%s\":", fn);
        if (s_encode_field(&o, self, (pk_field_t) f) != 0) {
            pk_jout_free(&o);
            return pk_err(err, -EPROTO, "%s.%s: not valid UTF-8", tn, fn);
        }
    }
    pk_jout_raw(&o, "}", 1);
    if (pk_jout_finish(&o, out_p, len_p) != 0)
        return pk_err(err, -ENOMEM, "out of memory");
    return 0;
}
