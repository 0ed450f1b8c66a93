/*  held.c: the stores held for consumers not connected yet (held.h).

    A singly linked list, newest first: the engine holds at most a
    thousand or so, taken out by consumer at a connect and by time at each
    sweep (twice a second), so a walk of the list costs less than the
    index a map of lists would need.  */
#include "daemon/held.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct _pk_held_list_t {
    pk_held_t *head;
    size_t n, max;
};

void
pk_held_destroy(pk_held_t **h_p)
{
    pk_held_t *h = *h_p;
    if (!h)
        return;
    free(h->consumer);
    free(h->kv);
    free(h->keys);
    free(h->blocks);
    free(h);
    *h_p = NULL;
}

pk_held_list_t *
pk_held_list_new(size_t max)
{
    pk_held_list_t *self = calloc(1, sizeof *self);
    if (self)
        self->max = max;
    return self;
}

void
pk_held_list_destroy(pk_held_list_t **self_p)
{
    pk_held_list_t *self = *self_p;
    if (!self)
        return;
    while (self->head) {
        pk_held_t *h = self->head;
        self->head = h->next;
        pk_held_destroy(&h);
    }
    free(self);
    *self_p = NULL;
}

int
pk_held_list_add(pk_held_list_t *self, pk_held_t *h)
{
    if (self->n >= self->max)
        return -ENOSPC;
    h->next = self->head;
    self->head = h;
    self->n++;
    return 0;
}

//  Unlinks the items for which fits says so, in order, into a list of
//  their own.
static pk_held_t *
s_take(pk_held_list_t *self, bool (*fits)(const pk_held_t *h, const void *arg),
       const void *arg)
{
    pk_held_t *taken = NULL, **tail = &taken;
    pk_held_t **at = &self->head;
    while (*at) {
        pk_held_t *h = *at;
        if (!fits(h, arg)) {
            at = &h->next;
            continue;
        }
        *at = h->next;
        self->n--;
        h->next = NULL;
        *tail = h;
        tail = &h->next;
    }
    return taken;
}

static bool
s_for_consumer(const pk_held_t *h, const void *consumer)
{
    return strcmp(h->consumer, consumer) == 0;
}

static bool
s_expired(const pk_held_t *h, const void *now)
{
    return *(const double *) now >= h->expires;
}

pk_held_t *
pk_held_list_take(pk_held_list_t *self, const char *consumer)
{
    return s_take(self, s_for_consumer, consumer);
}

pk_held_t *
pk_held_list_expire(pk_held_list_t *self, double now)
{
    return s_take(self, s_expired, &now);
}

size_t
pk_held_list_size(const pk_held_list_t *self)
{
    return self->n;
}

size_t
pk_held_list_jobs(const pk_held_list_t *self)
{
    size_t jobs = 0;
    for (const pk_held_t *h = self->head; h; h = h->next)
        jobs += !h->finish;
    return jobs;
}
