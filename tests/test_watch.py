"""`watch` through the CLI (docs/curves.md): alerts appended once per id, exit 3 while one
fires, thresholds from --policy, else the serving release's ship event, else the default;
a broken log refused; ledger lines without curves skipped and said."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_curves import curve, entry
from typer.testing import CliRunner

from evalrig.cli import app
from evalrig.core.digest import sha256_bytes
from evalrig.models.comparison import GateLedgerEntry, PolicyRef
from evalrig.models.inputs import PolicyTripwires, PolicyWatch
from evalrig.models.releases import DecisionRef, RollbackEvent, ShipEvent, ShippedCandidate
from evalrig.store.ledger import record_gate
from evalrig.store.releases import append_event

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run(home: Path, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, ["watch", *args], env={"EVALRIG_HOME": str(home)})
    return r.exit_code, r.stdout, r.stderr


def gates(home: Path, entries: list[GateLedgerEntry]) -> None:
    for e in entries:
        record_gate(home, e)


def ship(log: Path, i: int, watch: PolicyWatch | None = None) -> ShipEvent:
    return append_event(log, ShipEvent(
        seq=0, at=T0 + timedelta(days=i, hours=1), decision=DecisionRef(path=f"d{i}.json",
        digest=sha256_bytes(f"dec{i}".encode())), verdict="promote", reason="quality",
        candidate=ShippedCandidate(checkpoint_id=sha256_bytes(f"cand{i}".encode()), name=f"c{i}"),
        replaces=sha256_bytes(f"champ{i}".encode()),
        policy=PolicyRef(name="default", version=2, digest=sha256_bytes(b"policy")),
        tripwires=PolicyTripwires(), watch=watch or PolicyWatch(), signed_by="alice"))


def rollback(log: Path, i: int) -> None:
    append_event(log, RollbackEvent.model_validate({
        "seq": 0, "at": T0 + timedelta(days=i, hours=2), "from": sha256_bytes(f"cand{i}".encode()),
        "to": sha256_bytes(f"champ{i}".encode()), "trigger": "person", "by": "bob", "reason": "bad",
        "evidence": None}))


def alert_lines(log: Path) -> list[dict]:
    return [x for x in map(json.loads, log.read_text().splitlines()) if x["kind"] == "alert"]


def test_nothing_to_see_exits_0_and_writes_nothing(evalrig_home: Path) -> None:
    gates(evalrig_home, [entry(i, curve(0.95)) for i in range(5)])
    code, out, _ = run(evalrig_home)
    assert code == 0 and out.startswith("no alert over 5 trains")
    assert not (evalrig_home / "releases.jsonl").exists()


def test_a_floor_alert_is_appended_once_and_keeps_paging(evalrig_home: Path) -> None:
    gates(evalrig_home, [entry(i, curve(0.7)) for i in range(3)])
    code, out, _ = run(evalrig_home)
    assert code == 3, out
    log = evalrig_home / "releases.jsonl"
    lines = alert_lines(log)
    assert [x["alert_kind"] for x in lines] == ["floor"]
    a = lines[0]
    assert a["alert_id"] == f"floor:fixed_pass_rate.champion:{sha256_bytes(b'cmp0')[7:19]}"
    assert a["metric"] == "fixed_pass_rate.champion" and len(a["trains"]) == 3 and a["seq"] == 0
    assert a["prev"] is None and "below 0.8" in a["detail"]
    # again, and after one more bad train: still firing (exit 3), nothing appended
    code, out, _ = run(evalrig_home)
    assert code == 3 and "nothing appended" in out
    gates(evalrig_home, [entry(3, curve(0.7))])
    code, _, _ = run(evalrig_home, "--json")
    assert code == 3 and len(alert_lines(log)) == 1
    # the floor lifts: no alert fires, exit 0; the alert stays in the log
    gates(evalrig_home, [entry(4, curve(0.9))])
    code, _, _ = run(evalrig_home)
    assert code == 0 and len(alert_lines(log)) == 1


def test_every_kind_through_the_cli_with_json(evalrig_home: Path, tmp_path: Path) -> None:
    verdicts = ["keep-champion"] * 8
    gates(evalrig_home, [entry(i, curve(0.95 if i < 4 else 0.75, cost=0.01 if i < 4 else 0.02), verdicts[i])
                         for i in range(8)])
    log = tmp_path / "releases.jsonl"
    ship(log, 0)
    rollback(log, 0)
    ship(log, 1)
    rollback(log, 1)
    code, out, _ = run(evalrig_home, "--log", str(log), "--json")
    assert code == 3
    doc = json.loads(out)
    assert {a["alert_kind"] for a in doc["firing"]} == {"shift", "floor", "stall", "reversal"}
    assert all(a["new"] for a in doc["firing"]) and len(doc["appended"]) == len(doc["firing"])
    assert doc["trains"] == 8 and len(doc["series"]["trains"]) == 8
    assert [m["kind"] for m in doc["series"]["releases"]] == ["ship", "rollback", "ship", "rollback"]
    assert {a["alert_kind"] for a in alert_lines(log)} == {"shift", "floor", "stall", "reversal"}
    n = len(log.read_text().splitlines())
    code, out, _ = run(evalrig_home, "--log", str(log), "--json")
    assert code == 3 and json.loads(out)["appended"] == [] and len(log.read_text().splitlines()) == n


def test_thresholds_from_the_policy_then_the_serving_ship_then_the_default(evalrig_home: Path,
                                                                             tmp_path: Path) -> None:
    gates(evalrig_home, [entry(i, curve(0.85)) for i in range(3)])
    log = tmp_path / "releases.jsonl"
    assert run(evalrig_home, "--log", str(log))[0] == 0  # the default floor is 0.80
    ship(log, 9, PolicyWatch(floor_fixed_pass_rate=0.9))
    code, out, _ = run(evalrig_home, "--log", str(log))
    assert code == 3 and "thresholds from the ship event 0 of the serving release" in out
    pol = tmp_path / "p.toml"
    pol.write_text((ROOT / "policies" / "default.toml").read_text().replace(
        "floor_fixed_pass_rate = 0.80", "floor_fixed_pass_rate = 0.50"))
    code, out, _ = run(evalrig_home, "--log", str(log), "--policy", str(pol))
    assert code == 0 and f"thresholds from {pol}" in out and out.startswith("no alert")


def test_a_log_edited_by_one_byte_is_refused_naming_the_line(evalrig_home: Path, tmp_path: Path) -> None:
    gates(evalrig_home, [entry(i, curve(0.7)) for i in range(3)])
    log = tmp_path / "releases.jsonl"
    ship(log, 0)
    ship(log, 1)
    data = log.read_bytes().replace(b'"signed_by":"alice"', b'"signed_by":"alicf"', 1)
    log.write_bytes(data)
    code, out, err = run(evalrig_home, "--log", str(log))
    assert code == 4
    assert err.startswith(f"error: {log}:2: the file's hash chain breaks at this line")
    assert not alert_lines(log)


def test_ledger_lines_without_curves_are_skipped_and_said(evalrig_home: Path) -> None:
    gates(evalrig_home, [entry(i, None) for i in range(2)] + [entry(2, curve())])
    code, out, err = run(evalrig_home)
    assert code == 0 and "over 1 train" in out
    assert "2 trains not drawn" in err
    code, out, _ = run(evalrig_home, "--json")
    assert json.loads(out)["skipped"] == 2


@pytest.mark.parametrize("hostile", ["floor:x\n\u001b[31m", "a" * 10])
def test_alert_ids_already_in_the_log_are_text_not_trusted_markup(evalrig_home: Path, tmp_path: Path,
                                                                  hostile: str) -> None:
    """An alert id in the log that is not one watch computes never hides a real alert."""
    from evalrig.models.releases import AlertEvent

    gates(evalrig_home, [entry(i, curve(0.7)) for i in range(3)])
    log = tmp_path / "releases.jsonl"
    append_event(log, AlertEvent(seq=0, at=T0, alert_id=hostile, alert_kind="floor", metric="m", trains=[],
                                 detail="written by hand"))
    code, _, _ = run(evalrig_home, "--log", str(log))
    assert code == 3 and len(alert_lines(log)) == 2


def test_a_ledger_line_of_the_wrong_shape_is_named_by_its_model(evalrig_home: Path) -> None:
    """watch reads the ledger's lines for a few fields; a line that is not the shape the rig
    writes (its last line edited: no later line's prev covers it) is refused naming it."""
    gates(evalrig_home, [entry(i, curve(0.95)) for i in range(3)])
    path = evalrig_home / "gates.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[-1] = lines[-1].replace(b'"fixed_pass_rate":{"candidate":0.95', b'"fixed_pass_rate":{"candidate":"high"')
    path.write_bytes(b"".join(lines))
    code, _, err = run(evalrig_home)
    assert code == 4
    assert f"{path}:3" in err and "curve.fixed_pass_rate.candidate" in err


@pytest.mark.parametrize(("key", "value", "field"), [
    ("decision_digest", "sha256:" + "Z" * 64, "decision_digest"),
    ("champion_id", "champ-3", "champion_id"),
    ("reason", "because", "reason"),
    ("fresh_content", ["sha256:abc"], "fresh_content.0"),
    ("policy", {"name": "default", "version": 2, "digest": "sha256:short"}, "policy.digest"),
    ("schema_version", "2.0", "schema_version"),
    ("exception", 7, "exception"),
    ("surplus", 1, "surplus"),
])
def test_watch_refuses_a_ledger_line_that_gate_refuses(evalrig_home: Path, key: str, value: object,
                                                       field: str) -> None:
    """The last line of the ledger edited by hand (no later line's prev covers it): watch's fast
    reader checks what the ledger's model checks (digest formats, words, keys), so it reads no
    line that gate, reading the ledger through the model, refuses."""
    from evalrig.core.digest import canonical_line
    from evalrig.core.errors import EvalrigError
    from evalrig.store.ledger import all_gates

    gates(evalrig_home, [entry(i, curve(0.95)) for i in range(3)])
    path = evalrig_home / "gates.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[-1] = canonical_line({**json.loads(lines[-1]), key: value})
    path.write_bytes(b"".join(lines))
    with pytest.raises(EvalrigError):
        all_gates(evalrig_home)  # what gate (and sign, check-release) read it through
    code, _, err = run(evalrig_home)
    assert code == 4, err
    assert f"{path}:3" in err and field in err, err


def test_the_history_example_pages_every_kind(tmp_path: Path) -> None:
    """examples/watch-history.py, as a newcomer runs it: each alert kind is raised once."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, str(ROOT / "examples" / "watch-history.py"), str(tmp_path / "h")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    kinds = [x["alert_kind"] for x in alert_lines(tmp_path / "h" / "releases.jsonl")]
    assert set(kinds) == {"shift", "floor", "stall", "reversal"}
    assert len(kinds) == len({x["alert_id"] for x in alert_lines(tmp_path / "h" / "releases.jsonl")})
    assert "-> watch exit 3" in p.stdout and "train  1: promote" in p.stdout


def blocked_on_locks() -> int:
    """Lock requests waiting in the kernel (lines `N: -> FLOCK ...` of /proc/locks)."""
    return sum("->" in line for line in Path("/proc/locks").read_text().splitlines())


def test_two_watches_at_once_append_each_alert_once(evalrig_home: Path, tmp_path: Path) -> None:
    """Real processes that all read the log before any appends (the test holds the log's lock
    until each waits for it): each finds the alerts new, and each but the first finds them in
    the log once it holds the lock, so the log keeps one of each."""
    import os
    import subprocess
    import time

    from evalrig.store.releases import appending

    gates(evalrig_home, [entry(i, curve(0.7), "keep-champion") for i in range(6)])
    log = tmp_path / "releases.jsonl"
    env = {**os.environ, "EVALRIG_HOME": str(evalrig_home)}
    evalrig = ROOT / ".venv" / "bin" / "evalrig"
    waiting = blocked_on_locks()
    with appending(log):
        procs = [subprocess.Popen([str(evalrig), "watch", "--log", str(log)], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for _ in range(4)]
        deadline = time.monotonic() + 300
        while blocked_on_locks() < waiting + len(procs) and time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.05)  # polling what the kernel says, not guessing a duration
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [3] * 4, [p.stderr.read() for p in procs if p.stderr]  # type: ignore[union-attr]
    ids = [x["alert_id"] for x in alert_lines(log)]
    assert sorted(ids) == sorted(set(ids)) and {i.split(":")[0] for i in ids} == {"floor", "stall"}
    assert [json.loads(x)["seq"] for x in log.read_text().splitlines()] == list(range(len(ids)))
