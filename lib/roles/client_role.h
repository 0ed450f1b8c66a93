/*  client_role.h: the consumer side of one server session, the mirror of
    the server role, as a pure state machine (protocol.md sections 3 and 7).

    It batches probes into one lookup per request, numbers rounds from one
    counter, matches answers by (kv_request_id, round_seq), runs loads
    (fetches) with their timeouts, and keeps the fence of section 7: a
    load's destination is released only once the blocks the server says
    may still be landing have landed, or after this server's endpoint and
    registration were cut off.  Clock, sender, transport and the caller's
    events are injected; one thread owns one role.
*/
#ifndef PK_CLIENT_ROLE_H_INCLUDED
#define PK_CLIENT_ROLE_H_INCLUDED

#include "base/clock.h"
#include "wire/protocol.h"
#include "roles/server_role.h"

typedef struct {
    void *self;
    /*  Blocks of this round announced by immediates on this server's
        endpoint (tagged by its low 20 bits; never an older round's count
        under the same tag, see forget).  */
    uint64_t (*landed)(void *self, uint64_t round_seq);
    /*  Closes this server's endpoint and registration: nothing from it
        lands afterwards.  */
    void (*cut_off)(void *self);
    /*  The round's load ended (NULL: nothing to tell): its landed count
        may go, so a later round whose 20-bit tag wraps onto it never
        inherits it.  Called before load_done.  */
    void (*forget)(void *self, uint64_t round_seq);
    /*  Optional (NULL: one rail): counts[i], the blocks of this round
        announced on our rail i; returns our rail count (at most cap).  A
        round's answer with rails (capability rails) has landed when each
        rail counted what the answer says for it.  */
    size_t (*landed_rails)(void *self, uint64_t round_seq, uint64_t *counts, size_t cap);
    /*  Optional (NULL: one rail): the server took our rail i out (the
        answer's rails_failed): close its registration, so a
        late write on it never lands.  Called before the round's load_done
        (protocol.md section 7).  */
    void (*revoke_rail)(void *self, size_t rail);
    /*  Optional (NULL: no slices): counts[i], the slice immediates of
        this round read on our rail i; returns our rail count.  A round's
        answer with rail_slices (capability slices) has landed when each
        rail counted that many slices too.  */
    size_t (*landed_slices)(void *self, uint64_t round_seq, uint64_t *counts, size_t cap);
} pk_client_transport_t;

/*  Capability rejoin (protocol.md section 7, "a rail that rejoins"): a
    fresh registration for our rail, revoked at a round's end
    (revoke_rail), whose own blob (malloc'd) the next fetch or get offers
    the server (rail_offer).  0, or a negative error: the rail stays out
    and is tried again on the rejoin back-off (twice the rail stall,
    doubling with each failure, at most 64 rail stalls), at the first
    request after it.  */
typedef int (pk_client_rail_offer_fn)(void *arg, size_t rail, uint8_t **blob_p, size_t *len_p);

typedef enum {
    PK_LOAD_LANDED = 0,         //  every block of the round is in the destination
    PK_LOAD_FAILED,             //  the destination may be reused; nothing landed for sure
    PK_LOAD_ABORTED             //  ended by the caller's deadline or cancel (abort_fetch)
} pk_load_status_t;

typedef struct {
    void *self;
    /*  A lookup's answer: keys in the order probed, hits parallel; hits
        NULL when the server went away first.  sums: each hit's block
        checksum (base/checksum.h), parallel, where the answer carried
        them (the checksum capability), else NULL.  reasons: each miss's
        pk_miss_reason_t (base/miss_reason.h), parallel (0 at hits), where
        the answer carried them (the reasons capability), else NULL.  */
    void (*lookup_done)(void *self, const char *kv, uint64_t round_seq, const pk_key_t *keys,
                        const bool *hits, const uint64_t *sums, const uint8_t *reasons,
                        size_t n);
    /*  A load ended; its destination blocks may be reused from now on.  */
    void (*load_done)(void *self, uint64_t load_id, pk_load_status_t status, const char *reason);
} pk_client_events_t;

typedef struct {
    double load_timeout;        //  a load without transfer_done is aborted (30 s)
    double abort_ack_timeout;   //  then cut off and failed (10 s)
    uint64_t *load_ids;         //  the owner's counter of load ids, so they are
                                //  unique across its sessions (NULL: the role's)
    double rail_stall;          //  the time scale of a rail's fresh registration
                                //  retried after it failed (capability rejoin;
                                //  0: retried at the next request)
} pk_client_role_config_t;

#define PK_CLIENT_ROLE_CONFIG_DEFAULT { 30.0, 10.0, NULL, 0 }

typedef struct _pk_client_role_t pk_client_role_t;

pk_client_role_t *pk_client_role_new(const pk_client_role_config_t *config, pk_clock_t clock,
                                     pk_sender_t sender, pk_client_transport_t transport,
                                     pk_client_events_t events);
void pk_client_role_destroy(pk_client_role_t **self_p);

/*  Where the server's connect_ack listed rejoin: each rail revoked is
    offered again through offer, one a fetch or get (NULL: none is; a
    rail taken out stays out, as with a server that does not rejoin).  A
    setter, not a pk_client_transport_t op, so that the owners' tables
    stay as they are.  */
void pk_client_role_set_rail_offer(pk_client_role_t *self, pk_client_rail_offer_fn *offer,
                                   void *arg);

/*  Queues keys to ask about for a request; pk_client_role_flush sends one
    lookup per request with the keys not yet sent, each under a new round.  */
int pk_client_role_probe(pk_client_role_t *self, const char *kv, const pk_key_t *keys, size_t n);
void pk_client_role_flush(pk_client_role_t *self);

/*  Starts a load: keys into the consumer's blocks dest[].  round_seq is the
    answered lookup's round whose hits these are, or 0 for a fresh round;
    deadline is seconds from now (0: the load timeout).  *load_id_p names
    the load in load_done.  -EINVAL for a round that is not one of this
    request's answered lookups or was already fetched; -ENOTCONN once the
    server was cut off.  */
int pk_client_role_fetch(pk_client_role_t *self, const char *kv, const pk_key_t *keys,
                         const uint32_t *dest, size_t n, uint64_t round_seq, double deadline,
                         uint64_t *load_id_p);

/*  A get (the server's capability get; protocol.md section 3): keys into
    the consumer's blocks dest[] in one message, under a fresh round, for
    which the server looks the keys up and writes its hits.  Its one
    answer, get_resp, is given to lookup_done first (the hits, their
    checksums, the misses' reasons, as a lookup's answer), then ends the
    load as a transfer_done would, once the hits' blocks landed.  An abort
    (deadline, cancel, finish) ends it as a fetch's: no lookup_done then.
    Errors as pk_client_role_fetch's.  *round_p (may be NULL): the get's
    round, which its answer's lookup_done names.  */
int pk_client_role_get(pk_client_role_t *self, const char *kv, const pk_key_t *keys,
                       const uint32_t *dest, size_t n, double deadline, uint64_t *load_id_p,
                       uint64_t *round_p);

/*  Cancels load load_id: abort_fetch for its round, unless an abort went
    out already (its deadline passed) or the server answered already
    (the load waits for its landing blocks: nothing is sent).  The load
    then ends once, as PK_LOAD_ABORTED whatever ends it (abort_ack, a
    transfer_done that crossed the abort, success or not, the abort-ack
    timeout's cut off, the server gone), and only when nothing of the
    round can land any more (the fence of protocol.md section 7).  0, or
    -EINPROGRESS when cancelled already, -ENOENT when no open load has
    that id here (ended, or never this role's).  */
int pk_client_role_cancel(pk_client_role_t *self, uint64_t load_id);

/*  The request is done: its open loads are cancelled first (as by
    pk_client_role_cancel, each aborted before what follows), then the
    terminal empty fetch when it looked up, under the latest lookup whose
    hits were not fetched, else a fresh round.  */
int pk_client_role_finish(pk_client_role_t *self, const char *kv);

/*  A message from the server (epochs already checked by the session).
    Returns -EPROTO for a violation, 0 otherwise.  Violations: a second
    transfer_done for a round (also after its load ended), and a
    conflicting duplicate answer, a lookup_resp for an answered round of
    the same request and keys whose hits differ.  Ignored: stale answers
    (a round not asked, another request, other keys than asked), and a
    repeat of an answer with the same hits.  Ended loads and answered
    lookups are remembered, as hashes, for load_timeout +
    abort_ack_timeout; after that a late message is only stale.  */
int pk_client_role_on_message(pk_client_role_t *self, const pk_msg_t *msg);

/*  Why pk_client_role_on_message last returned -EPROTO (static text), or
    NULL.  */
const char *pk_client_role_violation(const pk_client_role_t *self);

/*  Timeouts, and loads waiting for their landing blocks.  */
void pk_client_role_tick(pk_client_role_t *self);

/*  The server is gone (disconnect, silence): cut off first, then every
    open load fails (reason is reported with each), then every lookup not
    answered yet gets lookup_done with hits NULL: no answer will come.  */
void pk_client_role_server_gone(pk_client_role_t *self, const char *reason);

/*  Probes wait for pk_client_role_flush.  */
bool pk_client_role_has_queued(const pk_client_role_t *self);

/*  Loads not ended yet.  */
size_t pk_client_role_open_loads(const pk_client_role_t *self);

/*  Lookups sent and not answered yet (nor given up: finish, server gone).  */
size_t pk_client_role_open_lookups(const pk_client_role_t *self);

#endif
