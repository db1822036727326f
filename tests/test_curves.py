"""The curves (docs/curves.md): the gate ledger's `curve`, the public suite that never decides,
trains drawn from ledger lines, and every alert kind from synthetic ledgers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from gate_bundles import Side, Task, counts_tasks, write_run
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from evalrig.cli import app
from evalrig.core.curves import ReleaseMark, alerts, trains_of
from evalrig.core.digest import sha256_bytes
from evalrig.models.comparison import Curve, CurveSides, GateLedgerEntry, PolicyRef
from evalrig.models.inputs import PolicyWatch
from evalrig.store.compare import compare_bundles
from evalrig.store.decisions import gate_comparison

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
CHAMP = [5, 4, 5, 3, 2, 5, 0, 1, 4, 5, 3, 2, 5, 4, 1, 0, 5, 3, 4, 2, 3, 3, 4, 1, 2, 5, 0, 4, 3, 2]
BETTER = [min(5, c + 2) if i % 3 else c for i, c in enumerate(CHAMP)]


def with_public(tasks: dict[str, Task], passes: int, n: int = 8, k: int = 5) -> dict[str, Task]:
    out = dict(tasks)
    for i in range(n):
        out[f"public-{i:03d}"] = Task("public", [j < passes for j in range(k)])
    return out


def policy_file(dir: Path, extra: str = "") -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    path = dir / "policy.toml"
    path.write_bytes((ROOT / "policies" / "default.toml").read_bytes() + extra.encode())
    return path


def train(tmp_path: Path, home: Path, champ: dict[str, Task], cand: dict[str, Task]) -> tuple[Path, Path]:
    pol = policy_file(tmp_path)
    digest = sha256_bytes(pol.read_bytes())
    a = write_run(tmp_path / "a", Side("champ", champ, policy_digest=digest), home)
    b = write_run(tmp_path / "b", Side("cand", cand, policy_digest=digest), home)
    compare_bundles(a, b, tmp_path / "cmp", home)
    return tmp_path / "cmp", pol


# -- the ledger's curve and the public suite -----------------------------------------------


def test_a_candidate_much_worse_on_public_still_promotes_on_fresh(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, with_public(counts_tasks(CHAMP), 5),
                     with_public(counts_tasks(BETTER), 0))
    r = gate_comparison(cmp, pol, None, False, evalrig_home, NOW)
    assert r.decision.verdict == "promote" and r.exit_code == 0
    assert not any("public" in x.name for x in r.decision.rules)
    doc = json.loads((cmp / "comparison.json").read_text())
    public = doc["suites"]["public"]
    assert public["tasks"] == 8 and public["champion"]["pass_rate"] == 1.0 and public["candidate"]["pass_rate"] == 0.0
    assert "## public (8 tasks)" in (cmp / "comparison.md").read_text()
    assert "**Public benchmarks** (reported, read by no rule): pass rate 100.0 % (champion), 0.0 % (candidate)." \
        in r.verdict_file.read_text()
    line = json.loads((evalrig_home / "gates.jsonl").read_text().splitlines()[-1])
    curve = line["curve"]
    assert curve["public_pass_rate"] == {"champion": 1.0, "candidate": 0.0}
    assert curve["fixed_pass_rate"] == {"champion": 1.0, "candidate": 1.0}
    assert curve["fresh_mean_d"] == pytest.approx(doc["suites"]["fresh"]["mean_d"])
    tb = doc["suites"]["fresh"]["t_bounds"]
    assert curve["fresh_bounds"] == [tb["lower"], tb["upper"]]
    assert curve["cost_per_task"] == {"champion": pytest.approx(0.01), "candidate": pytest.approx(0.01)}


def test_the_curve_is_null_where_a_suite_is_empty(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, counts_tasks(CHAMP, fixed=0), counts_tasks(BETTER, fixed=0))
    r = gate_comparison(cmp, pol, None, False, evalrig_home, NOW)
    curve = json.loads((evalrig_home / "gates.jsonl").read_text().splitlines()[-1])["curve"]
    assert curve["public_pass_rate"] == {"champion": None, "candidate": None}
    assert curve["fixed_pass_rate"] == {"champion": None, "candidate": None}
    assert "Public benchmarks" not in r.verdict_file.read_text()


@pytest.mark.parametrize(("extra", "field"), [
    ("[public]\nmin_pass_rate = 0.5\n", "public"),
    ('', "tripwires.suite"),  # the default policy's [tripwires] suite, pointed at public
    ('[exceptions]\n', None),  # control: the policy itself is fine
])
def test_validate_and_gate_refuse_a_policy_with_a_public_table(tmp_path: Path, evalrig_home: Path,
                                                               extra: str, field: str | None) -> None:
    pol = policy_file(tmp_path / "pol", extra if field else "")
    if field == "tripwires.suite":
        pol.write_text(pol.read_text().replace('suite = "invariant"', 'suite = "public"'))
    runner = CliRunner()
    r = runner.invoke(app, ["validate", "--policies", str(pol.parent)], env={"EVALRIG_HOME": str(evalrig_home)})
    if field is None:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 4, r.output
    assert str(pol) in r.output and f"{field}: the public suite is read by no rule" in r.output
    cmp, _ = train(tmp_path / "t", evalrig_home, counts_tasks(CHAMP), counts_tasks(BETTER))
    r = runner.invoke(app, ["gate", str(cmp), "--policy", str(pol), "--advisory"],
                      env={"EVALRIG_HOME": str(evalrig_home)})
    assert r.exit_code == 4, r.output
    assert "policy.toml" in r.output and "public" in r.output and "read by no rule" in r.output


def test_a_rule_naming_the_public_suite_is_refused_with_its_field() -> None:
    from evalrig.core.errors import EvalrigError
    from evalrig.core.policy import parse_policy

    with pytest.raises(EvalrigError) as e:
        parse_policy({"name": "p", "version": 1, "fresh": {"efficiency_metric": "public"}}, "p.toml",
                     'name = "p"\nversion = 1\n[fresh]\nefficiency_metric = "public"\n')
    assert e.value.file == "p.toml" and e.value.field == "fresh.efficiency_metric" and e.value.line == 4
    assert int(e.value.code) == 4
    # An exception whose text says "public" is words, not a rule
    parse_policy({"name": "p", "version": 1, "exceptions": {"public": "public"}}, "p.toml")


# -- trains ------------------------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POL = PolicyRef(name="default", version=1, digest=sha256_bytes(b"policy"))


def curve(fixed: float | None = 0.95, d: float | None = 0.0, cost: float | None = 0.01,
          public: float | None = None) -> Curve:
    return Curve(fixed_pass_rate=CurveSides(champion=fixed, candidate=fixed), fresh_mean_d=d,
                 fresh_bounds=None if d is None else (d - 0.05, d + 0.05),
                 cost_per_task=CurveSides(champion=cost, candidate=cost),
                 public_pass_rate=CurveSides(champion=public, candidate=public))


def entry(i: int, c: Curve | None, verdict: str = "promote", advisory: bool = False,
          comparison: int | None = None) -> GateLedgerEntry:
    return GateLedgerEntry(
        candidate_id=sha256_bytes(f"cand{i}".encode()), champion_id=sha256_bytes(f"champ{i}".encode()),
        comparison_digest=sha256_bytes(f"cmp{i if comparison is None else comparison}".encode()),
        comparison_dir=f"/t/{i}", policy=POL, exception=None, advisory=advisory, verdict=verdict,  # type: ignore[arg-type]
        reason="quality" if verdict == "promote" else "tie", decision_digest=sha256_bytes(f"dec{i}".encode()),
        at=T0 + timedelta(days=i), curve=c)


def ledger(curves: list[Curve], verdicts: list[str] | None = None) -> list[GateLedgerEntry]:
    return [entry(i, c, (verdicts or ["promote"] * len(curves))[i]) for i, c in enumerate(curves)]


TH = PolicyWatch()


def kinds(es: list[GateLedgerEntry], marks: list[ReleaseMark] = (), th: object = TH) -> dict[str, list[str]]:  # type: ignore[assignment]
    out: dict[str, list[str]] = {}
    for a in alerts(trains_of(es).trains, marks, th):  # type: ignore[arg-type]
        out.setdefault(a.alert_kind, []).append(a.alert_id)
    return out


def test_one_train_per_comparison_its_last_non_advisory_gate_and_old_lines_counted() -> None:
    old = GateLedgerEntry.model_validate({k: v for k, v in json.loads(entry(0, curve()).model_dump_json()).items()
                                          if k != "curve"})
    assert old.curve is None  # a line written before the ledger carried `curve` still reads
    es = [old, entry(1, curve(0.9)), entry(2, curve(0.5), comparison=1), entry(3, curve(0.1), advisory=True),
          entry(4, curve(0.7))]
    t = trains_of(es)
    assert t.skipped == 1
    assert [x.value("fixed_pass_rate.champion") for x in t.trains] == [0.5, 0.7]
    assert [x.id for x in t.trains] == [sha256_bytes(b"cmp1")[7:19], sha256_bytes(b"cmp4")[7:19]]


# -- each alert kind -----------------------------------------------------------------------


def test_shift_fires_when_a_pass_rate_moves_and_stays_moved() -> None:
    es = ledger([curve(0.95)] * 4 + [curve(0.85)] * 4)
    got = kinds(es)
    assert sorted(got["shift"]) == sorted(f"shift:fixed_pass_rate.{s}:{trains_of(es).trains[0].id}"
                                          for s in ("champion", "candidate"))
    # a blip of one train does not move a window's mean by the threshold
    assert "shift" not in kinds(ledger([curve(0.95)] * 7 + [curve(0.85)]))
    # fewer than two full windows: nothing to compare
    assert "shift" not in kinds(ledger([curve(0.95)] * 3 + [curve(0.5)] * 4))


def test_shift_in_cost_by_the_ratio() -> None:
    got = kinds(ledger([curve(cost=0.01)] * 4 + [curve(cost=0.013)] * 4))
    assert {a.split(":")[1] for a in got["shift"]} == {"cost_per_task.champion", "cost_per_task.candidate"}
    assert "shift" not in kinds(ledger([curve(cost=0.01)] * 4 + [curve(cost=0.012)] * 4))


def test_a_shift_keeps_its_id_while_it_keeps_firing() -> None:
    base = [curve(0.95)] * 4 + [curve(0.85)] * 4
    first = kinds(ledger(base))["shift"]
    assert kinds(ledger(base + [curve(0.85)]))["shift"] == first


def test_floor_fires_after_floor_trains_below_it() -> None:
    es = ledger([curve(0.9), curve(0.7), curve(0.75), curve(0.79)])
    got = kinds(es)
    assert got["floor"] == [f"floor:fixed_pass_rate.champion:{trains_of(es).trains[1].id}"]
    assert "floor" not in kinds(ledger([curve(0.9), curve(0.7), curve(0.75), curve(0.81)]))
    assert "floor" not in kinds(ledger([curve(0.7), curve(0.7)]))


def test_stall_fires_without_a_promote_in_stall_trains() -> None:
    es = ledger([curve()] * 7, ["promote", "keep-champion", "promote-maintenance", "keep-champion",
                                "block", "keep-champion", "keep-champion"])
    got = kinds(es)
    assert got["stall"] == [f"stall:promote:{trains_of(es).trains[1].id}"]
    assert "stall" not in kinds(ledger([curve()] * 6, ["keep-champion"] * 5 + ["promote"]))


def mark(seq: int, kind: str) -> ReleaseMark:
    return ReleaseMark(seq=seq, kind=kind, at=T0 + timedelta(hours=seq), checkpoint_id=f"c{seq}",  # type: ignore[arg-type]
                       decision_digest=sha256_bytes(f"dec{seq}".encode()) if kind == "ship" else None)


def test_reversal_fires_on_two_rollbacks_within_the_window() -> None:
    es = ledger([curve()] * 6)
    marks = [mark(0, "ship"), mark(1, "ship"), mark(2, "rollback"), mark(3, "ship"), mark(4, "rollback")]
    got = alerts(trains_of(es).trains, marks, TH)
    rev = [a for a in got if a.alert_kind == "reversal"]
    assert [a.alert_id for a in rev] == ["reversal:rollback:event-2"]
    assert rev[0].trains == tuple(trains_of(es).trains[i].id for i in (0, 1, 3))
    spread = [mark(0, "rollback")] + [mark(i, "ship") for i in range(1, 7)] + [mark(7, "rollback")]
    assert not any(a.alert_kind == "reversal" for a in alerts((), spread, TH))


# -- properties --------------------------------------------------------------------------

rates = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(level=rates, noise=st.lists(st.floats(min_value=-0.012, max_value=0.012), min_size=0, max_size=40))
def test_a_ledger_with_no_shift_never_alerts_shift(level: float, noise: list[float]) -> None:
    # every window mean stays within 0.024 of every other: under shift_min (0.05)
    es = ledger([curve(min(1.0, max(0.0, level + n)), cost=0.01 * (1 + n)) for n in noise])
    assert "shift" not in kinds(es)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(rates, min_size=1, max_size=30), costs=st.lists(st.floats(0.001, 1.0), min_size=30,
       max_size=30), verdicts=st.lists(st.sampled_from(["promote", "keep-champion"]), min_size=40, max_size=40),
       extra=st.integers(min_value=1, max_value=10))
def test_alert_ids_are_stable_under_appending_unrelated_trains(values: list[float], costs: list[float],
                                                               verdicts: list[str], extra: int) -> None:
    """Trains with no fixed, public or cost figures (a train on fresh tasks alone) leave every
    shift and floor alert as it was; more trains without a promote keep a stall's id."""
    es = ledger([curve(v, cost=c) for v, c in zip(values, costs, strict=False)], verdicts[:len(values)])
    before = {a.alert_id for a in alerts(trains_of(es).trains, (), TH)}
    unrelated = [entry(len(es) + i, curve(None, cost=None), verdicts[len(values) + i]) for i in range(extra)]
    after = {a.alert_id for a in alerts(trains_of(es + unrelated).trains, (), TH)}
    figures = {a for a in before if not a.startswith("stall:")}
    assert figures == {a for a in after if not a.startswith("stall:")}
    idle = [entry(len(es) + i, curve(None, cost=None), "keep-champion") for i in range(extra)]
    after = {a.alert_id for a in alerts(trains_of(es + idle).trains, (), TH)}
    assert {a for a in before if a.startswith("stall:")} <= after


@settings(max_examples=60, deadline=None)
@given(values=st.lists(rates, min_size=8, max_size=30))
def test_alerts_are_a_function_of_the_prefix(values: list[float]) -> None:
    """What fires at train n depends only on trains 0..n: the same ids come out of a ledger
    however many later trains follow, evaluated at the same end."""
    es = ledger([curve(v) for v in values])
    t = trains_of(es).trains
    for n in range(len(t) - 3, len(t) + 1):
        a1 = {a.alert_id for a in alerts(t[:n], (), TH)}
        a2 = {a.alert_id for a in alerts(trains_of(es[:n]).trains, (), TH)}
        assert a1 == a2


def test_thresholds_come_from_the_object_given() -> None:
    es = ledger([curve(0.95)] * 2 + [curve(0.85)] * 2)
    assert "shift" not in kinds(es)
    assert "shift" in kinds(es, th=TH.model_copy(update={"shift_window": 2}))
