"""checkpoint.toml, the content hash, sealing and the seal registry (docs/checkpoint.md)."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from evalrig.core.errors import EvalrigError, ExitCode
from evalrig.store.checkpoint import (
    check_sealed,
    checkpoint_id,
    evalrig_home,
    load_checkpoint,
    registered_seal,
    seal,
)
from evalrig.store.tree import hash_tree

T0 = datetime(2026, 12, 2, 10, 15, 3, 123456, tzinfo=UTC)
T1 = datetime(2026, 12, 3, 9, 0, 0, tzinfo=UTC)

CHECKPOINT_TOML = """\
name = "exo"
[agent]
command = ["python3", "agent.py"]
env = { MODEL = "m-2026-11" }
"""


def make_checkpoint(root: Path, toml: str = CHECKPOINT_TOML) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "checkpoint.toml").write_text(toml)
    (root / "agent.py").write_text("print('hi')\n")
    (root / "state").mkdir(exist_ok=True)
    (root / "state" / "notes.txt").write_text("remember\n")
    return root


def test_evalrig_home_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALRIG_HOME", str(tmp_path / "h"))
    assert evalrig_home() == tmp_path / "h"


def test_evalrig_home_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALRIG_HOME")
    assert evalrig_home() == Path.home() / ".local" / "state" / "evalrig"


def test_load_checkpoint(tmp_path: Path) -> None:
    c = load_checkpoint(make_checkpoint(tmp_path / "c"))
    assert c.spec.name == "exo"
    assert c.spec.agent.command == ["python3", "agent.py"]
    assert c.spec.agent.env == {"MODEL": "m-2026-11"}
    assert c.spec.history.log is None


def test_load_checkpoint_errors_name_file_line_field(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path / "c", 'name = "exo"\n[agent]\ncommand = []\nnetwork = 3\n')
    with pytest.raises(EvalrigError) as ei:
        load_checkpoint(d)
    e = ei.value
    assert e.code == ExitCode.INVALID
    rendered = [e.render().splitlines()[0], *(p.render() for p in e.problems)]
    assert rendered == [
        f"{d}/checkpoint.toml:3: agent.command: must have at least 1 item after validation, not 0",
        f"{d}/checkpoint.toml:4: agent.network: must be a valid boolean (got 3)",
    ]


def test_load_checkpoint_broken_toml_names_line(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path / "c", 'name = "exo"\n[agent\ncommand = ["a"]\n')
    with pytest.raises(EvalrigError) as ei:
        load_checkpoint(d)
    assert ei.value.file == f"{d}/checkpoint.toml"
    assert ei.value.line == 2
    assert ei.value.message.startswith("not valid TOML: ")


def test_load_checkpoint_with_a_byte_order_mark_says_so(tmp_path: Path) -> None:
    # "invalid statement (column 1)" would send the user looking for an invisible error.
    d = make_checkpoint(tmp_path / "c", '\ufeffname = "exo"\n[agent]\ncommand = ["a"]\n')
    with pytest.raises(EvalrigError) as ei:
        load_checkpoint(d)
    assert (ei.value.line, ei.value.message) == (
        1, "starts with a byte-order mark; save the file as UTF-8 without BOM")


def test_a_checkpoint_toml_that_is_a_link_is_refused(tmp_path: Path) -> None:
    # The hash takes the link's target string: the command could change under the seal.
    (tmp_path / "outside.toml").write_text(CHECKPOINT_TOML)
    d = make_checkpoint(tmp_path / "c")
    (d / "checkpoint.toml").unlink()
    (d / "checkpoint.toml").symlink_to(tmp_path / "outside.toml")
    with pytest.raises(EvalrigError) as ei:
        load_checkpoint(d)
    assert ei.value.code == ExitCode.INVALID
    assert ei.value.message == "is a symbolic link; the seal would not cover what it points to"


def test_load_checkpoint_without_toml(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    with pytest.raises(EvalrigError) as ei:
        load_checkpoint(tmp_path / "c")
    assert ei.value.code == ExitCode.INVALID
    assert ei.value.render().startswith(f"{tmp_path}/c: no checkpoint.toml")


def test_load_checkpoint_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(EvalrigError) as ei:
        load_checkpoint(tmp_path / "nope")
    assert ei.value.message == "no such directory"


def _reference_hash(root: Path, exclude: set[str]) -> str:
    """The framing `seal` hashes with (docs/checkpoint.md), written out independently of evalrig.store.tree."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel in exclude:
                continue
            entries.append((rel.encode(), full))
    h = hashlib.sha256()
    for rel, full in sorted(entries):
        if os.path.islink(full):
            content = os.readlink(full).encode()
            h.update(b"l" + rel + b"\0" + str(len(content)).encode() + b"\0" + content)
        else:
            content = Path(full).read_bytes()
            kind = b"x" if os.stat(full).st_mode & 0o100 else b"f"
            h.update(kind + rel + b"\0" + str(len(content)).encode() + b"\0" + content)
    return "sha256:" + h.hexdigest()


def _reference_hash_v2(root: Path, exclude: set[str]) -> str:
    """Hash version 2 (docs/checkpoint.md), written out independently of evalrig.store.tree:
    folders are entries, and every entry's permission bits are hashed."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel not in exclude:
                entries.append((rel.encode(), full))
    h = hashlib.sha256()
    for rel, full in sorted(entries):
        st = os.lstat(full)
        if os.path.islink(full):
            kind, mode, content = b"l", "0777", os.readlink(full).encode()
        elif os.path.isdir(full):
            kind, mode, content = b"d", f"{st.st_mode & 0o7777:04o}", b""
        else:
            kind, mode, content = b"f", f"{st.st_mode & 0o7777:04o}", Path(full).read_bytes()
        h.update(kind + rel + b"\0" + mode.encode() + b"\0" + str(len(content)).encode() + b"\0" + content)
    return "sha256:" + h.hexdigest()


def test_checkpoint_id_matches_the_documented_framing(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    (d / "run.sh").write_text("#!/bin/sh\n")
    (d / "run.sh").chmod(0o755)
    os.symlink("state/notes.txt", d / "link")
    (d / "SEAL.json").write_text("{}")
    (d / "state" / "empty").mkdir()
    (d / "state" / "sub-dir").mkdir()  # '-' sorts before '/': state/sub-dir, then state/sub-dir/x
    (d / "state" / "sub-dir" / "x").write_text("x")
    (d / "state" / "sub-dir" / "x").chmod(0o4640)
    got = checkpoint_id(d)
    assert got.digest == _reference_hash_v2(d, {"SEAL.json"}) and got.version == 2
    assert got.files == 6
    # version 1, which seals registered before version 2 still verify by
    v1 = hash_tree(d, exclude=frozenset({"SEAL.json"}), exclude_dirs=False, version=1)
    assert v1.digest == _reference_hash(d, {"SEAL.json"})
    assert v1.files == 6


def test_checkpoint_id_changes_with_an_empty_folder_and_with_any_mode_bit(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    seen = {checkpoint_id(d).digest}
    (d / "empty").mkdir()
    seen.add(checkpoint_id(d).digest)
    (d / "agent.py").chmod(0o200)
    seen.add(checkpoint_id(d).digest)
    (d / "agent.py").chmod(0o204)
    seen.add(checkpoint_id(d).digest)
    (d / "state").chmod(0o700)
    seen.add(checkpoint_id(d).digest)
    assert len(seen) == 5


def test_checkpoint_id_changes_with_the_execute_bit(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    before = checkpoint_id(d).digest
    (d / "agent.py").chmod(0o755)
    assert checkpoint_id(d).digest != before


def test_symlink_is_hashed_as_its_target_string_not_followed(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    outside = tmp_path / "outside.txt"
    outside.write_text("one")
    os.symlink(str(outside), d / "link")
    first = checkpoint_id(d).digest
    outside.write_text("completely different content")
    assert checkpoint_id(d).digest == first  # the linked file's content does not matter
    os.remove(d / "link")
    os.symlink(str(tmp_path / "elsewhere.txt"), d / "link")
    assert checkpoint_id(d).digest != first  # the target string does


def test_fifo_is_refused(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    os.mkfifo(d / "state" / "pipe")
    with pytest.raises(EvalrigError) as ei:
        checkpoint_id(d)
    assert ei.value.code == ExitCode.INVALID
    assert "FIFO at state/pipe" in ei.value.message


def test_seal_registers_and_writes_seal_json(tmp_path: Path, evalrig_home: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    s = seal(d, evalrig_home, T0)
    assert s.checkpoint_id == checkpoint_id(d).digest
    assert (s.name, s.sealed_at, s.files) == ("exo", T0, 3)
    on_disk = json.loads((d / "SEAL.json").read_text())
    assert on_disk == {
        "schema_version": "1.0",
        "checkpoint_id": s.checkpoint_id,
        "name": "exo",
        "sealed_at": "2026-12-02T10:15:03.123456Z",
        "files": 3,
        "bytes": s.bytes,
        "hash_version": 2,
    }
    assert (d / "SEAL.json").read_bytes().endswith(b"}\n")
    entry = registered_seal(evalrig_home, s.checkpoint_id)
    assert entry is not None and entry.sealed_at == T0 and entry.hash_version == 2 and entry.same_as is None
    # SEAL.json is excluded: the id is unchanged by writing it.
    assert checkpoint_id(d).digest == s.checkpoint_id


def test_seal_with_a_file_for_evalrig_home_is_refused_not_a_crash(tmp_path: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    (tmp_path / "home").write_text("not a directory")
    with pytest.raises(EvalrigError) as ei:
        seal(d, tmp_path / "home", T0)
    assert ei.value.code == ExitCode.INVALID
    assert ei.value.render().startswith(f"{tmp_path / 'home'}: EVALRIG_HOME: the rig's state directory cannot be made")


def test_a_directory_named_seal_json_is_hashed_and_a_failed_write_leaves_no_temp_file(
        tmp_path: Path, evalrig_home: Path) -> None:
    # Only the file SEAL.json is left out of the id: a directory of that name would hide
    # content (code) from the seal.
    d = make_checkpoint(tmp_path / "c")
    (d / "SEAL.json").mkdir()
    (d / "SEAL.json" / "payload.py").write_text("print('unsealed')\n")
    before = checkpoint_id(d).digest
    (d / "SEAL.json" / "payload.py").write_text("print('changed')\n")
    assert checkpoint_id(d).digest != before
    with pytest.raises(EvalrigError, match="SEAL.json could not be written"):
        seal(d, evalrig_home, T0)
    # the failed write left nothing behind: the content, and so the id, is unchanged
    assert sorted(p.name for p in d.iterdir()) == ["SEAL.json", "agent.py", "checkpoint.toml", "state"]


def test_resealing_changes_nothing(tmp_path: Path, evalrig_home: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    first = seal(d, evalrig_home, T0)
    registry = (evalrig_home / "seals.jsonl").read_bytes()
    again = seal(d, evalrig_home, T1)
    assert again == first
    assert (evalrig_home / "seals.jsonl").read_bytes() == registry
    assert registry.count(b"\n") == 1


def test_two_checkpoints_two_lines(tmp_path: Path, evalrig_home: Path) -> None:
    a = seal(make_checkpoint(tmp_path / "a"), evalrig_home, T0)
    b_dir = make_checkpoint(tmp_path / "b", CHECKPOINT_TOML.replace("exo", "exo2"))
    b = seal(b_dir, evalrig_home, T1)
    assert a.checkpoint_id != b.checkpoint_id
    assert (evalrig_home / "seals.jsonl").read_bytes().count(b"\n") == 2
    assert registered_seal(evalrig_home, b.checkpoint_id).name == "exo2"  # type: ignore[union-attr]


def test_registered_seal_unknown(evalrig_home: Path) -> None:
    assert registered_seal(evalrig_home, "sha256:" + "0" * 64) is None


def test_check_sealed(tmp_path: Path, evalrig_home: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    s = seal(d, evalrig_home, T0)
    entry = check_sealed(d, evalrig_home)
    assert entry.checkpoint_id == s.checkpoint_id and entry.sealed_at == T0


def test_check_sealed_unsealed(tmp_path: Path, evalrig_home: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    with pytest.raises(EvalrigError) as ei:
        check_sealed(d, evalrig_home)
    assert ei.value.code == ExitCode.INVALID
    assert ei.value.file == str(d)
    assert ei.value.message.startswith("not sealed: ")
    assert f"run `evalrig seal {d}`" in (ei.value.hint or "")


def test_check_sealed_changed_after_sealing(tmp_path: Path, evalrig_home: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    s = seal(d, evalrig_home, T0)
    (d / "state" / "notes.txt").write_text("tampered\n")
    with pytest.raises(EvalrigError) as ei:
        check_sealed(d, evalrig_home)
    assert ei.value.message.startswith(f"changed since it was sealed as {s.checkpoint_id}")


def test_forged_seal_json_is_not_a_seal(tmp_path: Path, evalrig_home: Path) -> None:
    d = make_checkpoint(tmp_path / "c")
    forged = {"schema_version": "1.0", "checkpoint_id": checkpoint_id(d).digest, "name": "exo",
              "sealed_at": "2026-12-02T10:15:03.123456Z", "files": 3, "bytes": 1}
    (d / "SEAL.json").write_text(json.dumps(forged))
    with pytest.raises(EvalrigError) as ei:
        check_sealed(d, evalrig_home)
    assert ei.value.message.startswith("not sealed: ")


DESIGN_CHECKPOINT = '''\
name = "exo"
[agent]
command  = ["python3", "agent.py"]              # runs once per attempt, in the attempt's workspace
estimate = ["python3", "agent.py", "--estimate"] # optional; runs before the attempt
env      = { MODEL = "m-2026-11" }               # pinned settings, part of the checkpoint's identity
network  = false                                  # true: the agent needs the network (a model API); only the operator grants it
[history]
log = "state/events.jsonl"                        # optional; the agent's own append-only event log
'''


def test_design_checkpoint_example_loads_and_round_trips(tmp_path: Path) -> None:
    from evalrig.models.inputs import CheckpointFile

    design = Path("/work/shared/DESIGN.md")
    if design.exists():
        assert DESIGN_CHECKPOINT in design.read_text()
    c = load_checkpoint(make_checkpoint(tmp_path / "c", DESIGN_CHECKPOINT)).spec
    assert c.agent.estimate == ["python3", "agent.py", "--estimate"]
    assert (c.agent.env, c.agent.network, c.history.log) == ({"MODEL": "m-2026-11"}, False, "state/events.jsonl")
    assert CheckpointFile.model_validate(c.model_dump(mode="json")) == c
