/*  codec.c: p2pkv codec, the control-plane frames decoded, one JSON
    object per line (from the files, or standard input), and each one's
    canonical encoding printed, or the exact rule it breaks.
*/
#include "cli.h"
#include "wire/protocol.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

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

int
cli_cmd_codec(int argc, char *argv[])
{
    int invalid = 0, first = 1;
    //  codec takes no options: one is refused, not read as a file name
    //  ("--" ends them, for a file whose name starts with -)
    if (first < argc && strcmp(argv[first], "--") == 0)
        first++;
    else
        for (int i = 1; i < argc; i++)
            if (argv[i][0] == '-' && argv[i][1]) {
                fprintf(stderr, "p2pkv codec: unknown option \"%s\" (usage: p2pkv codec [--] "
                        "[FILE...]; - is standard input)\n", argv[i]);
                return EXIT_ERROR;
            }
    if (first >= argc)
        return s_codec_stream(stdin, "-", &invalid) ? EXIT_ERROR
               : invalid ? EXIT_SOME_INVALID : EXIT_SUCCESS;
    for (int i = first; i < argc; i++) {
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
