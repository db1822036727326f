"""`watch`: the curves over release trains, and the alerts that page a person (docs/curves.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, command, emit_json, err, say
from evalrig.core.errors import ExitCode
from evalrig.core.words import count


@command("watch", "evalrig watch --log releases.jsonl --policy policies/default.toml")
def watch_cmd(
    log: Annotated[Path | None, typer.Option(
        "--log", metavar="<file>", help="The release log (default $EVALRIG_HOME/releases.jsonl).")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="Take the [watch] thresholds from this policy (default: the serving release's, "
        "else policies/default.toml).")] = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Draw the curves from the gate ledger and the release log, append one alert event per new
    alert; exit 3 while any alert fires (a scheduled job pages a person), else 0."""
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.clock import utcnow
    from evalrig.store.releases import log_path
    from evalrig.store.watch import watch

    home = evalrig_home()
    w = watch(home, log_path(home, log), policy, utcnow())
    new = {e.alert_id for e in w.new}
    code = ExitCode.BLOCK if w.firing else ExitCode.OK
    if json_out:
        emit_json({
            "log": str(w.log), "trains": len(w.trains.trains), "skipped": w.trains.skipped,
            "thresholds": w.thresholds, "thresholds_from": w.thresholds_from,
            "firing": [{"alert_id": a.alert_id, "alert_kind": a.alert_kind, "metric": a.metric,
                        "trains": list(a.trains), "detail": a.detail, "figures": a.figures,
                        "new": a.alert_id in new} for a in w.firing],
            "appended": [e.seq for e in w.new], "series": w.series(), "exit_code": int(code),
        })
        return int(code)
    from evalrig.run.findings import shown

    head = (f"{count(len(w.firing), 'alert')} firing over {count(len(w.trains.trains), 'train')}"
            if w.firing else f"no alert over {count(len(w.trains.trains), 'train')}")
    lines = [head]
    for a in w.firing:
        lines.append(f"  {a.alert_kind} [{shown(a.alert_id)}]{' (new)' if a.alert_id in new else ''}: "
                     f"{shown(a.detail)}")
    if w.new:
        lines.append(f"appended {count(len(w.new), 'alert event')} to {w.log}")
    elif w.firing:
        lines.append(f"every firing alert is already in {w.log}: nothing appended")
    lines.append(f"thresholds from {w.thresholds_from}")
    say(lines)
    if w.trains.skipped:
        err(f"note: {count(w.trains.skipped, 'train')} not drawn: their ledger lines were written before "
            "the gate recorded curves (gate the comparison again to draw it)")
    return int(code)
