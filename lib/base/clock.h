/*  clock.h: time as the state machines see it.

    Roles and the store never read the wall clock: they are given a
    pk_clock_t (virtual in tests and p2pkv-replay).  pk_clock_system() is
    the real one, monotonic seconds.
*/
#ifndef PK_CLOCK_H_INCLUDED
#define PK_CLOCK_H_INCLUDED

typedef struct {
    void *self;
    double (*now)(void *self);              //  monotonic seconds
} pk_clock_t;

/*  Monotonic seconds (CLOCK_MONOTONIC).  */
double pk_clock_monotonic(void);

/*  A pk_clock_t over pk_clock_monotonic.  */
pk_clock_t pk_clock_system(void);

#endif
