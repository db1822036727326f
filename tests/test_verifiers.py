"""The built-in verifiers (pure) and reward.json parsing; the command verifier runs in test_trial."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalrig.attempt.verifiers import (
    check_exact,
    check_json,
    check_regex,
    json_equal,
    parse_reward,
    verify_builtin,
)
from evalrig.models.inputs import ExactVerifier, JsonVerifier, RegexVerifier

# -- exact / regex -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected", "outcome"),
    [
        ("2026-12-01", "2026-12-01", "passed"),
        ("  2026-12-01\n\n", "2026-12-01", "passed"),
        ("\t2026-12-01 \r\n", "2026-12-01", "passed"),
        ("2026-12-01", "2026-12-01\n", "passed"),  # a TOML multi-line expected string
        ("2026-12-02", "2026-12-01", "failed"),
        ("2026-12-01 extra", "2026-12-01", "failed"),
        ("", "2026-12-01", "failed"),
        ("", "", "passed"),
        ("A", "a", "failed"),
        ("a b", "a  b", "failed"),  # only the ends are trimmed
    ],
)
def test_exact(answer: str, expected: str, outcome: str) -> None:
    v = check_exact(answer, expected)
    assert v.outcome == outcome
    assert v.reward == (1.0 if outcome == "passed" else 0.0)


def test_exact_missing_answer_fails_not_faults() -> None:
    v = check_exact(None, "x")
    assert v.outcome == "failed" and v.passed is False
    assert v.error == "no out/answer.txt"


@pytest.mark.parametrize(
    ("answer", "pattern", "outcome"),
    [
        ("42", r"\d+", "passed"),
        (" 42\n", r"\d+", "passed"),
        ("42abc", r"\d+", "failed"),  # whole answer, not a search
        ("abc42", r"\d+", "failed"),
        ("line1\nline2", r"line1\nline2", "passed"),
        ("x", r"x|y", "passed"),
        ("xy", r"x|y", "failed"),
    ],
)
def test_regex(answer: str, pattern: str, outcome: str) -> None:
    assert check_regex(answer, pattern).outcome == outcome


def test_regex_missing_answer_fails() -> None:
    assert check_regex(None, ".*").outcome == "failed"


# -- json ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1.0, True),
        (0, -0.0, True),
        (True, 1, False),
        (1, True, False),
        (False, 0, False),
        (0.0, False, False),
        (True, True, True),
        (None, None, True),
        (None, 0, False),
        (None, False, False),
        ("1", 1, False),
        ([1, 2], [1.0, 2.0], True),
        ([1, 2], [2, 1], False),
        ([1], [1, 1], False),
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1}, {"a": True}, False),
        ({"a": 1}, {"a": 1, "b": None}, False),
        ({"a": [{"b": [1, {"c": 2}]}]}, {"a": [{"b": [1.0, {"c": 2.0}]}]}, True),
        ({"a": [{"b": [1, {"c": 2}]}]}, {"a": [{"b": [1.0, {"c": True}]}]}, False),
        ([], {}, False),
        (2**53 + 1, float(2**53), False),  # exact, not via float rounding
        (0.1 + 0.2, 0.3, False),
    ],
)
def test_json_equal_table(a: Any, b: Any, equal: bool) -> None:
    assert json_equal(a, b) is equal
    assert json_equal(b, a) is equal


def test_json_nan_never_equal() -> None:
    assert not json_equal(math.nan, math.nan)


def _normal(v: Any) -> Any:
    """A reference model of the semantics: numbers become exact rationals, bools stay tagged."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, (int, float)):
        return ("num", Fraction(v))
    if isinstance(v, list):
        return ("list", tuple(_normal(x) for x in v))
    if isinstance(v, dict):
        return ("dict", frozenset((k, _normal(x)) for k, x in v.items()))
    return (type(v).__name__, v)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=20,
)


def _with_floats(v: Any) -> Any:
    """The same value with every integral number written as a float (or back)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and abs(v) < 2**53:
        return float(v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    if isinstance(v, list):
        return [_with_floats(x) for x in v]
    if isinstance(v, dict):
        return {k: _with_floats(x) for k, x in v.items()}
    return v


@given(json_values, json_values)
def test_json_equal_matches_reference(a: Any, b: Any) -> None:
    assert json_equal(a, b) == (_normal(a) == _normal(b))


@given(json_values)
def test_json_equal_reflexive_and_number_form_blind(a: Any) -> None:
    assert json_equal(a, a)
    assert json_equal(a, _with_floats(a))
    assert json_equal(orjson.loads(orjson.dumps(a)), a)


@given(json_values, json_values)
def test_json_equal_symmetric(a: Any, b: Any) -> None:
    assert json_equal(a, b) == json_equal(b, a)


def test_check_json() -> None:
    assert check_json(b'{"n": 1.0, "ok": true}', {"n": 1, "ok": True}).outcome == "passed"
    assert check_json(b'{"n": 1, "ok": 1}', {"n": 1, "ok": True}).outcome == "failed"
    assert check_json(b" [1, 2, 3]\n", [1, 2, 3]).outcome == "passed"
    bad = check_json(b"{nope", {"a": 1})
    assert bad.outcome == "failed" and bad.error is not None and bad.error.startswith("out/answer.json is not JSON")
    assert check_json(b"NaN", 0).outcome == "failed"  # not JSON, never a number
    missing = check_json(None, {})
    assert missing.outcome == "failed" and missing.error == "no out/answer.json"


def test_check_json_toml_datetime_compares_as_iso_string() -> None:
    import tomllib

    expected = tomllib.loads('v = 2026-12-01')["v"]
    assert check_json(b'"2026-12-01"', expected).outcome == "passed"


# -- reading the stored answer ---------------------------------------------------------------


def _evidence(tmp_path: Path, name: str, data: bytes) -> Path:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / name).write_bytes(data)
    return tmp_path


def test_verify_builtin_reads_stored_answer(tmp_path: Path) -> None:
    ev = _evidence(tmp_path, "answer.txt", b"hello\n")
    assert verify_builtin(ExactVerifier(kind="exact", expected="hello"), ev).outcome == "passed"
    assert verify_builtin(RegexVerifier(kind="regex", pattern="h.*o"), ev).outcome == "passed"
    assert verify_builtin(JsonVerifier(kind="json", expected="hello"), ev).outcome == "failed"


def test_verify_builtin_answer_as_symlink_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "real").write_text("hello")
    (tmp_path / "out" / "answer.txt").symlink_to(tmp_path / "real")
    assert verify_builtin(ExactVerifier(kind="exact", expected="hello"), tmp_path).outcome == "failed"


# -- reward.json ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "outcome", "reward", "checks"),
    [
        ({"reward": 1}, "passed", 1.0, {}),
        ({"reward": 1.0, "checks": {"a": True, "b": True}}, "passed", 1.0, {"a": True, "b": True}),
        ({"reward": 1.0, "checks": {"a": True, "b": False}}, "failed", 1.0, {"a": True, "b": False}),
        ({"reward": 0.5, "checks": {"a": True}}, "failed", 0.5, {"a": True}),
        ({"reward": 0.5, "passed": True}, "passed", 0.5, {}),
        ({"reward": 1, "passed": False}, "failed", 1.0, {}),
        ({"passed": True}, "passed", 1.0, {}),
        ({"passed": False, "checks": {"x": False}}, "failed", 0.0, {"x": False}),
        ({"reward": 0}, "failed", 0.0, {}),
    ],
)
def test_parse_reward(doc: dict[str, Any], outcome: str, reward: float, checks: dict[str, bool]) -> None:
    v = parse_reward(orjson.dumps(doc))
    assert (v.outcome, v.reward, v.checks) == (outcome, reward, checks)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"{", "reward.json is not JSON"),
        (b"[1]", "reward.json: expected a JSON object"),
        (b'{"reward": 1.5}', "reward.json: reward: expected a number in [0, 1], got 1.5"),
        (b'{"reward": -0.1}', "reward.json: reward: expected a number in [0, 1], got -0.1"),
        (b'{"reward": true}', "reward.json: reward: expected a number in [0, 1], got True"),
        (b'{"reward": "1"}', "reward.json: reward: expected a number in [0, 1], got '1'"),
        (b'{"reward": 1, "checks": {"a": 1}}', "reward.json: checks: expected an object of name → true/false"),
        (b'{"reward": 1, "checks": [true]}', "reward.json: checks: expected an object of name → true/false"),
        (b'{"passed": "yes"}', "reward.json: passed: expected true or false, got 'yes'"),
        (b'{"checks": {}}', 'reward.json: needs "reward" or "passed"'),
        (b'{"reward": 1, "score": 3}', "reward.json: unknown key 'score' (allowed: checks, passed, reward)"),
    ],
)
def test_parse_reward_faults(raw: bytes, error: str) -> None:
    v = parse_reward(raw)
    assert v.outcome == "fault" and v.passed is None
    assert v.error is not None and v.error.startswith(error)
