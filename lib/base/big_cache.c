/*  big_cache.c: large heap blocks kept for the next request of about
    their size (big_cache.h says why).

    What it costs: up to PK_BIG_BYTES resident that the engine's process
    would otherwise give back, only in a process that made requests that
    large; a mutex and a walk of at most PK_BIG_KEEP slots per block of
    PK_BIG_MIN bytes or more (smaller ones go straight to malloc).  */
#include "base/big_cache.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t size;                //  malloc_usable_size(p)
} s_kept[PK_BIG_KEEP];
static size_t s_bytes;

//  The kept block that fits n best (at most twice n: a larger one would
//  keep pages an unrelated small request does not need), taken out.
static void *
s_take(size_t n)
{
    void *p = NULL;
    pthread_mutex_lock(&s_lock);
    int best = -1;
    for (int i = 0; i < PK_BIG_KEEP; i++)
        if (s_kept[i].p && s_kept[i].size >= n && s_kept[i].size / 2 <= n
            && (best < 0 || s_kept[i].size < s_kept[best].size))
            best = i;
    if (best >= 0) {
        p = s_kept[best].p;
        s_bytes -= s_kept[best].size;
        s_kept[best].p = NULL;
    }
    pthread_mutex_unlock(&s_lock);
    return p;
}

void *
pk_big_alloc(size_t n)
{
    void *p = n >= PK_BIG_MIN ? s_take(n) : NULL;
    return p ? p : malloc(n);
}

void *
pk_big_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    size_t bytes = n * size;
    void *p = bytes >= PK_BIG_MIN ? s_take(bytes) : NULL;
    if (!p)
        return calloc(n, size);
    return memset(p, 0, bytes);
}

void
pk_big_free(void *p)
{
    if (!p)
        return;
    size_t size = malloc_usable_size(p);
    if (size >= PK_BIG_MIN) {
        pthread_mutex_lock(&s_lock);
        //  an empty slot, else the smallest kept one if p is larger
        int at = -1;
        for (int i = 0; i < PK_BIG_KEEP; i++)
            if (!s_kept[i].p) {
                at = i;
                break;
            }
            else if (s_kept[i].size < size && (at < 0 || s_kept[i].size < s_kept[at].size))
                at = i;
        void *out = NULL;
        if (at >= 0 && s_bytes - (s_kept[at].p ? s_kept[at].size : 0) + size <= PK_BIG_BYTES) {
            out = s_kept[at].p;
            s_bytes -= out ? s_kept[at].size : 0;
            s_kept[at].p = p;
            s_kept[at].size = size;
            s_bytes += size;
            p = out;
        }
        pthread_mutex_unlock(&s_lock);
    }
    free(p);
}

void
pk_big_trim(void)
{
    pthread_mutex_lock(&s_lock);
    for (int i = 0; i < PK_BIG_KEEP; i++) {
        free(s_kept[i].p);
        s_kept[i].p = NULL;
    }
    s_bytes = 0;
    pthread_mutex_unlock(&s_lock);
}

size_t
pk_big_kept(void)
{
    pthread_mutex_lock(&s_lock);
    size_t n = s_bytes;
    pthread_mutex_unlock(&s_lock);
    return n;
}
