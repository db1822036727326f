"""Command-line interface. `main` is the console script `evalrig`."""

from __future__ import annotations

import sys

from evalrig.cli.app import app, only_the_command_run

# Each module registers its commands on import.
from evalrig.cli import (  # noqa: E402,F401  isort: skip
    cmd_seal,
    cmd_validate,
    cmd_run,
    cmd_compare,
    cmd_tasks,
    cmd_init,
    cmd_report,
    cmd_ship,
    cmd_champion,
    cmd_tripwire,
    cmd_rollback,
    cmd_history,
    cmd_watch,
    cmd_retire,
    cmd_show,
    cmd_export,
    cmd_key,
)


def main() -> None:
    only_the_command_run(sys.argv[1:])()


__all__ = ["app", "main"]
