/*  test_store.c: the block store against doc/architecture.md's "The block
    store" and the parent seam of server_role.h.

    Each test builds a small store on the virtual clock of
    tests/fixtures/store.h, so leases expire by moving the clock, never by
    sleeping; named pools use a shared-memory name unique to the test's
    process.  The last test hammers one store from four threads and then
    checks that the books balance and that no pinned block was ever
    rewritten under its reader.
*/
#include "store.h"
#include "base/checksum.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

//  ---------------------------------------------------------------------------

START_TEST(test_state_transitions)
{
    pk_store_t *store = sf_store(4, 16, 30);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_MISS);
    uint32_t block = PK_STORE_NO_BLOCK;
    ck_assert_int_eq(sf_reserve(store, 7, 1, &block), 0);
    ck_assert_uint_lt(block, 4);
    sf_expect_blocks(store, 3, 1, 0);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT_PENDING);
    ck_assert_int_eq(sf_commit(store, 7, 1), 0);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT);
    sf_expect_blocks(store, 3, 0, 1);
    pk_store_stats_t st = sf_stats(store);
    ck_assert_uint_eq(st.lookups, 3);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.pending, 1);
    ck_assert_uint_eq(st.hits, 1);
    //  committing again: the key is no longer WRITING
    ck_assert_int_eq(sf_commit(store, 7, 1), -ENOENT);
    pk_store_destroy(&store);
    ck_assert_ptr_null(store);
}
END_TEST

START_TEST(test_writing_key_lookup_and_commit_rules)
{
    pk_store_t *store = sf_store(4, 16, 30);
    pk_key_t keys[2] = { sf_key(1), sf_key(2) };
    uint32_t blocks[2];
    ck_assert_int_eq(pk_store_reserve(store, 7, PK_NS_SHARED, keys, 2, blocks), 0);
    ck_assert_uint_ne(blocks[0], blocks[1]);
    ck_assert_int_eq(sf_lookup(store, 2), PK_LOOKUP_HIT_PENDING);
    //  a WRITING key cannot be pinned, dropped or reserved again
    sf_pins_t p = sf_pin_keys(store, PK_NS_SHARED, (unsigned[]) { 2 }, 1);
    ck_assert(!p.pinned[0]);
    ck_assert_uint_eq(p.blocks[0], PK_STORE_NO_BLOCK);
    ck_assert_int_eq(pk_store_release_job(store, p.job), 0);
    ck_assert_int_eq(pk_store_drop(store, PK_NS_SHARED, &keys[1], 1), -EBUSY);
    uint32_t b;
    ck_assert_int_eq(sf_reserve(store, 8, 2, &b), -EEXIST);
    //  commit is the owner's, and all or nothing
    ck_assert_int_eq(pk_store_commit_sums(store, 8, PK_NS_SHARED, keys, 2, NULL, NULL), -ENOENT);
    pk_key_t mixed[2] = { sf_key(1), sf_key(3) };
    ck_assert_int_eq(pk_store_commit_sums(store, 7, PK_NS_SHARED, mixed, 2, NULL, NULL), -ENOENT);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT_PENDING);
    ck_assert_int_eq(pk_store_commit_sums(store, 7, PK_NS_SHARED, keys, 2, NULL, NULL), 0);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT);
    ck_assert_int_eq(sf_lookup(store, 2), PK_LOOKUP_HIT);
    sf_check_counts(store);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_pin_and_release)
{
    pk_store_t *store = sf_store(4, 16, 30);
    sf_put_range(store, 1, 2);
    sf_pins_t first = sf_pin_keys(store, PK_NS_SHARED, (unsigned[]) { 1, 9, 2 }, 3);
    ck_assert(first.pinned[0] && !first.pinned[1] && first.pinned[2]);
    ck_assert_uint_lt(first.blocks[0], 4);
    ck_assert_uint_eq(first.blocks[1], PK_STORE_NO_BLOCK);
    ck_assert_uint_lt(first.blocks[2], 4);
    //  a second job on the same block: the block stays pinned until both end
    sf_pins_t second = sf_pin_keys(store, PK_NS_SHARED, (unsigned[]) { 1 }, 1);
    ck_assert_uint_ne(first.job, second.job);
    pk_store_stats_t st = sf_stats(store);
    ck_assert_uint_eq(st.pinned, 2);
    ck_assert_uint_eq(st.jobs, 2);
    ck_assert_int_eq(pk_store_release_job(store, first.job), 0);
    pk_key_t keys[3] = { sf_key(1), sf_key(9), sf_key(2) };
    ck_assert_int_eq(pk_store_drop(store, PK_NS_SHARED, &keys[0], 1), -EBUSY);
    ck_assert_uint_eq(sf_stats(store).pinned, 1);
    ck_assert_int_eq(pk_store_release_job(store, second.job), 0);
    ck_assert_int_eq(pk_store_release_job(store, second.job), -ENOENT);
    ck_assert_int_eq(pk_store_release_job(store, 12345), -ENOENT);
    st = sf_stats(store);
    ck_assert_uint_eq(st.pinned, 0);
    ck_assert_uint_eq(st.jobs, 0);
    ck_assert_int_eq(pk_store_drop(store, PK_NS_SHARED, keys, 3), 0);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_MISS);
    ck_assert_int_eq(sf_lookup(store, 2), PK_LOOKUP_MISS);
    ck_assert_uint_eq(sf_stats(store).free, 4);
    pk_store_destroy(&store);
}
END_TEST

//  A commit takes the block's XXH3-64 (base/checksum.h) of the bytes the
//  writer left; a pinned block gives it; one not pinned does not; a store
//  configured without checksums gives none.
START_TEST(test_checksums_taken_at_commit)
{
    pk_store_t *store = sf_store(4, 16, 30);
    uint32_t b;
    ck_assert_int_eq(sf_reserve(store, 7, 1, &b), 0);
    uint8_t *at = (uint8_t *) pk_store_base(store) + (size_t) b * 16;
    memcpy(at, "sixteen bytes..!", 16);
    ck_assert_int_eq(sf_commit(store, 7, 1), 0);
    uint64_t want = pk_checksum("sixteen bytes..!", 16), sum = 0;
    ck_assert_int_eq(pk_store_block_sums(store, &b, 1, &sum), -EINVAL);     //  not pinned
    uint32_t pb;
    uint64_t job = sf_pin(store, 1, &pb);
    ck_assert_uint_eq(pb, b);
    ck_assert_int_eq(pk_store_block_sums(store, &b, 1, &sum), 0);
    ck_assert_uint_eq(sum, want);
    ck_assert_int_eq(pk_store_release_job(store, job), 0);
    pk_store_destroy(&store);

    //  the copy that hashes as it goes (mmap's check) gives the same value,
    //  over pieces of 64 KiB and a short last one
    size_t big = 200 * 1024 + 3;
    uint8_t *from = malloc(big), *to = malloc(big);
    ck_assert(from && to);
    for (size_t i = 0; i < big; i++)
        from[i] = (uint8_t) (i * 31 + 7);
    ck_assert_uint_eq(pk_checksum_copy(to, from, big), pk_checksum(from, big));
    ck_assert_int_eq(memcmp(to, from, big), 0);
    free(from);
    free(to);

    store = sf_store_with(4, 16, &(pk_store_config_t) { 30, 1, true });
    ck_assert_int_eq(sf_put(store, 2), 0);
    job = sf_pin(store, 2, &pb);
    ck_assert_int_eq(pk_store_block_sums(store, &pb, 1, &sum), -ENOTSUP);
    ck_assert_int_eq(pk_store_release_job(store, job), 0);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_pin_reports_key_evicted_since_lookup)
{
    pk_store_t *store = sf_store(2, 16, 30);
    sf_put_range(store, 1, 2);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT);
    ck_assert_int_eq(sf_lookup(store, 2), PK_LOOKUP_HIT);
    //  another actor's put evicts key 1, the older of the two
    ck_assert_int_eq(sf_put(store, 3), 0);
    sf_pins_t p = sf_pin_keys(store, PK_NS_SHARED, (unsigned[]) { 1, 2 }, 2);
    ck_assert(!p.pinned[0]);
    ck_assert_uint_eq(p.blocks[0], PK_STORE_NO_BLOCK);
    ck_assert(p.pinned[1]);
    ck_assert_int_eq(pk_store_release_job(store, p.job), 0);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_eviction_is_lru)
{
    pk_store_t *store = sf_store(3, 16, 30);
    sf_put_range(store, 1, 3);
    //  1 is the oldest, but a lookup makes it the most recently used
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT);
    ck_assert_int_eq(sf_put(store, 4), 0);
    ck_assert_int_eq(sf_lookup(store, 2), PK_LOOKUP_MISS);
    //  a pin is a use too: pin and release 3, so 1 is now the oldest
    ck_assert_int_eq(pk_store_release_job(store, sf_pin(store, 3, NULL)), 0);
    ck_assert_int_eq(sf_put(store, 5), 0);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_MISS);
    ck_assert_int_eq(sf_lookup(store, 3), PK_LOOKUP_HIT);
    ck_assert_int_eq(sf_lookup(store, 4), PK_LOOKUP_HIT);
    ck_assert_int_eq(sf_lookup(store, 5), PK_LOOKUP_HIT);
    pk_store_stats_t st = sf_stats(store);
    ck_assert_uint_eq(st.evictions, 2);
    ck_assert_uint_eq(st.ready, 3);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_pinned_block_never_evicted)
{
    pk_store_t *store = sf_store(2, 32, 30);
    sf_put_range(store, 1, 2);
    uint32_t block;
    uint64_t job = sf_pin(store, 1, &block);
    //  1 is the least recently used, but pinned: 2 goes instead
    uint32_t got;
    ck_assert_int_eq(sf_reserve(store, 7, 3, &got), 0);
    ck_assert_uint_ne(got, block);
    ck_assert_int_eq(sf_lookup(store, 2), PK_LOOKUP_MISS);
    //  nothing left to evict: the pinned block is not taken either
    ck_assert_int_eq(sf_reserve(store, 7, 4, &got), -ENOSPC);
    ck_assert_int_eq(sf_put(store, 4), -ENOSPC);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT);
    const uint8_t *bytes = (const uint8_t *) pk_store_base(store) + (size_t) block * 32;
    for (size_t i = 0; i < 32; i++)
        ck_assert_uint_eq(bytes[i], 1);
    ck_assert_int_eq(pk_store_release_job(store, job), 0);
    //  once released it is evictable again
    ck_assert_int_eq(sf_reserve(store, 7, 4, &got), 0);
    ck_assert_uint_eq(got, block);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_reserve_all_pinned_enospc)
{
    pk_store_t *store = sf_store(4, 8, 30);
    sf_put_range(store, 1, 4);
    sf_pins_t p = sf_pin_keys(store, PK_NS_SHARED, (unsigned[]) { 1, 2, 3, 4 }, 4);
    uint32_t got;
    ck_assert_int_eq(sf_reserve(store, 7, 5, &got), -ENOSPC);
    pk_store_stats_t st = sf_stats(store);
    ck_assert_uint_eq(st.pinned, 4);
    ck_assert_uint_eq(st.evictions, 0);
    ck_assert_uint_eq(st.writing, 0);
    ck_assert_int_eq(pk_store_release_job(store, p.job), 0);
    //  the same with every block WRITING
    pk_store_destroy(&store);
    store = sf_store(4, 8, 30);
    pk_key_t keys[4] = { sf_key(1), sf_key(2), sf_key(3), sf_key(4) };
    uint32_t blocks[4];
    ck_assert_int_eq(pk_store_reserve(store, 7, PK_NS_SHARED, keys, 4, blocks), 0);
    ck_assert_int_eq(sf_reserve(store, 8, 5, &got), -ENOSPC);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_reserve_all_or_nothing)
{
    pk_store_t *store = sf_store(4, 8, 30);
    ck_assert_int_eq(sf_put(store, 2), 0);
    pk_key_t keys[3] = { sf_key(1), sf_key(2), sf_key(3) };
    uint32_t blocks[3];
    ck_assert_int_eq(pk_store_reserve(store, 7, PK_NS_SHARED, keys, 3, blocks), -EEXIST);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_MISS);
    ck_assert_int_eq(sf_lookup(store, 3), PK_LOOKUP_MISS);
    //  a key repeated in one batch is present by its second time
    pk_key_t twice[3] = { sf_key(5), sf_key(6), sf_key(5) };
    ck_assert_int_eq(pk_store_reserve(store, 7, PK_NS_SHARED, twice, 3, blocks), -EEXIST);
    ck_assert_int_eq(sf_lookup(store, 5), PK_LOOKUP_MISS);
    ck_assert_int_eq(sf_lookup(store, 6), PK_LOOKUP_MISS);
    //  four new keys do not fit beside a pinned one
    uint64_t job = sf_pin(store, 2, NULL);
    pk_key_t four[4] = { sf_key(10), sf_key(11), sf_key(12), sf_key(13) };
    uint32_t blocks4[4];
    ck_assert_int_eq(pk_store_reserve(store, 7, PK_NS_SHARED, four, 4, blocks4), -ENOSPC);
    sf_expect_blocks(store, 3, 0, 1);
    ck_assert_int_eq(pk_store_reserve(store, 7, PK_NS_SHARED, four, 3, blocks4), 0);
    ck_assert_int_eq(pk_store_release_job(store, job), 0);
    sf_check_counts(store);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_put_rejects_wrong_length)
{
    pk_store_t *store = sf_store(2, 64, 30);
    uint8_t data[65] = { 0 };
    pk_key_t key = sf_key(1);
    ck_assert_int_eq(pk_store_put(store, PK_NS_SHARED, &key, data, 63), -EINVAL);
    ck_assert_int_eq(pk_store_put(store, PK_NS_SHARED, &key, data, 65), -EINVAL);
    ck_assert_int_eq(pk_store_put(store, PK_NS_SHARED, &key, data, 0), -EINVAL);
    ck_assert_int_eq(pk_store_put(store, PK_NS_SHARED, &key, NULL, 64), -EINVAL);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_MISS);
    ck_assert_int_eq(pk_store_put(store, PK_NS_SHARED, &key, data, 64), 0);
    ck_assert_int_eq(pk_store_put(store, PK_NS_SHARED, &key, data, 64), -EEXIST);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_drop_pinned_ebusy)
{
    pk_store_t *store = sf_store(4, 8, 30);
    sf_put_range(store, 1, 2);
    pk_key_t keys[3] = { sf_key(1), sf_key(2), sf_key(99) };
    uint64_t job = sf_pin(store, 2, NULL);
    ck_assert_int_eq(pk_store_drop(store, PK_NS_SHARED, keys, 3), -EBUSY);
    //  nothing dropped, not even the unpinned key
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT);
    ck_assert_int_eq(sf_lookup(store, 2), PK_LOOKUP_HIT);
    ck_assert_int_eq(pk_store_release_job(store, job), 0);
    ck_assert_int_eq(pk_store_drop(store, PK_NS_SHARED, keys, 3), 0);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_MISS);
    ck_assert_int_eq(sf_lookup(store, 2), PK_LOOKUP_MISS);
    pk_store_stats_t st = sf_stats(store);
    ck_assert_uint_eq(st.free, 4);
    ck_assert_uint_eq(st.evictions, 0);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_lease_expiry_and_release_owner)
{
    pk_store_t *store = sf_store(8, 8, 10);
    sf_now = 100;
    uint32_t b;
    ck_assert_int_eq(sf_reserve(store, 1, 1, &b), 0);
    sf_now = 105;
    ck_assert_int_eq(sf_reserve(store, 1, 2, &b), 0);
    sf_now = 109.5;
    ck_assert_uint_eq(pk_store_expire_leases(store), 0);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT_PENDING);
    sf_now = 110;
    ck_assert_uint_eq(pk_store_expire_leases(store), 1);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_MISS);
    ck_assert_int_eq(sf_lookup(store, 2), PK_LOOKUP_HIT_PENDING);
    ck_assert_int_eq(sf_commit(store, 1, 1), -ENOENT);
    //  a late commit after the deadline fails even without a sweep between
    sf_now = 115;
    ck_assert_int_eq(sf_commit(store, 1, 2), -ENOENT);
    pk_store_stats_t st = sf_stats(store);
    ck_assert_uint_eq(st.expired, 2);
    ck_assert_uint_eq(st.free, 8);

    //  release_owner frees that owner's reservations and no one else's
    pk_key_t keys[3] = { sf_key(10), sf_key(11), sf_key(12) };
    uint32_t blocks[3];
    ck_assert_int_eq(pk_store_reserve(store, 2, PK_NS_SHARED, keys, 2, blocks), 0);
    ck_assert_int_eq(pk_store_reserve(store, 3, PK_NS_SHARED, &keys[2], 1, blocks), 0);
    ck_assert_int_eq(sf_reserve(store, 2, 13, &b), 0);
    ck_assert_int_eq(sf_commit(store, 2, 13), 0);
    ck_assert_uint_eq(pk_store_release_owner(store, 2), 2);
    ck_assert_uint_eq(pk_store_release_owner(store, 2), 0);
    ck_assert_int_eq(sf_lookup(store, 10), PK_LOOKUP_MISS);
    ck_assert_int_eq(sf_lookup(store, 11), PK_LOOKUP_MISS);
    ck_assert_int_eq(sf_lookup(store, 12), PK_LOOKUP_HIT_PENDING);
    ck_assert_int_eq(sf_lookup(store, 13), PK_LOOKUP_HIT);
    ck_assert_int_eq(pk_store_commit_sums(store, 2, PK_NS_SHARED, &keys[2], 1, NULL, NULL),
                     -ENOENT);
    ck_assert_int_eq(sf_commit(store, 3, 12), 0);
    sf_expect_blocks(store, 6, 0, 2);
    ck_assert_uint_eq(sf_stats(store).expired, 2);
    //  committed blocks do not expire
    sf_now = 1000;
    ck_assert_uint_eq(pk_store_expire_leases(store), 0);
    ck_assert_int_eq(sf_lookup(store, 12), PK_LOOKUP_HIT);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_job_ids_one_counter)
{
    pk_store_t *store = sf_store(2, 8, 30);
    ck_assert_int_eq(sf_put(store, 1), 0);
    uint64_t j1 = sf_pin(store, 1, NULL);
    ck_assert_uint_eq(j1, 1);
    uint64_t j2 = pk_store_new_job_id(store);
    ck_assert_uint_eq(j2, 2);
    uint64_t j3 = sf_pin(store, 1, NULL);
    ck_assert_uint_eq(j3, 3);
    //  the engine's store path pins under the id it was given
    pk_key_t key = sf_key(1);
    uint32_t block;
    bool pinned;
    ck_assert_int_eq(pk_store_pin_job(store, PK_NS_SHARED, j2, &key, 1, &block, &pinned), 0);
    ck_assert(pinned);
    ck_assert_int_eq(pk_store_pin_job(store, PK_NS_SHARED, j2, &key, 1, &block, &pinned),
                     -EEXIST);
    ck_assert_int_eq(pk_store_pin_job(store, PK_NS_SHARED, 4, &key, 1, &block, &pinned),
                     -EINVAL);
    ck_assert_int_eq(pk_store_pin_job(store, PK_NS_SHARED, 0, &key, 1, &block, &pinned),
                     -EINVAL);
    pk_store_stats_t st = sf_stats(store);
    ck_assert_uint_eq(st.jobs, 3);
    ck_assert_uint_eq(st.pinned, 1);
    ck_assert_int_eq(pk_store_release_job(store, j1), 0);
    ck_assert_int_eq(pk_store_release_job(store, j2), 0);
    ck_assert_int_eq(pk_store_release_job(store, j3), 0);
    ck_assert_uint_eq(sf_stats(store).pinned, 0);
    ck_assert_uint_eq(pk_store_new_job_id(store), 4);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_shm_lifetime_and_layout)
{
    char name[64];
    sf_name(name, sizeof name);
    int rc = 1;
    pk_store_t *store = pk_store_new(name, 4, 4096, NULL, (pk_clock_t) { 0 }, NULL, NULL,
                                     &rc, NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(store);
    ck_assert_str_eq(pk_store_name(store), name);
    ck_assert_uint_eq(pk_store_num_blocks(store), 4);
    ck_assert_uint_eq(pk_store_block_len(store), 4096);
    //  the name is taken while the store lives
    ck_assert_ptr_null(pk_store_new(name, 4, 4096, NULL, (pk_clock_t) { 0 }, NULL, NULL,
                                    &rc, NULL));
    ck_assert_int_eq(rc, -EEXIST);

    //  the engine's view: a second mapping of the same object
    int fd = shm_open(name, O_RDWR, 0);
    ck_assert_int_ge(fd, 0);
    uint8_t *engine = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(engine, MAP_FAILED);
    close(fd);

    sf_put_range(store, 1, 2);
    sf_pins_t p = sf_pin_keys(store, PK_NS_SHARED, (unsigned[]) { 1, 2 }, 2);
    const uint8_t *base = pk_store_base(store);
    for (unsigned k = 0; k < 2; k++) {
        ck_assert(p.pinned[k]);
        for (size_t i = 0; i < 4096; i++) {
            ck_assert_uint_eq(base[(size_t) p.blocks[k] * 4096 + i], k + 1);
            ck_assert_uint_eq(engine[(size_t) p.blocks[k] * 4096 + i], k + 1);
        }
    }
    //  what the engine writes after a reserve is what the pool holds
    uint32_t b;
    ck_assert_int_eq(sf_reserve(store, 9, 3, &b), 0);
    memset(engine + (size_t) b * 4096, 0x33, 4096);
    ck_assert_int_eq(sf_commit(store, 9, 3), 0);
    ck_assert_uint_eq(base[(size_t) b * 4096 + 4095], 0x33);
    ck_assert_int_eq(pk_store_release_job(store, p.job), 0);
    munmap(engine, 4 * 4096);

    pk_store_destroy(&store);
    sf_expect_unlinked(name);
}
END_TEST

static void
s_log_line(void *arg, const char *line)
{
    snprintf(arg, 256, "%s", line);
}

//  Issue 10: a server killed with -9 leaves its pool in /dev/shm, and the
//  next start on that name refused with "File exists".  The lock died with
//  its owner, so the object is reclaimed: created afresh, and said so.
START_TEST(test_dead_owners_pool_is_reclaimed)
{
    char name[64];
    sf_name(name, sizeof name);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        //  the owner: creates the pool, marks it, and dies without a word
        pk_store_t *store = pk_store_new(name, 4, 4096, NULL, (pk_clock_t) { 0 }, NULL,
                                         NULL, NULL, NULL);
        if (!store)
            _exit(1);
        memset(pk_store_base(store), 0x5a, 4 * 4096);
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    //  what it left behind
    int fd = shm_open(name, O_RDWR, 0);
    ck_assert_msg(fd >= 0, "the dead owner's pool is not there to reclaim");
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    close(fd);

    char line[256] = "", err[PK_ERRLEN] = "";
    int rc = 1;
    pk_store_t *store = pk_store_new(name, 8, 4096, NULL, (pk_clock_t) { 0 },
                                     s_log_line, line, &rc, err);
    ck_assert_msg(store != NULL, "refused: %s", err);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(line, name) && strstr(line, "reclaimed"), "log: \"%s\"", line);
    //  a new object, empty and of the new size: not the dead one reused
    fd = shm_open(name, O_RDWR, 0);
    ck_assert_int_ge(fd, 0);
    struct stat now;
    ck_assert_int_eq(fstat(fd, &now), 0);
    close(fd);
    ck_assert_int_eq(now.st_size, 8 * 4096);
    ck_assert(now.st_ino != st.st_ino || now.st_size != st.st_size);
    const uint8_t *base = pk_store_base(store);
    for (size_t i = 0; i < 8 * 4096; i++)
        ck_assert_uint_eq(base[i], 0);
    ck_assert_int_eq(sf_put(store, 1), 0);
    pk_store_destroy(&store);
    sf_expect_unlinked(name);
}
END_TEST

//  A pool whose owner is alive, in another process, is refused with an
//  error naming it, and left alone; once its owner is gone it is free.
START_TEST(test_live_owners_pool_is_refused)
{
    char name[64];
    sf_name(name, sizeof name);
    int ready[2], done[2];
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(done), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(ready[0]);
        close(done[1]);
        pk_store_t *store = pk_store_new(name, 4, 4096, NULL, (pk_clock_t) { 0 }, NULL,
                                         NULL, NULL, NULL);
        char c = store ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        //  held until the parent says so
        if (read(done[0], &c, 1) < 0)
            _exit(1);
        pk_store_destroy(&store);
        _exit(0);
    }
    close(ready[1]);
    close(done[0]);
    char c = 0;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    ck_assert_int_eq(c, 'y');

    char line[256] = "", err[PK_ERRLEN] = "";
    int rc = 1;
    ck_assert_ptr_null(pk_store_new(name, 4, 4096, NULL, (pk_clock_t) { 0 },
                                    s_log_line, line, &rc, err));
    ck_assert_int_eq(rc, -EEXIST);
    ck_assert_msg(strstr(err, name) && strstr(err, "live"), "error: \"%s\"", err);
    ck_assert_str_eq(line, "");
    //  the live owner's object is untouched
    int fd = shm_open(name, O_RDWR, 0);
    ck_assert_int_ge(fd, 0);
    close(fd);

    ck_assert_int_eq(write(done[1], "x", 1), 1);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(ready[0]);
    close(done[1]);
    pk_store_t *store = pk_store_new(name, 4, 4096, NULL, (pk_clock_t) { 0 },
                                     s_log_line, line, &rc, err);
    ck_assert_msg(store != NULL, "refused: %s", err);
    ck_assert_str_eq(line, "");         //  removed by its owner: nothing to reclaim
    pk_store_destroy(&store);
}
END_TEST

//  pk_store_new refuses its arguments: no store; what it set *rc_p to.
static int
s_refused(const char *name, uint64_t num_blocks, uint64_t block_len,
          const pk_store_config_t *config)
{
    int rc = 0;
    ck_assert_ptr_null(pk_store_new(name, num_blocks, block_len, config, (pk_clock_t) { 0 },
                                    NULL, NULL, &rc, NULL));
    return rc;
}

START_TEST(test_invalid_arguments)
{
    ck_assert_int_eq(s_refused(NULL, 0, 8, NULL), -EINVAL);
    ck_assert_int_eq(s_refused(NULL, (UINT64_C(1) << 31) + 1, 8, NULL), -EINVAL);
    ck_assert_int_eq(s_refused(NULL, 4, 0, NULL), -EINVAL);
    //  2^31 * 2^33 wraps 64 bits; 2^31 * 2^32 does not fit an off_t
    ck_assert_int_eq(s_refused(NULL, UINT64_C(1) << 31, UINT64_C(1) << 33, NULL), -EINVAL);
    ck_assert_int_eq(s_refused(NULL, UINT64_C(1) << 31, UINT64_C(1) << 32, NULL), -EINVAL);
    ck_assert_int_eq(s_refused(NULL, 4, 8, &(pk_store_config_t) { 0 }), -EINVAL);
    ck_assert_int_lt(s_refused("no-slash/inside/", 4, 8, NULL), 0);
    pk_store_destroy(NULL);

    //  the default clock and config
    pk_store_t *store = pk_store_new(NULL, 4, 8, NULL, (pk_clock_t) { 0 }, NULL, NULL, NULL,
                                     NULL);
    ck_assert_ptr_nonnull(store);
    ck_assert_ptr_null(pk_store_name(store));
    pk_key_t empty = { (const uint8_t *) "", 0, 0 };
    static uint8_t big[PK_MAX_KEY_BYTES + 1];
    pk_key_t huge = pk_key_make(big, sizeof big);
    pk_key_t longest = pk_key_make(big, PK_MAX_KEY_BYTES);
    uint32_t b;
    bool pinned;
    uint64_t job;
    ck_assert_int_eq(pk_store_reserve(store, 1, PK_NS_SHARED, &empty, 1, &b), -EINVAL);
    ck_assert_int_eq(pk_store_reserve(store, 1, PK_NS_SHARED, &huge, 1, &b), -EINVAL);
    ck_assert_int_eq(pk_store_reserve(store, 1, PK_NS_SHARED, NULL, 1, &b), -EINVAL);
    ck_assert_int_eq(pk_store_reserve(store, PK_STORE_OWNER_PUT, PK_NS_SHARED, &longest, 1, &b),
                     -EINVAL);
    ck_assert_int_eq(pk_store_commit_sums(store, 1, PK_NS_SHARED, &huge, 1, NULL, NULL), -EINVAL);
    ck_assert_int_eq(pk_store_drop(store, PK_NS_SHARED, &empty, 1), -EINVAL);
    ck_assert_int_eq(pk_store_pin(store, PK_NS_SHARED, &huge, 1, &job, &b, &pinned), -EINVAL);
    ck_assert_int_eq(pk_store_pin(store, PK_NS_SHARED, &longest, 1, NULL, &b, &pinned),
                     -EINVAL);
    ck_assert_int_eq(pk_store_lookup(store, PK_NS_SHARED, &huge), PK_LOOKUP_MISS);
    //  the longest key is fine, and kept by copy
    ck_assert_int_eq(pk_store_reserve(store, 1, PK_NS_SHARED, &longest, 1, &b), 0);
    ck_assert_int_eq(pk_store_commit_sums(store, 1, PK_NS_SHARED, &longest, 1, NULL, NULL), 0);
    static uint8_t copy[PK_MAX_KEY_BYTES];
    memcpy(copy, big, sizeof copy);
    big[0] = 1;
    pk_key_t same = pk_key_make(copy, sizeof copy);
    ck_assert_int_eq(pk_store_lookup(store, PK_NS_SHARED, &same), PK_LOOKUP_HIT);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_parent_seam)
{
    pk_store_t *store = sf_store(4, 8, 30);
    ck_assert_int_eq(sf_put(store, 1), 0);
    pk_parent_t parent = pk_store_parent(store);
    pk_lookup_ctx_t ctx = { "req", 0, 1 };
    pk_store_stats_t st;
    parent.on_new_request(parent.self, &ctx);
    parent.on_new_request(parent.self, &ctx);
    st = sf_stats(store);
    ck_assert_uint_eq(st.open_lookups, 2);
    pk_key_t keys[2] = { sf_key(1), sf_key(2) };
    ck_assert_int_eq(parent.lookup(parent.self, &keys[0], &ctx), PK_LOOKUP_HIT);
    ck_assert_int_eq(parent.lookup(parent.self, &keys[1], &ctx), PK_LOOKUP_MISS);
    uint64_t job = 0;
    uint32_t blocks[2];
    bool pinned[2];
    ck_assert_int_eq(parent.create_store_job(parent.self, &ctx, keys, 2, &job, blocks, pinned, NULL),
                     0);
    ck_assert(pinned[0] && !pinned[1]);
    st = sf_stats(store);
    ck_assert_uint_eq(st.pinned, 1);
    parent.store_result(parent.self, job, false);
    parent.on_request_finished(parent.self, &ctx);
    parent.on_request_finished(parent.self, &ctx);
    st = sf_stats(store);
    ck_assert_uint_eq(st.pinned, 0);
    ck_assert_uint_eq(st.jobs, 0);
    ck_assert_uint_eq(st.open_lookups, 0);
    pk_store_destroy(&store);
}
END_TEST

//  ---------------------------------------------------------------------------
//  Four actors on one store.  Each block's bytes name the key written into
//  it; while a reader holds a pin, those bytes must not change.

#define S_THREADS 4
#define S_ITERS 4000
#define S_POOL 16
#define S_HOT 40                //  keys shared by every thread
#define S_BLEN 64

//  Made before the threads start: the workers only read it.
static pk_key_t s_shared[S_HOT + S_POOL];

typedef struct {
    pk_store_t *store;
    unsigned id;
    unsigned seed;
    unsigned corrupt;
    unsigned pins, hits;
} s_worker_t;

static void
s_fill(uint8_t *block, unsigned key)
{
    for (size_t i = 0; i < S_BLEN; i++)
        block[i] = (uint8_t) (key * 7 + i);
}

static bool
s_holds(const uint8_t *block, unsigned key)
{
    for (size_t i = 0; i < S_BLEN; i++)
        if (block[i] != (uint8_t) (key * 7 + i))
            return false;
    return true;
}

typedef struct {
    uint64_t job;
    unsigned keys[2];
    uint32_t blocks[2];
    bool pinned[2];
} s_held_t;

static void
s_release(s_worker_t *w, s_held_t *held)
{
    uint8_t *base = pk_store_base(w->store);
    for (int k = 0; k < 2; k++)
        if (held->pinned[k] && !s_holds(base + (size_t) held->blocks[k] * S_BLEN, held->keys[k]))
            w->corrupt++;
    if (pk_store_release_job(w->store, held->job))
        w->corrupt++;
    held->job = 0;
}

static void *
s_worker(void *arg)
{
    s_worker_t *w = arg;
    uint8_t *base = pk_store_base(w->store);
    s_held_t held[2] = { { 0 } };
    for (unsigned it = 0; it < S_ITERS; it++) {
        unsigned a = (unsigned) rand_r(&w->seed) % S_HOT;
        unsigned b = (unsigned) rand_r(&w->seed) % S_HOT;
        pk_key_t keys[2] = { s_shared[a], s_shared[b] };
        switch (rand_r(&w->seed) % 6) {
        case 0:
        case 1: {
            //  the engine's path: reserve, write, commit (or walk away)
            uint32_t blk;
            if (pk_store_reserve(w->store, w->id, PK_NS_SHARED, &keys[0], 1, &blk) == 0) {
                s_fill(base + (size_t) blk * S_BLEN, a);
                if (rand_r(&w->seed) % 8)
                    pk_store_commit_sums(w->store, w->id, PK_NS_SHARED, &keys[0], 1, NULL, NULL);
                else
                    pk_store_release_owner(w->store, w->id);
            }
            break;
        }
        case 2:
            if (pk_store_lookup(w->store, PK_NS_SHARED, &keys[0]) == PK_LOOKUP_HIT)
                w->hits++;
            break;
        case 3:
        case 4: {
            //  a remote lookup's pin, held across a few iterations
            s_held_t *h = &held[rand_r(&w->seed) % 2];
            if (h->job)
                s_release(w, h);
            h->keys[0] = a;
            h->keys[1] = b;
            if (pk_store_pin(w->store, PK_NS_SHARED, keys, 2, &h->job, h->blocks, h->pinned))
                w->corrupt++;
            w->pins += h->pinned[0] + h->pinned[1];
            break;
        }
        default:
            pk_store_drop(w->store, PK_NS_SHARED, &keys[0], 1);
            break;
        }
    }
    for (int k = 0; k < 2; k++)
        if (held[k].job)
            s_release(w, &held[k]);
    return NULL;
}

//  The directory's feed (issue 14): the watch hears every change of the
//  READY set, in order: commit and put add, drop and eviction remove, an
//  expired lease or a refused drop is no change; a snapshot lists what is
//  READY after its begin.
typedef struct {
    char log[512];
    int begins;
} s_watch_t;

static void
s_watch(void *arg, bool added, const pk_key_t *key)
{
    s_watch_t *w = arg;
    char item[16];
    snprintf(item, sizeof item, "%c%d ", added ? '+' : '-', key->bytes[4]);
    strncat(w->log, item, sizeof w->log - strlen(w->log) - 1);
}

static void
s_watch_begin(void *arg)
{
    s_watch_t *w = arg;
    w->begins++;
    w->log[0] = '\0';
}

START_TEST(test_watch_tells_every_change)
{
    pk_store_t *store = sf_store(2, 16, 1);
    s_watch_t w = { "", 0 };
    pk_store_watch(store, s_watch, &w);
    uint32_t block;
    ck_assert_int_eq(sf_put(store, 1), 0);
    ck_assert_int_eq(sf_reserve(store, 7, 2, &block), 0);
    ck_assert_int_eq(sf_commit(store, 7, 2), 0);
    ck_assert_int_eq(sf_put(store, 3), 0);              //  evicts 1, the oldest
    ck_assert_int_eq(sf_reserve(store, 7, 4, &block), 0);  //  evicts 2
    sf_now = 2;                                         //  its lease runs out: no change
    ck_assert_uint_eq(pk_store_expire_leases(store), 1);
    pk_key_t three = sf_key(3);
    uint64_t job = sf_pin(store, 3, NULL);
    //  refused: no change
    ck_assert_int_eq(pk_store_drop(store, PK_NS_SHARED, &three, 1), -EBUSY);
    ck_assert_int_eq(pk_store_release_job(store, job), 0);
    ck_assert_int_eq(pk_store_drop(store, PK_NS_SHARED, &three, 1), 0);
    ck_assert_str_eq(w.log, "+1 +2 -1 +3 -2 -3 ");
    ck_assert_int_eq(sf_put(store, 5), 0);
    pk_store_snapshot(store, s_watch_begin, s_watch, &w);
    ck_assert_int_eq(w.begins, 1);
    ck_assert_str_eq(w.log, "+5 ");
    pk_store_watch(store, NULL, NULL);
    ck_assert_int_eq(sf_put(store, 6), 0);
    ck_assert_str_eq(w.log, "+5 ");
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_concurrent_actors)
{
    pk_store_t *store = pk_store_new(NULL, S_POOL, S_BLEN, NULL, (pk_clock_t) { 0 }, NULL,
                                     NULL, NULL, NULL);
    ck_assert_ptr_nonnull(store);
    for (unsigned i = 0; i < S_HOT + S_POOL; i++)
        s_shared[i] = sf_key(i);
    s_worker_t workers[S_THREADS];
    pthread_t threads[S_THREADS];
    for (unsigned i = 0; i < S_THREADS; i++) {
        workers[i] = (s_worker_t) { store, i + 1, 12345u * (i + 1), 0, 0, 0 };
        ck_assert_int_eq(pthread_create(&threads[i], NULL, s_worker, &workers[i]), 0);
    }
    unsigned pins = 0, hits = 0;
    for (unsigned i = 0; i < S_THREADS; i++) {
        ck_assert_int_eq(pthread_join(threads[i], NULL), 0);
        ck_assert_uint_eq(workers[i].corrupt, 0);
        pins += workers[i].pins;
        hits += workers[i].hits;
    }
    //  the run exercised what it claims to
    ck_assert_uint_gt(pins, 100);
    ck_assert_uint_gt(hits, 100);
    pk_store_stats_t st = sf_stats(store);
    ck_assert_uint_eq(st.free + st.writing + st.ready, S_POOL);
    ck_assert_uint_eq(st.pinned, 0);
    ck_assert_uint_eq(st.jobs, 0);
    ck_assert_uint_eq(st.writing, 0);
    ck_assert_uint_gt(st.evictions, 0);
    //  with every pin gone, every READY block is evictable again
    uint32_t blocks[S_POOL];
    ck_assert_int_eq(pk_store_reserve(store, 99, PK_NS_SHARED, &s_shared[S_HOT], S_POOL,
                                      blocks), 0);
    pk_store_destroy(&store);
}
END_TEST

//  ---------------------------------------------------------------------------
//  The tier seam (tier.h), through a tier of the test's: it records what
//  the pool evicted (up to S_TIER_MAX blocks, kept by value), answers
//  PRESENT for a key it holds, PENDING once asked to promote it, and
//  lands a promotion only when the test says so (s_tier_land), through
//  the store's ordinary write path, as tier.h prescribes.

#define S_TIER_MAX 8

typedef struct {
    unsigned ns;
    uint8_t key[8];
    uint8_t bytes[16];
    uint64_t sum;
    bool moving;                //  asked to promote, not landed yet
} s_spilled_t;

typedef struct {
    pk_store_t *store;
    s_spilled_t held[S_TIER_MAX];
    size_t nheld;
    size_t evictions, promotes, forgets, kicks;
    char queries[128];          //  "ns:key " per query, in order
} s_tier_t;

static s_spilled_t *
s_tier_find(s_tier_t *t, unsigned ns, const pk_key_t *key)
{
    for (size_t i = 0; i < t->nheld; i++)
        if (t->held[i].ns == ns && key->len == sizeof t->held[i].key
            && memcmp(key->bytes, t->held[i].key, key->len) == 0)
            return &t->held[i];
    return NULL;
}

static pk_tier_answer_t
s_tier_query(void *self, unsigned ns, const pk_key_t *key)
{
    s_tier_t *t = self;
    char item[16];
    snprintf(item, sizeof item, "%u:%d ", ns, key->bytes[4]);
    strncat(t->queries, item, sizeof t->queries - strlen(t->queries) - 1);
    //  the hash is pk_key_make's, whatever the namespace
    ck_assert_uint_eq(key->hash, pk_key_hash(key->bytes, key->len));
    s_spilled_t *s = s_tier_find(t, ns, key);
    return !s ? PK_TIER_ABSENT : s->moving ? PK_TIER_PENDING : PK_TIER_PRESENT;
}

static int
s_tier_promote(void *self, unsigned ns, const pk_key_t *key)
{
    s_tier_t *t = self;
    s_spilled_t *s = s_tier_find(t, ns, key);
    ck_assert_ptr_nonnull(s);
    ck_assert(!s->moving);
    s->moving = true;
    t->promotes++;
    return 0;
}

static void
s_tier_evicted(void *self, unsigned ns, const pk_key_t *key, const void *bytes, size_t len,
               uint64_t sum)
{
    s_tier_t *t = self;
    ck_assert_uint_lt(t->nheld, S_TIER_MAX);
    ck_assert_uint_eq(key->len, sizeof t->held[0].key);
    ck_assert_uint_eq(len, sizeof t->held[0].bytes);
    s_spilled_t *s = &t->held[t->nheld++];
    *s = (s_spilled_t) { .ns = ns, .sum = sum };
    memcpy(s->key, key->bytes, key->len);
    memcpy(s->bytes, bytes, len);
    t->evictions++;
}

static void
s_tier_forget(void *self, unsigned ns, const pk_key_t *key)
{
    s_tier_t *t = self;
    s_spilled_t *s = s_tier_find(t, ns, key);
    if (s)
        *s = t->held[--t->nheld];
    t->forgets++;
}

static void
s_tier_kick(void *self)
{
    s_tier_t *t = self;
    t->kicks++;
}

static const pk_tier_ops_t s_tier_ops = {
    .size = sizeof(pk_tier_ops_t),
    .name = "test",
    .query = s_tier_query,
    .promote = s_tier_promote,
    .evicted = s_tier_evicted,
    .forget = s_tier_forget,
    .kick = s_tier_kick,
};

//  The tier's read came back: s lands in the pool with the checksum it
//  left with, and leaves the tier.
static int
s_tier_land(s_tier_t *t, s_spilled_t *s)
{
    pk_key_t key = pk_key_make(s->key, sizeof s->key);
    uint32_t b;
    bool given = true;
    size_t len = (size_t) pk_store_block_len(t->store);
    int rc = pk_store_reserve(t->store, PK_STORE_OWNER_TIER, s->ns, &key, 1, &b);
    if (rc)
        return rc;
    memcpy((uint8_t *) pk_store_base(t->store) + (size_t) b * len, s->bytes, len);
    uint64_t sum = s->sum;
    rc = pk_store_commit_sums(t->store, PK_STORE_OWNER_TIER, s->ns, &key, 1, &sum, &given);
    *s = t->held[--t->nheld];
    return rc;
}

//  store under the test's tier t, which it returns.
static pk_store_t *
s_tiered(s_tier_t *t, pk_store_t *store)
{
    *t = (s_tier_t) { .store = store };
    ck_assert_int_eq(pk_store_set_tier(store, &s_tier_ops, t), 0);
    return store;
}

START_TEST(test_tier_takes_what_the_pool_evicts)
{
    s_tier_t t;
    pk_store_t *store = s_tiered(&t, sf_store(2, 16, 30));
    sf_put_range(store, 1, 2);
    uint64_t job = sf_pin(store, 2, NULL);
    ck_assert_uint_eq(t.evictions, 0);                  //  room: nothing evicted
    ck_assert_int_eq(sf_put(store, 3), 0);              //  evicts 1, the only unpinned
    ck_assert_uint_eq(t.evictions, 1);
    ck_assert_uint_eq(t.held[0].ns, PK_NS_SHARED);
    ck_assert_int_eq(t.held[0].key[4], 1);
    uint8_t ones[16];
    sf_block(1, ones, sizeof ones);
    ck_assert_mem_eq(t.held[0].bytes, ones, sizeof ones);
    ck_assert_uint_eq(t.held[0].sum, pk_checksum(ones, sizeof ones));
    //  a drop is no eviction: the tier forgets the key, it takes no bytes
    ck_assert_int_eq(pk_store_release_job(store, job), 0);
    pk_key_t two = sf_key(2);
    ck_assert_int_eq(pk_store_drop(store, PK_NS_SHARED, &two, 1), 0);
    ck_assert_uint_eq(t.evictions, 1);
    ck_assert_uint_eq(t.forgets, 1);
    ck_assert_uint_eq(sf_stats(store).evictions, 1);
    //  a table shorter than the ops the store calls is refused
    pk_tier_ops_t old = s_tier_ops;
    old.size = offsetof(pk_tier_ops_t, forget);
    ck_assert_int_eq(pk_store_set_tier(store, &old, &t), -EINVAL);
    //  back to the null tier: evictions go nowhere
    ck_assert_int_eq(pk_store_set_tier(store, NULL, NULL), 0);
    sf_put_range(store, 4, 5);
    ck_assert_uint_eq(t.evictions, 1);
    ck_assert_uint_eq(sf_stats(store).evictions, 2);
    pk_store_destroy(&store);
}
END_TEST

START_TEST(test_tier_answers_an_absent_key)
{
    s_tier_t t;
    pk_store_t *store = s_tiered(&t, sf_store(2, 16, 30));
    sf_put_range(store, 1, 3);                          //  1 goes to the tier
    ck_assert_uint_eq(t.nheld, 1);
    //  present in the tier: the store promotes it and answers pending
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT_PENDING);
    ck_assert_uint_eq(t.promotes, 1);
    ck_assert(t.held[0].moving);
    //  the read starts at the kick that ends the caller's pass, once
    ck_assert_uint_eq(t.kicks, 0);
    pk_store_kick(store);
    ck_assert_uint_eq(t.kicks, 1);
    pk_store_kick(store);
    ck_assert_uint_eq(t.kicks, 1);                      //  nothing promoted since
    //  pending in the tier: pending, and no second promotion (no kick due)
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT_PENDING);
    ck_assert_uint_eq(t.promotes, 1);
    pk_store_kick(store);
    ck_assert_uint_eq(t.kicks, 1);
    //  a key in neither: a miss; a key in the pool: the tier is not asked
    ck_assert_int_eq(sf_lookup(store, 9), PK_LOOKUP_MISS);
    ck_assert_int_eq(sf_lookup(store, 3), PK_LOOKUP_HIT);
    //  (the first: the eviction's, whether the tier took the key, so that
    //  the directory keeps listing it)
    ck_assert_str_eq(t.queries, "0:1 0:1 0:1 0:9 ");
    //  not pinnable while it is below the pool
    sf_pins_t p = sf_pin_keys(store, PK_NS_SHARED, (unsigned[]) { 1 }, 1);
    ck_assert(!p.pinned[0]);
    ck_assert_int_eq(pk_store_release_job(store, p.job), 0);
    //  it arrives (evicting 2, the oldest, into the tier): a hit, with
    //  the bytes and the checksum it left with
    ck_assert_int_eq(s_tier_land(&t, &t.held[0]), 0);
    ck_assert_uint_eq(t.evictions, 2);
    ck_assert_int_eq(sf_lookup(store, 1), PK_LOOKUP_HIT);
    ck_assert_str_eq(t.queries, "0:1 0:1 0:1 0:9 0:2 ");
    uint64_t sum;
    uint32_t block;
    uint64_t job = sf_pin(store, 1, &block);
    ck_assert_int_eq(pk_store_block_sums(store, &block, 1, &sum), 0);
    uint8_t ones[16];
    sf_block(1, ones, sizeof ones);
    ck_assert_uint_eq(sum, pk_checksum(ones, sizeof ones));
    ck_assert_mem_eq((uint8_t *) pk_store_base(store) + (size_t) block * 16, ones, 16);
    ck_assert_int_eq(pk_store_release_job(store, job), 0);
    pk_store_stats_t st = sf_stats(store);
    ck_assert_uint_eq(st.pending, 2);
    ck_assert_uint_eq(st.misses, 1);
    sf_check_counts(store);
    pk_store_destroy(&store);
}
END_TEST

//  A reader in a namespace asks the tier for its own and the shared one,
//  always both, as it probes the index; another namespace's spilled key
//  is as absent as any.
START_TEST(test_tier_sees_namespaces_as_the_index_does)
{
    s_tier_t t;
    pk_store_t *store = s_tiered(&t, sf_store_with(1, 16, &(pk_store_config_t) { 30, 3, false }));
    uint8_t data[16] = { 0 };
    pk_key_t k1 = sf_key(1), k2 = sf_key(2), k3 = sf_key(3);
    ck_assert_int_eq(pk_store_put(store, 2, &k1, data, sizeof data), 0);
    ck_assert_int_eq(pk_store_put(store, PK_NS_SHARED, &k2, data, sizeof data), 0);
    ck_assert_int_eq(pk_store_put(store, 1, &k3, data, sizeof data), 0);
    ck_assert_uint_eq(t.nheld, 2);                      //  2:1 and 0:2 spilled
    ck_assert_uint_eq(t.held[0].ns, 2);
    ck_assert_uint_eq(t.held[1].ns, PK_NS_SHARED);
    ck_assert_int_eq(pk_store_lookup(store, 1, &k1), PK_LOOKUP_MISS);   //  beta's
    ck_assert_int_eq(pk_store_lookup(store, 1, &k2), PK_LOOKUP_HIT_PENDING);  //  shared's
    //  the evictions' two first (2:1 and 0:2: did the tier take them)
    ck_assert_str_eq(t.queries, "2:1 0:2 1:1 0:1 1:2 0:2 ");
    ck_assert_uint_eq(t.promotes, 1);
    ck_assert(t.held[1].moving);
    pk_store_destroy(&store);
}
END_TEST

//  Why a miss is one (issue 36, point 4), as a reader in a namespace may
//  know it: a key reserved and not committed is being written; one the
//  pool evicted is "evicted" while remembered, "absent" once committed
//  again and dropped, or once other evictions took its slot; another
//  namespace's key is absent whatever its state.
START_TEST(test_miss_reasons)
{
    pk_store_t *store = sf_store_with(2, 16, &(pk_store_config_t) { 30, 3, false });
    pk_key_t k1 = sf_key(1), k2 = sf_key(2), k3 = sf_key(3), k4 = sf_key(4);
    uint8_t data[16] = { 0 };
    ck_assert_int_eq(pk_store_miss_reason(store, 0, &k1), PK_MISS_ABSENT);
    //  being written, in shared: every namespace's reader sees it
    uint32_t b;
    ck_assert_int_eq(pk_store_reserve(store, 7, PK_NS_SHARED, &k1, 1, &b), 0);
    ck_assert_int_eq(pk_store_miss_reason(store, 0, &k1), PK_MISS_WRITING);
    ck_assert_int_eq(pk_store_miss_reason(store, 2, &k1), PK_MISS_WRITING);
    ck_assert_int_eq(pk_store_commit_sums(store, 7, PK_NS_SHARED, &k1, 1, NULL, NULL), 0);
    //  being written in namespace 1: absent to namespace 2
    ck_assert_int_eq(pk_store_reserve(store, 8, 1, &k2, 1, &b), 0);
    ck_assert_int_eq(pk_store_miss_reason(store, 1, &k2), PK_MISS_WRITING);
    ck_assert_int_eq(pk_store_miss_reason(store, 2, &k2), PK_MISS_ABSENT);
    ck_assert_int_eq(pk_store_miss_reason(store, 0, &k2), PK_MISS_ABSENT);
    ck_assert_int_eq(pk_store_commit_sums(store, 8, 1, &k2, 1, NULL, NULL), 0);
    //  a put evicts 1 (shared), the oldest: evicted to every reader
    ck_assert_int_eq(pk_store_put(store, 2, &k3, data, sizeof data), 0);
    ck_assert_int_eq(sf_stats(store).evictions, 1);
    ck_assert_int_eq(pk_store_lookup(store, 1, &k1), PK_LOOKUP_MISS);
    ck_assert_int_eq(pk_store_miss_reason(store, 1, &k1), PK_MISS_EVICTED);
    ck_assert_int_eq(pk_store_miss_reason(store, 0, &k1), PK_MISS_EVICTED);
    //  another put evicts 2 of namespace 1: evicted to 1, absent to 2 and shared
    ck_assert_int_eq(pk_store_put(store, 2, &k4, data, sizeof data), 0);
    ck_assert_int_eq(pk_store_miss_reason(store, 1, &k2), PK_MISS_EVICTED);
    ck_assert_int_eq(pk_store_miss_reason(store, 2, &k2), PK_MISS_ABSENT);
    ck_assert_int_eq(pk_store_miss_reason(store, 0, &k2), PK_MISS_ABSENT);
    //  held again, then dropped: absent, not evicted
    ck_assert_int_eq(pk_store_put(store, PK_NS_SHARED, &k1, data, sizeof data), 0);
    ck_assert_int_eq(pk_store_drop(store, PK_NS_SHARED, &k1, 1), 0);
    ck_assert_int_eq(pk_store_miss_reason(store, 0, &k1), PK_MISS_ABSENT);
    //  no reason is a lookup
    ck_assert_uint_eq(sf_stats(store).lookups, 1);
    //  the parent seam says the same, in the shared namespace
    pk_parent_t parent = pk_store_parent(store);
    pk_lookup_ctx_t ctx = { "r", 1, 1 };
    ck_assert_int_eq(parent.miss_reason(parent.self, &k2, &ctx), PK_MISS_ABSENT);
    //  the put of 1 evicted 3 of namespace 2: evicted to 2 alone
    ck_assert_int_eq(pk_store_miss_reason(store, 2, &k3), PK_MISS_EVICTED);
    ck_assert_int_eq(parent.miss_reason(parent.self, &k3, &ctx), PK_MISS_ABSENT);
    //  5 and 6 in shared (evicting 4), then 7 evicts 5
    sf_put_range(store, 5, 7);
    pk_key_t k5 = sf_key(5);
    ck_assert_int_eq(parent.miss_reason(parent.self, &k5, &ctx), PK_MISS_EVICTED);
    pk_store_destroy(&store);
}
END_TEST

//  The memory is bounded: a pool of 2 blocks remembers 64 evictions at
//  most (evicted.h), so of 248 evicted keys at most 64 read "evicted",
//  the latest among them, and the rest absent.
START_TEST(test_evictions_are_forgotten)
{
    pk_store_t *store = sf_store(2, 16, 30);
    sf_put_range(store, 1, 250);                            //  evicts 1..248
    ck_assert_uint_eq(sf_stats(store).evictions, 248);
    size_t remembered = 0;
    for (unsigned i = 1; i <= 248; i++) {
        pk_key_t k = sf_key(i);
        remembered += pk_store_miss_reason(store, 0, &k) == PK_MISS_EVICTED;
    }
    ck_assert_uint_le(remembered, 64);
    ck_assert_uint_ge(remembered, 1);
    pk_key_t k248 = sf_key(248);
    ck_assert_int_eq(pk_store_miss_reason(store, 0, &k248), PK_MISS_EVICTED);
    pk_store_destroy(&store);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("store");
    tcase_add_test(tc, test_state_transitions);
    tcase_add_test(tc, test_writing_key_lookup_and_commit_rules);
    tcase_add_test(tc, test_pin_and_release);
    tcase_add_test(tc, test_checksums_taken_at_commit);
    tcase_add_test(tc, test_pin_reports_key_evicted_since_lookup);
    tcase_add_test(tc, test_eviction_is_lru);
    tcase_add_test(tc, test_pinned_block_never_evicted);
    tcase_add_test(tc, test_reserve_all_pinned_enospc);
    tcase_add_test(tc, test_reserve_all_or_nothing);
    tcase_add_test(tc, test_put_rejects_wrong_length);
    tcase_add_test(tc, test_drop_pinned_ebusy);
    tcase_add_test(tc, test_lease_expiry_and_release_owner);
    tcase_add_test(tc, test_job_ids_one_counter);
    tcase_add_test(tc, test_shm_lifetime_and_layout);
    tcase_add_test(tc, test_dead_owners_pool_is_reclaimed);
    tcase_add_test(tc, test_live_owners_pool_is_refused);
    tcase_add_test(tc, test_invalid_arguments);
    tcase_add_test(tc, test_parent_seam);
    tcase_add_test(tc, test_concurrent_actors);
    tcase_add_test(tc, test_watch_tells_every_change);
    tcase_add_test(tc, test_tier_takes_what_the_pool_evicts);
    tcase_add_test(tc, test_tier_answers_an_absent_key);
    tcase_add_test(tc, test_tier_sees_namespaces_as_the_index_does);
    tcase_add_test(tc, test_miss_reasons);
    tcase_add_test(tc, test_evictions_are_forgotten);
    suite_add_tcase(s, tc);
    return pk_test_run("store", s);
}
