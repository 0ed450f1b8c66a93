/*  sockets.c: the ZeroMQ sockets of the process's client sessions, counted
    before czmq is asked for one.

    czmq aborts the process when a socket cannot be made (an assertion in
    zsock_new), and libzmq allows ZMQ_MAX_SOCKETS per context: 1,024 in
    czmq's unless ZSYS_MAX_SOCKETS (read at the process's first socket)
    says more.  A session holds one DEALER, and two sockets more while it
    connects (the handshake's monitor, watch.c).  So the library counts the
    sockets it holds, process-wide, and refuses a new DEALER that would
    bring them within PK_CLIENT_SOCKETS_SPARE of the limit, with an error
    naming the setting: a connect fails, the process lives.  The spare is
    left to the application's and czmq's own sockets, which we cannot
    count; an application using more than that can still meet czmq's abort.
    The same abort waits for a process out of file descriptors (a socket's
    mailbox is one): a new DEALER first asks that the descriptors it needs
    are free (base/fds.h), unless its caller asked already (a session asks
    for all of its own before its channel), and fails with an error naming
    the limit if not.
*/
#include "client/client_internal.h"
#include "base/fds.h"

#include <errno.h>
#include <stdatomic.h>

#define PK_CLIENT_SOCKETS_SPARE 32

int
pk_client_fds_check(int want, char *err)
{
    if (pk_fds_free(want))
        return 0;
    return pk_err(err, -EMFILE, "this process has fewer than %d file descriptors free, what "
                  "a session or socket needs (its soft limit, ulimit -n, is RLIMIT_NOFILE)",
                  want);
}

static atomic_size_t s_held;

static size_t
s_limit(void)
{
    int max = zmq_ctx_get(zsys_init(), ZMQ_MAX_SOCKETS);
    return max > 0 ? (size_t) max : 1023;
}

int
pk_client_dealer_new(zsock_t **dealer_p, int fds, char *err)
{
    size_t limit = s_limit(), held = atomic_load(&s_held);
    do {
        if (held + 3 + PK_CLIENT_SOCKETS_SPARE > limit)
            return pk_err(err, -EMFILE, "this process's client sessions hold %zu ZeroMQ "
                          "sockets, and its ZeroMQ context allows %zu (ZSYS_MAX_SOCKETS in the "
                          "environment raises it, read at the process's first socket)",
                          held, limit);
    } while (!atomic_compare_exchange_weak(&s_held, &held, held + 1));
    int rc = fds ? pk_client_fds_check(fds, err) : 0;
    if (rc) {
        atomic_fetch_sub(&s_held, 1);
        return rc;
    }
    *dealer_p = zsock_new(ZMQ_DEALER);
    if (*dealer_p)
        return 0;
    atomic_fetch_sub(&s_held, 1);
    return pk_err(err, -ENOMEM, "cannot create a socket");
}

void
pk_client_dealer_destroy(zsock_t **dealer_p)
{
    if (!*dealer_p)
        return;
    zsock_destroy(dealer_p);
    atomic_fetch_sub(&s_held, 1);
}

//  Unsigned arithmetic wraps: adding a negative n takes it off.
void
pk_client_sockets_count(long n)
{
    atomic_fetch_add(&s_held, (size_t) n);
}
