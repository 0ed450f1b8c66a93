/*  seam.h: one life of the data-plane seam (base/transport.h), written
    once for every transport (fabtests' shared.c): a transport's test
    calls ts_seam_life with its ops table and the provider to open, and
    gets the same checks as every other implementation.  A new transport
    adds one call to its own test, never a copy of this.

    What it asserts: the table is new enough; every fabric and channel
    carries the table that made it; junk blobs are refused before any
    channel exists, and counted; a channel's blob names its fabric's
    provider (what a node with a fabric per provider picks by) and passes
    the other side's checks; a second connect is -EISCONN; a write of two
    blocks completes once, lands where it was sent (bytes compared, where
    the transport moves them) and is counted on both sides; forget drops
    the round's count; revoke and close leave no channel open; the fabric
    counts what its channels cost.
*/
#ifndef PK_TESTS_SEAM_H_INCLUDED
#define PK_TESTS_SEAM_H_INCLUDED

#include "base/transport.h"

typedef struct {
    const pk_transport_ops_t *ops;
    pk_fabric_config_t config;      //  what fabric_open is asked for
    /*  A scripted transport moves nothing by itself: called after the
        write of n blocks of round (transfer tid) went in, it completes
        it at the writer and lands it at the target.  NULL for a real
        transport, whose bytes are compared.  */
    void (*script)(pk_channel_t *writer, pk_channel_t *target, uint64_t tid, uint64_t round,
                   uint64_t n);
} ts_seam_t;

/*  One life of a writer's and a target's fabric and channel in this
    process, over pools in shared memory (a writer's pool may have to be a
    file's mapping, as mmap's is).  Fails the running Check test.  */
void ts_seam_life(const ts_seam_t *seam);

#endif
