/*  redis.h: a real redis-server for the directory's tests (issue 14), on
    a free loopback port, with nothing saved to disk.

    tr_redis_start runs `redis-server --port N --bind 127.0.0.1 --save ''
    --appendonly no --daemonize no` and waits (bounded) until it answers
    PING; tr_redis_stop ends it with SIGTERM and reaps it.  Started again
    with the same port, it comes back empty, as a restarted Redis without
    persistence does.  tr_redis_suite_start says whether redis-server is
    installed: 77 (skip) with the reason on stderr when it is not.
*/
#ifndef PK_TEST_REDIS_H_INCLUDED
#define PK_TEST_REDIS_H_INCLUDED

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int port;
    char url[64];                   //  redis://127.0.0.1:PORT
} tr_redis_t;

/*  0 to go on, 77 when redis-server is not on PATH.  */
int tr_redis_suite_start(void);

/*  port 0: a free one.  */
void tr_redis_start(tr_redis_t *self, int port);
void tr_redis_stop(tr_redis_t *self);

/*  A Redis Cluster on free loopback ports, made by `redis-cli --cluster
    create` and waited for until every node says cluster_state:ok; url
    names the first node.  tr_redis_cluster_start: three primaries, no
    replicas.  tr_redis_cluster_start_with: `primaries` primaries (node[0]
    .. node[primaries - 1]) and `replicas` replicas of each after them,
    cluster-node-timeout node_timeout_ms (a failover's pace).  Their
    cluster config files live in a temporary directory, removed by stop.
    tr_redis_cluster_skip says why one cannot be made here (NULL: it can).  */
#define TR_CLUSTER_NODES 3
#define TR_CLUSTER_MAX 6
typedef struct {
    tr_redis_t node[TR_CLUSTER_MAX];
    int n;
    char url[64];
    char dir[64];
} tr_cluster_t;

const char *tr_redis_cluster_skip(void);
void tr_redis_cluster_start(tr_cluster_t *self);
void tr_redis_cluster_start_with(tr_cluster_t *self, int primaries, int replicas,
                                 int node_timeout_ms);
void tr_redis_cluster_stop(tr_cluster_t *self);

/*  Whether node is a primary with cluster_state:ok, by its own word.  */
bool tr_redis_cluster_primary(tr_redis_t *node);

/*  Kills a node at once (SIGKILL), as a crash does, and reaps it.  */
void tr_redis_kill(tr_redis_t *self);

/*  A free loopback TCP port now.  */
int tr_free_port(void);

/*  One command on a connection of its own, asserting it got a reply
    (freeReplyObject it).  */
redisReply *tr_redis(tr_redis_t *self, const char *fmt, ...);

#endif
