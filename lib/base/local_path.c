/*  local_path.c: the rule of the local socket's default path, the checks
    of its directory, and who owns it (local_path.h).
*/
#include "base/local_path.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

void
pk_local_host_id(char *out, size_t cap)
{
    //  gethostname may leave the buffer unterminated when it truncates
    char host[256] = "";
    bool ok = gethostname(host, sizeof host - 1) == 0 && host[0];
    for (const char *c = host; ok && *c; c++)
        ok = *c > 0x20 && *c < 0x7f;
    snprintf(out, cap, "%s", ok ? host : "localhost");
}

//  $XDG_RUNTIME_DIR is per user and cleaned at logout, which is what a
//  socket wants; it is only taken when it is an absolute path to a
//  directory of this user (a stale or borrowed value would put the socket
//  where another user may reach it).
void
pk_local_dir(char *out, size_t cap)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    uid_t uid = geteuid();
    if (xdg && xdg[0] == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid)
        snprintf(out, cap, "%s/p2pkv", xdg);
    else if (uid == 0)
        snprintf(out, cap, "/run/p2pkv");
    else
        snprintf(out, cap, "/tmp/p2pkv-%u", (unsigned) uid);
}

int
pk_local_default(const char *peer_id, char *out, size_t cap)
{
    char host[256], dir[PK_LOCAL_MAX_PATH + 1];
    if (!peer_id) {
        pk_local_host_id(host, sizeof host);
        peer_id = host;
    }
    pk_local_dir(dir, sizeof dir);
    int n = snprintf(out, cap, "ipc://%s/p2pkv-", dir);
    size_t at = n > 0 ? (size_t) n : 0;
    //  the peer id where a file name wants it: [A-Za-z0-9._-], else '_'
    for (const char *c = peer_id; *c && at + 1 < cap; c++, at++) {
        bool keep = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z')
                    || (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' || *c == '-';
        out[at] = keep ? *c : '_';
    }
    if (at < cap)
        out[at] = 0;
    if (at + sizeof ".sock" > cap || strlen(peer_id) + (size_t) n != at)
        return -ENAMETOOLONG;
    memcpy(out + at, ".sock", sizeof ".sock");
    return 0;
}

const char *
pk_local_file(const char *endpoint)
{
    if (!endpoint || strncmp(endpoint, "ipc://", 6) != 0 || endpoint[6] == '@' || !endpoint[6])
        return NULL;
    return endpoint + 6;
}

//  What is wrong with directory st (lstat'ed) for uid, or NULL.
static const char *
s_dir_fault(const struct stat *st, uid_t uid)
{
    if (S_ISLNK(st->st_mode))
        return "is a symbolic link";
    if (!S_ISDIR(st->st_mode))
        return "is not a directory";
    if (st->st_uid != uid)
        return "belongs to another user";
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return "is writable by other users";
    return NULL;
}

int
pk_local_dir_prepare(const char *dir, gid_t gid, char *err)
{
    mode_t mode = gid == (gid_t) -1 ? 0700 : 0710;
    struct stat st;
    //  mkdir under the umask gives at most mode; lstat then looks at
    //  what is there, whoever made it
    if (mkdir(dir, mode) != 0 && errno != EEXIST)
        return pk_err(err, -errno, "cannot make the socket's directory %s: %s", dir,
                      strerror(errno));
    if (lstat(dir, &st) != 0)
        return pk_err(err, -errno, "cannot look at the socket's directory %s: %s", dir,
                      strerror(errno));
    const char *fault = s_dir_fault(&st, geteuid());
    if (fault)
        return pk_err(err, -EPERM, "the socket's directory %s %s (uid %u, mode %04o): "
                      "refused, as a place another user could control", dir, fault,
                      (unsigned) st.st_uid, (unsigned) (st.st_mode & 07777));
    //  the group's search bit, and only it: an engine of that group
    //  reaches the socket by name and can create nothing here
    if (gid != (gid_t) -1 && (st.st_gid != gid || (st.st_mode & 0777) != mode)) {
        if (chown(dir, (uid_t) -1, gid) != 0 || chmod(dir, mode) != 0)
            return pk_err(err, -errno, "cannot give the socket's directory %s to group %u: "
                          "%s", dir, (unsigned) gid, strerror(errno));
    }
    return 0;
}

int
pk_local_claim(const char *path, bool *stale_p, char *err)
{
    struct stat st;
    *stale_p = false;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : pk_err(err, -errno, "cannot look at %s: %s", path,
                                            strerror(errno));
    if (!S_ISSOCK(st.st_mode))
        return pk_err(err, -EADDRINUSE, "%s exists and is not a socket (mode %06o, uid %u): "
                      "refused, remove it or choose another --local", path,
                      (unsigned) st.st_mode, (unsigned) st.st_uid);
    if (st.st_uid != geteuid())
        return pk_err(err, -EADDRINUSE, "%s is a socket of uid %u, not this server's uid %u: "
                      "refused, another user's socket is no place for this server's engine",
                      path, (unsigned) st.st_uid, (unsigned) geteuid());
    //  Ours: a live server answers a connect, a dead one's file refuses
    //  it.  A connect costs the live one an accepted and closed
    //  connection, nothing it logs.
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path)
        return pk_err(err, -ENAMETOOLONG, "%s: longer than a socket's path", path);
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return pk_err(err, -errno, "cannot make a socket: %s", strerror(errno));
    int rc = connect(fd, (struct sockaddr *) &sa, sizeof sa);
    int why = errno;
    close(fd);
    if (rc == 0)
        return pk_err(err, -EADDRINUSE, "%s is a live socket another process serves (another "
                      "p2pkv-server with this --local?): refused", path);
    if (why != ECONNREFUSED)
        return pk_err(err, -EADDRINUSE, "%s: cannot tell whether another process serves it "
                      "(%s): refused", path, strerror(why));
    if (unlink(path) != 0 && errno != ENOENT)
        return pk_err(err, -errno, "cannot remove the stale socket %s: %s", path,
                      strerror(errno));
    *stale_p = true;
    return 0;
}

int
pk_local_check_owner(const char *path, uid_t uid, char *err)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return pk_err(err, -errno, "local_endpoint: %s: %s (is p2pkv-server running with "
                      "--local there?)", path, strerror(errno));
    if (!S_ISSOCK(st.st_mode))
        return pk_err(err, -EPERM, "local_endpoint: %s is not a socket: refused", path);
    if (st.st_uid != uid)
        return pk_err(err, -EPERM, "local_endpoint: %s belongs to uid %u, not uid %u, the "
                      "server's user this engine expects (P2PKV_LOCAL_OWNER): refused, "
                      "it may be another user's impostor", path, (unsigned) st.st_uid,
                      (unsigned) uid);
    //  the directory: could another user have replaced the socket between
    //  this look and the connect, or replace it later, when ZeroMQ
    //  reconnects?  Not if only uid and root write there, or if it is
    //  sticky (only the owner of an entry removes or renames it)
    char dir[PK_LOCAL_MAX_PATH + 1];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        slash[slash == dir] = 0;        //  "/x.sock" -> "/"
    if (stat(dir, &st) != 0)
        return pk_err(err, -errno, "local_endpoint: cannot look at %s: %s", dir,
                      strerror(errno));
    bool others_write = st.st_mode & (S_IWGRP | S_IWOTH);
    if ((st.st_uid != uid && st.st_uid != 0) || (others_write && !(st.st_mode & S_ISVTX)))
        return pk_err(err, -EPERM, "local_endpoint: %s's directory %s (uid %u, mode %04o) "
                      "lets other users replace the socket: refused", path, dir,
                      (unsigned) st.st_uid, (unsigned) (st.st_mode & 07777));
    return 0;
}
