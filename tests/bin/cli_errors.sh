#!/bin/sh
# cli_errors.sh: the command lines say what went wrong, each case in its
# own words, with the exit status their pages document (issue 36, point
# 5).  A server that cannot be reached: nothing listening (said at once,
# naming the endpoint: a --timeout of 60 s, which a timeout would not
# meet, the describe's own wait being 10 s), an endpoint without its
# transport, a host name that does not resolve, a server stopped with
# SIGSTOP (no ZeroMQ greeting: said in seconds), a CURVE server asked
# without keys; a pull across a block-length mismatch (2, not 1); a bad
# option value or an unknown option, named, in p2pkv, p2pkv-server,
# p2pkv-bench and p2pkv-replay.  Run by make check from the build tree.
set -u
cli=bin/p2pkv
server=bin/p2pkv-server
for b in "$cli" "$server" bin/p2pkv-bench bin/p2pkv-replay; do
    [ -x "$b" ] || { echo "SKIP: $b not built here"; exit 77; }
done
work=$(mktemp -d)
. "$(dirname "$0")/../fixtures/servers.sh"
pools="/pk-errors-a-$$ /pk-errors-stopped-$$ /pk-errors-b-$$ /pk-errors-c-$$ /pk-errors-gone-$$ /pk-errors-x-$$"

# expect STATUS WORDS... -- COMMAND...: COMMAND exits STATUS and its
# standard error holds each of WORDS
expect() {
    want=$1
    shift
    words=""
    while [ "$1" != "--" ]; do words="$words
$1"; shift; done
    shift
    "$@" > "$work/out" 2> "$work/err"
    st=$?
    [ "$st" -eq "$want" ] || fail "$*: exit $st, not $want: $(cat "$work/err")"
    printf '%s\n' "$words" | while IFS= read -r w; do
        [ -z "$w" ] && continue
        grep -qF -- "$w" "$work/err" || { echo "$*: said \"$(cat "$work/err")\", not \"$w\""; exit 1; }
    done || fail "$(printf '%s\n' "$words" | tail -n +2 | paste -sd '|' -) missing from what it said"
    echo "ok: $* -> $st: $(head -n 1 "$work/err")"
}

# start NAME BLOCK_LEN [FLAG...]: a server on a port the kernel picks; its
# endpoint in $endpoint, its engine socket $work/NAME.sock
start() {
    name=$1 len=$2
    shift 2
    "$server" --peer-id "errors-$name-$$" --bind "tcp://127.0.0.1:*" \
        --local "ipc://$work/$name.sock" --pool-name "/pk-errors-$name-$$" --pool-blocks 16 \
        --block-len "$len" --provider tcp "$@" > "$work/$name.out" 2> "$work/$name.err" &
    pids="$pids $!"
    ready "$work/$name.out" "$!" || fail "server $name did not start"
    endpoint=$(sed -n 's/.*peers at \([^,]*\),.*/\1/p' "$work/$name.out")
}

start a 4096
a=$endpoint
start b 8192
b=$endpoint
# A port free now: bound by a server, which then stopped.  Drawn from
# 20000..31999, as tests/fixtures/daemon.c's td_free_port: below the kernel's
# ephemeral ports and the ones ZeroMQ hands out for "*" (49152 up, in
# order), so that no other test's server takes it in the meantime.
free=""
n=0
while [ -z "$free" ] && [ "$n" -lt 20 ]; do
    n=$((n + 1))
    port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000))
    "$server" --peer-id "errors-gone-$$" --bind "tcp://127.0.0.1:$port" \
        --local "ipc://$work/gone.sock" --pool-name "/pk-errors-gone-$$" --pool-blocks 4 \
        --provider tcp > "$work/gone.out" 2> "$work/gone.log" &
    gone=$!
    if ready "$work/gone.out" "$gone"; then
        kill -TERM "$gone"
        wait "$gone" || fail "the server on port $port did not stop cleanly"
        free=tcp://127.0.0.1:$port
    else
        wait "$gone"
    fi
done
[ -n "$free" ] || fail "no free port in 20000..31999 in 20 tries"

# --- a server that cannot be reached
expect 2 "$free" "connection refused" -- "$cli" lookup --timeout 60 --server "$free" 00
expect 2 "$free" "connection refused" -- "$cli" get --timeout 60 --server "$free" -o "$work" 00
noscheme=${free#tcp://}
expect 2 "--server" "$noscheme" "names no transport" "tcp://" -- \
    "$cli" lookup --server "$noscheme" 00
expect 2 "name.invalid" "does not resolve" -- \
    "$cli" lookup --timeout 60 --server tcp://name.invalid:5710 00
# a server stopped (SIGSTOP): its kernel takes the connection, nothing
# greets; said in some 3 s, not at the timeout (the describe's 10 s)
start stopped 4096
stopped=$endpoint
kill -STOP "${pids##* }"
expect 2 "$stopped" "accepted the connection but sent no ZeroMQ greeting" "a hung server" -- \
    "$cli" lookup --timeout 60 --server "$stopped" 00
kill -CONT "${pids##* }"
# the pull's server is reached by the local one, which says why it could not
expect 2 "$free" "connection refused" -- \
    "$cli" pull --local "ipc://$work/a.sock" --server "$free" 00

# --- CURVE asked without keys: the library's words and the options to give
mkdir "$work/allow"
"$cli" keygen "$work/srv" > /dev/null && "$cli" keygen "$work/alice" > /dev/null \
    || fail "keygen failed"
cp "$work/alice" "$work/allow/"
start c 4096 --curve-secret "$work/srv_secret" --curve-allow "$work/allow"
expect 2 "$endpoint" "requires CURVE" "--curve-secret" "--server-key" -- \
    "$cli" lookup --timeout 60 --server "$endpoint" 00

# --- a pull across a block-length mismatch is an error (2), not "missing" (1)
head -c 8192 /dev/urandom > "$work/block"
key=$("$cli" put --local "ipc://$work/b.sock" "$work/block" | cut -d' ' -f1)
[ -n "$key" ] || fail "p2pkv put failed"
expect 2 "block_len" "8192" "4096" -- "$cli" pull --local "ipc://$work/a.sock" --server "$b" "$key"
grep -q "^$key missing$" "$work/out" || fail "the pull's report: $(cat "$work/out")"

# --- bad option values and unknown options, named
expect 2 "--timeout" '"-1"' -- "$cli" lookup --timeout -1 --server "$a" 00
expect 2 "--timeout" '"soon"' -- "$cli" get --timeout soon --server "$a" 00
expect 2 "--repeat" -- "$cli" get --repeat 0 --server "$a" 00
expect 2 "--server or --directory" -- "$cli" lookup 00
expect 2 "--curve-secret without --server-key" -- \
    "$cli" lookup --curve-secret "$work/alice_secret" --server "$a" 00
expect 2 "no KEY" -- "$cli" lookup --server "$a"
expect 2 "-o" "not a directory" -- "$cli" get --server "$a" -o "$work/block" 00
expect 2 "--bogus" -- "$cli" lookup --bogus --server "$a" 00
expect 2 "unknown option" "--bogus" -- "$cli" codec --bogus
expect 2 "--namespace" -- "$cli" stats --namespace x
expect 2 "--local" -- "$cli" stats --local nowhere
expect 2 "--server" "needs a value" -- "$cli" pull --server
expect 2 "--endpoint" -- "$cli" keygen --endpoint nowhere "$work/x"
expect 2 "--pool-blocks" '"-1"' -- "$server" --pool-blocks -1
expect 1 "--provider nosuchprovider" -- "$server" --provider nosuchprovider \
    --bind "tcp://127.0.0.1:*" --local "ipc://$work/x.sock" --pool-name "/pk-errors-x-$$" \
    --pool-blocks 4
expect 2 "--reps" '"-1"' -- bin/p2pkv-bench codec --reps -1
expect 2 "--json" -- bin/p2pkv-bench codec --json "$work/no/such/dir/x.json"
expect 2 "unexpected argument" '"script.jsonl"' -- bin/p2pkv-replay script.jsonl
expect 2 "--bogus" -- bin/p2pkv-replay --bogus
exit 0
