/*  pins.c: jobs of pins (pins.h).  */
#include "store/pins.h"
#include "store/namespace.h"

#include <errno.h>
#include <stdlib.h>

//  Job ids are keyed by their 8 bytes in place, inside the job's record.
static pk_key_t
s_id_key(const uint64_t *id)
{
    return (pk_key_t) { (const uint8_t *) id, sizeof *id, pk_hash_id(*id, 0) };
}

void
pk_pins_init(pk_pins_t *self)
{
    *self = (pk_pins_t) { .jobs = PK_KEYMAP_INIT, .next_id = 1 };
}

void
pk_pins_fini(pk_pins_t *self)
{
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->jobs, &at)); )
        free((pk_pin_job_t *) (uintptr_t) e->a);
    pk_keymap_fini(&self->jobs);
}

pk_pin_job_t *
pk_pins_job_new(const pk_key_t *keys, size_t n, const uint32_t *blocks, const bool *pinned,
                int *rc_p)
{
    *rc_p = -EINVAL;
    if (!pk_index_keys_ok(keys, n) || (n && (!blocks || !pinned)))
        return NULL;
    *rc_p = -ENOMEM;
    if (n > (SIZE_MAX - sizeof(pk_pin_job_t)) / sizeof(uint32_t))
        return NULL;
    pk_pin_job_t *job = malloc(sizeof *job + n * sizeof(uint32_t));
    if (job)
        *rc_p = 0;
    return job;
}

uint64_t
pk_pins_next_id(pk_pins_t *self)
{
    return self->next_id++;
}

int
pk_pins_id_free(pk_pins_t *self, uint64_t id)
{
    pk_key_t key = s_id_key(&id);
    if (id < 1 || id >= self->next_id)
        return -EINVAL;
    return pk_keymap_find(&self->jobs, &key) ? -EEXIST : 0;
}

int
pk_pins_file(pk_pins_t *self, pk_index_t *index, unsigned ns, pk_pin_job_t *job,
             const pk_key_t *keys, size_t n, uint32_t *blocks, bool *pinned, uint64_t *probes)
{
    pk_key_t id = s_id_key(&job->id);
    int rc = pk_keymap_put(&self->jobs, &id, (uintptr_t) job, 0);
    if (rc < 0)
        return rc;
    job->n = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        pk_block_t *blk = pk_ns_resolve(index, ns, &keys[i], &b, probes);
        pinned[i] = blk && blk->state == PK_BLOCK_READY;
        blocks[i] = pinned[i] ? b : PK_INDEX_NONE;
        if (!pinned[i])
            continue;
        pk_index_pin(index, b);
        job->blocks[job->n++] = b;
    }
    return 0;
}

pk_pin_job_t *
pk_pins_release(pk_pins_t *self, pk_index_t *index, uint64_t id)
{
    pk_key_t key = s_id_key(&id);
    uint64_t value = 0;
    if (!pk_keymap_take(&self->jobs, &key, &value, NULL))
        return NULL;
    pk_pin_job_t *job = (pk_pin_job_t *) (uintptr_t) value;
    for (size_t i = 0; i < job->n; i++)
        pk_index_unpin(index, job->blocks[i]);
    return job;
}

size_t
pk_pins_count(const pk_pins_t *self)
{
    return pk_keymap_size(&self->jobs);
}
