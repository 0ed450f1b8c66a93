"""The Python package against real daemons: an engine publishes, a
consumer fetches into NumPy, cancels, finishes; errors carry reasons."""
from __future__ import annotations

import errno
import hashlib
import os
import select
import subprocess
import sys
import time

import numpy as np
import pytest

import p2pkv
from p2pkv.testing import publish_in_place


def key_of(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def publish(engine: p2pkv.Engine, n: int, seed: int = 0) -> tuple[list, list]:
    """n blocks of distinct bytes, written in place and committed."""
    rng = np.random.default_rng(seed)
    datas = [rng.integers(0, 256, engine.block_len, dtype=np.uint8).tobytes() for _ in range(n)]
    return publish_in_place(engine, datas), datas


def test_engine_publishes_and_numpy_consumer_fetches(server):
    with p2pkv.Engine(server.local) as engine:
        assert engine.block_len == 4096 and engine.num_blocks == 512
        assert engine.endpoint == server.endpoint
        keys, datas = publish(engine, 16)
        pool = np.zeros((64, engine.block_len), dtype=np.uint8)
        with p2pkv.Client("py-consumer", 64, engine.block_len, pool=pool) as c:
            s = c.connect(server.endpoint)
            landed = c.get(s, keys, list(range(16)))
            assert landed == [True] * 16
            for i, d in enumerate(datas):
                assert pool[i].tobytes() == d
            st = engine.stats()
            assert st["pool"]["ready"] == 16


def test_get_results_say_corrupt_for_a_block_changed_at_rest(server):
    """The end-to-end check through the package: a block changed in the
    server's pool after its commit is "corrupt" (never "landed"), the
    others land verified; verify=False lands it unchecked."""
    import mmap as _mmap
    with p2pkv.Engine(server.local) as engine:
        keys, datas = publish(engine, 4)
        with p2pkv.Client("py-check", 8, engine.block_len) as c:
            s = c.connect(server.endpoint)
            res = c.get_results(s, keys, [0, 1, 2, 3])
            assert [r["status"] for r in res] == ["landed"] * 4
            assert all(r["verified"] and r["holder"] == s for r in res)
            with open(f"/dev/shm{server.pool}", "r+b") as f, _mmap.mmap(f.fileno(), 0) as m:
                at = m.find(datas[2])
                assert at >= 0 and at % engine.block_len == 0
                m[at + 5] ^= 0x10
            res = c.get_results(s, keys, [0, 1, 2, 3], kv="again")
            assert [r["status"] for r in res] == ["landed", "landed", "corrupt", "landed"]
            assert c.checks()["corrupt"] == 1
            assert c.get(s, keys, [0, 1, 2, 3], kv="bools") == [True, True, False, True]
        with p2pkv.Client("py-nocheck", 8, engine.block_len, verify=False) as c:
            s = c.connect(server.endpoint)
            res = c.get_results(s, keys, [0, 1, 2, 3])
            assert [r["status"] for r in res] == ["landed"] * 4
            assert not any(r["verified"] for r in res)
            assert c.checks()["unchecked"] == 4


def test_get_results_say_why_a_key_missed(server):
    """Miss reasons through the package (issue 36, point 4): a key never
    published is "absent", one still being written when the lookup's
    deadline (5 s) passed "pending"; a hit has no reason."""
    with p2pkv.Engine(server.local) as engine:
        keys, _ = publish(engine, 1, seed=7)
        writing = key_of(b"still being written")
        engine.reserve([writing])
        with p2pkv.Client("py-why", 4, engine.block_len) as c:
            s = c.connect(server.endpoint)
            res = c.get_results(s, [keys[0], key_of(b"never"), writing], [0, 1, 2],
                                fetch=False, timeout=60)
            assert [r["status"] for r in res] == ["landed", "missing", "missing"]
            assert [r["reason"] for r in res] == [None, "absent", "pending"]


def test_lookup_then_fetch_under_its_round(server):
    with p2pkv.Engine(server.local) as engine:
        keys, datas = publish(engine, 4)
        absent = key_of(b"not there")
        with p2pkv.Client("py-c2", 8, engine.block_len) as c:
            s = c.connect(server.endpoint)
            look = c.lookup(s, "req-1", keys + [absent])
            assert look.hits == [True] * 4 + [False]
            assert look.round > 0
            f = c.fetch(s, "req-1", look.hit_keys(), [3, 2, 1, 0], round=look.round)
            f.wait(10)
            assert f.status == "landed"
            blocks = c.blocks()
            for i, d in enumerate(datas):
                assert blocks[3 - i].tobytes() == d
            del blocks
            c.finish(s, "req-1")
            assert c.open_fetches == 0


def test_cancel_ends_once_aborted_and_ids_are_checked(server):
    with p2pkv.Engine(server.local) as engine:
        keys, _ = publish(engine, 8)
        with p2pkv.Client("py-c3", 8, engine.block_len) as c:
            s = c.connect(server.endpoint)
            look = c.lookup(s, "req-2", keys)
            done = c.fetch(s, "req-2", keys, list(range(8)), round=look.round)
            done.wait(10)
            assert done.cancel() is False          # ended already: no effect
            with pytest.raises(p2pkv.Error) as e:
                c.cancel(10**9)
            assert e.value.errno == errno.ENOENT
            # a fetch in a fresh round (no lookup) waits for the engine's
            # store of its keys (prefill/decode): nothing is written yet
            later = key_of(b"pending")
            f = c.fetch(s, "req-3", [later], [0], deadline=30)
            assert f.cancel() is True
            assert f.cancel() is False             # twice: under way
            with pytest.raises(p2pkv.FetchError) as fe:
                f.wait(10)
            assert fe.value.status == "aborted" and f.status == "aborted"
            assert c.open_fetches == 0


def test_get_async_several_in_flight_and_a_cancel(server):
    """Client.get_async: one message per get (the server counts gets),
    several in flight, each with its results once ended; one parked on a
    key still being written is cancelled: aborted, every key failed."""
    with p2pkv.Engine(server.local) as engine:
        keys, datas = publish(engine, 6, seed=3)
        absent = key_of(b"async never")
        writing = key_of(b"async being written")
        engine.reserve([writing])
        before = engine.stats()["metrics"]["p2pkv_gets_total"]["total"]
        with p2pkv.Client("py-async", 16, engine.block_len) as c:
            s = c.connect(server.endpoint)
            gets = [c.get_async(s, keys[0:3] + [absent], [0, 1, 2, 3], kv="ga"),
                    c.get_async(s, keys[3:6], [4, 5, 6], kv="ga"),
                    c.get_async(s, [keys[5], keys[0]], [7, 8], kv="gb")]
            parked = c.get_async(s, [keys[1], writing], [9, 10], kv="gc", deadline=60)
            with pytest.raises(p2pkv.Error) as e:
                parked.results()
            assert e.value.errno == errno.EINPROGRESS
            assert parked.cancel() is True
            res = [g.wait(30) for g in gets]
            assert [r["status"] for r in res[0]] == ["landed"] * 3 + ["missing"]
            assert res[0][3]["reason"] == "absent"
            assert all(r["status"] == "landed" and r["verified"] and r["holder"] == s
                       and r["source"] == server.endpoint for r in res[1] + res[2])
            blocks = c.blocks()
            for b, d in [(0, 0), (1, 1), (2, 2), (4, 3), (5, 4), (6, 5), (7, 5), (8, 0)]:
                assert blocks[b].tobytes() == datas[d]
            del blocks
            with pytest.raises(p2pkv.FetchError) as fe:
                parked.wait(30)
            assert fe.value.status == "aborted"
            assert [r["status"] for r in parked.results()] == ["failed", "failed"]
            for kv in ("ga", "gb", "gc"):
                c.finish(s, kv)
            assert c.open_fetches == 0
        # one get message each, and the published counts follow the answers
        deadline = time.monotonic() + 60
        while engine.stats()["metrics"]["p2pkv_gets_total"]["total"] - before < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert engine.stats()["metrics"]["p2pkv_gets_total"]["total"] - before == 4


def test_get_async_from_a_server_without_get(server_factory):
    """Client.get_async against a server run with --gets off: the library
    takes the two steps (no get message reaches the server, one lookup
    per get), with the results a get gives; one parked on a key still
    being written is cancelled while it looks up: aborted, every key
    failed, nothing pinned after."""
    server = server_factory("--gets", "off", "--lookup-timeout", "120",
                            "--store-timeout", "120")
    with p2pkv.Engine(server.local) as engine:
        keys, datas = publish(engine, 3, seed=5)
        absent = key_of(b"two steps never")
        writing = key_of(b"two steps being written")
        engine.reserve([writing])
        m = engine.stats()["metrics"]
        gets0, lookups0 = m["p2pkv_gets_total"]["total"], m["p2pkv_lookups_total"]["total"]
        with p2pkv.Client("py-steps", 16, engine.block_len) as c:
            s = c.connect(server.endpoint)
            g = c.get_async(s, [keys[0], absent, keys[2]], [0, 1, 2], kv="st")
            parked = c.get_async(s, [keys[1], writing], [3, 4], kv="st-held")
            res = g.wait(30)
            assert [r["status"] for r in res] == ["landed", "missing", "landed"]
            assert res[1]["reason"] == "absent"
            assert all(r["verified"] and r["holder"] == s for r in (res[0], res[2]))
            blocks = c.blocks()
            assert blocks[0].tobytes() == datas[0] and blocks[2].tobytes() == datas[2]
            del blocks
            deadline = time.monotonic() + 60
            while engine.stats()["pool"]["pinned"] == 0:     # parked, keys[1] pinned
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert parked.cancel() is True
            with pytest.raises(p2pkv.FetchError) as fe:
                parked.wait(30)
            assert fe.value.status == "aborted"
            assert [r["status"] for r in parked.results()] == ["failed", "failed"]
            assert c.open_fetches == 0
            while engine.stats()["pool"]["pinned"] != 0:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            c.finish(s, "st")
        # the published counts follow the answers
        deadline = time.monotonic() + 60
        while engine.stats()["metrics"]["p2pkv_lookups_total"]["total"] - lookups0 < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        m = engine.stats()["metrics"]
        assert m["p2pkv_gets_total"]["total"] == gets0
        assert m["p2pkv_lookups_total"]["total"] - lookups0 == 2


def test_errors_carry_the_reason(server):
    with pytest.raises(p2pkv.Error) as e:
        p2pkv.Engine("ipc:///tmp/p2pkv-py-nobody.sock", timeout=0.5)
    assert e.value.reason
    with p2pkv.Engine(server.local) as engine:
        with pytest.raises(p2pkv.Error) as e:
            engine.reserve([b""])
        assert e.value.errno == errno.EINVAL and "key" in e.value.reason
        with pytest.raises(p2pkv.Error) as e:
            engine.commit([key_of(b"never reserved")])
        assert "reserve" in e.value.reason or "key" in e.value.reason
        with pytest.raises(p2pkv.Error) as e:
            engine.write(engine.num_blocks + 1, b"x")
        assert "block" in e.value.reason
    # a consumer whose block length differs is refused, naming it
    with p2pkv.Client("py-c4", 4, 8192) as c:
        with pytest.raises(p2pkv.Refused) as e:
            c.connect(server.endpoint, timeout=5)
        assert "block" in e.value.reason
    # each failure to reach a server is its own errno, said at once (a
    # 60 s timeout: a refusal not seen would fail the suite's bound)
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        free = f"tcp://127.0.0.1:{sk.getsockname()[1]}"
    with p2pkv.Client("py-c8", 4, 4096) as c:
        with pytest.raises(p2pkv.ConnectionRefused) as e:
            c.connect(free, timeout=60)
        assert e.value.errno == errno.ECONNREFUSED and free in e.value.reason
        with pytest.raises(p2pkv.Error) as e:
            c.connect("127.0.0.1:5710", timeout=60)
        assert e.value.errno == errno.EINVAL and "no transport" in e.value.reason
        with pytest.raises(p2pkv.Error) as e:
            c.connect("tcp://name.invalid:5710", timeout=60)
        assert e.value.errno == errno.ENOENT and "does not resolve" in e.value.reason
    with pytest.raises(ValueError):
        p2pkv.Client("py-c5", 4, 4096, pool=bytearray(100))
    # answer_spin reaches the library through the struct, in its place:
    # more than a second is refused naming it; with a negative one (never
    # spin) a lookup is answered as with the default
    with pytest.raises(p2pkv.Error) as e:
        p2pkv.Client("py-c6", 4, 4096, answer_spin=1.5)
    assert "answer_spin" in e.value.reason
    with p2pkv.Client("py-c7", 4, 4096, answer_spin=-1) as c:
        s = c.connect(server.endpoint, timeout=5)
        assert c.get(s, [key_of(b"nobody stored this")], [0], fetch=False) == [False]


def test_engine_store_for_a_consumer_and_its_event(server):
    with p2pkv.Engine(server.local) as engine:
        keys, datas = publish(engine, 2)
        with p2pkv.Client("py-decode", 4, engine.block_len) as c:
            s = c.connect(server.endpoint)
            job = engine.store("py-decode", "pd-1", keys)
            f = c.fetch(s, "pd-1", keys, [0, 1])
            f.wait(10)
            assert select.select([engine], [], [], 10)[0] == [engine]
            ev = engine.next_event(5)
            assert ev is not None and ev.kind == "store" and ev.id == job and ev.success
            assert c.block(0).tobytes() == datas[0] and c.block(1).tobytes() == datas[1]
            engine.finish("py-decode", "pd-1")
            c.finish(s, "pd-1")


def test_pull_between_two_servers(server_factory):
    a, b = server_factory(), server_factory()
    with p2pkv.Engine(a.local) as ea, p2pkv.Engine(b.local) as eb:
        keys, datas = publish(ea, 3)
        pull, fetching = eb.pull(a.endpoint, keys)
        assert fetching == 3
        ev = eb.next_event(15)
        assert ev.kind == "pull" and ev.id == pull and ev.success and ev.landed == 3
        # each key's result, in the pull's order: landed from a
        assert [(r["key"], r["status"], r["source"]) for r in ev.results] == \
            [(k, "landed", a.endpoint) for k in keys]
        # again, with one key absent from a: present, present, ..., missing
        pull, fetching = eb.pull(a.endpoint, keys[:2] + [b"py-pull-absent"])
        assert fetching == 1
        ev = eb.next_event(15)
        assert ev.id == pull and not ev.success and ev.missing == 1
        assert [(r["status"], r["source"], r["reason"]) for r in ev.results] == \
            [("present", None, None)] * 2 + [("missing", None, "absent")]
        with p2pkv.Client("py-c6", 3, eb.block_len) as c:
            s = c.connect(b.endpoint)
            assert c.get(s, keys, [0, 1, 2]) == [True] * 3
            assert [c.block(i).tobytes() for i in range(3)] == datas


def test_the_readme_example_runs(server):
    """README.md's ten lines, run as written against a live server."""
    readme = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
    text = open(readme).read()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) <= 10
    exec(compile(code.replace("ipc:///tmp/p2pkv-a.sock", server.local), "README.md", "exec"),
         {})


def test_the_connector_example_against_two_servers(server_factory):
    """python/examples/kv_connector.py, as CI runs it: every byte intact."""
    import subprocess
    import sys
    a, b = server_factory(), server_factory()
    here = os.path.dirname(__file__)
    example = os.path.join(here, "..", "examples", "kv_connector.py")
    out = subprocess.run([sys.executable, example, "--peer", a.local, "--peer", b.local,
                          "--requests", "6"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("all intact") == 5, out.stdout
    assert "aborted" in out.stdout


def test_engine_write_put_drop_and_a_bytearray_pool(server):
    with p2pkv.Engine(server.local) as engine:
        key = key_of(b"written")
        [b] = engine.reserve([key])
        engine.write(b, b"\x07" * 100)
        engine.write(b, b"\x09" * (engine.block_len - 100), offset=100)
        with pytest.raises(p2pkv.Error) as e:
            engine.write(b, b"x", offset=engine.block_len)   # beyond the block
        assert e.value.errno == errno.EINVAL
        engine.commit([key])
        put_key = key_of(b"put")
        assert engine.put(put_key, bytes(engine.block_len)) is True
        assert engine.put(put_key, bytes(engine.block_len)) is False   # there already
        pool = bytearray(2 * engine.block_len)
        with p2pkv.Client("py-c7", 2, engine.block_len, pool=pool) as c:
            s = c.connect(server.endpoint)
            assert c.get(s, [key, put_key], [1, 0]) == [True, True]
        assert pool[engine.block_len:] == b"\x07" * 100 + b"\x09" * (engine.block_len - 100)
        assert pool[:engine.block_len] == bytes(engine.block_len)
        engine.drop([key])
        with p2pkv.Client("py-c8", 1, engine.block_len) as c:
            s = c.connect(server.endpoint)
            assert c.lookup(s, "after-drop", [key]).hits == [False]


def test_ctrl_c_still_raises_keyboard_interrupt(server, python_child):
    """Loading the library must not take Python's SIGINT away (a library
    libfabric pulls in would make Ctrl-C exit(1) silently).  The child
    installs Python's own handler first, as Python does at start unless it
    inherited SIGINT ignored (a suite run from a background job of a
    non-interactive shell, nohup's): what is checked is that p2pkv leaves
    it in place."""
    script = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import p2pkv\n"
        f"e = p2pkv.Engine({server.local!r})\n"
        "c = p2pkv.Client('py-sig', 4, e.block_len)\n"
        f"c.connect({server.endpoint!r})\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(5)\n"
        "    print('no KeyboardInterrupt')\n"
        "except KeyboardInterrupt:\n"
        "    print('KeyboardInterrupt')\n"
        "c.close(); e.close()\n")
    assert python_child(script).strip() == "KeyboardInterrupt"


def test_engine_namespace_is_what_consumers_see(server_factory, tmp_path):
    """--tenants with keyless consumers in alpha: an engine in beta publishes
    what they cannot see, one in alpha and one in shared what they can."""
    tenants = tmp_path / "tenants"
    # a real CURVE public key (libzmq's documentation's), which nobody here
    # holds: it only brings namespace beta into being
    tenants.write_text("Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID beta\n* alpha\n")
    s = server_factory("--tenants", str(tenants))
    with p2pkv.Engine(s.local, namespace="alpha") as ea, \
            p2pkv.Engine(s.local, namespace="beta") as eb, p2pkv.Engine(s.local) as es:
        assert ea.namespace == "alpha" and es.namespace is None
        ka, _ = publish(ea, 1, seed=1)
        kb, _ = publish(eb, 1, seed=2)
        ks, _ = publish(es, 1, seed=3)
        with p2pkv.Client("py-tenant", 8, ea.block_len) as c:
            srv = c.connect(s.endpoint)
            look = c.lookup(srv, "req-t", ka + kb + ks)
            assert look.hits == [True, False, True]
        # the consumer is gone: its lookup's pins are released (by the
        # server's session, a moment after the close), and then the
        # figures stand still to be compared
        deadline = time.monotonic() + 10
        st = es.stats()["namespaces"]
        while any(n["pinned"] for n in st.values()):
            assert time.monotonic() < deadline, f"pins never released: {st}"
            time.sleep(0.01)
            st = es.stats()["namespaces"]
        assert st["alpha"]["ready"] == 1 and st["beta"]["ready"] == 1
        assert st["alpha"]["misses"] == 1 and st["beta"]["lookups"] == 0
        # the same figures through the struct API, for any namespace
        alpha, beta = es.namespace_stats("alpha"), ea.namespace_stats("beta")
        assert alpha == st["alpha"] and beta == st["beta"]
        assert alpha["lookups"] == 3 and alpha["hits"] == 2 and alpha["misses"] == 1
        assert es.namespace_stats() == st["shared"] and st["shared"]["ready"] == 1
        with pytest.raises(p2pkv.Error) as missing:
            es.namespace_stats("gamma")
        assert missing.value.errno == errno.ENOENT and "gamma" in str(missing.value)
    with pytest.raises(p2pkv.Error) as e:
        p2pkv.Engine(s.local, namespace="Not-A-Name")
    assert "ns:" in str(e.value)


@pytest.mark.parametrize("same_host", ["shm", "mmap"])
def test_describe_lists_providers_and_an_auto_client_uses_same_host(server_factory, same_host):
    srv = server_factory("--provider", same_host + ",tcp")
    d = p2pkv.describe(srv.endpoint)
    assert d["providers"][0] == same_host and d["providers"][1].startswith("tcp")
    assert d["provider"] == same_host and d["host"]
    with p2pkv.Engine(srv.local) as engine:
        keys, datas = publish(engine, 4)
        with p2pkv.Client("py-" + same_host, 4, engine.block_len) as c:   # provider: auto
            s = c.connect(srv.endpoint)
            assert c.get(s, keys, [0, 1, 2, 3]) == [True] * 4
            for i, data in enumerate(datas):
                assert bytes(c.pool[i * engine.block_len:(i + 1) * engine.block_len]) == data
        fabrics = engine.stats()["fabrics"]
        assert fabrics[same_host]["channels_opened"] == 1


def test_sessions_past_the_zeromq_socket_limit_are_refused_not_fatal(server):
    """czmq aborts the process when a socket cannot be made; the library
    counts its sessions' sockets and refuses the connect that would come too
    near the limit (here ZSYS_MAX_SOCKETS=48), naming the setting; the
    process lives on and closes the sessions it holds."""
    script = (
        "import errno, p2pkv\n"
        "clients, reason = [], None\n"
        "for i in range(60):\n"
        "    c = p2pkv.Client(f'py-many-{i}', 4, 4096)\n"
        "    try:\n"
        f"        c.connect({server.endpoint!r}, timeout=10)\n"
        "    except p2pkv.Error as e:\n"
        "        reason = (e.errno, e.reason)\n"
        "        c.close()\n"
        "        break\n"
        "    clients.append(c)\n"
        "print(len(clients))\n"
        "print(reason[0] == errno.EMFILE if reason else 'none')\n"
        "print(reason[1] if reason else '')\n"
        "for c in clients:\n"
        "    c.close()\n")
    env = dict(os.environ, ZSYS_MAX_SOCKETS="48")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    held, is_emfile, reason = out.stdout.splitlines()[:3]
    assert 5 <= int(held) < 60, out.stdout
    assert is_emfile == "True", out.stdout
    assert "ZSYS_MAX_SOCKETS" in reason, reason


def test_close_waits_for_a_call_running_on_another_thread(server_factory, python_child):
    # A get waits in C (the GIL released) for a key being written; close on
    # another thread must not free the client under it: the get returns
    # (an Error saying its server was disconnected), close after it, and
    # later calls raise EBADF.  Run in a process of its own: the crash it
    # was (a use after free, or a get hung on a freed lock) ends only that.
    # The lookup stays parked far longer than the test runs.
    server = server_factory("--lookup-timeout", "600")
    script = f"""
import errno, hashlib, threading
import p2pkv
eng = p2pkv.Engine({server.local!r})
key = hashlib.sha256(b"being written").digest()
eng.reserve([key])
c = p2pkv.Client("py-close", 4, eng.block_len)
s = c.connect({server.endpoint!r}, timeout=10)
before = eng.namespace_stats()["pending"]
out = {{}}
def getter():
    try:
        out["landed"] = c.get(s, [key], [0], timeout=30)
    except p2pkv.Error as e:
        out["errno"], out["why"] = e.errno, e.reason
t = threading.Thread(target=getter)
t.start()
# the get's lookup is parked on the server (pending), so it waits in C
while eng.namespace_stats()["pending"] == before:
    eng.next_event(0.01)
c.close()
t.join(20)
assert not t.is_alive(), "the get never returned after close"
assert "disconnected by the client" in out.get("why", ""), out
try:
    c.get(s, [key], [0])
    raise AssertionError("a call after close ran")
except p2pkv.Error as e:
    assert e.errno == errno.EBADF, e
eng.close()
print("ok")
"""
    assert python_child(script).strip() == "ok"


def test_engine_close_waits_for_next_event_on_another_thread(server, python_child):
    # next_event waits in C (the GIL released); close on another thread
    # freed the engine under it (a heap use after free, which the
    # sanitizer build reports).  Now close waits for it: the wait ends as
    # its own timeout says (None), before close returns, and a later call
    # raises EBADF.  The main thread closes once the waiter holds the
    # engine for its call (the handle counts it), not after a guessed sleep.
    script = f"""
import errno, threading, time
import p2pkv
eng = p2pkv.Engine({server.local!r})
out = {{}}
def waiter():
    out["event"] = eng.next_event(1.0)
    out["returned"] = time.monotonic()
t = threading.Thread(target=waiter)
t.start()
while eng._handle._running == 0:
    time.sleep(0.001)
eng.close()
closed = time.monotonic()
assert "returned" in out and out["returned"] <= closed, (out, closed)
assert out["event"] is None, out
t.join()
try:
    eng.next_event(0)
    raise AssertionError("a call after close ran")
except p2pkv.Error as e:
    assert e.errno == errno.EBADF, e
print("ok")
"""
    assert python_child(script).strip() == "ok"


def test_text_with_a_nul_is_refused_not_cut(server):
    # C reads a string up to its first NUL: "req\0x" reached the library
    # as "req", another request (a finish of it finished "req"; a store
    # went to consumer "c" for "c\0d").  Such text is a ValueError naming
    # the argument, and nothing is sent.
    with p2pkv.Engine(server.local) as engine:
        keys, _ = publish(engine, 1)
        with p2pkv.Client("py-nul", 4, engine.block_len) as c:
            s = c.connect(server.endpoint)
            look = c.lookup(s, "req", keys)          # request "req" holds a pin
            assert look.hits == [True]
            calls = [lambda: c.lookup(s, "req\0x", keys),
                     lambda: c.fetch(s, "req\0x", keys, [0]),
                     lambda: c.get_async(s, keys, [0], kv="req\0x"),
                     lambda: c.get(s, keys, [0], kv="req\0x"),
                     lambda: c.finish(s, "req\0x"),
                     lambda: c.connect(server.endpoint + "\0x"),
                     lambda: engine.store("py-nul\0x", "req", keys),
                     lambda: engine.finish("py-nul", "req\0x")]
            for call in calls:
                with pytest.raises(ValueError, match="NUL"):
                    call()
            with pytest.raises(ValueError, match="peer_id"):
                p2pkv.Client("py\0nul", 4, engine.block_len)
            assert c.open_fetches == 0
            # request "req" was not touched: its pin still holds
            assert engine.stats()["pool"]["pinned"] == 1
            c.finish(s, "req")


def test_lookup_asks_again_after_its_server_came_back(server_factory):
    # The package keeps each request's answers (a key is asked once per
    # request), but a new session starts with no request at all: answers
    # of the old one, and the "server went away" ones, must not answer a
    # lookup made after the server came back (they did: ENOTCONN from the
    # cache, for ever, with the server up again).
    import threading
    first = server_factory("--lookup-timeout", "600")
    key = key_of(b"written after the restart")
    with p2pkv.Engine(first.local) as engine:
        engine.reserve([key])                    # a lookup of it waits
        with p2pkv.Client("py-back", 4, engine.block_len, keepalive_interval=0.3,
                          silence_timeout=1, connect_retry=0.1) as c:
            s = c.connect(first.endpoint)
            seen = {}

            def ask():
                try:
                    c.lookup(s, "req", [key], timeout=60)
                except p2pkv.Error as e:
                    seen["errno"] = e.errno
            t = threading.Thread(target=ask)
            t.start()
            while engine.namespace_stats()["pending"] == 0:
                engine.next_event(0.01)
            first.kill()                         # the parked lookup is never answered
            t.join(60)
            assert seen.get("errno") == errno.ENOTCONN, seen
            second = server_factory("--bind", first.endpoint)
            with p2pkv.Engine(second.local) as engine2:
                engine2.put(key, b"\x07" * engine2.block_len)
                while c.server_state(s)[0] != "up":
                    engine2.next_event(0.01)
                look = c.lookup(s, "req", [key], timeout=30)
                assert look.hits == [True]
                f = c.fetch(s, "req", [key], [1], round=look.round)
                f.wait(30)
                assert c.block(1).tobytes() == b"\x07" * engine2.block_len
                c.finish(s, "req")
