"""`champion`: the checkpoint serving now (docs/release-engineers.md)."""

from __future__ import annotations

from evalrig.cli.app import DebugOpt, JsonOpt, LogOpt, command, emit_json, err, say
from evalrig.cli.cmd_history import log_of, warn_torn
from evalrig.core.errors import ExitCode


@command("champion", "evalrig champion --json")
def champion_cmd(log: LogOpt = None, json_out: JsonOpt = False, debug: DebugOpt = False) -> int:
    """The serving checkpoint: its id, name, since which event, under which policy.

    Exit 0, or 1 when nothing has shipped yet (nothing serves); 4 when the log does not verify.
    """
    from evalrig.run.findings import shown
    from evalrig.store.shipping import champion

    path = log_of(log)
    c = champion(path)
    s = c.serving
    if json_out:
        emit_json({"serving": s is not None, "checkpoint_id": s and s.checkpoint_id, "name": s and s.name,
                   "since": s and s.since, "since_kind": s and c.events[s.since].kind,
                   "policy": s and s.policy, "log": str(path)})
    elif s is None:
        err(f"nothing serves: nothing has shipped yet ({path})")
    else:
        policy = f"{shown(s.policy.name)} v{s.policy.version}" if s.policy else "none recorded"
        name = shown(s.name) if s.name else "(its name is not in the log: it served before the first ship)"
        say([s.checkpoint_id, f"name: {name}", f"since: event #{s.since} ({c.events[s.since].kind})",
             f"policy: {policy}"])
    warn_torn(path, c.torn_line)
    return int(ExitCode.OK if s is not None else ExitCode.KEEP)
