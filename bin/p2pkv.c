/*  p2pkv: the command line.

    Until the server and client exist (issues 5 and 6) it offers what the
    foundation has: its version, and `codec`, which decodes control-plane
    frames (one JSON object per line) and prints each one's canonical
    encoding or the exact rule it breaks, so an operator can check a frame
    from a log against the protocol.
*/
#include "protocol.h"
#include "version.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_SOME_INVALID 1
#define EXIT_ERROR 2

static void
s_usage(FILE *out)
{
    fprintf(out,
            "usage: p2pkv [--help] [--version] COMMAND [ARGS]\n"
            "\n"
            "commands:\n"
            "  codec [FILE...]   decode control-plane frames, one JSON object per line\n"
            "                    (from the files, or standard input), and print each\n"
            "                    one's canonical encoding, or why it is refused\n"
            "\n"
            "exit status: 0 all frames valid, 1 some refused, 2 usage or I/O error\n");
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
    if (strcmp(cmd, "codec") == 0)
        return s_cmd_codec(argc - optind, argv + optind);
    fprintf(stderr, "p2pkv: unknown command '%s' (see p2pkv --help)\n", cmd);
    return EXIT_ERROR;
}
