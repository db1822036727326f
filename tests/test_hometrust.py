"""The home's hash-chained store and the O_NOFOLLOW rule, unit by unit (docs/security.md).

The attacks themselves go through eval.sh in tests/test_redteam_trust.py; these pin down
each rule of the store cheaply.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from evalrig.core.errors import EvalrigError, ExitCode
from evalrig.models.run import Result, SealEntry
from evalrig.store.bundle import BundleLock
from evalrig.store.files import write_bytes_atomic
from evalrig.store.jsonl import (
    Journal,
    append_line,
    chained_append,
    cut_torn_tail,
    read_chained,
    read_records,
)

T = datetime(2026, 1, 1, tzinfo=UTC)


def seal(i: int) -> SealEntry:
    return SealEntry(checkpoint_id="sha256:" + hashlib.sha256(str(i).encode()).hexdigest(), name=f"s{i}", sealed_at=T)


def chained(path: Path, n: int) -> list[bytes]:
    with chained_append(path, SealEntry) as c:
        for i in range(n):
            c.append(seal(i))
    return path.read_bytes().splitlines()


def broken_at(path: Path) -> EvalrigError:
    with pytest.raises(EvalrigError) as e:
        read_chained(path, SealEntry)
    assert e.value.code == ExitCode.INVALID and e.value.file == str(path)
    assert "hash chain breaks" in e.value.message and e.value.hint
    with pytest.raises(EvalrigError) as e2, chained_append(path, SealEntry) as c:
        c.append(seal(99))  # never reached: the append refuses too
    assert e2.value.line == e.value.line
    return e.value


# -- the chain ---------------------------------------------------------------------------


def test_the_first_line_of_a_new_file_chains_to_the_empty_prefix(tmp_path: Path) -> None:
    lines = chained(tmp_path / "s.jsonl", 3)
    prevs = [orjson.loads(x)["prev"] for x in lines]
    assert prevs == [hashlib.sha256(b"").hexdigest(), hashlib.sha256(lines[0]).hexdigest(),
                     hashlib.sha256(lines[1]).hexdigest()]
    assert [r.name for r in read_chained(tmp_path / "s.jsonl", SealEntry).records] == ["s0", "s1", "s2"]


def test_an_edited_line_breaks_at_the_next(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    lines = chained(path, 3)
    lines[1] = lines[1].replace(b'"s1"', b'"x1"')
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert broken_at(path).line == 3


def test_an_inserted_line_breaks_where_it_stands(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    lines = chained(path, 2)
    # A forger who chains the inserted line to line 1 still breaks line 3's link.
    forged = orjson.dumps({**orjson.loads(lines[0]), "name": "forged", "prev": hashlib.sha256(lines[0]).hexdigest()},
                          option=orjson.OPT_SORT_KEYS)
    path.write_bytes(b"\n".join([lines[0], forged, lines[1]]) + b"\n")
    assert broken_at(path).line == 3


@pytest.mark.parametrize("line", [b"not json", b"[1, 2]", b'{"prev": null, "name": "x"}'])
def test_a_line_that_does_not_parse_or_has_no_valid_prev_breaks(tmp_path: Path, line: bytes) -> None:
    path = tmp_path / "s.jsonl"
    lines = chained(path, 2)
    path.write_bytes(b"\n".join([*lines, line]) + b"\n")
    assert broken_at(path).line == 3


def test_removing_the_last_lines_is_not_detected(tmp_path: Path) -> None:
    """Documented limit: a chain detects edits and insertions, not truncation."""
    path = tmp_path / "s.jsonl"
    lines = chained(path, 3)
    path.write_bytes(b"\n".join(lines[:2]) + b"\n")
    assert len(read_chained(path, SealEntry).records) == 2


def test_legacy_lines_at_the_start_then_chained(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    legacy = b"".join(orjson.dumps(seal(i).model_dump(mode="json"), option=orjson.OPT_SORT_KEYS) + b"\n"
                      for i in range(2))
    path.write_bytes(legacy)
    assert len(read_chained(path, SealEntry).records) == 2
    with chained_append(path, SealEntry) as c:
        assert len(c.records) == 2
        c.append(seal(2))
    last = orjson.loads(path.read_bytes().splitlines()[-1])
    assert last["prev"] == hashlib.sha256(legacy).hexdigest()
    # a line without prev after a chained one is no legacy line: a break
    path.write_bytes(path.read_bytes() + legacy.splitlines(keepends=True)[0])
    assert broken_at(path).line == 4


def test_a_torn_tail_is_ignored_on_read_and_cut_before_the_append(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    chained(path, 2)
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"half a')
    recs = read_chained(path, SealEntry)
    assert len(recs.records) == 2 and recs.torn_line == 3
    with chained_append(path, SealEntry) as c:
        c.append(seal(5))
    assert path.read_bytes().startswith(whole) and len(read_chained(path, SealEntry).records) == 3


def test_a_schema_error_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    prev = hashlib.sha256(b"").hexdigest()
    path.write_bytes(orjson.dumps({"schema_version": "1.0", "checkpoint_id": "nope", "name": "x",
                                   "sealed_at": "2026-01-01T00:00:00Z", "prev": prev}) + b"\n")
    with pytest.raises(EvalrigError) as e:
        read_chained(path, SealEntry)
    assert (e.value.line, e.value.field) == (1, "checkpoint_id")


def test_an_unchained_record_is_written_without_prev(tmp_path: Path) -> None:
    append_line(tmp_path / "x.jsonl", seal(1))
    assert b"prev" not in (tmp_path / "x.jsonl").read_bytes()


# -- ids ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["../x", "..", ".", "a/b", "", "a\x00b", "é"])
def test_a_path_id_is_one_component(bad: str) -> None:
    with pytest.raises(ValidationError):
        Result.model_validate({"attempt_id": bad})  # the id's error is among the others
    try:
        Result.model_validate({"attempt_id": bad})
    except ValidationError as e:
        assert any(err["loc"] == ("attempt_id",) for err in e.errors())


@pytest.mark.parametrize("good", ["fr0-1-1-ab12cd34", "...", ".a", "run-0123", "e-x_y.z"])
def test_a_path_id_may_hold_dots_inside(good: str) -> None:
    try:
        Result.model_validate({"attempt_id": good})
    except ValidationError as e:
        assert all(err["loc"] != ("attempt_id",) for err in e.errors())


# -- O_NOFOLLOW ----------------------------------------------------------------------------


@pytest.fixture
def link(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "target"
    target.write_bytes(b"precious\nbytes with a torn tail")
    path = tmp_path / "file.jsonl"
    path.symlink_to(target)
    return path, target


def refused(path: Path, target: Path, before: bytes, e: pytest.ExceptionInfo[EvalrigError]) -> None:
    assert e.value.code == ExitCode.INVALID and e.value.file == str(path) and "symbolic link" in e.value.message
    assert target.read_bytes() == before and path.is_symlink()


@pytest.mark.parametrize("write", [
    lambda p: append_line(p, {"a": 1}),
    lambda p: cut_torn_tail(p),
    lambda p: write_bytes_atomic(p, b"new"),
    lambda p: Journal(p.parent, (p.name,)),
    lambda p: chained_append(p, SealEntry).__enter__(),
])
def test_every_writer_refuses_a_symlink(link: tuple[Path, Path], write) -> None:  # type: ignore[no-untyped-def]
    path, target = link
    before = target.read_bytes()
    with pytest.raises(EvalrigError) as e:
        write(path)
    refused(path, target, before, e)


def test_a_dangling_symlink_is_refused_not_created_through(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.symlink_to(tmp_path / "nowhere")
    with pytest.raises(EvalrigError):
        append_line(path, {"a": 1})
    assert not (tmp_path / "nowhere").exists()


def test_the_bundle_lock_refuses_a_symlinked_lock_file(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    target = tmp_path / "t"
    target.write_bytes(b"x")
    (bundle / ".lock").symlink_to(target)
    with pytest.raises(EvalrigError) as e:
        BundleLock(bundle, ["test"]).acquire()
    assert "symbolic link" in e.value.message and target.read_bytes() == b"x"


def test_the_bundle_lock_still_refuses_a_second_holder(tmp_path: Path) -> None:
    with BundleLock(tmp_path, ["first"]):
        with pytest.raises(EvalrigError) as e:
            BundleLock(tmp_path, ["second"]).acquire()
        assert "in use by pid" in e.value.message and "first" in e.value.message
    with BundleLock(tmp_path, ["third"]):
        pass


def test_reading_a_bundle_file_is_unchanged(tmp_path: Path) -> None:
    append_line(tmp_path / "x.jsonl", seal(1))
    assert len(read_records(tmp_path / "x.jsonl", SealEntry).records) == 1
