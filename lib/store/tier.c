/*  tier.c: the null tier (tier.h), every store's until it is given one.  */
#include "store/tier.h"

#include <errno.h>

static pk_tier_answer_t
s_query(void *self, unsigned ns, const pk_key_t *key)
{
    return PK_TIER_ABSENT;
}

static int
s_promote(void *self, unsigned ns, const pk_key_t *key)
{
    return -ENOENT;
}

static void
s_evicted(void *self, unsigned ns, const pk_key_t *key, const void *bytes, size_t len,
          uint64_t sum)
{
}

static void
s_forget(void *self, unsigned ns, const pk_key_t *key)
{
}

static void
s_each(void *self, pk_tier_key_fn *fn, void *arg)
{
}

static void
s_kick(void *self)
{
}

const pk_tier_ops_t pk_tier_null_ops = {
    .size = sizeof(pk_tier_ops_t),
    .name = "null",
    .query = s_query,
    .promote = s_promote,
    .evicted = s_evicted,
    .forget = s_forget,
    .each = s_each,
    .kick = s_kick,
};
