/*  get.c: p2pkv_client_get, the batched lookup-then-fetch loop, built on
    the public calls; each get waits on its own record in the client's
    list of running gets, which the role's events answer (client.c).  */
#include "client/client_internal.h"
#include "base/clock.h"
#include "base/miss_reason.h"
#include "wire/protocol.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int
s_sync_read(p2pkv_client_t *self, const int *field)
{
    pthread_mutex_lock(&self->lock);
    int v = *field;
    pthread_mutex_unlock(&self->lock);
    return v;
}

static bool
s_lookup_pending(const s_sync_t *sync)
{
    return !sync->answered && !sync->cancelled;
}

static bool
s_fetch_pending(const s_sync_t *sync)
{
    return sync->status == -EINPROGRESS;
}

//  Waits up to timeout for the record to change.  Without the progress
//  thread the get drives the client itself; with it, that thread does and
//  the get sleeps until a callback changed its record: two threads driving
//  one client take turns at its lock and both spin while blocks land
//  (measured 4x slower than one, on 2 busy cores).
static void
s_sync_wait(p2pkv_client_t *self, s_sync_t *sync, bool (*pending)(const s_sync_t *),
            double timeout)
{
    if (!self->config.progress_thread) {
        p2pkv_client_poll(self, timeout);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long) (timeout * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(&self->lock);
    if (pending(sync))
        pthread_cond_timedwait(&self->synced, &self->lock, &ts);
    pthread_mutex_unlock(&self->lock);
}

//  A miss's reason as the public API names it (p2pkv.h): the same order,
//  after P2PKV_MISS_NO_HOLDER, which is the client's own.
_Static_assert(P2PKV_MISS_ABSENT == PK_MISS_ABSENT + 1
               && P2PKV_MISS_DRAINING == PK_MISS_DRAINING + 1
               && PK_MISS_DRAINING + 1 == PK_MISS_COUNT, "p2pkv_miss_reason_t follows pk's");
uint8_t
pk_client_public_reason(uint8_t reason)
{
    return reason == PK_MISS_UNKNOWN || reason >= PK_MISS_COUNT ? P2PKV_MISS_UNKNOWN
                                                                : (uint8_t) (reason + 1);
}

const char *
p2pkv_miss_reason_name(int reason)
{
    if (reason == P2PKV_MISS_NO_HOLDER)
        return "no_holder";
    return pk_miss_reason_name(reason > P2PKV_MISS_NO_HOLDER ? (pk_miss_reason_t) (reason - 1)
                                                             : PK_MISS_UNKNOWN);
}

//  What a get carries from batch to batch.
typedef struct {
    int server;
    const char *kv;
    const p2pkv_key_t *keys;
    const uint32_t *dest;
    size_t n;
    bool fetch;
    double timeout;
    p2pkv_key_result_t *res;        //  the caller's, n
    bool *settled;                  //  LANDED, CORRUPT, or a miss that asking again
                                    //  at once would not change: not asked again
    p2pkv_key_t *ask;               //  scratch, n each
    size_t *pos;
    uint32_t *to;
} s_get_t;

static int s_get_settle(p2pkv_client_t *self, s_get_t *g, s_sync_t *sync, size_t nhit,
                        int rc);

//  A miss the server explained as one that holds for now (it does not
//  hold the key, evicted it, or is draining) is not asked again in this
//  get: a batch after a batch that landed something asks only what may
//  change at once (the pin quota freed, a write landed, an older server's
//  miss without a reason), so a get whose keys were all answered costs
//  one round trip, not two.
static void
s_get_missed(s_get_t *g, size_t k, uint8_t reason)
{
    g->res[k].reason = pk_client_public_reason(reason);
    g->settled[k] = g->res[k].reason == P2PKV_MISS_ABSENT
                    || g->res[k].reason == P2PKV_MISS_EVICTED
                    || g->res[k].reason == P2PKV_MISS_DRAINING;
}

//  One batch in one message (the server's capability get): the keys and
//  their blocks go out together, and the one answer says which hit, after
//  their blocks landed.  Returns the hits, *nhit_p of them, compacted in
//  g->ask/pos/to as the two steps leave them, and 0 or a negative errno
//  with err; -ENOTUNIQ (nothing sent) when the batch repeats a key or a
//  block, which a get may not.
static int
s_get_one(p2pkv_client_t *self, s_get_t *g, s_sync_t *sync, size_t nask, size_t *nhit_p,
          char *err)
{
    *nhit_p = 0;
    for (size_t a = 0; a < nask; a++)
        g->to[a] = g->dest[g->pos[a]];
    memset(sync->verdict, PK_VERDICT_NONE, nask);
    pthread_mutex_lock(&self->lock);
    sync->get_dest = g->to;
    pthread_mutex_unlock(&self->lock);
    //  the id is written under the client's lock, before the answer can
    //  come (a progress thread reads it to find this record)
    int rc = pk_client_get_one(self, g->server, sync->kv, g->ask, g->to, nask, g->timeout,
                               &sync->fetch_id);
    if (rc) {
        pthread_mutex_lock(&self->lock);
        sync->get_dest = NULL;
        pthread_mutex_unlock(&self->lock);
    }
    if (rc == -ENOTUNIQ)
        return rc;
    if (rc)
        return pk_err(err, rc, "the get could not start: %s", strerror(-rc));
    //  cancelled while the get was being made: cancel it now; its end
    //  always comes (at the fence, or when the server is cut off)
    if (s_sync_read(self, &sync->cancelled))
        (void) p2pkv_client_cancel(self, sync->fetch_id);
    while (s_sync_read(self, &sync->status) == -EINPROGRESS)
        s_sync_wait(self, sync, s_fetch_pending, 0.05);
    pthread_mutex_lock(&self->lock);
    sync->get_dest = NULL;
    pthread_mutex_unlock(&self->lock);
    if (s_sync_read(self, &sync->cancelled))
        rc = pk_err(err, -ECANCELED, "cancelled: %s", sync->reason);
    else if (sync->status == P2PKV_ABORTED)
        rc = pk_err(err, -ETIMEDOUT, "no answer to the get within %.0f s", g->timeout);
    else if (sync->status != P2PKV_LANDED)
        rc = pk_err(err, -EIO, "the fetch failed: %s", sync->reason);
    //  which keys hit, where the answer came (it ends a landed get, and
    //  may come with a failed one)
    size_t nhit = 0;
    for (size_t a = 0; sync->answered == 1 && a < nask; a++)
        if (!sync->hits[a])
            s_get_missed(g, g->pos[a], sync->reasons[a]);
        else {
            g->res[g->pos[a]].holder = g->server;
            g->ask[nhit] = g->ask[a];
            g->pos[nhit] = g->pos[a];
            g->to[nhit++] = g->to[a];
        }
    *nhit_p = nhit;
    return rc;
}

//  One batch: look up what has not landed, fetch the hits, finish the
//  batch's request (in one message where the server can).  Returns the
//  keys it got (0: nothing more to get), or a negative errno with err.
static int
s_get_batch(p2pkv_client_t *self, s_get_t *g, s_sync_t *sync, int batch, char *err)
{
    size_t nask = 0;
    for (size_t i = 0; i < g->n; i++)
        if (!g->settled[i]) {
            g->pos[nask] = i;
            g->ask[nask++] = g->keys[i];
        }
    if (nask == 0)
        return 0;               //  every key landed or failed its check
    pthread_mutex_lock(&self->lock);
    snprintf(sync->kv, sizeof sync->kv, "%s-%d", g->kv, batch);
    sync->answered = 0;
    sync->status = -EINPROGRESS;
    sync->fetch_id = 0;
    bool cancelled = sync->cancelled;
    pthread_mutex_unlock(&self->lock);
    if (cancelled)
        return pk_err(err, -ECANCELED, "cancelled");
    size_t nhit = 0;
    int rc = -ENOTUNIQ;
    if (g->fetch && pk_client_can_get(self, g->server))
        rc = s_get_one(self, g, sync, nask, &nhit, err);
    if (rc != -ENOTUNIQ) {
        p2pkv_client_finish(self, g->server, sync->kv);
        return s_get_settle(self, g, sync, nhit, rc);
    }
    rc = p2pkv_client_lookup(self, g->server, sync->kv, g->ask, nask);
    if (rc)
        return rc;
    double deadline = pk_clock_monotonic() + g->timeout;
    while (!s_sync_read(self, &sync->answered) && pk_clock_monotonic() < deadline
           && !s_sync_read(self, &sync->cancelled)
           && p2pkv_client_server_state(self, g->server, NULL) == P2PKV_SERVER_UP)
        s_sync_wait(self, sync, s_lookup_pending, 0.05);
    if (s_sync_read(self, &sync->cancelled)) {
        p2pkv_client_finish(self, g->server, sync->kv);
        return pk_err(err, -ECANCELED, "cancelled");
    }
    if (s_sync_read(self, &sync->answered) != 1) {
        char why[256] = "";
        p2pkv_client_server_state(self, g->server, why);
        if (*why)
            return pk_err(err, -ENOTCONN, "no answer to the lookup: %s", why);
        return pk_err(err, -ETIMEDOUT, "no answer to the lookup within %.0f s", g->timeout);
    }
    for (size_t a = 0; a < nask; a++)
        if (!sync->hits[a])
            s_get_missed(g, g->pos[a], sync->reasons[a]);
        else {
            g->res[g->pos[a]].holder = g->server;
            g->ask[nhit] = g->ask[a];
            g->pos[nhit] = g->pos[a];
            g->to[nhit++] = g->dest[g->pos[a]];
        }
    if (nhit && g->fetch) {
        memset(sync->verdict, PK_VERDICT_NONE, nhit);
        rc = p2pkv_client_fetch(self, g->server, sync->kv, g->ask, g->to, nhit, sync->round,
                                g->timeout, &sync->fetch_id);
        //  cancelled while the fetch was being made: cancel it now.  Its
        //  end always comes (a cancelled fetch ends at the fence, or when
        //  the server is cut off), so this wait is bounded.
        if (rc == 0 && s_sync_read(self, &sync->cancelled))
            (void) p2pkv_client_cancel(self, sync->fetch_id);
        while (rc == 0 && s_sync_read(self, &sync->status) == -EINPROGRESS)
            s_sync_wait(self, sync, s_fetch_pending, 0.05);
        if (rc == 0 && s_sync_read(self, &sync->cancelled))
            rc = pk_err(err, -ECANCELED, "cancelled: %s", sync->reason);
        else if (rc == 0 && sync->status != P2PKV_LANDED)
            rc = pk_err(err, -EIO, "the fetch failed: %s", sync->reason);
    }
    p2pkv_client_finish(self, g->server, sync->kv);
    return s_get_settle(self, g, sync, nhit, rc);
}

//  The batch's hits (the first nhit of g->pos) after their fetch ended
//  with rc: what landed, by the end-to-end check's verdicts (checks.c); a
//  block that differs from its checksum is CORRUPT, asked no more in this
//  get.  Returns the keys that landed, or rc.
static int
s_get_settle(p2pkv_client_t *self, s_get_t *g, s_sync_t *sync, size_t nhit, int rc)
{
    (void) self;
    size_t landed = 0;
    for (size_t a = 0; a < nhit; a++) {
        p2pkv_key_result_t *r = &g->res[g->pos[a]];
        uint8_t v = g->fetch && !rc ? sync->verdict[a] : PK_VERDICT_NONE;
        r->status = rc ? P2PKV_KEY_FAILED
                    : v == PK_VERDICT_CORRUPT ? P2PKV_KEY_CORRUPT : P2PKV_KEY_LANDED;
        r->verified = v != PK_VERDICT_NONE;
        r->checksum = r->verified ? sync->sums[a] : 0;
        g->settled[g->pos[a]] = !rc;
        landed += r->status == P2PKV_KEY_LANDED;
    }
    return rc ? rc : (int) landed;
}

//  Each get waits on its own record: gets of other requests, or on other
//  servers, run at once without taking each other's answers.
static int
s_sync_link(p2pkv_client_t *self, s_sync_t *sync, char *err)
{
    pthread_mutex_lock(&self->lock);
    bool busy = false;
    for (s_sync_t *o = self->syncs; o; o = o->next)
        busy |= o->server == sync->server && strcmp(o->request, sync->request) == 0;
    if (!busy) {
        sync->next = self->syncs;
        if (self->syncs)
            self->syncs->prev = sync;
        self->syncs = sync;
    }
    pthread_mutex_unlock(&self->lock);
    if (busy)
        return pk_err(err, -EBUSY, "a get of request %s on this server runs already",
                      sync->request);
    return 0;
}

static void
s_sync_unlink(p2pkv_client_t *self, s_sync_t *sync)
{
    pthread_mutex_lock(&self->lock);
    if (sync->prev)
        sync->prev->next = sync->next;
    else
        self->syncs = sync->next;
    if (sync->next)
        sync->next->prev = sync->prev;
    pthread_mutex_unlock(&self->lock);
}

int
p2pkv_client_get_results(p2pkv_client_t *self, int server, const char *kv,
                         const p2pkv_key_t *keys, const uint32_t *dest, size_t n, bool fetch,
                         double timeout, p2pkv_key_result_t *results,
                         p2pkv_progress_fn *progress, void *progress_arg, char *err)
{
    if (n == 0 || n > PK_MAX_LIST || !results)
        return -EINVAL;
    //  its batches are named kv-0, kv-1...: those of a kv the wire carries
    if (!pk_client_kv_ok(kv) || strlen(kv) > PK_ERRLEN - 16)
        return pk_err(err, -EINVAL, "kv: expected 1..%d bytes of UTF-8", PK_ERRLEN - 16);
    for (size_t i = 0; i < n; i++)
        results[i] = (p2pkv_key_result_t) { .status = P2PKV_KEY_MISSING, .holder = -1 };
    if (server == P2PKV_ANY_SERVER)
        return pk_client_get_any(self, kv, keys, dest, n, fetch, timeout, results, progress,
                                 progress_arg, err);
    if (err)
        *err = '\0';
    s_get_t g = { server, kv, keys, dest, n, fetch, timeout, results, calloc(n, sizeof (bool)),
                  malloc(n * sizeof *g.ask), malloc(n * sizeof *g.pos),
                  malloc(n * sizeof *g.to) };
    s_sync_t sync = { .server = server, .request = kv, .hits = malloc(n * sizeof *sync.hits),
                      .reasons = malloc(n), .verdict = malloc(n),
                      .sums = malloc(n * sizeof *sync.sums) };
    int rc = g.settled && g.ask && g.pos && g.to && sync.hits && sync.reasons && sync.verdict
             && sync.sums ? 0 : -ENOMEM;
    bool linked = rc == 0 && (rc = s_sync_link(self, &sync, err)) == 0;
    //  A server pins at most its quota of blocks per session; keys beyond
    //  it answer as misses.  So: look up what is left, fetch the hits
    //  (their pins end with the fetch), and ask again while that makes
    //  progress, for the misses that may change (s_get_missed).
    size_t total = 0;
    for (int batch = 0; rc == 0 && total < n; batch++) {
        int got = s_get_batch(self, &g, &sync, batch, err);
        if (got < 0)
            rc = got;
        if (got <= 0)
            break;
        total += (size_t) got;
        if (progress)
            progress(progress_arg, total, n);
        if (!fetch)
            break;      //  a lookup asks once
    }
    //  keys the call ended before deciding were not shown to be misses
    for (size_t i = 0; rc && i < n; i++)
        if (results[i].status == P2PKV_KEY_MISSING)
            results[i].status = P2PKV_KEY_FAILED;
    if (linked)
        s_sync_unlink(self, &sync);
    free(g.settled);
    free(g.ask);
    free(g.pos);
    free(g.to);
    free(sync.hits);
    free(sync.reasons);
    free(sync.verdict);
    free(sync.sums);
    if (rc && err && !*err)
        (void) pk_err(err, 0, "%s", strerror(-rc));
    return rc ? rc : (int) total;
}

int
p2pkv_client_get(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
                 const uint32_t *dest, size_t n, bool fetch, double timeout, bool *landed,
                 p2pkv_progress_fn *progress, void *progress_arg, char *err)
{
    if (n == 0 || n > PK_MAX_LIST)
        return -EINVAL;
    memset(landed, 0, n * sizeof *landed);
    p2pkv_key_result_t *res = malloc(n * sizeof *res);
    if (!res)
        return pk_err(err, -ENOMEM, "out of memory");
    int rc = p2pkv_client_get_results(self, server, kv, keys, dest, n, fetch, timeout, res,
                                      progress, progress_arg, err);
    for (size_t i = 0; i < n; i++)
        landed[i] = res[i].status == P2PKV_KEY_LANDED;
    free(res);
    return rc;
}

void
p2pkv_client_checks(p2pkv_client_t *self, p2pkv_check_stats_t *out)
{
    pthread_mutex_lock(&self->lock);
    *out = (p2pkv_check_stats_t) { self->checked, self->corrupt, self->unchecked,
                                   self->hostile };
    pthread_mutex_unlock(&self->lock);
}
