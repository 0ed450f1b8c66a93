/*  engine_api.c: the engine's JSON API on the local socket.

    Each request is one JSON object {"cmd": NAME, ...} answered with one
    JSON object ({"ok": true, ...} or {"ok": false, "error": TEXT}); the
    commands are a table (s_commands) of NAME and handler.  Events follow
    unasked: store_result (a prefill job ended) and pull_result (a pull
    ended, puller.c).  A prefill store or finish for a consumer without a
    session is held until its session starts or the store-job timeout.

    Every request may name "instance", what describe said (an engine
    handle names it in every request after its describe): a request
    naming another start's instance is refused before it runs (s_stale).

    reserve, commit, drop, put, store and pull take an optional
    "namespace" (a name of --tenants, or "shared", the default): writes
    land in it, and store and pull see it and the shared one.  A store's
    blocks go only to a consumer whose namespace is theirs, or to anyone
    when they are shared: refused at once for a consumer connected, failed
    at delivery for one that connects later (its namespace is known then).
*/
#include "daemon/engine_api.h"
#include "base/checksum.h"
#include "base/keymap.h"
#include "daemon/log.h"
#include "daemon/tenants.h"

#include <czmq.h>
#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  Stores held for consumers not connected yet.
#define S_MAX_HELD 1024

//  This start's instance identity (issue 34): random bytes, new at every
//  start, that describe gives the engine and the engine names in every
//  later request, so that a handle which outlived a restart is refused.
#define S_INSTANCE_BYTES 16

struct _pk_engine_api_t {
    const pk_server_config_t *config;
    pk_store_t *store;
    const pk_engine_api_ops_t *ops;
    void *arg;
    char endpoint[256];
    char instance[2 * S_INSTANCE_BYTES + 1];        //  hex, S_INSTANCE_BYTES random
    char stale_logged[2 * S_INSTANCE_BYTES + 1];    //  the last stale instance logged
    pk_keymap_t jobs;               //  prefill job id -> the engine that stored it
    pk_held_list_t *held;
    uint64_t next_pull;
    bool draining;                  //  pk_engine_api_drain: what adds blocks is refused
};

typedef struct {
    uint64_t job;
    uint8_t rid[256];
    size_t rlen;
} s_engine_job_t;

static void
s_send(pk_engine_api_t *self, const void *rid, size_t rlen, json_t *msg)
{
    self->ops->send(self->arg, rid, rlen, msg);
}

//  A map's key over any bytes (an id, a routing id).
static pk_key_t
s_key(const void *bytes, size_t len)
{
    return pk_key_make(bytes, len);
}

static json_t *
s_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static json_t *
s_error(const char *fmt, ...)
{
    char text[PK_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return json_pack("{s:b, s:s}", "ok", 0, "error", text);
}

void
pk_engine_api_job(pk_engine_api_t *self, uint64_t job, bool success)
{
    pk_key_t k = s_key(&job, sizeof job);
    uint64_t ptr;
    if (!pk_keymap_take(&self->jobs, &k, &ptr, NULL))
        return;         //  a lookup's pin job: nobody to tell
    s_engine_job_t *ej = (s_engine_job_t *) (uintptr_t) ptr;
    s_send(self, ej->rid, ej->rlen,
                   json_pack("{s:s, s:I, s:b}", "event", "store_result", "job", (json_int_t) job,
                             "success", success));
    free(ej);
}

//  A held store that cannot reach its session fails like a timed-out
//  store job: unpinned, and the engine told.
static void
s_held_fail(pk_engine_api_t *self, pk_held_t *h)
{
    if (!h->finish) {
        pk_store_release_job(self->store, h->job);
        pk_engine_api_job(self, h->job, false);
    }
    pk_held_destroy(&h);
}

//  Whether a consumer in namespace consumer_ns may be sent blocks pinned
//  in ns: its own, or shared ones (what its lookups see too).
static bool
s_ns_fits(unsigned ns, unsigned consumer_ns)
{
    return ns == PK_NS_SHARED || ns == consumer_ns;
}

//  Never waits on the actor: a full pipe fails the store, and so does a
//  store whose blocks the consumer's namespace may not see.
static void
s_deliver(pk_engine_api_t *self, const char *consumer, unsigned consumer_ns, pk_held_t *h)
{
    if (!h->finish && !s_ns_fits(h->ns, consumer_ns)) {
        const pk_tenants_t *t = self->config->tenant_map;
        pk_log(self->config, PK_LOG_WARN, "store job %llu refused: consumer %s is in "
               "namespace %s, the blocks in %s", (unsigned long long) h->job, consumer,
               pk_tenants_name(t, consumer_ns), pk_tenants_name(t, h->ns));
        s_held_fail(self, h);
    }
    else if (self->ops->deliver(self->arg, consumer, h) != 0)
        s_held_fail(self, h);
}

//  The request's "namespace" (absent: shared): its id, or -1 with *error
//  set to the answer naming cmd.
static int
s_namespace(pk_engine_api_t *self, const char *cmd, const json_t *req, json_t **error)
{
    const json_t *v = json_object_get(req, "namespace");
    const char *name = json_string_value(v);
    int ns = !v ? PK_NS_SHARED : name ? pk_tenants_find(self->config->tenant_map, name) : -1;
    if (ns < 0)
        *error = !name ? s_error("%s: namespace: expected a string", cmd)
                       : s_error("%s: namespace \"%.40s\" is not one of --tenants", cmd, name);
    return ns < 0 ? -1 : ns;
}

void
pk_engine_api_connected(pk_engine_api_t *self, const char *consumer, unsigned ns)
{
    for (pk_held_t *h = pk_held_list_take(self->held, consumer), *next; h; h = next) {
        next = h->next;
        h->next = NULL;
        s_deliver(self, consumer, ns, h);
    }
}

//  Held stores for consumers that never connected fail at the store-job
//  timeout, like any store job.
void
pk_engine_api_expire(pk_engine_api_t *self)
{
    for (pk_held_t *h = pk_held_list_expire(self->held, zclock_mono() / 1e3), *next; h;
         h = next) {
        next = h->next;
        h->next = NULL;
        s_held_fail(self, h);
    }
}

//  Parses "keys" (hex strings) into one allocation of keys then bytes.
static pk_key_t *
s_json_keys(const json_t *arr, size_t *n_p, char *err)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > PK_MAX_LIST) {
        snprintf(err, PK_ERRLEN, "keys: expected an array of 1..%d hex strings", PK_MAX_LIST);
        return NULL;
    }
    size_t n = json_array_size(arr), total = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *k = json_array_get(arr, i);
        size_t len = json_string_length(k);
        if (!json_is_string(k) || len == 0 || len % 2 || len > PK_MAX_KEY_HEX) {
            snprintf(err, PK_ERRLEN, "keys[%zu]: expected lowercase hex of even length", i);
            return NULL;
        }
        total += len / 2;
    }
    pk_key_t *keys = malloc(n * sizeof *keys + total + 1);
    uint8_t *at = keys ? (uint8_t *) (keys + n) : NULL;
    for (size_t i = 0; keys && i < n; i++) {
        const json_t *k = json_array_get(arr, i);
        int got = pk_hex_decode(json_string_value(k), json_string_length(k), at);
        if (got < 0) {
            snprintf(err, PK_ERRLEN, "keys[%zu]: expected lowercase hex of even length", i);
            free(keys);
            return NULL;
        }
        keys[i] = pk_key_make(at, (size_t) got);
        at += got;
    }
    if (!keys)
        snprintf(err, PK_ERRLEN, "out of memory");
    *n_p = n;
    return keys;
}

//  The store's blocks pinned as a job for the consumer, and the engine
//  that asked remembered for its store_result: NULL, or the error.
static json_t *
s_store_pin(pk_engine_api_t *self, pk_held_t *h, const json_t *req, const void *rid, size_t rlen)
{
    char err[PK_ERRLEN];
    h->keys = s_json_keys(json_object_get(req, "keys"), &h->n, err);
    const json_t *round = json_object_get(req, "round");
    if (!h->keys || (round && (!json_is_integer(round) || json_integer_value(round) < 0)))
        return s_error("store: %s", h->keys ? "round: expected an integer >= 0" : err);
    h->has_round = round != NULL;
    h->round = round ? (uint64_t) json_integer_value(round) : 0;
    h->blocks = calloc(h->n, sizeof *h->blocks);
    bool *pinned = calloc(h->n, sizeof *pinned);
    h->job = pk_store_new_job_id(self->store);
    int rc = h->blocks && pinned
             ? pk_store_pin_job(self->store, h->ns, h->job, h->keys, h->n, h->blocks, pinned)
             : -ENOMEM;
    size_t missing = h->n;
    for (size_t i = 0; rc == 0 && i < h->n; i++)
        if (!pinned[i]) {
            missing = i;
            break;
        }
    free(pinned);
    if (rc || missing < h->n) {
        char hex[2 * PK_MAX_KEY_BYTES + 1] = "";
        if (!rc)
            pk_hex_encode(h->keys[missing].bytes, h->keys[missing].len, hex);
        pk_store_release_job(self->store, h->job);
        return rc ? s_error("store: %s", strerror(-rc))
                  : s_error("store: key %.64s is not ready in the pool", hex);
    }
    //  h->blocks lives inside no other allocation: keep it with the keys
    s_engine_job_t *ej = calloc(1, sizeof *ej);
    if (ej && rlen <= sizeof ej->rid) {
        ej->job = h->job;
        memcpy(ej->rid, rid, rlen);
        ej->rlen = rlen;
        pk_key_t k = s_key(&ej->job, sizeof ej->job);
        if (pk_keymap_put(&self->jobs, &k, (uintptr_t) ej, 0) < 0) {
            //  the job still runs and unpins; only its store_result cannot
            //  be routed back to the engine
            pk_log(self->config, PK_LOG_WARN, "store job %llu: out of memory, its result will "
                        "not be reported", (unsigned long long) ej->job);
            free(ej);
        }
    }
    else
        free(ej);
    return NULL;
}

//  The store's namespace into h->ns; refused (the answer) when it is not
//  one, or when the consumer is connected and may not see it.
static json_t *
s_store_refused(pk_engine_api_t *self, pk_held_t *h, const json_t *req, bool connected,
                unsigned consumer_ns)
{
    json_t *error = NULL;
    int ns = s_namespace(self, "store", req, &error);
    if (ns < 0)
        return error;
    h->ns = (unsigned) ns;
    if (!connected || s_ns_fits(h->ns, consumer_ns))
        return NULL;
    const pk_tenants_t *t = self->config->tenant_map;
    return s_error("store: consumer %.64s is in namespace %s, the blocks in %s: it may not "
                   "have them", h->consumer, pk_tenants_name(t, consumer_ns),
                   pk_tenants_name(t, h->ns));
}

//  {"cmd":"store"|"finish","peer":ID,"kv":KV,...}: to the consumer's
//  session now, or held until it connects.
static json_t *
s_cmd_store(pk_engine_api_t *self, const char *cmd, const json_t *req, const void *rid, size_t rlen)
{
    bool finish = streq(cmd, "finish");
    const char *consumer = json_string_value(json_object_get(req, "peer"));
    const char *kv = json_string_value(json_object_get(req, "kv"));
    if (!consumer || !kv || !*kv)
        return s_error("%s: expected \"peer\" and \"kv\" strings", finish ? "finish" : "store");
    pk_held_t *h = calloc(1, sizeof *h);
    if (!h || !(h->consumer = strdup(consumer)) || !(h->kv = strdup(kv))) {
        pk_held_destroy(&h);
        return s_error("out of memory");
    }
    h->finish = finish;
    h->expires = zclock_mono() / 1e3 + self->config->store_timeout;
    unsigned consumer_ns = 0;
    bool connected = self->ops->session(self->arg, consumer, &consumer_ns) == 0;
    json_t *error = finish ? NULL : s_store_refused(self, h, req, connected, consumer_ns);
    if (!error && !finish)
        error = s_store_pin(self, h, req, rid, rlen);
    if (error) {
        pk_held_destroy(&h);
        return error;
    }
    json_t *answer = finish ? json_pack("{s:b}", "ok", 1)
                            : json_pack("{s:b, s:I}", "ok", 1, "job", (json_int_t) h->job);
    if (connected)
        s_deliver(self, consumer, consumer_ns, h);
    else if (pk_held_list_add(self->held, h) != 0) {
        if (!finish) {
            pk_store_release_job(self->store, h->job);
            pk_key_t k = s_key(&h->job, sizeof h->job);
            uint64_t ptr;
            if (pk_keymap_take(&self->jobs, &k, &ptr, NULL))
                free((void *) (uintptr_t) ptr);
        }
        pk_held_destroy(&h);
        json_decref(answer);
        return s_error("too many stores held for consumers not connected (%d)", S_MAX_HELD);
    }
    return answer;
}

//  A pull's keys not in the pool yet, copied into p (keys then bytes);
//  the others go to present: ready, being written, or held by the disk
//  tier, whose lookup here starts the read back (store.h, tier.h), so a
//  key on this server's disk is never fetched from another server.
static void
s_pull_missing(pk_engine_api_t *self, pk_pull_t *p, const pk_key_t *keys, size_t n, json_t *present)
{
    uint8_t *at = (uint8_t *) (p->keys + n);
    for (size_t i = 0; i < n; i++) {
        if (pk_store_lookup(self->store, p->ns, &keys[i]) != PK_LOOKUP_MISS) {
            char hex[2 * PK_MAX_KEY_BYTES + 1];
            pk_hex_encode(keys[i].bytes, keys[i].len, hex);
            json_array_append_new(present, json_string(hex));
            continue;
        }
        memcpy(at, keys[i].bytes, keys[i].len);
        p->keys[p->n++] = pk_key_make(at, keys[i].len);
        at += keys[i].len;
    }
    pk_store_kick(self->store);     //  the disk tier's reads, as one batch
}

//  {"cmd":"pull","server":EP,"keys":[...]}: keys already here are
//  "present"; the others get blocks reserved now (all or nothing) and are
//  fetched by the puller; a pull_result event follows.  Without "server"
//  (with --directory) each key comes from any holder the directory names.
static json_t *
s_cmd_pull(pk_engine_api_t *self, const char *cmd, const json_t *req, const void *rid, size_t rlen)
{
    const char *server = json_string_value(json_object_get(req, "server"));
    char err[PK_ERRLEN];
    size_t n;
    json_t *error = NULL;
    int ns = s_namespace(self, cmd, req, &error);
    if (ns < 0)
        return error;
    if ((!server && !self->config->directory) || (server && !*server))
        return s_error("pull: expected \"server\" (an endpoint, or none with --directory) "
                       "and \"keys\"");
    pk_key_t *keys = s_json_keys(json_object_get(req, "keys"), &n, err);
    if (!keys)
        return s_error("pull: %s", err);
    pk_pull_t *p = calloc(1, sizeof *p);
    json_t *present = json_array();
    if (!p || (server && !(p->server = strdup(server))) || rlen > sizeof p->rid
        || !(p->keys = malloc(n * (sizeof *p->keys + PK_MAX_KEY_BYTES)))
        || !(p->blocks = calloc(n, sizeof *p->blocks)) || !(p->landed = calloc(n, sizeof *p->landed))
        || !(p->from = calloc(n, sizeof *p->from)) || !(p->why = calloc(n, sizeof *p->why))) {
        pk_pull_destroy(&p);
        free(keys);
        json_decref(present);
        return s_error("out of memory");
    }
    p->ns = (unsigned) ns;
    s_pull_missing(self, p, keys, n, present);
    free(keys);
    p->id = ++self->next_pull;
    p->owner = PK_PULL_OWNER | p->id;
    memcpy(p->rid, rid, rlen);
    p->rlen = rlen;
    int rc = p->n ? pk_store_reserve(self->store, p->owner, p->ns, p->keys, p->n, p->blocks)
                  : 0;
    if (rc) {
        pk_pull_destroy(&p);
        json_decref(present);
        return s_error("pull: %s", rc == -ENOSPC ? "every block is pinned or being written"
                                   : rc == -EEXIST ? "a key is already in the pool"
                                   : strerror(-rc));
    }
    json_t *answer = json_pack("{s:b, s:I, s:I, s:o}", "ok", 1, "pull", (json_int_t) p->id,
                               "fetching", (json_int_t) p->n, "present", present);
    rc = self->ops->pull(self->arg, p);
    if (rc) {
        pk_store_release_owner(self->store, p->owner);
        pk_pull_destroy(&p);
        json_decref(answer);
        return s_error("pull: %s", rc == -EAGAIN ? "too many pulls queued"
                                   : "cannot start the puller (out of descriptors or "
                                     "threads)");
    }
    return answer;
}

static json_t *
s_cmd_describe(pk_engine_api_t *self, const char *cmd, const json_t *req, const void *rid,
               size_t rlen)
{
    return json_pack("{s:b, s:s, s:s, s:I, s:I, s:s, s:s, s:f}", "ok", 1, "peer_id",
                     self->config->peer_id, "pool_name", pk_store_name(self->store),
                     "num_blocks", (json_int_t) pk_store_num_blocks(self->store),
                     "block_len", (json_int_t) pk_store_block_len(self->store), "endpoint",
                     self->endpoint, "instance", self->instance, "lease_timeout",
                     self->config->lease_timeout);
}

//  A commit's "sums": n items, each null or 16 lowercase hex characters.
static int
s_json_sums(const json_t *arr, size_t n, uint64_t *sums, bool *given, char *err)
{
    if (!json_is_array(arr) || json_array_size(arr) != n)
        return pk_err(err, -EINVAL, "sums: expected an array of %zu items (one per key)", n);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (json_is_null(v))
            continue;
        const char *hex = json_string_value(v);
        if (!hex || strlen(hex) != PK_CHECKSUM_HEX || pk_checksum_parse(hex, &sums[i]) != 0)
            return pk_err(err, -EINVAL, "sums[%zu]: expected null or %d lowercase hex "
                          "characters", i, PK_CHECKSUM_HEX);
        given[i] = true;
    }
    return 0;
}

//  reserve, commit and drop: keys of the engine connection's own (its
//  owner is a hash of its routing id).
static json_t *
s_cmd_keys(pk_engine_api_t *self, const char *cmd, const json_t *req, const void *rid, size_t rlen)
{
    uint64_t owner = pk_key_hash(rid, rlen) & ~(UINT64_C(1) << 63);
    char err[PK_ERRLEN];
    size_t n;
    json_t *answer = NULL;
    int ns = s_namespace(self, cmd, req, &answer);
    if (ns < 0)
        return answer;
    pk_key_t *keys = s_json_keys(json_object_get(req, "keys"), &n, err);
    if (!keys)
        return s_error("%s: %s", cmd, err);
    int rc;
    if (streq(cmd, "reserve")) {
        uint32_t *blocks = calloc(n, sizeof *blocks);
        rc = blocks ? pk_store_reserve(self->store, owner, (unsigned) ns, keys, n, blocks)
                    : -ENOMEM;
        answer = rc ? NULL : json_pack("{s:b, s:[]}", "ok", 1, "blocks");
        for (size_t i = 0; answer && i < n; i++)
            json_array_append_new(json_object_get(answer, "blocks"), json_integer(blocks[i]));
        free(blocks);
    }
    else if (streq(cmd, "commit")) {
        //  the engine's checksums of blocks it wrote whole (optional, one
        //  per key, null where it has none): the store takes the others
        const json_t *jsums = json_object_get(req, "sums");
        uint64_t *sums = jsums ? calloc(n, sizeof *sums) : NULL;
        bool *given = jsums ? calloc(n, sizeof *given) : NULL;
        rc = jsums && (!sums || !given) ? -ENOMEM : 0;
        if (rc == 0 && jsums && s_json_sums(jsums, n, sums, given, err) != 0) {
            free(sums);
            free(given);
            free(keys);
            return s_error("commit: %s", err);
        }
        if (rc == 0)
            rc = pk_store_commit_sums(self->store, owner, (unsigned) ns, keys, n, sums, given);
        free(sums);
        free(given);
        answer = rc ? NULL : json_pack("{s:b}", "ok", 1);
    }
    else {
        rc = pk_store_drop(self->store, (unsigned) ns, keys, n);
        answer = rc ? NULL : json_pack("{s:b}", "ok", 1);
    }
    free(keys);
    if (rc == -ENOSPC)
        return s_error("%s: every block is pinned or being written", cmd);
    if (rc == -EEXIST)
        return s_error("%s: a key is already in the pool", cmd);
    if (rc == -EBUSY)
        return s_error("%s: a key is pinned by a transfer", cmd);
    if (rc == -ENOENT)
        return s_error("%s: a key is not reserved by this connection", cmd);
    return rc ? s_error("%s: %s", cmd, strerror(-rc)) : answer;
}

static json_t *
s_cmd_put(pk_engine_api_t *self, const char *cmd, const json_t *req, const void *rid, size_t rlen)
{
    const char *hex = json_string_value(json_object_get(req, "key"));
    const char *b64 = json_string_value(json_object_get(req, "data"));
    json_t *error = NULL;
    int ns = s_namespace(self, cmd, req, &error);
    if (ns < 0)
        return error;
    uint8_t key[PK_MAX_KEY_BYTES];
    //  pk_hex_decode writes all it is given: a longer key overran key[]
    int klen = hex && strlen(hex) <= PK_MAX_KEY_HEX ? pk_hex_decode(hex, strlen(hex), key)
                                                     : -EINVAL;
    if (klen <= 0 || !b64)
        return s_error("put: expected \"key\" (lowercase hex) and \"data\" (base64)");
    size_t cap = strlen(b64) / 4 * 3 + 3, len = 0;
    uint8_t *data = malloc(cap);
    if (!data || sodium_base642bin(data, cap, b64, strlen(b64), NULL, &len, NULL,
                                   sodium_base64_VARIANT_ORIGINAL) != 0) {
        free(data);
        return s_error("put: data is not base64");
    }
    pk_key_t k = pk_key_make(key, (size_t) klen);
    int rc = pk_store_put(self->store, (unsigned) ns, &k, data, len);
    free(data);
    if (rc == -EINVAL)
        return s_error("put: data is %zu bytes, blocks are %llu", len,
                       (unsigned long long) pk_store_block_len(self->store));
    if (rc == -EEXIST)
        return json_pack("{s:b, s:b}", "ok", 1, "existed", 1);
    return rc ? s_error("put: %s", strerror(-rc)) : json_pack("{s:b}", "ok", 1);
}

//  {"NAME": {"ready", "pinned", "lookups", "hits", "pending", "misses"}, ...}
//  for every namespace, shared included (store.h, pk_store_ns_stats_t).
static json_t *
s_namespaces_json(pk_engine_api_t *self)
{
    json_t *all = json_object();
    for (unsigned ns = 0; all && ns < pk_store_namespaces(self->store); ns++) {
        pk_store_ns_stats_t st;
        if (pk_store_ns_stats(self->store, ns, &st) != 0)
            continue;
        json_object_set_new(all, pk_tenants_name(self->config->tenant_map, ns),
                            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}",
                                      "ready", (json_int_t) st.ready,
                                      "pinned", (json_int_t) st.pinned,
                                      "lookups", (json_int_t) st.lookups,
                                      "hits", (json_int_t) st.hits,
                                      "pending", (json_int_t) st.pending,
                                      "misses", (json_int_t) st.misses));
    }
    return all;
}

static json_t *
s_cmd_stats(pk_engine_api_t *self, const char *cmd, const json_t *req, const void *rid, size_t rlen)
{
    pk_store_stats_t st;
    pk_store_stats(self->store, &st);
    json_t *answer = json_pack("{s:b, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}}", "ok", 1,
                               "pool", "free", (json_int_t) st.free,
                               "writing", (json_int_t) st.writing,
                               "ready", (json_int_t) st.ready, "pinned", (json_int_t) st.pinned,
                               "evictions", (json_int_t) st.evictions, "lookups",
                               (json_int_t) st.lookups, "hits", (json_int_t) st.hits, "misses",
                               (json_int_t) st.misses);
    if (!answer)
        return s_error("out of memory");
    //  the node's: the fabrics, the sessions, the metrics
    self->ops->stats(self->arg, answer);
    json_object_set_new(answer, "namespaces", s_namespaces_json(self));
    return answer;
}

typedef json_t *(s_cmd_fn)(pk_engine_api_t *self, const char *cmd, const json_t *req,
                           const void *rid, size_t rlen);

//  adds: refused while the server drains (pk_engine_api_drain).  reserve,
//  put and pull bring new blocks into a pool that is about to go away and
//  that no lookup would find (they all miss then).  commit and drop end
//  what a reserve began before; store and finish supply, or end, a
//  consumer's request (work the drain waits for): they run.
static const struct {
    const char *name;
    s_cmd_fn *fn;
    bool adds;
} s_commands[] = {
    { "describe", s_cmd_describe, false },
    { "reserve", s_cmd_keys, true },
    { "commit", s_cmd_keys, false },
    { "drop", s_cmd_keys, false },
    { "put", s_cmd_put, true },
    { "pull", s_cmd_pull, true },
    { "store", s_cmd_store, false },
    { "finish", s_cmd_store, false },
    { "stats", s_cmd_stats, false },
};

//  A request naming another instance than this start's (issue 34): the
//  engine handle that sent it described, and mapped the pool of, a server
//  since restarted on the same socket, so what it wrote went into a dead
//  server's unlinked mapping; refused before the command runs, whatever it
//  is, so that nothing written through such a handle is ever committed or
//  served.  The engine maps the sentence to -ESTALE (link.c).  A request
//  naming no instance (a tool that maps nothing, as p2pkv put's JSON put
//  by value; an engine older than the rule) runs as before.  One log line
//  per stale instance, however often its handle retries.
static json_t *
s_stale(pk_engine_api_t *self, const char *cmd, const json_t *req)
{
    const json_t *v = json_object_get(req, "instance");
    const char *id = json_string_value(v);
    if (!v || (id && streq(id, self->instance)))
        return NULL;
    if (!id)
        return s_error("%s: instance: expected the string describe gave", cmd);
    if (!streq(id, self->stale_logged)) {
        snprintf(self->stale_logged, sizeof self->stale_logged, "%s", id);
        pk_log(self->config, PK_LOG_WARN, "engine requests of a handle opened on instance "
                    "%.32s (before a restart; this start is %s) refused: that engine must "
                    "reopen", id, self->instance);
    }
    return s_error("%s: the server restarted; reopen the engine (the handle mapped the pool "
                   "of instance %.32s, this start is %s)", cmd, id, self->instance);
}

static json_t *
s_cmd(pk_engine_api_t *self, const json_t *req, const void *rid, size_t rlen)
{
    const char *cmd = json_string_value(json_object_get(req, "cmd"));
    if (!cmd)
        return s_error("expected a JSON object with a \"cmd\" string");
    json_t *stale = s_stale(self, cmd, req);
    if (stale)
        return stale;
    for (size_t i = 0; i < sizeof s_commands / sizeof s_commands[0]; i++) {
        if (!streq(cmd, s_commands[i].name))
            continue;
        //  the engine maps the sentence to -ESHUTDOWN (link.c)
        if (self->draining && s_commands[i].adds)
            return s_error("%s: the server is draining (stopping): nothing new is taken", cmd);
        return s_commands[i].fn(self, cmd, req, rid, rlen);
    }
    return s_error("unknown cmd \"%.64s\"", cmd);
}

json_t *
pk_engine_api_answer(pk_engine_api_t *self, const void *body, size_t len, const void *rid, size_t rlen)
{
    json_error_t jerr;
    json_t *req = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    json_t *answer = json_is_object(req) ? s_cmd(self, req, rid, rlen)
                                         : s_error("not a JSON object: %s", jerr.text);
    json_decref(req);
    return answer;
}

void
pk_engine_api_request(pk_engine_api_t *self, zmsg_t *msg)
{
    zframe_t *rid = zmsg_pop(msg), *body = zmsg_pop(msg);
    if (rid && body)
        s_send(self, zframe_data(rid), zframe_size(rid),
               pk_engine_api_answer(self, zframe_data(body), zframe_size(body),
                                    zframe_data(rid), zframe_size(rid)));
    zframe_destroy(&rid);
    zframe_destroy(&body);
    zmsg_destroy(&msg);
}

//  A pull ended: commit what landed, release the rest, tell the engine:
//  how many landed, and from where ("from": endpoint -> its keys), which
//  are missing and why ("reasons", one name per "missing" key, for an
//  engine library that reports per key; an older one reads neither).
void
pk_engine_api_pulled(pk_engine_api_t *self, pk_pull_t *p)
{
    json_t *missing = json_array(), *reasons = json_array(), *from = json_object();
    size_t nlanded = 0;
    for (size_t i = 0; i < p->n; i++) {
        char hex[2 * PK_MAX_KEY_BYTES + 1];
        pk_hex_encode(p->keys[i].bytes, p->keys[i].len, hex);
        const char *why = p->why[i] ? p->why[i] : "unknown";
        if (p->landed[i]) {
            if (pk_store_commit_sums(self->store, p->owner, p->ns, &p->keys[i], 1, NULL,
                                     NULL) == 0) {
                nlanded++;
                const char *src = p->from[i] ? p->from[i] : "";
                json_t *list = json_object_get(from, src);
                if (!list && json_object_set_new(from, src, list = json_array()) != 0)
                    list = NULL;
                json_array_append_new(list, json_string(hex));
                continue;
            }
            why = "failed";        //  its reservation is gone: never reported landed
        }
        json_array_append_new(missing, json_string(hex));
        json_array_append_new(reasons, json_string(why));
    }
    pk_store_release_owner(self->store, p->owner);
    json_t *ev = json_pack("{s:s, s:I, s:I, s:o, s:o, s:o}", "event", "pull_result", "pull",
                           (json_int_t) p->id, "landed", (json_int_t) nlanded, "missing",
                           missing, "reasons", reasons, "from", from);
    if (p->reason[0])
        json_object_set_new(ev, "reason", json_string(p->reason));
    s_send(self, p->rid, p->rlen, ev);
    pk_pull_destroy(&p);
}

pk_engine_api_t *
pk_engine_api_new(const pk_server_config_t *config, pk_store_t *store, const char *endpoint,
                  const pk_engine_api_ops_t *ops, void *arg)
{
    //  16 random bytes: two starts never share one (the chance is 2^-64
    //  after 2^32 starts), and nothing about the host or the time is told
    if (sodium_init() < 0)
        goto fail;
    pk_engine_api_t *self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    *self = (pk_engine_api_t) { .config = config, .store = store, .ops = ops, .arg = arg };
    snprintf(self->endpoint, sizeof self->endpoint, "%s", endpoint);
    uint8_t instance[S_INSTANCE_BYTES];
    randombytes_buf(instance, sizeof instance);
    sodium_bin2hex(self->instance, sizeof self->instance, instance, sizeof instance);
    if (!(self->held = pk_held_list_new(S_MAX_HELD)))
        goto fail_self;
    return self;

fail_self:
    free(self);
fail:
    return NULL;
}

void
pk_engine_api_destroy(pk_engine_api_t **self_p)
{
    pk_engine_api_t *self = *self_p;
    if (!self)
        return;
    pk_held_list_destroy(&self->held);
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->jobs, &at)); )
        free((void *) (uintptr_t) e->a);
    pk_keymap_fini(&self->jobs);
    free(self);
    *self_p = NULL;
}

void
pk_engine_api_drain(pk_engine_api_t *self)
{
    self->draining = true;
}

const pk_held_list_t *
pk_engine_api_held(const pk_engine_api_t *self)
{
    return self->held;
}

size_t
pk_engine_api_jobs(const pk_engine_api_t *self)
{
    return pk_keymap_size(&self->jobs);
}
