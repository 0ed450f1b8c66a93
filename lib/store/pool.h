/*  pool.h: the store's memory, one shared-memory object mapped whole.

    The pool is the bytes the local engine maps and writes and the
    transports read: a POSIX shared-memory object called name (as for
    shm_open: "/p2pkv-<something>"), or a memfd when name is NULL (the same
    memory, but a file the mmap transport can hand a same-host consumer).
    Every page is allocated at creation (posix_fallocate: a filesystem that
    cannot hold it is -ENOSPC now, with err naming the sizes, never a
    SIGBUS at a block's first write) and pre-faulted.  It knows nothing of
    blocks or keys: the store cuts it up.

    A named pool is locked (flock on its descriptor, kept open for the
    pool's life) so that the lock dies with the process, SIGKILL
    included: an object of that name whose lock nobody holds was left by a
    dead owner and is removed and created afresh, with one line to log;
    one whose lock is held belongs to a live pool, in this process or
    another, and is refused.
*/
#ifndef PK_POOL_H_INCLUDED
#define PK_POOL_H_INCLUDED

#include <stddef.h>

/*  Where a pool says that it reclaimed a dead owner's object.  */
typedef void (pk_pool_log_fn)(void *arg, const char *line);

typedef struct _pk_pool_t pk_pool_t;

/*  len bytes (at least 1, at most an off_t), named or not.  log NULL:
    standard error.  NULL on failure with the reason in *rc_p (may be
    NULL) and, for a named pool, a sentence in err (PK_ERRLEN bytes, or
    NULL): -EEXIST (a live owner holds the name), -ENOMEM, -ENOSPC, or
    what shm_open, flock, ftruncate, posix_fallocate or mmap said.  */
pk_pool_t *pk_pool_new(const char *name, size_t len, pk_pool_log_fn *log, void *log_arg,
                       int *rc_p, char *err);

/*  Unmaps the pool, removes its shared-memory object and drops its lock,
    in that order (a starter that locks the object afterwards finds it is
    no longer the name's, and creates its own).  */
void pk_pool_destroy(pk_pool_t **self_p);

void *pk_pool_base(const pk_pool_t *self);
size_t pk_pool_len(const pk_pool_t *self);
const char *pk_pool_name(const pk_pool_t *self);       //  NULL for a memfd

#endif
