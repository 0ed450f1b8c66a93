/*  metrics.c: the metrics registry, its two renderings and the HTTP
    listener that serves one of them.

    The registry is an array of families in declaration order, indexed by
    id on every update, plus a zhashx from name to family that only
    declare and find probe.  Each family holds its total and an array of labelled samples
    sorted by peer name: an update finds its peer by binary search, render
    walks them in order without sorting, and forget_peer is one search per
    family.  One mutex guards it all; a sample's label is escaped once when
    the sample is made, so rendering a family under the lock is mostly
    copying.

    The listener is a zactor whose loop hands zmq_poll its pipe, a
    non-blocking listening socket and its connections (zmq_poll takes plain
    descriptors beside ZeroMQ sockets), so destroy's $TERM wakes it at
    once.  Each connection carries one request and is closed after the
    answer; a bounded number are served at a time and each has a deadline,
    so no client can hold the listener or grow its memory.
*/
#include "daemon/metrics.h"
#include "wire/protocol.h"
#include "base/thread.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_MAX_NAME 200          //  bytes of a family name
#define S_ERRLEN 256            //  pk_metrics_http_new's err

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
static const char *const s_label_open[] = { "{peer=\"", "{reason=\"" };
static const char *const s_label_json[] = { "peers", "reasons" };

//  The table, for pk_metrics_new.
static const struct {
    const char *name;
    pk_metric_type_t type;
    const char *help;
    pk_metric_label_t label;
} s_table[PK_M_COUNT] = {
#define PK_METRIC(id, name, type, help, label) \
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
        || (unsigned) type > PK_METRIC_HISTOGRAM || (unsigned) label > PK_METRIC_REASON)
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
    if (rc == 0) {
        self->families[self->nfamilies++] = family;
        zhashx_insert(self->by_name, family->name, family);
    }
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
                   const char *help)
{
    return s_declare(self, name, type, help, PK_METRIC_PEER);
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
    size_t lo = 0, hi = family->npeers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = strcmp(peer, family->peers[mid].peer);
        if (cmp == 0) {
            *sample_p = &family->peers[mid];
            return 0;
        }
        if (cmp < 0)
            hi = mid;
        else
            lo = mid + 1;
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
         uint64_t delta, double value)
{
    if (!self)
        return -EINVAL;
    pthread_mutex_lock(&self->mutex);
    s_family_t *family = (int) id >= 0 && (size_t) id < self->nfamilies
                         ? self->families[id] : NULL;
    s_sample_t *sample = NULL;
    int rc = -ENOENT;
    if (family && family->type != type)
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
            sample->count += delta;
            if (peer)
                family->total.count += delta;
            break;
        case PK_METRIC_GAUGE:
            sample->value = value;
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
    return s_update(self, id, peer, PK_METRIC_COUNTER, delta, 0);
}

int
pk_metrics_set(pk_metrics_t *self, pk_metric_id_t id, const char *peer, double value)
{
    return s_update(self, id, peer, PK_METRIC_GAUGE, 0, value);
}

int
pk_metrics_observe(pk_metrics_t *self, pk_metric_id_t id, const char *peer, double seconds)
{
    return s_update(self, id, peer, PK_METRIC_HISTOGRAM, 0, seconds);
}

size_t
pk_metrics_forget_peer(pk_metrics_t *self, const char *peer)
{
    if (!self || !peer)
        return 0;
    size_t dropped = 0;
    pthread_mutex_lock(&self->mutex);
    for (size_t f = 0; f < self->nfamilies; f++) {
        s_family_t *family = self->families[f];
        size_t lo = 0, hi = family->label == PK_METRIC_PEER ? family->npeers : 0;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int cmp = strcmp(peer, family->peers[mid].peer);
            if (cmp == 0) {
                s_sample_free(&family->peers[mid]);
                memmove(&family->peers[mid], &family->peers[mid + 1],
                        (family->npeers - mid - 1) * sizeof *family->peers);
                family->npeers--;
                dropped++;
                break;
            }
            if (cmp < 0)
                hi = mid;
            else
                lo = mid + 1;
        }
    }
    pthread_mutex_unlock(&self->mutex);
    return dropped;
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
    if (family->type != PK_METRIC_GAUGE || family->total_set)
        s_put_sample(text, family, &family->total);
    for (size_t i = 0; i < family->npeers; i++)
        s_put_sample(text, family, &family->peers[i]);
}

//  The lock is held for one family at a time, so a scrape delays an update
//  by at most one family's formatting; each family is consistent (its
//  total agrees with its peers), the registry as a whole need not be.
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
    json_t *peers = ok ? json_object() : NULL;
    ok = ok && json_object_set_new(entry, s_label_json[family->label], peers) == 0;
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

//  ---------------------------------------------------------------------------
//  The HTTP listener

#define S_MAX_CONNS 16          //  served at once
#define S_BACKLOG 64
#define S_HEAD_MAX 4096         //  bytes of a request's line and headers
#define S_CONN_MS 10000         //  from accept to the answer's last byte
#define S_LINGER_MS 1000        //  reading what the client still sends
#define S_ACCEPT_PAUSE_MS 100   //  after accept ran out of descriptors

typedef enum {
    S_READING,                  //  the request's head
    S_WRITING,                  //  the answer
    S_LINGERING                 //  answered and shut for writing: draining
} s_conn_state_t;

typedef struct {
    int fd;                     //  -1: a free slot
    s_conn_state_t state;
    int64_t accepted, deadline; //  zclock_mono() milliseconds
    char *answer;
    size_t answer_len, sent;
    size_t got;
    char head[S_HEAD_MAX];
} s_conn_t;

struct _pk_metrics_http_t {
    pk_metrics_t *metrics;
    zactor_t *actor;
    int fd;                     //  the listening socket
    int port;
    //  The actor's own
    int64_t accept_pause;       //  accept nothing before this
    s_conn_t conns[S_MAX_CONNS];
};

static void
s_conn_close(s_conn_t *conn)
{
    close(conn->fd);
    conn->fd = -1;
    free(conn->answer);
    conn->answer = NULL;
}

//  The whole answer in one buffer, so it goes out with as few sends as the
//  socket allows.  HEAD gets the headers GET would.
static int
s_conn_answer(s_conn_t *conn, const char *status, const char *headers, const char *body,
              size_t body_len, bool head_only)
{
    char top[256];
    int n = snprintf(top, sizeof top,
                     "HTTP/1.1 %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
                     status, body_len, headers);
    if (n < 0 || (size_t) n >= sizeof top)
        return -EINVAL;
    size_t len = (size_t) n + (head_only ? 0 : body_len);
    conn->answer = malloc(len);
    if (!conn->answer)
        return -ENOMEM;
    memcpy(conn->answer, top, (size_t) n);
    if (!head_only)
        memcpy(conn->answer + n, body, body_len);
    conn->answer_len = len;
    conn->sent = 0;
    conn->state = S_WRITING;
    return 0;
}

#define S_TEXT "Content-Type: text/plain; charset=utf-8\r\n"

static int
s_conn_error(s_conn_t *conn, const char *status, const char *headers, bool head_only)
{
    char body[64];
    snprintf(body, sizeof body, "%s\n", status);
    char all[128];
    snprintf(all, sizeof all, "%s%s", S_TEXT, headers);
    return s_conn_answer(conn, status, all, body, strlen(body), head_only);
}

//  Answers the request whose head is complete in conn->head.  Only the
//  request line matters: METHOD SP TARGET SP HTTP/1.x.
static int
s_conn_respond(pk_metrics_http_t *self, s_conn_t *conn)
{
    const char *line = conn->head;
    const char *eol = memchr(line, '\n', conn->got);
    size_t n = (size_t) (eol - line);
    if (n && line[n - 1] == '\r')
        n--;
    const char *sp1 = memchr(line, ' ', n);
    const char *target = sp1 ? sp1 + 1 : NULL;
    const char *sp2 = target ? memchr(target, ' ', (size_t) (line + n - target)) : NULL;
    const char *version = sp2 ? sp2 + 1 : NULL;
    if (!version || line + n - version != 8 || memcmp(version, "HTTP/1.", 7)
        || version[7] < '0' || version[7] > '9' || sp1 == line || sp2 == target)
        return s_conn_error(conn, "400 Bad Request", "", false);

    size_t method_len = (size_t) (sp1 - line);
    bool get = method_len == 3 && memcmp(line, "GET", 3) == 0;
    bool head = method_len == 4 && memcmp(line, "HEAD", 4) == 0;
    if (!get && !head)
        return s_conn_error(conn, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", false);
    //  The query, if any, does not choose anything here.
    const char *query = memchr(target, '?', (size_t) (sp2 - target));
    size_t path_len = (size_t) ((query ? query : sp2) - target);
    if (path_len != 8 || memcmp(target, "/metrics", 8))
        return s_conn_error(conn, "404 Not Found", "", head);

    char *text = NULL;
    size_t len = 0;
    if (pk_metrics_render(self->metrics, &text, &len))
        return s_conn_error(conn, "500 Internal Server Error", "", head);
    int rc = s_conn_answer(conn, "200 OK",
                           "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
                           text, len, head);
    free(text);
    return rc;
}

static void
s_conn_write(s_conn_t *conn, int64_t now)
{
    while (conn->sent < conn->answer_len) {
        ssize_t n = send(conn->fd, conn->answer + conn->sent, conn->answer_len - conn->sent,
                         MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            s_conn_close(conn);
            return;
        }
        conn->sent += (size_t) n;
    }
    //  Closing with unread request bytes (a POST's body) would reset the
    //  connection and could destroy the answer in flight, so shut our side
    //  and read until the client closes or the linger ends.
    free(conn->answer);
    conn->answer = NULL;
    shutdown(conn->fd, SHUT_WR);
    conn->state = S_LINGERING;
    conn->deadline = now + S_LINGER_MS;
}

static void
s_conn_read(pk_metrics_http_t *self, s_conn_t *conn, int64_t now)
{
    while (true) {
        char drain[512];
        bool reading = conn->state == S_READING;
        char *into = reading ? conn->head + conn->got : drain;
        size_t room = reading ? S_HEAD_MAX - conn->got : sizeof drain;
        ssize_t n = recv(conn->fd, into, room, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            s_conn_close(conn);
            return;
        }
        if (!reading)
            continue;
        //  The head ends at the first empty line; a bare LF is tolerated.
        size_t from = conn->got > 3 ? conn->got - 3 : 0;
        conn->got += (size_t) n;
        bool done = memmem(conn->head + from, conn->got - from, "\r\n\r\n", 4)
                    || memmem(conn->head + from, conn->got - from, "\n\n", 2);
        int rc = 0;
        if (done)
            rc = s_conn_respond(self, conn);
        else if (conn->got == S_HEAD_MAX)
            rc = s_conn_error(conn, "431 Request Header Fields Too Large", "", false);
        if (rc) {
            s_conn_close(conn);
            return;
        }
        if (conn->state == S_WRITING) {
            s_conn_write(conn, now);
            return;
        }
    }
}

//  A slot for a new connection: a free one, else one that is only
//  lingering, else the one that has waited longest for its request, so
//  idle clients cannot lock a scrape out.  NULL when every slot is writing.
static s_conn_t *
s_slot(pk_metrics_http_t *self)
{
    s_conn_t *victim = NULL;
    for (size_t slot = 0; slot < S_MAX_CONNS; slot++) {
        s_conn_t *conn = &self->conns[slot];
        if (conn->fd < 0)
            return conn;
        if (conn->state == S_WRITING)
            continue;
        if (!victim || (conn->state == S_LINGERING) > (victim->state == S_LINGERING)
            || (conn->state == victim->state && conn->accepted < victim->accepted))
            victim = conn;
    }
    return victim;
}

static void
s_accept(pk_metrics_http_t *self, int64_t now)
{
    for (size_t i = 0; i < S_MAX_CONNS; i++) {
        s_conn_t *conn = s_slot(self);
        if (!conn)
            return;
        int fd = accept4(self->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            //  Out of descriptors the listening socket stays readable;
            //  pausing keeps the actor from spinning on it.
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                self->accept_pause = now + S_ACCEPT_PAUSE_MS;
            return;
        }
        if (conn->fd >= 0)
            s_conn_close(conn);
        conn->fd = fd;
        conn->state = S_READING;
        conn->accepted = now;
        conn->deadline = now + S_CONN_MS;
        conn->got = 0;
    }
}

static void
s_http_actor(zsock_t *pipe, void *args)
{
    pk_thread_block_signals();
    pk_metrics_http_t *self = args;
    zsock_signal(pipe, 0);
    zmq_pollitem_t items[2 + S_MAX_CONNS];
    size_t slot_of[2 + S_MAX_CONNS];
    while (true) {
        int64_t now = zclock_mono();
        long timeout = -1;
        int n = 0;
        items[n++] = (zmq_pollitem_t) { zsock_resolve(pipe), 0, ZMQ_POLLIN, 0 };
        int listening = -1;
        if (now >= self->accept_pause && s_slot(self)) {
            listening = n;
            items[n++] = (zmq_pollitem_t) { NULL, self->fd, ZMQ_POLLIN, 0 };
        }
        else if (now < self->accept_pause)
            timeout = (long) (self->accept_pause - now);
        int first = n;
        for (size_t slot = 0; slot < S_MAX_CONNS; slot++) {
            s_conn_t *conn = &self->conns[slot];
            if (conn->fd < 0)
                continue;
            slot_of[n] = slot;
            short events = conn->state == S_WRITING ? ZMQ_POLLOUT : ZMQ_POLLIN;
            items[n++] = (zmq_pollitem_t) { NULL, conn->fd, events, 0 };
            long left = conn->deadline > now ? (long) (conn->deadline - now) : 0;
            if (timeout < 0 || left < timeout)
                timeout = left;
        }
        if (zmq_poll(items, n, timeout) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            //  The only command is destroy's $TERM.
            char *command = zstr_recv(pipe);
            bool term = !command || streq(command, "$TERM");
            zstr_free(&command);
            if (term)
                break;
        }
        now = zclock_mono();
        for (int i = first; i < n; i++) {
            s_conn_t *conn = &self->conns[slot_of[i]];
            if (now >= conn->deadline)
                s_conn_close(conn);
            else if (items[i].revents && conn->state == S_WRITING)
                s_conn_write(conn, now);
            else if (items[i].revents)
                s_conn_read(self, conn, now);
        }
        if (listening >= 0 && items[listening].revents)
            s_accept(self, now);
    }
    for (size_t slot = 0; slot < S_MAX_CONNS; slot++)
        if (self->conns[slot].fd >= 0)
            s_conn_close(&self->conns[slot]);
}

//  "HOST:PORT" into host ("" for every interface) and port.
static int
s_split_address(const char *addr_port, char *host, size_t host_size, char *port,
                size_t port_size, char *err)
{
    const char *colon = addr_port ? strrchr(addr_port, ':') : NULL;
    if (!colon) {
        snprintf(err, S_ERRLEN, "metrics address '%s' is not HOST:PORT",
                 addr_port ? addr_port : "(null)");
        return -EINVAL;
    }
    const char *h = addr_port;
    size_t hlen = (size_t) (colon - addr_port);
    if (hlen && h[0] == '[') {
        if (hlen < 3 || h[hlen - 1] != ']') {
            snprintf(err, S_ERRLEN, "metrics address '%s': bad [IPv6] host", addr_port);
            return -EINVAL;
        }
        h++;
        hlen -= 2;
    }
    else if (memchr(h, ':', hlen)) {
        snprintf(err, S_ERRLEN, "metrics address '%s': an IPv6 host needs [brackets]",
                 addr_port);
        return -EINVAL;
    }
    else if (hlen == 1 && h[0] == '*')
        hlen = 0;
    const char *p = colon + 1;
    size_t plen = strlen(p);
    if (plen == 0 || plen >= port_size || strspn(p, "0123456789") != plen || atol(p) > 65535) {
        snprintf(err, S_ERRLEN, "metrics address '%s': the port must be 0..65535", addr_port);
        return -EINVAL;
    }
    if (hlen >= host_size) {
        snprintf(err, S_ERRLEN, "metrics address '%s': the host is too long", addr_port);
        return -EINVAL;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memcpy(port, p, plen + 1);
    return 0;
}

//  Binds the first of the address's resolutions that will, and learns the
//  port it got.
static int
s_listen(pk_metrics_http_t *self, const char *addr_port, const char *host, const char *port,
         char *err)
{
    struct addrinfo hints = {
        .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM
    };
    struct addrinfo *list = NULL;
    int gai = getaddrinfo(*host ? host : NULL, port, &hints, &list);
    if (gai) {
        int rc = gai == EAI_SYSTEM ? -errno : gai == EAI_MEMORY ? -ENOMEM : -EINVAL;
        snprintf(err, S_ERRLEN, "metrics address '%s': %s", addr_port,
                 gai == EAI_SYSTEM ? strerror(-rc) : gai_strerror(gai));
        return rc;
    }
    int rc = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = list; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        //  A restarted daemon must rebind while its old connections sit in
        //  TIME_WAIT.
        int on = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, S_BACKLOG) == 0) {
            self->fd = fd;
            rc = 0;
            break;
        }
        rc = -errno;
        close(fd);
    }
    freeaddrinfo(list);
    if (rc) {
        snprintf(err, S_ERRLEN, "cannot listen on metrics address '%s': %s", addr_port,
                 strerror(-rc));
        return rc;
    }
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    if (getsockname(self->fd, (struct sockaddr *) &bound, &bound_len)) {
        rc = -errno;
        snprintf(err, S_ERRLEN, "metrics address '%s': getsockname: %s", addr_port,
                 strerror(-rc));
        close(self->fd);
        return rc;
    }
    self->port = bound.ss_family == AF_INET6
                 ? ntohs(((struct sockaddr_in6 *) &bound)->sin6_port)
                 : ntohs(((struct sockaddr_in *) &bound)->sin_port);
    return 0;
}

pk_metrics_http_t *
pk_metrics_http_new(pk_metrics_t *metrics, const char *addr_port, int *rc_p, char *err)
{
    char scratch[S_ERRLEN];
    if (!err)
        err = scratch;
    err[0] = '\0';
    char host[256], port[8];
    pk_metrics_http_t *self = NULL;
    int rc = -EINVAL;
    if (!metrics) {
        snprintf(err, S_ERRLEN, "no metrics registry to serve");
        goto fail;
    }
    if ((rc = s_split_address(addr_port, host, sizeof host, port, sizeof port, err)))
        goto fail;
    rc = -ENOMEM;
    self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, S_ERRLEN, "out of memory");
        goto fail;
    }
    self->metrics = metrics;
    for (size_t slot = 0; slot < S_MAX_CONNS; slot++)
        self->conns[slot].fd = -1;
    //  Bound here rather than in the actor, so a bad address fails the
    //  caller's call with its reason.
    if ((rc = s_listen(self, addr_port, host, port, err)))
        goto fail_self;
    self->actor = zactor_new(s_http_actor, self);
    if (!self->actor) {
        rc = -ENOMEM;
        snprintf(err, S_ERRLEN, "cannot start the metrics listener's thread");
        goto fail_socket;
    }
    if (rc_p)
        *rc_p = 0;
    return self;

fail_socket:
    close(self->fd);
fail_self:
    free(self);
fail:
    if (rc_p)
        *rc_p = rc;
    return NULL;
}

void
pk_metrics_http_destroy(pk_metrics_http_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_metrics_http_t *self = *self_p;
    //  Returns once the actor has left its loop and closed its connections.
    zactor_destroy(&self->actor);
    close(self->fd);
    free(self);
    *self_p = NULL;
}

int
pk_metrics_http_port(const pk_metrics_http_t *self)
{
    return self ? self->port : -1;
}
