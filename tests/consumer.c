/*  consumer.c: the end-to-end tests' consumer (see consumer.h).  */
#include "consumer.h"
#include "base/clock.h"
#include "base/transport.h"

#include <czmq.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

struct _tc_t {
    tc_config_t config;
    zsock_t *dealer;
    uint8_t *pool;
    const pk_transport_ops_t *ops;
    pk_fabric_t *fabric;
    pk_channel_t *ch;
    uint8_t epoch[PK_EPOCH_LEN];
    uint8_t server_epoch[PK_EPOCH_LEN];
};

tc_t *
tc_new(const tc_config_t *config)
{
    tc_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->config = *config;
    if (!self->config.wire_major)
        self->config.wire_major = PK_WIRE_MAJOR;
    size_t bytes = config->num_blocks * config->block_len;
    self->pool = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    memset(self->pool, 0xee, bytes);
    char err[PK_ERRLEN];
    int rc;
    pk_fabric_config_t fc = { "tcp", "127.0.0.1", 5.0 };
    self->ops = pk_transport_find("ofi");
    if (pk_transport_ops_check(self->ops, PK_TRANSPORT_OPS_SIZE, err) == 0)
        self->fabric = self->ops->fabric_open(&fc, self->pool, config->num_blocks,
                                              config->block_len, &rc, err);
    if (self->fabric)
        self->ch = self->ops->channel_new(self->fabric, true, &rc, err);
    do
        randombytes_buf(self->epoch, sizeof self->epoch);
    while (sodium_is_zero(self->epoch, sizeof self->epoch));
    self->dealer = zsock_new(ZMQ_DEALER);
    uint8_t rid[1 + PK_EPOCH_LEN] = { 'P' };
    memcpy(rid + 1, self->epoch, PK_EPOCH_LEN);
    if (self->dealer)
        zmq_setsockopt(zsock_resolve(self->dealer), ZMQ_ROUTING_ID, rid, sizeof rid);
    if (!self->ch || !self->dealer || zsock_connect(self->dealer, "%s", config->endpoint) < 0) {
        tc_destroy(&self);
        return NULL;
    }
    return self;
}

void
tc_destroy(tc_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    tc_t *self = *self_p;
    zsock_destroy(&self->dealer);
    if (self->ch)
        self->ops->channel_close(&self->ch);
    if (self->fabric)
        self->ops->fabric_close(&self->fabric);
    free(self->pool);
    free(self);
    *self_p = NULL;
}

int
tc_send_raw(tc_t *self, const void *data, size_t len)
{
    //  never block: a DEALER with no connected server (not up yet, or
    //  refused by --allow) would wait forever
    zframe_t *f = zframe_new(data, len);
    int rc = zframe_send(&f, self->dealer, ZFRAME_DONTWAIT);
    zframe_destroy(&f);
    return rc;
}

int
tc_send(tc_t *self, pk_msg_t *m)
{
    if (!(m->present & PK_BIT(PK_F_SOURCE_EPOCH)) && m->type != PK_MSG_DESCRIBE
        && m->type != PK_MSG_CONNECT)
        pk_msg_set_epochs(m, self->epoch, self->server_epoch);
    char *frame;
    size_t len;
    int rc = pk_msg_encode(m, &frame, &len, NULL);
    if (rc == 0) {
        rc = tc_send_raw(self, frame, len);
        free(frame);
    }
    pk_msg_destroy(&m);
    return rc;
}

pk_msg_t *
tc_recv(tc_t *self, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    while (pk_clock_monotonic() < deadline) {
        self->ops->channel_progress(self->ch);
        if (zsock_events(self->dealer) & ZMQ_POLLIN) {
            zframe_t *f = zframe_recv(self->dealer);
            pk_msg_t *m = NULL;
            char err[PK_ERRLEN];
            if (f && pk_msg_decode(zframe_data(f), zframe_size(f), &m, err) != 0)
                m = NULL;
            zframe_destroy(&f);
            if (m)
                return m;
        }
        else
            zclock_sleep(1);
    }
    return NULL;
}

void
tc_progress(tc_t *self, double seconds)
{
    double deadline = pk_clock_monotonic() + seconds;
    while (pk_clock_monotonic() < deadline)
        self->ops->channel_progress(self->ch);
}

pk_msg_t *
tc_connect(tc_t *self, double timeout)
{
    uint8_t *blob;
    size_t len;
    if (self->ops->channel_blob(self->ch, &blob, &len))
        return NULL;
    double deadline = pk_clock_monotonic() + timeout;
    pk_msg_t *answer = NULL;
    while (!answer && pk_clock_monotonic() < deadline) {
        pk_msg_t *c = pk_msg_new(PK_MSG_CONNECT);
        pk_msg_set_uint(c, PK_F_WIRE_MAJOR, self->config.wire_major);
        pk_msg_set_uint(c, PK_F_WIRE_MINOR, 0);
        pk_msg_set_string(c, PK_F_PEER_ID, self->config.peer_id);
        static const uint8_t zero[PK_EPOCH_LEN];
        pk_msg_set_epochs(c, self->epoch, zero);
        pk_msg_set_metadata(c, blob, len);
        pk_msg_set_uint(c, PK_F_BASE_ADDR, 0);
        pk_msg_set_uint(c, PK_F_NUM_BLOCKS, self->config.num_blocks);
        pk_msg_set_uint(c, PK_F_BLOCK_LEN, self->config.block_len);
        pk_msg_set_string(c, PK_F_CONFIG_FINGERPRINT, self->config.fingerprint);
        pk_msg_set_string(c, PK_F_HASH_SEED, self->config.hash_seed);
        tc_send(self, c);
        pk_msg_t *m = tc_recv(self, 0.5);
        if (m && (m->type == PK_MSG_CONNECT_ACK || m->type == PK_MSG_DISCONNECT))
            answer = m;
        else
            pk_msg_destroy(&m);
    }
    free(blob);
    if (answer && answer->type == PK_MSG_CONNECT_ACK)
        memcpy(self->server_epoch, answer->source_epoch, PK_EPOCH_LEN);
    return answer;
}

uint8_t *
tc_pool(tc_t *self)
{
    return self->pool;
}

uint64_t
tc_landed(tc_t *self, uint64_t round)
{
    return self->ops->channel_landed(self->ch, round);
}

pk_msg_t *
tc_lookup(const char *kv, uint64_t round, const pk_key_t *keys, size_t n)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_LOOKUP);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_keys(m, keys, n);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, round);
    return m;
}

pk_msg_t *
tc_fetch(const char *kv, uint64_t round, const pk_key_t *keys, const uint32_t *idx, size_t n)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_FETCH);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_keys(m, keys, n);
    pk_msg_set_block_indexes(m, idx, n);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, round);
    return m;
}
