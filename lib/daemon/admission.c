/*  admission.c: --allow, --curve-secret, --curve-allow and --curve-servers:
    the peers' ROUTER as a CURVE server, our own handler on libzmq's ZAP
    endpoint, the keys' reload at SIGHUP, and the rate-limited log of
    refusals (admission.h).

    czmq's zauth matches whole address strings only, so CIDR ranges need
    our own ZAP handler (RFC 27); the CURVE keys are checked there too, so
    that both filters hold and one handler answers: one request per wake
    of the node, a table look-up or two each.  An admitted CURVE client's
    User-Id is its public key in Z85: every frame it sends carries it
    (zframe_meta), and the door ties its session to it.

    The allowed keys are loaded as czmq's zcertstore loads a directory
    (every file that zcert_load reads as a public certificate), but by us:
    zcertstore says nothing of what it skipped and reloads behind our back
    at a lookup, where we want a reload only at SIGHUP, logged with counts.
    Everything here runs on the main thread.
*/
#include "daemon/admission.h"
#include "daemon/log.h"

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

//  Refusals remembered for the rate-limited log.
#define S_REFUSAL_SLOTS 64

typedef struct {
    char who[128];                  //  the key (Z85) or address refused
    double since;                   //  its last line
    uint64_t count;                 //  refusals since (0: a free slot)
} s_refusal_t;

struct _pk_admission_t {
    const pk_server_config_t *config;
    pk_metrics_t *metrics;
    zcert_t *cert;                  //  --curve-secret: the ROUTER is a CURVE server
    zhashx_t *allowed;              //  --curve-allow: Z85 public key -> file name
    zhashx_t *revoked;              //  keys the last SIGHUP removed -> file name
    zhashx_t *servers;              //  --curve-servers: endpoint -> Z85 public key
    zsock_t *router;                //  the node's, watched by monitor (borrowed)
    zsock_t *monitor;               //  PAIR: the ROUTER's failed handshakes
    s_refusal_t refusals[S_REFUSAL_SLOTS];
    double window;                  //  start of the log's current interval
    unsigned lines;                 //  refusal lines in it
    uint64_t unlogged;              //  refusals past the interval's lines
};

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
s_load_secret(pk_admission_t *self, const char *path, char *err)
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
    self->cert = cert;
    return 0;
}

//  One directory of public certificates: into *out, keyed by public key
//  (value: the file's name) or, for --curve-servers, by the certificate's
//  "endpoint" (value: its public key).  What is skipped is logged.
static int
s_load_dir(pk_admission_t *self, const char *opt, const char *dir, bool by_endpoint,
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
            pk_log(self->config, PK_LOG_WARN, "%s: %s skipped: %s", opt, path, why);
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

//  The keys of the configuration: 0, or a negative errno with err.
static int
s_load(pk_admission_t *self, char *err)
{
    const pk_server_config_t *config = self->config;
    size_t skipped = 0;
    int rc;
    if (config->curve_servers
        && (rc = s_load_dir(self, "--curve-servers", config->curve_servers, true,
                            &self->servers, &skipped, err)) != 0)
        return rc;
    if (!config->curve_secret)
        return 0;
    if ((rc = s_load_secret(self, config->curve_secret, err)) != 0)
        return rc;
    if ((rc = s_load_dir(self, "--curve-allow", config->curve_allow, false,
                         &self->allowed, &skipped, err)) != 0)
        return rc;
    if (!(self->revoked = s_table()))
        return pk_err(err, -ENOMEM, "out of memory");
    pk_log(config, PK_LOG_INFO, "CURVE on: %zu keys allowed from %s (%zu files skipped)",
           zhashx_size(self->allowed), config->curve_allow, skipped);
    return 0;
}

pk_admission_t *
pk_admission_new(const pk_server_config_t *config, pk_metrics_t *metrics, int *rc_p, char *err)
{
    pk_admission_t *self = calloc(1, sizeof *self);
    int rc = -ENOMEM;
    if (!self) {
        pk_err(err, rc, "out of memory");
        goto fail;
    }
    self->config = config;
    self->metrics = metrics;
    if ((rc = s_load(self, err)) != 0)
        goto fail_self;
    *rc_p = 0;
    return self;

fail_self:
    pk_admission_destroy(&self);
fail:
    *rc_p = rc;
    return NULL;
}

void
pk_admission_destroy(pk_admission_t **self_p)
{
    pk_admission_t *self = *self_p;
    if (!self)
        return;
    if (self->monitor && self->router)
        zmq_socket_monitor(zsock_resolve(self->router), NULL, 0);
    zsock_destroy(&self->monitor);
    zcert_destroy(&self->cert);
    zhashx_destroy(&self->allowed);
    zhashx_destroy(&self->revoked);
    zhashx_destroy(&self->servers);
    free(self);
    *self_p = NULL;
}

bool
pk_admission_zap_needed(const pk_admission_t *self)
{
    return self->config->nallow || self->cert;
}

int
pk_admission_apply(pk_admission_t *self, zsock_t *router, char *err)
{
    if (!self->cert)
        return 0;
    zcert_apply(self->cert, router);
    zsock_set_curve_server(router, 1);
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://p2pkv-curve-monitor-%p", (void *) self);
    if (zmq_socket_monitor(zsock_resolve(router), ep,
                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                           | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0
        || !(self->monitor = zsock_new_pair(ep)))
        return pk_err(err, -ENOMEM, "cannot monitor the peers' socket for CURVE");
    self->router = router;
    return 0;
}

zsock_t *
pk_admission_monitor(const pk_admission_t *self)
{
    return self->monitor;
}

bool
pk_admission_curve(const pk_admission_t *self)
{
    return self->cert != NULL;
}

const char *
pk_admission_public_key(const pk_admission_t *self)
{
    return self->cert ? zcert_public_txt(self->cert) : NULL;
}

const char *
pk_admission_secret_key(const pk_admission_t *self)
{
    return self->cert ? zcert_secret_txt(self->cert) : NULL;
}

bool
pk_admission_admits(const pk_admission_t *self, const char *key)
{
    return key && self->allowed && zhashx_lookup(self->allowed, key) != NULL;
}

const char *
pk_admission_refusal(const pk_admission_t *self, const char *key)
{
    return key && self->revoked && zhashx_lookup(self->revoked, key) ? "revoked"
                                                                      : "unknown_key";
}

const char *
pk_admission_server_key(const pk_admission_t *self, const char *endpoint)
{
    return self->servers && endpoint ? zhashx_lookup(self->servers, endpoint) : NULL;
}

//  --------------------------------------------------------------------------
//  Refusals: counted always, logged rate-limited

static s_refusal_t *
s_refusal_slot(pk_admission_t *self, const char *who, bool *found)
{
    s_refusal_t *oldest = &self->refusals[0];
    for (size_t i = 0; i < S_REFUSAL_SLOTS; i++) {
        s_refusal_t *r = &self->refusals[i];
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
pk_admission_refused(pk_admission_t *self, const char *who, const char *reason)
{
    pk_metrics_add(self->metrics, PK_M_CONNECTIONS_REFUSED, reason, 1);
    double now = zclock_mono() / 1e3;
    if (now - self->window >= S_INTERVAL) {
        if (self->unlogged)
            pk_log(self->config, PK_LOG_INFO, "%llu more refusals in the last %.0f s not "
                   "logged (too many keys or addresses)",
                   (unsigned long long) self->unlogged, S_INTERVAL);
        self->window = now;
        self->lines = 0;
        self->unlogged = 0;
    }
    bool found;
    s_refusal_t *r = s_refusal_slot(self, who, &found);
    if (found && now - r->since < S_INTERVAL) {
        r->count++;
        return;
    }
    uint64_t before = found ? r->count - 1 : 0;
    snprintf(r->who, sizeof r->who, "%s", who);
    r->since = now;
    r->count = 1;
    if (self->lines >= S_LINES) {
        self->unlogged++;
        return;
    }
    self->lines++;
    if (before)
        pk_log(self->config, PK_LOG_INFO, "connection from %s refused (%s); %llu more since "
               "its last line", who, reason, (unsigned long long) before);
    else
        pk_log(self->config, PK_LOG_INFO, "connection from %s refused (%s)", who, reason);
}

//  A handshake that failed on the ROUTER before ZAP was asked: a client
//  without CURVE (mechanism mismatch) or a malformed greeting.
void
pk_admission_monitor_read(pk_admission_t *self, zmsg_t *msg)
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
    pk_admission_refused(self, mismatch ? "a client without CURVE" : "a client",
                         mismatch ? "mechanism" : "handshake");
    zmsg_destroy(&msg);
}

//  --------------------------------------------------------------------------
//  ZAP

//  Why a request is refused, NULL when admitted; key (41 bytes) gets the
//  client's Z85 public key with CURVE on.
static const char *
s_zap_check(pk_admission_t *self, const char *address, const char *mechanism, zframe_t *cred,
            char *key, char *who, size_t wholen)
{
    snprintf(who, wholen, "%s", address ? address : "?");
    if (!address || !pk_server_config_allows(self->config, address))
        return "address";
    if (!self->cert)
        return NULL;
    if (!mechanism || !streq(mechanism, "CURVE") || !cred || zframe_size(cred) != 32)
        return "mechanism";
    zmq_z85_encode(key, zframe_data(cred), 32);
    snprintf(who, wholen, "CURVE key %s at %s", key, address);
    return pk_admission_admits(self, key) ? NULL : pk_admission_refusal(self, key);
}

//  One ZAP request (RFC 27): version, request id, domain, address,
//  identity, mechanism, credentials.
zmsg_t *
pk_admission_zap(pk_admission_t *self, zmsg_t *req)
{
    char *version = zmsg_popstr(req), *id = zmsg_popstr(req), *domain = zmsg_popstr(req);
    char *address = zmsg_popstr(req), *identity = zmsg_popstr(req);
    char *mechanism = zmsg_popstr(req);
    zframe_t *cred = zmsg_pop(req);
    char key[41] = "", who[160];
    const char *why = s_zap_check(self, address, mechanism, cred, key, who, sizeof who);
    if (why)
        pk_admission_refused(self, who, why);
    zmsg_t *rep = zmsg_new();
    zmsg_addstr(rep, "1.0");
    zmsg_addstr(rep, id ? id : "");
    zmsg_addstr(rep, why ? "400" : "200");
    zmsg_addstr(rep, why ? why : "OK");
    zmsg_addstr(rep, why ? "" : key);
    zmsg_addmem(rep, NULL, 0);
    zframe_destroy(&cred);
    zstr_free(&version);
    zstr_free(&id);
    zstr_free(&domain);
    zstr_free(&address);
    zstr_free(&identity);
    zstr_free(&mechanism);
    zmsg_destroy(&req);
    return rep;
}

//  --------------------------------------------------------------------------
//  SIGHUP

//  The keys in old and not in now: revoked (a ZAP request from one is
//  refused as "revoked"; a key allowed again is no longer revoked).
static size_t
s_revoked(pk_admission_t *self, zhashx_t *old, size_t *added)
{
    size_t revoked = 0;
    *added = 0;
    for (void *v = zhashx_first(old); v; v = zhashx_next(old)) {
        const char *key = zhashx_cursor(old);
        if (!zhashx_lookup(self->allowed, key)) {
            zhashx_update(self->revoked, key, strdup(v));
            revoked++;
        }
    }
    for (void *v = zhashx_first(self->allowed); v; v = zhashx_next(self->allowed)) {
        const char *key = zhashx_cursor(self->allowed);
        zhashx_delete(self->revoked, key);
        *added += zhashx_lookup(old, key) == NULL;
    }
    return revoked;
}

int
pk_admission_reload(pk_admission_t *self, pk_admission_reload_t *what)
{
    const pk_server_config_t *config = self->config;
    char err[PK_ERRLEN];
    *what = (pk_admission_reload_t) { 0 };
    if (config->curve_servers
        && s_load_dir(self, "--curve-servers", config->curve_servers, true,
                      &self->servers, &what->skipped, err) != 0)
        pk_log(config, PK_LOG_ERROR, "SIGHUP: %s; the servers' keys stay as they were", err);
    if (!self->cert) {
        pk_log(config, PK_LOG_INFO, "SIGHUP: no --curve-allow to reload");
        return 0;
    }
    zhashx_t *old = self->allowed;
    self->allowed = NULL;
    if (s_load_dir(self, "--curve-allow", config->curve_allow, false, &self->allowed,
                   &what->skipped, err) != 0) {
        //  a directory gone missing is an operator's slip, not a revocation
        self->allowed = old;
        pk_log(config, PK_LOG_ERROR, "SIGHUP: %s; the allowed keys stay as they were", err);
        return -EIO;
    }
    what->curve = true;
    what->revoked = s_revoked(self, old, &what->added);
    what->allowed = zhashx_size(self->allowed);
    zhashx_destroy(&old);
    return 0;
}
