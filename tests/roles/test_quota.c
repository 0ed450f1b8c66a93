/*  test_quota.c: the pin quota (roles/quota) over a scripted store: what
    it offers the store, what it answers, and that every job's charge is
    given back exactly once, whichever way the job was pinned.
*/
#include "roles/quota.h"
#include "testutil.h"

#include <errno.h>

typedef struct {
    size_t asked;               //  keys the last create_store_job was offered
    int fail_next;              //  the next create_store_job returns this
    bool evicted_first;         //  the store could not pin the first key
    uint64_t next_job;
    int results, failed;
    int opened, finished, lookups;
} s_store_t;

static pk_lookup_result_t
s_lookup(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    ((s_store_t *) arg)->lookups++;
    return PK_LOOKUP_HIT;
}

static int
s_pin(void *arg, const pk_lookup_ctx_t *ctx, const pk_key_t *keys, size_t n, uint64_t *job,
      uint32_t *blocks, bool *pinned, uint8_t *why)
{
    s_store_t *st = arg;
    st->asked = n;
    if (st->fail_next) {
        int rc = st->fail_next;
        st->fail_next = 0;
        return rc;
    }
    *job = ++st->next_job;
    for (size_t i = 0; i < n; i++) {
        blocks[i] = (uint32_t) i;
        pinned[i] = !(i == 0 && st->evicted_first);
    }
    return 0;
}

static void
s_open(void *arg, const pk_lookup_ctx_t *ctx)
{
    ((s_store_t *) arg)->opened++;
}

static void
s_finished(void *arg, const pk_lookup_ctx_t *ctx)
{
    ((s_store_t *) arg)->finished++;
}

static void
s_result(void *arg, uint64_t job, bool success)
{
    s_store_t *st = arg;
    st->results++;
    st->failed += !success;
}

static s_store_t S;
static pk_quota_t *Q;
static pk_parent_t P;
static pk_key_t K[16];
static uint8_t KB[16];

static void
s_setup(void)
{
    memset(&S, 0, sizeof S);
    Q = pk_quota_new(6, (pk_parent_t) { .self = &S, .lookup = s_lookup, .create_store_job = s_pin,
                                        .on_new_request = s_open,
                                        .on_request_finished = s_finished,
                                        .store_result = s_result });
    ck_assert_ptr_nonnull(Q);
    P = pk_quota_parent(Q);
    for (int i = 0; i < 16; i++) {
        KB[i] = (uint8_t) i;
        K[i] = pk_key_make(&KB[i], 1);
    }
}

static void
s_teardown(void)
{
    pk_quota_destroy(&Q);
    ck_assert_ptr_null(Q);
}

//  why each key of the last s_pin_n was not pinned, where the quota knows
static uint8_t W[16];

static int
s_pin_n(size_t n, uint64_t *job, bool *pinned)
{
    uint32_t blocks[16];
    pk_lookup_ctx_t ctx = { "r", 1, 1 };
    memset(W, PK_MISS_UNKNOWN, sizeof W);
    return P.create_store_job(P.self, &ctx, K, n, job, blocks, pinned, W);
}

START_TEST(test_keys_past_the_quota_are_not_offered)
{
    uint64_t job;
    bool pinned[16];
    ck_assert_int_eq(s_pin_n(8, &job, pinned), 0);
    ck_assert_uint_eq(S.asked, 6);
    //  and the keys it did not offer miss for the quota (miss_reason.h)
    for (int i = 0; i < 8; i++) {
        ck_assert(pinned[i] == (i < 6));
        ck_assert_uint_eq(W[i], i < 6 ? PK_MISS_UNKNOWN : PK_MISS_QUOTA);
    }
    ck_assert_uint_eq(pk_quota_pinned(Q), 6);
    //  full: the next lookup's keys are all misses, none offered
    uint64_t job2;
    ck_assert_int_eq(s_pin_n(2, &job2, pinned), 0);
    ck_assert_uint_eq(S.asked, 0);
    ck_assert(!pinned[0] && !pinned[1]);
    ck_assert(W[0] == PK_MISS_QUOTA && W[1] == PK_MISS_QUOTA);
    //  the first job's result gives its 6 back, and reaches the store
    P.store_result(P.self, job, true);
    ck_assert_uint_eq(pk_quota_pinned(Q), 0);
    ck_assert_int_eq(S.results, 1);
    ck_assert_int_eq(S.failed, 0);
}
END_TEST

START_TEST(test_only_what_the_store_pinned_is_charged)
{
    //  a key evicted since its lookup is not pinned, so not charged
    S.evicted_first = true;
    uint64_t job;
    bool pinned[16];
    ck_assert_int_eq(s_pin_n(4, &job, pinned), 0);
    ck_assert(!pinned[0] && pinned[1] && pinned[3]);
    //  its reason is the store's to give (miss_reason), not the quota's
    ck_assert_uint_eq(W[0], PK_MISS_UNKNOWN);
    ck_assert_uint_eq(pk_quota_pinned(Q), 3);
    //  a failing store charges nothing
    S.fail_next = -ENOMEM;
    uint64_t job2 = 0;
    ck_assert_int_eq(s_pin_n(2, &job2, pinned), -ENOMEM);
    ck_assert_uint_eq(pk_quota_pinned(Q), 3);
}
END_TEST

START_TEST(test_prefill_charges_all_or_nothing)
{
    ck_assert_int_eq(pk_quota_charge(Q, 500, 7), -EDQUOT);
    ck_assert_uint_eq(pk_quota_pinned(Q), 0);
    ck_assert_int_eq(pk_quota_charge(Q, 500, 4), 0);
    ck_assert_int_eq(pk_quota_charge(Q, 500, 1), -EEXIST);
    ck_assert_int_eq(pk_quota_charge(Q, 501, 3), -EDQUOT);
    ck_assert_int_eq(pk_quota_charge(Q, 501, 2), 0);
    ck_assert_uint_eq(pk_quota_pinned(Q), 6);
    //  prefill pins leave no room for a lookup's hits
    uint64_t job;
    bool pinned[16];
    ck_assert_int_eq(s_pin_n(1, &job, pinned), 0);
    ck_assert(!pinned[0]);
    //  a refused store is discharged; its result never comes
    pk_quota_discharge(Q, 501);
    ck_assert_uint_eq(pk_quota_pinned(Q), 4);
    pk_quota_discharge(Q, 501);
    ck_assert_uint_eq(pk_quota_pinned(Q), 4);
    //  a prefill job's result goes through the seam like any other
    P.store_result(P.self, 500, false);
    ck_assert_uint_eq(pk_quota_pinned(Q), 0);
    ck_assert_int_eq(S.failed, 1);
    //  a result of a job the quota never saw still reaches the store
    P.store_result(P.self, 777, true);
    ck_assert_int_eq(S.results, 2);
    ck_assert_uint_eq(pk_quota_pinned(Q), 0);
}
END_TEST

START_TEST(test_the_rest_of_the_seam_passes_through)
{
    pk_lookup_ctx_t ctx = { "r", 1, 1 };
    ck_assert_int_eq(P.lookup(P.self, &K[0], &ctx), PK_LOOKUP_HIT);
    P.on_new_request(P.self, &ctx);
    P.on_request_finished(P.self, &ctx);
    ck_assert_int_eq(S.lookups, 1);
    ck_assert_int_eq(S.opened, 1);
    ck_assert_int_eq(S.finished, 1);
    ck_assert_uint_eq(pk_quota_limit(Q), 6);
}
END_TEST

START_TEST(test_destroy_with_jobs_charged)
{
    //  jobs still charged at destroy are freed (LeakSanitizer checks)
    ck_assert_int_eq(pk_quota_charge(Q, 101, 1), 0);
    ck_assert_int_eq(pk_quota_charge(Q, 102, 1), 0);
    uint64_t job;
    bool pinned[16];
    ck_assert_int_eq(s_pin_n(2, &job, pinned), 0);
    ck_assert_uint_eq(pk_quota_pinned(Q), 4);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("quota");
    TCase *tc = tcase_create("quota");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_keys_past_the_quota_are_not_offered);
    tcase_add_test(tc, test_only_what_the_store_pinned_is_charged);
    tcase_add_test(tc, test_prefill_charges_all_or_nothing);
    tcase_add_test(tc, test_the_rest_of_the_seam_passes_through);
    tcase_add_test(tc, test_destroy_with_jobs_charged);
    suite_add_tcase(s, tc);
    return pk_test_run("quota", s);
}
