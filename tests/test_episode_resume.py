"""kill -9 of the rig in the middle of an episode, then resume (docs/episodes.md): the
interrupted attempt is recorded `interrupted`, its trial runs again from the start, and no
process of the episode (agent or driver) outlives the rig."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.episodes import add_episode_task, episode_checkpoint
from tests.redteam import bwrap_works, eval_sh, results

ROOT = Path(__file__).resolve().parent.parent


def _tagged(attempt_id: str) -> list[int]:
    """Processes whose environment carries the attempt's id (its agent and its driver)."""
    needle = f"EVALRIG_ATTEMPT_ID={attempt_id}".encode()
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(p.name))
    return found


@pytest.mark.parametrize("level", ["bwrap", "process"])
def test_kill_9_mid_episode_then_resume_runs_the_trial_again(tmp_path: Path, level: str) -> None:
    if level == "bwrap" and not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")
    home, tasks, out = tmp_path / "home", tmp_path / "tasks", tmp_path / "out"
    add_episode_task(tasks, "bank")
    ck = episode_checkpoint(tmp_path / "ck", "slow")
    assert eval_sh(home, "seal", ck).code == 0
    argv = ["run", "--checkpoint", str(ck), "--tasks", str(tasks), "--out", str(out), "--repeat", "1",
            "--sandbox", level]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}, "EVALRIG_HOME": str(home)}
    rig = subprocess.Popen([sys.executable, "-m", "evalrig", *argv], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        transcript = None
        while time.monotonic() < deadline:  # the agent's second turn has been delivered
            found = list((out / "attempts").glob("*/transcript.jsonl")) if (out / "attempts").is_dir() else []
            if found and b'"type":"turn"' in found[0].read_bytes():
                transcript = found[0]
                break
            time.sleep(0.05)
        assert transcript is not None, "the episode never reached its second turn"
        attempt_id = transcript.parent.name
        assert _tagged(attempt_id), "the agent and driver should be running now"
        rig.kill()
        rig.wait(10)
    finally:
        if rig.poll() is None:
            rig.kill()
    # what was synced before the kill is readable, line by line
    kept = transcript.read_bytes()
    assert kept.endswith(b"\n") and b'"from":"driver"' in kept
    gone_by = time.monotonic() + 10
    while _tagged(attempt_id) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert _tagged(attempt_id) == [], "an episode process outlived the rig"

    again = eval_sh(home, *argv)
    assert again.code == 0, again
    events = [json.loads(x) for x in (out / "attempts.jsonl").read_bytes().splitlines()]
    assert [e["status"] for e in events if e["attempt_id"] == attempt_id and e["event"] == "end"] == ["interrupted"]
    got = results(out)
    assert got[-1]["status"] == "passed" and got[-1]["termination"] == "driver_end"
    assert got[-1]["attempt_id"] != attempt_id
    assert eval_sh(home, "verify", out).code == 0
