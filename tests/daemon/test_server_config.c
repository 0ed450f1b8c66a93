/*  test_server_config.c: the daemon's settings against the list
    and doc/protocol.md's timeouts and limits.

    Every test parses a literal command line (and, where it says so, a
    config file written to a temporary directory) and checks the fields,
    or the exact one-line error an operator would read.  The last test
    keeps --help, the table of options and doc/p2pkv-server.8 in step.
*/
#include "daemon/server_config.h"
#include "cluster/dir_entry.h"
#include "testutil.h"
#include "base/version.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>

#define S_ERRLEN PK_ERRLEN

//  Every option of the daemon, so a new one cannot miss the help text or
//  the man page.
static const char *const s_options[] = {
    "bind", "local", "peer-id", "pool-blocks", "block-len", "pool-name", "provider",
    "fabric-addr", "fingerprint", "hash-seed", "metrics-bind", "allow", "log-level", "lookup-timeout",
    "store-timeout", "drain-timeout", "silence-timeout", "lease-timeout", "stall-timeout",
    "shutdown-timeout", "max-requests", "max-parked-keys", "max-rounds", "pin-quota",
    "max-queued-frames", "max-queued-bytes", "max-unread-bytes", "max-frame", "max-sessions",
    "load-timeout", "abort-ack-timeout",
    "connect-retry", "keepalive-interval", "tenants", "curve-secret", "curve-allow",
    "curve-servers", "directory", "directory-optional", "directory-ttl", "directory-timeout",
    "config", "help", "version",
};
#define S_NSETTINGS 41      //  the leading ones that are settings

static char s_err[S_ERRLEN];

//  Parses "p2pkv-server" and the NULL-terminated arguments into *config.
static int
s_parse_out(pk_server_config_t *config, FILE *out, ...)
{
    char *argv[96] = { "p2pkv-server" };
    int argc = 1;
    va_list ap;
    va_start(ap, out);
    const char *arg;
    while ((arg = va_arg(ap, const char *))) {
        ck_assert_int_lt(argc, 95);
        argv[argc++] = (char *) arg;
    }
    va_end(ap);
    memset(s_err, 'x', sizeof s_err);   //  a stale message must not survive
    return pk_server_config_parse(config, argc, argv, out, s_err);
}

#define s_parse(config, ...) s_parse_out((config), stdout, __VA_ARGS__, (const char *) NULL)

//  The error of one bad command line, with the config finished.
static int
s_refused(const char *expected, ...)
{
    char *argv[64] = { "p2pkv-server" };
    int argc = 1;
    va_list ap;
    va_start(ap, expected);
    const char *arg;
    while ((arg = va_arg(ap, const char *)))
        argv[argc++] = (char *) arg;
    va_end(ap);
    pk_server_config_t config;
    int rc = pk_server_config_parse(&config, argc, argv, stdout, s_err);
    pk_server_config_fini(&config);
    ck_assert_msg(rc < 0, "accepted: %s", argv[1]);
    ck_assert_str_eq(s_err, expected);
    return rc;
}

#define s_refuse(expected, ...) s_refused((expected), __VA_ARGS__, (const char *) NULL)

static char s_dir[64];

//  A temporary directory per test (Check forks each one).
static void
s_setup(void)
{
    strcpy(s_dir, "/tmp/p2pkv-config-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s_dir));
    //  The default --local depends on it: make it known.
    setenv("XDG_RUNTIME_DIR", s_dir, 1);
}

static void
s_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    ck_assert_int_eq(system(cmd), 0);
}

//  Writes text to DIR/name and returns the path (static buffer).
static const char *
s_file(const char *name, const char *text)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

static void
s_host(char *buf, size_t len)
{
    ck_assert_int_eq(gethostname(buf, len - 1), 0);
    buf[len - 1] = 0;
}

//  --------------------------------------------------------------------------

START_TEST(test_defaults)
{
    char host[256], expect[512];
    s_host(host, sizeof host);
    pk_server_config_t c;
    ck_assert_int_eq(pk_server_config_defaults(&c), 0);
    ck_assert_str_eq(c.bind, "tcp://*:5710");
    ck_assert_str_eq(c.peer_id, host);
    snprintf(expect, sizeof expect, "ipc://%s/p2pkv/p2pkv-%s.sock", s_dir, host);
    ck_assert_str_eq(c.local, expect);
    ck_assert_uint_eq(c.local_mode, 0600);
    ck_assert_ptr_null(c.local_group);
    snprintf(expect, sizeof expect, "/p2pkv-%s", host);
    ck_assert_str_eq(c.pool_name, expect);
    ck_assert_uint_eq(c.pool_blocks, 1024);
    ck_assert_uint_eq(c.block_len, 65536);
    ck_assert_ptr_null(c.provider);      //  auto: what the machine has
    ck_assert_ptr_null(c.fabric_addr);
    ck_assert_str_eq(c.fingerprint, "");
    ck_assert_str_eq(c.hash_seed, "0");
    ck_assert_ptr_null(c.metrics_bind);
    ck_assert_uint_eq(c.nallow, 0);
    ck_assert_int_eq(c.log_level, PK_LOG_INFO);
    ck_assert_double_eq(c.lookup_timeout, 5);
    ck_assert_double_eq(c.store_timeout, 30);
    ck_assert_double_eq(c.drain_timeout, 10);
    ck_assert_double_eq(c.silence_timeout, 10);
    ck_assert_double_eq(c.lease_timeout, 30);
    ck_assert_double_eq(c.stall_timeout, 5);
    ck_assert_double_eq(c.shutdown_timeout, 5);
    ck_assert_uint_eq(c.max_requests, 16384);
    ck_assert_uint_eq(c.max_parked_keys, 65536);
    ck_assert_uint_eq(c.max_rounds, 1024);
    ck_assert_uint_eq(c.pin_quota, 0);
    ck_assert_uint_eq(pk_server_config_pin_quota(&c), 256);
    ck_assert_uint_eq(c.max_queued_frames, 256);
    ck_assert_uint_eq(c.max_queued_bytes, 128u << 20);
    ck_assert_uint_eq(c.max_unread_bytes, 64u << 20);
    ck_assert_uint_eq(c.max_frame, 64u << 20);
    ck_assert_uint_eq(c.max_sessions, 256);
    ck_assert_double_eq(c.load_timeout, 30);
    ck_assert_double_eq(c.abort_ack_timeout, 10);
    ck_assert_double_eq(c.connect_retry, 0.5);
    ck_assert_double_eq(c.keepalive_interval, 2);
    ck_assert_double_eq(c.directory_ttl, 3);
    ck_assert_double_eq(c.directory_timeout, 1);

    //  No arguments at all: the same, and it validates.
    pk_server_config_t p;
    ck_assert_int_eq(s_parse(&p, NULL), 0);
    ck_assert_str_eq(s_err, "");
    ck_assert_str_eq(p.bind, c.bind);
    ck_assert_str_eq(p.local, c.local);
    ck_assert_str_eq(p.pool_name, c.pool_name);
    ck_assert_uint_eq(p.max_frame, c.max_frame);
    pk_server_config_fini(&p);
    pk_server_config_fini(&c);
    //  fini twice is harmless
    pk_server_config_fini(&c);
    ck_assert_ptr_null(c.bind);
}
END_TEST

//  Without a usable $XDG_RUNTIME_DIR: /run/p2pkv for root, else a
//  directory of the user's own under /tmp (local_path.h's rule).
START_TEST(test_run_dir_falls_back_to_tmp)
{
    char host[256], expect[512];
    s_host(host, sizeof host);
    if (geteuid() == 0)
        snprintf(expect, sizeof expect, "ipc:///run/p2pkv/p2pkv-%s.sock", host);
    else
        snprintf(expect, sizeof expect, "ipc:///tmp/p2pkv-%u/p2pkv-%s.sock",
                 (unsigned) geteuid(), host);
    pk_server_config_t c;
    unsetenv("XDG_RUNTIME_DIR");
    ck_assert_int_eq(s_parse(&c, NULL), 0);
    ck_assert_str_eq(c.local, expect);
    pk_server_config_fini(&c);
    //  set but missing: not trusted
    setenv("XDG_RUNTIME_DIR", "/nonexistent/p2pkv", 1);
    ck_assert_int_eq(s_parse(&c, NULL), 0);
    ck_assert_str_eq(c.local, expect);
    pk_server_config_fini(&c);
    setenv("XDG_RUNTIME_DIR", "relative", 1);
    ck_assert_int_eq(s_parse(&c, NULL), 0);
    ck_assert_str_eq(c.local, expect);
    pk_server_config_fini(&c);
    //  a directory of another user (root's /): not this user's to use
    if (geteuid() != 0) {
        setenv("XDG_RUNTIME_DIR", "/", 1);
        ck_assert_int_eq(s_parse(&c, NULL), 0);
        ck_assert_str_eq(c.local, expect);
        pk_server_config_fini(&c);
    }
}
END_TEST

//  Every setting but CURVE's and the tenants' at the value that
//  test_every_option gives it (on the command line, or in a file).
static void
s_assert_every_setting(const pk_server_config_t *c)
{
    ck_assert_str_eq(c->bind, "tcp://10.1.2.3:6000");
    ck_assert_str_eq(c->local, "ipc:///run/p2pkv/engine.sock");
    ck_assert_str_eq(c->peer_id, "node-7");
    ck_assert_uint_eq(c->pool_blocks, 4096);
    ck_assert_uint_eq(c->block_len, 1048576);
    ck_assert_str_eq(c->pool_name, "/kv.pool_1");
    ck_assert_str_eq(c->provider, "verbs;ofi_rxm");
    ck_assert_str_eq(c->fabric_addr, "10.1.2.3");
    ck_assert_str_eq(c->fingerprint, "llama-3-70b/bf16");
    ck_assert_str_eq(c->hash_seed, "42");
    ck_assert_str_eq(c->metrics_bind, "127.0.0.1:9100");
    ck_assert_uint_eq(c->nallow, 1);
    ck_assert_str_eq(c->allow[0], "10.0.0.0/8");
    ck_assert_int_eq(c->log_level, PK_LOG_DEBUG);
    ck_assert_double_eq(c->lookup_timeout, 0.5);
    ck_assert_double_eq(c->store_timeout, 31);
    ck_assert_double_eq(c->drain_timeout, 11);
    ck_assert_double_eq(c->silence_timeout, 12.25);
    ck_assert_double_eq(c->lease_timeout, 33);
    ck_assert_double_eq(c->stall_timeout, 6);
    ck_assert_double_eq(c->shutdown_timeout, 7);
    ck_assert_uint_eq(c->max_requests, 100);
    ck_assert_uint_eq(c->max_parked_keys, 200);
    ck_assert_uint_eq(c->max_rounds, 300);
    ck_assert_uint_eq(c->pin_quota, 400);
    ck_assert_uint_eq(pk_server_config_pin_quota(c), 400);
    ck_assert_uint_eq(c->max_queued_frames, 500);
    ck_assert_uint_eq(c->max_queued_bytes, 8192);
    ck_assert_uint_eq(c->max_unread_bytes, 16384);
    ck_assert_uint_eq(c->max_frame, 4096);
    ck_assert_uint_eq(c->max_sessions, 600);
    ck_assert_double_eq(c->load_timeout, 34);
    ck_assert_double_eq(c->abort_ack_timeout, 13);
    ck_assert_double_eq(c->connect_retry, 0.25);
    ck_assert_double_eq(c->keepalive_interval, 1.5);
}

START_TEST(test_every_option)
{
    pk_server_config_t c;
    ck_assert_int_eq(
        s_parse(&c, "--bind", "tcp://10.1.2.3:6000", "--local", "ipc:///run/p2pkv/engine.sock",
                "--peer-id", "node-7", "--pool-blocks", "4096", "--block-len", "1048576",
                "--pool-name", "/kv.pool_1", "--provider", "verbs;ofi_rxm",
                "--fabric-addr", "10.1.2.3", "--fingerprint",
                "llama-3-70b/bf16", "--hash-seed", "42", "--metrics-bind", "127.0.0.1:9100",
                "--allow", "10.0.0.0/8", "--log-level", "debug", "--lookup-timeout", "0.5",
                "--store-timeout", "31", "--drain-timeout", "11", "--silence-timeout", "12.25",
                "--lease-timeout", "33", "--stall-timeout", "6", "--shutdown-timeout", "7",
                "--max-requests", "100", "--max-parked-keys", "200", "--max-rounds", "300",
                "--pin-quota", "400", "--max-queued-frames", "500", "--max-frame", "4096",
                "--max-queued-bytes", "8192", "--max-unread-bytes", "16384",
                "--max-sessions", "600", "--load-timeout", "34", "--abort-ack-timeout", "13",
                "--connect-retry", "0.25", "--keepalive-interval", "1.5",
                "--curve-secret", "/etc/p2pkv/server_secret", "--curve-allow",
                "/etc/p2pkv/consumers", "--curve-servers", "/etc/p2pkv/servers"),
        0);
    ck_assert_str_eq(c.curve_secret, "/etc/p2pkv/server_secret");
    ck_assert_str_eq(c.curve_allow, "/etc/p2pkv/consumers");
    ck_assert_str_eq(c.curve_servers, "/etc/p2pkv/servers");
    s_assert_every_setting(&c);
    pk_server_config_fini(&c);

    //  --name=value, the last of a repeated option wins, and the edges of
    //  every range are accepted.
    ck_assert_int_eq(s_parse(&c, "--pool-blocks=7", "--pool-blocks", "2147483648",
                             "--block-len", "1", "--provider", "auto", "--log-level", "error",
                             "--lookup-timeout", "0.001", "--store-timeout", "1000000",
                             "--metrics-bind", "[::1]:0", "--bind", "inproc://peers",
                             "--local", "tcp://*:!", "--max-frame", "9223372036854775807",
                             "--pool-blocks", "1", "--pin-quota", "1", "--fabric-addr", "::1"),
                     0);
    ck_assert_str_eq(c.fabric_addr, "::1");
    ck_assert_uint_eq(c.pool_blocks, 1);
    ck_assert_uint_eq(c.block_len, 1);
    ck_assert_ptr_null(c.provider);
    ck_assert_int_eq(c.log_level, PK_LOG_ERROR);
    ck_assert_double_eq(c.lookup_timeout, 0.001);
    ck_assert_double_eq(c.store_timeout, 1000000);
    ck_assert_str_eq(c.metrics_bind, "[::1]:0");
    ck_assert_uint_eq(c.max_frame, INT64_MAX);
    pk_server_config_fini(&c);

    //  A quarter of a tiny pool is still one block.
    ck_assert_int_eq(s_parse(&c, "--pool-blocks", "3"), 0);
    ck_assert_uint_eq(pk_server_config_pin_quota(&c), 1);
    pk_server_config_fini(&c);

    //  metrics: a host name and *, and empty turns it off again
    ck_assert_int_eq(s_parse(&c, "--metrics-bind", "metrics.example-1.net:9100"), 0);
    ck_assert_str_eq(c.metrics_bind, "metrics.example-1.net:9100");
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--metrics-bind", "*:65535", "--metrics-bind", ""), 0);
    ck_assert_ptr_null(c.metrics_bind);
    pk_server_config_fini(&c);

    ck_assert_str_eq(pk_server_config_log_level_name(PK_LOG_WARN), "warn");
    ck_assert_ptr_null(pk_server_config_log_level_name(4));
    ck_assert_ptr_null(pk_server_config_log_level_name(-1));
}
END_TEST

//  --local-mode: octal, the owner's read and write kept, no execute;
//  --local-group alone opens the socket to its group (0660).
START_TEST(test_local_mode_and_group)
{
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, "--local-group", "nogroup"), 0);
    ck_assert_str_eq(c.local_group, "nogroup");
    ck_assert_uint_eq(c.local_mode, 0660);
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--local-group", "nogroup", "--local-mode", "600"), 0);
    ck_assert_uint_eq(c.local_mode, 0600);
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--local-mode", "666"), 0);
    ck_assert_uint_eq(c.local_mode, 0666);
    pk_server_config_fini(&c);
    const char *bad[] = { "700", "400", "0777", "6600", "60x", "" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_lt(s_parse(&c, "--local-mode", bad[i]), 0);
        ck_assert_msg(strstr(s_err, "--local-mode"), "err \"%s\" for %s", s_err, bad[i]);
        pk_server_config_fini(&c);
    }
}
END_TEST

START_TEST(test_derived_defaults_follow_peer_id)
{
    char expect[512];
    pk_server_config_t c;
    //  Characters a file name should not carry become '_', byte by byte.
    ck_assert_int_eq(s_parse(&c, "--peer-id", "rack 2/gpu\xc3\xa9"), 0);
    ck_assert_str_eq(c.peer_id, "rack 2/gpu\xc3\xa9");
    snprintf(expect, sizeof expect, "ipc://%s/p2pkv/p2pkv-rack_2_gpu__.sock", s_dir);
    ck_assert_str_eq(c.local, expect);
    ck_assert_str_eq(c.pool_name, "/p2pkv-rack_2_gpu__");
    pk_server_config_fini(&c);

    //  set explicitly, before or after --peer-id, they stay
    ck_assert_int_eq(s_parse(&c, "--local", "ipc://@engine", "--pool-name", "/mine",
                             "--peer-id", "other"),
                     0);
    ck_assert_str_eq(c.local, "ipc://@engine");
    ck_assert_str_eq(c.pool_name, "/mine");
    pk_server_config_fini(&c);

    //  a long peer id is fine on the wire but not in a socket path
    char id[301];
    memset(id, 'n', sizeof id - 1);
    id[sizeof id - 1] = 0;
    char msg[1024];
    snprintf(msg, sizeof msg,
             "--local: the default is longer than 113 bytes (set --local): "
             "\"ipc://%s/p2pkv/p2pkv-%s.sock\"",
             s_dir, id);
    msg[S_ERRLEN - 1] = 0;      //  truncated to the buffer
    s_refuse(msg, "--peer-id", id);
    snprintf(msg, sizeof msg,
             "--pool-name: the default is longer than 256 bytes (set --pool-name): "
             "\"/p2pkv-%s\"",
             id);
    msg[S_ERRLEN - 1] = 0;
    s_refuse(msg, "--peer-id", id, "--local", "ipc://@x");
    ck_assert_int_eq(s_parse(&c, "--peer-id", id, "--local", "ipc://@x", "--pool-name", "/p"),
                     0);
    ck_assert_str_eq(c.peer_id, id);
    pk_server_config_fini(&c);
}
END_TEST

START_TEST(test_invalid_values)
{
    //  integers: the full string, digits only, in range
    s_refuse("--pool-blocks: expected an integer 1..2147483648, got \"abc\"", "--pool-blocks",
             "abc");
    s_refuse("--pool-blocks: expected an integer 1..2147483648, got \"0\"", "--pool-blocks", "0");
    s_refuse("--pool-blocks: expected an integer 1..2147483648, got \"2147483649\"",
             "--pool-blocks", "2147483649");
    s_refuse("--pool-blocks: expected an integer 1..2147483648, got \"12k\"", "--pool-blocks",
             "12k");
    s_refuse("--pool-blocks: expected an integer 1..2147483648, got \"-1\"", "--pool-blocks",
             "-1");
    s_refuse("--pool-blocks: expected an integer 1..2147483648, got \" 5\"", "--pool-blocks",
             " 5");
    s_refuse("--pool-blocks: expected an integer 1..2147483648, got \"\"", "--pool-blocks", "");
    s_refuse("--block-len: expected an integer 1..9223372036854775807, got "
             "\"18446744073709551616\"",
             "--block-len", "18446744073709551616");
    s_refuse("--max-frame: expected an integer 4096..9223372036854775807, got \"4095\"",
             "--max-frame", "4095");
    s_refuse("--max-queued-bytes: expected an integer 4096..9223372036854775807, got \"4095\"",
             "--max-queued-bytes", "4095");
    s_refuse("--max-unread-bytes: expected an integer 4096..9223372036854775807, got \"0\"",
             "--max-unread-bytes", "0");
    s_refuse("--max-requests: expected an integer 1..2147483648, got \"0\"", "--max-requests",
             "0");
    s_refuse("--max-parked-keys: expected an integer 1..2147483648, got \"0x10\"",
             "--max-parked-keys", "0x10");
    s_refuse("--max-rounds: expected an integer 1..2147483648, got \"1.5\"", "--max-rounds",
             "1.5");
    s_refuse("--pin-quota: expected an integer 0..2147483648, got \"+1\"", "--pin-quota", "+1");
    s_refuse("--max-queued-frames: expected an integer 1..2147483648, got \"0\"",
             "--max-queued-frames", "0");
    s_refuse("--max-sessions: expected an integer 1..2147483648, got \"2147483649\"",
             "--max-sessions", "2147483649");

    //  durations: positive, finite, plain decimal
    s_refuse("--lookup-timeout: expected seconds 0.001..1000000, got \"0\"", "--lookup-timeout",
             "0");
    s_refuse("--store-timeout: expected seconds 0.001..1000000, got \"-1\"", "--store-timeout",
             "-1");
    s_refuse("--drain-timeout: expected seconds 0.001..1000000, got \"inf\"", "--drain-timeout",
             "inf");
    s_refuse("--silence-timeout: expected seconds 0.001..1000000, got \"nan\"",
             "--silence-timeout", "nan");
    s_refuse("--lease-timeout: expected seconds 0.001..1000000, got \"5s\"", "--lease-timeout",
             "5s");
    s_refuse("--stall-timeout: expected seconds 0.001..1000000, got \"0.0009\"",
             "--stall-timeout", "0.0009");
    s_refuse("--shutdown-timeout: expected seconds 0.001..1000000, got \"1000001\"",
             "--shutdown-timeout", "1000001");
    s_refuse("--load-timeout: expected seconds 0.001..1000000, got \"1e999\"", "--load-timeout",
             "1e999");
    s_refuse("--abort-ack-timeout: expected seconds 0.001..1000000, got \"\"",
             "--abort-ack-timeout", "");
    s_refuse("--connect-retry: expected seconds 0.001..1000000, got \" 1\"", "--connect-retry",
             " 1");
    s_refuse("--keepalive-interval: expected seconds 0.001..1000000, got \"two\"",
             "--keepalive-interval", "two");

    //  endpoints
    const char *ep = "tcp://HOST:PORT, ipc://PATH (at most 107 bytes) or inproc://NAME";
    char msg[2 * S_ERRLEN];  //  room gcc -O1 sees the path needing
    const char *bad_endpoints[] = { "udp://*:5710", "tcp://*", "tcp://:5710", "tcp://*:65536",
                                    "tcp://*:port", "ipc://", "inproc://", "*:5710", "" };
    for (size_t i = 0; i < sizeof bad_endpoints / sizeof *bad_endpoints; i++) {
        snprintf(msg, sizeof msg, "--bind: expected %s, got \"%s\"", ep, bad_endpoints[i]);
        s_refuse(msg, "--bind", bad_endpoints[i]);
    }
    char path[200] = "ipc:///";
    memset(path + 7, 'p', 107);     //  "/" + 107 = 108 bytes: one too many
    snprintf(msg, sizeof msg, "--local: expected %s, got \"%s\"", ep, path);
    s_refuse(msg, "--local", path);
    s_refuse("--local: the same endpoint as --bind, \"tcp://*:5710\"", "--local", "tcp://*:5710");

    //  the protocol's strings
    s_refuse("--peer-id: expected 1..4096 bytes of UTF-8 text, got \"\"", "--peer-id", "");
    s_refuse("--peer-id: expected 1..4096 bytes of UTF-8 text, got \"a\xff\"", "--peer-id",
             "a\xff");
    s_refuse("--peer-id: expected 1..4096 bytes of UTF-8 text, got \"\xc0\xaf\"", "--peer-id",
             "\xc0\xaf");
    //  a control character is refused, and never breaks the message's line
    s_refuse("--peer-id: expected 1..4096 bytes of UTF-8 text, got \"a?b\"", "--peer-id",
             "a\nb");
    s_refuse("--hash-seed: expected 1..4096 bytes of UTF-8 text, got \"\"", "--hash-seed", "");
    s_refuse("--fingerprint: expected 0..4096 bytes of UTF-8 text, got \"\xed\xa0\x80\"",
             "--fingerprint", "\xed\xa0\x80");
    char big[4098];
    memset(big, 'f', 4097);
    big[4097] = 0;
    char longmsg[2 * sizeof big];
    snprintf(longmsg, sizeof longmsg,
             "--fingerprint: expected 0..4096 bytes of UTF-8 text, got \"%s\"", big);
    longmsg[S_ERRLEN - 1] = 0;      //  truncated to the caller's buffer
    s_refuse(longmsg, "--fingerprint", big);
    big[4096] = 0;
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, "--fingerprint", big, "--peer-id", big, "--hash-seed", big,
                             "--local", "ipc://@l", "--pool-name", "/p"),
                     0);
    ck_assert_uint_eq(strlen(c.fingerprint), 4096);
    pk_server_config_fini(&c);

    //  pool name, provider, log level, metrics
    const char *pn = "/NAME, NAME being 1..255 of A-Z a-z 0-9 . _ -";
    const char *bad_names[] = { "p2pkv", "/", "/a/b", "/a b", "/..", "" };
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
        snprintf(msg, sizeof msg, "--pool-name: expected %s, got \"%s\"", pn, bad_names[i]);
        s_refuse(msg, "--pool-name", bad_names[i]);
    }
    const char *pv = "a libfabric provider name (tcp, verbs, efa, ...), a list of them "
                     "(shm,tcp), or auto";
    const char *bad_providers[] = { "", "tcp verbs", "shm,", ",tcp", "shm,,tcp", "tcp,tcp",
                                    "a,b,c,d,e,f,g,h,i" };
    for (size_t i = 0; i < sizeof bad_providers / sizeof *bad_providers; i++) {
        snprintf(msg, sizeof msg, "--provider: expected %s, got \"%s\"", pv, bad_providers[i]);
        s_refuse(msg, "--provider", bad_providers[i]);
    }
    const char *bad_addrs[] = { "*", "[::1]", "300.1.1.1", "host_name", "-host", "1:2:3",
                                "127.0.0.1,*" };
    for (size_t i = 0; i < sizeof bad_addrs / sizeof *bad_addrs; i++) {
        snprintf(msg, sizeof msg,
                 "--fabric-addr: expected IPv4 or IPv6 addresses or host names, "
                 "comma-separated, got \"%s\"", bad_addrs[i]);
        s_refuse(msg, "--fabric-addr", bad_addrs[i]);
    }
    //  several rails: no empty piece between commas
    const char *bad_lists[] = { "127.0.0.1,", ",127.0.0.1", "127.0.0.1,,127.0.0.2" };
    for (size_t i = 0; i < sizeof bad_lists / sizeof *bad_lists; i++) {
        snprintf(msg, sizeof msg, "--fabric-addr: expected addresses separated by single "
                 "commas, got \"%s\"", bad_lists[i]);
        s_refuse(msg, "--fabric-addr", bad_lists[i]);
    }
    s_refuse("--log-level: expected error, warn, info or debug, got \"INFO\"", "--log-level",
             "INFO");
    s_refuse("--log-level: expected error, warn, info or debug, got \"2\"", "--log-level", "2");
    const char *bad_metrics[] = { "9100", ":9100", "127.0.0.1:65536", "127.0.0.1:", "::1:9100",
                                  "[::1]9100", "[x]:1", "host_name:80", "-host:80",
                                  "300.1.1.1:80", "127.0.0.1:-1" };
    for (size_t i = 0; i < sizeof bad_metrics / sizeof *bad_metrics; i++) {
        snprintf(msg, sizeof msg,
                 "--metrics-bind: expected ADDR:PORT with PORT 0..65535, got \"%s\"",
                 bad_metrics[i]);
        s_refuse(msg, "--metrics-bind", bad_metrics[i]);
    }

    //  what depends on several settings
    s_refuse("--block-len: 2147483648 blocks of 4294967296 bytes do not fit in a pool "
             "(at most 2^63-1 bytes)",
             "--pool-blocks", "2147483648", "--block-len", "4294967296");
    ck_assert_int_eq(s_parse(&c, "--pool-blocks", "2147483648", "--block-len", "4294967295"), 0);
    pk_server_config_fini(&c);
    s_refuse("--pin-quota: 1025 is more than --pool-blocks 1024", "--pin-quota", "1025");
}
END_TEST

START_TEST(test_allow)
{
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, "--allow", "10.0.0.0/8", "--allow=192.168.1.5",
                             "--allow", "fd00::/8, ::1,127.0.0.1/32", "--allow", "0.0.0.0/0",
                             "--allow", "::/128"),
                     0);
    const char *want[] = { "10.0.0.0/8", "192.168.1.5", "fd00::/8", "::1", "127.0.0.1/32",
                           "0.0.0.0/0", "::/128" };
    ck_assert_uint_eq(c.nallow, 7);
    for (size_t i = 0; i < 7; i++)
        ck_assert_str_eq(c.allow[i], want[i]);
    pk_server_config_fini(&c);

    const char *what = "expected an IPv4 or IPv6 address or CIDR range";
    char msg[S_ERRLEN];
    const char *bad[] = { "10.0.0", "10.0.0.0/", "10.0.0.0/a", "10.0.0.0/8/8", "host.example",
                          "10.0.0.0/-1", "fe80::1%eth0", "10.0.0.0/0008" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(msg, sizeof msg, "--allow: %s, got \"%s\"", what, bad[i]);
        s_refuse(msg, "--allow", bad[i]);
    }
    s_refuse("--allow: expected an IPv4 or IPv6 address or CIDR range, got \" , \"", "--allow",
             " , ");
    s_refuse("--allow: prefix length out of range (0..32), got \"10.0.0.0/33\"", "--allow",
             "10.0.0.0/33");
    s_refuse("--allow: prefix length out of range (0..128), got \"::/129\"", "--allow",
             "::/129");
    //  one bad item in a list refuses the option (and leaks nothing)
    s_refuse("--allow: expected an IPv4 or IPv6 address or CIDR range, got \"x\"", "--allow",
             "10.0.0.1", "--allow", "10.0.0.2,x");
}
END_TEST

START_TEST(test_allows)
{
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, NULL), 0);
    //  no list: everyone
    ck_assert(pk_server_config_allows(&c, "203.0.113.9"));
    ck_assert(pk_server_config_allows(&c, "2001:db8::1"));
    pk_server_config_fini(&c);

    ck_assert_int_eq(s_parse(&c, "--allow", "10.0.0.0/8,192.168.1.5,10.255.255.255/32",
                             "--allow", "2001:db8:abcd::/48", "--allow", "172.16.0.0/13"),
                     0);
    ck_assert(pk_server_config_allows(&c, "10.0.0.1"));
    ck_assert(pk_server_config_allows(&c, "10.255.0.7"));
    ck_assert(!pk_server_config_allows(&c, "11.0.0.1"));
    ck_assert(!pk_server_config_allows(&c, "9.255.255.255"));
    ck_assert(pk_server_config_allows(&c, "192.168.1.5"));
    ck_assert(!pk_server_config_allows(&c, "192.168.1.6"));
    //  a prefix that ends inside a byte: 172.16.0.0/13 is 172.16-172.23
    ck_assert(pk_server_config_allows(&c, "172.23.255.255"));
    ck_assert(!pk_server_config_allows(&c, "172.24.0.0"));
    ck_assert(!pk_server_config_allows(&c, "172.15.255.255"));
    //  what a dual-stack socket reports for an IPv4 peer
    ck_assert(pk_server_config_allows(&c, "::ffff:10.1.2.3"));
    ck_assert(!pk_server_config_allows(&c, "::ffff:11.1.2.3"));
    ck_assert(pk_server_config_allows(&c, "2001:db8:abcd:12::1"));
    ck_assert(!pk_server_config_allows(&c, "2001:db8:abce::1"));
    //  an IPv4 range does not admit the IPv6 address with the same bits
    ck_assert(!pk_server_config_allows(&c, "::a00:1"));
    //  what is not one address is refused
    ck_assert(!pk_server_config_allows(&c, ""));
    ck_assert(!pk_server_config_allows(&c, NULL));
    ck_assert(!pk_server_config_allows(&c, "10.0.0.1/8"));
    ck_assert(!pk_server_config_allows(&c, "localhost"));
    pk_server_config_fini(&c);

    ck_assert_int_eq(s_parse(&c, "--allow", "0.0.0.0/0"), 0);
    ck_assert(pk_server_config_allows(&c, "198.51.100.1"));
    ck_assert(!pk_server_config_allows(&c, "2001:db8::1"));
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--allow", "::/0"), 0);
    ck_assert(pk_server_config_allows(&c, "2001:db8::1"));
    ck_assert(pk_server_config_allows(&c, "198.51.100.1"));
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--allow", "::1"), 0);
    ck_assert(pk_server_config_allows(&c, "::1"));
    ck_assert(pk_server_config_allows(&c, "0:0::1"));
    ck_assert(!pk_server_config_allows(&c, "127.0.0.1"));
    pk_server_config_fini(&c);
}
END_TEST

START_TEST(test_config_file)
{
    const char *path = s_file("server.conf",
                              "# p2pkv-server settings\n"
                              "\n"
                              "pool-blocks = 4096\n"
                              "  block-len=131072  \n"
                              "\tpeer-id = node a\t\n"
                              "fingerprint =\n"
                              "hash-seed = seed = with = equals\r\n"
                              "   # an indented comment\n"
                              "lookup-timeout = 0.5\n"
                              "allow = 10.0.0.0/8\n"
                              "allow = 10.1.0.0/16, 10.2.0.1\n"
                              "metrics-bind = 0.0.0.0:9100\n"
                              "provider = auto\n"
                              "max-sessions = 9\n"
                              "pool-blocks = 2048\n"
                              "log-level = warn");   //  no final newline
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, "--config", path), 0);
    ck_assert_uint_eq(c.pool_blocks, 2048);     //  the last line wins
    ck_assert_uint_eq(c.block_len, 131072);
    ck_assert_str_eq(c.peer_id, "node a");
    ck_assert_str_eq(c.pool_name, "/p2pkv-node_a");
    ck_assert_str_eq(c.fingerprint, "");
    ck_assert_str_eq(c.hash_seed, "seed = with = equals");
    ck_assert_double_eq(c.lookup_timeout, 0.5);
    ck_assert_uint_eq(c.nallow, 3);
    ck_assert_str_eq(c.allow[2], "10.2.0.1");
    ck_assert_str_eq(c.metrics_bind, "0.0.0.0:9100");
    ck_assert_ptr_null(c.provider);
    ck_assert_uint_eq(c.max_sessions, 9);
    ck_assert_int_eq(c.log_level, PK_LOG_WARN);
    pk_server_config_fini(&c);

    //  The command line wins, before and after --config; a command-line
    //  --allow replaces the file's list, --metrics-bind "" turns it off,
    //  and -c is --config.
    ck_assert_int_eq(s_parse(&c, "--pool-blocks", "8", "--allow", "192.168.0.0/16", "-c", path,
                             "--peer-id", "cli", "--allow", "::1", "--metrics-bind", "",
                             "--provider", "efa"),
                     0);
    ck_assert_uint_eq(c.pool_blocks, 8);
    ck_assert_uint_eq(c.block_len, 131072);
    ck_assert_str_eq(c.peer_id, "cli");
    ck_assert_str_eq(c.pool_name, "/p2pkv-cli");
    ck_assert_uint_eq(c.nallow, 2);
    ck_assert_str_eq(c.allow[0], "192.168.0.0/16");
    ck_assert_str_eq(c.allow[1], "::1");
    ck_assert_ptr_null(c.metrics_bind);
    ck_assert_str_eq(c.provider, "efa");
    ck_assert_int_eq(c.log_level, PK_LOG_WARN);
    pk_server_config_fini(&c);

    //  an empty file is the defaults
    ck_assert_int_eq(s_parse(&c, "--config", s_file("empty.conf", "")), 0);
    ck_assert_uint_eq(c.pool_blocks, 1024);
    pk_server_config_fini(&c);
}
END_TEST

//  Every setting of --help and the man page, given in a config file, lands
//  in its field, just as on the command line (test_every_option).
START_TEST(test_every_setting_in_a_file)
{
    char tenants[128];
    snprintf(tenants, sizeof tenants, "%s", s_file("every.tenants", "* alpha\n"));
    const char *path = s_file("every.conf",
        "bind = tcp://10.1.2.3:6000\nlocal = ipc:///run/p2pkv/engine.sock\n"
        "peer-id = node-7\npool-blocks = 4096\nblock-len = 1048576\n"
        "pool-name = /kv.pool_1\nprovider = verbs;ofi_rxm\nfabric-addr = 10.1.2.3\n"
        "fingerprint = llama-3-70b/bf16\nhash-seed = 42\nmetrics-bind = 127.0.0.1:9100\n"
        "allow = 10.0.0.0/8\nlog-level = debug\nlookup-timeout = 0.5\n"
        "store-timeout = 31\ndrain-timeout = 11\nsilence-timeout = 12.25\n"
        "lease-timeout = 33\nstall-timeout = 6\nshutdown-timeout = 7\n"
        "max-requests = 100\nmax-parked-keys = 200\nmax-rounds = 300\npin-quota = 400\n"
        "max-queued-frames = 500\nmax-frame = 4096\nmax-sessions = 600\n"
        "max-queued-bytes = 8192\nmax-unread-bytes = 16384\n"
        "load-timeout = 34\nabort-ack-timeout = 13\nconnect-retry = 0.25\n"
        "keepalive-interval = 1.5\ncurve-secret = /k/s_secret\ncurve-allow = /k/allow\n"
        "curve-servers = /k/servers\ndirectory = redis://10.1.2.3:6379/2\n"
        "directory-optional = redis://10.1.2.4:6380\ndirectory-ttl = 4.5\n"
        "directory-timeout = 0.25\n");
    FILE *f = fopen(path, "a");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "tenants = %s\n", tenants);
    fclose(f);
    //  the file names every setting: none can be left out of this test
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char text[2048];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    for (size_t i = 0; i < S_NSETTINGS; i++) {
        char line[64];
        snprintf(line, sizeof line, "\n%s = ", s_options[i]);
        ck_assert_msg(strstr(text, line) || strncmp(text, line + 1, strlen(line + 1)) == 0,
                      "the file lacks %s", s_options[i]);
    }
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, "--config", path), 0);
    s_assert_every_setting(&c);
    ck_assert_str_eq(c.tenants, tenants);
    ck_assert_uint_eq(pk_tenants_count(c.tenant_map), 2);
    ck_assert_int_eq(pk_tenants_find(c.tenant_map, "alpha"), 1);
    ck_assert_str_eq(c.curve_secret, "/k/s_secret");
    ck_assert_str_eq(c.curve_allow, "/k/allow");
    ck_assert_str_eq(c.curve_servers, "/k/servers");
    ck_assert_str_eq(c.directory, "redis://10.1.2.4:6380");     //  the later line wins
    ck_assert(c.directory_optional);
    ck_assert_double_eq(c.directory_ttl, 4.5);
    ck_assert_double_eq(c.directory_timeout, 0.25);
    pk_server_config_fini(&c);
    unlink(tenants);
}
END_TEST

//  Issue 38: a rail stall at or above the session's stall would never
//  take a rail out before the session's own stall ends the round.
START_TEST(test_rail_stall_below_stall_timeout)
{
    pk_server_config_t c;
    ck_assert_int_lt(s_parse(&c, "--rail-stall", "5"), 0);
    ck_assert_str_eq(s_err, "--rail-stall: 5 s is not below --stall-timeout (5 s): the "
                     "session's stall would end the round before the rail is taken out");
    pk_server_config_fini(&c);
    ck_assert_int_lt(s_parse(&c, "--rail-stall", "x"), 0);
    ck_assert_msg(strstr(s_err, "--rail-stall"), "%s", s_err);
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--rail-stall", "2", "--stall-timeout", "8"), 0);
    ck_assert(c.rail_stall == 2 && c.stall_timeout == 8);
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--fabric-addr", "127.0.0.1"), 0);
    ck_assert(c.rail_stall == 0);               //  a quarter of the stall, at the fabric
    pk_server_config_fini(&c);
}
END_TEST

//  Issue 13: --curve-secret and --curve-allow go together; an empty
//  value (a command line undoing a file) turns them off.
START_TEST(test_curve_takes_both_or_neither)
{
    pk_server_config_t c;
    ck_assert_int_lt(s_parse(&c, "--curve-secret", "/k/s_secret"), 0);
    ck_assert_str_eq(s_err, "--curve-secret: needs --curve-allow too (CURVE takes both or "
                     "neither)");
    pk_server_config_fini(&c);
    ck_assert_int_lt(s_parse(&c, "--curve-allow", "/k/allow"), 0);
    ck_assert_str_eq(s_err, "--curve-allow: needs --curve-secret too (CURVE takes both or "
                     "neither)");
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--curve-secret", "/k/s", "--curve-allow", "/k/a",
                             "--curve-secret", "", "--curve-allow", ""), 0);
    ck_assert_ptr_null(c.curve_secret);
    ck_assert_ptr_null(c.curve_allow);
    pk_server_config_fini(&c);
}
END_TEST

//  Issue 36: a directory URL may name several seed nodes; a connection
//  adds the nodes the Cluster names after them (bounded, no repeats).
START_TEST(test_directory_seeds)
{
    pk_dir_url_t *u = malloc(sizeof *u);
    ck_assert_ptr_nonnull(u);
    ck_assert_int_eq(pk_dir_url_parse("redis://a:1,[::1]:2,b.example:3", u, NULL), 0);
    ck_assert_uint_eq(u->nseeds, 3);
    ck_assert_uint_eq(u->nnodes, 3);
    ck_assert_str_eq(u->node[0].host, "a");
    ck_assert_int_eq(u->node[0].port, 1);
    ck_assert_str_eq(u->node[1].host, "::1");
    ck_assert_int_eq(u->node[1].port, 2);
    ck_assert_str_eq(u->node[2].host, "b.example");
    ck_assert_int_eq(u->node[2].port, 3);
    ck_assert_int_eq(u->db, 0);
    ck_assert_int_eq(pk_dir_url_parse("redis://[::1]:7,h:8/5", u, NULL), 0);
    ck_assert_uint_eq(u->nnodes, 2);
    ck_assert_int_eq(u->db, 5);
    ck_assert_int_eq(pk_dir_url_parse("redis://h:9", u, NULL), 0);
    ck_assert_uint_eq(u->nseeds, 1);
    ck_assert_int_eq(pk_dir_url_parse(NULL, NULL, NULL), -EINVAL);
    ck_assert_int_eq(pk_dir_url_parse("redis://h:9,", NULL, NULL), -EINVAL);
    //  learnt: no repeat of a seed or of another learnt node, no empty host
    pk_dir_url_learn(u, "h", 9);
    pk_dir_url_learn(u, "", 10);
    ck_assert_uint_eq(u->nnodes, 1);
    pk_dir_url_learn(u, "g", 9);
    pk_dir_url_learn(u, "g", 9);
    ck_assert_uint_eq(u->nnodes, 2);
    ck_assert_str_eq(u->node[1].host, "g");
    for (int port = 1; port <= 2 * PK_DIR_MAX_NODES; port++)
        pk_dir_url_learn(u, "many", port);
    ck_assert_uint_eq(u->nnodes, PK_DIR_MAX_NODES);
    ck_assert_uint_eq(u->nseeds, 1);
    free(u);
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, "--directory", "redis://10.0.0.1:7000,10.0.0.2:7000"), 0);
    ck_assert_str_eq(c.directory, "redis://10.0.0.1:7000,10.0.0.2:7000");
    pk_server_config_fini(&c);
}
END_TEST

//  Issue 14: --directory and --directory-optional take a redis:// URL;
//  the later one wins, an empty value turns the directory off, and a URL
//  that does not parse is refused naming the option and the form.
START_TEST(test_directory_options)
{
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, "--peer-id", "d"), 0);
    ck_assert_ptr_null(c.directory);
    ck_assert(!c.directory_optional);
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--directory", "redis://127.0.0.1:6379"), 0);
    ck_assert_str_eq(c.directory, "redis://127.0.0.1:6379");
    ck_assert(!c.directory_optional);
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--directory-optional", "redis://[::1]:7000/15"), 0);
    ck_assert_str_eq(c.directory, "redis://[::1]:7000/15");
    ck_assert(c.directory_optional);
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--directory-optional", "redis://redis.example-1.net:1",
                             "--directory", "redis://h:2/0"), 0);
    ck_assert_str_eq(c.directory, "redis://h:2/0");
    ck_assert(!c.directory_optional);
    pk_server_config_fini(&c);
    ck_assert_int_eq(s_parse(&c, "--directory", "redis://h:2", "--directory", ""), 0);
    ck_assert_ptr_null(c.directory);
    pk_server_config_fini(&c);
    const char *bad[] = { "h:6379", "redis://h", "redis://h:", "redis://:6379", "redis://h:0",
                          "redis://h:65536", "redis://h:6379/16", "redis://h:6379/x",
                          "redis://h:63a9", "http://h:6379", "redis://[::1:6379",
                          "redis://u@h:6379", "redis://h:6379/", "redis://h:1,",
                          "redis://h:1,,g:2", "redis://,h:1", "redis://h:1,g",
                          "redis://h:1,[::1]:2,g:0",
                          "redis://a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1,j:1,k:1,l:1,m:1,n:1,"
                          "o:1,p:1,q:1" };
    char msg[256];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(msg, sizeof msg, "--directory: expected redis://HOST:PORT[,HOST:PORT...][/DB] "
                 "(PORT 1..65535, DB 0..15, at most 16 nodes), got \"%s\"", bad[i]);
        s_refuse(msg, "--directory", bad[i]);
        snprintf(msg, sizeof msg, "--directory-optional: expected "
                 "redis://HOST:PORT[,HOST:PORT...][/DB] (PORT 1..65535, DB 0..15, at most 16 "
                 "nodes), got \"%s\"", bad[i]);
        s_refuse(msg, "--directory-optional", bad[i]);
    }
    //  its timeouts are seconds like every other
    ck_assert_int_eq(s_parse(&c, "--directory-ttl", "0.75", "--directory-timeout", "0.2"), 0);
    ck_assert_double_eq(c.directory_ttl, 0.75);
    ck_assert_double_eq(c.directory_timeout, 0.2);
    pk_server_config_fini(&c);
    s_refuse("--directory-ttl: expected seconds 0.001..1000000, got \"0\"", "--directory-ttl",
             "0");
    s_refuse("--directory-timeout: expected seconds 0.001..1000000, got \"1s\"",
             "--directory-timeout", "1s");
}
END_TEST

//  Issue 10: --connect-retry was parsed and documented but never reached
//  the puller's client, and the client's stall timeout was fixed at 5 s.
//  Every consumer-side setting reaches p2pkv_config_t, under its own name.
START_TEST(test_consumer_settings_reach_the_client)
{
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, "--load-timeout", "34", "--abort-ack-timeout", "13",
                             "--keepalive-interval", "1.5", "--silence-timeout", "12.25",
                             "--connect-retry", "0.25", "--stall-timeout", "6",
                             "--fingerprint", "fp-x", "--hash-seed", "99", "--provider", "efa",
                             "--fabric-addr", "10.1.2.3"),
                     0);
    p2pkv_config_t p = pk_server_config_client(&c, "node-pull");
    ck_assert_str_eq(p.peer_id, "node-pull");
    ck_assert_double_eq(p.load_timeout, 34);
    ck_assert_double_eq(p.abort_ack_timeout, 13);
    ck_assert_double_eq(p.keepalive_interval, 1.5);
    ck_assert_double_eq(p.silence_timeout, 12.25);
    ck_assert_double_eq(p.connect_retry, 0.25);
    ck_assert_double_eq(p.stall_timeout, 6);
    ck_assert_str_eq(p.fingerprint, "fp-x");
    ck_assert_str_eq(p.hash_seed, "99");
    ck_assert_str_eq(p.provider, "efa");
    ck_assert_str_eq(p.node, "10.1.2.3");
    ck_assert(p.no_reconnect);
    ck_assert(!p.progress_thread);
    ck_assert_ptr_null(p.directory);
    pk_server_config_fini(&c);
    //  the directory reaches the puller too: a pull without a server
    ck_assert_int_eq(s_parse(&c, "--directory", "redis://127.0.0.1:6379"), 0);
    p = pk_server_config_client(&c, "n");
    ck_assert_str_eq(p.directory, "redis://127.0.0.1:6379");
    pk_server_config_fini(&c);
    //  the defaults, and automatic provider and address as NULL
    ck_assert_int_eq(s_parse(&c, "--provider", "auto"), 0);
    p = pk_server_config_client(&c, "n");
    ck_assert_double_eq(p.load_timeout, 30);
    ck_assert_double_eq(p.abort_ack_timeout, 10);
    ck_assert_double_eq(p.keepalive_interval, 2);
    ck_assert_double_eq(p.silence_timeout, 10);
    ck_assert_double_eq(p.connect_retry, 0.5);
    ck_assert_double_eq(p.stall_timeout, 5);
    ck_assert_ptr_null(p.provider);
    ck_assert_ptr_null(p.node);
    pk_server_config_fini(&c);
    //  a list: the server opens each, the puller picks per remote (auto)
    ck_assert_int_eq(s_parse(&c, "--provider", "shm,tcp"), 0);
    ck_assert_str_eq(c.provider, "shm,tcp");
    p = pk_server_config_client(&c, "n");
    ck_assert_ptr_null(p.provider);
    pk_server_config_fini(&c);
}
END_TEST

//  Every session setting reaches the session configuration the node
//  gives each peer's session (pk_server_config_session), under its own
//  field; test_session and test_server_role show each one takes effect
//  in the session on a virtual clock.
START_TEST(test_session_settings_reach_the_session)
{
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, "--lookup-timeout", "0.25", "--store-timeout", "3.5",
                             "--drain-timeout", "1.75", "--silence-timeout", "12.5",
                             "--max-requests", "11", "--max-parked-keys", "22",
                             "--max-rounds", "33", "--pool-blocks", "100", "--pin-quota", "44"),
                     0);
    pk_server_session_config_t sc = pk_server_config_session(&c);
    ck_assert_double_eq(sc.role.lookup_timeout, 0.25);
    ck_assert_double_eq(sc.role.store_timeout, 3.5);
    ck_assert_double_eq(sc.role.drain_timeout, 1.75);
    ck_assert_double_eq(sc.silence_timeout, 12.5);
    ck_assert_uint_eq(sc.max_requests, 11);
    ck_assert_uint_eq(sc.max_parked_keys, 22);
    ck_assert_uint_eq(sc.max_rounds, 33);
    ck_assert_uint_eq(sc.pin_quota, 44);
    pk_server_config_fini(&c);
    //  --pin-quota 0 (the default): a quarter of the pool
    ck_assert_int_eq(s_parse(&c, "--pool-blocks", "100"), 0);
    ck_assert_uint_eq(pk_server_config_session(&c).pin_quota, 25);
    pk_server_config_fini(&c);
}
END_TEST

START_TEST(test_config_file_errors)
{
    char msg[S_ERRLEN];
    const char *path = s_file("unknown.conf", "pool-blocks = 8\n\n# x\nfoo = 1\n");
    snprintf(msg, sizeof msg, "config file %s line 4: unknown setting \"foo\"", path);
    s_refuse(msg, "--config", path);

    path = s_file("value.conf", "pool-blocks = 8\nblock-len = 64\npool-blocks = abc\n");
    snprintf(msg, sizeof msg,
             "config file %s line 3: pool-blocks: expected an integer 1..2147483648, got \"abc\"",
             path);
    s_refuse(msg, "--config", path);
    //  a value the command line overrides is still checked: the file is
    //  wrong whatever the command line says
    s_refuse(msg, "--config", path, "--pool-blocks", "8");

    path = s_file("noeq.conf", "pool-blocks 8\n");
    snprintf(msg, sizeof msg, "config file %s line 1: expected name = value, got \"pool-blocks 8\"",
             path);
    s_refuse(msg, "--config", path);

    path = s_file("dashes.conf", "--pool-blocks = 8\n");
    snprintf(msg, sizeof msg, "config file %s line 1: unknown setting \"--pool-blocks\"", path);
    s_refuse(msg, "--config", path);

    path = s_file("nested.conf", "config = other.conf\n");
    snprintf(msg, sizeof msg, "config file %s line 1: \"config\" is a command-line option only",
             path);
    s_refuse(msg, "--config", path);

    path = s_file("allow.conf", "allow = 10.0.0.0/8\nallow = 10.0.0.0/99\n");
    snprintf(msg, sizeof msg,
             "config file %s line 2: allow: prefix length out of range (0..32), got "
             "\"10.0.0.0/99\"",
             path);
    s_refuse(msg, "--config", path);

    path = s_file("nul.conf", "");
    FILE *f = fopen(path, "w");
    fwrite("peer-id = a\0b\n", 1, 14, f);
    fclose(f);
    snprintf(msg, sizeof msg, "config file %s line 1: a NUL byte", path);
    s_refuse(msg, "--config", path);

    snprintf(msg, sizeof msg, "--config: cannot open \"%s/missing.conf\": %s", s_dir,
             strerror(ENOENT));
    char missing[128];
    snprintf(missing, sizeof missing, "%s/missing.conf", s_dir);
    ck_assert_int_eq(s_refuse(msg, "--config", missing), -ENOENT);

    snprintf(msg, sizeof msg, "--config: cannot read \"%s\": %s", s_dir, strerror(EISDIR));
    ck_assert_int_eq(s_refuse(msg, "--config", s_dir), -EISDIR);

    path = s_file("ok.conf", "");
    snprintf(msg, sizeof msg, "--config: given twice (\"%s\", \"%s\")", path, path);
    s_refuse(msg, "--config", path, "--config", path);
}
END_TEST

START_TEST(test_bad_options)
{
    ck_assert_int_eq(s_refuse("unknown option \"--foo\"", "--foo"), -EINVAL);
    s_refuse("unknown option \"--foo=1\"", "--pool-blocks", "8", "--foo=1");
    s_refuse("unknown option \"-x\"", "-x");
    s_refuse("ambiguous option \"--max\"", "--max", "5");
    s_refuse("ambiguous option \"--max-r\"", "--max-r=5");
    s_refuse("--pool-blocks: missing value", "--pool-blocks");
    s_refuse("--config: missing value", "--config");
    s_refuse("--config: missing value", "-c");
    s_refuse("--help: takes no value", "--help=yes");
    s_refuse("--version: takes no value", "--version=1");
    s_refuse("unexpected argument \"serve\"", "--pool-blocks", "8", "serve");
    s_refuse("unexpected argument \"serve\"", "serve", "--pool-blocks", "8");
    //  an unambiguous abbreviation is getopt_long's usual courtesy
    pk_server_config_t c;
    ck_assert_int_eq(s_parse(&c, "--pool-b", "8", "--"), 0);
    ck_assert_uint_eq(c.pool_blocks, 8);
    pk_server_config_fini(&c);
}
END_TEST

static char *
s_captured(const char *arg, int *rc)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(out);
    pk_server_config_t c;
    //  whatever else is on the line, and in whatever state
    *rc = s_parse_out(&c, out, "--pool-blocks", "abc", arg, "--foo", (const char *) NULL);
    pk_server_config_fini(&c);
    ck_assert_int_eq(fclose(out), 0);
    return text;
}

START_TEST(test_help_and_version)
{
    int rc;
    char *text = s_captured("--help", &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_str_eq(text, pk_server_config_usage());
    ck_assert_ptr_nonnull(strstr(text, "usage: p2pkv-server"));
    free(text);
    text = s_captured("-h", &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_str_eq(text, pk_server_config_usage());
    free(text);

    char want[64];
    snprintf(want, sizeof want, "p2pkv-server %s\n", PK_VERSION);
    text = s_captured("--version", &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_str_eq(text, want);
    free(text);
    text = s_captured("-V", &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_str_eq(text, want);
    free(text);

    //  an unknown option before --help is still an error
    s_refuse("unknown option \"--foo\"", "--foo", "--help");
}
END_TEST

START_TEST(test_parse_twice)
{
    pk_server_config_t c;
    for (int round = 0; round < 3; round++) {
        ck_assert_int_eq(s_parse(&c, "--bind", "tcp://127.0.0.1:7000", "--allow", "::1",
                                 "--pool-blocks", "16"),
                         0);
        ck_assert_str_eq(c.bind, "tcp://127.0.0.1:7000");
        ck_assert_uint_eq(c.nallow, 1);
        pk_server_config_fini(&c);
        //  nothing of the previous parse survives into the next
        ck_assert_int_eq(s_parse(&c, "--max-rounds", "3"), 0);
        ck_assert_str_eq(c.bind, "tcp://*:5710");
        ck_assert_uint_eq(c.nallow, 0);
        ck_assert_uint_eq(c.pool_blocks, 1024);
        ck_assert_uint_eq(c.max_rounds, 3);
        pk_server_config_fini(&c);
        //  an error midway leaves getopt ready for the next one too
        s_refuse("--max-rounds: missing value", "--max-rounds");
        s_refuse("unknown option \"-x\"", "-x");
        ck_assert_int_eq(s_parse(&c, "-c", s_file("a.conf", "max-rounds = 4\n")), 0);
        ck_assert_uint_eq(c.max_rounds, 4);
        pk_server_config_fini(&c);
    }
}
END_TEST

//  Whether roff source names --name (each dash escaped as \-), not
//  merely a longer option that starts with it.
static bool
s_man_has(const char *man, const char *name)
{
    char needle[128] = "\\-\\-";
    for (const char *c = name; *c; c++) {
        size_t len = strlen(needle);
        if (*c == '-')
            snprintf(needle + len, sizeof needle - len, "\\-");
        else
            snprintf(needle + len, sizeof needle - len, "%c", *c);
    }
    for (const char *at = strstr(man, needle); at; at = strstr(at + 1, needle)) {
        char next = at[strlen(needle)];
        if (!(next >= 'a' && next <= 'z') && strncmp(at + strlen(needle), "\\-", 2) != 0)
            return true;
    }
    return false;
}

//  The man page's OPTIONS and --help name every option, and the man page
//  says what each default is in the help's own words.
START_TEST(test_usage_and_man_page_name_every_option)
{
    const char *srcdir = getenv("top_srcdir");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/doc/p2pkv-server.8", srcdir ? srcdir : "..");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *man = NULL;
    size_t len = 0;
    ck_assert_int_gt(getdelim(&man, &len, 0, f), 0);
    fclose(f);
    const char *usage = pk_server_config_usage();
    char needle[64];
    for (size_t i = 0; i < sizeof s_options / sizeof *s_options; i++) {
        snprintf(needle, sizeof needle, "--%s ", s_options[i]);
        ck_assert_msg(strstr(usage, needle), "--help lacks --%s", s_options[i]);
        ck_assert_msg(s_man_has(man, s_options[i]), "the man page lacks --%s", s_options[i]);
        //  and the parser knows it (config, help and version aside)
        if (i < S_NSETTINGS) {
            char opt[64];
            snprintf(opt, sizeof opt, "--%s", s_options[i]);
            pk_server_config_t c;
            char *argv[] = { "p2pkv-server", opt, NULL };
            ck_assert_int_lt(pk_server_config_parse(&c, 2, argv, stdout, s_err), 0);
            pk_server_config_fini(&c);
            snprintf(needle, sizeof needle, "--%s: missing value", s_options[i]);
            ck_assert_str_eq(s_err, needle);
        }
    }
    //  every "default ..." of --help appears in the man page
    const char *defaults[] = { "tcp://*:5710", "default 1024", "default 65536", "default 16384",
                               "default 67108864", "0.001..1000000", "1..2147483648" };
    for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) {
        ck_assert_ptr_nonnull(strstr(usage, defaults[i]));
        ck_assert_msg(strstr(man, defaults[i]), "the man page lacks \"%s\"", defaults[i]);
    }
    free(man);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("server_config");
    TCase *tc = tcase_create("server_config");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_run_dir_falls_back_to_tmp);
    tcase_add_test(tc, test_every_option);
    tcase_add_test(tc, test_derived_defaults_follow_peer_id);
    tcase_add_test(tc, test_local_mode_and_group);
    tcase_add_test(tc, test_invalid_values);
    tcase_add_test(tc, test_allow);
    tcase_add_test(tc, test_allows);
    tcase_add_test(tc, test_config_file);
    tcase_add_test(tc, test_config_file_errors);
    tcase_add_test(tc, test_every_setting_in_a_file);
    tcase_add_test(tc, test_consumer_settings_reach_the_client);
    tcase_add_test(tc, test_session_settings_reach_the_session);
    tcase_add_test(tc, test_bad_options);
    tcase_add_test(tc, test_help_and_version);
    tcase_add_test(tc, test_parse_twice);
    tcase_add_test(tc, test_usage_and_man_page_name_every_option);
    tcase_add_test(tc, test_curve_takes_both_or_neither);
    tcase_add_test(tc, test_rail_stall_below_stall_timeout);
    tcase_add_test(tc, test_directory_options);
    tcase_add_test(tc, test_directory_seeds);
    suite_add_tcase(s, tc);
    return pk_test_run("server_config", s);
}
