/*  sessions.c: what idle sessions cost.

    Server side: one p2pkv-server (a pool of 64 blocks of 4 KiB), and one
    holder process of the client library opening one client per session
    to it, up to each N of --sessions in turn; at each N the server's
    VmRSS and Threads (/proc/PID/status) and its CPU while every session
    idles (utime+stime over --idle seconds, cut into windows for
    min/median/max); then every session closes and the server's RSS is
    compared with its value before they opened.  Client side: one client
    (progress thread on) in the holder connecting to N servers, one
    process each, measured the same way.

    The holder watches MemAvailable: below 10% of MemTotal (or 1 GiB) it
    opens no more sessions, and the row says how many it reached.
*/
#include "bench.h"
#include "base/clock.h"
#include "p2pkv.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define S_BLOCK 4096
#define S_WINDOWS 5

//  --------------------------------------------------------------------------
//  The holder: "new ENDPOINT COUNT", "add ENDPOINT", "close" on its
//  command pipe; "ok N" or "err TEXT" back, one line each.

typedef struct {
    p2pkv_client_t **clients;
    size_t n, cap;
    p2pkv_client_t *shared;     //  "add": one client, many servers
    int serial;
} s_holder_t;

static bool
s_memory_low(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long total = 0, kb;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            total = kb * 1024;
    if (f)
        fclose(f);
    uint64_t avail = pkb_mem_available(), floor = total / 10;
    return avail && avail < (floor > (1ull << 30) ? floor : 1ull << 30);
}

static p2pkv_client_t *
s_client(s_holder_t *h, bool thread, char *err)
{
    char id[64];
    snprintf(id, sizeof id, "pkbench-holder-%d-%d", (int) getpid(), h->serial++);
    p2pkv_config_t pc = { .peer_id = id, .fingerprint = "pkbench", .provider = "tcp",
                          .progress_thread = thread };
    return p2pkv_client_new(&pc, NULL, 1, S_BLOCK, (p2pkv_callbacks_t) { 0 }, err);
}

static void
s_service(s_holder_t *h)
{
    for (size_t i = 0; i < h->n; i++)
        p2pkv_client_poll(h->clients[i], 0);
}

//  Opens count more sessions to ep, one client each.
static int
s_new(s_holder_t *h, const char *ep, size_t count, FILE *out)
{
    char err[P2PKV_ERRLEN] = "";
    double last = pk_clock_monotonic();
    for (size_t k = 0; k < count; k++) {
        if (s_memory_low()) {
            fprintf(out, "ok %zu MemAvailable below 10%% of memory\n", h->n);
            return 0;
        }
        if (h->n == h->cap) {
            h->cap = h->cap ? 2 * h->cap : 64;
            h->clients = realloc(h->clients, h->cap * sizeof *h->clients);
        }
        p2pkv_client_t *c = s_client(h, false, err);
        if (!c || p2pkv_client_connect(c, ep, 30, err) < 0) {
            p2pkv_client_destroy(&c);
            fprintf(out, "err session %zu: %s\n", h->n + 1, err);
            return -EIO;
        }
        h->clients[h->n++] = c;
        if (pk_clock_monotonic() - last > 0.5) {   //  keep the rest alive
            s_service(h);
            last = pk_clock_monotonic();
        }
    }
    fprintf(out, "ok %zu\n", h->n);
    return 0;
}

static void
s_close(s_holder_t *h, FILE *out)
{
    for (size_t i = 0; i < h->n; i++)
        p2pkv_client_destroy(&h->clients[i]);
    h->n = 0;
    p2pkv_client_destroy(&h->shared);
    fprintf(out, "ok 0\n");
}

static void
s_command(s_holder_t *h, char *line, FILE *out)
{
    char ep[256], err[P2PKV_ERRLEN] = "";
    size_t count;
    if (sscanf(line, "new %255s %zu", ep, &count) == 2)
        s_new(h, ep, count, out);
    else if (strncmp(line, "client", 6) == 0) {
        h->shared = s_client(h, true, err);
        if (h->shared)
            fprintf(out, "ok 0\n");
        else
            fprintf(out, "err %s\n", err);
    }
    else if (sscanf(line, "add %255s", ep) == 1 && h->shared) {
        int s = p2pkv_client_connect(h->shared, ep, 30, err);
        if (s >= 0)
            fprintf(out, "ok %d\n", s + 1);
        else
            fprintf(out, "err %s\n", err);
    }
    else if (sscanf(line, "drop %zu", &count) == 1 && h->shared && count > 0) {
        int rc = p2pkv_client_disconnect(h->shared, (int) count - 1);
        if (rc == 0)
            fprintf(out, "ok 0\n");
        else
            fprintf(out, "err disconnect: %s\n", strerror(-rc));
    }
    else if (strncmp(line, "close", 5) == 0)
        s_close(h, out);
    else
        fprintf(out, "err unknown command\n");
    fflush(out);
}

static void __attribute__((noreturn))
s_holder_main(int cmd, int res)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    //  One process holding up to 1,024 sessions and more: czmq allows
    //  1,024 ZeroMQ sockets per process unless told (read at its first
    //  socket, which comes after this), and a session holds one.
    setenv("ZSYS_MAX_SOCKETS", "8192", 0);
    s_holder_t h = { 0 };
    FILE *in = fdopen(cmd, "r"), *out = fdopen(res, "w");
    char line[512];
    for (;;) {
        struct pollfd pfd = { cmd, POLLIN, 0 };
        if (poll(&pfd, 1, 200) > 0) {
            if (!fgets(line, (int) sizeof line, in))
                break;
            s_command(&h, line, out);
        }
        s_service(&h);      //  keepalives: every session's timers
    }
    s_close(&h, out);
    _exit(0);
}

typedef struct {
    pid_t pid;
    FILE *cmd, *res;
} s_holder_proc_t;

static int
s_holder_start(s_holder_proc_t *p)
{
    int cmd[2], res[2];
    if (pipe(cmd) || pipe(res))
        return -errno;
    p->pid = pkb_fork();
    if (p->pid < 0)
        return -errno;
    if (p->pid == 0) {
        close(cmd[1]);
        close(res[0]);
        s_holder_main(cmd[0], res[1]);
    }
    close(cmd[0]);
    close(res[1]);
    p->cmd = fdopen(cmd[1], "w");
    p->res = fdopen(res[0], "r");
    return 0;
}

//  One command; the count in its "ok" (and the rest of the line in note).
static int
s_ask(s_holder_proc_t *p, char *note, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
s_ask(s_holder_proc_t *p, char *note, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->cmd, fmt, ap);
    va_end(ap);
    fflush(p->cmd);
    char line[512];
    int n = -1, off = 0;
    if (!fgets(line, sizeof line, p->res))
        snprintf(line, sizeof line, "err the holder process ended");
    line[strcspn(line, "\n")] = '\0';
    if (sscanf(line, "ok %d %n", &n, &off) >= 1) {
        snprintf(note, size, "%.200s", off ? line + off : "");
        return n;
    }
    snprintf(note, size, "%.200s", strncmp(line, "err ", 4) == 0 ? line + 4 : line);
    return -EIO;
}

static void
s_holder_stop(s_holder_proc_t *p)
{
    if (p->cmd)
        fclose(p->cmd);
    if (p->res)
        fclose(p->res);
    if (p->pid > 0)
        pkb_reap(p->pid, 30);
    p->pid = 0;
}

//  --------------------------------------------------------------------------
//  Measuring

typedef struct {
    uint64_t rss, anon;         //  VmRSS, and its RssAnon part
    int threads, fds;           //  and descriptors held
    pkb_fig_t cpu;              //  % of a core while idle, over windows
} s_sample_t;

static void
s_measure(pid_t pid, double idle, s_sample_t *m)
{
    sleep(1);           //  settle: sessions just opened finish their set-up
    pkb_proc_status(pid, &m->rss, &m->anon, &m->threads);
    m->fds = pkb_proc_fds(pid);
    double pct[S_WINDOWS];
    for (int w = 0; w < S_WINDOWS; w++) {
        double c0 = pkb_proc_cpu(pid), t0 = pk_clock_monotonic();
        usleep((useconds_t) (idle / S_WINDOWS * 1e6));
        pct[w] = (pkb_proc_cpu(pid) - c0) / (pk_clock_monotonic() - t0) * 100;
    }
    m->cpu = pkb_fig(pct, S_WINDOWS);
}

static const char *const s_names[] = { "side", "sessions", "RSS MiB", "KiB/session",
                                       "threads", "fds", "idle CPU %core", "note" };
static const int s_w[] = { 6, 8, 9, 12, 8, 6, 22, 0 };

static void
s_row(pkb_report_t *rep, const char *side, int n, const s_sample_t *m, uint64_t rss0,
      const char *note)
{
    double per = n > 0 ? ((double) m->rss - (double) rss0) / n / 1024 : 0;
    char cpu[64];
    printf("  %6s %8d %9.1f %12.0f %8d %6d %22s %s\n", side, n, m->rss / 1048576.0, per,
           m->threads, m->fds, pkb_fig_str(m->cpu, "%.2f", cpu, sizeof cpu), note);
    fflush(stdout);
    json_t *row = pkb_report_row(rep);
    json_object_set_new(row, "side", json_string(side));
    json_object_set_new(row, "sessions", json_integer(n));
    json_object_set_new(row, "rss_bytes", json_integer((json_int_t) m->rss));
    json_object_set_new(row, "rss_anon_bytes", json_integer((json_int_t) m->anon));
    json_object_set_new(row, "rss_per_session_kib", json_real(per));
    json_object_set_new(row, "threads", json_integer(m->threads));
    json_object_set_new(row, "fds", json_integer(m->fds));
    json_object_set_new(row, "idle_cpu_pct_core", pkb_fig_json(m->cpu));
    json_object_set_new(row, "note", json_string(note));
}

//  Every session of the holder closed: waits until the server reaped
//  every actor (back to its own threads), then a second for its sweep,
//  which trims the heap after reaping, and measures.
static void
s_measure_closed(pid_t pid, int threads0, double idle, s_sample_t *m)
{
    int threads = threads0 + 1;
    for (int waited = 0; waited < 300 && threads > threads0; waited++) {
        usleep(100000);
        pkb_proc_status(pid, NULL, NULL, &threads);
    }
    sleep(1);
    s_measure(pid, idle, m);
}

static double
s_pct(uint64_t now, uint64_t before)
{
    return ((double) now - (double) before) / (double) before * 100;
}

static double
s_mib(uint64_t now, uint64_t before)
{
    return ((double) now - (double) before) / 1048576.0;
}

//  Server side: N idle sessions on one server, N growing.  The baseline
//  is the server after one session opened and closed ("warm"): the first
//  session pages in the code of the session path (libfabric's, ZeroMQ's,
//  ours: shared file pages) and sets up what a server holds once (its
//  fabric's pools), neither of which a session leaves behind.  The cold
//  figure is shown beside it.
static int
s_server_side(pkb_report_t *rep, const pkb_opts_t *o, const pkb_list_t *ns, uint64_t maxs,
              double idle)
{
    pkb_server_t srv;
    s_holder_proc_t h = { 0 };
    int rc = pkb_server_start(&srv, o, S_BLOCK, 64, maxs, NULL);
    if (rc == 0)
        rc = s_holder_start(&h);
    s_sample_t cold, m0, m;
    char note[320] = "";
    if (rc == 0) {
        s_measure(srv.pid, idle / S_WINDOWS, &cold);
        s_row(rep, "server", 0, &cold, cold.rss, "before any session (cold)");
        if (s_ask(&h, note, sizeof note, "new %s 1\n", srv.endpoint) != 1
            || s_ask(&h, note, sizeof note, "close\n") != 0) {
            fprintf(stderr, "p2pkv-bench sessions: the warm-up session: %s\n", note);
            rc = -EIO;
        }
    }
    if (rc == 0) {
        s_measure_closed(srv.pid, cold.threads, idle, &m0);
        snprintf(note, sizeof note, "before: one session opened and closed (warm), %+.1f MiB over cold",
                 s_mib(m0.rss, cold.rss));
        s_row(rep, "server", 0, &m0, m0.rss, note);
    }
    for (size_t i = 0; rc == 0 && i < ns->n; i++) {
        int have = s_ask(&h, note, sizeof note, "new %s %llu\n", srv.endpoint,
                         (unsigned long long) (ns->v[i] - (i ? ns->v[i - 1] : 0)));
        if (have < 0) {
            fprintf(stderr, "p2pkv-bench sessions: %s\n", note);
            rc = -EIO;
            break;
        }
        s_measure(srv.pid, idle, &m);
        s_row(rep, "server", have, &m, m0.rss, note);
        if ((uint64_t) have < ns->v[i])
            break;          //  memory ran low
    }
    if (rc == 0 && s_ask(&h, note, sizeof note, "close\n") == 0) {
        s_measure_closed(srv.pid, m0.threads, idle / S_WINDOWS, &m);
        double d = s_pct(m.rss, m0.rss);
        snprintf(note, sizeof note,
                 "after every session closed: %+.1f MiB, %+.1f%% of warm before (%s), of it "
                 "anonymous %+.1f MiB; %+.1f%% of cold (the pool is untouched here: before "
                 "is a bare server)",
                 s_mib(m.rss, m0.rss), d,
                 d <= 10 ? "within 10%" : "NOT within 10%",
                 s_mib(m.anon, m0.anon), s_pct(m.rss, cold.rss));
        s_row(rep, "server", 0, &m, m0.rss, note);
    }
    //  A second round of the largest N, opened and closed: what the first
    //  left must not grow again, or every session ever served costs the
    //  server something that stays.
    uint64_t top = ns->n ? ns->v[ns->n - 1] : 0;
    if (rc == 0 && top && s_ask(&h, note, sizeof note, "new %s %llu\n", srv.endpoint,
                                (unsigned long long) top) == (int) top
        && s_ask(&h, note, sizeof note, "close\n") == 0) {
        s_sample_t m2;
        s_measure_closed(srv.pid, m0.threads, idle / S_WINDOWS, &m2);
        snprintf(note, sizeof note,
                 "after a second round of %llu sessions: %+.2f MiB over the first round's "
                 "after, %+.1f%% of warm before",
                 (unsigned long long) top, s_mib(m2.rss, m.rss),
                 s_pct(m2.rss, m0.rss));
        s_row(rep, "server", 0, &m2, m0.rss, note);
    }
    s_holder_stop(&h);
    pkb_server_stop(&srv);
    return rc;
}

//  Client side: one client holding sessions to N servers, N growing.  The
//  baseline is warm, as the server's: the client after one session opened
//  and closed, since the first session sets up what a client holds once
//  (the provider's fabric and its pools, the code of the session path),
//  and counting that per session overstated a session by 2-3x at 4
//  servers (373 KiB against 77 for each one after).
static int
s_client_side(pkb_report_t *rep, const pkb_opts_t *o, const pkb_list_t *ns, double idle)
{
    static pkb_server_t srv[64];
    pkb_server_t warm = { 0 };
    bool warm_up = false;
    size_t up = 0;
    s_holder_proc_t h = { 0 };
    char note[256] = "";
    int rc = s_holder_start(&h);
    if (rc == 0 && s_ask(&h, note, sizeof note, "client\n") < 0)
        rc = -EIO;
    s_sample_t cold, m0, m;
    if (rc == 0) {
        s_measure(h.pid, idle / S_WINDOWS, &cold);
        s_row(rep, "client", 0, &cold, cold.rss, "before (a client, no server: cold)");
        rc = pkb_server_start(&warm, o, S_BLOCK, 16, 16, NULL);
        warm_up = rc == 0;
    }
    if (rc == 0) {
        int s = s_ask(&h, note, sizeof note, "add %s\n", warm.endpoint);
        if (s < 1 || s_ask(&h, note, sizeof note, "drop %d\n", s) != 0) {
            fprintf(stderr, "p2pkv-bench sessions: the client's warm-up session: %s\n", note);
            rc = -EIO;
        }
    }
    if (rc == 0) {
        s_measure(h.pid, idle / S_WINDOWS, &m0);
        snprintf(note, sizeof note,
                 "before: one session opened and closed (warm), %+.1f MiB over cold",
                 s_mib(m0.rss, cold.rss));
        s_row(rep, "client", 0, &m0, m0.rss, note);
    }
    for (size_t i = 0; rc == 0 && i < ns->n; i++) {
        while (rc == 0 && up < ns->v[i]) {
            rc = pkb_server_start(&srv[up], o, S_BLOCK, 16, 16, NULL);
            up++;
            if (rc == 0 && s_ask(&h, note, sizeof note, "add %s\n", srv[up - 1].endpoint) < 0) {
                fprintf(stderr, "p2pkv-bench sessions: server %zu: %s\n", up, note);
                rc = -EIO;
            }
        }
        if (rc == 0) {
            s_measure(h.pid, idle, &m);
            s_row(rep, "client", (int) up, &m, m0.rss, "one client, one session per server");
        }
    }
    if (rc == 0 && s_ask(&h, note, sizeof note, "close\n") != 0) {
        fprintf(stderr, "p2pkv-bench sessions: closing the client: %s\n", note);
        rc = -EIO;
    }
    if (rc == 0) {
        sleep(1);
        s_measure(h.pid, idle / S_WINDOWS, &m);
        snprintf(note, sizeof note, "after the client closed: %+.1f%% of warm before, "
                 "%+.1f%% of cold", s_pct(m.rss, m0.rss), s_pct(m.rss, cold.rss));
        s_row(rep, "client", 0, &m, m0.rss, note);
    }
    //  A second client to the same servers, in a process where sessions
    //  have come and gone (an engine's after a server restarts): what it
    //  costs per session, counted from where the first client left the
    //  process, and then what it leaves.  The first figure is the one that
    //  once read 11 MiB a session where the first client's read 130 KiB
    //  (design.md, "What a session costs": glibc's mmap threshold); the
    //  second must not grow again, or every client an engine makes costs
    //  it something that stays.
    bool again = rc == 0 && s_ask(&h, note, sizeof note, "client\n") == 0;
    for (size_t i = 0; again && i < up; i++)
        again = s_ask(&h, note, sizeof note, "add %s\n", srv[i].endpoint) >= 1;
    if (again) {
        s_sample_t mo;
        s_measure(h.pid, idle / S_WINDOWS, &mo);
        s_row(rep, "client", (int) up, &mo, m.rss,
              "a second client, one session per server (per session: over the first's after)");
        again = s_ask(&h, note, sizeof note, "close\n") == 0;
    }
    if (rc == 0 && !again) {
        fprintf(stderr, "p2pkv-bench sessions: the second client: %s\n", note);
        rc = -EIO;
    }
    if (rc == 0) {
        s_sample_t m2;
        sleep(1);
        s_measure(h.pid, idle / S_WINDOWS, &m2);
        snprintf(note, sizeof note, "after a second client of %zu sessions: %+.2f MiB over "
                 "the first one's after, %+.1f%% of warm before", up, s_mib(m2.rss, m.rss),
                 s_pct(m2.rss, m0.rss));
        s_row(rep, "client", 0, &m2, m0.rss, note);
    }
    s_holder_stop(&h);
    if (warm_up)
        pkb_server_stop(&warm);
    for (size_t i = 0; i < up; i++)
        pkb_server_stop(&srv[i]);
    return rc;
}

int
pkb_sessions(const pkb_opts_t *o)
{
    pkb_list_t ns = { 3, { 64, 256, 1024 } }, nsrv = { 4, { 4, 8, 16, 32 } };
    if (o->quick) {
        ns = (pkb_list_t) { 1, { 64 } };
        nsrv = (pkb_list_t) { 2, { 4, 8 } };
    }
    if (o->sessions.n)
        ns = o->sessions;
    if (o->servers.n)
        nsrv = o->servers;
    for (size_t i = 1; i < ns.n || i < nsrv.n; i++)
        if ((i < ns.n && ns.v[i] <= ns.v[i - 1]) || (i < nsrv.n && nsrv.v[i] <= nsrv.v[i - 1])) {
            fprintf(stderr, "p2pkv-bench sessions: --sessions and --servers must grow\n");
            return 2;
        }
    uint64_t top = ns.v[ns.n - 1];
    uint64_t maxs = o->max_sessions ? o->max_sessions : top + 16;
    if (top > maxs) {
        fprintf(stderr, "p2pkv-bench sessions: --sessions %llu is more than the server's "
                "--max-sessions %llu\n", (unsigned long long) top, (unsigned long long) maxs);
        return 2;
    }
    double idle = o->idle ? o->idle : o->quick ? 3 : 10;
    printf("sessions: idle sessions (tcp on 127.0.0.1); RSS = VmRSS, KiB/session = growth "
           "over the warm 'before' (one session opened and closed) per session, idle CPU over %.0f s in %d windows: median "
           "[min..max]; server --max-sessions %llu\n", idle, S_WINDOWS,
           (unsigned long long) maxs);
    pkb_report_t *rep = pkb_report_new(o, "tcp");
    pkb_table_head(s_names, s_w, 7);
    int rc = s_server_side(rep, o, &ns, maxs, idle);
    if (rc == 0)
        rc = s_client_side(rep, o, &nsrv, idle);
    if (rc == 0)
        rc = pkb_report_finish(rep);
    pkb_report_destroy(&rep);
    return rc ? 1 : 0;
}
