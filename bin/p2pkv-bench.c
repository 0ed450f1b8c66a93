/*  p2pkv-bench: benchmarks, one subcommand per component.

    Each reports ratios measured within one run (the two sides interleaved,
    medians of several repetitions), because absolute times from different
    runs on a shared 2-core machine are not comparable.

      codec   decode+validate of a 65,536-key fetch vs jansson's json_loadb
*/
#include "protocol.h"
#include "version.h"

#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double
s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int
s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static double
s_median(double *v, int n)
{
    qsort(v, (size_t) n, sizeof *v, s_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

//  A fetch of n distinct random 32-byte keys (64 hex chars) and a shuffled
//  permutation of block indexes, as a consumer would send it.
static char *
s_make_fetch(size_t n, size_t *len_p)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_FETCH);
    pk_key_t *keys = malloc(n * sizeof *keys);
    uint8_t *bytes = malloc(n * 32);
    uint32_t *idx = malloc(n * sizeof *idx);
    randombytes_buf(bytes, n * 32);
    for (size_t i = 0; i < n; i++) {
        keys[i] = pk_key_make(bytes + 32 * i, 32);
        idx[i] = (uint32_t) i;
    }
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = randombytes_uniform((uint32_t) i + 1);
        uint32_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    uint8_t se[PK_EPOCH_LEN], te[PK_EPOCH_LEN];
    randombytes_buf(se, sizeof se);
    randombytes_buf(te, sizeof te);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, "bench-request");
    pk_msg_set_keys(m, keys, n);
    pk_msg_set_block_indexes(m, idx, n);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, 1);
    pk_msg_set_epochs(m, se, te);
    char *text = NULL;
    char err[PK_ERRLEN];
    if (pk_msg_encode(m, &text, len_p, err) != 0) {
        fprintf(stderr, "p2pkv-bench: cannot encode the fetch: %s\n", err);
        exit(2);
    }
    pk_msg_destroy(&m);
    free(keys);
    free(bytes);
    free(idx);
    return text;
}

static int
s_bench_codec(int reps)
{
    size_t len;
    char *text = s_make_fetch(PK_MAX_LIST, &len);
    double *tj = calloc((size_t) reps, sizeof *tj);
    double *tp = calloc((size_t) reps, sizeof *tp);
    char err[PK_ERRLEN];
    for (int r = -1; r < reps; r++) {       //  r = -1 warms up both paths
        double t0 = s_now();
        json_error_t jerr;
        json_t *root = json_loadb(text, len, 0, &jerr);
        double t1 = s_now();
        json_decref(root);
        double t2 = s_now();
        pk_msg_t *msg = NULL;
        if (pk_msg_decode(text, len, &msg, err) != 0 || !root) {
            fprintf(stderr, "p2pkv-bench: decode failed: %s\n", err);
            return 2;
        }
        double t3 = s_now();
        pk_msg_destroy(&msg);
        if (r >= 0) {
            tj[r] = t1 - t0;
            tp[r] = t3 - t2;
        }
    }
    double j = s_median(tj, reps), p = s_median(tp, reps);
    printf("codec: fetch of %d keys (64 hex chars each), %zu bytes, median of %d runs\n",
           PK_MAX_LIST, len, reps);
    printf("  json_loadb alone            %8.2f ms\n", j * 1e3);
    printf("  pk_msg_decode (parse+check) %8.2f ms\n", p * 1e3);
    printf("  ratio decode/json_loadb     %8.2f  (target <= 1.50)\n", p / j);
    free(tj);
    free(tp);
    free(text);
    return 0;
}

int
main(int argc, char *argv[])
{
    if (sodium_init() < 0)
        return 2;
    const char *what = argc > 1 ? argv[1] : "codec";
    int reps = argc > 2 ? atoi(argv[2]) : 15;
    if (strcmp(what, "--help") == 0 || strcmp(what, "-h") == 0) {
        printf("usage: p2pkv-bench [codec [REPETITIONS]]\n"
               "  codec  decode+validate of a 65,536-key fetch vs jansson's json_loadb\n");
        return 0;
    }
    if (strcmp(what, "--version") == 0) {
        printf("p2pkv-bench %s\n", PK_VERSION);
        return 0;
    }
    if (reps < 1) {
        fprintf(stderr, "p2pkv-bench: repetitions must be a positive integer\n");
        return 2;
    }
    if (strcmp(what, "codec") == 0)
        return s_bench_codec(reps);
    fprintf(stderr, "p2pkv-bench: unknown benchmark '%s' (see --help)\n", what);
    return 2;
}
