#!/bin/sh
# seam_names.sh: nothing above the data-plane seam decides by a transport's
# or a provider's name (doc/architecture.md, "a new transport").  What a
# provider is (same-host only, its place under --provider auto) its
# transport's row says (base/transport.h, pk_provider_t), so no file of
# lib/ above the seam compares a name to a literal, lists names, or finds a transport by
# a literal name.  Comments, log text and help text may still name them:
# the code is read with its comments stripped (the compiler's
# -fpreprocessed), and only a literal that is a whole name counts, as an
# argument of a comparison or finder or an element of a list.  Run by
# make check.
set -eu
top=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$top"
cc=${CC:-cc}

names='shm|mmap|tcp|verbs|efa|ofi|mem|sockets|udp|psm2|psm3|opx|cxi|ucx'
# a comparison or finder with a literal name, or a list that holds one
compare="(str(n)?cmp|streq|strstr|pk_transport_(find|for|provider))[[:space:]]*\\([^;]*"
compare="$compare\"($names)(;[^\"]*)?\""
list="[{,][[:space:]]*\"($names)\"[[:space:]]*[,}]"
pattern="$compare|$list"

bad=0
# lib/sim is an implementation of the seam itself (the in-memory one)
for f in $(find lib -name '*.[ch]' -not -path 'lib/sim/*' | sort); do
    hits=$($cc -fpreprocessed -dD -E -P "$f" 2>/dev/null | grep -En "$pattern" || true)
    if [ -n "$hits" ]; then
        echo "seam_names: $f decides by a transport's name (read its row instead;" \
             "lines of the file without its comments):"
        echo "$hits" | sed 's/^/    /'
        bad=1
    fi
done
[ $bad -eq 0 ] && echo "seam_names: nothing above the seam names a transport"
exit $bad
