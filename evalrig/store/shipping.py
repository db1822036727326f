"""`ship`, `champion` and a person's `rollback` over the release log (docs/release-engineers.md).

`ship` believes what `check-release` believes (it calls it: the gate ledger, the comparison
re-verified, the home's last sign-off, the sealed candidate), then, under the log's lock,
that the train's champion is the checkpoint serving now: a train run against an older
champion cannot ship over a newer one. Shipping a decision again while its candidate
serves writes nothing. A rollback is an event, never an erasure: the failed release stays
in the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from evalrig.core.errors import UsageError, invalid
from evalrig.core.releases import Serving, previous, served, serving
from evalrig.models.inputs import PolicyTripwires, PolicyWatch
from evalrig.models.releases import (
    MAINTENANCE_NOTE,
    DecisionRef,
    Event,
    RollbackEvent,
    ShipEvent,
    ShippedCandidate,
)
from evalrig.store import ledger
from evalrig.store.checkpoint import load_checkpoint
from evalrig.store.invocation import command_name, quoted
from evalrig.store.releases import appending, read_log
from evalrig.store.signoff import check_release, read_decision


@dataclass(frozen=True)
class ShipResult:
    approved: bool
    reason: str
    """check-release's reason (approved or not)."""
    hint: str | None = None
    event: ShipEvent | None = None
    """The ship event written, or the earlier one of this decision when `already`."""
    already: bool = False
    torn_cut: int | None = None


def short(checkpoint_id: str) -> str:
    """A checkpoint id as people read it: the first 12 hex digits."""
    return checkpoint_id.removeprefix("sha256:")[:12]


def _stale(log: Path, champion: str, now: Serving) -> Exception:
    return invalid(
        f"the train's champion {short(champion)} no longer serves: {short(now.checkpoint_id)} does "
        f"(since event {now.since})", file=log,
        hint="a train against an older champion cannot ship over a newer one: run the train again "
        f"with the serving champion (`{command_name()} champion` names it) as its champion side")


def ship(decision_path: Path, checkpoint_dir: Path, log: Path, home: Path, now: datetime) -> ShipResult:
    """Append a `ship` event for an approved decision (docs/release-engineers.md, "ship")."""
    read_log(log)  # a broken log is refused before anything else is believed
    check = check_release(decision_path, checkpoint_dir, home)
    if not check.approved:
        return ShipResult(False, check.reason, check.hint)
    opened = read_decision(Path(decision_path))
    d = opened.decision
    candidate = d.candidate.checkpoint_id
    name = load_checkpoint(Path(checkpoint_dir)).spec.name
    signoffs = ledger.home_signoffs_of(home, opened.digest)
    with appending(log) as w:
        now_serving = serving(w.events)
        if now_serving is not None and now_serving.checkpoint_id == candidate:
            earlier = [e for e in w.events if isinstance(e, ShipEvent) and e.decision.digest == opened.digest]
            if earlier:
                return ShipResult(True, check.reason, event=earlier[-1], already=True, torn_cut=w.torn_cut)
        if now_serving is not None and now_serving.checkpoint_id != d.champion.checkpoint_id:
            raise _stale(log, d.champion.checkpoint_id, now_serving)
        event = w.append(ShipEvent(
            seq=0, at=now, decision=DecisionRef(path=str(decision_path), digest=opened.digest),
            verdict=d.verdict, reason=d.reason, candidate=ShippedCandidate(checkpoint_id=candidate, name=name),
            replaces=now_serving.checkpoint_id if now_serving is not None else d.champion.checkpoint_id,
            policy=d.policy, tripwires=d.tripwires or PolicyTripwires(), watch=d.watch or PolicyWatch(),
            signed_by=signoffs[-1].by,
            note=MAINTENANCE_NOTE if d.verdict == "promote-maintenance" else None,
        ))
        return ShipResult(True, check.reason, event=event, torn_cut=w.torn_cut)


@dataclass(frozen=True)
class Champion:
    serving: Serving | None
    events: list[Event]
    torn_line: int | None


def champion(log: Path) -> Champion:
    got = read_log(log)
    return Champion(serving(got.events), got.events, got.torn_line)


def resolve_target(to: str, events: list[Event], log: Path) -> str:
    """`--to`: `previous`, a checkpoint id, or a unique prefix of one (its hex digits)."""
    now = serving(events)
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
        why = "matches more than one" if len(matches) > 1 else "is not a checkpoint that served before"
        raise invalid(f"--to {to} {why} (checkpoints that served: {said}); only a sealed checkpoint that "
                      "served can be rolled back to", file=log, field="--to",
                      hint="give `previous`, or a checkpoint id (or at least 6 of its hex digits) from `history`")
    if matches[0] == now.checkpoint_id:
        raise invalid(f"--to {to}: {short(now.checkpoint_id)} is the checkpoint serving now", file=log,
                      field="--to", hint="name another checkpoint that served, or `previous`")
    return matches[0]


def rollback(to: str, by: str, reason: str, log: Path, now: datetime) -> RollbackEvent:
    """A person's rollback: the serving checkpoint out, `to` (which served before) in."""
    if not by.strip():
        raise UsageError("--by: give the name of the person rolling back")
    if not reason.strip():
        raise UsageError("--reason: say why the release is rolled back")
    read_log(log)
    with appending(log) as w:
        target = resolve_target(to, w.events, log)
        frm = serving(w.events)
        assert frm is not None  # resolve_target refused an empty log
        return w.append(RollbackEvent.model_validate({
            "seq": 0, "at": now, "from": frm.checkpoint_id, "to": target, "trigger": "person",
            "by": by, "reason": reason, "evidence": None}))


def ship_command(decision: Path, checkpoint: Path) -> str:
    return f"{command_name()} ship {quoted(decision)} --checkpoint {quoted(checkpoint)}"
