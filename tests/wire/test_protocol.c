/*  test_protocol.c: the codec against every rule of protocol.md sections 1-3.

    Two tables drive most of it: valid frames, written in canonical form so
    that decode -> encode must give back the same bytes, and rejected frames
    with the exact error class and text each must produce.  Bounds that need
    long inputs (4,096-byte ids, 8,192-char keys, 65,536-item lists, 1 MiB of
    metadata) are generated in their own tests.
*/
#include "wire/protocol.h"
#include "testutil.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>

#define SE "0123456789abcdef0123456789abcdef"
#define TE "fedcba9876543210fedcba9876543210"
#define ZE "00000000000000000000000000000000"
#define EP ",\"source_epoch\":\"" SE "\",\"target_epoch\":\"" TE "\""
#define LOOKUP_HEAD "{\"type\":\"lookup\",\"kv_request_id\":\"r\""
#define FETCH_HEAD  "{\"type\":\"fetch\",\"kv_request_id\":\"r\""
#define DESC_HEAD "{\"type\":\"description\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"a\"," \
    "\"block_len\":1,\"config_fingerprint\":\"\",\"hash_seed\":\"s\",\"provider\":\"shm\""
#define CONNECT_TAIL "\"config_fingerprint\":\"f\",\"hash_seed\":\"s\"}"
#define CONNECT(meta, base, nb, bl) \
    "{\"type\":\"connect\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"p\"," \
    "\"source_epoch\":\"" SE "\",\"target_epoch\":\"" ZE "\",\"agent_metadata\":" meta \
    ",\"base_addr\":" base ",\"num_blocks\":" nb ",\"block_len\":" bl "," CONNECT_TAIL

//  ---------------------------------------------------------------------------
//  Valid frames in canonical form: decode -> encode gives the same bytes.

static const char *s_valid[] = {
    "{\"type\":\"describe\"}",
    "{\"type\":\"description\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"node-a\","
        "\"block_len\":65536,\"config_fingerprint\":\"\",\"hash_seed\":\"42\",\"provider\":\"tcp\"}",
    //  the providers offered, best first, and the server's host identity
    "{\"type\":\"description\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"node-a\","
        "\"block_len\":65536,\"config_fingerprint\":\"\",\"hash_seed\":\"42\",\"provider\":\"shm\","
        "\"providers\":[\"shm\",\"tcp;ofi_rxm\",\"a-provider-of-tomorrow\"],"
        "\"host\":\"5b1f/net:4026531840/ipc:4026531839\"}",
    CONNECT("\"cDJwa3Y=\"", "0", "1", "1"),
    //  the largest pool that ends exactly at 2^64 - 1
    CONNECT("\"YQ==\"", "9223372036854775807", "2147483648", "4294967296"),
    "{\"type\":\"connect_ack\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"a\","
        "\"source_epoch\":\"" TE "\",\"target_epoch\":\"" SE "\",\"num_blocks\":2147483648,"
        "\"block_len\":9007199254740991}",
    "{\"type\":\"disconnect\",\"code\":\"incompatible\",\"reason\":\"hash_seed differs\","
        "\"wire_major\":2,\"wire_minor\":7,\"block_len\":4096,\"config_fingerprint\":\"\","
        "\"hash_seed\":\"x\"}",
    "{\"type\":\"disconnect\",\"code\":\"violation\",\"reason\":\"duplicate fetch\"" EP "}",
    "{\"type\":\"disconnect\",\"code\":\"no_session\",\"reason\":\"\"}",
    "{\"type\":\"disconnect\",\"code\":\"silent\",\"reason\":\"10 s\"}",
    "{\"type\":\"disconnect\",\"code\":\"shutdown\",\"reason\":\"SIGTERM\"}",
    "{\"type\":\"disconnect\",\"code\":\"retired\",\"reason\":\"drain timeout\"}",
    "{\"type\":\"ping\"" EP "}",
    "{\"type\":\"pong\"" EP "}",
    LOOKUP_HEAD ",\"keys\":[\"00\"],\"round_seq\":0" EP "}",
    "{\"type\":\"lookup\",\"kv_request_id\":\"r\xc3\xa9q \xe2\x98\x83\",\"keys\":[\"0a\",\"0a\"],"
        "\"round_seq\":9007199254740991" EP "}",
    "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"keys\":[\"ab\",\"cd\"],"
        "\"hits\":[true,false],\"round_seq\":5" EP "}",
    //  wire 1.1: an answer without the keys, the hits counting them
    "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[true,false,true],"
        "\"round_seq\":5" EP "}",
    //  capability checksum: 16 hex chars per hit
    "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[true,false,true],"
        "\"round_seq\":5" EP ",\"checksums\":\"0123456789abcdefffffffffffffffff\"}",
    "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[false],"
        "\"round_seq\":5" EP ",\"checksums\":\"\"}",
    //  capability reasons: one letter per miss, after the checksums
    "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[true,false,false],"
        "\"round_seq\":5" EP ",\"checksums\":\"0123456789abcdef\",\"reasons\":\"ae\"}",
    "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"keys\":[\"ab\",\"cd\",\"ef\",\"01\","
        "\"02\",\"03\",\"04\",\"05\"],\"hits\":[false,false,false,false,false,false,false,true],"
        "\"round_seq\":5" EP ",\"reasons\":\"uaepqwd\"}",
    "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[true],"
        "\"round_seq\":5" EP ",\"reasons\":\"\"}",
    //  capability words, one a word of tomorrow
    "{\"type\":\"connect_ack\",\"wire_major\":1,\"wire_minor\":1,\"peer_id\":\"a\","
        "\"source_epoch\":\"" TE "\",\"target_epoch\":\"" SE "\",\"num_blocks\":2,"
        "\"block_len\":4096,\"caps\":\"checksum rails\"}",
    FETCH_HEAD ",\"keys\":[\"ab\",\"abcd\"],\"block_indexes\":[2147483647,0],\"round_seq\":1" EP "}",
    FETCH_HEAD ",\"keys\":[],\"block_indexes\":[],\"round_seq\":4" EP "}",
    //  capability rejoin: a fetch offering a fresh registration of rail 1
    FETCH_HEAD ",\"keys\":[\"ab\"],\"block_indexes\":[0],\"round_seq\":5" EP
        ",\"rail_offer\":\"1 UEtPRgE=\"}",
    "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":false,\"round_seq\":2,"
        "\"landing\":0" EP "}",
    "{\"type\":\"abort_fetch\",\"kv_request_id\":\"r\",\"round_seq\":2" EP "}",
    "{\"type\":\"abort_ack\",\"kv_request_id\":\"r\",\"round_seq\":2,\"landing\":65536" EP "}",
    //  capability rails: the round's blocks per consumer rail
    "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":true,\"round_seq\":2,"
        "\"landing\":8" EP ",\"rails\":\"5 3\"}",
    "{\"type\":\"abort_ack\",\"kv_request_id\":\"r\",\"round_seq\":2,\"landing\":0" EP
        ",\"rails\":\"0 0 0 0 0 0 0 0\"}",
    //  a rail taken out (--rail-stall): the consumer revokes it first
    "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":true,\"round_seq\":2,"
        "\"landing\":8" EP ",\"rails\":\"8 0\",\"rails_failed\":\"1\"}",
    "{\"type\":\"abort_ack\",\"kv_request_id\":\"r\",\"round_seq\":2,\"landing\":0" EP
        ",\"rails\":\"0 0 0\",\"rails_failed\":\"0 2\"}",
    //  a description listing rails
    "{\"type\":\"description\",\"wire_major\":1,\"wire_minor\":1,\"peer_id\":\"a\","
        "\"block_len\":4096,\"config_fingerprint\":\"\",\"hash_seed\":\"0\","
        "\"provider\":\"tcp\",\"caps\":\"rails\"}",
};

START_TEST(test_valid_round_trip)
{
    const char *text = s_valid[_i];
    char err[PK_ERRLEN] = "";
    pk_msg_t *msg = NULL;
    int rc = pk_msg_decode(text, strlen(text), &msg, err);
    ck_assert_msg(rc == 0, "decode of %s: %d %s", text, rc, err);
    char *out = NULL;
    size_t len = 0;
    ck_assert_int_eq(pk_msg_encode(msg, &out, &len, err), 0);
    ck_assert_str_eq(out, text);
    ck_assert_uint_eq(len, strlen(text));
    pk_msg_t *again = NULL;
    ck_assert_int_eq(pk_msg_decode(out, len, &again, err), 0);
    ck_assert_int_eq(again->type, msg->type);
    ck_assert_uint_eq(again->present, msg->present);
    char *out2 = NULL;
    ck_assert_int_eq(pk_msg_encode(again, &out2, NULL, err), 0);
    ck_assert_str_eq(out2, text);
    free(out);
    free(out2);
    pk_msg_destroy(&again);
    //  each half of the decoder on its own gives the same message (the
    //  scanner may pass a frame to the reference, never differ from it)
    ck_assert_int_eq(pk_msg_decode_reference(text, strlen(text), &again, err), 0);
    ck_assert_uint_eq(again->present, msg->present);
    ck_assert_uint_eq(again->keys.count, msg->keys.count);
    ck_assert_int_eq(pk_msg_encode(again, &out, NULL, err), 0);
    ck_assert_str_eq(out, text);
    free(out);
    pk_msg_destroy(&again);
    if (pk_msg_decode_scan(text, strlen(text), &again) == 0) {
        ck_assert_uint_eq(again->present, msg->present);
        ck_assert_uint_eq(again->keys.count, msg->keys.count);
        ck_assert_int_eq(pk_msg_encode(again, &out, NULL, err), 0);
        ck_assert_str_eq(out, text);
        free(out);
        pk_msg_destroy(&again);
    }
    pk_msg_destroy(&msg);
    ck_assert_ptr_null(msg);
}
END_TEST

//  ---------------------------------------------------------------------------
//  Rejected frames: class and exact text (a trailing '*' matches a prefix,
//  for the parts of the message that are jansson's words).

typedef struct {
    const char *frame;
    int rc;
    const char *err;
} s_reject_t;

static const s_reject_t s_rejects[] = {
    // framing (section 1)
    { "", -EBADMSG, "invalid JSON at byte 0: *" },
    { "hello", -EBADMSG, "invalid JSON at byte *" },
    { "[1,2]", -EBADMSG, "frame is not a JSON object (got array)" },
    { "\"describe\"", -EBADMSG, "invalid JSON at byte *" },
    { "{\"type\":\"describe\"} {}", -EBADMSG, "invalid JSON at byte *" },
    { "{\"type\":\"describe\",\"type\":\"describe\"}", -EBADMSG,
      "invalid JSON at byte 25: duplicate object key near '\"type\"'" },
    { "{\"type\":\"ping\",\"a\":{\"b\":1,\"b\":2}" EP "}", -EBADMSG,
      "invalid JSON at byte 29: duplicate object key*" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":0,\"x\":\"a\\u0000b\"" EP "}", -EBADMSG,
      "invalid JSON at byte 79: NUL character in string" },
    { "{\"type\":\"describe\",\"x\":\"\xff\"}", -EBADMSG, "invalid JSON at byte *" },
    { "{\"type\":\"describe\",\"x\":\"\xc3\"}", -EBADMSG, "invalid JSON at byte *" },
    { "{}", -EBADMSG, "type: missing" },
    { "{\"type\":5}", -EBADMSG, "type: expected string, got 5" },
    { "{\"type\":null}", -EBADMSG, "type: expected string, got null" },
    { "{\"type\":\"hello\"}", -ENOMSG, "unknown type \"hello\"" },
    { "{\"type\":\"Describe\"}", -ENOMSG, "unknown type \"Describe\"" },
    // strings (section 2)
    { "{\"type\":\"lookup\",\"keys\":[\"ab\"],\"round_seq\":0" EP "}", -EPROTO,
      "lookup.kv_request_id: missing" },
    { "{\"type\":\"lookup\",\"kv_request_id\":\"\",\"keys\":[\"ab\"],\"round_seq\":0" EP "}",
      -EPROTO, "lookup.kv_request_id: expected string of 1..4096 bytes, got 0 bytes" },
    { "{\"type\":\"lookup\",\"kv_request_id\":7,\"keys\":[\"ab\"],\"round_seq\":0" EP "}",
      -EPROTO, "lookup.kv_request_id: expected string, got 7" },
    { "{\"type\":\"abort_fetch\",\"kv_request_id\":[\"r\"],\"round_seq\":0" EP "}",
      -EPROTO, "abort_fetch.kv_request_id: expected string, got array" },
    // keys
    { LOOKUP_HEAD ",\"round_seq\":0" EP "}", -EPROTO, "lookup.keys: missing" },
    { LOOKUP_HEAD ",\"keys\":{},\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys: expected array, got object" },
    { LOOKUP_HEAD ",\"keys\":\"ab\",\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys: expected array, got string" },
    { LOOKUP_HEAD ",\"keys\":[],\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys: expected at least one key, got 0" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\",1],\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys[1]: expected string, got 1" },
    { LOOKUP_HEAD ",\"keys\":[\"abc\"],\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys[0]: expected lowercase hex of even length 2..8192 chars, got 3 chars" },
    { LOOKUP_HEAD ",\"keys\":[\"\"],\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys[0]: expected lowercase hex of even length 2..8192 chars, got 0 chars" },
    { LOOKUP_HEAD ",\"keys\":[\"AB\"],\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys[0]: expected lowercase hex, got 'A' at char 0" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\",\"0g\"],\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys[1]: expected lowercase hex, got 'g' at char 1" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\",\"a \"],\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys[1]: expected lowercase hex, got ' ' at char 1" },
    { LOOKUP_HEAD ",\"keys\":[\"\\u00e9a\"],\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys[0]: expected lowercase hex of even length 2..8192 chars, got 3 chars" },
    { LOOKUP_HEAD ",\"keys\":[\"\\u00e9\"],\"round_seq\":0" EP "}", -EPROTO,
      "lookup.keys[0]: expected lowercase hex, got byte 0xc3 at char 0" },
    // round_seq and integers
    { LOOKUP_HEAD ",\"keys\":[\"ab\"]" EP "}", -EPROTO, "lookup.round_seq: missing" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":-1" EP "}", -EPROTO,
      "lookup.round_seq: expected integer 0..9007199254740991, got -1" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":9007199254740992" EP "}", -EPROTO,
      "lookup.round_seq: expected integer 0..9007199254740991, got 9007199254740992" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":1.0" EP "}", -EPROTO,
      "lookup.round_seq: expected integer 0..9007199254740991, got 1.0" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":1e3" EP "}", -EPROTO,
      "lookup.round_seq: expected integer 0..9007199254740991, got 1000.0" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":true" EP "}", -EPROTO,
      "lookup.round_seq: expected integer 0..9007199254740991, got true" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":\"3\"" EP "}", -EPROTO,
      "lookup.round_seq: expected integer 0..9007199254740991, got string" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":null" EP "}", -EPROTO,
      "lookup.round_seq: expected integer 0..9007199254740991, got null" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":99999999999999999999" EP "}", -EBADMSG,
      "invalid JSON at byte *too big*" },
    // epochs
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":0,\"target_epoch\":\"" TE "\"}", -EPROTO,
      "lookup.source_epoch: missing" },
    { LOOKUP_HEAD ",\"keys\":[\"ab\"],\"round_seq\":0,\"source_epoch\":\"" SE "\"}", -EPROTO,
      "lookup.target_epoch: missing" },
    { "{\"type\":\"ping\",\"source_epoch\":\"0123456789ABCDEF0123456789abcdef\","
      "\"target_epoch\":\"" TE "\"}", -EPROTO,
      "ping.source_epoch: expected 32 lowercase hex chars, got other text" },
    { "{\"type\":\"ping\",\"source_epoch\":\"0123\",\"target_epoch\":\"" TE "\"}", -EPROTO,
      "ping.source_epoch: expected 32 lowercase hex chars, got other text" },
    { "{\"type\":\"ping\",\"source_epoch\":\"" SE "00\",\"target_epoch\":\"" TE "\"}", -EPROTO,
      "ping.source_epoch: expected 32 lowercase hex chars, got other text" },
    { "{\"type\":\"ping\",\"source_epoch\":\"" SE "\",\"target_epoch\":5}", -EPROTO,
      "ping.target_epoch: expected 32 lowercase hex chars, got 5" },
    { "{\"type\":\"pong\",\"source_epoch\":\"" ZE "\",\"target_epoch\":\"" TE "\"}", -EPROTO,
      "pong.source_epoch: expected a nonzero epoch, got all zeros" },
    { "{\"type\":\"ping\",\"source_epoch\":\"" SE "\",\"target_epoch\":\"" ZE "\"}", -EPROTO,
      "ping.target_epoch: expected a nonzero epoch, got all zeros" },
    // fetch: equal lengths, indexes, duplicates
    { FETCH_HEAD ",\"keys\":[\"ab\"],\"round_seq\":0" EP "}", -EPROTO,
      "fetch.block_indexes: missing" },
    { FETCH_HEAD ",\"keys\":[\"ab\"],\"block_indexes\":7,\"round_seq\":0" EP "}", -EPROTO,
      "fetch.block_indexes: expected array, got 7" },
    { FETCH_HEAD ",\"keys\":[\"ab\",\"cd\"],\"block_indexes\":[1],\"round_seq\":0" EP "}",
      -EPROTO, "fetch.block_indexes: expected 2 items (one per key), got 1" },
    { FETCH_HEAD ",\"keys\":[],\"block_indexes\":[1],\"round_seq\":0" EP "}",
      -EPROTO, "fetch.block_indexes: expected 0 items (one per key), got 1" },
    { FETCH_HEAD ",\"keys\":[\"a0\",\"a1\",\"a2\",\"a3\"],\"block_indexes\":[0,1,2,-1],"
      "\"round_seq\":0" EP "}", -EPROTO,
      "fetch.block_indexes[3]: expected integer 0..2147483647, got -1" },
    { FETCH_HEAD ",\"keys\":[\"ab\"],\"block_indexes\":[2147483648],\"round_seq\":0" EP "}",
      -EPROTO, "fetch.block_indexes[0]: expected integer 0..2147483647, got 2147483648" },
    { FETCH_HEAD ",\"keys\":[\"ab\"],\"block_indexes\":[false],\"round_seq\":0" EP "}",
      -EPROTO, "fetch.block_indexes[0]: expected integer 0..2147483647, got false" },
    { FETCH_HEAD ",\"keys\":[\"ab\"],\"block_indexes\":[2.5],\"round_seq\":0" EP "}",
      -EPROTO, "fetch.block_indexes[0]: expected integer 0..2147483647, got 2.5" },
    { FETCH_HEAD ",\"keys\":[\"ab\",\"cd\",\"ab\"],\"block_indexes\":[0,1,2],\"round_seq\":0" EP "}",
      -EPROTO, "fetch.keys[2]: duplicate of keys[0]" },
    { FETCH_HEAD ",\"keys\":[\"ab\",\"cd\",\"ef\"],\"block_indexes\":[7,3,7],\"round_seq\":0" EP "}",
      -EPROTO, "fetch.block_indexes[2]: duplicate of block_indexes[0] (7)" },
    { FETCH_HEAD ",\"keys\":[\"ab\"],\"block_indexes\":[0]" EP "}", -EPROTO,
      "fetch.round_seq: missing" },
    // lookup_resp
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[true,true],"
      "\"round_seq\":0" EP ",\"checksums\":\"0123456789abcdef0123456789abcde\"}", -EPROTO,
      "lookup_resp.checksums: expected 16 hex chars for each of 2 hits, got 31 chars" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[true,false],"
      "\"round_seq\":0" EP ",\"checksums\":\"0123456789ABCDEF\"}", -EPROTO,
      "lookup_resp.checksums[10]: expected lowercase hex" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[true],"
      "\"round_seq\":0" EP ",\"checksums\":7}", -EPROTO,
      "lookup_resp.checksums: expected string, got 7" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[true,false,false],"
      "\"round_seq\":0" EP ",\"reasons\":\"a\"}", -EPROTO,
      "lookup_resp.reasons: expected one letter for each of 2 misses, got 1" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[true],"
      "\"round_seq\":0" EP ",\"reasons\":\"a\"}", -EPROTO,
      "lookup_resp.reasons: expected one letter for each of 0 misses, got 1" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[false,false],"
      "\"round_seq\":0" EP ",\"reasons\":\"ax\"}", -EPROTO,
      "lookup_resp.reasons[1]: expected one of uaepqwd, got 'x'" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[false],"
      "\"round_seq\":0" EP ",\"reasons\":[\"absent\"]}", -EPROTO,
      "lookup_resp.reasons: expected string, got array" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"keys\":[\"ab\",\"cd\"],"
      "\"hits\":[true],\"round_seq\":0" EP "}", -EPROTO,
      "lookup_resp.hits: expected 2 items (one per key), got 1" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"keys\":[\"ab\"],"
      "\"hits\":[1],\"round_seq\":0" EP "}", -EPROTO,
      "lookup_resp.hits[0]: expected boolean, got 1" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"keys\":[\"ab\"],"
      "\"hits\":[\"true\"],\"round_seq\":0" EP "}", -EPROTO,
      "lookup_resp.hits[0]: expected boolean, got string" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"keys\":[],"
      "\"hits\":[],\"round_seq\":0" EP "}", -EPROTO,
      "lookup_resp.keys: expected at least one key, got 0" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"keys\":[\"ab\"],"
      "\"round_seq\":0" EP "}", -EPROTO, "lookup_resp.hits: missing" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[],"
      "\"round_seq\":0" EP "}", -EPROTO, "lookup_resp.hits: expected at least one item, got 0" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":7,"
      "\"round_seq\":0" EP "}", -EPROTO, "lookup_resp.hits: expected array, got 7" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\",\"hits\":[true,0],"
      "\"round_seq\":0" EP "}", -EPROTO, "lookup_resp.hits[1]: expected boolean, got 0" },
    { "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\","
      "\"round_seq\":0" EP "}", -EPROTO, "lookup_resp.hits: missing" },
    // transfer_done, abort_ack
    { "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":true,\"round_seq\":0,"
      "\"landing\":0" EP ",\"rails\":\"1  2\"}", -EPROTO,
      "transfer_done.rails: expected 1..8 decimal counts one space apart, got \"1  2\"" },
    { "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":true,\"round_seq\":0,"
      "\"landing\":0" EP ",\"rails\":\"1 2 \"}", -EPROTO,
      "transfer_done.rails: expected 1..8 decimal counts one space apart, got \"1 2 \"" },
    { "{\"type\":\"abort_ack\",\"kv_request_id\":\"r\",\"round_seq\":0,"
      "\"landing\":0" EP ",\"rails\":\"0 0 0 0 0 0 0 0 0\"}", -EPROTO,
      "abort_ack.rails: expected 1..8 counts" },
    { "{\"type\":\"abort_ack\",\"kv_request_id\":\"r\",\"round_seq\":0,"
      "\"landing\":0" EP ",\"rails\":\"x\"}", -EPROTO,
      "abort_ack.rails: expected 1..8 decimal counts one space apart, got \"x\"" },
    { "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":true,\"round_seq\":0,"
      "\"landing\":0" EP ",\"rails\":\"1 2\",\"rails_failed\":\"1 0\"}", -EPROTO,
      "transfer_done.rails_failed: expected rail indexes 0..7, ascending, one space apart, "
      "got \"1 0\"" },
    { "{\"type\":\"abort_ack\",\"kv_request_id\":\"r\",\"round_seq\":0,"
      "\"landing\":0" EP ",\"rails\":\"1 2\",\"rails_failed\":\"8\"}", -EPROTO,
      "abort_ack.rails_failed: expected rail indexes 0..7, ascending, one space apart, "
      "got \"8\"" },
    { "{\"type\":\"abort_ack\",\"kv_request_id\":\"r\",\"round_seq\":0,"
      "\"landing\":0" EP ",\"rails\":\"1 2\",\"rails_failed\":\"1 \"}", -EPROTO,
      "abort_ack.rails_failed: expected rail indexes 0..7, ascending, one space apart, "
      "got \"1 \"" },
    { FETCH_HEAD ",\"keys\":[],\"block_indexes\":[],\"round_seq\":4" EP
      ",\"rail_offer\":\"8 UEtPRgE=\"}", -EPROTO,
      "fetch.rail_offer: expected a rail index 0..7, one space and 1..4096 bytes in base64, "
      "got \"8 UEtPRgE=\"" },
    { FETCH_HEAD ",\"keys\":[],\"block_indexes\":[],\"round_seq\":4" EP
      ",\"rail_offer\":\"1 UEtP*gE=\"}", -EPROTO,
      "fetch.rail_offer: expected a rail index 0..7, one space and 1..4096 bytes in base64, "
      "got \"1 UEtP*gE=\"" },
    { FETCH_HEAD ",\"keys\":[],\"block_indexes\":[],\"round_seq\":4" EP
      ",\"rail_offer\":\"1UEtPRgE=\"}", -EPROTO,
      "fetch.rail_offer: expected a rail index 0..7, one space and 1..4096 bytes in base64, "
      "got \"1UEtPRgE=\"" },
    { FETCH_HEAD ",\"keys\":[],\"block_indexes\":[],\"round_seq\":4" EP
      ",\"rail_offer\":\"1 \"}", -EPROTO,
      "fetch.rail_offer: expected string of 3..5466 bytes, got 2 bytes" },
    { "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":1,\"round_seq\":0,"
      "\"landing\":0" EP "}", -EPROTO, "transfer_done.success: expected boolean, got 1" },
    { "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":0,\"round_seq\":0,"
      "\"landing\":0" EP "}", -EPROTO, "transfer_done.success: expected boolean, got 0" },
    { "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":\"true\",\"round_seq\":0,"
      "\"landing\":0" EP "}", -EPROTO, "transfer_done.success: expected boolean, got string" },
    { "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":true,\"round_seq\":0"
      EP "}", -EPROTO, "transfer_done.landing: missing" },
    { "{\"type\":\"transfer_done\",\"kv_request_id\":\"r\",\"success\":true,\"round_seq\":0,"
      "\"landing\":-3" EP "}", -EPROTO,
      "transfer_done.landing: expected integer 0..9007199254740991, got -3" },
    { "{\"type\":\"abort_ack\",\"kv_request_id\":\"r\",\"round_seq\":0,\"landing\":1.0" EP "}",
      -EPROTO, "abort_ack.landing: expected integer 0..9007199254740991, got 1.0" },
    { "{\"type\":\"abort_fetch\",\"kv_request_id\":\"r\"" EP "}", -EPROTO,
      "abort_fetch.round_seq: missing" },
    // connect
    { CONNECT("\"YQ==\"", "0", "1", "1") "x", -EBADMSG, "invalid JSON at byte *" },
    { CONNECT("\"***\"", "0", "1", "1"), -EPROTO,
      "connect.agent_metadata: expected base64 (with padding), got invalid text" },
    { CONNECT("\"YQ\"", "0", "1", "1"), -EPROTO,
      "connect.agent_metadata: expected base64 (with padding), got invalid text" },
    { CONNECT("\"YQ==YQ==\"", "0", "1", "1"), -EPROTO,
      "connect.agent_metadata: expected base64 (with padding), got invalid text" },
    { CONNECT("\"\"", "0", "1", "1"), -EPROTO,
      "connect.agent_metadata: expected 1..1048576 bytes decoded, got 0" },
    { CONNECT("7", "0", "1", "1"), -EPROTO,
      "connect.agent_metadata: expected base64 string, got 7" },
    { CONNECT("\"YQ==\"", "-1", "1", "1"), -EPROTO,
      "connect.base_addr: expected integer 0..9223372036854775807, got -1" },
    { CONNECT("\"YQ==\"", "0", "0", "1"), -EPROTO,
      "connect.num_blocks: expected integer 1..2147483648, got 0" },
    { CONNECT("\"YQ==\"", "0", "2147483649", "1"), -EPROTO,
      "connect.num_blocks: expected integer 1..2147483648, got 2147483649" },
    { CONNECT("\"YQ==\"", "0", "1", "0"), -EPROTO,
      "connect.block_len: expected integer 1..9007199254740991, got 0" },
    { CONNECT("\"YQ==\"", "0", "1", "true"), -EPROTO,
      "connect.block_len: expected integer 1..9007199254740991, got true" },
    { CONNECT("\"YQ==\"", "9223372036854775807", "2147483648", "4294967297"), -EPROTO,
      "connect: base_addr + num_blocks*block_len overflows 64 bits" },
    { CONNECT("\"YQ==\"", "0", "2147483648", "9007199254740991"), -EPROTO,
      "connect: base_addr + num_blocks*block_len overflows 64 bits" },
    { "{\"type\":\"connect\",\"wire_major\":\"1\"}", -EPROTO,
      "connect.wire_major: expected integer 0..65535, got string" },
    { "{\"type\":\"connect\",\"wire_major\":65536}", -EPROTO,
      "connect.wire_major: expected integer 0..65535, got 65536" },
    { "{\"type\":\"connect\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"p\","
      "\"source_epoch\":\"" ZE "\",\"target_epoch\":\"" ZE "\"}", -EPROTO,
      "connect.source_epoch: expected a nonzero epoch, got all zeros" },
    { "{\"type\":\"connect\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"\"}", -EPROTO,
      "connect.peer_id: expected string of 1..4096 bytes, got 0 bytes" },
    { "{\"type\":\"connect\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"p\","
      "\"source_epoch\":\"" SE "\",\"target_epoch\":\"" ZE "\",\"agent_metadata\":\"YQ==\","
      "\"base_addr\":0,\"num_blocks\":1,\"block_len\":1,\"config_fingerprint\":\"f\","
      "\"hash_seed\":\"\"}", -EPROTO,
      "connect.hash_seed: expected string of 1..4096 bytes, got 0 bytes" },
    { "{\"type\":\"connect\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"p\","
      "\"source_epoch\":\"" SE "\",\"target_epoch\":\"" ZE "\",\"agent_metadata\":\"YQ==\","
      "\"base_addr\":0,\"num_blocks\":1,\"block_len\":1,\"hash_seed\":\"s\"}", -EPROTO,
      "connect.config_fingerprint: missing" },
    // connect_ack, description, disconnect
    { "{\"type\":\"connect_ack\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"a\","
      "\"source_epoch\":\"" TE "\",\"target_epoch\":\"" ZE "\",\"num_blocks\":1,\"block_len\":1}",
      -EPROTO, "connect_ack.target_epoch: expected a nonzero epoch, got all zeros" },
    { "{\"type\":\"connect_ack\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"a\","
      "\"source_epoch\":\"" TE "\",\"target_epoch\":\"" SE "\",\"block_len\":1}",
      -EPROTO, "connect_ack.num_blocks: missing" },
    { "{\"type\":\"description\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"a\","
      "\"block_len\":1,\"config_fingerprint\":\"\",\"hash_seed\":\"s\",\"provider\":\"\"}",
      -EPROTO, "description.provider: expected string of 1..4096 bytes, got 0 bytes" },
    { "{\"type\":\"description\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"a\","
      "\"block_len\":1,\"config_fingerprint\":false,\"hash_seed\":\"s\",\"provider\":\"tcp\"}",
      -EPROTO, "description.config_fingerprint: expected string, got false" },
    //  providers and host: the list's type, length and items are named
    { DESC_HEAD ",\"providers\":\"shm\"}", -EPROTO,
      "description.providers: expected array, got string" },
    { DESC_HEAD ",\"providers\":[]}", -EPROTO,
      "description.providers: expected 1..16 items, got 0" },
    { DESC_HEAD ",\"providers\":[\"shm\",\"p0\",\"p1\",\"p2\",\"p3\",\"p4\",\"p5\",\"p6\",\"p7\",\"p8\",\"p9\",\"p10\",\"p11\",\"p12\",\"p13\",\"p14\",\"p15\"]}", -EPROTO,
      "description.providers: expected 1..16 items, got 17" },
    { DESC_HEAD ",\"providers\":[\"shm\",1]}", -EPROTO,
      "description.providers[1]: expected string, got 1" },
    { DESC_HEAD ",\"providers\":[\"shm\",\"\"]}", -EPROTO,
      "description.providers[1]: expected string of 1..63 bytes, got 0 bytes" },
    { DESC_HEAD ",\"providers\":[\"shm\",\"0123456789012345678901234567890123456789012345678901234567890123\"]}",
      -EPROTO, "description.providers[1]: expected string of 1..63 bytes, got 64 bytes" },
    { DESC_HEAD ",\"providers\":[\"tcp\"]}", -EPROTO,
      "description.providers[0]: expected the provider (shm), got tcp" },
    { DESC_HEAD ",\"host\":7}", -EPROTO, "description.host: expected string, got 7" },
    { DESC_HEAD ",\"host\":\"\"}", -EPROTO,
      "description.host: expected string of 1..127 bytes, got 0 bytes" },
    { "{\"type\":\"disconnect\",\"code\":\"bogus\",\"reason\":\"\"}", -EPROTO,
      "disconnect.code: expected one of incompatible, no_session, violation, silent, "
      "shutdown, retired, got other text" },
    { "{\"type\":\"disconnect\",\"code\":1,\"reason\":\"\"}", -EPROTO,
      "disconnect.code: expected one of incompatible, no_session, violation, silent, "
      "shutdown, retired, got 1" },
    { "{\"type\":\"disconnect\",\"code\":\"silent\"}", -EPROTO, "disconnect.reason: missing" },
    { "{\"type\":\"disconnect\",\"code\":\"incompatible\",\"reason\":\"r\",\"wire_major\":1,"
      "\"wire_minor\":0,\"block_len\":1,\"config_fingerprint\":\"\"}", -EPROTO,
      "disconnect.hash_seed: missing (required for code incompatible)" },
    { "{\"type\":\"disconnect\",\"code\":\"incompatible\",\"reason\":\"r\"}", -EPROTO,
      "disconnect.wire_major: missing (required for code incompatible)" },
    { "{\"type\":\"disconnect\",\"code\":\"violation\",\"reason\":\"r\",\"source_epoch\":\""
      SE "\"}", -EPROTO, "disconnect: source_epoch and target_epoch go together" },
    { "{\"type\":\"disconnect\",\"code\":\"silent\",\"reason\":\"r\",\"wire_major\":-1}",
      -EPROTO, "disconnect.wire_major: expected integer 0..65535, got -1" },
};

static bool
s_matches(const char *got, const char *want)
{
    //  '*' in want matches any run of characters
    const char *star = strchr(want, '*');
    if (!star)
        return strcmp(got, want) == 0;
    size_t head = (size_t) (star - want);
    if (strncmp(got, want, head) != 0)
        return false;
    got += head;
    want = star + 1;
    if (!*want)
        return true;
    for (; *got; got++)
        if (s_matches(got, want))
            return true;
    return false;
}

START_TEST(test_reject)
{
    const s_reject_t *r = &s_rejects[_i];
    char err[PK_ERRLEN] = "";
    pk_msg_t *msg = (pk_msg_t *) 1;
    int rc = pk_msg_decode(r->frame, strlen(r->frame), &msg, err);
    ck_assert_msg(rc == r->rc, "%s: rc %d, want %d (%s)", r->frame, rc, r->rc, err);
    ck_assert_ptr_null(msg);
    ck_assert_msg(s_matches(err, r->err), "%s:\n  got  \"%s\"\n  want \"%s\"", r->frame, err,
                  r->err);
}
END_TEST

//  ---------------------------------------------------------------------------
//  Bounds that need long inputs

static char *
s_repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

static int
s_decode_fmt(pk_msg_t **msg, char *err, const char *fmt, const char *arg)
{
    size_t cap = strlen(fmt) + strlen(arg) + 1;
    char *frame = malloc(cap);
    snprintf(frame, cap, fmt, arg);
    int rc = pk_msg_decode(frame, strlen(frame), msg, err);
    free(frame);
    return rc;
}

START_TEST(test_string_bounds)
{
    char err[PK_ERRLEN];
    pk_msg_t *msg = NULL;
    const char *fmt = "{\"type\":\"abort_fetch\",\"kv_request_id\":\"%s\",\"round_seq\":0" EP "}";
    char *s4096 = s_repeat('x', 4096), *s4097 = s_repeat('x', 4097);
    ck_assert_int_eq(s_decode_fmt(&msg, err, fmt, s4096), 0);
    ck_assert_uint_eq(strlen(msg->kv_request_id), 4096);
    pk_msg_destroy(&msg);
    ck_assert_int_eq(s_decode_fmt(&msg, err, fmt, s4097), -EPROTO);
    ck_assert_str_eq(err, "abort_fetch.kv_request_id: expected string of 1..4096 bytes, got 4097 bytes");
    //  the bound is in bytes, not characters: 2,049 two-byte characters
    char *wide = malloc(2049 * 6 + 1);
    for (int i = 0; i < 2049; i++)
        memcpy(wide + 6 * i, "\\u00e9", 6);
    wide[2049 * 6] = '\0';
    ck_assert_int_eq(s_decode_fmt(&msg, err, fmt, wide), -EPROTO);
    ck_assert_str_eq(err, "abort_fetch.kv_request_id: expected string of 1..4096 bytes, got 4098 bytes");
    const char *dfmt = "{\"type\":\"description\",\"wire_major\":1,\"wire_minor\":0,\"peer_id\":\"a\","
                       "\"block_len\":1,\"config_fingerprint\":\"%s\",\"hash_seed\":\"s\",\"provider\":\"t\"}";
    ck_assert_int_eq(s_decode_fmt(&msg, err, dfmt, s4096), 0);
    pk_msg_destroy(&msg);
    ck_assert_int_eq(s_decode_fmt(&msg, err, dfmt, s4097), -EPROTO);
    ck_assert_str_eq(err, "description.config_fingerprint: expected string of 0..4096 bytes, got 4097 bytes");
    free(wide);
    free(s4096);
    free(s4097);
}
END_TEST

START_TEST(test_key_length_bounds)
{
    char err[PK_ERRLEN];
    pk_msg_t *msg = NULL;
    const char *fmt = LOOKUP_HEAD ",\"keys\":[\"%s\"],\"round_seq\":0" EP "}";
    char *k8192 = s_repeat('e', 8192), *k8194 = s_repeat('e', 8194);
    ck_assert_int_eq(s_decode_fmt(&msg, err, fmt, k8192), 0);
    ck_assert_uint_eq(msg->keys.count, 1);
    ck_assert_uint_eq(msg->keys.v[0].len, 4096);
    ck_assert_uint_eq(msg->keys.v[0].bytes[0], 0xee);
    ck_assert_uint_eq(msg->keys.v[0].bytes[4095], 0xee);
    pk_msg_destroy(&msg);
    ck_assert_int_eq(s_decode_fmt(&msg, err, fmt, k8194), -EPROTO);
    ck_assert_str_eq(err, "lookup.keys[0]: expected lowercase hex of even length 2..8192 chars, got 8194 chars");
    free(k8192);
    free(k8194);
}
END_TEST

//  A frame with n keys "%08x" of i, indexes n-1-i.
static char *
s_big_fetch(size_t n, bool with_dup)
{
    size_t cap = 256 + n * 24;
    char *s = malloc(cap);
    size_t at = (size_t) snprintf(s, cap, FETCH_HEAD ",\"keys\":[");
    for (size_t i = 0; i < n; i++)
        at += (size_t) snprintf(s + at, cap - at, "%s\"%08zx\"", i ? "," : "",
                                with_dup && i == n - 1 ? (size_t) 0 : i);
    at += (size_t) snprintf(s + at, cap - at, "],\"block_indexes\":[");
    for (size_t i = 0; i < n; i++)
        at += (size_t) snprintf(s + at, cap - at, "%s%zu", i ? "," : "", n - 1 - i);
    snprintf(s + at, cap - at, "],\"round_seq\":0" EP "}");
    return s;
}

START_TEST(test_list_bounds)
{
    char err[PK_ERRLEN];
    pk_msg_t *msg = NULL;
    char *ok = s_big_fetch(PK_MAX_LIST, false);
    ck_assert_int_eq(pk_msg_decode(ok, strlen(ok), &msg, err), 0);
    ck_assert_uint_eq(msg->keys.count, 65536);
    ck_assert_uint_eq(msg->keys.v[65535].len, 4);
    ck_assert_uint_eq(msg->keys.v[65535].bytes[3], 0xff);
    ck_assert_uint_eq(msg->keys.v[65535].bytes[2], 0xff);
    ck_assert_uint_eq(msg->block_indexes[0], 65535);
    char *out = NULL;
    size_t len;
    ck_assert_int_eq(pk_msg_encode(msg, &out, &len, err), 0);
    ck_assert_str_eq(out, ok);
    free(out);
    pk_msg_destroy(&msg);
    free(ok);

    char *over = s_big_fetch(PK_MAX_LIST + 1, false);
    ck_assert_int_eq(pk_msg_decode(over, strlen(over), &msg, err), -EPROTO);
    ck_assert_str_eq(err, "fetch.keys: expected at most 65536 items, got 65537");
    free(over);

    char *dup = s_big_fetch(PK_MAX_LIST, true);
    ck_assert_int_eq(pk_msg_decode(dup, strlen(dup), &msg, err), -EPROTO);
    ck_assert_str_eq(err, "fetch.keys[65535]: duplicate of keys[0]");
    free(dup);
}
END_TEST

static void s_expect_encode_error(pk_msg_t *msg, const char *want);

//  A lookup_resp of n hits and no keys (wire 1.1), every third a miss.
static char *
s_keyless_answer(size_t n)
{
    size_t cap = 256 + n * 6;
    char *s = malloc(cap);
    size_t at = (size_t) snprintf(s, cap, "{\"type\":\"lookup_resp\",\"kv_request_id\":\"r\","
                                  "\"hits\":[");
    for (size_t i = 0; i < n; i++)
        at += (size_t) snprintf(s + at, cap - at, "%s%s", i ? "," : "",
                                i % 3 ? "true" : "false");
    snprintf(s + at, cap - at, "],\"round_seq\":0" EP "}");
    return s;
}

//  Without keys the hits count themselves, under the lists' bound.
START_TEST(test_keyless_answer_bounds)
{
    char err[PK_ERRLEN];
    pk_msg_t *msg = NULL;
    char *ok = s_keyless_answer(PK_MAX_LIST);
    ck_assert_int_eq(pk_msg_decode(ok, strlen(ok), &msg, err), 0);
    ck_assert_uint_eq(msg->keys.count, PK_MAX_LIST);
    ck_assert_ptr_null(msg->keys.v);
    ck_assert(!msg->hits[0] && msg->hits[1] && !msg->hits[65535 - 65535 % 3]);
    char *out = NULL;
    ck_assert_int_eq(pk_msg_encode(msg, &out, NULL, err), 0);
    ck_assert_str_eq(out, ok);
    free(out);
    //  the encoder holds the same bound on a message built by hand
    msg->keys.count = PK_MAX_LIST + 1;
    bool *more = realloc(msg->hits, PK_MAX_LIST + 1);
    ck_assert_ptr_nonnull(more);
    msg->hits = more;
    s_expect_encode_error(msg, "lookup_resp.hits: expected at most 65536 items, got 65537");
    pk_msg_destroy(&msg);
    free(ok);

    char *over = s_keyless_answer(PK_MAX_LIST + 1);
    ck_assert_int_eq(pk_msg_decode(over, strlen(over), &msg, err), -EPROTO);
    ck_assert_str_eq(err, "lookup_resp.hits: expected at most 65536 items, got 65537");
    ck_assert_ptr_null(msg);
    free(over);

}
END_TEST

START_TEST(test_metadata_bounds)
{
    char err[PK_ERRLEN];
    pk_msg_t *msg = NULL;
    const char *fmt = CONNECT("\"%s\"", "0", "1", "1");
    size_t sizes[] = { PK_MAX_METADATA, PK_MAX_METADATA + 1, PK_MAX_METADATA + 3 };
    for (int t = 0; t < 3; t++) {
        uint8_t *bin = malloc(sizes[t]);
        for (size_t i = 0; i < sizes[t]; i++)
            bin[i] = (uint8_t) (i * 7);
        size_t b64len = sodium_base64_ENCODED_LEN(sizes[t], sodium_base64_VARIANT_ORIGINAL);
        char *b64 = malloc(b64len);
        sodium_bin2base64(b64, b64len, bin, sizes[t], sodium_base64_VARIANT_ORIGINAL);
        int rc = s_decode_fmt(&msg, err, fmt, b64);
        if (t == 0) {
            ck_assert_int_eq(rc, 0);
            ck_assert_uint_eq(msg->agent_metadata_len, PK_MAX_METADATA);
            ck_assert_mem_eq(msg->agent_metadata, bin, PK_MAX_METADATA);
            pk_msg_destroy(&msg);
        }
        else if (t == 1) {
            ck_assert_int_eq(rc, -EPROTO);
            ck_assert_str_eq(err, "connect.agent_metadata: expected 1..1048576 bytes decoded, "
                                  "got 1048577");
        }
        else {
            //  refused on its length alone, before any decoding
            ck_assert_int_eq(rc, -EPROTO);
            ck_assert_str_eq(err, "connect.agent_metadata: expected at most 1048576 bytes decoded, "
                                  "got 1398108 base64 chars");
        }
        free(b64);
        free(bin);
    }
}
END_TEST

//  A raw NUL byte can only be tested with an explicit length.
START_TEST(test_raw_nul_byte)
{
    char err[PK_ERRLEN];
    pk_msg_t *msg = NULL;
    static const char frame[] = "{\"type\":\"describe\",\"x\":\"a\0b\"}";
    ck_assert_int_eq(pk_msg_decode(frame, sizeof frame - 1, &msg, err), -EBADMSG);
    ck_assert(s_matches(err, "invalid JSON at byte *"));
    static const char tail[] = "{\"type\":\"describe\"}\0";
    ck_assert_int_eq(pk_msg_decode(tail, sizeof tail - 1, &msg, err), -EBADMSG);
    ck_assert_ptr_null(msg);
}
END_TEST

START_TEST(test_unknown_members_ignored)
{
    char err[PK_ERRLEN];
    pk_msg_t *msg = NULL;
    const char *frame = "{\"x\":[1,{\"y\":null}],\"type\":\"abort_fetch\",\"kv_request_id\":\"r\","
                        "\"round_seq\":2,\"keys\":\"not checked here\",\"future\":1.5" EP "}";
    ck_assert_int_eq(pk_msg_decode(frame, strlen(frame), &msg, err), 0);
    ck_assert_int_eq(msg->type, PK_MSG_ABORT_FETCH);
    ck_assert_uint_eq(msg->round_seq, 2);
    ck_assert_ptr_null(msg->keys.v);
    char *out;
    ck_assert_int_eq(pk_msg_encode(msg, &out, NULL, err), 0);
    ck_assert_str_eq(out, "{\"type\":\"abort_fetch\",\"kv_request_id\":\"r\",\"round_seq\":2" EP "}");
    free(out);
    pk_msg_destroy(&msg);
}
END_TEST

START_TEST(test_decoded_values)
{
    char err[PK_ERRLEN];
    pk_msg_t *msg = NULL;
    const char *frame = FETCH_HEAD ",\"keys\":[\"00ff\",\"a5\"],\"block_indexes\":[9,4],"
                        "\"round_seq\":77" EP "}";
    ck_assert_int_eq(pk_msg_decode(frame, strlen(frame), &msg, err), 0);
    ck_assert_str_eq(msg->kv_request_id, "r");
    ck_assert_uint_eq(msg->keys.count, 2);
    ck_assert_uint_eq(msg->keys.v[0].len, 2);
    ck_assert_mem_eq(msg->keys.v[0].bytes, "\x00\xff", 2);
    ck_assert_uint_eq(msg->keys.v[1].len, 1);
    ck_assert_uint_eq(msg->keys.v[1].bytes[0], 0xa5);
    ck_assert_uint_eq(msg->block_indexes[0], 9);
    ck_assert_uint_eq(msg->block_indexes[1], 4);
    ck_assert_uint_eq(msg->round_seq, 77);
    ck_assert_mem_eq(msg->source_epoch, "\x01\x23\x45\x67\x89\xab\xcd\xef", 8);
    ck_assert_uint_eq(msg->target_epoch[15], 0x10);
    pk_msg_destroy(&msg);
    //  \u escapes decode to UTF-8; the encoder writes UTF-8 as is
    frame = "{\"type\":\"abort_fetch\",\"kv_request_id\":\"r\\u00e9\\ud83d\\ude00\",\"round_seq\":0" EP "}";
    ck_assert_int_eq(pk_msg_decode(frame, strlen(frame), &msg, err), 0);
    ck_assert_str_eq(msg->kv_request_id, "r\xc3\xa9\xf0\x9f\x98\x80");
    pk_msg_destroy(&msg);
}
END_TEST

//  ---------------------------------------------------------------------------
//  The encoder refuses what the decoder would refuse.

static const uint8_t s_se[PK_EPOCH_LEN] = { 1, 2, 3 };
static const uint8_t s_te[PK_EPOCH_LEN] = { 4, 5, 6 };
static const uint8_t s_ze[PK_EPOCH_LEN] = { 0 };

static void
s_expect_encode_error(pk_msg_t *msg, const char *want)
{
    char err[PK_ERRLEN] = "";
    char *out = (char *) 1;
    ck_assert_int_eq(pk_msg_encode(msg, &out, NULL, err), -EPROTO);
    ck_assert_ptr_null(out);
    ck_assert_str_eq(err, want);
}

//  A long string needing escapes, past the room the buffer was sized with:
//  the encoder counts what it needs (json_out.c) and writes all of it.
START_TEST(test_encode_long_escaped_string)
{
    static const char mix[] = { '\x01', '"', '\\', '\n', 'a', '\x1f' };
    char kv[PK_MAX_STRING + 1];
    for (size_t i = 0; i < PK_MAX_STRING; i++)
        kv[i] = mix[i % sizeof mix];
    kv[PK_MAX_STRING] = '\0';
    pk_msg_t *m = pk_msg_new(PK_MSG_ABORT_FETCH);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, 3);
    pk_msg_set_epochs(m, s_se, s_te);
    char *out = NULL, err[PK_ERRLEN] = "";
    size_t len = 0;
    ck_assert_msg(pk_msg_encode(m, &out, &len, err) == 0, "%s", err);
    ck_assert_uint_eq(strlen(out), len);
    pk_msg_t *back = NULL;
    ck_assert_msg(pk_msg_decode(out, len, &back, err) == 0, "%s", err);
    ck_assert_str_eq(back->kv_request_id, kv);
    pk_msg_destroy(&back);
    free(out);
    pk_msg_destroy(&m);
}
END_TEST

START_TEST(test_encode_refuses)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_LOOKUP);
    s_expect_encode_error(m, "lookup.kv_request_id: missing");
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_KV_REQUEST_ID, "r"), 0);
    ck_assert_int_eq(pk_msg_set_keys(m, NULL, 0), 0);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, 1);
    pk_msg_set_epochs(m, s_se, s_te);
    s_expect_encode_error(m, "lookup.keys: expected at least one key, got 0");
    pk_key_t keys[2] = { pk_key_make((const uint8_t *) "\xab", 1),
                         pk_key_make((const uint8_t *) "\xab", 1) };
    ck_assert_int_eq(pk_msg_set_keys(m, keys, 2), 0);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, PK_MAX_ROUND_SEQ + 1);
    s_expect_encode_error(m, "lookup.round_seq: expected integer 0..9007199254740991, got 9007199254740992");
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, 1);
    pk_msg_set_epochs(m, s_ze, s_te);
    s_expect_encode_error(m, "lookup.source_epoch: expected a nonzero epoch, got all zeros");
    pk_msg_set_epochs(m, s_se, s_te);
    char *out;
    ck_assert_int_eq(pk_msg_encode(m, &out, NULL, NULL), 0);
    ck_assert_str_eq(out, LOOKUP_HEAD ",\"keys\":[\"ab\",\"ab\"],\"round_seq\":1,"
                          "\"source_epoch\":\"01020300000000000000000000000000\","
                          "\"target_epoch\":\"04050600000000000000000000000000\"}");
    free(out);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_KV_REQUEST_ID, "bad \xff utf-8"), 0);
    s_expect_encode_error(m, "lookup.kv_request_id: not valid UTF-8");
    pk_msg_destroy(&m);

    m = pk_msg_new(PK_MSG_FETCH);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, "r");
    pk_msg_set_keys(m, keys, 2);
    uint32_t idx[2] = { 1, 2 };
    pk_msg_set_block_indexes(m, idx, 2);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, 0);
    pk_msg_set_epochs(m, s_se, s_te);
    s_expect_encode_error(m, "fetch.keys[1]: duplicate of keys[0]");
    pk_key_t other[2] = { keys[0], pk_key_make((const uint8_t *) "\xcd", 1) };
    pk_msg_set_keys(m, other, 2);
    idx[1] = 1u << 31;
    pk_msg_set_block_indexes(m, idx, 2);
    s_expect_encode_error(m, "fetch.block_indexes[1]: expected integer 0..2147483647, got 2147483648");
    pk_msg_destroy(&m);

    m = pk_msg_new(PK_MSG_CONNECT);
    pk_msg_set_uint(m, PK_F_WIRE_MAJOR, 1);
    pk_msg_set_uint(m, PK_F_WIRE_MINOR, 0);
    pk_msg_set_string(m, PK_F_PEER_ID, "p");
    pk_msg_set_epochs(m, s_se, s_ze);
    pk_msg_set_metadata(m, "addr", 4);
    pk_msg_set_uint(m, PK_F_BASE_ADDR, UINT64_C(1) << 62);
    pk_msg_set_uint(m, PK_F_NUM_BLOCKS, UINT64_C(1) << 31);
    pk_msg_set_uint(m, PK_F_BLOCK_LEN, UINT64_C(1) << 33);
    pk_msg_set_string(m, PK_F_CONFIG_FINGERPRINT, "");
    pk_msg_set_string(m, PK_F_HASH_SEED, "s");
    s_expect_encode_error(m, "connect: base_addr + num_blocks*block_len overflows 64 bits");
    pk_msg_set_uint(m, PK_F_BLOCK_LEN, 4096);
    ck_assert_int_eq(pk_msg_encode(m, &out, NULL, NULL), 0);
    pk_msg_t *back = NULL;
    ck_assert_int_eq(pk_msg_decode(out, strlen(out), &back, NULL), 0);
    ck_assert_uint_eq(back->agent_metadata_len, 4);
    ck_assert_mem_eq(back->agent_metadata, "addr", 4);
    ck_assert_uint_eq(back->base_addr, UINT64_C(1) << 62);
    pk_msg_destroy(&back);
    free(out);
    pk_msg_set_metadata(m, "", 0);
    s_expect_encode_error(m, "connect.agent_metadata: expected 1..1048576 bytes decoded, got 0");
    pk_msg_destroy(&m);

    m = pk_msg_new(PK_MSG_DISCONNECT);
    pk_msg_set_code(m, PK_DISC_INCOMPATIBLE);
    pk_msg_set_string(m, PK_F_REASON, "why");
    s_expect_encode_error(m, "disconnect.wire_major: missing (required for code incompatible)");
    pk_msg_set_code(m, PK_DISC_SHUTDOWN);
    ck_assert_int_eq(pk_msg_encode(m, &out, NULL, NULL), 0);
    ck_assert_str_eq(out, "{\"type\":\"disconnect\",\"code\":\"shutdown\",\"reason\":\"why\"}");
    free(out);
    pk_msg_destroy(&m);
    ck_assert_ptr_null(m);
}
END_TEST

START_TEST(test_hex_helpers)
{
    uint8_t bytes[3];
    char hex[7];
    ck_assert_int_eq(pk_hex_decode("00a0ff", 6, bytes), 3);
    pk_hex_encode(bytes, 3, hex);
    ck_assert_str_eq(hex, "00a0ff");
    ck_assert_int_eq(pk_hex_decode("0A", 2, bytes), -EINVAL);
    ck_assert_int_eq(pk_hex_decode("abc", 3, bytes), -EINVAL);
    ck_assert_str_eq(pk_msg_type_name(PK_MSG_ABORT_ACK), "abort_ack");
    ck_assert_str_eq(pk_disconnect_code_name(PK_DISC_RETIRED), "retired");
}
END_TEST

//  Who may send each type: one table that both halves of a session ask.
START_TEST(test_directions)
{
    const pk_msg_type_t to_server[] = { PK_MSG_DESCRIBE, PK_MSG_CONNECT, PK_MSG_PING,
                                        PK_MSG_LOOKUP, PK_MSG_FETCH, PK_MSG_ABORT_FETCH };
    const pk_msg_type_t to_consumer[] = { PK_MSG_DESCRIPTION, PK_MSG_CONNECT_ACK, PK_MSG_PONG,
                                          PK_MSG_LOOKUP_RESP, PK_MSG_TRANSFER_DONE,
                                          PK_MSG_ABORT_ACK };
    for (size_t i = 0; i < 6; i++) {
        ck_assert_uint_eq(pk_msg_direction(to_server[i]), PK_TO_SERVER);
        ck_assert_uint_eq(pk_msg_direction(to_consumer[i]), PK_TO_CONSUMER);
    }
    ck_assert_uint_eq(pk_msg_direction(PK_MSG_DISCONNECT), PK_TO_SERVER | PK_TO_CONSUMER);
    ck_assert_uint_eq(pk_msg_direction(PK_MSG_COUNT), 0);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("protocol");
    TCase *tc = tcase_create("codec");
    tcase_add_loop_test(tc, test_valid_round_trip, 0, sizeof s_valid / sizeof s_valid[0]);
    tcase_add_loop_test(tc, test_reject, 0, sizeof s_rejects / sizeof s_rejects[0]);
    tcase_add_test(tc, test_string_bounds);
    tcase_add_test(tc, test_key_length_bounds);
    tcase_add_test(tc, test_list_bounds);
    tcase_add_test(tc, test_keyless_answer_bounds);
    tcase_add_test(tc, test_metadata_bounds);
    tcase_add_test(tc, test_raw_nul_byte);
    tcase_add_test(tc, test_unknown_members_ignored);
    tcase_add_test(tc, test_decoded_values);
    tcase_add_test(tc, test_encode_refuses);
    tcase_add_test(tc, test_encode_long_escaped_string);
    tcase_add_test(tc, test_hex_helpers);
    tcase_add_test(tc, test_directions);
    suite_add_tcase(s, tc);
    return pk_test_run("protocol", s);
}
