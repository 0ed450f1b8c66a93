/*  redis.c: the directory tests' redis-server (redis.h).  */
#include "redis.h"
#include "daemon.h"

#include <check.h>
#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int
tr_redis_suite_start(void)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) {
        fprintf(stderr, "SKIP: redis-server is not installed (Debian package redis-server; "
                "scripts/bootstrap installs it): the directory's tests need a real one\n");
        return 77;
    }
    return 0;
}

int
tr_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    ck_assert_int_eq(bind(fd, (struct sockaddr *) &a, sizeof a), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *) &a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

//  Whether it answers PING now.
static int
s_pings(int port)
{
    struct timeval tv = { 0, 200000 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = c && !c->err ? redisCommand(c, "PING") : NULL;
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r)
        freeReplyObject(r);
    if (c)
        redisFree(c);
    return ok;
}

//  redis-server on self->port, with the cluster options when cluster_dir
//  (its nodes-PORT.conf there).
static void
s_start(tr_redis_t *self, const char *cluster_dir, int node_timeout_ms)
{
    snprintf(self->url, sizeof self->url, "redis://127.0.0.1:%d", self->port);
    char portstr[16], conf[128], timeout[16];
    snprintf(portstr, sizeof portstr, "%d", self->port);
    snprintf(conf, sizeof conf, "nodes-%d.conf", self->port);
    snprintf(timeout, sizeof timeout, "%d", node_timeout_ms);
    self->pid = fork();
    ck_assert_int_ge(self->pid, 0);
    if (self->pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        if (cluster_dir)
            execlp("redis-server", "redis-server", "--port", portstr, "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--daemonize", "no",
                   "--cluster-enabled", "yes", "--cluster-config-file", conf, "--dir",
                   cluster_dir, "--cluster-node-timeout", timeout,
                   "--repl-diskless-sync-delay", "0", (char *) NULL);
        else
            execlp("redis-server", "redis-server", "--port", portstr, "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--daemonize", "no", (char *) NULL);
        _exit(127);
    }
    //  up within 10 s, or the test fails naming it
    for (int i = 0; i < 1000 && !s_pings(self->port); i++) {
        int status;
        ck_assert_msg(waitpid(self->pid, &status, WNOHANG) == 0,
                      "redis-server on port %d exited at start", self->port);
        zclock_sleep(10);
    }
    ck_assert_msg(s_pings(self->port), "redis-server on port %d never answered PING",
                  self->port);
}

void
tr_redis_start(tr_redis_t *self, int port)
{
    self->port = port ? port : tr_free_port();
    s_start(self, NULL, 0);
}

const char *
tr_redis_cluster_skip(void)
{
    return system("command -v redis-cli >/dev/null 2>&1") == 0
           ? NULL : "redis-cli is not installed (Debian package redis-tools, a dependency "
                    "of redis-server)";
}

//  Whether the node says cluster_state:ok.
static bool
s_cluster_ok(tr_redis_t *node)
{
    redisReply *r = tr_redis(node, "CLUSTER INFO");
    bool ok = r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") != NULL;
    freeReplyObject(r);
    return ok;
}

//  Whether node is a primary, or a replica whose link to its primary is up.
static bool
s_replica_synced(tr_redis_t *node)
{
    redisReply *r = tr_redis(node, "INFO replication");
    bool ok = r->type == REDIS_REPLY_STRING
              && (strstr(r->str, "role:master") || strstr(r->str, "master_link_status:up"));
    freeReplyObject(r);
    return ok;
}

//  A port for a cluster node: free now, and so is its cluster bus port
//  (10000 above it, which is why Redis refuses a node port over 55535: a
//  kernel-chosen port, up to 60999 here, failed half the runs of three
//  nodes), below the kernel's ephemeral range.
static int
s_cluster_port(void)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        int port = 20000 + (int) randombytes_uniform(12000);
        if (td_port_free(port) && td_port_free(port + 10000))
            return port;
    }
    ck_abort_msg("no free cluster port (and bus port 10000 above it) in 20000..31999");
    return -1;
}

void
tr_redis_cluster_start_with(tr_cluster_t *self, int primaries, int replicas,
                            int node_timeout_ms)
{
    self->n = primaries * (1 + replicas);
    ck_assert_int_le(self->n, TR_CLUSTER_MAX);
    snprintf(self->dir, sizeof self->dir, "/tmp/p2pkv-redis-cluster-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(self->dir));
    char cmd[1024];
    int at = snprintf(cmd, sizeof cmd, "redis-cli --cluster create");
    //  redis-cli makes the first `primaries` nodes listed the primaries
    for (int i = 0; i < self->n; i++) {
        self->node[i].port = s_cluster_port();
        s_start(&self->node[i], self->dir, node_timeout_ms);
        at += snprintf(cmd + at, sizeof cmd - (size_t) at, " 127.0.0.1:%d", self->node[i].port);
    }
    snprintf(cmd + at, sizeof cmd - (size_t) at,
             " --cluster-replicas %d --cluster-yes >/dev/null 2>&1", replicas);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    snprintf(self->url, sizeof self->url, "%s", self->node[0].url);
    //  every node agrees within 30 s, or the test fails saying so
    for (int i = 0; i < self->n; i++) {
        for (int k = 0; k < 3000 && !s_cluster_ok(&self->node[i]); k++)
            zclock_sleep(10);
        ck_assert_msg(s_cluster_ok(&self->node[i]), "cluster node on port %d never ok",
                      self->node[i].port);
    }
    //  and every replica has synced with its primary: one that never did
    //  counts its data as too old to take over (cluster-replica-validity-
    //  factor), so a failover test would wait for nothing
    for (int i = 0; i < self->n; i++) {
        for (int k = 0; k < 3000 && !s_replica_synced(&self->node[i]); k++)
            zclock_sleep(10);
        ck_assert_msg(s_replica_synced(&self->node[i]), "cluster node on port %d never synced "
                      "with its primary", self->node[i].port);
    }
}

void
tr_redis_cluster_start(tr_cluster_t *self)
{
    tr_redis_cluster_start_with(self, TR_CLUSTER_NODES, 0, 15000);
}

bool
tr_redis_cluster_primary(tr_redis_t *node)
{
    if (!s_cluster_ok(node))
        return false;
    redisReply *r = tr_redis(node, "ROLE");
    bool primary = r->type == REDIS_REPLY_ARRAY && r->elements > 0
                   && r->element[0]->type == REDIS_REPLY_STRING
                   && strcmp(r->element[0]->str, "master") == 0;
    freeReplyObject(r);
    return primary;
}

void
tr_redis_cluster_stop(tr_cluster_t *self)
{
    for (int i = 0; i < self->n; i++)
        tr_redis_stop(&self->node[i]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", self->dir);
    ck_assert_int_eq(system(cmd), 0);
}

void
tr_redis_kill(tr_redis_t *self)
{
    if (self->pid <= 0)
        return;
    kill(self->pid, SIGKILL);
    waitpid(self->pid, NULL, 0);
    self->pid = 0;
}

void
tr_redis_stop(tr_redis_t *self)
{
    if (self->pid <= 0)
        return;
    kill(self->pid, SIGTERM);
    int status;
    for (int i = 0; i < 1000 && waitpid(self->pid, &status, WNOHANG) == 0; i++)
        zclock_sleep(10);
    if (waitpid(self->pid, &status, WNOHANG) == 0) {
        kill(self->pid, SIGKILL);
        waitpid(self->pid, &status, 0);
    }
    self->pid = 0;
}

redisReply *
tr_redis(tr_redis_t *self, const char *fmt, ...)
{
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", self->port, tv);
    ck_assert_msg(c && !c->err, "cannot reach redis-server on port %d", self->port);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "redis: %s", c->errstr);
    redisFree(c);
    return r;
}
