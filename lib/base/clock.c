/*  clock.c: the real clock behind the pk_clock_t seam.  */
#include "base/clock.h"

#include <time.h>

double
pk_clock_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static double
s_now(void *unused)
{
    return pk_clock_monotonic();
}

pk_clock_t
pk_clock_system(void)
{
    return (pk_clock_t) { NULL, s_now };
}
