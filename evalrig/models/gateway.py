"""The model gateway's formats (docs/gateway.md for operators, docs/models.md for agent authors).

Hand-written: a checkpoint's `[models]`, a task's `[budget]` (and the driver's and judge's),
and the operator's gateway file (`run --gateway FILE`). Written by the rig: one
`model.jsonl` line per call (`ModelCall`), the manifest's `gateway` facts, and the pricing a
comparison used.

A model is named `<upstream>/<model>`: the upstream is a name of the gateway file's
`[upstreams]` (and the first path segment the agent calls, `/NAME/...`); the model is
the provider's own name, exact, and may itself hold `/` or `:` (`local/qwen3:8b`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from evalrig.models.base import Digest, Record, Strict, without_null, without_nulls
from evalrig.models.inputs import (
    UPSTREAM_NAME_PATTERN,
    Budget,
    HandWritten,
    ModelsSection,
    QualifiedModel,
    Role,
    _unique,
    split_model,
)

__all__ = [  # the hand-written parts live in models/inputs.py (fields of checkpoint.toml and task.toml)
    "Api", "Budget", "CallApi", "CallUsage", "GatewayFacts", "GatewayFile", "ModelCall", "ModelPrice",
    "ModelsSection", "Pricing", "QualifiedModel", "RecordedCall", "Refusal", "ReplayOf", "Role", "Upstream", "UpstreamFacts",
    "split_model",
]

Api = Literal["openai", "anthropic"]
CallApi = Literal["openai-chat", "openai-responses", "anthropic-messages"]
"""The route a call came in on: `/NAME/v1/chat/completions`, `/NAME/v1/responses`, `/NAME/v1/messages`."""


# -- hand-written: the operator's gateway file ------------------------------------------


def _http_url(url: str) -> str:
    if not re.match(r"^https?://[^\s/?#]+(/[^\s?#]*)?$", url):
        raise ValueError(f"{url!r} is not an http(s) URL without query or fragment "
                         "(like https://api.openai.com/v1)")
    return url.rstrip("/")


class Upstream(HandWritten):
    """One `[upstreams.NAME]` of the gateway file."""

    api: Api = Field(description="openai (Chat Completions and Responses) | anthropic (Messages).")
    base_url: Annotated[str, AfterValidator(_http_url)] = Field(
        description="The provider's base URL; an OpenAI one ends in its version (/v1).")
    key_env: str = Field(description="The rig's environment variable holding the key, read when the run "
                         "starts and never written anywhere; \"\" for none.")
    max_concurrent: int = Field(default=16, gt=0, le=10_000, description="Calls in flight to this upstream, "
                                "all attempts of one rig process together.")
    roles: Annotated[list[Role], AfterValidator(_unique)] = Field(
        default_factory=lambda: list[Role](["candidate"]), min_length=1,
        description="Who may call it: candidate, driver, judge (a candidate cannot name the judge's upstream).")
    price_provider: str | None = Field(default=None, min_length=1, description="genai-prices' provider id "
                                       "(default: openai or anthropic by api).")
    timeout_s: float = Field(default=600, gt=0, le=86_400, description="One call's limit, end to end.")

    @field_validator("key_env")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if v and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError(f"{v!r} is not an environment variable name")
        return v


def _finite_price(v: float | None) -> float | None:
    if v is not None and (not math.isfinite(v) or v < 0):
        raise ValueError("must be a finite price >= 0 (USD per million tokens)")
    return v


Price = Annotated[float, Field(ge=0), AfterValidator(_finite_price)]


class ModelPrice(HandWritten):
    """A price per million tokens, for a model genai-prices does not know (or to override it)."""

    model_config = HandWritten.model_config | {"strict": False}  # TOML `0` and `0.0` both mean free

    input: Price
    output: Price
    cache_read: Price | None = None
    cache_write: Price | None = None
    cache_write_1h: Price | None = None
    """A 1-hour cache write (Anthropic); left out: the `cache_write` price."""

    @model_serializer(mode="wrap")
    def _no_null_cache(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_nulls(handler(self), ("cache_read", "cache_write", "cache_write_1h"))


class GatewayFile(HandWritten):
    """`run --gateway FILE`: the operator's upstreams and prices. Never inside a checkpoint
    or a task set; its digest and the price table's version go into the run's manifest."""

    upstreams: dict[Annotated[str, Field(pattern=UPSTREAM_NAME_PATTERN)], Upstream] = Field(min_length=1)
    prices: dict[QualifiedModel, ModelPrice] = Field(default_factory=dict)


# -- written by the rig -------------------------------------------------------------------

UsageSourceOfCall = Literal["provider", "estimated", "replayed"]
Refusal = Literal["model", "budget", "canary", "size", "route", "invalid", "feature", "role", "scan", "replay"]
"""Why the gateway answered a call itself instead of forwarding it (docs/gateway.md)."""


class CallUsage(Strict):
    """Tokens of one call. `input_tokens` counts every input token, cached ones included
    (for Anthropic: input + cache read + cache creation)."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)
    cache_write_1h_tokens: int | None = Field(default=None, ge=0, description=(
        "Of cache_write_tokens, those written to a 1-hour cache (Anthropic's "
        "`cache_creation.ephemeral_1h_input_tokens`), priced at the 1-hour write rate; absent when none."))

    @model_validator(mode="after")
    def _part_of_writes(self) -> CallUsage:
        if self.cache_write_1h_tokens is not None and self.cache_write_1h_tokens > self.cache_write_tokens:
            raise ValueError("cache_write_1h_tokens is a part of cache_write_tokens: it cannot exceed it")
        return self

    @model_serializer(mode="wrap")
    def _no_null_1h(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(handler(self), "cache_write_1h_tokens")


class ModelCall(Record):
    """One line of an attempt's `model.jsonl`: one call through the gateway, by any role."""

    seq: int = Field(ge=0, description="Order of the call's start within the attempt, all roles together.")
    role: Role
    upstream: str | None = Field(description="The upstream named by the route; null when the route named none.")
    model: str | None = Field(description="The model as the request named it (unqualified); null when absent.")
    api: CallApi | None = Field(description="From the route; null for a path that is none of the three.")
    stream: bool
    status: int = Field(ge=100, le=599, description="The HTTP status the caller got.")
    t_start: str = Field(description="The request's start, UTC ISO 8601.")
    t_start_ms: int = Field(ge=0, description="The same, milliseconds since the Unix epoch.")
    t_ms: float = Field(ge=0, description="Milliseconds until the response's end.")
    request_sha256: Digest = Field(description="Over the body as the caller sent it, before anything the rig adds.")
    response_sha256: Digest | None = Field(description="Over the response body as the caller got it; null when none.")
    usage: CallUsage | None = Field(description="Null on refused calls.")
    usage_raw: dict[str, object] | None = Field(default=None, description="The provider's own usage object.")
    usage_source: UsageSourceOfCall | None = Field(description="Null on refused calls.")
    cost_usd: float = Field(ge=0, description="Priced with the run's table as of t_start; 0 when refused.")
    refused: Refusal | None = None
    upstream_fault: bool = Field(default=False, description="The upstream refused (401/403/429/5xx), reset or "
                                 "timed out: the attempt is a fault, never the side's failure.")
    error: str | None = Field(default=None, description="What went wrong, in a few words, when something did.")
    bodies: Literal["kept", "dropped", "digest-only"] = Field(
        default="kept", description="model/<seq>.* kept; dropped (over the evidence cap); digest-only (a canary refusal).")


@dataclass(frozen=True)
class RecordedCall:
    """One recorded exchange of a registered run (its model.jsonl line and model/ body), as
    `run --replay` reads it from the bundle (store/recording.py) and the gateway serves it
    (attempt/gateway/replay.py). Not a file format: never written."""

    role: Role
    request_sha256: str
    status: int
    stream: bool
    response: bytes
    content_type: str
    usage: CallUsage | None
    usage_raw: dict[str, Any] | None
    cost_usd: float


class UpstreamFacts(Strict):
    api: Api
    base_url: str
    price_provider: str | None = Field(default=None, description="genai-prices' provider id its calls "
                                       "were priced as (compare and verify price them so again).")

    @model_serializer(mode="wrap")
    def _no_null_provider(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(handler(self), "price_provider")


class GatewayFacts(Strict):
    """The manifest's `gateway`: what served the run's model calls (never a key)."""

    file_digest: Digest = Field(description="sha256 of the gateway file's bytes.")
    genai_prices: str = Field(description="The installed genai-prices version that priced the calls.")
    prices_digest: Digest = Field(description="sha256 of the canonical JSON of the file's [prices].")
    upstreams: dict[str, UpstreamFacts]
    prices: dict[str, ModelPrice] | None = Field(default=None, description=(
        "The file's [prices] themselves (prices_digest is their digest), so compare and verify can "
        "price the calls again without the file."))

    @model_serializer(mode="wrap")
    def _no_null_prices(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(handler(self), "prices")


class ReplayOf(Strict):
    """The manifest's `replay_of`: the registered run whose recorded calls served this one."""

    run_id: str
    manifest_sha256: Digest


class Pricing(Strict):
    """comparison.json's `pricing`: the one table both sides' calls were priced with."""

    genai_prices: str
    prices_digest: Digest
    as_of: str = Field(description="The candidate run's created_at (UTC ISO 8601).")
    closed: str | None = Field(default=None, description=(
        "Why cost cannot decide between these runs (their [prices] differ, say); absent when it can."))

    @model_serializer(mode="wrap")
    def _no_null_closed(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(handler(self), "closed")
