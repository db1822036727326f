"""Comparison, decision, issued, ledger and sign-off formats (docs/gate.md).

A comparison bundle is `manifest.json` (ComparisonManifest), `comparison.json`
(Comparison) and `comparison.md`, with `decisions/` beside them: one Decision per policy
(and exception), `issued.jsonl` (Issued) and `signoffs.jsonl` (SignOff). The gate ledger
`$EVALRIG_HOME/gates.jsonl` holds GateLedgerEntry lines.

Nothing here carries a generated time or a random id except the records that are facts
about an event (Issued, GateLedgerEntry, SignOff): the comparison and the decision are
pure functions of their inputs and byte-deterministic.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from evalrig.models.base import (
    ChainedRecord,
    Digest,
    Record,
    Strict,
    TaskId,
    Timestamp,
    without_null,
)
from evalrig.models.gateway import Pricing
from evalrig.models.inputs import PolicyInvariants, PolicyTripwires, PolicyWatch, Suite
from evalrig.models.run import PolicyPin, SandboxLevel

Verdict = Literal["promote", "promote-maintenance", "keep-champion", "block"]
Reason = Literal["quality", "efficiency", "maintenance", "tie", "inconclusive", "loss", "invariant", "regression"]
Metric = Literal["cost", "wall_s", "cpu_s"]
METRICS: tuple[Metric, ...] = ("cost", "wall_s", "cpu_s")
FigureSource = Literal["metered", "reported", "missing", "mixed", "estimated", "replayed"]
"""Where a side's figures of one metric came from, over the attempts that count: `metered`
(the rig measured every one), `reported` (every one is the agent's own word, its usage.json),
`missing` (none has the figure), `mixed` (any other combination). Only `metered` can grant."""
Rational = str
"""An exact rational written `p/q` (or an integer), e.g. `"67/4096"`."""


# -- comparison.json ---------------------------------------------------------------------


class RunRef(Strict):
    run_id: str
    checkpoint_id: Digest
    bundle_digest: Digest = Field(description="sha256 of the canonical JSON of the run manifest's file table.")


class Integrity(Strict):
    verified_files: int = Field(ge=0, description="File digests of the run manifest that were checked.")
    problems: list[str] = Field(default_factory=list, description="Every digest that did not verify.")
    torn: list[str] = Field(default_factory=list, description="JSONL files ending in a torn line.")

    @property
    def ok(self) -> bool:
        return self.verified_files > 0 and not self.problems and not self.torn


SpendRole = Literal["candidate", "driver", "judge"]
SPEND_ROLES: tuple[SpendRole, ...] = ("candidate", "driver", "judge")


class SpendTotal(Strict):
    """One role's spend over every attempt of a run (retries included): each figure the sum
    over the attempts that gave it, null when none did (docs/episodes.md "Spend by role")."""

    cost_usd: float | None = Field(default=None, ge=0)
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    attempts: int = Field(ge=0, description="Attempts with a figure for this role.")


class SideFacts(Strict):
    """What the invariants need to know about one run."""

    run_id: str
    checkpoint_id: Digest
    status: Literal["running", "complete", "incomplete"]
    subset: bool
    repeat: int = Field(ge=1)
    taskset_suites: dict[Suite, int] = Field(description="Tasks per suite in the whole task set.")
    run_suites: dict[Suite, int] = Field(description="Tasks per suite with a scored trial in this run.")
    trials: int = Field(ge=0)
    scored: int = Field(ge=0, description="Trials whose final attempt is scored.")
    unscored: int = Field(ge=0)
    attempts: int = Field(ge=0, description="Result lines (every finished attempt).")
    infra_errors: int = Field(ge=0, description="Attempts that ended infra_error (retries included).")
    infra_error_rate: float | None = Field(description="infra_errors / attempts; null with no attempts.")
    sandbox: dict[SandboxLevel, int] = Field(description="Attempts per sandbox level, every attempt counted.")
    network_attempts: int = Field(ge=0, description="Attempts that could reach the network (recorded holes).")
    hosts_reached: list[str] = Field(
        default_factory=list,
        description="host:port the egress proxy allowed, over every attempt of the run: distinct, sorted.",
    )
    cost_source: dict[str, int] = Field(
        default_factory=dict,
        description="Attempts that count (the final scored attempt of each trial) by the source of their "
        "cost figure: metered (the rig measured it), reported (the agent's own usage.json), missing.",
    )
    spend: dict[SpendRole, SpendTotal] | None = Field(
        default=None,
        description="Spend by role over every attempt; only the candidate's enters cost and efficiency. "
        "Absent when no attempt recorded spend by role.")
    seal_checks: int = Field(ge=0)
    seal_checks_matched: int = Field(ge=0)
    seal_check_failures: list[str] = Field(default_factory=list)
    registered: bool = Field(description="The checkpoint id is in $EVALRIG_HOME/seals.jsonl.")
    sealed_at: Timestamp | None = Field(description="From the registry (never SEAL.json); null if unregistered.")
    canary_found: int = Field(ge=0, description="Attempts whose canary was found.")
    canary_attempts: list[str] = Field(default_factory=list, description="Their attempt ids (sorted).")
    history: Literal["declared", "none"]
    policy_pin: PolicyPin | None
    integrity: Integrity
    final_unscored: int = Field(
        default=0, ge=0, description="Trials whose last attempt is a final unscored one (a fault after "
        "the agent's first input): no retry or resume runs them again. invariant.complete needs them "
        "within max_infra_error_rate of the planned trials.")
    unscored_counted_worst: list[str] = Field(
        default_factory=list, description="Trials of this run with attempts and no scored one, sorted "
        "(the first 1000): counted worst for the candidate in every suite, a failure on the "
        "candidate's side and a pass on the champion's (docs/statistics.md).")
    replay_of: str | None = Field(default=None, description=(
        "run --replay: the run id whose recorded model calls this run replayed (it never satisfies "
        "invariant.complete: a replay reproduces, it never decides); absent otherwise."))

    @model_serializer(mode="wrap")
    def _no_null_spend(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(without_null(handler(self), "spend"), "replay_of")


class HistoryFacts(Strict):
    """The history check (docs/gate.md, "The history check"), computed by compare from both runs' history.jsonl."""

    champion_declared: bool
    candidate_declared: bool
    champion_lines: int = Field(ge=0)
    candidate_lines: int = Field(ge=0)
    chain_intact: bool | None = Field(description="The candidate's log is an intact prev-chain; null if none.")
    chain_break_line: int | None = Field(default=None, description="1-based line where the chain breaks.")
    champion_prefix: bool | None = Field(description="The champion's log is a byte-prefix of the candidate's.")
    held: bool
    message: str


class PolicyPins(Strict):
    champion: Digest | None
    candidate: Digest | None


class Facts(Strict):
    champion: SideFacts
    candidate: SideFacts
    allow_incomplete: bool = Field(description="compare ran with --allow-incomplete; the gate never promotes on it.")
    both_complete: bool
    tasks_only_champion: list[TaskId] = Field(default_factory=list)
    tasks_only_candidate: list[TaskId] = Field(default_factory=list)
    fresh_created_at: dict[TaskId, Timestamp] = Field(description="Every fresh task's created_at (candidate's task set).")
    fresh_content: dict[TaskId, Digest] = Field(
        default_factory=dict,
        description="Every fresh task's content digest (prompt, files, verifier; not created_at), from the "
        "candidate's manifest; empty for runs made before the rig recorded it.",
    )
    candidate_sealed_at: Timestamp | None = Field(description="The candidate's registered sealed_at.")
    history: HistoryFacts
    policy_pins: PolicyPins


class PExact(Strict):
    one_sided: Rational
    worse: Rational
    two_sided: Rational


class TBounds(Strict):
    alpha: float
    lower: float
    upper: float


class MDE(Strict):
    alpha: float
    power: float
    value: float


class McNemar(Strict):
    better: int = Field(ge=0, description="Tasks the candidate passes by majority and the champion does not.")
    worse: int = Field(ge=0)
    p_two_sided: float
    p_one_sided: float = Field(description="Candidate better.")
    mid_p: float


class SideStats(Strict):
    pass_rate: float | None
    pass_rate_se: float | None
    mean_reward: float | None
    pass_hat_k: dict[str, float | None]
    pass_at_k: dict[str, float | None]
    cost_per_task: float | None = Field(description="Mean over tasks of the mean reported cost; null if any missing.")
    wall_s_per_task: float | None
    cpu_s_per_task: float | None


class Efficiency(Strict):
    """Candidate over champion, per task, geometric mean; null unless every task has both values."""

    ratio: float | None
    upper: float | None = Field(description="Upper one-sided bound at `alpha`.")
    alpha: float
    n: int = Field(ge=0)
    log_mean: float | None = Field(description="Mean of the per-task log ratios (for other alphas).")
    log_sd: float | None = Field(description="Their sample standard deviation (n - 1).")
    missing: int = Field(ge=0, description="Tasks without a finite, positive value on both sides.")
    champion_source: FigureSource | None = Field(
        default=None, description="Where the champion's figures came from; only metered figures can grant. "
        "Null in comparisons written before the rig recorded it (then they never grant).",
    )
    candidate_source: FigureSource | None = Field(default=None, description="The same, for the candidate.")


class TaskRow(Strict):
    task_id: TaskId
    champion_passes: int = Field(ge=0)
    candidate_passes: int = Field(ge=0)
    champion_n: int = Field(ge=0, description="Scored trials.")
    candidate_n: int = Field(ge=0)
    d: float | None = Field(description="candidate rate - champion rate; null when a side has no scored trial.")
    d_exact: Rational | None
    champion_reward: float | None
    candidate_reward: float | None
    champion_cost: float | None
    candidate_cost: float | None
    champion_wall_s: float | None
    candidate_wall_s: float | None
    champion_cpu_s: float | None
    candidate_cpu_s: float | None
    fisher_p_worse: float | None = Field(description="Fisher exact one-sided p of 'candidate worse'.")
    fisher_p_worse_exact: Rational | None
    champion_unscored: int | None = Field(
        default=None, ge=0, description="Of champion_n, the trials left unscored and counted as passes "
        "(worst for the candidate); absent when none.")
    candidate_unscored: int | None = Field(
        default=None, ge=0, description="Of candidate_n, the trials left unscored and counted as "
        "failures; absent when none. `retire` graduates only scored failures.")

    @model_serializer(mode="wrap")
    def _no_null_unscored(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(without_null(handler(self), "champion_unscored"), "candidate_unscored")


class PerSide(Strict):
    champion: int = Field(ge=0)
    candidate: int = Field(ge=0)


class SuiteStats(Strict):
    tasks: int = Field(ge=0, description="Tasks in the suite (on either side, scored or not).")
    paired: int | None = Field(
        default=None, ge=0,
        description="Tasks scored on both sides: the n of every statistic. Less than `tasks` only in an "
        "incomplete or subset comparison; null in comparisons written before it (then `tasks`).",
    )
    mean_d: float | None
    mean_d_exact: Rational | None
    se_d: float | None
    p_one_sided: float | None = Field(description="Sign-flip P(T >= t): the candidate is better.")
    p_worse: float | None = Field(description="Sign-flip P(T <= t): the candidate is worse.")
    p_two_sided: float | None
    p_exact: PExact | None
    better: int = Field(ge=0)
    worse: int = Field(ge=0)
    equal: int = Field(ge=0)
    discordant: int = Field(ge=0)
    t_bounds: TBounds | None
    mde: MDE | None
    mcnemar: McNemar | None
    champion: SideStats
    candidate: SideStats
    efficiency: dict[Metric, Efficiency]
    per_task: list[TaskRow]
    unscored_counted_worst: PerSide | None = Field(
        default=None, description="Per side, the trials of this suite left unscored and counted worst "
        "for the candidate: a failure (reward 0) on the candidate's side, a pass (reward 1) on the "
        "champion's, in every statistic above. Null in comparisons written before it.")


class IntervalCalibration(Strict):
    n: int = Field(ge=0)
    coverage: float | None
    interval_score: float | None


class Calibration(Strict):
    """The reward channel (docs/statistics.md); the gate never reads it."""

    estimates: int = Field(ge=0, description="Final scored attempts with a valid estimate.")
    brier: float | None
    brier_n: int = Field(ge=0)
    time: IntervalCalibration
    cost: IntervalCalibration


class Comparison(Record):
    kind: Literal["comparison"] = "comparison"
    champion: RunRef
    candidate: RunRef
    repeat: int = Field(ge=1)
    seed: int = Field(ge=0)
    taskset_id: Digest
    facts: Facts
    suites: dict[Suite, SuiteStats]
    calibration: dict[Literal["champion", "candidate"], Calibration]
    pricing: Pricing | None = Field(default=None, description=(
        "The one price table both runs' metered model calls were priced with (docs/gateway.md); "
        "absent when neither run was served by a model gateway."))

    @model_serializer(mode="wrap")
    def _no_null_pricing(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(handler(self), "pricing")

    @model_validator(mode="after")
    def _all_suites(self) -> Comparison:
        missing = {"fixed", "fresh", "invariant"} - set(self.suites)
        if missing:
            raise ValueError(f"suites: every comparison has all three suites; missing {sorted(missing)}")
        return self


class ComparisonManifest(Record):
    kind: Literal["comparison"] = "comparison"
    champion: RunRef
    candidate: RunRef
    allow_incomplete: bool
    files: dict[str, Digest] = Field(description="Digest of comparison.json and comparison.md.")
    runs: dict[Literal["champion", "candidate"], str] | None = Field(
        default=None,
        description="Where the two run bundles were when compared (absolute paths), for the report's "
        "trials and evidence; null in comparisons written before it was recorded.",
    )


# -- decisions ---------------------------------------------------------------------------


class RuleResult(BaseModel):
    """One rule of the gate (docs/policy.md): its name, whether it held, and its numbers.

    The numbers are written twice: flat beside `name` and `held` (the first form), and
    as the object `numbers`, so that a script can read them without knowing which keys
    are the rule's own."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    name: str
    held: bool
    says: str = Field(description="What the rule requires, in words.")
    numbers: dict[str, Any] = Field(default_factory=dict, description="The rule's numbers (the same as the flat keys).")

    @model_validator(mode="after")
    def _finite(self) -> RuleResult:
        for key, value in (self.model_extra or {}).items():
            _check_plain(value, key)
        _check_plain(self.numbers, "numbers")
        return self

    def figures(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def _check_plain(value: Any, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path}: non-finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_plain(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_plain(v, f"{path}[{i}]")
    elif not isinstance(value, (str, int, float, bool, type(None))):
        raise ValueError(f"{path}: not a JSON value")


class PolicyRef(Strict):
    name: str
    version: int
    digest: Digest


class CandidateRef(Strict):
    checkpoint_id: Digest
    run_id: str


class ChampionRef(Strict):
    checkpoint_id: Digest
    run_id: str


class Inconclusiveness(Strict):
    """The smallest win the fresh suite could show at the policy's alpha: the minimum
    detectable effect with se_d floored at 1/(k*n) and never below min_discordant/(k*n)."""

    alpha: float
    mde: float | None
    win_margin: float
    tasks: int = Field(ge=0)
    tasks_needed: int | None = Field(
        description="The smallest suite size, at least min_tasks, at which the floored MDE reaches win_margin.")


class Decision(Record):
    kind: Literal["decision"] = "decision"
    verdict: Verdict
    reason: Reason
    summary: str = Field(description="The reason in one sentence.")
    rules: list[RuleResult]
    policy: PolicyRef
    comparison_digest: Digest = Field(description="sha256 of comparison.json's bytes.")
    champion: ChampionRef
    candidate: CandidateRef
    exception: str | None
    advisory: bool
    detectable: Inconclusiveness
    what_would_change: list[str]
    tripwires: PolicyTripwires | None = Field(
        default=None, description="The policy's [tripwires], which `ship` records for the release (absent in "
        "decisions written before policies had them: the defaults apply).")
    watch: PolicyWatch | None = Field(
        default=None, description="The policy's [watch], which `ship` records for the release (absent: the defaults).")
    invariants: PolicyInvariants | None = Field(
        default=None, description="The policy's [invariants], whose thresholds `ship` records for the release's "
        "tripwires (absent in decisions written before: the defaults apply).")
    spend: dict[Literal["champion", "candidate"], dict[SpendRole, SpendTotal]] | None = Field(
        default=None, description="Each side's spend by role (from the comparison), shown in the verdict "
        "file; absent when neither side recorded any.")

    @model_serializer(mode="wrap")
    def _no_null_spend(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(handler(self), "spend")


class Issued(Record):
    """decisions/issued.jsonl: one line each time gate issues a decision."""

    decision_digest: Digest
    decision_file: str
    issued_at: Timestamp


class CurveSides(Strict):
    champion: float | None
    candidate: float | None


class Curve(Strict):
    """What the curves need from one gate (docs/curves.md), beside its verdict in the ledger;
    null where the suite (or the figure) is empty."""

    fixed_pass_rate: CurveSides = Field(description="Pass rate over the fixed suite's trials, each side.")
    fresh_mean_d: float | None = Field(description="The fresh suite's mean per-task difference (candidate - champion).")
    fresh_bounds: tuple[float, float] | None = Field(
        description="[lower, upper] two-sided t bounds of fresh_mean_d at the comparison's alpha.")
    cost_per_task: CurveSides = Field(
        description="Mean cost per task over every scored task of the comparison (all suites), each side; "
        "null when any task lacks a cost figure.")
    public_pass_rate: CurveSides = Field(
        description="Pass rate over the public suite (public benchmarks: reported, read by no rule).")


class ComparisonEntry(ChainedRecord):
    """$EVALRIG_HOME/comparisons.jsonl: every comparison `compare` wrote with this home; `gate` takes
    only a comparison whose digest is here (an edited comparison.json, re-digested, is not)."""

    comparison_digest: Digest = Field(description="sha256 of comparison.json's bytes as compare wrote them.")
    comparison_dir: str
    champion: RunRef
    candidate: RunRef
    at: Timestamp


class GateLedgerEntry(ChainedRecord):
    """$EVALRIG_HOME/gates.jsonl: every gate the rig ran, so re-rolled trains are visible."""

    candidate_id: Digest
    champion_id: Digest
    comparison_digest: Digest
    comparison_dir: str
    policy: PolicyRef
    exception: str | None
    advisory: bool
    verdict: Verdict
    reason: Reason
    decision_digest: Digest
    at: Timestamp
    fresh_content: list[Digest] = Field(
        default_factory=list,
        description="The content digests of the comparison's fresh tasks (distinct, sorted): a later gate of "
        "another candidate whose fresh suite holds one of them is not fresh (invariant.fresh-after-seal).",
    )
    curve: Curve | None = Field(
        default=None,
        description="The numbers the curves need (`evalrig watch`); absent on lines written before the rig "
        "recorded them (the curves skip those and say so).",
    )


class SignOff(ChainedRecord):
    """decisions/signoffs.jsonl and $EVALRIG_HOME/signoffs.jsonl: a person's sign-off; the last one
    of a decision counts, and `check-release` believes only the home's copy."""

    decision_digest: Digest
    decision_file: str
    candidate_checkpoint_id: Digest
    by: str = Field(min_length=1)
    action: Literal["approve", "reject"]
    verdict: Verdict
    agrees_with_gate: bool
    reason: str | None
    open_s: float | None = Field(ge=0, description="Seconds from the first issue of the decision to this sign-off.")
    at: Timestamp


FORMATS: dict[str, type[BaseModel]] = {
    "comparison-manifest": ComparisonManifest,
    "comparison": Comparison,
    "decision": Decision,
    "issued": Issued,
    "comparison-registry-entry": ComparisonEntry,
    "gate-ledger-entry": GateLedgerEntry,
    "signoff": SignOff,
}
"""Every file format of this module, by name (merged into `evalrig.models.formats()`)."""
