/*  dir_redis.h: one synchronous hiredis connection to the directory, as
    the daemon's directory thread and the client's locate both use it.

    Synchronous on purpose: each user owns its connection on a thread of
    its own (the daemon's actor) or under its own lock (the client), so
    nothing of the data path ever waits on it, and a pipeline is simply
    every command appended, then every reply read: one round trip.
    Every read and write is bounded by the connection's timeout: a Redis
    slower than that counts as down.
*/
#ifndef PK_DIR_REDIS_H_INCLUDED
#define PK_DIR_REDIS_H_INCLUDED

#include "cluster/dir_entry.h"

#include <hiredis/hiredis.h>

/*  Connects within timeout seconds (also the bound on every later read
    and write), selects url's DB and checks the answer to PING.  NULL with
    err (PK_ERRLEN bytes) naming the directory (text, the URL as given)
    and what failed.  */
redisContext *pk_dir_connect(const pk_dir_url_t *url, const char *text, double timeout,
                             char *err);

/*  Reads the n replies of a pipeline into replies[] (each the caller's to
    free, pk_dir_free_replies).  0, or -EIO with err when the connection
    failed (every reply freed; the context is dead, redisFree it).  An
    error reply (e.g. WRONGTYPE: another program's key under our name) is
    a reply, not a failure: the caller counts it as junk.  */
int pk_dir_replies(redisContext *c, redisReply **replies, size_t n, char *err);
void pk_dir_free_replies(redisReply **replies, size_t n);

/*  Appends one command of argc arguments (lengths given: keys are
    binary-safe) to the pipeline: 0 or -ENOMEM.  */
int pk_dir_append(redisContext *c, int argc, const char **argv, const size_t *argvlen);

#endif
