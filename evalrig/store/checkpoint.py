"""Checkpoints: `checkpoint.toml`, sealing, and the seal registry (docs/checkpoint.md).

A checkpoint's id is the content hash of its directory (evalrig.store.tree, hash version 2,
`SEAL.json` left out). Sealing registers `{checkpoint_id, name, sealed_at, hash_version}` in
`$EVALRIG_HOME/seals.jsonl`; the first line of an id is the one that counts, so sealing
again changes nothing. The registry is the authority: `SEAL.json` inside the checkpoint is a
convenience copy that the checkpoint itself could have written.

Version-1 seals (lines without `hash_version`, written before folders and mode bits were
hashed) still verify: a directory is identified by its version-2 hash first, then by its
version-1 hash where a version-1 line holds that id. A hash matches only lines of its own
version, and no id is registered under both: one tree's version-1 stream can be another's
version-2 stream. Sealing such content again appends its
version-2 id with `same_as` the version-1 id and the original `sealed_at`; from then on the
checkpoint keeps its version-1 id (a serving champion keeps serving) but only content with
the version-2 hash is it: the version-1 hash no longer identifies anything
(docs/checkpoint.md, "Sealing and what it covers").
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from evalrig.core.errors import EvalrigError, Problem, invalid
from evalrig.core.tomlerr import raise_problems, validate_doc
from evalrig.models.inputs import CheckpointFile
from evalrig.models.run import HashVersion, SealEntry, SealFile
from evalrig.store.files import read_toml
from evalrig.store.invocation import command_name, quoted
from evalrig.store.layout import SEALS as REGISTRY
from evalrig.store.layout import home_path
from evalrig.store.ledger import refuse_unusable_home
from evalrig.store.tree import TreeDigest, hash_trees

CHECKPOINT_TOML = "checkpoint.toml"
SEAL_JSON = "SEAL.json"
_EXCLUDE = frozenset({SEAL_JSON})


def evalrig_home() -> Path:
    """`$EVALRIG_HOME`, else `~/.local/state/evalrig`. Only the CLI calls this: a home that
    cannot be a directory is refused here, with one message for every command."""
    home = home_path(os.environ)
    refuse_unusable_home(home)
    return home


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
            "(name, [agent] command); see docs/checkpoint.md",
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


def _hashes(dir: Path, versions: tuple[HashVersion, ...]) -> dict[HashVersion, TreeDigest]:
    return hash_trees(Path(dir), versions, exclude=_EXCLUDE, exclude_dirs=False)


def checkpoint_id(dir: Path) -> TreeDigest:
    """The content hash of the directory (hash version 2), `SEAL.json` excluded
    (docs/checkpoint.md, "Sealing and what it covers"). What a directory is registered as
    is `identify`'s answer: version-1 seals are found there too."""
    return _hashes(dir, (2,))[2]


def registry_path(home: Path) -> Path:
    return Path(home) / REGISTRY


def seal_records(home: Path) -> list[SealEntry]:
    """The registry's records, its hash chain verified first (exit 4 naming a broken line)."""
    from evalrig.store.jsonl import read_chained

    return read_chained(registry_path(home), SealEntry, home=home).records


def registered_seal(home: Path, checkpoint_id: str) -> SealEntry | None:
    """The first registry entry of `checkpoint_id` (the one that counts), if any."""
    return _first(seal_records(home), checkpoint_id)


def _first(records: Sequence[SealEntry], checkpoint_id: str, version: HashVersion | None = None) -> SealEntry | None:
    return next((e for e in records if e.checkpoint_id == checkpoint_id
                 and (version is None or e.version == version)), None)


def _open_v1(records: Sequence[SealEntry]) -> set[str]:
    """The version-1 ids a version-1 hash may still match: those not sealed again under
    version 2 (after that, only the version-2 hash identifies the content)."""
    resealed = {e.same_as for e in records if e.version == 2 and e.same_as is not None}
    return {e.checkpoint_id for e in records if e.version == 1} - resealed


@dataclass(frozen=True)
class Identity:
    """What a directory's content is in the registry now."""

    content: TreeDigest
    """Its content hash now, version 2."""
    entry: SealEntry | None
    """The registry line that counts for it: its version-2 line, or the version-1 line
    that line is `same_as`, or a version-1 line its version-1 hash matched; None when
    no seal matches."""
    matched: HashVersion | None
    """Which hash version found the entry."""

    @property
    def id(self) -> str:
        """The checkpoint id it goes by: the registered id, else its content hash."""
        return self.entry.checkpoint_id if self.entry is not None else self.content.digest


def identify(dir: Path, records: Sequence[SealEntry]) -> Identity:
    """The directory's identity in the registry `records` (seal_records): its version-2
    hash where a version-2 line holds that id, then its version-1 hash where a version-1
    line (not sealed again under version 2) holds that id. Hashes once, both versions from one read when needed."""
    v1_ids = _open_v1(records)
    trees = _hashes(dir, (2, 1) if v1_ids else (2,))
    # A hash matches only lines of its own version: a version-1 stream of one tree can be
    # byte for byte the version-2 stream of another (a v1 length such as 1644 reads as a v2
    # mode), so an id of one version says nothing about content hashed in the other.
    line = _first(records, trees[2].digest, 2)
    if line is not None:
        original = _first(records, line.same_as, 1) if line.same_as is not None else None
        return Identity(trees[2], original or line, 2)
    if 1 in trees and trees[1].digest in v1_ids:
        return Identity(trees[2], _first(records, trees[1].digest, 1), 1)
    return Identity(trees[2], None, None)


def version_clash(records: Sequence[SealEntry], checkpoint_id: str, version: HashVersion) -> SealEntry | None:
    """The line that holds `checkpoint_id` under the other hash version, if any: the same id
    string from two framings names two contents, so it may never be registered twice."""
    return next((e for e in records if e.checkpoint_id == checkpoint_id and e.version != version), None)


def _clash_error(clash: SealEntry, version: HashVersion, file: Path, field: str | None = None) -> EvalrigError:
    return invalid(
        f"its hash version {version} id {clash.checkpoint_id} is registered already as a hash "
        f"version {clash.version} id: the two framings can give one id to two different trees, "
        "so this content cannot go by it",
        file=file, field=field,
        hint="change the checkpoint (any file or mode) and seal it as a new checkpoint; see "
        "docs/checkpoint.md, \"Sealing and what it covers\"")


def refuse_version_clash(home: Path, checkpoint_id: str, version: HashVersion, file: Path) -> None:
    """Exit 4 when `checkpoint_id` is registered under the other hash version (verify
    --register checks before it registers anything of a bundle)."""
    clash = version_clash(seal_records(home), checkpoint_id, version)
    if clash is not None:
        raise _clash_error(clash, version, file, "checkpoint.id")


def register_seal(home: Path, checkpoint_id: str, name: str, sealed_at: datetime,
                  version: HashVersion = 1) -> bool:
    """Add a seal made elsewhere (a bundle brought in by `verify --register`, whose manifest
    says the id's hash `version`) where the id is not in the registry yet: an earlier
    `sealed_at` stands. True when it was added."""
    from evalrig.store.jsonl import chained_append

    home = Path(home)
    _make_home(home)
    with chained_append(registry_path(home), SealEntry, home=home) as registry:
        if any(e.checkpoint_id == checkpoint_id for e in registry.records):
            return False
        registry.append(SealEntry(checkpoint_id=checkpoint_id, name=name, sealed_at=sealed_at,
                                  hash_version=version))
        return True


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
    from evalrig.store.files import write_json_atomic
    from evalrig.store.jsonl import chained_append

    dir = Path(dir)
    ckpt = load_checkpoint(dir)
    history_log(ckpt)
    tree = checkpoint_id(dir)
    home = Path(home)
    _make_home(home)
    # Two seals at once must not both append the same id: look up and append under the
    # registry's lock (the chained store holds it from verification to the sync).
    with chained_append(registry_path(home), SealEntry, home=home) as registry:
        clash = version_clash(registry.records, tree.digest, 2)
        if clash is not None:
            raise _clash_error(clash, 2, dir)
        entry = _first(registry.records, tree.digest, 2)
        if entry is None:
            # Content a version-1 line holds keeps that id and its sealed_at: a serving
            # champion sealed by an older rig keeps serving under the id its records name.
            v1_ids = _open_v1(registry.records)
            v1 = _hashes(dir, (1,))[1].digest if v1_ids else None
            old = _first(registry.records, v1, 1) if v1 in v1_ids else None
            entry = registry.append(SealEntry(
                checkpoint_id=tree.digest, name=old.name if old else ckpt.spec.name,
                sealed_at=old.sealed_at if old else now, hash_version=2,
                same_as=old.checkpoint_id if old else None))
    sealed = SealFile(
        checkpoint_id=entry.checkpoint_id,
        name=entry.name,
        sealed_at=entry.sealed_at,
        files=tree.files,
        bytes=tree.bytes,
        hash_version=2,
        same_as=entry.same_as,
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


SEAL_JSON_MAX = 1 << 20
"""The most of SEAL.json the rig reads: the rig writes a few hundred bytes."""


def _claimed_id(dir: Path) -> str | None:
    """The checkpoint id SEAL.json claims, if it is a regular file of at most SEAL_JSON_MAX
    bytes holding one (it is not the authority). The hash leaves SEAL.json out, so the
    checkpoint may make it anything: a FIFO, a link to /dev/zero, a huge file all read as
    "no valid SEAL.json", never block or fill memory."""
    from evalrig.core.digest import loads
    from evalrig.store.files import read_regular

    data = read_regular(dir / SEAL_JSON, SEAL_JSON_MAX)
    if data is None:
        return None
    try:
        value = loads(data).get("checkpoint_id")
    except (ValueError, AttributeError):
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
    matched: HashVersion | None = None
    """Which hash version found the entry (1: a seal from before version 2, not yet re-sealed)."""


def seal_status(dir: Path, home: Path) -> SealStatus:
    dir = Path(dir)
    _require_dir(dir)
    records = seal_records(home)
    found = identify(dir, records)
    current = found.content.digest
    claimed = _claimed_id(dir)
    changed = (found.entry is None and claimed is not None and claimed != current
               and _first(records, claimed) is not None)
    return SealStatus(current, found.entry, claimed, changed, found.matched)


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
            f"with `{command_name()} seal DIR` as a new checkpoint",
        )
    raise invalid(
        f"not sealed: no registered seal matches its content {status.current}",
        file=dir,
        hint=f"run `{command_name()} seal {quoted(dir)}` (the registry in {registry_path(home)} is the authority, "
        "not SEAL.json)",
    )


# -- what runs (docs/attempts.md "What runs") --------------------------------------------

SYSTEM_DIRS = ("/usr", "/bin", "/sbin")
"""Where a command may resolve besides the checkpoint and the operator's interpreter
prefixes; `/lib*` (any top-level directory whose name starts with `lib`) too."""

_HINT = ("use a program inside the checkpoint (a relative path such as ./run.sh), one under "
         "/usr (python3, sh, found on the rig's PATH), or pass `run --interpreter-prefix DIR` "
         "naming the installation it lives in (a pyenv or conda directory)")


@dataclass(frozen=True)
class Program:
    """Where a checkpoint's command resolved to, every link followed."""

    field: str  # "agent.command" | "agent.estimate"
    argv0: str  # as the checkpoint wrote it
    named: Path  # the path as found (PATH lookup or made absolute), links not followed
    real: Path  # realpath: what the kernel executes
    where: str  # "checkpoint" | "system" | "prefix"
    prefix: Path | None = None  # the interpreter prefix holding it, where="prefix"


def _system(path: Path) -> bool:
    if any(path.is_relative_to(d) for d in SYSTEM_DIRS):
        return True
    parts = path.parts
    return len(parts) > 2 and parts[1].startswith("lib")


def _under(path: Path, prefixes: Sequence[Path]) -> Path | None:
    return next((p for p in prefixes if path.is_relative_to(p)), None)


def resolve_program(ckpt: Checkpoint, field: str, argv0: str, prefixes: Sequence[Path],
                    unprivileged: bool = False) -> Program:
    """Resolve one command's argv[0] the way the sandbox will run it; exit 4 when it would
    run anything but a program inside the checkpoint, under the system directories or
    under one of the operator's `prefixes` (absolute, resolved).

    `unprivileged`: the agent will run as a uid of the pool outside any sandbox view
    (`--sandbox process` as root), so a program outside the checkpoint must be reachable
    by every user.
    """
    from evalrig.core.environment import minimal_path

    file = Path(ckpt.dir) / CHECKPOINT_TOML
    root = Path(os.path.realpath(ckpt.dir))

    def refuse(message: str, hint: str = _HINT) -> EvalrigError:
        return invalid(f"{argv0!r} {message}", file=file, field=field, hint=hint)

    if not argv0:
        raise refuse("is empty: the command names no program")
    if "\0" in argv0:
        raise refuse("holds a NUL character")
    if "/" not in argv0:
        found = shutil.which(argv0, path=minimal_path())
        if found is None:
            raise refuse(f"is not found on the rig's PATH ({minimal_path()})")
        named = Path(os.path.normpath(found))
    elif not os.path.isabs(argv0):
        named = Path(os.path.normpath(root / argv0))
        if not named.is_relative_to(root) or named == root:
            raise refuse("leaves the checkpoint: a relative command must name a program "
                         "inside it")
    else:
        named = Path(os.path.normpath(argv0))
    real = Path(os.path.realpath(named))
    if not real.is_file():
        raise refuse(f"resolves to {real}, which is not a file", hint="fix the command, "
                     "or add the program to the checkpoint and seal it again")
    inside = not os.path.isabs(argv0) and "/" in argv0
    if inside and real.is_relative_to(root):
        interpreter = _shebang(real)
        if interpreter is not None:
            # The kernel runs the #! interpreter: it must be one the rule allows too.
            resolve_program(ckpt, field, interpreter, prefixes, unprivileged)
        return Program(field, argv0, named, real, "checkpoint")
    # The path as named must be visible too (a venv's bin/python, a /usr/local link): the
    # sandbox shows only the system directories and the prefixes, at their host paths.
    for form in ([real] if inside else [named, real]):
        if _system(form) or _under(form, prefixes) is not None:
            continue
        via = f" (through {named})" if form == real and named != real else ""
        raise refuse(f"resolves to {form}{via}, which is neither inside the checkpoint nor "
                     "under /usr, /bin, /sbin, /lib* or an --interpreter-prefix: the seal "
                     "does not cover it, and the rig never shows the agent a directory its "
                     "checkpoint chose")
    prefix = _under(real, prefixes)
    where = "system" if _system(real) and prefix is None else "prefix"
    if unprivileged and where == "prefix":
        for form in {named, real}:
            blocked = _not_world_reachable(form)
            if blocked is not None:
                raise refuse(
                    f"resolves to {form}, which the unprivileged uid the agent runs as under "
                    f"--sandbox process cannot reach ({blocked})",
                    hint="install the interpreter where every user may read it "
                    "(chmod o+rx on the prefix and its parents), or run with --sandbox bwrap")
    return Program(field, argv0, named, real, where, prefix)


def _shebang(path: Path) -> str | None:
    """The absolute interpreter a script's `#!` line names, or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    if not words or not words[0].startswith(b"/"):
        return None
    return os.fsdecode(words[0])


def _not_world_reachable(path: Path) -> str | None:
    """Why a user with no claim to `path` or its folders cannot run it, or None."""
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & 0o001:
            return f"{parent} is not searchable by other users"
    if not os.stat(path).st_mode & 0o005 == 0o005:
        return f"{path} is not readable and executable by other users"
    return None


def resolve_commands(ckpt: Checkpoint, prefixes: Sequence[Path],
                     unprivileged: bool = False) -> list[Program]:
    """`agent.command` and `agent.estimate` resolved (see resolve_program)."""
    agent = ckpt.spec.agent
    out = [resolve_program(ckpt, "agent.command", agent.command[0], prefixes, unprivileged)]
    if agent.estimate is not None:
        out.append(resolve_program(ckpt, "agent.estimate", agent.estimate[0], prefixes,
                                   unprivileged))
    return out


def check_interpreter_prefixes(given: Sequence[str],
                               guarded: Sequence[tuple[str, Path, bool]]) -> list[Path]:
    """The operator's `--interpreter-prefix` directories, resolved; exit 4 for one that is
    not a directory, or that holds or is one of `guarded` (the task set, the bundle,
    $EVALRIG_HOME, the rig's own files, the attempts' scratch), or lies inside one whose
    flag is set. Each prefix is bound read-only into the agent's view, so it must show
    nothing the agent may not see."""
    out: list[Path] = []
    for text in given:
        path = Path(os.path.realpath(text))
        if not path.is_dir():
            raise invalid(f"{text}: not a directory", field="--interpreter-prefix",
                          hint="name the directory an interpreter is installed in "
                          "(e.g. ~/.pyenv/versions/3.12.4)")
        for what, guard, inside_too in guarded:
            g = Path(os.path.realpath(guard))
            if g.is_relative_to(path) or (inside_too and path.is_relative_to(g)):
                rel = "is" if g == path else ("holds" if g.is_relative_to(path) else "lies inside")
                raise invalid(
                    f"{text} {rel} {what} ({g}): the agent would see it",
                    field="--interpreter-prefix",
                    hint="name the interpreter's own installation directory, which holds no "
                    "tasks, bundles or rig state")
        if path not in out:
            out.append(path)
    return sorted(out)


def program_digest(path: Path) -> str:
    """sha256 of a program file, recorded for a program under an interpreter prefix."""
    from evalrig.store.files import sha256_file

    return sha256_file(Path(path))
