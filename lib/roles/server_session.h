/*  session.h: one consumer's session on a server (protocol.md sections 4-6).

    The session sits between the wire and the server role: it decodes the
    consumer's frames, drops stale or malformed ones, turns a broken rule
    into a `disconnect violation`, enforces the per-session limits, feeds
    the role, stamps epochs on what the role says, and keeps the peer's
    liveness.  Like the role it is a pure state machine: frames come in as
    bytes, frames go out through a callback, time comes from a pk_clock_t.
    One actor owns one session.
*/
#ifndef PK_SERVER_SESSION_H_INCLUDED
#define PK_SERVER_SESSION_H_INCLUDED

#include "base/clock.h"
#include "wire/protocol.h"
#include "roles/server_role.h"
#include "base/transport.h"

/*  What the server is: checked against every connect.  */
typedef struct {
    const char *peer_id;
    uint64_t block_len;
    uint64_t num_blocks;
    const char *fingerprint;
    const char *hash_seed;
    const char *provider;           //  the best of providers (old consumers read it alone)
    const char *const *providers;   //  every data-plane provider offered, best first;
    size_t nproviders;              //  none: provider alone
    const char *host;               //  its same-host identity (base/host_id.h), or NULL
    const char *caps;               //  words its description lists (rails), or NULL
} pk_server_identity_t;

typedef struct {
    pk_server_role_config_t role;
    double silence_timeout;         //  retire after this long without a frame (10 s)
    uint64_t max_requests;          //  live requests (16,384)
    uint64_t max_parked_keys;       //  keys in lookups not yet answered (65,536)
    uint64_t max_rounds;            //  rounds per request (1,024)
    uint64_t pin_quota;             //  blocks pinned at once for this session
    bool no_get;                    //  offer no capability get (--gets off)
} pk_server_session_config_t;

typedef enum {
    PK_SERVER_SESSION_LIVE = 0,
    PK_SERVER_SESSION_RETIRED              //  disconnect sent (or received); tear down
} pk_server_session_status_t;

/*  The rule a consumer broke, by class: the reason label of the daemon's
    violation counter.  FLOOD is what the node's door saw (the session
    counts it when retired with PK_DISC_VIOLATION from outside).  */
typedef enum {
    PK_VIOLATION_MALFORMED = 0,         //  a frame that breaks the schema
    PK_VIOLATION_DIRECTION,             //  a message that flows server to consumer
    PK_VIOLATION_CONNECT_CHANGED,       //  connect repeated with other fields
    PK_VIOLATION_LIMIT_REQUESTS,        //  too many live requests
    PK_VIOLATION_LIMIT_LOOKUP_KEYS,     //  too many keys in unanswered lookups
    PK_VIOLATION_LIMIT_ROUNDS,          //  too many rounds in one request
    PK_VIOLATION_BLOCK_INDEX,           //  a fetch outside the consumer's pool
    PK_VIOLATION_DUPLICATE_FETCH,       //  a second fetch for a round with demand
    PK_VIOLATION_FLOOD,                 //  the node retired it (flooding its door)
    PK_VIOLATION_UNREAD,                //  answers left unread past the room for them
    PK_VIOLATION_RAIL_OFFER,            //  a rail_offer refused (capability rejoin)
    PK_VIOLATION_COUNT
} pk_violation_t;

/*  The class's label value ("malformed", "limit_rounds", ...).  */
const char *pk_violation_name(pk_violation_t reason);

/*  What a session counted since it was made, each count with the metric
    the daemon exports for it (base/counts.h; metric_families.h): frames,
    messages and violations.  A dropped frame is counted by why it was,
    with no metric each (F rows): metric_families.h sums the three into
    p2pkv_frames_dropped_total.  A new count is a row here and the line in
    server_session.c that counts it.  */
#define PK_SERVER_SESSION_COUNTS(M, F) \
    M(frames, FRAMES, "p2pkv_frames_total", COUNTER, \
      "Frames received from peers with a session", NONE) \
    F(dropped_bad)                  /* did not decode */ \
    F(dropped_unknown)              /* of a type this server does not know */ \
    F(dropped_stale)                /* not this session's epochs */ \
    M(lookups, LOOKUPS, "p2pkv_lookups_total", COUNTER, "Lookup messages", NONE) \
    M(keys, LOOKUP_KEYS, "p2pkv_lookup_keys_total", COUNTER, "Keys in lookup messages", NONE) \
    M(fetches, FETCHES, "p2pkv_fetches_total", COUNTER, "Fetch messages (rounds)", NONE) \
    M(gets, GETS, "p2pkv_gets_total", COUNTER, \
      "Get messages (a lookup and a fetch in one: counted in both too)", NONE) \
    M(aborts, ABORTS, "p2pkv_aborts_total", COUNTER, "Abort messages", NONE) \
    M(violations, VIOLATIONS, "p2pkv_violations_total", COUNTER, \
      "Sessions ended for a protocol violation", NONE)

/*  The session's counts, violations also by class (the sum of by_reason
    is violations), and its role's counts, which the role counts straight
    into role (pk_server_role_count_into), so they outlive it with no
    copy.  */
typedef struct {
    PK_SERVER_SESSION_COUNTS(PK_COUNT_FIELD, PK_COUNT_FIELD_ONLY)
    uint64_t by_reason[PK_VIOLATION_COUNT];
    pk_server_role_counters_t role;
} pk_server_session_counters_t;

typedef struct _pk_session_t pk_server_session_t;

/*  The out callback gets each encoded frame to send to the consumer.  */
typedef void (pk_server_session_out_fn)(void *arg, const char *frame, size_t len);

/*  The description frame answering `describe` (no session needed).  */
int pk_server_session_description(const pk_server_identity_t *id, char **frame_p, size_t *len_p);

/*  Checks a decoded connect against the server: 0, or -EPROTO with the
    reason naming the field and both values (for `disconnect incompatible`).  */
int pk_server_session_check_connect(const pk_server_identity_t *id, const pk_msg_t *connect,
                             char *reason, size_t len);

/*  A disconnect frame; for `incompatible` it carries the server's values.
    epochs may be NULL (no session).  */
int pk_server_session_disconnect_frame(const pk_server_identity_t *id, pk_disconnect_code_t code,
                                const char *reason, const uint8_t *source_epoch,
                                const uint8_t *target_epoch, char **frame_p, size_t *len_p);

/*  A session for an accepted connect (checked, its address imported into
    transport).  The role is created over transport and parent; the
    session answers connect_ack through out at once.  */
pk_server_session_t *pk_server_session_new(const pk_server_identity_t *id, const pk_server_session_config_t *config,
                             const pk_msg_t *connect, pk_clock_t clock, pk_transport_t transport,
                             pk_parent_t parent, pk_server_session_out_fn *out, void *out_arg);
void pk_server_session_destroy(pk_server_session_t **self_p);

/*  One frame from the consumer.  */
pk_server_session_status_t pk_server_session_on_frame(pk_server_session_t *self, const void *data, size_t len);

/*  The periodic work: role timeouts and completions, drains, parked
    lookups, silence.  */
pk_server_session_status_t pk_server_session_tick(pk_server_session_t *self);

/*  What tick does but judge the peer's silence: the channel's completions
    and reports collected, the role run.  For a frame in hand, before it
    is read: its arrival ends the silence, and an actor late to wake on a
    loaded machine must not retire the session that just spoke.  */
pk_server_session_status_t pk_server_session_collect(pk_server_session_t *self);

/*  Lookup and fetch latencies (receipt to lookup_resp, fetch to
    transfer_done or abort_ack), reported with the consumer's peer_id: the
    daemon files them in its histograms.  The session keeps no metrics of
    its own, so it needs nothing above the roles.  */
typedef enum { PK_LATENCY_LOOKUP, PK_LATENCY_FETCH } pk_latency_t;
typedef void (pk_latency_fn)(void *arg, pk_latency_t which, const char *peer, double seconds);
void pk_server_session_set_latency(pk_server_session_t *self, pk_latency_fn *fn, void *arg);

/*  Whether the consumer has room for one more frame of len bytes: 0, or
    -ENOBUFS with why (a clause, "more than N bytes of answers unread")
    when it left too many of the session's answers unread.  The session
    asks before it hands each frame to out; past the room it drops that
    frame and what follows it, and ends as a violation of class
    PK_VIOLATION_UNREAD (its disconnect, a few hundred bytes, goes out
    without asking: it is the session's last frame).  The session cannot
    see what was read (that is the daemon's socket), so it is told.  */
typedef int (pk_server_session_room_fn)(void *arg, size_t len, char *why, size_t cap);
void pk_server_session_set_room(pk_server_session_t *self, pk_server_session_room_fn *fn,
                                void *arg);

/*  The local engine's prefill store and finish for this consumer.  A
    store's blocks count against the consumer's pin quota (roles/quota.h):
    -EDQUOT when they would pass it, and the caller unpins the job.  */
int pk_server_session_store(pk_server_session_t *self, const char *kv, const pk_key_t *keys,
                     const uint32_t *blocks, size_t n, uint64_t job_id, bool has_round,
                     uint64_t round);
int pk_server_session_finish(pk_server_session_t *self, const char *kv);

/*  Retires the session: sends disconnect with code and reason (unless the
    consumer itself disconnected) and closes the role, handing every job
    still owed a result back to the parent as failed.  Idempotent.  A live
    session retired with PK_DISC_VIOLATION counts a PK_VIOLATION_FLOOD.  */
void pk_server_session_retire(pk_server_session_t *self, pk_disconnect_code_t code, const char *reason);

bool pk_server_session_has_inflight(const pk_server_session_t *self);
/*  In flight and written (pk_server_role_has_writes): lent transfers end
    at the consumer's report, which is read at the next frame or look.  */
bool pk_server_session_has_writes(const pk_server_session_t *self);
bool pk_server_session_has_parked(const pk_server_session_t *self);
/*  Whether the session owes its consumer nothing it already asked for: no
    write in flight, no lookup unanswered, no supply (a lookup's pinned
    hits, an engine's store) waiting for its fetch, no abort unacknowledged.
    What the daemon's drain waits for before it says shutdown
    (p2pkv-server(8), SIGNALS).  A read of the role's state: nothing
    changes.  */
bool pk_server_session_settled(const pk_server_session_t *self);
const uint8_t *pk_server_session_consumer_epoch(const pk_server_session_t *self);
const char *pk_server_session_consumer_id(const pk_server_session_t *self);
/*  True when a connect frame repeats this session's (same epoch and
    fields): the answer is the same connect_ack.  */
bool pk_server_session_same_connect(const pk_server_session_t *self, const pk_msg_t *connect);
void pk_server_session_counters(const pk_server_session_t *self, pk_server_session_counters_t *out);
/*  The reason the session retired ("" while live).  */
const char *pk_server_session_reason(const pk_server_session_t *self);

#endif
