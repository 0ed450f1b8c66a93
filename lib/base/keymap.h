/*  keymap.h: a map from a key (pk_key_t, bytes with their hash) to two
    64-bit values.

    The role keeps several small key sets per round and per lookup; a czmq
    zhashx costs a table and one malloc per item for each, so this is one
    flat open-addressed table (linear probing, backward-shift deletion, no
    tombstones) embedded by value and allocated on first insert.  It holds
    views: the key bytes must outlive their entry.
*/
#ifndef PK_KEYMAP_H_INCLUDED
#define PK_KEYMAP_H_INCLUDED

#include "base/key.h"

typedef struct {
    pk_key_t key;           //  key.bytes == NULL marks an empty slot
    uint64_t a, b;
} pk_keymap_entry_t;

typedef struct {
    pk_keymap_entry_t *slots;
    size_t mask;            //  capacity - 1; capacity is a power of two
    size_t count;
} pk_keymap_t;

#define PK_KEYMAP_INIT { NULL, 0, 0 }

void pk_keymap_fini(pk_keymap_t *self);
void pk_keymap_clear(pk_keymap_t *self);

/*  The entry for key, or NULL.  The pointer is valid until the next insert
    or removal.  */
pk_keymap_entry_t *pk_keymap_find(const pk_keymap_t *self, const pk_key_t *key);

/*  Makes room for n entries at once (one allocation instead of several
    doublings).  Returns 0 or -ENOMEM.  */
int pk_keymap_reserve(pk_keymap_t *self, size_t n);

/*  Inserts or replaces; returns 1 when inserted, 0 when replaced, -ENOMEM.  */
int pk_keymap_put(pk_keymap_t *self, const pk_key_t *key, uint64_t a, uint64_t b);

/*  The entry for key if present (returns 0), else inserts it with (a, b)
    and returns 1; -ENOMEM.  *entry_p points at the entry either way.  */
int pk_keymap_get_or_put(pk_keymap_t *self, const pk_key_t *key, uint64_t a, uint64_t b,
                         pk_keymap_entry_t **entry_p);

/*  Removes key; returns true and its values (a_p, b_p may be NULL) if it
    was there.  The table never shrinks here: see pk_keymap_compact.  */
bool pk_keymap_take(pk_keymap_t *self, const pk_key_t *key, uint64_t *a_p, uint64_t *b_p);

/*  Gives back the table of a map that emptied (frees it) or is under an
    eighth full (rebuilds it at most a quarter full).  Explicit, not part
    of take, so no entry pointer a caller holds moves under it: call it
    where none is held, e.g. after a burst of removals.  Returns 0 or
    -ENOMEM (the larger table is kept).  */
int pk_keymap_compact(pk_keymap_t *self);

/*  Iteration without knowing the table's layout:
        size_t at = 0;
        for (pk_keymap_entry_t *e; (e = pk_keymap_next(map, &at)); ) ...
    visits every entry once, in no particular order.  Nothing may be
    inserted or removed meanwhile: backward-shift deletion moves entries.  */
static inline pk_keymap_entry_t *
pk_keymap_next(const pk_keymap_t *self, size_t *at)
{
    for (; self->slots && *at <= self->mask; (*at)++)
        if (self->slots[*at].key.bytes)
            return &self->slots[(*at)++];
    return NULL;
}

static inline size_t
pk_keymap_size(const pk_keymap_t *self)
{
    return self->count;
}

#endif
