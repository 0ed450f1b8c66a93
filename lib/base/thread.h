/*  thread.h: what every thread p2pkv starts does first.
*/
#ifndef PK_THREAD_H_INCLUDED
#define PK_THREAD_H_INCLUDED

#include <pthread.h>
#include <signal.h>

/*  Asynchronous signals (SIGTERM, SIGINT, ...) belong to the thread that
    installed handlers for them.  Delivered to an actor instead, a signal
    interrupts its blocking receive, which czmq reports like a closed pipe:
    the actor quits without its goodbye and whoever waits for that hangs
    (seen under valgrind, which delivers signals to any thread).  Faults
    stay deliverable: blocking them is undefined.  */
static inline void
pk_thread_block_signals(void)
{
    sigset_t set;
    sigfillset(&set);
    int faults[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS };
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
        sigdelset(&set, faults[i]);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

#endif
