/*  limits.h: the process's limits sized for --max-sessions.

    A session holds about PK_FDS_PER_SESSION file descriptors (its actor's
    pipe and out sockets' mailboxes, its data-plane connection and the
    provider's poll set) and PK_ZMQ_SOCKETS_PER_SESSION ZeroMQ sockets.
    The defaults (1,024 descriptors, 1,023 ZeroMQ sockets) would stop a
    server near 150 sessions with errors deep in libzmq (an assertion, not
    a refusal), so the daemon sizes both before its first socket and
    refuses at start a --max-sessions the machine's hard limit cannot hold.
*/
#ifndef PK_LIMITS_H_INCLUDED
#define PK_LIMITS_H_INCLUDED

#include "daemon/server_config.h"

#define PK_FDS_PER_SESSION 8
#define PK_ZMQ_SOCKETS_PER_SESSION 3
#define PK_FDS_BASE 64              //  the node's own sockets, pool, logs, metrics

/*  Raises the soft descriptor limit toward the hard one as far as
    max_sessions needs, and sets ZeroMQ's socket limit to match; before
    any ZeroMQ socket exists (it has no effect after).  0, or -EMFILE
    with err naming the setting and the limits when they cannot hold it.  */
int pk_limits_fit(const pk_server_config_t *config, char *err);

#endif
