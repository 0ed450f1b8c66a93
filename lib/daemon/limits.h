/*  limits.h: the process's limits sized for --max-sessions.

    A session holds PK_FDS_PER_SESSION file descriptors at most, counted
    in /proc/PID/fd of a server holding 128 sessions that each fetched a
    block (test_client: test_max_sessions_fit_the_descriptor_rule): over
    tcp 15, ZeroMQ's 4 (the peer's connection, the eventfds of its
    actor's pipe pair and of its out socket) and libfabric's 11 (the
    endpoint's listening socket and, once a block moved, its connection;
    an epoll set and a signalling socket pair for each of the completion
    queue's wait, the endpoint's event queue and its progress), over mmap
    7, over shm 4; one spare.  It once said 8, from a count of ZeroMQ's
    and an idle endpoint's, and a server under the common soft limit of
    1,024 raised it for 128 sessions to 1,088, then refused the 71st
    session's endpoint or aborted in czmq's zsock_new.  The defaults
    (1,024 descriptors, 1,023 ZeroMQ sockets) would stop a server near 65
    sessions, so the daemon sizes both before its first socket (the soft
    descriptor limit up to the hard one: limits.c says why) and refuses
    at start a --max-sessions the machine's hard limit cannot hold.
*/
#ifndef PK_LIMITS_H_INCLUDED
#define PK_LIMITS_H_INCLUDED

#include "daemon/server_config.h"

#define PK_FDS_PER_SESSION 16
#define PK_ZMQ_SOCKETS_PER_SESSION 3
#define PK_FDS_BASE 64              //  the node's own sockets, pool, logs, metrics

/*  Raises the soft descriptor limit to the hard one (at least as far as
    max_sessions needs), and sets ZeroMQ's socket limit to match; before
    any ZeroMQ socket exists (it has no effect after).  0, or -EMFILE
    with err naming the setting and the limits when they cannot hold it.  */
int pk_limits_fit(const pk_server_config_t *config, char *err);

/*  Room for an actor started while serving (a session's, the puller): 0,
    -EMFILE when fewer than fds descriptors are free (base/fds.h), -EAGAIN
    when no thread can start.  czmq aborts the process when a socket
    cannot be made, and its zactor_new does not look at what
    pthread_create returned: it waits on the pipe for a thread that never
    ran, so under a limit of tasks (a container's pids.max, ulimit -u)
    the node's loop hung for good, answering nothing, SIGTERM included.
    The thread is asked for by starting and joining one that does nothing
    (tens of microseconds; its stack stays in glibc's cache for the
    actor's).  The answer can be stale if other threads take descriptors
    or start threads meanwhile; the server's actors are started by the
    node's loop alone.  */
int pk_limits_room(int fds);

#endif
