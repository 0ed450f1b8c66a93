/*  cli.h: what the files of the p2pkv command line share.

    main.c holds the command table (usage, COMMAND --help) and runs one
    command, each in a file of its own: codec.c, stats.c, put.c, pull.c,
    keygen.c (and the reading of the certificates it writes), remote.c
    for lookup and get, with holders.c (by key, --directory), repeat.c
    (--repeat) and interrupt.c (SIGINT and SIGTERM during a get) beside
    it.  local.c is the local server's engine socket that stats, put and
    pull open; keys.c the keys of lookup, get and pull.
*/
#ifndef CLI_H_INCLUDED
#define CLI_H_INCLUDED

#include "p2pkv.h"
#include "p2pkv_engine.h"

#include <czmq.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//  Exit status: EXIT_SUCCESS all done, these two otherwise
#define EXIT_SOME_INVALID 1
#define EXIT_ERROR 2

//  The commands, each with its argv from the command's name on: the exit
//  status
int cli_cmd_codec(int argc, char *argv[]);
int cli_cmd_stats(int argc, char *argv[]);
int cli_cmd_put(int argc, char *argv[]);
int cli_cmd_pull(int argc, char *argv[]);
int cli_cmd_keygen(int argc, char *argv[]);
int cli_cmd_lookup(int argc, char *argv[]);
int cli_cmd_get(int argc, char *argv[]);

//  --------------------------------------------------------------------------
//  The local server's engine socket (local.c): stats, put, pull

typedef struct {
    const char *local;
    const char *ns;             //  --namespace (put only)
    bool json;
    int first;                  //  argv index of the first operand
} cli_local_opts_t;

//  --local, --json, --namespace (put's only) into o, and operand (a word
//  for the usage: "FILE", "KEY") one or more times after them, or none
//  when NULL; a default --local is strdup'ed into *dflt, freed by the
//  caller.  0, -ENOMEM, or -EINVAL said, naming the option.
int cli_local_opts(const char *cmd, const char *operand, int argc, char *argv[],
                   cli_local_opts_t *o, char **dflt);

//  The local server through the engine API; NULL with a message on error.
p2pkv_engine_t *cli_engine_open(const char *cmd, const char *endpoint);

//  --------------------------------------------------------------------------
//  The keys of a lookup, get or pull, decoded from the command line (keys.c)

typedef struct {
    size_t n;
    p2pkv_key_t *keys;
    uint8_t *bytes;
} cli_keys_t;

//  argv[first..argc-1] into g (keys and bytes freed by the caller): 0,
//  -ENOMEM, or -EINVAL with the key that is not one said.
int cli_parse_keys(char *argv[], int first, int argc, cli_keys_t *g);

//  "p2pkv CMD: " and the sentence on standard error: -EINVAL (keys.c)
int cli_bad(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
//  A number of seconds, 0.001..1000000, into *out: 0, or -EINVAL said
//  naming opt and the value.
int cli_seconds(const char *cmd, const char *opt, const char *value, double *out);
//  An endpoint that names its transport (tcp://...): 0, or -EINVAL said
//  naming opt.
int cli_endpoint(const char *cmd, const char *opt, const char *value);
//  The command line's options beside the library's "requires CURVE",
//  when none of ours were given.
void cli_curve_hint(char *err, size_t size, bool have_keys);

//  --------------------------------------------------------------------------
//  lookup and get (remote.c, holders.c, repeat.c, interrupt.c)

typedef struct {
    const char *server, *outdir, *fingerprint, *hash_seed, *provider, *fabric_addr;
    const char *curve_secret, *server_key;
    const char *directory;          //  by key: the cluster directory (issue 14)
    double timeout;
    bool json;
    int first;
    int repeat;                     //  get, lookup: passes over one session (1..1000)
    bool no_verify;                 //  get: do not check blocks against their checksums
    bool verbose;                   //  get: where each key came from, holders tried
} cli_remote_opts_t;

//  --curve-secret and --server-key into the client's config (keygen.c)
int cli_curve_certs(const char *cmd, const char *secret, const char *server, zcert_t **mine,
                    zcert_t **theirs, p2pkv_config_t *cfg);

//  Reports each key (and writes DIR/KEY for each fetched block): the exit
//  code for what landed (report.c).  from: each key's source (its
//  holder's endpoint, or NULL), or NULL: said in the JSON, and with
//  --verbose in the text.
int cli_report(const cli_remote_opts_t *o, char *argv[], size_t n, const p2pkv_key_result_t *res,
               const uint8_t *pool, uint64_t block_len, bool get, double seconds,
               const char *provider, const char *const *from);

//  One key's line: KEY STATUS, with REASON, and with "from SOURCE" when
//  verbose; or appended to json (not NULL) as {key, status[, reason]
//  [, from]} (report.c).  why and from may be NULL.
void cli_key_line(const char *key, const char *what, const char *why, const char *from,
                  bool verbose, void *json);

//  By key (--directory): the exit status (holders.c)
int cli_by_key(const cli_remote_opts_t *o, char *argv[], const cli_keys_t *g, bool get,
               const p2pkv_config_t *keys);

//  SIGINT or SIGTERM during a get (interrupt.c)
typedef struct {
    p2pkv_client_t *client;
    int server;
    atomic_int pass;                //  the get running: its request is cli_pass_kv's
    sigset_t set, old;
    pthread_t thread;
    bool watching;
    atomic_int signo;               //  the signal taken, or 0
    atomic_bool done;               //  the get returned
} cli_interrupt_t;

void cli_interrupt_init(cli_interrupt_t *self);
void cli_interrupt_watch(cli_interrupt_t *self, p2pkv_client_t *client, int server);
int cli_interrupt_end(cli_interrupt_t *self);

//  --repeat (repeat.c)
const char *cli_pass_kv(int pass, char *kv, size_t len);
int cli_repeat(const cli_remote_opts_t *o, p2pkv_client_t *client, int server,
               const cli_keys_t *g, const uint32_t *dest, bool get, const bool *landed,
               cli_interrupt_t *intr, double *again);
void cli_report_again(const cli_remote_opts_t *o, size_t n, const bool *landed,
                      uint64_t block_len, bool get, double *again, int passes);

#endif
