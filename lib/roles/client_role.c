/*  client_role.c: the consumer's side of a session (see client_role.h).

    Rounds are unique within the session, so every table here is keyed by
    round alone: lookups not yet fetched, loads, and two short memories.
    Ended loads tell a late abort_ack or transfer_done (either may follow
    the other, protocol.md section 3) from a second transfer_done (a
    violation); answered lookups tell a harmless repeat of an answer from
    a conflicting one (a violation, section 6).  Both memories keep only
    hashes and forget after the longest a load may live (load timeout plus
    abort-ack timeout), so what a session holds stays bounded however long
    it lives.
*/
#include "roles/client_role.h"
#include "base/big_cache.h"
#include "base/checksum.h"
#include "base/err.h"
#include "base/keymap.h"
#include "base/miss_reason.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { L_SENT, L_ABORTING, L_LANDING } s_load_state_t;

typedef struct s_load {
    uint64_t id, round;
    char *kv;
    size_t n;
    s_load_state_t state;
    double deadline;                //  SENT: load timeout; ABORTING, LANDING: abort-ack timeout
    uint64_t want_landed;           //  LANDING: blocks that may still arrive
    uint8_t nrails;                 //  the answer's rails (0: none; counted as one)
    uint64_t want_rails[PK_MAX_RAILS];  //  its blocks per rail of ours
    uint8_t nslices;                //  the answer's rail_slices (0: none)
    uint64_t want_slices[PK_MAX_RAILS]; //  its slices per rail of ours
    uint32_t failed_rails;          //  the answer's rails_failed: revoked before the end
    pk_load_status_t status;        //  LANDING: what the load ends as
    bool aborted, done_seen, ack_seen;
    bool cancelled;                 //  by the caller: ends PK_LOAD_ABORTED, whatever ends it
    pk_key_t *get;                  //  a get's keys (bytes after the array), until its
                                    //  get_resp: its answer names their hits
    struct s_load *prev, *next;
} s_load_t;

//  What is remembered of a round after it ended, until it expires.
typedef struct s_ended {
    uint64_t round;
    double expires;
    struct s_ended *next;
    bool done_seen, ack_seen;       //  an ended load
    uint64_t ask, answer;           //  an answered lookup: hashes of question and hits
    uint64_t ask_kv;                //  the question without its keys (wire 1.1)
} s_ended_t;

//  Expiry order is insertion order, since every record lives equally long.
typedef struct {
    pk_keymap_t map;                //  round -> record
    s_ended_t *head, *tail;
} s_memory_t;

typedef struct s_lookup {
    uint64_t round;
    char *kv;
    pk_key_t *keys;                 //  bytes follow the array; NULL once answered
    size_t n;
    bool answered;                  //  kept until its hits are fetched or the request ends
} s_lookup_t;

typedef struct {
    char *kv;
    pk_key_t *probe;                //  keys queued, in order (views into probe_bufs)
    size_t nprobe;
    pk_keymap_t queued;             //  the same keys, to ask each once
    uint8_t **probe_bufs;           //  one per probe call: bytes that never move
    size_t nprobe_bufs;
    pk_keymap_t sent;               //  keys already asked about (views into sent_bufs)
    uint8_t **sent_bufs;
    size_t nsent_bufs;
    bool looked_up;
} s_request_t;

struct _pk_client_role_t {
    pk_client_role_config_t config;
    pk_clock_t clock;
    pk_sender_t sender;
    pk_client_transport_t transport;
    pk_client_events_t events;
    uint64_t next_round, next_load;
    bool cut;
    bool queued;                    //  some request has probes to flush
    pk_keymap_t requests;           //  kv -> request
    pk_keymap_t lookups;            //  round -> lookup, open or answered and not fetched
    size_t asking;                  //  of them, sent and not answered
    pk_keymap_t loads;              //  round -> load
    s_load_t *loads_head, *loads_tail;
    s_memory_t ended;               //  loads that ended
    s_memory_t answered;            //  lookups that were answered
    //  The largest tables of the requests that ended, emptied, for a later
    //  one of about their size (s_spare_take): a request's two key sets
    //  are sized from its keys (5 MiB each at 65,536), and allocating
    //  them afresh for every request, then doubling them key by key,
    //  regrew and page-faulted them each time (a 4,096-key lookup: 17% of
    //  the consumer's samples in the regrowth, 23% in page faults).  What
    //  it costs: the largest pair seen stays allocated until the role
    //  ends (10 MiB after a lookup of 65,536 keys).
    pk_keymap_t spare_queued, spare_sent;
    const char *violation;          //  why on_message last returned -EPROTO
    pk_client_rail_offer_fn *offer; //  capability rejoin (NULL: off)
    void *offer_arg;
    uint32_t to_offer;              //  our rails revoked, not yet offered again
    //  a rail whose fresh registration failed: tried again from offer_at
    //  on, offer_fails failures so far (the server's rejoin back-off)
    double offer_at[PK_MAX_RAILS];
    uint32_t offer_fails[PK_MAX_RAILS];
};

void
pk_client_role_set_rail_offer(pk_client_role_t *self, pk_client_rail_offer_fn *offer, void *arg)
{
    self->offer = offer;
    self->offer_arg = arg;
}

static double s_now(pk_client_role_t *self);

//  A revoked rail's fresh registration on m (a fetch or get), one a
//  message, lowest rail first; returns the field to free once m went.
//  A rail whose registration cannot be made (no memory, the provider
//  refused a registration for now) stays out and is tried again after
//  the server's rejoin back-off, so a passing failure does not keep it
//  out for the session's life: twice the rail stall, doubling with each
//  failure, at most 64 (one pk_channel_rail_offer a try; nothing is sent
//  for a rail that failed).
static char *
s_rail_offer(pk_client_role_t *self, pk_msg_t *m)
{
    char *text = NULL;
    double now = s_now(self);
    uint32_t due = 0;
    for (uint32_t left = self->to_offer; left; left &= left - 1) {
        size_t rail = (size_t) __builtin_ctz(left);
        if (now >= self->offer_at[rail])
            due |= UINT32_C(1) << rail;
    }
    while (due && !text) {
        size_t rail = (size_t) __builtin_ctz(due);
        due &= ~(UINT32_C(1) << rail);
        uint8_t *blob = NULL;
        size_t len = 0;
        if (self->offer(self->offer_arg, rail, &blob, &len) == 0) {
            self->to_offer &= ~(UINT32_C(1) << rail);
            self->offer_fails[rail] = 0;
            text = pk_wire_rail_offer_format(rail, blob, len);
        }
        else {
            self->offer_fails[rail]++;
            self->offer_at[rail] = now + pk_rail_backoff(self->config.rail_stall,
                                                         self->offer_fails[rail]);
        }
        free(blob);
    }
    if (text) {
        m->rail_offer = text;
        m->present |= PK_BIT(PK_F_RAIL_OFFER);
    }
    return text;
}

//  A lookup answer's checksums (16 hex chars per hit, in key order; the
//  codec checked their count and alphabet) as one per key, 0 at misses.
//  NULL without memory: the answer is then taken without checksums.
static uint64_t *
s_parse_sums(const char *hex, const bool *hits, size_t n)
{
    uint64_t *sums = pk_big_calloc(n ? n : 1, sizeof *sums);
    for (size_t i = 0; sums && i < n; i++)
        if (hits[i]) {
            //  the codec checked the count and the alphabet
            (void) pk_checksum_parse(hex, &sums[i]);
            hex += PK_CHECKSUM_HEX;
        }
    return sums;
}

//  A lookup answer's reasons (one letter per miss, in key order; the codec
//  checked their count and alphabet) as one pk_miss_reason_t per key, 0
//  at hits.  NULL without memory: the misses then carry none.
static uint8_t *
s_parse_reasons(const char *letters, const bool *hits, size_t n)
{
    uint8_t *reasons = calloc(n ? n : 1, 1);
    for (size_t i = 0; reasons && i < n; i++)
        if (!hits[i]) {
            int r = pk_miss_reason_of_letter(*letters++);
            reasons[i] = (uint8_t) (r > 0 ? r : PK_MISS_UNKNOWN);
        }
    return reasons;
}

static double
s_now(pk_client_role_t *self)
{
    return self->clock.now(self->clock.self);
}

static pk_key_t
s_round_key(const uint64_t *round)
{
    return (pk_key_t) { (const uint8_t *) round, sizeof *round, pk_hash_id(*round, 3) };
}

//  --------------------------------------------------------------------------
//  The memories of ended rounds

static s_ended_t *
s_memory_add(pk_client_role_t *self, s_memory_t *mem, uint64_t round)
{
    s_ended_t *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->round = round;
    e->expires = s_now(self) + self->config.load_timeout + self->config.abort_ack_timeout;
    pk_key_t k = s_round_key(&e->round);
    pk_keymap_entry_t *entry;
    int rc = pk_keymap_get_or_put(&mem->map, &k, (uintptr_t) e, 0, &entry);
    if (rc != 1) {
        //  out of memory: forgetting is safe, a late message is then only
        //  stale; and a round ends once, but should it end again the
        //  first record stands
        free(e);
        return rc == 0 ? (s_ended_t *) (uintptr_t) entry->a : NULL;
    }
    if (mem->tail)
        mem->tail->next = e;
    else
        mem->head = e;
    mem->tail = e;
    return e;
}

static s_ended_t *
s_memory_find(const s_memory_t *mem, uint64_t round)
{
    pk_key_t k = s_round_key(&round);
    pk_keymap_entry_t *e = pk_keymap_find(&mem->map, &k);
    return e ? (s_ended_t *) (uintptr_t) e->a : NULL;
}

static void
s_memory_expire(s_memory_t *mem, double now, bool all)
{
    while (mem->head && (all || now >= mem->head->expires)) {
        s_ended_t *e = mem->head;
        mem->head = e->next;
        if (!mem->head)
            mem->tail = NULL;
        pk_key_t k = s_round_key(&e->round);
        pk_keymap_take(&mem->map, &k, NULL, NULL);
        free(e);
    }
}

pk_client_role_t *
pk_client_role_new(const pk_client_role_config_t *config, pk_clock_t clock, pk_sender_t sender,
                   pk_client_transport_t transport, pk_client_events_t events)
{
    pk_client_role_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    pk_client_role_config_t dflt = PK_CLIENT_ROLE_CONFIG_DEFAULT;
    self->config = config ? *config : dflt;
    self->clock = clock;
    self->sender = sender;
    self->transport = transport;
    self->events = events;
    self->next_round = 1;
    self->next_load = 1;
    return self;
}

//  Keeps the larger of table and spare, emptied, as the spare.
static void
s_spare_keep(pk_keymap_t *spare, pk_keymap_t *table)
{
    if (table->slots && (!spare->slots || table->mask > spare->mask)) {
        pk_keymap_fini(spare);
        pk_keymap_clear(table);
        *spare = *table;
        *table = (pk_keymap_t) PK_KEYMAP_INIT;
    }
    pk_keymap_fini(table);
}

//  The spare as table (which has none yet) when it fits n keys and is not
//  over 8 times what they need: emptying it at the request's end walks
//  all its slots, a cost that stays in proportion to the request's keys.
static void
s_spare_take(pk_keymap_t *spare, pk_keymap_t *table, size_t n)
{
    size_t need = 8;
    while (need < 2 * n)
        need *= 2;
    if (!table->slots && spare->slots && spare->mask + 1 >= need
        && spare->mask + 1 <= 8 * need) {
        *table = *spare;
        *spare = (pk_keymap_t) PK_KEYMAP_INIT;
    }
}

static void
s_request_free(pk_client_role_t *self, s_request_t *r)
{
    free(r->kv);
    pk_big_free(r->probe);
    s_spare_keep(&self->spare_queued, &r->queued);
    for (size_t i = 0; i < r->nprobe_bufs; i++)
        pk_big_free(r->probe_bufs[i]);
    free(r->probe_bufs);
    s_spare_keep(&self->spare_sent, &r->sent);
    for (size_t i = 0; i < r->nsent_bufs; i++)
        pk_big_free(r->sent_bufs[i]);
    free(r->sent_bufs);
    free(r);
}

static void
s_lookup_free(s_lookup_t *l)
{
    free(l->kv);
    pk_big_free(l->keys);
    free(l);
}

void
pk_client_role_destroy(pk_client_role_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_client_role_t *self = *self_p;
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->requests, &at)); )
        s_request_free(self, (s_request_t *) (uintptr_t) e->a);
    at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->lookups, &at)); )
        s_lookup_free((s_lookup_t *) (uintptr_t) e->a);
    while (self->loads_head) {
        s_load_t *l = self->loads_head;
        self->loads_head = l->next;
        free(l->kv);
        free(l);
    }
    s_memory_expire(&self->ended, 0, true);
    s_memory_expire(&self->answered, 0, true);
    pk_keymap_fini(&self->requests);
    pk_keymap_fini(&self->lookups);
    pk_keymap_fini(&self->loads);
    pk_keymap_fini(&self->ended.map);
    pk_keymap_fini(&self->answered.map);
    pk_keymap_fini(&self->spare_queued);
    pk_keymap_fini(&self->spare_sent);
    free(self);
    *self_p = NULL;
}

static s_request_t *
s_request(pk_client_role_t *self, const char *kv, bool create)
{
    pk_key_t k = pk_key_make((const uint8_t *) kv, strlen(kv));
    pk_keymap_entry_t *e = pk_keymap_find(&self->requests, &k);
    if (e || !create)
        return e ? (s_request_t *) (uintptr_t) e->a : NULL;
    s_request_t *r = calloc(1, sizeof *r);
    if (!r || !(r->kv = strdup(kv))) {
        free(r);
        return NULL;
    }
    k.bytes = (const uint8_t *) r->kv;
    if (pk_keymap_put(&self->requests, &k, (uintptr_t) r, 0) < 0) {
        s_request_free(self, r);
        return NULL;
    }
    return r;
}

//  --------------------------------------------------------------------------
//  Lookups

int
pk_client_role_probe(pk_client_role_t *self, const char *kv, const pk_key_t *keys, size_t n)
{
    s_request_t *r = s_request(self, kv, true);
    if (!r)
        return -ENOMEM;
    //  keys already asked about, or already queued, are not asked again;
    //  the new ones' bytes go to one buffer for this call, which never
    //  moves, so the tables can hold views into it
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += keys[i].len;
    //  (large ones from the kept blocks of base/big_cache.h: a lookup of
    //  65,536 keys is 2 MB of key bytes and 1.5 MB of views)
    uint8_t *buf = pk_big_alloc(bytes ? bytes : 1);
    size_t want = (r->nprobe + n) * sizeof(pk_key_t);
    pk_key_t *probe = r->probe ? realloc(r->probe, want) : pk_big_alloc(want);
    if (probe)
        r->probe = probe;
    uint8_t **bufs = realloc(r->probe_bufs, (r->nprobe_bufs + 1) * sizeof *bufs);
    if (bufs)
        r->probe_bufs = bufs;
    //  one table of the size the keys need, not a doubling per power of
    //  two on the way there
    s_spare_take(&self->spare_queued, &r->queued, r->nprobe + n);
    if (!buf || !probe || !bufs || pk_keymap_reserve(&r->queued, r->nprobe + n) < 0) {
        pk_big_free(buf);
        return -ENOMEM;
    }
    size_t used = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (pk_keymap_find(&r->sent, &keys[i]) || pk_keymap_find(&r->queued, &keys[i]))
            continue;
        pk_key_t k = keys[i];
        memcpy(buf + used, k.bytes, k.len);
        k.bytes = buf + used;
        if (pk_keymap_put(&r->queued, &k, 0, 0) < 0) {
            rc = -ENOMEM;
            break;
        }
        r->probe[r->nprobe++] = k;
        used += k.len;
    }
    if (used)
        r->probe_bufs[r->nprobe_bufs++] = buf;
    else
        pk_big_free(buf);
    if (r->nprobe)
        self->queued = true;
    return rc;
}

void
pk_client_role_flush(pk_client_role_t *self)
{
    if (!self->queued)
        return;
    self->queued = false;
    size_t pos = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->requests, &pos)); ) {
        s_request_t *r = (s_request_t *) (uintptr_t) e->a;
        if (!r->nprobe)
            continue;
        s_lookup_t *l = calloc(1, sizeof *l);
        size_t n = r->nprobe, bytes = 0;
        for (size_t j = 0; j < n; j++)
            bytes += r->probe[j].len;
        if (!l || !(l->kv = strdup(r->kv))
            || !(l->keys = pk_big_alloc(n * sizeof *l->keys + bytes + 1))) {
            if (l)
                free(l->kv);
            free(l);
            self->queued = true;
            continue;       //  try again at the next flush
        }
        uint8_t *at = (uint8_t *) (l->keys + n);
        for (size_t j = 0; j < n; j++) {
            l->keys[j] = r->probe[j];
            memcpy(at, r->probe[j].bytes, r->probe[j].len);
            l->keys[j].bytes = at;
            at += r->probe[j].len;
        }
        l->n = n;
        l->round = self->next_round++;
        pk_key_t rk = s_round_key(&l->round);
        if (pk_keymap_put(&self->lookups, &rk, (uintptr_t) l, 0) < 0) {
            s_lookup_free(l);
            self->queued = true;
            continue;
        }
        self->asking++;
        //  remember what was asked: the buffers move to the request
        uint8_t **bufs = realloc(r->sent_bufs, (r->nsent_bufs + r->nprobe_bufs) * sizeof *bufs);
        pk_keymap_clear(&r->queued);
        if (bufs) {
            r->sent_bufs = bufs;
            for (size_t j = 0; j < r->nprobe_bufs; j++)
                r->sent_bufs[r->nsent_bufs++] = r->probe_bufs[j];
            //  Out of memory here costs only a repeat: a key not
            //  remembered as sent is asked again by a later lookup of
            //  the request, so the results are dropped on purpose.
            s_spare_take(&self->spare_sent, &r->sent, pk_keymap_size(&r->sent) + n);
            if (pk_keymap_reserve(&r->sent, pk_keymap_size(&r->sent) + n) == 0)
                for (size_t j = 0; j < n; j++)
                    (void) pk_keymap_put(&r->sent, &r->probe[j], 0, 0);
        }
        else
            for (size_t j = 0; j < r->nprobe_bufs; j++)
                pk_big_free(r->probe_bufs[j]);
        r->nprobe_bufs = 0;
        r->nprobe = 0;
        r->looked_up = true;
        pk_msg_t m = { .type = PK_MSG_LOOKUP, .kv_request_id = r->kv,
                       .keys = { n, l->keys, NULL }, .round_seq = l->round,
                       .present = PK_BIT(PK_F_KV_REQUEST_ID) | PK_BIT(PK_F_KEYS)
                                  | PK_BIT(PK_F_ROUND_SEQ) };
        self->sender.send(self->sender.self, &m);
    }
}

//  The question of a lookup (request and keys in order) and its answer, as
//  hashes: a repeat of the question with another answer is a conflict.
//  Key hashes are keyed (pk_key_hash), so folding them cannot be steered.
//  keys NULL: the question as an answer without keys (wire 1.1) states
//  it, the request and the number of keys.
static uint64_t
s_ask_hash(const char *kv, const pk_key_t *keys, size_t n)
{
    uint64_t h = pk_hash_id(pk_key_hash((const uint8_t *) kv, strlen(kv)), n);
    for (size_t i = 0; keys && i < n; i++)
        h = pk_hash_id(h, keys[i].hash);
    return h;
}

static uint64_t
s_answer_hash(const bool *hits, size_t n)
{
    //  a bool's object representation is 0 or 1, so the bytes are the bits
    return pk_key_hash((const uint8_t *) hits, n * sizeof *hits);
}

//  An answer without keys (wire 1.1: a server leaves them out for a
//  consumer of minor 1 or later) answers the lookup of its round: its
//  request and its number of hits must match, and the keys are ours.
static int
s_on_lookup_resp(pk_client_role_t *self, const pk_msg_t *m)
{
    uint64_t round = m->round_seq;
    pk_key_t rk = s_round_key(&round);
    pk_keymap_entry_t *e = pk_keymap_find(&self->lookups, &rk);
    s_lookup_t *l = e ? (s_lookup_t *) (uintptr_t) e->a : NULL;
    const pk_key_t *keys = m->present & PK_BIT(PK_F_KEYS) ? m->keys.v : NULL;
    if (!l || l->answered) {
        //  Answered before: the same answer again is harmless, another
        //  answer to the same question is a violation; a round we never
        //  asked, or asked for another request or keys, is stale.
        s_ended_t *a = s_memory_find(&self->answered, round);
        uint64_t ask = s_ask_hash(m->kv_request_id, keys, m->keys.count);
        if (!a || (keys ? a->ask : a->ask_kv) != ask
            || a->answer == s_answer_hash(m->hits, m->keys.count))
            return 0;
        self->violation = "a conflicting duplicate lookup_resp";
        return -EPROTO;
    }
    //  stale: asked for another request, or not the keys we asked
    if (strcmp(l->kv, m->kv_request_id) != 0 || m->keys.count != l->n)
        return 0;
    for (size_t i = 0; keys && i < l->n; i++)
        if (!pk_key_eq(&l->keys[i], &keys[i]))
            return 0;
    s_ended_t *a = s_memory_add(self, &self->answered, round);
    if (a) {
        a->ask = s_ask_hash(l->kv, l->keys, l->n);
        a->ask_kv = s_ask_hash(l->kv, NULL, l->n);
        a->answer = s_answer_hash(m->hits, m->keys.count);
    }
    //  The lookup stays until its hits are fetched under its round; its
    //  keys go with this answer.  They are taken out first, since the
    //  owner may fetch (and so free l) from inside the event.
    l->answered = true;
    self->asking--;
    pk_key_t *asked = l->keys;
    l->keys = NULL;
    uint64_t *sums = m->present & PK_BIT(PK_F_CHECKSUMS)
                     ? s_parse_sums(m->checksums, m->hits, m->keys.count) : NULL;
    uint8_t *reasons = m->present & PK_BIT(PK_F_REASONS)
                       ? s_parse_reasons(m->reasons, m->hits, m->keys.count) : NULL;
    self->events.lookup_done(self->events.self, l->kv, round, asked, m->hits, sums, reasons,
                             m->keys.count);
    pk_big_free(sums);
    free(reasons);
    pk_big_free(asked);
    return 0;
}

//  --------------------------------------------------------------------------
//  Loads

static void
s_load_end(pk_client_role_t *self, s_load_t *l, pk_load_status_t status, const char *reason)
{
    pk_key_t k = s_round_key(&l->round);
    pk_keymap_take(&self->loads, &k, NULL, NULL);
    if (l->prev)
        l->prev->next = l->next;
    else
        self->loads_head = l->next;
    if (l->next)
        l->next->prev = l->prev;
    else
        self->loads_tail = l->prev;
    s_ended_t *e = s_memory_add(self, &self->ended, l->round);
    if (e) {
        e->done_seen = l->done_seen;
        e->ack_seen = l->ack_seen;
    }
    uint64_t id = l->id;
    //  A cancelled load ends ABORTED whatever ended it (an ack, a
    //  transfer_done that crossed the abort, even with success, or a cut
    //  off): the caller asked to stop, and what it may rely on is only that
    //  nothing lands any more; what did land is undefined to it.
    char why[PK_ERRLEN + 96];
    if (l->cancelled) {
        snprintf(why, sizeof why, "cancelled (%s)", reason ? reason : "");
        status = PK_LOAD_ABORTED;
        reason = why;
    }
    //  the round is over for the transport too: no block of it is awaited
    if (self->transport.forget)
        self->transport.forget(self->transport.self, l->round);
    free(l->kv);
    free(l->get);
    free(l);
    self->events.load_done(self->events.self, id, status, reason);
}

//  abort_fetch for a load still waiting for its transfer_done; its ack (or
//  the transfer_done that crossed it) is then awaited for abort_ack_timeout.
static void
s_abort(pk_client_role_t *self, s_load_t *l)
{
    l->state = L_ABORTING;
    l->aborted = true;
    l->deadline = s_now(self) + self->config.abort_ack_timeout;
    pk_msg_t m = { .type = PK_MSG_ABORT_FETCH, .kv_request_id = l->kv, .round_seq = l->round,
                   .present = PK_BIT(PK_F_KV_REQUEST_ID) | PK_BIT(PK_F_ROUND_SEQ) };
    self->sender.send(self->sender.self, &m);
}

//  The caller's cancel: an abort unless one went out already (its deadline
//  passed) or the server has answered (LANDING: only the fence is left to
//  wait for).  Either way the load ends through the usual paths, once.
static void
s_cancel(pk_client_role_t *self, s_load_t *l)
{
    l->cancelled = true;
    if (l->state == L_SENT)
        s_abort(self, l);
}

int
pk_client_role_cancel(pk_client_role_t *self, uint64_t load_id)
{
    s_load_t *l = self->loads_head;
    while (l && l->id != load_id)
        l = l->next;
    if (!l)
        return -ENOENT;
    if (l->cancelled)
        return -EINPROGRESS;
    s_cancel(self, l);
    return 0;
}

static void
s_cut_off(pk_client_role_t *self)
{
    if (!self->cut) {
        self->cut = true;
        self->transport.cut_off(self->transport.self);
    }
}

//  A load waiting for its landing blocks ends once they are counted, or at
//  once when nothing from this server can land any more.
static bool
s_check_landing(pk_client_role_t *self, s_load_t *l)
{
    if (l->state != L_LANDING)
        return false;
    uint64_t landed = self->transport.landed(self->transport.self, l->round);
    //  over rails, each rail's count: a late write on one rail never makes
    //  up for another's missing blocks
    bool rails_ok = true;
    if (l->nrails) {
        uint64_t got[PK_MAX_RAILS] = { 0 };
        size_t n = self->transport.landed_rails
                   ? self->transport.landed_rails(self->transport.self, l->round, got,
                                                  PK_MAX_RAILS) : 0;
        for (size_t i = 0; i < l->nrails; i++)
            rails_ok &= (i < n ? got[i] : 0) >= l->want_rails[i];
    }
    //  and each rail's slices: a block is counted once its last slice
    //  landed, but the server's confirmed slices on a rail are all fenced
    //  only once that rail read them all (a partial block counts no block)
    if (l->nslices) {
        uint64_t got[PK_MAX_RAILS] = { 0 };
        size_t n = self->transport.landed_slices
                   ? self->transport.landed_slices(self->transport.self, l->round, got,
                                                   PK_MAX_RAILS) : 0;
        for (size_t i = 0; i < l->nslices; i++)
            rails_ok &= (i < n ? got[i] : 0) >= l->want_slices[i];
    }
    if (landed >= l->want_landed && rails_ok) {
        //  a rail the server took out may still deliver late writes of
        //  this round (the same bytes as their resends): its registration
        //  goes before the caller may reuse the blocks
        for (size_t i = 0; i < PK_MAX_RAILS; i++)
            if ((l->failed_rails & (UINT32_C(1) << i)) && self->transport.revoke_rail) {
                self->transport.revoke_rail(self->transport.self, i);
                if (self->offer && !(self->to_offer & (UINT32_C(1) << i))) {
                    self->to_offer |= UINT32_C(1) << i;
                    self->offer_at[i] = 0;
                    self->offer_fails[i] = 0;
                }
            }
        s_load_end(self, l, l->status, l->status == PK_LOAD_LANDED ? "landed"
                                       : l->status == PK_LOAD_ABORTED ? "aborted"
                                       : "the server could not serve the round");
    }
    else if (self->cut)
        s_load_end(self, l, l->status == PK_LOAD_LANDED ? PK_LOAD_FAILED : l->status,
                   "cut off before every block landed");
    else
        return false;
    return true;
}

//  A new load of round: in the table and the list, its id drawn.
static s_load_t *
s_load_new(pk_client_role_t *self, const char *kv, size_t n, uint64_t round, double deadline)
{
    s_load_t *l = calloc(1, sizeof *l);
    if (!l || !(l->kv = strdup(kv))) {
        free(l);
        return NULL;
    }
    l->round = round;
    l->n = n;
    l->state = L_SENT;
    l->deadline = s_now(self) + (deadline > 0 ? deadline : self->config.load_timeout);
    pk_key_t k = s_round_key(&l->round);
    if (pk_keymap_put(&self->loads, &k, (uintptr_t) l, 0) < 0) {
        free(l->kv);
        free(l);
        return NULL;
    }
    //  drawn only for a load that exists: the owner takes every id up to
    //  its counter as issued (p2pkv_client_cancel's -EALREADY)
    l->id = self->config.load_ids ? ++*self->config.load_ids : self->next_load++;
    l->prev = self->loads_tail;
    if (self->loads_tail)
        self->loads_tail->next = l;
    else
        self->loads_head = l;
    self->loads_tail = l;
    return l;
}

int
pk_client_role_get(pk_client_role_t *self, const char *kv, const pk_key_t *keys,
                   const uint32_t *dest, size_t n, double deadline, uint64_t *load_id_p,
                   uint64_t *round_p)
{
    if (self->cut || n == 0)
        return self->cut ? -ENOTCONN : -EINVAL;
    //  the keys stay with the load until its answer names their hits
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += keys[i].len;
    pk_key_t *copy = malloc(n * sizeof *copy + bytes + 1);
    if (!copy)
        return -ENOMEM;
    uint8_t *at = (uint8_t *) (copy + n);
    for (size_t i = 0; i < n; i++) {
        copy[i] = keys[i];
        memcpy(at, keys[i].bytes, keys[i].len);
        copy[i].bytes = at;
        at += keys[i].len;
    }
    s_load_t *l = s_load_new(self, kv, n, self->next_round++, deadline);
    if (!l) {
        free(copy);
        return -ENOMEM;
    }
    l->get = copy;
    pk_msg_t m = { .type = PK_MSG_GET, .kv_request_id = (char *) kv,
                   .keys = { n, (pk_key_t *) keys, NULL }, .block_indexes = (uint32_t *) dest,
                   .round_seq = l->round,
                   .present = PK_BIT(PK_F_KV_REQUEST_ID) | PK_BIT(PK_F_KEYS)
                              | PK_BIT(PK_F_BLOCK_INDEXES) | PK_BIT(PK_F_ROUND_SEQ) };
    char *offer = s_rail_offer(self, &m);
    self->sender.send(self->sender.self, &m);
    free(offer);
    *load_id_p = l->id;
    if (round_p)
        *round_p = l->round;
    return 0;
}

int
pk_client_role_fetch(pk_client_role_t *self, const char *kv, const pk_key_t *keys,
                     const uint32_t *dest, size_t n, uint64_t round, double deadline,
                     uint64_t *load_id_p)
{
    if (self->cut || n == 0)
        return self->cut ? -ENOTCONN : -EINVAL;
    if (round) {
        //  the hits of an answered lookup go under that lookup's round, once
        pk_key_t rk = s_round_key(&round);
        pk_keymap_entry_t *e = pk_keymap_find(&self->lookups, &rk);
        s_lookup_t *lk = e ? (s_lookup_t *) (uintptr_t) e->a : NULL;
        if (!lk || !lk->answered || strcmp(lk->kv, kv) != 0)
            return -EINVAL;
        pk_keymap_take(&self->lookups, &rk, NULL, NULL);
        s_lookup_free(lk);
    }
    else {
        if (!s_request(self, kv, true))
            return -ENOMEM;
        round = self->next_round++;
    }
    s_load_t *l = s_load_new(self, kv, n, round, deadline);
    if (!l)
        return -ENOMEM;
    pk_msg_t m = { .type = PK_MSG_FETCH, .kv_request_id = (char *) kv,
                   .keys = { n, (pk_key_t *) keys, NULL }, .block_indexes = (uint32_t *) dest,
                   .round_seq = round,
                   .present = PK_BIT(PK_F_KV_REQUEST_ID) | PK_BIT(PK_F_KEYS)
                              | PK_BIT(PK_F_BLOCK_INDEXES) | PK_BIT(PK_F_ROUND_SEQ) };
    char *offer = s_rail_offer(self, &m);
    self->sender.send(self->sender.self, &m);
    free(offer);
    *load_id_p = l->id;
    return 0;
}

static int
s_cmp_round(const void *a, const void *b)
{
    const s_lookup_t *x = *(s_lookup_t *const *) a, *y = *(s_lookup_t *const *) b;
    return x->round < y->round ? -1 : x->round > y->round;
}

//  Takes out of the table the lookups of request kv (NULL: of every
//  request), only those not answered yet when open_only; returns them in
//  round order (*n_p of them; the caller frees each and the array), or
//  NULL.  Out of the table first, so a callback run for one of them
//  cannot free another.
static s_lookup_t **
s_take_lookups(pk_client_role_t *self, const char *kv, bool open_only, size_t *n_p)
{
    size_t n = 0, cap = pk_keymap_size(&self->lookups);
    s_lookup_t **taken = cap ? malloc(cap * sizeof *taken) : NULL;
    size_t at = 0;
    for (pk_keymap_entry_t *e; taken && (e = pk_keymap_next(&self->lookups, &at)); ) {
        s_lookup_t *l = (s_lookup_t *) (uintptr_t) e->a;
        if ((!kv || strcmp(l->kv, kv) == 0) && !(open_only && l->answered))
            taken[n++] = l;
    }
    for (size_t i = 0; i < n; i++) {
        pk_key_t k = s_round_key(&taken[i]->round);
        pk_keymap_take(&self->lookups, &k, NULL, NULL);
        self->asking -= !taken[i]->answered;
    }
    if (n > 1)
        qsort(taken, n, sizeof *taken, s_cmp_round);
    *n_p = n;
    return taken;
}

int
pk_client_role_finish(pk_client_role_t *self, const char *kv)
{
    //  Its loads still open are cancelled first, so their aborts reach the
    //  server before the terminal fetch: the server fails each aborted
    //  round and owes it an abort_ack (the terminal fetch leaves a failed
    //  round to publish what it owes), and the loads end, ABORTED, once
    //  the fence holds.  Loads outlive their request; they carry its kv.
    for (s_load_t *l = self->loads_head; l; l = l->next)
        if (!l->cancelled && strcmp(l->kv, kv) == 0)
            s_cancel(self, l);
    s_request_t *r = s_request(self, kv, false);
    if (!r)
        return 0;
    if (r->looked_up && !self->cut) {
        //  the terminal fetch carries the round of a lookup still open (the
        //  latest, answered or not, whose hits were not fetched), or a
        //  fresh one
        uint64_t round = 0;
        size_t at = 0;
        for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->lookups, &at)); ) {
            s_lookup_t *l = (s_lookup_t *) (uintptr_t) e->a;
            if (l->round > round && strcmp(l->kv, kv) == 0)
                round = l->round;
        }
        if (!round)
            round = self->next_round++;
        pk_msg_t m = { .type = PK_MSG_FETCH, .kv_request_id = r->kv, .keys = { 0, NULL, NULL },
                       .round_seq = round,
                       .present = PK_BIT(PK_F_KV_REQUEST_ID) | PK_BIT(PK_F_KEYS)
                                  | PK_BIT(PK_F_BLOCK_INDEXES) | PK_BIT(PK_F_ROUND_SEQ) };
        self->sender.send(self->sender.self, &m);
    }
    //  open lookups of the request are answered no more (their answers
    //  would be stale), and answered ones are not fetched any more
    size_t n;
    s_lookup_t **gone = s_take_lookups(self, kv, false, &n);
    for (size_t i = 0; i < n; i++)
        s_lookup_free(gone[i]);
    free(gone);
    pk_key_t k = pk_key_make((const uint8_t *) kv, strlen(kv));
    pk_keymap_take(&self->requests, &k, NULL, NULL);
    s_request_free(self, r);
    return 0;
}

static int
s_on_end_message(pk_client_role_t *self, const pk_msg_t *m)
{
    bool done = m->type == PK_MSG_TRANSFER_DONE || m->type == PK_MSG_GET_RESP;
    uint64_t round = m->round_seq;
    pk_key_t k = s_round_key(&round);
    pk_keymap_entry_t *e = pk_keymap_find(&self->loads, &k);
    s_load_t *l = e ? (s_load_t *) (uintptr_t) e->a : NULL;
    if (!l) {
        //  the other of the two may follow the first, once
        s_ended_t *ended = s_memory_find(&self->ended, round);
        if (ended && done) {
            if (ended->done_seen) {
                self->violation = "two transfer_done for one round";
                return -EPROTO;
            }
            ended->done_seen = true;
        }
        else if (ended)
            ended->ack_seen = true;
        return 0;
    }
    if (strcmp(l->kv, m->kv_request_id) != 0)
        return 0;
    //  a get's round ends with a get_resp, a fetch's with a transfer_done
    if ((m->type == PK_MSG_GET_RESP) != (l->get != NULL) && done && !l->done_seen) {
        if (m->type == PK_MSG_TRANSFER_DONE)
            return 0;       //  stale: not this round's kind of answer
        self->violation = "a get_resp for a round that was no get";
        return -EPROTO;
    }
    if (m->type == PK_MSG_GET_RESP && l->get && !l->done_seen) {
        if (m->keys.count != l->n) {
            self->violation = "a get_resp whose hits are not one per key of its get";
            return -EPROTO;
        }
        //  its answer first, as a lookup's (the owner learns which keys
        //  hit, their checksums and the misses' reasons), then its end
        pk_key_t *asked = l->get;
        l->get = NULL;
        size_t nhits = 0;
        for (size_t i = 0; i < l->n; i++)
            nhits += m->hits[i];
        uint64_t *sums = m->present & PK_BIT(PK_F_CHECKSUMS)
                         ? s_parse_sums(m->checksums, m->hits, l->n) : NULL;
        uint8_t *reasons = m->present & PK_BIT(PK_F_REASONS)
                           ? s_parse_reasons(m->reasons, m->hits, l->n) : NULL;
        //  the blocks to count are the hits': the misses' are never written
        l->n = nhits;
        self->events.lookup_done(self->events.self, l->kv, l->round, asked, m->hits, sums,
                                 reasons, m->keys.count);
        pk_big_free(sums);
        free(reasons);
        pk_big_free(asked);
    }
    if (done && l->done_seen) {
        self->violation = "two transfer_done for one round";
        return -EPROTO;
    }
    if (l->state == L_LANDING) {
        //  the second answer while the first waits for its blocks
        if (done)
            l->done_seen = true;
        else
            l->ack_seen = true;
        return 0;
    }
    l->state = L_LANDING;
    l->deadline = s_now(self) + self->config.abort_ack_timeout;
    if (done) {
        l->done_seen = true;
        l->status = m->success ? PK_LOAD_LANDED : PK_LOAD_FAILED;
        l->want_landed = m->success ? l->n : m->landing;
    }
    else {
        l->ack_seen = true;
        l->status = PK_LOAD_ABORTED;
        l->want_landed = m->landing;
    }
    if (m->present & PK_BIT(PK_F_RAILS))
        l->nrails = (uint8_t) pk_wire_rails_parse(m->rails, l->want_rails, PK_MAX_RAILS);
    if (m->present & PK_BIT(PK_F_RAILS_FAILED))
        l->failed_rails = pk_wire_rails_failed_parse(m->rails_failed);
    if (m->present & PK_BIT(PK_F_RAIL_SLICES))
        l->nslices = (uint8_t) pk_wire_rails_parse(m->rail_slices, l->want_slices, PK_MAX_RAILS);
    s_check_landing(self, l);
    return 0;
}

int
pk_client_role_on_message(pk_client_role_t *self, const pk_msg_t *m)
{
    switch (m->type) {
        case PK_MSG_LOOKUP_RESP:
            return s_on_lookup_resp(self, m);
        case PK_MSG_TRANSFER_DONE:
        case PK_MSG_GET_RESP:
        case PK_MSG_ABORT_ACK:
            return s_on_end_message(self, m);
        default:
            return 0;
    }
}

void
pk_client_role_tick(pk_client_role_t *self)
{
    double now = s_now(self);
    for (s_load_t *l = self->loads_head, *next; l; l = next) {
        next = l->next;
        if (s_check_landing(self, l))
            continue;
        if (now < l->deadline)
            continue;
        if (l->state == L_SENT) {
            //  the deadline passed without an answer: ask the server to stop
            s_abort(self, l);
            continue;
        }
        //  no ack, or the landing blocks never came: cut the server off
        //  first, then the destination is free
        s_cut_off(self);
        s_load_end(self, l, PK_LOAD_FAILED, l->state == L_ABORTING
                   ? "abort not acknowledged in time" : "landing blocks did not arrive in time");
    }
    s_memory_expire(&self->ended, now, false);
    s_memory_expire(&self->answered, now, false);
}

void
pk_client_role_server_gone(pk_client_role_t *self, const char *reason)
{
    //  answered, and every block counted before the cut: it landed
    for (s_load_t *l = self->loads_head, *next; l; l = next) {
        next = l->next;
        s_check_landing(self, l);
    }
    s_cut_off(self);
    while (self->loads_head)
        s_load_end(self, self->loads_head, PK_LOAD_FAILED, reason);
    //  every lookup gets its one answer: none will come now
    size_t n;
    s_lookup_t **open = s_take_lookups(self, NULL, true, &n);
    for (size_t i = 0; i < n; i++) {
        self->events.lookup_done(self->events.self, open[i]->kv, open[i]->round, open[i]->keys,
                                 NULL, NULL, NULL, open[i]->n);
        s_lookup_free(open[i]);
    }
    free(open);
}

const char *
pk_client_role_violation(const pk_client_role_t *self)
{
    return self->violation;
}

bool
pk_client_role_has_queued(const pk_client_role_t *self)
{
    return self->queued;
}

size_t
pk_client_role_open_loads(const pk_client_role_t *self)
{
    return pk_keymap_size(&self->loads);
}

size_t
pk_client_role_open_lookups(const pk_client_role_t *self)
{
    return self->asking;
}
