/*  crowd.c: N worker processes that move bytes at once, timed together.

    Each worker opens what it writes with (a fabric pair, a TCP stream),
    warms it up (steps for a while, all of them at once, as fetch's
    consumers are warm when they are timed: 64 new loopback TCP streams
    took over a second to reach their pace here), says it is ready, and
    steps on; when all are, every one counts from the same instant to the
    same deadline.  The figure is all their bytes over the time from the
    start to the last one's end: what the machine moves with N streams at
    once, set beside fetch's N consumers in the same repetition.  A worker
    that fails to open stops them all before the start, no read waits
    longer than S_WAIT on a worker, and after a failure every worker is
    killed at once.
*/
#include "bench.h"
#include "base/clock.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

typedef struct {
    double start, deadline;     //  start < 0: a worker failed, stop
} s_go_t;

typedef struct {
    double bytes, end;
    int ok;
} s_done_t;

//  The longest a worker may take to open, or to report after the deadline.
#define S_WAIT 30.0
#define S_MAX_WORKERS 1024

static void __attribute__((noreturn))
s_worker(const pkb_crowd_ops_t *ops, void *arg, double warm, int ready, int go, int res)
{
    s_done_t d = { 0, 0, 0 };
    void *state = ops->open(arg);
    char ok = state != NULL;
    for (double t0 = pk_clock_monotonic(); ok && pk_clock_monotonic() - t0 < warm;)
        ok = ops->step(state) >= 0;
    s_go_t g = { -1, -1 };
    if (write(ready, &ok, 1) != 1 || !ok)
        goto close_state;
    //  Moving on while the others warm up and until the start: a stream
    //  left idle starts slow again (TCP restarts its window after an idle
    //  spell), and nothing sent before the start counts.
    struct pollfd pfd = { go, POLLIN, 0 };
    while (poll(&pfd, 1, 0) == 0)
        if (ops->step(state) < 0)
            goto close_state;
    if (read(go, &g, sizeof g) != sizeof g || g.start < 0)
        goto close_state;
    while (pk_clock_monotonic() < g.start)
        if (ops->step(state) < 0)
            goto close_state;
    d.ok = 1;
    d.end = g.start;
    do {
        int64_t moved = ops->step(state);
        if (moved < 0) {
            d.ok = 0;
            break;
        }
        d.bytes += (double) moved;
        d.end = pk_clock_monotonic();
    } while (d.end < g.deadline);
close_state:
    if (state)
        ops->close(state);
    _exit(write(res, &d, sizeof d) == sizeof d ? 0 : 1);
}

int
pkb_crowd_gbps(const pkb_crowd_ops_t *ops, void *arg, size_t workers, double warm, double secs,
               double *gbps)
{
    *gbps = -1;
    if (workers == 0 || workers > S_MAX_WORKERS)
        return -EINVAL;
    int ready[2], go[2], res[2], rc = 0;
    if (pipe(ready))
        return -errno;
    if (pipe(go)) {
        rc = -errno;
        goto close_ready;
    }
    if (pipe(res)) {
        rc = -errno;
        goto close_go;
    }
    pid_t pid[S_MAX_WORKERS];
    size_t started = 0;
    for (; started < workers; started++) {
        pid[started] = pkb_fork();
        if (pid[started] < 0) {
            rc = -errno;
            break;
        }
        if (pid[started] == 0) {
            close(ready[0]);
            close(go[1]);
            close(res[0]);
            s_worker(ops, arg, warm, ready[1], go[0], res[1]);
        }
    }
    //  all opened, or one failed (then every worker stops at once)
    size_t ok = 0;
    for (size_t i = 0; rc == 0 && i < started; i++) {
        char c = 0;
        rc = pkb_read_all(ready[0], &c, 1, S_WAIT);
        ok += rc == 0 && c == 1;
    }
    //  20 ms for the last worker to read its start before it comes
    double start = pk_clock_monotonic() + 0.02;
    s_go_t g = { rc == 0 && ok == workers ? start : -1, start + secs };
    for (size_t i = 0; i < started; i++)
        if (write(go[1], &g, sizeof g) != sizeof g && rc == 0)
            rc = -EIO;
    double bytes = 0, end = start;
    size_t good = 0;
    for (size_t i = 0; rc == 0 && i < started; i++) {
        s_done_t d;
        rc = pkb_read_all(res[0], &d, sizeof d, S_WAIT);
        if (rc == 0 && d.ok) {
            good++;
            bytes += d.bytes;
            end = d.end > end ? d.end : end;
        }
    }
    //  After a failure a worker may be deep in a step that does not end
    //  (a stream stuck on the kernel's timers): stopped at once, not after
    //  10 s each.  Its target child sees the pipe close and ends too.
    for (size_t i = 0; rc != 0 && i < started; i++)
        kill(pid[i], SIGKILL);
    for (size_t i = 0; i < started; i++)
        pkb_reap(pid[i], 10);
    if (rc == 0 && (good < workers || end <= start))
        rc = -EIO;
    if (rc == 0)
        *gbps = bytes / (end - start) / 1e9;
    close(res[0]);
    close(res[1]);
close_go:
    close(go[0]);
    close(go[1]);
close_ready:
    close(ready[0]);
    close(ready[1]);
    return rc;
}
