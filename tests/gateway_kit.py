"""The model gateway's test kit: the stand-in provider as a real process on loopback, a
gateway in front of it, and sessions on real sockets (tests/test_gateway*.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from evalrig.attempt.gateway import CallLedger, Gateway, Grant, Replay, Session, UpstreamConn
from evalrig.models.gateway import Budget, CallUsage

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "examples" / "model-standin" / "standin.py"
KEY = "sk-standin-real-key-0123456789"
"""The key the stand-in is started with: it must reach it, and nothing else."""
IN_PRICE, OUT_PRICE = 1.0, 2.0  # USD per million tokens, every model


@dataclass
class Standin:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines() if x.strip()]

    def clear(self) -> None:
        self.log.write_text("")


@contextmanager
def standin(tmp: Path, *extra: str) -> Iterator[Standin]:
    port_file, log = tmp / "standin.port", tmp / "standin.jsonl"
    proc = subprocess.Popen([sys.executable, str(STANDIN), "--port", "0", "--port-file", str(port_file),
                             "--key", KEY, "--log", str(log), *extra])
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the stand-in did not start")
            time.sleep(0.02)
        yield Standin(proc, int(port_file.read_text()), log)
    finally:
        proc.terminate()
        proc.wait(10)


def price(qualified: str, provider: str, usage: CallUsage, as_of: datetime) -> float | None:
    """A simple table for the tests: every model at IN_PRICE / OUT_PRICE per million."""
    if "unpriced" in qualified:
        return None
    return (usage.input_tokens * IN_PRICE + usage.output_tokens * OUT_PRICE) / 1e6


def upstreams(s: Standin, timeout_s: float = 3.0, max_concurrent: int = 16) -> dict[str, UpstreamConn]:
    return {
        "openai": UpstreamConn("openai", "openai", f"{s.url}/v1", KEY, max_concurrent,
                               ("candidate",), "", timeout_s),
        "anthropic": UpstreamConn("anthropic", "anthropic", s.url, KEY, max_concurrent,
                                  ("candidate",), "", timeout_s),
        "judgeonly": UpstreamConn("judgeonly", "openai", f"{s.url}/v1", KEY, max_concurrent,
                                  ("judge",), "", timeout_s),
    }


def listener() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1024)
    return s


@dataclass
class Opened:
    session: Session
    ledger: CallLedger
    evidence: Path
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lines(self) -> list[dict[str, Any]]:
        p = self.evidence / "model.jsonl"
        return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def open_session(gw: Gateway, evidence: Path, *, allowed: tuple[str, ...] = (), budget: Budget | None = None,
                 needles: tuple[bytes, ...] = (), role: str = "candidate", trial: tuple[str, int] = ("t1", 0),
                 bodies_allowance: int = 64 << 20, ledger: CallLedger | None = None) -> Opened:
    evidence.mkdir(parents=True, exist_ok=True)
    ledger = ledger or CallLedger(evidence, bodies_allowance=bodies_allowance)
    sock = listener()
    port = sock.getsockname()[1]
    grant = Grant(role=role, allowed=frozenset(allowed), budget=budget, needles=needles,  # type: ignore[arg-type]
                  trial=trial)
    return Opened(gw.open(sock, grant, ledger), ledger, evidence, port)


def gateway(s: Standin, *, replay: Replay | None = None, timeout_s: float = 3.0,
            max_concurrent: int = 16) -> Gateway:
    return Gateway(upstreams(s, timeout_s, max_concurrent), price, replay=replay)


def raw_call(port: int, method: str, target: str, body: bytes = b"",
             headers: dict[str, str] | None = None, *, timeout: float = 20) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request over a fresh socket: (status, headers, body)."""
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.putrequest(method, target, skip_host=False, skip_accept_encoding=True)
        for k, v in {"Content-Type": "application/json", **(headers or {})}.items():
            c.putheader(k, v)
        c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def no_proxy_env() -> None:
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        os.environ.pop(k, None)
