"""Who serves now, and a person's rollback (docs/release-engineers.md).

Kept apart from `ship` (store/shipping.py), which believes what check-release believes and so
reads comparisons and their statistics: `champion` and `rollback` read the release log alone
and start as fast as the CLI does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalrig.core.errors import UsageError, invalid
from evalrig.core.releases import Serving, previous, served
from evalrig.store.invocation import command_name
from evalrig.store.releases import ReleaseLog, appending, read_log

if TYPE_CHECKING:
    from evalrig.models.releases import RollbackEvent


def short(checkpoint_id: str) -> str:
    """A checkpoint id as people read it: the first 12 hex digits."""
    return checkpoint_id.removeprefix("sha256:")[:12]


@dataclass(frozen=True)
class Champion:
    serving: Serving | None
    since: str | None
    """The kind of the event that put it in service."""
    policy: dict[str, Any] | None
    """{name, version, digest} of the policy that promoted it (its ship's, or the first ship's)."""
    name: str | None
    """Its name, when a ship event of it names it (the first champion's is not in the log)."""
    torn_line: int | None


def champion(log: Path, home: Path | None = None) -> Champion:
    """Read from the fields every line's check covers (store/releases.py): no event is validated,
    so that `champion` costs little more than the CLI's start-up. `home`: see `read_log`."""
    got = read_log(log, home)
    s = got.serving()
    if s is None:
        return Champion(None, None, None, None, got.torn_line)
    by = None if s.promoted_by is None else got.rows[s.promoted_by]
    name = by["candidate"]["name"] if by is not None and by["candidate"]["checkpoint_id"] == s.checkpoint_id else None
    policy = None if by is None else {k: by["policy"][k] for k in ("name", "version", "digest")}
    return Champion(s, got.rows[s.since]["kind"], policy, name, got.torn_line)


def resolve_target(to: str, got: ReleaseLog, log: Path) -> str:
    """`--to`: `previous`, a checkpoint id, or a unique prefix of one (its hex digits)."""
    events = got.moves
    now = got.serving()
    if now is None:
        raise invalid("nothing has shipped: nothing serves, so nothing can be rolled back", file=log,
                      hint=f"ship a signed decision first (`{command_name()} ship DECISION --checkpoint DIR`)")
    if to == "previous":
        target = previous(events)
        if target is None:
            raise invalid(
                "no checkpoint to roll back to: every checkpoint that served before the serving one left "
                "service by a rollback", file=log,
                hint="name one with --to CHECKPOINT_ID (`history` lists what served), or ship a signed decision")
        return target
    candidates = sorted(served(events))
    digits = to.removeprefix("sha256:")
    matches = [c for c in candidates if c.removeprefix("sha256:").startswith(digits)] if digits else []
    if len(matches) != 1 or len(digits) < 6:
        said = ", ".join(short(c) for c in candidates)
        why = ("is too short to name a checkpoint (give at least 6 hex digits)" if len(digits) < 6
               else "matches more than one" if len(matches) > 1 else "is not a checkpoint that served before")
        raise invalid(f"--to {to} {why} (checkpoints that served: {said}); only a sealed checkpoint that "
                      "served can be rolled back to", file=log, field="--to",
                      hint="give `previous`, or a checkpoint id (or at least 6 of its hex digits) from `history`")
    if matches[0] == now.checkpoint_id:
        raise invalid(f"--to {to}: {short(now.checkpoint_id)} is the checkpoint serving now", file=log,
                      field="--to", hint="name another checkpoint that served, or `previous`")
    return matches[0]


def rollback(to: str, by: str, reason: str, log: Path, now: datetime) -> tuple[RollbackEvent, int | None]:
    """A person's rollback: the serving checkpoint out, `to` (which served before) in. Returns
    the event and the number of a torn last line cut before it, if any."""
    if not by.strip():
        raise UsageError("--by: give the name of the person rolling back")
    if not reason.strip():
        raise UsageError("--reason: say why the release is rolled back")
    from evalrig.models.releases import RollbackEvent

    if not Path(log).exists():
        resolve_target(to, read_log(log), log)  # nothing serves: refused before a file is made
    with appending(log) as w:
        target = resolve_target(to, w, log)
        frm = w.serving()
        assert frm is not None  # resolve_target refused an empty log
        return w.append(RollbackEvent.model_validate({
            "seq": 0, "at": now, "from": frm.checkpoint_id, "to": target, "trigger": "person",
            "by": by, "reason": reason, "evidence": None})), w.torn_cut
