#!/bin/sh
# metric_ids.sh: code names a metric by its identifier from
# lib/daemon/metric_families.h, and the compiler checks it: the right
# identifier compiles, a misspelt one or a string name does not; so does
# one of a row the table maps from a source's list of counts (the
# session's, the role's, the store's: base/counts.h), and a count of a
# list with no metric of its own (an F row) has no identifier.  Run by
# make check (CC and JANSSON_CFLAGS from configure).
set -eu
top=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# compiles "expr" as the body of a function over a registry m
try() {
    printf '#include "daemon/metrics.h"\nint f(pk_metrics_t *m);\nint f(pk_metrics_t *m) { return %s; }\n' \
        "$1" > "$tmp/t.c"
    # shellcheck disable=SC2086
    $cc -std=c11 -D_GNU_SOURCE -Wall -Werror ${JANSSON_CFLAGS:-} -I"$top/lib" \
        -fsyntax-only "$tmp/t.c" > "$tmp/err" 2>&1
}

fail=0
if ! try 'pk_metrics_add(m, PK_M_LOOKUPS, NULL, 1)'; then
    echo "metric_ids: a table identifier does not compile:"; cat "$tmp/err"; fail=1
fi
for id in PK_M_LOOKUP_HITS PK_M_POOL_EVICTIONS PK_M_NS_HITS PK_M_SESSIONS PK_M_DIRECTORY_UP \
          PK_M_FRAMES_DROPPED PK_M_BLOCKS_CORRUPT; do
    if ! try "pk_metrics_add(m, $id, NULL, 1)"; then
        echo "metric_ids: $id does not compile:"; cat "$tmp/err"; fail=1
    fi
done
if try 'pk_metrics_add(m, PK_M_DROPPED_BAD, NULL, 1)'; then
    echo "metric_ids: a count with no metric has an identifier"; fail=1
fi
if try 'pk_metrics_add(m, PK_M_LOOKUPSS, NULL, 1)'; then
    echo "metric_ids: a misspelt identifier compiled"; fail=1
fi
if try 'pk_metrics_add(m, "p2pkv_lookups_total", NULL, 1)'; then
    echo "metric_ids: a metric named by a string compiled"; fail=1
fi
exit $fail
