/*  server.c: a real p2pkv-server for fetch, control and sessions, and
    its engine API over plain libzmq (not czmq: the bench forks consumers
    afterwards, and a child must not inherit czmq's global context).  */
#include "bench.h"
#include "base/key.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

static int
s_free_port(const pkb_opts_t *o)
{
    int span = o->port_hi - o->port_lo + 1;
    int start = (int) (getpid() * 7919u % (unsigned) span);
    static int next;
    for (int a = 0; a < span; a++) {
        int port = o->port_lo + (start + next++) % span;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        bool ok = fd >= 0 && bind(fd, (struct sockaddr *) &sa, sizeof sa) == 0;
        if (fd >= 0)
            close(fd);
        if (ok)
            return port;
    }
    return -1;
}

static void __attribute__((noreturn))
s_exec(const pkb_opts_t *o, int out, const char *const *argv)
{
    dup2(out, 1);
    close(out);
    execv(o->server, (char *const *) argv);
    fprintf(stderr, "p2pkv-bench: cannot run %s: %s\n", o->server, strerror(errno));
    _exit(127);
}

//  The ready line says where peers reach it.
static int
s_ready(pkb_server_t *s, int fd)
{
    char line[2048] = "";
    size_t got = 0;
    struct pollfd pfd = { fd, POLLIN, 0 };
    while (!strchr(line, '\n') && got < sizeof line - 1 && poll(&pfd, 1, 30000) > 0) {
        ssize_t r = read(fd, line + got, sizeof line - 1 - got);
        if (r <= 0)
            break;
        got += (size_t) r;
        line[got] = '\0';
    }
    close(fd);
    const char *at = strstr(line, "peers at ");
    if (!at || sscanf(at + 9, "%127[^,]", s->endpoint) != 1) {
        fprintf(stderr, "p2pkv-bench: no ready line from p2pkv-server\n");
        return -EIO;
    }
    return 0;
}

static int
s_engine_open(pkb_server_t *s)
{
    s->zctx = zmq_ctx_new();
    s->engine = s->zctx ? zmq_socket(s->zctx, ZMQ_DEALER) : NULL;
    int tmo = 30000, linger = 0;
    if (!s->engine)
        return -ENOMEM;
    zmq_setsockopt(s->engine, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(s->engine, ZMQ_LINGER, &linger, sizeof linger);
    return zmq_connect(s->engine, s->local) == 0 ? 0 : -errno;
}

int
pkb_server_start(pkb_server_t *s, const pkb_opts_t *o, uint64_t block_len,
                 uint64_t pool_blocks, uint64_t max_sessions, const char *const *extra)
{
    memset(s, 0, sizeof *s);
    s->block_len = block_len;
    s->pool_blocks = pool_blocks;
    pkb_shm_name(s->pool, sizeof s->pool);
    snprintf(s->local, sizeof s->local, "ipc:///tmp%s.sock", s->pool);
    pkb_register_file(s->local + 6);
    int port = s_free_port(o);
    if (port < 0) {
        fprintf(stderr, "p2pkv-bench: --ports: no free port in %d-%d\n", o->port_lo, o->port_hi);
        return -EADDRINUSE;
    }
    char bind[64], blocks[32], len[32], sessions[32];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf(blocks, sizeof blocks, "%llu", (unsigned long long) pool_blocks);
    snprintf(len, sizeof len, "%llu", (unsigned long long) block_len);
    snprintf(sessions, sizeof sessions, "%llu", (unsigned long long) max_sessions);
    const char *argv[64] = { o->server, "--peer-id", s->pool + 1, "--bind", bind, "--local",
                             s->local, "--pool-name", s->pool, "--pool-blocks", blocks,
                             "--pin-quota", blocks, "--block-len", len, "--max-sessions",
                             sessions, "--provider", "tcp", "--fingerprint", "pkbench",
                             "--log-level", "warn", NULL };
    size_t argc = 0;
    while (argv[argc])
        argc++;
    for (size_t i = 0; extra && extra[i] && argc < 62; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    int out[2];
    if (pipe(out))
        return -errno;
    s->pid = pkb_fork();
    if (s->pid < 0)
        return -errno;
    if (s->pid == 0) {
        close(out[0]);
        s_exec(o, out[1], argv);
    }
    close(out[1]);
    int rc = s_ready(s, out[0]);
    if (rc == 0)
        rc = s_engine_open(s);
    return rc;
}

json_t *
pkb_server_ask(pkb_server_t *s, json_t *req)
{
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!text || zmq_send(s->engine, text, strlen(text), 0) < 0) {
        free(text);
        return NULL;
    }
    free(text);
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s->engine, 0) < 0) {
            zmq_msg_close(&m);
            return NULL;
        }
        json_t *j = json_loadb(zmq_msg_data(&m), zmq_msg_size(&m), 0, NULL);
        zmq_msg_close(&m);
        if (!j || !json_object_get(j, "event"))
            return j;
        json_decref(j);
    }
}

static json_t *
s_keys_json(uint64_t from, uint64_t n)
{
    json_t *arr = json_array();
    for (uint64_t i = from; i < from + n; i++) {
        uint8_t key[PKB_KEY_LEN];
        char hex[2 * PKB_KEY_LEN + 1];
        pkb_key(i, key);
        pk_hex_encode(key, PKB_KEY_LEN, hex);
        json_array_append_new(arr, json_string(hex));
    }
    return arr;
}

//  reserve, fill, commit a chunk of keys
static int
s_populate_chunk(pkb_server_t *s, uint8_t *pool, uint64_t from, uint64_t n)
{
    json_t *a = pkb_server_ask(s, json_pack("{s:s, s:o}", "cmd", "reserve", "keys",
                                      s_keys_json(from, n)));
    json_t *blocks = json_object_get(a, "blocks");
    if (!a || !json_is_true(json_object_get(a, "ok")) || json_array_size(blocks) != n) {
        fprintf(stderr, "p2pkv-bench: the server refused to reserve %llu blocks: %s\n",
                (unsigned long long) n, a ? json_string_value(json_object_get(a, "error"))
                                          : "no answer");
        json_decref(a);
        return -EIO;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t b = (uint64_t) json_integer_value(json_array_get(blocks, i));
        pkb_fill(from + i, pool + b * s->block_len, s->block_len);
    }
    json_decref(a);
    a = pkb_server_ask(s, json_pack("{s:s, s:o}", "cmd", "commit", "keys", s_keys_json(from, n)));
    int rc = a && json_is_true(json_object_get(a, "ok")) ? 0 : -EIO;
    if (rc)
        fprintf(stderr, "p2pkv-bench: the server refused to commit\n");
    json_decref(a);
    return rc;
}

int
pkb_server_populate(pkb_server_t *s, uint64_t n)
{
    return pkb_server_populate_from(s, 0, n);
}

int
pkb_server_populate_from(pkb_server_t *s, uint64_t first, uint64_t n)
{
    int fd = shm_open(s->pool, O_RDWR, 0);
    if (fd < 0)
        return -errno;
    size_t len = (size_t) (s->pool_blocks * s->block_len);
    uint8_t *pool = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (pool == MAP_FAILED)
        return -errno;
    int rc = 0;
    for (uint64_t from = 0; rc == 0 && from < n; from += 4096)
        rc = s_populate_chunk(s, pool, first + from, n - from < 4096 ? n - from : 4096);
    munmap(pool, len);
    return rc;
}

void
pkb_server_stop(pkb_server_t *s)
{
    if (s->engine)
        zmq_close(s->engine);
    if (s->zctx)
        zmq_ctx_term(s->zctx);
    s->engine = s->zctx = NULL;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        pkb_reap(s->pid, 10);
        s->pid = 0;
    }
}
