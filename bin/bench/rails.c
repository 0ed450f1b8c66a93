/*  rails.c: the same fetch over 1, 2 and 4 rails (issue 38, point 5),
    each rail a veth pair between two network namespaces shaped with tc.

    The namespaces, veths, qdiscs, servers and p2pkv gets are shell work,
    and tests/e2e/rails_netns.sh needs the same, so both source one
    harness, scripts/railnet.sh; this suite checks its options here (as
    every suite does, before anything starts), then executes
    scripts/bench-rails, which builds the hosts, runs the fetches, prints
    the table and removes everything on every exit path.  Re-executing
    this binary under `ip netns exec` would have needed the same setup
    and cleanup written again in C, for nothing the script cannot time:
    each fetch is seconds long at the shaped rates.

    Which script: $P2PKV_BENCH_RAILS when set; the source tree's when this
    program is the build tree's (make bench, tests); else the installed
    one in pkglibexecdir.
*/
#include "bench.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PKB_RAILS_SRC
#  define PKB_RAILS_SRC "scripts/bench-rails"
#endif
#ifndef PKB_RAILS_BUILD
#  define PKB_RAILS_BUILD "bin/p2pkv-bench"
#endif
#ifndef PKB_RAILS_INSTALLED
#  define PKB_RAILS_INSTALLED "/usr/local/libexec/p2pkv/bench-rails"
#endif

//  The script to run: see the head of this file.
static const char *
s_script(void)
{
    const char *env = getenv("P2PKV_BENCH_RAILS");
    if (env && *env)
        return env;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        if (strcmp(self, PKB_RAILS_BUILD) == 0)
            return PKB_RAILS_SRC;
    }
    return PKB_RAILS_INSTALLED;
}

static int
s_setenv_u64(const char *name, uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long) v);
    return setenv(name, buf, 1) ? -errno : 0;
}

int
pkb_rails(const pkb_opts_t *o)
{
    int reps = o->reps ? o->reps : o->quick ? 3 : 5;
    uint64_t blocks = o->blocks.n ? o->blocks.v[0] : o->quick ? 32 : 64;
    uint64_t block_len = o->block_sizes.n ? o->block_sizes.v[0] : 1u << 20;
    uint64_t rate = o->rate ? o->rate : PKB_RAILS_RATE;
    //  a pool per rail count and the reference's (/dev/shm), the
    //  consumer's pool, and the blocks' files in /tmp twice (published,
    //  fetched): refused before anything starts, as every suite does
    size_t counts = o->rails.n ? o->rails.n : 3;
    char what[160];
    snprintf(what, sizeof what, "--block-sizes %lluK x --blocks %llu (%zu servers' pools, "
             "the consumer's, the blocks' files twice)", (unsigned long long) (block_len >> 10),
             (unsigned long long) blocks, counts + 1);
    if (pkb_check_memory("rails", what, (double) (counts + 4) * (double) blocks
                                        * (double) block_len))
        return 2;
    //  what the script cannot do without root: said first, as a skip
    if (geteuid() != 0) {
        fprintf(stderr, "p2pkv-bench rails: needs root (network namespaces, veth pairs and "
                "tc qdiscs); not run\n");
        return 77;
    }
    const char *script = s_script();
    if (access(script, R_OK)) {
        fprintf(stderr, "p2pkv-bench rails: %s: %s (set P2PKV_BENCH_RAILS to "
                "scripts/bench-rails)\n", script, strerror(errno));
        return 1;
    }
    char bin[PATH_MAX];
    snprintf(bin, sizeof bin, "%s", o->server);
    char *slash = strrchr(bin, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(bin, sizeof bin, ".");
    char list[PKB_MAX_LIST * 4] = "", rates[PKB_MAX_LIST * 8] = "";
    for (size_t i = 0; i < o->rails.n; i++) {
        size_t at = strlen(list);
        snprintf(list + at, sizeof list - at, "%s%llu", i ? "," : "",
                 (unsigned long long) o->rails.v[i]);
    }
    //  unequal rails: rail 1 alone and all of them, each at its rate
    for (size_t i = 0; i < o->rates.n; i++) {
        size_t at = strlen(rates);
        snprintf(rates + at, sizeof rates - at, "%s%llu", i ? "," : "",
                 (unsigned long long) o->rates.v[i]);
    }
    if (o->rates.n) {
        if (o->rails.n || o->rate) {
            fprintf(stderr, "p2pkv-bench rails: --rates sets the rails and their rates: "
                    "not with --rails or --rate\n");
            return 2;
        }
        if (o->rates.n < 2 || o->rates.n > 5) {
            fprintf(stderr, "p2pkv-bench rails: --rates: %zu rates, want 2 to 5 (one per "
                    "rail)\n", o->rates.n);
            return 2;
        }
        snprintf(list, sizeof list, "1,%zu", o->rates.n);
        rate = o->rates.v[0];
    }
    if (setenv("P2PKV_BIN", bin, 1) || setenv("RAILS", *list ? list : "1,2,4", 1)
        || s_setenv_u64("REPS", (uint64_t) reps) || s_setenv_u64("BLOCKS", blocks)
        || s_setenv_u64("BLOCK_LEN", block_len) || s_setenv_u64("RAILNET_RATE", rate)
        || (o->rates.n ? setenv("RAILNET_RATES", rates, 1) : unsetenv("RAILNET_RATES"))
        || setenv("P2PKV_LIBFABRIC", pkb_fabric_version(), 1)
        || setenv("LOSE", o->lose_rail ? "1" : "0", 1)
        || (o->json && setenv("JSON", o->json, 1))) {
        perror("p2pkv-bench rails: setenv");
        return 1;
    }
    fflush(NULL);
    execl("/bin/sh", "sh", script, (char *) NULL);
    fprintf(stderr, "p2pkv-bench rails: cannot run /bin/sh %s: %s\n", script, strerror(errno));
    return 1;
}
