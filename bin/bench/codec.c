/*  codec.c: decode+validate of a 65,536-key fetch (pk_msg_decode)
    against jansson's json_loadb alone, on the same text, interleaved.  */
#include "bench.h"
#include "base/clock.h"
#include "base/key.h"
#include "wire/protocol.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

//  Seconds of json_loadb and of pk_msg_decode on the same text.
static int
s_once(const char *text, size_t len, double *tj, double *tp)
{
    char err[PK_ERRLEN];
    double t0 = pk_clock_monotonic();
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    double t1 = pk_clock_monotonic();
    json_decref(root);
    double t2 = pk_clock_monotonic();
    pk_msg_t *msg = NULL;
    if (pk_msg_decode(text, len, &msg, err) != 0 || !root) {
        fprintf(stderr, "p2pkv-bench: decode failed: %s\n", err);
        return -EIO;
    }
    double t3 = pk_clock_monotonic();
    pk_msg_destroy(&msg);
    *tj = t1 - t0;
    *tp = t3 - t2;
    return 0;
}

int
pkb_codec(const pkb_opts_t *o)
{
    int reps = o->reps ? o->reps : o->quick ? 5 : 15;
    size_t len;
    char *text = s_make_fetch(PK_MAX_LIST, &len);
    double tj[PKB_MAX_REPS], tp[PKB_MAX_REPS], ratio[PKB_MAX_REPS], w1, w2;
    if (s_once(text, len, &w1, &w2))        //  warms up both paths
        return 1;
    for (int r = 0; r < reps; r++) {
        if (s_once(text, len, &tj[r], &tp[r]))
            return 1;
        ratio[r] = tp[r] / tj[r];
        tj[r] *= 1e3;
        tp[r] *= 1e3;
    }
    pkb_fig_t j = pkb_fig(tj, (size_t) reps), p = pkb_fig(tp, (size_t) reps);
    pkb_fig_t q = pkb_fig(ratio, (size_t) reps);
    char a[64], b[64], c[64];
    printf("codec: fetch of %d keys (64 hex chars each), %zu bytes; median [min..max] of %d "
           "runs\n", PK_MAX_LIST, len, reps);
    printf("  %-28s %-26s %-26s %-20s\n", "message", "json_loadb ms", "pk_msg_decode ms",
           "decode/json_loadb");
    printf("  %-28s %-26s %-26s %-20s (target <= 1.50)\n", "fetch, 65536 keys",
           pkb_fig_str(j, "%.2f", a, sizeof a), pkb_fig_str(p, "%.2f", b, sizeof b),
           pkb_fig_str(q, "%.2f", c, sizeof c));
    pkb_report_t *rep = pkb_report_new(o, NULL);
    json_t *row = pkb_report_row(rep);
    json_object_set_new(row, "message", json_string("fetch"));
    json_object_set_new(row, "keys", json_integer(PK_MAX_LIST));
    json_object_set_new(row, "bytes", json_integer((json_int_t) len));
    json_object_set_new(row, "repetitions", json_integer(reps));
    json_object_set_new(row, "json_loadb_ms", pkb_fig_json(j));
    json_object_set_new(row, "decode_ms", pkb_fig_json(p));
    json_object_set_new(row, "ratio", pkb_fig_json(q));
    int rc = pkb_report_finish(rep);
    pkb_report_destroy(&rep);
    free(text);
    return rc ? 1 : 0;
}
