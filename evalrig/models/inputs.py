"""Formats people write: checkpoint.toml, task.toml, the release policy (docs/checkpoint.md, docs/tasks.md, docs/policy.md).

These carry no schema_version (they are hand-written TOML); the rig's own records do.
Loaders (checkpoint.py, tasks.py, policy.py) read the files and turn pydantic errors into
`file:line: field.path: message` problems.
"""

from __future__ import annotations

import math
import re
import typing
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from evalrig.models.base import Strict, TaskId, Timestamp
from evalrig.models.globs import glob_regex


class HandWritten(Strict):
    """A hand-written TOML format: no coercion either, so `network = "yes"` or
    `timeout_s = "60"` is an error (as the published JSON Schema says), not a guess."""

    model_config = ConfigDict(strict=True)


Suite = Literal["fixed", "fresh", "invariant", "public"]
SUITES: tuple[Suite, ...] = ("fixed", "fresh", "invariant", "public")


# -- the model gateway's hand-written parts (docs/gateway.md) ------------------------------

UPSTREAM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
"""An upstream's name: the first segment of the gateway's routes, so no `/`, `.` or `%`."""

_UPSTREAM_NAME = re.compile(UPSTREAM_NAME_PATTERN)
_MODEL_CHARS = re.compile(r"^[\x21-\x7e]{1,256}$")  # printable ASCII, no space


def _qualified_model(name: str) -> str:
    upstream, sep, model = name.partition("/")
    if not sep or not _UPSTREAM_NAME.match(upstream) or not model:
        raise ValueError(f"{name!r} is not <upstream>/<model> (like \"openai/gpt-4.1-mini\"; the "
                         "upstream is a name of the operator's gateway file)")
    if not _MODEL_CHARS.match(model):
        raise ValueError(f"{name!r}: the model name must be printable ASCII without spaces, "
                         "at most 256 characters")
    return name


QualifiedModel = Annotated[str, AfterValidator(_qualified_model)]
"""`<upstream>/<model>`, exact (no patterns): what `allowed` lists and a call resolves to."""


def split_model(qualified: str) -> tuple[str, str]:
    """`("openai", "gpt-4.1-mini")` from `"openai/gpt-4.1-mini"`."""
    upstream, _, model = qualified.partition("/")
    return upstream, model


Role = Literal["candidate", "driver", "judge"]
"""Who made a model call: the agent (candidate), an episode's driver, a command verifier (judge)."""


def _unique(values: list[str]) -> list[str]:
    seen = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{v!r} is listed twice")
        seen.add(v)
    return values




class ModelsSection(HandWritten):
    """`[models]` of checkpoint.toml: the models the agent may call through the gateway.
    Part of the checkpoint's identity (the seal), so a model swap is a new build."""

    allowed: Annotated[list[QualifiedModel], AfterValidator(_unique)] = Field(
        min_length=1, description="\"<upstream>/<model>\", exact; the only models the agent's calls may name.")


class Budget(HandWritten):
    """Bounds on one role's gateway calls in one attempt. A call that would start after a
    bound is reached gets 429 `budget_exhausted`; one in flight finishes."""

    max_cost_usd: float | None = Field(default=None, gt=0, description="Metered cost, USD.")
    max_tokens: int | None = Field(default=None, gt=0, description="Input plus output tokens of forwarded calls.")
    max_calls: int | None = Field(default=None, gt=0, description="Calls forwarded.")



# -- checkpoint.toml ---------------------------------------------------------------------

STARTUP_VARS = frozenset({
    "BASH_ENV", "ENV", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONSTARTUP",
    "PYTHONHOME", "GLIBC_TUNABLES",
})
"""Loader and shell start-up variables a checkpoint's `env` may not set (every `LD_*` too):
each makes code run that is not the command, from a path the checkpoint chose
(docs/attempts.md "The agent's environment")."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def refused_env_name(name: str) -> str | None:
    """Why a checkpoint's env may not hold this variable, or None."""
    if not _ENV_NAME.fullmatch(name):
        return (f"{name!r} is not a variable name (letters, digits and _, not starting "
                "with a digit)")
    if name in STARTUP_VARS or name.startswith("LD_"):
        return (f"{name} is a loader or start-up variable: it would run code that is not "
                "the agent's command (refused: LD_*, " + ", ".join(sorted(STARTUP_VARS - {
                    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"})) + ")")
    return None


def _env_name(name: str) -> str:
    why = refused_env_name(name)
    if why is not None:
        raise ValueError(why)
    return name


def _env_value(value: str) -> str:
    if "\0" in value:
        raise ValueError("holds a NUL character, which no environment variable can carry")
    return value


# A key's error is reported at `agent.env.<KEY>` (evalrig.core.tomlerr), a value's likewise.
EnvName = Annotated[str, AfterValidator(_env_name)]
EnvValue = Annotated[str, AfterValidator(_env_value)]


class AgentSection(HandWritten):
    command: list[str] = Field(min_length=1, description="argv run once per attempt, in agent/.")
    estimate: list[str] | None = Field(
        default=None, min_length=1, description="argv run before the attempt; prints one JSON object."
    )
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict,
        description="Pinned settings; part of identity. Names are [A-Za-z_][A-Za-z0-9_]*; "
        "loader and start-up variables (LD_*, BASH_ENV, ENV, PYTHONSTARTUP, PYTHONHOME, "
        "GLIBC_TUNABLES) are refused.",
    )
    network: bool = Field(default=False, description="The agent may reach the network.")


class HistorySection(HandWritten):
    log: str | None = Field(default=None, description="Path of the agent's append-only event log.")

    @field_validator("log")
    @classmethod
    def _relative(cls, v: str | None) -> str | None:
        if v is not None and (v.startswith("/") or ".." in v.split("/")):
            raise ValueError("must be a path inside the checkpoint (relative, no '..')")
        return v


class CheckpointFile(HandWritten):
    name: str = Field(min_length=1)
    agent: AgentSection
    history: HistorySection = Field(default_factory=HistorySection)
    models: ModelsSection | None = Field(
        default=None, description="The models the agent may call through the model gateway (docs/gateway.md); "
        "absent: it may call none.")


# -- task.toml ---------------------------------------------------------------------------


class ExactVerifier(HandWritten):
    kind: Literal["exact"]
    expected: str
    version: str = "1"


class RegexVerifier(HandWritten):
    kind: Literal["regex"]
    pattern: str
    version: str = "1"

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        import re

        try:
            re.compile(v)
        except re.error as e:
            raise ValueError(f"does not compile ({e})") from None
        return v


def _finite(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, dict):
        return all(_finite(x) for x in v.values())
    if isinstance(v, list):
        return all(_finite(x) for x in v)
    return True


class JsonVerifier(HandWritten):
    kind: Literal["json"]
    expected: Any
    version: str = "1"

    @field_validator("expected")
    @classmethod
    def _no_nan(cls, v: Any) -> Any:
        # out/answer.json cannot hold nan or inf (JSON has neither): such a task never passes.
        if not _finite(v):
            raise ValueError("must hold only finite numbers (JSON has no nan or inf)")
        return v


# Sane ranges of the limits (docs/attempts.md): a limit outside them validates nowhere,
# rather than breaking every attempt at run time.
MAX_SECONDS = 7 * 24 * 3600
"""One week: no attempt or verifier limit is longer."""
MAX_BYTES = 1 << 40
"""1 TiB: no byte cap is larger."""
MAX_MEMORY_MB = MAX_BYTES >> 20
"""The memory limit in MiB that is MAX_BYTES; the rig sets it in bytes (RLIMIT_AS)."""
MAX_PROCESSES = 1 << 22
"""Linux's largest pid_max (PID_MAX_LIMIT): no process-count limit above it means anything."""


class CommandVerifier(HandWritten):
    kind: Literal["command"]
    command: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=60, gt=0, le=MAX_SECONDS)
    network: bool = False
    secrets: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        default_factory=list, description="run --driver-secret names handed to the verifier (a judge's model key).")
    version: str = "1"
    untrusted: bool = Field(default=False, description=(
        "The verifier runs the agent's code through $EVALRIG_RUN_UNTRUSTED (the rig's "
        "untrusted-run service); `run` refuses it where a sandbox would run as the rig's own uid."))
    untrusted_timeout_s: float = Field(default=10, gt=0, le=MAX_SECONDS, description=(
        "Each untrusted call's wall-clock limit, scaled by --timeout-scale (exit 124 past it)."))
    models: bool = Field(default=False, description="The verifier reaches the model gateway (role judge).")
    models_allowed: Annotated[list[QualifiedModel], AfterValidator(_unique)] = Field(
        default_factory=list, description="The models its calls may name, \"<upstream>/<model>\".")
    budget: Budget | None = Field(default=None, description="Bounds on its gateway calls per attempt.")


VerifierSpec = Annotated[
    ExactVerifier | RegexVerifier | JsonVerifier | CommandVerifier, Field(discriminator="kind")
]


class Resources(HandWritten):
    cpus: float = Field(default=1, gt=0, description="CPUs one attempt needs (for schedulers).")
    memory_mb: int = Field(default=4096, gt=0, le=MAX_MEMORY_MB, description="Address-space limit of the agent.")
    max_processes: int = Field(default=256, gt=0, le=MAX_PROCESSES, description="Process-count limit (bwrap uid).")


def _inside_attempt_root(pattern: str) -> str:
    import re


    if not pattern or pattern.startswith("/") or ".." in pattern.split("/"):
        raise ValueError("must be a glob relative to the attempt root (like work/**/*.py; "
                         "not absolute, no '..')")
    try:
        glob_regex(pattern)
    except re.error as e:  # "[z-a]": a bracket range the evidence walk could never match with
        raise ValueError(f"{pattern!r} does not compile as a glob ({e})") from None
    return pattern


EvidenceGlob = Annotated[str, AfterValidator(_inside_attempt_root)]


# -- task.toml [episode] -------------------------------------------------------------------

class EpisodeSection(HandWritten):
    """`[episode]` of task.toml: the driver and the bounds (docs/episodes.md)."""

    driver: list[str] = Field(min_length=1, description="Started in driver/, on the rig's side.")
    max_turns: int = Field(default=30, gt=0, le=1_000_000, description="Assistant messages; reaching it ends the episode.")
    max_tool_errors: int = Field(default=10, gt=0, le=1_000_000,
                                 description="Tool messages the driver marked as errors; reaching it ends the episode.")
    turn_timeout_s: float = Field(default=120, gt=0, le=MAX_SECONDS, description="The agent's time to answer one delivery.")
    driver_timeout_s: float = Field(default=60, gt=0, le=MAX_SECONDS, description="The driver's time to answer one message.")
    max_cost_usd: float | None = Field(default=None, gt=0,
                                       description="The candidate's per-turn reported spend, summed; reaching it ends the episode.")
    network: bool = Field(default=False, description="The driver may reach the network (granted like the agent's).")
    secrets: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(default_factory=list,
                               description="run --driver-secret names handed to the driver.")
    models: bool = Field(default=False, description="The driver reaches the model gateway (role driver).")
    models_allowed: Annotated[list[QualifiedModel], AfterValidator(_unique)] = Field(
        default_factory=list, description="The models its calls may name, \"<upstream>/<model>\".")
    budget: Budget | None = Field(default=None, description="Bounds on its gateway calls per attempt.")


class TaskFile(HandWritten):
    """task.toml after the loader filled `id` and `suite` from the folder names."""

    id: TaskId
    suite: Suite
    # lax here alone: TOML gives a datetime, a JSON copy of the model an ISO string
    created_at: Timestamp | None = Field(default=None, strict=False)
    tags: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=60, gt=0, le=MAX_SECONDS)
    max_output_bytes: int = Field(default=1_048_576, ge=0, le=MAX_BYTES)
    max_evidence_bytes: int = Field(default=67_108_864, gt=0, le=MAX_BYTES)
    network: bool = False
    evidence: list[EvidenceGlob] = Field(
        default_factory=list, description="Extra files kept as evidence (globs; out/ is always kept)."
    )
    resources: Resources = Field(default_factory=Resources)
    verifier: VerifierSpec
    episode: EpisodeSection | None = Field(
        default=None, description="A conversation with a driver (docs/episodes.md); absent: one prompt, one answer.")
    budget: Budget | None = Field(
        default=None, description="Bounds on the candidate's gateway calls per attempt (docs/gateway.md).")

    @model_validator(mode="after")
    def _fresh_dated(self) -> TaskFile:
        if self.suite == "fresh" and self.created_at is None:
            raise ValueError("created_at: required for fresh tasks (UTC, e.g. 2026-12-01T10:00:00.000000Z)")
        return self


# -- policy ------------------------------------------------------------------------------

InvariantCheck = Literal[
    "complete",
    "sealed",
    "isolated",
    "policy-pinned",
    "fresh-after-seal",
    "no-secret-leak",
    "history-preserved",
    "bundle-integrity",
    "invariant-suite",
]
INVARIANT_CHECKS: tuple[InvariantCheck, ...] = typing.get_args(InvariantCheck)
"""Every invariant the gate knows, in the order it applies and reports them: the one list the
policy's `[invariants] checks`, the gate and the policy schema read (docs/gate.md)."""
Alpha = Annotated[float, Field(gt=0, lt=1)]
Rate = Annotated[float, Field(ge=0, le=1)]
Margin = Annotated[float, Field(ge=0)]


def _all_checks() -> list[InvariantCheck]:
    return list(INVARIANT_CHECKS)


class PolicyInvariants(HandWritten):
    checks: list[InvariantCheck] = Field(default_factory=_all_checks)
    max_infra_error_rate: Rate = 0.10
    allow_network: bool = Field(
        default=False,
        description="Whether attempts that had network (the operator's --allow-network) may promote: "
        "invariant.isolated then lists the hosts reached instead of failing.",
    )


class PolicyFixed(HandWritten):
    alpha: Alpha = 0.05
    stable_min_rate: Rate = 0.9
    aggregate_alpha: Alpha = 0.02


class PolicyFresh(HandWritten):
    min_tasks: int = Field(default=20, ge=0)
    min_discordant: int = Field(default=6, ge=0)
    alpha: Alpha = 0.025
    win_margin: Margin = 0.05
    noninferiority_margin: Margin = 0.05
    efficiency_metric: Literal["cost", "wall_s", "cpu_s"] = "cost"
    efficiency_ratio: Annotated[float, Field(gt=0, le=1)] = 0.90


TripwireCheck = Literal["complete", "sealed", "isolated", "no-secret-leak", "bundle-integrity", "invariant-suite"]
TRIPWIRE_CHECKS: tuple[TripwireCheck, ...] = typing.get_args(TripwireCheck)
"""The invariants a tripwire run can check on the serving champion alone (docs/policy.md,
"Tripwires"): the gate's, less those that need a second run or a train."""


def _default_tripwire_checks() -> list[TripwireCheck]:
    return ["sealed", "isolated", "no-secret-leak", "invariant-suite"]


class PolicyTripwires(HandWritten):
    """[tripwires]: what `tripwire` checks on the serving champion after it ships."""

    suite: Suite = Field(default="invariant", description="The suite of tasks a tripwire run uses.")
    checks: list[TripwireCheck] = Field(
        default_factory=_default_tripwire_checks, min_length=1,
        description="The checks; any one failing (or an incomplete run) rolls back.")


class PolicyWatch(HandWritten):
    """[watch]: the thresholds of `watch`'s alerts over the trains and the release log."""

    shift_window: int = Field(default=4, ge=1, description="Trains per window of the shift rule.")
    shift_min: Rate = Field(
        default=0.05, description="A pass-rate mean moved this much between the last two full windows: shift.")
    shift_min_cost_ratio: float = Field(
        default=1.25, gt=1, description="Cost per task moved by this factor between the two windows: shift.")
    floor_fixed_pass_rate: Rate = Field(
        default=0.80, description="The serving champion's fixed pass rate below this ...")
    floor_trains: int = Field(default=3, ge=1, description="... this many trains in a row: floor.")
    stall_trains: int = Field(
        default=6, ge=1, description="No promote (a win; maintenance does not count) in this many trains: stall.")
    reversal_window: int = Field(
        default=6, ge=2, description="Two rollbacks within this many release events: reversal.")


def _described(text: str) -> str:
    if not text.strip():
        raise ValueError("needs a description: say what the exception waives")
    return text


# Checked per value, so that the error's path names the exception (`exceptions.NAME`).
ExceptionText = Annotated[str, AfterValidator(_described)]


class PolicyFile(HandWritten):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    version: int = Field(ge=1)
    invariants: PolicyInvariants = Field(default_factory=PolicyInvariants)
    fixed: PolicyFixed = Field(default_factory=PolicyFixed)
    fresh: PolicyFresh = Field(default_factory=PolicyFresh)
    exceptions: dict[str, ExceptionText] = Field(
        default_factory=dict, description="Name → what the exception waives (--exception NAME)."
    )
    tripwires: PolicyTripwires = Field(default_factory=PolicyTripwires)
    watch: PolicyWatch = Field(default_factory=PolicyWatch)

    @field_validator("exceptions")
    @classmethod
    def _exception_names(cls, v: dict[str, str]) -> dict[str, str]:
        import re

        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
                raise ValueError(f"exception name {name!r} must match [A-Za-z0-9._-]+")
        return v


class RunDefaultsFile(Strict):
    """`evalrig.toml` in the working directory, or `[tool.evalrig]` in its `pyproject.toml`:
    defaults for `run` options a release script would otherwise repeat (docs/release-flow.md,
    "Defaults from a file"). A flag given on the command line wins; paths are relative to
    the file's folder."""

    tasks: str | None = Field(default=None, description="Default --tasks.")
    policy: str | None = Field(default=None, description="Default --policy.")
    repeat: int | None = Field(default=None, ge=1, description="Default --repeat.")
    jobs: int | None = Field(default=None, ge=1, description="Default --jobs.")
    sandbox: Literal["auto", "bwrap", "process"] | None = Field(default=None, description="Default --sandbox.")
    gateway: str | None = Field(default=None, description="Default --gateway (the model gateway's file).")
