/*  repeat.c: --repeat of lookup and get, the same request again on the
    open session, and the round trip or rate of those passes beside the
    first's (which made the data connection).
*/
#include "cli.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  The request id of pass n of a get (--repeat): each pass its own, so
//  that none meets the one before it (finished) at the server.
const char *
cli_pass_kv(int pass, char *kv, size_t len)
{
    if (pass <= 1)
        snprintf(kv, len, "p2pkv-cli");
    else
        snprintf(kv, len, "p2pkv-cli-pass%d", pass);
    return kv;
}

//  Passes 2..repeat of a get (or lookup) on the open session, each under
//  a request id of its own: again[] gets their seconds, and the count is
//  returned.  Stops, saying why, at the first that fails or gets fewer
//  keys than the first pass did, or at an interrupt; the report and the
//  exit status stay the first pass's (the blocks a failed pass wrote
//  again hold what the first one wrote: the same keys, from the same
//  server).
int
cli_repeat(const cli_remote_opts_t *o, p2pkv_client_t *client, int server,
           const cli_keys_t *g, const uint32_t *dest, bool get, const bool *landed,
           cli_interrupt_t *intr, double *again)
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
        int rc = p2pkv_client_get(client, server, cli_pass_kv(pass, kv, sizeof kv), g->keys,
                                  dest, g->n, get, o->timeout, more, NULL, NULL, err);
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
void
cli_report_again(const cli_remote_opts_t *o, size_t n, const bool *landed,
                 uint64_t block_len, bool get, double *again, int passes)
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
