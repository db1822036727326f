"""The curves over release trains and the alerts that page a person (docs/curves.md). Pure.

A train is one point: the last non-advisory gate of a comparison, in ledger order (a
comparison gated again moves to its last gate). Ledger lines written before the rig
recorded `curve` are skipped and counted, so that `watch` can say how many it could not
draw. Every alert is evaluated on every prefix of the history, so that an alert that keeps
firing as trains arrive keeps the id it was first raised with: its id names its kind, its
metric and the first train (or release event) it covers, and appending trains that do not
touch it never changes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from evalrig.core.digest import short_digest
from evalrig.core.words import count
from evalrig.models.comparison import Comparison, Curve, CurveSides, GateLedgerEntry, Verdict
from evalrig.models.inputs import PolicyWatch
from evalrig.models.releases import AlertKind

RATE_METRICS = ("fixed_pass_rate.champion", "fixed_pass_rate.candidate",
                "public_pass_rate.champion", "public_pass_rate.candidate")
COST_METRICS = ("cost_per_task.champion", "cost_per_task.candidate")
FLOOR_METRIC = "fixed_pass_rate.champion"
STALL_METRIC = "promote"
REVERSAL_METRIC = "rollback"
Thresholds = PolicyWatch
"""The policy's `[watch]` table (docs/policy.md)."""


# -- the curve of one gate ---------------------------------------------------------------


def _rate(c: Comparison, suite: str, side: Literal["champion", "candidate"]) -> float | None:
    s = c.suites.get(suite)  # type: ignore[call-overload]
    if s is None or s.tasks == 0:
        return None
    return getattr(s, side).pass_rate  # type: ignore[no-any-return]


def _cost(c: Comparison, side: Literal["champion", "candidate"]) -> float | None:
    """Task-weighted mean of the suites' cost per task; null when a suite with tasks has none."""
    total, n = 0.0, 0
    for s in c.suites.values():
        tasks = s.paired if s.paired is not None else s.tasks
        if tasks == 0:
            continue
        v = getattr(s, side).cost_per_task
        if v is None:
            return None
        total += v * tasks
        n += tasks
    return total / n if n else None


def curve_of(c: Comparison) -> Curve:
    """What the gate writes beside its verdict in the ledger (docs/curves.md)."""
    fresh = c.suites["fresh"]
    tb = fresh.t_bounds if fresh.tasks else None
    return Curve(
        fixed_pass_rate=CurveSides(champion=_rate(c, "fixed", "champion"), candidate=_rate(c, "fixed", "candidate")),
        fresh_mean_d=fresh.mean_d if fresh.tasks else None,
        fresh_bounds=(tb.lower, tb.upper) if tb is not None else None,
        cost_per_task=CurveSides(champion=_cost(c, "champion"), candidate=_cost(c, "candidate")),
        public_pass_rate=CurveSides(champion=_rate(c, "public", "champion"),
                                    candidate=_rate(c, "public", "candidate")),
    )


# -- trains ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateLine:
    """What the curves read from one line of the gate ledger."""

    comparison_digest: str
    advisory: bool
    verdict: Verdict
    reason: str
    at: datetime
    champion_id: str
    candidate_id: str
    decision_digest: str
    values: dict[str, float | None] | None
    """The curve's numbers by metric (`fixed_pass_rate.champion`, ...); None on a line without `curve`."""
    bounds: tuple[float, float] | None = None
    """The curve's `fresh_bounds`."""


def values_of(c: Curve) -> dict[str, float | None]:
    out: dict[str, float | None] = {"fresh_mean_d": c.fresh_mean_d}
    for name in ("fixed_pass_rate", "cost_per_task", "public_pass_rate"):
        sides = getattr(c, name)
        out[f"{name}.champion"], out[f"{name}.candidate"] = sides.champion, sides.candidate
    return out


def gate_line(e: GateLedgerEntry) -> GateLine:
    return GateLine(
        comparison_digest=e.comparison_digest, advisory=e.advisory, verdict=e.verdict, reason=e.reason, at=e.at,
        champion_id=e.champion_id, candidate_id=e.candidate_id, decision_digest=e.decision_digest,
        values=values_of(e.curve) if e.curve is not None else None,
        bounds=e.curve.fresh_bounds if e.curve is not None else None)


@dataclass(frozen=True)
class Train:
    index: int
    """0-based position among the trains drawn."""
    id: str
    """The short comparison digest (the name `retire` gives the train's folder too)."""
    line: GateLine
    values: dict[str, float | None]

    def value(self, metric: str) -> float | None:
        return self.values[metric]


@dataclass(frozen=True)
class Trains:
    trains: tuple[Train, ...]
    skipped: int
    """Trains whose last gate was written before the ledger carried `curve` (not drawn)."""


def trains_of(lines: Iterable[GateLine | GateLedgerEntry]) -> Trains:
    last: dict[str, tuple[int, GateLine | GateLedgerEntry]] = {}
    for i, e in enumerate(lines):
        if not e.advisory:
            last[e.comparison_digest] = (i, e)
    out: list[Train] = []
    skipped = 0
    for _, e in sorted(last.values(), key=lambda x: x[0]):
        g = gate_line(e) if isinstance(e, GateLedgerEntry) else e
        if g.values is None:
            skipped += 1
            continue
        out.append(Train(index=len(out), id=short_digest(g.comparison_digest), line=g, values=g.values))
    return Trains(tuple(out), skipped)


# -- release events as the curves see them -----------------------------------------------


@dataclass(frozen=True)
class ReleaseMark:
    """A `ship` or `rollback` event of the release log, as a mark on the curves."""

    seq: int
    kind: Literal["ship", "rollback"]
    at: datetime
    checkpoint_id: str
    """What it put in service."""
    decision_digest: str | None = None
    """A ship's decision (which names its train through the ledger); null for a rollback."""


# -- alerts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alert:
    alert_id: str
    alert_kind: AlertKind
    metric: str
    trains: tuple[str, ...]
    """The train ids it covers now (for `reversal`: the trains whose ships are in its window)."""
    detail: str
    figures: dict[str, float | int | None] = field(default_factory=dict)


def alert_id(kind: AlertKind, metric: str, first: str) -> str:
    return f"{kind}:{metric}:{first}"


def _episodes(n: int, fires: Callable[[int], int | None]) -> dict[int, int]:
    """For each end point e in 0..n-1 whose prefix fires, the anchor of its episode: `fires(e)`
    gives the anchor the rule would name at e alone (or None); consecutive firing end points
    form one episode and keep its first anchor."""
    out: dict[int, int] = {}
    prev: int | None = None
    for e in range(n):
        a = fires(e)
        if a is None:
            prev = None
            continue
        prev = prev if prev is not None else a
        out[e] = prev
    return out


def _series(trains: Sequence[Train], metric: str) -> list[tuple[Train, float]]:
    return [(t, float(v)) for t in trains if (v := t.values[metric]) is not None]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _shift_alerts(trains: Sequence[Train], th: Thresholds) -> list[Alert]:
    w = th.shift_window
    out = []
    for metric in (*RATE_METRICS, *COST_METRICS):
        pts = _series(trains, metric)
        vals = [v for _, v in pts]
        cost = metric in COST_METRICS
        prefix = [0.0]
        for v in vals:
            prefix.append(prefix[-1] + v)

        def moved(e: int, vals: list[float] = vals, prefix: list[float] = prefix,
                  cost: bool = cost) -> tuple[float, float] | None:
            if w < 1 or e + 1 < 2 * w:
                return None
            before = (prefix[e + 1 - w] - prefix[e + 1 - 2 * w]) / w
            after = (prefix[e + 1] - prefix[e + 1 - w]) / w
            if cost:
                if before <= 0 or after <= 0:
                    return None
                ratio = max(after / before, before / after)
                return (before, after) if ratio >= th.shift_min_cost_ratio else None
            return (before, after) if abs(after - before) >= th.shift_min - 1e-12 else None

        def anchor(e: int, moved: Callable[[int], tuple[float, float] | None] = moved) -> int | None:
            return e + 1 - 2 * w if moved(e) else None

        eps = _episodes(len(pts), anchor)
        last = len(pts) - 1
        if last in eps:
            before, after = moved(last) or (0.0, 0.0)
            first = eps[last]
            covered = tuple(t.id for t, _ in pts[last + 1 - 2 * w:])
            how = (f"moved by a factor of {after / before:.3g}" if cost else f"moved by {after - before:+.3f}")
            out.append(Alert(
                alert_id(kind="shift", metric=metric, first=pts[first][0].id), "shift", metric, covered,
                f"{metric}: the mean of the last {w} trains ({after:.4g}) against the {w} before them "
                f"({before:.4g}) {how}, and it stayed moved",
                {"before": before, "after": after, "window": w},
            ))
    return out


def _run_alert(kind: AlertKind, metric: str, trains: Sequence[Train], bad: Callable[[Train], bool],
               length: int, say: Callable[[int], str], figures: dict[str, float | int | None]) -> list[Alert]:
    """An alert for a run of at least `length` consecutive trains each `bad`, reaching the latest
    train; its id names the run's first train."""
    if not trains or length < 1:
        return []
    run = 0
    for t in reversed(trains):
        if not bad(t):
            break
        run += 1
    if run < length:
        return []
    covered = trains[len(trains) - run:]
    return [Alert(alert_id(kind, metric, covered[0].id), kind, metric, tuple(t.id for t in covered),
                  say(run), {**figures, "trains_in_a_row": run})]


def _floor_alerts(trains: Sequence[Train], th: Thresholds) -> list[Alert]:
    pts = [t for t, _ in _series(trains, FLOOR_METRIC)]
    floor = th.floor_fixed_pass_rate
    return _run_alert(
        "floor", FLOOR_METRIC, pts, lambda t: (t.value(FLOOR_METRIC) or 0.0) < floor, th.floor_trains,
        lambda run: (f"the champion's fixed pass rate has been below {floor:g} for {count(run, 'train')} in a row: "
                     "bad and staying bad (the gate only compares two builds, and both can be bad)"),
        {"floor": floor, "latest": pts[-1].value(FLOOR_METRIC) if pts else None},
    )


def _stall_alerts(trains: Sequence[Train], th: Thresholds) -> list[Alert]:
    return _run_alert(
        "stall", STALL_METRIC, trains, lambda t: t.line.verdict != "promote", th.stall_trains,
        lambda run: f"no train promoted on a win (maintenance does not count) in the last {run} trains: stalled",
        {"stall_trains": th.stall_trains},
    )


def _reversal_alerts(marks: Sequence[ReleaseMark], trains: Sequence[Train], th: Thresholds) -> list[Alert]:
    w = th.reversal_window
    releases = sorted(marks, key=lambda m: m.seq)
    if w < 2 or not releases:
        return []

    def fires(e: int) -> int | None:
        window = releases[max(0, e + 1 - w): e + 1]
        backs = [m for m in window if m.kind == "rollback"]
        return backs[0].seq if len(backs) >= 2 else None

    eps = _episodes(len(releases), fires)
    last = len(releases) - 1
    if last not in eps:
        return []
    window = releases[max(0, last + 1 - w):]
    by_decision = {t.line.decision_digest: t.id for t in trains}
    covered = tuple(by_decision[m.decision_digest] for m in window
                    if m.kind == "ship" and m.decision_digest in by_decision)
    backs = sum(m.kind == "rollback" for m in window)
    return [Alert(
        alert_id("reversal", REVERSAL_METRIC, f"event-{eps[last]}"), "reversal", REVERSAL_METRIC, covered,
        f"{backs} rollbacks within the last {len(window)} release events: the loop keeps reversing its own "
        "promotions",
        {"rollbacks": backs, "release_events": len(window), "reversal_window": w},
    )]


def alerts(trains: Sequence[Train], marks: Sequence[ReleaseMark], th: Thresholds) -> list[Alert]:
    """Every alert firing at the latest train and release event, in a stable order."""
    return [*_shift_alerts(trains, th), *_floor_alerts(trains, th), *_stall_alerts(trains, th),
            *_reversal_alerts(marks, trains, th)]


# -- the series --------------------------------------------------------------------------


def series(trains: Sequence[Train], marks: Sequence[ReleaseMark], fired: Sequence[Alert]) -> dict[str, object]:
    """The curves on the trains' time axis, with ships, rollbacks and alerts marked (plain
    JSON values, for `watch --json` and the report)."""
    return {
        "trains": [
            {"train": t.id, "comparison_digest": t.line.comparison_digest, "at": t.line.at,
             "verdict": t.line.verdict, "reason": t.line.reason, "champion_id": t.line.champion_id,
             "candidate_id": t.line.candidate_id,
             "fixed_pass_rate": {"champion": t.values["fixed_pass_rate.champion"],
                                 "candidate": t.values["fixed_pass_rate.candidate"]},
             "fresh_mean_d": t.values["fresh_mean_d"],
             "fresh_bounds": list(t.line.bounds) if t.line.bounds else None,
             "cost_per_task": {"champion": t.values["cost_per_task.champion"],
                               "candidate": t.values["cost_per_task.candidate"]},
             "public_pass_rate": {"champion": t.values["public_pass_rate.champion"],
                                  "candidate": t.values["public_pass_rate.candidate"]}}
            for t in trains
        ],
        "releases": [{"seq": m.seq, "kind": m.kind, "at": m.at, "checkpoint_id": m.checkpoint_id} for m in marks],
        "alerts": [{"alert_id": a.alert_id, "alert_kind": a.alert_kind, "metric": a.metric,
                    "trains": list(a.trains), "detail": a.detail} for a in fired],
    }
