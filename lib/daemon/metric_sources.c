/*  metric_sources.c: the rows of metric_families.h by source, and the loop
    that publishes a source's struct (metric_sources.h).

    The X-macro makes one reader per row, VALUE over the row's source's
    struct, and a table of (source, reader); a publish walks the table
    once, about fifty rows, and calls the registry only for a row whose
    value changed.  A peer actor publishes at every step, so that walk is
    what a step costs here: well under a microsecond.
*/
#include "daemon/metric_sources.h"

#include <string.h>

//  Each source's struct, for the readers and for last's size.
#define S_TYPE_HERE uint64_t
#define S_TYPE_SESSION pk_server_session_counters_t
#define S_TYPE_REASONS uint64_t
#define S_TYPE_CHANNEL pk_channel_stats_t
#define S_TYPE_FABRIC pk_fabric_stats_t
#define S_TYPE_POOL pk_store_stats_t
#define S_TYPE_NAMESPACE pk_store_ns_stats_t
#define S_TYPE_DIRECTORY pk_directory_stats_t
#define S_TYPE_NODE pk_node_counts_t

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

static const size_t s_sizes[] = {
    [PK_SOURCE_HERE] = sizeof (S_TYPE_HERE),
    [PK_SOURCE_SESSION] = sizeof (S_TYPE_SESSION),
    [PK_SOURCE_REASONS] = sizeof (S_TYPE_REASONS),
    [PK_SOURCE_CHANNEL] = sizeof (S_TYPE_CHANNEL),
    [PK_SOURCE_FABRIC] = sizeof (S_TYPE_FABRIC),
    [PK_SOURCE_POOL] = sizeof (S_TYPE_POOL),
    [PK_SOURCE_NAMESPACE] = sizeof (S_TYPE_NAMESPACE),
    [PK_SOURCE_DIRECTORY] = sizeof (S_TYPE_DIRECTORY),
    [PK_SOURCE_NODE] = sizeof (S_TYPE_NODE),
};

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

void
pk_metric_sources_publish(pk_metrics_t *metrics, pk_metric_source_t source, const char *label,
                          const void *now, void *last, uint64_t block_len)
{
    for (int id = 0; id < PK_M_COUNT; id++) {
        if (s_rows[id].source != source)
            continue;
        uint64_t v = s_rows[id].read(now, block_len);
        bool gauge = pk_metrics_type((pk_metric_id_t) id) == PK_METRIC_GAUGE;
        if (!last) {
            if (gauge)
                pk_metrics_set(metrics, (pk_metric_id_t) id, label, (double) v);
            else
                pk_metrics_raise(metrics, (pk_metric_id_t) id, label, v);
            continue;
        }
        uint64_t was = s_rows[id].read(last, block_len);
        if (v == was)
            continue;
        if (gauge)
            pk_metrics_shift(metrics, (pk_metric_id_t) id, label, (double) v - (double) was);
        else if (v > was)
            pk_metrics_add(metrics, (pk_metric_id_t) id, label, v - was);
    }
    if (last)
        memcpy(last, now, s_sizes[source]);
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
