"""The engine's side: publish KV-cache blocks into the pool of the
p2pkv-server running beside you, and tell it about requests.

The pool is the server's shared memory, mapped here: `pool` and `blocks()`
are views of it, so an engine writes a block in place (a NumPy copy into
`blocks()[b]`) and no byte crosses the socket.
"""
from __future__ import annotations

import ctypes
import json
import select
from dataclasses import dataclass
from typing import Optional, Sequence

from . import _lib as L
from ._buffers import KeyLike, Keys, view
from .errors import Error, check

_KINDS = {1: "store", 2: "pull"}


@dataclass
class Event:
    """A store's or a pull's end: kind 'store' (id: the job) or 'pull'
    (id: the pull); success; for a pull, keys landed and missing, and why."""
    kind: str
    id: int
    success: bool
    landed: int = 0
    missing: int = 0
    reason: str = ""


class Engine:
    """Attached to the local server at local_endpoint (its --local).
    namespace: the tenant namespace (the server's --tenants) that reserve,
    commit, put, drop, store and pull name; None is the shared one."""

    def __init__(self, local_endpoint: str, timeout: float = 10.0,
                 namespace: Optional[str] = None):
        lib = L.lib()
        err = ctypes.create_string_buffer(L.ERRLEN)
        h = lib.p2pkv_engine_open(local_endpoint.encode(), timeout, L.ON_EVENT(), None, err)
        if not h:
            raise Error(22, err.value.decode(errors="replace")
                        or f"cannot attach to {local_endpoint}")
        self._handle = ctypes.c_void_p(h)
        info = lib.p2pkv_engine_info(self._handle).contents
        self.peer_id = info.peer_id.decode()
        self.endpoint = info.endpoint.decode()
        """Where consumers reach the server."""
        self.pool_name = info.pool_name.decode()
        self.num_blocks, self.block_len = int(info.num_blocks), int(info.block_len)
        self.pool: memoryview = view(lib.p2pkv_engine_pool(self._handle),
                                     self.num_blocks * self.block_len)
        """The server's pool, mapped read-write: block b at b * block_len.
        Valid until close."""
        self.namespace: Optional[str] = None
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
                   namespace.encode() if namespace else None)
        self.namespace = namespace or None

    def _h(self):
        if self._handle is None:
            raise Error(9, "the engine is closed")
        return self._handle

    def _call(self, name: str, what: str, *args) -> int:
        err = ctypes.create_string_buffer(L.ERRLEN)
        return check(getattr(L.lib(), name)(self._h(), *args, err), err, what)

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
        self._call("p2pkv_engine_store", "store", consumer.encode(), kv.encode(), ks.array,
                   ks.n, -1 if round is None else round, ctypes.byref(job))
        return job.value

    def finish(self, consumer: str, kv: str) -> None:
        """The request kv of consumer is finished on this side."""
        self._call("p2pkv_engine_finish", "finish", consumer.encode(), kv.encode())

    def pull(self, endpoint: str, keys: Sequence[KeyLike]) -> tuple[int, int]:
        """Has the server fetch keys from another server: (pull id, keys
        being fetched); a 'pull' event follows when that is not 0."""
        ks = Keys(keys)
        pid, fetching = ctypes.c_uint64(), ctypes.c_size_t()
        self._call("p2pkv_engine_pull", "pull", endpoint.encode(), ks.array, ks.n,
                   ctypes.byref(pid), ctypes.byref(fetching))
        return pid.value, fetching.value

    def stats(self) -> dict:
        """The server's stats answer (pool, fabric, sessions, metrics)."""
        err = ctypes.create_string_buffer(L.ERRLEN)
        text = L.lib().p2pkv_engine_stats_json(self._h(), err)
        if not text:
            raise Error(5, err.value.decode(errors="replace") or "stats")
        try:
            return json.loads(ctypes.string_at(text).decode())
        finally:
            L.lib().libc_free(text)

    def next_event(self, timeout: float = 0.0) -> Optional[Event]:
        """The next store or pull result, waiting up to timeout; None if none."""
        ev = L.EngineEvent()
        rc = L.lib().p2pkv_engine_next_event(self._h(), timeout, ctypes.byref(ev))
        if rc == -110:                       # ETIMEDOUT
            return None
        check(rc, None, "next_event")
        return Event(_KINDS.get(ev.kind, str(ev.kind)), ev.id, bool(ev.success), ev.landed,
                     ev.missing, ev.reason.decode(errors="replace"))

    def fileno(self) -> int:
        """Readable while an event is waiting (for select/selectors)."""
        return L.lib().p2pkv_engine_fd(self._h())

    def wait_readable(self, timeout: float) -> bool:
        r, _, _ = select.select([self], [], [], timeout)
        return bool(r)

    def block(self, b: int) -> memoryview:
        """Block b of the pool, as a writable memoryview."""
        if not 0 <= b < self.num_blocks:
            raise IndexError(f"block {b}: the pool has {self.num_blocks}")
        return self.pool[b * self.block_len:(b + 1) * self.block_len]

    def blocks(self):
        """The pool as a NumPy uint8 array (num_blocks, block_len), in place."""
        import numpy
        return numpy.frombuffer(self.pool, dtype=numpy.uint8).reshape(self.num_blocks,
                                                                      self.block_len)

    def close(self) -> None:
        """Unmaps the pool (views of it must not be used after) and detaches."""
        if self._handle is not None:
            try:
                self.pool.release()
            except BufferError:
                raise Error(16, "close: views of the pool (NumPy arrays) still exist; "
                                "delete them first") from None
            h = self._handle
            self._handle = None
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
