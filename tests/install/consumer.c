/*  consumer.c: a program of someone else's, built by tests/install/install.sh
    against the installed library with nothing but
    `pkg-config --cflags --libs p2pkv`: the public headers and
    libp2pkv.so only, no internal header and no build-tree path.

        consumer ENDPOINT KEYFILE

    KEYFILE is what `p2pkv put` printed, one "KEY FILE" line per block
    (KEY the hex SHA-256 of FILE's bytes).  Gets every key from the server
    at ENDPOINT into a pool of the client's and compares each block with
    its file, byte for byte.  Exit 0 when all match, 1 on any mismatch or
    missing block, 2 on an error.
*/
#include <p2pkv.h>
#include <p2pkv_engine.h>       //  compiles beside p2pkv.h, from the install

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCKS 1024

//  The engine API's limit is the wire's: a key longer would be refused.
static uint8_t s_key_bytes[MAX_BLOCKS][P2PKV_ENGINE_MAX_KEY];
static char s_files[MAX_BLOCKS][4096];

static int
s_hex_decode(const char *hex, uint8_t *out, size_t max)
{
    size_t len = strlen(hex);
    if (len == 0 || len % 2 || len / 2 > max)
        return -EINVAL;
    for (size_t i = 0; i < len / 2; i++) {
        unsigned int byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1)
            return -EINVAL;
        out[i] = (uint8_t) byte;
    }
    return (int) (len / 2);
}

//  The file's bytes equal block (block_len bytes): 0, or -1 with why.
static int
s_same(const char *file, const uint8_t *block, uint64_t block_len)
{
    FILE *f = fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "consumer: %s: %s\n", file, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (uint64_t off = 0; off < block_len; off++) {
        int c = getc(f);
        if (c == EOF || (uint8_t) c != block[off]) {
            fprintf(stderr, "consumer: %s: byte %llu differs\n", file, (unsigned long long) off);
            rc = -1;
            break;
        }
    }
    if (rc == 0 && getc(f) != EOF) {
        fprintf(stderr, "consumer: %s is longer than a block\n", file);
        rc = -1;
    }
    fclose(f);
    return rc;
}

int
main(int argc, char *argv[])
{
    if (argc != 3) {
        fprintf(stderr, "usage: consumer ENDPOINT KEYFILE\n");
        return 2;
    }
    FILE *kf = fopen(argv[2], "r");
    if (!kf) {
        fprintf(stderr, "consumer: %s: %s\n", argv[2], strerror(errno));
        return 2;
    }
    p2pkv_key_t keys[MAX_BLOCKS];
    uint32_t dest[MAX_BLOCKS];
    size_t n = 0;
    char hex[2 * P2PKV_ENGINE_MAX_KEY + 1];
    while (n < MAX_BLOCKS && fscanf(kf, "%8192s %4095s", hex, s_files[n]) == 2) {
        int len = s_hex_decode(hex, s_key_bytes[n], sizeof s_key_bytes[n]);
        if (len < 0) {
            fprintf(stderr, "consumer: \"%s\" is not a key\n", hex);
            fclose(kf);
            return 2;
        }
        keys[n] = (p2pkv_key_t) { s_key_bytes[n], (size_t) len };
        dest[n] = (uint32_t) n;
        n++;
    }
    fclose(kf);
    if (n == 0) {
        fprintf(stderr, "consumer: no keys in %s\n", argv[2]);
        return 2;
    }

    char err[P2PKV_ERRLEN] = "";
    p2pkv_description_t d;
    if (p2pkv_describe(argv[1], 10, &d, err) != 0) {
        fprintf(stderr, "consumer: describe: %s\n", err);
        return 2;
    }
    p2pkv_config_t cfg = { .peer_id = "install-consumer", .fingerprint = d.fingerprint,
                           .hash_seed = d.hash_seed, .provider = "tcp", .node = "127.0.0.1",
                           .no_reconnect = true };
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, n, d.block_len,
                                               (p2pkv_callbacks_t) { 0 }, err);
    if (!client) {
        fprintf(stderr, "consumer: client: %s\n", err);
        return 2;
    }
    int rc = 2;
    bool landed[MAX_BLOCKS] = { false };
    int server = p2pkv_client_connect(client, argv[1], 10, err);
    if (server < 0) {
        fprintf(stderr, "consumer: connect: %s\n", err);
        goto done;
    }
    int got = p2pkv_client_get(client, server, "install", keys, dest, n, true, 30, landed,
                               NULL, NULL, err);
    if (got < 0) {
        fprintf(stderr, "consumer: get: %s\n", err);
        goto done;
    }
    rc = 0;
    const uint8_t *pool = p2pkv_client_pool(client);
    for (size_t i = 0; i < n; i++) {
        if (!landed[i]) {
            fprintf(stderr, "consumer: %s: not fetched\n", s_files[i]);
            rc = 1;
        }
        else if (s_same(s_files[i], pool + i * d.block_len, d.block_len) != 0)
            rc = 1;
    }
    if (rc == 0)
        printf("consumer: %zu blocks of %llu bytes, every byte verified\n", n,
               (unsigned long long) d.block_len);
done:
    p2pkv_client_destroy(&client);
    return rc;
}
