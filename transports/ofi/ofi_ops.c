/*  ofi_ops.c: the libfabric transport behind the seam of base/transport.h,
    as the registry finds it ("ofi").  */
#include "base/err.h"
#include "ofi/ofi_bench.h"
#include "ofi/ofi_priv.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  --------------------------------------------------------------------------
//  The seam: pk_transport_ops_t over the functions above.  The casts are
//  the whole adapter: a pk_fabric_t is the head of a pk_ofi_t, a
//  pk_channel_t of a pk_ofi_channel_t, whose ops are this table, so one
//  never reaches another implementation's functions.
_Static_assert(offsetof(pk_ofi_t, head) == 0, "a pk_ofi_t begins with its pk_fabric_t");
_Static_assert(offsetof(pk_ofi_channel_t, head) == 0, "a channel begins with its pk_channel_t");

//  The providers of libfabric's that p2pkv knows apart: shm, and the rest.
//  Under auto, shm after mmap (memcpy beats its process_vm_readv, 10
//  GB/s against 4 here), then libfabric's first network provider (NULL:
//  verbs, then efa, then tcp).
static const pk_provider_t s_providers[] = {
    { "shm", true, 20 },
    { NULL, false, 30 },
};

static pk_fabric_t *
s_fabric_open(const pk_fabric_config_t *config, void *base, uint64_t num_blocks,
              uint64_t block_len, int *rc_p, char *err)
{
    pk_ofi_config_t oc = { NULL, NULL, 5.0, false };
    if (config)
        oc = (pk_ofi_config_t) { config->provider, config->node, config->stall_timeout,
                                 config->delivered };
    //  shm moves bytes between processes of one host: an address to bind
    //  means nothing to it (and fi_getinfo refuses one), so it gets none
    for (size_t i = 0; oc.provider && i < sizeof s_providers / sizeof s_providers[0]; i++)
        if (s_providers[i].name && strcmp(s_providers[i].name, oc.provider) == 0
            && s_providers[i].same_host)
            oc.node = NULL;
    return (pk_fabric_t *) pk_ofi_new(&oc, base, num_blocks, block_len, rc_p, err);
}

static void
s_fabric_close(pk_fabric_t **fabric_p)
{
    pk_ofi_destroy((pk_ofi_t **) fabric_p);
}

static void
s_fabric_describe(const pk_fabric_t *fabric, char *buf, size_t len)
{
    pk_ofi_describe((const pk_ofi_t *) fabric, buf, len);
}

static const char *
s_fabric_provider(const pk_fabric_t *fabric)
{
    return pk_ofi_provider((const pk_ofi_t *) fabric);
}

static bool
s_fabric_has_cq_data(const pk_fabric_t *fabric)
{
    return pk_ofi_has_cq_data((const pk_ofi_t *) fabric);
}

static int
s_check_blob(pk_fabric_t *fabric, const uint8_t *blob, size_t len, char *err)
{
    return pk_ofi_check_blob((pk_ofi_t *) fabric, blob, len, err);
}

static void
s_fabric_stats(const pk_fabric_t *fabric, pk_fabric_stats_t *stats)
{
    pk_ofi_stats_fabric((const pk_ofi_t *) fabric, stats);
}

static pk_channel_t *
s_channel_new(pk_fabric_t *fabric, bool expose, int *rc_p, char *err)
{
    return (pk_channel_t *) pk_ofi_channel_new((pk_ofi_t *) fabric, expose, rc_p, err);
}

static void
s_channel_close(pk_channel_t **channel_p)
{
    pk_ofi_channel_destroy((pk_ofi_channel_t **) channel_p);
}

static int
s_channel_blob(pk_channel_t *channel, uint8_t **blob_p, size_t *len_p)
{
    return pk_ofi_channel_blob((pk_ofi_channel_t *) channel, blob_p, len_p);
}

static int
s_channel_connect(pk_channel_t *channel, const uint8_t *blob, size_t len, char *err)
{
    return pk_ofi_channel_connect((pk_ofi_channel_t *) channel, blob, len, err);
}

static int
s_channel_progress(pk_channel_t *channel)
{
    return pk_ofi_channel_progress((pk_ofi_channel_t *) channel);
}

static int
s_channel_wait_fd(const pk_channel_t *channel)
{
    return pk_ofi_channel_wait_fd((const pk_ofi_channel_t *) channel);
}

static bool
s_channel_trywait(pk_channel_t *channel)
{
    return pk_ofi_channel_trywait((pk_ofi_channel_t *) channel);
}

static uint64_t
s_channel_landed(pk_channel_t *channel, uint64_t round_seq)
{
    return pk_ofi_channel_landed((pk_ofi_channel_t *) channel, round_seq);
}

static void
s_channel_forget(pk_channel_t *channel, uint64_t round_seq)
{
    pk_ofi_channel_forget((pk_ofi_channel_t *) channel, round_seq);
}

static void
s_channel_revoke(pk_channel_t *channel)
{
    pk_ofi_channel_revoke((pk_ofi_channel_t *) channel);
}

static bool
s_channel_closed(const pk_channel_t *channel)
{
    return pk_ofi_channel_closed((const pk_ofi_channel_t *) channel);
}

static void
s_channel_stats(const pk_channel_t *channel, pk_channel_stats_t *stats)
{
    pk_ofi_stats_t f;
    pk_ofi_channel_stats((const pk_ofi_channel_t *) channel, &f);
    *stats = (pk_channel_stats_t) { f.writes_posted, f.blocks_written, f.cq_errors,
                                    f.blocks_landed, f.transfers };
}

static void
s_channel_marks(pk_channel_t *channel)
{
    pk_ofi_channel_marks((pk_ofi_channel_t *) channel);
}

static int
s_channel_slice_sink(pk_channel_t *channel, pk_slice_fn *fn, void *arg)
{
    return pk_ofi_channel_slice_sink((pk_ofi_channel_t *) channel, fn, arg);
}

static int
s_channel_expect(pk_channel_t *channel, const uint32_t *dest, const uint64_t *sums, size_t n)
{
    return pk_ofi_channel_expect((pk_ofi_channel_t *) channel, dest, sums, n);
}

static void
s_channel_verdicts(pk_channel_t *channel, const uint32_t *dest, uint8_t *verdict, size_t n)
{
    pk_ofi_channel_verdicts((pk_ofi_channel_t *) channel, dest, verdict, n);
}

static pk_transport_t
s_channel_transport(pk_channel_t *channel)
{
    return pk_ofi_channel_transport((pk_ofi_channel_t *) channel);
}

const pk_transport_ops_t pk_ofi_transport_ops = {
    .size = sizeof (pk_transport_ops_t),
    .name = "ofi",
    .fabric_open = s_fabric_open,
    .fabric_close = s_fabric_close,
    .fabric_describe = s_fabric_describe,
    .fabric_provider = s_fabric_provider,
    .fabric_has_cq_data = s_fabric_has_cq_data,
    .check_blob = s_check_blob,
    .fabric_stats = s_fabric_stats,
    .channel_new = s_channel_new,
    .channel_close = s_channel_close,
    .channel_blob = s_channel_blob,
    .channel_connect = s_channel_connect,
    .channel_progress = s_channel_progress,
    .channel_wait_fd = s_channel_wait_fd,
    .channel_trywait = s_channel_trywait,
    .channel_landed = s_channel_landed,
    .channel_forget = s_channel_forget,
    .channel_revoke = s_channel_revoke,
    .channel_closed = s_channel_closed,
    .channel_stats = s_channel_stats,
    .channel_transport = s_channel_transport,
    .blob_provider = pk_ofi_blob_provider,
    .channel_expect = s_channel_expect,
    .channel_verdicts = s_channel_verdicts,
    .channel_marks = s_channel_marks,
    .providers = s_providers,
    .nproviders = sizeof s_providers / sizeof s_providers[0],
    .channel_slice_sink = s_channel_slice_sink,
};
