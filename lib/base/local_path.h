/*  local_path.h: where the engine's local socket lives, and who owns it.

    One rule, used by p2pkv-server (its default --local), the p2pkv command
    (put, stats, pull without --local) and the engine library
    (p2pkv_engine_open without an endpoint), written in p2pkv-server(8),
    FILES:

        ipc://DIR/p2pkv-ID.sock

    ID the server's peer id (default this host's name) with every byte but
    A-Z a-z 0-9 . _ - made '_'; DIR, for the process's effective user:
    $XDG_RUNTIME_DIR/p2pkv when XDG_RUNTIME_DIR is an absolute path to a
    directory of that user; else /run/p2pkv for root; else /tmp/p2pkv-UID.
    DIR is the user's own: made 0700 (0710 with a group, --local-group),
    and before any use it must be a directory (lstat: not a symlink) owned
    by the user, writable by nobody else.  In a directory like that no
    other user can put a socket for the engine to find first (issue 34,
    point 6: a predictable name in /tmp could be bound by anyone).
*/
#ifndef PK_LOCAL_PATH_H_INCLUDED
#define PK_LOCAL_PATH_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/*  The longest ipc:// path ZeroMQ binds (sockaddr_un's sun_path less
    its NUL).  */
#define PK_LOCAL_MAX_PATH 107

/*  The default peer id: this host's name, "localhost" when it has none
    (or one that is not text).  */
void pk_local_host_id(char *out, size_t cap);

/*  DIR of the rule above, for this process's effective user.  */
void pk_local_dir(char *out, size_t cap);

/*  The default endpoint "ipc://DIR/p2pkv-ID.sock" for peer_id (NULL:
    pk_local_host_id's).  0, or -ENAMETOOLONG when it does not fit cap.  */
int pk_local_default(const char *peer_id, char *out, size_t cap);

/*  The file of an ipc:// endpoint ("ipc:///run/x.sock" -> "/run/x.sock"),
    or NULL for other transports and abstract names ("ipc://@name").  */
const char *pk_local_file(const char *endpoint);

/*  Makes dir if it is not there (mode 0700, or 0710 with its group gid
    when gid is not (gid_t) -1: an engine of that group may reach the
    socket), then checks it as the rule says.  0, or a negative errno with
    err saying what is wrong with it.  */
int pk_local_dir_prepare(const char *dir, gid_t gid, char *err);

/*  The server, before it binds path: 0 when nothing is there, or a socket
    of its own user that nobody serves (left by a server that was killed:
    removed, and *stale_p set); else -EADDRINUSE with err naming the
    reason: not a socket, another user's, or a live socket another
    process serves.  */
int pk_local_claim(const char *path, bool *stale_p, char *err);

/*  The engine, before it talks to path: 0 when path is a socket owned by
    uid, in a directory that no user but uid and root can change (or a
    sticky one, like /tmp, where only the socket's owner can remove it);
    else -EPERM (or -ENOENT) with err naming what is wrong.  */
int pk_local_check_owner(const char *path, uid_t uid, char *err);

#endif
