"""Formats the rig writes for seals and run bundles (docs/release-flow.md, "What a script may read")."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from evalrig.models.base import (
    SIGNED_KEYS,
    ChainedRecord,
    Digest,
    PathId,
    Record,
    Signed,
    Strict,
    TaskId,
    Timestamp,
    without_null,
    without_nulls,
)
from evalrig.models.gateway import GatewayFacts, ReplayOf
from evalrig.models.inputs import Suite

Status = Literal["passed", "failed", "agent_error", "timeout", "infra_error", "interrupted"]
SCORED: frozenset[str] = frozenset({"passed", "failed", "agent_error", "timeout"})
SandboxLevel = Literal["bwrap", "process"]
HashVersion = Literal[1, 2]
"""A seal's hash version (docs/checkpoint.md): the registry line and SEAL.json say which."""
FaultPhase = Literal["start", "agent", "verifier"]
"""Where an infra_error's fault lay (a result's `fault`): before the agent's first input,
after it, or in the verifier on stored evidence (docs/attempts.md)."""


# -- seals -------------------------------------------------------------------------------


Termination = Literal[
    "driver_end", "agent_exit", "max_turns", "max_tool_errors", "budget",
    "agent_timeout", "agent_error", "driver_fault",
]
"""What ended an episode (docs/episodes.md, "How an episode ends"); a result's `termination`."""


class SealEntry(ChainedRecord):
    """One line of `$EVALRIG_HOME/seals.jsonl`; the first line of an id is the one that counts."""

    _optional_keys: ClassVar[tuple[str, ...]] = ("hash_version", "same_as")

    checkpoint_id: Digest
    name: str
    sealed_at: Timestamp
    hash_version: HashVersion | None = Field(
        default=None,
        description="How checkpoint_id was computed (docs/checkpoint.md, \"Sealing and what it covers\"): "
        "2 hashes folders and permission bits; absent on lines an older rig wrote, which are version 1.")
    same_as: Digest | None = Field(
        default=None,
        description="On a version-2 line: the version-1 id this content was registered under first. The "
        "checkpoint keeps that id (runs, decisions and the release log name it); the version-2 hash is "
        "what verifies it from then on.")

    @property
    def version(self) -> HashVersion:
        return self.hash_version or 1


class RunEntry(ChainedRecord):
    """One line of `$EVALRIG_HOME/runs.jsonl`: a run that finished with this home (complete or
    incomplete), or a bundle brought in by `verify --register`. `compare` takes only run
    bundles whose digest is registered here."""

    run_id: PathId
    bundle_digest: Digest = Field(description="sha256 of the canonical JSON of the manifest's files table.")
    checkpoint_id: Digest
    status: Literal["complete", "incomplete"]
    finished_at: Timestamp
    manifest_digest: Digest | None = Field(
        default=None, description="sha256 of the canonical JSON of the run's whole manifest.json without `sig`: "
        "compare and verify refuse a manifest that differs (a relabelled copy is not the registered run). "
        "Absent on lines written before the rig recorded it.")

    @model_serializer(mode="wrap")
    def _no_null_manifest_digest(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_nulls(handler(self), ("prev", "manifest_digest", *SIGNED_KEYS))


class SealFile(Record):
    """`SEAL.json`, the convenience copy inside the checkpoint (never the authority)."""

    checkpoint_id: Digest
    name: str
    sealed_at: Timestamp
    files: int = Field(ge=0)
    bytes: int = Field(ge=0)
    hash_version: HashVersion | None = Field(
        default=None, description="How checkpoint_id was computed; absent in a SEAL.json an older rig wrote (1).")
    same_as: Digest | None = Field(
        default=None, description="The version-1 id the registry first held this content under, if any.")

    @model_serializer(mode="wrap")
    def _no_null(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(without_null(handler(self), "hash_version"), "same_as")


# -- run manifest ------------------------------------------------------------------------


class CheckpointRef(Strict):
    id: Digest
    name: str
    sealed_at: Timestamp = Field(description="From the registry, not SEAL.json.")
    hash_version: HashVersion | None = Field(
        default=None, description="How `id` was computed (the hash version of the registry line it names): "
        "`verify --register` registers the id under this version elsewhere. Absent in a manifest an older "
        "rig wrote (1).")

    @model_serializer(mode="wrap")
    def _no_null(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(handler(self), "hash_version")


class TasksetRef(Strict):
    id: Digest = Field(description="Digest over every task's files.")
    count: int = Field(ge=0)
    suites: dict[Suite, int] = Field(description="Tasks per suite in the whole task set.")
    fresh_created_at: dict[TaskId, Timestamp] = Field(default_factory=dict)
    fresh_content: dict[TaskId, Digest] = Field(
        default_factory=dict,
        description="Every fresh task's content digest (prompt, files and verifier; not its id, tags, limits or "
        "created_at), so a gate can tell a regenerated copy of an old task from a fresh one.",
    )


class InterpreterPin(Strict):
    """A command that resolved under an `--interpreter-prefix`: the program's digest, checked
    again at every start and resume of the run (docs/attempts.md "What runs")."""

    field: Literal["agent.command", "agent.estimate"]
    prefix: str
    program: str = Field(description="The program's real path (every link followed).")
    sha256: Digest


class RunSettings(Strict):
    """Every option of `run`. `OUTCOME_SETTINGS` may not change on resume."""

    timeout_scale: float = Field(gt=0)
    max_retries: int = Field(ge=0)
    sandbox: Literal["auto", "bwrap", "process"]
    secrets: list[str] = Field(default_factory=list, description="Names only, never values.")
    driver_secrets: list[str] | None = Field(default=None, description=(
        "--driver-secret names (drivers' and command verifiers' variables); never values. "
        "Absent when none was given."))
    suites: list[Suite] = Field(default_factory=list, description="--suite filters.")
    task_ids: list[TaskId] = Field(default_factory=list, description="--task filters.")
    tags: list[str] = Field(default_factory=list, description="--tag filters.")
    tasks_dir: str
    checkpoint_dir: str
    policy_file: str | None = None
    jobs: int = Field(ge=1)
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    keep_workspaces: bool = False
    interpreter_prefixes: list[str] = Field(
        default_factory=list, description="--interpreter-prefix: directories bound read-only "
        "for the agent's interpreter (resolved paths).")
    interpreters: list[InterpreterPin] = Field(
        default_factory=list, description="Commands that resolved under an interpreter prefix, "
        "with the program's digest.")
    allow_network: bool = Field(
        default=False, description="--allow-network: a checkpoint or task that says network = true may run."
    )
    allow_hosts: list[str] = Field(
        default_factory=list, description="--allow-host HOST[:PORT] values, normalised and sorted."
    )
    max_cost_usd_per_attempt: float | None = Field(default=None, gt=0, description=(
        "--max-cost-usd-per-attempt: every task's candidate budget in metered USD (the lower of it and "
        "the task's [budget] wins). Absent when not given."))
    max_cost_usd: float | None = Field(default=None, gt=0, description=(
        "--max-cost-usd: no attempt starts once the run's metered spend reaches it. Absent when not given."))
    gateway: str | None = Field(default=None, description=(
        "--gateway (or the defaults file's `gateway`): the model gateway file, absolute. Absent when none."))
    replay: str | None = Field(default=None, description=(
        "--replay: the registered run bundle whose recorded model calls were served, absolute. Absent when none."))

    @model_serializer(mode="wrap")
    def _no_null_driver_secrets(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_nulls(handler(self), ("driver_secrets", "max_cost_usd_per_attempt", "max_cost_usd",
                                            "gateway", "replay"))


MAY_CHANGE_ON_RESUME = frozenset({"jobs", "executor", "ray_address", "keep_workspaces"})


class PolicyPin(Strict):
    name: str
    version: int
    digest: Digest = Field(description="sha256 of the policy file's bytes.")


class SealCheck(Strict):
    phase: Literal["start", "resume", "end"]
    at: Timestamp
    checkpoint_id: Digest | None = Field(description="The hash the directory had at that moment.")
    matched: bool
    message: str | None = None


class RunCounts(Strict):
    trials: int = Field(ge=0)
    scored: int = Field(ge=0)
    passed: int = Field(ge=0)
    failed: int = Field(ge=0)
    agent_error: int = Field(ge=0)
    timeout: int = Field(ge=0)
    infra_error: int = Field(ge=0, description="Attempts that ended infra_error (retries included).")
    interrupted: int = Field(ge=0)
    attempts: int = Field(ge=0)
    unscored: int = Field(ge=0, description="Trials with no scored attempt.")
    final_unscored: int = Field(default=0, ge=0, description="Of those, trials whose last attempt is a "
                                "final unscored one (a fault after the agent's first input): no "
                                "retry or resume runs them again.")


class DefaultsUsed(Strict):
    """Which `run` options a defaults file supplied (the rest came from flags or built-in defaults)."""

    file: str = Field(description="The file, resolved: an evalrig.toml or a pyproject.toml.")
    supplied: list[str] = Field(description="The option names it supplied, sorted (tasks, policy, repeat, jobs, sandbox, gateway).")


class RunManifest(Record, Signed):
    kind: Literal["run"] = "run"
    run_id: PathId
    rig_version: str
    checkpoint: CheckpointRef
    taskset: TasksetRef
    repeat: int = Field(ge=1)
    seed: int = Field(ge=0)
    settings: RunSettings
    subset: bool
    policy_pin: PolicyPin | None
    plan_digest: Digest
    status: Literal["running", "complete", "incomplete"]
    counts: RunCounts
    seal_checks: list[SealCheck]
    history: Literal["declared", "none"] = Field(
        default="none", description="Whether the checkpoint declares [history] log (copied as history.jsonl)."
    )
    created_at: Timestamp
    finished_at: Timestamp | None = None
    files: dict[str, Digest] = Field(
        default_factory=dict, description="At completion: the digest of every other file."
    )
    defaults: DefaultsUsed | None = Field(
        default=None, description="The defaults file that supplied options when the run was made; "
        "absent when none did.")
    gateway: GatewayFacts | None = Field(default=None, description=(
        "The model gateway that served the run's calls (docs/gateway.md); absent: none did."))
    replay_of: ReplayOf | None = Field(default=None, description=(
        "run --replay: the registered run whose recorded calls were served; absent otherwise."))

    @model_serializer(mode="wrap")
    def _no_null_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_nulls(handler(self), ("defaults", "gateway", "replay_of", *SIGNED_KEYS))


class Resume(Strict):
    at: Timestamp
    kept: int = Field(ge=0)
    rerun: int = Field(ge=0)


class Provenance(Record):
    rig_version: str
    python: str
    platform: str
    host: str
    argv: list[str]
    dependencies: dict[str, str]
    sandbox_warnings: list[str] = Field(default_factory=list)
    resumes: list[Resume] = Field(default_factory=list)


# -- per-attempt records -----------------------------------------------------------------


class AttemptEvent(Record):
    """attempts.jsonl: one `start` line and one `end` line per attempt."""

    event: Literal["start", "end"]
    trial_id: str
    attempt_id: PathId
    attempt: int = Field(ge=1, description="1-based attempt number within the trial.")
    task_id: TaskId
    rep: int = Field(ge=0)
    at: Timestamp
    status: Status | None = Field(default=None, description="On `end` lines.")


class Estimate(Record):
    """estimates.jsonl: written and synced before the attempt starts."""

    estimate_id: PathId
    attempt_id: PathId
    trial_id: str
    task_id: TaskId
    rep: int = Field(ge=0)
    state: Literal["valid", "missing", "malformed", "none"] = Field(
        description="none: the checkpoint declares no estimate command."
    )
    p_success: float | None = Field(default=None, ge=0, le=1)
    time_s: tuple[float, float] | None = None
    cost_usd: tuple[float, float] | None = None
    level: float = Field(default=0.8, gt=0, lt=1)
    error: str | None = None
    at: Timestamp
    gateway: GatewayFacts | None = Field(default=None, description=(
        "The model gateway that served the run's calls (docs/gateway.md); absent: none did."))
    replay_of: ReplayOf | None = Field(default=None, description=(
        "run --replay: the registered run whose recorded calls were served; absent otherwise."))

    @model_serializer(mode="wrap")
    def _no_null_gateway(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_nulls(handler(self), ("gateway", "replay_of"))


UsageSource = Literal["reported", "missing", "metered", "replayed"]
"""reported: the agent's own usage.json (shown, never grants); metered: the model gateway
measured the spend itself (docs/gateway.md); replayed: a `run --replay`'s recorded spend
(shown, never grants); missing: no figure."""


SpendSource = Literal["reported", "metered", "replayed"]


class RoleSpend(Strict):
    """One role's spend in one attempt (docs/episodes.md "Spend by role"): `reported` when the
    program wrote it itself (a usage.json, per-turn usage), `metered` when the rig measured it.
    A figure left out stays null, never 0."""

    cost_usd: float | None = Field(default=None, ge=0)
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    source: SpendSource
    calls: int | None = Field(default=None, ge=0, description="Gateway calls (metered or replayed only).")
    estimated: bool | None = Field(default=None, description=(
        "Some call's usage was the rig's own estimate (no usage from the provider): metered only."))

    @model_serializer(mode="wrap")
    def _no_null_gateway_keys(self, handler: SerializerFunctionWrapHandler) -> Any:
        # a reported spend's line is what it was before the gateway (no null calls/estimated)
        return without_nulls(handler(self), ("calls", "estimated"))


class Spend(Strict):
    """Who spent what in one attempt; null where that role wrote nothing. Only `candidate`
    enters compare's cost and efficiency."""

    candidate: RoleSpend | None = Field(
        default=None, description="The agent's out/usage.json, else the sum of its per-turn usage.")
    driver: RoleSpend | None = Field(default=None, description="The episode driver's driver/usage.json.")
    judge: RoleSpend | None = Field(default=None, description="The command verifier's usage.json.")
    reported: RoleSpend | None = Field(default=None, description=(
        "When the gateway metered the candidate: what the agent reported itself, kept beside, never used."))

    @model_serializer(mode="wrap")
    def _no_null_reported(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(handler(self), "reported")


class Actual(Record):
    """actuals.jsonl: what the rig measured of one finished attempt."""

    trial_id: str
    attempt_id: PathId
    task_id: TaskId
    rep: int = Field(ge=0)
    wall_s: float = Field(ge=0)
    cpu_s: float | None = Field(default=None, ge=0)
    peak_rss: int | None = Field(default=None, ge=0, description="Bytes.")
    exit_code: int | None
    timed_out: bool
    cost_usd: float | None = Field(default=None, ge=0)
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    usage_source: UsageSource
    stdout_bytes: int = Field(ge=0, description="Bytes the agent wrote, before capping.")
    stderr_bytes: int = Field(ge=0)
    stdout_truncated: bool
    stderr_truncated: bool
    spend: Spend | None = Field(default=None, description="Spend by role; absent in bundles made before it.")

    @model_serializer(mode="wrap")
    def _no_null_spend(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(handler(self), "spend")


class VerifierIdentity(Strict):
    kind: Literal["exact", "regex", "json", "command"]
    version: str
    digest: Digest = Field(description="Of the verifier's settings and its verifier/ files.")


class Canary(Strict):
    value: str
    found: bool
    where: list[str] = Field(
        default_factory=list,
        description="Where it was found (the first 20): stdout, stderr, stdout+stderr (split "
        "across the two), evidence paths, evidence_index.json, entry names, link targets; or "
        "why the scan is incomplete, which is not clean: 'scan incomplete: decompression "
        "budget', 'scan incomplete: CPU bound'.")


class EvidenceIndexEntry(Strict):
    path: str = Field(description="Relative to the attempt root; cut at 1024 bytes (marked).")
    type: Literal["file", "dir", "link", "fifo", "socket", "device"]
    size: int = Field(ge=0, description="lstat size: a link's is its target's length.")
    kept: bool = Field(description="Copied into the evidence (regular files only).")


class EvidenceIndex(Record):
    """`evidence_index.json` at the root of an attempt's evidence: every entry under the
    attempt root except the checkpoint copy agent/, kept or skipped (the first 100,000)."""

    entries: list[EvidenceIndexEntry]
    truncated: bool = Field(description="More entries than are listed.")


class Diagnostic(Strict):
    """The verifier's verdict on an agent_error attempt: recorded, never scored."""

    passed: bool | None
    reward: float | None


class NetworkConnection(Record):
    """network.jsonl in an attempt's evidence: one line per connection the agent made to the
    egress proxy (docs/security.md). Written only for an attempt that had network."""

    host: str = Field(max_length=255, description="The host asked for, normalised; empty when the request was malformed.")
    port: int | None = Field(default=None, ge=1, le=65535)
    method: str | None = Field(default=None, max_length=16, description="CONNECT, or the plain-HTTP method.")
    allowed: bool = Field(description="The allow-list (--allow-host) let it through.")
    status: int = Field(ge=0, le=599, description="The proxy's answer: 200 opened, 400 malformed, 403 refused, 502 unreachable, 503 too many; 0 none.")
    bytes_up: int = Field(ge=0, description="Bytes from the agent to the host.")
    bytes_down: int = Field(ge=0, description="Bytes from the host to the agent.")
    started_at: Timestamp
    duration_ms: float = Field(ge=0)
    error: str | None = None


class Result(Record):
    """results.jsonl: one line per finished attempt."""

    trial_id: str
    attempt_id: PathId
    attempt: int = Field(ge=1)
    task_id: TaskId
    suite: Suite
    rep: int = Field(ge=0)
    inputs_id: Digest
    status: Status
    passed: bool | None = Field(description="true/false for scored statuses, null otherwise.")
    reward: float | None = Field(default=None, ge=0, le=1)
    checks: dict[str, bool] = Field(default_factory=dict)
    verifier: VerifierIdentity
    verifier_runs: int = Field(default=0, ge=0)
    verifier_usage: dict[str, Any] | None = None
    diagnostic: Diagnostic | None = None
    sandbox: SandboxLevel
    containment: Literal["namespace", "subreaper"]
    leftovers_removed: list[str] = Field(
        default_factory=list,
        description="Under process as root where private mount and IPC namespaces could not be "
        "made: every file, folder and System V IPC object the agent's uid left outside its "
        "attempt root, removed by the rig after the attempt (the first 100).")
    network: bool = Field(description="The attempt could reach the network (a recorded hole).")
    network_hosts: list[str] = Field(default_factory=list, description="host:port of every connection the egress proxy allowed in this attempt, distinct and sorted.")
    canary: Canary
    evidence_digest: Digest
    evidence_bytes: int = Field(ge=0)
    evidence_truncated: bool = False
    evidence_skipped: list[str] = Field(
        default_factory=list,
        description="The first 100 entries skipped and noted (links, FIFOs, devices, reserved "
        "names, unreadable or too deep), each path cut at 256 bytes.")
    evidence_skipped_count: int = Field(default=0, ge=0, description="Every entry skipped and noted.")
    error: str | None = None
    termination: Termination | None = Field(
        default=None, description="What ended an episode (docs/episodes.md); null on single-turn tasks.")
    verifier_untrusted_calls: int | None = Field(
        default=None, ge=0,
        description="Calls the command verifier made to the untrusted-run service (docs/tasks.md); "
        "absent for a verifier that does not declare `untrusted`. A verifier fault after any "
        "call is final: never verified again, by run or --resume.")
    fault: FaultPhase | None = Field(
        default=None, description="On an infra_error, where the fault lay (docs/attempts.md, \"Faults "
        "never help the candidate\"): `start` before the agent received its first input (the trial "
        "runs again as a new attempt, within --max-retries), `agent` after it (a driver fault after "
        "the agent's first frame, an evidence fault: never run again), `verifier` the verifier "
        "faulted on the stored evidence (re-verified, never the agent again). Absent otherwise.")
    final: bool | None = Field(
        default=None, description="true: an unscored attempt that no retry or resume will run or "
        "verify again; its trial stays unscored and counts worst for the candidate in compare. "
        "Absent otherwise.")

    @model_serializer(mode="wrap")
    def _no_null_fault(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(without_null(without_null(handler(self), "fault"), "final"),
                            "verifier_untrusted_calls")

    @property
    def settled_unscored(self) -> bool:
        """A final unscored attempt: its trial is done, unscored (docs/attempts.md)."""
        return self.status == "infra_error" and bool(self.final)
