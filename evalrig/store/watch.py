"""`watch`: the curves over the gate ledger and the release log, and their alerts
(docs/curves.md). Reads the home's gate ledger and the release log, takes the thresholds
from a policy file, else from the serving release's ship event, else the bundled default
policy, and appends one `alert` event per alert not already in the log, under the log's
lock (read, then append), so that a second `watch` (or two at once) adds nothing.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalrig.core import curves
from evalrig.models.base import DIGEST_PATTERN, SCHEMA_MAJOR, SCHEMA_VERSION
from evalrig.models.comparison import Curve, GateLedgerEntry, PolicyRef, Reason, Verdict
from evalrig.models.inputs import PolicyWatch
from evalrig.models.releases import AlertEvent
from evalrig.store import ledger
from evalrig.store.chain import verify_chain
from evalrig.store.policy import load_policy
from evalrig.store.releases import ReleaseLog, appending, read_log

if TYPE_CHECKING:
    from pydantic import BaseModel

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


def marks_of(log: ReleaseLog) -> list[curves.ReleaseMark]:
    """The ships and rollbacks, from the fields the release log checks on every line."""
    out = []
    for m in log.moves:
        row = log.rows[m.seq]
        at = _ts(row.get("at"))
        if at is None:
            at = log.event(m.seq).at  # the model names what is wrong with the line
        digest = row["decision"]["digest"] if m.kind == "ship" else None
        out.append(curves.ReleaseMark(m.seq, "ship" if m.kind == "ship" else "rollback", at, m.to, digest))
    return out


# -- reading the gate ledger fast --------------------------------------------------------
# `watch` reads every line of a ledger that grows by a line a gate, on a schedule, and needs
# a few fields of each (the release log is read the same way by store/releases.py). The
# chain is verified as always; each line is then checked here against the rules of its
# model (`GateLedgerEntry`: its keys, types, digest formats and words, every timestamp in the
# form the rig writes), never more loosely, so that watch reads no line that gate would
# refuse; only a line not of that shape goes through the model, which accepts it or names
# the line and the field. The model costs twice as much a line (bench/bench_watch.py).

_TS_WRITTEN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?Z").fullmatch
"""UTC with a Z, as `format_ts` writes it (with or without the fraction); any other form, which
the model may still accept, goes to the model."""
_DIGEST = re.compile(DIGEST_PATTERN).fullmatch


def _ts(v: object) -> datetime | None:
    if not (isinstance(v, str) and _TS_WRITTEN(v)):
        return None
    try:
        return datetime.fromisoformat(v)
    except ValueError:  # a day that is not in the calendar
        return None


def _keys(model: type[BaseModel]) -> tuple[frozenset[str], frozenset[str]]:
    """(every key, the required keys) of a model's lines: it refuses others and lacks."""
    fields = model.model_fields
    return frozenset(fields), frozenset(k for k, f in fields.items() if f.is_required())


def _digests(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and _DIGEST(x) for x in v)


def _num(v: object) -> bool:
    # orjson reads no NaN or infinity: a parsed float is finite
    return v is None or type(v) is float or type(v) is int


class _Shape(Exception):
    """A ledger line not of the shape the rig writes: read it through its model instead."""


def _sides(v: object) -> tuple[float | None, float | None]:
    if not (isinstance(v, dict) and v.keys() == {"champion", "candidate"} and _num(v["champion"])
            and _num(v["candidate"])):
        raise _Shape
    return v["champion"], v["candidate"]


_CURVE_KEYS = _keys(Curve)[0]
_SIDED = ("fixed_pass_rate", "cost_per_task", "public_pass_rate")


def _curve(v: object) -> tuple[dict[str, float | None] | None, tuple[float, float] | None]:
    """The curve's numbers by metric and its bounds; (None, None) for a line without one."""
    if v is None:
        return None, None
    if not (isinstance(v, dict) and v.keys() == _CURVE_KEYS and _num(v["fresh_mean_d"])):
        raise _Shape
    b = v["fresh_bounds"]
    if not (b is None or (isinstance(b, list) and len(b) == 2 and all(x is not None and _num(x) for x in b))):
        raise _Shape
    out: dict[str, float | None] = {"fresh_mean_d": v["fresh_mean_d"]}
    for name in _SIDED:
        out[f"{name}.champion"], out[f"{name}.candidate"] = _sides(v[name])
    return out, (b[0], b[1]) if b is not None else None


_VERDICTS = frozenset(typing.get_args(Verdict))
_REASONS = frozenset(typing.get_args(Reason))
_GATE_KEYS, _GATE_REQUIRED = _keys(GateLedgerEntry)
_POLICY_KEYS = _keys(PolicyRef)[0]
_GATE_DIGESTS = ("comparison_digest", "champion_id", "candidate_id", "decision_digest")
_SCHEMA_VERSION = re.compile(rf"{SCHEMA_MAJOR}\.[0-9]+").fullmatch  # models.base.Record: this major


def _gate(obj: dict[str, Any]) -> curves.GateLine:
    keys = obj.keys()
    if not (keys <= _GATE_KEYS and keys >= _GATE_REQUIRED):
        raise _Shape
    values, bounds = _curve(obj.get("curve"))
    at = _ts(obj["at"])
    policy, version = obj["policy"], obj.get("schema_version", SCHEMA_VERSION)
    if (at is None or type(obj["advisory"]) is not bool or obj["verdict"] not in _VERDICTS
            or obj["reason"] not in _REASONS or not _digests([obj[k] for k in _GATE_DIGESTS])
            or not _digests(obj.get("fresh_content", []))
            or not (isinstance(version, str) and _SCHEMA_VERSION(version))
            or not isinstance(obj["comparison_dir"], str)
            or not (obj["exception"] is None or isinstance(obj["exception"], str))
            or not (isinstance(policy, dict) and policy.keys() == _POLICY_KEYS
                    and isinstance(policy["name"], str) and type(policy["version"]) is int
                    and isinstance(policy["digest"], str) and _DIGEST(policy["digest"]))):
        raise _Shape
    return curves.GateLine(
        comparison_digest=obj["comparison_digest"], advisory=obj["advisory"], verdict=obj["verdict"],
        reason=obj["reason"], at=at, champion_id=obj["champion_id"], candidate_id=obj["candidate_id"],
        decision_digest=obj["decision_digest"], values=values, bounds=bounds)


def gate_lines(home: Path) -> list[curves.GateLine]:
    """The gate ledger's lines for the curves."""
    path = ledger.ledger_path(home)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError:
        return [curves.gate_line(e) for e in ledger.all_gates(home)]  # says what is wrong with it
    try:
        return [_gate(obj) for obj in verify_chain(path, data).objs]
    except _Shape:  # the model names the line and the field
        return [curves.gate_line(e) for e in ledger.all_gates(home)]


def thresholds(policy: Path | None, log: ReleaseLog) -> tuple[PolicyWatch, str]:
    if policy is not None:
        return load_policy(policy).spec.watch, str(policy)
    now = log.serving()
    ship = log.ship(now.promoted_by) if now is not None else None  # the one ship event read in full
    if ship is not None:
        return ship.watch, f"the ship event {ship.seq} of the serving release"
    if DEFAULT_POLICY.is_file():
        return load_policy(DEFAULT_POLICY).spec.watch, str(DEFAULT_POLICY)
    return PolicyWatch(), "the default [watch] thresholds"


def _new(firing: list[curves.Alert], log: ReleaseLog, now: datetime) -> list[AlertEvent]:
    logged = {log.rows[i]["alert_id"] for i in log.seqs("alert")}
    return [AlertEvent(seq=0, at=now, alert_id=a.alert_id, alert_kind=a.alert_kind, metric=a.metric,
                       trains=list(a.trains), detail=a.detail)
            for a in firing if a.alert_id not in logged]


def watch(home: Path, log: Path, policy: Path | None, now: datetime) -> Watched:
    """Draw the curves, check them, and append the new alerts to the release log at `log`."""
    trains = curves.trains_of(gate_lines(home))
    got = read_log(log)
    th, source = thresholds(policy, got)
    marks = marks_of(got)
    firing = curves.alerts(trains.trains, marks, th)
    new = _new(firing, got, now)
    if new:
        with appending(log) as writer:  # again under the lock: another watch may have appended
            marks = marks_of(writer)
            firing = curves.alerts(trains.trains, marks, th)
            new = [writer.append(e) for e in _new(firing, writer, now)]
    return Watched(trains, marks, th, source, firing, new, log)
