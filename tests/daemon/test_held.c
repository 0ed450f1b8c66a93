/*  test_held.c: the stores held for consumers not connected yet
    (lib/daemon/held.c), alone: what expires when, what a connect takes,
    and the bound.  */
#include "daemon/held.h"
#include "testutil.h"

#include <errno.h>
#include <string.h>

static pk_held_t *
s_item(const char *consumer, bool finish, double expires)
{
    pk_held_t *h = calloc(1, sizeof *h);
    ck_assert_ptr_nonnull(h);
    h->consumer = strdup(consumer);
    h->kv = strdup("kv");
    h->finish = finish;
    h->expires = expires;
    return h;
}

static size_t
s_free_list(pk_held_t *h, const char *consumer)
{
    size_t n = 0;
    for (pk_held_t *next; h; h = next, n++) {
        next = h->next;
        if (consumer)
            ck_assert_str_eq(h->consumer, consumer);
        pk_held_destroy(&h);
        ck_assert_ptr_null(h);
    }
    return n;
}

//  An item goes at its expiry, not before; the others stay, counted.
START_TEST(test_held_stores_expire)
{
    pk_held_list_t *list = pk_held_list_new(8);
    ck_assert_ptr_nonnull(list);
    ck_assert_int_eq(pk_held_list_add(list, s_item("a", false, 10.0)), 0);
    ck_assert_int_eq(pk_held_list_add(list, s_item("b", true, 20.0)), 0);
    ck_assert_int_eq(pk_held_list_add(list, s_item("c", false, 30.0)), 0);
    ck_assert_uint_eq(pk_held_list_size(list), 3);
    ck_assert_uint_eq(pk_held_list_jobs(list), 2);      //  b is a finish
    ck_assert_ptr_null(pk_held_list_expire(list, 9.99));
    pk_held_t *gone = pk_held_list_expire(list, 20.0);  //  a, and b at its very moment
    ck_assert_ptr_nonnull(gone);
    ck_assert_ptr_nonnull(gone->next);
    ck_assert_ptr_null(gone->next->next);
    ck_assert_uint_eq(s_free_list(gone, NULL), 2);
    ck_assert_uint_eq(pk_held_list_size(list), 1);
    ck_assert_uint_eq(pk_held_list_jobs(list), 1);
    pk_held_list_destroy(&list);                        //  frees c
    ck_assert_ptr_null(list);
}
END_TEST

//  A connect takes its consumer's items, all of them and no other's.
START_TEST(test_connect_takes_its_own)
{
    pk_held_list_t *list = pk_held_list_new(8);
    ck_assert_int_eq(pk_held_list_add(list, s_item("a", false, 10.0)), 0);
    ck_assert_int_eq(pk_held_list_add(list, s_item("b", false, 10.0)), 0);
    ck_assert_int_eq(pk_held_list_add(list, s_item("a", true, 10.0)), 0);
    ck_assert_uint_eq(s_free_list(pk_held_list_take(list, "a"), "a"), 2);
    ck_assert_ptr_null(pk_held_list_take(list, "a"));
    ck_assert_uint_eq(pk_held_list_size(list), 1);
    ck_assert_uint_eq(s_free_list(pk_held_list_take(list, "b"), "b"), 1);
    ck_assert_uint_eq(pk_held_list_size(list), 0);
    pk_held_list_destroy(&list);
}
END_TEST

//  Past the bound an item is refused and stays the caller's.
START_TEST(test_bounded)
{
    pk_held_list_t *list = pk_held_list_new(2);
    ck_assert_int_eq(pk_held_list_add(list, s_item("a", false, 10.0)), 0);
    ck_assert_int_eq(pk_held_list_add(list, s_item("a", false, 10.0)), 0);
    pk_held_t *h = s_item("a", false, 10.0);
    ck_assert_int_eq(pk_held_list_add(list, h), -ENOSPC);
    ck_assert_uint_eq(pk_held_list_size(list), 2);
    pk_held_destroy(&h);
    pk_held_list_destroy(&list);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("held");
    TCase *tc = tcase_create("held");
    tcase_add_test(tc, test_held_stores_expire);
    tcase_add_test(tc, test_connect_takes_its_own);
    tcase_add_test(tc, test_bounded);
    suite_add_tcase(s, tc);
    return pk_test_run("held", s);
}
