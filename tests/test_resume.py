"""Resume after every way a run can stop: kill -9, SIGTERM, a torn line, a second process,
changed settings and changed tasks. The rig runs as a real subprocess where it must die."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from agents.run_kit import add_task, cli, make_checkpoint, make_tasks, results_by_trial

from evalrig.models.run import SCORED
from evalrig.store.bundle import load_run
from evalrig.store.files import write_json_atomic

ROOT = Path(__file__).resolve().parent.parent


def args(ck: Path, tasks: Path, out: Path, repeat: int = 3) -> list[str]:
    return ["run", "--checkpoint", str(ck), "--tasks", str(tasks), "--out", str(out),
            "--repeat", str(repeat), "--sandbox", "process", "--jobs", "2"]


def start_rig(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "evalrig", *argv], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_running(p: subprocess.Popen[str]) -> None:
    """Block until the rig says it has started running trials (its first progress line)."""
    assert p.stderr is not None
    line = p.stderr.readline()
    assert line.startswith(("running", "resuming")), line


def assert_consistent(out: Path, expected: dict[str, str]) -> None:
    """Outcomes as expected, one scored result per trial, every start ended, verify passes."""
    assert results_by_trial(out) == expected
    b = load_run(out)
    scored: dict[str, int] = {}
    for r in b.results:
        if r.status in SCORED:
            scored[r.trial_id] = scored.get(r.trial_id, 0) + 1
    assert scored == {t: 1 for t in expected}
    starts = [e.attempt_id for e in b.attempts if e.event == "start"]
    ends = [e.attempt_id for e in b.attempts if e.event == "end"]
    assert sorted(starts) == sorted(ends) and len(set(starts)) == len(starts)
    assert b.torn == {}
    v = cli("verify", out)
    assert v.exit_code == 0, v.stderr


@pytest.fixture
def kit(tmp_path: Path, evalrig_home: Path) -> tuple[Path, Path]:
    ck = make_checkpoint(tmp_path, evalrig_home)
    return ck, make_tasks(tmp_path, 6, prompt="sleep: 0.05\nanswer: parity\n")


def test_kill_9_at_random_moments_then_resume_gives_the_uninterrupted_outcomes(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    ref = tmp_path / "ref"
    assert cli(*args(ck, tasks, ref)).exit_code == 0
    expected = results_by_trial(ref)
    assert len(expected) == 18 and len(set(expected.values())) == 2
    for seed in range(4):
        out = tmp_path / f"killed-{seed}"
        p = start_rig(args(ck, tasks, out))
        time.sleep(random.Random(seed).uniform(0.2, 1.5))
        p.kill()
        p.wait(10)
        r = cli(*args(ck, tasks, out))
        assert r.exit_code == 0, (seed, r.stderr)
        assert_consistent(out, expected)


def test_sigterm_stops_with_130_records_interrupted_and_resume_completes(tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path, evalrig_home)
    tasks = make_tasks(tmp_path, 2, prompt="sleep: 30\nanswer: even\n")
    out = tmp_path / "b"
    p = start_rig(args(ck, tasks, out, repeat=2))
    wait_running(p)
    while b"start" not in (out / "attempts.jsonl").read_bytes():
        time.sleep(0.02)  # the start line is written just before the attempt is handed out
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    _, stderr = p.communicate(timeout=20)
    assert p.returncode == 130, stderr
    assert time.monotonic() - t0 < 10  # the 30 s agents were killed, not waited for
    assert "resumable" in stderr
    b = load_run(out)
    assert b.manifest.status == "incomplete"
    assert b.manifest.counts.interrupted >= 1
    assert {e.status for e in b.attempts if e.event == "end"} == {"interrupted"}

    # Resume with --out alone; make the agent quick first (a new task set content reruns all
    # the same, since nothing was scored).
    for d in (tasks / "fixed" / "t0", tasks / "fresh" / "t1"):
        (d / "prompt.md").write_text("answer: even\n")
    r = cli("run", "--out", out, "--resume")
    assert r.exit_code == 0, r.stderr
    assert_consistent(out, {f"t{i}:{k}": "passed" for i in range(2) for k in range(2)})
    prov = orjson.loads((out / "provenance.json").read_bytes())
    assert [(x["kept"], x["rerun"]) for x in prov["resumes"]] == [(0, 4)]


def test_a_torn_last_line_is_ignored_and_cut_before_the_resume_appends(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    out = tmp_path / "b"
    assert cli(*args(ck, tasks, out)).exit_code == 0
    expected = results_by_trial(out)
    # What a crash in the middle of the last result's write leaves behind.
    results = (out / "results.jsonl").read_bytes()
    last_start = results.rstrip(b"\n").rfind(b"\n") + 1
    (out / "results.jsonl").write_bytes(results[: last_start + 40])
    attempts = (out / "attempts.jsonl").read_bytes().rstrip(b"\n").split(b"\n")
    (out / "attempts.jsonl").write_bytes(b"\n".join(attempts[:-1]) + b"\n")
    m = load_run(out).manifest
    write_json_atomic(out / "manifest.json", m.model_copy(update={"status": "running", "files": {}}))
    assert load_run(out).torn == {"results.jsonl": 18}
    assert cli("verify", out).exit_code == 4

    r = cli(*args(ck, tasks, out))
    assert r.exit_code == 0, r.stderr
    assert_consistent(out, expected)
    b = load_run(out)
    assert len(b.results) == 18 and b.manifest.counts.interrupted == 1


def test_a_second_run_on_the_same_bundle_is_refused_naming_the_holder(tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path, evalrig_home)
    tasks = make_tasks(tmp_path, 1, prompt="sleep: 30\n")
    out = tmp_path / "b"
    p = start_rig(args(ck, tasks, out, repeat=1))
    try:
        wait_running(p)
        r = cli(*args(ck, tasks, out, repeat=1))
        assert r.exit_code == 4
        assert f"in use by pid {p.pid}" in r.stderr and "evalrig run --checkpoint" in r.stderr
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=20)
    assert p.returncode == 130


def test_a_changed_setting_is_refused_naming_each_difference(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    out = tmp_path / "b"
    assert cli(*args(ck, tasks, out, repeat=1)).exit_code == 0
    before = (out / "manifest.json").read_bytes()
    r = cli(*args(ck, tasks, out, repeat=1), "--seed", "1", "--timeout-scale", "2", "--jobs", "1")
    assert r.exit_code == 4
    assert "--seed: bundle has 0, this command gives 1" in r.stderr
    assert "--timeout-scale: bundle has 1.0, this command gives 2.0" in r.stderr
    assert "--jobs" not in r.stderr  # may change on resume
    assert (out / "manifest.json").read_bytes() == before
    # The same command on a complete bundle changes nothing at all.
    assert cli(*args(ck, tasks, out, repeat=1), "--jobs", "1").exit_code == 0
    assert (out / "manifest.json").read_bytes() == before


def test_a_task_whose_content_changed_reruns_only_its_trials(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    out = tmp_path / "b"
    assert cli(*args(ck, tasks, out, repeat=2)).exit_code == 0
    (tasks / "fixed" / "t0" / "task.toml").write_text(
        (tasks / "fixed" / "t0" / "task.toml").read_text().replace('"even"', '"odd"'))
    r = cli(*args(ck, tasks, out, repeat=2))
    assert r.exit_code == 0, r.stderr
    prov = orjson.loads((out / "provenance.json").read_bytes())
    assert [(x["kept"], x["rerun"]) for x in prov["resumes"]] == [(10, 2)]
    b = load_run(out)
    assert len(b.results) == 14
    assert [c.phase for c in b.manifest.seal_checks] == ["start", "end", "resume", "end"]
    v = cli("verify", out, "--json")
    # t0's two superseded results used a verifier that is gone: kept on record, under the
    # digests, but not re-derived; the twelve results that count are
    assert v.exit_code == 0, v.stderr
    assert orjson.loads(v.stdout)["rederived"] == 12


def test_a_checkpoint_changed_before_the_resume_is_refused(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    out = tmp_path / "b"
    assert cli(*args(ck, tasks, out, repeat=1)).exit_code == 0
    (ck / "agent.py").write_text("# another build\n")
    r = cli(*args(ck, tasks, out, repeat=1))
    assert r.exit_code == 4 and "changed since it was sealed" in r.stderr


def test_a_removed_task_is_refused_on_resume(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    out = tmp_path / "b"
    assert cli(*args(ck, tasks, out, repeat=1)).exit_code == 0
    import shutil

    shutil.rmtree(tasks / "fixed" / "t0")
    add_task(tasks, "t9", "answer: even\n")
    r = cli(*args(ck, tasks, out, repeat=1))
    assert r.exit_code == 4 and "no longer has: t0:0" in r.stderr


def test_a_run_killed_before_its_first_manifest_starts_afresh(kit, tmp_path: Path) -> None:
    ck, tasks = kit
    out = tmp_path / "b"
    out.mkdir()
    # what _start writes before the manifest: the lock files, provenance, empty record files
    for name in (".lock", "provenance.json", "attempts.jsonl", "results.jsonl"):
        (out / name).write_bytes(b"{}" if name == "provenance.json" else b"")
    r = cli(*args(ck, tasks, out, repeat=1))
    assert r.exit_code == 0, r.stderr
    assert load_run(out).manifest.status == "complete"


def test_resume_of_no_bundle_is_refused(tmp_path: Path) -> None:
    r = cli("run", "--out", tmp_path / "nothing", "--resume")
    assert r.exit_code == 4 and "no run bundle here" in r.stderr
    assert not os.path.exists(tmp_path / "nothing")
