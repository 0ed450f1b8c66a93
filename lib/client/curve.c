/*  curve.c: the client's CURVE keys (p2pkv_config_t's curve_public,
    curve_secret and curve_server), applied to its DEALER sockets, and a
    socket monitor that turns a refused handshake into an error.

    ZeroMQ retries a refused handshake forever and says nothing to the
    socket's user: without the monitor, a key the server does not allow
    would look like a server that never answers (a bare timeout).  The
    monitor costs two ZeroMQ sockets (ours and libzmq's end of it) while a
    session connects, nothing per message, and is closed once the session
    is up (client.c, s_session_up): three sockets per session made a
    process run out of czmq's 1,024 at its 342nd session.
*/
#include "client/client_internal.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

//  One field: 40 characters of Z85, decoding to 32 bytes.
static int
s_key(const char *name, const char *text, char out[41], uint8_t bin[32], char *err)
{
    if (strlen(text) != 40 || !zmq_z85_decode(bin, text))
        return pk_err(err, -EINVAL, "%s: expected a Z85 key of 40 characters", name);
    memcpy(out, text, 41);
    return 0;
}

int
pk_client_curve_keys(const p2pkv_config_t *c, pk_client_curve_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (!c || (!c->curve_public && !c->curve_secret && !c->curve_server))
        return 0;
    const char *missing = !c->curve_public ? "curve_public"
                          : !c->curve_secret ? "curve_secret"
                          : !c->curve_server ? "curve_server" : NULL;
    if (missing)
        return pk_err(err, -EINVAL, "%s: missing (CURVE takes curve_public, curve_secret "
                      "and curve_server, or none)", missing);
    uint8_t pub[32], sec[32], srv[32], derived[32];
    int rc;
    if ((rc = s_key("curve_public", c->curve_public, out->public_key, pub, err))
        || (rc = s_key("curve_secret", c->curve_secret, out->secret_key, sec, err))
        || (rc = s_key("curve_server", c->curve_server, out->server_key, srv, err)))
        return rc;
    //  a mismatched pair would fail every handshake, looking like a refusal
    if (crypto_scalarmult_base(derived, sec) != 0 || sodium_memcmp(derived, pub, 32) != 0)
        return pk_err(err, -EINVAL, "curve_public: not the public key of curve_secret");
    sodium_memzero(sec, sizeof sec);
    out->on = true;
    return 0;
}

int
pk_client_curve_server_key(const char *text, char out[41], char *err)
{
    uint8_t bin[32];
    return s_key("server key", text, out, bin, err);
}

void
pk_client_curve_apply(zsock_t *dealer, const pk_client_curve_t *keys, const char *server_key)
{
    if (!keys->on)
        return;
    zsock_set_curve_serverkey(dealer, server_key && *server_key ? server_key : keys->server_key);
    zsock_set_curve_publickey(dealer, keys->public_key);
    zsock_set_curve_secretkey(dealer, keys->secret_key);
}

zsock_t *
pk_client_curve_monitor(zsock_t *dealer)
{
    static atomic_uint_fast64_t next;
    char ep[80];
    snprintf(ep, sizeof ep, "inproc://p2pkv-client-monitor-%llu",
             (unsigned long long) atomic_fetch_add(&next, 1));
    if (zmq_socket_monitor(zsock_resolve(dealer), ep, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                           | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0)
        return NULL;
    zsock_t *pair = zsock_new_pair(ep);
    if (!pair)
        zmq_socket_monitor(zsock_resolve(dealer), NULL, 0);
    else
        pk_client_sockets_count(2);     //  ours and libzmq's end
    return pair;
}

void
pk_client_curve_monitor_close(zsock_t *dealer, zsock_t **monitor_p)
{
    if (!*monitor_p)
        return;
    zmq_socket_monitor(zsock_resolve(dealer), NULL, 0);
    zsock_destroy(monitor_p);
    pk_client_sockets_count(-2);
}

int
pk_client_curve_refused(zsock_t *monitor, bool curve, char *reason, size_t len)
{
    int rc = 0;
    while (rc == 0 && monitor && (zsock_events(monitor) & ZMQ_POLLIN)) {
        zmsg_t *msg = zmsg_recv(monitor);
        zframe_t *ev = msg ? zmsg_first(msg) : NULL;
        uint16_t event = 0;
        uint32_t value = 0;
        if (ev && zframe_size(ev) >= 6) {
            memcpy(&event, zframe_data(ev), 2);
            memcpy(&value, zframe_data(ev) + 2, 4);
        }
        zmsg_destroy(&msg);
        if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            snprintf(reason, len, "the server refused our CURVE key (ZAP status %u)", value);
            rc = -EACCES;
        }
        else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                 && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
            snprintf(reason, len, curve ? "the server does not use CURVE (mechanism mismatch)"
                                        : "the server requires CURVE (set curve_public, "
                                          "curve_secret and curve_server)");
            rc = -EACCES;
        }
        else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && curve) {
            //  a wrong curve_server fails the server's decryption: it drops
            //  the connection and we see a malformed or missing welcome
            snprintf(reason, len, "CURVE handshake failed (protocol error 0x%x): is "
                     "curve_server the server's key?", value);
            rc = -EACCES;
        }
    }
    return rc;
}
