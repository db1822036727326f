"""The release log file: `$EVALRIG_HOME/releases.jsonl`, or `--log FILE` (docs/release-engineers.md).

Append-only and hash-chained (each line's `prev` is the bare hex sha256 of the previous
line's bytes without its newline, null on the first): the chain is verified before every
read and every append, and a broken one is refused (exit 4) naming the first bad line. A
torn last line (a crash during an append) is reported by `read_log`, never read, and cut
before the next append. Appends are whole synced lines under the file's exclusive lock, so
two commands never interleave; `appending` holds that lock from the verification to the
last line appended, for a command that reads then appends (ship's checks against what
serves, tripwire's event and its automatic rollback, watch's alerts).

A hash chain cannot see an edit of its last line (no line after it names its hash), nor
the removal of its last lines. So each append also records the last line's sha256 in a
small file beside the log, `.NAME.head`; a log whose head names no line of it (the last
line edited, lines cut from its end) or names its torn tail (a complete line whose newline
was removed) is refused as well. A head one line behind is a crash between the two writes.
A missing head (a log written by hand, or by an older rig) is not checked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from evalrig.core.errors import EvalrigError, invalid
from evalrig.models.releases import (
    AlertEvent,
    Event,
    ReleaseLine,
    RollbackEvent,
    ShipEvent,
    TripwireEvent,
)
from evalrig.store.files import write_bytes_atomic
from evalrig.store.jsonl import (
    Chain,
    ChainWriter,
    chain_hash,
    chain_records,
    chained_append,
    verify_chain,
)
from evalrig.store.layout import RELEASES
from evalrig.store.ledger import ensure_dir

E = TypeVar("E", ShipEvent, TripwireEvent, RollbackEvent, AlertEvent)


def log_path(home: Path, log: Path | None = None) -> Path:
    """`--log FILE` when given, else the home's release log."""
    return Path(log) if log is not None else Path(home) / RELEASES


@dataclass(frozen=True)
class ReleaseLog:
    path: Path
    events: list[Event]
    torn_line: int | None
    """1-based number of a torn last line that was not read (cut before the next append)."""


def _events(path: Path, lines: list[ReleaseLine]) -> list[Event]:
    events = [ln.root for ln in lines]
    for i, e in enumerate(events):
        if e.seq != i:
            raise invalid(f"its seq is {e.seq}, but it is event {i} of the log (seq counts lines from 0)",
                          file=path, line=i + 1, field="seq", hint=BROKEN_HINT)
    return events


BROKEN_HINT = ("the release log is append-only and only the rig writes it: something else edited it; nothing "
               "was read from it or written to it. Restore it from a backup (`history --verify-only` says where "
               "it breaks)")


def _refused_unreadable(path: Path, e: OSError) -> EvalrigError:
    return invalid(f"cannot be used as the release log ({e.strerror or e})", file=path,
                   hint="give --log a file you may read and write, or point EVALRIG_HOME at the rig's home")


def head_path(path: Path) -> Path:
    """The file beside the log that records its last line's sha256: `.NAME.head`."""
    return Path(path).with_name(f".{Path(path).name}.head")


def _read_head(path: Path) -> str | None:
    try:
        text = head_path(path).read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise invalid(f"cannot be read ({e})", file=head_path(path),
                      hint="the rig writes this file beside the release log; restore it, or remove it "
                      "(the log is then checked by its chain alone)") from None
    return text


def _check_head(path: Path, chain: Chain, head: str | None) -> None:
    if head is None:
        return
    if chain.tail and chain_hash(chain.tail) == head:
        raise invalid("this line is whole as the rig wrote it, but its newline was removed: it would be cut "
                      "as a torn line", file=path, line=chain.torn_line, hint=BROKEN_HINT)
    if head in chain.hashes:
        return
    line = max(1, len(chain.hashes))
    raise invalid(f"the file's last line is not the one the rig last appended ({head_path(path).name} records "
                  f"sha256 {head}, and no line has it): a line was edited, or lines were removed from the end",
                  file=path, line=line, hint=BROKEN_HINT)


def read_chain(path: Path) -> Chain | None:
    """The log's lines as parsed objects, after verifying the chain and the head (exit 4 naming
    the first bad line), not yet read as events; None for a missing log. For a reader that
    needs only a few fields of many lines (`watch`); `read_log` reads every event."""
    path = Path(path)
    if path.is_dir():
        raise invalid("is a directory, not a release log", file=path,
                      hint="give --log the release log file (releases.jsonl)")
    head = _read_head(path)  # before the log: a concurrent append only adds lines after it
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _refused_unreadable(path, e) from None
    try:
        chain = verify_chain(path, data, strict=True)
    except EvalrigError as e:
        raise _with_hint(e) from None
    _check_head(path, chain, head)
    return chain


def events_of(path: Path, chain: Chain) -> list[Event]:
    """Every event of a verified chain (exit 4 naming a line that is no event)."""
    try:
        return _events(path, chain_records(path, chain, ReleaseLine))
    except EvalrigError as e:
        raise _with_hint(e) from None


def read_log(path: Path) -> ReleaseLog:
    """Every event, after verifying the chain (exit 4 naming the first bad line). A missing
    or empty log has no events."""
    chain = read_chain(path)
    if chain is None:
        return ReleaseLog(Path(path), [], None)
    return ReleaseLog(Path(path), events_of(Path(path), chain), chain.torn_line)


def _with_hint(e: EvalrigError) -> EvalrigError:
    if e.line is None:
        return e
    return EvalrigError(e.message, e.code, e.file, e.field, e.line, BROKEN_HINT, e.problems)


class LogWriter:
    """What `appending` yields: the events as verified, and `append`."""

    def __init__(self, path: Path, chain: ChainWriter[ReleaseLine], events: list[Event]) -> None:
        self.path = path
        self._chain = chain
        self.events = events
        self.torn_cut = chain.torn_cut
        """The 1-based number of a torn last line cut before appending, if any."""

    def append(self, event: E) -> E:
        """Append `event` with its `seq` and `prev` set, synced before returning; returns it as written."""
        placed = event.model_copy(update={"seq": len(self.events)})
        written = self._chain.append(ReleaseLine(placed)).root
        self.events.append(written)
        return written  # type: ignore[return-value]  # the same kind as given


@contextlib.contextmanager
def appending(path: Path) -> Iterator[LogWriter]:
    """The release log under its exclusive lock, verified (exit 4 naming the first bad line), a
    torn last line cut; every `append` in the block is a whole synced line."""
    path = Path(path)
    if path.is_dir():
        raise invalid("is a directory, not a release log", file=path,
                      hint="give --log the release log file (releases.jsonl)")
    ensure_dir(path.parent)
    with contextlib.ExitStack() as stack:
        try:
            chain = stack.enter_context(chained_append(path, ReleaseLine, strict=True))
        except EvalrigError as e:
            raise _with_hint(e) from None
        except OSError as e:
            raise _refused_unreadable(path, e) from e
        _check_head(path, chain.chain, _read_head(path))
        writer = LogWriter(path, chain, _events(path, chain.records))
        before = chain.last_hash
        try:
            yield writer
        finally:
            if chain.last_hash != before and chain.last_hash is not None:
                write_bytes_atomic(head_path(path), chain.last_hash.encode() + b"\n")


def append_event(path: Path, event: E) -> E:
    with appending(path) as log:
        return log.append(event)
