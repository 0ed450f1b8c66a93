/*  curve.c: --curve-secret, --curve-allow and --curve-servers: the peers'
    ROUTER as a CURVE server, the keys our ZAP handler admits, their
    reload at SIGHUP, and the rate-limited log of refusals.

    The allowed keys are loaded as czmq's zcertstore loads a directory
    (every file that zcert_load reads as a public certificate), but by us:
    zcertstore says nothing of what it skipped and reloads behind our back
    at a lookup, where we want a reload only at SIGHUP, logged with counts.
    Everything here runs on the main thread.
*/
#include "daemon/door.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

//  A refusal is logged at most once per key (or address) per interval,
//  with the count since its last line, and at most S_LINES lines per
//  interval overall: a flood of fresh keys costs a line count, not a line
//  each.
#define S_INTERVAL 10.0
#define S_LINES 16

static void
s_free_str(void **item)
{
    free(*item);
    *item = NULL;
}

static zhashx_t *
s_table(void)
{
    zhashx_t *h = zhashx_new();
    if (h)
        zhashx_set_destructor(h, s_free_str);
    return h;
}

//  The file must exist and be a regular file: "missing" and "not a file"
//  are told apart from "not a czmq certificate".
static int
s_stat_file(const char *opt, const char *path, char *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return pk_err(err, -errno, "%s %s: %s", opt, path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return pk_err(err, -EINVAL, "%s %s: not a regular file", opt, path);
    return 0;
}

//  The server's keypair, from a certificate zcert_save wrote (NAME_secret,
//  or NAME when NAME_secret lies beside it: zcert_load tries that first).
static int
s_load_secret(pk_node_t *self, const char *path, char *err)
{
    int rc = s_stat_file("--curve-secret", path, err);
    if (rc)
        return rc;
    zcert_t *cert = zcert_load(path);
    if (!cert)
        return pk_err(err, -EINVAL, "--curve-secret %s: not a czmq certificate "
                      "(no curve public-key)", path);
    static const char zeros[41] = "0000000000000000000000000000000000000000";
    if (strcmp(zcert_secret_txt(cert), zeros) == 0) {
        zcert_destroy(&cert);
        return pk_err(err, -EINVAL, "--curve-secret %s: no secret key in it (a public "
                      "certificate; give the NAME_secret file)", path);
    }
    self->curve_cert = cert;
    return 0;
}

//  One directory of public certificates: into *out, keyed by public key
//  (value: the file's name) or, for --curve-servers, by the certificate's
//  "endpoint" (value: its public key).  What is skipped is logged.
static int
s_load_dir(pk_node_t *self, const char *opt, const char *dir, bool by_endpoint,
           zhashx_t **out, size_t *skipped, char *err)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return pk_err(err, -errno, "%s %s: %s", opt, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return pk_err(err, -ENOTDIR, "%s %s: not a directory", opt, dir);
    DIR *d = opendir(dir);
    zhashx_t *h = d ? s_table() : NULL;
    if (!h) {
        int rc = d ? -ENOMEM : -errno;
        if (d)
            closedir(d);
        return pk_err(err, rc, "%s %s: %s", opt, dir, strerror(-rc));
    }
    *skipped = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len = strlen(e->d_name);
        const char *why = NULL;
        zcert_t *cert = NULL;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            why = "not a regular file";
        else if (len > 7 && strcmp(e->d_name + len - 7, "_secret") == 0)
            why = "a secret certificate (only public ones belong here)";
        //  zcert_load would read NAME_secret for NAME: a public file next
        //  to its secret one still loads only its public key here
        else if (!(cert = zcert_load(path)))
            why = "not a czmq certificate";
        else if (by_endpoint && !zcert_meta(cert, "endpoint"))
            why = "no endpoint in its metadata";
        if (why) {
            pk_node_log(self, PK_LOG_WARN, "%s: %s skipped: %s", opt, path, why);
            (*skipped)++;
        }
        else if (by_endpoint)
            zhashx_update(h, zcert_meta(cert, "endpoint"), strdup(zcert_public_txt(cert)));
        else
            zhashx_update(h, zcert_public_txt(cert), strdup(e->d_name));
        zcert_destroy(&cert);
    }
    closedir(d);
    zhashx_destroy(out);
    *out = h;
    return 0;
}

int
pk_curve_open(pk_node_t *self, char *err)
{
    const pk_server_config_t *config = self->config;
    size_t skipped = 0;
    int rc;
    if (config->curve_servers
        && (rc = s_load_dir(self, "--curve-servers", config->curve_servers, true,
                            &self->curve_servers, &skipped, err)) != 0)
        return rc;
    if (!config->curve_secret)
        return 0;
    if ((rc = s_load_secret(self, config->curve_secret, err)) != 0)
        return rc;
    if ((rc = s_load_dir(self, "--curve-allow", config->curve_allow, false,
                         &self->curve_allowed, &skipped, err)) != 0)
        return rc;
    if (!(self->curve_revoked = s_table()))
        return pk_err(err, -ENOMEM, "out of memory");
    pk_node_log(self, PK_LOG_INFO, "CURVE on: %zu keys allowed from %s (%zu files skipped)",
                zhashx_size(self->curve_allowed), config->curve_allow, skipped);
    return 0;
}

//  The ROUTER becomes a CURVE server; a monitor reports the handshakes
//  that failed before ZAP was asked (a client without CURVE).
int
pk_curve_apply(pk_node_t *self, char *err)
{
    if (!self->curve_cert)
        return 0;
    zcert_apply(self->curve_cert, self->router);
    zsock_set_curve_server(self->router, 1);
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://p2pkv-curve-monitor-%p", (void *) self);
    if (zmq_socket_monitor(zsock_resolve(self->router), ep,
                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                           | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0
        || !(self->curve_monitor = zsock_new_pair(ep)))
        return pk_err(err, -ENOMEM, "cannot monitor the peers' socket for CURVE");
    return 0;
}

void
pk_curve_close(pk_node_t *self)
{
    if (self->curve_monitor && self->router) {
        zmq_socket_monitor(zsock_resolve(self->router), NULL, 0);
        zsock_destroy(&self->curve_monitor);
    }
    zsock_destroy(&self->curve_monitor);
    zcert_destroy(&self->curve_cert);
    zhashx_destroy(&self->curve_allowed);
    zhashx_destroy(&self->curve_revoked);
    zhashx_destroy(&self->curve_servers);
}

bool
pk_curve_admits(const pk_node_t *self, const char *key)
{
    return key && zhashx_lookup(self->curve_allowed, key) != NULL;
}

const char *
pk_curve_refusal(const pk_node_t *self, const char *key)
{
    return key && zhashx_lookup(self->curve_revoked, key) ? "revoked" : "unknown_key";
}

const char *
pk_curve_server_key(const pk_node_t *self, const char *endpoint)
{
    return self->curve_servers ? zhashx_lookup(self->curve_servers, endpoint) : NULL;
}

//  --------------------------------------------------------------------------
//  Refusals: counted always, logged rate-limited

static pk_refusal_t *
s_refusal_slot(pk_node_t *self, const char *who, bool *found)
{
    pk_refusal_t *oldest = &self->refusals[0];
    for (size_t i = 0; i < PK_REFUSAL_SLOTS; i++) {
        pk_refusal_t *r = &self->refusals[i];
        if (r->count && strcmp(r->who, who) == 0) {
            *found = true;
            return r;
        }
        if (!r->count || r->since < oldest->since)
            oldest = r;
    }
    *found = false;
    return oldest;
}

void
pk_curve_refused(pk_node_t *self, const char *who, const char *reason)
{
    pk_metrics_add(self->metrics, PK_M_CONNECTIONS_REFUSED, reason, 1);
    double now = zclock_mono() / 1e3;
    if (now - self->refusal_window >= S_INTERVAL) {
        if (self->refusal_unlogged)
            pk_node_log(self, PK_LOG_INFO, "%llu more refusals in the last %.0f s not logged "
                        "(too many keys or addresses)",
                        (unsigned long long) self->refusal_unlogged, S_INTERVAL);
        self->refusal_window = now;
        self->refusal_lines = 0;
        self->refusal_unlogged = 0;
    }
    bool found;
    pk_refusal_t *r = s_refusal_slot(self, who, &found);
    if (found && now - r->since < S_INTERVAL) {
        r->count++;
        return;
    }
    uint64_t before = found ? r->count - 1 : 0;
    snprintf(r->who, sizeof r->who, "%s", who);
    r->since = now;
    r->count = 1;
    if (self->refusal_lines >= S_LINES) {
        self->refusal_unlogged++;
        return;
    }
    self->refusal_lines++;
    if (before)
        pk_node_log(self, PK_LOG_INFO, "connection from %s refused (%s); %llu more since "
                    "its last line", who, reason, (unsigned long long) before);
    else
        pk_node_log(self, PK_LOG_INFO, "connection from %s refused (%s)", who, reason);
}

//  A handshake that failed on the ROUTER before ZAP was asked: a client
//  without CURVE (mechanism mismatch) or a malformed greeting.
void
pk_curve_monitor_read(pk_node_t *self, zmsg_t *msg)
{
    zframe_t *ev = zmsg_first(msg);
    uint16_t event = 0;
    uint32_t value = 0;
    if (ev && zframe_size(ev) >= 6) {
        memcpy(&event, zframe_data(ev), 2);
        memcpy(&value, zframe_data(ev) + 2, 4);
    }
    bool mismatch = event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                    && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH;
    pk_curve_refused(self, mismatch ? "a client without CURVE" : "a client",
                     mismatch ? "mechanism" : "handshake");
    zmsg_destroy(&msg);
}

//  --------------------------------------------------------------------------
//  SIGHUP

//  The keys in old and not in now: revoked (a ZAP request from one is
//  refused as "revoked"; a key allowed again is no longer revoked).
static size_t
s_revoked(pk_node_t *self, zhashx_t *old, size_t *added)
{
    size_t revoked = 0;
    *added = 0;
    for (void *v = zhashx_first(old); v; v = zhashx_next(old)) {
        const char *key = zhashx_cursor(old);
        if (!zhashx_lookup(self->curve_allowed, key)) {
            zhashx_update(self->curve_revoked, key, strdup(v));
            revoked++;
        }
    }
    for (void *v = zhashx_first(self->curve_allowed); v; v = zhashx_next(self->curve_allowed)) {
        const char *key = zhashx_cursor(self->curve_allowed);
        zhashx_delete(self->curve_revoked, key);
        *added += zhashx_lookup(old, key) == NULL;
    }
    return revoked;
}

void
pk_curve_reload(pk_node_t *self)
{
    const pk_server_config_t *config = self->config;
    char err[PK_ERRLEN];
    size_t skipped = 0;
    if (config->curve_servers
        && s_load_dir(self, "--curve-servers", config->curve_servers, true,
                      &self->curve_servers, &skipped, err) != 0)
        pk_node_log(self, PK_LOG_ERROR, "SIGHUP: %s; the servers' keys stay as they were", err);
    if (!self->curve_cert) {
        pk_node_log(self, PK_LOG_INFO, "SIGHUP: no --curve-allow to reload");
        return;
    }
    zhashx_t *old = self->curve_allowed;
    self->curve_allowed = NULL;
    if (s_load_dir(self, "--curve-allow", config->curve_allow, false, &self->curve_allowed,
                   &skipped, err) != 0) {
        //  a directory gone missing is an operator's slip, not a revocation
        self->curve_allowed = old;
        pk_node_log(self, PK_LOG_ERROR, "SIGHUP: %s; the allowed keys stay as they were", err);
        return;
    }
    size_t added, revoked = s_revoked(self, old, &added);
    zhashx_destroy(&old);
    size_t ended = pk_door_revoke(self);
    pk_node_log(self, PK_LOG_INFO, "SIGHUP: %s reloaded: %zu keys allowed (%zu added, %zu "
                "revoked, %zu files skipped); %zu sessions ended", config->curve_allow,
                zhashx_size(self->curve_allowed), added, revoked, skipped, ended);
}
