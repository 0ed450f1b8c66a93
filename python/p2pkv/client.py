"""The consumer: have a server's KV-cache blocks written into your pool.

A Client owns (or is given) a pool of num_blocks * block_len bytes and
keeps a session with each server it connects to.  A thread of the
library's drives every session in the background (heartbeats, timers,
completions), so nothing here needs polling.  Block bytes never cross
Python: servers write them straight into the pool (RDMA or its tcp
emulation), and `pool`/`blocks` are views of that memory.
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import threading
from dataclasses import dataclass
from typing import Optional, Sequence

from . import _lib as L
from ._buffers import KeyLike, Keys, c_text, uint32s, writable_address
from ._handle import Handle
from .errors import Error, FetchError, Timeout, check

_STATUS = {0: "landed", 1: "failed", 2: "aborted"}
_STATES = {0: "connecting", 1: "up", 2: "down", 3: "stopped"}


def _curve(curve_public, curve_secret, curve_server) -> list:
    """The three CURVE keys as bytes (None stays None: the library checks
    that all three or none are given, naming the one missing)."""
    return [c_text(k, what) if isinstance(k, str) else k
            for k, what in ((curve_public, "curve_public"), (curve_secret, "curve_secret"),
                            (curve_server, "curve_server"))]


def describe(endpoint: str, timeout: float = 5.0, *, curve_public: Optional[str] = None,
             curve_secret: Optional[str] = None, curve_server: Optional[str] = None) -> dict:
    """A server's block length, fingerprint, hash seed and providers (best
    first) and host identity, to size a pool before connecting.  A CURVE
    server describes itself only to an allowed key: give the consumer's
    keypair and the server's key (Z85), as for Client."""
    d = L.Description()
    err = ctypes.create_string_buffer(L.ERRLEN)
    keys = _curve(curve_public, curve_secret, curve_server)
    cfg = L.Config(curve_public=keys[0], curve_secret=keys[1], curve_server=keys[2])
    check(L.lib().p2pkv_describe_curve(c_text(endpoint, "endpoint"), timeout, ctypes.byref(cfg),
                                       ctypes.byref(d), err), err, f"describe {endpoint}")
    return {"peer_id": d.peer_id.decode(), "block_len": d.block_len,
            "fingerprint": d.fingerprint.decode(), "hash_seed": d.hash_seed.decode(),
            "provider": d.provider.decode(),
            "providers": [d.providers[i].value.decode() for i in range(d.nproviders)],
            "host": d.host.decode()}


@dataclass
class Lookup:
    """A lookup's answer: hits[i] says whether the server holds keys[i]
    (and pinned it for this request); round is the lookup's round, to
    fetch the hits under."""
    keys: list
    hits: list
    round: int

    def hit_keys(self) -> list:
        return [k for k, h in zip(self.keys, self.hits) if h]


class Fetch:
    """One fetch; it ends exactly once, as landed, failed or aborted."""

    def __init__(self, client: "Client", fetch_id: int, server: int, kv: str):
        self.client, self.id, self.server, self.kv = client, fetch_id, server, kv
        self.status: Optional[str] = None
        self.reason = ""

    @property
    def done(self) -> bool:
        """True once the fetch ended: its destination blocks may be reused."""
        return self.status is not None

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits for the end: returns when landed, raises FetchError when
        failed or aborted, Timeout when still running after timeout."""
        c = self.client
        with c._cond:
            if not c._cond.wait_for(lambda: self.status is not None, timeout):
                raise Timeout(errno.ETIMEDOUT, f"fetch {self.id}: not ended after {timeout} s")
        if self.status != "landed":
            raise FetchError(self.status, f"fetch {self.id} {self.status}: {self.reason}")

    def cancel(self) -> bool:
        """Cancels the fetch (see Client.cancel)."""
        return self.client.cancel(self.id)


class Get(Fetch):
    """An asynchronous get (Client.get_async): one message and one answer
    (or, from a server without get, a lookup and a fetch the library
    makes); it ends exactly once, as a fetch does, with a result per key."""

    def __init__(self, client: "Client", fetch_id: int, server: int, kv: str, results, n: int):
        super().__init__(client, fetch_id, server, kv)
        self._results, self._n = results, n    # written by the library until the end

    def results(self) -> list[dict]:
        """Each key's result, as Client.get_results gives them, once the get
        ended (Error(EINPROGRESS) before)."""
        if not self.done:
            raise Error(errno.EINPROGRESS, f"get {self.id}: not ended yet")
        return self.client._result_dicts(self._results[:self._n])

    def wait(self, timeout: Optional[float] = None) -> list[dict]:
        """Waits for the end: the results when it landed (a key may still be
        missing or corrupt); FetchError when failed or aborted, Timeout when
        still running after timeout."""
        super().wait(timeout)
        return self.results()


class Client:
    """A consumer of p2pkv servers, over a pool of num_blocks * block_len
    bytes: pool=None allocates it; else any writable C-contiguous buffer
    of that size (a bytearray, a NumPy array: an engine's KV pool),
    which must outlive the client."""

    def __init__(self, peer_id: str, num_blocks: int, block_len: int, pool=None, *,
                 fingerprint: str = "", hash_seed: str = "0", provider: Optional[str] = None,
                 node: Optional[str | Sequence[str]] = None, load_timeout: float = 0,
                 abort_ack_timeout: float = 0, keepalive_interval: float = 0,
                 silence_timeout: float = 0, connect_retry: float = 0,
                 stall_timeout: float = 0, no_reconnect: bool = False,
                 curve_public: Optional[str] = None, curve_secret: Optional[str] = None,
                 curve_server: Optional[str] = None, directory: Optional[str] = None,
                 answer_spin: float = 0, verify: bool = True, max_corrupt: int = 0):
        lib = L.lib()
        self.num_blocks, self.block_len = int(num_blocks), int(block_len)
        self._cond = threading.Condition()
        self._fetches: dict[int, Fetch] = {}
        self._early: dict[int, tuple] = {}
        self._answers: dict[tuple, dict] = {}
        self._servers: set[int] = set()        # connected, for close to disconnect
        self._handle: Optional[Handle] = None
        # The pool is always memory Python owns (an anonymous mapping unless
        # given), so views of it stay valid after close: no view can outlive it.
        if pool is None:
            pool = mmap.mmap(-1, max(self.num_blocks * self.block_len, 1))
        address, self._pool_ref = writable_address(pool, self.num_blocks * self.block_len)
        self.pool: memoryview = memoryview(pool).cast("B")[:self.num_blocks * self.block_len]
        """The pool, num_blocks * block_len bytes: block b at b * block_len."""
        enc = lambda s, what: c_text(s, what) if s is not None else None  # noqa: E731
        # several rails: one address each ("A,B" or ["A", "B"]), checked by
        # the library against this host's interfaces
        if node is not None and not isinstance(node, str):
            node = ",".join(node)
        self._strings = [enc(peer_id, "peer_id"), enc(fingerprint, "fingerprint"),
                         enc(hash_seed, "hash_seed"), enc(provider, "provider"),
                         enc(node, "node")]
        # CURVE keys (Z85): the library copies them, as it does the strings
        self._curve = _curve(curve_public, curve_secret, curve_server)
        self._directory = enc(directory, "directory")
        cfg = L.Config(*self._strings, load_timeout, abort_ack_timeout, keepalive_interval,
                       silence_timeout, connect_retry, stall_timeout, no_reconnect, True,
                       *self._curve, self._directory, answer_spin, not verify, max_corrupt)
        # the callbacks must live as long as the client
        self._cbs = L.Callbacks(None, L.ON_LOOKUP(self._on_lookup),
                                L.ON_FETCH(self._on_fetch), L.ON_SERVER(self._on_server))
        err = ctypes.create_string_buffer(L.ERRLEN)
        handle = lib.p2pkv_client_new(ctypes.byref(cfg), address, self.num_blocks,
                                      self.block_len, self._cbs, err)
        if not handle:
            raise Error(errno.EINVAL, err.value.decode(errors="replace") or "p2pkv_client_new")
        self._handle = Handle(ctypes.c_void_p(handle), "the client is closed")

    # ---- callbacks, on the library's thread, with its lock held ----------
    def _on_lookup(self, arg, server, kv, round_seq, keys, hits, n):
        got = {}
        for i in range(n):
            k = ctypes.string_at(keys[i].bytes, keys[i].len)
            got[k] = (bool(hits[i]) if hits else None, round_seq)
        with self._cond:
            self._answers.setdefault((server, kv.decode()), {}).update(got)
            self._cond.notify_all()

    def _on_fetch(self, arg, server, fetch_id, status, reason):
        end = (_STATUS.get(status, "failed"), reason.decode(errors="replace") if reason else "")
        with self._cond:
            f = self._fetches.pop(fetch_id, None)
            if f is None:
                self._early[fetch_id] = end
            else:
                f.status, f.reason = end
            self._cond.notify_all()

    def _on_server(self, arg, server, state, reason):
        with self._cond:
            # a new session knows no request: the old one's answers (and
            # its "went away" ones) would answer lookups it never saw
            if state == 1:
                for k in [k for k in self._answers if k[0] == server]:
                    del self._answers[k]
            self._cond.notify_all()

    # ---- the API -----------------------------------------------------------
    def _c(self, name: str, *args):
        """The library's name(client, *args), holding the client while it
        runs (close waits for it); Error(EBADF) once closed."""
        hd = self._handle
        if hd is None:
            raise Error(errno.EBADF, "the client is closed")
        h = hd.enter()
        try:
            return getattr(L.lib(), name)(h, *args)
        finally:
            hd.leave()

    def connect(self, endpoint: str, timeout: float = 10.0,
                server_key: Optional[str] = None) -> int:
        """Connects to a server (tcp://HOST:PORT) and returns its index.
        server_key: that server's CURVE public key (Z85) when it is not
        the client's curve_server.  A server that refuses our key raises
        Error with errno EACCES ("the server refused our CURVE key")."""
        err = ctypes.create_string_buffer(L.ERRLEN)
        if server_key is not None:
            s = check(self._c("p2pkv_client_connect_curve", c_text(endpoint, "endpoint"),
                              c_text(server_key, "server_key"), timeout, err), err, f"connect {endpoint}")
        else:
            s = check(self._c("p2pkv_client_connect", c_text(endpoint, "endpoint"), timeout, err), err,
                      f"connect {endpoint}")
        with self._cond:
            self._servers.add(s)
        return s

    def disconnect(self, server: int) -> None:
        """Ends the session with a server; its open fetches fail."""
        check(self._c("p2pkv_client_disconnect", server), None, f"server {server}")
        with self._cond:
            self._servers.discard(server)

    def server_state(self, server: int) -> tuple[str, str]:
        """(state, reason): connecting, up, down or stopped."""
        err = ctypes.create_string_buffer(L.ERRLEN)
        st = check(self._c("p2pkv_client_server_state", server, err), None,
                   f"server {server}")
        return _STATES.get(st, str(st)), err.value.decode(errors="replace")

    def lookup(self, server: int, kv: str, keys: Sequence[KeyLike],
               timeout: float = 10.0) -> Lookup:
        """Asks the server which keys it holds, for request kv; the hits
        are pinned on the server for this request until fetched or
        finished.  Keys asked before for the same request are answered
        from that answer (the protocol asks each once per request), in
        the same session: once the server is up again after a loss, they
        are asked again."""
        ks = Keys(keys)
        if ks.n == 0:
            raise ValueError("keys: expected at least one key")
        answers = self._answers.get((server, kv), {})
        if any(k not in answers for k in ks.items):
            check(self._c("p2pkv_client_lookup", server, c_text(kv, "kv"), ks.array, ks.n),
                  None, f"lookup on server {server}")
        with self._cond:
            ready = lambda: all(k in self._answers.get((server, kv), {})  # noqa: E731
                                for k in ks.items)
            if not self._cond.wait_for(ready, timeout):
                raise Timeout(errno.ETIMEDOUT, f"lookup {kv}: no answer in {timeout} s")
            got = [self._answers[(server, kv)][k] for k in ks.items]
        if any(h is None for h, _ in got):
            raise Error(errno.ENOTCONN, f"lookup {kv}: server {server} went away first")
        return Lookup(list(ks.items), [h for h, _ in got], max(r for _, r in got))

    def fetch(self, server: int, kv: str, keys: Sequence[KeyLike], blocks: Sequence[int],
              round: int = 0, deadline: float = 0) -> Fetch:
        """Has the server write keys[i] into pool block blocks[i]; round is
        the Lookup's round whose hits these are (0: a fresh round).
        Returns at once; wait on the Fetch, or cancel it."""
        ks = Keys(keys)
        if len(blocks) != ks.n:
            raise ValueError(f"blocks: {len(blocks)} for {ks.n} keys")
        dest = uint32s(blocks, "blocks")
        fid = ctypes.c_uint64()
        check(self._c("p2pkv_client_fetch", server, c_text(kv, "kv"), ks.array, dest, ks.n,
                                         round, deadline, ctypes.byref(fid)), None,
              f"fetch on server {server}")
        f = Fetch(self, fid.value, server, kv)
        with self._cond:
            end = self._early.pop(f.id, None)
            if end is None:
                self._fetches[f.id] = f
            else:
                f.status, f.reason = end
        return f

    def get_async(self, server: int, keys: Sequence[KeyLike], blocks: Sequence[int],
                  kv: str = "get", deadline: float = 0) -> Get:
        """Has the server write keys[i] into pool block blocks[i], in one
        message (p2pkv_client_get_async) where the server offers get; where
        it does not (run with --gets off, or older), the library takes the
        two steps itself, a lookup then a fetch of its hits, under a
        request of its own, with the same results and end.  Returns at
        once; wait on the Get for its results, or cancel it.  Several may
        be in flight; finish(server, kv) ends the request when they are
        done (and cancels those still running)."""
        ks = Keys(keys)
        if len(blocks) != ks.n:
            raise ValueError(f"blocks: {len(blocks)} for {ks.n} keys")
        dest = uint32s(blocks, "blocks")
        res = (L.KeyResult * max(ks.n, 1))()
        fid = ctypes.c_uint64()
        check(self._c("p2pkv_client_get_async", server, c_text(kv, "kv"), ks.array, dest,
                                             ks.n, deadline, res, ctypes.byref(fid)), None,
              f"get on server {server}")
        g = Get(self, fid.value, server, kv, res, ks.n)
        # the client keeps the Get (and the results the library writes)
        # until its end, whatever the caller keeps
        with self._cond:
            end = self._early.pop(g.id, None)
            if end is None:
                self._fetches[g.id] = g
            else:
                g.status, g.reason = end
        return g

    def cancel(self, fetch_id: int) -> bool:
        """Cancels an open fetch: it ends once, as aborted, only when no
        byte of it can land any more (then its blocks may be reused).
        True when this started the cancel, False when it was cancelled
        already or had ended already; Error(ENOENT) for an id never
        issued."""
        rc = self._c("p2pkv_client_cancel", fetch_id)
        if rc in (-errno.EINPROGRESS, -errno.EALREADY):
            return False
        check(rc, None, f"cancel {fetch_id}")
        return True

    def finish(self, server: int, kv: str) -> None:
        """The request is done on that server: its pins go, and its fetches
        still open are cancelled."""
        check(self._c("p2pkv_client_finish", server, c_text(kv, "kv")), None,
              f"finish {kv}")
        with self._cond:
            self._answers.pop((server, kv), None)

    def _results(self, server: Optional[int], keys: Sequence[KeyLike], blocks: Sequence[int],
                 kv: str, fetch: bool, timeout: float) -> list:
        """p2pkv_client_get_results, in C with the GIL released: a
        KeyResult per key (one round trip per batch, a get, where the
        server offers the capability; protocol.md section 3)."""
        if server is None:
            server = L.ANY_SERVER
        ks = Keys(keys)
        if len(blocks) != ks.n:
            raise ValueError(f"blocks: {len(blocks)} for {ks.n} keys")
        dest = uint32s(blocks, "blocks")
        res = (L.KeyResult * max(ks.n, 1))()
        err = ctypes.create_string_buffer(L.ERRLEN)
        check(self._c("p2pkv_client_get_results", server, c_text(kv, "kv"), ks.array, dest,
                                               ks.n, fetch, timeout, res, L.PROGRESS(), None,
                                               err),
              err, f"get on server {server}")
        return res[:ks.n]

    def get(self, server: Optional[int], keys: Sequence[KeyLike], blocks: Sequence[int],
            kv: str = "get", fetch: bool = True, timeout: float = 10.0) -> list[bool]:
        """Gets keys[i] into pool block blocks[i], as many as the server
        holds, and waits: lookup, fetch the hits, finish, all in C with the
        GIL released.  Returns which keys landed, whole (fetch=False: which
        the server holds); a corrupt block is False.  server None (with
        directory=): each key from any live holder the directory names,
        another one if a holder fails."""
        return [r.status == L.KEY_LANDED
                for r in self._results(server, keys, blocks, kv, fetch, timeout)]

    def get_results(self, server: Optional[int], keys: Sequence[KeyLike],
                    blocks: Sequence[int], kv: str = "get", fetch: bool = True,
                    timeout: float = 10.0) -> list[dict]:
        """get with a result per key (p2pkv_client_get_results): dicts of
        status ("landed", "missing", "corrupt": it landed but differs from
        the checksum its server announced, so its block holds wrong bytes;
        or "failed"), verified (compared with its checksum), checksum,
        holder (server index, or None), source (the endpoint of that
        server: where the key came from, or None) and reason (why missing,
        where the server says: "absent", "evicted", "pending" (being
        written, not landed by the lookup's deadline), "quota", "writing",
        "draining", or "no_holder" (the directory named none); None for
        one that did not say).  A corrupt block is a result, not an
        exception."""
        return self._result_dicts(self._results(server, keys, blocks, kv, fetch, timeout))

    def _result_dicts(self, results) -> list[dict]:
        """KeyResults as get_results gives them."""
        endpoints: dict[int, Optional[str]] = {}
        for r in results:
            if r.holder >= 0 and r.holder not in endpoints:
                out = ctypes.create_string_buffer(256)
                rc = self._c("p2pkv_client_server_endpoint", r.holder, out, len(out))
                endpoints[r.holder] = out.value.decode() if rc == 0 else None
        return [{"status": L.KEY_STATUS.get(r.status, "failed"), "verified": bool(r.verified),
                 "checksum": int(r.checksum), "holder": None if r.holder < 0 else int(r.holder),
                 "source": endpoints.get(r.holder) if r.holder >= 0 else None,
                 "reason": L.miss_reason(r.reason) if r.status == L.KEY_MISSING else None}
                for r in results]

    def checks(self) -> dict:
        """The end-to-end check's counters (p2pkv_client_checks): checked,
        corrupt, unchecked, hostile."""
        st = L.CheckStats()
        self._c("p2pkv_client_checks", ctypes.byref(st))
        return {"checked": st.checked, "corrupt": st.corrupt, "unchecked": st.unchecked,
                "hostile": st.hostile}

    def locate(self, keys: Sequence[KeyLike]) -> list[list[dict]]:
        """Each key's live holders in the directory (directory=), as dicts
        of peer_id, endpoint, host, block_len and provider: one pipelined
        round trip."""
        ks = Keys(keys)
        found: list[list[dict]] = [[] for _ in range(ks.n)]

        def on_locate(arg, i, holders, n):
            found[i] = [{"peer_id": holders[h].peer_id.decode(errors="replace"),
                         "endpoint": holders[h].endpoint.decode(errors="replace"),
                         "host": holders[h].host.decode(errors="replace"),
                         "block_len": int(holders[h].block_len),
                         "provider": holders[h].provider.decode(errors="replace")}
                        for h in range(n)]
        err = ctypes.create_string_buffer(L.ERRLEN)
        check(self._c("p2pkv_client_locate", ks.array, ks.n, L.ON_LOCATE(on_locate),
                                          None, err), err, "locate")
        return found

    def directory_stats(self) -> dict:
        """The directory's counters (see p2pkv_client_directory_stats)."""
        st = L.DirectoryStats()
        check(self._c("p2pkv_client_directory_stats", ctypes.byref(st)), None,
              "directory_stats")
        return {name: getattr(st, name) for name, _ in L.DirectoryStats._fields_}

    @property
    def open_fetches(self) -> int:
        """Fetches not ended yet, on every server."""
        return self._c("p2pkv_client_open_fetches")

    def block(self, b: int) -> memoryview:
        """Block b of the pool, as a writable memoryview."""
        if not 0 <= b < self.num_blocks:
            raise IndexError(f"block {b}: the pool has {self.num_blocks}")
        return self.pool[b * self.block_len:(b + 1) * self.block_len]

    def blocks(self):
        """The pool as a NumPy uint8 array of shape (num_blocks, block_len),
        sharing its memory (NumPy must be installed)."""
        import numpy
        return numpy.frombuffer(self.pool, dtype=numpy.uint8).reshape(self.num_blocks,
                                                                      self.block_len)

    def close(self) -> None:
        """Says goodbye to every server and frees everything, once the calls
        other threads have running returned: each server is disconnected
        first, so a get waiting on one returns at once (Error ENOTCONN);
        later calls raise Error(EBADF)."""
        h = self._handle.take() if self._handle is not None else None
        if h is None:
            return
        with self._cond:
            servers = sorted(self._servers)
            self._servers.clear()
        for s in servers:
            L.lib().p2pkv_client_disconnect(h, s)
        self._handle.wait_idle()
        L.lib().p2pkv_client_destroy(ctypes.byref(h))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
