/*  fuzz_decode.c: the decoder under libFuzzer, and the same file as a plain
    driver that replays a corpus (make check runs it on tests/fuzz/corpus).

    Beyond "no crash, no leak" it checks the codec's promise: anything that
    decodes encodes, and the encoding decodes to the same encoding again.
    And it checks the decoder against its reference: whatever the
    single-pass scanner accepts, the jansson walk accepts too, as the same
    message (the same encoding).  The plain driver also feeds the scanner
    mutants of every corpus file (bytes flipped, cut, doubled, escaped).
*/
#include "wire/protocol.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

//  The scanner accepts only what the reference accepts, as the same message.
static void
s_differential(const uint8_t *data, size_t size)
{
    char err[PK_ERRLEN] = "";
    pk_msg_t *fast = NULL, *ref = NULL;
    if (pk_msg_decode_scan(data, size, &fast) != 0)
        return;
    int rc = pk_msg_decode_reference(data, size, &ref, err);
    char *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    if (rc != 0 || fast->type != ref->type || fast->present != ref->present
        || pk_msg_encode(fast, &a, &alen, err) != 0 || pk_msg_encode(ref, &b, &blen, err) != 0
        || alen != blen || memcmp(a, b, alen) != 0) {
        fprintf(stderr, "scanner and reference disagree (%d: %s) on:\n%.*s\n", rc, err,
                (int) (size < 4096 ? size : 4096), (const char *) data);
        abort();
    }
    free(a);
    free(b);
    pk_msg_destroy(&fast);
    pk_msg_destroy(&ref);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_differential(data, size);
    char err[PK_ERRLEN];
    pk_msg_t *msg = NULL;
    if (pk_msg_decode(data, size, &msg, err) != 0)
        return 0;
    char *once = NULL, *twice = NULL;
    size_t once_len = 0, twice_len = 0;
    if (pk_msg_encode(msg, &once, &once_len, err) != 0) {
        fprintf(stderr, "decoded message does not encode: %s\n", err);
        abort();
    }
    pk_msg_t *again = NULL;
    if (pk_msg_decode(once, once_len, &again, err) != 0
        || pk_msg_encode(again, &twice, &twice_len, err) != 0
        || once_len != twice_len || memcmp(once, twice, once_len) != 0) {
        fprintf(stderr, "encoding is not stable: %s\n%s\n", err, once);
        abort();
    }
    free(once);
    free(twice);
    pk_msg_destroy(&again);
    pk_msg_destroy(&msg);
    return 0;
}

#ifdef PK_FUZZ_DRIVER
//  Mutants of one input: each byte replaced by a few telling ones, the
//  input cut at each byte, each byte doubled, each byte escaped as \uXXXX.
static void
s_mutants(const uint8_t *buf, size_t size)
{
    static const char swaps[] = " \"\\{}[],:0-1.eEtu\x00\x7f\xc3\xff";
    uint8_t *m = malloc(size + 8);
    if (!m)
        return;
    for (size_t i = 0; i < size; i++) {
        memcpy(m, buf, size);
        for (size_t k = 0; k < sizeof swaps - 1; k++) {
            m[i] = (uint8_t) swaps[k];
            LLVMFuzzerTestOneInput(m, size);
        }
        LLVMFuzzerTestOneInput(buf, i);
        memcpy(m, buf, i + 1);
        memcpy(m + i + 1, buf + i, size - i);
        LLVMFuzzerTestOneInput(m, size + 1);
        if (buf[i] >= 0x20 && buf[i] < 0x7f && i + 1 < size) {
            memcpy(m, buf, i);
            snprintf((char *) m + i, 7, "\\u%04x", buf[i]);
            memcpy(m + i + 6, buf + i + 1, size - i - 1);
            LLVMFuzzerTestOneInput(m, size + 5);
        }
    }
    free(m);
}

static int
s_replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    uint8_t *buf = malloc(size > 0 ? (size_t) size : 1);
    size_t got = buf ? fread(buf, 1, (size_t) size, f) : 0;
    fclose(f);
    if (!buf || got != (size_t) size) {
        free(buf);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, got);
    s_mutants(buf, got);
    //  The seed corpus must be valid: a corpus of rejects exercises nothing.
    //  Its frames are the canonical ones, which the scanner must take
    //  itself (the reference is for what peers get wrong).
    char err[PK_ERRLEN] = "not accepted by the single-pass scanner";
    pk_msg_t *msg = NULL;
    int rc = pk_msg_decode_scan(buf, got, &msg);
    if (rc)
        pk_msg_decode_reference(buf, got, &msg, err);
    pk_msg_destroy(&msg);
    free(buf);
    if (rc && strstr(path, "/corpus/")) {
        fprintf(stderr, "%s: seed example does not decode: %s\n", path, err);
        return -1;
    }
    return 0;
}

int
main(int argc, char *argv[])
{
    char dflt[4096];
    const char *dir = argc > 1 ? argv[1] : NULL;
    if (!dir) {
        const char *top = getenv("top_srcdir");
        snprintf(dflt, sizeof dflt, "%s/tests/fuzz/corpus", top ? top : ".");
        dir = dflt;
    }
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return 1;
    }
    int files = 0, bad = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        files++;
        if (s_replay_file(path))
            bad++;
    }
    closedir(d);
    printf("fuzz_decode: replayed %d inputs from %s, %d bad\n", files, dir, bad);
    return files == 0 || bad ? 1 : 0;
}
#endif
