#!/usr/bin/env python3
"""A year of release trains in a few seconds, and what `watch` pages about (docs/curves.md).

    .venv/bin/python examples/watch-history.py [DIR]      # DIR defaults to a new temporary folder

Twelve trains are written as the gate writes them (one gate-ledger line each, with its
curve) and the release events as `ship` and `rollback` write them (through the rig's own
library, into DIR/home and DIR/releases.jsonl), without running any agent: the story is
what matters here. After each train a scheduled job runs `eval.sh watch`, and this prints
what it said and its exit code (3: page a person). The story:

- trains 1-4: a healthy champion (fixed pass rate 95 %, 1.0 cent a task), two wins shipped;
- trains 5-8: the model provider changed something: fixed pass rate ~86 %, cost 1.4 cents,
  and it stays there -> `shift` (the last 4 trains against the 4 before them);
- trains 6-11: no win -> `stall` after 6 trains without a promote;
- trains 9-10: two maintenance releases shipped and each rolled back -> `reversal`;
- trains 9-11: the champion's fixed pass rate below 80 % three trains in a row -> `floor`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (fixed pass rate of the champion, of the candidate, cost per task, verdict, shipped, rolled back)
STORY = [
    (0.95, 0.96, 0.010, "promote", True, False),
    (0.96, 0.95, 0.010, "keep-champion", False, False),
    (0.95, 0.97, 0.011, "promote", True, False),
    (0.96, 0.95, 0.010, "promote", False, False),  # a win nobody shipped
    (0.87, 0.86, 0.014, "promote", True, False),   # the provider's change lands
    (0.86, 0.86, 0.014, "keep-champion", False, False),
    (0.85, 0.87, 0.014, "keep-champion", False, False),
    (0.86, 0.85, 0.014, "keep-champion", False, False),
    (0.78, 0.79, 0.014, "promote-maintenance", True, True),
    (0.76, 0.77, 0.015, "promote-maintenance", True, True),
    (0.74, 0.75, 0.015, "keep-champion", False, False),
    (0.75, 0.74, 0.015, "block", False, False),
]


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    from evalrig.core.digest import sha256_bytes
    from evalrig.models.comparison import Curve, CurveSides, GateLedgerEntry, PolicyRef
    from evalrig.models.inputs import PolicyTripwires, PolicyWatch
    from evalrig.models.releases import DecisionRef, RollbackEvent, ShipEvent, ShippedCandidate
    from evalrig.store.ledger import record_gate
    from evalrig.store.releases import append_event, read_log

    out = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="watch-history-"))
    home, log = out / "home", out / "releases.jsonl"
    if log.exists() or (home / "gates.jsonl").exists():
        print(f"{out} already holds a history; give a new folder", file=sys.stderr)
        return 2
    home.mkdir(parents=True, exist_ok=True)
    policy = PolicyRef(name="default", version=2, digest=sha256_bytes((ROOT / "policies" / "default.toml").read_bytes()))
    t0 = datetime(2026, 1, 5, 9, tzinfo=UTC)

    def ckpt(n: int) -> str:
        return sha256_bytes(f"demo-agent build {n}".encode())

    serving, previous = ckpt(0), ckpt(0)
    env = {**os.environ, "EVALRIG_HOME": str(home)}
    pages = 0
    for n, (champ, cand, cost, verdict, shipped, rolled_back) in enumerate(STORY, start=1):
        at = t0 + timedelta(weeks=n)
        reason = {"promote": "quality", "promote-maintenance": "maintenance", "keep-champion": "tie",
                  "block": "regression"}[verdict]
        decision = sha256_bytes(f"decision of train {n}".encode())
        d = 0.08 if verdict == "promote" else 0.0
        record_gate(home, GateLedgerEntry(
            candidate_id=ckpt(n), champion_id=serving, comparison_digest=sha256_bytes(f"train {n}".encode()),
            comparison_dir=str(out / f"train-{n:02d}"), policy=policy, exception=None, advisory=False,
            verdict=verdict, reason=reason, decision_digest=decision, at=at,  # type: ignore[arg-type]
            curve=Curve(fixed_pass_rate=CurveSides(champion=champ, candidate=cand), fresh_mean_d=d,
                        fresh_bounds=(d - 0.04, d + 0.04), cost_per_task=CurveSides(champion=cost, candidate=cost),
                        public_pass_rate=CurveSides(champion=0.5, candidate=0.5))))
        if shipped:
            append_event(log, ShipEvent(
                seq=0, at=at + timedelta(hours=2), decision=DecisionRef(path=f"train-{n:02d}/decisions/default-v2.json",
                digest=decision), verdict=verdict, reason=reason,  # type: ignore[arg-type]
                candidate=ShippedCandidate(checkpoint_id=ckpt(n), name="demo-agent"), replaces=serving,
                policy=policy, tripwires=PolicyTripwires(), watch=PolicyWatch(), signed_by="dana",
                note="shipped as maintenance, no win claimed" if verdict == "promote-maintenance" else None), home)
            previous, serving = serving, ckpt(n)
        if rolled_back:
            append_event(log, RollbackEvent.model_validate({
                "seq": 0, "at": at + timedelta(days=1), "from": serving, "to": previous, "trigger": "person",
                "by": "dana", "reason": "customers report wrong dates", "evidence": None}), home)
            serving = previous
        p = subprocess.run([str(ROOT / "eval.sh"), "watch", "--log", str(log)], env=env, capture_output=True,
                           text=True)
        pages += p.returncode == 3
        print(f"== train {n:2d}: {verdict:19s} fixed {champ:.2f}, cost {cost:.3f}"
              f"{', shipped' if shipped else ''}{', rolled back' if rolled_back else ''} -> watch exit {p.returncode}")
        for line in p.stdout.splitlines()[1:]:
            if line.startswith("  "):
                print(line)
        if p.returncode not in (0, 3):
            print(p.stderr, file=sys.stderr)
            return p.returncode
    print(f"\n{pages} of {len(STORY)} scheduled watches paged. The alert events, as the release log keeps them:")
    for e in read_log(log, home).events:
        if e.kind == "alert":
            print(f"  #{e.seq} {e.alert_kind:8s} {e.alert_id}: {e.detail}")
    print(f"\nhome: {home}\nrelease log: {log}\nagain: EVALRIG_HOME={home} {ROOT / 'eval.sh'} watch --log {log} --json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
