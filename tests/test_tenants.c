/*  test_tenants.c: tenant namespaces (--tenants).

    Unit level: the file's map from CURVE key (real Z85 keys from
    zmq_curve_keypair) to namespace, its errors and its reload; the
    store's namespaced index, where a key of another namespace and an
    absent key go through the same probes and counters and pin nothing.  */
#include "p2pkv.h"
#include "base/clock.h"
#include "daemon/store.h"
#include "daemon/tenants.h"
#include "testutil.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define BLOCK 4096
#define NKEYS 6

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
    pk_tenants_t *t = pk_tenants_parse(text, "t", err, &rc);
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
    t = pk_tenants_parse(text, "t", err, NULL);
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
        ck_assert_ptr_null(pk_tenants_parse(text, "t", err, &rc));
        ck_assert_int_eq(rc, -EINVAL);
        ck_assert_msg(strncmp(err, cases[i].want, strlen(cases[i].want)) == 0,
                      "case %zu: \"%s\", not \"%s\"", i, err, cases[i].want);
    }
    snprintf(text, sizeof text, "%s beta\n%s alpha\n\n%s alpha\n", k1, k2, k1);
    ck_assert_ptr_null(pk_tenants_parse(text, "t", err, NULL));
    ck_assert_str_eq(err, "t:4: key already listed on line 1");
    snprintf(text, sizeof text, "* beta\n%s alpha\n* alpha\n", k1);
    ck_assert_ptr_null(pk_tenants_parse(text, "t", err, NULL));
    ck_assert_str_eq(err, "t:3: a second * line (the first is line 1)");
    snprintf(text, sizeof text, "%s beta\n", bad_key);
    ck_assert_ptr_null(pk_tenants_parse(text, "t", err, NULL));
    ck_assert_msg(strstr(err, "t:1: key \""), "%s", err);
    //  40 Z85 characters whose group overflows 32 bits: not a key either
    char big[64];
    memset(big, '%', PK_CURVE_KEY_Z85);
    snprintf(big + PK_CURVE_KEY_Z85, sizeof big - PK_CURVE_KEY_Z85, " beta\n");
    ck_assert_ptr_null(pk_tenants_parse(big, "t", err, NULL));
    ck_assert_msg(strstr(err, "t:1: key \""), "%s", err);
    ck_assert_ptr_null(pk_tenants_load("/nonexistent/tenants", err, NULL));
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
    pk_tenants_t *t = pk_tenants_load(path, err, NULL);
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
    pk_store_config_t cfg = { 30.0, 3 };
    pk_store_t *store = pk_store_new(NULL, 16, BLOCK, &cfg, pk_clock_system(), &rc);
    ck_assert_ptr_nonnull(store);
    ck_assert_uint_eq(pk_store_namespaces(store), 3);
    ck_assert_int_eq(pk_store_put_ns(store, 1, &s_pkeys[0], s_data[0], BLOCK), 0);
    ck_assert_int_eq(pk_store_put_ns(store, 0, &s_pkeys[1], s_data[1], BLOCK), 0);
    ck_assert_int_eq(pk_store_put_ns(store, 2, &s_pkeys[2], s_data[2], BLOCK), 0);
    ck_assert_int_eq(pk_store_put_ns(store, 1, &s_pkeys[4], s_data[4], BLOCK), 0);
    //  the same key in another namespace is another block
    ck_assert_int_eq(pk_store_put_ns(store, 2, &s_pkeys[4], s_data[5], BLOCK), 0);
    ck_assert_int_eq(pk_store_put_ns(store, 2, &s_pkeys[4], s_data[5], BLOCK), -EEXIST);
    ck_assert_int_eq(pk_store_put_ns(store, 3, &s_pkeys[3], s_data[3], BLOCK), -EINVAL);

    //  alpha's lookups: own and shared hit, beta's key and the absent one miss
    ck_assert_int_eq(pk_store_lookup_ns(store, 1, &s_pkeys[0]), PK_LOOKUP_HIT);
    ck_assert_int_eq(pk_store_lookup_ns(store, 1, &s_pkeys[1]), PK_LOOKUP_HIT);
    s_delta_t t0 = s_counters(store);
    ck_assert_int_eq(pk_store_lookup_ns(store, 1, &s_pkeys[2]), PK_LOOKUP_MISS);
    s_delta_t foreign = s_delta(s_counters(store), t0);
    t0 = s_counters(store);
    ck_assert_int_eq(pk_store_lookup_ns(store, 1, &s_pkeys[3]), PK_LOOKUP_MISS);
    s_delta_t absent = s_delta(s_counters(store), t0);
    S_DELTA_EQ(foreign, absent);
    s_delta_t want = { 2, 1, 0, 0, 1, 0 };          //  two probes, one miss
    S_DELTA_EQ(foreign, want);
    //  an own hit costs the same two probes (the shared one runs anyway)
    t0 = s_counters(store);
    ck_assert_int_eq(pk_store_lookup_ns(store, 1, &s_pkeys[0]), PK_LOOKUP_HIT);
    s_delta_t own = s_delta(s_counters(store), t0);
    ck_assert_uint_eq(own.probes, 2);

    //  pins: the same, and the foreign key is not pinned
    uint64_t job[2];
    uint32_t blocks[2];
    bool pinned[2];
    t0 = s_counters(store);
    ck_assert_int_eq(pk_store_pin_ns(store, 1, &s_pkeys[2], 1, &job[0], blocks, pinned), 0);
    foreign = s_delta(s_counters(store), t0);
    ck_assert(!pinned[0]);
    ck_assert_uint_eq(blocks[0], PK_STORE_NO_BLOCK);
    t0 = s_counters(store);
    ck_assert_int_eq(pk_store_pin_ns(store, 1, &s_pkeys[3], 1, &job[1], blocks, pinned), 0);
    absent = s_delta(s_counters(store), t0);
    ck_assert(!pinned[0]);
    S_DELTA_EQ(foreign, absent);
    ck_assert_uint_eq(foreign.probes, 2);
    ck_assert_uint_eq(foreign.pinned, 0);
    ck_assert_int_eq(pk_store_release_job(store, job[0]), 0);
    ck_assert_int_eq(pk_store_release_job(store, job[1]), 0);

    //  alpha's key 4 is alpha's bytes, beta's is beta's
    pk_key_t both[2] = { s_pkeys[4], s_pkeys[1] };
    ck_assert_int_eq(pk_store_pin_ns(store, 1, both, 2, &job[0], blocks, pinned), 0);
    ck_assert(pinned[0] && pinned[1]);
    uint8_t *base = pk_store_base(store);
    ck_assert_mem_eq(base + (size_t) blocks[0] * BLOCK, s_data[4], BLOCK);
    ck_assert_mem_eq(base + (size_t) blocks[1] * BLOCK, s_data[1], BLOCK);
    ck_assert_int_eq(pk_store_pin_ns(store, 2, both, 1, &job[1], blocks, pinned), 0);
    ck_assert(pinned[0]);
    ck_assert_mem_eq(base + (size_t) blocks[0] * BLOCK, s_data[5], BLOCK);
    pk_store_ns_stats_t a, s, b;
    ck_assert_int_eq(pk_store_stats_ns(store, 1, &a), 0);
    ck_assert_int_eq(pk_store_stats_ns(store, 0, &s), 0);
    ck_assert_int_eq(pk_store_stats_ns(store, 2, &b), 0);
    ck_assert_int_eq(pk_store_stats_ns(store, 3, &b), -EINVAL);
    ck_assert_int_eq(pk_store_stats_ns(store, 2, &b), 0);
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
    ck_assert_int_eq(pk_store_stats_ns(store, 1, &a), 0);
    ck_assert_uint_eq(a.pinned, 0);

    //  writes act on their namespace only
    ck_assert_int_eq(pk_store_drop_ns(store, 2, &s_pkeys[4], 1), 0);
    ck_assert_int_eq(pk_store_lookup_ns(store, 1, &s_pkeys[4]), PK_LOOKUP_HIT);
    ck_assert_int_eq(pk_store_lookup_ns(store, 2, &s_pkeys[4]), PK_LOOKUP_MISS);
    //  shared sees shared only, at one probe, as a store without tenants
    t0 = s_counters(store);
    ck_assert_int_eq(pk_store_lookup(store, &s_pkeys[0]), PK_LOOKUP_MISS);
    ck_assert_int_eq(pk_store_lookup(store, &s_pkeys[1]), PK_LOOKUP_HIT);
    ck_assert_uint_eq(s_delta(s_counters(store), t0).probes, 2);
    //  a key being written in alpha: pending for alpha, absent for beta
    uint32_t b5;
    ck_assert_int_eq(pk_store_reserve_ns(store, 9, 1, &s_pkeys[5], 1, &b5), 0);
    ck_assert_int_eq(pk_store_lookup_ns(store, 1, &s_pkeys[5]), PK_LOOKUP_HIT_PENDING);
    ck_assert_int_eq(pk_store_lookup_ns(store, 2, &s_pkeys[5]), PK_LOOKUP_MISS);
    ck_assert_int_eq(pk_store_commit_ns(store, 9, 2, &s_pkeys[5], 1), -ENOENT);
    ck_assert_int_eq(pk_store_commit_ns(store, 9, 1, &s_pkeys[5], 1), 0);
    pk_store_destroy(&store);
}
END_TEST

int
main(void)
{
    if (sodium_init() < 0)
        return 1;
    s_setup();
    Suite *suite = suite_create("tenants");
    TCase *unit = tcase_create("unit");
    tcase_add_test(unit, test_map_of_real_keys);
    tcase_add_test(unit, test_map_bad_files);
    tcase_add_test(unit, test_map_reload);
    tcase_add_test(unit, test_store_foreign_key_is_an_absent_key);
    suite_add_tcase(suite, unit);
    int rc = pk_test_run("tenants", suite);
    rmdir(s_dir);
    return rc;
}
