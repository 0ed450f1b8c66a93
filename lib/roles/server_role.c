/*  server_role.c: the seed's ServerRole in C, with the fixes of
    doc/architecture.md; doc/replay.md is the rule book.

    State, per role:
      requests   kv_request_id -> request (live state only)
      rounds     (request, round_seq) -> round; a request also lists its
                 rounds in creation order, plus one unbound round (supply
                 stored before any fetch named its round)
      xfers      transfer id -> transfer; a round lists its own
      jobs       owned by their round; undecided ones also sit in one FIFO
                 by submission time, so the store-job timeout sweep touches
                 only jobs that expire
      draining   rounds that failed with writes still in flight (the fence)
      kept       what is remembered of ended rounds and requests to answer
                 late messages, in a FIFO by expiry
    Every table is a pk_keymap over the id's bytes, so each operation costs
    in proportion to its own input (fix 4): nothing scans all transfers,
    jobs or aborts.
*/
#include "roles/server_role.h"
#include "base/checksum.h"
#include "base/keymap.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct s_request s_request_t;
typedef struct s_round s_round_t;
typedef struct s_job s_job_t;
typedef struct s_xfer s_xfer_t;
typedef struct s_lookup s_lookup_t;
typedef struct s_kept s_kept_t;
typedef struct s_get s_get_t;

//  A copied key list, shared by whoever points into its bytes (a lookup and
//  the jobs its hits pinned), freed by the last of them: the role copies a
//  key's bytes once however many tables hold it.
typedef struct {
    size_t refs;
    size_t n;
    pk_key_t keys[];                //  then the bytes
} s_keybuf_t;

//  A store job: the supply of one store or one lookup's pin batch.
struct s_job {
    uint64_t id;
    s_round_t *round;
    double t0;
    bool decided;
    bool in_fifo;                   //  in the timeout FIFO
    uint64_t mark;                  //  de-duplicates jobs within one write
    s_keybuf_t *buf;                //  the bytes the round's maps point into
    s_job_t *next;                  //  the round's jobs
    s_job_t *tprev, *tnext;         //  the timeout FIFO, while undecided
};

struct s_xfer {
    uint64_t tid;
    s_round_t *round;
    size_t blocks;
    s_job_t **jobs;
    size_t njobs;
    bool lent;                      //  transport.lend's: the consumer copies it
    s_xfer_t *prev, *next;          //  the round's transfers
};

typedef enum { FAIL_ERROR, FAIL_TIMEOUT, FAIL_ABORT, FAIL_TERMINAL } s_cause_t;

//  A get (capability get): a lookup whose answer is not sent but kept,
//  its hits then fetched into the blocks the get named, and the round's
//  end answered with a get_resp carrying the answer.  Owned by its queued
//  or parked lookup, then by the serve's list of gets to start, then by
//  its round.  A streaming get (config.stream_gets) goes to its round at
//  its first pinned hits, while its lookup still looks (s_stream); the
//  serve's list then carries only a marker (streamed) naming the round
//  whose lookup ended.
struct s_get {
    s_keybuf_t *buf;                //  the get's keys (a reference)
    uint32_t *remote;               //  their destination blocks, buf->n
    bool *hits;                     //  the answer, buf->n; NULL until made
    char *sums, *reasons;           //  its checksums and reasons, or NULL
    char *kv;                       //  while on the serve's list
    uint64_t seq;
    s_get_t *next;
    //  lent (config.lend): the pairs handed to transport.lend, and
    //  whether the get_resp naming them went (then the round's end
    //  answers nothing more)
    uint32_t *lent_local, *lent_remote;
    size_t nlent;
    bool answered;
    bool streamed;                  //  a marker: kv and seq only (s_start_gets)
};

struct s_round {
    struct {
        s_request_t *req;
        uint64_t seq;
    } id;                           //  key bytes of the rounds table
    s_request_t *req;
    bool bound;                     //  false: the request's unbound round
    bool lookup_supplied, demand_received, finishing;
    bool failed, abort_pending, send_done_on_fail;
    double failed_at;
    size_t remaining;               //  demanded keys not yet written
    uint64_t landing;               //  blocks whose writes completed here
    size_t inflight;
    pk_keymap_t available;          //  key -> (job, local block)
    //  The round's first supply, when it is one batch of distinct keys (a
    //  lookup's pins), is held as a list until something needs the map: a
    //  fetch naming those keys in the same order, the common case, then
    //  pairs them by position without hashing.  Positions [next, n) are
    //  still available.
    struct {
        s_job_t *job;
        pk_key_t *keys;
        uint32_t *blocks;
        size_t n, next;
    } list;
    pk_keymap_t demanded;           //  key -> remote block
    s_keybuf_t *demand_buf;         //  the fetch's unpaired keys
    s_job_t *jobs;
    s_xfer_t *xfers;
    s_round_t *prev, *next;         //  the request's rounds, oldest first
    s_round_t *dprev, *dnext;       //  the draining list
    bool draining;
    s_get_t *get;                   //  a get's round: answered by get_resp
    bool looking;                   //  a streaming get's: its lookup is still
                                    //  open, so no write's end ends the round
};

struct s_lookup {
    s_keybuf_t *buf;
    uint64_t id;
    uint64_t round_seq;
    double deadline;
    pk_key_t *keys;                 //  buf->keys: wire order, duplicates included
    size_t n;
    uint32_t *first;                //  position of each key's first occurrence
    uint8_t *st;                    //  at first positions: S_PENDING, S_HIT, or
                                    //  S_MISS + its pk_miss_reason_t (UNKNOWN:
                                    //  the parent is asked when the answer is made)
    uint64_t *sums;                 //  at first positions of hits: the block's
                                    //  checksum (NULL: the parent keeps none)
    size_t *pending;                //  positions of unique pending keys, parked order
    size_t npending;
    s_get_t *get;                   //  a get's lookup: answered by its round
    bool pinned;                    //  it pinned hits already
    bool stream;                    //  its get streams: it is its round's
    s_lookup_t *next;
};

enum { S_PENDING = 0, S_HIT = 1, S_MISS = 2 };
_Static_assert(S_MISS + PK_MISS_COUNT <= UINT8_MAX, "a miss's reason fits st");

typedef struct s_raw_lookup {
    s_keybuf_t *buf;
    size_t n;
    uint64_t round_seq;
    double enqueued_at;
    s_get_t *get;
    struct s_raw_lookup *next;
} s_raw_lookup_t;

struct s_request {
    char *kv;
    size_t kvlen;
    bool finished;
    size_t nrounds;
    s_round_t *rounds_head, *rounds_tail;
    s_round_t *unbound;
    s_raw_lookup_t *raw_head, *raw_tail;    //  queued since the last serve
    s_lookup_t *parked_head, *parked_tail;
    bool serve_pending;
    s_request_t *sprev, *snext;             //  the serve work-list
};

//  Kept state (replay.md): a round that failed before any fetch (kind
//  K_ROUND, or K_UNBOUND for the unbound round), or a finished request
//  with no round left (K_REQUEST).
enum { K_REQUEST = 0, K_ROUND = 1, K_UNBOUND = 2 };

struct s_kept {
    uint8_t *id;                    //  kind, seq, kv: key bytes of the kept table
    size_t idlen;
    double expires;
    s_kept_t *prev, *next;
};

typedef struct s_finished_ctx {
    char *kv;
    uint64_t round_seq, lookup_id;
    struct s_finished_ctx *next;
} s_finished_ctx_t;

typedef struct {
    uint64_t job;
    bool success;
} s_result_t;

struct _pk_server_role_t {
    size_t lent_inflight;           //  transfers in xfers that are lent (config.lend)
    char *peer_id;
    pk_server_role_config_t config;
    pk_clock_t clock;
    pk_sender_t sender;
    pk_transport_t transport;
    pk_parent_t parent;
    bool closed;
    bool forced;
    pk_server_role_counters_t own;  //  what counters points at until count_into
    pk_server_role_counters_t *counters;

    pk_keymap_t requests;
    pk_keymap_t rounds;
    pk_keymap_t xfers;
    pk_keymap_t kept;
    pk_keymap_t scratch;            //  one lookup's de-duplication, empty between uses
    s_kept_t *kept_head, *kept_tail;
    s_request_t *serve_head, *serve_tail;
    size_t serve_count;
    s_round_t *drain_head, *drain_tail;
    s_job_t *timeout_head, *timeout_tail;
    size_t undecided;
    size_t aborts;
    size_t parked;                  //  lookups owing on_request_finished
    bool kick_due;                  //  a poll of this serve answered HIT_PENDING
    size_t lookup_keys;             //  keys of lookups not yet answered or dropped
    uint64_t lookup_counter;
    uint64_t mark_counter;
    s_finished_ctx_t *finished_head, *finished_tail;
    s_get_t *gets_head, *gets_tail;   //  gets answered in this serve, to start
    s_result_t *results;
    size_t nresults, capresults;

    //  scratch for one write, grown as needed
    uint32_t *local, *remote;
    s_job_t **wjobs;
    size_t capscratch;
};

//  Doubly linked list helpers over named prev/next members.
#define LIST_APPEND(head, tail, node, prev, next) do { \
        (node)->prev = (tail); (node)->next = NULL; \
        if (tail) (tail)->next = (node); else (head) = (node); \
        (tail) = (node); } while (0)
#define LIST_REMOVE(head, tail, node, prev, next) do { \
        if ((node)->prev) (node)->prev->next = (node)->next; else (head) = (node)->next; \
        if ((node)->next) (node)->next->prev = (node)->prev; else (tail) = (node)->prev; \
        (node)->prev = (node)->next = NULL; } while (0)

//  The key of an id-keyed table entry: its bytes, with the cheap id hash.
static pk_key_t
s_id_key(const void *bytes, size_t len, uint64_t a, uint64_t b)
{
    return (pk_key_t) { bytes, (uint32_t) len, pk_hash_id(a, b) };
}

static double
s_now(pk_server_role_t *self)
{
    return self->clock.now(self->clock.self);
}

//  Copies n keys into one allocation (array followed by the bytes).  Keys
//  from a decoded frame lie back to back in its arena: their bytes are
//  then copied in one go.
static s_keybuf_t *
s_keybuf_new(const pk_key_t *keys, size_t n)
{
    size_t total = 0;
    bool contiguous = true;
    for (size_t i = 0; i < n; i++) {
        contiguous &= i == 0 || keys[i].bytes == keys[i - 1].bytes + keys[i - 1].len;
        total += keys[i].len;
    }
    s_keybuf_t *buf = malloc(sizeof *buf + n * sizeof *buf->keys + total + 1);
    if (!buf)
        return NULL;
    buf->refs = 1;
    buf->n = n;
    pk_key_t *copy = buf->keys;
    uint8_t *at = (uint8_t *) (copy + n);
    if (contiguous && n)
        memcpy(at, keys[0].bytes, total);
    for (size_t i = 0; i < n; i++) {
        if (!contiguous)
            memcpy(at, keys[i].bytes, keys[i].len);
        copy[i] = keys[i];
        copy[i].bytes = at;
        at += keys[i].len;
    }
    return buf;
}

static s_keybuf_t *
s_keybuf_ref(s_keybuf_t *buf)
{
    buf->refs++;
    return buf;
}

static void
s_keybuf_unref(s_keybuf_t *buf)
{
    if (buf && --buf->refs == 0)
        free(buf);
}

static int
s_result(pk_server_role_t *self, s_job_t *job, bool success)
{
    assert(!job->decided);
    job->decided = true;
    if (job->in_fifo) {
        LIST_REMOVE(self->timeout_head, self->timeout_tail, job, tprev, tnext);
        job->in_fifo = false;
    }
    self->undecided--;
    if (self->nresults == self->capresults) {
        size_t cap = self->capresults ? 2 * self->capresults : 64;
        s_result_t *r = realloc(self->results, cap * sizeof *r);
        if (!r)
            return -ENOMEM;
        self->results = r;
        self->capresults = cap;
    }
    self->results[self->nresults++] = (s_result_t) { job->id, success };
    return 0;
}

static void
s_flush_results(pk_server_role_t *self)
{
    //  store_result may not call back into the role, so a plain loop holds
    for (size_t i = 0; i < self->nresults; i++)
        self->parent.store_result(self->parent.self, self->results[i].job,
                                  self->results[i].success);
    self->nresults = 0;
}

//  --------------------------------------------------------------------------
//  Messages to the peer

//  Messages are built on the stack over borrowed fields: the sender gets a
//  const view for the duration of the call, so nothing is copied.

//  A round's answer over rails says per consumer rail what to expect
//  (capability rails): the transport's count of the round's completed
//  writes on each, which it forgets as it tells them, and the rails it
//  took out with writes of the round never confirmed (rails_failed: the
//  consumer revokes them before it reports the round).
typedef struct {
    char counts[PK_MAX_RAILS_TEXT + 1];
    char failed[2 * PK_MAX_RAILS + 1];
    char slices[PK_MAX_RAILS_TEXT + 1];
} s_rails_text_t;

static void
s_rails(pk_server_role_t *self, uint64_t seq, pk_msg_t *m, s_rails_text_t *text)
{
    if (!self->config.rails || !self->transport.rails_landing)
        return;
    uint32_t failed = self->transport.rails_failed
                      ? self->transport.rails_failed(self->transport.self, seq) : 0;
    //  slices (capability slices): asked first, rails_landing forgets
    uint64_t counts[PK_MAX_RAILS], slices[PK_MAX_RAILS];
    size_t ns = self->transport.rails_slices
                ? self->transport.rails_slices(self->transport.self, seq, slices, PK_MAX_RAILS)
                : 0;
    size_t n = self->transport.rails_landing(self->transport.self, seq, counts, PK_MAX_RAILS);
    if (!n)
        return;
    if (ns == n) {
        pk_wire_rails_format(slices, n, text->slices);
        m->rail_slices = text->slices;
        m->present |= PK_BIT(PK_F_RAIL_SLICES);
    }
    pk_wire_rails_format(counts, n, text->counts);
    m->rails = text->counts;
    m->present |= PK_BIT(PK_F_RAILS);
    failed &= (UINT32_C(1) << n) - 1;
    if (failed) {
        pk_wire_rails_failed_format(failed, text->failed);
        m->rails_failed = text->failed;
        m->present |= PK_BIT(PK_F_RAILS_FAILED);
    }
}

static void
s_send_done(pk_server_role_t *self, const char *kv, bool success, uint64_t seq,
            uint64_t landing)
{
    pk_msg_t m = { .type = PK_MSG_TRANSFER_DONE, .kv_request_id = (char *) kv, .success = success,
                   .round_seq = seq, .landing = landing,
                   .present = PK_BIT(PK_F_KV_REQUEST_ID) | PK_BIT(PK_F_SUCCESS)
                              | PK_BIT(PK_F_ROUND_SEQ) | PK_BIT(PK_F_LANDING) };
    s_rails_text_t rails;
    s_rails(self, seq, &m, &rails);
    self->sender.send(self->sender.self, &m);
}

static void
s_send_ack(pk_server_role_t *self, const char *kv, uint64_t seq, uint64_t landing)
{
    pk_msg_t m = { .type = PK_MSG_ABORT_ACK, .kv_request_id = (char *) kv, .round_seq = seq,
                   .landing = landing,
                   .present = PK_BIT(PK_F_KV_REQUEST_ID) | PK_BIT(PK_F_ROUND_SEQ)
                              | PK_BIT(PK_F_LANDING) };
    s_rails_text_t rails;
    s_rails(self, seq, &m, &rails);
    self->sender.send(self->sender.self, &m);
}

static void
s_get_free(s_get_t *get)
{
    if (!get)
        return;
    s_keybuf_unref(get->buf);
    free(get->remote);
    free(get->hits);
    free(get->sums);
    free(get->reasons);
    free(get->kv);
    free(get->lent_local);
    free(get->lent_remote);
    free(get);
}

//  A get's one answer: each key's hit (all false when the answer was never
//  made), with the checksums and reasons the lookup would have carried,
//  and the round's end as a transfer_done says it.
static void
s_send_get_resp(pk_server_role_t *self, const char *kv, uint64_t seq, const s_get_t *get,
                bool success, uint64_t landing)
{
    size_t n = get->buf->n;
    bool *none = get->hits ? NULL : calloc(n, sizeof *none);
    if (!get->hits && !none)
        return;         //  out of memory: the consumer's deadline covers it
    pk_msg_t m = { .type = PK_MSG_GET_RESP, .kv_request_id = (char *) kv,
                   .keys = { n, NULL, NULL }, .hits = get->hits ? get->hits : none,
                   .success = success, .round_seq = seq, .landing = landing,
                   .present = PK_BIT(PK_F_KV_REQUEST_ID) | PK_BIT(PK_F_HITS)
                              | PK_BIT(PK_F_SUCCESS) | PK_BIT(PK_F_ROUND_SEQ)
                              | PK_BIT(PK_F_LANDING) };
    if (get->hits && get->sums) {
        m.checksums = get->sums;
        m.present |= PK_BIT(PK_F_CHECKSUMS);
    }
    if (get->hits && get->reasons) {
        m.reasons = get->reasons;
        m.present |= PK_BIT(PK_F_REASONS);
    }
    s_rails_text_t rails;
    s_rails(self, seq, &m, &rails);
    self->sender.send(self->sender.self, &m);
    free(none);
}

static int
s_cmp_pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

//  A lent get's answer (config.lend), sent as soon as its hits are lent:
//  success, and each hit's block in our pool, in key order (sources), for
//  the consumer to copy.  The round stays open, its pins held, until the
//  consumer reports (its transfers end) or is cut off.  False when it
//  cannot be made (out of memory): the round then ends as a write would.
static bool
s_send_get_lent(pk_server_role_t *self, const char *kv, uint64_t seq, s_get_t *get)
{
    size_t n = get->buf->n, nhits = 0;
    for (size_t i = 0; i < n; i++)
        nhits += get->hits[i];
    //  (remote, local) sorted by remote: a get names no block twice
    uint32_t *pairs = malloc(2 * (nhits ? nhits : 1) * sizeof *pairs);
    char *sources = malloc(nhits * PK_SOURCE_HEX + 1);
    if (!pairs || !sources || get->nlent != nhits) {
        free(pairs);
        free(sources);
        return false;
    }
    for (size_t i = 0; i < nhits; i++) {
        pairs[2 * i] = get->lent_remote[i];
        pairs[2 * i + 1] = get->lent_local[i];
    }
    qsort(pairs, nhits, 2 * sizeof *pairs, s_cmp_pair);
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
        if (get->hits[i]) {
            uint32_t key[2] = { get->remote[i], 0 };
            const uint32_t *p = bsearch(key, pairs, nhits, 2 * sizeof *pairs, s_cmp_pair);
            if (!p)
                break;
            snprintf(sources + PK_SOURCE_HEX * j++, PK_SOURCE_HEX + 1, "%08" PRIx32, p[1]);
        }
    free(pairs);
    if (j != nhits) {
        free(sources);
        return false;
    }
    sources[PK_SOURCE_HEX * nhits] = '\0';
    pk_msg_t m = { .type = PK_MSG_GET_RESP, .kv_request_id = (char *) kv,
                   .keys = { n, NULL, NULL }, .hits = get->hits, .success = true,
                   .round_seq = seq, .landing = 0, .sources = sources,
                   .present = PK_BIT(PK_F_KV_REQUEST_ID) | PK_BIT(PK_F_HITS)
                              | PK_BIT(PK_F_SUCCESS) | PK_BIT(PK_F_ROUND_SEQ)
                              | PK_BIT(PK_F_LANDING) | PK_BIT(PK_F_SOURCES) };
    if (get->sums) {
        m.checksums = get->sums;
        m.present |= PK_BIT(PK_F_CHECKSUMS);
    }
    if (get->reasons) {
        m.reasons = get->reasons;
        m.present |= PK_BIT(PK_F_REASONS);
    }
    self->sender.send(self->sender.self, &m);
    free(sources);
    get->answered = true;
    return true;
}

//  The end of a round with demand: a get's round answers get_resp.
static void
s_send_round_done(pk_server_role_t *self, s_round_t *r, bool success)
{
    if (r->get && r->get->answered)
        return;                 //  lent: answered when lent, nothing more owed
    if (r->get)
        s_send_get_resp(self, r->req->kv, r->id.seq, r->get, success, r->landing);
    else
        s_send_done(self, r->req->kv, success, r->id.seq, r->landing);
}

//  --------------------------------------------------------------------------
//  Kept state

static void
s_kept_id(int kind, uint64_t seq, const char *kv, size_t kvlen, uint8_t *out)
{
    out[0] = (uint8_t) kind;
    memcpy(out + 1, &seq, sizeof seq);
    memcpy(out + 9, kv, kvlen);
}

static s_kept_t *
s_kept_find(pk_server_role_t *self, int kind, uint64_t seq, const char *kv)
{
    if (!pk_keymap_size(&self->kept))
        return NULL;
    size_t kvlen = strlen(kv);
    uint8_t stackid[256];
    uint8_t *id = kvlen + 9 <= sizeof stackid ? stackid : malloc(kvlen + 9);
    if (!id)
        return NULL;
    s_kept_id(kind, seq, kv, kvlen, id);
    pk_key_t key = pk_key_make(id, kvlen + 9);
    pk_keymap_entry_t *e = pk_keymap_find(&self->kept, &key);
    if (id != stackid)
        free(id);
    return e ? (s_kept_t *) (uintptr_t) e->a : NULL;
}

static void
s_kept_drop(pk_server_role_t *self, s_kept_t *k)
{
    pk_key_t key = pk_key_make(k->id, k->idlen);
    pk_keymap_take(&self->kept, &key, NULL, NULL);
    LIST_REMOVE(self->kept_head, self->kept_tail, k, prev, next);
    free(k->id);
    free(k);
}

static void
s_kept_add(pk_server_role_t *self, int kind, uint64_t seq, const char *kv)
{
    s_kept_t *old = s_kept_find(self, kind, seq, kv);
    if (old)
        s_kept_drop(self, old);
    size_t kvlen = strlen(kv);
    s_kept_t *k = calloc(1, sizeof *k);
    if (!k)
        return;         //  only a late fetch's fast answer is lost
    k->idlen = kvlen + 9;
    k->id = malloc(k->idlen);
    if (!k->id) {
        free(k);
        return;
    }
    s_kept_id(kind, seq, kv, kvlen, k->id);
    k->expires = s_now(self) + self->config.store_timeout;
    pk_key_t key = pk_key_make(k->id, k->idlen);
    if (pk_keymap_put(&self->kept, &key, (uintptr_t) k, 0) < 0) {
        free(k->id);
        free(k);
        return;
    }
    LIST_APPEND(self->kept_head, self->kept_tail, k, prev, next);
}

static void
s_kept_expire(pk_server_role_t *self)
{
    double now = s_now(self);
    while (self->kept_head && now >= self->kept_head->expires)
        s_kept_drop(self, self->kept_head);
}

//  --------------------------------------------------------------------------
//  Requests

static s_request_t *
s_request_find(pk_server_role_t *self, const char *kv)
{
    pk_key_t key = pk_key_make((const uint8_t *) kv, strlen(kv));
    pk_keymap_entry_t *e = pk_keymap_find(&self->requests, &key);
    return e ? (s_request_t *) (uintptr_t) e->a : NULL;
}

static s_request_t *
s_request_get(pk_server_role_t *self, const char *kv)
{
    s_request_t *req = s_request_find(self, kv);
    if (req)
        return req;
    req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    req->kvlen = strlen(kv);
    req->kv = strdup(kv);
    pk_key_t key = pk_key_make((const uint8_t *) req->kv, req->kvlen);
    if (!req->kv || pk_keymap_put(&self->requests, &key, (uintptr_t) req, 0) < 0) {
        free(req->kv);
        free(req);
        return NULL;
    }
    //  A finished request remembered for late fetches comes back to life
    //  still finished: every round it gets is finishing.
    s_kept_t *k = s_kept_find(self, K_REQUEST, 0, kv);
    if (k) {
        req->finished = true;
        s_kept_drop(self, k);
    }
    return req;
}

static void
s_serve_remove(pk_server_role_t *self, s_request_t *req)
{
    if (!req->serve_pending)
        return;
    LIST_REMOVE(self->serve_head, self->serve_tail, req, sprev, snext);
    req->serve_pending = false;
    self->serve_count--;
}

//  Drops a request that holds no live state (the seed's _maybe_prune); a
//  finished one is remembered so that a late fetch is answered at once.
static void
s_request_prune(pk_server_role_t *self, s_request_t *req)
{
    if (req->rounds_head || req->raw_head || req->parked_head)
        return;
    s_serve_remove(self, req);
    if (req->finished)
        s_kept_add(self, K_REQUEST, 0, req->kv);
    pk_key_t key = pk_key_make((const uint8_t *) req->kv, req->kvlen);
    pk_keymap_take(&self->requests, &key, NULL, NULL);
    free(req->kv);
    free(req);
}

//  --------------------------------------------------------------------------
//  Rounds

static s_round_t *
s_round_find(pk_server_role_t *self, s_request_t *req, uint64_t seq)
{
    if (!req)
        return NULL;
    struct { s_request_t *req; uint64_t seq; } id;
    memset(&id, 0, sizeof id);
    id.req = req;
    id.seq = seq;
    pk_key_t key = s_id_key(&id, sizeof id, (uintptr_t) req, seq);
    pk_keymap_entry_t *e = pk_keymap_find(&self->rounds, &key);
    return e ? (s_round_t *) (uintptr_t) e->a : NULL;
}

static int
s_round_bind(pk_server_role_t *self, s_round_t *r, uint64_t seq)
{
    memset(&r->id, 0, sizeof r->id);
    r->id.req = r->req;
    r->id.seq = seq;
    pk_key_t key = s_id_key(&r->id, sizeof r->id, (uintptr_t) r->req, seq);
    int rc = pk_keymap_put(&self->rounds, &key, (uintptr_t) r, 0);
    if (rc < 0)
        return rc;
    r->bound = true;
    if (r->req->unbound == r)
        r->req->unbound = NULL;
    //  A live round supersedes what was kept of an earlier one of that number.
    s_kept_t *k = s_kept_find(self, K_ROUND, seq, r->req->kv);
    if (k)
        s_kept_drop(self, k);
    return 0;
}

static s_round_t *
s_round_new(pk_server_role_t *self, s_request_t *req, bool bound, uint64_t seq)
{
    s_round_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->req = req;
    r->finishing = req->finished;
    if (bound) {
        if (s_round_bind(self, r, seq) < 0) {
            free(r);
            return NULL;
        }
    }
    else
        req->unbound = r;
    LIST_APPEND(req->rounds_head, req->rounds_tail, r, prev, next);
    req->nrounds++;
    return r;
}

//  Frees an ended round; every job must be decided and nothing in flight.
static void
s_round_free(pk_server_role_t *self, s_round_t *r)
{
    assert(r->inflight == 0 && !r->xfers && !r->draining);
    s_request_t *req = r->req;
    if (r->bound) {
        pk_key_t key = s_id_key(&r->id, sizeof r->id, (uintptr_t) r->req, r->id.seq);
        pk_keymap_take(&self->rounds, &key, NULL, NULL);
    }
    if (req->unbound == r)
        req->unbound = NULL;
    LIST_REMOVE(req->rounds_head, req->rounds_tail, r, prev, next);
    req->nrounds--;
    for (s_job_t *job = r->jobs, *next; job; job = next) {
        next = job->next;
        assert(job->decided);
        s_keybuf_unref(job->buf);
        free(job);
    }
    pk_keymap_fini(&r->available);
    pk_keymap_fini(&r->demanded);
    free(r->list.keys);
    s_keybuf_unref(r->demand_buf);
    s_get_free(r->get);
    free(r);
}

//  Ends a round as the seed's _finalize_outbound does: its undecided jobs
//  get `success`, and the peer gets transfer_done if it sent demand and
//  send_done is set.  Only for rounds with nothing in flight.
static void
s_round_finalize(pk_server_role_t *self, s_round_t *r, bool success, bool send_done)
{
    assert(r->inflight == 0);
    for (s_job_t *job = r->jobs; job; job = job->next)
        if (!job->decided)
            s_result(self, job, success);
    if (send_done && r->demand_received)
        s_send_round_done(self, r, success);
    s_round_free(self, r);
}

//  Step 3 of replay.md's failure: once nothing of the round is in flight,
//  publish its failure.  A round that failed before any fetch, other than
//  by an abort, is kept so that a late fetch is answered at once.
static void
s_round_publish_failure(pk_server_role_t *self, s_round_t *r)
{
    assert(r->inflight == 0);
    if (r->draining) {
        LIST_REMOVE(self->drain_head, self->drain_tail, r, dprev, dnext);
        r->draining = false;
    }
    for (s_job_t *job = r->jobs; job; job = job->next)
        if (!job->decided)
            s_result(self, job, false);
    const char *kv = r->req->kv;
    if (r->demand_received && r->send_done_on_fail)
        s_send_round_done(self, r, false);
    if (r->abort_pending) {
        s_send_ack(self, kv, r->id.seq, r->landing);
        self->aborts--;
    }
    if (!r->demand_received && r->send_done_on_fail)
        s_kept_add(self, r->bound ? K_ROUND : K_UNBOUND, r->bound ? r->id.seq : 0, kv);
    s_round_free(self, r);
}

static void
s_xfer_release(pk_server_role_t *self, s_xfer_t *x)
{
    s_round_t *r = x->round;
    pk_key_t key = s_id_key(&x->tid, sizeof x->tid, x->tid, 0);
    pk_keymap_take(&self->xfers, &key, NULL, NULL);
    if (x->prev)
        x->prev->next = x->next;
    else
        r->xfers = x->next;
    if (x->next)
        x->next->prev = x->prev;
    r->inflight--;
    self->lent_inflight -= x->lent;
    free(x);
}

//  Cancels every transfer of a draining round; releases what the transport
//  let go of.  One cancel for the round, as replay.md prints it.
static void
s_round_cancel(pk_server_role_t *self, s_round_t *r, pk_cancel_mode_t mode)
{
    size_t n = r->inflight;
    if (n == 0)
        return;
    uint64_t *tids = malloc(2 * n * sizeof *tids);
    if (!tids)
        return;         //  the next drain pass tries again
    size_t i = 0;
    for (s_xfer_t *x = r->xfers; x; x = x->next)
        tids[i++] = x->tid;
    uint64_t *still = tids + n;
    size_t nstill = self->transport.cancel(self->transport.self, tids, n, mode, still);
    if (mode == PK_CANCEL_IMMEDIATE) {
        nstill = 0;
        self->forced = true;
    }
    for (s_xfer_t *x = r->xfers, *next; x; x = next) {
        next = x->next;
        bool held = false;
        for (size_t j = 0; j < nstill && !held; j++)
            held = still[j] == x->tid;
        if (!held)
            s_xfer_release(self, x);
    }
    free(tids);
}

//  One drain attempt for a draining round: cancel in wait mode, or in
//  immediate mode once the drain deadline has passed; publish when nothing
//  is left in flight.
static void
s_round_drain_once(pk_server_role_t *self, s_round_t *r)
{
    bool late = s_now(self) >= r->failed_at + self->config.drain_timeout;
    s_round_cancel(self, r, late ? PK_CANCEL_IMMEDIATE : PK_CANCEL_WAIT);
    if (r->inflight == 0)
        s_round_publish_failure(self, r);
}

//  Replay.md's failure, steps 1-3: drop unpaired supply and demand, cancel
//  what is in flight in wait mode, publish once nothing is.
static void
s_round_fail(pk_server_role_t *self, s_round_t *r, s_cause_t cause)
{
    if (cause == FAIL_ABORT && !r->abort_pending) {
        r->abort_pending = true;
        self->aborts++;
    }
    if (r->failed) {
        //  An abort of a draining round is one more drain attempt, as in
        //  the seed; the deadline stays the first failure's.
        if (cause == FAIL_ABORT && r->draining)
            s_round_drain_once(self, r);
        return;
    }
    r->failed = true;
    r->failed_at = s_now(self);
    r->send_done_on_fail = cause == FAIL_ERROR || cause == FAIL_TIMEOUT;
    pk_keymap_clear(&r->available);
    pk_keymap_clear(&r->demanded);
    free(r->list.keys);
    memset(&r->list, 0, sizeof r->list);
    if (r->inflight) {
        r->draining = true;
        LIST_APPEND(self->drain_head, self->drain_tail, r, dprev, dnext);
        s_round_cancel(self, r, PK_CANCEL_WAIT);
    }
    if (r->inflight == 0)
        s_round_publish_failure(self, r);
}

//  --------------------------------------------------------------------------
//  Writes

static int
s_scratch(pk_server_role_t *self, size_t n)
{
    if (n <= self->capscratch)
        return 0;
    size_t cap = n < 64 ? 64 : n;
    uint32_t *local = realloc(self->local, cap * sizeof *local);
    if (local)
        self->local = local;
    uint32_t *remote = realloc(self->remote, cap * sizeof *remote);
    if (remote)
        self->remote = remote;
    s_job_t **jobs = realloc(self->wjobs, cap * sizeof *jobs);
    if (jobs)
        self->wjobs = jobs;
    if (!local || !remote || !jobs)
        return -ENOMEM;
    self->capscratch = cap;
    return 0;
}

//  Submits one write of the pairs in self->local/remote; refused, the round
//  fails.  Returns false when the round has ended.
static bool
s_submit(pk_server_role_t *self, s_round_t *r, size_t npairs, size_t njobs)
{
    //  a get's hits are lent where both sides lend, before its answer went
    s_get_t *get = r->get;
    bool lend = get && !get->answered && self->config.lend && self->transport.lend;
    if (lend) {
        uint32_t *l = realloc(get->lent_local, (get->nlent + npairs) * sizeof *l);
        if (l)
            get->lent_local = l;
        uint32_t *rm = l ? realloc(get->lent_remote, (get->nlent + npairs) * sizeof *rm) : NULL;
        if (rm)
            get->lent_remote = rm;
        if (!l || !rm) {
            s_round_fail(self, r, FAIL_ERROR);
            return false;
        }
    }
    int64_t tid = lend ? self->transport.lend(self->transport.self, r->id.seq, self->local,
                                              self->remote, npairs)
                       : self->transport.write_blocks(self->transport.self, r->id.seq,
                                                      self->local, self->remote, npairs);
    if (lend && tid > 0) {
        memcpy(get->lent_local + get->nlent, self->local, npairs * sizeof *self->local);
        memcpy(get->lent_remote + get->nlent, self->remote, npairs * sizeof *self->remote);
        get->nlent += npairs;
    }
    //  the transfer and its job list in one allocation
    s_xfer_t *x = tid > 0 ? calloc(1, sizeof *x + (njobs ? njobs : 1) * sizeof *x->jobs) : NULL;
    if (x) {
        x->jobs = (s_job_t **) (x + 1);
        pk_key_t key;
        x->tid = (uint64_t) tid;
        key = s_id_key(&x->tid, sizeof x->tid, x->tid, 0);
        if (pk_keymap_put(&self->xfers, &key, (uintptr_t) x, 0) < 0) {
            //  the write is out; cut it off rather than lose track of it
            uint64_t t = x->tid;
            self->transport.cancel(self->transport.self, &t, 1, PK_CANCEL_IMMEDIATE, &t);
            self->forced = true;
            free(x);
            x = NULL;
        }
    }
    if (!x) {
        s_round_fail(self, r, FAIL_ERROR);
        return false;
    }
    x->round = r;
    x->blocks = npairs;
    x->njobs = njobs;
    x->lent = lend;
    self->lent_inflight += lend;
    memcpy(x->jobs, self->wjobs, njobs * sizeof *x->jobs);
    x->next = r->xfers;
    if (r->xfers)
        r->xfers->prev = x;
    r->xfers = x;
    r->inflight++;
    return true;
}

//  Moves what is left of the round's supply list into its map.
static int
s_supply_to_map(s_round_t *r)
{
    if (!r->list.keys)
        return 0;
    int rc = pk_keymap_reserve(&r->available, pk_keymap_size(&r->available) + r->list.n);
    for (size_t i = r->list.next; rc == 0 && i < r->list.n; i++)
        if (pk_keymap_put(&r->available, &r->list.keys[i], (uintptr_t) r->list.job,
                          r->list.blocks[i]) < 0)
            rc = -ENOMEM;
    free(r->list.keys);
    memset(&r->list, 0, sizeof r->list);
    return rc;
}

//  Adds a job's supply to a round: keys already demanded pair at once and
//  go out as one write (when demand is there); the others wait.  distinct:
//  no key twice in keys (a lookup's pins), so the batch may wait as a list.
static int
s_add_supply(pk_server_role_t *self, s_round_t *r, s_job_t *job, const pk_key_t *keys,
             const uint32_t *blocks, size_t n, bool distinct)
{
    job->round = r;
    job->next = r->jobs;
    r->jobs = job;
    job->t0 = s_now(self);
    LIST_APPEND(self->timeout_head, self->timeout_tail, job, tprev, tnext);
    job->in_fifo = true;
    self->undecided++;
    if (r->failed)
        return 0;       //  a draining round takes no supply; the job fails with it
    if (distinct && !r->demand_received && !r->list.keys && !pk_keymap_size(&r->available)) {
        r->list.keys = malloc(n * (sizeof *r->list.keys + sizeof *r->list.blocks) + 1);
        if (r->list.keys) {
            r->list.blocks = (uint32_t *) (r->list.keys + n);
            memcpy(r->list.keys, keys, n * sizeof *keys);
            memcpy(r->list.blocks, blocks, n * sizeof *blocks);
            r->list.job = job;
            r->list.n = n;
            r->list.next = 0;
            return 0;
        }
    }
    int rc = s_scratch(self, n);
    if (rc == 0)
        rc = s_supply_to_map(r);
    if (rc)
        return rc;
    if (pk_keymap_reserve(&r->available, pk_keymap_size(&r->available) + n) < 0)
        return -ENOMEM;
    size_t npairs = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t remote;
        if (pk_keymap_take(&r->demanded, &keys[i], &remote, NULL)) {
            self->local[npairs] = blocks[i];
            self->remote[npairs++] = (uint32_t) remote;
        }
        else if (pk_keymap_put(&r->available, &keys[i], (uintptr_t) job, blocks[i]) < 0)
            return -ENOMEM;
    }
    if (npairs && r->demand_received) {
        self->wjobs[0] = job;
        s_submit(self, r, npairs, 1);
    }
    return 0;
}

//  A job holding a reference on the buffer its keys' bytes live in.
static s_job_t *
s_job_new(uint64_t id, s_keybuf_t *buf)
{
    s_job_t *job = buf ? calloc(1, sizeof *job) : NULL;
    if (!job) {
        s_keybuf_unref(buf);
        return NULL;
    }
    job->id = id;
    job->buf = buf;
    return job;
}

//  --------------------------------------------------------------------------
//  Public API: construction

pk_server_role_t *
pk_server_role_new(const char *peer_id, const pk_server_role_config_t *config, pk_clock_t clock,
                   pk_sender_t sender, pk_transport_t transport, pk_parent_t parent)
{
    pk_server_role_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->peer_id = strdup(peer_id ? peer_id : "");
    if (!self->peer_id) {
        free(self);
        return NULL;
    }
    pk_server_role_config_t dflt = PK_SERVER_ROLE_CONFIG_DEFAULT;
    self->config = config ? *config : dflt;
    self->counters = &self->own;
    self->clock = clock;
    self->sender = sender;
    self->transport = transport;
    self->parent = parent;
    return self;
}

static void
s_lookup_free(pk_server_role_t *self, s_lookup_t *l)
{
    self->lookup_keys -= l->n;
    s_keybuf_unref(l->buf);
    s_get_free(l->get);
    free(l);        //  its arrays live in the same allocation
}

//  A queued lookup dropped before it was processed.
static void
s_raw_free(pk_server_role_t *self, s_raw_lookup_t *raw)
{
    self->lookup_keys -= raw->n;
    s_keybuf_unref(raw->buf);
    s_get_free(raw->get);
    free(raw);
}

static void
s_request_free_all(pk_server_role_t *self, s_request_t *req)
{
    while (req->raw_head) {
        s_raw_lookup_t *raw = req->raw_head;
        req->raw_head = raw->next;
        s_raw_free(self, raw);
    }
    while (req->parked_head) {
        s_lookup_t *l = req->parked_head;
        req->parked_head = l->next;
        s_lookup_free(self, l);
    }
    while (req->rounds_head) {
        s_round_t *r = req->rounds_head;
        while (r->xfers)
            s_xfer_release(self, r->xfers);
        if (r->draining) {
            LIST_REMOVE(self->drain_head, self->drain_tail, r, dprev, dnext);
            r->draining = false;
        }
        for (s_job_t *job = r->jobs; job; job = job->next)
            if (!job->decided) {
                job->decided = true;
                if (job->in_fifo)
                    LIST_REMOVE(self->timeout_head, self->timeout_tail, job, tprev, tnext);
                job->in_fifo = false;
                self->undecided--;
            }
        s_round_free(self, r);
    }
    s_serve_remove(self, req);
    free(req->kv);
    free(req);
}

static void
s_free_everything(pk_server_role_t *self)
{
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->requests, &at)); )
        s_request_free_all(self, (s_request_t *) (uintptr_t) e->a);
    pk_keymap_fini(&self->requests);
    pk_keymap_fini(&self->rounds);
    pk_keymap_fini(&self->xfers);
    while (self->kept_head)
        s_kept_drop(self, self->kept_head);
    pk_keymap_fini(&self->kept);
    pk_keymap_fini(&self->scratch);
    while (self->finished_head) {
        s_finished_ctx_t *f = self->finished_head;
        self->finished_head = f->next;
        free(f->kv);
        free(f);
    }
    self->finished_tail = NULL;
    while (self->gets_head) {
        s_get_t *get = self->gets_head;
        self->gets_head = get->next;
        s_get_free(get);
    }
    self->gets_tail = NULL;
}

void
pk_server_role_destroy(pk_server_role_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_server_role_t *self = *self_p;
    s_free_everything(self);
    free(self->results);
    free(self->local);
    free(self->remote);
    free(self->wjobs);
    free(self->peer_id);
    free(self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------------
//  Public API: the engine's stores

int
pk_server_role_store(pk_server_role_t *self, const char *kv, const pk_key_t *keys,
                     const uint32_t *blocks, size_t n, uint64_t job_id, bool has_round,
                     uint64_t round_seq)
{
    if (self->closed)
        return -EPIPE;
    s_request_t *req = s_request_get(self, kv);
    if (!req)
        return -ENOMEM;
    s_round_t *r = NULL;
    if (has_round) {
        r = s_round_find(self, req, round_seq);
        if (!r)
            r = s_round_new(self, req, true, round_seq);
    }
    else {
        //  The oldest round with an unpaired demand for one of these keys,
        //  else the unbound round (replay.md, "Unbound supply").
        for (s_round_t *c = req->rounds_head; c && !r; c = c->next)
            for (size_t i = 0; i < n && pk_keymap_size(&c->demanded) && !r; i++)
                if (pk_keymap_find(&c->demanded, &keys[i]))
                    r = c;
        if (!r)
            r = req->unbound ? req->unbound : s_round_new(self, req, false, 0);
    }
    s_job_t *job = r ? s_job_new(job_id, s_keybuf_new(keys, n)) : NULL;
    if (!job) {
        if (r && !r->jobs && !r->demand_received && !r->inflight)
            s_round_free(self, r);
        s_request_prune(self, req);
        return -ENOMEM;
    }
    int rc = s_add_supply(self, r, job, job->buf->keys, blocks, n, false);
    s_request_prune(self, req);
    return rc;
}

//  --------------------------------------------------------------------------
//  Public API: fetch

//  The terminal fetch: the consumer is done with the request.
static void
s_terminal_fetch(pk_server_role_t *self, const char *kv, uint64_t seq);

static void
s_close_lookups(pk_server_role_t *self, s_request_t *req);
static void
s_drop_lookups(pk_server_role_t *self, s_request_t *req, const uint64_t *get_seq);

//  The round a fetch's demand goes to: the one a lookup or store opened,
//  the request's unbound prefill round (bound now), or a new one.  NULL
//  with *rc_p: 0 when the fetch was answered already (a round that failed
//  before its fetch), else -ENOMEM.
static s_round_t *
s_fetch_round(pk_server_role_t *self, const char *kv, uint64_t seq, s_request_t **req_p,
              s_round_t *r, int *rc_p)
{
    s_request_t *req = *req_p;
    *rc_p = -ENOMEM;
    if (!r) {
        //  Rounds that failed before their fetch are answered at once.
        //  The unbound round it would adopt counts too.
        s_kept_t *k = s_kept_find(self, K_ROUND, seq, kv);
        if (!k && !(req && req->unbound))
            k = s_kept_find(self, K_UNBOUND, 0, kv);
        if (k) {
            s_kept_drop(self, k);
            s_send_done(self, kv, false, seq, 0);
            *rc_p = 0;
            return NULL;
        }
    }
    if (!req && !(req = s_request_get(self, kv)))
        return NULL;
    *req_p = req;
    if (!r && req->unbound) {
        r = req->unbound;
        if (s_round_bind(self, r, seq) < 0)
            return NULL;
    }
    if (!r && !(r = s_round_new(self, req, true, seq))) {
        s_request_prune(self, req);
        return NULL;
    }
    return r;
}

//  Pairs the fetch's keys with the round's supply, in order while the
//  supply's list matches, through its map after: pairs go to
//  self->local/remote, their jobs (each once) to self->wjobs, keys without
//  supply to unpaired[].  Returns 0 or -ENOMEM.
static int
s_fetch_pair(pk_server_role_t *self, s_round_t *r, const pk_key_t *keys, const uint32_t *remote,
             size_t n, size_t *npairs_p, size_t *njobs_p, size_t *unpaired, size_t *nunpaired_p)
{
    uint64_t mark = ++self->mark_counter;
    size_t npairs = 0, njobs = 0, nunpaired = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t job, local;
        s_job_t *j = NULL;
        if (r->list.keys) {
            if (r->list.next < r->list.n && pk_key_eq(&keys[i], &r->list.keys[r->list.next])) {
                j = r->list.job;
                local = r->list.blocks[r->list.next++];
            }
            //  out of order: fall back to the map for the rest
            else if (s_supply_to_map(r) < 0)
                return -ENOMEM;
        }
        if (!j && pk_keymap_take(&r->available, &keys[i], &job, &local))
            j = (s_job_t *) (uintptr_t) job;
        if (!j) {
            unpaired[nunpaired++] = i;
            continue;
        }
        self->local[npairs] = (uint32_t) local;
        self->remote[npairs++] = remote[i];
        if (j->mark != mark) {
            j->mark = mark;
            self->wjobs[njobs++] = j;
        }
    }
    *npairs_p = npairs;
    *njobs_p = njobs;
    *nunpaired_p = nunpaired;
    return 0;
}

//  Demand that waits for supply: only it needs its own copy of the keys.
static int
s_fetch_park(s_round_t *r, const pk_key_t *keys, const uint32_t *remote,
             const size_t *unpaired, size_t nunpaired)
{
    pk_key_t stackkeys[64];
    pk_key_t *gather = nunpaired <= 64 ? stackkeys : malloc(nunpaired * sizeof *gather);
    if (!gather)
        return -ENOMEM;
    for (size_t j = 0; j < nunpaired; j++)
        gather[j] = keys[unpaired[j]];
    r->demand_buf = s_keybuf_new(gather, nunpaired);
    int rc = r->demand_buf ? 0 : -ENOMEM;
    for (size_t j = 0; r->demand_buf && j < nunpaired && rc >= 0; j++)
        rc = pk_keymap_put(&r->demanded, &r->demand_buf->keys[j], remote[unpaired[j]], 0);
    if (gather != stackkeys)
        free(gather);
    return rc < 0 ? rc : 0;
}

int
pk_server_role_on_fetch(pk_server_role_t *self, const char *kv, const pk_key_t *keys,
                        const uint32_t *remote, size_t n, uint64_t seq)
{
    if (self->closed)
        return -EPIPE;
    s_request_t *req = s_request_find(self, kv);
    s_round_t *r = s_round_find(self, req, seq);
    if (r && r->demand_received)
        return -EPROTO;
    if (n == 0) {
        s_terminal_fetch(self, kv, seq);
        return 0;
    }
    int rc;
    if (!(r = s_fetch_round(self, kv, seq, &req, r, &rc)))
        return rc;
    size_t stackunpaired[64];
    size_t *unpaired = n <= 64 ? stackunpaired : malloc(n * sizeof *unpaired);
    size_t npairs = 0, njobs = 0, nunpaired = 0;
    rc = unpaired && s_scratch(self, n) == 0 ? 0 : -ENOMEM;
    if (rc == 0) {
        r->demand_received = true;
        r->remaining = n;
        rc = s_fetch_pair(self, r, keys, remote, n, &npairs, &njobs, unpaired, &nunpaired);
    }
    if (rc == 0 && nunpaired)
        rc = s_fetch_park(r, keys, remote, unpaired, nunpaired);
    if (unpaired != stackunpaired)
        free(unpaired);
    if (rc < 0) {
        s_round_fail(self, r, FAIL_ERROR);
        s_request_prune(self, req);
        return -ENOMEM;
    }
    if (r->lookup_supplied && pk_keymap_size(&r->demanded)) {
        //  A symmetric round's supply always precedes its fetch: demand
        //  nothing pinned can serve is unservable, so fail now.
        s_round_finalize(self, r, false, true);
        s_request_prune(self, req);
        return 0;
    }
    bool alive = true;
    if (npairs)
        alive = s_submit(self, r, npairs, njobs);
    if (alive && r->finishing && r->inflight == 0)
        s_round_finalize(self, r, r->remaining == 0, true);
    s_request_prune(self, req);
    return 0;
}

static void
s_terminal_fetch(pk_server_role_t *self, const char *kv, uint64_t seq)
{
    s_kept_t *k = s_kept_find(self, K_ROUND, seq, kv);
    if (k)
        s_kept_drop(self, k);
    s_request_t *req = s_request_find(self, kv);
    if (!req) {
        //  Nothing live: the consumer is done, so nothing is kept either.
        if ((k = s_kept_find(self, K_REQUEST, 0, kv)))
            s_kept_drop(self, k);
        return;
    }
    //  The terminal fetch's own round gets empty demand, so its pins
    //  succeed (remaining is 0).
    //  (a round that does not exist has no pins: nothing to create)
    s_round_t *own = s_round_find(self, req, seq);
    if (own)
        own->demand_received = true;
    s_close_lookups(self, req);
    for (s_round_t *r = req->rounds_head, *next; r; r = next) {
        next = r->next;
        if (r->failed)
            continue;       //  already draining: it publishes what it owes
        if (r->inflight)
            s_round_fail(self, r, FAIL_TERMINAL);
        else
            s_round_finalize(self, r, r->demand_received && r->remaining == 0, false);
    }
    s_request_prune(self, req);
}

//  --------------------------------------------------------------------------
//  Public API: abort and finish

int
pk_server_role_on_abort(pk_server_role_t *self, const char *kv, uint64_t seq)
{
    if (self->closed)
        return -EPIPE;
    s_request_t *req = s_request_find(self, kv);
    //  a get still looking up never writes: it goes now (a parked one's
    //  pins are its round's, which fails below)
    if (req && (req->raw_head || req->parked_head))
        s_drop_lookups(self, req, &seq);
    s_round_t *r = s_round_find(self, req, seq);
    if (!r) {
        //  ended, kept or unknown: nothing of it can still be read
        s_send_ack(self, kv, seq, 0);
        if (req)
            s_request_prune(self, req);
        return 0;
    }
    s_round_fail(self, r, FAIL_ABORT);
    s_request_prune(self, req);
    return 0;
}

//  Drops a request's lookups not answered yet: queued ones (they never got
//  on_new_request) at once, parked ones owing an on_request_finished at
//  the next serve.  With get_seq, only the get of that round (its abort:
//  the abort_ack answers it); else all of them (the terminal fetch or
//  finish closes the lookup phase: no lookup_resp is sent, and a get is
//  answered failed, nothing of it written).
static void
s_drop_lookups(pk_server_role_t *self, s_request_t *req, const uint64_t *get_seq)
{
    s_raw_lookup_t **rat = &req->raw_head;
    req->raw_tail = NULL;
    while (*rat) {
        s_raw_lookup_t *raw = *rat;
        if (get_seq && !(raw->get && raw->round_seq == *get_seq)) {
            req->raw_tail = raw;
            rat = &raw->next;
            continue;
        }
        *rat = raw->next;
        if (raw->get && !get_seq)
            s_send_get_resp(self, req->kv, raw->round_seq, raw->get, false, 0);
        s_raw_free(self, raw);
    }
    s_lookup_t **lat = &req->parked_head;
    req->parked_tail = NULL;
    while (*lat) {
        s_lookup_t *l = *lat;
        if (get_seq && !((l->get || l->stream) && l->round_seq == *get_seq)) {
            req->parked_tail = l;
            lat = &l->next;
            continue;
        }
        *lat = l->next;
        if (l->get && !get_seq)
            s_send_get_resp(self, req->kv, l->round_seq, l->get, false, 0);
        //  a streaming get's round no longer waits for its lookup: its
        //  abort fails it next; closed, it fails as a write would, so that
        //  its answer (every hit false) goes once what it wrote is fenced
        s_round_t *sr = l->stream ? s_round_find(self, req, l->round_seq) : NULL;
        if (sr && sr->looking) {
            sr->looking = false;
            if (!get_seq && !sr->failed)
                s_round_fail(self, sr, FAIL_ERROR);
        }
        s_finished_ctx_t *f = calloc(1, sizeof *f);
        if (f && (f->kv = strdup(req->kv))) {
            f->round_seq = l->round_seq;
            f->lookup_id = l->id;
            if (self->finished_tail)
                self->finished_tail->next = f;
            else
                self->finished_head = f;
            self->finished_tail = f;
        }
        else {
            //  out of memory: settle the bracket now rather than never
            free(f);
            self->parked--;
            pk_lookup_ctx_t ctx = { req->kv, l->round_seq, l->id };
            self->parent.on_request_finished(self->parent.self, &ctx);
        }
        s_lookup_free(self, l);
    }
    if (!req->raw_head && !req->parked_head)
        s_serve_remove(self, req);
}

static void
s_close_lookups(pk_server_role_t *self, s_request_t *req)
{
    s_drop_lookups(self, req, NULL);
}

int
pk_server_role_finish(pk_server_role_t *self, const char *kv)
{
    if (self->closed)
        return -EPIPE;
    s_request_t *req = s_request_find(self, kv);
    if (!req) {
        //  finished with no round at all: a fetch for it is answered at once
        if (!s_kept_find(self, K_REQUEST, 0, kv))
            s_kept_add(self, K_REQUEST, 0, kv);
        return 0;
    }
    s_close_lookups(self, req);
    req->finished = true;
    for (s_round_t *r = req->rounds_head, *next; r; r = next) {
        next = r->next;
        if (r->failed)
            continue;
        r->finishing = true;
        //  Without demand yet the fetch finalizes it; with writes in flight
        //  the last completion does.
        if (r->demand_received && r->inflight == 0)
            s_round_finalize(self, r, r->remaining == 0, true);
    }
    s_request_prune(self, req);
    return 0;
}

//  --------------------------------------------------------------------------
//  Public API: lookups and serve

int
pk_server_role_on_lookup(pk_server_role_t *self, const char *kv, const pk_key_t *keys, size_t n,
                         uint64_t seq)
{
    if (self->closed)
        return -EPIPE;
    s_request_t *req = s_request_get(self, kv);
    s_raw_lookup_t *raw = req ? calloc(1, sizeof *raw) : NULL;
    if (raw)
        raw->buf = s_keybuf_new(keys, n);
    if (!raw || !raw->buf) {
        free(raw);
        if (req)
            s_request_prune(self, req);
        return -ENOMEM;
    }
    raw->n = n;
    self->lookup_keys += n;
    raw->round_seq = seq;
    raw->enqueued_at = s_now(self);
    if (req->raw_tail)
        req->raw_tail->next = raw;
    else
        req->raw_head = raw;
    req->raw_tail = raw;
    if (!req->serve_pending) {
        req->serve_pending = true;
        LIST_APPEND(self->serve_head, self->serve_tail, req, sprev, snext);
        self->serve_count++;
    }
    return 0;
}

int
pk_server_role_on_get(pk_server_role_t *self, const char *kv, const pk_key_t *keys,
                      const uint32_t *remote, size_t n, uint64_t seq)
{
    if (self->closed)
        return -EPIPE;
    //  A get's round is its own from the start: one named already (a
    //  lookup's, a fetch's, another get's) is the consumer's mistake.
    s_request_t *req = s_request_find(self, kv);
    if (s_round_find(self, req, seq))
        return -EPROTO;
    for (s_raw_lookup_t *raw = req ? req->raw_head : NULL; raw; raw = raw->next)
        if (raw->round_seq == seq)
            return -EPROTO;
    for (s_lookup_t *l = req ? req->parked_head : NULL; l; l = l->next)
        if (l->round_seq == seq)
            return -EPROTO;
    s_get_t *get = calloc(1, sizeof *get);
    if (get)
        get->remote = malloc(n * sizeof *get->remote);
    if (!get || !get->remote) {
        s_get_free(get);
        return -ENOMEM;
    }
    memcpy(get->remote, remote, n * sizeof *remote);
    int rc = pk_server_role_on_lookup(self, kv, keys, n, seq);
    if (rc) {
        s_get_free(get);
        return rc;
    }
    req = s_request_find(self, kv);
    get->buf = s_keybuf_ref(req->raw_tail->buf);
    req->raw_tail->get = get;
    return 0;
}

//  Starts the writes of the gets this serve answered: each one's hits
//  are fetched into its blocks, as a fetch of its round would; one without
//  hits is answered now.  After the serve's walk, so that no request it
//  holds goes away under it.
static void
s_start_gets(pk_server_role_t *self)
{
    while (self->gets_head) {
        s_get_t *get = self->gets_head;
        self->gets_head = get->next;
        if (!self->gets_head)
            self->gets_tail = NULL;
        get->next = NULL;
        s_request_t *req = s_request_find(self, get->kv);
        s_round_t *r = s_round_find(self, req, get->seq);
        if (get->streamed) {
            //  a streaming get's lookup answered: with its writes all
            //  done, its round ends now, else at the last one's end
            if (r && !r->failed && !r->looking && r->inflight == 0)
                s_round_finalize(self, r, r->remaining == 0, true);
            if (req)
                s_request_prune(self, req);
            s_get_free(get);
            continue;
        }
        size_t n = get->buf->n, nhits = 0;
        for (size_t i = 0; get->hits && i < n; i++)
            nhits += get->hits[i];
        pk_key_t stackkeys[64];
        uint32_t stackidx[64];
        pk_key_t *keys = nhits <= 64 ? stackkeys : malloc(nhits * sizeof *keys);
        uint32_t *idx = nhits <= 64 ? stackidx : malloc(nhits * sizeof *idx);
        if (nhits && r && !r->failed && !r->demand_received && !r->get && keys && idx) {
            for (size_t i = 0, j = 0; i < n; i++)
                if (get->hits[i]) {
                    keys[j] = get->buf->keys[i];
                    idx[j++] = get->remote[i];
                }
            //  the round owns the get from here: it answers at its end
            r->get = get;
            get = NULL;
            uint64_t seq = r->id.seq;
            char *kv = strdup(req->kv);
            (void) pk_server_role_on_fetch(self, req->kv, keys, idx, nhits, seq);
            //  lent, every hit (config.lend): answered now, the round
            //  open until the consumer's report; a round that could not
            //  lend them all ends as a write's would (its answer then)
            s_request_t *still = kv ? s_request_find(self, kv) : NULL;
            s_round_t *lr = s_round_find(self, still, seq);
            if (lr && lr->get && lr->get->nlent && !lr->failed && !lr->get->answered
                && !s_send_get_lent(self, kv, seq, lr->get))
                s_round_fail(self, lr, FAIL_ERROR);
            free(kv);
        }
        else {
            //  nothing to write (or no memory to write it): its pins, if
            //  any, end now, and so does the get
            if (r && !r->failed && !r->inflight)
                s_round_finalize(self, r, nhits == 0 && get->hits, false);
            s_send_get_resp(self, get->kv, get->seq, get, nhits == 0 && get->hits, 0);
            if (req)
                s_request_prune(self, req);
        }
        if (keys != stackkeys)
            free(keys);
        if (idx != stackidx)
            free(idx);
        s_get_free(get);
    }
}

//  A streaming get (config.stream_gets; design.md, "A get's disk hits are
//  written as they land"): hits pinned while keys of its lookup are still
//  pending (a tier reading them back) are written at once, not after the
//  lookup's last key, so that the writes of a chunk that landed overlap
//  the tier's read of the next.  A get decides at its first pin: it
//  streams if keys are still pending then, its round is fresh (no demand,
//  no get: a consumer's own fetch of the round keeps the old order) and
//  nothing is lent (a lent get is answered with its sources at once).
//  The round then owns the get, its demand counts what was written, and
//  `looking` keeps a write's end from ending it until the lookup answers.
//  What is written is committed and pinned, as any fetch's: no new fence.
static void
s_stream(pk_server_role_t *self, s_lookup_t *l, s_round_t *r, const pk_key_t *hits,
         const size_t *pos, size_t n)
{
    if (!l->stream) {
        bool lend = self->config.lend && self->transport.lend;
        if (!l->get || l->pinned || !l->npending || !self->config.stream_gets || lend
            || r->failed || r->demand_received || r->get)
            return;
        r->get = l->get;
        l->get = NULL;
        l->stream = true;
        r->looking = true;
        r->demand_received = true;
        r->remaining = 0;
    }
    if (r->failed || r->get == NULL)
        return;
    uint32_t stackidx[64];
    size_t stackunpaired[64];
    uint32_t *idx = n <= 64 ? stackidx : malloc(n * sizeof *idx);
    size_t *unpaired = n <= 64 ? stackunpaired : malloc(n * sizeof *unpaired);
    size_t npairs = 0, njobs = 0, nunpaired = 0;
    int rc = idx && unpaired && s_scratch(self, n) == 0 ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++)
        idx[i] = r->get->remote[pos[i]];        //  a get names no key twice
    if (rc == 0)
        rc = s_fetch_pair(self, r, hits, idx, n, &npairs, &njobs, unpaired, &nunpaired);
    if (idx != stackidx)
        free(idx);
    if (unpaired != stackunpaired)
        free(unpaired);
    //  every key was supplied just now: one unpaired is a bug, not a wait
    if (rc < 0 || nunpaired) {
        s_round_fail(self, r, FAIL_ERROR);
        return;
    }
    r->remaining += npairs;
    if (npairs)
        s_submit(self, r, npairs, njobs);
}

//  Pins a lookup's new hits as one job and files them as the supply of
//  the lookup's round; keys the store could not pin become misses.
static void
s_pin_hits(pk_server_role_t *self, s_request_t *req, s_lookup_t *l, pk_key_t *hits,
           const size_t *hitpos, size_t n)
{
    pk_lookup_ctx_t ctx = { req->kv, l->round_seq, l->id };
    uint32_t stackblocks[64];
    bool stackpinned[64];
    size_t stackpos[64];
    uint8_t stackwhy[64];
    bool small = n <= 64;
    uint32_t *blocks = small ? stackblocks : malloc(n * sizeof *blocks);
    bool *pinned = small ? stackpinned : malloc(n * sizeof *pinned);
    size_t *pos = small ? stackpos : malloc(n * sizeof *pos);
    //  why a key was not pinned, where the parent knows (the quota)
    uint8_t *why = small ? stackwhy : calloc(n, 1);
    if (small)
        memset(why, PK_MISS_UNKNOWN, n);
    uint64_t job_id = 0;
    int rc = blocks && pinned && pos
             ? self->parent.create_store_job(self->parent.self, &ctx, hits, n, &job_id, blocks,
                                             pinned, why)
             : -ENOMEM;
    size_t npinned = 0;
    for (size_t i = 0; i < n; i++) {
        bool ok = rc == 0 && pinned[i];
        if (!ok)
            l->st[hitpos[i]] = S_MISS + (rc == 0 && why && why[i] < PK_MISS_COUNT
                                         ? why[i] : PK_MISS_UNKNOWN);
        else {
            //  compact the pinned keys and their blocks to the front
            hits[npinned] = hits[i];
            pos[npinned] = hitpos[i];
            blocks[npinned++] = blocks[i];
        }
    }
    //  The checksums of what was pinned, for the answer; without them the
    //  answer carries none (the consumer then checks nothing of it).
    if (rc == 0 && l->sums && npinned) {
        uint64_t stacksums[64];
        uint64_t *sums = small ? stacksums : malloc(npinned * sizeof *sums);
        if (!sums || self->parent.block_sums(self->parent.self, blocks, npinned, sums) != 0)
            l->sums = NULL;
        else
            for (size_t i = 0; i < npinned; i++)
                l->sums[pos[i]] = sums[i];
        if (sums != stacksums)
            free(sums);
    }
    if (rc == 0) {
        //  (a streaming get's round that ended, failed, answers nothing more)
        s_round_t *r = s_round_find(self, req, l->round_seq);
        if (!r && !l->stream)
            r = s_round_new(self, req, true, l->round_seq);
        s_job_t *job = r ? s_job_new(job_id, s_keybuf_ref(l->buf)) : NULL;
        if (job) {
            r->lookup_supplied = true;
            s_add_supply(self, r, job, hits, blocks, npinned, true);
            if (npinned)
                s_stream(self, l, r, hits, pos, npinned);
            l->pinned |= npinned > 0;
        }
        else {
            //  cannot track the job: hand the pins straight back
            self->parent.store_result(self->parent.self, job_id, false);
            for (size_t i = 0; i < npinned; i++)
                l->st[pos[i]] = S_MISS;
        }
    }
    if (!small) {
        free(blocks);
        free(pinned);
        free(pos);
        free(why);
    }
}

//  Polls keys (positions into l->keys) against the store; new hits are
//  pinned in one batch; pending ones are written to l->pending.
static void
s_poll_keys(pk_server_role_t *self, s_request_t *req, s_lookup_t *l, const size_t *pos,
            size_t n)
{
    pk_lookup_ctx_t ctx = { req->kv, l->round_seq, l->id };
    pk_key_t stackhits[64];
    size_t stackpos[64];
    pk_key_t *hits = n <= 64 ? stackhits : malloc(n * sizeof *hits);
    size_t *hitpos = n <= 64 ? stackpos : malloc(n * sizeof *hitpos);
    size_t nhits = 0, npending = 0;
    for (size_t i = 0; i < n; i++) {
        size_t p = pos[i];
        const pk_key_t *key = &l->keys[p];
        pk_lookup_result_t res = self->parent.lookup(self->parent.self, key, &ctx);
        if (res == PK_LOOKUP_HIT && hits && hitpos) {
            l->st[p] = S_HIT;
            hitpos[nhits] = p;
            hits[nhits++] = *key;
        }
        else if (res == PK_LOOKUP_MISS || res == PK_LOOKUP_HIT)
            l->st[p] = S_MISS;      //  a hit we cannot record is a miss
        else
            l->pending[npending++] = p;
    }
    l->npending = npending;
    self->kick_due |= npending > 0;
    if (nhits)
        s_pin_hits(self, req, l, hits, hitpos, nhits);
    if (hits != stackhits)
        free(hits);
    if (hitpos != stackpos)
        free(hitpos);
}

//  Sends the lookup's answer (every key in wire order) and closes its
//  bracket with the store.  Each miss's reason is decided first: the
//  role's own (pending, quota) or, for the rest, the parent's now.
static void
s_lookup_answer(pk_server_role_t *self, s_request_t *req, s_lookup_t *l)
{
    pk_lookup_ctx_t ctx = { req->kv, l->round_seq, l->id };
    //  a streaming get's answer goes to its round's get, while the round
    //  waits for it (else the round ended, failed, and answered already)
    s_round_t *sr = l->stream ? s_round_find(self, req, l->round_seq) : NULL;
    if (sr && !sr->looking)
        sr = NULL;
    s_get_t *get = sr ? sr->get : l->get;
    bool is_get = l->get || l->stream;
    bool stackhits[64];
    bool *hits = l->n <= 64 ? stackhits : malloc(l->n * sizeof *hits);
    //  without memory for the answer the consumer's load timeout covers it
    size_t nmiss = 0;
    for (size_t i = 0; i < l->n; i++) {
        uint8_t *st = &l->st[l->first[i]];
        if (*st == S_MISS && self->parent.miss_reason) {
            unsigned r = self->parent.miss_reason(self->parent.self, &l->keys[i], &ctx);
            *st = (uint8_t) (S_MISS + (r < PK_MISS_COUNT ? r : PK_MISS_UNKNOWN));
        }
        bool hit = *st == S_HIT;
        self->counters->hits += hit;
        self->counters->misses += !hit;
        if (!hit) {
            self->counters->miss_reasons[*st >= S_MISS ? *st - S_MISS : PK_MISS_UNKNOWN]++;
            nmiss++;
        }
    }
    //  a small answer's checksums and reasons on the stack: two mallocs and
    //  frees were 250 instructions of a one-key lookup's ~9,000 (callgrind)
    char stacksums[8 * PK_CHECKSUM_HEX + 1], stackreasons[64 + 1];
    char *sums = NULL, *reasons = NULL;
    if (l->n && hits) {
        size_t nhits = 0;
        for (size_t i = 0; i < l->n; i++)
            nhits += hits[i] = l->st[l->first[i]] == S_HIT;
        pk_msg_t m = { .type = PK_MSG_LOOKUP_RESP, .kv_request_id = req->kv,
                       .keys = { l->n, l->keys, NULL }, .hits = hits,
                       .round_seq = l->round_seq,
                       .present = PK_BIT(PK_F_KV_REQUEST_ID) | PK_BIT(PK_F_KEYS)
                                  | PK_BIT(PK_F_HITS) | PK_BIT(PK_F_ROUND_SEQ) };
        //  every hit's checksum, 16 hex chars each in key order (the
        //  session leaves them out for a consumer without the capability)
        //  (a get keeps them for its round's end: on the heap)
        bool small = !is_get;
        if (l->sums
            && (sums = small && nhits <= 8 ? stacksums : malloc(nhits * PK_CHECKSUM_HEX + 1))) {
            char *at = sums;
            for (size_t i = 0; i < l->n; i++)
                if (hits[i])
                    pk_checksum_hex(l->sums[l->first[i]], at), at += PK_CHECKSUM_HEX;
            *at = '\0';
            m.checksums = sums;
            m.present |= PK_BIT(PK_F_CHECKSUMS);
        }
        //  every miss's reason, one letter each in key order, to a
        //  consumer that asked for them (config.reasons)
        if (self->config.reasons && nmiss
            && (reasons = small && nmiss <= 64 ? stackreasons : malloc(nmiss + 1))) {
            char *at = reasons;
            for (size_t i = 0; i < l->n; i++)
                if (!hits[i])
                    *at++ = pk_miss_reason_letter(l->st[l->first[i]] >= S_MISS
                                                  ? (pk_miss_reason_t) (l->st[l->first[i]]
                                                                        - S_MISS)
                                                  : PK_MISS_UNKNOWN);
            *at = '\0';
            m.reasons = reasons;
            m.present |= PK_BIT(PK_F_REASONS);
        }
        if (!is_get)
            self->sender.send(self->sender.self, &m);
        else if (get && (get->hits = malloc(l->n * sizeof *hits))) {
            //  a get's answer waits for its round's end (s_start_gets)
            memcpy(get->hits, hits, l->n * sizeof *hits);
            get->sums = sums;
            get->reasons = reasons;
            sums = reasons = NULL;
        }
    }
    if (sums != stacksums)
        free(sums);
    if (reasons != stackreasons)
        free(reasons);
    if (hits != stackhits)
        free(hits);
    //  a streaming get's round may end now: a marker names it to
    //  s_start_gets (without memory, its last write's end ends it, or, with
    //  none left, the consumer's abort at its deadline)
    s_get_t *marker = NULL;
    if (sr) {
        sr->looking = false;
        if ((marker = calloc(1, sizeof *marker)))
            marker->streamed = true;
    }
    s_get_t *queued = sr ? marker : l->get;
    if (queued && (queued->kv = strdup(req->kv))) {
        queued->seq = l->round_seq;
        if (self->gets_tail)
            self->gets_tail->next = queued;
        else
            self->gets_head = queued;
        self->gets_tail = queued;
        if (queued == l->get)
            l->get = NULL;
    }
    else if (queued == marker)
        s_get_free(marker);
    self->parent.on_request_finished(self->parent.self, &ctx);
}

static void
s_process_lookup(pk_server_role_t *self, s_request_t *req, s_raw_lookup_t *raw)
{
    //  The lookup and its per-key arrays in one allocation.
    size_t cap = raw->n ? raw->n : 1;
    size_t stackuniq[64];
    size_t *uniq = cap <= 64 ? stackuniq : malloc(cap * sizeof *uniq);
    bool sums = self->parent.block_sums != NULL;
    s_lookup_t *l = malloc(sizeof *l + cap * (sizeof *l->pending + sizeof *l->first
                                              + (sums ? sizeof *l->sums : 0) + sizeof *l->st));
    if (!l || !uniq || pk_keymap_reserve(&self->scratch, raw->n) < 0) {
        //  the consumer's load timeout covers a lookup we cannot hold
        if (uniq != stackuniq)
            free(uniq);
        free(l);
        self->lookup_keys -= raw->n;
        s_keybuf_unref(raw->buf);
        s_get_free(raw->get);
        raw->get = NULL;
        return;
    }
    memset(l, 0, sizeof *l);
    l->pending = (size_t *) (l + 1);
    l->sums = sums ? (uint64_t *) (l->pending + cap) : NULL;
    l->first = (uint32_t *) (sums ? (void *) (l->sums + cap) : (void *) (l->pending + cap));
    l->st = (uint8_t *) (l->first + cap);
    memset(l->st, S_PENDING, cap);
    l->id = ++self->lookup_counter;
    l->round_seq = raw->round_seq;
    l->deadline = raw->enqueued_at + self->config.lookup_timeout;
    l->buf = raw->buf;
    l->keys = raw->buf->keys;
    l->n = raw->n;
    l->get = raw->get;
    raw->get = NULL;
    pk_lookup_ctx_t ctx = { req->kv, l->round_seq, l->id };
    self->parent.on_new_request(self->parent.self, &ctx);
    self->parked++;
    //  De-duplicate in wire order with the role's scratch table (reserved
    //  above, so no insert fails), then empty it: whole when it is small
    //  next to this lookup, else key by key (its size is the largest
    //  lookup's, and clearing that for every small lookup would dominate).
    size_t nuniq = 0;
    for (size_t i = 0; i < l->n; i++) {
        pk_keymap_entry_t *e;
        if (pk_keymap_get_or_put(&self->scratch, &l->keys[i], i, 0, &e) == 1)
            uniq[nuniq++] = i;
        l->first[i] = (uint32_t) e->a;
    }
    if (self->scratch.mask + 1 <= 8 * nuniq)
        pk_keymap_clear(&self->scratch);
    else
        for (size_t i = 0; i < nuniq; i++)
            pk_keymap_take(&self->scratch, &l->keys[uniq[i]], NULL, NULL);
    s_poll_keys(self, req, l, uniq, nuniq);
    if (uniq != stackuniq)
        free(uniq);
    if (l->npending) {
        if (req->parked_tail)
            req->parked_tail->next = l;
        else
            req->parked_head = l;
        req->parked_tail = l;
        return;
    }
    self->parked--;
    s_lookup_answer(self, req, l);
    s_lookup_free(self, l);
}

static void
s_resolve_parked(pk_server_role_t *self, s_request_t *req)
{
    double now = s_now(self);
    for (s_lookup_t *l = req->parked_head; l; l = l->next) {
        s_poll_keys(self, req, l, l->pending, l->npending);
        if (l->npending && now >= l->deadline) {
            self->counters->expired += l->npending;
            for (size_t i = 0; i < l->npending; i++)
                l->st[l->pending[i]] = S_MISS + PK_MISS_PENDING;
            l->npending = 0;
        }
    }
    s_lookup_t **at = &req->parked_head;
    req->parked_tail = NULL;
    while (*at) {
        s_lookup_t *l = *at;
        if (l->npending) {
            req->parked_tail = l;
            at = &l->next;
            continue;
        }
        *at = l->next;
        self->parked--;
        s_lookup_answer(self, req, l);
        s_lookup_free(self, l);
    }
}

void
pk_server_role_serve(pk_server_role_t *self)
{
    if (self->closed)
        return;
    //  Requests that join the list while it is walked wait for the next
    //  serve, as the seed's snapshot of _serve_pending does.
    s_request_t *last = self->serve_tail;
    for (s_request_t *req = self->serve_head, *next; req; req = next) {
        bool was_last = req == last;
        next = req->snext;
        while (req->raw_head) {
            s_raw_lookup_t *raw = req->raw_head;
            req->raw_head = raw->next;
            if (!req->raw_head)
                req->raw_tail = NULL;
            s_process_lookup(self, req, raw);
            free(raw);
        }
        s_resolve_parked(self, req);
        if (!req->raw_head && !req->parked_head) {
            s_serve_remove(self, req);
            s_request_prune(self, req);
        }
        if (was_last)
            break;
    }
    //  the promotions this pass asked for start together (parent.h)
    if (self->kick_due && self->parent.kick)
        self->parent.kick(self->parent.self);
    self->kick_due = false;
    while (self->finished_head) {
        s_finished_ctx_t *f = self->finished_head;
        self->finished_head = f->next;
        pk_lookup_ctx_t ctx = { f->kv, f->round_seq, f->lookup_id };
        self->parked--;
        self->parent.on_request_finished(self->parent.self, &ctx);
        free(f->kv);
        free(f);
    }
    self->finished_tail = NULL;
    s_start_gets(self);
}

//  --------------------------------------------------------------------------
//  Public API: collect, drain, close

static void
s_store_timeouts(pk_server_role_t *self)
{
    double now = s_now(self);
    while (self->timeout_head
           && now >= self->timeout_head->t0 + self->config.store_timeout) {
        s_job_t *job = self->timeout_head;
        //  Out of the FIFO; the job's result comes with its round's failure.
        LIST_REMOVE(self->timeout_head, self->timeout_tail, job, tprev, tnext);
        job->in_fifo = false;
        self->counters->store_timeouts++;
        s_request_t *req = job->round->req;
        if (!job->round->failed)
            s_round_fail(self, job->round, FAIL_TIMEOUT);
        s_request_prune(self, req);
    }
}

static void
s_on_transfer(void *arg, uint64_t tid, bool ok, uint64_t landed)
{
    pk_server_role_t *self = arg;
    pk_key_t key = s_id_key(&tid, sizeof tid, tid, 0);
    pk_keymap_entry_t *e = pk_keymap_find(&self->xfers, &key);
    if (!e)
        return;         //  released by a cancel, or never ours
    s_xfer_t *x = (s_xfer_t *) (uintptr_t) e->a;
    s_round_t *r = x->round;
    s_request_t *req = r->req;
    size_t blocks = x->blocks;
    //  what completed here may still be arriving at the consumer, whether
    //  or not the whole transfer did
    r->landing += ok ? blocks : landed;
    if (ok) {
        if (!r->failed)
            for (size_t i = 0; i < x->njobs; i++)
                if (!x->jobs[i]->decided)
                    s_result(self, x->jobs[i], true);
    }
    s_xfer_release(self, x);
    if (r->failed) {
        if (r->inflight == 0)
            s_round_publish_failure(self, r);
    }
    else if (!ok)
        s_round_fail(self, r, FAIL_ERROR);
    else {
        assert(r->remaining >= blocks);
        r->remaining -= blocks;
        if (r->looking)
            ;           //  a streaming get: its lookup's answer ends it
        else if (r->remaining == 0)
            s_round_finalize(self, r, true, true);
        else if (r->finishing && r->inflight == 0)
            s_round_finalize(self, r, false, true);
    }
    s_request_prune(self, req);
}

void
pk_server_role_collect(pk_server_role_t *self)
{
    if (self->closed)
        return;
    s_store_timeouts(self);
    self->transport.poll(self->transport.self, s_on_transfer, self);
    s_kept_expire(self);
    s_flush_results(self);
}

void
pk_server_role_collect_idle(pk_server_role_t *self)
{
    if (self->closed)
        return;
    s_store_timeouts(self);
    s_kept_expire(self);
    s_flush_results(self);
}

void
pk_server_role_drain(pk_server_role_t *self)
{
    if (self->closed)
        return;
    //  Rounds that fail during the pass are cancelled by their own failure.
    s_round_t *last = self->drain_tail;
    for (s_round_t *r = self->drain_head, *next; r; r = next) {
        bool was_last = r == last;
        next = r->dnext;
        s_request_t *req = r->req;
        s_round_drain_once(self, r);
        s_request_prune(self, req);
        if (was_last)
            break;
    }
}

static int
s_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

int
pk_server_role_close(pk_server_role_t *self, uint64_t **jobs_p, size_t *njobs_p, size_t *owed_p)
{
    if (self->closed)
        return -EPIPE;
    self->closed = true;
    *jobs_p = NULL;
    *njobs_p = 0;
    *owed_p = self->parked;
    size_t n = pk_keymap_size(&self->xfers);
    if (n) {
        uint64_t *tids = malloc(n * sizeof *tids);
        if (!tids)
            return -ENOMEM;
        size_t i = 0, at = 0;
        for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->xfers, &at)); )
            tids[i++] = ((s_xfer_t *) (uintptr_t) e->a)->tid;
        qsort(tids, n, sizeof *tids, s_cmp_u64);
        self->transport.cancel(self->transport.self, tids, n, PK_CANCEL_IMMEDIATE, tids);
        free(tids);
    }
    s_flush_results(self);
    //  Jobs still owed a result: every undecided job, wherever it sits.
    size_t owed = self->undecided, i = 0;
    uint64_t *jobs = owed ? malloc(owed * sizeof *jobs) : NULL;
    if (owed && !jobs)
        return -ENOMEM;
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->requests, &at)); ) {
        s_request_t *req = (s_request_t *) (uintptr_t) e->a;
        for (s_round_t *r = req->rounds_head; r; r = r->next)
            for (s_job_t *job = r->jobs; job; job = job->next)
                if (!job->decided && i < owed)
                    jobs[i++] = job->id;
    }
    if (i)
        qsort(jobs, i, sizeof *jobs, s_cmp_u64);
    s_free_everything(self);
    self->undecided = self->aborts = self->parked = self->lookup_keys = 0;
    self->serve_count = 0;
    *jobs_p = jobs;
    *njobs_p = i;
    return 0;
}

bool
pk_server_role_has_inflight(const pk_server_role_t *self)
{
    return pk_keymap_size(&self->xfers) > 0;
}

bool
pk_server_role_has_writes(const pk_server_role_t *self)
{
    return pk_keymap_size(&self->xfers) > self->lent_inflight;
}

bool
pk_server_role_has_parked(const pk_server_role_t *self)
{
    return self->parked > 0;
}

void
pk_server_role_state(const pk_server_role_t *self, pk_server_role_state_t *state)
{
    state->requests = pk_keymap_size(&self->requests);
    state->inflight = pk_keymap_size(&self->xfers);
    state->store_jobs = self->undecided;
    state->aborts = self->aborts;
    state->serve_pending = self->serve_count;
    state->kept = pk_keymap_size(&self->kept);
    state->lookup_keys = self->lookup_keys;
}

void
pk_server_role_counters(const pk_server_role_t *self, pk_server_role_counters_t *out)
{
    *out = *self->counters;
}

void
pk_server_role_count_into(pk_server_role_t *self, pk_server_role_counters_t *counters)
{
    *counters = *self->counters;
    self->counters = counters;
}

size_t
pk_server_role_rounds(const pk_server_role_t *self, const char *kv, bool *exists_p)
{
    s_request_t *req = s_request_find((pk_server_role_t *) self, kv);
    if (exists_p)
        *exists_p = req != NULL;
    return req ? req->nrounds : 0;
}

bool
pk_server_role_take_forced(pk_server_role_t *self)
{
    bool forced = self->forced;
    self->forced = false;
    return forced;
}
