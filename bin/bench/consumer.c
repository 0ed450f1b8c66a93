/*  consumer.c: the bench's blocks, and a consumer process of the public
    library (p2pkv.h) for fetch and control.

    A consumer is forked (the parent holds no czmq or libfabric state),
    connects, runs one untimed iteration and checks every block it
    fetched, says ready, and then runs one timed phase per 'g' on its
    command pipe until 'q' or EOF: lookup + fetch until landed + finish,
    again and again for --seconds.  Each phase's report (pkb_phase_t,
    then the lookup and fetch samples in seconds) goes up its result pipe.
*/
#include "bench.h"
#include "base/clock.h"
#include "p2pkv.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static uint64_t
s_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void
pkb_key(uint64_t i, uint8_t key[PKB_KEY_LEN])
{
    for (int w = 0; w < PKB_KEY_LEN / 8; w++) {
        uint64_t v = s_mix(i * 4 + (uint64_t) w);
        memcpy(key + 8 * w, &v, 8);
    }
}

void
pkb_fill(uint64_t i, uint8_t *block, uint64_t len)
{
    uint64_t seed = s_mix(i ^ 0x5eedull);
    for (uint64_t o = 0; o + 8 <= len; o += 8) {
        uint64_t v = seed ^ (o * 0x9e3779b97f4a7c15ull);
        memcpy(block + o, &v, 8);
    }
}

bool
pkb_check(uint64_t i, const uint8_t *block, uint64_t len)
{
    uint64_t seed = s_mix(i ^ 0x5eedull);
    for (uint64_t o = 0; o + 8 <= len; o += 8) {
        uint64_t v = seed ^ (o * 0x9e3779b97f4a7c15ull), got;
        memcpy(&got, block + o, 8);
        if (got != v)
            return false;
    }
    return true;
}

//  --------------------------------------------------------------------------

typedef struct {
    const pkb_consumer_cfg_t *cfg;
    p2pkv_client_t *client;
    int server;
    p2pkv_key_t *keys;
    uint8_t (*kbytes)[PKB_KEY_LEN];
    uint32_t *dest;
    //  the current iteration, set by the callbacks
    bool answered, ended;
    size_t hits;
    uint64_t round;
    p2pkv_status_t status;
    double t_answer, t_end;
    char reason[P2PKV_ERRLEN];
} s_cons_t;

static void
s_on_lookup(void *arg, int server, const char *kv, uint64_t round, const p2pkv_key_t *keys,
            const bool *hits, size_t n)
{
    s_cons_t *c = arg;
    c->t_answer = pk_clock_monotonic();
    c->answered = true;
    c->round = round;
    c->hits = 0;
    for (size_t i = 0; hits && i < n; i++)
        c->hits += hits[i];
}

static void
s_on_fetch(void *arg, int server, uint64_t id, p2pkv_status_t status, const char *reason)
{
    s_cons_t *c = arg;
    c->t_end = pk_clock_monotonic();
    c->ended = true;
    c->status = status;
    snprintf(c->reason, sizeof c->reason, "%s", reason ? reason : "");
}

static int
s_wait(s_cons_t *c, bool *flag, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    while (!*flag) {
        int rc = p2pkv_client_poll(c->client, 0.05);
        if (rc < 0)
            return rc;
        if (pk_clock_monotonic() > deadline)
            return -ETIMEDOUT;
    }
    return 0;
}

//  One lookup (+ fetch) + finish; the lookup's and the fetch's seconds.
static int
s_iteration(s_cons_t *c, uint64_t k, double *lk, double *ft, char *err, size_t size)
{
    char kv[64];
    snprintf(kv, sizeof kv, "c%d-%llu", c->cfg->id, (unsigned long long) k);
    c->answered = c->ended = false;
    size_t n = c->cfg->nkeys;
    double t0 = pk_clock_monotonic();
    int rc = p2pkv_client_lookup(c->client, c->server, kv, c->keys, n);
    if (rc == 0)
        rc = s_wait(c, &c->answered, 30);
    if (rc == 0 && c->hits != (c->cfg->miss ? 0 : n)) {
        snprintf(err, size, "lookup of %zu keys answered %zu hits", n, c->hits);
        return -EIO;
    }
    *lk = c->t_answer - t0;
    if (rc == 0 && c->cfg->fetch) {
        double t1 = pk_clock_monotonic();
        uint64_t id;
        rc = p2pkv_client_fetch(c->client, c->server, kv, c->keys, c->dest, n, c->round, 30,
                                &id);
        if (rc == 0)
            rc = s_wait(c, &c->ended, 60);
        if (rc == 0 && c->status != P2PKV_LANDED) {
            snprintf(err, size, "fetch ended %s: %.100s",
                     c->status == P2PKV_FAILED ? "failed" : "aborted", c->reason);
            rc = -EIO;
        }
        *ft = c->t_end - t1;
    }
    if (rc == 0)
        rc = p2pkv_client_finish(c->client, c->server, kv);
    if (rc && !*err)
        snprintf(err, size, "%s", strerror(-rc));
    return rc;
}

static int
s_setup(s_cons_t *c, char *err, size_t size)
{
    const pkb_consumer_cfg_t *cfg = c->cfg;
    size_t n = cfg->nkeys;
    c->keys = calloc(n, sizeof *c->keys);
    c->kbytes = calloc(n, sizeof *c->kbytes);
    c->dest = calloc(n, sizeof *c->dest);
    if (!c->keys || !c->kbytes || !c->dest)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        pkb_key(cfg->miss ? (1ull << 30) + i : i, c->kbytes[i]);
        c->keys[i] = (p2pkv_key_t) { c->kbytes[i], PKB_KEY_LEN };
        c->dest[i] = (uint32_t) i;
    }
    char id[64], e[P2PKV_ERRLEN] = "";
    snprintf(id, sizeof id, "pkbench-consumer-%d-%d", cfg->id, (int) getpid());
    p2pkv_config_t pc = { .peer_id = id, .fingerprint = "pkbench", .provider = "tcp" };
    p2pkv_callbacks_t cb = { .arg = c, .on_lookup = s_on_lookup, .on_fetch = s_on_fetch };
    c->client = p2pkv_client_new(&pc, NULL, n, cfg->block_len, cb, e);
    if (c->client)
        c->server = p2pkv_client_connect(c->client, cfg->endpoint, 30, e);
    if (!c->client || c->server < 0) {
        snprintf(err, size, "cannot connect: %s", e);
        return -ENOTCONN;
    }
    double lk, ft;
    int rc = s_iteration(c, 0, &lk, &ft, err, size);
    const uint8_t *pool = p2pkv_client_pool(c->client);
    for (size_t i = 0; rc == 0 && cfg->fetch && i < n; i++)
        if (!pkb_check(i, pool + i * cfg->block_len, cfg->block_len)) {
            snprintf(err, size, "block %zu landed with the wrong content", i);
            rc = -EIO;
        }
    return rc;
}

static double
s_cpu_self(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double) ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6
           + (double) ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int
s_write_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *) p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -EIO;
        done += (size_t) w;
    }
    return 0;
}

//  One timed phase, reported up the pipe.
static void
s_phase(s_cons_t *c, int res, uint64_t *k)
{
    size_t cap = 1024, nl = 0, nf = 0;
    double *lk = malloc(cap * sizeof *lk), *ft = malloc(cap * sizeof *ft);
    pkb_phase_t ph = { 0 };
    ph.cpu = s_cpu_self();
    ph.t0 = pk_clock_monotonic();
    while (ph.rc == 0 && (pk_clock_monotonic() - ph.t0 < c->cfg->seconds || nl < 3)) {
        if (nl == cap) {
            cap *= 2;
            lk = realloc(lk, cap * sizeof *lk);
            ft = realloc(ft, cap * sizeof *ft);
        }
        double l = 0, f = 0;
        ph.rc = s_iteration(c, ++*k, &l, &f, ph.err, sizeof ph.err);
        lk[nl++] = l;
        if (c->cfg->fetch)
            ft[nf++] = f;
    }
    ph.t1 = pk_clock_monotonic();
    ph.cpu = s_cpu_self() - ph.cpu;
    ph.iterations = nl;
    ph.blocks = c->cfg->fetch ? nl * c->cfg->nkeys : 0;
    ph.bytes = ph.blocks * c->cfg->block_len;
    ph.nlookup = (uint32_t) nl;
    ph.nfetch = (uint32_t) nf;
    if (s_write_all(res, &ph, sizeof ph) || s_write_all(res, lk, nl * sizeof *lk)
        || s_write_all(res, ft, nf * sizeof *ft))
        _exit(3);
    free(lk);
    free(ft);
}

static void __attribute__((noreturn))
s_consumer_main(const pkb_consumer_cfg_t *cfg, int cmd, int res)
{
    s_cons_t c = { .cfg = cfg };
    pkb_phase_t ready = { 0 };
    ready.rc = s_setup(&c, ready.err, sizeof ready.err);
    if (s_write_all(res, &ready, sizeof ready) || ready.rc)
        _exit(1);
    uint64_t k = 0;
    for (;;) {
        //  idle: keep the client serviced while waiting for a command
        struct pollfd pfd[2] = { { cmd, POLLIN, 0 },
                                 { p2pkv_client_fd(c.client), POLLIN, 0 } };
        poll(pfd, 2, 20);
        p2pkv_client_poll(c.client, 0);
        if (!(pfd[0].revents & (POLLIN | POLLHUP)))
            continue;
        char b = 'q';
        if (read(cmd, &b, 1) != 1 || b != 'g')
            break;
        s_phase(&c, res, &k);
    }
    p2pkv_client_destroy(&c.client);
    _exit(0);
}

int
pkb_consumer_start(pkb_consumer_t *c, const pkb_consumer_cfg_t *cfg)
{
    int cmd[2], res[2];
    if (pipe(cmd))
        return -errno;
    if (pipe(res)) {
        close(cmd[0]);
        close(cmd[1]);
        return -errno;
    }
    c->pid = pkb_fork();
    if (c->pid == 0) {
        close(cmd[1]);
        close(res[0]);
        s_consumer_main(cfg, cmd[0], res[1]);
    }
    close(cmd[0]);
    close(res[1]);
    c->cmd = cmd[1];
    c->res = res[0];
    return c->pid < 0 ? -errno : 0;
}

static int
s_read_all(int fd, void *p, size_t n, double timeout)
{
    for (size_t done = 0; done < n;) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        if (poll(&pfd, 1, (int) (timeout * 1000)) <= 0)
            return -ETIMEDOUT;
        ssize_t r = read(fd, (char *) p + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -EPIPE;
        done += (size_t) r;
    }
    return 0;
}

int
pkb_consumer_ready(pkb_consumer_t *c, char *err, size_t size)
{
    pkb_phase_t ph;
    int rc = s_read_all(c->res, &ph, sizeof ph, 120);
    if (rc)
        snprintf(err, size, "consumer %d ended before it was ready", (int) c->pid);
    else if (ph.rc)
        snprintf(err, size, "%s", ph.err);
    return rc ? rc : ph.rc;
}

int
pkb_consumer_go(pkb_consumer_t *c)
{
    return write(c->cmd, "g", 1) == 1 ? 0 : -EPIPE;
}

static int
s_append(int fd, uint32_t n, double **v, size_t *nv)
{
    double *g = realloc(*v, (*nv + n + 1) * sizeof *g);
    if (!g)
        return -ENOMEM;
    *v = g;
    int rc = s_read_all(fd, g + *nv, n * sizeof *g, 60);
    *nv += n;
    return rc;
}

int
pkb_consumer_result(pkb_consumer_t *c, pkb_phase_t *ph, double **lk, size_t *nlk,
                    double **ft, size_t *nft)
{
    int rc = s_read_all(c->res, ph, sizeof *ph, 300);
    if (rc == 0)
        rc = s_append(c->res, ph->nlookup, lk, nlk);
    if (rc == 0)
        rc = s_append(c->res, ph->nfetch, ft, nft);
    return rc ? rc : ph->rc;
}

void
pkb_consumer_stop(pkb_consumer_t *c)
{
    if (c->pid <= 0)
        return;
    if (write(c->cmd, "q", 1) != 1) {
        //  gone already
    }
    close(c->cmd);
    close(c->res);
    pkb_reap(c->pid, 10);
    c->pid = 0;
}
