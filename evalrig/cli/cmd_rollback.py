"""`rollback`: a person's rollback to a checkpoint that served before (docs/release-engineers.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, LogOpt, command, emit_json, say
from evalrig.cli.cmd_history import describe, log_of, warn_torn


@command("rollback", 'evalrig rollback --to previous --by alice --reason "pages since the ship"')
def rollback_cmd(
    to: Annotated[str, typer.Option("--to", help="`previous`, or the id of a checkpoint that served before.")],
    by: Annotated[str, typer.Option("--by", help="Who rolls back.")],
    reason: Annotated[str, typer.Option("--reason", help="Why.")],
    log: LogOpt = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Take the serving checkpoint out of service and put back one that served before.

    The failed release stays in the log: a rollback is an event, not an erasure. Exit 0,
    2 without --by or --reason, 4 when --to never served (or nothing serves).
    """
    from evalrig.store.clock import utcnow
    from evalrig.store.serving import rollback

    path = log_of(log)
    e, torn_cut = rollback(to, by, reason, path, utcnow())
    if json_out:
        emit_json({"log": str(path), "event": e})
    else:
        say([f"rolled back: {e.to} serves from event #{e.seq}", describe(e), f"release log: {path}"])
    warn_torn(path, torn_cut, cut=True)
    return 0
