"""The environment contract every agent and command verifier starts from (docs/attempts.md,
"The agent's environment")."""

from __future__ import annotations

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
"""The PATH every agent and command verifier gets, and where a bare command name is looked up."""


def minimal_path() -> str:
    return MINIMAL_PATH
