/*  bench.h: what the suites of p2pkv-bench share.

    main.c parses the command line into a pkb_opts_t and runs one suite;
    report.c turns each suite's rows into a table, a JSON file (--json)
    and a plot (--plot); procs.c starts and stops every process a suite
    needs (p2pkv-server, consumers, fabric targets), reads their
    resource use from /proc, and cleans up on error and on SIGINT or
    SIGTERM; consumer.c is the library consumer that fetch, control and
    sessions fork.

    Every figure is measured over repetitions and reported as min,
    median and max (pkb_fig_t); ratios are taken within one repetition.
*/
#ifndef PKB_BENCH_H_INCLUDED
#define PKB_BENCH_H_INCLUDED

#include "p2pkv.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PKB_MAX_LIST 16          //  values of one list option
#define PKB_MAX_REPS 64

typedef struct {
    size_t n;
    uint64_t v[PKB_MAX_LIST];
} pkb_list_t;

#define PKB_MAX_PROVIDERS 8

/*  Requests a consumer keeps going at once (--in-flight; 2 by default:
    one request's lookup and dispatch overlap the other's transfer, as an
    engine schedules them; 1 gives round trips with no queue ahead).  */
#define PKB_MAX_IN_FLIGHT 8
#define PKB_IN_FLIGHT(o) ((o)->in_flight ? (int) (o)->in_flight : 2)

/*  The consumers' answer_spin in microseconds, as it takes effect (0:
    none), which the ZeroMQ echo waits as well.  */
#define pkb_answer_spin_us(o) \
    (((o)->answer_spin == 0 ? P2PKV_ANSWER_SPIN : (o)->answer_spin < 0 ? 0 : (o)->answer_spin) * 1e6)

/*  A list of provider names (--providers shm,tcp), as given, and joined
    back with commas for the server's --provider.  */
typedef struct {
    size_t n;
    char v[PKB_MAX_PROVIDERS][64];
    char joined[PKB_MAX_PROVIDERS * 65];
} pkb_names_t;

typedef struct {
    const char *suite;
    bool quick;
    bool threads;               //  --threads: fetch and control's consumers are
                                //  threads of one process
    const char *json;           //  --json FILE
    const char *plot;           //  --plot FILE.svg
    int reps;                   //  --reps (0: the suite's default)
    pkb_list_t block_sizes;     //  --block-sizes (bytes)
    pkb_list_t blocks;          //  --blocks (per fetch)
    pkb_list_t batches;         //  --batches (fabric)
    pkb_list_t consumers;       //  --consumers
    pkb_list_t keys;            //  --keys (per lookup)
    pkb_list_t sessions;        //  --sessions (server side)
    pkb_list_t servers;         //  --servers (client side)
    uint64_t max_sessions;      //  --max-sessions (0: the suite's choice)
    uint64_t in_flight;         //  --in-flight: requests per consumer (0: 2)
    double answer_spin;         //  --answer-spin, seconds as p2pkv_config_t's (0: the
                                //  library's 200 us, negative: none)
    double seconds;             //  --seconds per timed phase (0: default)
    double idle;                //  --idle S of the sessions' idle CPU
    uint64_t requests;          //  role: requests
    const char *server;         //  --server PATH of p2pkv-server
    int port_lo, port_hi;       //  --ports LO-HI for servers' --bind
    pkb_names_t providers;      //  --providers (fetch): the same fetch over each,
                                //  against one server offering them all
    bool verify_cost;           //  --verify-cost (fetch): each load twice, with the
                                //  end-to-end check and without, in each repetition
    bool one_trip;              //  --one-trip (fetch): consumers use p2pkv_client_get
    pkb_list_t rails;           //  --rails (rails): rail counts (default 1,2,4)
    uint64_t rate;              //  --rate (rails): Mbit/s per rail (0: PKB_RAILS_RATE)
    pkb_list_t rates;           //  --rates (rails): a rate per rail (unequal rails)
    bool lose_rail;             //  --lose-rail (rails): a fetch per count that loses a rail
    const char *spill_dir;      //  --spill-dir (disk): where its spill directories go
} pkb_opts_t;

/*  ---- figures and statistics (report.c) ------------------------------ */

typedef struct {
    double min, med, max;
    bool valid;
} pkb_fig_t;

double pkb_median(double *v, size_t n);
/*  The q-quantile (0..1) of v (sorted in place).  */
double pkb_quantile(double *v, size_t n, double q);
/*  min, median, max of n values (sorted in place); not valid (n/a) when
    n is 0 or a value is NAN (a figure that failed in a repetition).  */
pkb_fig_t pkb_fig(double *v, size_t n);
/*  "med [min..max]" with fmt for each number, into buf.  */
const char *pkb_fig_str(pkb_fig_t f, const char *fmt, char *buf, size_t size);
json_t *pkb_fig_json(pkb_fig_t f);

/*  ---- the report: table, JSON, plot (report.c) ---------------------- */

typedef struct pkb_report pkb_report_t;

pkb_report_t *pkb_report_new(const pkb_opts_t *opts, const char *provider);
/*  A row to fill (owned by the report); its table line is printed by
    the suite.  */
json_t *pkb_report_row(pkb_report_t *self);
/*  A point of the plot: series name, block size in bytes, GB/s.  */
void pkb_report_point(pkb_report_t *self, const char *series, uint64_t block, double gbps);
void pkb_report_note(pkb_report_t *self, const char *key, json_t *value);
/*  Writes --json and --plot when asked; 0 or a negative errno.  */
int pkb_report_finish(pkb_report_t *self);
void pkb_report_destroy(pkb_report_t **self_p);

/*  The libfabric version string (fi_version), for the machine record.  */
const char *pkb_fabric_version(void);

/*  ---- processes (procs.c) -------------------------------------------- */

/*  Installs the SIGINT/SIGTERM/SIGHUP handler: it stops every child
    started here, removes their shared-memory objects and exits
    128+signal.  */
void pkb_procs_init(void);
/*  What a forked child that is no orchestrator does first: default
    signal handling, no inherited registry, dies with its parent.  */
void pkb_child_init(void);
/*  fork() into the bench's process group of children, registered for
    cleanup; in the child returns 0 after pkb_child_init.  */
pid_t pkb_fork(void);
/*  Waits for a child, up to timeout s, then SIGKILL; its status.  */
int pkb_reap(pid_t pid, double timeout);
/*  Reads exactly n bytes from a child's pipe, waiting at most timeout s
    for each part: 0, -ETIMEDOUT, or -EPIPE when the child is gone.  */
int pkb_read_all(int fd, void *p, size_t n, double timeout);
/*  Stops every child still registered (SIGTERM, then SIGKILL), removes
    their shared-memory objects, and checks /dev/shm for objects of ours
    left behind: 0, or -EEXIST when some were (named on stderr).  */
int pkb_procs_cleanup(void);
/*  A shared-memory name of ours, "/pkbench-PID-N", registered for
    removal at cleanup.  */
void pkb_shm_name(char *name, size_t size);
/*  A file (absolute path) to unlink at cleanup.  */
void pkb_register_file(const char *path);

/*  A p2pkv-server for a suite.  */
typedef struct {
    pid_t pid;
    char endpoint[128];         //  tcp://127.0.0.1:PORT
    char local[128];            //  ipc://...
    char pool[64];              //  /pkbench-...
    uint64_t block_len, pool_blocks;
    void *zctx, *engine;        //  libzmq (never czmq: consumers fork after)
} pkb_server_t;

/*  Starts one on 127.0.0.1 at a free port of --ports, with a pool of
    pool_blocks x block_len, pin quota the whole pool, max_sessions;
    extra: NULL-terminated "--flag", "value" pairs.  0 or -errno, with
    a message on stderr.  */
int pkb_server_start(pkb_server_t *s, const pkb_opts_t *o, uint64_t block_len,
                     uint64_t pool_blocks, uint64_t max_sessions, const char *const *extra);
/*  Publishes blocks 0..n-1 of the bench's content (pkb_key, pkb_fill)
    through the engine API: reserve, write into the mapped pool, commit.  */
int pkb_server_populate(pkb_server_t *s, uint64_t n);
/*  The same of blocks first..first+n-1 (a full pool evicts for them).  */
int pkb_server_populate_from(pkb_server_t *s, uint64_t first, uint64_t n);
/*  SIGTERM, wait, SIGKILL after 10 s; removes what it left.  */
void pkb_server_stop(pkb_server_t *s);
/*  One request (req taken) on the server's engine socket: its answer,
    events skipped, or NULL.  */
json_t *pkb_server_ask(pkb_server_t *s, json_t *req);

/*  From /proc/PID: resident bytes (all, and the anonymous part: heap,
    stacks, mappings of no file), threads, CPU seconds (user+system).  */
int pkb_proc_status(pid_t pid, uint64_t *rss, uint64_t *anon, int *threads);
/*  Descriptors pid holds now (its /proc/PID/fd entries); -1 unreadable.  */
int pkb_proc_fds(pid_t pid);
double pkb_proc_cpu(pid_t pid);
/*  /proc/meminfo MemAvailable in bytes (0 if unknown).  */
uint64_t pkb_mem_available(void);

/*  What a wake of a sleeping process costs here, in µs: two processes
    passing a byte over pipes, pinned to one core (same_cpu) and to two
    (cross_cpu; NAN on one core).  0 or -errno (wake.c).  */
int pkb_wake_us(double *same_cpu, double *cross_cpu);

/*  System-wide context switches so far (/proc/stat ctxt; 0 if unknown).  */
uint64_t pkb_context_switches(void);

/*  ---- the bench's blocks (consumer.c) -------------------------------- */

#define PKB_KEY_LEN 32
/*  The key of block i of the bench's content (misses: i >= 1<<30).  */
void pkb_key(uint64_t i, uint8_t key[PKB_KEY_LEN]);
void pkb_fill(uint64_t i, uint8_t *block, uint64_t len);
bool pkb_check(uint64_t i, const uint8_t *block, uint64_t len);

/*  ---- consumer processes (consumer.c) -------------------------------- */

typedef struct {
    const char *endpoint;
    uint64_t block_len;
    uint64_t nkeys;             //  keys per lookup (and per fetch)
    bool fetch;                 //  false: lookups only
    bool miss;                  //  lookups of absent keys
    double seconds;             //  of each timed phase
    int id;
    bool cancel;                //  each fetch cancelled as soon as it is made: its
                                //  samples are cancel -> ABORTED, not fetch -> landed
    const char *curve_public;   //  CURVE keys (Z85) for a server with --curve-secret;
    const char *curve_secret;   //  NULL: none.  The forked consumer reads them from
    const char *curve_server;   //  the parent's memory it was copied with.
    bool threads;               //  a load's consumers are threads of one process
                                //  (load.c), not processes
    const char *provider;       //  the client's provider (NULL: tcp); its session's
                                //  is checked to be the one asked for
    int in_flight;              //  requests a consumer keeps going (1..PKB_MAX_IN_FLIGHT)
    double answer_spin;         //  p2pkv_config_t.answer_spin
    bool no_verify;             //  p2pkv_config_t.no_verify
    bool one_trip;              //  each request is one p2pkv_client_get_results, one
                                //  at a time (a get: one round trip with a server
                                //  offering it); its lookup and fetch samples are
                                //  both the whole request
} pkb_consumer_cfg_t;

/*  What one consumer reports of one timed phase.  */
typedef struct {
    int rc;                     //  0, or a negative errno
    char err[160];
    double t0, t1;              //  monotonic, of the timed phase
    double cpu;                 //  the process's CPU seconds in it (threads: consumer 0
                                //  reports the shared process's, the others 0)
    uint64_t iterations, bytes, blocks;
    uint32_t nlookup, nfetch;   //  samples that follow
} pkb_phase_t;

typedef struct {
    pid_t pid;                  //  its process (with threads: the one they share)
    bool reaps;                 //  stop reaps pid (with threads: only the first)
    int cmd, res;               //  pipes: commands to, results from it
} pkb_consumer_t;

/*  Forks one; it connects, fetches once and checks every block (or
    looks up once), then waits.  0 or -errno.  */
int pkb_consumer_start(pkb_consumer_t *c, const pkb_consumer_cfg_t *cfg);
/*  Forks one process running n consumers, each a thread of its own with
    its own client, behind the same pipes as pkb_consumer_start's; cs[0]
    reaps the process.  0 or -errno.  */
int pkb_consumer_start_threads(pkb_consumer_t *cs, const pkb_consumer_cfg_t *cfgs, size_t n);
/*  Waits for its "ready" (connected and checked); 0, or -errno with err.  */
int pkb_consumer_ready(pkb_consumer_t *c, char *err, size_t size);
/*  Starts a timed phase ('g').  */
int pkb_consumer_go(pkb_consumer_t *c);
/*  Reads a phase's report; lookup/fetch samples (seconds) appended to
    the arrays (grown with realloc).  */
int pkb_consumer_result(pkb_consumer_t *c, pkb_phase_t *ph, double **lk, size_t *nlk,
                        double **ft, size_t *nft);
void pkb_consumer_stop(pkb_consumer_t *c);

/*  ---- a load of consumers, one timed phase at a time (load.c) ------- */

/*  One repetition's figures.  */
typedef struct {
    double gbps, ops_per_s, keys_per_s;
    double lk[3], ft[3];        //  p50, p99, p999 in ms
    double srv_cpu_gb, cli_cpu_gb;      //  CPU seconds per GB moved
    double srv_cpu_s, cli_cpu_s;        //  CPU seconds per second of the phase
    double switches_per_mb;     //  the machine's context switches per MB moved
    uint64_t bytes, samples;
} pkb_rep_t;

/*  Starts nc consumers of cfg (ids 0..nc-1) and waits until each is
    ready; on failure stops them.  0, or -errno with err.  */
int pkb_load_start(pkb_consumer_t *cs, size_t nc, const pkb_consumer_cfg_t *cfg, char *err,
                   size_t size);
/*  One timed phase of all of them at once; server: the server's pid for
    its CPU.  */
int pkb_load_rep(pkb_consumer_t *cs, size_t nc, pid_t server, uint64_t nkeys, pkb_rep_t *out,
                 char *err, size_t size);
void pkb_load_stop(pkb_consumer_t *cs, size_t nc);

/*  A table row of figures: params (already formatted, left), then for each
    figure its median on this line and [min..max] on the next.  */
void pkb_table_row(const char *const *params, const int *pw, size_t np, const pkb_fig_t *figs,
                   const char *const *fmts, const int *fw, size_t nf);
void pkb_table_head(const char *const *names, const int *w, size_t n);

/*  ---- the suites ----------------------------------------------------- */

int pkb_codec(const pkb_opts_t *o);
int pkb_role(const pkb_opts_t *o);
int pkb_fabric(const pkb_opts_t *o);
int pkb_fetch(const pkb_opts_t *o);
int pkb_engine(const pkb_opts_t *o);
int pkb_control(const pkb_opts_t *o);
int pkb_sessions(const pkb_opts_t *o);
int pkb_directory(const pkb_opts_t *o);     //  issue 14: against a redis-server
/*  directory_get.c: a get by key of 32 blocks through the directory, with
    two p2pkv-servers of url that offer get, then two run --gets off.  */
typedef struct {
    pkb_fig_t p50, p99;             //  ms per get
    double messages;                //  the consumer's messages per get, servers' count
    double redis_round_trips;       //  locate pipelines per get
} pkb_dirget_t;
int pkb_directory_get(const pkb_opts_t *o, const char *url, int reps, pkb_dirget_t *with_get,
                      pkb_dirget_t *two_steps);
int pkb_fair(const pkb_opts_t *o);          //  issue 37, point 5: the writes' fair share
/*  rails.c: the same fetch over 1, 2 and 4 tc-shaped veth rails between two
    network namespaces (issue 38, point 5); executes scripts/bench-rails.
    Returns only on failure (77: not root).  The default rate per rail:
    one p2pkv tcp stream over an unshaped veth moved 1.2-2.0 Gbit/s on the
    2-core test machine (4 other sessions running), so 4 x 300 Mbit/s
    would meet the CPU; 4 x 150 stays under half of it.  */
#define PKB_RAILS_RATE 150
int pkb_rails(const pkb_opts_t *o);
/*  disk.c: the disk tier (issue 39, point 5): a fetch from disk against
    the same from the pool, warm and cold; a restart's cost beside the
    disk's own rate; one-key lookups alone and under a spill load.  */
int pkb_disk(const pkb_opts_t *o);

/*  N worker processes moving bytes at once (crowd.c): each opens (in
    the worker; NULL: failed) and steps (bytes moved, or < 0: failed) for
    `warm` seconds, all at once, and on; the bytes of the steps from one
    common instant to a deadline `secs` later count; then each closes.
    *gbps: all their bytes over the time to the last one's end.  0 or
    -errno; refuses more than 1,024 workers.  */
typedef struct {
    void *(*open)(void *arg);
    int64_t (*step)(void *state);
    void (*close)(void *state);
} pkb_crowd_ops_t;
int pkb_crowd_gbps(const pkb_crowd_ops_t *ops, void *arg, size_t workers, double warm,
                   double secs, double *gbps);

/*  How long fetch's references warm up, and then move bytes together
    (seconds).  */
#define PKB_CROWD_WARM(quick) ((quick) ? 0.2 : 1.0)
#define PKB_CROWD_SECS(quick) ((quick) ? 0.1 : 0.5)

/*  fabric's raw loop as a service for fetch: raw fi_writedata GB/s of
    one block size and batch, contiguous, in processes of its own (the
    caller keeps no libfabric state, so it can fork consumers later):
    `pairs` writer and target pairs writing at once, their bytes together
    over the time they took.  0 or -errno.  */
int pkb_fabric_raw_gbps(uint64_t block, size_t batch, size_t pairs, bool quick, double *gbps);

/*  The data plane's floor for fetch (tcp_streams.c): `streams` bare TCP
    sender and receiver process pairs on 127.0.0.1 at once, blocking send
    and recv of one block, each end rotating over `batch` blocks.  */
int pkb_tcp_streams_gbps(uint64_t block, size_t batch, size_t streams, bool quick, double *gbps);

/*  A bare ZeroMQ DEALER -> ROUTER echo over tcp on 127.0.0.1 between two
    processes of its own, frames of bytes, n round trips, with CURVE on
    both sockets when curve: p50 and p99 in ms (zecho.c).  Its client
    waits for each answer as the library's does: looking without sleeping
    for spin seconds (pkb_answer_spin_us / 1e6), then sleeping.  0 or
    -errno.  */
int pkb_zmq_echo_ms(size_t bytes, int n, bool curve, double spin, double *p50, double *p99);

/*  Refusals before any process starts: 0, or 2 with a message naming
    the parameter.  */
int pkb_check_memory(const char *suite, const char *what, double bytes);

#endif
