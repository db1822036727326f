"""The JSON Schema of every file format, generated from the models (`evalrig schema`; docs/cli.md).

`schemas/<name>.schema.json` holds the committed copy (canonical pretty JSON);
tests/test_schema.py fails when it drifts from the models and when a change is not
additive against `schemas/baseline/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalrig.core.digest import pretty_json
from evalrig.core.errors import UsageError, invalid


def format_names() -> list[str]:
    from evalrig.models import formats

    return sorted(formats())


def schema_of(name: str) -> dict[str, Any]:
    from evalrig.models import formats

    fmts = formats()
    if name not in fmts:
        raise UsageError(f"no format named {name!r}",
                         hint="one of: " + ", ".join(sorted(fmts)))
    schema: dict[str, Any] = fmts[name].model_json_schema()
    return schema


def all_schemas() -> dict[str, dict[str, Any]]:
    return {name: schema_of(name) for name in format_names()}


def schema_file_name(name: str) -> str:
    return f"{name}.schema.json"


def schema_bytes(name: str) -> bytes:
    return pretty_json(schema_of(name))


def write_schemas(out: Path, names: list[str] | None = None) -> list[Path]:
    """Write `out/<name>.schema.json` for each format (all by default); atomic per file."""
    from evalrig.store.files import write_bytes_atomic

    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file in the way, or no permission: the user's to fix
        raise invalid(f"cannot make the directory ({e.strerror})", file=out, field="--out",
                      hint="give --out a directory (it is created if missing)") from None
    written = []
    for name in names or format_names():
        path = out / schema_file_name(name)
        write_bytes_atomic(path, schema_bytes(name))
        written.append(path)
    return written


# -- additivity ---------------------------------------------------------------------------
# Within a major version a format may only grow: readers of the old format must still read
# the new files and the new reader must read old files. So against the baseline a change
# must not remove a property, newly require one, or narrow what a property accepts (its
# type, enum or const). Constraints such as bounds and patterns are not compared.


def _resolve(node: Any, root: dict[str, Any]) -> Any:
    seen = 0
    while isinstance(node, dict) and "$ref" in node and seen < 50:
        node = root.get("$defs", {}).get(node["$ref"].rsplit("/", 1)[-1], {})
        seen += 1
    return node


def _kinds(node: Any, root: dict[str, Any]) -> set[tuple[str, str]]:
    """What a schema node accepts, coarsely: {("type", t)}, {("const", v)}, or {("any", "")}."""
    import json

    node = _resolve(node, root)
    if not isinstance(node, dict):
        return {("any", "")}
    members = node.get("anyOf") or node.get("oneOf")
    if members:
        out: set[tuple[str, str]] = set()
        for m in members:
            out |= _kinds(m, root)
        return out
    if "const" in node:
        return {("const", json.dumps(node["const"], sort_keys=True))}
    if "enum" in node:
        return {("const", json.dumps(v, sort_keys=True)) for v in node["enum"]}
    t = node.get("type")
    if t is None:
        return {("any", "")}
    types = t if isinstance(t, list) else [t]
    return {("type", x) for x in types}


def _json_type(literal: str) -> str:
    import json

    v = json.loads(literal)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _covered(old: tuple[str, str], new: set[tuple[str, str]]) -> bool:
    if old in new or ("any", "") in new:
        return True
    new_types = {v for k, v in new if k == "type"}
    if old[0] == "type":
        return old[1] == "integer" and "number" in new_types
    t = _json_type(old[1])
    return t in new_types or (t == "integer" and "number" in new_types)


def _members_by_title(node: Any, root: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for m in (node.get("anyOf") or node.get("oneOf") or []) if isinstance(node, dict) else []:
        r = _resolve(m, root)
        if isinstance(r, dict) and "title" in r and "properties" in r:
            out[r["title"]] = r
    return out


def _compare(old: Any, new: Any, oroot: dict[str, Any], nroot: dict[str, Any], path: str,
             out: list[str], depth: int = 0) -> None:
    if depth > 40:
        return
    o, n = _resolve(old, oroot), _resolve(new, nroot)
    if not isinstance(o, dict) or not isinstance(n, dict):
        return
    ok, nk = _kinds(o, oroot), _kinds(n, nroot)
    lost = sorted(f"{k}:{v}" if v else k for k, v in ok if not _covered((k, v), nk))
    if lost:
        out.append(f"{path}: narrowed: no longer accepts {', '.join(lost)}")
    oprops, nprops = o.get("properties", {}), n.get("properties", {})
    for key, sub in oprops.items():
        where = f"{path}.{key}" if path else key
        if key not in nprops:
            out.append(f"{where}: removed")
        else:
            _compare(sub, nprops[key], oroot, nroot, where, out, depth + 1)
    if oprops or nprops:
        for key in sorted(set(n.get("required", [])) - set(o.get("required", []))):
            out.append(f"{path + '.' if path else ''}{key}: newly required")
    for key in ("items", "additionalProperties"):
        if isinstance(o.get(key), dict) and isinstance(n.get(key), dict):
            _compare(o[key], n[key], oroot, nroot, f"{path}[]" if key == "items" else f"{path}.*",
                     out, depth + 1)
    nmembers = _members_by_title(n, nroot)
    for title, member in _members_by_title(o, oroot).items():
        if title in nmembers:
            _compare(member, nmembers[title], oroot, nroot, f"{path}<{title}>", out, depth + 1)


def schema_major(schema: dict[str, Any]) -> int | None:
    """The major version of a format whose records carry `schema_version` (its default)."""
    default = schema.get("properties", {}).get("schema_version", {}).get("default")
    if isinstance(default, str) and default.partition(".")[0].isdigit():
        return int(default.partition(".")[0])
    return None


def breaking_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Every non-additive change from `old` to `new`; [] when the major version went up."""
    om, nm = schema_major(old), schema_major(new)
    if om is not None and nm is not None and nm > om:
        return []
    out: list[str] = []
    _compare(old, new, old, new, "", out)
    return out
