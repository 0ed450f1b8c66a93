#!/bin/sh
# python.sh: the Python package's pytest suite (python/tests) against real
# servers, with this build tree's libp2pkv.so.0 and bin/p2pkv-server: the
# package in place, as PYTHONPATH users run it.
set -eu
py=${PYTHON:-python3}
if [ "$py" = ":" ] || ! command -v "$py" >/dev/null 2>&1; then
    echo "SKIP: no Python 3 found by configure"
    exit 77
fi
for m in pytest numpy; do
    if ! "$py" -c "import $m" 2>/dev/null; then
        echo "SKIP: $py has no $m (Debian: python3-$m; scripts/bootstrap installs it)"
        exit 77
    fi
done
lib=$PWD/lib/.libs/libp2pkv.so.0
if [ ! -f "$lib" ]; then
    echo "FAIL: $lib is not built"
    exit 1
fi
P2PKV_LIBRARY=$lib P2PKV_BIN=$PWD/bin PYTHONPATH=$top_srcdir/python PYTHONDONTWRITEBYTECODE=1
export P2PKV_LIBRARY P2PKV_BIN PYTHONPATH PYTHONDONTWRITEBYTECODE
case "${PK_LDFLAGS:-}" in
    *-fsanitize=*)
        # An instrumented library in an uninstrumented python: the
        # sanitizers' runtimes must be loaded first.  Python's own memory
        # at exit is not ours to report; the C suites check our leaks.
        LD_PRELOAD="$($CC -print-file-name=libasan.so) $($CC -print-file-name=libubsan.so)"
        ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
        export LD_PRELOAD ASAN_OPTIONS
        ;;
esac
exec "$py" -m pytest -q -p no:cacheprovider "$top_srcdir/python/tests"
