/*  server_config_internal.h: what the settings' three files share.

    server_config.c keeps the settings' life (defaults, derived values,
    the mappings to the session and the puller's client), server_config_
    parse.c the option table, the command line and the config file, and
    server_config_values.c the rule of each kind of value.  Only those
    three include this.
*/
#ifndef PK_SERVER_CONFIG_INTERNAL_H_INCLUDED
#define PK_SERVER_CONFIG_INTERNAL_H_INCLUDED

#include "daemon/server_config.h"

#include <stdbool.h>
#include <stdint.h>

//  The protocol's string limit (protocol.md section 2) for peer_id,
//  config_fingerprint and hash_seed: protocol.h's PK_MAX_STRING.
#define PK_CONFIG_MAX_STRING 4096

//  num_blocks on the wire is 1..2^31, and a block index must fit 31 bits.
#define PK_CONFIG_MAX_POOL_BLOCKS (UINT64_C(1) << 31)

//  Every count limit shares one ceiling: large enough for any real
//  deployment, small enough that no product of two of them overflows.
#define PK_CONFIG_MAX_LIMIT (UINT64_C(1) << 31)

//  A timeout shorter than a millisecond rounds to 0 ms in zmq_poll and
//  would spin.
#define PK_CONFIG_MIN_SECONDS 0.001

//  sockaddr_un's sun_path holds 108 bytes with the NUL.
#define PK_CONFIG_MAX_IPC_PATH 107

//  shm_open names: a slash, then one file name of /dev/shm.
#define PK_CONFIG_MAX_SHM_NAME 255

//  The rules of one value (server_config_values.c).  The parsers return
//  0, -EINVAL or -ERANGE; the checks say whether the text is valid.
int pk_config_parse_u64(const char *s, uint64_t *out);
int pk_config_parse_seconds(const char *s, double *out);
bool pk_config_text_ok(const char *s);
bool pk_config_endpoint_ok(const char *v);
bool pk_config_shm_char_ok(char c);
bool pk_config_pool_name_ok(const char *v);
#define PK_CONFIG_MAX_PROVIDERS 8
bool pk_config_provider_ok(const char *v);
bool pk_config_host_ok(const char *host, bool bracketed, bool star);
bool pk_config_metrics_ok(const char *v);

//  An IPv4 or IPv6 address, optionally /PREFIX within the family's bits,
//  as 16 bytes and a prefix over them (IPv4 in its IPv4-mapped form):
//  0, -EINVAL (not an address) or -ERANGE (the prefix is too long).
int pk_config_cidr_parse(const char *text, uint8_t addr[16], unsigned *prefix);

//  The defaults that follow the peer id (server_config.c): --local and
//  --pool-name.  0 or -ENOMEM.
int pk_server_config_derive_local(pk_server_config_t *self);
int pk_server_config_derive_pool_name(pk_server_config_t *self);

#endif
