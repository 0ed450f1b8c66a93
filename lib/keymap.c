/*  keymap.c: open addressing over the key's precomputed SipHash.  The load
    factor stays at or under one half, so probes are short and a removal's
    backward shift touches few slots.  */
#include "keymap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void
pk_keymap_fini(pk_keymap_t *self)
{
    free(self->slots);
    *self = (pk_keymap_t) PK_KEYMAP_INIT;
}

void
pk_keymap_clear(pk_keymap_t *self)
{
    if (self->slots && self->count)
        memset(self->slots, 0, (self->mask + 1) * sizeof *self->slots);
    self->count = 0;
}

static size_t
s_home(const pk_keymap_t *self, uint64_t hash)
{
    return (size_t) hash & self->mask;
}

pk_keymap_entry_t *
pk_keymap_find(const pk_keymap_t *self, const pk_key_t *key)
{
    if (!self->count)
        return NULL;
    for (size_t at = s_home(self, key->hash);; at = (at + 1) & self->mask) {
        pk_keymap_entry_t *e = &self->slots[at];
        if (!e->key.bytes)
            return NULL;
        if (pk_key_eq(&e->key, key))
            return e;
    }
}

static int
s_grow(pk_keymap_t *self)
{
    size_t cap = self->slots ? 2 * (self->mask + 1) : 8;
    pk_keymap_entry_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -ENOMEM;
    pk_keymap_t bigger = { slots, cap - 1, self->count };
    for (size_t i = 0; self->slots && i <= self->mask; i++) {
        pk_keymap_entry_t *e = &self->slots[i];
        if (!e->key.bytes)
            continue;
        size_t at = s_home(&bigger, e->key.hash);
        while (slots[at].key.bytes)
            at = (at + 1) & bigger.mask;
        slots[at] = *e;
    }
    free(self->slots);
    *self = bigger;
    return 0;
}

int
pk_keymap_put(pk_keymap_t *self, const pk_key_t *key, uint64_t a, uint64_t b)
{
    pk_keymap_entry_t *e = pk_keymap_find(self, key);
    if (e) {
        e->key = *key;
        e->a = a;
        e->b = b;
        return 0;
    }
    if (!self->slots || 2 * (self->count + 1) > self->mask + 1) {
        int rc = s_grow(self);
        if (rc)
            return rc;
    }
    size_t at = s_home(self, key->hash);
    while (self->slots[at].key.bytes)
        at = (at + 1) & self->mask;
    self->slots[at] = (pk_keymap_entry_t) { *key, a, b };
    self->count++;
    return 1;
}

bool
pk_keymap_take(pk_keymap_t *self, const pk_key_t *key, uint64_t *a_p, uint64_t *b_p)
{
    pk_keymap_entry_t *e = pk_keymap_find(self, key);
    if (!e)
        return false;
    if (a_p)
        *a_p = e->a;
    if (b_p)
        *b_p = e->b;
    //  Backward shift: pull later entries of the probe run into the hole
    //  unless that would move them before their home slot.
    size_t hole = (size_t) (e - self->slots);
    for (size_t at = (hole + 1) & self->mask; self->slots[at].key.bytes;
         at = (at + 1) & self->mask) {
        size_t home = s_home(self, self->slots[at].key.hash);
        if (((at - home) & self->mask) >= ((at - hole) & self->mask)) {
            self->slots[hole] = self->slots[at];
            hole = at;
        }
    }
    memset(&self->slots[hole], 0, sizeof self->slots[hole]);
    self->count--;
    return true;
}
