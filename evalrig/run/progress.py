"""What a run tells the person watching it, as values: the CLI renders them (a bar on a
terminal, a plain line elsewhere); a library caller may pass its own `Reporter`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from evalrig.models.run import RunCounts


@dataclass(frozen=True)
class Progress:
    total: int
    done: int
    passed: int
    failed: int
    errors: int
    attempts: int
    elapsed_s: float
    ran: int
    """Attempts finished in this process (for the attempts/s figure)."""


def progress_of(counts: RunCounts, elapsed_s: float, ran: int) -> Progress:
    """A run's counters as the display shows them: every scored verdict other than a pass
    is a failure; an error is an infra_error attempt."""
    return Progress(total=counts.trials, done=counts.scored, passed=counts.passed,
                    failed=counts.failed + counts.agent_error + counts.timeout,
                    errors=counts.infra_error, attempts=counts.attempts, elapsed_s=elapsed_s,
                    ran=ran)


class Reporter(Protocol):
    def warning(self, message: str) -> None: ...
    def started(self, total: int, kept: int) -> None: ...
    def progress(self, p: Progress) -> None: ...


class SilentReporter:
    def warning(self, message: str) -> None:
        pass

    def started(self, total: int, kept: int) -> None:
        pass

    def progress(self, p: Progress) -> None:
        pass
