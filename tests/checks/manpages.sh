#!/bin/sh
# manpages.sh: the manual pages stay true to the programs and headers.
# Every long option each binary's --help prints (p2pkv's and each of its
# commands') appears in that binary's page, and every p2pkv_* function
# declared in the two public headers appears in p2pkv.3.  Run by make
# check from the build tree.
set -eu
top=${top_srcdir:-.}
fail=0 checked=0

# text PAGE: the page with roff's escaped hyphens and font changes undone
text() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\(em/--/g' "$1"; }

# page_has PAGE WORD [WHAT]: WORD occurs in PAGE, not as part of a longer one
page_has() {
    if text "$1" | grep -Eq -- "(^|[^a-z0-9_-])$2([^a-z0-9_-]|\$)"; then
        checked=$((checked + 1))
    else
        echo "FAIL: $(basename "$1") does not name $2${3:+ ($3)}"; fail=1
    fi
}

# options PROGRAM ARGS...: the long options its --help prints
options() {
    "$@" 2>&1 | grep -Eo -- '--[a-z][a-z0-9-]*' | sort -u
}

for entry in "bin/p2pkv doc/p2pkv.1" "bin/p2pkv-replay doc/p2pkv-replay.1" \
             "bin/p2pkv-bench doc/p2pkv-bench.1" "bin/p2pkv-server doc/p2pkv-server.8"; do
    prog=${entry% *} page=$top/${entry#* }
    [ -x "$prog" ] || { echo "FAIL: $prog not built here (run from the build tree)"; exit 1; }
    [ -f "$page" ] || { echo "FAIL: no $page"; fail=1; continue; }
    helps="--help"
    # p2pkv COMMAND --help prints what p2pkv --help says of it; both count
    [ "$prog" = bin/p2pkv ] && helps="--help put stats pull lookup get codec"
    for h in $helps; do
        if [ "$h" = --help ]; then opts=$(options "$prog" --help)
        else opts=$(options "$prog" "$h" --help); fi
        [ "$h" != --help ] || [ -n "$opts" ] \
            || { echo "FAIL: $prog --help printed no long option"; fail=1; }
        for o in $opts; do page_has "$page" "$o" "from $prog $h"; done
    done
done

for h in p2pkv.h p2pkv_engine.h; do
    fns=$(sed -n 's/.*\(p2pkv_[a-z0-9_]*\)(.*/\1/p' "$top/lib/$h" | sort -u)
    [ -n "$fns" ] || { echo "FAIL: no function found in lib/$h"; fail=1; }
    for f in $fns; do page_has "$top/doc/p2pkv.3" "$f" "declared in $h"; done
done

echo "manpages: $checked names checked, $([ $fail -eq 0 ] && echo all found || echo some missing)"
[ -e /dev/fd/9 ] && echo "manpages: $checked options and functions found in their pages" >&9
exit $fail
