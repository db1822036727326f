"""A run's record files are trusted only as the rig wrote them (issue #20, red team c).

Each attack is taken through `eval.sh`: a bundle writer who swaps a forged `results.jsonl`
in between compare's digest check and its statistics (A13), and one who edits the lines of a
run while it is going (A16). Both trains answer wrong on both sides, so that the honest verdict
is never promote and a forged "every trial passed" would be. docs/security.md states what each
test proves.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import orjson
import pytest
from redteam import Train, bwrap_works, eval_sh, make_checkpoint, run_train

WRONG_AGENT = """\
import os
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("no\\n")
"""


@pytest.fixture(scope="module")
def train(tmp_path_factory: pytest.TempPathFactory) -> Train:
    """Both sides run, not compared: champion and candidate both answer wrong."""
    if not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")
    base = tmp_path_factory.mktemp("train")
    root = base / "t"
    root.mkdir()
    champion = make_checkpoint(root / "champion", WRONG_AGENT, name="champ")
    candidate = make_checkpoint(root / "candidate", WRONG_AGENT, name="cand")
    t = run_train(base / "home", root, champion, candidate, sandbox="bwrap", repeat=1, stop_after="candidate")
    assert t.steps["candidate"].code == 0, t.steps["candidate"]
    return t


@pytest.fixture
def mine(train: Train, tmp_path: Path) -> Train:
    """The train copied (home and files) for one test to attack."""
    home, root = tmp_path / "home", tmp_path / "t"
    shutil.copytree(train.home, home, symlinks=True)
    shutil.copytree(train.root, root, symlinks=True)
    return Train(home, root, root / "champion", root / "candidate", root / "tasks",
                 root / "policies" / "redteam.toml", {})


def all_passed(results: bytes) -> bytes:
    """The forgery: every failed trial of a results.jsonl made a pass."""
    out = []
    for raw in results.splitlines():
        d = orjson.loads(raw)
        if d["status"] == "failed":
            d.update(status="passed", passed=True, reward=1.0)
        out.append(orjson.dumps(d) + b"\n")
    return b"".join(out)


# A stand-in for the red team's inotify racer (race.py), made deterministic: loaded into the
# rig's own process (sitecustomize on PYTHONPATH), it swaps the forged file in the moment the
# rig opens the candidate's results.jsonl a second time, i.e. right after the read that
# checked its digest. A rig that reads each record file once never gives it that moment.
SWAPPER = """\
import builtins, io, os
_real_open = io.open
_target = os.environ["SWAP_TARGET"]
_forged = os.environ["SWAP_FORGED"]
_seen = [0]

def _open(file, *args, **kwargs):
    if isinstance(file, (str, os.PathLike)) and os.path.abspath(os.fspath(file)) == _target:
        _seen[0] += 1
        if _seen[0] == 2 and os.path.exists(_forged):
            os.replace(_forged, _target)
    return _real_open(file, *args, **kwargs)

io.open = builtins.open = _open
"""


def test_a_results_file_swapped_after_compares_digest_read_is_never_counted(mine: Train, tmp_path: Path) -> None:
    cand = mine.bundle("candidate")
    real = (cand / "results.jsonl").read_bytes()
    forged = tmp_path / "forged.jsonl"
    forged.write_bytes(all_passed(real))
    assert forged.read_bytes() != real
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(SWAPPER))
    env = {"PYTHONPATH": str(hook), "SWAP_TARGET": str(cand / "results.jsonl"), "SWAP_FORGED": str(forged)}
    compared = eval_sh(mine.home, "compare", mine.bundle("champion"), cand, "--out", mine.cmp, env=env)
    assert compared.code == 0, compared
    gate = eval_sh(mine.home, "gate", mine.cmp, "--policy", mine.policy, "--json")
    assert gate.json["verdict"] == "keep-champion", gate  # type: ignore[index]
    # what compare counted is what the rig verified: none of the candidate's trials passed
    assert all(not line["passed"] for line in map(orjson.loads, real.splitlines()))
