"""`watch`: the curves over the gate ledger and the release log, and their alerts
(docs/curves.md). Reads the home's gate ledger and the release log, takes the thresholds
from a policy file, else from the serving release's ship event, else the bundled default
policy, and appends one `alert` event per alert not already in the log, under the log's
lock (read, then append), so that a second `watch` (or two at once) adds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from evalrig.core import curves
from evalrig.core.releases import serving
from evalrig.models.inputs import PolicyWatch
from evalrig.models.releases import AlertEvent, Event, RollbackEvent, ShipEvent
from evalrig.store import ledger
from evalrig.store.policy import load_policy
from evalrig.store.releases import appending, read_log

DEFAULT_POLICY = Path(__file__).resolve().parent.parent.parent / "policies" / "default.toml"
"""The bundled default policy (the repository's policies/default.toml)."""


@dataclass(frozen=True)
class Watched:
    trains: curves.Trains
    marks: list[curves.ReleaseMark]
    thresholds: PolicyWatch
    thresholds_from: str
    """The policy file given, `ship event <seq>`, or the default policy file."""
    firing: list[curves.Alert]
    new: list[AlertEvent]
    """The alert events this run appended (the firing alerts whose id was not in the log)."""
    log: Path

    def series(self) -> dict[str, object]:
        return curves.series(self.trains.trains, self.marks, self.firing)


def marks_of(events: list[Event]) -> list[curves.ReleaseMark]:
    out = []
    for e in events:
        if isinstance(e, ShipEvent):
            out.append(curves.ReleaseMark(e.seq, "ship", e.at, e.candidate.checkpoint_id, e.decision.digest))
        elif isinstance(e, RollbackEvent):
            out.append(curves.ReleaseMark(e.seq, "rollback", e.at, e.to))
    return out


def thresholds(policy: Path | None, events: list[Event]) -> tuple[PolicyWatch, str]:
    if policy is not None:
        return load_policy(policy).spec.watch, str(policy)
    now = serving(events)
    if now is not None and now.promoted_by is not None:
        return now.promoted_by.watch, f"the ship event {now.promoted_by.seq} of the serving release"
    if DEFAULT_POLICY.is_file():
        return load_policy(DEFAULT_POLICY).spec.watch, str(DEFAULT_POLICY)
    return PolicyWatch(), "the default [watch] thresholds"


def _new(firing: list[curves.Alert], events: list[Event], now: datetime) -> list[AlertEvent]:
    logged = {e.alert_id for e in events if isinstance(e, AlertEvent)}
    return [AlertEvent(seq=0, at=now, alert_id=a.alert_id, alert_kind=a.alert_kind, metric=a.metric,
                       trains=list(a.trains), detail=a.detail)
            for a in firing if a.alert_id not in logged]


def watch(home: Path, log: Path, policy: Path | None, now: datetime) -> Watched:
    """Draw the curves, check them, and append the new alerts to the release log at `log`."""
    trains = curves.trains_of(ledger.all_gates(home))
    events = read_log(log).events
    th, source = thresholds(policy, events)
    marks = marks_of(events)
    firing = curves.alerts(trains.trains, marks, th)
    new = _new(firing, events, now)
    if new:
        with appending(log) as writer:  # again under the lock: another watch may have appended
            if writer.events != events:
                marks = marks_of(writer.events)
                firing = curves.alerts(trains.trains, marks, th)
            new = [writer.append(e) for e in _new(firing, writer.events, now)]
    return Watched(trains, marks, th, source, firing, new, log)
