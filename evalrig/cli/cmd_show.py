"""Command `show` (docs/reading.md): one bundle, task, trial or attempt, for a person."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, command, console, emit_json, use_color


@command("show", "evalrig show runs/candidate date-add-04cde4:2")
def show_cmd(
    bundle: Annotated[Path, typer.Argument(help="A run bundle or a comparison bundle.")],
    id: Annotated[str | None, typer.Argument(help="A task id, a trial id (TASK:REP) or an attempt id.")] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="The task set, where the run's is not "
                                               "(expected answers and tags come from it).")] = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Show a bundle (its summary, failing tasks first), a task's trials with expected beside
    got, or an attempt's evidence and transcript. Exit 4 on an unknown id."""
    from evalrig.read.show import show

    view = show(bundle, id, tasks)
    if json_out:
        emit_json(view)
        return 0
    from evalrig.read.render import plain, to_console

    if use_color():
        to_console(view, console())
    else:
        from evalrig.core.untrusted import escaped

        sys.stdout.write(escaped(plain(view), newlines=True))  # the last guard, as say's
        sys.stdout.flush()
    return 0
