"""`ship`: put an approved decision's candidate in service (docs/release-engineers.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, HomeKeyOpt, JsonOpt, LogOpt, command, emit_json, err, say
from evalrig.cli.cmd_history import describe, log_of, warn_torn
from evalrig.core.errors import ExitCode


@command("ship", "evalrig ship trains/t1/decisions/default-v2.json --checkpoint examples/candidate")
def ship_cmd(
    decision: Annotated[Path, typer.Argument(help="The signed decision file.")],
    checkpoint: Annotated[Path, typer.Option("--checkpoint", help="The candidate's checkpoint directory.")],
    log: LogOpt = None,
    home_key: HomeKeyOpt = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Append a ship event to the release log: the decision's candidate serves from now.

    Checks everything check-release checks, and that the train's champion is the checkpoint
    serving now (a train against an older champion cannot ship: exit 4). Exit 0 shipped (or
    already shipped: nothing written), 1 not approved (nothing written), 4 invalid input.
    """
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.clock import utcnow
    from evalrig.store.shipping import ship

    path = log_of(log)
    r = ship(decision, checkpoint, path, evalrig_home(), utcnow(), home_key)
    if json_out:
        emit_json({"shipped": r.event is not None, "already": r.already, "approved": r.approved,
                   "reason": r.reason, "hint": r.hint, "log": str(path), "event": r.event})
    elif r.event is None:
        err(r.reason + (f"\n  -> {r.hint}" if r.hint else "") + "\nnothing was written to the release log")
    elif r.already:
        say([f"already shipped: {decision} is event #{r.event.seq} and its candidate serves; nothing written",
             describe(r.event)])
    else:
        say([f"shipped: {r.event.candidate.checkpoint_id} serves from event #{r.event.seq}",
             describe(r.event), r.reason, f"release log: {path}"])
    warn_torn(path, r.torn_cut, cut=True)
    return int(ExitCode.OK if r.event is not None else ExitCode.KEEP)
