/*  node.c: the daemon's construction, its poll loop and destruction.

    The node owns the ROUTER socket peers talk to (the door, door.c), the
    local socket the engine talks to (engine_api.c), the --allow ZAP
    handler (zap.c), the handshake actor (handshake.c), one actor per peer
    (peer.c) and the puller (puller.c).  The loop polls them all and hands
    each wake to its reader (s_readers); after each wake the door reaps the
    peers whose actor said GONE, and twice a second held stores expire,
    leases expire and the pool's gauges refresh.
*/
#include "daemon/door.h"
#include "base/clock.h"
#include "base/host_id.h"
#include "base/err.h"
#include "base/local_path.h"
#include "base/version.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <malloc.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <grp.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void
pk_node_log(const pk_node_t *self, int level, const char *fmt, ...)
{
    if (level > self->config->log_level)
        return;
    static const char *names[] = { "error", "warn", "info", "debug" };
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "p2pkv-server %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

//  --local-group as a gid: a name, or a number.
static int
s_local_gid(const char *group, gid_t *gid_p, char *err)
{
    struct group *g = getgrnam(group);
    char *end;
    unsigned long n = strtoul(group, &end, 10);
    if (g)
        *gid_p = g->gr_gid;
    else if (*group && !*end && n < (gid_t) -1)
        *gid_p = (gid_t) n;
    else
        return pk_err(err, -EINVAL, "--local-group: no group \"%.64s\" on this host", group);
    return 0;
}

//  The engine's socket, private (issue 34, point 6).  A file path is
//  claimed first: nothing there, or a stale socket of this user;
//  another user's file, or a socket a live process serves, is refused
//  with the reason (ZeroMQ would unlink whatever is there, and bind).
//  In the default directory, that directory is made or checked first
//  (local_path.h).  The socket is bound under umask 077 and then given
//  --local-mode (0600 by default) and --local-group, so its mode never
//  follows the operator's umask.  The umask is the process's: for the
//  moment of the bind, the other threads would create files 077 too,
//  which only makes them more private.
static int
s_bind_local(pk_node_t *self, char *err)
{
    const pk_server_config_t *config = self->config;
    const char *file = pk_local_file(config->local);
    int rc;
    gid_t gid = (gid_t) -1;
    if (file && config->local_group && (rc = s_local_gid(config->local_group, &gid, err)))
        return rc;
    char dir[PK_LOCAL_MAX_PATH + 1];
    pk_local_dir(dir, sizeof dir);
    size_t dlen = strlen(dir);
    if (file && strncmp(file, dir, dlen) == 0 && file[dlen] == '/'
        && !strchr(file + dlen + 1, '/') && (rc = pk_local_dir_prepare(dir, gid, err)))
        return rc;
    bool stale = false;
    if (file && (rc = pk_local_claim(file, &stale, err)))
        return rc;
    if (stale)
        pk_node_log(self, PK_LOG_WARN, "%s: removed the socket a server that ended without "
                    "a clean stop left", file);
    mode_t umask_was = umask(077);
    rc = zsock_bind(self->local, "%s", config->local);
    int why = zmq_errno();
    umask(umask_was);
    if (rc < 0) {
        snprintf(err, PK_ERRLEN, "cannot bind %s: %s", config->local, zmq_strerror(why));
        return -EADDRINUSE;
    }
    if (!file)
        return 0;
    struct stat st;
    if (lstat(file, &st) != 0)
        return pk_err(err, -errno, "cannot look at the bound %s: %s", file, strerror(errno));
    self->local_dev = st.st_dev;
    self->local_ino = st.st_ino;
    if ((gid != (gid_t) -1 && chown(file, (uid_t) -1, gid) != 0)
        || chmod(file, (mode_t) config->local_mode) != 0)
        return pk_err(err, -errno, "cannot give %s mode %04o%s: %s", file,
                      (unsigned) config->local_mode, gid != (gid_t) -1 ? " and its group" : "",
                      strerror(errno));
    return 0;
}

//  The socket's file goes with a clean stop (p2pkv-server(8)): ZeroMQ
//  leaves it.  Only the file this node bound: one another server bound
//  since (after a rename, say) stays.
static void
s_unlink_local(pk_node_t *self)
{
    const char *file = pk_local_file(self->config->local);
    struct stat st;
    if (file && self->local_ino && lstat(file, &st) == 0 && st.st_dev == self->local_dev
        && st.st_ino == self->local_ino)
        unlink(file);
    self->local_ino = 0;
}

//  The ZAP handler (with --allow), the peers' ROUTER and the engine's
//  socket, bound: 0, or a negative errno with err; the caller destroys
//  what was made.
static int
s_open_sockets(pk_node_t *self, char *err)
{
    const pk_server_config_t *config = self->config;
    bool zap = config->nallow || self->curve_cert;
    if (zap) {
        //  czmq's zauth matches whole address strings only, so CIDR ranges
        //  need our own handler on libzmq's ZAP endpoint (RFC 27); without
        //  a handler, libzmq would admit every CURVE key.
        self->zap = zsock_new_rep("inproc://zeromq.zap.01");
        if (!self->zap) {
            snprintf(err, PK_ERRLEN, "cannot start the --allow and --curve-allow filter "
                     "(ZAP handler)");
            return -ENOMEM;
        }
    }
    self->router = zsock_new(ZMQ_ROUTER);
    self->local = zsock_new(ZMQ_ROUTER);
    snprintf(self->actors_endpoint, sizeof self->actors_endpoint, "inproc://p2pkv-actors-%p",
             (void *) self);
    self->actors = zsock_new_pull(self->actors_endpoint);     //  binds: starts '@' by default
    if (!self->router || !self->local || !self->actors) {
        snprintf(err, PK_ERRLEN, "cannot create sockets");
        return -ENOMEM;
    }
    zsock_set_router_handover(self->router, 1);
    zsock_set_maxmsgsize(self->router, (int64_t) config->max_frame);
    if (zap)
        zsock_set_zap_domain(self->router, "p2pkv");
    int rc = pk_curve_apply(self, err);
    if (rc)
        return rc;
    if (zsock_bind(self->router, "%s", config->bind) < 0) {
        snprintf(err, PK_ERRLEN, "cannot bind %s: %s", config->bind, zmq_strerror(zmq_errno()));
        return -EADDRINUSE;
    }
    if ((rc = s_bind_local(self, err)) != 0)
        return rc;
    const char *last = zsock_endpoint(self->router);
    snprintf(self->endpoint, sizeof self->endpoint, "%s", last ? last : config->bind);
    return 0;
}

//  The line printed when the node serves: every fabric, best first.
static void
s_ready_line(pk_node_t *self)
{
    const pk_server_config_t *config = self->config;
    char fabrics[1280] = "";
    size_t at = 0;
    for (size_t i = 0; i < self->nfabrics && at < sizeof fabrics; i++) {
        char one[256];
        pk_fabric_describe(self->fabrics[i].fabric, one, sizeof one);
        at += (size_t) snprintf(fabrics + at, sizeof fabrics - at, "%s%s", i ? "; " : "", one);
    }
    snprintf(self->ready, sizeof self->ready,
             "p2pkv-server %s ready: peer %s, peers at %s, engine at %s, pool %s "
             "(%llu blocks of %llu bytes), %s",
             PK_VERSION, config->peer_id, self->endpoint, config->local, config->pool_name,
             (unsigned long long) config->pool_blocks, (unsigned long long) config->block_len,
             fabrics);
}

//  The store's one line: a pool a dead server left, reclaimed.
static void
s_store_log(void *self, const char *line)
{
    pk_node_log(self, PK_LOG_WARN, "%s", line);
}

//  The pool: a pool a killed server left is reclaimed, said at warn; one
//  a live server holds is refused, naming it (issue 10).  0, or a
//  negative errno with err.
static int
s_open_store(pk_node_t *self, char *err)
{
    const pk_server_config_t *config = self->config;
    char store_err[PK_ERRLEN] = "";
    int rc;
    self->store = pk_store_new_logged(config->pool_name, config->pool_blocks, config->block_len,
                                      &(pk_store_config_t) {
                                          config->lease_timeout,
                                          pk_tenants_count(config->tenant_map),
                                          config->no_block_checksums },
                                      pk_clock_system(), s_store_log, self, store_err, &rc);
    if (self->store)
        return 0;
    if (*store_err)
        snprintf(err, PK_ERRLEN, "%s", store_err);
    else
        snprintf(err, PK_ERRLEN, "pool %s (%llu x %llu bytes): %s", config->pool_name,
                 (unsigned long long) config->pool_blocks, (unsigned long long) config->block_len,
                 strerror(-rc));
    return rc < 0 ? rc : -EIO;
}

//  The Prometheus listener, with --metrics-bind.  0, or a negative errno
//  with err.
static int
s_open_metrics_http(pk_node_t *self, char *err)
{
    const char *bind = self->config->metrics_bind;
    if (!bind)
        return 0;
    char merr[256];
    int rc;
    self->http = pk_metrics_http_new(self->metrics, bind, &rc, merr);
    if (self->http)
        return 0;
    snprintf(err, PK_ERRLEN, "--metrics-bind: %.200s", merr);
    return rc < 0 ? rc : -EIO;
}

//  The directory's lines, at the node's log level.
static void
s_directory_log(void *self, int level, const char *line)
{
    pk_node_log(self, level, "%s", line);
}

//  The endpoint consumers are told: what the ROUTER bound, with a
//  wildcard address (tcp://*:PORT binds 0.0.0.0) replaced by the host
//  name, which another host can resolve.
static void
s_advertised(const char *endpoint, char *out, size_t cap)
{
    char host[256] = "";
    const char *wild = strstr(endpoint, "://0.0.0.0:");
    if (!wild)
        wild = strstr(endpoint, "://[::]:");
    if (!wild || gethostname(host, sizeof host - 1) != 0 || !host[0]) {
        snprintf(out, cap, "%s", endpoint);
        return;
    }
    snprintf(out, cap, "%.*s://%s%s", (int) (wild - endpoint), endpoint, host,
             strchr(wild + 3, ']') ? strchr(wild + 3, ']') + 1 : strchr(wild + 3, ':'));
}

//  --directory: the record this server publishes and the actor that
//  keeps it and the pool's keys in Redis.  0, or a negative errno with
//  err (no Redis at start, unless --directory-optional).
static int
s_open_directory(pk_node_t *self, char *err)
{
    const pk_server_config_t *config = self->config;
    if (!config->directory)
        return 0;
    pk_directory_config_t dc = { .url = config->directory,
                                 .optional = config->directory_optional,
                                 .ttl = config->directory_ttl,
                                 .timeout = config->directory_timeout,
                                 .log = s_directory_log, .log_arg = self };
    pk_dir_record_t *r = &dc.record;
    snprintf(r->peer_id, sizeof r->peer_id, "%s", config->peer_id);
    s_advertised(self->endpoint, r->endpoint, sizeof r->endpoint);
    if (gethostname(r->host, sizeof r->host - 1) != 0)
        r->host[0] = '\0';
    r->block_len = config->block_len;
    r->pool_blocks = config->pool_blocks;
    snprintf(r->provider, sizeof r->provider, "%s", self->providers[0]);
    for (size_t i = 0; i < self->nfabrics && i < PK_DIR_MAX_PROVIDERS; i++)
        snprintf(r->providers[r->nproviders++], sizeof r->providers[0], "%s",
                 self->providers[i]);
    snprintf(r->host_id, sizeof r->host_id, "%s", self->host_id);
    snprintf(r->fingerprint, sizeof r->fingerprint, "%s", config->fingerprint);
    int rc;
    self->directory = pk_directory_new(&dc, self->store, &rc, err);
    return self->directory ? 0 : rc;
}

//  Test only (peer.c): $P2PKV_TEST_FAIL_SESSION names a consumer whose
//  session fails to be created; $P2PKV_TEST_HOLD_SESSION, "peer_id:path",
//  one whose actor stands still after its connect_ack until path exists.
static int
s_test_hooks(pk_node_t *self, char *err)
{
    const char *fail = getenv("P2PKV_TEST_FAIL_SESSION");
    const char *hold = getenv("P2PKV_TEST_HOLD_SESSION");
    if ((fail && *fail && !(self->fail_session = strdup(fail)))
        || (hold && *hold && !(self->hold_session = strdup(hold))))
        return pk_err(err, -ENOMEM, "out of memory");
    return 0;
}

//  glibc raises its mmap threshold each time a mapped chunk is freed (up
//  to 32 MiB), so after one large frame or decode, every later allocation
//  of that size comes from the arenas instead, where a few small blocks
//  that stay pin the pages around them: malloc_trim cannot give those
//  back.  Measured (tests/test_hardening.c): 100 connects of one
//  restarting peer, or 246 malformed sessions, left the server at 65 MiB
//  resident from 28 MiB, three arenas of 25 MiB holding 250 KB in use.
//  Setting the threshold keeps it where glibc starts (128 KiB): large
//  blocks stay mappings of their own, returned whole when freed.
static void
s_heap_settings(void)
{
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

//  One fabric over the pool for provider (NULL: the transport's own
//  order, verbs, efa, tcp), appended to the node's: 0, -EEXIST when a
//  fabric of that provider is open already (two names of one provider,
//  as tcp and tcp;ofi_rxm), or a negative errno with err.
static int
s_open_one_fabric(pk_node_t *self, const char *provider, char *err)
{
    const pk_server_config_t *config = self->config;
    pk_fabric_config_t fc = { provider, config->fabric_addr, config->stall_timeout };
    int rc;
    pk_fabric_t *fabric = pk_fabric_open(pk_transport_for(provider), &fc,
                                         pk_store_base(self->store), config->pool_blocks,
                                         config->block_len, &rc, err);
    if (!fabric)
        return rc;
    const char *name = pk_fabric_provider(fabric);
    for (size_t i = 0; i < self->nfabrics; i++)
        if (strcmp(self->fabrics[i].provider, name) == 0) {
            pk_fabric_close(&fabric);
            return pk_err(err, -EEXIST, "--provider: %s twice (as %s)", name,
                          provider ? provider : "auto");
        }
    self->fabrics[self->nfabrics] = (pk_node_fabric_t) { fabric, name, { 0 } };
    self->providers[self->nfabrics++] = name;
    return 0;
}

static void
s_close_fabrics(pk_node_t *self)
{
    while (self->nfabrics)
    {
        pk_node_fabric_t *nf = &self->fabrics[--self->nfabrics];
        pk_fabric_close(&nf->fabric);
    }
}

//  The data plane over the pool: one fabric per provider of --provider,
//  best first, each registering the pool (the registry's default
//  transport); and the identity the handshake announces with them.  A
//  provider named that does not open is a start error naming it; under
//  auto (no list), what the transports rank for it (base/transport.h:
//  mmap and shm where they work, then libfabric's first network
//  provider), the ones that do not open skipped.
static int
s_open_fabrics(pk_node_t *self, char *err)
{
    const pk_server_config_t *config = self->config;
    int rc;
    if (!config->provider) {
        char why[PK_ERRLEN] = "no transport offers one";
        const pk_provider_t *p;
        rc = -ENOENT;
        for (size_t i = 0; (p = pk_transport_auto(i)) != NULL; i++)
            if ((rc = s_open_one_fabric(self, p->name, why)) != 0)
                pk_node_log(self, PK_LOG_INFO, "--provider auto: %s skipped: %s",
                            p->name ? p->name : "a network provider", why);
        if (self->nfabrics == 0)
            return pk_err(err, rc < 0 ? rc : -EIO, "--provider auto: no provider opens: %s",
                          why);
    }
    else {
        for (const char *at = config->provider; *at; at += *at == ',') {
            char name[64];
            size_t len = strcspn(at, ",");
            snprintf(name, sizeof name, "%.*s", (int) len, at);
            at += len;
            if (self->nfabrics == PK_MAX_FABRICS)
                rc = pk_err(err, -E2BIG, "--provider: at most %d providers", PK_MAX_FABRICS);
            else
                rc = s_open_one_fabric(self, name, err);
            if (rc) {
                s_close_fabrics(self);
                return rc;
            }
        }
    }
    (void) pk_host_id(self->host_id, sizeof self->host_id);
    self->id = (pk_server_identity_t) { config->peer_id, config->block_len, config->pool_blocks,
                                        config->fingerprint, config->hash_seed,
                                        self->providers[0], self->providers, self->nfabrics,
                                        self->host_id };
    self->session_config = pk_server_config_session(config);
    return 0;
}

int
pk_node_fabric_for(pk_node_t *self, const uint8_t *blob, size_t len, char *reason, size_t cap)
{
    char provider[64] = "", err[PK_ERRLEN] = "";
    int rc = pk_transport_blob_provider(blob, len, provider, sizeof provider, err);
    for (size_t i = 0; rc == 0 && i < self->nfabrics; i++)
        if (strcmp(self->fabrics[i].provider, provider) == 0)
            return (int) i;
    atomic_fetch_add(&self->blobs_unmatched, 1);
    if (rc) {
        snprintf(reason, cap, "%s", err);
        return rc;
    }
    //  the consumer's provider, and every one this server offers
    size_t at = (size_t) snprintf(reason, cap, "agent_metadata: provider %s, this server "
                                  "offers ", provider);
    for (size_t i = 0; i < self->nfabrics && at < cap; i++)
        at += (size_t) snprintf(reason + at, cap - at, "%s%s", i ? ", " : "",
                                self->fabrics[i].provider);
    return -EPROTO;
}

pk_node_t *
pk_node_new(const pk_server_config_t *config, int *rc_p, char *err)
{
    int rc = -ENOMEM;
    pk_node_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, PK_ERRLEN, "out of memory");
        goto fail;
    }
    self->config = config;
    //  16 random bytes: two starts never share one (the chance is 2^-64
    //  after 2^32 starts), and nothing about the host or the time is told
    if (sodium_init() < 0) {
        snprintf(err, PK_ERRLEN, "libsodium cannot start");
        rc = -EIO;
        goto fail_self;
    }
    uint8_t instance[PK_INSTANCE_BYTES];
    randombytes_buf(instance, sizeof instance);
    sodium_bin2hex(self->instance, sizeof self->instance, instance, sizeof instance);
    s_heap_settings();
    if ((rc = s_test_hooks(self, err)) != 0)
        goto fail_self;
    //  the keys first: a bad one is refused before a pool exists
    if ((rc = pk_curve_open(self, err)) != 0)
        goto fail_self;
    //  every family of metric_families.h (architecture.md, Observability)
    self->metrics = pk_metrics_new();
    self->unsent = pk_unsent_new(NULL);
    if (!self->metrics || !self->unsent) {
        snprintf(err, PK_ERRLEN, "out of memory");
        goto fail_self;
    }
    if ((rc = s_open_store(self, err)) != 0)
        goto fail_self;
    rc = -ENOMEM;
    self->ns_pushed = calloc(pk_store_namespaces(self->store), sizeof *self->ns_pushed);
    if (!self->ns_pushed) {
        snprintf(err, PK_ERRLEN, "out of memory");
        goto fail_store;
    }
    if ((rc = s_open_fabrics(self, err)) != 0)
        goto fail_store;
    rc = s_open_sockets(self, err);
    if (rc)
        goto fail_sockets;
    self->handshake = pk_handshake_new(self);
    self->poller = self->handshake ? pk_poller_new() : NULL;
    if (!self->poller || pk_poller_add(self->poller, self->router) != 0
        || pk_poller_add(self->poller, self->local) != 0
        || pk_poller_add(self->poller, self->handshake) != 0
        || pk_poller_add(self->poller, self->actors) != 0
        || (self->zap && pk_poller_add(self->poller, self->zap) != 0)
        || (self->curve_monitor && pk_poller_add(self->poller, self->curve_monitor) != 0))
        goto fail_sockets;
    if ((rc = s_open_metrics_http(self, err)) != 0)
        goto fail_sockets;
    if ((rc = s_open_directory(self, err)) != 0)
        goto fail_http;
    s_ready_line(self);
    if (rc_p)
        *rc_p = 0;
    return self;

fail_http:
    pk_metrics_http_destroy(&self->http);
fail_sockets:
    pk_poller_destroy(&self->poller);
    pk_handshake_destroy(&self->handshake);
    pk_curve_close(self);
    zsock_destroy(&self->actors);
    zsock_destroy(&self->local);
    s_unlink_local(self);
    zsock_destroy(&self->router);
    zsock_destroy(&self->zap);
    s_close_fabrics(self);
fail_store:
    pk_store_destroy(&self->store);
fail_self:
    free(self->ns_pushed);
    pk_curve_close(self);
    pk_metrics_destroy(&self->metrics);
    pk_unsent_release(&self->unsent);
    free(self->fail_session);
    free(self->hold_session);
    free(self);
fail:
    if (rc_p)
        *rc_p = rc < 0 ? rc : -EIO;
    return NULL;
}

//  SIGHUP: the CURVE keys (curve.c), then the tenant map; a map that does
//  not load keeps the running one (pk_tenants_reload), said at warn.
static void
s_reload(pk_node_t *self)
{
    pk_curve_reload(self);
    if (!self->config->tenants)
        return;
    char err[PK_ERRLEN];
    if (pk_tenants_reload(self->config->tenant_map, self->config->tenants, err) != 0)
        pk_node_log(self, PK_LOG_WARN, "SIGHUP: %s; the tenants in use stay", err);
    else
        pk_node_log(self, PK_LOG_INFO, "SIGHUP: tenants reloaded from %s (%zu namespaces)",
                    self->config->tenants, pk_tenants_count(self->config->tenant_map));
}

void
pk_node_watch_reload(pk_node_t *self, volatile sig_atomic_t *reload)
{
    self->reload = reload;
}

const char *
pk_node_ready_line(const pk_node_t *self)
{
    return self->ready;
}

const char *
pk_node_endpoint(const pk_node_t *self)
{
    return self->endpoint;
}

//  Each namespace's blocks and lookups, labelled by its name: as many
//  samples as --tenants names namespaces (shared alone without it).
static void
s_namespace_metrics(pk_node_t *self)
{
    pk_metrics_t *m = self->metrics;
    size_t ready = 0, pinned = 0;
    for (unsigned ns = 0; ns < pk_store_namespaces(self->store); ns++) {
        pk_store_ns_stats_t st, *last = &self->ns_pushed[ns];
        if (pk_store_stats_ns(self->store, ns, &st) != 0)
            continue;
        const char *name = pk_tenants_name(self->config->tenant_map, ns);
        pk_metrics_set(m, PK_M_NS_READY, name, (double) st.ready);
        pk_metrics_set(m, PK_M_NS_PINNED, name, (double) st.pinned);
        pk_metrics_add(m, PK_M_NS_LOOKUPS, name, st.lookups - last->lookups);
        pk_metrics_add(m, PK_M_NS_HITS, name, st.hits - last->hits);
        pk_metrics_add(m, PK_M_NS_MISSES, name, st.misses - last->misses);
        ready += st.ready;
        pinned += st.pinned;
        *last = st;
    }
    pk_metrics_set(m, PK_M_NS_READY, NULL, (double) ready);
    pk_metrics_set(m, PK_M_NS_PINNED, NULL, (double) pinned);
}

//  The directory actor's counters, pushed as deltas (with --directory).
static void
s_directory_gauges(pk_node_t *self)
{
    if (!self->directory)
        return;
    pk_directory_stats_t d, *was = &self->directory_pushed;
    pk_directory_stats(self->directory, &d);
    pk_metrics_set(self->metrics, PK_M_DIRECTORY_UP, NULL, d.up ? 1 : 0);
    pk_metrics_add(self->metrics, PK_M_DIRECTORY_UPDATES, NULL, d.updates - was->updates);
    pk_metrics_add(self->metrics, PK_M_DIRECTORY_BATCHES, NULL, d.batches - was->batches);
    pk_metrics_add(self->metrics, PK_M_DIRECTORY_DROPPED, NULL, d.dropped - was->dropped);
    pk_metrics_add(self->metrics, PK_M_DIRECTORY_ERRORS, NULL, d.errors - was->errors);
    pk_metrics_add(self->metrics, PK_M_DIRECTORY_JUNK, NULL, d.junk - was->junk);
    pk_metrics_add(self->metrics, PK_M_DIRECTORY_RESYNCS, NULL, d.resyncs - was->resyncs);
    *was = d;
}

//  Each fabric's counts, labelled by its provider; a connect for a
//  provider not offered has no fabric to count it: unlabelled.
static void
s_fabric_gauges(pk_node_t *self)
{
    pk_metrics_t *m = self->metrics;
    double open = 0;
    for (size_t i = 0; i < self->nfabrics; i++) {
        pk_node_fabric_t *nf = &self->fabrics[i];
        pk_fabric_stats_t f;
        pk_fabric_stats(nf->fabric, &f);
        pk_metrics_add(m, PK_M_CHANNELS_OPENED, nf->provider,
                       f.channels_opened - nf->pushed.channels_opened);
        pk_metrics_add(m, PK_M_BLOBS_REFUSED, nf->provider,
                       f.blobs_refused - nf->pushed.blobs_refused);
        pk_metrics_set(m, PK_M_CHANNELS_OPEN, nf->provider, (double) f.channels_open);
        open += (double) f.channels_open;
        nf->pushed = f;
    }
    pk_metrics_set(m, PK_M_CHANNELS_OPEN, NULL, open);
    uint64_t unmatched = atomic_load(&self->blobs_unmatched);
    pk_metrics_add(m, PK_M_BLOBS_REFUSED, NULL, unmatched - self->unmatched_pushed);
    self->unmatched_pushed = unmatched;
}

//  Pool occupancy, refreshed by the main loop twice a second.
static void
s_pool_gauges(pk_node_t *self)
{
    pk_store_stats_t st;
    pk_store_stats(self->store, &st);
    pk_metrics_set(self->metrics, PK_M_POOL_FREE, NULL, (double) st.free);
    pk_metrics_set(self->metrics, PK_M_POOL_WRITING, NULL, (double) st.writing);
    pk_metrics_set(self->metrics, PK_M_POOL_READY, NULL, (double) st.ready);
    pk_metrics_set(self->metrics, PK_M_POOL_PINNED, NULL, (double) st.pinned);
    //  beside the pool: what peers that do not read cost (protocol.md 6)
    pk_metrics_set(self->metrics, PK_M_UNREAD_BYTES, NULL,
                   (double) pk_unsent_bytes(self->unsent));
    //  the store counts evictions since start; the counter takes the news
    if (st.evictions > self->evictions_pushed)
        pk_metrics_add(self->metrics, PK_M_POOL_EVICTIONS, NULL,
                       st.evictions - self->evictions_pushed);
    self->evictions_pushed = st.evictions;
    s_directory_gauges(self);
    s_fabric_gauges(self);
    pk_metrics_set(self->metrics, PK_M_SESSIONS, NULL, (double) self->npeers);
    s_namespace_metrics(self);
}

//  The loop's readers: where each socket's message goes.
static const struct {
    size_t at;                      //  offset of the socket (or actor) in the node
    void (*fn)(pk_node_t *self, zmsg_t *msg);      //  takes msg
} s_readers[] = {
    { offsetof(pk_node_t, router), pk_door_from_router },
    { offsetof(pk_node_t, local), pk_engine_from_local },
    { offsetof(pk_node_t, zap), pk_zap_handle },
    { offsetof(pk_node_t, curve_monitor), pk_curve_monitor_read },
    { offsetof(pk_node_t, handshake), pk_door_from_handshake },
    { offsetof(pk_node_t, actors), pk_door_from_actors },
    { offsetof(pk_node_t, puller), pk_puller_from },
};

//  One message of the socket the poller handed out, if it holds one
//  (pk_poller_recv: the poller only knows it may).
static void
s_read(pk_node_t *self, void *which)
{
    for (size_t i = 0; i < sizeof s_readers / sizeof s_readers[0]; i++) {
        void *sock = *(void **) ((char *) self + s_readers[i].at);
        if (sock && sock == which) {
            zmsg_t *msg = pk_poller_recv(self->poller, sock);
            if (msg)
                s_readers[i].fn(self, msg);
            return;
        }
    }
}

//  Sessions that ended leave their memory in glibc's arena (the daemon
//  has one: p2pkv-server.c says why), where free() keeps it: 256 sessions
//  closed left 42 MB resident.  So sweeps after peers were reaped give the
//  arena's free pages back (malloc_trim: a millisecond or so, twice a
//  second at most), and go on doing so for PK_TRIM_SETTLE seconds after
//  the last reaping, since a session's last bytes may be freed seconds
//  after it on threads that are not ours: 3 s after the last of 1,024
//  actors ended, malloc_info still showed 87 MB in use and 47 of
//  libfabric's channel-sized mappings, freed later without any call of
//  ours (ZeroMQ's I/O thread closing connections, libfabric's own).  One
//  trim at the reaping left 9-17 MB of them resident in about one round
//  in five of p2pkv-bench sessions; trimming on for 10 s, in none of 12.
static void
s_trim_heap(pk_node_t *self, double now)
{
    if (now <= self->trim_until)
        malloc_trim(0);
}

int
pk_node_run(pk_node_t *self, volatile sig_atomic_t *stop)
{
    double next_sweep = 0;
    double quit_deadline = 0;
    while (true) {
        if (*stop && quit_deadline == 0) {
            self->quitting = true;
            quit_deadline = zclock_mono() / 1e3 + self->config->shutdown_timeout + 1;
            pk_node_log(self, PK_LOG_INFO, "shutting down: %zu sessions", self->npeers);
        }
        if (self->quitting)
            pk_door_quit(self);     //  again for pipes that were full
        if (quit_deadline && (self->npeers == 0 || zclock_mono() / 1e3 >= quit_deadline))
            break;
        void *which = pk_poller_wait(self->poller, 100);
        bool reload = self->reload && *self->reload;
        if (reload) {
            //  SIGHUP: it also interrupted the poll, which is no stop
            *self->reload = 0;
            s_reload(self);
        }
        if (which)
            s_read(self, which);
        else if (zsys_interrupted && !*stop && !reload)
            *stop = 1;
        pk_door_reap(self);
        double now = zclock_mono() / 1e3;
        if (now >= next_sweep) {
            pk_engine_expire_held(self);
            pk_store_expire_leases(self->store);
            s_pool_gauges(self);
            s_trim_heap(self, now);
            next_sweep = now + 0.5;
        }
    }
    return 0;
}

void
pk_node_destroy(pk_node_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_node_t *self = *self_p;
    pk_directory_destroy(&self->directory);     //  removes this server from Redis
    pk_door_destroy_all(self);
    pk_engine_destroy(self);
    pk_keymap_fini(&self->by_rid);
    pk_keymap_fini(&self->by_id);
    pk_keymap_fini(&self->by_consumer);
    pk_handshake_destroy(&self->handshake);
    pk_puller_destroy(self);
    for (size_t i = 0; self->pending.slots && i <= self->pending.mask; i++)
        if (self->pending.slots[i].key.bytes)
            free((void *) (uintptr_t) self->pending.slots[i].b);
    pk_keymap_fini(&self->pending);
    pk_poller_destroy(&self->poller);
    pk_curve_close(self);
    zsock_destroy(&self->actors);
    zsock_destroy(&self->local);
    s_unlink_local(self);
    zsock_destroy(&self->router);
    zsock_destroy(&self->zap);
    pk_metrics_http_destroy(&self->http);
    s_close_fabrics(self);
    pk_store_destroy(&self->store);
    pk_metrics_destroy(&self->metrics);
    //  a message libzmq still holds keeps the counter until it is freed
    pk_unsent_release(&self->unsent);
    free(self->ns_pushed);
    free(self->fail_session);
    free(self->hold_session);
    free(self);
    *self_p = NULL;
}
