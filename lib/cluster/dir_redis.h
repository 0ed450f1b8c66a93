/*  dir_redis.h: one synchronous connection to the directory, as the
    daemon's directory thread and the client's locate both use it: to one
    Redis, or to a Redis Cluster.

    Synchronous on purpose: each user owns its connection on a thread of
    its own (the daemon's actor) or under its own lock (the client), so
    nothing of the data path ever waits on it, and a pipeline is simply
    every command appended, then every reply read: one round trip.
    Every read and write is bounded by the connection's timeout: a Redis
    slower than that counts as down.

    A Cluster is found at connect: a node of the URL answers CLUSTER SLOTS
    (a Redis without Cluster refuses it, and is used as one node).  Each
    command then goes to the primary of its first key's slot, one
    connection per primary; a pipeline becomes one sub-pipeline per node,
    all written before any reply is read, so it still takes one round trip
    of wall time.  Every command we send names one slot (doc/directory.md:
    the records and the servers' set share a hash tag).  A MOVED or ASK
    answer (the Cluster is resharding), CLUSTERDOWN or TRYAGAIN (it is
    failing over) fails the connection like a lost one: its user drops
    it, and the next connect learns the slots again from any node it
    knows, the URL's seeds or those the Cluster named.
    hiredis 0.14 has no Cluster client; this is the part of one we need.
*/
#ifndef PK_DIR_REDIS_H_INCLUDED
#define PK_DIR_REDIS_H_INCLUDED

#include "cluster/dir_entry.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>

typedef struct _pk_dir_conn_t pk_dir_conn_t;

/*  Connects within timeout seconds (also the bound on every later read
    and write), checks the answer to PING, and selects url's DB (one
    Redis) or learns the slots (a Cluster, whose only DB is 0: another is
    refused).  url's nodes are tried in turn, from the one that answered
    last; a Cluster's own list of nodes (primaries and replicas) is kept
    in url after its seeds, for the next connect: the caller keeps url
    for the life of its connections.  NULL with err (PK_ERRLEN bytes)
    naming the directory (text, the URL as given) and what failed.  */
pk_dir_conn_t *pk_dir_connect(pk_dir_url_t *url, const char *text, double timeout,
                              char *err);
void pk_dir_close(pk_dir_conn_t **self_p);

/*  True when it speaks to a Cluster; its primaries.  */
bool pk_dir_is_cluster(const pk_dir_conn_t *self);
size_t pk_dir_nodes(const pk_dir_conn_t *self);

/*  Appends one command of argc arguments (lengths given: keys are
    binary-safe; argv[1] is the key that routes it) to the pipeline: 0 or
    -ENOMEM.  */
int pk_dir_append(pk_dir_conn_t *self, int argc, const char **argv, const size_t *argvlen);

/*  The next reply of the pipeline, in the order the commands were
    appended (the caller frees it), the first call writing every node's
    commands.  0, or -EIO with err (or NULL) when the connection failed or
    the Cluster moved a slot: every later call fails too, pk_dir_close it.
    An error reply (e.g. WRONGTYPE: another program's key under our name)
    is a reply, not a failure: the caller counts it as junk.  */
int pk_dir_next_reply(pk_dir_conn_t *self, redisReply **reply_p, char *err);

/*  Reads the n replies of a pipeline into replies[] (each the caller's to
    free, pk_dir_free_replies): pk_dir_next_reply n times, every reply
    freed on failure.  */
int pk_dir_replies(pk_dir_conn_t *self, redisReply **replies, size_t n, char *err);
void pk_dir_free_replies(redisReply **replies, size_t n);

/*  PING to every node of the connection, in one round trip, with no
    pipeline owed: 0, or -EIO with err (the connection failed, as for
    pk_dir_next_reply).  A writer's heartbeat, so that a dead primary it
    has had nothing to write to is found within a heartbeat, not at its
    next write (after a failover, what its replica lacks is republished
    only once the connection was found lost).  */
int pk_dir_ping_all(pk_dir_conn_t *self, char *err);

/*  One command, one reply: NULL when the connection failed.  */
redisReply *pk_dir_command(pk_dir_conn_t *self, int argc, const char **argv,
                           const size_t *argvlen);

/*  Why the connection failed, once pk_dir_next_reply said it did.  */
const char *pk_dir_error(const pk_dir_conn_t *self);

/*  The Cluster's slot of a key (CRC16 of it, or of its {hash tag}).  */
unsigned pk_dir_slot(const char *key, size_t len);

#endif
