/*  thread.h: what every thread p2pkv starts does first.
*/
#ifndef PK_THREAD_H_INCLUDED
#define PK_THREAD_H_INCLUDED

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

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

/*  And what a thread that served a session does last.  glibc keeps the
    stacks of ended threads for the next ones (up to 40 MiB), each page
    they touched still resident: 256 sessions that ended kept 5.6 MB, most
    of what stayed after them.  The pages well below the caller's frame
    are dead once it is about to return (16 KiB are left for what still
    runs: the thread's own exit); giving them back costs one madvise.  */
static inline void
pk_thread_release_stack(void)
{
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return;
    void *low;
    size_t size;
    if (pthread_attr_getstack(&attr, &low, &size) == 0) {
        char here;
        uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
        uintptr_t at = (uintptr_t) &here, base = (uintptr_t) low;
        uintptr_t top = (at - 16384) & ~(page - 1);
        uintptr_t bottom = (base + page - 1) & ~(page - 1);
        //  only when our frame is on this stack (AddressSanitizer may
        //  keep locals in a fake stack elsewhere)
        if (at > base && at < base + size && top > bottom)
            madvise((void *) bottom, top - bottom, MADV_DONTNEED);
    }
    pthread_attr_destroy(&attr);
}

#endif
