/*  ofi_priv.h: what the files of the libfabric transport share: its
    limits and the layout of a fabric, a channel and its transfers.  Only
    transports/ofi/ includes it.
*/
#ifndef PK_OFI_PRIV_H_INCLUDED
#define PK_OFI_PRIV_H_INCLUDED

#include "base/block_check.h"
#include "base/slices.h"
#include "base/keymap.h"
#include "ofi/ofi.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <stdatomic.h>

//  The mr_mode bits this code honours.  FI_MR_RAW (keys wider than 64
//  bits, mapped by the writer with fi_mr_map_raw) is written to the
//  manual but untested: no provider here demands it.
#define S_MR_MODES (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY \
                    | FI_MR_ENDPOINT | FI_MR_RAW)
#define S_MAX_RAW_KEY 256
#define S_MAX_DEPTH 64
#define S_RX_SIZE 16                //  we post none; providers want some
#define S_BLOB_MAGIC "PKOF"
#define S_MAX_ADDR 256
//  A block mark in the immediate's high half (ofi.h, pk_ofi_channel_marks)
#define S_MARK_BIT (UINT64_C(1) << 63)
#define S_MARK_MAX UINT64_C(0x7fffffff)
//  A slice's immediate (capability slices, ofi.h pk_ofi_channel_slice_sink):
//  its low 12 bits count no block (a write of blocks counts at least one),
//  bit 63 is set, and the mark's 31 bits hold block * 64 + slice, so a
//  sliced block is below 2^25
#define S_SLICE_BITS 6
#define S_SLICE_BLOCK_MAX (S_MARK_MAX >> S_SLICE_BITS)
_Static_assert(S_SLICE_BLOCK_MAX + 1 == PK_SLICE_BLOCKS, "base/slices.h's PK_SLICE_BLOCKS");

struct _pk_ofi_t {
    pk_fabric_t head;               //  first: a pk_fabric_t of the seam (transport.h)
    pk_ofi_config_t config;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_mr *local_mr;        //  for FI_MR_LOCAL, unless FI_MR_ENDPOINT
    uint8_t *base;
    uint64_t num_blocks, block_len;
    bool cq_data;                   //  4 bytes of remote CQ data at least
    char provider[64];
    //  What peers' blobs cost: channels may open and close on several
    //  threads at once (one actor each), hence atomics.
    atomic_uint_fast64_t channels_opened, channels_open, blobs_refused;
};

typedef struct s_op s_op_t;
typedef struct s_xfer s_xfer_t;

struct s_op {
    struct fi_context ctx;          //  first: providers may use it (FI_CONTEXT)
    s_xfer_t *xfer;
    uint64_t local_off, remote_off, len;
    uint64_t imm;
    uint32_t blocks;
    bool posted;
    double since;                   //  first -FI_EAGAIN, then the time posted
    s_op_t *prev, *next;            //  the queue of ops not yet posted, then
                                    //  the list of posted ones, oldest first
};

struct s_xfer {
    uint64_t tid;
    size_t nops, ended;
    uint64_t landed;                //  blocks of completed writes
    bool failed, released;
    s_op_t ops[];
};

//  A round tag's counter.  The immediate carries only the tag, so the
//  counter is claimed by the first full round that asks for it; asked for
//  by another round it starts over, and forget drops it when the round's
//  load ended: after 2^20 rounds a tag never hands a new round an old
//  round's count (a fetch reported landed early).
typedef struct {
    uint32_t tag;
    bool owned;
    uint64_t round;                 //  the full round, once owned
    uint64_t count;
} s_landed_t;

typedef struct {
    uint64_t tid;
    bool ok;
    uint64_t landed;
} s_finished_t;

struct _pk_ofi_channel_t {
    pk_channel_t head;              //  first: a pk_channel_t of the seam
    pk_ofi_t *ofi;
    struct fid_ep *ep;
    struct fid_cq *cq;
    int wait_fd;                    //  the CQ's wait object, or -1
    struct fid_av *av;
    struct fid_mr *expose_mr;       //  the pool, for this peer's remote writes
    struct fid_mr *local_mr;        //  per endpoint when FI_MR_ENDPOINT
    void *desc;
    uint64_t expose_key;
    uint8_t raw_key[S_MAX_RAW_KEY]; //  FI_MR_RAW: the exposed key's bytes
    size_t raw_key_len;
    uint64_t raw_base;              //  FI_MR_RAW: the address the peer uses
    bool closed;

    bool connected;
    fi_addr_t peer;
    uint64_t peer_key, peer_base, peer_blocks, peer_block_len;
    bool peer_exposed;
    bool peer_key_mapped;           //  peer_key came from fi_mr_map_raw

    size_t depth, credits;
    double completed_at;            //  when a write of ours last completed
    double moved_at;                //  ... or was posted (pk_ofi_channel_trywait)
    s_op_t *queue_head, *queue_tail;
    s_op_t *posted_head, *posted_tail;
    uint64_t next_tid;
    pk_keymap_t xfers;              //  tid -> transfer, until reported or released
    s_finished_t *finished;
    size_t nfinished, capfinished;
    pk_keymap_t landed;             //  round tag -> s_landed_t
    //  writer: the peer reads block marks (pk_ofi_channel_marks) and
    //  the provider carries 64 bits of CQ data
    bool marks;
    //  target: the end-to-end check at each marked immediate
    pk_block_check_t check;
    //  target: where slice immediates go (pk_ofi_channel_slice_sink)
    pk_slice_fn *slice_fn;
    void *slice_arg;
    pk_ofi_stats_t stats;
};

#endif
