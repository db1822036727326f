"""Checkpoints: `checkpoint.toml`, sealing, and the seal registry (DESIGN §4, §6 `seal`).

A checkpoint's id is the content hash of its directory (evalrig.tree, `SEAL.json` left
out). Sealing registers `{checkpoint_id, name, sealed_at}` in `$EVALRIG_HOME/seals.jsonl`;
the first line of an id is the one that counts, so sealing again changes nothing. The
registry is the authority: `SEAL.json` inside the checkpoint is a convenience copy that the
checkpoint itself could have written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from evalrig.errors import Problem, invalid
from evalrig.models.inputs import CheckpointFile
from evalrig.models.run import SealEntry, SealFile
from evalrig.tomlerr import raise_problems, read_toml, validate_doc
from evalrig.tree import TreeDigest, hash_tree

CHECKPOINT_TOML = "checkpoint.toml"
SEAL_JSON = "SEAL.json"
REGISTRY = "seals.jsonl"
_EXCLUDE = frozenset({SEAL_JSON})


def evalrig_home() -> Path:
    """`$EVALRIG_HOME`, else `~/.local/state/evalrig`. Only the CLI calls this."""
    env = os.environ.get("EVALRIG_HOME")
    return Path(env).expanduser() if env else Path.home() / ".local" / "state" / "evalrig"


@dataclass(frozen=True)
class Checkpoint:
    dir: Path
    spec: CheckpointFile


def _require_dir(dir: Path) -> None:
    if not dir.exists():
        raise invalid("no such directory", file=dir, hint="give the path of a checkpoint directory")
    if not dir.is_dir():
        raise invalid("not a directory", file=dir, hint="give the path of a checkpoint directory")


def load_checkpoint(dir: Path) -> Checkpoint:
    """Parse `dir/checkpoint.toml`; every problem names `file:line: field`."""
    dir = Path(dir)
    _require_dir(dir)
    path = dir / CHECKPOINT_TOML
    if not path.is_file():
        raise invalid(
            "no checkpoint.toml: this is not a checkpoint directory",
            file=dir,
            hint="a checkpoint has a checkpoint.toml saying how to start the agent "
            "(name, [agent] command); see DESIGN §4",
        )
    if path.is_symlink():
        # The content hash takes a link's target string, not what it points to: the
        # command and env would not be part of the sealed identity.
        raise invalid("is a symbolic link; the seal would not cover what it points to", file=path,
                      hint="replace the link with the file itself")
    doc = read_toml(path, "checkpoint.toml")
    if isinstance(doc, Problem):
        raise_problems([doc], hint="fix checkpoint.toml")
    spec = validate_doc(doc, CheckpointFile)
    if isinstance(spec, list):
        raise_problems(spec, hint="fix checkpoint.toml (evalrig schema checkpoint shows the format)")
    return Checkpoint(dir, spec)


def history_log(ckpt: Checkpoint) -> Path | None:
    """The declared `[history] log` as a path, or None; an error when it is not a regular
    file of the checkpoint (run would refuse it, so seal and validate say so first)."""
    log = ckpt.spec.history.log
    if log is None:
        return None
    src = Path(ckpt.dir) / log
    if not src.is_file() or src.is_symlink():
        raise invalid(f"{log} is not a file in the checkpoint",
                      file=Path(ckpt.dir) / "checkpoint.toml", field="history.log",
                      hint="create the log (an empty file is an empty log) and seal again, "
                      "or drop [history] log")
    return src


def checkpoint_id(dir: Path) -> TreeDigest:
    """The content hash of the directory, `SEAL.json` excluded (DESIGN §6)."""
    return hash_tree(Path(dir), exclude=_EXCLUDE, exclude_dirs=False)


def registry_path(home: Path) -> Path:
    return Path(home) / REGISTRY


def _read_registry(home: Path) -> list[SealEntry]:
    """The registry's records, its hash chain verified first (exit 4 naming a broken line)."""
    from evalrig.bundle import read_chained

    return read_chained(registry_path(home), SealEntry).records


def registered_seal(home: Path, checkpoint_id: str) -> SealEntry | None:
    """The first registry entry of `checkpoint_id` (the one that counts), if any."""
    for entry in _read_registry(home):
        if entry.checkpoint_id == checkpoint_id:
            return entry
    return None


def _make_home(home: Path) -> None:
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file in the way, or no permission: the user's to fix
        raise invalid(f"the rig's state directory cannot be made ({e.strerror})", file=home,
                      field="EVALRIG_HOME",
                      hint="point EVALRIG_HOME at a directory the rig may write "
                      "(default ~/.local/state/evalrig)") from None


def seal(dir: Path, home: Path, now: datetime) -> SealFile:
    """Hash the checkpoint, register it if it is new, and write `dir/SEAL.json`."""
    from evalrig.bundle import chained_append, write_json_atomic

    dir = Path(dir)
    ckpt = load_checkpoint(dir)
    history_log(ckpt)
    tree = checkpoint_id(dir)
    home = Path(home)
    _make_home(home)
    # Two seals at once must not both append the same id: look up and append under the
    # registry's lock (the chained store holds it from verification to the sync).
    with chained_append(registry_path(home), SealEntry) as registry:
        entry = next((e for e in registry.records if e.checkpoint_id == tree.digest), None)
        if entry is None:
            entry = registry.append(SealEntry(checkpoint_id=tree.digest, name=ckpt.spec.name, sealed_at=now))
    sealed = SealFile(
        checkpoint_id=entry.checkpoint_id,
        name=entry.name,
        sealed_at=entry.sealed_at,
        files=tree.files,
        bytes=tree.bytes,
    )
    try:
        write_json_atomic(dir / SEAL_JSON, sealed)
    except OSError as e:
        raise invalid(
            f"sealed as {entry.checkpoint_id}, but SEAL.json could not be written ({e.strerror})",
            file=dir / SEAL_JSON,
            hint="the registry holds the seal; SEAL.json is only a convenience copy",
        ) from None
    return sealed


def _claimed_id(dir: Path) -> str | None:
    """The checkpoint id SEAL.json claims, if it is readable (it is not the authority)."""
    from evalrig.digest import loads

    try:
        value = loads((dir / SEAL_JSON).read_bytes()).get("checkpoint_id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class SealStatus:
    """What the registry says about a directory's content now."""

    current: str
    """The content hash now."""
    entry: SealEntry | None
    """The registered seal of that content, if any."""
    claimed: str | None
    """The id SEAL.json claims, if readable (not the authority)."""
    changed: bool
    """SEAL.json names a registered seal that the content no longer matches."""


def seal_status(dir: Path, home: Path) -> SealStatus:
    dir = Path(dir)
    _require_dir(dir)
    current = checkpoint_id(dir).digest
    entry = registered_seal(home, current)
    claimed = _claimed_id(dir)
    changed = (entry is None and claimed is not None and claimed != current
               and registered_seal(home, claimed) is not None)
    return SealStatus(current, entry, claimed, changed)


def check_sealed(dir: Path, home: Path) -> SealEntry:
    """The registered seal the directory's content matches now; exit 4 when none does."""
    dir = Path(dir)
    status = seal_status(dir, home)
    if status.entry is not None:
        return status.entry
    if status.changed:
        raise invalid(
            f"changed since it was sealed as {status.claimed} (its content is now {status.current})",
            file=dir,
            hint="a sealed checkpoint never changes: restore it, or seal the new content "
            "with `evalrig seal DIR` as a new checkpoint",
        )
    raise invalid(
        f"not sealed: no registered seal matches its content {status.current}",
        file=dir,
        hint=f"run `evalrig seal {dir}` (the registry in {registry_path(home)} is the authority, "
        "not SEAL.json)",
    )
