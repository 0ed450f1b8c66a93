/*  p2pkv-bench: benchmarks, one suite per file of bin/bench/.

    main.c reads the command line, refuses impossible parameters before
    any process starts (naming the parameter), runs one suite, and at the
    end stops whatever is still running and checks that no shared-memory
    object of the run is left (procs.c).
*/
#include "bench.h"
#include "base/version.h"

#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char s_usage[] =
    "usage: p2pkv-bench SUITE [OPTION...]\n"
    "\n"
    "Suites (each prints a table; figures are median [min..max] over repetitions,\n"
    "ratios taken within one repetition):\n"
    "  codec     decode+validate of a 65,536-key fetch vs jansson's json_loadb\n"
    "            (codec [REPETITIONS] still works)\n"
    "  role      the server role in process: keys/s, memory per live request\n"
    "            (role [REQUESTS])\n"
    "  fabric    bare fi_writedata loop (per block, and merged like write_blocks\n"
    "            merges contiguous blocks) vs write_blocks over tcp on 127.0.0.1\n"
    "            (fabric [BLOCK_KIB [BATCH]])\n"
    "  fetch     end to end through a real p2pkv-server and consumer processes of\n"
    "            the client library: lookup + fetch until landed; GB/s, fetches/s,\n"
    "            lookup and fetch latency percentiles, CPU seconds per GB, beside\n"
    "            the raw fi_writedata GB/s of the same block size and bare TCP\n"
    "            sockets' GB/s, as many streams at once as consumers, in the same run\n"
    "  control   lookups/s and round-trip percentiles, hits and misses\n"
    "  sessions  idle sessions: server RSS, threads, descriptors and CPU per\n"
    "            session, and the same for one client holding sessions to N\n"
    "            servers\n"
    "  directory the cluster directory on a redis-server it starts: a server's\n"
    "            upkeep (key changes/s into Redis, as batches) and a locate of\n"
    "            1,024 keys (latency percentiles, round trips); a get by key of\n"
    "            32 x 64 KiB from two p2pkv-servers through it, with get and with\n"
    "            the two steps (--gets off): latency, messages per get\n"
    "  engine    an engine's put and reserve + write + commit of 64 KiB blocks to a\n"
    "            server taking block checksums and to one without\n"
    "            (--block-checksums off), in the same repetition\n"
    "  fair      a one-block consumer's fetch p50/p99 alone and beside greedy\n"
    "            ones (4 x 1,024 x 64 KiB rounds, threads of one process), with\n"
    "            the server's write scheduler and without it; the greedy GB/s\n"
    "            and the small one's queueing delay\n"
    "  rails     the same fetch (64 x 1 MiB, quick 32) over 1, 2 and 4 rails: veth\n"
    "            pairs between two network namespaces, each shaped with tc to\n"
    "            --rate; Mbit/s, the ratio to one rail, and the same fetch over\n"
    "            an unshaped pair (the CPU's ceiling).  Needs root (else exit\n"
    "            77); runs scripts/bench-rails (or $P2PKV_BENCH_RAILS), which\n"
    "            drives the servers and p2pkv get in the namespaces\n"
    "  disk      the disk tier (--spill-dir): a 32 x 64 KiB fetch, lookup\n"
    "            included, from the pool and with every block on disk, page\n"
    "            cache warm and dropped (posix_fadvise); a restart's time to ready\n"
    "            per GiB held beside the disk's own sequential read; one-key\n"
    "            lookup p50/p99 alone and under a steady spill load\n"
    "\n"
    "Options:\n"
    "  --quick              fewer points and repetitions (what make bench runs)\n"
    "  --json FILE          write {\"suite\",\"machine\",\"rows\"} to FILE\n"
    "  --plot FILE.svg      GB/s against block size, raw beside p2pkv (gnuplot;\n"
    "                       fabric and fetch)\n"
    "  --reps N             repetitions of each figure (1..64)\n"
    "  --block-sizes LIST   fabric, fetch: bytes, K/M suffixes (16K,64K,2M);\n"
    "                       rails: the fetch's block (first value; default 1M)\n"
    "  --batches LIST       fabric: blocks per batch (1..256)\n"
    "  --blocks LIST        fetch: blocks per fetch (1..65536); fair: the greedy\n"
    "                       consumers' (first value; default 1024, quick 256);\n"
    "                       rails: the fetch's (first value; default 64)\n"
    "  --consumers LIST     fetch, control: consumer processes (1..1024, and at\n"
    "                       most --max-sessions); fair: greedy consumers (first\n"
    "                       value, 1..16; default 4)\n"
    "  --threads            fetch, control: the consumers are threads of one\n"
    "                       process, each with a client of its own\n"
    "  --keys LIST          control: keys per lookup (1..65536); with several,\n"
    "                       each one's cost per key over 1,024's\n"
    "  --in-flight N        fetch, control: requests each consumer keeps going\n"
    "                       (1..8, default 2; 1: round trips with nothing queued\n"
    "                       ahead, as the bare ZeroMQ echo)\n"
    "  --answer-spin US     fetch, control, disk (its fetches'): the consumers'\n"
    "                       answer_spin (p2pkv.h),\n"
    "                       and the echo's: microseconds a consumer looks for an\n"
    "                       answer before it sleeps (0..1000000, 0: never;\n"
    "                       default: the library's, 200)\n"
    "  --sessions LIST      sessions: idle sessions on one server\n"
    "  --servers LIST       sessions: servers one client holds sessions to (1..64)\n"
    "  --max-sessions N     the servers' --max-sessions (fetch, control: 256;\n"
    "                       sessions: the largest --sessions + 16)\n"
    "  --seconds S          fetch, control: each timed phase (default 2, quick 0.5);\n"
    "                       disk: the lookups' phases (default 3, quick 1)\n"
    "  --idle S             sessions: idle CPU measured over S (default 10, quick 3)\n"
    "  --requests N         role: requests per repetition\n"
    "  --server PATH        the p2pkv-server to start (default: beside this\n"
    "                       program, or $P2PKV_SERVER)\n"
    "  --ports LO-HI        ports for the servers' --bind (default 28000-28999)\n"
    "  --providers LIST     fetch: the same fetch over each provider (mmap,shm,tcp),\n"
    "                       against one server offering them all, alternating\n"
    "                       within each repetition; each row's \"vs\" column is its\n"
    "                       GB/s over the last provider's, in the same repetition;\n"
    "                       a name that does not open here is refused first\n"
    "  --rails LIST         rails: rail counts (1..5; default 1,2,4)\n"
    "  --rate MBIT          rails: each rail's rate, Mbit/s each way (1..100000;\n"
    "                       default 150, so that 4 rails stay under the CPU)\n"
    "  --rates LIST         rails: unequal rails instead, rail I at the I-th\n"
    "                       rate (2..5 rates, Mbit/s, fastest first): the fetch\n"
    "                       over them all beside their sum, an even split's\n"
    "                       bound (count x slowest) and rail 1 alone\n"
    "  --lose-rail          rails: then, per count of 2 or more, one fetch whose\n"
    "                       last rail is set down a quarter of the way through:\n"
    "                       every block or a clean failure, and its time\n"
    "  --spill-dir DIR      disk: where its spill directories are made (default\n"
    "                       /var/tmp; not tmpfs, whose cold cache is no disk)\n"
    "  --one-trip           fetch: each consumer's request is one p2pkv_client_get\n"
    "                       (one round trip where the server offers get), one at a\n"
    "                       time; its lookup and fetch latencies are the whole request\n"
    "  --verify-cost        fetch: each load twice, with the end-to-end block check\n"
    "                       (\"+chk\", the default) and without (\"-chk\",\n"
    "                       no_verify), alternating within each repetition; the\n"
    "                       \"vs\" column is the checked load's GB/s over the\n"
    "                       unchecked one's\n"
    "  -h, --help, -V, --version\n"
    "\n"
    "With any of --block-sizes, --blocks, --consumers (fetch) or --keys,\n"
    "--consumers (control), the points are the product of the lists given\n"
    "(defaults for the rest); without, a sweep of each.  Every process the bench\n"
    "starts it stops, also on error or Ctrl-C; it leaves no /dev/shm/pkbench-*\n"
    "object behind.  Exit status: 0 done, 1 a run failed, 2 bad parameters\n"
    "(rails: 77 when it cannot run here: not root, no namespaces or tc).\n";

typedef enum { S_CODEC = 1, S_ROLE = 2, S_FABRIC = 4, S_FETCH = 8, S_CONTROL = 16,
               S_SESSIONS = 32, S_DIRECTORY = 64, S_ENGINE = 128, S_FAIR = 256,
               S_RAILS = 512, S_DISK = 1024, S_ALL = 2047 } s_suite_bit_t;

static const struct {
    const char *name;
    int bit;
    int (*run)(const pkb_opts_t *o);
} s_suites[] = {
    { "codec", S_CODEC, pkb_codec },       { "role", S_ROLE, pkb_role },
    { "fabric", S_FABRIC, pkb_fabric },    { "fetch", S_FETCH, pkb_fetch },
    { "control", S_CONTROL, pkb_control }, { "sessions", S_SESSIONS, pkb_sessions },
    { "directory", S_DIRECTORY, pkb_directory }, { "engine", S_ENGINE, pkb_engine },
    { "fair", S_FAIR, pkb_fair },          { "rails", S_RAILS, pkb_rails },
    { "disk", S_DISK, pkb_disk },
};

static int
s_bad(const char *suite, const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "p2pkv-bench%s%s: ", suite ? " " : "", suite ? suite : "");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see p2pkv-bench --help)\n");
    return 2;
}

//  A count or a size: digits with an optional K, M or G (binary) suffix.
static int
s_parse_u64(const char *s, bool size, uint64_t *out)
{
    char *end;
    if (!*s || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -EINVAL;
    int shift = 0;
    if (size && *end && strchr("kK", *end))
        shift = 10;
    else if (size && *end && strchr("mM", *end))
        shift = 20;
    else if (size && *end && strchr("gG", *end))
        shift = 30;
    if (shift)
        end++;
    if (*end || v > (UINT64_MAX >> shift))
        return -EINVAL;
    *out = (uint64_t) v << shift;
    return 0;
}

static int
s_parse_list(const char *suite, const char *opt, const char *arg, bool size, uint64_t max,
             pkb_list_t *l)
{
    char buf[512], lim[32];
    snprintf(buf, sizeof buf, "%s", arg);
    snprintf(lim, sizeof lim, "%llu", (unsigned long long) max);
    l->n = 0;
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (l->n == PKB_MAX_LIST)
            return s_bad(suite, "%s: more than 16 values", opt, NULL);
        if (s_parse_u64(t, size, &v))
            return s_bad(suite, size ? "%s: \"%s\" is not a size (bytes, or with K, M or G)"
                                     : "%s: \"%s\" is not a whole number", opt, t);
        if (v == 0)
            return s_bad(suite, size ? "%s: %s: a block size must be at least 1 byte"
                                     : "%s: %s: must be at least 1", opt, t);
        if (v > max) {
            char m[80];
            snprintf(m, sizeof m, "%%s: %%s is more than %s", lim);
            return s_bad(suite, m, opt, t);
        }
        l->v[l->n++] = v;
    }
    return l->n ? 0 : s_bad(suite, "%s: an empty list", opt, NULL);
}

//  Provider names, comma-separated, each once: what p2pkv-server's
//  --provider takes.
static int
s_parse_names(const char *suite, const char *opt, const char *arg, pkb_names_t *l)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", arg);
    l->n = 0;
    l->joined[0] = '\0';
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (l->n == PKB_MAX_PROVIDERS)
            return s_bad(suite, "%s: more than 8 providers%s", opt, "");
        if (strlen(t) >= sizeof l->v[0] || strspn(t, "abcdefghijklmnopqrstuvwxyz"
                                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.;-")
                                           != strlen(t))
            return s_bad(suite, "%s: \"%s\" is not a libfabric provider name", opt, t);
        for (size_t i = 0; i < l->n; i++)
            if (strcmp(l->v[i], t) == 0)
                return s_bad(suite, "%s: %s twice", opt, t);
        snprintf(l->v[l->n], sizeof l->v[0], "%s", t);
        size_t at = strlen(l->joined);
        snprintf(l->joined + at, sizeof l->joined - at, "%s%s", l->n++ ? "," : "", t);
    }
    return l->n ? 0 : s_bad(suite, "%s: an empty list%s", opt, "");
}

//  Each option, the suites it applies to, and where it goes.
typedef enum { O_FLAG, O_STR, O_LIST, O_SIZES, O_UINT, O_SECONDS, O_MICROS, O_PORTS,
               O_NAMES } s_kind_t;
typedef struct {
    const char *name;
    s_kind_t kind;
    int suites;
    size_t offset;
    uint64_t max;
} s_opt_t;

#define F(f) offsetof(pkb_opts_t, f)
static const s_opt_t s_opts[] = {
    { "--quick", O_FLAG, S_ALL, F(quick), 0 },
    { "--json", O_STR, S_ALL, F(json), 0 },
    { "--plot", O_STR, S_FABRIC | S_FETCH, F(plot), 0 },
    { "--reps", O_UINT, S_ALL, F(reps), PKB_MAX_REPS },
    { "--block-sizes", O_SIZES, S_FABRIC | S_FETCH | S_FAIR | S_RAILS, F(block_sizes), 1u << 30 },
    { "--batches", O_LIST, S_FABRIC, F(batches), 256 },
    { "--blocks", O_LIST, S_FETCH | S_FAIR | S_RAILS, F(blocks), 65536 },
    { "--consumers", O_LIST, S_FETCH | S_CONTROL | S_FAIR, F(consumers), 1024 },
    { "--threads", O_FLAG, S_FETCH | S_CONTROL, F(threads), 0 },
    { "--keys", O_LIST, S_CONTROL, F(keys), 65536 },
    { "--in-flight", O_UINT, S_FETCH | S_CONTROL, F(in_flight), PKB_MAX_IN_FLIGHT },
    { "--answer-spin", O_MICROS, S_FETCH | S_CONTROL | S_DISK, F(answer_spin), 1000000 },
    { "--sessions", O_LIST, S_SESSIONS, F(sessions), 65536 },
    { "--servers", O_LIST, S_SESSIONS, F(servers), 64 },
    { "--max-sessions", O_UINT, S_FETCH | S_CONTROL | S_SESSIONS, F(max_sessions),
      UINT64_C(1) << 31 },
    { "--seconds", O_SECONDS, S_FETCH | S_CONTROL | S_FAIR | S_DISK, F(seconds), 0 },
    { "--idle", O_SECONDS, S_SESSIONS, F(idle), 0 },
    { "--requests", O_UINT, S_ROLE, F(requests), UINT64_C(1) << 31 },
    { "--server", O_STR, S_FETCH | S_CONTROL | S_SESSIONS | S_FAIR | S_DIRECTORY | S_RAILS
      | S_DISK, F(server), 0 },
    { "--ports", O_PORTS, S_FETCH | S_CONTROL | S_SESSIONS | S_FAIR | S_DIRECTORY | S_DISK, 0,
      0 },
    { "--providers", O_NAMES, S_FETCH, F(providers), PKB_MAX_PROVIDERS },
    { "--verify-cost", O_FLAG, S_FETCH, F(verify_cost), 0 },
    { "--one-trip", O_FLAG, S_FETCH, F(one_trip), 0 },
    { "--rails", O_LIST, S_RAILS, F(rails), 5 },
    { "--rate", O_UINT, S_RAILS, F(rate), 100000 },
    { "--rates", O_LIST, S_RAILS, F(rates), 100000 },
    { "--lose-rail", O_FLAG, S_RAILS, F(lose_rail), 0 },
    { "--spill-dir", O_STR, S_DISK, F(spill_dir), 0 },
};
#define S_NOPTS (sizeof s_opts / sizeof s_opts[0])

static int
s_apply(pkb_opts_t *o, const s_opt_t *d, const char *arg)
{
    char *at = (char *) o + d->offset;
    uint64_t v;
    switch (d->kind) {
    case O_FLAG:
        *(bool *) at = true;
        return 0;
    case O_STR:
        *(const char **) at = arg;
        return 0;
    case O_LIST:
    case O_SIZES:
        return s_parse_list(o->suite, d->name, arg, d->kind == O_SIZES, d->max,
                            (pkb_list_t *) at);
    case O_UINT: {
        pkb_list_t l;
        if (s_parse_list(o->suite, d->name, arg, false, d->max, &l) || l.n != 1)
            return l.n > 1 ? s_bad(o->suite, "%s: one value, got \"%s\"", d->name, arg) : 2;
        v = l.v[0];
        if (d->offset == F(reps))
            o->reps = (int) v;
        else
            *(uint64_t *) at = v;
        return 0;
    }
    case O_SECONDS: {
        char *end;
        double s = strtod(arg, &end);
        if (*end || !(s >= 0.05 && s <= 3600))
            return s_bad(o->suite, "%s: \"%s\" is not a number of seconds in 0.05..3600",
                         d->name, arg);
        *(double *) at = s;
        return 0;
    }
    case O_MICROS:
        //  microseconds, 0 for none, into seconds as p2pkv_config_t's
        //  answer_spin (negative: none)
        if (s_parse_u64(arg, false, &v) || v > d->max)
            return s_bad(o->suite, "%s: \"%s\" is not a whole number of microseconds in "
                         "0..1000000", d->name, arg);
        *(double *) at = v ? (double) v / 1e6 : -1;
        return 0;
    case O_NAMES:
        return s_parse_names(o->suite, d->name, arg, (pkb_names_t *) at);
    case O_PORTS:
        if (sscanf(arg, "%d-%d", &o->port_lo, &o->port_hi) != 2 || o->port_lo < 1024
            || o->port_hi > 65535 || o->port_lo > o->port_hi)
            return s_bad(o->suite, "%s: \"%s\" is not a range LO-HI within 1024-65535",
                         d->name, arg);
        return 0;
    }
    return 2;
}

//  codec N, role N, fabric KIB [BATCH]: the positional forms of old
static int
s_positional(pkb_opts_t *o, const char *arg, int nth)
{
    int sbit = 0;
    for (size_t i = 0; i < sizeof s_suites / sizeof s_suites[0]; i++)
        if (strcmp(s_suites[i].name, o->suite) == 0)
            sbit = s_suites[i].bit;
    if (sbit == S_CODEC && nth == 0)
        return s_apply(o, &s_opts[3], arg);
    if (sbit == S_ROLE && nth == 0)
        return s_apply(o, &s_opts[14], arg);
    if (sbit == S_FABRIC && nth < 2) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s%s", arg, nth == 0 ? "K" : "");
        return s_apply(o, &s_opts[nth == 0 ? 4 : 5], buf);
    }
    return s_bad(o->suite, "unexpected argument \"%s\"%s", arg, "");
}

static int
s_parse(int argc, char **argv, pkb_opts_t *o, int *bit)
{
    for (size_t i = 0; i < sizeof s_suites / sizeof s_suites[0]; i++)
        if (strcmp(s_suites[i].name, argv[1]) == 0)
            *bit = s_suites[i].bit;
    if (!*bit)
        return s_bad(NULL, "unknown suite \"%s\": one of codec, role, fabric, fetch, "
                     "control, sessions, directory, engine, fair, rails, disk%s", argv[1], "");
    o->suite = argv[1];
    int npos = 0;
    for (int a = 2; a < argc; a++) {
        const s_opt_t *d = NULL;
        for (size_t i = 0; i < S_NOPTS; i++)
            if (strcmp(argv[a], s_opts[i].name) == 0)
                d = &s_opts[i];
        if (!d && argv[a][0] == '-' && argv[a][1])
            return s_bad(o->suite, "unknown option \"%s\"%s", argv[a], "");
        if (!d) {
            if (s_positional(o, argv[a], npos++))
                return 2;
            continue;
        }
        if (!(d->suites & *bit))
            return s_bad(o->suite, "%s does not apply to suite %s", d->name, o->suite);
        if (d->kind != O_FLAG && a + 1 >= argc)
            return s_bad(o->suite, "%s needs a value%s", d->name, "");
        if (s_apply(o, d, d->kind == O_FLAG ? NULL : argv[++a]))
            return 2;
    }
    return 0;
}

//  A file --json or --plot will write, checked before the run rather
//  than after it: its directory must let us write.
static int
s_writable(const pkb_opts_t *o, const char *opt, const char *path)
{
    if (!path)
        return 0;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir ? 1 : 0] = '\0';
    if (access(slash ? dir : ".", W_OK) != 0)
        return s_bad(o->suite, "%s: cannot write %s (no such directory, or not ours to "
                     "write)", opt, path);
    return 0;
}

//  The p2pkv-server beside this program, unless told otherwise.
static int
s_server_path(pkb_opts_t *o, char *buf, size_t size)
{
    if (!o->server && getenv("P2PKV_SERVER"))
        o->server = getenv("P2PKV_SERVER");
    if (!o->server) {
        ssize_t n = readlink("/proc/self/exe", buf, size - 16);
        if (n <= 0)
            return s_bad(o->suite, "--server: cannot find this program's directory%s%s", "", "");
        buf[n] = '\0';
        char *slash = strrchr(buf, '/');
        strcpy(slash ? slash + 1 : buf, "p2pkv-server");
        o->server = buf;
    }
    if (access(o->server, X_OK))
        return s_bad(o->suite, "--server: %s: %s", o->server, strerror(errno));
    return 0;
}

int
main(int argc, char *argv[])
{
    if (argc < 2) {
        fputs(s_usage, stderr);
        return 2;
    }
    //  help anywhere (p2pkv-bench fetch --help, as a user types it after the
    //  suite) is the one usage: the options are shared by the suites
    for (int a = 1; a < argc; a++)
        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
            fputs(s_usage, stdout);
            return 0;
        }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("p2pkv-bench %s\n", PK_VERSION);
        return 0;
    }
    if (sodium_init() < 0)
        return 1;
    pkb_opts_t o = { .port_lo = 28000, .port_hi = 28999 };
    int bit = 0;
    char path[PATH_MAX];
    if (s_parse(argc, argv, &o, &bit) || s_writable(&o, "--json", o.json)
        || s_writable(&o, "--plot", o.plot))
        return 2;
    if ((bit & (S_FETCH | S_CONTROL | S_SESSIONS | S_ENGINE | S_FAIR | S_DIRECTORY | S_RAILS
                | S_DISK))
        && s_server_path(&o, path, sizeof path))
        return 2;
    pkb_procs_init();
    int rc = 2;
    for (size_t i = 0; i < sizeof s_suites / sizeof s_suites[0]; i++)
        if (s_suites[i].bit == bit)
            rc = s_suites[i].run(&o);
    if (pkb_procs_cleanup() && rc == 0)
        rc = 1;
    return rc;
}
