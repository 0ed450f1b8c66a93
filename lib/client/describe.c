/*  describe.c: p2pkv_describe, a server's description without a session:
    one DEALER, describe repeated until answered, nothing kept.  With CURVE
    keys (p2pkv_describe_curve) the DEALER authenticates.  Its watch
    (watch.c) says at once what keeps an answer from coming: nothing
    listening, a port of another protocol, a refused key, CURVE on one
    side only; the endpoint is checked (and its host resolved) first.  */
#include "client/client_internal.h"
#include "wire/czmq_setup.h"
#include "base/clock.h"
#include "wire/protocol.h"

#include <czmq.h>
#include <sodium.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
s_send_frame(zsock_t *dealer, const pk_msg_t *m)
{
    char *frame;
    size_t len;
    int rc = pk_msg_encode(m, &frame, &len, NULL);
    if (rc)
        return rc;
    //  never block: a DEALER with no connected server would wait forever
    zframe_t *f = zframe_new(frame, len);
    free(frame);
    rc = zframe_send(&f, dealer, ZFRAME_DONTWAIT);
    zframe_destroy(&f);
    return rc ? -EAGAIN : 0;
}

//  The next message, NULL when none waits.  A frame that does not decode
//  comes back as NULL with err set (PK_ERRLEN), when err is given.
static pk_msg_t *
s_recv_msg(zsock_t *dealer, char *err)
{
    if (!(zsock_events(dealer) & ZMQ_POLLIN))
        return NULL;
    zframe_t *f = zframe_recv(dealer);
    pk_msg_t *m = NULL;
    if (f && pk_msg_decode(zframe_data(f), zframe_size(f), &m, err) != 0)
        m = NULL;
    zframe_destroy(&f);
    return m;
}

static void
s_description(const pk_msg_t *m, p2pkv_description_t *out)
{
    snprintf(out->peer_id, sizeof out->peer_id, "%s", m->peer_id);
    out->block_len = m->block_len;
    snprintf(out->fingerprint, sizeof out->fingerprint, "%s", m->config_fingerprint);
    snprintf(out->hash_seed, sizeof out->hash_seed, "%s", m->hash_seed);
    snprintf(out->provider, sizeof out->provider, "%s", m->provider);
    //  a server older than the list offers its provider alone
    out->nproviders = 0;
    for (size_t i = 0; i < m->nproviders && i < P2PKV_MAX_PROVIDERS; i++)
        snprintf(out->providers[out->nproviders++], sizeof out->providers[0], "%s",
                 m->providers[i]);
    if (!out->nproviders)
        snprintf(out->providers[out->nproviders++], sizeof out->providers[0], "%s",
                 m->provider);
    snprintf(out->host, sizeof out->host, "%s", m->host ? m->host : "");
}

int
p2pkv_describe(const char *endpoint, double timeout, p2pkv_description_t *out, char *err)
{
    return p2pkv_describe_curve(endpoint, timeout, NULL, out, err);
}

//  The DEALER with the keys applied and its watch, connected: 0, or a
//  negative errno with err (the caller destroys what was made).
static int
s_open(const char *endpoint, const pk_client_addr_t *addr, const p2pkv_config_t *config,
       pk_client_curve_t *keys, zsock_t **dealer, pk_client_watch_t *watch, char *err)
{
    int rc = pk_client_curve_keys(config, keys, err);
    if (rc)
        return rc;
    //  the DEALER's mailbox and connection, the monitor's pair (watch.c)
    rc = pk_client_dealer_new(dealer, 4, err);
    if (rc)
        return rc;
    pk_client_curve_apply(*dealer, keys, NULL);
    if (pk_client_watch_open(watch, *dealer, addr, keys->on, true) != 0)
        return pk_err(err, -ENOMEM, "cannot monitor the socket to %s", endpoint);
    if (zsock_connect(*dealer, "%s", endpoint) < 0)
        return pk_err(err, -EINVAL, "cannot connect to %.128s: %s", endpoint,
                      zmq_strerror(zmq_errno()));
    return 0;
}

int
p2pkv_describe_curve(const char *endpoint, double timeout, const p2pkv_config_t *config,
                     p2pkv_description_t *out, char *err)
{
    pk_client_addr_t addr;
    int rc = pk_client_endpoint_resolve(endpoint, &addr, err);
    return rc ? rc : pk_client_describe(endpoint, &addr, timeout, config, out, err);
}

int
pk_client_describe(const char *endpoint, const pk_client_addr_t *addr, double timeout,
                   const p2pkv_config_t *config, p2pkv_description_t *out, char *err)
{
    return pk_client_describe_caps(endpoint, addr, timeout, config, out, NULL, err);
}

int
pk_client_describe_caps(const char *endpoint, const pk_client_addr_t *addr, double timeout,
                        const p2pkv_config_t *config, p2pkv_description_t *out, char *caps,
                        char *err)
{
    pk_czmq_setup();
    pk_client_curve_t keys;
    zsock_t *dealer = NULL;
    pk_client_watch_t watch = { .fd = -1 };
    char why[PK_ERRLEN] = "";
    int rc = s_open(endpoint, addr, config, &keys, &dealer, &watch, err);
    if (rc)
        goto done;
    double deadline = pk_clock_monotonic() + timeout, next = 0;
    int refused = 0;                //  the watch's verdict (a silent port's is -ETIMEDOUT)
    rc = -ETIMEDOUT;
    while (rc == -ETIMEDOUT && pk_clock_monotonic() < deadline) {
        refused = pk_client_watch_step(&watch, why, sizeof why);
        if (refused) {
            rc = pk_err(err, refused, "%s: %s", endpoint, why);
            break;
        }
        if (pk_clock_monotonic() >= next) {
            pk_msg_t d = { .type = PK_MSG_DESCRIBE };
            bool sent = s_send_frame(dealer, &d) == 0;
            next = pk_clock_monotonic() + (sent ? 0.5 : 0.005);
        }
        pk_msg_t *m = s_recv_msg(dealer, NULL);
        if (m && m->type == PK_MSG_DESCRIPTION) {
            s_description(m, out);
            if (caps)
                snprintf(caps, PK_MAX_CAPS + 1, "%s", m->caps ? m->caps : "");
            rc = 0;
        }
        else if (!m)
            zclock_sleep(2);
        pk_msg_destroy(&m);
    }
    if (rc == -ETIMEDOUT && !refused) {
        char note[PK_ERRLEN];
        pk_client_watch_note(&watch, note, sizeof note);
        (void) pk_err(err, 0, "no description from %.100s within %.1f s%s", endpoint, timeout,
                      note);
    }
done:
    if (dealer)
        pk_client_watch_close(&watch, dealer);
    pk_client_dealer_destroy(&dealer);
    sodium_memzero(&keys, sizeof keys);
    return rc;
}
