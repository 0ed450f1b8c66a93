/*  stats.c: p2pkv stats, the local server's pool, sessions and counters
    (per namespace too), as its engine socket answers them: indented for
    a terminal, or compact with --json.
*/
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

int
cli_cmd_stats(int argc, char *argv[])
{
    cli_local_opts_t o = { 0 };
    char *dflt = NULL;
    if (cli_local_opts("stats", NULL, argc, argv, &o, &dflt)) {
        free(dflt);
        fprintf(stderr, "usage: p2pkv stats [--local ENDPOINT] [--json]\n");
        return EXIT_ERROR;
    }
    p2pkv_engine_t *engine = cli_engine_open("stats", o.local);
    char err[P2PKV_ERRLEN] = "";
    char *text = engine ? p2pkv_engine_stats_json(engine, err) : NULL;
    //  the server's answer as it is, indented for a terminal
    json_t *a = text ? json_loads(text, 0, NULL) : NULL;
    char *out = a ? json_dumps(a, o.json ? JSON_COMPACT : JSON_INDENT(2)) : NULL;
    int rc = out ? EXIT_SUCCESS : EXIT_ERROR;
    if (out)
        puts(out);
    else if (engine)
        fprintf(stderr, "p2pkv stats: %s\n", err[0] ? err : "out of memory");
    free(out);
    json_decref(a);
    free(text);
    p2pkv_engine_close(&engine);
    free(dflt);
    return rc;
}
