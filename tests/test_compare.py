"""compare: pairing two run bundles (docs/release-flow.md) on bundles built from the models."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from gate_bundles import Side, Task, chain, counts_tasks, redigest, write_run

from evalrig.core.compare import build_comparison, history_check
from evalrig.core.digest import sha256_bytes
from evalrig.core.errors import EvalrigError, ExitCode
from evalrig.store.compare import compare_bundles, load_side

REF_CHAMP = [5, 4, 5, 3, 2, 5, 0, 1, 4, 5, 3, 2, 5, 4, 1, 0, 5, 3, 4, 2]
REF_CAND = [5, 5, 4, 4, 4, 5, 1, 3, 3, 5, 4, 1, 5, 5, 3, 0, 5, 4, 5, 3]


def pair(tmp_path: Path, home: Path, champ: Side, cand: Side, **kw: object):
    a = write_run(tmp_path / "a", champ, home)
    b = write_run(tmp_path / "b", cand, home)
    return compare_bundles(a, b, tmp_path / "cmp", home, **kw)  # type: ignore[arg-type]


def test_reference_values_of_design(tmp_path: Path, evalrig_home: Path) -> None:
    c = pair(tmp_path, evalrig_home, Side("champ", counts_tasks(REF_CHAMP)), Side("cand", counts_tasks(REF_CAND)))
    f = c.suites["fresh"]
    assert f.tasks == 20
    assert f.mean_d == pytest.approx(0.11, abs=1e-9)
    assert f.se_d == pytest.approx(0.04224, abs=1e-5)
    assert f.p_one_sided == pytest.approx(0.016357, abs=1e-6)
    assert f.p_two_sided == pytest.approx(0.032715, abs=1e-6)
    assert f.t_bounds is not None and f.t_bounds.lower == pytest.approx(0.02159, abs=1e-5)
    assert f.p_exact is not None and f.p_exact.one_sided == "67/4096"
    assert (f.better, f.worse, f.equal, f.discordant) == (11, 3, 6, 14)
    assert f.mean_d_exact == "11/100"


def test_keys_scripts_rely_on(tmp_path: Path, evalrig_home: Path) -> None:
    pair(tmp_path, evalrig_home, Side("champ", counts_tasks(REF_CHAMP)), Side("cand", counts_tasks(REF_CAND)))
    doc = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    for side in ("champion", "candidate"):
        assert set(doc[side]) == {"run_id", "checkpoint_id", "bundle_digest"}
    assert doc["repeat"] == 5 and "facts" in doc
    assert set(doc["suites"]) == {"fixed", "fresh", "invariant", "public"}
    fresh = doc["suites"]["fresh"]
    for key in ("tasks", "mean_d", "se_d", "p_one_sided", "p_worse", "p_two_sided", "better", "worse",
                "equal", "discordant", "champion", "candidate", "per_task"):
        assert key in fresh, key
    assert set(fresh["champion"]["pass_hat_k"]) == {"1", "2", "3", "4", "5"}
    assert {"pass_rate", "mean_reward", "pass_hat_k", "pass_at_k"} <= set(fresh["candidate"])
    ids = [r["task_id"] for r in fresh["per_task"]]
    assert ids == sorted(ids)
    assert {"champion_passes", "candidate_passes"} <= set(fresh["per_task"][0])
    man = json.loads((tmp_path / "cmp" / "manifest.json").read_text())
    assert man["kind"] == "comparison"
    assert man["candidate"]["run_id"] == "run-cand" and man["candidate"]["bundle_digest"].startswith("sha256:")
    assert man["files"]["comparison.json"] == sha256_bytes((tmp_path / "cmp" / "comparison.json").read_bytes())


def test_byte_identical_for_the_same_bundles(tmp_path: Path, evalrig_home: Path) -> None:
    a = write_run(tmp_path / "a", Side("champ", counts_tasks(REF_CHAMP)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks(REF_CAND)), evalrig_home)
    compare_bundles(a, b, tmp_path / "c1", evalrig_home)
    compare_bundles(a, b, tmp_path / "c2", evalrig_home)
    compare_bundles(a, b, tmp_path / "c1", evalrig_home)  # the same bytes again: allowed
    for name in ("comparison.json", "comparison.md", "manifest.json"):
        assert (tmp_path / "c1" / name).read_bytes() == (tmp_path / "c2" / name).read_bytes()


def test_a_different_comparison_is_never_written_over(tmp_path: Path, evalrig_home: Path) -> None:
    a = write_run(tmp_path / "a", Side("champ", counts_tasks(REF_CHAMP)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks(REF_CAND)), evalrig_home)
    compare_bundles(a, b, tmp_path / "c", evalrig_home)
    with pytest.raises(EvalrigError) as e:
        compare_bundles(b, a, tmp_path / "c", evalrig_home)
    assert e.value.code == ExitCode.INVALID and "different comparison" in e.value.message


def test_tasks_counts_the_suite_and_paired_the_tasks_scored_on_both_sides(tmp_path: Path, evalrig_home: Path) -> None:
    # the candidate's run lacks fresh-003 (a subset, say): it is in the suite, but unpaired
    c = pair(tmp_path, evalrig_home, Side("champ", counts_tasks([3, 4, 5, 2])), Side("cand", counts_tasks([3, 5, 5])))
    fresh = c.suites["fresh"]  # docs/gate.md: `tasks` is the number of tasks in the suite
    assert (fresh.tasks, fresh.paired, len(fresh.per_task)) == (4, 3, 4)
    assert fresh.mean_d_exact == "1/15" and "(4 tasks, 3 scored on both sides)" in (tmp_path / "cmp" / "comparison.md").read_text()
    complete = pair(tmp_path / "p", evalrig_home, Side("champ", counts_tasks([3, 4])), Side("cand", counts_tasks([3, 5])))
    assert complete.suites["fresh"].tasks == complete.suites["fresh"].paired == 2


def test_out_must_not_be_a_run_bundle_or_a_file(tmp_path: Path, evalrig_home: Path) -> None:
    a = write_run(tmp_path / "a", Side("champ", counts_tasks(REF_CHAMP)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks(REF_CAND)), evalrig_home)
    manifest = (b / "manifest.json").read_bytes()
    with pytest.raises(EvalrigError) as e:
        compare_bundles(a, b, b, evalrig_home)  # a slip: --out the candidate's own bundle
    assert e.value.code == ExitCode.INVALID and "run bundle" in e.value.message
    assert e.value.file == str(b / "manifest.json")
    assert (b / "manifest.json").read_bytes() == manifest and not (b / "comparison.json").exists()
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f", tmp_path / "f" / "sub"):
        with pytest.raises(EvalrigError) as e:
            compare_bundles(a, b, out, evalrig_home)
        assert e.value.code == ExitCode.INVALID


def test_empty_suites_have_zero_tasks_and_null_statistics(tmp_path: Path, evalrig_home: Path) -> None:
    c = pair(tmp_path, evalrig_home, Side("champ", counts_tasks([3, 4], fixed=1, invariant=0)),
             Side("cand", counts_tasks([3, 5], fixed=1, invariant=0)))
    inv = c.suites["invariant"]
    assert inv.tasks == 0 and inv.mean_d is None and inv.p_one_sided is None and inv.per_task == []
    assert inv.champion.pass_hat_k == {str(j): None for j in range(1, 6)}
    fixed = c.suites["fixed"]  # one task: a row and its mean, but no spread and no test
    assert fixed.tasks == 1 and fixed.se_d is None and fixed.p_exact is None and len(fixed.per_task) == 1
    assert fixed.p_one_sided is None and fixed.p_worse is None and fixed.t_bounds is None and fixed.mde is None
    assert fixed.mean_d == fixed.per_task[0].d == 0.0 and fixed.mean_d_exact == "0"
    fresh = c.suites["fresh"]
    assert fresh.tasks == 2 and fresh.p_exact is not None


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"seed": 7}, "seed", "--seed"),
        ({"repeat": 4}, "repeat", "--repeat"),
        ({"taskset_id": sha256_bytes(b"other")}, "taskset.id", "task sets"),
        ({"policy_digest": sha256_bytes(b"other")}, "policy_pin.digest", "pinned policies"),
        ({"timeout_scale": 2.0}, "settings.timeout_scale", "--timeout-scale"),
        ({"max_retries": 0}, "settings.max_retries", "--max-retries"),
        ({"rig_version": "0.2.0"}, "rig_version", "rig versions"),
    ],
)
def test_refuses_runs_that_differ(tmp_path: Path, evalrig_home: Path, change: dict, field: str, words: str) -> None:
    k = change.get("repeat", 5)
    cand = replace(Side("cand", counts_tasks([3] * 4, k=k)), **change)
    with pytest.raises(EvalrigError) as e:
        pair(tmp_path, evalrig_home, Side("champ", counts_tasks([3] * 4)), cand)
    assert e.value.code == ExitCode.INVALID
    assert e.value.field == field and words in e.value.message


def test_a_patch_release_of_the_rig_pairs(tmp_path: Path, evalrig_home: Path) -> None:
    c = pair(tmp_path, evalrig_home, Side("champ", counts_tasks([3] * 4)),
             Side("cand", counts_tasks([3] * 4), rig_version="0.1.7"))
    assert c.suites["fresh"].tasks == 4


def test_incomplete_is_refused_unless_allowed(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", counts_tasks([3] * 4))
    cand = Side("cand", counts_tasks([3] * 4), status="incomplete", unscored={"fresh-001"})
    with pytest.raises(EvalrigError) as e:
        pair(tmp_path, evalrig_home, champ, cand)
    assert e.value.code == ExitCode.INCOMPLETE and "1 of 40 trials unscored" in e.value.message
    c = compare_bundles(tmp_path / "a", tmp_path / "b", tmp_path / "cmp2", evalrig_home, allow_incomplete=True)
    assert c.facts.allow_incomplete and not c.facts.both_complete
    assert c.facts.candidate.unscored == 1 and c.facts.candidate.infra_errors == 3
    row = next(r for r in c.suites["fresh"].per_task if r.task_id == "fresh-001")
    # docs/statistics.md: the unscored trial counts against the candidate (a failure on its side)
    assert row.candidate_n == 5 and row.champion_n == 5
    assert c.suites["fresh"].unscored_counted_worst is not None
    assert c.suites["fresh"].unscored_counted_worst.model_dump() == {"champion": 0, "candidate": 1}
    assert [t.split(":")[0] for t in c.facts.candidate.unscored_counted_worst] == ["fresh-001"]
    assert json.loads((tmp_path / "cmp2" / "manifest.json").read_text())["allow_incomplete"] is True


def test_a_changed_result_fails_verification_naming_the_file(tmp_path: Path, evalrig_home: Path) -> None:
    a = write_run(tmp_path / "a", Side("champ", counts_tasks([3] * 4)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks([3] * 4)), evalrig_home)
    results = b / "results.jsonl"
    results.write_bytes(results.read_bytes().replace(b'"passed":false', b'"passed":true ', 1))
    with pytest.raises(EvalrigError) as e:
        compare_bundles(a, b, tmp_path / "cmp", evalrig_home)
    assert e.value.code == ExitCode.INVALID and e.value.file == str(results)


def test_facts_gathered_for_the_gate(tmp_path: Path, evalrig_home: Path) -> None:
    champ = Side("champ", counts_tasks([3] * 4), sandbox="process")
    cand = Side("cand", counts_tasks([3] * 4), canary_found={"fresh-002"}, sealed=False)
    c = pair(tmp_path, evalrig_home, champ, cand)
    f = c.facts
    assert f.champion.sandbox == {"bwrap": 0, "process": 40} and f.candidate.sandbox["bwrap"] == 40
    assert f.candidate.canary_found == 1 and f.candidate.canary_attempts == ["cand-fresh-002-0-1"]
    assert f.champion.registered and not f.candidate.registered and f.candidate_sealed_at is None
    assert f.champion.seal_checks == 2 == f.champion.seal_checks_matched
    assert len(f.fresh_created_at) == 4
    assert f.policy_pins.champion == f.policy_pins.candidate is not None
    assert f.champion.integrity.verified_files == 4 and f.champion.integrity.problems == []
    assert f.champion.taskset_suites == {"fixed": 3, "fresh": 4, "invariant": 1} == f.champion.run_suites


def test_efficiency_and_fisher_per_task(tmp_path: Path, evalrig_home: Path) -> None:
    c = pair(tmp_path, evalrig_home, Side("champ", counts_tasks([5] * 20, cost=0.03)),
             Side("cand", counts_tasks([5] * 19 + [1], cost=0.01)))
    e = c.suites["fresh"].efficiency["cost"]
    assert e.ratio == pytest.approx(1 / 3) and e.log_sd == pytest.approx(0, abs=1e-12) and e.n == 20
    assert c.suites["fresh"].efficiency["wall_s"].ratio == pytest.approx(1.0)
    row = c.suites["fresh"].per_task[-1]
    assert row.fisher_p_worse == pytest.approx(0.0238, abs=1e-4) and row.d == pytest.approx(-0.8)


def test_missing_cost_makes_efficiency_null(tmp_path: Path, evalrig_home: Path) -> None:
    cand = counts_tasks([5] * 4)
    cand["fresh-000"] = Task("fresh", [True] * 5, cost=None)
    c = pair(tmp_path, evalrig_home, Side("champ", counts_tasks([5] * 4)), Side("cand", cand))
    e = c.suites["fresh"].efficiency["cost"]
    assert e.ratio is None and e.upper is None and e.missing == 1
    assert c.suites["fresh"].per_task[0].candidate_cost is None


def test_build_comparison_is_pure(tmp_path: Path, evalrig_home: Path) -> None:
    a = write_run(tmp_path / "a", Side("champ", counts_tasks(REF_CHAMP)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks(REF_CAND)), evalrig_home)
    la, lb = load_side(a, evalrig_home, False), load_side(b, evalrig_home, False)
    h = history_check(None, None)
    assert build_comparison(la.view, lb.view, h, False) == build_comparison(la.view, lb.view, h, False)
    swapped = build_comparison(lb.view, la.view, h, False).suites["fresh"]
    straight = build_comparison(la.view, lb.view, h, False).suites["fresh"]
    assert swapped.mean_d == pytest.approx(-straight.mean_d)  # type: ignore[operator]
    assert swapped.p_worse == straight.p_one_sided


# -- the history check -------------------------------------------------------------------

LOG = chain([{"event": "a"}, {"event": "b"}])
LONGER = chain([{"event": "a"}, {"event": "b"}, {"event": "c"}])


def test_history_intact_and_extended() -> None:
    h = history_check(LOG, LONGER)
    assert h.held and h.chain_intact and h.champion_prefix and h.candidate_lines == 3


def test_history_neither_declares() -> None:
    assert history_check(None, None).held


def test_history_only_the_candidate_declares() -> None:
    assert history_check(None, LOG).held
    assert not history_check(None, b'{"prev":"00"}\n').held


def test_history_dropped_by_the_candidate() -> None:
    h = history_check(LOG, None)
    assert not h.held and "dropped" in h.message


def test_history_rewritten() -> None:
    rewritten = chain([{"event": "A"}, {"event": "b"}, {"event": "c"}])  # an intact chain, other past
    h = history_check(LOG, rewritten)
    assert not h.held and h.chain_intact and h.champion_prefix is False and "rewritten" in h.message


def test_history_broken_chain() -> None:
    lines = LONGER.split(b"\n")
    lines[1] = lines[1].replace(b'"b"', b'"B"')  # edit a line: the next prev no longer matches
    h = history_check(None, b"\n".join(lines))
    assert not h.held and h.chain_break_line == 3


def test_history_prev_with_prefix_is_accepted() -> None:
    first = b'{"event":"a","prev":null}'
    second = b'{"event":"b","prev":"' + sha256_bytes(first).encode() + b'"}'
    assert history_check(None, first + b"\n" + second + b"\n").held


def test_history_read_from_the_bundles(tmp_path: Path, evalrig_home: Path) -> None:
    c = pair(tmp_path, evalrig_home, Side("champ", counts_tasks([3] * 4), history=LOG),
             Side("cand", counts_tasks([3] * 4), history=chain([{"event": "X"}])))
    assert not c.facts.history.held and c.facts.history.champion_declared


def test_a_malformed_line_names_file_line_and_field(tmp_path: Path, evalrig_home: Path) -> None:
    a = write_run(tmp_path / "a", Side("champ", counts_tasks([3] * 4)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks([3] * 4)), evalrig_home)
    results = b / "results.jsonl"
    lines = results.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"sandbox":"bwrap"', b'"sandbox":"docker"')
    results.write_bytes(b"\n".join(lines))
    redigest(b, evalrig_home)  # digests that match, registered: the schema check must still catch it
    with pytest.raises(EvalrigError) as e:
        compare_bundles(a, b, tmp_path / "cmp", evalrig_home)
    assert (e.value.file, e.value.line, e.value.field) == (str(results), 3, "sandbox")
    assert "docker" in e.value.message


def test_calibration_of_the_estimates(tmp_path: Path, evalrig_home: Path) -> None:
    a = write_run(tmp_path / "a", Side("champ", counts_tasks([3] * 4)), evalrig_home, full=True)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks([3] * 4)), evalrig_home, full=True)
    c = compare_bundles(a, b, tmp_path / "cmp", evalrig_home)
    cal = c.calibration["candidate"]
    assert cal.estimates == 40 and cal.brier_n == 40 and cal.brier == pytest.approx(0.25)  # p = 0.5 always
    assert cal.time.n == 40 and cal.time.coverage == 1.0 and cal.time.interval_score == pytest.approx(1.5)
    assert cal.cost.coverage == 1.0
    assert "Calibration" in (tmp_path / "cmp" / "comparison.md").read_text()
