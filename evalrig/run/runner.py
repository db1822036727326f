"""A run: the plan, resume, scheduling attempts on an executor, the run bundle (DESIGN §6, §7).

The runner is the only writer of the bundle. Per attempt, in this order, each record a
whole synced line:

    attempts.jsonl  start       before anything of the attempt runs
    estimates.jsonl             after the estimate phase, before the attempt starts
    actuals.jsonl, results.jsonl
    attempts.jsonl  end         last: the attempt's commit mark

so a crash at any moment leaves a bundle that a resume can repair: a start without an end
is ended `interrupted` (or, when its result made it to disk, ended with that result's
status), a torn last line is cut, and every trial without a scored result whose inputs
id still matches runs again. `manifest.json` is written at the start (status `running`)
and last of all at the end, with the digest of every other file.

Choices where DESIGN §6 is silent:
- Resume by the same command: an option the command leaves out takes its default, so
  leaving out a flag the first run gave is a difference (refused when it can change an
  outcome). With `--resume`, a left-out option takes the manifest's value.
- A bundle evaluates one checkpoint: a resume whose checkpoint has another id (sealed
  anew) is refused, as is a task set that lost a task the bundle has attempts of. A task
  whose content changed is not refused: its trials' inputs ids change and they rerun.
- An attempt killed with the rig (start line, no end line) gets an `interrupted` end
  line and no result line (nothing was measured); its partial evidence stays in the
  bundle and in `manifest.files`.
- `--max-retries` is a budget per process: a resume gives an unscored trial a fresh one;
  attempt numbers continue from the bundle's. A verifier that kept faulting on stored
  evidence (`infra_error` with verifier runs) is never a reason to run the agent again.
- Running the command again on a complete bundle with nothing to rerun writes nothing.
- A checkpoint that changed during the run fails the `end` seal check: the manifest
  records it and the command exits 4.
"""

from __future__ import annotations

import contextlib
import os
import secrets as pysecrets
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from evalrig import __version__
from evalrig.core.digest import sha256_bytes
from evalrig.core.errors import EvalrigError, Problem, UsageError, invalid
from evalrig.core.plan import Filters, OutcomeSettings, Plan, Trial, build_plan
from evalrig.models.run import (
    MAY_CHANGE_ON_RESUME,
    SCORED,
    Actual,
    AttemptEvent,
    Canary,
    CheckpointRef,
    Estimate,
    InterpreterPin,
    PolicyPin,
    Provenance,
    Result,
    Resume,
    RunCounts,
    RunManifest,
    RunSettings,
    SealCheck,
    TasksetRef,
)
from evalrig.run.executors import AttemptWork, Done, Executor, Job, make_executor, trial_work
from evalrig.store import layout
from evalrig.store.bundle import (
    LOCK,
    LOCK_HOLDER,
    MANIFEST,
    RUN_JSONL,
    BundleLock,
    Fields,
    Journal,
    RunBundle,
    append_lines,
    cut_torn_tail,
    file_digests,
    is_atomic_temp,
    load_run,
    read_json,
    read_rows,
    write_bytes_atomic,
    write_json_atomic,
)
from evalrig.store.clock import utcnow

HISTORY = layout.HISTORY
PROVENANCE = layout.PROVENANCE
ATTEMPTS_DIR = layout.ATTEMPTS_DIR
DEFAULT_REPEAT = 5
DEFAULT_MAX_RETRIES = 2
WAIT_S = 0.25  # how often the loop looks at the stop flag while attempts run


# -- what the caller asks for -----------------------------------------------------------


@dataclass(frozen=True)
class RunRequest:
    """The options of `run`. None means "not given": a default, or with --resume the manifest's."""

    out: Path
    checkpoint: Path | None = None
    tasks: Path | None = None
    repeat: int | None = None
    seed: int | None = None
    jobs: int | None = None
    policy: Path | None = None
    timeout_scale: float | None = None
    max_retries: int | None = None
    sandbox: str | None = None
    executor: str | None = None
    ray_address: str | None = None
    secrets: tuple[str, ...] | None = None
    keep_workspaces: bool | None = None
    suites: tuple[str, ...] | None = None
    task_ids: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    interpreter_prefixes: tuple[str, ...] | None = None
    resume: bool = False
    argv: tuple[str, ...] = ()
    allow_network: bool | None = None
    allow_hosts: tuple[str, ...] | None = None


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


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    status: str
    counts: RunCounts
    bundle: Path
    interrupted: bool
    kept: int
    ran: int


SpecFactory = Callable[..., Any]


@dataclass(frozen=True)
class Hooks:
    """What tests and other executors may swap: the attempt functions and the spec type."""

    work: AttemptWork | None = None
    spec_factory: SpecFactory | None = None
    executor_factory: Callable[[str, int, AttemptWork | None, str | None], Executor] | None = None


# -- settings: defaults, resume, refusing changes ---------------------------------------


@dataclass(frozen=True)
class Resolved:
    settings: RunSettings
    repeat: int
    seed: int


FLAG = {
    "repeat": "--repeat",
    "seed": "--seed",
    "timeout_scale": "--timeout-scale",
    "max_retries": "--max-retries",
    "sandbox": "--sandbox",
    "secrets": "--secret",
    "suites": "--suite",
    "task_ids": "--task",
    "tags": "--tag",
    "tasks_dir": "--tasks",
    "checkpoint_dir": "--checkpoint",
    "policy_file": "--policy",
    "jobs": "--jobs",
    "executor": "--executor",
    "ray_address": "--ray-address",
    "keep_workspaces": "--keep-workspaces",
    "interpreter_prefixes": "--interpreter-prefix",
    "allow_network": "--allow-network",
    "allow_hosts": "--allow-host",
}


def _abs(p: Path | None) -> str | None:
    return str(Path(p).resolve()) if p is not None else None


def _given(req: RunRequest) -> dict[str, Any]:
    """The options the command gave, under their RunSettings names."""
    vals = {
        "repeat": req.repeat,
        "seed": req.seed,
        "timeout_scale": req.timeout_scale,
        "max_retries": req.max_retries,
        "sandbox": req.sandbox,
        "secrets": sorted(set(req.secrets)) if req.secrets else None,
        "suites": sorted(set(req.suites)) if req.suites else None,
        "task_ids": sorted(set(req.task_ids)) if req.task_ids else None,
        "tags": sorted(set(req.tags)) if req.tags else None,
        "tasks_dir": _abs(req.tasks),
        "checkpoint_dir": _abs(req.checkpoint),
        "policy_file": _abs(req.policy),
        "jobs": req.jobs,
        "executor": req.executor,
        "ray_address": req.ray_address,
        "keep_workspaces": req.keep_workspaces,
        "interpreter_prefixes": (sorted({str(Path(p).resolve()) for p in req.interpreter_prefixes})
                                 if req.interpreter_prefixes else None),
        "allow_network": req.allow_network,
        "allow_hosts": allow_hosts(req.allow_hosts) if req.allow_hosts else None,
    }
    return {k: v for k, v in vals.items() if v is not None}


def allow_hosts(values: Sequence[str]) -> list[str]:
    """`--allow-host` values normalised and sorted; a malformed one is a usage error (exit 2)."""
    from evalrig.attempt.egress import parse_allow_host

    out = set()
    for value in values:
        try:
            out.add(parse_allow_host(value))
        except ValueError as e:
            raise UsageError(f"--allow-host {e}",
                             hint="give a host name or an IP address, with an optional port "
                             "1..65535: --allow-host api.example.com:443") from None
    return sorted(out)


def _defaults() -> dict[str, Any]:
    return {
        "repeat": DEFAULT_REPEAT,
        "seed": 0,
        "timeout_scale": 1.0,
        "max_retries": DEFAULT_MAX_RETRIES,
        "sandbox": "auto",
        "secrets": [],
        "suites": [],
        "task_ids": [],
        "tags": [],
        "policy_file": None,
        "jobs": os.cpu_count() or 1,
        "executor": "local",
        "ray_address": None,
        "keep_workspaces": False,
        "interpreter_prefixes": [],
        "allow_network": False,
        "allow_hosts": [],
    }


def _manifest_values(m: RunManifest) -> dict[str, Any]:
    vals = m.settings.model_dump()
    vals.update(repeat=m.repeat, seed=m.seed)
    # Found, not given: gather_inputs pins them anew and refuse_other_inputs compares.
    vals.pop("interpreters", None)
    # What may change on resume is taken from this command (or its defaults), not the manifest.
    for k in MAY_CHANGE_ON_RESUME:
        vals.pop(k, None)
    return vals


def resolve_settings(req: RunRequest, manifest: RunManifest | None) -> Resolved:
    """The settings of this run; on a resume, refuse (exit 4) every outcome-affecting change."""
    given = _given(req)
    vals = _defaults()
    if req.resume:
        if manifest is None:
            raise invalid("--resume: no run bundle here (no manifest.json)", file=req.out,
                          hint="start the run without --resume, giving --checkpoint and --tasks")
        vals.update(_manifest_values(manifest))
    vals.update(given)
    for need, flag in (("checkpoint_dir", "--checkpoint"), ("tasks_dir", "--tasks")):
        if vals.get(need) is None:
            raise UsageError(f"{flag} is required to start a run",
                             hint="give --checkpoint DIR --tasks DIR, or --resume to continue a bundle")
    refuse_nesting(Path(req.out), Path(vals["checkpoint_dir"]), Path(vals["tasks_dir"]))
    if vals["allow_hosts"] and not vals["allow_network"]:
        raise UsageError("--allow-host needs --allow-network",
                         hint="the operator grants the network with --allow-network, then names "
                         "each host it may reach with --allow-host HOST[:PORT]")
    repeat, seed = vals.pop("repeat"), vals.pop("seed")
    try:
        settings = RunSettings(**vals)
    except Exception as e:  # a value out of range reaches here only from a hand-edited manifest
        raise invalid(f"settings: {e}", file=req.out / MANIFEST) from None
    resolved = Resolved(settings, repeat, seed)
    if manifest is not None:
        refuse_changes(manifest, resolved, req.out)
    return resolved


def _inside(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or b in a.parents


def refuse_nesting(out: Path, checkpoint: Path, tasks: Path) -> None:
    """A bundle inside the checkpoint changes the sealed content (the run ends void); one
    inside the task set makes it an extra folder there; a task set inside the checkpoint is
    copied, verifiers and all, into every agent's workspace."""
    for inner, outer, flag_in, flag_out in ((out, checkpoint, "--out", "--checkpoint"),
                                            (out, tasks, "--out", "--tasks"),
                                            (tasks, checkpoint, "--tasks", "--checkpoint")):
        if _inside(inner, outer):
            raise UsageError(f"{flag_in} {inner} is inside {flag_out} {outer}",
                             hint=f"keep {flag_in} outside {flag_out}")
    # Inside another bundle, the new files are ones its manifest does not list: that bundle
    # would never verify again.
    for parent in out.resolve().parents:
        if (parent / MANIFEST).is_file():
            raise UsageError(f"--out {out} is inside the bundle {parent}",
                             hint="give --out a directory outside every bundle")


def _show(v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(map(str, v)) if v else "none"
    return "none" if v is None else str(v)


def setting_differences(manifest: RunManifest, now: Resolved) -> list[str]:
    """Each outcome-affecting setting that differs: "--seed: bundle has 0, this command gives 1"."""
    before = _manifest_values(manifest)
    after = now.settings.model_dump()
    after.update(repeat=now.repeat, seed=now.seed)
    diffs = []
    for key in sorted(before, key=lambda k: FLAG.get(k, k)):
        if key in MAY_CHANGE_ON_RESUME:
            continue
        b, a = before[key], after.get(key)
        if isinstance(b, list):
            b, a = sorted(b), sorted(a or [])
        if b != a:
            diffs.append(f"{FLAG.get(key, key)}: bundle has {_show(b)}, this command gives {_show(a)}")
    return diffs


def refuse_changes(manifest: RunManifest, now: Resolved, out: Path) -> None:
    diffs = setting_differences(manifest, now)
    if diffs:
        raise invalid(
            "resume refused: settings that can change outcomes differ from the bundle's",
            file=out / MANIFEST,
            problems=[Problem(None, d) for d in diffs],
            hint="run the original command again (or `evalrig run --out BUNDLE --resume`), "
            "or start a new bundle with a new --out",
        )


# -- the inputs of a run ----------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    checkpoint: Any  # evalrig.store.checkpoint.Checkpoint
    seal: SealCheck
    sealed: Any  # SealEntry
    taskset: Any  # evalrig.store.tasks.TaskSet
    tasks: dict[str, Any]  # task id -> LoadedTask
    plan: Plan
    policy_pin: PolicyPin | None
    level: Any  # evalrig.attempt.sandbox.LevelChoice
    secrets: dict[str, str]
    home: Path
    interpreters: list[InterpreterPin] = field(default_factory=list)
    network_warning: str | None = None


def seal_check(dir: Path, home: Path, phase: Literal["start", "resume", "end"]) -> tuple[SealCheck, Any, EvalrigError | None]:
    """Check the seal against the registry; the check is recorded whatever it finds."""
    from evalrig.store.checkpoint import check_sealed, checkpoint_id

    at = utcnow()
    try:
        entry = check_sealed(dir, home)
    except EvalrigError as e:
        try:
            current: str | None = checkpoint_id(dir).digest
        except EvalrigError:
            current = None
        return SealCheck(phase=phase, at=at, checkpoint_id=current, matched=False,
                         message=e.message), None, e
    return SealCheck(phase=phase, at=at, checkpoint_id=entry.checkpoint_id, matched=True), entry, None


def pin_policy(path: str | None) -> PolicyPin | None:
    if path is None:
        return None
    from evalrig.store.policy import load_policy

    loaded = load_policy(Path(path))
    return PolicyPin(name=loaded.spec.name, version=loaded.spec.version, digest=loaded.digest)


RIG_SET = frozenset({"PATH", "HOME", "LANG", "TMPDIR", "EVALRIG_PROMPT", "EVALRIG_WORK",
                     "EVALRIG_OUT", "EVALRIG_TASK_ID", "EVALRIG_ATTEMPT_ID", "EVALRIG_DEADLINE_S",
                     "EVALRIG_SEED", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                     "https_proxy", "all_proxy"})
"""Variables the rig gives the agent itself (DESIGN §4), beside the canary's; the proxy's
(evalrig.attempt.egress.PROXY_VARS) when the operator grants the network."""


def secret_values(names: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    from evalrig.attempt.canary import CANARY_ENV

    # The rig's own value would silently win over such a secret, and the rig's value would
    # then be redacted from the evidence as if it were secret.
    taken = [n for n in names if n in RIG_SET or n == CANARY_ENV]
    if taken:
        raise invalid(f"--secret {', '.join(taken)}: the rig sets this variable for the agent itself",
                      field="--secret", hint="export the value under another name and pass that")
    missing = [n for n in names if n not in environ]
    if missing:
        raise invalid(f"--secret {', '.join(missing)}: not set in this environment",
                      field="--secret", hint="export the variable before running the rig")
    return {n: environ[n] for n in names}


def pin_interpreters(checkpoint: Any, s: RunSettings, home: Path, out: Path | None,
                     level: Any) -> list[InterpreterPin]:
    """Check the operator's interpreter prefixes and resolve the checkpoint's commands
    (docs/attempts.md "What runs"); exit 4 naming checkpoint.toml and the field for a
    command that would run anything else. Returns the digest of every program that
    resolved under a prefix."""
    import evalrig
    from evalrig.attempt.trial import scratch_base
    from evalrig.store.checkpoint import (
        check_interpreter_prefixes,
        program_digest,
        resolve_commands,
    )

    guarded = [("the task set", Path(s.tasks_dir), True), ("$EVALRIG_HOME", home, True),
               ("the rig's own files", Path(evalrig.__file__).parent, False),
               ("the attempts' scratch directory",
                Path(scratch_base(s.keep_workspaces) or tempfile.gettempdir()), False)]
    if out is not None:
        guarded.append(("the --out bundle", out, True))
    prefixes = check_interpreter_prefixes(s.interpreter_prefixes, guarded)
    unprivileged = level.level == "process" and os.geteuid() == 0
    return [InterpreterPin(field=p.field, prefix=str(p.prefix), program=str(p.real),  # type: ignore[arg-type]
                           sha256=program_digest(p.real))
            for p in resolve_commands(checkpoint, prefixes, unprivileged)
            if p.where == "prefix"]


def gather_inputs(r: Resolved, home: Path, phase: Literal["start", "resume"],
                  environ: Mapping[str, str], out: Path | None = None) -> Inputs:
    from evalrig.attempt.sandbox import resolve_level
    from evalrig.store.checkpoint import load_checkpoint
    from evalrig.store.tasks import load_taskset

    s = r.settings
    checkpoint = load_checkpoint(Path(s.checkpoint_dir))
    check, entry, error = seal_check(Path(s.checkpoint_dir), home, phase)
    if error is not None:
        raise error
    history_source(checkpoint)
    level = resolve_level(s.sandbox)
    pins = pin_interpreters(checkpoint, s, home, out, level)
    taskset = load_taskset(Path(s.tasks_dir))
    outcome = OutcomeSettings(s.timeout_scale, s.max_retries, s.sandbox, tuple(s.secrets),
                              interpreter_prefixes=tuple(s.interpreter_prefixes),
                              interpreters=tuple((p.field, p.program, p.sha256) for p in pins),
                              allow_network=s.allow_network, allow_hosts=tuple(s.allow_hosts))
    filters = Filters(tuple(s.suites), tuple(s.task_ids), tuple(s.tags))
    plan = build_plan(taskset.tasks, entry.checkpoint_id, r.repeat, r.seed, outcome, filters,
                      Path(s.tasks_dir))
    tasks = {t.id: t for t in taskset.tasks}
    asking = refuse_ungranted_network(checkpoint, [tasks[i] for i in plan.task_ids], s.allow_network)
    level = resolve_level(s.sandbox)
    return Inputs(
        checkpoint=checkpoint,
        seal=check,
        sealed=entry,
        taskset=taskset,
        tasks=tasks,
        plan=plan,
        policy_pin=pin_policy(s.policy_file),
        level=level,
        secrets=secret_values(s.secrets, environ),
        home=home,
        interpreters=pins,
        network_warning=network_warning(level.level, s.allow_network and asking),
    )


def refuse_ungranted_network(checkpoint: Any, tasks: Sequence[Any], granted: bool) -> bool:
    """Whether the checkpoint or a planned task says network = true; without the operator's
    --allow-network that is refused before the first attempt (exit 4, naming each file).

    The network is the operator's grant, never the checkpoint's (docs/security.md)."""
    from evalrig.store.checkpoint import CHECKPOINT_TOML

    problems = []
    if checkpoint.spec.agent.network:
        problems.append(Problem(str(checkpoint.dir / CHECKPOINT_TOML),
                                "network = true: the agent asks for the network", field="agent.network"))
    for task in tasks:
        if task.spec.network:
            problems.append(Problem(str(task.dir / "task.toml"),
                                    "network = true: the task asks for the network", field="network"))
    if problems and not granted:
        first = problems[0]
        raise invalid(
            f"{first.file}: {first.field} = true, and the operator has not granted the network",
            file=first.file, field=first.field, problems=problems,
            hint="the network is the operator's grant, never the checkpoint's: to let this agent "
            "reach chosen hosts, run again with --allow-network --allow-host HOST[:PORT] "
            "(repeatable; the egress proxy lets it reach only those); else set network = false",
        )
    return bool(problems)


def network_warning(level: str, networked: bool) -> str | None:
    """Said on stderr and in the provenance when a grant cannot go through the egress proxy."""
    from evalrig.attempt.sandbox import egress_enforced

    if not networked or egress_enforced(level):  # type: ignore[arg-type]
        return None
    return ("--allow-network under --sandbox process without root: the grant is unenforced "
            "(the agent reaches the host's network directly, not through the egress proxy, so "
            "--allow-host does not bind it and network.jsonl is not written); run as root or "
            "under bwrap to enforce it")


def refuse_other_inputs(manifest: RunManifest, inputs: Inputs, attempted: set[str],
                        out: Path) -> None:
    """A bundle evaluates one checkpoint on one task set; a resume must not mix them.

    A task whose content changed is no reason to refuse: its trials' inputs ids change,
    so they run again. A task that is gone would leave results no plan accounts for.
    """
    problems = []
    if manifest.checkpoint.id != inputs.sealed.checkpoint_id:
        problems.append(Problem(None, f"checkpoint: bundle has {manifest.checkpoint.id}, "
                                      f"this command gives {inputs.sealed.checkpoint_id}"))
    before_pins = {p.field: p for p in manifest.settings.interpreters}
    for pin in inputs.interpreters:
        was = before_pins.pop(pin.field, None)
        if was is not None and was != pin:
            problems.append(Problem(None, f"{pin.field}: the interpreter {was.program} "
                                          f"(sha256 {was.sha256}) is now {pin.program} "
                                          f"(sha256 {pin.sha256})"))
        elif was is None:
            problems.append(Problem(None, f"{pin.field}: resolves now to {pin.program} under "
                                          f"--interpreter-prefix {pin.prefix}, not so when "
                                          "the bundle began"))
    for was in before_pins.values():
        problems.append(Problem(None, f"{was.field}: resolved to {was.program} under "
                                      f"--interpreter-prefix {was.prefix} when the bundle "
                                      "began, no longer"))
    if manifest.policy_pin != inputs.policy_pin:
        before = manifest.policy_pin.digest if manifest.policy_pin else "none"
        after = inputs.policy_pin.digest if inputs.policy_pin else "none"
        problems.append(Problem(None, f"--policy: bundle pinned {before}, this command gives {after}"))
    gone = sorted(attempted - {t.trial_id for t in inputs.plan.trials})
    if gone:
        problems.append(Problem(None, f"--tasks: the bundle has attempts of trials the task set "
                                      f"no longer has: {_show(gone[:5])}"
                                      + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")))
    if problems:
        raise invalid("resume refused: the inputs differ from the bundle's", file=out / MANIFEST,
                      problems=problems,
                      hint="a bundle evaluates one sealed checkpoint on one task set: "
                      "start a new bundle with a new --out")


# -- bookkeeping of the trials ----------------------------------------------------------


@dataclass
class TrialBook:
    """Per-trial state and the run's counters, from the bundle and then live."""

    plan: Plan
    final: dict[str, str] = field(default_factory=dict)  # trial id -> final scored status
    last_attempt: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    infra: int = 0
    interrupted: int = 0

    def __post_init__(self) -> None:
        self._inputs = {t.trial_id: t.inputs_id for t in self.plan.trials}

    def started(self, trial_id: str, n: int) -> None:
        self.attempts += 1
        self.last_attempt[trial_id] = max(n, self.last_attempt.get(trial_id, 0))

    def result(self, trial_id: str, inputs_id: str, status: str) -> None:
        if status == "infra_error":
            self.infra += 1
        if status in SCORED and self._inputs.get(trial_id) == inputs_id:
            self.final[trial_id] = status

    def ended(self, status: str | None) -> None:
        if status == "interrupted":
            self.interrupted += 1

    def to_run(self) -> list[Trial]:
        return [t for t in self.plan.trials if t.trial_id not in self.final]

    def counts(self) -> RunCounts:
        by = {s: 0 for s in SCORED}
        for s in self.final.values():
            by[s] += 1
        scored = len(self.final)
        return RunCounts(trials=len(self.plan), scored=scored, passed=by["passed"],
                         failed=by["failed"], agent_error=by["agent_error"], timeout=by["timeout"],
                         infra_error=self.infra, interrupted=self.interrupted,
                         attempts=self.attempts, unscored=len(self.plan) - scored)


EVENT_FIELDS: Fields = {"event": (str,), "trial_id": (str,), "attempt_id": (str,),
                        "attempt": (int,), "task_id": (str,), "rep": (int,),
                        "status": (str, type(None))}
RESULT_FIELDS: Fields = {"trial_id": (str,), "attempt_id": (str,), "inputs_id": (str,),
                         "status": (str,)}


@dataclass(frozen=True)
class BundleRows:
    """What a resume needs of the bundle's records: a few fields of every line."""

    attempts: list[dict[str, Any]]
    results: list[dict[str, Any]]


def read_bundle_rows(out: Path) -> BundleRows:
    """The attempts and results lines (torn tails already cut)."""
    return BundleRows(read_rows(out / layout.ATTEMPTS_JSONL, EVENT_FIELDS).records,
                      read_rows(out / layout.RESULTS_JSONL, RESULT_FIELDS).records)


def book_from_rows(plan: Plan, rows: BundleRows) -> TrialBook:
    book = TrialBook(plan)
    for ev in rows.attempts:
        if ev["event"] == "start":
            book.started(ev["trial_id"], ev["attempt"])
        else:
            book.ended(ev["status"])
    for r in rows.results:
        book.result(r["trial_id"], r["inputs_id"], r["status"])
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


# -- the bundle's fixed files -----------------------------------------------------------


def dependency_versions() -> dict[str, str]:
    import re
    from importlib import metadata

    out: dict[str, str] = {}
    try:
        reqs = metadata.requires("evalrig") or []
    except metadata.PackageNotFoundError:
        reqs = []
    for req in reqs:
        if "extra ==" in req:
            continue
        m = re.match(r"[A-Za-z0-9_.-]+", req)
        if m:
            with contextlib.suppress(metadata.PackageNotFoundError):
                out[m.group(0)] = metadata.version(m.group(0))
    return out


def new_provenance(argv: tuple[str, ...], warnings: list[str]) -> Provenance:
    import platform
    import socket
    import sys

    return Provenance(rig_version=__version__, python=sys.version.split()[0],
                      platform=platform.platform(), host=socket.gethostname(), argv=list(argv),
                      dependencies=dependency_versions(), sandbox_warnings=warnings)


def history_source(checkpoint: Any) -> Path | None:
    """The checkpoint's declared event log (checked before any bundle exists), or None."""
    from evalrig.store.checkpoint import history_log

    return history_log(checkpoint)


def copy_history(checkpoint: Any, out: Path) -> str:
    """The checkpoint's declared event log, as sealed, into history.jsonl."""
    src = history_source(checkpoint)
    if src is None:
        return "none"
    write_bytes_atomic(out / HISTORY, src.read_bytes())
    return "declared"


def taskset_ref(taskset: Any) -> TasksetRef:
    return TasksetRef(id=taskset.id, count=len(taskset.tasks), suites=taskset.suites(),
                      fresh_created_at=taskset.fresh_created_at(), fresh_content=taskset.fresh_content())


# -- the run ----------------------------------------------------------------------------


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

        def on_signal(signum: int, frame: Any) -> None:
            self.signal = signum
            self.event.set()

        for s in previous:
            signal.signal(s, on_signal)
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


@dataclass
class Launch:
    trial: Trial
    n: int
    retries_left: int
    spec: Any  # the AttemptSpec, once prepared


@dataclass
class Collected:
    records: list[tuple[Launch, Actual, Result]] = field(default_factory=list)
    ended: list[tuple[Launch, str]] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)


class Run:
    """One process's turn at a bundle: launches attempts and records what they give back.

    Records are written in group commits: every attempt that starts (or ends) in the same
    turn of the loop shares one write and one fsync per file, in the order of the module
    docstring, so that under a slow disk the fsyncs do not serialise the attempts.
    """

    def __init__(self, out: Path, inputs: Inputs, settings: RunSettings, book: TrialBook,
                 reporter: Reporter, hooks: Hooks, stop: Stop, scratch: Path) -> None:
        self.out = out
        self.inputs = inputs
        self.settings = settings
        self.book = book
        self.reporter = reporter
        self.stop = stop
        self.scratch = scratch
        self.spec_factory = hooks.spec_factory or _trial_spec_factory()
        self.work = hooks.work or trial_work()
        factory = hooks.executor_factory or make_executor
        self.executor = factory(settings.executor, settings.jobs, self.work, settings.ray_address)
        self.free_slots = list(range(self.executor.slots - 1, -1, -1))
        self.inflight: dict[str, Launch] = {}
        # No estimate command: the estimate is "none" and needs no worker round trip.
        self.estimate_inline = inputs.checkpoint.spec.agent.estimate is None
        self.ran = 0
        self.t0 = time.monotonic()
        (out / ATTEMPTS_DIR).mkdir(exist_ok=True)
        self.journal = Journal(out, RUN_JSONL)

    def execute(self, trials: list[Trial]) -> None:
        """Launch and record until every trial has run (or a stop was asked for).

        Each turn of the loop has one sync point: the records that must be on disk before
        something else happens (start and estimate lines before an attempt is handed out,
        actuals and results before their end lines) are written, then every file written
        is fsync'd at once, in parallel. End lines are written after that point and synced
        at the next one (or when the loop ends); a crash in between is repaired on resume
        from the result lines, which are already on disk.
        """
        pending = deque(Launch(t, self.book.last_attempt.get(t.trial_id, 0) + 1,
                               self.settings.max_retries, None) for t in trials)
        try:
            while True:
                got = self.collect(self.executor.wait(WAIT_S)) if self.inflight else Collected()
                pending.extendleft(reversed([self._next(i) for i, _, r in got.records
                                             if self._retry(i, r)]))
                if not self.stop.event.is_set():
                    got.jobs += self.launch(pending)
                self.journal.write(layout.ACTUALS_JSONL, [a for _, a, _ in got.records])
                self.journal.write(layout.RESULTS_JSONL, [r for _, _, r in got.records])
                self.journal.sync()
                for job in got.jobs:
                    self.executor.submit(job)
                self.record_ends(got)
                if self.stop.event.is_set():
                    self.executor.cancel()
                if not self.inflight and (not pending or self.stop.event.is_set()):
                    break
        finally:
            if self.inflight:  # leaving on an error: stop the attempts before waiting for them
                self.stop.event.set()
                self.executor.cancel()
            self.executor.close()
            self.journal.close()

    # launching

    def launch(self, pending: deque[Launch]) -> list[Job]:
        """Start lines (and inline estimates) for as many attempts as there are free slots."""
        items = []
        while pending and self.free_slots:
            items.append(self._prepare(pending.popleft()))
        if not items:
            return []
        self.journal.write(layout.ATTEMPTS_JSONL, [self._event("start", i, None) for i in items])
        for i in items:
            self.book.started(i.trial.trial_id, i.n)
            self.inflight[i.spec.attempt_id] = i
        if self.estimate_inline:
            self.journal.write(layout.ESTIMATES_JSONL,
                               [self.work.estimate(i.spec, _estimate_id(), utcnow()) for i in items])
            return [Job("attempt", i.spec) for i in items]
        return [Job("estimate", i.spec, estimate_id=_estimate_id()) for i in items]

    def _prepare(self, item: Launch) -> Launch:
        t = item.trial
        attempt_id = f"{t.task_id}-{t.rep}-{item.n}-{pysecrets.token_hex(4)}"
        spec = self.spec_factory(
            trial_id=t.trial_id, attempt_id=attempt_id, attempt=item.n, rep=t.rep, seed=t.seed,
            inputs_id=t.inputs_id, task=self.inputs.tasks[t.task_id],
            checkpoint=self.inputs.checkpoint, level=self.inputs.level.level,
            slot=self.free_slots.pop(), timeout_scale=self.settings.timeout_scale,
            secrets=self.inputs.secrets, scratch_root=self.scratch,
            evidence_dir=self.out / ATTEMPTS_DIR / attempt_id,
            keep_workspace=self.settings.keep_workspaces,
            verifier_retries=self.settings.max_retries, cancel=self.stop.event,
            interpreter_prefixes=tuple(Path(p) for p in self.settings.interpreter_prefixes),
            allow_network=self.settings.allow_network, allow_hosts=tuple(self.settings.allow_hosts),
        )
        return Launch(t, item.n, item.retries_left, spec)

    def _event(self, kind: str, item: Launch, status: str | None) -> AttemptEvent:
        t = item.trial
        return AttemptEvent(event=kind, trial_id=t.trial_id, attempt_id=item.spec.attempt_id,  # type: ignore[arg-type]
                            attempt=item.n, task_id=t.task_id, rep=t.rep, at=utcnow(),
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
            self.book.result(result.trial_id, result.inputs_id, result.status)
        for _, status in got.ended:
            self.book.ended(status)
        if got.records:
            self.ran += len(got.records)
            self._report()

    @staticmethod
    def _next(item: Launch) -> Launch:
        return Launch(item.trial, item.n + 1, item.retries_left - 1, None)

    def _retry(self, item: Launch, result: Result) -> bool:
        return (result.status == "infra_error" and item.retries_left > 0
                and not self.stop.event.is_set() and not is_verifier_fault(result))

    def _missing_estimate(self, done: Done, item: Launch) -> Estimate:
        t = item.trial
        return Estimate(estimate_id=done.job.estimate_id, attempt_id=item.spec.attempt_id,
                        trial_id=t.trial_id, task_id=t.task_id, rep=t.rep, state="missing",
                        error=f"the rig failed to run the estimate: {done.error}", at=utcnow())

    def _rig_fault(self, done: Done, item: Launch) -> tuple[Actual, Result]:
        """The attempt's own code raised: an infra_error, with what evidence there is."""
        t, spec = item.trial, item.spec
        task = self.inputs.tasks[t.task_id]
        status = "interrupted" if self.stop.event.is_set() else "infra_error"
        actual = Actual(trial_id=t.trial_id, attempt_id=spec.attempt_id, task_id=t.task_id,
                        rep=t.rep, wall_s=done.wall_s, exit_code=None, timed_out=False,
                        usage_source="missing", stdout_bytes=0, stderr_bytes=0,
                        stdout_truncated=False, stderr_truncated=False)
        digest, size = evidence_digest(spec.evidence_dir)
        result = Result(trial_id=t.trial_id, attempt_id=spec.attempt_id, attempt=item.n,
                        task_id=t.task_id, suite=task.suite, rep=t.rep, inputs_id=t.inputs_id,
                        status=status, passed=None, verifier=task.verifier_identity,  # type: ignore[arg-type]
                        sandbox=self.inputs.level.level, containment="subreaper",
                        network=False, canary=Canary(value="", found=False),
                        evidence_digest=digest, evidence_bytes=size,
                        error=f"the rig failed while running the attempt: {done.error}")
        return actual, result

    def _report(self) -> None:
        counts = self.book.counts()
        self.reporter.progress(Progress(
            total=counts.trials, done=counts.scored, passed=counts.passed,
            failed=counts.failed + counts.agent_error + counts.timeout, errors=counts.infra_error,
            attempts=counts.attempts, elapsed_s=time.monotonic() - self.t0, ran=self.ran))


def _estimate_id() -> str:
    return f"e-{pysecrets.token_hex(8)}"


def is_verifier_fault(result: Result) -> bool:
    """A verifier that kept failing on stored evidence: never a reason to re-run the agent (§5)."""
    return result.status == "infra_error" and result.verifier_runs > 0


def evidence_digest(dir: Path) -> tuple[str, int]:
    """The digest of an attempt's evidence as the trial records it (the verifier's own
    output left out: it is re-derived, not evidence)."""
    from evalrig.attempt.verifiers import VERIFIER_DIR
    from evalrig.store.tree import hash_tree

    if not Path(dir).is_dir():
        return sha256_bytes(b""), 0
    td = hash_tree(Path(dir), exclude=frozenset({VERIFIER_DIR}))
    return td.digest, td.bytes


def _trial_spec_factory() -> SpecFactory:
    from evalrig.attempt.trial import AttemptSpec

    return AttemptSpec


# -- the top: start or resume, run, finish ----------------------------------------------


def _bundle_state(out: Path) -> RunManifest | None:
    """The bundle's manifest; None for a new (absent or empty) --out."""
    if (out / MANIFEST).exists():
        return read_json(out / MANIFEST, RunManifest)
    if out.exists():
        if not out.is_dir():
            raise invalid("--out is a file, not a directory", file=out, hint="give a new directory")
        # A run killed before its first manifest leaves only what `_start` writes before
        # it (no records yet): such a directory starts afresh.
        leftovers = [p.name for p in out.iterdir() if not _start_leftover(p)]
        if leftovers:
            raise invalid("--out exists and is not a run bundle (no manifest.json)", file=out,
                          hint="give a new or empty directory for --out")
    return None


def _start_leftover(p: Path) -> bool:
    name = p.name
    if name in (LOCK, LOCK_HOLDER, PROVENANCE, HISTORY) or is_atomic_temp(name):
        return True
    return name in RUN_JSONL and p.stat().st_size == 0


def run_eval(req: RunRequest, home: Path, environ: Mapping[str, str],
             reporter: Reporter | None = None, hooks: Hooks = Hooks()) -> RunSummary:
    """Start or resume the run bundle at `req.out`; returns how it stands when this ends."""
    reporter = reporter or SilentReporter()
    out = Path(req.out)
    if req.resume and not (out / MANIFEST).exists():
        resolve_settings(req, None)  # refuses: nothing to resume (and creates nothing)
    if not (out / MANIFEST).exists():
        # A new run: check every input before the bundle directory exists at all.
        _bundle_state(out)
        resolved = resolve_settings(req, None)
        check_executor(resolved.settings.executor, resolved.settings.ray_address)
        inputs = gather_inputs(resolved, home, "start", environ, out)
        with BundleLock(out, list(req.argv)):
            if (out / MANIFEST).exists():  # another process got here between the checks
                raise invalid("another run created this bundle meanwhile", file=out,
                              hint="run the command again to resume it")
            return _start(out, req, resolved, inputs, reporter, hooks)
    with BundleLock(out, list(req.argv)):
        manifest = _bundle_state(out)
        resolved = resolve_settings(req, manifest)
        check_executor(resolved.settings.executor, resolved.settings.ray_address)
        inputs = gather_inputs(resolved, home, "resume", environ, out)
        assert manifest is not None
        for name in RUN_JSONL:
            cut_torn_tail(out / name)
        rows = read_bundle_rows(out)
        refuse_other_inputs(manifest, inputs, {ev["trial_id"] for ev in rows.attempts}, out)
        return _resume(out, req, manifest, rows, resolved, inputs, reporter, hooks)


def check_executor(kind: str, ray_address: str | None = None) -> None:
    """Refuse an executor that cannot run here before the bundle is touched (exit 4)."""
    from evalrig.run.executors import check_executor as check

    check(kind, ray_address, join=True)


def _start(out: Path, req: RunRequest, r: Resolved, inputs: Inputs, reporter: Reporter,
           hooks: Hooks) -> RunSummary:
    warnings = run_warnings(inputs)
    for w in warnings:
        reporter.warning(w)
    write_json_atomic(out / PROVENANCE, new_provenance(req.argv, warnings))
    history = copy_history(inputs.checkpoint, out)
    for name in RUN_JSONL:
        (out / name).touch()
    book = TrialBook(inputs.plan)
    manifest = RunManifest(
        run_id=f"run-{pysecrets.token_hex(8)}", rig_version=__version__,
        checkpoint=CheckpointRef(id=inputs.sealed.checkpoint_id, name=inputs.sealed.name,
                                 sealed_at=inputs.sealed.sealed_at),
        taskset=taskset_ref(inputs.taskset), repeat=r.repeat, seed=r.seed,
        settings=r.settings.model_copy(update={"interpreters": inputs.interpreters}),
        subset=inputs.plan.subset, policy_pin=inputs.policy_pin, plan_digest=inputs.plan.digest,
        status="running", counts=book.counts(), seal_checks=[inputs.seal], history=history,  # type: ignore[arg-type]
        created_at=utcnow(),
    )
    write_json_atomic(out / MANIFEST, manifest)
    reporter.started(len(inputs.plan), 0)
    return _execute(out, manifest, r, inputs, book, book.to_run(), reporter, hooks, kept=0)


def run_warnings(inputs: Inputs) -> list[str]:
    """The sandbox warnings of this run, said on stderr and kept in the provenance."""
    warnings = [w for w in (inputs.level.warning, inputs.network_warning) if w]
    if inputs.level.level == "process" and os.geteuid() != 0:
        # As root the agent gets an unprivileged uid of the pool (docs/attempts.md).
        warnings.append(
            f"under --sandbox process the agent runs as the rig's own user (uid {os.geteuid()}): "
            f"it can write the rig's home ({inputs.home}) and every bundle that user may "
            "write; run the rig as root (the agent then gets an unprivileged uid of its own) "
            "or use --sandbox bwrap")
    return warnings


def _resume(out: Path, req: RunRequest, manifest: RunManifest, rows: BundleRows, r: Resolved,
            inputs: Inputs, reporter: Reporter, hooks: Hooks) -> RunSummary:
    book = book_from_rows(inputs.plan, rows)
    repaired = repair_dangling(out, rows, book)
    to_run = book.to_run()
    kept = len(inputs.plan) - len(to_run)
    if not to_run and not repaired and manifest.status == "complete":
        # Nothing to do: leave a finished bundle byte for byte as it was.
        return RunSummary(manifest.run_id, manifest.status, manifest.counts, out, False, kept, 0)
    prov = read_json(out / PROVENANCE, Provenance)
    said = run_warnings(inputs)
    new_warnings = [w for w in said if w not in prov.sandbox_warnings]
    for w in said:
        reporter.warning(w)
    prov = prov.model_copy(update={
        "sandbox_warnings": prov.sandbox_warnings + new_warnings,
        "resumes": prov.resumes + [Resume(at=utcnow(), kept=kept, rerun=len(to_run))]})
    write_json_atomic(out / PROVENANCE, prov)
    manifest = manifest.model_copy(update={
        "settings": r.settings.model_copy(update={"interpreters": inputs.interpreters}),
        "taskset": taskset_ref(inputs.taskset),
        "plan_digest": inputs.plan.digest, "status": "running", "counts": book.counts(),
        "seal_checks": manifest.seal_checks + [inputs.seal], "finished_at": None, "files": {}})
    write_json_atomic(out / MANIFEST, manifest)
    reporter.started(len(inputs.plan), kept)
    return _execute(out, manifest, r, inputs, book, to_run, reporter, hooks, kept=kept)


def _execute(out: Path, manifest: RunManifest, r: Resolved, inputs: Inputs, book: TrialBook,
             to_run: list[Trial], reporter: Reporter, hooks: Hooks, kept: int) -> RunSummary:
    stop = Stop()
    scratch = scratch_dir("evalrig-attempts-", keep=r.settings.keep_workspaces)
    try:
        with stop.handlers():
            run = Run(out, inputs, r.settings, book, reporter, hooks, stop, scratch)
            run.execute(to_run)
    finally:
        _flush_removals()
        if r.settings.keep_workspaces and r.settings.executor == "local":
            reporter.warning(f"--keep-workspaces: the attempt workspaces are in {scratch}")
        else:
            _remove_scratch(scratch)
        if r.settings.keep_workspaces and r.settings.executor == "ray":
            from evalrig.run.executors.ray import KEPT_WHERE

            reporter.warning(f"--keep-workspaces: the attempt workspaces are {KEPT_WHERE}")
    stopped = stop.signal is not None
    return _finish(out, manifest, inputs, book, stopped, kept, run.ran)


def scratch_dir(prefix: str, keep: bool) -> Path:
    """Where this run's attempt roots are made: outside every bundle and task set, in the
    place `trial.scratch_base` chooses."""
    from evalrig.attempt.trial import scratch_base

    return Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_base(keep)))


def _remove_scratch(scratch: Path) -> None:
    """The run's scratch directory, whatever an agent left in it (evidence.remove_tree:
    any depth or name length); what cannot be removed stays, and never fails the run."""
    from evalrig.attempt.evidence import remove_tree

    try:
        remove_tree(scratch)
    except OSError:
        pass


def _flush_removals() -> None:
    """Wait for the trial's background removal of attempt roots before the scratch goes."""
    from evalrig.attempt import trial

    flush = getattr(trial, "flush_removals", None)
    if flush is not None:
        flush()


def _finish(out: Path, manifest: RunManifest, inputs: Inputs, book: TrialBook,
            stopped: bool, kept: int, ran: int) -> RunSummary:
    counts = book.counts()
    checks = list(manifest.seal_checks)
    error = None
    if not stopped:
        check, _, error = seal_check(Path(manifest.settings.checkpoint_dir), inputs.home, "end")
        checks.append(check)
    status = "complete" if counts.unscored == 0 else "incomplete"
    final = manifest.model_copy(update={
        "status": status, "counts": counts, "seal_checks": checks, "finished_at": utcnow(),
        "files": file_digests(out)})
    write_json_atomic(out / MANIFEST, final)
    register_finished(inputs.home, final)
    if error is not None:
        raise invalid(f"the checkpoint changed during the run: {error.message}",
                      file=manifest.settings.checkpoint_dir,
                      hint="the run's results are void for a release; restore the checkpoint "
                      "and run again into a new --out")
    interrupted = stopped and status != "complete"
    return RunSummary(final.run_id, status, counts, out, interrupted, kept, ran)


def register_finished(home: Path, m: RunManifest) -> bool:
    """Record a finished run in the home's `runs.jsonl` (docs/security.md): compare
    takes only bundles registered there. False when its digest already was."""
    from evalrig.models.run import RunEntry
    from evalrig.store.bundle import bundle_digest
    from evalrig.store.ledger import register_run

    assert m.status != "running" and m.finished_at is not None, "only a finished run is registered"
    return register_run(home, RunEntry(run_id=m.run_id, bundle_digest=bundle_digest(dict(m.files)),
                                       checkpoint_id=m.checkpoint.id, status=m.status,  # type: ignore[arg-type]
                                       finished_at=m.finished_at))


# -- verify: re-derive a bundle from its evidence ---------------------------------------


@dataclass(frozen=True)
class VerifyReport:
    results: int
    rederived: int
    files: int
    manifest: RunManifest | None = None
    """The manifest as verified (what `verify --register` records)."""


def verify_and_register(dir: Path, home: Path) -> tuple[VerifyReport, bool]:
    """`verify --register`: re-derive every result from evidence (exit 4 on any mismatch,
    nothing registered), then record the bundle in the home's `runs.jsonl` so that compare
    takes it. Idempotent: the bool says whether it was new."""
    report = verify_run(dir)
    assert report.manifest is not None
    return report, register_finished(home, report.manifest)


def verify_run(dir: Path) -> VerifyReport:
    """Re-derive every result from stored evidence and check every digest; exit 4 on any mismatch."""
    from evalrig.store.bundle import check_run_digests, manifest_problems

    dir = Path(dir)
    b = load_run(dir)
    problems = list(check_run_digests(dir))
    for name, line in sorted(b.torn.items()):
        problems.append(Problem(str(dir / name), "torn last line (a crash mid-write); "
                                "resume the run to repair it", line=line))
    problems += evidence_problems(dir, b)
    problems += canary_problems(dir, b)
    problems += manifest_problems(dir, b)
    rederived, verdict_problems = rederive(dir, b)
    problems += verdict_problems
    if problems:
        raise invalid(f"{len(problems)} mismatch(es) in the run bundle", file=dir,
                      problems=problems,
                      hint="the bundle was changed after the run, or a verifier is not "
                      "deterministic; rerun into a new --out to get a trustworthy bundle")
    return VerifyReport(results=len(b.results), rederived=rederived, files=len(b.manifest.files),
                        manifest=b.manifest)


def evidence_problems(dir: Path, b: RunBundle) -> list[Problem]:
    out = []
    for i, r in enumerate(b.results, start=1):
        digest, _ = evidence_digest(dir / ATTEMPTS_DIR / r.attempt_id)
        if digest != r.evidence_digest:
            out.append(Problem(str(dir / layout.RESULTS_JSONL),
                               f"trial {r.trial_id}: evidence of {r.attempt_id} has digest "
                               f"{digest}, the result records {r.evidence_digest}", line=i))
    return out


def canary_problems(dir: Path, b: RunBundle) -> list[Problem]:
    """A result that says the canary was not found where its stored evidence holds it.

    The scan is re-run over what was kept (evidence.rederive_canary); a finding in what
    was not kept (a stream's dropped excess, a link's target) cannot be re-derived, and
    a recorded `found: true` is taken as it is: it can only block a release.
    """
    from evalrig.attempt.canary import needle
    from evalrig.attempt.evidence import rederive_canary

    out = []
    for i, r in enumerate(b.results, start=1):
        if r.canary.found or not r.canary.value:
            continue
        where = rederive_canary(dir / ATTEMPTS_DIR / r.attempt_id, needle(r.canary.value))
        if where:
            out.append(Problem(str(dir / layout.RESULTS_JSONL),
                               f"trial {r.trial_id}: the stored evidence of {r.attempt_id} holds "
                               f"the canary ({', '.join(where[:5])}); the result records it not "
                               "found", line=i))
    return out


def _superseded(b: RunBundle) -> set[str]:
    """Attempt ids of results of an earlier version of their task: a resume after the task
    changed ran the trial again, so their verifier may be gone; they stay on record (and
    under the digests) but are not re-derived with another verifier."""
    latest = {r.trial_id: r.inputs_id for r in b.results}
    return {r.attempt_id for r in b.results if r.inputs_id != latest[r.trial_id]}


def _changed_verifiers(b: RunBundle, tasks: dict[str, Any], path: str,
                       superseded: set[str]) -> tuple[set[str], list[Problem]]:
    """Tasks whose verifier is gone or not the one the results record: refused by name."""
    bad: set[str] = set()
    problems = []
    for r in b.results:
        if r.task_id in bad or r.attempt_id in superseded:
            continue
        task = tasks.get(r.task_id)
        if task is None:
            bad.add(r.task_id)
            problems.append(Problem(path, f"task {r.task_id}: no longer in the task set; "
                                          "its results cannot be re-derived"))
        elif task.verifier_identity != r.verifier:
            bad.add(r.task_id)
            problems.append(Problem(path, f"task {r.task_id}: its verifier changed since the run "
                                          f"(recorded {r.verifier.digest}, now "
                                          f"{task.verifier_identity.digest}); refusing to "
                                          "re-derive with another verifier"))
    return bad, problems


def rederive(dir: Path, b: RunBundle) -> tuple[int, list[Problem]]:
    """Run each scored result's verifier again on its stored evidence and compare."""
    from evalrig.attempt.sandbox import resolve_level
    from evalrig.attempt.verifiers import verify_evidence
    from evalrig.store.tasks import load_taskset

    tasks_dir = Path(b.manifest.settings.tasks_dir)
    tasks = {t.id: t for t in load_taskset(tasks_dir).tasks}
    superseded = _superseded(b)
    bad, problems = _changed_verifiers(b, tasks, str(tasks_dir), superseded)
    available = resolve_level("auto").level
    n = 0
    path = str(dir / layout.RESULTS_JSONL)
    scratch = scratch_dir("evalrig-verify-", keep=False)
    try:
        for i, r in enumerate(b.results, start=1):
            recorded = _recorded_verdict(r)
            if recorded is None or r.task_id in bad:
                continue
            if r.attempt_id in superseded and tasks[r.task_id].verifier_identity != r.verifier:
                continue
            # Judge under the level the attempt was judged under where this machine has it.
            level = r.sandbox if available == "bwrap" else available
            v = verify_evidence(tasks[r.task_id], dir / ATTEMPTS_DIR / r.attempt_id, level, 0,
                                b.manifest.settings.max_retries, scratch)
            n += 1
            now = _verdict_word(v.passed)
            if now != recorded[0]:
                problems.append(Problem(path, f"trial {r.trial_id}: recorded {recorded[0]}, "
                                              f"re-derived {now}", line=i))
            elif v.reward != recorded[1] or (r.status in ("passed", "failed") and v.checks != r.checks):
                problems.append(Problem(path, f"trial {r.trial_id}: recorded reward {recorded[1]} "
                                              f"checks {r.checks}, re-derived reward {v.reward} "
                                              f"checks {v.checks}", line=i))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return n, problems


def _verdict_word(passed: bool | None) -> str:
    return {True: "passed", False: "failed", None: "a verifier fault"}[passed]


def _recorded_verdict(r: Result) -> tuple[str, float | None] | None:
    """What the verifier said at the time, where it judged: (passed|failed, reward)."""
    if r.status in ("passed", "failed"):
        return r.status, r.reward
    if r.status in ("agent_error", "timeout") and r.diagnostic is not None:
        return _verdict_word(r.diagnostic.passed), r.diagnostic.reward
    return None


__all__ = [
    "Hooks",
    "Progress",
    "Reporter",
    "RunRequest",
    "RunSummary",
    "run_eval",
    "verify_run",
    "resolve_settings",
    "setting_differences",
]
