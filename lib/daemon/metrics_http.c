/*  metrics_http.c: the optional HTTP listener that serves the metrics as
    Prometheus text (--metrics-bind), from its own thread: a scrape never
    waits on the daemon, and the daemon never waits on a scraper.

    The listener is a zactor whose loop hands zmq_poll its pipe, a
    non-blocking listening socket and its connections (zmq_poll takes plain
    descriptors beside ZeroMQ sockets), so destroy's $TERM wakes it at
    once.  Each connection carries one request and is closed after the
    answer; a bounded number are served at a time and each has a deadline,
    so no client can hold the listener or grow its memory.
*/
#include "daemon/metrics.h"
#include "base/err.h"
#include "base/thread.h"

#include <czmq.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

//  ---------------------------------------------------------------------------
//  The HTTP listener

#define S_MAX_CONNS 16          //  served at once
#define S_BACKLOG 64
#define S_HEAD_MAX 4096         //  bytes of a request's line and headers
#define S_CONN_MS 10000         //  from accept to the answer's last byte
#define S_LINGER_MS 1000        //  reading what the client still sends
#define S_ACCEPT_PAUSE_MS 100   //  after accept ran out of descriptors

typedef enum {
    S_READING,                  //  the request's head
    S_WRITING,                  //  the answer
    S_LINGERING                 //  answered and shut for writing: draining
} s_conn_state_t;

typedef struct {
    int fd;                     //  -1: a free slot
    s_conn_state_t state;
    int64_t accepted, deadline; //  zclock_mono() milliseconds
    char *answer;
    size_t answer_len, sent;
    size_t got;
    char head[S_HEAD_MAX];
} s_conn_t;

struct _pk_metrics_http_t {
    pk_metrics_t *metrics;
    zactor_t *actor;
    int fd;                     //  the listening socket
    int port;
    //  The actor's own
    int64_t accept_pause;       //  accept nothing before this
    s_conn_t conns[S_MAX_CONNS];
};

static void
s_conn_close(s_conn_t *conn)
{
    close(conn->fd);
    conn->fd = -1;
    free(conn->answer);
    conn->answer = NULL;
}

//  The whole answer in one buffer, so it goes out with as few sends as the
//  socket allows.  HEAD gets the headers GET would.
static int
s_conn_answer(s_conn_t *conn, const char *status, const char *headers, const char *body,
              size_t body_len, bool head_only)
{
    char top[256];
    int n = snprintf(top, sizeof top,
                     "HTTP/1.1 %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
                     status, body_len, headers);
    if (n < 0 || (size_t) n >= sizeof top)
        return -EINVAL;
    size_t len = (size_t) n + (head_only ? 0 : body_len);
    conn->answer = malloc(len);
    if (!conn->answer)
        return -ENOMEM;
    memcpy(conn->answer, top, (size_t) n);
    if (!head_only)
        memcpy(conn->answer + n, body, body_len);
    conn->answer_len = len;
    conn->sent = 0;
    conn->state = S_WRITING;
    return 0;
}

#define S_TEXT "Content-Type: text/plain; charset=utf-8\r\n"

static int
s_conn_error(s_conn_t *conn, const char *status, const char *headers, bool head_only)
{
    char body[64];
    snprintf(body, sizeof body, "%s\n", status);
    char all[128];
    snprintf(all, sizeof all, "%s%s", S_TEXT, headers);
    return s_conn_answer(conn, status, all, body, strlen(body), head_only);
}

//  Answers the request whose head is complete in conn->head.  Only the
//  request line matters: METHOD SP TARGET SP HTTP/1.x.
static int
s_conn_respond(pk_metrics_http_t *self, s_conn_t *conn)
{
    const char *line = conn->head;
    const char *eol = memchr(line, '\n', conn->got);
    size_t n = (size_t) (eol - line);
    if (n && line[n - 1] == '\r')
        n--;
    const char *sp1 = memchr(line, ' ', n);
    const char *target = sp1 ? sp1 + 1 : NULL;
    const char *sp2 = target ? memchr(target, ' ', (size_t) (line + n - target)) : NULL;
    const char *version = sp2 ? sp2 + 1 : NULL;
    if (!version || line + n - version != 8 || memcmp(version, "HTTP/1.", 7)
        || version[7] < '0' || version[7] > '9' || sp1 == line || sp2 == target)
        return s_conn_error(conn, "400 Bad Request", "", false);

    size_t method_len = (size_t) (sp1 - line);
    bool get = method_len == 3 && memcmp(line, "GET", 3) == 0;
    bool head = method_len == 4 && memcmp(line, "HEAD", 4) == 0;
    if (!get && !head)
        return s_conn_error(conn, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", false);
    //  The query, if any, does not choose anything here.
    const char *query = memchr(target, '?', (size_t) (sp2 - target));
    size_t path_len = (size_t) ((query ? query : sp2) - target);
    if (path_len != 8 || memcmp(target, "/metrics", 8))
        return s_conn_error(conn, "404 Not Found", "", head);

    char *text = NULL;
    size_t len = 0;
    if (pk_metrics_render(self->metrics, &text, &len))
        return s_conn_error(conn, "500 Internal Server Error", "", head);
    int rc = s_conn_answer(conn, "200 OK",
                           "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
                           text, len, head);
    free(text);
    return rc;
}

static void
s_conn_write(s_conn_t *conn, int64_t now)
{
    while (conn->sent < conn->answer_len) {
        ssize_t n = send(conn->fd, conn->answer + conn->sent, conn->answer_len - conn->sent,
                         MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            s_conn_close(conn);
            return;
        }
        conn->sent += (size_t) n;
    }
    //  Closing with unread request bytes (a POST's body) would reset the
    //  connection and could destroy the answer in flight, so shut our side
    //  and read until the client closes or the linger ends.
    free(conn->answer);
    conn->answer = NULL;
    shutdown(conn->fd, SHUT_WR);
    conn->state = S_LINGERING;
    conn->deadline = now + S_LINGER_MS;
}

static void
s_conn_read(pk_metrics_http_t *self, s_conn_t *conn, int64_t now)
{
    while (true) {
        char drain[512];
        bool reading = conn->state == S_READING;
        char *into = reading ? conn->head + conn->got : drain;
        size_t room = reading ? S_HEAD_MAX - conn->got : sizeof drain;
        ssize_t n = recv(conn->fd, into, room, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            s_conn_close(conn);
            return;
        }
        if (!reading)
            continue;
        //  The head ends at the first empty line; a bare LF is tolerated.
        size_t from = conn->got > 3 ? conn->got - 3 : 0;
        conn->got += (size_t) n;
        bool done = memmem(conn->head + from, conn->got - from, "\r\n\r\n", 4)
                    || memmem(conn->head + from, conn->got - from, "\n\n", 2);
        int rc = 0;
        if (done)
            rc = s_conn_respond(self, conn);
        else if (conn->got == S_HEAD_MAX)
            rc = s_conn_error(conn, "431 Request Header Fields Too Large", "", false);
        if (rc) {
            s_conn_close(conn);
            return;
        }
        if (conn->state == S_WRITING) {
            s_conn_write(conn, now);
            return;
        }
    }
}

//  A slot for a new connection: a free one, else one that is only
//  lingering, else the one that has waited longest for its request, so
//  idle clients cannot lock a scrape out.  NULL when every slot is writing.
static s_conn_t *
s_slot(pk_metrics_http_t *self)
{
    s_conn_t *victim = NULL;
    for (size_t slot = 0; slot < S_MAX_CONNS; slot++) {
        s_conn_t *conn = &self->conns[slot];
        if (conn->fd < 0)
            return conn;
        if (conn->state == S_WRITING)
            continue;
        if (!victim || (conn->state == S_LINGERING) > (victim->state == S_LINGERING)
            || (conn->state == victim->state && conn->accepted < victim->accepted))
            victim = conn;
    }
    return victim;
}

static void
s_accept(pk_metrics_http_t *self, int64_t now)
{
    for (size_t i = 0; i < S_MAX_CONNS; i++) {
        s_conn_t *conn = s_slot(self);
        if (!conn)
            return;
        int fd = accept4(self->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            //  Out of descriptors the listening socket stays readable;
            //  pausing keeps the actor from spinning on it.
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                self->accept_pause = now + S_ACCEPT_PAUSE_MS;
            return;
        }
        if (conn->fd >= 0)
            s_conn_close(conn);
        conn->fd = fd;
        conn->state = S_READING;
        conn->accepted = now;
        conn->deadline = now + S_CONN_MS;
        conn->got = 0;
    }
}

static void
s_http_actor(zsock_t *pipe, void *args)
{
    pk_thread_block_signals();
    pk_metrics_http_t *self = args;
    zsock_signal(pipe, 0);
    zmq_pollitem_t items[2 + S_MAX_CONNS];
    size_t slot_of[2 + S_MAX_CONNS];
    while (true) {
        int64_t now = zclock_mono();
        long timeout = -1;
        int n = 0;
        items[n++] = (zmq_pollitem_t) { zsock_resolve(pipe), 0, ZMQ_POLLIN, 0 };
        int listening = -1;
        if (now >= self->accept_pause && s_slot(self)) {
            listening = n;
            items[n++] = (zmq_pollitem_t) { NULL, self->fd, ZMQ_POLLIN, 0 };
        }
        else if (now < self->accept_pause)
            timeout = (long) (self->accept_pause - now);
        int first = n;
        for (size_t slot = 0; slot < S_MAX_CONNS; slot++) {
            s_conn_t *conn = &self->conns[slot];
            if (conn->fd < 0)
                continue;
            slot_of[n] = slot;
            short events = conn->state == S_WRITING ? ZMQ_POLLOUT : ZMQ_POLLIN;
            items[n++] = (zmq_pollitem_t) { NULL, conn->fd, events, 0 };
            long left = conn->deadline > now ? (long) (conn->deadline - now) : 0;
            if (timeout < 0 || left < timeout)
                timeout = left;
        }
        if (zmq_poll(items, n, timeout) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            //  The only command is destroy's $TERM.
            char *command = zstr_recv(pipe);
            bool term = !command || streq(command, "$TERM");
            zstr_free(&command);
            if (term)
                break;
        }
        now = zclock_mono();
        for (int i = first; i < n; i++) {
            s_conn_t *conn = &self->conns[slot_of[i]];
            if (now >= conn->deadline)
                s_conn_close(conn);
            else if (items[i].revents && conn->state == S_WRITING)
                s_conn_write(conn, now);
            else if (items[i].revents)
                s_conn_read(self, conn, now);
        }
        if (listening >= 0 && items[listening].revents)
            s_accept(self, now);
    }
    for (size_t slot = 0; slot < S_MAX_CONNS; slot++)
        if (self->conns[slot].fd >= 0)
            s_conn_close(&self->conns[slot]);
}

//  "HOST:PORT" into host ("" for every interface) and port.
static int
s_split_address(const char *addr_port, char *host, size_t host_size, char *port,
                size_t port_size, char *err)
{
    const char *colon = addr_port ? strrchr(addr_port, ':') : NULL;
    if (!colon) {
        snprintf(err, PK_ERRLEN, "metrics address '%s' is not HOST:PORT",
                 addr_port ? addr_port : "(null)");
        return -EINVAL;
    }
    const char *h = addr_port;
    size_t hlen = (size_t) (colon - addr_port);
    if (hlen && h[0] == '[') {
        if (hlen < 3 || h[hlen - 1] != ']') {
            snprintf(err, PK_ERRLEN, "metrics address '%s': bad [IPv6] host", addr_port);
            return -EINVAL;
        }
        h++;
        hlen -= 2;
    }
    else if (memchr(h, ':', hlen)) {
        snprintf(err, PK_ERRLEN, "metrics address '%s': an IPv6 host needs [brackets]",
                 addr_port);
        return -EINVAL;
    }
    else if (hlen == 1 && h[0] == '*')
        hlen = 0;
    const char *p = colon + 1;
    size_t plen = strlen(p);
    if (plen == 0 || plen >= port_size || strspn(p, "0123456789") != plen || atol(p) > 65535) {
        snprintf(err, PK_ERRLEN, "metrics address '%s': the port must be 0..65535", addr_port);
        return -EINVAL;
    }
    if (hlen >= host_size) {
        snprintf(err, PK_ERRLEN, "metrics address '%s': the host is too long", addr_port);
        return -EINVAL;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memcpy(port, p, plen + 1);
    return 0;
}

//  Binds the first of the address's resolutions that will, and learns the
//  port it got.
static int
s_listen(pk_metrics_http_t *self, const char *addr_port, const char *host, const char *port,
         char *err)
{
    struct addrinfo hints = {
        .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM
    };
    struct addrinfo *list = NULL;
    int gai = getaddrinfo(*host ? host : NULL, port, &hints, &list);
    if (gai) {
        int rc = gai == EAI_SYSTEM ? -errno : gai == EAI_MEMORY ? -ENOMEM : -EINVAL;
        snprintf(err, PK_ERRLEN, "metrics address '%s': %s", addr_port,
                 gai == EAI_SYSTEM ? strerror(-rc) : gai_strerror(gai));
        return rc;
    }
    int rc = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = list; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        //  A restarted daemon must rebind while its old connections sit in
        //  TIME_WAIT.
        int on = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, S_BACKLOG) == 0) {
            self->fd = fd;
            rc = 0;
            break;
        }
        rc = -errno;
        close(fd);
    }
    freeaddrinfo(list);
    if (rc) {
        snprintf(err, PK_ERRLEN, "cannot listen on metrics address '%s': %s", addr_port,
                 strerror(-rc));
        return rc;
    }
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    if (getsockname(self->fd, (struct sockaddr *) &bound, &bound_len)) {
        rc = -errno;
        snprintf(err, PK_ERRLEN, "metrics address '%s': getsockname: %s", addr_port,
                 strerror(-rc));
        close(self->fd);
        return rc;
    }
    self->port = bound.ss_family == AF_INET6
                 ? ntohs(((struct sockaddr_in6 *) &bound)->sin6_port)
                 : ntohs(((struct sockaddr_in *) &bound)->sin_port);
    return 0;
}

pk_metrics_http_t *
pk_metrics_http_new(pk_metrics_t *metrics, const char *addr_port, int *rc_p, char *err)
{
    char scratch[PK_ERRLEN];
    if (!err)
        err = scratch;
    err[0] = '\0';
    char host[256], port[8];
    pk_metrics_http_t *self = NULL;
    int rc = -EINVAL;
    if (!metrics) {
        snprintf(err, PK_ERRLEN, "no metrics registry to serve");
        goto fail;
    }
    if ((rc = s_split_address(addr_port, host, sizeof host, port, sizeof port, err)))
        goto fail;
    rc = -ENOMEM;
    self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, PK_ERRLEN, "out of memory");
        goto fail;
    }
    self->metrics = metrics;
    for (size_t slot = 0; slot < S_MAX_CONNS; slot++)
        self->conns[slot].fd = -1;
    //  Bound here rather than in the actor, so a bad address fails the
    //  caller's call with its reason.
    if ((rc = s_listen(self, addr_port, host, port, err)))
        goto fail_self;
    self->actor = zactor_new(s_http_actor, self);
    if (!self->actor) {
        rc = -ENOMEM;
        snprintf(err, PK_ERRLEN, "cannot start the metrics listener's thread");
        goto fail_socket;
    }
    if (rc_p)
        *rc_p = 0;
    return self;

fail_socket:
    close(self->fd);
fail_self:
    free(self);
fail:
    return pk_err_null(rc_p, rc);
}

void
pk_metrics_http_destroy(pk_metrics_http_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_metrics_http_t *self = *self_p;
    //  Returns once the actor has left its loop and closed its connections.
    zactor_destroy(&self->actor);
    close(self->fd);
    free(self);
    *self_p = NULL;
}

int
pk_metrics_http_port(const pk_metrics_http_t *self)
{
    return self ? self->port : -1;
}
