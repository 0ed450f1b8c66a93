/*  replay.c: the server role driven by a script (doc/replay.md), the
    engine of p2pkv-replay (its command line is p2pkv-replay.c).

    Reads one JSON event per line, feeds it to one pk_server_role wired to
    a virtual clock, a scripted store and the in-memory transport, and
    prints every effect the role has on the outside world, one compact JSON
    object per line.  Deterministic: the same input gives the same output.

    An input error ends the run through a longjmp back to pk_replay_run,
    which frees everything: so the arrays an event decodes are the
    world's (s_temp, freed after each event) from the moment they exist.
*/
#include "replay.h"
#include "base/keymap.h"
#include "wire/protocol.h"
#include "roles/server_role.h"
#include "sim/memtransport.h"

#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_PIN_JOB 1000

typedef struct {
    double now;
    pk_memtransport_t *mem;
    pk_transport_t inner;
    pk_keymap_t table;          //  key -> a: state, b: block
    uint8_t *used_jobs;         //  store job ids < FIRST_PIN_JOB seen
    uint64_t next_job;
    //  every key the table or a call holds; freed at exit
    pk_key_t **arenas;
    size_t narenas;
    pk_server_role_t *role;
    const char *peer;
    bool started;               //  an event reached the role: too late to lend
    bool closed;                //  after close, no event may follow
    FILE *out, *err;
    long lineno;
    char *line;                 //  getline's buffer
    size_t cap;
    json_t *ev;                 //  the event being run
    void *temp[4];              //  its arrays (s_temp)
    size_t ntemp;
    jmp_buf fail;               //  back to pk_replay_run: an input error
} s_world_t;

//  The world of the run under way, for the errors and effects of
//  functions the role's seams call without it.
static s_world_t *s_w;

static void __attribute__((noreturn))
s_fatal(const char *what)
{
    fprintf(s_w->err, "p2pkv-replay: %s\n", what);
    longjmp(s_w->fail, 1);
}

static void
s_emit(json_t *obj)
{
    char *text = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!text)
        s_fatal("out of memory");
    fputs(text, s_w->out);
    fputc('\n', s_w->out);
    free(text);
    json_decref(obj);
}

//  An array for the event being run, freed after it (or at an error).
static void *
s_temp(size_t size)
{
    void *p = s_w->ntemp < sizeof s_w->temp / sizeof s_w->temp[0] ? malloc(size) : NULL;
    if (!p)
        s_fatal("out of memory");
    s_w->temp[s_w->ntemp++] = p;
    return p;
}

static void
s_temp_free(s_world_t *w)
{
    while (w->ntemp)
        free(w->temp[--w->ntemp]);
}

static json_t *
s_hex_array(const pk_key_t *keys, size_t n)
{
    json_t *arr = json_array();
    char hex[2 * PK_MAX_KEY_BYTES + 1];
    for (size_t i = 0; i < n; i++) {
        pk_hex_encode(keys[i].bytes, keys[i].len, hex);
        json_array_append_new(arr, json_string(hex));
    }
    return arr;
}

static json_t *
s_int_array(const uint32_t *v, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_integer(v[i]));
    return arr;
}

//  --------------------------------------------------------------------------
//  The seams

static double
s_clock_now(void *arg)
{
    return ((s_world_t *) arg)->now;
}

static void
s_send(void *arg, const pk_msg_t *m)
{
    json_t *msg = json_object();
    json_object_set_new(msg, "type", json_string(pk_msg_type_name(m->type)));
    if (m->present & PK_BIT(PK_F_KV_REQUEST_ID))
        json_object_set_new(msg, "kv_request_id", json_string(m->kv_request_id));
    if (m->present & PK_BIT(PK_F_KEYS))
        json_object_set_new(msg, "keys", s_hex_array(m->keys.v, m->keys.count));
    if (m->present & PK_BIT(PK_F_HITS)) {
        json_t *hits = json_array();
        for (size_t i = 0; i < m->keys.count; i++)
            json_array_append_new(hits, json_boolean(m->hits[i]));
        json_object_set_new(msg, "hits", hits);
    }
    if (m->present & PK_BIT(PK_F_SUCCESS))
        json_object_set_new(msg, "success", json_boolean(m->success));
    if (m->present & PK_BIT(PK_F_ROUND_SEQ))
        json_object_set_new(msg, "round_seq", json_integer((json_int_t) m->round_seq));
    if (m->present & PK_BIT(PK_F_LANDING))
        json_object_set_new(msg, "landing", json_integer((json_int_t) m->landing));
    if (m->present & PK_BIT(PK_F_SOURCES))
        json_object_set_new(msg, "sources", json_string(m->sources));
    s_emit(json_pack("{s:s, s:o}", "out", "send", "msg", msg));
}

static int64_t
s_write_blocks(void *arg, uint64_t round, const uint32_t *local, const uint32_t *remote, size_t n)
{
    s_world_t *w = arg;
    int64_t tid = w->inner.write_blocks(w->inner.self, round, local, remote, n);
    s_emit(json_pack("{s:s, s:o, s:I, s:o, s:o}", "out", "write", "tid",
                     tid > 0 ? json_integer(tid) : json_null(), "round", (json_int_t) round,
                     "local", s_int_array(local, n), "remote", s_int_array(remote, n)));
    return tid;
}

//  A lend (the `lend` event): the consumer copies the blocks itself.  The
//  scripted transport opens it as it opens a write (a transfer id, in
//  flight until `complete` or a cancel releases it): `complete` is the
//  consumer's report, `complete` with ok false the stall timeout's cut-off.
static int64_t
s_lend(void *arg, uint64_t round, const uint32_t *local, const uint32_t *remote, size_t n)
{
    s_world_t *w = arg;
    int64_t tid = w->inner.write_blocks(w->inner.self, round, local, remote, n);
    s_emit(json_pack("{s:s, s:o, s:I, s:o, s:o}", "out", "lend", "tid",
                     tid > 0 ? json_integer(tid) : json_null(), "round", (json_int_t) round,
                     "local", s_int_array(local, n), "remote", s_int_array(remote, n)));
    return tid;
}

static void
s_poll(void *arg, pk_transfer_fn *each, void *each_arg)
{
    s_world_t *w = arg;
    w->inner.poll(w->inner.self, each, each_arg);
}

static int
s_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

static size_t
s_cancel(void *arg, const uint64_t *tids, size_t n, pk_cancel_mode_t mode, uint64_t *still)
{
    s_world_t *w = arg;
    if (n) {
        uint64_t *sorted = malloc(n * sizeof *sorted);
        memcpy(sorted, tids, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, s_cmp_u64);
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(arr, json_integer((json_int_t) sorted[i]));
        free(sorted);
        s_emit(json_pack("{s:s, s:o, s:s}", "out", "cancel", "tids", arr, "mode",
                         mode == PK_CANCEL_WAIT ? "wait" : "immediate"));
    }
    return w->inner.cancel(w->inner.self, tids, n, mode, still);
}

static pk_lookup_result_t
s_lookup(void *arg, const pk_key_t *key, const pk_lookup_ctx_t *ctx)
{
    s_world_t *w = arg;
    pk_keymap_entry_t *e = pk_keymap_find(&w->table, key);
    return e ? (pk_lookup_result_t) e->a : PK_LOOKUP_MISS;
}

static int
s_create_store_job(void *arg, const pk_lookup_ctx_t *ctx, const pk_key_t *keys, size_t n,
                   uint64_t *job_id, uint32_t *blocks, bool *pinned, uint8_t *why)
{
    s_world_t *w = arg;
    *job_id = w->next_job++;
    for (size_t i = 0; i < n; i++) {
        pk_keymap_entry_t *e = pk_keymap_find(&w->table, &keys[i]);
        blocks[i] = e ? (uint32_t) e->b : 0;
        pinned[i] = true;       //  the scripted store never loses a key
    }
    s_emit(json_pack("{s:s, s:s, s:I, s:o, s:I}", "out", "pin", "kv", ctx->kv_request_id,
                     "round", (json_int_t) ctx->round_seq, "keys", s_hex_array(keys, n), "job",
                     (json_int_t) *job_id));
    return 0;
}

static void
s_bracket(const char *what, const pk_lookup_ctx_t *ctx)
{
    s_emit(json_pack("{s:s, s:s, s:I}", "out", what, "kv", ctx->kv_request_id, "round",
                     (json_int_t) ctx->round_seq));
}

static void
s_on_new_request(void *arg, const pk_lookup_ctx_t *ctx)
{
    s_bracket("open", ctx);
}

static void
s_on_request_finished(void *arg, const pk_lookup_ctx_t *ctx)
{
    s_bracket("finished", ctx);
}

static void
s_store_result(void *arg, uint64_t job, bool success)
{
    s_emit(json_pack("{s:s, s:I, s:b}", "out", "result", "job", (json_int_t) job, "success",
                     success));
}

//  --------------------------------------------------------------------------
//  Input

static void __attribute__((noreturn, format(printf, 1, 2)))
s_input_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(s_w->err, "p2pkv-replay: line %ld: ", s_w->lineno);
    vfprintf(s_w->err, fmt, ap);
    fputc('\n', s_w->err);
    va_end(ap);
    fflush(s_w->out);
    longjmp(s_w->fail, 1);
}

static const json_t *
s_field(const json_t *ev, const char *name, json_type type, bool required)
{
    const json_t *j = json_object_get(ev, name);
    if (!j) {
        if (required)
            s_input_error("missing field \"%s\"", name);
        return NULL;
    }
    bool ok = json_typeof(j) == type
              || (type == JSON_TRUE && json_is_boolean(j))
              || (type == JSON_REAL && json_is_number(j));
    if (!ok)
        s_input_error("field \"%s\" has the wrong type", name);
    return j;
}

static uint64_t
s_uint(const json_t *j, const char *name, uint64_t max)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0
        || (uint64_t) json_integer_value(j) > max)
        s_input_error("\"%s\": expected an integer 0..%llu", name, (unsigned long long) max);
    return (uint64_t) json_integer_value(j);
}

static uint64_t
s_opt_uint(const json_t *ev, const char *name, uint64_t dflt, uint64_t max)
{
    const json_t *j = s_field(ev, name, JSON_INTEGER, false);
    return j ? s_uint(j, name, max) : dflt;
}

//  Decodes a list of hex keys into one allocation the world keeps.
static pk_key_t *
s_keys(s_world_t *w, const json_t *ev, const char *name, size_t *n_p)
{
    const json_t *arr = s_field(ev, name, JSON_ARRAY, true);
    size_t n = json_array_size(arr), total = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *k = json_array_get(arr, i);
        if (!json_is_string(k))
            s_input_error("\"%s\"[%zu]: expected a string", name, i);
        size_t len = json_string_length(k);
        if (len == 0 || len % 2 || len > PK_MAX_KEY_HEX)
            s_input_error("\"%s\"[%zu]: expected non-empty lowercase hex of even length", name, i);
        total += len / 2;
    }
    //  the world's at once: a bad hex digit below ends the run
    pk_key_t **arenas = realloc(w->arenas, (w->narenas + 1) * sizeof *w->arenas);
    pk_key_t *keys = arenas ? malloc(n * sizeof *keys + total + 1) : NULL;
    if (arenas)
        w->arenas = arenas;
    if (!keys)
        s_fatal("out of memory");
    w->arenas[w->narenas++] = keys;
    uint8_t *at = (uint8_t *) (keys + n);
    for (size_t i = 0; i < n; i++) {
        const json_t *k = json_array_get(arr, i);
        size_t len = json_string_length(k);
        if (pk_hex_decode(json_string_value(k), len, at) < 0)
            s_input_error("\"%s\"[%zu]: expected non-empty lowercase hex of even length", name, i);
        keys[i] = pk_key_make(at, len / 2);
        at += len / 2;
    }
    *n_p = n;
    return keys;
}

static uint32_t *
s_ints(const json_t *ev, const char *name, size_t want)
{
    const json_t *arr = s_field(ev, name, JSON_ARRAY, true);
    if (json_array_size(arr) != want)
        s_input_error("\"%s\" has %zu items, \"keys\" has %zu", name, json_array_size(arr), want);
    uint32_t *v = s_temp((want ? want : 1) * sizeof *v);
    for (size_t i = 0; i < want; i++)
        v[i] = (uint32_t) s_uint(json_array_get(arr, i), name, UINT32_MAX);
    return v;
}

static uint64_t *
s_tids(const json_t *ev, size_t *n_p)
{
    const json_t *arr = s_field(ev, "tids", JSON_ARRAY, true);
    size_t n = json_array_size(arr);
    uint64_t *v = s_temp((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = s_uint(json_array_get(arr, i), "tids", INT64_MAX);
    *n_p = n;
    return v;
}

//  The first repeat of a key (what 1) or index (what 2) among n, or 0
//  (-1: out of memory).
static int
s_first_repeat(const pk_key_t *keys, const uint32_t *idx, size_t n, size_t *at_p)
{
    pk_keymap_t seen = PK_KEYMAP_INIT, seen_idx = PK_KEYMAP_INIT;
    int what = 0;
    for (size_t i = 0; i < n && !what; i++) {
        pk_key_t ik = pk_key_make((const uint8_t *) &idx[i], sizeof idx[i]);
        int rc = pk_keymap_put(&seen, &keys[i], 0, 0);
        if (rc <= 0)
            what = rc < 0 ? -1 : 1;
        else if ((rc = pk_keymap_put(&seen_idx, &ik, 0, 0)) <= 0)
            what = rc < 0 ? -1 : 2;
        *at_p = i;
    }
    //  the maps go before any error: it does not come back here
    pk_keymap_fini(&seen);
    pk_keymap_fini(&seen_idx);
    return what;
}

static void
s_no_repeats(const pk_key_t *keys, const uint32_t *idx, size_t n)
{
    size_t i = 0;
    int what = s_first_repeat(keys, idx, n, &i);
    if (what < 0)
        s_input_error("out of memory");
    if (what == 1)
        s_input_error("fetch names key %zu twice", i);
    if (what == 2)
        s_input_error("fetch names index %u twice", idx[i]);
}

static const char *
s_kv(const json_t *ev)
{
    return json_string_value(s_field(ev, "kv", JSON_STRING, true));
}

//  --------------------------------------------------------------------------
//  The events of replay.md, one handler each, found through s_events

static void
s_ev_advance(s_world_t *w, const json_t *ev)
{
    double s = json_number_value(s_field(ev, "s", JSON_REAL, true));
    if (!(s >= 0))
        s_input_error("\"s\": expected a number >= 0");
    w->now += s;
}

static void
s_ev_set(s_world_t *w, const json_t *ev)
{
    size_t n = 0;
    pk_key_t *keys = s_keys(w, ev, "keys", &n);
    const char *state = json_string_value(s_field(ev, "state", JSON_STRING, true));
    pk_lookup_result_t res;
    if (strcmp(state, "hit") == 0) res = PK_LOOKUP_HIT;
    else if (strcmp(state, "miss") == 0) res = PK_LOOKUP_MISS;
    else if (strcmp(state, "pending") == 0) res = PK_LOOKUP_HIT_PENDING;
    else if (strcmp(state, "retry") == 0) res = PK_LOOKUP_RETRY;
    else s_input_error("\"state\": expected hit, miss, pending or retry");
    uint32_t *blocks = json_object_get(ev, "blocks") ? s_ints(ev, "blocks", n) : NULL;
    for (size_t i = 0; i < n; i++) {
        pk_keymap_entry_t *e = pk_keymap_find(&w->table, &keys[i]);
        //  a key never given a block pins at block 0; one given keeps it
        uint64_t block = blocks ? blocks[i] : e ? e->b : 0;
        if (pk_keymap_put(&w->table, &keys[i], res, block) < 0)
            s_fatal("out of memory");
    }
}

static void
s_ev_lookup(s_world_t *w, const json_t *ev)
{
    size_t n = 0;
    const char *kv = s_kv(ev);
    pk_key_t *keys = s_keys(w, ev, "keys", &n);
    pk_server_role_on_lookup(w->role, kv, keys, n, s_opt_uint(ev, "round", 0, INT64_MAX));
}

static void
s_ev_serve(s_world_t *w, const json_t *ev)
{
    pk_server_role_serve(w->role);
}

static void
s_ev_fetch(s_world_t *w, const json_t *ev)
{
    size_t n = 0;
    const char *kv = s_kv(ev);
    pk_key_t *keys = s_keys(w, ev, "keys", &n);
    uint32_t *idx = s_ints(ev, "idx", n);
    uint64_t round = s_opt_uint(ev, "round", 0, INT64_MAX);
    s_no_repeats(keys, idx, n);
    if (pk_server_role_on_fetch(w->role, kv, keys, idx, n, round) == -EPROTO) {
        fprintf(w->err, "p2pkv-replay: line %ld: protocol error: duplicate fetch for "
                "kv_request_id=%s round=%llu\n", w->lineno, kv, (unsigned long long) round);
        s_emit(json_pack("{s:s, s:s}", "out", "error", "kind", "protocol"));
    }
}

//  A get (capability get): a lookup whose hits are fetched into idx, the
//  round answered by one get_resp.  Ours: the seed has no get.
static void
s_ev_get(s_world_t *w, const json_t *ev)
{
    size_t n = 0;
    const char *kv = s_kv(ev);
    pk_key_t *keys = s_keys(w, ev, "keys", &n);
    uint32_t *idx = s_ints(ev, "idx", n);
    uint64_t round = s_opt_uint(ev, "round", 0, INT64_MAX);
    if (n == 0)
        s_input_error("\"keys\": a get names at least one key");
    s_no_repeats(keys, idx, n);
    if (pk_server_role_on_get(w->role, kv, keys, idx, n, round) == -EPROTO) {
        fprintf(w->err, "p2pkv-replay: line %ld: protocol error: get for kv_request_id=%s "
                "round=%llu, a round it has already\n", w->lineno, kv, (unsigned long long) round);
        s_emit(json_pack("{s:s, s:s}", "out", "error", "kind", "protocol"));
    }
}

static void
s_ev_store(s_world_t *w, const json_t *ev)
{
    size_t n = 0;
    const char *kv = s_kv(ev);
    pk_key_t *keys = s_keys(w, ev, "keys", &n);
    uint32_t *blocks = s_ints(ev, "blocks", n);
    uint64_t job = s_uint(s_field(ev, "job", JSON_INTEGER, true), "job", INT64_MAX);
    if (job >= FIRST_PIN_JOB)
        s_input_error("\"job\": store job ids must be below %d", FIRST_PIN_JOB);
    if (w->used_jobs[job])
        s_input_error("\"job\": job %llu was used before", (unsigned long long) job);
    w->used_jobs[job] = 1;
    const json_t *round = s_field(ev, "round", JSON_INTEGER, false);
    pk_server_role_store(w->role, kv, keys, blocks, n, job, round != NULL,
                         round ? s_uint(round, "round", INT64_MAX) : 0);
}

static void
s_ev_finish(s_world_t *w, const json_t *ev)
{
    pk_server_role_finish(w->role, s_kv(ev));
}

static void
s_ev_abort(s_world_t *w, const json_t *ev)
{
    const char *kv = s_kv(ev);
    pk_server_role_on_abort(w->role, kv, s_opt_uint(ev, "round", 0, INT64_MAX));
}

static void
s_ev_drain(s_world_t *w, const json_t *ev)
{
    pk_server_role_drain(w->role);
}

static void
s_ev_collect(s_world_t *w, const json_t *ev)
{
    pk_server_role_collect(w->role);
}

static void
s_ev_idle(s_world_t *w, const json_t *ev)
{
    pk_server_role_collect_idle(w->role);
}

static void
s_ev_complete(s_world_t *w, const json_t *ev)
{
    size_t m = 0;
    uint64_t *tids = s_tids(ev, &m);
    const json_t *ok = s_field(ev, "ok", JSON_TRUE, false);
    pk_memtransport_complete(w->mem, tids, m, ok ? json_is_true(ok) : true);
}

static void
s_ev_hold(s_world_t *w, const json_t *ev)
{
    size_t m = 0;
    uint64_t *tids = s_tids(ev, &m);
    pk_memtransport_hold(w->mem, tids, m);
}

static void
s_ev_refuse(s_world_t *w, const json_t *ev)
{
    pk_memtransport_refuse(w->mem, s_opt_uint(ev, "n", 1, INT32_MAX));
}

static void
s_ev_close(s_world_t *w, const json_t *ev)
{
    uint64_t *jobs;
    size_t njobs, owed;
    if (pk_server_role_close(w->role, &jobs, &njobs, &owed) != 0)
        s_fatal("out of memory");
    json_t *arr = json_array();
    for (size_t i = 0; i < njobs; i++)
        json_array_append_new(arr, json_integer((json_int_t) jobs[i]));
    free(jobs);
    s_emit(json_pack("{s:s, s:o, s:I}", "out", "closed", "failed_jobs", arr, "owed",
                     (json_int_t) owed));
    w->closed = true;
}

//  The role of a session where both sides listed `lend` over a transport
//  that lends (the `lend` event): made afresh, so only as the first event.
static pk_server_role_t *
s_role_new(s_world_t *w, bool lend)
{
    pk_server_role_config_t config = PK_SERVER_ROLE_CONFIG_DEFAULT;
    config.lend = lend;
    return pk_server_role_new(
        w->peer, &config, (pk_clock_t) { w, s_clock_now }, (pk_sender_t) { w, s_send },
        (pk_transport_t) { .self = w, .write_blocks = s_write_blocks, .poll = s_poll,
                           .cancel = s_cancel, .lend = lend ? s_lend : NULL },
        (pk_parent_t) { .self = w, .lookup = s_lookup, .create_store_job = s_create_store_job,
                        .on_new_request = s_on_new_request,
                        .on_request_finished = s_on_request_finished,
                        .store_result = s_store_result });
}

static void
s_ev_lend(s_world_t *w, const json_t *ev)
{
    if (w->started)
        s_input_error("\"lend\" must be the first event");
    pk_server_role_t *role = s_role_new(w, true);
    if (!role)
        s_fatal("out of memory");
    pk_server_role_destroy(&w->role);
    w->role = role;
}

static void
s_ev_state(s_world_t *w, const json_t *ev)
{
    pk_server_role_state_t st;
    pk_server_role_state(w->role, &st);
    s_emit(json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "out", "state",
                     "requests", (json_int_t) st.requests,
                     "inflight", (json_int_t) st.inflight,
                     "store_jobs", (json_int_t) st.store_jobs,
                     "aborts", (json_int_t) st.aborts,
                     "serve_pending", (json_int_t) st.serve_pending,
                     "kept", (json_int_t) st.kept));
}

static const struct {
    const char *name;
    void (*run)(s_world_t *w, const json_t *ev);
} s_events[] = {
    { "advance", s_ev_advance },    { "set", s_ev_set },          { "lookup", s_ev_lookup },
    { "serve", s_ev_serve },        { "fetch", s_ev_fetch },      { "store", s_ev_store },
    { "finish", s_ev_finish },      { "abort", s_ev_abort },      { "drain", s_ev_drain },
    { "collect", s_ev_collect },    { "idle", s_ev_idle },        { "complete", s_ev_complete },
    { "hold", s_ev_hold },          { "refuse", s_ev_refuse },    { "close", s_ev_close },
    { "state", s_ev_state },        { "get", s_ev_get },          { "lend", s_ev_lend },
};

//  One line of the scenario; false for a blank or # line, skipped.
static bool
s_line(s_world_t *w, char *line, ssize_t len)
{
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = '\0';
    size_t lead = strspn(line, " \t");
    if (line[lead] == '\0' || line[0] == '#')
        return false;
    if (w->closed)
        s_input_error("an event after close");
    json_error_t jerr;
    json_t *ev = json_loadb(line, (size_t) len, JSON_REJECT_DUPLICATES, &jerr);
    w->ev = ev;                 //  the world's: an error frees it
    if (!ev || !json_is_object(ev))
        s_input_error("not a JSON object%s%s", ev ? "" : ": ", ev ? "" : jerr.text);
    const char *what = json_string_value(s_field(ev, "ev", JSON_STRING, true));
    size_t i = 0, count = sizeof s_events / sizeof s_events[0];
    while (i < count && strcmp(s_events[i].name, what) != 0)
        i++;
    if (i == count)
        s_input_error("unknown event \"%s\"", what);
    s_events[i].run(w, ev);
    w->started = true;
    w->ev = NULL;
    json_decref(ev);
    s_temp_free(w);
    return true;
}


//  Every line of in; setjmp here, where no local changes after it.
static int
s_read_all(s_world_t *w, FILE *in, bool mark)
{
    if (setjmp(w->fail))
        return 2;
    ssize_t len;
    while ((len = getline(&w->line, &w->cap, in)) >= 0) {
        w->lineno++;
        if (s_line(w, w->line, len) && mark)
            s_emit(json_pack("{s:I}", "line", (json_int_t) w->lineno));
    }
    return 0;
}

static void
s_world_fini(s_world_t *w)
{
    json_decref(w->ev);
    s_temp_free(w);
    free(w->line);
    pk_server_role_destroy(&w->role);
    pk_memtransport_destroy(&w->mem);
    pk_keymap_fini(&w->table);
    for (size_t i = 0; i < w->narenas; i++)
        free(w->arenas[i]);
    free(w->arenas);
    free(w->used_jobs);
}

int
pk_replay_run(FILE *in, FILE *out, FILE *err, const char *peer, bool mark)
{
    s_world_t w = { .now = 1000.0, .next_job = FIRST_PIN_JOB, .peer = peer, .out = out,
                    .err = err };
    s_w = &w;
    w.mem = pk_memtransport_new();
    w.inner = w.mem ? pk_memtransport_iface(w.mem) : (pk_transport_t) { 0 };
    w.used_jobs = calloc(FIRST_PIN_JOB, 1);
    w.role = s_role_new(&w, false);
    int rc = 2;
    if (!w.mem || !w.used_jobs || !w.role)
        fprintf(err, "p2pkv-replay: out of memory\n");
    else
        rc = s_read_all(&w, in, mark);
    s_world_fini(&w);
    s_w = NULL;
    return rc;
}
