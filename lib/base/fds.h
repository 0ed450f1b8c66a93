/*  fds.h: whether a process can still open the descriptors a step needs.

    czmq aborts the process when a socket cannot be made (an assertion in
    zsock_new, whose mailbox is an eventfd), and a session's sockets and
    endpoint take a dozen or more descriptors at once.  Asking first turns
    "out of descriptors" into an error naming it, where the server or an
    engine's process would otherwise die.  The answer can be stale by the
    time the step runs (another thread may take descriptors meanwhile):
    it guards against a process already at its limit, not against a race
    at the edge.
*/
#ifndef PK_FDS_H_INCLUDED
#define PK_FDS_H_INCLUDED

#include <stdbool.h>

/*  Whether want (at most 64) more descriptors can be opened now: opens
    that many (an eventfd and copies of it) and closes them again; 2 *
    want system calls.  */
bool pk_fds_free(int want);

#endif
