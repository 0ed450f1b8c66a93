/*  driver.c: the plain corpus-replay main of the fuzz targets other than
    fuzz_decode (which has its own, with mutants).  Built with
    -DPK_FUZZ_CORPUS=\"NAME\" it replays every file of tests/fuzz/NAME
    (or of the directories and files given as arguments) through the
    target's LLVMFuzzerTestOneInput, once each, so make check runs every
    seed and every regression input without libFuzzer.  A failure is an
    abort() inside the target: the test then fails with its message.
*/
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

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
    size_t got = buf && size > 0 ? fread(buf, 1, (size_t) size, f) : 0;
    fclose(f);
    if (!buf || got != (size_t) (size > 0 ? size : 0)) {
        free(buf);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

//  Every regular file of dir (not recursive), or dir itself if a file.
static int
s_replay(const char *dir, int *files)
{
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) {
        (*files)++;
        return s_replay_file(dir) ? 1 : 0;
    }
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return 1;
    }
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        (*files)++;
        if (s_replay_file(path))
            bad++;
    }
    closedir(d);
    return bad;
}

int
main(int argc, char *argv[])
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    char dflt[4096];
    const char *top = getenv("top_srcdir");
    snprintf(dflt, sizeof dflt, "%s/tests/fuzz/%s", top ? top : ".", PK_FUZZ_CORPUS);
    int files = 0, bad = 0;
    if (argc < 2)
        bad += s_replay(dflt, &files);
    for (int i = 1; i < argc; i++)
        bad += s_replay(argv[i], &files);
    printf("fuzz_%s: replayed %d inputs, %d bad\n", PK_FUZZ_CORPUS, files, bad);
    return files == 0 || bad ? 1 : 0;
}
