"""`evalrig validate`, `seal` and `lock` on bad input: exit codes, messages, no tracebacks.

Every bad-input case of issue 2: exit 4 (2 for usage errors), the file named on stderr,
no traceback. The CLI runs in-process (typer's CliRunner) on real files.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from evalrig.cli import app
from evalrig.core.digest import canonical_line, pretty_json
from evalrig.store.files import sha256_file

ROOT = Path(__file__).resolve().parent.parent
EXACT = '[verifier]\nkind = "exact"\nexpected = "42"\n'
FRESH = "created_at = 2026-12-01T10:00:00.000000Z\n"


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def task(root: Path, suite: str, name: str, toml: str = EXACT, prompt: bool = True) -> Path:
    d = root / suite / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "task.toml").write_text(toml)
    if prompt:
        (d / "prompt.md").write_text("What is 6 x 7?\n")
    return d


def good_tasks(root: Path, fresh: str = FRESH) -> Path:
    task(root, "fixed", "one")
    task(root, "fixed", "two")
    task(root, "fresh", "new", fresh + EXACT)
    return root


def checkpoint(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "checkpoint.toml").write_text('name = "exo"\n[agent]\ncommand = ["python3", "agent.py"]\n')
    (root / "agent.py").write_text("print(42)\n")
    return root


def assert_refused(r: Result, file: Path | str, message: str, code: int = 4) -> None:
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    assert f"{file}{message}" in r.stderr.splitlines(), r.stderr


# -- the happy paths ---------------------------------------------------------------------


def test_validate_good_inputs(tmp_path: Path, evalrig_home: Path) -> None:
    ckpt = checkpoint(tmp_path / "c")
    assert cli("seal", ckpt).exit_code == 0
    # the fresh task made after the seal, as a train makes it (before it, validate warns)
    made = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    tasks = good_tasks(tmp_path / "tasks", fresh=f"created_at = {made}\n")
    args = ["validate", "--tasks", tasks, "--policies", ROOT / "policies", "--checkpoint", ckpt]
    r = cli(*args)
    assert r.exit_code == 0, r.output
    assert r.stdout == "ok: checkpoints: 1, policies: 3, tasks: 3\n"  # default v1 and v2, networked
    assert r.stderr == (f"warning: {tasks}/fixed.lock: fixed tasks not locked yet: one, two; "
                        f"run `evalrig lock --tasks {tasks}` (the fixed suite only grows once locked)\n")
    assert cli("lock", "--tasks", tasks).exit_code == 0
    r = cli(*args)
    assert (r.exit_code, r.stderr) == (0, "")


def test_validate_the_bundled_tasks_and_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    r = cli("validate")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("ok: policies: ")


def test_validate_without_arguments_uses_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good_tasks(tmp_path / "tasks")
    monkeypatch.chdir(tmp_path)
    r = cli("validate")
    assert (r.exit_code, r.stdout) == (0, "ok: tasks: 3\n")


def test_validate_with_nothing_to_do_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("validate")
    assert r.exit_code == 2
    assert "nothing to validate" in r.stderr


def test_validate_json(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    task(tasks, "fixed", "bad", prompt=False)
    r = cli("validate", "--tasks", tasks, "--json")
    assert r.exit_code == 4
    assert json.loads(r.stdout) == {
        "ok": False,
        "problems": [{"file": f"{tasks}/fixed/bad/prompt.md", "line": None, "field": None,
                      "message": "missing (every task needs a prompt.md: the text the agent is shown)"}],
        "warnings": [],
        "checked": {},
    }


def test_unsealed_checkpoint_is_a_warning(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path / "c")
    r = cli("validate", "--checkpoint", ckpt)
    assert r.exit_code == 0
    assert r.stderr.startswith(f"warning: {ckpt}: not sealed (content sha256:")


# -- bad input, one case each ------------------------------------------------------------


def test_broken_toml(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    task(tasks, "fixed", "broken", 'id = "broken"\ntimeout_s = = 3\n' + EXACT)
    assert_refused(cli("validate", "--tasks", tasks), f"{tasks}/fixed/broken/task.toml",
                   ":2: not valid TOML: invalid value (column 13)")


def test_unknown_verifier_kind(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    task(tasks, "fixed", "x", 'tags = ["a"]\n[verifier]\nkind = "fuzzy"\n')
    assert_refused(cli("validate", "--tasks", tasks), f"{tasks}/fixed/x/task.toml",
                   ":3: verifier.kind: expected one of exact, regex, json, command")


def test_regex_task_with_expected(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    task(tasks, "fixed", "x", '[verifier]\nkind = "regex"\nexpected = "4."\n')
    r = cli("validate", "--tasks", tasks)
    assert_refused(r, f"{tasks}/fixed/x/task.toml", ':1: verifier.pattern: required for kind "regex"')
    assert_refused(r, f"{tasks}/fixed/x/task.toml", ':3: verifier.expected: not a setting of kind "regex"')


def test_missing_prompt(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    task(tasks, "fixed", "x", prompt=False)
    assert_refused(cli("validate", "--tasks", tasks), f"{tasks}/fixed/x/prompt.md",
                   ": missing (every task needs a prompt.md: the text the agent is shown)")


def test_duplicate_task_id(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    task(tasks, "invariant", "copy", 'id = "one"\n' + EXACT)
    assert_refused(cli("validate", "--tasks", tasks), f"{tasks}/invariant/copy/task.toml",
                   f':1: id: "one" is also the id of {tasks}/fixed/one/ (ids are unique in a task set; rename one)')


def test_fresh_task_without_created_at(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    task(tasks, "fresh", "undated")
    assert_refused(cli("validate", "--tasks", tasks), f"{tasks}/fresh/undated/task.toml",
                   ": created_at: required for fresh tasks (UTC, e.g. 2026-12-01T10:00:00.000000Z)")


def test_naive_timestamp(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    task(tasks, "fresh", "naive", "created_at = 2026-12-01T10:00:00\n" + EXACT)
    assert_refused(cli("validate", "--tasks", tasks), f"{tasks}/fresh/naive/task.toml",
                   ":1: created_at: timestamp has no time zone; write it in UTC with a trailing Z")


def test_regex_that_does_not_compile(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    task(tasks, "fixed", "x", '[verifier]\nkind = "regex"\npattern = "(4"\n')
    assert_refused(cli("validate", "--tasks", tasks), f"{tasks}/fixed/x/task.toml",
                   ":3: verifier.pattern: does not compile (missing ), unterminated subpattern at position 0)")


def policy_variant(tmp_path: Path, old: str, new: str) -> Path:
    d = tmp_path / "policies"
    d.mkdir()
    text = (ROOT / "policies" / "default-v1.toml").read_text()
    (d / "default.toml").write_text(text)
    (d / "strict.toml").write_text(text.replace(old, new, 1))
    return d


def test_policy_with_an_unknown_key(tmp_path: Path) -> None:
    d = policy_variant(tmp_path, "[fixed]", "[fixed]\nbeta = 0.2")
    assert_refused(cli("validate", "--policies", d), d / "strict.toml",
                   ":8: fixed.beta: unknown key (expected one of alpha, stable_min_rate, aggregate_alpha)")


def test_policy_alpha_of_7(tmp_path: Path) -> None:
    d = policy_variant(tmp_path, "alpha = 0.025", "alpha = 7")
    assert_refused(cli("validate", "--policies", d), d / "strict.toml",
                   ":14: fresh.alpha: must be less than 1 (got 7)")


def test_two_policies_with_one_name_and_version_but_other_rules(tmp_path: Path) -> None:
    # Decisions are named <name>-v<version>: rules edited without a new version are refused.
    d = policy_variant(tmp_path, "min_tasks = 20", "min_tasks = 10")
    assert_refused(cli("validate", "--policies", d), d / "strict.toml",
                   ": version: policy 'default' version 1 is also "
                   f"{d / 'default.toml'} with other rules; give the edited policy a new version")
    (d / "strict.toml").write_text((d / "strict.toml").read_text().replace("version = 1", "version = 2"))
    assert cli("validate", "--policies", d).exit_code == 0


def test_nonexistent_directory(tmp_path: Path) -> None:
    assert_refused(cli("validate", "--tasks", tmp_path / "nope"), tmp_path / "nope",
                   ": no such directory (expected a task set: <dir>/<suite>/<task-id>/task.toml)")
    assert_refused(cli("seal", tmp_path / "nope"), f"error: {tmp_path}/nope", ": no such directory")
    assert_refused(cli("lock", "--tasks", tmp_path / "nope"), f"error: {tmp_path}/nope",
                   ": 1 problem in the task set")


def test_checkpoint_without_checkpoint_toml(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    msg = ": no checkpoint.toml: this is not a checkpoint directory"
    assert_refused(cli("validate", "--checkpoint", tmp_path / "c"), tmp_path / "c", msg)
    assert_refused(cli("seal", tmp_path / "c"), f"error: {tmp_path}/c", msg)


def test_checkpoint_changed_after_sealing(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path / "c")
    sealed = json.loads(cli("seal", ckpt, "--json").stdout)
    (ckpt / "agent.py").write_text("print(43)\n")
    r = cli("validate", "--checkpoint", ckpt)
    assert r.exit_code == 4
    assert r.stderr.startswith(f"{ckpt}: changed since it was sealed as {sealed['checkpoint_id']} "
                               "(its content is now sha256:")


def test_fixed_task_removed_against_the_lock(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    r = cli("lock", "--tasks", tasks)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"locked 2 fixed tasks in {tasks}/fixed.lock (2 new)\n")
    shutil.rmtree(tasks / "fixed" / "two")
    msg = (":5: tasks.two: locked fixed task two is missing from the task set; the fixed suite "
           f"only grows: restore {tasks}/fixed/two")
    assert_refused(cli("validate", "--tasks", tasks), f"{tasks}/fixed.lock", msg)
    assert_refused(cli("lock", "--tasks", tasks), f"  {tasks}/fixed.lock", msg)


def test_lock_only_adds(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    assert cli("lock", "--tasks", tasks).exit_code == 0
    first = json.loads((tasks / "fixed.lock").read_text())
    task(tasks, "fixed", "three")
    r = cli("lock", "--tasks", tasks, "--json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert out["added"] == ["three"]
    lock = json.loads((tasks / "fixed.lock").read_text())
    assert lock["schema_version"] == "1.0"
    assert {k: v for k, v in lock["tasks"].items() if k != "three"} == first["tasks"]
    assert (tasks / "fixed.lock").read_bytes() == pretty_json(lock)
    assert cli("lock", "--tasks", tasks, "--json").exit_code == 0
    assert json.loads((tasks / "fixed.lock").read_text()) == lock  # locking again changes nothing


def test_fifo_inside_a_checkpoint_on_seal(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path / "c")
    os.mkfifo(ckpt / "pipe")
    r = cli("seal", ckpt)
    assert_refused(r, f"error: {ckpt}", ": FIFO at pipe cannot be part of a sealed tree")


def test_symlink_in_a_checkpoint_on_seal(tmp_path: Path, evalrig_home: Path) -> None:
    ckpt = checkpoint(tmp_path / "c")
    target = tmp_path / "target.txt"
    target.write_text("a")
    os.symlink(target, ckpt / "link")
    first = json.loads(cli("seal", ckpt, "--json").stdout)["checkpoint_id"]
    target.write_text("b" * 100)  # the linked file's content is not part of the id
    assert cli("validate", "--checkpoint", ckpt).exit_code == 0
    os.remove(ckpt / "link")
    os.symlink(tmp_path / "other.txt", ckpt / "link")  # its target string is
    r = cli("validate", "--checkpoint", ckpt)
    assert r.exit_code == 4 and f"changed since it was sealed as {first}" in r.stderr


def test_bad_toml_checkpoint_on_seal(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path / "c")
    (ckpt / "checkpoint.toml").write_text('name = "exo"\n[agent]\ncommand = "python3 agent.py"\n')
    assert_refused(cli("seal", ckpt), f"error: {ckpt}/checkpoint.toml",
                   ":3: agent.command: must be a valid list (got 'python3 agent.py')")


def test_seal_human_output(tmp_path: Path, evalrig_home: Path) -> None:
    ckpt = checkpoint(tmp_path / "c")
    r = cli("seal", ckpt)
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[0] == f"sealed: {ckpt}"
    assert [line.split()[0] for line in lines[1:]] == ["id", "name", "sealed_at", "files", "bytes"]
    assert cli("seal", ckpt).stdout.startswith("already sealed (the first sealing counts)")


# -- bundles -----------------------------------------------------------------------------

T = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
D = "sha256:" + "a" * 64


def run_bundle(root: Path, status: str = "incomplete") -> Path:
    from evalrig.models.run import AttemptEvent, RunManifest

    root.mkdir(parents=True)
    events = [
        AttemptEvent(event="start", trial_id="t1", attempt_id="a1", attempt=1, task_id="one", rep=0, at=T),
        AttemptEvent(event="end", trial_id="t1", attempt_id="a1", attempt=1, task_id="one", rep=0, at=T,
                     status="passed"),
    ]
    (root / "attempts.jsonl").write_bytes(b"".join(canonical_line(e) for e in events))
    files = {"attempts.jsonl": sha256_file(root / "attempts.jsonl")}
    manifest = RunManifest.model_validate({
        "run_id": "r1", "rig_version": "0.1.0",
        "checkpoint": {"id": D, "name": "exo", "sealed_at": T},
        "taskset": {"id": D, "count": 1, "suites": {"fixed": 1}},
        "repeat": 1, "seed": 0,
        "settings": {"timeout_scale": 1, "max_retries": 2, "sandbox": "process", "tasks_dir": "tasks",
                     "checkpoint_dir": "c", "jobs": 1},
        "subset": False, "policy_pin": None, "plan_digest": D, "status": status,
        "counts": {k: 0 for k in ("scored", "passed", "failed", "agent_error", "timeout",
                                  "infra_error", "interrupted")} | {"trials": 1, "unscored": 1, "attempts": 1},
        "seal_checks": [], "created_at": T, "finished_at": T if status != "running" else None,
        "files": files if status != "running" else {},
    })
    (root / "manifest.json").write_bytes(pretty_json(manifest))
    return root


def test_good_run_bundle(tmp_path: Path) -> None:
    b = run_bundle(tmp_path / "run")
    r = cli("validate", b)
    assert (r.exit_code, r.stdout) == (0, "ok: bundles: 1\n"), r.output


def test_a_run_manifest_that_disagrees_with_its_records(tmp_path: Path) -> None:
    # The bundle digest covers the files, not the manifest: a status edited to complete
    # (one trial, no result) is caught by what the records give.
    b = run_bundle(tmp_path / "run", status="complete")
    r = cli("validate", b)
    assert r.exit_code == 4
    assert (f"{b}/manifest.json: status: the manifest says complete, the records make it incomplete"
            in r.stderr.splitlines()), r.stderr


def test_run_bundle_with_a_bad_and_a_torn_line(tmp_path: Path) -> None:
    b = run_bundle(tmp_path / "run", status="running")
    with open(b / "attempts.jsonl", "ab") as f:
        f.write(b'{"schema_version": "1.0", "event": "middle"}\n{"event": "st')
    r = cli("validate", b)
    assert r.exit_code == 4
    errs = r.stderr.splitlines()
    assert f"{b}/attempts.jsonl:3: event: expected one of start, end (got 'middle')" in errs
    assert f"{b}/attempts.jsonl:3: trial_id: required" in errs
    assert (f"{b}/attempts.jsonl:4: torn last line (no trailing newline: a crash cut it short); "
            "`evalrig run --out BUNDLE --resume` cuts it off and runs the trial again") in errs
    # Issue #12 item 6: a running bundle nothing holds is said to be interrupted, with the resume.
    assert (f"warning: {b}/manifest.json: status: interrupted: the run never finished, and no "
            "process holds the bundle (it was killed, or the machine went down); resume with "
            f"`evalrig run --out {b} --resume` (its files have no digests to check until it "
            "finishes)") in errs


def test_run_bundle_digest_mismatch(tmp_path: Path) -> None:
    b = run_bundle(tmp_path / "run")
    data = (b / "attempts.jsonl").read_bytes()
    (b / "attempts.jsonl").write_bytes(data.replace(b'"rep":0', b'"rep":1', 1))
    r = cli("validate", b)
    assert r.exit_code == 4
    assert any(line.startswith(f"{b}/attempts.jsonl: digest sha256:") and "differs from manifest.json's" in line
               for line in r.stderr.splitlines()), r.stderr


@pytest.mark.parametrize("name", ["manifest.json", "attempts.jsonl"])
def test_a_directory_in_place_of_a_bundle_file_is_a_problem_not_a_crash(tmp_path: Path, name: str) -> None:
    b = run_bundle(tmp_path / "run")
    (b / name).unlink()
    (b / name).mkdir()
    r = cli("validate", b)
    assert r.exit_code == 4, r.output
    assert f"{b / name}: cannot be read (Is a directory)" in r.stderr.splitlines()


def test_a_directory_in_place_of_fixed_lock_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    root = good_tasks(tmp_path / "tasks")
    (root / "fixed.lock").mkdir()
    for args in (("validate", "--tasks", root), ("lock", "--tasks", root)):
        r = cli(*args)
        assert r.exit_code == 4, r.output
        assert f"{root / 'fixed.lock'}: is a directory, not a JSON file" in r.stderr


def test_not_a_bundle(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    assert_refused(cli("validate", tmp_path / "b"), tmp_path / "b" / "manifest.json",
                   ": missing: not a bundle the rig wrote")
    (tmp_path / "b" / "manifest.json").write_text('{"kind": "party"}')
    assert_refused(cli("validate", tmp_path / "b"), tmp_path / "b" / "manifest.json",
                   ": kind: expected one of run, comparison (got 'party')")


def test_bundles_written_by_compare(tmp_path: Path, evalrig_home: Path) -> None:
    """Run bundles built like the runner's and a comparison bundle from `evalrig compare`."""
    gate_bundles = pytest.importorskip("gate_bundles")
    champ = gate_bundles.Side("champ", gate_bundles.counts_tasks([2, 3, 4]))
    cand = gate_bundles.Side("cand", gate_bundles.counts_tasks([3, 4, 5]))
    a = gate_bundles.write_run(tmp_path / "a", champ, evalrig_home)
    b = gate_bundles.write_run(tmp_path / "b", cand, evalrig_home)
    c = tmp_path / "cmp"
    made = cli("compare", a, b, "--out", c)
    if made.exit_code != 0:
        pytest.skip(f"compare is not ready: {made.output}")
    r = cli("validate", a, b, c)
    assert (r.exit_code, r.stdout) == (0, "ok: bundles: 3\n"), r.output
    (c / "comparison.json").write_bytes((c / "comparison.json").read_bytes().replace(b'"repeat": 5', b'"repeat": 6'))
    r = cli("validate", c)
    assert r.exit_code == 4
    assert f"{c}/comparison.json: digest sha256:" in r.stderr


# -- finding the line of a key (evalrig.store.tomlerr) -----------------------------------------


def test_key_lines() -> None:
    from evalrig.core.tomlerr import key_lines, line_of

    text = (
        'id = "x"\n'                       # 1
        'note = """\n'                     # 2
        'kind = "not a key"\n'             # 3  inside a multi-line string
        '"""\n'                            # 4
        'resources.cpus = 2\n'             # 5  dotted key
        '[verifier]  # the check\n'        # 6
        'kind = "regex"\n'                 # 7
        "'quoted key' = 1\n"               # 8
        '[[runs]]\n'                       # 9
        'n = 1\n'                          # 10
    )
    index = key_lines(text)
    assert line_of(index, ("id",)) == 1
    assert line_of(index, ("kind",)) is None
    assert line_of(index, ("resources", "cpus")) == 5
    assert line_of(index, ("verifier",)) == 6
    assert line_of(index, ("verifier", "kind")) == 7
    assert line_of(index, ("verifier", "pattern")) == 6  # missing: its table
    assert line_of(index, ("verifier", "quoted key")) == 8
    assert line_of(index, ("runs", "n")) == 10


def test_syntax_error_at_the_end_of_the_file(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    task(tasks, "fixed", "x", 'tags = ["a",\n')
    r = cli("validate", "--tasks", tasks)
    assert r.exit_code == 4
    assert f"{tasks}/fixed/x/task.toml:2: not valid TOML: " in r.stderr


def test_not_utf8(tmp_path: Path) -> None:
    tasks = good_tasks(tmp_path / "tasks")
    d = task(tasks, "fixed", "x")
    (d / "task.toml").write_bytes(b'id = "x"\ntags = ["\xff"]\n' + EXACT.encode())
    assert_refused(cli("validate", "--tasks", tasks), d / "task.toml", ":2: not UTF-8 (column 10); save the file as UTF-8")


def test_problems_end_with_what_to_do_and_a_file_is_not_called_missing(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x\n")
    r = cli("validate", tmp_path / "afile")
    assert r.exit_code == 4
    lines = r.stderr.splitlines()
    assert lines[0] == f"{tmp_path / 'afile'}: not a directory (expected a bundle)"
    assert lines[-1].startswith("  -> fix each problem above") and "evalrig validate" in lines[-1]
    r = cli("validate", tmp_path / "nope")
    assert r.stderr.splitlines()[0] == f"{tmp_path / 'nope'}: no such directory (expected a bundle)"


def test_a_bad_path_says_nothing_could_be_checked_not_checked_nothing(tmp_path: Path) -> None:
    r = cli("validate", "--tasks", tmp_path / "nope")
    assert r.exit_code == 4
    assert "1 problem found (nothing could be checked past these problems)" in r.stderr
    assert "checked: nothing" not in r.stderr


def test_an_empty_task_set_validates_with_a_warning_saying_what_a_task_set_holds(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    r = cli("validate", "--tasks", tmp_path / "tasks")
    assert (r.exit_code, r.stdout) == (0, "ok: tasks: 0\n")
    assert f"warning: {tmp_path / 'tasks'}: no task here (expected <dir>/<suite>/<task-id>/task.toml" in r.stderr
    assert "evalrig init task NAME" in r.stderr
