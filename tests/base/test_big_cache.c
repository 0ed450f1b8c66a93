/*  test_big_cache.c: large blocks kept for the next request of about their
    size (base/big_cache): a freed block goes to the next request it fits,
    never to one of less than half its size nor to a small one; what is
    kept stays within PK_BIG_KEEP blocks and PK_BIG_BYTES; a kept block
    comes back cleared from pk_big_calloc; trim gives everything back.
*/
#include "base/big_cache.h"
#include "testutil.h"

#include <malloc.h>
#include <string.h>

static void
s_empty(void)
{
    pk_big_trim();
}

START_TEST(test_a_freed_block_serves_the_next_of_its_size)
{
    char *a = pk_big_alloc(1 << 20);
    ck_assert_ptr_nonnull(a);
    memset(a, 1, 1 << 20);
    pk_big_free(a);
    ck_assert_uint_ge(pk_big_kept(), 1 << 20);
    char *b = pk_big_alloc((1 << 20) - 100);
    ck_assert_ptr_eq(b, a);             //  the same block, not a new one
    ck_assert_uint_eq(pk_big_kept(), 0);
    pk_big_free(b);
}
END_TEST

START_TEST(test_small_or_much_smaller_requests_do_not_take_it)
{
    char *a = pk_big_alloc(4 << 20);
    pk_big_free(a);
    size_t kept = pk_big_kept();
    ck_assert_uint_ge(kept, 4 << 20);
    char *small = pk_big_alloc(1000);
    char *half = pk_big_alloc((1 << 20) + 1);     //  under half of it
    ck_assert_ptr_ne(small, a);
    ck_assert_ptr_ne(half, a);
    ck_assert_uint_eq(pk_big_kept(), kept);
    //  a small block is never kept
    free(small);
    small = malloc(1000);
    pk_big_free(small);
    ck_assert_uint_eq(pk_big_kept(), kept);
    pk_big_free(half);
}
END_TEST

START_TEST(test_calloc_clears_a_kept_block)
{
    unsigned char *a = pk_big_alloc(1 << 20);
    memset(a, 0xab, 1 << 20);
    pk_big_free(a);
    unsigned char *b = pk_big_calloc(1 << 18, 4);
    ck_assert_ptr_eq(b, a);
    for (size_t i = 0; i < (1 << 20); i++)
        ck_assert_uint_eq(b[i], 0);
    pk_big_free(b);
    ck_assert_ptr_null(pk_big_calloc(SIZE_MAX / 2, 4));     //  overflows
}
END_TEST

START_TEST(test_bounded_in_blocks_and_bytes)
{
    void *p[3 * PK_BIG_KEEP];
    for (size_t i = 0; i < 3 * PK_BIG_KEEP; i++)
        p[i] = pk_big_alloc(PK_BIG_MIN + i * 4096);
    for (size_t i = 0; i < 3 * PK_BIG_KEEP; i++)
        pk_big_free(p[i]);
    //  the largest PK_BIG_KEEP were kept, the rest freed
    size_t kept = pk_big_kept(), want = 0;
    for (size_t i = 2 * PK_BIG_KEEP; i < 3 * PK_BIG_KEEP; i++)
        want += PK_BIG_MIN + i * 4096;
    ck_assert_uint_ge(kept, want);
    ck_assert_uint_lt(kept, want + PK_BIG_KEEP * 4096);    //  malloc's rounding
    //  blocks larger than the budget's room are freed, not kept
    pk_big_trim();
    void *big[3];
    for (int i = 0; i < 3; i++)
        big[i] = pk_big_alloc(PK_BIG_BYTES / 2);
    for (int i = 0; i < 3; i++)
        pk_big_free(big[i]);
    ck_assert_uint_le(pk_big_kept(), PK_BIG_BYTES);
    ck_assert_uint_ge(pk_big_kept(), PK_BIG_BYTES / 2);
    pk_big_trim();
    ck_assert_uint_eq(pk_big_kept(), 0);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("big_cache");
    TCase *tc = tcase_create("big_cache");
    tcase_add_checked_fixture(tc, s_empty, s_empty);
    tcase_add_test(tc, test_a_freed_block_serves_the_next_of_its_size);
    tcase_add_test(tc, test_small_or_much_smaller_requests_do_not_take_it);
    tcase_add_test(tc, test_calloc_clears_a_kept_block);
    tcase_add_test(tc, test_bounded_in_blocks_and_bytes);
    suite_add_tcase(s, tc);
    return pk_test_run("big_cache", s);
}
