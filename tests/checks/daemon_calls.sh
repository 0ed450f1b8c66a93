#!/bin/sh
# daemon_calls.sh: no two classes of lib/daemon call each other in a loop
# (issue 35).  A class is a file pair, NAME.h and NAME.c; a class calls
# another exactly when one of its files includes the other's header
# (each class declares its functions in its own header), so the includes
# between the pairs are the call graph, and it must have an order: each
# class includes only headers of classes below it.  A lower class that
# must reach a higher one is given a callback or returns a value the
# higher one acts on (doc/architecture.md, The daemon's classes).
# tsort(1) finds an order, or names a loop.  Run by make check.
set -eu
top=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$top"

edges=$(mktemp)
trap 'rm -f "$edges" "$edges.err"' EXIT
for f in lib/daemon/*.[ch]; do
    # NAME_internal.h is NAME's own header, shared by its files only
    from=$(basename "$f"); from=${from%.[ch]}; from=${from%_internal}
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"daemon\/\([^"]*\)\.h".*/\1/p' "$f"); do
        inc=${inc%_internal}
        # each class is a node of its own, its includes its arrows
        echo "$from $from"
        [ "$inc" = "$from" ] || echo "$from $inc"
    done
done > "$edges"

if ! tsort "$edges" > /dev/null 2> "$edges.err" || [ -s "$edges.err" ]; then
    echo "daemon_calls: classes of lib/daemon include each other's headers in a loop:"
    sed -n '/input contains a loop/d; s/^tsort: /  /p' "$edges.err"
    echo "daemon_calls: give the lower class a callback (an ops struct) or a return value"
    echo "daemon_calls: the higher one acts on, instead of calling up"
    exit 1
fi
echo "daemon_calls: no two classes of lib/daemon call each other in a loop"
