"""Loading what `show` and `export` read: a bundle's kind and manifest, the integrity of the
files shown (docs/reading.md "Integrity"), and its record files streamed line by line
(store/jsonl's reader), so that a summary's memory does not grow with the bundle."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from evalrig.core.errors import Problem, invalid
from evalrig.models.base import PATH_ID_PATTERN
from evalrig.models.run import RunManifest
from evalrig.store import layout
from evalrig.store.bundle import check_run_digests
from evalrig.store.files import parse_json, read_json, sha256_file
from evalrig.store.invocation import command_name, quoted
from evalrig.store.jsonl import stream_lines
from evalrig.store.lookup import run_tasks
from evalrig.store.tasks import LoadedTask, TaskSet, content_digest, read_tags

if TYPE_CHECKING:  # a run's summary does not import the comparison's models
    from evalrig.models.comparison import ComparisonManifest


@dataclass
class Opened:
    """A bundle as `show` opens it. `problems` are the digests that failed among the files
    read (the first is the banner's); `torn` maps a record file to its torn last line."""

    dir: Path
    kind: str
    run: RunManifest | None = None
    """Without its `files` table, which is `files` (a run's lists every evidence file)."""
    comparison: ComparisonManifest | None = None
    files: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    torn: dict[str, int] = field(default_factory=dict)

    def banner(self) -> str | None:
        if not self.problems:
            return None
        first = self.problems[0]
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return (f"this bundle fails verification: {first.render()}{more}; what follows may have been "
                f"changed after the rig wrote it (`{command_name()} verify {quoted(self.dir)}` lists every problem)")

    def integrity(self) -> dict[str, Any]:
        return {"verified": not self.problems, "banner": self.banner(),
                "problems": [p.as_dict() for p in self.problems],
                "torn": dict(sorted(self.torn.items()))}


def open_bundle(dir: Path) -> Opened:
    """A run or comparison bundle by its manifest's `kind`; exit 4 when it is neither."""
    dir = Path(dir)
    path = dir / layout.MANIFEST
    if not path.is_file():
        raise invalid("not a bundle (no manifest.json)", file=dir,
                      hint="give a run bundle (run --out) or a comparison bundle (compare --out)")
    try:
        # The standard library's parser, not orjson's, for this one document: a run manifest
        # lists every evidence file, and orjson's peak on it is some 15 times its size
        # (93 MB for the 6 MB manifest of 50,000 attempts) where json's is 4 times.
        obj = json.loads(path.read_bytes())
    except (ValueError, OSError) as e:
        raise invalid(f"cannot be read as JSON ({e})", file=path,
                      hint="the rig writes this file itself: restore the bundle from a copy, or run it again") from None
    kind = obj.get("kind") if isinstance(obj, dict) else None
    if kind == "run":
        assert isinstance(obj, dict)
        files = _files(path, obj.pop("files", {}))
        return Opened(dir, "run", run=parse_json(path, orjson.dumps(obj), RunManifest), files=files)
    if kind == "comparison":
        from evalrig.models.comparison import ComparisonManifest

        c = read_json(path, ComparisonManifest)
        return Opened(dir, "comparison", comparison=c, files=dict(c.files))
    raise invalid(f"kind {kind!r} is neither run nor comparison", file=path, field="kind",
                  hint="give a run bundle (run --out) or a comparison bundle (compare --out)")


def _files(path: Path, files: Any) -> dict[str, str]:
    """A run manifest's file-digest table, checked as its model would check it but without a
    model: on a bundle of 50,000 attempts it holds as many entries, and validating them as
    pydantic fields multiplied the memory of `show`'s summary."""
    if not isinstance(files, dict):
        raise invalid("expected an object of file digests", file=path, field="files")
    for rel, digest in files.items():
        if not (isinstance(digest, str) and DIGEST.fullmatch(digest)):
            raise invalid(f"expected sha256:<64 hex>, got {digest!r}", file=path, field=f"files.{rel}",
                          hint="the manifest was edited; do not use this bundle")
    return files


def check_files(b: Opened, rels: list[str]) -> None:
    """The named files against the manifest's digests, each problem added to `b.problems`:
    `show` verifies what it shows (a summary its record files, an attempt its evidence) so
    that it stays fast on a large bundle; `export` verifies everything (`check_whole`)."""
    files = b.files
    if b.run is not None and b.run.status == "running":
        if not any(p.field == "status" for p in b.problems):
            b.problems.append(Problem(str(b.dir / layout.MANIFEST), "the run never finished (status "
                                      "running), so its files have no recorded digests", "status"))
        return
    for rel in rels:
        path = b.dir / rel
        want = files.get(rel)
        if want is None:
            if path.is_file():
                b.problems.append(Problem(str(path), "not listed in manifest.json files (added after the run?)"))
            continue
        if not path.is_file():
            b.problems.append(Problem(str(path), "missing (listed in manifest.json files)"))
        elif (got := sha256_file(path)) != want:
            b.problems.append(Problem(str(path), f"digest {got} differs from manifest.json's {want}"))


def linked(b: Opened, rel: str) -> bool:
    """Whether a path inside the bundle goes through a symbolic link. The rig never writes
    one into a bundle, so one found there is tampering: it is not followed (it could lead
    `show` to any file of the reader's), and the file is reported."""
    path = b.dir
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink():
            if not any(p.file == str(path) for p in b.problems):
                b.problems.append(Problem(str(path), "is a symbolic link (the rig writes none into a "
                                          "bundle); it was not followed"))
            return True
    return False


def check_attempt(b: Opened, attempt_id: str) -> list[str]:
    """An attempt's evidence files (relative to its folder) checked against the manifest; the
    listed ones and any file there that is not listed."""
    assert b.run is not None
    prefix = f"{layout.ATTEMPTS_DIR}/{attempt_id}/"
    listed = sorted(r for r in b.files if r.startswith(prefix))
    root = b.dir / layout.ATTEMPTS_DIR / attempt_id
    usable = root.is_dir() and not linked(b, f"{layout.ATTEMPTS_DIR}/{attempt_id}")
    present = sorted(f"{prefix}{p.relative_to(root).as_posix()}" for p in root.rglob("*")
                     if p.is_file() and not p.is_symlink()) if usable else []
    rels = sorted(set(listed) | set(present))
    check_files(b, rels)
    return [r[len(prefix):] for r in rels]


def check_whole(dir: Path) -> list[Problem]:
    """Every file of a run bundle against its manifest, and its torn lines (what export requires)."""
    problems = list(check_run_digests(dir))
    for name in layout.RUN_JSONL:
        torn: list[int] = []
        for _ in stream_lines(dir / name, torn):
            pass
        if torn:
            problems.append(Problem(str(dir / name), "torn last line (a crash mid-write)", line=torn[0]))
    return problems


PATH_ID = re.compile(PATH_ID_PATTERN)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
RESULT_KEYS = ("trial_id", "attempt_id", "task_id", "suite", "status", "inputs_id")
ACTUAL_KEYS = ("attempt_id",)


def lines(b: Opened, name: str, need: tuple[str, ...] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every whole line of a record file as a dict; a torn last line is recorded in `b.torn`;
    a whole line that is not a JSON object, or lacks one of the string fields `need`, is an
    error naming file:line and the field (exit 4)."""
    path = b.dir / name
    if linked(b, name):
        return
    torn: list[int] = []
    decode, is_id, check_id = orjson.loads, PATH_ID.fullmatch, "attempt_id" in need  # bound once: a hot loop
    for i, raw in stream_lines(path, torn):
        try:
            d = decode(raw)
        except orjson.JSONDecodeError as e:
            raise invalid(f"not JSON ({e})", file=path, line=i,
                          hint="the line was edited or corrupted; restore it or rerun") from None
        if type(d) is not dict:
            raise invalid("not a JSON object", file=path, line=i)
        for key in need:
            if type(d.get(key)) is not str:
                raise invalid(f"expected a string, got {d.get(key)!r}", file=path, line=i, field=key,
                              hint="the record does not match its schema (evalrig schema shows it)")
        if check_id and not is_id(d["attempt_id"]):
            # it names a folder: checked before any path is made of it (docs/security.md)
            raise invalid(f"{d['attempt_id']!r} is not an id (one path component of [A-Za-z0-9._-])",
                          file=path, line=i, field="attempt_id",
                          hint="the record was edited; do not use this bundle")
        yield i, d
    if torn:
        b.torn[name] = torn[0]


SIDES = ("champion", "candidate")


def compared_run(manifest: ComparisonManifest, side: str) -> tuple[Path | None, str | None]:
    """Where the comparison's `side` run bundle is, or None and why it is not at hand: not
    recorded (a comparison written before compare recorded it), or moved. Whether the bundle
    found there is the one compared is `not_compared`'s question, asked once it is read."""
    ref = manifest.champion if side == "champion" else manifest.candidate
    where = (manifest.runs or {}).get(side)  # type: ignore[call-overload]  # side is one of SIDES
    if where is None:
        return None, (f"the {side}'s run bundle ({ref.run_id}) is not located: this comparison was written "
                      "before compare recorded where its runs were")
    if not (Path(where) / layout.MANIFEST).is_file():
        return None, f"the {side}'s run bundle ({ref.run_id}) has moved: it is no longer at {where}"
    return Path(where), None


def not_compared(manifest: ComparisonManifest, side: str, where: Path, files: dict[str, str]) -> str | None:
    """Why the run bundle at `where` (its manifest's file table `files`) is not the one the
    comparison compared as `side`, or None when it is."""
    from evalrig.store.bundle import bundle_digest

    ref = manifest.champion if side == "champion" else manifest.candidate
    digest = bundle_digest(dict(files))
    if digest == ref.bundle_digest:
        return None
    return (f"the {side}'s run bundle at {where} is not the one compared (its digest is {digest}, the "
            f"comparison's {ref.bundle_digest}): another run took its place")


@dataclass
class Tasks:
    """The task set a run names (or --tasks), for what bundles never hold: tags, prompts and
    the verifiers' settings. `note` says why it could not be read."""

    taskset: TaskSet | None
    note: str | None
    _by_id: dict[str, LoadedTask] | None = None

    _why: dict[tuple[str, str], str | None] = field(default_factory=dict)

    def checked(self, manifest: RunManifest, task_id: str, verifier: dict[str, Any] | None
                ) -> tuple[LoadedTask | None, str | None]:
        """The task and None, or None and why it is not the one the run judged with (once per
        task and verifier: a digest is computed once, not per attempt)."""
        task = self.get(task_id)
        if task is None:
            return None, self.note or f"task {task_id} is not in the task set"
        key = (task_id, str((verifier or {}).get("digest")))
        if key not in self._why:
            self._why[key] = task_mismatch(manifest, task, verifier)
        why = self._why[key]
        return (None, why) if why is not None else (task, None)

    def get(self, task_id: str) -> LoadedTask | None:
        if self.taskset is None:
            return None
        if self._by_id is None:
            self._by_id = self.taskset.by_id()
        return self._by_id.get(task_id)


def tasks_where(manifest: RunManifest, tasks_dir: Path | None) -> Path:
    return Path(tasks_dir) if tasks_dir is not None else Path(manifest.settings.tasks_dir)


def load_tags(manifest: RunManifest, tasks_dir: Path | None, tasks: Mapping[str, str]
              ) -> tuple[dict[str, list[str]], str | None]:
    """task id -> tags from the task set (tags are not part of what a run judged), or why not;
    only for `tasks` (task id -> suite), the tasks the bundle holds."""
    where = tasks_where(manifest, tasks_dir)
    if not where.is_dir():
        return {}, f"the task set {where} is not here (give --tasks DIR)"
    return read_tags(where, tasks), None


def load_tasks(manifest: RunManifest, tasks_dir: Path | None) -> Tasks:
    """The run's tasks, retired ones found by digest (store/lookup.py), or a note why not."""
    where = tasks_where(manifest, tasks_dir)
    if not where.is_dir():
        return Tasks(None, f"the task set {where} is not here (give --tasks DIR)")
    try:
        found = run_tasks(where, manifest.taskset.id, manifest.taskset.fresh_content)
    except Exception as e:  # noqa: BLE001 - a task set that does not load is shown as a note
        return Tasks(None, f"the task set {where} does not load: {getattr(e, 'message', e)}")
    return Tasks(found.taskset, None, found.by_id)


def task_mismatch(manifest: RunManifest, task: LoadedTask, verifier: dict[str, Any] | None) -> str | None:
    """Why the task set's copy of a task is not the one the run judged with, or None: its
    verifier identity (settings and files) against the result's, and a fresh task's content
    digest against the manifest's."""
    if verifier is not None and task.verifier_identity.model_dump(mode="json") != verifier:
        return (f"the task's verifier changed since the run (recorded {verifier.get('digest')}, "
                f"now {task.verifier_identity.digest})")
    want = manifest.taskset.fresh_content.get(task.id)
    if want is not None and content_digest(task) != want:
        return f"the task's content changed since the run (recorded {want}, now {content_digest(task)})"
    return None
