#!/bin/sh
# limits.sh: p2pkv-server sizes its file and socket limits for
# --max-sessions before its first socket, and refuses at start a value the
# hard limit cannot hold, naming the setting (lib/daemon/limits.c).
# Run by make check from the build tree.
set -u
server=bin/p2pkv-server
[ -x "$server" ] || { echo "SKIP: $server not built here"; exit 77; }
fail=0
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT

# a hard limit of 512 descriptors holds (512 - 64) / 16 = 28 sessions
msg=$( (ulimit -n 512 && exec "$server" --max-sessions 1000 --bind "tcp://127.0.0.1:*" \
        --local "ipc://$run/p.sock" --pool-blocks 4 --pool-name /pk-limits-$$) 2>&1 >/dev/null)
rc=$?
want='--max-sessions 1000 needs about 16064 file descriptors; the hard limit is 512'
if [ "$rc" -ne 2 ] || ! printf '%s' "$msg" | grep -qF -- "$want" \
   || ! printf '%s' "$msg" | grep -qF -- 'lower --max-sessions to 28'; then
    echo "FAIL: refusal: exit $rc, \"$msg\""
    fail=1
else
    echo "ok: refused: $msg"
fi
[ -e /dev/shm/pk-limits-$$ ] && { echo "FAIL: a refused start left its pool"; fail=1; }

# a hard limit of 40 holds no session at all (64 + 16 = 80): the refusal
# says so, not a --max-sessions to lower to (the sum wrapped: "lower
# --max-sessions to 1152921504606846974")
msg=$( (ulimit -n 40 && exec "$server" --max-sessions 1 --bind "tcp://127.0.0.1:*" \
        --local "ipc://$run/p.sock" --pool-blocks 4 --pool-name /pk-limits-$$) 2>&1 >/dev/null)
rc=$?
if [ "$rc" -ne 2 ] || ! printf '%s' "$msg" | grep -qF -- 'the hard limit is 40' \
   || ! printf '%s' "$msg" | grep -qF -- 'even one session needs 80' \
   || printf '%s' "$msg" | grep -qF -- 'lower --max-sessions'; then
    echo "FAIL: refusal below one session: exit $rc, \"$msg\""
    fail=1
else
    echo "ok: refused: $msg"
fi

# under a soft limit of 256 and a hard one of 8192, 300 sessions start
# (they need 64 + 300 * 16 = 4864), and the soft limit is raised to the
# hard one: a peer holding connections that never say HELLO must use up
# that, not what the sessions need, before ZeroMQ's accept spins
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt 8192 ]; then
    echo "SKIP: raising the soft limit: the hard limit here is $hard, below 8192"
    exit $fail
fi
( ulimit -Sn 256 && ulimit -Hn 8192 && exec "$server" --max-sessions 300 \
    --bind "tcp://127.0.0.1:*" --local "ipc://$run/p.sock" --pool-blocks 4 \
    --pool-name /pk-limits-$$ ) > "$run/out" 2>&1 &
pid=$!
i=0
while [ $i -lt 200 ] && ! grep -q ready "$run/out"; do sleep 0.05; i=$((i + 1)); done
soft=$(awk '/Max open files/ {print $4}' "/proc/$pid/limits" 2>/dev/null)
kill "$pid" 2>/dev/null
wait "$pid"
if [ "${soft:-0}" != 8192 ]; then
    echo "FAIL: soft limit $soft after start, wanted the hard limit 8192: $(cat "$run/out")"
    fail=1
else
    echo "ok: soft limit raised to $soft"
fi
exit $fail
