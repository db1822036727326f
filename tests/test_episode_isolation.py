"""What a hostile agent can reach of its episode's driver (docs/security.md, "Episode
drivers"), through eval.sh under both sandboxes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.episodes import add_episode_task
from tests.redteam import Step, bwrap_works, eval_sh, make_checkpoint, results

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
# and tries every way at it once the driver is up: list, read, and forge the world the
# verifier will grade.
SPY = """\
import json, os, sys

def send(message):
    sys.stdout.write(json.dumps({"type": "message", "message": message}) + "\\n")
    sys.stdout.flush()

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
):
    try:
        got[what] = how()
    except OSError as e:
        got[what] = None
with open(os.path.join(os.environ["EVALRIG_OUT"], "seen.json"), "w") as f:
    json.dump({"where": droot, "got": got}, f)
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
    # what the verifier grades is the driver's own world, not a forged one
    world = json.loads((evidence / "driver" / "world.json").read_text())
    assert world == {"balance": 0, "calls": 0, "termination": "driver_end"}
