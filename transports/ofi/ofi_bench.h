/*  ofi_bench.h: for p2pkv-bench only, the raw libfabric objects of an ofi
    channel, so that a bare fi_writedata loop can be measured on the same
    endpoint as write_blocks.

    This is the one header outside the seam of base/transport.h that lets
    code outside transports/ofi name libfabric; nothing but bin/p2pkv-bench.c
    includes it.  It costs the bench a dependency on ofi's internals: a
    channel passed here must come from pk_ofi_transport_ops.
*/
#ifndef PK_OFI_BENCH_H_INCLUDED
#define PK_OFI_BENCH_H_INCLUDED

#include "base/transport.h"
#include "ofi/ofi.h"

#include <stdint.h>

struct fid_ep;
struct fid_cq;
typedef struct {
    struct fid_ep *ep;
    struct fid_cq *cq;
    uint64_t peer;              //  fi_addr_t
    uint64_t key, remote_base;
    void *desc;
    uint8_t *base;
    uint64_t block_len;
} pk_ofi_raw_t;

/*  -ENOTCONN until the channel is connected, and once it is closed.  */
int pk_ofi_bench_raw(pk_channel_t *channel, pk_ofi_raw_t *raw);

#endif
