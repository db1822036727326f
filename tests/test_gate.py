"""The gate (docs/gate.md): every rule held and not held, the verdict table in order, nulls,
exceptions, and the shell's refusals, determinism and ledger."""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from gate_bundles import (
    POLICY_DIGEST,
    T0,
    Side,
    Task,
    chain,
    counts_tasks,
    view_from_counts,
    write_run,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from evalrig.core.compare import build_comparison, history_check
from evalrig.core.digest import sha256_bytes
from evalrig.core.errors import EvalrigError, ExitCode
from evalrig.core.gate import decide
from evalrig.core.policy import parse_policy
from evalrig.models.comparison import Decision
from evalrig.models.inputs import PolicyFile
from evalrig.store.compare import compare_bundles
from evalrig.store.decisions import gate_comparison

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = tomllib.loads((ROOT / "policies" / "default-v1.toml").read_text())
NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)

# 30 fresh tasks: the champion's counts, a clearly better and a slightly different candidate.
CHAMP = [5, 4, 5, 3, 2, 5, 0, 1, 4, 5, 3, 2, 5, 4, 1, 0, 5, 3, 4, 2, 3, 3, 4, 1, 2, 5, 0, 4, 3, 2]
BETTER = [min(5, c + 2) if i % 3 else c for i, c in enumerate(CHAMP)]
WORSE = [max(0, c - 2) if i % 3 else c for i, c in enumerate(CHAMP)]


def policy(**sections: dict) -> PolicyFile:
    data = json.loads(json.dumps(DEFAULT))
    for section, values in sections.items():
        data[section].update(values)
    return parse_policy(data, "test-policy")


def rules(d: Decision) -> dict[str, bool]:
    return {r.name: r.held for r in d.rules}


def rule(d: Decision, name: str) -> dict:
    return next(r.model_dump() for r in d.rules if r.name == name)


def run_gate(tmp_path: Path, home: Path, champ: Side, cand: Side, pol: PolicyFile | None = None,
             exception: str | None = None, allow_incomplete: bool = False, digest: str = POLICY_DIGEST) -> Decision:
    a = write_run(tmp_path / "a", champ, home)
    b = write_run(tmp_path / "b", cand, home)
    c = compare_bundles(a, b, tmp_path / "cmp", home, allow_incomplete)
    return decide(c, pol or policy(), digest, exception, False, sha256_bytes(b"comparison"))


def sides(champ: list[int], cand: list[int], **cand_kw: object) -> tuple[Side, Side]:
    return Side("champ", counts_tasks(champ)), Side("cand", counts_tasks(cand), **cand_kw)  # type: ignore[arg-type]


# -- the verdict table -------------------------------------------------------------------


def test_promote_quality(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP, BETTER))
    assert (d.verdict, d.reason) == ("promote", "quality")
    assert all(rules(d)[n] for n in rules(d) if n.startswith("invariant."))
    q = rule(d, "fresh.quality")
    assert q["discordant"] >= 6 and q["mean_d"] >= 0.05 and q["p_one_sided"] <= 0.025


def test_every_rule_carries_its_numbers_flat_and_as_an_object(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, Side("champ", counts_tasks(CHAMP)), Side("cand", counts_tasks(BETTER)))
    for r in d.rules:
        flat = {k: v for k, v in rule(d, r.name).items() if k not in ("name", "held", "says", "numbers")}
        assert r.numbers == flat and flat, r.name
    q = json.loads(json.dumps(rule(d, "fresh.quality")))
    assert q["numbers"]["p_one_sided"] == q["p_one_sided"] and q["numbers"]["discordant"] == q["discordant"]


def test_min_tasks_counts_only_tasks_scored_on_both_sides(tmp_path: Path, evalrig_home: Path) -> None:
    # the candidate's run lacks one fresh task: the suite has 30, the evidence 29
    cand_tasks = counts_tasks(BETTER)
    del cand_tasks["fresh-029"]
    d = run_gate(tmp_path, evalrig_home, Side("champ", counts_tasks(CHAMP)), Side("cand", cand_tasks),
                 pol=policy(fresh={"min_tasks": 30}))
    r = rule(d, "fresh.min_tasks")
    assert not r["held"] and (r["tasks"], r["tasks_in_suite"]) == (29, 30) and d.detectable.tasks == 29


def test_identical_is_a_tie(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP, CHAMP))
    assert (d.verdict, d.reason) == ("keep-champion", "tie")
    assert rules(d)["fresh.noninferior"] and not rules(d)["fresh.quality"]
    # se_d = 0: noninferiority floors se_d at 1/(k n), and so does the MDE, which is never
    # below min_discordant/(k n) = 6/150: the smallest mean difference quality could grant
    nf = rule(d, "fresh.noninferior")
    assert nf["se_d"] == 0 and nf["se_floored"] == pytest.approx(1 / 150)
    assert d.detectable.mde == pytest.approx(6 / 150)
    assert d.detectable.tasks_needed == 24  # 6 discordant tasks of 5 trials for +5 points


def test_identical_deterministic_sides_on_a_small_suite_are_inconclusive_not_a_tie(
        tmp_path: Path, evalrig_home: Path) -> None:
    """20 tasks of 5 trials cannot show +5 points: the quality rule needs 6 discordant
    tasks, a mean difference of at least 6/100. se_d = 0 is no evidence of precision."""
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP[:20], CHAMP[:20]))
    assert (d.verdict, d.reason) == ("keep-champion", "inconclusive")
    assert d.detectable.mde == pytest.approx(0.06) and d.detectable.tasks_needed == 24
    assert "+6.0 points" in d.summary


def test_an_exception_promotes_a_suite_too_small_to_judge_and_says_so(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP[:5], CHAMP[:5]), exception="security-patch")
    assert (d.verdict, d.reason) == ("promote-maintenance", "maintenance")
    assert not rules(d)["fresh.min_tasks"]
    assert "5 tasks, fewer than 20, too few to judge" in d.summary


def test_worse_is_a_loss(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP, WORSE))
    assert (d.verdict, d.reason) == ("keep-champion", "loss")
    assert rules(d)["fresh.loss"] and not rules(d)["fresh.noninferior"]


def test_too_few_fresh_tasks_is_inconclusive(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP[:10], BETTER[:10]))
    assert (d.verdict, d.reason) == ("keep-champion", "inconclusive")
    assert not rules(d)["fresh.min_tasks"]
    # every fresh.* rule needs fresh.min_tasks, even with a striking difference
    assert not any(rules(d)[n] for n in ("fresh.quality", "fresh.noninferior", "fresh.efficiency", "fresh.loss"))
    assert any("at least 20" in w for w in d.what_would_change)


def test_noisy_suite_is_inconclusive_with_tasks_needed(tmp_path: Path, evalrig_home: Path) -> None:
    # 20 tasks that swing both ways: the MDE exceeds the 5-point margin.
    champ = [5, 0] * 10
    cand = [0, 5] * 9 + [5, 0]
    d = run_gate(tmp_path, evalrig_home, *sides(champ, cand))
    assert (d.verdict, d.reason) == ("keep-champion", "inconclusive")
    det = d.detectable
    assert det.mde is not None and det.mde > 0.05
    assert det.tasks_needed is not None and det.tasks_needed > 20
    assert any(str(det.tasks_needed) in w for w in d.what_would_change)


def test_promote_efficiency(tmp_path: Path, evalrig_home: Path) -> None:
    # Cost the rig metered on both sides (docs/gate.md: the only cost that can grant).
    champ = Side("champ", counts_tasks(CHAMP, cost=0.03, cost_source="metered"))
    cand = Side("cand", counts_tasks(CHAMP, cost=0.01, cost_source="metered"))
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert (d.verdict, d.reason) == ("promote", "efficiency")
    e = rule(d, "fresh.efficiency")
    assert e["ratio"] == pytest.approx(1 / 3) and e["upper_bound"] < 1
    assert (e["champion_source"], e["candidate_source"], e["metered"], e["why"]) == ("metered", "metered", True, None)


@pytest.mark.parametrize(("champ_source", "cand_source", "words"), [
    ("reported", "reported", "both sides' cost figures are self-reported (the agents' own usage.json)"),
    ("metered", "reported", "the champion's cost figures are metered and the candidate's self-reported"),
    ("reported", "metered", "the champion's cost figures are self-reported (the agents' own usage.json) and "
                            "the candidate's metered"),
])
def test_self_reported_cost_never_grants(tmp_path: Path, evalrig_home: Path, champ_source: str,
                                         cand_source: str, words: str) -> None:
    """Issue #10 attack 3: the same figures as test_promote_efficiency, but the agent's own word on
    either side: the cost route is closed, and the rule says why in one sentence."""
    champ = Side("champ", counts_tasks(CHAMP, cost=0.03, cost_source=champ_source))
    cand = Side("cand", counts_tasks(CHAMP, cost=0.01, cost_source=cand_source))
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert d.verdict == "keep-champion" and d.reason in ("tie", "inconclusive")
    e = rule(d, "fresh.efficiency")
    assert not e["held"] and e["ratio"] == pytest.approx(1 / 3) and e["metered"] is False
    assert e["why"].startswith("The cost route to promotion is closed: a cost win needs cost the rig metered")
    assert words in e["why"] and e["why"].count(". ") == 0 and e["why"].endswith(".")
    assert any(e["why"] in w for w in d.what_would_change)


def test_metered_time_still_grants(tmp_path: Path, evalrig_home: Path) -> None:
    """wall_s is the rig's own measurement: an efficiency win on it stands (costs self-reported)."""
    champ = Side("champ", {k: Task(t.suite, t.passes, wall_s=3.0) for k, t in counts_tasks(CHAMP).items()})
    cand = Side("cand", {k: Task(t.suite, t.passes, wall_s=1.0) for k, t in counts_tasks(CHAMP).items()})
    d = run_gate(tmp_path, evalrig_home, champ, cand, policy(fresh={"efficiency_metric": "wall_s"}))
    assert (d.verdict, d.reason) == ("promote", "efficiency")
    e = rule(d, "fresh.efficiency")
    assert (e["champion_source"], e["candidate_source"], e["why"]) == ("metered", "metered", None)


def test_cheaper_but_worse_is_not_efficiency(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", counts_tasks(CHAMP, cost=0.03))
    cand = Side("cand", counts_tasks(WORSE, cost=0.01))
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert d.verdict == "keep-champion" and d.reason == "loss"
    assert not rules(d)["fresh.efficiency"]


def test_efficiency_uses_the_policy_metric_and_alpha(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", counts_tasks(CHAMP, cost=0.03))
    cand = Side("cand", counts_tasks(CHAMP, cost=0.01))
    d = run_gate(tmp_path, evalrig_home, champ, cand, policy(fresh={"efficiency_metric": "wall_s"}))
    assert not rules(d)["fresh.efficiency"] and rule(d, "fresh.efficiency")["ratio"] == pytest.approx(1.0)


def test_security_patch_exception_promotes_maintenance(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP, CHAMP), exception="security-patch")
    assert (d.verdict, d.reason, d.exception) == ("promote-maintenance", "maintenance", "security-patch")


def test_an_exception_waives_only_the_win(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP, BETTER), exception="security-patch")
    assert (d.verdict, d.reason) == ("promote", "quality")
    d = run_gate(tmp_path / "2", evalrig_home, *sides(CHAMP, WORSE), exception="security-patch")
    assert (d.verdict, d.reason) == ("keep-champion", "loss")
    d = run_gate(tmp_path / "3", evalrig_home, *sides(CHAMP, CHAMP, sandbox="process"), exception="security-patch")
    assert (d.verdict, d.reason) == ("block", "invariant")


def test_exception_with_an_empty_fresh_suite(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, *sides([], []), exception="security-patch")
    assert (d.verdict, d.reason) == ("promote-maintenance", "maintenance")
    assert not rules(d)["fresh.min_tasks"]


def test_unknown_exception_is_refused(tmp_path: Path, evalrig_home: Path) -> None:
    with pytest.raises(EvalrigError) as e:
        run_gate(tmp_path, evalrig_home, *sides(CHAMP, CHAMP), exception="friday")
    assert e.value.code == ExitCode.INVALID and "security-patch" in e.value.message


# -- invariants --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cand_kw", "failing"),
    [
        ({"subset": True}, "invariant.complete"),
        ({"sealed": False}, "invariant.sealed invariant.fresh-after-seal"),  # no registered sealed_at either
        ({"seal_matched": False}, "invariant.sealed"),
        ({"sandbox": "process"}, "invariant.isolated"),
        ({"policy_digest": None}, "invariant.policy-pinned"),
        ({"fresh_created_at": T0 - timedelta(minutes=1)}, "invariant.fresh-after-seal"),
        ({"fresh_created_at": T0}, "invariant.fresh-after-seal"),  # "after" is strict
        ({"canary_found": {"fresh-003"}}, "invariant.no-secret-leak"),
    ],
)
def test_each_invariant_blocks(tmp_path: Path, evalrig_home: Path, cand_kw: dict, failing: str) -> None:
    champ = Side("champ", counts_tasks(CHAMP), policy_digest=cand_kw.get("policy_digest", POLICY_DIGEST))
    cand = Side("cand", counts_tasks(BETTER), **cand_kw)
    a = write_run(tmp_path / "a", champ, evalrig_home)
    b = write_run(tmp_path / "b", cand, evalrig_home)
    c = compare_bundles(a, b, tmp_path / "cmp", evalrig_home)
    d = decide(c, policy(), POLICY_DIGEST, None, False, sha256_bytes(b"c"))
    assert (d.verdict, d.reason) == ("block", "invariant")
    assert [n for n, held in rules(d).items() if n.startswith("invariant.") and not held] == failing.split()
    # Its first sentence names the rule and what failed (issue #12 item 9: was "the invariant X does not hold")
    first, *others = failing.split()
    assert d.summary.startswith(f"Blocked: {first} does not hold: ")
    assert d.summary.endswith(f" Also failing: {', '.join(others)}." if others else ".")
    # a policy that does not list the check does not apply it
    names = [f.removeprefix("invariant.") for f in failing.split()]
    listed = [x for x in DEFAULT["invariants"]["checks"] if x not in names]
    d2 = decide(c, policy(invariants={"checks": listed}), POLICY_DIGEST, None, False, sha256_bytes(b"c"))
    assert not set(failing.split()) & set(rules(d2)) and (d2.verdict, d2.reason) == ("promote", "quality")


def test_history_rewritten_blocks(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", counts_tasks(CHAMP), history=chain([{"e": 1}, {"e": 2}]))
    cand = Side("cand", counts_tasks(BETTER), history=chain([{"e": 1}, {"e": 3}, {"e": 4}]))
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert (d.verdict, d.reason) == ("block", "invariant") and not rules(d)["invariant.history-preserved"]
    assert rule(d, "invariant.history-preserved")["champion_prefix"] is False


def test_history_extended_holds(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", counts_tasks(CHAMP), history=chain([{"e": 1}, {"e": 2}]))
    cand = Side("cand", counts_tasks(BETTER), history=chain([{"e": 1}, {"e": 2}, {"e": 4}]))
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert (d.verdict, d.reason) == ("promote", "quality")


def test_failing_invariant_suite_blocks(tmp_path: Path, evalrig_home: Path) -> None:
    cand_tasks = counts_tasks(BETTER)
    cand_tasks["inv-000"] = Task("invariant", [True] * 4 + [False])
    d = run_gate(tmp_path, evalrig_home, Side("champ", counts_tasks(CHAMP)), Side("cand", cand_tasks))
    assert (d.verdict, d.reason) == ("block", "invariant")
    assert rule(d, "invariant.invariant-suite")["failing_tasks"] == ["inv-000"]


def test_infra_error_rate_over_the_limit_fails_complete(tmp_path: Path, evalrig_home: Path) -> None:
    cand = Side("cand", counts_tasks(BETTER), status="incomplete", unscored={"fresh-001", "fresh-002"})
    d = run_gate(tmp_path, evalrig_home, Side("champ", counts_tasks(CHAMP)), cand, allow_incomplete=True)
    assert (d.verdict, d.reason) == ("block", "invariant") and not rules(d)["invariant.complete"]
    assert rule(d, "invariant.complete")["candidate_infra_error_rate"] > 0


def test_allow_incomplete_never_promotes(tmp_path: Path, evalrig_home: Path) -> None:
    cand = Side("cand", counts_tasks(BETTER), status="incomplete", unscored={"fresh-001"})
    listed = [x for x in DEFAULT["invariants"]["checks"] if x != "complete"]
    d = run_gate(tmp_path, evalrig_home, Side("champ", counts_tasks(CHAMP)), cand,
                 policy(invariants={"checks": listed}), allow_incomplete=True)
    assert rules(d)["fresh.quality"]  # the evidence is there ...
    assert (d.verdict, d.reason) == ("keep-champion", "inconclusive")  # ... and still no promotion


# -- fixed suite -------------------------------------------------------------------------


def fixed_tasks(fresh: list[int], fixed: list[int]) -> dict[str, Task]:
    out = counts_tasks(fresh, fixed=0)
    for i, n in enumerate(fixed):
        out[f"fixed-{i:03d}"] = Task("fixed", [j < n for j in range(5)])
    return out


def test_two_stable_fixed_tasks_failing_block_as_regression(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", fixed_tasks(CHAMP, [5, 5, 5, 5]))
    cand = Side("cand", fixed_tasks(BETTER, [0, 0, 5, 5]))
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert (d.verdict, d.reason) == ("block", "regression")
    assert [r["task_id"] for r in rule(d, "fixed.task")["regressed"]] == ["fixed-000", "fixed-001"]


def test_flaky_fixed_tasks_never_block(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", fixed_tasks(CHAMP, [4, 4, 5]))  # 4/5 = 0.8 < 0.9: flaky
    cand = Side("cand", fixed_tasks(BETTER, [0, 0, 5]))
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert rules(d)["fixed.task"] and rule(d, "fixed.task")["flaky"] == 2
    # but the aggregate sees them: 2 of 3 tasks worse, p_worse = 1/4 > 0.02
    assert rules(d)["fixed.aggregate"]


def test_fixed_aggregate_regression(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", fixed_tasks(CHAMP, [4] * 12))
    cand = Side("cand", fixed_tasks(BETTER, [2] * 12))  # flaky everywhere, worse everywhere
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert rules(d)["fixed.task"] and not rules(d)["fixed.aggregate"]
    assert (d.verdict, d.reason) == ("block", "regression")


def test_one_fixed_task_has_no_aggregate_to_fail(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", fixed_tasks(CHAMP, [4]))
    cand = Side("cand", fixed_tasks(BETTER, [3]))
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert rules(d)["fixed.aggregate"] and rule(d, "fixed.aggregate")["p_worse"] is None


def test_invariant_comes_before_regression(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", fixed_tasks(CHAMP, [5, 5, 5]))
    cand = Side("cand", fixed_tasks(BETTER, [0, 0, 5]), sandbox="process")
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert not rules(d)["fixed.task"] and (d.verdict, d.reason) == ("block", "invariant")


def test_regression_comes_before_a_win(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", fixed_tasks(CHAMP, [5, 5, 5]))
    cand = Side("cand", fixed_tasks(BETTER, [0, 5, 5]))
    d = run_gate(tmp_path, evalrig_home, champ, cand)
    assert rules(d)["fresh.quality"] and (d.verdict, d.reason) == ("block", "regression")


def test_quality_comes_before_efficiency(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, Side("champ", counts_tasks(CHAMP, cost=0.03, cost_source="metered")),
                 Side("cand", counts_tasks(BETTER, cost=0.01, cost_source="metered")))
    assert rules(d)["fresh.efficiency"] and (d.verdict, d.reason) == ("promote", "quality")


def test_min_discordant(tmp_path: Path, evalrig_home: Path) -> None:
    cand = [min(5, c + 5) if i < 5 else c for i, c in enumerate(CHAMP)]
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP, cand))
    assert rule(d, "fresh.quality")["discordant"] < 6 and not rules(d)["fresh.quality"]
    d = run_gate(tmp_path / "2", evalrig_home, *sides(CHAMP, cand), policy(fresh={"min_discordant": 3}))
    assert rules(d)["fresh.quality"] or rule(d, "fresh.quality")["p_one_sided"] > 0.025


def test_rule_names_and_order(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP, BETTER))
    assert [r.name for r in d.rules] == [
        "invariant.complete", "invariant.sealed", "invariant.isolated", "invariant.policy-pinned",
        "invariant.fresh-after-seal", "invariant.no-secret-leak", "invariant.history-preserved",
        "invariant.bundle-integrity", "invariant.invariant-suite", "fixed.task", "fixed.aggregate",
        "fresh.min_tasks", "fresh.quality", "fresh.noninferior", "fresh.efficiency", "fresh.loss",
    ]
    doc = json.loads(d.model_dump_json())
    for key in ("verdict", "reason", "rules", "policy", "comparison_digest", "candidate", "exception", "advisory"):
        assert key in doc
    assert set(doc["policy"]) == {"name", "version", "digest"} and "checkpoint_id" in doc["candidate"]


# -- the shell ---------------------------------------------------------------------------


def policy_file(tmp_path: Path) -> tuple[Path, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "policy.toml"
    path.write_bytes((ROOT / "policies" / "default-v1.toml").read_bytes())
    return path, sha256_bytes(path.read_bytes())


def train(tmp_path: Path, home: Path, champ: list[int], cand: list[int], **cand_kw: object) -> tuple[Path, Path]:
    pol, digest = policy_file(tmp_path)
    a = write_run(tmp_path / "a", Side("champ", counts_tasks(champ), policy_digest=digest), home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks(cand), policy_digest=digest, **cand_kw), home)  # type: ignore[arg-type]
    compare_bundles(a, b, tmp_path / "cmp", home)
    return tmp_path / "cmp", pol


def test_gate_writes_decision_verdict_issued_and_ledger(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, CHAMP, BETTER)
    r = gate_comparison(cmp, pol, None, False, evalrig_home, NOW)
    assert r.exit_code == 0 and r.decision_file == cmp / "decisions" / "default-v1.json"
    md = r.verdict_file.read_text()
    assert md.startswith("# PROMOTE") and "**Verdict: `promote`** (reason: `quality`)" in md
    # The rules' outcome in words (issue #12 item 9: was the bare `held` yes/no, a veto's "no" in bold)
    assert "| `fresh.quality` | met |" in md and "What would change the answer" in md
    assert "| `fresh.loss` | no loss shown |" in md and "**no**" not in md
    assert "None: this is the first gate of this candidate." in md
    issued = (cmp / "decisions" / "issued.jsonl").read_text().splitlines()
    assert json.loads(issued[0])["decision_digest"] == sha256_bytes(r.decision_file.read_bytes())
    ledger = [json.loads(x) for x in (evalrig_home / "gates.jsonl").read_text().splitlines()]
    assert ledger[0]["verdict"] == "promote" and ledger[0]["candidate_id"] == r.decision.candidate.checkpoint_id
    # gate again: the same decision bytes; the verdict file now lists the earlier gate
    before = r.decision_file.read_bytes()
    r2 = gate_comparison(cmp, pol, None, False, evalrig_home, NOW + timedelta(minutes=5))
    assert r2.decision_file.read_bytes() == before
    assert "Earlier gates of this candidate (1)" in r2.verdict_file.read_text()
    assert len((evalrig_home / "gates.jsonl").read_text().splitlines()) == 2


def test_decision_is_byte_deterministic_across_bundles(tmp_path: Path, evalrig_home: Path) -> None:
    cmp1, pol1 = train(tmp_path / "1", evalrig_home, CHAMP, CHAMP)
    cmp2, pol2 = train(tmp_path / "2", evalrig_home, CHAMP, CHAMP)
    r1 = gate_comparison(cmp1, pol1, None, False, evalrig_home, NOW)
    r2 = gate_comparison(cmp2, pol2, None, False, evalrig_home, NOW + timedelta(hours=1))
    assert r1.exit_code == r2.exit_code == 1
    assert r1.decision_file.read_bytes() == r2.decision_file.read_bytes()
    assert b"issued" not in r1.decision_file.read_bytes() and b"2026-12-02" not in r1.decision_file.read_bytes()


def test_a_decision_with_other_bytes_is_never_overwritten(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, CHAMP, BETTER)
    r = gate_comparison(cmp, pol, None, False, evalrig_home, NOW)
    r.decision_file.write_bytes(r.decision_file.read_bytes().replace(b'"promote"', b'"block"'))
    with pytest.raises(EvalrigError) as e:
        gate_comparison(cmp, pol, None, False, evalrig_home, NOW)
    assert e.value.code == ExitCode.INVALID and e.value.file == str(r.decision_file)


def test_exception_names_the_file(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, CHAMP, CHAMP)
    r = gate_comparison(cmp, pol, "security-patch", False, evalrig_home, NOW)
    assert r.decision_file.name == "default-v1+security-patch.json" and r.exit_code == 0
    assert r.decision.verdict == "promote-maintenance"


def test_an_exception_the_policy_lacks_is_refused_naming_the_policy_file(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, CHAMP, BETTER)
    with pytest.raises(EvalrigError) as e:
        gate_comparison(cmp, pol, "friday", False, evalrig_home, NOW)
    assert e.value.code == ExitCode.INVALID and e.value.file == str(pol) and e.value.field == "exceptions"
    assert not (cmp / "decisions" / "default-v1+friday.json").exists()


def test_a_home_that_is_a_file_is_refused_before_anything_is_issued(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, CHAMP, BETTER)
    home_file = tmp_path / "home-is-a-file"
    home_file.write_text("")
    with pytest.raises(EvalrigError) as e:
        gate_comparison(cmp, pol, None, False, home_file, NOW)
    assert e.value.code == ExitCode.INVALID and e.value.file == str(home_file)
    assert not (cmp / "decisions" / "default-v1.json").exists() and not (cmp / "decisions" / "issued.jsonl").exists()


def test_block_exits_3(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, CHAMP, BETTER, sandbox="process")
    assert gate_comparison(cmp, pol, None, False, evalrig_home, NOW).exit_code == 3


def test_a_policy_edited_after_pinning_is_refused_unless_advisory(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, CHAMP, BETTER)
    pol.write_text(pol.read_text().replace("min_tasks = 20", "min_tasks = 10"))
    with pytest.raises(EvalrigError) as e:
        gate_comparison(cmp, pol, None, False, evalrig_home, NOW)
    assert e.value.code == ExitCode.INVALID and "pinned" in e.value.message and e.value.file == str(pol)
    assert not (cmp / "decisions" / "default-v1.json").exists()
    r = gate_comparison(cmp, pol, None, True, evalrig_home, NOW)
    assert r.decision_file == cmp / "decisions" / "advisory" / "default-v1.json"
    # a different pin is a refused input, not a failed rule (docs/gate.md): the preview applies
    # the proposed policy and gives its verdict
    assert r.decision.advisory and rules(r.decision)["invariant.policy-pinned"]
    assert rule(r.decision, "invariant.policy-pinned")["advisory_preview"] is True
    assert (r.decision.verdict, r.decision.reason, r.exit_code) == ("promote", "quality", 0)
    assert "ADVISORY" in r.verdict_file.read_text()


def test_an_advisory_preview_sees_the_proposed_policys_verdict(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, CHAMP, BETTER)
    proposed = tmp_path / "proposed.toml"
    proposed.write_text(pol.read_text().replace("min_tasks = 20", "min_tasks = 40").replace("version = 1", "version = 2"))
    r = gate_comparison(cmp, proposed, None, True, evalrig_home, NOW)
    assert r.decision_file == cmp / "decisions" / "advisory" / "default-v2.json"
    assert (r.decision.verdict, r.decision.reason, r.exit_code) == ("keep-champion", "inconclusive", 1)


def test_an_advisory_gate_of_runs_that_pinned_nothing_still_fails_policy_pinned(
        tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", counts_tasks(CHAMP), policy_digest=None)
    cand = Side("cand", counts_tasks(BETTER), policy_digest=None)
    c = compare_bundles(write_run(tmp_path / "a", champ, evalrig_home), write_run(tmp_path / "b", cand, evalrig_home),
                        tmp_path / "cmp", evalrig_home)
    d = decide(c, policy(), POLICY_DIGEST, None, True, sha256_bytes(b"c"))
    assert (d.verdict, d.reason) == ("block", "invariant") and not rules(d)["invariant.policy-pinned"]


def test_a_comparison_edited_after_compare_is_refused(tmp_path: Path, evalrig_home: Path) -> None:
    cmp, pol = train(tmp_path, evalrig_home, CHAMP, CHAMP)
    path = cmp / "comparison.json"
    path.write_bytes(path.read_bytes().replace(b'"tasks": 30', b'"tasks": 31', 1))
    with pytest.raises(EvalrigError) as e:
        gate_comparison(cmp, pol, None, False, evalrig_home, NOW)
    assert e.value.code == ExitCode.INVALID and e.value.file == str(path)


# -- properties of the pure core ---------------------------------------------------------

COUNTS = st.lists(st.integers(0, 5), min_size=1, max_size=40)  # an empty run has no bwrap attempt: not isolated


def decide_views(champ: list[int], cand: list[int], exception: str | None = None) -> Decision:
    c = build_comparison(view_from_counts("champ", champ), view_from_counts("cand", cand),
                         history_check(None, None), False)
    return decide(c, policy(), POLICY_DIGEST, exception, False, sha256_bytes(b"c"))


@settings(max_examples=40, deadline=None)
@given(COUNTS)
def test_a_candidate_equal_to_the_champion_never_wins_or_loses(counts: list[int]) -> None:
    d = decide_views(counts, counts)
    assert d.verdict == "keep-champion" and d.reason in ("tie", "inconclusive")
    assert decide_views(counts, counts, "security-patch").verdict in ("promote-maintenance", "keep-champion")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=40))
def test_a_promotion_swapped_is_never_a_promotion(pairs: list[tuple[int, int]]) -> None:
    champ, cand = [a for a, _ in pairs], [b for _, b in pairs]
    d = decide_views(champ, cand)
    if d.verdict == "promote":
        swapped = decide_views(cand, champ)
        assert swapped.verdict == "keep-champion"
        assert swapped.reason == "loss" or d.reason == "efficiency"


@settings(max_examples=25, deadline=None)
@given(COUNTS, COUNTS)
def test_decide_is_deterministic_and_its_json_round_trips(champ: list[int], cand: list[int]) -> None:
    d1, d2 = decide_views(champ, cand[: len(champ)]), decide_views(champ, cand[: len(champ)])
    assert d1 == d2
    assert Decision.model_validate_json(d1.model_dump_json()) == d1


# -- network (docs/gate.md) ------------------------------------


def test_an_attempt_with_network_fails_isolated(tmp_path: Path, evalrig_home: Path) -> None:
    # No host recorded is no excuse: the attempt could reach the network.
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP, BETTER, network=True))
    assert (d.verdict, d.reason) == ("block", "invariant")
    iso = rule(d, "invariant.isolated")
    assert not iso["held"] and iso["candidate_network_attempts"] == 5 * 34 and iso["allow_network"] is False
    assert iso["says"] == "every attempt of both runs ran under bwrap, and none had network"
    assert iso["note"] is None


def test_allow_network_lists_the_hosts_and_says_what_the_canary_cannot_see(tmp_path: Path,
                                                                            evalrig_home: Path) -> None:
    hosts = ["a.example:443", "b.example:8443"]
    pol = policy(invariants={"allow_network": True})
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP, BETTER, network=True, network_hosts=hosts), pol)
    assert (d.verdict, d.reason) == ("promote", "quality")
    iso = rule(d, "invariant.isolated")
    assert iso["held"] and iso["candidate_hosts_reached"] == hosts and iso["champion_hosts_reached"] == []
    assert iso["note"].startswith("the canary check cannot see what was sent over the network")
    # process attempts still fail it: allow_network opens the network, not the sandbox
    d = run_gate(tmp_path / "2", evalrig_home, *sides(CHAMP, BETTER, sandbox="process", network=True), pol)
    assert not rules(d)["invariant.isolated"]


def test_allow_network_without_networked_attempts_adds_no_note(tmp_path: Path, evalrig_home: Path) -> None:
    d = run_gate(tmp_path, evalrig_home, *sides(CHAMP, BETTER), policy(invariants={"allow_network": True}))
    iso = rule(d, "invariant.isolated")
    assert iso["held"] and iso["note"] is None


# -- fresh content seen by another candidate's gate --------------------------------------


def test_fresh_content_seen_by_another_candidate_is_not_fresh(tmp_path: Path, evalrig_home: Path) -> None:
    from gate_bundles import fresh_content

    a = write_run(tmp_path / "a", Side("champ", counts_tasks(CHAMP)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks(BETTER)), evalrig_home)
    c = compare_bundles(a, b, tmp_path / "cmp", evalrig_home)
    assert c.facts.fresh_content["fresh-003"] == fresh_content("fresh-003")
    seen = {fresh_content("fresh-003"): "sha256:" + "1" * 64, fresh_content("fresh-007"): "sha256:" + "2" * 64}
    d = decide(c, policy(), POLICY_DIGEST, None, False, sha256_bytes(b"c"), seen)
    assert (d.verdict, d.reason) == ("block", "invariant")
    r = rule(d, "invariant.fresh-after-seal")
    assert (r["held"], r["seen_before"], r["seen_before_tasks"]) == (False, 2, ["fresh-003", "fresh-007"])
    assert r["seen_by_candidates"] == ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
    assert rules(decide(c, policy(), POLICY_DIGEST, None, False, sha256_bytes(b"c")))["invariant.fresh-after-seal"]


def test_a_fresh_task_without_recorded_content_is_not_shown_fresh(tmp_path: Path, evalrig_home: Path) -> None:
    a = write_run(tmp_path / "a", Side("champ", counts_tasks(CHAMP)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks(BETTER)), evalrig_home)
    c = compare_bundles(a, b, tmp_path / "cmp", evalrig_home)
    c = c.model_copy(update={"facts": c.facts.model_copy(update={"fresh_content": {}})})
    r = rule(decide(c, policy(), POLICY_DIGEST, None, False, sha256_bytes(b"c")), "invariant.fresh-after-seal")
    assert not r["held"] and r["content_unrecorded"] == 30


def test_the_ledger_keeps_fresh_content_and_only_other_candidates_count(tmp_path: Path, evalrig_home: Path) -> None:
    from evalrig.store import ledger

    pol = tmp_path / "policy.toml"
    pol.write_bytes((ROOT / "policies" / "default-v1.toml").read_bytes())
    digest = sha256_bytes(pol.read_bytes())
    champ = Side("champ", counts_tasks(CHAMP), policy_digest=digest)
    a = write_run(tmp_path / "a", champ, evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks(BETTER), policy_digest=digest), evalrig_home)
    compare_bundles(a, b, tmp_path / "cmp", evalrig_home)
    first = gate_comparison(tmp_path / "cmp", pol, None, False, evalrig_home, NOW)
    assert first.decision.verdict == "promote"
    entry = ledger.all_gates(evalrig_home)[-1]
    assert len(entry.fresh_content) == 30 and entry.fresh_content == sorted(entry.fresh_content)
    # the same candidate gated again on the same tasks: not another candidate, still fresh
    again = gate_comparison(tmp_path / "cmp", pol, "security-patch", False, evalrig_home, NOW)
    assert again.decision.verdict == "promote"
    # another candidate on the same fresh content: blocked
    c = write_run(tmp_path / "c", Side("other", counts_tasks(BETTER), policy_digest=digest), evalrig_home)
    compare_bundles(a, c, tmp_path / "cmp2", evalrig_home)
    other = gate_comparison(tmp_path / "cmp2", pol, None, False, evalrig_home, NOW)
    assert (other.decision.verdict, other.exit_code) == ("block", 3)
    assert rule(other.decision, "invariant.fresh-after-seal")["seen_by_candidates"] == [first.decision.candidate.checkpoint_id]
