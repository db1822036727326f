"""JSONL: the one reader and writer of every record file the rig keeps (docs/internals.md).

A record is one canonical JSON line written with a single write and fsync'd. A crash can
leave at most one torn (unterminated) last line: readers report it and read every whole
line before it (`whole_lines`, the one torn-line rule), and `cut_torn_tail` removes it
before a file is appended to again. A malformed *whole* line is an error naming
`file:line` and the field path.

Run bundles (results, attempts, estimates, actuals), a comparison's `issued.jsonl` and
`signoffs.jsonl`, and the home's hash-chained files (seals, runs, gates, sign-offs) are all
read and written here; the chained ones are verified before a record is believed and
appended under an exclusive lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from evalrig.core.digest import canonical_json, canonical_line, loads, to_plain
from evalrig.core.errors import invalid
from evalrig.store.chain import Chain, chain_hash, verify_chain, whole_lines
from evalrig.store.files import (
    disk_full,
    exclusive_lock,
    invalid_from_validation,
    is_disk_full,
    open_nofollow,
    read_fd,
    write_all,
)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


# -- appending ---------------------------------------------------------------------------


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
        _tally(path, data)
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """The run's JSONL files held open for appending, with one sync point for them all.

    `write` appends whole canonical lines (one write per call); `sync` fsyncs every file
    written since the last sync, in parallel, and returns when all are on disk. Used by
    the runner, whose loop writes a few lines to several files per turn: syncing them
    together costs one disk round trip instead of one per file.
    """

    def __init__(self, dir: Path, names: tuple[str, ...]) -> None:
        self._fds: dict[str, int] = {}
        self._paths = {n: Path(dir) / n for n in names}
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
        data = b"".join(canonical_line(r) for r in records)
        _tally(self._paths[name], data)
        fd = self._fds[name]
        size = os.fstat(fd).st_size
        try:
            write_all(fd, data)
        except OSError as e:
            if not is_disk_full(e):
                raise
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)  # no torn line: the records are written whole or not at all
            raise disk_full(e, self._paths[name], len(data)) from None
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


# -- what the rig wrote (docs/security.md, "A run's records are the rig's") ---------------
#
# A run's record files lie in a directory other processes may write. While a run (or a
# resume) has them open, the rig keeps the sha256 of their bytes as it found and checked
# them plus every byte it appended since; at finish it digests what the rig wrote, and a
# file on disk that differs was changed by another writer.

_tallies: dict[str, Any] = {}
_tally_lock = threading.Lock()


def _key(path: Path) -> str:
    return os.path.abspath(os.fspath(path))


def _tally(path: Path, data: bytes) -> None:
    if not _tallies:
        return
    with _tally_lock:
        h = _tallies.get(_key(path))
        if h is not None:
            h.update(data)


@contextlib.contextmanager
def tallying(found: dict[Path, bytes]) -> Iterator[Callable[[Path], str]]:
    """Keep the sha256 of each file in `found`: the bytes given (as the caller read and
    checked them), then every byte `append_lines` and `Journal` append to it, until the
    block ends. Yields `tallied(path)`: that digest now, "sha256:HEX" as `file_digests` has it."""
    keys = {_key(p): p for p in found}
    with _tally_lock:
        for k, p in keys.items():
            h = hashlib.sha256()
            h.update(found[p])
            _tallies[k] = h

    def tallied(path: Path) -> str:
        with _tally_lock:
            return "sha256:" + _tallies[_key(path)].hexdigest()

    try:
        yield tallied
    finally:
        with _tally_lock:
            for k in keys:
                _tallies.pop(k, None)


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
        content = read_fd(fd)
        os.ftruncate(fd, content.rfind(b"\n") + 1)
        os.fsync(fd)
    finally:
        os.close(fd)
    return True



# -- reading -----------------------------------------------------------------------------


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


def stream_lines(path: Path, torn: list[int], chunk: int = 1 << 20) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, bytes) of every whole line, read a chunk at a time: the reader
    of `show` and `export`, whose memory must not grow with the file. The torn-line rule of
    `whole_lines`: an unterminated last line is not yielded; its number is appended to
    `torn` once the iteration ends. A missing file has no lines."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below; a generator holds it
    except FileNotFoundError:
        return
    except OSError as e:
        raise invalid(f"cannot be read ({e.strerror})", file=path,
                      hint="the rig writes this file itself; restore it from the run") from None
    n = 0
    rest = b""
    with f:
        while block := f.read(chunk):
            lines = (rest + block).split(b"\n")
            rest = lines.pop()
            for raw in lines:
                n += 1
                yield n, raw
    if rest:
        torn.append(n + 1)


def read_records(path: Path, model: type[M], missing_ok: bool = True) -> Records[M]:
    """Every whole line of a JSONL file, validated; a torn last line is reported, not read.

    A malformed *whole* line is an error naming `file:line` and the field path.
    """
    if not path.exists():
        if missing_ok:
            return Records([], None)
        raise invalid("missing", file=path, hint="is this a bundle directory the rig wrote?")
    lines, torn = whole_lines(_read_bytes(path))
    return Records([parse_line(path, i, raw, model) for i, raw in enumerate(lines, start=1)], torn)


def read_records_fast(path: Path, model: type[M]) -> Records[M]:
    """As `read_records`, validating each line straight from its bytes (pydantic's parser).

    About twice as fast as parse-then-validate, which matters when a resume reads a
    bundle of 50,000 results; a bad line is re-parsed the slow way for its message.
    """
    if not path.exists():
        return Records([], None)
    lines, torn = whole_lines(_read_bytes(path))
    out: list[M] = []
    validate = model.model_validate_json
    for i, raw in enumerate(lines, start=1):
        try:
            out.append(validate(raw))
        except ValidationError:
            out.append(parse_line(path, i, raw, model))  # raises with file:line: field
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


Fields = dict[str, tuple[type, ...]]


@dataclass(frozen=True)
class Rows:
    records: list[dict[str, Any]]
    torn_line: int | None


def read_rows(path: Path, fields: Fields, optional: Fields | None = None) -> Rows:
    """Only the named fields of each whole line, type-checked; a torn last line reported.

    For a resume, which needs a few fields of every line of a large bundle: an order of
    magnitude faster than validating whole records (load_run does that, for verify and
    compare). A line that is not JSON, or lacks a field, or has one of the wrong type,
    is an error naming `file:line: field`. `optional` fields may be absent (None then);
    when present they are type-checked the same way.
    """
    if not path.exists():
        return Rows([], None)
    lines, torn = whole_lines(_read_bytes(path))
    names = tuple(fields)
    kinds = tuple(fields.values())
    pick = operator.itemgetter(*names)
    get = pick if len(names) > 1 else (lambda obj: (pick(obj),))
    out: list[dict[str, Any]] = []
    extra = tuple((optional or {}).items())
    for i, raw in enumerate(lines, start=1):
        try:
            obj = loads(raw)
            vals = get(obj)
        except (ValueError, KeyError, TypeError):
            _row_problem(path, i, raw, fields)
        # exact types: a bool is no int here, as in the models
        if not all(type(v) in k for v, k in zip(vals, kinds)):  # noqa: B905 - same length
            _row_problem(path, i, raw, fields)
        row = dict(zip(names, vals))  # noqa: B905
        for name, k in extra:
            v = obj.get(name)
            if v is not None and type(v) not in k:
                _row_problem(path, i, raw, {name: (*k, type(None))})
            row[name] = v
        out.append(row)
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


class LineProblem(Exception):
    """What a line checker raises: the field (a dotted path, or "") and what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        self.field, self.message = field, message


_RECORD_HINT = "the record does not match its schema (evalrig schema shows it)"


def read_checked(path: Path, major: str, fast: Callable[[dict[str, Any]], T | None],
                 check: Callable[[dict[str, Any]], T], key: str = "attempt_id",
                 data: bytes | None = None) -> tuple[list[tuple[str, T]], int | None]:
    """(the line's `key`, its record) for every whole line, and the torn line: the reader of
    files that were verified against their digests just before, so only the fields the caller
    uses are checked. `fast` takes the common case in one expression (None: not sure);
    `check` then names the field (raising LineProblem). Errors name `file:line` and the field;
    a line whose `schema_version` is not of this `major` ("1") is refused. `data`: the file's
    bytes as the caller read them to verify their digest (parsed instead of reading `path`
    again, which another writer could have changed in between); `path` then only names it."""
    if data is None:
        if not path.exists():
            return [], None
        data = path.read_bytes()
    lines, torn = whole_lines(data)
    out: list[tuple[str, T]] = []
    decode, prefix = orjson.loads, f"{major}."
    for i, raw in enumerate(lines, start=1):
        try:
            d = decode(raw)
            if type(d) is not dict:
                raise LineProblem("", "expected a JSON object")
            version = d.get("schema_version")
            if not (type(version) is str and version.startswith(prefix)):
                raise LineProblem("schema_version", f"{version!r} is not readable by this rig (major {major})")
            rec = fast(d)
            if rec is None:
                rec = check(d)
            out.append((d[key], rec))
        except orjson.JSONDecodeError as e:
            raise invalid(f"not JSON ({e})", file=path, line=i) from None
        except KeyError as e:
            raise invalid("field required", file=path, line=i, field=str(e.args[0]), hint=_RECORD_HINT) from None
        except (LineProblem, TypeError) as e:
            field_ = e.field if isinstance(e, LineProblem) else None
            raise invalid(getattr(e, "message", str(e)), file=path, line=i, field=field_ or None,
                          hint=_RECORD_HINT) from None
    return out, torn



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


def chain_records(path: Path, chain: Chain, model: type[M]) -> list[M]:
    out = []
    for i, obj in enumerate(chain.objs, start=1):
        try:
            out.append(model.model_validate(obj))
        except ValidationError as e:
            raise invalid_from_validation(e, path, i) from None
    return out


def _check_home_chain(path: Path, data: bytes, chain: Chain, home: Path) -> None:
    """A chained file of the home: every signed line verified against the home's own key (after
    the first signed line, every line must be), and no chained file of the home cut shorter
    than the last signed lines say (store/signing.py)."""
    from evalrig.store.signing import check_heads, check_signed, keyring

    if any("sig" in obj for obj in chain.objs):  # a home never signed in has no key to check with
        check_signed(path, chain.objs, keyring(home), None)
    check_heads(home, {path.name: whole_lines(data[:chain.end])[0]})


def read_chained(path: Path, model: type[M], strict: bool = False, home: Path | None = None) -> Records[M]:
    """Every record of a hash-chained file, after verifying the whole chain (exit 4 naming
    the first line that breaks it); a torn last line is reported, not read. A missing file
    has no records. `home`: the file is one of the home's, signed by its key (and checked so)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        data = b""
    except OSError as e:
        raise invalid(f"cannot be read ({e.strerror})", file=path,
                      hint="the rig keeps this file in its home ($EVALRIG_HOME); check that it is a "
                      "file you may read") from None
    chain = verify_chain(Path(path), data, strict)
    records = chain_records(Path(path), chain, model)  # a line of the wrong shape is named by its model
    if home is not None:
        _check_home_chain(Path(path), data, chain, Path(home))
    return Records(records, chain.torn_line)


class ChainWriter(Generic[M]):
    """What `chained_append` yields: the file's records as verified, and `append`."""

    def __init__(self, path: Path, fd: int, model: type[M], records: list[M], chain: Chain,
                 home: Path | None = None) -> None:
        self.path = path
        self._home = home
        """The home whose key signs every line appended (None: unsigned)."""
        self.chain = chain
        """The file as verified before the block."""
        self.records = records
        self._fd = fd
        self._model = model
        self._next = chain.next_prev
        self.appended: list[bytes] = []
        """The lines this writer appended, as written (without their newlines)."""
        self.torn_cut = chain.torn_line
        """The 1-based number of a torn last line cut before this append, if any."""

    @property
    def last_hash(self) -> str | None:
        """The sha256 of the last line now in the file (the `prev` of the next one)."""
        return self._next

    def append(self, record: M) -> M:
        """Append `record` with its `prev` set, synced before returning; returns it as written."""
        return self.append_line(self.line(record))

    def append_line(self, plain: dict[str, Any]) -> M:
        """Append a line made by `line` (nothing appended since), synced before returning."""
        if plain.get("prev") != self._next:
            raise AssertionError("a chained line was appended between line() and append_line()")
        raw = canonical_json(plain)
        write_all(self._fd, raw + b"\n")
        os.fsync(self._fd)
        self.appended.append(raw)
        self._next = chain_hash(raw)
        written = self._model.model_validate(plain)
        self.records.append(written)
        return written

    def line(self, record: M) -> dict[str, Any]:
        """The line `append` would write for `record` next: `prev` set and, in a home, signed."""
        plain = to_plain(record)
        plain["prev"] = self._next
        if self._home is not None:
            from evalrig.store.signing import heads, home_key

            lines = len(self.chain.objs) + len(self.appended)
            last: str | None
            if self.appended:
                last = chain_hash(self.appended[-1])
            else:  # a release log's verification gives no hashes; its `prev` is its last line's
                last = self.chain.hashes[-1] if self.chain.hashes else (self._next if lines else None)
            plain["heads"] = heads(self._home, self.path.name if self.path.parent == self._home else None,
                                   lines, last)
            plain = home_key(self._home).sign(plain)
        return plain


def lock_path(path: Path) -> Path:
    """The lock file beside a chained file: `.NAME.lock`."""
    return Path(path).with_name(f".{Path(path).name}.lock")


@contextlib.contextmanager
def chained_append(path: Path, model: type[M], strict: bool = False, validate: bool = True,
                   verify: Callable[[Path, bytes], Chain] | None = None,
                   home: Path | None = None) -> Iterator[ChainWriter[M]]:
    """Hold the file's exclusive lock from the chain's verification to the sync of every line
    appended in the block. A torn last line is cut first; a broken chain is refused (exit 4)
    before anything is written. `validate=False`: the records are not validated (the writer's
    `records` holds only what it appends; `chain.objs` every parsed line). `verify`: the
    file's own verification, in place of `verify_chain` (the release log's, store/releases.py).
    `home`: every line appended is signed by the home's key and carries `heads`; without
    `verify`, the file is one of the home's and its signatures and heads are checked first."""
    path = Path(path)
    with exclusive_lock(lock_path(path)):
        fd = open_nofollow(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            data = read_fd(fd)
            chain = verify(path, data) if verify is not None else verify_chain(path, data, strict)
            records = chain_records(path, chain, model) if validate else []
            if verify is None and home is not None:
                _check_home_chain(path, data, chain, Path(home))
            if chain.end < len(data):
                os.ftruncate(fd, chain.end)
                os.fsync(fd)
            yield ChainWriter(path, fd, model, records, chain, None if home is None else Path(home))
        finally:
            os.close(fd)

