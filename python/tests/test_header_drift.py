"""The ctypes prototypes of p2pkv._lib against the C headers.

ctypes believes whatever _lib.py says: a prototype with an argument
fewer than the C function passes the last one (the error buffer) in the
place of another, and C writes where it should not (p2pkv_engine_pull
had 7 arguments of 8: a 2,048-key pull wrote 1,792 bytes past a 256-byte
buffer).  So every entry of _lib._PROTOTYPES is compared here with its
declaration in lib/p2pkv.h and lib/p2pkv_engine.h, parsed with a regular
expression: the same number of arguments, each of the ctypes type its C
type stands for (C_TYPES below; a C type not there fails, naming it, so
that a new type is mapped on purpose).  Functions of the headers that
_lib.py does not declare are allowed only as listed in NOT_BOUND.
"""
from __future__ import annotations

import ctypes
import re
from ctypes import (POINTER, c_bool, c_char_p, c_double, c_int, c_int64, c_size_t, c_uint32,
                    c_uint64, c_void_p)
from pathlib import Path

from p2pkv import _lib as L

HEADERS = [Path(__file__).resolve().parents[2] / "lib" / name
           for name in ("p2pkv.h", "p2pkv_engine.h")]

# Functions of the headers the Python package does not call, and why; a
# function added to a header fails test_every_header_function_is_bound
# until it is bound in _lib.py or named here.
NOT_BOUND = {
    "p2pkv_client_server_provider": "not shown by the package yet",
    "p2pkv_client_fetch_status": "the package waits with get, not fetch ids' status",
    "p2pkv_client_fd": "the package runs the client's progress thread",
    "p2pkv_client_poll": "the package runs the client's progress thread",
    "p2pkv_engine_stats": "stats_json carries the same and more",
    "p2pkv_engine_poll": "events are read with next_event",
}

# What each C type (const dropped, spaces normalised) is in ctypes.  A
# type with more than one entry accepts either: a char * that C fills
# (err) is passed as a string buffer, and a char * that C returns for
# free() must stay a c_void_p (ctypes would copy a c_char_p and lose it).
C_TYPES = {
    "void": (None,),
    "int": (c_int,),
    "double": (c_double,),
    "bool": (c_bool,),
    "size_t": (c_size_t,),
    "uint32_t": (c_uint32,),
    "uint64_t": (c_uint64,),
    "int64_t": (c_int64,),
    "char *": (c_char_p,),
    "void *": (c_void_p,),
    "uint8_t *": (c_void_p,),
    "bool *": (POINTER(c_bool),),
    "size_t *": (POINTER(c_size_t),),
    "uint32_t *": (POINTER(c_uint32),),
    "uint64_t *": (POINTER(c_uint64),),
    "p2pkv_client_t *": (c_void_p,),
    "p2pkv_engine_t *": (c_void_p,),
    "p2pkv_client_t **": (POINTER(c_void_p),),
    "p2pkv_engine_t **": (POINTER(c_void_p),),
    "p2pkv_key_t *": (POINTER(L.Key),),
    "p2pkv_config_t *": (POINTER(L.Config),),
    "p2pkv_callbacks_t": (L.Callbacks,),
    "p2pkv_description_t *": (POINTER(L.Description),),
    "p2pkv_directory_stats_t *": (POINTER(L.DirectoryStats),),
    "p2pkv_key_result_t *": (POINTER(L.KeyResult),),
    "p2pkv_check_stats_t *": (POINTER(L.CheckStats),),
    "p2pkv_engine_info_t *": (POINTER(L.EngineInfo),),
    "p2pkv_engine_event_t *": (POINTER(L.EngineEvent),),
    "p2pkv_engine_namespace_stats_t *": (POINTER(L.EngineNamespaceStats),),
    "p2pkv_engine_pull_key_t *": (POINTER(L.EnginePullKey),),
    "p2pkv_engine_event_fn *": (L.ON_EVENT,),
    "p2pkv_progress_fn *": (L.PROGRESS,),
    "p2pkv_locate_fn *": (L.ON_LOCATE,),
}
RETURN_TYPES = dict(C_TYPES, **{"char *": (c_void_p,)})

# RET NAME(ARGS); at the top level of a header whose comments are gone:
# a declaration starts after the previous one's ';', a '}' or a
# preprocessor line, so struct members and typedefs of function types
# (whose name is in parentheses) are not taken for functions.
_DECL = re.compile(r"(?:^|(?<=[;}]))\s*(?!typedef\b)([A-Za-z_][\w \t\n*]*?)\b(p2pkv_\w+)\s*"
                   r"\(([^()]*)\)\s*;")


def _strip(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^\s*#[^\n]*", ";", text, flags=re.M)


def _norm(ctype: str) -> str:
    """A C type without const and names' spacing: 'const char *' -> 'char *'."""
    t = re.sub(r"\bconst\b", " ", ctype)
    t = re.sub(r"\s*\*\s*", "*", t.strip())
    t = re.sub(r"\s+", " ", t)
    return re.sub(r"(\w)\*", r"\1 *", t)


def _arg_type(arg: str) -> str:
    """The type of one parameter 'const p2pkv_key_t *keys' (its name dropped)."""
    m = re.match(r"^(.*?[\s*])(\w+)$", arg.strip(), flags=re.S)
    assert m, f"cannot read the parameter {arg!r}"
    return _norm(m.group(1))


def c_prototypes() -> dict[str, tuple[str, list[str]]]:
    found = {}
    for header in HEADERS:
        for m in _DECL.finditer(_strip(header.read_text())):
            ret, name, args = _norm(m.group(1)), m.group(2), m.group(3).strip()
            params = [] if args in ("", "void") else [_arg_type(a) for a in args.split(",")]
            found[name] = (ret, params)
    return found


def _name(t) -> str:
    return "None" if t is None else getattr(t, "__name__", repr(t))


def test_the_parser_reads_the_headers():
    protos = c_prototypes()
    # a regular expression that found nothing would pass everything below
    assert protos["p2pkv_engine_pull"] == ("int", [
        "p2pkv_engine_t *", "char *", "p2pkv_key_t *", "size_t", "uint64_t *", "size_t *",
        "bool *", "char *"])
    assert protos["p2pkv_client_destroy"] == ("void", ["p2pkv_client_t **"])
    assert protos["p2pkv_engine_stats_json"] == ("char *", ["p2pkv_engine_t *", "char *"])
    assert len(protos) >= 40, sorted(protos)


def test_every_prototype_matches_its_header():
    protos = c_prototypes()
    wrong = []
    for name, (res, args) in L._PROTOTYPES.items():
        if name not in protos:
            wrong.append(f"{name}: declared in _lib.py, in neither header")
            continue
        cret, cargs = protos[name]
        if cret not in RETURN_TYPES:
            wrong.append(f"{name}: return type {cret!r} has no ctypes mapping in this test")
        elif res not in RETURN_TYPES[cret]:
            wrong.append(f"{name}: returns {cret}, _lib.py says {_name(res)}")
        if len(args) != len(cargs):
            wrong.append(f"{name}: {len(cargs)} arguments in C, {len(args)} in _lib.py")
            continue
        for i, (py, c) in enumerate(zip(args, cargs)):
            if c not in C_TYPES:
                wrong.append(f"{name}: argument {i + 1} is {c!r}, which has no ctypes "
                             "mapping in this test")
            elif py not in C_TYPES[c]:
                wrong.append(f"{name}: argument {i + 1} is {c} in C, {_name(py)} in _lib.py")
    assert not wrong, "\n".join(wrong)


def test_every_header_function_is_bound():
    protos = c_prototypes()
    unbound = sorted(set(protos) - set(L._PROTOTYPES))
    assert [f for f in unbound if f not in NOT_BOUND] == [], \
        "declared in the headers, not in python/p2pkv/_lib.py (bind it or add it to NOT_BOUND)"
    stale = sorted(f for f in NOT_BOUND if f not in protos or f in L._PROTOTYPES)
    assert stale == [], "NOT_BOUND names functions bound now or in no header"


def test_the_event_struct_has_every_field_of_the_header():
    # p2pkv_engine_next_event writes a whole p2pkv_engine_event_t: a
    # Structure without its last member is a write past Python's buffer
    body = re.search(r"typedef struct \{([^{}]*)\} p2pkv_engine_event_t;",
                     _strip(HEADERS[1].read_text()), flags=re.S).group(1)
    members = re.findall(r"(\w+)\s*(?:\[[^]]*\])?\s*;", body)
    assert [f for f, _ in L.EngineEvent._fields_] == members


def test_the_pull_key_struct_has_every_field_of_the_header():
    # p2pkv_engine_pull_keys writes n whole p2pkv_engine_pull_key_t
    body = re.search(r"typedef struct \{([^{}]*)\} p2pkv_engine_pull_key_t;",
                     _strip(HEADERS[1].read_text()), flags=re.S).group(1)
    members = re.findall(r"(\w+)\s*(?:\[[^]]*\])?\s*;", body)
    assert [f for f, _ in L.EnginePullKey._fields_] == members
    assert ctypes.sizeof(L.EnginePullKey) == 16
