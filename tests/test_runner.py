"""The runner's scheduling and bookkeeping: statuses, retries, slots, progress."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from agents.run_kit import add_task, cli, make_checkpoint, make_tasks

from evalrig.attempt import trial
from evalrig.run.executors import AttemptWork
from evalrig.run.lifecycle import run_eval
from evalrig.run.loop import Hooks
from evalrig.run.progress import Progress
from evalrig.run.settings import RunRequest
from evalrig.store.bundle import load_run


def request(ck: Path, tasks: Path, out: Path, **kw: Any) -> RunRequest:
    base: dict[str, Any] = dict(out=out, checkpoint=ck, tasks=tasks, repeat=2, sandbox="process", jobs=2)
    base.update(kw)
    return RunRequest(**base)


def test_a_verifier_that_always_crashes_is_infra_error_the_agent_run_once(
        tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path, evalrig_home)
    tasks = tmp_path / "tasks"
    add_task(tasks, "ok", "answer: even\n")
    add_task(tasks, "crashy", "answer: even\n", crash_verifier=True)
    out = tmp_path / "b"
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "2",
            "--sandbox", "process", "--max-retries", "1")
    assert r.exit_code == 5, r.stderr
    # Issue #12 item 2: a resume runs the same verifier again, so "run again to resume"
    # is no longer the advice; the verifier is to be fixed first.
    assert ("incomplete: 2 trials have no scored attempt, each because its verifier faulted; "
            "fix the verifier, then run the same command again") in r.stderr
    b = load_run(out)
    assert b.manifest.status == "incomplete"
    crashy = [x for x in b.results if x.task_id == "crashy"]
    # The verifier ran again on the same evidence (1 + --max-retries times); the agent never did.
    assert [(x.status, x.attempt, x.verifier_runs) for x in crashy] == [("infra_error", 1, 2)] * 2
    assert b.manifest.counts.infra_error == 2 and b.manifest.counts.unscored == 2
    assert b.manifest.counts.passed == 2


def test_a_rig_fault_is_retried_as_new_attempts_and_every_attempt_is_kept(
        tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path, evalrig_home)
    tasks = make_tasks(tmp_path, 2)
    failures = {"t0:0": 2, "t1:1": 5}  # t0:0 recovers on its 3rd attempt; t1:1 never does
    lock = threading.Lock()

    def flaky_attempt(spec: Any) -> Any:
        with lock:
            left = failures.get(spec.trial_id, 0)
            failures[spec.trial_id] = left - 1
        if left > 0:
            raise OSError("simulated workspace failure")
        return trial.run_attempt(spec)

    hooks = Hooks(work=AttemptWork(estimate=trial.run_estimate, attempt=flaky_attempt))
    s = run_eval(request(ck, tasks, tmp_path / "b", max_retries=2), evalrig_home, {}, hooks=hooks)
    assert s.status == "incomplete" and not s.interrupted
    b = load_run(tmp_path / "b")
    by_trial: dict[str, list[tuple[int, str]]] = {}
    for x in b.results:
        by_trial.setdefault(x.trial_id, []).append((x.attempt, x.status))
    assert by_trial["t0:0"] == [(1, "infra_error"), (2, "infra_error"), (3, "passed")]
    assert by_trial["t1:1"] == [(1, "infra_error"), (2, "infra_error"), (3, "infra_error")]
    assert len({x.attempt_id for x in b.results}) == len(b.results)
    assert "simulated workspace failure" in (b.results[0].error or "")
    assert s.counts.infra_error == 5 and s.counts.attempts == 8 and s.counts.unscored == 1
    # a resume gives the unscored trial a fresh budget; numbering continues at attempt 4
    s2 = run_eval(request(ck, tasks, tmp_path / "b", max_retries=2), evalrig_home, {})
    assert s2.status == "complete" and s2.kept == 3 and s2.ran == 1
    last = load_run(tmp_path / "b").results[-1]
    assert (last.trial_id, last.attempt, last.status) == ("t1:1", 4, "failed")


def test_concurrent_attempts_get_distinct_slots_and_progress_is_reported(
        tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path, evalrig_home)
    tasks = make_tasks(tmp_path, 3, prompt="sleep: 0.1\nanswer: parity\n")
    running: dict[int, str] = {}
    clashes: list[int] = []
    seen: set[int] = set()
    lock = threading.Lock()

    def watched(spec: Any) -> Any:
        with lock:
            if spec.slot in running:
                clashes.append(spec.slot)
            running[spec.slot] = spec.attempt_id
            seen.add(spec.slot)
        try:
            return trial.run_attempt(spec)
        finally:
            with lock:
                del running[spec.slot]

    class Collect:
        def __init__(self) -> None:
            self.events: list[Progress] = []
            self.started_with: tuple[int, int] | None = None

        def warning(self, message: str) -> None:
            pass

        def started(self, total: int, kept: int) -> None:
            self.started_with = (total, kept)

        def progress(self, p: Progress) -> None:
            self.events.append(p)

    rep = Collect()
    hooks = Hooks(work=AttemptWork(estimate=trial.run_estimate, attempt=watched))
    s = run_eval(request(ck, tasks, tmp_path / "b", jobs=3), evalrig_home, {}, rep, hooks)
    assert s.status == "complete"
    assert clashes == [] and seen == {0, 1, 2}
    assert rep.started_with == (6, 0)
    done = [p.done for p in rep.events]  # one event per group of attempts that ended together
    assert done == sorted(done) and done[-1] == 6 and len(done) == len(set(done))
    last = rep.events[-1]
    assert last.passed + last.failed == 6 and last.total == 6 and last.ran == 6


def test_auto_sandbox_fallback_or_bwrap_is_recorded(tmp_path: Path, evalrig_home: Path) -> None:
    from evalrig.attempt.sandbox import resolve_level

    choice = resolve_level("auto")
    ck = make_checkpoint(tmp_path, evalrig_home)
    tasks = make_tasks(tmp_path, 1)
    s = run_eval(request(ck, tasks, tmp_path / "b", sandbox="auto", repeat=1), evalrig_home, {})
    assert s.status == "complete"
    b = load_run(tmp_path / "b")
    assert {x.sandbox for x in b.results} == {choice.level}
    # The agent could read its copy of the checkpoint from the rig's scratch (on /dev/shm
    # here, where bubblewrap once made the way down unreadable to the slot uid).
    assert [x.status for x in b.results] == ["passed"]
    import orjson

    prov = orjson.loads((tmp_path / "b" / "provenance.json").read_bytes())
    assert prov["sandbox_warnings"] == ([choice.warning] if choice.warning else [])
    if choice.level != "bwrap":
        pytest.skip(f"bwrap cannot run here: {choice.warning}")
