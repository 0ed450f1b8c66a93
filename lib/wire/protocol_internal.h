/*  protocol_internal.h: what the codec's files share (protocol.c: tables,
    message, checks, the jansson walk and encode; protocol_scan.c: the
    one-pass decoder).  Only lib/wire/ includes it, and the hardening
    suite (tests/e2e/test_hardening.c), which generates its malformed
    messages from the tables.
*/
#ifndef PK_PROTOCOL_INTERNAL_H_INCLUDED
#define PK_PROTOCOL_INTERNAL_H_INCLUDED

#include "wire/protocol.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    K_STRING,       /* bytes in [min, max] */
    K_UINT,         /* JSON integer in [min, max] */
    K_BOOL,
    K_EPOCH,
    K_KEYS,
    K_INDEXES,
    K_HITS,
    K_METADATA,
    K_CODE,
    K_STRINGS       /* an array of [min, max] strings of 1..PK_MAX_PROVIDER bytes */
} pk_field_kind_t;

typedef struct {
    const char *name;
    pk_field_kind_t kind;
    uint64_t min, max;
} pk_field_spec_t;

#define JSON_INT_MAX ((uint64_t) INT64_MAX)

typedef struct {
    const char *name;
    uint64_t required, optional;
    unsigned direction;             //  who may send it (protocol.md section 3)
} pk_msg_spec_t;

//  What each member is, and which members each type requires or allows.
extern const pk_field_spec_t pk_wire_fields[PK_F_COUNT];
extern const pk_msg_spec_t pk_wire_messages[PK_MSG_COUNT];
extern const char *const pk_wire_codes[PK_DISC_COUNT];

void pk_wire_keys_free(pk_keys_t *keys);
void pk_wire_strings_free(pk_msg_t *self);
char **pk_wire_string_slot(pk_msg_t *self, pk_field_t field);
uint64_t *pk_wire_uint_slot(pk_msg_t *self, pk_field_t field);
bool pk_wire_is_zero(const uint8_t *epoch);
bool pk_wire_zero_epoch_ok(pk_msg_type_t type, pk_field_t field);
/*  The rules that tie members together; decode and encode run them.  0
    or -EBADMSG with err.  */
int pk_wire_check_message(const pk_msg_t *m, char *err);

#endif
