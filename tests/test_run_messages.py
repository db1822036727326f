"""What a run tells the person at the end of it (issue #12 items 2, 3, 4 and 6), through
`eval.sh` as a release script calls it: a verifier that always faults is named with its
stderr (resuming alone would loop forever), a run of identical failures is warned about,
a bad --out or $EVALRIG_HOME is the user's input (exit 4), and a killed run is said to be
interrupted, its scratch directory swept by the next run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import orjson
import pytest
from redteam import EVAL_SH, add_task, bwrap_program, bwrap_works, eval_sh, make_checkpoint, results

from evalrig.attempt.trial import scratch_base

FAULTY_VERIFIER = """\
import sys
sys.stderr.write("Traceback (most recent call last):\\n  File check.py, line 3\\n")
sys.stderr.write("NameError: name 'answr' is not defined\\n")
sys.exit(2)
"""
FIXED_VERIFIER = """\
import os, sys
answer = open(os.path.join(os.environ["EVALRIG_EVIDENCE"], "out", "answer.txt")).read()
sys.exit(0 if answer.strip() == "ok" else 1)
"""


def run_args(ck: Path, tasks: Path, out: Path, *more: str) -> list[str | Path]:
    return ["run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "2",
            "--sandbox", "process", "--jobs", "2", *more]


# -- item 2: a verifier that always faults ----------------------------------------------


def test_a_verifier_that_always_faults_is_named_with_its_stderr_and_a_fix_reruns_only_its_trials(
        tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path / "ck")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "good")
    add_task(tasks, "fixed", "judged", verifier='kind = "command"\ncommand = ["python3", "check.py"]',
             verifier_files={"check.py": FAULTY_VERIFIER})
    out = tmp_path / "b"

    for _ in range(2):  # running again does not change the answer: the message says why
        r = eval_sh(evalrig_home, *run_args(ck, tasks, out))
        assert r.code == 5, r
        assert "error: the verifier of task judged faulted each time it ran (trials judged:0, " \
               "judged:1 unscored): verifier exited 2" in r.stderr, r
        assert "  | Traceback (most recent call last):" in r.stderr
        assert "  | NameError: name 'answr' is not defined" in r.stderr
        assert f"-> fix the verifier ({tasks / 'fixed' / 'judged' / 'verifier'}/" in r.stderr
        assert "resuming will not help until the verifier is fixed" in r.stderr
        assert "A fixed verifier changes the inputs id of its task's trials, so the same command " \
               "then runs only those trials again and keeps every other one." in r.stderr
        assert "run again to resume" not in r.stderr and "task good" not in r.stderr

    j = eval_sh(evalrig_home, *run_args(ck, tasks, out, "--json"))
    assert j.code == 5
    [fault] = j.json["verifier_faults"]  # type: ignore[index]
    assert fault["task_id"] == "judged" and fault["trials"] == ["judged:0", "judged:1"]
    assert fault["stderr_head"][-1] == "NameError: name 'answr' is not defined"
    assert fault["verifier_dir"] == str(tasks / "fixed" / "judged" / "verifier")
    assert (out / fault["stderr_file"]).is_file()

    # The claim the message makes: the verifier's identity is in the inputs id, so after the
    # fix only the faulted task's trials run again; the good task's are kept as they were.
    before = {r["trial_id"]: r["inputs_id"] for r in results(out)}
    (tasks / "fixed" / "judged" / "verifier" / "check.py").write_text(FIXED_VERIFIER)
    r = eval_sh(evalrig_home, *run_args(ck, tasks, out))
    assert r.code == 0, r
    assert "resuming: 2 of 4 trials kept, 2 to run" in r.stderr
    after = results(out)
    good = [x for x in after if x["task_id"] == "good"]
    assert len(good) == 2 and all(x["status"] == "passed" for x in good)  # never run again
    judged = [x for x in after if x["task_id"] == "judged" and x["status"] == "passed"]
    assert sorted(x["trial_id"] for x in judged) == ["judged:0", "judged:1"]
    assert all(x["inputs_id"] != before[x["trial_id"]] for x in judged)
    prov = orjson.loads((out / "provenance.json").read_bytes())
    assert (prov["resumes"][-1]["kept"], prov["resumes"][-1]["rerun"]) == (2, 2)
    assert eval_sh(evalrig_home, "verify", out).code == 0


# -- item 3: a complete run of failures --------------------------------------------------


def _last_progress_counts(stderr: str) -> dict[str, int]:
    line = [x for x in stderr.splitlines() if re.match(r"\d+/\d+ done", x)][-1]
    return {w: int(n) for n, w in re.findall(r"(\d+) (passed|failed|agent_error|timeout|infra_error)", line)}


def _summary_counts(stdout: str) -> dict[str, int]:
    return {w: int(n) for n, w in re.findall(r"(\d+) (passed|failed|agent_error|timeout|infra_error)", stdout)}


def test_every_attempt_failing_the_same_way_is_warned_quoting_its_stderr(
        tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path / "ck", agent_toml='command = ["python3", "agnet.py"]')  # the typo
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    for i in range(3):
        add_task(tasks, "fixed", f"t{i}")
    r = eval_sh(evalrig_home, *run_args(ck, tasks, tmp_path / "b"))
    assert r.code == 0, r  # a complete run of failures is a valid measurement
    assert ("warning: every attempt ended agent_error: `python3: can't open file 'agnet.py': "
            "[Errno 2] No such file or directory`") in r.stderr, r
    assert "a typo in the checkpoint's [agent] command?" in r.stderr
    # The progress line and the summary: the same words for the same counts.
    progress, summary = _last_progress_counts(r.stderr), _summary_counts(r.stdout)
    assert progress == summary == {"passed": 0, "failed": 0, "agent_error": 6, "timeout": 0,
                                   "infra_error": 0}

    j = eval_sh(evalrig_home, *run_args(ck, tasks, tmp_path / "b", "--json"))
    assert j.code == 0
    [w] = j.json["warnings"]  # type: ignore[index]
    assert (w["kind"], w["status"], w["count"], w["of"]) == ("common-failure", "agent_error", 6, 6)
    assert w["stderr_first_line"].startswith("python3: can't open file 'agnet.py'")


MOSTLY_CRASHING = """\
import os, sys
prompt = open(os.environ["EVALRIG_PROMPT"]).read()
if "crash" in prompt:
    sys.stderr.write(f"fatal: no model configured (request {os.urandom(4).hex()})\\n" if "id" in prompt
                     else "fatal: no model configured\\n")
    sys.exit(3)
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("ok\\n")
"""


@pytest.mark.parametrize(("crashing", "warned"), [
    (3, "warning: 3 of 4 attempts ended agent_error: `fatal: no model configured`"),
    (2, "warning: 2 of 4 attempts ended agent_error: `fatal: no model configured`"),  # half is most
    (1, None),
])
def test_most_attempts_failing_the_same_way_is_warned_and_a_few_are_not(
        tmp_path: Path, evalrig_home: Path, crashing: int, warned: str | None) -> None:
    ck = make_checkpoint(tmp_path / "ck", MOSTLY_CRASHING)
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    for i in range(4):
        add_task(tasks, "fixed", f"t{i}", prompt="crash\n" if i < crashing else "Answer ok.\n")
    r = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b",
                "--repeat", "1", "--sandbox", "process")
    assert r.code == 0, r
    if warned is None:
        assert "warning:" not in r.stderr, r
    else:
        assert warned in r.stderr, r
    assert _last_progress_counts(r.stderr) == _summary_counts(r.stdout)


def test_failures_whose_stderr_differs_are_still_warned_by_status(tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path / "ck", MOSTLY_CRASHING)
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    for i in range(2):
        add_task(tasks, "fixed", f"t{i}", prompt="crash with an id\n")
    r = eval_sh(evalrig_home, *run_args(ck, tasks, tmp_path / "b"))
    assert r.code == 0, r
    assert ("warning: every attempt ended agent_error (the first lines on stderr differ or are "
            "empty)") in r.stderr, r


# -- item 4: a bad --out, a bad $EVALRIG_HOME ---------------------------------------------


@pytest.fixture
def sealed(tmp_path: Path, evalrig_home: Path) -> tuple[Path, Path]:
    ck = make_checkpoint(tmp_path / "ck")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "t0")
    return ck, tasks


def test_an_out_where_no_directory_can_be_is_the_users_input(
        sealed: tuple[Path, Path], tmp_path: Path, evalrig_home: Path) -> None:
    ck, tasks = sealed
    (tmp_path / "afile").write_text("")
    cases = [
        (tmp_path / "afile" / "b", f"--out: no bundle directory can be made there: {tmp_path / 'afile'} "
                                   "is a file, not a directory"),
        (tmp_path / "afile", "--out: no bundle directory can be made there: it is a file, not a directory"),
        (Path("/sys/evalrig-b"), "--out: no bundle directory can be made there: /sys is a kernel file system"),
        (Path("/sys/kernel/evalrig-b"), "--out: no bundle directory can be made there: /sys is a kernel file system"),
        (Path("/proc/evalrig-b"), "--out: no bundle directory can be made there: /proc is a kernel file system"),
    ]
    for out, why in cases:
        r = eval_sh(evalrig_home, *run_args(ck, tasks, out))
        assert r.code == 4, r
        assert r.stderr.startswith(f"error: {out}: {why}"), r
        assert "bug" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(not bwrap_works(), reason="needs bwrap for a read-only directory as root")
def test_an_out_in_a_directory_that_cannot_be_written_is_the_users_input(
        sealed: tuple[Path, Path], tmp_path: Path, evalrig_home: Path) -> None:
    """Root writes almost anywhere: a read-only bind mount is a directory it cannot write."""
    ck, tasks = sealed
    ro = tmp_path / "ro"
    ro.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update(EVALRIG_HOME=str(evalrig_home), NO_COLOR="1")
    p = subprocess.run([bwrap_program(), "--dev-bind", "/", "/", "--ro-bind", str(ro), str(ro), str(EVAL_SH),
                        *map(str, run_args(ck, tasks, ro / "b"))],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 4, p.stderr
    assert p.stderr.startswith(f"error: {ro / 'b'}: --out cannot be written: Read-only file system"), p.stderr


def test_an_evalrig_home_that_is_a_file_gets_one_message_from_every_command(
        sealed: tuple[Path, Path], tmp_path: Path) -> None:
    ck, tasks = sealed
    home = tmp_path / "home-file"
    home.write_text("")
    commands: list[list[str | Path]] = [
        run_args(ck, tasks, tmp_path / "b"), ["seal", ck], ["compare", tmp_path / "x", tmp_path / "y",
                                                             "--out", tmp_path / "c"],
        ["gate", tmp_path / "c", "--policy", tmp_path / "p.toml"], ["validate", "--tasks", tasks],
        ["sign", tmp_path / "d.json", "--approve", "--by", "me"],
        ["check-release", tmp_path / "d.json", "--checkpoint", ck],
    ]
    for args in commands:
        r = eval_sh(home, *args)
        assert r.code == 4, r
        assert r.stderr == (f"error: {home}: EVALRIG_HOME cannot be the rig's home: it is a file, not "
                            "a directory\n  -> point EVALRIG_HOME at a directory (it is made when missing; "
                            "default ~/.local/state/evalrig): it holds the rig's seals, runs, gates and "
                            "sign-offs\n"), r
    r = eval_sh(home / "sub", "seal", ck)
    assert r.code == 4 and f"EVALRIG_HOME cannot be the rig's home: {home} is a file" in r.stderr, r


# -- item 6: a killed run -----------------------------------------------------------------

SLOW = """\
import os, time
time.sleep(60)
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("ok\\n")
"""


def start_eval_sh(home: Path, *args: str | Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update(EVALRIG_HOME=str(home), NO_COLOR="1")
    return subprocess.Popen([str(EVAL_SH), *map(str, args)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def scratch_of(pid: int) -> list[Path]:
    base = Path(scratch_base(False) or tempfile.gettempdir())
    return sorted(base.glob(f"evalrig-attempts-{pid}-*"))


def wait_started(p: subprocess.Popen[str], out: Path) -> None:
    assert p.stderr is not None
    line = p.stderr.readline()
    assert line.startswith(("running", "resuming")), line
    deadline = time.monotonic() + 30
    while b'"start"' not in (out / "attempts.jsonl").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_killed_run_is_interrupted_everywhere_and_the_next_run_sweeps_its_scratch(
        tmp_path: Path, evalrig_home: Path) -> None:
    slow = make_checkpoint(tmp_path / "slow", SLOW, name="slow")
    quick = make_checkpoint(tmp_path / "quick", name="quick")
    for ck in (slow, quick):
        assert eval_sh(evalrig_home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "t0")
    killed, live = tmp_path / "killed", tmp_path / "live"

    p = start_eval_sh(evalrig_home, *run_args(slow, tasks, killed))  # eval.sh execs the rig: p.pid is it
    wait_started(p, killed)
    [left] = scratch_of(p.pid)
    p.kill()  # kill -9: no clean-up runs
    p.communicate(timeout=20)
    assert left.is_dir()
    assert orjson.loads((killed / "manifest.json").read_bytes())["status"] == "running"

    interrupted = (f"interrupted: the run never finished, and no process holds the bundle (it was "
                   f"killed, or the machine went down); resume with `{EVAL_SH} run --out {killed} --resume`")
    r = eval_sh(evalrig_home, "verify", killed)
    assert r.code == 4 and interrupted in r.stderr, r
    r = eval_sh(evalrig_home, "validate", killed)
    assert r.code == 0 and f"warning: {killed}/manifest.json: status: {interrupted}" in r.stderr, r
    r = eval_sh(evalrig_home, "compare", killed, killed, "--out", tmp_path / "cmp")
    assert r.code == 5 and interrupted in r.stderr, r

    # A live run: said to be running, never swept.
    q = start_eval_sh(evalrig_home, *run_args(slow, tasks, live))
    try:
        wait_started(q, live)
        [mine] = scratch_of(q.pid)
        r = eval_sh(evalrig_home, *run_args(quick, tasks, tmp_path / "other"))  # any run sweeps
        assert r.code == 0, r
        assert not left.exists(), "the dead run's scratch directory was left"
        assert mine.is_dir(), "a live run's scratch directory was removed"
        r = eval_sh(evalrig_home, "verify", live)
        assert r.code == 4 and f"still running: in use by pid {q.pid} on " in r.stderr, r
        r = eval_sh(evalrig_home, "compare", live, live, "--out", tmp_path / "cmp", "--allow-incomplete")
        assert r.code == 5 and f"still running: in use by pid {q.pid}" in r.stderr, r
        assert "wait for it to finish, then compare" in r.stderr
    finally:
        q.send_signal(signal.SIGTERM)
        q.communicate(timeout=30)
    assert not mine.exists()  # a run that ends removes its own

    # The resume of the killed bundle says what it resumes.
    r = start_eval_sh(evalrig_home, *run_args(slow, tasks, killed))
    try:
        assert r.stderr is not None
        assert r.stderr.readline() == ("resuming an interrupted run (it stopped before it "
                                       "finished): 0 of 2 trials kept, 2 to run\n")
    finally:
        r.send_signal(signal.SIGTERM)
        r.communicate(timeout=30)


def test_the_sweep_removes_only_scratch_whose_owner_is_certainly_dead(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from evalrig.attempt.trial import scratch_owner
    from evalrig.run.lifecycle import sweep_dead_scratch

    monkeypatch.setenv("EVALRIG_SCRATCH", str(tmp_path))
    owner = scratch_owner()
    assert owner is not None
    pid, start, where = owner.split("-")
    made = {
        "mine": f"evalrig-attempts-{owner}-aaaa",  # this live process
        "reused-pid": f"evalrig-attempts-{pid}-{int(start) + 1}-{where}-bbbb",  # same pid, other start
        "dead": f"evalrig-attempts-4194303-12-{where}-cccc",  # no such pid
        "dead-verify": f"evalrig-verify-4194303-12-{where}-dddd",
        "elsewhere": "evalrig-attempts-4194303-12-0000ffff-eeee",  # another machine or namespace
        "unmarked": "evalrig-attempts-ffff",  # kept workspaces, or an older rig's
        "not-ours": "evalrig-etc-4194303-12-x",
    }
    for name in made.values():
        (tmp_path / name / "attempt").mkdir(parents=True)
    link = f"evalrig-attempts-4194303-12-{where}-link"  # a dead owner, but no directory of ours
    (tmp_path / link).symlink_to(tmp_path / made["unmarked"])
    removed = {p.name for p in sweep_dead_scratch() if p.parent == tmp_path}
    assert removed == {made["reused-pid"], made["dead"], made["dead-verify"]}
    assert {p.name for p in tmp_path.iterdir()} == {made["mine"], made["elsewhere"], made["unmarked"],
                                                    made["not-ours"], link}
