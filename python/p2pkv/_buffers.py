"""Keys and buffers between Python and C, without copying block bytes."""
from __future__ import annotations

import ctypes
from typing import Iterable, Sequence, Union

from ._lib import Key

KeyLike = Union[bytes, bytearray, memoryview]


class Keys:
    """keys as one contiguous buffer and a p2pkv_key_t array into it; the
    buffer lives as long as this object (keep it for the call)."""

    def __init__(self, keys: Iterable[KeyLike]):
        self.items = [bytes(k) if not isinstance(k, bytes) else k for k in keys]
        for i, k in enumerate(self.items):
            if not isinstance(k, bytes):
                raise TypeError(f"keys[{i}]: expected bytes, got {type(k).__name__}")
        self.n = len(self.items)
        joined = b"".join(self.items)
        self._buf = ctypes.create_string_buffer(joined, len(joined) or 1)
        self.array = (Key * max(self.n, 1))()
        base = ctypes.addressof(self._buf)
        at = 0
        for i, k in enumerate(self.items):
            self.array[i].bytes = ctypes.cast(base + at, ctypes.POINTER(ctypes.c_uint8))
            self.array[i].len = len(k)
            at += len(k)


def c_text(value: str, what: str) -> bytes:
    """value as the UTF-8 a C string carries; ValueError for a NUL in it,
    where C would end the text (another request, consumer or endpoint
    than the one named)."""
    if "\0" in value:
        raise ValueError(f"{what}: {value!r} has a NUL character, where C would end it")
    return value.encode()


def uint32s(values: Sequence[int], what: str) -> ctypes.Array:
    """values as a uint32_t array, each checked."""
    arr = (ctypes.c_uint32 * max(len(values), 1))()
    for i, v in enumerate(values):
        v = int(v)
        if not 0 <= v < 2**32:
            raise ValueError(f"{what}[{i}]: {v} is not a block index")
        arr[i] = v
    return arr


def writable_address(buf, nbytes: int) -> tuple[int, object]:
    """The address of a writable, C-contiguous buffer of at least nbytes
    (bytearray, NumPy array, mmap, memoryview), and an object that keeps
    it exported while held."""
    mv = memoryview(buf)
    if mv.readonly:
        raise ValueError("pool: the buffer is read-only")
    if not mv.c_contiguous:
        raise ValueError("pool: the buffer is not C-contiguous")
    if mv.nbytes < nbytes:
        raise ValueError(f"pool: {mv.nbytes} bytes, need num_blocks * block_len = {nbytes}")
    holder = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    return ctypes.addressof(holder), (mv, holder)

