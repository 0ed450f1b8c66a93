/*  copier.c: block copies shared with helper threads (copier.h).

    A batch is a list of pairs and a shared cursor: every thread takes the
    next pair with one atomic add until none is left, so a slow thread
    never holds the others back.  The caller copies too, then waits until
    every helper has left the batch, so on return no thread reads src or
    writes dst for it.  What it costs: one thread per helper (its stack is
    address space; it sleeps when idle), a mutex and two condition
    variables per copier, nothing per batch.
*/
#include "mmap/copier.h"
#include "base/checksum.h"
#include "base/thread.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    uint8_t *dst;
    const uint8_t *src;
    const pk_copy_pair_t *pairs;
    size_t n, block_len;
    const _Atomic uint32_t *closed;
    const pk_copy_check_t *check;
    _Atomic size_t next;            //  the next pair to take
    _Atomic size_t landed;
} s_batch_t;

struct _pk_copier_t {
    pthread_mutex_t mutex;
    pthread_cond_t go, done;
    s_batch_t *batch;               //  the batch helpers may join (NULL: none)
    uint64_t generation;            //  bumped per batch
    size_t busy;                    //  helpers inside the batch
    bool quit;
    size_t want, nhelpers;          //  helpers to start; created
    size_t running;                 //  helpers inside s_helper
    pthread_t helpers[PK_COPIER_MAX_HELPERS];
    pid_t pid;                      //  the process the helpers run in
};

//  A child forked after the helpers started has none of them (fork copies
//  one thread): it forgets them, and starts its own at its next batch.
static void
s_forget_after_fork(pk_copier_t *self)
{
    if (self->nhelpers && self->pid != getpid()) {
        pthread_mutex_init(&self->mutex, NULL);
        pthread_cond_init(&self->go, NULL);
        pthread_cond_init(&self->done, NULL);
        self->nhelpers = self->busy = self->running = 0;
        self->batch = NULL;
    }
}

//  Takes pairs until none is left; adds what landed.
static void
s_copy_some(s_batch_t *b)
{
    size_t landed = 0;
    for (size_t i; (i = atomic_fetch_add(&b->next, 1)) < b->n;) {
        uint8_t *to = b->dst + (size_t) b->pairs[i].dst * b->block_len;
        const uint8_t *from = b->src + (size_t) b->pairs[i].src * b->block_len;
        if (b->check && b->check->wants(b->check->arg, b->pairs[i].dst))
            b->check->found(b->check->arg, b->pairs[i].dst,
                            pk_checksum_copy(to, from, b->block_len));
        else
            memcpy(to, from, b->block_len);
        //  the copy's reads before the flag's (mmap.h, cut-off)
        atomic_thread_fence(memory_order_seq_cst);
        if (!atomic_load(b->closed))
            landed++;
    }
    atomic_fetch_add(&b->landed, landed);
}

static void *
s_helper(void *arg)
{
    pk_copier_t *self = arg;
    pk_thread_block_signals();
    uint64_t seen = 0;
    pthread_mutex_lock(&self->mutex);
    self->running++;
    pthread_cond_signal(&self->done);
    while (!self->quit) {
        if (!self->batch || self->generation == seen) {
            pthread_cond_wait(&self->go, &self->mutex);
            continue;
        }
        seen = self->generation;
        s_batch_t *b = self->batch;
        self->busy++;
        pthread_mutex_unlock(&self->mutex);
        s_copy_some(b);
        pthread_mutex_lock(&self->mutex);
        if (--self->busy == 0)
            pthread_cond_signal(&self->done);
    }
    pthread_mutex_unlock(&self->mutex);
    return NULL;
}

pk_copier_t *
pk_copier_new(void)
{
    pk_copier_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    pthread_mutex_init(&self->mutex, NULL);
    pthread_cond_init(&self->go, NULL);
    pthread_cond_init(&self->done, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    self->want = cores > 1 ? (size_t) cores - 1 : 0;
    if (self->want > PK_COPIER_MAX_HELPERS)
        self->want = PK_COPIER_MAX_HELPERS;
    return self;
}

void
pk_copier_destroy(pk_copier_t **self_p)
{
    pk_copier_t *self = *self_p;
    if (!self)
        return;
    s_forget_after_fork(self);
    pthread_mutex_lock(&self->mutex);
    self->quit = true;
    pthread_cond_broadcast(&self->go);
    pthread_mutex_unlock(&self->mutex);
    for (size_t i = 0; i < self->nhelpers; i++)
        pthread_join(self->helpers[i], NULL);
    pthread_cond_destroy(&self->done);
    pthread_cond_destroy(&self->go);
    pthread_mutex_destroy(&self->mutex);
    free(self);
    *self_p = NULL;
}

size_t
pk_copier_helpers(const pk_copier_t *self)
{
    return self->nhelpers;
}

size_t
pk_copier_run(pk_copier_t *self, uint8_t *dst, const uint8_t *src,
              const pk_copy_pair_t *pairs, size_t n, size_t block_len,
              const _Atomic uint32_t *closed, const pk_copy_check_t *check)
{
    s_batch_t b = { dst, src, pairs, n, block_len, closed, check, 0, 0 };
    bool share = self && self->want && n > 1 && n * block_len >= PK_COPIER_PARALLEL_MIN;
    if (!share) {
        s_copy_some(&b);
        return atomic_load(&b.landed);
    }
    s_forget_after_fork(self);
    pthread_mutex_lock(&self->mutex);
    self->pid = getpid();
    //  a helper that does not start leaves the batch to the others
    while (self->nhelpers < self->want
           && pthread_create(&self->helpers[self->nhelpers], NULL, s_helper, self) == 0)
        self->nhelpers++;
    self->batch = &b;
    self->generation++;
    pthread_cond_broadcast(&self->go);
    pthread_mutex_unlock(&self->mutex);
    s_copy_some(&b);
    pthread_mutex_lock(&self->mutex);
    self->batch = NULL;             //  late helpers find nothing to join
    //  and every helper has started: a process forked right after this
    //  run must not copy a thread still starting.  Under AddressSanitizer
    //  a starting thread holds the sanitizer's own locks, which the child
    //  then finds locked for ever: test_copier_after_fork timed out so in
    //  CI, once.  It waits once per process, for threads just created.
    while (self->busy || self->running < self->nhelpers)
        pthread_cond_wait(&self->done, &self->mutex);
    pthread_mutex_unlock(&self->mutex);
    return atomic_load(&b.landed);
}
