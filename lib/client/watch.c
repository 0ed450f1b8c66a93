/*  watch.c: why a connection to a server fails, said at once.

    ZeroMQ retries a connection forever and says nothing to the socket's
    user: without a look of our own, a port with nothing listening, a port
    of another protocol, a host name that does not resolve and a server
    that refuses our CURVE key would all look like a server that does not
    answer (a bare timeout, 10 s and more).  So:

    - the endpoint is checked before it is handed to ZeroMQ: a transport
      named (tcp://, ipc://, inproc://), and a tcp host resolved here as
      libzmq will (getaddrinfo, IPv4 unless czmq's IPv6 is on), since
      libzmq reports a name that does not resolve only as retries;
    - a socket monitor on the DEALER reports what ZeroMQ saw: a refused
      key or a CURVE mechanism on one side only (the handshake failed),
      a connection that failed (connect retried) or was closed by the
      peer before the ZeroMQ handshake completed;
    - what the monitor cannot tell is asked of the peer directly, with a
      probe: a TCP (or ipc) connection of our own, which fails with the
      kernel's errno (connection refused, no route) or reads what the peer
      says first, having sent the ZeroMQ signature as libzmq does.  A
      ZeroMQ peer sends its own greeting (0xff, 8 bytes, 0x7f) at once; a
      peer whose first byte is another is not a ZeroMQ port (an SSH or
      SMTP banner, a Redis error, an HTTP reply), nor one that closes the
      connection before sending anything.  A peer that says nothing (an
      HTTP server waiting for a line, a p2pkv server stopped or frozen
      whose kernel still accepts) while the DEALER's own connection also
      waits for its greeting is given up: libzmq's I/O thread greets on
      accept, whatever the application does, so two connections silent
      for seconds are a hung process or another protocol, never a busy
      server (doc/design.md, "A silent port is given up").

    Probes are made only while a connect or describe waits (the watch's
    probe flag), at most S_MAX_PROBES a watch, never while one runs, and
    only after ZeroMQ itself failed: a connect that succeeds costs the
    monitor's events, nothing more.  Everything is non-blocking: a step
    looks, never waits (the client's lock is held across it).

    The monitor costs two ZeroMQ sockets (ours and libzmq's end of it)
    while a session connects, nothing per message, and is closed once the
    session is up (client.c, s_session_up): three sockets per session made
    a process run out of czmq's 1,024 at its 342nd session.
*/
#include "client/client_internal.h"
#include "base/clock.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

//  A probe's connect and first bytes (s).  A ZeroMQ peer greets as soon
//  as its I/O thread takes the connection: under a millisecond on a
//  loopback, one round trip across a network; 2 s covers a loaded host's
//  scheduling many times over, and with S_SILENT_AFTER makes a silent
//  peer's verdict come some 3 s after the connection.
#define S_PROBE_WAIT 2.0
#define S_SILENT_AFTER 1.0          //  connected, no handshake this long: probe
#define S_PROBE_GAP 0.2             //  between two probes
#define S_MAX_PROBES 3
//  A mechanism mismatch, seen by the monitor or read by the probe
#define S_NOT_CURVE "the server does not use CURVE (mechanism mismatch)"
#define S_NEEDS_CURVE "the server requires CURVE (set curve_public, curve_secret and " \
                      "curve_server)"

int
pk_client_endpoint_resolve(const char *endpoint, pk_client_addr_t *addr, char *err)
{
    memset(addr, 0, sizeof *addr);
    const char *sep = strstr(endpoint, "://");
    if (!sep)
        return pk_err(err, -EINVAL, "%.128s: no transport: an endpoint is tcp://HOST:PORT "
                      "(or ipc://PATH, inproc://NAME)", endpoint);
    //  ZeroMQ's transports (not the data plane's: tests/seam_names.sh)
    const char *rest = sep + 3;
    if (strncmp(endpoint, "ipc://", 6) == 0) {
        struct sockaddr_un *un = (struct sockaddr_un *) &addr->sa;
        size_t len = strlen(rest);
        if (!len || len >= sizeof un->sun_path)
            return 0;               //  libzmq's to refuse
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, rest, len);
        if (un->sun_path[0] == '@')
            un->sun_path[0] = '\0';     //  the abstract namespace, as libzmq
        addr->len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len
                                 + (un->sun_path[0] ? 1 : 0));
        addr->family = AF_UNIX;
        return 0;
    }
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return 0;                   //  inproc and the rest: libzmq judges them
    //  tcp://[SOURCE;]HOST:PORT: the destination follows the last ';'
    const char *dst = strrchr(rest, ';');
    dst = dst ? dst + 1 : rest;
    const char *colon = strrchr(dst, ':');
    if (!colon || colon == dst || !colon[1])
        return pk_err(err, -EINVAL, "%.128s: expected tcp://HOST:PORT", endpoint);
    char host[256], port[8];
    size_t hlen = (size_t) (colon - dst), plen = strlen(colon + 1);
    if (hlen >= sizeof host || plen >= sizeof port
        || strspn(colon + 1, "0123456789") != plen || atoi(colon + 1) < 1
        || atoi(colon + 1) > 65535)
        return pk_err(err, -EINVAL, "%.128s: expected tcp://HOST:PORT, PORT a number in "
                      "1..65535", endpoint);
    memcpy(host, dst, hlen);
    host[hlen] = '\0';
    memcpy(port, colon + 1, plen + 1);
    char *h = host;
    if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
        host[hlen - 1] = '\0';
        h++;
    }
    struct addrinfo hints = { .ai_family = zsys_ipv6() ? AF_UNSPEC : AF_INET,
                              .ai_socktype = SOCK_STREAM }, *res = NULL;
    int gai = getaddrinfo(h, port, &hints, &res);
    if (gai)
        return pk_err(err, -ENOENT, "%.128s: the host name \"%.64s\" does not resolve: %s",
                      endpoint, h, gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
    if (res->ai_addrlen <= sizeof addr->sa) {
        memcpy(&addr->sa, res->ai_addr, res->ai_addrlen);
        addr->len = res->ai_addrlen;
        addr->family = res->ai_family;
    }
    freeaddrinfo(res);
    return 0;
}

int
pk_client_watch_open(pk_client_watch_t *w, zsock_t *dealer, const pk_client_addr_t *addr,
                     bool curve, bool probe)
{
    static atomic_uint_fast64_t next;
    *w = (pk_client_watch_t) { .curve = curve, .probe = probe && addr && addr->family,
                               .fd = -1 };
    if (addr)
        w->addr = *addr;
    char ep[80];
    snprintf(ep, sizeof ep, "inproc://p2pkv-client-monitor-%llu",
             (unsigned long long) atomic_fetch_add(&next, 1));
    int events = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;
    if (w->probe)
        events |= ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_DISCONNECTED
                  | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(zsock_resolve(dealer), ep, events) != 0)
        return -ENOMEM;
    w->monitor = zsock_new_pair(ep);
    if (!w->monitor) {
        zmq_socket_monitor(zsock_resolve(dealer), NULL, 0);
        return -ENOMEM;
    }
    pk_client_sockets_count(2);     //  ours and libzmq's end
    return 0;
}

static void
s_probe_end(pk_client_watch_t *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    w->next_probe = pk_clock_monotonic() + S_PROBE_GAP;
}

void
pk_client_watch_close(pk_client_watch_t *w, zsock_t *dealer)
{
    if (w->fd >= 0)
        s_probe_end(w);
    if (!w->monitor)
        return;
    zmq_socket_monitor(zsock_resolve(dealer), NULL, 0);
    zsock_destroy(&w->monitor);
    pk_client_sockets_count(-2);
}

//  The probe's connection failed with e.
static int
s_connect_failed(pk_client_watch_t *w, int e, char *reason, size_t len)
{
    s_probe_end(w);
    if (e == ECONNREFUSED)
        snprintf(reason, len, "connection refused (nothing listens there)");
    else if (e == ENOENT && w->addr.family == AF_UNIX)
        snprintf(reason, len, "cannot connect: no such socket file (is the server running?)");
    else
        snprintf(reason, len, "cannot connect: %s", strerror(e));
    return -e;
}

//  What the peer sent, printable, into reason.
static int
s_not_zmtp(pk_client_watch_t *w, char *reason, size_t len)
{
    char said[4 * sizeof w->got + 1];
    size_t at = 0;
    for (size_t i = 0; i < w->ngot && i < 16; i++)     //  its first bytes say enough
        at += (size_t) snprintf(said + at, sizeof said - at,
                                isprint(w->got[i]) && w->got[i] != '"' && w->got[i] != '\\'
                                ? "%c" : "\\x%02x", w->got[i]);
    s_probe_end(w);
    snprintf(reason, len, "not a p2pkv/ZeroMQ port: it sent \"%s\" where a ZeroMQ greeting "
             "was due", said);
    return -EPROTO;
}

static void
s_probe_start(pk_client_watch_t *w, double now)
{
    w->want = false;
    w->probes++;
    w->fd_error = 0;
    w->greeted = false;
    w->ngot = 0;
    w->probe_until = now + S_PROBE_WAIT;
    w->fd = socket(w->addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (w->fd < 0)
        return;                     //  out of descriptors: no probe, no verdict
    w->fd_connected = connect(w->fd, (const struct sockaddr *) &w->addr.sa, w->addr.len) == 0;
    if (!w->fd_connected && errno != EINPROGRESS)
        w->fd_error = errno;
}

//  The probe, one look: 0 (no verdict yet, or none to give), or a
//  negative errno with reason.
static int
s_probe_step(pk_client_watch_t *w, double now, char *reason, size_t len)
{
    if (w->fd_error)
        return s_connect_failed(w, w->fd_error, reason, len);
    if (!w->fd_connected) {
        struct pollfd p = { .fd = w->fd, .events = POLLOUT };
        if (poll(&p, 1, 0) <= 0) {
            if (now > w->probe_until)
                s_probe_end(w);
            return 0;
        }
        int e = 0;
        socklen_t elen = sizeof e;
        if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &e, &elen) == 0 && e)
            return s_connect_failed(w, e, reason, len);
        w->fd_connected = true;
    }
    if (!w->greeted) {
        //  a ZeroMQ signature, as libzmq sends first, and ZMTP 3's major
        //  version: a server that waits for its client to speak (Redis)
        //  answers it, and a ZeroMQ peer then sends its whole greeting,
        //  mechanism included
        static const uint8_t signature[11] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3 };
        w->greeted = send(w->fd, signature, sizeof signature, MSG_DONTWAIT | MSG_NOSIGNAL) > 0;
    }
    ssize_t n = recv(w->fd, w->got + w->ngot, sizeof w->got - w->ngot, MSG_DONTWAIT);
    if (n > 0) {
        w->ngot += (size_t) n;
        if (w->got[0] != 0xff)
            return s_not_zmtp(w, reason, len);
        w->heard_zmtp = w->ngot >= 10;
        //  The greeting's mechanism (bytes 12-31, NUL-padded) against ours.
        //  The monitor's mechanism-mismatch event is not enough alone: a
        //  CURVE server that closes at once may reset the connection
        //  before our DEALER read its greeting, and then the event never
        //  comes, only disconnects (seen once in a CI run).
        if (w->ngot >= 32 && w->got[10] >= 3) {
            bool curve = memcmp(w->got + 12, "CURVE\0", 6) == 0;
            bool null = memcmp(w->got + 12, "NULL\0", 5) == 0;
            if (curve != w->curve && (curve || null)) {
                s_probe_end(w);
                snprintf(reason, len, "%s", w->curve ? S_NOT_CURVE : S_NEEDS_CURVE);
                return -EACCES;
            }
        }
        if (w->ngot == sizeof w->got)
            s_probe_end(w);         //  a ZeroMQ greeting: the events tell the rest
        return 0;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        if (w->ngot) {
            s_probe_end(w);
            return 0;
        }
        s_probe_end(w);
        snprintf(reason, len, "not a p2pkv/ZeroMQ port: it closed the connection without "
                 "a ZeroMQ greeting");
        return -EPROTO;
    }
    if (now <= w->probe_until)
        return 0;
    s_probe_end(w);
    //  It took our connection and said nothing.  Only with the DEALER's
    //  own connection still up and ungreeted is that a verdict: a peer
    //  that greeted one of them is a ZeroMQ peer (its handshake may wait
    //  on its ZAP handler, an application thread), and one that closed
    //  the DEALER's was asked again by the events.
    if (w->ngot || !w->connected || w->handshaken)
        return 0;
    snprintf(reason, len, "it accepted the connection but sent no ZeroMQ greeting within "
             "%.1f s (a hung server, stopped or frozen, or not a p2pkv/ZeroMQ port)",
             now - w->connected_at);
    return -ETIMEDOUT;
}

//  One monitor event: 0, or a negative errno with reason.
static int
s_event(pk_client_watch_t *w, uint16_t event, uint32_t value, double now, char *reason,
        size_t len)
{
    switch (event) {
    case ZMQ_EVENT_CONNECTED:
        w->connected = w->attempt_connected = w->ever_connected = true;
        w->connected_at = now;
        return 0;
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        w->handshaken = w->ever_handshaken = true;
        return 0;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
    case ZMQ_EVENT_DISCONNECTED:
        //  closed before the handshake completed: the peer may not speak ZMTP
        if (w->connected && !w->handshaken)
            w->want = true;
        w->connected = w->handshaken = false;
        return 0;
    case ZMQ_EVENT_CONNECT_RETRIED:
        //  the connection itself failed: the probe learns the kernel's why
        if (!w->attempt_connected)
            w->want = true;
        w->attempt_connected = false;
        return 0;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        snprintf(reason, len, "the server refused our CURVE key (ZAP status %u)", value);
        return -EACCES;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
            snprintf(reason, len, "%s", w->curve ? S_NOT_CURVE : S_NEEDS_CURVE);
            return -EACCES;
        }
        if (w->curve) {
            //  a wrong curve_server fails the server's decryption: it drops
            //  the connection and we see a malformed or missing welcome
            snprintf(reason, len, "CURVE handshake failed (protocol error 0x%x): is "
                     "curve_server the server's key?", value);
            return -EACCES;
        }
        if (w->probe) {
            snprintf(reason, len, "not a p2pkv/ZeroMQ port: the ZeroMQ handshake failed "
                     "(protocol error 0x%x)", value);
            return -EPROTO;
        }
        return 0;
    default:
        return 0;
    }
}

int
pk_client_watch_step(pk_client_watch_t *w, char *reason, size_t len)
{
    int rc = 0;
    double now = pk_clock_monotonic();
    while (rc == 0 && w->monitor && (zsock_events(w->monitor) & ZMQ_POLLIN)) {
        zmsg_t *msg = zmsg_recv(w->monitor);
        zframe_t *ev = msg ? zmsg_first(msg) : NULL;
        uint16_t event = 0;
        uint32_t value = 0;
        if (ev && zframe_size(ev) >= 6) {
            memcpy(&event, zframe_data(ev), 2);
            memcpy(&value, zframe_data(ev) + 2, 4);
        }
        zmsg_destroy(&msg);
        rc = s_event(w, event, value, now, reason, len);
    }
    if (rc || !w->probe)
        return rc;
    //  connected, and the handshake does not come: the peer may say why
    if (w->connected && !w->handshaken && !w->silent_probed
        && now - w->connected_at > S_SILENT_AFTER) {
        w->silent_probed = true;
        w->want = true;
    }
    if (w->want && w->fd < 0 && w->probes < S_MAX_PROBES && now >= w->next_probe)
        s_probe_start(w, now);
    return w->fd >= 0 ? s_probe_step(w, now, reason, len) : 0;
}

void
pk_client_watch_note(const pk_client_watch_t *w, char *note, size_t len)
{
    if (!w->probe)
        snprintf(note, len, "%s", "");
    else if (w->ever_handshaken)
        snprintf(note, len, ": the ZeroMQ handshake completed, but no answer came (a "
                 "server too busy to answer, or stalled)");
    else if (!w->ever_connected)
        snprintf(note, len, ": no connection was made (the host down, or a firewall "
                 "dropping packets?)");
    else if (w->heard_zmtp)
        snprintf(note, len, ": it greets as ZeroMQ but completed no handshake (its "
                 "authentication handler did not answer: a stalled server?)");
    else if (w->connected)
        snprintf(note, len, ": it accepted the connection but completed no ZeroMQ "
                 "handshake in %.1f s (a hung server, or not a p2pkv/ZeroMQ port)",
                 pk_clock_monotonic() - w->connected_at);
    else
        snprintf(note, len, ": it took the connection but completed no ZeroMQ handshake "
                 "(not a p2pkv/ZeroMQ port, or a server that does not answer)");
}
