/*  keymap.c: open addressing over the key's precomputed SipHash.  The load
    factor stays at or under one half, so probes are short and a removal's
    backward shift touches few slots.  */
#include "base/keymap.h"
#include "base/big_cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void
pk_keymap_fini(pk_keymap_t *self)
{
    pk_big_free(self->slots);
    *self = (pk_keymap_t) PK_KEYMAP_INIT;
}

void
pk_keymap_clear(pk_keymap_t *self)
{
    for (size_t i = 0; self->slots && self->count && i <= self->mask; i++)
        self->slots[i].key.bytes = NULL;
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
s_resize(pk_keymap_t *self, size_t cap)
{
    //  Only the key pointer marks a slot empty: clearing just it writes a
    //  fifth of what calloc would.
    //  A large table comes from the kept blocks (big_cache.h): a request
    //  of 65,536 keys builds tables of 5 MiB and drops them when it ends.
    pk_keymap_entry_t *slots = pk_big_alloc(cap * sizeof *slots);
    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i < cap; i++)
        slots[i].key.bytes = NULL;
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
    pk_big_free(self->slots);
    *self = bigger;
    return 0;
}

int
pk_keymap_reserve(pk_keymap_t *self, size_t n)
{
    size_t cap = self->slots ? self->mask + 1 : 8;
    while (cap < 2 * n)
        cap *= 2;
    return !self->slots || cap > self->mask + 1 ? s_resize(self, cap) : 0;
}

int
pk_keymap_get_or_put(pk_keymap_t *self, const pk_key_t *key, uint64_t a, uint64_t b,
                     pk_keymap_entry_t **entry_p)
{
    if (!self->slots || 2 * (self->count + 1) > self->mask + 1) {
        int rc = s_resize(self, self->slots ? 2 * (self->mask + 1) : 8);
        if (rc)
            return rc;
    }
    //  One probe run finds the key or the empty slot it belongs in.
    size_t at = s_home(self, key->hash);
    for (;; at = (at + 1) & self->mask) {
        pk_keymap_entry_t *e = &self->slots[at];
        if (!e->key.bytes)
            break;
        if (pk_key_eq(&e->key, key)) {
            *entry_p = e;
            return 0;
        }
    }
    self->slots[at] = (pk_keymap_entry_t) { *key, a, b };
    self->count++;
    *entry_p = &self->slots[at];
    return 1;
}

int
pk_keymap_put(pk_keymap_t *self, const pk_key_t *key, uint64_t a, uint64_t b)
{
    pk_keymap_entry_t *e;
    int rc = pk_keymap_get_or_put(self, key, a, b, &e);
    if (rc == 0)
        *e = (pk_keymap_entry_t) { *key, a, b };
    return rc;
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

int
pk_keymap_compact(pk_keymap_t *self)
{
    if (!self->count) {
        pk_keymap_fini(self);
        return 0;
    }
    size_t cap = self->mask + 1;
    if (8 * self->count >= cap)
        return 0;
    size_t smaller = 8;
    while (smaller < 4 * self->count)
        smaller *= 2;
    return smaller < cap ? s_resize(self, smaller) : 0;
}
