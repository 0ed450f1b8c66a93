/*  ofi.h: the data plane over libfabric RMA (protocol.md section 7).

    Users outside transports/ofi reach it through the seam of
    base/transport.h (pk_transport_find("ofi"), or pk_ofi_transport_ops);
    the pk_ofi_* functions below remain for tests/transports/test_ofi.c and its
    stranger (tests/fixtures/stranger.c).  A pk_ofi_t and a pk_ofi_channel_t begin
    with the seam's head, so each is also a pk_fabric_t / pk_channel_t.

    A pk_ofi_t is one side's fabric, domain and block pool, registered once
    for local use.  Each peer gets its own pk_ofi_channel_t: an endpoint,
    completion queue and address vector of its own, so one actor polls one
    channel and a dead peer is torn down without touching the others.  A
    channel that exposes the pool (the consumer side) registers it again
    under a key never reused in the process, so closing that channel cuts
    that one server off.

    Writers merge runs of blocks contiguous on both sides, split them at
    1 MiB (or 4,095 blocks), keep at most the provider's transmit depth
    posted, and tag every write with the 32-bit immediate of protocol.md:
    the low 20 bits of the round in the high 20 bits, the block count in
    the low 12.  The target counts landed blocks per round tag, each
    counter claimed by one full round (see pk_ofi_channel_landed).

    Threads: one thread at a time uses a channel (its actor); channels of
    one pk_ofi_t may be created, used and closed from different threads at
    once (the domain is opened FI_THREAD_SAFE).
*/
#ifndef PK_OFI_H_INCLUDED
#define PK_OFI_H_INCLUDED

#include "base/err.h"
#include "base/transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*  Merged runs are split at 1 MiB: p2pkv-bench fabric measured 4 MiB
    writes 12-27% below the bare loop for contiguous 1-2 MiB blocks (fewer
    writes in flight), 1 MiB ones at par or above.  */
#define PK_OFI_MAX_WRITE_BYTES (1u << 20)
#define PK_OFI_MAX_WRITE_BLOCKS 4095u
#define PK_OFI_TAG_MASK 0xfffffu

typedef struct _pk_ofi_t pk_ofi_t;
typedef struct _pk_ofi_channel_t pk_ofi_channel_t;

typedef struct {
    const char *provider;       //  NULL: verbs, then efa, then tcp
    const char *node;           //  address to bind, e.g. "127.0.0.1"; NULL: any
    double stall_timeout;       //  a write neither posted (-FI_EAGAIN) nor completed
                                //  this long closes the channel (5 s)
    bool delivered;             //  writes with FI_DELIVERY_COMPLETE (rails:
                                //  pk_fabric_config_t.delivered)
} pk_ofi_config_t;

typedef struct {
    uint64_t writes_posted;     //  fi_writedata calls that were accepted
    uint64_t blocks_written;
    uint64_t cq_errors;         //  error entries drained with fi_cq_readerr
    uint64_t blocks_landed;     //  announced by immediates (target side)
    size_t transfers;           //  transfers not yet reported by poll
} pk_ofi_stats_t;

/*  Opens the fabric and registers the pool (num_blocks * block_len bytes at
    base).  On failure returns NULL with *rc_p a negative error and err a
    message naming what failed (an unavailable provider is never replaced
    by another).  */
pk_ofi_t *pk_ofi_new(const pk_ofi_config_t *config, void *base, uint64_t num_blocks,
                     uint64_t block_len, int *rc_p, char *err);
void pk_ofi_destroy(pk_ofi_t **self_p);
const char *pk_ofi_provider(const pk_ofi_t *self);
uint32_t pk_ofi_mr_mode(const pk_ofi_t *self);
/*  False where the provider carries no remote CQ data: writes then use
    FI_DELIVERY_COMPLETE (completed means landed) and the target counts
    nothing (pk_ofi_channel_landed stays 0).  */
bool pk_ofi_has_cq_data(const pk_ofi_t *self);
/*  One line for the log: provider, domain, mr_mode bits, completion mode.  */
void pk_ofi_describe(const pk_ofi_t *self, char *buf, size_t len);

/*  A channel for one peer; expose: register the pool for this peer's
    remote writes under a fresh key (the consumer side).  */
/*  The provider a blob names (its first field after the version).  */
int pk_ofi_blob_provider(const uint8_t *blob, size_t len, char *out, size_t cap, char *err);

pk_ofi_channel_t *pk_ofi_channel_new(pk_ofi_t *ofi, bool expose, int *rc_p, char *err);
void pk_ofi_channel_destroy(pk_ofi_channel_t **self_p);

/*  The address blob (agent_metadata): provider, libfabric version,
    endpoint address, key, base, block count and length.  malloc'd.  */
int pk_ofi_channel_blob(pk_ofi_channel_t *self, uint8_t **blob_p, size_t *len_p);

/*  Checks a peer's blob without creating any libfabric object: format,
    provider, libfabric version, sizes (the address's length, our
    block_len, the pool's block count, the raw key's presence and length).
    0, or -EPROTO with a message; counted in blobs_refused.  A handshake
    calls it before pk_ofi_channel_new, so a junk connect costs a parse,
    not an endpoint, queue and address vector.  */
int pk_ofi_check_blob(pk_ofi_t *self, const uint8_t *blob, size_t len, char *err);

/*  Channels opened (ever and now) and blobs refused on this fabric.  */
void pk_ofi_stats_fabric(const pk_ofi_t *self, pk_fabric_stats_t *stats);

/*  Imports the peer's blob after pk_ofi_check_blob's checks; refused with
    -EPROTO and a message when it names another provider or libfabric
    version or cannot be parsed.  */
int pk_ofi_channel_connect(pk_ofi_channel_t *self, const uint8_t *blob, size_t len, char *err);

/*  The transport seam over this channel (write_blocks, poll, cancel).  */
pk_transport_t pk_ofi_channel_transport(pk_ofi_channel_t *self);

/*  Reads the completion queue, posts queued writes and keeps the stall
    deadline.  Returns the number of completions read.  A channel must be
    progressed all the time, also when idle: over tcp a target that does
    not read its queue stalls its writers (they see -FI_EAGAIN), and one
    that stops leaves bytes in socket buffers.  Between calls an owner
    sleeps on pk_ofi_channel_wait_fd (after pk_ofi_channel_trywait says it
    may), or, where the provider has no wait object, calls it at least
    every few milliseconds; while its own writes are in flight it spins
    until they go quiet (pk_ofi_channel_trywait).  */
int pk_ofi_channel_progress(pk_ofi_channel_t *self);

/*  The completion queue's wait object: readable when progress is due
    (a completion, a remote write landing, a socket that can take more of
    our bytes).  -1 where the provider has none (then poll on a short
    timer), and once the endpoint is closed.  */
int pk_ofi_channel_wait_fd(const pk_ofi_channel_t *self);

/*  True when the owner may block now: on the wait fd (fi_trywait: nothing
    is queued or already completed), once no write of ours was posted or
    completed for the last 250 us (before that a write about to complete
    is worth a spin), or, where there is no fd, on its short progress
    timer when none of its writes is out.  False: progress first.  */
bool pk_ofi_channel_trywait(pk_ofi_channel_t *self);

/*  Blocks announced by immediates for a round's tag (its low 20 bits).
    The first full round asking for a tag's counter claims it; asked for
    by another round, the counter starts over for that one, so a round
    never sees an older round's count after the tags wrap.  */
uint64_t pk_ofi_channel_landed(pk_ofi_channel_t *self, uint64_t round_seq);

/*  The round is over: its tag's counter is dropped (unless another round
    claimed it since).  The consumer calls it when the round's load ends.  */
void pk_ofi_channel_forget(pk_ofi_channel_t *self, uint64_t round_seq);

/*  Block marks (capability "marks", protocol.md section 7): from now on
    each write's immediate also names its first destination block, in
    bits 32..62 with bit 63 set, where the provider carries 64 bits of CQ
    data (else nothing changes).  The target then knows which blocks each
    immediate landed and checks them at once (expect, below).  Writer
    side; the peer said it reads them.  */
void pk_ofi_channel_marks(pk_ofi_channel_t *self);

/*  Slices (capability slices, protocol.md section 7): from now on each
    slice immediate that lands (its low 12 bits 0, bit 63 set, the mark's
    bits block * 64 + slice: ofi_priv.h) goes to fn and counts nothing
    here; the channel of several rails that owns this one counts the
    block once all its slices landed.  Target side; -ENOTSUP where the
    provider carries fewer than 64 bits of CQ data.  */
int pk_ofi_channel_slice_sink(pk_ofi_channel_t *self, pk_slice_fn *fn, void *arg);

/*  The end-to-end check at landing (transport.h channel_expect and
    channel_verdicts; base/block_check.h): a target channel hashes each
    expected block when a marked immediate says it landed.  */
int pk_ofi_channel_expect(pk_ofi_channel_t *self, const uint32_t *dest, const uint64_t *sums,
                          size_t n);
void pk_ofi_channel_verdicts(pk_ofi_channel_t *self, const uint32_t *dest, uint8_t *verdict,
                             size_t n);

/*  Closes the exposed registration: nothing written by the peer lands
    afterwards.  */
void pk_ofi_channel_revoke(pk_ofi_channel_t *self);

/*  True once the endpoint is closed, by cancel(immediate) or because a
    write stalled past stall_timeout (a dead peer: the provider reports
    nothing for writes posted to it): the owning session retires, further
    writes are refused, and the peer is added again as a new channel.  */
bool pk_ofi_channel_closed(const pk_ofi_channel_t *self);

void pk_ofi_channel_stats(const pk_ofi_channel_t *self, pk_ofi_stats_t *stats);

/*  The seam's table over the functions above (name "ofi").  */
extern const pk_transport_ops_t pk_ofi_transport_ops;

#endif
