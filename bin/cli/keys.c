/*  keys.c: the keys on a command line (lookup, get, pull), lowercase
    hex decoded into the client library's key type.
*/
#include "cli.h"
#include "base/key.h"
#include "wire/protocol.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
cli_parse_keys(char *argv[], int first, int argc, cli_keys_t *g)
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
