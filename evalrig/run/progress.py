"""What a run tells the person watching it, as values: the CLI renders them (a bar on a
terminal, a plain line elsewhere); a library caller may pass its own `Reporter`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from evalrig.models.run import RunCounts


@dataclass(frozen=True)
class Progress:
    """The counters as the run's summary names them (docs/attempts.md, "What a run says"):
    trials `done` (scored) by status, and `infra_error` attempts."""

    total: int
    done: int
    passed: int
    failed: int
    agent_error: int
    timeout: int
    infra_error: int
    attempts: int
    elapsed_s: float
    ran: int
    """Attempts finished in this process (for the attempts/s figure)."""


def progress_of(counts: RunCounts, elapsed_s: float, ran: int) -> Progress:
    """A run's counters for the display: the same statuses, under the same words, as the
    summary at the end, so that the last progress line and the summary agree."""
    return Progress(total=counts.trials, done=counts.scored, passed=counts.passed,
                    failed=counts.failed, agent_error=counts.agent_error, timeout=counts.timeout,
                    infra_error=counts.infra_error, attempts=counts.attempts, elapsed_s=elapsed_s,
                    ran=ran)


def counts_said(passed: int, failed: int, agent_error: int, timeout: int) -> str:
    """The scored statuses as both the progress line and the summary say them."""
    return f"{passed} passed, {failed} failed, {agent_error} agent_error, {timeout} timeout"


class Reporter(Protocol):
    def warning(self, message: str) -> None: ...
    def started(self, total: int, kept: int, interrupted: bool = False) -> None:
        """The run begins (kept > 0: it resumes; interrupted: the run before it was killed)."""
    def progress(self, p: Progress) -> None: ...


class SilentReporter:
    def warning(self, message: str) -> None:
        pass

    def started(self, total: int, kept: int, interrupted: bool = False) -> None:
        pass

    def progress(self, p: Progress) -> None:
        pass
