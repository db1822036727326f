"""The egress proxy on its own (evalrig/attempt/egress.py), and the namespace helpers of evalrig/attempt/sandbox/sockets.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
from redteam import Listener, bwrap_program, bwrap_works, held_net_namespace

from evalrig.attempt import egress, sandbox
from evalrig.attempt.egress import AllowList, open_session, parse_allow_host


@pytest.mark.parametrize(("value", "normal"), [
    ("Example.COM", "example.com"),
    ("api.example.com:443", "api.example.com:443"),
    ("127.0.0.1:8080", "127.0.0.1:8080"),
    ("[::1]:443", "[::1]:443"),
    ("[0:0::1]", "[::1]"),
    ("localhost", "localhost"),
])
def test_allow_host_is_normalised(value: str, normal: str) -> None:
    assert parse_allow_host(value) == normal


@pytest.mark.parametrize("value", ["", "a b", "x.com:0", "x.com:65536", "x.com:+1", "[::1",
                                   "::1", "-a.com", "a_b.com", "1.2.3", "x" * 64 + ".com"])
def test_malformed_allow_host_is_refused(value: str) -> None:
    with pytest.raises(ValueError):
        parse_allow_host(value)


def test_allow_list_port_or_any_port() -> None:
    allow = AllowList(("example.com", "10.0.0.1:443", "[::1]:80"))
    assert allow.allows("example.com", 1) and allow.allows("example.com", 443)
    assert allow.allows("10.0.0.1", 443) and not allow.allows("10.0.0.1", 80)
    assert allow.allows("::1", 80) and not allow.allows("::1", 81)
    assert not allow.allows("sub.example.com", 443) and not AllowList().allows("example.com", 443)


def test_sandbox_binds_the_address_the_agent_is_told() -> None:
    assert sandbox.sockets._PROXY_ADDRESS == egress.PROXY_ADDRESS
    assert set(egress.proxy_env().values()) == {"http://127.0.0.1:3128"}


@pytest.fixture
def upstream() -> Iterator[Listener]:
    up = Listener(lambda data: b"echo:" + data)
    yield up
    up.close()


def _proxy(allow: tuple[str, ...]) -> tuple[egress.Session, int]:
    listener = socket.create_server(("127.0.0.1", 0))  # the rig's own namespace, for the unit test
    port = listener.getsockname()[1]
    return open_session(listener, allow), port


def _ask(port: int, request: bytes, then: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        if then:
            time.sleep(0.05)
            s.sendall(then)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_connect_allowed_refused_and_malformed(upstream: Listener) -> None:
    session, port = _proxy((f"127.0.0.1:{upstream.port}",))
    try:
        ok = _ask(port, b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % upstream.port, b"hello")
        refused = _ask(port, b"CONNECT 127.0.0.2:%d HTTP/1.1\r\n\r\n" % upstream.port)
        bad = _ask(port, b"nonsense\r\n\r\n")
        https = _ask(port, b"GET https://x/ HTTP/1.1\r\n\r\n")
    finally:
        session.close()
    assert ok == b"HTTP/1.1 200 Connection established\r\n\r\necho:hello"
    assert refused.startswith(b"HTTP/1.1 403 ") and bad.startswith(b"HTTP/1.1 400 ")
    assert https.startswith(b"HTTP/1.1 400 ")
    assert upstream.received == [b"hello"]
    rows = [(r.host, r.port, r.allowed, r.status, r.bytes_up, r.bytes_down) for r in session.records]
    assert sorted(rows, key=str) == sorted([
        ("127.0.0.1", upstream.port, True, 200, 5, 10),
        ("127.0.0.2", upstream.port, False, 403, 0, 0),
        ("", None, False, 400, 0, 0),
        ("", None, False, 400, 0, 0),
    ], key=str)
    assert session.hosts() == [f"127.0.0.1:{upstream.port}"]


def test_plain_http_is_forwarded_in_origin_form(upstream: Listener) -> None:
    session, port = _proxy(("127.0.0.1",))  # any port of the host
    try:
        got = _ask(port, b"GET http://127.0.0.1:%d/a?b=1 HTTP/1.1\r\nHost: x\r\n"
                         b"Proxy-Authorization: secret\r\n\r\n" % upstream.port)
    finally:
        session.close()
    assert upstream.received == [b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\n\r\n"]
    assert got == b"echo:" + upstream.received[0]
    [rec] = session.records
    assert (rec.method, rec.allowed, rec.status, rec.bytes_up) == ("GET", True, 200, len(upstream.received[0]))


def test_a_refused_name_is_never_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    looked: list[object] = []
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: looked.append(a) or real(*a, **k))
    session, port = _proxy(("example.org:443",))
    try:
        assert _ask(port, b"CONNECT leak-this.example.com:443 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403")
    finally:
        session.close()
    assert not [a for a in looked if "leak-this" in str(a)]


def test_connections_end_with_the_attempt(upstream: Listener) -> None:
    session, port = _proxy((f"127.0.0.1:{upstream.port}",))
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    client.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % upstream.port)
    assert client.recv(100).startswith(b"HTTP/1.1 200")
    began = time.monotonic()
    session.close()  # the tunnel is still open
    assert time.monotonic() - began < 3
    assert client.recv(100) == b""  # closed by the proxy
    client.close()
    [rec] = session.records
    assert rec.allowed and rec.status == 200


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_listener_passed_back_from_a_forked_child() -> None:
    """The path a non-root bwrap takes (setns in a forked child, SCM_RIGHTS), here as root.
    The namespace's `lo` is brought up by its own process, as bwrap's init does."""
    with held_net_namespace() as pid:
        net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        try:
            listener = sandbox.sockets._listener_by_fork(pid, net)
        finally:
            os.close(net)
        session = open_session(listener, ())
        try:
            probe = ("import socket; s = socket.create_connection(('127.0.0.1', 3128), 5); "
                     "s.sendall(b'CONNECT a.b:1 HTTP/1.1\\r\\n\\r\\n'); print(s.recv(12).decode())")
            got = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "python3", "-c", probe],
                                 capture_output=True, text=True, timeout=20)
        finally:
            session.close()
        assert got.stdout.strip() == "HTTP/1.1 403", got.stderr
        assert [(r.host, r.status) for r in session.records] == [("a.b", 403)]


@pytest.mark.skipif(not bwrap_works(), reason="bwrap cannot run here")
def test_bwrap_sets_up_its_own_loopback_while_the_proxy_binds_there() -> None:
    """bwrap's init adds 127.0.0.1 to `lo` (exclusively) at the moment the rig learns its
    pid and binds the proxy's listener there; had the rig brought `lo` up first, bwrap would
    die with "loopback: Failed RTM_NEWADDR" (seen about one launch in a hundred)."""
    failures = []
    for _ in range(150):
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        bwrap = subprocess.Popen([bwrap_program(), "--unshare-net", "--unshare-pid", "--ro-bind", "/", "/",
                                  "--info-fd", str(info_w), "--block-fd", str(block_r), "--", "/bin/true"],
                                 pass_fds=(info_w, block_r), stderr=subprocess.PIPE)
        os.close(info_w)
        os.close(block_r)
        info = b""
        while chunk := os.read(info_r, 4096):
            info += chunk
        os.close(info_r)
        try:
            sandbox.sockets._listener_in(json.loads(info)["child-pid"]).close()
        finally:
            try:
                os.write(block_w, b"x")
            except BrokenPipeError:
                pass  # bwrap died already: its stderr says why
            os.close(block_w)
            _, err = bwrap.communicate(timeout=30)
        if bwrap.returncode != 0:
            failures.append(err.decode(errors="replace").strip())
    assert failures == []
