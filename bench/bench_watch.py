"""watch at scale: a gate ledger of 10,000 trains and a release log of 10,000 events (goal ≤ 1 s,
start-up included).

The home's gates.jsonl (chained, each line with its `curve`) and a release log (ships, tripwire
runs and a few rollbacks, chained) are written as the rig writes them, then each step runs in a
fresh Python process so that its wall time includes start-up:
- baseline: read both files and parse every line (orjson), nothing else;
- watch: `evalrig watch --log FILE` the first time (it appends the alerts that fire);
- watch again: the steady state of a scheduled job (nothing new to append).

    .venv/bin/python bench/bench_watch.py [--trains 10000] [--events 10000]
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _steps import measured, run_step  # noqa: E402

STEP = measured(r"""
if kind == "baseline":
    import orjson
    n = 0
    for a in args:
        with open(a, "rb") as f:
            for line in f:
                orjson.loads(line); n += 1
    code = 0
else:
    from evalrig.cli import app
    try:
        app(args, standalone_mode=False)
        code = 0
    except SystemExit as e:
        code = e.code
""")


step = functools.partial(run_step, STEP)


def chained(lines: list[dict], strict: bool) -> bytes:
    from evalrig.core.digest import canonical_line
    from evalrig.store.jsonl import chain_hash

    out = []
    prev: str | None = None if strict else chain_hash(b"")
    for obj in lines:
        raw = canonical_line({**obj, "prev": prev})
        out.append(raw)
        prev = chain_hash(raw[:-1])
    return b"".join(out)


def build(home: Path, log: Path, trains: int, events: int) -> None:
    from evalrig.core.digest import sha256_bytes, to_plain
    from evalrig.models.comparison import Curve, CurveSides, GateLedgerEntry, PolicyRef
    from evalrig.models.inputs import PolicyTripwires, PolicyWatch

    rnd = random.Random(7)
    t0 = datetime(2020, 1, 1, tzinfo=UTC)
    pol = PolicyRef(name="default", version=2, digest=sha256_bytes(b"policy"))
    gates = []
    for i in range(trains):
        fixed = 0.9 + rnd.uniform(-0.01, 0.01)
        c = Curve(fixed_pass_rate=CurveSides(champion=fixed, candidate=fixed), fresh_mean_d=0.01,
                  fresh_bounds=(-0.02, 0.04), cost_per_task=CurveSides(champion=0.01, candidate=0.01),
                  public_pass_rate=CurveSides(champion=0.5, candidate=0.5))
        gates.append(to_plain(GateLedgerEntry(
            candidate_id=sha256_bytes(b"c%d" % i), champion_id=sha256_bytes(b"c%d" % (i - 1)),
            comparison_digest=sha256_bytes(b"cmp%d" % i), comparison_dir=f"/trains/{i}", policy=pol,
            exception=None, advisory=False, verdict="promote" if i % 3 == 0 else "keep-champion",
            reason="quality" if i % 3 == 0 else "tie", decision_digest=sha256_bytes(b"d%d" % i),
            at=t0 + timedelta(hours=i), fresh_content=[sha256_bytes(b"f%d" % i)], curve=c)))
    home.mkdir(parents=True, exist_ok=True)
    (home / "gates.jsonl").write_bytes(chained(gates, strict=False))
    watch, trip = to_plain(PolicyWatch()), to_plain(PolicyTripwires())
    evs = []
    for i in range(events):
        at = (t0 + timedelta(hours=i, minutes=30)).isoformat().replace("+00:00", "Z")
        if i % 2 == 0:
            evs.append({"schema_version": "1.0", "seq": i, "at": at, "kind": "ship",
                        "decision": {"path": f"d{i}.json", "digest": sha256_bytes(b"d%d" % i)},
                        "verdict": "promote", "reason": "quality",
                        "candidate": {"checkpoint_id": sha256_bytes(b"c%d" % i), "name": f"c{i}"},
                        "replaces": sha256_bytes(b"c%d" % (i - 2)), "policy": to_plain(pol),
                        "tripwires": trip, "watch": watch, "signed_by": "alice", "note": None})
        else:
            evs.append({"schema_version": "1.0", "seq": i, "at": at, "kind": "tripwire",
                        "checkpoint_id": sha256_bytes(b"c%d" % (i - 1)),
                        "bundle": {"path": f"/tw/{i}", "digest": sha256_bytes(b"b%d" % i)},
                        "checks": [{"name": "sealed", "held": True, "detail": ""}], "held": True})
    log.write_bytes(chained(evs, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trains", type=int, default=10_000)
    ap.add_argument("--events", type=int, default=10_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home, log = Path(tmp) / "home", Path(tmp) / "releases.jsonl"
        build(home, log, a.trains, a.events)
        env = {**os.environ, "EVALRIG_HOME": str(home)}
        print(f"ledger {a.trains} trains ({(home / 'gates.jsonl').stat().st_size / 1e6:.1f} MB), "
              f"log {a.events} events ({log.stat().st_size / 1e6:.1f} MB)")
        for name, args in (("baseline", (str(home / "gates.jsonl"), str(log))),
                           ("watch", ("watch", "--log", str(log), "--quiet")),
                           ("watch again", ("watch", "--log", str(log), "--quiet"))):
            wall, cpu, rss, code = step("baseline" if name == "baseline" else "watch", *args, env=env)
            print(f"{name:12s} {wall:6.3f} s wall  {cpu:6.3f} s CPU  {rss:6.1f} MB peak  exit {code}")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall time grows with it)")


if __name__ == "__main__":
    main()
