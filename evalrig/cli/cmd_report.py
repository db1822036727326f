"""`report`: one self-contained HTML file for a comparison, a run or the release log."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, command, emit_json, say


@command("report", "evalrig report runs/cmp && xdg-open runs/cmp/report.html")
def report_cmd(
    dir: Annotated[Path | None, typer.Argument(help="A comparison bundle or a run bundle.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="The HTML file (default DIR/report.html).")] = None,
    log: Annotated[Path | None, typer.Option("--log", help="Report on this release log instead of a bundle.")] = None,
    tasks: Annotated[Path | None, typer.Option(
        "--tasks", help="The task set, for expected answers (default: the folder the run used).")] = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Write one HTML file that opens offline in any browser: the verdict and its reason, the
    rules, the suites, plots (per-task differences, pass^k and pass@k, cost against pass
    rate, the calibration of p_success) and every task with its trials, evidence files,
    expected and got answers and episode transcripts. With --log FILE: the release curves
    with ships, rollbacks and alerts marked. A bundle that fails verification is still
    shown, under a banner naming the first digest that fails. Exit 4 for an unreadable input.
    """
    from evalrig.core.errors import UsageError
    from evalrig.read.report import write_report
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.clock import utcnow

    if (dir is None) == (log is None):
        from evalrig.store.invocation import command_name

        prog = command_name()
        raise UsageError("give a bundle directory or --log FILE (one of them)",
                         hint=f"{prog} report runs/cmp, or {prog} report --log $EVALRIG_HOME/releases.jsonl")
    w = write_report(dir, out, log, tasks, evalrig_home(), utcnow())
    if json_out:
        emit_json({"report": str(w.path), "kind": w.kind, "tasks": w.tasks, "bytes": w.bytes, "banners": w.banners})
        return 0
    say([f"wrote {w.path} ({w.kind}, {w.tasks} tasks, {w.bytes / 1e6:.1f} MB)", *(f"  ! {b}" for b in w.banners)])
    return 0
