/*  server_config.c: the settings of p2pkv-server, once they are parsed.

    The defaults (what runs out of the box on one machine with the tcp
    provider), the values derived from them (the pin quota, the --local
    and --pool-name that follow the peer id), the --allow matcher, and the
    two mappings the daemon runs with: pk_server_config_session for each
    peer's session and pk_server_config_client for the puller's client.
    Each mapping is one function, so that a setting cannot be parsed and
    documented and then not arrive (issue 10: --connect-retry never did);
    test_server_config checks both field by field.

    The command line and the config file are server_config_parse.c; the
    rule of each kind of value is server_config_values.c.
*/
#include "daemon/server_config_internal.h"
#include "base/local_path.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const s_log_levels[] = { "error", "warn", "info", "debug" };

//  The peer id where a file name wants it: [A-Za-z0-9._-], else '_'.
static char *
s_sanitised(const char *id)
{
    char *out = strdup(id);
    if (out)
        for (char *c = out; *c; c++)
            if (!pk_config_shm_char_ok(*c))
                *c = '_';
    return out;
}

//  The one rule of the default socket (local_path.h), which the engine
//  library and the p2pkv command follow too.  A path too long for a
//  socket is kept whole, so that s_finish's check names it.
int
pk_server_config_derive_local(pk_server_config_t *self)
{
    char local[4096 + 512];
    int rc = pk_local_default(self->peer_id, local, sizeof local);
    if (rc && rc != -ENAMETOOLONG)
        return rc;
    char *copy = strdup(local);
    if (!copy)
        return -ENOMEM;
    free(self->local);
    self->local = copy;
    return 0;
}

int
pk_server_config_derive_pool_name(pk_server_config_t *self)
{
    char *id = s_sanitised(self->peer_id);
    char *name = NULL;
    if (!id || asprintf(&name, "/p2pkv-%s", id) < 0)
        name = NULL;
    free(id);
    if (!name)
        return -ENOMEM;
    free(self->pool_name);
    self->pool_name = name;
    return 0;
}

int
pk_server_config_defaults(pk_server_config_t *self)
{
    memset(self, 0, sizeof *self);
    char host[256];
    pk_local_host_id(host, sizeof host);       //  the engine library's default too
    self->bind = strdup("tcp://*:5710");
    self->peer_id = strdup(host);
    self->local_mode = 0600;
    self->provider = NULL;      //  auto: what the machine has (mmap or else shm, then a network one)
    self->fingerprint = strdup("");
    self->hash_seed = strdup("0");
    self->pool_blocks = 1024;
    self->block_len = 65536;
    self->log_level = PK_LOG_INFO;
    self->lookup_timeout = 5;
    self->store_timeout = 30;
    self->drain_timeout = 10;
    self->silence_timeout = 10;
    self->lease_timeout = 30;
    self->stall_timeout = 5;
    self->shutdown_timeout = 5;
    self->max_requests = 16384;
    self->max_parked_keys = 65536;
    self->max_rounds = 1024;
    self->pin_quota = 0;
    self->max_queued_frames = 256;
    self->max_queued_bytes = UINT64_C(128) << 20;
    self->max_unread_bytes = UINT64_C(64) << 20;
    self->max_frame = UINT64_C(64) << 20;
    self->max_sessions = 256;
    //  off by default: beside greedy consumers it cost them 31-40% of
    //  their throughput for a small one's p99 2.5-3x lower (design.md,
    //  "Off by default, for what it costs the greedy ones")
    self->fair_inflight = 0;
    self->fair_quantum = PK_FAIR_AUTO;
    for (size_t i = 0; i < PK_NS_MAX; i++)
        self->fair_weight[i] = 1;
    self->load_timeout = 30;
    self->abort_ack_timeout = 10;
    self->connect_retry = 0.5;
    self->keepalive_interval = 2;
    self->directory_ttl = 3;
    self->directory_timeout = 1;
    if (!self->bind || !self->peer_id || !self->fingerprint
        || !self->hash_seed || pk_server_config_derive_local(self) || pk_server_config_derive_pool_name(self)) {
        pk_server_config_fini(self);
        return -ENOMEM;
    }
    return 0;
}

void
pk_server_config_fini(pk_server_config_t *self)
{
    if (!self)
        return;
    free(self->bind);
    free(self->local);
    free(self->local_group);
    free(self->peer_id);
    free(self->pool_name);
    free(self->provider);
    free(self->fabric_addr);
    free(self->fingerprint);
    free(self->hash_seed);
    free(self->metrics_bind);
    free(self->tenants);
    free(self->fair_weights);
    pk_tenants_destroy(&self->tenant_map);
    free(self->curve_secret);
    free(self->curve_allow);
    free(self->curve_servers);
    free(self->spill_dir);
    free(self->spill_key);
    free(self->directory);
    for (size_t i = 0; i < self->nallow; i++)
        free(self->allow[i]);
    free(self->allow);
    memset(self, 0, sizeof *self);
}

uint64_t
pk_server_config_pin_quota(const pk_server_config_t *self)
{
    if (self->pin_quota)
        return self->pin_quota;
    uint64_t quarter = self->pool_blocks / 4;
    return quarter ? quarter : 1;
}

bool
pk_server_config_allows(const pk_server_config_t *self, const char *address)
{
    if (!self->nallow)
        return true;
    uint8_t peer[16], net[16];
    unsigned width, prefix;
    if (!address || pk_config_cidr_parse(address, peer, &width) || width != 128)
        return false;
    for (size_t i = 0; i < self->nallow; i++) {
        if (pk_config_cidr_parse(self->allow[i], net, &prefix))
            continue;
        unsigned whole = prefix / 8, rest = prefix % 8;
        if (memcmp(peer, net, whole) != 0)
            continue;
        uint8_t mask = (uint8_t) (0xff00u >> rest);
        if (rest && ((peer[whole] ^ net[whole]) & mask))
            continue;
        return true;
    }
    return false;
}

p2pkv_config_t
pk_server_config_client(const pk_server_config_t *self, const char *peer_id)
{
    return (p2pkv_config_t) {
        .peer_id = peer_id,
        .fingerprint = self->fingerprint,
        .hash_seed = self->hash_seed,
        //  one provider named: the puller's too; a list or auto: the
        //  client picks the best one each remote server shares with it
        .provider = self->provider && !strchr(self->provider, ',') ? self->provider : NULL,
        .node = self->fabric_addr,
        .load_timeout = self->load_timeout,
        .abort_ack_timeout = self->abort_ack_timeout,
        .keepalive_interval = self->keepalive_interval,
        .silence_timeout = self->silence_timeout,
        .connect_retry = self->connect_retry,
        .stall_timeout = self->stall_timeout,
        .no_reconnect = true,
        .progress_thread = false,
        .directory = self->directory,
    };
}

pk_server_session_config_t
pk_server_config_session(const pk_server_config_t *self)
{
    return (pk_server_session_config_t) {
        .role = { .lookup_timeout = self->lookup_timeout,
                  .store_timeout = self->store_timeout,
                  .drain_timeout = self->drain_timeout,
                  .stream_gets = !self->no_stream_gets },
        .silence_timeout = self->silence_timeout,
        .max_requests = self->max_requests,
        .max_parked_keys = self->max_parked_keys,
        .max_rounds = self->max_rounds,
        .pin_quota = pk_server_config_pin_quota(self),
        .no_get = self->no_gets,
    };
}

const char *
pk_server_config_log_level_name(int level)
{
    if (level < 0 || level > PK_LOG_DEBUG)
        return NULL;
    return s_log_levels[level];
}
