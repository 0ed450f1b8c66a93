"""The cluster directory from Python: servers publish into a real
redis-server (started here on a free loopback port, nothing saved), a
Client(directory=) locates keys and gets them by key alone, every byte
checked, and gets them again from the other holder once one is killed."""
from __future__ import annotations

import errno
import shutil
import signal
import socket
import subprocess
import time

import pytest

import p2pkv
from p2pkv.testing import publish_in_place
from test_python_api import publish

REDIS = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url():
    if not REDIS:
        pytest.skip("no redis-server (Debian: redis-server; scripts/bootstrap installs it)")
    port = free_port()
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--daemonize", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            assert proc.poll() is None, "redis-server exited at start"
            assert time.monotonic() < deadline, "redis-server did not answer PING within 15 s"
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(15)


def wait_holders(client: p2pkv.Client, keys: list, want: int) -> list[list[dict]]:
    """The directory's answer once every key has want live holders."""
    deadline = time.monotonic() + 15
    while True:
        found = client.locate(keys)
        if all(len(h) == want for h in found):
            return found
        assert time.monotonic() < deadline, f"holders never reached {want}: {found}"
        time.sleep(0.02)


def test_locate_and_get_by_key_with_failover(server_factory, redis_url):
    a = server_factory("--peer-id", "py-dir-a", "--directory", redis_url,
                       "--directory-ttl", "0.5")
    b = server_factory("--peer-id", "py-dir-b", "--directory", redis_url)
    with p2pkv.Engine(a.local) as ea, p2pkv.Engine(b.local) as eb:
        keys, datas = publish(ea, 6, seed=5)
        publish(eb, 6, seed=5)              # the same blocks: two holders each
        only_b, only_b_data = publish(eb, 2, seed=6)
    with p2pkv.Client("py-dir-consumer", 8, 4096, directory=redis_url,
                      silence_timeout=1, stall_timeout=1, keepalive_interval=0.3,
                      no_reconnect=True) as c:
        found = wait_holders(c, keys, 2)
        assert {h["peer_id"] for h in found[0]} == {"py-dir-a", "py-dir-b"}
        assert all(h["block_len"] == 4096 and h["endpoint"].startswith("tcp://127.0.0.1:")
                   for h in found[0])
        # published by b's directory thread in a batch of its own, maybe later
        assert [h[0]["peer_id"] for h in wait_holders(c, only_b, 1)] == ["py-dir-b"] * 2
        assert c.locate([b"\x01" * 32]) == [[]]     # nobody holds it

        assert c.get(None, keys + only_b, list(range(8))) == [True] * 8
        for i, d in enumerate(datas + only_b_data):
            assert bytes(c.pool[i * 4096:(i + 1) * 4096]) == d, f"block {i}"

        # a holder killed: its record lapses (0.5 s), and by key the same
        # blocks still come, from the one left
        a.kill()
        wait_holders(c, keys, 1)
        c.pool[:] = b"\0" * len(c.pool)
        assert c.get(None, keys, list(range(6))) == [True] * 6
        for i, d in enumerate(datas):
            assert bytes(c.pool[i * 4096:(i + 1) * 4096]) == d, f"block {i} after the kill"
        stats = c.directory_stats()
        assert stats["up"] and stats["locates"] >= 3


def test_get_by_key_without_a_directory_names_it(server):
    with p2pkv.Client("py-dir-none", 1, 4096) as c:
        with pytest.raises(p2pkv.Error) as e:
            c.get(None, [b"\x02" * 32], [0])
        assert e.value.errno == errno.EINVAL
        assert "no server and no directory: set config.directory" in str(e.value)


def test_get_by_key_past_a_hung_holder(server_factory, redis_url):
    """Issue 36, point 2: one holder hung (SIGSTOP: its port stays bound,
    it answers nothing) while its record reads live.  Fetched by key, the
    keys the live holder has come whole within the one call, each result
    saying where it came from (source); the key only the hung one holds
    is reported failed, not an exception."""
    a = server_factory("--peer-id", "py-hung-a", "--directory", redis_url,
                       "--directory-ttl", "120")
    b = server_factory("--peer-id", "py-hung-b", "--directory", redis_url)
    with p2pkv.Engine(a.local) as ea, p2pkv.Engine(b.local) as eb:
        keys, datas = publish(ea, 5, seed=9)
        assert publish_in_place(eb, datas[1:]) == keys[1:]     # b: all but key 0
    with p2pkv.Client("py-hung-consumer", 5, 4096, directory=redis_url,
                      keepalive_interval=0.3, silence_timeout=4) as c:
        deadline = time.monotonic() + 60
        while [len(h) for h in c.locate(keys)] != [1, 2, 2, 2, 2]:
            assert time.monotonic() < deadline, f"holders: {c.locate(keys)}"
            time.sleep(0.02)
        a.proc.send_signal(signal.SIGSTOP)
        try:
            res = c.get_results(None, keys, list(range(5)), kv="hung", timeout=4)
        finally:
            a.proc.send_signal(signal.SIGCONT)
        assert res[0]["status"] == "failed", res[0]
        for i in range(1, 5):
            assert res[i]["status"] == "landed", (i, res[i])
            assert res[i]["verified"], (i, res[i])
            assert res[i]["source"] == b.endpoint, (i, res[i])
            assert bytes(c.pool[i * 4096:(i + 1) * 4096]) == datas[i], f"block {i}"
        assert c.directory_stats()["failovers"] >= 1
