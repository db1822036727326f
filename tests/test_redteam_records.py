"""A run's record files are trusted only as the rig wrote them (issue #20, red team c).

Each attack is taken through `eval.sh`: a bundle writer who swaps a forged `results.jsonl`
in between compare's digest check and its statistics (A13), and one who edits the lines of a
run while it is going (A16). Both trains answer wrong on both sides, so that the honest verdict
is never promote and a forged "every trial passed" would be. docs/security.md states what each
test proves.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import orjson
import pytest
from redteam import EVAL_SH, Train, bwrap_works, eval_sh, make_checkpoint, run_train

WRONG_AGENT = """\
import hashlib
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


SLOW_WRONG_AGENT = """\
import os, time
time.sleep(1.5)
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("no\\n")
"""


def forge_while_running(results: Path, proc: subprocess.Popen[str]) -> bool:
    """The red team's bundle writer (a16_forge_during_run.py): as soon as the run has written
    a result line, and while it is still going, make every failed line so far a pass."""
    while proc.poll() is None:
        time.sleep(0.05)
        try:
            data = results.read_bytes()
        except FileNotFoundError:
            continue
        if data.endswith(b"\n") and b'"status":"failed"' in data:
            results.write_bytes(all_passed(data))
            return proc.poll() is None
    return False


def test_results_edited_while_the_run_is_going_are_refused_at_finish_and_never_registered(
        mine: Train, tmp_path: Path) -> None:
    slow = make_checkpoint(mine.root / "slow", SLOW_WRONG_AGENT, name="slow")
    assert eval_sh(mine.home, "seal", slow).code == 0
    out = mine.root / "runs" / "slow"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update(EVALRIG_HOME=str(mine.home), NO_COLOR="1")
    proc = subprocess.Popen([str(EVAL_SH), "run", "--checkpoint", str(slow), "--tasks", str(mine.tasks),
                             "--out", str(out), "--policy", str(mine.policy), "--repeat", "1",
                             "--sandbox", "bwrap", "--jobs", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    forged_midway = forge_while_running(out / "results.jsonl", proc)
    stdout, stderr = proc.communicate(timeout=300)
    assert forged_midway, (stdout, stderr)
    assert proc.returncode == 4, (stdout, stderr)
    assert "results.jsonl" in stderr and "changed by another writer while the run was going" in stderr, stderr
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    runs = (mine.home / "runs.jsonl").read_text()
    assert manifest["run_id"] not in runs  # never registered
    # compare will not take it, nor will a resume keep the forged lines
    compared = eval_sh(mine.home, "compare", mine.bundle("champion"), out, "--out", tmp_path / "cmp")
    assert compared.code == 5, compared  # the run is not complete
    compared = eval_sh(mine.home, "compare", mine.bundle("champion"), out, "--out", tmp_path / "cmp",
                       "--allow-incomplete")
    assert compared.code == 4 and "results.jsonl" in compared.stderr, compared
    resumed = eval_sh(mine.home, "run", "--out", out, "--resume")
    assert resumed.code == 4 and "results.jsonl" in resumed.stderr, resumed
    assert manifest["run_id"] not in (mine.home / "runs.jsonl").read_text()


def test_results_edited_between_a_stopped_run_and_its_resume_are_refused(mine: Train) -> None:
    slow = make_checkpoint(mine.root / "slow", SLOW_WRONG_AGENT, name="slow")
    assert eval_sh(mine.home, "seal", slow).code == 0
    out = mine.root / "runs" / "slow"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update(EVALRIG_HOME=str(mine.home), NO_COLOR="1")
    proc = subprocess.Popen([str(EVAL_SH), "run", "--checkpoint", str(slow), "--tasks", str(mine.tasks),
                             "--out", str(out), "--policy", str(mine.policy), "--repeat", "1",
                             "--sandbox", "bwrap", "--jobs", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = out / "results.jsonl"
    while proc.poll() is None and not (results.exists() and results.read_bytes().count(b"\n") >= 1):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # stopped: it finishes incomplete, signed and registered
    stdout, stderr = proc.communicate(timeout=300)
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["status"] == "incomplete" and manifest["files"], (stdout, stderr)
    results.write_bytes(all_passed(results.read_bytes()))
    resumed = eval_sh(mine.home, "run", "--out", out, "--resume")
    assert resumed.code == 4, resumed
    assert "results.jsonl" in resumed.stderr and "changed by another writer" in resumed.stderr, resumed
    assert b'"status":"failed"' not in results.read_bytes()  # nothing was appended to the forgery


# -- release logs: what the home signed and recorded binds (A1, A2, A3) ---------------------


@pytest.fixture(scope="module")
def promoting(tmp_path_factory: pytest.TempPathFactory) -> Train:
    """A train that promotes its candidate (the champion answers wrong), approved by alice."""
    if not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")
    base = tmp_path_factory.mktemp("promoting")
    root = base / "t"
    root.mkdir()
    champion = make_checkpoint(root / "champion", WRONG_AGENT, name="champ")
    candidate = make_checkpoint(root / "candidate", name="cand")
    t = run_train(base / "home", root, champion, candidate, sandbox="bwrap", repeat=1)
    assert t.steps["gate"].code == 0, t.steps["gate"]
    assert eval_sh(t.home, "sign", t.decision, "--approve", "--by", "alice").code == 0
    return t


@pytest.fixture
def shipper(promoting: Train, tmp_path: Path) -> Train:
    home, root = tmp_path / "home", tmp_path / "t"
    shutil.copytree(promoting.home, home, symlinks=True)
    shutil.copytree(promoting.root, root, symlinks=True)
    return Train(home, root, root / "champion", root / "candidate", root / "tasks",
                 root / "policies" / "redteam.toml", {})


def test_a_hand_written_unsigned_release_log_serves_nothing_and_is_never_appended_to(shipper: Train) -> None:
    log = shipper.root / "shared" / "releases.jsonl"
    log.parent.mkdir()
    decision = orjson.loads(shipper.decision.read_bytes())
    evil = "sha256:" + hashlib.sha256(b"evil").hexdigest()
    row = {"schema_version": "1.0", "seq": 0, "kind": "ship", "at": "2026-12-01T10:00:00.000000Z",
           "decision": {"path": "/nowhere.json", "digest": "sha256:" + "1" * 64}, "verdict": "promote",
           "reason": "quality", "tripwires": {}, "watch": {}, "candidate": {"checkpoint_id": evil, "name": "evil"},
           "replaces": decision["champion"]["checkpoint_id"],
           "policy": {"name": "redteam", "version": 1, "digest": "sha256:" + "0" * 64},
           "signed_by": "mallory", "prev": None}
    log.write_bytes(orjson.dumps(row, option=orjson.OPT_SORT_KEYS) + b"\n")
    for where in (("--log", log), ()):
        if not where:  # the home's own releases.jsonl, before the home wrote one
            shutil.copy(log, shipper.home / "releases.jsonl")
        champ = eval_sh(shipper.home, "champion", *where, "--json")
        assert evil not in champ.stdout, champ
        rolled = eval_sh(shipper.home, "rollback", *where, "--to", "previous", "--by", "bob", "--reason", "x")
        assert rolled.code == 4, rolled
        shipped = eval_sh(shipper.home, "ship", shipper.decision, "--checkpoint", shipper.candidate, *where)
        assert shipped.code == 4 and "never signed" in shipped.stderr, shipped
    assert log.read_bytes().count(b"\n") == 1  # nothing signed after the forgery


def test_a_release_log_cut_back_or_removed_is_refused(shipper: Train) -> None:
    log = shipper.root / "shared" / "releases.jsonl"
    log.parent.mkdir()
    sh = shipper
    assert eval_sh(sh.home, "ship", sh.decision, "--checkpoint", sh.candidate, "--log", log).code == 0
    assert eval_sh(sh.home, "rollback", "--log", log, "--to", "previous", "--by", "bob", "--reason", "x").code == 0
    # the rollback cut off, its head file removed: the rolled-back candidate must not serve again
    log.write_bytes(log.read_bytes().splitlines(keepends=True)[0])
    (log.parent / ".releases.jsonl.head").unlink()
    for args in (("champion", "--log", log), ("history", "--log", log, "--verify-only"),
                 ("rollback", "--log", log, "--to", "previous", "--by", "bob", "--reason", "x")):
        got = eval_sh(sh.home, *args)
        assert got.code == 4 and "this home last verified or appended" in got.stderr, got
    # the log removed with its head: a ship onto it (a stale train) is refused
    log.unlink()
    got = eval_sh(sh.home, "ship", sh.decision, "--checkpoint", sh.candidate, "--log", log)
    assert got.code == 4 and "missing" in got.stderr, got
    assert not log.exists() or log.read_bytes() == b""  # nothing shipped onto it


def test_the_homes_release_log_cut_under_later_heads_is_refused_by_every_reader(shipper: Train) -> None:
    sh = shipper
    assert eval_sh(sh.home, "ship", sh.decision, "--checkpoint", sh.candidate).code == 0
    assert eval_sh(sh.home, "rollback", "--to", "previous", "--by", "bob", "--reason", "x").code == 0
    assert eval_sh(sh.home, "gate", sh.cmp, "--policy", sh.policy).code == 0  # its heads record both lines
    log = sh.home / "releases.jsonl"
    log.write_bytes(log.read_bytes().splitlines(keepends=True)[0])
    (sh.home / ".releases.jsonl.head").unlink()
    shutil.rmtree(sh.home / "verified-logs", ignore_errors=True)  # the heads alone must see it
    for args in (("champion",), ("history", "--verify-only"),
                 ("rollback", "--to", "previous", "--by", "carol", "--reason", "x")):
        got = eval_sh(sh.home, *args)
        assert got.code == 4 and "releases.jsonl" in got.stderr, got


def test_a_run_relabelled_with_another_run_id_after_compare_is_refused_by_the_gate(shipper: Train) -> None:
    cmp = shipper.root / "cmp2"  # compared here, so that the comparison names this copy's bundles
    assert eval_sh(shipper.home, "compare", shipper.bundle("champion"), shipper.bundle("candidate"),
                   "--out", cmp).code == 0
    manifest = shipper.bundle("candidate") / "manifest.json"
    m = orjson.loads(manifest.read_bytes())
    m["checkpoint"]["name"] = "champ"
    m["run_id"] = "run-relabelled"
    manifest.write_bytes(orjson.dumps(m, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    gate = eval_sh(shipper.home, "gate", cmp, "--policy", shipper.policy)
    assert gate.code == 4 and "run-relabelled" in gate.stderr, gate
