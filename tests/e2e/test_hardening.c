/*  test_hardening.c: hostile peers and faults against a real p2pkv-server
    (tests/fixtures/daemon.c) over the tcp provider on 127.0.0.1, while a good
    consumer (the client library, in a thread: tests/e2e/hardening.c) fetches
    and checks blocks the whole time.

    s_attacks is the list: each attack a function that sends its hostile
    input (or causes its fault) count times, asserts what must come of it
    (the session that misbehaved ends, the counter of its reason rises by
    exactly what was sent, the server still serves), and reports one line
    (hh_report).  make check runs the short form; make hardening runs the
    long one (P2PKV_HARDENING=long: counts raised, 10,000 connects), and
    scripts/reliability turns its lines into doc/reliability.md.

    After the hostile peers have gone the suite asserts the pass criteria
    of issue 13: the good consumer saw no error and no corrupt byte, every
    pin was released (the pool back to its baseline), and the server's
    resident set is within 10% of what it was before them (after its trim:
    node.c, s_trim_heap; not under AddressSanitizer, whose allocator keeps
    freed memory in quarantine on purpose).

    An engine handle kept open across its server's restart (kill -9 and
    SIGTERM) must have every commit and put refused, and nothing of it
    served (issue 34): against servers of its own, after the faults.

    The server faults (kill -9 and SIGSTOP of a server mid-transfer) run
    against a server of their own, with a witness consumer on the test's
    thread: its fetch ends FAILED, it writes a sentinel into the blocks at
    once, reconnects, and after a fence (a later fetch of the new session
    landed; and nothing of the old one can land once its endpoint was
    closed, protocol.md section 7) no sentinel byte has changed.

    A rolling restart (issue 36, tests/e2e/rolling.c) runs last, in a case
    of its own: servers on a redis-server of their own, SIGTERMed and
    restarted one after the other under consumers fetching by key; no
    get may fail, no block be corrupt.

    Child processes (a consumer to kill or stop, an engine that dies with
    reservations) are this binary again: --child-consumer, --child-engine.
    For a look at one attack: $P2PKV_HARDENING_ONLY, names from s_attacks
    (comma-separated), runs only those; $P2PKV_HARDENING_DEBUG makes the
    child consumers say why a get failed, on stderr.
    No sleep-and-hope: every wait is on a condition, with a bound.
*/
#include "hardening.h"
#include "redis.h"
#include "stranger.h"
#include "base/clock.h"
#include "base/transport.h"
#include "wire/protocol_internal.h"     //  the codec's field tables
#include "testutil.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK 4096
#define POOL 4096                   //  the victim's pool: 16 MiB
#define GOOD_TAG 1
#define GOOD_KEYS 256
#define LOAD_TAG 2                  //  what the child consumers get
#define LOAD_KEYS 1024              //  the pin quota: a quarter of the pool
#define PEER_BLOCKS 64              //  what hostile peers announce
#define MAX_REQUESTS 32
#define MAX_ROUNDS 8
#define MAX_PARKED 2048
#define S_WAIT 60                   //  what must happen, within (s): generous for ASan
                                    //  on a loaded 2-core machine
#define MAX_QUEUED 64

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

static char s_self[4096];           //  this binary, for the child processes
static char s_release[64];          //  the hold hook's file (flood attack)

typedef struct {
    td_t *d;
    hh_good_t *good;
    uint64_t sessions;              //  the sessions that stay (the good consumer's)
    const char *attack;             //  the attack running (s_attacks' name)
    double t0;                      //  when its row began
} ctx_t;

//  Short form, long form.
static uint64_t
s_n(uint64_t short_form, uint64_t long_form)
{
    return hh_long() ? long_form : short_form;
}

static int64_t
s_reason(td_t *d, const char *reason)
{
    return hh_metric(d, "p2pkv_violations_by_reason_total", reason);
}

//  The counter of reason rose by exactly n (waited for, bounded).
static void
s_assert_reason(td_t *d, const char *reason, int64_t before, int64_t n)
{
    int64_t now = hh_metric_reach(d, "p2pkv_violations_by_reason_total", reason, before + n, S_WAIT);
    ck_assert_msg(now == before + n, "violations by reason %s: %" PRId64 " -> %" PRId64
                  ", want +%" PRId64, reason, before, now, n);
}

//  What the good consumer lost during an attack: "nothing", or the test fails.
static const char *
s_nothing_lost(ctx_t *c, const char *attack)
{
    ck_assert_msg(hh_good_advance(c->good, 1, S_WAIT), "%s: the good consumer stalled: %s", attack,
                  c->good->first_error);
    ck_assert_msg(atomic_load(&c->good->errors) == 0 && atomic_load(&c->good->corrupt) == 0,
                  "%s: the good consumer saw %" PRIu64 " errors, %" PRIu64
                  " corrupt bytes: %s", attack, (uint64_t) atomic_load(&c->good->errors),
                  (uint64_t) atomic_load(&c->good->corrupt), c->good->first_error);
    ck_assert_msg(hh_sessions_at_most(c->d, c->sessions, S_WAIT),
                  "%s: hostile sessions still open a minute after the attack", attack);
    return "nothing";
}

//  The attack's row (hh_report): what it did, how many times, with what
//  outcome; what the good consumer lost (s_nothing_lost, which fails the
//  test unless nothing) and the time since the row began (c->t0).
static void
s_row(ctx_t *c, const char *what, uint64_t count, const char *outcome)
{
    hh_report(what, count, outcome, s_nothing_lost(c, c->attack), pk_clock_monotonic() - c->t0);
}

//  The metric reaches exactly want (waited for, bounded).
static void
s_assert_metric(td_t *d, const char *name, const char *label, int64_t want)
{
    int64_t now = hh_metric_reach(d, name, label, want, S_WAIT);
    ck_assert_msg(now == want, "%s: %" PRId64 ", want %" PRId64, name, now, want);
}

//  A clean goodbye from a hostile peer (disconnect shutdown), then gone.
static void
s_goodbye(hp_t **p)
{
    pk_msg_t *bye = pk_msg_new(PK_MSG_DISCONNECT);
    pk_msg_set_code(bye, PK_DISC_SHUTDOWN);
    pk_msg_set_string(bye, PK_F_REASON, "done");
    ck_assert_int_eq(hp_send_msg(*p, bye), 0);
    hp_destroy(p);
}

//  ---------------------------------------------------------------------------
//  Messages generated from the codec's tables (wire/protocol_internal.h):
//  for every type, a valid object of its required members, then each
//  member missing, of the wrong JSON type, out of range, and oversize.

enum { M_MISSING, M_WRONG_TYPE, M_RANGE, M_OVERSIZE, M_COUNT };
static const char *const s_mutation_names[M_COUNT] = {
    "missing", "wrong type", "out of range", "oversize"
};

static char *
s_hex(const uint8_t *bytes, size_t n)
{
    char *hex = malloc(2 * n + 1);
    ck_assert_ptr_nonnull(hex);
    sodium_bin2hex(hex, 2 * n + 1, bytes, n);
    return hex;
}

//  A valid value of a member, for a message of peer p.
static json_t *
s_valid(pk_field_t f, const hp_t *p)
{
    const pk_field_spec_t *s = &pk_wire_fields[f];
    switch (s->kind) {
        case K_STRING: return json_string("x");
        case K_UINT: return json_integer((json_int_t) (s->min > 1 ? s->min : 1));
        case K_BOOL: return json_true();
        case K_EPOCH: {
            char *hex = s_hex(f == PK_F_SOURCE_EPOCH ? p->epoch : p->server_epoch,
                              PK_EPOCH_LEN);
            json_t *j = json_string(hex);
            free(hex);
            return j;
        }
        case K_KEYS: return json_pack("[s]", "abcd");
        case K_INDEXES: return json_pack("[i]", 0);
        case K_HITS: return json_pack("[b]", 1);
        case K_METADATA: return json_string("AAAA");
        case K_CODE: return json_string("violation");
        case K_STRINGS: return json_pack("[s]", "tcp");
    }
    return json_null();
}

//  A message of type with every required member valid, for peer p.
static json_t *
s_valid_message(pk_msg_type_t type, const hp_t *p)
{
    json_t *o = json_pack("{s:s}", "type", pk_wire_messages[type].name);
    for (int g = 0; g < PK_F_COUNT; g++)
        if (pk_wire_messages[type].required & PK_BIT(g))
            json_object_set_new(o, pk_wire_fields[g].name, s_valid((pk_field_t) g, p));
    return o;
}

//  n copies of item, comma-separated, inside [ ].
static char *
s_list(const char *item, size_t n)
{
    size_t len = strlen(item);
    char *out = malloc(n * (len + 1) + 3);
    ck_assert_ptr_nonnull(out);
    char *at = out;
    *at++ = '[';
    for (size_t i = 0; i < n; i++) {
        memcpy(at, item, len);
        at += len;
        *at++ = ',';
    }
    at[-1 + (n == 0)] = ']';
    at[n == 0] = '\0';
    return out;
}

static char *
s_quoted(char c, size_t n)
{
    char *out = malloc(n + 3);
    ck_assert_ptr_nonnull(out);
    out[0] = '"';
    memset(out + 1, c, n);
    out[n + 1] = '"';
    out[n + 2] = '\0';
    return out;
}

//  Base64 of n bytes, quoted.
static char *
s_base64(size_t n)
{
    uint8_t *raw = calloc(1, n);
    size_t len = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(len + 2);
    ck_assert(raw && out);
    out[0] = '"';
    sodium_bin2base64(out + 1, len, raw, n, sodium_base64_VARIANT_ORIGINAL);
    strcat(out, "\"");
    free(raw);
    return out;
}

//  The wrong-typed value of a member (JSON text).
static char *
s_wrong_type(const pk_field_spec_t *s)
{
    switch (s->kind) {
        case K_UINT: return strdup("\"1\"");
        case K_BOOL: return strdup("1");
        case K_KEYS: case K_INDEXES: case K_HITS: return strdup("\"x\"");
        default: return strdup("7");
    }
}

//  Out of its range (JSON text), or NULL when the kind has no range.
static char *
s_out_of_range(const pk_field_spec_t *s)
{
    char buf[64];
    switch (s->kind) {
        case K_STRING: return s->min > 0 ? strdup("\"\"") : NULL;
        case K_UINT:
            if (s->max >= JSON_INT_MAX)
                return strdup("-1");
            snprintf(buf, sizeof buf, "%" PRIu64, s->max + 1);
            return strdup(buf);
        case K_EPOCH: return s_quoted('A', 2 * PK_EPOCH_LEN);
        case K_KEYS: return strdup("[\"abc\"]");
        case K_INDEXES: return strdup("[-1]");
        case K_HITS: return strdup("[true,false]");
        case K_METADATA: return strdup("\"****\"");
        case K_CODE: return strdup("\"nonsense\"");
        case K_STRINGS: return strdup("[]");
        default: return NULL;
    }
}

//  Beyond its size limit (JSON text), or NULL when the kind has none.
static char *
s_oversize(const pk_field_spec_t *s)
{
    switch (s->kind) {
        case K_STRING: return s_quoted('a', s->max + 1);
        //  past int64 jansson refuses the frame (-EBADMSG: dropped, no violation)
        case K_UINT: return s->max < JSON_INT_MAX ? strdup("9223372036854775807") : NULL;
        case K_EPOCH: return s_quoted('a', 2 * PK_EPOCH_LEN + 2);
        case K_KEYS: return s_list("\"ab\"", PK_MAX_LIST + 1);
        case K_INDEXES: return strdup("[2147483648]");
        case K_HITS: return s_list("true", PK_MAX_LIST + 1);
        case K_METADATA: return s_base64(PK_MAX_METADATA + 3);
        case K_CODE: return s_quoted('a', PK_MAX_STRING + 1);
        case K_STRINGS: return s_list("\"tcp\"", PK_MAX_PROVIDERS + 1);
        default: return NULL;
    }
}

//  The frame of type with member f mutated (NULL: not applicable).
static char *
s_mutated(pk_msg_type_t type, pk_field_t f, int how, const hp_t *p)
{
    json_t *o = s_valid_message(type, p);
    const pk_field_spec_t *s = &pk_wire_fields[f];
    char *raw = how == M_WRONG_TYPE ? s_wrong_type(s) : how == M_RANGE ? s_out_of_range(s)
                : how == M_OVERSIZE ? s_oversize(s) : NULL;
    if (how == M_MISSING)
        json_object_del(o, s->name);
    else if (raw)
        json_object_set_new(o, s->name, json_string("@RAW@"));
    char *text = (how == M_MISSING || raw) ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!raw)
        return text;
    char *at = strstr(text, "\"@RAW@\"");
    ck_assert_ptr_nonnull(at);
    char *out = malloc(strlen(text) + strlen(raw) + 1);
    ck_assert_ptr_nonnull(out);
    sprintf(out, "%.*s%s%s", (int) (at - text), text, raw, at + 7);
    free(text);
    free(raw);
    return out;
}

//  One frame in a fresh session: the session ends with violation.
static void
s_violate(td_t *d, const char *peer_id, const char *frame, size_t len, char *reason)
{
    hp_t *p = hp_session(d->endpoint, peer_id, PEER_BLOCKS);
    ck_assert_int_eq(hp_send(p, frame, len), 0);
    hp_expect_disconnect(p, PK_DISC_VIOLATION, 10, reason);
    hp_destroy(&p);
}

//  Every type x every required member x every mutation: each frame one
//  session, ended as malformed.  The codec is asked first that the frame
//  is a violation (-EPROTO), so the generator cannot drift from it.
static void
s_attack_fields(ctx_t *c)
{
    int64_t before = s_reason(c->d, "malformed");
    uint64_t sent = 0;
    for (uint64_t rep = 0; rep < s_n(1, 5); rep++)
        for (int t = 0; t < PK_MSG_COUNT; t++)
            for (int f = 0; f < PK_F_COUNT; f++) {
                if (!(pk_wire_messages[t].required & PK_BIT(f)))
                    continue;
                for (int how = 0; how < M_COUNT; how++) {
                    hp_t *p = hp_new(c->d->endpoint, "fields");
                    char *frame = s_mutated((pk_msg_type_t) t, (pk_field_t) f, how, p);
                    hp_destroy(&p);
                    if (!frame)
                        continue;
                    pk_msg_t *m = NULL;
                    int rc = pk_msg_decode(frame, strlen(frame), &m, NULL);
                    ck_assert_msg(rc == -EPROTO, "%s.%s %s: the codec says %d, not -EPROTO",
                                  pk_wire_messages[t].name, pk_wire_fields[f].name,
                                  s_mutation_names[how], rc);
                    char reason[PK_ERRLEN];
                    s_violate(c->d, "fields", frame, strlen(frame), reason);
                    free(frame);
                    sent++;
                }
            }
    s_assert_reason(c->d, "malformed", before, (int64_t) sent);
    s_row(c, "message fields: each required member of each type missing, wrong type, "
          "out of range, oversize (a session each)", sent,
          "session ended: violation malformed; counted");
}

//  Every message that flows server to consumer, whole and valid, sent by
//  a consumer: a session each, ended as direction.
static void
s_attack_direction(ctx_t *c)
{
    int64_t before = s_reason(c->d, "direction");
    uint64_t sent = 0;
    for (uint64_t rep = 0; rep < s_n(1, 20); rep++)
        for (int t = 0; t < PK_MSG_COUNT; t++) {
            if (pk_wire_messages[t].direction != PK_TO_CONSUMER)
                continue;
            hp_t *p = hp_session(c->d->endpoint, "direction", PEER_BLOCKS);
            json_t *o = s_valid_message((pk_msg_type_t) t, p);
            char *frame = json_dumps(o, JSON_COMPACT);
            json_decref(o);
            ck_assert_int_eq(hp_send(p, frame, strlen(frame)), 0);
            free(frame);
            hp_expect_disconnect(p, PK_DISC_VIOLATION, 10, NULL);
            hp_destroy(&p);
            sent++;
        }
    s_assert_reason(c->d, "direction", before, (int64_t) sent);
    s_row(c, "server-to-consumer messages sent by a consumer", sent,
          "session ended: violation direction; counted");
}

//  Frames that are not a message (not JSON, not an object, not UTF-8, a
//  duplicate member, an unknown type) inside one session: each dropped and
//  counted, the session carries on (it still answers a ping).
static void
s_attack_junk_frames(ctx_t *c)
{
    static const char *const junk[] = {
        "", "{", "[]", "\"lookup\"", "{\"type\":\"lookup\",\"type\":\"ping\"}",
        "\xff\xfe{}", "{\"type\":7}", "{\"type\":\"no_such_type\"}", "null",
    };
    hp_t *p = hp_session(c->d->endpoint, "junk", PEER_BLOCKS);
    int64_t before = hh_metric(c->d, "p2pkv_frames_dropped_total", "junk");
    uint64_t n = s_n(10, 1000), sent = 0;
    for (uint64_t i = 0; i < n; i++)
        for (size_t j = 0; j < sizeof junk / sizeof junk[0]; j++) {
            ck_assert_int_eq(hp_send(p, junk[j], strlen(junk[j])), 0);
            sent++;
            //  the actor works faster than this, but never flood its queue
            if (sent % (MAX_QUEUED / 2) == 0) {
                ck_assert_int_eq(hp_send_msg(p, pk_msg_new(PK_MSG_PING)), 0);
                pk_msg_t *m = hp_until(p, PK_MSG_PONG, S_WAIT);
                ck_assert_msg(m != NULL, "junk frames: no pong after %" PRIu64, sent);
                pk_msg_destroy(&m);
            }
        }
    s_assert_metric(c->d, "p2pkv_frames_dropped_total", "junk", before + (int64_t) sent);
    s_goodbye(&p);
    s_row(c, "junk frames in a session (not JSON, not an object, bad UTF-8, duplicate "
          "member, unknown type)", sent, "dropped and counted; the session carries on");
}

//  ---------------------------------------------------------------------------
//  Floods beyond the per-session limits: each case one session that must
//  end with its reason counted once.

typedef void (s_flood_fn)(hp_t *p, const char *kv);

static pk_msg_t *
s_lookup_msg(const char *kv, uint64_t round, size_t n, uint64_t tag)
{
    p2pkv_key_t *keys = bk_keys(tag, 0, n);
    pk_key_t *k = malloc(n * sizeof *k);
    ck_assert_ptr_nonnull(k);
    for (size_t i = 0; i < n; i++)
        k[i] = pk_key_make(keys[i].bytes, keys[i].len);
    pk_msg_t *m = pk_msg_new(PK_MSG_LOOKUP);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_keys(m, k, n);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, round);
    free(k);
    bk_keys_free(keys);
    return m;
}

//  A fetch of n keys of tag into blocks first.. of the peer's pool.
static pk_msg_t *
s_fetch_msg(const char *kv, uint64_t round, size_t n, uint64_t tag, uint32_t first)
{
    pk_msg_t *m = s_lookup_msg(kv, round, n, tag);
    m->type = PK_MSG_FETCH;
    uint32_t *idx = malloc(n * sizeof *idx);
    ck_assert_ptr_nonnull(idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = first + (uint32_t) i;
    pk_msg_set_block_indexes(m, idx, n);
    free(idx);
    return m;
}

//  Lookups of held keys under ever new requests: each stays live (its hit
//  pinned, waiting for its fetch), one more than --max-requests.
static void
s_flood_requests(hp_t *p, const char *kv)
{
    for (int i = 0; i <= MAX_REQUESTS; i++) {
        char name[96];
        snprintf(name, sizeof name, "%s-%d", kv, i);
        ck_assert_int_eq(hp_send_msg(p, s_lookup_msg(name, (uint64_t) i + 1, 1, GOOD_TAG)), 0);
    }
}

//  One lookup of more keys than --max-parked-keys.
static void
s_flood_lookup_keys(hp_t *p, const char *kv)
{
    ck_assert_int_eq(hp_send_msg(p, s_lookup_msg(kv, 1, MAX_PARKED + 1, 99)), 0);
}

//  Fetches of keys nobody holds (they wait) in new rounds of one request,
//  one more than --max-rounds.
static void
s_flood_rounds(hp_t *p, const char *kv)
{
    for (uint64_t r = 1; r <= MAX_ROUNDS + 1; r++)
        ck_assert_int_eq(hp_send_msg(p, s_fetch_msg(kv, r, 1, 99, (uint32_t) r)), 0);
}

//  Two fetches for the same round of a request with demand.
static void
s_flood_duplicate(hp_t *p, const char *kv)
{
    ck_assert_int_eq(hp_send_msg(p, s_fetch_msg(kv, 1, 1, 99, 0)), 0);
    ck_assert_int_eq(hp_send_msg(p, s_fetch_msg(kv, 1, 1, 99, 1)), 0);
}

//  Fetches into blocks beyond the pool the peer announced (PEER_BLOCKS):
//  the first index past it, and the largest index the codec allows.
static void
s_flood_index(hp_t *p, const char *kv)
{
    static _Atomic unsigned turn;
    pk_msg_t *m = s_fetch_msg(kv, 1, 1, GOOD_TAG, 0);
    m->block_indexes[0] = atomic_fetch_add(&turn, 1) % 2 ? PEER_BLOCKS : PK_MAX_BLOCK_INDEX;
    ck_assert_int_eq(hp_send_msg(p, m), 0);
}

//  One limit broken: reps sessions, each flooded by fn and then ended by
//  the server as a violation of reason, counted once each.
typedef struct {
    const char *peer, *reason;
    s_flood_fn *fn;
    uint64_t short_reps, long_reps;
    const char *what;
} s_limit_t;

static void
s_limit_attack(ctx_t *c, const s_limit_t *l)
{
    c->t0 = pk_clock_monotonic();
    uint64_t reps = s_n(l->short_reps, l->long_reps);
    int64_t before = s_reason(c->d, l->reason);
    for (uint64_t i = 0; i < reps; i++) {
        hp_t *p = hp_session(c->d->endpoint, l->peer, PEER_BLOCKS);
        char kv[64];
        snprintf(kv, sizeof kv, "%s-%" PRIu64, l->peer, i);
        l->fn(p, kv);
        hp_expect_disconnect(p, PK_DISC_VIOLATION, 10, NULL);
        hp_destroy(&p);
    }
    s_assert_reason(c->d, l->reason, before, (int64_t) reps);
    char outcome[128];
    snprintf(outcome, sizeof outcome, "session ended: violation %s; counted", l->reason);
    s_row(c, l->what, reps, outcome);
}

static void
s_limit_attacks(ctx_t *c, const s_limit_t *limits, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s_limit_attack(c, &limits[i]);
}

#define S_LIMITS(c, table) s_limit_attacks((c), (table), sizeof (table) / sizeof (table)[0])

static const s_limit_t s_lookup_limits[] = {
    { "flood-requests", "limit_requests", s_flood_requests, 2, 50,
      "lookup flood: one request more than --max-requests (32) live" },
    { "flood-keys", "limit_lookup_keys", s_flood_lookup_keys, 2, 50,
      "lookup of more keys than --max-parked-keys (2048)" },
};

static const s_limit_t s_fetch_limits[] = {
    { "flood-rounds", "limit_rounds", s_flood_rounds, 2, 50,
      "fetch flood: one round more than --max-rounds (8) in a request" },
    { "dup-fetch", "duplicate_fetch", s_flood_duplicate, 2, 50,
      "a second fetch for a round with demand" },
};

static const s_limit_t s_index_limits[] = {
    { "bad-index", "block_index", s_flood_index, 4, 100,
      "fetch into block indexes beyond the consumer's declared pool" },
};

static void
s_attack_lookup_flood(ctx_t *c)
{
    S_LIMITS(c, s_lookup_limits);
}

static void
s_attack_fetch_flood(ctx_t *c)
{
    S_LIMITS(c, s_fetch_limits);
}

static void
s_attack_block_index(ctx_t *c)
{
    S_LIMITS(c, s_index_limits);
}

//  Aborts of rounds the server never saw, as fast as the socket takes
//  them, four times --max-queued-frames: each is answered at once (no
//  state kept), or the session ends as a flood once the actor fell that
//  far behind.  Either way the counts add up: every abort before the end
//  acknowledged, one flood counted per session that ended.
static void
s_attack_abort_flood(ctx_t *c)
{
    int64_t before = s_reason(c->d, "flood");
    uint64_t reps = s_n(2, 50), n = 4 * MAX_QUEUED, acked = 0, ended = 0;
    for (uint64_t i = 0; i < reps; i++) {
        hp_t *p = hp_session(c->d->endpoint, "abort-flood", PEER_BLOCKS);
        for (uint64_t r = 0; r < n; r++) {
            pk_msg_t *m = pk_msg_new(PK_MSG_ABORT_FETCH);
            char kv[64];
            snprintf(kv, sizeof kv, "abort-%" PRIu64, r % 1000);
            pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
            pk_msg_set_uint(m, PK_F_ROUND_SEQ, r + 1);
            ck_assert_int_eq(hp_send_msg(p, m), 0);
        }
        uint64_t got = 0;
        pk_msg_t *m;
        while (got < n && (m = hp_recv(p, 10))) {
            bool end = m->type == PK_MSG_DISCONNECT;
            ck_assert_msg(!end || (m->code == PK_DISC_VIOLATION
                                   && strstr(m->reason, "frames queued")),
                          "abort flood: disconnect %s", m->reason);
            got += m->type == PK_MSG_ABORT_ACK;
            pk_msg_destroy(&m);
            if (end) {
                ended++;
                break;
            }
        }
        ck_assert_msg(got == n || ended > 0, "abort flood: %" PRIu64 " of %" PRIu64
                      " acknowledged and no disconnect", got, n);
        acked += got;
        hp_destroy(&p);
    }
    s_assert_reason(c->d, "flood", before, (int64_t) ended);
    char outcome[160];
    snprintf(outcome, sizeof outcome, "%" PRIu64 " aborts acknowledged, %" PRIu64
             " sessions ended as flood; counted", acked, ended);
    s_row(c, "abort flood: 4 x --max-queued-frames (64) aborts of unknown rounds",
          reps * n, outcome);
}

//  A peer whose actor stands still (the test hook $P2PKV_TEST_HOLD_SESSION)
//  while it sends more than --max-queued-frames: the door never waits on
//  it; the session ends as a flood, counted once each.
static void
s_attack_queue_flood(ctx_t *c)
{
    int64_t before = s_reason(c->d, "flood");
    uint64_t reps = s_n(2, 20);
    for (uint64_t i = 0; i < reps; i++) {
        unlink(s_release);
        int64_t dropped = hh_metric(c->d, "p2pkv_frames_dropped_total", NULL);
        hp_t *p = hp_session(c->d->endpoint, "held", PEER_BLOCKS);
        for (int f = 0; f < MAX_QUEUED + 16; f++)
            ck_assert_int_eq(hp_send_msg(p, pk_msg_new(PK_MSG_PING)), 0);
        ck_assert_msg(hh_metric_reach(c->d, "p2pkv_frames_dropped_total", NULL, dropped + 1, S_WAIT)
                      > dropped, "queue flood: no frame dropped within a minute");
        FILE *f = fopen(s_release, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
        char reason[PK_ERRLEN];
        hp_expect_disconnect(p, PK_DISC_VIOLATION, 10, reason);
        ck_assert_msg(strstr(reason, "frames queued"), "queue flood: %s", reason);
        hp_destroy(&p);
    }
    s_assert_reason(c->d, "flood", before, (int64_t) reps);
    s_row(c, "frames beyond --max-queued-frames (64) to an actor standing still", reps,
          "session ended: violation flood; counted");
}

//  A peer that sends and never reads (issue 34, point 5): a wire 1.0
//  consumer, whose lookup_resps echo the keys, sends lookups of 4 MiB
//  (--max-parked-keys keys of 1 KiB) under new requests, up to
//  --max-requests, and reads nothing.  The server holds at most
//  --max-unread-bytes of its answers (protocol.md section 6), ends the
//  session as a violation of reason unread, counted once, and its
//  resident memory, read once the peer has sent everything and the
//  counter shows the end, grew by no more than the formula's bound for
//  one session, computed from the settings and what was sent:
//
//      unread answers    max(--max-unread-bytes, A), A = the largest
//                        answer: the lookup's frame + 6 bytes a key + 1 KiB
//      frames queued     max(--max-queued-bytes, F) at its actor, and the
//                        same at the handshake actor (what it sends after
//                        its session ended goes there), F = its largest frame
//      the frame in hand 3 F (the frame, its decoded keys, the answer)
//
//  plus a fixed slack of UNREAD_SLACK for what else moves meanwhile (the
//  good consumer, the heap's own).  Before the bound, the same peer left
//  about all it was answered: 619 MiB for 40 lookups of 16 MiB.
#define UNREAD_MAX (4u << 20)       //  the victim's --max-unread-bytes
#define QUEUED_BYTES (8u << 20)     //  the victim's --max-queued-bytes
#define UNREAD_KEY 1024             //  bytes a key: 2,048 hex digits
#define UNREAD_SLACK (16u << 20)

//  Waits (bounded) until the peer's lookups reach want or a violation
//  unread was counted past before; false if neither came.
static bool
s_took_or_ended(td_t *d, const char *peer, int64_t want, int64_t before)
{
    double deadline = pk_clock_monotonic() + S_WAIT;
    while (pk_clock_monotonic() < deadline) {
        if (s_reason(d, "unread") > before || hh_metric(d, "p2pkv_lookups_total", peer) >= want)
            return true;
        zclock_sleep(1);
    }
    return false;
}

static void
s_attack_unread(ctx_t *c)
{
    uint64_t reps = s_n(1, 5);
    int64_t before = s_reason(c->d, "unread");
    size_t nkeys = MAX_PARKED;
    uint8_t *bytes = malloc(nkeys * UNREAD_KEY);
    pk_key_t *keys = malloc(nkeys * sizeof *keys);
    ck_assert(bytes && keys);
    randombytes_buf(bytes, nkeys * UNREAD_KEY);
    for (size_t i = 0; i < nkeys; i++)
        keys[i] = pk_key_make(bytes + i * UNREAD_KEY, UNREAD_KEY);
    const uint8_t *blob;
    size_t bloblen;
    hh_blob(&blob, &bloblen);
    double growth = 0, bound = 0, sent_mib = 0;
    for (uint64_t rep = 0; rep < reps; rep++) {
        uint64_t rss0 = hh_rss(c->d->pid);
        char peer[32];
        snprintf(peer, sizeof peer, "unread-%" PRIu64, rep);
        hp_t *p = hp_new_unread(c->d->endpoint, peer);
        pk_msg_t *m = hp_connect_msg(p, blob, bloblen, PEER_BLOCKS);
        pk_msg_set_uint(m, PK_F_WIRE_MINOR, 0);     //  wire 1.0: its answers echo the keys
        ck_assert_int_eq(hp_send_msg(p, m), 0);
        pk_msg_t *ack = hp_until(p, PK_MSG_CONNECT_ACK, S_WAIT);
        ck_assert_msg(ack != NULL, "unread: no connect_ack within a minute");
        memcpy(p->server_epoch, ack->source_epoch, PK_EPOCH_LEN);
        pk_msg_destroy(&ack);
        int64_t ended0 = s_reason(c->d, "unread");
        size_t frame_max = 0, sent = 0;
        bool ended = false;
        for (int i = 0; i < MAX_REQUESTS; i++) {
            m = pk_msg_new(PK_MSG_LOOKUP);
            char kv[64];
            snprintf(kv, sizeof kv, "%s-%d", peer, i);
            pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
            pk_msg_set_keys(m, keys, nkeys);
            pk_msg_set_uint(m, PK_F_ROUND_SEQ, (uint64_t) i + 1);
            pk_msg_set_epochs(m, p->epoch, p->server_epoch);
            char *frame;
            size_t len;
            ck_assert_int_eq(pk_msg_encode(m, &frame, &len, NULL), 0);
            pk_msg_destroy(&m);
            ck_assert_int_eq(hp_send(p, frame, len), 0);
            free(frame);
            frame_max = len > frame_max ? len : frame_max;
            sent += len;
            //  one at a time while the session lives, so what is queued
            //  at its actor is not what ends it (that is the flood's row)
            if (!ended) {
                ck_assert_msg(s_took_or_ended(c->d, peer, i + 1, ended0),
                              "unread: lookup %d neither taken nor the session ended", i);
                ended = s_reason(c->d, "unread") > ended0;
            }
        }
        //  everything sent; the end, waited for on its counter
        s_assert_reason(c->d, "unread", ended0, 1);
        uint64_t rss1 = hh_rss(c->d->pid);
        double answer = (double) frame_max + 6.0 * nkeys + 1024;
        double queued = QUEUED_BYTES > frame_max ? QUEUED_BYTES : (double) frame_max;
        double b = (UNREAD_MAX > answer ? UNREAD_MAX : answer) + 2 * queued + 3.0 * frame_max
                   + UNREAD_SLACK;
        double g = (double) rss1 - (double) rss0;
        ck_assert_msg(UNDER_ASAN || g <= b, "unread: VmRSS grew %.1f MiB, the bound is %.1f MiB"
                      " (%zu bytes sent)", g / 1048576, b / 1048576, sent);
        growth = g > growth ? g : growth;
        bound = b;
        sent_mib = sent / 1048576.0;
        //  and the peer, once it reads, learns why: its disconnect follows
        //  the answers it had left
        char reason[PK_ERRLEN];
        hp_expect_disconnect(p, PK_DISC_VIOLATION, 20, reason);
        ck_assert_msg(strstr(reason, "bytes of answers unread"), "unread: %s", reason);
        hp_destroy(&p);
    }
    s_assert_reason(c->d, "unread", before, (int64_t) reps);
    free(keys);
    free(bytes);
    char outcome[256];
    if (UNDER_ASAN)
        snprintf(outcome, sizeof outcome, "session ended: violation unread; counted (VmRSS not "
                 "checked under AddressSanitizer)");
    else
        snprintf(outcome, sizeof outcome, "session ended: violation unread; counted; VmRSS "
                 "+%.1f MiB of %.0f MiB sent, within the bound %.1f MiB", growth / 1048576,
                 sent_mib, bound / 1048576);
    s_row(c, "a wire 1.0 peer that sends 32 lookups of 4 MiB (keys echoed) and never reads "
          "(--max-unread-bytes 4 MiB)", reps, outcome);
}

//  Connects of one peer_id, each with a fresh epoch (a restart each time):
//  every one acknowledged, the session before it retired.
static void
s_attack_connect_churn(ctx_t *c)
{
    uint64_t n = s_n(100, 10000);
    int64_t opened = hh_metric(c->d, "p2pkv_sessions_opened_total", NULL);
    hp_t *last = NULL;
    for (uint64_t i = 0; i < n; i++) {
        hp_t *p = hp_session(c->d->endpoint, "churn", PEER_BLOCKS);
        hp_destroy(&last);
        last = p;
        //  bounded in time as well as count
        ck_assert_msg(pk_clock_monotonic() - c->t0 < 1800, "churn: over 30 minutes at %" PRIu64,
                      i);
    }
    s_goodbye(&last);
    s_assert_metric(c->d, "p2pkv_sessions_opened_total", NULL, opened + (int64_t) n);
    s_row(c, "connects with fresh epochs (one peer_id restarting)", n,
          "each acknowledged; the session before it retired");
}

//  Connects whose address blob is random bytes: refused as incompatible
//  before any channel exists, each counted.
static void
s_attack_junk_blobs(ctx_t *c)
{
    uint64_t n = s_n(20, 2000);
    int64_t before = hh_metric(c->d, "p2pkv_connect_blobs_refused_total", NULL);
    json_t *st = td_stats_json(c->d);
    json_int_t channels = json_integer_value(
        json_object_get(json_object_get(st, "fabric"), "channels_opened"));
    json_decref(st);
    for (uint64_t i = 0; i < n; i++) {
        uint8_t junk[1024];
        size_t len = 1 + randombytes_uniform(sizeof junk);
        randombytes_buf(junk, len);
        hp_t *p = hp_new(c->d->endpoint, "junk-blob");
        pk_msg_t *m = hp_connect(p, junk, len, PEER_BLOCKS, 10);
        ck_assert_msg(m && m->type == PK_MSG_DISCONNECT && m->code == PK_DISC_INCOMPATIBLE,
                      "junk blob: %s", m ? pk_msg_type_name(m->type) : "no answer");
        pk_msg_destroy(&m);
        hp_destroy(&p);
    }
    s_assert_metric(c->d, "p2pkv_connect_blobs_refused_total", NULL, before + (int64_t) n);
    st = td_stats_json(c->d);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(st, "fabric"),
                                                        "channels_opened")), channels);
    json_decref(st);
    s_row(c, "junk address blobs in connect", n,
          "refused incompatible, no channel opened; counted");
}

//  A frame of 64 MiB + 1 byte, one more than --max-frame (its default):
//  libzmq refuses it by its size header and drops the connection (our
//  socket sees the disconnect), no byte of it reaches the session, and
//  the server carries on.
static void
s_attack_oversize_frame(ctx_t *c)
{
    uint64_t n = s_n(1, 5);
    size_t size = ((size_t) 64 << 20) + 1;
    char *big = malloc(size);
    ck_assert_ptr_nonnull(big);
    memset(big, ' ', size);
    for (uint64_t i = 0; i < n; i++) {
        hp_t *p = hp_session(c->d->endpoint, "oversize", PEER_BLOCKS);
        int64_t frames = hh_metric(c->d, "p2pkv_frames_total", "oversize");
        char monitor[64];
        snprintf(monitor, sizeof monitor, "inproc://hardening-monitor-%" PRIu64, i);
        ck_assert_int_eq(zmq_socket_monitor(zsock_resolve(p->dealer), monitor,
                                            ZMQ_EVENT_DISCONNECTED), 0);
        zsock_t *events = zsock_new_pair(monitor);
        ck_assert_ptr_nonnull(events);
        zsock_set_rcvtimeo(events, 20000);
        ck_assert_int_eq(hp_send(p, big, size), 0);
        zmsg_t *ev = zmsg_recv(events);
        ck_assert_msg(ev != NULL, "oversize frame: the connection was not dropped in 20 s");
        zmsg_destroy(&ev);
        zsock_destroy(&events);
        ck_assert_int_eq(hh_metric(c->d, "p2pkv_frames_total", "oversize"), frames);
        hp_destroy(&p);
    }
    free(big);
    s_row(c, "a frame of 64 MiB + 1 (beyond --max-frame)", n,
          "connection dropped by libzmq; nothing reached the session");
}

static int
s_tcp_to(const char *endpoint)
{
    int port = 0;
    ck_assert_int_eq(sscanf(strrchr(endpoint, ':') + 1, "%d", &port), 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    ck_assert_int_eq(connect(fd, (struct sockaddr *) &sa, sizeof sa), 0);
    return fd;
}

//  Raw TCP to the ZMTP port, three ways, then closed (the last one reset):
//  a partial greeting; a whole ZMTP 3.0 greeting (NULL mechanism), READY
//  as a DEALER and a frame that says 200 bytes and carries 20; a whole
//  greeting, then a reset.  Nothing of it becomes a session.
static void
s_half_written(const char *endpoint, int way)
{
    uint8_t out[256] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0, 'N', 'U', 'L', 'L' };
    size_t len = 64;
    static const uint8_t ready[] = { 0x04, 28, 5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o', 'c',
                                     'k', 'e', 't', '-', 'T', 'y', 'p', 'e', 0, 0, 0, 6, 'D',
                                     'E', 'A', 'L', 'E', 'R' };
    if (way == 0)
        len = 11;
    if (way == 1) {
        memcpy(out + len, ready, sizeof ready);
        len += sizeof ready;
        out[len++] = 0x00;          //  a message frame, short, last
        out[len++] = 200;           //  of 200 bytes...
        memset(out + len, 'j', 20); //  ...of which 20 come
        len += 20;
    }
    int fd = s_tcp_to(endpoint);
    ck_assert_int_eq(write(fd, out, len), (ssize_t) len);
    if (way == 2) {
        struct linger l = { 1, 0 };
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    close(fd);
}

static void
s_attack_half_written(ctx_t *c)
{
    uint64_t n = s_n(20, 2000);
    int64_t opened = hh_metric(c->d, "p2pkv_sessions_opened_total", NULL);
    for (uint64_t i = 0; i < n; i++)
        for (int way = 0; way < 3; way++)
            s_half_written(c->d->endpoint, way);
    //  the door still answers a newcomer, and nothing became a session
    p2pkv_description_t desc;
    char err[P2PKV_ERRLEN] = "";
    ck_assert_msg(p2pkv_describe(c->d->endpoint, 10, &desc, err) == 0, "describe: %s", err);
    ck_assert_int_eq(hh_metric(c->d, "p2pkv_sessions_opened_total", NULL), opened);
    s_row(c, "raw TCP to the ZMTP port: a partial greeting; a truncated frame; a reset; "
          "each then closed", 3 * n, "connections dropped; no session; the door serves");
}

//  ---------------------------------------------------------------------------
//  Faults of consumers and engines: child processes (this binary again)

typedef struct {
    pid_t pid;
    int out;                        //  what it reports: a byte per get
    uint64_t ok, failed, corrupt;
} child_t;

static void
s_child_start(child_t *ch, const char *const *args)
{
    memset(ch, 0, sizeof *ch);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t parent = getpid();
    ch->pid = fork();
    ck_assert_int_ge(ch->pid, 0);
    if (ch->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        const char *argv[16] = { s_self };
        for (int i = 0; args[i] && i < 14; i++)
            argv[i + 1] = args[i];
        execv(s_self, (char *const *) argv);
        _exit(127);
    }
    close(fds[1]);
    ch->out = fds[0];
}

//  Reads what the child said within timeout (stopping early once
//  ok >= want_ok); false at end of file.
static bool
s_child_read(child_t *ch, uint64_t want_ok, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    while (ch->ok < want_ok && pk_clock_monotonic() < deadline) {
        struct pollfd pfd = { ch->out, POLLIN, 0 };
        if (poll(&pfd, 1, 10) <= 0)
            continue;
        char buf[64];
        ssize_t r = read(ch->out, buf, sizeof buf);
        if (r <= 0)
            return false;
        for (ssize_t i = 0; i < r; i++) {
            ch->ok += buf[i] == 'o';
            ch->failed += buf[i] == 'x';
            ch->corrupt += buf[i] == 'c';
        }
    }
    return true;
}

static void
s_child_kill(child_t *ch)
{
    kill(ch->pid, SIGKILL);
    int status;
    ck_assert_int_eq(waitpid(ch->pid, &status, 0), ch->pid);
    close(ch->out);
}

//  --child-consumer ENDPOINT PEER: gets the LOAD_TAG keys again and again,
//  checking every byte; writes o (whole), x (failed) or c (corrupt).
static int
s_child_consumer(const char *endpoint, const char *peer)
{
    p2pkv_config_t cfg = { .peer_id = peer, .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = "127.0.0.1", .load_timeout = 5,
                           .keepalive_interval = 0.3, .silence_timeout = 3 };
    char err[P2PKV_ERRLEN] = "";
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, LOAD_KEYS, BLOCK,
                                              (p2pkv_callbacks_t) { 0 }, err);
    int server = client ? p2pkv_client_connect(client, endpoint, 10, err) : -1;
    if (server < 0)
        return 1;
    p2pkv_key_t *keys = bk_keys(LOAD_TAG, 0, LOAD_KEYS);
    uint32_t *dest = malloc(LOAD_KEYS * sizeof *dest);
    bool *landed = malloc(LOAD_KEYS);
    uint8_t *pool = p2pkv_client_pool(client);
    for (uint64_t n = 0; dest && landed; n++) {
        for (uint32_t i = 0; i < LOAD_KEYS; i++)
            dest[i] = i;
        memset(pool, 0, (size_t) LOAD_KEYS * BLOCK);
        char kv[64];
        snprintf(kv, sizeof kv, "child-%" PRIu64, n);
        int rc = p2pkv_client_get(client, server, kv, keys, dest, LOAD_KEYS, true, 5, landed,
                                  NULL, NULL, err);
        char said = rc == LOAD_KEYS ? 'o' : 'x';
        if (getenv("P2PKV_HARDENING_DEBUG") && rc != LOAD_KEYS) {
            char why[P2PKV_ERRLEN] = "";
            int st = p2pkv_client_server_state(client, server, why);
            fprintf(stderr, "child %s: get %d: %s (server state %d: %s)\n", peer, rc, err, st,
                    why);
        }
        for (uint32_t i = 0; rc == LOAD_KEYS && i < LOAD_KEYS; i++)
            if (bk_block_diff(pool + (size_t) i * BLOCK, LOAD_TAG, i, BLOCK))
                said = 'c';
        if (write(STDOUT_FILENO, &said, 1) != 1)
            break;
        //  a get drives only its own answers: reconnecting is poll's
        //  work (no progress thread here)
        while (p2pkv_client_server_state(client, server, NULL) != P2PKV_SERVER_UP)
            p2pkv_client_poll(client, 0.05);
    }
    return 1;
}

//  --child-engine LOCAL TAG: reserves 64 keys of TAG, says r, and dies
//  (SIGKILL) before it commits.
static int
s_child_engine(const char *local, const char *tag)
{
    char err[P2PKV_ERRLEN] = "";
    p2pkv_engine_t *engine = p2pkv_engine_open(local, 10, NULL, NULL, err);
    if (!engine)
        return 1;
    p2pkv_key_t *keys = bk_keys(strtoull(tag, NULL, 10), 0, 64);
    uint32_t blocks[64];
    if (p2pkv_engine_reserve(engine, keys, 64, blocks, err) != 0)
        return 1;
    if (write(STDOUT_FILENO, "r", 1) != 1)
        return 1;
    raise(SIGKILL);
    return 1;
}

//  The pins of everything but the good consumer are gone (it holds at
//  most one batch, 16), within a bound.
static bool
s_pins_released(ctx_t *c, double timeout)
{
    double deadline = pk_clock_monotonic() + timeout;
    while (td_stats(td_api(c->d)).pinned > 16) {
        if (pk_clock_monotonic() >= deadline)
            return false;
        zclock_sleep(5);
    }
    return true;
}

//  A consumer getting 1,024 blocks, killed (SIGKILL) while its round holds
//  its pins: its session is retired and every pin released.
static void
s_attack_kill_consumer(ctx_t *c)
{
    uint64_t n = s_n(2, 20), caught = 0, tries = 0;
    //  a get that lands between two looks at the counters was not caught
    //  mid-transfer: it is tried again (3n tries at most)
    while (caught < n && tries++ < 3 * n) {
        child_t ch;
        s_child_start(&ch, (const char *const[]) { "--child-consumer", c->d->endpoint,
                                                    "child-kill", NULL });
        //  mid-transfer: more pinned than the good consumer ever holds
        double deadline = pk_clock_monotonic() + S_WAIT;
        bool seen;
        while (!(seen = td_stats(td_api(c->d)).pinned > 16) && pk_clock_monotonic() < deadline)
            zclock_sleep(1);
        caught += seen;
        s_child_kill(&ch);
        ck_assert_msg(hh_sessions_at_most(c->d, c->sessions, S_WAIT),
                      "killed consumer: its session still open a minute on");
        ck_assert_msg(s_pins_released(c, S_WAIT), "killed consumer: pins not released");
    }
    ck_assert_uint_eq(caught, n);
    s_row(c, "kill -9 of a consumer mid-transfer (while its 1,024-block get held pins)", n,
          "session retired (silent); every pin released");
}

//  A consumer stopped (SIGSTOP) for longer than the server's silence
//  timeout, then continued: the server retired its session meanwhile; it
//  reconnects and gets whole blocks again; never a corrupt one.
static void
s_attack_stop_consumer(ctx_t *c)
{
    uint64_t n = s_n(1, 10);
    for (uint64_t i = 0; i < n; i++) {
        child_t ch;
        s_child_start(&ch, (const char *const[]) { "--child-consumer", c->d->endpoint,
                                                    "child-stop", NULL });
        ck_assert_msg(s_child_read(&ch, 2, 20) && ch.ok >= 2, "stopped consumer: no gets");
        int64_t retired = hh_metric(c->d, "p2pkv_sessions_retired_total", NULL);
        kill(ch.pid, SIGSTOP);
        ck_assert_msg(hh_metric_reach(c->d, "p2pkv_sessions_retired_total", NULL, retired + 1,
                                      S_WAIT) > retired, "stopped consumer: never retired");
        ck_assert_msg(s_pins_released(c, S_WAIT), "stopped consumer: pins not released");
        kill(ch.pid, SIGCONT);
        uint64_t before = ch.ok;
        bool alive = s_child_read(&ch, before + 2, 30);
        ck_assert_msg(alive && ch.ok >= before + 2, "continued consumer: %s; %" PRIu64
                      " whole gets, %" PRIu64 " failed after SIGCONT within 30 s",
                      alive ? "alive" : "exited", ch.ok - before, ch.failed);
        ck_assert_uint_eq(ch.corrupt, 0);
        s_child_kill(&ch);
        ck_assert_msg(hh_sessions_at_most(c->d, c->sessions, S_WAIT), "stopped consumer: lingers");
    }
    s_row(c, "SIGSTOP of a consumer past the silence timeout (10 s), then SIGCONT", n,
          "retired as silent, pins released; reconnected, whole blocks again");
}

//  A client that sends a fetch of 1,024 blocks and then never polls again
//  (no progress thread): its endpoint is never progressed, it never pings.
//  The server's session for it ends (stall or silence) and every pin it
//  held is released; the client is destroyed only after that.
static void
s_attack_no_poll(ctx_t *c)
{
    uint64_t n = s_n(1, 10);
    p2pkv_key_t *keys = bk_keys(LOAD_TAG, 0, LOAD_KEYS);
    uint32_t *dest = malloc(LOAD_KEYS * sizeof *dest);
    ck_assert_ptr_nonnull(dest);
    for (uint32_t i = 0; i < LOAD_KEYS; i++)
        dest[i] = i;
    for (uint64_t i = 0; i < n; i++) {
        p2pkv_config_t cfg = { .peer_id = "no-poll", .fingerprint = "fp", .hash_seed = "7",
                               .provider = "tcp", .node = "127.0.0.1" };
        char err[P2PKV_ERRLEN] = "";
        p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, LOAD_KEYS, BLOCK,
                                                  (p2pkv_callbacks_t) { 0 }, err);
        ck_assert_msg(client != NULL, "%s", err);
        int server = p2pkv_client_connect(client, c->d->endpoint, 10, err);
        ck_assert_msg(server >= 0, "no-poll: %s", err);
        int64_t fetches = hh_metric(c->d, "p2pkv_fetches_total", "no-poll");
        uint64_t id;
        ck_assert_int_eq(p2pkv_client_fetch(client, server, "lazy", keys, dest, LOAD_KEYS, 0, 0,
                                            &id), 0);
        //  polled only until the fetch went out
        double deadline = pk_clock_monotonic() + S_WAIT;
        while (hh_metric(c->d, "p2pkv_fetches_total", "no-poll") <= fetches
               && pk_clock_monotonic() < deadline)
            p2pkv_client_poll(client, 0);
        ck_assert_msg(pk_clock_monotonic() < deadline, "no-poll: the fetch never went out");
        ck_assert_msg(hh_sessions_at_most(c->d, c->sessions, S_WAIT),
                      "no-poll: its session still open a minute on");
        ck_assert_msg(s_pins_released(c, S_WAIT), "no-poll: pins not released");
        p2pkv_client_destroy(&client);
    }
    free(dest);
    bk_keys_free(keys);
    s_row(c, "a client that never polls after its fetch (no progress thread)", n,
          "session retired; every pin released");
}

//  An engine that reserves 64 blocks and dies (SIGKILL) before its commit:
//  after --lease-timeout (1 s) the blocks are FREE again.
static void
s_attack_engine_dies(ctx_t *c)
{
    uint64_t n = s_n(2, 20);
    p2pkv_engine_stats_t before = td_stats(td_api(c->d));
    for (uint64_t i = 0; i < n; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "%" PRIu64, 1000 + i);
        child_t ch;
        s_child_start(&ch, (const char *const[]) { "--child-engine", c->d->local, tag, NULL });
        char said = 0;
        struct pollfd pfd = { ch.out, POLLIN, 0 };
        ck_assert_int_eq(poll(&pfd, 1, 10000), 1);
        ck_assert_int_eq(read(ch.out, &said, 1), 1);
        ck_assert_int_eq(said, 'r');
        int status;
        ck_assert_int_eq(waitpid(ch.pid, &status, 0), ch.pid);
        ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        close(ch.out);
        ck_assert_uint_ge(td_stats(td_api(c->d)).writing, before.writing + 64);
        double deadline = pk_clock_monotonic() + S_WAIT;
        p2pkv_engine_stats_t now;
        while ((now = td_stats(td_api(c->d))).writing > before.writing
               && pk_clock_monotonic() < deadline)
            zclock_sleep(10);
        ck_assert_uint_eq(now.writing, before.writing);
        ck_assert_uint_eq(now.free, before.free);
    }
    s_row(c, "an engine that reserves 64 blocks and dies (kill -9) before commit", n,
          "the blocks FREE again after the lease timeout");
}

//  A store the engine makes for a consumer that never fetches it: the
//  store job times out (--store-timeout, 1.5 s), counted, its pins released.
static void
s_attack_store_pending(ctx_t *c)
{
    uint64_t n = s_n(2, 20);
    p2pkv_key_t *keys = bk_keys(GOOD_TAG, 0, 16);
    int64_t before = hh_metric(c->d, "p2pkv_store_timeouts_total", NULL);
    for (uint64_t i = 0; i < n; i++) {
        hp_t *p = hp_session(c->d->endpoint, "store-never", PEER_BLOCKS);
        char kv[64], err[P2PKV_ERRLEN] = "";
        snprintf(kv, sizeof kv, "never-%" PRIu64, i);
        uint64_t job;
        ck_assert_int_eq(p2pkv_engine_store(td_api(c->d), "store-never", kv, keys, 16, -1, &job,
                                            err), 0);
        //  it pings meanwhile, so it is the store that ends, not the session
        double deadline = pk_clock_monotonic() + S_WAIT;
        int64_t now;
        while ((now = hh_metric(c->d, "p2pkv_store_timeouts_total", NULL))
               < before + (int64_t) i + 1 && pk_clock_monotonic() < deadline) {
            ck_assert_int_eq(hp_send_msg(p, pk_msg_new(PK_MSG_PING)), 0);
            pk_msg_t *pong = hp_until(p, PK_MSG_PONG, S_WAIT);
            ck_assert_msg(pong != NULL, "store pending: the session ended");
            pk_msg_destroy(&pong);
            zclock_sleep(100);
        }
        ck_assert_int_eq(now, before + (int64_t) i + 1);
        ck_assert_msg(s_pins_released(c, S_WAIT), "store pending: pins not released");
        hp_destroy(&p);
    }
    bk_keys_free(keys);
    s_row(c, "a store for a consumer that never fetches it (pending forever)", n,
          "store job timed out, counted; pins released");
}

//  Strangers on the data plane (issue 34): a libfabric peer with no
//  session, knowing a consumer's endpoint address but not its key, writes
//  one block at a time under keys it guesses, each on a new connection
//  (tests/fixtures/stranger.c), counting up from 1 (what keys were) and random.
//  The consumer holds two sessions' registrations of one pool, as a
//  consumer of two servers does.  Nothing lands: every byte as it was, no
//  immediate counted.  The control, the announced key through the same
//  stranger, lands, so the check can fail.
static void
s_stranger_progress(void *arg)
{
    pk_channel_t **chs = arg;
    pk_channel_progress(chs[0]);
    pk_channel_progress(chs[1]);
}

static void
s_attack_strangers(ctx_t *c)
{
    const pk_transport_ops_t *o = pk_transport_find("ofi");
    char err[PK_ERRLEN] = "";
    int rc = 0;
    const uint64_t blocks = 64;
    uint8_t *pool = aligned_alloc(4096, blocks * BLOCK);
    ck_assert_ptr_nonnull(pool);
    memset(pool, 0xee, blocks * BLOCK);
    pk_fabric_config_t fc = { "tcp", "127.0.0.1", 5.0, 0, false };
    pk_fabric_t *fabric = pk_fabric_open(o, &fc, pool, blocks, BLOCK, &rc, err);
    ck_assert_msg(fabric != NULL, "fabric: %s", err);
    pk_channel_t *chs[2];
    for (int i = 0; i < 2; i++) {
        chs[i] = pk_channel_new(fabric, true, &rc, err);
        ck_assert_msg(chs[i] != NULL, "channel: %s", err);
    }
    uint8_t *blob;
    size_t len;
    ck_assert_int_eq(pk_channel_blob(chs[0], &blob, &len), 0);
    ts_stranger_t *x = ts_stranger_new(blob, len, BLOCK, 0x5a, err);
    free(blob);
    ck_assert_msg(x != NULL, "stranger: %s", err);
    size_t count = s_n(1000, 5000);
    uint64_t *keys = ts_guessed_keys(count);
    ck_assert_ptr_nonnull(keys);
    int64_t done = ts_stranger_write(x, keys, 2 * count, blocks, 120, s_stranger_progress, chs);
    ck_assert_msg(done >= 0, "the stranger's writes did not end within 120 s");
    uint64_t right = ts_stranger_blob_key(x);
    ck_assert_int_eq(ts_stranger_write(x, &right, 1, 1, 20, s_stranger_progress, chs), 1);
    double deadline = pk_clock_monotonic() + S_WAIT;
    while (pk_channel_landed(chs[0], 1) < 1 && pk_clock_monotonic() < deadline)
        s_stranger_progress(chs);
    ck_assert_msg(pk_channel_landed(chs[0], 1) == 1, "the control write did not land");
    ck_assert_uint_eq(pk_channel_landed(chs[1], 1), 0);
    //  block 0 took the control's bytes; every other byte is as it was
    for (size_t k = 0; k < BLOCK; k++)
        ck_assert_uint_eq(pool[k], 0x5a);
    for (size_t k = BLOCK; k < blocks * BLOCK; k++)
        ck_assert_msg(pool[k] == 0xee, "byte %zu changed by a stranger", k);
    free(keys);
    ts_stranger_destroy(&x);
    for (int i = 0; i < 2; i++)
        pk_channel_close(&chs[i]);
    pk_fabric_close(&fabric);
    free(pool);
    s_row(c, "strangers on the data plane: one-block writes at guessed registration keys "
          "(counting up from 1, and random), each on a new connection, into a consumer's "
          "pool of two sessions", 2 * count,
          "0 landed (every byte kept, no immediate counted); the control, the announced key, "
          "landed");
}

//  The same strangers against a puller (issue 34): a server's pull is a
//  consumer too, whose registration covers the server's whole pool, the
//  blocks it serves included.  A fake source (a ROUTER of this test)
//  answers the pull's describe and connect and so learns its data-plane
//  address, as an observer of the control plane would; it never answers
//  the lookup, so the pull's session and registration stay up while the
//  stranger writes under guessed keys.  Nothing lands in the server's
//  pool but the control, the announced key's write, which shows the
//  check can fail; then the source ends the session and the pull fails.
static void
s_fake_send(zsock_t *router, zframe_t *rid, pk_msg_t *m)
{
    char *text, err[PK_ERRLEN] = "";
    size_t len;
    ck_assert_msg(pk_msg_encode(m, &text, &len, err) == 0, "%s", err);
    zframe_send(&rid, router, ZFRAME_MORE | ZFRAME_REUSE);
    zmq_send(zsock_resolve(router), text, len, 0);
    free(text);
    pk_msg_destroy(&m);
}

//  Answers describe, connect and the lookup (a hit) until the fetch came,
//  which it leaves open: a consumer progresses its endpoint while a fetch
//  is open (lib/client/client.c, s_landing), so the stranger's writes are
//  read and judged, not left waiting.  Gives the connect's blob
//  (malloc'd) and the puller's routing id and epoch.
static zframe_t *
s_fake_source(zsock_t *router, uint8_t *epoch, uint8_t **blob_p, size_t *len_p)
{
    static const uint8_t ours[PK_EPOCH_LEN] = { 7 };
    zsock_set_rcvtimeo(router, 20000);
    for (;;) {
        zframe_t *rid = zframe_recv(router), *f = rid ? zframe_recv(router) : NULL;
        ck_assert_msg(f != NULL, "the pull never reached its source");
        pk_msg_t *m = NULL;
        ck_assert_int_eq(pk_msg_decode(zframe_data(f), zframe_size(f), &m, NULL), 0);
        zframe_destroy(&f);
        pk_msg_t *a = NULL;
        if (m->type == PK_MSG_DESCRIBE) {
            a = pk_msg_new(PK_MSG_DESCRIPTION);
            pk_msg_set_string(a, PK_F_CONFIG_FINGERPRINT, "fp");
            pk_msg_set_string(a, PK_F_HASH_SEED, "7");
            pk_msg_set_string(a, PK_F_PROVIDER, "tcp");
        }
        else if (m->type == PK_MSG_CONNECT) {
            memcpy(epoch, m->source_epoch, PK_EPOCH_LEN);
            *len_p = m->agent_metadata_len;
            *blob_p = malloc(*len_p);
            ck_assert_ptr_nonnull(*blob_p);
            memcpy(*blob_p, m->agent_metadata, *len_p);
            a = pk_msg_new(PK_MSG_CONNECT_ACK);
            pk_msg_set_uint(a, PK_F_NUM_BLOCKS, 64);
            pk_msg_set_epochs(a, ours, epoch);
        }
        else if (m->type == PK_MSG_LOOKUP) {
            pk_msg_t *r = pk_msg_new(PK_MSG_LOOKUP_RESP);
            bool hit = true;
            pk_msg_set_string(r, PK_F_KV_REQUEST_ID, m->kv_request_id);
            pk_msg_set_hits(r, &hit, 1);
            r->keys.count = 1;      //  a keyless answer: its hits count (protocol.h)
            pk_msg_set_uint(r, PK_F_ROUND_SEQ, m->round_seq);
            pk_msg_set_epochs(r, ours, epoch);
            s_fake_send(router, rid, r);
        }
        if (a) {
            pk_msg_set_uint(a, PK_F_WIRE_MAJOR, PK_WIRE_MAJOR);
            pk_msg_set_uint(a, PK_F_WIRE_MINOR, PK_WIRE_MINOR);
            pk_msg_set_string(a, PK_F_PEER_ID, "fake-source");
            pk_msg_set_uint(a, PK_F_BLOCK_LEN, BLOCK);
            s_fake_send(router, rid, a);
        }
        bool fetched = m->type == PK_MSG_FETCH;
        pk_msg_destroy(&m);
        if (fetched)
            return rid;
        zframe_destroy(&rid);
    }
}

static void
s_no_progress(void *arg)
{
    (void) arg;                     //  the puller's own thread progresses it
}

static void
s_attack_puller_strangers(ctx_t *c)
{
    //  a server of its own, whose pull outlives the attack: no pings to
    //  answer, no timeout while the stranger writes
    static const char *const flags[] = { "--silence-timeout", "1000", "--keepalive-interval",
                                         "1000", "--load-timeout", "1000", NULL };
    td_t p;
    td_start(&p, flags);
    char endpoint[64];
    td_fixed_endpoint(endpoint, sizeof endpoint);
    zsock_t *router = zsock_new(ZMQ_ROUTER);
    ck_assert_ptr_nonnull(router);
    ck_assert_int_ge(zsock_bind(router, "%s", endpoint), 0);
    size_t poolen;
    uint8_t *pool = td_pool_map(&p, &poolen);
    uint8_t *before = malloc(poolen);
    ck_assert_ptr_nonnull(before);
    memcpy(before, pool, poolen);

    char err[PK_ERRLEN] = "";
    uint64_t pull = 0;
    size_t fetching = 0;
    p2pkv_key_t key = { (const uint8_t *) "pulled", 6 };
    ck_assert_msg(p2pkv_engine_pull(td_api(&p), endpoint, &key, 1, &pull, &fetching, NULL, err)
                  == 0, "pull: %s", err);
    ck_assert_uint_eq(fetching, 1);
    uint8_t epoch[PK_EPOCH_LEN], *blob = NULL;
    size_t len = 0;
    zframe_t *rid = s_fake_source(router, epoch, &blob, &len);

    ts_stranger_t *x = ts_stranger_new(blob, len, BLOCK, 0x5a, err);
    ck_assert_msg(x != NULL, "stranger: %s", err);
    uint64_t blocks = poolen / BLOCK;
    size_t count = s_n(1000, 5000);
    uint64_t *keys = ts_guessed_keys(count);
    ck_assert_ptr_nonnull(keys);
    ck_assert_msg(ts_stranger_write(x, keys, 2 * count, blocks, 120, s_no_progress, NULL) >= 0,
                  "the stranger's writes did not end within 120 s");
    for (size_t k = 0; k < poolen; k++)
        ck_assert_msg(pool[k] == before[k], "byte %zu of the server's pool changed by a "
                      "stranger", k);
    uint64_t right = ts_stranger_blob_key(x);
    ck_assert_int_eq(ts_stranger_write(x, &right, 1, 1, 20, s_no_progress, NULL), 1);
    double deadline = pk_clock_monotonic() + S_WAIT;
    while (pool[0] != 0x5a && pk_clock_monotonic() < deadline)
        zclock_sleep(5);            //  the puller's thread lands it: waited for, bounded
    for (size_t k = 0; k < BLOCK; k++)
        ck_assert_msg(pool[k] == 0x5a, "the control write did not land (byte %zu)", k);

    //  the source goes; the pull fails, and the server stops cleanly
    pk_msg_t *bye = pk_msg_new(PK_MSG_DISCONNECT);
    pk_msg_set_code(bye, PK_DISC_SHUTDOWN);
    pk_msg_set_string(bye, PK_F_REASON, "the test's source leaves");
    pk_msg_set_epochs(bye, (const uint8_t[PK_EPOCH_LEN]) { 7 }, epoch);
    s_fake_send(router, rid, bye);
    p2pkv_engine_event_t ev;
    do
        ck_assert_int_eq(p2pkv_engine_next_event(td_api(&p), 30, &ev), 0);
    while (ev.kind != P2PKV_EVENT_PULL);
    ck_assert_uint_eq(ev.id, pull);
    ck_assert(!ev.success);
    free(keys);
    ts_stranger_destroy(&x);
    zframe_destroy(&rid);
    free(blob);
    free(before);
    munmap(pool, poolen);
    zsock_destroy(&router);
    ck_assert_int_eq(td_stop(&p), 0);
    s_row(c, "strangers on a puller's data plane: the same writes into the registration of "
          "the server's whole pool that its pull holds", 2 * count,
          "0 landed (every byte of the pool kept); the control, the announced key, landed");
}

//  Squatted engine sockets (issue 34, point 6): another user (nobody)
//  binds the path a new server is to serve its engine on, in a shared
//  sticky directory as /tmp, before the server starts.  The server
//  refuses to start, naming the owner; an engine refuses the socket, so
//  the squatter accepts no connection and is handed no block.  The
//  suite's own server and its good consumer go on meanwhile.  Needs root
//  (to chown to nobody): without it the row is not written.
static void
s_attack_squatted_socket(ctx_t *c)
{
    if (geteuid() != 0) {
        printf("squatted-socket: not tried: chown to nobody needs root\n");
        return;
    }
    uint64_t n = s_n(3, 20);
    const uid_t nobody = 65534;
    char dir[] = "/tmp/pk-squat-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chmod(dir, 01777), 0);
    const char *bin = getenv("P2PKV_SERVER") ? getenv("P2PKV_SERVER") : "bin/p2pkv-server";
    for (uint64_t i = 0; i < n; i++) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s/engine-%" PRIu64 ".sock", dir, i);
        int squat = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(squat, 0);
        ck_assert_int_eq(bind(squat, (struct sockaddr *) &sa, sizeof sa), 0);
        ck_assert_int_eq(listen(squat, 8), 0);
        ck_assert_int_eq(chown(sa.sun_path, nobody, (gid_t) -1), 0);
        char local[160], pool[64];
        snprintf(local, sizeof local, "ipc://%s", sa.sun_path);
        snprintf(pool, sizeof pool, "/pk-squat-%d-%" PRIu64, (int) getpid(), i);
        int errpipe[2];
        ck_assert_int_eq(pipe2(errpipe, O_CLOEXEC), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            dup2(errpipe[1], STDERR_FILENO);
            int null = open("/dev/null", O_WRONLY);
            dup2(null, STDOUT_FILENO);
            execl(bin, bin, "--local", local, "--bind", "tcp://127.0.0.1:*", "--pool-name", pool,
                  "--pool-blocks", "8", "--block-len", "4096", "--provider", "tcp",
                  (char *) NULL);
            _exit(127);
        }
        close(errpipe[1]);
        char said[2048] = "";
        size_t at = 0;
        ssize_t got;
        while (at < sizeof said - 1 && (got = read(errpipe[0], said + at, sizeof said - 1 - at)) > 0)
            at += (size_t) got;
        close(errpipe[0]);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1,
                      "squatted-socket: the server did not refuse to start: %s", said);
        ck_assert_msg(strstr(said, "is a socket of uid 65534, not this server's uid 0"),
                      "squatted-socket: the server's refusal: %s", said);
        char err[P2PKV_ERRLEN] = "";
        ck_assert_ptr_null(p2pkv_engine_open(local, 1, NULL, NULL, err));
        ck_assert_msg(strstr(err, "belongs to uid 65534"), "squatted-socket: engine: %s", err);
        //  nothing ever connected: the squatter's queue is empty
        ck_assert_int_eq(accept4(squat, NULL, NULL, SOCK_NONBLOCK), -1);
        ck_assert_int_eq(errno, EAGAIN);
        close(squat);
        unlink(sa.sun_path);
    }
    rmdir(dir);
    s_row(c, "squatted engine socket: another user's socket (nobody's) at a new server's "
          "--local, bound before it starts", n, "the server refused to start, naming the owner; "
          "the engine refused the socket; the squatter accepted 0 connections");
}

//  Blocks corrupted at rest and in flight (issue 34), against a server of
//  their own: a byte flipped in the server's pool after the blocks were
//  committed (a bad disk, a stray write), and bytes changed after the
//  lookup answer announced their checksum and before the server wrote
//  them (what a change on the way looks like to the consumer).  Every such
//  block is a corrupt result, never reported landed; the whole blocks of
//  the same fetches land; a server whose blocks fail 8 times in a row
//  (max_corrupt) has its session ended as hostile, once.
static uint8_t *
s_block_in(uint8_t *pool, size_t len, uint64_t tag, uint64_t i)
{
    for (size_t off = 0; off + BLOCK <= len; off += BLOCK)
        if (bk_block_ok(pool + off, tag, i, BLOCK))
            return pool + off;
    ck_abort_msg("block %" PRIu64 " of tag %" PRIu64 " is not in the pool", i, tag);
    return NULL;
}

typedef struct {
    atomic_int answers;
    uint64_t round;
    bool hit;
} s_look_t;

static void
s_on_look(void *arg, int server, const char *kv, uint64_t round, const p2pkv_key_t *keys,
          const bool *hits, size_t n)
{
    (void) server, (void) kv, (void) keys;
    s_look_t *l = arg;
    l->round = round;
    l->hit = hits && n && hits[0];
    atomic_fetch_add(&l->answers, 1);
}

static void
s_attack_corrupt_blocks(ctx_t *c)
{
    enum { TAG = 9 };
    size_t n = s_n(32, 256);
    td_t d;
    td_start(&d, (const char *const[]) { "--pool-blocks", "2048", NULL });
    p2pkv_key_t *keys = bk_keys(TAG, 0, 2 * n);
    bk_publish(&d, keys, 2 * n, TAG, BLOCK);
    size_t len;
    uint8_t *pool = td_pool_map(&d, &len);
    //  at rest: every other block of the first n
    static uint8_t *at[512];
    for (size_t i = 0; i < n; i++)
        at[i] = s_block_in(pool, len, TAG, i);
    for (size_t i = 0; i < n; i += 2)
        at[i][BLOCK / 2] ^= 0x01;       //  the last (odd) one whole: no run left over
    char err[P2PKV_ERRLEN] = "";
    p2pkv_config_t cfg = { .peer_id = "corrupt-witness", .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = "127.0.0.1", .load_timeout = 10,
                           .no_reconnect = true };
    s_look_t look = { 0 };
    p2pkv_client_t *cl = p2pkv_client_new(&cfg, NULL, 2 * n, BLOCK,
                                           (p2pkv_callbacks_t) { .arg = &look,
                                                                 .on_lookup = s_on_look }, err);
    ck_assert_msg(cl != NULL, "%s", err);
    int server = p2pkv_client_connect(cl, d.endpoint, 10, err);
    ck_assert_msg(server >= 0, "%s", err);
    uint32_t *dest = malloc(2 * n * sizeof *dest);
    p2pkv_key_result_t *res = malloc(2 * n * sizeof *res);
    ck_assert(dest && res);
    for (size_t i = 0; i < 2 * n; i++)
        dest[i] = (uint32_t) i;
    uint8_t *mine = p2pkv_client_pool(cl);
    int got = p2pkv_client_get_results(cl, server, "at-rest", keys, dest, n, true, 10, res,
                                       NULL, NULL, err);
    ck_assert_msg(got == (int) (n / 2), "at rest: %d landed of %zu: %s", got, n, err);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(res[i].status, i % 2 ? P2PKV_KEY_LANDED : P2PKV_KEY_CORRUPT);
        ck_assert(res[i].verified);
        if (i % 2)
            ck_assert(bk_block_ok(mine + i * BLOCK, TAG, i, BLOCK));
    }
    s_row(c, "blocks corrupted at rest: a byte flipped in the server's pool after their "
          "commit (every other block of the gets)", n / 2, "each a corrupt result, never "
          "reported landed; the whole blocks of the same gets landed, verified");
    //  in flight: blocks changed between the lookup answer (their
    //  checksums announced) and the fetch's write, one fetch each, by the
    //  callbacks' API: each ends FAILED, saying corrupt; the eighth in a
    //  row ends the session as hostile
    c->t0 = pk_clock_monotonic();
    enum { RUN = 8 };
    for (size_t i = n; i < n + RUN; i++) {
        char kv[32];
        snprintf(kv, sizeof kv, "in-flight-%zu", i);
        int answers = atomic_load(&look.answers);
        ck_assert_int_eq(p2pkv_client_lookup(cl, server, kv, &keys[i], 1), 0);
        double until = pk_clock_monotonic() + 10;
        while (atomic_load(&look.answers) == answers && pk_clock_monotonic() < until)
            p2pkv_client_poll(cl, 0.05);
        ck_assert_msg(look.hit, "in flight: block %zu not a hit", i);
        s_block_in(pool, len, TAG, i)[7] ^= 0x20;
        uint64_t id;
        ck_assert_int_eq(p2pkv_client_fetch(cl, server, kv, &keys[i], &dest[i], 1, look.round,
                                            0, &id), 0);
        char reason[256] = "";
        int status;
        until = pk_clock_monotonic() + 10;
        while ((status = p2pkv_client_fetch_status(cl, id, reason)) == -EINPROGRESS
               && pk_clock_monotonic() < until)
            p2pkv_client_poll(cl, 0.05);
        ck_assert_int_eq(status, P2PKV_FAILED);
        ck_assert_msg(strstr(reason, "corrupt: 1 of 1 blocks"), "in flight: %s", reason);
        if (i + 1 < n + RUN)
            ck_assert_int_eq(p2pkv_client_finish(cl, server, kv), 0);
    }
    p2pkv_check_stats_t checks;
    p2pkv_client_checks(cl, &checks);
    ck_assert_uint_eq(checks.corrupt, n / 2 + RUN);
    ck_assert_uint_eq(checks.hostile, 1);
    char why[P2PKV_ERRLEN] = "";
    ck_assert_int_ne(p2pkv_client_server_state(cl, server, why), P2PKV_SERVER_UP);
    ck_assert_msg(strstr(why, "hostile"), "state: %s", why);
    s_row(c, "blocks changed after their checksum was announced, before the server wrote "
          "them (as bytes altered on the way)", RUN, "each fetch FAILED \"corrupt: 1 of 1 "
          "blocks\", never landed; the eighth in a row ended the session as hostile, counted "
          "once (p2pkv_client_checks)");
    free(dest);
    free(res);
    p2pkv_client_destroy(&cl);
    munmap(pool, len);
    bk_keys_free(keys);
    ck_assert_int_eq(td_stop(&d), 0);
}

//  A CURVE key revoked mid-transfer (after the witness's code below).
static void s_attack_curve_revoked(ctx_t *c);

//  ---------------------------------------------------------------------------
//  The list, and the pass criteria after it

typedef void (s_attack_fn)(ctx_t *c);

static const struct {
    const char *name;
    s_attack_fn *fn;
} s_attacks[] = {
    { "fields", s_attack_fields },
    { "direction", s_attack_direction },
    { "junk-frames", s_attack_junk_frames },
    { "lookup-flood", s_attack_lookup_flood },
    { "fetch-flood", s_attack_fetch_flood },
    { "abort-flood", s_attack_abort_flood },
    { "queue-flood", s_attack_queue_flood },
    { "unread", s_attack_unread },
    { "block-index", s_attack_block_index },
    { "connect-churn", s_attack_connect_churn },
    { "junk-blobs", s_attack_junk_blobs },
    { "oversize-frame", s_attack_oversize_frame },
    { "half-written", s_attack_half_written },
    { "kill-consumer", s_attack_kill_consumer },
    { "stop-consumer", s_attack_stop_consumer },
    { "no-poll", s_attack_no_poll },
    { "engine-dies", s_attack_engine_dies },
    { "store-pending", s_attack_store_pending },
    { "curve-revoked", s_attack_curve_revoked },
    { "strangers", s_attack_strangers },
    { "puller-strangers", s_attack_puller_strangers },
    { "corrupt-blocks", s_attack_corrupt_blocks },
    { "squatted-socket", s_attack_squatted_socket },
};

//  The silence timeout is 10 s (both sides: the good consumer's too): at
//  1.5 s and at 3 s the good consumer's session was retired as silent
//  about one run in five under ASan on a loaded 2-core machine, at
//  attacks that start processes (curve-revoked, squatted-socket), which
//  is this machine's stall, not a hostile peer's doing.
static const char *const s_victim_flags[] = {
    "--pool-blocks", "4096", "--max-requests", "32", "--max-rounds", "8",
    "--max-parked-keys", "2048", "--max-queued-frames", "64", "--lookup-timeout", "0.5",
    "--store-timeout", "1.5", "--lease-timeout", "1", "--stall-timeout", "1",
    "--drain-timeout", "1", "--silence-timeout", "10", "--max-sessions", "64",
    "--max-unread-bytes", "4194304", "--max-queued-bytes", "8388608", NULL
};

//  Once every peer left: resident memory back within 10% of its value
//  before any came (the server trims after reaping, twice a second at
//  most: waited for, bounded).  The row is reported either way (a failed
//  one says FAILED); the caller asserts the answer once the other
//  criteria were checked too.
static bool
s_rss_back(td_t *d, uint64_t before)
{
    if (UNDER_ASAN) {
        hh_report("server resident memory once every peer left (idle before, idle after)", 1,
                  "not checked under AddressSanitizer (its quarantine keeps freed memory)",
                  "-", 0);
        return true;
    }
    double deadline = pk_clock_monotonic() + S_WAIT;
    uint64_t after = hh_rss(d->pid);
    while (after > before + before / 10 && pk_clock_monotonic() < deadline) {
        zclock_sleep(100);
        after = hh_rss(d->pid);
    }
    bool ok = after <= before + before / 10;
    char outcome[128];
    snprintf(outcome, sizeof outcome, "%sVmRSS %.1f MiB before, %.1f MiB after (%+.1f%%)",
             ok ? "" : "FAILED (over 10%): ", before / 1048576.0, after / 1048576.0,
             100.0 * ((double) after - before) / before);
    if (!ok) {
        //  where it stays: the mappings holding over 1 MiB
        char cmd[256];
        snprintf(cmd, sizeof cmd, "awk '/^[0-9a-f]+-/{m=$0} /^Rss:/{if ($2 > 1024) print $2, m}' "
                 "/proc/%d/smaps >&2", (int) d->pid);
        if (system(cmd) != 0)
            fprintf(stderr, "smaps: no\n");
    }
    hh_report("server resident memory once every peer left (idle before, idle after)", 1, outcome, "-", 0);
    return ok;
}

START_TEST(test_hostile_peers)
{
    td_t d;
    char hold[128];
    snprintf(hold, sizeof hold, "held:%s", s_release);
    setenv("P2PKV_TEST_HOLD_SESSION", hold, 1);
    td_start(&d, s_victim_flags);
    unsetenv("P2PKV_TEST_HOLD_SESSION");
    bk_fill(&d, GOOD_TAG, GOOD_KEYS, BLOCK);
    bk_fill(&d, LOAD_TAG, LOAD_KEYS, BLOCK);
    p2pkv_engine_stats_t base = td_stats(td_api(&d));
    //  idle before, idle after: a live endpoint's own memory grows with its
    //  use (the good consumer's, in libfabric's buffers), which is not what
    //  the hostile peers left behind
    uint64_t rss = hh_rss(d.pid);
    hh_good_t good;
    hh_good_start(&good, d.endpoint, GOOD_TAG, GOOD_KEYS, BLOCK);
    ctx_t c = { .d = &d, .good = &good, .sessions = 1 };
    const char *only = getenv("P2PKV_HARDENING_ONLY");
    for (size_t i = 0; i < sizeof s_attacks / sizeof s_attacks[0]; i++)
        if (!only || strstr(only, s_attacks[i].name)) {
            c.attack = s_attacks[i].name;
            c.t0 = pk_clock_monotonic();
            s_attacks[i].fn(&c);
        }
    s_nothing_lost(&c, "all attacks");
    hh_good_stop(&good);
    ck_assert_uint_eq(atomic_load(&good.errors), 0);
    ck_assert_uint_eq(atomic_load(&good.corrupt), 0);
    //  every pin released, every reservation returned: the pool's baseline
    p2pkv_engine_stats_t now = td_stats(td_api(&d));
    double deadline = pk_clock_monotonic() + S_WAIT;
    while ((now.pinned || now.writing != base.writing) && pk_clock_monotonic() < deadline) {
        zclock_sleep(10);
        now = td_stats(td_api(&d));
    }
    ck_assert_uint_eq(now.pinned, 0);
    ck_assert_uint_eq(now.writing, base.writing);
    ck_assert_uint_eq(now.ready, base.ready);
    char outcome[160];
    snprintf(outcome, sizeof outcome, "%" PRIu64 " gets, %" PRIu64 " blocks checked; "
             "pool back to baseline (pinned 0)", (uint64_t) atomic_load(&good.gets),
             (uint64_t) atomic_load(&good.blocks));
    hh_report("the good consumer, throughout", 1, outcome, "nothing (0 errors, 0 corrupt bytes)",
              0);
    ck_assert_msg(hh_sessions_at_most(&d, 0, 10), "a session outlived its consumer");
    bool rss_back = s_rss_back(&d, rss);
    hh_blob_close();
    ck_assert_int_eq(td_stop(&d), 0);
    ck_assert_msg(rss_back, "server RSS over 10%% above its value before the peers came");
}
END_TEST

//  ---------------------------------------------------------------------------
//  Faults of a server mid-transfer, seen by its witness consumer

#define FBLOCK (64 * 1024)
#define FLOAD 2000                  //  blocks of the load: 125 MiB
#define FFENCE 16                   //  and of the fence after it
#define SENTINEL 0x5e

typedef struct {
    p2pkv_client_t *client;
    int server;
    uint64_t round;
    size_t nhits;
    int lookups;
    uint64_t fetch_id;
    int ended;
    p2pkv_status_t status;
    uint32_t *dest;                 //  of fetch_id: sentinel when it fails
    size_t n;
} wit_t;

static void
s_wit_lookup(void *arg, int server, const char *kv, uint64_t round, const p2pkv_key_t *keys,
             const bool *hits, size_t n)
{
    wit_t *w = arg;
    if (!hits)
        return;
    w->lookups++;
    w->round = round;
    w->nhits = 0;
    for (size_t i = 0; i < n; i++)
        w->nhits += hits[i];
}

//  A failed fetch's blocks are the caller's again at once: the sentinel
//  goes in before anything else of this poll can land.
static void
s_wit_fetch(void *arg, int server, uint64_t id, p2pkv_status_t status, const char *reason)
{
    wit_t *w = arg;
    if (id != w->fetch_id)
        return;
    w->ended++;
    w->status = status;
    uint8_t *pool = p2pkv_client_pool(w->client);
    for (size_t i = 0; status != P2PKV_LANDED && i < w->n; i++)
        memset(pool + (size_t) w->dest[i] * FBLOCK, SENTINEL, FBLOCK);
}

#define S_POLL_UNTIL(w, cond, timeout) ({                                      \
        double deadline_ = pk_clock_monotonic() + (timeout);                   \
        while (!(cond) && pk_clock_monotonic() < deadline_)                    \
            ck_assert_int_ge(p2pkv_client_poll((w)->client, 0.002), 0);        \
        (cond);                                                                \
    })

//  me: the witness's CURVE keypair, for server's key (NULL: no CURVE).
static void
s_wit_open(wit_t *w, const char *endpoint, zcert_t *me, zcert_t *server)
{
    memset(w, 0, sizeof *w);
    p2pkv_config_t cfg = { .peer_id = "witness", .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = "127.0.0.1", .load_timeout = 20,
                           .abort_ack_timeout = 2, .keepalive_interval = 0.3,
                           .silence_timeout = 2, .connect_retry = 0.2, .stall_timeout = 1 };
    if (me) {
        cfg.curve_public = zcert_public_txt(me);
        cfg.curve_secret = zcert_secret_txt(me);
        cfg.curve_server = zcert_public_txt(server);
    }
    p2pkv_callbacks_t cb = { .arg = w, .on_lookup = s_wit_lookup, .on_fetch = s_wit_fetch };
    char err[P2PKV_ERRLEN] = "";
    w->client = p2pkv_client_new(&cfg, NULL, FLOAD + FFENCE, FBLOCK, cb, err);
    ck_assert_msg(w->client != NULL, "witness: %s", err);
    w->server = p2pkv_client_connect(w->client, endpoint, 10, err);
    ck_assert_msg(w->server >= 0, "witness: %s", err);
    w->dest = malloc((FLOAD + FFENCE) * sizeof *w->dest);
    ck_assert_ptr_nonnull(w->dest);
    for (uint32_t i = 0; i < FLOAD + FFENCE; i++)
        w->dest[i] = i;
}

//  Looks up keys first..first+n-1 and fetches them into the same blocks.
static void
s_wit_get(wit_t *w, const char *kv, const p2pkv_key_t *keys, size_t first, size_t n)
{
    int before = w->lookups;
    ck_assert_int_eq(p2pkv_client_lookup(w->client, w->server, kv, keys + first, n), 0);
    ck_assert_msg(S_POLL_UNTIL(w, w->lookups > before, 10), "witness: no lookup answer");
    ck_assert_uint_eq(w->nhits, n);
    w->ended = 0;
    w->n = first ? 0 : n;           //  only the load gets the sentinel
    memset(p2pkv_client_pool(w->client) + first * FBLOCK, 0, n * FBLOCK);
    ck_assert_int_eq(p2pkv_client_fetch(w->client, w->server, kv, keys + first,
                                        w->dest + first, n, w->round, 0, &w->fetch_id), 0);
}

//  The bytes of blocks first..first+n-1 that are not the pattern.
static size_t
s_wit_diff(wit_t *w, size_t first, size_t n)
{
    size_t bad = 0;
    for (size_t i = first; i < first + n; i++)
        bad += bk_block_diff(p2pkv_client_pool(w->client) + i * FBLOCK, 3, i, FBLOCK);
    return bad;
}

static void
s_fault_server_start(td_t *s, const char *endpoint)
{
    td_start(s, (const char *const[]) { "--bind", endpoint, "--pool-blocks", "2048",
                                        "--block-len", "65536", "--pin-quota", "2048", NULL });
    bk_fill(s, 3, FLOAD + FFENCE, FBLOCK);
}

//  The load's fetch, caught mid-transfer: its first block landed and the
//  fetch not ended when the server was stopped (SIGSTOP).  false when the
//  whole load ended first (then it was checked whole: tried again).
static bool
s_catch_mid_transfer(wit_t *w, td_t *s, const p2pkv_key_t *keys, int attempt)
{
    char kv[32];
    snprintf(kv, sizeof kv, "load-%d", attempt);
    s_wit_get(w, kv, keys, 0, FLOAD);
    uint8_t *pool = p2pkv_client_pool(w->client);
    ck_assert(S_POLL_UNTIL(w, w->ended || !bk_block_diff(pool, 3, 0, FBLOCK), 20));
    if (!w->ended)
        kill(s->pid, SIGSTOP);
    //  an answer already on its way may still end it whole
    p2pkv_client_poll(w->client, 0);
    if (!w->ended)
        return true;
    kill(s->pid, SIGCONT);
    ck_assert(S_POLL_UNTIL(w, w->ended, 20));
    ck_assert_int_eq(w->status, P2PKV_LANDED);
    ck_assert_uint_eq(s_wit_diff(w, 0, FLOAD), 0);
    ck_assert_int_eq(p2pkv_client_finish(w->client, w->server, kv), 0);
    return false;
}

//  One fault: killed (and restarted on the same endpoint) or stopped past
//  the witness's silence timeout (then continued).  The fetch ends FAILED,
//  the witness reconnects, a fence fetch lands whole, and the sentinel it
//  wrote at the failure is intact.
static void
s_server_fault(td_t *s, const char *endpoint, bool killed, const p2pkv_key_t *keys)
{
    wit_t w;
    s_wit_open(&w, endpoint, NULL, NULL);
    bool caught = false;
    for (int attempt = 0; attempt < 10 && !caught; attempt++)
        caught = s_catch_mid_transfer(&w, s, keys, attempt);
    ck_assert_msg(caught, "the load always ended before the fault: 10 tries");
    if (killed)
        td_kill(s);
    ck_assert_msg(S_POLL_UNTIL(&w, w.ended, 20), "the fetch did not end within 20 s");
    ck_assert_int_eq(w.status, P2PKV_FAILED);
    if (killed)
        s_fault_server_start(s, endpoint);
    else
        kill(s->pid, SIGCONT);
    ck_assert_msg(S_POLL_UNTIL(&w, p2pkv_client_server_state(w.client, w.server, NULL)
                                   == P2PKV_SERVER_UP, 20), "the witness did not reconnect");
    s_wit_get(&w, "fence", keys, FLOAD, FFENCE);
    ck_assert_msg(S_POLL_UNTIL(&w, w.ended, 20), "the fence fetch did not end");
    ck_assert_int_eq(w.status, P2PKV_LANDED);
    ck_assert_uint_eq(s_wit_diff(&w, FLOAD, FFENCE), 0);
    ck_assert_int_eq(p2pkv_client_finish(w.client, w.server, "fence"), 0);
    //  after the fence: no byte of the failed load's blocks has changed
    uint8_t *pool = p2pkv_client_pool(w.client);
    size_t changed = 0;
    for (size_t i = 0; i < (size_t) FLOAD * FBLOCK; i++)
        changed += pool[i] != SENTINEL;
    ck_assert_msg(changed == 0, "%zu bytes changed after the fetch was reported FAILED",
                  changed);
    free(w.dest);
    p2pkv_client_destroy(&w.client);
}

//  ---------------------------------------------------------------------------
//  A CURVE key revoked mid-transfer

//  A server of its own with CURVE: DIR/server_secret, DIR/allow holding
//  the witness's (revoked here) and a second consumer's (the fence's)
//  public certificates.
typedef struct {
    char dir[64], allow[96], secret[128], witness_pub[128];
    zcert_t *server, *witness, *fence;
} s_curve_t;

static void
s_curve_new(s_curve_t *k)
{
    memset(k, 0, sizeof *k);
    snprintf(k->dir, sizeof k->dir, "/tmp/p2pkv-hard-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(k->dir));
    snprintf(k->allow, sizeof k->allow, "%s/allow", k->dir);
    ck_assert_int_eq(mkdir(k->allow, 0700), 0);
    char path[160];
    k->server = zcert_new();
    snprintf(path, sizeof path, "%s/server", k->dir);
    ck_assert_int_eq(zcert_save(k->server, path), 0);
    snprintf(k->secret, sizeof k->secret, "%s/server_secret", k->dir);
    k->witness = zcert_new();
    k->fence = zcert_new();
    snprintf(k->witness_pub, sizeof k->witness_pub, "%s/witness", k->allow);
    ck_assert_int_eq(zcert_save_public(k->witness, k->witness_pub), 0);
    snprintf(path, sizeof path, "%s/fence", k->allow);
    ck_assert_int_eq(zcert_save_public(k->fence, path), 0);
}

static void
s_curve_destroy(s_curve_t *k)
{
    zcert_destroy(&k->server);
    zcert_destroy(&k->witness);
    zcert_destroy(&k->fence);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", k->dir);
    ck_assert_int_eq(system(cmd), 0);
}

//  One revocation: the witness's load caught mid-transfer (server stopped),
//  its key revoked (certificate removed, SIGHUP), the server continued.
//  true when the load failed as the session ended; false when it landed
//  whole first (checked whole; the caller tries again on a fresh server).
static bool
s_revoke_once(s_curve_t *k, const p2pkv_key_t *keys, int64_t *revoked)
{
    //  allowed again (the last try revoked it) before the server reads DIR
    ck_assert_int_eq(zcert_save_public(k->witness, k->witness_pub), 0);
    td_t s;
    td_start(&s, (const char *const[]) { "--curve-secret", k->secret, "--curve-allow", k->allow,
                                         "--pool-blocks", "2048", "--block-len", "65536",
                                         "--pin-quota", "2048", NULL });
    bk_fill(&s, 3, FLOAD + FFENCE, FBLOCK);
    wit_t w;
    s_wit_open(&w, s.endpoint, k->witness, k->server);
    bool caught = false;
    for (int attempt = 0; attempt < 10 && !caught; attempt++)
        caught = s_catch_mid_transfer(&w, &s, keys, attempt);
    ck_assert_msg(caught, "the load always ended before the revocation: 10 tries");
    ck_assert_int_eq(unlink(k->witness_pub), 0);
    kill(s.pid, SIGHUP);            //  pending while stopped: handled at once after
    kill(s.pid, SIGCONT);
    ck_assert_msg(S_POLL_UNTIL(&w, w.ended, 20), "the fetch did not end within 20 s");
    bool failed = w.status == P2PKV_FAILED;
    if (!failed)
        ck_assert_uint_eq(s_wit_diff(&w, 0, FLOAD), 0);
    ck_assert_msg(S_POLL_UNTIL(&w, p2pkv_client_server_state(w.client, w.server, NULL)
                                   != P2PKV_SERVER_UP, 20), "the revoked session stayed UP");
    *revoked = hh_metric_reach(&s, "p2pkv_sessions_revoked_total", NULL, 1, S_WAIT);
    //  the fence: another allowed consumer's get lands on the same server
    wit_t f;
    s_wit_open(&f, s.endpoint, k->fence, k->server);
    s_wit_get(&f, "fence", keys, FLOAD, FFENCE);
    ck_assert_msg(S_POLL_UNTIL(&f, f.ended, 20), "the fence fetch did not end");
    ck_assert_int_eq(f.status, P2PKV_LANDED);
    ck_assert_uint_eq(s_wit_diff(&f, FLOAD, FFENCE), 0);
    free(f.dest);
    p2pkv_client_destroy(&f.client);
    //  after it: no byte of the failed load's blocks changed
    size_t changed = 0;
    uint8_t *pool = p2pkv_client_pool(w.client);
    for (size_t i = 0; failed && i < (size_t) FLOAD * FBLOCK; i++)
        changed += pool[i] != SENTINEL;
    ck_assert_msg(changed == 0, "%zu bytes changed after the fetch was reported FAILED",
                  changed);
    double deadline = pk_clock_monotonic() + S_WAIT;
    while (td_stats(td_api(&s)).pinned && pk_clock_monotonic() < deadline)
        zclock_sleep(10);
    ck_assert_uint_eq(td_stats(td_api(&s)).pinned, 0);
    free(w.dest);
    p2pkv_client_destroy(&w.client);
    ck_assert_int_eq(td_stop(&s), 0);
    return failed;
}

static void
s_attack_curve_revoked(ctx_t *c)
{
    uint64_t n = s_n(1, 5), done = 0;
    s_curve_t k;
    s_curve_new(&k);
    p2pkv_key_t *keys = bk_keys(3, 0, FLOAD + FFENCE);
    for (int tries = 0; done < n && tries < (int) n + 5; tries++) {
        int64_t revoked = 0;
        if (s_revoke_once(&k, keys, &revoked)) {
            ck_assert_int_eq(revoked, 1);
            done++;
        }
    }
    ck_assert_msg(done == n, "the load landed before the revocation every time");
    bk_keys_free(keys);
    s_curve_destroy(&k);
    s_row(c, "CURVE key revoked mid-transfer (certificate removed, SIGHUP)", n,
          "session ended (revoked, counted); its fetch FAILED, its blocks untouched after; "
          "another key's fence fetch whole; pins released");
}

//  ---------------------------------------------------------------------------
//  An engine handle kept open across its server's restart (issue 34)

#define SBLOCK (64 * 1024)
#define STALE_TAG 6

//  One restart under an open handle, killed (-9) or stopped (SIGTERM),
//  then started again on the same pool name, socket and port: the old
//  handle's commit of the block it reserved and wrote before, and its
//  put after, are refused -ESTALE; the new server holds nothing of it (a
//  consumer's get misses both keys), and a new handle's put is fetched
//  back whole.
static void
s_stale_once(const char *const *flags, bool killed, const p2pkv_key_t *keys, uint8_t *block)
{
    td_t s;
    td_start(&s, flags);
    char err[P2PKV_ERRLEN] = "";
    p2pkv_engine_t *old = p2pkv_engine_open(s.local, 10, NULL, NULL, err);
    ck_assert_msg(old != NULL, "p2pkv_engine_open: %s", err);
    uint32_t b;
    ck_assert_int_eq(p2pkv_engine_reserve(old, &keys[0], 1, &b, err), 0);
    bk_block_fill(p2pkv_engine_pool(old) + (size_t) b * SBLOCK, STALE_TAG, 0, SBLOCK);
    if (killed)
        td_kill_only(&s);
    else
        ck_assert_int_eq(td_stop(&s), 0);
    td_start(&s, flags);
    ck_assert_int_eq(p2pkv_engine_commit(old, &keys[0], 1, err), -ESTALE);
    ck_assert_msg(strstr(err, "the server restarted; reopen the engine"), "commit: %s", err);
    bk_block_fill(block, STALE_TAG, 1, SBLOCK);
    ck_assert_int_eq(p2pkv_engine_put(old, &keys[1], block, SBLOCK, err), -ESTALE);
    p2pkv_engine_close(&old);
    bk_block_fill(block, STALE_TAG, 2, SBLOCK);
    ck_assert_int_eq(p2pkv_engine_put(td_api(&s), &keys[2], block, SBLOCK, err), 0);
    p2pkv_engine_stats_t st = td_stats(td_api(&s));
    ck_assert_uint_eq(st.ready, 1);
    ck_assert_uint_eq(st.writing, 0);
    p2pkv_config_t cfg = { .peer_id = "stale-witness", .fingerprint = "fp", .hash_seed = "7",
                           .provider = "tcp", .node = "127.0.0.1" };
    p2pkv_client_t *client = p2pkv_client_new(&cfg, NULL, 3, SBLOCK, (p2pkv_callbacks_t) { 0 },
                                              err);
    ck_assert_msg(client != NULL, "stale witness: %s", err);
    int server = p2pkv_client_connect(client, s.endpoint, 10, err);
    ck_assert_msg(server >= 0, "stale witness: %s", err);
    uint32_t dest[3] = { 0, 1, 2 };
    bool landed[3];
    ck_assert_int_eq(p2pkv_client_get(client, server, "stale", keys, dest, 3, true, 10, landed,
                                      NULL, NULL, err), 1);
    ck_assert(!landed[0] && !landed[1] && landed[2]);
    ck_assert_uint_eq(bk_block_diff(p2pkv_client_pool(client) + 2 * SBLOCK, STALE_TAG, 2,
                                    SBLOCK), 0);
    p2pkv_client_destroy(&client);
    ck_assert_int_eq(td_stop(&s), 0);
}

START_TEST(test_stale_engine_handles)
{
    double t0 = pk_clock_monotonic();
    char endpoint[64], pool[96], local[128];
    td_fixed_endpoint(endpoint, sizeof endpoint);
    snprintf(pool, sizeof pool, "/p2pkv-e2e-%d-9003", (int) getpid());
    snprintf(local, sizeof local, "ipc:///tmp/p2pkv-e2e-%d-9003.sock", (int) getpid());
    const char *const flags[] = { "--bind", endpoint, "--pool-name", pool, "--local", local,
                                  "--pool-blocks", "16", "--block-len", "65536", NULL };
    p2pkv_key_t *keys = bk_keys(STALE_TAG, 0, 3);
    uint8_t *block = malloc(SBLOCK);
    ck_assert_ptr_nonnull(block);
    uint64_t n = s_n(2, 10);
    for (uint64_t i = 0; i < n; i++)
        s_stale_once(flags, i % 2 == 0, keys, block);
    free(block);
    bk_keys_free(keys);
    hh_report("an engine handle kept open across its server's restart on the same pool, "
              "socket and port (kill -9 and SIGTERM, alternately)", n,
              "its commit and put refused -ESTALE (\"the server restarted; reopen the "
              "engine\"); none of its keys served; a new handle's put fetched whole",
              "nothing (no stale byte committed or served)", pk_clock_monotonic() - t0);
}
END_TEST

START_TEST(test_server_faults)
{
    char endpoint[64];
    td_fixed_endpoint(endpoint, sizeof endpoint);
    td_t s;
    s_fault_server_start(&s, endpoint);
    p2pkv_key_t *keys = bk_keys(3, 0, FLOAD + FFENCE);
    for (int killed = 1; killed >= 0; killed--) {
        double t0 = pk_clock_monotonic();
        uint64_t n = s_n(1, 5);
        for (uint64_t i = 0; i < n; i++)
            s_server_fault(&s, endpoint, killed, keys);
        hh_report(killed ? "kill -9 of a server mid-transfer (125 MiB load), restarted"
                         : "SIGSTOP of a server mid-transfer past the consumer's silence "
                           "timeout (2 s), then SIGCONT", n,
                  "fetch FAILED; consumer reconnected; a fence landed whole",
                  "nothing (no byte changed after FAILED)", pk_clock_monotonic() - t0);
    }
    bk_keys_free(keys);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  Issue 36: a rolling restart loses nothing.  The long form is the
//  target, 3 servers under 8 consumers, every server restarted twice
//  in turn; the short one (make check, a loaded 2-core machine under ASan)
//  2 servers, 2 consumers, one restart.
START_TEST(test_rolling_restart)
{
    hh_rolling(s_n(2, 3), s_n(2, 8), s_n(1, 6));
}
END_TEST

int
main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child-consumer") == 0)
        return s_child_consumer(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "--child-engine") == 0)
        return s_child_engine(argv[2], argv[3]);
    int skip = td_suite_start();
    if (skip)
        return skip;
    ssize_t len = readlink("/proc/self/exe", s_self, sizeof s_self - 1);
    if (len <= 0)
        return 1;
    s_self[len] = '\0';
    snprintf(s_release, sizeof s_release, "/tmp/p2pkv-hardening-%d.release", getpid());
    Suite *s = suite_create("hardening");
    //  the long form is bounded by its counts; this is its outer bound
    TCase *tc = td_case(s, "hardening", hh_long() ? 7200 : 600);
    tcase_add_test(tc, test_hostile_peers);
    tcase_add_test(tc, test_server_faults);
    tcase_add_test(tc, test_stale_engine_handles);
    //  a case of its own (CK_RUN_CASE=rolling runs it alone)
    if (tr_redis_suite_start() == 0) {
        TCase *rolling = td_case(s, "rolling", hh_long() ? 1800 : 300);
        tcase_add_test(rolling, test_rolling_restart);
    }
    int rc = pk_test_run("hardening", s);
    unlink(s_release);
    td_sweep();
    return rc;
}
