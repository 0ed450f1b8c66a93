/*  transport.c: what every user of the seam shares: refusing a table too
    old for it (also at every fabric's open), and passing a blob between
    two processes.  */
#include "base/transport.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

//  The largest blob read from a descriptor: an ofi blob is well under
//  (a 256-byte address and a 256-byte raw key at most).
#define S_MAX_FD_BLOB 1024

int
pk_transport_ops_check(const pk_transport_ops_t *ops, size_t need, char *err)
{
    if (!ops)
        return pk_err(err, -ENOSYS, "transport: no such transport");
    if (ops->size < need)
        return pk_err(err, -ENOSYS,
                      "transport %s: its ops table has %zu bytes, this caller needs %zu "
                      "(an older implementation)",
                      ops->size >= offsetof(pk_transport_ops_t, name) + sizeof ops->name
                          && ops->name ? ops->name : "?",
                      ops->size, need);
    return 0;
}

pk_fabric_t *
pk_fabric_open(const pk_transport_ops_t *ops, const pk_fabric_config_t *config, void *base,
               uint64_t num_blocks, uint64_t block_len, int *rc_p, char *err)
{
    int rc = pk_transport_ops_check(ops, PK_TRANSPORT_OPS_SIZE, err);
    pk_fabric_t *fabric = rc ? NULL
                             : ops->fabric_open(config, base, num_blocks, block_len, &rc, err);
    if (rc_p)
        *rc_p = fabric ? 0 : rc < 0 ? rc : -EIO;
    return fabric;
}

int
pk_channel_send_blob_fd(pk_channel_t *channel, int fd)
{
    uint8_t *blob;
    size_t len;
    int rc = pk_channel_blob(channel, &blob, &len);
    if (rc)
        return rc;
    uint32_t l32 = (uint32_t) len;
    rc = write(fd, &l32, 4) == 4 && write(fd, blob, len) == (ssize_t) len ? 0 : -EIO;
    free(blob);
    return rc;
}

static int
s_read_full(int fd, void *buf, size_t len)
{
    uint8_t *at = buf;
    while (len) {
        ssize_t n = read(fd, at, len);
        if (n <= 0)
            return -EIO;
        at += n;
        len -= (size_t) n;
    }
    return 0;
}

int
pk_channel_connect_fd(pk_channel_t *channel, int fd, char *err)
{
    uint32_t len;
    uint8_t blob[S_MAX_FD_BLOB];
    if (s_read_full(fd, &len, 4) || len > sizeof blob || s_read_full(fd, blob, len))
        return pk_err(err, -EIO, "transport: no address blob from the peer");
    return pk_channel_connect(channel, blob, len, err);
}

//  How long a rail taken out for the n-th time stays out before an offer
//  pairs it again (protocol.md section 7, "a rail that rejoins"), and how
//  long a consumer whose fresh registration of it failed waits to try
//  again (client_role.c): twice the rail stall, doubling with each time, at most 64 rail stalls.  A
//  rail that fails again costs a round at most a rail stall's wait on it
//  (its chunks are resent then), so a dead rail retried this way costs
//  at most half of the time after its first failure, a quarter after
//  its second, and under 2% once the back-off is capped; the cap (80 s
//  at the default 5 s stall timeout) bounds how long a rail that came
//  back waits.  No setting: the rail stall is the one time scale of a
//  rail's health, and the session's stall bounds it.
double
pk_rail_backoff(double rail_stall, uint64_t failures)
{
    double b = 2 * rail_stall, most = 64 * rail_stall;
    for (uint64_t i = 1; i < failures && b < most; i++)
        b *= 2;
    return b < most ? b : most;
}
