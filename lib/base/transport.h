/*  transport.h: the data-plane seam, declared by its users.

    A role never touches libfabric: it is given a pk_transport_t, a table of
    functions over one peer's channel (the write path).  Whoever owns the
    channels (the client library, the daemon, the tests' consumer,
    p2pkv-bench) goes through pk_transport_ops_t for the whole life of a
    data-plane channel: open a fabric over a pool, check a peer's address
    blob, open, connect, progress, sleep on, count landed blocks, forget
    rounds, revoke and close channels.  A fabric and a channel carry
    their table, so owners hold only them and call pk_channel_progress
    (ch) and its siblings (below).  The libfabric transport
    (transports/ofi) is one implementation, found by name.

    Finding an implementation: pk_transport_find() looks through the
    static table of transports/registry.c, which holds the real data
    planes only; pk_transport_for() finds the one serving a provider, and
    pk_transport_provider() what that provider is (its transport's row:
    same-host only, its place under --provider auto), so no owner decides
    by a provider's name.  The in-memory transport of lib/sim is the second
    implementation, but it is not registered: the tests and p2pkv-replay
    that script it call pk_memtransport_ops() and pass the table in, so a
    daemon configured by name can never be given a transport that moves
    no bytes, and transports/ need not depend on lib/sim.

    Versioning: every table starts with .size, the sizeof its implementer
    compiled; new ops are only ever appended.  A caller refuses a table
    shorter than the ops it uses (pk_transport_ops_check), so an older
    implementation fails at open with a message, never by calling past
    the end of its table.
*/
#ifndef PK_TRANSPORT_H_INCLUDED
#define PK_TRANSPORT_H_INCLUDED

#include <errno.h>
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
    /*  Optional (NULL: the channel cannot lend; left out of a positional
        initializer, it is): the peer copies the n blocks local[i] ->
        remote[i] itself, told of them in the round's answer (capability
        lend, protocol.md section 7).  Opens a transfer and sends nothing;
        the peer's report for the round ends it (poll, with what it
        copied), as the stall or a cut-off does.  Cancel treats it as a
        write in flight: its source blocks are read until it is reported.
        Returns a transfer id (> 0) or a negative error.  */
    int64_t (*lend)(void *self, uint64_t round_seq, const uint32_t *local,
                    const uint32_t *remote, size_t n);
    /*  Optional (NULL: one path): a channel of several rails (capability
        rails, protocol.md section 7) writes counts[j], for each rail j of
        the peer's blob, the blocks of round_seq whose writes completed
        over it (whole when ok, what landed when failed), forgets the
        round, and returns the peer's rail count (at most cap; 0 where
        the peer took one rail and counts as before).  */
    size_t (*rails_landing)(void *self, uint64_t round_seq, uint64_t *counts, size_t cap);
    /*  Optional (NULL: no rail fails alone): the peer's rails (bit j for
        rail j of its blob) taken out while round_seq had writes on them
        that were never confirmed (--rail-stall; protocol.md section 7):
        the consumer revokes each before it reports the round.  Asked
        before rails_landing, which forgets the round.  */
    uint32_t (*rails_failed)(void *self, uint64_t round_seq);
    /*  Optional (NULL: a rail taken out stays out): the consumer offers a
        fresh registration for its rail peer_rail (the index in its blob)
        that this side took out: blob is that rail's own (a sub-channel's,
        channel_rail_offer).  The rail is paired again once its back-off
        since it was taken out has passed (protocol.md section 7, "a rail
        that rejoins"); 0, or -EPROTO with err where the rail is not out,
        an offer for it is pending, or the blob is refused (a violation:
        the session ends).  */
    int (*rail_rejoin)(void *self, size_t peer_rail, const uint8_t *blob, size_t len,
                       char *err);
    /*  Optional (NULL: a block goes whole): slice `slice` of block local
        -> the peer's block remote, as base/slices.h cuts a block of the
        channel's block_len (capability slices, protocol.md section 7):
        its immediate counts no block and names the block and the slice,
        so the target counts the block once all its slices landed,
        whichever rails carried them.  Polled like a write, with landed
        0 (a slice is no block).  Returns a transfer id (> 0), -ENOTSUP
        where the provider's immediate cannot name a slice (4 bytes of
        CQ data: verbs, efa), -ERANGE where remote is past what it can
        name, or another negative error.  */
    int64_t (*write_slice)(void *self, uint64_t round_seq, uint32_t local, uint32_t remote,
                           uint32_t slice);
    /*  Optional (NULL: this channel sends no slices): a channel of
        several rails that slices (channel_slices) writes counts[j], the
        slices of round_seq that completed over the peer's rail j, and
        returns the peer's rail count, as rails_landing does; asked
        before rails_landing, which forgets the round.  */
    size_t (*rails_slices)(void *self, uint64_t round_seq, uint64_t *counts, size_t cap);
} pk_transport_t;

/*  A slice's immediate as the target read it: the low 20 bits of its
    round, the consumer's block, the slice (channel_slice_sink).  */
typedef void (pk_slice_fn)(void *arg, uint32_t tag, uint32_t block, uint32_t slice);

//  --------------------------------------------------------------------------
//  The life of a channel

/*  A provider, as the transport that serves it declares it (a row of its
    ops table's providers).  The owners above the seam decide by these
    properties, never by a provider's name: which providers reach only
    this host, and what --provider auto tries in which order.  */
typedef struct {
    const char *name;           //  as --provider names it; NULL: every name no
                                //  transport lists (the default's row), and
                                //  under auto the implementation's own order
    bool same_host;             //  reaches only processes of this host and its
                                //  namespaces (base/host_id.h): a consumer uses
                                //  it only with a server whose host is its own
    unsigned auto_rank;         //  its place in --provider auto's order, lowest
                                //  first, distinct across transports; 0: never
} pk_provider_t;

/*  A fabric and a channel carry the table of the transport that made
    them, as their first member (libfabric's fid does the same): an owner
    holds one pointer and calls through it (pk_channel_progress (ch)
    below), never a table kept beside it that could belong to another
    transport.  Each implementation's own object begins with this head
    and is otherwise its own; what it costs a call is the load of the
    table's pointer from the object, whose line the call touches anyway.  */
struct pk_transport_ops;
typedef struct _pk_fabric_t {
    const struct pk_transport_ops *ops;
} pk_fabric_t;
typedef struct _pk_channel_t {
    const struct pk_transport_ops *ops;
} pk_channel_t;

typedef struct {
    const char *provider;       //  NULL: the implementation's own order (ofi:
                                //  verbs, then efa, then tcp)
    const char *node;           //  address to bind, e.g. "127.0.0.1"; NULL: any
    double stall_timeout;       //  a write neither posted nor completed this
                                //  long closes the channel (5 s)
    double rail_stall;          //  several rails: one with writes out and no
                                //  completion this long while another rail
                                //  completes is taken out; 0: a quarter of
                                //  stall_timeout
    bool delivered;             //  a write completes at the writer only once
                                //  it is in the peer's memory
                                //  (FI_DELIVERY_COMPLETE), not once handed to
                                //  the provider: rails set it for their rails,
                                //  so a rail taken out confirmed only writes
                                //  that landed (protocol.md section 7)
} pk_fabric_config_t;

/*  A failed rail's wait before it is tried again, by writer and consumer
    alike (protocol.md section 7): twice rail_stall after its first
    failure (failures counts from 1), doubling with each, at most 64 rail
    stalls.  Why these numbers: transport.c.  */
double pk_rail_backoff(double rail_stall, uint64_t failures);

/*  One channel's counters; transport-neutral (an implementation without
    a completion queue reports errors of its own kind in errors).  */
typedef struct {
    uint64_t writes_posted;     //  writes the fabric accepted
    uint64_t blocks_written;
    uint64_t errors;            //  failed writes reported by the fabric
    uint64_t blocks_landed;     //  announced by immediates (target side)
    size_t transfers;           //  transfers not yet reported by poll
} pk_channel_stats_t;

/*  One rail of a channel of several (channel_rails): its addresses, the
    peer's rail it is paired with, and what went over it.  */
#define PK_RAILS_MAX 8
typedef struct {
    char local[64];             //  this side's address
    char peer[64];              //  the paired peer rail's address ("" unknown)
    int peer_rail;              //  its index in the peer's blob; -1: unpaired
    uint64_t writes_posted;
    uint64_t blocks_written;
    uint64_t blocks_landed;     //  announced by immediates (target side)
    uint64_t failures;          //  failed writes, and each time the rail was
                                //  taken out
    bool failed;                //  taken out (writer: --rail-stall or a failed
                                //  write; consumer: revoked at an answer's
                                //  rails_failed) and not rejoined
    uint64_t rejoins;           //  paired again after it was taken out
                                //  (consumer: fresh registrations offered)
    double rate;                //  writer: bytes per second it confirmed while
                                //  it had writes out (an EWMA; 0: not measured)
    uint64_t slices_written;    //  writer: slices of blocks (capability slices)
    uint64_t bytes_written;     //  writer: its whole blocks' bytes and its slices'
} pk_rail_stats_t;

/*  A fabric's counters: what the peers' blobs cost it.  */
typedef struct {
    uint64_t channels_opened;   //  ever, by channel_new
    uint64_t channels_open;     //  now
    uint64_t blobs_refused;     //  by check_blob or channel_connect
} pk_fabric_stats_t;

typedef struct pk_transport_ops {
    size_t size;                //  sizeof (pk_transport_ops_t) of the implementer
    const char *name;           //  "ofi", "mem"

    /*  Opens the fabric over the pool (num_blocks * block_len bytes at
        base, registered once).  NULL on failure, *rc_p a negative error
        and err naming what failed; a provider asked for by name is never
        replaced by another.  */
    pk_fabric_t *(*fabric_open)(const pk_fabric_config_t *config, void *base,
                                uint64_t num_blocks, uint64_t block_len, int *rc_p, char *err);
    /*  Every channel of it must be closed first.  Nulls *fabric_p.  */
    void (*fabric_close)(pk_fabric_t **fabric_p);
    /*  One line for the log: provider, domain, memory modes, completion.  */
    void (*fabric_describe)(const pk_fabric_t *fabric, char *buf, size_t len);
    const char *(*fabric_provider)(const pk_fabric_t *fabric);
    /*  False where writes carry no immediate: completion at the writer
        then means delivered, and landed() at the target stays 0.  */
    bool (*fabric_has_cq_data)(const pk_fabric_t *fabric);
    /*  Checks a peer's blob before anything is built for it (no channel,
        endpoint, queue or address vector): format, provider, library
        version, sizes (our block_len; address and key lengths).  0, or
        -EPROTO with err naming what is wrong.  Costs a parse.  */
    int (*check_blob)(pk_fabric_t *fabric, const uint8_t *blob, size_t len, char *err);
    void (*fabric_stats)(const pk_fabric_t *fabric, pk_fabric_stats_t *stats);

    /*  A channel for one peer; expose: register the pool for this peer's
        remote writes under a fresh key (the consumer side).  */
    pk_channel_t *(*channel_new)(pk_fabric_t *fabric, bool expose, int *rc_p, char *err);
    /*  Registrations first, so nothing from the peer lands afterwards.
        Nulls *channel_p.  */
    void (*channel_close)(pk_channel_t **channel_p);
    /*  Our address blob (agent_metadata), malloc'd.  */
    int (*channel_blob)(pk_channel_t *channel, uint8_t **blob_p, size_t *len_p);
    /*  Imports the peer's blob (check_blob's checks, then the fabric's);
        -EPROTO with a message when refused, -EISCONN when it has one.  */
    int (*channel_connect)(pk_channel_t *channel, const uint8_t *blob, size_t len, char *err);
    /*  Reads completions, posts queued writes, keeps the stall deadline;
        returns the completions read.  Must be called all the time, also
        while idle (see transports/ofi/ofi.h).  */
    int (*channel_progress)(pk_channel_t *channel);
    /*  Readable when progress is due; -1 where there is none (then
        progress on a short timer) and once closed.  */
    int (*channel_wait_fd)(const pk_channel_t *channel);
    /*  True when the owner may block now: on the wait fd (a transport
        may say false while its writes are about to complete, so that the
        owner spins instead), or where there is none (-1), on its short
        progress timer.  */
    bool (*channel_trywait)(pk_channel_t *channel);
    /*  Blocks of this round announced by immediates.  A tag's counter
        belongs to one full round: asked for another round with the same
        tag, it starts over for that one (never an old round's count).  */
    uint64_t (*channel_landed)(pk_channel_t *channel, uint64_t round_seq);
    /*  The round is over (its load ended): its counter goes, so a later
        round whose tag wraps onto it starts from 0.  */
    void (*channel_forget)(pk_channel_t *channel, uint64_t round_seq);
    /*  Closes the exposed registration: nothing the peer writes lands.  */
    void (*channel_revoke)(pk_channel_t *channel);
    /*  True once the endpoint closed (cancel immediate, a stalled write):
        writes are refused and the peer must be added again.  */
    bool (*channel_closed)(const pk_channel_t *channel);
    void (*channel_stats)(const pk_channel_t *channel, pk_channel_stats_t *stats);
    /*  The write path over this channel, for the roles.  */
    pk_transport_t (*channel_transport)(pk_channel_t *channel);

    /*  The provider a peer's blob names, before any fabric is asked (a
        node with one fabric per provider picks the one to check it
        with): 0 with out (cap bytes), or -EPROTO with err when the blob
        names none.  */
    int (*blob_provider)(const uint8_t *blob, size_t len, char *out, size_t cap, char *err);

    /*  The consumer's end-to-end check inside the transport (issue 34),
        optional (NULL: the owner hashes each landed block itself).  A
        transport that copies the blocks itself (mmap) hashes each one
        right after its copy, while it is in that core's cache, where a
        hash after the whole round landed reads it back from memory.
        expect: dest[i] is to hold bytes whose checksum (base/checksum.h)
        is sums[i]; 0, or a negative error (then the owner checks).  */
    int (*channel_expect)(pk_channel_t *channel, const uint32_t *dest, const uint64_t *sums,
                          size_t n);
    /*  What the copies found for dest[i], written to verdict[i]
        (PK_VERDICT_OK or PK_VERDICT_CORRUPT), and forgets them; a block
        not checked since its expect leaves verdict[i] as it was.  */
    void (*channel_verdicts)(pk_channel_t *channel, const uint32_t *dest, uint8_t *verdict,
                             size_t n);
    /*  Writer side, optional: the peer reads block marks (capability
        "marks", protocol.md section 7), so each write may tell the
        target which blocks it landed, and the target checks them as they
        land (expect, above).  A transport that cannot carry them, or
        whose target knows its blocks anyway (mmap), leaves it NULL.  */
    void (*channel_marks)(pk_channel_t *channel);

    /*  The providers it serves and their properties (pk_provider_t).  The
        default transport's table holds the row named NULL, for every
        provider no transport lists (libfabric's tcp, verbs, efa, ...).  */
    const pk_provider_t *providers;
    size_t nproviders;

    /*  Consumer side, optional (capability lend; NULL: the transport
        cannot): copies the n blocks the server lent for round_seq (its
        get_resp's sources: src[i] of its pool -> our dst[i]), checking
        them as channel_expect asked, counts them for the round
        (channel_landed), and reports to the server what it copied, which
        unpins them there.  A block copied while the server cut the
        channel off is not counted.  n 0: nothing is copied, the report
        alone goes (an answer nobody waits for).  Returns the blocks counted, or
        -EINVAL when an index is outside either pool (nothing copied), or
        -ENOTCONN.  */
    int64_t (*channel_lend_copy)(pk_channel_t *channel, uint64_t round_seq,
                                 const uint32_t *src, const uint32_t *dst, size_t n);

    /*  Several rails (transports/rails; protocol.md section 7), all
        optional: NULL where a fabric is one rail.  fabric_rails: how many
        rails the fabric has (its --fabric-addr list).  */
    size_t (*fabric_rails)(const pk_fabric_t *fabric);
    /*  Consumer side, before channel_blob: the peer takes one rail (it
        did not list "rails"): the channel keeps its first rail alone and
        its blob is that rail's own.  */
    void (*channel_single)(pk_channel_t *channel);
    /*  The channel's rails, up to cap written to out; returns how many it
        has (paired or not).  */
    size_t (*channel_rails)(const pk_channel_t *channel, pk_rail_stats_t *out, size_t cap);
    /*  Consumer side: counts[i], the blocks of round_seq announced on our
        rail i (as our blob lists them); returns our rail count (at most
        cap).  */
    size_t (*channel_landed_rails)(pk_channel_t *channel, uint64_t round_seq, uint64_t *counts,
                                   size_t cap);
    /*  Consumer side: the server took our rail i out (an answer's
        rails_failed): closes that rail's registration (its key), so a
        late write on it never lands in a block the caller reuses; the
        other rails go on.  Called before the round is reported.  */
    void (*channel_revoke_rail)(pk_channel_t *channel, size_t rail);
    /*  Consumer side: our rail i, revoked (channel_revoke_rail), gets a
        fresh registration (a new sub-channel: endpoint and key; the old
        key stays revoked) whose own blob, malloc'd, is offered to the
        server (rail_offer, protocol.md section 7) so that the rail
        rejoins.  0, or -EINVAL where rail i is not revoked.  */
    int (*channel_rail_offer)(pk_channel_t *channel, size_t rail, uint8_t **blob_p,
                              size_t *len_p);

    /*  Slicing one block over several rails (capability slices,
        protocol.md section 7), all optional.  Writer side: the peer
        reads slices, so a channel of several rails cuts each block of
        2 MiB or more (base/slices.h) over them from now on, and its
        write path gains rails_slices.  False where it cannot (fewer than
        two rails paired, a provider whose immediate cannot name a
        slice): blocks go whole.  */
    bool (*channel_slices)(pk_channel_t *channel);
    /*  Target side: each slice immediate that lands on this channel goes
        to fn and counts nothing here (the owner of the rails counts its
        block once, when every slice of it landed).  0, or -ENOTSUP where
        the provider's immediates cannot carry a slice.  */
    int (*channel_slice_sink)(pk_channel_t *channel, pk_slice_fn *fn, void *arg);
    /*  Target side: counts[i], the slice immediates of round_seq read on
        our rail i (a slice that landed twice counts twice here: these
        are what each rail carried, checked against the answer's
        rail_slices); returns our rail count (at most cap).  */
    size_t (*channel_landed_slices)(pk_channel_t *channel, uint64_t round_seq,
                                    uint64_t *counts, size_t cap);
} pk_transport_ops_t;

enum { PK_VERDICT_NONE = 0, PK_VERDICT_OK, PK_VERDICT_CORRUPT };

/*  The smallest table a caller that uses every op above accepts.  */
#define PK_TRANSPORT_OPS_SIZE sizeof (pk_transport_ops_t)

/*  A registered transport by name ("ofi"), or NULL.  NULL name: the first
    (the default data plane).  In transports/registry.c.  */
const pk_transport_ops_t *pk_transport_find(const char *name);

/*  The transport that serves provider: the one whose providers list it;
    every other name, and NULL, is the default's (libfabric's).  */
const pk_transport_ops_t *pk_transport_for(const char *provider);

/*  The transport for provider bound to node: several comma-separated
    addresses over a network provider are several rails (transports/rails,
    composing provider's own transport per address); else
    pk_transport_for (provider), so one address costs exactly as before.  */
const pk_transport_ops_t *pk_transport_for_node(const char *provider, const char *node);

/*  Checks node's addresses as rails before any fabric opens (each an
    address of this host; one rail per interface but loopback's): 0, or
    -EINVAL with err naming the address.  0 for a single address (its
    provider's own open judges it).  */
int pk_transport_check_node(const char *node, char *err);

/*  The row that describes provider, in the table of the transport that
    serves it (pk_transport_for): never NULL.  */
const pk_provider_t *pk_transport_provider(const char *provider);

/*  What --provider auto tries, best first: the i-th row by auto_rank of
    every registered transport, or NULL past the last.  */
const pk_provider_t *pk_transport_auto(size_t i);

/*  The provider a peer's blob names, whichever registered transport's
    blob it is (blob_provider of each): 0 with out, or -EPROTO with err
    (the default transport's words) when none knows it.  */
int pk_transport_blob_provider(const uint8_t *blob, size_t len, char *out, size_t cap,
                               char *err);

/*  0 when ops is a table of at least need bytes (PK_TRANSPORT_OPS_SIZE
    for a caller of every op); -ENOSYS with err otherwise.  */
int pk_transport_ops_check(const pk_transport_ops_t *ops, size_t need, char *err);

/*  A channel's blob over a file descriptor (a pipe or socket between two
    processes, as the tests and p2pkv-bench wire them): send ours as a
    4-byte length and the bytes; read the peer's and connect to it.  0 or
    a negative error (err for the connect).  */
int pk_channel_send_blob_fd(pk_channel_t *channel, int fd);
int pk_channel_connect_fd(pk_channel_t *channel, int fd, char *err);

//  --------------------------------------------------------------------------
//  Calling through a fabric or a channel: what every owner above the seam
//  uses.  Each is the op of the same name, through the table the object
//  carries (see pk_fabric_t): one pointer load, inlined.

/*  Opens a fabric of ops' transport (fabric_open), after refusing a
    table older than this caller (pk_transport_ops_check): NULL with *rc_p
    and err then too.  */
pk_fabric_t *pk_fabric_open(const pk_transport_ops_t *ops, const pk_fabric_config_t *config,
                            void *base, uint64_t num_blocks, uint64_t block_len, int *rc_p,
                            char *err);

/*  Nulls *fabric_p; a NULL one is left alone.  */
static inline void
pk_fabric_close(pk_fabric_t **fabric_p)
{
    if (*fabric_p)
        (*fabric_p)->ops->fabric_close(fabric_p);
}

static inline void
pk_fabric_describe(const pk_fabric_t *fabric, char *buf, size_t len)
{
    fabric->ops->fabric_describe(fabric, buf, len);
}

static inline const char *
pk_fabric_provider(const pk_fabric_t *fabric)
{
    return fabric->ops->fabric_provider(fabric);
}

static inline bool
pk_fabric_has_cq_data(const pk_fabric_t *fabric)
{
    return fabric->ops->fabric_has_cq_data(fabric);
}

static inline int
pk_fabric_check_blob(pk_fabric_t *fabric, const uint8_t *blob, size_t len, char *err)
{
    return fabric->ops->check_blob(fabric, blob, len, err);
}

static inline void
pk_fabric_stats(const pk_fabric_t *fabric, pk_fabric_stats_t *stats)
{
    fabric->ops->fabric_stats(fabric, stats);
}

/*  A channel of the fabric's transport: it carries the fabric's table.  */
static inline pk_channel_t *
pk_channel_new(pk_fabric_t *fabric, bool expose, int *rc_p, char *err)
{
    return fabric->ops->channel_new(fabric, expose, rc_p, err);
}

/*  Nulls *channel_p; a NULL one is left alone.  */
static inline void
pk_channel_close(pk_channel_t **channel_p)
{
    if (*channel_p)
        (*channel_p)->ops->channel_close(channel_p);
}

static inline int
pk_channel_blob(pk_channel_t *channel, uint8_t **blob_p, size_t *len_p)
{
    return channel->ops->channel_blob(channel, blob_p, len_p);
}

static inline int
pk_channel_connect(pk_channel_t *channel, const uint8_t *blob, size_t len, char *err)
{
    return channel->ops->channel_connect(channel, blob, len, err);
}

static inline int
pk_channel_progress(pk_channel_t *channel)
{
    return channel->ops->channel_progress(channel);
}

static inline int
pk_channel_wait_fd(const pk_channel_t *channel)
{
    return channel->ops->channel_wait_fd(channel);
}

static inline bool
pk_channel_trywait(pk_channel_t *channel)
{
    return channel->ops->channel_trywait(channel);
}

static inline uint64_t
pk_channel_landed(pk_channel_t *channel, uint64_t round_seq)
{
    return channel->ops->channel_landed(channel, round_seq);
}

static inline void
pk_channel_forget(pk_channel_t *channel, uint64_t round_seq)
{
    channel->ops->channel_forget(channel, round_seq);
}

static inline void
pk_channel_revoke(pk_channel_t *channel)
{
    channel->ops->channel_revoke(channel);
}

static inline bool
pk_channel_closed(const pk_channel_t *channel)
{
    return channel->ops->channel_closed(channel);
}

static inline void
pk_channel_stats(const pk_channel_t *channel, pk_channel_stats_t *stats)
{
    channel->ops->channel_stats(channel, stats);
}

static inline pk_transport_t
pk_channel_transport(pk_channel_t *channel)
{
    return channel->ops->channel_transport(channel);
}

/*  -ENOSYS where the transport leaves the check to its owner (no
    channel_expect).  */
static inline int
pk_channel_expect(pk_channel_t *channel, const uint32_t *dest, const uint64_t *sums, size_t n)
{
    return channel->ops->channel_expect ? channel->ops->channel_expect(channel, dest, sums, n)
                                        : -ENOSYS;
}

static inline void
pk_channel_verdicts(pk_channel_t *channel, const uint32_t *dest, uint8_t *verdict, size_t n)
{
    if (channel->ops->channel_verdicts)
        channel->ops->channel_verdicts(channel, dest, verdict, n);
}

/*  Whether the channel's transport lends (channel_lend_copy).  */
static inline bool
pk_channel_lends(const pk_channel_t *channel)
{
    return channel->ops->channel_lend_copy != NULL;
}

/*  -ENOSYS where the transport cannot lend.  */
static inline int64_t
pk_channel_lend_copy(pk_channel_t *channel, uint64_t round_seq, const uint32_t *src,
                     const uint32_t *dst, size_t n)
{
    return pk_channel_lends(channel)
           ? channel->ops->channel_lend_copy(channel, round_seq, src, dst, n) : -ENOSYS;
}

/*  1 where the fabric is one rail (no fabric_rails).  */
static inline size_t
pk_fabric_rails(const pk_fabric_t *fabric)
{
    return fabric->ops->fabric_rails ? fabric->ops->fabric_rails(fabric) : 1;
}

static inline void
pk_channel_single(pk_channel_t *channel)
{
    if (channel->ops->channel_single)
        channel->ops->channel_single(channel);
}

/*  0 where the channel is one rail (no channel_rails).  */
static inline size_t
pk_channel_rails(const pk_channel_t *channel, pk_rail_stats_t *out, size_t cap)
{
    return channel->ops->channel_rails ? channel->ops->channel_rails(channel, out, cap) : 0;
}

/*  0 where the channel is one rail: pk_channel_landed counts alone.  */
static inline size_t
pk_channel_landed_rails(pk_channel_t *channel, uint64_t round_seq, uint64_t *counts,
                        size_t cap)
{
    return channel->ops->channel_landed_rails
           ? channel->ops->channel_landed_rails(channel, round_seq, counts, cap) : 0;
}

/*  Nothing where the channel is one rail (no channel_revoke_rail): the
    peer never takes a rail out of it.  */
static inline void
pk_channel_revoke_rail(pk_channel_t *channel, size_t rail)
{
    if (channel->ops->channel_revoke_rail)
        channel->ops->channel_revoke_rail(channel, rail);
}

/*  -ENOSYS where the channel is one rail (no channel_rail_offer).  */
static inline int
pk_channel_rail_offer(pk_channel_t *channel, size_t rail, uint8_t **blob_p, size_t *len_p)
{
    return channel->ops->channel_rail_offer
           ? channel->ops->channel_rail_offer(channel, rail, blob_p, len_p) : -ENOSYS;
}

/*  False where the channel cannot slice (no channel_slices).  */
static inline bool
pk_channel_slices(pk_channel_t *channel)
{
    return channel->ops->channel_slices ? channel->ops->channel_slices(channel) : false;
}

/*  -ENOTSUP where the transport reads no slices.  */
static inline int
pk_channel_slice_sink(pk_channel_t *channel, pk_slice_fn *fn, void *arg)
{
    return channel->ops->channel_slice_sink ? channel->ops->channel_slice_sink(channel, fn, arg)
                                            : -ENOTSUP;
}

/*  0 where the channel reads no slices.  */
static inline size_t
pk_channel_landed_slices(pk_channel_t *channel, uint64_t round_seq, uint64_t *counts,
                         size_t cap)
{
    return channel->ops->channel_landed_slices
           ? channel->ops->channel_landed_slices(channel, round_seq, counts, cap) : 0;
}

/*  Nothing where the transport carries no marks (no channel_marks).  */
static inline void
pk_channel_marks(pk_channel_t *channel)
{
    if (channel->ops->channel_marks)
        channel->ops->channel_marks(channel);
}

#endif
