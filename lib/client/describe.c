/*  describe.c: p2pkv_describe, a server's description without a session:
    one DEALER, describe repeated until answered, nothing kept.  */
#include "client/client_internal.h"
#include "base/thread.h"
#include "base/clock.h"
#include "wire/protocol.h"

#include <czmq.h>
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

int
p2pkv_describe(const char *endpoint, double timeout, p2pkv_description_t *out, char *err)
{
    pk_leave_signals_to_the_application();
    zsock_t *dealer = zsock_new_dealer(endpoint);
    if (!dealer) {
        (void) pk_err(err, 0, "cannot connect to %s", endpoint);
        return -EINVAL;
    }
    double deadline = pk_clock_monotonic() + timeout, next = 0;
    int rc = -ETIMEDOUT;
    while (rc == -ETIMEDOUT && pk_clock_monotonic() < deadline) {
        if (pk_clock_monotonic() >= next) {
            pk_msg_t d = { .type = PK_MSG_DESCRIBE };
            bool sent = s_send_frame(dealer, &d) == 0;
            next = pk_clock_monotonic() + (sent ? 0.5 : 0.005);
        }
        pk_msg_t *m = s_recv_msg(dealer, NULL);
        if (m && m->type == PK_MSG_DESCRIPTION) {
            snprintf(out->peer_id, sizeof out->peer_id, "%s", m->peer_id);
            out->block_len = m->block_len;
            snprintf(out->fingerprint, sizeof out->fingerprint, "%s", m->config_fingerprint);
            snprintf(out->hash_seed, sizeof out->hash_seed, "%s", m->hash_seed);
            snprintf(out->provider, sizeof out->provider, "%s", m->provider);
            rc = 0;
        }
        else if (!m)
            zclock_sleep(2);
        pk_msg_destroy(&m);
    }
    if (rc)
        (void) pk_err(err, 0, "no description from %s within %.1f s", endpoint, timeout);
    zsock_destroy(&dealer);
    return rc;
}

