/*  zecho.c: the control plane's floor: a bare ZeroMQ DEALER -> ROUTER echo
    over tcp on 127.0.0.1, two processes, with frames of a lookup's size.
    What a lookup's round trip is compared with, in the same repetition
    (control): p2pkv adds the work on the message (the door runs a small
    one itself).  The echo's client waits for its answer as the client
    library's does (p2pkv_config_t.answer_spin, 200 us by default, or
    --answer-spin): it looks without sleeping, yielding its core, then
    sleeps; so the two compare like with like.  With curve, both
    sockets speak CURVE (fresh keypairs, no ZAP handler): what CURVE
    itself costs those bytes, beside what it costs p2pkv.  */
#include "bench.h"

#include <czmq.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double
s_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec + t.tv_nsec / 1e9;
}

static int
s_cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static void __attribute__((noreturn))
s_echo(int port_out, zcert_t *server)
{
    zsock_t *r = zsock_new(ZMQ_ROUTER);
    if (r && server) {
        zcert_apply(server, r);
        zsock_set_curve_server(r, 1);
    }
    int port = r ? zsock_bind(r, "tcp://127.0.0.1:*") : -1;
    if (write(port_out, &port, sizeof port) != sizeof port || port < 0)
        _exit(1);
    while (true) {
        zmsg_t *m = zmsg_recv(r);
        if (!m || zmsg_send(&m, r))
            break;
    }
    _exit(0);
}

//  In a process of its own (czmq starts there, after the fork): the echo
//  in another, then n round trips; p50 and p99 in ms up the pipe.
static void __attribute__((noreturn))
s_client(size_t bytes, int n, bool curve, double spin, int out)
{
    int p[2];
    zcert_t *server = curve ? zcert_new() : NULL, *client = curve ? zcert_new() : NULL;
    if (pipe(p) || (curve && (!server || !client)))
        _exit(1);
    pid_t echo = fork();
    if (echo == 0) {
        close(p[0]);
        s_echo(p[1], server);
    }
    close(p[1]);
    int port = -1;
    double v[2] = { -1, -1 };
    if (echo > 0 && read(p[0], &port, sizeof port) == sizeof port && port > 0) {
        zsock_t *d = zsock_new(ZMQ_DEALER);
        if (d && curve) {
            zcert_apply(client, d);
            zsock_set_curve_serverkey(d, zcert_public_txt(server));
        }
        char *frame = malloc(bytes);
        double *t = malloc((size_t) n * sizeof *t);
        if (d && frame && t && zsock_connect(d, "tcp://127.0.0.1:%d", port) == 0) {
            memset(frame, 'k', bytes);
            for (int i = -100; i < n; i++) {      //  100 to warm up
                double t0 = s_now();
                zframe_t *f = zframe_new(frame, bytes);
                zframe_send(&f, d, 0);
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                int got;
                while ((got = zmq_msg_recv(&msg, zsock_resolve(d), ZMQ_DONTWAIT)) < 0
                       && s_now() - t0 < spin)
                    sched_yield();
                if (got < 0)
                    zmq_msg_recv(&msg, zsock_resolve(d), 0);
                zmq_msg_close(&msg);
                if (i >= 0)
                    t[i] = (s_now() - t0) * 1e3;
            }
            qsort(t, (size_t) n, sizeof *t, s_cmp);
            v[0] = t[n / 2];
            v[1] = t[(size_t) n * 99 / 100];
        }
        free(frame);
        free(t);
        zsock_destroy(&d);
    }
    zcert_destroy(&server);
    zcert_destroy(&client);
    if (echo > 0) {
        kill(echo, SIGKILL);
        waitpid(echo, NULL, 0);
    }
    _exit(write(out, v, sizeof v) == sizeof v && v[0] >= 0 ? 0 : 1);
}

int
pkb_zmq_echo_ms(size_t bytes, int n, bool curve, double spin, double *p50, double *p99)
{
    int p[2];
    if (pipe(p))
        return -errno;
    pid_t pid = pkb_fork();
    if (pid == 0) {
        close(p[0]);
        s_client(bytes, n, curve, spin, p[1]);
    }
    close(p[1]);
    double v[2] = { -1, -1 };
    ssize_t got = pid > 0 ? read(p[0], v, sizeof v) : -1;
    close(p[0]);
    int status = 0;
    if (pid > 0)
        waitpid(pid, &status, 0);
    if (got != (ssize_t) sizeof v || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -EIO;
    *p50 = v[0];
    *p99 = v[1];
    return 0;
}
