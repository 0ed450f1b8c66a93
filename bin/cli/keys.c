/*  keys.c: the keys on a command line (lookup, get, pull), lowercase
    hex decoded into the client library's key type; and the checks of the
    option values those commands share, each refusal naming the option.
*/
#include "cli.h"
#include "base/key.h"
#include "wire/protocol.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
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
            fprintf(stderr, "p2pkv: KEY \"%s\" is not a key (lowercase hex of even length)\n",
                    hex);
            return -EINVAL;
        }
        g->keys[i] = (p2pkv_key_t) { at, (size_t) len };
    }
    return 0;
}

int
cli_bad(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "p2pkv %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -EINVAL;
}

int
cli_seconds(const char *cmd, const char *opt, const char *value, double *out)
{
    //  strtod takes blanks, "inf" and "nan": digits, a point and an exponent only
    char *end;
    double v = strtod(value, &end);
    if (!*value || *end || strspn(value, "0123456789.eE+-") != strlen(value) || !isfinite(v)
        || v < 0.001 || v > 1e6)
        return cli_bad(cmd, "%s: expected seconds 0.001..1000000, got \"%s\"", opt, value);
    *out = v;
    return 0;
}

int
cli_endpoint(const char *cmd, const char *opt, const char *value)
{
    if (!strstr(value, "://"))
        return cli_bad(cmd, "%s: \"%s\" names no transport: expected tcp://HOST:PORT", opt,
                       value);
    return 0;
}

void
cli_curve_hint(char *err, size_t size, bool have_keys)
{
    size_t at = strlen(err);
    if (!have_keys && strstr(err, "requires CURVE"))
        snprintf(err + at, size - at, " (p2pkv: --curve-secret FILE --server-key FILE)");
}
