/*  node.c: the daemon's construction, its poll loop and destruction.

    The node owns the sockets (the ROUTER peers talk to, the local socket
    the engine talks to, the ZAP handler's, the PULL every peer's actor
    says its words to), the poll loop, the store, the fabrics and the
    metrics, and one object of each class of the daemon: admission (who
    may connect), the handshake actor, the door (the peers and their
    actors), the engine API and the puller.  The loop polls the sockets
    and hands each wake to its reader (s_readers), which gives the message
    to the object it is for and carries what one object's answer means for
    another (a peer registered: its held stores; a pull ended: its
    commit; a reload: the door ends the revoked keys' sessions), so no
    object calls another that calls it back.  After each wake the door
    reaps the peers whose actor said GONE, and twice a second held stores
    expire, leases expire and the pool's gauges refresh.  The first
    SIGTERM or SIGINT starts the drain (s_drain_begin, s_stop_step): one
    order of steps under one deadline, --shutdown-timeout.
*/
#include "daemon/node.h"
#include "base/big_cache.h"
#include "base/checksum.h"
#include "base/clock.h"
#include "base/host_id.h"
#include "base/err.h"
#include "base/keymap.h"
#include "base/local_path.h"
#include "base/transport.h"
#include "base/version.h"
#include "daemon/admission.h"
#include "daemon/directory.h"
#include "daemon/door.h"
#include "daemon/engine_api.h"
#include "daemon/handshake.h"
#include "daemon/log.h"
#include "daemon/metric_sources.h"
#include "daemon/metrics.h"
#include "daemon/peer.h"
#include "daemon/poller.h"
#include "daemon/puller.h"
#include "store/store.h"
#include "daemon/tenants.h"
#include "daemon/unsent.h"
#include "tier/disk_tier.h"

#include <czmq.h>
#include <errno.h>
#include <stdatomic.h>
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

/*  How long after a peer was reaped the sweeps go on trimming the heap
    (s_trim_heap says why).  */
#define PK_TRIM_SETTLE 10.0

/*  After the drain's deadline, how long the actors told QUIT have to say
    GONE: one wake each (they cut off what is left at once), so the whole
    stop stays within --shutdown-timeout and a second, as before the
    drain.  */
#define PK_STOP_GRACE 1.0

//  Where the stop is (s_stop_step).
typedef enum {
    PK_SERVING = 0,
    PK_DRAINING,                    //  steps (a)-(c): left, lookups miss, sessions settle
    PK_CLOSING                      //  step (e): peers told shutdown, waiting for GONE
} pk_stop_phase_t;

//  Fabrics at most, one per provider offered (--provider shm,tcp).
#define PK_MAX_FABRICS 8

//  The provider label of connects refused for naming no provider offered.
#define S_UNOFFERED "unoffered"

//  One provider's fabric over the pool (s_open_fabrics opens them, best first).
typedef struct {
    pk_fabric_t *fabric;            //  carries its transport's ops (base/transport.h)
    const char *provider;           //  the fabric's own name ("shm", "tcp;ofi_rxm")
} pk_node_fabric_t;

struct _pk_node_t {
    const pk_server_config_t *config;
    pk_server_identity_t id;
    pk_server_session_config_t session_config;
    pk_store_t *store;
    pk_disk_tier_t *tier;           //  --spill-dir: the disk tier under the pool, or NULL
    pk_bell_t *bell;                //  with the tier: its landings wake parked lookups
    pk_node_fabric_t fabrics[PK_MAX_FABRICS];
    size_t nfabrics;                //  at least one once the node is built
    const char *providers[PK_MAX_FABRICS];  //  their names, for the description
    char host_id[128];              //  this server's same-host identity (base/host_id.h)
    zsock_t *router;                //  the peers' (the door's)
    zsock_t *local;                 //  the engine's (the engine API's)
    //  the --local socket's file as bound (dev 0: none), removed at
    //  destroy only while it is still that file
    dev_t local_dev;
    ino_t local_ino;
    zsock_t *zap;                   //  our ZAP handler (admission's answers)
    zsock_t *actors;                //  PULL: what every peer's actor says (the door's)
    char actors_endpoint[64];
    volatile sig_atomic_t *reload;  //  SIGHUP seen (pk_node_watch_reload)
    pk_poller_t *poller;            //  the loop's wait (poller.h)
    char endpoint[256];
    char ready[2048];
    pk_stop_phase_t phase;
    double stop_deadline;           //  the drain's (monotonic s): --shutdown-timeout
    atomic_bool draining;           //  lookups miss from now (env.draining, peer.c)
    double trim_until;              //  sweeps trim the heap until then (monotonic s):
                                    //  PK_TRIM_SETTLE after the last peer reaped
    pk_metrics_t *metrics;
    pk_unsent_t *unsent;            //  bytes of every session's answers libzmq holds
                                    //  (unsent.h), sessions gone included
    pk_metrics_http_t *http;
    pk_directory_t *directory;      //  --directory: the cluster directory's actor, or NULL
    char *fail_session;             //  test only: $P2PKV_TEST_FAIL_SESSION (peer.c)
    char *hold_session;             //  test only: $P2PKV_TEST_HOLD_SESSION (peer.c)
    int idle_look_ms;               //  test only: $P2PKV_TEST_IDLE_LOOK_MS (peer.c)
    pk_peer_env_t env;              //  what every peer shares (peer.h)
    pk_sched_t *sched;              //  the writes' fair share; NULL: --fair-inflight 0
    pk_admission_t *admission;
    pk_handshake_t *handshake;
    pk_door_t *door;
    pk_engine_api_t *engine;
    pk_puller_t *puller;
};

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
        pk_log(self->config, PK_LOG_WARN, "%s: removed the socket a server that ended without "
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
    bool zap = pk_admission_zap_needed(self->admission);
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
    //  the engine's socket too: whoever reaches it could send a frame of
    //  any size, which libzmq took whole before the API parsed a byte
    zsock_set_maxmsgsize(self->local, (int64_t) config->max_frame);
    if (zap)
        zsock_set_zap_domain(self->router, "p2pkv");
    int rc = pk_admission_apply(self->admission, self->router, err);
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
s_store_log(void *config, const char *line)
{
    pk_log(config, PK_LOG_WARN, "%s", line);
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
    self->store = pk_store_new(config->pool_name, config->pool_blocks, config->block_len,
                               &(pk_store_config_t) {
                                   config->lease_timeout,
                                   pk_tenants_count(config->tenant_map),
                                   config->no_block_checksums },
                               pk_clock_system(), s_store_log, (void *) config, &rc,
                               store_err);
    if (self->store)
        return 0;
    //  no room for the pool: the options that sized it
    if (*store_err && (rc == -ENOSPC || rc == -ENOMEM))
        snprintf(err, PK_ERRLEN, "--pool-blocks %llu x --block-len %llu: %.200s",
                 (unsigned long long) config->pool_blocks,
                 (unsigned long long) config->block_len, store_err);
    else if (*store_err)
        snprintf(err, PK_ERRLEN, "%s", store_err);
    else
        snprintf(err, PK_ERRLEN, "pool %s (%llu x %llu bytes): %s", config->pool_name,
                 (unsigned long long) config->pool_blocks, (unsigned long long) config->block_len,
                 strerror(-rc));
    return rc < 0 ? rc : -EIO;
}

static void
s_tier_log(void *config, const char *line)
{
    pk_log(config, PK_LOG_WARN, "%s", line);
}

//  A batch of promotions ended (the tier's reader thread): its lookups,
//  parked, look again now rather than at their actor's next tick; one
//  ring for the batch (a ring per block was 32 writes of every parked
//  actor's eventfd, 70 us, and woke it before its keys were all up).
static void
s_tier_landed(void *arg, size_t n, const bool *landed, const double *seconds)
{
    pk_node_t *self = arg;
    pk_bell_ring(self->bell);
    for (size_t i = 0; i < n; i++)
        pk_metrics_observe(self->metrics, PK_M_SPILL_READ_SECONDS, NULL, seconds[i]);
}

//  The spill's MAC key (tier/spill_key.h): --spill-key's file or the
//  default one, read or made, and refused inside the spill directory
//  (the secret must not sit beside what it protects).  0, or a negative
//  errno with err naming the option.
static int
s_spill_key(const pk_server_config_t *config, uint8_t *key, char *err)
{
    char path[4096], why[PK_ERRLEN] = "";
    int rc = config->spill_key ? 0 : pk_spill_key_default_path(path, sizeof path);
    if (config->spill_key)
        snprintf(path, sizeof path, "%s", config->spill_key);
    else if (rc)
        return pk_err(err, rc, "--spill-key: no default place for the spill's key (neither "
                      "XDG_STATE_HOME nor HOME is set): give one");
    if ((rc = pk_spill_key_load(path, key, why)) != 0)
        return pk_err(err, rc, "--spill-key %s: %s", path, why);
    char *real_key = realpath(path, NULL), *real_dir = realpath(config->spill_dir, NULL);
    size_t n = real_dir ? strlen(real_dir) : 0;
    bool inside = real_key && real_dir && strncmp(real_key, real_dir, n) == 0
                  && real_key[n] == '/';
    free(real_key);
    free(real_dir);
    if (inside) {
        sodium_memzero(key, PK_SPILL_KEY_LEN);
        return pk_err(err, -EINVAL, "--spill-key %s: inside --spill-dir %s, beside what it "
                      "protects: keep it elsewhere", path, config->spill_dir);
    }
    return 0;
}

//  The disk tier, with --spill-dir: a directory missing, not one, not
//  writable, held by another server or with less free than --spill-size
//  is refused here, naming the option.  Its identity is what a warm
//  restart must match (the peer id, the block length, the fingerprint,
//  the hash seed, the namespaces), not this start's.  0, or a negative
//  errno with err.
static int
s_open_tier(pk_node_t *self, char *err)
{
    const pk_server_config_t *config = self->config;
    if (!config->spill_dir)
        return 0;
    char id[3 * 4096 + 128];        //  three strings of at most 4096 bytes (config)
    int len = snprintf(id, sizeof id, "%s%c%llu%c%s%c%s%c%zu", config->peer_id, 0,
                       (unsigned long long) config->block_len, 0, config->fingerprint, 0,
                       config->hash_seed, 0, pk_store_namespaces(self->store));
    pk_disk_tier_config_t tc = {
        .dir = config->spill_dir, .size = config->spill_size,
        .identity = pk_checksum(id, len > 0 && (size_t) len < sizeof id ? (size_t) len
                                                                        : sizeof id),
        .log = s_tier_log, .log_arg = (void *) config,
        .landed = s_tier_landed, .landed_arg = self };
    int rc = s_spill_key(config, tc.key, err);
    if (rc)
        return rc;
    if (!(self->bell = pk_bell_new())) {
        sodium_memzero(tc.key, sizeof tc.key);
        return pk_err(err, -ENOMEM, "out of memory");
    }
    char tier_err[PK_ERRLEN] = "";
    self->tier = pk_disk_tier_new(&tc, self->store, &rc, tier_err);
    sodium_memzero(tc.key, sizeof tc.key);      //  the tier keeps its copy
    if (self->tier)
        return 0;
    pk_bell_destroy(&self->bell);
    if (rc == -EINVAL)
        return pk_err(err, rc, "--spill-size %llu: %s", (unsigned long long) config->spill_size,
                      tier_err);
    return pk_err(err, rc, "--spill-dir %s: %s", config->spill_dir, tier_err);
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
s_directory_log(void *config, int level, const char *line)
{
    pk_log(config, level, "%s", line);
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
    int n = snprintf(out, cap, "%.*s://%s%s", (int) (wild - endpoint), endpoint, host,
                     strchr(wild + 3, ']') ? strchr(wild + 3, ']') + 1 : strchr(wild + 3, ':'));
    //  a host name too long for the endpoint's room: the bound one, whole,
    //  rather than a cut name nobody resolves
    if (n < 0 || (size_t) n >= cap)
        snprintf(out, cap, "%s", endpoint);
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
                                 .log = s_directory_log, .log_arg = (void *) config };
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
//  one whose actor stands still after its connect_ack until path exists;
//  $P2PKV_TEST_IDLE_LOOK_MS, the ms between an idle actor's looks (so a
//  test can tell what a look does from what an event does).
static int
s_test_hooks(pk_node_t *self, char *err)
{
    const char *fail = getenv("P2PKV_TEST_FAIL_SESSION");
    const char *hold = getenv("P2PKV_TEST_HOLD_SESSION");
    const char *look = getenv("P2PKV_TEST_IDLE_LOOK_MS");
    self->idle_look_ms = look ? atoi(look) : 0;
    if ((fail && *fail && !(self->fail_session = strdup(fail)))
        || (hold && *hold && !(self->hold_session = strdup(hold))))
        return pk_err(err, -ENOMEM, "out of memory");
    return 0;
}

//  One fabric over the pool for provider (NULL: the transport's own
//  order, verbs, efa, tcp), appended to the node's: 0, -EEXIST when a
//  fabric of that provider is open already (two names of one provider,
//  as tcp and tcp;ofi_rxm), or a negative errno with err.
static int
s_open_one_fabric(pk_node_t *self, const char *provider, char *err)
{
    const pk_server_config_t *config = self->config;
    pk_fabric_config_t fc = { provider, config->fabric_addr, config->stall_timeout,
                              config->rail_stall, false };
    int rc;
    pk_fabric_t *fabric = pk_fabric_open(pk_transport_for_node(provider, config->fabric_addr), &fc,
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
    self->fabrics[self->nfabrics] = (pk_node_fabric_t) { fabric, name };
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
//  the first same-host provider that works, mmap before shm, then
//  libfabric's first network provider), the ones that do not open
//  skipped.
static int
s_open_fabrics(pk_node_t *self, char *err)
{
    const pk_server_config_t *config = self->config;
    char bad[PK_ERRLEN];
    //  several rails: every address checked first, so auto never skips a
    //  network provider over a mistyped one
    int rc = pk_transport_check_node(config->fabric_addr, bad);
    if (rc)
        return pk_err(err, rc, "--fabric-addr %s: %s", config->fabric_addr, bad);
    if (!config->provider) {
        char why[PK_ERRLEN] = "no transport offers one";
        const pk_provider_t *p;
        const char *same_host = NULL;
        rc = -ENOENT;
        for (size_t i = 0; (p = pk_transport_auto(i)) != NULL; i++) {
            //  One same-host provider, the best that opens: libfabric's shm
            //  reached 0.11-0.19x of a one-thread memcpy where mmap reaches
            //  0.6x and tcp on loopback more than shm (design.md, "Same-host
            //  copies"), so a consumer mmap refuses does better over tcp.
            //  Named (--provider mmap,shm,tcp), every one is offered.
            if (p->same_host && same_host) {
                pk_log(self->config, PK_LOG_INFO, "--provider auto: %s not offered: %s "
                       "serves this host", p->name, same_host);
                continue;
            }
            if ((rc = s_open_one_fabric(self, p->name, why)) != 0)
                pk_log(self->config, PK_LOG_INFO, "--provider auto: %s skipped: %s",
                       p->name ? p->name : "a network provider", why);
            else if (p->same_host)
                same_host = p->name;
        }
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
            char why[PK_ERRLEN] = "";
            if (self->nfabrics == PK_MAX_FABRICS)
                rc = pk_err(err, -E2BIG, "--provider: at most %d providers", PK_MAX_FABRICS);
            else if ((rc = s_open_one_fabric(self, name, why)) == -EEXIST)
                (void) pk_err(err, rc, "%s", why);
            else if (rc)
                //  the option that named it (and the address it was given)
                (void) pk_err(err, rc, "--provider %s%s%s%s: %s", name,
                              config->fabric_addr ? " (--fabric-addr " : "",
                              config->fabric_addr ? config->fabric_addr : "",
                              config->fabric_addr ? ")" : "", why);
            if (rc) {
                s_close_fabrics(self);
                return rc;
            }
        }
    }
    (void) pk_host_id(self->host_id, sizeof self->host_id);
    //  a consumer of several rails sends them all only where told so
    bool rails = false;
    for (size_t i = 0; i < self->nfabrics; i++)
        rails |= pk_fabric_rails(self->fabrics[i].fabric) > 1;
    self->id = (pk_server_identity_t) { config->peer_id, config->block_len, config->pool_blocks,
                                        config->fingerprint, config->hash_seed,
                                        self->providers[0], self->providers, self->nfabrics,
                                        self->host_id, rails ? PK_CAP_RAILS : NULL };
    self->session_config = pk_server_config_session(config);
    return 0;
}

//  The fabric a connect's blob is for (its provider's): its index, or
//  -EPROTO with reason naming the providers offered.  Any thread.
static int
s_fabric_for(pk_node_t *self, const uint8_t *blob, size_t len, char *reason, size_t cap)
{
    char provider[64] = "", err[PK_ERRLEN] = "";
    int rc = pk_transport_blob_provider(blob, len, provider, sizeof provider, err);
    for (size_t i = 0; rc == 0 && i < self->nfabrics; i++)
        if (strcmp(self->fabrics[i].provider, provider) == 0)
            return (int) i;
    //  no fabric to count it: counted here, once, in the registry (stats
    //  reads it back, s_engine_stats), under a label that says none of
    //  ours (a bounded value, not the provider the consumer named)
    pk_metrics_add(self->metrics, PK_M_BLOBS_REFUSED, S_UNOFFERED, 1);
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

//  --------------------------------------------------------------------------
//  What the classes ask of the node (their callbacks)

//  The handshake actor's: the fabric of a connect's blob, which checks
//  the blob.  On the handshake's thread: the fabrics are read-only once
//  the node is built, and the count is atomic.
static int
s_pick(void *arg, const uint8_t *blob, size_t len, pk_peer_fabric_t *fabric, char *reason,
       size_t cap)
{
    pk_node_t *self = arg;
    int i = s_fabric_for(self, blob, len, reason, cap);
    if (i < 0)
        return i;
    pk_node_fabric_t *nf = &self->fabrics[i];
    if (pk_fabric_check_blob(nf->fabric, blob, len, reason) != 0)
        return -EPROTO;
    *fabric = (pk_peer_fabric_t) { nf->fabric, nf->provider };
    return 0;
}

//  The peers' (on the door's thread): a job ended.
static void
s_job(void *arg, uint64_t job, bool success)
{
    pk_node_t *self = arg;
    pk_engine_api_job(self->engine, job, success);
}

static void
s_engine_send(void *arg, const void *rid, size_t rlen, json_t *answer)
{
    pk_node_t *self = arg;
    char *text = json_dumps(answer, JSON_COMPACT);
    json_decref(answer);
    if (!text)
        return;
    zmsg_t *msg = zmsg_new();
    zmsg_addmem(msg, rid, rlen);
    zmsg_addstr(msg, text);
    zmsg_send(&msg, self->local);
    pk_poller_touch(self->poller, self->local);
    free(text);
}

static int
s_engine_session(void *arg, const char *consumer, unsigned *ns)
{
    pk_node_t *self = arg;
    pk_peer_t *peer = pk_door_peer_by_consumer(self->door, consumer);
    if (!peer || peer->retired)
        return -ENOENT;
    *ns = peer->ns;
    return 0;
}

//  Never waits on the actor: a full pipe fails the store.
static int
s_engine_deliver(void *arg, const char *consumer, pk_held_t *h)
{
    pk_node_t *self = arg;
    pk_peer_t *peer = pk_door_peer_by_consumer(self->door, consumer);
    return peer ? pk_peer_tell(peer, "sp", "STORE", h) : -ENOENT;
}

//  A pull goes with its server's CURVE key (--curve-servers), "" unknown.
static int
s_engine_pull(void *arg, pk_pull_t *p)
{
    pk_node_t *self = arg;
    const char *key = pk_admission_server_key(self->admission, p->server);
    snprintf(p->server_key, sizeof p->server_key, "%s", key ? key : "");
    return pk_puller_send(self->puller, p);
}

//  The node's part of stats: the fabrics' sum and each one under its
//  provider's name, the sessions with their capabilities and their own
//  counts (by metric name: the metrics carry no consumer's id), the
//  metrics.
static void
s_engine_stats(void *arg, json_t *answer)
{
    pk_node_t *self = arg;
    pk_fabric_stats_t f = { 0 };
    json_t *fabrics = json_object();
    for (size_t i = 0; i < self->nfabrics; i++) {
        pk_fabric_stats_t one;
        pk_fabric_stats(self->fabrics[i].fabric, &one);
        f.channels_opened += one.channels_opened;
        f.channels_open += one.channels_open;
        f.blobs_refused += one.blobs_refused;
        json_object_set_new(fabrics, self->fabrics[i].provider,
                            json_pack("{s:I, s:I, s:I}",
                                      "channels_opened", (json_int_t) one.channels_opened,
                                      "channels_open", (json_int_t) one.channels_open,
                                      "blobs_refused", (json_int_t) one.blobs_refused));
    }
    //  and the connects refused for naming no fabric's provider
    f.blobs_refused += pk_metrics_count(self->metrics, PK_M_BLOBS_REFUSED, S_UNOFFERED);
    json_t *peers = json_array();
    json_t *caps = json_object();
    json_t *counts = json_object();
    json_t *rails = json_object();
    size_t at = 0;
    for (pk_peer_t *peer; (peer = pk_door_next(self->door, &at)); ) {
        json_array_append_new(peers, json_string(peer->consumer));
        json_object_set_new(caps, peer->consumer, json_string(pk_peer_caps(peer)));
        json_t *mine = json_object();
        for (int id = 0; id < PK_M_COUNT; id++) {
            pk_metric_source_t source = pk_metric_source_of((pk_metric_id_t) id);
            if (source == PK_SOURCE_SESSION || source == PK_SOURCE_CHANNEL)
                json_object_set_new(mine, pk_metrics_name((pk_metric_id_t) id),
                                    json_integer((json_int_t) atomic_load(&peer->counted[id])));
        }
        //  the scheduler's queueing delay for this session (fair_channel.h)
        json_object_set_new(mine, "write_queue_waits",
                            json_integer((json_int_t) atomic_load(&peer->queue_waits)));
        json_object_set_new(mine, "write_queue_wait_us",
                            json_integer((json_int_t) atomic_load(&peer->queue_wait_us)));
        json_object_set_new(mine, "write_queue_wait_max_us",
                            json_integer((json_int_t) atomic_load(&peer->queue_wait_max_us)));
        json_object_set_new(counts, peer->consumer, mine);
        //  a session of several rails: its pairs and what went over each
        size_t nr = atomic_load_explicit(&peer->nrails, memory_order_acquire);
        if (nr) {
            json_t *list = json_array();
            for (size_t i = 0; i < nr; i++)
                json_array_append_new(list, json_pack(
                    "{s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:b, s:I, s:I}", "local",
                    peer->rails[i].local,
                    "peer", peer->rails[i].peer, "peer_rail", peer->rails[i].peer_rail,
                    "writes", (json_int_t) atomic_load(&peer->rails[i].writes),
                    "bytes", (json_int_t) atomic_load(&peer->rails[i].bytes),
                    "slices", (json_int_t) atomic_load(&peer->rails[i].slices),
                    "failures", (json_int_t) atomic_load(&peer->rails[i].failures),
                    "failed", (int) atomic_load(&peer->rails[i].failed),
                    "rejoins", (json_int_t) atomic_load(&peer->rails[i].rejoins),
                    "rate_bytes_per_second", (json_int_t) atomic_load(&peer->rails[i].rate)));
            json_object_set_new(rails, peer->consumer, list);
        }
    }
    json_object_set_new(answer, "fabric",
                        json_pack("{s:I, s:I, s:I}",
                                  "channels_opened", (json_int_t) f.channels_opened,
                                  "channels_open", (json_int_t) f.channels_open,
                                  "blobs_refused", (json_int_t) f.blobs_refused));
    json_object_set_new(answer, "fabrics", fabrics);
    if (self->sched) {
        //  the writes' fair share (scheduler.h), in blocks
        pk_sched_stats_t st;
        pk_sched_stats(self->sched, &st);
        json_object_set_new(answer, "fair",
                            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}",
                                      "free", (json_int_t) st.free,
                                      "granted", (json_int_t) st.granted,
                                      "inflight", (json_int_t) st.inflight,
                                      "wanted", (json_int_t) st.wanted,
                                      "flows", (json_int_t) st.flows,
                                      "turns", (json_int_t) st.turns));
    }
    if (self->tier) {
        //  the disk tier (disk_tier.h): what it holds, moved, refused
        pk_disk_tier_stats_t t;
        pk_disk_tier_stats(self->tier, &t);
        json_t *spill = json_object();
#define S_TIER_JSON(field, ...) \
        json_object_set_new(spill, #field, json_integer((json_int_t) t.field));
#define S_TIER_JSON_ONLY(field) S_TIER_JSON(field)
        PK_DISK_TIER_COUNTS(S_TIER_JSON, S_TIER_JSON_ONLY)
#undef S_TIER_JSON
#undef S_TIER_JSON_ONLY
        json_object_set_new(spill, "io", json_string(pk_disk_tier_io_kind(self->tier)));
        json_object_set_new(spill, "dir", json_string(self->config->spill_dir));
        json_object_set_new(answer, "spill", spill);
    }
    json_object_set_new(answer, "sessions",
                        json_integer((json_int_t) pk_door_sessions(self->door)));
    json_object_set_new(answer, "peers", peers);
    json_object_set_new(answer, "capabilities", caps);
    json_object_set_new(answer, "session_counts", counts);
    json_object_set_new(answer, "session_rails", rails);
    json_object_set_new(answer, "metrics", pk_metrics_json(self->metrics));
}

static const pk_engine_api_ops_t s_engine_ops = {
    s_engine_send, s_engine_session, s_engine_deliver, s_engine_pull, s_engine_stats
};

//  Turns' worth one session may hold granted and in flight while others
//  want credit (scheduler.h): a consumer that stopped reading beside
//  others holds at most 4 quanta (1 MiB by default) until its stall
//  timeout, not the whole credit.  A session alone takes past it what
//  nobody else wants (the cap is work conserving): held to 1 MiB, one
//  consumer's 64 KiB x 32 rounds went in halves that waited for each
//  other, 10-30% slower than without the scheduler.
#define PK_FAIR_DEPTH 4

//  A --fair-* setting in blocks: what was set, at least one block, so any
//  setting moves; by default (PK_FAIR_AUTO) dflt bytes or least blocks,
//  whichever is more.  The credit: 4 MiB cut a one-block consumer's p99
//  beside 4 greedy ones from 16.6 ms to 3.4 ms over loopback tcp where 16
//  MiB did not, and 2 MiB cost the greedy ones a third (p2pkv-bench fair,
//  design.md); but 4 MiB is 4 blocks of 1 MiB, and 1 MiB x 32 fetches lost
//  a quarter with 4 in flight, so at least 16 blocks.  The quantum: 256 KiB
//  is a quarter of a 1 MiB block, so at least 4 blocks.
static uint64_t
s_fair_blocks(uint64_t set, uint64_t dflt, uint64_t least, uint64_t len)
{
    uint64_t n = (set == PK_FAIR_AUTO ? dflt : set) / len,
             min = set == PK_FAIR_AUTO ? least : 1;
    return n > min ? n : min;
}

//  The objects over the sockets: the handshake actor, the door, the
//  engine API, the puller, and the poller over every socket.  0, or a
//  negative errno with err; the caller destroys what was made.
static int
s_open_classes(pk_node_t *self, char *err)
{
    self->env = (pk_peer_env_t) {
        .config = self->config, .id = &self->id, .session_config = &self->session_config,
        .store = self->store, .metrics = self->metrics, .unsent = self->unsent,
        .router = self->router, .job = s_job, .job_arg = self,
        .fail_session = self->fail_session, .hold_session = self->hold_session,
        .idle_look_ms = self->idle_look_ms, .draining = &self->draining, .bell = self->bell };
    //  The writes' fair share, in blocks (every block is block_len bytes)
    if (self->config->fair_inflight > 0) {
        uint64_t len = self->config->block_len;
        pk_sched_config_t sc = {
            s_fair_blocks(self->config->fair_inflight, UINT64_C(4) << 20, 16, len),
            s_fair_blocks(self->config->fair_quantum, UINT64_C(256) << 10, 4, len),
            PK_FAIR_DEPTH, 0 };
        //  a quantum of the credit for new flows, when it leaves the old
        //  ones at least as much
        sc.reserve = sc.credit >= 2 * sc.quantum ? sc.quantum : 0;
        if (!(self->sched = pk_sched_new(&sc)))
            return pk_err(err, -ENOMEM, "cannot start the writes' scheduler (out of memory)");
        self->env.sched = self->sched;
    }
    self->poller = pk_poller_new();
    self->env.poller = self->poller;
    self->handshake = self->poller ? pk_handshake_new(&self->env, s_pick, self) : NULL;
    self->door = self->handshake ? pk_door_new(&self->env, self->actors, self->actors_endpoint,
                                               self->handshake, self->admission) : NULL;
    self->engine = self->door ? pk_engine_api_new(self->config, self->store, self->endpoint,
                                                  &s_engine_ops, self) : NULL;
    self->puller = self->engine ? pk_puller_new(self->config, self->store, self->metrics,
                                                self->poller,
                                                pk_admission_public_key(self->admission),
                                                pk_admission_secret_key(self->admission))
                                : NULL;
    zsock_t *monitor = pk_admission_monitor(self->admission);
    if (!self->puller || pk_poller_add(self->poller, self->router) != 0
        || pk_poller_add(self->poller, self->local) != 0
        || pk_poller_add(self->poller, pk_handshake_actor(self->handshake)) != 0
        || pk_poller_add(self->poller, self->actors) != 0
        || (self->zap && pk_poller_add(self->poller, self->zap) != 0)
        || (monitor && pk_poller_add(self->poller, monitor) != 0))
        return pk_err(err, -ENOMEM, "cannot start the daemon's actors (out of memory, "
                      "descriptors or threads)");
    return 0;
}

//  In reverse: the door's peers first (their last job results reach the
//  engine API), the handshake's unregistered ones after.
static void
s_close_classes(pk_node_t *self)
{
    pk_door_destroy(&self->door);
    pk_engine_api_destroy(&self->engine);
    pk_handshake_destroy(&self->handshake);
    pk_puller_destroy(&self->puller);
    pk_poller_destroy(&self->poller);
    pk_sched_destroy(&self->sched);     //  every session's flow ended with its actor
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
    if (sodium_init() < 0) {
        snprintf(err, PK_ERRLEN, "libsodium cannot start");
        rc = -EIO;
        goto fail_self;
    }
    if ((rc = s_test_hooks(self, err)) != 0)
        goto fail_self;
    //  every family of metric_families.h (architecture.md, Observability)
    rc = -ENOMEM;
    self->metrics = pk_metrics_new();
    self->unsent = pk_unsent_new(NULL);
    if (!self->metrics || !self->unsent) {
        snprintf(err, PK_ERRLEN, "out of memory");
        goto fail_self;
    }
    //  the keys first: a bad one is refused before a pool exists
    if (!(self->admission = pk_admission_new(config, self->metrics, &rc, err)))
        goto fail_self;
    if ((rc = s_open_store(self, err)) != 0)
        goto fail_self;
    if ((rc = s_open_tier(self, err)) != 0)
        goto fail_store;
    if ((rc = s_open_fabrics(self, err)) != 0)
        goto fail_tier;
    rc = s_open_sockets(self, err);
    if (rc)
        goto fail_sockets;
    if ((rc = s_open_classes(self, err)) != 0)
        goto fail_classes;
    if ((rc = s_open_metrics_http(self, err)) != 0)
        goto fail_classes;
    if ((rc = s_open_directory(self, err)) != 0)
        goto fail_http;
    s_ready_line(self);
    if (rc_p)
        *rc_p = 0;
    return self;

fail_http:
    pk_metrics_http_destroy(&self->http);
fail_classes:
    s_close_classes(self);
fail_sockets:
    pk_admission_destroy(&self->admission);     //  its monitor, before the ROUTER
    zsock_destroy(&self->actors);
    zsock_destroy(&self->local);
    s_unlink_local(self);
    zsock_destroy(&self->router);
    zsock_destroy(&self->zap);
    s_close_fabrics(self);
fail_tier:
    pk_disk_tier_destroy(&self->tier);
    pk_bell_destroy(&self->bell);
fail_store:
    pk_store_destroy(&self->store);
fail_self:
    pk_admission_destroy(&self->admission);
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

//  SIGHUP: the CURVE keys (admission), whose revoked sessions the door
//  ends, then the tenant map; a map that does not load keeps the running
//  one (pk_tenants_reload), said at warn.
static void
s_reload(pk_node_t *self)
{
    const pk_server_config_t *config = self->config;
    pk_admission_reload_t r;
    if (pk_admission_reload(self->admission, &r) == 0 && r.curve) {
        size_t ended = pk_door_revoke(self->door);
        pk_log(config, PK_LOG_INFO, "SIGHUP: %s reloaded: %zu keys allowed (%zu added, %zu "
               "revoked, %zu files skipped); %zu sessions ended", config->curve_allow,
               r.allowed, r.added, r.revoked, r.skipped, ended);
    }
    if (!config->tenants)
        return;
    char err[PK_ERRLEN];
    if (pk_tenants_reload(config->tenant_map, config->tenants, err) != 0)
        pk_log(config, PK_LOG_WARN, "SIGHUP: %s; the tenants in use stay", err);
    else
        pk_log(config, PK_LOG_INFO, "SIGHUP: tenants reloaded from %s (%zu namespaces)",
               config->tenants, pk_tenants_count(config->tenant_map));
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

//  Every count the node holds, published twice a second by the one loop
//  of metric_sources.h: the pool's, each namespace's (labelled by its
//  name: as many samples as --tenants names namespaces), each fabric's
//  (by its provider), the directory's and the node's own.  Each is the
//  only source of its samples, so what is published is the count since
//  start, and nothing published is kept here.
static void
s_publish_metrics(pk_node_t *self)
{
    pk_metrics_t *m = self->metrics;
    uint64_t block_len = self->config->block_len;
    pk_store_stats_t pool;
    pk_store_stats(self->store, &pool);
    pk_metric_sources_publish(m, PK_SOURCE_POOL, NULL, &pool, NULL, block_len);
    for (unsigned ns = 0; ns < pk_store_namespaces(self->store); ns++) {
        pk_store_ns_stats_t st;
        if (pk_store_ns_stats(self->store, ns, &st) == 0)
            pk_metric_sources_publish(m, PK_SOURCE_NAMESPACE,
                                      pk_tenants_name(self->config->tenant_map, ns), &st, NULL,
                                      block_len);
    }
    for (size_t i = 0; i < self->nfabrics; i++) {
        pk_fabric_stats_t f;
        pk_fabric_stats(self->fabrics[i].fabric, &f);
        pk_metric_sources_publish(m, PK_SOURCE_FABRIC, self->fabrics[i].provider, &f, NULL,
                                  block_len);
    }
    if (self->tier) {
        pk_disk_tier_stats_t t;
        pk_disk_tier_stats(self->tier, &t);
        pk_metric_sources_publish(m, PK_SOURCE_TIER, NULL, &t, NULL, block_len);
    }
    if (self->directory) {
        pk_directory_stats_t d;
        pk_directory_stats(self->directory, &d);
        pk_metric_sources_publish(m, PK_SOURCE_DIRECTORY, NULL, &d, NULL, block_len);
    }
    pk_node_counts_t own = {
        .sessions = pk_door_sessions(self->door),
        .unread_bytes = pk_unsent_bytes(self->unsent),
    };
    pk_metric_sources_publish(m, PK_SOURCE_NODE, NULL, &own, NULL, block_len);
}

//  --------------------------------------------------------------------------
//  The loop's readers: each socket's message to the object it is for, and
//  what its answer means for another object.

static void
s_from_router(pk_node_t *self, zmsg_t *msg)
{
    pk_door_from_router(self->door, msg);
}

static void
s_from_local(pk_node_t *self, zmsg_t *msg)
{
    pk_engine_api_request(self->engine, msg);
}

static void
s_from_zap(pk_node_t *self, zmsg_t *msg)
{
    zmsg_t *rep = pk_admission_zap(self->admission, msg);
    zmsg_send(&rep, self->zap);
    pk_poller_touch(self->poller, self->zap);
}

static void
s_from_monitor(pk_node_t *self, zmsg_t *msg)
{
    pk_admission_monitor_read(self->admission, msg);
}

//  A peer registered: the stores held for its consumer go to it.
static void
s_from_handshake(pk_node_t *self, zmsg_t *msg)
{
    pk_peer_t *peer = pk_door_from_handshake(self->door, msg);
    if (peer)
        pk_engine_api_connected(self->engine, peer->consumer, peer->ns);
}

static void
s_from_actors(pk_node_t *self, zmsg_t *msg)
{
    pk_door_from_actors(self->door, msg);
}

//  A pull ended: the engine API commits what landed.
static void
s_from_puller(pk_node_t *self, zmsg_t *msg)
{
    pk_pull_t *p = pk_puller_recv(self->puller, msg);
    if (p)
        pk_engine_api_pulled(self->engine, p);
}

static void *s_router(const pk_node_t *self) { return self->router; }
static void *s_local(const pk_node_t *self) { return self->local; }
static void *s_zap(const pk_node_t *self) { return self->zap; }
static void *s_monitor(const pk_node_t *self) { return pk_admission_monitor(self->admission); }
static void *s_handshake(const pk_node_t *self) { return pk_handshake_actor(self->handshake); }
static void *s_actors(const pk_node_t *self) { return self->actors; }
static void *s_puller(const pk_node_t *self) { return pk_puller_actor(self->puller); }

static const struct {
    void *(*sock)(const pk_node_t *self);           //  NULL while there is none
    void (*fn)(pk_node_t *self, zmsg_t *msg);      //  takes msg
} s_readers[] = {
    { s_router, s_from_router },
    { s_local, s_from_local },
    { s_zap, s_from_zap },
    { s_monitor, s_from_monitor },
    { s_handshake, s_from_handshake },
    { s_actors, s_from_actors },
    { s_puller, s_from_puller },
};

//  One message of the socket the poller handed out, if it holds one
//  (pk_poller_recv: the poller only knows it may).
static void
s_read(pk_node_t *self, void *which)
{
    for (size_t i = 0; i < sizeof s_readers / sizeof s_readers[0]; i++) {
        void *sock = s_readers[i].sock(self);
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
//  The large blocks kept for the next large request (base/big_cache.h, up
//  to 32 MiB) go too: sessions ended, and a later one builds them anew.
static void
s_trim_heap(pk_node_t *self, double now)
{
    if (now <= self->trim_until) {
        pk_big_trim();
        malloc_trim(0);
    }
}

/*  The first SIGTERM or SIGINT: the drain, so that a rolling restart
    loses no fetch (p2pkv-server(8), SIGNALS).  One order under one
    deadline, --shutdown-timeout from now:
      (a) leave the directory: the server's record and its keys' entries
          go, so consumers locating by key go to the other holders at once
          (asked here, done on the directory's thread);
      (b) answer every lookup from now on as a miss (peer.c,
          s_actor_lookup), so nothing more is pinned here, and refuse
          what would add blocks to the pool (the engine API);
      (c) let what consumers asked for already finish and be answered as
          ever: writes in flight, pinned hits not fetched yet, aborts
          (each session says when it owes nothing, pk_door_settled);
      (d) the disk tier's write-out (s_stop_step);
      (e) then every peer told `disconnect shutdown`, and the node
          destroyed: the engine's socket removed, the pool unlinked.
    New connects are refused from (a) on, as they were at shutdown
    (disconnect shutdown).  */
static void
s_drain_begin(pk_node_t *self)
{
    self->phase = PK_DRAINING;
    self->stop_deadline = zclock_mono() / 1e3 + self->config->shutdown_timeout;
    pk_log(self->config, PK_LOG_INFO, "shutting down: draining %zu sessions, at most %g s",
           pk_door_sessions(self->door), self->config->shutdown_timeout);
    if (self->directory)
        pk_directory_leave(self->directory);                        //  (a)
    atomic_store(&self->draining, true);                            //  (b)
    pk_engine_api_drain(self->engine);
    pk_door_drain(self->door, self->stop_deadline);                 //  (c)
}

/*  One wake of the stop: true once the node may be destroyed.  The drain
    ends when every step of it is done or at its deadline; what is left
    then is cut off as at any shutdown: a session retired with writes out
    cancels them at once, and answers nothing a write may still land for
    (protocol.md section 7).  */
static bool
s_stop_step(pk_node_t *self)
{
    double now = zclock_mono() / 1e3;
    if (self->phase == PK_DRAINING) {
        pk_door_drain(self->door, self->stop_deadline);   //  again for pipes that were full
        bool left = !self->directory || pk_directory_left(self->directory);
        if (now < self->stop_deadline && !(left && pk_door_settled(self->door)))
            return false;
        //  (d) the pool's blocks to the disk tier, within the same
        //  deadline, so a restart on the same --spill-dir has them
        if (self->tier) {
            size_t held = pk_disk_tier_flush(self->tier, self->stop_deadline);
            pk_log(self->config, PK_LOG_INFO, "disk tier: holds %zu of the pool's blocks "
                   "at the stop", held);
        }
        self->phase = PK_CLOSING;                                   //  (e)
        pk_log(self->config, PK_LOG_INFO, "%s: %zu sessions told shutdown",
               now < self->stop_deadline ? "drained" : "drain cut off at --shutdown-timeout",
               pk_door_sessions(self->door));
    }
    pk_door_quit(self->door);               //  again for pipes that were full
    return pk_door_sessions(self->door) == 0 || now >= self->stop_deadline + PK_STOP_GRACE;
}

int
pk_node_run(pk_node_t *self, volatile sig_atomic_t *stop)
{
    double next_sweep = 0;
    while (true) {
        if (*stop && self->phase == PK_SERVING)
            s_drain_begin(self);
        if (self->phase != PK_SERVING && s_stop_step(self))
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
        if (pk_door_reap(self->door))
            self->trim_until = zclock_mono() / 1e3 + PK_TRIM_SETTLE;  //  the sweeps trim
        double now = zclock_mono() / 1e3;
        if (now >= next_sweep) {
            pk_engine_api_expire(self->engine);
            pk_store_expire_leases(self->store);
            s_publish_metrics(self);
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
    s_close_classes(self);
    pk_admission_destroy(&self->admission);     //  its monitor, before the ROUTER
    zsock_destroy(&self->actors);
    zsock_destroy(&self->local);
    s_unlink_local(self);
    zsock_destroy(&self->router);
    zsock_destroy(&self->zap);
    pk_metrics_http_destroy(&self->http);
    s_close_fabrics(self);
    //  the tier before the store it lands in, the bell after the tier
    pk_disk_tier_destroy(&self->tier);
    pk_bell_destroy(&self->bell);
    pk_store_destroy(&self->store);
    pk_metrics_destroy(&self->metrics);
    //  a message libzmq still holds keeps the counter until it is freed
    pk_unsent_release(&self->unsent);
    free(self->fail_session);
    free(self->hold_session);
    free(self);
    *self_p = NULL;
}
