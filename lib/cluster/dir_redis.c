/*  dir_redis.c: the directory's hiredis connection (dir_redis.h).  */
#include "cluster/dir_redis.h"
#include "base/err.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static struct timeval
s_tv(double seconds)
{
    if (!(seconds > 0) || !isfinite(seconds))
        seconds = 1;
    return (struct timeval) { (time_t) seconds,
                              (suseconds_t) ((seconds - floor(seconds)) * 1e6) };
}

//  One command, its one reply checked: 0, or -EIO with err.
static int
s_check(redisContext *c, const char *text, const char *what, char *err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int
s_check(redisContext *c, const char *text, const char *what, char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    int rc = 0;
    if (!r)
        rc = pk_err(err, -EIO, "directory %.100s: %s: %s", text, what, c->errstr);
    else if (r->type == REDIS_REPLY_ERROR)
        rc = pk_err(err, -EIO, "directory %.100s: %s: %.100s", text, what, r->str);
    if (r)
        freeReplyObject(r);
    return rc;
}

redisContext *
pk_dir_connect(const pk_dir_url_t *url, const char *text, double timeout, char *err)
{
    struct timeval tv = s_tv(timeout);
    redisContext *c = redisConnectWithTimeout(url->host, url->port, tv);
    if (!c) {
        pk_err(err, -ENOMEM, "directory %.100s: out of memory", text);
        return NULL;
    }
    if (c->err) {
        pk_err(err, -ENOTCONN, "directory %.100s: cannot connect: %s", text, c->errstr);
        goto fail;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        pk_err(err, -EIO, "directory %.100s: cannot set its timeout", text);
        goto fail;
    }
    if (s_check(c, text, "PING", err, "PING") != 0
        || (url->db && s_check(c, text, "SELECT", err, "SELECT %d", url->db) != 0))
        goto fail;
    return c;

fail:
    redisFree(c);
    return NULL;
}

void
pk_dir_free_replies(redisReply **replies, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (replies[i])
            freeReplyObject(replies[i]);
        replies[i] = NULL;
    }
}

int
pk_dir_replies(redisContext *c, redisReply **replies, size_t n, char *err)
{
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    for (size_t i = 0; i < n; i++) {
        void *r = NULL;
        if (redisGetReply(c, &r) != REDIS_OK || !r) {
            pk_dir_free_replies(replies, i);
            return pk_err(err, -EIO, "directory: %s", c->errstr[0] ? c->errstr : "no reply");
        }
        replies[i] = r;
    }
    return 0;
}

int
pk_dir_append(redisContext *c, int argc, const char **argv, const size_t *argvlen)
{
    return redisAppendCommandArgv(c, argc, argv, argvlen) == REDIS_OK ? 0 : -ENOMEM;
}
