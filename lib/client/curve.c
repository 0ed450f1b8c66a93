/*  curve.c: the client's CURVE keys (p2pkv_config_t's curve_public,
    curve_secret and curve_server), applied to its DEALER sockets.  A
    refused key is said by the socket's watch (watch.c).
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
