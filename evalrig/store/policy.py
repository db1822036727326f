"""The release policy: parsing (pure) and loading (DESIGN §10).

`parse_policy` takes the parsed TOML and returns the model; the range checks (alpha in
(0, 1), margins ≥ 0, unknown keys, exceptions without a description) live in the model,
models/inputs.py. `load_policy` reads the file; a policy's digest is the sha256 of the
file's bytes, exactly as they are (comments and spacing included), because that is what a
run pins and what the gate compares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalrig.core.digest import sha256_bytes
from evalrig.core.errors import EvalrigError, Problem, invalid
from evalrig.models.inputs import PolicyFile
from evalrig.store.tomlerr import error_problems, parse_toml, raise_problems, validation_problems

_HINT = "fix the policy (evalrig schema policy shows every key; policies/default.toml is an example)"


@dataclass(frozen=True)
class LoadedPolicy:
    spec: PolicyFile
    digest: str
    """sha256 of the file's bytes."""
    path: Path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def version(self) -> int:
        return self.spec.version


def parse_policy(data: dict[str, Any], source: str, text: str | None = None) -> PolicyFile:
    """The policy in `data` (parsed TOML). `source` names it in errors; `text`, when given,
    lets errors name the line of the bad key."""
    try:
        return PolicyFile.model_validate(data)
    except ValidationError as e:
        raise_problems(validation_problems(e, PolicyFile, source, text), _HINT)


def policy_problems(path: Path) -> list[Problem]:
    """Every problem of one policy file (for validate); [] when it is good."""
    try:
        load_policy(path)
    except EvalrigError as e:
        return error_problems(e)
    return []


def load_policy(path: Path) -> LoadedPolicy:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise invalid("no such policy file", file=path,
                      hint="give the path of a policy TOML file, e.g. policies/default.toml") from None
    except IsADirectoryError:
        raise invalid("is a directory, not a policy file", file=path,
                      hint="give the path of a policy TOML file, e.g. policies/default.toml") from None
    except OSError as e:
        raise invalid(f"cannot be read ({e.strerror})", file=path) from None
    doc = parse_toml(str(path), raw)
    if isinstance(doc, Problem):
        raise_problems([doc], _HINT)
    spec = parse_policy(doc.data, str(path), doc.text)
    return LoadedPolicy(spec, sha256_bytes(raw), path)
