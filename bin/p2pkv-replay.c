/*  p2pkv-replay: the server role driven by a script (doc/replay.md).

    Reads one JSON event per line, feeds it to one pk_server_role wired to
    a virtual clock, a scripted store and the in-memory transport, and
    prints every effect the role has on the outside world, one compact JSON
    object per line.  Deterministic: the same input gives the same output.
    This file is the command line; the engine is replay.c, which the fuzz
    target tests/fuzz/fuzz_replay.c runs too.
*/
#include "replay.h"
#include "base/version.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

static void
s_usage(FILE *out)
{
    fprintf(out,
            "usage: p2pkv-replay [--peer ID] [--mark] < scenario.jsonl > effects.jsonl\n"
            "\n"
            "Feeds a script of events (one JSON object per line; blank lines and lines\n"
            "starting with # are skipped) to one server role with a virtual clock, a\n"
            "scripted store and a scripted transport, and prints every effect it has.\n"
            "\n"
            "  --peer ID   the peer id the role is created for (default \"peer\")\n"
            "  --mark      after the effects of each event, print {\"line\":N}\n"
            "\n"
            "exit status: 0 the whole script ran, 2 an input error (message on stderr)\n"
            "events and effects: doc/replay.md\n");
}

int
main(int argc, char *argv[])
{
    static const struct option opts[] = {
        { "peer", required_argument, NULL, 'p' },
        { "mark", no_argument, NULL, 'm' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 }
    };
    const char *peer = "peer";
    bool mark = false;
    int c;
    while ((c = getopt_long(argc, argv, "p:mhV", opts, NULL)) != -1) {
        switch (c) {
            case 'p': peer = optarg; break;
            case 'm': mark = true; break;
            case 'h': s_usage(stdout); return 0;
            case 'V': printf("p2pkv-replay %s\n", PK_VERSION); return 0;
            default: s_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "p2pkv-replay: unexpected argument \"%s\" (the script is read from "
                "standard input)\n", argv[optind]);
        s_usage(stderr);
        return 2;
    }
    return pk_replay_run(stdin, stdout, stderr, peer, mark);
}
