/*  fds.c: whether the process can still open the descriptors a step
    needs (fds.h).  */
#include "base/fds.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define S_MAX 64

bool
pk_fds_free(int want)
{
    int fds[S_MAX];
    if (want > S_MAX)
        want = S_MAX;
    int n = 0;
    fds[0] = eventfd(0, EFD_CLOEXEC);
    if (fds[0] >= 0)
        for (n = 1; n < want && (fds[n] = fcntl(fds[0], F_DUPFD_CLOEXEC, 0)) >= 0; n++)
            ;
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return n >= want;
}
