"""Real p2pkv-servers for the Python tests, as the C suites start them:
bin/p2pkv-server of the build tree ($P2PKV_BIN), on 127.0.0.1 over the
tcp provider with short timeouts, each with its own pool and socket."""
from __future__ import annotations

import subprocess
import sys

import pytest

from p2pkv.testing import LocalServer

@pytest.fixture
def server_factory():
    started = []

    def start(*extra, block_len=None, blocks=None):
        extra = list(extra)
        if block_len:
            extra += ["--block-len", str(block_len)]
        if blocks:
            extra += ["--pool-blocks", str(blocks)]
        s = LocalServer(extra)
        started.append(s)
        return s
    yield start
    for s in started:
        if s.proc.returncode is None:
            assert s.stop() == 0, f"{s.peer_id} did not exit cleanly"


@pytest.fixture
def server(server_factory):
    return server_factory()


@pytest.fixture
def python_child():
    """Runs a script in a Python process of its own, so that a crash there
    fails the test by its exit status instead of ending pytest: its
    standard output, once it exited 0 (within 60 s)."""
    def run(script: str) -> str:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
        return out.stdout
    return run
