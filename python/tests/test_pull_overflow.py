"""A pull of 2,048 keys through the Python package (issue 34, point 5).

_lib.py once declared 7 arguments for p2pkv_engine_pull, which has 8: the
error buffer went in as `present`, and a 2,048-key pull wrote 2,048 bools
into 256 bytes.  Every error buffer the package makes during these pulls
is given 4 KiB of guard bytes after its P2PKV_ERRLEN, and the guard must
come back untouched: a write past the buffer fails the test by its bytes,
not by whether the heap happened to notice."""
from __future__ import annotations

import ctypes

import numpy as np

import p2pkv
from p2pkv import _lib as L
from p2pkv._buffers import Keys
from p2pkv.testing import publish_in_place

N = 2048
GUARD = 4096


def test_a_pull_of_2048_keys_writes_nothing_past_its_buffers(server_factory, monkeypatch):
    a, b = server_factory(blocks=N + 64), server_factory(blocks=N + 64)
    rng = np.random.default_rng(34)
    with p2pkv.Engine(a.local) as ea, p2pkv.Engine(b.local) as eb:
        datas = [rng.integers(0, 256, ea.block_len, dtype=np.uint8).tobytes()
                 for _ in range(N)]
        keys = publish_in_place(ea, datas)
        publish_in_place(eb, datas[:N // 2])             # b holds the first half already

        guarded = []
        real = ctypes.create_string_buffer

        def with_guard(init, size=None):
            if init != L.ERRLEN or size is not None:
                return real(init, size) if size is not None else real(init)
            buf = real(L.ERRLEN + GUARD)
            ctypes.memset(ctypes.addressof(buf) + L.ERRLEN, 0x5A, GUARD)
            guarded.append(buf)
            return buf
        monkeypatch.setattr(ctypes, "create_string_buffer", with_guard)

        # the package's own call: present not asked for
        pull, fetching = eb.pull(a.endpoint, keys)
        assert fetching == N // 2
        ev = eb.next_event(60)
        assert ev.kind == "pull" and ev.id == pull and ev.success and ev.missing == 0, ev
        monkeypatch.undo()
        assert guarded, "the package made no error buffer: the guard saw nothing"
        for buf in guarded:
            assert buf.raw[L.ERRLEN:] == b"\x5a" * GUARD, "written past P2PKV_ERRLEN"

        # the C function as _lib.py declares it, present asked for: every
        # key is in b's pool now
        present = (ctypes.c_bool * N)()
        pid, fetching2 = ctypes.c_uint64(), ctypes.c_size_t()
        ks = Keys(keys)
        err = ctypes.create_string_buffer(L.ERRLEN)
        rc = eb._c("p2pkv_engine_pull", a.endpoint.encode(), ks.array, ks.n,
                   ctypes.byref(pid), ctypes.byref(fetching2), present, err)
        assert rc == 0, err.value
        assert fetching2.value == 0 and all(present)
        assert eb.next_event(60).id == pid.value     # the event follows even for 0


        # and what landed is what a published
        with p2pkv.Client("py-pull-2048", N, eb.block_len) as c:
            s = c.connect(b.endpoint)
            assert c.get(s, keys, list(range(N))) == [True] * N
            assert all(c.block(i).tobytes() == datas[i] for i in range(N))
