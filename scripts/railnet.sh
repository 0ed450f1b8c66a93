# railnet.sh: two hosts joined by several shaped rails, in network
# namespaces, for tests/e2e/rails_netns.sh and p2pkv-bench rails
# (scripts/bench-rails).  Sourced after the caller defines say, skip
# (exits 77) and fail (exits 1); it installs the cleanup at exit.
#
# rn_up N makes a server host and a consumer host (namespaces
# p2pkv-rs-PID and p2pkv-rc-PID) joined by:
#   - a control pair (ks-PID, kc-PID), unshaped, for ZeroMQ alone, so that
#     the rails carry only the data plane and one can go down without the
#     control plane going with it;
#   - N rail pairs (rsI-PID, rcI-PID; I 1..N), each its own /24, each end's egress
#     shaped with tbf to $rn_rate Mbit/s, so both directions are shaped.
# Subnets are 10.A.B.0/24 with A and B from the pid, so that runs at once
# do not meet; veth names carry the pid too.  No IPv6 link-local address
# (addrgenmode none): the tcp provider then has one address per device.
# Every server a caller starts goes in rn_pids (stopped at exit), its
# pool in rn_pools (removed at exit); rn_work is removed at exit.
#
# Settings: RAILNET_RATE (Mbit/s per rail and direction, default 300; a
# rate the CPU can exceed, so that the rails, not the CPU, are the limit);
# RAILNET_RATES (a comma list: rail I's rate is its I-th, the last one
# for the rails after it; rails of unequal rates; default: RAILNET_RATE
# for every rail).  rn_shape changes a rail's rate while it runs.
# The caller sets rn_bin (the directory of p2pkv-server and p2pkv); the
# functions leave their results in rn_* variables, named at each.
# shellcheck shell=sh disable=SC2034,SC2154
rn_rate=${RAILNET_RATE:-300}
rn_rates=${RAILNET_RATES:-}
rn_ns_s=p2pkv-rs-$$ rn_ns_c=p2pkv-rc-$$
rn_made_ns="" rn_pids="" rn_pools="" rn_work=""
# 10.A.B.0/24: A in 20..219, B in 0..245 stepping by 6 (ctl and five rails)
rn_net_a=$(($$ % 200 + 20)) rn_net_b=$(($$ / 200 % 41 * 6))

# rn_dev s|c I: the device of rail I (0: the control pair) on the server
# (s) or consumer (c) side
rn_dev() {
    if [ "$2" -eq 0 ]; then echo "k$1-$$"; else echo "r$1$2-$$"; fi
}
# rn_addr s|c I: its address
rn_addr() {
    case $1 in s) _h=1 ;; *) _h=2 ;; esac
    echo "10.$rn_net_a.$((rn_net_b + $2)).$_h"
}
# rn_addrs s|c FIRST LAST: the comma list of rails FIRST..LAST's addresses
rn_addrs() {
    _list="" _i=$2
    while [ "$_i" -le "$3" ]; do
        _list="$_list${_list:+,}$(rn_addr "$1" "$_i")"; _i=$((_i + 1))
    done
    echo "$_list"
}
# rn_ns s|c: the namespace of that side
rn_ns() { if [ "$1" = s ]; then echo "$rn_ns_s"; else echo "$rn_ns_c"; fi; }

# rn_rate_of I: rail I's rate, Mbit/s (RAILNET_RATES, else RAILNET_RATE)
rn_rate_of() {
    [ -n "$rn_rates" ] || { echo "$rn_rate"; return; }
    echo "$rn_rates" | tr , '\n' | awk -v i="$1" '{ v = $1 } NR == i { print; found = 1; exit }
        END { if (!found) print v }'
}
# rn_sum N: the rates of rails 1..N summed, Mbit/s
rn_sum() {
    _s=0 _i=1
    while [ "$_i" -le "$1" ]; do _s=$((_s + $(rn_rate_of "$_i"))); _i=$((_i + 1)); done
    echo "$_s"
}

# rn_counter s|c I rx|tx: that device's byte counter
rn_counter() {
    ip netns exec "$(rn_ns "$1")" cat "/sys/class/net/$(rn_dev "$1" "$2")/statistics/$3_bytes"
}

# rn_gone PID: the process has exited (or is a zombie awaiting wait)
rn_gone() {
    _st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
    [ -z "$_st" ] || [ "$_st" = Z ]
}
# rn_stop PID: SIGTERM, at most 10 s to exit, then SIGKILL; its status
rn_stop() {
    kill -TERM "$1" 2>/dev/null || true
    _n=0
    while ! rn_gone "$1" && [ "$_n" -lt 100 ]; do sleep 0.1; _n=$((_n + 1)); done
    rn_gone "$1" || kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null
}

# shellcheck disable=SC2317  # invoked by the trap
rn_cleanup() {
    _rc=$?
    trap - EXIT INT TERM
    for _pid in $rn_pids; do rn_stop "$_pid"; done
    for _ns in $rn_made_ns; do ip netns delete "$_ns" 2>/dev/null || true; done
    for _pool in $rn_pools; do rm -f "/dev/shm$_pool"; done
    [ -n "$rn_work" ] && rm -rf "$rn_work"
    exit "$_rc"
}
trap rn_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# rn_check BIN: what rn_up needs, else skip or fail saying what is missing;
# BIN holds p2pkv-server and p2pkv
rn_check() {
    [ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces, veths and tc qdiscs"
    for _tool in ip tc timeout sha256sum; do
        command -v "$_tool" > /dev/null 2>&1 || skip "$_tool is not installed"
    done
    { [ -x "$1/p2pkv-server" ] && [ -x "$1/p2pkv" ]; } \
        || fail "$1/p2pkv-server and $1/p2pkv not built"
    case $rn_rate in
        ''|*[!0-9]*|0*) fail "RAILNET_RATE: \"$rn_rate\" is not a whole number of Mbit/s (1..100000)" ;;
    esac
    [ "$rn_rate" -le 100000 ] || fail "RAILNET_RATE: $rn_rate is more than 100000 Mbit/s"
    for _r in $(echo "$rn_rates" | tr , ' '); do
        case $_r in
            *[!0-9]*|0*) fail "RAILNET_RATES: \"$_r\" in \"$rn_rates\" is not a whole number of Mbit/s (1..100000)" ;;
        esac
        [ "$_r" -le 100000 ] || fail "RAILNET_RATES: $_r is more than 100000 Mbit/s"
    done
    case $rn_rates in ,*|*,|*,,*) fail "RAILNET_RATES: \"$rn_rates\" has an empty rate" ;; esac
    rn_work=$(mktemp -d /tmp/p2pkv-railnet-XXXXXX) || fail "mktemp failed"
}

# rn_pair I: veth pair I between the hosts, addressed, up, and for a rail
# (I > 0) shaped on both ends
rn_pair() {
    _ds=$(rn_dev s "$1") _dc=$(rn_dev c "$1")
    _err=$(ip -n "$rn_ns_s" link add "$_ds" type veth peer name "$_dc" netns "$rn_ns_c" 2>&1) \
        || skip "cannot create veth pairs ($_err)"
    for _side in s c; do
        _ns=$(rn_ns $_side) _dev=$(rn_dev $_side "$1")
        ip -n "$_ns" link set "$_dev" addrgenmode none 2> /dev/null || true
        _err=$({ ip -n "$_ns" addr add "$(rn_addr $_side "$1")/24" dev "$_dev" \
                && ip -n "$_ns" link set "$_dev" up; } 2>&1) \
            || skip "cannot configure veth $_dev in $_ns ($_err)"
        [ "$1" -eq 0 ] && continue
        rn_tbf "$_side" "$1" "$(rn_rate_of "$1")" add || skip "cannot shape $_dev with tc tbf ($_err)"
    done
}

# rn_tbf s|c I MBIT add|change: rail I's egress on that side shaped to
# MBIT: tbf, a burst of 10 ms of it (at least 32 KiB, so that one
# full-sized frame always fits), at most 100 ms queued; its error in _err
rn_tbf() {
    _burst=$(($3 * 1250))
    [ "$_burst" -ge 32768 ] || _burst=32768
    _err=$(ip netns exec "$(rn_ns "$1")" tc qdisc "$4" dev "$(rn_dev "$1" "$2")" root tbf \
           rate "${3}mbit" burst "$_burst" latency 100ms 2>&1)
}
# rn_shape I MBIT: rail I shaped to MBIT both ways from now on
rn_shape() {
    rn_tbf s "$1" "$2" change && rn_tbf c "$1" "$2" change \
        || fail "cannot reshape rail $1 to $2 Mbit/s ($_err)"
}

# rn_up N: the two hosts, the control pair and N rails (1..5)
rn_up() {
    { [ "$1" -ge 1 ] && [ "$1" -le 5 ]; } || fail "rn_up: $1 rails, want 1..5"
    for _ns in "$rn_ns_s" "$rn_ns_c"; do
        _err=$(ip netns add "$_ns" 2>&1) || skip "cannot create network namespaces (ip netns add: $_err)"
        rn_made_ns="$rn_made_ns $_ns"
        _err=$(ip -n "$_ns" link set lo up 2>&1) || skip "cannot bring up lo in a namespace ($_err)"
    done
    _err=$(ip netns exec "$rn_ns_s" true 2>&1) || skip "cannot run commands in a namespace (ip netns exec: $_err)"
    _i=0
    while [ "$_i" -le "$1" ]; do rn_pair "$_i"; _i=$((_i + 1)); done
    # each pair answers (a veth is up at once, but say which one is not)
    if command -v ping > /dev/null 2>&1; then
        _i=0
        while [ "$_i" -le "$1" ]; do
            _n=0
            until ip netns exec "$rn_ns_c" ping -c1 -W1 "$(rn_addr s "$_i")" > /dev/null 2>&1; do
                _n=$((_n + 1))
                [ "$_n" -lt 50 ] || fail "pair $_i: the consumer host cannot reach $(rn_addr s "$_i")"
                sleep 0.2
            done
            _i=$((_i + 1))
        done
    fi
}

# rn_server NAME FABRIC_ADDRS BLOCKS BLOCK_LEN [ARG...]: a p2pkv-server on
# the server host, ZeroMQ on the control pair, its data plane on
# FABRIC_ADDRS (--fabric-addr as given), a pool of BLOCKS + 8 blocks.  0,
# with rn_endpoint and rn_local set and its pid last in rn_pids; or 2 when
# it exited before it was ready, its standard error in rn_refusal.
# --store-timeout bounds a round's whole transfer: at 10 (netns.sh's) a
# fetch over a shaped rail longer than 10 s failed ("the server could not
# serve the round", nothing in the server's log), 200 x 1 MiB at 150
# Mbit/s; 120 leaves room for 256 MiB on one rail at 20 Mbit/s.
rn_server() {
    _name=$1 _addrs=$2 _nb=$3 _len=$4; shift 4
    _pool=/p2pkv-railnet-$_name-$$
    rn_pools="$rn_pools $_pool"
    rn_local="ipc://$rn_work/$_name.sock"
    ip netns exec "$rn_ns_s" "$rn_bin/p2pkv-server" --peer-id "railnet-$_name-$$" \
        --bind "tcp://$(rn_addr s 0):*" --fabric-addr "$_addrs" --local "$rn_local" \
        --pool-name "$_pool" --pool-blocks $((_nb + 8)) --pin-quota $((_nb + 8)) \
        --block-len "$_len" --provider tcp --log-level info \
        --lookup-timeout 2 --silence-timeout 10 --stall-timeout 10 --load-timeout 20 \
        --abort-ack-timeout 3 --store-timeout 120 --shutdown-timeout 3 "$@" \
        > "$rn_work/$_name.ready" 2> "$rn_work/$_name.log" &
    _pid=$!
    rn_pids="$rn_pids $_pid"
    _n=0
    while ! grep -q ' ready: ' "$rn_work/$_name.ready" 2> /dev/null; do
        if rn_gone "$_pid"; then
            wait "$_pid" 2> /dev/null
            rn_refusal=$(cat "$rn_work/$_name.log")
            return 2
        fi
        _n=$((_n + 1))
        [ "$_n" -lt 600 ] || { cat "$rn_work/$_name.log"; fail "server $_name not ready in 60 s"; }
        sleep 0.1
    done
    rn_endpoint=$(sed -n 's/.*peers at \([^,]*\),.*/\1/p' "$rn_work/$_name.ready")
    [ -n "$rn_endpoint" ] || fail "server $_name: no endpoint in its ready line"
    return 0
}

# rn_refused_list ADDRS: the refusal in rn_refusal is a build without rails
# reading the comma list as one address (what main says today:
# '--fabric-addr: expected an IPv4 or IPv6 address or a host name, got
# "A,B"'); any other refusal is no such thing
rn_refused_list() {
    printf '%s\n' "$rn_refusal" | grep -q -- "--fabric-addr: .*got \"$1\""
}

# rn_blocks BLOCKS BLOCK_LEN: that many random blocks in $rn_work/in
rn_blocks() {
    mkdir -p "$rn_work/in"
    rm -f "$rn_work"/in/block-*
    _i=0
    while [ "$_i" -lt "$1" ]; do
        head -c "$2" /dev/urandom > "$rn_work/in/block-$_i" || fail "cannot write block $_i"
        _i=$((_i + 1))
    done
    rn_nblocks=$1
}
# rn_put NAME: the blocks of rn_blocks put on server NAME; "KEY FILE" lines
# in $rn_work/keys, the keys in $rn_keys (a key is the SHA-256 of its block)
rn_put() {
    timeout 120 ip netns exec "$rn_ns_s" "$rn_bin/p2pkv" put --local "ipc://$rn_work/$1.sock" \
        "$rn_work"/in/block-* > "$rn_work/keys" || fail "p2pkv put on $1 failed"
    [ "$(wc -l < "$rn_work/keys")" -eq "$rn_nblocks" ] \
        || fail "put published $(wc -l < "$rn_work/keys") of $rn_nblocks blocks on $1"
    rn_keys=$(cut -d' ' -f1 "$rn_work/keys")
}
# rn_publish NAME BLOCKS BLOCK_LEN: new blocks, put on server NAME
rn_publish() {
    rn_blocks "$2" "$3"
    rn_put "$1"
}

# rn_get ADDRS DIR OUT [ARG...]: p2pkv get of every key from rn_endpoint
# on the consumer host, data plane on ADDRS, blocks into DIR; its report
# in OUT, its standard error in OUT.err; its exit status
rn_get() {
    _addrs=$1 _dir=$2 _out=$3; shift 3
    mkdir -p "$_dir"
    # shellcheck disable=SC2086
    timeout 120 ip netns exec "$rn_ns_c" "$rn_bin/p2pkv" get --fabric-addr "$_addrs" \
        --server "$rn_endpoint" --timeout 60 -o "$_dir" "$@" $rn_keys > "$_out" 2> "$_out.err"
}

# rn_verify DIR: every block in DIR is the one published under its key;
# how many are there in rn_there; fails naming each that differs
rn_verify() {
    _bad=0 _there=0
    while read -r _key _file; do
        [ -e "$1/$_key" ] || continue
        _there=$((_there + 1))
        _sum=$(sha256sum "$1/$_key" | cut -d' ' -f1)
        if [ "$_sum" != "$_key" ] || ! cmp -s "$_file" "$1/$_key"; then
            say "MISMATCH: $_key ($_file)" >&2
            _bad=$((_bad + 1))
        fi
    done < "$rn_work/keys"
    [ "$_bad" -eq 0 ] || fail "$_bad blocks in $1 differ from the ones published"
    rn_there=$_there
}
