"""Where attempts run: the executor interface the runner schedules on (DESIGN §6).

The runner is the only writer of a bundle; an executor only *executes*. It takes jobs —
"run the estimate of this attempt", "run this attempt" — and hands back what they
produced as they finish, in any order. Two phases per attempt, because the estimate must
be on disk, synced, before the attempt starts (DESIGN §4), and only the runner writes.

For `local` the evidence is already in place when an attempt job completes (the trial
wrote it into `spec.evidence_dir`). The Ray executor (`evalrig.run.executors.ray`) runs the
same two functions on a worker, then writes the evidence bytes it gets back into
`spec.evidence_dir` on the driver's side before reporting the job done — so the runner,
the bundle and resume are the same whichever executor ran the attempt.

Slots: the runner numbers its concurrent attempts 0..slots-1 and puts the number in the
spec (`spec.slot`), so each concurrent attempt gets its own uid under bwrap. An executor
never runs more jobs at once than its `slots`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from evalrig.models.run import Estimate

JobKind = Literal["estimate", "attempt"]


@dataclass(frozen=True)
class Job:
    kind: JobKind
    spec: Any  # evalrig.attempt.trial.AttemptSpec
    estimate_id: str = ""


@dataclass(frozen=True)
class Done:
    """A finished job. `error` is set when the work itself raised (a rig fault)."""

    job: Job
    estimate: Estimate | None = None
    outcome: Any = None  # evalrig.attempt.trial.AttemptOutcome
    error: str | None = None
    wall_s: float = 0.0


@dataclass(frozen=True)
class AttemptWork:
    """The two functions an executor runs; `evalrig.attempt.trial`'s by default."""

    estimate: Callable[[Any, str, datetime], Estimate]
    attempt: Callable[[Any], Any]


def trial_work() -> AttemptWork:
    from evalrig.attempt import trial

    return AttemptWork(estimate=trial.run_estimate, attempt=trial.run_attempt)


class Executor(Protocol):
    slots: int

    def submit(self, job: Job) -> None:
        """Start a job; never blocks (the runner submits at most `slots` at once)."""

    def wait(self, timeout: float | None) -> list[Done]:
        """The jobs finished since the last call; blocks until one is, or `timeout`."""

    def cancel(self) -> None:
        """Stop what runs (the attempts' cancel event is already set by the runner)."""

    def close(self) -> None:
        """Wait for running jobs to return and release the workers."""


def make_executor(kind: str, slots: int, work: AttemptWork | None = None,
                  ray_address: str | None = None) -> Executor:
    check_executor(kind)
    if kind == "ray":
        from evalrig.run.executors.ray import RayExecutor

        return RayExecutor(slots, work or trial_work(), ray_address)
    from evalrig.run.executors.local import LocalExecutor

    return LocalExecutor(slots, work or trial_work())


def check_executor(kind: str, ray_address: str | None = None, *, join: bool = False) -> None:
    """Refuse an executor this install cannot run, before any bundle exists (exit 4).

    With `join`, the Ray executor also joins its cluster now, so an unreachable
    `--ray-address` is refused before the run starts rather than after.
    """
    from evalrig.core.errors import invalid

    if kind == "local":
        return
    if kind == "ray":
        from evalrig.run.executors import ray as ray_executor

        ray_executor.require_ray()
        if join:
            ray_executor.connect(ray_address)
        return
    raise invalid(f"{kind}: no such executor", field="--executor",
                  hint="use --executor local (the default) or --executor ray")
