"""The README's first command, `examples/release-train.sh`, run for real through eval.sh: the
whole life of a release (docs/release-engineers.md) — gate, sign, ship, tripwire, retire, a
second ship, a person's rollback, watch — each step leaving its record, and a second run of
the script on the same train directory changing nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from release_kit import ROOT, recompute_chain

SCRIPT = ROOT / "examples" / "release-train.sh"


def train(home: Path, dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update({"EVALRIG_HOME": str(home), "NO_COLOR": "1", "JOBS": "2"})
    return subprocess.run([str(SCRIPT), str(dir)], capture_output=True, text=True, env=env, timeout=1800,
                          stdin=subprocess.DEVNULL)


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.slow
def test_the_release_train_runs_a_releases_whole_life_and_again_changes_nothing(tmp_path: Path) -> None:
    home, dir = tmp_path / "home", tmp_path / "train"
    p = train(home, dir)
    assert p.returncode == 0, p.stderr[-3000:]  # the README: 0 when all of it went through

    # gate and sign: the decisions in the gate ledger and the home's sign-offs
    decisions = [dir / "comparison" / "decisions" / "default-v2.json",
                 dir / "maintenance" / "comparison" / "decisions" / "default-v2+security-patch.json"]
    assert [json.loads(d.read_text())["verdict"] for d in decisions] == ["promote", "promote-maintenance"]
    assert [g["verdict"] for g in lines(home / "gates.jsonl")] == ["promote", "promote-maintenance"]
    assert len(lines(home / "signoffs.jsonl")) == 2

    # ship, tripwire, ship, a person's rollback, the ship again: in this order, one chain
    log = dir / "releases.jsonl"
    events = recompute_chain(log)
    assert [(e["kind"], e.get("trigger")) for e in events] == [
        ("ship", None), ("tripwire", None), ("ship", None), ("rollback", "person"), ("ship", None)]
    first, tripwire, maint, rollback, again = events
    assert tripwire["held"] and tripwire["checkpoint_id"] == first["candidate"]["checkpoint_id"]
    assert maint["note"] == again["note"] == "shipped as maintenance, no win claimed"
    assert (rollback["from"], rollback["to"]) == (maint["candidate"]["checkpoint_id"], maint["replaces"])
    assert rollback["by"] and rollback["reason"] and rollback["evidence"] is None
    assert again["decision"] == maint["decision"] and again["replaces"] == rollback["to"]

    # retire: the train's fresh tasks left its own copy of the task set, some into fixed/ (locked)
    retired = json.loads((dir / "comparison" / "retire.json").read_text())
    assert retired["complete"] and retired["kept"] == "candidate"
    moved = retired["graduated"] + retired["retired"]
    assert len(moved) == 30 and not any((dir / "tasks" / "fresh").iterdir())
    assert {m["why"] for m in retired["graduated"]} <= {"failed", "sample"}
    assert sum(m["why"] == "sample" for m in retired["graduated"]) == 2
    lock = (dir / "tasks" / "fixed.lock").read_text()
    assert all(m["task_id"] in lock for m in retired["graduated"])
    assert all((dir / "tasks" / m["dest"]).is_dir() for m in moved)
    assert not (ROOT / "tasks" / "retired").exists()  # the repository's task set is not the train's

    # watch ran over both trains (nothing to page), and the history verified
    assert "no alert over 2 trains" in p.stdout

    # the README sends the signer to report.html: sign made it again, so it says who signed;
    # the train ends with a summary: each verdict, each report, what serves now
    for d in decisions:
        html = (d.parent.parent / "report.html").read_text()
        assert "Not signed yet" not in html and "Signed: approved by release-train example" in html
    summary = p.stdout[p.stdout.rindex("== summary"):].splitlines()
    assert summary[1:] == [
        f"verdict: PROMOTE the candidate ({decisions[0].with_suffix('.md')})",
        f"report: {dir / 'comparison' / 'report.html'}",
        f"verdict: PROMOTE the candidate (maintenance) ({decisions[1].with_suffix('.md')})",
        f"report: {dir / 'maintenance' / 'comparison' / 'report.html'}",
        f"serving now: {again['candidate']['checkpoint_id']}", summary[6], summary[7]]
    assert summary[6].startswith("  name: ") and summary[7] == "  since: event #4 (ship)"

    # the same command again: resumes, skips what it did, and writes nothing new
    def state() -> list[bytes]:
        return [log.read_bytes(), (dir / "comparison" / "retire.json").read_bytes(),
                (home / "signoffs.jsonl").read_bytes(), (dir / "tasks" / "fixed.lock").read_bytes()]

    before = state()
    p = train(home, dir)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "retired before" in p.stdout and "rolled back by a person before" in p.stdout
    assert state() == before
