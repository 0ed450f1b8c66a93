/*  procs.c: every process p2pkv-bench starts, and its clean end.

    Children live in one process group of their own (so a terminal's
    Ctrl-C reaches the bench only, and the bench stops them in order) and
    are registered here; each dies with the bench too (PR_SET_PDEATHSIG).
    SIGINT, SIGTERM and SIGHUP run s_on_signal, which uses only
    async-signal-safe calls: SIGTERM to the group and to every registered
    child, a bounded wait, SIGKILL to what is left, then unlink of every
    shared-memory object and ipc socket registered, and _exit(128+sig).
*/
#include "bench.h"
#include "base/clock.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define S_MAX_CHILDREN 1024
#define S_MAX_FILES 256

static volatile pid_t s_children[S_MAX_CHILDREN];
static volatile pid_t s_pgid;
static char s_files[S_MAX_FILES][192];      //  /dev/shm/... and ipc paths
static volatile int s_nfiles;
static int s_serial;
static pid_t s_self;

static void
s_register(pid_t pid)
{
    for (int i = 0; i < S_MAX_CHILDREN; i++)
        if (s_children[i] == 0) {
            s_children[i] = pid;
            return;
        }
}

static void
s_unregister(pid_t pid)
{
    for (int i = 0; i < S_MAX_CHILDREN; i++)
        if (s_children[i] == pid)
            s_children[i] = 0;
}

void
pkb_register_file(const char *path)
{
    if (s_nfiles < S_MAX_FILES) {
        snprintf(s_files[s_nfiles], sizeof s_files[0], "%s", path);
        s_nfiles = s_nfiles + 1;
    }
}

static void
s_sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
    nanosleep(&ts, NULL);
}

//  Async-signal-safe: kill, waitpid, nanosleep, unlink, write.
static void
s_stop_all(bool unlink_files)
{
    if (s_pgid > 0)
        kill(-s_pgid, SIGTERM);
    for (int i = 0; i < S_MAX_CHILDREN; i++)
        if (s_children[i] > 0)
            kill(s_children[i], SIGTERM);
    for (int t = 0; t < 1000; t++) {         //  10 s
        bool left = false;
        for (int i = 0; i < S_MAX_CHILDREN; i++) {
            pid_t p = s_children[i];
            if (p > 0 && waitpid(p, NULL, WNOHANG) == p)
                s_children[i] = 0;
            else if (p > 0)
                left = true;
        }
        if (!left)
            break;
        s_sleep_ms(10);
    }
    if (s_pgid > 0)
        kill(-s_pgid, SIGKILL);
    for (int i = 0; i < S_MAX_CHILDREN; i++)
        if (s_children[i] > 0) {
            kill(s_children[i], SIGKILL);
            waitpid(s_children[i], NULL, 0);
            s_children[i] = 0;
        }
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    for (int i = 0; unlink_files && i < s_nfiles; i++)
        unlink(s_files[i]);
}

static void
s_on_signal(int sig)
{
    static const char msg[] = "p2pkv-bench: interrupted; stopping every process it started\n";
    if (getpid() != s_self)
        _exit(128 + sig);
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void) w;
    s_stop_all(true);
    _exit(128 + sig);
}

void
pkb_procs_init(void)
{
    s_self = getpid();
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGHUP);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void
pkb_child_init(void)
{
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    for (int i = 0; i < S_MAX_CHILDREN; i++)
        s_children[i] = 0;
    s_nfiles = 0;
    s_pgid = 0;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

//  Both sides put the child in the group (whichever runs first); a group
//  whose members all ended is gone, and the child starts a new one.
static void
s_join_group(pid_t pid)
{
    if (s_pgid == 0 || setpgid(pid, s_pgid) != 0)
        setpgid(pid, pid);
}

pid_t
pkb_fork(void)
{
    fflush(stdout);
    fflush(stderr);
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);     //  registered before a signal can see it
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        s_join_group(0);
        pkb_child_init();
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (getppid() != parent)
            _exit(127);
        return 0;
    }
    if (pid > 0) {
        s_join_group(pid);
        pid_t g = getpgid(pid);
        if (g > 0)
            s_pgid = g;
        s_register(pid);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return pid;
}

int
pkb_read_all(int fd, void *p, size_t n, double timeout)
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
pkb_reap(pid_t pid, double timeout)
{
    int status = -1;
    double deadline = pk_clock_monotonic() + timeout;
    while (pk_clock_monotonic() < deadline) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) {
            s_unregister(pid);
            return status;
        }
        s_sleep_ms(5);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    s_unregister(pid);
    return status;
}

void
pkb_shm_name(char *name, size_t size)
{
    snprintf(name, size, "/pkbench-%d-%d", (int) getpid(), ++s_serial);
    char path[160];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    pkb_register_file(path);
}

//  /dev/shm/pkbench-PID-* of this run, or of runs whose PID is gone.
static int
s_shm_leftovers(bool quiet)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d))) {
        int pid;
        if (sscanf(e->d_name, "pkbench-%d-", &pid) != 1)
            continue;
        if (pid != (int) getpid() && (kill(pid, 0) == 0 || errno != ESRCH))
            continue;
        char path[300];
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        if (pid == (int) getpid() && !quiet) {
            fprintf(stderr, "p2pkv-bench: shared-memory object %s was left behind; removed\n",
                    path);
            found++;
        }
        unlink(path);
    }
    if (d)
        closedir(d);
    return found;
}

int
pkb_procs_cleanup(void)
{
    s_stop_all(false);
    //  what a stopped server should have removed itself is counted and
    //  removed; then the rest (ipc sockets)
    int found = s_shm_leftovers(false);
    for (int i = 0; i < s_nfiles; i++)
        unlink(s_files[i]);
    return found ? -EEXIST : 0;
}

//  --------------------------------------------------------------------------
//  /proc

int
pkb_proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int) pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

int
pkb_proc_status(pid_t pid, uint64_t *rss, uint64_t *anon, int *threads)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int) pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    unsigned long long kb = 0, akb = 0;
    int th = 0;
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "VmRSS: %llu kB", &kb);
        sscanf(line, "RssAnon: %llu kB", &akb);
        sscanf(line, "Threads: %d", &th);
    }
    fclose(f);
    if (rss)
        *rss = kb * 1024;
    if (anon)
        *anon = akb * 1024;
    if (threads)
        *threads = th;
    return 0;
}

double
pkb_proc_cpu(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    //  after ") ": state(3) ... utime is field 14, stime 15
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
                     &st) != 2)
        return 0;
    return (double) (ut + st) / (double) sysconf(_SC_CLK_TCK);
}

//  The number on the first line of path that fmt (one %llu) reads; 0 when
//  none does.
static uint64_t
s_scan_u64(const char *path, const char *fmt)
{
    FILE *f = fopen(path, "r");
    char line[256];
    unsigned long long v = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, fmt, &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

uint64_t
pkb_mem_available(void)
{
    return s_scan_u64("/proc/meminfo", "MemAvailable: %llu kB") * 1024;
}

uint64_t
pkb_context_switches(void)
{
    return s_scan_u64("/proc/stat", "ctxt %llu");
}

int
pkb_check_memory(const char *suite, const char *what, double bytes)
{
    double avail = (double) pkb_mem_available();
    if (avail > 0 && bytes > avail * 0.8) {
        fprintf(stderr, "p2pkv-bench %s: %s needs %.1f GiB of pools, more than 80%% of "
                "MemAvailable (%.1f GiB)\n", suite, what, bytes / 1073741824.0,
                avail / 1073741824.0);
        return 2;
    }
    return 0;
}
