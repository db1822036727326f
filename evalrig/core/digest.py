"""The one canonical JSON encoder and every content digest.

Canonical JSON: UTF-8, keys sorted, no whitespace, floats in orjson's shortest
round-trip form. Non-finite numbers are refused here (orjson would silently write
NaN as null, which could corrupt a verdict). Every digest is written `sha256:<hex>`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS


class NonFiniteNumber(ValueError):
    pass


def _all_finite(value: Any) -> bool:
    """True when no float below `value` is NaN or infinite (the fast path: no paths built)."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(_all_finite(v) for v in value.values())
    if kind is list or kind is tuple:
        return all(_all_finite(v) for v in value)
    if isinstance(value, float):  # float subclasses
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_all_finite(v) for v in value)
    return True


def _check_finite(value: Any, path: str = "$") -> None:
    """Refuse a non-finite number, naming its path (built only once one is found)."""
    if _all_finite(value):
        return
    _find_non_finite(value, path)


def _find_non_finite(value: Any, path: str) -> None:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NonFiniteNumber(f"{path}: non-finite number {value!r}")
    elif isinstance(value, dict):
        for k, v in value.items():
            _find_non_finite(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _find_non_finite(v, f"{path}[{i}]")


def _default(obj: Any) -> Any:
    # pydantic models encode through their JSON mode so that validators' types
    # (timestamps, enums) come out the same way everywhere.
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} as canonical JSON")


def to_plain(obj: object) -> Any:
    """A value of JSON types only (models dumped in JSON mode)."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    return obj


def canonical_json(obj: object) -> bytes:
    """The canonical bytes of `obj` (no trailing newline)."""
    plain = to_plain(obj)
    _check_finite(plain)
    return orjson.dumps(plain, option=_OPTS, default=_default)


def canonical_line(obj: object) -> bytes:
    """One JSONL record: canonical JSON and a newline."""
    return canonical_json(obj) + b"\n"


def pretty_json(obj: object) -> bytes:
    """Canonical JSON indented for people (still sorted, still deterministic)."""
    plain = to_plain(obj)
    _check_finite(plain)
    return orjson.dumps(plain, option=_OPTS | orjson.OPT_INDENT_2, default=_default) + b"\n"


def sha256_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sha256_json(obj: object) -> str:
    return sha256_bytes(canonical_json(obj))




def sha256_parts(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return "sha256:" + h.hexdigest()


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def short_digest(digest: str) -> str:
    """The first 12 hex digits of a `sha256:<hex>` digest: how people and folder names say it."""
    return digest.removeprefix("sha256:")[:12]
