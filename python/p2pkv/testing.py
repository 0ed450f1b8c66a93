"""A local p2pkv-server for tests, benchmarks and demos.

    with LocalServer(["--block-len", "65536"]) as srv:
        engine = p2pkv.Engine(srv.local)
        client.connect(srv.endpoint)
"""
from __future__ import annotations

import itertools
import os
import select
import signal
import subprocess

_serial = itertools.count(1)


class LocalServer:
    """A p2pkv-server child process on 127.0.0.1 over tcp, with its own
    pool and local socket; binary from $P2PKV_BIN (a directory) or PATH.
    extra: more command-line flags (a later flag wins)."""

    def __init__(self, extra=()):
        n = next(_serial)
        pid = os.getpid()
        self.peer_id = f"py-{pid}-{n}"
        self.local = f"ipc:///tmp/p2pkv-py-{pid}-{n}.sock"
        self.pool = f"/p2pkv-py-{pid}-{n}"
        binary = os.path.join(os.environ["P2PKV_BIN"], "p2pkv-server") \
            if os.environ.get("P2PKV_BIN") else "p2pkv-server"
        args = [binary, "--peer-id", self.peer_id, "--bind", "tcp://127.0.0.1:*",
                "--local", self.local, "--pool-name", self.pool, "--pool-blocks", "512",
                "--block-len", "4096", "--provider", "tcp", "--silence-timeout", "3",
                "--store-timeout", "5", "--shutdown-timeout", "3", "--log-level", "warn",
                *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        line = b""
        while b"\n" not in line:
            ready, _, _ = select.select([self.proc.stdout], [], [], 30)
            chunk = os.read(self.proc.stdout.fileno(), 4096) if ready else b""
            if not chunk:
                self.stop()
                raise RuntimeError(f"no ready line from {binary}: {line!r}")
            line += chunk
        at = line.decode().index("peers at ") + len("peers at ")
        self.endpoint = line.decode()[at:].split(",")[0].strip()

    def stop(self) -> int:
        """SIGTERM, and the exit status (killed after 15 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, removing the pool and socket it leaves behind."""
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        for path in (f"/dev/shm{self.pool}", self.local[len("ipc://"):]):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def publish_in_place(engine, datas: list) -> list:
    """Publishes each of datas (block_len bytes each) under its SHA-256,
    as an engine does: reserve, write into the mapped pool, commit.  The
    keys, in order."""
    import hashlib
    keys = [hashlib.sha256(d).digest() for d in datas]
    blocks = engine.reserve(keys)
    view = memoryview(engine.pool).cast("B")
    for b, d in zip(blocks, datas):
        view[b * engine.block_len:(b + 1) * engine.block_len] = d
    del view
    engine.commit(keys)
    return keys

