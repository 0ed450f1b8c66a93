#!/bin/sh
# exports.sh: the installed libp2pkv.so exports the public API only (every
# dynamic symbol it defines is p2pkv_*, under the version node of
# lib/libp2pkv.map) and carries the soname libp2pkv.so.0, so engines
# linked against it keep loading it across compatible releases.
# Run by make check from the build tree.
set -eu
la=lib/libp2pkv.la
[ -f "$la" ] || { echo "FAIL: $la not built here (run from the build tree)"; exit 1; }
for tool in nm readelf; do
    command -v "$tool" > /dev/null 2>&1 \
        || { echo "SKIP: $tool (binutils) is not installed"; exit 77; }
done
# the .la is libtool's shell fragment naming the shared object (dlname)
dlname=$(sed -n "s/^dlname='\(.*\)'\$/\1/p" "$la")
so=lib/.libs/$dlname
[ -n "$dlname" ] && [ -f "$so" ] || { echo "FAIL: no shared object for $la ($so)"; exit 1; }
fail=0

soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" = libp2pkv.so.0 ] && [ "$dlname" = libp2pkv.so.0 ]; then
    echo "ok: soname $soname"
else
    echo "FAIL: soname '$soname' (file $dlname), want libp2pkv.so.0"; fail=1
fi

# nm -D lists a version node as an absolute symbol (A P2PKV_0): not code
syms=$(nm -D --defined-only "$so" | awk '$2 != "A" { print $3 }')
n=$(printf '%s\n' "$syms" | grep -c . || true)
# every node of lib/libp2pkv.map: P2PKV_0, then the later additions (0.1: issue 34)
stray=$(printf '%s\n' "$syms" | grep -v -E '^p2pkv_[a-z0-9_]*@@P2PKV_0(\.[0-9]+)?$' || true)
# the additions stay in their node: an old binary never binds them
for f in p2pkv_client_get_results p2pkv_client_checks; do
    if ! printf '%s\n' "$syms" | grep -q "^$f@@P2PKV_0.1$"; then
        echo "FAIL: $f is not versioned P2PKV_0.1"; fail=1
    fi
done
if [ -n "$stray" ]; then
    echo "FAIL: exported beyond p2pkv_* (or not versioned P2PKV_0 or a later node):"
    printf '  %s\n' $stray
    fail=1
elif [ "$n" -lt 10 ]; then
    echo "FAIL: only $n symbols exported: $syms"; fail=1
else
    echo "ok: $n symbols, all p2pkv_*@@P2PKV_0[.N]"
fi
[ -e /dev/fd/9 ] && echo "exports: $n p2pkv_* symbols, soname ${soname:-none}" >&9
exit $fail
