"""The release log's store and its pure rules: the chain as docs/release-engineers.md states it
(recomputed here), torn and edited lines, locked appends, who serves and what `previous` is."""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from evalrig.core.errors import EvalrigError, ExitCode
from evalrig.core.releases import Move, Serving, moves_of, previous, served, serving
from evalrig.models.comparison import PolicyRef
from evalrig.models.inputs import PolicyTripwires, PolicyWatch
from evalrig.models.releases import (
    AlertEvent,
    DecisionRef,
    ReleaseEvent,
    RollbackEvent,
    ShipEvent,
    ShippedCandidate,
    TripwireEvent,
)
from evalrig.store.releases import (
    append_event,
    appending,
    head_path,
    read_log,
    read_verified_prefix,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True, params=["every line", "after the home's record"])
def verified_how(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test twice: reading and appending with no home (every line checked), and with a
    home whose record of what was verified before spares the lines it covers. The rules, the
    refusals and the lines they name are the same."""
    if request.param == "after the home's record":
        home = tmp_path / "rig-home"
        home.mkdir()
        from evalrig.store import releases

        me = sys.modules[__name__]
        for name in ("read_log", "appending", "append_event", "read_verified_prefix"):
            monkeypatch.setattr(me, name, functools.partial(getattr(releases, name), home=home))
    yield request.param


def cid(c: str) -> str:
    return "sha256:" + c * 64


def ship(cand: str, replaces: str | None, verdict: str = "promote") -> ShipEvent:
    return ShipEvent(
        seq=0, at=NOW, decision=DecisionRef(path=f"t/{cand}.json", digest=cid("d")), verdict=verdict,  # type: ignore[arg-type]
        reason="quality" if verdict == "promote" else "maintenance",  # type: ignore[arg-type]
        candidate=ShippedCandidate(checkpoint_id=cid(cand), name=f"agent-{cand}"),
        replaces=None if replaces is None else cid(replaces),
        policy=PolicyRef(name="default", version=2, digest=cid("f")), tripwires=PolicyTripwires(),
        watch=PolicyWatch(), signed_by="alice")


def rollback(frm: str, to: str, trigger: str = "person", evidence: int | None = None) -> RollbackEvent:
    return RollbackEvent.model_validate({
        "seq": 0, "at": NOW, "from": cid(frm), "to": cid(to), "trigger": trigger,
        "by": "bob" if trigger == "person" else "tripwire", "reason": "bad", "evidence": evidence})


def tripwire(c: str, held: bool) -> TripwireEvent:
    return TripwireEvent(seq=0, at=NOW, checkpoint_id=cid(c), bundle={"path": "tw", "digest": cid("e")},  # type: ignore[arg-type]
                         checks=[{"name": "sealed", "held": held}], held=held)  # type: ignore[list-item]


def placed(events: list[ReleaseEvent]) -> list[ReleaseEvent]:
    return [e.model_copy(update={"seq": i}) for i, e in enumerate(events)]


def write(path: Path, events: list[ReleaseEvent]) -> None:
    with appending(path) as log:
        for e in events:
            log.append(e)  # type: ignore[type-var]


def recompute_chain(path: Path) -> None:
    """The chain by the contract, from the bytes: prev null first, then the sha256 of the
    previous line without its newline; seq counts from 0."""
    lines = path.read_bytes().split(b"\n")
    assert lines.pop() == b""
    prev = None
    for i, raw in enumerate(lines):
        obj = json.loads(raw)
        assert obj["seq"] == i and obj["prev"] == prev
        prev = hashlib.sha256(raw).hexdigest()


def test_appends_chain_as_the_contract_says(tmp_path: Path) -> None:
    log = tmp_path / "home" / "releases.jsonl"
    write(log, [ship("b", "a"), tripwire("b", True), rollback("b", "a"), ship("c", "a")])
    recompute_chain(log)
    first = json.loads(log.read_bytes().split(b"\n")[0])
    assert first["prev"] is None and first["kind"] == "ship"
    rb = json.loads(log.read_bytes().split(b"\n")[2])
    assert rb["from"] == cid("b") and "from_" not in rb
    got = read_log(log)
    assert [e.kind for e in got.events] == ["ship", "tripwire", "rollback", "ship"]
    assert [e.seq for e in got.events] == [0, 1, 2, 3] and got.torn_line is None


def test_missing_log_has_no_events(tmp_path: Path) -> None:
    assert read_log(tmp_path / "none.jsonl").events == []


@pytest.mark.parametrize("line", [1, 2, 3])
def test_a_one_byte_edit_is_refused_naming_its_line(tmp_path: Path, line: int) -> None:
    log = tmp_path / "releases.jsonl"
    write(log, [ship("b", "a"), tripwire("b", True), ship("c", "b")])
    lines = log.read_bytes().split(b"\n")
    lines[line - 1] = lines[line - 1].replace(b'"by', b'"bz', 1) if b'"by' in lines[line - 1] else \
        lines[line - 1].replace(b"alice", b"alicf").replace(b'"held":true', b'"held":fals')
    edited = b"\n".join(lines)
    log.write_bytes(edited)
    for attempt in (lambda: read_log(log), lambda: append_event(log, ship("d", "c"))):
        with pytest.raises(EvalrigError) as e:
            attempt()
        assert e.value.code == ExitCode.INVALID
        assert e.value.file == str(log)
        # the edited line itself when it no longer parses or fails its schema, else the line
        # after it, whose prev no longer matches; the last line, by the head beside the log
        assert e.value.line in (line, line + 1)
    assert log.read_bytes() == edited  # nothing written


def test_an_edit_that_keeps_json_breaks_at_the_next_line(tmp_path: Path) -> None:
    log = tmp_path / "releases.jsonl"
    write(log, [ship("b", "a"), ship("c", "b")])
    data = log.read_bytes().replace(b"alice", b"alicf", 1)
    log.write_bytes(data)
    with pytest.raises(EvalrigError) as e:
        read_log(log)
    assert e.value.line == 2 and "hash chain breaks at this line" in e.value.message


def test_a_first_line_with_a_prev_or_a_wrong_seq_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "releases.jsonl"
    write(log, [ship("b", "a")])
    obj = json.loads(log.read_bytes())
    head_path(log).unlink()  # lines written by hand
    log.write_text(json.dumps({**obj, "prev": "0" * 64}) + "\n")
    with pytest.raises(EvalrigError) as e:
        read_log(log)
    assert e.value.line == 1 and "null" in e.value.message
    log.write_text(json.dumps({**obj, "seq": 1}) + "\n")
    with pytest.raises(EvalrigError) as e:
        read_log(log)
    assert (e.value.line, e.value.field) == (1, "seq")


def test_a_torn_last_line_is_reported_then_cut_before_the_next_append(tmp_path: Path) -> None:
    log = tmp_path / "releases.jsonl"
    write(log, [ship("b", "a")])
    whole = log.read_bytes()
    log.write_bytes(whole + b'{"kind":"ship","se')
    got = read_log(log)
    assert got.torn_line == 2 and len(got.events) == 1
    with appending(log) as w:
        assert w.torn_cut == 2
        w.append(ship("c", "b"))
    recompute_chain(log)
    assert log.read_bytes().startswith(whole)
    assert [e.seq for e in read_log(log).events] == [0, 1]


def test_who_serves_and_previous() -> None:
    assert serving([]) is None and previous([]) is None

    def moves(events: list[ReleaseEvent]) -> list[Move]:
        return moves_of(placed(events))

    ev = moves([ship("b", "a")])
    assert serving(ev) == Serving(cid("b"), 0, 0)
    assert previous(ev) == cid("a") and served(ev) == {cid("a"), cid("b")}
    # the first champion serves again after a rollback; what promoted it is the first ship
    ev = moves([ship("b", "a"), tripwire("b", False), rollback("b", "a", "tripwire", 1)])
    assert serving(ev) == Serving(cid("a"), 2, 0)
    assert previous(ev) is None  # b left by a rollback: never a target again
    # a -> b -> c; rollback to previous (b); then previous is a, never c (rolled back from)
    ev = moves([ship("b", "a"), ship("c", "b"), rollback("c", "b")])
    assert serving(ev) == Serving(cid("b"), 2, 0)
    assert previous(ev) == cid("a")
    # tripwires and alerts do not change what serves
    ev = moves([ship("b", "a"), tripwire("b", True),
                AlertEvent(seq=0, at=NOW, alert_id="stall:fresh:x", alert_kind="stall", metric="fresh",
                           trains=["x"], detail="d")])
    assert serving(ev) == Serving(cid("b"), 0, 0)
    # a checkpoint rolled back from and later shipped again is a target once a ship removes it
    ev = moves([ship("b", "a"), rollback("b", "a"), ship("b", "a"), ship("c", "b")])
    assert previous(ev) == cid("b") and serving(ev) == Serving(cid("c"), 3, 3)


def test_the_store_reads_the_serving_rules_fields_of_every_line_and_validates_on_use(tmp_path: Path) -> None:
    log = tmp_path / "releases.jsonl"
    write(log, [ship("b", "a"), rollback("b", "a")])
    got = read_log(log)
    assert got.serving() == Serving(cid("a"), 1, 0)
    assert got.ship(0) is not None and got.ship(0).candidate.name == "agent-b"  # type: ignore[union-attr]
    # a line whose serving fields are of the wrong type is refused by every read, naming its field
    lines = log.read_bytes().split(b"\n")
    obj = json.loads(lines[1])
    obj["to"] = 7
    head_path(log).unlink()
    raw = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    log.write_bytes(lines[0] + b"\n" + raw + b"\n")
    with pytest.raises(EvalrigError) as e:
        read_log(log)
    assert (e.value.line, e.value.code) == (2, ExitCode.INVALID) and "to" in (e.value.field or "")


def test_an_edit_of_the_last_line_or_a_cut_end_is_refused_by_the_head(tmp_path: Path) -> None:
    log = tmp_path / "releases.jsonl"
    write(log, [ship("b", "a"), ship("c", "b"), ship("d", "c")])
    whole = log.read_bytes()
    at = whole.rfind(b"alice")
    log.write_bytes(whole[:at] + b"alicf" + whole[at + 5:])
    with pytest.raises(EvalrigError) as e:
        read_log(log)
    assert e.value.line == 3 and "not the one the rig last appended" in e.value.message
    # the last line removed
    log.write_bytes(whole[: whole.rstrip(b"\n").rfind(b"\n") + 1])
    with pytest.raises(EvalrigError) as e:
        append_event(log, ship("e", "d"))
    assert e.value.line == 2
    # the last newline removed: not a torn line to cut, but a whole one edited
    log.write_bytes(whole[:-1])
    with pytest.raises(EvalrigError) as e:
        read_log(log)
    assert e.value.line == 3 and "newline was removed" in e.value.message
    log.write_bytes(whole)
    assert len(read_log(log).events) == 3


def test_a_crash_between_the_line_and_the_head_is_no_break(tmp_path: Path) -> None:
    log = tmp_path / "releases.jsonl"
    write(log, [ship("b", "a")])
    old_head = head_path(log).read_bytes()
    write(log, [ship("c", "b")])
    head_path(log).write_bytes(old_head)  # the line synced, the head not yet replaced
    assert len(read_log(log).events) == 2
    write(log, [ship("d", "c")])
    assert len(read_log(log).events) == 3
    head_path(log).unlink()  # a log without a head (written by hand): the chain alone
    assert len(read_log(log).events) == 3


def test_the_verified_prefix_stops_before_the_first_line_read_log_refuses(tmp_path: Path) -> None:
    log = tmp_path / "releases.jsonl"
    write(log, [ship("b", "a"), tripwire("b", True), ship("c", "b"), ship("d", "c")])
    whole = log.read_bytes()
    got, failure = read_verified_prefix(log)
    assert failure is None and len(got.events) == 4
    # a chain broken at line 4 and, earlier, a line whose schema fails at 2: line 2 is the first
    lines = whole.split(b"\n")
    lines[1] = lines[1].replace(b'"held":true', b'"held":"yes"')
    lines[2] = lines[2].replace(b"alice", b"alicf")
    log.write_bytes(b"\n".join(lines))
    with pytest.raises(EvalrigError) as refused:
        read_log(log)
    got, failure = read_verified_prefix(log)
    assert failure is not None and failure.line == 2 and refused.value.line in (3, 4)
    assert [e.kind for e in got.events] == ["ship"] and got.serving() == Serving(cid("b"), 0, 0)
    # the last line edited (only the head beside the log sees it): the lines before it
    at = whole.rfind(b"alice")
    log.write_bytes(whole[:at] + b"alicf" + whole[at + 5:])
    got, failure = read_verified_prefix(log)
    assert failure is not None and failure.line == 4 and len(got.events) == 3
    # the first line broken: nothing, and why
    log.write_bytes(b"{" + whole)
    got, failure = read_verified_prefix(log)
    assert failure is not None and failure.line == 1 and got.events == []

