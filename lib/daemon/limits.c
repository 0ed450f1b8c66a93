/*  limits.c: the process's limits sized for --max-sessions (limits.h).  */
#include "daemon/limits.h"
#include "base/err.h"
#include "base/fds.h"

#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>

int
pk_limits_fit(const pk_server_config_t *config, char *err)
{
    uint64_t sessions = config->max_sessions;
    rlim_t need = (rlim_t) (PK_FDS_BASE + sessions * PK_FDS_PER_SESSION);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return pk_err(err, -errno, "getrlimit: %s", strerror(errno));
    //  a hard limit below one session's need leaves no --max-sessions to
    //  suggest (the division below would wrap)
    rlim_t one = PK_FDS_BASE + PK_FDS_PER_SESSION;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need && rl.rlim_max < one)
        return pk_err(err, -EMFILE,
                      "--max-sessions %llu needs about %llu file descriptors; the hard "
                      "limit is %llu (ulimit -Hn; raise it: even one session needs %llu)",
                      (unsigned long long) sessions, (unsigned long long) need,
                      (unsigned long long) rl.rlim_max, (unsigned long long) one);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        return pk_err(err, -EMFILE,
                      "--max-sessions %llu needs about %llu file descriptors; the hard "
                      "limit is %llu (ulimit -Hn; raise it, or lower --max-sessions to %llu)",
                      (unsigned long long) sessions, (unsigned long long) need,
                      (unsigned long long) rl.rlim_max,
                      (unsigned long long) ((rl.rlim_max - PK_FDS_BASE) / PK_FDS_PER_SESSION));
    //  Up to the hard limit, not to need: what sessions hold is bounded by
    //  --max-sessions, but connections that never say HELLO are not, and
    //  at the soft limit ZeroMQ's I/O thread spins on a failing accept (a
    //  core, for as long as a peer holds 20 idle connections past it).  At
    //  the hard limit (524,288 under systemd) one address runs out of
    //  ports first.  A descriptor costs nothing until it is open; soft
    //  limits stay at 1,024 for programs that pass descriptors to
    //  select(), and descriptor numbers past 1,024 come with about 60
    //  sessions whatever the limit, so raising it adds no such risk.
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && was < need) {
            rl.rlim_cur = need;         //  a hard limit past fs.nr_open
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                return pk_err(err, -errno, "setrlimit(RLIMIT_NOFILE, %llu): %s",
                              (unsigned long long) need, strerror(errno));
        }
    }
    //  czmq asserts when this comes after its first socket: the caller
    //  calls it first thing.  1,023 is libzmq's default.
    size_t sockets = 64 + (size_t) sessions * PK_ZMQ_SOCKETS_PER_SESSION;
    if (sockets > zsys_socket_limit())
        return pk_err(err, -EMFILE, "--max-sessions %llu needs %zu ZeroMQ sockets; libzmq "
                      "allows %zu", (unsigned long long) sessions, sockets, zsys_socket_limit());
    if (sockets > 1023)
        zsys_set_max_sockets(sockets);
    return 0;
}

static void *
s_nothing(void *arg)
{
    return arg;
}

int
pk_limits_room(int fds)
{
    if (!pk_fds_free(fds))
        return -EMFILE;
    pthread_t t;
    if (pthread_create(&t, NULL, s_nothing, NULL) != 0)
        return -EAGAIN;
    pthread_join(t, NULL);
    return 0;
}
