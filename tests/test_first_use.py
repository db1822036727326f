"""What a first-time user hit (issue 22's behaviour items), each through `eval.sh`.

A crashing Python verifier is the verifier's fault, never the agent's failure; hints name
the command the user typed; inputs a user gets wrong are named with what to do.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from redteam import add_task, eval_sh, make_checkpoint, results


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
    for name, code in (("crash", CRASHING), ("crash-after-reward", CRASHING_AFTER_REWARD), ("fails", FAILING)):
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
    assert "error: the verifier of task crash faulted each time it ran" in r.stderr, r
    assert "  | RuntimeError: boom" in r.stderr
    assert eval_sh(evalrig_home, "verify", out).code == 0  # verify re-derives the same faults
