/*  dir_redis.c: the directory's connection, to one Redis or a Redis
    Cluster (dir_redis.h).  */
#include "cluster/dir_redis.h"
#include "base/err.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define S_SLOTS 16384
#define S_MAX_NODES 1024

struct _pk_dir_conn_t {
    redisContext **node;            //  one Redis: node[0]; a Cluster: its primaries
    size_t nnodes;
    bool cluster;
    uint16_t *slot_node;            //  a Cluster's slot -> node (32 KiB)
    uint16_t *queue;                //  the node of each command whose reply is owed
    size_t qhead, qlen, qcap;
    bool written;                   //  every node's commands written since the last append
    bool broken;
    char error[PK_ERRLEN];
    pk_dir_node_t *learnt;          //  every node CLUSTER SLOTS named, for the URL
    size_t nlearnt;
};

static struct timeval
s_tv(double seconds)
{
    if (!(seconds > 0) || !isfinite(seconds))
        seconds = 1;
    return (struct timeval) { (time_t) seconds,
                              (suseconds_t) ((seconds - floor(seconds)) * 1e6) };
}

//  --------------------------------------------------------------------------
//  Slots: CRC16-CCITT (XMODEM) of the key, or of its hash tag, mod 16384,
//  as Redis Cluster computes them.  A table, since a locate hashes about
//  70 KB of names.

static uint16_t s_crc_table[256];
static pthread_once_t s_crc_once = PTHREAD_ONCE_INIT;

static void
s_crc_init(void)
{
    for (unsigned i = 0; i < 256; i++) {
        uint16_t c = (uint16_t) (i << 8);
        for (int b = 0; b < 8; b++)
            c = (uint16_t) (c & 0x8000 ? (c << 1) ^ 0x1021 : c << 1);
        s_crc_table[i] = c;
    }
}

unsigned
pk_dir_slot(const char *key, size_t len)
{
    pthread_once(&s_crc_once, s_crc_init);
    //  {tag}: only what is between the first { and the next }, if not empty
    const char *open = memchr(key, '{', len);
    if (open) {
        const char *close = memchr(open + 1, '}', len - (size_t) (open + 1 - key));
        if (close && close > open + 1) {
            key = open + 1;
            len = (size_t) (close - key);
        }
    }
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = (uint16_t) ((crc << 8) ^ s_crc_table[((crc >> 8) ^ (uint8_t) key[i]) & 0xff]);
    return crc & (S_SLOTS - 1);
}

//  --------------------------------------------------------------------------
//  Connecting

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

//  A node's connection, its timeouts set and PING answered; NULL with err.
static redisContext *
s_node(const char *host, int port, double timeout, const char *text, char *err)
{
    struct timeval tv = s_tv(timeout);
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (!c) {
        pk_err(err, -ENOMEM, "directory %.100s: out of memory", text);
        return NULL;
    }
    if (c->err)
        pk_err(err, -ENOTCONN, "directory %.100s: cannot connect to %.100s:%d: %s", text, host,
               port, c->errstr);
    else if (redisSetTimeout(c, tv) != REDIS_OK)
        pk_err(err, -EIO, "directory %.100s: cannot set its timeout", text);
    else if (s_check(c, text, "PING", err, "PING") == 0)
        return c;
    redisFree(c);
    return NULL;
}

//  The node index of a primary, connecting it when it is new: >= 0, or -1
//  with err.
static int
s_primary(pk_dir_conn_t *self, const redisReply *who, const pk_dir_node_t *asked, double timeout,
          const char *text, char *err)
{
    if (who->type != REDIS_REPLY_ARRAY || who->elements < 2
        || who->element[0]->type != REDIS_REPLY_STRING
        || who->element[1]->type != REDIS_REPLY_INTEGER) {
        pk_err(err, -EPROTO, "directory %.100s: CLUSTER SLOTS: a node not as Redis names one",
               text);
        return -1;
    }
    //  an empty host is the node we asked (Redis does not know its own)
    const char *host = who->element[0]->len ? who->element[0]->str : asked->host;
    int port = (int) who->element[1]->integer;
    for (size_t i = 0; i < self->nnodes; i++)
        if (self->node[i]->tcp.port == port && strcmp(self->node[i]->tcp.host, host) == 0)
            return (int) i;
    if (self->nnodes == S_MAX_NODES) {
        pk_err(err, -E2BIG, "directory %.100s: more than %d primaries", text, S_MAX_NODES);
        return -1;
    }
    redisContext *c = s_node(host, port, timeout, text, err);
    if (!c)
        return -1;
    self->node[self->nnodes] = c;
    return (int) self->nnodes++;
}

//  Notes a node CLUSTER SLOTS named (HOST, PORT, ...), for the URL once
//  this connect succeeds.
static void
s_learn(pk_dir_conn_t *self, const redisReply *who, const pk_dir_node_t *asked)
{
    if (who->type != REDIS_REPLY_ARRAY || who->elements < 2
        || who->element[0]->type != REDIS_REPLY_STRING
        || who->element[1]->type != REDIS_REPLY_INTEGER
        || who->element[0]->len > PK_DIR_MAX_HOST || self->nlearnt == PK_DIR_MAX_NODES)
        return;
    pk_dir_node_t *n = &self->learnt[self->nlearnt++];
    snprintf(n->host, sizeof n->host, "%s", who->element[0]->len ? who->element[0]->str
                                                                  : asked->host);
    n->port = (int) who->element[1]->integer;
}

//  A Cluster's slots from the CLUSTER SLOTS reply: 0, or a negative errno
//  with err.
static int
s_learn_slots(pk_dir_conn_t *self, const redisReply *r, const pk_dir_node_t *asked,
              double timeout, const char *text, char *err)
{
    self->cluster = true;
    self->slot_node = malloc(S_SLOTS * sizeof *self->slot_node);
    if (!self->slot_node)
        return pk_err(err, -ENOMEM, "out of memory");
    for (size_t s = 0; s < S_SLOTS; s++)
        self->slot_node[s] = UINT16_MAX;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3
            || e->element[0]->type != REDIS_REPLY_INTEGER
            || e->element[1]->type != REDIS_REPLY_INTEGER
            || e->element[0]->integer < 0 || e->element[1]->integer >= S_SLOTS
            || e->element[0]->integer > e->element[1]->integer)
            return pk_err(err, -EPROTO, "directory %.100s: CLUSTER SLOTS: not a slot range",
                          text);
        //  every node of the range, its replicas too, is a seed for later
        for (size_t k = 2; k < e->elements; k++)
            s_learn(self, e->element[k], asked);
        int n = s_primary(self, e->element[2], asked, timeout, text, err);
        if (n < 0)
            return -EIO;
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
            self->slot_node[s] = (uint16_t) n;
    }
    for (size_t s = 0; s < S_SLOTS; s++)
        if (self->slot_node[s] == UINT16_MAX)
            return pk_err(err, -EIO, "directory %.100s: the Cluster serves no slot %zu "
                          "(is its state ok?)", text, s);
    return 0;
}

//  One Redis or a Cluster, as the node first answers: 0, or a negative
//  errno with err.
static int
s_discover(pk_dir_conn_t *self, redisContext *first, const pk_dir_node_t *asked,
           const pk_dir_url_t *url, double timeout, const char *text, char *err)
{
    redisReply *r = redisCommand(first, "CLUSTER SLOTS");
    if (!r) {
        int rc = pk_err(err, -EIO, "directory %.100s: CLUSTER SLOTS: %s", text, first->errstr);
        redisFree(first);
        return rc;
    }
    int rc = 0;
    if (r->type != REDIS_REPLY_ARRAY) {         //  no Cluster: this one Redis
        self->node[self->nnodes++] = first;
        first = NULL;
        if (url->db)
            rc = s_check(self->node[0], text, "SELECT", err, "SELECT %d", url->db);
    }
    else if (url->db)
        rc = pk_err(err, -EINVAL, "directory %.100s: a Redis Cluster has only DB 0", text);
    else
        rc = s_learn_slots(self, r, asked, timeout, text, err);
    freeReplyObject(r);
    if (first)
        redisFree(first);
    return rc;
}

//  Back to no connection, for the next node to try.
static void
s_reset(pk_dir_conn_t *self)
{
    for (size_t i = 0; i < self->nnodes; i++)
        redisFree(self->node[i]);
    self->nnodes = 0;
    self->cluster = false;
    free(self->slot_node);
    self->slot_node = NULL;
    self->nlearnt = 0;
}

pk_dir_conn_t *
pk_dir_connect(pk_dir_url_t *url, const char *text, double timeout, char *err)
{
    pk_dir_conn_t *self = calloc(1, sizeof *self);
    if (self) {
        self->node = calloc(S_MAX_NODES, sizeof *self->node);
        self->learnt = calloc(PK_DIR_MAX_NODES, sizeof *self->learnt);
    }
    if (!self || !self->node || !self->learnt) {
        pk_dir_close(&self);
        pk_err(err, -ENOMEM, "out of memory");
        return NULL;
    }
    //  Each node in turn, from the one that answered last: a dead seed
    //  costs one refused connect (or the timeout, on a network where a
    //  dead host does not answer) before the next is asked.
    char why[PK_ERRLEN] = "";
    size_t n = url->nnodes;
    for (size_t k = 0; k < n; k++) {
        size_t i = (url->last_good + k) % n;
        const pk_dir_node_t *node = &url->node[i];
        redisContext *first = s_node(node->host, node->port, timeout, text, why);
        if (first && s_discover(self, first, node, url, timeout, text, why) == 0) {
            url->last_good = i;
            if (self->cluster) {        //  what it named replaces what was learnt
                pk_dir_node_t was = url->node[i];
                url->nnodes = url->nseeds;
                for (size_t l = 0; l < self->nlearnt; l++)
                    pk_dir_url_learn(url, self->learnt[l].host, self->learnt[l].port);
                //  the node that answered stays first in line
                for (size_t l = 0; l < url->nnodes; l++)
                    if (url->node[l].port == was.port && strcmp(url->node[l].host, was.host) == 0)
                        url->last_good = l;
                if (url->last_good >= url->nnodes)
                    url->last_good = 0;
            }
            return self;
        }
        s_reset(self);
    }
    if (n > 1)
        pk_err(err, -ENOTCONN, "%s (and no other of its %zu nodes answered)", why, n);
    else
        pk_err(err, -ENOTCONN, "%s", why);
    pk_dir_close(&self);
    return NULL;
}

void
pk_dir_close(pk_dir_conn_t **self_p)
{
    pk_dir_conn_t *self = *self_p;
    if (!self)
        return;
    if (self->node)
        s_reset(self);
    free(self->node);
    free(self->learnt);
    free(self->queue);
    free(self);
    *self_p = NULL;
}

bool
pk_dir_is_cluster(const pk_dir_conn_t *self)
{
    return self->cluster;
}

size_t
pk_dir_nodes(const pk_dir_conn_t *self)
{
    return self->nnodes;
}

//  --------------------------------------------------------------------------
//  Pipelines

//  One command onto node n's pipeline, its reply owed in the queue.
static int
s_append_to(pk_dir_conn_t *self, uint16_t n, int argc, const char **argv,
            const size_t *argvlen)
{
    if (self->qhead + self->qlen == self->qcap) {
        size_t cap = self->qcap ? 2 * self->qcap : 1024;
        if (self->qhead) {                      //  room at the front first
            memmove(self->queue, self->queue + self->qhead, self->qlen * sizeof *self->queue);
            self->qhead = 0;
        }
        else {
            uint16_t *q = realloc(self->queue, cap * sizeof *q);
            if (!q)
                return -ENOMEM;
            self->queue = q;
            self->qcap = cap;
        }
    }
    if (redisAppendCommandArgv(self->node[n], argc, argv, argvlen) != REDIS_OK)
        return -ENOMEM;
    self->queue[self->qhead + self->qlen++] = n;
    self->written = false;
    return 0;
}

int
pk_dir_append(pk_dir_conn_t *self, int argc, const char **argv, const size_t *argvlen)
{
    uint16_t n = self->cluster && argc > 1 ? self->slot_node[pk_dir_slot(argv[1], argvlen[1])]
                                           : 0;
    return s_append_to(self, n, argc, argv, argvlen);
}

static int
s_fail(pk_dir_conn_t *self, char *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int
s_fail(pk_dir_conn_t *self, char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(self->error, sizeof self->error, fmt, ap);
    va_end(ap);
    self->broken = true;
    return pk_err(err, -EIO, "directory: %s", self->error);
}

//  Every node's appended commands onto its socket, so that the nodes work
//  on their parts of the pipeline at once.
static int
s_write_all(pk_dir_conn_t *self, char *err)
{
    for (size_t i = 0; i < self->nnodes; i++) {
        int done = 0;
        while (!done)
            if (redisBufferWrite(self->node[i], &done) != REDIS_OK)
                return s_fail(self, err, "%s", self->node[i]->errstr);
    }
    self->written = true;
    return 0;
}

int
pk_dir_next_reply(pk_dir_conn_t *self, redisReply **reply_p, char *err)
{
    *reply_p = NULL;
    if (self->broken)
        return pk_err(err, -EIO, "directory: %s", self->error);
    if (!self->qlen)
        return s_fail(self, err, "no reply is owed");
    if (!self->written && s_write_all(self, err) != 0)
        return -EIO;
    redisContext *c = self->node[self->queue[self->qhead]];
    void *r = NULL;
    if (redisGetReply(c, &r) != REDIS_OK || !r)
        return s_fail(self, err, "%s", c->errstr[0] ? c->errstr : "no reply");
    self->qhead++;
    if (--self->qlen == 0)
        self->qhead = 0;
    redisReply *reply = r;
    //  The Cluster moved a slot, or is failing over (CLUSTERDOWN until a
    //  replica is promoted, TRYAGAIN while a slot migrates): the slots we
    //  know are wrong, so the connection is dropped like a lost one, and
    //  the next connect learns them again from any node.  A user that
    //  writes resyncs then, which also restores what a promoted replica
    //  never received.
    if (reply->type == REDIS_REPLY_ERROR
        && (strncmp(reply->str, "MOVED ", 6) == 0 || strncmp(reply->str, "ASK ", 4) == 0
            || strncmp(reply->str, "CLUSTERDOWN", 11) == 0
            || strncmp(reply->str, "TRYAGAIN", 8) == 0)) {
        s_fail(self, err, "the Cluster moved a slot or is down (%.60s): connect again",
               reply->str);
        freeReplyObject(reply);
        return -EIO;
    }
    *reply_p = reply;
    return 0;
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
pk_dir_replies(pk_dir_conn_t *self, redisReply **replies, size_t n, char *err)
{
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    for (size_t i = 0; i < n; i++)
        if (pk_dir_next_reply(self, &replies[i], err) != 0) {
            pk_dir_free_replies(replies, i);
            return -EIO;
        }
    return 0;
}

int
pk_dir_ping_all(pk_dir_conn_t *self, char *err)
{
    const char *argv[1] = { "PING" };
    size_t lens[1] = { 4 };
    for (size_t i = 0; i < self->nnodes; i++)
        if (s_append_to(self, (uint16_t) i, 1, argv, lens) != 0)
            return s_fail(self, err, "out of memory");
    for (size_t i = 0; i < self->nnodes; i++) {
        redisReply *r = NULL;
        if (pk_dir_next_reply(self, &r, err) != 0)
            return -EIO;
        bool pong = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        char said[64];
        snprintf(said, sizeof said, "%s", r->type == REDIS_REPLY_ERROR ? r->str : "not PONG");
        freeReplyObject(r);
        if (!pong)
            return s_fail(self, err, "a node answered PING with %s", said);
    }
    return 0;
}

redisReply *
pk_dir_command(pk_dir_conn_t *self, int argc, const char **argv, const size_t *argvlen)
{
    redisReply *r = NULL;
    if (pk_dir_append(self, argc, argv, argvlen) != 0) {
        s_fail(self, NULL, "out of memory");
        return NULL;
    }
    return pk_dir_next_reply(self, &r, NULL) == 0 ? r : NULL;
}

const char *
pk_dir_error(const pk_dir_conn_t *self)
{
    return self->error[0] ? self->error : "no answer";
}
