"""Parsing hand-written TOML and turning parser and model errors into `Problem`s (pure: the
file is read by `evalrig.store.files.read_toml`).

Every problem reads `file:line: field.path: message` (STYLE.md). tomllib gives the line of
a syntax error; for a model error we find the line by scanning the text for the offending
key within its table (best effort: the nearest enclosing key or table header that exists,
so a missing key points at its table). Field paths follow pydantic's `loc`, without the
tag element pydantic inserts for a discriminated union (`verifier.command.timeout_s` is
reported as `verifier.timeout_s`).
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from evalrig.core.errors import EvalrigError, Problem

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class TomlDoc:
    """A parsed TOML file and its text (kept to find the lines of bad keys)."""

    file: str
    text: str
    data: dict[str, Any]


# -- parsing -----------------------------------------------------------------------------

_AT_LINE = re.compile(r"^(?P<msg>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)\s*$")
_AT_END = re.compile(r"^(?P<msg>.*?)\s*\(at end of document\)\s*$")


def toml_syntax_problem(file: str, text: str, e: tomllib.TOMLDecodeError) -> Problem:
    """`file:LINE: not valid TOML: <what> (column C)`."""
    msg = str(e)
    m = _AT_LINE.match(msg)
    if m:
        what = m["msg"][:1].lower() + m["msg"][1:]
        return Problem(file, f"not valid TOML: {what} (column {m['col']})", None, int(m["line"]))
    m = _AT_END.match(msg)
    if m:
        what = m["msg"][:1].lower() + m["msg"][1:]
        return Problem(file, f"not valid TOML: {what} (at the end of the file)", None,
                       text.count("\n") + 1)
    return Problem(file, f"not valid TOML: {msg}")


def parse_toml(file: str, raw: bytes) -> TomlDoc | Problem:
    """Parse TOML bytes; a Problem (with its line) instead of raising."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        column = e.start - raw.rfind(b"\n", 0, e.start)
        return Problem(file, f"not UTF-8 (column {column}); save the file as UTF-8", None, line)
    if text.startswith("\ufeff"):  # some editors write one; TOML parsers refuse it
        return Problem(file, "starts with a byte-order mark; save the file as UTF-8 without BOM",
                       None, 1)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        return toml_syntax_problem(file, text, e)
    return TomlDoc(file, text, data)


def validate_doc(doc: TomlDoc, model: type[M], data: dict[str, Any] | None = None) -> M | list[Problem]:
    """`model` validated from the document (or from `data` derived from it)."""
    try:
        return model.model_validate(doc.data if data is None else data)
    except ValidationError as e:
        return validation_problems(e, model, doc.file, doc.text)


def raise_problems(problems: list[Problem], hint: str | None = None) -> typing.NoReturn:
    """One exit-4 error carrying every problem: the first as its message, the rest listed."""
    first, rest = problems[0], problems[1:]
    raise EvalrigError(first.message, file=first.file, field=first.field, line=first.line,
                       hint=hint, problems=list(rest))


def error_problems(e: EvalrigError) -> list[Problem]:
    """The inverse of raise_problems: every problem an error carries, the first included."""
    return [Problem(e.file, e.message, e.field, e.line), *e.problems]


# -- key lines ---------------------------------------------------------------------------

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_KEYPART = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_KEYPART}(?:\s*\.\s*{_KEYPART})*"
_HEADER_RE = re.compile(rf"^\s*\[\[?\s*(?P<key>{_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGN_RE = re.compile(rf"^\s*(?P<key>{_DOTTED})\s*=")
_PART_RE = re.compile(_KEYPART)


def _split_key(dotted: str) -> tuple[str, ...]:
    parts = []
    for p in _PART_RE.findall(dotted):
        if p[:1] in "\"'":
            p = p[1:-1]
        parts.append(p)
    return tuple(parts)


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Key path → 1-based line of its first `key =` or `[table]` (best effort).

    Lines inside multi-line strings are skipped, so text that looks like a key there
    is not taken for one.
    """
    index: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    in_ml: str | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if in_ml is not None:
            if line.count(in_ml) % 2 == 1:
                in_ml = None
            continue
        m = _HEADER_RE.match(line)
        if m:
            table = _split_key(m["key"])
            index.setdefault(table, n)
            continue
        m = _ASSIGN_RE.match(line)
        if m:
            path = table + _split_key(m["key"])
            for i in range(len(table) + 1, len(path) + 1):
                index.setdefault(path[:i], n)
            rest = line[m.end():]
            for quote in ('"""', "'''"):
                if rest.count(quote) % 2 == 1:
                    in_ml = quote
                    break
    return index


def line_of(index: dict[tuple[str, ...], int], path: tuple[str, ...]) -> int | None:
    """The line of `path`, else of its nearest enclosing key or table that is written."""
    for i in range(len(path), 0, -1):
        if path[:i] in index:
            return index[path[:i]]
    return None


# -- model errors ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Where:
    """Where a pydantic `loc` points: the user's key path, and what encloses it."""

    keys: tuple[str, ...]
    field: str
    kind: str | None  # the union tag passed on the way (`regex`), if any
    known: tuple[str, ...]  # the keys the enclosing model accepts


def _model_of(tp: Any) -> type[BaseModel] | None:
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _strip_annotated(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _optional_of(tp: Any) -> Any:
    """`X` for `X | None` (an optional table such as `[episode]`), else `tp` as it is."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return _strip_annotated(rest[0])
    return tp


def _union_members(tp: Any) -> dict[str, type[BaseModel]]:
    """Tag → member of a discriminated union of models (by their Literal `kind`)."""
    origin = typing.get_origin(tp)
    if origin not in (typing.Union, types.UnionType):
        return {}
    out: dict[str, type[BaseModel]] = {}
    for arg in typing.get_args(tp):
        m = _model_of(_strip_annotated(arg))
        if m is None:
            continue
        for f in m.model_fields.values():
            if typing.get_origin(f.annotation) is typing.Literal:
                for v in typing.get_args(f.annotation):
                    out[str(v)] = m
    return out


def _walk(model: type[BaseModel], loc: tuple[int | str, ...]) -> _Where:
    keys: list[str] = []
    rendered = ""
    kind: str | None = None
    current: Any = model
    known: tuple[str, ...] = tuple(_aliases(model))
    i = 0
    while i < len(loc):
        part = loc[i]
        m = _model_of(current)
        if m is not None:
            known = tuple(_aliases(m))
            f = _field(m, str(part))
            current = _optional_of(_strip_annotated(f.annotation)) if f is not None else None
            keys.append(str(part))
            rendered += ("." if rendered else "") + str(part)
            members = _union_members(current) if current is not None else {}
            if members and i + 1 < len(loc) and str(loc[i + 1]) in members:
                kind = str(loc[i + 1])
                current = members[kind]
                i += 1  # pydantic's tag element is not a key the user wrote
            i += 1
            continue
        if part == "[key]":  # pydantic's mark of a dict key's own error: the key names it
            i += 1
            continue
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if isinstance(part, int):
            rendered += f"[{part}]"
            current = _strip_annotated(args[0]) if args else None
        else:
            keys.append(str(part))
            rendered += ("." if rendered else "") + str(part)
            current = _strip_annotated(args[-1]) if origin is dict and args else None
        i += 1
    return _Where(tuple(keys), rendered, kind, known)


def _aliases(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _field(model: type[BaseModel], key: str) -> Any:
    for name, f in model.model_fields.items():
        if key in (name, f.alias):
            return f
    return None


_SHOULD = re.compile(r"^\w+ should ")
_FIELD_PREFIX = re.compile(r"^(?P<field>[a-z_][a-z0-9_.]*): (?P<msg>.+)$")


def _message(err: Any, where: _Where) -> tuple[str, str]:
    """(field path, message) for one pydantic error, in the rig's words."""
    typ = err["type"]
    ctx = err.get("ctx") or {}
    field = where.field
    if typ == "missing":
        if where.kind is not None:
            return field, f'required for kind "{where.kind}"'
        return field, "required"
    if typ == "extra_forbidden":
        if where.kind is not None:
            return field, f'not a setting of kind "{where.kind}"'
        known = ", ".join(where.known)
        return field, f"unknown key (expected one of {known})" if known else "unknown key"
    if typ in ("union_tag_invalid", "union_tag_not_found"):
        disc = str(ctx.get("discriminator", "kind")).strip("'\"")
        tags = ", ".join(t.strip("'\" ") for t in str(ctx.get("expected_tags", "")).split(","))
        sub = f"{field}.{disc}" if field else disc
        if typ == "union_tag_not_found":
            return sub, f"required (one of {tags})"
        return sub, f"expected one of {tags}"
    got = f" (got {err['input']!r})" if not isinstance(err.get("input"), (dict, list)) else ""
    if typ == "literal_error":
        choices = re.sub(r"'([^']*)'", r"\1", str(ctx.get("expected", ""))).replace(" or ", ", ")
        return field, f"expected one of {choices}{got}"
    msg = str(err["msg"])
    if typ == "value_error":
        msg = msg.removeprefix("Value error, ")
        m = _FIELD_PREFIX.match(msg)
        if m and not field:  # a model-level check that names its own field
            return m["field"], m["msg"]
        return field, msg
    return field, _SHOULD.sub("must ", msg) + got


def validation_problems(
    e: ValidationError, model: type[BaseModel], file: str, text: str | None,
    line: int | None = None,
) -> list[Problem]:
    """Every error of `e` as a Problem; lines found in `text` when given, else `line`."""
    index = key_lines(text) if text is not None else {}
    out: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for err in e.errors():
        where = _walk(model, tuple(err["loc"]))
        field, msg = _message(err, where)
        if (field, msg) in seen:
            continue
        seen.add((field, msg))
        at = line_of(index, _key_path(field)) if text is not None else line
        out.append(Problem(file, msg, field or None, at))
    return out


def _key_path(field: str) -> tuple[str, ...]:
    """`verifier.command[0]` → ("verifier", "command")."""
    return tuple(p for p in re.sub(r"\[\d+\]", "", field).split(".") if p)
