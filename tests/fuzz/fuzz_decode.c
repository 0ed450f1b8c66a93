/*  fuzz_decode.c: the decoder under libFuzzer, and the same file as a plain
    driver that replays a corpus (make check runs it on tests/fuzz/corpus).

    Beyond "no crash, no leak" it checks the codec's promise: anything that
    decodes encodes, and the encoding decodes to the same encoding again.
*/
#include "wire/protocol.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
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
    //  The seed corpus must be valid: a corpus of rejects exercises nothing.
    char err[PK_ERRLEN];
    pk_msg_t *msg = NULL;
    int rc = pk_msg_decode(buf, got, &msg, err);
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
