"""Bundle files on disk: whole-line synced appends, atomic replaces, torn-line detection.

The rig process is the only writer of a bundle. A JSONL record is one canonical line
written with a single write and fsync'd; a crash can leave at most one torn (unterminated)
last line, which readers report and ignore, and which `cut_torn_tail` removes before a
resumed run appends again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from evalrig.digest import canonical_line, loads, pretty_json, sha256_json
from evalrig.errors import Problem, invalid

M = TypeVar("M", bound=BaseModel)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_line(path: Path, record: Any) -> None:
    """Append one record as one canonical line, synced before returning."""
    data = canonical_line(record)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:  # a single write almost always; loop only on a short write
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Replace `path` with the canonical (indented) JSON of `obj`: temp file, sync, rename."""
    write_bytes_atomic(path, pretty_json(obj))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


@dataclass(frozen=True)
class Records(Generic[M]):
    records: list[M]
    torn_line: int | None
    """1-based number of an unterminated last line that was ignored, if any."""


def read_records(path: Path, model: type[M], missing_ok: bool = True) -> Records[M]:
    """Every whole line of a JSONL file, validated; a torn last line is reported, not read.

    A malformed *whole* line is an error naming `file:line` and the field path.
    """
    if not path.exists():
        if missing_ok:
            return Records([], None)
        raise invalid("missing", file=path, hint="is this a bundle directory the rig wrote?")
    data = path.read_bytes()
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
    if not path.exists():
        return False
    size = path.stat().st_size
    if size == 0:
        return False
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return False
        f.seek(0)
        content = f.read()
        keep = content.rfind(b"\n") + 1
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return True


def read_json(path: Path, model: type[M]) -> M:
    """One JSON document validated against its model; errors name the file and field."""
    try:
        obj = loads(path.read_bytes())
    except FileNotFoundError:
        raise invalid("missing", file=path, hint="is this a bundle directory the rig wrote?") from None
    except ValueError as e:
        raise invalid(f"not JSON ({e})", file=path) from None
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        raise invalid_from_validation(e, path, None) from None


def bundle_digest(files: dict[str, str]) -> str:
    """DESIGN §7: the sha256 of the canonical JSON of the manifest's file-digest table."""
    return sha256_json(files)
