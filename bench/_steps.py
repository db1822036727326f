"""A benchmark step in a fresh interpreter: its wall time (start-up included), CPU time, peak
RSS and exit code. Shared by bench_read.py, bench_compare.py and bench_watch.py, whose steps
are a body of code that sets `code` from `kind` and `args`."""

from __future__ import annotations

import subprocess
import sys

_HEAD = """
import resource, sys, time
t = time.perf_counter()
kind, args = sys.argv[1], sys.argv[2:]
code = 0
"""

_TAIL = """
wall = time.perf_counter() - t
# VmHWM, not ru_maxrss: the latter carries over the forking parent's high-water mark.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
ru = resource.getrusage(resource.RUSAGE_SELF)
print("BENCH", kind, wall, ru.ru_utime + ru.ru_stime, hwm / 1024, code, file=sys.stderr)
"""


def measured(body: str) -> str:
    """The script of a step: `body` between the clock's start and the figures it prints."""
    return _HEAD + body.strip("\n") + "\n" + _TAIL


def run_step(script: str, kind: str, *args: str, env: dict[str, str]) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MB, exit code) of one step in a fresh interpreter."""
    p = subprocess.run([sys.executable, "-c", script, kind, *args], capture_output=True, text=True, env=env)
    line = next((x for x in p.stderr.splitlines() if x.startswith("BENCH")), None)
    if line is None:
        raise SystemExit(f"step {kind} failed:\n{p.stderr}")
    _, _, wall, cpu, rss, code = line.split()
    return float(wall), float(cpu), float(rss), int(code) if code.lstrip("-").isdigit() else -1
