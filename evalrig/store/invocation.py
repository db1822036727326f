"""How a person invoked the rig, so that the commands the rig prints for them to run (hints,
the verdict file's sign line) are ones they can paste: `./eval.sh sign …` when eval.sh ran
the rig (it exports EVALRIG_PROG, the path it was invoked by), `evalrig sign …` otherwise
(docs/release-flow.md)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

PROG_ENV = "EVALRIG_PROG"


def command_name() -> str:
    """The program to quote in a command line, shell-quoted."""
    value = os.environ.get(PROG_ENV, "")
    if not value or any(c in value for c in "\n\r\0"):
        return "evalrig"
    return shlex.quote(value)


def quoted(path: Path | str) -> str:
    """A path as a shell word."""
    return shlex.quote(str(path))
