/*  czmq_setup.c: the library's one set-up of czmq, under a once.

    czmq's first socket of a process installs czmq's SIGINT/SIGTERM
    handler, which only sets a flag: an engine embedding us (Python's
    Ctrl-C, a server's own shutdown) would never see those signals again.
    A library does not take the process's signals, so czmq is told not to
    (its own switch, ZSYS_SIGHANDLER, which an operator's setting
    overrides); an application that set czmq up itself before keeps what
    it chose.

    czmq also sets itself up on a process's first socket, and that set-up
    is not safe to race: it marks itself done, then applies its thread
    settings, each asserting that no socket exists yet, so a second
    thread's first socket in between aborts the process ("zsys_set_
    thread_name_prefix() is not valid after creating sockets", seen once
    in p2pkv-bench fetch --threads --consumers 64, whose threads each make
    a client at once).  Done here, under the once, it is over before any
    of our threads makes a socket.  The once lives in this file, not in a
    header, so that the three entry points share it.
*/
#include "wire/czmq_setup.h"

#include <czmq.h>
#include <pthread.h>
#include <stdlib.h>

static pthread_once_t s_once = PTHREAD_ONCE_INIT;

static void
s_setup(void)
{
    setenv("ZSYS_SIGHANDLER", "false", 0);
    zsys_init();
}

void
pk_czmq_setup(void)
{
    pthread_once(&s_once, s_setup);
}
