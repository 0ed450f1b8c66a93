#!/bin/sh
# bench_args.sh: p2pkv-bench refuses impossible parameters before it starts
# any process, with exit status 2 and a message naming the parameter.
# Run by make check from the build tree.
set -u
bench=${P2PKV_BENCH:-bin/p2pkv-bench}
[ -x "$bench" ] || { echo "SKIP: $bench not built here"; exit 77; }
fail=0

# refuse ARGS WORDS: exit 2 and a message containing WORDS on stderr, and
# nothing on stdout (a suite prints its header only once it starts)
refuse() {
    args=$1 want=$2
    # shellcheck disable=SC2086
    msg=$("$bench" $args 2>&1 >/dev/null)
    rc=$?
    # shellcheck disable=SC2086
    out=$("$bench" $args 2>/dev/null)
    if [ "$rc" -ne 2 ] || ! printf '%s' "$msg" | grep -qF -- "$want" || [ -n "$out" ]; then
        echo "FAIL: p2pkv-bench $args: exit $rc, \"$msg\" (wanted 2 and \"$want\")"
        fail=1
    else
        echo "ok: p2pkv-bench $args: $msg"
    fi
}

refuse "nosuch" 'unknown suite "nosuch"'

# help after a suite is the usage, on stdout, exit 0 (it was "unknown option")
for args in "--help" "fetch --help" "control -h" "disk --reps 3 --help"; do
    # shellcheck disable=SC2086
    out=$("$bench" $args 2>/dev/null); rc=$?
    if [ "$rc" -ne 0 ] || ! printf '%s' "$out" | grep -q '^usage: p2pkv-bench SUITE'; then
        echo "FAIL: p2pkv-bench $args: exit $rc, no usage on stdout"; fail=1
    else
        echo "ok: p2pkv-bench $args: the usage"
    fi
done
refuse "fetch --bogus" 'unknown option "--bogus"'
refuse "fetch --block-sizes 0" '--block-sizes: 0'
refuse "fabric --block-sizes 64K,0" '--block-sizes: 0'
refuse "fetch --block-sizes 64Q" '--block-sizes: "64Q" is not a size'
refuse "fetch --blocks 0" '--blocks: 0'
refuse "control --in-flight 0" '--in-flight: 0: must be at least 1'
refuse "fetch --in-flight 9" '--in-flight: 9 is more than 8'
refuse "sessions --in-flight 1" '--in-flight does not apply to suite sessions'
refuse "control --answer-spin 1000001" '--answer-spin: "1000001" is not a whole number of microseconds'
refuse "fetch --answer-spin -5" '--answer-spin: "-5" is not a whole number of microseconds'
refuse "sessions --answer-spin 5" '--answer-spin does not apply to suite sessions'
refuse "fetch --consumers 300" '--consumers 300 is more than the server'"'"'s --max-sessions 256'
refuse "control --consumers 8 --max-sessions 4" '--consumers 8 is more than the server'"'"'s --max-sessions 4'
refuse "sessions --sessions 100 --max-sessions 50" '--sessions 100 is more than the server'"'"'s --max-sessions 50'
refuse "fetch --block-sizes 1G --blocks 65536" '--block-sizes 1048576K x --blocks 65536'
refuse "fetch --block-sizes 1G --blocks 65536" 'MemAvailable'
refuse "control --plot x.svg" '--plot does not apply to suite control'
refuse "sessions --threads" '--threads does not apply to suite sessions'
refuse "fabric --batches 512" '--batches: 512 is more than 256'
refuse "fetch --reps 0" '--reps: 0'
refuse "fetch --seconds -1" '--seconds: "-1"'
refuse "fetch --ports 80-90" '--ports: "80-90"'
refuse "fetch --server /nonexistent/p2pkv-server" '--server: /nonexistent/p2pkv-server'
refuse "fetch --json" '--json needs a value'
refuse "codec 1 2" 'unexpected argument "2"'
refuse "fetch --providers shm,shm" '--providers: shm twice'
refuse "fetch --providers shm,a/b" '--providers: "a/b" is not a libfabric provider name'
refuse "control --providers shm" '--providers does not apply to suite control'
# a name no transport opens here: refused before any load runs (the run
# used to time tcp, then exit 1 at the unknown one), naming the ones that do
refuse "fetch --providers tcp,nosuch" '--providers: "nosuch" is not available here'
refuse "fetch --providers tcp,nosuch" 'known here: '
refuse "fetch --providers nosuch --block-sizes 4K --blocks 1" '"nosuch" is not available here'
# rails: its own options, and a fetch too big for memory, before the root
# check and before anything starts
refuse "rails --rate 0" '--rate: 0: must be at least 1'
refuse "rails --rate 100001" '--rate: 100001 is more than 100000'
refuse "rails --rails 1,6" '--rails: 6 is more than 5'
refuse "fetch --rails 2" '--rails does not apply to suite fetch'
refuse "fetch --rate 100" '--rate does not apply to suite fetch'
refuse "rails --consumers 2" '--consumers does not apply to suite rails'
refuse "rails --block-sizes 1G --blocks 65536" '--block-sizes 1048576K x --blocks 65536'
refuse "fetch --providers shm,tcp --consumers 200" '--consumers 200 per provider is more than the server'"'"'s --max-sessions 256'
exit $fail
