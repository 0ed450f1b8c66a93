/*  directory.h: the daemon's side of the cluster directory (issue 14;
    doc/directory.md): an actor that publishes this server's record under
    a TTL refreshed by heartbeat and keeps the set of keys it holds
    current in Redis.

    The store tells it every change (pk_store_watch) inside its critical
    section; the directory copies the key into a bounded queue and
    returns, so the data path costs one short memcpy per change and never
    waits on Redis.  The actor drains the queue every few milliseconds
    into one pipeline per batch (coalesced: a key's last change wins), so
    the directory costs one round trip per batch, never one per block.
    A full queue, a slow Redis (every read and write is bounded by the
    timeout) or a lost one degrades to "no directory": counted, said once
    per change of state, and when Redis answers again the actor resyncs
    from a snapshot of the store.  Leave, or destroy, removes the server
    from Redis.
*/
#ifndef PK_DIRECTORY_H_INCLUDED
#define PK_DIRECTORY_H_INCLUDED

#include "base/counts.h"
#include "cluster/dir_entry.h"
#include "store/store.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct _pk_directory_t pk_directory_t;

typedef void (pk_directory_log_fn)(void *arg, int level, const char *line);

typedef struct {
    const char *url;                //  redis://HOST:PORT[,HOST:PORT...][/DB]
    bool optional;                  //  no Redis at start: a warning, retried
    pk_dir_record_t record;         //  what the server publishes about itself
    double ttl;                     //  the record's TTL (3 s); heartbeat at a third
    double timeout;                 //  bound on connect and each read or write (1 s)
    size_t queue_bytes;             //  the queue's room (4 MiB); full: a resync
    double batch_interval;          //  the actor drains the queue this often (0.002 s)
    pk_directory_log_fn *log;       //  level as PK_LOG_* (0 error .. 3 debug)
    void *log_arg;
} pk_directory_config_t;

/*  The actor's counts, each with its metric (base/counts.h;
    metric_families.h): up is 1 while connected and in sync (resync
    done), else 0.  A new count is a row here and its lines in
    directory.c (the count, and its line in pk_directory_stats).  */
#define PK_DIRECTORY_COUNTS(M, F) \
    M(up, DIRECTORY_UP, "p2pkv_directory_up", GAUGE, \
      "1 while the directory (--directory) is connected and in sync, else 0", NONE) \
    M(updates, DIRECTORY_UPDATES, "p2pkv_directory_updates_total", COUNTER, \
      "Key additions and removals sent to the directory", NONE) \
    M(batches, DIRECTORY_BATCHES, "p2pkv_directory_batches_total", COUNTER, \
      "Pipelines (one round trip each) that carried them", NONE) \
    M(dropped, DIRECTORY_DROPPED, "p2pkv_directory_dropped_total", COUNTER, \
      "Changes lost to a full directory queue, then covered by a resync", NONE) \
    M(errors, DIRECTORY_ERRORS, "p2pkv_directory_errors_total", COUNTER, \
      "Directory connections refused or lost", NONE) \
    M(junk, DIRECTORY_JUNK, "p2pkv_directory_junk_total", COUNTER, \
      "Directory entries that did not parse, ignored", NONE) \
    M(resyncs, DIRECTORY_RESYNCS, "p2pkv_directory_resyncs_total", COUNTER, \
      "Whole pools republished to the directory", NONE)

typedef struct {
    PK_DIRECTORY_COUNTS(PK_COUNT_FIELD, PK_COUNT_FIELD_ONLY)
} pk_directory_stats_t;

/*  Parses the URL, connects (unless optional, a failure is the error),
    publishes the record and the store's keys, watches the store, and
    starts the actor.  NULL with *rc_p and err (PK_ERRLEN bytes).  */
pk_directory_t *pk_directory_new(const pk_directory_config_t *config, pk_store_t *store,
                                 int *rc_p, char *err);

/*  Stops watching the store, stops the actor, and (connected) removes
    the server's record and its keys' entries.  */
void pk_directory_destroy(pk_directory_t **self_p);

/*  Leaves the directory without waiting (a drain's start, SIGTERM): the
    store is no longer watched, and the actor removes the server's record
    and its keys' entries, then publishes nothing more.  The caller's
    thread only.  */
void pk_directory_leave(pk_directory_t *self);

/*  Whether the leave is done: the goodbye sent, or given up (no Redis).  */
bool pk_directory_left(pk_directory_t *self);

/*  Counters so far; any thread.  */
void pk_directory_stats(pk_directory_t *self, pk_directory_stats_t *out);

/*  Waits up to timeout seconds for everything queued so far to be in
    Redis: 0, or -ETIMEDOUT (also while Redis is down).  For tests and
    the bench.  */
int pk_directory_flush(pk_directory_t *self, double timeout);

#endif
