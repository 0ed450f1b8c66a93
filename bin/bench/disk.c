/*  disk.c: the disk tier under the pool (issue 39, point 5; --spill-dir,
    lib/tier/disk_tier.h), in one run:

      1. a fetch of 32 x 64 KiB, lookup included (p2pkv_client_get: the
         lookup answers hit_pending while the tier reads the blocks back,
         then hit), whose blocks are all on disk, beside the same fetch
         from the pool, the page cache warm and then cold: before each
         cold fetch the data file is fdatasync'ed and dropped from the
         page cache (posix_fadvise DONTNEED, which needs no root; the
         tier's I/O is buffered, so O_DIRECT would not be the tier's
         path).  A server of 32 pool blocks holds two sets of 32 keys,
         one in the pool and one on disk, and each fetch of the set on
         disk brings it up and pushes the other down (a block the tier
         holds already costs no write), so every disk fetch reads all 32;
         every block landed is byte-checked;
      2. what a restart costs: a server whose spill is filled (1 GiB,
         quick 256 MiB) is stopped and started again on the same directory;
         the time from its start to its ready line (it reads every slot's
         header first) and to a fetch of 32 spilled keys served, per GiB
         held, with the page cache warm and dropped; beside it the disk's
         own sequential read of that data file, dd's way (1 MiB reads,
         cache dropped), and with O_DIRECT where the file system has it;
      3. one-key lookups' p50 and p99 alone and under a steady spill
         load: an engine putting new blocks at a fixed rate into a full
         pool, so that every put is an eviction the tier writes out; and
         the same on a server without a disk tier, where the evictions go
         nowhere: what the load's CPU costs the lookups, told from what
         the tier adds.

    Ratios are taken within each repetition; the table gives median and
    [min..max] over the repetitions.  The spill directory is a new one
    under --spill-dir (default /var/tmp), whose file system is said
    (tmpfs has no disk under it: its "cold" is the warm one).
*/
#include "bench.h"
#include "base/clock.h"
#include "p2pkv_engine.h"
#include "tier/disk_tier.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define S_BLOCK (64u << 10)
#define S_KEYS 32
#define S_SET_A 0               //  keys 0..31
#define S_SET_B 32              //  keys 32..63
#define S_FILL_BASE (1u << 20)  //  the restart's spill: keys from here
#define S_LOAD_BASE (1u << 24)  //  the producer's keys
#define S_LOAD_RATE 512         //  blocks/s the producer puts (32 MiB/s)

typedef struct {
    p2pkv_client_t *client;
    int server;
    uint8_t key[S_KEYS][PKB_KEY_LEN];
    p2pkv_key_t keys[S_KEYS];
    uint32_t dest[S_KEYS];
    unsigned seq;
} s_cli_t;

static void
s_sleep(double s)
{
    struct timespec ts = { (time_t) s, (long) ((s - (double) (time_t) s) * 1e9) };
    nanosleep(&ts, NULL);
}

//  The spill's field of the server's engine stats, or -1.
static long long
s_spill(pkb_server_t *s, const char *field)
{
    json_t *a = pkb_server_ask(s, json_pack("{s:s}", "cmd", "stats"));
    json_t *v = json_object_get(json_object_get(a, "spill"), field);
    long long n = json_is_integer(v) ? (long long) json_integer_value(v) : -1;
    json_decref(a);
    return n;
}

//  Waits up to 60 s until the spill's field is at least want.
static int
s_wait_spill(pkb_server_t *s, const char *field, long long want)
{
    double until = pk_clock_monotonic() + 60;
    long long v;
    while ((v = s_spill(s, field)) < want && pk_clock_monotonic() < until)
        s_sleep(0.005);
    if (v >= want)
        return 0;
    fprintf(stderr, "p2pkv-bench disk: spill.%s is %lld after 60 s, waited for %lld\n", field,
            v, want);
    return -ETIMEDOUT;
}

static const char *
s_fs_name(long type)
{
    switch ((unsigned long) type) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlayfs";
    case 0x6969: return "nfs";
    case 0x2FC12FC1: return "zfs";
    case 0xF2F52010: return "f2fs";
    default: return "another file system";
    }
}

//  The data file's pages out of the page cache: its dirty ones written
//  first (DONTNEED drops clean pages only).
static int
s_drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fdatasync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

//  The data file's pages into the page cache: read whole, untimed.  The
//  warm fetch needs it: the tier keeps a promoted block's slot (a block
//  evicted again with the same bytes is no write), so a set read back
//  before the last drop is not in the cache again by itself.
static int
s_warm_cache(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    enum { CHUNK = 1 << 20 };
    void *buf = malloc(CHUNK);
    ssize_t r = buf ? 1 : -1;
    for (off_t at = 0; buf && (r = pread(fd, buf, CHUNK, at)) > 0; at += r)
        ;
    int rc = r < 0 ? -errno : 0;
    free(buf);
    close(fd);
    return rc;
}

//  dd's sequential read of the file's first len bytes, 1 MiB at a time:
//  GB/s, or NAN.  direct: O_DIRECT (NAN where the file system refuses
//  it); else buffered, the cache dropped first.
static double
s_dd_gbps(const char *path, uint64_t len, bool direct)
{
    if (!direct && s_drop_cache(path) != 0)
        return NAN;
    int fd = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd < 0)
        return NAN;
    enum { CHUNK = 1 << 20 };
    void *buf = aligned_alloc(4096, CHUNK);
    uint64_t got = 0;
    double t0 = pk_clock_monotonic();
    while (buf && got < len) {
        ssize_t r = pread(fd, buf, CHUNK, (off_t) got);
        if (r <= 0)
            break;
        got += (uint64_t) r;
    }
    double t = pk_clock_monotonic() - t0;
    free(buf);
    close(fd);
    return got >= len ? (double) len / t / 1e9 : NAN;
}

//  spin: the consumer's answer_spin (--answer-spin; 0: the default)
static int
s_cli_new(s_cli_t *c, pkb_server_t *s, double spin)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t pc = { .peer_id = "pkbench-disk-consumer", .fingerprint = "pkbench",
                          .provider = "tcp", .answer_spin = spin };
    c->client = p2pkv_client_new(&pc, NULL, S_KEYS, S_BLOCK, (p2pkv_callbacks_t) { 0 }, err);
    if (c->client)
        c->server = p2pkv_client_connect(c->client, s->endpoint, 30, err);
    if (!c->client || c->server < 0) {
        fprintf(stderr, "p2pkv-bench disk: cannot connect: %s\n", err);
        p2pkv_client_destroy(&c->client);
        return -ENOTCONN;
    }
    for (uint32_t i = 0; i < S_KEYS; i++) {
        c->dest[i] = i;
        c->keys[i] = (p2pkv_key_t) { c->key[i], PKB_KEY_LEN };
    }
    return 0;
}

//  n keys from base into the client's blocks 0..n-1, lookup included:
//  seconds, or NAN when a key missed or landed other bytes (said).
static double
s_fetch(s_cli_t *c, uint64_t base, size_t n, bool fetch)
{
    for (size_t i = 0; i < n; i++)
        pkb_key(base + i, c->key[i]);
    char kv[32], err[P2PKV_ERRLEN] = "";
    snprintf(kv, sizeof kv, "d%u", c->seq++);
    bool landed[S_KEYS] = { false };
    uint8_t *pool = p2pkv_client_pool(c->client);
    if (fetch)
        memset(pool, 0, n * S_BLOCK);
    double t0 = pk_clock_monotonic();
    int got = p2pkv_client_get(c->client, c->server, kv, c->keys, c->dest, n, fetch, 30, landed,
                               NULL, NULL, err);
    double t = pk_clock_monotonic() - t0;
    if (got != (int) n) {
        fprintf(stderr, "p2pkv-bench disk: %s of %zu keys from %llu: %d landed%s%s\n",
                fetch ? "fetch" : "lookup", n, (unsigned long long) base, got, *err ? ": " : "",
                err);
        return NAN;
    }
    for (size_t i = 0; fetch && i < n; i++)
        if (!pkb_check(base + i, pool + i * S_BLOCK, S_BLOCK)) {
            fprintf(stderr, "p2pkv-bench disk: key %llu landed other bytes\n",
                    (unsigned long long) (base + i));
            return NAN;
        }
    return t;
}

//  A new directory under the parent, and its data file's path.
static int
s_mkdir(const char *parent, char *dir, size_t dsize, char *file, size_t fsize)
{
    snprintf(dir, dsize, "%s/pkbench-disk-XXXXXX", parent);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "p2pkv-bench disk: --spill-dir %s: cannot make a directory there: %s\n",
                parent, strerror(errno));
        return -errno;
    }
    snprintf(file, fsize, "%s/%s", dir, PK_DISK_TIER_FILE);
    pkb_register_file(file);
    return 0;
}

//  The spill key beside the directory (it may not be inside it): the
//  bench's own, so a run makes nothing under the user's state directory.
static void
s_key_path(const char *dir, char *key, size_t size)
{
    snprintf(key, size, "%s.key", dir);
}

static void
s_rmdir(const char *dir, const char *file)
{
    char key[4200];
    s_key_path(dir, key, sizeof key);
    unlink(file);
    rmdir(dir);
    unlink(key);
}

static int
s_start(pkb_server_t *s, const pkb_opts_t *o, uint64_t pool, const char *dir, uint64_t size)
{
    char sz[32], key[4200];
    snprintf(sz, sizeof sz, "%llu", (unsigned long long) size);
    s_key_path(dir, key, sizeof key);
    //  one identity across restarts (pkb_server_start names each start)
    const char *extra[] = { "--spill-dir", dir, "--spill-size", sz, "--spill-key", key,
                            "--peer-id", "pkbench-disk", NULL };
    int rc = pkb_server_start(s, o, S_BLOCK, pool, 8, extra);
    if (rc)
        pkb_server_stop(s);
    return rc;
}

//  ---------------------------------------------------------------------------
//  1. from the pool, from disk warm and cold

typedef struct {
    double pool, warm, cold;    //  ms, the repetition's medians
    double reads_per_fetch;     //  spill reads per disk fetch (32: all on disk)
} s_fetch_rep_t;

static int
s_fetches(const pkb_opts_t *o, const char *parent, int reps, int per, s_fetch_rep_t *out)
{
    char dir[4096], file[4200];
    int rc = s_mkdir(parent, dir, sizeof dir, file, sizeof file);
    if (rc)
        return rc;
    pkb_server_t s;
    s_cli_t c = { 0 };
    rc = s_start(&s, o, S_KEYS, dir, 64ull << 20);
    if (rc)
        goto done;
    //  A then B: A's 32 blocks go to disk
    if ((rc = pkb_server_populate_from(&s, S_SET_A, S_KEYS)) == 0
        && (rc = pkb_server_populate_from(&s, S_SET_B, S_KEYS)) == 0)
        rc = s_wait_spill(&s, "writes", S_KEYS);
    if (rc == 0)
        rc = s_cli_new(&c, &s, o->answer_spin);
    uint64_t on_disk = S_SET_A;
    //  untimed: each set up once (their slots read, their pages cached)
    for (int i = 0; rc == 0 && i < 2; i++) {
        rc = isnan(s_fetch(&c, on_disk, S_KEYS, true)) ? -EIO : 0;
        on_disk = on_disk == S_SET_A ? S_SET_B : S_SET_A;
    }
    for (int r = 0; rc == 0 && r < reps; r++) {
        double pool[2 * PKB_MAX_REPS], warm[PKB_MAX_REPS], cold[PKB_MAX_REPS];
        long long reads0 = s_spill(&s, "reads");
        for (int f = 0; rc == 0 && f < per; f++) {
            for (int k = 0; rc == 0 && k < 2; k++) {
                if ((k == 1 ? s_drop_cache(file) : s_warm_cache(file)) != 0) {
                    fprintf(stderr, "p2pkv-bench disk: cannot %s %s %s the page cache: "
                            "%s\n", k ? "drop" : "read", file, k ? "from" : "into",
                            strerror(errno));
                    rc = -EIO;
                    break;
                }
                double t = s_fetch(&c, on_disk, S_KEYS, true);
                double p = s_fetch(&c, on_disk, S_KEYS, true);
                (k ? cold : warm)[f] = t * 1e3;
                pool[2 * f + k] = p * 1e3;
                rc = isnan(t) || isnan(p) ? -EIO : 0;
                on_disk = on_disk == S_SET_A ? S_SET_B : S_SET_A;
            }
        }
        if (rc)
            break;
        out[r].pool = pkb_median(pool, (size_t) per * 2);
        out[r].warm = pkb_median(warm, (size_t) per);
        out[r].cold = pkb_median(cold, (size_t) per);
        out[r].reads_per_fetch = (double) (s_spill(&s, "reads") - reads0) / (2.0 * per);
    }
    p2pkv_client_destroy(&c.client);
    pkb_server_stop(&s);
done:
    s_rmdir(dir, file);
    return rc;
}

//  ---------------------------------------------------------------------------
//  2. a restart, and the disk's own rate

typedef struct {
    double ready[2], served[2];     //  s from start: [0] cache warm, [1] dropped
    double empty;                   //  s from start to ready on a new spill of the size
    double gib;                     //  held at the restart
    double dd, dd_direct;           //  GB/s
} s_restart_rep_t;

static int
s_restarts(const pkb_opts_t *o, const char *parent, uint64_t size, int reps,
           s_restart_rep_t *out, long long *slots_p)
{
    char dir[4096], file[4200];
    int rc = s_mkdir(parent, dir, sizeof dir, file, sizeof file);
    if (rc)
        return rc;
    pkb_server_t s;
    s_cli_t c = { 0 };
    if ((rc = s_start(&s, o, S_KEYS, dir, size)) != 0)
        goto done;
    long long slots = s_spill(&s, "slots");
    *slots_p = slots;
    //  every slot written, at the pace the writer takes them (a staging
    //  queue over half full waits: its overflow would be dropped)
    uint64_t chunks = (uint64_t) slots / S_KEYS + 2;
    for (uint64_t k = 0; rc == 0 && k < chunks; k++) {
        rc = pkb_server_populate_from(&s, S_FILL_BASE + k * S_KEYS, S_KEYS);
        long long staged;
        while (rc == 0 && (staged = s_spill(&s, "staged")) > 128)
            s_sleep(0.002);
    }
    if (rc == 0)
        rc = s_wait_spill(&s, "blocks", slots);
    long long dropped = rc == 0 ? s_spill(&s, "dropped") : 0;
    if (dropped > 0)
        fprintf(stderr, "p2pkv-bench disk: %lld blocks dropped while filling the spill\n",
                dropped);
    pkb_server_stop(&s);        //  a clean stop: the pool's 32 blocks go out too
    uint64_t last = S_FILL_BASE + (chunks - 1) * S_KEYS;   //  the pool's at the stop
    char edir[4096] = "", efile[4200];
    if (rc == 0)
        rc = s_mkdir(parent, edir, sizeof edir, efile, sizeof efile);
    for (int r = 0; rc == 0 && r < reps; r++) {
        //  the reference: a start with a new spill (no header to read)
        unlink(efile);
        double t0 = pk_clock_monotonic();
        if ((rc = s_start(&s, o, S_KEYS, edir, size)) != 0)
            break;
        out[r].empty = pk_clock_monotonic() - t0;
        pkb_server_stop(&s);
        for (int k = 0; rc == 0 && k < 2; k++) {
            if (k == 1 && (rc = s_drop_cache(file)) != 0)
                break;
            t0 = pk_clock_monotonic();
            if ((rc = s_start(&s, o, S_KEYS, dir, size)) != 0)
                break;
            out[r].ready[k] = pk_clock_monotonic() - t0;
            long long held = s_spill(&s, "recovered");
            out[r].gib = (double) held * (double) pk_disk_tier_slot_len(S_BLOCK)
                         / (double) (1ull << 30);
            if (held != slots) {
                fprintf(stderr, "p2pkv-bench disk: the restart recovered %lld slots of %lld\n",
                        held, slots);
                rc = -EIO;
            }
            if (rc == 0 && (rc = s_cli_new(&c, &s, o->answer_spin)) == 0)
                rc = isnan(s_fetch(&c, last, S_KEYS, true)) ? -EIO : 0;
            out[r].served[k] = pk_clock_monotonic() - t0;
            p2pkv_client_destroy(&c.client);
            pkb_server_stop(&s);
        }
        if (rc == 0) {
            uint64_t len = (uint64_t) slots * pk_disk_tier_slot_len(S_BLOCK);
            out[r].dd = s_dd_gbps(file, len, false);
            out[r].dd_direct = s_dd_gbps(file, len, true);
        }
    }
    if (rc == 0 || *edir)
        s_rmdir(edir, efile);
done:
    s_rmdir(dir, file);
    return rc;
}

//  ---------------------------------------------------------------------------
//  3. lookups under a steady spill load

typedef struct {
    const char *local;
    atomic_bool stop;
    uint64_t first;             //  its first key (each repetition's are new)
    _Atomic uint64_t put;
    int rc;
    char err[P2PKV_ERRLEN];
} s_producer_t;

//  Puts new blocks at S_LOAD_RATE into a full pool: each one an
//  eviction the tier writes out.
static void *
s_produce(void *arg)
{
    s_producer_t *p = arg;
    p2pkv_engine_t *engine = p2pkv_engine_open(p->local, 10, NULL, NULL, p->err);
    uint8_t *block = malloc(S_BLOCK);
    if (!engine || !block) {
        p->rc = -ENOTCONN;
        goto done;
    }
    pkb_fill(S_LOAD_BASE, block, S_BLOCK);
    double t0 = pk_clock_monotonic();
    for (uint64_t n = 0; !atomic_load(&p->stop); ) {
        uint8_t key[PKB_KEY_LEN];
        uint64_t id = p->first + n;
        pkb_key(id, key);
        memcpy(block, &id, sizeof id);  //  bytes of its own
        p2pkv_key_t k = { key, PKB_KEY_LEN };
        if ((p->rc = p2pkv_engine_put(engine, &k, block, S_BLOCK, p->err)) < 0)
            break;
        atomic_store(&p->put, ++n);
        double due = t0 + (double) n / S_LOAD_RATE - pk_clock_monotonic();
        if (due > 0)
            s_sleep(due);
    }
done:
    free(block);
    p2pkv_engine_close(&engine);
    return NULL;
}

typedef struct {
    double p50[2], p99[2];      //  ms: [0] alone, [1] under the load
    double bare_p50[2], bare_p99[2];    //  the same on a server without a disk tier
    double writes_per_s, dropped_per_s, put_per_s;
    size_t samples;
} s_lookup_rep_t;

//  One-key lookups of a key in the pool for secs: p50 and p99 in ms.
static int
s_lookups(s_cli_t *c, double secs, double *p50, double *p99, size_t *samples)
{
    size_t cap = 1 << 16, n = 0;
    double *v = malloc(cap * sizeof *v);
    double until = pk_clock_monotonic() + secs;
    int rc = v ? 0 : -ENOMEM;
    while (rc == 0 && pk_clock_monotonic() < until && n < cap) {
        double t = s_fetch(c, S_SET_A, 1, false);
        rc = isnan(t) ? -EIO : 0;
        v[n++] = t * 1e3;
    }
    if (rc == 0) {
        *p50 = pkb_quantile(v, n, 0.5);
        *p99 = pkb_quantile(v, n, 0.99);
        *samples = n;
    }
    free(v);
    return rc;
}

//  The pool's evictions so far, or -1.
static long long
s_evictions(pkb_server_t *s)
{
    json_t *a = pkb_server_ask(s, json_pack("{s:s}", "cmd", "stats"));
    json_t *v = json_object_get(json_object_get(a, "pool"), "evictions");
    long long n = json_is_integer(v) ? (long long) json_integer_value(v) : -1;
    json_decref(a);
    return n;
}

//  One phase of lookups on server s, with the producer's load or
//  without: p50 and p99 into out's [load], and the load's rates.  A
//  client of its own (one left idle while the other server's phases run
//  would see its server silent for longer than its silence_timeout).
static int
s_phase(pkb_server_t *s, bool load, bool spill, double secs, uint64_t *next, double *p50,
        double *p99, s_lookup_rep_t *out)
{
    s_producer_t p = { .local = s->local, .first = *next };
    pthread_t th;
    s_cli_t cli = { 0 }, *c = &cli;
    int rc = s_cli_new(c, s, 0);
    if (rc)
        return rc;
    if (load) {
        //  the pool full (256 blocks), then every put evicting
        long long e = s_evictions(s);
        if ((rc = -pthread_create(&th, NULL, s_produce, &p)) != 0) {
            p2pkv_client_destroy(&c->client);
            return rc;
        }
        //  the key looked up kept young meanwhile (an idle key is the
        //  LRU's first to go)
        double until = pk_clock_monotonic() + 60;
        while (rc == 0 && s_evictions(s) < e + 64 && pk_clock_monotonic() < until)
            rc = isnan(s_fetch(c, S_SET_A, 1, false)) ? -EIO : 0;
    }
    long long w0 = spill && rc == 0 ? s_spill(s, "writes") : 0, d0 = spill ? s_spill(s, "dropped") : 0;
    double t0 = pk_clock_monotonic();
    uint64_t put0 = atomic_load(&p.put);
    if (rc == 0)
        rc = s_lookups(c, secs, p50, p99, &out->samples);
    double t = pk_clock_monotonic() - t0;
    if (load) {
        uint64_t put1 = atomic_load(&p.put);
        atomic_store(&p.stop, true);
        pthread_join(th, NULL);
        *next += atomic_load(&p.put);
        if (p.rc < 0) {
            fprintf(stderr, "p2pkv-bench disk: the producer's put: %s\n", p.err);
            rc = -EIO;
        }
        if (spill) {
            out->put_per_s = (double) (put1 - put0) / t;
            out->writes_per_s = (double) (s_spill(s, "writes") - w0) / t;
            out->dropped_per_s = (double) (s_spill(s, "dropped") - d0) / t;
        }
    }
    p2pkv_client_destroy(&c->client);
    return rc;
}

//  Two servers of 256 pool blocks, one with a disk tier and one without:
//  on each, lookups alone and under the same put load (on the one
//  without, the evictions go nowhere), so that what the tier adds is
//  told from what the load's CPU costs.
static int
s_loaded(const pkb_opts_t *o, const char *parent, int reps, double secs, s_lookup_rep_t *out)
{
    char dir[4096], file[4200];
    int rc = s_mkdir(parent, dir, sizeof dir, file, sizeof file);
    if (rc)
        return rc;
    pkb_server_t sv[2];
    bool up[2] = { false, false };
    if ((rc = s_start(&sv[0], o, 256, dir, 256ull << 20)) == 0)
        up[0] = true;
    if (rc == 0 && (rc = pkb_server_start(&sv[1], o, S_BLOCK, 256, 8, NULL)) == 0)
        up[1] = true;
    for (int k = 0; rc == 0 && k < 2; k++)
        rc = pkb_server_populate_from(&sv[k], S_SET_A, 1);
    uint64_t next = S_LOAD_BASE;
    for (int r = 0; rc == 0 && r < reps; r++) {
        //  the order alternates, so neither side always goes first
        for (int k = 0; rc == 0 && k < 4; k++) {
            int q = r % 2 ? 3 - k : k;
            bool spill = q < 2, load = q % 2 == 1;
            int i = spill ? 0 : 1;
            double *p50 = spill ? &out[r].p50[load] : &out[r].bare_p50[load];
            double *p99 = spill ? &out[r].p99[load] : &out[r].bare_p99[load];
            rc = s_phase(&sv[i], load, spill, secs, &next, p50, p99, &out[r]);
        }
    }
    for (int k = 0; k < 2; k++)
        if (up[k])
            pkb_server_stop(&sv[k]);
    s_rmdir(dir, file);
    return rc;
}

//  ---------------------------------------------------------------------------

static void
s_row(pkb_report_t *rep, const char *what, const char *unit, double *v, int reps,
      const char *fmt)
{
    pkb_fig_t g = pkb_fig(v, (size_t) reps);
    static const int w[] = { 44, 30 };
    const char *params[] = { what };
    char f[16];
    snprintf(f, sizeof f, "%s", fmt);
    const char *fmts[] = { f };
    pkb_table_row(params, w, 1, &g, fmts, w + 1, 1);
    json_t *row = pkb_report_row(rep);
    json_object_set_new(row, "what", json_string(what));
    json_object_set_new(row, "unit", json_string(unit));
    json_object_set_new(row, "value", pkb_fig_json(g));
}

int
pkb_disk(const pkb_opts_t *o)
{
    int reps = o->reps ? o->reps : o->quick ? 3 : 5;
    int per = o->quick ? 10 : 20;
    double secs = o->seconds ? o->seconds : o->quick ? 1 : 3;
    uint64_t fill = o->quick ? 256ull << 20 : 1ull << 30;
    const char *parent = o->spill_dir ? o->spill_dir : "/var/tmp";
    struct statfs sf;
    if (statfs(parent, &sf) != 0) {
        fprintf(stderr, "p2pkv-bench disk: --spill-dir %s: %s\n", parent, strerror(errno));
        return 2;
    }
    const char *fs = s_fs_name((long) sf.f_type);
    printf("disk: the disk tier on %s (%s); %d x %u KiB per fetch, lookup included "
           "(p2pkv_client_get); %d fetches of each kind per repetition, their median; "
           "warm = the data file read whole before each fetch; "
           "cold = the data file fdatasync'ed and dropped from the page cache "
           "(posix_fadvise DONTNEED) before each fetch; restart = a spill of %llu MiB; "
           "lookups = one key in the pool, on a server with a disk tier and one without, %.1f s each way, the load an engine putting "
           "%d x 64 KiB/s into a full pool; median and [min..max] of %d repetitions\n",
           parent, fs, S_KEYS, S_BLOCK >> 10, per, (unsigned long long) (fill >> 20), secs,
           S_LOAD_RATE, reps);
    pkb_report_t *rep = pkb_report_new(o, "disk");
    pkb_report_note(rep, "spill_fs", json_string(fs));
    pkb_report_note(rep, "warm", json_string("the data file read whole first"));
    pkb_report_note(rep, "cold", json_string("fdatasync + posix_fadvise(DONTNEED)"));
    static const char *const names[] = { "figure", "value" };
    static const int w[] = { 44, 30 };
    pkb_table_head(names, w, 2);

    s_fetch_rep_t fr[PKB_MAX_REPS];
    s_restart_rep_t rr[PKB_MAX_REPS] = { 0 };
    s_lookup_rep_t lr[PKB_MAX_REPS];
    long long slots = 0;
    int rc = s_fetches(o, parent, reps, per, fr);
    double v[8][PKB_MAX_REPS];
    if (rc == 0) {
        for (int r = 0; r < reps; r++) {
            v[0][r] = fr[r].pool;
            v[1][r] = fr[r].warm;
            v[2][r] = fr[r].cold;
            v[3][r] = fr[r].pool / fr[r].warm;
            v[4][r] = fr[r].pool / fr[r].cold;
            v[5][r] = fr[r].reads_per_fetch;
        }
        s_row(rep, "fetch from the pool", "ms", v[0], reps, "%.2f");
        s_row(rep, "fetch from disk, page cache warm", "ms", v[1], reps, "%.2f");
        s_row(rep, "fetch from disk, page cache dropped", "ms", v[2], reps, "%.2f");
        s_row(rep, "disk warm, x the pool's rate", "ratio", v[3], reps, "%.2fx");
        s_row(rep, "disk cold, x the pool's rate", "ratio", v[4], reps, "%.2fx");
        s_row(rep, "blocks read back per disk fetch", "blocks", v[5], reps, "%.1f");
        fflush(stdout);
        rc = s_restarts(o, parent, fill, reps, rr, &slots);
    }
    if (rc == 0) {
        bool direct = true;
        for (int r = 0; r < reps; r++) {
            v[0][r] = rr[r].ready[0];
            v[1][r] = rr[r].ready[1];
            v[2][r] = rr[r].served[1];
            v[3][r] = (rr[r].ready[0] - rr[r].empty) / rr[r].gib;
            v[4][r] = (rr[r].ready[1] - rr[r].empty) / rr[r].gib;
            v[7][r] = rr[r].empty;
            v[5][r] = rr[r].dd;
            v[6][r] = rr[r].dd_direct;
            direct &= !isnan(rr[r].dd_direct);
        }
        char what[64];
        snprintf(what, sizeof what, "restart to ready, %.2f GiB, cache warm", rr[0].gib);
        s_row(rep, what, "s", v[0], reps, "%.3f");
        snprintf(what, sizeof what, "restart to ready, %.2f GiB, cache dropped", rr[0].gib);
        s_row(rep, what, "s", v[1], reps, "%.3f");
        s_row(rep, "restart to a 32-key fetch served, dropped", "s", v[2], reps, "%.3f");
        s_row(rep, "start to ready, a new spill (reference)", "s", v[7], reps, "%.3f");
        s_row(rep, "restart's extra per GiB held, cache warm", "s/GiB", v[3], reps, "%.3f");
        s_row(rep, "restart's extra per GiB held, dropped", "s/GiB", v[4], reps, "%.3f");
        s_row(rep, "the disk: sequential read (dd), dropped", "GB/s", v[5], reps, "%.3f");
        if (direct)
            s_row(rep, "the disk: sequential read, O_DIRECT", "GB/s", v[6], reps, "%.3f");
        else
            printf(" %-44s %s does not take O_DIRECT\n", "the disk: O_DIRECT", fs);
        pkb_report_note(rep, "restart_slots", json_integer(slots));
        fflush(stdout);
        rc = s_loaded(o, parent, reps, secs, lr);
    }
    if (rc == 0) {
        for (int r = 0; r < reps; r++) {
            v[0][r] = lr[r].p50[0];
            v[1][r] = lr[r].p99[0];
            v[2][r] = lr[r].p50[1];
            v[3][r] = lr[r].p99[1];
            v[4][r] = lr[r].p99[1] / lr[r].p99[0];
            v[5][r] = lr[r].writes_per_s;
            v[6][r] = lr[r].dropped_per_s;
            v[7][r] = lr[r].put_per_s;
        }
        double b[4][PKB_MAX_REPS];
        for (int r = 0; r < reps; r++) {
            b[0][r] = lr[r].bare_p99[0];
            b[1][r] = lr[r].bare_p99[1];
            b[2][r] = lr[r].bare_p99[1] / lr[r].bare_p99[0];
        }
        s_row(rep, "one-key lookup p50, alone", "ms", v[0], reps, "%.3f");
        s_row(rep, "one-key lookup p99, alone", "ms", v[1], reps, "%.3f");
        s_row(rep, "one-key lookup p50, spill load", "ms", v[2], reps, "%.3f");
        s_row(rep, "one-key lookup p99, spill load", "ms", v[3], reps, "%.3f");
        s_row(rep, "p99 under the load / alone", "ratio", v[4], reps, "%.2fx");
        s_row(rep, "no disk tier: lookup p99, alone", "ms", b[0], reps, "%.3f");
        s_row(rep, "no disk tier: lookup p99, the same puts", "ms", b[1], reps, "%.3f");
        s_row(rep, "no disk tier: p99 under the puts / alone", "ratio", b[2], reps, "%.2fx");
        s_row(rep, "the load's puts", "blocks/s", v[7], reps, "%.0f");
        s_row(rep, "the load's blocks written out", "blocks/s", v[5], reps, "%.0f");
        s_row(rep, "the load's blocks dropped", "blocks/s", v[6], reps, "%.0f");
    }
    if (rc == 0)
        rc = pkb_report_finish(rep);
    pkb_report_destroy(&rep);
    return rc ? 1 : 0;
}
