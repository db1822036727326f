"""The lines of a run bundle, read for compare at scale (docs/statistics.md).

compare reads up to hundreds of thousands of lines per run. Every file of a finished run
has just been verified against the manifest's digests (so its bytes are the ones the rig
wrote and validated), so the lines are parsed with orjson and only the fields compare uses
are checked (type, range, the schema's major version), each failure naming file:line and
the field. `evalrig validate BUNDLE` checks every field of every line.
"""

from __future__ import annotations

import gc
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from evalrig.core.compare import ActualRecord, EstimateRecord, ResultRecord, RoleFigures, RunRecords
from evalrig.models.base import SCHEMA_MAJOR
from evalrig.models.comparison import SPEND_ROLES
from evalrig.models.inputs import SUITES
from evalrig.models.run import SandboxLevel
from evalrig.store.jsonl import LineProblem, read_checked
from evalrig.store.layout import ACTUALS_JSONL, ESTIMATES_JSONL, RESULTS_JSONL

Line = dict[str, Any]
"""A line as orjson parsed it, before its fields are checked."""


@dataclass(frozen=True)
class RunLines:
    records: RunRecords
    torn: dict[str, int]
    """file name -> its torn last line, ignored."""


_STATUSES = frozenset({"passed", "failed", "agent_error", "timeout", "infra_error", "interrupted"})


_NUM = (int, float)
_SANDBOXES: tuple[SandboxLevel, ...] = ("bwrap", "process")
S = TypeVar("S", bound=str)


_STATES = ("valid", "missing", "malformed", "none")


def _num(d: Line, key: str, nullable: bool = False, lo: float = 0.0, hi: float = 1e308) -> float | None:
    v: Any = d[key] if not nullable else d.get(key)
    if v is None and nullable:
        return None
    if not (type(v) in (int, float) and lo <= v <= hi):  # NaN fails the comparison too
        raise LineProblem(key, f"expected a finite number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _choice(d: Line, key: str, allowed: Collection[S]) -> S:
    v = d[key]
    if v not in allowed:
        raise LineProblem(key, f"expected one of {', '.join(sorted(allowed))}, got {v!r}")
    return v


def _text(d: Line, key: str) -> str:
    v = d[key]
    if not isinstance(v, str):
        raise LineProblem(key, f"expected a string, got {v!r}")
    return v


def _finite(x: Any) -> bool:
    return type(x) in _NUM and -1e308 <= x <= 1e308


def _pair(d: Line, key: str) -> tuple[float, float] | None:
    v = d.get(key)
    if v is None:
        return None
    if not (type(v) is list and len(v) == 2 and _finite(v[0]) and _finite(v[1])):
        raise LineProblem(key, f"expected [low, high] of finite numbers, got {v!r}")
    return (float(v[0]), float(v[1]))


def _result_line(d: Line) -> ResultRecord:
    passed = d["passed"]
    if passed not in (True, False, None):
        raise LineProblem("passed", f"expected true, false or null, got {passed!r}")
    rep = d["rep"]
    if not isinstance(rep, int) or isinstance(rep, bool) or rep < 0:
        raise LineProblem("rep", f"expected a non-negative integer, got {rep!r}")
    canary = d["canary"]
    if not isinstance(canary, dict) or not isinstance(canary.get("found"), bool):
        raise LineProblem("canary.found", "expected true or false")
    network = d["network"]
    if not isinstance(network, bool):
        raise LineProblem("network", f"expected true or false, got {network!r}")
    hosts = d.get("network_hosts", [])
    if not (type(hosts) is list and all(type(h) is str for h in hosts)):
        raise LineProblem("network_hosts", f"expected a list of host:port strings, got {hosts!r}")
    return ResultRecord(
        trial_id=_text(d, "trial_id"), attempt_id=_text(d, "attempt_id"), inputs_id=_text(d, "inputs_id"),
        task_id=_text(d, "task_id"), suite=_choice(d, "suite", SUITES),
        rep=rep, status=_choice(d, "status", _STATUSES), passed=passed,
        reward=_num(d, "reward", nullable=True, hi=1.0), sandbox=_choice(d, "sandbox", _SANDBOXES),
        network=network, canary_found=canary["found"], network_hosts=tuple(hosts),
        final=d.get("final") is True,
    )


_SOURCES = ("metered", "reported", "missing", "replayed")


def _int_or_none(d: Line, key: str) -> int | None:
    v = d.get(key)
    if v is not None and not (type(v) is int and v >= 0):
        raise LineProblem(key, f"expected a non-negative integer or null, got {v!r}")
    return v


def _spend(d: Line) -> tuple[RoleFigures | None, ...] | None:
    """spend → per role (SPEND_ROLES' order) its (cost_usd, input_tokens, output_tokens)."""
    s = d.get("spend")
    if s is None:
        return None
    if type(s) is not dict:
        raise LineProblem("spend", f"expected an object or null, got {s!r}")
    out: list[RoleFigures | None] = []
    for role in SPEND_ROLES:
        r = s.get(role)
        if r is None:
            out.append(None)
            continue
        try:
            if type(r) is not dict:
                raise LineProblem("", f"expected an object or null, got {r!r}")
            out.append((_num(r, "cost_usd", nullable=True), _int_or_none(r, "input_tokens"),
                        _int_or_none(r, "output_tokens")))
        except LineProblem as e:
            raise LineProblem(".".join(p for p in ("spend", role, e.field) if p), e.message) from None
    return tuple(out)


def _actual_line(d: Line) -> ActualRecord:
    cost = _num(d, "cost_usd", nullable=True)
    _num(d, "wall_s")
    cpu = _num(d, "cpu_s", nullable=True)
    _choice(d, "usage_source", _SOURCES)
    return ActualRecord(float(d["wall_s"]), cost, cpu, d["usage_source"], _spend(d))


def _estimate_line(d: Line) -> EstimateRecord:
    _choice(d, "state", _STATES), _num(d, "p_success", nullable=True, hi=1.0), _pair(d, "time_s")
    _pair(d, "cost_usd")
    if "level" in d:
        _num(d, "level", hi=1.0)
    return EstimateRecord(d["state"], d.get("p_success"), d.get("time_s"), d.get("cost_usd"), d.get("level", 0.8))


def _fast_result(d: Line) -> ResultRecord | None:
    """The common case in one expression; None sends the line to the checker that names the field."""
    passed, reward, rep, canary = d["passed"], d["reward"], d["rep"], d["canary"]
    hosts = d.get("network_hosts")
    if hosts is not None and hosts != []:  # rare (networked attempts only): the checker validates it
        return None
    if (
        (passed is None or passed is True or passed is False)
        and (reward is None or (type(reward) in _NUM and 0 <= reward <= 1))
        and type(rep) is int and rep >= 0
        and d["suite"] in SUITES and d["status"] in _STATUSES and d["sandbox"] in _SANDBOXES
        and type(d["network"]) is bool and type(canary) is dict and type(canary.get("found")) is bool
        and type(d["trial_id"]) is str and type(d["attempt_id"]) is str and type(d["inputs_id"]) is str
        and type(d["task_id"]) is str
    ):
        return ResultRecord(d["trial_id"], d["attempt_id"], d["inputs_id"], d["task_id"], d["suite"], rep,
                          d["status"], passed, None if reward is None else float(reward), d["sandbox"],
                          d["network"], canary["found"], (), d.get("final") is True)
    return None


def _fast_actual(d: Line) -> ActualRecord | None:
    cost, wall, cpu, source = d.get("cost_usd"), d["wall_s"], d.get("cpu_s"), d["usage_source"]
    if (type(wall) in _NUM and 0 <= wall <= 1e308 and (cost is None or (type(cost) in _NUM and 0 <= cost <= 1e308))
            and source in _SOURCES
            and (cpu is None or (type(cpu) in _NUM and 0 <= cpu <= 1e308))):
        try:
            spend = _spend(d)
        except LineProblem:
            return None  # the checker names the field
        return ActualRecord(float(wall), None if cost is None else float(cost), None if cpu is None else float(cpu),
                            source, spend)
    return None


def _fast_estimate(d: Line) -> EstimateRecord | None:
    p, t, c, level = d.get("p_success"), d.get("time_s"), d.get("cost_usd"), d.get("level", 0.8)
    if (d["state"] in _STATES and (p is None or (type(p) in _NUM and 0 <= p <= 1))
            and type(level) in _NUM and 0 < level < 1
            and (t is None or (type(t) is list and len(t) == 2 and type(t[0]) in _NUM and type(t[1]) in _NUM
                               and -1e308 <= t[0] <= 1e308 and -1e308 <= t[1] <= 1e308))
            and (c is None or (type(c) is list and len(c) == 2 and type(c[0]) in _NUM and type(c[1]) in _NUM
                               and -1e308 <= c[0] <= 1e308 and -1e308 <= c[1] <= 1e308))):
        return EstimateRecord(d["state"], p, t, c, level)
    return None


RUN_LINE_FILES = (RESULTS_JSONL, ACTUALS_JSONL, ESTIMATES_JSONL)
"""The files `read_run_lines` parses."""


def read_run_lines(dir: Path, data: Mapping[str, bytes | None] | None = None) -> RunLines:
    """The result, actual and estimate lines of a run (attempts.jsonl is not needed).

    `data`: {file name: its bytes, None when absent} as the caller read them to check their
    digests (`bundle.check_run_digests(kept=...)`): parsed as they are, never read again."""
    with no_gc():
        return _read_run_lines(dir, data)


@contextmanager
def no_gc() -> Iterator[None]:
    """Bulk loading makes 10^5 objects that all stay alive; the cyclic collector would walk them
    again and again for nothing (they hold no cycles), which costs more than the parsing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read_run_lines(dir: Path, data: Mapping[str, bytes | None] | None) -> RunLines:
    major = str(SCHEMA_MAJOR)

    def given(name: str) -> bytes | None:
        if data is None:
            return None
        return data[name] if data[name] is not None else b""

    results, t1 = read_checked(dir / RESULTS_JSONL, major, _fast_result, _result_line, data=given(RESULTS_JSONL))
    actuals, t2 = read_checked(dir / ACTUALS_JSONL, major, _fast_actual, _actual_line, data=given(ACTUALS_JSONL))
    estimates, t3 = read_checked(dir / ESTIMATES_JSONL, major, _fast_estimate, _estimate_line,
                                 data=given(ESTIMATES_JSONL))
    torn = {n: t for n, t in ((RESULTS_JSONL, t1), (ACTUALS_JSONL, t2), (ESTIMATES_JSONL, t3)) if t}
    records = RunRecords(results=[r for _, r in results], actuals=dict(actuals), estimates=dict(estimates))
    return RunLines(records, torn)

