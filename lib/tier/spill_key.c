/*  spill_key.c: the disk tier's MAC key file (spill_key.h).  */
#include "tier/spill_key.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int
pk_spill_key_default_path(char *path, size_t size)
{
    const char *state = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");
    int len;
    if (state && *state)
        len = snprintf(path, size, "%s/p2pkv/spill.key", state);
    else if (home && *home)
        len = snprintf(path, size, "%s/.local/state/p2pkv/spill.key", home);
    else
        return -ENOENT;
    return len < 0 || (size_t) len >= size ? -ENAMETOOLONG : 0;
}

//  The directories above path, made 0700 where missing (mkdir -p).
static int
s_make_parents(const char *path)
{
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int) sizeof dir)
        return -ENAMETOOLONG;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    for (char *at = dir + 1; ; at++) {
        bool end = *at == '\0';
        if (*at == '/' || end) {
            *at = '\0';
            if (mkdir(dir, 0700) != 0 && errno != EEXIST)
                return -errno;
            if (end)
                break;
            *at = '/';
        }
    }
    return 0;
}

//  A new key at path: random, written whole and synced in a file of its
//  own, then linked to its name.  The link is what makes it appear, and
//  link(2) refuses a name that exists: two servers started at once with
//  one default path both end up reading the one key that won, never a
//  file still being written (which an O_EXCL create would show them
//  empty), and a crash leaves no short key a restart would take.
static int
s_create(const char *path, uint8_t *key, char *err)
{
    int rc = s_make_parents(path);
    if (rc)
        return pk_err(err, rc, "cannot make the directory of %s: %s", path, strerror(-rc));
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int) sizeof tmp)
        return pk_err(err, -ENAMETOOLONG, "%s: path too long", path);
    int fd = mkstemp(tmp);      //  mode 0600
    if (fd < 0)
        return pk_err(err, -errno, "cannot create a key beside %s: %s", path, strerror(errno));
    randombytes_buf(key, PK_SPILL_KEY_LEN);
    errno = 0;
    rc = write(fd, key, PK_SPILL_KEY_LEN) == PK_SPILL_KEY_LEN && fsync(fd) == 0 ? 0
         : errno ? -errno : -EIO;
    close(fd);
    if (rc == 0 && link(tmp, path) != 0)
        rc = -errno;
    unlink(tmp);
    if (rc == -EEXIST)
        return rc;              //  made meanwhile: read that one
    if (rc)
        return pk_err(err, rc, "cannot write %s: %s", path, strerror(-rc));
    return 0;
}

int
pk_spill_key_load(const char *path, uint8_t key[PK_SPILL_KEY_LEN], char *err)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        int rc = s_create(path, key, err);
        if (rc != -EEXIST)
            return rc;
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0)
        return pk_err(err, -errno, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = pk_err(err, -errno, "cannot stat %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = pk_err(err, -EINVAL, "%s is not a regular file", path);
    else if (st.st_mode & 077)
        rc = pk_err(err, -EPERM, "%s may be read or written by others (mode %03o): "
                    "chmod 600 it", path, (unsigned) (st.st_mode & 0777));
    else if (st.st_size != PK_SPILL_KEY_LEN
             || read(fd, key, PK_SPILL_KEY_LEN) != PK_SPILL_KEY_LEN)
        rc = pk_err(err, -EINVAL, "%s holds %lld bytes, a key is %d", path,
                    (long long) st.st_size, PK_SPILL_KEY_LEN);
    close(fd);
    if (rc)
        sodium_memzero(key, PK_SPILL_KEY_LEN);
    return rc;
}
