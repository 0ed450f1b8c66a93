#!/bin/sh
# layers.sh: every #include of the library points down the layers of
# doc/architecture.md (Layers).  A quoted include names its layer by its
# folder ("base/clock.h"); this checks each source folder's includes
# against the layers it may use, and the base layer's system headers
# against libc and libsodium.  Run by make check.
set -eu
top=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$top"

# layer: the folders (layers) its files may include from
allowed() {
    case $1 in
        lib/base)       echo "base" ;;
        lib/wire)       echo "base wire" ;;
        lib/roles)      echo "base wire roles" ;;
        lib/sim)        echo "base sim" ;;
        # the block store: the wire's limits on a key and a pool only
        # (protocol.h's constants); never the roles or the daemon
        lib/store)      echo "base wire store" ;;
        # the tiers under the pool: the store's seam (store/tier.h) and
        # what the store's header needs; the store never includes them
        lib/tier)       echo "base wire store tier" ;;
        transports/*)   echo "base ${1#transports/}" ;;
        # registry.c: the one file that names every implementation
        transports)     echo "base transports" ;;
        # The one arrow up: the daemon's puller is a client of p2pkv.h.
        # the directory's codec and connection, beside wire (issue 14)
        lib/cluster)    echo "base wire cluster" ;;
        lib/daemon)     echo "base wire roles store tier cluster daemon p2pkv.h" ;;
        lib/client)     echo "base wire roles cluster client p2pkv.h" ;;
        # beside client: the engine's side of the local socket
        lib/engine)     echo "base wire engine p2pkv.h p2pkv_engine.h" ;;
        # the public headers: p2pkv_engine.h uses p2pkv.h's key type
        lib)            echo "p2pkv.h" ;;
        *)              echo "?" ;;
    esac
}

bad=0
for f in $(find lib transports -name '*.[ch]' | sort); do
    dir=$(dirname "$f")
    ok=$(allowed "$dir")
    if [ "$ok" = "?" ]; then
        echo "layers: $f: folder $dir is not a layer of doc/architecture.md"
        bad=1; continue
    fi
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
        case $inc in
            config.h) continue ;;
            */*) layer=${inc%%/*} ;;
            *) layer=$inc ;;
        esac
        # transports/NAME/x.h is included as "NAME/x.h"
        [ -d "transports/$layer" ] && [ "$layer" != "${dir#transports/}" ] && layer=transports
        case " $ok " in
            *" $layer "*) ;;
            *) echo "layers: $f includes \"$inc\": $dir may include only: ${ok:-nothing of ours}"
               bad=1 ;;
        esac
    done
    if [ "$dir" = lib/base ]; then
        for sys in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*<\([^>]*\)>.*/\1/p' "$f"); do
            case $sys in
                czmq.h|zmq.h|jansson.h|rdma/*)
                    echo "layers: $f includes <$sys>: the base layer needs only libc and libsodium"
                    bad=1 ;;
            esac
        done
    fi
done
[ $bad -eq 0 ] && echo "layers: every include points down"
exit $bad
