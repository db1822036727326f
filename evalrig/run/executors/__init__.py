"""Where attempts run: the executor interface the run's loop schedules on (docs/ray.md).

The run's loop (evalrig.run.loop) is the only writer of a bundle; an executor only
*executes*. It takes jobs — "run the estimate of this attempt", "run this attempt" — and
hands back what they produced as they finish, in any order. Two phases per attempt,
because the estimate must be on disk, synced, before the attempt starts
(docs/attempts.md "Estimate"), and only the loop writes.

For `local` the evidence is already in place when an attempt job completes (the trial
wrote it into `spec.evidence_dir`). The Ray executor (`evalrig.run.executors.ray`) runs the
same two functions on a worker, then writes the evidence bytes it gets back into
`spec.evidence_dir` on the driver's side before reporting the job done — so the loop,
the bundle and resume are the same whichever executor ran the attempt.

Slots: the loop numbers its concurrent attempts 0..slots-1 and puts the number in the
spec (`spec.slot`), so each concurrent attempt gets its own uid under bwrap. An executor
never runs more jobs at once than its `slots`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from evalrig.attempt.trial import AttemptOutcome, AttemptSpec
    from evalrig.models.run import Estimate

JobKind = Literal["estimate", "attempt"]


@dataclass(frozen=True)
class Job:
    kind: JobKind
    spec: AttemptSpec
    estimate_id: str = ""


@dataclass(frozen=True)
class Done:
    """A finished job. `error` is set when the work itself raised (a rig fault)."""

    job: Job
    estimate: Estimate | None = None
    outcome: AttemptOutcome | None = None
    error: str | None = None
    wall_s: float = 0.0


@dataclass(frozen=True)
class AttemptWork:
    """The two functions an executor runs; `evalrig.attempt.trial`'s by default."""

    estimate: Callable[[AttemptSpec, str, datetime], Estimate]
    attempt: Callable[[AttemptSpec], AttemptOutcome]


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
                  ray_address: str | None = None, *, leave_cluster: bool = False,
                  env: Mapping[str, str] | None = None) -> Executor:
    """With `leave_cluster`, the Ray executor leaves the cluster when closed, as it does one
    it joined itself (the caller joined it for this run, in `check_executor`). `env`: the
    variables Ray's workers need in their environment (the model gateway's keys); a local
    executor's threads have the rig's own."""
    check_executor(kind)
    if kind == "ray":
        from evalrig.run.executors.ray import RayExecutor

        return RayExecutor(slots, work or trial_work(), ray_address, leave_cluster=leave_cluster, env=env)
    from evalrig.run.executors.local import LocalExecutor

    return LocalExecutor(slots, work or trial_work())


def check_executor(kind: str, ray_address: str | None = None, *, join: bool = False) -> bool:
    """Refuse an executor this install cannot run, before any bundle exists (exit 4).

    With `join`, the Ray executor also joins its cluster now, so an unreachable
    `--ray-address` is refused before the run starts rather than after. Returns whether
    this call joined a cluster the process was not in: the run's executor is then the one
    to leave it (`make_executor(leave_cluster=...)`).
    """
    from evalrig.core.errors import invalid

    if kind == "local":
        return False
    if kind == "ray":
        from evalrig.run.executors import ray as ray_executor

        ray_executor.require_ray()
        return ray_executor.connect(ray_address) if join else False
    raise invalid(f"{kind}: no such executor", field="--executor",
                  hint="use --executor local (the default) or --executor ray")
