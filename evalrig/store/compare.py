"""Two runs in, one Comparison out (docs/statistics.md, docs/gate.md).

The pure core, `build_comparison`, takes two RunViews (the final scored attempts of
every trial, and the facts about each run) and returns the Comparison; it reads no file
and no clock. The shell, `compare_bundles`, verifies and reads the two run bundles,
refuses runs that cannot be paired, and writes the comparison bundle. All statistics
come from `evalrig.core.stats`.
"""

from __future__ import annotations

import gc
import hashlib
import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from evalrig.core import stats
from evalrig.core.digest import loads, pretty_json, sha256_bytes
from evalrig.core.errors import Incomplete, UsageError, invalid
from evalrig.models.base import SCHEMA_MAJOR
from evalrig.models.comparison import (
    MDE,
    METRICS,
    Calibration,
    Comparison,
    ComparisonManifest,
    Efficiency,
    Facts,
    FigureSource,
    HistoryFacts,
    Integrity,
    IntervalCalibration,
    McNemar,
    Metric,
    PExact,
    PolicyPins,
    RunRef,
    SideFacts,
    SideStats,
    SuiteStats,
    TaskRow,
    TBounds,
)
from evalrig.models.inputs import SUITES, Suite
from evalrig.models.run import RunManifest
from evalrig.store import bundle
from evalrig.store.checkpoint import registered_seal

T = TypeVar("T")

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
    cost_source: str = "reported"
    """`metered` when the rig measured the cost, `reported` when it is the agent's own word
    (docs/attempts.md, Usage); the default is the one that never grants."""


@dataclass(frozen=True)
class TaskView:
    task_id: str
    suite: Suite
    outcomes: tuple[TrialOutcome, ...]

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


# -- the history check -------------------------------------------------------------------


def _chain_break(log: bytes) -> int | None:
    """1-based line where the prev-chain breaks, or None when it is intact."""
    import orjson

    prev: str | None = None
    lines = log.split(b"\n")
    if lines and lines[-1] == b"":
        lines = lines[:-1]
    for i, raw in enumerate(lines, start=1):
        try:
            obj = orjson.loads(raw)
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
    seen: set[str] = set()
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
    only = seen.pop()
    return only if only in ("metered", "reported", "missing") else "mixed"  # type: ignore[return-value]


def _efficiency(pairs: Sequence[tuple[TaskView, TaskView]], metric: Metric, alpha: float) -> Efficiency:
    champ = [a.means[metric] for a, _ in pairs]
    cand = [b.means[metric] for _, b in pairs]
    missing = sum(not (stats.positive_finite(x) and stats.positive_finite(y)) for x, y in zip(champ, cand, strict=True))
    e = stats.efficiency(champ, cand, alpha)
    log_mean = log_sd = None
    if e.ratio is not None:
        # Carried so that the gate can recompute the bound at the policy's alpha.
        logs = [math.log(y) - math.log(x) for x, y in zip(champ, cand, strict=True)]  # type: ignore[arg-type]
        log_mean, log_sd = math.fsum(logs) / len(logs), statistics.stdev(logs)
    return Efficiency(ratio=e.ratio, upper=e.upper, alpha=alpha, n=len(pairs) - missing, log_mean=log_mean,
                      log_sd=log_sd, missing=missing, champion_source=_source([a for a, _ in pairs], metric),
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


def build_comparison(champion: RunView, candidate: RunView, history: HistoryFacts, allow_incomplete: bool,
                     alpha: float = REPORT_ALPHA) -> Comparison:
    """The comparison of two runs: values in, values out."""
    k = candidate.repeat
    suites = {}
    for s in SUITES:
        a = [t for t in champion.tasks.values() if t.suite == s]
        b = [t for t in candidate.tasks.values() if t.suite == s]
        suites[s] = suite_stats(a, b, k, alpha)
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
    )


# -- the shell: reading, verifying and pairing two run bundles ---------------------------

COMPARISON_JSON = "comparison.json"
COMPARISON_MD = "comparison.md"
MANIFEST_JSON = "manifest.json"
HISTORY_JSONL = "history.jsonl"


@dataclass(frozen=True)
class LoadedRun:
    view: RunView
    manifest: RunManifest
    history: bytes | None


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _relative(text: str, dir: Path) -> str:
    return text.replace(str(dir) + "/", "")


def _integrity(dir: Path, manifest: RunManifest, allow_incomplete: bool) -> Integrity:
    """Every digest of the run; a mismatch refuses the comparison (exit 4, naming the file)."""
    problems = bundle.check_run_digests(dir)
    if problems and manifest.status == "running" and allow_incomplete:
        # A run that never finished has no digests: recorded, and the gate's
        # bundle-integrity (and complete) will not hold.
        # Paths relative to the bundle, so that the comparison's bytes do not depend on where it lies.
        return Integrity(verified_files=0, problems=[_relative(p.render(), dir) for p in problems])
    if problems:
        first = problems[0]
        raise invalid(f"does not verify: {first.message}", file=first.file, field=first.field,
                      problems=problems[1:],
                      hint="the run bundle changed after it was written; restore it or run it again")
    return Integrity(verified_files=len(manifest.files), problems=[])


# Reading at scale: compare reads up to hundreds of thousands of lines per run. Every file
# of a finished run has just been verified against the manifest's digests (so its bytes are
# the ones the rig wrote and validated), so the lines are parsed with orjson and only the
# fields compare uses are checked (type, range, the schema's major version), each failure
# naming file:line and the field. `evalrig validate BUNDLE` checks every field of every line.


class ResultLine(NamedTuple):
    trial_id: str
    attempt_id: str
    inputs_id: str
    task_id: str
    suite: Suite
    rep: int
    status: str
    passed: bool | None
    reward: float | None
    sandbox: str
    network: bool
    canary_found: bool
    network_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunLines:
    results: list[ResultLine]
    actuals: dict[str, dict[str, Any]]  # attempt_id -> the checked line (no copy: 10^5 of them)
    estimates: dict[str, dict[str, Any]]
    torn: dict[str, int]


_STATUSES = frozenset({"passed", "failed", "agent_error", "timeout", "infra_error", "interrupted"})


_NUM = (int, float)
_STATES = ("valid", "missing", "malformed", "none")


class _Bad(Exception):
    def __init__(self, field: str, message: str) -> None:
        self.field, self.message = field, message


def _num(d: dict, key: str, nullable: bool = False, lo: float = 0.0, hi: float = 1e308) -> float | None:
    v: Any = d[key] if not nullable else d.get(key)
    if v is None and nullable:
        return None
    if not (type(v) in (int, float) and lo <= v <= hi):  # NaN fails the comparison too
        raise _Bad(key, f"expected a finite number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _choice(d: dict, key: str, allowed: frozenset[str] | tuple[str, ...]) -> str:
    v = d[key]
    if v not in allowed:
        raise _Bad(key, f"expected one of {', '.join(sorted(allowed))}, got {v!r}")
    return str(v)


def _text(d: dict, key: str) -> str:
    v = d[key]
    if not isinstance(v, str):
        raise _Bad(key, f"expected a string, got {v!r}")
    return v


def _finite(x: Any) -> bool:
    return type(x) in _NUM and -1e308 <= x <= 1e308


def _pair(d: dict, key: str) -> tuple[float, float] | None:
    v = d.get(key)
    if v is None:
        return None
    if not (type(v) is list and len(v) == 2 and _finite(v[0]) and _finite(v[1])):
        raise _Bad(key, f"expected [low, high] of finite numbers, got {v!r}")
    return (float(v[0]), float(v[1]))


def _result_line(d: dict) -> ResultLine:
    passed = d["passed"]
    if passed not in (True, False, None):
        raise _Bad("passed", f"expected true, false or null, got {passed!r}")
    rep = d["rep"]
    if not isinstance(rep, int) or isinstance(rep, bool) or rep < 0:
        raise _Bad("rep", f"expected a non-negative integer, got {rep!r}")
    canary = d["canary"]
    if not isinstance(canary, dict) or not isinstance(canary.get("found"), bool):
        raise _Bad("canary.found", "expected true or false")
    network = d["network"]
    if not isinstance(network, bool):
        raise _Bad("network", f"expected true or false, got {network!r}")
    hosts = d.get("network_hosts", [])
    if not (type(hosts) is list and all(type(h) is str for h in hosts)):
        raise _Bad("network_hosts", f"expected a list of host:port strings, got {hosts!r}")
    return ResultLine(
        trial_id=_text(d, "trial_id"), attempt_id=_text(d, "attempt_id"), inputs_id=_text(d, "inputs_id"),
        task_id=_text(d, "task_id"), suite=_choice(d, "suite", SUITES),  # type: ignore[arg-type]
        rep=rep, status=_choice(d, "status", _STATUSES), passed=passed,
        reward=_num(d, "reward", nullable=True, hi=1.0), sandbox=_choice(d, "sandbox", ("bwrap", "process")),
        network=network, canary_found=canary["found"], network_hosts=tuple(hosts),
    )


_SOURCES = ("metered", "reported", "missing")


def _actual_line(d: dict) -> dict:
    _num(d, "cost_usd", nullable=True), _num(d, "wall_s"), _num(d, "cpu_s", nullable=True)
    _choice(d, "usage_source", _SOURCES)
    return d


def _estimate_line(d: dict) -> dict:
    _choice(d, "state", _STATES), _num(d, "p_success", nullable=True, hi=1.0), _pair(d, "time_s")
    _pair(d, "cost_usd")
    if "level" in d:
        _num(d, "level", hi=1.0)
    return d


def _fast_result(d: dict) -> ResultLine | None:
    """The common case in one expression; None sends the line to the checker that names the field."""
    passed, reward, rep, canary = d["passed"], d["reward"], d["rep"], d["canary"]
    hosts = d.get("network_hosts")
    if hosts is not None and hosts != []:  # rare (networked attempts only): the checker validates it
        return None
    if (
        (passed is None or passed is True or passed is False)
        and (reward is None or (type(reward) in _NUM and 0 <= reward <= 1))
        and type(rep) is int and rep >= 0
        and d["suite"] in SUITES and d["status"] in _STATUSES and d["sandbox"] in ("bwrap", "process")
        and type(d["network"]) is bool and type(canary) is dict and type(canary.get("found")) is bool
        and type(d["trial_id"]) is str and type(d["attempt_id"]) is str and type(d["inputs_id"]) is str
        and type(d["task_id"]) is str
    ):
        return ResultLine(d["trial_id"], d["attempt_id"], d["inputs_id"], d["task_id"], d["suite"], rep,
                          d["status"], passed, None if reward is None else float(reward), d["sandbox"],
                          d["network"], canary["found"])
    return None


def _fast_actual(d: dict) -> dict | None:
    cost, wall, cpu = d.get("cost_usd"), d["wall_s"], d.get("cpu_s")
    if (type(wall) in _NUM and 0 <= wall <= 1e308 and (cost is None or (type(cost) in _NUM and 0 <= cost <= 1e308))
            and d["usage_source"] in _SOURCES
            and (cpu is None or (type(cpu) in _NUM and 0 <= cpu <= 1e308))):
        return d
    return None


def _fast_estimate(d: dict) -> dict | None:
    p, t, c, level = d.get("p_success"), d.get("time_s"), d.get("cost_usd"), d.get("level", 0.8)
    if (d["state"] in _STATES and (p is None or (type(p) in _NUM and 0 <= p <= 1))
            and type(level) in _NUM and 0 < level < 1
            and (t is None or (type(t) is list and len(t) == 2 and type(t[0]) in _NUM and type(t[1]) in _NUM
                               and -1e308 <= t[0] <= 1e308 and -1e308 <= t[1] <= 1e308))
            and (c is None or (type(c) is list and len(c) == 2 and type(c[0]) in _NUM and type(c[1]) in _NUM
                               and -1e308 <= c[0] <= 1e308 and -1e308 <= c[1] <= 1e308))):
        return d
    return None


def _read_lines(path: Path, fast: Callable[[dict], T | None], parse: Callable[[dict], T],
                key: str = "attempt_id") -> tuple[list[tuple[str, T]], int | None]:
    """(the line's `key`, its record) for every whole line; errors name file:line and the field."""
    import orjson

    if not path.exists():
        return [], None
    lines = path.read_bytes().split(b"\n")
    torn = len(lines) if lines[-1] != b"" else None
    out: list[tuple[str, T]] = []
    decode, major = orjson.loads, f"{SCHEMA_MAJOR}."
    for i, raw in enumerate(lines[:-1], start=1):
        try:
            d = decode(raw)
            if type(d) is not dict:
                raise _Bad("", "expected a JSON object")
            version = d.get("schema_version")
            if not (type(version) is str and version.startswith(major)):
                raise _Bad("schema_version", f"{version!r} is not readable by this rig (major {SCHEMA_MAJOR})")
            rec = fast(d)
            if rec is None:
                rec = parse(d)  # raises _Bad naming the field
            out.append((d[key], rec))
        except orjson.JSONDecodeError as e:
            raise invalid(f"not JSON ({e})", file=path, line=i) from None
        except KeyError as e:
            raise invalid("field required", file=path, line=i, field=str(e.args[0]),
                          hint="the record does not match its schema (evalrig schema shows it)") from None
        except (_Bad, TypeError) as e:
            field_ = e.field if isinstance(e, _Bad) else None
            raise invalid(getattr(e, "message", str(e)), file=path, line=i, field=field_ or None,
                          hint="the record does not match its schema (evalrig schema shows it)") from None
    return out, torn


def read_run_lines(dir: Path) -> RunLines:
    """The result, actual and estimate lines of a run (attempts.jsonl is not needed)."""
    with _no_gc():
        return _read_run_lines(dir)


@contextmanager
def _no_gc() -> Iterator[None]:
    """Bulk loading makes 10^5 objects that all stay alive; the cyclic collector would walk them
    again and again for nothing (they hold no cycles), which costs more than the parsing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read_run_lines(dir: Path) -> RunLines:
    results, t1 = _read_lines(dir / "results.jsonl", _fast_result, _result_line)
    actuals, t2 = _read_lines(dir / "actuals.jsonl", _fast_actual, _actual_line)
    estimates, t3 = _read_lines(dir / "estimates.jsonl", _fast_estimate, _estimate_line)
    torn = {n: t for n, t in (("results.jsonl", t1), ("actuals.jsonl", t2), ("estimates.jsonl", t3)) if t}
    return RunLines(results=[r for _, r in results], actuals=dict(actuals), estimates=dict(estimates), torn=torn)


def final_results(results: Sequence[ResultLine]) -> dict[str, ResultLine]:
    """trial_id -> the result that counts, by the rule of `bundle.final_results`: the trial's last
    scored attempt made with the inputs id of its latest attempt."""
    return bundle.final_of(results)


def _side_facts(m: RunManifest, lines: RunLines, final: dict[str, ResultLine], integrity: Integrity,
                home: Path) -> SideFacts:
    results = lines.results
    entry = registered_seal(home, m.checkpoint.id)
    suites: dict[str, set[str]] = {}
    for r in final.values():
        suites.setdefault(r.suite, set()).add(r.task_id)
    sandbox = Counter(r.sandbox for r in results)
    found = sorted(r.attempt_id for r in results if r.canary_found)
    infra = sum(r.status == "infra_error" for r in results)
    hosts = sorted({h for r in results if r.network_hosts for h in r.network_hosts})
    cost_source: Counter[str] = Counter()
    for r in final.values():
        a = lines.actuals.get(r.attempt_id)
        cost_source["missing" if a is None or a.get("cost_usd") is None else a["usage_source"]] += 1
    return SideFacts(
        run_id=m.run_id, checkpoint_id=m.checkpoint.id, status=m.status, subset=m.subset, repeat=m.repeat,
        taskset_suites=dict(sorted(m.taskset.suites.items())),
        run_suites={s: len(ids) for s, ids in sorted(suites.items())},  # type: ignore[misc]
        trials=m.counts.trials, scored=len(final), unscored=max(0, m.counts.trials - len(final)),
        attempts=len(results), infra_errors=infra,
        infra_error_rate=infra / len(results) if results else None,
        sandbox={lvl: sandbox.get(lvl, 0) for lvl in ("bwrap", "process")},
        network_attempts=sum(r.network for r in results), hosts_reached=hosts[:1000],
        cost_source=dict(sorted(cost_source.items())),
        seal_checks=len(m.seal_checks), seal_checks_matched=sum(c.matched for c in m.seal_checks),
        seal_check_failures=[f"{c.phase}: {c.message or c.checkpoint_id}" for c in m.seal_checks if not c.matched],
        registered=entry is not None, sealed_at=entry.sealed_at if entry else None,
        canary_found=len(found), canary_attempts=found[:100], history=m.history,
        policy_pin=m.policy_pin, integrity=integrity,
    )


def _calibration_inputs(lines: RunLines, final: dict[str, ResultLine]) -> CalibrationInputs:
    p: list[float] = []
    passed: list[bool] = []
    cols: dict[str, tuple[list[float], list[float], list[float], list[float]]] = {
        "time": ([], [], [], []), "cost": ([], [], [], [])}
    valid = 0
    # In the results file's order (deterministic for a bundle); the sums are fsum's, exact anyway.
    for r in final.values():
        e, a = lines.estimates.get(r.attempt_id), lines.actuals.get(r.attempt_id)
        if e is None or e["state"] != "valid":
            continue
        valid += 1
        level = float(e.get("level", 0.8))
        ps = e.get("p_success")
        if ps is not None and r.passed is not None:
            p.append(float(ps))
            passed.append(r.passed)
        if a is None:
            continue
        for name, rng, actual in (("time", e.get("time_s"), a["wall_s"]), ("cost", e.get("cost_usd"), a.get("cost_usd"))):
            if rng is not None and actual is not None:
                lo, hi, lv, ac = cols[name]
                lo.append(float(rng[0]))
                hi.append(float(rng[1]))
                lv.append(level)
                ac.append(float(actual))
    time, cost = (Ranges(*(tuple(c) for c in cols[n])) for n in ("time", "cost"))
    return CalibrationInputs(p_success=tuple(p), passed=tuple(passed), time=time, cost=cost, estimates=valid)


def _figures(a: dict | None) -> tuple[float | None, float | None, float | None, str]:
    """cost, wall_s, cpu_s of an actual line (all null without one) and the cost's source."""
    if a is None:
        return None, None, None, "missing"
    cost, cpu = a.get("cost_usd"), a.get("cpu_s")
    return ((None if cost is None else float(cost)), float(a["wall_s"]), (None if cpu is None else float(cpu)),
            a["usage_source"])


def _task_views(lines: RunLines, final: dict[str, ResultLine]) -> dict[str, TaskView]:
    by_task: dict[str, list[tuple[int, TrialOutcome]]] = {}
    suite_of: dict[str, Suite] = {}
    for r in final.values():
        a = lines.actuals.get(r.attempt_id)
        outcome = TrialOutcome(bool(r.passed), r.reward, *_figures(a))
        by_task.setdefault(r.task_id, []).append((r.rep, outcome))
        suite_of[r.task_id] = r.suite
    return {
        t: TaskView(task_id=t, suite=suite_of[t], outcomes=tuple(o for _, o in sorted(rows, key=lambda x: x[0])))
        for t, rows in sorted(by_task.items())
    }


def refuse_a_comparison_bundle(dir: Path) -> None:
    """A comparison bundle given in place of a run is named as such, not by every run
    manifest field it lacks."""
    try:
        kind = loads((dir / bundle.MANIFEST).read_bytes()).get("kind")
    except (OSError, ValueError, AttributeError):
        return  # read_json says what is wrong with the manifest
    if kind == "comparison":
        raise invalid("not a run bundle (a comparison bundle)", file=dir,
                      hint="compare takes the two run bundles (the --out directories of `evalrig run`)")


def load_side(dir: Path, home: Path, allow_incomplete: bool) -> LoadedRun:
    """Read, check and summarise one run bundle for comparison."""
    dir = Path(dir)
    if not (dir / bundle.MANIFEST).is_file():
        raise invalid("not a run bundle (no manifest.json)", file=dir,
                      hint="give the --out directory of an `evalrig run`")
    refuse_a_comparison_bundle(dir)
    manifest = bundle.read_json(dir / bundle.MANIFEST, RunManifest)
    if manifest.status != "complete" and not allow_incomplete:
        raise Incomplete(
            f"the run is {manifest.status}: {manifest.counts.unscored} of {manifest.counts.trials} trials unscored",
            file=str(dir / bundle.MANIFEST),
            hint=f"resume it with `evalrig run --out {dir} --resume`, or compare with --allow-incomplete "
            "(the gate never promotes on an incomplete comparison)",
        )
    integrity = _integrity(dir, manifest, allow_incomplete)
    refuse_unregistered(dir, manifest, home)
    lines = read_run_lines(dir)
    integrity = integrity.model_copy(update={"torn": [f"{n}:{t}" for n, t in sorted(lines.torn.items())]})
    final = final_results(lines.results)
    history = None
    if manifest.history == "declared":
        path = dir / HISTORY_JSONL
        history = path.read_bytes() if path.is_file() else b""
    ref = RunRef(run_id=manifest.run_id, checkpoint_id=manifest.checkpoint.id,
                 bundle_digest=bundle.bundle_digest(dict(manifest.files)))
    view = RunView(
        ref=ref, repeat=manifest.repeat, seed=manifest.seed, taskset_id=manifest.taskset.id,
        tasks=_task_views(lines, final), facts=_side_facts(manifest, lines, final, integrity, home),
        fresh_created_at=dict(manifest.taskset.fresh_created_at),
        fresh_content=dict(manifest.taskset.fresh_content),
        calibration=_calibration_inputs(lines, final),
    )
    return LoadedRun(view=view, manifest=manifest, history=history)


def refuse_unregistered(dir: Path, manifest: RunManifest, home: Path) -> None:
    """A run bundle counts only when the rig's home registered its digest (docs/security.md):
    a bundle anyone edited and re-digested is not one a run of this home finished."""
    from evalrig.store.ledger import registered_run, runs_path

    digest = bundle.bundle_digest(dict(manifest.files))
    if registered_run(home, digest) is None:
        raise invalid(
            f"not registered: no run of this rig's home finished with the bundle digest {digest} "
            f"({runs_path(home)})",
            file=dir,
            hint=f"a bundle made on another machine or with another EVALRIG_HOME is brought in by "
            f"`evalrig verify --register {dir}`, which re-derives every result from its evidence first",
        )


def check_pairable(champion: LoadedRun, candidate: LoadedRun, champ_dir: Path, cand_dir: Path) -> None:
    """Refuse (exit 4, naming the difference) runs that cannot be paired trial by trial."""
    a, b = champion.manifest, candidate.manifest
    pin_a = a.policy_pin.digest if a.policy_pin else None
    pin_b = b.policy_pin.digest if b.policy_pin else None
    checks = [
        ("taskset.id", "task sets", a.taskset.id, b.taskset.id),
        ("repeat", "--repeat", a.repeat, b.repeat),
        ("seed", "--seed", a.seed, b.seed),
        ("settings.timeout_scale", "--timeout-scale", a.settings.timeout_scale, b.settings.timeout_scale),
        ("settings.max_retries", "--max-retries", a.settings.max_retries, b.settings.max_retries),
        ("policy_pin.digest", "pinned policies", pin_a, pin_b),
        ("rig_version", "rig versions (major.minor)", _major_minor(a.rig_version), _major_minor(b.rig_version)),
    ]
    for fieldpath, what, x, y in checks:
        if x != y:
            raise invalid(
                f"the runs differ in {what}: champion {x!r}, candidate {y!r} ({champ_dir / bundle.MANIFEST})",
                file=str(cand_dir / bundle.MANIFEST), field=fieldpath,
                hint="pair only runs of one train: rerun one side with the other's settings",
            )


def compare_bundles(champ_dir: Path, cand_dir: Path, out_dir: Path, home: Path,
                    allow_incomplete: bool = False) -> Comparison:
    """Verify and pair two run bundles, and write the comparison bundle to `out_dir`."""

    champ_dir, cand_dir, out_dir = Path(champ_dir), Path(cand_dir), Path(out_dir)
    with _no_gc():
        return _compare_bundles(champ_dir, cand_dir, out_dir, home, allow_incomplete)


def _compare_bundles(champ_dir: Path, cand_dir: Path, out_dir: Path, home: Path,
                     allow_incomplete: bool) -> Comparison:
    from evalrig.core import report

    check_out_dir(out_dir)  # before the reading, which takes seconds on a large train
    refuse_out_inside_a_bundle(out_dir)
    champion = load_side(champ_dir, home, allow_incomplete)
    candidate = load_side(cand_dir, home, allow_incomplete)
    check_pairable(champion, candidate, champ_dir, cand_dir)
    history = history_check(champion.history, candidate.history)
    comparison = build_comparison(champion.view, candidate.view, history, allow_incomplete)
    write_comparison(out_dir, comparison, report.comparison_markdown(comparison), allow_incomplete)
    return comparison


def refuse_out_inside_a_bundle(out_dir: Path) -> None:
    """Files written inside a bundle (one of the two runs, say) are files its manifest does
    not list: that bundle would never verify again (`run` refuses the same)."""
    for parent in out_dir.resolve().parents:
        if (parent / MANIFEST_JSON).is_file():
            raise UsageError(f"--out {out_dir} is inside the bundle {parent}",
                             hint="give compare an --out outside every bundle")


def check_out_dir(out_dir: Path) -> None:
    """Refuse an --out that is a file, or a bundle of another kind (a run's manifest.json
    would be replaced by the comparison's, and that run could never verify again)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise invalid("is not a directory", file=out_dir, hint="give compare a new --out directory")
    manifest = out_dir / MANIFEST_JSON
    if not manifest.exists():
        return
    try:
        kind = loads(manifest.read_bytes()).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind != "comparison":
        what = f"a {kind} bundle" if isinstance(kind, str) else "a manifest.json that is not a comparison's"
        raise invalid(f"holds {what}; writing a comparison there would replace its manifest",
                      file=manifest, hint="give compare a new --out directory (not a run bundle)")


def write_comparison(out_dir: Path, comparison: Comparison, markdown: str, allow_incomplete: bool) -> None:
    """Write the bundle; a comparison already there with other bytes is never replaced."""
    data = pretty_json(comparison)
    md = markdown.encode()
    check_out_dir(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise invalid(f"cannot be made: {e.strerror}", file=out_dir, hint="give compare a new --out directory") from e
    existing = out_dir / COMPARISON_JSON
    if existing.exists() and existing.read_bytes() != data:
        raise invalid(
            "holds a different comparison; its decisions would no longer match it",
            file=existing, hint="give compare a new --out directory",
        )
    manifest = ComparisonManifest(
        champion=comparison.champion, candidate=comparison.candidate, allow_incomplete=allow_incomplete,
        files={COMPARISON_JSON: sha256_bytes(data), COMPARISON_MD: sha256_bytes(md)},
    )
    bundle.write_bytes_atomic(out_dir / COMPARISON_JSON, data)
    bundle.write_bytes_atomic(out_dir / COMPARISON_MD, md)
    bundle.write_json_atomic(out_dir / MANIFEST_JSON, manifest)


def read_comparison(dir: Path) -> tuple[Comparison, str]:
    """The comparison of a comparison bundle and the digest of its bytes, verified against manifest.json."""
    dir = Path(dir)
    path = dir / COMPARISON_JSON
    if not path.is_file():
        raise invalid("not a comparison bundle (no comparison.json)", file=dir,
                      hint="give the --out directory of `evalrig compare`")
    data = path.read_bytes()
    digest = sha256_bytes(data)
    manifest = bundle.read_json(dir / MANIFEST_JSON, ComparisonManifest)
    want = manifest.files.get(COMPARISON_JSON)
    if want != digest:
        raise invalid(f"digest {digest} differs from manifest.json's {want}", file=path,
                      hint="the comparison was edited after compare wrote it; run compare again")
    return bundle.parse_json(path, data, Comparison), digest
