#!/bin/sh
# shm_full.sh: the pool's memory is reserved before the server says ready
# (issue 34, point 4). In a mount namespace of its own with a small tmpfs on
# /dev/shm:
#  - a server whose pool /dev/shm cannot hold exits 1 at start, naming the
#    options that sized it, the size the pool needs and the size /dev/shm
#    has, prints no ready line and leaves no pool behind; so does one
#    whose pool fits /dev/shm's size but not its free room;
#  - two servers whose pools fit start; /dev/shm is then filled to its last
#    byte, and blocks are still published on one (the engine writing into
#    its mapping, p2pkv put), pulled by the other (its puller writing into
#    its pool) and fetched back from it intact: every page was reserved at
#    start, so nothing dies of SIGBUS on a full /dev/shm (both servers
#    still stop cleanly with SIGTERM).
# Needs root (unshare -m, mount); exits 77 (skip) with the reason where that
# cannot be done. Run by make check from the build tree, and by make
# hardening: with $P2PKV_HARDENING_OUT set it adds its row of
# doc/reliability.md there (scripts/reliability).
set -u
server=bin/p2pkv-server
cli=bin/p2pkv
row_name="a /dev/shm smaller than the pool (a tmpfs of 8 MiB, a pool of 16 MiB); then one filled to its last byte under two pools that fit"
t0=$(date +%s.%N)

# row OUTCOME LOST: the hardening suite's line (tests/e2e/hardening.c, hh_report)
row() {
    [ -n "${P2PKV_HARDENING_OUT:-}" ] || return 0
    printf 'HARDENING\t%s\t%s\t1\t%s\t%s\t%s\n' "${P2PKV_HARDENING:-short}" "$row_name" "$1" "$2" \
        "$(echo "$t0 $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')" >> "$P2PKV_HARDENING_OUT"
}
skip() { echo "SKIP: $*"; row "NOT TRIED: $*" "-"; exit 77; }

{ [ -x "$server" ] && [ -x "$cli" ]; } || skip "$server and $cli not built here"

if [ -z "${P2PKV_SHM_FULL_INNER:-}" ]; then
    command -v unshare > /dev/null 2>&1 || skip "unshare (util-linux) is not installed"
    why=$(unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>&1) \
        || skip "cannot mount a tmpfs on /dev/shm in a mount namespace (needs root): $why"
    # the rest runs in a namespace of its own: its /dev/shm is private
    P2PKV_SHM_FULL_INNER=1 exec unshare -m sh "$0" "$@"
fi

mount -t tmpfs -o size=8m tmpfs /dev/shm || { echo "FAIL: cannot mount the tmpfs"; exit 1; }
work=$(mktemp -d)
. "$(dirname "$0")/../fixtures/servers.sh"

# start NAME BLOCKS: a server of BLOCKS x 64 KiB in the background; its pid
# in $pid
start() {
    "$server" --peer-id "$1" --bind "tcp://127.0.0.1:*" --local "ipc://$work/$1.sock" \
        --pool-name "/pk-shm-full-$1" --pool-blocks "$2" --block-len 65536 --provider tcp \
        --fingerprint fp --hash-seed 7 > "$work/$1.out" 2> "$work/$1.err" &
    pid=$!
}

# 1. a pool of 16 MiB on an 8 MiB /dev/shm: refused at start
start big 256
wait "$pid"
rc=$?
[ "$rc" -eq 1 ] || fail "a pool /dev/shm cannot hold: exit $rc, expected 1"
[ -s "$work/big.out" ] && fail "a pool /dev/shm cannot hold: it printed $(cat "$work/big.out")"
grep -q "it needs 16777216 bytes" "$work/big.err" || fail "the error does not name the size needed"
grep -q "/dev/shm has 8388608 " "$work/big.err" || fail "the error does not name the size available"
[ -e /dev/shm/pk-shm-full-big ] && fail "the refused server left its pool"
echo "ok: refused at start: $(cat "$work/big.err")"
grep -q -- "--pool-blocks 256 x --block-len 65536" "$work/big.err" \
    || fail "the error does not name the options that sized the pool"

# 1b. a pool within /dev/shm's size but beyond its free room (6 MiB taken
# by another object): refused before a page is allocated, naming the
# options, the size and the room (it used to allocate and zero page after
# page until the room ran out: minutes on a /dev/shm as large as memory)
fallocate -l 6m /dev/shm/other 2> /dev/null || dd if=/dev/zero of=/dev/shm/other bs=65536 \
    count=96 > /dev/null 2>&1
start room 64
wait "$pid"
rc=$?
[ "$rc" -eq 1 ] || fail "a pool beyond /dev/shm's free room: exit $rc, expected 1"
[ -s "$work/room.out" ] && fail "a pool beyond the free room: it printed $(cat "$work/room.out")"
for w in "--pool-blocks 64 x --block-len 65536" "it needs 4194304 bytes" "/dev/shm has 2097152 "; do
    grep -qF -- "$w" "$work/room.err" || fail "the error does not say \"$w\": $(cat "$work/room.err")"
done
[ -e /dev/shm/pk-shm-full-room ] && fail "the refused server left its pool"
rm -f /dev/shm/other
echo "ok: refused beyond the free room: $(cat "$work/room.err")"

# 2. two pools of 2 MiB fit: both start
start a 32
pid_a=$pid
pids="$pid_a"
start b 32
pid_b=$pid
pids="$pids $pid_b"
ready "$work/a.out" "$pid_a" || fail "server a (2 MiB of an 8 MiB /dev/shm) did not start"
ready "$work/b.out" "$pid_b" || fail "server b (2 MiB of an 8 MiB /dev/shm) did not start"
endpoint_a=$(sed -n 's/.*peers at \([^,]*\),.*/\1/p' "$work/a.out")
endpoint_b=$(sed -n 's/.*peers at \([^,]*\),.*/\1/p' "$work/b.out")
echo "ok: two servers of 2 MiB pools started on an 8 MiB /dev/shm"

# /dev/shm filled to its last byte: any page not reserved would now SIGBUS
dd if=/dev/zero of=/dev/shm/filler bs=65536 > /dev/null 2>&1
room=$(df -k --output=avail /dev/shm | tail -1 | tr -d ' ')
[ "$room" -eq 0 ] || fail "/dev/shm still has $room KiB free after filling it"

# the engine writes every block of a's pool, b's puller every block of b's
mkdir "$work/blocks" "$work/got"
i=0
while [ "$i" -lt 32 ]; do
    head -c 65536 /dev/urandom > "$work/blocks/$i"
    i=$((i + 1))
done
"$cli" put --local "ipc://$work/a.sock" "$work"/blocks/* > "$work/put" 2> "$work/put.err" \
    || fail "p2pkv put on a full /dev/shm: $(cat "$work/put.err")"
keys=$(cut -d' ' -f1 "$work/put")
[ "$(echo "$keys" | wc -l)" -eq 32 ] || fail "p2pkv put published $(wc -l < "$work/put") blocks, not 32"
# shellcheck disable=SC2086  # one argument per key
"$cli" pull --local "ipc://$work/b.sock" --server "$endpoint_a" $keys > "$work/pull" 2>&1 \
    || fail "p2pkv pull into b on a full /dev/shm: $(cat "$work/pull")"
[ "$(grep -c ' landed$' "$work/pull")" -eq 32 ] || fail "not every key landed: $(cat "$work/pull")"
# shellcheck disable=SC2086
"$cli" get --server "$endpoint_b" --provider tcp --timeout 30 -o "$work/got" $keys \
    > "$work/get" 2>&1 || fail "p2pkv get from b: $(cat "$work/get")"
while read -r key file; do
    cmp -s "$file" "$work/got/$key" || fail "block $file came back from b changed"
done < "$work/put"
echo "ok: /dev/shm full: 32 blocks put on a, pulled by b, fetched from b intact"

for name in a b; do
    eval "p=\$pid_$name"
    kill -0 "$p" 2> /dev/null || fail "server $name died"
    kill -TERM "$p"
    wait "$p"
    rc=$?
    [ "$rc" -eq 0 ] || fail "server $name exited $rc on SIGTERM (SIGBUS is 135)"
done
pids=""
echo "ok: both servers alive, stopped cleanly"
row "refused at start (exit 1, naming the 16 MiB needed and the 8 MiB available; no ready line, no pool left); the pools that fit started, and with /dev/shm full 32 blocks were put, pulled and fetched back intact; both servers stopped cleanly (no SIGBUS)" \
    "nothing"
exit 0
