/*  wake.c: what waking a sleeping process costs on this machine, for the
    machine record of the suites whose figures it bounds (fetch, control,
    fabric, sessions).

    Two processes pass a byte back and forth over two pipes, each
    sleeping in read() until the other writes: a round trip is two wakes
    and four system calls, the least any hand-off between threads costs.
    Measured with both pinned to one core (a switch on the core) and to
    two (a wake across cores, where the other core may have to be woken
    from idle).  A ZeroMQ round trip between two processes crosses five
    or six such wakes (each side's application thread and I/O thread), so
    where a wake costs 15 µs no ZeroMQ request is answered in much less
    than 90 µs (doc/design.md, "Where the end-to-end time goes").

    What it costs: about a second of the run, two short-lived processes.
*/
#include "bench.h"
#include "base/clock.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdbool.h>
#include <unistd.h>

#define S_ROUNDS 10000

static void
s_pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void) sched_setaffinity(0, sizeof set, &set);      //  best effort: a figure still
}

//  One round trip's time in µs, averaged over S_ROUNDS: this process on
//  cpu_a, a child on cpu_b.
static int
s_round_trip(int cpu_a, int cpu_b, double *us)
{
    int ab[2], ba[2], rc = 0;
    if (pipe(ab) != 0)
        return -errno;
    if (pipe(ba) != 0) {
        rc = -errno;
        goto close_ab;
    }
    pid_t child = pkb_fork();
    if (child < 0) {
        rc = -errno;
        goto close_ba;
    }
    if (child == 0) {
        close(ab[1]);           //  so that the parent's close is our EOF
        close(ba[0]);
        s_pin(cpu_b);
        char c;
        while (read(ab[0], &c, 1) == 1 && write(ba[1], &c, 1) == 1)
            ;
        _exit(0);
    }
    cpu_set_t old;
    bool pinned = sched_getaffinity(0, sizeof old, &old) == 0;
    s_pin(cpu_a);
    char c = 0;
    double t0 = pk_clock_monotonic();
    for (int i = 0; rc == 0 && i < S_ROUNDS; i++)
        if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
            rc = -EIO;
    *us = (pk_clock_monotonic() - t0) / S_ROUNDS * 1e6;
    if (pinned)
        (void) sched_setaffinity(0, sizeof old, &old);
    close(ab[1]);               //  the child's read ends: it exits
    ab[1] = -1;
    if (pkb_reap(child, 10) != 0 && rc == 0)
        rc = -ECHILD;
close_ba:
    close(ba[0]);
    close(ba[1]);
close_ab:
    close(ab[0]);
    if (ab[1] >= 0)
        close(ab[1]);
    return rc;
}

int
pkb_wake_us(double *same_cpu, double *cross_cpu)
{
    //  The first two cores this process may run on (taskset may have
    //  narrowed them).
    int cpus[2] = { -1, -1 }, n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int i = 0; i < CPU_SETSIZE && n < 2; i++)
            if (CPU_ISSET(i, &set))
                cpus[n++] = i;
    *same_cpu = *cross_cpu = NAN;
    if (n == 0)
        return -ENODEV;
    double rt;
    int rc = s_round_trip(cpus[0], cpus[0], &rt);
    if (rc == 0)
        *same_cpu = rt / 2;
    if (rc == 0 && n == 2 && (rc = s_round_trip(cpus[0], cpus[1], &rt)) == 0)
        *cross_cpu = rt / 2;
    return rc;
}
