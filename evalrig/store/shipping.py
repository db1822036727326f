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

from evalrig.core.errors import invalid
from evalrig.core.releases import Serving
from evalrig.models.inputs import PolicyTripwires, PolicyWatch
from evalrig.models.releases import (
    MAINTENANCE_NOTE,
    DecisionRef,
    ReliedOn,
    ShipEvent,
    ShippedCandidate,
)
from evalrig.store import ledger
from evalrig.store.checkpoint import load_checkpoint
from evalrig.store.invocation import command_name
from evalrig.store.releases import LogWriter, appending
from evalrig.store.serving import short
from evalrig.store.signoff import OpenDecision, ReleaseCheck, check_release, read_decision


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


def _stale(log: Path, champion: str, now: Serving) -> Exception:
    return invalid(
        f"the train's champion {short(champion)} no longer serves: {short(now.checkpoint_id)} does "
        f"(since event {now.since})", file=log,
        hint="a train against an older champion cannot ship over a newer one: run the train again "
        f"with the serving champion (`{command_name()} champion` names it) as its champion side")


Approval = tuple[OpenDecision, ReleaseCheck]


def _approval(decision_path: Path, checkpoint_dir: Path, home: Path) -> Approval:
    """The decision, and check-release's answer about it. A decision file that cannot be read
    as one (missing, not JSON, not the decision's format) is bad input, refused with exit 4
    naming the file and the field (docs/release-flow.md): ship's exit 1 means only "not
    approved", a readable decision that check-release does not approve. (check-release itself
    answers 1 for anything short of approved: it is the guard a deploy step waits on.)"""
    return read_decision(Path(decision_path)), check_release(decision_path, checkpoint_dir, home)


def ship(decision_path: Path, checkpoint_dir: Path, log: Path, home: Path, now: datetime,
         home_key: str | None = None) -> ShipResult:
    """Append a `ship` event for an approved decision (docs/release-engineers.md, "ship").

    A log that exists is verified (under its lock) before anything else is believed, so that
    a broken log is refused (exit 4) whatever the decision; a missing one is created only
    for an approved decision. `home_key`: the home key's fingerprint a release flow pinned
    (`--home-key`): another key is refused (exit 4)."""
    from evalrig.store.signing import check_pinned

    check_pinned(home, home_key)
    if Path(log).exists():
        with appending(log, home) as w:
            return _ship(w, decision_path, checkpoint_dir, log, home, now, None)
    approval = _approval(decision_path, checkpoint_dir, home)
    if not approval[1].approved:
        return ShipResult(False, approval[1].reason, approval[1].hint)
    with appending(log, home) as w:
        return _ship(w, decision_path, checkpoint_dir, log, home, now, approval)


def _ship(w: LogWriter, decision_path: Path, checkpoint_dir: Path, log: Path, home: Path, now: datetime,
          approval: Approval | None) -> ShipResult:
    opened, check = approval or _approval(decision_path, checkpoint_dir, home)
    if not check.approved:
        return ShipResult(False, check.reason, check.hint)
    d = opened.decision
    candidate = d.candidate.checkpoint_id
    now_serving = w.serving()
    if now_serving is not None and now_serving.checkpoint_id == candidate:
        earlier = [i for i in w.seqs("ship") if w.rows[i]["decision"]["digest"] == opened.digest]
        if earlier:
            return ShipResult(True, check.reason, event=w.ship(earlier[-1]), already=True, torn_cut=w.torn_cut)
    if now_serving is not None and now_serving.checkpoint_id != d.champion.checkpoint_id:
        raise _stale(log, d.champion.checkpoint_id, now_serving)
    # what check-release believed, embedded as the home signed it (docs/security.md)
    gate = [g for g in ledger.gates_issuing(home, opened.digest) if not g.advisory][-1]
    signoff = ledger.home_signoffs_of(home, opened.digest)[-1]
    event = w.append(ShipEvent(
        seq=0, at=now, decision=DecisionRef(path=str(decision_path), digest=opened.digest),
        verdict=d.verdict, reason=d.reason,
        candidate=ShippedCandidate(checkpoint_id=candidate, name=load_checkpoint(Path(checkpoint_dir)).spec.name),
        replaces=now_serving.checkpoint_id if now_serving is not None else d.champion.checkpoint_id,
        policy=d.policy, tripwires=d.tripwires or PolicyTripwires(), watch=d.watch or PolicyWatch(),
        invariants=d.invariants,
        signed_by=signoff.by,
        note=MAINTENANCE_NOTE if d.verdict == "promote-maintenance" else None,
        relied_on=ReliedOn(gate=gate.model_dump(mode="json"), signoff=signoff.model_dump(mode="json")),
    ))
    return ShipResult(True, check.reason, event=event, torn_cut=w.torn_cut)
