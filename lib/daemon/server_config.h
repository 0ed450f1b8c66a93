/*  server_config.h: the settings of the p2pkv-server daemon.

    Three layers, later ones winning: the built-in defaults, which run out
    of the box on one machine with libfabric's tcp provider; a config file
    named by --config (name = value lines, the long options' names); and
    the command line, which overrides the file wherever it appears on the
    line.  Everything is validated before the daemon touches a socket, so
    a bad setting is a one-line usage error naming the option, the value
    and the rule, never a failure halfway through start-up.

    The timeouts and limits are those of doc/protocol.md sections 5, 6 and
    8; doc/p2pkv-server.8 and pk_server_config_usage() say the same thing
    for the operator.  Parsing uses getopt_long, whose state is global:
    not thread-safe, but it may run any number of times in one process.

    (The file is not called config.h: lib/version.h includes the config.h
    that configure writes, and a lib/config.h would shadow it.)
*/
#ifndef PK_SERVER_CONFIG_H_INCLUDED
#define PK_SERVER_CONFIG_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "p2pkv.h"
#include "base/err.h"
#include "roles/server_session.h"
#include "daemon/tenants.h"

#define PK_LOG_ERROR 0
#define PK_LOG_WARN  1
#define PK_LOG_INFO  2
#define PK_LOG_DEBUG 3

/*  The daemon's exit statuses (and what --help says about them).  */
#define PK_EXIT_OK      0
#define PK_EXIT_RUNTIME 1
#define PK_EXIT_USAGE   2

/*  Every timeout is at most this many seconds, so that it converts to
    milliseconds in an int (zmq_poll, zloop) with room to spare.  */
#define PK_CONFIG_MAX_SECONDS 1000000.0

/*  --fair-inflight or --fair-quantum not given: sized by the block length
    (node.c).  Above what an option accepts (INT64_MAX).  */
#define PK_FAIR_AUTO UINT64_MAX

/*  --fair-weights' largest weight (scheduler.h's PK_SCHED_MAX_WEIGHT).  */
#define PK_FAIR_MAX_WEIGHT 1000

typedef struct {
    char *bind;                 //  ROUTER endpoint for peers: "tcp://*:5710"
    char *local;                //  endpoint for the engine: "ipc://DIR/p2pkv-ID.sock" (local_path.h)
    unsigned local_mode;        //  the socket file's mode: 0600 (0660 with local_group)
    char *local_group;          //  the socket's (and DIR's) group; NULL = the server's
    char *peer_id;              //  the host name
    uint64_t pool_blocks;       //  1024
    uint64_t block_len;         //  65536
    char *pool_name;            //  shm name: "/p2pkv-ID" (ID sanitised)
    char *provider;             //  "shm,tcp": one fabric each, best first; NULL = auto
                                //  (shm where it works, then verbs, efa or tcp)
    char *fabric_addr;          //  the data plane's local address; NULL = the provider's
    char *fingerprint;          //  ""
    char *hash_seed;            //  "0"
    char *spill_dir;            //  the disk tier's directory (disk_tier.h); NULL = none
    uint64_t spill_size;        //  its data file's bytes; 0 with no spill_dir
    char *spill_key;            //  its MAC key file (spill_key.h); NULL = the default
    char *metrics_bind;         //  "ADDR:PORT", NULL = no metrics listener
    char **allow;               //  IPv4/IPv6 addresses or CIDR ranges; none = everyone
    size_t nallow;
    char *curve_secret;         //  the server's czmq certificate (NAME_secret); NULL = no CURVE
    char *curve_allow;          //  directory of the consumers' public certificates
    char *curve_servers;        //  directory of the servers' public certificates (for pull)
    int log_level;              //  PK_LOG_*: PK_LOG_INFO
    bool no_block_checksums;    //  --block-checksums off (default on)
    bool no_gets;               //  --gets off: connect_ack leaves out get (default on)
    bool no_stream_gets;        //  --stream-gets off: a get's hits are written after
                                //  its lookup's last key (default on: as they land)
    char *tenants;              //  --tenants FILE; NULL = one shared namespace
    //  The writes' fair share across sessions (scheduler.h, design.md)
    //  bytes; PK_FAIR_AUTO (the defaults) asks node.c for 4 MiB or 16
    //  blocks, and 256 KiB or 4 blocks, whichever is more: 4 MiB is only 4
    //  blocks of 1 MiB, too few to keep a channel busy
    uint64_t fair_inflight;     //  writes in flight, whole server; 0 = off
    uint64_t fair_quantum;      //  granted per turn to a session of weight 1
    char *fair_weights;         //  --fair-weights NS=W,...; NULL = every weight 1
    unsigned short fair_weight[PK_NS_MAX];  //  by namespace, from fair_weights (1..1000)
    pk_tenants_t *tenant_map;   //  FILE as read by parse (tenants.h); NULL without
    //  Timeouts in seconds (0 < t <= PK_CONFIG_MAX_SECONDS), server side.
    double lookup_timeout;      //  5: parked lookup keys answer as misses
    double store_timeout;       //  30: a store job fails its round
    double drain_timeout;       //  10: then in-flight writes are cancelled at once
    double silence_timeout;     //  10: retire a silent session (consumer: drop a silent server)
    double lease_timeout;       //  30: an engine reservation not committed is freed
    double stall_timeout;       //  5: a stalled write closes the peer's data channel
    double rail_stall;          //  0: stall_timeout / 4; a rail stalled this long
                                //  while another completes is taken out
    double shutdown_timeout;    //  5: bound on the drain at SIGINT/SIGTERM
    //  Limits of protocol.md section 6 (per session unless said otherwise).
    uint64_t max_requests;      //  16384 live requests
    uint64_t max_parked_keys;   //  65536 keys in parked lookups
    uint64_t max_rounds;        //  1024 rounds per request
    uint64_t pin_quota;         //  0 = a quarter of pool_blocks (pk_server_config_pin_quota)
    uint64_t max_queued_frames; //  256 frames queued for the session's actor
    uint64_t max_queued_bytes;  //  128 MiB of frames queued for the session's actor
    uint64_t max_unread_bytes;  //  64 MiB of answers handed to ZeroMQ, not yet written
    uint64_t max_frame;         //  64 MiB, ZMQ_MAXMSGSIZE (whole server)
    uint64_t max_sessions;      //  256 (whole server)
    //  Timeouts of the consumer side (the daemon pulling from a peer),
    //  with silence_timeout and stall_timeout: pk_server_config_client.
    double load_timeout;        //  30: without transfer_done, abort_fetch
    double abort_ack_timeout;   //  10: then close the server's endpoint, fail the load
    double connect_retry;       //  0.5: resend connect
    double keepalive_interval;  //  2: ping a server we sent nothing to
    //  the cluster directory (issue 14)
    char *directory;            //  redis://HOST:PORT[,...][/DB]; NULL = none
    bool directory_optional;    //  set by --directory-optional: no Redis at start warns
    double directory_ttl;       //  3: our record's TTL in Redis; heartbeat at a third
    double directory_timeout;   //  1: bound on the connect and each read or write
} pk_server_config_t;

/*  The client configuration the daemon's puller runs with: every
    consumer-side setting under the p2pkv_config_t field of the same name
    (load_timeout, abort_ack_timeout, keepalive_interval, silence_timeout,
    connect_retry, stall_timeout), the handshake's fingerprint, hash_seed
    and provider, fabric_addr as node, directory, and peer_id; no_reconnect (a
    session per pull, nobody keeps it alive between pulls), no progress
    thread.  The strings point into self and peer_id.  One function, so
    that a setting cannot be parsed and documented and then not reach the
    puller (issue 10: --connect-retry never did).  */
p2pkv_config_t pk_server_config_client(const pk_server_config_t *self, const char *peer_id);

/*  The session configuration every peer's session runs with: the role's
    lookup, store and drain timeouts, the silence timeout, the limits of
    protocol.md section 6 and the pin quota in effect.  One function, as
    pk_server_config_client is, so that every session setting reaches
    the sessions the same way.  */
pk_server_session_config_t pk_server_config_session(const pk_server_config_t *self);

/*  Fills self with the defaults (every string malloc'd; the run
    directory is read from $XDG_RUNTIME_DIR and the peer id from the host
    name now).  Returns 0 or -ENOMEM; self is always safe to fini.  */
int pk_server_config_defaults(pk_server_config_t *self);

/*  Fills self from the defaults, the file named by --config and argv (in
    that order of precedence, lowest first), as getopt_long parses argv:
    every field is a long option with dashes (--pool-blocks 4096,
    --lookup-timeout 0.5, --allow 10.0.0.0/8, which repeats and takes
    comma-separated lists), plus -c/--config FILE, -h/--help and
    -V/--version.  --local and --pool-name follow the final --peer-id
    unless set.  self's previous contents are overwritten, not freed.

    Returns 0 (run with self), 1 when --help or --version printed to out
    (exit 0), or a negative errno (-EINVAL for a bad option or value,
    -ENOMEM, or what opening or reading the file said) with a one-line
    message in err (PK_ERRLEN bytes, or NULL) naming the option, the value and the rule, e.g.
    --pool-blocks: expected an integer 1..2147483648, got "abc".
    Whatever it returns, self must be passed to pk_server_config_fini.  */
int pk_server_config_parse(pk_server_config_t *self, int argc, char **argv, FILE *out,
                           char *err);

/*  Frees the strings and empties self; safe to call twice.  */
void pk_server_config_fini(pk_server_config_t *self);

/*  The --help text: every option, its meaning and its default.  */
const char *pk_server_config_usage(void);

/*  The pin quota in effect: pin_quota, or a quarter of the pool (at
    least 1) when it is 0.  */
uint64_t pk_server_config_pin_quota(const pk_server_config_t *self);

/*  Whether a peer at address (IPv4 or IPv6 text, as ZAP reports it) may
    connect: always when allow is empty, else when the address falls in
    one of its ranges.  An IPv4-mapped IPv6 address (::ffff:a.b.c.d, what a
    dual-stack socket reports) is matched as IPv4.  czmq's zauth compares
    whole address strings only, so a ZAP handler that honours CIDR ranges
    asks this.  */
bool pk_server_config_allows(const pk_server_config_t *self, const char *address);

/*  The name of a PK_LOG_* level ("error", "warn", "info", "debug"), or
    NULL.  */
const char *pk_server_config_log_level_name(int level);

#endif
