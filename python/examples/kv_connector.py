#!/usr/bin/env python3
"""A KV connector shaped like an inference engine's, over p2pkv.

An engine (vLLM, SGLang) keeps the attention KV cache in fixed-size blocks
named by a chained hash of their tokens.  When a request arrives, a
connector asks peers which of its leading blocks they already computed,
has the hits written straight into free blocks of the engine's own KV pool,
and lets the engine compute only the rest.  This program does that against
real p2pkv-servers:

    kv_connector.py --peer LOCAL_SOCKET ... [--requests N]

For each --peer (a p2pkv-server's --local socket) it first plays that
peer's engine: it publishes the blocks of some prompts there (the peers
split the prompts' prefixes between them).  Then, as the consumer, it runs
N requests through the connector below: look up each request's block
hashes on the peers, fetch the hits into free blocks of its pool (a NumPy
array, as an engine's KV pool would be), abort one request mid-fetch
(cancel), finish every request, and check every byte that landed.  It
prints one line per request and exits non-zero on any mismatch.

The comments marked [vLLM] and [SGLang] name where a connector of those
engines makes the same call.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time

import numpy as np

import p2pkv

TOKENS_PER_BLOCK = 16


def block_hashes(tokens: list[int]) -> list[bytes]:
    """The chained hash of each full block of tokens, as engines name
    prefix blocks: a block's name covers every token before it."""
    hashes, parent = [], b"p2pkv-example"
    for i in range(0, len(tokens) - TOKENS_PER_BLOCK + 1, TOKENS_PER_BLOCK):
        blk = np.asarray(tokens[i:i + TOKENS_PER_BLOCK], dtype=np.int32).tobytes()
        parent = hashlib.sha256(parent + blk).digest()
        hashes.append(parent)
    return hashes


def kv_of(h: bytes, block_len: int) -> np.ndarray:
    """The bytes a block's KV would hold: derived from its hash, so the
    consumer can check what landed."""
    return np.random.default_rng(int.from_bytes(h[:8], "little")).integers(
        0, 256, block_len, dtype=np.uint8)


class Connector:
    """The consumer side of the engine's KV connector."""

    def __init__(self, name: str, endpoints: list[str], num_blocks: int, block_len: int):
        # [vLLM] KVConnector.__init__ (worker role): the KV pool is the
        # engine's own tensor; register it as the client's pool.
        # [SGLang] the decode side's KVManager init, over its token pool.
        self.pool = np.zeros((num_blocks, block_len), dtype=np.uint8)
        self.client = p2pkv.Client(name, num_blocks, block_len, pool=self.pool)
        self.peers = [self.client.connect(ep) for ep in endpoints]
        self.free = list(range(num_blocks))
        self.fetches: dict[str, list] = {}     # request -> [(fetch, blocks, peer)]
        self.round: dict[tuple, int] = {}      # (request, peer) -> its lookup's round

    def match(self, req: str, hashes: list[bytes]) -> list[tuple[int, int, bytes]]:
        """The leading blocks some peer holds: (peer, position, hash).
        [vLLM] get_num_new_matched_tokens (scheduler): hits * block size
        tokens need not be computed.  [SGLang] the prefix match before
        scheduling the request's prefill."""
        found, want = [], list(enumerate(hashes))
        for peer in self.peers:
            if not want:
                break
            look = self.client.lookup(peer, req, [h for _, h in want])
            self.round[(req, peer)] = look.round
            found += [(peer, pos, h) for (pos, h), hit in zip(want, look.hits) if hit]
            want = [(pos, h) for (pos, h), hit in zip(want, look.hits) if not hit]
        found.sort(key=lambda x: x[1])
        prefix = []
        for i, hit in enumerate(found):            # only an unbroken prefix helps
            if hit[1] != i:
                break
            prefix.append(hit)
        return prefix

    def load(self, req: str, hits: list[tuple[int, int, bytes]]) -> dict[int, int]:
        """Free blocks for the hits, and the fetches into them, one per peer.
        [vLLM] update_state_after_alloc (the blocks the scheduler gave the
        request) then start_load_kv (worker).  [SGLang] KVReceiver.init
        with the allocated indices."""
        placed, started = {}, []
        for peer in self.peers:
            mine = [(pos, h) for p, pos, h in hits if p == peer]
            if not mine:
                continue
            blocks = [self.free.pop() for _ in mine]
            f = self.client.fetch(peer, req, [h for _, h in mine], blocks,
                                  round=self.round[(req, peer)])
            started.append((f, blocks, peer))
            placed.update({pos: b for (pos, _), b in zip(mine, blocks)})
        self.fetches[req] = started
        return placed

    def wait(self, req: str, timeout: float = 10.0) -> bool:
        """True when every fetch of the request landed.  [vLLM]
        wait_for_layer_load / get_finished (worker).  [SGLang]
        KVReceiver.poll until Success or Failed."""
        ok = True
        for f, _, _ in self.fetches[req]:
            try:
                f.wait(timeout)
            except p2pkv.FetchError:
                ok = False
        return ok

    def abort(self, req: str) -> None:
        """The engine aborted the request: cancel its fetches and only give
        their blocks back once each ended (nothing of it can land any
        more).  [vLLM] request_finished with the request aborted, before
        the scheduler frees its blocks.  [SGLang] abort_request → the
        receiver's failure path."""
        for f, _, _ in self.fetches[req]:
            f.cancel()
        for f, _, _ in self.fetches[req]:
            try:
                f.wait(10)
            except p2pkv.FetchError:
                pass

    def finish(self, req: str) -> None:
        """The request is done: unpin on every peer, blocks back to the
        engine's allocator.  [vLLM] request_finished.  [SGLang] the
        request leaving the decode batch."""
        for peer in self.peers:
            self.client.finish(peer, req)
        for f, blocks, _ in self.fetches.pop(req, []):
            assert f.done, "a block is reused only after its fetch ended"
            self.free += blocks

    def close(self) -> None:
        self.client.close()


def publish(engines: list[p2pkv.Engine], prompts: list[list[int]]) -> int:
    """Each prompt's blocks go to the peers in turn (block i to peer i %
    peers): the consumer has to ask every peer."""
    n = 0
    for tokens in prompts:
        for i, h in enumerate(block_hashes(tokens)):
            e = engines[i % len(engines)]
            e.put(h, kv_of(h, e.block_len))
            n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", action="append", required=True,
                    help="a p2pkv-server's --local socket (repeat)")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--blocks-per-prompt", type=int, default=12)
    args = ap.parse_args()

    engines = [p2pkv.Engine(local) for local in args.peer]
    block_len = engines[0].block_len
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, 32000, TOKENS_PER_BLOCK * args.blocks_per_prompt).tolist()
               for _ in range(args.requests)]
    print(f"published {publish(engines, prompts)} blocks of {block_len} bytes "
          f"on {len(engines)} peers")

    conn = Connector("kv-connector-example", [e.endpoint for e in engines],
                     4 * args.blocks_per_prompt, block_len)
    bad = 0
    for r, tokens in enumerate(prompts):
        req = f"req-{r}"
        # a new request whose prompt extends a cached one: its last block
        # and the new tokens are computed by the engine
        tokens = tokens + [7] * TOKENS_PER_BLOCK
        t0 = time.perf_counter()
        hits = conn.match(req, block_hashes(tokens))
        placed = conn.load(req, hits)
        if r == args.requests - 1:
            conn.abort(req)
            print(f"{req}: aborted with {len(hits)} blocks in flight; cancelled, "
                  f"{len(conn.free) + sum(len(b) for _, b, _ in conn.fetches[req])} "
                  f"blocks free after the fence")
            conn.finish(req)
            continue
        ok = conn.wait(req)
        wrong = [pos for pos, b in placed.items()
                 if not np.array_equal(conn.pool[b], kv_of(hits[pos][2], block_len))]
        bad += len(wrong) + (not ok)
        print(f"{req}: {len(hits)} of {len(block_hashes(tokens))} blocks from peers "
              f"in {1e3 * (time.perf_counter() - t0):.1f} ms, "
              f"{'all intact' if not wrong and ok else f'{len(wrong)} WRONG'}")
        conn.finish(req)
    conn.close()
    for e in engines:
        e.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
