/*  evicted.c: the recently evicted keys, a table of fingerprints
    (evicted.h).  */
#include "store/evicted.h"

#include <errno.h>
#include <stdlib.h>

#define S_MIN_SLOTS 64
#define S_MAX_SLOTS 65536

int
pk_evicted_init(pk_evicted_t *self, uint64_t num_blocks)
{
    size_t slots = S_MIN_SLOTS;
    while (slots < num_blocks && slots < S_MAX_SLOTS)
        slots *= 2;
    self->slots = calloc(slots, sizeof *self->slots);
    self->mask = slots - 1;
    return self->slots ? 0 : -ENOMEM;
}

void
pk_evicted_fini(pk_evicted_t *self)
{
    free(self->slots);
    self->slots = NULL;
}

//  Never 0 (the empty slot's mark).
static uint64_t
s_print(unsigned ns, const pk_key_t *key)
{
    uint64_t fp = ns ? pk_hash_id(key->hash, ns) : key->hash;
    return fp ? fp : 1;
}

void
pk_evicted_add(pk_evicted_t *self, unsigned ns, const pk_key_t *key)
{
    uint64_t fp = s_print(ns, key);
    self->slots[fp & self->mask] = fp;
}

void
pk_evicted_forget(pk_evicted_t *self, unsigned ns, const pk_key_t *key)
{
    uint64_t fp = s_print(ns, key);
    if (self->slots[fp & self->mask] == fp)
        self->slots[fp & self->mask] = 0;
}

bool
pk_evicted_has(const pk_evicted_t *self, unsigned ns, const pk_key_t *key)
{
    uint64_t fp = s_print(ns, key);
    return self->slots[fp & self->mask] == fp;
}
