"""`champion`: the checkpoint serving now (docs/release-engineers.md)."""

from __future__ import annotations

import os

from evalrig.cli.app import DebugOpt, JsonOpt, LogOpt, command, emit_json, err, say
from evalrig.cli.cmd_history import log_of, warn_torn
from evalrig.core.errors import ExitCode


@command("champion", "evalrig champion --json")
def champion_cmd(log: LogOpt = None, json_out: JsonOpt = False, debug: DebugOpt = False) -> int:
    """The serving checkpoint: its id, name, since which event, under which policy.

    Exit 0, or 1 when nothing has shipped yet (nothing serves); 4 when the log does not verify.
    """
    from evalrig.core.words import shown
    from evalrig.store.layout import home_path
    from evalrig.store.serving import champion

    path = log_of(log)
    c = champion(path, home_path(os.environ))
    s = c.serving
    p = c.policy
    if json_out:
        emit_json({"serving": s is not None, "checkpoint_id": s and s.checkpoint_id, "name": c.name,
                   "since": s and s.since, "since_kind": c.since, "policy": p, "log": str(path)})
    elif s is None:
        err(f"nothing serves: nothing has shipped yet ({path})")
    else:
        policy = f"{shown(p['name'])} v{p['version']}" if p else "none recorded"
        name = shown(c.name) if c.name else "(not in the log: it served before the first ship)"
        say([s.checkpoint_id, f"name: {name}", f"since: event #{s.since} ({c.since})", f"policy: {policy}"])
    warn_torn(path, c.torn_line)
    return int(ExitCode.OK if s is not None else ExitCode.KEEP)
