/*  p2pkv_engine.h: the engine's side: publish KV-cache blocks into the
    pool of the p2pkv-server running beside you, and tell it about
    requests.

    The server owns the pool (num_blocks * block_len bytes of shared
    memory) and its index of key -> block; the engine maps the pool and
    writes blocks in place: reserve blocks for keys, write them (straight
    into the mapping, or with p2pkv_engine_write), commit them under their
    keys; from then on the server's consumers can look them up and have
    them written into their own memory.  For prefill/decode, store a
    request's blocks for a named consumer and finish the request; the
    store's end arrives later, as an event.  pull has the server fetch
    keys from another server into its pool, and ends as an event too.

    Every call is one request on the server's local socket (--local) and
    waits for its answer; the server stays authoritative (what it refuses,
    the call returns as a negative errno with the server's sentence in
    err).  The library checks what it can first, without asking: keys of
    length 0 or over P2PKV_ENGINE_MAX_KEY bytes, a block index outside
    this engine's reservations, a commit of a key this engine did not
    reserve, NULL pointers, empty strings: -EINVAL or -ENOENT with err
    naming the argument.  The server's refusals map to the errno their
    sentence stands for (-ENOSPC, -EEXIST, -EBUSY, -ENOENT, -EAGAIN,
    -ESTALE, and -ESHUTDOWN for a reserve, put or pull while the server
    drains at SIGTERM), or -EINVAL; -ETIMEDOUT when no answer came in
    time.  The
    protocol has no request ids: the server answers in order, so the
    answer of a request that timed out is recognised when it comes late
    and dropped, never taken for the next request's.

    A handle belongs to one start of its server: open learns that start's
    instance identity (random, new at every start) with the pool it maps,
    and every later call names it.  A server restarted on the same socket
    refuses every call of a handle opened before (-ESTALE, "the server
    restarted; reopen the engine"): its mapping is the old server's pool,
    so nothing written through it is ever committed or served, and
    p2pkv_engine_write refuses it from then on.  Close it and open anew.

    Events (a store's result, a pull's result) come in between answers;
    they are queued and delivered by p2pkv_engine_poll, to the callback
    given at open (or read one by one with p2pkv_engine_next_event when
    there is none).  p2pkv_engine_fd is readable whenever an event is
    waiting, for an event loop.  It is an epoll fd over an eventfd kept
    readable while the queue is not empty and the socket's ZMQ_FD, and
    every call drains the socket into the queue before it returns (ZMQ_FD
    does not signal again for messages already waiting).

    Threads: one engine handle is used by one thread at a time (an engine
    with several threads opens one handle each; a reservation belongs to
    the handle that made it).  Err buffers are P2PKV_ERRLEN bytes, or
    NULL.
*/
#ifndef P2PKV_ENGINE_H_INCLUDED
#define P2PKV_ENGINE_H_INCLUDED

#include "p2pkv.h"

/*  The longest key the server accepts, in bytes, and the most keys in
    one call (the server's PK_MAX_KEY_BYTES and PK_MAX_LIST).  */
#define P2PKV_ENGINE_MAX_KEY 4096
#define P2PKV_ENGINE_MAX_LIST 65536

/*  The longest namespace name (the server's --tenants rule).  */
#define P2PKV_ENGINE_MAX_NAMESPACE 32

typedef struct _p2pkv_engine_t p2pkv_engine_t;

typedef struct {
    char peer_id[256];          //  the server's name
    char endpoint[256];         //  where consumers reach it
    char pool_name[256];        //  its shared-memory object
    uint64_t num_blocks;
    uint64_t block_len;
} p2pkv_engine_info_t;

typedef enum {
    P2PKV_EVENT_STORE = 1,      //  a store for a consumer ended (id: its job)
    P2PKV_EVENT_PULL            //  a pull ended (id: the pull)
} p2pkv_event_kind_t;

typedef struct {
    p2pkv_event_kind_t kind;
    uint64_t id;
    bool success;               //  store: the consumer got the blocks; pull: every key landed
    size_t landed;              //  pull: keys now in the pool
    size_t missing;             //  pull: keys the remote server did not have or send
    char reason[P2PKV_ERRLEN];  //  pull: why it failed (its server could not be
                                //  reached or refused us, a fetch failed); ""
                                //  when the keys missing are only those no
                                //  server had
    //  pull: the missing keys (missing of them); valid during the callback,
    //  or until the next poll, next_event or close of this handle
    const p2pkv_key_t *missing_keys;
} p2pkv_engine_event_t;

typedef void (p2pkv_engine_event_fn)(void *arg, const p2pkv_engine_event_t *event);

typedef struct {
    uint64_t free, writing, ready, pinned;  //  blocks by state
    uint64_t evictions, lookups, hits, misses;
    uint64_t sessions;                      //  consumers connected now
    uint64_t channels_open;                 //  data-plane channels open now
} p2pkv_engine_stats_t;

/*  One tenant namespace's share (p2pkv_engine_stats_namespace): its blocks
    by state (by the block's namespace), and the keys looked up on behalf
    of its consumers (by the asker's namespace: a hit may be on a shared
    block).  */
typedef struct {
    uint64_t ready, pinned;                 //  its blocks READY, and pinned
    uint64_t lookups;                       //  = hits + pending + misses
    uint64_t hits, pending, misses;         //  pending: answered as being written
} p2pkv_engine_namespace_stats_t;

/*  Attaches to the server whose local socket is local_endpoint (its
    --local, e.g. ipc:///run/p2pkv/p2pkv-NAME.sock; NULL or "": the
    server's default, by p2pkv-server(8)'s rule), waiting up to timeout
    seconds for it to answer (describe), and maps its pool read-write,
    checking that the shared-memory object is as large as the server
    says; a pool whose memory the server did not reserve is reserved
    here (posix_fallocate) or refused, so that no write into it can die
    of SIGBUS.  on_event may be NULL (then read events with
    p2pkv_engine_next_event).  Later calls wait p2pkv_engine_set_timeout's
    time, not this one.  NULL with err on failure: a bad endpoint, no
    answer within timeout, a pool that cannot be mapped, a socket file
    not owned by the user expected (this process's, or
    $P2PKV_LOCAL_OWNER's) or in a directory another user could replace
    it in.  Every later request looks at the owner again (-EPERM).  */
p2pkv_engine_t *p2pkv_engine_open(const char *local_endpoint, double timeout,
                                  p2pkv_engine_event_fn *on_event, void *arg, char *err);

/*  Unmaps the pool and closes the socket.  What this handle reserved and
    did not commit is returned to the free list by the server (the engine
    connection went away), after its reservation timeout.  */
void p2pkv_engine_close(p2pkv_engine_t **self_p);

/*  What the server said at open.  */
const p2pkv_engine_info_t *p2pkv_engine_info(const p2pkv_engine_t *self);

/*  The mapped pool: block b is at pool + b * block_len.  */
uint8_t *p2pkv_engine_pool(p2pkv_engine_t *self);

/*  Each answer is waited for up to this long (default 10 s).  */
void p2pkv_engine_set_timeout(p2pkv_engine_t *self, double timeout);

/*  Tenant namespaces (the server's --tenants): the namespace this handle's
    later reserve, commit, put, drop, store and pull name.  Blocks are
    published into it; a store or pull sees it and the shared namespace; a
    consumer sees its own namespace and the shared one only.  ns is one of
    the server's namespaces (1..P2PKV_ENGINE_MAX_NAMESPACE of a-z 0-9 _ -,
    the first a letter or digit), or NULL, "" or "shared" for the shared
    namespace, the default, which every existing call keeps using.  One
    setter rather than an _ns twin of each call: the calls stay as they
    are, and an engine that serves one tenant per handle says it once.
    -EINVAL (err naming ns) for a malformed name, checked here; a name the
    server does not have is refused by the call that uses it.  A
    reservation is the namespace's it was made in: commit it before
    switching.  */
int p2pkv_engine_set_namespace(p2pkv_engine_t *self, const char *ns, char *err);

/*  Reserves a free block for each key (all or nothing): blocks[i] gets
    keys[i]'s block, to be written and then committed.  -ENOSPC when every
    block is pinned or being written, -EEXIST when a key is in the pool.  */
int p2pkv_engine_reserve(p2pkv_engine_t *self, const p2pkv_key_t *keys, size_t n,
                         uint32_t *blocks, char *err);

/*  Copies len bytes to offset of block, which must be reserved by this
    handle and not committed yet; -EINVAL (err naming block, offset or
    len) otherwise.  -ETIMEDOUT once 90% of the server's lease
    (--lease-timeout) has passed since the reserve was asked: past its
    lease the server frees the block and may give it to another writer,
    whose committed bytes a late copy would change (reserve the key
    again).  Writing through p2pkv_engine_pool is the same without the
    copy's checks: such a writer must finish within the lease itself.  A whole block (offset 0, block_len bytes)
    also has its end-to-end checksum taken here, from the bytes just
    copied, and sent with its commit; a block changed through the mapping
    after such a write and before its commit then reaches consumers as
    corrupt, never as wrong bytes: write a block one way.  */
int p2pkv_engine_write(p2pkv_engine_t *self, uint32_t block, size_t offset, const void *data,
                       size_t len, char *err);

/*  Publishes reserved blocks under their keys: consumers may look them
    up now.  Each block's checksum goes with it: the one a whole write
    took, or else one taken here from the mapping, on this thread (the
    server reads none of the blocks).  -ENOENT (err naming the key) for a
    key this handle did not reserve.  */
int p2pkv_engine_commit(p2pkv_engine_t *self, const p2pkv_key_t *keys, size_t n, char *err);

/*  reserve, copy block_len bytes into the mapping, commit: one block
    (two requests, no block data over the socket).  len must equal
    block_len (-EINVAL naming len otherwise).  1 when the key was in the
    pool already, or being written (nothing written), 0 when published.  */
int p2pkv_engine_put(p2pkv_engine_t *self, const p2pkv_key_t *key, const void *data,
                     size_t len, char *err);

/*  Removes keys from the pool (their blocks go free once no transfer
    pins them).  -EBUSY when a key is pinned by a transfer.  */
int p2pkv_engine_drop(p2pkv_engine_t *self, const p2pkv_key_t *keys, size_t n, char *err);

/*  Prefill/decode: the blocks of keys (committed) are for consumer's
    request kv; they are pinned and sent once the consumer asks (round <
    0: the consumer's next fetch of kv, or the round it names).  *job_p
    names the store in its P2PKV_EVENT_STORE event.  */
int p2pkv_engine_store(p2pkv_engine_t *self, const char *consumer, const char *kv,
                       const p2pkv_key_t *keys, size_t n, int64_t round, uint64_t *job_p,
                       char *err);

/*  The request kv of consumer is finished on this side.  */
int p2pkv_engine_finish(p2pkv_engine_t *self, const char *consumer, const char *kv, char *err);

/*  Has the server fetch keys from the server at endpoint into its pool
    (endpoint NULL: from any holder its --directory names, with failover
    between holders; a server without --directory refuses it).
    *pull_id_p names it in its P2PKV_EVENT_PULL event; *fetching_p (may
    be NULL) gets how many keys are being fetched (the others are in the
    pool already; the event follows even when it is 0, once the server's
    puller has been through the pull); present (may be
    NULL; n entries) which keys those are: the server's answer names them,
    and a tool reporting each key needs it (the event names the missing).
    A key counts as in the pool when the server's lookup of it is not a
    miss: ready, being written by an engine, or held by the server's disk
    tier (--spill-dir), whose read back into the pool the pull starts; a
    lookup of it answers hit_pending until it landed.  */
int p2pkv_engine_pull(p2pkv_engine_t *self, const char *endpoint, const p2pkv_key_t *keys,
                      size_t n, uint64_t *pull_id_p, size_t *fetching_p, bool *present,
                      char *err);

/*  One key's fate in a pull (p2pkv_engine_pull_keys).  */
typedef struct {
    uint8_t status;             //  a p2pkv_key_status_t: LANDED (in the pool now),
                                //  MISSING, CORRUPT (not committed: its bytes
                                //  differed from the checksum), FAILED (the pull
                                //  or its fetch failed)
    uint8_t reason;             //  a p2pkv_miss_reason_t, when MISSING
    uint16_t reserved;          //  0
    const char *source;         //  LANDED by this pull: the endpoint of the server
                                //  it came from (NULL when the server did not say);
                                //  NULL for a key in the pool before the pull
} p2pkv_engine_pull_key_t;

/*  Where each of keys (n of them, any of the pull's keys, in any order)
    came from, or why it did not, by the pull's P2PKV_EVENT_PULL event:
    the one last delivered (by the callback, or next_event), whose id
    pull must be; the sources are valid as long as its missing_keys.  A
    key the event does not name was in the pool before the pull
    (p2pkv_engine_pull's present): LANDED, source NULL.  A function
    rather than fields of the event, whose size engines built against it
    keep.  0; -ENOENT (err saying so) when the last event delivered is
    not that pull's.  (Symbol version P2PKV_0.4.)  */
int p2pkv_engine_pull_keys(p2pkv_engine_t *self, uint64_t pull, const p2pkv_key_t *keys,
                           size_t n, p2pkv_engine_pull_key_t *out, char *err);

/*  The server's counters.  */
int p2pkv_engine_stats(p2pkv_engine_t *self, p2pkv_engine_stats_t *out, char *err);

/*  The counters of namespace ns (its name in the server's --tenants, or
    NULL, "" or "shared" for the shared namespace).  A struct of its own,
    not fields appended to p2pkv_engine_stats_t, so that engines built
    against the old struct keep working.  -EINVAL (err naming ns) for a
    malformed name, -ENOENT for a namespace the server does not have.  */
int p2pkv_engine_stats_namespace(p2pkv_engine_t *self, const char *ns,
                                 p2pkv_engine_namespace_stats_t *out, char *err);

/*  The server's whole stats answer as JSON text (its metrics too), for
    tools; free() it.  NULL with err on failure.  */
char *p2pkv_engine_stats_json(p2pkv_engine_t *self, char *err);

/*  Readable while an event is waiting (or may be: call poll).  */
int p2pkv_engine_fd(p2pkv_engine_t *self);

/*  Waits up to timeout seconds (0: not at all) for events and delivers
    every one waiting to on_event (those a callback's own calls bring wait
    for the next poll).  Returns how many, or a negative errno.  Without
    on_event it only waits, and returns how many wait for next_event.  */
int p2pkv_engine_poll(p2pkv_engine_t *self, double timeout);

/*  Without on_event: the next event into *event, waiting up to timeout
    seconds: 0, or -ETIMEDOUT.  */
int p2pkv_engine_next_event(p2pkv_engine_t *self, double timeout, p2pkv_engine_event_t *event);

#endif
