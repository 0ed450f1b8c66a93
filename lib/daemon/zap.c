/*  zap.c: the --allow filter, as our own handler on libzmq's ZAP endpoint.

    czmq's zauth matches whole address strings only, so CIDR ranges need
    our own handler (RFC 27).  It runs on the main thread: one request per
    wake, a table look-up each (pk_server_config_allows).
*/
#include "daemon/node_internal.h"

//  One ZAP request (RFC 27): version, request id, domain, address,
//  identity, mechanism, credentials.  Admit the address if --allow does.
void
pk_zap_handle(pk_node_t *self)
{
    zmsg_t *req = zmsg_recv(self->zap);
    if (!req)
        return;
    char *version = zmsg_popstr(req), *id = zmsg_popstr(req), *domain = zmsg_popstr(req);
    char *address = zmsg_popstr(req);
    bool ok = address && pk_server_config_allows(self->config, address);
    if (!ok)
        pk_node_log(self, PK_LOG_INFO, "connection from %s refused (--allow)",
                    address ? address : "?");
    zmsg_t *rep = zmsg_new();
    zmsg_addstr(rep, "1.0");
    zmsg_addstr(rep, id ? id : "");
    zmsg_addstr(rep, ok ? "200" : "400");
    zmsg_addstr(rep, ok ? "OK" : "address not allowed");
    zmsg_addstr(rep, "");
    zmsg_addmem(rep, NULL, 0);
    zmsg_send(&rep, self->zap);
    zstr_free(&version);
    zstr_free(&id);
    zstr_free(&domain);
    zstr_free(&address);
    zmsg_destroy(&req);
}
