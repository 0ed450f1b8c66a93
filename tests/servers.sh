# servers.sh: what the shell tests that start p2pkv-server share, sourced
# after setting work (a directory of the test's own): fail, the cleanup
# at exit, and waiting for a ready line.  A test adds each server's pid to
# pids (killed at exit) and each pool name it may leave to pools (removed
# at exit).  Servers write NAME.out and NAME.err in $work; fail shows the
# .err files.
# shellcheck shell=sh
pids=""
pools=""

# fail MESSAGE: says it, with every server's standard error, and exits 1
fail() {
    echo "FAIL: $*"
    for f in "$work"/*.err; do [ -f "$f" ] && sed "s|^|  $(basename "$f" .err): |" "$f"; done
    exit 1
}

# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    rc=$?
    trap - EXIT INT TERM
    for p in $pids; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    for p in $pools; do rm -f "/dev/shm$p"; done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ready OUT PID: waits for the ready line in file OUT or PID's end,
# whichever comes first (30 s bound); succeeds when the line came
ready() {
    n=0
    while ! grep -q ' ready: ' "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null \
          && [ "$n" -lt 300 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    grep -q ' ready: ' "$1"
}
