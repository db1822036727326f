"""What a hostile agent can reach of its episode's driver (docs/security.md, "Episode
drivers"), and the agent's last words when its output ends mid-line (docs/episodes.md).

Through eval.sh, under both sandboxes where each applies: the agent cannot read or write the
driver's scratch copy or its EVALRIG_DRIVER_OUT; where no PID namespace can be made, the
agent's leftover sweep never kills the driver and each launch's sweep kills its own; a line
the agent leaves without its newline is kept as raw text and makes the episode an
agent_error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.episodes import DRIVER, add_episode_task, agent_source, episode_checkpoint, transcript
from tests.redteam import EVAL_SH, Step, bwrap_works, eval_sh, make_checkpoint, results

AGENTS = Path(__file__).parent / "agents"
LEVELS = ["process", "bwrap"]


def _need(level: str) -> None:
    if level == "bwrap" and not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")


def _run(home: Path, ck: Path, tasks: Path, out: Path, level: str, *args: str) -> Step:
    seal = eval_sh(home, "seal", ck)
    assert seal.code == 0, seal
    return eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "1",
                   "--sandbox", level, "--max-retries", "0", *args)


# -- 1. the driver's scratch copy and its out/ ------------------------------------------------

# Knows where the rig keeps the driver (beside its own attempt root, named after its attempt)
# and tries every way at it once the driver is up: list, read, forge the world the verifier
# will grade, read the driver's environment (its --driver-secret values), signal it.
SPY = """\
import json, os, sys

def send(message):
    sys.stdout.write(json.dumps({"type": "message", "message": message}) + "\\n")
    sys.stdout.flush()

def drivers():  # the driver's process, where this agent's /proc shows it
    found = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and b"driver.py" in open(f"/proc/{p}/cmdline", "rb").read():
                found.append(int(p))
        except OSError:
            pass
    return found

sys.stdin.readline()  # the session: the driver runs, its copy and its out/ exist
droot = os.path.dirname(os.environ["EVALRIG_WORK"]) + ".driver"
got = {}
for what, how in (
    ("list the driver's folder", lambda: os.listdir(droot)),
    ("list its copy", lambda: os.listdir(droot + "/driver")),
    ("read the scenario", lambda: open(droot + "/driver/scenario.json").read()),
    ("read the driver", lambda: open(droot + "/driver/driver.py").read(20)),
    ("list EVALRIG_DRIVER_OUT", lambda: os.listdir(droot + "/out")),
    ("forge world.json", lambda: open(droot + "/out/world.json", "w").write('{"balance": 5}')),
    ("plant in its copy", lambda: open(droot + "/driver/planted.txt", "w").write("x")),
    ("read the driver's environment", lambda: [open(f"/proc/{p}/environ").read() for p in drivers()] or None),
    ("signal the driver", lambda: [os.kill(p, 0) for p in drivers()] or None),
):
    try:
        got[what] = how()
    except OSError as e:
        got[what] = None
with open(os.path.join(os.environ["EVALRIG_OUT"], "seen.json"), "w") as f:
    json.dump({"where": droot, "got": got, "drivers": len(drivers())}, f)
send({"role": "assistant", "content": "done"})
for line in sys.stdin:
    if json.loads(line)["type"] == "end":
        break
"""


@pytest.mark.parametrize("level", LEVELS)
def test_the_agent_cannot_read_or_write_the_drivers_copy_or_its_out(tmp_path: Path, level: str) -> None:
    _need(level)
    if level == "process" and os.geteuid() != 0:
        pytest.skip("not root: under process the agent is the rig's own user and reaches the "
                    "driver's files (docs/security.md says so); the uid pool needs root")
    tasks = tmp_path / "tasks"
    add_episode_task(tasks, "bank", scenario={"gold": "refund order #W2378156 to the gift card"})
    ck = make_checkpoint(tmp_path / "ck", SPY)
    step = _run(tmp_path / "home", ck, tasks, tmp_path / "out", level)
    assert step.code == 0, step
    [res] = results(tmp_path / "out")
    assert (res["status"], res["termination"]) == ("passed", "driver_end"), res  # the driver ran as ever
    evidence = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    seen = json.loads((evidence / "out" / "seen.json").read_text())
    assert seen["where"].endswith(f"{res['attempt_id']}.driver")
    assert seen["got"] == dict.fromkeys(seen["got"]), seen  # every way failed
    # under process without a private view the driver's process is in sight (the host's
    # /proc), and still out of reach; with one (as root, where the host allows), its /proc
    # is its own PID namespace's (docs/security.md)
    from evalrig.attempt.sandbox import private_view_why

    in_sight = level == "process" and private_view_why() is not None
    assert seen["drivers"] >= 1 if in_sight else seen["drivers"] == 0, seen
    # what the verifier grades is the driver's own world, not a forged one
    world = json.loads((evidence / "driver" / "world.json").read_text())
    assert world == {"balance": 0, "calls": 0, "termination": "driver_end"}


# -- 2. the leftover sweeps, where no PID namespace can be made ---------------------------------

def _rig_without_pidns(home: Path, *args: str | Path) -> Step:
    """`eval.sh ARGS` as a host without PID namespaces runs it (tests/agents/rig_without_pidns.py)."""
    argv = [sys.executable, str(AGENTS / "rig_without_pidns.py"), *(str(a) for a in args)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update({"EVALRIG_HOME": str(home), "NO_COLOR": "1"})
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    return Step([str(EVAL_SH), *argv[2:]], p.returncode, p.stdout, p.stderr)


def _carrying(entry: str) -> list[int]:
    """Live processes whose environment holds `entry` (NAME=value)."""
    needle = entry.encode()
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes()
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in env.split(b"\0") and state != "Z":
            found.append(int(p.name))
    return found


# Leaves a process behind that keeps the driver's environment, as a driver's helper would.
DRIVER_WITH_LEFTOVER = ("import subprocess\n"
                        "subprocess.Popen(['sleep', '600'], start_new_session=True)\n") + DRIVER
AGENT_LEFTOVER = "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)\n"


@pytest.mark.parametrize(("agent", "termination", "status"), [
    ("exit_mid_ok", "agent_exit", "failed"),  # exits 0 mid-episode: its sweep runs while the driver does
    ("gold", "driver_end", "passed"),
])
def test_the_agents_leftover_sweep_never_kills_the_driver(tmp_path: Path, agent: str, termination: str,
                                                           status: str) -> None:
    """Without a PID namespace the rig kills leftovers by the mark in their environment. The
    driver carries its attempt's id as the agent does; the agent's sweep must still spare it
    (else an agent that exits early turns its failure into the driver's fault, a re-roll),
    and the driver's sweep must still find the driver's own."""
    if os.geteuid() != 0:
        pytest.skip("the sweep is tested as root, the agent a pool uid (the rig's usual setting)")
    tasks = tmp_path / "tasks"
    d = add_episode_task(tasks, "bank")
    (d / "driver" / "driver.py").write_text(DRIVER_WITH_LEFTOVER)
    ck = make_checkpoint(tmp_path / "ck", AGENT_LEFTOVER + agent_source(agent))
    home, out = tmp_path / "home", tmp_path / "out"
    assert eval_sh(home, "seal", ck).code == 0
    step = _rig_without_pidns(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", out,
                              "--repeat", "1", "--sandbox", "process", "--max-retries", "0")
    [res] = results(out)
    mark = f"EVALRIG_ATTEMPT_ID={res['attempt_id']}"
    try:
        assert res["containment"] == "subreaper", res  # the fallback really ran
        assert step.code == 0, step
        assert (res["termination"], res["status"]) == (termination, status), res
        world = json.loads((out / "attempts" / str(res["attempt_id"]) / "driver" / "world.json").read_text())
        assert world["termination"] == termination  # the driver lived to write its world after finish
        assert _carrying(mark) == []  # each sweep killed its own: the agent's and the driver's leftovers
    finally:
        for pid in _carrying(mark):
            os.kill(pid, signal.SIGKILL)


# -- 3. a last line without its newline -------------------------------------------------------
# The agents ("unterminated", "unterminated_after_end") are in tests/episodes.py.

@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("agent", "text"), [
    ("unterminated", '{"type": "message", "message": {"role": "assistant", "content": "done"}}'),
    ("unterminated_after_end", "bye"),
])
def test_a_last_line_without_its_newline_is_kept_raw_and_is_the_agents_error(
        tmp_path: Path, level: str, agent: str, text: str) -> None:
    _need(level)
    tasks = tmp_path / "tasks"
    add_episode_task(tasks, "bank")
    ck = episode_checkpoint(tmp_path / "ck", agent)
    step = _run(tmp_path / "home", ck, tasks, tmp_path / "out", level)
    assert step.code == 0, step
    [res] = results(tmp_path / "out")
    assert (res["termination"], res["status"]) == ("agent_error", "agent_error"), res
    assert "in the middle of a line" in str(res["error"]), res
    lines = transcript(tmp_path / "out", str(res["attempt_id"]))
    [kept] = [x for x in lines if x["from"] == "agent" and "raw" in x]
    assert kept["raw"] == text and "frame" not in kept
    assert "newline" in kept["reason"] and kept["to"] == "rig"
    # never passed on: the driver saw no "done" from this agent
    if agent == "unterminated":
        assert not any(x["from"] == "rig" and x["to"] == "driver" and x["frame"]["type"] == "message"
                       for x in lines), lines
    verified = eval_sh(tmp_path / "home", "verify", tmp_path / "out")  # the termination re-derived
    assert verified.code == 0, verified


def test_process_without_root_says_the_agent_reaches_its_drivers_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not root there is no uid pool: the agent is the driver's user, and `run` says what
    that gives it (on stderr and in the provenance, both from run_warnings) when the run
    has episodes; a run without them is told only what every process run is."""
    from types import SimpleNamespace

    from evalrig.attempt.sandbox import LevelChoice
    from evalrig.run import inputs as runner
    from evalrig.store.tasks import load_taskset

    add_episode_task(tmp_path / "tasks", "bank")
    episodes = load_taskset(tmp_path / "tasks").tasks
    inputs = SimpleNamespace(level=LevelChoice("process", None, None), home=tmp_path / "home",
                             network_warning=None, tasks={t.id: t for t in episodes})
    monkeypatch.setattr(runner.os, "geteuid", lambda: 1000)
    [_, warning] = runner.run_warnings(inputs)  # type: ignore[arg-type]
    assert "driver" in warning and "EVALRIG_DRIVER_OUT" in warning and "--sandbox bwrap" in warning
    assert len(runner.run_warnings(SimpleNamespace(**{**vars(inputs), "tasks": {}}))) == 1  # type: ignore[arg-type]
    monkeypatch.setattr(runner.os, "geteuid", lambda: 0)
    assert runner.run_warnings(inputs) == []  # type: ignore[arg-type]


def test_a_drivers_session_without_its_newline_is_kept_raw_and_is_the_drivers_fault(tmp_path: Path) -> None:
    level = "bwrap" if bwrap_works() else "process"
    tasks = tmp_path / "tasks"
    d = add_episode_task(tasks, "bank")
    (d / "driver" / "driver.py").write_text(
        "import json, sys\nsys.stdin.readline()\n"
        "sys.stdout.write(json.dumps({'type': 'session', 'tools': [], 'messages': []}))\n")
    ck = episode_checkpoint(tmp_path / "ck", "gold")
    step = _run(tmp_path / "home", ck, tasks, tmp_path / "out", level)
    assert step.code == 5, step  # the driver at fault, no retry left: incomplete
    [res] = results(tmp_path / "out")
    assert (res["status"], res["termination"]) == ("infra_error", "driver_fault"), res
    assert "driver's output ended in the middle of a line" in str(res["error"]), res
    [kept] = [x for x in transcript(tmp_path / "out", str(res["attempt_id"])) if "raw" in x]
    assert kept["from"] == "driver" and kept["raw"].startswith('{"type": "session"') and "newline" in kept["reason"]
