"""The loop of a run: attempts handed to an executor, what comes back recorded, infra
errors retried; the loop is the only writer of the bundle's records (docs/attempts.md).

Per attempt, in this order, each record a whole synced line:

    attempts.jsonl  start       before anything of the attempt runs
    estimates.jsonl             after the estimate phase, before the attempt starts
    actuals.jsonl, results.jsonl
    attempts.jsonl  end         last: the attempt's commit mark

so a crash at any moment leaves a bundle that a resume can repair (run.book): a start
without an end is ended `interrupted` (or, when its result made it to disk, ended with
that result's status), a torn last line is cut, and every trial without a scored result
whose inputs id still matches runs again.

Choices the contract leaves open:
- `--max-retries` is a budget per process: a resume gives a trial whose faults all came
  before the agent's first input a fresh one; attempt numbers continue from the bundle's.
  A fault after that input (a result's `fault` other than `start`) is never a reason to
  run the agent again: a verifier fault is re-verified from the stored evidence on a
  resume (run.reverify), every other one is final.
- An attempt stopped by Ctrl-C or SIGTERM before it ran ends `interrupted`, with no
  result line (nothing was measured).
- `--max-cost-usd TOTAL` (docs/gateway.md "Budgets"): the run's metered spend is every
  role's metered cost in actuals.jsonl (candidate, driver and judge: the user's money),
  those of earlier turns included; once it reaches TOTAL no attempt starts, the attempts
  running finish, and the run ends `incomplete` (exit 5) saying so (`Loop.spent_out`).
  A replayed run spends nothing.
"""

from __future__ import annotations

import contextlib
import secrets as pysecrets
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Literal, Protocol

from evalrig.attempt import modelcalls
from evalrig.attempt.modelcalls import GatewayUse
from evalrig.attempt.trial import AttemptSpec, fault_outcome
from evalrig.core.plan import Trial
from evalrig.models.run import Actual, AttemptEvent, Estimate, Result, RunSettings
from evalrig.run.book import TrialBook
from evalrig.run.executors import AttemptWork, Done, Job, make_executor, trial_work
from evalrig.run.inputs import Inputs
from evalrig.run.progress import Reporter, progress_of
from evalrig.store import layout
from evalrig.store.clock import utcnow
from evalrig.store.jsonl import Journal, read_records
from evalrig.store.layout import RUN_JSONL

WAIT_S = 0.25  # how often the loop looks at the stop flag while attempts run


@dataclass(frozen=True)
class Hooks:
    """What a test may swap: the two functions the executor runs (`attempt.trial`'s by default)."""

    work: AttemptWork | None = None


class Stop:
    """Ctrl-C / SIGTERM: stop launching, cancel running attempts, finish the bundle."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: int | None = None

    @contextlib.contextmanager
    def handlers(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.signal = signum
            self.event.set()

        for s in previous:
            signal.signal(s, on_signal)
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


@dataclass(frozen=True)
class Queued:
    """A trial waiting for a slot: its attempt number and the retries it has left."""

    trial: Trial
    n: int
    retries_left: int

    def retried(self) -> Queued:
        return Queued(self.trial, self.n + 1, self.retries_left - 1)


@dataclass(frozen=True)
class Launched:
    """An attempt that has its start line and a slot, until its end line."""

    queued: Queued
    spec: AttemptSpec

    @property
    def trial(self) -> Trial:
        return self.queued.trial


@dataclass
class Collected:
    records: list[tuple[Launched, Actual, Result]] = field(default_factory=list)
    ended: list[tuple[Launched, str]] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)


class Loop:
    """One process's turn at a bundle: launches attempts and records what they give back.

    Records are written in group commits: every attempt that starts (or ends) in the same
    turn of the loop shares one write and one fsync per file, in the order of the module
    docstring, so that under a slow disk the fsyncs do not serialise the attempts.
    """

    def __init__(self, out: Path, inputs: Inputs, settings: RunSettings, book: TrialBook,
                 reporter: Reporter, hooks: Hooks, stop: Stop, scratch: Path,
                 leave_cluster: bool = False) -> None:
        self.out = out
        self.inputs = inputs
        self.settings = settings
        self.book = book
        self.reporter = reporter
        self.stop = stop
        self.scratch = scratch
        self.work = hooks.work or trial_work()
        self.gateway = gateway_use(inputs, settings)
        self.executor = make_executor(settings.executor, settings.jobs, self.work,
                                      settings.ray_address, leave_cluster=leave_cluster,
                                      env=_gateway_keys(inputs) if settings.executor == "ray" else None)
        if self.gateway is not None and inputs.gateway is not None and settings.executor == "local":
            modelcalls.register(self.gateway, inputs.gateway.gateway)
        self.free_slots = list(range(self.executor.slots - 1, -1, -1))
        self.inflight: dict[str, Launched] = {}
        # No estimate command: the estimate is "none" and needs no worker round trip.
        self.estimate_inline = inputs.checkpoint.spec.agent.estimate is None
        self.ran = 0
        self.t0 = time.monotonic()
        (out / layout.ATTEMPTS_DIR).mkdir(exist_ok=True)
        self.journal = Journal(out, RUN_JSONL)
        # --max-cost-usd: what this bundle's attempts have spent so far, metered
        self.spent = _metered_in(out) if settings.max_cost_usd is not None else 0.0
        self.spent_out: str | None = None  # why no further attempt started (the money ran out)

    def execute(self, trials: list[Trial]) -> None:
        """Launch and record until every trial has run (or a stop was asked for).

        Each turn of the loop has one sync point: the records that must be on disk before
        something else happens (start and estimate lines before an attempt is handed out,
        actuals and results before their end lines) are written, then every file written
        is fsync'd at once, in parallel. End lines are written after that point and synced
        at the next one (or when the loop ends); a crash in between is repaired on resume
        from the result lines, which are already on disk.
        """
        pending = deque(Queued(t, self.book.last_attempt.get(t.trial_id, 0) + 1,
                               self.settings.max_retries) for t in trials)
        try:
            while True:
                got = self.collect(self.executor.wait(WAIT_S)) if self.inflight else Collected()
                pending.extendleft(reversed([i.queued.retried() for i, _, r in got.records
                                             if self._retry(i, r)]))
                self.spent += sum(_metered_cost(a) for _, a, _ in got.records)
                if not self.stop.event.is_set() and pending and not self._money_out():
                    got.jobs += self.launch(pending)
                self.journal.write(layout.ACTUALS_JSONL, [a for _, a, _ in got.records])
                self.journal.write(layout.RESULTS_JSONL, [r for _, _, r in got.records])
                self.journal.sync()
                for job in got.jobs:
                    self.executor.submit(job)
                self.record_ends(got)
                if self.stop.event.is_set():
                    self.executor.cancel()
                if not self.inflight and (not pending or self.stop.event.is_set() or self.spent_out):
                    break
        finally:
            if self.inflight:  # leaving on an error: stop the attempts before waiting for them
                self.stop.event.set()
                self.executor.cancel()
            self.executor.close()
            self.journal.close()

    # launching

    def _money_out(self) -> bool:
        """--max-cost-usd reached: no attempt starts any more (the reason kept)."""
        total = self.settings.max_cost_usd
        if total is None or self.spent < total:
            return False
        if self.spent_out is None:
            self.spent_out = (f"--max-cost-usd {total:g} reached: the run's metered spend is "
                              f"${self.spent:.4f}, so no further attempt started")
        return True

    def launch(self, pending: deque[Queued]) -> list[Job]:
        """Start lines (and inline estimates) for as many attempts as there are free slots."""
        items = []
        while pending and self.free_slots:
            items.append(self._prepare(pending.popleft()))
        if not items:
            return []
        self.journal.write(layout.ATTEMPTS_JSONL, [self._event("start", i, None) for i in items])
        for i in items:
            self.book.started(i.trial.trial_id, i.queued.n)
            self.inflight[i.spec.attempt_id] = i
        if self.estimate_inline:
            self.journal.write(layout.ESTIMATES_JSONL,
                               [self.work.estimate(i.spec, _estimate_id(), utcnow()) for i in items])
            return [Job("attempt", i.spec) for i in items]
        return [Job("estimate", i.spec, estimate_id=_estimate_id()) for i in items]

    def _prepare(self, item: Queued) -> Launched:
        t = item.trial
        attempt_id = f"{t.task_id}-{t.rep}-{item.n}-{pysecrets.token_hex(4)}"
        spec = AttemptSpec(
            trial_id=t.trial_id, attempt_id=attempt_id, attempt=item.n, rep=t.rep, seed=t.seed,
            inputs_id=t.inputs_id, task=self.inputs.tasks[t.task_id],
            checkpoint=self.inputs.checkpoint, level=self.inputs.level.level,
            slot=self.free_slots.pop(), timeout_scale=self.settings.timeout_scale,
            secrets=self.inputs.secrets, driver_secrets=self.inputs.driver_secrets,
            scratch_root=self.scratch,
            evidence_dir=self.out / layout.ATTEMPTS_DIR / attempt_id,
            keep_workspace=self.settings.keep_workspaces,
            verifier_retries=self.settings.max_retries, cancel=self.stop.event,
            interpreter_prefixes=tuple(Path(p) for p in self.settings.interpreter_prefixes),
            allow_network=self.settings.allow_network, allow_hosts=tuple(self.settings.allow_hosts),
            gateway=self.gateway,
        )
        return Launched(item, spec)

    def _event(self, kind: Literal["start", "end"], item: Launched, status: str | None) -> AttemptEvent:
        t = item.trial
        return AttemptEvent(event=kind, trial_id=t.trial_id, attempt_id=item.spec.attempt_id,
                            attempt=item.queued.n, task_id=t.task_id, rep=t.rep, at=utcnow(),
                            status=status)  # type: ignore[arg-type]

    # recording what comes back

    def collect(self, batch: list[Done]) -> Collected:
        """Take in a batch of finished jobs: stage estimates and the attempts they release,
        the records of finished attempts, and free those attempts' slots."""
        got = Collected()
        estimated = [d for d in batch if d.job.kind == "estimate"]
        if estimated:
            items = [self.inflight[d.job.spec.attempt_id] for d in estimated]
            self.journal.write(layout.ESTIMATES_JSONL,
                               [d.estimate or self._missing_estimate(d, i)
                                for d, i in zip(estimated, items, strict=True)])
            for i in items:
                if self.stop.event.is_set():
                    got.ended.append((i, "interrupted"))
                else:
                    got.jobs.append(Job("attempt", i.spec))
        for d in batch:
            if d.job.kind == "attempt":
                item = self.inflight[d.job.spec.attempt_id]
                actual, result = (d.outcome.actual, d.outcome.result) if d.outcome is not None \
                    else self._rig_fault(d, item)
                got.records.append((item, actual, result))
                got.ended.append((item, result.status))
        for item, _ in got.ended:
            del self.inflight[item.spec.attempt_id]
            self.free_slots.append(item.spec.slot)
        return got

    def record_ends(self, got: Collected) -> None:
        """End lines, once their results are on disk; the counters; progress."""
        self.journal.write(layout.ATTEMPTS_JSONL, [self._event("end", i, st) for i, st in got.ended])
        for _, _, result in got.records:
            self.book.result(result.trial_id, result.inputs_id, result.status, result.attempt_id,
                             result.fault, result.final, result.verifier_runs)
        for _, status in got.ended:
            self.book.ended(status)
        if got.records:
            self.ran += len(got.records)
            self.reporter.progress(progress_of(self.book.counts(), time.monotonic() - self.t0,
                                               self.ran))

    def _retry(self, item: Launched, result: Result) -> bool:
        """Only a fault before the agent's first input starts the trial again (docs/attempts.md,
        "Faults never help the candidate"): anything after it could be the agent's choice."""
        return (result.status == "infra_error" and result.fault == "start"
                and item.queued.retries_left > 0 and not self.stop.event.is_set())

    def _missing_estimate(self, done: Done, item: Launched) -> Estimate:
        t = item.trial
        return Estimate(estimate_id=done.job.estimate_id, attempt_id=item.spec.attempt_id,
                        trial_id=t.trial_id, task_id=t.task_id, rep=t.rep, state="missing",
                        error=f"the rig failed to run the estimate: {done.error}", at=utcnow())

    def _rig_fault(self, done: Done, item: Launched) -> tuple[Actual, Result]:
        """The attempt's own code raised: an infra_error, with what evidence there is."""
        status = "interrupted" if self.stop.event.is_set() else "infra_error"
        out = fault_outcome(item.spec, status, f"the rig failed while running the attempt: {done.error}",
                            done.wall_s)
        return out.actual, out.result


def gateway_use(inputs: Inputs, settings: RunSettings) -> GatewayUse | None:
    """What every attempt's process needs of the run's gateway (docs/gateway.md): the file or
    the recording, the upstreams in the file's order, --max-cost-usd-per-attempt; no key."""
    setup = inputs.gateway
    if setup is None:
        return None
    per_attempt = settings.max_cost_usd_per_attempt
    if setup.file is not None:
        assert setup.facts is not None
        return GatewayUse(key=setup.facts.file_digest,
                          upstreams=tuple((n, u.api) for n, u in setup.file.upstreams.items()),
                          file=setup.file, max_cost_usd_per_attempt=per_attempt)
    assert setup.recording is not None and setup.replay_of is not None
    recorded = setup.recording.gateway
    return GatewayUse(key=f"replay:{setup.replay_of.run_id}",
                      upstreams=tuple((n, u.api) for n, u in (recorded.upstreams.items() if recorded else ())),
                      recording=setup.recording, max_cost_usd_per_attempt=per_attempt)


def _gateway_keys(inputs: Inputs) -> dict[str, str]:
    """The upstreams' keys as Ray's runners read them (each makes its own Gateway): by each
    upstream's `key_env`, in the runners' runtime environment alone."""
    setup = inputs.gateway
    if setup is None or setup.file is None:
        return {}
    return {up.key_env: key for name, up in setup.file.upstreams.items()
            if up.key_env and (key := setup.keys.get(name))}


def _metered_cost(actual: Actual) -> float:
    """Every role's metered cost of one attempt (the run's spend, --max-cost-usd)."""
    spend = actual.spend
    if spend is None:
        return 0.0
    return sum(r.cost_usd or 0.0 for r in (spend.candidate, spend.driver, spend.judge)
               if r is not None and r.source == "metered")


def _metered_in(out: Path) -> float:
    """The metered spend of the attempts a bundle already holds (a resumed run's earlier turns)."""
    path = out / layout.ACTUALS_JSONL
    if not path.is_file():
        return 0.0
    return sum(_metered_cost(a) for a in read_records(path, Actual).records)


def _estimate_id() -> str:
    return f"e-{pysecrets.token_hex(8)}"


class _Judged(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def verifier_runs(self) -> int: ...


def is_verifier_fault(result: _Judged) -> bool:
    """A verifier that kept failing on stored evidence: never a reason to re-run the agent
    (docs/attempts.md)."""
    return result.status == "infra_error" and result.verifier_runs > 0
