/*  directory.c: the daemon's directory actor (directory.h; the data
    model is doc/directory.md).

    Two halves.  The queue: the store's watch (s_watch) runs inside the
    store's critical section on whichever thread changed it, and copies
    the change into a byte ring of fixed room under the queue's own
    mutex (one memcpy; a full ring sets the overflow flag and counts
    the change as dropped).  The actor: a zactor thread that owns the
    hiredis connection and, every batch_interval, takes what is queued,
    coalesces it (a key's last change wins) and sends it as one
    pipeline: per key one SADD or SREM of its holder set, plus one
    variadic SADD and one SREM of the server's own index.  Heartbeats
    (the record's TTL), resyncs (after start, a lost Redis or an
    overflow) and the goodbye (LEAVE, or at destroy) run on the same
    thread.

    Words, caller -> actor: LEAVE (the goodbye now, then nothing more is
    published), $TERM (zactor).
*/
#include "daemon/directory.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/keymap.h"
#include "base/thread.h"
#include "cluster/dir_redis.h"

#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  Changes per pipeline: 8,192 keys of 32 bytes are ~1 MB of commands,
//  a millisecond or two for Redis, and few enough replies to hold.
#define S_BATCH 8192
#define S_REC_HEAD 11               //  added (1), length (2), sequence (8)

struct _pk_directory_t {
    pk_directory_config_t config;
    char *url;                      //  config.url points here
    pk_dir_url_t where;
    pk_store_t *store;
    char rec_name[PK_DIR_MAX_ID + 64], held_name[PK_DIR_MAX_ID + 64];
    char *record;                   //  the record's JSON
    //  the queue, store threads -> actor, under mutex
    pthread_mutex_t mutex;
    uint8_t *ring;
    size_t cap;
    uint64_t head, tail;            //  byte positions; tail - head in use
    uint64_t seen;                  //  changes told by the store, dropped included
    uint64_t snap_seen;             //  seen at the last snapshot
    bool overflow;
    //  the actor
    zactor_t *actor;
    pk_dir_conn_t *first;           //  the connection new made, handed over
    atomic_uint_fast64_t applied;   //  changes up to this sequence are in Redis
    atomic_bool up;
    atomic_bool left;               //  LEAVE's goodbye done (or given up)
    atomic_uint_fast64_t updates, batches, dropped, errors, junk, resyncs;
};

static void
s_log(pk_directory_t *self, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
s_log(pk_directory_t *self, int level, const char *fmt, ...)
{
    char line[PK_ERRLEN + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (self->config.log)
        self->config.log(self->config.log_arg, level, line);
    else
        fprintf(stderr, "p2pkv-server: %s\n", line);
}

//  ---------------------------------------------------------------------------
//  The queue

static void
s_ring_put(pk_directory_t *self, const void *data, size_t len)
{
    size_t at = (size_t) (self->tail % self->cap);
    size_t first = len < self->cap - at ? len : self->cap - at;
    memcpy(self->ring + at, data, first);
    memcpy(self->ring, (const uint8_t *) data + first, len - first);
    self->tail += len;
}

static void
s_ring_get(pk_directory_t *self, void *data, size_t len)
{
    size_t at = (size_t) (self->head % self->cap);
    size_t first = len < self->cap - at ? len : self->cap - at;
    memcpy(data, self->ring + at, first);
    memcpy((uint8_t *) data + first, self->ring, len - first);
    self->head += len;
}

//  The store's watch, inside its critical section: one copy, never a wait
//  on Redis.
static void
s_watch(void *arg, bool added, const pk_key_t *key)
{
    pk_directory_t *self = arg;
    pthread_mutex_lock(&self->mutex);
    uint64_t seq = ++self->seen;
    size_t need = S_REC_HEAD + key->len;
    if (self->overflow || self->cap - (size_t) (self->tail - self->head) < need) {
        self->overflow = true;
        atomic_fetch_add(&self->dropped, 1);
    }
    else {
        uint8_t head[S_REC_HEAD] = { added, (uint8_t) key->len, (uint8_t) (key->len >> 8) };
        memcpy(head + 3, &seq, sizeof seq);
        s_ring_put(self, head, sizeof head);
        s_ring_put(self, key->bytes, key->len);
    }
    pthread_mutex_unlock(&self->mutex);
}

//  A snapshot's start (store lock held): what was queued is in it.
static void
s_snap_begin(void *arg)
{
    pk_directory_t *self = arg;
    pthread_mutex_lock(&self->mutex);
    self->head = self->tail;
    self->overflow = false;
    self->snap_seen = self->seen;
    pthread_mutex_unlock(&self->mutex);
}

//  ---------------------------------------------------------------------------
//  The actor's state

typedef struct {
    bool added;
    uint16_t name_len;
    char *name;                     //  "p2pkv:key:HEX" in the batch's names
} s_change_t;

typedef struct {
    pk_directory_t *dir;
    zsock_t *pipe;
    pk_dir_conn_t *c;
    bool need_resync;
    bool left;                      //  after LEAVE: nothing more is published
    double retry_at, next_beat, last_beat_ok;
    //  a batch: records copied out of the ring, then coalesced
    uint8_t *raw;                   //  the records, contiguous
    size_t raw_cap;
    char *names;                    //  every change's key name
    size_t names_cap;
    s_change_t *changes;
    size_t nchanges, changes_cap;
    pk_keymap_t last;               //  key name -> its last change
    const char **argv;              //  a pipeline's arguments
    size_t *argvlen;
    size_t argv_cap;
    redisReply **replies;
    size_t replies_cap;
    //  a resync's snapshot: the store's keys' names, NUL-separated
    char *snap;
    size_t snap_len, snap_cap, nsnap;
    bool snap_failed;
} self_t;

static int
s_grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * size);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

//  Room for a pipeline of argc arguments and nreplies replies.
static int
s_room(self_t *self, size_t argc, size_t nreplies)
{
    if (argc > self->argv_cap) {
        size_t n = argc < 1024 ? 1024 : argc * 2;
        const char **argv = realloc(self->argv, n * sizeof *argv);
        if (argv)
            self->argv = argv;
        size_t *lens = argv ? realloc(self->argvlen, n * sizeof *lens) : NULL;
        if (!lens)
            return -ENOMEM;
        self->argvlen = lens;
        self->argv_cap = n;
    }
    return s_grow((void **) &self->replies, &self->replies_cap, nreplies,
                  sizeof *self->replies);
}

static void
s_self_destroy(self_t **self_p)
{
    self_t *self = *self_p;
    if (!self)
        return;
    pk_dir_close(&self->c);
    free(self->raw);
    free(self->names);
    free(self->changes);
    pk_keymap_fini(&self->last);
    free(self->argv);
    free(self->argvlen);
    free(self->replies);
    free(self->snap);
    free(self);
    *self_p = NULL;
}

//  ---------------------------------------------------------------------------
//  Pipelines: commands appended to hiredis's output buffer, then every
//  reply read at once, one round trip


//  Appends one command; the reply is read by s_sync.
static int
s_cmd(self_t *self, size_t *owed, int argc, const char **argv, const size_t *lens)
{
    if (pk_dir_append(self->c, argc, argv, lens) != 0)
        return -ENOMEM;
    (*owed)++;
    return 0;
}

static void s_down(self_t *self, const char *why);

//  Reads the owed replies: error replies (a key of another type under our
//  name) are junk, counted and ignored; a failed connection is -EIO and
//  the directory is down.
static int
s_sync(self_t *self, size_t *owed)
{
    pk_directory_t *dir = self->dir;
    for (; *owed; (*owed)--) {
        redisReply *r = NULL;
        if (pk_dir_next_reply(self->c, &r, NULL) != 0) {
            *owed = 0;
            s_down(self, pk_dir_error(self->c));
            return -EIO;
        }
        if (r->type == REDIS_REPLY_ERROR)
            atomic_fetch_add(&dir->junk, 1);
        freeReplyObject(r);
    }
    return 0;
}

//  A three-argument command: VERB NAME VALUE.
static int
s_cmd3(self_t *self, size_t *owed, const char *verb, const char *name, size_t name_len,
       const char *value, size_t value_len)
{
    const char *argv[3] = { verb, name, value };
    size_t lens[3] = { strlen(verb), name_len, value_len };
    return s_cmd(self, owed, 3, argv, lens);
}

//  ---------------------------------------------------------------------------
//  Connection and heartbeat

static void
s_down(self_t *self, const char *reason)
{
    pk_directory_t *dir = self->dir;
    char why[PK_ERRLEN];            //  reason may be the context's, freed below
    snprintf(why, sizeof why, "%s", reason && *reason ? reason : "no answer");
    pk_dir_close(&self->c);
    self->c = NULL;
    atomic_fetch_add(&dir->errors, 1);
    if (atomic_exchange(&dir->up, false) || !self->need_resync)
        s_log(dir, 1, "directory %s: down (%.200s): serving without it, retrying every %g s",
              dir->url, why, dir->config.timeout);
    self->need_resync = true;
    self->retry_at = pk_clock_monotonic() + dir->config.timeout;
}

static void
s_connect(self_t *self)
{
    pk_directory_t *dir = self->dir;
    char err[PK_ERRLEN];
    self->c = pk_dir_connect(&dir->where, dir->url, dir->config.timeout, err);
    if (!self->c) {
        atomic_fetch_add(&dir->errors, 1);
        self->retry_at = pk_clock_monotonic() + dir->config.timeout;
        return;
    }
    s_log(dir, 2, "directory %s: connected; publishing the pool", dir->url);
    self->need_resync = true;
}

//  The record under its TTL, and our name in the servers' set.  A record
//  that may have lapsed (no heartbeat for a TTL) may have let consumers
//  drop our entries: resync.
static int
s_beat(self_t *self)
{
    pk_directory_t *dir = self->dir;
    double now = pk_clock_monotonic();
    char ttl[32];
    snprintf(ttl, sizeof ttl, "%lld", (long long) (dir->config.ttl * 1e3));
    const char *argv[5] = { "SET", dir->rec_name, dir->record, "PX", ttl };
    size_t lens[5] = { 3, strlen(dir->rec_name), strlen(dir->record), 2, strlen(ttl) };
    const char *peer = dir->config.record.peer_id;
    size_t owed = 0;
    if (s_cmd(self, &owed, 5, argv, lens) != 0
        || s_cmd3(self, &owed, "SADD", PK_DIR_SERVERS, strlen(PK_DIR_SERVERS), peer,
                  strlen(peer)) != 0
        || s_sync(self, &owed) != 0)
        return -EIO;
    //  every primary, not only the records': one whose death we would
    //  otherwise meet only at our next write there (dir_redis.h)
    char err[PK_ERRLEN];
    if (pk_dir_is_cluster(self->c) && pk_dir_ping_all(self->c, err) != 0) {
        s_down(self, err);
        return -EIO;
    }
    if (self->last_beat_ok && now - self->last_beat_ok >= dir->config.ttl)
        self->need_resync = true;
    self->last_beat_ok = now;
    self->next_beat = now + dir->config.ttl / 3;
    return 0;
}

//  Between the chunks of a long resync or goodbye: the heartbeat when it
//  is due, so a large pool's republication never lets the record lapse
//  (which would start the resync over).  0 or -EIO.
static int
s_beat_due(self_t *self)
{
    return pk_clock_monotonic() >= self->next_beat ? s_beat(self) : 0;
}

//  ---------------------------------------------------------------------------
//  Batches

//  Copies up to S_BATCH records out of the ring: their count, with the
//  last one's sequence in *seq_p.  raw has the ring's room, so this only
//  copies under the queue's mutex.
static size_t
s_take(self_t *self, size_t *raw_len, uint64_t *seq_p)
{
    pk_directory_t *dir = self->dir;
    size_t n = 0, len = 0;
    pthread_mutex_lock(&dir->mutex);
    while (n < S_BATCH && dir->tail != dir->head) {
        uint8_t *rec = self->raw + len;
        s_ring_get(dir, rec, S_REC_HEAD);
        size_t klen = rec[1] | (size_t) rec[2] << 8;
        s_ring_get(dir, rec + S_REC_HEAD, klen);
        memcpy(seq_p, rec + 3, sizeof *seq_p);
        len += S_REC_HEAD + klen;
        n++;
    }
    pthread_mutex_unlock(&dir->mutex);
    *raw_len = len;
    return n;
}

//  The batch's changes, a key's last one winning: each with its key's
//  name.  0 or -ENOMEM.
static int
s_coalesce(self_t *self, size_t raw_len)
{
    size_t names = 0;
    for (size_t at = 0; at < raw_len;) {
        size_t klen = self->raw[at + 1] | (size_t) self->raw[at + 2] << 8;
        names += PK_DIR_KEY_NAME_LEN(klen);
        at += S_REC_HEAD + klen;
    }
    if (s_grow((void **) &self->names, &self->names_cap, names, 1)
        || s_grow((void **) &self->changes, &self->changes_cap, S_BATCH, sizeof *self->changes))
        return -ENOMEM;
    pk_keymap_clear(&self->last);
    self->nchanges = 0;
    char *name = self->names;
    for (size_t at = 0; at < raw_len;) {
        uint8_t *rec = self->raw + at;
        size_t klen = rec[1] | (size_t) rec[2] << 8;
        at += S_REC_HEAD + klen;
        pk_key_t key = pk_key_make(rec + S_REC_HEAD, klen);
        pk_keymap_entry_t *e;
        int rc = pk_keymap_get_or_put(&self->last, &key, self->nchanges, 0, &e);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            self->changes[e->a].added = rec[0];
            continue;
        }
        int nlen = pk_dir_key_name(rec + S_REC_HEAD, klen, name, PK_DIR_KEY_NAME_LEN(klen));
        self->changes[self->nchanges++] = (s_change_t) { rec[0], (uint16_t) nlen, name };
        name += nlen + 1;
    }
    return 0;
}

//  One variadic command on the server's own index: SADD or SREM of the
//  changes' keys (hex) that were added, or removed.
static int
s_cmd_held(self_t *self, size_t *owed, bool added)
{
    pk_directory_t *dir = self->dir;
    size_t argc = 2;
    for (size_t i = 0; i < self->nchanges; i++)
        if (self->changes[i].added == added) {
            self->argv[argc] = self->changes[i].name + sizeof PK_DIR_KEY_PREFIX - 1;
            self->argvlen[argc++] = self->changes[i].name_len - (sizeof PK_DIR_KEY_PREFIX - 1);
        }
    if (argc == 2)
        return 0;
    self->argv[0] = added ? "SADD" : "SREM";
    self->argvlen[0] = 4;
    self->argv[1] = dir->held_name;
    self->argvlen[1] = strlen(dir->held_name);
    return s_cmd(self, owed, (int) argc, self->argv, self->argvlen);
}

//  Sends one batch as one pipeline: the keys' holder sets, then our
//  index.  The count of changes taken (0: nothing queued), or -EIO.
static int
s_batch(self_t *self)
{
    pk_directory_t *dir = self->dir;
    size_t raw_len;
    uint64_t seq = 0;
    size_t n = s_take(self, &raw_len, &seq);
    if (n == 0)
        return 0;
    if (s_coalesce(self, raw_len) != 0 || s_room(self, 2 + self->nchanges, 0) != 0) {
        self->need_resync = true;       //  out of memory: the changes are lost
        return -ENOMEM;
    }
    const char *peer = dir->config.record.peer_id;
    size_t owed = 0;
    int rc = 0;
    for (size_t i = 0; i < self->nchanges && rc == 0; i++)
        rc = s_cmd3(self, &owed, self->changes[i].added ? "SADD" : "SREM",
                    self->changes[i].name, self->changes[i].name_len, peer, strlen(peer));
    if (rc == 0)
        rc = s_cmd_held(self, &owed, true);
    if (rc == 0)
        rc = s_cmd_held(self, &owed, false);
    if (rc == 0)
        rc = s_sync(self, &owed);
    if (rc == -ENOMEM)
        s_down(self, "out of memory");
    if (rc != 0)
        return rc;              //  down: the resync when it is back covers them
    atomic_fetch_add(&dir->updates, n);
    atomic_fetch_add(&dir->batches, 1);
    if (seq > atomic_load(&dir->applied))
        atomic_store(&dir->applied, seq);
    return (int) n;
}

//  ---------------------------------------------------------------------------
//  Resync: the store's snapshot against our index in Redis

typedef struct {
    pk_directory_t *dir;
    self_t *self;
} s_snap_arg_t;

static void
s_snap_begin_arg(void *arg)
{
    s_snap_arg_t *a = arg;
    s_snap_begin(a->dir);
    a->self->snap_len = a->self->nsnap = 0;
    a->self->snap_failed = false;
}

//  One READY key (store lock held): its name appended.
static void
s_snap_key(void *arg, bool added, const pk_key_t *key)
{
    self_t *self = ((s_snap_arg_t *) arg)->self;
    size_t need = PK_DIR_KEY_NAME_LEN(key->len);
    if (self->snap_failed
        || s_grow((void **) &self->snap, &self->snap_cap, self->snap_len + need, 1) != 0) {
        self->snap_failed = true;
        return;
    }
    pk_dir_key_name(key->bytes, key->len, self->snap + self->snap_len, need);
    self->snap_len += need;
    self->nsnap++;
}

//  Whether a member of our index is a key's hex (else it is junk).
static bool
s_hex_ok(const char *s, size_t len)
{
    if (len == 0 || len % 2 || len > 2 * PK_MAX_KEY_BYTES)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

//  Every member of our index (SMEMBERS, one round trip): the reply, or
//  NULL (down, or junk under our name, then deleted).
static redisReply *
s_index(self_t *self)
{
    pk_directory_t *dir = self->dir;
    const char *argv[2] = { "SMEMBERS", dir->held_name };
    size_t lens[2] = { 8, strlen(dir->held_name) };
    redisReply *r = pk_dir_command(self->c, 2, argv, lens);
    if (!r) {
        s_down(self, pk_dir_error(self->c));
        return NULL;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
        atomic_fetch_add(&dir->junk, 1);
        freeReplyObject(r);
        argv[0] = "DEL";
        lens[0] = 3;
        r = pk_dir_command(self->c, 2, argv, lens);
        if (r)
            freeReplyObject(r);
        else
            s_down(self, pk_dir_error(self->c));
        return NULL;
    }
    return r;
}

//  Removes our name from the holder sets of the index's keys that keep is
//  without (all of them when keep is NULL), and those keys from the
//  index: pipelines of S_BATCH.  0 or -EIO.
static int
s_unpublish(self_t *self, redisReply *index, const pk_keymap_t *keep)
{
    pk_directory_t *dir = self->dir;
    const char *peer = dir->config.record.peer_id;
    char name[PK_DIR_KEY_NAME_LEN(PK_MAX_KEY_BYTES)];
    size_t owed = 0;
    for (size_t i = 0; i < index->elements; i++) {
        redisReply *m = index->element[i];
        bool ok = m->type == REDIS_REPLY_STRING && s_hex_ok(m->str, m->len);
        if (ok) {
            pk_key_t view = pk_key_make((const uint8_t *) m->str, m->len);
            if (keep && pk_keymap_find(keep, &view))
                continue;
            memcpy(name, PK_DIR_KEY_PREFIX, sizeof PK_DIR_KEY_PREFIX - 1);
            memcpy(name + sizeof PK_DIR_KEY_PREFIX - 1, m->str, m->len);
            if (s_cmd3(self, &owed, "SREM", name, sizeof PK_DIR_KEY_PREFIX - 1 + m->len, peer,
                       strlen(peer)) != 0)
                return -EIO;
        }
        else
            atomic_fetch_add(&dir->junk, 1);
        if (m->type == REDIS_REPLY_STRING
            && s_cmd3(self, &owed, "SREM", dir->held_name, strlen(dir->held_name), m->str,
                      m->len) != 0)
            return -EIO;
        if (owed >= S_BATCH && (s_sync(self, &owed) != 0 || s_beat_due(self) != 0))
            return -EIO;
    }
    return s_sync(self, &owed);
}

//  Publishes the snapshot: per chunk of S_BATCH keys, their holder sets
//  and one variadic SADD of our index, one round trip.  0 or -EIO.
static int
s_publish(self_t *self)
{
    pk_directory_t *dir = self->dir;
    const char *peer = dir->config.record.peer_id;
    if (s_room(self, 2 + S_BATCH, 0) != 0)
        return -ENOMEM;
    size_t owed = 0, argc = 2;
    const char *name = self->snap;
    for (size_t i = 0; i < self->nsnap; i++, name += strlen(name) + 1) {
        size_t len = strlen(name);
        if (s_cmd3(self, &owed, "SADD", name, len, peer, strlen(peer)) != 0)
            return -EIO;
        self->argv[argc] = name + sizeof PK_DIR_KEY_PREFIX - 1;
        self->argvlen[argc++] = len - (sizeof PK_DIR_KEY_PREFIX - 1);
        if (argc == 2 + S_BATCH || i + 1 == self->nsnap) {
            self->argv[0] = "SADD";
            self->argvlen[0] = 4;
            self->argv[1] = dir->held_name;
            self->argvlen[1] = strlen(dir->held_name);
            if (s_cmd(self, &owed, (int) argc, self->argv, self->argvlen) != 0
                || s_sync(self, &owed) != 0 || s_beat_due(self) != 0)
                return -EIO;
            argc = 2;
        }
    }
    return 0;
}

//  The whole pool, republished: the record first (consumers trust
//  holders with a live record only), then our index made equal to a
//  snapshot of the store: entries of keys we no longer hold removed,
//  every key held added.  The queue's changes after the snapshot follow
//  as batches.  Runs after connecting, after a lapse, after an overflow.
static void
s_resync(self_t *self)
{
    pk_directory_t *dir = self->dir;
    s_snap_arg_t arg = { dir, self };
    pk_store_snapshot(dir->store, s_snap_begin_arg, s_snap_key, &arg);
    pk_keymap_t keep = PK_KEYMAP_INIT;
    int rc = self->snap_failed || pk_keymap_reserve(&keep, self->nsnap) ? -ENOMEM : 0;
    const char *name = self->snap;
    for (size_t i = 0; rc == 0 && i < self->nsnap; i++, name += strlen(name) + 1) {
        const char *hex = name + sizeof PK_DIR_KEY_PREFIX - 1;
        pk_key_t view = pk_key_make((const uint8_t *) hex, strlen(hex));
        rc = pk_keymap_put(&keep, &view, 0, 0) < 0 ? -ENOMEM : 0;
    }
    if (rc == 0)
        rc = s_beat(self);
    redisReply *index = rc == 0 && self->c ? s_index(self) : NULL;
    if (index)
        rc = s_unpublish(self, index, &keep);
    if (index)
        freeReplyObject(index);
    if (rc == 0 && self->c)
        rc = s_publish(self);
    pk_keymap_fini(&keep);
    if (rc != 0 && self->c)
        s_down(self, "out of memory");
    if (rc != 0 || !self->c)
        return;
    self->need_resync = false;
    atomic_fetch_add(&dir->resyncs, 1);
    pthread_mutex_lock(&dir->mutex);
    uint64_t upto = dir->snap_seen;
    pthread_mutex_unlock(&dir->mutex);
    if (upto > atomic_load(&dir->applied))
        atomic_store(&dir->applied, upto);
    if (!atomic_exchange(&dir->up, true))
        s_log(dir, 2, "directory %s: up, %zu keys published", dir->url, self->nsnap);
}

//  At a clean exit: every entry of ours, our record and our name gone.
static void
s_goodbye(self_t *self)
{
    pk_directory_t *dir = self->dir;
    redisReply *index = s_index(self);
    int rc = index ? s_unpublish(self, index, NULL) : 0;
    if (index)
        freeReplyObject(index);
    const char *peer = dir->config.record.peer_id;
    size_t owed = 0;
    if (rc == 0 && self->c) {
        const char *del[3] = { "DEL", dir->held_name, dir->rec_name };
        size_t lens[3] = { 3, strlen(dir->held_name), strlen(dir->rec_name) };
        if (s_cmd(self, &owed, 3, del, lens) == 0
            && s_cmd3(self, &owed, "SREM", PK_DIR_SERVERS, strlen(PK_DIR_SERVERS), peer,
                      strlen(peer)) == 0)
            s_sync(self, &owed);
    }
    if (self->c)
        s_log(dir, 2, "directory %s: removed this server", dir->url);
}

//  ---------------------------------------------------------------------------
//  The actor

//  LEAVE (a drain's start): the goodbye now, one connect tried first if
//  Redis was lost (else the record ends with its TTL), and from then on
//  no heartbeat and no batch: what the store changes after it, nobody
//  will find here.  The store no longer tells the queue (pk_directory_leave).
static void
s_leave(self_t *self)
{
    pk_directory_t *dir = self->dir;
    char err[PK_ERRLEN] = "no connection";
    if (!self->c)
        self->c = pk_dir_connect(&dir->where, dir->url, dir->config.timeout, err);
    if (self->c)
        s_goodbye(self);
    else
        s_log(dir, 1, "directory %s: cannot leave (%.200s): this server's record ends with "
              "its TTL", dir->url, err);
    self->left = true;
    atomic_store(&dir->up, false);
    atomic_store(&dir->left, true);
}

static void
s_step(self_t *self)
{
    pk_directory_t *dir = self->dir;
    double now = pk_clock_monotonic();
    if (self->left)
        return;
    if (!self->c && now >= self->retry_at)
        s_connect(self);
    pthread_mutex_lock(&dir->mutex);
    bool overflow = dir->overflow;
    pthread_mutex_unlock(&dir->mutex);
    if (self->c && (self->need_resync || overflow))
        s_resync(self);
    if (self->c && now >= self->next_beat)
        s_beat(self);
    //  a bounded number of batches per wake, so $TERM is heard
    for (int i = 0; self->c && i < 16 && s_batch(self) > 0; i++)
        ;
}

static void
s_actor(zsock_t *pipe, void *args)
{
    pk_thread_block_signals();
    pk_directory_t *dir = args;
    self_t *self = calloc(1, sizeof *self);
    if (self) {
        self->dir = dir;
        self->pipe = pipe;
        self->c = dir->first;
        dir->first = NULL;
        self->need_resync = true;
        self->last = (pk_keymap_t) PK_KEYMAP_INIT;
        self->raw = malloc(dir->cap);
        if (!self->raw)
            s_self_destroy(&self);
    }
    if (!self)
        pk_dir_close(&dir->first);
    dir->first = NULL;
    zsock_signal(pipe, 0);
    zpoller_t *poller = self ? zpoller_new(pipe, NULL) : NULL;
    int ms = (int) (dir->config.batch_interval * 1e3);
    while (poller) {
        s_step(self);
        if (zpoller_wait(poller, ms > 0 ? ms : 1)) {
            char *cmd = zstr_recv(pipe);
            bool term = !cmd || streq(cmd, "$TERM");
            if (cmd && streq(cmd, "LEAVE") && !self->left)
                s_leave(self);
            zstr_free(&cmd);
            if (term)
                break;
        }
        else if (zpoller_terminated(poller))
            break;
    }
    zpoller_destroy(&poller);
    if (self && self->c && !self->left)
        s_goodbye(self);
    s_self_destroy(&self);
}

//  ---------------------------------------------------------------------------
//  Construction

static const pk_directory_config_t s_defaults = {
    .ttl = 3.0, .timeout = 1.0, .queue_bytes = 4u << 20, .batch_interval = 0.002,
};

//  The configuration with defaults filled in, the URL parsed and the
//  names made: 0, or -EINVAL / -ENOMEM with err.
static int
s_configure(pk_directory_t *self, const pk_directory_config_t *config, char *err)
{
    self->config = *config;
    pk_directory_config_t *c = &self->config;
    if (!(c->ttl > 0))
        c->ttl = s_defaults.ttl;
    if (!(c->timeout > 0))
        c->timeout = s_defaults.timeout;
    if (c->queue_bytes < 2 * (S_REC_HEAD + PK_MAX_KEY_BYTES))
        c->queue_bytes = s_defaults.queue_bytes;
    if (!(c->batch_interval > 0))
        c->batch_interval = s_defaults.batch_interval;
    int rc = pk_dir_url_parse(config->url, &self->where, err);
    if (rc)
        return rc;
    self->cap = c->queue_bytes;
    self->url = strdup(config->url);
    self->record = pk_dir_record_encode(&c->record);
    self->ring = malloc(self->cap);
    if (!self->url || !self->record || !self->ring)
        return pk_err(err, -ENOMEM, "out of memory");
    c->url = self->url;
    if (pk_dir_record_name(c->record.peer_id, self->rec_name, sizeof self->rec_name) < 0
        || pk_dir_held_name(c->record.peer_id, self->held_name, sizeof self->held_name) < 0)
        return pk_err(err, -EINVAL, "directory: peer id too long");
    return 0;
}

static void
s_free(pk_directory_t *self)
{
    free(self->url);
    free(self->record);
    free(self->ring);
    pthread_mutex_destroy(&self->mutex);
    free(self);
}

pk_directory_t *
pk_directory_new(const pk_directory_config_t *config, pk_store_t *store, int *rc_p, char *err)
{
    pk_directory_t *self = calloc(1, sizeof *self);
    if (!self)
        return pk_err_null(rc_p, pk_err(err, -ENOMEM, "out of memory"));
    pthread_mutex_init(&self->mutex, NULL);
    self->store = store;
    int rc = s_configure(self, config, err);
    if (rc)
        goto fail;
    //  At start a Redis that is not there is the operator's mistake,
    //  unless they said it is optional: then a warning, and the actor
    //  keeps trying.
    char why[PK_ERRLEN];
    self->first = pk_dir_connect(&self->where, self->url, self->config.timeout, why);
    if (!self->first && !self->config.optional) {
        rc = pk_err(err, -ENOTCONN, "%s", why);
        goto fail;
    }
    if (!self->first) {
        s_log(self, 1, "%s (--directory-optional: serving without it, retrying)", why);
        atomic_fetch_add(&self->errors, 1);
    }
    pk_store_watch(store, s_watch, self);
    self->actor = zactor_new(s_actor, self);
    if (!self->actor) {
        pk_store_watch(store, NULL, NULL);
        rc = pk_err(err, -ENOMEM, "directory: cannot start its thread");
        goto fail;
    }
    if (rc_p)
        *rc_p = 0;
    return self;

fail:
    pk_dir_close(&self->first);
    s_free(self);
    return pk_err_null(rc_p, rc);
}

void
pk_directory_destroy(pk_directory_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_directory_t *self = *self_p;
    pk_store_watch(self->store, NULL, NULL);
    zactor_destroy(&self->actor);           //  its goodbye runs first
    s_free(self);
    *self_p = NULL;
}

void
pk_directory_leave(pk_directory_t *self)
{
    pk_store_watch(self->store, NULL, NULL);
    zstr_send(self->actor, "LEAVE");
}

bool
pk_directory_left(pk_directory_t *self)
{
    return atomic_load(&self->left);
}

void
pk_directory_stats(pk_directory_t *self, pk_directory_stats_t *out)
{
    *out = (pk_directory_stats_t) {
        .up = atomic_load(&self->up),
        .updates = atomic_load(&self->updates),
        .batches = atomic_load(&self->batches),
        .dropped = atomic_load(&self->dropped),
        .errors = atomic_load(&self->errors),
        .junk = atomic_load(&self->junk),
        .resyncs = atomic_load(&self->resyncs),
    };
}

int
pk_directory_flush(pk_directory_t *self, double timeout)
{
    pthread_mutex_lock(&self->mutex);
    uint64_t target = self->seen;
    pthread_mutex_unlock(&self->mutex);
    double deadline = pk_clock_monotonic() + timeout;
    while (!(atomic_load(&self->up) && atomic_load(&self->applied) >= target)) {
        if (pk_clock_monotonic() >= deadline)
            return -ETIMEDOUT;
        zclock_sleep(1);
    }
    return 0;
}
