/*  puller.c: the puller actor: the daemon acting as a consumer for its
    engine.  One actor with one client (p2pkv.h) over the store's own pool
    handles one pull at a time, getting the keys into their reserved
    blocks (p2pkv_client_get); the door commits what landed and tells the
    engine (a pull_result event).

    Words, door -> puller:
        PULL pull           a pk_pull_t, handed back with PULLED
        $TERM               (zactor) end
    puller -> door:
        PULLED pull         the pull, its landed[] and reason filled in
*/
#include "daemon/node_internal.h"
#include "base/thread.h"
#include "daemon/limits.h"
#include "p2pkv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    pk_node_t *node;
    zsock_t *pipe;
    p2pkv_client_t *client;         //  made at the first pull, kept for the daemon's life
} self_t;

static self_t *
s_self_new(zsock_t *pipe, pk_node_t *node)
{
    self_t *self = calloc(1, sizeof *self);
    if (self) {
        self->node = node;
        self->pipe = pipe;
    }
    return self;
}

static void
s_self_destroy(self_t **self_p)
{
    self_t *self = *self_p;
    if (!self)
        return;
    p2pkv_client_destroy(&self->client);
    free(self);
    *self_p = NULL;
}

//  With --curve-secret, the daemon is a CURVE client too: its own keypair,
//  the remote's key from --curve-servers (a server we have no key for is
//  not reached in the clear).
static int
s_connect(pk_node_t *node, p2pkv_client_t *client, pk_pull_t *p, char *err)
{
    double timeout = node->config->load_timeout;
    if (!node->curve_cert)
        return p2pkv_client_connect(client, p->server, timeout, err);
    if (!*p->server_key)
        return pk_err(err, -EACCES, "no CURVE key for %s in --curve-servers", p->server);
    return p2pkv_client_connect_curve(client, p->server, p->server_key, timeout, err);
}

static void
s_pull_run(pk_node_t *node, p2pkv_client_t *client, pk_pull_t *p)
{
    char err[256] = "";
    //  no server: any holder the directory names (p2pkv_client_get's failover)
    int server = p->server ? s_connect(node, client, p, err) : P2PKV_ANY_SERVER;
    p2pkv_key_t *keys = server >= 0 || !p->server ? calloc(p->n, sizeof *keys) : NULL;
    if (keys) {
        for (size_t i = 0; i < p->n; i++)
            keys[i] = (p2pkv_key_t) { p->keys[i].bytes, p->keys[i].len };
        char kv[64];
        snprintf(kv, sizeof kv, "pull-%llu", (unsigned long long) p->id);
        //  A block that fails its checksum is not landed[]: the door
        //  commits only what landed whole (the end-to-end check, issue 34)
        p2pkv_check_stats_t before, after;
        p2pkv_client_checks(client, &before);
        int got = p2pkv_client_get(client, server, kv, keys, p->blocks, p->n, true,
                                   node->config->load_timeout, p->landed, NULL, NULL, err);
        p2pkv_client_checks(client, &after);
        if (after.corrupt > before.corrupt)
            pk_metrics_add(node->metrics, PK_M_BLOCKS_CORRUPT, NULL, after.corrupt - before.corrupt);
        if (got >= 0 && !p->server)
            err[0] = '\0';         //  a holder lost on the way, its keys got elsewhere
        free(keys);
    }
    snprintf(p->reason, sizeof p->reason, "%s", err);
    //  a session per pull: between pulls nobody would keep it alive (by
    //  the directory, every holder it connected; an index without a server
    //  is refused, -EINVAL)
    if (server >= 0)
        p2pkv_client_disconnect(client, server);
    for (int i = 0; !p->server && i < 64; i++)
        (void) p2pkv_client_disconnect(client, i);
}

//  One client for the daemon's life: a new session per pull is cheap, a
//  new registration of the pool is not.
static p2pkv_client_t *
s_client(self_t *self, pk_pull_t *p)
{
    if (self->client)
        return self->client;
    pk_node_t *node = self->node;
    char name[320], err[256] = "";
    snprintf(name, sizeof name, "%s-pull", node->config->peer_id);
    //  every consumer-side setting, --connect-retry and --stall-timeout
    //  included (issue 10: they never reached the puller)
    p2pkv_config_t cfg = pk_server_config_client(node->config, name);
    if (node->curve_cert) {
        //  every connect names its server's key (s_connect); this one is
        //  a placeholder the config's all-or-none rule asks for
        cfg.curve_public = zcert_public_txt(node->curve_cert);
        cfg.curve_secret = zcert_secret_txt(node->curve_cert);
        cfg.curve_server = zcert_public_txt(node->curve_cert);
    }
    self->client = p2pkv_client_new(&cfg, pk_store_base(node->store),
                                    pk_store_num_blocks(node->store),
                                    pk_store_block_len(node->store),
                                    (p2pkv_callbacks_t) { 0 }, err);
    if (!self->client)
        snprintf(p->reason, sizeof p->reason, "%s", err);
    return self->client;
}

static void
s_self_handle_pipe(self_t *self, zmsg_t *msg, const char *cmd)
{
    if (!streq(cmd, "PULL"))
        return;
    pk_pull_t *p = pk_node_pop_ptr(msg);
    if (!p)
        return;
    p2pkv_client_t *client = s_client(self, p);
    if (client)
        s_pull_run(self->node, client, p);
    zsock_send(self->pipe, "sp", "PULLED", p);
}

static void
s_puller_actor(zsock_t *pipe, void *args)
{
    pk_thread_block_signals();
    self_t *self = s_self_new(pipe, args);
    zsock_signal(pipe, 0);
    while (self) {
        zmsg_t *msg = zmsg_recv(pipe);
        if (!msg)
            break;
        char *cmd = zmsg_popstr(msg);
        bool term = !cmd || streq(cmd, "$TERM");
        if (!term)
            s_self_handle_pipe(self, msg, cmd);
        zstr_free(&cmd);
        zmsg_destroy(&msg);
        if (term)
            break;
    }
    s_self_destroy(&self);
}

void
pk_pull_free(pk_pull_t *p)
{
    free(p->server);
    free(p->keys);
    free(p->blocks);
    free(p->landed);
    free(p);
}

//  Starts the puller at the first pull and hands it the pull without
//  waiting: 0, or a negative errno with p still the caller's.
int
pk_puller_send(pk_node_t *self, pk_pull_t *p)
{
    const char *key = pk_curve_server_key(self, p->server);
    snprintf(p->server_key, sizeof p->server_key, "%s", key ? key : "");
    //  its pipe's two mailboxes and a thread (limits.h)
    if (!self->puller && pk_limits_room(2) != 0)
        return -ENOMEM;
    if (!self->puller && (self->puller = zactor_new(s_puller_actor, self))) {
        if (pk_poller_add(self->poller, self->puller) == 0)
            zsock_set_sndtimeo(zactor_sock(self->puller), 0);
        else
            zactor_destroy(&self->puller);
    }
    if (!self->puller)
        return -ENOMEM;
    int rc = zsock_send(self->puller, "sp", "PULL", p);
    pk_poller_touch(self->poller, self->puller);
    return rc == 0 ? 0 : -EAGAIN;
}

//  A pull ended: commit what landed, free the rest, tell the engine.
void
pk_puller_from(pk_node_t *self, zmsg_t *msg)
{
    char *cmd = zmsg_popstr(msg);
    pk_pull_t *p = cmd && streq(cmd, "PULLED") ? pk_node_pop_ptr(msg) : NULL;
    if (p) {
        json_t *missing = json_array();
        size_t nlanded = 0;
        for (size_t i = 0; i < p->n; i++) {
            if (p->landed[i]) {
                if (pk_store_commit_sums(self->store, p->owner, p->ns, &p->keys[i], 1, NULL,
                                         NULL) == 0)
                    nlanded++;
                continue;
            }
            char hex[2 * PK_MAX_KEY_BYTES + 1];
            pk_hex_encode(p->keys[i].bytes, p->keys[i].len, hex);
            json_array_append_new(missing, json_string(hex));
        }
        pk_store_release_owner(self->store, p->owner);
        json_t *ev = json_pack("{s:s, s:I, s:I, s:o}", "event", "pull_result", "pull",
                               (json_int_t) p->id, "landed", (json_int_t) nlanded, "missing",
                               missing);
        if (p->reason[0])
            json_object_set_new(ev, "reason", json_string(p->reason));
        pk_engine_send(self, p->rid, p->rlen, ev);
        pk_pull_free(p);
    }
    zstr_free(&cmd);
    zmsg_destroy(&msg);
}

void
pk_puller_destroy(pk_node_t *self)
{
    if (!self->puller)
        return;
    (void) pk_poller_remove(self->poller, self->puller);
    zsock_set_sndtimeo(zactor_sock(self->puller), -1);
    zactor_destroy(&self->puller);
}
