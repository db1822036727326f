"""Run bundles built from the models in tmp_path, for compare/gate unit tests.

Real files with real digests, written the way the runner writes them (canonical lines,
a manifest whose `files` table covers every other file), so that compare's shell reads
and verifies them exactly as it reads a bundle of `evalrig run`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from evalrig.core.digest import canonical_line, sha256_bytes
from evalrig.models.base import format_ts
from evalrig.models.gateway import GatewayFacts, ReplayOf
from evalrig.models.inputs import SUITES
from evalrig.models.run import (
    Actual,
    AttemptEvent,
    Canary,
    CheckpointRef,
    Estimate,
    PolicyPin,
    Result,
    RunCounts,
    RunManifest,
    RunSettings,
    SealCheck,
    SealEntry,
    TasksetRef,
    VerifierIdentity,
)
from evalrig.run.lifecycle import register_finished
from evalrig.store.bundle import file_digests, write_run_manifest
from evalrig.store.files import write_json_atomic
from evalrig.store.jsonl import chained_append

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
POLICY_DIGEST = sha256_bytes(b"policy")


def ckpt_id(name: str) -> str:
    return sha256_bytes(name.encode())


@dataclass(frozen=True)
class Call:
    """One model call an attempt made through the gateway (docs/gateway.md), as model.jsonl records it."""

    model: str = "openai/gpt-4.1-mini"  # qualified
    input_tokens: int = 1000
    output_tokens: int = 500
    usage_source: str = "provider"
    role: str = "candidate"
    cost_usd: float | None = None  # as recorded; None: priced with the side's table as of its t_start


@dataclass
class Task:
    suite: str
    passes: list[bool]
    cost: float | None = 0.01
    wall_s: float = 1.0
    cost_source: str = "reported"  # "metered": the rig measured the cost (docs/agents.md)
    content: str | None = None  # the fresh task's content digest; by default one per task id
    calls: list[Call] = field(default_factory=list)  # model calls of every attempt (a side with a gateway)


@dataclass
class Side:
    """One run: its tasks and every fact a scenario may want to vary."""

    name: str
    tasks: dict[str, Task]
    repeat: int = 5
    seed: int = 0
    status: str = "complete"
    subset: bool = False
    sandbox: str = "bwrap"
    policy_digest: str | None = POLICY_DIGEST
    canary_found: set[str] = field(default_factory=set)  # task ids whose rep 0 leaked
    history: bytes | None = None
    sealed: bool = True
    seal_matched: bool = True
    sealed_at: datetime = T0
    fresh_created_at: datetime = T0 + timedelta(hours=1)
    timeout_scale: float = 1.0
    max_retries: int = 2
    rig_version: str = "0.1.0"
    taskset_id: str = sha256_bytes(b"taskset")
    infra_errors: int = 0
    unscored: set[str] = field(default_factory=set)  # task ids whose last rep is infra_error
    network: bool = False  # every attempt had network
    network_hosts: list[str] = field(default_factory=list)  # hosts reached by every attempt
    ckpt: str | None = None  # the id of a real checkpoint directory, else a made-up one
    gateway: GatewayFacts | None = None  # a model gateway served it: its calls are written, cost metered
    replay_of: ReplayOf | None = None
    max_cost_usd_per_attempt: float | None = None

    @property
    def checkpoint_id(self) -> str:
        return self.ckpt or ckpt_id(self.name)


def chain(lines: list[dict]) -> bytes:
    """An event log with an intact prev-chain."""
    import orjson

    out, prev = [], None
    for obj in lines:
        raw = orjson.dumps({**obj, "prev": prev}, option=orjson.OPT_SORT_KEYS)
        out.append(raw)
        prev = hashlib.sha256(raw).hexdigest()
    return b"".join(x + b"\n" for x in out)


def register(home: Path, side: Side) -> None:
    home.mkdir(parents=True, exist_ok=True)
    with chained_append(home / "seals.jsonl", SealEntry, home=home) as seals:
        seals.append(SealEntry(checkpoint_id=side.checkpoint_id, name=side.name, sealed_at=side.sealed_at,
                                hash_version=2))  # the ids a rig computes now


def register_run(home: Path, manifest: RunManifest) -> None:
    """Record the built bundle in the home's runs.jsonl, as `run` does when a run finishes
    (compare takes only registered bundles)."""
    if manifest.status != "running":
        home.mkdir(parents=True, exist_ok=True)
        register_finished(home, manifest)


def _result(side: Side, task_id: str, t: Task, rep: int, attempt: int, status: str) -> Result:
    aid = f"{side.name}-{task_id}-{rep}-{attempt}"
    scored = status != "infra_error"
    return Result(
        trial_id=f"{task_id}:{rep}", attempt_id=aid, attempt=attempt, task_id=task_id, suite=t.suite, rep=rep,
        inputs_id=sha256_bytes(f"{side.name}{task_id}{rep}".encode()), status=status,
        passed=(status == "passed") if scored else None, reward=(1.0 if status == "passed" else 0.0) if scored else None,
        verifier=VerifierIdentity(kind="exact", version="1", digest=sha256_bytes(task_id.encode())),
        sandbox=side.sandbox, containment="namespace", network=side.network, network_hosts=side.network_hosts,
        canary=Canary(value="c4n4ry", found=task_id in side.canary_found and rep == 0),
        evidence_digest=sha256_bytes(aid.encode()), evidence_bytes=10,
    )


def _actual(r: Result, t: Task) -> Actual:
    return Actual(
        trial_id=r.trial_id, attempt_id=r.attempt_id, task_id=r.task_id, rep=r.rep, wall_s=t.wall_s, cpu_s=t.wall_s / 2,
        exit_code=0, timed_out=False, cost_usd=t.cost,
        usage_source=t.cost_source if t.cost is not None else "missing",  # type: ignore[arg-type]
        stdout_bytes=0, stderr_bytes=0, stdout_truncated=False, stderr_truncated=False,
    )


def write_model_calls(dir: Path, side: Side, r: Result, t: Task) -> Actual:
    """The attempt's model.jsonl, written the way the gateway writes it (docs/gateway.md), and its
    actual line with the candidate's metered spend (the sum of its calls' recorded cost)."""
    from evalrig.core.pricing import pricer
    from evalrig.models.gateway import CallUsage, ModelCall
    from evalrig.models.run import RoleSpend, Spend

    assert side.gateway is not None or side.replay_of is not None
    # a replay's lines carry the recording's cost (priced here with the bare table), source "replayed"
    price = pricer(side.gateway.prices or {} if side.gateway is not None else {})
    lines = []
    for seq, c in enumerate(t.calls):
        upstream, _, model = c.model.partition("/")
        usage = CallUsage(input_tokens=c.input_tokens, output_tokens=c.output_tokens)
        at = T0 + timedelta(hours=2, seconds=seq)
        cost = c.cost_usd
        if cost is None:
            up = side.gateway.upstreams[upstream] if side.gateway is not None else None
            cost = price(c.model, (up.price_provider or up.api) if up is not None else upstream, usage, at)
            assert cost is not None, c.model
        lines.append(ModelCall(
            seq=seq, role=c.role, upstream=upstream, model=model, api="openai-chat", stream=False,  # type: ignore[arg-type]
            status=200, t_start=format_ts(at), t_start_ms=int(at.timestamp() * 1000), t_ms=12.5,
            request_sha256=sha256_bytes(f"{r.attempt_id}:{seq}".encode()),
            response_sha256=sha256_bytes(f"{r.attempt_id}:{seq}:r".encode()), usage=usage,
            usage_source="replayed" if side.replay_of is not None else c.usage_source,  # type: ignore[arg-type]
            cost_usd=cost))
    evidence = dir / "attempts" / r.attempt_id
    evidence.mkdir(parents=True, exist_ok=True)
    (evidence / "model.jsonl").write_bytes(b"".join(canonical_line(x) for x in lines))
    source = "replayed" if side.replay_of is not None else "metered"

    def summed(role: str) -> RoleSpend:
        mine = [x for x in lines if x.role == role]
        return RoleSpend(cost_usd=sum(x.cost_usd for x in mine), input_tokens=sum(x.usage.input_tokens for x in mine if x.usage),
                         output_tokens=sum(x.usage.output_tokens for x in mine if x.usage), source=source,  # type: ignore[arg-type]
                         calls=len(mine), estimated=any(x.usage_source == "estimated" for x in mine) if source == "metered" else None)

    spend = summed("candidate")
    driver = summed("driver") if any(x.role == "driver" for x in lines) else None
    return _actual(r, t).model_copy(update={"cost_usd": spend.cost_usd, "usage_source": source,
                                            "spend": Spend(candidate=spend, driver=driver)})


def _attempt_lines(results: list[Result]) -> tuple[bytes, bytes]:
    """attempts.jsonl (a start and an end line per attempt) and estimates.jsonl, as the runner writes them."""
    attempts, estimates = [], []
    for r in results:
        for event in ("start", "end"):
            attempts.append(canonical_line(AttemptEvent(
                event=event, trial_id=r.trial_id, attempt_id=r.attempt_id, attempt=r.attempt, task_id=r.task_id,
                rep=r.rep, at=T0, status=r.status if event == "end" else None)))
        estimates.append(canonical_line(Estimate(
            estimate_id="e-" + r.attempt_id, attempt_id=r.attempt_id, trial_id=r.trial_id, task_id=r.task_id,
            rep=r.rep, state="valid", p_success=0.5, time_s=(0.5, 2.0), cost_usd=(0.005, 0.05), at=T0)))
    return b"".join(attempts), b"".join(estimates)


def redigest(dir: Path, home: Path) -> None:
    """After a test edits a bundle's files on purpose: recompute the manifest's digests and
    register the result in the home, as a forger with the home's trust would (to reach the
    checks that come after registration)."""
    manifest = RunManifest.model_validate_json((dir / "manifest.json").read_bytes())
    manifest = manifest.model_copy(update={"files": file_digests(dir)})
    manifest = write_run_manifest(dir, manifest, home)  # signed with the home's key, as the rig signs it
    register_run(home, manifest)


def fresh_content(task_id: str, t: Task | None = None) -> str:
    """A fresh task's content digest: the task's own, or one per task id."""
    return t.content if t is not None and t.content else sha256_bytes(f"content:{task_id}".encode())


def write_run(dir: Path, side: Side, home: Path | None = None, full: bool = False) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    if home is not None and side.sealed:
        register(home, side)
    results, actuals = [], []
    infra = 0
    for task_id in sorted(side.tasks):
        t = side.tasks[task_id]
        for rep, ok in enumerate(t.passes):
            if task_id in side.unscored and rep == len(t.passes) - 1:
                for attempt in range(1, side.max_retries + 2):
                    results.append(_result(side, task_id, t, rep, attempt, "infra_error"))
                    infra += 1
                continue
            r = _result(side, task_id, t, rep, 1, "passed" if ok else "failed")
            results.append(r)
            served = side.gateway is not None or side.replay_of is not None
            actuals.append(write_model_calls(dir, side, r, t) if served else _actual(r, t))
    # One write per file (the runner syncs every line; tests need not pay for that).
    (dir / "results.jsonl").write_bytes(b"".join(canonical_line(r) for r in results))
    (dir / "actuals.jsonl").write_bytes(b"".join(canonical_line(a) for a in actuals))
    attempts, estimates = _attempt_lines(results) if full else (b"", b"")
    (dir / "attempts.jsonl").write_bytes(attempts)
    (dir / "estimates.jsonl").write_bytes(estimates)
    if side.history is not None:
        (dir / "history.jsonl").write_bytes(side.history)
    suites = {s: sum(1 for t in side.tasks.values() if t.suite == s) for s in SUITES}
    if not suites["public"]:  # as manifests written before the public suite existed
        del suites["public"]
    trials = sum(len(t.passes) for t in side.tasks.values())
    scored = trials - len(side.unscored)
    passed = sum(r.status == "passed" for r in results)
    manifest = RunManifest(
        run_id=f"run-{side.name}", rig_version=side.rig_version,
        checkpoint=CheckpointRef(id=side.checkpoint_id, name=side.name, sealed_at=side.sealed_at,
                                 hash_version=2),
        taskset=TasksetRef(id=side.taskset_id, count=len(side.tasks), suites=suites,
                           fresh_created_at={k: side.fresh_created_at for k, t in side.tasks.items()
                                             if t.suite == "fresh"},
                           fresh_content={k: fresh_content(k, t) for k, t in side.tasks.items()
                                          if t.suite == "fresh"}),
        repeat=side.repeat, seed=side.seed,
        settings=RunSettings(timeout_scale=side.timeout_scale, max_retries=side.max_retries, sandbox="bwrap",
                             tasks_dir="tasks", checkpoint_dir="ckpt", jobs=1,
                             max_cost_usd_per_attempt=side.max_cost_usd_per_attempt),
        gateway=side.gateway, replay_of=side.replay_of,
        subset=side.subset,
        policy_pin=PolicyPin(name="default", version=1, digest=side.policy_digest) if side.policy_digest else None,
        plan_digest=sha256_bytes(b"plan"), status=side.status,
        counts=RunCounts(trials=trials, scored=scored, passed=passed, failed=scored - passed, agent_error=0,
                         timeout=0, infra_error=infra, interrupted=0, attempts=len(results),
                         unscored=trials - scored),
        seal_checks=[SealCheck(phase=p, at=T0 + timedelta(hours=2), checkpoint_id=side.checkpoint_id,
                               matched=side.seal_matched) for p in ("start", "end")],
        history="declared" if side.history is not None else "none",
        created_at=T0 + timedelta(hours=2), finished_at=T0 + timedelta(hours=3),
        files=file_digests(dir),
    )
    if home is not None:
        manifest = write_run_manifest(dir, manifest, home)  # signed by the home that "ran" it
        register_run(home, manifest)
    else:
        write_json_atomic(dir / "manifest.json", manifest)
    return dir


def counts_tasks(fresh_counts: list[int], k: int = 5, fixed: int = 3, invariant: int = 1,
                 cost: float = 0.01, cost_source: str = "reported") -> dict[str, Task]:
    out: dict[str, Task] = {}
    for i, n in enumerate(fresh_counts):
        out[f"fresh-{i:03d}"] = Task("fresh", [j < n for j in range(k)], cost=cost, cost_source=cost_source)
    for i in range(fixed):
        out[f"fixed-{i:03d}"] = Task("fixed", [True] * k, cost=cost, cost_source=cost_source)
    for i in range(invariant):
        out[f"inv-{i:03d}"] = Task("invariant", [True] * k, cost=cost, cost_source=cost_source)
    return out


# -- in-memory views, for property tests of the pure core --------------------------------


def view_from_counts(name: str, fresh: list[int], k: int = 5, fixed: list[int] | None = None):
    """A RunView of fresh (and fixed) tasks with the given pass counts, every invariant holding."""
    from evalrig.core.compare import RunView, TaskView, TrialOutcome
    from evalrig.models.comparison import Integrity, RunRef, SideFacts

    tasks = {}
    for suite, counts in (("fresh", fresh), ("fixed", fixed or [])):
        for i, c in enumerate(counts):
            tid = f"{suite}-{i:03d}"
            outs = tuple(TrialOutcome(j < c, 1.0 if j < c else 0.0, 0.01, 1.0, 0.5) for j in range(k))
            tasks[tid] = TaskView(tid, suite, outs)  # type: ignore[arg-type]
    suites = {"fixed": len(fixed or []), "fresh": len(fresh), "invariant": 0}
    trials = k * len(tasks)
    cid = ckpt_id(name)
    facts = SideFacts(
        run_id=name, checkpoint_id=cid, status="complete", subset=False, repeat=k, taskset_suites=suites,
        run_suites={s: n for s, n in suites.items() if n}, trials=trials, scored=trials, unscored=0,
        attempts=trials, infra_errors=0, infra_error_rate=0.0, sandbox={"bwrap": trials, "process": 0},
        network_attempts=0, seal_checks=2, seal_checks_matched=2, registered=True, sealed_at=T0,
        canary_found=0, history="none", policy_pin=PolicyPin(name="default", version=1, digest=POLICY_DIGEST),
        integrity=Integrity(verified_files=4),
    )
    return RunView(ref=RunRef(run_id=name, checkpoint_id=cid, bundle_digest=POLICY_DIGEST), repeat=k, seed=0,
                   taskset_id=POLICY_DIGEST, tasks=tasks, facts=facts,
                   fresh_created_at={t: T0 + timedelta(hours=1) for t in tasks if t.startswith("fresh")},
                   fresh_content={t: fresh_content(t) for t in tasks if t.startswith("fresh")})
