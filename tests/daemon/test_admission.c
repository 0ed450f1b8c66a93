/*  test_admission.c: admission (lib/daemon/admission.c) alone, without a
    server: the ZAP answers for an allowed CURVE key, an unknown one, one
    revoked by a reload, a client without CURVE and an address outside
    --allow, each refusal counted under its reason.  */
#include "daemon/admission.h"
#include "testutil.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char dir[64], allow[96], secret[128];
    zcert_t *server, *alice, *bob;
    pk_server_config_t config;
    pk_metrics_t *metrics;
    pk_admission_t *admission;
} s_world_t;

static void
s_save_public(zcert_t *cert, const char *dir, const char *name)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(zcert_save_public(cert, path), 0);
}

static void
s_world_new(s_world_t *w)
{
    memset(w, 0, sizeof *w);
    snprintf(w->dir, sizeof w->dir, "/tmp/p2pkv-admission-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(w->dir));
    snprintf(w->allow, sizeof w->allow, "%s/allow", w->dir);
    ck_assert_int_eq(mkdir(w->allow, 0700), 0);
    snprintf(w->secret, sizeof w->secret, "%s/server", w->dir);
    w->server = zcert_new();
    w->alice = zcert_new();
    w->bob = zcert_new();
    ck_assert_int_eq(zcert_save(w->server, w->secret), 0);
    s_save_public(w->alice, w->allow, "alice");
    s_save_public(w->bob, w->allow, "bob");
    char secret_file[160];
    snprintf(secret_file, sizeof secret_file, "%s_secret", w->secret);
    char *argv[] = { "p2pkv-server", "--curve-secret", secret_file, "--curve-allow", w->allow,
                     "--allow", "127.0.0.0/8", "--log-level", "error", NULL };
    char err[PK_ERRLEN];
    ck_assert_msg(pk_server_config_parse(&w->config, 9, argv, NULL, err) == 0, "%s", err);
    w->metrics = pk_metrics_new();
    int rc;
    w->admission = pk_admission_new(&w->config, w->metrics, &rc, err);
    ck_assert_msg(w->admission != NULL, "%s", err);
}

static void
s_world_destroy(s_world_t *w)
{
    pk_admission_destroy(&w->admission);
    ck_assert_ptr_null(w->admission);
    pk_metrics_destroy(&w->metrics);
    pk_server_config_fini(&w->config);
    zcert_destroy(&w->server);
    zcert_destroy(&w->alice);
    zcert_destroy(&w->bob);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", w->dir);
    ck_assert_int_eq(system(cmd), 0);
}

//  The status code ZAP answers for a client at address with cert (NULL:
//  no CURVE), and what the answer names as its User-Id into user.
static char *
s_zap(s_world_t *w, const char *address, zcert_t *cert, char *user, size_t cap)
{
    zmsg_t *req = zmsg_new();
    zmsg_addstr(req, "1.0");
    zmsg_addstr(req, "7");
    zmsg_addstr(req, "p2pkv");
    zmsg_addstr(req, address);
    zmsg_addstr(req, "");
    zmsg_addstr(req, cert ? "CURVE" : "NULL");
    if (cert)
        zmsg_addmem(req, zcert_public_key(cert), 32);
    zmsg_t *rep = pk_admission_zap(w->admission, req);
    ck_assert_uint_eq(zmsg_size(rep), 6);
    char *version = zmsg_popstr(rep), *id = zmsg_popstr(rep), *code = zmsg_popstr(rep);
    char *text = zmsg_popstr(rep), *who = zmsg_popstr(rep);
    ck_assert_str_eq(version, "1.0");
    ck_assert_str_eq(id, "7");
    snprintf(user, cap, "%s", who);
    zstr_free(&version);
    zstr_free(&id);
    zstr_free(&text);
    zstr_free(&who);
    zmsg_destroy(&rep);
    return code;
}

static void
s_expect(s_world_t *w, const char *address, zcert_t *cert, const char *want)
{
    char user[64];
    char *code = s_zap(w, address, cert, user, sizeof user);
    ck_assert_str_eq(code, want);
    if (streq(want, "200"))
        ck_assert_str_eq(user, zcert_public_txt(cert));
    zstr_free(&code);
}

//  p2pkv_connections_refused_total{reason=REASON}, as exposed.
static double
s_refused(s_world_t *w, const char *reason)
{
    char *text, line[128];
    ck_assert_int_eq(pk_metrics_render(w->metrics, &text, NULL), 0);
    snprintf(line, sizeof line, "\np2pkv_connections_refused_total{reason=\"%s\"} ", reason);
    const char *at = strstr(text, line);
    double v = at ? strtod(at + strlen(line), NULL) : 0;
    free(text);
    return v;
}

START_TEST(test_admits_and_refuses_a_key)
{
    s_world_t w;
    s_world_new(&w);
    ck_assert(pk_admission_curve(w.admission));
    ck_assert(pk_admission_zap_needed(w.admission));
    ck_assert(pk_admission_admits(w.admission, zcert_public_txt(w.alice)));
    ck_assert(!pk_admission_admits(w.admission, zcert_public_txt(w.server)));
    s_expect(&w, "127.0.0.1", w.alice, "200");
    zcert_t *stranger = zcert_new();
    s_expect(&w, "127.0.0.1", stranger, "400");
    ck_assert(s_refused(&w, "unknown_key") == 1);
    s_expect(&w, "127.0.0.1", NULL, "400");
    ck_assert(s_refused(&w, "mechanism") == 1);
    s_expect(&w, "10.1.2.3", w.alice, "400");              //  outside --allow
    ck_assert(s_refused(&w, "address") == 1);
    zcert_destroy(&stranger);
    s_world_destroy(&w);
}
END_TEST

//  A reload without bob's certificate revokes bob (the caller ends his
//  sessions), alice stays; bob is then refused as revoked.
START_TEST(test_reload_revokes)
{
    s_world_t w;
    s_world_new(&w);
    char path[160];
    snprintf(path, sizeof path, "%s/bob", w.allow);
    ck_assert_int_eq(unlink(path), 0);
    pk_admission_reload_t r;
    ck_assert_int_eq(pk_admission_reload(w.admission, &r), 0);
    ck_assert(r.curve);
    ck_assert_uint_eq(r.allowed, 1);
    ck_assert_uint_eq(r.revoked, 1);
    ck_assert_uint_eq(r.added, 0);
    ck_assert(!pk_admission_admits(w.admission, zcert_public_txt(w.bob)));
    ck_assert_str_eq(pk_admission_refusal(w.admission, zcert_public_txt(w.bob)), "revoked");
    s_expect(&w, "127.0.0.1", w.bob, "400");
    ck_assert(s_refused(&w, "revoked") == 1);
    s_expect(&w, "127.0.0.1", w.alice, "200");
    s_world_destroy(&w);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("admission");
    TCase *tc = tcase_create("admission");
    tcase_add_test(tc, test_admits_and_refuses_a_key);
    tcase_add_test(tc, test_reload_revokes);
    suite_add_tcase(s, tc);
    return pk_test_run("admission", s);
}
