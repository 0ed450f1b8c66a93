/*  mmap.h: the same-host data plane, behind the seam of base/transport.h.

    Provider "mmap": a consumer on the server's host maps the server's
    pool read-only and copies each block itself, one user-space memcpy
    per block, where libfabric's shm moves it with process_vm_readv (a
    kernel copy that pins every 4 KiB page: 4 GB/s on this machine
    against memcpy's 10) and tcp copies it twice through the loopback.
    Writes, completions and landings keep the seam's meaning; only who
    runs the copy changes.

    The wire between the two channels is a SOCK_SEQPACKET unix socket in
    the abstract namespace, named by the consumer's blob: the server
    connects to it, checks with SO_PEERCRED that the consumer runs as its
    own user, and sends read-only
    descriptors of its pool and of one control page.  Every write is a
    message (its pairs of blocks), every finished write a message back
    (how many blocks landed).  The consumer's channel_progress runs the
    copies, at most PK_MMAP_COPY_BUDGET bytes a call.

    Why a same-uid peer may map the whole pool: a process of our own user
    can read all our memory already (ptrace, /proc/PID/mem, the CMA that
    libfabric's shm itself needs), so the mapping gives it nothing it
    lacks; any other user is refused before a descriptor leaves the
    server (doc/design.md, "Same-host copies").

    Cut-off: the server's immediate cancel sets a flag in the control
    page; the consumer reads it after each block's copy and before it
    counts the block, so once the flag is set no block read afterwards
    lands (a copy racing it is discarded, never counted).  The
    consumer's revoke is local: it stops copying and closes the socket.
*/
#ifndef PK_MMAP_H_INCLUDED
#define PK_MMAP_H_INCLUDED

#include "base/transport.h"

extern const pk_transport_ops_t pk_mmap_transport_ops;

#endif
