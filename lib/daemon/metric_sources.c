/*  metric_sources.c: the rows of metric_families.h by source, and the loop
    that publishes a source's struct (metric_sources.h).

    The X-macro makes one reader per row, VALUE over the row's source's
    struct, and a table of (source, reader, gauge).  A peer actor
    publishes at every step, about a dozen sources' structs, so a publish
    must cost next to nothing when nothing changed, which is most steps: it
    first compares the struct with what it last published (one memcmp of a
    few hundred bytes) and returns; otherwise it walks only its source's
    rows (a list per source, made once) and calls the registry only for a
    row whose value changed.  Walking every row of every source at each
    step cost about 5,000 instructions per lookup (callgrind, 1-key misses).
*/
#include "daemon/metric_sources.h"

#include <pthread.h>
#include <string.h>

//  Each source's struct, for the readers and for last's size.
#define S_TYPE_HERE uint64_t
#define S_TYPE_SESSION pk_server_session_counters_t
#define S_TYPE_REASONS uint64_t
#define S_TYPE_MISSES uint64_t
#define S_TYPE_CHANNEL pk_channel_stats_t
#define S_TYPE_FABRIC pk_fabric_stats_t
#define S_TYPE_POOL pk_store_stats_t
#define S_TYPE_NAMESPACE pk_store_ns_stats_t
#define S_TYPE_DIRECTORY pk_directory_stats_t
#define S_TYPE_NODE pk_node_counts_t
#define S_TYPE_TIER pk_disk_tier_stats_t

typedef uint64_t (s_reader_fn)(const void *now, uint64_t block_len);

//  One reader per row: its VALUE over its source's struct s.
#define PK_METRIC(id, name, type, help, label, source, value) \
    static uint64_t \
    s_read_##id(const void *now, uint64_t block_len) \
    { \
        const S_TYPE_##source *s = now; \
        (void) s; \
        (void) block_len; \
        return (uint64_t) (value); \
    }
#include "daemon/metric_families.h"
#undef PK_METRIC

static const struct {
    pk_metric_source_t source;
    s_reader_fn *read;
} s_rows[PK_M_COUNT] = {
#define PK_METRIC(id, name, type, help, label, source, value) \
    [PK_M_##id] = { PK_SOURCE_##source, s_read_##id },
#include "daemon/metric_families.h"
#undef PK_METRIC
};

//  Each source's rows, in table order; made once (s_by_source_make).
_Static_assert(PK_M_COUNT <= 256, "a row's id must fit s_by_source's uint8_t");
#define S_SOURCES (PK_SOURCE_TIER + 1)
static struct {
    uint8_t ids[PK_M_COUNT];
    bool gauge[PK_M_COUNT];
    size_t n;
} s_by_source[S_SOURCES];
static pthread_once_t s_by_source_once = PTHREAD_ONCE_INIT;

static void
s_by_source_make(void)
{
    for (int id = 0; id < PK_M_COUNT; id++) {
        pk_metric_source_t source = s_rows[id].source;
        size_t n = s_by_source[source].n++;
        s_by_source[source].ids[n] = (uint8_t) id;
        s_by_source[source].gauge[n] = pk_metrics_type((pk_metric_id_t) id) == PK_METRIC_GAUGE;
    }
}

static const size_t s_sizes[] = {
    [PK_SOURCE_HERE] = sizeof (S_TYPE_HERE),
    [PK_SOURCE_SESSION] = sizeof (S_TYPE_SESSION),
    [PK_SOURCE_REASONS] = sizeof (S_TYPE_REASONS),
    [PK_SOURCE_MISSES] = sizeof (S_TYPE_MISSES),
    [PK_SOURCE_CHANNEL] = sizeof (S_TYPE_CHANNEL),
    [PK_SOURCE_FABRIC] = sizeof (S_TYPE_FABRIC),
    [PK_SOURCE_POOL] = sizeof (S_TYPE_POOL),
    [PK_SOURCE_NAMESPACE] = sizeof (S_TYPE_NAMESPACE),
    [PK_SOURCE_DIRECTORY] = sizeof (S_TYPE_DIRECTORY),
    [PK_SOURCE_NODE] = sizeof (S_TYPE_NODE),
    [PK_SOURCE_TIER] = sizeof (S_TYPE_TIER),
};

size_t
pk_metric_source_rows(pk_metric_source_t source, const uint8_t **ids_p)
{
    pthread_once(&s_by_source_once, s_by_source_make);
    *ids_p = s_by_source[source].ids;
    return s_by_source[source].n;
}

pk_metric_source_t
pk_metric_source_of(pk_metric_id_t id)
{
    return (unsigned) id < PK_M_COUNT ? s_rows[id].source : PK_SOURCE_HERE;
}

uint64_t
pk_metric_source_value(pk_metric_id_t id, const void *now, uint64_t block_len)
{
    return s_rows[id].read(now, block_len);
}

static void
s_publish(pk_metrics_t *metrics, pk_metric_source_t source, const char *label,
          const void *now, void *last, uint64_t block_len, atomic_uint_fast64_t *counted)
{
    if (last && memcmp(now, last, s_sizes[source]) == 0)
        return;                     //  nothing changed since the last publish
    pthread_once(&s_by_source_once, s_by_source_make);
    const uint8_t *ids = s_by_source[source].ids;
    for (size_t i = 0; i < s_by_source[source].n; i++) {
        pk_metric_id_t id = (pk_metric_id_t) ids[i];
        bool gauge = s_by_source[source].gauge[i];
        uint64_t v = s_rows[id].read(now, block_len);
        if (counted)
            atomic_store(&counted[id], v);
        if (!last) {
            if (gauge)
                pk_metrics_set(metrics, id, label, (double) v);
            else
                pk_metrics_raise(metrics, id, label, v);
            continue;
        }
        uint64_t was = s_rows[id].read(last, block_len);
        if (v == was)
            continue;
        if (gauge)
            pk_metrics_shift(metrics, id, label, (double) v - (double) was);
        else if (v > was)
            pk_metrics_add(metrics, id, label, v - was);
    }
    if (last)
        memcpy(last, now, s_sizes[source]);
}

void
pk_metric_sources_publish(pk_metrics_t *metrics, pk_metric_source_t source, const char *label,
                          const void *now, void *last, uint64_t block_len)
{
    s_publish(metrics, source, label, now, last, block_len, NULL);
}

//  Unchanged since last (the early return): counted holds what was
//  stored then, or zeros with last, as both start.
void
pk_metric_sources_publish_counted(pk_metrics_t *metrics, pk_metric_source_t source,
                                  const char *label, const void *now, void *last,
                                  uint64_t block_len, atomic_uint_fast64_t *counted)
{
    s_publish(metrics, source, label, now, last, block_len, counted);
}

void
pk_metric_sources_end(pk_metrics_t *metrics, pk_metric_source_t source, const char *label,
                      const void *last, uint64_t block_len)
{
    for (int id = 0; id < PK_M_COUNT; id++) {
        if (s_rows[id].source != source
            || pk_metrics_type((pk_metric_id_t) id) != PK_METRIC_GAUGE)
            continue;
        uint64_t was = s_rows[id].read(last, block_len);
        if (was)
            pk_metrics_shift(metrics, (pk_metric_id_t) id, label, -(double) was);
    }
}
