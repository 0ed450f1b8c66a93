"""Engine.pool and its views never outlive their memory: after close, the
pool and the block views raise ValueError instead of touching unmapped
memory, and a NumPy array of the pool keeps its mapping alive.

The uses after close run in a child process, so a view that did touch
unmapped memory fails the test by its signal instead of ending pytest."""
from __future__ import annotations

import errno

import pytest

import p2pkv


def test_pool_and_block_views_raise_after_close(server):
    engine = p2pkv.Engine(server.local)
    pool, block = engine.pool, engine.block(3)
    block[:4] = b"abcd"
    at = 3 * engine.block_len
    assert bytes(pool[at:at + 4]) == b"abcd"
    engine.close()
    with pytest.raises(ValueError, match="released"):
        pool[0]
    with pytest.raises(ValueError, match="released"):
        block[0] = 1
    with pytest.raises(ValueError, match="released"):
        bytes(block)
    with pytest.raises(p2pkv.Error, match="closed"):
        engine.block(0)
    with pytest.raises(p2pkv.Error, match="closed"):
        engine.blocks()
    engine.close()                          # a second close does nothing


def test_writes_in_the_pool_are_the_servers(server):
    """Python's own mapping is the server's pool: a block written through
    the C library's mapping reads back through block(), and the reverse."""
    with p2pkv.Engine(server.local) as engine:
        [b] = engine.reserve([b"pool-key-1"])
        engine.write(b, b"\x11" * 8)
        assert bytes(engine.block(b)[:8]) == b"\x11" * 8
        engine.blocks()[b, 8:16] = 0x22
        engine.commit([b"pool-key-1"])
        with p2pkv.Client("py-pool", 2, engine.block_len) as c:
            s = c.connect(server.endpoint)
            assert c.get(s, [b"pool-key-1"], [1]) == [True]
            assert bytes(c.block(1)[:16]) == b"\x11" * 8 + b"\x22" * 8


def test_views_used_after_close_do_not_crash(server, python_child):
    script = (
        "import numpy as np, p2pkv\n"
        f"e = p2pkv.Engine({server.local!r})\n"
        "pool, block, arr = e.pool, e.block(1), e.blocks()\n"
        "under = np.frombuffer(e.block(2), dtype=np.uint8)\n"
        "e.close()\n"
        "del e\n"
        "import gc; gc.collect()\n"
        "for use in (lambda: pool[0], lambda: block.tobytes()):\n"
        "    try:\n"
        "        use()\n"
        "        print('no error')\n"
        "    except ValueError:\n"
        "        print('ValueError')\n"
        # NumPy arrays keep the mapping: still memory, whatever became of the engine
        "arr[5, :] = 7\n"
        "under[:] = 9\n"
        "print(int(arr[5].sum()), int(arr[2].sum()))\n")
    out = python_child(script)
    bl = 4096
    assert out.split() == ["ValueError", "ValueError", str(7 * bl), str(9 * bl)], out


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_engine_of_a_restarted_server_is_stale(server_factory, how):
    """A server killed (-9) or stopped, then started again on the same pool
    and socket: the engine opened on the old one raises Stale (ESTALE,
    saying to reopen) for put and commit, and a new Engine publishes."""
    old_server = server_factory()
    engine = p2pkv.Engine(old_server.local)
    [b] = engine.reserve([b"stale-key-1"])
    engine.write(b, b"\x33" * 8)
    if how == "kill":
        old_server.proc.kill()
        old_server.proc.wait()
        old_server.proc.stdout.close()
    else:
        assert old_server.stop() == 0
    new_server = server_factory("--local", old_server.local, "--pool-name", old_server.pool)
    for call in (lambda: engine.commit([b"stale-key-1"]),
                 lambda: engine.put(b"stale-key-2", bytes(engine.block_len))):
        with pytest.raises(p2pkv.Stale, match="the server restarted; reopen the engine") as e:
            call()
        assert e.value.errno == errno.ESTALE
    engine.close()
    # its socket is the old one's (the flag given wins over its default)
    with p2pkv.Engine(old_server.local) as fresh:
        assert fresh.put(b"stale-key-2", b"\x44" * fresh.block_len)
        with p2pkv.Client("py-stale", 2, fresh.block_len) as c:
            s = c.connect(new_server.endpoint)
            assert c.get(s, [b"stale-key-1", b"stale-key-2"], [0, 1]) == [False, True]
            assert bytes(c.block(1)) == b"\x44" * fresh.block_len
