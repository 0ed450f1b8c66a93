/*  hardening.c: the hardening suite's helpers (see hardening.h).  */
#include "hardening.h"
#include "connect_msg.h"
#include "base/clock.h"
#include "base/transport.h"
#include "testutil.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

//  ---------------------------------------------------------------------------
//  The server as the suite reads it

int64_t
hh_metric(td_t *d, const char *name, const char *label)
{
    json_t *st = td_stats_json(d);
    json_t *f = json_object_get(json_object_get(st, "metrics"), name);
    json_t *v = json_object_get(f, "total");
    //  a label: a reason, or a consumer, whose session's own counts the
    //  stats list by metric name (no metric carries a consumer's id)
    json_t *by = json_object_get(f, "reasons");
    if (label)
        v = by ? json_object_get(by, label)
               : json_object_get(json_object_get(json_object_get(st, "session_counts"), label),
                                 name);
    int64_t value = json_is_integer(v) ? json_integer_value(v)
                    : json_is_real(v) ? (int64_t) json_real_value(v) : 0;
    json_decref(st);
    return value;
}

int64_t
hh_metric_reach(td_t *d, const char *name, const char *label, int64_t want, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    int64_t v;
    while ((v = hh_metric(d, name, label)) < want && pk_clock_monotonic() < deadline)
        zclock_sleep(5);
    return v;
}

bool
hh_sessions_at_most(td_t *d, uint64_t n, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    while (td_stats(td_api(d)).sessions > n) {
        if (pk_clock_monotonic() >= deadline)
            return false;
        zclock_sleep(5);
    }
    return true;
}

uint64_t
hh_rss(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int) pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %" SCNu64, &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

//  ---------------------------------------------------------------------------
//  The suite's address blob

static struct {
    pk_fabric_t *fabric;
    pk_channel_t *ch;
    uint8_t *pool, *blob;
    size_t len;
} s_blob;

void
hh_blob(const uint8_t **blob_p, size_t *len_p)
{
    if (!s_blob.blob) {
        char err[PK_ERRLEN] = "";
        int rc = 0;
        pk_fabric_config_t fc = { "tcp", "127.0.0.1", 5.0, 0, false };
        s_blob.pool = aligned_alloc(4096, 64 * 4096);
        ck_assert_ptr_nonnull(s_blob.pool);
        s_blob.fabric = pk_fabric_open(pk_transport_find("ofi"), &fc, s_blob.pool, 64, 4096, &rc,
                                       err);
        ck_assert_msg(s_blob.fabric != NULL, "fabric: %s", err);
        s_blob.ch = pk_channel_new(s_blob.fabric, true, &rc, err);
        ck_assert_msg(s_blob.ch != NULL, "channel: %s", err);
        ck_assert_int_eq(pk_channel_blob(s_blob.ch, &s_blob.blob, &s_blob.len), 0);
    }
    *blob_p = s_blob.blob;
    *len_p = s_blob.len;
}

void
hh_blob_close(void)
{
    if (s_blob.ch)
        pk_channel_close(&s_blob.ch);
    if (s_blob.fabric)
        pk_fabric_close(&s_blob.fabric);
    free(s_blob.blob);
    free(s_blob.pool);
    memset(&s_blob, 0, sizeof s_blob);
}

//  ---------------------------------------------------------------------------
//  A hostile peer

//  A DEALER as hp_new's, its options set before it connects.
static hp_t *
s_hp_new(const char *endpoint, const char *peer_id, bool reads)
{
    hp_t *self = calloc(1, sizeof *self);
    ck_assert_ptr_nonnull(self);
    do
        randombytes_buf(self->epoch, PK_EPOCH_LEN);
    while (self->epoch[0] == 0);
    snprintf(self->peer_id, sizeof self->peer_id, "%s", peer_id);
    self->dealer = zsock_new(ZMQ_DEALER);
    ck_assert_ptr_nonnull(self->dealer);
    uint8_t rid[1 + PK_EPOCH_LEN] = { 'P' };
    memcpy(rid + 1, self->epoch, PK_EPOCH_LEN);
    zmq_setsockopt(zsock_resolve(self->dealer), ZMQ_ROUTING_ID, rid, sizeof rid);
    zsock_set_sndtimeo(self->dealer, 10000);
    zsock_set_linger(self->dealer, 1000);
    if (!reads) {
        //  one message in its pipe and a receive buffer as small as the
        //  kernel allows: libzmq's I/O thread then stops reading, and what
        //  the server sends stays on the server's side
        zsock_set_rcvhwm(self->dealer, 1);
        zsock_set_rcvbuf(self->dealer, 4096);
    }
    ck_assert_int_eq(zsock_connect(self->dealer, "%s", endpoint), 0);
    return self;
}

hp_t *
hp_new(const char *endpoint, const char *peer_id)
{
    return s_hp_new(endpoint, peer_id, true);
}

hp_t *
hp_new_unread(const char *endpoint, const char *peer_id)
{
    return s_hp_new(endpoint, peer_id, false);
}

void
hp_destroy(hp_t **self_p)
{
    if (!*self_p)
        return;
    zsock_destroy(&(*self_p)->dealer);
    free(*self_p);
    *self_p = NULL;
}

int
hp_send(hp_t *self, const void *data, size_t len)
{
    zframe_t *f = zframe_new(data, len);
    int rc = zframe_send(&f, self->dealer, 0);
    zframe_destroy(&f);
    return rc;
}

pk_msg_t *
hp_recv(hp_t *self, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    while (true) {
        double left = deadline - pk_clock_monotonic();
        if (left <= 0)
            return NULL;
        zsock_set_rcvtimeo(self->dealer, (int) (left * 1000) + 1);
        zframe_t *f = zframe_recv(self->dealer);
        if (!f)
            return NULL;
        pk_msg_t *m = NULL;
        int rc = pk_msg_decode(zframe_data(f), zframe_size(f), &m, NULL);
        zframe_destroy(&f);
        if (rc == 0)
            return m;
    }
}

pk_msg_t *
hp_until(hp_t *self, pk_msg_type_t type, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    pk_msg_t *m;
    while ((m = hp_recv(self, deadline - pk_clock_monotonic()))) {
        if (m->type == type)
            return m;
        pk_msg_destroy(&m);
    }
    return NULL;
}

pk_msg_t *
hp_connect_msg(hp_t *self, const uint8_t *blob, size_t len, uint64_t num_blocks)
{
    return tf_connect_msg(self->peer_id, self->epoch, blob, len, num_blocks, 4096);
}

pk_msg_t *
hp_connect(hp_t *self, const uint8_t *blob, size_t len, uint64_t num_blocks, double timeout)
{
    char *frame;
    size_t flen;
    pk_msg_t *c = hp_connect_msg(self, blob, len, num_blocks);
    ck_assert_int_eq(pk_msg_encode(c, &frame, &flen, NULL), 0);
    pk_msg_destroy(&c);
    double deadline = pk_clock_monotonic() + timeout;
    pk_msg_t *m = NULL;
    while (!m && pk_clock_monotonic() < deadline) {
        ck_assert_int_eq(hp_send(self, frame, flen), 0);
        double until = pk_clock_monotonic() + 0.5;
        while ((m = hp_recv(self, until - pk_clock_monotonic()))
               && m->type != PK_MSG_CONNECT_ACK && m->type != PK_MSG_DISCONNECT)
            pk_msg_destroy(&m);
    }
    free(frame);
    if (m && m->type == PK_MSG_CONNECT_ACK)
        memcpy(self->server_epoch, m->source_epoch, PK_EPOCH_LEN);
    return m;
}

hp_t *
hp_session(const char *endpoint, const char *peer_id, uint64_t num_blocks)
{
    hp_t *self = hp_new(endpoint, peer_id);
    const uint8_t *blob;
    size_t len;
    hh_blob(&blob, &len);
    pk_msg_t *m = hp_connect(self, blob, len, num_blocks, 10);
    ck_assert_msg(m && m->type == PK_MSG_CONNECT_ACK, "%s: %s%s%s", peer_id,
                  m ? pk_msg_type_name(m->type) : "no answer within 10 s",
                  m && m->reason ? ": " : "", m && m->reason ? m->reason : "");
    pk_msg_destroy(&m);
    return self;
}

int
hp_send_msg(hp_t *self, pk_msg_t *m)
{
    if (!(m->present & PK_BIT(PK_F_SOURCE_EPOCH)))
        pk_msg_set_epochs(m, self->epoch, self->server_epoch);
    char *frame;
    size_t len;
    int rc = pk_msg_encode(m, &frame, &len, NULL);
    if (rc == 0) {
        rc = hp_send(self, frame, len);
        free(frame);
    }
    pk_msg_destroy(&m);
    return rc;
}

void
hp_expect_disconnect(hp_t *self, pk_disconnect_code_t code, double timeout, char *reason)
{
    pk_msg_t *m = hp_until(self, PK_MSG_DISCONNECT, timeout);
    ck_assert_msg(m != NULL, "%s: no disconnect within %.0f s", self->peer_id, timeout);
    ck_assert_msg(m->code == code, "%s: disconnect %s (%s), want %s", self->peer_id,
                  pk_disconnect_code_name(m->code), m->reason,
                  pk_disconnect_code_name(code));
    if (reason)
        snprintf(reason, PK_ERRLEN, "%s", m->reason);
    pk_msg_destroy(&m);
}

//  ---------------------------------------------------------------------------
//  The good consumer

#define S_GOOD_BATCH 16
#define S_GOOD_POOL 64

static void
s_good_error(hh_good_t *g, const char *fmt, const char *what)
{
    if (atomic_fetch_add(&g->errors, 1) == 0)
        snprintf(g->first_error, sizeof g->first_error, fmt, what);
}

//  One get of a batch into blocks it zeroed first; checks every byte.
static void
s_good_get(hh_good_t *g, p2pkv_client_t *client, int server, const p2pkv_key_t *keys,
           uint64_t n)
{
    uint8_t *pool = p2pkv_client_pool(client);
    uint32_t dest[S_GOOD_BATCH];
    bool landed[S_GOOD_BATCH];
    p2pkv_key_t batch[S_GOOD_BATCH];
    uint64_t first = (n * 7) % g->nkeys;
    for (size_t i = 0; i < S_GOOD_BATCH; i++) {
        batch[i] = keys[(first + i) % g->nkeys];
        dest[i] = (uint32_t) ((n * S_GOOD_BATCH + i) % S_GOOD_POOL);
        memset(pool + (size_t) dest[i] * g->block_len, 0, g->block_len);
    }
    char kv[64], err[P2PKV_ERRLEN] = "";
    snprintf(kv, sizeof kv, "good-%" PRIu64, n);
    int rc = p2pkv_client_get(client, server, kv, batch, dest, S_GOOD_BATCH, true, 10, landed,
                              NULL, NULL, err);
    if (rc != S_GOOD_BATCH) {
        s_good_error(g, "get: %s", rc < 0 ? err : "not every block landed");
        return;
    }
    for (size_t i = 0; i < S_GOOD_BATCH; i++) {
        size_t bad = bk_block_diff(pool + (size_t) dest[i] * g->block_len, g->tag,
                                   (first + i) % g->nkeys, g->block_len);
        if (bad) {
            atomic_fetch_add(&g->corrupt, bad);
            s_good_error(g, "%s", "a landed block differs from its pattern");
        }
    }
    atomic_fetch_add(&g->blocks, S_GOOD_BATCH);
    atomic_fetch_add(&g->gets, 1);
}

static void *
s_good_run(void *arg)
{
    hh_good_t *g = arg;
    p2pkv_config_t cfg = { .peer_id = g->peer_id, .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = "127.0.0.1", .load_timeout = 10,
                           .keepalive_interval = 0.3, .silence_timeout = 10 };
    char err[P2PKV_ERRLEN] = "";
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, S_GOOD_POOL, g->block_len,
                                              (p2pkv_callbacks_t) { 0 }, err);
    int server = client ? p2pkv_client_connect(client, g->endpoint, 10, err) : -1;
    p2pkv_key_t *keys = bk_keys(g->tag, 0, g->nkeys);
    if (server < 0)
        s_good_error(g, "connect: %s", err);
    atomic_store(&g->up, true);
    for (uint64_t n = 0; server >= 0 && !atomic_load(&g->stop); n++)
        s_good_get(g, client, server, keys, n);
    bk_keys_free(keys);
    p2pkv_client_destroy(&client);
    return NULL;
}

void
hh_good_start(hh_good_t *g, const char *endpoint, uint64_t tag, size_t nkeys, size_t block_len)
{
    memset(g, 0, sizeof *g);
    snprintf(g->endpoint, sizeof g->endpoint, "%s", endpoint);
    snprintf(g->peer_id, sizeof g->peer_id, "good-%d", getpid());
    g->tag = tag;
    g->nkeys = nkeys;
    g->block_len = block_len;
    ck_assert_int_eq(pthread_create(&g->thread, NULL, s_good_run, g), 0);
    ck_assert_msg(hh_good_advance(g, 3, 20), "the good consumer got nothing: %s",
                  g->first_error);
}

bool
hh_good_advance(hh_good_t *g, uint64_t n, double timeout)
{
    uint64_t want = atomic_load(&g->gets) + n;
    double deadline = pk_clock_monotonic() + timeout;
    while (atomic_load(&g->gets) < want && pk_clock_monotonic() < deadline
           && atomic_load(&g->errors) == 0)
        zclock_sleep(2);
    return atomic_load(&g->gets) >= want;
}

void
hh_good_stop(hh_good_t *g)
{
    atomic_store(&g->stop, true);
    pthread_join(g->thread, NULL);
}

//  ---------------------------------------------------------------------------
//  The report

bool
hh_long(void)
{
    const char *form = getenv("P2PKV_HARDENING");
    return form && strcmp(form, "long") == 0;
}

void
hh_report(const char *name, uint64_t count, const char *outcome, const char *lost,
          double seconds)
{
    char line[1024];
    snprintf(line, sizeof line, "HARDENING\t%s\t%s\t%" PRIu64 "\t%s\t%s\t%.1f\n",
             hh_long() ? "long" : "short", name, count, outcome, lost, seconds);
    fputs(line, stdout);
    fflush(stdout);
    const char *out = getenv("P2PKV_HARDENING_OUT");
    FILE *f = out && *out ? fopen(out, "a") : NULL;
    if (f) {
        fputs(line, f);
        fclose(f);
    }
}
