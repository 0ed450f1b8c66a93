/*  test_keymap.c: the open-addressed key map (base/keymap): every entry
    stays findable through growth, removal and compaction; takes never
    move the table (callers may hold an entry pointer across one), and
    pk_keymap_compact gives an emptied or sparse table back.
*/
#include "base/keymap.h"
#include "testutil.h"

#define S_POOL 5000

static uint64_t s_ids[S_POOL];
static pk_key_t s_keys[S_POOL];

static void
s_setup(void)
{
    for (size_t i = 0; i < S_POOL; i++) {
        s_ids[i] = 0x9e3779b97f4a7c15ull * (i + 1);
        s_keys[i] = pk_key_make((const uint8_t *) &s_ids[i], sizeof s_ids[i]);
    }
}

static size_t
s_capacity(const pk_keymap_t *m)
{
    return m->slots ? m->mask + 1 : 0;
}

//  Keys 0..n-1, each with a = its index
static void
s_fill(pk_keymap_t *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(pk_keymap_put(m, &s_keys[i], i, ~i), 1);
}

START_TEST(test_takes_never_move_the_table)
{
    pk_keymap_t m = PK_KEYMAP_INIT;
    s_fill(&m, 4096);
    pk_keymap_entry_t *slots = m.slots;
    size_t cap = s_capacity(&m);
    for (size_t i = 0; i < 4096; i++) {
        uint64_t a, b;
        ck_assert(pk_keymap_take(&m, &s_keys[i], &a, &b));
        ck_assert_uint_eq(a, i);
        ck_assert_uint_eq(b, ~i);
    }
    ck_assert_uint_eq(pk_keymap_size(&m), 0);
    ck_assert_ptr_eq(m.slots, slots);
    ck_assert_uint_eq(s_capacity(&m), cap);
    pk_keymap_fini(&m);
}
END_TEST

START_TEST(test_compact_frees_an_emptied_table)
{
    pk_keymap_t m = PK_KEYMAP_INIT;
    s_fill(&m, 1024);
    for (size_t i = 0; i < 1024; i++)
        ck_assert(pk_keymap_take(&m, &s_keys[i], NULL, NULL));
    ck_assert_int_eq(pk_keymap_compact(&m), 0);
    ck_assert_ptr_null(m.slots);
    ck_assert_ptr_null(pk_keymap_find(&m, &s_keys[0]));
    //  and the map is usable again
    ck_assert_int_eq(pk_keymap_put(&m, &s_keys[7], 7, 0), 1);
    ck_assert_uint_eq(pk_keymap_find(&m, &s_keys[7])->a, 7);
    pk_keymap_fini(&m);
}
END_TEST

START_TEST(test_compact_shrinks_a_sparse_table)
{
    pk_keymap_t m = PK_KEYMAP_INIT;
    s_fill(&m, 4096);
    ck_assert_uint_ge(s_capacity(&m), 8192);
    for (size_t i = 100; i < 4096; i++)
        ck_assert(pk_keymap_take(&m, &s_keys[i], NULL, NULL));
    ck_assert_int_eq(pk_keymap_compact(&m), 0);
    //  100 left: at most a quarter full, the smallest power of two that is
    ck_assert_uint_eq(s_capacity(&m), 512);
    ck_assert_uint_eq(pk_keymap_size(&m), 100);
    for (size_t i = 0; i < 4096; i++) {
        pk_keymap_entry_t *e = pk_keymap_find(&m, &s_keys[i]);
        ck_assert_int_eq(e != NULL, i < 100);
        if (e) {
            ck_assert_uint_eq(e->a, i);
            ck_assert_uint_eq(e->b, ~i);
        }
    }
    pk_keymap_fini(&m);
}
END_TEST

START_TEST(test_compact_keeps_a_table_an_eighth_full)
{
    pk_keymap_t m = PK_KEYMAP_INIT;
    s_fill(&m, 1024);
    size_t cap = s_capacity(&m);
    pk_keymap_entry_t *slots = m.slots;
    size_t keep = cap / 8;
    for (size_t i = keep; i < 1024; i++)
        pk_keymap_take(&m, &s_keys[i], NULL, NULL);
    ck_assert_int_eq(pk_keymap_compact(&m), 0);
    ck_assert_ptr_eq(m.slots, slots);
    //  one fewer and it is under an eighth: rebuilt smaller
    pk_keymap_take(&m, &s_keys[keep - 1], NULL, NULL);
    ck_assert_int_eq(pk_keymap_compact(&m), 0);
    ck_assert_uint_lt(s_capacity(&m), cap);
    ck_assert_uint_le(4 * pk_keymap_size(&m), s_capacity(&m));
    pk_keymap_fini(&m);
}
END_TEST

//  Random puts and takes against a plain array, with a compaction after
//  every burst: every key present is found with its values, every key
//  absent is not, through every growth and shrink on the way.
START_TEST(test_churn_matches_a_reference)
{
    pk_keymap_t m = PK_KEYMAP_INIT;
    static bool in[S_POOL];
    static uint64_t val[S_POOL];
    memset(in, 0, sizeof in);
    size_t count = 0, shrinks = 0;
    uint64_t x = 88172645463325252ull;
    for (int op = 0; op < 200000; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        //  phases: fill (3 puts in 4: three quarters of the pool held),
        //  drain (1 put in 16: a sixteenth held), again
        bool filling = (op / 25000) % 2 == 0;
        size_t k = (size_t) (x % S_POOL);
        if (filling ? (x >> 32) % 4 != 0 : (x >> 32) % 16 == 0) {
            int rc = pk_keymap_put(&m, &s_keys[k], (uint64_t) op, k);
            ck_assert_int_eq(rc, in[k] ? 0 : 1);
            count += !in[k];
            in[k] = true;
            val[k] = (uint64_t) op;
        }
        else {
            uint64_t a, b;
            bool had = pk_keymap_take(&m, &s_keys[k], &a, &b);
            ck_assert_int_eq(had, in[k]);
            if (had) {
                ck_assert_uint_eq(a, val[k]);
                ck_assert_uint_eq(b, k);
                count--;
            }
            in[k] = false;
        }
        ck_assert_uint_eq(pk_keymap_size(&m), count);
        if (op % 1000 == 999) {
            size_t cap = s_capacity(&m);
            ck_assert_int_eq(pk_keymap_compact(&m), 0);
            shrinks += s_capacity(&m) < cap;
        }
        if (op % 5000 == 0)
            for (size_t i = 0; i < S_POOL; i++) {
                pk_keymap_entry_t *e = pk_keymap_find(&m, &s_keys[i]);
                ck_assert_int_eq(e != NULL, in[i]);
                if (e)
                    ck_assert_uint_eq(e->a, val[i]);
            }
    }
    ck_assert_uint_gt(shrinks, 0);      //  the drains did shrink it
    pk_keymap_fini(&m);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("keymap");
    TCase *tc = tcase_create("keymap");
    tcase_add_checked_fixture(tc, s_setup, NULL);
    tcase_add_test(tc, test_takes_never_move_the_table);
    tcase_add_test(tc, test_compact_frees_an_emptied_table);
    tcase_add_test(tc, test_compact_shrinks_a_sparse_table);
    tcase_add_test(tc, test_compact_keeps_a_table_an_eighth_full);
    tcase_add_test(tc, test_churn_matches_a_reference);
    suite_add_tcase(s, tc);
    return pk_test_run("keymap", s);
}
