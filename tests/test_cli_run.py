"""`evalrig run` in-process (typer's CliRunner) on real checkpoints, tasks and agents."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from agents.run_kit import add_task, cli, make_checkpoint, make_tasks, results_by_trial

from evalrig.core.plan import trial_seed
from evalrig.store.bundle import file_digests, load_run
from evalrig.store.files import sha256_file


@pytest.fixture
def kit(tmp_path: Path, evalrig_home: Path) -> tuple[Path, Path]:
    return make_checkpoint(tmp_path, evalrig_home, history='{"prev": null}\n'), make_tasks(tmp_path, 3)


def run(ck: Path, tasks: Path, out: Path, *more: str) -> object:
    return cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "2",
               "--sandbox", "process", "--jobs", "2", *more)


def test_a_complete_run_records_what_compare_and_gate_need(kit, tmp_path: Path, repo_root: Path) -> None:
    ck, tasks = kit
    out = tmp_path / "b"
    policy = repo_root / "policies" / "default.toml"
    r = run(ck, tasks, out, "--policy", policy, "--json")
    assert r.exit_code == 0, r.stderr
    summary = orjson.loads(r.stdout)
    assert summary["status"] == "complete" and summary["bundle"] == str(out)
    assert summary["counts"]["trials"] == 6 and summary["counts"]["unscored"] == 0

    b = load_run(out)
    m = b.manifest
    assert m.status == "complete" and not m.subset and m.repeat == 2 and m.seed == 0
    assert [c.phase for c in m.seal_checks] == ["start", "end"]
    assert all(c.matched and c.checkpoint_id == m.checkpoint.id for c in m.seal_checks)
    assert m.taskset.count == 3 and m.taskset.suites == {"fixed": 2, "fresh": 1, "invariant": 0}
    assert list(m.taskset.fresh_created_at) == ["t1"]
    assert m.policy_pin is not None and m.policy_pin.digest == sha256_file(policy)
    assert m.policy_pin.name == "default"
    assert m.history == "declared"
    assert (out / "history.jsonl").read_text() == '{"prev": null}\n'
    assert m.files == file_digests(out) and "history.jsonl" in m.files
    assert "provenance.json" in m.files and "manifest.json" not in m.files
    # one start and one end line per attempt, an estimate, an actual and a result each
    assert [e.event for e in b.attempts].count("start") == 6 == len(b.results)
    assert len(b.estimates) == 6 == len(b.actuals)
    assert {r.sandbox for r in b.results} == {"process"}
    prov = orjson.loads((out / "provenance.json").read_bytes())
    assert prov["argv"][0] == "evalrig" and "pydantic" in prov["dependencies"]


def test_the_agent_sees_the_seed_of_the_formula_the_same_in_two_runs(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    seeds = []
    for name in ("one", "two"):
        assert run(ck, tasks, tmp_path / name, "--seed", "7").exit_code == 0
        b = load_run(tmp_path / name)
        seeds.append({r.trial_id: int((tmp_path / name / "attempts" / r.attempt_id / "out"
                                       / "seed.txt").read_text()) for r in b.results})
    assert seeds[0] == seeds[1]
    assert seeds[0]["t2:1"] == trial_seed(7, "t2", 1)
    assert len(set(seeds[0].values())) == 6


def test_repeat_zero_is_a_usage_error(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--repeat", "0")
    assert r.exit_code == 2
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("scale", ["0", "-1", "nan", "inf"])
def test_a_timeout_scale_out_of_range_is_a_usage_error(kit, tmp_path: Path, scale: str) -> None:
    ck, tasks = kit
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--timeout-scale", scale)
    assert r.exit_code == 2, r.stderr
    assert f"--timeout-scale {float(scale)}: must be" in r.stderr
    assert not (tmp_path / "b").exists()


def test_an_unknown_suite_is_a_usage_error(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--suite", "fixd")
    assert r.exit_code == 2, r.stderr
    assert "--suite fixd: expected one of fixed, fresh, invariant" in r.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(("where", "message"), [
    ("out-in-checkpoint", "--out {ck}/runs/b is inside --checkpoint {ck}"),
    ("out-in-tasks", "--out {tasks}/runs is inside --tasks {tasks}"),
])
def test_a_bundle_inside_the_checkpoint_or_the_task_set_is_refused(
        kit, tmp_path: Path, where: str, message: str) -> None:
    # Inside the checkpoint it changes the sealed content (the run would end void); inside
    # the task set it becomes a stray folder there.
    ck, tasks = kit
    out = ck / "runs" / "b" if where == "out-in-checkpoint" else tasks / "runs"
    r = run(ck, tasks, out)
    assert r.exit_code == 2, r.stderr
    assert message.format(ck=ck.resolve(), tasks=tasks.resolve()).split(" is inside")[1] in r.stderr
    assert not out.exists()


def test_a_task_set_inside_the_checkpoint_is_refused(tmp_path: Path, evalrig_home: Path) -> None:
    # Every workspace gets a copy of the checkpoint: the verifiers would go with it.
    from agents.run_kit import SEALED_AT

    from evalrig.store.checkpoint import seal

    ck = make_checkpoint(tmp_path, evalrig_home, do_seal=False)
    tasks = make_tasks(ck, 1)
    seal(ck, evalrig_home, SEALED_AT)
    r = run(ck, tasks, tmp_path / "b")
    assert r.exit_code == 2, r.stderr
    assert f"is inside --checkpoint {ck.resolve()}" in r.stderr
    assert not (tmp_path / "b").exists()


def test_an_unsealed_checkpoint_is_refused_before_any_bundle_exists(tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path, evalrig_home, do_seal=False)
    r = run(ck, make_tasks(tmp_path, 1), tmp_path / "b")
    assert r.exit_code == 4
    assert "not sealed" in r.stderr and str(ck) in r.stderr
    assert not (tmp_path / "b").exists()


def test_a_checkpoint_changed_after_sealing_is_refused(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    (ck / "agent.py").write_text((ck / "agent.py").read_text() + "\n# edited\n")
    r = run(ck, tasks, tmp_path / "b")
    assert r.exit_code == 4
    assert "changed since it was sealed" in r.stderr and "Traceback" not in r.stderr


def test_filters_mark_the_run_a_subset(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    add_task(tasks, "tagged", "answer: even\n", tags=["slow"])
    assert run(ck, tasks, tmp_path / "b", "--tag", "slow", "--suite", "fixed").exit_code == 0
    m = load_run(tmp_path / "b").manifest
    assert m.subset and m.counts.trials == 2
    assert m.settings.tags == ["slow"] and m.settings.suites == ["fixed"]


def test_an_agent_error_counts_as_a_scored_failure(tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path, evalrig_home)
    tasks = tmp_path / "tasks"
    add_task(tasks, "exits3", "answer: even\nexit: 3\n")
    r = run(ck, tasks, tmp_path / "b")
    assert r.exit_code == 0, r.stderr
    m = load_run(tmp_path / "b").manifest
    assert m.counts.agent_error == 2 and m.counts.unscored == 0


def test_a_missing_secret_is_refused_before_the_bundle(
        kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck, tasks = kit
    monkeypatch.delenv("EVALRIG_TEST_KEY", raising=False)
    r = run(ck, tasks, tmp_path / "b", "--secret", "EVALRIG_TEST_KEY")
    assert r.exit_code == 4 and "--secret EVALRIG_TEST_KEY: not set" in r.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("name", ["HOME", "PATH", "EVALRIG_SEED", "RELEASE_SIGNING_TOKEN"])
def test_a_secret_named_like_a_variable_the_rig_sets_is_refused(
        kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # The rig's own value would silently win, and then be redacted as if it were secret.
    ck, tasks = kit
    monkeypatch.setenv(name, "value")
    r = run(ck, tasks, tmp_path / "b", "--secret", name)
    assert r.exit_code == 4, r.stderr
    assert f"--secret {name}: the rig sets this variable for the agent itself" in r.stderr
    assert not (tmp_path / "b").exists()


def test_out_that_is_not_a_bundle_is_refused(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    r = run(ck, tasks, tmp_path / "b")
    assert r.exit_code == 4 and "not a run bundle" in r.stderr


def test_a_declared_history_log_that_is_missing_is_refused(tmp_path: Path, evalrig_home: Path) -> None:
    # Refused already at seal (run would refuse it), and by validate.
    ck = make_checkpoint(tmp_path, evalrig_home, history="", do_seal=False)
    (ck / "state" / "events.jsonl").unlink()
    message = "checkpoint.toml: history.log: state/events.jsonl is not a file"
    for args in (("seal", ck), ("validate", "--checkpoint", ck)):
        r = cli(*args)
        assert r.exit_code == 4 and message in r.stderr, r.output
    assert not (evalrig_home / "seals.jsonl").exists()
    r = run(ck, make_tasks(tmp_path, 1), tmp_path / "b")
    assert r.exit_code == 4
    assert not (tmp_path / "b").exists()


def test_keep_workspaces_keeps_them_and_says_where(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    r = run(ck, tasks, tmp_path / "b", "--keep-workspaces")
    assert r.exit_code == 0, r.stderr
    where = Path(r.stderr.split("the attempt workspaces are in ")[1].split()[0])
    try:
        kept = [p for p in where.iterdir() if (p / "agent" / "agent.py").exists()]
        assert len(kept) == 6
    finally:
        import shutil

        shutil.rmtree(where)


def test_a_command_verifier_finds_the_evidence_of_a_relative_out(
        tmp_path: Path, evalrig_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The verifier starts in its task's verifier/ folder: EVALRIG_EVIDENCE must not be
    # relative to the directory `run` was started in.
    ck = make_checkpoint(tmp_path, evalrig_home)
    d = tmp_path / "tasks" / "fixed" / "cmd"
    (d / "verifier").mkdir(parents=True)
    (d / "prompt.md").write_text("answer: even\n")
    (d / "task.toml").write_text('[verifier]\nkind = "command"\ncommand = ["python3", "check.py"]\n')
    (d / "verifier" / "check.py").write_text(
        "import os, pathlib, sys\n"
        "a = pathlib.Path(os.environ['EVALRIG_EVIDENCE'], 'out', 'answer.txt').read_text()\n"
        "sys.exit(0 if a.strip() == 'even' else 1)\n")
    monkeypatch.chdir(tmp_path)
    r = run(Path(ck.name), Path("tasks"), Path("b"))
    assert r.exit_code == 0, r.stderr
    assert set(results_by_trial(tmp_path / "b").values()) == {"passed"}


def test_a_command_verifier_cannot_write_the_stored_evidence_under_process(
        tmp_path: Path, evalrig_home: Path) -> None:
    # EVALRIG_EVIDENCE is read-only by contract; without a mount namespace the verifier
    # gets a private copy, so the bundle keeps what the agent wrote.
    ck = make_checkpoint(tmp_path, evalrig_home)
    d = tmp_path / "tasks" / "fixed" / "scribble"
    (d / "verifier").mkdir(parents=True)
    (d / "prompt.md").write_text("answer: even\n")
    (d / "task.toml").write_text('[verifier]\nkind = "command"\ncommand = ["python3", "scribble.py"]\n')
    # it tries, and fails on purpose (exit 1 with no traceback: an uncaught error would be
    # the verifier's crash, a fault, docs/tasks.md)
    (d / "verifier" / "scribble.py").write_text(
        "import os, pathlib, sys\n"
        "try:\n"
        "    pathlib.Path(os.environ['EVALRIG_EVIDENCE'], 'out', 'answer.txt').write_text('scribbled')\n"
        "except OSError:\n"
        "    pass\n"
        "sys.exit(1)\n")
    out = tmp_path / "b"
    assert run(ck, tmp_path / "tasks", out).exit_code == 0
    b = load_run(out)
    for r in b.results:
        assert (out / "attempts" / r.attempt_id / "out" / "answer.txt").read_text().strip() == "even"


@pytest.mark.parametrize("what", ["a file", "a comparison bundle"])
def test_verify_of_something_that_is_not_a_run_bundle_says_so(tmp_path: Path, what: str) -> None:
    # Not a schema dump of a manifest of another kind, nor "x/manifest.json: cannot be read".
    target = tmp_path / "thing"
    if what == "a file":
        target.write_text("x\n")
    else:
        target.mkdir()
        (target / "manifest.json").write_text('{"kind": "comparison"}\n')
    r = cli("verify", target, "--json")
    assert r.exit_code == 4, r.output
    e = orjson.loads(r.stdout)["error"]
    assert e["file"] == str(target) and "not a run bundle" in e["message"]
    assert "evalrig run" in e["hint"] and not e["problems"]


def test_a_task_set_with_nothing_to_run_is_named_in_the_error(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    empty = tmp_path / "empty-tasks"
    empty.mkdir()
    r = run(ck, empty, tmp_path / "b1", "--json")
    assert r.exit_code == 4
    e = orjson.loads(r.stdout)["error"]
    assert e["file"] == str(empty) and e["message"] == "the task set has no tasks"
    r = run(ck, tasks, tmp_path / "b2", "--task", "nope")
    assert r.exit_code == 4
    assert r.stderr.startswith(f"error: {tasks}: --task nope: no such task in the task set\n")
    r = run(ck, tasks, tmp_path / "b3", "--tag", "nope")
    assert r.exit_code == 4 and r.stderr.startswith(f"error: {tasks}: --suite/--task/--tag: ")


def test_an_out_inside_another_bundle_is_refused(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    first = tmp_path / "b"
    assert run(ck, tasks, first).exit_code == 0
    r = run(ck, tasks, first / "inner")
    assert r.exit_code == 2 and f"is inside the bundle {first}" in r.stderr
    assert not (first / "inner").exists()
    assert cli("verify", first).exit_code == 0


def test_the_terminal_progress_bar_is_not_red_while_all_is_well() -> None:
    from rich.progress import BarColumn

    from evalrig.cli.cmd_run import BarReporter

    bar = next(c for c in BarReporter()._bar.columns if isinstance(c, BarColumn))
    assert (str(bar.complete_style), str(bar.finished_style)) == ("green", "green")


def test_one_trial_is_said_in_the_singular(tmp_path: Path, evalrig_home: Path) -> None:
    ck, tasks = make_checkpoint(tmp_path, evalrig_home), make_tasks(tmp_path, 1)
    r = cli("run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b", "--repeat", "1",
            "--sandbox", "process", "--jobs", "1")
    assert r.exit_code == 0, r.stderr
    assert "running 1 trial\n" in r.stderr and "1 trials" not in r.stderr + r.stdout


def test_count_says_one_in_the_singular() -> None:
    from evalrig.core.words import count

    assert [count(0, "task"), count(1, "task"), count(2, "task"), count(1, "policy", "policies"),
            count(3, "policy", "policies")] == ["0 tasks", "1 task", "2 tasks", "1 policy", "3 policies"]
