/*  counts.h: the shape of a struct of counts declared as an X-macro list,
    so that a count and the metric the daemon exports for it are one row.

    A layer that counts (a session, the role, the store, the directory,
    the node) declares its counts as a list

        #define PK_THING_COUNTS(M, F) \
            M(field, ID, "p2pkv_name", TYPE, "help", LABEL) \
            F(field)

    M is a count with its own metric: a uint64_t field, and the row of
    lib/daemon/metric_families.h that exports it (ID, name, TYPE, help
    and LABEL as that file's PK_METRIC; its VALUE is the field).  F is a
    count with no metric of its own: read by a row of metric_families.h
    that combines fields, or by the stats only.  The struct's fields are
    the list under PK_COUNT_FIELD, and metric_families.h maps the list to
    its rows; so a new count is its row in the list, and the line that
    counts it.

    The list only names the daemon's ID and TYPE as tokens: the layer
    that declares it includes nothing of the daemon (the layers point
    down), and only metric_families.h gives the tokens a meaning.  A
    comment inside the list is a block comment: a line comment would
    swallow the backslash that continues it.
*/
#ifndef PK_COUNTS_H_INCLUDED
#define PK_COUNTS_H_INCLUDED

#include <stdint.h>

/*  A list's fields: PK_THING_COUNTS(PK_COUNT_FIELD, PK_COUNT_FIELD_ONLY).  */
#define PK_COUNT_FIELD(field, id, name, type, help, label) uint64_t field;
#define PK_COUNT_FIELD_ONLY(field) uint64_t field;

/*  A list's rows with no metric, for metric_families.h.  */
#define PK_COUNT_NO_METRIC(field)

#endif
