/*  node_counts.h: the node's own counts (the NODE source of
    metric_families.h), each with its metric (base/counts.h): what the
    node reads off its classes when it publishes, twice a second
    (node.c, s_publish_metrics).  A new count is a row here and its line
    there.  Its own header, with nothing but the list, because
    metric_families.h includes it (through metrics.h) wherever a metric
    is named, and node.h would bring the daemon's settings along.
*/
#ifndef PK_NODE_COUNTS_H_INCLUDED
#define PK_NODE_COUNTS_H_INCLUDED

#include "base/counts.h"

#define PK_NODE_COUNTS(M, F) \
    M(sessions, SESSIONS, "p2pkv_sessions", GAUGE, "Live sessions", NONE) \
    M(unread_bytes, UNREAD_BYTES, "p2pkv_unread_bytes", GAUGE, \
      "Bytes of answers handed to ZeroMQ and not yet written to their peers", NONE)

typedef struct {
    PK_NODE_COUNTS(PK_COUNT_FIELD, PK_COUNT_FIELD_ONLY)
} pk_node_counts_t;

#endif
