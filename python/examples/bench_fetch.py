#!/usr/bin/env python3
"""The Python client's fetch beside the C client's, in one run.

Starts a p2pkv-server (64 KiB blocks), publishes N blocks through the
Engine API, connects one Client, and then alternates, REPEATS times:

  C       Client.get: lookup, fetch and finish all inside the C library
          (p2pkv_client_get), Python only waits for the call to return;
  Python  Client.lookup, Client.fetch, Fetch.wait, Client.finish: the same
          protocol steps driven from Python (callbacks into Python, a
          Condition wait).

Both move the same N x 64 KiB into the same pool over the same session;
the block bytes never cross Python in either (the server writes them
straight into the pool; Python sees only keys, indexes and the end).
Prints min / median / max GB/s of each and the ratio of the medians.

    bench_fetch.py [--blocks 256] [--repeats 15] [--server-bin PATH]
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time

import numpy as np

import p2pkv
from p2pkv.testing import LocalServer


def main() -> int:
    ap = argparse.ArgumentParser(description="Python vs C client fetch, one run")
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--block-len", type=int, default=65536)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    n, blen = args.blocks, args.block_len
    srv = LocalServer(["--block-len", str(blen), "--pool-blocks", str(2 * n),
                       "--pin-quota", str(n), "--silence-timeout", "10"])
    try:
        with p2pkv.Engine(srv.local) as eng:
            rng = np.random.default_rng(0)
            keys = []
            for i in range(n):
                data = rng.integers(0, 256, blen, dtype=np.uint8)
                key = hashlib.sha256(data.tobytes()).digest()
                eng.put(key, data)
                keys.append((key, data))
            ks = [k for k, _ in keys]
            with p2pkv.Client("bench-py", n, blen) as c:
                s = c.connect(srv.endpoint)
                dest = list(range(n))
                rates = {"C": [], "Python": []}
                for r in range(args.repeats + 1):
                    t0 = time.perf_counter()
                    assert all(c.get(s, ks, dest, kv=f"c-{r}"))
                    tc = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    look = c.lookup(s, f"py-{r}", ks)
                    assert all(look.hits)
                    c.fetch(s, f"py-{r}", ks, dest, round=look.round).wait(30)
                    c.finish(s, f"py-{r}")
                    tp = time.perf_counter() - t0
                    if r == 0:
                        continue                # the first fetch sets up the channel
                    rates["C"].append(n * blen / tc / 1e9)
                    rates["Python"].append(n * blen / tp / 1e9)
                blocks = c.blocks()
                for i, (_, data) in enumerate(keys):
                    assert np.array_equal(blocks[i], data), f"block {i} corrupt"
                del blocks
    finally:
        srv.stop()
    print(f"fetch of {n} x {blen // 1024} KiB, {args.repeats} repeats, one session")
    print(f"{'client':8} {'min':>6} {'median':>7} {'max':>6}  GB/s")
    for name, v in rates.items():
        print(f"{name:8} {min(v):6.2f} {statistics.median(v):7.2f} {max(v):6.2f}")
    ratio = statistics.median(rates["Python"]) / statistics.median(rates["C"])
    print(f"Python / C (medians): {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
