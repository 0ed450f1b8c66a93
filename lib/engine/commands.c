/*  commands.c: the engine's commands, each one JSON request on the local
    socket (link.c) after the checks that need no server.
*/
#include "engine/engine_internal.h"
#include "base/checksum.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/key.h"
#include "wire/protocol.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  req with the handle's namespace, when it is not the shared one (the
//  server's default: the request is then exactly what it was before).
static json_t *
s_in_ns(p2pkv_engine_t *self, json_t *req)
{
    if (req && self->ns[0] && json_object_set_new(req, "namespace", json_string(self->ns)) != 0) {
        json_decref(req);
        return NULL;
    }
    return req;
}

//  {"cmd": cmd, "keys": [...], "namespace": NS}, or NULL (out of memory).
static json_t *
s_keys_req(p2pkv_engine_t *self, const char *cmd, const p2pkv_key_t *keys, size_t n)
{
    json_t *arr = pk_engine_keys_json(keys, n);
    return s_in_ns(self, arr ? json_pack("{s:s, s:o}", "cmd", cmd, "keys", arr) : NULL);
}

//  Whether ns names the shared namespace (NULL, "" or "shared").
static bool
s_ns_shared(const char *ns)
{
    return !ns || !*ns || streq(ns, "shared");
}

//  0 when ns is a well-formed namespace name, else -EINVAL naming ns.
static int
s_ns_check(const char *ns, char *err)
{
    size_t len = strlen(ns);
    bool ok = len <= P2PKV_ENGINE_MAX_NAMESPACE
              && strspn(ns, "abcdefghijklmnopqrstuvwxyz0123456789_-") == len
              && ns[0] != '_' && ns[0] != '-';
    return ok ? 0 : pk_err(err, -EINVAL, "ns: \"%.40s\": expected 1..%d of a-z 0-9 _ -, the "
                           "first a letter or digit", ns, P2PKV_ENGINE_MAX_NAMESPACE);
}

int
p2pkv_engine_set_namespace(p2pkv_engine_t *self, const char *ns, char *err)
{
    if (!self)
        return pk_err(err, -EINVAL, "self: NULL");
    if (s_ns_shared(ns)) {
        self->ns[0] = '\0';
        return 0;
    }
    int rc = s_ns_check(ns, err);
    if (rc == 0)
        memcpy(self->ns, ns, strlen(ns) + 1);
    return rc;
}

int
p2pkv_engine_reserve(p2pkv_engine_t *self, const p2pkv_key_t *keys, size_t n,
                     uint32_t *blocks, char *err)
{
    int rc = !self ? pk_err(err, -EINVAL, "self: NULL")
             : !blocks ? pk_err(err, -EINVAL, "blocks: NULL")
             : pk_engine_check_keys(keys, n, err);
    if (rc)
        return rc;
    double asked = pk_clock_monotonic();   //  before the server's start of the lease
    json_t *a = pk_elink_ask(self, s_keys_req(self, "reserve", keys, n), "reserve", &rc, err);
    if (!a)
        return rc;
    const json_t *arr = json_object_get(a, "blocks");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_int_t b = json_integer_value(json_array_get(arr, i));
        if (json_array_size(arr) != n || b < 0 || (uint64_t) b >= self->info.num_blocks)
            rc = pk_err(err, -EPROTO, "reserve: the server's blocks are not %zu blocks of "
                        "its pool", n);
        blocks[i] = (uint32_t) b;
    }
    json_decref(a);
    //  a block reserved anew starts with no checksum of ours: one noted
    //  for an earlier reservation of it (its lease ran out uncommitted)
    //  must not go with a commit of bytes written through the mapping
    for (size_t i = 0; rc == 0 && i < n; i++) {
        pk_engine_note_sum(self, blocks[i], false, 0);
        self->held_at[blocks[i]] = asked;
    }
    if (!rc && pk_engine_hold(self, keys, n, blocks) < 0)
        rc = pk_err(err, -ENOMEM, "reserve: out of memory (the blocks go free at their "
                    "lease's end)");
    return rc;
}

int
p2pkv_engine_commit(p2pkv_engine_t *self, const p2pkv_key_t *keys, size_t n, char *err)
{
    int rc = !self ? pk_err(err, -EINVAL, "self: NULL") : pk_engine_check_keys(keys, n, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        pk_key_t k = pk_key_make(keys[i].bytes, keys[i].len);
        if (!pk_keymap_find(&self->reserved, &k))
            rc = pk_err(err, -ENOENT, "keys[%zu]: not reserved by this handle (or committed "
                        "already)", i);
    }
    if (rc)
        return rc;
    //  Every block's checksum goes with its commit, so that the server
    //  reads none of them (doc/design.md, "Block checksums"): those written
    //  whole through this handle were taken while their bytes were in cache
    //  (engine.c); those written through the mapping (or in parts) are
    //  taken here, by the writer, which waits for the commit's answer
    //  anyway.  Taken by the server, they held its door and its store's
    //  lock for the whole commit: 4,096 blocks of 64 KiB, 0.45 s without
    //  an answer to any session on an idle host, 2.2 s on a loaded one
    //  (design.md, "A commit's checksums are the writer's").
    json_t *req = s_keys_req(self, "commit", keys, n), *sums = json_array();
    bool any = false;
    for (size_t i = 0; req && sums && i < n; i++) {
        pk_key_t k = pk_key_make(keys[i].bytes, keys[i].len);
        pk_keymap_entry_t *e = pk_keymap_find(&self->reserved, &k);
        uint64_t sum;
        char hex[PK_CHECKSUM_HEX + 1];
        bool have = e && pk_engine_take_written(self, (uint32_t) e->a, &sum);
        if (!have && e && self->pool && (uint64_t) e->a < self->info.num_blocks) {
            sum = pk_checksum(self->pool + (size_t) e->a * self->info.block_len,
                              self->info.block_len);
            have = true;
        }
        if (have) {
            pk_checksum_hex(sum, hex);
            json_array_append_new(sums, json_string(hex));
            any = true;
        }
        else
            json_array_append_new(sums, json_null());
    }
    if (req && any)
        json_object_set_new(req, "sums", sums);
    else
        json_decref(sums);
    json_t *a = pk_elink_ask(self, req, "commit", &rc, err);
    if (a)
        pk_engine_unhold(self, keys, n);
    json_decref(a);
    return rc;
}

int
p2pkv_engine_put(p2pkv_engine_t *self, const p2pkv_key_t *key, const void *data, size_t len,
                 char *err)
{
    int rc = !self ? pk_err(err, -EINVAL, "self: NULL")
             : !key || !key->bytes || key->len == 0 || key->len > P2PKV_ENGINE_MAX_KEY
             ? pk_err(err, -EINVAL, "key: %zu bytes, expected 1..%d", key ? key->len : 0,
                      P2PKV_ENGINE_MAX_KEY)
             : !data ? pk_err(err, -EINVAL, "data: NULL")
             : len != self->info.block_len
             ? pk_err(err, -EINVAL, "len: %zu bytes, blocks are %llu", len,
                      (unsigned long long) self->info.block_len) : 0;
    if (rc)
        return rc;
    uint32_t block;
    rc = p2pkv_engine_reserve(self, key, 1, &block, err);
    if (rc == -EEXIST)
        return 1;               //  in the pool (or being written) already
    if (rc)
        return rc;
    //  copied and hashed in one pass: the checksum goes with the commit
    pk_engine_note_sum(self, block, true,
                       pk_checksum_copy(self->pool + (size_t) block * self->info.block_len,
                                        data, len));
    return p2pkv_engine_commit(self, key, 1, err);
}

int
p2pkv_engine_drop(p2pkv_engine_t *self, const p2pkv_key_t *keys, size_t n, char *err)
{
    int rc = !self ? pk_err(err, -EINVAL, "self: NULL") : pk_engine_check_keys(keys, n, err);
    if (rc)
        return rc;
    json_decref(pk_elink_ask(self, s_keys_req(self, "drop", keys, n), "drop", &rc, err));
    return rc;
}

//  consumer and kv of store and finish: 0 or -EINVAL naming the argument.
static int
s_check_request(p2pkv_engine_t *self, const char *consumer, const char *kv, char *err)
{
    return !self ? pk_err(err, -EINVAL, "self: NULL")
           : !consumer || !*consumer ? pk_err(err, -EINVAL, "consumer: expected a peer id")
           : strlen(consumer) > PK_MAX_STRING
           ? pk_err(err, -EINVAL, "consumer: over %d bytes", PK_MAX_STRING)
           : !kv || !*kv ? pk_err(err, -EINVAL, "kv: expected a request id")
           : strlen(kv) > PK_MAX_STRING ? pk_err(err, -EINVAL, "kv: over %d bytes", PK_MAX_STRING)
           : 0;
}

int
p2pkv_engine_store(p2pkv_engine_t *self, const char *consumer, const char *kv,
                   const p2pkv_key_t *keys, size_t n, int64_t round, uint64_t *job_p,
                   char *err)
{
    int rc = s_check_request(self, consumer, kv, err);
    if (!rc)
        rc = !job_p ? pk_err(err, -EINVAL, "job_p: NULL") : pk_engine_check_keys(keys, n, err);
    if (rc)
        return rc;
    json_t *arr = pk_engine_keys_json(keys, n);
    json_t *req = s_in_ns(self, arr ? json_pack("{s:s, s:s, s:s, s:o}", "cmd", "store", "peer",
                                                consumer, "kv", kv, "keys", arr) : NULL);
    if (req && round >= 0)
        json_object_set_new(req, "round", json_integer(round));
    json_t *a = pk_elink_ask(self, req, "store", &rc, err);
    if (a)
        *job_p = (uint64_t) json_integer_value(json_object_get(a, "job"));
    json_decref(a);
    return rc;
}

int
p2pkv_engine_finish(p2pkv_engine_t *self, const char *consumer, const char *kv, char *err)
{
    int rc = s_check_request(self, consumer, kv, err);
    if (rc)
        return rc;
    json_decref(pk_elink_ask(self, json_pack("{s:s, s:s, s:s}", "cmd", "finish", "peer",
                                             consumer, "kv", kv), "finish", &rc, err));
    return rc;
}

//  present[i] for the keys the server listed as in its pool: its list is
//  the keys' subsequence, in order.
static void
s_present(const json_t *list, const p2pkv_key_t *keys, size_t n, bool *present)
{
    char *hex = malloc(2 * P2PKV_ENGINE_MAX_KEY + 1);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        present[i] = false;
        const char *next = json_string_value(json_array_get(list, j));
        if (!hex || !next)
            continue;
        pk_hex_encode(keys[i].bytes, keys[i].len, hex);
        if (streq(hex, next)) {
            present[i] = true;
            j++;
        }
    }
    free(hex);
}

int
p2pkv_engine_pull(p2pkv_engine_t *self, const char *endpoint, const p2pkv_key_t *keys,
                  size_t n, uint64_t *pull_id_p, size_t *fetching_p, bool *present, char *err)
{
    int rc = !self ? pk_err(err, -EINVAL, "self: NULL")
             : endpoint && !*endpoint
             ? pk_err(err, -EINVAL, "endpoint: expected the remote server's endpoint, or NULL")
             : !pull_id_p ? pk_err(err, -EINVAL, "pull_id_p: NULL")
             : pk_engine_check_keys(keys, n, err);
    if (rc)
        return rc;
    json_t *arr = pk_engine_keys_json(keys, n);
    json_t *req = s_in_ns(self, arr ? json_pack("{s:s, s:o}", "cmd", "pull", "keys", arr) : NULL);
    if (req && endpoint)
        json_object_set_new(req, "server", json_string(endpoint));
    json_t *a = pk_elink_ask(self, req, "pull", &rc, err);
    if (!a)
        return rc;
    *pull_id_p = (uint64_t) json_integer_value(json_object_get(a, "pull"));
    if (fetching_p)
        *fetching_p = (size_t) json_integer_value(json_object_get(a, "fetching"));
    if (present)
        s_present(json_object_get(a, "present"), keys, n, present);
    json_decref(a);
    return 0;
}

static uint64_t
s_u64(const json_t *obj, const char *name)
{
    json_int_t v = json_integer_value(json_object_get(obj, name));
    return v > 0 ? (uint64_t) v : 0;
}

int
p2pkv_engine_stats(p2pkv_engine_t *self, p2pkv_engine_stats_t *out, char *err)
{
    int rc = !self ? pk_err(err, -EINVAL, "self: NULL")
             : !out ? pk_err(err, -EINVAL, "out: NULL") : 0;
    json_t *a = rc ? NULL : pk_elink_ask(self, json_pack("{s:s}", "cmd", "stats"), "stats",
                                         &rc, err);
    if (!a)
        return rc;
    const json_t *pool = json_object_get(a, "pool");
    *out = (p2pkv_engine_stats_t) {
        .free = s_u64(pool, "free"), .writing = s_u64(pool, "writing"),
        .ready = s_u64(pool, "ready"), .pinned = s_u64(pool, "pinned"),
        .evictions = s_u64(pool, "evictions"), .lookups = s_u64(pool, "lookups"),
        .hits = s_u64(pool, "hits"), .misses = s_u64(pool, "misses"),
        .sessions = s_u64(a, "sessions"),
        .channels_open = s_u64(json_object_get(a, "fabric"), "channels_open"),
    };
    json_decref(a);
    return 0;
}

//  The stats answer's "namespaces" has each namespace's share by name
//  (the shared one as "shared"); one name asked, one entry read.
int
p2pkv_engine_stats_namespace(p2pkv_engine_t *self, const char *ns,
                             p2pkv_engine_namespace_stats_t *out, char *err)
{
    const char *name = s_ns_shared(ns) ? "shared" : ns;
    int rc = !self ? pk_err(err, -EINVAL, "self: NULL")
             : !out ? pk_err(err, -EINVAL, "out: NULL")
             : s_ns_shared(ns) ? 0 : s_ns_check(ns, err);
    json_t *a = rc ? NULL : pk_elink_ask(self, json_pack("{s:s}", "cmd", "stats"), "stats",
                                         &rc, err);
    if (!a)
        return rc;
    const json_t *one = json_object_get(json_object_get(a, "namespaces"), name);
    if (one)
        *out = (p2pkv_engine_namespace_stats_t) {
            .ready = s_u64(one, "ready"), .pinned = s_u64(one, "pinned"),
            .lookups = s_u64(one, "lookups"), .hits = s_u64(one, "hits"),
            .pending = s_u64(one, "pending"), .misses = s_u64(one, "misses"),
        };
    else
        rc = pk_err(err, -ENOENT, "ns: the server has no namespace \"%.40s\" (its --tenants)",
                    name);
    json_decref(a);
    return rc;
}

char *
p2pkv_engine_stats_json(p2pkv_engine_t *self, char *err)
{
    int rc;
    if (!self) {
        pk_err(err, -EINVAL, "self: NULL");
        return NULL;
    }
    json_t *a = pk_elink_ask(self, json_pack("{s:s}", "cmd", "stats"), "stats", &rc, err);
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    if (a && !text)
        pk_err(err, -ENOMEM, "stats: out of memory");
    json_decref(a);
    return text;
}
