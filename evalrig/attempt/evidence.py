"""Taking evidence out of an attempt root, safely (docs/attempts.md, "Evidence").

The attempt root was written by the agent, so nothing in it is trusted. One walk looks at
every entry (`walk`): iterative, holding one directory open at a time, each directory
opened by name from its parent with `O_NOFOLLOW | O_DIRECTORY` and left through `..`
only after checking that `..` is the directory it came from; so no depth, name length or
number of entries can make it recurse, run out of descriptors or fail on a path longer
than PATH_MAX. An entry it cannot look at is skipped and noted, and the walk goes on.

From what the walk saw:
- the copy: regular files only, each opened one path component at a time with
  `O_NOFOLLOW` (the file itself also `O_NONBLOCK`), and copied only when `fstat` confirms
  a regular file. Symbolic links, FIFOs, sockets and devices are skipped and noted.
  While a file is copied it is, in one pass, redacted (every secret value replaced by
  `[REDACTED:NAME]`), scanned for the canary (streams.StreamScanner) and counted against
  the evidence cap. A file that does not fit in what is left of the cap is not copied,
  and nothing after it is: the copy stops and marks itself truncated. The answer files
  (`out/answer.txt`, `out/answer.json`, `out/usage.json`) go first.
- `evidence_index.json`, written by the rig at the root of the evidence: every entry
  under the attempt root except the checkpoint copy `agent/`, kept or skipped (the first
  `INDEX_MAX`), so that a verifier sees links, FIFOs and empty folders too.
- the canary scan of names: every name the walk saw (the index is scanned as an
  evidence file; the full names and the targets of links are scanned as well, since the
  index cuts long paths and holds no targets).

Layout in the evidence directory: `out/...`, then the task's `evidence` globs at their
paths relative to the attempt root. The rig writes `stdout.txt`, `stderr.txt`,
`evidence_index.json`, `verifier/` (and, where other parts of the rig keep them,
`transcript.jsonl`, `driver/`, `network.jsonl`) at the evidence root: an attempt-root
entry of any of those names is never copied, and is noted.

The notes are bounded: the first `NOTES_MAX` skipped entries, each path cut at
`NOTE_PATH_MAX` bytes, and a count of all of them.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from evalrig.attempt.streams import Forms, Redactor, ScanBudget, StreamScanner, needle_forms
from evalrig.core.digest import canonical_json, sha256_bytes
from evalrig.models.globs import glob_regex, segment_regex
from evalrig.store.layout import AGENT_DIR, EVIDENCE_INDEX, EVIDENCE_RESERVED, VERIFIER_DIR
from evalrig.store.tree import hash_tree

INDEX_MAX = 100_000
"""Entries listed in evidence_index.json; beyond, `truncated` is true."""
INDEX_BYTES_MAX = 16 << 20
"""...and at most about this many bytes of it (100,000 entries of ordinary paths fit in
10 MiB; long paths reach this bound first): the index travels with the evidence."""
_INDEX_ENTRY_BYTES = 64  # an entry's JSON beside its path: keys, type, size, kept
WALK_MAX = 2 * INDEX_MAX
"""Entries one walk looks at (the checkpoint copy's included, when a glob reaches it)."""
NOTES_MAX = 100
NOTE_PATH_MAX = 256
INDEX_PATH_MAX = 1024
KEEP_PATH_MAX = 1024
KEEP_DEPTH_MAX = 64
"""A file deeper than this, or with a longer relative path (bytes), is noted, not kept:
the bundle's own tools (digests, verifiers) then never meet an unbounded path."""

_CHUNK = 1 << 20
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NAME_BATCH = 1 << 16
_HOLD = 16  # folders of the walk's current path kept open (deeper: re-entered through ..)
LOOK_MAX = 32 << 20
"""Bytes of names and link targets the canary scan looks at beyond the index, per attempt."""
SCAN_CPU_S = 10.0
"""Seconds of thread CPU the canary scan of an attempt's evidence may take (the backstop
of its ScanBudget: past it the scan is incomplete, so not clean)."""
VERIFY_SCAN_CPU_S = 3 * SCAN_CPU_S
"""...and `evalrig verify`'s re-derivation of it, with room for a slower machine."""


def cut(text: str, limit: int) -> str:
    """`text` within `limit` UTF-8 bytes; a cut one ends with a mark saying how much went."""
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return data.decode("utf-8")
    return data[:limit].decode("utf-8", "ignore") + f"…[+{len(data) - limit} bytes]"


def printable(rel: str) -> str:
    """A walked name as text: bytes that are not UTF-8 written as \\xNN."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")


@dataclass
class EvidenceReport:
    """What was copied: kept bytes (after redaction), skipped entries, canary hits."""

    files: list[str] = field(default_factory=list)
    bytes: int = 0
    truncated: bool = False
    skipped: list[str] = field(default_factory=list)
    skipped_count: int = 0
    canary_in: list[str] = field(default_factory=list)
    index_entries: int = 0
    index_truncated: bool = False
    scan_s: float = 0.0  # of the time taken, what the canary scan cost (evalrig.attempt.stages)
    _noted: set[str] = field(default_factory=set, repr=False)

    def note(self, rel: str, why: str) -> None:
        """Skipped and noted: the first NOTES_MAX in full (names cut), then only counted."""
        if rel in self._noted:
            return
        self._noted.add(rel)
        self.skipped_count += 1
        if len(self.skipped) < NOTES_MAX:
            self.skipped.append(f"{cut(printable(rel), NOTE_PATH_MAX)} ({why})")


# -- globs -------------------------------------------------------------------------------


def _reaches_agent(pattern: str) -> bool:
    """Whether a glob could match something under agent/ (the walk then looks there)."""
    parts = pattern.strip("/").split("/")
    if len(parts) < 2 and parts[0] != "**":
        return False
    if parts[0] == "**":
        return True
    try:
        return re.fullmatch(segment_regex(parts[0]), AGENT_DIR) is not None
    except re.error:
        return False


# -- the walk ----------------------------------------------------------------------------


class Seen(NamedTuple):
    """One entry the walk looked at: its path relative to the root, type and size (lstat)."""

    rel: str
    mode: int
    size: int
    in_agent: bool = False

    @property
    def depth(self) -> int:
        return self.rel.count("/") + 1


@dataclass
class Walk:
    entries: list[Seen] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (rel, why)
    stopped: bool = False  # WALK_MAX reached: what follows was not looked at


@dataclass
class _Frame:
    rel: str
    ident: tuple[int, int]
    items: list[tuple[str, os.stat_result]]
    fd: int  # open while the walk is in this folder or below it, within _HOLD levels; else -1
    i: int = 0


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__


def _list(fd: int, room: int) -> tuple[list[tuple[str, os.stat_result]], bool]:
    """The directory's entries sorted by name, with their lstat; at most `room` (and
    whether there were more)."""
    items: list[tuple[str, os.stat_result]] = []
    more = False
    with os.scandir(fd) as it:
        for e in it:
            if len(items) >= room:
                more = True
                break
            try:
                items.append((e.name, e.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue  # gone since the listing
    items.sort(key=lambda t: t[0])
    return items, more


class Visit(NamedTuple):
    """One entry met by `iter_tree`: `dir_fd` is its folder, open while the visit lasts."""

    rel: str
    name: str
    st: os.stat_result
    dir_fd: int


@dataclass(frozen=True)
class Trouble:
    """A folder `iter_tree` could not enter or list, or the walk's end when the tree
    changed under it (`stop`)."""

    rel: str
    why: str
    stop: bool = False


def iter_tree(root: Path | str, descend: Callable[[str], bool] = lambda rel: True,
              room: Callable[[], int] = lambda: WALK_MAX) -> Iterator[Visit | Trouble]:
    """Every entry under `root` (each folder's entries sorted by name, a folder's
    contents right after it), no link followed, a folder entered only when
    `descend(rel)`; `room()` bounds how many entries of the next folder are listed.

    Iterative. A folder's listing is read whole; the folders of the current path stay
    open up to `_HOLD` levels (the common, shallow case costs no extra open), and deeper
    a folder is left for its subfolders and re-entered through `..`, checked against
    the identity it had. So any depth costs a bounded number of descriptors and no path
    is longer than one name. Raises OSError only when `root` itself cannot be opened.
    """
    fd = os.open(root, _DIR)
    frames: list[_Frame] = []
    try:
        try:
            st = os.fstat(fd)
            items, more = _list(fd, room())
        except BaseException:
            os.close(fd)
            raise
        # Every open folder is in `frames` before the next yield, so closing the generator
        # early (a caller that stops reading) closes them all in the finally below.
        frames.append(_Frame("", (st.st_dev, st.st_ino), items, fd))
        if more:
            yield Trouble(".", "too many entries", stop=True)
        while frames:
            f = frames[-1]
            if f.i >= len(f.items):
                frames.pop()
                if not frames:
                    os.close(f.fd)  # the root's: the finally below sees no frame left
                    break
                parent = frames[-1]
                if parent.fd >= 0:
                    os.close(f.fd)
                else:
                    parent.fd = _ascend(f.fd, parent.ident)  # closes the child's
                    if parent.fd < 0:
                        yield Trouble(parent.rel or ".", "changed while it was walked", stop=True)
                        return
                continue
            name, est = f.items[f.i]
            f.i += 1
            rel = f"{f.rel}/{name}" if f.rel else name
            yield Visit(rel, name, est, f.fd)
            if not stat.S_ISDIR(est.st_mode) or not descend(rel):
                continue
            try:
                child = os.open(name, _DIR, dir_fd=f.fd)
            except OSError as e:
                yield Trouble(rel, f"unreadable folder: {_why(e)}")
                continue
            try:
                cst = os.fstat(child)
                if (cst.st_dev, cst.st_ino) != (est.st_dev, est.st_ino):
                    raise OSError(errno.ESTALE, "replaced while it was walked")
                items, more = _list(child, room())
            except OSError as e:
                os.close(child)
                yield Trouble(rel, f"unreadable folder: {_why(e)}")
                continue
            if len(frames) >= _HOLD:
                os.close(f.fd)
                f.fd = -1
            frames.append(_Frame(rel, (cst.st_dev, cst.st_ino), items, child))
            if more:
                yield Trouble(rel, "too many entries", stop=True)
    finally:
        for f in frames:
            if f.fd >= 0:
                os.close(f.fd)


def walk(root: Path, into_agent: bool = False, limit: int = WALK_MAX,
         look: _Looker | None = None) -> Walk:
    """Every entry under `root` in `iter_tree` order, agent/ only when asked, at most
    `limit`. `look` sees each name (and each link's target) for the canary scan. Raises
    OSError only when `root` itself cannot be opened."""
    w = Walk()

    def descend(rel: str) -> bool:
        return into_agent or rel != AGENT_DIR

    for v in iter_tree(root, descend, lambda: limit - len(w.entries)):
        if isinstance(v, Trouble):
            if v.stop:
                w.stopped = True
            if v.why != "too many entries":
                w.problems.append((v.rel, v.why))
            continue
        in_agent = v.rel == AGENT_DIR or v.rel.startswith(AGENT_DIR + "/")
        if in_agent and not into_agent:
            continue
        if len(w.entries) >= limit:
            w.stopped = True
            break
        w.entries.append(Seen(v.rel, v.st.st_mode, v.st.st_size, in_agent))
        if look is not None:
            look.name(v.name)
            if stat.S_ISLNK(v.st.st_mode):
                look.link(v.name, v.dir_fd)
    return w


def _ascend(fd: int, ident: tuple[int, int]) -> int:
    """The parent of the open directory `fd`, if it is the one recorded (else -1)."""
    try:
        parent = os.open("..", _DIR, dir_fd=fd)
    except OSError:
        os.close(fd)
        return -1
    os.close(fd)
    st = os.fstat(parent)
    if (st.st_dev, st.st_ino) != ident:
        os.close(parent)
        return -1
    return parent


class _Looker:
    """The canary scan of names and link targets, fed in batches (a scan per name would
    cost more than the walk).

    Each entry's own name is scanned (its full path is in the index, which is scanned as
    an evidence file): linear in the tree, where full paths of a deep tree would be
    quadratic. Identical link targets are scanned once, and at most `LOOK_MAX` bytes of
    names and targets in all: a scan must not cost an attempt more than its walk.
    """

    def __init__(self, forms: Forms, budget: ScanBudget | None = None) -> None:
        self.names = StreamScanner(forms, shared=budget)
        self.links = StreamScanner(forms, shared=budget)
        self._names: list[bytes] = []
        self._links: list[bytes] = []
        self._targets: set[bytes] = set()
        self._size = 0
        self._room = LOOK_MAX

    def name(self, name: str) -> None:
        data = os.fsencode(name) + b"\n"
        self._names.append(data)
        self._grow(len(data))

    def link(self, name: str, dir_fd: int) -> None:
        if self._room <= 0:
            return
        try:
            target = os.fsencode(os.readlink(name, dir_fd=dir_fd))
        except OSError:
            return
        if target in self._targets:
            return
        self._targets.add(target)
        self._links.append(target + b"\n")
        self._grow(len(target) + 1)

    def _grow(self, n: int) -> None:
        self._size += n
        self._room -= n
        if self._size >= _NAME_BATCH:
            self.flush()

    def flush(self) -> None:
        if self._names:
            self.names.feed(b"".join(self._names))
        if self._links:
            self.links.feed(b"".join(self._links))
        self._names, self._links, self._size = [], [], 0


# -- removing a tree ---------------------------------------------------------------------


def remove_tree(path: Path | str) -> None:
    """Remove `path` and everything under it, whatever its depth or names.

    Iterative: the folders of the current path stay open up to `_HOLD` levels, deeper
    ones are re-entered through `..` (checked against the identity they had); a folder
    is opened by name from its parent, never through a link; a folder the agent made
    unreadable or read-only is opened up first. Raises OSError when something cannot be
    removed (all the rest is removed).
    """
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    stuck: set[tuple[int, int]] = set()
    tries: dict[tuple[int, int], int] = {}
    # the way down: [name in its parent, open fd or -1, identity]
    stack: list[list[Any]] = [[path, _open_dir(path, None), (st.st_dev, st.st_ino)]]
    try:
        while stack:
            top = stack[-1]
            sub = _clear_files(top[1], stuck)
            if sub is not None:
                try:
                    child = _open_dir(sub[0], top[1])
                except OSError:
                    stuck.add(sub[1])
                    continue
                if len(stack) >= _HOLD:
                    os.close(top[1])
                    top[1] = -1
                stack.append([sub[0], child, sub[1]])
                continue
            stack.pop()
            if not stack:
                os.close(top[1])
                break
            parent = stack[-1]
            if parent[1] >= 0:
                os.close(top[1])
            else:
                parent[1] = _ascend(top[1], parent[2])  # closes the child's fd
                if parent[1] < 0:
                    raise OSError(errno.ESTALE, "the tree changed while it was removed", path)
            try:
                os.rmdir(top[0], dir_fd=parent[1])
            except OSError:
                # something appeared in it meanwhile (an escaped process): look again, a
                # few times, then leave it
                tries[top[2]] = tries.get(top[2], 0) + 1
                if tries[top[2]] >= 3:
                    stuck.add(top[2])
    finally:
        for frame in stack:
            if frame[1] >= 0:
                os.close(frame[1])
    os.rmdir(path)


def _open_dir(name: str, dir_fd: int | None) -> int:
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=dir_fd)  # the agent's own folder, made unreadable
        return os.open(name, _DIR, dir_fd=dir_fd)


def _clear_files(fd: int, stuck: set[tuple[int, int]]) -> tuple[str, tuple[int, int]] | None:
    """Unlink every non-folder in the open folder (one listing: entries that are only
    removed are all listed); the first folder not yet stuck, if any."""
    opened = False
    with os.scandir(fd) as it:
        for e in it:
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) not in stuck:
                    return e.name, (st.st_dev, st.st_ino)
                continue
            try:
                os.unlink(e.name, dir_fd=fd)
            except PermissionError:
                if opened:
                    continue  # not ours to remove: the folder stays (rmdir notices)
                opened = True
                try:
                    os.fchmod(fd, 0o700)  # the agent made its folder read-only
                    os.unlink(e.name, dir_fd=fd)
                except OSError:
                    continue
            except OSError:
                continue  # gone already, or not ours to remove
    return None


# -- copying one file --------------------------------------------------------------------


def redact_bytes(data: bytes, secrets: Mapping[str, bytes]) -> bytes:
    r = Redactor(secrets)
    return r.feed(data) + r.flush()


_NOTE_WORD = {"link": "symlink", "fifo": "fifo", "socket": "socket"}


def _kind(mode: int) -> str:
    """The word a skip note gives an entry that is not a regular file (its index type,
    but "symlink" for a link and "special" for anything without a word of its own)."""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return _NOTE_WORD.get(index_type(mode), "special")


def index_type(mode: int) -> str:
    """The `type` of an evidence_index.json entry."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"


class _Opener:
    """Opens files beneath a root one component at a time, never following a link;
    the last folder stays open for the next file in it."""

    def __init__(self, root_fd: int) -> None:
        self.root = root_fd
        self._dir = ""
        self._fd = root_fd

    def open(self, rel: str) -> int:
        folder, _, name = rel.rpartition("/")
        if folder != self._dir:
            self._drop()
            fd = self.root
            try:
                for part in folder.split("/") if folder else ():
                    nfd = os.open(part, _DIR, dir_fd=fd)
                    if fd != self.root:
                        os.close(fd)
                    fd = nfd
            except OSError:
                if fd != self.root:
                    os.close(fd)
                raise
            self._dir, self._fd = folder, fd
        return os.open(name, _FILE, dir_fd=self._fd)

    def _drop(self) -> None:
        if self._fd != self.root:
            os.close(self._fd)
        self._dir, self._fd = "", self.root

    def close(self) -> None:
        self._drop()


@dataclass
class _Copy:
    ok: bool
    kept: int = 0
    canary: bool = False
    skip_reason: str | None = None
    scan_s: float = 0.0


def _copy_one(opener: _Opener, rel: str, dst: Path, budget: int, secrets: Mapping[str, bytes],
              forms: Forms, scan: ScanBudget) -> _Copy:
    """Copy one regular file within `budget` bytes; refuse anything fstat says is not regular.

    An error reading the attempt root skips the file (the agent's doing); an error
    writing the evidence raises (the rig's).
    """
    try:
        fd = opener.open(rel)
    except OSError as e:
        return _Copy(False, skip_reason=f"unreadable: {_why(e)}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return _Copy(False, skip_reason=_kind(st.st_mode))
        if st.st_size > budget:
            return _Copy(False, skip_reason="over the evidence cap")
        dst.parent.mkdir(parents=True, exist_ok=True)
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        red = Redactor(secrets)
        scanner = StreamScanner(forms, shared=scan)
        kept = 0
        scan_s = 0.0
        try:
            while True:
                try:
                    block = os.read(fd, _CHUNK)
                except OSError as e:
                    kept = -1
                    why = f"unreadable: {_why(e)}"
                    break
                if not block:
                    break
                began = time.perf_counter()
                scanner.feed(block)
                scan_s += time.perf_counter() - began
                data = red.feed(block)
                kept += len(data)
                if kept > budget:  # the file grew after fstat (nothing should still write)
                    break
                os.write(out, data)
            if kept >= 0:
                data = red.flush()
                kept += len(data)
                if kept <= budget:
                    os.write(out, data)
        finally:
            os.close(out)
        if kept < 0:
            os.unlink(dst)
            return _Copy(False, skip_reason=why)
        if kept > budget:
            os.unlink(dst)
            return _Copy(False, skip_reason="over the evidence cap")
        return _Copy(True, kept, scanner.found, scan_s=scan_s)
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


def candidates(entries: Sequence[Seen], globs: Sequence[str]) -> Iterator[Seen]:
    """out/ first (the answer files leading), then each glob's matches, every path once;
    folders are never candidates (their files are)."""
    seen: set[str] = set()
    out = [e for e in entries if (e.rel == "out" and not stat.S_ISDIR(e.mode))
           or (e.rel.startswith("out/") and not stat.S_ISDIR(e.mode))]
    out.sort(key=lambda e: (e.rel not in FIRST, e.rel))
    for e in out:
        seen.add(e.rel)
        yield e
    for pattern in globs:
        rx = glob_regex(pattern)
        if rx is None:
            continue
        for e in entries:
            if not stat.S_ISDIR(e.mode) and e.rel not in seen and rx.fullmatch(e.rel):
                seen.add(e.rel)
                yield e


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
    scan: ScanBudget | None = None,
) -> EvidenceReport:
    """Copy the attempt's evidence into `evidence_dir`, write its evidence_index.json and
    scan for the canary; `already` bytes of the cap are spent.

    `canary` holds the needles (the canary's random part). `make_out=False` creates out/
    only when something lands in it (a directory costs an mkdir on the hot path, and only
    a command verifier would look at an empty one). `exclude` names files the rig itself
    planted (the canary file), never taken. `scan` is the attempt's ScanBudget (its
    streams' scans spent from it too); this scan may take SCAN_CPU_S more of it. Whether
    it ran out is the caller's to read (`scan.incomplete`). Raises OSError only for a
    failure to write the evidence (the rig's); whatever the agent left is skipped and noted.
    """
    rep = EvidenceReport(bytes=already)
    forms = needle_forms(canary)
    scan = scan if scan is not None else ScanBudget()
    scan.limit_cpu(SCAN_CPU_S)
    look = _Looker(forms, scan) if forms else None
    if make_out:
        (evidence_dir / "out").mkdir(parents=True, exist_ok=True)
    try:
        w = walk(attempt_root, any(_reaches_agent(g) for g in globs), look=look)
    except OSError as err:
        w = Walk(problems=[(".", f"the attempt root could not be opened: {_why(err)}")])
    for rel, why in w.problems:
        rep.note(rel, why)
    if w.stopped:
        rep.note(f"(after {len(w.entries)} entries)", "walk stopped: too many entries")
    for seen in w.entries:
        if "/" not in seen.rel and seen.rel in EVIDENCE_RESERVED:
            rep.note(seen.rel, "reserved name")
    kept: set[str] = set()
    try:
        root_fd = os.open(attempt_root, _DIR)
    except OSError:
        root_fd = -1
    opener = _Opener(root_fd) if root_fd >= 0 else None
    try:
        for c in candidates(w.entries, globs):
            rel = c.rel
            if rel in exclude:
                continue
            if rel.split("/", 1)[0] in EVIDENCE_RESERVED:
                rep.note(rel, "reserved name")
                continue
            if not _utf8(rel):
                # The bundle's digest table is JSON: a name that is not UTF-8 cannot be
                # listed in it, and a copy would make the bundle fail its own verification.
                rep.note(rel, "name is not UTF-8")
                continue
            if c.depth > KEEP_DEPTH_MAX or len(rel.encode()) > KEEP_PATH_MAX:
                rep.note(rel, "path too long to keep")
                continue
            if not stat.S_ISREG(c.mode):
                rep.note(rel, _kind(c.mode))
                continue
            if rep.truncated or opener is None:
                continue
            got = _copy_one(opener, rel, evidence_dir / rel, cap - rep.bytes, secrets, forms, scan)
            rep.scan_s += got.scan_s
            if not got.ok:
                if got.skip_reason == "over the evidence cap":
                    rep.truncated = True
                else:
                    rep.note(rel, got.skip_reason or "not copied")
                continue
            kept.add(rel)
            rep.files.append(rel)
            rep.bytes += got.kept
            if got.canary:
                rep.canary_in.append(rel)
    finally:
        if opener is not None:
            opener.close()
            os.close(root_fd)
    index = _write_index(evidence_dir, w, kept, rep)
    began = time.perf_counter()
    if forms and StreamScanner(forms, shared=scan).feed_found(index):
        rep.canary_in.append(EVIDENCE_INDEX)
    if look is not None:
        look.flush()
        if look.names.found and EVIDENCE_INDEX not in rep.canary_in:
            rep.canary_in.append("entry names")
        if look.links.found:
            rep.canary_in.append("link targets")
    rep.scan_s += time.perf_counter() - began
    return rep


def evidence_digest(evidence_dir: Path) -> tuple[str, int]:
    """The digest and size of an attempt's evidence as its result records them: the
    verifier's own output left out (it is re-derived, not evidence); an evidence
    directory that was never made digests as empty."""
    if not Path(evidence_dir).is_dir():
        return sha256_bytes(b""), 0
    tree = hash_tree(Path(evidence_dir), exclude=frozenset({VERIFIER_DIR}))
    return tree.digest, tree.bytes


def _write_index(evidence_dir: Path, w: Walk, kept: set[str], rep: EvidenceReport) -> bytes:
    """Write evidence_index.json; returns its bytes (scanned for the canary as written)."""
    entries: list[dict[str, object]] = []
    size = 0
    for e in w.entries:
        if e.in_agent:
            continue
        path = cut(printable(e.rel), INDEX_PATH_MAX)
        size += len(path) + _INDEX_ENTRY_BYTES
        if len(entries) >= INDEX_MAX or size > INDEX_BYTES_MAX:
            rep.index_truncated = True
            break
        entries.append({"path": path, "type": index_type(e.mode), "size": max(e.size, 0),
                        "kept": e.rel in kept})
    rep.index_truncated |= w.stopped
    rep.index_entries = len(entries)
    doc = {"schema_version": "1.0", "entries": entries, "truncated": rep.index_truncated}
    evidence_dir.mkdir(parents=True, exist_ok=True)
    data = canonical_json(doc) + b"\n"
    (evidence_dir / EVIDENCE_INDEX).write_bytes(data)
    return data


def scan_file(path: Path, needles: Sequence[bytes] | Forms) -> bool:
    """Whether a (rig-written) file holds a needle in any form, read in chunks."""
    scanner = StreamScanner(needles)
    try:
        with open(path, "rb") as f:
            while not scanner.found and (block := f.read(_CHUNK)):
                scanner.feed(block)
    except FileNotFoundError:
        return False
    return scanner.found


def rederive_canary(evidence_dir: Path, needle: bytes) -> list[str]:
    """Where the stored evidence of one attempt holds the canary (`evalrig verify`).

    The scan the attempt ran, over what it kept: every file but the verifier's output
    (`stdout.txt`, `stderr.txt`, the copies, `evidence_index.json`), and the end of
    `stdout.txt` followed by the start of `stderr.txt`, within one ScanBudget: what the
    attempt kept is at most what it scanned, so a scan the attempt finished spends no more
    bytes here; a budget that runs out (or the CPU backstop, VERIFY_SCAN_CPU_S) is named
    in the answer as the attempt names it (streams.INCOMPLETE_BYTES, INCOMPLETE_CPU).
    """
    forms = needle_forms([needle])
    if not forms or not evidence_dir.is_dir():
        return []
    budget = ScanBudget(cpu_s=VERIFY_SCAN_CPU_S)
    where: list[str] = []
    scanners: dict[str, StreamScanner] = {}
    root = os.fspath(evidence_dir)

    def descend(rel: str) -> bool:
        return rel != "verifier"

    for v in iter_tree(root, descend):
        if not isinstance(v, Visit) or not stat.S_ISREG(v.st.st_mode):
            continue
        scanner = StreamScanner(forms, shared=budget)
        try:
            fd = os.open(v.name, _FILE, dir_fd=v.dir_fd)
        except OSError:
            continue
        try:
            while not scanner.found and (block := os.read(fd, _CHUNK)):
                scanner.feed(block)
        finally:
            os.close(fd)
        if v.rel in ("stdout.txt", "stderr.txt"):
            scanners[v.rel] = scanner
        if scanner.found:
            where.append(v.rel)
    out, err = scanners.get("stdout.txt"), scanners.get("stderr.txt")
    if not where and out is not None and err is not None and out.seam_found(err):
        where.append("stdout+stderr")
    return where + list(budget.incomplete)
