#!/bin/sh
# local_socket.sh: the engine's socket is private (issue 34, point 6).
#   - the default path follows one rule (p2pkv-server(8), FILES): under a
#     umask of 000 the server makes $XDG_RUNTIME_DIR/p2pkv 0700 and its
#     socket 0600, and `p2pkv stats` without --local (the engine library's
#     default) finds it;
#   - --local-group gives the socket 0660 and the directory 0710 to a group;
#   - a path that is not the server's is refused with the reason: a file,
#     another user's socket, a live socket another server serves; a stale
#     socket of its own (left by kill -9) is removed, said at warn;
#   - the engine library refuses a socket another user owns, and the
#     squatter sees no connection;
#   - a clean stop removes the socket.
# The squatter's parts need root (chown to nobody); without root they are
# skipped, saying so, and the rest runs.  Run by make check from the build
# tree.
set -u
server=bin/p2pkv-server
cli=bin/p2pkv
{ [ -x "$server" ] && [ -x "$cli" ]; } || { echo "SKIP: $server and $cli not built here"; exit 77; }
py=${PYTHON:-python3}
work=$(mktemp -d)
chmod 0755 "$work"          # nobody must reach $work/squat/ below
pool=/pk-local-socket-$$
. "$(dirname "$0")/../fixtures/servers.sh"
pools="$pool $pool-b"

# start NAME ARGS...: a server in the background, its pid in $pid, its
# ready line (or its exit, whichever comes first, 30 s bound) awaited
start() {
    name=$1; shift
    "$server" --bind "tcp://127.0.0.1:*" --pool-blocks 8 --block-len 4096 --provider tcp \
        --shutdown-timeout 3 "$@" > "$work/$name.out" 2> "$work/$name.err" &
    pid=$!
    pids="$pids $pid"
    ready "$work/$name.out" "$pid"
}

# stop PID: SIGTERM, and its exit status must be 0
stop() {
    kill -TERM "$1"
    wait "$1"
    rc=$?
    [ "$rc" -eq 0 ] || fail "the server exited $rc on SIGTERM"
}

# refused NAME WHY ARGS...: a server that must not start, saying WHY
refused() {
    name=$1; why=$2; shift 2
    start "$name" "$@"
    wait "$pid"
    rc=$?
    [ "$rc" -eq 1 ] || fail "$name: the server exited $rc, not 1 (refused)"
    grep -qF -- "$why" "$work/$name.err" || fail "$name: no reason \"$why\""
    echo "ok: $name refused: $(grep -F -- "$why" "$work/$name.err" | head -1)"
}

# ---- the default path, under umask 000 ------------------------------------
xdg=$work/xdg
mkdir -m 0700 "$xdg"
host=$(hostname)
sock=$xdg/p2pkv/p2pkv-$(printf '%s' "$host" | tr -c 'A-Za-z0-9._-' '_').sock
(umask 000; XDG_RUNTIME_DIR=$xdg exec "$server" --bind "tcp://127.0.0.1:*" --pool-blocks 8 \
    --block-len 4096 --provider tcp --pool-name "$pool" > "$work/default.out" \
    2> "$work/default.err") &
pid=$!
pids="$pids $pid"
ready "$work/default.out" "$pid" || fail "the server did not start"
grep -qF "engine at ipc://$sock," "$work/default.out" \
    || fail "the server's socket is not $sock: $(cat "$work/default.out")"
[ "$(stat -c %a "$xdg/p2pkv")" = 700 ] || fail "the directory is $(stat -c %a "$xdg/p2pkv"), not 700"
[ "$(stat -c %a "$sock")" = 600 ] || fail "under umask 000 the socket is $(stat -c %a "$sock"), not 600"
echo "ok: under umask 000: $xdg/p2pkv is 0700, $sock is 0600"
XDG_RUNTIME_DIR=$xdg "$cli" stats --json > "$work/stats.json" 2> "$work/stats.err" \
    || fail "p2pkv stats without --local did not reach the server: $(cat "$work/stats.err")"
grep -q '"ok": *true' "$work/stats.json" || fail "p2pkv stats said: $(head -c 300 "$work/stats.json")"
echo "ok: p2pkv stats without --local found it (the engine library's default)"
stop "$pid"
[ -e "$sock" ] && fail "a clean stop left $sock"
echo "ok: a clean stop removed the socket"

# ---- a directory that is not the user's own is refused --------------------
chmod 0777 "$xdg/p2pkv"
(XDG_RUNTIME_DIR=$xdg exec "$server" --bind "tcp://127.0.0.1:*" --pool-blocks 8 \
    --block-len 4096 --provider tcp --pool-name "$pool" > "$work/dirmode.out" \
    2> "$work/dirmode.err")
rc=$?
[ "$rc" -eq 1 ] || fail "a server with a 0777 socket directory exited $rc, not 1"
grep -qF "is writable by other users" "$work/dirmode.err" \
    || fail "no reason for the 0777 directory: $(cat "$work/dirmode.err")"
echo "ok: a 0777 socket directory refused: $(cat "$work/dirmode.err")"
chmod 0700 "$xdg/p2pkv"

# ---- a stale socket of ours is removed; a live one is refused -------------
sock=$work/own.sock
start killed --local "ipc://$sock" --pool-name "$pool"
kill -KILL "$pid"
wait "$pid" 2>/dev/null
[ -S "$sock" ] || fail "kill -9 did not leave $sock (nothing to test)"
rm -f "/dev/shm$pool"
start restarted --local "ipc://$sock" --pool-name "$pool"
live=$pid
grep -q ' ready: ' "$work/restarted.out" || fail "no start over a stale socket of ours"
grep -qF "$sock: removed the socket a server that ended without a clean stop left" \
    "$work/restarted.err" || fail "the stale socket's removal was not said"
[ "$(grep -c 'removed the socket' "$work/restarted.err")" -eq 1 ] || fail "said more than once"
echo "ok: a stale socket of this user (kill -9) removed, said once"
refused live "is a live socket another process serves" --local "ipc://$sock" \
    --pool-name "$pool-b"
[ -S "$sock" ] || fail "the refused server removed the live server's socket"
XDG_RUNTIME_DIR=$xdg "$cli" stats --local "ipc://$sock" > /dev/null 2>&1 \
    || fail "the first server no longer answers on $sock"
stop "$live"
echo "ok: the live server kept its socket and answers"

: > "$work/file.sock"
refused file "exists and is not a socket" --local "ipc://$work/file.sock" --pool-name "$pool"

# ---- another user's: squatted paths -----------------------------------------
if [ "$(id -u)" -ne 0 ]; then
    echo "ok: skipped the squatter's parts: they chown to nobody, which needs root"
    exit 0
fi
nobody=$(id -u nobody 2>/dev/null) || { echo "SKIP: no user nobody"; exit 77; }
mkdir -m 1777 "$work/squat"           # sticky and shared, as /tmp
squat=$work/squat/p.sock
# the squatter: a socket of nobody's that listens, and says whether anyone
# connected (one line on stdout: "connected" or, at SIGTERM, "nobody")
"$py" -c '
import os, signal, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); os.chown(sys.argv[1], int(sys.argv[2]), -1); s.listen(8)
signal.signal(signal.SIGTERM, lambda *a: (print("nobody", flush=True), os._exit(0)))
print("listening", flush=True)
s.accept()
print("connected", flush=True)
' "$squat" "$nobody" > "$work/squatter.out" 2> "$work/squatter.err" &
squatter=$!
pids="$pids $squatter"
n=0
while ! grep -q listening "$work/squatter.out" && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
[ "$(stat -c %u "$squat")" = "$nobody" ] || fail "the squatter's socket is not nobody's"
refused squatted "is a socket of uid $nobody, not this server's uid 0" --local "ipc://$squat" \
    --pool-name "$pool"
"$cli" stats --local "ipc://$squat" > "$work/engine.out" 2> "$work/engine.err" \
    && fail "p2pkv stats (the engine library) talked to nobody's socket"
grep -qF "belongs to uid $nobody, not uid 0" "$work/engine.err" \
    || fail "the engine's refusal does not say why: $(cat "$work/engine.err")"
echo "ok: the engine refused it: $(cat "$work/engine.err")"
kill -TERM "$squatter"
wait "$squatter"
[ "$(cat "$work/squatter.out")" = "listening
nobody" ] || fail "the squatter saw a connection: $(cat "$work/squatter.out")"
echo "ok: the squatter saw no connection"

# ---- --local-group, in the default directory ----------------------------------
group=$(id -gn nobody)
export XDG_RUNTIME_DIR="$xdg"
start group --local-group "$group" --pool-name "$pool"
unset XDG_RUNTIME_DIR
grep -q ' ready: ' "$work/group.out" || fail "no start with --local-group $group"
sock=$(sed -n 's|.*engine at ipc://\([^,]*\),.*|\1|p' "$work/group.out")
[ "$(stat -c '%a %G' "$sock")" = "660 $group" ] \
    || fail "--local-group $group: the socket is $(stat -c '%a %G' "$sock")"
[ "$(stat -c '%a %G' "$xdg/p2pkv")" = "710 $group" ] \
    || fail "--local-group $group: the directory is $(stat -c '%a %G' "$xdg/p2pkv")"
stop "$pid"
[ -e "$sock" ] && fail "a clean stop left $sock"
echo "ok: --local-group $group: the socket is 0660 and its directory 0710, group $group"
exit 0
