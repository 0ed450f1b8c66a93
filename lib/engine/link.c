/*  link.c: the engine's conversation with its server's local socket.

    The server answers each request with one JSON object, in order, and
    sends events (store_result, pull_result) in between, unasked.  A
    request waits for its answer and queues the events it reads on the
    way; a request that timed out leaves its answer to come, which the
    next read drops (stale), so that answers never pair with the wrong
    request.

    p2pkv_engine_fd is an epoll fd over two: an eventfd that is readable
    exactly while the queue is not empty, and the socket's ZMQ_FD.
    ZMQ_FD only says that the socket's state may have changed (it is
    edge-like: messages already waiting do not make it readable again),
    so every public call ends by draining the socket into the queue
    (pk_elink_drain): then nothing waits unseen, and a message that comes
    later signals ZMQ_FD afresh.
*/
#include "engine/engine_internal.h"
#include "base/err.h"
#include "base/key.h"
#include "base/clock.h"
#include "base/fds.h"
#include "base/local_path.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

int
pk_elink_open(p2pkv_engine_t *self, const char *endpoint, char *err)
{
    int rc;
    self->evfd = self->epfd = -1;
    //  the socket's mailbox and connection, the eventfd and the epoll set:
    //  czmq aborts the process when the socket cannot be made (base/fds.h)
    if (!pk_fds_free(4))
        return pk_err(err, -EMFILE, "this process has fewer than 4 file descriptors free "
                      "(its soft limit, ulimit -n, is RLIMIT_NOFILE)");
    self->sock = zsock_new(ZMQ_DEALER);
    if (!self->sock)
        return pk_err(err, -ENOMEM, "cannot create a socket");
    zsock_set_linger(self->sock, 0);
    if (zsock_connect(self->sock, "%s", endpoint) < 0) {
        rc = -zmq_errno();
        pk_err(err, rc, "local_endpoint: cannot connect to \"%.128s\": %s", endpoint,
               zmq_strerror(-rc));
        goto undo_sock;
    }
    self->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->evfd < 0 || self->epfd < 0) {
        rc = -errno;
        pk_err(err, rc, "cannot create the event fd: %s", strerror(errno));
        goto undo_fds;
    }
    struct epoll_event ev = { .events = EPOLLIN };
    int zfd = zsock_fd(self->sock);
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->evfd, &ev) < 0
        || epoll_ctl(self->epfd, EPOLL_CTL_ADD, zfd, &ev) < 0) {
        rc = -errno;
        pk_err(err, rc, "cannot watch the event fd: %s", strerror(errno));
        goto undo_fds;
    }
    return 0;

undo_fds:
    if (self->epfd >= 0)
        close(self->epfd);
    if (self->evfd >= 0)
        close(self->evfd);
    self->evfd = self->epfd = -1;
undo_sock:
    zsock_destroy(&self->sock);
    return rc;
}

static void
s_event_free(pk_elink_event_t *e)
{
    if (e) {
        pk_keymap_fini(&e->index);
        free(e->keys);
        free(e);
    }
}

void
pk_elink_close(p2pkv_engine_t *self)
{
    while (self->head) {
        pk_elink_event_t *e = self->head;
        self->head = e->next;
        s_event_free(e);
    }
    s_event_free(self->delivered);
    self->delivered = NULL;
    if (self->epfd >= 0)
        close(self->epfd);
    if (self->evfd >= 0)
        close(self->evfd);
    zsock_destroy(&self->sock);
}

//  A reason's name ("absent", ..., "corrupt", "failed", as the server's
//  pull_result says it) as a status and a p2pkv_miss_reason_t.
static void
s_fate(const char *name, p2pkv_engine_pull_key_t *r)
{
    r->status = P2PKV_KEY_MISSING;
    r->reason = P2PKV_MISS_UNKNOWN;
    if (!name)
        return;
    if (streq(name, "corrupt"))
        r->status = P2PKV_KEY_CORRUPT;
    else if (streq(name, "failed"))
        r->status = P2PKV_KEY_FAILED;
    for (int i = 1; r->status == P2PKV_KEY_MISSING && i < 256; i++) {
        const char *known = p2pkv_miss_reason_name(i);
        if (streq(known, "unknown"))
            break;
        if (streq(known, name))
            r->reason = (uint8_t) i;
    }
}

//  One hex key of the event into keys[i], its bytes at *at.
static void
s_event_key(pk_elink_event_t *e, size_t i, const json_t *hex, uint8_t **at)
{
    int got = json_is_string(hex)
              ? pk_hex_decode(json_string_value(hex), json_string_length(hex), *at) : -1;
    e->keys[i] = (p2pkv_key_t) { *at, got > 0 ? (size_t) got : 0 };
    *at += got > 0 ? got : 0;
}

//  A pull_result's keys, hex decoded into one allocation: "missing" (and
//  their "reasons", aligned), then those "from" names (endpoint -> keys).
//  A server older than "reasons" and "from" gives missing keys only.
static int
s_event_keys(pk_elink_event_t *e, const json_t *j)
{
    const json_t *missing = json_object_get(j, "missing"), *reasons = json_object_get(j, "reasons"),
                 *from = json_object_get(j, "from");
    size_t nmiss = json_array_size(missing), n = nmiss, total = 0;
    for (size_t i = 0; i < nmiss; i++)
        total += json_string_length(json_array_get(missing, i)) / 2;
    const char *ep;
    const json_t *list;
    json_object_foreach((json_t *) from, ep, list) {
        total += strlen(ep) + 1;
        n += json_array_size(list);
        for (size_t i = 0; i < json_array_size(list); i++)
            total += json_string_length(json_array_get(list, i)) / 2;
    }
    e->keys = malloc(n * (sizeof *e->keys + sizeof *e->results) + total + 1);
    if (!e->keys)
        return -ENOMEM;
    e->results = (p2pkv_engine_pull_key_t *) (e->keys + n);
    uint8_t *at = (uint8_t *) (e->results + n);
    for (size_t i = 0; i < nmiss; i++) {
        s_event_key(e, i, json_array_get(missing, i), &at);
        e->results[i] = (p2pkv_engine_pull_key_t) { 0 };
        s_fate(json_string_value(json_array_get(reasons, i)), &e->results[i]);
    }
    size_t k = nmiss;
    json_object_foreach((json_t *) from, ep, list) {
        char *source = *ep ? strcpy((char *) at, ep) : NULL;
        at += *ep ? strlen(ep) + 1 : 0;
        for (size_t i = 0; i < json_array_size(list); i++, k++) {
            s_event_key(e, k, json_array_get(list, i), &at);
            e->results[k] = (p2pkv_engine_pull_key_t) { .status = P2PKV_KEY_LANDED,
                                                         .source = source };
        }
    }
    e->nkeys = n;
    e->event.missing = nmiss;
    e->event.missing_keys = e->keys;
    return 0;
}

int
p2pkv_engine_pull_keys(p2pkv_engine_t *self, uint64_t pull, const p2pkv_key_t *keys, size_t n,
                       p2pkv_engine_pull_key_t *out, char *err)
{
    if (!self || (n && (!keys || !out)))
        return pk_err(err, -EINVAL, "pull_keys: no handle, keys or out");
    pk_elink_event_t *e = self->delivered;
    if (!e || e->event.kind != P2PKV_EVENT_PULL || e->event.id != pull)
        return pk_err(err, -ENOENT, "pull_keys: the last event delivered is not pull %llu's",
                      (unsigned long long) pull);
    //  the index once per event: n lookups of a 65,536-key pull stay linear
    if (!pk_keymap_size(&e->index) && e->nkeys) {
        if (pk_keymap_reserve(&e->index, e->nkeys) != 0)
            return pk_err(err, -ENOMEM, "pull_keys: out of memory");
        for (size_t i = 0; i < e->nkeys; i++) {
            pk_key_t k = pk_key_make(e->keys[i].bytes, e->keys[i].len);
            (void) pk_keymap_put(&e->index, &k, i, 0);
        }
    }
    for (size_t i = 0; i < n; i++) {
        pk_key_t k = pk_key_make(keys[i].bytes, keys[i].len);
        const pk_keymap_entry_t *hit = pk_keymap_find(&e->index, &k);
        out[i] = hit ? e->results[hit->a]
                     : (p2pkv_engine_pull_key_t) { .status = P2PKV_KEY_LANDED };
    }
    return 0;
}

//  An event from the server, queued; unknown events are ignored (a newer
//  server may say more).
static void
s_queue(p2pkv_engine_t *self, const json_t *j)
{
    const char *name = json_string_value(json_object_get(j, "event"));
    bool store = name && streq(name, "store_result"), pull = name && streq(name, "pull_result");
    pk_elink_event_t *e = (store || pull) ? calloc(1, sizeof *e) : NULL;
    if (!e)
        return;
    e->event.kind = store ? P2PKV_EVENT_STORE : P2PKV_EVENT_PULL;
    e->event.id = (uint64_t) json_integer_value(json_object_get(j, store ? "job" : "pull"));
    if (store)
        e->event.success = json_is_true(json_object_get(j, "success"));
    else {
        e->event.landed = (size_t) json_integer_value(json_object_get(j, "landed"));
        if (s_event_keys(e, j) < 0) {
            free(e);
            return;
        }
        e->event.success = e->event.missing == 0;
        const char *reason = json_string_value(json_object_get(j, "reason"));
        snprintf(e->event.reason, sizeof e->event.reason, "%s", reason ? reason : "");
    }
    if (self->tail)
        self->tail->next = e;
    else {
        self->head = e;
        uint64_t one = 1;
        //  empty -> not empty: the eventfd becomes readable
        if (write(self->evfd, &one, sizeof one) != sizeof one)
            zsys_debug("p2pkv engine: eventfd write failed");
    }
    self->tail = e;
}

//  One message if one waits: the parsed object, or NULL.  Events are
//  queued here and come back as NULL too; *got says whether anything was
//  read.
static json_t *
s_read_one(p2pkv_engine_t *self, bool *got)
{
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    *got = zmq_msg_recv(&msg, zsock_resolve(self->sock), ZMQ_DONTWAIT) >= 0;
    json_t *j = *got ? json_loadb(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, NULL) : NULL;
    while (*got && zmq_msg_more(&msg)) {        //  one frame is expected: skip the rest
        zmq_msg_close(&msg);
        zmq_msg_init(&msg);
        zmq_msg_recv(&msg, zsock_resolve(self->sock), ZMQ_DONTWAIT);
    }
    zmq_msg_close(&msg);
    if (j && json_object_get(j, "event")) {
        s_queue(self, j);
        json_decref(j);
        return NULL;
    }
    if (j && self->stale) {
        self->stale--;                          //  the answer of a request that timed out
        json_decref(j);
        return NULL;
    }
    return j;
}

void
pk_elink_drain(p2pkv_engine_t *self)
{
    bool got = true;
    while (got && (zsock_events(self->sock) & ZMQ_POLLIN))
        json_decref(s_read_one(self, &got));    //  an answer nobody asked for: dropped
}

//  Waits up to deadline (monotonic seconds) for the socket: 1 readable, 0
//  not.  A signal does not cut the wait short (the engine's own handlers
//  may interrupt us at any time).
int
pk_elink_wait(p2pkv_engine_t *self, double deadline)
{
    zmq_pollitem_t item = { zsock_resolve(self->sock), 0, ZMQ_POLLIN, 0 };
    for (;;) {
        double left = deadline - pk_clock_monotonic();
        long ms = left > 0 ? (long) (left * 1000) + 1 : 0;
        int rc = zmq_poll(&item, 1, ms);
        if (rc >= 0 || zmq_errno() != EINTR || left <= 0)
            return rc > 0;
    }
}

int
pk_elink_refusal(const char *text)
{
    static const struct {
        const char *says;
        int rc;
    } known[] = {
        { "every block is pinned or being written", -ENOSPC },
        { "a key is already in the pool", -EEXIST },
        { "a key is pinned by a transfer", -EBUSY },
        { "a key is not reserved by this connection", -ENOENT },
        { "is not ready in the pool", -ENOENT },
        { "the server restarted; reopen the engine", -ESTALE },
        { "the server is draining", -ESHUTDOWN },
        { "too many", -EAGAIN },
        { "out of memory", -ENOMEM },
    };
    for (size_t i = 0; text && i < sizeof known / sizeof known[0]; i++)
        if (strstr(text, known[i].says))
            return known[i].rc;
    return -EINVAL;
}

json_t *
pk_elink_ask(p2pkv_engine_t *self, json_t *req, const char *what, int *rc_p, char *err)
{
    //  every request after describe names the server start whose pool
    //  this handle mapped (engine_internal.h); describe itself names none
    if (req && self->instance[0]
        && json_object_set_new(req, "instance", json_string(self->instance)) != 0) {
        json_decref(req);
        req = NULL;
    }
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!text) {
        *rc_p = pk_err(err, -ENOMEM, "%s: out of memory", what);
        return NULL;
    }
    //  The socket's owner again: ZeroMQ reconnects by name, so a server
    //  gone and a socket of someone else's in its place would get this
    //  request.  Where the directory lets no other user in (the default)
    //  that cannot happen; where it can (a sticky /tmp, after the server
    //  removed its socket), this look stops it, at an lstat and a stat
    //  (about a microsecond) per request.  No file (a server restarting)
    //  is no one to talk to: the request waits for its answer as before.
    struct stat st;
    if (self->local_file && !(lstat(self->local_file, &st) != 0 && errno == ENOENT)
        && (*rc_p = pk_local_check_owner(self->local_file, self->owner, err)) != 0) {
        free(text);
        return NULL;
    }
    pk_elink_drain(self);
    int sent = zmq_send(zsock_resolve(self->sock), text, strlen(text), ZMQ_DONTWAIT);
    free(text);
    if (sent < 0) {
        *rc_p = pk_err(err, -EAGAIN, "%s: cannot send to the server: %s", what,
                       zmq_strerror(zmq_errno()));
        return NULL;
    }
    double deadline = pk_clock_monotonic() + self->timeout;
    json_t *answer = NULL;
    bool got = false;
    while (!answer && (got || pk_elink_wait(self, deadline)))
        answer = s_read_one(self, &got);
    pk_elink_drain(self);
    if (!answer) {
        self->stale++;
        *rc_p = pk_err(err, -ETIMEDOUT, "%s: no answer from the server within %g s", what,
                       self->timeout);
        return NULL;
    }
    if (json_is_true(json_object_get(answer, "ok"))) {
        *rc_p = 0;
        return answer;
    }
    const char *says = json_string_value(json_object_get(answer, "error"));
    *rc_p = pk_err(err, pk_elink_refusal(says), "%s", says ? says : "refused, without a reason");
    if (*rc_p == -ESTALE)
        self->restarted = true;
    json_decref(answer);
    return NULL;
}

//  The first queued event, now the handle's delivered one; NULL when the
//  queue is empty.  The eventfd is read empty with the queue.
static pk_elink_event_t *
s_pop(p2pkv_engine_t *self)
{
    pk_elink_event_t *e = self->head;
    if (!e)
        return NULL;
    self->head = e->next;
    if (!self->head) {
        self->tail = NULL;
        uint64_t count;
        if (read(self->evfd, &count, sizeof count) != sizeof count)
            zsys_debug("p2pkv engine: eventfd read failed");
    }
    e->next = NULL;
    s_event_free(self->delivered);
    self->delivered = e;
    return e;
}

//  Until the queue has an event or deadline passes: reads the socket.
static void
s_wait_event(p2pkv_engine_t *self, double deadline)
{
    pk_elink_drain(self);
    while (!self->head && pk_elink_wait(self, deadline))
        pk_elink_drain(self);
}

int
p2pkv_engine_fd(p2pkv_engine_t *self)
{
    return self ? self->epfd : -EINVAL;
}

int
p2pkv_engine_poll(p2pkv_engine_t *self, double timeout)
{
    if (!self)
        return -EINVAL;
    s_wait_event(self, pk_clock_monotonic() + (timeout > 0 ? timeout : 0));
    if (!self->on_event) {
        int n = 0;
        for (pk_elink_event_t *e = self->head; e; e = e->next)
            n++;
        return n;
    }
    //  the events waiting now: a callback that asks the server may queue more,
    //  for the next poll
    int n = 0, waiting = 0;
    for (pk_elink_event_t *e = self->head; e; e = e->next)
        waiting++;
    for (pk_elink_event_t *e; n < waiting && (e = s_pop(self)); n++)
        self->on_event(self->arg, &e->event);
    pk_elink_drain(self);
    return n;
}

int
p2pkv_engine_next_event(p2pkv_engine_t *self, double timeout, p2pkv_engine_event_t *event)
{
    if (!self || !event)
        return -EINVAL;
    s_wait_event(self, pk_clock_monotonic() + (timeout > 0 ? timeout : 0));
    pk_elink_event_t *e = s_pop(self);
    pk_elink_drain(self);
    if (!e)
        return -ETIMEDOUT;
    *event = e->event;
    return 0;
}
