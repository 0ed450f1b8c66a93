#!/bin/sh
# The golden replay scenarios: every tests/replay/NAME.jsonl run through
# p2pkv-replay --mark must print exactly NAME.expected and exit with the
# status in NAME.rc (0 when there is none); a second run must print the
# same bytes (the tool is deterministic).
set -u
top=${top_srcdir:-.}
replay=${REPLAY:-bin/p2pkv-replay}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
for scenario in "$top"/tests/replay/*.jsonl; do
    name=$(basename "$scenario" .jsonl)
    want_rc=0
    [ -f "$top/tests/replay/$name.rc" ] && want_rc=$(cat "$top/tests/replay/$name.rc")
    "$replay" --mark < "$scenario" > "$tmp/$name.1" 2> "$tmp/$name.err"
    rc=$?
    "$replay" --mark < "$scenario" > "$tmp/$name.2" 2>/dev/null
    if [ "$rc" -ne "$want_rc" ]; then
        echo "FAIL $name: exit $rc, want $want_rc"; cat "$tmp/$name.err"; fail=$((fail + 1))
    elif ! diff -u "$top/tests/replay/$name.expected" "$tmp/$name.1"; then
        echo "FAIL $name: output differs from $name.expected"; fail=$((fail + 1))
    elif ! cmp -s "$tmp/$name.1" "$tmp/$name.2"; then
        echo "FAIL $name: two runs differ"; fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
done
echo "replay scenarios: $pass passed, $fail failed"
[ -e /dev/fd/9 ] && echo "replay: $pass scenarios, $fail failures" >&9
[ "$fail" -eq 0 ] && [ "$pass" -ge 25 ]
