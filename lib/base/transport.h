/*  transport.h: the data-plane seam, and an in-memory transport for tests.

    A role never touches libfabric: it is given a pk_transport_t, a table of
    functions over one peer's channel.  The daemon's comes from
    transports/ofi; tests and p2pkv-replay use pk_memtransport, whose
    transfers finish only when the test says so.
*/
#ifndef PK_TRANSPORT_H_INCLUDED
#define PK_TRANSPORT_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    PK_CANCEL_WAIT,         //  release what is not posted; report what still is
    PK_CANCEL_IMMEDIATE     //  on return the source memory is no longer read
} pk_cancel_mode_t;

/*  landed: blocks of the transfer whose writes completed (all of them
    when ok; a failed transfer may have landed part).  */
typedef void (pk_transfer_fn)(void *arg, uint64_t tid, bool ok, uint64_t landed);

typedef struct {
    void *self;
    /*  One write of n blocks (local[i] -> the peer's remote[i]) for a round,
        whose low 20 bits tag the writes' immediates.  Returns a transfer id
        (> 0) or a negative error when the write is refused.  */
    int64_t (*write_blocks)(void *self, uint64_t round_seq, const uint32_t *local,
                            const uint32_t *remote, size_t n);
    /*  Reports this peer's finished transfers, each once: every successful
        one in ascending id, then every failed one in ascending id.  */
    void (*poll)(void *self, pk_transfer_fn *each, void *arg);
    /*  Cancels transfers.  In wait mode, writes it could stop are dropped;
        a transfer none of whose writes were posted is released (never
        reported by poll), and one that has writes in flight or completed
        is written to still[] (n slots), counted in the return value, and
        reported by poll once nothing of it runs, with what landed (so the
        target can be told how many blocks may still arrive).  In
        immediate mode all are released and 0 is returned.  */
    size_t (*cancel)(void *self, const uint64_t *tids, size_t n, pk_cancel_mode_t mode,
                     uint64_t *still);
} pk_transport_t;

#endif
