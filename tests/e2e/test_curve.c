/*  test_curve.c: CURVE on the control plane (issue 13), against real
    servers (tests/fixtures/daemon.c) over the tcp provider on 127.0.0.1.

    Each test makes its keys with `p2pkv keygen` in a fresh directory (the
    server's keypair, consumers' keypairs, and an allow directory holding
    copies of the allowed consumers' public certificates), starts a server
    with --curve-secret and --curve-allow, and connects consumers through
    the client library with their keys.  Waits are on conditions with
    bounds, never a sleep: a refusal must come well within the connect's
    timeout (the monitor's -EACCES), a SIGHUP's reload is waited for by
    retrying a connect until it is admitted, a revocation by polling the
    client until the server is DOWN.
*/
#include "consumer.h"
#include "daemon.h"
#include "base/clock.h"
#include "testutil.h"

#include <czmq.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK 4096

//  A test's key directory: DIR/server(_secret), DIR/alice(_secret),
//  DIR/bob(_secret), DIR/allow holding alice's public certificate.
typedef struct {
    char dir[64];
    char allow[96];
    char server_secret[96];
    zcert_t *server, *alice, *bob;
} s_keys_t;

static const char *
s_bin(const char *name)
{
    static char path[2][256];
    static int at;
    at ^= 1;
    if (streq(name, "p2pkv-server") && getenv("P2PKV_SERVER"))
        snprintf(path[at], sizeof path[at], "%s", getenv("P2PKV_SERVER"));
    else
        snprintf(path[at], sizeof path[at], "bin/%s", name);
    return path[at];
}

//  A command's exit status and what it said (stdout and stderr).
static int
s_run(const char *cmd, char *said, size_t len)
{
    char full[2048];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    ck_assert_ptr_nonnull(p);
    size_t got = fread(said, 1, len - 1, p);
    said[got] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static zcert_t *
s_keygen(const s_keys_t *k, const char *name)
{
    char cmd[512], said[512], path[160];
    snprintf(cmd, sizeof cmd, "%s keygen %s/%s", s_bin("p2pkv"), k->dir, name);
    ck_assert_msg(s_run(cmd, said, sizeof said) == 0, "%s: %s", cmd, said);
    snprintf(path, sizeof path, "%s/%s_secret", k->dir, name);
    zcert_t *cert = zcert_load(path);
    ck_assert_msg(cert != NULL, "zcert_load %s", path);
    return cert;
}

//  NAME's public certificate into DIR/allow (or out of it).
static void
s_allow(const s_keys_t *k, const char *name, bool allowed)
{
    char from[160], to[160];
    snprintf(from, sizeof from, "%s/%s", k->dir, name);
    snprintf(to, sizeof to, "%s/%s", k->allow, name);
    if (!allowed) {
        ck_assert_int_eq(unlink(to), 0);
        return;
    }
    zcert_t *cert = zcert_load(from);
    ck_assert_ptr_nonnull(cert);
    ck_assert_int_eq(zcert_save_public(cert, to), 0);
    zcert_destroy(&cert);
}

static void
s_keys_new(s_keys_t *k)
{
    memset(k, 0, sizeof *k);
    snprintf(k->dir, sizeof k->dir, "/tmp/p2pkv-curve-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(k->dir));
    snprintf(k->allow, sizeof k->allow, "%s/allow", k->dir);
    ck_assert_int_eq(mkdir(k->allow, 0700), 0);
    snprintf(k->server_secret, sizeof k->server_secret, "%s/server_secret", k->dir);
    k->server = s_keygen(k, "server");
    k->alice = s_keygen(k, "alice");
    k->bob = s_keygen(k, "bob");
    s_allow(k, "alice", true);
}

static void
s_keys_destroy(s_keys_t *k)
{
    zcert_destroy(&k->server);
    zcert_destroy(&k->alice);
    zcert_destroy(&k->bob);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", k->dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void
s_start(td_t *s, const s_keys_t *k, int log_fd)
{
    td_start_logged(s, (const char *const[]) { "--curve-secret", k->server_secret,
                                               "--curve-allow", k->allow, "--log-level", "info",
                                               NULL }, log_fd);
}

//  A consumer with me's keypair (NULL: no CURVE) for server's key.
static p2pkv_client_t *
s_client(const char *id, zcert_t *me, zcert_t *server, bool progress, p2pkv_callbacks_t cb)
{
    char err[P2PKV_ERRLEN];
    p2pkv_config_t cfg = { .peer_id = id, .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .connect_retry = 0.1,
                           .progress_thread = progress };
    if (me) {
        cfg.curve_public = zcert_public_txt(me);
        cfg.curve_secret = zcert_secret_txt(me);
        cfg.curve_server = zcert_public_txt(server);
    }
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 8, BLOCK, cb, err);
    ck_assert_msg(c != NULL, "p2pkv_client_new: %s", err);
    return c;
}

static json_int_t
s_metric(td_t *s, const char *family, const char *label_set, const char *label)
{
    json_t *st = td_stats_json(s);
    json_t *f = json_object_get(json_object_get(st, "metrics"), family);
    json_t *v = label ? json_object_get(json_object_get(f, label_set), label)
                      : json_object_get(f, "total");
    json_int_t n = json_integer_value(v);
    json_decref(st);
    return n;
}

//  The metric once it reached at least n (the server counts a refusal on
//  its own thread, maybe after the client saw it), within 10 s.
static json_int_t
s_metric_reaches(td_t *s, const char *family, const char *label_set, const char *label,
                 json_int_t n)
{
    double deadline = pk_clock_monotonic() + 10;
    json_int_t v;
    while ((v = s_metric(s, family, label_set, label)) < n && pk_clock_monotonic() < deadline)
        zclock_sleep(20);
    return v;
}

//  A block published on the server; its key is the SHA-256 of data.
static void
s_publish(td_t *s, uint8_t raw[32], uint8_t data[BLOCK])
{
    randombytes_buf(data, BLOCK);
    crypto_hash_sha256(raw, data, BLOCK);
    p2pkv_key_t key = { raw, 32 };
    td_put(td_api(s), &key, data, 1, BLOCK);
}

//  Issue 13, tenants by CURVE key: --tenants maps alice to alpha and bob
//  to beta; carol (allowed, not in the file) is in shared only.  A key
//  held only by the other tenant is a miss, exactly as an absent one; the
//  same key held by both lands each tenant's own bytes; nothing of beta is
//  pinned by alice's lookups.
static void
s_put_ns(td_t *s, const char *ns, const uint8_t key[32], uint8_t data[BLOCK])
{
    p2pkv_engine_t *e = td_engine_open(s, NULL, NULL);
    char err[P2PKV_ERRLEN];
    ck_assert_msg(p2pkv_engine_set_namespace(e, ns, err) == 0, "%s", err);
    randombytes_buf(data, BLOCK);
    p2pkv_key_t k = { key, 32 };
    td_put(e, &k, data, 1, BLOCK);
    p2pkv_engine_close(&e);
}

//  Which of keys the server holds for this consumer (a get without fetch),
//  as a string of h and m; and with fetch, key 0's bytes into block 0.
static void
s_tenant_sees(td_t *s, const char *id, zcert_t *me, zcert_t *server, const uint8_t (*keys)[32],
              const char *want, const uint8_t *k1_data)
{
    p2pkv_client_t *c = s_client(id, me, server, false, (p2pkv_callbacks_t) { 0 });
    char err[P2PKV_ERRLEN];
    int srv = p2pkv_client_connect(c, s->endpoint, 10, err);
    ck_assert_msg(srv >= 0, "%s: connect: %s", id, err);
    p2pkv_key_t k[4];
    uint32_t dest[4] = { 0, 1, 2, 3 };
    bool held[4] = { false };
    for (int i = 0; i < 4; i++)
        k[i] = (p2pkv_key_t) { keys[i], 32 };
    ck_assert_int_ge(p2pkv_client_get(c, srv, "look", k, dest, 4, false, 10, held, NULL, NULL,
                                      err), 0);
    char saw[5];
    for (int i = 0; i < 4; i++)
        saw[i] = held[i] ? 'h' : 'm';
    saw[4] = 0;
    ck_assert_msg(streq(saw, want), "%s sees %s, want %s", id, saw, want);
    if (k1_data) {
        bool landed = false;
        ck_assert_int_eq(p2pkv_client_get(c, srv, "get", k, dest, 1, true, 10, &landed, NULL,
                                          NULL, err), 1);
        ck_assert_mem_eq(p2pkv_client_pool(c), k1_data, BLOCK);
    }
    p2pkv_client_destroy(&c);
}

START_TEST(test_tenants_by_curve_key)
{
    s_keys_t k;
    s_keys_new(&k);
    s_allow(&k, "bob", true);
    zcert_t *carol = s_keygen(&k, "carol");
    s_allow(&k, "carol", true);
    char tenants[128];
    snprintf(tenants, sizeof tenants, "%s/tenants", k.dir);
    FILE *f = fopen(tenants, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s alpha\n%s beta\n", zcert_public_txt(k.alice), zcert_public_txt(k.bob));
    fclose(f);
    td_t s;
    td_start(&s, (const char *const[]) { "--curve-secret", k.server_secret, "--curve-allow",
                                         k.allow, "--tenants", tenants, NULL });
    uint8_t keys[4][32], x[BLOCK], y[BLOCK], other[BLOCK];
    for (int i = 0; i < 4; i++)
        memset(keys[i], 0x10 + i, 32);
    s_put_ns(&s, "alpha", keys[0], x);          //  k1 in alpha: X
    s_put_ns(&s, "beta", keys[1], other);       //  k2 in beta only
    s_put_ns(&s, "beta", keys[0], y);           //  k1 in beta too: Y
    s_put_ns(&s, "shared", keys[2], other);     //  k3 shared; k4 nowhere
    s_tenant_sees(&s, "alice", k.alice, k.server, (const uint8_t (*)[32]) keys, "hmhm", x);
    json_t *st = td_stats_json(&s);
    json_t *ns = json_object_get(st, "namespaces");
    ck_assert_msg(ns != NULL, "stats has no namespaces");
    json_t *beta = json_object_get(ns, "beta"), *alpha = json_object_get(ns, "alpha");
    ck_assert_msg(beta && alpha, "stats names no alpha or beta namespace");
    ck_assert_int_eq(json_integer_value(json_object_get(beta, "pinned")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(beta, "lookups")), 0);
    ck_assert_int_ge(json_integer_value(json_object_get(alpha, "lookups")), 4);
    json_decref(st);
    s_tenant_sees(&s, "bob", k.bob, k.server, (const uint8_t (*)[32]) keys, "hhhm", y);
    s_tenant_sees(&s, "carol", carol, k.server, (const uint8_t (*)[32]) keys, "mmhm", NULL);
    zcert_destroy(&carol);
    ck_assert_int_eq(td_stop(&s), 0);
    s_keys_destroy(&k);
}
END_TEST

//  --------------------------------------------------------------------------

//  An allowed key describes the server, connects and fetches a block whose
//  bytes arrive whole; the session is counted under its peer id.
START_TEST(test_allowed_key_fetches)
{
    s_keys_t k;
    s_keys_new(&k);
    td_t s;
    s_start(&s, &k, -1);
    uint8_t raw[32], data[BLOCK];
    s_publish(&s, raw, data);
    char err[P2PKV_ERRLEN];
    p2pkv_description_t d;
    p2pkv_config_t keys = { .curve_public = zcert_public_txt(k.alice),
                            .curve_secret = zcert_secret_txt(k.alice),
                            .curve_server = zcert_public_txt(k.server) };
    ck_assert_msg(p2pkv_describe_curve(s.endpoint, 10, &keys, &d, err) == 0, "%s", err);
    ck_assert_uint_eq(d.block_len, BLOCK);
    p2pkv_client_t *c = s_client("alice", k.alice, k.server, false, (p2pkv_callbacks_t) { 0 });
    int server = p2pkv_client_connect(c, s.endpoint, 10, err);
    ck_assert_msg(server >= 0, "connect: %s", err);
    p2pkv_key_t key = { raw, 32 };
    uint32_t dest = 3;
    bool landed = false;
    int got = p2pkv_client_get(c, server, "kv", &key, &dest, 1, true, 10, &landed, NULL, NULL,
                               err);
    ck_assert_msg(got == 1 && landed, "get: %d %s", got, err);
    ck_assert_mem_eq(p2pkv_client_pool(c) + 3 * BLOCK, data, BLOCK);
    p2pkv_client_destroy(&c);
    ck_assert_int_eq(td_stop(&s), 0);
    s_keys_destroy(&k);
}
END_TEST

//  A key not in --curve-allow: connect fails with -EACCES well within its
//  timeout, naming the refusal; no session opened; the refusal is counted
//  by reason, and logged once however many attempts (rate-limited).
START_TEST(test_unknown_key_refused)
{
    s_keys_t k;
    s_keys_new(&k);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    td_t s;
    s_start(&s, &k, p[1]);
    close(p[1]);
    char err[P2PKV_ERRLEN];
    for (int i = 0; i < 3; i++) {
        p2pkv_client_t *c = s_client("bob", k.bob, k.server, false, (p2pkv_callbacks_t) { 0 });
        double t0 = pk_clock_monotonic();
        int rc = p2pkv_client_connect(c, s.endpoint, 10, err);
        double took = pk_clock_monotonic() - t0;
        ck_assert_msg(rc == -EACCES, "connect: %d %s", rc, err);
        ck_assert_msg(strstr(err, "the server refused our CURVE key"), "%s", err);
        ck_assert_msg(took < 5, "refused after %.1f s: a timeout, not a refusal", took);
        p2pkv_client_destroy(&c);
    }
    p2pkv_description_t d;
    p2pkv_config_t keys = { .curve_public = zcert_public_txt(k.bob),
                            .curve_secret = zcert_secret_txt(k.bob),
                            .curve_server = zcert_public_txt(k.server) };
    ck_assert_int_eq(p2pkv_describe_curve(s.endpoint, 10, &keys, &d, err), -EACCES);
    ck_assert_int_ge(s_metric_reaches(&s, "p2pkv_connections_refused_total", "reasons",
                                      "unknown_key", 4), 4);
    ck_assert_int_eq(s_metric(&s, "p2pkv_sessions_opened_total", NULL, NULL), 0);
    ck_assert_int_eq(td_stop(&s), 0);
    char *log = td_read_log(p[0]);
    char line[128];
    snprintf(line, sizeof line, "CURVE key %s at 127.0.0.1 refused (unknown_key)",
             zcert_public_txt(k.bob));
    const char *first = strstr(log, line);
    ck_assert_msg(first, "no refusal line:\n%s", log);
    ck_assert_msg(!strstr(first + 1, line), "a line per attempt:\n%s", log);
    free(log);
    s_keys_destroy(&k);
}
END_TEST

//  One side with CURVE, the other without: refused at once either way,
//  saying which; the CURVE server counts it (as "mechanism", or
//  "handshake" when the client hung up first).
START_TEST(test_curve_on_one_side_only)
{
    s_keys_t k;
    s_keys_new(&k);
    td_t s, plain;
    s_start(&s, &k, -1);
    td_start(&plain, NULL);
    char err[P2PKV_ERRLEN];
    p2pkv_client_t *c = s_client("nocurve", NULL, NULL, false, (p2pkv_callbacks_t) { 0 });
    ck_assert_int_eq(p2pkv_client_connect(c, s.endpoint, 10, err), -EACCES);
    ck_assert_msg(strstr(err, "the server requires CURVE"), "%s", err);
    //  said at once, not after the timeout (which would be -ETIMEDOUT)
    p2pkv_description_t d;
    ck_assert_int_eq(p2pkv_describe(s.endpoint, 60, &d, err), -EACCES);
    ck_assert_msg(strstr(err, s.endpoint) && strstr(err, "the server requires CURVE"), "%s",
                  err);
    p2pkv_client_destroy(&c);
    c = s_client("alice", k.alice, k.server, false, (p2pkv_callbacks_t) { 0 });
    ck_assert_int_eq(p2pkv_client_connect(c, plain.endpoint, 10, err), -EACCES);
    ck_assert_msg(strstr(err, "the server does not use CURVE"), "%s", err);
    p2pkv_client_destroy(&c);
    //  mechanism, or handshake when the client, having seen the server's
    //  greeting first, closed before the server read its own
    double deadline = pk_clock_monotonic() + 10;
    json_int_t n = 0;
    while ((n = s_metric(&s, "p2pkv_connections_refused_total", "reasons", "mechanism")
                + s_metric(&s, "p2pkv_connections_refused_total", "reasons", "handshake")) < 1
           && pk_clock_monotonic() < deadline)
        zclock_sleep(20);
    ck_assert_int_ge(n, 1);
    ck_assert_int_eq(td_stop(&plain), 0);
    ck_assert_int_eq(td_stop(&s), 0);
    s_keys_destroy(&k);
}
END_TEST

typedef struct {
    int state;
    char reason[P2PKV_ERRLEN];
} s_watch_t;

static void
s_on_server(void *arg, int server, p2pkv_server_state_t state, const char *reason)
{
    s_watch_t *w = arg;
    w->state = (int) state;
    snprintf(w->reason, sizeof w->reason, "%s", reason);
}

//  A connect retried until the reload admits it (bounded): the SIGHUP's
//  reload is done once it is.
static int
s_connect_until(p2pkv_client_t *c, const char *endpoint, double bound, char *err)
{
    double deadline = pk_clock_monotonic() + bound;
    int rc;
    do
        rc = p2pkv_client_connect(c, endpoint, 2, err);
    while (rc == -EACCES && pk_clock_monotonic() < deadline);
    return rc;
}

//  SIGHUP: bob's certificate added is admitted (no restart); alice's
//  removed ends her live session (DOWN, "revoked"), counted, and she is
//  refused from then on.
START_TEST(test_sighup_adds_and_revokes)
{
    s_keys_t k;
    s_keys_new(&k);
    td_t s;
    s_start(&s, &k, -1);
    char err[P2PKV_ERRLEN];
    s_watch_t w = { -1, "" };
    p2pkv_client_t *alice = s_client("alice", k.alice, k.server, true,
                                     (p2pkv_callbacks_t) { .arg = &w, .on_server = s_on_server });
    ck_assert_msg(p2pkv_client_connect(alice, s.endpoint, 10, err) >= 0, "%s", err);
    p2pkv_client_t *bob = s_client("bob", k.bob, k.server, false, (p2pkv_callbacks_t) { 0 });
    ck_assert_int_eq(p2pkv_client_connect(bob, s.endpoint, 10, err), -EACCES);
    s_allow(&k, "bob", true);
    ck_assert_int_eq(kill(s.pid, SIGHUP), 0);
    int rc = s_connect_until(bob, s.endpoint, 10, err);
    ck_assert_msg(rc >= 0, "bob not admitted after SIGHUP: %s", err);
    p2pkv_client_destroy(&bob);
    s_allow(&k, "alice", false);
    ck_assert_int_eq(kill(s.pid, SIGHUP), 0);
    double deadline = pk_clock_monotonic() + 10;
    while (w.state != P2PKV_SERVER_DOWN && w.state != P2PKV_SERVER_STOPPED
           && pk_clock_monotonic() < deadline)
        zclock_sleep(10);
    ck_assert_msg(w.state == P2PKV_SERVER_DOWN, "alice's session still %d", w.state);
    ck_assert_msg(strstr(w.reason, "revoked"), "DOWN for: %s", w.reason);
    ck_assert_int_eq(s_metric_reaches(&s, "p2pkv_sessions_revoked_total", NULL, NULL, 1), 1);
    p2pkv_client_destroy(&alice);
    alice = s_client("alice", k.alice, k.server, false, (p2pkv_callbacks_t) { 0 });
    ck_assert_int_eq(p2pkv_client_connect(alice, s.endpoint, 10, err), -EACCES);
    p2pkv_client_destroy(&alice);
    ck_assert_int_eq(td_stop(&s), 0);
    s_keys_destroy(&k);
}
END_TEST

//  Bad --curve-secret or --curve-allow: the start is refused, naming the
//  file or directory and what is wrong with it.
START_TEST(test_bad_curve_options_at_start)
{
    s_keys_t k;
    s_keys_new(&k);
    char junk[160], pub[160];
    snprintf(junk, sizeof junk, "%s/junk", k.dir);
    snprintf(pub, sizeof pub, "%s/server", k.allow);
    FILE *f = fopen(junk, "w");
    ck_assert_ptr_nonnull(f);
    fputs("\x01\x02 not a certificate\n", f);
    fclose(f);
    ck_assert_int_eq(zcert_save_public(k.server, pub), 0);
    const struct { const char *secret, *allow, *said; } cases[] = {
        { "/nonexistent/s_secret", k.allow, "--curve-secret /nonexistent/s_secret: No such file" },
        { junk, k.allow, "not a czmq certificate" },
        { pub, k.allow, "no secret key in it" },
        { k.server_secret, junk, "not a directory" },
        { k.server_secret, "/nonexistent", "--curve-allow /nonexistent: No such file" },
        { k.server_secret, NULL, "--curve-secret: needs --curve-allow too" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1024], said[2048];
        snprintf(cmd, sizeof cmd, "%s --bind tcp://127.0.0.1:0 --curve-secret '%s'%s%s%s",
                 s_bin("p2pkv-server"), cases[i].secret, cases[i].allow ? " --curve-allow '" : "",
                 cases[i].allow ? cases[i].allow : "", cases[i].allow ? "'" : "");
        int status = s_run(cmd, said, sizeof said);
        ck_assert_msg(status != 0 && strstr(said, cases[i].said), "case %zu: status %d: %s", i,
                      status, said);
    }
    s_keys_destroy(&k);
}
END_TEST

//  keygen: two certificates zcert_load reads, the secret one 0600, the
//  endpoint in the metadata when asked; never overwritten.
START_TEST(test_keygen)
{
    s_keys_t k;
    s_keys_new(&k);
    char path[160], cmd[512], said[512];
    snprintf(path, sizeof path, "%s/alice_secret", k.dir);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    snprintf(path, sizeof path, "%s/alice", k.dir);
    zcert_t *pub = zcert_load(path);
    ck_assert_ptr_nonnull(pub);
    ck_assert_str_eq(zcert_public_txt(pub), zcert_public_txt(k.alice));
    zcert_destroy(&pub);
    snprintf(cmd, sizeof cmd, "%s keygen %s", s_bin("p2pkv"), path);
    ck_assert_int_eq(s_run(cmd, said, sizeof said), 2);
    ck_assert_msg(strstr(said, "exists: not overwritten"), "%s", said);
    zcert_t *again = zcert_load(path);
    ck_assert_str_eq(zcert_public_txt(again), zcert_public_txt(k.alice));
    zcert_destroy(&again);
    snprintf(cmd, sizeof cmd, "%s keygen --endpoint tcp://10.0.0.1:5710 %s/srv", s_bin("p2pkv"),
             k.dir);
    ck_assert_int_eq(s_run(cmd, said, sizeof said), 0);
    snprintf(path, sizeof path, "%s/srv", k.dir);
    zcert_t *srv = zcert_load(path);
    ck_assert_str_eq(zcert_meta(srv, "endpoint"), "tcp://10.0.0.1:5710");
    zcert_destroy(&srv);
    s_keys_destroy(&k);
}
END_TEST

//  p2pkv get --curve-secret --server-key: the block written to DIR/KEY;
//  without the keys, refused.
START_TEST(test_cli_get_with_curve)
{
    s_keys_t k;
    s_keys_new(&k);
    td_t s;
    s_start(&s, &k, -1);
    uint8_t raw[32], data[BLOCK];
    s_publish(&s, raw, data);
    char hex[65], cmd[1024], said[2048], out[160];
    sodium_bin2hex(hex, sizeof hex, raw, 32);
    snprintf(cmd, sizeof cmd, "%s get --server %s --timeout 10 -o %s --curve-secret %s/alice_secret "
             "--server-key %s/server %s", s_bin("p2pkv"), s.endpoint, k.dir, k.dir, k.dir, hex);
    ck_assert_msg(s_run(cmd, said, sizeof said) == 0, "%s", said);
    snprintf(out, sizeof out, "%s/%s", k.dir, hex);
    FILE *f = fopen(out, "rb");
    ck_assert_ptr_nonnull(f);
    uint8_t back[BLOCK];
    ck_assert_uint_eq(fread(back, 1, BLOCK, f), BLOCK);
    fclose(f);
    ck_assert_mem_eq(back, data, BLOCK);
    snprintf(cmd, sizeof cmd, "%s get --server %s --timeout 10 -o %s %s", s_bin("p2pkv"),
             s.endpoint, k.dir, hex);
    ck_assert_int_eq(s_run(cmd, said, sizeof said), 2);
    ck_assert_msg(strstr(said, "requires CURVE"), "%s", said);
    ck_assert_int_eq(td_stop(&s), 0);
    s_keys_destroy(&k);
}
END_TEST

//  --curve-servers: server a, with its own keypair allowed by server b and
//  b's certificate (its endpoint in the metadata) in a's --curve-servers,
//  pulls a block from b; a pull from a server a has no key for fails,
//  saying so, rather than going in the clear.
START_TEST(test_pull_between_curve_servers)
{
    s_keys_t k;
    s_keys_new(&k);
    zcert_t *a_cert = s_keygen(&k, "a");
    s_allow(&k, "a", true);
    td_t a, b;
    s_start(&b, &k, -1);
    char servers[128], path[160], a_secret[128];
    snprintf(servers, sizeof servers, "%s/servers", k.dir);
    ck_assert_int_eq(mkdir(servers, 0700), 0);
    snprintf(path, sizeof path, "%s/b", servers);
    zcert_t *b_pub = zcert_new_from(zcert_public_key(k.server), zcert_secret_key(k.server));
    zcert_set_meta(b_pub, "endpoint", "%s", b.endpoint);
    ck_assert_int_eq(zcert_save_public(b_pub, path), 0);
    zcert_destroy(&b_pub);
    snprintf(a_secret, sizeof a_secret, "%s/a_secret", k.dir);
    td_start(&a, (const char *const[]) { "--curve-secret", a_secret, "--curve-allow", k.allow,
                                         "--curve-servers", servers, NULL });
    uint8_t raw[32], data[BLOCK];
    s_publish(&b, raw, data);
    p2pkv_engine_t *ea = td_engine_open(&a, NULL, NULL);
    p2pkv_key_t key = { raw, 32 };
    char err[P2PKV_ERRLEN] = "";
    uint64_t id = 0;
    size_t fetching = 0;
    bool present = false;
    ck_assert_msg(p2pkv_engine_pull(ea, b.endpoint, &key, 1, &id, &fetching, &present, err) == 0,
                  "%s", err);
    p2pkv_engine_event_t ev;
    ck_assert_int_eq(p2pkv_engine_next_event(ea, 30, &ev), 0);
    ck_assert_msg(ev.kind == P2PKV_EVENT_PULL && ev.success && ev.landed == 1, "pull: %s",
                  ev.reason);
    uint8_t other[32];
    randombytes_buf(other, sizeof other);
    key = (p2pkv_key_t) { other, 32 };
    ck_assert_int_eq(p2pkv_engine_pull(ea, "tcp://127.0.0.1:9", &key, 1, &id, &fetching,
                                       &present, err), 0);
    ck_assert_int_eq(p2pkv_engine_next_event(ea, 30, &ev), 0);
    ck_assert_msg(ev.kind == P2PKV_EVENT_PULL && !ev.success
                  && strstr(ev.reason, "no CURVE key for tcp://127.0.0.1:9"), "pull: %s",
                  ev.reason);
    p2pkv_engine_close(&ea);
    ck_assert_int_eq(td_stop(&a), 0);
    ck_assert_int_eq(td_stop(&b), 0);
    zcert_destroy(&a_cert);
    s_keys_destroy(&k);
}
END_TEST

//  Another allowed key taking a session's routing id over (ROUTER
//  handover): its frame carries another User-Id, which ends the session
//  (violation), counted as key_changed; the frame reaches no one.
START_TEST(test_routing_id_under_another_key_ends_the_session)
{
    s_keys_t k;
    s_keys_new(&k);
    s_allow(&k, "bob", true);
    td_t s;
    s_start(&s, &k, -1);
    tc_t *tc = tc_new(&(tc_config_t) { s.endpoint, "alice", 8, BLOCK, "fp", "7", 0 });
    tc_set_curve(tc, zcert_public_txt(k.alice), zcert_secret_txt(k.alice),
                 zcert_public_txt(k.server));
    pk_msg_t *ack = tc_connect(tc, 10);
    ck_assert_msg(ack && ack->type == PK_MSG_CONNECT_ACK, "alice not connected");
    pk_msg_destroy(&ack);
    uint8_t rid[64];
    size_t rlen = tc_routing_id(tc, rid);
    zsock_t *bob = zsock_new(ZMQ_DEALER);
    zmq_setsockopt(zsock_resolve(bob), ZMQ_ROUTING_ID, rid, rlen);
    zcert_apply(k.bob, bob);
    zsock_set_curve_serverkey(bob, zcert_public_txt(k.server));
    ck_assert_int_eq(zsock_connect(bob, "%s", s.endpoint), 0);
    const char ping[] = "{\"type\":\"ping\"}";
    ck_assert_int_eq(zsock_send(bob, "b", ping, sizeof ping - 1), 0);
    ck_assert_int_ge(s_metric_reaches(&s, "p2pkv_connections_refused_total", "reasons",
                                      "key_changed", 1), 1);
    ck_assert_int_ge(s_metric_reaches(&s, "p2pkv_sessions_retired_total", NULL, NULL, 1), 1);
    zsock_destroy(&bob);
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
    s_keys_destroy(&k);
}
END_TEST

//  p2pkv_client_new refuses a partial set, bad Z85 and a public key that
//  is not the secret key's, naming the field (no server needed).
START_TEST(test_client_config_keys_checked)
{
    zcert_t *a = zcert_new(), *b = zcert_new();
    const char *pa = zcert_public_txt(a), *sa = zcert_secret_txt(a), *pb = zcert_public_txt(b);
    const struct { const char *pub, *sec, *srv, *said; } cases[] = {
        { pa, sa, NULL, "curve_server: missing" },
        { NULL, sa, pb, "curve_public: missing" },
        { pa, "short", pb, "curve_secret: expected a Z85 key" },
        { pa, sa, "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~", "curve_server: expected a Z85 key" },
        { pb, sa, pb, "curve_public: not the public key of curve_secret" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[P2PKV_ERRLEN] = "";
        p2pkv_config_t cfg = { .peer_id = "x", .provider = "tcp", .curve_public = cases[i].pub,
                               .curve_secret = cases[i].sec, .curve_server = cases[i].srv };
        p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 1, BLOCK, (p2pkv_callbacks_t) { 0 }, err);
        ck_assert_msg(!c && strstr(err, cases[i].said), "case %zu: %s", i, err);
    }
    zcert_destroy(&a);
    zcert_destroy(&b);
}
END_TEST

int
main(void)
{
    int skip = td_suite_start();
    if (skip)
        return skip;
    td_sweep();
    Suite *s = suite_create("curve");
    TCase *tc = td_case(s, "curve", 60);
    tcase_add_test(tc, test_client_config_keys_checked);
    tcase_add_test(tc, test_keygen);
    tcase_add_test(tc, test_bad_curve_options_at_start);
    tcase_add_test(tc, test_allowed_key_fetches);
    tcase_add_test(tc, test_unknown_key_refused);
    tcase_add_test(tc, test_curve_on_one_side_only);
    tcase_add_test(tc, test_sighup_adds_and_revokes);
    tcase_add_test(tc, test_cli_get_with_curve);
    tcase_add_test(tc, test_pull_between_curve_servers);
    tcase_add_test(tc, test_routing_id_under_another_key_ends_the_session);
    tcase_add_test(tc, test_tenants_by_curve_key);
    return pk_test_run("curve", s);
}
