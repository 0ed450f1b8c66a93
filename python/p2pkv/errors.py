"""Exceptions: every failure carries the errno and the library's sentence."""
from __future__ import annotations

import errno as _errno
import os


class Error(OSError):
    """A p2pkv call failed: .errno (positive) and .reason (the library's
    sentence naming what was wrong)."""

    def __init__(self, err: int, reason: str = ""):
        self.reason = reason or os.strerror(err)
        super().__init__(err, self.reason)

    def __str__(self) -> str:
        return f"[{_errno.errorcode.get(self.errno, self.errno)}] {self.reason}"


class Timeout(Error, TimeoutError):
    """No answer within the timeout."""


class Refused(Error):
    """The server refused us as incompatible (block length, fingerprint,
    hash seed, wire version, provider): reason names the field.  Also
    (errno EPROTO as well) an endpoint that is not a p2pkv/ZeroMQ port:
    reason says what it sent instead of a ZeroMQ greeting."""


class ConnectionRefused(Error, ConnectionRefusedError):
    """Nothing listens at the endpoint (errno ECONNREFUSED): said at the
    first connection that fails, not at the end of the timeout.  Other
    failures of a connect are Errors of their own errno: EINVAL (the
    endpoint names no transport), ENOENT (its host name does not
    resolve), EACCES (CURVE)."""


class Stale(Error):
    """The engine's server restarted since the engine opened (errno
    ESTALE): the pool it mapped is the old server's, so the new one refuses
    its calls and nothing it wrote is published.  Close it and open a new
    Engine."""


class FetchError(Error):
    """A fetch ended FAILED or ABORTED: .status says which, .reason why.
    Its destination blocks may be reused (the library waited for the
    fence: nothing of it can land any more)."""

    def __init__(self, status: str, reason: str):
        self.status = status
        super().__init__(_errno.EIO if status == "failed" else _errno.ECANCELED, reason)


def check(rc: int, err=None, what: str = "") -> int:
    """rc when >= 0; else raises the Error its negative errno names."""
    if rc >= 0:
        return rc
    reason = err.value.decode(errors="replace") if err is not None and err.value else ""
    if not reason:
        reason = os.strerror(-rc)
    if what:
        reason = f"{what}: {reason}"
    cls = {_errno.ETIMEDOUT: Timeout, _errno.EPROTO: Refused, _errno.ESTALE: Stale,
           _errno.ECONNREFUSED: ConnectionRefused}.get(-rc, Error)
    raise cls(-rc, reason)
