/*  server_role.h: the producer side of one peer session (the seed's
    ServerRole, with the fixes of doc/architecture.md), as a pure state
    machine.

    It matches supply (blocks the local engine stored for a request, or
    blocks pinned for a lookup's hits) against the peer's fetch demand,
    round by round, and drives writes through the transport.  It owns no
    socket, thread or clock: everything outside comes through the four
    seams below, so the daemon, p2pkv-replay and the unit tests run the
    same code.  The exact rules are doc/replay.md's.  Not thread-safe: one
    actor owns one role.
*/
#ifndef PK_SERVER_ROLE_H_INCLUDED
#define PK_SERVER_ROLE_H_INCLUDED

#include "base/clock.h"
#include "base/counts.h"
#include "wire/protocol.h"
#include "base/transport.h"
#include "base/parent.h"

typedef struct {
    void *self;
    /*  One message to the peer, without epochs (the session adds them).  */
    void (*send)(void *self, const pk_msg_t *msg);
} pk_sender_t;

typedef struct {
    double lookup_timeout;      //  parked lookup keys answer miss after this (5 s)
    double store_timeout;       //  a store job fails its round after this (30 s)
    double drain_timeout;       //  then cancel in immediate mode (10 s)
    bool reasons;               //  lookup answers say why each miss is one (the
                                //  consumer's capability `reasons`); misses are
                                //  counted by reason either way
    bool lend;                  //  a get's hits are lent, not written, where the
                                //  transport lends (capability lend, both
                                //  sides): its get_resp names their blocks and
                                //  goes at once; the round ends at the
                                //  consumer's report (protocol.md section 7)
    bool rails;                 //  the round's answers carry its blocks per
                                //  consumer rail (capability rails, both
                                //  sides; the transport's rails_landing)
    bool stream_gets;           //  a get whose lookup parks writes each hit as
                                //  it is pinned, not after the lookup's last
                                //  key (--stream-gets; off: the seed's order,
                                //  as replay runs it; never with lend)
} pk_server_role_config_t;

#define PK_SERVER_ROLE_CONFIG_DEFAULT { 5.0, 30.0, 10.0, false, false, false, false }

typedef struct {
    size_t requests;            //  live requests (kept ones not counted)
    size_t inflight;            //  transfers in flight
    size_t store_jobs;          //  jobs whose result is not decided yet
    size_t aborts;              //  aborts not yet acked
    size_t serve_pending;       //  requests with lookup work for the next serve
    size_t kept;                //  kept rounds and requests (replay.md "Kept state")
    size_t lookup_keys;         //  keys of lookups not yet answered (a session limit)
} pk_server_role_state_t;

/*  What the role has counted since it was made, each count with the
    metric the daemon exports for it (base/counts.h; metric_families.h
    publishes them with the session's): the lookup keys it answered as
    hits and as misses (every key in wire order, repeats included), the
    keys still being written when their lookup's deadline passed
    (distinct within a lookup; answered as misses, so counted there too),
    and the store jobs whose timeout passed before their result.  A new
    count is a row here and the line in server_role.c that counts it.  */
#define PK_SERVER_ROLE_COUNTS(M, F) \
    M(hits, LOOKUP_HITS, "p2pkv_lookup_hits_total", COUNTER, \
      "Lookup keys answered as hits (in wire order, repeats included)", NONE) \
    M(misses, LOOKUP_MISSES, "p2pkv_lookup_misses_total", COUNTER, \
      "Lookup keys answered as misses (in wire order, repeats included)", NONE) \
    M(expired, LOOKUP_EXPIRED, "p2pkv_lookup_pending_expired_total", COUNTER, \
      "Lookup keys still being written at the lookup deadline, answered as misses", NONE) \
    M(store_timeouts, STORE_TIMEOUTS, "p2pkv_store_timeouts_total", COUNTER, \
      "Store jobs that timed out, failing their round", NONE)

/*  And the misses again by reason (base/miss_reason.h), each key in wire
    order as misses counts them (the sum is misses): the daemon exports
    them as p2pkv_lookup_misses_by_reason_total{reason}.  */
typedef struct {
    PK_SERVER_ROLE_COUNTS(PK_COUNT_FIELD, PK_COUNT_FIELD_ONLY)
    uint64_t miss_reasons[PK_MISS_COUNT];
} pk_server_role_counters_t;

typedef struct _pk_server_role_t pk_server_role_t;

pk_server_role_t *pk_server_role_new(const char *peer_id, const pk_server_role_config_t *config,
                                     pk_clock_t clock, pk_sender_t sender,
                                     pk_transport_t transport, pk_parent_t parent);
void pk_server_role_destroy(pk_server_role_t **self_p);

/*  The local engine stored blocks for a request (prefill/decode).  With
    has_round the supply joins that round, else replay.md's unbound-supply
    rule applies.  Job ids are the store's, unique.  Returns 0 or -ENOMEM.  */
int pk_server_role_store(pk_server_role_t *self, const char *kv_request_id,
                         const pk_key_t *keys, const uint32_t *blocks, size_t n,
                         uint64_t job_id, bool has_round, uint64_t round_seq);

/*  Messages from the peer.  on_fetch returns -EPROTO for a duplicate fetch
    (a protocol violation; the role is left as it was).  */
int pk_server_role_on_lookup(pk_server_role_t *self, const char *kv_request_id,
                             const pk_key_t *keys, size_t n, uint64_t round_seq);
int pk_server_role_on_fetch(pk_server_role_t *self, const char *kv_request_id,
                            const pk_key_t *keys, const uint32_t *remote, size_t n,
                            uint64_t round_seq);
/*  A get (capability get, protocol.md section 3): a lookup of keys whose
    hits are then written to remote[] (the keys' destination blocks) as a
    fetch of its round would write them, the round's end answered with one
    get_resp instead of the lookup_resp and the transfer_done.  The keys
    are distinct (the codec's rule).  -EPROTO when the round is one the
    request has already (a violation); 0 or -ENOMEM otherwise.  The next
    serve answers the lookup and starts the writes.  */
int pk_server_role_on_get(pk_server_role_t *self, const char *kv_request_id,
                          const pk_key_t *keys, const uint32_t *remote, size_t n,
                          uint64_t round_seq);
int pk_server_role_on_abort(pk_server_role_t *self, const char *kv_request_id,
                            uint64_t round_seq);

/*  The local engine finished the request.  */
int pk_server_role_finish(pk_server_role_t *self, const char *kv_request_id);

/*  One serve window: resolve queued and parked lookups against the parent.  */
void pk_server_role_serve(pk_server_role_t *self);
/*  Store-job timeouts, this peer's finished transfers, expiry of kept
    state, then every queued result to the parent.  */
void pk_server_role_collect(pk_server_role_t *self);
/*  The sweep while no connection is up: collect without the transport.  */
void pk_server_role_collect_idle(pk_server_role_t *self);
/*  Re-cancel every draining round (immediate once its deadline passed).  */
void pk_server_role_drain(pk_server_role_t *self);

/*  Tears down: cancels every transfer in immediate mode, hands every queued
    result to the parent, and reports the jobs still owed a result (failed
    by the teardown, ascending, malloc'd into *jobs_p) and the number of
    lookups still owed on_request_finished.  The role is then closed: every
    other call is refused with -EPIPE.  */
int pk_server_role_close(pk_server_role_t *self, uint64_t **jobs_p, size_t *njobs_p,
                         size_t *owed_p);

bool pk_server_role_has_inflight(const pk_server_role_t *self);
/*  Transfers in flight that are writes, not lent (config.lend): only
    those need their owner watching the channel for completions.  */
bool pk_server_role_has_writes(const pk_server_role_t *self);
/*  Lookups wait for keys the engine is still writing: they are resolved
    when the serve window runs, so it should run often.  */
bool pk_server_role_has_parked(const pk_server_role_t *self);
/*  Live rounds of a request (the unbound one included); *exists_p tells
    whether the request is live at all.  For the session's limits.  */
size_t pk_server_role_rounds(const pk_server_role_t *self, const char *kv, bool *exists_p);
void pk_server_role_state(const pk_server_role_t *self, pk_server_role_state_t *state);
/*  The counters; they survive close.  */
void pk_server_role_counters(const pk_server_role_t *self, pk_server_role_counters_t *out);
/*  From now on the role counts into *counters (its owner's, which outlive
    the role: a session's are read after its role is gone), starting from
    what it counted so far.  */
void pk_server_role_count_into(pk_server_role_t *self, pk_server_role_counters_t *counters);
/*  The transport was cancelled in immediate mode since the last call: the
    session must retire (bytes already queued may still land).  */
bool pk_server_role_take_forced(pk_server_role_t *self);

#endif
