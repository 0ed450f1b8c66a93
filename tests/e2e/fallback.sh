#!/bin/sh
# fallback.sh: the default provider falls back (issue 34, point 7).  A
# server on this host offers mmap,tcp; a consumer of another Unix user
# (p2pkv get run as nobody, with setpriv) is refused by mmap, which serves
# its own user only, and gets its blocks over tcp, intact, saying once
# that it fell back.  The server's own user, for contrast, gets them over
# mmap.  Needs root (to run as another user); exits 77 (skip) with the
# reason otherwise.  Run by make check from the build tree.
set -u
server=bin/p2pkv-server
cli=bin/p2pkv
{ [ -x "$server" ] && [ -x "$cli" ]; } || { echo "SKIP: $server and $cli not built here"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: running a consumer as another user needs root"; exit 77; }
command -v setpriv > /dev/null 2>&1 || { echo "SKIP: setpriv (util-linux) is not installed"; exit 77; }
nobody=$(id -u nobody 2>/dev/null) || { echo "SKIP: no user nobody"; exit 77; }
work=$(mktemp -d)
chmod 0755 "$work"
pool=/pk-fallback-$$
. "$(dirname "$0")/../fixtures/servers.sh"
pools=$pool

# nobody must run the build tree's binary: every directory above it searchable
d=$(cd "$(dirname "$cli")" && pwd)
setpriv --reuid "$nobody" --regid "$nobody" --clear-groups "$d/p2pkv" --version > /dev/null 2>&1 \
    || { echo "SKIP: nobody cannot run $d/p2pkv (a directory above it is private)"; exit 77; }

"$server" --peer-id "fallback-$$" --bind "tcp://127.0.0.1:*" --local "ipc://$work/s.sock" \
    --pool-name "$pool" --pool-blocks 16 --block-len 65536 --provider mmap,tcp \
    > "$work/server.out" 2> "$work/server.err" &
pid=$!
pids=$pid
ready "$work/server.out" "$pid" || fail "the server did not start"
grep -q 'provider mmap' "$work/server.out" || fail "the server does not offer mmap: $(cat "$work/server.out")"
endpoint=$(sed -n 's/.*peers at \([^,]*\),.*/\1/p' "$work/server.out")

keys=""
for i in 1 2 3 4; do
    head -c 65536 /dev/urandom > "$work/block$i"
    key=$("$cli" put --local "ipc://$work/s.sock" "$work/block$i" | cut -d' ' -f1) \
        || fail "p2pkv put failed"
    keys="$keys $key"
    cp "$work/block$i" "$work/want-$key"
done

# the server's own user: mmap
mkdir "$work/own"
# shellcheck disable=SC2086  # the keys, one argument each
"$cli" get --server "$endpoint" --timeout 30 -o "$work/own" $keys > "$work/own.out" 2> "$work/own.err" \
    || fail "the server's own user's get failed"
grep -q 'over mmap' "$work/own.err" || fail "the server's own user did not use mmap: $(cat "$work/own.err")"
echo "ok: the server's own user: $(grep 'over mmap' "$work/own.err")"

# another user: refused by mmap, then tcp
mkdir -m 0777 "$work/other"
# shellcheck disable=SC2086
setpriv --reuid "$nobody" --regid "$nobody" --clear-groups \
    "$cli" get --server "$endpoint" --timeout 30 -o "$work/other" $keys \
    > "$work/other.out" 2> "$work/other.err" \
    || fail "nobody's get failed: $(cat "$work/other.err")"
grep -q 'over tcp' "$work/other.err" || fail "nobody's get was not over tcp: $(cat "$work/other.err")"
[ "$(grep -c 'fell back' "$work/other.err")" -eq 1 ] \
    || fail "the fallback was not said exactly once: $(cat "$work/other.err")"
grep -q '^p2pkv: mmap refused: .*mmap serves peers of its own user only.*; fell back to tcp' \
    "$work/other.err" || fail "the fallback line does not say why: $(cat "$work/other.err")"
for key in $keys; do
    grep -qx "$key fetched" "$work/other.out" || fail "$key not fetched: $(cat "$work/other.out")"
    cmp -s "$work/want-$key" "$work/other/$key" || fail "$key arrived changed"
done
grep -q "session p2pkv-cli-[0-9]* opened over tcp" "$work/server.err" \
    || fail "the server did not open a tcp session"
echo "ok: nobody (uid $nobody): $(grep 'fell back' "$work/other.err")"
echo "ok: its 4 blocks over tcp, byte for byte: $(grep 'over tcp' "$work/other.err")"

kill -TERM "$pid"
wait "$pid"
rc=$?
pids=""
[ "$rc" -eq 0 ] || fail "the server exited $rc on SIGTERM"
exit 0
