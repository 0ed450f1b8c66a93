/*  get_async.c: p2pkv_client_get_async, a get that does not wait.

    One get message (protocol.md section 3, capability get), made like a
    fetch: it returns a fetch id at once, its answer fills the caller's
    results (which keys hit, each miss's reason), and its end comes as a
    fetch's, to on_fetch or p2pkv_client_fetch_status, after each hit's
    block was checked, with every key's result final.  An engine that
    drives the client from its own loop (p2pkv_client_fd) gets the one
    round trip without a thread parked in p2pkv_client_get.  Against a
    server without get, get_steps.c takes the two steps for it, with the
    same end and results.

    The get's record is its fetch's (client.c, s_get_start), on a list of
    the gets in flight: the answer is matched by server, request and
    round, which the role names (a list: the answer walks it once, and an
    engine keeps a few gets in flight, not thousands).  client.c calls
    in here from its role's events, with the client's lock held.
*/
#include "client/client_internal.h"
#include "base/miss_reason.h"

#include <errno.h>
#include <string.h>

s_fetch_t *
pk_client_aget_find(p2pkv_client_t *self, int server, const char *kv, uint64_t round)
{
    //  a two-step get's request is its own, whatever round its lookup drew
    for (s_fetch_t *f = self->agets; f; f = f->get_next)
        if (f->get_server == server && (f->get_steps || f->get_round == round)
            && strcmp(f->get_kv, kv) == 0)
            return f;
    return NULL;
}

//  Hits wait for their blocks (FAILED with their holder until the end says
//  they landed); misses are final, with the server's reason.
void
pk_client_aget_answer(s_fetch_t *f, const bool *hits, const uint8_t *reasons, size_t n)
{
    if (!hits || n != f->get_n || f->get_answered)
        return;     //  the server went away first: the end says FAILED
    f->get_answered = true;
    for (size_t i = 0; i < n; i++)
        f->results[i] = hits[i]
                        ? (p2pkv_key_result_t) { .status = P2PKV_KEY_FAILED,
                                                 .holder = f->get_server }
                        : (p2pkv_key_result_t) {
                              .status = P2PKV_KEY_MISSING, .holder = -1,
                              .reason = pk_client_public_reason(reasons ? reasons[i]
                                                                        : PK_MISS_UNKNOWN) };
}

//  The hits' verdicts are in the order of their keys (client.c, the
//  answer's hits, compacted): the j-th hit has verdict[j].
void
pk_client_aget_end(p2pkv_client_t *self, s_fetch_t *f, p2pkv_status_t status)
{
    size_t j = 0;
    for (size_t i = 0; i < f->get_n; i++) {
        p2pkv_key_result_t *r = &f->results[i];
        if (!f->get_answered) {
            *r = (p2pkv_key_result_t) { .status = P2PKV_KEY_FAILED, .holder = -1 };
            continue;
        }
        if (r->status == P2PKV_KEY_MISSING)
            continue;
        uint8_t v = f->verdict && j < f->n ? f->verdict[j] : PK_VERDICT_NONE;
        uint64_t sum = f->sums && j < f->n ? f->sums[j] : 0;
        j++;
        if (status != P2PKV_LANDED)
            continue;               //  FAILED, from its holder
        r->status = v == PK_VERDICT_CORRUPT ? P2PKV_KEY_CORRUPT : P2PKV_KEY_LANDED;
        r->verified = v == PK_VERDICT_CORRUPT || v == PK_VERDICT_OK;
        r->checksum = r->verified ? sum : 0;
    }
    if (f->get_prev)
        f->get_prev->get_next = f->get_next;
    else if (self->agets == f)
        self->agets = f->get_next;
    if (f->get_next)
        f->get_next->get_prev = f->get_prev;
    f->get_prev = f->get_next = NULL;
}

int
p2pkv_client_get_async(p2pkv_client_t *self, int server, const char *kv,
                       const p2pkv_key_t *keys, const uint32_t *dest, size_t n, double deadline,
                       p2pkv_key_result_t *results, uint64_t *fetch_id_p)
{
    //  P2PKV_ANY_SERVER locates its keys in Redis first, which blocks:
    //  that get is p2pkv_client_get's
    if (!self || !pk_client_kv_ok(kv) || !keys || !dest || !results || server < 0 || n == 0
        || n > PK_MAX_LIST)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        results[i] = (p2pkv_key_result_t) { .status = P2PKV_KEY_FAILED, .holder = -1 };
    int rc = pk_client_get_async_one(self, server, kv, keys, dest, n, deadline, results,
                                     fetch_id_p);
    //  the server lacks get (nothing was sent, the input passed its
    //  checks): the two steps (get_steps.c), which any server takes
    if (rc == -EOPNOTSUPP) {
        pthread_mutex_lock(&self->lock);
        rc = pk_client_steps_start(self, server, kv, keys, n, dest, deadline, results,
                                   fetch_id_p);
        pthread_mutex_unlock(&self->lock);
    }
    return rc == -ENOTUNIQ ? -EINVAL : rc;
}
