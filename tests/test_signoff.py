"""sign and check-release (docs/gate.md, docs/security.md) on gated comparisons of built bundles."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from gate_bundles import Side, counts_tasks, write_run

from evalrig.core.digest import sha256_bytes
from evalrig.core.errors import EvalrigError, ExitCode
from evalrig.store.checkpoint import checkpoint_id, seal
from evalrig.store.compare import compare_bundles
from evalrig.store.decisions import gate_comparison
from evalrig.store.signoff import check_release, sign

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
CHAMP = [5, 4, 5, 3, 2, 5, 0, 1, 4, 5, 3, 2, 5, 4, 1, 0, 5, 3, 4, 2, 3, 3, 4, 1, 2, 5, 0, 4, 3, 2]
BETTER = [min(5, c + 2) if i % 3 else c for i, c in enumerate(CHAMP)]


def make_checkpoint(dir: Path, name: str, home: Path) -> str:
    dir.mkdir(parents=True)
    (dir / "checkpoint.toml").write_text(f'name = "{name}"\n[agent]\ncommand = ["python3", "agent.py"]\n')
    (dir / "agent.py").write_text("print('hi')\n")
    seal(dir, home, NOW - timedelta(days=1))
    return checkpoint_id(dir).digest


def gated(tmp_path: Path, home: Path, cand_counts: list[int], advisory: bool = False,
          seal_home: Path | None = None) -> tuple[Path, Path]:
    """(decision file, candidate checkpoint dir) of a gated train. `seal_home`: where the
    candidate was sealed, when not in `home`."""
    pol = tmp_path / "policy.toml"
    pol.write_bytes((ROOT / "policies" / "default-v1.toml").read_bytes())
    digest = sha256_bytes(pol.read_bytes())
    ckpt = tmp_path / "candidate"
    cid = make_checkpoint(ckpt, "cand", seal_home or home)
    a = write_run(tmp_path / "a", Side("champ", counts_tasks(CHAMP), policy_digest=digest), home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks(cand_counts), policy_digest=digest, ckpt=cid,
                                       sealed=False, sealed_at=NOW - timedelta(days=1),
                                       fresh_created_at=NOW - timedelta(hours=12)), home)
    compare_bundles(a, b, tmp_path / "cmp", home)
    r = gate_comparison(tmp_path / "cmp", pol, None, advisory, home, NOW)
    return r.decision_file, ckpt


def signoffs(decision: Path) -> list[dict]:
    return [json.loads(x) for x in (decision.parent / "signoffs.jsonl").read_text().splitlines()]


def test_approve_a_promotion_and_release(tmp_path: Path, evalrig_home: Path) -> None:
    decision, ckpt = gated(tmp_path, evalrig_home, BETTER)
    assert json.loads(decision.read_text())["verdict"] == "promote"
    s = sign(decision, True, "alice", None, NOW + timedelta(minutes=30), evalrig_home)
    assert s.agrees_with_gate and s.open_s == 1800 and s.action == "approve"
    line = signoffs(decision)[0]
    assert line["decision_digest"] == sha256_bytes(decision.read_bytes())
    assert line["candidate_checkpoint_id"] == checkpoint_id(ckpt).digest and line["by"] == "alice"
    r = check_release(decision, ckpt, evalrig_home)
    assert r.approved, r.reason


def test_no_signoff_is_not_approved(tmp_path: Path, evalrig_home: Path) -> None:
    decision, ckpt = gated(tmp_path, evalrig_home, BETTER)
    r = check_release(decision, ckpt, evalrig_home)
    assert not r.approved and "no sign-off" in r.reason


def test_a_later_rejection_counts(tmp_path: Path, evalrig_home: Path) -> None:
    decision, ckpt = gated(tmp_path, evalrig_home, BETTER)
    sign(decision, True, "alice", None, NOW, evalrig_home)
    sign(decision, False, "bob", "the fresh set leaked into training", NOW + timedelta(hours=1), evalrig_home)
    r = check_release(decision, ckpt, evalrig_home)
    assert not r.approved and "bob" in r.reason
    assert [s["agrees_with_gate"] for s in signoffs(decision)] == [True, False]


def test_another_checkpoint_is_not_released(tmp_path: Path, evalrig_home: Path) -> None:
    decision, _ = gated(tmp_path, evalrig_home, BETTER)
    sign(decision, True, "alice", None, NOW, evalrig_home)
    other = tmp_path / "other"
    make_checkpoint(other, "other", evalrig_home)
    r = check_release(decision, other, evalrig_home)
    assert not r.approved and "the decision names" in r.reason


def test_a_modified_candidate_is_not_released(tmp_path: Path, evalrig_home: Path) -> None:
    decision, ckpt = gated(tmp_path, evalrig_home, BETTER)
    sign(decision, True, "alice", None, NOW, evalrig_home)
    (ckpt / "agent.py").write_text("print('changed')\n")
    assert not check_release(decision, ckpt, evalrig_home).approved


def test_an_unregistered_candidate_is_not_released(tmp_path: Path, evalrig_home: Path) -> None:
    # sealed in another home: this one never registered it (removing the seal registry instead
    # is a cut file, which every later signed line of the home sees: test_hometrust.py)
    decision, ckpt = gated(tmp_path, evalrig_home, BETTER, seal_home=tmp_path / "elsewhere")
    sign(decision, True, "alice", "the gate blocks an unsealed candidate; overridden", NOW, evalrig_home)
    r = check_release(decision, ckpt, evalrig_home)
    assert not r.approved and "not registered" in r.reason


def test_override_needs_a_reason(tmp_path: Path, evalrig_home: Path) -> None:
    decision, ckpt = gated(tmp_path, evalrig_home, CHAMP)  # keep-champion (tie)
    with pytest.raises(EvalrigError) as e:
        sign(decision, True, "alice", None, NOW, evalrig_home)
    assert e.value.code == ExitCode.USAGE and "--reason" in e.value.message
    assert not (decision.parent / "signoffs.jsonl").exists()
    s = sign(decision, True, "alice", "ships a fix the suite cannot see", NOW, evalrig_home)
    assert not s.agrees_with_gate and s.verdict == "keep-champion"
    assert check_release(decision, ckpt, evalrig_home).approved  # a person overrode, on the record
    # rejecting a keep-champion agrees with the gate and needs no reason
    assert sign(decision, False, "bob", None, NOW, evalrig_home).agrees_with_gate


def test_rejecting_a_promotion_needs_a_reason(tmp_path: Path, evalrig_home: Path) -> None:
    decision, _ = gated(tmp_path, evalrig_home, BETTER)
    with pytest.raises(EvalrigError) as e:
        sign(decision, False, "alice", "", NOW, evalrig_home)
    assert e.value.code == ExitCode.USAGE


def test_advisory_is_refused(tmp_path: Path, evalrig_home: Path) -> None:
    decision, ckpt = gated(tmp_path, evalrig_home, BETTER, advisory=True)
    assert decision.parent.name == "advisory"
    with pytest.raises(EvalrigError) as e:
        sign(decision, True, "alice", None, NOW, evalrig_home)
    assert e.value.code == ExitCode.INVALID and "advisory" in e.value.message
    assert not check_release(decision, ckpt, evalrig_home).approved


def test_a_tampered_decision_is_refused(tmp_path: Path, evalrig_home: Path) -> None:
    decision, ckpt = gated(tmp_path, evalrig_home, CHAMP)
    decision.write_bytes(decision.read_bytes().replace(b'"keep-champion"', b'"promote"', 1))
    with pytest.raises(EvalrigError) as e:
        sign(decision, True, "mallory", None, NOW, evalrig_home)
    assert e.value.code == ExitCode.INVALID and "does not verify" in e.value.message
    assert not check_release(decision, ckpt, evalrig_home).approved


def test_a_tampered_comparison_is_refused(tmp_path: Path, evalrig_home: Path) -> None:
    decision, _ = gated(tmp_path, evalrig_home, BETTER)
    comparison = decision.parent.parent / "comparison.json"
    comparison.write_bytes(comparison.read_bytes() + b" ")
    with pytest.raises(EvalrigError) as e:
        sign(decision, True, "alice", None, NOW, evalrig_home)
    assert e.value.code == ExitCode.INVALID and e.value.file == str(comparison)


def test_approving_after_tampering_then_restoring(tmp_path: Path, evalrig_home: Path) -> None:
    # A sign-off binds the decision's digest: an edited decision has none of its sign-offs.
    decision, ckpt = gated(tmp_path, evalrig_home, BETTER)
    sign(decision, True, "alice", None, NOW, evalrig_home)
    original = decision.read_bytes()
    decision.write_bytes(original.replace(b'"quality"', b'"efficiency"', 1))
    assert not check_release(decision, ckpt, evalrig_home).approved
    decision.write_bytes(original)
    assert check_release(decision, ckpt, evalrig_home).approved


def test_a_signoff_refused_in_the_bundle_is_not_recorded_in_the_home(tmp_path: Path, evalrig_home: Path) -> None:
    decision, ckpt = gated(tmp_path, evalrig_home, BETTER)
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(b"")
    (decision.parent / "signoffs.jsonl").symlink_to(target)
    with pytest.raises(EvalrigError) as e:
        sign(decision, True, "alice", None, NOW, evalrig_home)
    assert e.value.code == ExitCode.INVALID and "symbolic link" in e.value.message
    assert target.read_bytes() == b""
    assert not (evalrig_home / "signoffs.jsonl").exists() or (evalrig_home / "signoffs.jsonl").read_bytes() == b""
    assert not check_release(decision, ckpt, evalrig_home).approved


def test_the_home_signoff_is_the_bundle_line_with_its_prev(tmp_path: Path, evalrig_home: Path) -> None:
    decision, ckpt = gated(tmp_path, evalrig_home, BETTER)
    sign(decision, True, "alice", None, NOW, evalrig_home)
    home = [json.loads(x) for x in (evalrig_home / "signoffs.jsonl").read_text().splitlines()]
    assert len(home) == 1 and "prev" in home[0] and "prev" not in signoffs(decision)[0]
    assert {k: v for k, v in home[0].items() if k != "prev"} == signoffs(decision)[0]
    # the bundle's copy alone releases nothing: with the home's line gone, not approved
    (evalrig_home / "signoffs.jsonl").unlink()
    r = check_release(decision, ckpt, evalrig_home)
    assert not r.approved and "no sign-off" in r.reason
