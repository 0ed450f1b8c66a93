"""A library handle shared by Python threads, and the calls into it running now.

ctypes releases the GIL around every call, so one thread's close can
free the handle while another thread's call still runs in C (a get waits
there for up to its timeout): a use after free, which crashed or hung the
process.  Each call holds the handle while it runs (enter, leave); close
takes it from new calls and waits for the running ones.  What it costs:
a lock taken twice per call (design.md gives the measured cost), and a
close that waits for calls running (the owner cuts those short first:
Client.close disconnects).
"""
from __future__ import annotations

import errno
import threading

from .errors import Error


class Handle:
    """handle (a ctypes c_void_p), until taken; closed: the sentence a call
    after that raises, as Error(EBADF)."""

    def __init__(self, handle, closed: str):
        self._handle, self._closed = handle, closed
        self._running = 0
        self._lock = threading.Lock()
        self._idle: threading.Event | None = None     # made by take

    def enter(self):
        """The handle, held until leave; Error(EBADF) once taken."""
        with self._lock:
            h = self._handle
            if h is None:
                raise Error(errno.EBADF, self._closed)
            self._running += 1
            return h

    def leave(self) -> None:
        with self._lock:
            self._running -= 1
            if self._running == 0 and self._idle is not None:
                self._idle.set()

    def take(self):
        """The handle, taken from new calls (None when taken already)."""
        with self._lock:
            h, self._handle = self._handle, None
            if h is not None:
                self._idle = threading.Event()
                if self._running == 0:
                    self._idle.set()
            return h

    def wait_idle(self) -> None:
        """Once taken: returns when no call holds the handle."""
        if self._idle is not None:
            self._idle.wait()

    @property
    def taken(self) -> bool:
        return self._handle is None
