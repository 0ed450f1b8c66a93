/*  dir_entry.h: the cluster directory's names and values in Redis, the
    one codec the daemon (which writes them) and the client (which reads
    them) share.  doc/directory.md is the data model; in short:

        {p2pkv:servers}                 SET of peer ids that published
        {p2pkv:servers}:rec:PEER        STRING, the server's record (JSON),
                                        with a TTL the heartbeat refreshes
        p2pkv:key:HEX                   SET of the peer ids holding a key
        p2pkv:held:{PEER}               SET of the HEX keys PEER published

    The servers' names share a hash tag, so one MGET reads any number of
    records in one slot of a Redis Cluster; key sets spread over all
    slots; a server's own index has its own slot.

    Nothing here talks to Redis: names and values in, names and values
    out, so it is tested without a server.  A value that does not parse
    (another program's key, a truncated record) is -EINVAL: the caller
    counts it and ignores it.
*/
#ifndef PK_DIR_ENTRY_H_INCLUDED
#define PK_DIR_ENTRY_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PK_DIR_SERVERS      "{p2pkv:servers}"
#define PK_DIR_KEY_PREFIX   "p2pkv:key:"
#define PK_DIR_MAX_HOST     255
#define PK_DIR_MAX_ID       4096        //  a peer id, as --peer-id
#define PK_DIR_MAX_ENDPOINT 255
#define PK_DIR_MAX_PROVIDERS 8          //  as many as --provider may list
#define PK_DIR_MAX_HOST_ID  127         //  base/host_id.h's identity

/*  redis://HOST:PORT[,HOST:PORT...][/DB]: HOST a name, an IPv4 address
    or [IPv6], PORT 1..65535, DB 0..15 (default 0).  Several nodes are
    seeds of one Redis Cluster (or one Redis and its stand-ins): a connect
    tries them in turn, so the directory survives the one it used.  To
    them the connection adds every node the Cluster itself named (its
    primaries and replicas, up to PK_DIR_MAX_NODES in all), so a server
    given one seed still finds the Cluster again when that one dies.  */
#define PK_DIR_MAX_SEEDS 16
#define PK_DIR_MAX_NODES 64
typedef struct {
    char host[PK_DIR_MAX_HOST + 1];
    int port;
} pk_dir_node_t;

typedef struct {
    pk_dir_node_t node[PK_DIR_MAX_NODES];   //  the seeds, then the learnt ones
    size_t nseeds, nnodes;
    size_t last_good;               //  the node a connect last reached first
    int db;
} pk_dir_url_t;

/*  What a URL looks like, for the messages that refuse one.  */
#define PK_DIR_URL_FORM "redis://HOST:PORT[,HOST:PORT...][/DB] (PORT 1..65535, DB 0..15, " \
                        "at most 16 nodes)"

/*  0, or -EINVAL with err (PK_ERRLEN bytes, or NULL) saying what the URL
    should look like; out NULL only checks it.  */
int pk_dir_url_parse(const char *url, pk_dir_url_t *out, char *err);

/*  Learns a node the Cluster named: kept after the seeds if not already
    there and there is room (the first ones named win).  */
void pk_dir_url_learn(pk_dir_url_t *self, const char *host, int port);

/*  What a server publishes about itself: enough to connect (endpoint),
    to choose (host_id: the same host is preferred, and shm used; host,
    its name, for records without host_id) and to know before connecting
    whether the handshake would refuse us.  A record written before
    providers and host_id existed parses with providers = { provider }
    and host_id "".  */
typedef struct {
    char peer_id[PK_DIR_MAX_ID + 1];
    char endpoint[PK_DIR_MAX_ENDPOINT + 1];
    char host[PK_DIR_MAX_HOST + 1];
    uint64_t block_len;
    uint64_t pool_blocks;
    char provider[64];              //  the best of providers
    char fingerprint[PK_DIR_MAX_ID + 1];
    char providers[PK_DIR_MAX_PROVIDERS][64];
    size_t nproviders;
    char host_id[PK_DIR_MAX_HOST_ID + 1];
} pk_dir_record_t;

/*  The record as JSON, malloc'd (NULL: out of memory).  */
char *pk_dir_record_encode(const pk_dir_record_t *record);

/*  0, or -EINVAL for anything but a record of this version with every
    field in range.  */
int pk_dir_record_parse(const char *text, size_t len, pk_dir_record_t *out);

/*  Redis key names, NUL-terminated in out (cap bytes); the length, or
    -ENOSPC.  The key's bytes become lowercase hex: binary-safe for any
    tool and the same bytes p2pkv's wire uses.  */
int pk_dir_key_name(const uint8_t *key, size_t len, char *out, size_t cap);
int pk_dir_record_name(const char *peer_id, char *out, size_t cap);
int pk_dir_held_name(const char *peer_id, char *out, size_t cap);

/*  Bytes a key's name takes, its NUL included.  */
#define PK_DIR_KEY_NAME_LEN(len) (sizeof PK_DIR_KEY_PREFIX + 2 * (len))

#endif
