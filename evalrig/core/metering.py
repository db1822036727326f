"""Metered cost from a run's model calls (docs/gateway.md, "Cost that decides").

Pure: `model.jsonl` lines in, costs out. `compare` prices every candidate call of both runs
with ONE table (the genai-prices installed when it runs, with the runs' `[prices]`, which
must be the same on both sides) as of the candidate run's `created_at`, so a price change
between the two runs cannot fake an efficiency win. `verify` prices each call again as of
its own `t_start` with the run's table and checks the line and the attempt's spend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from evalrig.core.pricing import Pricer
from evalrig.models.comparison import FigureSource
from evalrig.models.gateway import GatewayFacts, ModelCall, Pricing

_DEFAULT_PROVIDER = {"openai": "openai", "anthropic": "anthropic"}


def provider_of(facts: GatewayFacts, upstream: str | None) -> str | None:
    """genai-prices' provider id of a call's upstream, as the run priced it."""
    up = facts.upstreams.get(upstream or "")
    if up is None:
        return None
    return up.price_provider or _DEFAULT_PROVIDER[up.api]


def call_cost(line: ModelCall, facts: GatewayFacts, price: Pricer, as_of: datetime) -> float | None:
    """One call's cost with `price` as of `as_of`: 0 for a call without usage (refused), None
    when the table cannot price it."""
    if line.usage is None:
        return 0.0
    provider = provider_of(facts, line.upstream)
    if provider is None or line.model is None:
        return None
    return price(f"{line.upstream}/{line.model}", provider, line.usage, as_of)


class AttemptCost(NamedTuple):
    cost_usd: float | None
    source: FigureSource


def attempt_cost(lines: Sequence[ModelCall], facts: GatewayFacts, price: Pricer, as_of: datetime) -> AttemptCost:
    """The candidate's cost of one attempt, every call priced as of `as_of`: `estimated` when a
    call's usage was the rig's own count (it never grants), else `metered`."""
    costs = []
    estimated = False
    for line in lines:
        if line.role != "candidate":
            continue
        estimated = estimated or line.usage_source == "estimated"
        costs.append(call_cost(line, facts, price, as_of))
    if any(c is None for c in costs):
        return AttemptCost(None, "missing")
    return AttemptCost(math.fsum(c for c in costs if c is not None), "estimated" if estimated else "metered")


def one_table(champion: GatewayFacts | None, candidate: GatewayFacts | None, genai_prices: str,
              as_of: str) -> Pricing | None:
    """The one table compare prices both runs with; None unless a gateway served both runs.
    Its `closed` says why cost cannot decide when the runs' `[prices]` differ."""
    if champion is None or candidate is None:
        return None
    pricing = Pricing(genai_prices=genai_prices, prices_digest=candidate.prices_digest, as_of=as_of)
    if champion.prices_digest != candidate.prices_digest:
        return pricing.model_copy(update={"closed": (
            f"the two runs' gateway files price models differently ([prices] {champion.prices_digest} for the "
            f"champion, {candidate.prices_digest} for the candidate), so no one table prices both; run both "
            "sides with the same [prices]")})
    if candidate.prices is None:
        return pricing.model_copy(update={"closed": (
            "the candidate run's manifest does not keep its [prices], so its calls cannot be priced again")})
    return pricing


def repriced(lines_by_attempt: Mapping[str, Sequence[ModelCall]], facts: GatewayFacts, price: Pricer,
             as_of: datetime) -> dict[str, AttemptCost]:
    """attempt id → its candidate cost with one table (attempts with no line cost 0, metered)."""
    return {attempt: attempt_cost(lines, facts, price, as_of) for attempt, lines in lines_by_attempt.items()}


class CallMismatch(NamedTuple):
    attempt_id: str
    seq: int | None
    recorded: float
    derived: float | None
    role: str = "candidate"
    """Whose spend (where `seq` is None): the role whose lines were summed."""


SPEND_DECIMALS = 10
"""A role's metered spend is recorded rounded to this many decimals of a dollar (the sum of
many float costs carries noise past them)."""


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _close_spend(total: float, recorded: float) -> bool:
    """A spend summed again from its lines against the recorded, rounded one: within one
    unit of the last recorded decimal (a spend of $0.0000187 at a price with more decimals
    than are kept is not a mismatch)."""
    return math.isclose(total, recorded, rel_tol=1e-9, abs_tol=10.0 ** -SPEND_DECIMALS)


def spend_mismatches(attempt_id: str, lines: Sequence[ModelCall], facts: GatewayFacts, price: Pricer,
                     recorded: Mapping[str, float], check_table: bool) -> list[CallMismatch]:
    """What `verify` finds wrong with one attempt's metered cost: a line whose `cost_usd` is not
    its usage priced with the run's table as of its `t_start` (`check_table` False: only
    calls `[prices]` prices, when the installed genai-prices is not the run's), and each
    role's recorded metered spend (`recorded`: role → cost) that is not the sum of that
    role's lines (seq None). `lines` are a run that called its provider (a replay records no
    gateway of its own and is not priced here): a line saying `replayed` there is priced
    like any other, never skipped."""
    out = []
    for line in lines:
        if line.usage is None:
            continue
        if not check_table and f"{line.upstream}/{line.model}" not in (facts.prices or {}):
            continue
        derived = call_cost(line, facts, price, _ts(line.t_start))
        if derived is None or not _close(derived, line.cost_usd):
            out.append(CallMismatch(attempt_id, line.seq, line.cost_usd, derived))
    for role, spent in recorded.items():
        total = math.fsum(line.cost_usd for line in lines if line.role == role)
        if not _close_spend(total, spent):
            out.append(CallMismatch(attempt_id, None, spent, total, role))
    return out


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
