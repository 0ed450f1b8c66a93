/*  promtext.c: a strict checker of the Prometheus text exposition format
    (version 0.0.4), for the tests that read the registry's text: the unit
    tests of the registry and the scrape of a live server.

    It knows the grammar and what a histogram's series must satisfy; see
    promtext.h.  Not thread-safe: a fault is described in one static buffer.
*/
#include "promtext.h"

#include <czmq.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  The exposition format's grammar, plus the rules of its histograms:
//  every line is HELP, TYPE or a sample; names and labels are well formed,
//  label values and help use only their escapes; a family's TYPE comes
//  once and before its samples; no series repeats; a histogram's buckets
//  per label set rise with le, end at +Inf, and are followed by _sum and a
//  _count equal to the +Inf bucket.

static char s_fault[512];

#define S_FAIL(...) do { snprintf(s_fault, sizeof s_fault, __VA_ARGS__); return s_fault; } while (0)

static bool
s_is_name_char(char c, bool first, bool colon)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':')
           || (!first && c >= '0' && c <= '9');
}

//  The length of the name at s (0 if there is none).
static size_t
s_name_len(const char *s, const char *end, bool colon)
{
    size_t n = 0;
    while (s + n < end && s_is_name_char(s[n], n == 0, colon))
        n++;
    return n;
}

static bool
s_is_float(const char *s, size_t n)
{
    if ((n == 3 && !memcmp(s, "NaN", 3)) || (n == 4 && (!memcmp(s, "+Inf", 4) || !memcmp(s, "-Inf", 4))))
        return true;
    if (n == 0 || n > 60 || strspn(s, "0123456789.eE+-") < n)
        return false;
    char buf[64];
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *stop;
    strtod(buf, &stop);
    return stop == buf + n;
}

//  Escaped text up to end: a backslash only before a backslash, an n, or
//  (in a label value) a double quote.
static bool
s_escapes_ok(const char *s, const char *end, bool label)
{
    for (; s < end; s++) {
        if (*s == '\\') {
            if (++s == end || !(*s == '\\' || *s == 'n' || (label && *s == '"')))
                return false;
        }
        else if (label && *s == '"')
            return false;
    }
    return true;
}

typedef struct {
    char family[256];           //  the family of the last TYPE line
    char type[16];
    zhashx_t *typed;            //  families that had their TYPE
    zhashx_t *helped;
    zhashx_t *series;
    //  the histogram label set being walked
    char group[600];
    double last_le;
    uint64_t last_bucket;
    int stage;                  //  0 none, 1 buckets, 2 +Inf seen, 3 _sum seen
} s_check_t;

static const char *
s_check_comment(s_check_t *check, const char *line, const char *end)
{
    bool help = end - line > 7 && !memcmp(line, "# HELP ", 7);
    bool type = end - line > 7 && !memcmp(line, "# TYPE ", 7);
    if (!help && !type)
        S_FAIL("a comment that is neither HELP nor TYPE: %.*s", (int) (end - line), line);
    const char *name = line + 7;
    size_t n = s_name_len(name, end, true);
    if (n == 0 || n >= sizeof check->family || name + n == end || name[n] != ' ')
        S_FAIL("bad metric name in: %.*s", (int) (end - line), line);
    char family[256];
    memcpy(family, name, n);
    family[n] = '\0';
    const char *rest = name + n + 1;
    if (help) {
        if (!s_escapes_ok(rest, end, false))
            S_FAIL("bad escape in help: %.*s", (int) (end - line), line);
        if (zhashx_insert(check->helped, family, (void *) 1))
            S_FAIL("second HELP for %s", family);
        return NULL;
    }
    size_t tn = (size_t) (end - rest);
    const char *types[] = { "counter", "gauge", "histogram", "summary", "untyped" };
    bool known = false;
    for (size_t i = 0; i < 5; i++)
        known |= tn == strlen(types[i]) && !memcmp(rest, types[i], tn);
    if (!known)
        S_FAIL("unknown type: %.*s", (int) (end - line), line);
    if (zhashx_insert(check->typed, family, (void *) 1))
        S_FAIL("second TYPE for %s", family);
    if (check->stage != 0)
        S_FAIL("histogram %s ends without _sum and _count", check->family);
    strcpy(check->family, family);
    memcpy(check->type, rest, tn);
    check->type[tn] = '\0';
    return NULL;
}

static const char *
s_check_sample(s_check_t *check, const char *line, const char *end)
{
    const char *p = line;
    size_t n = s_name_len(p, end, true);
    if (n == 0)
        S_FAIL("no metric name: %.*s", (int) (end - line), line);
    char name[300];
    snprintf(name, sizeof name, "%.*s", (int) n, p);
    p += n;
    //  labels: name="value" separated by commas, a trailing comma allowed
    char group[600] = "", le[64] = "", seen[8][64];
    size_t nseen = 0;
    bool has_le = false;
    if (p < end && *p == '{') {
        p++;
        while (p < end && *p != '}') {
            size_t ln = s_name_len(p, end, false);
            if (ln == 0 || ln >= 64 || p + ln + 1 >= end || p[ln] != '=' || p[ln + 1] != '"')
                S_FAIL("bad label: %.*s", (int) (end - line), line);
            if (ln >= 2 && p[0] == '_' && p[1] == '_')
                S_FAIL("reserved label name: %.*s", (int) (end - line), line);
            for (size_t i = 0; i < nseen; i++)
                if (strlen(seen[i]) == ln && !memcmp(seen[i], p, ln))
                    S_FAIL("repeated label: %.*s", (int) (end - line), line);
            if (nseen == 8)
                S_FAIL("too many labels: %.*s", (int) (end - line), line);
            snprintf(seen[nseen++], 64, "%.*s", (int) ln, p);
            const char *label = p;
            const char *value = p + ln + 2, *q = value;
            while (q < end && *q != '"')
                q += *q == '\\' && q + 1 < end ? 2 : 1;
            if (q >= end || !s_escapes_ok(value, q, true))
                S_FAIL("bad label value: %.*s", (int) (end - line), line);
            if (ln == 2 && !memcmp(label, "le", 2)) {
                has_le = true;
                snprintf(le, sizeof le, "%.*s", (int) (q - value), value);
            }
            else {
                size_t used = strlen(group);
                snprintf(group + used, sizeof group - used, "%.*s,", (int) (q + 1 - label), label);
            }
            p = q + 1;
            if (p < end && *p == ',')
                p++;
            else if (p < end && *p != '}')
                S_FAIL("labels not separated by commas: %.*s", (int) (end - line), line);
        }
        if (p == end)
            S_FAIL("unclosed labels: %.*s", (int) (end - line), line);
        p++;
    }
    if (p == end || *p != ' ')
        S_FAIL("no space before the value: %.*s", (int) (end - line), line);
    p++;
    const char *space = memchr(p, ' ', (size_t) (end - p));
    const char *vend = space ? space : end;
    if (!s_is_float(p, (size_t) (vend - p)))
        S_FAIL("bad value: %.*s", (int) (end - line), line);
    if (space) {
        //  an optional timestamp, an integer of milliseconds
        const char *t = space + 1 + (space[1] == '-');
        if (t == end || strspn(t, "0123456789") < (size_t) (end - t))
            S_FAIL("bad timestamp: %.*s", (int) (end - line), line);
    }
    double value = strtod(p, NULL);

    //  The series is new, and belongs to the family last typed.
    char series[1000];
    snprintf(series, sizeof series, "%s{%s%s}", name, group, le);
    if (zhashx_insert(check->series, series, (void *) 1))
        S_FAIL("repeated series: %.*s", (int) (end - line), line);
    if (strcmp(check->type, "histogram")) {
        if (strcmp(name, check->family) || has_le)
            S_FAIL("sample outside its family %s: %.*s", check->family, (int) (end - line), line);
        return NULL;
    }
    size_t fn = strlen(check->family);
    const char *suffix = name + fn;
    if (strncmp(name, check->family, fn))
        S_FAIL("sample outside its family %s: %.*s", check->family, (int) (end - line), line);
    if (!strcmp(suffix, "_bucket")) {
        if (!has_le || !s_is_float(le, strlen(le)) || isnan(strtod(le, NULL)))
            S_FAIL("a bucket needs a numeric le: %.*s", (int) (end - line), line);
        double bound = strtod(le, NULL);
        if (check->stage == 0 || check->stage == 3) {
            if (check->stage == 3)
                S_FAIL("histogram %s: buckets after _sum", check->family);
            strcpy(check->group, group);
            check->stage = 1;
            check->last_le = -INFINITY;
            check->last_bucket = 0;
        }
        if (check->stage != 1 || strcmp(group, check->group))
            S_FAIL("histogram %s: buckets of two label sets interleave: %.*s", check->family,
                   (int) (end - line), line);
        if (!(bound > check->last_le) || value < (double) check->last_bucket
            || value != floor(value) || value < 0)
            S_FAIL("histogram %s: buckets not cumulative in rising le: %.*s", check->family,
                   (int) (end - line), line);
        check->last_le = bound;
        check->last_bucket = (uint64_t) value;
        if (isinf(bound))
            check->stage = 2;
        return NULL;
    }
    if (has_le)
        S_FAIL("le outside a bucket: %.*s", (int) (end - line), line);
    if (strcmp(group, check->group))
        S_FAIL("histogram %s: %s of another label set: %.*s", check->family, suffix,
               (int) (end - line), line);
    if (!strcmp(suffix, "_sum") && check->stage == 2)
        check->stage = 3;
    else if (!strcmp(suffix, "_count") && check->stage == 3) {
        if (value != (double) check->last_bucket)
            S_FAIL("histogram %s: _count is not the +Inf bucket: %.*s", check->family,
                   (int) (end - line), line);
        check->stage = 0;
        check->group[0] = '\0';
    }
    else
        S_FAIL("histogram %s: unexpected %.*s", check->family, (int) (end - line), line);
    return NULL;
}

const char *
pt_validate(const char *text, size_t len)
{
    if (len && text[len - 1] != '\n')
        S_FAIL("the text does not end with a newline");
    if (strlen(text) != len)
        S_FAIL("a NUL in the text");
    s_check_t check = { .typed = zhashx_new(), .helped = zhashx_new(), .series = zhashx_new() };
    const char *fault = NULL;
    for (const char *line = text; !fault && line < text + len;) {
        const char *end = memchr(line, '\n', (size_t) (text + len - line));
        if (end == line)
            fault = "an empty line";
        else if (*line == '#')
            fault = s_check_comment(&check, line, end);
        else if (!check.family[0])
            fault = "a sample before any TYPE";
        else
            fault = s_check_sample(&check, line, end);
        line = end + 1;
    }
    if (!fault && check.stage != 0)
        fault = "the last histogram ends without _sum and _count";
    zhashx_destroy(&check.typed);
    zhashx_destroy(&check.helped);
    zhashx_destroy(&check.series);
    return fault;
}
