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
import hashlib
from collections.abc import Iterator, MutableSequence, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from evalrig.core.digest import canonical_json, loads
from evalrig.core.errors import EvalrigError, invalid
from evalrig.core.releases import RELEASE_KINDS, Move, Serving, serving
from evalrig.core.words import count
from evalrig.store.chain import Chain, chain_hash, verify_chain, whole_lines
from evalrig.store.layout import RELEASES, VERIFIED_LOGS

if TYPE_CHECKING:  # the models and pydantic are imported when an event is validated (see below)
    from evalrig.models.releases import Event, ReleaseLine, ShipEvent
    from evalrig.store.jsonl import ChainWriter
    from evalrig.store.signing import Keyring

E = TypeVar("E", bound="Event")
RECORD_VERSION = "3.0"
"""2.0: the record also says the lines it covers had their signatures checked (`signed`)."""

BROKEN_HINT = ("the release log is append-only and only the rig writes it: something else edited it; nothing "
               "was read from it or written to it. Restore it from a backup (`history --verify-only` says where "
               "it breaks)")


def log_path(home: Path, log: Path | None = None) -> Path:
    """`--log FILE` when given, else the home's release log."""
    return Path(log) if log is not None else Path(home) / RELEASES


def head_path(path: Path) -> Path:
    """The file beside the log that records its last line's sha256: `.NAME.head`."""
    return Path(path).with_name(f".{Path(path).name}.head")


# -- what every line is checked for ------------------------------------------------------
#
# Validating every event against its model costs ~25 us a line (a quarter of a second for a
# log of 10,000 events), and importing the models and pydantic a tenth of a second more: more
# than `ship` and `champion` may take in all. So every line is parsed, hashed and checked for
# its `prev`, its `seq`, its major version and the fields the serving rules read (`_move`); a
# whole event is validated when a command uses it (`event`), and only then are the models
# imported.


def _is(obj: Any, key: str, *kinds: type) -> bool:
    return isinstance(obj, dict) and type(obj.get(key)) in kinds


def _usable(row: dict[str, Any]) -> bool:
    v, kind = row.get("schema_version"), row.get("kind")
    if not (type(v) is str and v.startswith("1.")) or type(row.get("seq")) is not int:
        return False
    if kind == "ship":
        cand, policy = row.get("candidate"), row.get("policy")
        return _is(cand, "checkpoint_id", str) and _is(cand, "name", str) and _is(row, "replaces", str, type(None)) \
            and _is(row.get("decision"), "digest", str) and _is(policy, "name", str) \
            and _is(policy, "version", int) and _is(policy, "digest", str)
    if kind == "rollback":
        return _is(row, "to", str) and _is(row, "from", str) and _is(row, "evidence", int, type(None))
    if kind == "tripwire":
        return _is(row.get("bundle"), "digest", str) and _is(row, "checkpoint_id", str) and _is(row, "held", bool)
    return kind == "alert" and _is(row, "alert_id", str)


def _validated(path: Path, line: int, row: dict[str, Any]) -> Event:
    from pydantic import ValidationError

    from evalrig.models.releases import ReleaseLine
    from evalrig.store.files import invalid_from_validation

    try:
        return ReleaseLine.model_validate(row).root
    except ValidationError as e:
        err = invalid_from_validation(e, path, line)
        raise (_with_hint(err) if isinstance(err, EvalrigError) else err) from None


def _move(path: Path, line: int, row: dict[str, Any]) -> Move | None:
    if not _usable(row):
        _validated(path, line, row)  # raises, naming the field
        raise invalid("the line does not match its schema", file=path, line=line, hint=BROKEN_HINT)
    if row["seq"] != line - 1:
        raise invalid(f"its seq is {row['seq']}, but it is event {line - 1} of the log (seq counts lines from 0)",
                      file=path, line=line, field="seq", hint=BROKEN_HINT)
    if "sig" not in row:
        return None  # a legacy (unsigned) line: shown, never believed for what serves
    if row["kind"] == "ship":
        return Move(line - 1, "ship", row["candidate"]["checkpoint_id"], row["replaces"])
    if row["kind"] == "rollback":
        return Move(line - 1, "rollback", row["to"], row["from"])
    return None


def _moves(path: Path, rows: Sequence[dict[str, Any]], first: int = 0) -> list[Move]:
    """Every line checked (`_move`) from line `first` (0-based) on; the release events' moves."""
    moves = [_move(path, i, rows[i - 1]) for i in range(first + 1, len(rows) + 1)]
    return [m for m in moves if m is not None]


class Rows(MutableSequence[dict[str, Any]]):
    """A verified log's lines, each parsed when first used: a command that reads a few events
    of a long log (`champion`, `ship`) does not pay for the rest. Lines appended are kept as
    given."""

    def __init__(self, lines: list[bytes], parsed: dict[int, dict[str, Any]] | None = None) -> None:
        self._lines = lines
        self._parsed = parsed or {}
        self._added: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self._lines) + len(self._added)

    def __getitem__(self, i: int) -> dict[str, Any]:  # type: ignore[override]  # no slices
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i >= len(self._lines):
            return self._added[i - len(self._lines)]
        got = self._parsed.get(i)
        if got is None:
            got = self._parsed[i] = loads(self._lines[i])
        return got

    def __setitem__(self, i: int, row: dict[str, Any]) -> None:  # type: ignore[override]
        raise TypeError("a release log's lines are not changed")

    def __delitem__(self, i: int) -> None:  # type: ignore[override]
        raise TypeError("a release log's lines are not removed")

    def insert(self, i: int, row: dict[str, Any]) -> None:
        if i != len(self):
            raise TypeError("lines are only appended to a release log")
        self._added.append(row)


# -- what was verified before --------------------------------------------------------------
#
# Every read and every append verifies the whole log; for a log of 10,000 events that is
# most of what `ship` and `champion` cost. So after each verification the rig records, in
# its home (`verified-logs/`), the sha256 of the bytes it verified and what it read from them
# (their lines, the last one's hash, the release events' moves). A later command whose log
# starts with bytes of that sha256 checks only the lines after them, by the same rules; any
# doubt (no record, another digest, a line after them that does not hold, a head file that
# names none of the lines it checked) and it verifies the whole log as before. The record is
# the home's, written by the rig, never a file beside the log: what serves is read from the
# log's lines or from what the rig itself found in them.


@dataclass(frozen=True)
class _Verified:
    rows: MutableSequence[dict[str, Any]]
    moves: list[Move]
    end: int
    """Bytes up to the last complete line's newline."""
    torn_line: int | None
    last_hash: str | None


def _record_path(home: Path, log: Path) -> Path:
    return Path(home) / VERIFIED_LOGS / f"{hashlib.sha256(str(Path(log).resolve()).encode()).hexdigest()[:32]}.json"


def _read_record(home: Path | None, log: Path) -> dict[str, Any] | None:
    """The home's record of this log, when it is one this rig wrote; None otherwise."""
    if home is None:
        return None
    try:
        rec = loads(_record_path(home, log).read_bytes())
    except (OSError, ValueError):
        return None
    ok = (isinstance(rec, dict) and rec.get("schema_version") == RECORD_VERSION
          and rec.get("log") == str(Path(log).resolve()) and type(rec.get("bytes")) is int
          and type(rec.get("lines")) is int and type(rec.get("sha256")) is str
          and type(rec.get("last")) in (str, type(None)) and isinstance(rec.get("moves"), list)
          and type(rec.get("signed")) is bool)
    if not ok:
        return None
    try:
        moves = [Move(seq, kind, to, out) for seq, kind, to, out in rec["moves"]]
    except (TypeError, ValueError):  # not four items each
        return None
    if not all(type(m.seq) is int and m.kind in RELEASE_KINDS and type(m.to) is str
               and type(m.out) in (str, type(None)) for m in moves):
        return None
    rec["moves"] = moves
    return rec


def _write_record(home: Path | None, log: Path, digest: str, end: int, lines: int, last: str | None,
                  moves: list[Move], signed: bool) -> None:
    """Best effort: a home that cannot take it only means the next command verifies it all."""
    if home is None or not Path(home).is_dir():
        return
    from evalrig.store.files import write_bytes_atomic

    rec = {"schema_version": RECORD_VERSION, "log": str(Path(log).resolve()), "bytes": end, "lines": lines,
           "sha256": digest, "last": last, "moves": [[m.seq, m.kind, m.to, m.out] for m in moves],
           "signed": signed}
    try:
        (Path(home) / VERIFIED_LOGS).mkdir(mode=0o700, exist_ok=True)
        write_bytes_atomic(_record_path(home, log), canonical_json(rec) + b"\n")
    except OSError:
        pass


def _signed(path: Path, rows: Sequence[dict[str, Any]], keys: Path, start: int = 0, before: bool = False) -> bool:
    """Every signed line from `start` checked against the home's key and the keys it trusts for
    `release-log` (store/signing.py; exit 4 naming the line); True when the log has a signed line."""
    from evalrig.store.signing import check_signed, keyring

    if not before and not any("sig" in rows[i] for i in range(start, len(rows))):
        return False  # legacy lines: no key needed
    ring = keyring(keys)
    try:
        first = check_signed(path, rows, ring, "release-log", start, before)
        _check_relied_on(path, rows, ring, keys, start)
    except EvalrigError as e:
        raise _with_hint(e) from None
    return before or first is not None


def _check_relied_on(path: Path, rows: Sequence[dict[str, Any]], ring: Keyring, home: Path, start: int) -> None:
    """Every signed `ship` from `start` embeds the signed gate-ledger and sign-off lines it relied on:
    signed by the ship's own key, of its decision, a non-advisory gate and an approval; and, when the
    ship's key is the home's own, lines the home's files hold (docs/security.md)."""
    from evalrig.store.chain import chain_broken
    from evalrig.store.layout import GATES, HOME_SIGNOFFS

    held: dict[str, set[str]] = {}

    def in_home(name: str) -> set[str]:
        if name not in held:
            try:
                data = (Path(home) / name).read_bytes()
            except OSError:
                data = b""
            held[name] = {chain_hash(x) for x in whole_lines(data)[0]}
        return held[name]

    for i in range(start, len(rows)):
        row = rows[i]
        if row.get("kind") != "ship" or "sig" not in row:
            continue
        rel = row.get("relied_on")
        digest = row["decision"]["digest"]
        if rel is None:
            continue  # not written by `ship` (a library caller's event): the signature alone vouches for it
        if not isinstance(rel, dict):
            raise chain_broken(path, i + 1, "relied_on is not the gate and sign-off lines this ship relied on")
        for what, name in (("gate", GATES), ("signoff", HOME_SIGNOFFS)):
            line = rel.get(what)
            if not isinstance(line, dict) or line.get("key") != row.get("key"):
                raise chain_broken(path, i + 1, f"relied_on.{what} is not a line signed by the ship's own key")
            why = ring.verifies(line, "release-log")
            if why is not None:
                raise chain_broken(path, i + 1, f"relied_on.{what}: {why}")
            if line.get("decision_digest") != digest:
                raise chain_broken(path, i + 1, f"relied_on.{what} is about another decision than {digest}")
            if row.get("key") == ring.home and chain_hash(canonical_json(line)) not in in_home(name):
                raise chain_broken(path, i + 1, f"relied_on.{what} is not a line of this home's {name}: the "
                                   "home never recorded the decision this ship claims")
        if rel["gate"].get("advisory") is not False or rel["signoff"].get("action") != "approve":
            raise chain_broken(path, i + 1, "relied_on: not a non-advisory gate and an approving sign-off")


def keys_home(home: Path | None) -> Path:
    """The home whose key and trusted keys verify a release log: the one given, else $EVALRIG_HOME."""
    import os

    from evalrig.store.layout import home_path

    return Path(home) if home is not None else home_path(os.environ)


def _unlike_record(path: Path, data: bytes, home: Path) -> EvalrigError | None:
    """The home's record of a log binds (docs/security.md): a log shorter than, or not an
    extension of, what this home last verified or appended is refused (exit 4), missing too."""
    rec = _read_record(home, path)
    if rec is None or rec["lines"] == 0:
        return None
    start = rec["bytes"]
    if len(data) < start or hashlib.sha256(data[:start]).hexdigest() != rec["sha256"]:
        what = "is missing or empty" if not data else "does not begin with"
        return invalid(f"the log {what} the {count(rec['lines'], 'line')} this home last verified or appended "
                      f"({_record_path(home, path)}): lines were removed or replaced", file=path,
                      hint="restore the log from a backup; the rig never shortens or rewrites a release log")
    return None


def _check_home_heads(path: Path, data: bytes, end: int, home: Path) -> None:
    """The home's own releases.jsonl is held to the other home files' `heads`, as each of them is."""
    from evalrig.store.signing import check_heads

    if Path(path).resolve() == (Path(home) / RELEASES).resolve():
        check_heads(home, {RELEASES: whole_lines(data[:end])[0]})


def _verify(path: Path, data: bytes, head: str | None, home: Path | None) -> _Verified:
    """The log's bytes verified (exit 4 naming the first bad line), through the home's record
    of what was verified before where it still holds; the record brought up to date."""
    home = keys_home(home)
    unlike = _unlike_record(path, data, home)
    v = _verify_all(path, data, head, home, unlike is None)  # a broken line is named first
    if unlike is not None:
        raise unlike
    _check_home_heads(path, data, v.end, home)
    return v


def _verify_all(path: Path, data: bytes, head: str | None, home: Path, record: bool) -> _Verified:
    fast = _verify_after_record(path, data, head, home)
    if fast is not None:
        return fast
    try:
        chain = verify_chain(path, data, strict=True)
    except EvalrigError as e:
        raise _with_hint(e) from None
    _check_head(path, chain, head)
    rows = list(chain.objs)
    moves = _moves(path, rows)
    signed = _signed(path, rows, keys_home(home))
    if chain.objs and record:
        _write_record(home, path, hashlib.sha256(data[:chain.end]).hexdigest(), chain.end, len(rows),
                      chain.next_prev, moves, signed)
    return _Verified(rows, moves, chain.end, chain.torn_line, chain.next_prev)


def _verify_after_record(path: Path, data: bytes, head: str | None, home: Path | None) -> _Verified | None:
    rec = _read_record(home, path)
    if rec is None:
        return None
    start, end = rec["bytes"], data.rfind(b"\n") + 1
    if start > end or hashlib.sha256(data[:start]).hexdigest() != rec["sha256"]:
        return None
    lines, torn = whole_lines(data)
    if len(lines) < rec["lines"]:
        return None
    last: str | None = rec["last"]
    known = {last} if last is not None else set()
    parsed: dict[int, dict[str, Any]] = {}
    for i in range(rec["lines"], len(lines)):
        try:
            row = loads(lines[i])
        except ValueError:
            return None
        if type(row) is not dict or row.get("prev", "absent") != last:
            return None
        parsed[i] = row
        last = chain_hash(lines[i])
        known.add(last)
    tail = data[end:]
    if head is not None and (head not in known or (tail and chain_hash(tail) == head)):
        return None  # the whole log's check says what is wrong, or that an older head is fine
    rows = Rows(lines, parsed)
    moves: list[Move] = list(rec["moves"])
    try:
        moves += _moves(path, rows, first=rec["lines"])
        signed = _signed(path, rows, keys_home(home), rec["lines"], rec["signed"])
    except EvalrigError:
        return None
    if len(lines) > rec["lines"]:
        _write_record(home, path, hashlib.sha256(data[:end]).hexdigest(), end, len(lines), last, moves, signed)
    return _Verified(rows, moves, end, torn, last)


class ReleaseLog:
    """The release log as verified: every line's chain, seq and the fields the serving rules
    use; whole events validated on use (`event`, `events`)."""

    def __init__(self, path: Path, rows: MutableSequence[dict[str, Any]], torn_line: int | None,
                 moves: list[Move] | None = None) -> None:
        self.path = path
        self.rows = rows
        self.torn_line = torn_line
        """1-based number of a torn last line that was not read (cut before the next append)."""
        self.moves: list[Move] = _moves(path, rows) if moves is None else moves
        self._events: dict[int, Event] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def event(self, seq: int) -> Event:
        got = self._events.get(seq)
        if got is None:
            got = self._events[seq] = _validated(self.path, seq + 1, self.rows[seq])
        return got

    @property
    def events(self) -> list[Event]:
        return [self.event(i) for i in range(len(self.rows))]

    def seqs(self, kind: str) -> list[int]:
        if kind in RELEASE_KINDS:  # known without reading every line again
            return [m.seq for m in self.moves if m.kind == kind]
        return [i for i, row in enumerate(self.rows) if row["kind"] == kind]

    def serving(self) -> Serving | None:
        return serving(self.moves)

    def ship(self, seq: int | None) -> ShipEvent | None:
        e = None if seq is None else self.event(seq)
        return e if e is not None and e.kind == "ship" else None

    def _added(self, row: dict[str, Any], event: Event) -> None:
        self.rows.append(row)
        self._events[event.seq] = event
        m = Move.of(event)
        if m is not None:
            self.moves.append(m)


def _refused_unreadable(path: Path, e: OSError) -> EvalrigError:
    return invalid(f"cannot be used as the release log ({e.strerror or e})", file=path,
                   hint="give --log a file you may read and write, or point EVALRIG_HOME at the rig's home")


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
    raise invalid(f"the file's last line is not the one the rig last appended ({head_path(path).name} records "
                  f"sha256 {head}, and no line has it): a line was edited, or lines were removed from the end",
                  file=path, line=max(1, len(chain.hashes)), hint=BROKEN_HINT)


def _with_hint(e: EvalrigError) -> EvalrigError:
    if e.line is None:
        return e
    return EvalrigError(e.message, e.code, e.file, e.field, e.line, BROKEN_HINT, e.problems)


def _refuse_dir(path: Path) -> None:
    if path.is_dir():
        raise invalid("is a directory, not a release log", file=path,
                      hint="give --log the release log file (releases.jsonl)")


def read_log(path: Path, home: Path | None = None) -> ReleaseLog:
    """The log, after verifying it (exit 4 naming the first bad line). A missing or empty log
    has no events. `home`: the rig's home, whose record of what it verified before spares
    checking those lines again (see above); None, every line is checked."""
    path = Path(path)
    _refuse_dir(path)
    head = _read_head(path)  # before the log: a concurrent append only adds lines after it
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        unlike = _unlike_record(path, b"", keys_home(home))
        if unlike is not None:
            raise unlike from None
        _check_home_heads(path, b"", 0, keys_home(home))
        return ReleaseLog(path, [], None)
    except OSError as e:
        raise _refused_unreadable(path, e) from None
    v = _verify(path, data, head, home)
    return ReleaseLog(path, v.rows, v.torn_line, v.moves)


def read_verified_prefix(path: Path, home: Path | None = None) -> tuple[ReleaseLog, EvalrigError | None]:
    """For a reader that must show a broken log rather than refuse it (`report --log`,
    docs/report.md): the log as `read_log` verifies it and, when it does not verify, its lines
    before the first one at which verification fails, and that failure. Every event returned
    is validated whole. The rules are `read_log`'s, applied to ever shorter prefixes: each
    failure names an earlier line than the last, and a prefix is cut before it."""
    path = Path(path)
    try:
        log = read_log(path, home)
        log.events  # noqa: B018 - validates every event, raising at the first that fails
        return log, None
    except EvalrigError as e:
        if e.line is None:  # not a log that can be read at all
            raise
        failure = e
    data = path.read_bytes()
    while failure.line is not None and failure.line > 1:
        data = b"".join(line + b"\n" for line in data.split(b"\n")[:failure.line - 1])  # the lines before it
        try:
            chain = verify_chain(path, data, strict=True)  # the head names a later line: not checked
            _signed(path, chain.objs, keys_home(home))
            log = ReleaseLog(path, list(chain.objs), None)
            log.events  # noqa: B018
            return log, failure
        except EvalrigError as e:
            failure = _with_hint(e)
    return ReleaseLog(path, [], None), failure


class LogWriter(ReleaseLog):
    """What `appending` yields: the log as verified under its lock, and `append`."""

    def __init__(self, path: Path, chain: ChainWriter[ReleaseLine], verified: _Verified) -> None:
        super().__init__(path, verified.rows, verified.torn_line, verified.moves)
        self._chain = chain
        self.torn_cut = chain.torn_cut
        """The 1-based number of a torn last line cut before appending, if any."""

    def append(self, event: E) -> E:
        """Append `event` with its `seq` and `prev` set, synced before returning; returns it as written."""
        from evalrig.models.releases import ReleaseLine

        placed = event.model_copy(update={"seq": len(self.rows)})
        written = self._chain.append(ReleaseLine(placed)).root
        self._added(written.model_dump(mode="json"), written)
        return written  # type: ignore[return-value]  # the same kind as given


@contextlib.contextmanager
def appending(path: Path, home: Path | None = None) -> Iterator[LogWriter]:
    """The release log under its exclusive lock, verified (exit 4 naming the first bad line), a
    torn last line cut; every `append` in the block is a whole synced line. `home`: as for
    `read_log`."""
    from evalrig.models.releases import ReleaseLine
    from evalrig.store.files import write_bytes_atomic
    from evalrig.store.jsonl import chained_append
    from evalrig.store.ledger import ensure_dir

    path = Path(path)
    _refuse_dir(path)
    ensure_dir(path.parent)
    seen: list[_Verified] = []
    found: list[bytes] = []

    def verify(p: Path, data: bytes) -> Chain:
        v = _verify(p, data, _read_head(p), home)
        if len(v.rows) and "sig" not in v.rows[0]:  # after a signed line, every line is (store/signing.py)
            raise invalid("the log holds lines this home never signed (legacy lines, never believed): the "
                          "rig appends no signed line after them", file=p, line=1,
                          hint="start a new release log (--log) from a ship this home signs")
        seen.append(v)
        found.append(data[:v.end])
        return Chain(v.rows, [], data[v.end:], v.end, v.torn_line, v.last_hash)

    with contextlib.ExitStack() as stack:
        try:
            chain = stack.enter_context(chained_append(path, ReleaseLine, strict=True, validate=False,
                                                       verify=verify, home=keys_home(home)))
        except OSError as e:
            raise _refused_unreadable(path, e) from e
        writer = LogWriter(path, chain, seen[-1])
        before = chain.last_hash
        try:
            yield writer
        finally:
            if chain.last_hash != before and chain.last_hash is not None:
                write_bytes_atomic(head_path(path), chain.last_hash.encode() + b"\n")
                # The home's record now holds what it appended: a log cut back is refused.
                wrote = found[-1] + b"".join(line + b"\n" for line in chain.appended)
                _write_record(keys_home(home), path, hashlib.sha256(wrote).hexdigest(), len(wrote),
                              len(writer.rows), chain.last_hash, writer.moves, True)


def append_event(path: Path, event: E, home: Path | None = None) -> E:
    with appending(path, home) as log:
        return log.append(event)
