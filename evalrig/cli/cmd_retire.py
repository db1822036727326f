"""`retire`: a train's fresh tasks leave fresh/, some graduating into fixed/ (docs/curves.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, command, emit_json, say
from evalrig.core.words import count


@command("retire", "evalrig retire trains/t1 --tasks tasks --graduate-failed --sample 2")
def retire_cmd(
    comparison: Annotated[Path, typer.Argument(help="The train's comparison bundle (compare --out).")],
    tasks: Annotated[Path, typer.Option("--tasks", help="The task set whose fresh/ holds the train's tasks.")],
    graduate: Annotated[list[str] | None, typer.Option(
        "--graduate", metavar="ID", help="A fresh task to move into fixed/ (repeatable).")] = None,
    graduate_failed: Annotated[bool, typer.Option(
        "--graduate-failed", help="Graduate every fresh task the kept side failed a trial of.")] = False,
    sample: Annotated[int, typer.Option(
        "--sample", min=0, help="Also graduate N tasks the kept side passed on every trial (drawn by the "
        "comparison's digest).")] = 0,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Move the train's fresh tasks out of fresh/: those graduating into fixed/ (then locked), the rest into
    retired/<train>/; record it in the comparison bundle's retire.json."""
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.clock import utcnow
    from evalrig.store.layout import RETIRE_JSON
    from evalrig.store.retire import retire

    r, resumed = retire(comparison, tasks, list(graduate or []), graduate_failed, sample, evalrig_home(), utcnow())
    if json_out:
        emit_json({**r.model_dump(mode="json"), "resumed": resumed})
        return 0
    say([f"retired train {r.train}: {count(len(r.graduated), 'task')} graduated into fixed/, "
         f"{count(len(r.retired), 'task')} into {Path(tasks) / 'retired' / r.train}/"
         + (" (finished a retire a crash had left half-done)" if resumed else ""),
         f"kept side: {r.kept}" + (" (the decision promotes)" if r.kept == "candidate" else ""),
         *[f"  graduated {m.task_id} ({m.why})" for m in r.graduated],
         f"recorded in {Path(comparison) / RETIRE_JSON}" + ("; fixed.lock grew" if r.graduated else "")])
    return 0
