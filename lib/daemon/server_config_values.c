/*  server_config_values.c: the rule of each kind of value a setting takes.

    Each check is strict where libc is lenient (strtoull takes signs and
    blanks, strtod takes "inf"), so that a value is refused with the rule
    it breaks rather than read as something the operator did not mean.
    The parser (server_config_parse.c) names the option and the rule; the
    --allow matcher (server_config.c) reuses the CIDR parser.
*/
#include "daemon/server_config_internal.h"
#include "wire/protocol.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(PK_CONFIG_MAX_STRING == PK_MAX_STRING, "the protocol's string limit");

int
pk_config_parse_u64(const char *s, uint64_t *out)
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

int
pk_config_parse_seconds(const char *s, double *out)
{
    //  strtod also takes blanks, signs, "inf" and "nan".
    if (!((*s >= '0' && *s <= '9') || *s == '.'))
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v) || v < PK_CONFIG_MIN_SECONDS || v > PK_CONFIG_MAX_SECONDS)
        return -EINVAL;
    *out = v;
    return 0;
}

//  Valid UTF-8 without control characters: the protocol's strings are
//  UTF-8, and one of these in a log line or a file line is a mistake.
bool
pk_config_text_ok(const char *s)
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
    return strlen(s) <= 5 && pk_config_parse_u64(s, &port) == 0 && port <= 65535;
}

//  libzmq bind endpoints: tcp://HOST:PORT (PORT may be * or ! for an
//  ephemeral one), ipc://PATH (the path must fit sun_path), inproc://NAME.
bool
pk_config_endpoint_ok(const char *v)
{
    if (strncmp(v, "tcp://", 6) == 0) {
        const char *colon = strrchr(v + 6, ':');
        if (!colon || colon == v + 6)
            return false;
        return s_port_ok(colon + 1) || strcmp(colon + 1, "*") == 0
               || strcmp(colon + 1, "!") == 0;
    }
    if (strncmp(v, "ipc://", 6) == 0)
        return strlen(v + 6) >= 1 && strlen(v + 6) <= PK_CONFIG_MAX_IPC_PATH;
    if (strncmp(v, "inproc://", 9) == 0)
        return strlen(v + 9) >= 1;
    return false;
}

bool
pk_config_shm_char_ok(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
           || c == '.' || c == '_' || c == '-';
}

//  "/" and one name of /dev/shm in the portable file-name characters
//  (so the name is also safe in a log line and a shell).
bool
pk_config_pool_name_ok(const char *v)
{
    size_t len = strlen(v);
    if (len < 2 || len > PK_CONFIG_MAX_SHM_NAME + 1 || v[0] != '/')
        return false;
    if (strcmp(v, "/.") == 0 || strcmp(v, "/..") == 0)
        return false;
    for (size_t i = 1; i < len; i++)
        if (!pk_config_shm_char_ok(v[i]))
            return false;
    return true;
}

//  libfabric provider names and layered stacks ("verbs;ofi_rxm"), alone
//  or as a list ("shm,tcp") of at most PK_CONFIG_MAX_PROVIDERS, each once.
bool
pk_config_provider_ok(const char *v)
{
    size_t n = 0;
    const char *names[PK_CONFIG_MAX_PROVIDERS];
    size_t lens[PK_CONFIG_MAX_PROVIDERS];
    for (const char *at = v;; at++) {
        size_t len = strcspn(at, ",");
        if (len < 1 || len > 63 || n == PK_CONFIG_MAX_PROVIDERS)
            return false;
        for (size_t i = 0; i < len; i++)
            if (!pk_config_shm_char_ok(at[i]) && at[i] != ';')
                return false;
        for (size_t i = 0; i < n; i++)
            if (lens[i] == len && memcmp(names[i], at, len) == 0)
                return false;
        names[n] = at;
        lens[n++] = len;
        at += len;
        if (!*at)
            return true;
    }
}

//  An IPv4 address, [IPv6] (bare when !bracketed), a host name (RFC 1123),
//  or * when star.
bool
pk_config_host_ok(const char *host, bool bracketed, bool star)
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
bool
pk_config_metrics_ok(const char *v)
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
    return pk_config_host_ok(host, true, true);
}

//  An IPv4 or IPv6 address, optionally /PREFIX within the family's bits,
//  as 16 bytes and a prefix over them: IPv4 is kept in its IPv4-mapped
//  IPv6 form, so one comparison serves both families and ::ffff:10.0.0.1
//  falls in 10.0.0.0/8.  Returns 0, -EINVAL (not an address) or -ERANGE
//  (the prefix is too long for the family).
int
pk_config_cidr_parse(const char *text, uint8_t addr[16], unsigned *prefix)
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
    if (slash && (strlen(slash + 1) > 3 || pk_config_parse_u64(slash + 1, &n)))
        return -EINVAL;
    if (n > bits)
        return -ERANGE;
    *prefix = (unsigned) n + (128 - bits);
    return 0;
}
