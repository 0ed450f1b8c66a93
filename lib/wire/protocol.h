/*  protocol.h: the control-plane messages of protocol.md, as C structs.

    Every message travels as one compact JSON object.  pk_msg_decode turns
    such a frame into a pk_msg_t, enforcing every field rule of protocol.md
    sections 1-3, and says exactly what was wrong when it refuses one;
    pk_msg_encode is its inverse and refuses a struct that would not decode.
    Inside the library keys are raw bytes (pk_keys_t), never hex.

    Error classes, so the session can react as protocol.md asks:
      -EBADMSG  the frame is not one JSON object (not UTF-8, bad JSON, a
                duplicate member, a NUL character, no string "type"):
                dropped and counted;
      -ENOMSG   an object of an unknown type: counted and ignored;
      -EPROTO   a known type whose fields break a rule: a protocol violation;
      -ENOMEM   out of memory.
*/
#ifndef PK_PROTOCOL_H_INCLUDED
#define PK_PROTOCOL_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "base/key.h"

#define PK_WIRE_MAJOR 1
/*  Minor 1: a server may leave the keys out of a lookup_resp to a consumer
    whose connect said minor >= 1 (they echo the lookup's; the hits count
    them).  Half the bytes of a large lookup's round trip, which CURVE
    encrypts twice: see doc/design.md, "Lookup answers without the keys".  */
#define PK_WIRE_MINOR 1

#define PK_MAX_LIST        65536        /* items in keys / block_indexes / hits */
#define PK_MAX_KEY_HEX     8192         /* hex chars of one key */
#define PK_MAX_KEY_BYTES   (PK_MAX_KEY_HEX / 2)
#define PK_MAX_STRING      4096         /* bytes of an id, fingerprint, seed... */
#define PK_MAX_METADATA    (1u << 20)   /* decoded agent_metadata bytes */
#define PK_MAX_ROUND_SEQ   ((UINT64_C(1) << 53) - 1)
#define PK_MAX_NUM_BLOCKS  (UINT64_C(1) << 31)
#define PK_MAX_BLOCK_INDEX 2147483647u
#define PK_EPOCH_LEN       16
#define PK_MAX_PROVIDERS   16           /* items in description.providers */
#define PK_MAX_PROVIDER    63           /* bytes of one provider name (libfabric's stay short) */
#define PK_MAX_HOST        127          /* bytes of description.host (base/host_id.h) */
#define PK_MAX_CAPS        1024         /* bytes of connect.caps / connect_ack.caps */
#define PK_CHECKSUM_HEX    16           /* hex chars of one block checksum (XXH3-64) */

typedef enum {
    PK_MSG_DESCRIBE = 0,
    PK_MSG_DESCRIPTION,
    PK_MSG_CONNECT,
    PK_MSG_CONNECT_ACK,
    PK_MSG_DISCONNECT,
    PK_MSG_PING,
    PK_MSG_PONG,
    PK_MSG_LOOKUP,
    PK_MSG_LOOKUP_RESP,
    PK_MSG_FETCH,
    PK_MSG_TRANSFER_DONE,
    PK_MSG_ABORT_FETCH,
    PK_MSG_ABORT_ACK,
    PK_MSG_GET,                     /* capability get: lookup and fetch in one */
    PK_MSG_GET_RESP,
    PK_MSG_COUNT
} pk_msg_type_t;

typedef enum {
    PK_DISC_INCOMPATIBLE = 0,
    PK_DISC_NO_SESSION,
    PK_DISC_VIOLATION,
    PK_DISC_SILENT,
    PK_DISC_SHUTDOWN,
    PK_DISC_RETIRED,
    PK_DISC_COUNT
} pk_disconnect_code_t;

/*  Fields a message may carry; bit i of pk_msg_t.present is field i, and
    the encoder writes members in this order.  */
typedef enum {
    PK_F_CODE = 0,
    PK_F_REASON,
    PK_F_KV_REQUEST_ID,
    PK_F_KEYS,
    PK_F_BLOCK_INDEXES,
    PK_F_HITS,
    PK_F_SUCCESS,
    PK_F_ROUND_SEQ,
    PK_F_LANDING,
    PK_F_WIRE_MAJOR,
    PK_F_WIRE_MINOR,
    PK_F_PEER_ID,
    PK_F_SOURCE_EPOCH,
    PK_F_TARGET_EPOCH,
    PK_F_AGENT_METADATA,
    PK_F_BASE_ADDR,
    PK_F_NUM_BLOCKS,
    PK_F_BLOCK_LEN,
    PK_F_CONFIG_FINGERPRINT,
    PK_F_HASH_SEED,
    PK_F_PROVIDER,
    PK_F_PROVIDERS,
    PK_F_HOST,
    PK_F_CAPS,
    PK_F_CHECKSUMS,
    PK_F_REASONS,
    PK_F_SOURCES,
    PK_F_RAILS,
    PK_F_RAILS_FAILED,
    PK_F_RAIL_OFFER,
    PK_F_RAIL_SLICES,               /* present holds 64 fields (the scanner
                                       uses bit PK_F_COUNT for "type") */
    PK_F_COUNT
} pk_field_t;

#define PK_BIT(f) (UINT64_C(1) << (f))
_Static_assert(PK_F_COUNT < 64, "pk_msg_t.present, and the scanner's bit for \"type\", hold every field");

typedef struct {
    pk_msg_type_t type;
    uint64_t present;               /* PK_BIT(field) for each field held */

    char *kv_request_id;            /* strings: NUL-terminated, NUL-free */
    char *peer_id;
    char *config_fingerprint;
    char *hash_seed;
    char *provider;
    char *reason;
    char *host;
    char *caps;                     /* capability words, one space apart */
    char *checksums;                /* 16 hex chars per hit, in key order */
    char *reasons;                  /* one letter per miss, in key order
                                       (base/miss_reason.h) */
    char *sources;                  /* get_resp under lend: 8 hex chars per
                                       hit, the server's block, key order */
    char *rails;                    /* capability rails: a round's answer's
                                       blocks per consumer rail, decimal,
                                       one space apart */
    char *rails_failed;             /* capability rails: consumer rails the
                                       server took out with writes of the
                                       round, their indexes one space apart */
    char *rail_slices;              /* capability slices: a round's answer's
                                       slices per consumer rail, as rails */
    char *rail_offer;               /* capability rejoin: a fetch's or get's
                                       fresh registration for a consumer
                                       rail taken out: "<rail> <base64 of
                                       that rail's own blob>" */
    char **providers;               /* nproviders strings, best first */
    size_t nproviders;

    pk_keys_t keys;                 /* count: also the lists' length; a
                                       lookup_resp without keys has
                                       keys.v NULL and count its hits */
    uint32_t *block_indexes;        /* keys.count items */
    bool *hits;                     /* keys.count items */

    uint64_t round_seq;
    uint64_t landing;
    uint64_t wire_major;
    uint64_t wire_minor;
    uint64_t base_addr;
    uint64_t num_blocks;
    uint64_t block_len;
    bool success;
    pk_disconnect_code_t code;

    uint8_t source_epoch[PK_EPOCH_LEN];
    uint8_t target_epoch[PK_EPOCH_LEN];

    uint8_t *agent_metadata;
    size_t agent_metadata_len;
} pk_msg_t;

/*  Capabilities (protocol.md section 4): a connect and its connect_ack
    each list the words their sender has in caps, one space apart; a
    session uses what both list, so a peer with some of them and not
    others still works.  checksum: lookup answers carry each hit's block
    checksum (section 7).  marks: the consumer reads 64-bit immediates
    whose high half names the write's first block (section 7).  reasons:
    lookup answers say why each miss is one (section 3, lookup_resp).
    get: the consumer may send a get (its keys and their destination
    blocks in one message) and the server answers it once, with a
    get_resp, after the hits landed (section 3).
    Words a side does not know are ignored.  */
#define PK_CAP_CHECKSUM "checksum"
#define PK_CAP_MARKS "marks"
#define PK_CAP_REASONS "reasons"
#define PK_CAP_GET "get"
/*  lend (a same-host channel that lends, mmap): a get's answer carries
    each hit's block in the server's pool (sources) and goes before
    anything is copied; the consumer copies from its mapping of the pool
    and reports on the channel, which unpins them (protocol.md section
    7).  Not in PK_CAPS: a side lists it only for a channel that lends.  */
#define PK_CAP_LEND "lend"
#define PK_SOURCE_HEX 8
/*  rails (a consumer of several rails, transports/rails): its connect's
    agent_metadata is a rails blob of every rail; a server lists it in its
    description when it has several rails, and in its connect_ack when
    the session pairs them.  A round's answers (transfer_done, abort_ack,
    get_resp) then carry rails: per consumer rail, in its blob's order,
    the blocks whose writes completed over it, and the round has landed
    when every rail counted that many (protocol.md section 7).  */
#define PK_CAP_RAILS "rails"
#define PK_MAX_RAILS 8
#define PK_MAX_RAILS_TEXT (PK_MAX_RAILS * 21)
/*  rejoin (with rails): a consumer rail the server took out (rails_failed)
    comes back: after revoking it the consumer makes a fresh registration
    for it and offers that rail's own blob in rail_offer on its next fetch
    or get; the server pairs it again after a back-off (protocol.md
    section 7, "a rail that rejoins").  A consumer lists it beside rails
    in connect; a server that can lists it in connect_ack, and only then
    is rail_offer sent.  */
#define PK_CAP_REJOIN "rejoin"
/*  slices (with rails): a block of 2 MiB or more may come as slices over
    several rails, each slice's immediate naming its block and slice
    (protocol.md section 7); a round's answers then carry rail_slices
    beside rails, and the round has landed when each rail counted that
    many slices too.  A consumer lists it beside rails; a server in its
    connect_ack when its channel slices (blocks of 2 MiB or more, two
    rails paired, immediates of 64 bits).  */
#define PK_CAP_SLICES "slices"
#define PK_MAX_RAIL_BLOB 4096           /* decoded bytes of a rail_offer's blob */
#define PK_MAX_RAIL_OFFER_TEXT (2 + (PK_MAX_RAIL_BLOB + 2) / 3 * 4)
/* every word this build has (a server run with --gets off offers the
   first three alone) */
#define PK_CAPS_WITHOUT_GET PK_CAP_CHECKSUM " " PK_CAP_MARKS " " PK_CAP_REASONS
#define PK_CAPS PK_CAPS_WITHOUT_GET " " PK_CAP_GET
/*  True when caps (NULL: none) lists word.  */
bool pk_caps_has(const char *caps, const char *word);

/*  A rails field parsed: its counts into counts (cap), their number
    returned; 0 when text is NULL or not one (the codec refused those).  */
size_t pk_wire_rails_parse(const char *text, uint64_t *counts, size_t cap);
/*  A rails_failed field: bit i for each consumer rail i it names.  */
uint32_t pk_wire_rails_failed_parse(const char *text);
/*  mask's rails as a rails_failed field, into out (2 * PK_MAX_RAILS).  */
void pk_wire_rails_failed_format(uint32_t mask, char *out);
/*  counts[0..n) as a rails field, into out (PK_MAX_RAILS_TEXT + 1).  */
void pk_wire_rails_format(const uint64_t *counts, size_t n, char *out);
/*  A rail_offer field (the codec checked its form): its rail, and its blob
    decoded into blob (PK_MAX_RAIL_BLOB bytes), *len_p its length.  0, or
    -EPROTO.  */
int pk_wire_rail_offer_parse(const char *text, size_t *rail_p, uint8_t *blob, size_t *len_p);
/*  rail and blob (at most PK_MAX_RAIL_BLOB bytes) as a rail_offer field,
    malloc'd (NULL: out of memory or too long).  */
char *pk_wire_rail_offer_format(size_t rail, const uint8_t *blob, size_t len);

/*  A zeroed message of this type; every field unset.  */
pk_msg_t *pk_msg_new(pk_msg_type_t type);
void pk_msg_destroy(pk_msg_t **self_p);

/*  Setters copy their input and mark the field present.  They return 0 or
    -ENOMEM.  pk_msg_set_keys copies count keys into one arena, hashes
    included (keys come from pk_key_make or the decoder).  */
int pk_msg_set_string(pk_msg_t *self, pk_field_t field, const char *value);
int pk_msg_set_keys(pk_msg_t *self, const pk_key_t *keys, size_t count);
int pk_msg_set_block_indexes(pk_msg_t *self, const uint32_t *idx, size_t count);
int pk_msg_set_hits(pk_msg_t *self, const bool *hits, size_t count);
int pk_msg_set_metadata(pk_msg_t *self, const void *data, size_t len);
/*  A list of strings (providers): n copies, in order.  */
int pk_msg_set_strings(pk_msg_t *self, pk_field_t field, const char *const *v, size_t n);
void pk_msg_set_uint(pk_msg_t *self, pk_field_t field, uint64_t value);
void pk_msg_set_bool(pk_msg_t *self, pk_field_t field, bool value);
void pk_msg_set_epochs(pk_msg_t *self, const uint8_t *source, const uint8_t *target);
void pk_msg_set_code(pk_msg_t *self, pk_disconnect_code_t code);

/*  Decode one frame.  On success *msg_p owns a new message.  On failure
    *msg_p is NULL and err (PK_ERRLEN bytes, may be NULL) holds a message
    such as "fetch.block_indexes[3]: expected integer 0..2147483647, got -1".  */
int pk_msg_decode(const void *data, size_t len, pk_msg_t **msg_p, char *err);

/*  The two halves of pk_msg_decode, for the fuzz driver's differential
    check.  The single-pass scanner: 0 with the message, or -EAGAIN for
    any frame it does not accept (it never accepts one the reference
    refuses).  The reference: jansson's json_loadb and a walk of the tree,
    the authority on what is refused and why.  pk_msg_decode is the
    scanner, then the reference when the scanner does not accept.  */
int pk_msg_decode_scan(const void *data, size_t len, pk_msg_t **msg_p);
int pk_msg_decode_reference(const void *data, size_t len, pk_msg_t **msg_p, char *err);

/*  Encode to compact JSON (members in protocol.md's order); *out_p is
    malloc'd and NUL-terminated, *len_p excludes the NUL.  A message that
    breaks a rule is refused with -EPROTO and the reason in err.  */
int pk_msg_encode(const pk_msg_t *self, char **out_p, size_t *len_p, char *err);

const char *pk_msg_type_name(pk_msg_type_t type);

/*  Who may send a type (protocol.md section 3): PK_TO_SERVER (the
    consumer's messages), PK_TO_CONSUMER (the server's), or both
    (disconnect).  A message received the wrong way is a violation; each
    half of a session asks this one table instead of keeping a list.  */
#define PK_TO_SERVER   1u
#define PK_TO_CONSUMER 2u
unsigned pk_msg_direction(pk_msg_type_t type);
const char *pk_disconnect_code_name(pk_disconnect_code_t code);

/*  Strict UTF-8 (no overlong forms, surrogates or code points past
    U+10FFFF), as jansson checks it: every text of the protocol, the
    configuration and the metrics is.  */
bool pk_utf8_ok(const char *text, size_t len);

#endif
