"""The shared library and its C declarations (p2pkv.h, p2pkv_engine.h).

Loaded once, on first use: $P2PKV_LIBRARY when set (a build tree's
lib/.libs/libp2pkv.so.0, as `make check` does), else the library installed
beside this package (the libdir recorded by `make install`), else
libp2pkv.so.0 by the dynamic loader's search.  ctypes releases the GIL
around every call, so a fetch or a get runs in C while other Python
threads go on.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_int,
                    c_int32, c_int64, c_size_t, c_uint, c_uint8, c_uint16, c_uint32, c_uint64,
                    c_void_p)

ERRLEN = 256


class Key(Structure):
    _fields_ = [("bytes", POINTER(c_uint8)), ("len", c_size_t)]


ON_LOOKUP = CFUNCTYPE(None, c_void_p, c_int, c_char_p, c_uint64, POINTER(Key), POINTER(c_bool),
                      c_size_t)
ON_FETCH = CFUNCTYPE(None, c_void_p, c_int, c_uint64, c_int, c_char_p)
ON_SERVER = CFUNCTYPE(None, c_void_p, c_int, c_int, c_char_p)


class Callbacks(Structure):
    _fields_ = [("arg", c_void_p), ("on_lookup", ON_LOOKUP), ("on_fetch", ON_FETCH),
                ("on_server", ON_SERVER)]


class Config(Structure):
    _fields_ = [("peer_id", c_char_p), ("fingerprint", c_char_p), ("hash_seed", c_char_p),
                ("provider", c_char_p), ("node", c_char_p),
                ("load_timeout", c_double), ("abort_ack_timeout", c_double),
                ("keepalive_interval", c_double), ("silence_timeout", c_double),
                ("connect_retry", c_double), ("stall_timeout", c_double),
                ("no_reconnect", c_bool), ("progress_thread", c_bool),
                # CURVE, all three or none (p2pkv.h): Z85 text, 40 characters
                ("curve_public", c_char_p), ("curve_secret", c_char_p),
                ("curve_server", c_char_p),
                # the cluster directory (issue 14)
                ("directory", c_char_p),
                # seconds the driving thread looks for an answer before it
                # sleeps (0: 200 us, negative: never)
                ("answer_spin", c_double),
                # the end-to-end check (issue 34): off with no_verify; a
                # server's blocks failing max_corrupt in a row (0: 8) end it
                ("no_verify", c_bool), ("max_corrupt", c_uint)]


# p2pkv_key_result_t: one key's outcome of p2pkv_client_get_results
KEY_LANDED, KEY_MISSING, KEY_CORRUPT, KEY_FAILED = 0, 1, 2, 3
KEY_STATUS = {KEY_LANDED: "landed", KEY_MISSING: "missing", KEY_CORRUPT: "corrupt",
              KEY_FAILED: "failed"}
# p2pkv_miss_reason_t (p2pkv.h): why a key is missing, by the library's
# names (p2pkv_miss_reason_name); 0, a server without the reasons
# capability, is None
MISS_UNKNOWN = 0


def miss_reason(reason: int) -> "str | None":
    if reason == MISS_UNKNOWN:
        return None
    return ctypes.string_at(lib().p2pkv_miss_reason_name(reason)).decode()


class KeyResult(Structure):
    _fields_ = [("status", c_uint8), ("reason", c_uint8), ("verified", c_bool),
                ("reserved", c_uint8), ("holder", c_int32), ("checksum", c_uint64)]


class CheckStats(Structure):
    _fields_ = [("checked", c_uint64), ("corrupt", c_uint64), ("unchecked", c_uint64),
                ("hostile", c_uint64)]


class Holder(Structure):
    _fields_ = [("peer_id", c_char_p), ("endpoint", c_char_p), ("host", c_char_p),
                ("block_len", c_uint64), ("provider", c_char_p), ("host_id", c_char_p)]


class DirectoryStats(Structure):
    _fields_ = [("up", c_bool), ("locates", c_uint64), ("round_trips", c_uint64),
                ("junk", c_uint64), ("stale", c_uint64), ("corrected", c_uint64),
                ("failovers", c_uint64)]


ON_LOCATE = CFUNCTYPE(None, c_void_p, c_size_t, POINTER(Holder), c_size_t)
ANY_SERVER = -1


class Description(Structure):
    _fields_ = [("peer_id", c_char * 256), ("block_len", c_uint64),
                ("fingerprint", c_char * 256), ("hash_seed", c_char * 256),
                ("provider", c_char * 64), ("providers", (c_char * 64) * 8),
                ("nproviders", c_size_t), ("host", c_char * 128)]


class EngineInfo(Structure):
    _fields_ = [("peer_id", c_char * 256), ("endpoint", c_char * 256),
                ("pool_name", c_char * 256), ("num_blocks", c_uint64), ("block_len", c_uint64)]


class EngineEvent(Structure):
    # every field of p2pkv_engine_event_t: next_event writes the whole
    # struct, so a shorter one here is a write past Python's buffer
    _fields_ = [("kind", c_int), ("id", c_uint64), ("success", c_bool), ("landed", c_size_t),
                ("missing", c_size_t), ("reason", c_char * ERRLEN),
                ("missing_keys", POINTER(Key))]


class EnginePullKey(Structure):
    _fields_ = [("status", c_uint8), ("reason", c_uint8), ("reserved", c_uint16),
                ("source", c_char_p)]


class EngineNamespaceStats(Structure):
    _fields_ = [("ready", c_uint64), ("pinned", c_uint64), ("lookups", c_uint64),
                ("hits", c_uint64), ("pending", c_uint64), ("misses", c_uint64)]


PROGRESS = CFUNCTYPE(None, c_void_p, c_size_t, c_size_t)
ON_EVENT = CFUNCTYPE(None, c_void_p, POINTER(EngineEvent))

_P = c_void_p
_ERR = c_char_p       # a create_string_buffer(ERRLEN) passed in
_KEYS = POINTER(Key)

# Every function the package calls, as lib/p2pkv.h and lib/p2pkv_engine.h
# declare it: python/tests/test_header_drift.py compares each entry with
# the headers (a missing argument once passed the error buffer as another
# argument), and lists the headers' functions not declared here.
_PROTOTYPES = {
    "p2pkv_describe": (c_int, [c_char_p, c_double, POINTER(Description), _ERR]),
    "p2pkv_describe_curve": (c_int, [c_char_p, c_double, POINTER(Config), POINTER(Description),
                                     _ERR]),
    "p2pkv_client_connect_curve": (c_int, [_P, c_char_p, c_char_p, c_double, _ERR]),
    "p2pkv_client_new": (_P, [POINTER(Config), c_void_p, c_uint64, c_uint64, Callbacks, _ERR]),
    "p2pkv_client_destroy": (None, [POINTER(_P)]),
    "p2pkv_client_pool": (c_void_p, [_P]),
    "p2pkv_client_connect": (c_int, [_P, c_char_p, c_double, _ERR]),
    "p2pkv_client_disconnect": (c_int, [_P, c_int]),
    "p2pkv_client_server_state": (c_int, [_P, c_int, _ERR]),
    "p2pkv_client_server_endpoint": (c_int, [_P, c_int, c_char_p, c_size_t]),
    # a static string: read in place (a char * return is a c_void_p here)
    "p2pkv_miss_reason_name": (c_void_p, [c_int]),
    "p2pkv_client_lookup": (c_int, [_P, c_int, c_char_p, _KEYS, c_size_t]),
    "p2pkv_client_fetch": (c_int, [_P, c_int, c_char_p, _KEYS, POINTER(c_uint32), c_size_t,
                                   c_uint64, c_double, POINTER(c_uint64)]),
    "p2pkv_client_get": (c_int, [_P, c_int, c_char_p, _KEYS, POINTER(c_uint32), c_size_t, c_bool,
                                 c_double, POINTER(c_bool), PROGRESS, c_void_p, _ERR]),
    "p2pkv_client_get_results": (c_int, [_P, c_int, c_char_p, _KEYS, POINTER(c_uint32), c_size_t,
                                         c_bool, c_double, POINTER(KeyResult), PROGRESS,
                                         c_void_p, _ERR]),
    "p2pkv_client_get_async": (c_int, [_P, c_int, c_char_p, _KEYS, POINTER(c_uint32), c_size_t,
                                       c_double, POINTER(KeyResult), POINTER(c_uint64)]),
    "p2pkv_client_checks": (None, [_P, POINTER(CheckStats)]),
    "p2pkv_client_cancel": (c_int, [_P, c_uint64]),
    "p2pkv_client_finish": (c_int, [_P, c_int, c_char_p]),
    "p2pkv_client_open_fetches": (c_size_t, [_P]),
    "p2pkv_client_locate": (c_int, [_P, _KEYS, c_size_t, ON_LOCATE, c_void_p, _ERR]),
    "p2pkv_client_directory_stats": (c_int, [_P, POINTER(DirectoryStats)]),
    "p2pkv_engine_open": (_P, [c_char_p, c_double, ON_EVENT, c_void_p, _ERR]),
    "p2pkv_engine_close": (None, [POINTER(_P)]),
    "p2pkv_engine_info": (POINTER(EngineInfo), [_P]),
    "p2pkv_engine_pool": (c_void_p, [_P]),
    "p2pkv_engine_set_timeout": (None, [_P, c_double]),
    "p2pkv_engine_set_namespace": (c_int, [_P, c_char_p, _ERR]),
    "p2pkv_engine_reserve": (c_int, [_P, _KEYS, c_size_t, POINTER(c_uint32), _ERR]),
    "p2pkv_engine_write": (c_int, [_P, c_uint32, c_size_t, c_void_p, c_size_t, _ERR]),
    "p2pkv_engine_commit": (c_int, [_P, _KEYS, c_size_t, _ERR]),
    "p2pkv_engine_put": (c_int, [_P, _KEYS, c_void_p, c_size_t, _ERR]),
    "p2pkv_engine_drop": (c_int, [_P, _KEYS, c_size_t, _ERR]),
    "p2pkv_engine_store": (c_int, [_P, c_char_p, c_char_p, _KEYS, c_size_t, c_int64,
                                   POINTER(c_uint64), _ERR]),
    "p2pkv_engine_finish": (c_int, [_P, c_char_p, c_char_p, _ERR]),
    "p2pkv_engine_pull": (c_int, [_P, c_char_p, _KEYS, c_size_t, POINTER(c_uint64),
                                  POINTER(c_size_t), POINTER(c_bool), _ERR]),
    "p2pkv_engine_stats_json": (c_void_p, [_P, _ERR]),
    "p2pkv_engine_stats_namespace": (c_int, [_P, c_char_p, POINTER(EngineNamespaceStats),
                                             _ERR]),
    "p2pkv_engine_fd": (c_int, [_P]),
    "p2pkv_engine_next_event": (c_int, [_P, c_double, POINTER(EngineEvent)]),
    "p2pkv_engine_pull_keys": (c_int, [_P, c_uint64, _KEYS, c_size_t, POINTER(EnginePullKey),
                                       _ERR]),
}

_lib = None


class _SigAction(Structure):
    """glibc's struct sigaction on Linux (handler, mask, flags, restorer)."""
    _fields_ = [("handler", c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", c_int),
                ("restorer", c_void_p)]


# What a library that libfabric pulls in (libinfinipath) takes over at load
# (it would end the process with exit(1) on Ctrl-C: no KeyboardInterrupt).
_GUARDED = (2, 15, 11, 7, 4, 6, 3, 1)     # INT TERM SEGV BUS ILL ABRT QUIT HUP


def _load_keeping_signals(path: str) -> ctypes.CDLL:
    """Loads path, and puts back every signal handler the process had
    before (Python's own SIGINT, faulthandler's), whatever the loaded
    libraries' constructors did to them."""
    libc = ctypes.CDLL(None, use_errno=True)
    saved = []
    for sig in _GUARDED:
        sa = _SigAction()
        if libc.sigaction(sig, None, ctypes.byref(sa)) == 0:
            saved.append((sig, sa))
    loaded = ctypes.CDLL(path)
    for sig, sa in saved:
        libc.sigaction(sig, ctypes.byref(sa), None)
    return loaded


def _candidates() -> list[str]:
    found = []
    if os.environ.get("P2PKV_LIBRARY"):
        return [os.environ["P2PKV_LIBRARY"]]
    try:
        from . import _install
        found.append(os.path.join(_install.LIBDIR, "libp2pkv.so.0"))
    except ImportError:
        pass
    found.append("libp2pkv.so.0")
    return found


def lib() -> ctypes.CDLL:
    """The loaded library, with every function's prototype declared."""
    global _lib
    if _lib is not None:
        return _lib
    errors = []
    for path in _candidates():
        try:
            loaded = _load_keeping_signals(path)
            break
        except OSError as e:
            errors.append(str(e))
    else:
        raise ImportError("p2pkv: cannot load the shared library libp2pkv.so.0 (" +
                          "; ".join(errors) + "): install it (make install) or point "
                          "$P2PKV_LIBRARY at it")
    for name, (res, args) in _PROTOTYPES.items():
        fn = getattr(loaded, name)
        fn.restype = res
        fn.argtypes = args
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [c_void_p]
    loaded.libc_free = libc.free
    _lib = loaded
    return _lib
