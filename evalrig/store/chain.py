"""The hash chain of the rig's chained record files: the home's (seals, runs, gates, sign-offs;
docs/security.md) and the release log (docs/release-engineers.md).

Apart from `evalrig.store.jsonl`, which reads and appends the chained files' records, so that
verifying a chain needs neither pydantic nor the models: `champion` reads the release log of
10,000 events in the time the CLI takes to start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from evalrig.core.digest import loads
from evalrig.core.errors import EvalrigError, invalid


def whole_lines(data: bytes) -> tuple[list[bytes], int | None]:
    """The complete lines of a JSONL file's bytes, and the 1-based number of its torn
    (unterminated) last line, if any: the one torn-line rule of every reader."""
    lines = data.split(b"\n")
    tail = lines.pop()
    return lines, (len(lines) + 1 if tail else None)


def chain_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Chain:
    objs: Sequence[Any]
    """The parsed complete lines, in order."""
    hashes: list[str]
    """Each complete line's sha256 (bare hex), in order."""
    tail: bytes
    """The torn last line's bytes (b"" when none)."""
    end: int
    """Bytes up to and including the last complete line's newline."""
    torn_line: int | None
    next_prev: str | None
    """The `prev` of a line appended now."""


def chain_broken(path: Path, line: int, why: str) -> EvalrigError:
    return invalid(
        f"the file's hash chain breaks at this line: {why}", file=path, line=line,
        hint="this record file is the rig's own, and something other than the rig edited it, "
        "inserted a line or appended one by hand; nothing was read from it or written to it. "
        "Restore the file from a backup; if there is none, move it aside (the rig starts a new "
        "chain) and seal, run and gate again what its records covered",
    )


def _strict_fast(lines: list[bytes]) -> tuple[list[Any], list[str]] | None:
    """The strict chain's parsed lines and hashes when every line holds; None at the first
    doubt, for `verify_chain`'s loop to name the line and why. Half the time of that loop,
    which matters to `champion` on a long release log."""
    decode, sha = orjson.loads, hashlib.sha256
    objs: list[Any] = []
    hashes: list[str] = []
    want = None
    try:
        for raw in lines:
            obj = decode(raw)
            if type(obj) is not dict or "prev" not in obj or obj["prev"] != want:
                return None
            want = sha(raw).hexdigest()
            objs.append(obj)
            hashes.append(want)
    except orjson.JSONDecodeError:
        return None
    return objs, hashes


def verify_chain(path: Path, data: bytes, strict: bool = False) -> Chain:
    """`strict`: the release log's rule (docs/release-engineers.md): every line has `prev`,
    null on the first; no legacy lines."""
    lines, torn = whole_lines(data)
    end = data.rfind(b"\n") + 1
    if strict:
        fast = _strict_fast(lines)
        if fast is not None:
            return Chain(fast[0], fast[1], data[end:], end, torn, fast[1][-1] if fast[1] else None)
    body = data[:end]
    chained = False
    last = ""
    offset = 0
    objs: list[Any] = []
    hashes: list[str] = []
    for i, raw in enumerate(lines, start=1):
        try:
            obj = loads(raw)
        except ValueError as e:
            raise chain_broken(path, i, f"it does not parse ({e})") from None
        if not isinstance(obj, dict):
            raise chain_broken(path, i, "it is not a JSON object")
        if strict:
            want_s = last if i > 1 else None
            if "prev" not in obj:
                raise chain_broken(path, i, "it has no prev")
            if obj["prev"] != want_s:
                what = "the sha256 of the previous line" if i > 1 else "null (the first line)"
                raise chain_broken(path, i, f"its prev {obj['prev']!r} is not {what} ({want_s})")
        elif "prev" in obj:
            want = last if chained else chain_hash(body[:offset])
            if obj["prev"] != want:
                what = "the previous line" if chained else "every byte before it"
                raise chain_broken(path, i, f"its prev {obj['prev']!r} is not the sha256 of {what} ({want})")
            chained = True
        elif chained:
            raise chain_broken(path, i, "it has no prev, after chained lines")
        last = chain_hash(raw)
        hashes.append(last)
        offset += len(raw) + 1
        objs.append(obj)
    tail = data[end:]
    if strict:
        return Chain(objs, hashes, tail, end, torn, last or None)
    return Chain(objs, hashes, tail, end, torn, last if chained else chain_hash(body))
