"""`history`: the release log's events in order, or `--verify-only` its chain (docs/release-engineers.md).

The events are said here once, for `history` and for the commands that append them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, LogOpt, command, emit_json, err, say

if TYPE_CHECKING:
    from evalrig.models.releases import Event


def log_of(log: Path | None) -> Path:
    """--log, else the home's release log."""
    if log is not None:
        return log
    from evalrig.store.checkpoint import evalrig_home  # checks the home; imports the models
    from evalrig.store.releases import log_path

    return log_path(evalrig_home())


def warn_torn(log: Path, line: int | None, cut: bool = False) -> None:
    if line is not None:
        err(f"warning: {log}:{line}: the last line is torn (a crash during an append): it was not read"
            + ("; it was cut before this append" if cut else "; the next append cuts it"))


def _id(checkpoint_id: str | None) -> str:
    from evalrig.store.serving import short

    return "nothing" if checkpoint_id is None else short(checkpoint_id)


def describe(e: Event) -> str:
    """One event in one line, for people (names and reasons escaped: people and agents wrote them)."""
    from evalrig.core.words import shown
    from evalrig.models.base import format_ts

    head = f"#{e.seq} {format_ts(e.at)[:19]}Z {e.kind}"
    if e.kind == "ship":
        note = f"; {e.note}" if e.note else ""
        return (f"{head} {shown(e.candidate.name)} {_id(e.candidate.checkpoint_id)} replaces {_id(e.replaces)}: "
                f"{e.verdict} ({e.reason}), signed by {shown(e.signed_by)}, policy {shown(e.policy.name)} "
                f"v{e.policy.version}{note}")
    if e.kind == "tripwire":
        failed = [c.name for c in e.checks if not c.held]
        said = "held" if e.held else "FAILED: " + ", ".join(failed)
        return f"{head} {_id(e.checkpoint_id)} {said} (bundle {shown(e.bundle.path)})"
    if e.kind == "rollback":
        why = f"tripwire event #{e.evidence}" if e.evidence is not None else shown(e.reason)
        return f"{head} {_id(e.from_)} -> {_id(e.to)} by {shown(e.by)} ({e.trigger}): {why}"
    return f"{head} {e.alert_kind} {shown(e.metric)} [{shown(e.alert_id)}]: {shown(e.detail)}"


@command("history", "evalrig history --log releases.jsonl --verify-only")
def history(
    log: LogOpt = None,
    verify_only: Annotated[bool, typer.Option(
        "--verify-only", help="Only verify the chain: say where it breaks (exit 4), else how many events it holds.")
    ] = False,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """The release log's events in order: ships, tripwires, rollbacks, alerts.

    Exit 0 (an empty or missing log has no events), 4 when the log does not verify, naming
    the first line where its hash chain breaks.
    """
    from evalrig.store.releases import read_log

    path = log_of(log)
    got = read_log(path)
    if json_out:
        out: dict[str, object] = {"log": str(path), "verified": True, "events": len(got.events),
                                  "torn_line": got.torn_line}
        if not verify_only:
            out["events"] = got.events
        emit_json(out)
    elif verify_only:
        say(f"ok: {path}: the chain verifies, {len(got.events)} events")
    elif not got.events:
        say(f"no events: nothing has shipped ({path})")
    else:
        say([describe(e) for e in got.events], result=len(got.events))
    warn_torn(path, got.torn_line)
    return 0
