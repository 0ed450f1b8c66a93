/*  engine_internal.h: the engine handle, shared by its two files.

    link.c is the conversation with the server's local socket: one
    request, its answer (events arriving before it are queued), and the
    event queue behind p2pkv_engine_fd.  engine.c is open/close, the pool
    mapping and the commands, each a JSON request through pk_elink_ask.
*/
#ifndef PK_ENGINE_INTERNAL_H_INCLUDED
#define PK_ENGINE_INTERNAL_H_INCLUDED

#include "p2pkv_engine.h"
#include "base/keymap.h"

#include <czmq.h>
#include <sys/types.h>
#include <jansson.h>

//  The longest instance identity taken from describe (the server's is
//  32 hex digits).
#define PK_ENGINE_INSTANCE_MAX 64

//  One queued event.  A pull's keys: the missing ones first (the event's
//  missing_keys), then those that landed; results[] says each one's
//  fate, aligned with keys[]; bytes (keys', then sources') follow the
//  arrays in one allocation.  index maps a key to its place, made at the
//  first p2pkv_engine_pull_keys.
typedef struct _pk_elink_event_t {
    struct _pk_elink_event_t *next;
    p2pkv_engine_event_t event;
    p2pkv_key_t *keys;
    p2pkv_engine_pull_key_t *results;
    size_t nkeys;
    pk_keymap_t index;
} pk_elink_event_t;

struct _p2pkv_engine_t {
    zsock_t *sock;              //  DEALER to the server's --local
    char *local_file;           //  its file (an ipc:// path), NULL for others
    uid_t owner;                //  the user the file must belong to
    double timeout;             //  per answer, seconds
    size_t stale;               //  answers of requests that timed out, still to come
    int evfd;                   //  eventfd: readable while the queue is not empty
    int epfd;                   //  epoll of evfd and the socket's ZMQ_FD: p2pkv_engine_fd
    pk_elink_event_t *head, *tail;
    pk_elink_event_t *delivered;    //  the last event handed out (its keys live until the next)
    p2pkv_engine_event_fn *on_event;
    void *arg;
    p2pkv_engine_info_t info;
    uint8_t *pool;
    size_t pool_len;
    //  this handle's reservations not committed yet: key -> (block, its
    //  copied bytes), and a bit per block of the pool
    pk_keymap_t reserved;
    uint8_t *held;
    //  per block: when this handle asked for its reservation (monotonic
    //  seconds), and the server's lease (describe's lease_timeout; 0 from
    //  a server older than it): a write past the lease is refused, since
    //  the server may have given the block to another writer by then
    double *held_at;
    double lease;
    //  blocks written whole by p2pkv_engine_write (or put): the checksum
    //  of what was written, taken while the bytes were in cache, sent with
    //  their commit so the server need not read them again; a bit per
    //  block says which hold one (made at the first whole write)
    uint64_t *sums;
    uint8_t *summed;
    char ns[P2PKV_ENGINE_MAX_NAMESPACE + 1];    //  "" = the shared namespace
    //  The server start whose pool this handle mapped (describe's
    //  "instance"; "" from a server without one), named in every request
    //  after describe; restarted is set once a server refused it (-ESTALE):
    //  the mapping is a dead server's, and write refuses it too.
    char instance[PK_ENGINE_INSTANCE_MAX + 1];
    bool restarted;
};

/*  Local checks of keys[n]: 0, or -EINVAL with err naming the argument.  */
int pk_engine_check_keys(const p2pkv_key_t *keys, size_t n, char *err);

/*  keys as the server's JSON array of lowercase hex; NULL: out of memory.  */
json_t *pk_engine_keys_json(const p2pkv_key_t *keys, size_t n);

/*  Remembers (or forgets) keys[i] as reserved by this handle in blocks[i]:
    0 or -ENOMEM.  */
int pk_engine_hold(p2pkv_engine_t *self, const p2pkv_key_t *keys, size_t n,
                   const uint32_t *blocks);
void pk_engine_unhold(p2pkv_engine_t *self, const p2pkv_key_t *keys, size_t n);
/*  A write into block: whole (block_len bytes at offset 0) notes sum,
    their checksum, to go with the block's commit; not whole (a partial
    write, a block reserved anew) forgets any.  */
void pk_engine_note_sum(p2pkv_engine_t *self, uint32_t block, bool whole, uint64_t sum);
/*  The checksum noted for block, once (false: none; the server takes it).  */
bool pk_engine_take_written(p2pkv_engine_t *self, uint32_t block, uint64_t *sum);

/*  The socket, the eventfd and the epoll fd: 0, or -errno with err.  */
int pk_elink_open(p2pkv_engine_t *self, const char *endpoint, char *err);
void pk_elink_close(p2pkv_engine_t *self);

/*  Sends req (taking it) and waits up to self->timeout for its answer:
    the answer when "ok" is true, else NULL with the server's sentence in
    err and *rc_p its errno (pk_elink_refusal); -ETIMEDOUT when no
    answer came (what names the request in err).  */
json_t *pk_elink_ask(p2pkv_engine_t *self, json_t *req, const char *what, int *rc_p,
                     char *err);

/*  Reads what the socket holds: events to the queue.  Keeps the fd
    truthful; every public call ends with it.  */
void pk_elink_drain(p2pkv_engine_t *self);

/*  Waits for the socket until deadline (monotonic seconds): 1 when it
    has something to read, 0 not.  */
int pk_elink_wait(p2pkv_engine_t *self, double deadline);

/*  The errno the server's refusal sentence stands for (engine_api.c's
    sentences), or -EINVAL.  */
int pk_elink_refusal(const char *text);

#endif
