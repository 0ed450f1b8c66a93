#!/bin/sh
# Rails over network namespaces (issue 38, point 4): a server host and a
# consumer host joined by two veth pairs, each shaped with tc to
# RAILNET_RATE Mbit/s both ways (scripts/railnet.sh), plus an unshaped
# control pair for ZeroMQ.  A key is the SHA-256 of its block, so every
# byte fetched is checked against its key and its source file.
#
# One rail (runs on any build):
#   1. a fetch over rail 1: every byte checked, rail 1's counters carried
#      the blocks, rail 2's nothing, and no faster than the shaped rate
#      (the shaping holds);
#   2. rail 1 set down (server side) once its counter passed a quarter of
#      a fetch's bytes: the fetch fails on its own (no other path), every
#      block reported fetched is intact (--no-verify, so the landing
#      accounting is what is judged, not the checksums), none corrupt, the
#      server lives, and once the link is up again a fetch gets every block.
# Two rails (p2pkv-server --fabric-addr A,B; a build without rails refuses
# the list, and this part SKIPs saying so, detected from that refusal only):
#   a. a fetch over both: every byte checked, each rail's counter at least
#      a quarter of the blocks' bytes;
#   b. rail 2 set down (server side) once its counter passed a quarter of
#      the bytes: the server takes it out after --rail-stall (a quarter of
#      its 10 s stall timeout) and sends its unconfirmed writes over rail 1,
#      so the fetch gets every block, intact (0 lost, 0 corrupt), and the
#      server's metrics count the failure on rail 2 alone
#      (p2pkv_rail_failures_total);
#   b2. the same within one session (p2pkv get --repeat): rail 2 set down
#      a quarter of the way through the first pass, and up again once the
#      server counted it failed; the consumer offers a fresh registration
#      for it (capability rejoin) and after its back-off (twice the rail
#      stall, 5 s) the server pairs it again: a later pass's bytes go over
#      both rails, every pass gets every block intact, and the server
#      counts the rejoin on rail 2 (p2pkv_rail_rejoins_total);
#   c. the consumer with rail 1 only: the fetch works over the one pair,
#      rail 2 carries nothing, and the server's stats during it show the
#      session's one pair and rail 2 unpaired (session_rails, read with
#      python3);
#   d. rail 2 reshaped to a third of rail 1's rate: a fetch over both
#      gets every block, byte for byte, and the writer splits by the
#      rates it measures, so rail 1 carries at least twice rail 2's
#      bytes by the server's device counters (3:1 wanted; an even split
#      carries 1:1), and the fetch is faster than two of the slow rail.
# Large blocks sliced over both rails (capability slices; a server whose
# build does not slice carries each block on one rail, and e fails):
#   e. one block of BIG_LEN (64 MiB) over two rails: every byte checked,
#      each rail's counter at least a quarter of the block (its slices
#      went over both), and faster than one rail can go (1.5x its rate);
#   e2. rail 2 set down a quarter of the way through BIG_BLOCKS (4) such
#      blocks (once it carried an eighth of their bytes: each rail carries
#      half): the server takes it out and sends its unconfirmed slices
#      over rail 1, so every block lands whole, intact (0 lost, 0
#      corrupt).
# Needs root, iproute2 and tc; exits 77 (skip) with the reason otherwise.
#   BLOCKS (32), MID_BLOCKS (96), BLOCK_LEN (1048576), BIG_LEN (67108864),
#   BIG_BLOCKS (4), RAILNET_RATE (300)
set -u
blocks=${BLOCKS:-32}
mid_blocks=${MID_BLOCKS:-96}
block_len=${BLOCK_LEN:-1048576}
big_len=${BIG_LEN:-67108864}
big_blocks=${BIG_BLOCKS:-4}

say() { echo "rails_netns: $*"; }
summary() { [ -e /dev/fd/9 ] && echo "rails_netns: $*" >&9; return 0; }
skip() { say "SKIP: $*" >&2; summary "skipped: $*"; exit 77; }
fail() { say "FAIL: $*" >&2; summary "FAILED: $*"; exit 1; }

# shellcheck source-path=SCRIPTDIR source=../../scripts/railnet.sh
. "$(dirname "$0")/../../scripts/railnet.sh"
rn_bin=$(cd bin 2> /dev/null && pwd) || fail "run from the build tree (bin/ not found)"
rn_check "$rn_bin"
rn_up 2
s1=$(rn_dev s 1) s2=$(rn_dev s 2)
say "rails $(rn_addrs s 1 2) (server) and $(rn_addrs c 1 2) (consumer), $rn_rate Mbit/s each way"

count() { grep -cE " $2( [a-z_]+)?\$" "$1" || true; }
# delta DEV_SIDE I rx|tx BEFORE: bytes since BEFORE
delta() { echo $(($(rn_counter "$1" "$2" "$3") - $4)); }
# wait_passed I BEFORE AT PID: rail I's server-side tx counter passed AT
# bytes since BEFORE, while PID (the fetch) runs; fails when the fetch ended
# first or after 60 s
wait_passed() {
    n=0
    while [ "$(delta s "$1" tx "$2")" -lt "$3" ]; do
        rn_gone "$4" && fail "the fetch ended before rail $1 carried $3 bytes (raise MID_BLOCKS)"
        n=$((n + 1))
        [ "$n" -lt 3000 ] || fail "rail $1 did not carry $3 bytes in 60 s"
        sleep 0.02
    done
}
# alive NAME PID: the server still runs
alive() { rn_gone "$2" && { cat "$rn_work/$1.log"; fail "server $1 died"; }; return 0; }

# ---- one rail --------------------------------------------------------------
rn_server one "$(rn_addr s 1)" "$mid_blocks" "$block_len" \
    || { printf '%s\n' "$rn_refusal"; fail "the one-rail server did not start"; }
pid_one=${rn_pids##* }
rn_publish one "$blocks" "$block_len"
bytes=$((blocks * block_len))

say "1. $blocks blocks over rail 1"
tx1=$(rn_counter s 1 tx) tx2=$(rn_counter s 2 tx)
rn_get "$(rn_addr c 1)" "$rn_work/one" "$rn_work/got-one" \
    || { cat "$rn_work/got-one.err" "$rn_work/one.log"; fail "p2pkv get over one rail failed"; }
[ "$(count "$rn_work/got-one" fetched)" -eq "$blocks" ] || fail "fetched $(count "$rn_work/got-one" fetched) of $blocks"
rn_verify "$rn_work/one"; [ "$rn_there" -eq "$blocks" ] || fail "not every block was written"
d1=$(delta s 1 tx "$tx1") d2=$(delta s 2 tx "$tx2")
say "rail 1 carried $d1 bytes, rail 2 $d2, for $bytes"
[ "$d1" -ge "$bytes" ] || fail "rail 1 carried $d1 bytes, want at least $bytes"
[ "$d2" -lt $((bytes / 100)) ] || fail "rail 2 carried $d2 bytes with no server on it"
secs=$(sed -n 's/.* in \([0-9.]*\) s,.*/\1/p' "$rn_work/got-one.err")
[ -n "$secs" ] || fail "no time in p2pkv get's summary: $(cat "$rn_work/got-one.err")"
mbit=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%d", b * 8 / s / 1e6 }')
say "one rail: $mbit Mbit/s of $rn_rate shaped"
# a tenth above for the token bucket's burst and the timer's grain
[ "$mbit" -le $((rn_rate * 11 / 10)) ] || fail "one rail moved $mbit Mbit/s, above its $rn_rate: the shaping does not hold"

say "2. rail 1 set down a quarter of the way through $mid_blocks blocks"
rn_publish one "$mid_blocks" "$block_len"
bytes=$((mid_blocks * block_len))
tx1=$(rn_counter s 1 tx)
rn_get "$(rn_addr c 1)" "$rn_work/one-down" "$rn_work/got-one-down" --no-verify &
get=$!
wait_passed 1 "$tx1" $((bytes / 4)) "$get"
ip -n "$rn_ns_s" link set "$s1" down || fail "cannot set $s1 down"
say "$s1 down after $(delta s 1 tx "$tx1") bytes"
wait "$get"; st=$?
got=$(count "$rn_work/got-one-down" fetched)
say "the fetch ended with status $st, $got of $mid_blocks fetched: $(tail -1 "$rn_work/got-one-down.err")"
[ "$(count "$rn_work/got-one-down" corrupt)" -eq 0 ] || fail "blocks reported corrupt"
rn_verify "$rn_work/one-down"; [ "$rn_there" -eq "$got" ] || fail "the blocks written are not the ones reported fetched"
# its only rail down with three quarters to go: the fetch cannot succeed,
# it must fail, on its own, within its stall timeout
{ [ "$st" -ne 0 ] && [ "$got" -lt "$mid_blocks" ]; } || fail "the fetch succeeded ($got of $mid_blocks blocks) with its only rail down"
[ "$st" -lt 124 ] || fail "the fetch did not end on its own (status $st)"
alive one "$pid_one"
ip -n "$rn_ns_s" link set "$s1" up || fail "cannot set $s1 up"
rn_get "$(rn_addr c 1)" "$rn_work/one-up" "$rn_work/got-one-up" \
    || { cat "$rn_work/got-one-up.err" "$rn_work/one.log"; fail "p2pkv get after the rail came back failed"; }
rn_verify "$rn_work/one-up"; [ "$rn_there" -eq "$mid_blocks" ] || fail "not every block after the rail came back"
rn_stop "$pid_one"; st=$?
[ "$st" -eq 0 ] || { cat "$rn_work/one.log"; fail "the one-rail server exited with status $st"; }
rn_pids=${rn_pids% *}

# ---- two rails -------------------------------------------------------------
if ! rn_server two "$(rn_addrs s 1 2)" "$mid_blocks" "$block_len"; then
    rn_refused_list "$(rn_addrs s 1 2)" \
        && skip "server refused --fabric-addr with two addresses: rails not built (one-rail parts 1 and 2 passed; the server said: $rn_refusal)"
    printf '%s\n' "$rn_refusal"
    fail "the two-rail server did not start"
fi
pid_two=${rn_pids##* }
rn_publish two "$blocks" "$block_len"
bytes=$((blocks * block_len))

say "a. $blocks blocks over two rails"
tx1=$(rn_counter s 1 tx) tx2=$(rn_counter s 2 tx)
rn_get "$(rn_addrs c 1 2)" "$rn_work/two" "$rn_work/got-two" \
    || { cat "$rn_work/got-two.err" "$rn_work/two.log"; fail "p2pkv get over two rails failed"; }
[ "$(count "$rn_work/got-two" fetched)" -eq "$blocks" ] || fail "fetched $(count "$rn_work/got-two" fetched) of $blocks"
rn_verify "$rn_work/two"; [ "$rn_there" -eq "$blocks" ] || fail "not every block was written"
d1=$(delta s 1 tx "$tx1") d2=$(delta s 2 tx "$tx2")
say "rail 1 carried $d1 bytes, rail 2 $d2, for $bytes"
[ "$d1" -ge $((bytes / 4)) ] || fail "rail 1 carried $d1 bytes, less than a quarter of $bytes"
[ "$d2" -ge $((bytes / 4)) ] || fail "rail 2 carried $d2 bytes, less than a quarter of $bytes"
[ $((d1 + d2)) -ge "$bytes" ] || fail "the rails carried $((d1 + d2)) bytes, less than $bytes"

say "b. rail 2 set down a quarter of the way through $mid_blocks blocks"
rn_publish two "$mid_blocks" "$block_len"
bytes=$((mid_blocks * block_len))
tx2=$(rn_counter s 2 tx)
rn_get "$(rn_addrs c 1 2)" "$rn_work/two-down" "$rn_work/got-two-down" --no-verify &
get=$!
wait_passed 2 "$tx2" $((bytes / 4)) "$get"
ip -n "$rn_ns_s" link set "$s2" down || fail "cannot set $s2 down"
say "$s2 down after $(delta s 2 tx "$tx2") bytes on it"
wait "$get"; st=$?
got=$(count "$rn_work/got-two-down" fetched)
say "the fetch ended with status $st, $got of $mid_blocks fetched: $(tail -1 "$rn_work/got-two-down.err")"
[ "$(count "$rn_work/got-two-down" corrupt)" -eq 0 ] || fail "blocks reported corrupt"
rn_verify "$rn_work/two-down"; [ "$rn_there" -eq "$got" ] || fail "the blocks written are not the ones reported fetched"
# the round moved to rail 1: the whole fetch, on its own, every byte
[ "$st" -eq 0 ] || { cat "$rn_work/got-two-down.err" "$rn_work/two.log"; fail "the fetch failed (status $st) with rail 2 down: its writes were not moved to rail 1"; }
[ "$got" -eq "$mid_blocks" ] || fail "fetched $got of $mid_blocks with rail 2 down"
timeout 60 ip netns exec "$rn_ns_s" "$rn_bin/p2pkv" stats --local "$rn_local" --json \
    > "$rn_work/stats-down" || fail "p2pkv stats after b failed"
if command -v python3 > /dev/null 2>&1; then
    marks=$(python3 -c '
import json, sys
m = json.load(open(sys.argv[1])).get("metrics") or {}
f = (m.get("p2pkv_rail_failures_total") or {}).get("rails") or {}
if f.get(sys.argv[2], 0) < 1 or any(v for a, v in f.items() if a != sys.argv[2]):
    sys.exit("want one failure on %s alone in p2pkv_rail_failures_total, got %r" % (sys.argv[2], f))
print("p2pkv_rail_failures_total %s: %d" % (sys.argv[2], f[sys.argv[2]]))
' "$rn_work/stats-down" "$(rn_addr s 2)" 2>&1) || { cat "$rn_work/stats-down"; fail "$marks"; }
    say "server stats: $marks"
fi
alive two "$pid_two"
ip -n "$rn_ns_s" link set "$s2" up || fail "cannot set $s2 up"

# metric NAME: the server's counter NAME on rail 2 (0 where not counted)
metric() {
    timeout 60 ip netns exec "$rn_ns_s" "$rn_bin/p2pkv" stats --local "$rn_local" --json \
        > "$rn_work/stats-metric" || fail "p2pkv stats failed"
    python3 -c '
import json, sys
m = json.load(open(sys.argv[1])).get("metrics") or {}
print(((m.get(sys.argv[2]) or {}).get("rails") or {}).get(sys.argv[3], 0))
' "$rn_work/stats-metric" "$1" "$(rn_addr s 2)"
}
if command -v python3 > /dev/null 2>&1; then
    passes=8
    say "b2. rail 2 down and up again within one session ($passes passes of $mid_blocks blocks)"
    fails=$(metric p2pkv_rail_failures_total) rejoins=$(metric p2pkv_rail_rejoins_total)
    tx2=$(rn_counter s 2 tx)
    rn_get "$(rn_addrs c 1 2)" "$rn_work/rejoin" "$rn_work/got-rejoin" --repeat "$passes" &
    get=$!
    wait_passed 2 "$tx2" $((bytes / 4)) "$get"
    ip -n "$rn_ns_s" link set "$s2" down || fail "cannot set $s2 down"
    n=0
    while [ "$(metric p2pkv_rail_failures_total)" -le "$fails" ]; do
        rn_gone "$get" && fail "the gets ended before the server took rail 2 out"
        n=$((n + 1))
        [ "$n" -lt 600 ] || fail "the server did not take rail 2 out in 60 s"
        sleep 0.1
    done
    ip -n "$rn_ns_s" link set "$s2" up || fail "cannot set $s2 up"
    tx2=$(rn_counter s 2 tx)
    say "rail 2 taken out and its link up again; the passes go on"
    wait "$get" || { cat "$rn_work/got-rejoin.err" "$rn_work/two.log"; fail "p2pkv get --repeat with rail 2 down and up failed"; }
    [ "$(count "$rn_work/got-rejoin" corrupt)" -eq 0 ] || fail "blocks reported corrupt"
    rn_verify "$rn_work/rejoin"; [ "$rn_there" -eq "$mid_blocks" ] || fail "not every block after the rail came back"
    d2=$(delta s 2 tx "$tx2") now=$(metric p2pkv_rail_rejoins_total)
    say "rail 2 carried $d2 bytes after its link came up; rejoins on it: $((now - rejoins))"
    [ "$now" -gt "$rejoins" ] || fail "the server counted no rejoin on rail 2 (p2pkv_rail_rejoins_total $now)"
    [ "$d2" -ge $((bytes / 4)) ] || fail "rail 2 carried $d2 bytes after it came back, less than a quarter of a pass ($bytes): it did not rejoin"
fi

say "c. the consumer on rail 1 only, the server on both"
stats() {
    timeout 60 ip netns exec "$rn_ns_s" "$rn_bin/p2pkv" stats --local "$rn_local" --json \
        > "$rn_work/$1" || fail "p2pkv stats ($1) failed"
}
stats stats-before
tx1=$(rn_counter s 1 tx) tx2=$(rn_counter s 2 tx)
rn_get "$(rn_addr c 1)" "$rn_work/half" "$rn_work/got-half" &
get=$!
wait_passed 1 "$tx1" $((bytes / 4)) "$get"
stats stats-half
wait "$get" || { cat "$rn_work/got-half.err" "$rn_work/two.log"; fail "p2pkv get over one of two rails failed"; }
rn_verify "$rn_work/half"; [ "$rn_there" -eq "$mid_blocks" ] || fail "not every block over one of two rails"
d1=$(delta s 1 tx "$tx1") d2=$(delta s 2 tx "$tx2")
say "rail 1 carried $d1 bytes, rail 2 $d2, for $bytes"
[ "$d1" -ge "$bytes" ] || fail "rail 1 carried $d1 bytes, want at least $bytes"
[ "$d2" -lt $((bytes / 100)) ] || fail "rail 2 carried $d2 bytes with no consumer rail on it"
# the session's pairs are in the server's stats: session_rails, per
# session (consumer peer id) a list of the server's rails, each with the
# consumer's rail it pairs with (peer_rail, -1: none; peer, its address,
# empty for a consumer of one address, which does not announce rails) and
# the bytes written over it.  The session of this fetch (the one not in
# the stats taken before it: a failed session of b may still be there)
# has one pair, server rail 1, which carried every block, and rail 2
# unpaired with nothing written.
command -v python3 > /dev/null 2>&1 || skip "python3 is not installed (parts a and b passed)"
if ! pairs=$(python3 -c '
import json, sys
before = json.load(open(sys.argv[1])).get("session_rails") or {}
during = json.load(open(sys.argv[2])).get("session_rails")
if not isinstance(during, dict):
    sys.exit("no session_rails in the stats")
new = [s for s in during if s not in before]
if len(new) != 1:
    sys.exit("want one new session, got %r" % (new,))
rails = during[new[0]]
paired = [r for r in rails if r.get("peer_rail", -1) >= 0]
if len(paired) != 1:
    sys.exit("want one pair, got %r" % (rails,))
p = paired[0]
if p.get("local") != sys.argv[3] or p.get("peer") not in ("", sys.argv[4]):
    sys.exit("want %s to %s, got %r" % (sys.argv[3], sys.argv[4], p))
if p.get("bytes", 0) <= 0:
    sys.exit("the pair carried nothing yet: %r" % (p,))
for r in rails:
    if r is not p and r.get("writes", 0) != 0:
        sys.exit("an unpaired rail was written to: %r" % (r,))
print("%s: %s to %s (%s), %d bytes so far; %d unpaired" % (new[0], p["local"],
      p.get("peer") or "a consumer of one address", sys.argv[4], p["bytes"], len(rails) - 1))
' "$rn_work/stats-before" "$rn_work/stats-half" "$(rn_addr s 1)" "$(rn_addr c 1)" 2>&1); then
    cat "$rn_work/stats-half"
    fail "the server's stats during the fetch do not show the session's one pair: $pairs"
fi
say "the session's one pair: $pairs"

slow=$((rn_rate / 3))
say "d. rail 2 reshaped to $slow Mbit/s beside rail 1's $rn_rate: $mid_blocks blocks over both"
rn_shape 2 "$slow"
tx1=$(rn_counter s 1 tx) tx2=$(rn_counter s 2 tx)
rn_get "$(rn_addrs c 1 2)" "$rn_work/slow" "$rn_work/got-slow" \
    || { cat "$rn_work/got-slow.err" "$rn_work/two.log"; fail "p2pkv get over unequal rails failed"; }
rn_verify "$rn_work/slow"; [ "$rn_there" -eq "$mid_blocks" ] || fail "not every block over unequal rails"
d1=$(delta s 1 tx "$tx1") d2=$(delta s 2 tx "$tx2")
secs=$(sed -n 's/.* in \([0-9.]*\) s,.*/\1/p' "$rn_work/got-slow.err")
mbit=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%d", b * 8 / s / 1e6 }')
say "rail 1 carried $d1 bytes, rail 2 $d2 ($(awk -v a="$d1" -v b="$d2" 'BEGIN { printf "%.2f", a / (b ? b : 1) }'):1), $mbit Mbit/s of $((rn_rate + slow)) shaped"
[ $((d1 + d2)) -ge "$bytes" ] || fail "the rails carried $((d1 + d2)) bytes, less than $bytes"
[ "$d1" -ge $((2 * d2)) ] || fail "rail 1 ($rn_rate Mbit/s) carried $d1 bytes, less than twice rail 2's $d2 ($slow Mbit/s): the split does not follow the rates"
[ "$mbit" -gt $((2 * slow)) ] || fail "$mbit Mbit/s over rails of $rn_rate and $slow: no better than an even split ($((2 * slow)))"
rn_shape 2 "$rn_rate"

rn_stop "$pid_two"; st=$?
[ "$st" -eq 0 ] || { cat "$rn_work/two.log"; fail "the two-rail server exited with status $st"; }
rn_pids=${rn_pids% *}

# ---- large blocks, sliced --------------------------------------------------
rn_server big "$(rn_addrs s 1 2)" "$big_blocks" "$big_len" \
    || { printf '%s\n' "$rn_refusal"; fail "the large-block server did not start"; }
pid_big=${rn_pids##* }
rn_publish big 1 "$big_len"
bytes=$big_len
say "e. one block of $big_len bytes over two rails"
tx1=$(rn_counter s 1 tx) tx2=$(rn_counter s 2 tx)
rn_get "$(rn_addrs c 1 2)" "$rn_work/big" "$rn_work/got-big" \
    || { cat "$rn_work/got-big.err" "$rn_work/big.log"; fail "p2pkv get of one large block failed"; }
rn_verify "$rn_work/big"; [ "$rn_there" -eq 1 ] || fail "the large block was not written"
d1=$(delta s 1 tx "$tx1") d2=$(delta s 2 tx "$tx2")
secs=$(sed -n 's/.* in \([0-9.]*\) s,.*/\1/p' "$rn_work/got-big.err")
mbit=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%d", b * 8 / s / 1e6 }')
say "rail 1 carried $d1 bytes, rail 2 $d2, for $bytes: $mbit Mbit/s of $((2 * rn_rate)) shaped"
[ "$d1" -ge $((bytes / 4)) ] || fail "rail 1 carried $d1 bytes, less than a quarter of the block: it was not sliced over both rails"
[ "$d2" -ge $((bytes / 4)) ] || fail "rail 2 carried $d2 bytes, less than a quarter of the block: it was not sliced over both rails"
[ "$mbit" -gt $((rn_rate * 3 / 2)) ] || fail "$mbit Mbit/s for one block over two rails of $rn_rate: no faster than one rail"

rn_publish big "$big_blocks" "$big_len"
bytes=$((big_blocks * big_len))
say "e2. rail 2 set down a quarter of the way through $big_blocks blocks of $big_len bytes"
tx2=$(rn_counter s 2 tx)
rn_get "$(rn_addrs c 1 2)" "$rn_work/big-down" "$rn_work/got-big-down" --no-verify &
get=$!
wait_passed 2 "$tx2" $((bytes / 8)) "$get"
ip -n "$rn_ns_s" link set "$s2" down || fail "cannot set $s2 down"
say "$s2 down after $(delta s 2 tx "$tx2") bytes on it"
wait "$get"; st=$?
got=$(count "$rn_work/got-big-down" fetched)
say "the fetch ended with status $st, $got of $big_blocks fetched: $(tail -1 "$rn_work/got-big-down.err")"
ip -n "$rn_ns_s" link set "$s2" up || fail "cannot set $s2 up"
[ "$(count "$rn_work/got-big-down" corrupt)" -eq 0 ] || fail "blocks reported corrupt"
rn_verify "$rn_work/big-down"; [ "$rn_there" -eq "$got" ] || fail "the blocks written are not the ones reported fetched"
[ "$st" -eq 0 ] || { cat "$rn_work/got-big-down.err" "$rn_work/big.log"; fail "the fetch failed (status $st) with rail 2 down: its slices were not moved to rail 1"; }
[ "$got" -eq "$big_blocks" ] || fail "fetched $got of $big_blocks with rail 2 down"
alive big "$pid_big"
rn_stop "$pid_big"; st=$?
[ "$st" -eq 0 ] || { cat "$rn_work/big.log"; fail "the large-block server exited with status $st"; }
rn_pids=${rn_pids% *}
say "one and two rails, a rail lost mid-fetch, a rail missing on one side, unequal rails, large blocks sliced (and a rail lost mid-block): all verified"
summary "one rail and two rails over shaped veths, a rail down mid-fetch, one rail of two, rails of 3:1, a 64 MiB block over two rails and a rail down mid-block: verified"
exit 0
