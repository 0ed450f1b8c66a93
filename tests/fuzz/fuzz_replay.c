/*  fuzz_replay.c: p2pkv-replay's input (doc/replay.md, one JSON event per
    line) through the binary's own engine, bin/replay.c, the way
    tests/roles/replay.sh runs it (--mark).  Built as a libFuzzer target (make
    fuzz) and, with driver.c, as the plain driver make check runs on
    tests/fuzz/replay (the golden scenarios of tests/replay among them).

    What it asserts, beyond no crash and no leak (an input error included:
    the run frees everything it made): the run ends with 0 or 2, and it is
    deterministic, as replay.sh requires of the binary: a second run of
    the same input prints the same bytes, on both streams, with the same
    status.
*/
#include "replay.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    int rc;
    char *out, *err;
    size_t out_len, err_len;
} s_result_t;

static void
s_run(const uint8_t *data, size_t size, s_result_t *r)
{
    //  fmemopen refuses an empty buffer: /dev/null reads as one
    FILE *in = size ? fmemopen((void *) data, size, "r") : fopen("/dev/null", "r");
    FILE *out = open_memstream(&r->out, &r->out_len);
    FILE *err = open_memstream(&r->err, &r->err_len);
    if (!in || !out || !err) {
        fprintf(stderr, "fuzz_replay: no streams\n");
        abort();
    }
    r->rc = pk_replay_run(in, out, err, "peer", true);
    fclose(in);
    fclose(out);
    fclose(err);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_result_t a, b;
    s_run(data, size, &a);
    s_run(data, size, &b);
    if (a.rc != 0 && a.rc != 2) {
        fprintf(stderr, "fuzz_replay: exit status %d\n", a.rc);
        abort();
    }
    if (a.rc != b.rc || a.out_len != b.out_len || memcmp(a.out, b.out, a.out_len) != 0
        || a.err_len != b.err_len || memcmp(a.err, b.err, a.err_len) != 0) {
        fprintf(stderr, "fuzz_replay: two runs of one input differ\n");
        abort();
    }
    free(a.out);
    free(a.err);
    free(b.out);
    free(b.err);
    return 0;
}
