#!/bin/sh
# install.sh: what `make install` leaves is usable by someone else's
# program.  Installs this build tree into a staging DESTDIR, checks each
# installed header compiles on its own with only pkg-config's flags,
# builds tests/install/consumer.c with only `pkg-config --cflags --libs
# p2pkv`, p2pkv.pc being the only .pc file pkg-config may find (and those
# flags being our own directories and -lp2pkv), publishes random blocks on
# a live p2pkv-server (tcp provider, loopback) with `p2pkv put --local`,
# and runs the consumer against the installed libp2pkv.so.0: it gets every
# key and verifies every byte.
# Run by make check from the build tree (MAKE, CC, libdir and PK_LDFLAGS
# come from AM_TESTS_ENVIRONMENT).
set -eu
top=${top_srcdir:-.}
blocks=8 block_len=4096
work="" pid="" pool=/p2pkv-install-$$

say() { echo "install: $*"; }
summary() { [ -e /dev/fd/9 ] && echo "install: $*" >&9; return 0; }
fail() { say "FAIL: $*" >&2; summary "FAILED: $*"; exit 1; }

# proc_gone PID: the process has exited (or is a zombie awaiting wait)
proc_gone() {
    st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
    [ -z "$st" ] || [ "$st" = Z ]
}

# stop PID: SIGTERM, at most 10 s to exit, then SIGKILL; returns its status
stop() {
    kill -TERM "$1" 2>/dev/null || true
    n=0
    while ! proc_gone "$1" && [ "$n" -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    proc_gone "$1" || kill -KILL "$1" 2>/dev/null || true
    st=0
    wait "$1" 2>/dev/null || st=$?
    return "$st"
}

# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    rc=$?
    trap - EXIT INT TERM
    [ -n "$pid" ] && { stop "$pid" || true; }
    rm -f "/dev/shm$pool"
    [ -n "$work" ] && rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

{ [ -x bin/p2pkv-server ] && [ -x bin/p2pkv ] && [ -f Makefile ]; } \
    || fail "bin/p2pkv-server, bin/p2pkv or Makefile missing (run from the build tree)"
[ -n "${libdir:-}" ] || fail "libdir not set (run by make check)"
command -v pkg-config > /dev/null 2>&1 || { say "SKIP: pkg-config is not installed"; exit 77; }
work=$(mktemp -d /tmp/p2pkv-install-XXXXXX) || fail "mktemp failed"
dest=$work/dest

# The install itself, by the Makefile that made this tree.  make check
# runs this test under make: its jobserver descriptors are not ours
# (MAKEFLAGS), so this make runs on its own.
say "make install DESTDIR=$dest"
(unset MAKEFLAGS MFLAGS; ${MAKE:-make} install DESTDIR="$dest") > "$work/install.log" 2>&1 \
    || { cat "$work/install.log"; fail "make install DESTDIR=$dest failed"; }
for page in p2pkv.1 p2pkv-bench.1 p2pkv-replay.1 p2pkv.3 p2pkv-server.8; do
    [ -n "$(find "$dest" -name "$page" -path "*/man${page##*.}/*")" ] \
        || fail "man page $page not installed"
done
pcfile=$dest$libdir/pkgconfig/p2pkv.pc
[ -f "$pcfile" ] || fail "no $pcfile installed"
[ -e "$dest$libdir/libp2pkv.so.0" ] || fail "no libp2pkv.so.0 in $dest$libdir"

# A copy of the installed .pc with each absolute directory moved into the
# staging tree (what DESTDIR moved), the rest of it as installed.
mkdir -p "$work/pc"
sed "s|^\([a-z_]*\)=/|\1=$dest/|" "$pcfile" > "$work/pc/p2pkv.pc"
# pkg-config finds that file and no other: PKG_CONFIG_LIBDIR names its
# directory alone (the system's .pc files, czmq's and the rest, are not
# searched) and PKG_CONFIG_PATH is unset.  What someone with libp2pkv's
# own files installed, and none of its dependencies' development files,
# has: the public headers include only libc's, so nothing else may be
# needed (p2pkv.pc.in says why it requires nothing).
PKG_CONFIG_LIBDIR=$work/pc
export PKG_CONFIG_LIBDIR
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
pkg-config --validate p2pkv || fail "pkg-config --validate p2pkv fails"
flags=$(pkg-config --cflags --libs p2pkv) \
    || fail "pkg-config --cflags --libs p2pkv fails with only p2pkv.pc to be found"
say "pkg-config --cflags --libs p2pkv (PKG_CONFIG_LIBDIR=$work/pc alone): $flags"
# and they are our include directory, our library directory and -lp2pkv,
# nothing of the dependencies' (czmq's -I/usr/include/pgm-5.3 ... was)
inc=$(pkg-config --variable=includedir p2pkv)
lib=$(pkg-config --variable=libdir p2pkv)
for f in $flags; do
    case "$f" in
        "-I$inc"|"-L$lib"|-lp2pkv) ;;
        *) fail "pkg-config --cflags --libs p2pkv gives $f beyond -I$inc -L$lib -lp2pkv: $flags" ;;
    esac
done
src=$(cd "$top" && pwd)
# Beyond the staged prefix (which make distcheck puts inside the build
# tree), nothing may point into the source or build tree.
staged=$(pkg-config --variable=prefix p2pkv)
rest=$(printf '%s' "$flags" | sed "s|$staged||g")
case "$rest" in *"$src"*|*"$PWD"*) fail "the flags name the source or build tree: $flags" ;; esac

# An ASan-instrumented libp2pkv.so needs the ASan runtime loaded first:
# the consumer is built with the build's sanitizer flags (PK_LDFLAGS, empty
# otherwise), as a sanitized program of a user's would be, rather than
# LD_PRELOADing libasan under a program that is not itself checked.
san=${PK_LDFLAGS:-}
cc=${CC:-cc}
for h in p2pkv.h p2pkv_engine.h; do
    [ -f "$inc/$h" ] || fail "$h not installed in $inc"
    # shellcheck disable=SC2086
    printf '#include <%s>\n' "$h" | $cc -std=c11 -Wall -Wextra -Werror -pedantic \
        -fsyntax-only $(pkg-config --cflags p2pkv) -x c - \
        || fail "$h does not compile on its own with pkg-config --cflags p2pkv"
done
# shellcheck disable=SC2086
$cc -std=c11 -Wall -Wextra -Werror $san -o "$work/consumer" "$top/tests/install/consumer.c" \
    $flags || fail "the consumer does not build with pkg-config --cflags --libs p2pkv"
say "the consumer built and linked with $cc -std=c11 -Wall -Wextra -Werror${san:+ $san} and exactly those flags"

LD_LIBRARY_PATH=$dest$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
if command -v ldd > /dev/null 2>&1; then
    so=$(ldd "$work/consumer" | sed -n 's/.*libp2pkv\.so\.0 => \([^ ]*\).*/\1/p')
    case "$so" in
        "$dest$libdir"/*) say "the consumer loads $so" ;;
        *) fail "the consumer loads libp2pkv.so.0 from '$so', not $dest$libdir" ;;
    esac
fi

# A server on a loopback port the kernel picks (tcp://127.0.0.1:*): no race
# for a free port; its endpoint is read from the ready line.
bin/p2pkv-server --peer-id "install-$$" --bind "tcp://127.0.0.1:*" --fabric-addr 127.0.0.1 \
    --local "ipc://$work/s.sock" --pool-name "$pool" --pool-blocks $((blocks + 8)) \
    --block-len "$block_len" --provider tcp --log-level warn \
    > "$work/ready" 2> "$work/server.log" &
pid=$!
n=0
while ! grep -q ' ready: ' "$work/ready" 2> /dev/null && [ "$n" -lt 300 ]; do
    proc_gone "$pid" && break
    sleep 0.1; n=$((n + 1))
done
grep -q ' ready: ' "$work/ready" || { cat "$work/server.log"; fail "the server did not start"; }
endpoint=$(sed -n 's/.*peers at \([^,]*\),.*/\1/p' "$work/ready")
say "server at $endpoint"

mkdir -p "$work/in"
i=0
while [ "$i" -lt "$blocks" ]; do
    head -c "$block_len" /dev/urandom > "$work/in/block-$i"
    i=$((i + 1))
done
bin/p2pkv put --local "ipc://$work/s.sock" "$work"/in/block-* > "$work/keys" \
    || { cat "$work/server.log"; fail "p2pkv put failed"; }
[ "$(wc -l < "$work/keys")" -eq "$blocks" ] || fail "put published $(wc -l < "$work/keys") of $blocks blocks"

"$work/consumer" "$endpoint" "$work/keys" || fail "the consumer failed (status $?)"
# and it does compare: one byte of one file changed is a mismatch (1)
v=$(dd if="$work/in/block-3" bs=1 skip=1000 count=1 2> /dev/null | od -An -tu1 | tr -d ' ')
# shellcheck disable=SC2059  # the format is the octal escape of the new byte
printf "\\$(printf '%o' $(((v + 1) % 256)))" \
    | dd of="$work/in/block-3" bs=1 seek=1000 conv=notrunc 2> /dev/null
st=0
"$work/consumer" "$endpoint" "$work/keys" > /dev/null 2> "$work/mismatch" || st=$?
[ "$st" -eq 1 ] && grep -q 'block-3: byte' "$work/mismatch" \
    || fail "a changed byte went unnoticed: status $st, $(cat "$work/mismatch")"

# The Python package as installed: under pythondir, finding the library
# where _install.py says make install put it (moved into DESTDIR here).
py=${PYTHON:-:}
if [ "$py" != ":" ] && [ -n "${pythondir:-}" ] && "$py" -c 'import numpy' 2> /dev/null; then
    [ -f "$dest$pythondir/p2pkv/__init__.py" ] || fail "the Python package is not in $dest$pythondir"
    grep -q "LIBDIR = \"$libdir\"" "$dest$pythondir/p2pkv/_install.py" \
        || fail "_install.py does not name $libdir"
    case "$san" in
        *-fsanitize=*) pre="$($cc -print-file-name=libasan.so) $($cc -print-file-name=libubsan.so)" ;;
        *) pre="" ;;
    esac
    # shellcheck disable=SC2016
    LD_PRELOAD=$pre ASAN_OPTIONS=detect_leaks=0 PYTHONPATH=$dest$pythondir \
    P2PKV_LIBRARY=$dest$libdir/libp2pkv.so.0 PYTHONDONTWRITEBYTECODE=1 "$py" - \
        "$endpoint" "$work/keys" "$block_len" > "$work/py.out" 2>&1 <<'PY' || { cat "$work/py.out"; fail "the installed Python package failed"; }
import sys, p2pkv
endpoint, listing, block_len = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [line.split() for line in open(listing)]
keys = [bytes.fromhex(k) for k, _ in rows]
with p2pkv.Client("install-py", len(keys), block_len) as c:
    s = c.connect(endpoint)
    assert all(c.get(s, keys, list(range(len(keys)))))
    # block-3 was changed above: every other block is as published
    bad = [f for i, (_, f) in enumerate(rows) if c.block(i).tobytes() != open(f, "rb").read()]
    assert [b.rsplit("/", 1)[1] for b in bad] == ["block-3"], bad
print("python ok:", p2pkv.__file__)
PY
    say "$(cat "$work/py.out")"
else
    say "no Python with NumPy: the installed Python package is not exercised"
fi

# a clean shutdown (the sanitizers report at exit)
st=0
stop "$pid" || st=$?
pid=""
[ "$st" -eq 0 ] || { cat "$work/server.log"; fail "the server exited with status $st"; }
say "$blocks blocks fetched through the installed library, all verified"
summary "make install DESTDIR, pkg-config, $blocks blocks verified through libp2pkv.so.0"
exit 0
