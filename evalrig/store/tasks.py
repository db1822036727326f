"""Loading tasks and task sets (docs/tasks.md).

Layout: `tasks/<suite>/<folder>/task.toml` beside `prompt.md`, optional `files/` and
`verifier/`. The suite comes from the parent folder; a `suite` key that disagrees with it
is an error (the folder is what people see). The id is the folder name unless `task.toml`
gives one; a given id may differ from the folder name (a task can be renamed on disk
without changing its identity) but must be unique in the set like every id.

At the top of the task set, dotfiles, `fixed.lock` and other plain files (a README) are
ignored; every directory must be a suite. Inside a suite, dotfiles and plain files are
ignored and every directory is a task.

A task's digest is the content hash of its folder; the task set's id is the sha256 of the
canonical JSON of `{task_id: task digest}`. A verifier's identity is its kind, its version
and the sha256 of `{"settings": the verifier section, "files": digest of verifier/ or null}`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

from evalrig.core.digest import sha256_bytes, sha256_json
from evalrig.core.environment import MINIMAL_PATH
from evalrig.core.errors import EvalrigError, Problem, invalid
from evalrig.core.tomlerr import error_problems, key_lines, line_of, parse_toml, validate_doc
from evalrig.core.words import count
from evalrig.models.base import PATH_ID_PATTERN
from evalrig.models.inputs import SUITES, Suite, TaskFile
from evalrig.models.lock import FixedLock
from evalrig.models.run import VerifierIdentity
from evalrig.store.files import read_toml
from evalrig.store.layout import RETIRED
from evalrig.store.tree import hash_tree

TASK_TOML = "task.toml"
PROMPT = "prompt.md"
FIXED_LOCK = "fixed.lock"


@dataclass(frozen=True)
class LoadedTask:
    spec: TaskFile
    dir: Path
    digest: str
    verifier_identity: VerifierIdentity

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def suite(self) -> Suite:
        return self.spec.suite

    @property
    def prompt_path(self) -> Path:
        return self.dir / PROMPT

    @property
    def files_dir(self) -> Path:
        """Copied into work/; may not exist."""
        return self.dir / "files"

    @property
    def verifier_dir(self) -> Path:
        """The command verifier's folder; may not exist."""
        return self.dir / "verifier"

    @property
    def driver_dir(self) -> Path:
        """An episode's driver (docs/episodes.md); exists when the task has [episode]."""
        return self.dir / "driver"


@dataclass(frozen=True)
class TaskSet:
    dir: Path
    tasks: tuple[LoadedTask, ...]
    """Sorted by id."""

    @cached_property
    def id(self) -> str:
        """Digest over every task's files: sha256 of `{task_id: task digest}`."""
        return taskset_id({t.id: t.digest for t in self.tasks})

    def by_id(self) -> dict[str, LoadedTask]:
        return {t.id: t for t in self.tasks}

    def suites(self) -> dict[Suite, int]:
        """Tasks per suite; fixed, fresh and invariant always, with 0 when one has none, and
        public only when the set has public tasks (so a run manifest of a set without them
        reads as it did before the suite existed)."""
        counts: dict[Suite, int] = {s: 0 for s in SUITES if s != "public"}
        for t in self.tasks:
            counts[t.suite] = counts.get(t.suite, 0) + 1
        return counts

    def fresh_created_at(self) -> dict[str, datetime]:
        return {t.id: t.spec.created_at for t in self.tasks
                if t.suite == "fresh" and t.spec.created_at is not None}

    def fresh_content(self) -> dict[str, str]:
        """Every fresh task's content digest (see `content_digest`)."""
        return {t.id: content_digest(t) for t in self.tasks if t.suite == "fresh"}


def taskset_id(digests: dict[str, str]) -> str:
    return sha256_json(digests)


def content_digest(task: LoadedTask) -> str:
    """What makes a task the same task, whenever it was made: the prompt the agent is shown,
    the files it is given and how it is judged (the verifier's identity: settings and files).
    Not its id, tags, limits or `created_at`, so that a regenerated copy of an old fresh task
    (a new folder name, a new date) has the digest the old one had (docs/gate.md,
    `invariant.fresh-after-seal`)."""
    files = hash_tree(task.files_dir).digest if task.files_dir.is_dir() else None
    parts = {
        "prompt": sha256_bytes(task.prompt_path.read_bytes()),
        "files": files,
        "verifier": task.verifier_identity.digest,
    }
    if task.spec.episode is not None:  # the counterpart is part of the task (absent: digests as before)
        parts["driver"] = sha256_json({"settings": task.spec.episode.model_dump(mode="json"),
                                       "files": hash_tree(task.driver_dir).digest})
    return sha256_json(parts)


class TaskProblems(NamedTuple):
    taskset: TaskSet | None
    """None when there is any problem."""
    problems: list[Problem]


# -- one task ----------------------------------------------------------------------------


def verifier_identity(spec: TaskFile, verifier_dir: Path) -> VerifierIdentity:
    files = hash_tree(verifier_dir).digest if verifier_dir.is_dir() else None
    settings = spec.verifier.model_dump(mode="json")
    if not settings.get("secrets", True):  # none listed: the identity every verifier had before
        del settings["secrets"]
    if settings.get("untrusted") is False:  # no service: the identity every verifier had before
        del settings["untrusted"], settings["untrusted_timeout_s"]
    if settings.get("models") is False and not settings.get("models_allowed") and settings.get("budget") is None:
        # no model gateway: the identity every verifier had before (docs/gateway.md)
        for key in ("models", "models_allowed", "budget"):
            settings.pop(key, None)
    return VerifierIdentity(
        kind=spec.verifier.kind,
        version=spec.verifier.version,
        digest=sha256_json({"settings": settings, "files": files}),
    )


_SCRIPT = re.compile(r"^[^\s$-][^\s$]*\.(py|sh|bash|js|mjs|ts|rb|pl|lua|R)$")


class _LazyLines:
    """Key → line of a TOML text, scanned only when a problem needs a line (most tasks
    have none, and validate must stay fast on thousands of them)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._index: dict[tuple[str, ...], int] | None = None

    def of(self, path: tuple[str, ...]) -> int | None:
        if self._index is None:
            self._index = key_lines(self.text)
        return line_of(self._index, path)


def _command_file_problems(spec: TaskFile, task_dir: Path, file: str, index: _LazyLines) -> list[Problem]:
    """A command verifier needs its verifier/ folder and the scripts its argv names there."""
    v = spec.verifier
    if v.kind != "command":
        return []
    vdir = task_dir / "verifier"
    line = index.of(("verifier", "command"))
    if not vdir.is_dir():
        return [Problem(file, f"the command verifier runs from {vdir}/, which does not exist "
                        "(put its files there)", "verifier.command", line)]
    return _missing_scripts(v.command, 0, vdir, "the command", "verifier.command", file, line)


def _missing_scripts(argv: list[str], start: int, folder: Path, who: str, field: str, file: str,
                     line: int | None) -> list[Problem]:
    """The scripts an argv names (from `start`) that are not in the folder it runs from; the
    text after -c or -m is code or a module, not a file."""
    return [Problem(file, f'"{arg}" is not in {folder}/ ({who} runs from there)', f"{field}[{i}]", line)
            for i, arg in enumerate(argv[start:], start=start)
            if not (i > 0 and argv[i - 1] in ("-c", "-m")) and not os.path.isabs(arg)
            and _SCRIPT.match(arg) and not (folder / arg).exists()]


def _driver_problems(spec: TaskFile, task_dir: Path, file: str, index: _LazyLines) -> list[Problem]:
    """An episode needs its driver/ folder and a driver command that exists: the scripts its
    argv names in driver/, and its program (in driver/, absolute, or on the minimal PATH)."""
    ep = spec.episode
    if ep is None:
        return []
    ddir = task_dir / "driver"
    line = index.of(("episode", "driver"))
    if not ddir.is_dir():
        return [Problem(file, f"the episode's driver runs from {ddir}/, which does not exist "
                        "(put the driver's program and data there)", "episode.driver", line)]
    out = []
    prog = ep.driver[0]
    if os.path.isabs(prog):
        found = os.access(prog, os.X_OK)
    elif "/" in prog:
        found = os.access(ddir / prog, os.X_OK)
    else:
        found = shutil.which(prog, path=MINIMAL_PATH) is not None
    if not found:
        out.append(Problem(file, f'"{prog}" is not a program the driver can run (not executable, or not '
                           f"found on {MINIMAL_PATH} or in {ddir}/)", "episode.driver[0]", line))
    return out + _missing_scripts(ep.driver, 1, ddir, "the driver", "episode.driver", file, line)


def _links_out(task_dir: Path) -> list[Problem]:
    """The task folder itself a symbolic link, or a link inside it that leads out of it.

    A task's digest (and so fixed.lock) hashes a link's target string, not what it points
    to: a locked task whose files/ is a link to a folder elsewhere would change with that
    folder under an unchanged digest (docs/tasks.md, "validate"). Links that stay inside the task are its
    own content and are allowed."""
    if task_dir.is_symlink():
        return [Problem(str(task_dir), f"the task folder is a symbolic link (to {os.readlink(task_dir)}); "
                        "a task's content must be its own: copy the task folder here instead")]
    root = os.path.realpath(task_dir)
    out: list[Problem] = []
    stack = [str(task_dir)]
    while stack:  # iterative: a deep tree must not exhaust the recursion limit
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_symlink():
                    target = os.path.realpath(e.path)
                    if os.path.commonpath([root, target]) != root:
                        out.append(Problem(e.path, f"is a symbolic link leading out of the task folder (to "
                                           f"{os.readlink(e.path)}); the task's digest would not cover what it "
                                           "points to: replace the link with the files themselves"))
                elif e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return sorted(out, key=lambda p: p.file or "")


def load_task(task_dir: Path, suite: str) -> LoadedTask | list[Problem]:
    """One task folder of `suite`'s folder; its problems instead of raising."""
    toml_path = task_dir / TASK_TOML
    file = str(toml_path)
    # The task's digest (and so fixed.lock) takes a link's target string, not what it
    # points to: a linked task.toml or prompt.md could change under an unchanged digest.
    links = [Problem(str(p), "is a symbolic link; the task's digest would not cover what it "
                     "points to (replace the link with the file itself)")
             for p in (toml_path, task_dir / PROMPT) if p.is_symlink()]
    if links:
        return links
    outside = _links_out(task_dir)
    if outside:
        return outside
    doc = read_toml(toml_path, "task's task.toml")
    if isinstance(doc, Problem):
        return [doc]
    index = _LazyLines(doc.text)
    problems: list[Problem] = []
    data = dict(doc.data)
    given = data.get("suite")
    if given is None:
        data["suite"] = suite
    elif isinstance(given, str) and given in SUITES and given != suite:
        problems.append(Problem(
            file, f'"{given}" does not match its folder {task_dir.parent}/ '
            f"(move the task folder to {given}/ or drop the key)", "suite", index.of(("suite",))))
        data["suite"] = suite
    data.setdefault("id", task_dir.name)
    spec = validate_doc(doc, TaskFile, data)
    if isinstance(spec, list):
        problems += spec
    for sub in ("files", "verifier", "driver"):
        if (task_dir / sub).exists() and not (task_dir / sub).is_dir():
            problems.append(Problem(str(task_dir / sub), "must be a directory (the task's "
                                    f"{ {'files': 'input files', 'verifier': 'verifier files'}.get(sub, 'driver')})"))
    prompt = task_dir / PROMPT
    if not prompt.is_file():
        problems.append(Problem(str(prompt), "missing (every task needs a prompt.md: the text "
                                "the agent is shown)"))
    if isinstance(spec, list) or problems:
        if not isinstance(spec, list):
            problems += _command_file_problems(spec, task_dir, file, index)
        return problems
    problems += _command_file_problems(spec, task_dir, file, index)
    problems += _driver_problems(spec, task_dir, file, index)
    if problems:
        return problems
    try:
        digest = hash_tree(task_dir).digest
        ident = verifier_identity(spec, task_dir / "verifier")
    except EvalrigError as e:
        return error_problems(e)
    return LoadedTask(spec, task_dir, digest, ident)


# -- the task set ------------------------------------------------------------------------


def _subdirs(dir: Path) -> list[Path]:
    with os.scandir(dir) as it:
        names = sorted(e.name for e in it if not e.name.startswith(".") and e.is_dir())
    return [dir / n for n in names]


def read_tags(dir: Path, tasks: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """task id -> its `tags`, read from each task.toml alone (no digests, no validation of the
    rest): what a summary of a run shows by tag, cheap enough for a task set of thousands.
    `tasks` (task id -> the suite it ran in) limits it to those tasks, looked for in that suite
    first (a task may have moved since, retired from fresh to fixed). A task whose tags do not
    parse, or are not a list of strings, has none."""
    dir = Path(dir)
    if tasks is None:
        tasks = {d.name: suite for suite in SUITES if (dir / suite).is_dir() for d in _subdirs(dir / suite)}
    root = str(dir)
    out: dict[str, list[str]] = {}
    for task_id, suite in tasks.items():
        if not re.fullmatch(PATH_ID_PATTERN, task_id):  # an id from a record is never a path of its own
            continue
        for s in (suite, *SUITES) if suite in SUITES else SUITES:  # its own suite first: one read, no stat
            path = f"{root}/{s}/{task_id}/{TASK_TOML}"  # a string: Path joins cost more than the read
            try:
                with open(path, "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            tags = _tags(path, raw)
            if isinstance(tags, list) and all(isinstance(t, str) for t in tags):
                out[task_id] = tags
            break
    return out


_TABLE = re.compile(rb"^[ \t]*\[", re.M)
_TAGS_LINE = re.compile(rb"^tags[ \t]*=[ \t]*(\[[^\]\n]*\])[ \t]*(?:#[^\n]*)?\r?$", re.M)


def _tags(path: str, raw: bytes) -> object:
    """The top-level `tags` of a task.toml. Most of a summary's cost in a task set of thousands
    was parsing whole files for one key, so the common case, one `tags = [...]` line among the
    top-level keys (before any line opening with `[`, and no multi-line string among them), is
    parsed alone; anything else is parsed whole."""
    if b"tags" not in raw:
        return None
    top = raw[:m.start()] if (m := _TABLE.search(raw)) else raw
    if b'"""' not in top and b"'''" not in top:
        lines = _TAGS_LINE.findall(top)
        if len(lines) == 1:
            doc = parse_toml(path, b"tags = " + lines[0])
            return None if isinstance(doc, Problem) else doc.data.get("tags")
    doc = parse_toml(path, raw)
    return None if isinstance(doc, Problem) else doc.data.get("tags")


def read_lock(dir: Path) -> FixedLock | None:
    from evalrig.store.files import read_json

    path = Path(dir) / FIXED_LOCK
    if not path.exists():
        return None
    return read_json(path, FixedLock)


def _lock_line(text: str, task_id: str) -> int | None:
    needle = f'"{task_id}"'
    for n, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return n
    return None


def lock_problems(dir: Path, loaded: dict[str, LoadedTask], unreadable: set[str]) -> list[Problem]:
    """A locked fixed task removed, moved out of fixed/, or edited (docs/tasks.md, "Locking the fixed suite")."""
    path = Path(dir) / FIXED_LOCK
    try:
        lock = read_lock(dir)
    except EvalrigError as e:
        return error_problems(e)
    if lock is None:
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    out = []
    for task_id, locked in sorted(lock.tasks.items()):
        if task_id in unreadable:
            continue  # its own problems are reported already
        task = loaded.get(task_id)
        line = _lock_line(text, task_id)
        if task is None:
            out.append(Problem(str(path), f"locked fixed task {task_id} is missing from the task "
                               "set; the fixed suite only grows: restore "
                               f"{Path(dir) / 'fixed' / task_id}", f"tasks.{task_id}", line))
        elif task.suite != "fixed":
            out.append(Problem(str(path), f"locked fixed task {task_id} is now in suite "
                               f"{task.suite} ({task.dir}); move it back to fixed/",
                               f"tasks.{task_id}", line))
        elif task.digest != locked:
            out.append(Problem(str(path), f"fixed task {task_id} changed since it was locked "
                               f"({task.dir}: locked {locked}, now {task.digest}); restore it, "
                               "or add the changed task under a new id", f"tasks.{task_id}", line))
    return out


def collect_task_problems(dir: Path) -> TaskProblems:
    """Load every task of the set, gathering every problem (not only the first)."""
    dir = Path(dir)
    if not dir.exists():
        return TaskProblems(None, [Problem(str(dir), "no such directory (expected a task set: "
                                           "<dir>/<suite>/<task-id>/task.toml)")])
    if not dir.is_dir():
        return TaskProblems(None, [Problem(str(dir), "not a directory (expected a task set)")])
    problems: list[Problem] = []
    tasks: list[LoadedTask] = []
    unreadable: set[str] = set()
    for suite_dir in _subdirs(dir):
        if suite_dir.name == RETIRED:
            continue  # retired fresh tasks (`evalrig retire`): kept for people, never a suite
        if suite_dir.name not in SUITES:
            problems.append(Problem(str(suite_dir), "not a suite folder: expected one of "
                                    f"{', '.join(SUITES)} (tasks live in <dir>/<suite>/<id>/)"))
            continue
        for task_dir in _subdirs(suite_dir):
            got = load_task(task_dir, suite_dir.name)
            if isinstance(got, list):
                problems += got
                unreadable.add(task_dir.name)
            else:
                tasks.append(got)
    problems += _duplicate_problems(tasks)
    loaded = {t.id: t for t in tasks}
    problems += lock_problems(dir, loaded, unreadable)
    if problems:
        return TaskProblems(None, problems)
    tasks.sort(key=lambda t: t.id)
    return TaskProblems(TaskSet(dir, tuple(tasks)), [])


def _duplicate_problems(tasks: list[LoadedTask]) -> list[Problem]:
    first: dict[str, LoadedTask] = {}
    out = []
    for t in sorted(tasks, key=lambda t: str(t.dir)):
        if t.id in first:
            toml = t.dir / TASK_TOML
            line = line_of(key_lines(toml.read_text(encoding="utf-8")), ("id",))
            out.append(Problem(str(toml), f'"{t.id}" is also the id of {first[t.id].dir}/ '
                               "(ids are unique in a task set; rename one)", "id", line))
        else:
            first[t.id] = t
    return out


def load_taskset(dir: Path) -> TaskSet:
    """The task set, or an exit-4 error carrying every problem found."""
    taskset, problems = collect_task_problems(dir)
    if taskset is None:
        n = len(problems)
        raise invalid(
            f"{count(n, 'problem')} in the task set",
            file=dir,
            problems=problems,
            hint=f"fix them; `evalrig validate --tasks {dir}` lists them all",
        )
    return taskset


def lock_fixed(dir: Path) -> FixedLock:
    """The lock with every fixed task of the set added (never removing one); not written.

    Refuses, like validate, a task set that removed or edited a locked task.
    """
    taskset = load_taskset(dir)
    old = read_lock(dir)
    locked = dict(old.tasks) if old else {}
    for t in taskset.tasks:
        if t.suite == "fixed":
            locked.setdefault(t.id, t.digest)
    return FixedLock(tasks=dict(sorted(locked.items())))


def write_lock(dir: Path, lock: FixedLock) -> Path:
    from evalrig.store.files import write_json_atomic

    path = Path(dir) / FIXED_LOCK
    write_json_atomic(path, lock)
    return path


__all__ = [
    "LoadedTask", "TaskSet", "TaskProblems", "load_taskset", "collect_task_problems",
    "load_task", "verifier_identity", "lock_fixed", "write_lock", "read_lock",
]
