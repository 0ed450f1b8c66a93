/*  remote.c: p2pkv lookup and get, the client library (p2pkv.h) against
    a server: the options and the session; get has the blocks written into
    its own registered memory.  The report of each key (and get's files
    DIR/KEY) is report.c, by key (--directory) holders.c, --repeat
    repeat.c, an interrupt interrupt.c.
*/
#include "cli.h"
#include "base/clock.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int
s_remote_opts(int argc, char *argv[], cli_remote_opts_t *o, const char *cmd)
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
        { "verbose", no_argument, NULL, 'v' },
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
            case 's':
                if (cli_endpoint(cmd, "--server", optarg))
                    return -EINVAL;
                o->server = optarg;
                break;
            case 'o': o->outdir = optarg; break;
            case 'f': o->fingerprint = optarg; break;
            case 'H': o->hash_seed = optarg; break;
            case 'p': o->provider = streq(optarg, "auto") ? NULL : optarg; break;
            case 'a': o->fabric_addr = optarg; break;
            case 't':
                if (cli_seconds(cmd, "--timeout", optarg, &o->timeout))
                    return -EINVAL;
                break;
            case 'j': o->json = true; break;
            case 'C': o->curve_secret = optarg; break;
            case 'K': o->server_key = optarg; break;
            case 'd': o->directory = optarg; break;
            case 'V': o->no_verify = true; break;
            case 'v': o->verbose = true; break;
            case 'r': {
                char *end;
                long n = strtol(optarg, &end, 10);
                if (*optarg == '\0' || *end != '\0' || n < 1 || n > 1000)
                    return cli_bad(cmd, "--repeat: \"%s\" is not a count of passes (1..1000)",
                                   optarg);
                o->repeat = (int) n;
                break;
            }
            default: return -EINVAL;   //  getopt named the option
        }
    }
    o->first = optind;
    //  one of --server and --directory; CURVE's two files together
    if (o->repeat > 1 && o->directory)
        return cli_bad(cmd, "--repeat: only with --server (one session to repeat on)");
    if (!o->server && !o->directory)
        return cli_bad(cmd, "--server or --directory: one of them is needed");
    if (o->server && o->directory)
        return cli_bad(cmd, "--server and --directory: one of them, not both");
    if (!o->curve_secret != !o->server_key)
        return cli_bad(cmd, "%s without %s: CURVE takes both or neither",
                       o->curve_secret ? "--curve-secret" : "--server-key",
                       o->curve_secret ? "--server-key" : "--curve-secret");
    if (o->first >= argc)
        return cli_bad(cmd, "no KEY");
    //  where get writes its blocks, looked at before anything is fetched
    struct stat st;
    if (!streq(cmd, "get"))
        return 0;
    if (stat(o->outdir, &st) != 0 || (S_ISDIR(st.st_mode) && access(o->outdir, W_OK) != 0))
        return cli_bad(cmd, "-o: %s: %s", o->outdir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return cli_bad(cmd, "-o: %s: not a directory", o->outdir);
    return 0;
}

//  A provider or address of ours that the library could not use, named
//  as the options that gave it.
static void
s_name_fabric_options(const cli_remote_opts_t *o, char *err, size_t size)
{
    if (!o->provider && !o->fabric_addr)
        return;
    char prefix[160];
    snprintf(prefix, sizeof prefix, "%s%.60s%s%s%.60s: ", o->provider ? "--provider " : "",
             o->provider ? o->provider : "", o->provider && o->fabric_addr ? " " : "",
             o->fabric_addr ? "--fabric-addr " : "", o->fabric_addr ? o->fabric_addr : "");
    size_t plen = strlen(prefix), len = strlen(err);
    if (plen + 1 >= size)
        return;
    if (plen + len + 1 > size)
        len = size - plen - 1;
    memmove(err + plen, err, len);
    memcpy(err, prefix, plen);
    err[plen + len] = '\0';
}

//  The progress line of a long get, on a terminal.
static void
s_progress(void *arg, size_t landed, size_t n)
{
    fprintf(stderr, "\r%zu of %zu blocks fetched", landed, n);
}

//  The server described (its block length, and unless given its
//  fingerprint and seed), then a client for it with a block per key.
static p2pkv_client_t *
s_remote_client(const cli_remote_opts_t *o, const p2pkv_config_t *keys, size_t n,
                p2pkv_description_t *d, char *err)
{
    if (p2pkv_describe_curve(o->server, o->timeout < 10 ? o->timeout : 10, keys, d, err)) {
        cli_curve_hint(err, P2PKV_ERRLEN, o->curve_secret != NULL);
        return NULL;
    }
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
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, n, d->block_len,
                                              (p2pkv_callbacks_t) { 0 }, err);
    if (!client)
        s_name_fabric_options(o, err, P2PKV_ERRLEN);
    return client;
}

static int
s_remote_usage(bool get)
{
    fprintf(stderr, "usage: p2pkv %s --server tcp://HOST:PORT | --directory "
            "redis://HOST:PORT[/DB]%s [--repeat N] [--json] [--curve-secret FILE --server-key "
            "FILE] KEY...\n", get ? "get" : "lookup", get ? " [-o DIR] [--no-verify] [--verbose]" : "");
    return EXIT_ERROR;
}

static int
s_cmd_remote(int argc, char *argv[], bool get)
{
    cli_interrupt_t intr;
    cli_interrupt_init(&intr);
    cli_remote_opts_t o = { 0 };
    if (s_remote_opts(argc, argv, &o, get ? "get" : "lookup"))
        return s_remote_usage(get);
    cli_keys_t g = { 0 };
    int rc = EXIT_ERROR;
    p2pkv_client_t *client = NULL;
    zcert_t *mine = NULL, *theirs = NULL;
    p2pkv_config_t keys = { 0 };
    if (cli_parse_keys(argv, o.first, argc, &g)
        || cli_curve_certs(get ? "get" : "lookup", o.curve_secret, o.server_key, &mine,
                           &theirs, &keys)
        || (o.directory && (rc = cli_by_key(&o, argv, &g, get, &keys)) >= 0))
        goto done;
    char err[P2PKV_ERRLEN] = "";
    p2pkv_description_t d;
    if (!(client = s_remote_client(&o, &keys, g.n, &d, err))) {
        fprintf(stderr, "p2pkv %s: %s\n", get ? "get" : "lookup", err);
        goto done;
    }
    int server = p2pkv_client_connect(client, o.server, o.timeout, err);
    if (server < 0) {
        cli_curve_hint(err, sizeof err, o.curve_secret != NULL);
        if (server == -EPROTONOSUPPORT)
            s_name_fabric_options(&o, err, sizeof err);
        fprintf(stderr, "p2pkv %s: %s\n", get ? "get" : "lookup", err);
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
    cli_interrupt_watch(&intr, client, server);
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
        passes = cli_repeat(&o, client, server, &g, dest, get, landed, &intr, again);
    //  interrupted: the get's fetch has ended (nothing lands any more); no report
    int signo = cli_interrupt_end(&intr);
    bool failed = got == -EIO;
    if (got < 0)
        fprintf(stderr, "p2pkv%s: %s%s%s\n", failed ? " get" : "", signo ? strsignal(signo) : "",
                signo ? ": " : "", err);
    rc = signo ? 128 + signo
         : cli_report(&o, argv, g.n, res, p2pkv_client_pool(client), d.block_len, get,
                      seconds,
                      p2pkv_client_server_provider(client, server, provider, sizeof provider) == 0
                      ? provider : NULL, NULL);
    if (!signo && passes)
        cli_report_again(&o, g.n, landed, d.block_len, get, again, passes);
    if (failed && !signo)
        rc = EXIT_ERROR;
    free(landed);
    free(res);
    free(dest);
done:
    cli_interrupt_end(&intr);
    p2pkv_client_destroy(&client);
    zcert_destroy(&mine);
    zcert_destroy(&theirs);
    free(g.keys);
    free(g.bytes);
    pthread_sigmask(SIG_SETMASK, &intr.old, NULL);
    return rc;
}

int
cli_cmd_lookup(int argc, char *argv[])
{
    return s_cmd_remote(argc, argv, false);
}

int
cli_cmd_get(int argc, char *argv[])
{
    return s_cmd_remote(argc, argv, true);
}
