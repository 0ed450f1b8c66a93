#!/bin/sh
# bench_sigint.sh: SIGINT to a running `p2pkv-bench fetch` stops every
# process it started (servers, consumers, fabric pairs) and leaves no
# /dev/shm/pkbench-* object.  Run by make check from the build tree.
set -u
bench=${P2PKV_BENCH:-bin/p2pkv-bench}
[ -x "$bench" ] || { echo "SKIP: $bench not built here"; exit 77; }
[ -x bin/p2pkv-server ] || { echo "SKIP: bin/p2pkv-server not built here"; exit 77; }
out=$(mktemp /tmp/pkbench-sigint-XXXXXX)
trap 'rm -f "$out"' EXIT

# descendants PID: every process below PID
descendants() {
    for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
        echo "$c"
        descendants "$c"
    done
}

"$bench" fetch --block-sizes 64K --blocks 32 --consumers 2 --reps 50 --seconds 1 > "$out" 2>&1 &
pid=$!
# wait until its server and consumers run (the table header is printed
# first, so wait for more than one process below it)
for _ in $(seq 1 200); do
    [ "$(descendants $pid | wc -l)" -ge 3 ] && break
    sleep 0.05
done
sleep 1
kids=$(descendants $pid)
shm=$(ls /dev/shm | grep "^pkbench-$pid-" || true)
[ -n "$kids" ] || { echo "FAIL: p2pkv-bench started no process"; cat "$out"; exit 1; }
[ -n "$shm" ] || { echo "FAIL: no /dev/shm/pkbench-$pid-* while running"; cat "$out"; exit 1; }
echo "running: bench $pid, children $(echo $kids), shm $shm"
kill -INT $pid
wait $pid
rc=$?
fail=0
[ "$rc" -eq 130 ] || { echo "FAIL: exit status $rc after SIGINT, wanted 130"; fail=1; }
sleep 0.2
for k in $kids; do
    if kill -0 "$k" 2>/dev/null && ! grep -q '^State:.*Z' /proc/"$k"/status 2>/dev/null; then
        echo "FAIL: process $k ($(tr '\0' ' ' < /proc/"$k"/cmdline)) still runs"
        kill -KILL "$k" 2>/dev/null
        fail=1
    fi
done
left=$(ls /dev/shm | grep "^pkbench-$pid-" || true)
[ -z "$left" ] || { echo "FAIL: left behind: $left"; rm -f /dev/shm/pkbench-"$pid"-*; fail=1; }
grep -q "interrupted" "$out" || { echo "FAIL: no message"; cat "$out"; fail=1; }
[ $fail -eq 0 ] && echo "ok: SIGINT stopped $(echo $kids | wc -w) processes, no shared memory left"
exit $fail
