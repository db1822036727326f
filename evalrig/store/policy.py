"""Loading the release policy file (docs/gate.md).

A policy's digest is the sha256 of the file's bytes, exactly as they are (comments and
spacing included), because that is what a run pins and what the gate compares. Parsing
is the core's (`evalrig.core.policy.parse_policy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalrig.core.digest import sha256_bytes
from evalrig.core.errors import EvalrigError, Problem, invalid
from evalrig.core.policy import POLICY_HINT, parse_policy
from evalrig.core.tomlerr import error_problems, parse_toml, raise_problems
from evalrig.models.inputs import PolicyFile


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
        raise_problems([doc], POLICY_HINT)
    spec = parse_policy(doc.data, str(path), doc.text)
    return LoadedPolicy(spec, sha256_bytes(raw), path)
