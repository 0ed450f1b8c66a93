#!/bin/sh
# bench_json.sh: p2pkv-bench --json writes the record its man page
# describes: the suite, the machine with what a wake costs here
# (machine.wake_us, measured: positive microseconds, the cross-core one
# null only on one core), and one row per configuration.  The fabric suite
# of one point, over the tcp provider on 127.0.0.1 (a few seconds).
# Run by make check from the build tree.
set -u
bench=${P2PKV_BENCH:-bin/p2pkv-bench}
[ -x "$bench" ] || { echo "SKIP: $bench not built here"; exit 77; }
json=$(mktemp /tmp/p2pkv-bench-json.XXXXXX)
trap 'rm -f "$json"' EXIT
fail=0

if ! out=$("$bench" fabric --block-sizes 64K --batches 8 --reps 1 --json "$json" 2>&1); then
    echo "FAIL: p2pkv-bench fabric: $out"
    exit 1
fi

# FIELD: the number (or null) on the JSON's line "FIELD": ...
field() { sed -n "s/^ *\"$1\": \([^,]*\),\{0,1\}\$/\1/p" "$json" | head -1; }
positive() { awk -v v="$1" 'BEGIN { exit !(v ~ /^[0-9.eE+-]+$/ && v + 0 > 0) }'; }

[ "$(field suite)" = '"fabric"' ] || { echo "FAIL: suite is $(field suite)"; fail=1; }
same=$(field same_cpu) cross=$(field cross_cpu)
if positive "$same"; then echo "ok: machine.wake_us.same_cpu $same"
else echo "FAIL: machine.wake_us.same_cpu is \"$same\""; fail=1; fi
if [ "$(getconf _NPROCESSORS_ONLN)" -gt 1 ]; then
    if positive "$cross"; then echo "ok: machine.wake_us.cross_cpu $cross"
    else echo "FAIL: machine.wake_us.cross_cpu is \"$cross\" on a machine of several cores"; fail=1; fi
elif [ "$cross" != null ]; then
    echo "FAIL: machine.wake_us.cross_cpu is \"$cross\" on one core (wanted null)"; fail=1
fi
printf '%s\n' "$out" | grep -q '^machine: waking a sleeping process takes' \
    || { echo "FAIL: no machine: line in the output"; fail=1; }
[ "$(field block_size)" = 65536 ] && [ "$(field batch)" = 8 ] \
    || { echo "FAIL: no row of 64 KiB x 8"; fail=1; }
exit $fail
