/*  puller.h: the daemon acting as a consumer for its engine's pulls
    (private to lib/daemon).

    The engine API (engine_api.c) makes a pk_pull_t for each pull: keys to
    fetch from a remote server into blocks it reserved in our pool.  The
    node hands it to the puller, whose actor fetches the keys with a
    client of p2pkv.h and hands the pull back, landed[] filled in; the
    node gives it to the engine API, which commits what landed.
*/
#ifndef PK_PULLER_H_INCLUDED
#define PK_PULLER_H_INCLUDED

#include "base/key.h"
#include "daemon/metrics.h"
#include "daemon/poller.h"
#include "daemon/server_config.h"
#include "store/store.h"

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

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
    //  per key, filled by the puller (issue 36: a pull reports where each
    //  key came from): a landed key's source, one of sources[] (its
    //  holder's endpoint; NULL when unknown); a key not landed, why (a
    //  static name: a miss reason's, "corrupt" or "failed")
    const char **from, **why;
    char **sources;                 //  the holders the pull got keys from, owned
    size_t nsources;
    size_t n;
    uint8_t rid[256];               //  the engine that asked
    size_t rlen;
    char reason[256];
} pk_pull_t;

//  Owners of pull reservations: a range no engine connection hashes into.
#define PK_PULL_OWNER (UINT64_C(1) << 63)

void pk_pull_destroy(pk_pull_t **p_p);

typedef struct _pk_puller_t pk_puller_t;

/*  A puller over store's pool; its actor starts at the first pull (and
    joins poller then).  With CURVE, curve_public and curve_secret are the
    daemon's keypair (Z85), its identity as a client; NULL without.  The
    strings and objects are borrowed for the puller's life.  NULL: out of
    memory.  */
pk_puller_t *pk_puller_new(const pk_server_config_t *config, pk_store_t *store,
                           pk_metrics_t *metrics, pk_poller_t *poller,
                           const char *curve_public, const char *curve_secret);

/*  Stops the actor (a pull in flight is waited for) and frees it.  */
void pk_puller_destroy(pk_puller_t **self_p);

/*  Hands p to the actor without waiting, starting it at the first pull:
    0, or a negative errno (-EAGAIN: too many queued) with p still the
    caller's.  */
int pk_puller_send(pk_puller_t *self, pk_pull_t *p);

/*  The actor, for the node's poller: NULL before the first pull.  */
zactor_t *pk_puller_actor(const pk_puller_t *self);

/*  What the actor said (msg taken): the pull it ended, now the caller's,
    or NULL.  */
pk_pull_t *pk_puller_recv(pk_puller_t *self, zmsg_t *msg);

#endif
