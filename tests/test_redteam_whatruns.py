"""Red team, issue #10 attacks 1 and 12: what runs, and whose uid it runs as.

Attack 1: a checkpoint whose `command` names a host program made the rig bind that
program's whole directory into the bwrap view; with the task set beside it, the agent read
every verifier's expected answer and was promoted. A command now resolves inside the
checkpoint, under the system directories, or under an operator's `--interpreter-prefix`
(docs/attempts.md "What runs"); loader and start-up variables are refused.

Attack 12 (the uid half): under `--sandbox process` the agent, running as the rig's root,
appended to `$EVALRIG_HOME/seals.jsonl`. As root the rig now runs it as an unprivileged
uid of the pool.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from redteam import (
    add_task,
    bwrap_works,
    eval_sh,
    make_checkpoint,
    results,
    run_train,
    utc_now,
    write_policy,
)

SANDBOXES = ["bwrap", "process"]
SECRET = "zebra-7f3a"  # every task's expected answer; the honest champion answers "ok"

# The hostile agent of the issue: it reads the expected answer out of the task set, which
# a bind of its command's directory showed it.
STEALER = """\
import os, re, pathlib
tasks = pathlib.Path({tasks!r})
tid = os.environ["EVALRIG_TASK_ID"]
answer = "ok"
for toml in tasks.glob("*/" + tid + "/task.toml"):
    m = re.search(r'expected = "([^"]*)"', toml.read_text())
    if m:
        answer = m.group(1)
open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w").write(answer + "\\n")
"""


def _need(sandbox: str) -> None:
    if sandbox == "bwrap" and not bwrap_works():
        pytest.skip("bubblewrap cannot run here")


def _secret_tasks(tasks: Path) -> Path:
    for i in range(2):
        add_task(tasks, "fixed", f"fx{i}", expected=SECRET)
    return tasks


def _fresh(tasks: Path, n: int = 6) -> None:
    for i in range(n):
        add_task(tasks, "fresh", f"fr{i}", expected=SECRET, created_at=utc_now())


def _host_program(dir: Path) -> Path:
    """A tiny program in a host directory that also holds the task set: `sh` running the
    agent from its workspace."""
    prog = dir / "prog"
    prog.write_text('#!/bin/sh\nexec python3 agent.py "$@"\n')
    prog.chmod(0o755)
    return prog


def _no_attempt(bundle: Path) -> bool:
    return not (bundle / "results.jsonl").exists() or not results(bundle)


@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot run here")
def test_a_host_program_cannot_choose_what_the_sandbox_shows(tmp_path: Path) -> None:
    """The critical attack, under bwrap: the command names a program in the directory that
    holds the task set. Before, that directory was bound into the view, the agent read
    every expected answer and was promoted; now `run` refuses before the first attempt."""
    home, root = tmp_path / "home", tmp_path / "train"
    root.mkdir()
    tasks = _secret_tasks(root / "tasks")
    champion = make_checkpoint(root / "champion")
    prog = _host_program(root)
    candidate = make_checkpoint(root / "candidate", STEALER.format(tasks=str(tasks)),
                                agent_toml=f'command = ["{prog}"]\n')
    for ck in (champion, candidate):
        assert eval_sh(home, "seal", ck).code == 0
    _fresh(tasks)
    train = run_train(home, root, champion, candidate, tasks=tasks, sandbox="bwrap")
    step = train.steps["candidate"]
    assert step.code == 4, step
    assert "checkpoint.toml" in step.stderr and "agent.command" in step.stderr, step
    assert str(prog) in step.stderr and "--interpreter-prefix" in step.stderr, step
    assert _no_attempt(train.bundle("candidate")), step
    assert "gate" not in train.steps


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_an_absolute_host_program_outside_usr_is_refused(tmp_path: Path, sandbox: str) -> None:
    """The variant under both sandboxes: a command outside the checkpoint is code the seal
    does not cover (edited after sealing, it would run under the same checkpoint id)."""
    _need(sandbox)
    home, root = tmp_path / "home", tmp_path / "train"
    root.mkdir()
    (root / "hostbin").mkdir()
    prog = _host_program(root / "hostbin")
    ck = make_checkpoint(root / "ck", agent_toml=f'command = ["{prog}"]\n')
    tasks = _secret_tasks(root / "tasks")
    assert eval_sh(home, "seal", ck).code == 0
    step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", root / "out",
                   "--sandbox", sandbox, "--repeat", "1")
    assert step.code == 4, step
    assert "agent.command" in step.stderr and "checkpoint.toml" in step.stderr, step
    assert "--interpreter-prefix" in step.stderr and "/usr" in step.stderr, step
    assert not (root / "out" / "manifest.json").exists()


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_an_estimate_command_outside_the_rule_is_refused(tmp_path: Path, sandbox: str) -> None:
    _need(sandbox)
    home, root = tmp_path / "home", tmp_path / "train"
    root.mkdir()
    prog = _host_program(root)
    ck = make_checkpoint(root / "ck", agent_toml='command = ["python3", "agent.py"]\n'
                         f'estimate = ["{prog}", "--estimate"]\n')
    tasks = _secret_tasks(root / "tasks")
    assert eval_sh(home, "seal", ck).code == 0
    step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", root / "out",
                   "--sandbox", sandbox, "--repeat", "1")
    assert step.code == 4 and "agent.estimate" in step.stderr, step


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_link_inside_the_checkpoint_cannot_lead_out(tmp_path: Path, sandbox: str) -> None:
    """`./run` a link to a host program, and `../` out of the checkpoint: both refused."""
    _need(sandbox)
    home, root = tmp_path / "home", tmp_path / "train"
    root.mkdir()
    prog = _host_program(root)
    tasks = _secret_tasks(root / "tasks")
    for name, command in (("link", "./run"), ("dotdot", "../prog")):
        ck = make_checkpoint(root / name, agent_toml=f'command = ["{command}"]\n')
        (ck / "run").symlink_to(prog)
        assert eval_sh(home, "seal", ck).code == 0
        step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out",
                       root / f"out-{name}", "--sandbox", sandbox, "--repeat", "1")
        assert step.code == 4 and "agent.command" in step.stderr, step


def test_loader_and_start_up_variables_stop_the_train_at_seal_and_run(tmp_path: Path) -> None:
    """The issue's exact checkpoint (a host program and BASH_ENV at the agent's script) is
    refused before anything runs: `seal`, `validate` and `run` each name the variable."""
    home, root = tmp_path / "home", tmp_path / "train"
    root.mkdir()
    prog = _host_program(root)
    ck = make_checkpoint(root / "ck", agent_toml=f'command = ["{prog}"]\n'
                         'env = { BASH_ENV = "./agent.py" }\n')
    tasks = _secret_tasks(root / "tasks")
    for args in (("seal", ck), ("validate", "--checkpoint", ck),
                 ("run", "--checkpoint", ck, "--tasks", tasks, "--out", root / "out")):
        step = eval_sh(home, *args)
        assert step.code == 4, step
        assert "checkpoint.toml" in step.stderr and "agent.env.BASH_ENV" in step.stderr, step
    assert not (root / "out").exists()


@pytest.mark.parametrize("env, field", [
    ('{ BASH_ENV = "x.sh" }', "agent.env.BASH_ENV"),
    ('{ LD_PRELOAD = "/tmp/x.so" }', "agent.env.LD_PRELOAD"),
    ('{ LD_DEBUG = "all" }', "agent.env.LD_DEBUG"),
    ('{ ENV = "x.sh" }', "agent.env.ENV"),
    ('{ PYTHONSTARTUP = "x.py" }', "agent.env.PYTHONSTARTUP"),
    ('{ PYTHONHOME = "/opt/py" }', "agent.env.PYTHONHOME"),
    ('{ GLIBC_TUNABLES = "glibc.malloc.check=3" }', "agent.env.GLIBC_TUNABLES"),
    ('{ "A=B" = "1" }', "agent.env.A=B"),
    ('{ "1X" = "1" }', "agent.env.1X"),
    ('{ OK = "a\\u0000b" }', "agent.env.OK"),
])
def test_validate_refuses_each_bad_env_entry(tmp_path: Path, env: str, field: str) -> None:
    ck = make_checkpoint(tmp_path / "ck", agent_toml=f"env = {env}\n")
    step = eval_sh(tmp_path / "home", "validate", "--checkpoint", ck)
    assert step.code == 4, step
    assert f"{ck / 'checkpoint.toml'}:" in step.stderr and f"{field}:" in step.stderr, step


def test_validate_accepts_a_plain_env(tmp_path: Path) -> None:
    ck = make_checkpoint(tmp_path / "ck", agent_toml='env = { MODEL = "m-1", PYTHONPATH = "src" }\n')
    step = eval_sh(tmp_path / "home", "validate", "--checkpoint", ck)
    assert step.code == 0, step


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_program_inside_the_checkpoint_runs(tmp_path: Path, sandbox: str) -> None:
    _need(sandbox)
    home, root = tmp_path / "home", tmp_path / "train"
    root.mkdir()
    ck = make_checkpoint(root / "ck", agent_toml='command = ["./run.sh"]\n',
                         files={"run.sh": '#!/bin/sh\nexec python3 agent.py\n'})
    (ck / "run.sh").chmod(0o755)
    tasks = root / "tasks"
    add_task(tasks, "fixed", "fx0")
    assert eval_sh(home, "seal", ck).code == 0
    step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", root / "out",
                   "--sandbox", sandbox, "--repeat", "1")
    assert step.code == 0, step
    assert [r["status"] for r in results(root / "out")] == ["passed"]


@pytest.fixture
def prefix() -> Iterator[Path]:
    """An interpreter installation outside the task set, the bundles and the home, that
    every user may read (under process as root the agent is another user)."""
    top = Path(tempfile.mkdtemp(prefix="evalrig-interp-"))
    top.chmod(0o755)
    (top / "bin").mkdir(mode=0o755)
    program = top / "bin" / "mypython"
    program.write_text('#!/bin/sh\nexec python3 "$@"\n')
    program.chmod(0o755)
    yield top
    shutil.rmtree(top)


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_program_under_an_interpreter_prefix_runs_and_is_pinned(
        tmp_path: Path, sandbox: str, prefix: Path) -> None:
    _need(sandbox)
    home, root = tmp_path / "home", tmp_path / "train"
    root.mkdir()
    program = prefix / "bin" / "mypython"
    ck = make_checkpoint(root / "ck", agent_toml=f'command = ["{program}", "agent.py"]\n')
    tasks = root / "tasks"
    add_task(tasks, "fixed", "fx0")
    assert eval_sh(home, "seal", ck).code == 0
    run = ("run", "--checkpoint", ck, "--tasks", tasks, "--out", root / "out",
           "--sandbox", sandbox, "--repeat", "1")
    refused = eval_sh(home, *run)
    assert refused.code == 4 and "agent.command" in refused.stderr, refused
    step = eval_sh(home, *run, "--interpreter-prefix", prefix)
    assert step.code == 0, step
    assert [r["status"] for r in results(root / "out")] == ["passed"]
    settings = orjson.loads((root / "out" / "manifest.json").read_bytes())["settings"]
    assert settings["interpreter_prefixes"] == [str(prefix.resolve())]
    [pin] = settings["interpreters"]
    assert (pin["field"], pin["program"]) == ("agent.command", str(program.resolve()))
    assert pin["sha256"].startswith("sha256:")
    again = eval_sh(home, *run, "--interpreter-prefix", prefix)
    assert again.code == 0, again  # unchanged: nothing to rerun

    # Edited after the run: the same command (a resume) is refused, naming the program.
    program.write_text('#!/bin/sh\necho edited >&2\nexec python3 "$@"\n')
    for args in ((*run, "--interpreter-prefix", prefix), ("run", "--out", root / "out", "--resume")):
        step = eval_sh(home, *args)
        assert step.code == 4, step
        assert "agent.command" in step.stderr and str(program.resolve()) in step.stderr, step


@pytest.mark.parametrize("what", ["tasks", "home", "out", "rig"])
def test_an_interpreter_prefix_that_would_show_the_tasks_or_the_home_is_refused(
        tmp_path: Path, what: str) -> None:
    home, root = tmp_path / "home", tmp_path / "train"
    root.mkdir()
    home.mkdir()
    tasks = _secret_tasks(root / "tasks")
    prog = _host_program(root)
    ck = make_checkpoint(root / "ck", agent_toml=f'command = ["{prog}"]\n')
    assert eval_sh(home, "seal", ck).code == 0
    given = {"tasks": root, "home": home, "out": root / "out", "rig": Path(__file__).parent.parent}[what]
    (root / "out").mkdir(exist_ok=True)
    step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", root / "out",
                   "--repeat", "1", "--interpreter-prefix", given)
    assert step.code == 4, step
    assert "--interpreter-prefix" in step.stderr, step
    assert {"tasks": "the task set", "home": "$EVALRIG_HOME", "out": "the --out bundle",
            "rig": "the rig's own files"}[what] in step.stderr, step
    assert not (root / "out" / "manifest.json").exists()


# -- attack 12: the agent's uid under --sandbox process ------------------------------------

TAMPERER = """\
import errno, os, pathlib
prompt = pathlib.Path(os.environ["EVALRIG_PROMPT"]).read_text().split()
home, champion = pathlib.Path(prompt[0]), pathlib.Path(prompt[1])
seen = []
for target, text in ((home / "seals.jsonl", '{"forged": true}\\n'),
                     (champion / "forged.txt", "forged\\n")):
    try:
        with open(target, "a") as f:
            f.write(text)
        seen.append("written")
    except OSError as e:
        seen.append(errno.errorcode.get(e.errno, str(e.errno)))
out = os.environ["EVALRIG_OUT"]
open(os.path.join(out, "answer.txt"), "w").write("ok\\n")
open(os.path.join(out, "seen.txt"), "w").write(" ".join(seen) + "\\n")
"""


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_the_agent_cannot_write_the_rigs_home_or_another_bundle(tmp_path: Path, sandbox: str) -> None:
    _need(sandbox)
    if sandbox == "process" and os.geteuid() != 0:
        pytest.skip("the rig is not root: it warns instead (test_process_warns_when_not_root)")
    home, root = tmp_path / "home", tmp_path / "train"
    root.mkdir()
    champion_bundle = root / "runs" / "champion"
    tasks = root / "tasks"
    champion = make_checkpoint(root / "champion")
    candidate = make_checkpoint(root / "candidate", textwrap.dedent(TAMPERER))
    for ck in (champion, candidate):
        assert eval_sh(home, "seal", ck).code == 0
    for i in range(2):
        add_task(tasks, "fixed", f"fx{i}", prompt=f"{home} {champion_bundle}\n")
    policy = write_policy(root / "policies")
    train = run_train(home, root, champion, candidate, tasks=tasks, policy=policy,
                      sandbox=sandbox, stop_after="candidate")
    assert train.steps["champion"].code == 0, train.steps["champion"]
    seals = (home / "seals.jsonl").read_bytes()
    step = train.steps["candidate"]
    assert step.code == 0, step
    assert (home / "seals.jsonl").read_bytes() == seals
    assert b"forged" not in seals
    assert not (champion_bundle / "forged.txt").exists()
    assert eval_sh(home, "verify", champion_bundle).code == 0
    for r in results(train.bundle("candidate")):
        seen = (train.bundle("candidate") / "attempts" / str(r["attempt_id"]) / "out" / "seen.txt").read_text().split()
        # process as root: the files exist and the slot uid may not write them, or (with its
        # private view, where the host allows one) the home and the bundles, below /tmp here,
        # are under its fresh /tmp; bwrap: they are not in the view at all
        from evalrig.attempt.sandbox import private_view_why

        in_sight = sandbox == "process" and private_view_why() is not None
        assert seen == (["EACCES", "EACCES"] if in_sight else ["ENOENT", "ENOENT"]), seen
        assert r["status"] == "passed"


def test_process_as_root_still_contains_and_cleans_up(tmp_path: Path) -> None:
    """The slot uid's files (a read-only folder, a process left behind) do not stop the
    evidence copy or the workspace's removal, and the process limit counts its uid."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    home, root = tmp_path / "home", tmp_path / "train"
    root.mkdir()
    agent = """\
    import os, subprocess
    out = os.environ["EVALRIG_OUT"]
    os.makedirs(os.path.join(out, "locked"))
    open(os.path.join(out, "locked", "f.txt"), "w").write("x")
    os.chmod(os.path.join(out, "locked"), 0o500)
    subprocess.Popen(["sleep", "300"], start_new_session=True)
    open(os.path.join(out, "answer.txt"), "w").write(str(os.getuid()) + "\\n")
    """
    ck = make_checkpoint(root / "ck", textwrap.dedent(agent))
    tasks = root / "tasks"
    add_task(tasks, "fixed", "fx0", verifier='kind = "regex"\npattern = "^610[0-9][0-9]\\\\s*$"')
    assert eval_sh(home, "seal", ck).code == 0
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", root / "out",
                   "--sandbox", "process", "--repeat", "1", "--jobs", "1",
                   env={"EVALRIG_SCRATCH": str(scratch)})
    assert step.code == 0, step
    [r] = results(root / "out")
    assert r["status"] == "passed", r  # it ran as a uid of the pool (61000 + slot)
    assert (root / "out" / "attempts" / str(r["attempt_id"]) / "out" / "locked" / "f.txt").exists()
    assert [p for p in scratch.iterdir()] == []  # every attempt root removed
    assert os.system("pgrep -u 61000 sleep >/dev/null") != 0  # nothing left running


def test_process_warns_when_not_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not root: no uid of its own for the agent, so `run` says what it can do, on stderr
    and in the provenance (both from run_warnings)."""
    from types import SimpleNamespace

    from evalrig.attempt.sandbox import LevelChoice
    from evalrig.run import inputs as runner

    inputs = SimpleNamespace(level=LevelChoice("process", None, None), home=tmp_path / "home",
                             network_warning=None, tasks={})
    monkeypatch.setattr(runner.os, "geteuid", lambda: 1000)
    [warning] = runner.run_warnings(inputs)  # type: ignore[arg-type]
    assert "can write the rig's home" in warning and str(tmp_path / "home") in warning
    assert "bundle" in warning
    monkeypatch.setattr(runner.os, "geteuid", lambda: 0)
    assert runner.run_warnings(inputs) == []  # type: ignore[arg-type]


def test_validate_refuses_a_command_run_would_refuse_and_takes_the_same_prefixes(
        tmp_path: Path, prefix: Path) -> None:
    """validate said "ok" to a checkpoint whose command lies outside the checkpoint and the
    system directories, which run then refused: both now answer the same."""
    program = prefix / "bin" / "mypython"
    ck = make_checkpoint(tmp_path / "ck", agent_toml=f'command = ["{program}", "agent.py"]\n')
    refused = eval_sh(tmp_path / "home", "validate", "--checkpoint", ck)
    assert refused.code == 4, refused
    assert f"{ck / 'checkpoint.toml'}" in refused.stderr and "agent.command" in refused.stderr, refused
    taken = eval_sh(tmp_path / "home", "validate", "--checkpoint", ck, "--interpreter-prefix", prefix)
    assert taken.code == 0, taken


@pytest.mark.skipif(os.geteuid() != 0, reason="the agent has a uid of its own only when the rig is root")
def test_process_warns_when_the_agents_uid_can_read_a_verifier(tmp_path: Path, evalrig_home: Path) -> None:
    """Under process as root the agent reads what every user may: a task set left at its
    checked-in modes (0644 files below searchable folders) shows its verifiers' expected
    values to the agent (a red team read a fix-code task's cases.json so). `run` says so."""
    open_root = Path(tempfile.mkdtemp(prefix="evalrig-open-tasks-"))  # below /tmp: searchable by all
    try:
        open_root.chmod(0o755)
        add_task(open_root / "tasks", "fixed", "fx0", verifier='kind = "command"\ncommand = ["python3", "check.py"]',
                 verifier_files={"check.py": "raise SystemExit(0)\n", "cases.json": "[1, 2]\n"})
        for p in [open_root / "tasks", *(open_root / "tasks").rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        ck = make_checkpoint(tmp_path / "ck")
        assert eval_sh(evalrig_home, "seal", ck).code == 0
        step = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", open_root / "tasks", "--out",
                       tmp_path / "out", "--sandbox", "process", "--repeat", "1")
        assert step.code == 0, step
        assert "the agent can read the verifier/ or driver/ files of 1 planned task(s)" in step.stderr, step
        prov = orjson.loads((tmp_path / "out" / "provenance.json").read_bytes())
        assert any("chmod -R go-rwx" in w for w in prov["sandbox_warnings"]), prov["sandbox_warnings"]
        for p in [open_root / "tasks", *(open_root / "tasks").rglob("*")]:
            p.chmod(0o700 if p.is_dir() else 0o600)
        again = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", open_root / "tasks", "--out",
                        tmp_path / "out2", "--sandbox", "process", "--repeat", "1")
        assert again.code == 0 and "can read the verifier/" not in again.stderr, again
    finally:
        shutil.rmtree(open_root, ignore_errors=True)
