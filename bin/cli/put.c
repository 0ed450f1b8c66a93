/*  put.c: p2pkv put, each file (exactly one block long) published on the
    local server, keyed by the SHA-256 of its content, into a tenant
    namespace.
*/
#include "cli.h"
#include "base/key.h"

#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  One FILE of put: its block read into data and published under its
//  SHA-256 (hex into hex): 0, or -1 with the error said.
static int
s_put_file(p2pkv_engine_t *engine, const char *path, uint8_t *data, size_t block_len,
           char *hex)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "p2pkv put: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t got = fread(data, 1, block_len + 1, f);
    fclose(f);
    if (got != block_len) {
        fprintf(stderr, "p2pkv put: %s: %s%zu bytes, blocks are %zu bytes\n", path,
                got > block_len ? "more than " : "", got > block_len ? block_len : got,
                block_len);
        return -1;
    }
    uint8_t hash[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(hash, data, got);
    pk_hex_encode(hash, sizeof hash, hex);
    p2pkv_key_t key = { hash, sizeof hash };
    char err[P2PKV_ERRLEN] = "";
    //  1: the pool has it already, which is what put is for
    if (p2pkv_engine_put(engine, &key, data, got, err) < 0) {
        fprintf(stderr, "p2pkv put: %s: %s\n", path, err);
        return -1;
    }
    return 0;
}

int
cli_cmd_put(int argc, char *argv[])
{
    cli_local_opts_t o = { 0 };
    char *dflt = NULL;
    if (cli_local_opts("put", "FILE", argc, argv, &o, &dflt)) {
        free(dflt);
        fprintf(stderr, "usage: p2pkv put [--local ENDPOINT] [--namespace NS] [--json] "
                "FILE...\n");
        return EXIT_ERROR;
    }
    p2pkv_engine_t *engine = cli_engine_open("put", o.local);
    char err[P2PKV_ERRLEN] = "";
    if (engine && p2pkv_engine_set_namespace(engine, o.ns, err) < 0) {
        fprintf(stderr, "p2pkv put: --namespace: %s\n", err);
        p2pkv_engine_close(&engine);
    }
    if (!engine) {
        free(dflt);
        return EXIT_ERROR;
    }
    size_t block_len = (size_t) p2pkv_engine_info(engine)->block_len;
    int rc = EXIT_SUCCESS;
    json_t *out = json_array();
    uint8_t *data = malloc(block_len + 1);
    for (int i = o.first; i < argc && rc == EXIT_SUCCESS; i++) {
        char hex[2 * crypto_hash_sha256_BYTES + 1];
        if (!data || s_put_file(engine, argv[i], data, block_len, hex) < 0)
            rc = EXIT_ERROR;
        else if (o.json)
            json_array_append_new(out, json_pack("{s:s, s:s}", "key", hex, "file", argv[i]));
        else
            printf("%s %s\n", hex, argv[i]);
    }
    if (o.json && rc == EXIT_SUCCESS) {
        char *text = json_dumps(out, JSON_COMPACT);
        puts(text);
        free(text);
    }
    json_decref(out);
    free(data);
    p2pkv_engine_close(&engine);
    free(dflt);
    return rc;
}
