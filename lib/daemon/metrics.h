/*  metrics.h: the daemon's counters, gauges and latency histograms, and
    the two ways to read them: Prometheus text (served by an optional HTTP
    listener, --metrics-bind) and JSON for the local API's stats command.

    A registry holds metric families, each declared once with a name, a
    type, help text and the one label its samples may carry.  The daemon's
    families are the rows of metric_families.h: pk_metrics_new declares
    them all, and every update names its family by its pk_metric_id_t, so
    a misspelt metric does not compile.  A family is labelled or not,
    never both: an unlabelled family (NONE) has one sample, updated with
    label NULL; a labelled one has one sample per label value and no
    unlabelled sample, so sum() over a family counts everything once.  The
    daemon's label values come only from bounded sets (a provider, a
    namespace, a reason), never a peer's id.  A labelled family still
    keeps the sum of its counter adds and observations, which only the
    JSON shows (its "total").

    The main thread and every peer actor share one registry: every call is
    thread-safe, and an update is one short critical section (an index
    for the family, a binary search for the peer).  The first update of a
    (family, peer) pair allocates its sample.  render and json hold the
    lock one family at a time, so a scrape delays an update by at most one
    family's formatting: each family reads consistently (its total agrees
    with its peers), the registry as a whole is not one snapshot.

    Histograms have fixed buckets suited to latencies in seconds: 0.0005,
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
    and +Inf, each bound inclusive.
*/
#ifndef PK_METRICS_H_INCLUDED
#define PK_METRICS_H_INCLUDED

//  The sources' lists of counts, which metric_families.h maps to its rows
//  (base/counts.h): included here, outside the braces that file is
//  expanded in.
#include "daemon/directory.h"
#include "daemon/node_counts.h"
#include "roles/server_session.h"
#include "store/store.h"
#include "tier/disk_tier.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/*  Bytes of a peer label value (UTF-8, not empty).  */
#define PK_METRICS_MAX_PEER 255

/*  Histogram buckets, +Inf included.  */
#define PK_METRICS_BUCKETS 15

typedef enum {
    PK_METRIC_COUNTER = 0,
    PK_METRIC_GAUGE,
    PK_METRIC_HISTOGRAM
} pk_metric_type_t;

/*  The label a family's samples carry, or none.  */
typedef enum {
    PK_METRIC_PEER = 0,         //  peer: ad-hoc families only (pk_metrics_declare), never
                                //  the daemon's (unbounded: every consumer ever seen)
    PK_METRIC_REASON,           //  reason: a fixed class, e.g. of protocol violation
    PK_METRIC_NAMESPACE,        //  namespace: a name of --tenants (or shared), so as
                                //  many values as the operator's file names
    PK_METRIC_PROVIDER,         //  provider: a data-plane provider of --provider, one
                                //  value per fabric the server opened (and "unoffered")
    PK_METRIC_RAIL,             //  rail: a local address of --fabric-addr A,B (at most 8)
    PK_METRIC_NONE              //  unlabelled: the family's one sample
} pk_metric_label_t;

/*  The daemon's families, one per row of metric_families.h, in its order.  */
typedef enum {
#define PK_METRIC(id, name, type, help, label, source, value) PK_M_##id,
#include "daemon/metric_families.h"
#undef PK_METRIC
    PK_M_COUNT
} pk_metric_id_t;

typedef struct _pk_metrics_t pk_metrics_t;

/*  A registry holding every family of metric_families.h (PK_M_*), or NULL
    when out of memory.  */
pk_metrics_t *pk_metrics_new(void);

/*  A registry without families, for tests of the registry itself: they
    declare their own.  NULL when out of memory.  */
pk_metrics_t *pk_metrics_new_empty(void);

/*  Destroy any HTTP listener serving it first.  */
void pk_metrics_destroy(pk_metrics_t **self_p);

/*  Declares an ad-hoc family, labelled label (PK_METRIC_NONE: not), after
    those already there (the daemon declares none: its families are the
    table's).  name follows Prometheus ([a-zA-Z_:][a-zA-Z0-9_:]*), help is
    UTF-8 text.  Returns the family's id (>= 0, its position), -EINVAL (a
    bad name, help, type or label), -EEXIST (the name is taken, or its
    samples would collide with a histogram's _bucket, _sum or _count
    series) or -ENOMEM.  */
int pk_metrics_declare(pk_metrics_t *self, const char *name, pk_metric_type_t type,
                       const char *help, pk_metric_label_t label);

/*  The id of the family called name, or -ENOENT.  */
int pk_metrics_find(pk_metrics_t *self, const char *name);

/*  The name and type of a row of metric_families.h (NULL, and a counter,
    for an id that is not one).  */
const char *pk_metrics_name(pk_metric_id_t id);
pk_metric_type_t pk_metrics_type(pk_metric_id_t id);

/*  Updates the sample labelled peer (the label's value: a peer, reason,
    namespace or provider; NULL for an unlabelled family, and only there)
    in family id.  add is for counters, set for gauges, shift adds a
    (signed) delta to a gauge, observe is for histograms (seconds, finite
    and not negative).  A label value's first update creates its sample;
    a value is UTF-8 of 1..PK_METRICS_MAX_PEER bytes.  Returns 0, -ENOENT
    (no such family), -EINVAL (another type, a label where there is none
    or none where there is one, a bad label value or observation) or
    -ENOMEM.  */
int pk_metrics_add(pk_metrics_t *self, pk_metric_id_t id, const char *peer, uint64_t delta);
int pk_metrics_set(pk_metrics_t *self, pk_metric_id_t id, const char *peer, double value);
int pk_metrics_shift(pk_metrics_t *self, pk_metric_id_t id, const char *peer, double delta);
/*  A counter that one source alone feeds, from that source's count since
    start: raised to value (never lowered: a counter only grows).  */
int pk_metrics_raise(pk_metrics_t *self, pk_metric_id_t id, const char *peer, uint64_t value);
int pk_metrics_observe(pk_metrics_t *self, pk_metric_id_t id, const char *peer, double seconds);

/*  A counter's value: its sample labelled peer, or with peer NULL its one
    sample (a labelled family's total).  0 when the sample does not exist
    yet, or id is no counter.  For a count kept only by the registry (one
    counted where it happens) that another view also shows, so that the
    view reads it rather than a second count beside it.  */
uint64_t pk_metrics_count(pk_metrics_t *self, pk_metric_id_t id, const char *peer);

/*  The registry in the Prometheus text exposition format 0.0.4: families
    in declaration order, each with # HELP and # TYPE, then an unlabelled
    family's one sample (a counter's and a histogram's always, a gauge's
    once it has been set) or a labelled family's samples in byte order of
    their label values.
    *text_p (NUL-terminated, *len_p bytes without the NUL; len_p may be
    NULL) is the caller's to free().  Returns 0, -EINVAL or -ENOMEM.  */
int pk_metrics_render(pk_metrics_t *self, char **text_p, size_t *len_p);

/*  The registry as {"name": {"total": v}, ...} for an unlabelled family
    and {"name": {"total": v, "reasons": {"reason": v, ...}}, ...} for a
    labelled one ("peers", "namespaces", "providers" after its label; a
    labelled counter's or histogram's total is the sum of its samples, a
    labelled gauge has none): a counter's v an integer, a gauge's a real
    (null when not finite; no "total" until set), a histogram's {"count":
    n, "sum": s}.  The caller owns the object; NULL when out of memory.  */
json_t *pk_metrics_json(pk_metrics_t *self);

//  --------------------------------------------------------------------------
//  The HTTP listener

typedef struct _pk_metrics_http_t pk_metrics_http_t;

/*  Binds a TCP listener on addr_port ("HOST:PORT"; HOST an IPv4 address, a
    bracketed IPv6 address, a host name, or empty or "*" for every
    interface; PORT 0 picks a free port) and serves it from its own thread:
    GET (or HEAD) /metrics answers pk_metrics_render's text as
    "text/plain; version=0.0.4; charset=utf-8", another path 404, another
    method 405, one request per connection.  The caller never waits on a
    client, and idle clients cannot lock a scrape out.  On failure returns
    NULL with *rc_p (may be NULL) a negative error (-EINVAL for an address
    that is malformed or does not resolve, else what socket or bind said,
    e.g. -EADDRINUSE) and err (256 bytes, may be NULL) a sentence naming
    the address.  metrics must outlive the listener.  */
pk_metrics_http_t *pk_metrics_http_new(pk_metrics_t *metrics, const char *addr_port,
                                       int *rc_p, char *err);

/*  Stops the listener at once, closing its connections whatever their
    state.  Call it from the thread that created it.  */
void pk_metrics_http_destroy(pk_metrics_http_t **self_p);

/*  The bound port (the one chosen when PORT was 0).  */
int pk_metrics_http_port(const pk_metrics_http_t *self);

#endif
