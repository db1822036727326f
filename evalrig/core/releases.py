"""Who serves, and what `previous` is: pure rules over the release log's events
(docs/release-engineers.md, "What serves").

The serving champion is the checkpoint that the last release event (`ship` or `rollback`)
put in service; before the first ship nothing serves, and the first ship's `replaces`
counts as having served until then. `previous` is the checkpoint, other than the serving
one, whose last time in service ended most recently, leaving out every checkpoint whose
last removal from service was a rollback (a rollback never goes back to what was rolled
back from).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evalrig.models.comparison import PolicyRef
from evalrig.models.releases import RELEASE_KINDS, ReleaseEvent, RollbackEvent, ShipEvent


@dataclass(frozen=True)
class Serving:
    checkpoint_id: str
    since: int
    """The seq of the release event that put it in service."""
    name: str | None
    """The checkpoint's name, when a ship event names it (the first champion has none)."""
    promoted_by: ShipEvent | None
    """The ship event whose policy declared its tripwires and watch: the last ship of this
    checkpoint; for the first champion (never shipped itself), the first ship."""

    @property
    def policy(self) -> PolicyRef | None:
        return self.promoted_by.policy if self.promoted_by is not None else None


def release_events(events: Sequence[ReleaseEvent]) -> list[ShipEvent | RollbackEvent]:
    return [e for e in events if isinstance(e, (ShipEvent, RollbackEvent)) and e.kind in RELEASE_KINDS]


def _target(e: ShipEvent | RollbackEvent) -> str:
    return e.candidate.checkpoint_id if isinstance(e, ShipEvent) else e.to


def promoted_by(events: Sequence[ReleaseEvent], checkpoint_id: str) -> ShipEvent | None:
    ships = [e for e in events if isinstance(e, ShipEvent)]
    own = [e for e in ships if e.candidate.checkpoint_id == checkpoint_id]
    if own:
        return own[-1]
    first = ships[0] if ships else None
    return first if first is not None and first.replaces == checkpoint_id else None


def serving(events: Sequence[ReleaseEvent]) -> Serving | None:
    """The serving champion, or None before the first ship."""
    rel = release_events(events)
    if not rel:
        return None
    last = rel[-1]
    cid = _target(last)
    by = promoted_by(events, cid)
    name = by.candidate.name if by is not None and by.candidate.checkpoint_id == cid else None
    return Serving(cid, last.seq, name, by)


def served(events: Sequence[ReleaseEvent]) -> set[str]:
    """Every checkpoint that has been in service (the first ship's `replaces` included)."""
    out: set[str] = set()
    for e in release_events(events):
        if isinstance(e, ShipEvent) and e.replaces is not None:
            out.add(e.replaces)
        out.add(_target(e))
    return out


def previous(events: Sequence[ReleaseEvent]) -> str | None:
    """The rollback target `previous`, or None when there is none."""
    now: str | None = None
    ended: dict[str, tuple[int, str]] = {}  # checkpoint -> (seq of its last removal, kind)
    for e in release_events(events):
        before = now if now is not None else (e.replaces if isinstance(e, ShipEvent) else None)
        after = _target(e)
        if before is not None and before != after:
            ended[before] = (e.seq, e.kind)
        now = after
    eligible = [(seq, cid) for cid, (seq, kind) in ended.items() if cid != now and kind != "rollback"]
    return max(eligible)[1] if eligible else None
