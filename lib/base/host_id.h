/*  host_id.h: which peers share this machine's memory.

    Two processes may use the shm provider when they run on one kernel and
    can reach each other's memory and names: the same boot (boot_id), the
    same network namespace (a consumer in another one sees other
    interfaces, so it is treated as remote and goes over the network, as
    tests/e2e/netns.sh puts it) and the same IPC namespace.  The identity is
    "BOOT_ID/net:INODE/ipc:INODE"; both sides compute it and compare the
    strings (doc/design.md, "Same host").
*/
#ifndef PK_HOST_ID_H_INCLUDED
#define PK_HOST_ID_H_INCLUDED

#include <stddef.h>

#define PK_HOST_ID_LEN 128          //  bytes of an identity, its NUL included

/*  This process's identity into out (PK_HOST_ID_LEN bytes): 0, or a
    negative errno (no /proc: out is "", and no peer is the same host).  */
int pk_host_id(char *out, size_t cap);

#endif
