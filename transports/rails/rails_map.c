/*  rails_map.c: the chunk map of a rails channel (rails_map.h).  */
#include "rails/rails_map.h"

#include <errno.h>
#include <stdlib.h>

//  Fibonacci hashing: the keys are consecutive ids times 8 plus a rail,
//  which a multiply spreads over the high bits.
static size_t
s_slot(const pk_rails_map_t *self, uint64_t key)
{
    return (size_t) ((key * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & self->mask;
}

void
pk_rails_map_fini(pk_rails_map_t *self)
{
    free(self->slots);
    *self = (pk_rails_map_t) { 0 };
}

static void
s_insert(pk_rails_map_t *self, uint64_t key, void *xfer, size_t chunk)
{
    size_t at = s_slot(self, key);
    while (self->slots[at].key)
        at = (at + 1) & self->mask;
    self->slots[at] = (pk_rails_map_entry_t) { key, xfer, chunk };
    self->count++;
}

int
pk_rails_map_reserve(pk_rails_map_t *self, size_t n)
{
    size_t cap = self->slots ? self->mask + 1 : 0;
    if (2 * (self->count + n) <= cap)
        return 0;
    size_t want = cap ? cap : 64;
    while (want < 2 * (self->count + n))
        want *= 2;
    pk_rails_map_entry_t *slots = calloc(want, sizeof *slots);
    if (!slots)
        return -ENOMEM;
    pk_rails_map_t old = *self;
    *self = (pk_rails_map_t) { slots, want - 1, 0 };
    for (size_t i = 0; old.slots && i <= old.mask; i++)
        if (old.slots[i].key)
            s_insert(self, old.slots[i].key, old.slots[i].xfer, old.slots[i].chunk);
    free(old.slots);
    return 0;
}

void
pk_rails_map_put(pk_rails_map_t *self, uint64_t key, void *xfer, size_t chunk)
{
    s_insert(self, key, xfer, chunk);
}

bool
pk_rails_map_take(pk_rails_map_t *self, uint64_t key, void **xfer_p, size_t *chunk_p)
{
    if (!self->slots)
        return false;
    size_t at = s_slot(self, key);
    while (self->slots[at].key && self->slots[at].key != key)
        at = (at + 1) & self->mask;
    if (!self->slots[at].key)
        return false;
    *xfer_p = self->slots[at].xfer;
    *chunk_p = self->slots[at].chunk;
    //  backward shift: each later entry of the run moves into the hole
    //  unless its home slot lies cyclically in (hole, its slot]
    size_t hole = at;
    for (size_t j = (hole + 1) & self->mask; self->slots[j].key; j = (j + 1) & self->mask) {
        size_t home = s_slot(self, self->slots[j].key);
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            self->slots[hole] = self->slots[j];
            hole = j;
        }
    }
    self->slots[hole] = (pk_rails_map_entry_t) { 0 };
    self->count--;
    return true;
}
