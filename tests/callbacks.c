/*  callbacks.c: what a client's callbacks saw (see callbacks.h).  */
#include "callbacks.h"

#include <stdio.h>
#include <string.h>

static void
s_on_lookup(void *arg, int server, const char *kv, uint64_t round, const p2pkv_key_t *keys,
            const bool *hits, size_t n)
{
    cb_seen_t *seen = arg;
    if (!hits) {
        atomic_fetch_add(&seen->unanswered, 1);
        return;
    }
    int h = 0;
    for (size_t i = 0; i < n; i++)
        h += hits[i];
    atomic_store(&seen->hits, h);
    atomic_store(&seen->round, round);
    if (server >= 0 && server < 8)
        atomic_store(&seen->round_of[server], round);
    atomic_fetch_add(&seen->keys_answered, (int) n);
    //  last: a test that waits on lookups reads the rest after it
    atomic_fetch_add(&seen->lookups, 1);
}

static void
s_on_fetch(void *arg, int server, uint64_t id, p2pkv_status_t status, const char *reason)
{
    cb_seen_t *seen = arg;
    snprintf(seen->fetch_reason, sizeof seen->fetch_reason, "%s", reason);
    atomic_store(&seen->status, (int) status);
    atomic_fetch_add(&seen->fetches, 1);
}

static void
s_on_server(void *arg, int server, p2pkv_server_state_t state, const char *reason)
{
    cb_seen_t *seen = arg;
    snprintf(seen->reason, sizeof seen->reason, "%s", reason);
    atomic_fetch_add(state == P2PKV_SERVER_UP ? &seen->ups
                     : state == P2PKV_SERVER_DOWN ? &seen->downs
                     : state == P2PKV_SERVER_STOPPED ? &seen->stops : &seen->connecting, 1);
}

p2pkv_callbacks_t
cb_seen_start(cb_seen_t *seen, unsigned which)
{
    memset(seen, 0, sizeof *seen);
    atomic_store(&seen->status, -1);
    return (p2pkv_callbacks_t) { .arg = seen,
                                 .on_lookup = which & CB_LOOKUP ? s_on_lookup : NULL,
                                 .on_fetch = which & CB_FETCH ? s_on_fetch : NULL,
                                 .on_server = which & CB_SERVER ? s_on_server : NULL };
}
