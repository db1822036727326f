"""Command `export` (docs/reading.md): certified attempts as training data, JUnit or CSV."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, command, emit_json, say
from evalrig.core.errors import UsageError
from evalrig.core.words import count


@command("export", "evalrig export runs/champion runs/candidate --format pairs --to pairs.jsonl")
def export_cmd(
    bundles: Annotated[list[Path], typer.Argument(help="Run bundles (one, or a champion and a candidate).")],
    format: Annotated[str, typer.Option("--format", metavar="<format>", help="trajectories, pairs, junit or csv.")],
    to: Annotated[Path, typer.Option("--to", help="The file to write.")],
    min_reward: Annotated[float | None, typer.Option("--min-reward", help="Leave out attempts rewarded below R "
                                                     "(pairs: the chosen one).")] = None,
    suite: Annotated[list[str] | None, typer.Option("--suite", metavar="<suite>", help="A suite to export instead of fresh "
                                                    "(repeatable).")] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="The task set, where the run's is not "
                                               "(prompts come from it).")] = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Export the final scored attempts of verified run bundles: fresh tasks only unless --suite
    says otherwise; recorded in the rig's home (exports.jsonl), so no gate takes the exported
    tasks as fresh again. Exit 4 when a bundle does not verify."""
    from evalrig.models.inputs import SUITES  # here: every command's start-up imports this module
    from evalrig.read.export import FORMATS, export
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.clock import utcnow

    if format not in FORMATS:
        raise UsageError(f"--format {format!r} is not one of {', '.join(FORMATS)}")
    for s in suite or []:
        if s not in SUITES:
            raise UsageError(f"--suite {s!r} is not one of {', '.join(SUITES)}")
    if min_reward is not None and not 0 <= min_reward <= 1:
        raise UsageError(f"--min-reward {min_reward} is not between 0 and 1")
    r = export(bundles, format, to, evalrig_home(), utcnow(), min_reward, suite, tasks)  # type: ignore[arg-type]
    if json_out:
        emit_json({"to": str(r.to), "format": format, "records": r.records, "tasks": r.tasks,
                   "suites": r.entry.suites, "bundles": [b.run_id for b in r.entry.bundles]})
    else:
        say([f"wrote {r.to}: {count(r.records, 'record')} of {count(r.tasks, 'task')} "
             f"({', '.join(r.entry.suites)})",
             "recorded in the rig's home (exports.jsonl): these tasks are no longer fresh to any gate"])
    return 0
