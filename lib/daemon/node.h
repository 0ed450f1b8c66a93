/*  node.h: the p2pkv-server daemon's machinery.

    The main thread owns the ROUTER socket peers talk to and the local
    socket the engine talks to.  Frames from a peer with a session go,
    unparsed, to that peer's actor (a czmq zactor owning the session, its
    server role and its data-plane channel); `describe` and `connect` from
    routing ids without a session go to the handshake actor, and the main
    thread starts the actor of each peer it accepts.  The engine's commands
    (describe, reserve, commit, put, drop, pull, store, finish, stats) are
    JSON objects on the local socket, answered with JSON.  The classes
    behind this face, and their arrows, are in doc/architecture.md (The
    daemon's classes).
*/
#ifndef PK_NODE_H_INCLUDED
#define PK_NODE_H_INCLUDED

#include "daemon/server_config.h"

#include <signal.h>

typedef struct _pk_node_t pk_node_t;

/*  Creates the pool, opens the fabric and binds both sockets.  NULL with
    *rc_p and err (256 bytes) on failure.  */
pk_node_t *pk_node_new(const pk_server_config_t *config, int *rc_p, char *err);

/*  The line printed when the node serves.  */
const char *pk_node_ready_line(const pk_node_t *self);

/*  The endpoint peers reach (the bound one, with a resolved port).  */
const char *pk_node_endpoint(const pk_node_t *self);

/*  Serves until *stop becomes nonzero, then shuts down within the
    configured bound: sessions say `shutdown`, writes drain.  Returns 0.  */
int pk_node_run(pk_node_t *self, volatile sig_atomic_t *stop);

/*  *reload becoming nonzero (a SIGHUP) makes the loop reload
    --curve-allow and --curve-servers, end the sessions of revoked keys
    and set it back to 0.  */
void pk_node_watch_reload(pk_node_t *self, volatile sig_atomic_t *reload);

/*  Frees everything; the shared-memory pool is unlinked.  */
void pk_node_destroy(pk_node_t **self_p);

#endif
