"""Two runs' records in, one Comparison out (docs/statistics.md, docs/gate.md). Pure.

`run_view` turns one run's records (its manifest, result, actual and estimate lines, and
what the store found: the digests' integrity, the registered seal) into a RunView: the
final scored attempt of every trial, and the facts about the run. `build_comparison`
takes two RunViews and the history check and returns the Comparison. Nothing here reads
a file or a clock: the store (`evalrig.store.compare`) verifies and reads the two run
bundles and writes the comparison bundle. All statistics come from `evalrig.core.stats`.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import NamedTuple

from evalrig.core import stats
from evalrig.core.digest import loads
from evalrig.core.outcomes import final_of
from evalrig.models.comparison import (
    MDE,
    METRICS,
    SPEND_ROLES,
    Calibration,
    Comparison,
    Efficiency,
    Facts,
    FigureSource,
    HistoryFacts,
    Integrity,
    IntervalCalibration,
    McNemar,
    Metric,
    PerSide,
    PExact,
    PolicyPins,
    RunRef,
    SideFacts,
    SideStats,
    SpendRole,
    SpendTotal,
    SuiteStats,
    TaskRow,
    TBounds,
)
from evalrig.models.gateway import Pricing
from evalrig.models.inputs import SUITES, Suite
from evalrig.models.run import RunManifest, SandboxLevel, SealEntry

REPORT_ALPHA = 0.025
"""The level comparison.json reports t bounds, MDE and efficiency bounds at (docs/statistics.md)."""


# -- the values the core works on --------------------------------------------------------


class TrialOutcome(NamedTuple):
    """The final scored attempt of one trial (a NamedTuple: there are 10^5 of them)."""

    passed: bool
    reward: float | None
    cost: float | None
    wall_s: float | None
    cpu_s: float | None
    cost_source: FigureSource = "reported"
    """`metered` when the rig measured the cost, `reported` when it is the agent's own word
    (docs/attempts.md, Usage); the default is the one that never grants."""


@dataclass(frozen=True)
class TaskView:
    task_id: str
    suite: Suite
    outcomes: tuple[TrialOutcome, ...]
    unscored: int = 0
    """Of the outcomes, trials left unscored and counted worst for the candidate (compare's)."""

    @cached_property
    def passes(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def n(self) -> int:
        return len(self.outcomes)

    @cached_property
    def means(self) -> dict[str, float | None]:
        """The task's mean reward, cost, wall_s and cpu_s over its trials (null if any is missing)."""
        return {
            "reward": _mean_or_none([o.reward for o in self.outcomes]),
            "cost": _mean_or_none([o.cost for o in self.outcomes]),
            "wall_s": _mean_or_none([o.wall_s for o in self.outcomes]),
            "cpu_s": _mean_or_none([o.cpu_s for o in self.outcomes]),
        }


@dataclass(frozen=True)
class Ranges:
    """Estimated ranges, their nominal levels, and what was measured; one column per field
    (columns, not 10^5 small records)."""

    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    level: tuple[float, ...] = ()
    actual: tuple[float, ...] = ()


@dataclass(frozen=True)
class CalibrationInputs:
    p_success: tuple[float, ...] = ()
    passed: tuple[bool, ...] = ()
    time: Ranges = Ranges()
    cost: Ranges = Ranges()
    estimates: int = 0


class Unscored(NamedTuple):
    """A trial with attempts and no scored one: counted worst for the candidate."""

    trial_id: str
    task_id: str
    suite: Suite
    rep: int


@dataclass(frozen=True)
class RunView:
    ref: RunRef
    repeat: int
    seed: int
    taskset_id: str
    tasks: dict[str, TaskView]
    facts: SideFacts
    fresh_created_at: dict[str, datetime] = field(default_factory=dict)
    calibration: CalibrationInputs = CalibrationInputs()
    fresh_content: dict[str, str] = field(default_factory=dict)
    unscored: tuple[Unscored, ...] = ()
    """Trials left unscored, in plan order (task, then repetition)."""


# -- the records of a run, and its view -------------------------------------------------


class ResultRecord(NamedTuple):
    """The fields of a results.jsonl line that compare uses (10^5 of them: a NamedTuple)."""

    trial_id: str
    attempt_id: str
    inputs_id: str
    task_id: str
    suite: Suite
    rep: int
    status: str
    passed: bool | None
    reward: float | None
    sandbox: SandboxLevel
    network: bool
    canary_found: bool
    network_hosts: tuple[str, ...] = ()
    final: bool = False
    """A final unscored attempt (docs/attempts.md, "Faults never help the candidate")."""


RoleFigures = tuple[float | None, int | None, int | None]
"""One role's (cost_usd, input_tokens, output_tokens) in one attempt."""


class ActualRecord(NamedTuple):
    """The fields of an actuals.jsonl line that compare uses."""

    wall_s: float
    cost_usd: float | None
    cpu_s: float | None
    usage_source: FigureSource
    spend: tuple[RoleFigures | None, ...] | None = None
    """Per role of SPEND_ROLES, in that order; None on lines made before spend by role."""


def spend_totals(actuals: Iterable[ActualRecord]) -> dict[SpendRole, SpendTotal] | None:
    """Each role's figures summed over the attempts that gave them (null when none did);
    None when no line has spend by role (a bundle made before it: its comparison keeps its bytes)."""
    sums: list[list[float | int | None]] = [[None, None, None] for _ in SPEND_ROLES]
    seen = [0] * len(SPEND_ROLES)
    recorded = False
    for a in actuals:
        recorded = recorded or a.spend is not None
        for i, figures in enumerate(a.spend or ()):
            if figures is None:
                continue
            seen[i] += 1
            for j, v in enumerate(figures):
                if v is not None:
                    sums[i][j] = (sums[i][j] or 0) + v
    if not recorded:
        return None
    return {role: SpendTotal(cost_usd=s[0], input_tokens=None if s[1] is None else int(s[1]),
                             output_tokens=None if s[2] is None else int(s[2]), attempts=n)
            for role, s, n in zip(SPEND_ROLES, sums, seen, strict=True)}


class EstimateRecord(NamedTuple):
    """The fields of an estimates.jsonl line that compare uses, as the line holds them."""

    state: str
    p_success: float | None
    time_s: Sequence[float] | None
    cost_usd: Sequence[float] | None
    level: float


@dataclass(frozen=True)
class RunRecords:
    results: Sequence[ResultRecord]
    """In file order."""
    actuals: Mapping[str, ActualRecord]
    """attempt_id -> its actual line."""
    estimates: Mapping[str, EstimateRecord]


def run_view(manifest: RunManifest, records: RunRecords, integrity: Integrity, seal: SealEntry | None,
             bundle_digest: str) -> RunView:
    """One run as compare pairs it: the final scored attempt of every trial, and the facts."""
    final = final_of(records.results)
    unscored = unscored_trials(records.results, final)
    ref = RunRef(run_id=manifest.run_id, checkpoint_id=manifest.checkpoint.id, bundle_digest=bundle_digest)
    return RunView(
        ref=ref, repeat=manifest.repeat, seed=manifest.seed, taskset_id=manifest.taskset.id,
        tasks=_task_views(records, final),
        facts=_side_facts(manifest, records, final, integrity, seal, unscored),
        fresh_created_at=dict(manifest.taskset.fresh_created_at),
        fresh_content=dict(manifest.taskset.fresh_content),
        calibration=_calibration_inputs(records, final),
        unscored=tuple(u for u, _ in unscored),
    )


def unscored_trials(results: Sequence[ResultRecord], final: Mapping[str, ResultRecord]
                    ) -> list[tuple[Unscored, bool]]:
    """Each trial with attempts of its current inputs and no scored one, with whether its last
    attempt is final; in task, then repetition order."""
    current = {r.trial_id: r for r in results}
    out = [(Unscored(r.trial_id, r.task_id, r.suite, r.rep), r.final) for r in current.values()
           if r.trial_id not in final]
    return sorted(out, key=lambda x: (x[0].task_id, x[0].rep))


def _side_facts(m: RunManifest, records: RunRecords, final: dict[str, ResultRecord], integrity: Integrity,
                entry: SealEntry | None, unscored: Sequence[tuple[Unscored, bool]] = ()) -> SideFacts:
    results = records.results
    suites: dict[Suite, set[str]] = {}
    for r in final.values():
        suites.setdefault(r.suite, set()).add(r.task_id)
    sandbox = Counter(r.sandbox for r in results)
    found = sorted(r.attempt_id for r in results if r.canary_found)
    infra = sum(r.status == "infra_error" for r in results)
    hosts = sorted({h for r in results if r.network_hosts for h in r.network_hosts})
    cost_source: Counter[FigureSource] = Counter()
    for r in final.values():
        a = records.actuals.get(r.attempt_id)
        cost_source["missing" if a is None or a.cost_usd is None else a.usage_source] += 1
    levels: tuple[SandboxLevel, ...] = ("bwrap", "process")
    return SideFacts(
        run_id=m.run_id, checkpoint_id=m.checkpoint.id, status=m.status, subset=m.subset, repeat=m.repeat,
        taskset_suites=dict(sorted(m.taskset.suites.items())),
        run_suites={s: len(ids) for s, ids in sorted(suites.items())},
        trials=m.counts.trials, scored=len(final), unscored=max(0, m.counts.trials - len(final)),
        attempts=len(results), infra_errors=infra,
        infra_error_rate=infra / len(results) if results else None,
        sandbox={lvl: sandbox.get(lvl, 0) for lvl in levels},
        network_attempts=sum(r.network for r in results), hosts_reached=hosts[:1000],
        cost_source=dict(sorted(cost_source.items())),
        spend=spend_totals(records.actuals.values()),
        seal_checks=len(m.seal_checks), seal_checks_matched=sum(c.matched for c in m.seal_checks),
        seal_check_failures=[f"{c.phase}: {c.message or c.checkpoint_id}" for c in m.seal_checks if not c.matched],
        registered=entry is not None, sealed_at=entry.sealed_at if entry else None,
        canary_found=len(found), canary_attempts=found[:100], history=m.history,
        policy_pin=m.policy_pin, integrity=integrity,
        final_unscored=sum(f for _, f in unscored),
        unscored_counted_worst=sorted(u.trial_id for u, _ in unscored)[:1000],
        replay_of=m.replay_of.run_id if m.replay_of is not None else None,
    )


def _calibration_inputs(records: RunRecords, final: dict[str, ResultRecord]) -> CalibrationInputs:
    p: list[float] = []
    passed: list[bool] = []
    cols: dict[str, tuple[list[float], list[float], list[float], list[float]]] = {
        "time": ([], [], [], []), "cost": ([], [], [], [])}
    valid = 0
    # In the results file's order (deterministic for a bundle); the sums are fsum's, exact anyway.
    for r in final.values():
        e, a = records.estimates.get(r.attempt_id), records.actuals.get(r.attempt_id)
        if e is None or e.state != "valid":
            continue
        valid += 1
        level = float(e.level)
        ps = e.p_success
        if ps is not None and r.passed is not None:
            p.append(float(ps))
            passed.append(r.passed)
        if a is None:
            continue
        for name, rng, actual in (("time", e.time_s, a.wall_s), ("cost", e.cost_usd, a.cost_usd)):
            if rng is not None and actual is not None:
                lo, hi, lv, ac = cols[name]
                lo.append(float(rng[0]))
                hi.append(float(rng[1]))
                lv.append(level)
                ac.append(float(actual))
    time, cost = (Ranges(*(tuple(c) for c in cols[n])) for n in ("time", "cost"))
    return CalibrationInputs(p_success=tuple(p), passed=tuple(passed), time=time, cost=cost, estimates=valid)


def _outcome(r: ResultRecord, a: ActualRecord | None) -> TrialOutcome:
    """A trial's final attempt; without an actual line its figures are null (never 0)."""
    if a is None:
        return TrialOutcome(bool(r.passed), r.reward, None, None, None, "missing")
    return TrialOutcome(bool(r.passed), r.reward, a.cost_usd, a.wall_s, a.cpu_s, a.usage_source)


def _task_views(records: RunRecords, final: dict[str, ResultRecord]) -> dict[str, TaskView]:
    by_task: dict[str, list[tuple[int, TrialOutcome]]] = {}
    suite_of: dict[str, Suite] = {}
    for r in final.values():
        by_task.setdefault(r.task_id, []).append((r.rep, _outcome(r, records.actuals.get(r.attempt_id))))
        suite_of[r.task_id] = r.suite
    return {
        t: TaskView(task_id=t, suite=suite_of[t], outcomes=tuple(o for _, o in sorted(rows, key=lambda x: x[0])))
        for t, rows in sorted(by_task.items())
    }


# -- the history check -------------------------------------------------------------------


def _chain_break(log: bytes) -> int | None:
    """1-based line where the prev-chain breaks, or None when it is intact."""
    prev: str | None = None
    lines = log.split(b"\n")
    if lines and lines[-1] == b"":
        lines = lines[:-1]
    for i, raw in enumerate(lines, start=1):
        try:
            obj = loads(raw)
        except ValueError:
            return i
        if not isinstance(obj, dict) or "prev" not in obj:
            return i
        got = obj["prev"]
        if isinstance(got, str) and got.startswith("sha256:"):
            got = got[len("sha256:"):]
        if got != prev:
            return i
        prev = hashlib.sha256(raw).hexdigest()
    return None


def _line_count(log: bytes) -> int:
    return log.count(b"\n") + (0 if not log or log.endswith(b"\n") else 1)


def history_check(champion_log: bytes | None, candidate_log: bytes | None) -> HistoryFacts:
    """The `history-preserved` rule (docs/gate.md) from both runs' history.jsonl (None: not declared)."""
    ch, ca = champion_log is not None, candidate_log is not None
    chain_intact = brk = prefix = None
    if candidate_log is not None:
        brk = _chain_break(candidate_log)
        chain_intact = brk is None
    if champion_log is not None and candidate_log is not None:
        prefix = candidate_log.startswith(champion_log)
    if not ch and not ca:
        held, msg = True, "neither checkpoint declares an event log"
    elif ch and not ca:
        held, msg = False, "the champion declares an event log and the candidate none: its history was dropped"
    elif not chain_intact:
        held, msg = False, f"the candidate's event log breaks its prev-chain at line {brk}"
    elif ch and not prefix:
        held, msg = False, "the champion's event log is not a byte-prefix of the candidate's: history was rewritten"
    else:
        held, msg = True, "the candidate's event log is intact" + (" and extends the champion's" if ch else "")
    return HistoryFacts(
        champion_declared=ch, candidate_declared=ca,
        champion_lines=_line_count(champion_log or b""), candidate_lines=_line_count(candidate_log or b""),
        chain_intact=chain_intact, chain_break_line=brk, champion_prefix=prefix, held=held, message=msg,
    )


# -- the pure core -----------------------------------------------------------------------


def _rat(x: Fraction) -> str:
    return str(x)


def _float(x: Fraction | None) -> float | None:
    return None if x is None else float(x)


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    """The mean of a task's figures; null if any is missing (a missing figure is never 0)."""
    if not values or any(v is None for v in values):
        return None
    return math.fsum(v for v in values if v is not None) / len(values)


def _side_stats(tasks: Sequence[TaskView], k: int) -> SideStats:
    keys = [str(j) for j in range(1, k + 1)]
    rewards = [[o.reward for o in t.outcomes if o.reward is not None] for t in tasks]
    s = stats.side_summary([t.passes for t in tasks], [t.n for t in tasks], rewards)
    per_task = {m: [t.means[m] for t in tasks] for m in METRICS}
    return SideStats(
        pass_rate=s.pass_rate, pass_rate_se=s.pass_rate_se, mean_reward=s.mean_reward,
        pass_hat_k={key: s.pass_hat_k.get(key) for key in keys},
        pass_at_k={key: s.pass_at_k.get(key) for key in keys},
        cost_per_task=_mean_or_none(per_task["cost"]),
        wall_s_per_task=_mean_or_none(per_task["wall_s"]),
        cpu_s_per_task=_mean_or_none(per_task["cpu_s"]),
    )


def _source(tasks: Sequence[TaskView], metric: Metric) -> FigureSource | None:
    """Where one side's figures of `metric` came from over these tasks' attempts that count.
    Wall and CPU time are the rig's own measurements; cost is metered only where the rig
    measured it, never when the agent wrote it in usage.json (docs/gate.md)."""
    seen: set[FigureSource] = set()
    for t in tasks:
        for o in t.outcomes:
            if metric == "cost":
                seen.add("missing" if o.cost is None else o.cost_source)
            else:
                seen.add("missing" if getattr(o, metric) is None else "metered")
    if not seen:
        return None
    if len(seen) > 1:
        return "mixed"
    return seen.pop()


def _efficiency(pairs: Sequence[tuple[TaskView, TaskView]], metric: Metric, alpha: float) -> Efficiency:
    champ = [a.means[metric] for a, _ in pairs]
    cand = [b.means[metric] for _, b in pairs]
    missing = sum(not (stats.positive_finite(x) and stats.positive_finite(y)) for x, y in zip(champ, cand, strict=True))
    e = stats.efficiency(champ, cand, alpha)
    return Efficiency(ratio=e.ratio, upper=e.upper, alpha=alpha, n=len(pairs) - missing, log_mean=e.log_mean,
                      log_sd=e.log_sd, missing=missing, champion_source=_source([a for a, _ in pairs], metric),
                      candidate_source=_source([b for _, b in pairs], metric))


def _row(task_id: str, a: TaskView | None, b: TaskView | None) -> TaskRow:
    def mean(t: TaskView | None, m: str) -> float | None:
        return None if t is None else t.means[m]

    def reward(t: TaskView | None) -> float | None:
        return None if t is None else t.means["reward"]

    ap, an = (a.passes, a.n) if a else (0, 0)
    bp, bn = (b.passes, b.n) if b else (0, 0)
    counts = _counts_row(ap, an, bp, bn)
    return TaskRow(
        task_id=task_id, champion_passes=ap, candidate_passes=bp, champion_n=an, candidate_n=bn,
        d=counts.d, d_exact=counts.d_exact,
        champion_reward=reward(a), candidate_reward=reward(b),
        champion_cost=mean(a, "cost"), candidate_cost=mean(b, "cost"),
        champion_wall_s=mean(a, "wall_s"), candidate_wall_s=mean(b, "wall_s"),
        champion_cpu_s=mean(a, "cpu_s"), candidate_cpu_s=mean(b, "cpu_s"),
        fisher_p_worse=counts.fisher, fisher_p_worse_exact=counts.fisher_exact,
        champion_unscored=a.unscored if a and a.unscored else None,
        candidate_unscored=b.unscored if b and b.unscored else None,
    )


class CountsRow(NamedTuple):
    d: float | None
    d_exact: str | None
    fisher: float | None
    fisher_exact: str | None


@lru_cache(maxsize=4096)
def _counts_row(ap: int, an: int, bp: int, bn: int) -> CountsRow:
    """What depends on a task's four counts only; cached, as k + 1 squared pairs cover a whole suite."""
    if not (an and bn):
        return CountsRow(None, None, None, None)
    d = Fraction(bp, bn) - Fraction(ap, an)
    fisher = stats.fisher_worse_exact(ap, an, bp, bn)
    return CountsRow(float(d), _rat(d), float(fisher), _rat(fisher))


def suite_stats(champion: Sequence[TaskView], candidate: Sequence[TaskView], k: int,
                alpha: float = REPORT_ALPHA) -> SuiteStats:
    """Paired statistics of one suite; the inputs are the suite's tasks on each side."""
    a_by, b_by = {t.task_id: t for t in champion}, {t.task_id: t for t in candidate}
    ids = sorted(set(a_by) | set(b_by))
    rows = [_row(i, a_by.get(i), b_by.get(i)) for i in ids]
    pairs = [(a_by[i], b_by[i]) for i in ids if i in a_by and i in b_by and a_by[i].n and b_by[i].n]
    n = len(pairs)
    ps = stats.paired_summary([a.passes for a, _ in pairs], [b.passes for _, b in pairs],
                              [a.n for a, _ in pairs], [b.n for _, b in pairs], alpha=alpha)
    p_exact = tb = mde = mc = None
    if n >= 2 and ps.p_one_sided is not None and ps.p_worse is not None and ps.p_two_sided is not None:
        p_exact = PExact(one_sided=_rat(ps.p_one_sided), worse=_rat(ps.p_worse), two_sided=_rat(ps.p_two_sided))
    if ps.bounds is not None:
        tb = TBounds(alpha=alpha, lower=ps.bounds.lower, upper=ps.bounds.upper)
    if ps.mde is not None:
        mde = MDE(alpha=alpha, power=0.8, value=ps.mde)
    if n >= 1:
        disc = stats.discordant_from_majority([a.passes for a, _ in pairs], [b.passes for _, b in pairs],
                                              [a.n for a, _ in pairs], [b.n for _, b in pairs])
        m = stats.mcnemar(disc.b, disc.c)
        mc = McNemar(better=disc.b, worse=disc.c, p_two_sided=float(m.two_sided),
                     p_one_sided=float(m.one_sided_better), mid_p=float(m.mid_p))
    # docs/statistics.md: mean_d is the mean of the d_i, defined from one task on; "with n < 2 every
    # statistic below is null" covers se_d (n - 1 = 0) and what follows it, not the mean.
    return SuiteStats(
        tasks=len(ids), paired=n, mean_d=ps.mean_d,
        mean_d_exact=_rat(ps.mean_d_exact) if ps.mean_d_exact is not None else None,
        se_d=ps.se_d, p_one_sided=_float(ps.p_one_sided), p_worse=_float(ps.p_worse),
        p_two_sided=_float(ps.p_two_sided), p_exact=p_exact,
        better=ps.better, worse=ps.worse, equal=ps.equal, discordant=ps.discordant,
        t_bounds=tb, mde=mde, mcnemar=mc,
        champion=_side_stats([a for a, _ in pairs], k), candidate=_side_stats([b for _, b in pairs], k),
        efficiency={m: _efficiency(pairs, m, alpha) for m in METRICS},
        per_task=rows,
    )


def _interval(r: Ranges) -> IntervalCalibration:
    if not r.low:
        return IntervalCalibration(n=0, coverage=None, interval_score=None)
    cov = stats.interval_coverage(r.low, r.high, r.actual)
    score = stats.interval_score(r.low, r.high, r.actual, r.level)
    return IntervalCalibration(n=len(r.low), coverage=cov, interval_score=score)


def calibration(inputs: CalibrationInputs) -> Calibration:
    brier = stats.brier(inputs.p_success, inputs.passed) if inputs.p_success else None
    return Calibration(estimates=inputs.estimates, brier=brier, brier_n=len(inputs.p_success),
                       time=_interval(inputs.time), cost=_interval(inputs.cost))


WORST_FOR_CANDIDATE = TrialOutcome(False, 0.0, None, None, None, "missing")
"""An unscored trial on the candidate's side: a failure, reward 0, no figures (its cost never
enters efficiency, which then stays closed)."""
WORST_FOR_CHAMPION = TrialOutcome(True, 1.0, None, None, None, "missing")
"""An unscored trial on the champion's side: a pass, reward 1."""


def counted_worst(view: RunView, outcome: TrialOutcome) -> dict[str, TaskView]:
    """The run's tasks with each unscored trial counted as `outcome` (docs/statistics.md: no
    fault, chosen or honest, moves a verdict toward the candidate): after the task's scored
    trials (only counts and means are read from a task's outcomes)."""
    if not view.unscored:
        return view.tasks
    added: dict[str, list[tuple[int, TrialOutcome]]] = {}
    suite_of: dict[str, Suite] = {}
    for u in view.unscored:
        added.setdefault(u.task_id, []).append((u.rep, outcome))
        suite_of[u.task_id] = u.suite
    tasks = dict(view.tasks)
    for task_id, rows in added.items():
        before = tasks.get(task_id)
        outcomes = (before.outcomes if before else ()) + tuple(o for _, o in sorted(rows, key=lambda x: x[0]))
        tasks[task_id] = TaskView(task_id=task_id, suite=before.suite if before else suite_of[task_id],
                                  outcomes=outcomes, unscored=len(rows))
    return dict(sorted(tasks.items()))


def build_comparison(champion: RunView, candidate: RunView, history: HistoryFacts, allow_incomplete: bool,
                     alpha: float = REPORT_ALPHA, pricing: Pricing | None = None) -> Comparison:
    """The comparison of two runs: values in, values out."""
    k = candidate.repeat
    suites = {}
    champion_tasks = counted_worst(champion, WORST_FOR_CHAMPION)
    candidate_tasks = counted_worst(candidate, WORST_FOR_CANDIDATE)
    for s in SUITES:
        a = [t for t in champion_tasks.values() if t.suite == s]
        b = [t for t in candidate_tasks.values() if t.suite == s]
        worst = PerSide(champion=sum(u.suite == s for u in champion.unscored),
                        candidate=sum(u.suite == s for u in candidate.unscored))
        suites[s] = suite_stats(a, b, k, alpha).model_copy(update={"unscored_counted_worst": worst})
    only_a = sorted(set(champion.tasks) - set(candidate.tasks))
    only_b = sorted(set(candidate.tasks) - set(champion.tasks))
    facts = Facts(
        champion=champion.facts, candidate=candidate.facts, allow_incomplete=allow_incomplete,
        both_complete=champion.facts.status == "complete" and candidate.facts.status == "complete",
        tasks_only_champion=only_a, tasks_only_candidate=only_b,
        fresh_created_at=dict(sorted(candidate.fresh_created_at.items())),
        fresh_content=dict(sorted(candidate.fresh_content.items())),
        candidate_sealed_at=candidate.facts.sealed_at, history=history,
        policy_pins=PolicyPins(
            champion=champion.facts.policy_pin.digest if champion.facts.policy_pin else None,
            candidate=candidate.facts.policy_pin.digest if candidate.facts.policy_pin else None,
        ),
    )
    return Comparison(
        champion=champion.ref, candidate=candidate.ref, repeat=k, seed=candidate.seed,
        taskset_id=candidate.taskset_id, facts=facts, suites=suites,
        calibration={"champion": calibration(champion.calibration), "candidate": calibration(candidate.calibration)},
        pricing=pricing,
    )
