/*  zap.c: --allow and --curve-allow, as our own handler on libzmq's ZAP
    endpoint.

    czmq's zauth matches whole address strings only, so CIDR ranges need
    our own handler (RFC 27); the CURVE keys are checked here too, so that
    both filters hold and one handler answers.  It runs on the main thread:
    one request per wake, a table look-up or two each.  An admitted CURVE
    client's User-Id is its public key in Z85: every frame it sends
    carries it (zframe_meta), and the door ties its session to it.
*/
#include "daemon/node_internal.h"

#include <stdio.h>

//  Why a request is refused, NULL when admitted; key (41 bytes) gets the
//  client's Z85 public key with CURVE on.
static const char *
s_check(pk_node_t *self, const char *address, const char *mechanism, zframe_t *cred,
        char *key, char *who, size_t wholen)
{
    snprintf(who, wholen, "%s", address ? address : "?");
    if (!address || !pk_server_config_allows(self->config, address))
        return "address";
    if (!self->curve_cert)
        return NULL;
    if (!mechanism || !streq(mechanism, "CURVE") || !cred || zframe_size(cred) != 32)
        return "mechanism";
    zmq_z85_encode(key, zframe_data(cred), 32);
    snprintf(who, wholen, "CURVE key %s at %s", key, address);
    return pk_curve_admits(self, key) ? NULL : pk_curve_refusal(self, key);
}

//  One ZAP request (RFC 27): version, request id, domain, address,
//  identity, mechanism, credentials.
void
pk_zap_handle(pk_node_t *self, zmsg_t *req)
{
    char *version = zmsg_popstr(req), *id = zmsg_popstr(req), *domain = zmsg_popstr(req);
    char *address = zmsg_popstr(req), *identity = zmsg_popstr(req);
    char *mechanism = zmsg_popstr(req);
    zframe_t *cred = zmsg_pop(req);
    char key[41] = "", who[160];
    const char *why = s_check(self, address, mechanism, cred, key, who, sizeof who);
    if (why)
        pk_curve_refused(self, who, why);
    zmsg_t *rep = zmsg_new();
    zmsg_addstr(rep, "1.0");
    zmsg_addstr(rep, id ? id : "");
    zmsg_addstr(rep, why ? "400" : "200");
    zmsg_addstr(rep, why ? why : "OK");
    zmsg_addstr(rep, why ? "" : key);
    zmsg_addmem(rep, NULL, 0);
    zmsg_send(&rep, self->zap);
    pk_poller_touch(self->poller, self->zap);
    zframe_destroy(&cred);
    zstr_free(&version);
    zstr_free(&id);
    zstr_free(&domain);
    zstr_free(&address);
    zstr_free(&identity);
    zstr_free(&mechanism);
    zmsg_destroy(&req);
}
