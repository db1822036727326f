"""The plan: trials, seeds (docs/agents.md), inputs ids and filters. Pure, so tested directly."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from evalrig.core.errors import EvalrigError
from evalrig.core.plan import Filters, OutcomeSettings, build_plan, inputs_id, trial_seed
from evalrig.models.run import VerifierIdentity

V = VerifierIdentity(kind="exact", version="1", digest="sha256:" + "a" * 64)
S = OutcomeSettings(timeout_scale=1.0, max_retries=2, sandbox="auto", secrets=())
CK = "sha256:" + "c" * 64


@dataclass(frozen=True)
class Spec:
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class T:
    id: str
    suite: str = "fresh"
    digest: str = "sha256:" + "d" * 64
    verifier_identity: VerifierIdentity = V
    spec: Spec = Spec()


def test_seed_is_the_first_8_bytes_of_sha256_mod_2_31() -> None:
    # sha256("0:parse-dates:0") starts c8b458450f16e435; the low 31 bits of that
    # 64-bit number are 0x0f16e435 = 253158453.
    assert trial_seed(0, "parse-dates", 0) == 0x0F16E435 == 253158453
    # sha256("7:parse-dates:3") starts c6d2e59bd5a861cb; 0xd5a861cb with the top bit
    # cleared is 0x55a861cb.
    assert trial_seed(7, "parse-dates", 3) == 0x55A861CB


def test_trials_are_tasks_by_repetition_in_id_order_with_stable_ids() -> None:
    plan = build_plan([T("b"), T("a")], CK, repeat=3, seed=0, settings=S)
    assert [t.trial_id for t in plan.trials] == ["a:0", "a:1", "a:2", "b:0", "b:1", "b:2"]
    assert plan.trials[4].seed == trial_seed(0, "b", 1)
    assert not plan.subset
    again = build_plan([T("a"), T("b")], CK, repeat=3, seed=0, settings=S)
    assert again == plan


def test_inputs_id_moves_with_everything_that_can_change_an_outcome() -> None:
    base = inputs_id(CK, "sha256:" + "d" * 64, V, 0, 5, S)
    changed = [
        inputs_id("sha256:" + "e" * 64, "sha256:" + "d" * 64, V, 0, 5, S),
        inputs_id(CK, "sha256:" + "f" * 64, V, 0, 5, S),
        inputs_id(CK, "sha256:" + "d" * 64, V.model_copy(update={"version": "2"}), 0, 5, S),
        inputs_id(CK, "sha256:" + "d" * 64, V, 1, 5, S),
        inputs_id(CK, "sha256:" + "d" * 64, V, 0, 6, S),
        inputs_id(CK, "sha256:" + "d" * 64, V, 0, 5, OutcomeSettings(2.0, 2, "auto", ())),
        inputs_id(CK, "sha256:" + "d" * 64, V, 0, 5, OutcomeSettings(1.0, 1, "auto", ())),
        inputs_id(CK, "sha256:" + "d" * 64, V, 0, 5, OutcomeSettings(1.0, 2, "bwrap", ())),
        inputs_id(CK, "sha256:" + "d" * 64, V, 0, 5, OutcomeSettings(1.0, 2, "auto", ("KEY",))),
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    # secrets are names, compared as a set
    a = OutcomeSettings(1.0, 2, "auto", ("A", "B"))
    b = OutcomeSettings(1.0, 2, "auto", ("B", "A"))
    assert inputs_id(CK, "sha256:" + "d" * 64, V, 0, 5, a) == inputs_id(CK, "sha256:" + "d" * 64, V, 0, 5, b)


def test_the_planned_inputs_ids_equal_the_canonical_digest() -> None:
    # build_plan encodes each task's shared part once; it must agree with inputs_id.
    task = T("x", verifier_identity=V.model_copy(update={"version": "é \\ \"q\""}))
    settings = OutcomeSettings(1.5, 3, "bwrap", ("B", "A"))
    plan = build_plan([task], CK, 3, 11, settings)
    for t in plan.trials:
        assert t.inputs_id == inputs_id(CK, task.digest, task.verifier_identity, t.rep, t.seed, settings)


def test_plan_digest_changes_with_the_trials() -> None:
    one = build_plan([T("a")], CK, 2, 0, S)
    assert build_plan([T("a")], CK, 3, 0, S).digest != one.digest
    assert build_plan([T("a")], CK, 2, 1, S).digest != one.digest
    assert build_plan([T("a", digest="sha256:" + "9" * 64)], CK, 2, 0, S).digest != one.digest


def test_filters_select_and_mark_a_subset() -> None:
    tasks = [T("a", "fixed", spec=Spec(["x"])), T("b", "fresh", spec=Spec(["x", "y"])),
             T("c", "fresh")]
    assert build_plan(tasks, CK, 1, 0, S, Filters(suites=("fresh",))).task_ids == ("b", "c")
    assert build_plan(tasks, CK, 1, 0, S, Filters(tags=("x",))).task_ids == ("a", "b")
    both = build_plan(tasks, CK, 1, 0, S, Filters(suites=("fresh",), tags=("x",)))
    assert both.task_ids == ("b",) and both.subset
    assert build_plan(tasks, CK, 1, 0, S, Filters(task_ids=("c", "a"))).task_ids == ("a", "c")


def test_a_task_filter_naming_no_task_or_selecting_nothing_is_refused() -> None:
    with pytest.raises(EvalrigError, match="--task nope: no such task"):
        build_plan([T("a")], CK, 1, 0, S, Filters(task_ids=("nope",)))
    with pytest.raises(EvalrigError, match="select no task"):
        build_plan([T("a")], CK, 1, 0, S, Filters(tags=("none",)))


def test_an_empty_task_set_says_so_not_that_filters_selected_nothing() -> None:
    with pytest.raises(EvalrigError, match="the task set has no tasks"):
        build_plan([], CK, 1, 0, S)


def test_network_settings_enter_the_inputs_id_only_when_given() -> None:
    """A run without a network grant keeps the inputs ids it had before the grant existed."""
    assert S.as_dict() == {"timeout_scale": 1.0, "max_retries": 2, "sandbox": "auto", "secrets": []}
    assert OutcomeSettings(1.0, 2, "auto", (), allow_network=False, allow_hosts=()).as_dict() == S.as_dict()
    base = inputs_id(CK, "sha256:" + "d" * 64, V, 0, 5, S)
    granted = OutcomeSettings(1.0, 2, "auto", (), allow_network=True, allow_hosts=())
    hosts = OutcomeSettings(1.0, 2, "auto", (), allow_network=True, allow_hosts=("b.com", "a.com:443", "b.com"))
    ids = [inputs_id(CK, "sha256:" + "d" * 64, V, 0, 5, s) for s in (granted, hosts)]
    assert len({base, *ids}) == 3
    assert hosts.as_dict()["allow_hosts"] == ["a.com:443", "b.com"]
