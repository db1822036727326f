"""What a finished run's records say that its counters do not (docs/attempts.md, "What a
run says"): the verifiers that kept faulting, and a way of failing most attempts share.

- A trial left unscored because its task's verifier faulted on every run (an `infra_error`
  with verifier runs) will fault again on a resume, which runs the same verifier on the
  same kind of answer: the run names each such task, with the first lines its verifier
  wrote on stderr, so that the person fixes the verifier instead of resuming forever.
  The verifier's identity (its settings and the digest of its folder) is part of every
  trial's inputs id (core.plan), so after a fix a resume runs that task's trials again
  and keeps every other trial.
- A complete run in which most attempts failed the same way is still a measurement
  (exit 0), but usually one of a broken setup (a typo in the checkpoint's command): the
  summary warns, quoting the first line the agents wrote on stderr. "Most" is at least
  half of the attempts that count (one per scored trial) and at least two of them; a
  "way" is a status in which the agent gave no answer (`agent_error`, `timeout`) and the
  first non-empty line of its stderr, with the attempt's own workspace path taken out.
  When no attempt passed at all, the summary says so too, whatever the statuses.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from evalrig.attempt.episode import DRIVER_AT_FAULT
from evalrig.core.errors import EvalrigError
from evalrig.core.outcomes import final_of
from evalrig.core.words import shown
from evalrig.models.run import RunCounts
from evalrig.run.loop import is_verifier_fault
from evalrig.run.reverify import REVERIFY_PREFIX
from evalrig.store import layout
from evalrig.store.jsonl import Fields, read_rows

STDERR = "stderr.txt"
HEAD_LINES = 5
"""How many first lines of a verifier's stderr the run shows."""
READ_MAX = 64 << 10
NO_ANSWER = ("agent_error", "timeout")
"""The statuses whose shared way of failing the summary warns about: the agent gave no answer."""


@dataclass(frozen=True)
class VerifierFault:
    """A task whose verifier faulted on every run of its trials' last attempts."""

    task_id: str
    trials: list[str]
    attempt_id: str
    error: str
    stderr_file: str | None
    """The last verifier run's stderr, relative to the bundle (None: there was none)."""
    stderr_head: list[str]
    stderr_lines: int
    """How many lines that stderr has in all (the head shows the first HEAD_LINES)."""

    def as_dict(self) -> dict[str, object]:
        return {"task_id": self.task_id, "trials": self.trials, "attempt_id": self.attempt_id,
                "error": self.error, "stderr_file": self.stderr_file,
                "stderr_head": self.stderr_head, "stderr_lines": self.stderr_lines}


@dataclass(frozen=True)
class CommonFailure:
    """Most of the attempts that count failed the same way (or none passed)."""

    status: str | None
    """The shared status (None: the attempts failed in various statuses)."""
    line: str | None
    """The first stderr line they share (None: none shared, or nothing on stderr)."""
    count: int
    of: int
    example: str
    """An attempt's stderr.txt, relative to the bundle."""

    @property
    def every(self) -> bool:
        return self.count == self.of

    def message(self) -> str:
        who = "every attempt" if self.every else f"{self.count} of {self.of} attempts"
        if self.status is None:
            head = f"no attempt passed: {who} failed"
        else:
            head = f"{who} ended {self.status}"
        if self.line is not None:
            head += f": `{self.line}`"
        elif self.status is not None:
            head += " (the first lines on stderr differ or are empty)"
        return head

    def as_dict(self) -> dict[str, object]:
        return {"kind": "common-failure", "status": self.status, "stderr_first_line": self.line,
                "count": self.count, "of": self.of, "example": self.example,
                "message": self.message()}


@dataclass(frozen=True)
class DriverFault:
    """An episode task whose driver was at fault on the last attempt of each of these
    unscored trials (docs/episodes.md): a resume runs the same driver again."""

    task_id: str
    trials: list[str]
    error: str


@dataclass(frozen=True)
class Findings:
    verifier_faults: list[VerifierFault]
    common_failure: CommonFailure | None
    driver_faults: list[DriverFault] = field(default_factory=list)


@dataclass(frozen=True)
class _Row:
    """The fields of a result line the findings read (a run of 10,000 attempts kept as
    whole Result models would double the rig's peak memory at its very end)."""

    trial_id: str
    attempt_id: str
    inputs_id: str
    status: str
    task_id: str
    verifier_runs: int
    error: str | None


_FIELDS: Fields = {"trial_id": (str,), "attempt_id": (str,), "inputs_id": (str,), "status": (str,),
                   "task_id": (str,), "verifier_runs": (int,), "error": (str, type(None))}


def find(out: Path, counts: RunCounts) -> Findings:
    """Read the bundle's results once for both findings. Never fails a run: a record that
    cannot be read here is verify's to report. A run whose counts leave nothing to find
    (every trial scored, one passed, too few gave no answer) is not read at all: a large
    healthy bundle's resume should not pay for it."""
    if (counts.unscored == 0 and counts.passed > 0
            and counts.agent_error + counts.timeout < _most(counts.scored)):
        return Findings([], None)
    try:
        results = [_Row(**row) for row in read_rows(out / layout.RESULTS_JSONL, _FIELDS).records]
    except EvalrigError:
        return Findings([], None)
    final = final_of(results)
    return Findings(verifier_faults(out, results, final), common_failure(out, list(final.values())),
                    driver_faults(results, final))


def driver_faults(results: list[_Row], final: dict[str, _Row]) -> list[DriverFault]:
    last = {r.trial_id: r for r in results}
    by_task: dict[str, list[_Row]] = {}
    for trial_id, r in last.items():
        if trial_id not in final and r.status == "infra_error" and (r.error or "").startswith(DRIVER_AT_FAULT):
            by_task.setdefault(r.task_id, []).append(r)
    return [DriverFault(task_id, sorted(r.trial_id for r in rs),
                        shown((rs[-1].error or "").removeprefix(DRIVER_AT_FAULT + ": ")))
            for task_id, rs in sorted(by_task.items())]


def verifier_faults(out: Path, results: list[_Row], final: dict[str, _Row]) -> list[VerifierFault]:
    last: dict[str, _Row] = {}
    for r in results:
        last[r.trial_id] = r
    by_task: dict[str, list[_Row]] = {}
    for trial_id, r in last.items():
        if trial_id not in final and is_verifier_fault(r):
            by_task.setdefault(r.task_id, []).append(r)
    faults = []
    for task_id, rs in sorted(by_task.items()):
        latest = rs[-1]
        stderr = _last_verifier_stderr(out / layout.ATTEMPTS_DIR / latest.attempt_id)
        lines = _lines(stderr) if stderr is not None else []
        faults.append(VerifierFault(
            task_id=task_id, trials=sorted(r.trial_id for r in rs), attempt_id=latest.attempt_id,
            error=shown((latest.error or "").removeprefix("verifier fault: ") or "it faulted"),
            stderr_file=str(stderr.relative_to(out)) if stderr is not None else None,
            stderr_head=lines[:HEAD_LINES], stderr_lines=len(lines)))
    return faults


def _last_verifier_stderr(evidence: Path) -> Path | None:
    """The last run's stderr: of the latest re-verification on resume (run.reverify) if any."""
    where = evidence / layout.VERIFIER_DIR
    again = sorted((p for p in where.glob(f"{REVERIFY_PREFIX}*") if p.name[len(REVERIFY_PREFIX):].isdigit()),
                   key=lambda p: int(p.name[len(REVERIFY_PREFIX):]))
    if again:
        where = again[-1]
    runs = sorted((p for p in where.glob("run-*") if p.name[4:].isdigit()),
                  key=lambda p: int(p.name[4:]))
    for run in reversed(runs):
        if (run / STDERR).is_file():
            return run / STDERR
    return None


def common_failure(out: Path, counted: list[_Row]) -> CommonFailure | None:
    n = len(counted)
    if n < 2:
        return None
    most = _most(n)
    failing = [r for r in counted if r.status in NO_ANSWER]
    first = {r.attempt_id: _first_line(out, r) for r in failing}
    ways = Counter((r.status, first[r.attempt_id]) for r in failing)
    if ways:
        (status, line), count = ways.most_common(1)[0]
        if count < most or line is None:
            line = None
            status, count = Counter(r.status for r in failing).most_common(1)[0]
        if count >= most:
            example = next(r for r in failing if r.status == status
                           and (line is None or first[r.attempt_id] == line))
            return CommonFailure(status, line, count, n, _stderr_of(example))
    if not any(r.status == "passed" for r in counted):
        return CommonFailure(None, None, n, n, _stderr_of(counted[0]))
    return None


def _most(n: int) -> int:
    """How many of n counted attempts are "most": at least half, and at least two."""
    return max(2, (n + 1) // 2)


def _stderr_of(r: _Row) -> str:
    return f"{layout.ATTEMPTS_DIR}/{r.attempt_id}/{STDERR}"


def _first_line(out: Path, r: _Row) -> str | None:
    """The first non-empty line of the attempt's stderr, its workspace path taken out
    (`'/dev/shm/…/<attempt id>/agent/agent.py'` reads `'agent.py'`)."""
    lines = _lines(out / _stderr_of(r))
    if not lines:
        return None
    return re.sub(r"(/[^\s'\"]*)?/" + re.escape(r.attempt_id) + r"(\.estimate)?/(agent/)?", "", lines[0])


def _lines(path: Path) -> list[str]:
    """The non-empty lines at the start of a stream file, each made safe to print."""
    try:
        with open(path, "rb") as f:
            data = f.read(READ_MAX)
    except OSError:
        return []
    return [shown(line) for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
