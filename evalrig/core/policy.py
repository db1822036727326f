"""The release policy from its parsed TOML (docs/gate.md). Pure: `evalrig.store.policy`
reads the file and digests its bytes.

The range checks (alpha in (0, 1), margins ≥ 0, unknown keys, exceptions without a
description) live in the model, `evalrig.models.inputs.PolicyFile`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from evalrig.core.errors import Problem
from evalrig.core.tomlerr import key_lines, line_of, raise_problems, validation_problems
from evalrig.models.inputs import PolicyFile

POLICY_HINT = "fix the policy (evalrig schema policy shows every key; policies/default.toml is an example)"


def parse_policy(data: dict[str, Any], source: str, text: str | None = None) -> PolicyFile:
    """The policy in `data` (parsed TOML). `source` names it in errors; `text`, when given,
    lets errors name the line of the bad key."""
    public = _public_rules(data)
    if public:
        index = key_lines(text) if text is not None else {}
        raise_problems([Problem(source, "the public suite is read by no rule: public benchmarks are reported "
                                "(comparison, verdict file, curves) and never decide; remove "
                                + ("the [public] table" if path == ("public",) else "this rule on it"),
                                ".".join(path), line_of(index, path)) for path in public], POLICY_HINT)
    try:
        return PolicyFile.model_validate(data)
    except ValidationError as e:
        raise_problems(validation_problems(e, PolicyFile, source, text), POLICY_HINT)


def _public_rules(data: dict[str, Any]) -> list[tuple[str, ...]]:
    """Where the policy names the public suite (docs/curves.md, "Public benchmarks"): a `[public]`
    table, or any value `"public"` (a rule's or a tripwire's suite); exception texts are words."""
    out: list[tuple[str, ...]] = []

    def walk(value: Any, path: tuple[str, ...]) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if path == ("exceptions",):
                    continue
                if k == "public":
                    out.append((*path, k))
                else:
                    walk(v, (*path, k))
        elif isinstance(value, list):
            if "public" in value:
                out.append(path)
        elif value == "public":
            out.append(path)

    walk(data, ())
    return out
