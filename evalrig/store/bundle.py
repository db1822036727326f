"""Bundle and home files on disk: whole-line synced appends, atomic replaces, torn-line
detection, and the hash-chained JSONL files of the rig's home.

The rig process is the only writer of a bundle. A JSONL record is one canonical line
written with a single write and fsync'd; a crash can leave at most one torn (unterminated)
last line, which readers report and ignore, and which `cut_torn_tail` removes before a
resumed run appends again.

Every file the rig appends to or replaces is opened with O_NOFOLLOW: a symbolic link in
its place is refused (exit 4, naming it), never written through (docs/security.md).
The home's record files (seals, gates, runs, sign-offs) are hash-chained: `read_chained`
verifies the chain before a record is believed, `chained_append` verifies it and appends
under an exclusive lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import operator
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from evalrig.core.digest import (
    canonical_json,
    canonical_line,
    loads,
    pretty_json,
    sha256_json,
    to_plain,
)
from evalrig.core.errors import EvalrigError, Problem, invalid

if TYPE_CHECKING:
    from evalrig.models.run import Actual, AttemptEvent, Estimate, Result, RunManifest

M = TypeVar("M", bound=BaseModel)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_symlink(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def symlink_refused(path: Path) -> EvalrigError:
    return invalid("is a symbolic link; the rig never writes through a link (it could point "
                   "at any file)", file=path,
                   hint="remove the link (the rig writes this file itself) and run the command "
                   "again; if the file it points to is the rig's, move that file here instead")


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """`os.open` that never follows a symbolic link in the last component: a link there is
    refused (exit 4, naming it). Other OSErrors pass through for the caller to word."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP and is_symlink(path):
            raise symlink_refused(path) from None
        raise


def refuse_symlink(path: Path) -> None:
    if is_symlink(path):
        raise symlink_refused(path)


def append_line(path: Path, record: Any) -> None:
    """Append one record as one canonical line, synced before returning."""
    append_lines(path, [record])


def append_lines(path: Path, records: list[Any]) -> None:
    """Append several records with one write and one fsync (a group commit).

    Each is still a whole canonical line; a crash mid-write can tear only the last.
    """
    if not records:
        return
    data = b"".join(canonical_line(r) for r in records)
    fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a single write almost always; loop only on a short write
        n = os.write(fd, view)
        view = view[n:]


class Journal:
    """The run's JSONL files held open for appending, with one sync point for them all.

    `write` appends whole canonical lines (one write per call); `sync` fsyncs every file
    written since the last sync, in parallel, and returns when all are on disk. Used by
    the runner, whose loop writes a few lines to several files per turn: syncing them
    together costs one disk round trip instead of one per file.
    """

    def __init__(self, dir: Path, names: tuple[str, ...]) -> None:
        self._fds: dict[str, int] = {}
        try:
            for n in names:
                self._fds[n] = open_nofollow(Path(dir) / n, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except BaseException:
            for fd in self._fds.values():
                os.close(fd)
            raise
        self._dirty: set[str] = set()
        self._pool: Any = None

    def write(self, name: str, records: list[Any]) -> None:
        if not records:
            return
        _write_all(self._fds[name], b"".join(canonical_line(r) for r in records))
        self._dirty.add(name)

    def sync(self) -> None:
        fds = [self._fds[n] for n in sorted(self._dirty)]
        self._dirty.clear()
        if len(fds) == 1:
            os.fsync(fds[0])
        elif fds:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(len(self._fds), thread_name_prefix="evalrig-fsync")
            list(self._pool.map(os.fsync, fds))  # list(): re-raise the first error here

    def close(self) -> None:
        try:
            self.sync()
        finally:
            for fd in self._fds.values():
                os.close(fd)
            self._fds = {}
            if self._pool is not None:
                self._pool.shutdown()


def write_json_atomic(path: Path, obj: Any) -> None:
    """Replace `path` with the canonical (indented) JSON of `obj`: temp file, sync, rename."""
    write_bytes_atomic(path, pretty_json(obj))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace `path` by `data`: a new temp file (O_EXCL, never a link), synced, renamed over.

    A symbolic link at `path` is refused rather than replaced (the rename would replace the
    link, but a link where the rig's file belongs is a sign of tampering, named to a person).
    """
    refuse_symlink(path)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = open_nofollow(tmp, flags)
    except FileExistsError:  # left by a crashed process that had our pid; unlink removes a link itself
        os.unlink(tmp)
        fd = open_nofollow(tmp, flags)
    try:
        try:
            _write_all(fd, data)  # one os.write may be short (over 2 GiB, a signal)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        # No stray temp file: beside SEAL.json it would change the checkpoint's content.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


@dataclass(frozen=True)
class Records(Generic[M]):
    records: list[M]
    torn_line: int | None
    """1-based number of an unterminated last line that was ignored, if any."""


def _read_bytes(path: Path) -> bytes:
    """A record file's bytes; a directory or an unreadable file in its place is invalid input."""
    try:
        return path.read_bytes()
    except OSError as e:
        raise invalid(f"cannot be read ({e.strerror})", file=path,
                      hint="the rig writes this file itself; restore it from the run") from None


def read_records(path: Path, model: type[M], missing_ok: bool = True) -> Records[M]:
    """Every whole line of a JSONL file, validated; a torn last line is reported, not read.

    A malformed *whole* line is an error naming `file:line` and the field path.
    """
    if not path.exists():
        if missing_ok:
            return Records([], None)
        raise invalid("missing", file=path, hint="is this a bundle directory the rig wrote?")
    data = _read_bytes(path)
    lines = data.split(b"\n")
    torn = None
    if lines and lines[-1] != b"":
        torn = len(lines)
    body = lines[:-1]
    out: list[M] = []
    for i, raw in enumerate(body, start=1):
        out.append(parse_line(path, i, raw, model))
    return Records(out, torn)


def parse_line(path: Path, line_no: int, raw: bytes, model: type[M]) -> M:
    try:
        obj = loads(raw)
    except ValueError as e:
        raise invalid(f"not JSON ({e})", file=path, line=line_no,
                      hint="the line was edited or corrupted; restore it or rerun") from None
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        raise invalid_from_validation(e, path, line_no) from None


def invalid_from_validation(e: ValidationError, path: Path, line_no: int | None) -> Exception:
    problems = [
        Problem(str(path), err["msg"], ".".join(str(p) for p in err["loc"]) or None, line_no)
        for err in e.errors()
    ]
    first = problems[0]
    return invalid(first.message, file=path, field=first.field, line=line_no,
                   problems=problems[1:],
                   hint="the record does not match its schema (evalrig schema shows it)")


def cut_torn_tail(path: Path) -> bool:
    """Remove an unterminated last line before appending again. True if one was cut."""
    try:
        fd = open_nofollow(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return False
        content = _read_fd(fd)
        os.ftruncate(fd, content.rfind(b"\n") + 1)
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _read_fd(fd: int) -> bytes:
    """Every byte of an open file, from its start."""
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


# -- the hash-chained files of the rig's home (docs/security.md) ---------------
#
# Each chained line carries `prev`: the bare hex sha256 of the previous line's bytes without
# its newline; the first chained line's `prev` is the sha256 of every byte before it (of b""
# in a file that starts chained). Lines at the start of a file without a `prev` key were
# written before chaining and are accepted as legacy. A last line without its newline is
# torn: ignored on read, cut before the next append. Any complete line that does not parse,
# or whose `prev` does not match, or that lacks `prev` after a chained line, breaks the chain:
# the file is refused (exit 4) at that line. A chain detects edits and insertions, not the
# removal of its last lines, and not a rewrite by someone who recomputes every hash.


def chain_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class _Chain:
    objs: list[Any]
    """The parsed complete lines, in order."""
    end: int
    """Bytes up to and including the last complete line's newline."""
    torn_line: int | None
    next_prev: str
    """The `prev` of a line appended now."""


def _broken(path: Path, line: int, why: str) -> EvalrigError:
    return invalid(
        f"the file's hash chain breaks at this line: {why}", file=path, line=line,
        hint="this record file is the rig's own, and something other than the rig edited it, "
        "inserted a line or appended one by hand; nothing was read from it or written to it. "
        "Restore the file from a backup; if there is none, move it aside (the rig starts a new "
        "chain) and seal, run and gate again what its records covered",
    )


def _verify_chain(path: Path, data: bytes) -> _Chain:
    end = data.rfind(b"\n") + 1
    body = data[:end]
    lines = body.split(b"\n")[:-1]
    torn = len(lines) + 1 if end < len(data) else None
    chained = False
    last = ""
    offset = 0
    objs: list[Any] = []
    for i, raw in enumerate(lines, start=1):
        try:
            obj = loads(raw)
        except ValueError as e:
            raise _broken(path, i, f"it does not parse ({e})") from None
        if not isinstance(obj, dict):
            raise _broken(path, i, "it is not a JSON object")
        if "prev" in obj:
            want = last if chained else chain_hash(body[:offset])
            if obj["prev"] != want:
                what = "the previous line" if chained else "every byte before it"
                raise _broken(path, i, f"its prev {obj['prev']!r} is not the sha256 of {what} ({want})")
            chained = True
        elif chained:
            raise _broken(path, i, "it has no prev, after chained lines")
        last = chain_hash(raw)
        offset += len(raw) + 1
        objs.append(obj)
    return _Chain(objs, end, torn, last if chained else chain_hash(body))


def _chain_records(path: Path, chain: _Chain, model: type[M]) -> list[M]:
    out = []
    for i, obj in enumerate(chain.objs, start=1):
        try:
            out.append(model.model_validate(obj))
        except ValidationError as e:
            raise invalid_from_validation(e, path, i) from None
    return out


def read_chained(path: Path, model: type[M]) -> Records[M]:
    """Every record of a hash-chained file, after verifying the whole chain (exit 4 naming
    the first line that breaks it); a torn last line is reported, not read. A missing file
    has no records."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return Records([], None)
    except OSError as e:
        raise invalid(f"cannot be read ({e.strerror})", file=path,
                      hint="the rig keeps this file in its home ($EVALRIG_HOME); check that it is a "
                      "file you may read") from None
    chain = _verify_chain(Path(path), data)
    return Records(_chain_records(Path(path), chain, model), chain.torn_line)


class ChainWriter(Generic[M]):
    """What `chained_append` yields: the file's records as verified, and `append`."""

    def __init__(self, path: Path, fd: int, model: type[M], records: list[M], next_prev: str) -> None:
        self.path = path
        self.records = records
        self._fd = fd
        self._model = model
        self._next = next_prev

    def append(self, record: M) -> M:
        """Append `record` with its `prev` set, synced before returning; returns it as written."""
        plain = to_plain(record)
        plain["prev"] = self._next
        raw = canonical_json(plain)
        _write_all(self._fd, raw + b"\n")
        os.fsync(self._fd)
        self._next = chain_hash(raw)
        written = self._model.model_validate(plain)
        self.records.append(written)
        return written


def lock_path(path: Path) -> Path:
    """The lock file beside a chained file: `.NAME.lock`."""
    return Path(path).with_name(f".{Path(path).name}.lock")


@contextlib.contextmanager
def exclusive_lock(path: Path, wait: bool = True) -> Iterator[int]:
    """An exclusive flock on `path` (created, never through a link), held for the block.

    Raises BlockingIOError when `wait` is false and another process holds it. The kernel
    drops the lock when its holder dies, so a crash never leaves it held.
    """
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        yield fd
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def chained_append(path: Path, model: type[M]) -> Iterator[ChainWriter[M]]:
    """Hold the file's exclusive lock from the chain's verification to the sync of every line
    appended in the block. A torn last line is cut first; a broken chain is refused (exit 4)
    before anything is written."""
    path = Path(path)
    with exclusive_lock(lock_path(path)):
        fd = open_nofollow(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            data = _read_fd(fd)
            chain = _verify_chain(path, data)
            records = _chain_records(path, chain, model)
            if chain.end < len(data):
                os.ftruncate(fd, chain.end)
                os.fsync(fd)
            yield ChainWriter(path, fd, model, records, chain.next_prev)
        finally:
            os.close(fd)


def read_json(path: Path, model: type[M]) -> M:
    """One JSON document validated against its model; errors name the file and field."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise invalid("missing", file=path, hint="is this a bundle directory the rig wrote?") from None
    except IsADirectoryError:
        raise invalid("is a directory, not a JSON file", file=path,
                      hint="remove or rename the directory; the rig writes this file itself") from None
    except OSError as e:
        raise invalid(f"cannot be read ({e.strerror})", file=path,
                      hint="check that the path is the rig's file and that you may read it") from None
    return parse_json(path, data, model)


def parse_json(path: Path, data: bytes, model: type[M]) -> M:
    """As `read_json`, from bytes already read: a caller that digests the bytes validates
    those very bytes, not a second read that may differ."""
    try:
        obj = loads(data)
    except ValueError as e:
        raise invalid(f"not JSON ({e})", file=path,
                      hint="the file was edited or cut short; restore the rig's copy, or rerun "
                      "the command that wrote it") from None
    return _validated(obj, path, model)


def _validated(obj: Any, path: Path, model: type[M]) -> M:
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        raise invalid_from_validation(e, path, None) from None


def bundle_digest(files: dict[str, str]) -> str:
    """DESIGN §7: the sha256 of the canonical JSON of the manifest's file-digest table."""
    return sha256_json(files)


# -- the run bundle: lock, reading a whole run, digests ---------------------------------

MANIFEST = "manifest.json"
LOCK = ".lock"
LOCK_HOLDER = ".lock.holder"
RUN_JSONL = ("attempts.jsonl", "estimates.jsonl", "actuals.jsonl", "results.jsonl")
# Never digested: the manifest holds the digests, the lock files are the live process's.
NOT_DIGESTED = frozenset({MANIFEST, LOCK, LOCK_HOLDER})


class BundleLock:
    """One process per bundle: an exclusive flock on BUNDLE/.lock, taken without waiting.

    The kernel drops the lock when its holder dies (kill -9 included), so a crashed run
    never leaves the bundle locked. Beside it, `.lock.holder` names the holder (pid, host,
    argv) so that a refused second process can say who has the bundle.
    """

    def __init__(self, bundle: Path, argv: list[str]) -> None:
        self.bundle = Path(bundle)
        self.argv = argv
        self._lock: Any = None

    def acquire(self) -> BundleLock:
        import socket

        self.bundle.mkdir(parents=True, exist_ok=True)
        lock = exclusive_lock(self.bundle / LOCK, wait=False)
        try:
            lock.__enter__()
        except BlockingIOError:
            raise invalid(
                f"the bundle is in use by {self._holder()}",
                file=self.bundle,
                hint="wait for that run to finish (or stop it), then run the command again",
            ) from None
        self._lock = lock
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "argv": self.argv}
        write_bytes_atomic(self.bundle / LOCK_HOLDER, canonical_line(holder))
        return self

    def _holder(self) -> str:
        try:
            h = loads((self.bundle / LOCK_HOLDER).read_bytes())
            return f"pid {h['pid']} on {h['host']} ({' '.join(h['argv'])})"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process (its pid is not recorded yet)"

    def release(self) -> None:
        if self._lock is not None:
            try:
                (self.bundle / LOCK_HOLDER).unlink(missing_ok=True)
            finally:
                self._lock.__exit__(None, None, None)
                self._lock = None

    def __enter__(self) -> BundleLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class RunBundle:
    """A run bundle as read from disk. `torn` maps a JSONL file name to its ignored torn line."""

    dir: Path
    manifest: RunManifest
    attempts: list[AttemptEvent]
    estimates: list[Estimate]
    actuals: list[Actual]
    results: list[Result]
    torn: dict[str, int]


def load_run(dir: Path) -> RunBundle:
    """Read a run bundle: the manifest and every whole record; torn last lines reported."""
    from evalrig.models.run import Actual, AttemptEvent, Estimate, Result, RunManifest

    dir = Path(dir)
    manifest = read_json(dir / MANIFEST, RunManifest)
    torn: dict[str, int] = {}
    loaded: dict[str, list[Any]] = {}
    models: tuple[type[BaseModel], ...] = (AttemptEvent, Estimate, Actual, Result)
    for name, model in zip(RUN_JSONL, models, strict=True):
        recs: Records[BaseModel] = read_records_fast(dir / name, model)
        loaded[name] = recs.records
        if recs.torn_line is not None:
            torn[name] = recs.torn_line
    return RunBundle(
        dir=dir,
        manifest=manifest,
        attempts=loaded["attempts.jsonl"],
        estimates=loaded["estimates.jsonl"],
        actuals=loaded["actuals.jsonl"],
        results=loaded["results.jsonl"],
        torn=torn,
    )


def read_records_fast(path: Path, model: type[M]) -> Records[M]:
    """As `read_records`, validating each line straight from its bytes (pydantic's parser).

    About twice as fast as parse-then-validate, which matters when a resume reads a
    bundle of 50,000 results; a bad line is re-parsed the slow way for its message.
    """
    if not path.exists():
        return Records([], None)
    lines = _read_bytes(path).split(b"\n")
    torn = len(lines) if lines[-1] != b"" else None
    out: list[M] = []
    validate = model.model_validate_json
    for i, raw in enumerate(lines[:-1], start=1):
        try:
            out.append(validate(raw))
        except ValidationError:
            out.append(parse_line(path, i, raw, model))  # raises with file:line: field
    return Records(out, torn)


Fields = dict[str, tuple[type, ...]]


@dataclass(frozen=True)
class Rows:
    records: list[dict[str, Any]]
    torn_line: int | None


def read_rows(path: Path, fields: Fields) -> Rows:
    """Only the named fields of each whole line, type-checked; a torn last line reported.

    For a resume, which needs a few fields of every line of a large bundle: an order of
    magnitude faster than validating whole records (load_run does that, for verify and
    compare). A line that is not JSON, or lacks a field, or has one of the wrong type,
    is an error naming `file:line: field`.
    """
    if not path.exists():
        return Rows([], None)
    lines = _read_bytes(path).split(b"\n")
    torn = len(lines) if lines[-1] != b"" else None
    names = tuple(fields)
    kinds = tuple(fields.values())
    pick = operator.itemgetter(*names)
    get = pick if len(names) > 1 else (lambda obj: (pick(obj),))
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(lines[:-1], start=1):
        try:
            vals = get(loads(raw))
        except (ValueError, KeyError, TypeError):
            _row_problem(path, i, raw, fields)
        # exact types: a bool is no int here, as in the models
        if not all(type(v) in k for v, k in zip(vals, kinds)):  # noqa: B905 - same length
            _row_problem(path, i, raw, fields)
        out.append(dict(zip(names, vals)))  # noqa: B905
    return Rows(out, torn)


def _row_problem(path: Path, line: int, raw: bytes, fields: Fields) -> Any:
    """Raise the error for a line `read_rows` cannot use, naming what is wrong with it."""
    try:
        obj = loads(raw)
    except ValueError as e:
        raise invalid(f"not JSON ({e})", file=path, line=line,
                      hint="the line was edited or corrupted; restore it or rerun") from None
    if not isinstance(obj, dict):
        raise invalid("not a JSON object", file=path, line=line)
    for name, kinds in fields.items():
        v = obj.get(name)
        if type(v) not in kinds:
            got = "missing" if name not in obj else f"got {v!r}"
            raise invalid(f"expected {' or '.join(k.__name__ for k in kinds)}, {got}",
                          file=path, line=line, field=name,
                          hint="the record does not match its schema (evalrig schema shows it)")
    raise AssertionError("unreachable: the line was usable")


def final_results(bundle: RunBundle) -> dict[str, Any]:
    """trial_id → the Result that counts: the trial's last scored attempt.

    Only results made with the trial's current inputs (the inputs id of its latest
    attempt) count, so a result kept from before a task changed never stands in for the
    rerun. A trial with no scored attempt is absent.
    """
    return final_of(bundle.results)


class ResultLike(Protocol):
    @property
    def trial_id(self) -> str: ...
    @property
    def inputs_id(self) -> str: ...
    @property
    def status(self) -> str: ...


R = TypeVar("R", bound=ResultLike)


def final_of(results: Sequence[R]) -> dict[str, R]:
    """The rule of `final_results` over any result records in file order (compare reads its
    own lighter ResultLine)."""
    from evalrig.models.run import SCORED

    current = {r.trial_id: r.inputs_id for r in results}
    return {r.trial_id: r for r in results if r.status in SCORED and r.inputs_id == current[r.trial_id]}


def file_digests(dir: Path, exclude: frozenset[str] = NOT_DIGESTED) -> dict[str, str]:
    """{relative path: sha256} of every regular file under `dir` except top-level `exclude`.

    Temp files of an interrupted atomic write (`.name.tmp.PID`) are left out too.
    """
    from evalrig.core.digest import sha256_file

    dir = Path(dir)
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(dir):
        rel_root = os.path.relpath(root, dir)
        dirs.sort()
        for name in sorted(files):
            rel = name if rel_root == "." else f"{rel_root}/{name}"
            if rel_root == "." and (name in exclude or is_atomic_temp(name)):
                continue
            path = os.path.join(root, name)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            out[rel] = sha256_file(Path(path))
    return out


def is_atomic_temp(name: str) -> bool:
    """Whether `name` is the temp file of an interrupted write_bytes_atomic (`.name.tmp.PID`)."""
    return name.startswith(".") and ".tmp." in name


def check_run_digests(dir: Path) -> list[Problem]:
    """Every file of a finished run against `manifest.files`: changed, missing, or extra.

    A run that never finished (status `running`) has no digests to check; that is a
    problem in itself, since its files may still change.
    """
    from evalrig.models.run import RunManifest

    dir = Path(dir)
    manifest = read_json(dir / MANIFEST, RunManifest)
    mpath = str(dir / MANIFEST)
    if manifest.status == "running":
        return [Problem(mpath, "the run never finished (status running), so its files have no "
                        "recorded digests; resume it with `evalrig run --out BUNDLE --resume`",
                        "status")]
    actual = file_digests(dir)
    problems: list[Problem] = []
    for rel, want in sorted(manifest.files.items()):
        got = actual.get(rel)
        if got is None:
            problems.append(Problem(str(dir / rel), "missing (listed in manifest.json files)"))
        elif got != want:
            problems.append(Problem(str(dir / rel), f"digest {got} differs from manifest.json's {want}"))
    for rel in sorted(set(actual) - set(manifest.files)):
        problems.append(Problem(str(dir / rel), "not listed in manifest.json files (added after the run?)"))
    return problems


def manifest_problems(dir: Path, b: RunBundle) -> list[Problem]:
    """The manifest's status and counts against the records they summarise.

    The bundle digest covers the files, not the manifest; what compare and the gate read
    from it (complete or not, how many scored) must still agree with results.jsonl.
    """
    m = b.manifest
    if m.status == "running":  # a run killed before it could write its last counts
        return []
    final = final_results(b)
    statuses = [r.status for r in final.values()]
    derived = {
        "scored": len(final),
        **{s: statuses.count(s) for s in ("passed", "failed", "agent_error", "timeout")},
        "infra_error": sum(r.status == "infra_error" for r in b.results),
        "unscored": m.counts.trials - len(final),
    }
    if not m.subset:
        derived["trials"] = m.taskset.count * m.repeat
    path = str(dir / MANIFEST)
    out = [Problem(path, f"counts.{k}: the manifest says {getattr(m.counts, k)}, the records give {v}")
           for k, v in derived.items() if getattr(m.counts, k) != v]
    status = "complete" if derived["unscored"] == 0 else "incomplete"
    if m.status != status:
        out.append(Problem(path, f"status: the manifest says {m.status}, the records make it {status}"))
    return out
