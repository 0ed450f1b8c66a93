/*  report.c: what p2pkv lookup and get say of each key (a word, or JSON
    with --json), and get's files DIR/KEY of the blocks that landed whole;
    for a server (remote.c) and for holders found by key (holders.c).
*/
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  A key's word in the report: fetched, corrupt (it landed and failed its
//  checksum: not written, never shown as fetched), failed or missing; a
//  lookup's hit or miss.
static const char *
s_key_word(const p2pkv_key_result_t *r, bool get)
{
    if (!get)
        return r->status == P2PKV_KEY_LANDED ? "hit" : "miss";
    switch (r->status) {
        case P2PKV_KEY_LANDED:  return "fetched";
        case P2PKV_KEY_CORRUPT: return "corrupt";
        case P2PKV_KEY_FAILED:  return "failed";
        default:                return "missing";
    }
}

void
cli_key_line(const char *key, const char *what, const char *why, const char *from,
             bool verbose, void *json)
{
    if (json) {
        json_t *one = json_pack("{s:s, s:s}", "key", key, "status", what);
        if (one && why)
            json_object_set_new(one, "reason", json_string(why));
        if (one && from)
            json_object_set_new(one, "from", json_string(from));
        json_array_append_new(json, one);
    }
    else if (verbose && from)
        printf("%s %s%s%s from %s\n", key, what, why ? " " : "", why ? why : "", from);
    else
        printf("%s %s%s%s\n", key, what, why ? " " : "", why ? why : "");
}

int
cli_report(const cli_remote_opts_t *o, char *argv[], size_t n, const p2pkv_key_result_t *res,
           const uint8_t *pool, uint64_t block_len, bool get, double seconds,
           const char *provider, const char *const *from)
{
    size_t nhit = 0;
    for (size_t i = 0; i < n; i++)
        nhit += res[i].status == P2PKV_KEY_LANDED;
    json_t *out = json_array();
    int rc = nhit == n ? EXIT_SUCCESS : EXIT_SOME_INVALID;
    for (size_t i = 0; i < n; i++) {
        const char *hex = argv[o->first + (int) i];
        const char *what = s_key_word(&res[i], get);
        if (get && res[i].status == P2PKV_KEY_LANDED) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", o->outdir, hex);
            FILE *f = fopen(path, "wb");
            size_t w = f ? fwrite(pool + i * block_len, 1, block_len, f) : 0;
            if (!f || w != block_len || fclose(f) != 0) {
                fprintf(stderr, "p2pkv get: %s: %s\n", path, strerror(errno));
                rc = EXIT_ERROR;
            }
        }
        const char *source = from ? from[i] : NULL;
        //  why it missed, where its server said (the reasons capability)
        const char *why = res[i].status == P2PKV_KEY_MISSING
                          && res[i].reason != P2PKV_MISS_UNKNOWN
                          ? p2pkv_miss_reason_name(res[i].reason) : NULL;
        cli_key_line(hex, what, why, source, o->verbose, o->json ? out : NULL);
    }
    if (o->json) {
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text);
        free(text);
    }
    else if (get && nhit) {
        //  the report first, whole: standard output is buffered, and a
        //  summary written to the same file (2>&1) would cut a line
        fflush(stdout);
        fprintf(stderr, "p2pkv get: %zu of %zu blocks (%.1f MiB) in %.3f s, %.2f GB/s%s%s\n",
                nhit, n, nhit * (double) block_len / 1048576.0, seconds,
                seconds > 0 ? nhit * (double) block_len / seconds / 1e9 : 0.0,
                provider ? " over " : "", provider ? provider : "");
    }
    json_decref(out);
    return rc;
}
