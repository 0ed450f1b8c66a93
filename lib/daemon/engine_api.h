/*  engine_api.h: the engine's JSON API on the local socket (private to
    lib/daemon).

    Each request is one JSON object {"cmd": NAME, ...} answered with one
    JSON object; events (store_result, pull_result) follow unasked.  The
    class owns what the commands keep between requests: the stores held
    for consumers not connected yet (held.h), the engine that made each
    prefill store job (for its store_result), this start's instance.  What
    it needs of the rest of the daemon (a session by consumer, the
    puller, the node's part of stats, the local socket) it asks through
    pk_engine_api_ops_t, so it runs, and is tested, with a store alone.
    The main thread's.
*/
#ifndef PK_ENGINE_API_H_INCLUDED
#define PK_ENGINE_API_H_INCLUDED

#include "daemon/held.h"
#include "daemon/puller.h"
#include "daemon/server_config.h"
#include "store/store.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    /*  Sends msg (taken) to the engine connection rid on the local socket:
        an answer or an event.  */
    void (*send)(void *arg, const void *rid, size_t rlen, json_t *msg);
    /*  The namespace of consumer's session into *ns: 0, or -ENOENT when it
        has none (or one that ended).  */
    int (*session)(void *arg, const char *consumer, unsigned *ns);
    /*  Hands h to consumer's session without waiting: 0, or a negative
        errno (-EAGAIN: its pipe is full) with h still the caller's.  */
    int (*deliver)(void *arg, const char *consumer, pk_held_t *h);
    /*  Starts a pull (its PULLED comes back to pk_engine_api_pulled): 0,
        or a negative errno (-EAGAIN: too many queued) with p still the
        caller's.  */
    int (*pull)(void *arg, pk_pull_t *p);
    /*  Adds the node's members of a stats answer (fabrics, sessions,
        metrics) to answer.  */
    void (*stats)(void *arg, json_t *answer);
} pk_engine_api_ops_t;

typedef struct _pk_engine_api_t pk_engine_api_t;

/*  The API over store, for a server whose peers reach it at endpoint
    (copied); ops and everything given are borrowed.  A new random
    instance identity.  NULL: out of memory.  */
pk_engine_api_t *pk_engine_api_new(const pk_server_config_t *config, pk_store_t *store,
                                   const char *endpoint, const pk_engine_api_ops_t *ops,
                                   void *arg);

/*  Frees the held stores (their jobs are the store's, gone with it) and
    the engine's jobs.  */
void pk_engine_api_destroy(pk_engine_api_t **self_p);

/*  A message on the local socket (rid, body; taken): answered by send.  */
void pk_engine_api_request(pk_engine_api_t *self, zmsg_t *msg);

/*  The answer to one request body from engine connection rid: what
    pk_engine_api_request sends back.  */
json_t *pk_engine_api_answer(pk_engine_api_t *self, const void *body, size_t len,
                             const void *rid, size_t rlen);

/*  A job ended: its store_result goes to the engine when it was a prefill
    store of its (a lookup's pin job: nobody to tell).  */
void pk_engine_api_job(pk_engine_api_t *self, uint64_t job, bool success);

/*  A consumer's session started in namespace ns: its held stores go to
    it (deliver), or fail.  */
void pk_engine_api_connected(pk_engine_api_t *self, const char *consumer, unsigned ns);

/*  Held stores whose store-job timeout passed fail (unpinned, the engine
    told).  */
void pk_engine_api_expire(pk_engine_api_t *self);

/*  A pull the puller ended (taken): what landed is committed, the rest
    released, the engine told (pull_result).  */
void pk_engine_api_pulled(pk_engine_api_t *self, pk_pull_t *p);

/*  The server drains (SIGTERM): from now on reserve, put and pull are
    refused ("the server is draining"); every other command runs.  */
void pk_engine_api_drain(pk_engine_api_t *self);

/*  For checks: the held stores, and the prefill store jobs whose result
    the engine waits for.  */
const pk_held_list_t *pk_engine_api_held(const pk_engine_api_t *self);
size_t pk_engine_api_jobs(const pk_engine_api_t *self);

#endif
