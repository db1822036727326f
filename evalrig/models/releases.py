"""The release log, `$EVALRIG_HOME/releases.jsonl`: what served, and why (docs/release-engineers.md).

One line per event, append-only and hash-chained: each line's `prev` is the bare hex sha256
of the previous line's bytes without its newline, null on the first line (the store,
`evalrig.store.releases`, sets `prev` and `seq`). Four kinds, told apart by `kind`:
`ship`, `tripwire`, `rollback` (automatic, after a failed tripwire, or a person's) and
`alert` (written by `watch`).
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from evalrig.models.base import (
    SIGNED_KEYS,
    ChainHash,
    Digest,
    Record,
    Signed,
    Strict,
    Timestamp,
    without_nulls,
)
from evalrig.models.comparison import PolicyRef, Reason, Verdict
from evalrig.models.inputs import PolicyInvariants, PolicyTripwires, PolicyWatch


class ReleaseEvent(Record, Signed):
    """The fields every event of the release log has (`key`, `sig`, `heads`: docs/security.md)."""

    seq: int = Field(ge=0, description="The event's place in the log, from 0 (its line number - 1).")
    at: Timestamp
    prev: ChainHash | None = Field(
        default=None,
        description="The bare hex sha256 of the previous line's bytes (without its newline); null on the first line.",
    )

    @model_serializer(mode="wrap")
    def _no_null_signature(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_nulls(handler(self), SIGNED_KEYS)


class DecisionRef(Strict):
    path: str = Field(description="The decision file as given to `ship`.")
    digest: Digest = Field(description="sha256 of the decision file's bytes.")


class ShippedCandidate(Strict):
    checkpoint_id: Digest
    name: str = Field(description="The checkpoint's name (checkpoint.toml).")


MAINTENANCE_NOTE = "shipped as maintenance, no win claimed"


class ReliedOn(Strict):
    gate: dict[str, Any] = Field(description="The gate ledger's line of the non-advisory gate that issued the decision.")
    signoff: dict[str, Any] = Field(description="The home's last sign-off of the decision (approving it).")


class ShipEvent(ReleaseEvent):
    """`ship`: a signed, approved decision's candidate put in service."""

    kind: Literal["ship"] = "ship"
    decision: DecisionRef
    verdict: Verdict
    reason: Reason
    candidate: ShippedCandidate
    replaces: Digest | None = Field(
        description="The checkpoint serving before (the comparison's champion on the first ship).")
    policy: PolicyRef = Field(description="The policy that promoted the candidate.")
    tripwires: PolicyTripwires = Field(description="The promoting policy's [tripwires], as declared (or defaulted).")
    watch: PolicyWatch = Field(description="The promoting policy's [watch], as declared (or defaulted).")
    invariants: PolicyInvariants | None = Field(
        default=None, description="The promoting policy's [invariants] (their thresholds judge the release's "
        "tripwires); absent on ship events of decisions that did not record them: the defaults apply.")
    signed_by: str = Field(min_length=1, description="Who approved the decision (its last sign-off in the home).")
    note: str | None = Field(
        default=None, description=f'"{MAINTENANCE_NOTE}" for a promote-maintenance release, else null.')
    relied_on: ReliedOn | None = Field(
        default=None, description="The home's signed lines the ship relied on, as written: every reader "
        "verifies them under the ship's own key. Absent on ship events written before the home signed.")

    @model_serializer(mode="wrap")
    def _no_null_relied_on(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_nulls(handler(self), ("relied_on", *SIGNED_KEYS))


class BundleRef(Strict):
    path: str
    digest: Digest = Field(description="The run bundle's digest (its manifest's, as `compare` registers it).")


class CheckHeld(Strict):
    name: str
    held: bool
    detail: str = Field(default="", description="Why it failed, or what held.")


class TripwireEvent(ReleaseEvent):
    """`tripwire`: the serving champion checked again by a run of the promoting policy's tripwires."""

    kind: Literal["tripwire"] = "tripwire"
    checkpoint_id: Digest
    bundle: BundleRef
    checks: list[CheckHeld]
    held: bool = Field(description="Every check held (an incomplete run does not).")


class RollbackEvent(ReleaseEvent):
    """`rollback`: the serving checkpoint taken out of service for one that served before."""

    kind: Literal["rollback"] = "rollback"
    from_: Digest = Field(alias="from", description="The checkpoint taken out of service.")
    to: Digest = Field(description="The checkpoint put back in service.")
    trigger: Literal["tripwire", "person"]
    by: str = Field(min_length=1, description="The person, or `tripwire` for an automatic rollback.")
    reason: str = Field(min_length=1)
    evidence: int | None = Field(ge=0, description="The seq of the tripwire event that caused it; null for a person's.")

    @model_serializer(mode="wrap")
    def _from_by_its_name(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if isinstance(out, dict) and "from_" in out:
            out["from"] = out.pop("from_")
        return without_nulls(out, SIGNED_KEYS)


AlertKind = Literal["shift", "floor", "stall", "reversal"]
ALERT_KINDS: tuple[AlertKind, ...] = typing.get_args(AlertKind)


class AlertEvent(ReleaseEvent):
    """`alert`: one alert of `watch`, written once per `alert_id`."""

    kind: Literal["alert"] = "alert"
    alert_id: str = Field(min_length=1, description="Stable: the kind, the metric and the first train it covers.")
    alert_kind: AlertKind
    metric: str
    trains: list[str] = Field(description="The trains (short comparison digests) the alert covers, oldest first.")
    detail: str = Field(description="What moved, in words and numbers.")


Event = ShipEvent | TripwireEvent | RollbackEvent | AlertEvent
AnyEvent = Annotated[Event, Field(discriminator="kind")]
class ReleaseLine(RootModel[AnyEvent]):
    """One line of the release log, any kind (`kind` says which); `.root` is the event."""

    model_config = ConfigDict(frozen=True, defer_build=True)


FORMATS: dict[str, type[BaseModel]] = {"release-event": ReleaseLine}
"""Every file format of this module, by name (merged into `evalrig.models.formats()`)."""
