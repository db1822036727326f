"""Spend by role (docs/episodes.md): the candidate's, the driver's and the judge's recorded
apart in actuals.jsonl, summed per side in the comparison, shown in the verdict file; only the
candidate's enters compare's cost. Driven through eval.sh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.redteam import add_task, make_checkpoint, run_train

# Speaks episodes (per-turn usage, no usage.json) and single-turn tasks (out/usage.json).
AGENT = """\
import json, os, sys
COST = {cost}
if os.environ.get("EVALRIG_EPISODE") == "1":
    for line in sys.stdin:
        if json.loads(line)["type"] == "end":
            break
        sys.stdout.write(json.dumps({{"type": "message", "message": {{"role": "assistant", "content": "ok"}},
                          "usage": {{"cost_usd": COST, "input_tokens": 10, "output_tokens": 2}}}}) + "\\n")
        sys.stdout.flush()
else:
    out = os.environ["EVALRIG_OUT"]
    open(os.path.join(out, "answer.txt"), "w").write("ok\\n")
    json.dump({{"cost_usd": COST}}, open(os.path.join(out, "usage.json"), "w"))
"""

# Asks twice (so two agent turns), then ends; a simulated user's spend in usage.json.
DRIVER = """\
import json, os, sys
def send(o):
    sys.stdout.write(json.dumps(o) + "\\n"); sys.stdout.flush()
sys.stdin.readline()
send({"type": "session", "tools": [], "messages": [{"role": "user", "content": "hello"}]})
n = 0
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "finish":
        break
    n += 1
    send({"type": "reply", "messages": [{"role": "user", "content": "and?"}]} if n < 2
         else {"type": "end", "reason": "done"})
json.dump({"cost_usd": 0.5, "input_tokens": 100, "output_tokens": 10},
          open(os.path.join(os.environ["EVALRIG_DRIVER_OUT"], "usage.json"), "w"))
"""

JUDGE = """\
import json, os
json.dump({"cost_usd": 0.25, "input_tokens": 7}, open(os.path.join(os.environ["EVALRIG_VERDICT"], "usage.json"), "w"))
"""


def _tasks(root: Path) -> Path:
    tasks = root / "tasks"
    d = add_task(tasks, "fixed", "ep", extra='[episode]\ndriver = ["python3", "driver.py"]\n',
                 verifier='kind = "command"\ncommand = ["python3", "judge.py"]',
                 verifier_files={"judge.py": JUDGE})
    (d / "driver").mkdir()
    (d / "driver" / "driver.py").write_text(DRIVER)
    for i in range(6):
        add_task(tasks, "fresh", f"fr{i}")
    return tasks


@pytest.mark.slow
def test_spend_is_recorded_by_role_and_only_the_candidates_is_cost(tmp_path: Path) -> None:
    champion = make_checkpoint(tmp_path / "champion", AGENT.format(cost=0.02), name="champ")
    candidate = make_checkpoint(tmp_path / "candidate", AGENT.format(cost=0.01), name="cand")
    train = run_train(tmp_path / "home", tmp_path, champion, candidate, tasks=_tasks(tmp_path),
                      sandbox="process", repeat=1)
    assert "gate" in train.steps, {k: str(v) for k, v in train.steps.items()}
    actuals = {json.loads(line)["task_id"]: json.loads(line) for line in
               (train.bundle("candidate") / "actuals.jsonl").read_text().splitlines()}
    ep = actuals["ep"]
    assert ep["spend"] == {
        "candidate": {"cost_usd": 0.02, "input_tokens": 20, "output_tokens": 4, "source": "reported"},
        "driver": {"cost_usd": 0.5, "input_tokens": 100, "output_tokens": 10, "source": "reported"},
        "judge": {"cost_usd": 0.25, "input_tokens": 7, "output_tokens": None, "source": "reported"},
    }
    assert ep["cost_usd"] == 0.02   # the agent's own, never the driver's or the judge's
    assert actuals["fr0"]["spend"] == {
        "candidate": {"cost_usd": 0.01, "input_tokens": None, "output_tokens": None, "source": "reported"},
        "driver": None, "judge": None}
    comparison = json.loads((train.cmp / "comparison.json").read_text())
    cand = comparison["facts"]["candidate"]["spend"]
    assert cand["driver"] == {"cost_usd": 0.5, "input_tokens": 100, "output_tokens": 10, "attempts": 1}
    assert cand["judge"] == {"cost_usd": 0.25, "input_tokens": 7, "output_tokens": None, "attempts": 1}
    assert cand["candidate"]["attempts"] == 7 and cand["candidate"]["cost_usd"] == pytest.approx(0.08)
    assert comparison["facts"]["champion"]["spend"]["candidate"]["cost_usd"] == pytest.approx(0.16)
    fixed = comparison["suites"]["fixed"]
    assert fixed["candidate"]["cost_per_task"] == 0.02 and fixed["champion"]["cost_per_task"] == 0.04
    verdicts = list((train.cmp / "decisions").glob("*.md"))
    assert verdicts, list((train.cmp / "decisions").iterdir())
    text = verdicts[0].read_text()
    assert "## Spend by role" in text
    row = next(line for line in text.splitlines() if line.startswith("| episode drivers"))
    assert row.count("0.5 USD, 100 in / 10 out tokens") == 2
    assert "Cost and efficiency above count the agent's spend alone." in text


def test_records_made_before_spend_by_role_keep_their_bytes() -> None:
    from evalrig.core.compare import ActualRecord, spend_totals
    from evalrig.core.digest import canonical_json
    from evalrig.models.run import Actual

    old = {"schema_version": "1.0", "trial_id": "t", "attempt_id": "a-1", "task_id": "x", "rep": 0,
           "wall_s": 1.0, "cpu_s": None, "peak_rss": None, "exit_code": 0, "timed_out": False,
           "cost_usd": None, "input_tokens": None, "output_tokens": None, "usage_source": "missing",
           "stdout_bytes": 0, "stderr_bytes": 0, "stdout_truncated": False, "stderr_truncated": False}
    assert canonical_json(Actual.model_validate(old)) == canonical_json(old)
    # a comparison (and so a decision) of such runs has no spend key at all
    assert spend_totals([ActualRecord(1.0, None, None, "missing")]) is None
    got = spend_totals([ActualRecord(1.0, None, None, "missing"),
                        ActualRecord(1.0, 0.1, None, "reported", ((0.1, None, None), None, (0.2, 3, None)))])
    assert got is not None
    assert got["candidate"].cost_usd == 0.1 and got["candidate"].attempts == 1
    assert got["driver"].attempts == 0 and got["driver"].cost_usd is None
    assert (got["judge"].cost_usd, got["judge"].input_tokens, got["judge"].output_tokens) == (0.2, 3, None)
