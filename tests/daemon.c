/*  daemon.c: a real p2pkv-server for the end-to-end tests (see daemon.h).  */
#include "daemon.h"
#include "base/clock.h"
#include "wire/protocol.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int s_serial;

static bool
s_given(const char *const *extra, const char *flag)
{
    for (size_t i = 0; extra && extra[i] && extra[i + 1]; i += 2)
        if (strcmp(extra[i], flag) == 0)
            return true;
    return false;
}

void
td_start(td_t *self, const char *const *extra)
{
    td_start_logged(self, extra, -1);
}

void
td_start_logged(td_t *self, const char *const *extra, int stderr_fd)
{
    memset(self, 0, sizeof *self);
    int n = ++s_serial;
    char peer[64];
    snprintf(peer, sizeof peer, "srv-%d-%d", getpid(), n);
    snprintf(self->local, sizeof self->local, "ipc:///tmp/p2pkv-e2e-%d-%d.sock", getpid(), n);
    snprintf(self->pool, sizeof self->pool, "/p2pkv-e2e-%d-%d", getpid(), n);
    const char *defaults[] = {
        "--peer-id", peer, "--bind", "tcp://127.0.0.1:*", "--local", self->local,
        "--pool-name", self->pool, "--pool-blocks", "256", "--block-len", "4096",
        "--fingerprint", "fp", "--hash-seed", "7", "--provider", "tcp",
        "--silence-timeout", "1.5", "--store-timeout", "3", "--shutdown-timeout", "2",
        "--log-level", "warn", NULL
    };
    for (size_t i = 0; extra && extra[i] && extra[i + 1]; i += 2) {
        if (strcmp(extra[i], "--pool-name") == 0)
            snprintf(self->pool, sizeof self->pool, "%s", extra[i + 1]);
        if (strcmp(extra[i], "--local") == 0)
            snprintf(self->local, sizeof self->local, "%s", extra[i + 1]);
    }
    const char *bin = getenv("P2PKV_SERVER") ? getenv("P2PKV_SERVER") : "bin/p2pkv-server";
    const char *argv[128];
    size_t argc = 0;
    argv[argc++] = bin;
    for (size_t i = 0; defaults[i]; i += 2)
        if (!s_given(extra, defaults[i])) {
            argv[argc++] = defaults[i];
            argv[argc++] = defaults[i + 1];
        }
    for (size_t i = 0; extra && extra[i] && extra[i + 1]; i += 2) {
        ck_assert_uint_lt(argc + 3, sizeof argv / sizeof argv[0]);
        argv[argc++] = extra[i];
        argv[argc++] = extra[i + 1];
    }
    argv[argc] = NULL;
    int out[2];
    ck_assert_int_eq(pipe(out), 0);
    pid_t parent = getpid();
    self->pid = fork();
    ck_assert_int_ge(self->pid, 0);
    if (self->pid == 0) {
        //  a test that fails half-way leaves no server behind
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(out[1], 1);
        if (stderr_fd >= 0)
            dup2(stderr_fd, 2);
        close(out[0]);
        close(out[1]);
        execv(bin, (char *const *) argv);
        _exit(127);
    }
    close(out[1]);
    //  the ready line says where peers reach it
    char line[2048] = "";
    size_t got = 0;
    struct pollfd pfd = { out[0], POLLIN, 0 };
    while (!strchr(line, '\n') && got < sizeof line - 1 && poll(&pfd, 1, 20000) > 0) {
        ssize_t r = read(out[0], line + got, sizeof line - 1 - got);
        if (r <= 0)
            break;
        got += (size_t) r;
        line[got] = '\0';
    }
    close(out[0]);
    const char *at = strstr(line, "peers at ");
    ck_assert_msg(at != NULL, "no ready line from p2pkv-server: \"%s\"", line);
    sscanf(at + 9, "%255[^,]", self->endpoint);
    self->engine = zsock_new_dealer(self->local);
    ck_assert_ptr_nonnull(self->engine);
    zsock_set_rcvtimeo(self->engine, 10000);
}

int
td_stop(td_t *self)
{
    zsock_destroy(&self->engine);
    p2pkv_engine_close(&self->api);
    kill(self->pid, SIGTERM);
    //  10 s, or longer when the server runs under valgrind (P2PKV_STOP_BOUND)
    const char *bound = getenv("P2PKV_STOP_BOUND");
    double deadline = pk_clock_monotonic() + (bound ? atof(bound) : 10);
    int status = -1;
    while (pk_clock_monotonic() < deadline) {
        if (waitpid(self->pid, &status, WNOHANG) == self->pid)
            return status;
        zclock_sleep(5);
    }
    kill(self->pid, SIGKILL);
    waitpid(self->pid, &status, 0);
    ck_abort_msg("p2pkv-server did not stop within %s s of SIGTERM", bound ? bound : "10");
    return status;
}

void
td_kill_only(td_t *self)
{
    zsock_destroy(&self->engine);
    p2pkv_engine_close(&self->api);
    ck_assert_int_eq(kill(self->pid, SIGKILL), 0);
    int status;
    ck_assert_int_eq(waitpid(self->pid, &status, 0), self->pid);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

void
td_kill(td_t *self)
{
    td_kill_only(self);
    //  a killed server cleans nothing up
    shm_unlink(self->pool);
    if (strncmp(self->local, "ipc://", 6) == 0)
        unlink(self->local + 6);
}

json_t *
td_engine(td_t *self, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *req = json_vpack_ex(NULL, 0, fmt, ap);
    va_end(ap);
    ck_assert_ptr_nonnull(req);
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    zstr_send(self->engine, text);
    free(text);
    //  skip events (store_result) that arrive before the answer
    for (;;) {
        char *answer = zstr_recv(self->engine);
        ck_assert_msg(answer != NULL, "no answer from the engine API");
        json_t *j = json_loads(answer, 0, NULL);
        zstr_free(&answer);
        ck_assert_ptr_nonnull(j);
        if (!json_object_get(j, "event"))
            return j;
        json_decref(j);
    }
}

p2pkv_engine_t *
td_engine_open(td_t *self, p2pkv_engine_event_fn *on_event, void *arg)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_engine_t *engine = p2pkv_engine_open(self->local, 10, on_event, arg, err);
    ck_assert_msg(engine != NULL, "p2pkv_engine_open %s: %s", self->local, err);
    return engine;
}

p2pkv_engine_t *
td_api(td_t *self)
{
    if (!self->api)
        self->api = td_engine_open(self, NULL, NULL);
    return self->api;
}

uint8_t *
td_pool_map(td_t *self, size_t *len_p)
{
    int fd = shm_open(self->pool, O_RDWR, 0);
    ck_assert_msg(fd >= 0, "shm_open %s: %s", self->pool, strerror(errno));
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    uint8_t *map = mmap(NULL, (size_t) st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ck_assert_ptr_ne(map, MAP_FAILED);
    *len_p = (size_t) st.st_size;
    return map;
}

void
td_start_held(td_t *self, const char *peer, char *release, const char *const *extra)
{
    int fd = mkstemp(release);
    ck_assert_int_ge(fd, 0);
    close(fd);
    unlink(release);                            //  held until it exists again
    char hold[128];
    snprintf(hold, sizeof hold, "%s:%s", peer, release);
    setenv("P2PKV_TEST_HOLD_SESSION", hold, 1);
    td_start(self, extra);
    unsetenv("P2PKV_TEST_HOLD_SESSION");
}

json_t *
td_stats_json(td_t *self)
{
    char err[P2PKV_ERRLEN] = "";
    char *text = p2pkv_engine_stats_json(td_api(self), err);
    ck_assert_msg(text != NULL, "p2pkv_engine_stats_json: %s", err);
    json_t *j = json_loads(text, 0, NULL);
    free(text);
    ck_assert_ptr_nonnull(j);
    return j;
}

p2pkv_key_t
td_key(const pk_key_t *key)
{
    return (p2pkv_key_t) { key->bytes, key->len };
}

void
td_reserve(td_t *self, const p2pkv_key_t *keys, size_t n, uint32_t *blocks)
{
    char err[P2PKV_ERRLEN] = "";
    int rc = p2pkv_engine_reserve(td_api(self), keys, n, blocks, err);
    ck_assert_msg(rc == 0, "p2pkv_engine_reserve: %d %s", rc, err);
}

void
td_commit(td_t *self, const p2pkv_key_t *keys, size_t n)
{
    char err[P2PKV_ERRLEN] = "";
    int rc = p2pkv_engine_commit(td_api(self), keys, n, err);
    ck_assert_msg(rc == 0, "p2pkv_engine_commit: %d %s", rc, err);
}

void
td_put(p2pkv_engine_t *engine, const p2pkv_key_t *keys, const uint8_t *data, size_t n,
       size_t block_len)
{
    for (size_t i = 0; i < n; i++) {
        char err[P2PKV_ERRLEN] = "";
        int rc = p2pkv_engine_put(engine, &keys[i], data + i * block_len, block_len, err);
        ck_assert_msg(rc == 0, "p2pkv_engine_put: %d %s", rc, err);
    }
}

p2pkv_engine_stats_t
td_stats(p2pkv_engine_t *engine)
{
    p2pkv_engine_stats_t st;
    char err[P2PKV_ERRLEN] = "";
    int rc = p2pkv_engine_stats(engine, &st, err);
    ck_assert_msg(rc == 0, "p2pkv_engine_stats: %d %s", rc, err);
    return st;
}

void
td_sweep(void)
{
    //  /dev/shm/p2pkv-e2e-PID-N and /tmp/p2pkv-e2e-PID-N.sock of a PID gone
    const char *dirs[] = { "/dev/shm", "/tmp" };
    for (int d = 0; d < 2; d++) {
        DIR *dir = opendir(dirs[d]);
        struct dirent *e;
        while (dir && (e = readdir(dir))) {
            int pid, n, len = 0;
            if (sscanf(e->d_name, "p2pkv-e2e-%d-%d%n", &pid, &n, &len) != 2 || pid <= 0
                || (e->d_name[len] && strcmp(e->d_name + len, ".sock") != 0)
                || kill(pid, 0) == 0 || errno != ESRCH)
                continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
            unlink(path);
        }
        if (dir)
            closedir(dir);
    }
}

bool
td_port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    bool free_now = bind(fd, (struct sockaddr *) &sa, sizeof sa) == 0;
    close(fd);
    return free_now;
}

int
td_free_port(void)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        int port = 20000 + (int) randombytes_uniform(12000);
        if (td_port_free(port))
            return port;
    }
    ck_abort_msg("no free port in 20000..31999");
    return -1;
}

void
td_fixed_endpoint(char *endpoint, size_t size)
{
    snprintf(endpoint, size, "tcp://127.0.0.1:%d", td_free_port());
}

int
td_suite_start(void)
{
    const char *bin = getenv("P2PKV_SERVER") ? getenv("P2PKV_SERVER") : "bin/p2pkv-server";
    if (access(bin, X_OK)) {
        printf("SKIP: %s not built here\n", bin);
        return 77;
    }
    if (sodium_init() < 0)
        return 1;
    zsys_handler_set(NULL);
    return 0;
}


TCase *
td_case(Suite *suite, const char *name, double timeout)
{
    TCase *tc = tcase_create(name);
    if (timeout > 0)
        tcase_set_timeout(tc, timeout);
    suite_add_tcase(suite, tc);
    return tc;
}

int
td_run_and_sweep(const char *name, Suite *suite)
{
    int rc = pk_test_run(name, suite);
    td_sweep();
    return rc;
}
