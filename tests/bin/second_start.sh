#!/bin/sh
# second_start.sh: when p2pkv-server cannot start itself again without
# malloc's thread caches (bin/p2pkv-server.c, s_start_without_thread_caches),
# it says so once, naming why, and runs as it is: it answers a consumer and
# its blocks arrive intact. The second start is made to fail by hiding
# /proc/self/exe: the server runs in a mount namespace of its own whose
# /proc is an empty tmpfs. Needs root (unshare -m, mount); exits 77 (skip)
# with the reason where that cannot be done. Run by make check from the
# build tree.
set -u
server=bin/p2pkv-server
cli=bin/p2pkv
{ [ -x "$server" ] && [ -x "$cli" ]; } || { echo "SKIP: $server and $cli not built here"; exit 77; }
pool=/pk-second-start-$$
work=$(mktemp -d)
. "$(dirname "$0")/../fixtures/servers.sh"
pools=$pool

command -v unshare > /dev/null 2>&1 || { echo "SKIP: unshare (util-linux) is not installed"; exit 77; }
why=$(unshare -m sh -c 'mount -t tmpfs none /proc && ! test -e /proc/self/exe' 2>&1) \
    || { echo "SKIP: cannot hide /proc/self/exe in a mount namespace (needs root): $why"; exit 77; }

# The sanitizers read their options and, at exit, the threads' stacks from
# /proc, which this server has not; the plain build runs this test.
if ldd "$server" 2> /dev/null | grep -q libasan; then
    echo "SKIP: a sanitizer build: AddressSanitizer needs the /proc this test hides"
    exit 77
fi

# unshare and sh exec, so $! is the server's own process
unshare -m sh -c 'mount -t tmpfs none /proc && exec "$@"' sh "$server" \
    --bind "tcp://127.0.0.1:*" --local "ipc://$work/p.sock" \
    --pool-blocks 8 --pool-name "$pool" --provider tcp \
    > "$work/server.out" 2> "$work/server.err" &
pid=$!
pids=$pid
ready "$work/server.out" "$pid" || fail "the server did not start after its second start failed"
endpoint=$(sed -n 's/.*peers at \([^,]*\),.*/\1/p' "$work/server.out")
[ -n "$endpoint" ] || fail "no endpoint in the ready line: $(cat "$work/server.out")"

want="p2pkv-server: warning: cannot start again without malloc's thread caches (No such file or directory): memory that sessions freed may stay resident"
grep -qxF -- "$want" "$work/server.err" || fail "no warning naming why the second start failed"
[ "$(grep -c 'cannot start again' "$work/server.err")" -eq 1 ] || fail "the warning was not said exactly once"
echo "ok: warned: $want"

# and it serves: a block put on it comes back whole over the data plane
head -c 65536 /dev/urandom > "$work/block"
key=$("$cli" put --local "ipc://$work/p.sock" "$work/block" | cut -d' ' -f1) \
    || fail "p2pkv put on the server failed"
[ -n "$key" ] || fail "p2pkv put printed no key"
mkdir "$work/got"
"$cli" get --server "$endpoint" --provider tcp --timeout 30 -o "$work/got" "$key" \
    > "$work/said" 2>&1 || { cat "$work/said"; fail "p2pkv get from the server failed"; }
cmp -s "$work/block" "$work/got/$key" || fail "the block fetched differs from the block put"
echo "ok: served: $key fetched over tcp, 65536 bytes intact"

kill -TERM "$pid"
wait "$pid"
rc=$?
pids=""
[ "$rc" -eq 0 ] || fail "the server exited $rc on SIGTERM"
[ -e "/dev/shm$pool" ] && fail "the server left its pool $pool"
echo "ok: stopped cleanly"
exit 0
