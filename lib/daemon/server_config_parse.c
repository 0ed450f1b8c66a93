/*  server_config_parse.c: the command line and the config file of
    p2pkv-server.

    One table names every setting, its kind and its field; getopt_long's
    option list and the config file's names both come from it, so a
    setting cannot exist in one place and not the other.  Parsing runs in
    three steps: getopt_long collects the command line (and stops at
    --help, --version or a malformed option) without applying anything,
    then the config file is applied, then the collected options on top of
    it, so the command line wins wherever it stands relative to --config.
    Each value is checked as it is applied (the rules are
    server_config_values.c); what depends on several settings (the pool's
    size, the defaults derived from the peer id) is checked once at the
    end.

    The --help text is a literal rather than generated from the table:
    doc/p2pkv-server.8 repeats it word for word, and the tests check that
    both name every option.
*/
#include "daemon/server_config_internal.h"
#include "base/err.h"
#include "base/version.h"
#include "cluster/dir_entry.h"
#include "tier/disk_tier.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

//  getopt_long values of the table's options start here, above every
//  character a short option could use.
#define S_OPT_BASE 256

typedef enum {
    S_ENDPOINT,
    S_PEER_ID,
    S_UINT,
    S_SECONDS,
    S_POOL_NAME,
    S_PROVIDER,
    S_FABRIC_ADDR,
    S_FINGERPRINT,
    S_HASH_SEED,
    S_METRICS,
    S_ALLOW,
    S_PATH,
    S_LOG_LEVEL,
    S_TENANTS,
    S_DIRECTORY,
    S_LOCAL_MODE,
    S_LOCAL_GROUP,
    S_CHECKSUMS,
    S_FAIR_WEIGHTS
} s_kind_t;

typedef struct {
    const char *name;           //  long option without dashes = config file name
    s_kind_t kind;
    size_t offset;              //  of the field in pk_server_config_t
    uint64_t min, max;          //  S_UINT only
} s_setting_t;

#define S_FIELD(f) offsetof(pk_server_config_t, f)

static const s_setting_t s_settings[] = {
    { "bind",               S_ENDPOINT,    S_FIELD(bind), 0, 0 },
    { "local",              S_ENDPOINT,    S_FIELD(local), 0, 0 },
    { "local-mode",         S_LOCAL_MODE,  S_FIELD(local_mode), 0, 0 },
    { "local-group",        S_LOCAL_GROUP, S_FIELD(local_group), 0, 0 },
    { "peer-id",            S_PEER_ID,     S_FIELD(peer_id), 0, 0 },
    { "pool-blocks",        S_UINT,        S_FIELD(pool_blocks), 1, PK_CONFIG_MAX_POOL_BLOCKS },
    { "block-len",          S_UINT,        S_FIELD(block_len), 1, INT64_MAX },
    { "pool-name",          S_POOL_NAME,   S_FIELD(pool_name), 0, 0 },
    { "provider",           S_PROVIDER,    S_FIELD(provider), 0, 0 },
    { "fabric-addr",        S_FABRIC_ADDR, S_FIELD(fabric_addr), 0, 0 },
    { "fingerprint",        S_FINGERPRINT, S_FIELD(fingerprint), 0, 0 },
    { "hash-seed",          S_HASH_SEED,   S_FIELD(hash_seed), 0, 0 },
    //  the disk tier under the pool (issue 39): both, or neither
    { "spill-dir",          S_PATH,        S_FIELD(spill_dir), 0, 0 },
    { "spill-size",         S_UINT,        S_FIELD(spill_size), 0, INT64_MAX },
    { "spill-key",          S_PATH,        S_FIELD(spill_key), 0, 0 },
    { "metrics-bind",       S_METRICS,     S_FIELD(metrics_bind), 0, 0 },
    { "allow",              S_ALLOW,       S_FIELD(allow), 0, 0 },
    { "curve-secret",       S_PATH,        S_FIELD(curve_secret), 0, 0 },
    { "curve-allow",        S_PATH,        S_FIELD(curve_allow), 0, 0 },
    { "curve-servers",      S_PATH,        S_FIELD(curve_servers), 0, 0 },
    { "log-level",          S_LOG_LEVEL,   S_FIELD(log_level), 0, 0 },
    { "block-checksums",    S_CHECKSUMS,   S_FIELD(no_block_checksums), 0, 0 },
    { "gets",               S_CHECKSUMS,   S_FIELD(no_gets), 0, 0 },
    { "stream-gets",        S_CHECKSUMS,   S_FIELD(no_stream_gets), 0, 0 },
    { "tenants",            S_TENANTS,     S_FIELD(tenants), 0, 0 },
    { "lookup-timeout",     S_SECONDS,     S_FIELD(lookup_timeout), 0, 0 },
    { "store-timeout",      S_SECONDS,     S_FIELD(store_timeout), 0, 0 },
    { "drain-timeout",      S_SECONDS,     S_FIELD(drain_timeout), 0, 0 },
    { "silence-timeout",    S_SECONDS,     S_FIELD(silence_timeout), 0, 0 },
    { "lease-timeout",      S_SECONDS,     S_FIELD(lease_timeout), 0, 0 },
    { "stall-timeout",      S_SECONDS,     S_FIELD(stall_timeout), 0, 0 },
    { "rail-stall",         S_SECONDS,     S_FIELD(rail_stall), 0, 0 },
    { "shutdown-timeout",   S_SECONDS,     S_FIELD(shutdown_timeout), 0, 0 },
    { "max-requests",       S_UINT,        S_FIELD(max_requests), 1, PK_CONFIG_MAX_LIMIT },
    { "max-parked-keys",    S_UINT,        S_FIELD(max_parked_keys), 1, PK_CONFIG_MAX_LIMIT },
    { "max-rounds",         S_UINT,        S_FIELD(max_rounds), 1, PK_CONFIG_MAX_LIMIT },
    { "pin-quota",          S_UINT,        S_FIELD(pin_quota), 0, PK_CONFIG_MAX_POOL_BLOCKS },
    { "max-queued-frames",  S_UINT,        S_FIELD(max_queued_frames), 1, PK_CONFIG_MAX_LIMIT },
    //  bytes: a frame alone always fits (protocol.md section 6), so any
    //  floor works; 4 KiB, as --max-frame's
    { "max-queued-bytes",   S_UINT,        S_FIELD(max_queued_bytes), 4096, INT64_MAX },
    { "max-unread-bytes",   S_UINT,        S_FIELD(max_unread_bytes), 4096, INT64_MAX },
    //  ZMQ_MAXMSGSIZE is an int64; below 4 KiB not even a describe fits.
    { "max-frame",          S_UINT,        S_FIELD(max_frame), 4096, INT64_MAX },
    { "max-sessions",       S_UINT,        S_FIELD(max_sessions), 1, PK_CONFIG_MAX_LIMIT },
    //  the writes' fair share (scheduler.h): 0 turns the scheduler off
    { "fair-inflight",      S_UINT,        S_FIELD(fair_inflight), 0, INT64_MAX },
    { "fair-quantum",       S_UINT,        S_FIELD(fair_quantum), 1, INT64_MAX },
    { "fair-weights",       S_FAIR_WEIGHTS, S_FIELD(fair_weights), 0, 0 },
    { "load-timeout",       S_SECONDS,     S_FIELD(load_timeout), 0, 0 },
    { "abort-ack-timeout",  S_SECONDS,     S_FIELD(abort_ack_timeout), 0, 0 },
    { "connect-retry",      S_SECONDS,     S_FIELD(connect_retry), 0, 0 },
    { "keepalive-interval", S_SECONDS,     S_FIELD(keepalive_interval), 0, 0 },
    //  the cluster directory (issue 14): both set the URL; the second also
    //  makes a Redis absent at start a warning
    { "directory",          S_DIRECTORY,   S_FIELD(directory), 0, 0 },
    { "directory-optional", S_DIRECTORY,   S_FIELD(directory), 0, 0 },
    { "directory-ttl",      S_SECONDS,     S_FIELD(directory_ttl), 0, 0 },
    { "directory-timeout",  S_SECONDS,     S_FIELD(directory_timeout), 0, 0 },
};

#define S_NSETTINGS (sizeof s_settings / sizeof s_settings[0])


static const char s_usage[] =
    "usage: p2pkv-server [OPTION...]\n"
    "\n"
    "Shares this machine's KV-cache blocks with its peers: a ZeroMQ control\n"
    "plane, libfabric RMA for the bytes, and a block pool in shared memory that\n"
    "the local engine maps.  Settings come from the defaults, then the --config\n"
    "file, then the command line, which wins wherever it stands.\n"
    "\n"
    "  -c, --config FILE            read settings from FILE: name = value lines\n"
    "                               with the long options' names, # comments\n"
    "  -h, --help                   print this help and exit\n"
    "  -V, --version                print the version and exit\n"
    "\n"
    "Endpoints and identity:\n"
    "      --bind ENDPOINT          where peers connect; default tcp://*:5710\n"
    "      --local ENDPOINT         where the local engine connects; default\n"
    "                               ipc://DIR/p2pkv-ID.sock, DIR being\n"
    "                               $XDG_RUNTIME_DIR/p2pkv, /run/p2pkv for root,\n"
    "                               else /tmp/p2pkv-UID (made 0700, checked)\n"
    "      --local-mode MODE        the socket's mode, octal; default 600\n"
    "                               (660 with --local-group), whatever the umask\n"
    "      --local-group GROUP      the socket's group (and DIR's, 0710), for an\n"
    "                               engine of another user in GROUP\n"
    "      --peer-id ID             this node's name on the wire (1..4096 bytes);\n"
    "                               default the host name\n"
    "      --allow ADDR[/PREFIX]    accept peers only from this IPv4 or IPv6\n"
    "                               address or CIDR range; repeatable, or a\n"
    "                               comma-separated list; default everyone\n"
    "      --curve-secret FILE      be a CURVE server with the czmq certificate\n"
    "                               FILE (NAME_secret, as p2pkv keygen writes);\n"
    "                               needs --curve-allow; default off\n"
    "      --curve-allow DIR        admit only consumers whose public certificate\n"
    "                               is a file in DIR (reloaded at SIGHUP: revoked\n"
    "                               keys' sessions end); with --allow, both hold\n"
    "      --curve-servers DIR      public certificates of the servers pull\n"
    "                               reaches, each with its endpoint in its\n"
    "                               metadata; default none\n"
    "      --metrics-bind ADDR:PORT serve Prometheus metrics over HTTP there (ADDR\n"
    "                               an IPv4 address, [IPv6], a host name or *);\n"
    "                               default off\n"
    "      --log-level LEVEL        error, warn, info or debug; default info\n"
    "      --block-checksums on|off take each block's checksum at commit, which\n"
    "                               lookup answers carry so that consumers check\n"
    "                               what lands; default on (off: for measuring it)\n"
    "      --gets on|off            offer consumers the capability get: a fetch of\n"
    "                               known keys in one round trip; default on (off:\n"
    "                               they look up, then fetch, as an older server)\n"
    "      --stream-gets on|off     write a get's hits that a lower tier (the disk)\n"
    "                               brings up as each lands, not after its last\n"
    "                               key; its answer is the same; default on (off:\n"
    "                               the seed's order)\n"
    "      --tenants FILE           consumers' namespaces: KEY NAMESPACE lines (KEY\n"
    "                               a CURVE public key in Z85, or * for every\n"
    "                               consumer not listed, keyless ones included);\n"
    "                               each sees its namespace and the shared one;\n"
    "                               default none: one shared namespace\n"
    "      --directory URL          publish this server and the keys it holds in\n"
    "                               the cluster directory, a Redis at\n"
    "                               redis://HOST:PORT[/DB], or a Redis Cluster's\n"
    "                               nodes, redis://HOST:PORT,HOST:PORT...; no\n"
    "                               Redis there at start is an error; default none\n"
    "      --directory-optional URL the same, but no Redis at start is a warning\n"
    "                               and it is retried in the background\n"
    "      --directory-ttl S        our record's time to live in the directory: a\n"
    "                               server killed is no holder after it; a\n"
    "                               heartbeat renews it at a third; default 3\n"
    "      --directory-timeout S    bound on the directory's connect and each read\n"
    "                               or write; then it is down; default 1\n"
    "\n"
    "Pool and data plane:\n"
    "      --pool-blocks N          blocks in the pool (1..2147483648); default 1024\n"
    "      --block-len BYTES        bytes per block, the same on every peer;\n"
    "                               default 65536\n"
    "      --pool-name /NAME        shared-memory object holding the pool; default\n"
    "                               /p2pkv-ID (characters other than A-Z a-z 0-9\n"
    "                               . _ - become _)\n"
    "      --provider LIST          data-plane providers offered, best first, one\n"
    "                               fabric each: mmap (same-host consumers copy\n"
    "                               from the pool), or libfabric's (shm; tcp;\n"
    "                               verbs; ...), as mmap,shm,tcp; or auto: mmap\n"
    "                               where it works, else shm, then the first of\n"
    "                               verbs, efa, tcp; default auto\n"
    "      --fabric-addr ADDR[,ADDR...]\n"
    "                               local address (IPv4, IPv6 or host name) of the\n"
    "                               data plane; default: the provider's choice;\n"
    "                               several: one rail each (numeric, one per\n"
    "                               interface; loopback may carry several); a\n"
    "                               block of 2 MiB or more is sliced over them\n"
    "      --fingerprint STRING     model and cache layout; peers must match it\n"
    "                               exactly; default empty\n"
    "      --hash-seed STRING       seed of the block hashes; peers must match it;\n"
    "                               default 0\n"
    "      --spill-dir DIR          keep the blocks the pool evicts on disk, in\n"
    "                               DIR/p2pkv-spill.data (needs --spill-size); a\n"
    "                               lookup of one answers hit_pending while it is\n"
    "                               read back; default none: evicted is gone\n"
    "      --spill-size BYTES       the data file's size: that many bytes over\n"
    "                               slots of a 4 KiB header and the block; the\n"
    "                               file system must have them free at start\n"
    "      --spill-key FILE         the 32-byte key of the slots' MAC, outside\n"
    "                               DIR, made (0600) at first start; default\n"
    "                               $XDG_STATE_HOME/p2pkv/spill.key, else\n"
    "                               ~/.local/state/p2pkv/spill.key\n"
    "\n"
    "Timeouts, in seconds (0.001..1000000):\n"
    "      --lookup-timeout S       parked lookup keys answer as misses; default 5\n"
    "      --store-timeout S        a store job fails its round; default 30\n"
    "      --drain-timeout S        an aborted round's writes are then cancelled\n"
    "                               at once and the session retired; default 10\n"
    "      --silence-timeout S      retire a session silent that long, give up on\n"
    "                               a server silent that long; default 10\n"
    "      --lease-timeout S        free an engine's reservation not committed\n"
    "                               (p2pkv_engine_write refuses its block from\n"
    "                               90% of it on); default 30\n"
    "      --stall-timeout S        close a peer's data channel whose writes\n"
    "                               stopped completing; fail a pull whose blocks\n"
    "                               stopped landing; default 5\n"
    "      --rail-stall S           several rails: take out a rail whose writes\n"
    "                               stopped completing for S while another's\n"
    "                               complete, and send them again over the\n"
    "                               others; it rejoins after 2 S (doubling\n"
    "                               per failure, at most 64 S) where the consumer\n"
    "                               offers it again; below --stall-timeout;\n"
    "                               default a quarter of it\n"
    "      --shutdown-timeout S     bound on the whole drain at SIGINT or SIGTERM\n"
    "                               (leave the directory, misses, fetches asked\n"
    "                               for finish, then shutdown); default 5\n"
    "      --load-timeout S         a pull without transfer_done is aborted;\n"
    "                               default 30\n"
    "      --abort-ack-timeout S    then the server's endpoint is closed and the\n"
    "                               pull fails; default 10\n"
    "      --connect-retry S        resend connect to a server; default 0.5\n"
    "      --keepalive-interval S   ping a server sent nothing for; default 2\n"
    "\n"
    "Limits (per session unless said otherwise; 1..2147483648):\n"
    "      --max-requests N         live requests; default 16384\n"
    "      --max-parked-keys N      keys held in parked lookups; default 65536\n"
    "      --max-rounds N           rounds per request; default 1024\n"
    "      --pin-quota N            blocks pinned at once, at most --pool-blocks;\n"
    "                               0 = a quarter of the pool; default 0\n"
    "      --max-queued-frames N    frames queued for the session's actor;\n"
    "                               default 256\n"
    "      --max-queued-bytes BYTES bytes of frames queued for the session's\n"
    "                               actor (one frame always fits); at least\n"
    "                               4096; default 134217728\n"
    "      --max-unread-bytes BYTES bytes of answers the consumer has not read\n"
    "                               (one answer always fits; the server holds\n"
    "                               at most --max-sessions times it); at least\n"
    "                               4096; default 67108864\n"
    "      --max-frame BYTES        larger frames are refused (whole server, the\n"
    "                               local socket too; at least 4096); default\n"
    "                               67108864\n"
    "      --max-sessions N         sessions at once (whole server; file and socket\n"
    "                               limits are raised to fit, or the start is\n"
    "                               refused); default 256\n"
    "\n"
    "Fair share of the data plane (whole server):\n"
    "      --fair-inflight BYTES    bytes of writes in flight for every session\n"
    "                               together, granted in turns; 0 = off (each\n"
    "                               session writes in arrival order, the\n"
    "                               default); 4194304 is the measured choice\n"
    "      --fair-quantum BYTES     bytes a session of weight 1 is granted per\n"
    "                               turn; default 262144 or 4 blocks, whichever\n"
    "                               is more\n"
    "      --fair-weights NS=W,...  the weight of a tenant namespace's sessions,\n"
    "                               1..1000 (NS of --tenants, or shared);\n"
    "                               default 1 each\n"
    "\n"
    "Exit status: 0 clean shutdown, 1 runtime error, 2 usage or configuration\n"
    "error.  See p2pkv-server(8).\n";

typedef struct {
    pk_server_config_t *config;
    char *err;                  //  PK_ERRLEN bytes, or NULL
    bool local_set;             //  else it follows the final peer id
    bool pool_name_set;
    bool local_mode_set;        //  else 0600, or 0660 with --local-group
    bool allow_from_argv;       //  the first --allow replaces the file's list
} s_parser_t;

typedef struct {
    const s_setting_t *setting;
    const char *value;
} s_pending_t;

//  --------------------------------------------------------------------------
//  Errors

static int
s_fail(s_parser_t *p, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int
s_fail(s_parser_t *p, int rc, const char *fmt, ...)
{
    if (p->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err, PK_ERRLEN, fmt, ap);
        va_end(ap);
        //  A value can carry a newline (from argv); the promise is one line.
        for (char *c = p->err; *c; c++)
            if ((unsigned char) *c < 0x20 || *c == 0x7f)
                *c = '?';
    }
    return rc;
}

//  "WHERE: expected WHAT, got "VALUE"", the shape of every value error.
static int
s_bad(s_parser_t *p, const char *where, const char *what, const char *value)
{
    return s_fail(p, -EINVAL, "%s: expected %s, got \"%s\"", where, what, value);
}

//  --------------------------------------------------------------------------
//  Applying one value

static int
s_set_string(s_parser_t *p, char **field, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return s_fail(p, -ENOMEM, "out of memory");
    free(*field);
    *field = copy;
    return 0;
}

//  Appends every item of a comma- or blank-separated list; the list is
//  only changed if every item is valid.
static int
s_add_allow(s_parser_t *p, const char *where, const char *value)
{
    pk_server_config_t *c = p->config;
    char *copy = strdup(value);
    if (!copy)
        return s_fail(p, -ENOMEM, "out of memory");
    size_t items = 0;
    for (const char *s = value; *s; s++)
        items += (*s != ',' && *s != ' ' && *s != '\t')
                 && (s == value || s[-1] == ',' || s[-1] == ' ' || s[-1] == '\t');
    int rc = 0;
    if (items == 0) {
        rc = s_bad(p, where, "an IPv4 or IPv6 address or CIDR range", value);
        goto done;
    }
    char **grown = realloc(c->allow, (c->nallow + items) * sizeof *grown);
    if (!grown) {
        rc = s_fail(p, -ENOMEM, "out of memory");
        goto done;
    }
    c->allow = grown;
    char *save = NULL;
    size_t added = 0;
    for (char *item = strtok_r(copy, ", \t", &save); item; item = strtok_r(NULL, ", \t", &save)) {
        uint8_t addr[16];
        unsigned prefix;
        int check = pk_config_cidr_parse(item, addr, &prefix);
        if (check == -ERANGE) {
            rc = s_fail(p, -EINVAL, "%s: prefix length out of range (0..%d), got \"%s\"", where,
                        strchr(item, ':') ? 128 : 32, item);
            break;
        }
        if (check) {
            rc = s_bad(p, where, "an IPv4 or IPv6 address or CIDR range", item);
            break;
        }
        if (!(c->allow[c->nallow + added] = strdup(item))) {
            rc = s_fail(p, -ENOMEM, "out of memory");
            break;
        }
        added++;
    }
    if (rc)
        while (added)
            free(c->allow[c->nallow + --added]);
    c->nallow += added;
done:
    free(copy);
    return rc;
}

//  Sets a string field, or clears it (NULL) when clear: the choice goes
//  back to the provider, or the listener is off.
static int
s_set_or_clear(s_parser_t *p, char **field, const char *value, bool clear)
{
    if (!clear)
        return s_set_string(p, field, value);
    free(*field);
    *field = NULL;
    return 0;
}

//  The settings whose value is a string: endpoints, names and the
//  handshake's texts.
static int
s_apply_text(s_parser_t *p, const s_setting_t *s, const char *value, const char *where)
{
    pk_server_config_t *c = p->config;
    char **field = (char **) (void *) ((char *) c + s->offset);
    size_t len = strlen(value);
    switch (s->kind) {
    case S_ENDPOINT:
        if (!pk_config_endpoint_ok(value))
            return s_bad(p, where,
                         "tcp://HOST:PORT, ipc://PATH (at most 107 bytes) or inproc://NAME",
                         value);
        if (field == &c->local)
            p->local_set = true;
        break;
    case S_PEER_ID:
    case S_HASH_SEED:
        if (!len || len > PK_CONFIG_MAX_STRING || !pk_config_text_ok(value))
            return s_bad(p, where, "1..4096 bytes of UTF-8 text", value);
        break;
    case S_FINGERPRINT:
        if (len > PK_CONFIG_MAX_STRING || !pk_config_text_ok(value))
            return s_bad(p, where, "0..4096 bytes of UTF-8 text", value);
        break;
    case S_POOL_NAME:
        if (!pk_config_pool_name_ok(value))
            return s_bad(p, where, "/NAME, NAME being 1..255 of A-Z a-z 0-9 . _ -", value);
        p->pool_name_set = true;
        break;
    case S_PROVIDER:
        if (!pk_config_provider_ok(value))
            return s_bad(p, where, "a libfabric provider name (tcp, verbs, efa, ...), a list "
                         "of them (shm,tcp), or auto", value);
        return s_set_or_clear(p, field, value, strcmp(value, "auto") == 0);
    case S_FABRIC_ADDR:
        //  Empty gives the choice back to the provider; a comma list is
        //  one rail per address (checked against the host at start)
        for (const char *at = value; len; at++) {
            size_t piece = strcspn(at, ",");
            char one[256];
            if (piece == 0 || piece >= sizeof one)
                return s_bad(p, where, "addresses separated by single commas", value);
            memcpy(one, at, piece);
            one[piece] = '\0';
            if (!pk_config_host_ok(one, false, false))
                return s_bad(p, where, "IPv4 or IPv6 addresses or host names, comma-separated",
                             value);
            at += piece;
            if (!*at)
                break;
        }
        return s_set_or_clear(p, field, value, !len);
    case S_LOCAL_GROUP:
        //  Empty: the server's own group.  Resolved when the socket is
        //  bound (node.c), where a group this host lacks is refused.
        if (len && (len > 64 || !pk_config_text_ok(value)))
            return s_bad(p, where, "a group name or number", value);
        return s_set_or_clear(p, field, value, !len);
    case S_TENANTS:
    case S_FAIR_WEIGHTS:
        //  Read (and checked line by line, or name by name against the
        //  tenants' namespaces) once every setting is in: s_finish.
        return s_set_or_clear(p, field, value, !len);
    case S_PATH:
        //  Empty turns it off, so a command line can undo a file; what
        //  the file holds is checked when the node starts (curve.c).
        if (len && !pk_config_text_ok(value))
            return s_bad(p, where, "a path", value);
        return s_set_or_clear(p, field, value, !len);
    case S_DIRECTORY:
        //  Empty turns it off, so a command line can undo a file.
        if (len && pk_dir_url_parse(value, NULL, NULL) != 0)
            return s_bad(p, where, PK_DIR_URL_FORM, value);
        c->directory_optional = len && strcmp(s->name, "directory-optional") == 0;
        return s_set_or_clear(p, field, value, !len);
    case S_METRICS:
        //  Empty turns the listener off, so a command line can undo a file.
        if (len && !pk_config_metrics_ok(value))
            return s_bad(p, where, "ADDR:PORT with PORT 0..65535", value);
        return s_set_or_clear(p, field, value, !len);
    default:
        return s_fail(p, -EINVAL, "%s: internal error", where);
    }
    return s_set_string(p, field, value);
}

static int
s_apply(s_parser_t *p, const s_setting_t *s, const char *value, const char *where)
{
    void *field = (char *) p->config + s->offset;
    char what[96];
    uint64_t v;
    switch (s->kind) {
    case S_ALLOW:
        return s_add_allow(p, where, value);
    case S_LOCAL_MODE: {
        //  octal; the owner must keep read and write (the server's own
        //  socket), and no one gets execute or the special bits
        char *end;
        unsigned long m = strtoul(value, &end, 8);
        if (!*value || *end || m > 0666 || (m & 0600) != 0600 || (m & 0111))
            return s_bad(p, where, "an octal mode 600..666 without execute bits (600, 660, "
                         "666)", value);
        p->config->local_mode = (unsigned) m;
        p->local_mode_set = true;
        return 0;
    }
    case S_CHECKSUMS:
        if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0)
            return s_bad(p, where, "on or off", value);
        //  on|off, stored as its "no_" bool
        *(bool *) ((char *) p->config + s->offset) = strcmp(value, "off") == 0;
        return 0;
    case S_LOG_LEVEL:
        for (int i = 0; i <= PK_LOG_DEBUG; i++)
            if (strcmp(value, pk_server_config_log_level_name(i)) == 0) {
                p->config->log_level = i;
                return 0;
            }
        return s_bad(p, where, "error, warn, info or debug", value);
    case S_SECONDS:
        if (pk_config_parse_seconds(value, field))
            return s_bad(p, where, "seconds 0.001..1000000", value);
        return 0;
    case S_UINT:
        if (pk_config_parse_u64(value, &v) || v < s->min || v > s->max) {
            snprintf(what, sizeof what, "an integer %" PRIu64 "..%" PRIu64, s->min, s->max);
            return s_bad(p, where, what, value);
        }
        *(uint64_t *) field = v;
        return 0;
    default:
        return s_apply_text(p, s, value, where);
    }
}

static const s_setting_t *
s_find(const char *name)
{
    for (size_t i = 0; i < S_NSETTINGS; i++)
        if (strcmp(s_settings[i].name, name) == 0)
            return &s_settings[i];
    return NULL;
}

//  --------------------------------------------------------------------------
//  The config file

static char *
s_trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t len = strlen(s);
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\r'
                   || s[len - 1] == '\n'))
        s[--len] = 0;
    return s;
}

static int
s_read_file(s_parser_t *p, const char *path)
{
    FILE *file = fopen(path, "r");
    if (!file) {
        int rc = -errno;
        return s_fail(p, rc, "--config: cannot open \"%s\": %s", path, strerror(-rc));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    unsigned lineno = 0;
    int rc = 0;
    while (rc == 0 && (errno = 0, len = getline(&line, &cap, file)) != -1) {
        lineno++;
        if (strlen(line) != (size_t) len) {
            rc = s_fail(p, -EINVAL, "config file %s line %u: a NUL byte", path, lineno);
            break;
        }
        char *text = s_trim(line);
        if (!*text || *text == '#')
            continue;
        char *eq = strchr(text, '=');
        if (!eq) {
            rc = s_fail(p, -EINVAL, "config file %s line %u: expected name = value, got \"%s\"",
                        path, lineno, text);
            break;
        }
        *eq = 0;
        char *name = s_trim(text);
        char *value = s_trim(eq + 1);
        const s_setting_t *s = s_find(name);
        if (!s) {
            if (strcmp(name, "config") == 0 || strcmp(name, "help") == 0
                || strcmp(name, "version") == 0)
                rc = s_fail(p, -EINVAL,
                            "config file %s line %u: \"%s\" is a command-line option only",
                            path, lineno, name);
            else
                rc = s_fail(p, -EINVAL, "config file %s line %u: unknown setting \"%s\"", path,
                            lineno, name);
            break;
        }
        char where[512];
        snprintf(where, sizeof where, "config file %s line %u: %s", path, lineno, name);
        rc = s_apply(p, s, value, where);
    }
    if (rc == 0 && ferror(file)) {
        rc = errno ? -errno : -EIO;
        s_fail(p, rc, "--config: cannot read \"%s\": %s", path, strerror(-rc));
    }
    free(line);
    fclose(file);
    return rc;
}

//  --------------------------------------------------------------------------
//  What depends on several settings

//  --fair-weights NS=W,...: each NS a namespace --tenants names (or
//  "shared"), each W 1..PK_SCHED_MAX_WEIGHT; the others weigh 1.
static int
s_fair_weights(s_parser_t *p)
{
    pk_server_config_t *c = p->config;
    for (size_t i = 0; i < PK_NS_MAX; i++)
        c->fair_weight[i] = 1;
    for (const char *at = c->fair_weights; at && *at; ) {
        size_t len = strcspn(at, ",");
        char item[PK_NS_MAX_NAME + 16];
        if (len >= sizeof item)
            return s_fail(p, -EINVAL, "--fair-weights: \"%.*s\" is too long for NAMESPACE=WEIGHT",
                          (int) (len > 60 ? 60 : len), at);
        memcpy(item, at, len);
        item[len] = '\0';
        char *eq = strchr(item, '=');
        uint64_t w = 0;
        if (!eq || eq == item || pk_config_parse_u64(eq + 1, &w) != 0 || w < 1
            || w > PK_FAIR_MAX_WEIGHT)
            return s_fail(p, -EINVAL, "--fair-weights: expected NAMESPACE=WEIGHT, WEIGHT "
                          "1..%d, got \"%s\"", PK_FAIR_MAX_WEIGHT, item);
        *eq = '\0';
        int ns = pk_tenants_find(c->tenant_map, item);
        if (ns < 0)
            return s_fail(p, -EINVAL, "--fair-weights: \"%s\" is not a namespace of "
                          "--tenants (nor \"shared\")", item);
        c->fair_weight[ns] = (unsigned short) w;
        at += len;
        at += *at == ',';
    }
    return 0;
}

static int
s_finish(s_parser_t *p)
{
    pk_server_config_t *c = p->config;
    int rc = 0;
    if (!p->local_set && (rc = pk_server_config_derive_local(c)))
        return s_fail(p, rc, "out of memory");
    if (!p->pool_name_set && (rc = pk_server_config_derive_pool_name(c)))
        return s_fail(p, rc, "out of memory");
    //  a group is named for its members to connect: read and write
    if (!p->local_mode_set && c->local_group)
        c->local_mode = 0660;
    //  Derived from a long peer id, they can break rules a default should
    //  not: say where they came from, the rule before the value (a long
    //  one is cut at PK_ERRLEN).
    if (!pk_config_endpoint_ok(c->local))
        return s_fail(p, -EINVAL,
                      "--local: the default is longer than %d bytes (set --local): \"%s\"",
                      PK_CONFIG_MAX_IPC_PATH + 6, c->local);
    if (!pk_config_pool_name_ok(c->pool_name))
        return s_fail(p, -EINVAL,
                      "--pool-name: the default is longer than %d bytes (set --pool-name): \"%s\"",
                      PK_CONFIG_MAX_SHM_NAME + 1, c->pool_name);
    if (strcmp(c->bind, c->local) == 0)
        return s_fail(p, -EINVAL, "--local: the same endpoint as --bind, \"%s\"", c->local);
    //  The pool is one shared-memory object: its size is an off_t.
    if (c->block_len > (uint64_t) INT64_MAX / c->pool_blocks)
        return s_fail(p, -EINVAL,
                      "--block-len: %" PRIu64 " blocks of %" PRIu64
                      " bytes do not fit in a pool (at most 2^63-1 bytes)",
                      c->pool_blocks, c->block_len);
    if (!c->curve_secret != !c->curve_allow)
        return s_fail(p, -EINVAL, "%s: needs %s too (CURVE takes both or neither)",
                      c->curve_secret ? "--curve-secret" : "--curve-allow",
                      c->curve_secret ? "--curve-allow" : "--curve-secret");
    if (c->rail_stall > 0 && !(c->rail_stall < c->stall_timeout))
        return s_fail(p, -EINVAL, "--rail-stall: %g s is not below --stall-timeout (%g s): "
                      "the session's stall would end the round before the rail is taken out",
                      c->rail_stall, c->stall_timeout);
    if (!c->spill_dir != !c->spill_size)
        return s_fail(p, -EINVAL, "%s: needs %s too (the disk tier takes both or neither)",
                      c->spill_dir ? "--spill-dir" : "--spill-size",
                      c->spill_dir ? "--spill-size" : "--spill-dir");
    if (c->spill_key && !c->spill_dir)
        return s_fail(p, -EINVAL, "--spill-key needs --spill-dir");
    if (c->spill_size && c->spill_size < pk_disk_tier_slot_len(c->block_len))
        return s_fail(p, -EINVAL, "--spill-size: %" PRIu64 " bytes hold no block of --block-len "
                      "%" PRIu64 " (a slot is %" PRIu64 " bytes: a 4 KiB header and the block)",
                      c->spill_size, c->block_len, pk_disk_tier_slot_len(c->block_len));
    if (c->pin_quota > c->pool_blocks)
        return s_fail(p, -EINVAL, "--pin-quota: %" PRIu64 " is more than --pool-blocks %" PRIu64,
                      c->pin_quota, c->pool_blocks);
    //  Read at start, before any socket: a bad line is a usage error.
    pk_tenants_destroy(&c->tenant_map);
    char terr[PK_ERRLEN] = "";
    if (c->tenants && !(c->tenant_map = pk_tenants_load(c->tenants, &rc, terr)))
        return s_fail(p, rc, "--tenants: %s", terr);
    return s_fair_weights(p);
}

//  --------------------------------------------------------------------------
//  The command line

//  Names an option getopt_long refused: unknown, ambiguous (a prefix of
//  several), missing its value or given one it does not take.
static int
s_bad_option(s_parser_t *p, int c, int opt, const char *arg)
{
    if (opt >= S_OPT_BASE && opt < S_OPT_BASE + (int) S_NSETTINGS)
        return s_fail(p, -EINVAL, "--%s: %s", s_settings[opt - S_OPT_BASE].name,
                      c == ':' ? "missing value" : "takes no value");
    if (opt == 'c')
        return s_fail(p, -EINVAL, "--config: missing value");
    if (opt == 'h' || opt == 'V')
        return s_fail(p, -EINVAL, "--%s: takes no value", opt == 'h' ? "help" : "version");
    if (opt)
        return s_fail(p, -EINVAL, "unknown option \"-%c\"", opt);
    if (arg && strncmp(arg, "--", 2) == 0) {
        size_t len = strcspn(arg + 2, "=");
        unsigned matches = 0;
        for (size_t i = 0; i < S_NSETTINGS; i++)
            matches += strncmp(s_settings[i].name, arg + 2, len) == 0;
        if (len && matches > 1)
            return s_fail(p, -EINVAL, "ambiguous option \"%.*s\"", (int) len + 2, arg);
    }
    return s_fail(p, -EINVAL, "unknown option \"%s\"", arg ? arg : "?");
}

//  getopt_long's list: the table's options, then config, help, version.
static void
s_long_options(struct option *opts)
{
    for (size_t i = 0; i < S_NSETTINGS; i++)
        opts[i] = (struct option) { s_settings[i].name, required_argument, NULL,
                                    S_OPT_BASE + (int) i };
    opts[S_NSETTINGS] = (struct option) { "config", required_argument, NULL, 'c' };
    opts[S_NSETTINGS + 1] = (struct option) { "help", no_argument, NULL, 'h' };
    opts[S_NSETTINGS + 2] = (struct option) { "version", no_argument, NULL, 'V' };
    opts[S_NSETTINGS + 3] = (struct option) { NULL, 0, NULL, 0 };
}

//  The command line's first step: every setting is collected into
//  pending (argc slots), none applied; --config's path is kept.  0, 1
//  after --help or --version, or a negative errno.
static int
s_collect(s_parser_t *p, int argc, char **argv, FILE *out, s_pending_t *pending,
          size_t *npending, const char **config_path)
{
    struct option opts[S_NSETTINGS + 4];
    s_long_options(opts);
    //  optind 0 makes glibc re-initialise completely, so a second parse in
    //  the same process starts clean; '+' stops at the first operand
    //  instead of permuting argv; ':' silences getopt's own messages.
    int saved_opterr = opterr;
    opterr = 0;
    optind = 0;
    int rc = 0, c;
    while (rc == 0 && (c = getopt_long(argc, argv, "+:c:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            fputs(s_usage, out ? out : stdout);
            rc = 1;
            break;
        case 'V':
            fprintf(out ? out : stdout, "p2pkv-server %s\n", PK_VERSION);
            rc = 1;
            break;
        case 'c':
            if (*config_path)
                rc = s_fail(p, -EINVAL, "--config: given twice (\"%s\", \"%s\")", *config_path,
                            optarg);
            *config_path = optarg;
            break;
        case ':':
        case '?':
            rc = s_bad_option(p, c, optopt, optind > 0 && optind <= argc ? argv[optind - 1]
                                                                         : NULL);
            break;
        default:
            if (c >= S_OPT_BASE && c < S_OPT_BASE + (int) S_NSETTINGS)
                pending[(*npending)++] = (s_pending_t) { &s_settings[c - S_OPT_BASE], optarg };
            else
                rc = s_fail(p, -EINVAL, "unknown option");
            break;
        }
    }
    if (rc == 0 && optind < argc)
        rc = s_fail(p, -EINVAL, "unexpected argument \"%s\"", argv[optind]);
    opterr = saved_opterr;
    return rc;
}

//  The command line's last step, over the file's settings: the first
//  --allow replaces the file's list, later ones add to it.
static int
s_apply_pending(s_parser_t *p, const s_pending_t *pending, size_t npending)
{
    pk_server_config_t *c = p->config;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < npending; i++) {
        const s_setting_t *s = pending[i].setting;
        if (s->kind == S_ALLOW && !p->allow_from_argv) {
            p->allow_from_argv = true;
            for (size_t k = 0; k < c->nallow; k++)
                free(c->allow[k]);
            c->nallow = 0;
        }
        char where[64];
        snprintf(where, sizeof where, "--%s", s->name);
        rc = s_apply(p, s, pending[i].value, where);
    }
    return rc;
}

int
pk_server_config_parse(pk_server_config_t *self, int argc, char **argv, FILE *out, char *err)
{
    s_parser_t p = { .config = self, .err = err };
    if (err)
        err[0] = 0;
    int rc = pk_server_config_defaults(self);
    if (rc)
        return s_fail(&p, rc, "out of memory");
    //  Every option takes at least one argv slot, so argc bounds them.
    s_pending_t *pending = calloc(argc > 0 ? (size_t) argc : 1, sizeof *pending);
    if (!pending)
        return s_fail(&p, -ENOMEM, "out of memory");
    size_t npending = 0;
    const char *config_path = NULL;
    rc = s_collect(&p, argc, argv, out, pending, &npending, &config_path);
    if (rc == 0 && config_path)
        rc = s_read_file(&p, config_path);
    if (rc == 0)
        rc = s_apply_pending(&p, pending, npending);
    if (rc == 0)
        rc = s_finish(&p);
    free(pending);
    return rc;
}

const char *
pk_server_config_usage(void)
{
    return s_usage;
}
