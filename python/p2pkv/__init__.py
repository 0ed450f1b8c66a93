"""p2pkv: share LLM KV-cache blocks between machines.

    Client  a consumer: look up keys on a server, have the hits written
            straight into your pool (a NumPy array, say), cancel, finish.
    Engine  the engine beside a p2pkv-server: publish blocks into its
            pool in place, store for a consumer, pull from another server.

Pure Python over the shared library libp2pkv.so.0 (ctypes); block bytes
never cross Python.  See p2pkv(3) for the C API underneath.
"""
from .client import Client, Fetch, Get, Lookup, describe
from .engine import Engine, Event
from .errors import ConnectionRefused, Error, FetchError, Refused, Stale, Timeout

__all__ = ["Client", "Fetch", "Get", "Lookup", "describe", "Engine", "Event", "Error",
           "FetchError",
           "Refused", "ConnectionRefused", "Stale", "Timeout"]
__version__ = "0.1.0"
