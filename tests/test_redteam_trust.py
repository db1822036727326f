"""Trust lives in the rig's home, not in bundles (issue #10, attacks 5, 6, 11 and 12's chain).

Each attack is taken through `eval.sh` as a release script runs it: a decision no gate
issued, a comparison edited after sign-off, a forged and re-digested run bundle, an
attempt id that climbs out of the bundle, a symlinked `issued.jsonl`, a seal appended to
the home by hand. docs/security.md states what each test proves.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from redteam import (
    EVAL_SH,
    Step,
    Train,
    TrainPaths,
    bwrap_works,
    eval_sh,
    make_checkpoint,
    results,
    run_train,
)

WRONG_AGENT = """\
import os
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("no\\n")
"""


@dataclass
class Copy(TrainPaths):
    """A private copy of the shared train: its home and its files, safe to attack."""

    home: Path
    root: Path

    def sh(self, *args: str | Path) -> Step:
        return eval_sh(self.home, *args)


@pytest.fixture(scope="module")
def train(tmp_path_factory: pytest.TempPathFactory) -> Train:
    """One real train, bwrap, that promotes its candidate (the champion answers wrong)."""
    if not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")
    base = tmp_path_factory.mktemp("train")
    home = base / "home"
    root = base / "t"
    root.mkdir()
    champion = make_checkpoint(root / "champion", WRONG_AGENT, name="champ")
    candidate = make_checkpoint(root / "candidate", name="cand")
    t = run_train(home, root, champion, candidate, sandbox="bwrap")
    assert t.steps["gate"].code == 0, t.steps["gate"]
    return t


@pytest.fixture
def mine(train: Train, tmp_path: Path) -> Copy:
    """The train copied (home and files, symlinks kept as links) for one test to attack."""
    home, root = tmp_path / "home", tmp_path / "t"
    shutil.copytree(train.home, home, symlinks=True)
    shutil.copytree(train.root, root, symlinks=True)
    return Copy(home, root)


def redigest_run(bundle: Path) -> None:
    """What a forger does after editing a run bundle: recompute the manifest's digests."""
    from evalrig.store.bundle import file_digests

    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"] = file_digests(bundle)
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))


def write_lines(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in rows))


# -- attack 5: check-release approves what no gate issued ---------------------------------


def test_a_hand_written_decision_and_signoff_are_not_approved(mine: Copy) -> None:
    """A decision naming another sealed checkpoint (the champion), written by hand with a
    sign-off line carrying its sha256 in the bundle's signoffs.jsonl: no gate issued it."""
    real = json.loads(mine.decision.read_text())
    champ_id = real["champion"]["checkpoint_id"]
    forged = dict(real, candidate=dict(real["candidate"], checkpoint_id=champ_id))
    decisions = mine.root / "forged" / "decisions"
    decisions.mkdir(parents=True)
    path = decisions / "redteam-v1.json"
    path.write_bytes(json.dumps(forged, indent=2, sort_keys=True).encode() + b"\n")
    digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    write_lines(decisions / "signoffs.jsonl", [{
        "schema_version": "1.0", "decision_digest": digest, "decision_file": path.name,
        "candidate_checkpoint_id": champ_id, "by": "nobody", "action": "approve", "verdict": "promote",
        "agrees_with_gate": True, "reason": None, "open_s": 1.0, "at": "2026-12-01T10:00:00.000000Z"}])
    r = mine.sh("check-release", path, "--checkpoint", mine.root / "champion", "--json")
    assert r.code == 1, r
    out = r.json
    assert isinstance(out, dict) and not out["approved"]
    assert "no gate issued this decision" in out["reason"] and "gates.jsonl" in out["reason"]
    assert f"{EVAL_SH} gate" in out["hint"]  # as invoked (issue #12 item 9: was `evalrig gate`)


def test_a_bundle_signoff_without_the_homes_is_not_approved(mine: Copy) -> None:
    """The real decision, approved only in the bundle's copy of the sign-offs."""
    signoff = {
        "schema_version": "1.0", "decision_digest": "sha256:" + hashlib.sha256(mine.decision.read_bytes()).hexdigest(),
        "decision_file": mine.decision.name, "candidate_checkpoint_id": json.loads(
            mine.decision.read_text())["candidate"]["checkpoint_id"],
        "by": "mallory", "action": "approve", "verdict": "promote", "agrees_with_gate": True, "reason": None,
        "open_s": 1.0, "at": "2026-12-01T10:00:00.000000Z"}
    write_lines(mine.decision.parent / "signoffs.jsonl", [signoff])
    r = mine.sh("check-release", mine.decision, "--checkpoint", mine.root / "candidate")
    assert r.code == 1, r
    # through eval.sh, the command to run is eval.sh's (issue #12 item 9: was `evalrig sign`)
    assert "no sign-off" in r.stderr and f"{EVAL_SH} sign" in r.stderr


def test_an_approved_decision_whose_comparison_was_edited_is_not_approved(mine: Copy) -> None:
    signed = mine.sh("sign", mine.decision, "--approve", "--by", "alice")
    assert signed.code == 0, signed
    home_line = json.loads((mine.home / "signoffs.jsonl").read_text().splitlines()[-1])
    bundle_line = json.loads((mine.decision.parent / "signoffs.jsonl").read_text().splitlines()[-1])
    assert {k: v for k, v in home_line.items() if k != "prev"} == bundle_line
    ok = mine.sh("check-release", mine.decision, "--checkpoint", mine.root / "candidate")
    assert ok.code == 0, ok
    # After sign-off: the comparison is edited, and its bundle's manifest re-digested.
    comparison = mine.cmp / "comparison.json"
    doc = json.loads(comparison.read_text())
    doc["facts"]["champion"]["canary_found"] = 0
    doc["suites"]["fresh"]["tasks"] += 1
    comparison.write_bytes(json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n")
    manifest = json.loads((mine.cmp / "manifest.json").read_text())
    manifest["files"]["comparison.json"] = "sha256:" + hashlib.sha256(comparison.read_bytes()).hexdigest()
    (mine.cmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    r = mine.sh("check-release", mine.decision, "--checkpoint", mine.root / "candidate")
    assert r.code == 1, r
    assert "comparison does not verify" in r.stderr and "compare the two runs again" in r.stderr


# -- attack 6: a forged bundle; an attempt id that leaves the bundle ----------------------


def test_a_forged_rebundled_champion_is_refused_by_compare_and_by_register(mine: Copy) -> None:
    """The champion's fresh results flipped (it answers wrong; the forgery says it passed),
    the manifest's digests recomputed: every digest verifies, the home never saw it."""
    champ = mine.bundle("champion")
    rows = results(champ)
    for r in rows:
        if r["suite"] == "fresh":
            assert r["status"] == "failed"
            r.update(status="passed", passed=True, reward=1.0)
    write_lines(champ / "results.jsonl", rows)
    redigest_run(champ)
    out = mine.root / "cmp-forged"
    r = mine.sh("compare", champ, mine.bundle("candidate"), "--out", out)
    assert r.code == 4, r
    assert "not registered" in r.stderr and f"evalrig verify --register {champ}" in r.stderr
    assert not out.exists()
    reg = mine.sh("verify", champ, "--register")
    assert reg.code == 4, reg
    assert "re-derived failed" in reg.stderr
    assert mine.sh("compare", champ, mine.bundle("candidate"), "--out", out).code == 4


def test_a_hand_written_comparison_of_an_unregistered_run_is_not_gated(mine: Copy) -> None:
    """compare refuses the forged champion, so the forger writes the comparison by hand:
    the real one with the champion's reference pointing at the forged bundle (its
    statistics would follow), its manifest re-digested. The gate issues nothing for it."""
    from evalrig.store.bundle import bundle_digest

    champ = mine.bundle("champion")
    rows = results(champ)
    rows[0].update(status="passed", passed=True, reward=1.0)
    write_lines(champ / "results.jsonl", rows)
    redigest_run(champ)
    forged_digest = bundle_digest(json.loads((champ / "manifest.json").read_text())["files"])
    cmp = mine.root / "cmp-by-hand"
    shutil.copytree(mine.cmp, cmp)
    shutil.rmtree(cmp / "decisions")
    doc = json.loads((cmp / "comparison.json").read_text())
    doc["champion"]["bundle_digest"] = forged_digest
    (cmp / "comparison.json").write_bytes(json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n")
    manifest = json.loads((cmp / "manifest.json").read_text())
    manifest["champion"]["bundle_digest"] = forged_digest
    manifest["files"]["comparison.json"] = "sha256:" + hashlib.sha256((cmp / "comparison.json").read_bytes()).hexdigest()
    (cmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    gates_before = (mine.home / "gates.jsonl").read_bytes()
    r = mine.sh("gate", cmp, "--policy", mine.root / "policies" / "redteam.toml")
    assert r.code == 4, r
    assert "champion.bundle_digest" in r.stderr and "did not register" in r.stderr, r
    assert "verify --register" in r.stderr, r
    assert not (cmp / "decisions").exists()
    assert (mine.home / "gates.jsonl").read_bytes() == gates_before


def test_a_bundle_from_another_home_is_brought_in_by_verify_register(mine: Copy, tmp_path: Path) -> None:
    other = Copy(tmp_path / "other-home", mine.root)
    out = mine.root / "cmp-elsewhere"
    r = other.sh("compare", mine.bundle("champion"), mine.bundle("candidate"), "--out", out)
    assert r.code == 4 and "verify --register" in r.stderr, r
    # the other home trusts the train's home to register its runs (docs/release-engineers.md)
    pub = (mine.home / "key.pub").read_text().split()[0]
    other.home.mkdir(exist_ok=True)
    (other.home / "trusted_keys").write_text(f"{pub} register the train's home\n")
    for side in ("champion", "candidate"):
        reg = other.sh("verify", mine.bundle(side), "--register", "--json")
        assert reg.code == 0, reg
        assert isinstance(reg.json, dict) and reg.json["newly_registered"] is True
    again = other.sh("verify", mine.bundle("champion"), "--register", "--json")
    assert again.code == 0 and isinstance(again.json, dict) and again.json["newly_registered"] is False
    lines = (other.home / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert other.sh("compare", mine.bundle("champion"), mine.bundle("candidate"), "--out", out).code == 0


def test_every_finished_run_is_registered_in_the_home(train: Train) -> None:
    from evalrig.models.run import RunEntry
    from evalrig.store.bundle import bundle_digest
    from evalrig.store.jsonl import read_chained

    entries = read_chained(train.home / "runs.jsonl", RunEntry).records
    for side in ("champion", "candidate"):
        m = json.loads((train.bundle(side) / "manifest.json").read_text())
        mine = [e for e in entries if e.run_id == m["run_id"]]
        assert [(e.bundle_digest, e.checkpoint_id, e.status) for e in mine] == [
            (bundle_digest(m["files"]), m["checkpoint"]["id"], "complete")]


def test_an_attempt_id_that_climbs_out_of_the_bundle_is_refused_before_any_read(mine: Copy) -> None:
    """`../../evil` holding a copy of the real evidence: verify would re-derive from outside
    the bundle and agree. Its schema refuses the id first, naming file, line and field."""
    champ = mine.bundle("champion")
    rows = results(champ)
    real = rows[0]["attempt_id"]
    outside = champ.parent / "evil"  # attempts/../../evil, beside the bundle
    shutil.copytree(champ / "attempts" / str(real), outside)
    rows[0]["attempt_id"] = "../../evil"
    write_lines(champ / "results.jsonl", rows)
    redigest_run(champ)
    r = mine.sh("verify", champ)
    assert r.code == 4, r
    assert f"{champ / 'results.jsonl'}:1: attempt_id:" in r.stderr, r
    assert "evidence of" not in r.stderr  # refused at the schema, before the evidence was looked at


# -- attack 11: the gate follows a symlinked issued.jsonl ---------------------------------


def test_the_gate_refuses_a_symlinked_issued_jsonl_and_leaves_its_target_alone(mine: Copy) -> None:
    issued = mine.cmp / "decisions" / "issued.jsonl"
    target = mine.root / "precious.jsonl"
    target.write_bytes(b'{"keep": "me"}\n{"and": "this torn tail"')
    before = target.read_bytes()
    issued.unlink()
    issued.symlink_to(target)
    ledger = (mine.home / "gates.jsonl").read_bytes()
    r = mine.sh("gate", mine.cmp, "--policy", mine.root / "policies" / "redteam.toml")
    assert r.code == 4, r
    assert str(issued) in r.stderr and "symbolic link" in r.stderr
    assert target.read_bytes() == before
    assert issued.is_symlink()
    assert (mine.home / "gates.jsonl").read_bytes() == ledger  # nothing issued, nothing in the ledger


def test_a_symlinked_home_ledger_is_refused(mine: Copy) -> None:
    ledger = mine.home / "gates.jsonl"
    target = mine.root / "elsewhere.jsonl"
    ledger.rename(target)
    ledger.symlink_to(target)
    before = target.read_bytes()
    r = mine.sh("gate", mine.cmp, "--policy", mine.root / "policies" / "redteam.toml")
    assert r.code == 4, r
    assert str(ledger) in r.stderr and "symbolic link" in r.stderr
    assert target.read_bytes() == before


# -- attack 12 (the chain): a seal appended to the home by hand ----------------------------


def forge_seal(home: Path, checkpoint: Path, prev: str | None = None) -> int:
    """Append a seal line for `checkpoint` the way an agent with write access would; its line number."""
    from evalrig.store.checkpoint import checkpoint_id

    registry = home / "seals.jsonl"
    line: dict[str, object] = {"schema_version": "1.0", "checkpoint_id": checkpoint_id(checkpoint).digest,
                               "name": "forged", "sealed_at": "2026-01-01T00:00:00.000000Z", "hash_version": 2}
    if prev is not None:
        line["prev"] = prev
    with open(registry, "ab") as f:
        f.write(orjson.dumps(line, option=orjson.OPT_SORT_KEYS) + b"\n")
    return len(registry.read_bytes().splitlines())


@pytest.mark.parametrize("prev", [None, "0" * 64])
def test_a_seal_appended_by_hand_breaks_the_chain(mine: Copy, prev: str | None) -> None:
    forged = make_checkpoint(mine.root / "forged")
    n = forge_seal(mine.home, forged, prev)
    registry = mine.home / "seals.jsonl"
    r = mine.sh("run", "--checkpoint", forged, "--tasks", mine.root / "tasks", "--out", mine.root / "runs" / "f",
                "--repeat", "1", "--task", "fx0", "--sandbox", "process")
    assert r.code == 4, r
    assert f"{registry}:{n}:" in r.stderr and "hash chain breaks" in r.stderr
    assert not (mine.root / "runs" / "f" / "results.jsonl").exists()
    other = make_checkpoint(mine.root / "other", name="other")
    s = mine.sh("seal", other)
    assert s.code == 4 and f"{registry}:{n}:" in s.stderr, s
    assert len(registry.read_bytes().splitlines()) == n  # nothing appended after a break


def test_an_edited_seal_line_breaks_the_chain(mine: Copy) -> None:
    registry = mine.home / "seals.jsonl"
    lines = registry.read_bytes().splitlines(keepends=True)
    lines[0] = lines[0].replace(b'"name":"champ"', b'"name":"chimp"')
    registry.write_bytes(b"".join(lines))
    r = mine.sh("seal", mine.root / "candidate")
    assert r.code == 4 and f"{registry}:2:" in r.stderr, r  # line 2's prev no longer matches


def test_a_torn_last_seal_line_is_ignored_and_cut_before_the_next_append(mine: Copy) -> None:
    registry = mine.home / "seals.jsonl"
    whole = registry.read_bytes()
    registry.write_bytes(whole + b'{"schema_version":"1.0","checkpoint_id":"sha')
    assert mine.sh("seal", mine.root / "candidate").code == 0  # a read: the torn line ignored
    assert registry.read_bytes().startswith(whole)
    other = make_checkpoint(mine.root / "other", name="other")
    assert mine.sh("seal", other).code == 0
    data = registry.read_bytes()
    assert data.startswith(whole) and b'"sha\n' not in data and data.count(b"\n") == whole.count(b"\n") + 1
    from evalrig.models.run import SealEntry
    from evalrig.store.jsonl import read_chained

    assert [e.name for e in read_chained(registry, SealEntry).records][-1] == "other"


def test_legacy_seal_lines_are_accepted_and_the_chain_starts_after_them(tmp_path: Path) -> None:
    from evalrig.store.tree import hash_tree

    home = tmp_path / "home"
    home.mkdir()
    old = make_checkpoint(tmp_path / "old", name="old")
    # a line an older rig wrote: no chain, no hash_version, so its id is a version-1 hash
    v1 = hash_tree(old, exclude=frozenset({"SEAL.json"}), version=1).digest
    legacy = orjson.dumps({"schema_version": "1.0", "checkpoint_id": v1, "name": "old",
                           "sealed_at": "2026-01-01T00:00:00.000000Z"}, option=orjson.OPT_SORT_KEYS) + b"\n"
    (home / "seals.jsonl").write_bytes(legacy)
    new = make_checkpoint(tmp_path / "new", name="new")
    assert eval_sh(home, "seal", new).code == 0
    assert eval_sh(home, "seal", old, "--json").code == 0
    lines = (home / "seals.jsonl").read_bytes().splitlines()
    assert len(lines) == 3 and lines[0] == legacy.rstrip(b"\n")
    assert json.loads(lines[1])["prev"] == hashlib.sha256(legacy).hexdigest()  # every byte before it
    assert json.loads(lines[2])["same_as"] == v1  # the old content keeps its id, under version 2 now


def _append_many(home: str, tag: str, n: int) -> None:
    from evalrig.models.run import SealEntry
    from evalrig.store.jsonl import chained_append

    for i in range(n):
        with chained_append(Path(home) / "seals.jsonl", SealEntry) as registry:
            registry.append(SealEntry(checkpoint_id="sha256:" + hashlib.sha256(f"{tag}{i}".encode()).hexdigest(),
                                      name=f"{tag}-{i}", sealed_at="2026-01-01T00:00:00Z"))  # type: ignore[arg-type]


def test_two_processes_appending_never_interleave(tmp_path: Path) -> None:
    from evalrig.models.run import SealEntry
    from evalrig.store.jsonl import read_chained

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), tag, 200)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    names = [e.name for e in read_chained(tmp_path / "seals.jsonl", SealEntry).records]
    assert len(names) == 400
    for tag in ("a", "b"):
        assert [n for n in names if n.startswith(tag)] == [f"{tag}-{i}" for i in range(200)]
    assert os.path.exists(tmp_path / ".seals.jsonl.lock")


# -- issue 20, findings 2 and 7: the home signs what it records ------------------------------


def hand_append(path: Path, row: dict[str, object]) -> None:
    """What a red team does to a chained file it can write: a well-formed line with a correct
    `prev` (the sha256 of the last line), appended (and the release log's head moved to it)."""
    data = path.read_bytes()
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    line = orjson.dumps(dict(row, prev=hashlib.sha256(last).hexdigest()), option=orjson.OPT_SORT_KEYS)
    path.write_bytes(data + line + b"\n")
    head = path.with_name(f".{path.name}.head")
    if head.exists():
        head.write_text(hashlib.sha256(line).hexdigest() + "\n")


def test_a_hand_appended_approving_signoff_is_a_break(mine: Copy) -> None:
    """A sign-off approving the real decision, appended to the home's signoffs.jsonl with a
    correct prev after the home signed a line: check-release refuses the file, naming it."""
    rejected = mine.sh("sign", mine.decision, "--reject", "--by", "alice", "--reason", "not yet")
    assert rejected.code == 0, rejected
    decision = json.loads(mine.decision.read_text())
    hand_append(mine.home / "signoffs.jsonl", {
        "schema_version": "1.0", "decision_digest": "sha256:" + hashlib.sha256(mine.decision.read_bytes()).hexdigest(),
        "decision_file": mine.decision.name, "candidate_checkpoint_id": decision["candidate"]["checkpoint_id"],
        "by": "mallory", "action": "approve", "verdict": "promote", "agrees_with_gate": True, "reason": None,
        "open_s": 1.0, "at": "2026-12-01T10:00:00.000000Z"})
    r = mine.sh("check-release", mine.decision, "--checkpoint", mine.root / "candidate")
    assert r.code == 4, r
    assert "signoffs.jsonl:2" in r.stderr and "no signature" in r.stderr, r
    assert mine.sh("ship", mine.decision, "--checkpoint", mine.root / "candidate").code == 4
    assert not (mine.home / "releases.jsonl").exists()


def test_a_hand_appended_ship_of_a_never_gated_build_is_a_break(mine: Copy) -> None:
    """After a real ship, a `ship` of the champion (never gated as a candidate) appended to the
    release log with a correct prev and seq, its head moved: every reader refuses the log."""
    assert mine.sh("sign", mine.decision, "--approve", "--by", "alice").code == 0
    shipped = mine.sh("ship", mine.decision, "--checkpoint", mine.root / "candidate")
    assert shipped.code == 0, shipped
    log = mine.home / "releases.jsonl"
    real = json.loads(log.read_text().splitlines()[0])
    assert real["key"].startswith("sha256:") and real["sig"]
    assert real["heads"]["releases.jsonl"] == {"lines": 0, "sha256": None}
    champ_id = json.loads(mine.decision.read_text())["champion"]["checkpoint_id"]
    forged = {k: v for k, v in real.items() if k not in ("prev", "sig", "key", "heads")}
    forged.update(seq=1, candidate={"checkpoint_id": champ_id, "name": "champ"},
                  replaces=real["candidate"]["checkpoint_id"], signed_by="mallory")
    hand_append(log, forged)
    for argv in (("history",), ("champion",), ("rollback", "--to", "previous", "--by", "bob", "--reason", "x")):
        r = mine.sh(*argv)
        assert r.code == 4, r
        assert "releases.jsonl:2" in r.stderr and "no signature" in r.stderr, r
    # the same line signed by a key the home does not know is refused as well
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from evalrig.store.signing import HomeKey

    other = Ed25519PrivateKey.generate()
    lines = log.read_bytes().split(b"\n")[:1]
    row = HomeKey(other, other.public_key().public_bytes_raw()).sign(
        dict(forged, prev=hashlib.sha256(lines[0]).hexdigest()))
    line = orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
    log.write_bytes(lines[0] + b"\n" + line + b"\n")
    log.with_name(".releases.jsonl.head").write_text(hashlib.sha256(line).hexdigest() + "\n")
    r = mine.sh("history")
    assert r.code == 4 and "releases.jsonl:2" in r.stderr and "not a key this home believes" in r.stderr, r


def test_a_later_rejection_cut_from_the_homes_signoffs_is_seen(mine: Copy) -> None:
    """An approval, then a rejection, then another gate of the train (a later line of the home
    records signoffs.jsonl's length); the rejection cut from the end of signoffs.jsonl: the
    chain still holds, but the gate ledger's last line says the file was longer."""
    assert mine.sh("sign", mine.decision, "--approve", "--by", "alice").code == 0
    assert mine.sh("sign", mine.decision, "--reject", "--by", "bob", "--reason", "a regression").code == 0
    again = mine.sh("gate", mine.cmp, "--policy", mine.root / "policies" / "redteam.toml")
    assert again.code == 0, again
    path = mine.home / "signoffs.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in path.read_bytes().split(b"\n")[:1]))
    r = mine.sh("check-release", mine.decision, "--checkpoint", mine.root / "candidate")
    assert r.code == 4, r
    assert "signoffs.jsonl" in r.stderr and "says it had 2 lines" in r.stderr, r


def test_a_release_log_is_believed_only_under_a_key_trusted_for_release_logs(mine: Copy, tmp_path: Path) -> None:
    """The train's release log read from another home: refused while its signer is unknown or
    trusted only for `register`; read once trusted for `release-log`. A trusted_keys file that
    others may write, or that is a link, is refused."""
    assert mine.sh("sign", mine.decision, "--approve", "--by", "alice").code == 0
    assert mine.sh("ship", mine.decision, "--checkpoint", mine.root / "candidate").code == 0
    log = mine.home / "releases.jsonl"
    pub = (mine.home / "key.pub").read_text().split()[0]
    shown = mine.sh("key", "--json").json
    assert isinstance(shown, dict) and shown["public_key"] == pub
    assert shown["fingerprint"] == "sha256:" + hashlib.sha256(__import__("base64").b64decode(pub)).hexdigest()
    other = Copy(tmp_path / "other-home", mine.root)
    r = other.sh("history", "--log", log)
    assert r.code == 4 and "releases.jsonl:1" in r.stderr and "not a key this home believes" in r.stderr, r
    trusted = other.home / "trusted_keys"
    trusted.write_text(f"{pub} register the train's home\n")
    assert other.sh("history", "--log", log).code == 4
    trusted.write_text(f"{pub} release-log the train's home\n")
    ok = other.sh("history", "--log", log, "--json")
    assert ok.code == 0, ok
    trusted.chmod(0o666)
    r = other.sh("history", "--log", log)
    assert r.code == 4 and "trusted_keys" in r.stderr and "writable by its group or others" in r.stderr, r
    trusted.chmod(0o644)
    real = tmp_path / "keys"
    trusted.rename(real)
    trusted.symlink_to(real)
    r = other.sh("history", "--log", log)
    assert r.code == 4 and "symbolic link" in r.stderr, r
    (mine.home / "key").chmod(0o660)
    r = mine.sh("history")
    assert r.code == 4 and f"{mine.home / 'key'}" in r.stderr, r


# -- issue 20, finding 4: the gate takes only a comparison the home recorded ------------------


def test_a_comparison_edited_and_redigested_between_compare_and_gate_is_refused(mine: Copy) -> None:
    """compare writes a comparison (recorded, signed, in comparisons.jsonl); before the gate its
    comparison.json is edited in the candidate's favour and its manifest re-digested: every
    digest of the bundle verifies, but the home never recorded that comparison."""
    out = mine.root / "cmp-edited"
    made = mine.sh("compare", mine.bundle("champion"), mine.bundle("candidate"), "--out", out)
    assert made.code == 0, made
    recorded = [json.loads(x) for x in (mine.home / "comparisons.jsonl").read_text().splitlines()]
    digest = "sha256:" + hashlib.sha256((out / "comparison.json").read_bytes()).hexdigest()
    assert digest in [r["comparison_digest"] for r in recorded] and all(r["sig"] for r in recorded)
    doc = json.loads((out / "comparison.json").read_text())
    doc["facts"]["champion"]["canary_found"] = 0
    doc["suites"]["fresh"]["tasks"] += 1
    (out / "comparison.json").write_bytes(json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"]["comparison.json"] = "sha256:" + hashlib.sha256((out / "comparison.json").read_bytes()).hexdigest()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    gates_before = (mine.home / "gates.jsonl").read_bytes()
    r = mine.sh("gate", out, "--policy", mine.root / "policies" / "redteam.toml")
    assert r.code == 4, r
    assert "not a comparison this rig's home recorded" in r.stderr and "comparisons.jsonl" in r.stderr, r
    assert not (out / "decisions").exists()
    assert (mine.home / "gates.jsonl").read_bytes() == gates_before


# -- issue 20, finding 2: what the home registers ------------------------------------------------


def forge_consistently(bundle: Path) -> None:
    """The champion's failed fresh trials made passes with the rig's own functions: the answer in
    the evidence rewritten, each result's evidence digest recomputed, the manifest re-digested.
    Re-deriving agrees with every result; only the home knows it is not the run that finished."""
    from evalrig.attempt.evidence import evidence_digest

    rows = results(bundle)
    flipped = 0
    for r in rows:
        if r["suite"] == "fresh" and r["status"] == "failed":
            ev = bundle / "attempts" / str(r["attempt_id"])
            (ev / "out" / "answer.txt").write_text("ok\n")
            r["evidence_digest"], r["evidence_bytes"] = evidence_digest(ev)
            r.update(status="passed", passed=True, reward=1.0)
            flipped += 1
    assert flipped
    write_lines(bundle / "results.jsonl", rows)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["counts"]["passed"] += flipped
    manifest["counts"]["failed"] -= flipped
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    redigest_run(bundle)


def test_a_consistent_forgery_of_a_run_is_never_registered_and_never_compared(mine: Copy) -> None:
    champ = mine.bundle("champion")
    run_id = json.loads((champ / "manifest.json").read_text())["run_id"]
    forge_consistently(champ)
    assert mine.sh("verify", champ).code == 0  # consistent: re-deriving cannot tell
    reg = mine.sh("verify", champ, "--register")
    assert reg.code == 4, reg
    assert f"already holds run {run_id}" in reg.stderr, reg
    out = mine.root / "cmp-forged"
    r = mine.sh("compare", champ, mine.bundle("candidate"), "--out", out)
    assert r.code == 4 and "not registered" in r.stderr, r
    ids = [json.loads(x)["run_id"] for x in (mine.home / "runs.jsonl").read_text().splitlines()]
    assert ids.count(run_id) == 1
    # brought to another home, the forgery is refused there too: its manifest's signature no
    # longer verifies, even under a key that home trusts for register
    other = Copy(mine.root.parent / "other-home", mine.root)
    pub = (mine.home / "key.pub").read_text().split()[0]
    other.home.mkdir(exist_ok=True)
    (other.home / "trusted_keys").write_text(f"{pub} register\n")
    reg = other.sh("verify", champ, "--register")
    assert reg.code == 4 and "not signed by a key this home trusts for register" in reg.stderr, reg
    assert not (other.home / "runs.jsonl").exists() or not (other.home / "runs.jsonl").read_text()


def test_register_needs_a_key_trusted_for_register_and_never_takes_the_homes_own(mine: Copy, tmp_path: Path) -> None:
    other = Copy(tmp_path / "other-home", mine.root)
    pub = (mine.home / "key.pub").read_text().split()[0]
    r = other.sh("verify", mine.bundle("champion"), "--register")
    assert r.code == 4 and "not signed by a key this home trusts for register" in r.stderr, r
    other.home.mkdir(exist_ok=True)
    (other.home / "trusted_keys").write_text(f"{pub} release-log only its release log\n")
    assert other.sh("verify", mine.bundle("champion"), "--register").code == 4
    # the same bundle again in the home that ran it: nothing written
    before = (mine.home / "runs.jsonl").read_bytes()
    again = mine.sh("verify", mine.bundle("champion"), "--register", "--json")
    assert again.code == 0 and isinstance(again.json, dict) and again.json["newly_registered"] is False, again
    assert (mine.home / "runs.jsonl").read_bytes() == before


def test_a_relabelled_copy_of_a_registered_run_is_refused(mine: Copy) -> None:
    """The candidate's bundle copied and its manifest relabelled (another checkpoint name, the
    files untouched, so its bundle digest is still the registered one)."""
    copy = mine.root / "relabelled"
    shutil.copytree(mine.bundle("candidate"), copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["checkpoint"]["name"] = "champ"
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    r = mine.sh("compare", mine.bundle("champion"), copy, "--out", mine.root / "cmp-relabelled")
    assert r.code == 4 and "signature does not verify" in r.stderr, r
    v = mine.sh("verify", copy)
    assert v.code == 4 and "signature does not verify" in v.stderr, v
    # re-signed by a key of its own, it is still not the manifest the home registered
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from evalrig.store.signing import HomeKey

    k = Ed25519PrivateKey.generate()
    signed = HomeKey(k, k.public_key().public_bytes_raw()).sign(manifest)
    (copy / "manifest.json").write_text(json.dumps(signed, indent=2, sort_keys=True))
    r = mine.sh("compare", mine.bundle("champion"), copy, "--out", mine.root / "cmp-relabelled")
    assert r.code == 4 and "not a key this home believes" in r.stderr, r


def test_a_release_flow_that_pins_the_home_key_refuses_a_replaced_one(mine: Copy) -> None:
    """check-release and ship with the fingerprint the release flow pinned (`--home-key` or
    EVALRIG_HOME_KEY): the home's key replaced (a new key pair made after the old was moved
    aside), both refuse; nothing ships. With the right pin, the ship embeds what it relied on."""
    assert mine.sh("sign", mine.decision, "--approve", "--by", "alice").code == 0
    shown = mine.sh("key", "--json").json
    assert isinstance(shown, dict)
    pinned = str(shown["fingerprint"])
    ok = mine.sh("check-release", mine.decision, "--checkpoint", mine.root / "candidate", "--home-key", pinned)
    assert ok.code == 0, ok
    (mine.home / "key").rename(mine.home / "key.old")
    (mine.home / "key.pub").unlink()
    replaced = mine.sh("key", "--json").json
    assert isinstance(replaced, dict) and replaced["fingerprint"] != pinned
    r = mine.sh("check-release", mine.decision, "--checkpoint", mine.root / "candidate", "--home-key", pinned)
    assert r.code == 4 and f"not the pinned {pinned}" in r.stderr, r
    r = eval_sh(mine.home, "ship", mine.decision, "--checkpoint", mine.root / "candidate",
                env={"EVALRIG_HOME_KEY": pinned})
    assert r.code == 4 and f"not the pinned {pinned}" in r.stderr, r
    assert not (mine.home / "releases.jsonl").exists()
    (mine.home / "key.old").replace(mine.home / "key")
    shipped = eval_sh(mine.home, "ship", mine.decision, "--checkpoint", mine.root / "candidate",
                      env={"EVALRIG_HOME_KEY": pinned})
    assert shipped.code == 0, shipped
    event = json.loads((mine.home / "releases.jsonl").read_text().splitlines()[0])
    gate = event["relied_on"]["gate"]
    assert gate["decision_digest"] == event["decision"]["digest"] and gate["key"] == pinned
    assert event["relied_on"]["signoff"]["action"] == "approve"
    assert mine.sh("history", "--verify-only").code == 0


def test_legacy_unsigned_gate_and_signoff_lines_are_never_believed(mine: Copy, tmp_path: Path) -> None:
    """A home whose gates.jsonl and signoffs.jsonl were written by hand before it signed anything
    (legacy lines: no prev, no sig), holding the real decision's gate and an approval: shown,
    never believed for a release."""
    home = tmp_path / "fresh-home"
    assert eval_sh(home, "seal", mine.root / "candidate").code == 0
    strip = ("prev", "key", "sig", "heads")
    gate = {k: v for k, v in json.loads((mine.home / "gates.jsonl").read_text().splitlines()[-1]).items()
            if k not in strip}
    write_lines(home / "gates.jsonl", [gate])
    decision = json.loads(mine.decision.read_text())
    write_lines(home / "signoffs.jsonl", [{
        "schema_version": "1.0", "decision_digest": gate["decision_digest"], "decision_file": mine.decision.name,
        "candidate_checkpoint_id": decision["candidate"]["checkpoint_id"], "by": "mallory", "action": "approve",
        "verdict": "promote", "agrees_with_gate": True, "reason": None, "open_s": 1.0,
        "at": "2026-12-01T10:00:00.000000Z"}])
    r = eval_sh(home, "check-release", mine.decision, "--checkpoint", mine.root / "candidate")
    assert r.code == 1 and "no gate issued this decision" in r.stderr, r
    assert eval_sh(home, "ship", mine.decision, "--checkpoint", mine.root / "candidate").code == 1


def test_a_run_relabelled_between_compare_and_gate_is_refused_by_the_gate(mine: Copy) -> None:
    """compare reads both runs as registered; then the candidate's manifest is relabelled in place
    (its files untouched, its bundle digest the same): gate refuses it, issuing nothing."""
    out = mine.root / "cmp-then-relabel"
    assert mine.sh("compare", mine.bundle("champion"), mine.bundle("candidate"), "--out", out).code == 0
    path = mine.bundle("candidate") / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["checkpoint"]["name"] = "champ"
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    r = mine.sh("gate", out, "--policy", mine.root / "policies" / "redteam.toml")
    assert r.code == 4 and "signature does not verify" in r.stderr and str(path) in r.stderr, r
    assert not (out / "decisions").exists()
