"""ship and champion on a release log of 10,000 events (goal ≤ 0.3 s each, start-up included).

A log of N events (ships, tripwires, rollbacks and alerts, chained as the rig writes them) is
built on disk, its last release event putting a train's champion in service; a real train is
gated and signed in the same home. Each command then runs as a release script runs it,
`./eval.sh CMD ...` in a fresh process, its wall time measured around the process, beside
`./eval.sh --version` (the interpreter's start-up) and `champion` on a missing log (the
start-up of a command) in the same run.

The rig's home keeps a record of what it verified of each log (store/releases.py), so a
command re-checks only the lines added since. Both cases are measured: `champion` on a log
the home has read before, and its first read; `ship` on a fresh copy of the log each time
(so that each run appends the train's ship), after an untimed `champion` has read that copy
as a release script would, and on a copy new to the home (every line checked).
`check-release` (the checks `ship` reuses) is measured beside it. Wall times on a
shared machine include waiting for a core: CPU times (the process's user + system) are
printed too.

    .venv/bin/python bench/bench_release.py [--events 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

FIRST = "sha256:" + "a" * 64


def build_log(path: Path, n: int, serving_last: str, home: Path) -> None:
    """N events with a valid chain, each signed by the home's key as the rig signs them (every
    reader checks each signature it has not checked before); the last one a ship of `serving_last`."""
    from evalrig.core.digest import canonical_json
    from evalrig.models.inputs import PolicyTripwires, PolicyWatch
    from evalrig.models.releases import (
        AlertEvent,
        DecisionRef,
        ReleaseLine,
        RollbackEvent,
        ShipEvent,
        ShippedCandidate,
        TripwireEvent,
    )
    from evalrig.store.jsonl import chain_hash
    from evalrig.store.releases import head_path
    from evalrig.store.signing import heads, home_key

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    policy = {"name": "default", "version": 2, "digest": "sha256:" + "f" * 64}

    def ckpt(i: int) -> str:
        return "sha256:" + f"{i:064x}"

    def ship(i: int, cand: str, replaces: str) -> ShipEvent:
        return ShipEvent(seq=i, at=t0 + timedelta(minutes=i), decision=DecisionRef(
            path=f"trains/{i}/cmp/decisions/default-v2.json", digest="sha256:" + f"{i + 7:064x}"),
            verdict="promote", reason="quality", candidate=ShippedCandidate(checkpoint_id=cand, name=f"agent-{i}"),
            replaces=replaces, policy=policy, tripwires=PolicyTripwires(), watch=PolicyWatch(),  # type: ignore[arg-type]
            signed_by="alice")

    lines, prev, serving = [], None, FIRST
    key, home_heads = home_key(home), heads(home)
    for i in range(n):
        at = t0 + timedelta(minutes=i)
        if i == n - 1:
            e: object = ship(i, serving_last, serving)
        elif i % 4 == 0:
            e = ship(i, ckpt(i), serving)
            serving = ckpt(i)
        elif i % 4 == 1:
            e = TripwireEvent(seq=i, at=at, checkpoint_id=serving, bundle={"path": f"tw/{i}",  # type: ignore[arg-type]
                              "digest": "sha256:" + f"{i:064x}"}, checks=[{"name": "sealed", "held": True}], held=True)  # type: ignore[list-item]
        elif i % 8 == 2:
            e = AlertEvent(seq=i, at=at, alert_id=f"stall:fresh:{i}", alert_kind="stall", metric="fresh",
                           trains=[f"{i:012x}"], detail="no promote in 6 trains")
        else:
            e = RollbackEvent.model_validate({"seq": i, "at": at, "from": serving, "to": ckpt(i - 3),
                                              "trigger": "person", "by": "bob", "reason": "pages", "evidence": None})
            serving = ckpt(i - 3)
        plain = ReleaseLine(e).model_dump(mode="json")  # type: ignore[arg-type]
        plain["prev"] = prev
        plain["heads"] = home_heads
        raw = canonical_json(key.sign(plain))
        lines.append(raw)
        prev = chain_hash(raw)
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    head_path(path).write_text(prev + "\n")  # type: ignore[operator]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the process and its children, exit code, stderr)."""
    import resource

    r0, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    wall, r1 = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, p.returncode, p.stderr


def main() -> int:
    from release_kit import BETTER, agent, train

    from evalrig.store.layout import VERIFIED_LOGS
    from evalrig.store.signoff import sign

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home = root / "home"
        os.environ["EVALRIG_HOME"] = str(home)
        cand = agent(root / "cand", home, "agent-bench")
        decision = train(root, home, "t1", FIRST, cand, BETTER)
        sign(decision, True, "alice", None, datetime.now(UTC), home)
        log = root / "releases.jsonl"
        t = time.perf_counter()
        build_log(log, args.events, FIRST, home)
        print(f"built a release log of {args.events} events in {time.perf_counter() - t:.1f} s "
              f"({log.stat().st_size / 1e6:.1f} MB)")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")},
               "EVALRIG_HOME": str(home), "NO_COLOR": "1"}
        ev = str(ROOT / "eval.sh")
        fresh = root / "ship.jsonl"
        ship_argv = [ev, "ship", str(decision), "--checkpoint", str(cand), "--log", str(fresh)]
        commands = {
            "eval.sh --version": [ev, "--version"],
            "eval.sh champion --log EMPTY": [ev, "champion", "--log", str(root / "empty.jsonl")],
            "eval.sh champion --log L (first read)": [ev, "champion", "--log", str(log)],
            "eval.sh champion --log L": [ev, "champion", "--log", str(log)],
            "eval.sh ship D --checkpoint C --log L": ship_argv,
            "eval.sh ship ... (log new to the home)": ship_argv,
            "eval.sh check-release D --checkpoint C": [ev, "check-release", str(decision), "--checkpoint", str(cand)],
        }
        walls: dict[str, list[float]] = {k: [] for k in commands}
        cpus: dict[str, list[float]] = {k: [] for k in commands}
        records = home / VERIFIED_LOGS  # what the rig verified before (store/releases.py)
        for _ in range(args.repeat):
            for name, argv in commands.items():
                if "first read" in name or "new to the home" in name:
                    shutil.rmtree(records, ignore_errors=True)
                if argv is ship_argv:
                    # each ship appends the train's ship to a fresh copy of the log; a release
                    # script has read the log before (champion, watch), unless it is new to the home
                    shutil.copy(log, fresh)
                    shutil.copy(log.with_name(f".{log.name}.head"), fresh.with_name(f".{fresh.name}.head"))
                    if "new to the home" not in name:
                        timed([ev, "champion", "--log", str(fresh)], env)
                wall, cpu, code, err = timed(argv, env)
                assert code == (1 if "EMPTY" in name else 0), (name, err)  # nothing serves: 1
                walls[name].append(wall)
                cpus[name].append(cpu)
        print(f"{'command (fresh process, start-up included)':42} {'wall med':>9} {'wall min':>9} {'CPU med':>8}")
        for name in commands:
            print(f"{name:42} {statistics.median(walls[name]):9.3f} {min(walls[name]):9.3f} "
                  f"{statistics.median(cpus[name]):8.3f}")
        print(json.dumps({name: {"wall_median_s": round(statistics.median(walls[name]), 3),
                                 "wall_min_s": round(min(walls[name]), 3),
                                 "cpu_median_s": round(statistics.median(cpus[name]), 3)} for name in commands}))
        print(f"load average while measuring: {os.getloadavg()[0]:.1f} (2 cores; wall times include waiting)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
