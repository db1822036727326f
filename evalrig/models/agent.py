"""Files an agent or a command verifier writes for the rig to read (docs/attempts.md,
"Usage", "Estimate" and "Verifiers"): the source of their schemas.

The rig reads them with its own checks first (evalrig.attempt.trial, .verifiers), whose
messages name the field and never echo the value; a document that passes them is then
held as one of these models.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from evalrig.models.base import Strict


class UsageFile(Strict):
    """out/usage.json: the agent's own account of its spend (shown, never trusted for a
    grant). A figure left out stays null, never 0; other keys are ignored."""

    model_config = ConfigDict(extra="ignore")

    cost_usd: float | None = Field(default=None, ge=0)
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)


class RewardFile(Strict):
    """$EVALRIG_VERDICT/reward.json: a command verifier's verdict. Needs `reward` or
    `passed`; passed = the explicit `passed` when given, else reward == 1 and every check
    holds."""

    reward: float | None = Field(default=None, ge=0, le=1)
    checks: dict[str, bool] = Field(default_factory=dict)
    passed: bool | None = None


class EstimateLine(Strict):
    """The one JSON object an estimate command prints on stdout; every key optional."""

    p_success: float | None = Field(default=None, ge=0, le=1)
    time_s: tuple[float, float] | None = Field(default=None, description="[low, high], 0 <= low <= high")
    cost_usd: tuple[float, float] | None = Field(default=None, description="[low, high], 0 <= low <= high")
    level: float | None = Field(default=None, gt=0, lt=1)
