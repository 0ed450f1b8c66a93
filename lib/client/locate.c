/*  locate.c: the client's side of the cluster directory (doc/directory.md):
    p2pkv_client_locate and the locator behind it.

    One hiredis connection under the locator's own mutex (not the
    client's lock, so a slow Redis never stalls the progress thread or
    the other calls).  A locate is one pipeline: MGET of the records of
    the servers the last locate saw, SMEMBERS of the servers' set, and
    one SMEMBERS per key.  The servers' set tells whether a server joined
    since: only then a second round trip reads the new records.  A holder
    counts only with a live record (the TTL its heartbeat refreshes), so
    a dead server's entries stop being trusted within a TTL, without
    anyone deleting them.
*/
#include "client/client_internal.h"
#include "base/key.h"
#include "cluster/dir_redis.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  Bound on connecting and on each read or write: a Redis slower than
//  this is down for this call.
#define S_TIMEOUT 1.0

struct _pk_locator_t {
    pthread_mutex_t mutex;
    char *url;
    pk_dir_url_t where;
    pk_dir_conn_t *c;
    char **known;                   //  the servers' set as the last locate read it
    size_t nknown;
    p2pkv_directory_stats_t stats;
};

pk_locator_t *
pk_locator_new(const char *url, char *err)
{
    pk_locator_t *self = calloc(1, sizeof *self);
    if (!self) {
        (void) pk_err(err, -ENOMEM, "out of memory");
        return NULL;
    }
    if (pk_dir_url_parse(url, &self->where, err) != 0 || !(self->url = strdup(url))) {
        if (err && !*err)
            (void) pk_err(err, -ENOMEM, "out of memory");
        free(self);
        return NULL;
    }
    pthread_mutex_init(&self->mutex, NULL);
    return self;
}

static void
s_known_free(pk_locator_t *self)
{
    for (size_t i = 0; i < self->nknown; i++)
        free(self->known[i]);
    free(self->known);
    self->known = NULL;
    self->nknown = 0;
}

void
pk_locator_destroy(pk_locator_t **self_p)
{
    pk_locator_t *self = *self_p;
    if (!self)
        return;
    pk_dir_close(&self->c);
    s_known_free(self);
    pthread_mutex_destroy(&self->mutex);
    free(self->url);
    free(self);
    *self_p = NULL;
}

//  The connection, made when there is none: 0, or -ENOTCONN with err.
static int
s_connected(pk_locator_t *self, char *err)
{
    if (!self->c)
        self->c = pk_dir_connect(&self->where, self->url, S_TIMEOUT, err);
    self->stats.up = self->c != NULL;
    return self->c ? 0 : -ENOTCONN;
}

static int
s_lost(pk_locator_t *self, char *err)
{
    char why[PK_ERRLEN];
    snprintf(why, sizeof why, "%s", self->c ? pk_dir_error(self->c) : "no answer");
    pk_dir_close(&self->c);
    self->stats.up = false;
    return pk_err(err, -ENOTCONN, "directory %.100s: %.120s", self->url, why);
}

//  ---------------------------------------------------------------------------
//  Live records

//  The live servers of one locate: records by peer id.
typedef struct {
    pk_dir_record_t *v;
    size_t n, cap;
    pk_keymap_t by_id;              //  peer id -> index in v
} s_live_t;

static void
s_live_fini(s_live_t *live)
{
    free(live->v);
    pk_keymap_fini(&live->by_id);
}

//  Records from an MGET reply for names[]: the live ones added (nil: no
//  record, its TTL ran out; one that does not parse, or names another
//  server, is junk).
static int
s_live_add(pk_locator_t *self, s_live_t *live, redisReply *r, char **names, size_t n)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n) {
        self->stats.junk++;
        return 0;
    }
    if (live->n + n > live->cap) {
        size_t cap = live->n + n;
        pk_dir_record_t *v = realloc(live->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        live->v = v;
        live->cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING)
            continue;
        pk_dir_record_t *rec = &live->v[live->n];
        if (pk_dir_record_parse(e->str, e->len, rec) != 0 || strcmp(rec->peer_id, names[i])) {
            self->stats.junk++;
            continue;
        }
        live->n++;
    }
    return 0;
}

//  After every record is in: the index by peer id (views into v).
static int
s_live_index(s_live_t *live)
{
    for (size_t i = 0; i < live->n; i++) {
        const char *id = live->v[i].peer_id;
        pk_key_t view = pk_key_make((const uint8_t *) id, strlen(id));
        if (pk_keymap_put(&live->by_id, &view, i, 0) < 0)
            return -ENOMEM;
    }
    return 0;
}

//  Appends MGET of the records of names[0..n-1]: 0 or -ENOMEM.
static int
s_append_mget(pk_locator_t *self, char **names, size_t n)
{
    const char **argv = malloc((n + 1) * sizeof *argv);
    size_t *lens = malloc((n + 1) * sizeof *lens);
    char (*rec)[PK_DIR_MAX_ID + 64] = malloc(n * sizeof *rec);
    int rc = argv && lens && rec ? 0 : -ENOMEM;
    if (rc == 0) {
        argv[0] = "MGET";
        lens[0] = 4;
        for (size_t i = 0; i < n; i++) {
            int len = pk_dir_record_name(names[i], rec[i], sizeof rec[i]);
            argv[i + 1] = rec[i];
            lens[i + 1] = len > 0 ? (size_t) len : 0;
        }
        rc = pk_dir_append(self->c, (int) n + 1, argv, lens);
    }
    free(argv);
    free(lens);
    free(rec);
    return rc;
}

//  ---------------------------------------------------------------------------
//  One locate

//  The servers' set's members, copied: 0, or -ENOMEM (junk: an empty list).
static int
s_names(pk_locator_t *self, redisReply *r, char ***names_p, size_t *n_p)
{
    *names_p = NULL;
    *n_p = 0;
    if (r->type != REDIS_REPLY_ARRAY) {
        self->stats.junk++;
        return 0;
    }
    char **names = calloc(r->elements ? r->elements : 1, sizeof *names);
    if (!names)
        return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len > PK_DIR_MAX_ID
            || memchr(e->str, 0, e->len)) {
            self->stats.junk++;
            continue;
        }
        if (!(names[n] = strndup(e->str, e->len))) {
            while (n)
                free(names[--n]);
            free(names);
            return -ENOMEM;
        }
        n++;
    }
    *names_p = names;
    *n_p = n;
    return 0;
}

static bool
s_known_has(const pk_locator_t *self, const char *name)
{
    for (size_t i = 0; i < self->nknown; i++)
        if (strcmp(self->known[i], name) == 0)
            return true;
    return false;
}

//  The servers that joined since the last locate: their records, one
//  more round trip.  Then they are known.  0, or a negative errno.
static int
s_newcomers(pk_locator_t *self, s_live_t *live, char **names, size_t n, char *err)
{
    char **fresh = malloc((n ? n : 1) * sizeof *fresh);
    size_t nfresh = 0;
    if (!fresh)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (!s_known_has(self, names[i]))
            fresh[nfresh++] = names[i];
    int rc = 0;
    redisReply *r = NULL;
    if (nfresh && (rc = s_append_mget(self, fresh, nfresh)) == 0) {
        if (pk_dir_replies(self->c, &r, 1, err) != 0)
            rc = s_lost(self, err);
        else {
            self->stats.round_trips++;
            rc = s_live_add(self, live, r, fresh, nfresh);
            freeReplyObject(r);
        }
    }
    free(fresh);
    s_known_free(self);
    self->known = names;
    self->nknown = n;
    return rc;
}

//  Appends SMEMBERS of each key's holder set: 0 or -ENOMEM.
static int
s_append_keys(pk_locator_t *self, const p2pkv_key_t *keys, size_t n)
{
    char name[PK_DIR_KEY_NAME_LEN(PK_MAX_KEY_BYTES)];     //  hiredis copies it
    for (size_t i = 0; i < n; i++) {
        int len = pk_dir_key_name(keys[i].bytes, keys[i].len, name, sizeof name);
        const char *argv[2] = { "SMEMBERS", name };
        size_t lens[2] = { 8, (size_t) len };
        if (pk_dir_append(self->c, 2, argv, lens) != 0)
            return -ENOMEM;
    }
    return 0;
}

//  The round trips of one locate, under the mutex: live filled, and the
//  keys' replies in kr[] (the caller frees them).  0, or a negative errno
//  with err.
static int
s_query(pk_locator_t *self, const p2pkv_key_t *keys, size_t n, s_live_t *live,
        redisReply **kr, char *err)
{
    int rc = s_connected(self, err);
    if (rc)
        return rc;
    size_t lead = self->nknown ? 2 : 1, owed = lead + n;
    redisReply **replies = calloc(owed, sizeof *replies);
    if (!replies)
        return -ENOMEM;
    const char *argv[2] = { "SMEMBERS", PK_DIR_SERVERS };
    size_t lens[2] = { 8, strlen(PK_DIR_SERVERS) };
    if ((self->nknown && s_append_mget(self, self->known, self->nknown) != 0)
        || pk_dir_append(self->c, 2, argv, lens) != 0 || s_append_keys(self, keys, n) != 0)
        rc = -ENOMEM;
    if (rc == 0 && pk_dir_replies(self->c, replies, owed, err) != 0)
        rc = s_lost(self, err);
    if (rc == 0) {
        self->stats.round_trips++;
        if (self->nknown)
            rc = s_live_add(self, live, replies[0], self->known, self->nknown);
    }
    char **names = NULL;
    size_t nnames = 0;
    if (rc == 0 && (rc = s_names(self, replies[lead - 1], &names, &nnames)) == 0)
        rc = s_newcomers(self, live, names, nnames, err);
    if (rc == 0)
        rc = s_live_index(live);
    if (rc == 0)
        memcpy(kr, replies + lead, n * sizeof *kr);
    else
        pk_dir_free_replies(replies + lead, n);
    pk_dir_free_replies(replies, lead);
    free(replies);
    if (rc == -ENOMEM)                      //  replies may be owed: start afresh
        pk_dir_close(&self->c);
    return rc;
}

//  One key's answer to fn: its holders with a live record.
static void
s_answer(const s_live_t *live, redisReply *r, size_t i, p2pkv_holder_t *holders,
         p2pkv_locate_fn *fn, void *arg, p2pkv_directory_stats_t *counts)
{
    size_t nh = 0;
    if (r->type != REDIS_REPLY_ARRAY)
        counts->junk++;             //  another program's key of another type
    for (size_t m = 0; r->type == REDIS_REPLY_ARRAY && m < r->elements; m++) {
        redisReply *e = r->element[m];
        pk_key_t view = pk_key_make((const uint8_t *) e->str, e->len);
        pk_keymap_entry_t *at = e->type == REDIS_REPLY_STRING ? pk_keymap_find(&live->by_id, &view)
                                                              : NULL;
        if (e->type != REDIS_REPLY_STRING)
            counts->junk++;
        else if (!at || nh == live->n)
            counts->stale++;
        else {
            const pk_dir_record_t *rec = &live->v[at->a];
            holders[nh++] = (p2pkv_holder_t) { rec->peer_id, rec->endpoint, rec->host,
                                               rec->block_len, rec->provider, rec->host_id };
        }
    }
    fn(arg, i, holders, nh);
}

int
p2pkv_client_locate(p2pkv_client_t *client, const p2pkv_key_t *keys, size_t n,
                    p2pkv_locate_fn *fn, void *arg, char *err)
{
    pk_locator_t *self = client->locator;
    if (err)
        *err = '\0';
    if (!self)
        return pk_err(err, -EINVAL, "no directory: the client was made without config.directory");
    if (n == 0 || n > PK_MAX_LIST || !keys || !fn)
        return pk_err(err, -EINVAL, "locate: 1..%d keys and a callback", PK_MAX_LIST);
    for (size_t i = 0; i < n; i++)
        if (!keys[i].bytes || keys[i].len < 1 || keys[i].len > PK_MAX_KEY_BYTES)
            return pk_err(err, -EINVAL, "locate: key %zu is not 1..%d bytes", i,
                          PK_MAX_KEY_BYTES);
    s_live_t live = { 0 };
    redisReply **kr = calloc(n, sizeof *kr);
    if (!kr)
        return pk_err(err, -ENOMEM, "out of memory");
    pthread_mutex_lock(&self->mutex);
    //  A connection made by an earlier call may have died since (its node
    //  failed over): that is found only now, so the call connects again
    //  once, to any node the locator knows, before it reports the
    //  directory down.  A connection made by this call is not retried.
    bool had = self->c != NULL;
    int rc = s_query(self, keys, n, &live, kr, err);
    if (rc == -ENOTCONN && had) {
        s_live_fini(&live);
        live = (s_live_t) { 0 };
        if (err)
            *err = '\0';
        rc = s_query(self, keys, n, &live, kr, err);
    }
    pthread_mutex_unlock(&self->mutex);
    p2pkv_directory_stats_t counts = { 0 };
    p2pkv_holder_t *holders = rc == 0 ? malloc((live.n ? live.n : 1) * sizeof *holders) : NULL;
    if (rc == 0 && !holders)
        rc = pk_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++)
        s_answer(&live, kr[i], i, holders, fn, arg, &counts);
    pk_dir_free_replies(kr, n);
    free(holders);
    free(kr);
    s_live_fini(&live);
    pthread_mutex_lock(&self->mutex);
    self->stats.locates += rc == 0;
    self->stats.junk += counts.junk;
    self->stats.stale += counts.stale;
    pthread_mutex_unlock(&self->mutex);
    if (rc && err && !*err)
        (void) pk_err(err, rc, "locate: %s", strerror(-rc));
    return rc;
}

//  A holder that answered key as a miss: its entry goes (one SREM; on the
//  failure path only).  Best effort: a directory down now is left as it is.
void
pk_locator_forget(pk_locator_t *self, const p2pkv_key_t *key, const char *peer_id)
{
    char name[PK_DIR_KEY_NAME_LEN(PK_MAX_KEY_BYTES)];
    int len = pk_dir_key_name(key->bytes, key->len, name, sizeof name);
    const char *argv[3] = { "SREM", name, peer_id };
    size_t lens[3] = { 4, (size_t) len, strlen(peer_id) };
    pthread_mutex_lock(&self->mutex);
    redisReply *r = self->c ? pk_dir_command(self->c, 3, argv, lens) : NULL;
    if (r && r->type == REDIS_REPLY_INTEGER)
        self->stats.corrected += (uint64_t) r->integer;
    if (r)
        freeReplyObject(r);
    else if (self->c)
        s_lost(self, NULL);
    pthread_mutex_unlock(&self->mutex);
}

void
pk_locator_count_failover(pk_locator_t *self)
{
    pthread_mutex_lock(&self->mutex);
    self->stats.failovers++;
    pthread_mutex_unlock(&self->mutex);
}

int
p2pkv_client_directory_stats(p2pkv_client_t *client, p2pkv_directory_stats_t *out)
{
    pk_locator_t *self = client->locator;
    if (!self)
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    *out = self->stats;
    pthread_mutex_unlock(&self->mutex);
    return 0;
}
