/*  get_any.c: p2pkv_client_get of P2PKV_ANY_SERVER: fetch by key from any
    holder the directory names, with failover inside the call.

    Each attempt locates the keys still missing (one round trip), gives
    each to one of its live holders (the same host first, then the one
    given the fewest keys so far), and runs one p2pkv_client_get per
    holder, connecting as needed.  What a holder did not deliver is
    marked tried for that key; a holder that failed (dead, refusing, no
    answer) is not asked again in this call; one that answered a miss
    evicted the key since it was listed, and its entry goes.  The next
    attempt asks another holder for what is left, until every key landed
    or none has an untried holder.  Holders are asked one after the
    other: simple, and the bytes of a holder's get already move in
    parallel on the fabric; a concurrent fan-out would add threads for
    little on the few holders a key has.

    The timeout bounds each step (a connect, an answer), not the call:
    with one deadline for the call, a hung holder asked first would use
    it up and the live holder after it would get nothing, which is the
    failover this file exists for.  A dead holder costs one timeout.
*/
#include "client/client_internal.h"
#include "cluster/dir_entry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_MAX_HOLDERS 64            //  one bit each in a key's masks

typedef struct {
    char peer_id[PK_DIR_MAX_ID + 1];
    char endpoint[PK_DIR_MAX_ENDPOINT + 1];
    bool same_host;
    int server;                     //  the client's index once connected, else -1
    bool failed;                    //  given up on in this call
    size_t load;                    //  keys given to it in this call
} s_holder_t;

typedef struct {
    p2pkv_client_t *client;
    const char *kv;
    const p2pkv_key_t *keys;
    const uint32_t *dest;
    size_t n;
    bool fetch;
    double timeout;
    p2pkv_key_result_t *res;        //  the caller's, n
    bool *landed;                   //  per key: LANDED (a corrupt one is asked again
                                    //  of another holder)
    char host[256];                 //  our host name, for records without host_id
    s_holder_t *holders;            //  every holder this call heard of
    size_t nholders;
    uint64_t *can, *tried;          //  per key: holders listed, holders that did not deliver
    int *choice;                    //  per key: the holder asked this attempt, or -1
    size_t *pos;                    //  a locate's or a group's keys: their index in keys[]
    p2pkv_key_t *ask;
    uint32_t *to;
    p2pkv_key_result_t *got;        //  a holder's get's results
    size_t total;                   //  keys landed
} s_any_t;

static int
s_slot(s_any_t *a, const p2pkv_holder_t *h)
{
    for (size_t s = 0; s < a->nholders; s++)
        if (strcmp(a->holders[s].peer_id, h->peer_id) == 0)
            return (int) s;
    if (a->nholders == S_MAX_HOLDERS || strlen(h->peer_id) > PK_DIR_MAX_ID
        || strlen(h->endpoint) > PK_DIR_MAX_ENDPOINT)
        return -1;
    s_holder_t *slot = &a->holders[a->nholders];
    //  the same host identity as ours (boot and namespaces, base/host_id.h);
    //  a record older than it has only a host name to go by
    bool same = h->host_id && *h->host_id ? strcmp(h->host_id, a->client->host_id) == 0
                                          : strcmp(h->host, a->host) == 0;
    *slot = (s_holder_t) { .server = -1, .same_host = same };
    strcpy(slot->peer_id, h->peer_id);
    strcpy(slot->endpoint, h->endpoint);
    return (int) a->nholders++;
}

//  The directory's answer for one key: which holders may be asked.  A
//  holder of another block length would refuse the handshake: skipped.
static void
s_on_locate(void *arg, size_t i, const p2pkv_holder_t *holders, size_t nh)
{
    s_any_t *a = arg;
    size_t k = a->pos[i];
    a->can[k] = 0;
    for (size_t h = 0; h < nh; h++) {
        int s = holders[h].block_len == a->client->block_len ? s_slot(a, &holders[h]) : -1;
        if (s >= 0)
            a->can[k] |= UINT64_C(1) << s;
    }
}

//  Locates what is missing, then chooses a holder for each: how many got
//  one (0: nothing more to try), or a negative errno with err.
static int
s_plan(s_any_t *a, char *err)
{
    size_t nask = 0;
    for (size_t k = 0; k < a->n; k++)
        if (!a->landed[k]) {
            a->pos[nask] = k;
            a->ask[nask++] = a->keys[k];
        }
    if (nask == 0)
        return 0;
    int rc = p2pkv_client_locate(a->client, a->ask, nask, s_on_locate, a, err);
    if (rc)
        return rc;
    int planned = 0;
    for (size_t j = 0; j < nask; j++) {
        size_t k = a->pos[j];
        uint64_t c = a->can[k] & ~a->tried[k];
        int best = -1;
        for (int s = 0; s < (int) a->nholders; s++) {
            s_holder_t *h = &a->holders[s];
            if (!(c >> s & 1) || h->failed)
                continue;
            if (best < 0 || (h->same_host && !a->holders[best].same_host)
                || (h->same_host == a->holders[best].same_host
                    && h->load < a->holders[best].load))
                best = s;
        }
        a->choice[k] = best;
        if (best >= 0) {
            a->holders[best].load++;
            planned++;
        }
    }
    return planned;
}

//  The holder's session: an index the client had (a connect to the same
//  endpoint returns it), unless that one is DOWN for good (no_reconnect):
//  then a new session.  The index, or a negative errno with err.
static int
s_connect(s_any_t *a, s_holder_t *h, char *err)
{
    int rc = p2pkv_client_connect(a->client, h->endpoint, a->timeout, err);
    if (rc >= 0 && a->client->config.no_reconnect
        && p2pkv_client_server_state(a->client, rc, NULL) == P2PKV_SERVER_DOWN) {
        p2pkv_client_disconnect(a->client, rc);
        rc = p2pkv_client_connect(a->client, h->endpoint, a->timeout, err);
    }
    if (rc >= 0)
        h->server = rc;
    return rc;
}

//  The keys chosen for holder s, asked of it with one get; what did not
//  arrive is marked tried (and, for a holder that answered, its entry
//  corrected).  0, or the get's error with the holder given up.
static int
s_run_holder(s_any_t *a, int s, int attempt, char *err)
{
    s_holder_t *h = &a->holders[s];
    size_t m = 0;
    for (size_t k = 0; k < a->n; k++)
        if (!a->landed[k] && a->choice[k] == s) {
            a->pos[m] = k;
            a->ask[m] = a->keys[k];
            a->to[m++] = a->dest[k];
        }
    if (m == 0)
        return 0;
    //  A session made earlier in this call may have been lost since (a
    //  server restarted, or one that cut us off as silent while we
    //  waited on a hung holder: without a progress thread nothing
    //  answers its keepalives then): learn its state, and connect again
    //  (s_connect) rather than judge the holder by a session it did not end.
    if (h->server >= 0 && !a->client->config.progress_thread)
        (void) p2pkv_client_poll(a->client, 0);
    int rc = h->server >= 0
             && p2pkv_client_server_state(a->client, h->server, NULL) == P2PKV_SERVER_UP
             ? 0 : s_connect(a, h, err);
    char kv[PK_ERRLEN];
    snprintf(kv, sizeof kv, "%s-a%d-s%d", a->kv, attempt, s);
    for (size_t j = 0; j < m; j++)
        a->got[j] = (p2pkv_key_result_t) { .status = P2PKV_KEY_FAILED, .holder = -1 };
    if (rc >= 0)
        rc = p2pkv_client_get_results(a->client, h->server, kv, a->ask, a->to, m, a->fetch,
                                      a->timeout, a->got, NULL, NULL, err);
    //  A holder that went away during the get failed, whatever it said
    //  before: its misses are no evidence against its entries.
    if (rc >= 0 && p2pkv_client_server_state(a->client, h->server, NULL) != P2PKV_SERVER_UP)
        rc = pk_err(err, -ENOTCONN, "the holder went away during the get");
    for (size_t j = 0; j < m; j++) {
        size_t k = a->pos[j];
        p2pkv_key_result_t *g = &a->got[j];
        if (g->status == P2PKV_KEY_LANDED) {
            a->res[k] = *g;
            a->landed[k] = true;
            a->total++;
            continue;
        }
        a->tried[k] |= UINT64_C(1) << s;
        //  a corrupt block is asked of another holder, and stays the
        //  key's result unless one delivers it whole
        if (g->status == P2PKV_KEY_CORRUPT
            || (g->status == P2PKV_KEY_FAILED && a->res[k].status != P2PKV_KEY_CORRUPT))
            a->res[k] = *g;
        //  it answered, and had no such key: the entry is stale.  Its
        //  reason (the last holder's that gave one) goes with the key.
        if (rc >= 0 && g->status == P2PKV_KEY_MISSING)
            pk_locator_forget(a->client->locator, &a->keys[k], h->peer_id);
        if (g->status == P2PKV_KEY_MISSING && g->reason != P2PKV_MISS_UNKNOWN)
            a->res[k].reason = g->reason;
    }
    if (rc < 0) {
        h->failed = true;
        pk_locator_count_failover(a->client->locator);
    }
    return rc < 0 ? rc : 0;
}

static int
s_any_alloc(s_any_t *a)
{
    size_t n = a->n;
    a->holders = malloc(S_MAX_HOLDERS * sizeof *a->holders);
    a->can = calloc(n, sizeof *a->can);
    a->tried = calloc(n, sizeof *a->tried);
    a->choice = calloc(n, sizeof *a->choice);
    a->pos = calloc(n, sizeof *a->pos);
    a->ask = calloc(n, sizeof *a->ask);
    a->to = calloc(n, sizeof *a->to);
    a->got = calloc(n, sizeof *a->got);
    a->landed = calloc(n, sizeof *a->landed);
    return a->holders && a->can && a->tried && a->choice && a->pos && a->ask && a->to && a->got
           && a->landed ? 0 : -ENOMEM;
}

static void
s_any_free(s_any_t *a)
{
    free(a->holders);
    free(a->can);
    free(a->tried);
    free(a->choice);
    free(a->pos);
    free(a->ask);
    free(a->to);
    free(a->got);
    free(a->landed);
}

int
pk_client_get_any(p2pkv_client_t *self, const char *kv, const p2pkv_key_t *keys,
                  const uint32_t *dest, size_t n, bool fetch, double timeout,
                  p2pkv_key_result_t *res, p2pkv_progress_fn *progress, void *progress_arg,
                  char *err)
{
    if (err)
        *err = '\0';
    if (!self->locator)
        return pk_err(err, -EINVAL, "no server and no directory: set config.directory");
    if (n == 0 || n > PK_MAX_LIST || strlen(kv) > PK_ERRLEN - 48)
        return pk_err(err, -EINVAL, "get: 1..%d keys and a request name", PK_MAX_LIST);
    s_any_t a = { .client = self, .kv = kv, .keys = keys, .dest = dest, .n = n,
                  .fetch = fetch, .timeout = timeout, .res = res };
    if (gethostname(a.host, sizeof a.host - 1) != 0)
        a.host[0] = '\0';
    int rc = s_any_alloc(&a);
    //  why: a step's own error; first: the first holder that failed, said
    //  at the end (a later locate would clear err)
    char why[PK_ERRLEN] = "", first[PK_ERRLEN] = "";
    //  Each attempt marks tried what it did not get, so a key is asked of
    //  each of its (at most 64) holders once: attempts are bounded.
    for (int attempt = 0; rc == 0 && attempt <= S_MAX_HOLDERS; attempt++) {
        int planned = s_plan(&a, why);
        if (planned <= 0) {
            rc = planned;
            if (rc < 0 && err)
                snprintf(err, PK_ERRLEN, "%s", why);
            break;
        }
        for (int s = 0; s < (int) a.nholders; s++) {
            if (s_run_holder(&a, s, attempt, why) < 0 && !*first)
                snprintf(first, sizeof first, "holder %.60s: %.180s", a.holders[s].peer_id, why);
            if (progress)
                progress(progress_arg, a.total, n);
        }
    }
    if (err && !*err && *first)
        snprintf(err, PK_ERRLEN, "%s", first);
    //  what no holder delivered: missing (no live holder listed it, or
    //  every one asked answered miss), or failed when the call did
    for (size_t k = 0; a.tried && k < n; k++)
        if (res[k].status == P2PKV_KEY_MISSING) {
            res[k].status = rc < 0 ? P2PKV_KEY_FAILED : P2PKV_KEY_MISSING;
            res[k].reason = a.tried[k] ? res[k].reason : P2PKV_MISS_NO_HOLDER;
        }
    s_any_free(&a);
    if (rc == -ENOMEM && err && !*err)
        (void) pk_err(err, rc, "out of memory");
    return rc < 0 ? rc : (int) a.total;
}
