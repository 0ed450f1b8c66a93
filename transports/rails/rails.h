/*  rails.h: several rails per node, composed at the seam (base/transport.h).

    A rails fabric is one fabric of the network provider's own transport
    (libfabric's) per local address of --fabric-addr A,B,...: each opens
    its own domain and registers the pool.  A rails channel holds one
    sub-channel per local rail and goes through the seam to each, so the
    rails never touch libfabric and nothing above the seam names either
    transport: the registry hands this table out for a node list of
    several addresses (pk_transport_for_node), and one address keeps the
    plain transport, at exactly its old cost.

    Blob (agent_metadata, capability rails; protocol.md section 7): "PKRL",
    u8 version 1, u8 rail count, then per rail u8 + its address text and
    u16 + the rail's own blob.  A consumer whose server does not list
    rails sends its first rail's own blob (pk_channel_single); a server's
    rails channel takes either.

    Pairing (the writer's, at connect): for each of the consumer's rails in
    its blob's order, the first unpaired local rail in the same subnet (its
    interface's netmask), else the first unpaired one that connects.

    Striping: a write of n blocks goes over the paired rails by whole
    blocks, in contiguous shares by each rail's measured rate (shares
    that would all finish at one time, given what each rail has queued;
    design.md, "A slow rail gets less"), each share cut into chunks of
    about 1 MiB, each chunk a write of the sub-channel with the round's
    immediate.  The consumer counts per rail; the writer's
    per-rail counts (rails_landing) go in the round's answer.

    Slices (capability slices; channel_slices): where the peer reads
    them, a block of 2 MiB or more is cut as base/slices.h says and a
    write's unit is a slice, not a block: the split, depth and resends
    above work on slices, each slice a write_slice of its rail.  The
    consumer's sub-channels hand each slice immediate to the rails
    channel (channel_slice_sink), which masks its block's slices and
    counts the block once its mask is full, whichever rails carried
    them; each rail's slices go in the answer (rails_slices).

    A rail that fails (rail_stall of pk_fabric_config_t; protocol.md
    section 7): a rail with chunks out and no completion for rail_stall
    while another rail completed since, or whose chunk failed, is taken
    out: its chunks out are released at once (its endpoint closes), sent
    again over the rails left, and each round they belonged to names the
    rail in its answer (rails_failed), so the consumer revokes its side of
    it (channel_revoke_rail) before it reports the round.  The last rail
    is never taken out.

    A rail that rejoins (capability rejoin): the consumer makes a fresh
    sub-channel for the rail it revoked (channel_rail_offer: a new
    endpoint and key) and offers its blob; the writer keeps the offer
    (rail_rejoin of the write path) and, once the rail's back-off since
    it was taken out passed (twice the rail stall, doubling per failure,
    at most 64 rail stalls), connects a fresh sub-channel of its own to
    it: the rail carries writes again.  Its chunk map entries went when
    it was taken out, so the new sub's transfer ids collide with none.
*/
#ifndef PK_RAILS_H_INCLUDED
#define PK_RAILS_H_INCLUDED

#include "base/transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*  One local address of --fabric-addr, as this host has it.  */
typedef struct {
    char text[64];              //  as given
    char ifname[32];            //  its interface
    bool loopback;
    int family;                 //  AF_INET or AF_INET6
    uint8_t addr[16], mask[16]; //  4 or 16 bytes used
} pk_rails_addr_t;

/*  Splits node at commas into out (cap rails), each an address of this
    host: one of an interface's, or any in a loopback interface's subnet
    (127.0.0.2 is lo's).  Two rails on one interface are refused, except
    on loopback (tests run there).  0, or -EINVAL with err naming the
    address.  */
int pk_rails_addrs(const char *node, pk_rails_addr_t *out, size_t cap, size_t *n_p, char *err);

/*  True when peer (an address's text) lies in ours's subnet.  */
bool pk_rails_same_subnet(const pk_rails_addr_t *ours, const char *peer);

/*  Test hook: while hold, the channel neither progresses its local rail
    nor reads that rail's completions, as if its link were down (a write
    on it never completes; --rail-stall takes it out).  */
void pk_rails_test_hold(pk_channel_t *channel, size_t rail, bool hold);

/*  Test hook: pins pair rail's rate (bytes per second) at rate: the split
    uses it and no measurement moves it; 0 unpins (measured again).  */
void pk_rails_test_rate(pk_channel_t *channel, size_t rail, double rate);

/*  The seam's table (name "rails"); providers: none of its own.  */
extern const pk_transport_ops_t pk_rails_transport_ops;

#endif
