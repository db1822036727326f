"""Taking evidence out of an attempt root, safely (DESIGN §4 "Evidence", §5 layout).

The attempt root was written by the agent, so nothing in it is trusted: every entry is
looked at with `lstat` and opened with `O_NOFOLLOW | O_NONBLOCK`, and only what `fstat`
confirms to be a regular file is copied. Symbolic links, FIFOs, sockets and devices are
skipped and listed. Directory links are never descended.

While a file is copied it is, in one pass:
- redacted: every secret value is replaced by `[REDACTED:NAME]` (the same Redactor the
  launcher uses on the streams), so a secret never reaches a file of the bundle;
- scanned for the canary (plain, base64 and hex; streams.StreamScanner, which also
  finds a form split across two reads);
- counted against the evidence cap. A file that does not fit in what is left of the cap
  is not copied, and nothing after it is: the copy stops and marks itself truncated.
  The answer files (`out/answer.txt`, `out/answer.json`, `out/usage.json`) go first, so a
  big log beside them cannot push the answer out of the cap.

Layout in the evidence directory: `out/...` (always), then the task's `evidence` globs at
their paths relative to the attempt root. `stdout.txt`, `stderr.txt` (written there by
the launcher) and `verifier/` (the rig's verifier output) are reserved: an agent file
that would land on one of them is skipped.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evalrig.streams import Redactor, StreamScanner

RESERVED_TOP = frozenset({"stdout.txt", "stderr.txt", "verifier", "network.jsonl"})
_CHUNK = 1 << 20


@dataclass
class EvidenceReport:
    """What was copied: kept bytes (after redaction), skipped entries, canary hits."""

    files: list[str] = field(default_factory=list)
    bytes: int = 0
    truncated: bool = False
    skipped: list[str] = field(default_factory=list)
    canary_in: list[str] = field(default_factory=list)


# -- globs -------------------------------------------------------------------------------


def glob_regex(pattern: str) -> re.Pattern[str] | None:
    """A regex for a `/`-separated glob: `**` any number of segments, `*` and `?` within one.

    None for a pattern that could reach outside the attempt root (absolute, `..`).
    """
    parts = pattern.strip("/").split("/") if pattern else []
    if not parts or pattern.startswith("/") or ".." in parts:
        return None
    out = ""
    for i, seg in enumerate(parts):
        last = i == len(parts) - 1
        if seg == "**":
            out += ".*" if last else "(?:[^/]+/)*"
            continue
        piece = ""
        j = 0
        while j < len(seg):
            c = seg[j]
            if c == "*":
                piece += "[^/]*"
            elif c == "?":
                piece += "[^/]"
            elif c == "[":
                end = seg.find("]", j + 1)
                if end == -1:
                    piece += re.escape(c)
                else:
                    body = seg[j + 1 : end]
                    if body.startswith("!"):
                        body = "^" + body[1:]
                    piece += "[" + body.replace("\\", "\\\\") + "]"
                    j = end
            else:
                piece += re.escape(c)
            j += 1
        out += piece + ("" if last else "/")
    return re.compile(out)


def _literal_prefix(pattern: str) -> str:
    """The leading segments without wildcards: where a walk for `pattern` starts."""
    keep = []
    for seg in pattern.strip("/").split("/")[:-1]:
        if any(c in seg for c in "*?["):
            break
        keep.append(seg)
    return "/".join(keep)


# -- walking without following links -----------------------------------------------------


def _walk(root: Path, rel: str) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of every non-directory entry under root/rel, sorted, no links followed."""
    base = root / rel if rel else root
    try:
        st = os.lstat(base)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        if rel:
            yield rel, st
        return
    try:
        entries = sorted(os.scandir(base), key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        r = f"{rel}/{e.name}" if rel else e.name
        est = e.stat(follow_symlinks=False)
        if stat.S_ISDIR(est.st_mode):
            yield from _walk(root, r)
        else:
            yield r, est


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special"


# -- copying one file --------------------------------------------------------------------


def redact_bytes(data: bytes, secrets: Mapping[str, bytes]) -> bytes:
    r = Redactor(secrets)
    return r.feed(data) + r.flush()


@dataclass
class _Copy:
    ok: bool
    kept: int = 0
    canary: bool = False
    skip_reason: str | None = None


def _copy_one(
    src: Path, dst: Path, budget: int, secrets: Mapping[str, bytes], canary: Sequence[bytes],
) -> _Copy:
    """Copy one regular file within `budget` bytes; refuse anything fstat says is not regular."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return _Copy(False, skip_reason=f"unreadable ({e.strerror})")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return _Copy(False, skip_reason=_kind(st.st_mode))
        if st.st_size > budget:
            return _Copy(False, skip_reason="over the evidence cap")
        dst.parent.mkdir(parents=True, exist_ok=True)
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        red = Redactor(secrets)
        scanner = StreamScanner(canary)
        kept = 0
        try:
            while True:
                block = os.read(fd, _CHUNK)
                if not block:
                    break
                scanner.feed(block)
                data = red.feed(block)
                kept += len(data)
                if kept > budget:  # the file grew after fstat (nothing should still write)
                    break
                os.write(out, data)
            data = red.flush()
            kept += len(data)
            if kept <= budget:
                os.write(out, data)
        finally:
            os.close(out)
        if kept > budget:
            os.unlink(dst)
            return _Copy(False, skip_reason="over the evidence cap")
        return _Copy(True, kept, scanner.found)
    finally:
        os.close(fd)


# -- the whole collection ----------------------------------------------------------------


FIRST = frozenset({"out/answer.txt", "out/answer.json", "out/usage.json"})
"""What the verifier and the cost figures read: taken before anything else of out/."""


def _utf8(rel: str) -> bool:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # os.fsdecode left surrogates for the undecodable bytes
        return False
    return True


def candidates(attempt_root: Path, globs: Sequence[str]) -> Iterator[tuple[str, os.stat_result]]:
    """out/ first, then each glob's matches, every path once, in a stable order."""
    seen: set[str] = set()
    out = sorted(_walk(attempt_root, "out"), key=lambda e: (e[0] not in FIRST, e[0]))
    for rel, st in out:
        seen.add(rel)
        yield rel, st
    for pattern in globs:
        rx = glob_regex(pattern)
        if rx is None:
            continue
        for rel, st in _walk(attempt_root, _literal_prefix(pattern)):
            if rel not in seen and rx.fullmatch(rel):
                seen.add(rel)
                yield rel, st


def collect(
    attempt_root: Path,
    evidence_dir: Path,
    globs: Sequence[str],
    cap: int,
    secrets: Mapping[str, bytes],
    canary: Sequence[bytes],
    already: int = 0,
    make_out: bool = True,
    exclude: frozenset[str] = frozenset(),
) -> EvidenceReport:
    """Copy the attempt's evidence into `evidence_dir`; `already` bytes of the cap are spent.

    `make_out=False` creates out/ only when something lands in it (a directory costs an
    mkdir on the hot path, and only a command verifier would look at an empty one).
    `exclude` names files the rig itself planted (the canary file), never taken.
    """
    rep = EvidenceReport(bytes=already)
    if make_out:
        (evidence_dir / "out").mkdir(parents=True, exist_ok=True)
    for rel, st in candidates(attempt_root, globs):
        if rel in exclude:
            continue
        if rel.split("/", 1)[0] in RESERVED_TOP:
            rep.skipped.append(f"{rel} (reserved name)")
            continue
        if not _utf8(rel):
            # The bundle's digest table is JSON: a name that is not UTF-8 cannot be listed
            # in it, and a copy of it would make the bundle fail its own verification.
            rep.skipped.append(f"{os.fsencode(rel).decode('utf-8', 'backslashreplace')} (name is not UTF-8)")
            continue
        if not stat.S_ISREG(st.st_mode):
            rep.skipped.append(f"{rel} ({_kind(st.st_mode)})")
            continue
        if rep.truncated:
            continue
        got = _copy_one(attempt_root / rel, evidence_dir / rel, cap - rep.bytes, secrets, canary)
        if not got.ok:
            if got.skip_reason == "over the evidence cap":
                rep.truncated = True
            else:
                rep.skipped.append(f"{rel} ({got.skip_reason})")
            continue
        rep.files.append(rel)
        rep.bytes += got.kept
        if got.canary:
            rep.canary_in.append(rel)
    return rep


def scan_file(path: Path, needles: Sequence[bytes]) -> bool:
    """Whether a (rig-written) file holds a needle in any form, read in chunks."""
    scanner = StreamScanner(needles)
    try:
        with open(path, "rb") as f:
            while not scanner.found and (block := f.read(_CHUNK)):
                scanner.feed(block)
    except FileNotFoundError:
        return False
    return scanner.found
