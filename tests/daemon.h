/*  daemon.h: a real p2pkv-server process for the end-to-end tests, and
    its engine API on the local socket: the C API (p2pkv_engine.h, td_api)
    for tests that use it, raw JSON (td_engine) for the test of the JSON
    protocol itself.

    td_start forks and execs bin/p2pkv-server (or $P2PKV_SERVER) on
    127.0.0.1 over the tcp provider with short timeouts, waits for its
    ready line and connects a DEALER to its engine socket.  The defaults
    are a pool of 256 blocks of 4096 bytes, fingerprint "fp", hash seed
    "7"; extra flags replace a default of the same name (pool and local
    then name what was given).  td_stop ends it with SIGTERM within a
    bound; td_kill with SIGKILL, removing what a killed server leaves
    behind (its pool in /dev/shm, its ipc socket); td_kill_only with
    SIGKILL, leaving them.
    Failures are Check assertions.
*/
#ifndef PK_TEST_DAEMON_H_INCLUDED
#define PK_TEST_DAEMON_H_INCLUDED

#include "p2pkv.h"
#include "p2pkv_engine.h"
#include "base/key.h"

#include <check.h>
#include <czmq.h>
#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    char endpoint[256];         //  where peers reach it (tcp://127.0.0.1:PORT)
    char local[256];            //  its engine socket
    char pool[96];              //  its pool's shared-memory name
    zsock_t *engine;            //  raw JSON (td_engine)
    p2pkv_engine_t *api;        //  the engine C API (td_api), opened on first use
} td_t;

/*  extra: "--flag", "value" pairs, NULL-terminated, or NULL.  */
void td_start(td_t *self, const char *const *extra);

/*  The server's pool, mapped read-write in this process (the same user
    may open it): for tests that change blocks at rest.  Its length in
    *len_p; munmap it.  */
uint8_t *td_pool_map(td_t *self, size_t *len_p);

/*  td_start with the actor of consumer peer held still (the test-only
    $P2PKV_TEST_HOLD_SESSION, lib/daemon/peer.c) until a file exists at
    release, a mkstemp template ("/tmp/p2pkv-hold-XXXXXX") it fills in:
    create it to let the actor go.  */
void td_start_held(td_t *self, const char *peer, char *release, const char *const *extra);

/*  td_start with the server's stderr (its log) on stderr_fd (-1: the
    test's own).  */
void td_start_logged(td_t *self, const char *const *extra, int stderr_fd);

/*  SIGTERM, then the exit status within the shutdown bound (10 s, or
    $P2PKV_STOP_BOUND).  */
int td_stop(td_t *self);

/*  SIGKILL and reap; unlinks the pool and the ipc socket it left.  */
void td_kill(td_t *self);

/*  SIGKILL and reap, and leave what it left (its pool in /dev/shm, its
    ipc socket) where it is, as a crash does: for testing that the next
    server on the same names copes.  */
void td_kill_only(td_t *self);

/*  The engine C API (p2pkv_engine.h) on the server's local socket, with
    on_event and arg as for p2pkv_engine_open; the test fails unless it
    opens within 10 s.  Close it with p2pkv_engine_close.  */
p2pkv_engine_t *td_engine_open(td_t *self, p2pkv_engine_event_fn *on_event, void *arg);

/*  The server's engine handle (p2pkv_engine.h, no event callback),
    opened on first use and closed by td_stop and td_kill*.  */
p2pkv_engine_t *td_api(td_t *self);

/*  The server's whole stats answer (p2pkv_engine_stats_json), parsed:
    for the fields p2pkv_engine_stats_t has not (metrics, peers, fabric
    counters).  Caller decrefs.  */
json_t *td_stats_json(td_t *self);

/*  The engine API's view of a key.  */
p2pkv_key_t td_key(const pk_key_t *key);

/*  p2pkv_engine_reserve and _commit on td_api, asserting they worked.  */
void td_reserve(td_t *self, const p2pkv_key_t *keys, size_t n, uint32_t *blocks);
void td_commit(td_t *self, const p2pkv_key_t *keys, size_t n);

/*  p2pkv_engine_put of each block, asserting it was published.  */
void td_put(p2pkv_engine_t *engine, const p2pkv_key_t *keys, const uint8_t *data, size_t n,
            size_t block_len);

/*  The server's counters (p2pkv_engine_stats), asserting the call worked.  */
p2pkv_engine_stats_t td_stats(p2pkv_engine_t *engine);

/*  Raw JSON, for the tests of the server's JSON protocol itself (malformed
    commands, the answer's fields as sent): one engine request built by json_pack (fmt, ...); its answer, skipping
    events that arrive before it.  Caller decrefs.  */
json_t *td_engine(td_t *self, const char *fmt, ...);

/*  What every end-to-end suite does first: 0 to go on, else its exit
    code: 77 (skip) when bin/p2pkv-server (or $P2PKV_SERVER) is not built
    here, 1 when libsodium fails to start.  It also leaves signals to Check
    (czmq's handler would swallow a test's SIGINT/SIGTERM).  */
int td_suite_start(void);

/*  An endpoint (tcp://127.0.0.1:PORT) on a port that is free now, below
    the range ZeroMQ draws "*" ports from (49152 up, in order), so that a
    server of another suite running beside this one cannot take it while
    ours restarts on it.  */
void td_fixed_endpoint(char *endpoint, size_t size);

/*  A port of 127.0.0.1 free now, drawn from 20000..31999: below the
    kernel's ephemeral range (32768 up), so no client's source port takes
    it before our server binds it, and below ZeroMQ's "*" ports.  */
int td_free_port(void);

/*  Whether nothing listens on port of 127.0.0.1 now (a bind succeeds).  */
bool td_port_free(int port);

/*  Removes the pools and ipc sockets that servers of test processes no
    longer running left behind (a test that failed half-way).  */
void td_sweep(void);

/*  A case of suite called name, added to it, its tests timeout seconds
    each (0: Check's default, $CK_DEFAULT_TIMEOUT); the tests follow.  */
TCase *td_case(Suite *suite, const char *name, double timeout);

/*  How most end-to-end suites end: pk_test_run, then td_sweep for what
    the servers of a failed test left behind; the exit status.  */
int td_run_and_sweep(const char *name, Suite *suite);

#endif
