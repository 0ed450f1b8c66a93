/*  test_metrics.c: the metrics registry, its Prometheus text and JSON, and
    the HTTP listener, against doc/architecture.md's "Observability".

    The text is checked two ways: byte for byte for a small registry, and,
    for a bigger one with hostile peer names and extreme values, line by
    line by pt_validate (tests/fixtures/promtext.c), which knows the exposition
    format's grammar (version 0.0.4) and what a histogram's series must
    satisfy.  A family is labelled or not, never both: the text of a
    labelled one has no unlabelled sample.  Four threads update one
    registry while the main thread renders it; the totals (the JSON's)
    must come out exact.  The listener is spoken to over
    raw TCP sockets; nothing waits on a timer.
*/
#include "daemon/metrics.h"
#include "promtext.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <czmq.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static pk_metrics_t *
s_metrics(void)
{
    pk_metrics_t *metrics = pk_metrics_new_empty();
    ck_assert_ptr_nonnull(metrics);
    return metrics;
}

//  The tests of the generic registry name their ad-hoc families: by name
//  here, so a test reads as the text it expects.
static pk_metric_id_t
s_id(pk_metrics_t *metrics, const char *name)
{
    return (pk_metric_id_t) pk_metrics_find(metrics, name);
}

static char *
s_render(pk_metrics_t *metrics)
{
    char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(pk_metrics_render(metrics, &text, &len), 0);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(len, strlen(text));
    return text;
}

static double
s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}


static void
s_assert_valid(const char *text)
{
    const char *fault = pt_validate(text, strlen(text));
    ck_assert_msg(fault == NULL, "%s\n--- in ---\n%s", fault, text);
}

//  ---------------------------------------------------------------------------

START_TEST(test_render_exact)
{
    pk_metrics_t *metrics = s_metrics();
    ck_assert_int_ge(pk_metrics_declare(metrics, "p2pkv_lookups_total", PK_METRIC_COUNTER,
                                        "Lookups answered.", PK_METRIC_PEER), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "p2pkv_pool_free_blocks", PK_METRIC_GAUGE,
                                        "Free blocks in the pool.", PK_METRIC_NONE), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "p2pkv_fetch_seconds", PK_METRIC_HISTOGRAM,
                                        "Fetch latency.", PK_METRIC_NONE), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "p2pkv_inflight", PK_METRIC_GAUGE,
                                        "Transfers in flight.", PK_METRIC_PEER), 0);
    //  b before a: samples come out sorted by peer whatever the order in
    //  which they appeared; a labelled family has no unlabelled sample
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "p2pkv_lookups_total"), "b", 2), 0);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "p2pkv_lookups_total"), "a", 3), 0);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "p2pkv_lookups_total"), NULL, 1),
                     -EINVAL);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "p2pkv_pool_free_blocks"), NULL, 7), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "p2pkv_pool_free_blocks"), NULL, 12.5), 0);
    //  binary fractions, so the sum is exact; 0.25 sits on a bound, which
    //  is inclusive
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "p2pkv_fetch_seconds"), NULL, 0.00390625), 0);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "p2pkv_fetch_seconds"), NULL, 0.25), 0);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "p2pkv_fetch_seconds"), NULL, 16), 0);
    //  and an unlabelled one takes no label
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "p2pkv_fetch_seconds"), "a", 1),
                     -EINVAL);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "p2pkv_inflight"), "a", 3), 0);
    ck_assert_int_eq(pk_metrics_shift(metrics, s_id(metrics, "p2pkv_inflight"), "a", -1), 0);
    ck_assert_int_eq(pk_metrics_shift(metrics, s_id(metrics, "p2pkv_inflight"), "a", 1.5), 0);
    const char *expected =
        "# HELP p2pkv_lookups_total Lookups answered.\n"
        "# TYPE p2pkv_lookups_total counter\n"
        "p2pkv_lookups_total{peer=\"a\"} 3\n"
        "p2pkv_lookups_total{peer=\"b\"} 2\n"
        "# HELP p2pkv_pool_free_blocks Free blocks in the pool.\n"
        "# TYPE p2pkv_pool_free_blocks gauge\n"
        "p2pkv_pool_free_blocks 12.5\n"
        "# HELP p2pkv_fetch_seconds Fetch latency.\n"
        "# TYPE p2pkv_fetch_seconds histogram\n"
        "p2pkv_fetch_seconds_bucket{le=\"0.0005\"} 0\n"
        "p2pkv_fetch_seconds_bucket{le=\"0.001\"} 0\n"
        "p2pkv_fetch_seconds_bucket{le=\"0.0025\"} 0\n"
        "p2pkv_fetch_seconds_bucket{le=\"0.005\"} 1\n"
        "p2pkv_fetch_seconds_bucket{le=\"0.01\"} 1\n"
        "p2pkv_fetch_seconds_bucket{le=\"0.025\"} 1\n"
        "p2pkv_fetch_seconds_bucket{le=\"0.05\"} 1\n"
        "p2pkv_fetch_seconds_bucket{le=\"0.1\"} 1\n"
        "p2pkv_fetch_seconds_bucket{le=\"0.25\"} 2\n"
        "p2pkv_fetch_seconds_bucket{le=\"0.5\"} 2\n"
        "p2pkv_fetch_seconds_bucket{le=\"1\"} 2\n"
        "p2pkv_fetch_seconds_bucket{le=\"2.5\"} 2\n"
        "p2pkv_fetch_seconds_bucket{le=\"5\"} 2\n"
        "p2pkv_fetch_seconds_bucket{le=\"10\"} 2\n"
        "p2pkv_fetch_seconds_bucket{le=\"+Inf\"} 3\n"
        "p2pkv_fetch_seconds_sum 16.25390625\n"
        "p2pkv_fetch_seconds_count 3\n"
        "# HELP p2pkv_inflight Transfers in flight.\n"
        "# TYPE p2pkv_inflight gauge\n"
        "p2pkv_inflight{peer=\"a\"} 3.5\n";
    char *text = s_render(metrics);
    ck_assert_str_eq(text, expected);
    s_assert_valid(text);
    //  rendering changes nothing
    char *again = s_render(metrics);
    ck_assert_str_eq(again, text);
    free(again);
    free(text);
    pk_metrics_destroy(&metrics);
    ck_assert_ptr_null(metrics);
    pk_metrics_destroy(&metrics);
}
END_TEST

START_TEST(test_empty_and_unused)
{
    pk_metrics_t *metrics = s_metrics();
    char *text = s_render(metrics);
    ck_assert_str_eq(text, "");
    free(text);
    //  declared, never updated: a counter and a histogram show zero totals,
    //  a gauge nothing (its value is unknown, not zero)
    ck_assert_int_ge(pk_metrics_declare(metrics, "c", PK_METRIC_COUNTER, "", PK_METRIC_NONE), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "g", PK_METRIC_GAUGE, "g", PK_METRIC_NONE), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "h", PK_METRIC_HISTOGRAM, "h", PK_METRIC_NONE), 0);
    //  labelled and without samples: its HELP and TYPE alone
    ck_assert_int_ge(pk_metrics_declare(metrics, "cl", PK_METRIC_COUNTER, "cl", PK_METRIC_PEER), 0);
    text = s_render(metrics);
    s_assert_valid(text);
    ck_assert_ptr_nonnull(strstr(text, "# HELP c \n# TYPE c counter\nc 0\n# HELP g g\n"
                                       "# TYPE g gauge\n# HELP h h\n# TYPE h histogram\n"
                                       "h_bucket{le=\"0.0005\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "h_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n"
                                       "# HELP cl cl\n# TYPE cl counter\n"));
    ck_assert_str_eq(strstr(text, "# HELP cl"), "# HELP cl cl\n# TYPE cl counter\n");
    free(text);
    //  a peer's first add of 0 makes its sample appear
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "cl"), "x", 0), 0);
    text = s_render(metrics);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE cl counter\ncl{peer=\"x\"} 0\n"));
    free(text);
    //  len_p may be NULL
    ck_assert_int_eq(pk_metrics_render(metrics, &text, NULL), 0);
    free(text);
    pk_metrics_destroy(&metrics);
}
END_TEST

START_TEST(test_escaping_and_values)
{
    pk_metrics_t *metrics = s_metrics();
    ck_assert_int_ge(pk_metrics_declare(metrics, "g", PK_METRIC_GAUGE,
                                        "a \\ backslash,\na newline and \"quotes\"", PK_METRIC_PEER), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g"), "a\"b\\c\nd", 1), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g"), "n\xc5\x93ud", 0.1), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g"), "x1", NAN), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g"), "x2", INFINITY), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g"), "x3", -INFINITY), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g"), "x4", 1e300), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g"), "x5", -2.5e-300), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g"), "x6", 1.0 / 3), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g"), "x7", 123456789012.0), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "c", PK_METRIC_COUNTER, "c", PK_METRIC_PEER), 0);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), "max", UINT64_MAX), 0);
    const char *expected =
        "# HELP g a \\\\ backslash,\\na newline and \"quotes\"\n"
        "# TYPE g gauge\n"
        "g{peer=\"a\\\"b\\\\c\\nd\"} 1\n"
        "g{peer=\"n\xc5\x93ud\"} 0.1\n"
        "g{peer=\"x1\"} NaN\n"
        "g{peer=\"x2\"} +Inf\n"
        "g{peer=\"x3\"} -Inf\n"
        "g{peer=\"x4\"} 1e+300\n"
        "g{peer=\"x5\"} -2.5e-300\n"
        "g{peer=\"x6\"} 0.3333333333333333\n"
        "g{peer=\"x7\"} 123456789012\n"
        "# HELP c c\n"
        "# TYPE c counter\n"
        "c{peer=\"max\"} 18446744073709551615\n";
    char *text = s_render(metrics);
    ck_assert_str_eq(text, expected);
    s_assert_valid(text);
    free(text);
    //  every double printed reads back as itself
    ck_assert_double_eq(strtod("0.3333333333333333", NULL), 1.0 / 3);
    pk_metrics_destroy(&metrics);
}
END_TEST

START_TEST(test_errors)
{
    pk_metrics_t *metrics = s_metrics();
    ck_assert_int_ge(pk_metrics_declare(metrics, "c", PK_METRIC_COUNTER, "c", PK_METRIC_PEER), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "g", PK_METRIC_GAUGE, "g", PK_METRIC_PEER), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "h", PK_METRIC_HISTOGRAM, "h", PK_METRIC_PEER), 0);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), "p", 1), 0);
    char *before = s_render(metrics);

    //  undeclared names
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "nope"), NULL, 1), -ENOENT);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "nope"), "p", 1), -ENOENT);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "nope"), NULL, 1), -ENOENT);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "nope"), NULL, 1), -ENOENT);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "nope"), NULL, -1), -ENOENT);
    //  wrong types
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "c"), NULL, 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "c"), "p", 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "g"), NULL, 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "g"), NULL, 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "h"), NULL, 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "h"), "q", 1), -EINVAL);
    //  observations that would make _sum fall or stick
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "h"), NULL, -0.001), -EINVAL);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "h"), NULL, NAN), -EINVAL);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "h"), "p", INFINITY), -EINVAL);
    //  peer names
    char longest[PK_METRICS_MAX_PEER + 2];
    memset(longest, 'x', sizeof longest);
    longest[PK_METRICS_MAX_PEER + 1] = '\0';
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), "", 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), longest, 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), "bad\xff", 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), "overlong\xc0\xaf", 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), "surrogate\xed\xa0\x80", 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), "cut\xe2\x82", 1), -EINVAL);
    //  NULL arguments
    ck_assert_int_eq(pk_metrics_add(NULL, s_id(NULL, "c"), NULL, 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, NULL), NULL, 1), -ENOENT);
    ck_assert_int_eq(pk_metrics_add(metrics, (pk_metric_id_t) -1, NULL, 1), -ENOENT);
    ck_assert_int_eq(pk_metrics_add(metrics, (pk_metric_id_t) 1000, NULL, 1), -ENOENT);
    ck_assert_int_eq(pk_metrics_render(NULL, &(char *) { NULL }, NULL), -EINVAL);
    ck_assert_int_eq(pk_metrics_render(metrics, NULL, NULL), -EINVAL);
    ck_assert_ptr_null(pk_metrics_json(NULL));
    //  declarations
    ck_assert_int_eq(pk_metrics_declare(metrics, "c", PK_METRIC_COUNTER, "again", PK_METRIC_PEER), -EEXIST);
    ck_assert_int_eq(pk_metrics_declare(metrics, "c", PK_METRIC_GAUGE, "again", PK_METRIC_PEER), -EEXIST);
    ck_assert_int_eq(pk_metrics_declare(metrics, "h_bucket", PK_METRIC_COUNTER, "x", PK_METRIC_PEER), -EEXIST);
    ck_assert_int_eq(pk_metrics_declare(metrics, "h_sum", PK_METRIC_GAUGE, "x", PK_METRIC_PEER), -EEXIST);
    ck_assert_int_eq(pk_metrics_declare(metrics, "h_count", PK_METRIC_HISTOGRAM, "x", PK_METRIC_PEER), -EEXIST);
    ck_assert_int_ge(pk_metrics_declare(metrics, "x_count", PK_METRIC_COUNTER, "x", PK_METRIC_PEER), 0);
    ck_assert_int_eq(pk_metrics_declare(metrics, "x", PK_METRIC_HISTOGRAM, "x", PK_METRIC_PEER), -EEXIST);
    ck_assert_int_ge(pk_metrics_declare(metrics, "x", PK_METRIC_GAUGE, "x", PK_METRIC_PEER), 0);
    const char *bad_names[] = { "", "1abc", "a-b", "a b", "caf\xc3\xa9", "a{b}", "a\"" };
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++)
        ck_assert_int_eq(pk_metrics_declare(metrics, bad_names[i], PK_METRIC_COUNTER, "x", PK_METRIC_PEER),
                         -EINVAL);
    char long_name[300];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    ck_assert_int_eq(pk_metrics_declare(metrics, long_name, PK_METRIC_COUNTER, "x", PK_METRIC_PEER), -EINVAL);
    ck_assert_int_eq(pk_metrics_declare(metrics, NULL, PK_METRIC_COUNTER, "x", PK_METRIC_PEER), -EINVAL);
    ck_assert_int_eq(pk_metrics_declare(metrics, "ok", PK_METRIC_COUNTER, NULL, PK_METRIC_PEER), -EINVAL);
    ck_assert_int_eq(pk_metrics_declare(metrics, "ok", PK_METRIC_COUNTER, "bad\xff", PK_METRIC_PEER), -EINVAL);
    ck_assert_int_eq(pk_metrics_declare(metrics, "ok", (pk_metric_type_t) 7, "x", PK_METRIC_PEER), -EINVAL);
    ck_assert_int_eq(pk_metrics_declare(NULL, "ok", PK_METRIC_COUNTER, "x", PK_METRIC_PEER), -EINVAL);
    ck_assert_int_eq(pk_metrics_declare(metrics, "ok", PK_METRIC_COUNTER, "x",
                                        (pk_metric_label_t) 9), -EINVAL);
    //  labelled or not, never both
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), NULL, 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "x"), NULL, 1), -EINVAL);
    ck_assert_int_ge(pk_metrics_declare(metrics, "ns:sub_name:2", PK_METRIC_COUNTER, "x", PK_METRIC_PEER), 0);

    //  nothing that failed left a trace
    char *after = s_render(metrics);
    ck_assert_ptr_nonnull(strstr(after, before));
    ck_assert_ptr_null(strstr(after, "ok"));
    ck_assert_ptr_null(strstr(after, "q\""));
    ck_assert_ptr_null(strstr(after, "bad"));
    s_assert_valid(after);
    free(before);
    free(after);
    pk_metrics_destroy(&metrics);
}
END_TEST

START_TEST(test_json)
{
    pk_metrics_t *metrics = s_metrics();
    ck_assert_int_ge(pk_metrics_declare(metrics, "c", PK_METRIC_COUNTER, "c", PK_METRIC_PEER), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "g", PK_METRIC_GAUGE, "g", PK_METRIC_NONE), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "g2", PK_METRIC_GAUGE, "g2", PK_METRIC_PEER), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "h", PK_METRIC_HISTOGRAM, "h", PK_METRIC_PEER), 0);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), "b", 2), 0);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "c"), "a\"x", 5), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g"), NULL, NAN), 0);
    ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, "g2"), "a", 4), 0);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "h"), "a", 0.5), 0);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "h"), "a", 0.25), 0);
    json_t *json = pk_metrics_json(metrics);
    ck_assert_ptr_nonnull(json);
    char *dump = json_dumps(json, JSON_SORT_KEYS | JSON_COMPACT);
    ck_assert_str_eq(dump,
                     "{\"c\":{\"peers\":{\"a\\\"x\":5,\"b\":2},\"total\":7},"
                     "\"g\":{\"total\":null},"
                     "\"g2\":{\"peers\":{\"a\":4.0}},"
                     "\"h\":{\"peers\":{\"a\":{\"count\":2,\"sum\":0.75}},"
                     "\"total\":{\"count\":2,\"sum\":0.75}}}");
    free(dump);
    json_decref(json);
    pk_metrics_destroy(&metrics);
}
END_TEST

//  The same updates in another order give the same text, and a bigger
//  registry with hostile names and extreme values passes the validator.
static const char *s_peer_names[] = {
    "node-01", "node-02", "node-10", "a\"b", "back\\slash", "new\nline", "\\n", "\"",
    "n\xc5\x93ud-\xc3\xa9t\xc3\xa9", "{}=,", "le", "  spaces  ", "#", "peer=\"x\"",
    "\xf0\x9f\x94\x91", "tab\there", "Z", "z", "0"
};
#define S_NPEERS (sizeof s_peer_names / sizeof *s_peer_names)

static void
s_fill(pk_metrics_t *metrics, bool reverse)
{
    char name[64];
    for (int f = 0; f < 24; f++) {
        pk_metric_type_t type = (pk_metric_type_t) (f % 3);
        snprintf(name, sizeof name, "p2pkv_family_%d%s", f,
                 type == PK_METRIC_COUNTER ? "_total" : "");
        ck_assert_int_ge(pk_metrics_declare(metrics, name, type, "help \\ with\nescapes \"q\"", PK_METRIC_PEER),
                         0);
    }
    for (size_t k = 0; k < 24 * S_NPEERS; k++) {
        size_t i = reverse ? 24 * S_NPEERS - 1 - k : k;
        int f = (int) (i / S_NPEERS);
        const char *peer = s_peer_names[i % S_NPEERS];
        snprintf(name, sizeof name, "p2pkv_family_%d%s", f, f % 3 == 0 ? "_total" : "");
        if (f % 3 == 0)
            ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, name), peer, i * 1000003u), 0);
        else if (f % 3 == 1) {
            const double values[] = { NAN, INFINITY, -INFINITY, 1e300, -0.0, 5e-324, 0.1, -7 };
            ck_assert_int_eq(pk_metrics_set(metrics, s_id(metrics, name), peer, values[i % 8] * (double) f),
                             0);
        }
        else {
            //  bounds, values between them, zero and beyond the last bound;
            //  sums of multiples of 1/1024 stay exact in any order
            for (int j = 0; j < 12; j++) {
                double seconds = ((double) ((i * 7 + (size_t) j * 13) % 12000)) / 1024.0;
                ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, name), peer, seconds), 0);
            }
        }
    }
}

START_TEST(test_render_validates_big_registry)
{
    pk_metrics_t *forward = s_metrics();
    pk_metrics_t *backward = s_metrics();
    s_fill(forward, false);
    s_fill(backward, true);
    char *text = s_render(forward);
    char *other = s_render(backward);
    ck_assert_str_eq(text, other);
    s_assert_valid(text);
    //  every family and every peer, no unlabelled line
    size_t lines = 0;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    ck_assert_uint_eq(lines, 8 * 2 + 8 * S_NPEERS + 8 * 2 + 8 * S_NPEERS
                             + 8 * 2 + 8 * S_NPEERS * (PK_METRICS_BUCKETS + 2));
    free(other);
    free(text);

    //  the validator is not a rubber stamp
    const char *bad[] = {
        "x 1",                                          //  no final newline
        "# TYPE x counter\nx{peer=\"a\"b\"} 1\n",       //  unescaped quote
        "# TYPE x counter\nx{peer=\"a\\tb\"} 1\n",      //  unknown escape
        "# TYPE x counter\nx 1\nx 2\n",                 //  repeated series
        "# TYPE x counter\nx one\n",                    //  bad value
        "# TYPE x counter\nx{peer=\"a\"} 1\n# TYPE x counter\n",
        "x 1\n",                                        //  no TYPE
        "# TYPE x gauge\ny 1\n",                        //  outside its family
        "# TYPE x gauge\n1x 1\n",
        "# TYPE x gauge\nx{1a=\"v\"} 1\n",
        "# TYPE x histogram\nx_bucket{le=\"1\"} 2\nx_bucket{le=\"+Inf\"} 1\nx_sum 1\nx_count 1\n",
        "# TYPE x histogram\nx_bucket{le=\"1\"} 1\nx_bucket{le=\"+Inf\"} 1\nx_sum 1\nx_count 2\n",
        "# TYPE x histogram\nx_bucket{le=\"1\"} 1\nx_sum 1\nx_count 1\n",
        "# HELP x bad \\escape\n",
        "# TYPE x counter\n\nx 1\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(pt_validate(bad[i], strlen(bad[i])) != NULL, "accepted: %s", bad[i]);
    const char *good = "# HELP x ok \\\\ \\n\n# TYPE x histogram\n"
                       "x_bucket{a=\"\\\"\",le=\"0.5\",} 1\nx_bucket{a=\"\\\"\",le=\"+Inf\"} 1\n"
                       "x_sum{a=\"\\\"\"} 0.5 1712000000000\nx_count{a=\"\\\"\"} 1\n";
    ck_assert_ptr_null(pt_validate(good, strlen(good)));
    pk_metrics_destroy(&forward);
    pk_metrics_destroy(&backward);
}
END_TEST

//  The daemon's registry: every row of metric_families.h, declared in
//  table order under its id, and a family labelled reason.
static const struct {
    const char *name, *type;
} s_rows[PK_M_COUNT] = {
#define PK_METRIC(id, name, type, help, label, source, value) [PK_M_##id] = { name, #type },
#include "daemon/metric_families.h"
#undef PK_METRIC
};

START_TEST(test_table_registry)
{
    pk_metrics_t *metrics = pk_metrics_new();
    ck_assert_ptr_nonnull(metrics);
    for (int id = 0; id < PK_M_COUNT; id++)
        ck_assert_int_eq(pk_metrics_find(metrics, s_rows[id].name), id);
    //  the types are the table's: a counter refuses set, and so on
    ck_assert_int_eq(pk_metrics_add(metrics, PK_M_LOOKUPS, NULL, 2), 0);
    //  no family of the daemon's is labelled by peer
    ck_assert_int_eq(pk_metrics_add(metrics, PK_M_LOOKUPS, "a", 2), -EINVAL);
    ck_assert_int_eq(pk_metrics_set(metrics, PK_M_LOOKUPS, NULL, 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_set(metrics, PK_M_POOL_FREE, NULL, 9), 0);
    ck_assert_int_eq(pk_metrics_add(metrics, PK_M_POOL_FREE, NULL, 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_add(metrics, PK_M_POOL_EVICTIONS, NULL, 3), 0);
    ck_assert_int_eq(pk_metrics_observe(metrics, PK_M_FETCH_SECONDS, NULL, 0.01), 0);
    ck_assert_int_eq(pk_metrics_add(metrics, PK_M_VIOLATIONS_BY_REASON, NULL, 1), -EINVAL);
    ck_assert_int_eq(pk_metrics_add(metrics, PK_M_COUNT, NULL, 1), -ENOENT);
    //  a family labelled reason: its samples are by reason
    ck_assert_int_eq(pk_metrics_add(metrics, PK_M_VIOLATIONS_BY_REASON, "limit_rounds", 1), 0);
    ck_assert_int_eq(pk_metrics_add(metrics, PK_M_VIOLATIONS_BY_REASON, "malformed", 2), 0);
    char *text = s_render(metrics);
    s_assert_valid(text);
    for (int id = 0; id < PK_M_COUNT; id++) {
        char line[300];
        char type[16];
        size_t n = strlen(s_rows[id].type);
        for (size_t i = 0; i <= n; i++)
            type[i] = (char) tolower(s_rows[id].type[i]);
        snprintf(line, sizeof line, "\n# TYPE %s %s\n", s_rows[id].name, type);
        ck_assert_msg(strstr(text, line), "%s", line);
        snprintf(line, sizeof line, "# HELP %s ", s_rows[id].name);
        ck_assert_msg(strstr(text, line), "%s", line);
    }
    ck_assert_ptr_nonnull(strstr(text, "# TYPE p2pkv_pool_evictions_total counter\n"
                                       "p2pkv_pool_evictions_total 3\n"));
    ck_assert_ptr_nonnull(strstr(text, "# TYPE p2pkv_violations_by_reason_total counter\n"
                                       "p2pkv_violations_by_reason_total{reason=\"limit_rounds\"} 1\n"
                                       "p2pkv_violations_by_reason_total{reason=\"malformed\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "# TYPE p2pkv_lookups_total counter\n"
                                       "p2pkv_lookups_total 2\n"));
    ck_assert_ptr_null(strstr(text, "peer="));
    //  families come out in table order
    ck_assert(strstr(text, "# HELP p2pkv_frames_total ") == text);
    ck_assert(strstr(text, "# HELP p2pkv_lookup_seconds ")
              < strstr(text, "# HELP p2pkv_fetch_seconds "));
    free(text);
    json_t *json = pk_metrics_json(metrics);
    json_t *reasons = json_object_get(json_object_get(json, "p2pkv_violations_by_reason_total"),
                                      "reasons");
    ck_assert_int_eq(json_integer_value(json_object_get(reasons, "malformed")), 2);
    json_decref(json);
    //  a counter read back: a label's sample, a labelled family's total;
    //  0 for a sample not made yet, or a family that is no counter
    ck_assert_uint_eq(pk_metrics_count(metrics, PK_M_VIOLATIONS_BY_REASON, "malformed"), 2);
    ck_assert_uint_eq(pk_metrics_count(metrics, PK_M_VIOLATIONS_BY_REASON, NULL), 3);
    ck_assert_uint_eq(pk_metrics_count(metrics, PK_M_VIOLATIONS_BY_REASON, "flood"), 0);
    ck_assert_uint_eq(pk_metrics_count(metrics, PK_M_LOOKUPS, NULL), 2);
    ck_assert_uint_eq(pk_metrics_count(metrics, PK_M_POOL_FREE, NULL), 0);
    ck_assert_uint_eq(pk_metrics_count(metrics, PK_M_COUNT, NULL), 0);
    //  ad-hoc families go after the table's
    ck_assert_int_eq(pk_metrics_declare(metrics, "extra", PK_METRIC_GAUGE, "x", PK_METRIC_PEER), PK_M_COUNT);
    ck_assert_int_eq(pk_metrics_declare(metrics, "p2pkv_lookups_total", PK_METRIC_COUNTER, "x", PK_METRIC_PEER),
                     -EEXIST);
    pk_metrics_destroy(&metrics);
}
END_TEST

//  ---------------------------------------------------------------------------
//  Four actors update one registry while the main thread renders it as
//  text and as JSON, and every count comes out exact.

#define S_THREADS 4
#define S_ITERS 20000

typedef struct {
    pk_metrics_t *metrics;
    int id;
    int failures;
} s_worker_t;

static atomic_int s_running;

static void *
s_worker(void *arg)
{
    s_worker_t *w = arg;
    char peer[16];
    snprintf(peer, sizeof peer, "peer-%d", w->id);
    for (int i = 0; i < S_ITERS; i++) {
        w->failures += pk_metrics_add(w->metrics, s_id(w->metrics, "c"), peer, 1) != 0;
        w->failures += pk_metrics_add(w->metrics, s_id(w->metrics, "c"), "shared", 2) != 0;
        w->failures += pk_metrics_add(w->metrics, s_id(w->metrics, "c"), "ghost", 3) != 0;
        w->failures += pk_metrics_observe(w->metrics, s_id(w->metrics, "h"), peer, (i % 8) / 1024.0) != 0;
        w->failures += pk_metrics_set(w->metrics, s_id(w->metrics, "g"), peer, i) != 0;
    }
    atomic_fetch_sub(&s_running, 1);
    return NULL;
}

START_TEST(test_concurrent_updates)
{
    pk_metrics_t *metrics = s_metrics();
    ck_assert_int_ge(pk_metrics_declare(metrics, "c", PK_METRIC_COUNTER, "c", PK_METRIC_PEER), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "h", PK_METRIC_HISTOGRAM, "h", PK_METRIC_PEER), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "g", PK_METRIC_GAUGE, "g", PK_METRIC_PEER), 0);
    s_worker_t workers[S_THREADS];
    pthread_t threads[S_THREADS];
    atomic_store(&s_running, S_THREADS);
    for (int i = 0; i < S_THREADS; i++) {
        workers[i] = (s_worker_t) { metrics, i, 0 };
        ck_assert_int_eq(pthread_create(&threads[i], NULL, s_worker, &workers[i]), 0);
    }
    size_t renders = 0;
    while (atomic_load(&s_running) > 0) {
        char *text = s_render(metrics);
        free(text);
        json_decref(pk_metrics_json(metrics));
        renders++;
    }
    for (int i = 0; i < S_THREADS; i++) {
        ck_assert_int_eq(pthread_join(threads[i], NULL), 0);
        ck_assert_int_eq(workers[i].failures, 0);
    }
    ck_assert_uint_gt(renders, 0);
    json_t *json = pk_metrics_json(metrics);
    json_t *c = json_object_get(json, "c");
    json_t *cp = json_object_get(c, "peers");
    ck_assert_int_eq(json_integer_value(json_object_get(c, "total")), S_THREADS * S_ITERS * 6);
    ck_assert_int_eq(json_integer_value(json_object_get(cp, "shared")), S_THREADS * S_ITERS * 2);
    ck_assert_int_eq(json_integer_value(json_object_get(cp, "ghost")), S_THREADS * S_ITERS * 3);
    json_t *h = json_object_get(json, "h");
    json_t *hp = json_object_get(h, "peers");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(h, "total"), "count")),
                     S_THREADS * S_ITERS);
    //  multiples of 1/1024 add up exactly whatever the interleaving
    ck_assert_double_eq(json_real_value(json_object_get(json_object_get(h, "total"), "sum")),
                        S_THREADS * (S_ITERS / 8) * 28 / 1024.0);
    json_t *gp = json_object_get(json_object_get(json, "g"), "peers");
    for (int i = 0; i < S_THREADS; i++) {
        char peer[32];
        snprintf(peer, sizeof peer, "peer-%d", i);
        ck_assert_int_eq(json_integer_value(json_object_get(cp, peer)), S_ITERS);
        ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(hp, peer), "count")),
                         S_ITERS);
        ck_assert_double_eq(json_real_value(json_object_get(gp, peer)), S_ITERS - 1);
    }
    json_decref(json);
    char *text = s_render(metrics);
    s_assert_valid(text);
    free(text);
    pk_metrics_destroy(&metrics);
}
END_TEST

//  ---------------------------------------------------------------------------
//  The HTTP listener, over raw TCP

static int
s_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    //  a safety net against a hung listener, not a timing assumption
    struct timeval tv = { 10, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *) &addr, sizeof addr), 0);
    return fd;
}

static void
s_send(int fd, const char *data)
{
    size_t len = strlen(data);
    ck_assert_int_eq(send(fd, data, len, MSG_NOSIGNAL), (ssize_t) len);
}

//  Everything up to the server's close.
static char *
s_read_all(int fd, size_t *len_p)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    while (true) {
        if (len == cap)
            buf = realloc(buf, (cap *= 2) + 1);
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        ck_assert_int_ge(n, 0);
        if (n == 0)
            break;
        len += (size_t) n;
    }
    buf[len] = '\0';
    if (len_p)
        *len_p = len;
    return buf;
}

static char *
s_exchange(int port, const char *request, size_t *len_p)
{
    int fd = s_connect(port);
    s_send(fd, request);
    char *answer = s_read_all(fd, len_p);
    close(fd);
    return answer;
}

static int
s_status(const char *answer)
{
    int status = 0;
    ck_assert_int_eq(sscanf(answer, "HTTP/1.1 %d ", &status), 1);
    return status;
}

static const char *
s_body(const char *answer)
{
    const char *end = strstr(answer, "\r\n\r\n");
    ck_assert_ptr_nonnull(end);
    return end + 4;
}

static pk_metrics_http_t *
s_listener(pk_metrics_t *metrics)
{
    int rc = 1;
    char err[256] = "untouched";
    pk_metrics_http_t *http = pk_metrics_http_new(metrics, "127.0.0.1:0", &rc, err);
    ck_assert_msg(http != NULL, "%s", err);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(pk_metrics_http_port(http), 0);
    return http;
}

static pk_metrics_t *
s_small_registry(void)
{
    pk_metrics_t *metrics = s_metrics();
    ck_assert_int_ge(pk_metrics_declare(metrics, "p2pkv_lookups_total", PK_METRIC_COUNTER,
                                        "Lookups.", PK_METRIC_PEER), 0);
    ck_assert_int_ge(pk_metrics_declare(metrics, "p2pkv_fetch_seconds", PK_METRIC_HISTOGRAM,
                                        "Fetch latency.", PK_METRIC_PEER), 0);
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "p2pkv_lookups_total"), "a\"b", 5), 0);
    ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "p2pkv_fetch_seconds"), "a\"b", 0.02), 0);
    return metrics;
}

START_TEST(test_http_get_metrics)
{
    pk_metrics_t *metrics = s_small_registry();
    //  enough samples that the answer takes several sends
    char peer[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(peer, sizeof peer, "peer-%04d", i);
        ck_assert_int_eq(pk_metrics_observe(metrics, s_id(metrics, "p2pkv_fetch_seconds"), peer, 0.001), 0);
    }
    pk_metrics_http_t *http = s_listener(metrics);
    int port = pk_metrics_http_port(http);
    char *text = s_render(metrics);
    ck_assert_uint_gt(strlen(text), 1 << 20);

    size_t len = 0;
    char *answer = s_exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
                              &len);
    ck_assert_int_eq(s_status(answer), 200);
    ck_assert_ptr_nonnull(strstr(answer, "\r\nContent-Type: text/plain; version=0.0.4"));
    char length[64];
    snprintf(length, sizeof length, "\r\nContent-Length: %zu\r\n", strlen(text));
    ck_assert_ptr_nonnull(strstr(answer, length));
    ck_assert_str_eq(s_body(answer), text);
    s_assert_valid(s_body(answer));
    free(answer);

    //  a query string, HTTP/1.0, bare LFs: still the metrics
    answer = s_exchange(port, "GET /metrics?x=1 HTTP/1.0\n\n", NULL);
    ck_assert_int_eq(s_status(answer), 200);
    ck_assert_str_eq(s_body(answer), text);
    free(answer);
    //  HEAD: the headers alone
    answer = s_exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n", NULL);
    ck_assert_int_eq(s_status(answer), 200);
    ck_assert_ptr_nonnull(strstr(answer, length));
    ck_assert_str_eq(s_body(answer), "");
    free(answer);
    free(text);

    //  the answer follows the registry
    ck_assert_int_eq(pk_metrics_add(metrics, s_id(metrics, "p2pkv_lookups_total"), "a\"b", 1), 0);
    text = s_render(metrics);
    answer = s_exchange(port, "GET /metrics HTTP/1.1\r\n\r\n", NULL);
    ck_assert_str_eq(s_body(answer), text);
    free(answer);
    free(text);

    double t0 = s_now();
    pk_metrics_http_destroy(&http);
    ck_assert_double_lt(s_now() - t0, 0.5);
    ck_assert_ptr_null(http);
    pk_metrics_http_destroy(&http);
    pk_metrics_destroy(&metrics);
}
END_TEST

START_TEST(test_http_errors)
{
    pk_metrics_t *metrics = s_small_registry();
    pk_metrics_http_t *http = s_listener(metrics);
    int port = pk_metrics_http_port(http);
    struct {
        const char *request;
        int status;
    } cases[] = {
        { "GET /other HTTP/1.1\r\n\r\n", 404 },
        { "GET / HTTP/1.1\r\n\r\n", 404 },
        { "GET /metricsx HTTP/1.1\r\n\r\n", 404 },
        { "HEAD /other HTTP/1.1\r\n\r\n", 404 },
        { "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 405 },
        { "PUT /metrics HTTP/1.1\r\n\r\n", 405 },
        { "DELETE /other HTTP/1.1\r\n\r\n", 405 },
        { "GET /metrics\r\n\r\n", 400 },
        { "GET  /metrics HTTP/1.1\r\n\r\n", 400 },
        { "GET /metrics HTTP/2.0\r\n\r\n", 400 },
        { "garbage\r\n\r\n", 400 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *answer = s_exchange(port, cases[i].request, NULL);
        ck_assert_msg(s_status(answer) == cases[i].status, "%s -> %s", cases[i].request, answer);
        if (cases[i].status == 405)
            ck_assert_ptr_nonnull(strstr(answer, "\r\nAllow: GET, HEAD\r\n"));
        free(answer);
    }
    //  a head that never ends
    int fd = s_connect(port);
    char chunk[1024];
    memset(chunk, 'a', sizeof chunk - 1);
    chunk[sizeof chunk - 1] = '\0';
    s_send(fd, "GET /metrics HTTP/1.1\r\nX-Long: ");
    for (int i = 0; i < 5; i++)
        send(fd, chunk, strlen(chunk), MSG_NOSIGNAL);
    char *answer = s_read_all(fd, NULL);
    ck_assert_int_eq(s_status(answer), 431);
    free(answer);
    close(fd);
    //  a client that closes without a request costs nothing
    close(s_connect(port));
    answer = s_exchange(port, "GET /metrics HTTP/1.1\r\n\r\n", NULL);
    ck_assert_int_eq(s_status(answer), 200);
    free(answer);
    pk_metrics_http_destroy(&http);
    pk_metrics_destroy(&metrics);
}
END_TEST

START_TEST(test_http_several_connections)
{
    pk_metrics_t *metrics = s_small_registry();
    pk_metrics_http_t *http = s_listener(metrics);
    int port = pk_metrics_http_port(http);
    char *text = s_render(metrics);

    //  five clients, each with half a request; finished in reverse order
    int fds[5];
    for (int i = 0; i < 5; i++) {
        fds[i] = s_connect(port);
        s_send(fds[i], "GET /met");
    }
    //  a complete request meanwhile is answered at once
    char *answer = s_exchange(port, "GET /metrics HTTP/1.1\r\n\r\n", NULL);
    ck_assert_str_eq(s_body(answer), text);
    free(answer);
    for (int i = 4; i >= 0; i--) {
        s_send(fds[i], i % 2 ? "rics HTTP/1.1\r\n\r\n" : "a HTTP/1.1\r\n\r\n");
        answer = s_read_all(fds[i], NULL);
        ck_assert_int_eq(s_status(answer), i % 2 ? 200 : 404);
        if (i % 2)
            ck_assert_str_eq(s_body(answer), text);
        free(answer);
        close(fds[i]);
    }

    //  more idle clients than the listener serves at once: the oldest
    //  give way, and a scrape still gets through
    int idle[24];
    for (int i = 0; i < 24; i++) {
        idle[i] = s_connect(port);
        s_send(idle[i], "GET");
    }
    answer = s_exchange(port, "GET /metrics HTTP/1.1\r\n\r\n", NULL);
    ck_assert_str_eq(s_body(answer), text);
    free(answer);
    //  the first idle clients were closed to make room (reset if the
    //  listener closed before reading what they sent)
    char byte;
    ssize_t n = recv(idle[0], &byte, 1, 0);
    ck_assert(n == 0 || (n < 0 && errno == ECONNRESET));
    for (int i = 1; i < 24; i++)
        close(idle[i]);
    close(idle[0]);

    //  destroy does not wait for a client that says nothing
    int fd = s_connect(port);
    s_send(fd, "GET /metrics HTTP/1.1\r\n");
    answer = s_exchange(port, "GET /metrics HTTP/1.1\r\n\r\n", NULL);
    ck_assert_int_eq(s_status(answer), 200);
    free(answer);
    double t0 = s_now();
    pk_metrics_http_destroy(&http);
    ck_assert_double_lt(s_now() - t0, 0.5);
    n = recv(fd, &byte, 1, 0);
    ck_assert(n == 0 || (n < 0 && errno == ECONNRESET));
    close(fd);
    //  and nothing listens on the port any more
    int probe = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(probe, (struct sockaddr *) &addr, sizeof addr), -1);
    ck_assert_int_eq(errno, ECONNREFUSED);
    close(probe);
    free(text);
    pk_metrics_destroy(&metrics);
}
END_TEST

START_TEST(test_http_bad_address)
{
    pk_metrics_t *metrics = s_metrics();
    const char *bad[] = { NULL, "", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999",
                          "127.0.0.1:80x", "127.0.0.1:-1", "::1:80", "[::1:80", "[]:80" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = 0;
        char err[256] = "";
        ck_assert_ptr_null(pk_metrics_http_new(metrics, bad[i], &rc, err));
        ck_assert_msg(rc == -EINVAL, "%s: %d", bad[i] ? bad[i] : "NULL", rc);
        ck_assert_msg(strstr(err, "metrics address") != NULL, "%s", err);
    }
    int rc = 0;
    char err[256] = "";
    ck_assert_ptr_null(pk_metrics_http_new(NULL, "127.0.0.1:0", &rc, err));
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_str_ne(err, "");
    //  a port in use
    pk_metrics_http_t *http = s_listener(metrics);
    char taken[64];
    snprintf(taken, sizeof taken, "127.0.0.1:%d", pk_metrics_http_port(http));
    ck_assert_ptr_null(pk_metrics_http_new(metrics, taken, &rc, err));
    ck_assert_int_eq(rc, -EADDRINUSE);
    ck_assert_ptr_nonnull(strstr(err, taken));
    //  err and rc_p may be NULL
    ck_assert_ptr_null(pk_metrics_http_new(metrics, taken, NULL, NULL));
    pk_metrics_http_destroy(&http);
    //  the wildcard and the bracketed loopback
    http = pk_metrics_http_new(metrics, ":0", &rc, err);
    ck_assert_msg(http != NULL, "%s", err);
    pk_metrics_http_destroy(&http);
    http = pk_metrics_http_new(metrics, "[::1]:0", &rc, err);
    if (http) {
        ck_assert_int_gt(pk_metrics_http_port(http), 0);
        pk_metrics_http_destroy(&http);
    }
    else    //  a host without IPv6
        ck_assert_int_ne(rc, -EINVAL);
    pk_metrics_destroy(&metrics);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_add_test(tc, test_render_exact);
    tcase_add_test(tc, test_empty_and_unused);
    tcase_add_test(tc, test_escaping_and_values);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_json);
    tcase_add_test(tc, test_render_validates_big_registry);
    tcase_add_test(tc, test_table_registry);
    tcase_add_test(tc, test_concurrent_updates);
    tcase_add_test(tc, test_http_get_metrics);
    tcase_add_test(tc, test_http_errors);
    tcase_add_test(tc, test_http_several_connections);
    tcase_add_test(tc, test_http_bad_address);
    suite_add_tcase(s, tc);
    return pk_test_run("metrics", s);
}
