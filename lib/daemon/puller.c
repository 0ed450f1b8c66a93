/*  puller.c: the puller actor: the daemon acting as a consumer for its
    engine (puller.h).  One actor with one client (p2pkv.h) over the
    store's own pool handles one pull at a time, getting the keys into
    their reserved blocks (p2pkv_client_get); the engine API commits what
    landed and tells the engine (a pull_result event).

    Words, node -> puller:
        PULL pull           a pk_pull_t, handed back with PULLED
        $TERM               (zactor) end
    puller -> node:
        PULLED pull         the pull, its landed[] and reason filled in
*/
#include "daemon/puller.h"
#include "base/thread.h"
#include "daemon/limits.h"
#include "daemon/pointer.h"
#include "p2pkv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _pk_puller_t {
    const pk_server_config_t *config;
    pk_store_t *store;
    pk_metrics_t *metrics;
    pk_poller_t *poller;
    const char *curve_public, *curve_secret;    //  NULL without CURVE
    zactor_t *actor;                //  started at the first pull
};

//  The servers a client holds at once (p2pkv_client_connect's -ENOSPC,
//  p2pkv.h): the indexes a pull by directory may have used.
#define S_MAX_SERVERS 64

typedef struct {
    pk_puller_t *puller;            //  read only (set before the actor starts)
    zsock_t *pipe;
    p2pkv_client_t *client;         //  made at the first pull, kept for the daemon's life
} self_t;

static self_t *
s_self_new(zsock_t *pipe, pk_puller_t *puller)
{
    self_t *self = calloc(1, sizeof *self);
    if (self) {
        self->puller = puller;
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
s_connect(pk_puller_t *puller, p2pkv_client_t *client, pk_pull_t *p, char *err)
{
    double timeout = puller->config->load_timeout;
    if (!puller->curve_public)
        return p2pkv_client_connect(client, p->server, timeout, err);
    if (!*p->server_key)
        return pk_err(err, -EACCES, "no CURVE key for %s in --curve-servers", p->server);
    return p2pkv_client_connect_curve(client, p->server, p->server_key, timeout, err);
}

//  Each key's result into p: landed[], and where it came from (its
//  holder's endpoint, asked once per holder) or why it did not.
static void
s_pull_results(p2pkv_client_t *client, pk_pull_t *p, const p2pkv_key_result_t *res)
{
    //  holder index -> sources[] index + 1
    size_t slot[S_MAX_SERVERS] = { 0 };
    for (size_t i = 0; i < p->n; i++) {
        p->landed[i] = res[i].status == P2PKV_KEY_LANDED;
        if (!p->landed[i]) {
            p->why[i] = res[i].status == P2PKV_KEY_CORRUPT ? "corrupt"
                        : res[i].status == P2PKV_KEY_FAILED ? "failed"
                        : p2pkv_miss_reason_name(res[i].reason);
            continue;
        }
        int h = res[i].holder;
        if (h < 0 || h >= S_MAX_SERVERS)
            continue;
        if (!slot[h]) {
            char ep[256];
            char **grown = realloc(p->sources, (p->nsources + 1) * sizeof *grown);
            if (!grown)
                continue;
            p->sources = grown;
            if (p2pkv_client_server_endpoint(client, h, ep, sizeof ep) != 0
                || !(p->sources[p->nsources] = strdup(ep)))
                continue;
            slot[h] = ++p->nsources;
        }
        p->from[i] = p->sources[slot[h] - 1];
    }
}

static void
s_pull_run(pk_puller_t *puller, p2pkv_client_t *client, pk_pull_t *p)
{
    char err[256] = "";
    //  no server: any holder the directory names (p2pkv_client_get's failover)
    int server = p->server ? s_connect(puller, client, p, err) : P2PKV_ANY_SERVER;
    p2pkv_key_t *keys = server >= 0 || !p->server ? calloc(p->n, sizeof *keys) : NULL;
    p2pkv_key_result_t *res = keys ? calloc(p->n, sizeof *res) : NULL;
    if (res) {
        for (size_t i = 0; i < p->n; i++)
            keys[i] = (p2pkv_key_t) { p->keys[i].bytes, p->keys[i].len };
        char kv[64];
        snprintf(kv, sizeof kv, "pull-%llu", (unsigned long long) p->id);
        //  A block that fails its checksum is not landed[]: the engine API
        //  commits only what landed whole (the end-to-end check, issue 34)
        p2pkv_check_stats_t before, after;
        p2pkv_client_checks(client, &before);
        int got = p2pkv_client_get_results(client, server, kv, keys, p->blocks, p->n, true,
                                           puller->config->load_timeout, res, NULL, NULL, err);
        p2pkv_client_checks(client, &after);
        if (after.corrupt > before.corrupt)
            pk_metrics_add(puller->metrics, PK_M_BLOCKS_CORRUPT, NULL,
                           after.corrupt - before.corrupt);
        if (got >= 0 && !p->server)
            err[0] = '\0';         //  a holder lost on the way, its keys got elsewhere
        s_pull_results(client, p, res);
    }
    else {
        if (!err[0])
            snprintf(err, sizeof err, "out of memory");
        for (size_t i = 0; i < p->n; i++)
            p->why[i] = "failed";  //  the pull itself: its server unreachable, refusing
    }
    free(res);
    free(keys);
    snprintf(p->reason, sizeof p->reason, "%s", err);
    //  a session per pull: between pulls nobody would keep it alive (by
    //  the directory, every holder it connected; an index without a server
    //  is refused, -EINVAL)
    if (server >= 0)
        p2pkv_client_disconnect(client, server);
    for (int i = 0; !p->server && i < S_MAX_SERVERS; i++)
        (void) p2pkv_client_disconnect(client, i);
}

//  One client for the daemon's life: a new session per pull is cheap, a
//  new registration of the pool is not.
static p2pkv_client_t *
s_client(self_t *self, pk_pull_t *p)
{
    if (self->client)
        return self->client;
    pk_puller_t *puller = self->puller;
    char name[320], err[256] = "";
    snprintf(name, sizeof name, "%s-pull", puller->config->peer_id);
    //  every consumer-side setting, --connect-retry and --stall-timeout
    //  included (issue 10: they never reached the puller)
    p2pkv_config_t cfg = pk_server_config_client(puller->config, name);
    if (puller->curve_public) {
        //  every connect names its server's key (s_connect); this one is
        //  a placeholder the config's all-or-none rule asks for
        cfg.curve_public = puller->curve_public;
        cfg.curve_secret = puller->curve_secret;
        cfg.curve_server = puller->curve_public;
    }
    self->client = p2pkv_client_new(&cfg, pk_store_base(puller->store),
                                    pk_store_num_blocks(puller->store),
                                    pk_store_block_len(puller->store),
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
    pk_pull_t *p = pk_pointer_pop(msg);
    if (!p)
        return;
    p2pkv_client_t *client = s_client(self, p);
    if (client)
        s_pull_run(self->puller, client, p);
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
pk_pull_destroy(pk_pull_t **p_p)
{
    pk_pull_t *p = *p_p;
    if (!p)
        return;
    free(p->server);
    free(p->keys);
    free(p->blocks);
    free(p->landed);
    free(p->from);
    free(p->why);
    for (size_t i = 0; i < p->nsources; i++)
        free(p->sources[i]);
    free(p->sources);
    free(p);
    *p_p = NULL;
}

pk_puller_t *
pk_puller_new(const pk_server_config_t *config, pk_store_t *store, pk_metrics_t *metrics,
              pk_poller_t *poller, const char *curve_public, const char *curve_secret)
{
    pk_puller_t *self = calloc(1, sizeof *self);
    if (self)
        *self = (pk_puller_t) { config, store, metrics, poller, curve_public, curve_secret,
                                NULL };
    return self;
}

void
pk_puller_destroy(pk_puller_t **self_p)
{
    pk_puller_t *self = *self_p;
    if (!self)
        return;
    if (self->actor) {
        (void) pk_poller_remove(self->poller, self->actor);
        zsock_set_sndtimeo(zactor_sock(self->actor), -1);
        zactor_destroy(&self->actor);
    }
    free(self);
    *self_p = NULL;
}

int
pk_puller_send(pk_puller_t *self, pk_pull_t *p)
{
    //  its pipe's two mailboxes and a thread (limits.h)
    if (!self->actor && pk_limits_room(2) != 0)
        return -ENOMEM;
    if (!self->actor && (self->actor = zactor_new(s_puller_actor, self))) {
        if (pk_poller_add(self->poller, self->actor) == 0)
            zsock_set_sndtimeo(zactor_sock(self->actor), 0);
        else
            zactor_destroy(&self->actor);
    }
    if (!self->actor)
        return -ENOMEM;
    int rc = zsock_send(self->actor, "sp", "PULL", p);
    pk_poller_touch(self->poller, self->actor);
    return rc == 0 ? 0 : -EAGAIN;
}

zactor_t *
pk_puller_actor(const pk_puller_t *self)
{
    return self->actor;
}

pk_pull_t *
pk_puller_recv(pk_puller_t *self, zmsg_t *msg)
{
    char *cmd = zmsg_popstr(msg);
    pk_pull_t *p = cmd && streq(cmd, "PULLED") ? pk_pointer_pop(msg) : NULL;
    zstr_free(&cmd);
    zmsg_destroy(&msg);
    return p;
}
