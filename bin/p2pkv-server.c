/*  p2pkv-server: the daemon launched beside each inference engine.

    Parses the settings (flags, --config file), creates the block pool and
    the node (lib/node), prints one line when it serves so scripts can wait
    for it, and runs until SIGINT or SIGTERM.  The first signal drains
    within --shutdown-timeout (node.c: the server leaves the directory,
    answers lookups as misses, lets the fetches asked for finish, then
    sessions get `disconnect shutdown`, and the engine's socket and the
    shared-memory pool go); a second exits at once, still unlinking the
    pool and the engine's socket.  SIGHUP reloads --curve-allow (and
    --curve-servers) in the node's loop.
*/
#include "base/local_path.h"
#include "daemon/limits.h"
#include "daemon/node.h"
#include "daemon/server_config.h"

#include <czmq.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile sig_atomic_t s_stop;
static volatile sig_atomic_t s_reload;
static char s_pool_name[256];
//  the engine's socket as the node bound it, for the second signal
static char s_local_file[128];
static struct stat s_local_st;

static void
s_on_signal(int sig)
{
    if (s_stop) {
        //  the second signal: no more waiting, but leave no pool behind
        if (s_pool_name[0])
            shm_unlink(s_pool_name);
        //  and no socket: lstat and unlink are async-signal-safe
        struct stat st;
        if (s_local_file[0] && lstat(s_local_file, &st) == 0 && st.st_ino == s_local_st.st_ino
            && st.st_dev == s_local_st.st_dev)
            unlink(s_local_file);
        _exit(PK_EXIT_RUNTIME);
    }
    s_stop = 1;
}

//  Only a flag: the node's loop reloads between wakes (the signal also
//  interrupts its poll, so it comes within a wake).
static void
s_on_hup(int sig)
{
    s_reload = 1;
}

/*  Without malloc's per-thread caches.  glibc keeps up to 7 freed small
    blocks of each size (to 1 KiB) in a cache per thread, and those blocks
    count as in use: malloc_trim cannot give back a page that one of them
    sits on.  A session's ZeroMQ objects are freed on ZeroMQ's own threads
    (its I/O thread and reaper), which live as long as the daemon, so their
    caches pinned heap pages among the freed ones: 1,024 sessions closed
    left the server 0.9 MiB (11.2% of a bare server) over where it was,
    without the caches 0.2 MiB (3.9%); lookups and fetches from 1 and 16
    consumers, alternated, moved within the noise (design.md, "What a
    session costs").  glibc reads the switch only when a process starts, so
    the daemon starts once more with it set, before it reads anything
    (--config may be a pipe): about 0.2 s more start, most of it the
    constructors of the libraries libfabric loads.  An operator's own
    tcache setting is kept; under valgrind, whose malloc has no such cache,
    nothing is done, since a new start would leave valgrind.  If the new
    start fails the daemon runs with the caches and says so.  */
#define S_NO_TCACHE "glibc.malloc.tcache_count=0"

static void
s_start_without_thread_caches(char *argv[])
{
    const char *have = getenv("GLIBC_TUNABLES");
    const char *preload = getenv("LD_PRELOAD");
    if ((have && strstr(have, "glibc.malloc.tcache_count"))
        || (preload && strstr(preload, "vgpreload")))
        return;                 //  the operator's choice, our second start, valgrind
    //  Left set if the start fails: the daemon starts no program.
    char *setting = have && *have ? zsys_sprintf("%s:%s", have, S_NO_TCACHE)
                                  : strdup(S_NO_TCACHE);
    int err = ENOMEM;
    if (setting && setenv("GLIBC_TUNABLES", setting, 1) == 0) {
        fflush(NULL);
        execv("/proc/self/exe", argv);
        err = errno;
    }
    fprintf(stderr, "p2pkv-server: warning: cannot start again without malloc's "
            "thread caches (%s): memory that sessions freed may stay resident\n",
            strerror(err));
    free(setting);
}

int
main(int argc, char *argv[])
{
    s_start_without_thread_caches(argv);
    pk_server_config_t config;
    char err[PK_ERRLEN];
    int rc = pk_server_config_parse(&config, argc, argv, stdout, err);
    if (rc != 0) {
        if (rc < 0)
            fprintf(stderr, "p2pkv-server: %s\n", err);
        pk_server_config_fini(&config);
        return rc < 0 ? PK_EXIT_USAGE : PK_EXIT_OK;
    }
    //  One malloc arena.  glibc gives each thread that allocates an arena
    //  of its own, up to 8 per core, and malloc_trim gives back the free
    //  pages inside every arena but the free top of the main arena only:
    //  the others' tops stay resident.  With 4 arenas, 1,024 sessions
    //  closed left 4.9-12.8 MB more resident than before they opened (a
    //  bare server is 11 MB), all of it free memory (malloc_info); with
    //  one, 1.1-1.2 MB, most of it still in use (heaptrack; 0.9-1.0 MB
    //  since the door compacts its maps of peers).  Throughput did
    //  not move: 16 consumers' lookups and fetches, alternated, within the
    //  run-to-run noise (design.md, "What a session costs").
    mallopt(M_ARENA_MAX, 1);
    //  The heap's free top kept up to 32 MiB, and blocks up to 8 MiB from
    //  the heap.  By default glibc gives back a free top over 128 KiB at
    //  once: a 1,024-key lookup (frames of 70 KB each way) grew the heap
    //  and shrank it again every time, and each shrink is a TLB shootdown
    //  of the daemon's other threads' cores, costly on a VM (11% of the
    //  server's samples), then page faults to grow again.  A lookup of
    //  65,536 keys (PK_MAX_LIST) has a frame of 4.4 MB in, its copies and
    //  tables, 1.5 MB out, about 15 MB in all: under these bounds none of
    //  it is mapped, faulted in and unmapped again for each lookup (with
    //  blocks over 128 KiB mapped, as they were, 4,096 keys cost 2.9x and
    //  65,536 keys 10x the per-key cost of 1,024).  Setting the trim
    //  threshold ends glibc's own adjusting of both, so the mmap threshold
    //  is set too.  What it costs: at most 32 MiB of free heap stays
    //  resident in a busy server; the sweeps' malloc_trim after sessions
    //  end gives it back (node.c, s_trim_heap), and with one arena the
    //  pages a few small blocks keep are few (node.c kept large blocks
    //  mapped, with several arenas, against that: test_hardening's
    //  resident-memory checks hold under these bounds).
    mallopt(M_TRIM_THRESHOLD, 32 << 20);
    mallopt(M_MMAP_THRESHOLD, 8 << 20);
    //  first, before any ZeroMQ socket: descriptors and sockets for
    //  --max-sessions, or a refusal naming it
    if ((rc = pk_limits_fit(&config, err)) != 0) {
        fprintf(stderr, "p2pkv-server: %s\n", err);
        pk_server_config_fini(&config);
        return PK_EXIT_USAGE;
    }
    //  Our handlers, not czmq's: the node decides how to stop.
    zsys_handler_set(NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = s_on_hup;
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    snprintf(s_pool_name, sizeof s_pool_name, "%s", config.pool_name);
    char nerr[256] = "";
    pk_node_t *node = pk_node_new(&config, &rc, nerr);
    if (!node) {
        fprintf(stderr, "p2pkv-server: %s\n", nerr);
        pk_server_config_fini(&config);
        return PK_EXIT_RUNTIME;
    }
    pk_node_watch_reload(node, &s_reload);
    const char *file = pk_local_file(config.local);
    if (file && lstat(file, &s_local_st) == 0)
        snprintf(s_local_file, sizeof s_local_file, "%s", file);
    printf("%s\n", pk_node_ready_line(node));
    fflush(stdout);
    pk_node_run(node, &s_stop);
    pk_node_destroy(&node);
    fprintf(stderr, "p2pkv-server: stopped\n");
    pk_server_config_fini(&config);
    return PK_EXIT_OK;
}
