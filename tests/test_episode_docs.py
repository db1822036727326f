"""The worked example of docs/episodes.md, run as it is written there: its driver, its
agent and its task.toml taken from the page, through eval.sh."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.redteam import bwrap_works, eval_sh, results

PAGE = Path(__file__).resolve().parent.parent / "docs" / "episodes.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_worked_example_runs_as_written(tmp_path: Path) -> None:
    driver, agent = _blocks("python")
    [task_toml] = [b for b in _blocks("toml") if "[verifier]" in b]
    assert len(driver.splitlines()) <= 35 and len(agent.splitlines()) <= 35
    task = tmp_path / "tasks" / "fixed" / "add"
    (task / "driver").mkdir(parents=True)
    (task / "driver" / "driver.py").write_text(driver)
    (task / "task.toml").write_text(task_toml)
    (task / "prompt.md").write_text("Answer the customer's sums with the add tool.\n")
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "agent.py").write_text(agent)
    (ck / "checkpoint.toml").write_text('name = "docs"\n[agent]\ncommand = ["python3", "agent.py"]\n')
    home = tmp_path / "home"
    assert eval_sh(home, "validate", "--tasks", tmp_path / "tasks").code == 0
    assert eval_sh(home, "seal", ck).code == 0
    run = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tmp_path / "tasks", "--out", tmp_path / "out",
                  "--repeat", "1", "--sandbox", "bwrap" if bwrap_works() else "process")
    assert run.code == 0, run
    [res] = results(tmp_path / "out")
    assert (res["status"], res["termination"]) == ("passed", "driver_end"), res
    evidence = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    assert len((evidence / "transcript.jsonl").read_bytes().splitlines()) == 12  # as the page says
    assert json.loads((evidence / "driver" / "state.json").read_text()) == {"tool_calls": 1}
