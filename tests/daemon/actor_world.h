/*  actor_world.h: what the door's and the peer's unit tests stand on
    (tests/test_door.c, tests/test_peer.c): the objects a node would fill
    a pk_peer_env_t with, made alone, and a consumer with no client
    library.

    The world is an anonymous store of TA_BLOCKS blocks in two
    namespaces (the shared one and a tenant's), the metrics, the
    unsent-bytes counter, a poller, an in-memory fabric over the store's
    pool (lib/sim: what a peer's connect is for), the peers' ROUTER, and
    the PULL every peer's actor says its words to; env points at them
    all, its job callback records what it was told.  No node, no
    p2pkv-server.

    The consumer is a pool of its own with an in-memory channel (its
    blob is the connect's agent_metadata), its epoch and, once acked, the
    server's; the test sends its frames however the class under test
    takes them.
*/
#ifndef PK_TEST_ACTOR_WORLD_H_INCLUDED
#define PK_TEST_ACTOR_WORLD_H_INCLUDED

#include "daemon/peer.h"
#include "wire/protocol.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TA_BLOCK 4096
#define TA_BLOCKS 16
#define TA_MAX_JOBS 16

typedef struct {
    pk_server_config_t config;
    pk_server_identity_t id;
    pk_server_session_config_t session_config;
    pk_store_t *store;
    pk_metrics_t *metrics;
    pk_unsent_t *unsent;
    pk_poller_t *poller;
    pk_fabric_t *fabric;            //  in-memory, over the store's pool
    zsock_t *router;                //  env's: bound at router_endpoint
    char router_endpoint[256];
    zsock_t *actors;                //  PULL: the peers' words
    char actors_endpoint[64];
    pk_peer_env_t env;
    //  what env's job callback was told
    uint64_t jobs[TA_MAX_JOBS];
    bool job_ok[TA_MAX_JOBS];
    size_t njobs;
} ta_world_t;

/*  A world whose ROUTER binds router_bind ("tcp://127.0.0.1:*",
    "inproc://..."): sessions silent for minutes are not retired, so only
    what a test does ends them.  Change w->config before the class under
    test reads it; pk_server_config_session was taken already.  */
void ta_world_new(ta_world_t *w, const char *router_bind);
void ta_world_destroy(ta_world_t *w);

/*  A block of fill stored under key (its bytes: key, NUL-terminated) in
    namespace ns: 0, the shared one, or 1, a tenant's.  */
void ta_world_put(ta_world_t *w, unsigned ns, const char *key, uint8_t fill);

/*  A counter of w's metrics by its name (p2pkv_..._total), labelled
    (NULL: its total).  0 when it has no such sample yet.  */
uint64_t ta_metric(ta_world_t *w, const char *name, const char *label);

typedef struct {
    char peer_id[32];
    uint8_t *pool;
    pk_fabric_t *fabric;
    pk_channel_t *channel;
    uint8_t *blob;
    size_t blob_len;
    uint8_t epoch[PK_EPOCH_LEN];
    uint8_t server_epoch[PK_EPOCH_LEN];
} ta_consumer_t;

void ta_consumer_new(ta_consumer_t *c, const char *peer_id);
void ta_consumer_destroy(ta_consumer_t *c);

/*  c's connect (with its blob, its epoch, the world's sizes); the
    caller's to destroy or hand on.  */
pk_msg_t *ta_connect(const ta_consumer_t *c);
/*  The connect_ack m (the test fails unless it is one) gives the
    server's epoch.  */
void ta_acked(ta_consumer_t *c, const pk_msg_t *m);
/*  A lookup of one key (its bytes: key) in request kv, round 1, with
    c's epochs.  */
pk_msg_t *ta_lookup(const ta_consumer_t *c, const char *kv, const char *key);

/*  m encoded (malloc'd, *len bytes); m destroyed.  */
char *ta_encode(pk_msg_t *m, size_t *len);
/*  A frame decoded; the test fails when it does not decode.  */
pk_msg_t *ta_decode(const void *data, size_t len);

#endif
