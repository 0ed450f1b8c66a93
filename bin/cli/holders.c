/*  holders.c: lookup and get by key (--directory): who holds what, from
    the cluster directory, then each key from any of its live holders.
*/
#include "cli.h"
#include "base/clock.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  Holders to learn the block length (and fingerprint and seed) from:
//  as many as a dead one or two cannot exhaust.
#define S_ENDPOINTS 8

typedef struct {
    bool *held;
    char **holders;                 //  each key's holders' peer ids, comma-separated
    char endpoint[S_ENDPOINTS][256];    //  distinct holders, in the order found
    size_t nendpoints;
} s_found_t;

static void
s_on_found(void *arg, size_t i, const p2pkv_holder_t *h, size_t n)
{
    s_found_t *f = arg;
    f->held[i] = n > 0;
    for (size_t k = 0; k < n && f->nendpoints < S_ENDPOINTS; k++) {
        bool seen = false;
        for (size_t e = 0; e < f->nendpoints && !seen; e++)
            seen = strcmp(f->endpoint[e], h[k].endpoint) == 0;
        if (!seen)
            snprintf(f->endpoint[f->nendpoints++], sizeof f->endpoint[0], "%s", h[k].endpoint);
    }
    size_t len = 1;
    for (size_t k = 0; k < n; k++)
        len += strlen(h[k].peer_id) + 1;
    f->holders[i] = calloc(1, len);
    for (size_t k = 0; k < n && f->holders[i]; k++)
        strcat(strcat(f->holders[i], k ? "," : ""), h[k].peer_id);
}

//  Locates the keys with a client of a one-byte pool (a locate needs no
//  pool): 0, or -1 with a message.
static int
s_locate(const cli_remote_opts_t *o, const cli_keys_t *g, s_found_t *f)
{
    char err[P2PKV_ERRLEN] = "", name[64];
    snprintf(name, sizeof name, "p2pkv-cli-%d", (int) getpid());
    p2pkv_config_t cfg = { .peer_id = name, .provider = o->provider, .node = o->fabric_addr,
                           .directory = o->directory, .no_reconnect = true };
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, 1, 1, (p2pkv_callbacks_t) { 0 }, err);
    int rc = client ? p2pkv_client_locate(client, g->keys, g->n, s_on_found, f, err) : -1;
    p2pkv_client_destroy(&client);
    if (rc)
        fprintf(stderr, "p2pkv: %s\n", err);
    return rc ? -1 : 0;
}

static int
s_report_holders(const cli_remote_opts_t *o, char *argv[], const cli_keys_t *g,
                 const s_found_t *f)
{
    json_t *out = json_array();
    size_t nheld = 0;
    for (size_t i = 0; i < g->n; i++) {
        const char *hex = argv[o->first + (int) i];
        nheld += f->held[i];
        if (o->json)
            json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "key", hex, "status",
                                                 f->held[i] ? "hit" : "miss", "holders",
                                                 f->holders[i] ? f->holders[i] : ""));
        else if (f->held[i])
            printf("%s hit %s\n", hex, f->holders[i] ? f->holders[i] : "");
        else
            printf("%s miss\n", hex);
    }
    if (o->json) {
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text);
        free(text);
    }
    json_decref(out);
    return nheld == g->n ? EXIT_SUCCESS : EXIT_SOME_INVALID;
}

//  The get by key: the block length (and, unless given, the fingerprint
//  and seed) learnt from the first holder that answers a describe (a dead
//  one costs its refusal, or the describe's timeout), then
//  p2pkv_client_get of any server, which fails over key by key.  With
//  --curve-secret, the one --server-key is every holder's: a fleet whose
//  servers share a keypair.
static int
s_get_by_key(const cli_remote_opts_t *o, char *argv[], const cli_keys_t *g,
             const s_found_t *f, const p2pkv_config_t *keys)
{
    char err[P2PKV_ERRLEN] = "", name[64];
    p2pkv_description_t d;
    int described = -1;
    for (size_t e = 0; e < f->nendpoints && described != 0; e++) {
        described = p2pkv_describe_curve(f->endpoint[e], o->timeout < 10 ? o->timeout : 10, keys,
                                         &d, err);
        //  a holder that requires CURVE of us without keys: the options
        //  to give, as for --server (remote.c)
        if (described != 0)
            cli_curve_hint(err, sizeof err, o->curve_secret != NULL);
        //  err names the endpoint already
        if (described != 0 && o->verbose)
            fprintf(stderr, "p2pkv get: %s; trying the next holder\n", err);
    }
    if (described != 0) {
        fprintf(stderr, "p2pkv get: no holder answered (%zu tried; the last: %s)\n",
                f->nendpoints, err);
        return EXIT_ERROR;
    }
    snprintf(name, sizeof name, "p2pkv-cli-%d", (int) getpid());
    p2pkv_config_t cfg = { .peer_id = name,
                           .fingerprint = o->fingerprint ? o->fingerprint : d.fingerprint,
                           .hash_seed = o->hash_seed ? o->hash_seed : d.hash_seed,
                           .provider = o->provider, .node = o->fabric_addr,
                           .load_timeout = o->timeout, .silence_timeout = 10,
                           .directory = o->directory, .no_reconnect = true,
                           .no_verify = o->no_verify,
                           .curve_public = keys->curve_public,
                           .curve_secret = keys->curve_secret,
                           .curve_server = keys->curve_server };
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, g->n, d.block_len,
                                              (p2pkv_callbacks_t) { 0 }, err);
    p2pkv_key_result_t *res = calloc(g->n, sizeof *res);
    uint32_t *dest = calloc(g->n, sizeof *dest);
    int rc = EXIT_ERROR;
    if (client && res && dest) {
        for (size_t i = 0; i < g->n; i++)
            dest[i] = (uint32_t) i;
        double t0 = pk_clock_monotonic();
        int got = p2pkv_client_get_results(client, P2PKV_ANY_SERVER, "p2pkv-cli", g->keys, dest,
                                           g->n, true, o->timeout, res, NULL, NULL, err);
        if (got < 0 || (size_t) got < g->n)
            fprintf(stderr, "p2pkv get: %s\n", err[0] ? err : "some keys have no live holder");
        //  where each key came from: its holder's endpoint
        char (*from)[256] = calloc(g->n, sizeof *from);
        const char **fromp = calloc(g->n, sizeof *fromp);
        for (size_t i = 0; from && fromp && i < g->n; i++)
            if (res[i].holder >= 0 && p2pkv_client_server_endpoint(client, res[i].holder,
                                                                   from[i], sizeof from[i]) == 0)
                fromp[i] = from[i];
        rc = got < 0 && got != -ENOTCONN ? EXIT_ERROR
             : cli_report(o, argv, g->n, res, p2pkv_client_pool(client), d.block_len, true,
                          pk_clock_monotonic() - t0, NULL, fromp);
        free(from);
        free(fromp);
    }
    else
        fprintf(stderr, "p2pkv: %s\n", err[0] ? err : "out of memory");
    free(res);
    free(dest);
    p2pkv_client_destroy(&client);
    return rc;
}

int
cli_by_key(const cli_remote_opts_t *o, char *argv[], const cli_keys_t *g, bool get,
           const p2pkv_config_t *keys)
{
    s_found_t f = { calloc(g->n, sizeof *f.held), calloc(g->n, sizeof *f.holders), { "" }, 0 };
    int rc = EXIT_ERROR;
    if (f.held && f.holders && s_locate(o, g, &f) == 0) {
        if (!get)
            rc = s_report_holders(o, argv, g, &f);
        else if (!f.nendpoints) {
            //  no live holder of any key: all missing (a zeroed result is
            //  LANDED, so each is said)
            p2pkv_key_result_t *none = calloc(g->n, sizeof *none);
            for (size_t i = 0; none && i < g->n; i++)
                none[i] = (p2pkv_key_result_t) { .status = P2PKV_KEY_MISSING, .holder = -1,
                                                 .reason = P2PKV_MISS_NO_HOLDER };
            rc = none ? cli_report(o, argv, g->n, none, NULL, 0, true, 0, NULL, NULL)
                      : EXIT_ERROR;
            free(none);
        }
        else
            rc = s_get_by_key(o, argv, g, &f, keys);
    }
    for (size_t i = 0; f.holders && i < g->n; i++)
        free(f.holders[i]);
    free(f.holders);
    free(f.held);
    return rc;
}
