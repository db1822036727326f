"""The red-team harness itself: a better candidate is promoted through eval.sh on the small
policy, so an attack test that asserts "not promoted" is asserting the rig's refusal, not a
train that could never promote."""

from __future__ import annotations

from pathlib import Path

import pytest
from redteam import make_checkpoint, run_train

WRONG_AGENT = """\
import os
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("no\\n")
"""


@pytest.mark.parametrize("sandbox", ["bwrap", "process"])
def test_a_better_candidate_is_promoted_through_eval_sh(tmp_path: Path, evalrig_home: Path, sandbox: str) -> None:
    from redteam import bwrap_works

    if sandbox == "bwrap" and not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")
    champion = make_checkpoint(tmp_path / "champion", WRONG_AGENT, name="champ")
    candidate = make_checkpoint(tmp_path / "candidate", name="cand")
    train = run_train(evalrig_home, tmp_path, champion, candidate, sandbox=sandbox)
    gate = train.steps["gate"]
    decision = gate.json
    held = {r["name"]: r["held"] for r in decision["rules"]}
    if sandbox == "bwrap":
        assert gate.code == 0, gate
        assert (decision["verdict"], decision["reason"]) == ("promote", "quality")
    else:
        # process isolates nothing the policy accepts: the gate blocks on `isolated` alone
        assert gate.code == 3, gate
        assert decision["reason"] == "invariant"
        assert [n for n, h in held.items() if not h and n.startswith("invariant.")] == ["invariant.isolated"]
