/*  client.c: the client library of p2pkv.h: construction, the lock,
    servers and their sessions, lookups and fetches.  The loop that drives
    them (one epoll fd, a timerfd, the optional progress thread) is
    loop.c.

    Per server: one pure client session (roles/client_session: handshake,
    epochs, keepalive, silence, reconnect, violations) whose ops open what
    lives with one session here: a DEALER socket (routing id "P" + the
    session epoch), a data-plane channel (base/transport.h) exposing the
    pool under its own registration, and, once up, one client role.  A
    server that goes away is cut off first, then its open fetches fail.
    p2pkv_describe is in describe.c, p2pkv_client_get in get.c.
*/
#include "base/big_cache.h"
#include "base/err.h"
#include "p2pkv.h"
#include "roles/client_role.h"
#include "roles/client_session.h"
#include "base/clock.h"
#include "base/keymap.h"
#include "base/transport.h"
#include "wire/protocol.h"
#include "base/thread.h"
#include "wire/czmq_setup.h"
#include "base/version.h"

#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"

//  The public buffers hold what the library's own error convention writes.
_Static_assert(P2PKV_ERRLEN == PK_ERRLEN, "p2pkv.h's P2PKV_ERRLEN is base/err.h's PK_ERRLEN");

/*  What a consumer of several rails lists beside the rest: its rails,
    their rejoining, and slices (its rails channel reads them wherever
    its provider's immediate can carry one; a server whose channel
    cannot slice leaves the word out, and its blocks come whole).  */
#define S_RAIL_CAPS PK_CAP_RAILS " " PK_CAP_REJOIN " " PK_CAP_SLICES

//  --------------------------------------------------------------------------
//  The role's seams, per server

static double
s_clock_now(void *arg)
{
    return pk_clock_monotonic();
}

static void
s_role_send(void *arg, const pk_msg_t *msg)
{
    s_server_t *s = arg;
    (void) pk_client_session_send(s->session, msg);
}

static uint64_t
s_landed(void *arg, uint64_t round)
{
    s_server_t *s = arg;
    return s->channel ? pk_channel_landed(s->channel, round) : 0;
}

static size_t
s_landed_rails(void *arg, uint64_t round, uint64_t *counts, size_t cap)
{
    s_server_t *s = arg;
    return s->channel ? pk_channel_landed_rails(s->channel, round, counts, cap) : 0;
}

static size_t
s_landed_slices(void *arg, uint64_t round, uint64_t *counts, size_t cap)
{
    s_server_t *s = arg;
    return s->channel ? pk_channel_landed_slices(s->channel, round, counts, cap) : 0;
}

static void
s_revoke_rail(void *arg, size_t rail)
{
    s_server_t *s = arg;
    if (s->channel)
        pk_channel_revoke_rail(s->channel, rail);
}

//  Capability rejoin: a fresh registration for our rail the server took
//  out, its blob for the next fetch's rail_offer (client_role.h)
static int
s_rail_offer(void *arg, size_t rail, uint8_t **blob_p, size_t *len_p)
{
    s_server_t *s = arg;
    return s->channel ? pk_channel_rail_offer(s->channel, rail, blob_p, len_p) : -ENOTCONN;
}

//  The round's load ended: its tag's counter goes (a tag wraps after 2^20
//  rounds; a stale count would report a later fetch landed early).
static void
s_forget(void *arg, uint64_t round)
{
    s_server_t *s = arg;
    if (s->channel)
        pk_channel_forget(s->channel, round);
}

//  Closing the endpoint and the registration: nothing from this server
//  lands in the pool afterwards (protocol.md section 7).
static void
s_cut_off(void *arg)
{
    s_server_t *s = arg;
    if (s->cq_watched)
        pk_client_watch(s->client, s->wait_fd, false);
    s->cq_watched = false;
    s->wait_fd = -1;
    if (s->channel)
        pk_channel_close(&s->channel);
}

static pk_key_t
s_fetch_key(const uint64_t *id)
{
    return (pk_key_t) { (const uint8_t *) id, sizeof *id, pk_hash_id(*id, 5) };
}

//  A lent get's copy (capability lend, protocol.md section 7): its
//  get_resp named each hit's block in the server's pool (sources, in key
//  order, as dst is); the channel copies them from its mapping of that
//  pool, counts them for the round and tells the server, which unpins
//  them.  A block the server cut off is not counted: the round's load
//  then waits for it as for a write that never landed, and fails.  A
//  source outside the server's pool is the server's violation.
static void
s_lend_copy(s_server_t *s, uint64_t round, const uint32_t *dst, size_t n)
{
    uint32_t stack[64];
    uint32_t *src = n <= 64 ? stack : malloc(n * sizeof *src);
    const char *hex = s->lent->sources;
    s->lent = NULL;
    if (!src || !s->channel)
        goto done;
    for (size_t i = 0; i < n; i++) {
        char one[PK_SOURCE_HEX + 1];
        memcpy(one, hex + PK_SOURCE_HEX * i, PK_SOURCE_HEX);
        one[PK_SOURCE_HEX] = '\0';
        src[i] = (uint32_t) strtoul(one, NULL, 16);
    }
    if (pk_channel_lend_copy(s->channel, round, src, dst, n) == -EINVAL)
        s->lend_bad = true;
done:
    if (src != stack)
        free(src);
}

static void
s_lookup_done(void *arg, const char *kv, uint64_t round, const pk_key_t *keys, const bool *hits,
              const uint64_t *sums, const uint8_t *reasons, size_t n)
{
    s_server_t *s = arg;
    p2pkv_client_t *c = s->client;
    s_sync_t *sync = c->syncs;
    while (sync && !(sync->server == s->index && strcmp(sync->kv, kv) == 0))
        sync = sync->next;
    //  the checksums wait for the fetch of this round (checks.c)
    if (hits && sums)
        (void) pk_client_answer_keep(s, kv, round, keys, hits, sums, n);
    //  a get's answer: its fetch takes them now, its hits' blocks having
    //  landed or landing (checked when the round ends, before it is told).
    //  An asynchronous get's is its own; a waiting get's is its record's.
    s_fetch_t *aget = pk_client_aget_find(c, s->index, kv, round);
    //  a get taken in two steps: its lookup's answer, under a request of
    //  its own (get_steps.c), its fetch made from it
    if (aget && aget->get_steps) {
        pk_client_steps_answer(s, aget, round, keys, hits, reasons, n);
        c->ran++;
        return;
    }
    const uint32_t *get_dest = aget ? aget->get_dest : NULL;
    s_fetch_t *f = aget;
    if (!aget && sync && sync->get_dest && sync->fetch_id) {
        pk_key_t fk = s_fetch_key(&sync->fetch_id);
        pk_keymap_entry_t *fe = pk_keymap_find(&c->fetches, &fk);
        f = fe ? (s_fetch_t *) (uintptr_t) fe->a : NULL;
        get_dest = sync->get_dest;
    }
    if (get_dest && hits) {
        size_t nhit = 0;
        pk_key_t *hk = f ? malloc((n ? n : 1) * sizeof *hk) : NULL;
        uint32_t *hd = f ? malloc((n ? n : 1) * sizeof *hd) : NULL;
        for (size_t i = 0; hk && hd && i < n; i++)
            if (hits[i]) {
                hk[nhit] = keys[i];
                hd[nhit++] = get_dest[i];
            }
        if (f && hk && hd) {
            f->blocks = nhit;
            if (sums)
                (void) pk_client_fetch_sums(s, kv, round, hk, hd, nhit, f, false);
            //  lent (capability lend): the blocks are copied now, checked
            //  as they are copied, so the role finds them counted
            if (s->lent && s->lent->round_seq == round)
                s_lend_copy(s, round, hd, nhit);
        }
        free(hk);
        free(hd);
    }
    if (aget) {
        pk_client_aget_answer(aget, hits, reasons, n);
        c->ran++;
        return;
    }
    if (sync) {
        if (hits)
            memcpy(sync->hits, hits, n * sizeof *hits);
        //  each miss's reason, where the server gave them (get.c)
        if (hits && reasons)
            memcpy(sync->reasons, reasons, n);
        else if (hits)
            memset(sync->reasons, PK_MISS_UNKNOWN, n);
        sync->round = round;
        sync->answered = hits ? 1 : -1;
        pthread_cond_broadcast(&c->synced);
        c->ran++;
        return;
    }
    if (!c->callbacks.on_lookup) {
        c->ran++;
        return;
    }
    //  The callback gets copies of kv, the keys' bytes and hits: they are
    //  the role's, and a fetch or finish the callback makes for this very
    //  lookup frees them (p2pkv.h: every pointer stays valid for the whole
    //  callback).  One allocation per answer, the size of what it names.
    size_t kvlen = strlen(kv) + 1, bytes = 0;
    if (n > PK_MAX_LIST)
        return;     //  the codec never lets one through; said for the compiler's bounds
    for (size_t i = 0; i < n; i++)
        bytes += keys[i].len;
    size_t need = n * sizeof(p2pkv_key_t) + n * sizeof(bool) + kvlen + bytes;
    _Alignas(p2pkv_key_t) uint8_t stack[4096];
    uint8_t *buf = need <= sizeof stack ? stack : pk_big_alloc(need);
    if (!buf)
        return;     //  out of memory: this one answer is not delivered
    p2pkv_key_t *out = (p2pkv_key_t *) buf;
    bool *hits_copy = (bool *) (out + n);
    char *kv_copy = (char *) (hits_copy + n);
    uint8_t *key_bytes = (uint8_t *) kv_copy + kvlen;
    memcpy(kv_copy, kv, kvlen);
    if (hits && n)
        memcpy(hits_copy, hits, n * sizeof *hits);
    for (size_t i = 0; i < n; i++) {
        if (keys[i].len)
            memcpy(key_bytes, keys[i].bytes, keys[i].len);
        out[i] = (p2pkv_key_t) { key_bytes, keys[i].len };
        key_bytes += keys[i].len;
    }
    c->ran++;
    c->callbacks.on_lookup(c->callbacks.arg, s->index, kv_copy, round, out,
                           hits ? hits_copy : NULL, n);
    if (buf != stack)
        pk_big_free(buf);
}

//  Forgets a fetch, unlinking it first when it is ended and unread.
static void
s_fetch_forget(p2pkv_client_t *c, s_fetch_t *f)
{
    if (f->status != -EINPROGRESS) {
        if (f->prev)
            f->prev->next = f->next;
        else
            c->unread_head = f->next;
        if (f->next)
            f->next->prev = f->prev;
        else
            c->unread_tail = f->prev;
        c->nunread--;
    }
    pk_key_t k = s_fetch_key(&f->id);
    pk_keymap_take(&c->fetches, &k, NULL, NULL);
    pk_client_fetch_free(f);
}

static void
s_load_done(void *arg, uint64_t id, pk_load_status_t status, const char *reason)
{
    s_server_t *s = arg;
    p2pkv_client_t *c = s->client;
    id = pk_client_steps_public_id(c, id);     //  a two-step get's fetch: the get's id
    p2pkv_status_t st = status == PK_LOAD_LANDED ? P2PKV_LANDED
                        : status == PK_LOAD_ABORTED ? P2PKV_ABORTED : P2PKV_FAILED;
    c->ran++;
    s->stall_floor = pk_clock_monotonic();
    pk_key_t k = s_fetch_key(&id);
    pk_keymap_entry_t *e = pk_keymap_find(&c->fetches, &k);
    s_fetch_t *f = e ? (s_fetch_t *) (uintptr_t) e->a : NULL;
    s_sync_t *sync = c->syncs;
    while (sync && sync->fetch_id != id)
        sync = sync->next;
    bool synced = sync != NULL;
    //  The end-to-end check, before anyone hears it landed.  A get reads
    //  each block's verdict; a fetch of the callbacks' API, whose status
    //  is one for all its blocks, did not land whole: FAILED, saying why.
    char corrupt_why[128];
    if (f)
        pk_client_fetch_ended(s, f);
    if (st == P2PKV_LANDED && f && !pk_client_fetch_check(c, s, f)) {
        size_t bad = 0;
        for (size_t i = 0; i < f->n; i++)
            bad += f->verdict[i] == PK_VERDICT_CORRUPT;
        snprintf(corrupt_why, sizeof corrupt_why, "corrupt: %zu of %zu blocks differ from the "
                 "checksums their server announced", bad, f->n);
        //  an asynchronous get says it per key, as a waiting one does
        if (!synced && !f->results) {
            st = P2PKV_FAILED;
            reason = corrupt_why;
        }
    }
    if (f && f->results)
        pk_client_aget_end(c, f, st);
    if (f && f->get_steps)
        pk_client_steps_ended(s, f);
    if (synced && f && f->verdict) {
        memcpy(sync->verdict, f->verdict, f->n);
        memcpy(sync->sums, f->sums, f->n * sizeof *f->sums);
    }
    if (synced) {
        sync->status = (int) st;
        snprintf(sync->reason, sizeof sync->reason, "%s", reason ? reason : "");
        pthread_cond_broadcast(&c->synced);
    }
    if (synced || c->callbacks.on_fetch) {
        if (f)
            s_fetch_forget(c, f);
        //  a copy: the reason may live in what the callback's own calls free
        char why[PK_ERRLEN + 64];
        snprintf(why, sizeof why, "%s", reason ? reason : "");
        if (!synced)
            c->callbacks.on_fetch(c->callbacks.arg, s->index, id, st, reason ? why : NULL);
        return;
    }
    if (!f)
        return;
    //  kept for p2pkv_client_fetch_status; the oldest unread go first
    f->status = (int) st;
    snprintf(f->reason, sizeof f->reason, "%s", reason ? reason : "");
    f->prev = c->unread_tail;
    if (c->unread_tail)
        c->unread_tail->next = f;
    else
        c->unread_head = f;
    c->unread_tail = f;
    if (++c->nunread > S_MAX_UNREAD)
        s_fetch_forget(c, c->unread_head);
}

int
pk_client_fetch_put(p2pkv_client_t *self, s_fetch_t *f)
{
    pk_key_t key = s_fetch_key(&f->id);
    return pk_keymap_put(&self->fetches, &key, (uintptr_t) f, 0) < 0 ? -ENOMEM : 0;
}

void
pk_client_load_done(s_server_t *s, uint64_t id, pk_load_status_t status, const char *reason)
{
    s_load_done(s, id, status, reason);
}

//  --------------------------------------------------------------------------
//  Construction


//  The configuration's strings, copied at construction.
static void
s_strings_free(p2pkv_client_t *self)
{
    free(self->peer_id);
    free(self->fingerprint);
    free(self->hash_seed);
    free(self->provider);
    free(self->node);
}

//  Zero (or not a number) means the default, for every time setting.
static void
s_config_defaults(p2pkv_config_t *c)
{
    if (!(c->load_timeout > 0))
        c->load_timeout = 30;
    if (!(c->abort_ack_timeout > 0))
        c->abort_ack_timeout = 10;
    if (!(c->keepalive_interval > 0))
        c->keepalive_interval = 2;
    if (!(c->silence_timeout > 0))
        c->silence_timeout = 10;
    if (!(c->connect_retry > 0))
        c->connect_retry = 0.5;
    if (!(c->stall_timeout > 0))
        c->stall_timeout = 5;
    if (c->answer_spin == 0)
        c->answer_spin = P2PKV_ANSWER_SPIN;
}

//  The pool: the caller's, or one of ours, zeroed.  0 or -ENOMEM.
static int
s_open_pool(p2pkv_client_t *self, void *pool)
{
    if (pool) {
        self->pool = pool;
        return 0;
    }
    size_t bytes = self->num_blocks * self->block_len;
    self->pool = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!self->pool)
        return -ENOMEM;
    self->own_pool = true;
    memset(self->pool, 0, bytes);
    return 0;
}

//  The epoll set, its timer and the wake-up eventfd; the caller closes
//  those that opened on failure.  0, or a negative errno with err.
static int
s_open_fds(p2pkv_client_t *self, char *err)
{
    self->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    self->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    self->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->epoll_fd < 0 || self->timer_fd < 0 || self->wake_fd < 0)
        return pk_err(err, errno ? -errno : -EMFILE,
                      "cannot create the client's file descriptors: %s",
                      strerror(errno));
    pk_client_watch(self, self->timer_fd, true);
    pk_client_watch(self, self->wake_fd, true);
    return 0;
}

//  The client's lock (recursive: callbacks may call in) and the condition
//  its gets sleep on (get.c), on the monotonic clock.
static void
s_init_lock(p2pkv_client_t *self)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&self->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    pthread_condattr_t cattr;
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->synced, &cattr);
    pthread_condattr_destroy(&cattr);
}

p2pkv_client_t *
p2pkv_client_new(const p2pkv_config_t *config, void *pool, uint64_t num_blocks,
                 uint64_t block_len, p2pkv_callbacks_t callbacks, char *err)
{
    pk_czmq_setup();
    if (!config || !config->peer_id || !*config->peer_id || !num_blocks || !block_len
        || num_blocks > PK_MAX_NUM_BLOCKS) {
        (void) pk_err(err, 0, "a peer_id and a pool of 1..2^31 blocks of at least 1 byte are "
                      "required");
        return NULL;
    }
    if (!(config->answer_spin <= 1) && !(config->answer_spin < 0)) {
        (void) pk_err(err, 0, "answer_spin must be at most 1 s (0: the default, negative: none)");
        return NULL;
    }
    //  several rails (node "A,B"): every address this host's, before
    //  anything is opened
    char bad[PK_ERRLEN];
    if (pk_transport_check_node(config->node, bad) != 0) {
        (void) pk_err(err, 0, "node (--fabric-addr) %.100s: %.140s", config->node, bad);
        return NULL;
    }
    if (sodium_init() < 0) {
        (void) pk_err(err, 0, "libsodium failed to start");
        return NULL;
    }
    pk_client_curve_t curve;
    if (pk_client_curve_keys(config, &curve, err) != 0)
        return NULL;
    p2pkv_client_t *self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    self->epoll_fd = self->timer_fd = self->wake_fd = -1;
    self->config = *config;
    //  the keys live in self->curve: the caller's strings are not kept
    self->config.curve_public = self->config.curve_secret = self->config.curve_server = NULL;
    self->curve = curve;
    sodium_memzero(&curve, sizeof curve);
    self->peer_id = strdup(config->peer_id);
    self->fingerprint = strdup(config->fingerprint ? config->fingerprint : "");
    self->hash_seed = strdup(config->hash_seed ? config->hash_seed : "0");
    self->provider = config->provider ? strdup(config->provider) : NULL;
    self->node = config->node ? strdup(config->node) : NULL;
    if (!self->peer_id || !self->fingerprint || !self->hash_seed)
        goto fail_strings;
    //  the directory: its URL is checked now, Redis is asked at the first
    //  locate (a client without the directory up still fetches by server)
    if (config->directory && !(self->locator = pk_locator_new(config->directory, err)))
        goto fail_strings;
    self->config.directory = NULL;          //  the locator keeps its own copy
    s_config_defaults(&self->config);
    self->num_blocks = num_blocks;
    self->block_len = block_len;
    self->callbacks = callbacks;
    if (s_open_pool(self, pool) != 0)
        goto fail_strings;
    if (pk_client_fabrics_open(self, err) != 0)
        goto fail_fabrics;
    if (s_open_fds(self, err) != 0)
        goto fail_fds;
    s_init_lock(self);
    if (self->config.progress_thread) {
        if (pthread_create(&self->thread, NULL, pk_client_progress_thread, self) != 0) {
            (void) pk_err(err, 0, "cannot start the progress thread");
            goto fail_lock;
        }
        self->thread_running = true;
    }
    return self;

fail_lock:
    pthread_cond_destroy(&self->synced);
    pthread_mutex_destroy(&self->lock);
fail_fds:
    if (self->epoll_fd >= 0)
        close(self->epoll_fd);
    if (self->timer_fd >= 0)
        close(self->timer_fd);
    if (self->wake_fd >= 0)
        close(self->wake_fd);
fail_fabrics:
    pk_client_fabrics_close(self);
    if (self->own_pool)
        free(self->pool);
fail_strings:
    pk_locator_destroy(&self->locator);
    s_strings_free(self);
    free(self);
fail:
    if (err && !*err)
        (void) pk_err(err, 0, "out of memory");
    return NULL;
}

//  The session's resources, opened and closed by the client session: a
//  socket whose routing id derives from the epoch, and a channel exposing
//  the pool.  Closing ends the role first, which cuts off (the endpoint
//  and registration go before anything else).
static int
s_session_open(void *arg, const uint8_t *epoch, uint8_t **blob_p, size_t *len_p, char *err)
{
    s_server_t *s = arg;
    p2pkv_client_t *self = s->client;
    int rc = pk_client_fds_check(PK_CLIENT_FDS, err);
    if (rc)
        return rc;
    s->channel = pk_channel_new(s->fabric, true, &rc, err);
    if (!s->channel)
        return rc < 0 ? rc : -EIO;
    //  a server without rails reads one rail's blob: ours is our first's
    size_t rails = pk_fabric_rails(s->fabric);
    s->rails_note[0] = '\0';
    if (rails > 1 && !s->server_rails) {
        pk_channel_single(s->channel);
        //  never a silent single rail: the UP report's reason says it
        snprintf(s->rails_note, sizeof s->rails_note, "one rail of our %zu: the server "
                 "lists no rails (it has one, or is older)", rails);
    }
    s->wait_fd = pk_channel_wait_fd(s->channel);
    pk_client_watch(self, s->wait_fd, true);
    s->cq_watched = s->wait_fd >= 0;
    if (pk_channel_blob(s->channel, blob_p, len_p))
        return pk_err(err, -EIO, "cannot describe the local endpoint");
    rc = pk_client_dealer_new(&s->dealer, 0, err);      //  asked for above
    if (rc)
        return rc;
    s->dealer_read = false;
    //  a stable routing id: a TCP reconnect keeps the session's id
    uint8_t rid[1 + PK_EPOCH_LEN] = { 'P' };
    memcpy(rid + 1, epoch, PK_EPOCH_LEN);
    zmq_setsockopt(zsock_resolve(s->dealer), ZMQ_ROUTING_ID, rid, sizeof rid);
    pk_client_curve_apply(s->dealer, &self->curve, s->curve_server);
    //  a refused handshake is retried by ZeroMQ in silence: the watch
    //  tells a refusal from a server that does not answer, and until the
    //  connect returned (a session not yet announced), what else keeps
    //  the server from answering (watch.c)
    if (pk_client_watch_open(&s->watch, s->dealer, &s->addr, self->curve.on,
                             !s->announced) != 0)
        return pk_err(err, -ENOMEM, "cannot monitor the socket to %s", s->endpoint);
    if (zsock_connect(s->dealer, "%s", s->endpoint) < 0)
        return pk_err(err, -EINVAL, "cannot connect to %.128s: %s", s->endpoint,
                      zmq_strerror(zmq_errno()));
    pk_client_watch(self, zsock_fd(s->dealer), true);
    return 0;
}

static void
s_session_close(void *arg)
{
    s_server_t *s = arg;
    pk_client_role_destroy(&s->role);
    s_cut_off(s);
    if (s->dealer) {
        pk_client_watch(s->client, zsock_fd(s->dealer), false);
        pk_client_watch_close(&s->watch, s->dealer);
    }
    pk_client_dealer_destroy(&s->dealer);
}

//  ZeroMQ's I/O thread frees a sent frame once written (or the socket's
//  close drops it)
static void
s_frame_free(void *data, void *hint)
{
    (void) hint;
    pk_big_free(data);
}

static int
s_session_send(void *arg, char *frame, size_t len)
{
    s_server_t *s = arg;
    //  A large frame goes as it is, not copied into one of ZeroMQ's: under
    //  glibc's default heap policy (an engine's; the library sets none)
    //  the copy of a large lookup's frame grew the heap past its trim
    //  threshold and every lookup faulted its pages in again (design.md,
    //  "Lookups linear in their keys").  A small one is copied: handing it
    //  over costs ZeroMQ an allocation of its own and the I/O thread a
    //  free of ours, more than the copy.
    zmq_msg_t m;
    int rc = len >= PK_BIG_MIN ? zmq_msg_init_data(&m, frame, len, s_frame_free, NULL)
                               : zmq_msg_init_size(&m, len);
    if (rc != 0) {
        free(frame);
        return -ENOMEM;
    }
    if (len < PK_BIG_MIN) {
        memcpy(zmq_msg_data(&m), frame, len);
        free(frame);
    }
    //  never block: a DEALER with no connected server would wait forever
    rc = zmq_msg_send(&m, zsock_resolve(s->dealer), ZMQ_DONTWAIT);
    s->dealer_read = false;         //  a send may take the command that fires its fd
    s->client->sends++;
    if (rc < 0)
        zmq_msg_close(&m);      //  a large frame: its buffer with it
    return rc < 0 ? -EAGAIN : 0;
}

static int
s_session_up(void *arg)
{
    s_server_t *s = arg;
    p2pkv_client_t *self = s->client;
    //  the rail stall: the consumer's fabric's (fabrics.c), a quarter of
    //  its stall timeout; a failed fresh registration retries on its scale
    pk_client_role_config_t rc_cfg = { self->config.load_timeout, self->config.abort_ack_timeout,
                                       &self->fetch_ids, self->config.stall_timeout / 4 };
    s->role = pk_client_role_new(&rc_cfg, (pk_clock_t) { s, s_clock_now },
                                 (pk_sender_t) { s, s_role_send },
                                 (pk_client_transport_t) { .self = s, .landed = s_landed,
                                                           .cut_off = s_cut_off,
                                                           .forget = s_forget,
                                                           .landed_rails = s_landed_rails,
                                                           .revoke_rail = s_revoke_rail,
                                                           .landed_slices = s_landed_slices },
                                 (pk_client_events_t) { s, s_lookup_done, s_load_done });
    if (s->role && pk_caps_has(pk_client_session_server_caps(s->session), PK_CAP_REJOIN))
        pk_client_role_set_rail_offer(s->role, s_rail_offer, s);
    s->stall_floor = pk_clock_monotonic();
    //  The handshake passed: only a new session's can be refused, and it
    //  gets a new socket and monitor; a session whose key is revoked is
    //  told so by the server (disconnect retired).  So the monitor's two
    //  sockets go now, and an idle session holds one ZeroMQ socket, not
    //  three (czmq allows 1,024 per process unless ZSYS_MAX_SOCKETS says
    //  more: 341 sessions with the monitor kept).
    if (s->role && s->dealer)
        pk_client_watch_close(&s->watch, s->dealer);
    return s->role ? 0 : -ENOMEM;
}

//  A server that agreed to the checksum capability (its connect_ack listed
//  it, and so did our connect) and answers hits without their checksums
//  would have them land unchecked: a violation, not a quiet downgrade.
static bool
s_sums_missing(const s_server_t *s, const pk_msg_t *msg)
{
    if (msg->type != PK_MSG_LOOKUP_RESP || (msg->present & PK_BIT(PK_F_CHECKSUMS))
        || s->client->config.no_verify
        || !pk_caps_has(pk_client_session_server_caps(s->session), PK_CAP_CHECKSUM))
        return false;
    for (size_t i = 0; i < msg->keys.count; i++)
        if (msg->hits[i])
            return true;
    return false;
}

static int
s_session_deliver(void *arg, const pk_msg_t *msg, const char **why)
{
    s_server_t *s = arg;
    if (s_sums_missing(s, msg)) {
        *why = "a lookup_resp with hits and no checksums, though both sides have the checksum "
               "capability";
        return -EPROTO;
    }
    //  a lent answer only where we listed lend, the channel lends and
    //  the server's connect_ack said so: else the blocks would never land
    bool lent = msg->type == PK_MSG_GET_RESP && (msg->present & PK_BIT(PK_F_SOURCES));
    if (lent && !(s->channel && pk_channel_lends(s->channel)
                  && pk_caps_has(pk_client_session_server_caps(s->session), PK_CAP_LEND))) {
        *why = "a get_resp with sources, though this session lends nothing";
        return -EPROTO;
    }
    s->lent = lent ? msg : NULL;
    s->lend_bad = false;
    int rc = pk_client_role_on_message(s->role, msg);
    //  an answer no get took (its load ended, cancelled, before it came):
    //  the server still pins its blocks, so it is told at once that
    //  nothing was copied, rather than finding out at its stall timeout
    if (s->lent && s->channel)
        (void) pk_channel_lend_copy(s->channel, msg->round_seq, NULL, NULL, 0);
    s->lent = NULL;
    if (rc == 0 && s->lend_bad) {
        *why = "a get_resp whose sources name a block outside the server's pool";
        return -EPROTO;
    }
    if (rc == -EPROTO)
        *why = pk_client_role_violation(s->role);
    return rc;
}

//  The server is gone: cut off first, then its open fetches fail and its
//  open lookups get their answer without hits.  What already arrived on
//  the data plane is read before: a draining server says goodbye right
//  after the transfer_done of a fetch it finished, and the immediates of
//  its last blocks may still wait in the queue; counted now, that fetch
//  ends landed (the role's server_gone) rather than failed and fetched
//  again from another holder (seen in the rolling restart, make
//  hardening: 15 such failovers in 6 restarts, none after).  Bounded:
//  the queue is read until it has nothing, at most 1024 reads.
static void
s_session_gone(void *arg, const char *reason)
{
    s_server_t *s = arg;
    for (int i = 0; s->channel && i < 1024 && pk_channel_progress(s->channel) > 0; i++)
        ;
    pk_client_role_server_gone(s->role, reason);
    pk_client_steps_gone(s, reason);
    pk_client_answers_drop(s, NULL);
}

static void
s_session_state(void *arg, pk_client_session_state_t state, const char *reason)
{
    static const p2pkv_server_state_t map[] = {
        [PK_CLIENT_SESSION_DOWN] = P2PKV_SERVER_DOWN,
        [PK_CLIENT_SESSION_CONNECTING] = P2PKV_SERVER_CONNECTING,
        [PK_CLIENT_SESSION_UP] = P2PKV_SERVER_UP,
        [PK_CLIENT_SESSION_STOPPED] = P2PKV_SERVER_STOPPED,
    };
    s_server_t *s = arg;
    s->state = map[state];
    snprintf(s->reason, sizeof s->reason, "%s", state == PK_CLIENT_SESSION_UP && *s->rails_note
                                               ? s->rails_note : reason);
    p2pkv_client_t *c = s->client;
    if (s->announced && c->callbacks.on_server) {
        c->ran++;
        //  a copy: a disconnect from the callback frees s
        char why[sizeof s->reason];
        memcpy(why, s->reason, sizeof why);
        c->callbacks.on_server(c->callbacks.arg, s->index, s->state, why);
    }
}

static const pk_client_session_ops_t s_session_ops = {
    .size = sizeof (pk_client_session_ops_t),
    .open = s_session_open,
    .close = s_session_close,
    .send = s_session_send,
    .up = s_session_up,
    .deliver = s_session_deliver,
    .gone = s_session_gone,
    .state = s_session_state,
};

static void
s_server_free(s_server_t **s_p)
{
    s_server_t *s = *s_p;
    if (!s)
        return;
    pk_client_session_destroy(&s->session);
    pk_client_answers_drop(s, NULL);
    free(s->endpoint);
    free(s);
    *s_p = NULL;
}

void
p2pkv_client_destroy(p2pkv_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    p2pkv_client_t *self = *self_p;
    if (self->thread_running) {
        atomic_store(&self->stopping, true);
        uint64_t one = 1;
        if (write(self->wake_fd, &one, sizeof one) < 0) {
            //  the thread still sees stopping within its 100 ms wait
        }
        pthread_join(self->thread, NULL);
    }
    for (int i = 0; i < self->nservers; i++) {
        s_server_t *s = self->servers[i];
        if (s) {
            s->announced = false;       //  no on_server from destroy
            pk_client_session_disconnect(s->session, PK_DISC_SHUTDOWN, "client closing");
        }
        s_server_free(&self->servers[i]);
    }
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->fetches, &at)); )
        pk_client_fetch_free((s_fetch_t *) (uintptr_t) e->a);
    pk_keymap_fini(&self->fetches);
    pk_client_fabrics_close(self);
    close(self->epoll_fd);
    close(self->timer_fd);
    close(self->wake_fd);
    pthread_cond_destroy(&self->synced);
    pthread_mutex_destroy(&self->lock);
    if (self->own_pool)
        free(self->pool);
    pk_locator_destroy(&self->locator);
    s_strings_free(self);
    free(self);
    *self_p = NULL;
    //  the large blocks its requests left for the next ones (the
    //  process's other clients, if any, keep theirs coming)
    pk_big_trim();
}

uint8_t *
p2pkv_client_pool(p2pkv_client_t *self)
{
    return self->pool;
}

//  --------------------------------------------------------------------------
//  Sessions

//  The handshake, servicing only this server (and the progress thread
//  the others), the lock released between steps: the server's index, or
//  a negative errno with the server forgotten.
static int
s_handshake(p2pkv_client_t *self, s_server_t *s, int slot, double timeout, char *err)
{
    double deadline = pk_clock_monotonic() + timeout;
    int rc = -ETIMEDOUT;
    while (true) {
        pthread_mutex_lock(&self->lock);
        if (s->state == P2PKV_SERVER_CONNECTING)
            pk_client_server_step(self, s);
        if (s->state == P2PKV_SERVER_UP)
            rc = 0;
        else if (s->refused) {
            (void) pk_err(err, 0, "%s: %s", s->endpoint, s->reason);
            rc = s->refused;
        }
        else if (s->state == P2PKV_SERVER_STOPPED) {
            (void) pk_err(err, 0, "%s", s->reason);
            rc = -EPROTO;
        }
        bool done = rc != -ETIMEDOUT || s->refused || pk_clock_monotonic() >= deadline;
        if (done && rc == 0)
            s->announced = true;
        else if (done) {
            //  A server that kept refusing (out of descriptors, a
            //  restarted consumer's old session still retiring) said why
            //  to the session, which kept asking: its reason, if any.
            const char *refused = *s->reason || !s->session
                                  ? "" : pk_client_session_reason(s->session);
            char note[PK_ERRLEN] = "";
            if (!*s->reason)
                pk_client_watch_note(&s->watch, note, sizeof note);
            if (s->refused)
                ;                   //  said above (a silent port's verdict is -ETIMEDOUT)
            else if (rc == -ETIMEDOUT && *refused)
                (void) pk_err(err, 0, "%s, for %.1f s", refused, timeout);
            else if (rc == -ETIMEDOUT)
                (void) pk_err(err, 0, "no answer from %.100s within %.1f s%s%s%s", s->endpoint,
                              timeout, *s->reason ? ": " : "", s->reason, note);
            self->servers[slot] = NULL;
            while (self->nservers && !self->servers[self->nservers - 1])
                self->nservers--;
            s_server_free(&s);
        }
        pk_client_arm(self);
        pthread_mutex_unlock(&self->lock);
        if (done)
            return rc ? rc : slot;
        zclock_sleep(1);
    }
}

static int s_connect(p2pkv_client_t *self, const char *endpoint, const char *server_key,
                     double timeout, char *err);

int
p2pkv_client_connect(p2pkv_client_t *self, const char *endpoint, double timeout, char *err)
{
    return s_connect(self, endpoint, "", timeout, err);
}

int
p2pkv_client_connect_curve(p2pkv_client_t *self, const char *endpoint, const char *server_key,
                           double timeout, char *err)
{
    char key[41];
    if (!self->curve.on)
        return pk_err(err, -EINVAL, "p2pkv_client_connect_curve: the client has no CURVE "
                      "keypair (config curve_public, curve_secret, curve_server)");
    if (!server_key || pk_client_curve_server_key(server_key, key, err) != 0)
        return pk_err(err, -EINVAL, "server_key: expected a Z85 key of 40 characters");
    return s_connect(self, endpoint, key, timeout, err);
}

//  The index of a live session to endpoint, or -1; *free_p the first
//  free slot (-1: none below nservers).  With the lock held.
static int
s_find_server(p2pkv_client_t *self, const char *endpoint, int *free_p)
{
    *free_p = -1;
    for (int i = 0; i < self->nservers; i++) {
        s_server_t *s = self->servers[i];
        if (s && strcmp(s->endpoint, endpoint) == 0 && s->state != P2PKV_SERVER_STOPPED)
            return i;
        if (!s && *free_p < 0)
            *free_p = i;
    }
    return -1;
}

//  Under auto, the server's description (its providers and host), asked
//  without the lock and with this client's CURVE keys: 0, or a negative
//  errno with err.  Named, no question: the provider is the config's.
static int
s_describe(p2pkv_client_t *self, const char *endpoint, const pk_client_addr_t *addr,
           const char *server_key, double timeout, p2pkv_description_t *d, char *caps,
           char *err)
{
    memset(d, 0, sizeof *d);
    *caps = '\0';
    //  several rails of ours: asked too, whether the server takes them all
    if (!self->auto_provider && !(self->node && strchr(self->node, ',')))
        return 0;
    pthread_mutex_lock(&self->lock);
    int slot, known = s_find_server(self, endpoint, &slot);
    pthread_mutex_unlock(&self->lock);
    if (known >= 0)
        return 0;               //  s_connect returns that one
    p2pkv_config_t keys = { .peer_id = self->peer_id };
    if (self->curve.on) {
        keys.curve_public = self->curve.public_key;
        keys.curve_secret = self->curve.secret_key;
        keys.curve_server = *server_key ? server_key : self->curve.server_key;
    }
    return pk_client_describe_caps(endpoint, addr, timeout, self->curve.on ? &keys : NULL, d,
                                   caps, err);
}

//  A new server slot and its session; server_key: its CURVE key ("": the
//  config's); *skip_p: the providers of the server's description not to
//  use (auto), to which a same-host provider tried is added, and named in
//  tried (64 bytes; "" when none was).  The index, or a negative errno
//  with err.
static int
s_connect_once(p2pkv_client_t *self, const char *endpoint, const pk_client_addr_t *addr,
               const char *server_key, double timeout, unsigned *skip_p, char *tried,
               char *err)
{
    p2pkv_description_t d;
    char caps[PK_MAX_CAPS + 1];
    double deadline = pk_clock_monotonic() + timeout;
    *tried = 0;
    int rc, slot, known;
    //  a session found while describing is returned; one gone since (it
    //  was there, so no description was asked) means describing after all
    for (int tries = 0;; tries++) {
        rc = s_describe(self, endpoint, addr, server_key, deadline - pk_clock_monotonic(), &d,
                        caps, err);
        if (rc)
            return rc;
        pthread_mutex_lock(&self->lock);
        known = s_find_server(self, endpoint, &slot);
        if (known >= 0) {
            pthread_mutex_unlock(&self->lock);
            return known;
        }
        if (!self->auto_provider || d.nproviders || tries == 2)
            break;
        pthread_mutex_unlock(&self->lock);
    }
    timeout = deadline - pk_clock_monotonic();
    if (slot < 0 && self->nservers == S_MAX_SERVERS) {
        pthread_mutex_unlock(&self->lock);
        (void) pk_err(err, 0, "at most %d servers", S_MAX_SERVERS);
        return -ENOSPC;
    }
    if (slot < 0)
        slot = self->nservers;
    s_server_t *s = calloc(1, sizeof *s);
    if (!s || !(s->endpoint = strdup(endpoint))) {
        free(s);
        pthread_mutex_unlock(&self->lock);
        (void) pk_err(err, 0, "out of memory");
        return -ENOMEM;
    }
    s->client = self;
    s->index = slot;
    s->wait_fd = -1;
    s->watch.fd = -1;
    s->addr = *addr;
    //  a description arrived (auto) or the provider is the config's
    int index;
    const pk_client_fabric_t *fab = pk_client_fabric_for(self, &d, *skip_p, &index, err);
    if (fab && index >= 0 && pk_transport_provider(d.providers[index])->same_host) {
        memcpy(tried, d.providers[index], sizeof d.providers[index]);
        *skip_p |= 1u << index;
    }
    if (!fab) {
        free(s->endpoint);
        free(s);
        pthread_mutex_unlock(&self->lock);
        return -EPROTONOSUPPORT;
    }
    s->fabric = fab->fabric;
    snprintf(s->curve_server, sizeof s->curve_server, "%s", server_key);
    pk_client_session_config_t scfg = { self->config.connect_retry,
                                        self->config.keepalive_interval,
                                        self->config.silence_timeout, self->config.no_reconnect };
    //  the checksum capability only when we check: a server then leaves
    //  the checksums out of its answers (16 bytes a hit); marks serve only
    //  the check; miss reasons always
    //  rails: our channel sends every rail, to a server that takes them
    s->server_rails = pk_caps_has(caps, PK_CAP_RAILS);
    bool rails = s->server_rails && pk_fabric_rails(s->fabric) > 1;
    pk_client_identity_t id = { s->endpoint, self->peer_id, self->num_blocks, self->block_len,
                                self->fingerprint, self->hash_seed, 0,
                                self->config.no_verify
                                ? (rails ? PK_CAP_REASONS " " S_RAIL_CAPS : PK_CAP_REASONS)
                                : s->fabric->ops->channel_lend_copy ? PK_CAPS " " PK_CAP_LEND
                                : rails ? PK_CAPS " " S_RAIL_CAPS : PK_CAPS };
    pk_client_session_ops_t ops = s_session_ops;
    ops.self = s;
    s->session = pk_client_session_new(&scfg, &id, (pk_clock_t) { s, s_clock_now }, &ops);
    rc = s->session ? pk_client_session_start(s->session, err)
                    : pk_err(err, -ENOMEM, "out of memory");
    if (rc) {
        s_server_free(&s);
        pthread_mutex_unlock(&self->lock);
        return rc;
    }
    self->servers[slot] = s;
    if (slot == self->nservers)
        self->nservers++;
    pthread_mutex_unlock(&self->lock);
    return s_handshake(self, s, slot, timeout, err);
}

/*  The default provider falls back (issue 34, point 7).  Under auto a
    server on this host is offered mmap or shm first, and those serve
    only processes of the server's own user and namespaces: a consumer of
    another user was refused, and never tried the network.  So a connect
    whose same-host provider failed (refused by the server, or its channel
    would not open) tries again without it, within the same timeout: the
    next provider both sides have, best first.  What it costs: one more
    describe and handshake, on this path only.  The first refusal is said
    once, as the server's reason while it is UP
    (p2pkv_client_server_state), which p2pkv get prints.  */
static int
s_connect(p2pkv_client_t *self, const char *endpoint, const char *server_key, double timeout,
          char *err)
{
    double deadline = pk_clock_monotonic() + timeout;
    unsigned skip = 0;
    char why[PK_ERRLEN] = "", note[sizeof ((s_server_t *) 0)->reason] = "";
    //  the endpoint checked and its host resolved (without the lock: a
    //  resolver may take seconds), unless a session to it is there
    pk_client_addr_t addr = { 0 };
    pthread_mutex_lock(&self->lock);
    int slot, known = s_find_server(self, endpoint, &slot);
    pthread_mutex_unlock(&self->lock);
    if (known < 0) {
        int rc = pk_client_endpoint_resolve(endpoint, &addr, err);
        if (rc)
            return rc;
    }
    for (;;) {
        char tried[64];
        int rc = s_connect_once(self, endpoint, &addr, server_key,
                                deadline - pk_clock_monotonic(), &skip, tried, why);
        if (rc >= 0 && *note) {
            pthread_mutex_lock(&self->lock);
            s_server_t *s = self->servers[rc];
            size_t at = strlen(note);
            snprintf(note + at, sizeof note - at, "; fell back to %.60s",
                     pk_fabric_provider(s->fabric));
            memcpy(s->reason, note, sizeof s->reason);
            pthread_mutex_unlock(&self->lock);
        }
        //  a same-host provider failed, and time is left: the next one
        if (rc >= 0 || !*tried || rc == -ETIMEDOUT || pk_clock_monotonic() >= deadline) {
            if (rc < 0)
                (void) pk_err(err, rc, "%s", why);
            return rc;
        }
        if (!*note)
            snprintf(note, sizeof note, "%.60s refused: %.200s", tried, why);
    }
}

int
p2pkv_client_disconnect(p2pkv_client_t *self, int server)
{
    pthread_mutex_lock(&self->lock);
    int rc = -EINVAL;
    if (server >= 0 && server < self->nservers && self->servers[server]) {
        s_server_t *s = self->servers[server];
        //  its open work fails first (cut off, then reported), then goodbye
        if (s->state == P2PKV_SERVER_UP)
            pk_client_role_server_gone(s->role, "disconnected by the client");
        pk_client_steps_gone(s, "disconnected by the client");
        s->announced = false;           //  the caller knows: no on_server
        pk_client_session_disconnect(s->session, PK_DISC_SHUTDOWN, "client disconnecting");
        s_server_free(&self->servers[server]);
        while (self->nservers && !self->servers[self->nservers - 1])
            self->nservers--;
        rc = 0;
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}

int
p2pkv_client_server_state(p2pkv_client_t *self, int server, char *reason)
{
    pthread_mutex_lock(&self->lock);
    int rc = -EINVAL;
    if (server >= 0 && server < self->nservers && self->servers[server]) {
        rc = (int) self->servers[server]->state;
        if (reason)
            snprintf(reason, 256, "%.255s", self->servers[server]->reason);
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}

int
p2pkv_client_server_provider(p2pkv_client_t *self, int server, char *out, size_t cap)
{
    pthread_mutex_lock(&self->lock);
    int rc = -EINVAL;
    if (server >= 0 && server < self->nservers && self->servers[server] && cap) {
        s_server_t *s = self->servers[server];
        snprintf(out, cap, "%s", pk_fabric_provider(s->fabric));
        rc = 0;
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}

int
p2pkv_client_server_endpoint(p2pkv_client_t *self, int server, char *out, size_t cap)
{
    pthread_mutex_lock(&self->lock);
    int rc = -EINVAL;
    if (server >= 0 && server < self->nservers && self->servers[server] && cap) {
        snprintf(out, cap, "%s", self->servers[server]->endpoint);
        rc = 0;
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}

static s_server_t *
s_server(p2pkv_client_t *self, int server)
{
    if (server < 0 || server >= self->nservers)
        return NULL;
    s_server_t *s = self->servers[server];
    return s && s->state == P2PKV_SERVER_UP ? s : NULL;
}

//  -EINVAL for a key the wire cannot carry (1..PK_MAX_KEY_BYTES bytes): a
//  lookup holding one would not encode and would never be answered.
int
pk_client_keys(const p2pkv_key_t *in, size_t n, pk_key_t *out)
{
    for (size_t i = 0; i < n; i++) {
        if (!in[i].bytes || in[i].len == 0 || in[i].len > PK_MAX_KEY_BYTES)
            return -EINVAL;
        out[i] = pk_key_make(in[i].bytes, in[i].len);
    }
    return 0;
}

//  A request name the wire cannot carry (none, empty, over PK_MAX_STRING
//  bytes, not UTF-8) is refused at the call, as such a key is: a lookup,
//  fetch or get under it would not encode, so it was never sent, and the
//  lookup was never answered (a fetch or get failed only at its deadline).
bool
pk_client_kv_ok(const char *kv)
{
    size_t len = kv ? strnlen(kv, PK_MAX_STRING + 1) : 0;
    return len >= 1 && len <= PK_MAX_STRING && pk_utf8_ok(kv, len);
}

int
p2pkv_client_lookup(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
                    size_t n)
{
    if (n == 0 || n > PK_MAX_LIST || !pk_client_kv_ok(kv))
        return -EINVAL;
    pk_key_t *k = pk_big_alloc(n * sizeof *k);
    if (!k)
        return -ENOMEM;
    if (pk_client_keys(keys, n, k) != 0) {
        pk_big_free(k);
        return -EINVAL;
    }
    pthread_mutex_lock(&self->lock);
    s_server_t *s = s_server(self, server);
    //  flushed at the next step: lookups of a request made before it go
    //  out as one
    int rc = s ? pk_client_role_probe(s->role, kv, k, n) : -ENOTCONN;
    self->asked = pk_clock_monotonic();
    pk_client_kick(self);
    pthread_mutex_unlock(&self->lock);
    pk_big_free(k);
    return rc;
}

int
p2pkv_client_fetch(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
                   const uint32_t *dest, size_t n, uint64_t round, double deadline,
                   uint64_t *fetch_id_p)
{
    if (n == 0 || n > PK_MAX_LIST || !pk_client_kv_ok(kv))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (dest[i] >= self->num_blocks)
            return -ERANGE;
    pk_key_t *k = pk_big_alloc(n * sizeof *k);
    if (!k)
        return -ENOMEM;
    if (pk_client_keys(keys, n, k) != 0) {
        pk_big_free(k);
        return -EINVAL;
    }
    s_fetch_t *f = calloc(1, sizeof *f);
    if (!f) {
        pk_big_free(k);
        return -ENOMEM;
    }
    f->status = -EINPROGRESS;
    f->blocks = n;
    pthread_mutex_lock(&self->lock);
    s_server_t *s = s_server(self, server);
    uint64_t id = 0;
    int rc = s ? pk_client_role_fetch(s->role, kv, k, dest, n, round, deadline, &id)
               : -ENOTCONN;
    //  the round's announced checksums go with the fetch (none: unchecked)
    if (rc == 0 && round)
        (void) pk_client_fetch_sums(s, kv, round, k, dest, n, f, true);
    if (rc == 0) {
        //  what landed before this fetch says nothing of its progress: a
        //  server idle for longer than stall_timeout is not stalled
        s->stall_floor = pk_clock_monotonic();
        f->id = id;
        pk_key_t key = s_fetch_key(&f->id);
        if (pk_keymap_put(&self->fetches, &key, (uintptr_t) f, 0) < 0)
            pk_client_fetch_free(f);   //  its status then comes by callback only (unchecked)
        f = NULL;
        if (fetch_id_p)
            *fetch_id_p = id;
    }
    pk_client_fetch_free(f);
    self->asked = pk_clock_monotonic();
    pk_client_kick(self);
    pthread_mutex_unlock(&self->lock);
    pk_big_free(k);
    return rc;
}

bool
pk_client_can_get(p2pkv_client_t *self, int server)
{
    pthread_mutex_lock(&self->lock);
    s_server_t *s = s_server(self, server);
    bool can = s && pk_caps_has(pk_client_session_server_caps(s->session), PK_CAP_GET);
    pthread_mutex_unlock(&self->lock);
    return can;
}

//  True when keys or dest name one twice: a get may not (its codec rule,
//  a fetch's), so such a batch takes the two steps.
static bool
s_repeats(const pk_key_t *keys, const uint32_t *dest, size_t n)
{
    pk_keymap_t seen = PK_KEYMAP_INIT, blocks = PK_KEYMAP_INIT;
    bool rep = pk_keymap_reserve(&seen, n) < 0 || pk_keymap_reserve(&blocks, n) < 0;
    for (size_t i = 0; i < n && !rep; i++) {
        pk_key_t b = { (const uint8_t *) &dest[i], sizeof dest[i], pk_hash_id(dest[i], 7) };
        pk_keymap_entry_t *e;
        rep = pk_keymap_get_or_put(&seen, &keys[i], i, 0, &e) != 1
              || pk_keymap_get_or_put(&blocks, &b, i, 0, &e) != 1;
    }
    pk_keymap_fini(&seen);
    pk_keymap_fini(&blocks);
    return rep;
}

//  A get of keys into dest, as a load (a fetch's record) whose id is
//  *fetch_id_p; with results, an asynchronous one (get_async.c): the
//  record keeps what its answer and end fill, and is reported as a fetch's.
static int
s_get_start(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
            const uint32_t *dest, size_t n, double deadline, p2pkv_key_result_t *results,
            bool kick, uint64_t *fetch_id_p)
{
    if (n == 0 || n > PK_MAX_LIST || !pk_client_kv_ok(kv))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (dest[i] >= self->num_blocks)
            return -ERANGE;
    pk_key_t *k = malloc(n * sizeof *k);
    s_fetch_t *f = calloc(1, sizeof *f);
    int rc = k && f ? pk_client_keys(keys, n, k) : -ENOMEM;
    if (rc == 0 && s_repeats(k, dest, n))
        rc = -ENOTUNIQ;
    if (rc == 0 && results) {
        f->results = results;
        f->get_n = n;
        f->get_server = server;
        f->get_dest = malloc(n * sizeof *dest);
        f->get_kv = strdup(kv);
        if (f->get_dest && f->get_kv)
            memcpy(f->get_dest, dest, n * sizeof *dest);
        else
            rc = -ENOMEM;
    }
    if (rc) {
        free(k);
        pk_client_fetch_free(f);
        return rc;
    }
    f->status = -EINPROGRESS;
    f->blocks = n;
    pthread_mutex_lock(&self->lock);
    s_server_t *s = s_server(self, server);
    uint64_t id = 0;
    rc = s ? 0 : -ENOTCONN;
    if (rc == 0 && results
        && !pk_caps_has(pk_client_session_server_caps(s->session), PK_CAP_GET))
        rc = -EOPNOTSUPP;
    //  an asynchronous get is reported from its record: room for it
    //  first, so that one sent is never one the client cannot answer
    if (rc == 0 && results
        && pk_keymap_reserve(&self->fetches, pk_keymap_size(&self->fetches) + 1) < 0)
        rc = -ENOMEM;
    if (rc == 0)
        rc = pk_client_role_get(s->role, kv, k, dest, n, deadline, &id, &f->get_round);
    if (rc == 0) {
        s->stall_floor = pk_clock_monotonic();
        f->id = id;
        pk_key_t key = s_fetch_key(&f->id);
        if (pk_keymap_put(&self->fetches, &key, (uintptr_t) f, 0) < 0)
            pk_client_fetch_free(f);
        else if (results) {
            f->get_next = self->agets;
            if (self->agets)
                self->agets->get_prev = f;
            self->agets = f;
        }
        f = NULL;
        if (fetch_id_p)
            *fetch_id_p = id;
    }
    pk_client_fetch_free(f);
    self->asked = pk_clock_monotonic();
    if (kick)
        pk_client_kick(self);
    pthread_mutex_unlock(&self->lock);
    free(k);
    return rc;
}

int
pk_client_get_one(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
                  const uint32_t *dest, size_t n, double deadline, uint64_t *fetch_id_p)
{
    return s_get_start(self, server, kv, keys, dest, n, deadline, NULL,
                       self->config.progress_thread, fetch_id_p);
}

int
pk_client_get_async_one(p2pkv_client_t *self, int server, const char *kv,
                        const p2pkv_key_t *keys, const uint32_t *dest, size_t n,
                        double deadline, p2pkv_key_result_t *results, uint64_t *fetch_id_p)
{
    return s_get_start(self, server, kv, keys, dest, n, deadline, results, true, fetch_id_p);
}

//  The fetch is open on at most one server's role; one that is open
//  nowhere ended already when the shared counter issued its id (ids are
//  drawn in order, so every id up to the counter was issued).
int
p2pkv_client_cancel(p2pkv_client_t *self, uint64_t fetch_id)
{
    pthread_mutex_lock(&self->lock);
    //  a get taken in two steps: its fetch, or its lookup (get_steps.c)
    int rc = pk_client_steps_cancel(self, fetch_id);
    for (int i = 0; i < self->nservers && rc == -ENOENT; i++) {
        s_server_t *s = self->servers[i];
        if (s && s->role)
            rc = pk_client_role_cancel(s->role, fetch_id);
    }
    if (rc == -ENOENT && fetch_id >= 1 && fetch_id <= self->fetch_ids)
        rc = -EALREADY;
    //  a get's own fetch: the get says so when it returns
    for (s_sync_t *sync = self->syncs; sync && rc != -EALREADY && rc != -ENOENT;
         sync = sync->next)
        if (sync->fetch_id == fetch_id && sync->status == -EINPROGRESS)
            sync->cancelled = 1;
    pthread_cond_broadcast(&self->synced);
    self->asked = pk_clock_monotonic();
    pk_client_kick(self);
    pthread_mutex_unlock(&self->lock);
    return rc;
}

//  Gets on server s that a finish of kv cancels: those of request kv (their
//  open fetch is cancelled here; they stop before the next step), and one
//  whose open fetch is under batch request kv (the role cancels that one).
//  A get's own finish of its batch comes after its fetch ended: no mark.
static bool
s_cancel_gets(p2pkv_client_t *self, s_server_t *s, const char *kv)
{
    bool marked = false;
    for (s_sync_t *sync = self->syncs; sync; sync = sync->next) {
        if (sync->server != s->index)
            continue;
        bool open = sync->fetch_id && sync->status == -EINPROGRESS;
        if (strcmp(sync->request, kv) == 0) {
            sync->cancelled = marked = 1;
            if (open)
                (void) pk_client_role_cancel(s->role, sync->fetch_id);
        }
        else if (open && strcmp(sync->kv, kv) == 0)
            sync->cancelled = marked = 1;
    }
    pthread_cond_broadcast(&self->synced);
    return marked;
}

//  The role aborts the request's open fetches before its terminal fetch;
//  their ends come later, from the poll, once the fence holds.  The loop
//  is kicked where that gave it work: a frame went out (a send may take
//  the command that fires the socket's fd) or a get was marked cancelled.
//  A get's finish of its own request, after its answer, sends nothing
//  (the get was never a lookup) and changes nothing a loop waits on: no
//  kick, so one-trip gets cost no eventfd write and read each.
int
p2pkv_client_finish(p2pkv_client_t *self, int server, const char *kv)
{
    if (!pk_client_kv_ok(kv))
        return -EINVAL;             //  no request of that name can be open
    pthread_mutex_lock(&self->lock);
    s_server_t *s = s_server(self, server);
    uint64_t sends = self->sends;
    bool marked = false;
    if (s) {
        marked = s_cancel_gets(self, s, kv);
        marked |= pk_client_steps_finish(self, s, kv);
        pk_client_answers_drop(s, kv);
    }
    int rc = s ? pk_client_role_finish(s->role, kv) : -ENOTCONN;
    if (s && (marked || self->sends != sends))
        pk_client_kick(self);
    pthread_mutex_unlock(&self->lock);
    return rc;
}

//  The batch's state, read under the lock: the progress thread may be
//  the one answering it.
int
p2pkv_client_fetch_status(p2pkv_client_t *self, uint64_t fetch_id, char *reason)
{
    pthread_mutex_lock(&self->lock);
    pk_key_t k = s_fetch_key(&fetch_id);
    pk_keymap_entry_t *e = pk_keymap_find(&self->fetches, &k);
    s_fetch_t *f = e ? (s_fetch_t *) (uintptr_t) e->a : NULL;
    int rc = f ? f->status : -ENOENT;
    if (f && f->status != -EINPROGRESS) {
        if (reason)
            snprintf(reason, 256, "%s", f->reason);
        s_fetch_forget(self, f);        //  read once
    }
    pthread_mutex_unlock(&self->lock);
    return rc;
}
