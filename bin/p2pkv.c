/*  p2pkv: the command line.

    `put` and `stats` talk to the local p2pkv-server over its engine socket;
    `codec` decodes control-plane frames (one JSON object per line) and
    prints each one's canonical encoding or the exact rule it breaks, so an
    operator can check a frame from a log against the protocol.  (`lookup`
    and `get` against a remote server come with the client library.)
*/
#include "protocol.h"
#include "server_config.h"
#include "version.h"

#include <czmq.h>
#include <jansson.h>
#include <sodium.h>

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
            "  put [--local EP] [--json] FILE...\n"
            "                    publish each file (exactly one block long) on the local\n"
            "                    server, keyed by the SHA-256 of its content; prints\n"
            "                    KEY FILE per block\n"
            "  stats [--local EP] [--json]\n"
            "                    the local server's pool, sessions and counters\n"
            "  codec [FILE...]   decode control-plane frames, one JSON object per line\n"
            "                    (from the files, or standard input), and print each\n"
            "                    one's canonical encoding, or why it is refused\n"
            "\n"
            "EP defaults to p2pkv-server's default --local endpoint on this host.\n"
            "exit status: 0 all done (all frames valid), 1 some refused, 2 error\n");
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
    bool json;
    int first;                  //  argv index of the first operand
} s_local_opts_t;

static int
s_local_opts(int argc, char *argv[], s_local_opts_t *o, char **dflt)
{
    static const struct option opts[] = {
        { "local", required_argument, NULL, 'l' },
        { "json", no_argument, NULL, 'j' },
        { NULL, 0, NULL, 0 }
    };
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+l:j", opts, NULL)) != -1) {
        if (c == 'l')
            o->local = optarg;
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

//  One request, its answer (skipping events); NULL with a message on error.
static json_t *
s_ask(zsock_t *sock, json_t *req)
{
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!text || zstr_send(sock, text) != 0) {
        free(text);
        return NULL;
    }
    free(text);
    for (;;) {
        char *answer = zstr_recv(sock);
        if (!answer) {
            fprintf(stderr, "p2pkv: no answer from the local server within 5 s\n");
            return NULL;
        }
        json_t *j = json_loads(answer, 0, NULL);
        zstr_free(&answer);
        if (j && !json_object_get(j, "event"))
            return j;
        json_decref(j);
    }
}

static zsock_t *
s_local_connect(const char *endpoint)
{
    zsock_t *sock = zsock_new_dealer(endpoint);
    if (!sock) {
        fprintf(stderr, "p2pkv: cannot connect to %s\n", endpoint);
        return NULL;
    }
    zsock_set_rcvtimeo(sock, 5000);
    zsock_set_sndtimeo(sock, 5000);
    return sock;
}

static int
s_cmd_stats(int argc, char *argv[])
{
    s_local_opts_t o = { 0 };
    char *dflt = NULL;
    if (s_local_opts(argc, argv, &o, &dflt) || o.first != argc) {
        free(dflt);
        fprintf(stderr, "usage: p2pkv stats [--local ENDPOINT] [--json]\n");
        return EXIT_ERROR;
    }
    zsock_t *sock = s_local_connect(o.local);
    json_t *a = sock ? s_ask(sock, json_pack("{s:s}", "cmd", "stats")) : NULL;
    int rc = EXIT_ERROR;
    if (a && json_is_true(json_object_get(a, "ok"))) {
        char *text = json_dumps(a, o.json ? JSON_COMPACT : JSON_INDENT(2));
        puts(text);
        free(text);
        rc = EXIT_SUCCESS;
    }
    else if (a)
        fprintf(stderr, "p2pkv stats: %s\n", json_string_value(json_object_get(a, "error")));
    json_decref(a);
    zsock_destroy(&sock);
    free(dflt);
    return rc;
}

static int
s_cmd_put(int argc, char *argv[])
{
    s_local_opts_t o = { 0 };
    char *dflt = NULL;
    if (s_local_opts(argc, argv, &o, &dflt) || o.first >= argc) {
        free(dflt);
        fprintf(stderr, "usage: p2pkv put [--local ENDPOINT] [--json] FILE...\n");
        return EXIT_ERROR;
    }
    zsock_t *sock = s_local_connect(o.local);
    json_t *d = sock ? s_ask(sock, json_pack("{s:s}", "cmd", "describe")) : NULL;
    json_int_t block_len = json_integer_value(json_object_get(d, "block_len"));
    json_decref(d);
    if (block_len <= 0) {
        zsock_destroy(&sock);
        free(dflt);
        return EXIT_ERROR;
    }
    int rc = EXIT_SUCCESS;
    json_t *out = json_array();
    uint8_t *data = malloc((size_t) block_len + 1);
    for (int i = o.first; i < argc && rc == EXIT_SUCCESS; i++) {
        FILE *f = fopen(argv[i], "rb");
        size_t got = f ? fread(data, 1, (size_t) block_len + 1, f) : 0;
        if (!f) {
            fprintf(stderr, "p2pkv put: %s: %s\n", argv[i], strerror(errno));
            rc = EXIT_ERROR;
            break;
        }
        fclose(f);
        if (got != (size_t) block_len) {
            fprintf(stderr, "p2pkv put: %s: %s%zu bytes, blocks are %lld bytes\n", argv[i],
                    got > (size_t) block_len ? "more than " : "", got > (size_t) block_len
                    ? (size_t) block_len : got, (long long) block_len);
            rc = EXIT_ERROR;
            break;
        }
        uint8_t hash[crypto_hash_sha256_BYTES];
        crypto_hash_sha256(hash, data, got);
        char hex[2 * sizeof hash + 1];
        pk_hex_encode(hash, sizeof hash, hex);
        size_t b64len = sodium_base64_ENCODED_LEN(got, sodium_base64_VARIANT_ORIGINAL);
        char *b64 = malloc(b64len);
        sodium_bin2base64(b64, b64len, data, got, sodium_base64_VARIANT_ORIGINAL);
        json_t *a = s_ask(sock, json_pack("{s:s, s:s, s:s}", "cmd", "put", "key", hex,
                                          "data", b64));
        free(b64);
        if (!a || !json_is_true(json_object_get(a, "ok"))) {
            fprintf(stderr, "p2pkv put: %s: %s\n", argv[i],
                    a ? json_string_value(json_object_get(a, "error")) : "no answer");
            rc = EXIT_ERROR;
        }
        else if (o.json)
            json_array_append_new(out, json_pack("{s:s, s:s}", "key", hex, "file", argv[i]));
        else
            printf("%s %s\n", hex, argv[i]);
        json_decref(a);
    }
    if (o.json && rc == EXIT_SUCCESS) {
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text);
        free(text);
    }
    json_decref(out);
    free(data);
    zsock_destroy(&sock);
    free(dflt);
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
    if (strcmp(cmd, "codec") == 0)
        return s_cmd_codec(argc - optind, argv + optind);
    if (sodium_init() < 0)
        return EXIT_ERROR;
    if (strcmp(cmd, "put") == 0)
        return s_cmd_put(argc - optind, argv + optind);
    if (strcmp(cmd, "stats") == 0)
        return s_cmd_stats(argc - optind, argv + optind);
    fprintf(stderr, "p2pkv: unknown command '%s' (see p2pkv --help)\n", cmd);
    return EXIT_ERROR;
}
