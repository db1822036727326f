"""The book of trials: which trials have a final scored result, which run (again), how
many attempts there were; read back from a bundle on a resume, then kept live by the loop.

A trial is done when it has a scored result whose inputs id is its current one, or a
final unscored one (`final`: a fault after the agent's first input, or a verifier that
kept faulting when re-verified): no retry or resume runs it again (docs/attempts.md,
"Faults never help the candidate"). A trial whose latest attempt's verifier faulted is
re-verified from its stored evidence on a resume, never run again. Every other trial
(never started, interrupted, a fault before the agent's first input) runs again. An attempt that started and never ended (the rig was killed) is
repaired on a resume: ended with its result's status when the result reached the disk,
else `interrupted` (no result line: nothing was measured).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalrig.core.plan import Plan, Trial
from evalrig.models.run import SCORED, AttemptEvent, RunCounts
from evalrig.store import layout
from evalrig.store.clock import utcnow
from evalrig.store.jsonl import Fields, append_lines, read_rows


@dataclass
class TrialBook:
    """Per-trial state and the run's counters, from the bundle and then live."""

    plan: Plan
    final: dict[str, str] = field(default_factory=dict)  # trial id -> final scored status
    settled: dict[str, str] = field(default_factory=dict)  # trial id -> its final unscored attempt
    reverify: dict[str, str] = field(default_factory=dict)  # trial id -> its verifier-faulted attempt
    last_attempt: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    infra: int = 0
    interrupted: int = 0

    def __post_init__(self) -> None:
        self._inputs = {t.trial_id: t.inputs_id for t in self.plan.trials}
        # `final` counted by status as it changes: progress asks after every batch.
        self._scored = {s: 0 for s in SCORED}
        for s in self.final.values():
            self._scored[s] += 1

    def started(self, trial_id: str, n: int) -> None:
        self.attempts += 1
        self.last_attempt[trial_id] = max(n, self.last_attempt.get(trial_id, 0))

    def result(self, trial_id: str, inputs_id: str, status: str, attempt_id: str = "",
               fault: str | None = None, final: bool | None = None, verifier_runs: int = 0) -> None:
        if status == "infra_error":
            self.infra += 1
        if self._inputs.get(trial_id) != inputs_id:
            return
        if status in SCORED:
            before = self.final.get(trial_id)
            if before is not None:
                self._scored[before] -= 1
            self.final[trial_id] = status
            self._scored[status] += 1
            self.settled.pop(trial_id, None)
            self.reverify.pop(trial_id, None)
        elif status == "infra_error" and trial_id not in self.final:
            self.reverify.pop(trial_id, None)
            if final:
                self.settled[trial_id] = attempt_id
            # a bundle made before `fault`: a verifier fault has verifier runs
            elif fault == "verifier" or (fault is None and verifier_runs > 0):
                self.reverify[trial_id] = attempt_id

    def ended(self, status: str | None) -> None:
        if status == "interrupted":
            self.interrupted += 1

    def to_run(self) -> list[Trial]:
        """The trials whose agent runs (again): neither scored, nor settled unscored, nor
        awaiting a re-verification of their stored evidence."""
        return [t for t in self.plan.trials if t.trial_id not in self.final
                and t.trial_id not in self.settled and t.trial_id not in self.reverify]

    def to_reverify(self) -> list[tuple[Trial, str]]:
        """The trials whose latest attempt's verifier faulted, with that attempt's id."""
        return [(t, self.reverify[t.trial_id]) for t in self.plan.trials if t.trial_id in self.reverify]

    def counts(self) -> RunCounts:
        by = self._scored
        scored = len(self.final)
        return RunCounts(trials=len(self.plan), scored=scored, passed=by["passed"],
                         failed=by["failed"], agent_error=by["agent_error"], timeout=by["timeout"],
                         infra_error=self.infra, interrupted=self.interrupted,
                         attempts=self.attempts, unscored=len(self.plan) - scored,
                         final_unscored=len(self.settled))


EVENT_FIELDS: Fields = {"event": (str,), "trial_id": (str,), "attempt_id": (str,),
                        "attempt": (int,), "task_id": (str,), "rep": (int,),
                        "status": (str, type(None))}
RESULT_FIELDS: Fields = {"trial_id": (str,), "attempt_id": (str,), "inputs_id": (str,),
                         "status": (str,)}
RESULT_OPTIONAL: Fields = {"fault": (str,), "final": (bool,), "verifier_runs": (int,)}


@dataclass(frozen=True)
class BundleRows:
    """What a resume needs of the bundle's records: a few fields of every line."""

    attempts: list[dict[str, Any]]
    results: list[dict[str, Any]]


def read_bundle_rows(out: Path) -> BundleRows:
    """The attempts and results lines (torn tails already cut)."""
    return BundleRows(read_rows(out / layout.ATTEMPTS_JSONL, EVENT_FIELDS).records,
                      read_rows(out / layout.RESULTS_JSONL, RESULT_FIELDS, RESULT_OPTIONAL).records)


def book_from_rows(plan: Plan, rows: BundleRows) -> TrialBook:
    book = TrialBook(plan)
    for ev in rows.attempts:
        if ev["event"] == "start":
            book.started(ev["trial_id"], ev["attempt"])
        else:
            book.ended(ev["status"])
    for r in rows.results:
        book.result(r["trial_id"], r["inputs_id"], r["status"], r["attempt_id"], r.get("fault"),
                    r.get("final"), r.get("verifier_runs") or 0)
    return book


def repair_dangling(out: Path, rows: BundleRows, book: TrialBook) -> int:
    """End every attempt that started and never ended; returns how many.

    Its end line carries its result's status when the result reached the disk (the crash
    came between the two lines), else `interrupted`.
    """
    ended = {ev["attempt_id"] for ev in rows.attempts if ev["event"] == "end"}
    results = {r["attempt_id"]: r["status"] for r in rows.results}
    ends = []
    for ev in rows.attempts:
        if ev["event"] == "start" and ev["attempt_id"] not in ended:
            status = results.get(ev["attempt_id"], "interrupted")
            ends.append(AttemptEvent(event="end", trial_id=ev["trial_id"], attempt_id=ev["attempt_id"],
                                     attempt=ev["attempt"], task_id=ev["task_id"], rep=ev["rep"],
                                     at=utcnow(), status=status))
            book.ended(status)
    append_lines(out / layout.ATTEMPTS_JSONL, ends)
    return len(ends)
