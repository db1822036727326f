"""The home's record of what the rig verified of a release log (store/releases.py): used only
for the bytes it was made of, and the lines after them checked by the same rules. The other
release-log tests run with and without it (tests/test_release_log.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from test_release_log import cid, recompute_chain, rollback, ship, tripwire

from evalrig.core.errors import EvalrigError, ExitCode
from evalrig.core.releases import Serving
from evalrig.store.releases import head_path


def test_a_log_the_home_verified_before_is_checked_from_where_that_record_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a command verified the log, the next checks only the lines after what it verified:
    lines another writer appended since are checked by the same rules (a bad one refused,
    naming its line), and the serving rules see every event."""
    from evalrig.store import releases

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("EVALRIG_HOME", str(home))  # the writer below signs with this home's key too
    log = tmp_path / "releases.jsonl"
    for e in (ship("b", "a"), tripwire("b", True), ship("c", "b")):
        releases.append_event(log, e, home=home)
    records = list((home / "verified-logs").iterdir())
    assert len(records) == 1
    releases.append_event(log, rollback("c", "b"))  # a writer that keeps no record

    def whole_log_checked(*a: object, **k: object) -> None:
        raise AssertionError("the whole log was checked again")

    monkeypatch.setattr(releases, "verify_chain", whole_log_checked)
    got = releases.read_log(log, home)
    assert got.serving() == Serving(cid("b"), 3, 0) and len(got) == 4
    assert [e.kind for e in got.events] == ["ship", "tripwire", "ship", "rollback"]
    with releases.appending(log, home) as w:
        assert w.seqs("ship") == [0, 2] and w.rows[2]["candidate"]["checkpoint_id"] == cid("c")
        w.append(ship("d", "b"))
    assert releases.read_log(log, home).serving() == Serving(cid("d"), 4, 4)
    recompute_chain(log)
    monkeypatch.undo()

    # a line added by hand after the record: checked, refused at its line
    data = log.read_bytes()
    bad = json.loads(data.split(b"\n")[-2])
    bad.update(seq=5, prev=hashlib.sha256(data.split(b"\n")[-2]).hexdigest(), replaces=7)
    log.write_bytes(data + json.dumps(bad).encode() + b"\n")
    head_path(log).write_text(hashlib.sha256(json.dumps(bad).encode()).hexdigest() + "\n")
    with pytest.raises(EvalrigError) as e:
        releases.read_log(log, home)
    assert (e.value.line, e.value.code) == (6, ExitCode.INVALID)


@pytest.mark.parametrize("record", [b"", b"not json", b'{"schema_version": "1.0"}', None])
def test_a_record_that_is_not_the_rigs_or_not_of_these_bytes_is_not_believed(
        tmp_path: Path, record: bytes | None) -> None:
    """A record that does not parse as the rig writes it, or whose digest is not that of the
    log's first bytes (here: a line in them edited), leaves every line to be checked."""
    from evalrig.store import releases

    home = tmp_path / "home"
    home.mkdir()
    log = tmp_path / "releases.jsonl"
    for e in (ship("b", "a"), ship("c", "b"), ship("d", "c")):
        releases.append_event(log, e, home=home)
    (rec,) = (home / "verified-logs").iterdir()
    if record is not None:
        rec.write_bytes(record)
        assert [x.kind for x in releases.read_log(log, home).events] == ["ship"] * 3
        return
    data = log.read_bytes()
    log.write_bytes(data.replace(b"agent-c", b"agent-x", 1))
    with pytest.raises(EvalrigError) as e:
        releases.read_log(log, home)
    assert e.value.line == 3 and "hash chain breaks" in e.value.message
    other = tmp_path / "other.jsonl"  # another log's record is not this one's
    other.write_bytes(data)
    head_path(other).write_bytes(head_path(log).read_bytes())
    assert len(releases.read_log(other, home).events) == 3


def test_a_record_with_a_move_that_is_not_one_is_not_believed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalrig.store import releases

    home = tmp_path / "home"
    home.mkdir()
    log = tmp_path / "releases.jsonl"
    for e in (ship("b", "a"), ship("c", "b")):
        releases.append_event(log, e, home=home)
    releases.read_log(log, home)  # the reader after an append records what it verified
    (rec,) = (home / "verified-logs").iterdir()
    obj = json.loads(rec.read_bytes())
    assert [m[1] for m in obj["moves"]] == ["ship", "ship"] and obj["lines"] == 2
    calls = []
    real = releases.verify_chain
    monkeypatch.setattr(releases, "verify_chain", lambda *a, **k: calls.append(1) or real(*a, **k))
    releases.read_log(log, home)
    assert calls == []  # believed as the rig wrote it
    first, second = obj["moves"]
    for bad in ([1, "shop", second[2], second[3]], [1, "ship", second[2]], [1, "ship", 7, None]):
        rec.write_bytes(json.dumps({**obj, "moves": [first, bad]}).encode())
        assert releases.read_log(log, home).serving() == Serving(cid("c"), 1, 1)
        assert calls, "every line checked again"
        calls.clear()


def test_a_home_that_cannot_keep_the_record_only_costs_a_full_check(tmp_path: Path) -> None:
    from evalrig.store import releases

    home = tmp_path / "home"
    home.mkdir()
    (home / "verified-logs").write_text("a file where the folder would be\n")
    log = tmp_path / "releases.jsonl"
    for e in (ship("b", "a"), ship("c", "b")):
        releases.append_event(log, e, home=home)
    got = releases.read_log(log, home)
    assert got.serving() == Serving(cid("c"), 1, 1) and len(got) == 2
    assert (home / "verified-logs").read_text() == "a file where the folder would be\n"
