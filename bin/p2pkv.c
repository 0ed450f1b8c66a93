/*  p2pkv: the command line.

    `put`, `stats` and `pull` talk to the local p2pkv-server through the
    engine API (p2pkv_engine.h);
    `lookup` and `get` ask a (remote) server through the client library
    (p2pkv.h), `get` having the blocks written into its own registered
    memory; `codec` decodes control-plane frames and prints each one's
    canonical encoding or the exact rule it breaks.
*/
#include "base/clock.h"
#include "p2pkv.h"
#include "p2pkv_engine.h"
#include "wire/protocol.h"
#include "daemon/server_config.h"
#include "base/version.h"

#include <sys/stat.h>
#include <unistd.h>

#include <czmq.h>
#include <jansson.h>
#include <sodium.h>

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_SOME_INVALID 1
#define EXIT_ERROR 2

//  One entry per command: its synopsis and what it does, for --help and
//  for COMMAND --help.
static const struct {
    const char *name, *synopsis, *text;
} s_commands[] = {
    { "put", "put [--local EP] [--namespace NS] [--json] FILE...",
      "publish each file (exactly one block long) on the local\n"
      "server, keyed by the SHA-256 of its content, into the\n"
      "tenant namespace NS (default shared); prints KEY FILE\n"
      "per block" },
    { "stats", "stats [--local EP] [--json]",
      "the local server's pool, sessions and counters, per\n"
      "namespace too" },
    { "pull", "pull [--local EP] [--server tcp://HOST:PORT] KEY...",
      "the local server fetches the keys from that server into\n"
      "its own pool (without --server: from any holder its\n"
      "--directory names); prints KEY landed|present|missing" },
    { "lookup", "lookup --server tcp://HOST:PORT | --directory redis://HOST:PORT[/DB]\n"
      "       [--json] KEY...",
      "prints KEY hit|miss; by --directory, KEY hit PEER,... (the\n"
      "live holders) or KEY miss\n"
      "(with --fingerprint, --hash-seed, --provider, --fabric-addr,\n"
      "--timeout, --repeat as for get; --repeat prints the round\n"
      "trip of passes 2..N)" },
    { "get", "get --server tcp://HOST:PORT | --directory redis://HOST:PORT[/DB]\n"
      "       [-o DIR] [--repeat N] [--no-verify] [--json] KEY...",
      "fetches the blocks into this process's memory over the\n"
      "data plane and writes DIR/KEY for each (DIR: .); on a\n"
      "terminal, a progress line on standard error; by\n"
      "--directory, each key from any live holder, another one\n"
      "if a holder fails; prints KEY fetched|corrupt|failed|missing\n"
      "(corrupt: it landed but differs from the checksum its\n"
      "server announced; not written; exit 1)\n"
      "--no-verify: do not check blocks against their checksums\n"
      "--repeat N (1..1000, --server only): the same get N times\n"
      "on the one session, and the rate of passes 2..N beside the\n"
      "first's (which makes the data connection)\n"
      "--fingerprint F --hash-seed S (the server's, learnt by\n"
      "default), --provider P (default auto: the best one the\n"
      "server announces, shm on its host, else its first\n"
      "network one), --fabric-addr ADDR (the data plane's\n"
      "local address), --timeout SECONDS (30),\n"
      "--curve-secret FILE --server-key FILE (a CURVE server:\n"
      "our certificate as keygen wrote it, NAME_secret, and\n"
      "the server's public certificate; both or neither; by\n"
      "--directory, every holder's)" },
    { "keygen", "keygen [--endpoint EP] NAME",
      "writes a new CURVE keypair as czmq certificates: NAME\n"
      "(public: give it to the server's --curve-allow DIR, or\n"
      "--curve-servers DIR with --endpoint) and NAME_secret\n"
      "(mode 0600); refuses to overwrite either" },
    { "codec", "codec [FILE...]",
      "decode control-plane frames, one JSON object per line\n"
      "(from the files, or standard input), and print each\n"
      "one's canonical encoding, or why it is refused" },
};
#define S_NCOMMANDS (sizeof s_commands / sizeof s_commands[0])

static void
s_print_text(FILE *out, const char *text, const char *indent)
{
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        int len = nl ? (int) (nl - line) : (int) strlen(line);
        fprintf(out, "%s%.*s\n", indent, len, line);
        line += len + (nl ? 1 : 0);
    }
}

static void
s_usage(FILE *out)
{
    fprintf(out, "usage: p2pkv [--help] [--version] COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < S_NCOMMANDS; i++) {
        fprintf(out, "  %s\n", s_commands[i].synopsis);
        s_print_text(out, s_commands[i].text, "                    ");
    }
    fprintf(out, "\n"
            "EP defaults to p2pkv-server's default --local endpoint on this host.\n"
            "exit status: 0 all done (all found, all fetched, all frames valid),\n"
            "             1 some missing or refused, 2 error\n");
}

//  p2pkv COMMAND --help
static bool
s_command_help(const char *cmd, int argc, char *argv[])
{
    for (int i = 1; i < argc; i++)
        if (streq(argv[i], "--help") || streq(argv[i], "-h")) {
            for (size_t c = 0; c < S_NCOMMANDS; c++)
                if (streq(s_commands[c].name, cmd)) {
                    printf("usage: p2pkv %s\n", s_commands[c].synopsis);
                    s_print_text(stdout, s_commands[c].text, "  ");
                    printf("exit status: 0 all done, 1 some missing or refused, 2 error\n");
                    return true;
                }
        }
    return false;
}

static int
s_codec_stream(FILE *in, const char *name, int *invalid)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    while ((len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (len == 0)
            continue;
        char err[PK_ERRLEN];
        pk_msg_t *msg = NULL;
        char *out = NULL;
        int rc = pk_msg_decode(line, (size_t) len, &msg, err);
        if (rc == 0)
            rc = pk_msg_encode(msg, &out, NULL, err);
        if (rc == 0)
            printf("%s:%ld: ok %s %s\n", name, lineno, pk_msg_type_name(msg->type), out);
        else {
            const char *what = rc == -EBADMSG ? "bad frame"
                             : rc == -ENOMSG ? "unknown type" : "violation";
            printf("%s:%ld: %s: %s\n", name, lineno, what, err);
            (*invalid)++;
        }
        free(out);
        pk_msg_destroy(&msg);
    }
    free(line);
    return ferror(in) ? -EIO : 0;
}

static int
s_cmd_codec(int argc, char *argv[])
{
    int invalid = 0;
    if (argc < 2)
        return s_codec_stream(stdin, "-", &invalid) ? EXIT_ERROR
               : invalid ? EXIT_SOME_INVALID : EXIT_SUCCESS;
    for (int i = 1; i < argc; i++) {
        FILE *in = strcmp(argv[i], "-") == 0 ? stdin : fopen(argv[i], "r");
        if (!in) {
            fprintf(stderr, "p2pkv codec: %s: %s\n", argv[i], strerror(errno));
            return EXIT_ERROR;
        }
        int rc = s_codec_stream(in, argv[i], &invalid);
        if (in != stdin)
            fclose(in);
        if (rc) {
            fprintf(stderr, "p2pkv codec: %s: read error\n", argv[i]);
            return EXIT_ERROR;
        }
    }
    return invalid ? EXIT_SOME_INVALID : EXIT_SUCCESS;
}

//  --------------------------------------------------------------------------
//  The local server's engine socket

typedef struct {
    const char *local;
    const char *ns;             //  --namespace (put only)
    bool json;
    int first;                  //  argv index of the first operand
} s_local_opts_t;

static int
s_local_opts(int argc, char *argv[], s_local_opts_t *o, char **dflt)
{
    static const struct option opts[] = {
        { "local", required_argument, NULL, 'l' },
        { "json", no_argument, NULL, 'j' },
        { "namespace", required_argument, NULL, 'n' },
        { NULL, 0, NULL, 0 }
    };
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+l:j", opts, NULL)) != -1) {
        if (c == 'l')
            o->local = optarg;
        else if (c == 'n')
            o->ns = optarg;
        else if (c == 'j')
            o->json = true;
        else
            return -EINVAL;
    }
    o->first = optind;
    if (!o->local) {
        //  the server's own default for this host
        pk_server_config_t d;
        if (pk_server_config_defaults(&d) == 0 && d.local)
            *dflt = strdup(d.local);
        pk_server_config_fini(&d);
        o->local = *dflt;
    }
    return o->local ? 0 : -ENOMEM;
}

//  The local server through the engine API; NULL with a message on error.
static p2pkv_engine_t *
s_engine_open(const char *cmd, const char *endpoint)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_engine_t *engine = p2pkv_engine_open(endpoint, 5, NULL, NULL, err);
    if (!engine)
        fprintf(stderr, "p2pkv %s: %s\n", cmd, err);
    else
        p2pkv_engine_set_timeout(engine, 5);
    return engine;
}

static int
s_cmd_stats(int argc, char *argv[])
{
    s_local_opts_t o = { 0 };
    char *dflt = NULL;
    if (s_local_opts(argc, argv, &o, &dflt) || o.first != argc || o.ns) {
        free(dflt);
        fprintf(stderr, "usage: p2pkv stats [--local ENDPOINT] [--json]\n");
        return EXIT_ERROR;
    }
    p2pkv_engine_t *engine = s_engine_open("stats", o.local);
    char err[P2PKV_ERRLEN] = "";
    char *text = engine ? p2pkv_engine_stats_json(engine, err) : NULL;
    //  the server's answer as it is, indented for a terminal
    json_t *a = text ? json_loads(text, 0, NULL) : NULL;
    char *out = a ? json_dumps(a, o.json ? JSON_COMPACT : JSON_INDENT(2)) : NULL;
    int rc = out ? EXIT_SUCCESS : EXIT_ERROR;
    if (out)
        puts(out);
    else if (engine)
        fprintf(stderr, "p2pkv stats: %s\n", err[0] ? err : "out of memory");
    free(out);
    json_decref(a);
    free(text);
    p2pkv_engine_close(&engine);
    free(dflt);
    return rc;
}

//  One FILE of put: its block read into data and published under its
//  SHA-256 (hex into hex): 0, or -1 with the error said.
static int
s_put_file(p2pkv_engine_t *engine, const char *path, uint8_t *data, size_t block_len,
           char *hex)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "p2pkv put: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t got = fread(data, 1, block_len + 1, f);
    fclose(f);
    if (got != block_len) {
        fprintf(stderr, "p2pkv put: %s: %s%zu bytes, blocks are %zu bytes\n", path,
                got > block_len ? "more than " : "", got > block_len ? block_len : got,
                block_len);
        return -1;
    }
    uint8_t hash[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(hash, data, got);
    pk_hex_encode(hash, sizeof hash, hex);
    p2pkv_key_t key = { hash, sizeof hash };
    char err[P2PKV_ERRLEN] = "";
    //  1: the pool has it already, which is what put is for
    if (p2pkv_engine_put(engine, &key, data, got, err) < 0) {
        fprintf(stderr, "p2pkv put: %s: %s\n", path, err);
        return -1;
    }
    return 0;
}

static int
s_cmd_put(int argc, char *argv[])
{
    s_local_opts_t o = { 0 };
    char *dflt = NULL;
    if (s_local_opts(argc, argv, &o, &dflt) || o.first >= argc) {
        free(dflt);
        fprintf(stderr, "usage: p2pkv put [--local ENDPOINT] [--namespace NS] [--json] "
                "FILE...\n");
        return EXIT_ERROR;
    }
    p2pkv_engine_t *engine = s_engine_open("put", o.local);
    char err[P2PKV_ERRLEN] = "";
    if (engine && p2pkv_engine_set_namespace(engine, o.ns, err) < 0) {
        fprintf(stderr, "p2pkv put: --namespace: %s\n", err);
        p2pkv_engine_close(&engine);
    }
    if (!engine) {
        free(dflt);
        return EXIT_ERROR;
    }
    size_t block_len = (size_t) p2pkv_engine_info(engine)->block_len;
    int rc = EXIT_SUCCESS;
    json_t *out = json_array();
    uint8_t *data = malloc(block_len + 1);
    for (int i = o.first; i < argc && rc == EXIT_SUCCESS; i++) {
        char hex[2 * crypto_hash_sha256_BYTES + 1];
        if (!data || s_put_file(engine, argv[i], data, block_len, hex) < 0)
            rc = EXIT_ERROR;
        else if (o.json)
            json_array_append_new(out, json_pack("{s:s, s:s}", "key", hex, "file", argv[i]));
        else
            printf("%s %s\n", hex, argv[i]);
    }
    if (o.json && rc == EXIT_SUCCESS) {
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text);
        free(text);
    }
    json_decref(out);
    free(data);
    p2pkv_engine_close(&engine);
    free(dflt);
    return rc;
}

//  --------------------------------------------------------------------------
//  keygen, and the certificates lookup and get read

//  A CURVE keypair as czmq certificates, NAME and NAME_secret, neither
//  overwritten; the secret one created 0600 (the umask, not a chmod
//  after: never readable by others, not even for a moment).
static int
s_cmd_keygen(int argc, char *argv[])
{
    static const struct option opts[] = {
        { "endpoint", required_argument, NULL, 'e' }, { NULL, 0, NULL, 0 }
    };
    const char *endpoint = NULL;
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        if (c != 'e') {
            fprintf(stderr, "usage: p2pkv keygen [--endpoint EP] NAME\n");
            return EXIT_ERROR;
        }
        endpoint = optarg;
    }
    if (optind != argc - 1) {
        fprintf(stderr, "usage: p2pkv keygen [--endpoint EP] NAME\n");
        return EXIT_ERROR;
    }
    const char *name = argv[optind];
    char secret[4096];
    snprintf(secret, sizeof secret, "%s_secret", name);
    struct stat st;
    if (stat(name, &st) == 0 || stat(secret, &st) == 0) {
        fprintf(stderr, "p2pkv keygen: %s exists: not overwritten\n",
                stat(name, &st) == 0 ? name : secret);
        return EXIT_ERROR;
    }
    zcert_t *cert = zcert_new();
    if (!cert)
        return EXIT_ERROR;
    if (endpoint)
        zcert_set_meta(cert, "endpoint", "%s", endpoint);
    mode_t old = umask(077);
    int rc = zcert_save_secret(cert, secret);
    umask(old);
    if (rc == 0)
        rc = zcert_save_public(cert, name);
    if (rc != 0)
        fprintf(stderr, "p2pkv keygen: cannot write %s: %s\n", name, strerror(errno));
    else
        printf("%s %s\n", name, zcert_public_txt(cert));
    zcert_destroy(&cert);
    return rc == 0 ? EXIT_SUCCESS : EXIT_ERROR;
}

//  --curve-secret and --server-key into the client's config: the texts
//  live in the certificates, destroyed by the caller.  0, or -EINVAL
//  with the reason printed.
static int
s_curve_certs(const char *cmd, const char *secret, const char *server, zcert_t **mine,
              zcert_t **theirs, p2pkv_config_t *cfg)
{
    static const char zeros[41] = "0000000000000000000000000000000000000000";
    if (!secret)
        return 0;
    *mine = zcert_load(secret);
    *theirs = zcert_load(server);
    const char *bad = !*mine ? "--curve-secret: not a czmq certificate"
                      : streq(zcert_secret_txt(*mine), zeros) ? "--curve-secret: no secret key in it"
                      : !*theirs ? "--server-key: not a czmq certificate" : NULL;
    if (bad) {
        fprintf(stderr, "p2pkv %s: %s (%s)\n", cmd, bad, strncmp(bad, "--s", 3) ? secret : server);
        return -EINVAL;
    }
    cfg->curve_public = zcert_public_txt(*mine);
    cfg->curve_secret = zcert_secret_txt(*mine);
    cfg->curve_server = zcert_public_txt(*theirs);
    return 0;
}

//  --------------------------------------------------------------------------
//  lookup and get: the client library against a server

typedef struct {
    const char *server, *outdir, *fingerprint, *hash_seed, *provider, *fabric_addr;
    const char *curve_secret, *server_key;
    const char *directory;          //  by key: the cluster directory (issue 14)
    double timeout;
    bool json;
    int first;
    int repeat;                     //  get, lookup: passes over one session (1..1000)
    bool no_verify;                 //  get: do not check blocks against their checksums
} s_remote_opts_t;

static int
s_remote_opts(int argc, char *argv[], s_remote_opts_t *o)
{
    static const struct option opts[] = {
        { "server", required_argument, NULL, 's' },
        { "output", required_argument, NULL, 'o' },
        { "fingerprint", required_argument, NULL, 'f' },
        { "hash-seed", required_argument, NULL, 'H' },
        { "provider", required_argument, NULL, 'p' },
        { "fabric-addr", required_argument, NULL, 'a' },
        { "timeout", required_argument, NULL, 't' },
        { "json", no_argument, NULL, 'j' },
        { "curve-secret", required_argument, NULL, 'C' },
        { "server-key", required_argument, NULL, 'K' },
        { "directory", required_argument, NULL, 'd' },
        { "repeat", required_argument, NULL, 'r' },
        { "no-verify", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 }
    };
    optind = 0;
    o->outdir = ".";
    o->repeat = 1;
    o->provider = NULL;         //  auto: the best one each server announces
    o->timeout = 30;
    int c;
    while ((c = getopt_long(argc, argv, "+s:o:j", opts, NULL)) != -1) {
        switch (c) {
            case 's': o->server = optarg; break;
            case 'o': o->outdir = optarg; break;
            case 'f': o->fingerprint = optarg; break;
            case 'H': o->hash_seed = optarg; break;
            case 'p': o->provider = streq(optarg, "auto") ? NULL : optarg; break;
            case 'a': o->fabric_addr = optarg; break;
            case 't': o->timeout = atof(optarg); break;
            case 'j': o->json = true; break;
            case 'C': o->curve_secret = optarg; break;
            case 'K': o->server_key = optarg; break;
            case 'd': o->directory = optarg; break;
            case 'V': o->no_verify = true; break;
            case 'r': {
                char *end;
                long n = strtol(optarg, &end, 10);
                if (*optarg == '\0' || *end != '\0' || n < 1 || n > 1000) {
                    fprintf(stderr, "p2pkv: --repeat: \"%s\" is not a count of passes "
                            "(1..1000)\n", optarg);
                    return -EINVAL;
                }
                o->repeat = (int) n;
                break;
            }
            default: return -EINVAL;
        }
    }
    o->first = optind;
    //  one of --server and --directory; CURVE's two files together
    if (o->repeat > 1 && o->directory) {
        fprintf(stderr, "p2pkv: --repeat: only with --server (one session to repeat on)\n");
        return -EINVAL;
    }
    return !o->server != !o->directory && o->first < argc && o->timeout > 0
           && !o->curve_secret == !o->server_key ? 0 : -EINVAL;
}

//  The keys of a lookup or get, decoded from the command line.
typedef struct {
    size_t n;
    p2pkv_key_t *keys;
    uint8_t *bytes;
} s_get_t;

//  The progress line of a long get, on a terminal.
static void
s_progress(void *arg, size_t landed, size_t n)
{
    fprintf(stderr, "\r%zu of %zu blocks fetched", landed, n);
}

static int
s_parse_keys(char *argv[], int first, int argc, s_get_t *g)
{
    g->n = (size_t) (argc - first);
    g->keys = calloc(g->n, sizeof *g->keys);
    g->bytes = calloc(g->n, PK_MAX_KEY_BYTES);
    if (!g->keys || !g->bytes)
        return -ENOMEM;
    for (size_t i = 0; i < g->n; i++) {
        const char *hex = argv[first + (int) i];
        uint8_t *at = g->bytes + i * PK_MAX_KEY_BYTES;
        int len = strlen(hex) <= PK_MAX_KEY_HEX ? pk_hex_decode(hex, strlen(hex), at) : -EINVAL;
        if (len <= 0) {
            fprintf(stderr, "p2pkv: \"%s\" is not a key (lowercase hex of even length)\n", hex);
            return -EINVAL;
        }
        g->keys[i] = (p2pkv_key_t) { at, (size_t) len };
    }
    return 0;
}

//  Reports each key (and writes DIR/KEY for each fetched block): the exit
//  code for what landed.
//  A key's word in the report: fetched, corrupt (it landed and failed its
//  checksum: not written, never shown as fetched), failed or missing; a
//  lookup's hit or miss.
static const char *
s_key_word(const p2pkv_key_result_t *r, bool get)
{
    if (!get)
        return r->status == P2PKV_KEY_LANDED ? "hit" : "miss";
    switch (r->status) {
        case P2PKV_KEY_LANDED:  return "fetched";
        case P2PKV_KEY_CORRUPT: return "corrupt";
        case P2PKV_KEY_FAILED:  return "failed";
        default:                return "missing";
    }
}

static int
s_report(const s_remote_opts_t *o, char *argv[], size_t n, const p2pkv_key_result_t *res,
         const uint8_t *pool, uint64_t block_len, bool get, double seconds,
         const char *provider)
{
    size_t nhit = 0;
    for (size_t i = 0; i < n; i++)
        nhit += res[i].status == P2PKV_KEY_LANDED;
    json_t *out = json_array();
    int rc = nhit == n ? EXIT_SUCCESS : EXIT_SOME_INVALID;
    for (size_t i = 0; i < n; i++) {
        const char *hex = argv[o->first + (int) i];
        const char *what = s_key_word(&res[i], get);
        if (get && res[i].status == P2PKV_KEY_LANDED) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", o->outdir, hex);
            FILE *f = fopen(path, "wb");
            size_t w = f ? fwrite(pool + i * block_len, 1, block_len, f) : 0;
            if (!f || w != block_len || fclose(f) != 0) {
                fprintf(stderr, "p2pkv get: %s: %s\n", path, strerror(errno));
                rc = EXIT_ERROR;
            }
        }
        if (o->json)
            json_array_append_new(out, json_pack("{s:s, s:s}", "key", hex, "status", what));
        else
            printf("%s %s\n", hex, what);
    }
    if (o->json) {
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text);
        free(text);
    }
    else if (get && nhit)
        fprintf(stderr, "p2pkv get: %zu of %zu blocks (%.1f MiB) in %.3f s, %.2f GB/s%s%s\n",
                nhit, n, nhit * (double) block_len / 1048576.0, seconds,
                seconds > 0 ? nhit * (double) block_len / seconds / 1e9 : 0.0,
                provider ? " over " : "", provider ? provider : "");
    json_decref(out);
    return rc;
}

//  The request id of pass n of a get (--repeat): each pass its own, so
//  that none meets the one before it (finished) at the server.
static const char *
s_pass_kv(int pass, char *kv, size_t len)
{
    if (pass <= 1)
        snprintf(kv, len, "p2pkv-cli");
    else
        snprintf(kv, len, "p2pkv-cli-pass%d", pass);
    return kv;
}

//  SIGINT or SIGTERM during a get cancels it (p2pkv_client_finish of its
//  request) and the get returns only once its fetch ended, so the tool
//  never exits while a server still writes into its pool.  The signals
//  are blocked in every thread and taken here with sigtimedwait; finish
//  is repeated until the get returned, since one made before the get
//  began has nothing to cancel yet.
typedef struct {
    p2pkv_client_t *client;
    int server;
    atomic_int pass;                //  the get running: its request is s_pass_kv's
    sigset_t set, old;
    pthread_t thread;
    bool watching;
    atomic_int signo;               //  the signal taken, or 0
    atomic_bool done;               //  the get returned
} s_interrupt_t;

static void *
s_interrupt_run(void *arg)
{
    s_interrupt_t *self = arg;
    struct timespec tick = { 0, 50 * 1000 * 1000 };
    while (!atomic_load(&self->done)) {
        if (!atomic_load(&self->signo)) {
            int signo = sigtimedwait(&self->set, NULL, &tick);
            if (signo > 0 && signo != SIGUSR2)         //  SIGUSR2: s_interrupt_end's wake
                atomic_store(&self->signo, signo);
            continue;
        }
        char kv[32];
        (void) p2pkv_client_finish(self->client, self->server,
                                   s_pass_kv(atomic_load(&self->pass), kv, sizeof kv));
        nanosleep(&tick, NULL);
    }
    return NULL;
}

//  Before any thread starts, so that every one inherits the block.
static void
s_interrupt_init(s_interrupt_t *self)
{
    memset(self, 0, sizeof *self);
    sigemptyset(&self->set);
    sigaddset(&self->set, SIGINT);
    sigaddset(&self->set, SIGTERM);
    sigaddset(&self->set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &self->set, &self->old);
}

static void
s_interrupt_watch(s_interrupt_t *self, p2pkv_client_t *client, int server)
{
    self->client = client;
    self->server = server;
    self->watching = pthread_create(&self->thread, NULL, s_interrupt_run, self) == 0;
}

//  The get returned: the signal it was cancelled for, or 0.
static int
s_interrupt_end(s_interrupt_t *self)
{
    atomic_store(&self->done, true);
    //  woken at once: its wait is 50 ms, which every get paid at its end
    if (self->watching)
        pthread_kill(self->thread, SIGUSR2);
    if (self->watching)
        pthread_join(self->thread, NULL);
    self->watching = false;
    return atomic_load(&self->signo);
}

//  The server described (its block length, and unless given its
//  fingerprint and seed), then a client for it with a block per key.
static p2pkv_client_t *
s_remote_client(const s_remote_opts_t *o, const p2pkv_config_t *keys, size_t n,
                p2pkv_description_t *d, char *err)
{
    if (p2pkv_describe_curve(o->server, o->timeout < 10 ? o->timeout : 10, keys, d, err))
        return NULL;
    char name[64];
    snprintf(name, sizeof name, "p2pkv-cli-%d", (int) getpid());
    //  a one-shot tool: a server that goes away fails the get
    p2pkv_config_t cfg = { .peer_id = name,
                           .fingerprint = o->fingerprint ? o->fingerprint : d->fingerprint,
                           .hash_seed = o->hash_seed ? o->hash_seed : d->hash_seed,
                           .provider = o->provider, .node = o->fabric_addr,
                           .load_timeout = o->timeout,
                           .abort_ack_timeout = 10, .keepalive_interval = 2,
                           .silence_timeout = 10,
                           .no_reconnect = true, .no_verify = o->no_verify,
                           .curve_public = keys->curve_public,
                           .curve_secret = keys->curve_secret,
                           .curve_server = keys->curve_server };
    return p2pkv_client_new(&cfg, NULL, n, d->block_len, (p2pkv_callbacks_t) { 0 }, err);
}

//  --------------------------------------------------------------------------
//  lookup and get by key (--directory): who holds what, from the cluster
//  directory, then each key from any of its live holders

typedef struct {
    bool *held;
    char **holders;                 //  each key's holders' peer ids, comma-separated
    char endpoint[256];             //  a holder, to learn the block length from
} s_found_t;

static void
s_on_found(void *arg, size_t i, const p2pkv_holder_t *h, size_t n)
{
    s_found_t *f = arg;
    f->held[i] = n > 0;
    if (n && !f->endpoint[0])
        snprintf(f->endpoint, sizeof f->endpoint, "%s", h[0].endpoint);
    size_t len = 1;
    for (size_t k = 0; k < n; k++)
        len += strlen(h[k].peer_id) + 1;
    f->holders[i] = calloc(1, len);
    for (size_t k = 0; k < n && f->holders[i]; k++)
        strcat(strcat(f->holders[i], k ? "," : ""), h[k].peer_id);
}

//  Locates the keys with a client of a one-byte pool (a locate needs no
//  pool): 0, or -1 with a message.
static int
s_locate(const s_remote_opts_t *o, const s_get_t *g, s_found_t *f)
{
    char err[P2PKV_ERRLEN] = "", name[64];
    snprintf(name, sizeof name, "p2pkv-cli-%d", (int) getpid());
    p2pkv_config_t cfg = { .peer_id = name, .provider = o->provider, .node = o->fabric_addr,
                           .directory = o->directory, .no_reconnect = true };
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, 1, 1, (p2pkv_callbacks_t) { 0 }, err);
    int rc = client ? p2pkv_client_locate(client, g->keys, g->n, s_on_found, f, err) : -1;
    p2pkv_client_destroy(&client);
    if (rc)
        fprintf(stderr, "p2pkv: %s\n", err);
    return rc ? -1 : 0;
}

static int
s_report_holders(const s_remote_opts_t *o, char *argv[], const s_get_t *g, const s_found_t *f)
{
    json_t *out = json_array();
    size_t nheld = 0;
    for (size_t i = 0; i < g->n; i++) {
        const char *hex = argv[o->first + (int) i];
        nheld += f->held[i];
        if (o->json)
            json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "key", hex, "status",
                                                 f->held[i] ? "hit" : "miss", "holders",
                                                 f->holders[i] ? f->holders[i] : ""));
        else if (f->held[i])
            printf("%s hit %s\n", hex, f->holders[i] ? f->holders[i] : "");
        else
            printf("%s miss\n", hex);
    }
    if (o->json) {
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text);
        free(text);
    }
    json_decref(out);
    return nheld == g->n ? EXIT_SUCCESS : EXIT_SOME_INVALID;
}

//  The get by key: the block length (and, unless given, the fingerprint
//  and seed) learnt from one holder, then p2pkv_client_get of any server.
//  With --curve-secret, the one --server-key is every holder's: a fleet
//  whose servers share a keypair.
static int
s_get_by_key(const s_remote_opts_t *o, char *argv[], const s_get_t *g, const char *endpoint,
             const p2pkv_config_t *keys)
{
    char err[P2PKV_ERRLEN] = "", name[64];
    p2pkv_description_t d;
    if (p2pkv_describe_curve(endpoint, o->timeout < 10 ? o->timeout : 10, keys, &d, err)) {
        fprintf(stderr, "p2pkv get: %s\n", err);
        return EXIT_ERROR;
    }
    snprintf(name, sizeof name, "p2pkv-cli-%d", (int) getpid());
    p2pkv_config_t cfg = { .peer_id = name,
                           .fingerprint = o->fingerprint ? o->fingerprint : d.fingerprint,
                           .hash_seed = o->hash_seed ? o->hash_seed : d.hash_seed,
                           .provider = o->provider, .node = o->fabric_addr,
                           .load_timeout = o->timeout, .silence_timeout = 10,
                           .directory = o->directory, .no_reconnect = true,
                           .no_verify = o->no_verify,
                           .curve_public = keys->curve_public,
                           .curve_secret = keys->curve_secret,
                           .curve_server = keys->curve_server };
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, g->n, d.block_len,
                                              (p2pkv_callbacks_t) { 0 }, err);
    p2pkv_key_result_t *res = calloc(g->n, sizeof *res);
    uint32_t *dest = calloc(g->n, sizeof *dest);
    int rc = EXIT_ERROR;
    if (client && res && dest) {
        for (size_t i = 0; i < g->n; i++)
            dest[i] = (uint32_t) i;
        double t0 = pk_clock_monotonic();
        int got = p2pkv_client_get_results(client, P2PKV_ANY_SERVER, "p2pkv-cli", g->keys, dest,
                                           g->n, true, o->timeout, res, NULL, NULL, err);
        if (got < 0 || (size_t) got < g->n)
            fprintf(stderr, "p2pkv get: %s\n", err[0] ? err : "some keys have no live holder");
        rc = got < 0 && got != -ENOTCONN ? EXIT_ERROR
             : s_report(o, argv, g->n, res, p2pkv_client_pool(client), d.block_len, true,
                        pk_clock_monotonic() - t0, NULL);
    }
    else
        fprintf(stderr, "p2pkv: %s\n", err[0] ? err : "out of memory");
    free(res);
    free(dest);
    p2pkv_client_destroy(&client);
    return rc;
}

static int
s_cmd_by_key(const s_remote_opts_t *o, char *argv[], const s_get_t *g, bool get,
             const p2pkv_config_t *keys)
{
    s_found_t f = { calloc(g->n, sizeof *f.held), calloc(g->n, sizeof *f.holders), "" };
    int rc = EXIT_ERROR;
    if (f.held && f.holders && s_locate(o, g, &f) == 0) {
        if (!get)
            rc = s_report_holders(o, argv, g, &f);
        else if (!f.endpoint[0]) {
            //  no live holder of any key: all missing (a zeroed result is
            //  LANDED, so each is said)
            p2pkv_key_result_t *none = calloc(g->n, sizeof *none);
            for (size_t i = 0; none && i < g->n; i++)
                none[i] = (p2pkv_key_result_t) { .status = P2PKV_KEY_MISSING, .holder = -1,
                                                 .reason = P2PKV_MISS_NO_HOLDER };
            rc = none ? s_report(o, argv, g->n, none, NULL, 0, true, 0, NULL) : EXIT_ERROR;
            free(none);
        }
        else
            rc = s_get_by_key(o, argv, g, f.endpoint, keys);
    }
    for (size_t i = 0; f.holders && i < g->n; i++)
        free(f.holders[i]);
    free(f.holders);
    free(f.held);
    return rc;
}

static int
s_remote_usage(bool get)
{
    fprintf(stderr, "usage: p2pkv %s --server tcp://HOST:PORT | --directory "
            "redis://HOST:PORT[/DB]%s [--repeat N] [--json] [--curve-secret FILE --server-key "
            "FILE] KEY...\n", get ? "get" : "lookup", get ? " [-o DIR] [--no-verify]" : "");
    return EXIT_ERROR;
}

//  Passes 2..repeat of a get (or lookup) on the open session, each under
//  a request id of its own: again[] gets their seconds, and the count is
//  returned.  Stops, saying why, at the first that fails or gets fewer
//  keys than the first pass did, or at an interrupt; the report and the
//  exit status stay the first pass's (the blocks a failed pass wrote
//  again hold what the first one wrote: the same keys, from the same
//  server).
static int
s_repeat(const s_remote_opts_t *o, p2pkv_client_t *client, int server, const s_get_t *g,
         const uint32_t *dest, bool get, const bool *landed, s_interrupt_t *intr,
         double *again)
{
    const char *cmd = get ? "get" : "lookup";
    bool *more = calloc(g->n, sizeof *more);
    if (!more) {
        fprintf(stderr, "p2pkv %s: --repeat: out of memory\n", cmd);
        return 0;
    }
    size_t first = 0;
    for (size_t i = 0; i < g->n; i++)
        first += landed[i];
    int passes = 0;
    for (int pass = 2; pass <= o->repeat && !atomic_load(&intr->signo); pass++) {
        char kv[32], err[P2PKV_ERRLEN] = "";
        atomic_store(&intr->pass, pass);
        double t0 = pk_clock_monotonic();
        int rc = p2pkv_client_get(client, server, s_pass_kv(pass, kv, sizeof kv), g->keys, dest,
                                  g->n, get, o->timeout, more, NULL, NULL, err);
        double seconds = pk_clock_monotonic() - t0;
        size_t n = 0;
        for (size_t i = 0; i < g->n; i++)
            n += more[i] && landed[i];
        if (atomic_load(&intr->signo))
            break;
        if (rc < 0) {
            fprintf(stderr, "p2pkv %s: --repeat: pass %d: %s; no more passes\n", cmd, pass,
                    *err ? err : strerror(-rc));
            break;
        }
        if (n < first) {
            fprintf(stderr, "p2pkv %s: --repeat: pass %d got %zu of the %zu keys the first "
                    "got; no more passes\n", cmd, pass, n, first);
            break;
        }
        again[passes++] = seconds;
    }
    free(more);
    return passes;
}

static int
s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

//  The passes after the first, on standard error: they run on the open
//  session, without the data connection the first one made.
static void
s_report_again(const s_remote_opts_t *o, size_t n, const bool *landed, uint64_t block_len,
               bool get, double *again, int passes)
{
    if (o->json)
        return;
    size_t nhit = 0;
    for (size_t i = 0; i < n; i++)
        nhit += landed[i];
    qsort(again, (size_t) passes, sizeof *again, s_cmp_double);
    double med = passes % 2 ? again[passes / 2] : (again[passes / 2 - 1] + again[passes / 2]) / 2;
    double bytes = nhit * (double) block_len;
    if (get && nhit)
        fprintf(stderr, "p2pkv get: again on the open session, %d pass%s: %.2f GB/s median "
                "[%.2f..%.2f] (%.3f s median)\n", passes, passes > 1 ? "es" : "", bytes / med / 1e9,
                bytes / again[passes - 1] / 1e9, bytes / again[0] / 1e9, med);
    else
        fprintf(stderr, "p2pkv %s: again on the open session, %d pass%s: %.3f ms median "
                "[%.3f..%.3f]\n", get ? "get" : "lookup", passes, passes > 1 ? "es" : "",
                med * 1e3, again[0] * 1e3,
                again[passes - 1] * 1e3);
}

static int
s_cmd_remote(int argc, char *argv[], bool get)
{
    s_interrupt_t intr;
    s_interrupt_init(&intr);
    s_remote_opts_t o = { 0 };
    if (s_remote_opts(argc, argv, &o))
        return s_remote_usage(get);
    s_get_t g = { 0 };
    int rc = EXIT_ERROR;
    p2pkv_client_t *client = NULL;
    zcert_t *mine = NULL, *theirs = NULL;
    p2pkv_config_t keys = { 0 };
    if (s_parse_keys(argv, o.first, argc, &g)
        || s_curve_certs(get ? "get" : "lookup", o.curve_secret, o.server_key, &mine, &theirs,
                         &keys)
        || (o.directory && (rc = s_cmd_by_key(&o, argv, &g, get, &keys)) >= 0))
        goto done;
    char err[256] = "";
    p2pkv_description_t d;
    if (!(client = s_remote_client(&o, &keys, g.n, &d, err))) {
        fprintf(stderr, "p2pkv %s: %s\n", get ? "get" : "lookup", err);
        goto done;
    }
    int server = p2pkv_client_connect(client, o.server, o.timeout, err);
    if (server < 0) {
        fprintf(stderr, "p2pkv: %s\n", err);
        goto done;
    }
    //  up after a fallback (a same-host provider refused us): said once
    char note[P2PKV_ERRLEN] = "";
    if (p2pkv_client_server_state(client, server, note) == P2PKV_SERVER_UP && *note)
        fprintf(stderr, "p2pkv: %s\n", note);
    bool *landed = calloc(g.n, sizeof *landed);
    p2pkv_key_result_t *res = calloc(g.n, sizeof *res);
    uint32_t *dest = calloc(g.n, sizeof *dest);
    if (!landed || !res || !dest) {
        free(landed);
        free(res);
        free(dest);
        goto done;
    }
    for (size_t i = 0; i < g.n; i++)
        dest[i] = (uint32_t) i;             //  the pool has a block per key
    bool progress = get && !o.json && isatty(STDERR_FILENO);
    atomic_store(&intr.pass, 1);
    s_interrupt_watch(&intr, client, server);
    double t0 = pk_clock_monotonic();
    int got = p2pkv_client_get_results(client, server, "p2pkv-cli", g.keys, dest, g.n, get,
                                       o.timeout, res, progress ? s_progress : NULL, NULL, err);
    double seconds = pk_clock_monotonic() - t0;
    for (size_t i = 0; i < g.n; i++)
        landed[i] = res[i].status == P2PKV_KEY_LANDED;
    char provider[64];
    if (progress)
        fprintf(stderr, "\r\033[K");
    //  --repeat: the same get again on the open session
    double again[1000];
    int passes = 0;
    if (got >= 0 && o.repeat > 1)
        passes = s_repeat(&o, client, server, &g, dest, get, landed, &intr, again);
    //  interrupted: the get's fetch has ended (nothing lands any more); no report
    int signo = s_interrupt_end(&intr);
    bool failed = got == -EIO;
    if (got < 0)
        fprintf(stderr, "p2pkv%s: %s%s%s\n", failed ? " get" : "", signo ? strsignal(signo) : "",
                signo ? ": " : "", err);
    rc = signo ? 128 + signo
         : s_report(&o, argv, g.n, res, p2pkv_client_pool(client), d.block_len, get, seconds,
                    p2pkv_client_server_provider(client, server, provider, sizeof provider) == 0
                    ? provider : NULL);
    if (!signo && passes)
        s_report_again(&o, g.n, landed, d.block_len, get, again, passes);
    if (failed && !signo)
        rc = EXIT_ERROR;
    free(landed);
    free(res);
    free(dest);
done:
    s_interrupt_end(&intr);
    p2pkv_client_destroy(&client);
    zcert_destroy(&mine);
    zcert_destroy(&theirs);
    free(g.keys);
    free(g.bytes);
    pthread_sigmask(SIG_SETMASK, &intr.old, NULL);
    return rc;
}

//  What became of key: present (in the pool before), missing (the event
//  names it) or landed.
static const char *
s_pull_status(const p2pkv_key_t *key, bool present, const p2pkv_engine_event_t *ev)
{
    if (present)
        return "present";
    for (size_t k = 0; k < ev->missing; k++)
        if (ev->missing_keys[k].len == key->len
            && memcmp(ev->missing_keys[k].bytes, key->bytes, key->len) == 0)
            return "missing";
    return "landed";
}

//  The pull, then its event (after the fetches): KEY landed|present|missing.
static int
s_pull(const s_local_opts_t *o, const char *server, char *argv[], const s_get_t *g)
{
    p2pkv_engine_t *engine = s_engine_open("pull", o->local);
    bool *present = calloc(g->n, sizeof *present);
    char err[P2PKV_ERRLEN] = "";
    uint64_t id;
    int rc = !engine || !present ? -ENOMEM
             : p2pkv_engine_pull(engine, server, g->keys, g->n, &id, NULL, present, err);
    p2pkv_engine_event_t ev = { 0 };
    double deadline = pk_clock_monotonic() + 120;
    while (rc == 0 && (ev.kind != P2PKV_EVENT_PULL || ev.id != id)) {
        double left = deadline - pk_clock_monotonic();
        rc = left > 0 ? p2pkv_engine_next_event(engine, left, &ev) : -ETIMEDOUT;
        if (rc == -ETIMEDOUT)
            snprintf(err, sizeof err, "no result within 120 s");
    }
    if (rc == 0) {
        for (size_t i = 0; i < g->n; i++)
            printf("%s %s\n", argv[o->first + (int) i],
                   s_pull_status(&g->keys[i], present[i], &ev));
        if (ev.reason[0])
            fprintf(stderr, "p2pkv pull: %s\n", ev.reason);
    }
    else if (engine)
        fprintf(stderr, "p2pkv pull: %s\n", err[0] ? err : strerror(-rc));
    int exit = rc ? EXIT_ERROR : ev.missing ? EXIT_SOME_INVALID : EXIT_SUCCESS;
    free(present);
    p2pkv_engine_close(&engine);
    return exit;
}

static int
s_cmd_pull(int argc, char *argv[])
{
    //  --server is ours; --local and --json go to s_local_opts
    const char *server = NULL;
    char **rest = calloc((size_t) argc + 1, sizeof *rest);
    int nrest = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--server") == 0 && i + 1 < argc)
            server = argv[++i];
        else
            rest[nrest++] = argv[i];
    }
    s_local_opts_t o = { 0 };
    char *dflt = NULL;
    if (s_local_opts(nrest, rest, &o, &dflt) || o.first >= nrest || o.ns) {
        free(rest);
        free(dflt);
        fprintf(stderr, "usage: p2pkv pull [--local ENDPOINT] [--server tcp://HOST:PORT] KEY...\n");
        return EXIT_ERROR;
    }
    s_get_t g = { 0 };
    int rc = s_parse_keys(rest, o.first, nrest, &g) ? EXIT_ERROR : s_pull(&o, server, rest, &g);
    free(g.keys);
    free(g.bytes);
    free(dflt);
    free(rest);
    return rc;
}

int
main(int argc, char *argv[])
{
    static const struct option opts[] = {
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 }
    };
    int c;
    while ((c = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
        switch (c) {
            case 'h':
                s_usage(stdout);
                return EXIT_SUCCESS;
            case 'V':
                printf("p2pkv %s (wire protocol %d.%d)\n", PK_VERSION, PK_WIRE_MAJOR,
                       PK_WIRE_MINOR);
                return EXIT_SUCCESS;
            default:
                s_usage(stderr);
                return EXIT_ERROR;
        }
    }
    if (optind >= argc) {
        s_usage(stderr);
        return EXIT_ERROR;
    }
    const char *cmd = argv[optind];
    if (s_command_help(cmd, argc - optind, argv + optind))
        return EXIT_SUCCESS;
    if (strcmp(cmd, "codec") == 0)
        return s_cmd_codec(argc - optind, argv + optind);
    if (strcmp(cmd, "keygen") == 0)
        return s_cmd_keygen(argc - optind, argv + optind);
    if (sodium_init() < 0)
        return EXIT_ERROR;
    if (strcmp(cmd, "put") == 0)
        return s_cmd_put(argc - optind, argv + optind);
    if (strcmp(cmd, "stats") == 0)
        return s_cmd_stats(argc - optind, argv + optind);
    if (strcmp(cmd, "pull") == 0)
        return s_cmd_pull(argc - optind, argv + optind);
    if (strcmp(cmd, "lookup") == 0)
        return s_cmd_remote(argc - optind, argv + optind, false);
    if (strcmp(cmd, "get") == 0)
        return s_cmd_remote(argc - optind, argv + optind, true);
    fprintf(stderr, "p2pkv: unknown command '%s' (see p2pkv --help)\n", cmd);
    return EXIT_ERROR;
}
