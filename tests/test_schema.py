"""schemas/: the committed JSON Schemas equal the models', and changes stay additive."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalrig.cli import app
from evalrig.store.schema import breaking_changes, format_names, schema_bytes, schema_of

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas"
BASELINE = SCHEMAS / "baseline"
REGENERATE = "run: evalrig schema --out schemas (and commit schemas/)"


def test_committed_schemas_match_the_models() -> None:
    stale = [n for n in format_names()
             if not (SCHEMAS / f"{n}.schema.json").exists()
             or (SCHEMAS / f"{n}.schema.json").read_bytes() != schema_bytes(n)]
    assert not stale, f"schemas/ is out of date for {', '.join(stale)}; {REGENERATE}"


def test_no_schema_file_without_a_format() -> None:
    names = set(format_names())
    orphans = sorted(p.name for p in SCHEMAS.glob("*.schema.json") if p.name[: -len(".schema.json")] not in names)
    assert not orphans, (
        f"schemas/ has files for formats the models no longer define: {orphans}. A format is "
        "never removed within a major version; if this is a deliberate new major, delete them")


def test_changes_are_additive_against_the_baseline() -> None:
    """Formats in schemas/baseline/ may only grow within their major version.

    A new format is checked once its schema is copied into schemas/baseline/ (do that
    when the format is first released). A deliberate breaking change needs a new major
    version (SCHEMA_MAJOR and the schema_version default), then a new baseline copy.
    """
    problems = []
    for path in sorted(BASELINE.glob("*.schema.json")):
        name = path.name[: -len(".schema.json")]
        if name not in format_names():
            problems.append(f"{name}: the format was removed")
            continue
        for change in breaking_changes(json.loads(path.read_bytes()), schema_of(name)):
            problems.append(f"{name}: {change}")
    assert not problems, (
        "not additive against schemas/baseline/:\n  " + "\n  ".join(problems) + "\n"
        "make the change additive (a new optional key, a wider type), or raise the format's "
        "major version; then " + REGENERATE)


def test_baseline_covers_the_initial_formats() -> None:
    for name in ("checkpoint", "task", "policy", "seal", "seal-registry-entry", "run-manifest",
                 "result", "fixed-lock"):
        assert (BASELINE / f"{name}.schema.json").exists(), name


# -- the comparator can fail ------------------------------------------------------------

BASE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "schema_version": {"type": "string", "default": "1.0"},
        "status": {"enum": ["a", "b"], "type": "string"},
        "n": {"type": "number"},
        "opt": {"anyOf": [{"$ref": "#/$defs/Sub"}, {"type": "null"}]},
        "items": {"type": "array", "items": {"$ref": "#/$defs/Sub"}},
    },
    "required": ["status"],
    "$defs": {"Sub": {"title": "Sub", "type": "object", "properties": {"x": {"type": "string"}},
                      "required": []}},
}


def changed(**edit: Any) -> dict[str, Any]:
    new = json.loads(json.dumps(BASE))
    for dotted, value in edit.items():
        node = new
        parts = dotted.split("__")
        for p in parts[:-1]:
            node = node[p]
        if value is None:
            del node[parts[-1]]
        else:
            node[parts[-1]] = value
    return new


def test_identical_is_additive() -> None:
    assert breaking_changes(BASE, BASE) == []


def test_new_optional_property_is_additive() -> None:
    assert breaking_changes(BASE, changed(properties__extra={"type": "string"})) == []


def test_widening_is_additive() -> None:
    assert breaking_changes(BASE, changed(properties__status={"enum": ["a", "b", "c"], "type": "string"})) == []
    assert breaking_changes(BASE, changed(properties__status={"type": "string"})) == []
    assert breaking_changes(BASE, changed(properties__n={"anyOf": [{"type": "number"}, {"type": "null"}]})) == []


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"properties__n": None}, "n: removed"),
        ({"required": ["status", "n"]}, "n: newly required"),
        ({"properties__n": {"type": "integer"}}, "n: narrowed: no longer accepts type:number"),
        ({"properties__status": {"enum": ["a"], "type": "string"}}, 'status: narrowed: no longer accepts const:"b"'),
        ({"properties__opt": {"$ref": "#/$defs/Sub"}}, "opt: narrowed: no longer accepts type:null"),
        ({"$defs__Sub__properties__x": {"type": "integer"}}, "items[].x: narrowed: no longer accepts type:string"),
        ({"$defs__Sub__required": ["x"]}, "items[].x: newly required"),
    ],
)
def test_breaking_changes_are_found(edit: dict[str, Any], expected: str) -> None:
    assert expected in breaking_changes(BASE, changed(**edit))


def test_a_new_major_allows_breaking_changes() -> None:
    new = changed(properties__n=None)
    new["properties"]["schema_version"]["default"] = "2.0"
    assert breaking_changes(BASE, new) == []


# -- the command -------------------------------------------------------------------------


def test_schema_command_prints_one(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["schema", "task"])
    assert r.exit_code == 0
    assert r.stdout.encode() == schema_bytes("task")


def test_schema_command_prints_all() -> None:
    r = CliRunner().invoke(app, ["schema"])
    assert r.exit_code == 0
    assert sorted(json.loads(r.stdout)) == format_names()


def test_schema_command_writes_files(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["schema", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == sorted(f"{n}.schema.json" for n in format_names())
    assert (tmp_path / "s" / "policy.schema.json").read_bytes() == schema_bytes("policy")


def test_schema_unknown_name_is_a_usage_error(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["schema", "nope", "--out", str(tmp_path / "s")])
    assert r.exit_code == 2
    assert "no format named 'nope'" in r.stderr
    assert not (tmp_path / "s").exists()


def test_schema_out_that_is_a_file_is_refused_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "s").write_text("mine")
    r = CliRunner().invoke(app, ["schema", "--out", str(tmp_path / "s")])
    assert r.exit_code == 4, r.output
    assert f"{tmp_path / 's'}: --out: cannot make the directory" in r.stderr
    assert (tmp_path / "s").read_text() == "mine"
