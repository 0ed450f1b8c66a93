/*  pull.c: p2pkv pull, the local server told to fetch keys into its own
    pool (from one server, or from any holder its --directory names),
    and each key's fate printed: landed, present or missing.
*/
#include "cli.h"
#include "base/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  What became of key: present (in the pool before), missing (the event
//  names it) or landed.
static const char *
s_pull_status(const p2pkv_key_t *key, bool present, const p2pkv_engine_event_t *ev)
{
    if (present)
        return "present";
    for (size_t k = 0; k < ev->missing; k++)
        if (ev->missing_keys[k].len == key->len
            && memcmp(ev->missing_keys[k].bytes, key->bytes, key->len) == 0)
            return "missing";
    return "landed";
}

//  The pull, then its event (after the fetches): KEY landed|present|missing.
static int
s_pull(const cli_local_opts_t *o, const char *server, char *argv[], const cli_keys_t *g)
{
    p2pkv_engine_t *engine = cli_engine_open("pull", o->local);
    bool *present = calloc(g->n, sizeof *present);
    char err[P2PKV_ERRLEN] = "";
    uint64_t id;
    int rc = !engine || !present ? -ENOMEM
             : p2pkv_engine_pull(engine, server, g->keys, g->n, &id, NULL, present, err);
    p2pkv_engine_event_t ev = { 0 };
    double deadline = pk_clock_monotonic() + 120;
    while (rc == 0 && (ev.kind != P2PKV_EVENT_PULL || ev.id != id)) {
        double left = deadline - pk_clock_monotonic();
        rc = left > 0 ? p2pkv_engine_next_event(engine, left, &ev) : -ETIMEDOUT;
        if (rc == -ETIMEDOUT)
            snprintf(err, sizeof err, "no result within 120 s");
    }
    if (rc == 0) {
        for (size_t i = 0; i < g->n; i++)
            printf("%s %s\n", argv[o->first + (int) i],
                   s_pull_status(&g->keys[i], present[i], &ev));
        if (ev.reason[0])
            fprintf(stderr, "p2pkv pull: %s\n", ev.reason);
    }
    else if (engine)
        fprintf(stderr, "p2pkv pull: %s\n", err[0] ? err : strerror(-rc));
    //  A reason is an error of the pull itself (the server could not be
    //  reached, refused us as incompatible, a fetch failed): 2, as any
    //  error; keys the servers did not have are 1.
    int exit = rc || ev.reason[0] ? EXIT_ERROR : ev.missing ? EXIT_SOME_INVALID : EXIT_SUCCESS;
    free(present);
    p2pkv_engine_close(&engine);
    return exit;
}

int
cli_cmd_pull(int argc, char *argv[])
{
    //  --server is ours; --local and --json go to cli_local_opts
    const char *server = NULL;
    char **rest = calloc((size_t) argc + 1, sizeof *rest);
    int nrest = 0, bad = rest ? 0 : -ENOMEM;
    for (int i = 0; i < argc && !bad; i++) {
        const char *value = strncmp(argv[i], "--server=", 9) == 0 ? argv[i] + 9 : NULL;
        if (value || strcmp(argv[i], "--server") == 0) {
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
        fprintf(stderr, "usage: p2pkv pull [--local ENDPOINT] [--server tcp://HOST:PORT] KEY...\n");
        return EXIT_ERROR;
    }
    cli_keys_t g = { 0 };
    int rc = cli_parse_keys(rest, o.first, nrest, &g) ? EXIT_ERROR : s_pull(&o, server, rest, &g);
    free(g.keys);
    free(g.bytes);
    free(dflt);
    free(rest);
    return rc;
}
