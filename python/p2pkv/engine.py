"""The engine's side: publish KV-cache blocks into the pool of the
p2pkv-server running beside you, and tell it about requests.

The pool is the server's shared memory, mapped here: `pool` and `blocks()`
are views of it, so an engine writes a block in place (a NumPy copy into
`blocks()[b]`) and no byte crosses the socket.

Python maps the pool itself (a mapping of the same shared-memory object
beside the C library's), so a view never outlives its memory: `close()`
releases `pool` and every `block()` view (using one after raises
ValueError), and a NumPy array of `blocks()` still alive keeps the
mapping until the array is gone.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import select
import weakref
from dataclasses import dataclass, field
from typing import Optional, Sequence

from . import _lib as L
from ._buffers import KeyLike, Keys, c_text
from ._handle import Handle
from .errors import Error, check

_KINDS = {1: "store", 2: "pull"}


@dataclass
class Event:
    """A store's or a pull's end: kind 'store' (id: the job) or 'pull'
    (id: the pull); success; for a pull, keys landed and missing, and why;
    and results, one dict per key of the pull in its order: key, status
    ("landed", "present": in the pool before, "missing", "corrupt" or
    "failed"), source (where a landed key came from: its holder's
    endpoint, or None) and reason (why a missing one missed, as
    Client.get_results says it, or None)."""
    kind: str
    id: int
    success: bool
    landed: int = 0
    missing: int = 0
    reason: str = ""
    results: list = field(default_factory=list)


def _map_pool(name: str, nbytes: int) -> mmap.mmap:
    """The server's pool (shared-memory object name), mapped read-write by
    Python: an mmap lives as long as a view of it, which the C library's
    mapping (unmapped at p2pkv_engine_close) cannot promise."""
    try:
        import _posixshmem          # shm_open, as multiprocessing.shared_memory uses it
        fd = _posixshmem.shm_open(name, os.O_RDWR, mode=0)
    except ImportError:
        fd = os.open("/dev/shm/" + name.lstrip("/"), os.O_RDWR)
    try:
        return mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


class Engine:
    """Attached to the local server at local_endpoint (its --local; None:
    the server's default, by p2pkv-server(8)'s rule).  The socket must
    belong to this process's user, or to $P2PKV_LOCAL_OWNER's.
    namespace: the tenant namespace (the server's --tenants) that reserve,
    commit, put, drop, store and pull name; None is the shared one."""

    def __init__(self, local_endpoint: Optional[str] = None, timeout: float = 10.0,
                 namespace: Optional[str] = None):
        lib = L.lib()
        self._handle: Optional[Handle] = None
        err = ctypes.create_string_buffer(L.ERRLEN)
        h = lib.p2pkv_engine_open(c_text(local_endpoint, "local_endpoint") if local_endpoint else None,
                                  timeout, L.ON_EVENT(), None, err)
        if not h:
            raise Error(22, err.value.decode(errors="replace")
                        or f"cannot attach to {local_endpoint}")
        handle = ctypes.c_void_p(h)
        info = lib.p2pkv_engine_info(handle).contents
        self.peer_id = info.peer_id.decode()
        self.endpoint = info.endpoint.decode()
        """Where consumers reach the server."""
        self.pool_name = info.pool_name.decode()
        self.num_blocks, self.block_len = int(info.num_blocks), int(info.block_len)
        try:
            self._map = _map_pool(self.pool_name, self.num_blocks * self.block_len)
        except OSError as e:
            lib.p2pkv_engine_close(ctypes.byref(handle))
            raise Error(e.errno or 5, f"pool_name: cannot map the pool "
                        f"\"{self.pool_name}\": {e.strerror or e}") from None
        # the memoryviews handed out, to release at close (weak: a view
        # dropped is no concern of ours; pruned as the list doubles)
        self._views: list[weakref.ref] = []
        self._views_cap = 64
        self._handle = Handle(handle, "the engine is closed")
        self.pool: memoryview = self._view(memoryview(self._map))
        """The server's pool, mapped read-write: block b at b * block_len.
        Released at close: using it after raises ValueError."""
        self.namespace: Optional[str] = None
        # pull id -> (its keys, which were present): for its event's results
        self._pulls: dict[int, tuple] = {}
        if namespace is not None:
            try:
                self.set_namespace(namespace)
            except Error:
                self.close()
                raise

    def set_namespace(self, namespace: Optional[str]) -> None:
        """The namespace of this engine's later calls (None, "" or "shared":
        the shared one); commit a reservation before switching."""
        self._call("p2pkv_engine_set_namespace", "namespace",
                   c_text(namespace, "namespace") if namespace else None)
        self.namespace = namespace or None

    def _c(self, name: str, *args):
        """The library's name(engine, *args), holding the engine while it
        runs (close waits for it); Error(EBADF) once closed."""
        hd = self._handle
        if hd is None:
            raise Error(9, "the engine is closed")
        h = hd.enter()
        try:
            return getattr(L.lib(), name)(h, *args)
        finally:
            hd.leave()

    def _call(self, name: str, what: str, *args) -> int:
        err = ctypes.create_string_buffer(L.ERRLEN)
        return check(self._c(name, *args, err), err, what)

    def reserve(self, keys: Sequence[KeyLike]) -> list[int]:
        """A free block for each key (all or nothing), to write then commit."""
        ks = Keys(keys)
        blocks = (ctypes.c_uint32 * max(ks.n, 1))()
        self._call("p2pkv_engine_reserve", "reserve", ks.array, ks.n, blocks)
        return list(blocks[:ks.n])

    def write(self, block: int, data, offset: int = 0) -> None:
        """Copies data (any buffer) to offset of a block this engine reserved."""
        mv = memoryview(data).cast("B")
        buf = (ctypes.c_char * mv.nbytes).from_buffer_copy(mv) if mv.readonly else \
            (ctypes.c_char * mv.nbytes).from_buffer(mv)
        self._call("p2pkv_engine_write", f"write block {block}", block, offset, buf, mv.nbytes)

    def commit(self, keys: Sequence[KeyLike]) -> None:
        """Publishes reserved blocks under their keys."""
        ks = Keys(keys)
        self._call("p2pkv_engine_commit", "commit", ks.array, ks.n)

    def put(self, key: KeyLike, data) -> bool:
        """reserve + copy + commit of one block (data: block_len bytes).
        False when the key was in the pool already."""
        ks = Keys([key])
        mv = memoryview(data).cast("B")
        buf = (ctypes.c_char * mv.nbytes).from_buffer_copy(mv)
        return self._call("p2pkv_engine_put", "put", ks.array, buf, mv.nbytes) == 0

    def drop(self, keys: Sequence[KeyLike]) -> None:
        """Removes keys from the pool."""
        ks = Keys(keys)
        self._call("p2pkv_engine_drop", "drop", ks.array, ks.n)

    def store(self, consumer: str, kv: str, keys: Sequence[KeyLike],
              round: Optional[int] = None) -> int:
        """Prefill/decode: these committed blocks are for consumer's request
        kv; returns the job whose 'store' event says how it ended."""
        ks = Keys(keys)
        job = ctypes.c_uint64()
        self._call("p2pkv_engine_store", "store", c_text(consumer, "consumer"), c_text(kv, "kv"), ks.array,
                   ks.n, -1 if round is None else round, ctypes.byref(job))
        return job.value

    def finish(self, consumer: str, kv: str) -> None:
        """The request kv of consumer is finished on this side."""
        self._call("p2pkv_engine_finish", "finish", c_text(consumer, "consumer"), c_text(kv, "kv"))

    def pull(self, endpoint: Optional[str], keys: Sequence[KeyLike]) -> tuple[int, int]:
        """Has the server fetch keys from another server (None: from any
        holder its --directory names, failing over between them): (pull
        id, keys being fetched); its 'pull' event follows, with each key's
        result.  The keys are kept until that event is read."""
        ks = Keys(keys)
        pid, fetching = ctypes.c_uint64(), ctypes.c_size_t()
        present = (ctypes.c_bool * max(ks.n, 1))()
        self._call("p2pkv_engine_pull", "pull", c_text(endpoint, "endpoint") if endpoint else None,
                   ks.array, ks.n, ctypes.byref(pid), ctypes.byref(fetching), present)
        self._pulls[pid.value] = (ks, present)
        return pid.value, fetching.value

    def _pull_results(self, pull: int) -> list:
        """The per-key results of the pull event just read."""
        ks, present = self._pulls.pop(pull, (None, None))
        if ks is None or not ks.n:
            return []
        out = (L.EnginePullKey * ks.n)()
        self._call("p2pkv_engine_pull_keys", "pull_keys", pull, ks.array, ks.n, out)
        return [{"key": ks.items[i],
                 "status": "present" if present[i] else L.KEY_STATUS.get(r.status, "failed"),
                 "source": r.source.decode(errors="replace") if r.source else None,
                 "reason": L.miss_reason(r.reason) if r.status == L.KEY_MISSING else None}
                for i, r in enumerate(out)]

    def stats(self) -> dict:
        """The server's stats answer (pool, fabric, sessions, metrics)."""
        err = ctypes.create_string_buffer(L.ERRLEN)
        text = self._c("p2pkv_engine_stats_json", err)
        if not text:
            raise Error(5, err.value.decode(errors="replace") or "stats")
        try:
            return json.loads(ctypes.string_at(text).decode())
        finally:
            L.lib().libc_free(text)

    def namespace_stats(self, namespace: Optional[str] = None) -> dict:
        """One tenant namespace's counters (None, "" or "shared": the shared
        one): its blocks ready and pinned, and the keys its consumers
        looked up (lookups = hits + pending + misses)."""
        st = L.EngineNamespaceStats()
        self._call("p2pkv_engine_stats_namespace", "namespace_stats",
                   c_text(namespace, "namespace") if namespace else None, ctypes.byref(st))
        return {name: getattr(st, name) for name, _ in L.EngineNamespaceStats._fields_}

    def next_event(self, timeout: float = 0.0) -> Optional[Event]:
        """The next store or pull result, waiting up to timeout; None if none."""
        ev = L.EngineEvent()
        rc = self._c("p2pkv_engine_next_event", timeout, ctypes.byref(ev))
        if rc == -110:                       # ETIMEDOUT
            return None
        check(rc, None, "next_event")
        kind = _KINDS.get(ev.kind, str(ev.kind))
        return Event(kind, ev.id, bool(ev.success), ev.landed, ev.missing,
                     ev.reason.decode(errors="replace"),
                     self._pull_results(ev.id) if kind == "pull" else [])

    def fileno(self) -> int:
        """Readable while an event is waiting (for select/selectors)."""
        return self._c("p2pkv_engine_fd")

    def wait_readable(self, timeout: float) -> bool:
        r, _, _ = select.select([self], [], [], timeout)
        return bool(r)

    def _view(self, mv: memoryview) -> memoryview:
        """mv, remembered so that close releases it."""
        if len(self._views) >= self._views_cap:
            self._views = [r for r in self._views if r() is not None]
            self._views_cap = max(64, 2 * len(self._views))
        self._views.append(weakref.ref(mv))
        return mv

    def block(self, b: int) -> memoryview:
        """Block b of the pool, as a writable memoryview (released at close)."""
        self._open()
        if not 0 <= b < self.num_blocks:
            raise IndexError(f"block {b}: the pool has {self.num_blocks}")
        return self._view(self.pool[b * self.block_len:(b + 1) * self.block_len])

    def blocks(self):
        """The pool as a NumPy uint8 array (num_blocks, block_len), in place.
        The array keeps the pool mapped for as long as it lives, close or not."""
        import numpy
        self._open()
        return numpy.frombuffer(self._map, dtype=numpy.uint8).reshape(self.num_blocks,
                                                                      self.block_len)

    def _open(self) -> None:
        if self._handle is None or self._handle.taken:
            raise Error(9, "the engine is closed")

    def close(self) -> None:
        """Detaches: releases `pool` and the block views (later use raises
        ValueError) and drops this engine's hold on the mapping, which goes
        once no NumPy array of it is left.  A call another thread has
        running (next_event, waiting up to its timeout) returns first."""
        h = self._handle.take() if self._handle is not None else None
        if h is not None:
            self._handle.wait_idle()
            for ref in self._views:
                mv = ref()
                try:
                    if mv is not None:
                        mv.release()
                except BufferError:
                    pass            # exported (a NumPy array over it): the array
                                    # keeps the mapping, so it stays valid memory
            self._views = []
            self._map = None        # unmapped when the last array over it goes
            L.lib().p2pkv_engine_close(ctypes.byref(h))

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
