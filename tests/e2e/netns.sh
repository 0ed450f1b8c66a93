#!/bin/sh
# The end-to-end flow of scripts/demo across three network namespaces, so
# that every byte leaves loopback: servers a and b and a consumer c, joined
# by veth pairs to a bridge in c's namespace (10.213.77.0/24). Blocks of
# random content are published on a; b pulls them from a over the veth;
# from c, `p2pkv lookup` on b must hit every key, and `p2pkv get` from b and
# straight from a must return every byte (a key is the SHA-256 of its
# block). The veths' byte counters must show at least the blocks' bytes
# crossed for each transfer. Server a offers shm beside tcp (--provider
# shm,tcp): a consumer in a's own namespace fetches from it over shm while
# c, in another namespace (so another host to the same-host identity),
# fetches over tcp, at once, every byte checked, each session's provider
# read from a's log. Needs root and iproute2; exits 77 (skip) with the
# reason where the namespaces cannot be made.
#   BLOCKS (50) and BLOCK_LEN (65536) size the run.
set -u
blocks=${BLOCKS:-50}
block_len=${BLOCK_LEN:-65536}
bytes=$((blocks * block_len))
net=10.213.77
ip_a=$net.1 ip_b=$net.2 ip_c=$net.3
ns_a=p2pkv-a-$$ ns_b=p2pkv-b-$$ ns_c=p2pkv-c-$$
pool_a=/p2pkv-netns-a-$$ pool_b=/p2pkv-netns-b-$$
made_ns="" pids="" work=""

say() { echo "netns: $*"; }
summary() { [ -e /dev/fd/9 ] && echo "netns: $*" >&9; return 0; }
skip() { say "SKIP: $*" >&2; summary "skipped: $*"; exit 77; }
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
    wait "$1" 2>/dev/null
}

# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    rc=$?
    trap - EXIT INT TERM
    for pid in $pids; do stop "$pid"; done
    for ns in $made_ns; do ip netns delete "$ns" 2>/dev/null || true; done
    rm -f "/dev/shm$pool_a" "/dev/shm$pool_b"
    [ -n "$work" ] && rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip > /dev/null 2>&1 || skip "ip (iproute2) is not installed"
command -v timeout > /dev/null 2>&1 || skip "timeout (coreutils) is not installed"
{ [ -x bin/p2pkv-server ] && [ -x bin/p2pkv ]; } || fail "bin/p2pkv-server and bin/p2pkv not built (run from the build tree)"
bin=$(cd bin && pwd)

for ns in "$ns_a" "$ns_b" "$ns_c"; do
    err=$(ip netns add "$ns" 2>&1) || skip "cannot create network namespaces (ip netns add: $err)"
    made_ns="$made_ns $ns"
    err=$(ip -n "$ns" link set lo up 2>&1) || skip "cannot bring up lo in a namespace ($err)"
done
err=$(ip netns exec "$ns_a" true 2>&1) || skip "cannot run commands in a namespace (ip netns exec: $err)"
# a veth pair per server, the far ends enslaved to a bridge in c's namespace;
# no IPv6 link-local addresses, so the tcp provider has one address to pick
err=$(ip -n "$ns_c" link add br0 type bridge 2>&1) || skip "cannot create a bridge in a namespace ($err)"
err=$(ip -n "$ns_a" link add va type veth peer name ca netns "$ns_c" 2>&1) \
    || skip "cannot create veth pairs ($err)"
err=$(ip -n "$ns_b" link add vb type veth peer name cb netns "$ns_c" 2>&1) \
    || skip "cannot create veth pairs ($err)"
for dev in "$ns_c br0" "$ns_c ca" "$ns_c cb" "$ns_a va" "$ns_b vb"; do
    ip -n "${dev% *}" link set "${dev#* }" addrgenmode none 2> /dev/null || true
done
{ ip -n "$ns_c" link set ca master br0 \
  && ip -n "$ns_c" link set cb master br0 \
  && ip -n "$ns_a" addr add "$ip_a/24" dev va \
  && ip -n "$ns_b" addr add "$ip_b/24" dev vb \
  && ip -n "$ns_c" addr add "$ip_c/24" dev br0 \
  && ip -n "$ns_c" link set br0 up \
  && ip -n "$ns_c" link set ca up \
  && ip -n "$ns_c" link set cb up \
  && ip -n "$ns_a" link set va up \
  && ip -n "$ns_b" link set vb up; } || skip "cannot configure the veth pairs and bridge"
# with ping at hand, a broken bridge is named as such (else the flow tells)
if command -v ping > /dev/null 2>&1; then
    n=0
    until ip netns exec "$ns_c" ping -c1 -W1 "$ip_a" > /dev/null 2>&1 \
          && ip netns exec "$ns_a" ping -c1 -W1 "$ip_b" > /dev/null 2>&1; do
        n=$((n + 1))
        [ "$n" -lt 10 ] || fail "the namespaces cannot reach each other over the bridge"
        sleep 0.2
    done
fi

work=$(mktemp -d /tmp/p2pkv-netns-XXXXXX) || fail "mktemp failed"

# start NAME NS IFACE IP POOL [PROVIDERS]: a server in NS bound to IP, its
# libfabric tcp endpoint on IP (so on IFACE), offering PROVIDERS (tcp); sets
# $endpoint. Its log at info names the provider of each session it opens.
start() {
    ip netns exec "$2" "$bin/p2pkv-server" --peer-id "netns-$1-$$" \
        --bind "tcp://$4:*" --fabric-addr "$4" --local "ipc://$work/$1.sock" --pool-name "$5" \
        --pool-blocks $((blocks + 64)) --pin-quota $((blocks + 64)) \
        --block-len "$block_len" --provider "${6:-tcp}" --log-level info \
        --lookup-timeout 2 --silence-timeout 5 --stall-timeout 5 --load-timeout 10 \
        --abort-ack-timeout 3 --store-timeout 10 --shutdown-timeout 3 \
        > "$work/$1.ready" 2> "$work/$1.log" &
    pids="$pids $!"
    n=0
    while ! grep -q ' ready: ' "$work/$1.ready" 2> /dev/null && [ "$n" -lt 300 ]; do
        sleep 0.1; n=$((n + 1))
    done
    grep ' ready: ' "$work/$1.ready" || { cat "$work/$1.log"; fail "server $1 did not start"; }
    grep -q " domain $3 " "$work/$1.ready" || fail "server $1's fabric is not on $3"
    endpoint=$(sed -n 's/.*peers at \([^,]*\),.*/\1/p' "$work/$1.ready")
}
# run NS ARG...: p2pkv in namespace NS, bounded
run() {
    ns=$1; shift
    timeout 60 ip netns exec "$ns" "$bin/p2pkv" "$@"
}
# counter NS DEV rx|tx
counter() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3_bytes"; }
# crossed WHAT NS DEV rx|tx BEFORE: at least $bytes went that way since BEFORE
crossed() {
    now=$(counter "$2" "$3" "$4") || fail "cannot read $3's counters in $2"
    delta=$((now - $5))
    say "$1: $delta bytes $4 on $3 ($2)"
    [ "$delta" -ge "$bytes" ] || fail "$1: only $delta bytes $4 on $3, want at least $bytes"
}
count() { grep -cE " $2( [a-z_]+)?\$" "$1" || true; }

start a "$ns_a" va "$ip_a" "$pool_a" shm,tcp; ep_a=$endpoint; pid_a=${pids##* }
start b "$ns_b" vb "$ip_b" "$pool_b"; ep_b=$endpoint; pid_b=${pids##* }
case "$ep_a $ep_b" in
    "tcp://$ip_a:"*" tcp://$ip_b:"*) ;;
    *) fail "servers bound to $ep_a and $ep_b, want $ip_a and $ip_b" ;;
esac

say "publishing $blocks blocks of $block_len bytes on a ($ep_a)"
mkdir -p "$work/in" "$work/from-b" "$work/from-a"
i=0
while [ "$i" -lt "$blocks" ]; do
    head -c "$block_len" /dev/urandom > "$work/in/block-$i"
    i=$((i + 1))
done
run "$ns_a" put --local "ipc://$work/a.sock" "$work"/in/block-* > "$work/keys" \
    || fail "p2pkv put on a failed"
cut -d' ' -f1 "$work/keys" > "$work/key-list"
[ "$(wc -l < "$work/keys")" -eq "$blocks" ] || fail "put published $(wc -l < "$work/keys") of $blocks blocks"
keys=$(cat "$work/key-list")

# shellcheck disable=SC2086
run "$ns_c" lookup --fabric-addr "$ip_c" --server "$ep_b" $keys > "$work/lookup-b1"
[ "$(count "$work/lookup-b1" miss)" -eq "$blocks" ] || fail "b holds some blocks before the pull"

say "b pulls them from a over the veths"
{ a_tx=$(counter "$ns_a" va tx) && b_rx=$(counter "$ns_b" vb rx); } || fail "cannot read the veth counters"
# shellcheck disable=SC2086
run "$ns_b" pull --local "ipc://$work/b.sock" --server "$ep_a" $keys > "$work/pulled" \
    || { cat "$work/pulled" "$work/a.log" "$work/b.log"; fail "p2pkv pull on b from a failed"; }
[ "$(count "$work/pulled" landed)" -eq "$blocks" ] || fail "only $(count "$work/pulled" landed) of $blocks blocks landed on b"
crossed "pull a -> b" "$ns_a" va tx "$a_tx"
crossed "pull a -> b" "$ns_b" vb rx "$b_rx"

# shellcheck disable=SC2086
run "$ns_c" lookup --fabric-addr "$ip_c" --server "$ep_b" $keys > "$work/lookup-b2" \
    || { cat "$work/lookup-b2"; fail "lookup on b from c failed"; }
[ "$(count "$work/lookup-b2" hit)" -eq "$blocks" ] || fail "lookup on b after the pull: $(count "$work/lookup-b2" hit) of $blocks hit"

# verify DIR FROM: every block fetched into DIR is the one published
verify() {
    bad=0
    while read -r key file; do
        sum=$(sha256sum "$1/$key" 2> /dev/null | cut -d' ' -f1)
        if [ "$sum" != "$key" ] || ! cmp -s "$file" "$1/$key"; then
            say "MISMATCH from $2: $key ($file)" >&2
            bad=$((bad + 1))
        fi
    done < "$work/keys"
    [ "$bad" -eq 0 ] || fail "$bad of $blocks blocks fetched from $2 differ"
}

say "c gets them from b"
b_tx=$(counter "$ns_b" vb tx) || fail "cannot read the veth counters"
# shellcheck disable=SC2086
run "$ns_c" get --fabric-addr "$ip_c" --server "$ep_b" --timeout 30 -o "$work/from-b" $keys > "$work/got-b" \
    || { cat "$work/got-b" "$work/b.log"; fail "p2pkv get from b in c failed"; }
[ "$(count "$work/got-b" fetched)" -eq "$blocks" ] || fail "fetched $(count "$work/got-b" fetched) of $blocks blocks from b"
crossed "get b -> c" "$ns_b" vb tx "$b_tx"
verify "$work/from-b" b

say "c gets them straight from a"
a_tx=$(counter "$ns_a" va tx) || fail "cannot read the veth counters"
# shellcheck disable=SC2086
run "$ns_c" get --fabric-addr "$ip_c" --server "$ep_a" --timeout 30 -o "$work/from-a" $keys > "$work/got-a" \
    || { cat "$work/got-a" "$work/a.log"; fail "p2pkv get from a in c failed"; }
[ "$(count "$work/got-a" fetched)" -eq "$blocks" ] || fail "fetched $(count "$work/got-a" fetched) of $blocks blocks from a"
crossed "get a -> c" "$ns_a" va tx "$a_tx"
verify "$work/from-a" a

# sessions NAME PROVIDER: how many sessions server NAME opened over it
sessions() { grep -c "opened over $2" "$work/$1.log" || true; }

say "a consumer in a's namespace (shm) and c (tcp) get them from a at once"
shm_before=$(sessions a shm) tcp_before=$(sessions a tcp)
a_tx=$(counter "$ns_a" va tx) || fail "cannot read the veth counters"
mkdir -p "$work/near-a" "$work/far-a"
# shellcheck disable=SC2086
run "$ns_a" get --server "$ep_a" --timeout 30 -o "$work/near-a" $keys > "$work/got-near" \
    2> "$work/said-near" &
near=$!
# shellcheck disable=SC2086
run "$ns_c" get --fabric-addr "$ip_c" --server "$ep_a" --timeout 30 -o "$work/far-a" $keys \
    > "$work/got-far" 2> "$work/said-far" &
far=$!
wait "$near" || { cat "$work/got-near" "$work/said-near" "$work/a.log"; fail "p2pkv get from a in a's namespace failed"; }
wait "$far" || { cat "$work/got-far" "$work/said-far" "$work/a.log"; fail "p2pkv get from a in c (beside the shm one) failed"; }
for got in near far; do
    [ "$(count "$work/got-$got" fetched)" -eq "$blocks" ] \
        || fail "$got: fetched $(count "$work/got-$got" fetched) of $blocks blocks from a"
    cat "$work/said-$got"
done
# each consumer says which provider its session ran over
grep -q " over shm\$" "$work/said-near" || fail "the consumer in a's namespace did not say shm"
grep -q " over tcp" "$work/said-far" || fail "c did not say tcp"
verify "$work/near-a" "a over shm"
verify "$work/far-a" "a over tcp beside shm"
crossed "get a -> c beside shm" "$ns_a" va tx "$a_tx"
[ "$(sessions a shm)" -eq $((shm_before + 1)) ] \
    || { cat "$work/a.log"; fail "the consumer in a's namespace did not connect over shm"; }
[ "$(sessions a tcp)" -eq $((tcp_before + 1)) ] \
    || { cat "$work/a.log"; fail "c did not connect over tcp beside the shm consumer"; }

# a clean shutdown of both (the sanitizers report at exit)
for server in "a $pid_a" "b $pid_b"; do
    name=${server% *} pid=${server#* }
    stop "$pid"; st=$?
    rest=""
    for p in $pids; do [ "$p" = "$pid" ] || rest="$rest $p"; done
    pids=$rest
    [ "$st" -eq 0 ] || { cat "$work/$name.log"; fail "server $name exited with status $st"; }
done
say "all $blocks blocks verified across three namespaces"
summary "$blocks blocks a -> b -> c and a -> c over veth, a -> a over shm beside, all verified"
exit 0
