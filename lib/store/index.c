/*  index.c: the store's blocks, their lists and the key index (index.h).

    Every function runs under the store's lock and costs in proportion to
    its own input; nothing here allocates but a key longer than a SHA-256
    digest, once per block (its buffer is kept for the block's reuse).
*/
#include "store/index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

//  ---------------------------------------------------------------------------
//  Intrusive lists over the block array

static void
s_list_push(pk_block_t *blocks, pk_block_list_t *list, uint32_t b)
{
    blocks[b].prev = list->tail;
    blocks[b].next = PK_INDEX_NONE;
    if (list->tail != PK_INDEX_NONE)
        blocks[list->tail].next = b;
    else
        list->head = b;
    list->tail = b;
    list->count++;
}

static void
s_list_remove(pk_block_t *blocks, pk_block_list_t *list, uint32_t b)
{
    pk_block_t *blk = &blocks[b];
    if (blk->prev != PK_INDEX_NONE)
        blocks[blk->prev].next = blk->next;
    else
        list->head = blk->next;
    if (blk->next != PK_INDEX_NONE)
        blocks[blk->next].prev = blk->prev;
    else
        list->tail = blk->prev;
    blk->prev = blk->next = PK_INDEX_NONE;
    list->count--;
}

//  ---------------------------------------------------------------------------
//  Construction

int
pk_index_init(pk_index_t *self, uint64_t num_blocks, size_t nns)
{
    *self = (pk_index_t) { .num_blocks = num_blocks, .nns = nns,
                           .keys = PK_KEYMAP_INIT, .owners = PK_KEYMAP_INIT };
    self->free = self->leases = self->lru = (pk_block_list_t) { PK_INDEX_NONE,
                                                                PK_INDEX_NONE, 0 };
    self->ns_ready = calloc(nns, sizeof *self->ns_ready);
    if (!self->ns_ready)
        goto fail;
    self->ns_pinned = calloc(nns, sizeof *self->ns_pinned);
    if (!self->ns_pinned)
        goto fail_ns_ready;
    self->blocks = calloc((size_t) num_blocks, sizeof *self->blocks);
    if (!self->blocks)
        goto fail_ns_pinned;
    for (uint32_t b = 0; b < num_blocks; b++) {
        self->blocks[b].oprev = self->blocks[b].onext = PK_INDEX_NONE;
        s_list_push(self->blocks, &self->free, b);
    }
    //  Sized once for a full pool, so no insert rehashes the whole index
    //  inside the critical section.
    if (pk_keymap_reserve(&self->keys, (size_t) num_blocks))
        goto fail_blocks;
    return 0;

fail_blocks:
    pk_keymap_fini(&self->keys);
    free(self->blocks);
fail_ns_pinned:
    free(self->ns_pinned);
fail_ns_ready:
    free(self->ns_ready);
fail:
    return -ENOMEM;
}

void
pk_index_fini(pk_index_t *self)
{
    pk_keymap_fini(&self->owners);
    pk_keymap_fini(&self->keys);
    for (uint64_t b = 0; self->blocks && b < self->num_blocks; b++)
        free(self->blocks[b].heap);
    free(self->blocks);
    free(self->ns_pinned);
    free(self->ns_ready);
    self->blocks = NULL;
    self->ns_ready = self->ns_pinned = NULL;
}

//  ---------------------------------------------------------------------------
//  Keys

bool
pk_index_keys_ok(const pk_key_t *keys, size_t n)
{
    if (n && !keys)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!keys[i].bytes || keys[i].len < 1 || keys[i].len > PK_MAX_KEY_BYTES)
            return false;
    return true;
}

pk_key_t
pk_index_key(const pk_block_t *blk)
{
    return (pk_key_t) { blk->key, blk->key_len, blk->key_hash };
}

//  Owner ids are keyed by their 8 bytes in place, so the map holds views
//  into records the index already has and needs no allocation.  The ids
//  are the node's own, so the cheap id hash will do.
static pk_key_t
s_id_key(const uint64_t *id)
{
    return (pk_key_t) { (const uint8_t *) id, sizeof *id, pk_hash_id(*id, 0) };
}

static int
s_block_set_key(pk_block_t *blk, const pk_key_t *key, unsigned ns)
{
    if (key->len <= PK_INDEX_INLINE_KEY)
        blk->key = blk->inline_key;
    else {
        if (blk->heap_cap < key->len) {
            uint8_t *heap = realloc(blk->heap, key->len);
            if (!heap)
                return -ENOMEM;
            blk->heap = heap;
            blk->heap_cap = key->len;
        }
        blk->key = blk->heap;
    }
    memcpy(blk->key, key->bytes, key->len);
    blk->key_len = key->len;
    blk->key_hash = pk_ns_hash(key->hash, ns);
    blk->ns = (uint16_t) ns;
    return 0;
}

//  The ns comparison only matters in a collision of the mixed hashes; the
//  index never holds two entries pk_key_eq calls equal (pk_index_reserve),
//  so one probe decides.
pk_block_t *
pk_index_find(pk_index_t *self, unsigned ns, const pk_key_t *key, uint32_t *b_p)
{
    pk_key_t view = { key->bytes, key->len, pk_ns_hash(key->hash, ns) };
    pk_keymap_entry_t *e = pk_keymap_find(&self->keys, &view);
    if (!e || self->blocks[e->a].ns != ns)
        return NULL;
    if (b_p)
        *b_p = (uint32_t) e->a;
    return &self->blocks[e->a];
}

//  ---------------------------------------------------------------------------
//  Owner lists: the map's entry for an owner names the first block of its
//  list and its key bytes are that block's owner field, re-pointed whenever
//  the first block changes.

static int
s_owner_link(pk_index_t *self, uint32_t b)
{
    pk_block_t *blk = &self->blocks[b];
    pk_key_t key = s_id_key(&blk->owner);
    pk_keymap_entry_t *e = pk_keymap_find(&self->owners, &key);
    blk->oprev = PK_INDEX_NONE;
    if (!e) {
        blk->onext = PK_INDEX_NONE;
        int rc = pk_keymap_put(&self->owners, &key, b, 0);
        return rc < 0 ? rc : 0;
    }
    blk->onext = (uint32_t) e->a;
    self->blocks[e->a].oprev = b;
    e->a = b;
    e->key.bytes = (const uint8_t *) &blk->owner;
    return 0;
}

static void
s_owner_unlink(pk_index_t *self, uint32_t b)
{
    pk_block_t *blk = &self->blocks[b];
    if (blk->oprev != PK_INDEX_NONE)
        self->blocks[blk->oprev].onext = blk->onext;
    else {
        pk_key_t key = s_id_key(&blk->owner);
        if (blk->onext == PK_INDEX_NONE)
            pk_keymap_take(&self->owners, &key, NULL, NULL);
        else {
            pk_keymap_entry_t *e = pk_keymap_find(&self->owners, &key);
            e->a = blk->onext;
            e->key.bytes = (const uint8_t *) &self->blocks[blk->onext].owner;
        }
    }
    if (blk->onext != PK_INDEX_NONE)
        self->blocks[blk->onext].oprev = blk->oprev;
    blk->oprev = blk->onext = PK_INDEX_NONE;
}

//  ---------------------------------------------------------------------------
//  State transitions

static void
s_unindex(pk_index_t *self, pk_block_t *blk)
{
    pk_key_t key = pk_index_key(blk);
    pk_keymap_take(&self->keys, &key, NULL, NULL);
    blk->state = PK_BLOCK_FREE;
}

static void
s_tell(pk_index_t *self, bool added, const pk_block_t *blk)
{
    if (self->change) {
        pk_key_t key = pk_index_key(blk);
        self->change(self->change_arg, added, &key);
    }
}

void
pk_index_free_writing(pk_index_t *self, uint32_t b)
{
    pk_block_t *blk = &self->blocks[b];
    s_owner_unlink(self, b);
    s_list_remove(self->blocks, &self->leases, b);
    s_unindex(self, blk);
    s_list_push(self->blocks, &self->free, b);
}

//  READY -> FREE; told as a removal unless the key is still held below.
static void
s_free_ready(pk_index_t *self, uint32_t b, bool tell)
{
    if (tell)
        s_tell(self, false, &self->blocks[b]);
    s_list_remove(self->blocks, &self->lru, b);
    s_unindex(self, &self->blocks[b]);
    s_list_push(self->blocks, &self->free, b);
    self->ready--;
    self->ns_ready[self->blocks[b].ns]--;
}

void
pk_index_free_ready(pk_index_t *self, uint32_t b)
{
    s_free_ready(self, b, true);
}

size_t
pk_index_room(const pk_index_t *self)
{
    return self->free.count + self->lru.count;
}

//  A free block, else the LRU's oldest, whose bytes the evict hook may
//  take first (the tier under the pool).
static uint32_t
s_take_block(pk_index_t *self)
{
    if (self->free.head == PK_INDEX_NONE) {
        uint32_t old = self->lru.head;
        bool kept = self->evict && self->evict(self->evict_arg, old, &self->blocks[old]);
        s_free_ready(self, old, !kept);
        self->evictions++;
    }
    uint32_t b = self->free.head;
    s_list_remove(self->blocks, &self->free, b);
    return b;
}

int
pk_index_reserve(pk_index_t *self, uint64_t owner, unsigned ns, const pk_key_t *key,
                 double deadline, uint32_t *b_p)
{
    //  Checked here, not only by the caller, to catch a key repeated in a batch.
    if (pk_index_find(self, ns, key, NULL))
        return -EEXIST;
    uint32_t b = s_take_block(self);
    pk_block_t *blk = &self->blocks[b];
    pk_key_t view;
    pk_keymap_entry_t *e;
    int rc = s_block_set_key(blk, key, ns);
    if (rc)
        goto fail_block;
    view = pk_index_key(blk);
    //  Does not fail: the index was sized for every block at init.  An
    //  entry equal to the view belongs to another namespace whose mixed
    //  hash collided with ours (odds 2^-64): refused as present, so that
    //  no two entries are ever equal and one probe always decides.
    if ((rc = pk_keymap_get_or_put(&self->keys, &view, b, 0, &e)) <= 0) {
        rc = rc ? rc : -EEXIST;
        goto fail_block;
    }
    blk->owner = owner;
    if ((rc = s_owner_link(self, b)) < 0)
        goto fail_index;
    blk->state = PK_BLOCK_WRITING;
    blk->deadline = deadline;
    s_list_push(self->blocks, &self->leases, b);
    *b_p = b;
    return 0;

fail_index:
    pk_keymap_take(&self->keys, &view, NULL, NULL);
fail_block:
    s_list_push(self->blocks, &self->free, b);
    return rc;
}

void
pk_index_commit(pk_index_t *self, uint32_t b, uint64_t sum)
{
    pk_block_t *blk = &self->blocks[b];
    s_owner_unlink(self, b);
    s_list_remove(self->blocks, &self->leases, b);
    blk->sum = sum;
    blk->state = PK_BLOCK_READY;
    s_list_push(self->blocks, &self->lru, b);
    self->ready++;
    self->ns_ready[blk->ns]++;
    s_tell(self, true, blk);
}

size_t
pk_index_expire(pk_index_t *self, double now)
{
    size_t count = 0;
    while (self->leases.head != PK_INDEX_NONE
           && self->blocks[self->leases.head].deadline <= now) {
        pk_index_free_writing(self, self->leases.head);
        count++;
    }
    self->expired += count;
    return count;
}

size_t
pk_index_release_owner(pk_index_t *self, uint64_t owner)
{
    pk_key_t key = s_id_key(&owner);
    size_t count = 0;
    pk_keymap_entry_t *e;
    while ((e = pk_keymap_find(&self->owners, &key))) {
        pk_index_free_writing(self, (uint32_t) e->a);
        count++;
    }
    return count;
}

void
pk_index_use(pk_index_t *self, uint32_t b)
{
    if (self->blocks[b].pins == 0) {
        s_list_remove(self->blocks, &self->lru, b);
        s_list_push(self->blocks, &self->lru, b);
    }
}

void
pk_index_pin(pk_index_t *self, uint32_t b)
{
    pk_block_t *blk = &self->blocks[b];
    if (blk->pins++ == 0) {
        s_list_remove(self->blocks, &self->lru, b);
        self->pinned++;
        self->ns_pinned[blk->ns]++;
    }
}

void
pk_index_unpin(pk_index_t *self, uint32_t b)
{
    //  Only READY blocks are pinned, and nothing else touches a pinned one.
    //  The release puts it at the LRU's young end: it was just read.
    pk_block_t *blk = &self->blocks[b];
    if (--blk->pins == 0) {
        s_list_push(self->blocks, &self->lru, b);
        self->pinned--;
        self->ns_pinned[blk->ns]--;
    }
}
