"""The rig's own files on disk: atomic replaces, links refused, locks, JSON documents.

Every file the rig appends to or replaces is opened with O_NOFOLLOW: a symbolic link in
its place is refused (exit 4, naming it), never written through (docs/security.md). A
replaced file is written to a temp file, synced and renamed over, so a reader sees the old
bytes or the new, never half. JSONL files are `evalrig.store.jsonl`'s.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from evalrig.core.digest import loads, pretty_json
from evalrig.core.errors import DiskFull, EvalrigError, Problem, invalid

if TYPE_CHECKING:  # pydantic loads with the first model read, not with the file primitives
    from pydantic import BaseModel, ValidationError

    from evalrig.core.tomlerr import TomlDoc

M = TypeVar("M", bound="BaseModel")


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


KERNEL_FS = ("proc", "sys")
"""Top folders of kernel file systems: no file of the rig's can be made there."""


def why_no_dir_here(path: Path) -> str | None:
    """Why no directory can be made at `path` (None: nothing stands in the way that can be
    told without trying): a file there or on the way, or a kernel file system. For the
    paths a user gives (`--out`, `$EVALRIG_HOME`), refused before anything is written."""
    want = Path(path).absolute()
    probe = want
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return "it is a file, not a directory" if probe == want else f"{probe} is a file, not a directory"
    top = probe.resolve().parts[1:2]
    if top and top[0] in KERNEL_FS:
        return f"/{top[0]} is a kernel file system (it holds no files of yours)"
    return None


DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errors of a file system with no room left: the operator's to fix, never a bug."""


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in DISK_FULL


def _free_bytes(path: Path) -> int | None:
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return None


def disk_full(e: OSError, path: Path | str, needed: int | None, at_most: bool = False) -> DiskFull:
    """The exit-5 error for a write that found no room: which path, what it needed (`at_most`:
    a bound, not the exact figure), what is free (docs/release-flow.md, "Resume after a crash")."""
    path = Path(path)
    free = _free_bytes(path)
    what = "no space left on its file system" if e.errno == errno.ENOSPC else "the disk quota is exhausted"
    need = ("needed more room" if needed is None else
            f"needed up to {needed:,} bytes" if at_most else f"needed {needed:,} bytes")
    have = f", {free:,} bytes free" if free is not None else ""
    return DiskFull(f"{what} while writing it ({need}{have}); the run stopped and its bundle is resumable",
                    file=str(path), hint="free space, then `--resume`")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a single write almost always; loop only on a short write
        n = os.write(fd, view)
        view = view[n:]


def read_answer(evidence_dir: Path, rel: str) -> bytes | None:
    """The bytes of `rel` under a stored folder (an answer, a reward.json); None when absent,
    a link, or not a regular file. Reads never block on a FIFO the agent left."""
    return read_regular(evidence_dir / rel)


def read_regular(path: Path, limit: int | None = None) -> bytes | None:
    """The bytes of a regular file; None when absent, a link, not a regular file, or longer
    than `limit` bytes. Never blocks on a FIFO and never reads a device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            if limit is None:
                return f.read()
            data = f.read(limit + 1)
            return data if len(data) <= limit else None
    finally:
        os.close(fd)


def read_head(path: Path, limit: int) -> tuple[bytes, int] | None:
    """The first `limit` bytes of a regular file and its size; None when absent, a link, or
    not a regular file (an evidence file shown in a report: never followed, never blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limit), st.st_size
    finally:
        os.close(fd)


def read_fd(fd: int) -> bytes:
    """Every byte of an open file, from its start."""
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


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
            write_all(fd, data)  # one os.write may be short (over 2 GiB, a signal)
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
    from pydantic import ValidationError

    try:
        return model.model_validate(obj)
    except ValidationError as e:
        raise invalid_from_validation(e, path, None) from None


def invalid_from_validation(e: ValidationError, path: Path, line_no: int | None) -> Exception:
    problems = [
        Problem(str(path), err["msg"], ".".join(str(p) for p in err["loc"]) or None, line_no)
        for err in e.errors()
    ]
    first = problems[0]
    return invalid(first.message, file=path, field=first.field, line=line_no,
                   problems=problems[1:],
                   hint="the record does not match its schema (evalrig schema shows it)")



def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return "sha256:" + h.hexdigest()



def read_toml(path: Path, what: str = "file") -> TomlDoc | Problem:
    """Read and parse `path`; a missing or unreadable file is a Problem too."""
    file = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Problem(file, f"missing (expected the {what} here)")
    except IsADirectoryError:
        return Problem(file, "is a directory, not a TOML file")
    except OSError as e:
        return Problem(file, f"cannot be read ({e.strerror})")
    from evalrig.core.tomlerr import parse_toml

    return parse_toml(file, raw)

