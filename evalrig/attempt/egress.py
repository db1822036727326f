"""The egress proxy: the one way out of a sandbox the operator granted the network.

The sandbox keeps its own network namespace with only loopback (docs/security.md).
The rig binds a listening socket at `PROXY_ADDRESS` *inside* that namespace (evalrig.attempt.sandbox
does the namespace part) and hands it to `open_session`; the agent finds the address in
`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and their lower-case names. Everything behind
the socket runs in the rig's process, outside the agent's view: one asyncio loop on one
daemon thread per rig process serves every attempt's session.

What the proxy speaks (written small on purpose, standard library only; the usual
libraries — proxy.py, mitmproxy — bring far more than an allow-list needs):
- `CONNECT host:port` (an HTTPS or any other TCP tunnel), and
- plain-HTTP requests in absolute form (`GET http://host[:port]/path`), forwarded to that
  one host; further requests on the same client connection go to the same host.
Anything else gets 400. A target the allow-list does not name gets 403 and is never
resolved (no DNS lookup leaves the rig for a refused name). Every connection is recorded
as one `NetworkConnection` (network.jsonl in the attempt's evidence).

The allow-list: `--allow-host HOST[:PORT]`, a host name or an IP address (IPv6 in
brackets), matched exactly (case-insensitive, no wildcards, no sub-domains); without a
port, any port of that host.

Bounds: a request head of at most 16 KiB, read within 10 s; an upstream connect within
10 s; at most 64 open connections per attempt (more get 503) and 10,000 connections per
attempt (then the listener closes); each direction of a tunnel buffers at most ~128 KiB
(a read of 64 KiB and the writer's high-water mark). Every connection ends when the
attempt does (`Session.close`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from evalrig.attempt.aioloop import LOOP
from evalrig.core.environment import PROXY_VARS
from evalrig.models.run import NetworkConnection

__all__ = [
    "PROXY_ADDRESS",
    "PROXY_PORT",
    "PROXY_URL",
    "PROXY_VARS",
    "AllowList",
    "Session",
    "open_session",
    "parse_allow_host",
    "proxy_env",
]

PROXY_PORT = 3128
"""The same port in every sandbox: each has a network namespace of its own."""
PROXY_ADDRESS = ("127.0.0.1", PROXY_PORT)
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"

HEAD_LIMIT = 16 * 1024
HEAD_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
MAX_OPEN = 64
MAX_CONNECTIONS = 10_000
CHUNK = 64 * 1024
_CLOSE_TIMEOUT_S = 5.0

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


def proxy_env() -> dict[str, str]:
    """The variables that point an agent at its proxy (upper- and lower-case: clients read either; docs/attempts.md, "Network")."""
    return {name: PROXY_URL for name in PROXY_VARS}


# -- the allow-list ----------------------------------------------------------------------


def _host(text: str) -> str | None:
    """`text` as a normalised host (lower-case name, compressed IP), or None if it is neither."""
    if text.startswith("[") and text.endswith("]"):
        try:
            return str(ipaddress.IPv6Address(text[1:-1]))
        except ValueError:
            return None
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        pass
    name = text.lower().rstrip(".") if text.endswith(".") and len(text) > 1 else text.lower()
    if not name or len(name) > 253 or not all(_LABEL.match(p) for p in name.split(".")):
        return None
    if name.replace(".", "").isdigit():
        return None  # 1.2.3 or 300.1.1.1: not an address, and no host name either
    return name


def _split(value: str) -> tuple[str, str | None]:
    """("host", "port" or None) of HOST, HOST:PORT, [V6] or [V6]:PORT."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        rest = value[end + 1:]
        return value[: end + 1], (rest[1:] if rest.startswith(":") else (rest or None))
    if value.count(":") == 1:
        host, port = value.split(":")
        return host, port
    return value, None


def _port(text: str) -> int | None:
    if not text.isdigit() or len(text) > 5:
        return None
    n = int(text)
    return n if 1 <= n <= 65535 else None


def _show_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def parse_allow_host(value: str) -> str:
    """`--allow-host HOST[:PORT]` normalised ("example.com", "10.0.0.1:443", "[::1]:8080").

    ValueError says what is wrong."""
    host_text, port_text = _split(value.strip())
    host = _host(host_text)
    if host is None:
        raise ValueError(f"{value!r} is not a host name or an IP address "
                         "(write HOST or HOST:PORT; an IPv6 address in brackets, [::1]:443)")
    if port_text is None:
        return _show_host(host)
    port = _port(port_text)
    if port is None:
        raise ValueError(f"{value!r}: the port must be a number from 1 to 65535")
    return f"{_show_host(host)}:{port}"


@dataclass(frozen=True)
class AllowList:
    """Normalised `--allow-host` values; empty allows nothing."""

    entries: tuple[str, ...] = ()

    def allows(self, host: str, port: int) -> bool:
        shown = _show_host(host)
        return shown in self.entries or f"{shown}:{port}" in self.entries


# -- one attempt's session ---------------------------------------------------------------


@dataclass
class Session:
    """One attempt's listener and the connections made through it."""

    allow: AllowList
    records: list[NetworkConnection] = field(default_factory=list)
    _server: asyncio.AbstractServer | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _seen: int = 0
    _closed: bool = False

    def hosts(self) -> list[str]:
        """host:port of every connection the allow-list let through, distinct and sorted."""
        return sorted({f"{_show_host(r.host)}:{r.port}" for r in self.records if r.allowed})

    def close(self) -> None:
        """Stop listening and end every connection; the records are final afterwards."""
        if self._closed:
            return
        self._closed = True
        _PROXY.call(self._shutdown(), _CLOSE_TIMEOUT_S + 1)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=_CLOSE_TIMEOUT_S)

    async def _serve(self, listener: socket.socket) -> None:
        self._server = await asyncio.start_server(self._accepted, sock=listener, limit=HEAD_LIMIT)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._seen += 1
        if self._seen >= MAX_CONNECTIONS and self._server is not None:
            self._server.close()  # enough: the agent's further connects are refused by the kernel
        conn = _Connection(datetime.now(UTC), time.monotonic())
        try:
            if len(self._tasks) > MAX_OPEN:
                conn.status, conn.error = 503, f"more than {MAX_OPEN} connections open at once"
                await _answer(writer, 503)
            else:
                await self._handle(reader, writer, conn)
        except asyncio.CancelledError:
            conn.error = conn.error or "ended with the attempt"
        except (OSError, asyncio.IncompleteReadError) as e:
            conn.error = conn.error or f"connection failed: {type(e).__name__}"
        finally:
            self._tasks.discard(task)
            writer.close()
            self.records.append(conn.record())

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      conn: _Connection) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            conn.status, conn.error = 400, "no complete request head"
            await _answer(writer, 400)
            return
        request = _parse_head(head)
        if isinstance(request, str):
            conn.status, conn.error = 400, request
            await _answer(writer, 400)
            return
        conn.method, conn.host, conn.port = request.method, request.host, request.port
        if not self.allow.allows(request.host, request.port):
            conn.status, conn.error = 403, "not on the allow-list (--allow-host)"
            await _answer(writer, 403)
            return
        conn.allowed = True
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(request.host, request.port, limit=CHUNK), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            conn.status, conn.error = 502, f"could not reach {request.host}:{request.port}: {type(e).__name__}"
            await _answer(writer, 502)
            return
        try:
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(request.forward)
                conn.up += len(request.forward)
            conn.status = 200
            await asyncio.gather(_pipe(reader, up_writer, conn, "up"),
                                 _pipe(up_reader, writer, conn, "down"))
        finally:
            up_writer.close()


@dataclass
class _Connection:
    started_at: datetime
    t0: float
    method: str | None = None
    host: str = ""
    port: int | None = None
    allowed: bool = False
    status: int = 0
    up: int = 0
    down: int = 0
    error: str | None = None

    def record(self) -> NetworkConnection:
        return NetworkConnection(
            host=self.host, port=self.port, method=self.method, allowed=self.allowed,
            status=self.status, bytes_up=self.up, bytes_down=self.down, started_at=self.started_at,
            duration_ms=round((time.monotonic() - self.t0) * 1000, 3), error=self.error)


@dataclass(frozen=True)
class _Request:
    method: str
    host: str
    port: int
    forward: bytes  # the head to send upstream (plain HTTP); empty for CONNECT


_HEAD_LINE = re.compile(rb"^([A-Z]{1,16}) (\S{1,8192}) HTTP/1\.[01]$")
_HOP_HEADERS = (b"proxy-connection:", b"proxy-authorization:")


def _parse_head(head: bytes) -> _Request | str:
    """The request, or why it is refused (never quoting the agent's bytes)."""
    lines = head.split(b"\r\n")
    m = _HEAD_LINE.match(lines[0])
    if m is None:
        return "not an HTTP/1.x request line"
    method, target = m.group(1).decode(), m.group(2).decode("ascii", "replace")
    if method == "CONNECT":
        host_text, port_text = _split(target)
        host = _host(host_text)
        port = _port(port_text) if port_text is not None else None
        if host is None or port is None:
            return "CONNECT needs host:port"
        return _Request(method, host, port, b"")
    if not target.lower().startswith("http://"):
        return "only CONNECT and absolute http:// requests are proxied (https: use CONNECT)"
    rest = target[len("http://"):]
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        return "user information in the URL is not proxied"
    host_text, port_text = _split(authority)
    host = _host(host_text)
    port = 80 if port_text is None else _port(port_text)
    if host is None or port is None:
        return "the URL has no valid host[:port]"
    origin = f"{method} /{path if slash else ''} {lines[0].rsplit(b' ', 1)[1].decode()}"
    kept = [ln for ln in lines[1:] if not ln.lower().startswith(_HOP_HEADERS)]
    return _Request(method, host, port, origin.encode() + b"\r\n" + b"\r\n".join(kept))


async def _answer(writer: asyncio.StreamWriter, status: int) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway",
              503: "Service Unavailable"}[status]
    body = f"evalrig egress proxy: {status} {reason}\n".encode()
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    try:
        await asyncio.wait_for(writer.drain(), HEAD_TIMEOUT_S)
    except (OSError, TimeoutError):
        pass


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Connection,
                way: str) -> None:
    """Copy one direction to its end, counting bytes; drain() bounds what is buffered."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            if way == "up":
                conn.up += len(data)
            else:
                conn.down += len(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


# -- the loop: the process's one (attempt/aioloop.py), shared with the model gateway --

_PROXY = LOOP


def open_session(listener: socket.socket, allow: Sequence[str]) -> Session:
    """Serve `listener` (already listening) for one attempt; `Session.close()` ends it."""
    session = Session(AllowList(tuple(allow)))
    _PROXY.call(session._serve(listener), _CLOSE_TIMEOUT_S)
    return session
