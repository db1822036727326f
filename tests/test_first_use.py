"""What a first-time user hit (issue 22's behaviour items), each through `eval.sh`.

A crashing Python verifier is the verifier's fault, never the agent's failure; hints name
the command the user typed; inputs a user gets wrong are named with what to do.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from redteam import (
    EVAL_SH,
    HONEST_AGENT,
    Train,
    add_task,
    bwrap_works,
    eval_sh,
    make_checkpoint,
    results,
    run_train,
)


def run_args(ck: Path, tasks: Path, out: Path, *more: str) -> list[str | Path]:
    return ["run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "1",
            "--sandbox", "process", "--jobs", "2", "--max-retries", "0", *more]


# -- a crashing Python verifier ----------------------------------------------------------

CRASHING = 'raise RuntimeError("boom")\n'
# It wrote a reward.json that passes, then died: a traceback exit is a fault even so.
CRASHING_AFTER_REWARD = """\
import json, os
open(os.path.join(os.environ["EVALRIG_VERDICT"], "reward.json"), "w").write(json.dumps({"passed": True}))
{}["missing"]
"""
# A plain "fail" that says why on stderr, without dying of an exception.
FAILING = """\
import sys
sys.stderr.write("Traceback (most recent call last): is not what this is\\nwrong answer\\n")
sys.exit(1)
"""


def test_a_verifier_dying_of_an_uncaught_exception_is_a_verifier_fault_not_the_agents_failure(
        tmp_path: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path / "ck")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    for name, code in (("crash", CRASHING), ("crash-after-reward", CRASHING_AFTER_REWARD), ("fails", FAILING),
                       ("does-not-compile", "x = (\n")):
        add_task(tasks, "fixed", name, verifier='kind = "command"\ncommand = ["python3", "check.py"]',
                 verifier_files={"check.py": code})
    out = tmp_path / "b"
    r = eval_sh(evalrig_home, *run_args(ck, tasks, out))
    assert r.code == 5, r  # trials left unscored, never a clean run of failures
    status = {x["task_id"]: x for x in results(out)}
    assert status["crash"]["status"] == "infra_error", status["crash"]
    assert "verifier crashed: exit 1 with a Python traceback (RuntimeError: boom)" in str(status["crash"]["error"])
    assert status["crash-after-reward"]["status"] == "infra_error"
    assert "(KeyError: 'missing')" in str(status["crash-after-reward"]["error"])
    assert status["fails"]["status"] == "failed"  # exit 1 without a traceback still fails
    assert status["does-not-compile"]["status"] == "infra_error"  # Python's report of a SyntaxError
    assert "(SyntaxError: '(' was never closed)" in str(status["does-not-compile"]["error"])
    assert "error: the verifier of task crash faulted each time it ran" in r.stderr, r
    assert "  | RuntimeError: boom" in r.stderr
    assert eval_sh(evalrig_home, "verify", out).code == 0  # verify re-derives the same faults


# -- one small train, read after `retire`, and the slips a user makes around it -----------


def _train(tmp_path: Path, home: Path, sandbox: str = "process") -> Train:
    champion = make_checkpoint(tmp_path / "champion")
    candidate = make_checkpoint(tmp_path / "candidate", HONEST_AGENT + "# the candidate\n", name="cand")
    t = run_train(home, tmp_path / "t", champion, candidate, sandbox=sandbox)
    # process: invariant.isolated blocks; bwrap: two honest agents, no reason to switch
    assert t.steps["gate"].code == (3 if sandbox == "process" else 1), t.steps["gate"]
    return t


def test_after_retire_export_show_report_and_verify_find_the_runs_tasks_by_digest(
        tmp_path: Path, evalrig_home: Path) -> None:
    t = _train(tmp_path, evalrig_home)
    r = eval_sh(evalrig_home, "retire", t.cmp, "--tasks", t.tasks)
    assert r.code == 0, r
    [train] = (t.tasks / "retired").iterdir()
    # the next train's fresh task reuses an id, with other content: never taken for the old one
    add_task(t.tasks, "fresh", "fr0", expected="something else")
    bundle = t.bundle("candidate")
    for given in ((), ("--tasks", t.tasks), ("--tasks", train)):
        to = tmp_path / f"x{len(given)}{given[-1].name if given else ''}.jsonl"
        r = eval_sh(evalrig_home, "export", bundle, "--format", "trajectories", "--to", to, *given)
        assert r.code == 0, r
        rows = [orjson.loads(x) for x in to.read_bytes().splitlines()]
        assert len(rows) == 12 and {x["task_id"] for x in rows} == {f"fr{i}" for i in range(6)}
        assert all(x["messages"][0] == {"role": "user", "content": "Answer ok.\n"} for x in rows), rows[0]
        r = eval_sh(evalrig_home, "show", bundle, "fr0", *given)
        assert r.code == 0 and "expected: ok" in r.stdout, r
    r = eval_sh(evalrig_home, "verify", bundle)
    assert r.code == 0 and "re-derived from evidence" in r.stdout, r
    r = eval_sh(evalrig_home, "report", bundle, "--out", tmp_path / "r.html")
    assert r.code == 0, r
    assert "Expected answers are not shown" not in (tmp_path / "r.html").read_text()


def test_slips_around_a_train_are_named_with_a_command_that_works(tmp_path: Path, evalrig_home: Path) -> None:
    t = _train(tmp_path, evalrig_home)
    bundle = t.bundle("candidate")

    # a run compared with itself says nothing: refused, not a comparison of zeros
    r = eval_sh(evalrig_home, "compare", bundle, bundle, "--out", tmp_path / "same")
    assert r.code == 4, r
    assert "a run compared with itself says nothing: both sides are the same bundle" in r.stderr, r
    assert not (tmp_path / "same").exists()

    # --tasks at a suite folder (or a task folder): the folder meant is named
    ck = t.candidate
    for given, meant in ((t.tasks / "fresh", f"did you mean its parent, {t.tasks}?"),
                         (t.tasks / "fresh" / "fr0", f"did you mean {t.tasks}, the task set that holds it?")):
        for args in (("validate", "--tasks", given),
                     ("run", "--checkpoint", ck, "--tasks", given, "--out", tmp_path / "never")):
            r = eval_sh(evalrig_home, *args)
            assert r.code == 4 and meant in r.stderr, r
            assert r.stderr.count("did you mean") == 1, r

    # hints name the program typed, never a bare `evalrig` that is not on PATH
    add_task(t.tasks, "fixed", "new-one")
    r = eval_sh(evalrig_home, "validate", "--tasks", t.tasks)
    assert r.code == 0 and f"run `{EVAL_SH} lock --tasks {t.tasks}`" in r.stderr, r
    assert "`evalrig " not in r.stderr

    # ship of a decision a person rejected: the command suggested is one that works
    assert eval_sh(evalrig_home, "sign", t.decision, "--reject", "--by", "alice").code == 0
    r = eval_sh(evalrig_home, "ship", t.decision, "--checkpoint", ck)
    assert r.code == 1, r
    hint = r.stderr.split("`")[1]
    assert hint.startswith(f"{EVAL_SH} sign {t.decision} --approve --by NAME --reason "), r
    argv = shlex.split(hint.replace("NAME", "bob"))[1:]
    signed = eval_sh(evalrig_home, *argv)
    assert signed.code == 0, signed


# -- warnings before a doomed gate --------------------------------------------------------


def test_a_gate_that_will_block_is_warned_before_the_runs_once_each_naming_the_fix(
        tmp_path: Path, evalrig_home: Path) -> None:
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "fx0")
    for i in range(2):
        add_task(tasks, "fresh", f"fr{i}")  # made now, before the seal below
    champion = make_checkpoint(tmp_path / "champion", files={"state/events.jsonl": ""})
    with (champion / "checkpoint.toml").open("a") as f:
        f.write('[history]\nlog = "state/events.jsonl"\n')
    candidate = make_checkpoint(tmp_path / "candidate", name="cand")
    for ck in (champion, candidate):
        assert eval_sh(evalrig_home, "seal", ck).code == 0

    early = "2 of 2 fresh task(s) were created no later than the seal of "
    fix = "will block on invariant.fresh-after-seal. Make the train's fresh tasks after sealing the candidate"
    r = eval_sh(evalrig_home, "validate", "--tasks", tasks, "--checkpoint", candidate)
    assert r.code == 0, r
    assert r.stderr.count(early) == 1 and fix in r.stderr and f"{candidate}" in r.stderr, r
    r = eval_sh(evalrig_home, "run", "--checkpoint", candidate, "--tasks", tasks, "--out", tmp_path / "b",
                "--repeat", "1", "--sandbox", "process", "--jobs", "2")
    assert r.code == 0, r
    assert r.stderr.count(early) == 1 and fix in r.stderr, r  # before the first attempt, once

    history = (f"the champion {champion} declares a [history] log (state/events.jsonl) that {candidate} "
               "lacks; a gate of this pair will block on invariant.history-preserved. Declare the log in "
               f"{candidate / 'checkpoint.toml'}")
    r = eval_sh(evalrig_home, "validate", "--checkpoint", candidate, "--champion", champion)
    assert r.code == 0 and r.stderr.count(history) == 1, r
    # the other way round nothing is lost: no warning
    r = eval_sh(evalrig_home, "validate", "--checkpoint", champion, "--champion", candidate)
    assert r.code == 0 and "[history]" not in r.stderr, r


# -- the gate's cause: an export after a comparison's first gate -------------------------


def test_an_export_after_the_first_gate_counts_against_later_trains_not_that_comparison(
        tmp_path: Path, evalrig_home: Path) -> None:
    if not bwrap_works():
        pytest.skip("bwrap cannot run here: the headline names the first failing rule, which "
                    "under --sandbox process is invariant.isolated")
    t = _train(tmp_path, evalrig_home, "bwrap")
    first = t.decision.read_bytes()
    r = eval_sh(evalrig_home, "export", t.bundle("candidate"), "--format", "trajectories",
                "--to", tmp_path / "x.jsonl")
    assert r.code == 0, r
    run_id = orjson.loads((t.bundle("candidate") / "manifest.json").read_bytes())["run_id"]

    # the same comparison gated again decides as it did: the export cannot have reached its runs
    r = eval_sh(evalrig_home, "gate", t.cmp, "--policy", t.policy)
    assert r.code == 1, r
    assert t.decision.read_bytes() == first
    fresh = next(x for x in orjson.loads(first)["rules"] if x["name"] == "invariant.fresh-after-seal")
    assert fresh["held"] is True

    # a fresh compare of the same runs is a later train: the export counts, and is named
    cmp2 = tmp_path / "cmp2"
    assert eval_sh(evalrig_home, "compare", t.bundle("champion"), t.bundle("candidate"), "--out", cmp2).code == 0
    r = eval_sh(evalrig_home, "gate", cmp2, "--policy", t.policy)
    assert r.code == 3, r
    assert "Blocked: invariant.fresh-after-seal does not hold: " in r.stdout, r
    assert f"seen before this train: in the export of {run_id} at " in r.stdout, r
    assert "another candidate" not in r.stdout, r
    verdict = (cmp2 / "decisions" / "redteam-v1.md").read_text()
    headline = verdict.splitlines()[0]
    assert f"in the export of {run_id} at " in headline and "another candidate" not in headline, headline


def test_an_episodes_trajectory_starts_with_its_prompt_as_the_agent_saw_it(
        tmp_path: Path, evalrig_home: Path) -> None:
    from episodes import add_episode_task, episode_checkpoint

    tasks = tmp_path / "tasks"
    add_episode_task(tasks, "bank", suite="fresh")
    (tasks / "fresh" / "bank" / "prompt.md").write_text("You are a bank's assistant. Deposit 5.\n")
    ck = episode_checkpoint(tmp_path / "ck", "gold")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    out = tmp_path / "b"
    r = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "1",
                "--sandbox", "process", "--jobs", "1")
    assert r.code == 0, r
    to = tmp_path / "t.jsonl"
    r = eval_sh(evalrig_home, "export", out, "--format", "trajectories", "--to", to)
    assert r.code == 0, r
    [row] = [orjson.loads(x) for x in to.read_bytes().splitlines()]
    assert row["messages"][0] == {"role": "system", "content": "You are a bank's assistant. Deposit 5.\n"}
    assert [m["role"] for m in row["messages"][1:3]] == ["user", "assistant"], row["messages"]


# -- a full disk while running -----------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of its own, mounted for the test (the rig's tests run as root)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                         capture_output=True, text=True, check=False)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root and mount rights): {got.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


BIG_AGENT = HONEST_AGENT + "open(os.path.join(os.environ['EVALRIG_OUT'], 'big.bin'), 'wb').write(os.urandom(300_000))\n"


def test_a_full_disk_stops_the_run_with_exit_5_naming_the_path_and_the_resume(
        tmp_path: Path, small_fs: Path, evalrig_home: Path) -> None:
    ck = make_checkpoint(tmp_path / "ck", BIG_AGENT)
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    for i in range(6):
        add_task(tasks, "fixed", f"t{i}")
    out = small_fs / "b"
    args = ["run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "1",
            "--sandbox", "process", "--jobs", "1"]
    r = eval_sh(evalrig_home, *args)
    assert r.code == 5, r  # never 6, "a bug"
    assert f"error: {out}/" in r.stderr and "no space left on its file system while writing it (needed " in r.stderr, r
    assert "bytes free); the run stopped and its bundle is resumable" in r.stderr, r
    assert f"-> free space, then `{EVAL_SH} run --out {out} --resume`" in r.stderr, r
    assert "bug" not in r.stderr and "Traceback" not in r.stderr
    # no attempt was blamed on the agent: none is recorded final, every trial can run again
    assert all(not x.get("final") for x in results(out))

    subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
    r = eval_sh(evalrig_home, "run", "--out", out, "--resume")
    assert r.code == 0, r
    assert all(x["status"] == "passed" for x in results(out) if x["status"] != "interrupted")
    assert eval_sh(evalrig_home, "verify", out).code == 0
