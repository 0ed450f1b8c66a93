/*  node_internal.h: what the daemon's files share (private to lib/daemon).

    The node (node.c) owns the sockets and the poll loop; the door
    (door.c, door.h) routes peers' frames to their actors; handshake.c,
    peer.c and puller.c are the actors; engine_api.c answers the engine on
    the local socket; zap.c is the --allow filter.  Everything here runs on
    the main thread unless a comment says otherwise.
*/
#ifndef PK_NODE_INTERNAL_H_INCLUDED
#define PK_NODE_INTERNAL_H_INCLUDED

#include "daemon/node.h"
#include "base/keymap.h"
#include "daemon/metrics.h"
#include "daemon/poller.h"
#include "daemon/directory.h"
#include "store/store.h"
#include "daemon/unsent.h"
#include "base/transport.h"
#include "roles/server_session.h"

#include <czmq.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/*  How long after a peer was reaped the sweeps go on trimming the heap
    (node.c, s_trim_heap, says why).  */
#define PK_TRIM_SETTLE 10.0

typedef struct pk_peer pk_peer_t;           //  door.h

//  A prefill store or finish for a consumer, held until its session runs.
typedef struct pk_held {
    char *consumer;
    char *kv;
    bool finish;
    uint64_t job;
    bool has_round;
    uint64_t round;
    unsigned ns;                //  the namespace its blocks were pinned in
    pk_key_t *keys;             //  bytes follow the array
    uint32_t *blocks;
    size_t n;
    double expires;
    struct pk_held *next;
} pk_held_t;

//  A pull: keys fetched from a remote server into blocks reserved in our
//  pool, committed (READY) once their bytes have landed.
typedef struct {
    uint64_t id, owner;
    unsigned ns;                    //  the namespace the keys land in
    char *server;                   //  NULL: any holder (--directory)
    char server_key[41];            //  its CURVE key (--curve-servers), "" unknown
    pk_key_t *keys;                 //  bytes follow the array
    uint32_t *blocks;
    bool *landed;
    size_t n;
    uint8_t rid[256];               //  the engine that asked
    size_t rlen;
    char reason[256];
} pk_pull_t;

//  Owners of pull reservations: a range no engine connection hashes into.
#define PK_PULL_OWNER (UINT64_C(1) << 63)

//  Refusals remembered for the rate-limited log (curve.c).
#define PK_REFUSAL_SLOTS 64

typedef struct {
    char who[128];                  //  the key (Z85) or address refused
    double since;                   //  its last line
    uint64_t count;                 //  refusals since (0: a free slot)
} pk_refusal_t;

//  Stores held for consumers not connected yet.
#define PK_MAX_HELD 1024

//  Fabrics at most, one per provider offered (--provider shm,tcp).
#define PK_MAX_FABRICS 8

//  This start's instance identity (issue 34): random bytes, new at every
//  start, that describe gives the engine and the engine names in every
//  later request, so that a handle which outlived a restart is refused.
#define PK_INSTANCE_BYTES 16

//  One provider's fabric over the pool (node.c opens them, best first).
typedef struct {
    pk_fabric_t *fabric;            //  carries its transport (base/transport.h)
    const char *provider;           //  the fabric's own name ("shm", "tcp;ofi_rxm")
    pk_fabric_stats_t pushed;       //  its counts already in the metrics
} pk_node_fabric_t;

struct _pk_node_t {
    const pk_server_config_t *config;
    pk_server_identity_t id;
    pk_server_session_config_t session_config;
    pk_store_t *store;
    pk_node_fabric_t fabrics[PK_MAX_FABRICS];
    size_t nfabrics;                //  at least one once the node is built
    const char *providers[PK_MAX_FABRICS];  //  their names, for the description
    char host_id[128];              //  this server's same-host identity (base/host_id.h)
    atomic_uint_fast64_t blobs_unmatched;   //  connects naming a provider not offered
    zsock_t *router;
    zsock_t *local;
    //  the --local socket's file as bound (dev 0: none), removed at
    //  destroy only while it is still that file
    dev_t local_dev;
    ino_t local_ino;
    zsock_t *zap;                   //  our ZAP handler: --allow, --curve-allow
    zcert_t *curve_cert;            //  --curve-secret: the ROUTER is a CURVE server
    zhashx_t *curve_allowed;        //  --curve-allow: Z85 public key -> file name
    zhashx_t *curve_revoked;        //  keys the last SIGHUP removed -> file name
    zhashx_t *curve_servers;        //  --curve-servers: endpoint -> Z85 public key
    zsock_t *curve_monitor;         //  PAIR: the ROUTER's failed handshakes
    pk_refusal_t refusals[PK_REFUSAL_SLOTS];
    double refusal_window;          //  start of the log's current interval
    unsigned refusal_lines;         //  refusal lines in it
    uint64_t refusal_unlogged;      //  refusals past the interval's lines
    volatile sig_atomic_t *reload;  //  SIGHUP seen (pk_node_watch_reload)
    pk_poller_t *poller;            //  the loop's wait (poller.h)
    char endpoint[256];
    char instance[2 * PK_INSTANCE_BYTES + 1];   //  hex, PK_INSTANCE_BYTES random
    char stale_logged[2 * PK_INSTANCE_BYTES + 1];   //  the last stale instance logged
    char ready[2048];
    pk_keymap_t by_rid;             //  routing id -> peer
    pk_keymap_t by_id;              //  a peer's id -> peer
    uint64_t next_peer_id;
    pk_keymap_t by_consumer;        //  consumer peer_id -> peer
    pk_keymap_t engine_jobs;        //  prefill job id -> the engine that stored it
    pk_held_t *held;
    size_t nheld;
    size_t npeers;
    pk_peer_t *gone;                //  peers whose actor said GONE: reaped next
    double trim_until;              //  sweeps trim the heap until then (monotonic s):
                                    //  PK_TRIM_SETTLE after the last peer reaped
    pk_metrics_t *metrics;
    pk_unsent_t *unsent;            //  bytes of every session's answers libzmq holds
                                    //  (unsent.h), sessions gone included
    uint64_t unmatched_pushed;      //  blobs_unmatched already in the metrics
    uint64_t evictions_pushed;      //  the store's evictions already in PK_M_POOL_EVICTIONS
    pk_store_ns_stats_t *ns_pushed; //  each namespace's lookups already in the metrics
    pk_metrics_http_t *http;
    zactor_t *handshake;
    zsock_t *actors;                //  PULL: what every peer's actor says
    char actors_endpoint[64];
    zactor_t *puller;
    uint64_t next_pull;
    bool quitting;
    pk_keymap_t pending;            //  routing ids with a frame at the handshake actor
    uint64_t handshakes_sent;
    atomic_uint_fast64_t handshakes_done;
    uint64_t handshake_bytes_sent;  //  the same in bytes (--max-queued-bytes)
    atomic_uint_fast64_t handshake_bytes_done;
    char *fail_session;             //  test only: $P2PKV_TEST_FAIL_SESSION (peer.c)
    char *hold_session;             //  test only: $P2PKV_TEST_HOLD_SESSION (peer.c)
    pk_directory_t *directory;      //  --directory: the cluster directory's actor, or NULL
    pk_directory_stats_t directory_pushed; //  its counts already in the metrics
};

//  node.c
/*  The fabric a connect's blob is for (its provider's): its index, or
    -EPROTO with reason naming the providers offered.  Any thread.  */
int pk_node_fabric_for(pk_node_t *self, const uint8_t *blob, size_t len, char *reason,
                       size_t cap);
void pk_node_log(const pk_node_t *self, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline pk_key_t
pk_node_key(const void *bytes, size_t len)
{
    return pk_key_make(bytes, len);
}

//  A pointer sent with zsock_send's "p", or NULL when the frame is not one.
static inline void *
pk_node_pop_ptr(zmsg_t *msg)
{
    zframe_t *f = zmsg_pop(msg);
    void *p = NULL;
    if (f && zframe_size(f) == sizeof p)
        memcpy(&p, zframe_data(f), sizeof p);
    zframe_destroy(&f);
    return p;
}

//  handshake.c: the handshake actor (its words are at the top of the file)
zactor_t *pk_handshake_new(pk_node_t *node);
void pk_handshake_destroy(zactor_t **self_p);

//  peer.c: the peer actor, started by the door with zactor_new
void pk_peer_actor(zsock_t *pipe, void *args);

//  puller.c: the puller actor, started at the first pull
int pk_puller_send(pk_node_t *node, pk_pull_t *pull);
void pk_puller_from(pk_node_t *node, zmsg_t *msg);
void pk_puller_destroy(pk_node_t *node);
void pk_pull_free(pk_pull_t *pull);

//  engine_api.c: the engine's JSON API and the stores held for consumers
void pk_engine_from_local(pk_node_t *node, zmsg_t *msg);
/*  The answer to one request body (a JSON object with "cmd") from the
    engine connection rid: what pk_engine_from_local sends back.  Apart
    for tests/fuzz/fuzz_engine.c, which has no local socket.  */
json_t *pk_engine_answer(pk_node_t *node, const void *body, size_t len, const void *rid,
                         size_t rlen);
void pk_engine_send(pk_node_t *node, const void *rid, size_t rlen, json_t *answer);
void pk_engine_event(pk_node_t *node, uint64_t job, bool success);
void pk_engine_deliver_held(pk_node_t *node, pk_peer_t *peer);
void pk_engine_expire_held(pk_node_t *node);
void pk_engine_destroy(pk_node_t *node);
void pk_held_free(pk_held_t *held);

//  zap.c: one ZAP request (RFC 27) answered from --allow and --curve-allow
void pk_zap_handle(pk_node_t *node, zmsg_t *msg);

//  curve.c: the keys (--curve-secret, --curve-allow, --curve-servers)
int pk_curve_open(pk_node_t *node, char *err);      //  loads them: 0 or -errno, err
int pk_curve_apply(pk_node_t *node, char *err);     //  the ROUTER: a CURVE server
void pk_curve_close(pk_node_t *node);
bool pk_curve_admits(const pk_node_t *node, const char *key);
const char *pk_curve_refusal(const pk_node_t *node, const char *key);  //  its reason
const char *pk_curve_server_key(const pk_node_t *node, const char *endpoint);
//  Counts a refusal by reason (a metric label) and logs it, rate-limited.
void pk_curve_refused(pk_node_t *node, const char *who, const char *reason);
void pk_curve_monitor_read(pk_node_t *node, zmsg_t *msg);
void pk_curve_reload(pk_node_t *node);              //  SIGHUP

#endif
