/*  local.c: the local server's engine socket, which stats, put and pull
    open: their options (--local, --json, --namespace; --local defaults
    to p2pkv-server's own default for this host) and the engine opened
    through the engine API (p2pkv_engine.h).
*/
#include "cli.h"
#include "daemon/server_config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
cli_local_opts(const char *cmd, const char *operand, int argc, char *argv[],
               cli_local_opts_t *o, char **dflt)
{
    static const struct option opts[] = {
        { "local", required_argument, NULL, 'l' },
        { "json", no_argument, NULL, 'j' },
        { "namespace", required_argument, NULL, 'n' },
        { NULL, 0, NULL, 0 }
    };
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+l:j", opts, NULL)) != -1) {
        if (c == 'l')
            o->local = optarg;
        else if (c == 'n')
            o->ns = optarg;
        else if (c == 'j')
            o->json = true;
        else
            return -EINVAL;         //  getopt named the option
    }
    if (o->ns && !streq(cmd, "put"))
        return cli_bad(cmd, "--namespace: only put publishes into a namespace");
    if (operand && optind >= argc)
        return cli_bad(cmd, "no %s", operand);
    if (!operand && optind < argc)
        return cli_bad(cmd, "unexpected argument \"%s\"", argv[optind]);
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

//  The local server through the engine API; NULL with a message on error.
p2pkv_engine_t *
cli_engine_open(const char *cmd, const char *endpoint)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_engine_t *engine = p2pkv_engine_open(endpoint, 5, NULL, NULL, err);
    //  the library names its argument, local_endpoint: ours is --local
    static const char arg[] = "local_endpoint: ";
    if (!engine && strncmp(err, arg, sizeof arg - 1) == 0)
        fprintf(stderr, "p2pkv %s: --local: %s\n", cmd, err + sizeof arg - 1);
    else if (!engine)
        fprintf(stderr, "p2pkv %s: %s\n", cmd, err);
    else
        p2pkv_engine_set_timeout(engine, 5);
    return engine;
}
