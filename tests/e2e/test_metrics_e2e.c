/*  test_metrics_e2e.c: a live p2pkv-server's /metrics, scraped over HTTP
    after lookups, fetches and a protocol violation; and scraped again and
    again while sessions come and go, where no family may mix an
    unlabelled sample with labelled ones, no counter may go down and no
    family of the table may be missing.

    Every family of lib/daemon/metric_families.h must be there with its
    # HELP and # TYPE (the type the table gives it), the whole body must
    pass the strict exposition-format checker (tests/fixtures/promtext.c),
    and the counters the traffic moved must say so; no sample is labelled
    by peer.  The servers hold the hashed blocks of tests/fixtures/blocks.h.
*/
#include "blocks.h"
#include "connect_msg.h"
#include "consumer.h"
#include "daemon.h"
#include "promtext.h"
#include "base/clock.h"
#include "daemon/metrics.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <netinet/in.h>
#include <sodium.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BLOCK TD_BLOCK_LEN

static const struct {
    const char *name, *type;
} s_rows[PK_M_COUNT] = {
#define PK_S_COUNTER "counter"
#define PK_S_GAUGE "gauge"
#define PK_S_HISTOGRAM "histogram"
#define PK_METRIC(id, name, type, help, label, source, value) [PK_M_##id] = { name, PK_S_##type },
#include "daemon/metric_families.h"
#undef PK_METRIC
};

//  The text's line that starts with prefix, or NULL.
static const char *
s_line(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (strncmp(line, prefix, n) == 0)
            return line;
    return NULL;
}

//  The value of the series named exactly series ("name{labels}"), or -1.
static double
s_value(const char *text, const char *series)
{
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s ", series);
    const char *line = s_line(text, prefix);
    return line ? strtod(line + strlen(prefix), NULL) : -1;
}

//  One connect, sent once (a client would repeat it if the answer were
//  slow), whose address blob names provider: an ofi blob's head (magic,
//  version, the provider's length and name), all s_fabric_for reads
//  before it refuses a provider the server does not offer.
static void
s_connect_naming(td_t *s, const char *provider)
{
    uint8_t blob[64] = "PKOF\x01\x00\x00\x00";
    uint16_t len = (uint16_t) strlen(provider);
    memcpy(blob + 8, &len, 2);
    memcpy(blob + 10, provider, len);
    char *frame;
    size_t flen;
    tf_connect_frame("c-unoffered", NULL, blob, 10u + len, 64, BLOCK, &frame, &flen);
    zsock_t *d = zsock_new_dealer(s->endpoint);
    ck_assert_ptr_nonnull(d);
    zsock_set_rcvtimeo(d, 10000);
    zframe_t *f = zframe_new(frame, flen);
    free(frame);
    ck_assert_int_eq(zframe_send(&f, d, 0), 0);
    f = zframe_recv(d);
    ck_assert_ptr_nonnull(f);
    pk_msg_t *m = NULL;
    ck_assert_int_eq(pk_msg_decode(zframe_data(f), zframe_size(f), &m, NULL), 0);
    zframe_destroy(&f);
    ck_assert_int_eq(m->type, PK_MSG_DISCONNECT);
    ck_assert_int_eq(m->code, PK_DISC_INCOMPATIBLE);
    ck_assert_msg(strstr(m->reason, "this server offers"), "reason: %s", m->reason);
    pk_msg_destroy(&m);
    zsock_destroy(&d);
}

START_TEST(test_scrape_live_server)
{
    td_t s;
    char bind[64];
    int port = td_free_port();
    snprintf(bind, sizeof bind, "127.0.0.1:%d", port);
    //  a pool of 8 blocks, so that puts evict (and a pin quota of all of
    //  them); a silence timeout no loaded machine reaches while it scrapes
    td_start(&s, (const char *[]) { "--metrics-bind", bind, "--pool-blocks", "8",
                                    "--pin-quota", "8", "--silence-timeout", "60", NULL });
    //  a connect naming a provider the server does not offer, refused
    //  once: before the puts, so the scrape below that sees the evictions
    //  comes from a publish of the fabrics' counts after it
    s_connect_naming(&s, "nosuch");

    //  6 blocks nobody asks for, then 4 more: the 2 oldest are evicted
    pk_key_t keys[6];
    bk_put_hashed(&s, 10, 6, keys);
    bk_put_hashed(&s, 0, 4, keys);
    //  a lookup of the 4 and of a key the pool lacks, then a fetch of the 4
    uint8_t absent[32] = { 0xab };
    keys[4] = pk_key_make(absent, 32);
    tc_t *tc = tc_to(s.endpoint, "c-scrape");
    ck_assert_int_eq(tc_send(tc, tc_lookup("r1", 1, keys, 5)), 0);
    pk_msg_t *resp = tc_expect(tc, PK_MSG_LOOKUP_RESP, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(resp->hits[i] == (i < 4), "key %d: hit %d", i, resp->hits[i]);
    pk_msg_destroy(&resp);
    tc_fetch_into(tc, "r1", 1, keys, 4, 10, bk_hashed(0));

    //  a second consumer breaks a rule: a server-to-consumer message
    tc_t *bad = tc_to(s.endpoint, "c-rude");
    ck_assert_int_eq(tc_send(bad, pk_msg_new(PK_MSG_PONG)), 0);
    tc_expect_disconnect(bad, PK_DISC_VIOLATION, NULL, 5);

    //  the actors push their counters at their next tick, the main loop
    //  the pool's twice a second: scrape until both are in
    char *answer = NULL;
    const char *body = NULL;
    double deadline = pk_clock_monotonic() + 10;
    while (pk_clock_monotonic() < deadline) {
        free(answer);
        answer = td_http_get(port, "/metrics");
        body = answer ? strstr(answer, "\r\n\r\n") : NULL;
        if (body && strstr(body, "\np2pkv_blocks_written_total 4\n")
            && strstr(body, "p2pkv_violations_by_reason_total{reason=\"direction\"} 1\n")
            && strstr(body, "\np2pkv_sessions_retired_total 1\n")
            && strstr(body, "\np2pkv_pool_evictions_total 2\n"))
            break;
        zclock_sleep(20);
    }
    ck_assert_ptr_nonnull(answer);
    ck_assert_msg(strncmp(answer, "HTTP/1.1 200 ", 13) == 0, "%.200s", answer);
    ck_assert_ptr_nonnull(strstr(answer, "\r\nContent-Type: text/plain; version=0.0.4"));
    ck_assert_ptr_nonnull(body);
    body += 4;

    //  the whole text is well formed
    const char *fault = pt_validate(body, strlen(body));
    ck_assert_msg(fault == NULL, "%s\n--- in ---\n%s", fault, body);
    //  every family of the table, with its help and its type, in table order
    const char *prev = body;
    for (int id = 0; id < PK_M_COUNT; id++) {
        char prefix[300];
        snprintf(prefix, sizeof prefix, "# HELP %s ", s_rows[id].name);
        const char *help = s_line(body, prefix);
        ck_assert_msg(help != NULL, "no %s\n%s", prefix, body);
        ck_assert_msg(help >= prev, "%s out of table order", s_rows[id].name);
        prev = help;
        snprintf(prefix, sizeof prefix, "# TYPE %s %s\n", s_rows[id].name, s_rows[id].type);
        ck_assert_msg(s_line(body, prefix) != NULL, "no %s", prefix);
    }
    //  no family but the table's
    size_t types = 0;
    for (const char *p = body; (p = strstr(p, "# TYPE ")); p++)
        types++;
    ck_assert_uint_eq(types, PK_M_COUNT);

    //  what the traffic counted
    ck_assert_double_eq(s_value(body, "p2pkv_lookups_total"), 1);
    ck_assert_double_eq(s_value(body, "p2pkv_lookup_keys_total"), 5);
    ck_assert_double_eq(s_value(body, "p2pkv_lookup_hits_total"), 4);
    ck_assert_double_eq(s_value(body, "p2pkv_lookup_misses_total"), 1);
    ck_assert_double_eq(s_value(body, "p2pkv_lookup_pending_expired_total"), 0);
    ck_assert_double_eq(s_value(body, "p2pkv_fetches_total"), 1);
    ck_assert_double_eq(s_value(body, "p2pkv_bytes_written_total"), 4 * BLOCK);
    ck_assert_double_eq(s_value(body, "p2pkv_write_errors_total"), 0);
    ck_assert_double_eq(s_value(body, "p2pkv_store_timeouts_total"), 0);
    ck_assert_double_eq(s_value(body, "p2pkv_sessions_opened_total"), 2);
    ck_assert_double_eq(s_value(body, "p2pkv_violations_total"), 1);
    ck_assert_double_eq(s_value(body, "p2pkv_violations_by_reason_total{reason=\"direction\"}"),
                        1);
    //  a labelled family has no unlabelled sample beside its labelled ones
    ck_assert_double_eq(s_value(body, "p2pkv_violations_by_reason_total"), -1);
    ck_assert_double_eq(s_value(body, "p2pkv_pool_evictions_total"), 2);
    ck_assert_double_eq(s_value(body, "p2pkv_pool_ready_blocks"), 8);
    ck_assert_double_eq(s_value(body, "p2pkv_pool_free_blocks"), 0);
    ck_assert_double_eq(s_value(body, "p2pkv_lookup_seconds_count"), 1);
    ck_assert_double_eq(s_value(body, "p2pkv_fetch_seconds_count"), 1);
    ck_assert_double_eq(s_value(body, "p2pkv_fetch_seconds_bucket{le=\"+Inf\"}"), 1);
    //  the refused connect, counted once: under unoffered, not also under
    //  the provider of a fabric this server opened (each has its sample,
    //  none refused anything), and once in stats' sum of the fabrics
    ck_assert_double_eq(s_value(body, "p2pkv_connect_blobs_refused_total{provider=\"unoffered\"}"),
                        1);
    const char *refused = "\np2pkv_connect_blobs_refused_total{provider=\"";
    int providers = 0;
    for (const char *p = body; (p = strstr(p, refused)); p++) {
        const char *label = p + strlen(refused);
        if (strncmp(label, "unoffered\"", 10) == 0)
            continue;
        providers++;
        ck_assert_msg(strtod(strchr(p, ' ') + 1, NULL) == 0, "%.*s", (int) strcspn(p + 1, "\n"),
                      p + 1);
    }
    ck_assert_int_ge(providers, 1);
    json_t *st = td_stats_json(&s);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(st, "fabric"),
                                                        "blobs_refused")), 1);
    json_decref(st);
    //  label values only from bounded sets: never a consumer's id
    ck_assert_ptr_null(strstr(body, "peer="));
    ck_assert_ptr_null(strstr(body, "c-rude"));
    ck_assert_ptr_null(strstr(body, "c-scrape"));
    free(answer);

    tc_destroy(&bad);
    tc_destroy(&tc);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

//  --------------------------------------------------------------------------
//  Scrapes while sessions come and go

#define S_MAX_SERIES 1024

typedef struct {
    char series[320];               //  name{labels} as exposed
    double value;
} s_sample_t;

typedef struct {
    s_sample_t samples[S_MAX_SERIES];
    size_t n;
} s_scrape_t;

//  The row a series belongs to (a histogram's _bucket, _sum and _count are
//  its family's), or -1.
static int
s_family_of(const char *name, size_t len)
{
    for (int id = 0; id < PK_M_COUNT; id++) {
        size_t flen = strlen(s_rows[id].name);
        if (len == flen && strncmp(name, s_rows[id].name, len) == 0)
            return id;
        if (strcmp(s_rows[id].type, "histogram") == 0 && len > flen
            && strncmp(name, s_rows[id].name, flen) == 0
            && (strncmp(name + flen, "_bucket", len - flen) == 0
                || strncmp(name + flen, "_sum", len - flen) == 0
                || strncmp(name + flen, "_count", len - flen) == 0))
            return id;
    }
    return -1;
}

//  One scrape: every family of the table is declared, and none has both
//  an unlabelled sample and labelled ones (a histogram's le is not a
//  label of its samples, only of its buckets).  The samples into *out.
static void
s_scrape_check(int port, s_scrape_t *out)
{
    char *answer = td_http_get(port, "/metrics");
    ck_assert_ptr_nonnull(answer);
    const char *body = strstr(answer, "\r\n\r\n");
    ck_assert_ptr_nonnull(body);
    body += 4;
    const char *fault = pt_validate(body, strlen(body));
    ck_assert_msg(fault == NULL, "%s\n--- in ---\n%s", fault, body);
    for (int id = 0; id < PK_M_COUNT; id++) {
        char line[300];
        snprintf(line, sizeof line, "# TYPE %s %s\n", s_rows[id].name, s_rows[id].type);
        ck_assert_msg(s_line(body, line) != NULL, "family missing: %s", s_rows[id].name);
    }
    bool unlabelled[PK_M_COUNT] = { false }, labelled[PK_M_COUNT] = { false };
    out->n = 0;
    for (const char *line = body; *line; line = strchr(line, '\n') + 1) {
        size_t len = strcspn(line, "\n");
        if (*line == '#' || len == 0)
            continue;
        size_t name_len = strcspn(line, "{ ");
        int id = s_family_of(line, name_len);
        ck_assert_msg(id >= 0, "a series of no family: %.*s", (int) len, line);
        //  its labels without le
        bool has_label = false;
        if (line[name_len] == '{') {
            const char *end = memchr(line, '}', len);
            ck_assert_ptr_nonnull(end);
            for (const char *l = line + name_len + 1; l < end; ) {
                if (strncmp(l, "le=\"", 4) != 0)
                    has_label = true;
                const char *close = strchr(strchr(l, '"') + 1, '"');
                while (close[-1] == '\\')
                    close = strchr(close + 1, '"');
                l = close + 1 + (close[1] == ',');
            }
        }
        if (has_label)
            labelled[id] = true;
        else
            unlabelled[id] = true;
        if (labelled[id] && unlabelled[id])
            fprintf(stderr, "--- the scrape ---\n%s", body);      //  too long for Check
        ck_assert_msg(!(labelled[id] && unlabelled[id]),
                      "%s has an unlabelled sample beside labelled ones: sum() would count "
                      "twice", s_rows[id].name);
        const char *space = line + len;
        while (space > line && *space != ' ')
            space--;
        ck_assert_uint_lt(out->n, S_MAX_SERIES);
        s_sample_t *sample = &out->samples[out->n++];
        snprintf(sample->series, sizeof sample->series, "%.*s", (int) (space - line), line);
        sample->value = strtod(space + 1, NULL);
    }
    ck_assert_ptr_null(strstr(body, "peer="));
    free(answer);
}

//  No counter went down from before to now, and none went away (a
//  histogram's buckets, sum and count are counters too).
static void
s_counters_kept(const s_scrape_t *before, const s_scrape_t *now)
{
    for (size_t i = 0; i < before->n; i++) {
        const s_sample_t *b = &before->samples[i];
        int id = s_family_of(b->series, strcspn(b->series, "{ "));
        if (strcmp(s_rows[id].type, "gauge") == 0)
            continue;
        const s_sample_t *n = NULL;
        for (size_t j = 0; j < now->n && !n; j++)
            if (strcmp(now->samples[j].series, b->series) == 0)
                n = &now->samples[j];
        ck_assert_msg(n != NULL, "counter %s went away", b->series);
        ck_assert_msg(n->value >= b->value, "counter %s went down: %.17g -> %.17g", b->series,
                      b->value, n->value);
    }
}

//  A consumer's session: a lookup and a fetch of the 4 blocks, then it
//  breaks a rule (a server-to-consumer message) and the server ends it.
static void
s_session_round(td_t *s, const char *id, pk_key_t *keys)
{
    tc_t *tc = tc_to(s->endpoint, id);
    ck_assert_int_eq(tc_send(tc, tc_lookup("r", 1, keys, 4)), 0);
    pk_msg_t *resp = tc_expect(tc, PK_MSG_LOOKUP_RESP, 10);
    pk_msg_destroy(&resp);
    uint32_t idx[4] = { 10, 11, 12, 13 };
    ck_assert_int_eq(tc_send(tc, tc_fetch("r", 1, keys, idx, 4)), 0);
    pk_msg_t *done = tc_expect(tc, PK_MSG_TRANSFER_DONE, 10);
    pk_msg_destroy(&done);
    ck_assert_int_eq(tc_send(tc, pk_msg_new(PK_MSG_PONG)), 0);
    tc_expect_disconnect(tc, PK_DISC_VIOLATION, NULL, 10);
    tc_destroy(&tc);
}

START_TEST(test_scrapes_while_sessions_come_and_go)
{
    td_t s;
    char bind[64];
    int port = td_free_port();
    snprintf(bind, sizeof bind, "127.0.0.1:%d", port);
    td_start(&s, (const char *[]) { "--metrics-bind", bind, "--silence-timeout", "60", NULL });
    pk_key_t keys[4];
    bk_put_hashed(&s, 0, 4, keys);
    static s_scrape_t scrapes[2];
    s_scrape_check(port, &scrapes[0]);
    //  sessions open and end between scrapes, a consumer restarts under
    //  its old id, and one stays open across them all
    tc_t *stays = tc_to(s.endpoint, "c-stays");
    for (int round = 0; round < 6; round++) {
        char id[32];
        snprintf(id, sizeof id, "c-round-%d", round % 3);
        s_session_round(&s, id, keys);
        s_scrape_check(port, &scrapes[(round + 1) % 2]);
        s_counters_kept(&scrapes[round % 2], &scrapes[(round + 1) % 2]);
    }
    tc_destroy(&stays);
    //  what the rounds counted reaches the scrape (the actors publish at
    //  their next step, the node twice a second): 6 sessions ended for a
    //  violation, labelled by its reason alone
    double deadline = pk_clock_monotonic() + 10;
    double violations = -1;
    while (pk_clock_monotonic() < deadline) {
        char *answer = td_http_get(port, "/metrics");
        violations = s_value(answer, "p2pkv_violations_by_reason_total{reason=\"direction\"}");
        double fetches = s_value(answer, "p2pkv_fetches_total");
        free(answer);
        if (violations == 6 && fetches == 6)
            break;
        zclock_sleep(20);
    }
    ck_assert_double_eq(violations, 6);
    s_scrape_check(port, &scrapes[1]);
    s_counters_kept(&scrapes[0], &scrapes[1]);
    ck_assert_int_eq(td_stop(&s), 0);
}
END_TEST

int
main(void)
{
    int skip = td_suite_start();
    if (skip)
        return skip;
    Suite *s = suite_create("metrics_e2e");
    TCase *tc = td_case(s, "e2e", 0);
    tcase_add_test(tc, test_scrape_live_server);
    tcase_add_test(tc, test_scrapes_while_sessions_come_and_go);
    return pk_test_run("metrics_e2e", s);
}
