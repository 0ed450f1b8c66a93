/*  p2pkv.h: the client library: have a server's KV-cache blocks written
    straight into your memory.

    A client owns (or is given) a pool of num_blocks * block_len bytes and
    connects to one or more p2pkv-servers; for each it keeps a session with
    its own libfabric endpoint and registration of the pool.  Ask a server
    which keys it holds (lookup), then have the hits written into chosen
    blocks of the pool (fetch); each fetch ends exactly once, by callback
    from p2pkv_client_poll, as landed (every byte is in the pool), failed
    or aborted, and only then may its destination blocks be reused.

    Threads: a client is driven by one thread at a time, the one calling
    p2pkv_client_poll (which runs the callbacks); every other call must
    come from that thread too.  Nothing runs in the background: poll at
    least every few milliseconds while fetches are open, and keep polling
    while idle (a target that does not progress its endpoint stalls
    writers; heartbeats need it too).
*/
#ifndef P2PKV_H_INCLUDED
#define P2PKV_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _p2pkv_client_t p2pkv_client_t;

typedef struct {
    const uint8_t *bytes;
    size_t len;
} p2pkv_key_t;

typedef enum {
    P2PKV_LANDED = 0,
    P2PKV_FAILED,
    P2PKV_ABORTED
} p2pkv_status_t;

typedef struct {
    char peer_id[256];
    uint64_t block_len;
    char fingerprint[256];
    char hash_seed[256];
    char provider[64];
} p2pkv_description_t;

typedef struct {
    void *arg;
    /*  A lookup's answer: keys in the order asked, hits parallel.  */
    void (*on_lookup)(void *arg, int server, const char *kv, uint64_t round,
                      const p2pkv_key_t *keys, const bool *hits, size_t n);
    /*  A fetch ended; its destination blocks may be reused now.  */
    void (*on_fetch)(void *arg, int server, uint64_t fetch_id, p2pkv_status_t status,
                     const char *reason);
} p2pkv_callbacks_t;

typedef struct {
    const char *peer_id;            //  this consumer's name (required)
    const char *fingerprint;        //  must equal the servers' ("")
    const char *hash_seed;          //  must equal the servers' ("0")
    const char *provider;           //  libfabric provider ("tcp"; NULL: verbs, efa, tcp)
    const char *node;               //  local address for the fabric (NULL: any)
    double load_timeout;            //  30 s
    double abort_ack_timeout;       //  10 s
    double keepalive;               //  2 s
    double silence;                 //  10 s
} p2pkv_config_t;

/*  Learns a server's block length, fingerprint and hash seed (so a tool
    can size its pool before connecting).  0 or a negative errno with err
    (256 bytes).  */
int p2pkv_describe(const char *endpoint, double timeout, p2pkv_description_t *out, char *err);

/*  A client over pool (num_blocks * block_len bytes the caller owns), or
    over a pool it allocates when pool is NULL.  */
p2pkv_client_t *p2pkv_client_new(const p2pkv_config_t *config, void *pool, uint64_t num_blocks,
                                 uint64_t block_len, p2pkv_callbacks_t callbacks, char *err);
void p2pkv_client_destroy(p2pkv_client_t **self_p);
uint8_t *p2pkv_client_pool(p2pkv_client_t *self);

/*  Connects to a server, waiting up to timeout for its connect_ack.
    Returns the server's index (>= 0) or a negative errno with err (a
    refused handshake names the field that differs).  */
int p2pkv_client_connect(p2pkv_client_t *self, const char *endpoint, double timeout, char *err);

/*  Asks the server about keys; the answer comes to on_lookup.  */
int p2pkv_client_lookup(p2pkv_client_t *self, int server, const char *kv,
                        const p2pkv_key_t *keys, size_t n);

/*  Has the server write keys into blocks dest[] of the pool.  round: the
    lookup's round whose hits these are (from on_lookup), or 0.  deadline
    in seconds (0: load_timeout).  The end comes to on_fetch.  */
int p2pkv_client_fetch(p2pkv_client_t *self, int server, const char *kv, const p2pkv_key_t *keys,
                       const uint32_t *dest, size_t n, uint64_t round, double deadline,
                       uint64_t *fetch_id_p);

/*  The request is done on that server.  */
int p2pkv_client_finish(p2pkv_client_t *self, int server, const char *kv);

/*  Drives everything for up to timeout seconds (0: once, without
    waiting): sockets, endpoints, timers, callbacks.  Returns the number
    of callbacks run, or a negative errno.  */
int p2pkv_client_poll(p2pkv_client_t *self, double timeout);

/*  Fetches not ended yet, on all servers.  */
size_t p2pkv_client_open_fetches(const p2pkv_client_t *self);

#endif
