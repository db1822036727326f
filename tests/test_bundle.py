"""The run bundle's lock, reader and digests (evalrig.store.bundle), on real files and processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from evalrig.core.errors import EvalrigError
from evalrig.models.run import (
    Canary,
    CheckpointRef,
    Result,
    RunCounts,
    RunManifest,
    RunSettings,
    TasksetRef,
    VerifierIdentity,
)
from evalrig.store.bundle import (
    BundleLock,
    check_run_digests,
    file_digests,
    final_results,
    load_run,
)
from evalrig.store.files import write_json_atomic
from evalrig.store.jsonl import append_line, cut_torn_tail, read_rows

D = "sha256:" + "0" * 64
T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def manifest(status: str = "complete", files: dict[str, str] | None = None) -> RunManifest:
    zero = RunCounts(trials=0, scored=0, passed=0, failed=0, agent_error=0, timeout=0,
                     infra_error=0, interrupted=0, attempts=0, unscored=0)
    return RunManifest(
        run_id="run-x", rig_version="0.1.0",
        checkpoint=CheckpointRef(id=D, name="exo", sealed_at=T0),
        taskset=TasksetRef(id=D, count=1, suites={"fixed": 1}),
        repeat=1, seed=0,
        settings=RunSettings(timeout_scale=1, max_retries=2, sandbox="process", tasks_dir="/t",
                             checkpoint_dir="/c", jobs=1),
        subset=False, policy_pin=None, plan_digest=D, status=status,  # type: ignore[arg-type]
        counts=zero, seal_checks=[], created_at=T0, files=files or {},
    )


def result(trial: str, attempt: int, status: str, inputs: str = D) -> Result:
    task, rep = trial.split(":")
    return Result(
        trial_id=trial, attempt_id=f"{task}-{rep}-{attempt}", attempt=attempt, task_id=task,
        suite="fixed", rep=int(rep), inputs_id=inputs, status=status,  # type: ignore[arg-type]
        passed={"passed": True, "failed": False}.get(status), reward=None,
        verifier=VerifierIdentity(kind="exact", version="1", digest=D), sandbox="process",
        containment="namespace", network=False, canary=Canary(value="c", found=False),
        evidence_digest=D, evidence_bytes=0,
    )


def test_final_results_take_the_last_scored_attempt_with_current_inputs(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "manifest.json", manifest())
    other = "sha256:" + "1" * 64
    for r in [result("a:0", 1, "infra_error"), result("a:0", 2, "passed"),
              result("b:0", 1, "passed"), result("b:0", 2, "infra_error", inputs=other),
              result("c:0", 1, "infra_error")]:
        append_line(tmp_path / "results.jsonl", r)
    final = final_results(load_run(tmp_path))
    assert {k: v.attempt_id for k, v in final.items()} == {"a:0": "a-0-2"}
    # b:0's scored result was made with inputs its latest attempt no longer has: it never counts.


def test_a_torn_last_line_is_reported_ignored_and_cut(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "manifest.json", manifest())
    append_line(tmp_path / "results.jsonl", result("a:0", 1, "passed"))
    with open(tmp_path / "results.jsonl", "ab") as f:
        f.write(b'{"trial_id": "a:1", "attem')
    b = load_run(tmp_path)
    assert b.torn == {"results.jsonl": 2}
    assert [r.trial_id for r in b.results] == ["a:0"]
    assert cut_torn_tail(tmp_path / "results.jsonl")
    assert load_run(tmp_path).torn == {}
    assert (tmp_path / "results.jsonl").read_bytes().endswith(b"}\n")


def test_a_malformed_whole_line_names_file_line_and_field(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "manifest.json", manifest())
    append_line(tmp_path / "results.jsonl", result("a:0", 1, "passed"))
    bad = result("a:1", 1, "passed").model_dump(mode="json") | {"status": "great"}
    append_line(tmp_path / "results.jsonl", bad)
    with pytest.raises(EvalrigError) as e:
        load_run(tmp_path)
    assert e.value.line == 2 and e.value.field == "status"
    assert e.value.file is not None and e.value.file.endswith("results.jsonl")


def test_rows_read_only_named_fields_and_name_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append_line(path, result("a:0", 1, "passed"))
    append_line(path, result("a:1", 1, "failed").model_dump(mode="json") | {"status": True})
    fields = {"trial_id": (str,), "status": (str,)}
    with pytest.raises(EvalrigError) as e:
        read_rows(path, fields)
    assert (e.value.line, e.value.field) == (2, "status")
    assert e.value.message == "expected str, got True"
    path.write_bytes(path.read_bytes().split(b"\n")[0] + b"\n" + b'{"trial_id": "a:1"')
    rows = read_rows(path, fields)
    assert rows.records == [{"trial_id": "a:0", "status": "passed"}] and rows.torn_line == 2
    assert read_rows(path, {"trial_id": (str,)}).records == [{"trial_id": "a:0"}]
    with pytest.raises(EvalrigError, match="expected int, missing"):
        read_rows(path, {"nope": (int,)})


def test_digests_catch_changed_missing_and_added_files(tmp_path: Path) -> None:
    (tmp_path / "attempts" / "x").mkdir(parents=True)
    (tmp_path / "attempts" / "x" / "stdout.txt").write_text("hi")
    append_line(tmp_path / "results.jsonl", result("a:0", 1, "passed"))
    (tmp_path / ".lock").touch()
    files = file_digests(tmp_path)
    assert set(files) == {"attempts/x/stdout.txt", "results.jsonl"}
    write_json_atomic(tmp_path / "manifest.json", manifest(files=files))
    assert check_run_digests(tmp_path) == []

    (tmp_path / "attempts" / "x" / "stdout.txt").write_text("ho")
    (tmp_path / "results.jsonl").unlink()
    (tmp_path / "extra.txt").write_text("")
    msgs = [p.render() for p in check_run_digests(tmp_path)]
    assert len(msgs) == 3
    assert "stdout.txt: digest" in msgs[0] and "differs from manifest.json" in msgs[0]
    assert msgs[1].endswith("results.jsonl: missing (listed in manifest.json files)")
    assert "extra.txt: not listed" in msgs[2]


def test_a_running_bundle_has_no_digests_to_trust(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "manifest.json", manifest(status="running"))
    [p] = check_run_digests(tmp_path)
    assert "never finished" in p.message and p.field == "status"


def test_a_second_process_is_refused_at_once_and_told_the_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from pathlib import Path
            from evalrig.store.bundle import BundleLock
            with BundleLock(Path({str(tmp_path)!r}), ["evalrig", "run", "--holder"]):
                print("locked", flush=True)
                sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(EvalrigError) as e:
            BundleLock(tmp_path, ["second"]).acquire()
        assert f"pid {holder.pid}" in e.value.message
        assert "evalrig run --holder" in e.value.message
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    # Released when the holder ends: the next one gets it.
    with BundleLock(tmp_path, ["third"]):
        pass


def test_a_killed_holder_leaves_the_bundle_unlocked(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import time
            from pathlib import Path
            from evalrig.store.bundle import BundleLock
            BundleLock(Path({str(tmp_path)!r}), ["x"]).acquire()
            print("locked", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    holder.kill()
    holder.wait(10)
    with BundleLock(tmp_path, ["next"]):
        pass
