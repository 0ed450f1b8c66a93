/*  metrics.c: the metrics registry and its two renderings (Prometheus
    text and JSON); metrics_http.c serves the first.

    The registry is an array of families in declaration order, indexed by
    id on every update, plus a zhashx from name to family that only
    declare and find probe.  Each family holds its total and an array of
    labelled samples sorted by label value: an update finds its sample by
    binary search, render walks them in order without sorting.  Labelled
    samples are never dropped: the daemon's label values are bounded sets.
    One mutex guards it all; a sample's label is escaped once when the
    sample is made, so rendering a family under the lock is mostly
    copying.
*/
#include "daemon/metrics.h"
#include "wire/protocol.h"
#include "base/thread.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_NAME 200          //  bytes of a family name

//  The upper bounds of every bucket but +Inf, and each bucket's le label
//  spelt once, so the text never depends on printf's rounding.
static const double s_bounds[PK_METRICS_BUCKETS - 1] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
};
static const char *const s_le[PK_METRICS_BUCKETS] = {
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
    "1", "2.5", "5", "10", "+Inf"
};

static const char *const s_type_names[] = { "counter", "gauge", "histogram" };

//  Each label's name, its opening in a series ({peer="), and its key in JSON.
static const char *const s_label_open[] = { "{peer=\"", "{reason=\"", "{namespace=\"",
                                             "{provider=\"", "{rail=\"", "" };
static const char *const s_label_json[] = { "peers", "reasons", "namespaces", "providers",
                                             "rails", NULL };

//  The table, for pk_metrics_new.
static const struct {
    const char *name;
    pk_metric_type_t type;
    const char *help;
    pk_metric_label_t label;
} s_table[PK_M_COUNT] = {
#define PK_METRIC(id, name, type, help, label, source, value) \
    [PK_M_##id] = { name, PK_METRIC_##type, help, PK_METRIC_##label },
#include "daemon/metric_families.h"
#undef PK_METRIC
};

//  A histogram's series names, which no other family may take.
static const char *const s_suffixes[] = { "_bucket", "_sum", "_count" };

typedef struct {
    char *peer;                 //  NULL for the total
    char *label;                //  peer escaped for a label value
    uint64_t count;             //  a counter's value; a histogram's observations
    double value;               //  a gauge's value; a histogram's sum
    uint64_t *buckets;          //  a histogram's counts per bucket, not cumulative
} s_sample_t;

typedef struct {
    char *name;                 //  also the by_name key
    char *help;                 //  escaped for # HELP
    pk_metric_type_t type;
    pk_metric_label_t label;
    bool total_set;             //  a gauge's total has been set
    s_sample_t total;
    s_sample_t *peers;          //  sorted by strcmp of peer
    size_t npeers, cap;
    uint64_t total_buckets[PK_METRICS_BUCKETS];
} s_family_t;

struct _pk_metrics_t {
    pthread_mutex_t mutex;
    zhashx_t *by_name;          //  name -> s_family_t *, both owned by families
    s_family_t **families;      //  declaration order
    size_t nfamilies, cap;
};

//  ---------------------------------------------------------------------------
//  Validation

static bool
s_name_ok(const char *name)
{
    if (!name || !*name || strlen(name) > S_MAX_NAME)
        return false;
    for (size_t i = 0; name[i]; i++) {
        char c = name[i];
        bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!letter && !(i > 0 && c >= '0' && c <= '9'))
            return false;
    }
    return true;
}


//  True if declaring name would put two families' samples under one series
//  name (mutex held).
static bool
s_collides(pk_metrics_t *self, const char *name, pk_metric_type_t type)
{
    if (zhashx_lookup(self->by_name, name))
        return true;
    size_t len = strlen(name);
    char series[S_MAX_NAME + 16];
    for (size_t i = 0; i < sizeof s_suffixes / sizeof *s_suffixes; i++) {
        size_t slen = strlen(s_suffixes[i]);
        if (type == PK_METRIC_HISTOGRAM) {
            snprintf(series, sizeof series, "%s%s", name, s_suffixes[i]);
            if (zhashx_lookup(self->by_name, series))
                return true;
        }
        if (len > slen && strcmp(name + len - slen, s_suffixes[i]) == 0) {
            memcpy(series, name, len - slen);
            series[len - slen] = '\0';
            s_family_t *family = zhashx_lookup(self->by_name, series);
            if (family && family->type == PK_METRIC_HISTOGRAM)
                return true;
        }
    }
    return false;
}

//  Escapes text into out (room for the worst case, twice its length, plus
//  the NUL): a label value escapes backslash, double quote and newline,
//  help text only backslash and newline.  Returns the length written.
static size_t
s_escape(char *out, const char *text, bool label)
{
    char *o = out;
    for (const char *s = text; *s; s++) {
        if (*s == '\\' || *s == '\n' || (*s == '"' && label)) {
            *o++ = '\\';
            *o++ = *s == '\n' ? 'n' : *s;
        }
        else
            *o++ = *s;
    }
    *o = '\0';
    return (size_t) (o - out);
}

//  ---------------------------------------------------------------------------
//  Construction

pk_metrics_t *
pk_metrics_new_empty(void)
{
    pk_metrics_t *self = calloc(1, sizeof *self);
    if (!self)
        goto fail;
    if (pthread_mutex_init(&self->mutex, NULL))
        goto fail_self;
    self->by_name = zhashx_new();
    if (!self->by_name)
        goto fail_mutex;
    //  The keys are the families' own names: no copy to make or free.
    zhashx_set_key_duplicator(self->by_name, NULL);
    zhashx_set_key_destructor(self->by_name, NULL);
    return self;

fail_mutex:
    pthread_mutex_destroy(&self->mutex);
fail_self:
    free(self);
fail:
    return NULL;
}

//  A labelled sample's buckets, peer name and label share one allocation,
//  which starts with the buckets when there are any.
static void
s_sample_free(s_sample_t *sample)
{
    free(sample->buckets ? (void *) sample->buckets : (void *) sample->peer);
}

static void
s_family_destroy(s_family_t *family)
{
    for (size_t i = 0; i < family->npeers; i++)
        s_sample_free(&family->peers[i]);
    free(family->peers);
    free(family->help);
    free(family->name);
    free(family);
}

void
pk_metrics_destroy(pk_metrics_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_metrics_t *self = *self_p;
    zhashx_destroy(&self->by_name);
    for (size_t i = 0; i < self->nfamilies; i++)
        s_family_destroy(self->families[i]);
    free(self->families);
    pthread_mutex_destroy(&self->mutex);
    free(self);
    *self_p = NULL;
}

//  Room for one more family (mutex held).
static int
s_families_reserve(pk_metrics_t *self)
{
    if (self->nfamilies < self->cap)
        return 0;
    size_t cap = self->cap ? 2 * self->cap : 16;
    s_family_t **families = realloc(self->families, cap * sizeof *families);
    if (!families)
        return -ENOMEM;
    self->families = families;
    self->cap = cap;
    return 0;
}

static int
s_declare(pk_metrics_t *self, const char *name, pk_metric_type_t type, const char *help,
          pk_metric_label_t label)
{
    if (!self || !s_name_ok(name) || !help || !pk_utf8_ok(help, strlen(help))
        || (unsigned) type > PK_METRIC_HISTOGRAM || (unsigned) label > PK_METRIC_NONE)
        return -EINVAL;
    //  Everything the family needs is allocated before the lock.
    int rc = -ENOMEM;
    s_family_t *family = calloc(1, sizeof *family);
    if (!family)
        goto fail;
    family->type = type;
    family->label = label;
    if (type == PK_METRIC_HISTOGRAM)
        family->total.buckets = family->total_buckets;
    family->name = strdup(name);
    family->help = malloc(2 * strlen(help) + 1);
    if (!family->name || !family->help)
        goto fail_family;
    s_escape(family->help, help, false);

    pthread_mutex_lock(&self->mutex);
    rc = s_collides(self, name, type) ? -EEXIST : s_families_reserve(self);
    int id = (int) self->nfamilies;
    //  zhashx_insert refuses only a name already there, which s_collides
    //  has ruled out; checked all the same, so the table and the list can
    //  never disagree.  (czmq aborts on out of memory instead of failing.)
    if (rc == 0 && zhashx_insert(self->by_name, family->name, family) != 0)
        rc = -EEXIST;
    if (rc == 0)
        self->families[self->nfamilies++] = family;
    pthread_mutex_unlock(&self->mutex);
    if (rc)
        goto fail_family;
    return id;

fail_family:
    s_family_destroy(family);
fail:
    return rc;
}

int
pk_metrics_declare(pk_metrics_t *self, const char *name, pk_metric_type_t type,
                   const char *help, pk_metric_label_t label)
{
    return s_declare(self, name, type, help, label);
}

pk_metrics_t *
pk_metrics_new(void)
{
    pk_metrics_t *self = pk_metrics_new_empty();
    //  Declared in table order, each family's id is its row's PK_M_*.
    for (int id = 0; self && id < PK_M_COUNT; id++)
        if (s_declare(self, s_table[id].name, s_table[id].type, s_table[id].help,
                      s_table[id].label) != id)
            pk_metrics_destroy(&self);
    return self;
}

const char *
pk_metrics_name(pk_metric_id_t id)
{
    return (unsigned) id < PK_M_COUNT ? s_table[id].name : NULL;
}

pk_metric_type_t
pk_metrics_type(pk_metric_id_t id)
{
    return (unsigned) id < PK_M_COUNT ? s_table[id].type : PK_METRIC_COUNTER;
}

int
pk_metrics_find(pk_metrics_t *self, const char *name)
{
    if (!self || !name)
        return -ENOENT;
    int id = -ENOENT;
    pthread_mutex_lock(&self->mutex);
    s_family_t *family = zhashx_lookup(self->by_name, name);
    for (size_t f = 0; family && f < self->nfamilies; f++)
        if (self->families[f] == family)
            id = (int) f;
    pthread_mutex_unlock(&self->mutex);
    return id;
}

//  ---------------------------------------------------------------------------
//  Updates

//  True if family has a sample labelled peer, at *at; else false, and *at
//  is where it would go (mutex held).
static bool
s_find(const s_family_t *family, const char *peer, size_t *at)
{
    size_t lo = 0, hi = family->npeers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = strcmp(peer, family->peers[mid].peer);
        if (cmp == 0) {
            *at = mid;
            return true;
        }
        if (cmp < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    *at = lo;
    return false;
}

//  The sample of peer in family, created if absent (mutex held).  A peer
//  name is checked only when it is new, so updates of known peers cost
//  nothing but the search.
static int
s_sample(s_family_t *family, const char *peer, s_sample_t **sample_p)
{
    if (!peer) {
        *sample_p = &family->total;
        return 0;
    }
    size_t lo;
    if (s_find(family, peer, &lo)) {
        *sample_p = &family->peers[lo];
        return 0;
    }
    size_t len = strnlen(peer, PK_METRICS_MAX_PEER + 1);
    if (len == 0 || len > PK_METRICS_MAX_PEER || !pk_utf8_ok(peer, len))
        return -EINVAL;
    if (family->npeers == family->cap) {
        size_t cap = family->cap ? 2 * family->cap : 8;
        s_sample_t *peers = realloc(family->peers, cap * sizeof *peers);
        if (!peers)
            return -ENOMEM;
        family->peers = peers;
        family->cap = cap;
    }
    //  The label is escaped once here rather than at every render.
    size_t label_len = len;
    for (size_t i = 0; i < len; i++)
        label_len += peer[i] == '\\' || peer[i] == '"' || peer[i] == '\n';
    size_t nbuckets = family->type == PK_METRIC_HISTOGRAM ? PK_METRICS_BUCKETS : 0;
    uint8_t *mem = calloc(1, nbuckets * sizeof (uint64_t) + len + 1 + label_len + 1);
    if (!mem)
        return -ENOMEM;
    s_sample_t *sample = &family->peers[lo];
    memmove(sample + 1, sample, (family->npeers - lo) * sizeof *sample);
    family->npeers++;
    *sample = (s_sample_t) {
        .peer = (char *) mem + nbuckets * sizeof (uint64_t),
        .buckets = nbuckets ? (uint64_t *) mem : NULL
    };
    memcpy(sample->peer, peer, len + 1);
    sample->label = sample->peer + len + 1;
    s_escape(sample->label, peer, true);
    *sample_p = sample;
    return 0;
}

static void
s_observe(s_sample_t *sample, double seconds)
{
    size_t b = 0;
    while (b < PK_METRICS_BUCKETS - 1 && seconds > s_bounds[b])
        b++;
    sample->buckets[b]++;
    sample->count++;
    sample->value += seconds;
}

//  One update of any type: the checks, the sample and the change in one
//  critical section.
static int
s_update(pk_metrics_t *self, pk_metric_id_t id, const char *peer, pk_metric_type_t type,
         uint64_t delta, double value, bool shift)
{
    //  a raise is a counter's set: to delta, when that is more
    bool raise = type == PK_METRIC_COUNTER && shift;
    if (!self)
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    s_family_t *family = (int) id >= 0 && (size_t) id < self->nfamilies
                         ? self->families[id] : NULL;
    s_sample_t *sample = NULL;
    int rc = -ENOENT;
    if (family && family->type != type)
        rc = -EINVAL;
    //  labelled or not, never both (a sum over the family counts once)
    else if (family && (family->label == PK_METRIC_NONE) != (peer == NULL))
        rc = -EINVAL;
    //  A latency is never negative, and _sum must only grow: Prometheus
    //  reads a falling _sum as a restart.
    else if (family && type == PK_METRIC_HISTOGRAM && !(isfinite(value) && value >= 0))
        rc = -EINVAL;
    else if (family)
        rc = s_sample(family, peer, &sample);
    if (rc == 0) {
        switch (type) {
        case PK_METRIC_COUNTER:
            if (raise)
                delta = delta > sample->count ? delta - sample->count : 0;
            sample->count += delta;
            if (peer)
                family->total.count += delta;
            break;
        case PK_METRIC_GAUGE:
            sample->value = shift ? sample->value + value : value;
            if (!peer)
                family->total_set = true;
            break;
        case PK_METRIC_HISTOGRAM:
            s_observe(sample, value);
            if (peer)
                s_observe(&family->total, value);
            break;
        }
    }
    pthread_mutex_unlock(&self->mutex);
    return rc;
}

int
pk_metrics_add(pk_metrics_t *self, pk_metric_id_t id, const char *peer, uint64_t delta)
{
    return s_update(self, id, peer, PK_METRIC_COUNTER, delta, 0, false);
}

int
pk_metrics_raise(pk_metrics_t *self, pk_metric_id_t id, const char *peer, uint64_t value)
{
    return s_update(self, id, peer, PK_METRIC_COUNTER, value, 0, true);
}

int
pk_metrics_set(pk_metrics_t *self, pk_metric_id_t id, const char *peer, double value)
{
    return s_update(self, id, peer, PK_METRIC_GAUGE, 0, value, false);
}

int
pk_metrics_shift(pk_metrics_t *self, pk_metric_id_t id, const char *peer, double delta)
{
    return s_update(self, id, peer, PK_METRIC_GAUGE, 0, delta, true);
}

int
pk_metrics_observe(pk_metrics_t *self, pk_metric_id_t id, const char *peer, double seconds)
{
    return s_update(self, id, peer, PK_METRIC_HISTOGRAM, 0, seconds, false);
}

uint64_t
pk_metrics_count(pk_metrics_t *self, pk_metric_id_t id, const char *peer)
{
    if (!self)
        return 0;
    uint64_t count = 0;
    pthread_mutex_lock(&self->mutex);
    const s_family_t *family = (int) id >= 0 && (size_t) id < self->nfamilies
                               ? self->families[id] : NULL;
    size_t at;
    if (family && family->type == PK_METRIC_COUNTER)
        count = !peer ? family->total.count
                : s_find(family, peer, &at) ? family->peers[at].count : 0;
    pthread_mutex_unlock(&self->mutex);
    return count;
}

//  ---------------------------------------------------------------------------
//  Prometheus text

//  The text grows in one buffer appended to directly: stdio would take its
//  stream lock for every piece, and render runs under the registry's; a
//  zchunk could not hand its buffer over to the caller.
typedef struct {
    char *data;
    size_t len, cap;
    bool failed;
} s_text_t;

static void
s_put(s_text_t *text, const char *data, size_t len)
{
    if (text->failed)
        return;
    if (text->cap - text->len <= len) {
        size_t cap = text->cap ? text->cap : 4096;
        while (cap - text->len <= len)
            cap *= 2;
        char *grown = realloc(text->data, cap);
        if (!grown) {
            text->failed = true;
            return;
        }
        text->data = grown;
        text->cap = cap;
    }
    memcpy(text->data + text->len, data, len);
    text->len += len;
}

static void
s_puts(s_text_t *text, const char *string)
{
    s_put(text, string, strlen(string));
}

//  By hand: snprintf made rendering a quarter slower, histograms being
//  mostly bucket counts.
static size_t
s_format_u64(char *buf, uint64_t value)
{
    char digits[24];
    size_t n = 0;
    do
        digits[n++] = (char) ('0' + value % 10);
    while ((value /= 10));
    for (size_t i = 0; i < n; i++)
        buf[i] = digits[n - 1 - i];
    buf[n] = '\0';
    return n;
}

//  The shortest decimal that reads back as the same double, in the
//  spellings the format gives for the values that have no decimal.
static size_t
s_format_double(char *buf, size_t size, double value)
{
    if (isnan(value))
        return (size_t) snprintf(buf, size, "NaN");
    if (isinf(value))
        return (size_t) snprintf(buf, size, value > 0 ? "+Inf" : "-Inf");
    int n = 0;
    for (int precision = 15; precision <= 17; precision++) {
        n = snprintf(buf, size, "%.*g", precision, value);
        if (strtod(buf, NULL) == value)
            break;
    }
    return (size_t) n;
}

//  name+suffix{peer="...",le="..."} value (reason in place of peer for a
//  family labelled reason)
static void
s_put_series(s_text_t *text, const s_family_t *family, const char *suffix,
             const s_sample_t *sample, const char *le, const char *value, size_t value_len)
{
    s_puts(text, family->name);
    s_puts(text, suffix);
    if (sample->label) {
        s_puts(text, s_label_open[family->label]);
        s_puts(text, sample->label);
        s_put(text, le ? "\",le=\"" : "\"}", le ? 6 : 2);
    }
    else if (le)
        s_put(text, "{le=\"", 5);
    if (le) {
        s_puts(text, le);
        s_put(text, "\"}", 2);
    }
    s_put(text, " ", 1);
    s_put(text, value, value_len);
    s_put(text, "\n", 1);
}

static void
s_put_sample(s_text_t *text, const s_family_t *family, const s_sample_t *sample)
{
    char value[40];
    size_t len;
    if (family->type == PK_METRIC_COUNTER) {
        len = s_format_u64(value, sample->count);
        s_put_series(text, family, "", sample, NULL, value, len);
    }
    else if (family->type == PK_METRIC_GAUGE) {
        len = s_format_double(value, sizeof value, sample->value);
        s_put_series(text, family, "", sample, NULL, value, len);
    }
    else {
        uint64_t cumulative = 0;
        for (size_t b = 0; b < PK_METRICS_BUCKETS; b++) {
            cumulative += sample->buckets[b];
            len = s_format_u64(value, cumulative);
            s_put_series(text, family, "_bucket", sample, s_le[b], value, len);
        }
        len = s_format_double(value, sizeof value, sample->value);
        s_put_series(text, family, "_sum", sample, NULL, value, len);
        len = s_format_u64(value, sample->count);
        s_put_series(text, family, "_count", sample, NULL, value, len);
    }
}

static void
s_put_family(s_text_t *text, const s_family_t *family)
{
    s_put(text, "# HELP ", 7);
    s_puts(text, family->name);
    s_put(text, " ", 1);
    s_puts(text, family->help);
    s_put(text, "\n# TYPE ", 8);
    s_puts(text, family->name);
    s_put(text, " ", 1);
    s_puts(text, s_type_names[family->type]);
    s_put(text, "\n", 1);
    if (family->label == PK_METRIC_NONE) {
        if (family->type != PK_METRIC_GAUGE || family->total_set)
            s_put_sample(text, family, &family->total);
        return;
    }
    for (size_t i = 0; i < family->npeers; i++)
        s_put_sample(text, family, &family->peers[i]);
}

//  The lock is held for one family at a time, so a scrape delays an update
//  by at most one family's formatting; each family is consistent, the
//  registry as a whole need not be.
int
pk_metrics_render(pk_metrics_t *self, char **text_p, size_t *len_p)
{
    if (!self || !text_p)
        return -EINVAL;
    s_text_t text = { NULL, 0, 0, false };
    for (size_t f = 0; !text.failed; f++) {
        pthread_mutex_lock(&self->mutex);
        bool more = f < self->nfamilies;
        if (more)
            s_put_family(&text, self->families[f]);
        pthread_mutex_unlock(&self->mutex);
        if (!more)
            break;
    }
    s_put(&text, "", 1);
    if (text.failed) {
        free(text.data);
        return -ENOMEM;
    }
    *text_p = text.data;
    if (len_p)
        *len_p = text.len - 1;
    return 0;
}

//  ---------------------------------------------------------------------------
//  JSON

//  JSON has no spelling for NaN or the infinities.
static json_t *
s_json_real(double value)
{
    return isfinite(value) ? json_real(value) : json_null();
}

static json_t *
s_json_sample(const s_family_t *family, const s_sample_t *sample)
{
    if (family->type == PK_METRIC_COUNTER)
        return json_integer(sample->count > INT64_MAX ? INT64_MAX : (json_int_t) sample->count);
    if (family->type == PK_METRIC_GAUGE)
        return s_json_real(sample->value);
    return json_pack("{s:I,s:o}", "count",
                     (json_int_t) (sample->count > INT64_MAX ? INT64_MAX : sample->count),
                     "sum", s_json_real(sample->value));
}

static bool
s_json_family(json_t *root, const s_family_t *family)
{
    json_t *entry = json_object();
    bool ok = json_object_set_new(root, family->name, entry) == 0;
    bool labelled = family->label != PK_METRIC_NONE;
    json_t *peers = ok && labelled ? json_object() : NULL;
    ok = ok && (!labelled || json_object_set_new(entry, s_label_json[family->label], peers) == 0);
    if (ok && (family->type != PK_METRIC_GAUGE || family->total_set))
        ok = json_object_set_new(entry, "total", s_json_sample(family, &family->total)) == 0;
    for (size_t i = 0; ok && i < family->npeers; i++)
        ok = json_object_set_new(peers, family->peers[i].peer,
                                 s_json_sample(family, &family->peers[i])) == 0;
    return ok;
}

json_t *
pk_metrics_json(pk_metrics_t *self)
{
    if (!self)
        return NULL;
    json_t *root = json_object();
    if (!root)
        return NULL;
    //  Each new value is attached to its parent at once (json_object_set_new
    //  takes it even when it fails), so one decref of root frees whatever
    //  was built when something fails.
    bool ok = true;
    for (size_t f = 0; ok; f++) {
        //  One family at a time under the lock, as in render.
        pthread_mutex_lock(&self->mutex);
        bool more = f < self->nfamilies;
        if (more)
            ok = s_json_family(root, self->families[f]);
        pthread_mutex_unlock(&self->mutex);
        if (!more)
            break;
    }
    if (!ok)
        json_decref(root);
    return ok ? root : NULL;
}

