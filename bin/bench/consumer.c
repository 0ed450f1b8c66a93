/*  consumer.c: the bench's blocks, and a consumer process of the public
    library (p2pkv.h) for fetch and control.

    A consumer is forked (the parent holds no czmq or libfabric state),
    or is one of the threads of a forked process (--threads: what an
    engine with one client per worker thread does), each with a client of
    its own; it connects, runs one untimed iteration and checks every
    block it fetched, says ready, and then runs one timed phase per 'g' on
    its command pipe until 'q' or EOF: lookup + fetch until landed + finish,
    again and again for --seconds, --in-flight requests at once (2 unless told); with
    cancel, each fetch is cancelled as soon as it is made, and waited for
    until it ended ABORTED.  Each phase's report (pkb_phase_t,
    then the lookup and fetch samples in seconds) goes up its result pipe.
*/
#include "bench.h"
#include "base/clock.h"
#include "p2pkv.h"

#include <czmq.h>              //  streq

#include <errno.h>
#include <poll.h>
#include <pthread.h>
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

//  Requests in flight (cfg->in_flight slots; two by default, as an engine
//  schedules them): each moves on as its answers come (lookup, then
//  fetch, then finish and the next request), so one request's lookup and
//  fetch dispatch overlap the other's transfer and the control plane's
//  round trips are not in series with the data plane (one at a time, a
//  lookup was 22% of each 64 KiB x 256 iteration).  With one, a lookup's
//  round trip has no other request's messages ahead of it: what the bare
//  ZeroMQ echo is compared with.  Each slot has its own destination blocks.

typedef struct {
    char kv[64];
    bool asked, answered, fetching, ended;
    size_t hits;
    uint64_t round, fetch_id;
    p2pkv_status_t status;
    double t_ask, t_answer, t_fetch, t_end;     //  t_fetch: of the cancel, when cancelling
    char reason[P2PKV_ERRLEN];
} s_slot_t;

typedef struct {
    const pkb_consumer_cfg_t *cfg;
    p2pkv_client_t *client;
    int server;
    p2pkv_key_t *keys;
    uint8_t (*kbytes)[PKB_KEY_LEN];
    uint32_t *dest;                 //  in_flight * nkeys: slot s at s * nkeys
    p2pkv_key_result_t *results;    //  nkeys, for --one-trip
    s_slot_t slot[PKB_MAX_IN_FLIGHT];   //  the first cfg->in_flight are used
} s_cons_t;

static s_slot_t *
s_slot_by_kv(s_cons_t *c, const char *kv)
{
    for (int i = 0; i < c->cfg->in_flight; i++)
        if (c->slot[i].asked && streq(c->slot[i].kv, kv))
            return &c->slot[i];
    return NULL;
}

static void
s_on_lookup(void *arg, int server, const char *kv, uint64_t round, const p2pkv_key_t *keys,
            const bool *hits, size_t n)
{
    s_slot_t *sl = s_slot_by_kv(arg, kv);
    if (!sl)
        return;
    sl->t_answer = pk_clock_monotonic();
    sl->answered = true;
    sl->round = round;
    sl->hits = 0;
    for (size_t i = 0; hits && i < n; i++)
        sl->hits += hits[i];
}

static void
s_on_fetch(void *arg, int server, uint64_t id, p2pkv_status_t status, const char *reason)
{
    s_cons_t *c = arg;
    for (int i = 0; i < c->cfg->in_flight; i++) {
        s_slot_t *sl = &c->slot[i];
        if (sl->fetching && sl->fetch_id == id) {
            sl->t_end = pk_clock_monotonic();
            sl->ended = true;
            sl->status = status;
            snprintf(sl->reason, sizeof sl->reason, "%s", reason ? reason : "");
        }
    }
}

static int
s_ask(s_cons_t *c, s_slot_t *sl, uint64_t k)
{
    *sl = (s_slot_t) { .asked = true };
    snprintf(sl->kv, sizeof sl->kv, "c%d-%llu", c->cfg->id, (unsigned long long) k);
    sl->t_ask = pk_clock_monotonic();
    return p2pkv_client_lookup(c->client, c->server, sl->kv, c->keys, c->cfg->nkeys);
}

//  Moves a slot on once its event came: an answered lookup gets its fetch
//  (or ends, for control), a landed fetch ends.  An ended request is
//  finished and its seconds (lookup, fetch) go to lk and ft.  1 when the
//  request ended, 0 when it waits, or a negative error with err.
static int
s_step(s_cons_t *c, s_slot_t *sl, double *lk, double *ft, char *err, size_t size)
{
    size_t n = c->cfg->nkeys;
    int rc = 0;
    if (!sl->asked || !sl->answered || (sl->fetching && !sl->ended))
        return pk_clock_monotonic() - sl->t_ask > 60 ? -ETIMEDOUT : 0;
    if (!sl->fetching) {
        if (sl->hits != (c->cfg->miss ? 0 : n)) {
            snprintf(err, size, "lookup of %zu keys answered %zu hits", n, sl->hits);
            return -EIO;
        }
        if (c->cfg->fetch) {
            sl->t_fetch = pk_clock_monotonic();
            rc = p2pkv_client_fetch(c->client, c->server, sl->kv, c->keys,
                                    c->dest + (sl - c->slot) * n, n, sl->round, 30,
                                    &sl->fetch_id);
            sl->fetching = rc == 0;
            if (rc == 0 && c->cfg->cancel) {
                sl->t_fetch = pk_clock_monotonic();
                rc = p2pkv_client_cancel(c->client, sl->fetch_id);
            }
            if (rc == 0)
                return 0;
        }
    }
    else if (sl->status != (c->cfg->cancel ? P2PKV_ABORTED : P2PKV_LANDED)) {
        snprintf(err, size, "fetch ended %s: %.100s", sl->status == P2PKV_FAILED ? "failed"
                 : sl->status == P2PKV_LANDED ? "landed, cancelled" : "aborted", sl->reason);
        return -EIO;
    }
    else
        *ft = sl->t_end - sl->t_fetch;
    *lk = sl->t_answer - sl->t_ask;
    if (rc == 0)
        rc = p2pkv_client_finish(c->client, c->server, sl->kv);
    sl->asked = false;
    if (rc && !*err)
        snprintf(err, size, "%s", strerror(-rc));
    return rc < 0 ? rc : 1;
}

//  One request in slot sl from its lookup to its finish (untimed).
static int
s_request(s_cons_t *c, s_slot_t *sl, uint64_t k, char *err, size_t size)
{
    double lk, ft;
    int rc = s_ask(c, sl, k);
    while (rc == 0 && (rc = s_step(c, sl, &lk, &ft, err, size)) == 0)
        rc = p2pkv_client_poll(c->client, 0.05) < 0 ? -EIO : 0;
    return rc < 0 ? rc : 0;
}

static int
s_setup(s_cons_t *c, char *err, size_t size)
{
    const pkb_consumer_cfg_t *cfg = c->cfg;
    size_t n = cfg->nkeys;
    c->keys = calloc(n, sizeof *c->keys);
    c->kbytes = calloc(n, sizeof *c->kbytes);
    c->dest = calloc((size_t) cfg->in_flight * n, sizeof *c->dest);
    c->results = calloc(n, sizeof *c->results);
    if (!c->keys || !c->kbytes || !c->dest || !c->results)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        pkb_key(cfg->miss ? (1ull << 30) + i : i, c->kbytes[i]);
        c->keys[i] = (p2pkv_key_t) { c->kbytes[i], PKB_KEY_LEN };
    }
    for (size_t i = 0; i < (size_t) cfg->in_flight * n; i++)
        c->dest[i] = (uint32_t) i;
    char id[64], e[P2PKV_ERRLEN] = "";
    snprintf(id, sizeof id, "pkbench-consumer-%d-%d", cfg->id, (int) getpid());
    p2pkv_config_t pc = { .peer_id = id, .fingerprint = "pkbench",
                          .provider = cfg->provider ? cfg->provider : "tcp",
                          .curve_public = cfg->curve_public, .curve_secret = cfg->curve_secret,
                          .curve_server = cfg->curve_server, .answer_spin = cfg->answer_spin,
                          .no_verify = cfg->no_verify };
    p2pkv_callbacks_t cb = { .arg = c, .on_lookup = s_on_lookup, .on_fetch = s_on_fetch };
    c->client = p2pkv_client_new(&pc, NULL, (uint64_t) cfg->in_flight * n, cfg->block_len, cb, e);
    if (c->client)
        c->server = p2pkv_client_connect(c->client, cfg->endpoint, 30, e);
    if (!c->client || c->server < 0) {
        //  cut at the phase's room where long: its start names the cause
        if (snprintf(err, size, "cannot connect: %s", e) >= (int) size)
            err[size - 2] = '~';
        return -ENOTCONN;
    }
    //  the figure is the provider's only if the session runs over it
    char prov[64] = "";
    const char *want = pc.provider;
    if (p2pkv_client_server_provider(c->client, c->server, prov, sizeof prov) != 0
        || strncmp(prov, want, strlen(want)) != 0) {
        snprintf(err, size, "asked for provider %s, the session runs over %s", want, prov);
        return -EPROTO;
    }
    //  untimed: one request per slot, every block checked
    uint8_t *pool = p2pkv_client_pool(c->client);
    int rc = 0;
    for (int s = 0; rc == 0 && s < cfg->in_flight; s++) {
        memset(pool + (size_t) s * n * cfg->block_len, 0, n * cfg->block_len);
        rc = s_request(c, &c->slot[s], (uint64_t) s + 1 + (1ull << 40), err, size);
        for (size_t i = 0; rc == 0 && cfg->fetch && !cfg->cancel && i < n; i++)
            if (!pkb_check(i, pool + (s * n + i) * cfg->block_len, cfg->block_len)) {
                snprintf(err, size, "block %zu landed with the wrong content", i);
                rc = -EIO;
            }
    }
    return rc;
}

//  The CPU a phase reports: its process's.  Threads share one process,
//  so there only consumer 0 reports it (the others 0), and the load's sum
//  is the process's, the clients' ZeroMQ and libfabric threads included.
static double
s_cpu_self(const pkb_consumer_cfg_t *cfg)
{
    if (cfg->threads && cfg->id != 0)
        return 0;
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

//  --one-trip: one request, the whole of it in one call (a get where the
//  server offers it); 1 when it landed, else a negative errno with err.
static int
s_one_trip(s_cons_t *c, uint64_t k, double *took, char *err, size_t size)
{
    size_t n = c->cfg->nkeys;
    char kv[64], e[P2PKV_ERRLEN] = "";
    snprintf(kv, sizeof kv, "c%d-%llu", c->cfg->id, (unsigned long long) k);
    double t0 = pk_clock_monotonic();
    int got = p2pkv_client_get_results(c->client, c->server, kv, c->keys, c->dest, n, true, 30,
                                       c->results, NULL, NULL, e);
    *took = pk_clock_monotonic() - t0;
    if (got == (int) n)
        return 1;
    snprintf(err, size, "get of %zu keys: %d (%.100s)", n, got, e);
    return got < 0 ? got : -EIO;
}

//  One timed phase, reported up the pipe: 0, or -EIO when the pipe broke.
static int
s_phase(s_cons_t *c, int res, uint64_t *k)
{
    size_t cap = 1024, nl = 0, nf = 0;
    double *lk = malloc(cap * sizeof *lk), *ft = malloc(cap * sizeof *ft);
    pkb_phase_t ph = { 0 };
    ph.cpu = s_cpu_self(c->cfg);
    ph.t0 = pk_clock_monotonic();
    while (c->cfg->one_trip && ph.rc == 0
           && (pk_clock_monotonic() - ph.t0 < c->cfg->seconds || nl < 3)) {
        double took;
        int r = s_one_trip(c, ++*k, &took, ph.err, sizeof ph.err);
        if (r < 0) {
            ph.rc = r;
            break;
        }
        if (nl == cap) {
            cap *= 2;
            lk = realloc(lk, cap * sizeof *lk);
            ft = realloc(ft, cap * sizeof *ft);
        }
        lk[nl++] = took;
        ft[nf++] = took;
    }
    for (int i = 0; i < c->cfg->in_flight && ph.rc == 0 && !c->cfg->one_trip; i++)
        ph.rc = s_ask(c, &c->slot[i], ++*k);
    int busy = c->cfg->one_trip ? 0 : c->cfg->in_flight;
    while (ph.rc == 0 && busy) {
        if (p2pkv_client_poll(c->client, 0.05) < 0)
            ph.rc = -EIO;
        bool more = pk_clock_monotonic() - ph.t0 < c->cfg->seconds || nl < 3;
        for (int i = 0; i < c->cfg->in_flight && ph.rc == 0; i++) {
            double l = 0, f = 0;
            int r = s_step(c, &c->slot[i], &l, &f, ph.err, sizeof ph.err);
            if (r <= 0) {
                ph.rc = r;
                continue;
            }
            if (nl == cap) {
                cap *= 2;
                lk = realloc(lk, cap * sizeof *lk);
                ft = realloc(ft, cap * sizeof *ft);
            }
            lk[nl++] = l;
            if (c->cfg->fetch)
                ft[nf++] = f;
            //  the phase's last requests ask for no next one
            if (more)
                ph.rc = s_ask(c, &c->slot[i], ++*k);
            else
                busy--;
        }
    }
    ph.t1 = pk_clock_monotonic();
    ph.cpu = s_cpu_self(c->cfg) - ph.cpu;
    ph.iterations = nl;
    ph.blocks = c->cfg->fetch ? nl * c->cfg->nkeys : 0;
    ph.bytes = ph.blocks * c->cfg->block_len;
    ph.nlookup = (uint32_t) nl;
    ph.nfetch = (uint32_t) nf;
    int rc = s_write_all(res, &ph, sizeof ph) || s_write_all(res, lk, nl * sizeof *lk)
             || s_write_all(res, ft, nf * sizeof *ft) ? -EIO : 0;
    free(lk);
    free(ft);
    return rc;
}

//  A consumer's life: 0 after 'q' or EOF, 1 when it could not get ready,
//  3 when its result pipe broke.
static int
s_consumer_run(const pkb_consumer_cfg_t *cfg, int cmd, int res)
{
    s_cons_t c = { .cfg = cfg };
    pkb_phase_t ready = { 0 };
    ready.rc = s_setup(&c, ready.err, sizeof ready.err);
    int rc = s_write_all(res, &ready, sizeof ready) || ready.rc ? 1 : 0;
    uint64_t k = 0;
    while (rc == 0) {
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
        rc = s_phase(&c, res, &k) ? 3 : 0;
    }
    p2pkv_client_destroy(&c.client);
    free(c.keys);
    free(c.kbytes);
    free(c.dest);
    free(c.results);
    return rc;
}

static void __attribute__((noreturn))
s_consumer_main(const pkb_consumer_cfg_t *cfg, int cmd, int res)
{
    _exit(s_consumer_run(cfg, cmd, res));
}

//  A consumer's two pipes: p[0..1] its commands, p[2..3] its results.
static int
s_pipes(int p[4])
{
    if (pipe(p))
        return -errno;
    if (pipe(p + 2)) {
        int rc = -errno;
        close(p[0]);
        close(p[1]);
        return rc;
    }
    return 0;
}

int
pkb_consumer_start(pkb_consumer_t *c, const pkb_consumer_cfg_t *cfg)
{
    int p[4];
    int rc = s_pipes(p);
    if (rc)
        return rc;
    c->pid = pkb_fork();
    if (c->pid == 0) {
        close(p[1]);
        close(p[2]);
        s_consumer_main(cfg, p[0], p[3]);
    }
    close(p[0]);
    close(p[3]);
    c->cmd = p[1];
    c->res = p[2];
    c->reaps = true;
    return c->pid < 0 ? -errno : 0;
}

typedef struct {
    const pkb_consumer_cfg_t *cfg;
    int cmd, res, rc;
} s_thread_t;

static void *
s_thread_main(void *arg)
{
    s_thread_t *t = arg;
    t->rc = s_consumer_run(t->cfg, t->cmd, t->res);
    close(t->cmd);
    close(t->res);
    return NULL;
}

//  The forked process of --threads: a thread per consumer, then the worst
//  status of theirs (8 when a thread could not start).
static void __attribute__((noreturn))
s_threads_main(const pkb_consumer_cfg_t *cfgs, int (*p)[4], size_t n)
{
    s_thread_t *t = calloc(n, sizeof *t);
    pthread_t *tid = calloc(n, sizeof *tid);
    if (!t || !tid)
        _exit(8);
    size_t started = 0;
    for (; started < n; started++) {
        t[started] = (s_thread_t) { &cfgs[started], p[started][0], p[started][3], 0 };
        if (pthread_create(&tid[started], NULL, s_thread_main, &t[started]) != 0)
            break;
    }
    int worst = started < n ? 8 : 0;
    for (size_t i = started; i < n; i++) {      //  never started: EOF to the parent
        close(p[i][0]);
        close(p[i][3]);
    }
    for (size_t i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
        worst = t[i].rc > worst ? t[i].rc : worst;
    }
    _exit(worst);
}

int
pkb_consumer_start_threads(pkb_consumer_t *cs, const pkb_consumer_cfg_t *cfgs, size_t n)
{
    int (*p)[4] = calloc(n, sizeof *p);
    if (!p)
        return -ENOMEM;
    int rc = 0;
    size_t made = 0;
    for (; rc == 0 && made < n; made++)
        if ((rc = s_pipes(p[made])) != 0)
            break;
    pid_t pid = rc == 0 ? pkb_fork() : -1;
    if (pid == 0) {
        for (size_t i = 0; i < n; i++) {
            close(p[i][1]);
            close(p[i][2]);
        }
        s_threads_main(cfgs, p, n);
    }
    if (rc == 0 && pid < 0)
        rc = -errno;
    for (size_t i = 0; i < made; i++) {
        close(p[i][0]);
        close(p[i][3]);
        if (rc) {
            close(p[i][1]);
            close(p[i][2]);
            continue;
        }
        cs[i] = (pkb_consumer_t) { pid, i == 0, p[i][1], p[i][2] };
    }
    free(p);
    return rc;
}

int
pkb_consumer_ready(pkb_consumer_t *c, char *err, size_t size)
{
    pkb_phase_t ph;
    int rc = pkb_read_all(c->res, &ph, sizeof ph, 120);
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
    int rc = pkb_read_all(fd, g + *nv, n * sizeof *g, 60);
    *nv += n;
    return rc;
}

int
pkb_consumer_result(pkb_consumer_t *c, pkb_phase_t *ph, double **lk, size_t *nlk,
                    double **ft, size_t *nft)
{
    int rc = pkb_read_all(c->res, ph, sizeof *ph, 300);
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
    if (c->reaps)
        pkb_reap(c->pid, 10);
    c->pid = 0;
}
