/*  consumer.h: a small consumer for the end-to-end tests of p2pkv-server.

    One DEALER socket (routing id "P" + epoch), one libfabric channel
    exposing a pool of its own, the handshake of roles/client_session (the
    one the client library runs), and frames in and out with this
    session's epochs.  Waiting for a frame keeps the channel progressing,
    as a real consumer must.  Unlike the client library it reads live
    frames raw, so tests can check every byte a server sends.
*/
#ifndef PK_TEST_CONSUMER_H_INCLUDED
#define PK_TEST_CONSUMER_H_INCLUDED

#include "wire/protocol.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _tc_t tc_t;

typedef struct {
    const char *endpoint;
    const char *peer_id;
    uint64_t num_blocks, block_len;
    const char *fingerprint, *hash_seed;
    uint64_t wire_major;
} tc_config_t;

tc_t *tc_new(const tc_config_t *config);

/*  The session's socket uses CURVE with these keys (Z85), from the next
    tc_connect on.  */
void tc_set_curve(tc_t *self, const char *public_key, const char *secret_key,
                  const char *server_key);

/*  The session's routing id ("P" + epoch) into rid (at least 17 bytes);
    its length.  */
size_t tc_routing_id(tc_t *self, uint8_t *rid);
void tc_destroy(tc_t **self_p);

/*  Starts the session: connect (every 0.5 s) until connect_ack or
    disconnect arrives within timeout; returns that message (caller
    destroys) or NULL.  */
pk_msg_t *tc_connect(tc_t *self, double timeout);

/*  tc_new, then tc_connect within 10 s; the test fails unless the server
    answered connect_ack.  */
tc_t *tc_connected(const tc_config_t *config);

/*  The next message other than a pong (unless a pong is what is asked
    for) within timeout; the test fails unless it is of type, saying what
    came instead (a disconnect's reason too).  Caller destroys.  */
pk_msg_t *tc_expect(tc_t *self, pk_msg_type_t type, double timeout);

/*  Sends m with this session's epochs (unless m has epochs); destroys m.  */
int tc_send(tc_t *self, pk_msg_t *m);
int tc_send_raw(tc_t *self, const void *data, size_t len);

/*  The next message within timeout (progressing the channel), or NULL.  */
pk_msg_t *tc_recv(tc_t *self, double timeout);

/*  Keeps the channel progressing for this long (landing immediates).  */
void tc_progress(tc_t *self, double seconds);

uint8_t *tc_pool(tc_t *self);
uint64_t tc_landed(tc_t *self, uint64_t round);

/*  Frames to build: lookup, fetch (keys with their remote indexes), abort.  */
pk_msg_t *tc_lookup(const char *kv, uint64_t round, const pk_key_t *keys, size_t n);
pk_msg_t *tc_fetch(const char *kv, uint64_t round, const pk_key_t *keys, const uint32_t *idx,
                   size_t n);

#endif
