/*  pull.c: p2pkv pull, the local server told to fetch keys into its own
    pool (from one server, or from any holder its --directory names),
    and each key's fate printed: landed (with --verbose, from where),
    present or missing (with --verbose, why).
*/
#include "cli.h"
#include "base/clock.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  What became of each key, one line each: KEY landed|present|missing;
//  verbose, where a landed key came from and why a missing one missed
//  (KEY landed from EP, KEY missing REASON); --json, an array of
//  {key, status[, from][, reason]}.
static void
s_report(const cli_local_opts_t *o, bool verbose, char *argv[], const bool *present,
         const p2pkv_engine_pull_key_t *res, size_t n)
{
    json_t *out = o->json ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        const char *key = argv[o->first + (int) i], *why = NULL;
        const char *what = present[i] ? "present"
                           : res[i].status == P2PKV_KEY_LANDED ? "landed" : "missing";
        if (res[i].status == P2PKV_KEY_CORRUPT || res[i].status == P2PKV_KEY_FAILED)
            why = res[i].status == P2PKV_KEY_CORRUPT ? "corrupt" : "failed";
        else if (res[i].status == P2PKV_KEY_MISSING)
            why = p2pkv_miss_reason_name(res[i].reason);
        const char *from = present[i] ? NULL : res[i].source;
        //  plain lines name no reason (their form predates reasons)
        cli_key_line(key, what, verbose || out ? why : NULL, from, verbose, out);
    }
    if (out) {
        char *text = json_dumps(out, JSON_COMPACT);
        if (text)
            puts(text);
        free(text);
        json_decref(out);
    }
}

//  The pull, then its event (after the fetches), then each key's fate.
static int
s_pull(const cli_local_opts_t *o, bool verbose, const char *server, char *argv[],
       const cli_keys_t *g)
{
    p2pkv_engine_t *engine = cli_engine_open("pull", o->local);
    bool *present = calloc(g->n, sizeof *present);
    p2pkv_engine_pull_key_t *res = calloc(g->n, sizeof *res);
    char err[P2PKV_ERRLEN] = "";
    uint64_t id;
    int rc = !engine || !present || !res ? -ENOMEM
             : p2pkv_engine_pull(engine, server, g->keys, g->n, &id, NULL, present, err);
    p2pkv_engine_event_t ev = { 0 };
    double deadline = pk_clock_monotonic() + 120;
    while (rc == 0 && (ev.kind != P2PKV_EVENT_PULL || ev.id != id)) {
        double left = deadline - pk_clock_monotonic();
        rc = left > 0 ? p2pkv_engine_next_event(engine, left, &ev) : -ETIMEDOUT;
        if (rc == -ETIMEDOUT)
            snprintf(err, sizeof err, "no result within 120 s");
    }
    if (rc == 0)
        rc = p2pkv_engine_pull_keys(engine, id, g->keys, g->n, res, err);
    if (rc == 0) {
        s_report(o, verbose, argv, present, res, g->n);
        if (ev.reason[0])
            fprintf(stderr, "p2pkv pull: %s\n", ev.reason);
    }
    else if (engine)
        fprintf(stderr, "p2pkv pull: %s\n", err[0] ? err : strerror(-rc));
    //  A reason is an error of the pull itself (the server could not be
    //  reached, refused us as incompatible, a fetch failed): 2, as any
    //  error; keys the servers did not have are 1.
    int exit = rc || ev.reason[0] ? EXIT_ERROR : ev.missing ? EXIT_SOME_INVALID : EXIT_SUCCESS;
    free(res);
    free(present);
    p2pkv_engine_close(&engine);
    return exit;
}

int
cli_cmd_pull(int argc, char *argv[])
{
    //  --server is ours; --local and --json go to cli_local_opts
    const char *server = NULL;
    bool verbose = false;
    char **rest = calloc((size_t) argc + 1, sizeof *rest);
    int nrest = 0, bad = rest ? 0 : -ENOMEM;
    for (int i = 0; i < argc && !bad; i++) {
        const char *value = strncmp(argv[i], "--server=", 9) == 0 ? argv[i] + 9 : NULL;
        if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0)
            verbose = true;
        else if (value || strcmp(argv[i], "--server") == 0) {
            if (!value && i + 1 == argc)
                bad = cli_bad("pull", "--server: needs a value (tcp://HOST:PORT)");
            else
                server = value ? value : argv[++i];
            if (!bad)
                bad = cli_endpoint("pull", "--server", server);
        }
        else
            rest[nrest++] = argv[i];
    }
    cli_local_opts_t o = { 0 };
    char *dflt = NULL;
    if (bad || cli_local_opts("pull", "KEY", nrest, rest, &o, &dflt)) {
        free(rest);
        free(dflt);
        fprintf(stderr, "usage: p2pkv pull [--local ENDPOINT] [--server tcp://HOST:PORT] "
                        "[--verbose] [--json] KEY...\n");
        return EXIT_ERROR;
    }
    cli_keys_t g = { 0 };
    int rc = cli_parse_keys(rest, o.first, nrest, &g) ? EXIT_ERROR : s_pull(&o, verbose, server, rest, &g);
    free(g.keys);
    free(g.bytes);
    free(dflt);
    free(rest);
    return rc;
}
