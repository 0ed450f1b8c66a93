/*  get_steps.c: p2pkv_client_get_async against a server without the
    capability get (run with --gets off, or older): the two steps, a
    lookup then a fetch of its hits, taken by the client itself without
    blocking its caller.  Its end is the one-message get's (get_async.c):
    one fetch id from the start, results filled as that get fills them
    (landed and checked, corrupt, missing with the server's reason), the
    end to on_fetch or p2pkv_client_fetch_status.

    Its lookup and fetch go under a request of its own, "KV#getID" (the
    caller's kv and the get's fetch id), not under kv.  The role asks one
    lookup per request at a time and never asks a key of a request twice
    (client_role.c, probe): under kv the get's lookup would travel inside
    the caller's own lookups of kv, answered as one, and a key the caller
    asked already would not be asked at all; telling whose answer is whose
    would need a record per key.  A request of its own is answered alone,
    matched by its name, and is finished (its terminal fetch) at the get's
    end whatever ends it, which lets go of what the server pins for it,
    also while it still looks up (protocol.md section 3: the terminal fetch
    drops the request's parked lookups); the caller's request kv is never
    touched.  What it costs: a third message (the terminal fetch) beside
    the lookup and the fetch, and one live request on the server per get
    in flight.  What it changes: an engine's store or finish of request
    kv (p2pkv_engine_store, _finish) does not reach the get, as it reaches
    a one-message get, which is a round of kv; a caller's request named
    "KV#getID" would be the get's.

    The caller's p2pkv_client_finish(kv) and cancel end it ABORTED as they
    end the one-message get: while it looks up at once (its request
    finished), while it fetches as a fetch (abort_fetch, then the fence).
    Ends decided outside a load (no hit to fetch, a cancel or the deadline
    while it looks up, the server gone) are reported from the loop's step,
    not from inside the role's event or the caller's call.  Everything
    here runs with the client's lock held.
*/
#include "client/client_internal.h"
#include "base/clock.h"
#include "base/miss_reason.h"
#include "roles/client_role.h"
#include "wire/protocol.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_SUFFIX_MAX 24             //  "#get" and a fetch id's digits

static s_server_t *
s_server_of(p2pkv_client_t *self, const s_fetch_t *f)
{
    int i = f->get_server;
    return i >= 0 && i < self->nservers ? self->servers[i] : NULL;
}

//  Decided: reported at the end of this step (pk_client_steps_step).
static void
s_decide(p2pkv_client_t *self, s_fetch_t *f, pk_load_status_t status, const char *why)
{
    if (f->get_due >= 0)
        return;
    f->get_due = (int) status;
    f->get_why = why;
    pk_client_kick(self);
}

//  Its request finished on the server's role (the terminal fetch, where
//  its lookup went out; its open fetch cancelled first), and the answer's
//  checksums no fetch took dropped.
static void
s_finish(s_server_t *s, s_fetch_t *f)
{
    if (!s || !s->role)
        return;
    (void) pk_client_role_finish(s->role, f->get_kv);
    pk_client_answers_drop(s, f->get_kv);
}

int
pk_client_steps_start(p2pkv_client_t *self, int server, const char *kv,
                      const p2pkv_key_t *keys, size_t n, const uint32_t *dest, double deadline,
                      p2pkv_key_result_t *results, uint64_t *fetch_id_p)
{
    if (strlen(kv) > PK_MAX_STRING - S_SUFFIX_MAX)
        return -EINVAL;             //  its own request's name would not fit the wire
    s_server_t *s = server >= 0 && server < self->nservers ? self->servers[server] : NULL;
    if (!s || s->state != P2PKV_SERVER_UP || !s->role)
        return -ENOTCONN;
    pk_key_t *k = malloc(n * sizeof *k);
    s_fetch_t *f = calloc(1, sizeof *f);
    char *name = malloc(strlen(kv) + S_SUFFIX_MAX + 1);
    int rc = k && f && name ? pk_client_keys(keys, n, k) : -ENOMEM;
    if (rc == 0) {
        f->get_dest = malloc(n * sizeof *dest);
        f->get_request = strdup(kv);
        if (!f->get_dest || !f->get_request)
            rc = -ENOMEM;
    }
    //  room in the fetches first, so that a get whose lookup went out is
    //  always one the client can report
    if (rc == 0 && pk_keymap_reserve(&self->fetches, pk_keymap_size(&self->fetches) + 1) < 0)
        rc = -ENOMEM;
    if (rc == 0) {
        //  its id from the counter the roles draw from: every id up to it
        //  is one issued (p2pkv_client_cancel's -EALREADY)
        f->id = ++self->fetch_ids;
        snprintf(name, strlen(kv) + S_SUFFIX_MAX + 1, "%s#get%llu", kv,
                 (unsigned long long) f->id);
        f->get_kv = name;
        name = NULL;
        rc = pk_client_role_probe(s->role, f->get_kv, k, n);
    }
    if (rc == 0)
        rc = pk_client_fetch_put(self, f);
    //  what it queued goes (not sent yet: the flush is the next step's),
    //  so that no answer comes for a get that is not
    if (rc && f && f->get_kv)
        (void) pk_client_role_finish(s->role, f->get_kv);
    free(k);
    free(name);
    if (rc) {
        pk_client_fetch_free(f);
        return rc;
    }
    memcpy(f->get_dest, dest, n * sizeof *dest);
    f->status = -EINPROGRESS;
    f->results = results;
    f->get_n = n;
    f->get_server = server;
    f->get_steps = true;
    f->get_due = -1;
    f->get_deadline = pk_clock_monotonic() + (deadline > 0 ? deadline : self->config.load_timeout);
    f->get_next = self->agets;
    if (self->agets)
        self->agets->get_prev = f;
    self->agets = f;
    if (fetch_id_p)
        *fetch_id_p = f->id;
    //  flushed at the next step, as a lookup is
    self->asked = pk_clock_monotonic();
    pk_client_kick(self);
    return 0;
}

void
pk_client_steps_answer(s_server_t *s, s_fetch_t *f, uint64_t round, const pk_key_t *keys,
                       const bool *hits, const uint8_t *reasons, size_t n)
{
    p2pkv_client_t *c = s->client;
    if (f->get_load || f->get_due >= 0 || f->get_answered)
        return;                     //  decided already: a late answer changes nothing
    if (!hits || n != f->get_n) {
        s_decide(c, f, PK_LOAD_FAILED, hits ? "the lookup's answer named other keys"
                                            : "the server went away before it answered the "
                                              "lookup");
        return;
    }
    pk_client_aget_answer(f, hits, reasons, n);
    f->get_round = round;
    size_t nhit = 0;
    for (size_t i = 0; i < n; i++)
        nhit += hits[i];
    if (nhit == 0) {
        s_decide(c, f, PK_LOAD_LANDED, "landed: every key missed");
        return;
    }
    pk_key_t *hk = malloc(nhit * sizeof *hk);
    uint32_t *hd = malloc(nhit * sizeof *hd);
    int rc = hk && hd ? 0 : -ENOMEM;
    for (size_t i = 0, j = 0; rc == 0 && i < n; i++)
        if (hits[i]) {
            hk[j] = keys[i];
            hd[j++] = f->get_dest[i];
        }
    //  what is left of its deadline (the fetch's own: a load aborted at it)
    double left = f->get_deadline - pk_clock_monotonic();
    uint64_t load = 0;
    if (rc == 0)
        rc = pk_client_role_fetch(s->role, f->get_kv, hk, hd, nhit, round,
                                  left > 0.001 ? left : 0.001, &load);
    if (rc == 0) {
        f->get_load = load;
        f->blocks = nhit;
        s->stall_floor = pk_clock_monotonic();
        //  the answer's checksums go with the fetch, checked as they land
        (void) pk_client_fetch_sums(s, f->get_kv, round, hk, hd, nhit, f, true);
    }
    else
        s_decide(c, f, PK_LOAD_FAILED, "its fetch could not start");
    free(hk);
    free(hd);
}

uint64_t
pk_client_steps_public_id(p2pkv_client_t *self, uint64_t id)
{
    for (s_fetch_t *f = self->agets; f; f = f->get_next)
        if (f->get_steps && f->get_load == id)
            return f->id;
    return id;
}

void
pk_client_steps_ended(s_server_t *s, s_fetch_t *f)
{
    s_finish(s, f);
}

int
pk_client_steps_cancel(p2pkv_client_t *self, uint64_t fetch_id)
{
    s_fetch_t *f = self->agets;
    while (f && !(f->get_steps && f->id == fetch_id))
        f = f->get_next;
    if (!f)
        return -ENOENT;
    s_server_t *s = s_server_of(self, f);
    if (f->get_load)
        return s && s->role ? pk_client_role_cancel(s->role, f->get_load) : -EINPROGRESS;
    if (f->get_due >= 0)
        return -EINPROGRESS;
    s_finish(s, f);
    s_decide(self, f, PK_LOAD_ABORTED, "cancelled while looking up");
    return 0;
}

bool
pk_client_steps_finish(p2pkv_client_t *self, s_server_t *s, const char *kv)
{
    bool marked = false;
    for (s_fetch_t *f = self->agets; f; f = f->get_next) {
        if (!f->get_steps || f->get_server != s->index || strcmp(f->get_request, kv) != 0)
            continue;
        if (f->get_load) {
            //  its fetch is cancelled (an abort, then the fence); it ends
            //  as a fetch does, ABORTED
            if (s->role)
                (void) pk_client_role_cancel(s->role, f->get_load);
            continue;
        }
        if (f->get_due >= 0)
            continue;
        s_finish(s, f);
        s_decide(self, f, PK_LOAD_ABORTED, "its request was finished while it looked up");
        marked = true;
    }
    return marked;
}

void
pk_client_steps_gone(s_server_t *s, const char *reason)
{
    p2pkv_client_t *self = s->client;
    for (bool again = true; again; ) {
        again = false;
        for (s_fetch_t *f = self->agets; f; f = f->get_next)
            if (f->get_steps && !f->get_load && f->get_server == s->index) {
                if (f->get_due < 0)
                    s_decide(self, f, PK_LOAD_FAILED, reason);
                //  reason is the caller's: said now, while it lives
                pk_client_load_done(s, f->id, (pk_load_status_t) f->get_due, f->get_why);
                again = true;
                break;
            }
    }
}

//  The first get with something to report now, or NULL.
static s_fetch_t *
s_next_due(p2pkv_client_t *self, double now)
{
    for (s_fetch_t *f = self->agets; f; f = f->get_next) {
        if (!f->get_steps || f->get_load)
            continue;
        s_server_t *s = s_server_of(self, f);
        if (f->get_due < 0 && now >= f->get_deadline) {
            s_finish(s, f);
            s_decide(self, f, PK_LOAD_ABORTED, "its deadline passed while it looked up");
        }
        //  a backstop: a lookup queued and never sent when its session
        //  went has no answer to come (the role's server_gone answers
        //  only the lookups it sent)
        if (f->get_due < 0 && (!s || s->state != P2PKV_SERVER_UP || !s->role))
            s_decide(self, f, PK_LOAD_FAILED, "the server went away before it answered the "
                                              "lookup");
        if (f->get_due >= 0 && s)
            return f;
    }
    return NULL;
}

//  One at a time, from the list's head again after each: a report's
//  callback may start, end or free other gets (a disconnect ends them).
void
pk_client_steps_step(p2pkv_client_t *self)
{
    double now = pk_clock_monotonic();
    for (s_fetch_t *f; (f = s_next_due(self, now)); ) {
        s_server_t *s = s_server_of(self, f);
        pk_client_load_done(s, f->id, (pk_load_status_t) f->get_due, f->get_why);
    }
}

double
pk_client_steps_due(p2pkv_client_t *self)
{
    double due = HUGE_VAL;
    for (s_fetch_t *f = self->agets; f; f = f->get_next) {
        if (!f->get_steps || f->get_load)
            continue;
        double t = f->get_due >= 0 ? 0 : f->get_deadline;
        if (t < due)
            due = t;
    }
    return due;
}

size_t
pk_client_steps_looking(const p2pkv_client_t *self)
{
    size_t n = 0;
    for (const s_fetch_t *f = self->agets; f; f = f->get_next)
        n += f->get_steps && !f->get_load;
    return n;
}
