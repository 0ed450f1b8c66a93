/*  hardening.h: what tests/e2e/test_hardening.c's attacks share.

    hp_*: a hostile peer, one DEALER with routing id "P" + a fresh random
    epoch per hp_new, that sends whatever bytes it is given and decodes
    what comes back; its connect carries the one real address blob of the
    suite (hh_blob), so the server's actor opens a real channel for it.
    hh_*: the server's side as the suite reads it (metrics from the stats
    answer, VmRSS from /proc), the good consumer (a thread running the
    client library, fetching and checking blocks the whole time), and the
    report: one tab-separated line per attack on stdout and appended to
    $P2PKV_HARDENING_OUT (scripts/reliability turns those lines into
    doc/reliability.md).  The blocks and keys are tests/fixtures/blocks.h's.
*/
#ifndef PK_TEST_HARDENING_H_INCLUDED
#define PK_TEST_HARDENING_H_INCLUDED

#include "blocks.h"
#include "daemon.h"
#include "wire/protocol.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

//  ---------------------------------------------------------------------------
//  The server as the suite reads it

//  A counter or gauge of the stats answer's metrics: the total, or the
//  sample labelled label (a reason), or a consumer's own count when label
//  names one (the stats' session_counts); 0 when absent.
int64_t hh_metric(td_t *d, const char *name, const char *label);
//  Waits (bounded) until the metric reaches at least want; its value.
int64_t hh_metric_reach(td_t *d, const char *name, const char *label, int64_t want,
                        double timeout);
//  Waits (bounded) until the server has at most n sessions; true if so.
bool hh_sessions_at_most(td_t *d, uint64_t n, double timeout);
//  The server's VmRSS in bytes.
uint64_t hh_rss(pid_t pid);

//  ---------------------------------------------------------------------------
//  A hostile peer

typedef struct {
    zsock_t *dealer;
    uint8_t epoch[PK_EPOCH_LEN];
    uint8_t server_epoch[PK_EPOCH_LEN];
    char peer_id[64];
} hp_t;

//  The suite's one data-plane address blob (a real channel of the tcp
//  provider on 127.0.0.1), opened on first use.
void hh_blob(const uint8_t **blob_p, size_t *len_p);
void hh_blob_close(void);

hp_t *hp_new(const char *endpoint, const char *peer_id);
/*  A peer that reads as little as a socket can (ZMQ_RCVHWM 1, the
    smallest receive buffer): what it reads, it reads with hp_recv.  */
hp_t *hp_new_unread(const char *endpoint, const char *peer_id);
void hp_destroy(hp_t **self_p);
int hp_send(hp_t *self, const void *data, size_t len);
//  The next message within timeout, or NULL; undecodable frames skipped.
pk_msg_t *hp_recv(hp_t *self, double timeout);
//  The next message of type within timeout (others skipped), or NULL.
pk_msg_t *hp_until(hp_t *self, pk_msg_type_t type, double timeout);
//  A connect as the client sends it (metadata: blob, or given bytes).
pk_msg_t *hp_connect_msg(hp_t *self, const uint8_t *blob, size_t len, uint64_t num_blocks);
//  Sends connect (again every 0.5 s) until connect_ack or disconnect comes
//  within timeout: that message (caller destroys), or NULL.
pk_msg_t *hp_connect(hp_t *self, const uint8_t *blob, size_t len, uint64_t num_blocks,
                     double timeout);
//  hp_new and hp_connect with the suite's blob; the test fails unless it
//  was acknowledged.
hp_t *hp_session(const char *endpoint, const char *peer_id, uint64_t num_blocks);
//  Encodes m with this peer's epochs (unless set) and sends it; destroys m.
int hp_send_msg(hp_t *self, pk_msg_t *m);
//  Waits for the server's disconnect; the test fails unless its code is
//  code.  Its reason goes to reason (PK_ERRLEN bytes) when not NULL.
void hp_expect_disconnect(hp_t *self, pk_disconnect_code_t code, double timeout, char *reason);

//  ---------------------------------------------------------------------------
//  The good consumer: a thread with its own client, getting batches of
//  the keys of tag 0..nkeys-1 and checking every byte, until stopped.

typedef struct {
    char endpoint[256];
    char peer_id[64];
    uint64_t tag;
    size_t nkeys, block_len;
    atomic_bool stop, up;
    atomic_uint_fast64_t gets, blocks, errors, corrupt;
    char first_error[256];
    pthread_t thread;
} hh_good_t;

void hh_good_start(hh_good_t *g, const char *endpoint, uint64_t tag, size_t nkeys,
                   size_t block_len);
//  Waits (bounded) until it completed at least n more gets than now.
bool hh_good_advance(hh_good_t *g, uint64_t n, double timeout);
void hh_good_stop(hh_good_t *g);

//  ---------------------------------------------------------------------------
//  The rolling restart (rolling.c)

/*  nservers (2..3) servers on a redis-server of their own as the
    directory, every key held by two; each restarted in turn (SIGTERM, a
    drain; again on the same --peer-id, its keys put again; the next once
    it is back in the directory), restarts restarts in all, while nconsumers
    (1..8) threads fetch by key (P2PKV_ANY_SERVER) and check every byte.
    The test fails on any failed get or corrupt block; reports its row.  */
void hh_rolling(size_t nservers, size_t nconsumers, size_t restarts);

//  ---------------------------------------------------------------------------
//  The report

bool hh_long(void);
//  One attack's line: name, how many times, outcome, what was lost, time.
void hh_report(const char *name, uint64_t count, const char *outcome, const char *lost,
               double seconds);

#endif
