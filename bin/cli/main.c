/*  p2pkv: the command line; main.c, its table of commands (the synopsis
    and text of each for --help and COMMAND --help) and the one it runs.

    `put`, `stats` and `pull` talk to the local p2pkv-server through the
    engine API (p2pkv_engine.h);
    `lookup` and `get` ask a (remote) server through the client library
    (p2pkv.h), `get` having the blocks written into its own registered
    memory; `codec` decodes control-plane frames and prints each one's
    canonical encoding or the exact rule it breaks.  Each is a file of
    bin/cli/ (cli.h says which).
*/
#include "cli.h"
#include "wire/protocol.h"
#include "base/version.h"

#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  One entry per command: its synopsis and what it does, for --help and
//  for COMMAND --help, and what runs it (after sodium_init if sodium).
static const struct {
    const char *name, *synopsis, *text;
    int (*run)(int argc, char *argv[]);
    bool sodium;
} s_commands[] = {
    { "put", "put [--local EP] [--namespace NS] [--json] FILE...",
      "publish each file (exactly one block long) on the local\n"
      "server, keyed by the SHA-256 of its content, into the\n"
      "tenant namespace NS (default shared); prints KEY FILE\n"
      "per block",
      cli_cmd_put, true },
    { "stats", "stats [--local EP] [--json]",
      "the local server's pool, sessions and counters, per\n"
      "namespace too",
      cli_cmd_stats, true },
    { "pull", "pull [--local EP] [--server tcp://HOST:PORT] [--verbose] [--json] KEY...",
      "the local server fetches the keys from that server into\n"
      "its own pool (without --server: from any holder its\n"
      "--directory names); prints KEY landed|present|missing\n"
      "(--verbose: KEY landed from ENDPOINT, KEY missing REASON;\n"
      "--json: [{key, status, from, reason}])\n"
      "(exit 2 when the pull itself failed: the server could not\n"
      "be reached or refused us, as across a block-length mismatch)",
      cli_cmd_pull, true },
    { "lookup", "lookup --server tcp://HOST:PORT | --directory redis://HOST:PORT[/DB]\n"
      "       [--json] KEY...",
      "prints KEY hit|miss, a miss with why where the server says\n"
      "(absent, evicted, pending, quota, writing, draining); by\n"
      "--directory, KEY hit PEER,... (the live holders) or KEY miss\n"
      "(with --fingerprint, --hash-seed, --provider, --fabric-addr,\n"
      "--timeout, --repeat as for get; --repeat prints the round\n"
      "trip of passes 2..N)",
      cli_cmd_lookup, true },
    { "get", "get --server tcp://HOST:PORT | --directory redis://HOST:PORT[/DB]\n"
      "       [-o DIR] [--repeat N] [--no-verify] [--verbose] [--json] KEY...",
      "fetches the blocks into this process's memory over the\n"
      "data plane and writes DIR/KEY for each (DIR: .); on a\n"
      "terminal, a progress line on standard error; by\n"
      "--directory, each key from any live holder, another one\n"
      "if a holder fails; prints KEY fetched|corrupt|failed|missing\n"
      "(missing with its reason, as for lookup)\n"
      "(corrupt: it landed but differs from the checksum its\n"
      "server announced; not written; exit 1)\n"
      "--no-verify: do not check blocks against their checksums\n"
      "--verbose (--directory): KEY fetched from ENDPOINT, and\n"
      "each holder that did not answer\n"
      "--repeat N (1..1000, --server only): the same get N times\n"
      "on the one session, and the rate of passes 2..N beside the\n"
      "first's (which makes the data connection)\n"
      "--fingerprint F --hash-seed S (the server's, learnt by\n"
      "default), --provider P (default auto: the best one the\n"
      "server announces, shm on its host, else its first\n"
      "network one), --fabric-addr ADDR[,ADDR...] (the data\n"
      "plane's local address; several: one rail each, and a\n"
      "block of 2 MiB or more comes sliced over them),\n"
      "--timeout SECONDS (0.001..1000000; 30),\n"
      "--curve-secret FILE --server-key FILE (a CURVE server:\n"
      "our certificate as keygen wrote it, NAME_secret, and\n"
      "the server's public certificate; both or neither; by\n"
      "--directory, every holder's)",
      cli_cmd_get, true },
    { "keygen", "keygen [--endpoint EP] NAME",
      "writes a new CURVE keypair as czmq certificates: NAME\n"
      "(public: give it to the server's --curve-allow DIR, or\n"
      "--curve-servers DIR with --endpoint) and NAME_secret\n"
      "(mode 0600); refuses to overwrite either",
      cli_cmd_keygen, false },
    { "codec", "codec [--] [FILE...]",
      "decode control-plane frames, one JSON object per line\n"
      "(from the files, or standard input; - is standard input),\n"
      "and print each one's canonical encoding, or why it is\n"
      "refused; an option it does not know is refused",
      cli_cmd_codec, false },
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
            "A server that cannot be reached is said at once, naming the endpoint:\n"
            "nothing listening, not a p2pkv/ZeroMQ port, a host name that does not\n"
            "resolve, CURVE required, an endpoint without tcp://.\n"
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
    for (size_t i = 0; i < S_NCOMMANDS; i++)
        if (streq(s_commands[i].name, cmd)) {
            if (s_commands[i].sodium && sodium_init() < 0)
                return EXIT_ERROR;
            //  getopt's own words (an option unknown, or without its
            //  value) name the command as "p2pkv CMD"
            char name[64];
            snprintf(name, sizeof name, "p2pkv %s", cmd);
            argv[optind] = name;
            return s_commands[i].run(argc - optind, argv + optind);
        }
    fprintf(stderr, "p2pkv: unknown command '%s' (see p2pkv --help)\n", cmd);
    return EXIT_ERROR;
}
