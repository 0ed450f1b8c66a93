/*  actor_world.c: the door's and the peer's world without a node
    (actor_world.h).  */
#include "actor_world.h"
#include "connect_msg.h"
#include "base/err.h"
#include "daemon/metrics.h"
#include "daemon/poller.h"
#include "daemon/unsent.h"
#include "sim/memtransport.h"

#include <check.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  env's job callback: the node hands a job's result to the engine API.
static void
s_job(void *arg, uint64_t job, bool success)
{
    ta_world_t *w = arg;
    ck_assert_uint_lt(w->njobs, TA_MAX_JOBS);
    w->jobs[w->njobs] = job;
    w->job_ok[w->njobs++] = success;
}

void
ta_world_new(ta_world_t *w, const char *router_bind)
{
    memset(w, 0, sizeof *w);
    ck_assert_int_eq(pk_server_config_defaults(&w->config), 0);
    w->config.log_level = PK_LOG_ERROR;
    //  only what a test does ends a session: no silence, no store clock
    w->config.silence_timeout = 600;
    w->config.keepalive_interval = 300;
    w->config.store_timeout = 600;
    w->session_config = pk_server_config_session(&w->config);
    static const char *const providers[] = { "mem" };
    w->id = (pk_server_identity_t) { "server-a", TA_BLOCK, TA_BLOCKS, "fp", "7", "mem",
                                     providers, 1, NULL, NULL };
    char err[PK_ERRLEN] = "";
    int rc;
    //  namespace 0, the shared one, and a tenant's (tenants.h)
    w->store = pk_store_new(NULL, TA_BLOCKS, TA_BLOCK, &(pk_store_config_t) { 30.0, 2, false },
                            pk_clock_system(), NULL, NULL, &rc, err);
    ck_assert_msg(w->store != NULL, "store: %s (%d)", err, rc);
    w->metrics = pk_metrics_new();
    w->unsent = pk_unsent_new(NULL);
    w->poller = pk_poller_new();
    ck_assert(w->metrics && w->unsent && w->poller);
    pk_fabric_config_t fc = { NULL, NULL, 30, 0, false };
    w->fabric = pk_fabric_open(pk_memtransport_ops(), &fc, pk_store_base(w->store), TA_BLOCKS,
                               TA_BLOCK, &rc, err);
    ck_assert_msg(w->fabric != NULL, "fabric: %s", err);

    w->router = zsock_new(ZMQ_ROUTER);
    ck_assert_ptr_nonnull(w->router);
    zsock_set_router_handover(w->router, 1);
    ck_assert_int_ge(zsock_bind(w->router, "%s", router_bind), 0);
    const char *bound = zsock_endpoint(w->router);
    snprintf(w->router_endpoint, sizeof w->router_endpoint, "%s", bound ? bound : router_bind);
    snprintf(w->actors_endpoint, sizeof w->actors_endpoint, "inproc://ta-actors-%p", (void *) w);
    w->actors = zsock_new_pull(w->actors_endpoint);
    ck_assert_ptr_nonnull(w->actors);

    w->env = (pk_peer_env_t) {
        .config = &w->config, .id = &w->id, .session_config = &w->session_config,
        .store = w->store, .metrics = w->metrics, .unsent = w->unsent, .router = w->router,
        .poller = w->poller, .job = s_job, .job_arg = w };
}

void
ta_world_destroy(ta_world_t *w)
{
    zsock_destroy(&w->actors);
    zsock_destroy(&w->router);
    pk_fabric_close(&w->fabric);
    pk_poller_destroy(&w->poller);
    pk_unsent_release(&w->unsent);
    pk_metrics_destroy(&w->metrics);
    pk_store_destroy(&w->store);
    pk_server_config_fini(&w->config);
}

void
ta_world_put(ta_world_t *w, unsigned ns, const char *key, uint8_t fill)
{
    static uint8_t block[TA_BLOCK];
    memset(block, fill, sizeof block);
    pk_key_t k = pk_key_make((const uint8_t *) key, strlen(key));
    ck_assert_int_eq(pk_store_put(w->store, ns, &k, block, sizeof block), 0);
}

uint64_t
ta_metric(ta_world_t *w, const char *name, const char *label)
{
    json_t *all = pk_metrics_json(w->metrics);
    ck_assert_ptr_nonnull(all);
    json_t *family = json_object_get(all, name);
    ck_assert_msg(family != NULL, "no metric %s", name);
    json_t *v = json_object_get(family, "total");
    if (label) {
        //  the labels' object: "reasons", "peers", ... (one per family)
        const char *k;
        json_t *o;
        v = NULL;
        json_object_foreach(family, k, o)
            if (json_is_object(o))
                v = json_object_get(o, label);
    }
    uint64_t n = v ? (uint64_t) json_integer_value(v) : 0;
    json_decref(all);
    return n;
}

void
ta_consumer_new(ta_consumer_t *c, const char *peer_id)
{
    memset(c, 0, sizeof *c);
    snprintf(c->peer_id, sizeof c->peer_id, "%s", peer_id);
    c->pool = calloc(TA_BLOCKS, TA_BLOCK);
    ck_assert_ptr_nonnull(c->pool);
    pk_fabric_config_t fc = { NULL, NULL, 30, 0, false };
    char err[PK_ERRLEN] = "";
    int rc;
    c->fabric = pk_fabric_open(pk_memtransport_ops(), &fc, c->pool, TA_BLOCKS, TA_BLOCK, &rc,
                               err);
    ck_assert_msg(c->fabric != NULL, "%s", err);
    c->channel = pk_channel_new(c->fabric, true, &rc, err);
    ck_assert_msg(c->channel != NULL, "%s", err);
    ck_assert_int_eq(pk_channel_blob(c->channel, &c->blob, &c->blob_len), 0);
    randombytes_buf(c->epoch, sizeof c->epoch);
}

void
ta_consumer_destroy(ta_consumer_t *c)
{
    free(c->blob);
    pk_channel_close(&c->channel);
    pk_fabric_close(&c->fabric);
    free(c->pool);
}

pk_msg_t *
ta_connect(const ta_consumer_t *c)
{
    return tf_connect_msg(c->peer_id, c->epoch, c->blob, c->blob_len, TA_BLOCKS, TA_BLOCK);
}

void
ta_acked(ta_consumer_t *c, const pk_msg_t *m)
{
    ck_assert_msg(m->type == PK_MSG_CONNECT_ACK, "a %s, not a connect_ack%s%s",
                  m->type == PK_MSG_DISCONNECT ? "disconnect" : "message",
                  m->reason ? ": " : "", m->reason ? m->reason : "");
    ck_assert_mem_eq(m->target_epoch, c->epoch, PK_EPOCH_LEN);
    memcpy(c->server_epoch, m->source_epoch, PK_EPOCH_LEN);
}

pk_msg_t *
ta_lookup(const ta_consumer_t *c, const char *kv, const char *key)
{
    pk_key_t k = pk_key_make((const uint8_t *) key, strlen(key));
    pk_msg_t *m = pk_msg_new(PK_MSG_LOOKUP);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_keys(m, &k, 1);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, 1);
    pk_msg_set_epochs(m, c->epoch, c->server_epoch);
    return m;
}

char *
ta_encode(pk_msg_t *m, size_t *len)
{
    char *text = NULL, err[PK_ERRLEN] = "";
    ck_assert_msg(pk_msg_encode(m, &text, len, err) == 0, "%s", err);
    pk_msg_destroy(&m);
    return text;
}

pk_msg_t *
ta_decode(const void *data, size_t len)
{
    pk_msg_t *m = NULL;
    char err[PK_ERRLEN] = "";
    ck_assert_msg(pk_msg_decode(data, len, &m, err) == 0, "undecodable frame: %s", err);
    return m;
}
