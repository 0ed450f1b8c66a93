/*  mmap_priv.h: what the files of the mmap transport share (mmap.h).

    mmap.c      the fabric, a channel's life, its queue of messages out,
                the ops table
    mmap_blob.c the address blob: built, parsed, checked
    mmap_writer.c  the server's side: transfers, connect, answers
    mmap_target.c  the consumer's side: the pool mapped, writes copied
    copier.c    the copies, on every core (copier.h)
*/
#ifndef PK_MMAP_PRIV_H_INCLUDED
#define PK_MMAP_PRIV_H_INCLUDED

#include "mmap/mmap.h"
#include "mmap/copier.h"
#include "base/block_check.h"
#include "base/host_id.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PK_MMAP_PROVIDER      "mmap"
#define PK_MMAP_MAGIC         "PKMM"
#define PK_MMAP_VERSION       1
#define PK_MMAP_PAIRS_MAX     2048                //  pairs of blocks per message
//  Bytes one progress call copies at most: a consumer's owner gets back
//  to its sockets every few milliseconds even in a 256 MiB fetch.
#define PK_MMAP_COPY_BUDGET   (32u << 20)

//  --------------------------------------------------------------------------
//  What goes over the socket.  Both ends run on one host, of one build or
//  another of the same ABI: the blob's version says which layout.

//  LENT (consumer -> server): the blocks a round lent were copied
//  (capability lend): a pk_mmap_done_t whose tid is the round's seq.
enum { PK_MMAP_HELLO = 1, PK_MMAP_WRITE = 2, PK_MMAP_DONE = 3, PK_MMAP_LENT = 4 };

typedef struct {
    char magic[4];
    uint8_t version;
    uint8_t target;             //  1: a consumer's (exposes its pool)
    uint16_t zero;
    uint32_t pid;
    uint32_t uid;
    uint64_t block_len;
    char host[PK_HOST_ID_LEN];  //  base/host_id.h, NUL-terminated
    char sock[48];              //  the abstract socket's name, after its NUL
} pk_mmap_blob_t;

typedef struct {
    uint32_t type;              //  PK_MMAP_HELLO; the pool's and the control
    uint32_t zero;              //  page's descriptors ride with it
    uint64_t num_blocks;
    uint64_t block_len;
} pk_mmap_hello_t;

//  a write's pairs are copier.h's pk_copy_pair_t: src the server's
//  block, dst the consumer's

typedef struct {
    uint32_t type;              //  PK_MMAP_WRITE, then n pairs
    uint32_t n;
    uint64_t tid;
    uint64_t round_seq;
    uint32_t last;              //  the transfer's last part
    uint32_t zero;
} pk_mmap_write_t;

#define PK_MMAP_MSG_MAX (sizeof (pk_mmap_write_t) + PK_MMAP_PAIRS_MAX * sizeof (pk_copy_pair_t))

typedef struct {
    uint32_t type;              //  PK_MMAP_DONE
    uint32_t ok;
    uint64_t tid;
    uint64_t landed;
} pk_mmap_done_t;

//  The control page: the server writes it, the consumer maps it read-only.
typedef struct {
    _Atomic uint32_t closed;    //  set by an immediate cancel or close
} pk_mmap_ctrl_t;

//  --------------------------------------------------------------------------

typedef struct _pk_mmap_out_t {
    struct _pk_mmap_out_t *next;
    uint64_t tid;               //  the transfer it belongs to (0: none)
    size_t len;
    uint8_t bytes[];
} pk_mmap_out_t;

typedef struct _pk_mmap_xfer_t {
    struct _pk_mmap_xfer_t *next;
    uint64_t tid;
    size_t nblocks;
    size_t parts, sent;         //  messages of it, and sent of those
    bool lent;                  //  no message: the consumer copies what the
    uint64_t round_seq;         //  round's answer told it, and says LENT
} pk_mmap_xfer_t;

typedef struct {
    uint64_t tid, landed;
    bool ok;
} pk_mmap_finished_t;

typedef struct {
    uint64_t seq, count;
} pk_mmap_round_t;

typedef struct {
    pk_fabric_t head;           //  first: a pk_fabric_t of the seam (transport.h)
    uint8_t *base;
    uint64_t num_blocks, block_len;
    int ro_fd;                  //  the pool, opened read-only; -1: not a file
    char no_fd[160];            //  why not
    double stall_timeout;
    char host[PK_HOST_ID_LEN];
    uint64_t opened, open, refused;
    uint32_t serial;
    pk_copier_t *copier;        //  a consumer's copies, on its cores (copier.h)
} pk_mmap_fabric_t;

typedef struct {
    pk_channel_t head;          //  first: a pk_channel_t of the seam
    pk_mmap_fabric_t *fabric;
    bool target;
    bool closed, connected;
    int epfd, listen_fd, fd;
    char sock[48];
    pk_mmap_ctrl_t *ctrl;             //  the writer's read-write, the target's read-only
    int ctrl_fd;                //  writer: read-only descriptor sent to the target
    pk_mmap_out_t *out_head, *out_tail;
    //  writer
    pk_mmap_xfer_t *xfers;
    pk_mmap_finished_t *finished;
    size_t nfinished, capfinished, ntransfers;
    uint64_t next_tid;
    double last_motion;         //  a part sent or an answer read, for the stall
    //  target
    const uint8_t *src;
    size_t src_len;
    uint64_t src_blocks;
    bool revoked;
    uint8_t *msg;               //  the write being copied
    size_t msg_at;              //  its next pair
    bool msg_open;
    uint64_t cur_tid, cur_landed;
    bool cur_failed;
    pk_mmap_round_t *rounds;
    size_t nrounds, caprounds;
    //  the end-to-end check in the copy (mmap_target.c)
    pk_block_check_t check;
    pk_channel_stats_t stats;
} pk_mmap_channel_t;

//  --------------------------------------------------------------------------
//  Shared between the files (each defined where its concept lives)

//  mmap_target.c: the consumer's check in the copy (transport.h)
int pk_mmap_channel_expect(pk_channel_t *channel, const uint32_t *dest, const uint64_t *sums,
                           size_t n);
void pk_mmap_channel_verdicts(pk_channel_t *channel, const uint32_t *dest, uint8_t *verdict,
                              size_t n);

//  mmap.c: messages out (sent at once when the socket takes them, else
//  queued; flush: 0, or -EPIPE when the connection is gone, then shut),
//  the connection's end (every open transfer fails, nothing more lands,
//  the peer sees end of file), and whether a unix socket's peer runs as
//  our user (by the kernel's word)
int pk_mmap_queue(pk_mmap_channel_t *self, uint64_t tid, const void *bytes, size_t len);
int pk_mmap_flush(pk_mmap_channel_t *self);
void pk_mmap_drop_queued(pk_mmap_channel_t *self, uint64_t tid);
void pk_mmap_shut(pk_mmap_channel_t *self);
int pk_mmap_peer_is(int fd, char *err);

//  mmap_blob.c
int pk_mmap_parse_blob(pk_mmap_fabric_t *self, const uint8_t *bytes, size_t len,
                       pk_mmap_blob_t *b, char *err);
int pk_mmap_blob_provider(const uint8_t *blob, size_t len, char *out, size_t cap, char *err);
int pk_mmap_check_blob(pk_fabric_t *fabric, const uint8_t *blob, size_t len, char *err);
int pk_mmap_channel_blob(pk_channel_t *channel, uint8_t **blob_p, size_t *len_p);

//  mmap_writer.c
pk_mmap_xfer_t *pk_mmap_xfer_find(pk_mmap_channel_t *self, uint64_t tid);
void pk_mmap_finish(pk_mmap_channel_t *self, uint64_t tid, bool ok, uint64_t landed);
int pk_mmap_channel_connect(pk_channel_t *channel, const uint8_t *blob, size_t len, char *err);
int pk_mmap_writer_progress(pk_mmap_channel_t *self);
pk_transport_t pk_mmap_channel_transport(pk_channel_t *channel);

//  mmap_target.c
int pk_mmap_target_progress(pk_mmap_channel_t *self);
uint64_t pk_mmap_channel_landed(pk_channel_t *channel, uint64_t round_seq);
int64_t pk_mmap_channel_lend_copy(pk_channel_t *channel, uint64_t round_seq, const uint32_t *src,
                                  const uint32_t *dst, size_t n);
void pk_mmap_channel_forget(pk_channel_t *channel, uint64_t round_seq);

#endif
