"""The canonical encoder and the strict base models every file format shares."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from evalrig.core.digest import NonFiniteNumber, canonical_json, canonical_line, sha256_json
from evalrig.models.run import SealEntry

ID = "sha256:" + "ab" * 32


def test_keys_sorted_no_whitespace() -> None:
    assert canonical_json({"b": 1, "a": [True, None, 1.5]}) == b'{"a":[true,null,1.5],"b":1}'


def test_line_ends_with_newline() -> None:
    assert canonical_line({"a": 1}) == b'{"a":1}\n'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_refused_with_path(bad: float) -> None:
    with pytest.raises(NonFiniteNumber, match=r"\$\.x\[1\]"):
        canonical_json({"x": [0.0, bad]})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_round_trip_is_stable(value: object) -> None:
    import orjson

    once = canonical_json(value)
    assert canonical_json(orjson.loads(once)) == once


def test_timestamps_utc_with_microseconds() -> None:
    e = SealEntry(checkpoint_id=ID, name="x", sealed_at=datetime(2026, 12, 2, 10, 15, 3, tzinfo=UTC))
    assert b'"sealed_at":"2026-12-02T10:15:03.000000Z"' in canonical_json(e)


def test_offset_timestamps_normalised_to_utc() -> None:
    tz = timezone(timedelta(hours=2))
    e = SealEntry(checkpoint_id=ID, name="x", sealed_at=datetime(2026, 12, 2, 12, 0, tzinfo=tz))
    assert e.sealed_at == datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def test_naive_timestamp_refused() -> None:
    with pytest.raises(ValidationError, match="no time zone"):
        SealEntry.model_validate({"checkpoint_id": ID, "name": "x", "sealed_at": "2026-12-02T10:00:00"})


def test_unknown_key_refused() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        SealEntry.model_validate(
            {"checkpoint_id": ID, "name": "x", "sealed_at": "2026-12-02T10:00:00Z", "extra": 1}
        )


def test_other_major_version_refused_newer_minor_read() -> None:
    base = {"checkpoint_id": ID, "name": "x", "sealed_at": "2026-12-02T10:00:00Z"}
    assert SealEntry.model_validate({**base, "schema_version": "1.7"}).schema_version == "1.7"
    with pytest.raises(ValidationError, match="not readable by this rig"):
        SealEntry.model_validate({**base, "schema_version": "2.0"})


def test_digest_format() -> None:
    d = sha256_json({"a": 1})
    assert d.startswith("sha256:") and len(d) == 71
    assert d == sha256_json({"a": 1})
