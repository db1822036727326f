"""The release policy from its parsed TOML (docs/gate.md). Pure: `evalrig.store.policy`
reads the file and digests its bytes.

The range checks (alpha in (0, 1), margins ≥ 0, unknown keys, exceptions without a
description) live in the model, `evalrig.models.inputs.PolicyFile`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from evalrig.core.tomlerr import raise_problems, validation_problems
from evalrig.models.inputs import PolicyFile

POLICY_HINT = "fix the policy (evalrig schema policy shows every key; policies/default.toml is an example)"


def parse_policy(data: dict[str, Any], source: str, text: str | None = None) -> PolicyFile:
    """The policy in `data` (parsed TOML). `source` names it in errors; `text`, when given,
    lets errors name the line of the bad key."""
    try:
        return PolicyFile.model_validate(data)
    except ValidationError as e:
        raise_problems(validation_problems(e, PolicyFile, source, text), POLICY_HINT)
