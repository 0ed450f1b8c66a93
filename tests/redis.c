/*  redis.c: the directory tests' redis-server (redis.h).  */
#include "redis.h"

#include <check.h>
#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
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

void
tr_redis_start(tr_redis_t *self, int port)
{
    self->port = port ? port : tr_free_port();
    snprintf(self->url, sizeof self->url, "redis://127.0.0.1:%d", self->port);
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", self->port);
    self->pid = fork();
    ck_assert_int_ge(self->pid, 0);
    if (self->pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
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
