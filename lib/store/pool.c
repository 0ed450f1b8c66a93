/*  pool.c: the shared-memory object, its lock, its reservation and its
    mapping (pool.h).
*/
#include "store/pool.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

struct _pk_pool_t {
    char *name;
    int fd;                     //  the pool's file (a named pool's holds its lock)
    void *base;
    size_t len;
};

//  Whether fd is still the object that name opens (it was not unlinked,
//  nor replaced, since fd was opened).
static bool
s_shm_is_named(int fd, const char *name)
{
    struct stat mine, named;
    int other = shm_open(name, O_RDONLY, 0);
    if (other < 0)
        return false;
    bool same = fstat(fd, &mine) == 0 && fstat(other, &named) == 0
                && mine.st_dev == named.st_dev && mine.st_ino == named.st_ino;
    close(other);
    return same;
}

//  Opens the shared-memory object name as its one owner, and returns the
//  descriptor, which holds an exclusive flock(2) on it for as long as it
//  is open: the kernel drops the lock when the owner exits, even by
//  SIGKILL, so an object found unlocked was left by a dead owner.  That
//  one is unlinked and created afresh (*reclaimed), never reused: an
//  engine of the dead server may still map it.  An object whose lock is
//  held is a live server's pool: -EEXIST, with err saying so.
//
//  The rule that makes the race between starters safe: an object is
//  unlinked only by a process that holds its lock and has checked that
//  the name still opens it.  Whoever locks second fails its flock and is
//  refused (a creator whose brand-new object a reclaimer locked first
//  included), and whoever locked an object since unlinked sees the name
//  no longer opens it and starts over.  Costs two extra opens and an
//  fstat at start; nothing afterwards.
static int
s_shm_claim(const char *name, char *err, bool *reclaimed, int *rc_p)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        bool created = true;
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 && errno == EEXIST) {
            created = false;
            fd = shm_open(name, O_RDWR, 0);
            if (fd < 0 && errno == ENOENT)
                continue;           //  unlinked meanwhile: create it
        }
        if (fd < 0) {
            int e = errno;
            *rc_p = pk_err(err, -e, "pool %s: %s", name, strerror(e));
            return -1;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(fd);
            if (e == EWOULDBLOCK) {
                *rc_p = -EEXIST;
                pk_err(err, -EEXIST, "pool %s is held by a live server (its owner has it "
                       "locked): stop that server or choose another --pool-name", name);
            }
            else {
                *rc_p = -e;
                pk_err(err, -e, "pool %s: cannot lock it: %s", name, strerror(e));
            }
            return -1;
        }
        if (!s_shm_is_named(fd, name)) {
            close(fd);              //  unlinked or replaced since we opened it
            continue;
        }
        if (created)
            return fd;
        //  Locked by nobody: its owner died without removing it.
        shm_unlink(name);
        close(fd);
        *reclaimed = true;
    }
    *rc_p = -EEXIST;
    pk_err(err, -EEXIST, "pool %s: other servers keep creating and removing it", name);
    return -1;
}

//  Where glibc's shm_open keeps its objects: the filesystem whose room
//  a named pool takes.
#define S_SHM_DIR "/dev/shm"

//  -ENOSPC with err: /dev/shm has room bytes, the pool name needs len.
static int
s_no_room(const char *name, size_t len, unsigned long long room, char *err)
{
    return pk_err(err, -ENOSPC, "pool %s: " S_SHM_DIR " cannot hold it: it needs %zu bytes "
                  "(%.1f MiB), " S_SHM_DIR " has %llu (%.1f MiB) available; make " S_SHM_DIR
                  " larger or the pool smaller", name, len, (double) len / (1 << 20), room,
                  (double) room / (1 << 20));
}

//  Bytes the host can still give (MemAvailable and SwapFree of
//  /proc/meminfo), or 0 when unknown.
static unsigned long long
s_host_room(void)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return 0;
    char line[128];
    unsigned long long kb, avail = 0, swap = 0;
    bool seen = false;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            avail = kb;
            seen = true;
        }
        else if (sscanf(line, "SwapFree: %llu kB", &kb) == 1)
            swap = kb;
    }
    fclose(f);
    return seen ? (avail + swap) * 1024 : 0;
}

//  The pool's memory reserved now, every page of it, rather than at each
//  page's first write: a tmpfs (/dev/shm) or memory limit that cannot hold
//  the pool fails here, naming the sizes, instead of killing with SIGBUS
//  whichever process first writes a page there is no room for (the
//  server's pulls, its engine).  MAP_POPULATE does not do it: it gives up
//  silently where there is no room.  What it costs: nothing more; the
//  pages MAP_POPULATE would have faulted in are allocated and zeroed here
//  instead (1 GiB: about 0.6 s, fallocate then populate or populate
//  alone); the engine then maps memory that exists.
//
//  Whether it fits is asked first, of the filesystem's free room and of
//  the host's memory: tmpfs refuses a fallocate larger than its whole
//  size at once, but one within its size and beyond its free room (other
//  objects there) or beyond the memory the host has left allocates and
//  zeroes page after page until it fails, some 0.5 s a GiB, and a
//  /dev/shm as large as the host's memory (its default is half; many set
//  it to all) drives the host into reclaim, swap and the OOM killer
//  first: minutes, and other processes killed.  The looks cost a statvfs
//  and a read of /proc/meminfo at start; what the host has free may
//  still change before the fallocate, which stays the final word.  0, or
//  a negative errno with err.
static int
s_reserve(int fd, size_t len, const char *name, char *err)
{
    struct statvfs vfs;
    if (name && statvfs(S_SHM_DIR, &vfs) == 0) {
        unsigned long long room = (unsigned long long) vfs.f_bavail * vfs.f_frsize;
        if (len > room)
            return s_no_room(name, len, room, err);
    }
    unsigned long long host = s_host_room();
    if (host && len > host)
        return pk_err(err, -ENOMEM, "pool %s: the host's memory cannot hold it: it needs "
                      "%zu bytes (%.1f MiB), the host has %llu (%.1f MiB) available "
                      "(MemAvailable + SwapFree)", name ? name : "(anonymous)", len,
                      (double) len / (1 << 20), host, (double) host / (1 << 20));
    int e;
    do
        e = posix_fallocate(fd, 0, (off_t) len);
    while (e == EINTR);         //  a signal at start: the allocation is idempotent
    if (e == 0)
        return 0;
    //  a failed fallocate of tmpfs gives back what it took, so the room
    //  said is the room there was
    if (e == ENOSPC && name && statvfs(S_SHM_DIR, &vfs) == 0) {
        return s_no_room(name, len, (unsigned long long) vfs.f_bavail * vfs.f_frsize, err);
    }
    return pk_err(err, -e, "pool %s: cannot reserve its %zu bytes: %s",
                  name ? name : "(anonymous)", len, strerror(e));
}

//  The memfd's memory; nothing of it is left on failure.
static int
s_map_memfd(pk_pool_t *self, char *err)
{
    int fd = memfd_create("p2pkv-pool", MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = ftruncate(fd, (off_t) self->len) != 0 ? -errno
             : s_reserve(fd, self->len, NULL, err);
    if (rc == 0 && (self->base = mmap(NULL, self->len, PROT_READ | PROT_WRITE,
                                      MAP_SHARED | MAP_POPULATE, fd, 0)) == MAP_FAILED)
        rc = -errno;
    if (rc) {
        close(fd);
        return rc;
    }
    self->fd = fd;
    return 0;
}

//  The shared-memory object name, claimed under its lock (one a dead
//  server left is reclaimed, and logged).  0, or a negative errno with
//  err; nothing of it is left on failure.
static int
s_map_named(pk_pool_t *self, const char *name, pk_pool_log_fn *log, void *log_arg, char *err)
{
    bool reclaimed = false;
    int rc;
    int fd = s_shm_claim(name, err, &reclaimed, &rc);
    if (fd < 0)
        return rc;
    if (reclaimed) {
        char line[PK_ERRLEN];
        snprintf(line, sizeof line,
                 "pool %s: reclaimed the shared-memory object a dead server left", name);
        if (log)
            log(log_arg, line);
        else
            fprintf(stderr, "p2pkv-server warn: %s\n", line);
    }
    char why[PK_ERRLEN] = "";
    rc = ftruncate(fd, (off_t) self->len) != 0 ? -errno
         : s_reserve(fd, self->len, name, why);
    if (rc == 0) {
        self->base = mmap(NULL, self->len, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_POPULATE, fd, 0);
        if (self->base != MAP_FAILED) {
            self->fd = fd;
            return 0;
        }
        rc = -errno;
    }
    shm_unlink(name);           //  ours: unlinked while the lock is held
    close(fd);
    if (*why)
        (void) pk_err(err, rc, "%s", why);
    else if (rc != -EEXIST)
        (void) pk_err(err, rc, "pool %s: %s", name, strerror(-rc));
    return rc;
}

pk_pool_t *
pk_pool_new(const char *name, size_t len, pk_pool_log_fn *log, void *log_arg, int *rc_p,
            char *err)
{
    int rc = -EINVAL;
    pk_pool_t *self = NULL;
    if (len < 1 || (uint64_t) len > (uint64_t) INT64_MAX)
        goto fail;
    rc = -ENOMEM;
    self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    self->fd = -1;
    self->len = len;
    if (name && !(self->name = strdup(name)))
        goto fail_self;
    rc = name ? s_map_named(self, name, log, log_arg, err) : s_map_memfd(self, err);
    if (rc)
        goto fail_name;
    if (rc_p)
        *rc_p = 0;
    return self;

fail_name:
    free(self->name);
fail_self:
    free(self);
fail:
    return pk_err_null(rc_p, rc);
}

void
pk_pool_destroy(pk_pool_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_pool_t *self = *self_p;
    munmap(self->base, self->len);
    //  Unlinked before the lock goes: a starter that locks the object
    //  afterwards finds it is no longer the name's, and creates its own.
    if (self->name)
        shm_unlink(self->name);
    if (self->fd >= 0)
        close(self->fd);
    free(self->name);
    free(self);
    *self_p = NULL;
}

void *
pk_pool_base(const pk_pool_t *self)
{
    return self->base;
}

size_t
pk_pool_len(const pk_pool_t *self)
{
    return self->len;
}

const char *
pk_pool_name(const pk_pool_t *self)
{
    return self->name;
}
