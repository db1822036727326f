"""Speed and memory of the episode relay (issue 13's targets), with a floor measured in the same run.

    .venv/bin/python bench/bench_episode.py [--episodes N] [--rss-episodes N]

Figures:
- the rig's added latency per relayed message: a no-op agent and a no-op driver exchange
  20 turns with one tool call each; the agent times each round trip (its message out, the
  next delivery in: two relayed messages). The same two programs are then joined by a bare
  relay written here (a selector loop that passes lines on, checks nothing and writes
  nothing), and the added latency per relayed message is half the difference of the round
  trips, at the median and at p99 (goals <= 1 ms and <= 5 ms). The rig's side includes its
  frame checks and one synced transcript line per frame (two per relayed message), in a
  bundle under --out's directory (default: the system's temporary directory).
- the rig's peak RSS over 200 episodes at --jobs 2 (goal <= 150 MB): `python -m evalrig run`
  as a subprocess, its rusage from wait4 (which includes its largest reaped descendant).
- the machine's load average before and after, since the figures move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalrig.store.bundle import load_run  # noqa: E402
from evalrig.store.checkpoint import seal  # noqa: E402

TURNS = 20

AGENT = """\
import json, os, sys, time
rtt, sent = [], None
def say(message):
    global sent
    sys.stdout.write(json.dumps({"type": "message", "message": message}) + "\\n")
    sys.stdout.flush()
    sent = time.perf_counter_ns()
n = 0
for line in sys.stdin:
    if sent is not None:
        rtt.append(time.perf_counter_ns() - sent)
        sent = None
    frame = json.loads(line)
    if frame["type"] == "end":
        break
    n += 1
    if n <= TURNS:
        say({"role": "assistant", "content": None, "tool_calls": [{"id": "c" + str(n), "type": "function",
             "function": {"name": "noop", "arguments": "{}"}}]})
    else:
        say({"role": "assistant", "content": "done"})
with open(os.path.join(os.environ["EVALRIG_OUT"], "rtt.json"), "w") as f:
    json.dump(rtt, f)
""".replace("TURNS", str(TURNS))

DRIVER = """\
import json, sys
def send(frame):
    sys.stdout.write(json.dumps(frame) + "\\n")
    sys.stdout.flush()
sys.stdin.readline()
send({"type": "session", "tools": [{"type": "function", "function": {"name": "noop"}}],
      "messages": [{"role": "user", "content": "go"}]})
for line in sys.stdin:
    frame = json.loads(line)
    if frame["type"] == "finish":
        break
    calls = frame["message"].get("tool_calls") or []
    if calls:
        send({"type": "reply", "messages": [{"role": "tool", "tool_call_id": c["id"], "content": "ok"}
                                             for c in calls]})
    else:
        send({"type": "end", "reason": "done"})
"""


def make_inputs(root: Path, home: Path) -> tuple[Path, Path]:
    ck = root / "ck"
    ck.mkdir()
    (ck / "agent.py").write_text(AGENT)
    (ck / "checkpoint.toml").write_text('name = "bench"\n[agent]\ncommand = ["python3", "agent.py"]\n')
    seal(ck, home, datetime.now(UTC))
    task = root / "tasks" / "fixed" / "relay"
    (task / "driver").mkdir(parents=True)
    (task / "driver" / "driver.py").write_text(DRIVER)
    (task / "prompt.md").write_text("Call noop 20 times.\n")
    (task / "task.toml").write_text(
        f'timeout_s = 120\n[episode]\ndriver = ["python3", "driver.py"]\nmax_turns = {TURNS + 5}\n'
        'turn_timeout_s = 30\ndriver_timeout_s = 30\n[verifier]\nkind = "exact"\nexpected = "done"\n')
    return ck, root / "tasks"


def rig_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env["EVALRIG_HOME"] = str(home)
    return env


def run_rig(ck: Path, tasks: Path, out: Path, repeat: int, jobs: int, env: dict[str, str]) -> tuple[float, int]:
    """(peak RSS in MB, attempts) of one `evalrig run`."""
    argv = [sys.executable, "-m", "evalrig", "run", "--checkpoint", str(ck), "--tasks", str(tasks),
            "--out", str(out), "--repeat", str(repeat), "--jobs", str(jobs), "--sandbox", "process", "--json"]
    p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"rig failed ({p.returncode}): {p.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024, load_run(out).manifest.counts.attempts


def handling_ms(out: Path) -> list[float]:
    """The rig's own time per relayed frame, from its transcript: from the line recording a
    frame it received to the line recording the frame it sent on (reading, checking,
    writing the transcript; not the time waiting for a CPU before it could read)."""
    got: list[float] = []
    for t in out.glob("attempts/*/transcript.jsonl"):
        lines = [json.loads(x) for x in t.read_text().splitlines()]
        for a, b in zip(lines, lines[1:], strict=False):
            if a["to"] == "rig" and b["from"] == "rig" and b["frame"]["type"] in ("message", "turn"):
                got.append(b["t_ms"] - a["t_ms"])
    return got


def rig_rtts(out: Path) -> list[int]:
    b = load_run(out)
    got: list[int] = []
    for r in b.results:
        assert r.status == "passed" and r.termination == "driver_end", (r.status, r.termination, r.error)
        got += json.loads((out / "attempts" / r.attempt_id / "out" / "rtt.json").read_text())
    return got


def bare_relay(ck: Path, tasks: Path, scratch: Path) -> list[int]:
    """The same agent and driver joined by a loop that only passes whole lines on."""
    work = scratch / "bare"
    shutil.rmtree(work, ignore_errors=True)
    (work / "out").mkdir(parents=True)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "EVALRIG_EPISODE": "1", "EVALRIG_OUT": str(work / "out")}
    agent = subprocess.Popen(["python3", "agent.py"], cwd=ck, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, bufsize=0)
    driver = subprocess.Popen(["python3", "driver.py"], cwd=tasks / "fixed" / "relay" / "driver", env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert agent.stdin and agent.stdout and driver.stdin and driver.stdout
    driver.stdin.write(b'{"type": "start", "task_id": "relay", "attempt_id": "a", "seed": 1}\n')
    peer = {agent.stdout.fileno(): driver, driver.stdout.fileno(): agent}
    partial = {fd: b"" for fd in peer}
    sel = selectors.DefaultSelector()
    for fd in peer:
        sel.register(fd, selectors.EVENT_READ)
    first_from_driver = True
    open_fds = 2
    while open_fds:
        for key, _ in sel.select():
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                sel.unregister(key.fd)
                open_fds -= 1
                continue
            partial[key.fd] += chunk
            *lines, partial[key.fd] = partial[key.fd].split(b"\n")
            for line in lines:
                target = peer[key.fd]
                frame = json.loads(line)
                if key.fd == driver.stdout.fileno():
                    if first_from_driver:
                        first_from_driver = False
                    elif frame["type"] == "reply":
                        line = json.dumps({"type": "turn", "messages": frame["messages"]}).encode()
                    elif frame["type"] == "end":
                        agent.stdin.write(b'{"type": "end", "termination": "driver_end"}\n')
                        agent.stdin.close()
                        driver.stdin.write(b'{"type": "finish", "termination": "driver_end"}\n')
                        driver.stdin.close()
                        continue
                assert target.stdin is not None
                target.stdin.write(line + b"\n")
    agent.wait()
    driver.wait()
    return json.loads((work / "out" / "rtt.json").read_text())


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10, help="episodes timed each way (default 10)")
    parser.add_argument("--rss-episodes", type=int, default=200, help="episodes of the RSS run (default 200)")
    parser.add_argument("--out", type=Path, default=None, help="where the bundles go (default: a temporary directory)")
    a = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-episode-", dir=a.out) as tmp_s:
        tmp = Path(tmp_s)
        home = tmp / "home"
        home.mkdir()
        ck, tasks = make_inputs(tmp, home)
        env = rig_env(home)
        run_rig(ck, tasks, tmp / "warm", 1, 1, env)  # caches, the bwrap probe, the .pyc files
        rig: list[int] = []
        bare: list[int] = []
        handling: list[float] = []
        for i in range(a.episodes):  # interleaved, so load changes hit both alike
            out = tmp / f"lat-{i}"
            run_rig(ck, tasks, out, 1, 1, env)
            rig += rig_rtts(out)
            handling += handling_ms(out)
            bare += bare_relay(ck, tasks, tmp)
        rig_ms = [x / 1e6 for x in rig]
        bare_ms = [x / 1e6 for x in bare]
        print(f"round trips timed: {len(rig_ms)} through the rig, {len(bare_ms)} through the bare relay "
              f"({TURNS + 1} per episode; each is two relayed messages)")
        for name, q in (("median", 0.5), ("p99", 0.99)):
            r, b = pct(rig_ms, q), pct(bare_ms, q)
            added = (r - b) / 2
            goal = 1.0 if q == 0.5 else 5.0
            print(f"  {name:6s} round trip: rig {r:7.3f} ms, bare {b:7.3f} ms (ratio {r / b:5.2f}x); "
                  f"added per relayed message {added:6.3f} ms (goal <= {goal:g}: "
                  f"{'ok' if added <= goal else 'MISSED'})")
        print(f"  mean   round trip: rig {statistics.mean(rig_ms):7.3f} ms, bare {statistics.mean(bare_ms):7.3f} ms")
        print(f"  the rig's own handling of a relayed frame (transcript stamps, {len(handling)} frames): "
              f"median {pct(handling, 0.5):.3f} ms, p99 {pct(handling, 0.99):.3f} ms, max {max(handling):.3f} ms")
        t0 = time.monotonic()
        rss, attempts = run_rig(ck, tasks, tmp / "rss", a.rss_episodes, 2, env)
        took = time.monotonic() - t0
        print(f"peak RSS over {attempts} episodes at --jobs 2: {rss:.1f} MB (goal <= 150: "
              f"{'ok' if rss <= 150 else 'MISSED'}); {attempts / took:.1f} episodes/s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
