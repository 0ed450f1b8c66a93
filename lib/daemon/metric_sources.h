/*  metric_sources.h: where the daemon's metrics come from, and the one
    loop that publishes them (private to lib/daemon).

    A row of metric_families.h names its SOURCE, a struct of counts kept
    where they happen (a session's counters, a channel's or a fabric's
    stats, the store's, the directory's, the node's own), and the VALUE
    expression that reads it.  Whoever holds such a struct hands it here
    now and then (the peer actor at each step, the node twice a second),
    and every row of that source is published: no line per metric, no
    copy of what was published per metric.  Rows counted where they
    happen (HERE) are pk_metrics_add or _observe calls of their own.
*/
#ifndef PK_METRIC_SOURCES_H_INCLUDED
#define PK_METRIC_SOURCES_H_INCLUDED

#include "base/transport.h"
#include "daemon/directory.h"
#include "daemon/metrics.h"
#include "daemon/node_counts.h"
#include "store/store.h"
#include "roles/server_session.h"

#include <stdatomic.h>
#include <stdint.h>

typedef enum {
    PK_SOURCE_HERE = 0,             //  counted in place, published by no loop
    PK_SOURCE_SESSION,              //  pk_server_session_counters_t
    PK_SOURCE_REASONS,              //  uint64_t: one reason's count of by_reason
    PK_SOURCE_MISSES,               //  uint64_t: one miss reason's count (the role's
                                    //  miss_reasons)
    PK_SOURCE_CHANNEL,              //  pk_channel_stats_t
    PK_SOURCE_FABRIC,               //  pk_fabric_stats_t, labelled by provider
    PK_SOURCE_POOL,                 //  pk_store_stats_t
    PK_SOURCE_NAMESPACE,            //  pk_store_ns_stats_t, labelled by namespace
    PK_SOURCE_DIRECTORY,            //  pk_directory_stats_t
    PK_SOURCE_NODE,                 //  pk_node_counts_t (node_counts.h)
    PK_SOURCE_TIER                  //  pk_disk_tier_stats_t (tier/disk_tier.h)
} pk_metric_source_t;

/*  Publishes one instance of source: now is a struct of the source's type,
    label the value of the label its families carry (NULL for unlabelled
    ones), block_len what VALUE expressions may scale by.

    Alone (last NULL): the instance is the only one behind each of its
    samples (the pool; a fabric, by its provider; a namespace): counters
    are raised to its count, gauges set.  One of many (the sessions, into
    one unlabelled sample): last is the instance's struct as last
    published (zeroed at its start) and is updated here; counters add what
    grew since, gauges shift by what changed, so the samples are sums.  */
void pk_metric_sources_publish(pk_metrics_t *metrics, pk_metric_source_t source,
                               const char *label, const void *now, void *last,
                               uint64_t block_len);

/*  The same, one of many, and each row's value stored at counted[id] too
    (a session's own figures, read by another thread), read once for
    both: a lookup's step published its session's rows twice over.  */
void pk_metric_sources_publish_counted(pk_metrics_t *metrics, pk_metric_source_t source,
                                       const char *label, const void *now, void *last,
                                       uint64_t block_len, atomic_uint_fast64_t *counted);

/*  One of many ends: its gauges shift its last values out (a session's
    transfers in flight leave the server's).  */
void pk_metric_sources_end(pk_metrics_t *metrics, pk_metric_source_t source,
                           const char *label, const void *last, uint64_t block_len);

/*  A source's rows (ids of pk_metric_id_t, in table order): how many, and
    where *ids_p points.  */
size_t pk_metric_source_rows(pk_metric_source_t source, const uint8_t **ids_p);

/*  A row's source, and its VALUE read from now (a struct of that source).  */
pk_metric_source_t pk_metric_source_of(pk_metric_id_t id);
uint64_t pk_metric_source_value(pk_metric_id_t id, const void *now, uint64_t block_len);

#endif
