"""CURVE from Python: a consumer whose key the server allows fetches; one
whose key it does not allow, or without CURVE, is refused at connect
(EACCES), not timed out."""
from __future__ import annotations

import errno
import os
import re
import subprocess

import pytest

import p2pkv
from test_python_api import publish


def keygen(path: str) -> tuple[str, str]:
    """(public, secret) in Z85, from `p2pkv keygen` (czmq certificates)."""
    binary = os.path.join(os.environ.get("P2PKV_BIN", ""), "p2pkv") \
        if os.environ.get("P2PKV_BIN") else "p2pkv"
    subprocess.run([binary, "keygen", path], check=True, stdout=subprocess.DEVNULL)
    with open(path + "_secret") as f:
        text = f.read()
    key = lambda name: re.search(name + r' = "(.{40})"', text).group(1)  # noqa: E731
    return key("public-key"), key("secret-key")


@pytest.fixture
def curve_server(server_factory, tmp_path):
    allow = tmp_path / "allow"
    allow.mkdir()
    keys = {n: keygen(str(tmp_path / n)) for n in ("server", "alice", "bob")}
    os.link(tmp_path / "alice", allow / "alice")
    srv = server_factory("--curve-secret", str(tmp_path / "server_secret"),
                         "--curve-allow", str(allow))
    return srv, keys


def test_curve_client_fetches_and_others_are_refused(curve_server):
    srv, keys = curve_server
    server_pub = keys["server"][0]
    with p2pkv.Engine(srv.local) as engine:
        blocks, datas = publish(engine, 2)
    d = p2pkv.describe(srv.endpoint, curve_public=keys["alice"][0],
                       curve_secret=keys["alice"][1], curve_server=server_pub)
    assert d["block_len"] == 4096
    with p2pkv.Client("py-alice", 4, 4096, curve_public=keys["alice"][0],
                      curve_secret=keys["alice"][1], curve_server=server_pub) as c:
        s = c.connect(srv.endpoint)
        assert c.get(s, blocks, [0, 1]) == [True, True]
        assert bytes(c.pool[:4096]) == datas[0]
    with p2pkv.Client("py-bob", 4, 4096, curve_public=keys["bob"][0],
                      curve_secret=keys["bob"][1], curve_server=server_pub) as c:
        with pytest.raises(p2pkv.Error) as e:
            c.connect(srv.endpoint, timeout=10)
        assert e.value.errno == errno.EACCES
        assert "the server refused our CURVE key" in str(e.value)
    with p2pkv.Client("py-plain", 4, 4096) as c:
        with pytest.raises(p2pkv.Error) as e:
            c.connect(srv.endpoint, timeout=10)
        assert e.value.errno == errno.EACCES


def test_partial_curve_keys_name_the_field():
    with pytest.raises(p2pkv.Error, match="curve_server: missing"):
        p2pkv.Client("py-partial", 1, 4096, curve_public="a" * 40, curve_secret="b" * 40)
