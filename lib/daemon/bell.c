/*  bell.c: the parked lookups' wake (bell.h).  */
#include "daemon/bell.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct _pk_bell_t {
    atomic_uint_fast64_t seq;
    pthread_mutex_t mutex;
    int *fds;
    size_t n, cap;
};

pk_bell_t *
pk_bell_new(void)
{
    pk_bell_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    atomic_init(&self->seq, 0);
    pthread_mutex_init(&self->mutex, NULL);
    return self;
}

void
pk_bell_destroy(pk_bell_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_bell_t *self = *self_p;
    pthread_mutex_destroy(&self->mutex);
    free(self->fds);
    free(self);
    *self_p = NULL;
}

void
pk_bell_ring(pk_bell_t *self)
{
    atomic_fetch_add(&self->seq, 1);
    uint64_t one = 1;
    pthread_mutex_lock(&self->mutex);
    for (size_t i = 0; i < self->n; i++) {
        ssize_t put = write(self->fds[i], &one, sizeof one);
        (void) put;             //  EAGAIN: it is readable already
    }
    pthread_mutex_unlock(&self->mutex);
}

uint64_t
pk_bell_seq(pk_bell_t *self)
{
    return atomic_load(&self->seq);
}

int
pk_bell_listen(pk_bell_t *self, int fd)
{
    int rc = 0;
    pthread_mutex_lock(&self->mutex);
    for (size_t i = 0; i < self->n; i++)
        if (self->fds[i] == fd)
            goto done;
    if (self->n == self->cap) {
        size_t cap = self->cap ? 2 * self->cap : 16;
        int *grown = realloc(self->fds, cap * sizeof *grown);
        if (!grown) {
            rc = -ENOMEM;
            goto done;
        }
        self->fds = grown;
        self->cap = cap;
    }
    self->fds[self->n++] = fd;
done:
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

void
pk_bell_leave(pk_bell_t *self, int fd)
{
    pthread_mutex_lock(&self->mutex);
    for (size_t i = 0; i < self->n; i++)
        if (self->fds[i] == fd) {
            self->fds[i] = self->fds[--self->n];
            break;
        }
    pthread_mutex_unlock(&self->mutex);
}
