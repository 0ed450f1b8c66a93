/*  p2pkv.h: the client library: have a server's KV-cache blocks written
    straight into your memory.

    A client owns (or is given) a pool of num_blocks * block_len bytes and
    connects to one or more p2pkv-servers; for each it keeps a session with
    its own libfabric endpoint and registration of the pool.  Ask a server
    which keys it holds (lookup), then have the hits written into chosen
    blocks of the pool (fetch); each fetch ends exactly once, by callback
    from p2pkv_client_poll, as landed (every byte is in the pool), failed
    or aborted, and only then may its destination blocks be reused.

    A server that goes away (disconnect, silence, a violation, a fetch
    stalled mid-transfer) is cut off first (its endpoint and registration
    closed, so nothing from it lands any more), then its open fetches fail
    and its unanswered lookups are answered with no hits (hits NULL);
    on_server reports it DOWN, and the client connects again on its own,
    as a new session, every connect_retry until it is UP.
    A server that refuses us as incompatible (block length, fingerprint,
    hash seed, wire version, provider) is STOPPED: never retried, with the
    reason.

    Threads: every function may be called from any thread; one lock
    serializes them.  Callbacks run with that lock held, on the thread
    that drives the client (p2pkv_client_poll, or the progress thread),
    and may call client functions.  Every pointer a callback is given
    (kv, keys and their bytes, hits, reason) stays valid for the whole
    callback, whatever client function it calls (on_lookup may pass kv
    and keys straight to p2pkv_client_fetch), and not after it returns:
    copy what you keep.  Nothing runs in the background unless
    config.progress_thread is set: then a thread of the client's sleeps on
    p2pkv_client_fd and keeps every endpoint, socket and timer serviced,
    also while idle, and runs the callbacks.  Without it, call
    p2pkv_client_poll whenever p2pkv_client_fd is readable (or at least
    every few milliseconds), also while idle: a target that does not
    progress its endpoint stalls writers, and heartbeats need it too.
*/
#ifndef P2PKV_H_INCLUDED
#define P2PKV_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*  Bytes of every err and reason buffer this API fills: one sentence
    naming what was wrong, always NUL-terminated.  */
#define P2PKV_ERRLEN 256

typedef struct _p2pkv_client_t p2pkv_client_t;

typedef struct {
    const uint8_t *bytes;
    size_t len;
} p2pkv_key_t;

typedef enum {
    P2PKV_LANDED = 0,
    P2PKV_FAILED,
    P2PKV_ABORTED
} p2pkv_status_t;

typedef enum {
    P2PKV_SERVER_CONNECTING = 0,    //  handshaking, first time or again
    P2PKV_SERVER_UP,                //  a live session: lookup and fetch work
    P2PKV_SERVER_DOWN,              //  gone; connecting again
    P2PKV_SERVER_STOPPED            //  refused as incompatible, or disconnected by us
} p2pkv_server_state_t;

#define P2PKV_MAX_PROVIDERS 8

typedef struct {
    char peer_id[256];
    uint64_t block_len;
    char fingerprint[256];
    char hash_seed[256];
    char provider[64];              //  the best of providers
    /*  Every data-plane provider the server offers, best first (a server
        older than the list: provider alone), and its same-host identity
        ("" when it sent none): a consumer whose own identity is the same
        runs on that host, in its namespaces, and may use shm.  */
    char providers[P2PKV_MAX_PROVIDERS][64];
    size_t nproviders;
    char host[128];
} p2pkv_description_t;

typedef struct {
    void *arg;
    /*  A lookup's answer: keys in the order asked, hits parallel.  Every
        lookup gets exactly one: hits is NULL when the server went away
        before answering (after its open fetches failed).  */
    void (*on_lookup)(void *arg, int server, const char *kv, uint64_t round,
                      const p2pkv_key_t *keys, const bool *hits, size_t n);
    /*  A fetch ended; its destination blocks may be reused now.  */
    void (*on_fetch)(void *arg, int server, uint64_t fetch_id, p2pkv_status_t status,
                     const char *reason);
    /*  A server's session changed state (after p2pkv_client_connect
        returned it): DOWN with why, UP again, STOPPED with why.  */
    void (*on_server)(void *arg, int server, p2pkv_server_state_t state, const char *reason);
} p2pkv_callbacks_t;

/*  The timeouts are named as p2pkv-server's options of the same meaning
    (doc/p2pkv-server.8: --load-timeout, --abort-ack-timeout,
    --keepalive-interval, --silence-timeout, --connect-retry,
    --stall-timeout), in seconds; 0 (or less) means the default.  */
typedef struct {
    const char *peer_id;            //  this consumer's name (required)
    const char *fingerprint;        //  must equal the servers' ("")
    const char *hash_seed;          //  must equal the servers' ("0")
    /*  data-plane provider: one name ("tcp", "shm", "mmap") is used for
        every server (one that does not offer it refuses the connect,
        naming what it offers); NULL or "auto": per server, the best one
        it describes that this machine has: mmap or shm, whichever it
        lists first, when it runs on this host (p2pkv_description_t.host),
        else the first network provider of its list.  mmap is p2pkv's own:
        the client copies from the server's pool, mapped read-only (the
        same user only).  The client opens one fabric per provider it
        uses.  */
    const char *provider;
    const char *node;               //  local address for the fabric (NULL: any);
                                    //  "A,B": one rail per address (p2pkv(3))
    double load_timeout;            //  30 s: a fetch without transfer_done is aborted
    double abort_ack_timeout;       //  10 s: then the server is cut off, the fetch failed
                                    //  (ABORTED when it was cancelled)
    double keepalive_interval;      //  2 s: ping a server we sent nothing to
    double silence_timeout;         //  10 s: a server silent that long is DOWN
    double connect_retry;           //  0.5 s: connect repeated until answered, and a
                                    //  new session after a loss
    double stall_timeout;           //  5 s: a fetch whose blocks began to land and then
                                    //  none lands this long: the server is cut off
                                    //  (DOWN, its fetches failed), as a stuck one
    bool no_reconnect;              //  a server gone stays DOWN
    bool progress_thread;           //  a thread of the client's drives it
    /*  CURVE (doc/security.md): all three, or none (NULL: plain TCP).  Z85
        text, 40 characters each, as in a czmq certificate (p2pkv keygen).
        With them every control socket (sessions, p2pkv_describe_curve)
        authenticates this consumer to the server and encrypts; a server
        that refuses the key fails p2pkv_client_connect with -EACCES,
        "the server refused our CURVE key".  At the end of the struct, so
        that code built before them (zeroing the struct) is unchanged.  */
    const char *curve_public;       //  this consumer's public key
    const char *curve_secret;       //  this consumer's secret key
    const char *curve_server;       //  the server's public key (per server:
                                    //  p2pkv_client_connect_curve)
    //  the cluster directory (issue 14)
    const char *directory;          //  redis://HOST:PORT[,HOST:PORT...][/DB] (a Cluster's
                                    //  seed nodes, tried in turn): p2pkv_client_locate and
                                    //  p2pkv_client_get of P2PKV_ANY_SERVER (NULL: none)
    /*  After a lookup, fetch or cancel, the thread driving the client
        (p2pkv_client_poll's caller, or the progress thread) looks for the
        answer without sleeping for this long, giving its core away
        between looks (sched_yield), then sleeps on the fd: 0 means 200 us,
        negative never.  Waking a sleeping thread is most of a round trip
        on a virtual machine (a one-key lookup: 47 us p50 spinning, 115
        sleeping); the cost is up to this much CPU per request.  */
    double answer_spin;
    /*  The end-to-end check (issue 34; protocol.md section 7, "Block
        checksums"): by default every block a get lands is hashed in this
        client's memory (XXH3-64) and compared with the checksum its
        server announced in the lookup answer before it is reported
        landed; a block that differs is P2PKV_KEY_CORRUPT, never landed.
        no_verify turns that off (and the client stops asking servers for
        checksums): measured cost in README, "Benchmarks".  */
    bool no_verify;
    /*  A server whose blocks fail their check this many times in a row
        (0: 8) is treated as hostile: its session is ended (DOWN, then a
        new one, unless no_reconnect), counted (p2pkv_client_checks) and
        said once in its reason.  */
    unsigned max_corrupt;
} p2pkv_config_t;

/*  answer_spin's default (seconds): what 0 means.  */
#define P2PKV_ANSWER_SPIN 200e-6

/*  Learns a server's block length, fingerprint and hash seed (so a tool
    can size its pool before connecting).  0 or a negative errno with err
    (P2PKV_ERRLEN bytes) naming the endpoint; as p2pkv_client_connect,
    each said as soon as it is seen, not at the end of timeout:
    -EINVAL an endpoint without its transport (tcp://HOST:PORT, ipc://PATH,
    inproc://NAME), -ENOENT a host name that does not resolve (the
    resolver's own error), -ECONNREFUSED nothing listens there (or the
    kernel's errno of another failed connection: -EHOSTUNREACH ...),
    -EPROTO not a p2pkv/ZeroMQ port (it sent something else, or closed
    the connection without a ZeroMQ greeting), -EACCES CURVE (below),
    -ETIMEDOUT no answer (err says how far the connection got).  */
int p2pkv_describe(const char *endpoint, double timeout, p2pkv_description_t *out, char *err);

/*  p2pkv_describe of a server that runs CURVE (p2pkv-server
    --curve-secret): the DEALER uses config's curve_public, curve_secret
    and curve_server (config NULL, or none of them: as p2pkv_describe; its
    other fields are not read).  -EINVAL for a bad or partial set of keys
    (err names the field), -EACCES when the server refused the key, or
    only one side has CURVE.  A CURVE server answers no describe from a
    consumer whose key it does not allow.  */
int p2pkv_describe_curve(const char *endpoint, double timeout, const p2pkv_config_t *config,
                         p2pkv_description_t *out, char *err);

/*  A client over pool (num_blocks * block_len bytes the caller owns), or
    over a pool it allocates when pool is NULL.  */
p2pkv_client_t *p2pkv_client_new(const p2pkv_config_t *config, void *pool, uint64_t num_blocks,
                                 uint64_t block_len, p2pkv_callbacks_t callbacks, char *err);
/*  Stops the progress thread, says goodbye to every server and frees
    everything (the pool too, when the client allocated it).  Not from a
    callback.  */
void p2pkv_client_destroy(p2pkv_client_t **self_p);
uint8_t *p2pkv_client_pool(p2pkv_client_t *self);

/*  Connects to a server, waiting up to timeout for its connect_ack.
    Returns the server's index (>= 0; the same index again for an
    endpoint already connected) or a negative errno with err: -EPROTO when
    refused as incompatible (err names the field that differs) or not a
    p2pkv/ZeroMQ port, -ETIMEDOUT, -ENOSPC beyond 64 servers at once,
    -EACCES when the server refused our CURVE key (or one side has CURVE,
    the other not), and as p2pkv_describe: -EINVAL, -ENOENT,
    -ECONNREFUSED, each said at once.  A session that was UP and lost its
    server connects again while refused (the server restarting).  While
    it waits, only this server is serviced (unless the progress thread
    runs).  */
int p2pkv_client_connect(p2pkv_client_t *self, const char *endpoint, double timeout, char *err);

/*  p2pkv_client_connect to a CURVE server whose public key (Z85) is
    server_key rather than config.curve_server: a client of several
    servers, each with its own key.  The client needs its CURVE keypair
    (config): -EINVAL without it, or for a bad server_key.  -EACCES when
    the server refused our key (or does not use CURVE).  */
int p2pkv_client_connect_curve(p2pkv_client_t *self, const char *endpoint,
                               const char *server_key, double timeout, char *err);

/*  Ends the session with a server (its open fetches fail, cut off first)
    and frees its index for another connect.  */
int p2pkv_client_disconnect(p2pkv_client_t *self, int server);

/*  A server's state, and why it is DOWN or STOPPED (reason: P2PKV_ERRLEN bytes, or
    NULL); while it is UP after a fallback (auto: the server refused the
    same-host provider, mmap or shm, as for a consumer of another user),
    which provider was refused, why, and the one in use.  -EINVAL for an
    index that names no server.  */
int p2pkv_client_server_state(p2pkv_client_t *self, int server, char *reason);

/*  The data-plane provider of the server's channel ("shm", "tcp;ofi_rxm"),
    as chosen at connect (config.provider), into out (cap bytes): 0, or
    -EINVAL for an index that names no server.  */
int p2pkv_client_server_provider(p2pkv_client_t *self, int server, char *out, size_t cap);

/*  The endpoint the server was connected at (tcp://HOST:PORT), into out
    (cap bytes): 0, or -EINVAL for an index that names no server.  With a
    result's holder, where a key came from; for a get of P2PKV_ANY_SERVER
    the holders the call connected are servers of the client like any
    other.  (Symbol version P2PKV_0.2.)  */
int p2pkv_client_server_endpoint(p2pkv_client_t *self, int server, char *out, size_t cap);

/*  Asks the server about keys; the answer comes to on_lookup.  The keys
    go out at the next poll (or progress-thread step): a request's
    lookups made before it travel as one lookup, keys already asked for
    that request are not asked again.  */
int p2pkv_client_lookup(p2pkv_client_t *self, int server, const char *kv,
                        const p2pkv_key_t *keys, size_t n);
/*  (lookup and fetch: -EINVAL for n 0 or over 65,536, a key of 0 or more
    than 4,096 bytes, or a kv that is not 1..4,096 bytes of UTF-8, which
    the wire cannot carry; so for every call naming a kv, finish too.)  */

/*  Has the server write keys into blocks dest[] of the pool.  round: the
    lookup's round whose hits these are (from on_lookup), or 0.  deadline
    in seconds (0: load_timeout).  The end comes to on_fetch.  */
int p2pkv_client_fetch(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
                       const uint32_t *dest, size_t n, uint64_t round, double deadline,
                       uint64_t *fetch_id_p);

typedef void (p2pkv_progress_fn)(void *arg, size_t landed, size_t n);

/*  Gets keys[i] into block dest[i] of the pool, as many as the server
    holds, and waits for it: looks up what is left, fetches the hits, and
    asks again while that makes progress (a server pins at most its quota
    of blocks per session; keys beyond it answer as misses), for the keys
    whose miss may change at once: not those the server said it does not
    hold, evicted, or cannot serve while draining.  With fetch
    false it only looks up, once.  landed[i] says which arrived (or, not
    fetching, which the server holds).  Each answer is waited for up to
    timeout seconds.  Runs on the calling thread and does not go through
    the callbacks; progress, if given, is called after each batch with
    the count so far.  Requests are named kv-0, kv-1, ...  Returns the
    count, or a negative errno with err: -ETIMEDOUT or -ENOTCONN (no
    answer to a lookup), -EIO (a fetch failed or was aborted at its
    deadline), -ECANCELED (p2pkv_client_finish of kv on that server from
    another thread, or a p2pkv_client_cancel of its fetch: returned only
    once that fetch ended, so the blocks may be reused), -EBUSY (a get of
    the same kv on the same server runs); landed[] still says what
    arrived before (not the cancelled batch's blocks).
    Gets of different requests, or on different servers, may run at once
    from several threads: each waits for its own answers only.
    server P2PKV_ANY_SERVER (with config.directory): the keys are located
    (p2pkv_client_locate), spread over their live holders (those on this
    host first, then the least loaded), each holder connected as needed
    and asked with a get of its own (kv-aN-sM); keys a holder did not
    deliver are asked of another holder within the same call: a holder
    that failed (died, refused, timed out) is not asked again in this
    call, and one that answered a key as a miss (it evicted it since) has
    its directory entry for that key removed.  Keys no live holder
    delivered are left false in landed[]; -ENOTCONN with err when the
    directory is down.  timeout bounds each step (a holder's connect,
    each of its answers), not the call: a dead holder costs at most one
    timeout before the next is asked, rather than a share of one call
    deadline that the first dead holder would use up.  */
int p2pkv_client_get(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
                     const uint32_t *dest, size_t n, bool fetch, double timeout, bool *landed,
                     p2pkv_progress_fn *progress, void *progress_arg, char *err);

/*  The cluster directory (issue 14; doc/directory.md).  With
    config.directory set, a client finds keys' holders in Redis, where
    every p2pkv-server started with --directory keeps the keys it holds.
    A holder is listed only while its record is live (refreshed by its
    heartbeat; a server killed drops out when the record's TTL ends).
    The directory is one connection under its own lock, never the
    client's: locating never stalls the other calls or the progress
    thread.  */

/*  One key's result of p2pkv_client_get_results, the one definition of a
    per-key outcome for the C API, the Python package and the CLI.  */
typedef enum {
    P2PKV_KEY_LANDED = 0,           //  its bytes are in dest (checked, when verified)
    P2PKV_KEY_MISSING,              //  no server asked had it (reason says why, where known)
    P2PKV_KEY_CORRUPT,              //  it landed, but its bytes differ from the checksum
                                    //  its server announced: dest holds wrong bytes
    P2PKV_KEY_FAILED                //  it was a hit, but its fetch failed or the call
                                    //  ended first (server gone, timeout, cancel)
} p2pkv_key_status_t;

/*  Why a key is MISSING.  A server with the `reasons` capability says why
    each miss is one (protocol.md); an older server's misses are UNKNOWN.
    A reason never says more than the client's namespace may know: a key
    only another tenant holds is ABSENT.  Appended only.  */
typedef enum {
    P2PKV_MISS_UNKNOWN = 0,         //  the server answered miss, without a reason
    P2PKV_MISS_NO_HOLDER,           //  (P2PKV_ANY_SERVER) the directory named no live holder
    P2PKV_MISS_ABSENT,              //  the server does not hold it
    P2PKV_MISS_EVICTED,             //  it held it until its pool evicted it (recently)
    P2PKV_MISS_PENDING,             //  being written there when asked, and not landed
                                    //  by the lookup's deadline (--lookup-timeout)
    P2PKV_MISS_QUOTA,               //  held, but this client's pin quota was full: ask
                                    //  again once its fetches end
    P2PKV_MISS_WRITING,             //  being written there now (ask again soon)
    P2PKV_MISS_DRAINING             //  the server is draining (stopping): ask another
} p2pkv_miss_reason_t;

/*  A reason's name: "unknown", "no_holder", "absent", "evicted",
    "pending", "quota", "writing", "draining" ("unknown" for any other
    value).  (Symbol version P2PKV_0.3.)  */
const char *p2pkv_miss_reason_name(int reason);

typedef struct {
    uint8_t status;                 //  a p2pkv_key_status_t
    uint8_t reason;                 //  a p2pkv_miss_reason_t, when MISSING
    bool verified;                  //  LANDED or CORRUPT: compared with checksum
    uint8_t reserved;               //  0
    int32_t holder;                 //  the server index it came from (or was a hit
                                    //  on), -1 when none
    uint64_t checksum;              //  the checksum its server announced (0: none)
} p2pkv_key_result_t;

/*  p2pkv_client_get with a result per key (results: n items) in place of
    landed[]: every key ends LANDED, MISSING, CORRUPT or FAILED, whatever
    the return value.  A corrupt block is a result for its key, not a
    failed call: the count returned is of LANDED keys.  Errors as
    p2pkv_client_get's.  (Symbol version P2PKV_0.1.)  */
int p2pkv_client_get_results(p2pkv_client_t *self, int server, const char *kv,
                             const p2pkv_key_t *keys, const uint32_t *dest, size_t n, bool fetch,
                             double timeout, p2pkv_key_result_t *results,
                             p2pkv_progress_fn *progress, void *progress_arg, char *err);

/*  A get that does not wait (symbol version P2PKV_0.5): keys[i] into
    block dest[i] of the pool, in one message to a server that offers the
    capability get (protocol.md section 3): it looks the keys up and
    writes its hits, and answers once, after they landed.  A server that
    does not offer get (one run with --gets off, or older) gets the two
    steps, taken by the client without waiting: a lookup, then a fetch of
    its hits, under a request of its own ("KV#getID", the get's fetch id;
    finished at the get's end, whatever ends it), so that a lookup of kv
    the caller makes meanwhile is answered apart; the end and the results
    are the same (doc/design.md, "A get that does not wait").  Returns at
    once, as p2pkv_client_fetch does, with *fetch_id_p (may be NULL); the
    get ends exactly once as a fetch does, to on_fetch (or
    p2pkv_client_fetch_status): LANDED when the server answered and every
    hit's block landed, FAILED or ABORTED (deadline, p2pkv_client_cancel
    of its id, p2pkv_client_finish of kv) otherwise.  Until that end,
    results[0..n-1] and the destination blocks are the client's; at it,
    each key's result is final, as p2pkv_client_get_results says them:
    LANDED, CORRUPT (landed, differing from its announced checksum: the
    get is still LANDED), MISSING with its reason, or FAILED (a hit whose
    blocks did not land, or any key the server never answered), holder
    server for a hit.  One batch, no more: keys beyond the server's pin
    quota are MISSING with reason quota; ask again once gets end.  The
    get is a round of request kv, as a fetch is: several may be in flight
    under one request or many, and p2pkv_client_finish(kv) ends the
    request when its gets are done (it sends nothing for gets alone; a
    two-step get still running ends ABORTED).  An engine's store or
    finish of kv (p2pkv_engine_store, _finish) reaches a get of one
    message, not a two-step one, whose request is its own.  deadline in
    seconds (0: load_timeout), for the whole get.  Errors (nothing sent):
    -EINVAL (n 0 or over 65,536, a key the wire cannot carry, a key or a
    block named twice, results NULL, a kv the wire cannot carry (not 1..4,096
    bytes of UTF-8), server P2PKV_ANY_SERVER, whose
    locate blocks: use p2pkv_client_get, or for two steps a kv over
    4,072 bytes, too long to name their request), -ERANGE (a block
    outside the pool), -ENOTCONN (the server is not UP), -ENOMEM.  (It
    returned -EOPNOTSUPP where the server lacks get before it took the
    two steps itself; the symbol version did not change.)  */
int p2pkv_client_get_async(p2pkv_client_t *self, int server, const char *kv,
                           const p2pkv_key_t *keys, const uint32_t *dest, size_t n,
                           double deadline, p2pkv_key_result_t *results, uint64_t *fetch_id_p);

/*  What the end-to-end check has seen since the client was made.  */
typedef struct {
    uint64_t checked;               //  blocks hashed after landing, that matched
    uint64_t corrupt;               //  blocks that did not (P2PKV_KEY_CORRUPT)
    uint64_t unchecked;             //  blocks landed without a checksum to compare
                                    //  (no_verify, or a server without the capability)
    uint64_t hostile;               //  sessions ended after max_corrupt in a row
} p2pkv_check_stats_t;

/*  The check's counters.  (Symbol version P2PKV_0.1.)  */
void p2pkv_client_checks(p2pkv_client_t *self, p2pkv_check_stats_t *out);

/*  p2pkv_client_get's server meaning "any holder": each key is fetched
    from a holder the directory names, see p2pkv_client_get.  */
#define P2PKV_ANY_SERVER (-1)

/*  A live holder of a key, as its server published itself.  */
typedef struct {
    const char *peer_id;
    const char *endpoint;           //  for p2pkv_client_connect
    const char *host;               //  its host name
    uint64_t block_len;
    const char *provider;           //  the best one it offers
    /*  Its same-host identity (p2pkv_description_t.host; "" from a server
        older than it): equal to this client's, the holder runs on this
        host, in its namespaces, is preferred and reached over shm.  */
    const char *host_id;
} p2pkv_holder_t;

/*  One key's answer: keys[i]'s live holders (n may be 0).  The pointers
    are valid during the call only.  */
typedef void (p2pkv_locate_fn)(void *arg, size_t i, const p2pkv_holder_t *holders, size_t n);

/*  Asks the directory who holds keys[0..n-1] (n 1..65536) in one
    pipelined round trip (two when a server joined since the last call),
    then calls fn once per key, in order, on the calling thread, with no
    lock of the client held (fn may call any client function).  Entries
    that do not parse (another program's keys, a truncated record) are
    ignored and counted (p2pkv_client_directory_stats).  0, or a negative
    errno with err: -EINVAL (no config.directory), -ENOTCONN (Redis is not
    answering: down, or slower than 1 s; the next call connects again).
    Any thread; calls at once queue on the directory's lock.  */
int p2pkv_client_locate(p2pkv_client_t *self, const p2pkv_key_t *keys, size_t n,
                        p2pkv_locate_fn *fn, void *arg, char *err);

typedef struct {
    bool up;                        //  the last call reached Redis
    uint64_t locates;               //  p2pkv_client_locate calls answered
    uint64_t round_trips;           //  pipelines they took
    uint64_t junk;                  //  entries that did not parse, ignored
    uint64_t stale;                 //  holders listed without a live record, skipped
    uint64_t corrected;             //  entries removed: a holder did not have the key
    uint64_t failovers;             //  holders given up mid-get (dead, refusing)
} p2pkv_directory_stats_t;

/*  The directory's counters: 0, or -EINVAL without config.directory.  */
int p2pkv_client_directory_stats(p2pkv_client_t *self, p2pkv_directory_stats_t *out);

/*  Without an on_fetch callback, a fetch's end is read here, once:
    P2PKV_LANDED, P2PKV_FAILED or P2PKV_ABORTED (reason: P2PKV_ERRLEN bytes, or
    NULL), -EINPROGRESS while it runs, -ENOENT for an id not issued,
    already read, or among the oldest when more than 65,536 ended
    unread.  Fetch ids are unique within the client.  */
int p2pkv_client_fetch_status(p2pkv_client_t *self, uint64_t fetch_id, char *reason);

/*  Cancels an open fetch: sends the protocol's abort for its round (not
    when one went out already at its deadline, nor when the server has
    answered and only its landing blocks are awaited), and the fetch ends
    exactly once, as P2PKV_ABORTED (to on_fetch, or
    p2pkv_client_fetch_status), only once no byte of it can land any more
    in its destination blocks: the server's abort_ack or transfer_done
    came and every block it said may still land has landed, or the
    server was cut off.  Until then the blocks stay the transfer's; after
    it their contents are undefined (also when a transfer_done(success)
    crossed the abort: the fetch still ends ABORTED, and what landed is
    not promised whole) and they may be reused.  A server that does not
    acknowledge within abort_ack_timeout is cut off (on_server DOWN, a
    new session follows) and the fetch still ends ABORTED, once, with a
    reason saying so: whatever ends a cancelled fetch, its status is
    P2PKV_ABORTED.  It does not wait: the end comes from
    p2pkv_client_poll (or the progress thread).
    Returns 0 (cancel under way), -EINPROGRESS (cancelled already, not
    ended yet: nothing more is sent), -EALREADY (the fetch ended already,
    its end read or not: nothing changes), -ENOENT (no fetch of that id
    was issued).  */
int p2pkv_client_cancel(p2pkv_client_t *self, uint64_t fetch_id);

/*  The request is done on that server: its fetches still open are
    cancelled first, as by p2pkv_client_cancel (an abort for each, before
    the terminal fetch), and each still ends once, as P2PKV_ABORTED, later,
    from p2pkv_client_poll.  A p2pkv_client_get of kv on that server
    running on another thread is cancelled too: its open fetch as above,
    and it returns -ECANCELED once that fetch ended.  -ENOTCONN when the
    server is not UP (its fetches ended when it went away).  */
int p2pkv_client_finish(p2pkv_client_t *self, int server, const char *kv);

/*  A file descriptor that is readable whenever p2pkv_client_poll has
    work (a message, a completion, a timer), for an event loop's poll or
    epoll.  Owned by the client.  */
int p2pkv_client_fd(p2pkv_client_t *self);

/*  Drives everything for up to timeout seconds (0: once, without
    waiting): sockets, endpoints, timers, callbacks.  Returns as soon as
    callbacks ran: their number, or a negative errno.  */
int p2pkv_client_poll(p2pkv_client_t *self, double timeout);

/*  Fetches not ended yet, on all servers.  */
size_t p2pkv_client_open_fetches(const p2pkv_client_t *self);

#endif
