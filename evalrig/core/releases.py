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
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # `champion` reads the release log without importing the models (store/releases.py)
    from evalrig.models.releases import Event


RELEASE_KINDS = ("ship", "rollback")
"""The events that change what serves ("release events")."""


class Move(NamedTuple):
    """A release event as the serving rules see it: which checkpoint it put in service
    (`to`), and which one it took out (`out`: a ship's `replaces`, a rollback's `from`). A
    tuple: a long log has thousands, made on every read."""

    seq: int
    kind: str
    """"ship" or "rollback"."""
    to: str
    out: str | None

    @staticmethod
    def of(e: Event) -> Move | None:
        """The move of a ship or rollback event; None for the other kinds."""
        if e.kind == "ship":
            return Move(e.seq, "ship", e.candidate.checkpoint_id, e.replaces)
        if e.kind == "rollback":
            return Move(e.seq, "rollback", e.to, e.from_)
        return None


def moves_of(events: Sequence[Event]) -> list[Move]:
    return [m for m in map(Move.of, events) if m is not None]


@dataclass(frozen=True)
class Serving:
    checkpoint_id: str
    since: int
    """The seq of the release event that put it in service."""
    promoted_by: int | None
    """The seq of the ship event whose policy declared its tripwires and watch: its last ship;
    for the first champion (never shipped itself), the first ship."""


def promoted_by(moves: Sequence[Move], checkpoint_id: str) -> int | None:
    ships = [m for m in moves if m.kind == "ship"]
    own = [m for m in ships if m.to == checkpoint_id]
    if own:
        return own[-1].seq
    return ships[0].seq if ships and ships[0].out == checkpoint_id else None


def serving(moves: Sequence[Move]) -> Serving | None:
    """The serving champion, or None before the first ship."""
    if not moves:
        return None
    last = moves[-1]
    return Serving(last.to, last.seq, promoted_by(moves, last.to))


def served(moves: Sequence[Move]) -> set[str]:
    """Every checkpoint that has been in service (the first ship's `replaces` included)."""
    out = {m.to for m in moves}
    if moves and moves[0].kind == "ship" and moves[0].out is not None:
        out.add(moves[0].out)
    return out


def previous(moves: Sequence[Move]) -> str | None:
    """The rollback target `previous`, or None when there is none."""
    now: str | None = None
    ended: dict[str, tuple[int, str]] = {}  # checkpoint -> (seq of its last removal, kind)
    for m in moves:
        before = now if now is not None else m.out
        if before is not None and before != m.to:
            ended[before] = (m.seq, m.kind)
        now = m.to
    eligible = [(seq, cid) for cid, (seq, kind) in ended.items() if cid != now and kind != "rollback"]
    return max(eligible)[1] if eligible else None
