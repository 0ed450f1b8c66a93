/*  test_tenants.c: tenant namespaces (--tenants).

    Unit level: the file's map from CURVE key (real Z85 keys from
    zmq_curve_keypair) to namespace, its errors and its reload; the
    store's namespaced index, where a key of another namespace and an
    absent key go through the same probes and counters and pin nothing.
    End to end, against real servers: engines publishing into alpha, beta
    and shared, a keyless consumer (CURVE is off here: the file's `*` line
    puts it in alpha) seeing alpha and shared only, its pins released,
    the stats and metrics per namespace, prefill stores refused across
    namespaces, the CLI's put --namespace, bad files refused at start.  */
#include "consumer.h"
#include "daemon.h"
#include "base/clock.h"
#include "daemon/server_config.h"
#include "store/store.h"
#include "daemon/tenants.h"
#include "testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define BLOCK TD_BLOCK_LEN
#define NKEYS 6

static void s_tenants_file(void);

static uint8_t s_data[NKEYS][BLOCK];
static uint8_t s_bytes[NKEYS][32];
static p2pkv_key_t s_keys[NKEYS];
static pk_key_t s_pkeys[NKEYS];
static char s_dir[64];

static void
s_setup(void)
{
    for (int i = 0; i < NKEYS; i++) {
        randombytes_buf(s_data[i], BLOCK);
        crypto_hash_sha256(s_bytes[i], s_data[i], BLOCK);
        s_keys[i] = (p2pkv_key_t) { s_bytes[i], 32 };
        s_pkeys[i] = pk_key_make(s_bytes[i], 32);
    }
    snprintf(s_dir, sizeof s_dir, "/tmp/p2pkv-tenants-XXXXXX");
    if (!mkdtemp(s_dir))
        abort();
    s_tenants_file();
}

//  A real CURVE public key, Z85.
static void
s_curve_key(char key[41])
{
    char secret[41];
    ck_assert_int_eq(zmq_curve_keypair(key, secret), 0);
}

//  text written to s_dir/name; the path into path (256 bytes).
static void
s_file(const char *name, const char *text, char *path)
{
    snprintf(path, 256, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

//  ---------------------------------------------------------------------------
//  The map

START_TEST(test_map_of_real_keys)
{
    char k1[41], k2[41], k3[41], text[512], err[PK_ERRLEN] = "";
    s_curve_key(k1);
    s_curve_key(k2);
    s_curve_key(k3);
    snprintf(text, sizeof text, "# tenants\n\n%s beta\n  %s\talpha  \n* alpha\n#\n", k1, k2);
    int rc = 1;
    pk_tenants_t *t = pk_tenants_parse(text, "t", &rc, err);
    ck_assert_msg(t, "%s", err);
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(pk_tenants_count(t), 3);
    ck_assert_str_eq(pk_tenants_name(t, 0), "shared");
    ck_assert_str_eq(pk_tenants_name(t, 1), "beta");
    ck_assert_str_eq(pk_tenants_name(t, 2), "alpha");
    ck_assert_ptr_null(pk_tenants_name(t, 3));
    ck_assert_int_eq(pk_tenants_find(t, "alpha"), 2);
    ck_assert_int_eq(pk_tenants_find(t, "shared"), 0);
    ck_assert_int_eq(pk_tenants_find(t, "gamma"), -ENOENT);
    ck_assert_uint_eq(pk_tenants_of(t, k1), 1);
    ck_assert_uint_eq(pk_tenants_of(t, k2), 2);
    ck_assert_uint_eq(pk_tenants_of(t, k3), 2);     //  unlisted: the * line
    ck_assert_uint_eq(pk_tenants_of(t, ""), 2);     //  keyless: the * line
    pk_tenants_destroy(&t);
    ck_assert_ptr_null(t);

    //  without a * line the unlisted and the keyless are in shared
    snprintf(text, sizeof text, "%s beta\n", k1);
    t = pk_tenants_parse(text, "t", NULL, err);
    ck_assert_msg(t, "%s", err);
    ck_assert_uint_eq(pk_tenants_of(t, k1), 1);
    ck_assert_uint_eq(pk_tenants_of(t, k2), 0);
    ck_assert_uint_eq(pk_tenants_of(t, ""), 0);
    pk_tenants_destroy(&t);

    //  no map: everyone in shared, only shared exists
    ck_assert_uint_eq(pk_tenants_count(NULL), 1);
    ck_assert_uint_eq(pk_tenants_of(NULL, k1), 0);
    ck_assert_str_eq(pk_tenants_name(NULL, 0), "shared");
    ck_assert_int_eq(pk_tenants_find(NULL, "alpha"), -ENOENT);
    ck_assert_int_eq(pk_tenants_find(NULL, NULL), 0);
}
END_TEST

//  Each bad file is refused, naming the file, the line and what is wrong.
START_TEST(test_map_bad_files)
{
    char k1[41], k2[41], text[512], err[PK_ERRLEN];
    s_curve_key(k1);
    s_curve_key(k2);
    char bad_key[41];
    memcpy(bad_key, k1, 41);
    bad_key[7] = '~';                               //  not in the Z85 alphabet
    struct { const char *fmt; const char *want; } cases[] = {
        { "%s beta\n%s alpha extra\n", "t:2: expected KEY NAMESPACE" },
        { "%s beta\n%s\n", "t:2: expected KEY NAMESPACE" },
        { "%s beta\n%s Alpha\n", "t:2: namespace \"Alpha\": expected 1..32 of a-z 0-9 _ -" },
        { "%s beta\n%s -x\n", "t:2: namespace \"-x\"" },
        { "%s beta\n%s a23456789012345678901234567890123\n", "t:2: namespace" },
        { "%s beta\n%s beta\n", "" },               //  the duplicate: below
        { "%s beta\nshort alpha\n", "t:2: key \"short\": expected a CURVE public key in Z85" },
        { "#comment\n", "t:1: expected KEY NAMESPACE" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!cases[i].want[0])
            continue;
        snprintf(text, sizeof text, cases[i].fmt, k1, k2);
        int rc = 0;
        ck_assert_ptr_null(pk_tenants_parse(text, "t", &rc, err));
        ck_assert_int_eq(rc, -EINVAL);
        ck_assert_msg(strncmp(err, cases[i].want, strlen(cases[i].want)) == 0,
                      "case %zu: \"%s\", not \"%s\"", i, err, cases[i].want);
    }
    snprintf(text, sizeof text, "%s beta\n%s alpha\n\n%s alpha\n", k1, k2, k1);
    ck_assert_ptr_null(pk_tenants_parse(text, "t", NULL, err));
    ck_assert_str_eq(err, "t:4: key already listed on line 1");
    snprintf(text, sizeof text, "* beta\n%s alpha\n* alpha\n", k1);
    ck_assert_ptr_null(pk_tenants_parse(text, "t", NULL, err));
    ck_assert_str_eq(err, "t:3: a second * line (the first is line 1)");
    snprintf(text, sizeof text, "%s beta\n", bad_key);
    ck_assert_ptr_null(pk_tenants_parse(text, "t", NULL, err));
    ck_assert_msg(strstr(err, "t:1: key \""), "%s", err);
    //  40 Z85 characters whose group overflows 32 bits: not a key either
    char big[64];
    memset(big, '%', PK_CURVE_KEY_Z85);
    snprintf(big + PK_CURVE_KEY_Z85, sizeof big - PK_CURVE_KEY_Z85, " beta\n");
    ck_assert_ptr_null(pk_tenants_parse(big, "t", NULL, err));
    ck_assert_msg(strstr(err, "t:1: key \""), "%s", err);
    ck_assert_ptr_null(pk_tenants_load("/nonexistent/tenants", NULL, err));
    ck_assert_str_eq(err, "/nonexistent/tenants: No such file or directory");
}
END_TEST

START_TEST(test_map_reload)
{
    char k1[41], k2[41], text[512], path[256], err[PK_ERRLEN] = "";
    s_curve_key(k1);
    s_curve_key(k2);
    snprintf(text, sizeof text, "%s beta\n%s alpha\n", k1, k2);
    s_file("reload", text, path);
    pk_tenants_t *t = pk_tenants_load(path, NULL, err);
    ck_assert_msg(t, "%s", err);
    //  k1 moves to alpha, k2 goes, keyless consumers to beta: same names
    snprintf(text, sizeof text, "* beta\n%s alpha\n", k1);
    s_file("reload", text, path);
    ck_assert_int_eq(pk_tenants_reload(t, path, err), 0);
    ck_assert_uint_eq(pk_tenants_count(t), 3);
    ck_assert_int_eq(pk_tenants_find(t, "beta"), 1);    //  ids kept
    ck_assert_uint_eq(pk_tenants_of(t, k1), 2);
    ck_assert_uint_eq(pk_tenants_of(t, k2), 1);
    ck_assert_uint_eq(pk_tenants_of(t, ""), 1);
    //  a new namespace, and a bad file, leave the running map as it was
    snprintf(text, sizeof text, "%s gamma\n", k2);
    s_file("reload", text, path);
    ck_assert_int_eq(pk_tenants_reload(t, path, err), -EINVAL);
    ck_assert_msg(strstr(err, "namespace \"gamma\" is new"), "%s", err);
    s_file("reload", "nonsense\n", path);
    ck_assert_int_eq(pk_tenants_reload(t, path, err), -EINVAL);
    ck_assert_uint_eq(pk_tenants_of(t, k1), 2);
    ck_assert_uint_eq(pk_tenants_of(t, ""), 1);
    ck_assert_int_eq(pk_tenants_reload(NULL, path, err), -EINVAL);
    pk_tenants_destroy(&t);
    unlink(path);
}
END_TEST

//  ---------------------------------------------------------------------------
//  The store's namespaced index

//  What one lookup or pin changed in the store's counters.
typedef struct {
    uint64_t probes, lookups, hits, pending, misses;
    size_t pinned;
} s_delta_t;

static s_delta_t
s_counters(pk_store_t *store)
{
    pk_store_stats_t st;
    pk_store_stats(store, &st);
    return (s_delta_t) { st.probes, st.lookups, st.hits, st.pending, st.misses, st.pinned };
}

static s_delta_t
s_delta(s_delta_t after, s_delta_t before)
{
    return (s_delta_t) { after.probes - before.probes, after.lookups - before.lookups,
                         after.hits - before.hits, after.pending - before.pending,
                         after.misses - before.misses, after.pinned - before.pinned };
}

#define S_DELTA_EQ(a, b) \
    ck_assert_msg(memcmp(&(a), &(b), sizeof (a)) == 0, \
                  "probes %llu/%llu lookups %llu/%llu hits %llu/%llu misses %llu/%llu " \
                  "pinned %zu/%zu", (unsigned long long) (a).probes, \
                  (unsigned long long) (b).probes, (unsigned long long) (a).lookups, \
                  (unsigned long long) (b).lookups, (unsigned long long) (a).hits, \
                  (unsigned long long) (b).hits, (unsigned long long) (a).misses, \
                  (unsigned long long) (b).misses, (a).pinned, (b).pinned)

//  namespaces: 0 shared, 1 alpha, 2 beta.  Keys: 0 in alpha, 1 shared, 2
//  beta's only, 3 absent everywhere, 4 in alpha and beta with other bytes.
START_TEST(test_store_foreign_key_is_an_absent_key)
{
    int rc;
    pk_store_config_t cfg = { 30.0, 3, false };
    pk_store_t *store = pk_store_new(NULL, 16, BLOCK, &cfg, pk_clock_system(), NULL, NULL,
                                     &rc, NULL);
    ck_assert_ptr_nonnull(store);
    ck_assert_uint_eq(pk_store_namespaces(store), 3);
    ck_assert_int_eq(pk_store_put(store, 1, &s_pkeys[0], s_data[0], BLOCK), 0);
    ck_assert_int_eq(pk_store_put(store, 0, &s_pkeys[1], s_data[1], BLOCK), 0);
    ck_assert_int_eq(pk_store_put(store, 2, &s_pkeys[2], s_data[2], BLOCK), 0);
    ck_assert_int_eq(pk_store_put(store, 1, &s_pkeys[4], s_data[4], BLOCK), 0);
    //  the same key in another namespace is another block
    ck_assert_int_eq(pk_store_put(store, 2, &s_pkeys[4], s_data[5], BLOCK), 0);
    ck_assert_int_eq(pk_store_put(store, 2, &s_pkeys[4], s_data[5], BLOCK), -EEXIST);
    ck_assert_int_eq(pk_store_put(store, 3, &s_pkeys[3], s_data[3], BLOCK), -EINVAL);

    //  alpha's lookups: own and shared hit, beta's key and the absent one miss
    ck_assert_int_eq(pk_store_lookup(store, 1, &s_pkeys[0]), PK_LOOKUP_HIT);
    ck_assert_int_eq(pk_store_lookup(store, 1, &s_pkeys[1]), PK_LOOKUP_HIT);
    s_delta_t t0 = s_counters(store);
    ck_assert_int_eq(pk_store_lookup(store, 1, &s_pkeys[2]), PK_LOOKUP_MISS);
    s_delta_t foreign = s_delta(s_counters(store), t0);
    t0 = s_counters(store);
    ck_assert_int_eq(pk_store_lookup(store, 1, &s_pkeys[3]), PK_LOOKUP_MISS);
    s_delta_t absent = s_delta(s_counters(store), t0);
    S_DELTA_EQ(foreign, absent);
    s_delta_t want = { 2, 1, 0, 0, 1, 0 };          //  two probes, one miss
    S_DELTA_EQ(foreign, want);
    //  an own hit costs the same two probes (the shared one runs anyway)
    t0 = s_counters(store);
    ck_assert_int_eq(pk_store_lookup(store, 1, &s_pkeys[0]), PK_LOOKUP_HIT);
    s_delta_t own = s_delta(s_counters(store), t0);
    ck_assert_uint_eq(own.probes, 2);

    //  pins: the same, and the foreign key is not pinned
    uint64_t job[2];
    uint32_t blocks[2];
    bool pinned[2];
    t0 = s_counters(store);
    ck_assert_int_eq(pk_store_pin(store, 1, &s_pkeys[2], 1, &job[0], blocks, pinned), 0);
    foreign = s_delta(s_counters(store), t0);
    ck_assert(!pinned[0]);
    ck_assert_uint_eq(blocks[0], PK_STORE_NO_BLOCK);
    t0 = s_counters(store);
    ck_assert_int_eq(pk_store_pin(store, 1, &s_pkeys[3], 1, &job[1], blocks, pinned), 0);
    absent = s_delta(s_counters(store), t0);
    ck_assert(!pinned[0]);
    S_DELTA_EQ(foreign, absent);
    ck_assert_uint_eq(foreign.probes, 2);
    ck_assert_uint_eq(foreign.pinned, 0);
    ck_assert_int_eq(pk_store_release_job(store, job[0]), 0);
    ck_assert_int_eq(pk_store_release_job(store, job[1]), 0);

    //  alpha's key 4 is alpha's bytes, beta's is beta's
    pk_key_t both[2] = { s_pkeys[4], s_pkeys[1] };
    ck_assert_int_eq(pk_store_pin(store, 1, both, 2, &job[0], blocks, pinned), 0);
    ck_assert(pinned[0] && pinned[1]);
    uint8_t *base = pk_store_base(store);
    ck_assert_mem_eq(base + (size_t) blocks[0] * BLOCK, s_data[4], BLOCK);
    ck_assert_mem_eq(base + (size_t) blocks[1] * BLOCK, s_data[1], BLOCK);
    ck_assert_int_eq(pk_store_pin(store, 2, both, 1, &job[1], blocks, pinned), 0);
    ck_assert(pinned[0]);
    ck_assert_mem_eq(base + (size_t) blocks[0] * BLOCK, s_data[5], BLOCK);
    pk_store_ns_stats_t a, s, b;
    ck_assert_int_eq(pk_store_ns_stats(store, 1, &a), 0);
    ck_assert_int_eq(pk_store_ns_stats(store, 0, &s), 0);
    ck_assert_int_eq(pk_store_ns_stats(store, 2, &b), 0);
    ck_assert_int_eq(pk_store_ns_stats(store, 3, &b), -EINVAL);
    ck_assert_int_eq(pk_store_ns_stats(store, 2, &b), 0);
    ck_assert_uint_eq(a.ready, 2);
    ck_assert_uint_eq(s.ready, 1);
    ck_assert_uint_eq(b.ready, 2);
    ck_assert_uint_eq(a.pinned, 1);
    ck_assert_uint_eq(s.pinned, 1);
    ck_assert_uint_eq(b.pinned, 1);
    ck_assert_uint_eq(a.lookups, 5);
    ck_assert_uint_eq(a.hits, 3);
    ck_assert_uint_eq(a.misses, 2);
    ck_assert_uint_eq(b.lookups, 0);
    ck_assert_uint_eq(s.lookups, 0);
    ck_assert_int_eq(pk_store_release_job(store, job[0]), 0);
    ck_assert_int_eq(pk_store_release_job(store, job[1]), 0);
    ck_assert_int_eq(pk_store_ns_stats(store, 1, &a), 0);
    ck_assert_uint_eq(a.pinned, 0);

    //  writes act on their namespace only
    ck_assert_int_eq(pk_store_drop(store, 2, &s_pkeys[4], 1), 0);
    ck_assert_int_eq(pk_store_lookup(store, 1, &s_pkeys[4]), PK_LOOKUP_HIT);
    ck_assert_int_eq(pk_store_lookup(store, 2, &s_pkeys[4]), PK_LOOKUP_MISS);
    //  shared sees shared only, at one probe, as a store without tenants
    t0 = s_counters(store);
    ck_assert_int_eq(pk_store_lookup(store, PK_NS_SHARED, &s_pkeys[0]), PK_LOOKUP_MISS);
    ck_assert_int_eq(pk_store_lookup(store, PK_NS_SHARED, &s_pkeys[1]), PK_LOOKUP_HIT);
    ck_assert_uint_eq(s_delta(s_counters(store), t0).probes, 2);
    //  a key being written in alpha: pending for alpha, absent for beta
    uint32_t b5;
    ck_assert_int_eq(pk_store_reserve(store, 9, 1, &s_pkeys[5], 1, &b5), 0);
    ck_assert_int_eq(pk_store_lookup(store, 1, &s_pkeys[5]), PK_LOOKUP_HIT_PENDING);
    ck_assert_int_eq(pk_store_lookup(store, 2, &s_pkeys[5]), PK_LOOKUP_MISS);
    ck_assert_int_eq(pk_store_commit_sums(store, 9, 2, &s_pkeys[5], 1, NULL, NULL), -ENOENT);
    ck_assert_int_eq(pk_store_commit_sums(store, 9, 1, &s_pkeys[5], 1, NULL, NULL), 0);
    pk_store_destroy(&store);
}
END_TEST

//  ---------------------------------------------------------------------------
//  Against real servers

static char s_tenants_path[256];

//  The file the e2e tests run with: a real key in beta (nobody has it:
//  CURVE is off), keyless consumers in alpha.  Written once, before the
//  tests (outside them: no Check assertions).
static void
s_tenants_file(void)
{
    char k1[41], secret[41];
    snprintf(s_tenants_path, sizeof s_tenants_path, "%s/tenants", s_dir);
    FILE *f = zmq_curve_keypair(k1, secret) == 0 ? fopen(s_tenants_path, "w") : NULL;
    if (!f)
        abort();
    fprintf(f, "# e2e\n%s beta\n* alpha\n", k1);
    fclose(f);
}

static p2pkv_engine_t *
s_engine_in(td_t *s, const char *ns)
{
    p2pkv_engine_t *e = td_engine_open(s, NULL, NULL);
    char err[P2PKV_ERRLEN] = "";
    ck_assert_msg(p2pkv_engine_set_namespace(e, ns, err) == 0, "%s", err);
    return e;
}

//  The stats' namespaces.NAME.FIELD.
static json_int_t
s_ns_stat(td_t *s, const char *ns, const char *field)
{
    char path[128];
    snprintf(path, sizeof path, "namespaces.%s.%s", ns, field);
    return td_stat(s, path);
}

//  The metric family's sample for namespace ns, once it reads want: the
//  node pushes the store's counts twice a second, so wait for that, up
//  to 5 s, and return what it reads last.
static json_int_t
s_metric_becomes(td_t *s, const char *family, const char *ns, json_int_t want)
{
    json_int_t got = -1;
    double deadline = pk_clock_monotonic() + 5;
    do {
        json_t *st = td_stats_json(s);
        json_t *f = json_object_get(json_object_get(st, "metrics"), family);
        json_t *v = json_object_get(json_object_get(f, "namespaces"), ns);
        got = json_is_integer(v) ? json_integer_value(v)
              : json_is_real(v) ? (json_int_t) json_real_value(v) : -1;
        json_decref(st);
        if (got != want)
            zclock_sleep(20);
    } while (got != want && pk_clock_monotonic() < deadline);
    return got;
}

START_TEST(test_consumer_sees_its_namespace_and_shared)
{
    td_t s;
    td_start(&s, (const char *[]) { "--tenants", s_tenants_path, NULL });
    p2pkv_engine_t *ea = s_engine_in(&s, "alpha"), *eb = s_engine_in(&s, "beta");
    p2pkv_engine_t *es = s_engine_in(&s, NULL);
    td_put(ea, &s_keys[0], s_data[0], 1, BLOCK);
    td_put(es, &s_keys[1], s_data[1], 1, BLOCK);
    td_put(eb, &s_keys[2], s_data[2], 1, BLOCK);
    //  key 4: beta's bytes and alpha's, under one key
    td_put(eb, &s_keys[4], s_data[5], 1, BLOCK);
    td_put(ea, &s_keys[4], s_data[4], 1, BLOCK);
    ck_assert_int_eq(s_ns_stat(&s, "alpha", "ready"), 2);
    ck_assert_int_eq(s_ns_stat(&s, "beta", "ready"), 2);
    ck_assert_int_eq(s_ns_stat(&s, "shared", "ready"), 1);

    tc_t *tc = tc_to(s.endpoint, "c-alpha");
    pk_key_t ask[5] = { s_pkeys[0], s_pkeys[1], s_pkeys[2], s_pkeys[3], s_pkeys[4] };
    ck_assert_int_eq(tc_send(tc, tc_lookup("kv", 1, ask, 5)), 0);
    pk_msg_t *resp = tc_expect(tc, PK_MSG_LOOKUP_RESP, 5);
    bool want[5] = { true, true, false, false, true };
    for (int i = 0; i < 5; i++)
        ck_assert_msg(resp->hits[i] == want[i], "key %d: hit %d", i, resp->hits[i]);
    pk_msg_destroy(&resp);
    //  the hits are pinned (alpha's two, shared's one), beta's key is not
    ck_assert_int_eq(s_ns_stat(&s, "alpha", "pinned"), 2);
    ck_assert_int_eq(s_ns_stat(&s, "shared", "pinned"), 1);
    ck_assert_int_eq(s_ns_stat(&s, "beta", "pinned"), 0);
    ck_assert_int_eq(s_ns_stat(&s, "alpha", "lookups"), 5);
    ck_assert_int_eq(s_ns_stat(&s, "alpha", "hits"), 3);
    ck_assert_int_eq(s_ns_stat(&s, "alpha", "misses"), 2);
    ck_assert_int_eq(s_ns_stat(&s, "beta", "lookups"), 0);

    //  the fetch lands alpha's bytes of key 4, not beta's
    pk_key_t got[3] = { s_pkeys[0], s_pkeys[1], s_pkeys[4] };
    uint32_t idx[3] = { 10, 11, 12 };
    ck_assert_int_eq(tc_send(tc, tc_fetch("kv", 1, got, idx, 3)), 0);
    tc_expect_done(tc, 1, 3);
    ck_assert_mem_eq(tc_block(tc, 10), s_data[0], BLOCK);
    ck_assert_mem_eq(tc_block(tc, 11), s_data[1], BLOCK);
    ck_assert_mem_eq(tc_block(tc, 12), s_data[4], BLOCK);
    //  pins released once the round is done
    double deadline = pk_clock_monotonic() + 5;
    while (td_stats(es).pinned != 0 && pk_clock_monotonic() < deadline)
        tc_progress(tc, 0.01);
    ck_assert_uint_eq(td_stats(es).pinned, 0);
    ck_assert_int_eq(s_ns_stat(&s, "alpha", "pinned"), 0);

    //  the metrics, per namespace (pushed by the node)
    ck_assert_int_eq(s_metric_becomes(&s, "p2pkv_namespace_lookups_total", "alpha", 5), 5);
    ck_assert_int_eq(s_metric_becomes(&s, "p2pkv_namespace_hits_total", "alpha", 3), 3);
    ck_assert_int_eq(s_metric_becomes(&s, "p2pkv_namespace_misses_total", "alpha", 2), 2);
    ck_assert_int_eq(s_metric_becomes(&s, "p2pkv_namespace_lookups_total", "beta", 0), 0);
    ck_assert_int_eq(s_metric_becomes(&s, "p2pkv_namespace_ready_blocks", "beta", 2), 2);
    ck_assert_int_eq(s_metric_becomes(&s, "p2pkv_namespace_pinned_blocks", "alpha", 0), 0);
    tc_destroy(&tc);
    p2pkv_engine_close(&ea);
    p2pkv_engine_close(&eb);
    p2pkv_engine_close(&es);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  The struct of one namespace (p2pkv_engine_stats_namespace) says what
//  the stats answer's JSON says, after puts into two namespaces and a
//  lookup by a consumer of one of them.
static void
s_assert_ns_struct(td_t *s, p2pkv_engine_t *e, const char *ns, const char *name,
                   uint64_t ready, uint64_t pinned, uint64_t lookups, uint64_t hits)
{
    p2pkv_engine_namespace_stats_t st;
    char err[P2PKV_ERRLEN] = "";
    ck_assert_msg(p2pkv_engine_stats_namespace(e, ns, &st, err) == 0, "%s: %s", name, err);
    ck_assert_uint_eq(st.ready, ready);
    ck_assert_uint_eq(st.pinned, pinned);
    ck_assert_uint_eq(st.lookups, lookups);
    ck_assert_uint_eq(st.hits, hits);
    ck_assert_uint_eq(st.lookups, st.hits + st.pending + st.misses);
    const struct { const char *field; uint64_t v; } json[] = {
        { "ready", st.ready }, { "pinned", st.pinned }, { "lookups", st.lookups },
        { "hits", st.hits }, { "pending", st.pending }, { "misses", st.misses },
    };
    for (size_t i = 0; i < sizeof json / sizeof json[0]; i++)
        ck_assert_msg((uint64_t) s_ns_stat(s, name, json[i].field) == json[i].v,
                      "%s.%s: the struct says %" PRIu64 ", the JSON %lld", name, json[i].field,
                      json[i].v, (long long) s_ns_stat(s, name, json[i].field));
}

START_TEST(test_stats_namespace_struct)
{
    td_t s;
    td_start(&s, (const char *[]) { "--tenants", s_tenants_path, NULL });
    p2pkv_engine_t *ea = s_engine_in(&s, "alpha"), *eb = s_engine_in(&s, "beta");
    td_put(ea, &s_keys[0], s_data[0], 3, BLOCK);
    td_put(eb, &s_keys[3], s_data[3], 2, BLOCK);
    //  an alpha consumer: two of alpha's keys (hits), one of beta's and
    //  one nobody has (misses); its hits stay pinned for the fetch
    tc_t *tc = tc_to(s.endpoint, "c-alpha-stats");
    pk_key_t ask[4] = { s_pkeys[0], s_pkeys[1], s_pkeys[3], s_pkeys[5] };
    ck_assert_int_eq(tc_send(tc, tc_lookup("kv", 1, ask, 4)), 0);
    pk_msg_t *resp = tc_expect(tc, PK_MSG_LOOKUP_RESP, 5);
    pk_msg_destroy(&resp);
    s_assert_ns_struct(&s, ea, "alpha", "alpha", 3, 2, 4, 2);
    s_assert_ns_struct(&s, ea, "beta", "beta", 2, 0, 0, 0);
    s_assert_ns_struct(&s, eb, NULL, "shared", 0, 0, 0, 0);
    s_assert_ns_struct(&s, eb, "shared", "shared", 0, 0, 0, 0);
    //  what it refuses: a malformed name, one the server lacks, no out
    p2pkv_engine_namespace_stats_t st;
    char err[P2PKV_ERRLEN] = "";
    ck_assert_int_eq(p2pkv_engine_stats_namespace(ea, "Bad!", &st, err), -EINVAL);
    ck_assert_msg(strncmp(err, "ns: ", 4) == 0, "%s", err);
    ck_assert_int_eq(p2pkv_engine_stats_namespace(ea, "gamma", &st, err), -ENOENT);
    ck_assert_msg(strstr(err, "no namespace \"gamma\""), "%s", err);
    ck_assert_int_eq(p2pkv_engine_stats_namespace(ea, "alpha", NULL, err), -EINVAL);
    tc_destroy(&tc);
    p2pkv_engine_close(&ea);
    p2pkv_engine_close(&eb);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  store names a consumer: its blocks must be the consumer's namespace's
//  or shared.  Refused at once for a consumer connected; for one that
//  connects later the store fails at delivery, unpinned.
START_TEST(test_store_across_namespaces_refused)
{
    td_t s;
    td_start(&s, (const char *[]) { "--tenants", s_tenants_path, NULL });
    p2pkv_engine_t *eb = s_engine_in(&s, "beta");
    td_put(eb, &s_keys[2], s_data[2], 1, BLOCK);
    char err[P2PKV_ERRLEN] = "";
    uint64_t job = 0;
    //  for a consumer not connected yet: accepted, held
    ck_assert_int_eq(p2pkv_engine_store(eb, "c-late", "req-0", &s_keys[2], 1, -1, &job, err),
                     0);
    ck_assert_int_eq(s_ns_stat(&s, "beta", "pinned"), 1);
    tc_t *tc = tc_to(s.endpoint, "c-alpha");
    int rc = p2pkv_engine_store(eb, "c-alpha", "req-1", &s_keys[2], 1, -1, &job, err);
    ck_assert_int_lt(rc, 0);
    ck_assert_msg(strstr(err, "consumer c-alpha is in namespace alpha, the blocks in beta"),
                  "%s", err);
    ck_assert_int_eq(s_ns_stat(&s, "beta", "pinned"), 1);
    //  the held one fails when its consumer turns out to be in alpha
    tc_t *late = tc_to(s.endpoint, "c-late");
    p2pkv_engine_event_t ev;
    ck_assert_int_eq(p2pkv_engine_next_event(eb, 10, &ev), 0);
    ck_assert_int_eq(ev.kind, P2PKV_EVENT_STORE);
    ck_assert(!ev.success);
    ck_assert_int_eq(s_ns_stat(&s, "beta", "pinned"), 0);
    //  alpha's blocks and shared ones may go to it
    p2pkv_engine_t *ea = s_engine_in(&s, "alpha"), *es = s_engine_in(&s, "shared");
    td_put(ea, &s_keys[0], s_data[0], 1, BLOCK);
    td_put(es, &s_keys[1], s_data[1], 1, BLOCK);
    ck_assert_msg(p2pkv_engine_store(ea, "c-alpha", "req-2", &s_keys[0], 1, -1, &job, err) == 0,
                  "%s", err);
    ck_assert_msg(p2pkv_engine_store(es, "c-alpha", "req-3", &s_keys[1], 1, -1, &job, err) == 0,
                  "%s", err);
    //  a store in alpha sees alpha and shared, never beta's key
    rc = p2pkv_engine_store(ea, "c-alpha", "req-4", &s_keys[2], 1, -1, &job, err);
    ck_assert_int_lt(rc, 0);
    ck_assert_msg(strstr(err, "is not ready in the pool"), "%s", err);
    tc_destroy(&late);
    tc_destroy(&tc);
    p2pkv_engine_close(&ea);
    p2pkv_engine_close(&eb);
    p2pkv_engine_close(&es);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  Namespaces are the file's: another name is refused by the call that
//  names it, a malformed one by set_namespace; without --tenants there is
//  only shared, and every call without a namespace works as before.
START_TEST(test_namespace_names_checked)
{
    td_t s;
    td_start(&s, (const char *[]) { "--tenants", s_tenants_path, NULL });
    char err[P2PKV_ERRLEN] = "";
    p2pkv_engine_t *e = td_engine_open(&s, NULL, NULL);
    ck_assert_int_eq(p2pkv_engine_set_namespace(e, "Bad!", err), -EINVAL);
    ck_assert_msg(strncmp(err, "ns: ", 4) == 0, "%s", err);
    ck_assert_int_eq(p2pkv_engine_set_namespace(e, "gamma", err), 0);
    ck_assert_int_lt(p2pkv_engine_put(e, &s_keys[0], s_data[0], BLOCK, err), 0);
    ck_assert_msg(strstr(err, "namespace \"gamma\" is not one of --tenants"), "%s", err);
    json_t *a = td_engine(&s, "{s:s, s:i, s:[s]}", "cmd", "drop", "namespace", 1, "keys", "00");
    ck_assert_str_eq(json_string_value(json_object_get(a, "error")),
                     "drop: namespace: expected a string");
    json_decref(a);
    p2pkv_engine_close(&e);
    ck_assert_int_eq(td_stop(&s), 0);

    td_start(&s, NULL);
    e = td_engine_open(&s, NULL, NULL);
    ck_assert_int_eq(p2pkv_engine_set_namespace(e, "alpha", err), 0);
    ck_assert_int_lt(p2pkv_engine_put(e, &s_keys[0], s_data[0], BLOCK, err), 0);
    ck_assert_msg(strstr(err, "namespace \"alpha\" is not one of --tenants"), "%s", err);
    ck_assert_int_eq(p2pkv_engine_set_namespace(e, "shared", err), 0);
    td_put(e, &s_keys[0], s_data[0], 1, BLOCK);
    ck_assert_int_eq(s_ns_stat(&s, "shared", "ready"), 1);
    p2pkv_engine_close(&e);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  p2pkv put --namespace publishes there; p2pkv stats shows the namespaces.
START_TEST(test_cli_put_namespace_and_stats)
{
    td_t s;
    td_start(&s, (const char *[]) { "--tenants", s_tenants_path, NULL });
    char path[256], cmd[1024], line[512] = "";
    snprintf(path, sizeof path, "%s/block", s_dir);
    FILE *f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(s_data[3], 1, BLOCK, f), BLOCK);
    fclose(f);
    snprintf(cmd, sizeof cmd, "bin/p2pkv put --local %s --namespace beta %s", s.local, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_int_eq(s_ns_stat(&s, "beta", "ready"), 1);
    ck_assert_int_eq(s_ns_stat(&s, "shared", "ready"), 0);
    snprintf(cmd, sizeof cmd, "bin/p2pkv put --local %s --namespace gamma %s 2>&1", s.local,
             path);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    ck_assert_int_ne(pclose(p), 0);
    ck_assert_msg(strstr(line, "namespace \"gamma\" is not one of --tenants"), "%s", line);
    snprintf(cmd, sizeof cmd, "bin/p2pkv stats --json --local %s", s.local);
    p = popen(cmd, "r");
    static char stats[1 << 16];
    size_t len = fread(stats, 1, sizeof stats - 1, p);
    stats[len] = '\0';
    ck_assert_int_eq(pclose(p), 0);
    json_t *st = json_loads(stats, 0, NULL);
    json_t *beta = json_object_get(json_object_get(st, "namespaces"), "beta");
    ck_assert_int_eq(json_integer_value(json_object_get(beta, "ready")), 1);
    ck_assert_ptr_nonnull(json_object_get(json_object_get(st, "namespaces"), "alpha"));
    json_decref(st);
    unlink(path);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  A bad file stops the server at start: exit 2, the file and line named.
START_TEST(test_bad_tenants_file_refused_at_start)
{
    char path[256], cmd[1024], line[512] = "";
    const char *bin = getenv("P2PKV_SERVER") ? getenv("P2PKV_SERVER") : "bin/p2pkv-server";
    s_file("bad", "# fine\n* alpha\nnot-a-key beta\n", path);
    snprintf(cmd, sizeof cmd, "%s --peer-id tenants-bad --tenants %s 2>&1", bin, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    ck_assert_int_eq(WEXITSTATUS(pclose(p)), 2);
    char want[512];
    snprintf(want, sizeof want, "--tenants: %s:3: key \"not-a-key\"", path);
    ck_assert_msg(strstr(line, want), "%s", line);
    //  the same through the config file, and a file that is not there
    pk_server_config_t c;
    char err[PK_ERRLEN];
    char *argv[] = { "p2pkv-server", "--tenants", "/nonexistent/t", NULL };
    ck_assert_int_eq(pk_server_config_parse(&c, 3, argv, stdout, err), -ENOENT);
    ck_assert_str_eq(err, "--tenants: /nonexistent/t: No such file or directory");
    pk_server_config_fini(&c);
    //  "" turns it off (a command line undoing a file)
    char *off[] = { "p2pkv-server", "--tenants", path, "--tenants", "", NULL };
    ck_assert_int_eq(pk_server_config_parse(&c, 5, off, stdout, err), 0);
    ck_assert_ptr_null(c.tenants);
    ck_assert_ptr_null(c.tenant_map);
    pk_server_config_fini(&c);
    char good[256], k1[41], text[128];
    s_curve_key(k1);
    snprintf(text, sizeof text, "%s beta\n", k1);
    s_file("good", text, good);
    char *on[] = { "p2pkv-server", "--tenants", good, NULL };
    ck_assert_int_eq(pk_server_config_parse(&c, 3, on, stdout, err), 0);
    ck_assert_str_eq(c.tenants, good);
    ck_assert_uint_eq(pk_tenants_count(c.tenant_map), 2);
    pk_server_config_fini(&c);
    unlink(path);
    unlink(good);
}
END_TEST

int
main(void)
{
    int skip = td_suite_start();
    if (skip)
        return skip;
    s_setup();
    Suite *suite = suite_create("tenants");
    TCase *unit = td_case(suite, "unit", 0);
    tcase_add_test(unit, test_map_of_real_keys);
    tcase_add_test(unit, test_map_bad_files);
    tcase_add_test(unit, test_map_reload);
    tcase_add_test(unit, test_store_foreign_key_is_an_absent_key);
    TCase *e2e = td_case(suite, "e2e", 60);
    tcase_add_test(e2e, test_consumer_sees_its_namespace_and_shared);
    tcase_add_test(e2e, test_stats_namespace_struct);
    tcase_add_test(e2e, test_store_across_namespaces_refused);
    tcase_add_test(e2e, test_namespace_names_checked);
    tcase_add_test(e2e, test_cli_put_namespace_and_stats);
    tcase_add_test(e2e, test_bad_tenants_file_refused_at_start);
    int rc = pk_test_run("tenants", suite);
    unlink(s_tenants_path);
    rmdir(s_dir);
    return rc;
}
