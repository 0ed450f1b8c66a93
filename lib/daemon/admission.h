/*  admission.h: who may talk to the server (private to lib/daemon).

    --allow (address ranges), --curve-secret (the peers' ROUTER as a
    CURVE server), --curve-allow (the client keys admitted) and
    --curve-servers (the keys of the servers the puller reaches): loaded
    at start, reloaded at SIGHUP; the ZAP requests libzmq asks about each
    new connection, answered; and every refusal counted by reason
    (p2pkv_connections_refused_total) and logged, rate-limited.

    It owns no socket of the node's: the node hands it the ZAP requests it
    reads and sends back the answers it gets, and after a reload tells the
    door to end the sessions whose key is no longer admitted
    (pk_door_revoke asks pk_admission_admits).  It owns the monitor of the
    ROUTER's failed handshakes, which the node polls.  The main thread's.
*/
#ifndef PK_ADMISSION_H_INCLUDED
#define PK_ADMISSION_H_INCLUDED

#include "daemon/metrics.h"
#include "daemon/server_config.h"

#include <czmq.h>
#include <stdbool.h>

typedef struct _pk_admission_t pk_admission_t;

/*  Loads the keys (a bad one is refused here, before a pool exists):
    NULL with *rc_p and err (PK_ERRLEN) on failure.  Refusals are counted
    in metrics.  */
pk_admission_t *pk_admission_new(const pk_server_config_t *config, pk_metrics_t *metrics,
                                 int *rc_p, char *err);

/*  Stops the monitor (before the ROUTER it watches is closed) and frees
    the keys.  */
void pk_admission_destroy(pk_admission_t **self_p);

/*  Whether the ZAP handler is needed: --allow, or CURVE on.  */
bool pk_admission_zap_needed(const pk_admission_t *self);

/*  With --curve-secret: router (not bound yet) becomes a CURVE server, and
    a monitor reports the handshakes that fail before ZAP is asked.  0, or
    a negative errno with err.  Without: nothing, 0.  */
int pk_admission_apply(pk_admission_t *self, zsock_t *router, char *err);

/*  The monitor's socket (NULL without CURVE) and one event it read.  */
zsock_t *pk_admission_monitor(const pk_admission_t *self);
void pk_admission_monitor_read(pk_admission_t *self, zmsg_t *msg);

/*  The answer to one ZAP request (RFC 27), req taken.  */
zmsg_t *pk_admission_zap(pk_admission_t *self, zmsg_t *req);

/*  Whether CURVE is on; then the server's keypair in Z85 (the puller's
    client identity), else NULL.  */
bool pk_admission_curve(const pk_admission_t *self);
const char *pk_admission_public_key(const pk_admission_t *self);
const char *pk_admission_secret_key(const pk_admission_t *self);

/*  Whether the client key (Z85) is admitted; why not, as a metric label
    ("revoked" or "unknown_key").  */
bool pk_admission_admits(const pk_admission_t *self, const char *key);
const char *pk_admission_refusal(const pk_admission_t *self, const char *key);

/*  --curve-servers: the key of the server at endpoint, or NULL.  */
const char *pk_admission_server_key(const pk_admission_t *self, const char *endpoint);

/*  Counts a refusal by reason (a label of a fixed set) and logs it,
    rate-limited: at most one line per who per 10 s, 16 a window.  */
void pk_admission_refused(pk_admission_t *self, const char *who, const char *reason);

/*  What a SIGHUP's reload did (pk_admission_reload).  */
typedef struct {
    bool curve;                 //  --curve-allow was reloaded
    size_t allowed, added, revoked, skipped;
} pk_admission_reload_t;

/*  SIGHUP: --curve-servers and --curve-allow again.  A directory that does
    not load keeps the keys as they were (logged); -EIO then, else 0 with
    *what filled.  The sessions of revoked keys are the caller's to end.  */
int pk_admission_reload(pk_admission_t *self, pk_admission_reload_t *what);

#endif
