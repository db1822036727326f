"""What the model gateway adds to a model call (docs/gateway.md), against the same calls
made straight to the provider in the same run.

Run: .venv/bin/python bench/bench_gateway.py [--calls 500] [--rss-calls 10000] [--clients 32]

The stand-in provider (examples/model-standin/) runs on loopback as its own process; the
gateway runs in a second process, as in a rig (its sessions on listeners of their own, a
real ledger in a temporary directory, a canary needle to scan for); this process is only
the clients (raw HTTP/1.1 over keep-alive connections, so the client's own cost is small
and the same on both paths). Prints:
- added latency per non-streamed call, median and p99 (goal <= 2 ms / <= 10 ms);
- time to the first streamed chunk, through vs direct (goal <= 2 ms more);
- calls/s through one rig process with many concurrent clients (goal >= 500 on 2 cores),
  and the direct figure (the stand-in's own ceiling bounds both);
- the rig process's RSS growth over `--rss-calls` calls (goal <= 50 MB);
each beside its direct baseline and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "examples" / "model-standin" / "standin.py"
KEY = "sk-bench-key"
MODEL = "gpt-bench"
STANDIN_PORT = [0]

_RIG = r"""
import socket, sys, tempfile
from pathlib import Path
from evalrig.attempt.gateway import CallLedger, Gateway, Grant, UpstreamConn

port = int(sys.argv[1])
ups = {"openai": UpstreamConn("openai", "openai", f"http://127.0.0.1:{port}/v1", sys.argv[2], 256,
                              ("candidate",), "", 60.0)}
price = lambda q, p, u, t: (u.input_tokens + 2 * u.output_tokens) / 1e6
gw = Gateway(ups, price)
work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
sessions = []

def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) / 1024

for cmd in sys.stdin:
    parts = cmd.split()
    if parts[0] == "open":
        ports = []
        for _ in range(int(parts[1])):
            s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1024)
            d = work / f"a{len(sessions)}"; d.mkdir()
            grant = Grant("candidate", frozenset({"openai/gpt-bench", "openai/gpt-bench+slow-0"}), None,
                          (b"CANARY-bench-0123456789abcdef",), ("t", len(sessions)))
            sessions.append(gw.open(s, grant, CallLedger(d, bodies_allowance=1 << 30)))
            ports.append(s.getsockname()[1])
        print(" ".join(map(str, ports)), flush=True)
    elif parts[0] == "rss":  # once every call's line is written
        import time
        while any(s._calls for s in sessions):
            time.sleep(0.05)
        print(f"{rss():.1f}", flush=True)
    elif parts[0] == "quit":  # closing waits for every call's line; then count them
        for s in sessions:
            s.close()
        gw.close()
        print(sum(len((work / f"a{i}" / "model.jsonl").read_bytes().splitlines())
                  for i in range(len(sessions)) if (work / f"a{i}" / "model.jsonl").exists()), flush=True)
        import shutil; shutil.rmtree(work, ignore_errors=True)
        break
"""


def body(stream: bool, i: int) -> bytes:
    return json.dumps({"model": MODEL, "stream": stream, "max_tokens": 64,
                       "messages": [{"role": "user", "content": f"what is the answer to question {i}?"}]}).encode()


class Conn:
    """A keep-alive HTTP/1.1 connection: one request at a time, the response read whole (or
    to its first SSE event)."""

    made = [0, 0]  # calls made (direct, through the gateway)

    def __init__(self, port: int, path: str, auth: str) -> None:
        self.port, self.path, self.auth = port, path, auth
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None

    async def call(self, data: bytes, first_event: bool = False) -> tuple[float, float]:
        """(seconds to the first body byte of an SSE event or the whole body, seconds to the end)."""
        if self.w is None:
            self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
        Conn.made[self.port != STANDIN_PORT[0]] += 1
        assert self.r is not None
        t0 = time.perf_counter()
        self.w.write(f"POST {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Authorization: Bearer {self.auth}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        head = await self.r.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status != 200:
            raise RuntimeError(f"status {status}: {head!r}")
        low = head.lower()
        t_first = 0.0
        if b"transfer-encoding: chunked" in low:
            while True:
                size = int((await self.r.readuntil(b"\r\n")).strip(), 16)
                chunk = await self.r.readexactly(size + 2)
                if not t_first and (size == 0 or b"data:" in chunk):
                    t_first = time.perf_counter() - t0
                if size == 0:
                    break
        else:
            n = int(low.split(b"content-length:")[1].split(b"\r\n")[0])
            await self.r.readexactly(n)
            t_first = time.perf_counter() - t0
        return t_first, time.perf_counter() - t0

    def close(self) -> None:
        if self.w is not None:
            self.w.close()


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


async def paired(direct: Conn, through: Conn, n: int, stream: bool) -> tuple[list[float], list[float]]:
    """Alternating calls on each path: (direct, through) seconds (first event when streamed)."""
    d, t = [], []
    for i in range(n):
        a = await direct.call(body(stream, i))
        b = await through.call(body(stream, i))
        d.append(a[0] if stream else a[1])
        t.append(b[0] if stream else b[1])
    return d, t


async def load(conns: list[Conn], total: int) -> float:
    """calls/s of `total` calls spread over `conns` running at once."""
    per = total // len(conns)

    async def one(c: Conn) -> None:
        for i in range(per):
            await c.call(body(False, i))

    t0 = time.perf_counter()
    await asyncio.gather(*(one(c) for c in conns))
    return per * len(conns) / (time.perf_counter() - t0)


class Rig:
    def __init__(self, standin_port: int) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.p = subprocess.Popen([sys.executable, "-c", _RIG, str(standin_port), KEY], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, cmd: str) -> str:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()


async def main_async(args: argparse.Namespace, standin_port: int, rig: Rig) -> None:
    ports = [int(x) for x in rig.ask(f"open {args.sessions + 1}").split()]
    path = "/openai/v1/chat/completions"
    direct = Conn(standin_port, "/v1/chat/completions", KEY)
    through = Conn(ports[0], path, "agent-token")
    await paired(direct, through, 50, False)  # warm both paths
    d, t = await paired(direct, through, args.calls, False)
    added = [b - a for a, b in zip(d, t, strict=True)]
    print(f"non-streamed call, {args.calls} each, alternating (ms):")
    print(f"  direct   median {statistics.median(d) * 1e3:7.3f}  p99 {pct(d, 0.99) * 1e3:7.3f}")
    print(f"  gateway  median {statistics.median(t) * 1e3:7.3f}  p99 {pct(t, 0.99) * 1e3:7.3f}"
          f"   ({statistics.median(t) / statistics.median(d):.2f}x direct)")
    print(f"  added    median {statistics.median(added) * 1e3:7.3f}  p99 {pct(added, 0.99) * 1e3:7.3f}"
          "   (goal <= 2 / <= 10)")
    d, t = await paired(direct, through, args.calls // 2, True)
    print(f"streamed call, time to the first chunk, {args.calls // 2} each (ms):")
    print(f"  direct   median {statistics.median(d) * 1e3:7.3f}  p99 {pct(d, 0.99) * 1e3:7.3f}")
    print(f"  gateway  median {statistics.median(t) * 1e3:7.3f}  p99 {pct(t, 0.99) * 1e3:7.3f}"
          f"   added median {(statistics.median(t) - statistics.median(d)) * 1e3:.3f} (goal <= 2)")
    direct.close()
    through.close()

    per_session = max(1, args.clients // args.sessions)
    dconns = [Conn(standin_port, "/v1/chat/completions", KEY) for _ in range(args.clients)]
    tconns = [Conn(p, path, "agent-token") for p in ports[1:] for _ in range(per_session)]
    n = args.load_calls
    rd = await load(dconns, n)
    rt = await load(tconns, n)
    print(f"throughput, {n} calls, {len(dconns)} concurrent clients ({args.sessions} sessions through the gateway):")
    print(f"  direct  {rd:7.0f} calls/s")
    print(f"  gateway {rt:7.0f} calls/s   ({rt / rd:.2f}x direct; goal >= 500)")
    before = float(rig.ask("rss"))
    done = 0
    while done < args.rss_calls:
        step = min(args.rss_calls - done, 2000)
        await load(tconns, step)
        done += step
    after = float(rig.ask("rss"))
    print(f"rig RSS over {args.rss_calls} more calls: {before:.1f} -> {after:.1f} MB "
          f"(+{after - before:.1f} MB; goal <= 50)")
    for c in dconns + tconns:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--load-calls", type=int, default=4000)
    ap.add_argument("--rss-calls", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        standin = subprocess.Popen([sys.executable, str(STANDIN), "--port", "0", "--port-file", str(port_file),
                                    "--key", KEY], stderr=subprocess.DEVNULL)
        rig = None
        try:
            while not port_file.exists():
                time.sleep(0.02)
            port = int(port_file.read_text())
            STANDIN_PORT[0] = port
            rig = Rig(port)
            print(f"bench_gateway: os.cpu_count()={os.cpu_count()}, load average {os.getloadavg()[0]:.1f} "
                  "(a shared machine: other work runs beside)")
            asyncio.run(main_async(args, port, rig))
        finally:
            if rig is not None:
                lines = rig.ask("quit")
                rig.p.wait(60)
                print(f"model.jsonl lines after the sessions closed: {lines} for {Conn.made[1]} calls "
                      "through the gateway (every call recorded)")
            standin.terminate()
            standin.wait(10)


if __name__ == "__main__":
    main()
