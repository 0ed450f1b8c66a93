/*  server_config.c: defaults, config file and command line of p2pkv-server.

    One table names every setting, its kind and its field; getopt_long's
    option list and the config file's names both come from it, so a
    setting cannot exist in one place and not the other.  Parsing runs in
    three steps: getopt_long collects the command line (and stops at
    --help, --version or a malformed option) without applying anything,
    then the config file is applied, then the collected options on top of
    it, so the command line wins wherever it stands relative to --config.
    Each value is checked as it is applied; what depends on several
    settings (the pool's size, the defaults derived from the peer id) is
    checked once at the end.

    The --help text is a literal rather than generated from the table:
    doc/p2pkv-server.8 repeats it word for word, and the tests check that
    both name every option.  pk_server_config_client hands the
    consumer-side settings to the puller's client under the same names.
*/
#include "daemon/server_config.h"
#include "wire/protocol.h"
#include "base/version.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

//  The protocol's string limit (protocol.md section 2) for peer_id,
//  config_fingerprint and hash_seed; protocol.h's PK_MAX_STRING, restated
//  so that this file needs nothing but libc.
#define S_MAX_STRING 4096

//  num_blocks on the wire is 1..2^31, and a block index must fit 31 bits.
#define S_MAX_POOL_BLOCKS (UINT64_C(1) << 31)

//  Every count limit shares one ceiling: large enough for any real
//  deployment, small enough that no product of two of them overflows.
#define S_MAX_LIMIT (UINT64_C(1) << 31)

//  A timeout shorter than a millisecond rounds to 0 ms in zmq_poll and
//  would spin.
#define S_MIN_SECONDS 0.001

//  sockaddr_un's sun_path holds 108 bytes with the NUL.
#define S_MAX_IPC_PATH 107

//  shm_open names: a slash, then one file name of /dev/shm.
#define S_MAX_SHM_NAME 255

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
    S_LOG_LEVEL
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
    { "peer-id",            S_PEER_ID,     S_FIELD(peer_id), 0, 0 },
    { "pool-blocks",        S_UINT,        S_FIELD(pool_blocks), 1, S_MAX_POOL_BLOCKS },
    { "block-len",          S_UINT,        S_FIELD(block_len), 1, INT64_MAX },
    { "pool-name",          S_POOL_NAME,   S_FIELD(pool_name), 0, 0 },
    { "provider",           S_PROVIDER,    S_FIELD(provider), 0, 0 },
    { "fabric-addr",        S_FABRIC_ADDR, S_FIELD(fabric_addr), 0, 0 },
    { "fingerprint",        S_FINGERPRINT, S_FIELD(fingerprint), 0, 0 },
    { "hash-seed",          S_HASH_SEED,   S_FIELD(hash_seed), 0, 0 },
    { "metrics-bind",       S_METRICS,     S_FIELD(metrics_bind), 0, 0 },
    { "allow",              S_ALLOW,       S_FIELD(allow), 0, 0 },
    { "log-level",          S_LOG_LEVEL,   S_FIELD(log_level), 0, 0 },
    { "lookup-timeout",     S_SECONDS,     S_FIELD(lookup_timeout), 0, 0 },
    { "store-timeout",      S_SECONDS,     S_FIELD(store_timeout), 0, 0 },
    { "drain-timeout",      S_SECONDS,     S_FIELD(drain_timeout), 0, 0 },
    { "silence-timeout",    S_SECONDS,     S_FIELD(silence_timeout), 0, 0 },
    { "lease-timeout",      S_SECONDS,     S_FIELD(lease_timeout), 0, 0 },
    { "stall-timeout",      S_SECONDS,     S_FIELD(stall_timeout), 0, 0 },
    { "shutdown-timeout",   S_SECONDS,     S_FIELD(shutdown_timeout), 0, 0 },
    { "max-requests",       S_UINT,        S_FIELD(max_requests), 1, S_MAX_LIMIT },
    { "max-parked-keys",    S_UINT,        S_FIELD(max_parked_keys), 1, S_MAX_LIMIT },
    { "max-rounds",         S_UINT,        S_FIELD(max_rounds), 1, S_MAX_LIMIT },
    { "pin-quota",          S_UINT,        S_FIELD(pin_quota), 0, S_MAX_POOL_BLOCKS },
    { "max-queued-frames",  S_UINT,        S_FIELD(max_queued_frames), 1, S_MAX_LIMIT },
    //  ZMQ_MAXMSGSIZE is an int64; below 4 KiB not even a describe fits.
    { "max-frame",          S_UINT,        S_FIELD(max_frame), 4096, INT64_MAX },
    { "max-sessions",       S_UINT,        S_FIELD(max_sessions), 1, S_MAX_LIMIT },
    { "load-timeout",       S_SECONDS,     S_FIELD(load_timeout), 0, 0 },
    { "abort-ack-timeout",  S_SECONDS,     S_FIELD(abort_ack_timeout), 0, 0 },
    { "connect-retry",      S_SECONDS,     S_FIELD(connect_retry), 0, 0 },
    { "keepalive-interval", S_SECONDS,     S_FIELD(keepalive_interval), 0, 0 },
};

#define S_NSETTINGS (sizeof s_settings / sizeof s_settings[0])

static const char *const s_log_levels[] = { "error", "warn", "info", "debug" };

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
    "                               ipc://RUNDIR/p2pkv-ID.sock, RUNDIR being\n"
    "                               $XDG_RUNTIME_DIR if writable, else /tmp\n"
    "      --peer-id ID             this node's name on the wire (1..4096 bytes);\n"
    "                               default the host name\n"
    "      --allow ADDR[/PREFIX]    accept peers only from this IPv4 or IPv6\n"
    "                               address or CIDR range; repeatable, or a\n"
    "                               comma-separated list; default everyone\n"
    "      --metrics-bind ADDR:PORT serve Prometheus metrics over HTTP there (ADDR\n"
    "                               an IPv4 address, [IPv6], a host name or *);\n"
    "                               default off\n"
    "      --log-level LEVEL        error, warn, info or debug; default info\n"
    "\n"
    "Pool and data plane:\n"
    "      --pool-blocks N          blocks in the pool (1..2147483648); default 1024\n"
    "      --block-len BYTES        bytes per block, the same on every peer;\n"
    "                               default 65536\n"
    "      --pool-name /NAME        shared-memory object holding the pool; default\n"
    "                               /p2pkv-ID (characters other than A-Z a-z 0-9\n"
    "                               . _ - become _)\n"
    "      --provider NAME          libfabric provider (tcp, verbs, efa, ...), or\n"
    "                               auto: the first of verbs, efa, tcp; default tcp\n"
    "      --fabric-addr ADDR       local address (IPv4, IPv6 or host name) of the\n"
    "                               data plane; default: the provider's choice\n"
    "      --fingerprint STRING     model and cache layout; peers must match it\n"
    "                               exactly; default empty\n"
    "      --hash-seed STRING       seed of the block hashes; peers must match it;\n"
    "                               default 0\n"
    "\n"
    "Timeouts, in seconds (0.001..1000000):\n"
    "      --lookup-timeout S       parked lookup keys answer as misses; default 5\n"
    "      --store-timeout S        a store job fails its round; default 30\n"
    "      --drain-timeout S        an aborted round's writes are then cancelled\n"
    "                               at once and the session retired; default 10\n"
    "      --silence-timeout S      retire a session silent that long, give up on\n"
    "                               a server silent that long; default 10\n"
    "      --lease-timeout S        free an engine's reservation not committed;\n"
    "                               default 30\n"
    "      --stall-timeout S        close a peer's data channel whose write made\n"
    "                               no progress; fail a pull whose blocks stopped\n"
    "                               landing; default 5\n"
    "      --shutdown-timeout S     bound on the drain at SIGINT or SIGTERM;\n"
    "                               default 5\n"
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
    "      --max-frame BYTES        larger frames are refused (whole server;\n"
    "                               at least 4096); default 67108864\n"
    "      --max-sessions N         sessions at once (whole server); default 256\n"
    "\n"
    "Exit status: 0 clean shutdown, 1 runtime error, 2 usage or configuration\n"
    "error.  See p2pkv-server(8).\n";

typedef struct {
    pk_server_config_t *config;
    char *err;
    size_t errlen;
    bool local_set;             //  else it follows the final peer id
    bool pool_name_set;
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
    if (p->err && p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err, p->errlen, fmt, ap);
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
//  Values

static int
s_parse_u64(const char *s, uint64_t *out)
{
    //  strtoull takes blanks, signs ("-1" is UINT64_MAX) and 0x: digits only.
    if (!*s)
        return -EINVAL;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        unsigned d = (unsigned) (*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int
s_parse_seconds(const char *s, double *out)
{
    //  strtod also takes blanks, signs, "inf" and "nan".
    if (!((*s >= '0' && *s <= '9') || *s == '.'))
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v) || v < S_MIN_SECONDS || v > PK_CONFIG_MAX_SECONDS)
        return -EINVAL;
    *out = v;
    return 0;
}

//  Valid UTF-8 without control characters: the protocol's strings are
//  UTF-8, and one of these in a log line or a file line is a mistake.
static bool
s_text_ok(const char *s)
{
    for (const char *c = s; *c; c++)
        if ((unsigned char) *c < 0x20 || *c == 0x7f)
            return false;
    return pk_utf8_ok(s, strlen(s));
}

//  A port: 1..5 digits, 0..65535.
static bool
s_port_ok(const char *s)
{
    uint64_t port;
    return strlen(s) <= 5 && s_parse_u64(s, &port) == 0 && port <= 65535;
}

//  libzmq bind endpoints: tcp://HOST:PORT (PORT may be * or ! for an
//  ephemeral one), ipc://PATH (the path must fit sun_path), inproc://NAME.
static bool
s_endpoint_ok(const char *v)
{
    if (strncmp(v, "tcp://", 6) == 0) {
        const char *colon = strrchr(v + 6, ':');
        if (!colon || colon == v + 6)
            return false;
        return s_port_ok(colon + 1) || strcmp(colon + 1, "*") == 0
               || strcmp(colon + 1, "!") == 0;
    }
    if (strncmp(v, "ipc://", 6) == 0)
        return strlen(v + 6) >= 1 && strlen(v + 6) <= S_MAX_IPC_PATH;
    if (strncmp(v, "inproc://", 9) == 0)
        return strlen(v + 9) >= 1;
    return false;
}

static bool
s_shm_char_ok(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
           || c == '.' || c == '_' || c == '-';
}

//  "/" and one name of /dev/shm in the portable file-name characters
//  (so the name is also safe in a log line and a shell).
static bool
s_pool_name_ok(const char *v)
{
    size_t len = strlen(v);
    if (len < 2 || len > S_MAX_SHM_NAME + 1 || v[0] != '/')
        return false;
    if (strcmp(v, "/.") == 0 || strcmp(v, "/..") == 0)
        return false;
    for (size_t i = 1; i < len; i++)
        if (!s_shm_char_ok(v[i]))
            return false;
    return true;
}

//  libfabric provider names and layered stacks ("verbs;ofi_rxm").
static bool
s_provider_ok(const char *v)
{
    size_t len = strlen(v);
    if (len < 1 || len > 64)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!s_shm_char_ok(v[i]) && v[i] != ';')
            return false;
    return true;
}

//  An IPv4 address, [IPv6] (bare when !bracketed), a host name (RFC 1123),
//  or * when star.
static bool
s_host_ok(const char *host, bool bracketed, bool star)
{
    size_t len = strlen(host);
    if (len == 0 || len > 255)
        return false;
    char buf[256];
    struct in6_addr a6;
    if (bracketed && host[0] == '[') {
        if (len < 3 || host[len - 1] != ']')
            return false;
        memcpy(buf, host + 1, len - 2);
        buf[len - 2] = 0;
        return inet_pton(AF_INET6, buf, &a6) == 1;
    }
    if (!bracketed && strchr(host, ':'))
        return inet_pton(AF_INET6, host, &a6) == 1;
    if (strcmp(host, "*") == 0)
        return star;
    //  A dotted IPv4 address, or a host name; a bare IPv6 address has
    //  colons and fails here.
    if (strspn(host, "0123456789.") == len) {
        struct in_addr a4;
        return inet_pton(AF_INET, host, &a4) == 1;
    }
    if (host[0] == '-' || host[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = host[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
              || c == '.' || c == '-'))
            return false;
    }
    return true;
}

//  ADDR:PORT where ADDR is an IPv4 address, [IPv6], a host name or *.
static bool
s_metrics_ok(const char *v)
{
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v || !s_port_ok(colon + 1))
        return false;
    size_t len = (size_t) (colon - v);
    char host[256];
    if (len >= sizeof host)
        return false;
    memcpy(host, v, len);
    host[len] = 0;
    return s_host_ok(host, true, true);
}

//  An IPv4 or IPv6 address, optionally /PREFIX within the family's bits,
//  as 16 bytes and a prefix over them: IPv4 is kept in its IPv4-mapped
//  IPv6 form, so one comparison serves both families and ::ffff:10.0.0.1
//  falls in 10.0.0.0/8.  Returns 0, -EINVAL (not an address) or -ERANGE
//  (the prefix is too long for the family).
static int
s_cidr_parse(const char *text, uint8_t addr[16], unsigned *prefix)
{
    char buf[INET6_ADDRSTRLEN + 1];
    const char *slash = strchr(text, '/');
    size_t len = slash ? (size_t) (slash - text) : strlen(text);
    if (len == 0 || len >= sizeof buf)
        return -EINVAL;
    memcpy(buf, text, len);
    buf[len] = 0;
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    unsigned bits;
    if (inet_pton(AF_INET, buf, addr + 12) == 1) {
        memcpy(addr, mapped, sizeof mapped);
        bits = 32;
    }
    else if (inet_pton(AF_INET6, buf, addr) == 1)
        bits = 128;
    else
        return -EINVAL;
    uint64_t n = bits;
    if (slash && (strlen(slash + 1) > 3 || s_parse_u64(slash + 1, &n)))
        return -EINVAL;
    if (n > bits)
        return -ERANGE;
    *prefix = (unsigned) n + (128 - bits);
    return 0;
}

//  --------------------------------------------------------------------------
//  Defaults

//  $XDG_RUNTIME_DIR is per user and cleaned at logout, which is what a
//  socket wants; it is only trusted if it is an absolute, writable
//  directory, since a stale value would make the default unusable.
static const char *
s_run_dir(void)
{
    const char *dir = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (dir && dir[0] == '/' && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)
        && access(dir, W_OK | X_OK) == 0)
        return dir;
    return "/tmp";
}

//  The peer id where a file name wants it: [A-Za-z0-9._-], else '_'.
static char *
s_sanitised(const char *id)
{
    char *out = strdup(id);
    if (out)
        for (char *c = out; *c; c++)
            if (!s_shm_char_ok(*c))
                *c = '_';
    return out;
}

static int
s_derive_local(pk_server_config_t *self)
{
    char *id = s_sanitised(self->peer_id);
    char *local = NULL;
    if (!id || asprintf(&local, "ipc://%s/p2pkv-%s.sock", s_run_dir(), id) < 0)
        local = NULL;
    free(id);
    if (!local)
        return -ENOMEM;
    free(self->local);
    self->local = local;
    return 0;
}

static int
s_derive_pool_name(pk_server_config_t *self)
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
    //  gethostname may leave the buffer unterminated when it truncates.
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0] || !s_text_ok(host))
        strcpy(host, "localhost");
    self->bind = strdup("tcp://*:5710");
    self->peer_id = strdup(host);
    self->provider = strdup("tcp");
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
    self->max_frame = UINT64_C(64) << 20;
    self->max_sessions = 256;
    self->load_timeout = 30;
    self->abort_ack_timeout = 10;
    self->connect_retry = 0.5;
    self->keepalive_interval = 2;
    if (!self->bind || !self->peer_id || !self->provider || !self->fingerprint
        || !self->hash_seed || s_derive_local(self) || s_derive_pool_name(self)) {
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
    free(self->peer_id);
    free(self->pool_name);
    free(self->provider);
    free(self->fabric_addr);
    free(self->fingerprint);
    free(self->hash_seed);
    free(self->metrics_bind);
    for (size_t i = 0; i < self->nallow; i++)
        free(self->allow[i]);
    free(self->allow);
    memset(self, 0, sizeof *self);
}

const char *
pk_server_config_usage(void)
{
    return s_usage;
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
    if (!address || s_cidr_parse(address, peer, &width) || width != 128)
        return false;
    for (size_t i = 0; i < self->nallow; i++) {
        if (s_cidr_parse(self->allow[i], net, &prefix))
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
        .provider = self->provider,
        .node = self->fabric_addr,
        .load_timeout = self->load_timeout,
        .abort_ack_timeout = self->abort_ack_timeout,
        .keepalive_interval = self->keepalive_interval,
        .silence_timeout = self->silence_timeout,
        .connect_retry = self->connect_retry,
        .stall_timeout = self->stall_timeout,
        .no_reconnect = true,
        .progress_thread = false,
    };
}

const char *
pk_server_config_log_level_name(int level)
{
    if (level < 0 || level > PK_LOG_DEBUG)
        return NULL;
    return s_log_levels[level];
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
        int check = s_cidr_parse(item, addr, &prefix);
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

static int
s_apply(s_parser_t *p, const s_setting_t *s, const char *value, const char *where)
{
    pk_server_config_t *c = p->config;
    char *base = (char *) c + s->offset;
    char what[96];
    switch (s->kind) {
    case S_ENDPOINT:
        if (!s_endpoint_ok(value))
            return s_bad(p, where,
                         "tcp://HOST:PORT, ipc://PATH (at most 107 bytes) or inproc://NAME",
                         value);
        if (base == (char *) &c->local)
            p->local_set = true;
        return s_set_string(p, (char **) base, value);
    case S_PEER_ID:
        if (!*value || strlen(value) > S_MAX_STRING || !s_text_ok(value))
            return s_bad(p, where, "1..4096 bytes of UTF-8 text", value);
        return s_set_string(p, (char **) base, value);
    case S_FINGERPRINT:
    case S_HASH_SEED: {
        size_t min = s->kind == S_HASH_SEED;
        if (strlen(value) < min || strlen(value) > S_MAX_STRING || !s_text_ok(value))
            return s_bad(p, where,
                         min ? "1..4096 bytes of UTF-8 text" : "0..4096 bytes of UTF-8 text",
                         value);
        return s_set_string(p, (char **) base, value);
    }
    case S_POOL_NAME:
        if (!s_pool_name_ok(value))
            return s_bad(p, where, "/NAME, NAME being 1..255 of A-Z a-z 0-9 . _ -", value);
        p->pool_name_set = true;
        return s_set_string(p, (char **) base, value);
    case S_PROVIDER:
        if (!s_provider_ok(value))
            return s_bad(p, where, "a libfabric provider name (tcp, verbs, efa, ...) or auto",
                         value);
        if (strcmp(value, "auto") == 0) {
            free(c->provider);
            c->provider = NULL;
            return 0;
        }
        return s_set_string(p, (char **) base, value);
    case S_FABRIC_ADDR:
        //  Empty gives the choice back to the provider.
        if (!*value) {
            free(c->fabric_addr);
            c->fabric_addr = NULL;
            return 0;
        }
        if (!s_host_ok(value, false, false))
            return s_bad(p, where, "an IPv4 or IPv6 address or a host name", value);
        return s_set_string(p, (char **) base, value);
    case S_METRICS:
        //  Empty turns the listener off, so a command line can undo a file.
        if (!*value) {
            free(c->metrics_bind);
            c->metrics_bind = NULL;
            return 0;
        }
        if (!s_metrics_ok(value))
            return s_bad(p, where, "ADDR:PORT with PORT 0..65535", value);
        return s_set_string(p, (char **) base, value);
    case S_ALLOW:
        return s_add_allow(p, where, value);
    case S_LOG_LEVEL:
        for (int i = 0; i <= PK_LOG_DEBUG; i++)
            if (strcmp(value, s_log_levels[i]) == 0) {
                c->log_level = i;
                return 0;
            }
        return s_bad(p, where, "error, warn, info or debug", value);
    case S_SECONDS:
        if (s_parse_seconds(value, (double *) base))
            return s_bad(p, where, "seconds 0.001..1000000", value);
        return 0;
    case S_UINT: {
        uint64_t v;
        if (s_parse_u64(value, &v) || v < s->min || v > s->max) {
            snprintf(what, sizeof what, "an integer %" PRIu64 "..%" PRIu64, s->min, s->max);
            return s_bad(p, where, what, value);
        }
        *(uint64_t *) base = v;
        return 0;
    }
    }
    return s_fail(p, -EINVAL, "%s: internal error", where);
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

static int
s_finish(s_parser_t *p)
{
    pk_server_config_t *c = p->config;
    int rc = 0;
    if (!p->local_set && (rc = s_derive_local(c)))
        return s_fail(p, rc, "out of memory");
    if (!p->pool_name_set && (rc = s_derive_pool_name(c)))
        return s_fail(p, rc, "out of memory");
    //  Derived from a long peer id, they can break rules a default should
    //  not: say where they came from.
    if (!s_endpoint_ok(c->local))
        return s_fail(p, -EINVAL,
                      "--local: the default \"%s\" is longer than %d bytes; set --local",
                      c->local, S_MAX_IPC_PATH + 6);
    if (!s_pool_name_ok(c->pool_name))
        return s_fail(p, -EINVAL,
                      "--pool-name: the default \"%s\" is longer than %d bytes; set --pool-name",
                      c->pool_name, S_MAX_SHM_NAME + 1);
    if (strcmp(c->bind, c->local) == 0)
        return s_fail(p, -EINVAL, "--local: the same endpoint as --bind, \"%s\"", c->local);
    //  The pool is one shared-memory object: its size is an off_t.
    if (c->block_len > (uint64_t) INT64_MAX / c->pool_blocks)
        return s_fail(p, -EINVAL,
                      "--block-len: %" PRIu64 " blocks of %" PRIu64
                      " bytes do not fit in a pool (at most 2^63-1 bytes)",
                      c->pool_blocks, c->block_len);
    if (c->pin_quota > c->pool_blocks)
        return s_fail(p, -EINVAL, "--pin-quota: %" PRIu64 " is more than --pool-blocks %" PRIu64,
                      c->pin_quota, c->pool_blocks);
    return 0;
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

int
pk_server_config_parse(pk_server_config_t *self, int argc, char **argv, FILE *out, char *err,
                       size_t errlen)
{
    s_parser_t p = { self, err, errlen, false, false, false };
    if (err && errlen)
        err[0] = 0;
    int rc = pk_server_config_defaults(self);
    if (rc)
        return s_fail(&p, rc, "out of memory");

    struct option opts[S_NSETTINGS + 4];
    for (size_t i = 0; i < S_NSETTINGS; i++)
        opts[i] = (struct option) { s_settings[i].name, required_argument, NULL,
                                    S_OPT_BASE + (int) i };
    opts[S_NSETTINGS] = (struct option) { "config", required_argument, NULL, 'c' };
    opts[S_NSETTINGS + 1] = (struct option) { "help", no_argument, NULL, 'h' };
    opts[S_NSETTINGS + 2] = (struct option) { "version", no_argument, NULL, 'V' };
    opts[S_NSETTINGS + 3] = (struct option) { NULL, 0, NULL, 0 };

    //  Every option takes at least one argv slot, so argc bounds them.
    s_pending_t *pending = calloc(argc > 0 ? (size_t) argc : 1, sizeof *pending);
    if (!pending)
        return s_fail(&p, -ENOMEM, "out of memory");
    size_t npending = 0;
    const char *config_path = NULL;

    //  optind 0 makes glibc re-initialise completely, so a second parse in
    //  the same process starts clean; '+' stops at the first operand
    //  instead of permuting argv; ':' silences getopt's own messages.
    int saved_opterr = opterr;
    opterr = 0;
    optind = 0;
    int c;
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
            if (config_path)
                rc = s_fail(&p, -EINVAL, "--config: given twice (\"%s\", \"%s\")", config_path,
                            optarg);
            config_path = optarg;
            break;
        case ':':
        case '?':
            rc = s_bad_option(&p, c, optopt, optind > 0 && optind <= argc ? argv[optind - 1]
                                                                          : NULL);
            break;
        default:
            if (c >= S_OPT_BASE && c < S_OPT_BASE + (int) S_NSETTINGS)
                pending[npending++] = (s_pending_t) { &s_settings[c - S_OPT_BASE], optarg };
            else
                rc = s_fail(&p, -EINVAL, "unknown option");
            break;
        }
    }
    if (rc == 0 && optind < argc)
        rc = s_fail(&p, -EINVAL, "unexpected argument \"%s\"", argv[optind]);
    opterr = saved_opterr;

    if (rc == 0 && config_path)
        rc = s_read_file(&p, config_path);
    for (size_t i = 0; rc == 0 && i < npending; i++) {
        const s_setting_t *s = pending[i].setting;
        if (s->kind == S_ALLOW && !p.allow_from_argv) {
            p.allow_from_argv = true;
            for (size_t k = 0; k < self->nallow; k++)
                free(self->allow[k]);
            self->nallow = 0;
        }
        char where[64];
        snprintf(where, sizeof where, "--%s", s->name);
        rc = s_apply(&p, s, pending[i].value, where);
    }
    if (rc == 0)
        rc = s_finish(&p);
    free(pending);
    return rc;
}
