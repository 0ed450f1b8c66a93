"""A library handle shared by Python threads, and the calls into it running now.

ctypes releases the GIL around every call, so one thread's close can
free the handle while another thread's call still runs in C (a get waits
there for up to its timeout): a use after free, which crashed or hung the
process.  Each call holds the handle while it runs; close takes it from
new calls and waits for the running ones.  What it costs: a lock taken
twice per call (about a microsecond), and a close that waits for calls
running (the owner cuts those short first: Client.close disconnects).
"""
from __future__ import annotations

import errno
import threading
from contextlib import contextmanager
from typing import Iterator

from .errors import Error


class Handle:
    """handle (a ctypes c_void_p), until taken; closed: the sentence a call
    after that raises, as Error(EBADF)."""

    def __init__(self, handle, closed: str):
        self._handle, self._closed = handle, closed
        self._running = 0
        self._cond = threading.Condition()

    @contextmanager
    def use(self) -> Iterator:
        """The handle, held until the block ends; Error(EBADF) once taken."""
        with self._cond:
            if self._handle is None:
                raise Error(errno.EBADF, self._closed)
            self._running += 1
            h = self._handle
        try:
            yield h
        finally:
            with self._cond:
                self._running -= 1
                if self._running == 0:
                    self._cond.notify_all()

    def take(self):
        """The handle, taken from new calls (None when taken already)."""
        with self._cond:
            h, self._handle = self._handle, None
            return h

    def wait_idle(self) -> None:
        """Returns once no call holds the handle."""
        with self._cond:
            self._cond.wait_for(lambda: self._running == 0)

    @property
    def taken(self) -> bool:
        return self._handle is None
