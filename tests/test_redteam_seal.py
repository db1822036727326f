"""Red team, issue #20 finding 11: the checkpoint id ignored folders and mode bits.

A copy of the approved candidate with an extra empty folder, or with `agent.py` at mode
0200 (an agent that cannot read its own file behaves differently), kept the id, so
`check-release` approved it and `run` took it as the sealed build. Hash version 2 hashes
every folder and every entry's permission bits (docs/checkpoint.md, "Sealing and what it
covers"); seals of version 1 still verify, and sealing their content again keeps the id a
serving champion goes by. The attempt's copy of a checkpoint holds exactly what the hash
covers. Every step goes through `eval.sh`, as a release script drives it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from redteam import (
    Train,
    add_task,
    bwrap_works,
    eval_sh,
    make_checkpoint,
    make_taskset,
    results,
    run_train,
    write_policy,
)

WRONG_AGENT = """\
import os
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("no\\n")
"""


def _sandbox() -> str:
    return "bwrap" if bwrap_works() else "process"


@pytest.fixture(scope="module")
def approved(tmp_path_factory: pytest.TempPathFactory) -> Train:
    """A train whose candidate was promoted, signed by a person and passes check-release."""
    base = tmp_path_factory.mktemp("approved")
    home, root = base / "home", base / "t"
    root.mkdir()
    champion = make_checkpoint(root / "champion", WRONG_AGENT, name="champ")
    candidate = make_checkpoint(root / "candidate", name="cand")
    t = run_train(home, root, champion, candidate, sandbox=_sandbox())
    assert t.steps["gate"].code == 0 and t.steps["gate"].json["verdict"] == "promote", t.steps["gate"]  # type: ignore[index]
    signed = eval_sh(home, "sign", t.decision, "--approve", "--by", "alice")
    assert signed.code == 0, signed
    ok = eval_sh(home, "check-release", t.decision, "--checkpoint", candidate)
    assert ok.code == 0, ok
    return t


def _extra_empty_folder(d: Path) -> None:
    (d / "cache").mkdir()


def _agent_write_only(d: Path) -> None:
    (d / "agent.py").chmod(0o200)


@pytest.mark.parametrize("change", [_extra_empty_folder, _agent_write_only], ids=["empty-folder", "mode-0200"])
def test_a_copy_of_the_approved_candidate_with_other_folders_or_modes_is_not_it(
        approved: Train, tmp_path: Path, change: Callable[[Path], None]) -> None:
    copy = tmp_path / "candidate"
    shutil.copytree(approved.candidate, copy, symlinks=True)
    change(copy)
    want = json.loads(approved.decision.read_text())["candidate"]["checkpoint_id"]

    r = eval_sh(approved.home, "check-release", approved.decision, "--checkpoint", copy, "--json")
    assert r.code == 1, r
    out = r.json
    assert isinstance(out, dict) and not out["approved"]
    assert out["checkpoint_id"] != want and f"the decision names {want}" in out["reason"], out

    run = eval_sh(approved.home, "run", "--checkpoint", copy, "--tasks", approved.tasks, "--out",
                  tmp_path / "out", "--task", "fx0", "--repeat", "1", "--sandbox", "process")
    assert run.code == 4, run
    assert f"changed since it was sealed as {want}" in run.stderr, run  # its SEAL.json names the sealed id
    assert not (tmp_path / "out" / "results.jsonl").exists()

    # the approved candidate itself still is the sealed candidate
    ok = eval_sh(approved.home, "check-release", approved.decision, "--checkpoint", approved.candidate)
    assert ok.code == 0, ok


# -- version-1 seals ------------------------------------------------------------------------


def write_v1_seal(home: Path, checkpoint: Path, name: str) -> str:
    """Register `checkpoint` as a rig before hash version 2 did: a chained line
    `{checkpoint_id, name, sealed_at}` (no `hash_version`) holding the version-1 id, and
    a SEAL.json of the same keys. Returns that id."""
    from evalrig.core.digest import canonical_json
    from evalrig.models.run import SealEntry
    from evalrig.store.jsonl import chained_append

    v1, files, size = v1_hash(checkpoint)
    home.mkdir(parents=True, exist_ok=True)
    with chained_append(home / "seals.jsonl", SealEntry) as seals:
        seals.append(SealEntry(checkpoint_id=v1, name=name, sealed_at=V1_SEALED_AT))  # type: ignore[arg-type]
    assert b"hash_version" not in seals.appended[-1]
    (checkpoint / "SEAL.json").write_bytes(canonical_json({
        "schema_version": "1.0", "checkpoint_id": v1, "name": name, "sealed_at": V1_SEALED_AT,
        "files": files, "bytes": size}) + b"\n")
    return v1


V1_SEALED_AT = "2026-11-01T09:00:00.000000Z"


def v1_hash(root: Path) -> tuple[str, int, int]:
    """Hash version 1 as the older rig computed it, written out here: files and links only,
    type `f`, `x` (owner-executable) or `l`, path, NUL, length, NUL, content."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            if rel != "SEAL.json":
                entries.append(rel.encode())
    h, size = hashlib.sha256(), 0
    for rel in sorted(entries):
        full = root / rel.decode()
        if full.is_symlink():
            kind, content = b"l", os.readlink(full).encode()
        else:
            kind, content = (b"x" if full.stat().st_mode & 0o100 else b"f"), full.read_bytes()
        h.update(kind + rel + b"\0" + str(len(content)).encode() + b"\0" + content)
        size += len(content)
    return "sha256:" + h.hexdigest(), len(entries), size


def test_a_v1_sealed_champion_keeps_serving_and_resealing_records_its_v2_id(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "t"
    root.mkdir()
    champion = make_checkpoint(root / "champion", WRONG_AGENT, name="champ")
    candidate = make_checkpoint(root / "candidate", name="cand")
    (candidate / "empty").mkdir()  # a folder version 1 does not see
    champ_v1 = write_v1_seal(home, champion, "champ")
    cand_v1 = write_v1_seal(home, candidate, "cand")
    tasks = make_taskset(root / "tasks")
    policy = write_policy(root / "policies")
    sandbox = _sandbox()

    # runs take version-1 seals, and name the checkpoint by its version-1 id
    for side, ck in (("champion", champion), ("candidate", candidate)):
        r = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", root / "runs" / side, "--policy", policy,
                    "--repeat", "2", "--sandbox", sandbox, "--jobs", "2")
        assert r.code == 0, r
    manifest = json.loads((root / "runs" / "candidate" / "manifest.json").read_text())
    assert manifest["checkpoint"] == {"id": cand_v1, "name": "cand", "sealed_at": V1_SEALED_AT, "hash_version": 1}
    assert eval_sh(home, "compare", root / "runs" / "champion", root / "runs" / "candidate", "--out", root / "cmp").code == 0
    gate = eval_sh(home, "gate", root / "cmp", "--policy", policy, "--json")
    assert gate.code == 0 and gate.json["verdict"] == "promote", gate  # type: ignore[index]
    decision = root / "cmp" / "decisions" / "redteam-v1.json"
    assert eval_sh(home, "sign", decision, "--approve", "--by", "alice").code == 0
    ok = eval_sh(home, "check-release", decision, "--checkpoint", candidate)
    assert ok.code == 0 and f"sealed candidate {cand_v1}" in ok.stdout, ok
    shipped = eval_sh(home, "ship", decision, "--checkpoint", candidate)
    assert shipped.code == 0, shipped

    v = eval_sh(home, "validate", "--checkpoint", candidate)
    assert v.code == 0 and f"sealed as {cand_v1} under hash version 1" in v.stderr + v.stdout, v

    # sealing the content again records its version-2 id, same as the version-1 id, sealed then
    registry = home / "seals.jsonl"
    before = registry.read_bytes().splitlines()
    s = eval_sh(home, "seal", candidate, "--json")
    assert s.code == 0, s
    lines = registry.read_bytes().splitlines()
    assert lines[:-1] == before and len(lines) == len(before) + 1
    added = json.loads(lines[-1])
    assert added["hash_version"] == 2 and added["same_as"] == cand_v1, added
    assert added["sealed_at"] == V1_SEALED_AT and added["name"] == "cand"
    assert added["checkpoint_id"] != cand_v1
    seal_json = json.loads((candidate / "SEAL.json").read_text())
    assert s.json == seal_json  # type: ignore[comparison-overlap]
    assert (seal_json["checkpoint_id"], seal_json["hash_version"], seal_json["same_as"]) == (
        added["checkpoint_id"], 2, cand_v1)
    again = eval_sh(home, "seal", candidate)
    assert again.code == 0 and registry.read_bytes().splitlines() == lines, again  # the first sealing counts
    assert f"same as    {cand_v1}" in again.stdout, again
    v = eval_sh(home, "validate", "--checkpoint", candidate)
    assert v.code == 0 and "hash version 1" not in v.stderr + v.stdout, v

    # the serving champion keeps serving under the id its records name
    champ = eval_sh(home, "champion", "--json")
    assert champ.code == 0 and champ.json["checkpoint_id"] == cand_v1, champ  # type: ignore[index]
    assert eval_sh(home, "check-release", decision, "--checkpoint", candidate).code == 0
    assert eval_sh(home, "ship", decision, "--checkpoint", candidate).code == 0  # already shipped
    rerun = eval_sh(home, "run", "--checkpoint", candidate, "--tasks", tasks, "--out", root / "runs" / "again",
                    "--task", "fx0", "--repeat", "1", "--sandbox", sandbox)
    assert rerun.code == 0, rerun
    assert json.loads((root / "runs" / "again" / "manifest.json").read_text())["checkpoint"]["id"] == cand_v1

    # once sealed under version 2, only its version-2 content is that checkpoint: the copy
    # without the empty folder has the same version-1 id, and is not it any more
    copy = tmp_path / "copy"
    shutil.copytree(candidate, copy, symlinks=True)
    (copy / "empty").rmdir()
    r = eval_sh(home, "check-release", decision, "--checkpoint", copy)
    assert r.code == 1, r
    run = eval_sh(home, "run", "--checkpoint", copy, "--tasks", tasks, "--out", root / "runs" / "copy",
                  "--task", "fx0", "--repeat", "1", "--sandbox", "process")
    assert run.code == 4 and f"changed since it was sealed as {added['checkpoint_id']}" in run.stderr, run

    # the champion sealed only under version 1 still verifies as it
    champ_run = eval_sh(home, "run", "--checkpoint", champion, "--tasks", tasks, "--out", root / "runs" / "champ2",
                        "--task", "fx0", "--repeat", "1", "--sandbox", "process")
    assert champ_run.code == 0, champ_run
    assert json.loads((root / "runs" / "champ2" / "manifest.json").read_text())["checkpoint"]["id"] == champ_v1


# -- one id, two framings ---------------------------------------------------------------------

COLLIDING_MAIN = b"""import os
# the honest agent that was evaluated and approved
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("ok\\n")
"""
COLLIDING_EVIL = b"""import os
print("T2 RUNNING: never evaluated", flush=True)
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("ok\\n")
"""


def colliding_pair(out: Path) -> tuple[Path, Path]:
    """Two trees whose streams collide across hash versions (red team a, finding 1): the
    version-1 stream of T1 (honest, runs main.py) is byte for byte the version-2 stream of
    T2 (another program, runs agent.py). A v1 length written with the digits 0-7 (e.g. 1644)
    reads as a v2 mode, and the rest of T2's v2 stream sits inside T1's inert agent.py."""
    toml1 = b'name = "honest"\n[agent]\ncommand = ["python3", "main.py"]\n'
    toml2 = b'name = "honest"\n[agent]\ncommand = ["python3", "agent.py"]\n'

    def v1_entry(path: bytes, content: bytes) -> bytes:
        return b"f" + path + b"\0" + str(len(content)).encode() + b"\0" + content

    z = v1_entry(b"checkpoint.toml", toml1) + v1_entry(b"main.py", COLLIDING_MAIN)
    tail = (b"fcheckpoint.toml\0" + b"0644\0" + str(len(toml2)).encode() + b"\0" + toml2
            + b"fzz\0" + b"0644\0" + str(len(z)).encode() + b"\0")
    for pad in range(4000):  # pad T2's agent.py until T1's agent.py length reads as a v2 mode
        evil = COLLIDING_EVIL + b"#" + b"." * pad + b"\n"
        c1 = str(len(evil)).encode() + b"\0" + evil + tail
        digits = str(len(c1))
        if (len(digits) == 4 and digits[0] != "0" and set(digits) <= set("01234567")
                and int(digits, 8) & 0o444 == 0o444):
            break
    else:
        raise AssertionError("no padding found")
    t1, t2 = out / "T1", out / "T2"
    t1.mkdir(parents=True)
    t2.mkdir(parents=True)
    for d, files in ((t1, {"agent.py": c1, "checkpoint.toml": toml1, "main.py": COLLIDING_MAIN}),
                     (t2, {"agent.py": evil, "checkpoint.toml": toml2, "zz": z})):
        for name, data in files.items():
            (d / name).write_bytes(data)
            (d / name).chmod(0o644)
    (t2 / "agent.py").chmod(int(digits, 8))
    return t1, t2


def test_an_id_of_one_hash_version_never_names_content_hashed_in_the_other(tmp_path: Path) -> None:
    """Red team a, finding 1: T1 sealed under hash version 1 was gated, signed and shipped;
    T2, another program whose version-2 hash is T1's version-1 id, passed check-release, ship
    and run as T1 (before and after T1 was sealed again under version 2). A hash now matches
    only registry lines of its own version, and `seal` refuses an id registered under the
    other version."""
    home, root = tmp_path / "home", tmp_path / "t"
    root.mkdir()
    champion = make_checkpoint(root / "champion", WRONG_AGENT, name="champ")
    t1, t2 = colliding_pair(root / "col")
    write_v1_seal(home, champion, "champ")
    t1_v1 = write_v1_seal(home, t1, "honest")
    (t2 / "SEAL.json").write_bytes((t1 / "SEAL.json").read_bytes())  # T2 claims to be T1
    tasks = make_taskset(root / "tasks")
    policy = write_policy(root / "policies")
    sandbox = _sandbox()
    for side, ck in (("champion", champion), ("candidate", t1)):
        r = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", root / "runs" / side, "--policy", policy,
                    "--repeat", "2", "--sandbox", sandbox, "--jobs", "2")
        assert r.code == 0, r
    assert eval_sh(home, "compare", root / "runs" / "champion", root / "runs" / "candidate", "--out", root / "cmp").code == 0
    gate = eval_sh(home, "gate", root / "cmp", "--policy", policy, "--json")
    assert gate.code == 0 and gate.json["verdict"] == "promote", gate  # type: ignore[index]
    decision = root / "cmp" / "decisions" / "redteam-v1.json"
    assert eval_sh(home, "sign", decision, "--approve", "--by", "alice").code == 0
    assert eval_sh(home, "check-release", decision, "--checkpoint", t1).code == 0

    seal_t2 = eval_sh(home, "seal", t2, "--json")  # the version-2 hash of T2 is T1's version-1 id
    assert seal_t2.code == 4, seal_t2
    assert f"id {t1_v1} is registered already as a hash version 1 id" in seal_t2.stderr, seal_t2
    registry = home / "seals.jsonl"
    assert all(json.loads(line).get("hash_version") != 2 for line in registry.read_bytes().splitlines())

    for phase in ("sealed under version 1", "sealed again under version 2"):
        if phase == "sealed again under version 2":  # as docs/checkpoint.md advises, from the trusted copy
            s = eval_sh(home, "seal", t1, "--json")
            assert s.code == 0 and s.json["same_as"] == t1_v1, s  # type: ignore[index]
            assert eval_sh(home, "check-release", decision, "--checkpoint", t1).code == 0
        r = eval_sh(home, "check-release", decision, "--checkpoint", t2, "--json")
        assert r.code == 1, (phase, r)
        assert isinstance(r.json, dict) and not r.json["approved"], (phase, r)
        ship = eval_sh(home, "ship", decision, "--checkpoint", t2)
        assert ship.code != 0, (phase, ship)
        out = root / "runs" / f"t2-{len(phase)}"
        run = eval_sh(home, "run", "--checkpoint", t2, "--tasks", tasks, "--task", "fx0", "--out", out,
                      "--repeat", "1", "--sandbox", "process")
        assert run.code == 4, (phase, run)
        assert not (out / "results.jsonl").exists(), phase
        v = eval_sh(home, "validate", "--checkpoint", t2)
        assert f"sealed as {t1_v1}" not in v.stdout + v.stderr, (phase, v)
    champ = eval_sh(home, "champion", "--json")
    assert isinstance(champ.json, dict) and champ.json["serving"] is False, champ  # nothing was shipped


def test_a_bundle_brought_in_registers_its_id_under_the_hash_version_it_was_computed_in(tmp_path: Path) -> None:
    """The cross-home form of finding 1: a run of T1 (sealed under version 1) brought into
    another home by `verify --register` adds T1's id as a version-1 line (its manifest says
    so), so T2 does not run there as T1; a home where T2 holds that id under version 2
    refuses the bundle before registering anything of it."""
    root = tmp_path / "t"
    root.mkdir()
    t1, t2 = colliding_pair(root / "col")
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "fx0")
    ran = tmp_path / "home-ran"
    t1_v1 = write_v1_seal(ran, t1, "honest")
    r = eval_sh(ran, "run", "--checkpoint", t1, "--tasks", tasks, "--out", root / "run-t1", "--repeat", "1",
                "--sandbox", "process")
    assert r.code == 0, r
    manifest = json.loads((root / "run-t1" / "manifest.json").read_text())
    assert manifest["checkpoint"]["id"] == t1_v1 and manifest["checkpoint"]["hash_version"] == 1, manifest
    pub = (ran / "key.pub").read_text().split()[0]

    fresh, holding = tmp_path / "home-fresh", tmp_path / "home-t2"
    for home in (fresh, holding):
        home.mkdir()
        (home / "trusted_keys").write_text(f"{pub} register the home that ran it\n")
    for c in (t1, t2):  # the same checkpoints, other homes: no SEAL.json claims
        (c / "SEAL.json").unlink(missing_ok=True)

    reg = eval_sh(fresh, "verify", root / "run-t1", "--register", "--json")
    assert reg.code == 0 and isinstance(reg.json, dict) and reg.json["newly_registered"] is True, reg
    [line] = [json.loads(x) for x in (fresh / "seals.jsonl").read_bytes().splitlines()]
    assert (line["checkpoint_id"], line["hash_version"]) == (t1_v1, 1), line
    run = eval_sh(fresh, "run", "--checkpoint", t2, "--tasks", tasks, "--out", root / "run-t2", "--repeat", "1",
                  "--sandbox", "process")
    assert run.code == 4 and "not sealed" in run.stderr, run
    assert not (root / "run-t2" / "results.jsonl").exists()
    assert eval_sh(fresh, "run", "--checkpoint", t1, "--tasks", tasks, "--out", root / "run-t1-again",
                   "--repeat", "1", "--sandbox", "process").code == 0  # T1 itself still is it there

    assert eval_sh(holding, "seal", t2).code == 0  # T2's version-2 id is the version-1 id of T1
    before = {n: (holding / n).read_bytes() for n in ("seals.jsonl",)}
    reg = eval_sh(holding, "verify", root / "run-t1", "--register")
    assert reg.code == 4 and f"id {t1_v1} is registered already as a hash version 2 id" in reg.stderr, reg
    assert not (holding / "runs.jsonl").exists() or not (holding / "runs.jsonl").read_bytes().strip()
    assert {n: (holding / n).read_bytes() for n in before} == before


# -- the attempt's copy -----------------------------------------------------------------------

OBSERVER = """\
import json, os
paths = ["agent.py", "checkpoint.toml", "data", "data/a.txt", "data/b.txt", "ro", "ro/f.txt", "open.txt"]
seen = {
    "seal_json": os.path.lexists("SEAL.json"),
    "entries": sorted(os.path.join(d, n) for d, ds, fs in os.walk(".") for n in ds + fs),
    "modes": {p: oct(os.lstat(p).st_mode & 0o7777) for p in paths},
    "xattrs": {p: os.listxattr(p, follow_symlinks=False) for p in paths},
    "linked": os.stat("data/a.txt").st_ino == os.stat("data/b.txt").st_ino,
    "nlink": os.stat("data/a.txt").st_nlink,
}
out = os.environ["EVALRIG_OUT"]
open(os.path.join(out, "seen.json"), "w").write(json.dumps(seen))
open(os.path.join(out, "answer.txt"), "w").write("ok\\n")
"""


@pytest.mark.parametrize("sandbox", ["bwrap", "process"])
def test_the_attempts_copy_holds_exactly_what_the_seal_hashes(tmp_path: Path, sandbox: str) -> None:
    if sandbox == "bwrap" and not bwrap_works():
        pytest.skip("bubblewrap cannot run here")
    home = tmp_path / "home"
    ck = make_checkpoint(tmp_path / "ck", OBSERVER, name="observer",
                         files={"data/a.txt": "shared\n", "ro/f.txt": "f\n", "open.txt": "o\n"})
    os.link(ck / "data" / "a.txt", ck / "data" / "b.txt")  # one file under two names
    (ck / "open.txt").chmod(0o666)  # a umask would cut it
    (ck / "data" / "a.txt").chmod(0o640)
    (ck / "ro" / "f.txt").chmod(0o444)
    (ck / "ro").chmod(0o555)  # a folder its owner may not write
    try:
        os.setxattr(ck / "open.txt", "user.evalrig", b"planted")
    except OSError:
        pass  # a filesystem without user xattrs: nothing to leave out
    s = eval_sh(home, "seal", ck)
    assert s.code == 0, s
    assert (ck / "SEAL.json").is_file()
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "fx0")
    r = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "out", "--repeat", "1",
                "--sandbox", sandbox)
    assert r.code == 0, r
    [res] = results(tmp_path / "out")
    assert res["status"] == "passed", res
    seen = json.loads((tmp_path / "out" / "attempts" / str(res["attempt_id"]) / "out" / "seen.json").read_text())
    assert seen["seal_json"] is False
    hashed = sorted(os.path.join(".", str(p.relative_to(ck))) for p in ck.rglob("*") if p.name != "SEAL.json")
    assert seen["entries"] == hashed
    assert seen["modes"] == {p: oct(os.lstat(ck / p).st_mode & 0o7777) for p in seen["modes"]}
    assert seen["modes"]["ro"] == "0o555" and seen["modes"]["open.txt"] == "0o666"
    assert seen["xattrs"] == {p: [] for p in seen["xattrs"]}
    assert seen["linked"] is False and seen["nlink"] == 1


ROOT_MODE_PROBE = """\
import json, os, stat
mode = stat.S_IMODE(os.stat(os.path.dirname(os.path.abspath(__file__))).st_mode)
out = os.environ["EVALRIG_OUT"]
open(os.path.join(out, "seen.json"), "w").write(json.dumps({"root_mode": oct(mode)}))
# a trigger the id does not cover: the sticky bit on the checkpoint's root
open(os.path.join(out, "answer.txt"), "w").write(("TRIGGERED" if mode & 0o1000 else "ok") + "\\n")
"""


@pytest.mark.parametrize("sandbox", ["bwrap", "process"])
def test_the_checkpoint_roots_own_mode_never_reaches_the_agent(tmp_path: Path, sandbox: str) -> None:
    """Red team a, finding 2: the root is not an entry of the id, yet its mode was copied into
    `agent/`: a copy at 1755 kept the id and the agent behaved differently. The copy's root
    is 0755 whatever the checkpoint's is."""
    if sandbox == "bwrap" and not bwrap_works():
        pytest.skip("bubblewrap cannot run here")
    home = tmp_path / "home"
    ck = make_checkpoint(tmp_path / "ck", ROOT_MODE_PROBE, name="rootmode")
    assert eval_sh(home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "fx0")
    seen = {}
    for label, mode in (("sticky", 0o1755), ("private", 0o700), ("open", 0o777)):
        copy = tmp_path / label
        shutil.copytree(ck, copy, symlinks=True)
        copy.chmod(mode)
        v = eval_sh(home, "validate", "--checkpoint", copy)
        assert v.code == 0 and "not sealed" not in v.stdout + v.stderr, v  # one id: the root is not an entry
        r = eval_sh(home, "run", "--checkpoint", copy, "--tasks", tasks, "--out", tmp_path / f"out-{label}",
                    "--repeat", "1", "--sandbox", sandbox)
        assert r.code == 0, r
        [res] = results(tmp_path / f"out-{label}")
        assert res["status"] == "passed", (label, res)
        seen[label] = json.loads((tmp_path / f"out-{label}" / "attempts" / str(res["attempt_id"]) / "out"
                                  / "seen.json").read_text())["root_mode"]
    assert seen == {"sticky": "0o755", "private": "0o755", "open": "0o755"}, seen


# -- SEAL.json is only a convenience copy -------------------------------------------------------


def _fifo(path: Path, sealed: dict[str, object]) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path, sealed: dict[str, object]) -> None:
    path.symlink_to("/dev/zero")


def _huge(path: Path, sealed: dict[str, object]) -> None:
    # the SEAL.json seal wrote, padded to 2 MiB: over the cap, so not read
    path.write_text(json.dumps({**sealed, "pad": " " * (2 << 20)}))


@pytest.mark.parametrize("plant", [_fifo, _dev_zero, _huge], ids=["fifo", "dev-zero", "huge"])
def test_a_seal_json_that_is_no_regular_small_file_is_no_seal_json(
        tmp_path: Path, plant: Callable[[Path, dict[str, object]], None]) -> None:
    """Red team a, finding 3: the hash leaves SEAL.json out, so a sealed checkpoint may replace
    it after sealing; a FIFO there hung `run`, a link to /dev/zero made `validate` run out of
    memory. SEAL.json is read only as a regular file of at most 1 MiB (O_NOFOLLOW|O_NONBLOCK);
    anything else reads as no SEAL.json, and the registry answers as always."""
    home = tmp_path / "home"
    ck = make_checkpoint(tmp_path / "ck", name="plain")
    assert eval_sh(home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "fx0")
    sealed = json.loads((ck / "SEAL.json").read_text())
    (ck / "SEAL.json").unlink()
    plant(ck / "SEAL.json", sealed)

    r = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "out", "--repeat", "1",
                "--sandbox", "process", timeout=60)
    assert r.code == 0, r  # the content still matches its registered seal
    [res] = results(tmp_path / "out")
    assert res["status"] == "passed", res
    v = eval_sh(home, "validate", "--checkpoint", ck, timeout=60)
    assert v.code == 0 and "not sealed" not in v.stdout + v.stderr, v

    # changed content: "not sealed", never "changed since it was sealed as" what SEAL.json might say
    (ck / "agent.py").write_text(WRONG_AGENT)
    v = eval_sh(home, "validate", "--checkpoint", ck, timeout=60)
    assert "not sealed" in v.stdout + v.stderr and "changed since" not in v.stdout + v.stderr, v
    r = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "out2", "--repeat", "1",
                "--sandbox", "process", timeout=60)
    assert r.code == 4 and "not sealed" in r.stderr, r
