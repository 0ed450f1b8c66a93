/*  memtransport.h: the in-memory transport, for the roles' unit tests,
    p2pkv-replay and p2pkv-bench role: transfers finish only when the
    test says so.

    It is also the seam's second implementation (pk_memtransport_ops):
    a fabric is a record of the pool, a channel is a pk_memtransport_t,
    blobs name the pool's sizes, and landed counts only what the test
    says landed (pk_memtransport_land).  It is not in the registry:
    callers that want it pass this table in (base/transport.h).  */
#ifndef PK_MEMTRANSPORT_H_INCLUDED
#define PK_MEMTRANSPORT_H_INCLUDED

#include "base/transport.h"

/*  Ids are 1, 2, 3, ... in successful-submission order.
    It has no partial progress: a failed transfer landed nothing.  */

typedef struct _pk_memtransport_t pk_memtransport_t;

pk_memtransport_t *pk_memtransport_new(void);
void pk_memtransport_destroy(pk_memtransport_t **self_p);
pk_transport_t pk_memtransport_iface(pk_memtransport_t *self);

/*  The seam over in-memory fabrics and channels (name "mem").  */
const pk_transport_ops_t *pk_memtransport_ops(void);
/*  The scripted transport behind a channel of pk_memtransport_ops.  */
pk_memtransport_t *pk_memtransport_of(pk_channel_t *channel);
/*  n more blocks of round_seq landed (what landed() reports).  */
void pk_memtransport_land(pk_memtransport_t *self, uint64_t round_seq, uint64_t n);

/*  These transfers finished; the next poll reports them.  Ids not in
    flight are ignored.  */
void pk_memtransport_complete(pk_memtransport_t *self, const uint64_t *tids, size_t n, bool ok);
/*  These transfers ignore a cancel in wait mode.  */
void pk_memtransport_hold(pk_memtransport_t *self, const uint64_t *tids, size_t n);
/*  The next n submissions are refused.  */
void pk_memtransport_refuse(pk_memtransport_t *self, size_t n);
/*  Transfers submitted and neither reported nor released.  */
size_t pk_memtransport_inflight(const pk_memtransport_t *self);
/*  The id the next accepted write will get.  */
uint64_t pk_memtransport_next_tid(const pk_memtransport_t *self);

#endif
