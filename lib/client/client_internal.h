/*  client_internal.h: what the client library's files share: a client,
    its servers, its fetches and the gets waiting on it.  Only lib/client/
    includes it.
*/
#ifndef PK_CLIENT_INTERNAL_H_INCLUDED
#define PK_CLIENT_INTERNAL_H_INCLUDED

#include "p2pkv.h"
#include "base/err.h"
#include "base/keymap.h"
#include "base/transport.h"
#include "roles/client_role.h"
#include "roles/client_session.h"

#include <czmq.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

#define S_MAX_SERVERS 64
#define S_MAX_FABRICS 8             //  providers one client uses at once

//  The consumer's CURVE keys, checked (curve.c); on false: no CURVE.
typedef struct {
    bool on;
    char public_key[41], secret_key[41], server_key[41];   //  Z85
} pk_client_curve_t;

//  config's curve_* fields: all three valid Z85 keys, the public one that
//  of the secret one, or none.  0, or -EINVAL with err naming the field.
int pk_client_curve_keys(const p2pkv_config_t *config, pk_client_curve_t *out, char *err);

//  One Z85 server key into out (41 bytes): 0 or -EINVAL with err.
int pk_client_curve_server_key(const char *text, char out[41], char *err);

//  The keys onto a DEALER before it connects; server_key ("" or NULL:
//  the config's) names the server's.  Nothing when keys are off.
void pk_client_curve_apply(zsock_t *dealer, const pk_client_curve_t *keys,
                           const char *server_key);

//  sockets.c: a DEALER counted against the process's ZeroMQ sockets,
//  once fds descriptors were found free (0: the caller asked already): 0,
//  or -EMFILE (too near the limit, err naming ZSYS_MAX_SOCKETS, or too few
//  descriptors) or -ENOMEM; its destroy; and the count of other sockets
//  made or closed (n < 0).
int pk_client_dealer_new(zsock_t **dealer_p, int fds, char *err);

/*  A session's file descriptors: 12 idle, 13 once a block moved over tcp
    (doc/design.md, "What a session costs"), and a few spare.  */
#define PK_CLIENT_FDS 16

/*  0 when want descriptors are free now, else -EMFILE with err naming the
    limit (base/fds.h: czmq aborts a process whose socket cannot be made,
    so a session asks before it makes anything).  */
int pk_client_fds_check(int want, char *err);
void pk_client_dealer_destroy(zsock_t **dealer_p);
void pk_client_sockets_count(long n);

/*  watch.c: why a connection fails, said at once.  A connect's address
    (tcp or ipc), for the watch's probe; family 0: none (inproc).  */
typedef struct {
    int family;
    socklen_t len;
    struct sockaddr_storage sa;
} pk_client_addr_t;

/*  The endpoint checked before ZeroMQ has it: a transport named, and a
    tcp host resolved as libzmq will (which reports a name that does not
    resolve only as retries).  0 with *addr, or with err: -EINVAL (no
    transport, not tcp://HOST:PORT), -ENOENT (the host name does not
    resolve: the resolver's own error).  */
int pk_client_endpoint_resolve(const char *endpoint, pk_client_addr_t *addr, char *err);

/*  A DEALER's connection watched: its socket monitor, and while a connect
    or describe waits (probe), a connection of our own that asks the
    kernel or the peer what ZeroMQ does not say.  */
typedef struct {
    zsock_t *monitor;               //  a PAIR of the DEALER's events, or NULL
    pk_client_addr_t addr;
    bool curve;                     //  ours is on
    bool probe;                     //  find out why a connection fails (else only
                                    //  a refused handshake is said)
    bool connected, handshaken;     //  the connection now
    bool attempt_connected;         //  since the last connect retried
    bool ever_connected, ever_handshaken;
    bool want, silent_probed;       //  a probe is due; the silent peer's was made
    bool heard_zmtp;                //  a probe read a ZeroMQ greeting
    double connected_at;
    int fd;                         //  the probe's connection, or -1
    bool fd_connected, greeted;     //  greeted: our signature sent
    int fd_error;                   //  its connect failed at once
    double probe_until, next_probe;
    int probes;
    uint8_t got[64];                //  what the peer said first: a ZMTP 3 greeting
    size_t ngot;
} pk_client_watch_t;

/*  The monitor on dealer, before it connects: 0 or -ENOMEM.  addr may be
    NULL (no probe).  */
int pk_client_watch_open(pk_client_watch_t *w, zsock_t *dealer, const pk_client_addr_t *addr,
                         bool curve, bool probe);
void pk_client_watch_close(pk_client_watch_t *w, zsock_t *dealer);

/*  What the watch saw, one look (never waits): 0, or a negative errno
    with reason: -EACCES (the server refused our key, or one side has
    CURVE and the other not), and with probe: -ECONNREFUSED (nothing
    listens there) or the kernel's errno of a failed connection, -EPROTO
    (not a p2pkv/ZeroMQ port: it sent something else, or closed the
    connection without a greeting, or the handshake failed), -ETIMEDOUT
    (it accepted two connections and greeted on neither: a hung process,
    or not a ZeroMQ port; doc/design.md, "A silent port is given up").  */
int pk_client_watch_step(pk_client_watch_t *w, char *reason, size_t len);

/*  For a timeout's message: ": what the connection did", or "" (nothing
    was watched).  */
void pk_client_watch_note(const pk_client_watch_t *w, char *note, size_t len);

/*  describe.c: p2pkv_describe_curve of an endpoint resolved already.  */
int pk_client_describe(const char *endpoint, const pk_client_addr_t *addr, double timeout,
                       const p2pkv_config_t *config, p2pkv_description_t *out, char *err);
/*  The same, with the words of its caps (NULL: not asked; "" when none)
    into caps (PK_MAX_CAPS + 1 bytes).  */
int pk_client_describe_caps(const char *endpoint, const pk_client_addr_t *addr, double timeout,
                            const p2pkv_config_t *config, p2pkv_description_t *out,
                            char *caps, char *err);
#define S_MAX_UNREAD 65536          //  ended fetches kept for p2pkv_client_fetch_status

//  A fetch, from p2pkv_client_fetch until its status is delivered: by
//  on_fetch, or read with p2pkv_client_fetch_status.
typedef struct s_fetch {
    uint64_t id;
    int status;                     //  -EINPROGRESS, then a p2pkv_status_t
    char reason[128];
    //  the end-to-end check (checks.c): its blocks and their announced
    //  checksums, in one allocation; dest NULL when nothing is announced
    size_t blocks;                  //  its blocks, checked or not
    size_t n;
    uint32_t *dest;
    uint64_t *sums;
    uint8_t *verdict;               //  per block: PK_VERDICT_* once checked
    pk_channel_t *expected;         //  the channel whose copies check its blocks
                                    //  (channel_expect), or NULL
    struct s_fetch *prev, *next;    //  ended and unread, oldest first
    //  an asynchronous get (get_async.c), else results NULL: the caller's
    //  results, written until the get ends, and what its answer is
    //  matched by (its server, request and round)
    p2pkv_key_result_t *results;
    size_t get_n;                   //  its keys (n above counts its hits)
    uint32_t *get_dest;             //  their blocks, copied
    char *get_kv;
    int get_server;
    uint64_t get_round;
    bool get_answered;
    struct s_fetch *get_prev, *get_next;   //  the client's gets in flight
    //  taken in two steps (get_steps.c), where the server lacks get:
    //  get_kv is then the request of its own its lookup and fetch go
    //  under, get_request the caller's kv; get_load its fetch's load id
    //  (0 while it looks up); get_due, once it is decided outside a load
    //  (PK_LOAD_*, -1: not), is reported at the step's end, with get_why
    bool get_steps;
    char *get_request;
    uint64_t get_load;
    double get_deadline;            //  monotonic s: the lookup's answer by then
    int get_due;
    const char *get_why;
} s_fetch_t;

//  What p2pkv_client_get waits for: the answer to its batch's lookup and
//  the end of its fetch, kept from the caller's callbacks.
typedef struct s_sync {
    int server;
    char kv[PK_ERRLEN];
    int answered;                   //  1, or -1 when the server went away
    bool *hits;                     //  the batch's, parallel to its keys
    uint8_t *reasons;               //  and each miss's pk_miss_reason_t
    uint8_t *verdict;               //  its fetch's blocks' PK_VERDICT_*, in fetch order
    uint64_t *sums;                 //  and their announced checksums
    uint64_t round, fetch_id;
    int status;                     //  -EINPROGRESS until the fetch ends
    int cancelled;                  //  1: the get ends with -ECANCELED (finish of
                                    //  its request, or its fetch cancelled)
    char reason[256];
    const uint32_t *get_dest;       //  a get in one message: its keys' blocks, else NULL
    const char *request;            //  the caller's kv, for -EBUSY
    struct s_sync *prev, *next;     //  every get running now
} s_sync_t;

typedef struct {
    p2pkv_client_t *client;
    int index;
    char *endpoint;
    p2pkv_server_state_t state;
    bool announced;                 //  connect returned it: on_server may report it
    //  handshake, epochs, keepalive, silence, reconnect: the pure part
    pk_client_session_t *session;
    //  what lives with one session: a new set at each (re)connect
    zsock_t *dealer;
    bool dealer_read;               //  the last look at dealer found nothing, and
                                    //  nothing was done with it since (client.c, s_arm)
    pk_client_watch_t watch;        //  the dealer's connection, until UP (watch.c)
    pk_client_addr_t addr;          //  the endpoint's, resolved at connect
    char curve_server[41];          //  this server's CURVE key; "": the config's
    int refused;                    //  the watch's verdict (a negative errno): a
                                    //  refused handshake, or before the connect
                                    //  returned, any (nothing listens, not ZeroMQ)
    pk_fabric_t *fabric;            //  the provider chosen at connect (fabrics.c)
    pk_channel_t *channel;
    int wait_fd;                    //  the channel's, registered with epoll while
    bool cq_watched;                //  this is true (client.c, s_landing)
    pk_client_role_t *role;
    double last_landed;             //  when its queue last had completions
    double loads_seen;              //  when a step last saw a load open (loop.c,
                                    //  s_landing: the queue's watch lingers)
    double stall_floor;             //  UP, a fetch started or ended: what landed before is old
    char reason[PK_ERRLEN + 64];
    unsigned corrupt_run;           //  blocks of it that failed their check in a row
    struct pk_answer *answers;      //  answered lookups' checksums, until their
                                    //  fetch or finish (checks.c)
    const pk_msg_t *lent;           //  a lent get_resp being delivered (client.c,
                                    //  s_lend_copy): its blocks are copied when
                                    //  its answer reaches the get's fetch
    bool lend_bad;                  //  its sources named a block outside a pool
    bool server_rails;              //  its description lists rails: our channel
                                    //  sends every rail (else its first alone)
    char rails_note[96];            //  "": every rail; else why one (the UP
                                    //  report's reason)
} s_server_t;

//  locate.c: the directory (config.directory), under its own mutex
typedef struct _pk_locator_t pk_locator_t;
pk_locator_t *pk_locator_new(const char *url, char *err);
void pk_locator_destroy(pk_locator_t **self_p);
void pk_locator_forget(pk_locator_t *self, const p2pkv_key_t *key, const char *peer_id);
void pk_locator_count_failover(pk_locator_t *self);

//  fabrics.c: one fabric per provider the client uses, opened lazily
typedef struct {
    char asked[64];                 //  the name it was opened with
    pk_fabric_t *fabric;            //  carries its transport (base/transport.h)
} pk_client_fabric_t;

/*  With config.provider named, its fabric, opened now (an error at
    p2pkv_client_new, as a provider libfabric lacks); under auto, none
    until a connect needs one.  0, or a negative errno with err.  */
int pk_client_fabrics_open(p2pkv_client_t *self, char *err);
void pk_client_fabrics_close(p2pkv_client_t *self);
/*  The fabric for a server: config.provider's, or under auto the best
    one d (its description) offers that opens here: mmap or shm when it
    runs on this host (its host is ours), else the first network provider
    of its list; d's providers whose bit is set in skip (a same-host one
    the server refused) are passed over.  Called with the lock held.  NULL
    with err naming what it offers.  *index_p (may be NULL): the chosen
    provider's index in d, -1 for config.provider's.  */
const pk_client_fabric_t *pk_client_fabric_for(p2pkv_client_t *self, const p2pkv_description_t *d,
                                               unsigned skip, int *index_p, char *err);

//  get_any.c: p2pkv_client_get of P2PKV_ANY_SERVER
//  checks.c: the end-to-end check.  A lookup answer's checksums are kept
//  per server until a fetch under that round takes them (or the request
//  finishes, or the session goes); the fetch keeps its blocks' and checks
//  them when it lands, before it is reported.
//  (verdicts: PK_VERDICT_* of base/transport.h)
int pk_client_answer_keep(s_server_t *s, const char *kv, uint64_t round, const pk_key_t *keys,
                          const bool *hits, const uint64_t *sums, size_t n);
void pk_client_answers_drop(s_server_t *s, const char *kv);
/*  expect: the blocks have not landed yet, so a transport that copies
    them may check each in its copy (a get's answer comes after).  */
int pk_client_fetch_sums(s_server_t *s, const char *kv, uint64_t round, const pk_key_t *keys,
                         const uint32_t *dest, size_t n, s_fetch_t *f, bool expect);

/*  client.c: the capability get (protocol.md section 3).  Whether server
    is up and offers it; and a get of keys into dest (a load whose id is
    *fetch_id_p, reported as a fetch's), -ENOTUNIQ when keys or dest
    repeat one (the get may not: take the two steps).  Its answer goes to
    the get's record (s_sync_t, get_dest set) as a lookup's would.
    pk_client_get_one kicks the loop only where a progress thread drives
    it: its caller (get.c) polls next, and a poll's return arms (loop.c),
    so a sleeper on the client's fd is not left with a stale watch.  */
bool pk_client_can_get(p2pkv_client_t *self, int server);
int pk_client_get_one(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
                      const uint32_t *dest, size_t n, double deadline, uint64_t *fetch_id_p);
/*  The same get, not waited for (p2pkv_client_get_async): its answer and
    end fill results (n).  -EOPNOTSUPP when the server does not offer get
    (nothing sent), else as pk_client_get_one.  */
int pk_client_get_async_one(p2pkv_client_t *self, int server, const char *kv,
                            const p2pkv_key_t *keys, const uint32_t *dest, size_t n,
                            double deadline, p2pkv_key_result_t *results, uint64_t *fetch_id_p);

/*  get_async.c, with the lock held: the get in flight on server whose
    answer this is (request kv, round), or NULL; its answer into its
    results (hits NULL: none came); its end (and off the list of gets in
    flight), before it is reported.  */
s_fetch_t *pk_client_aget_find(p2pkv_client_t *self, int server, const char *kv,
                               uint64_t round);
void pk_client_aget_answer(s_fetch_t *f, const bool *hits, const uint8_t *reasons, size_t n);
void pk_client_aget_end(p2pkv_client_t *self, s_fetch_t *f, p2pkv_status_t status);

/*  get_steps.c: the asynchronous get against a server without get, in
    two steps (lookup, then fetch of its hits) under a request of its own,
    so that its answer is never one of the caller's lookups of kv; all
    with the client's lock held.
    - start: after pk_client_get_async_one said -EOPNOTSUPP (its input
      checked): the record, its fetch id, the lookup queued.  0, -EINVAL
      (kv too long to name its request), -ENOTCONN, -ENOMEM.
    - answer: its lookup's answer (hits NULL: none will come), from the
      role's lookup_done: the results, and the fetch of the hits.
    - public_id: the get's fetch id whose fetch is load id, else id.
    - ended: at its end (client.c, s_load_done): its request finished.
    - cancel: p2pkv_client_cancel of a two-step get's id (-ENOENT: not one).
    - finish: p2pkv_client_finish(kv) on s ends its gets of kv; true when
      one was marked (the loop has work).
    - step: ends the gets decided outside a load (an answer without hits
      to fetch, a cancel while looking up, the deadline).
    - due: the earliest moment step has work (HUGE_VAL: none);
      looking: the gets still looking up (open fetches, for the caller).  */
int pk_client_steps_start(p2pkv_client_t *self, int server, const char *kv,
                          const p2pkv_key_t *keys, size_t n, const uint32_t *dest,
                          double deadline, p2pkv_key_result_t *results, uint64_t *fetch_id_p);
void pk_client_steps_answer(s_server_t *s, s_fetch_t *f, uint64_t round, const pk_key_t *keys,
                            const bool *hits, const uint8_t *reasons, size_t n);
uint64_t pk_client_steps_public_id(p2pkv_client_t *self, uint64_t id);
void pk_client_steps_ended(s_server_t *s, s_fetch_t *f);
int pk_client_steps_cancel(p2pkv_client_t *self, uint64_t fetch_id);
bool pk_client_steps_finish(p2pkv_client_t *self, s_server_t *s, const char *kv);
void pk_client_steps_step(p2pkv_client_t *self);
/*  s's session went (its role's server_gone ran): its gets still looking
    up end now, FAILED with reason unless decided already.  */
void pk_client_steps_gone(s_server_t *s, const char *reason);
double pk_client_steps_due(p2pkv_client_t *self);
size_t pk_client_steps_looking(const p2pkv_client_t *self);

/*  client.c: a fetch's end, as its role's load_done reports it (the get's
    record, its check, on_fetch or the unread list); s's lock held.  */
void pk_client_load_done(s_server_t *s, uint64_t id, pk_load_status_t status,
                         const char *reason);
/*  client.c: f into the client's fetches under f->id (room reserved
    first, or -ENOMEM).  */
int pk_client_fetch_put(p2pkv_client_t *self, s_fetch_t *f);
/*  client.c: keys the wire can carry into out (-EINVAL otherwise).  */
int pk_client_keys(const p2pkv_key_t *in, size_t n, pk_key_t *out);
/*  client.c: whether kv is a request name the wire can carry (1..4,096
    bytes of UTF-8).  */
bool pk_client_kv_ok(const char *kv);
//  get.c: a miss's pk_miss_reason_t as p2pkv_miss_reason_t
uint8_t pk_client_public_reason(uint8_t reason);
//  The fetch ended (landed or not): what its channel's copies found, and
//  forgets it there.
void pk_client_fetch_ended(s_server_t *s, s_fetch_t *f);
//  Checks f's landed blocks: false when one differs (the others and the
//  counters updated; max_corrupt in a row end s's session).
bool pk_client_fetch_check(p2pkv_client_t *c, s_server_t *s, s_fetch_t *f);
void pk_client_fetch_free(s_fetch_t *f);

//  loop.c: the loop.  watch adds fd to (on) or takes it from the epoll
//  set; kick wakes a sleeping loop for work due now; arm sets the timer
//  for the earliest moment a step has work no fd announces; server_step
//  is one server's turn; the progress thread steps until stopping.
void pk_client_watch(p2pkv_client_t *self, int fd, bool on);
void pk_client_kick(p2pkv_client_t *self);
void pk_client_arm(p2pkv_client_t *self);
void pk_client_server_step(p2pkv_client_t *self, s_server_t *s);
void *pk_client_progress_thread(void *arg);

int pk_client_get_any(p2pkv_client_t *self, const char *kv, const p2pkv_key_t *keys,
                      const uint32_t *dest, size_t n, bool fetch, double timeout,
                      p2pkv_key_result_t *res, p2pkv_progress_fn *progress, void *progress_arg,
                      char *err);

struct _p2pkv_client_t {
    p2pkv_config_t config;
    pk_client_curve_t curve;        //  the config's keys, copied and checked
    char *peer_id, *fingerprint, *hash_seed, *provider, *node;
    uint8_t *pool;
    bool own_pool;
    uint64_t num_blocks, block_len;
    bool auto_provider;             //  config.provider NULL or "auto"
    pk_client_fabric_t fabrics[S_MAX_FABRICS];
    size_t nfabrics;
    char host_id[128];              //  ours (base/host_id.h), beside a server's host
    p2pkv_callbacks_t callbacks;
    s_server_t *servers[S_MAX_SERVERS];
    int nservers;                   //  slots in use are below this
    int ran;                        //  callbacks run in the current step
    struct s_sync *syncs;           //  the gets running now, each answered here
                                    //  (a list: gets at once are few)
    s_fetch_t *agets;               //  asynchronous gets in flight (get_async.c;
                                    //  a list: an answer finds its get in it)
    uint64_t fetch_ids;             //  the roles draw fetch ids from it
    pk_keymap_t fetches;            //  id -> s_fetch_t
    s_fetch_t *unread_head, *unread_tail;
    size_t nunread;
    pthread_mutex_t lock;           //  recursive: callbacks may call in
    pthread_cond_t synced;          //  a get's record changed (with the progress
                                    //  thread, gets sleep on it: get.c)
    int epoll_fd, timer_fd, wake_fd;   //  wake_fd: the kick (client.c, s_kick)
    double armed;                   //  when timer_fd fires (monotonic s); HUGE_VAL:
                                    //  nothing armed (0 at first: read once)
    bool kicked;                    //  wake_fd holds a count not yet read
    double asked;                   //  when a lookup, fetch or cancel was last made
    uint64_t sends;                 //  frames handed to a DEALER (client.c,
                                    //  p2pkv_client_finish: a finish that sent
                                    //  nothing needs no kick)
    pthread_t thread;
    bool thread_running;
    atomic_bool stopping;
    pk_locator_t *locator;          //  config.directory's, or NULL
    //  the end-to-end check (get.c): counted under lock
    uint64_t checked, corrupt, unchecked, hostile;
};

#endif
