"""What a model call cost (docs/gateway.md, "Prices"): genai-prices' table, with the
operator's `[prices]` overrides by qualified model name.

Pure. The table is the snapshot the installed genai-prices package ships, read as data of
the code: its auto-update (`genai_prices.UpdatePrices`, which fetches over the network) is
never started, and this module reads the bundled snapshot itself rather than whatever
snapshot the process may have swapped in, so a price never depends on the network or on
when the rig happened to start. Two rigs with the same genai-prices version and the same
`[prices]` price every call the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from evalrig.core.digest import sha256_json
from evalrig.models.gateway import Api, CallUsage, ModelPrice, Upstream, split_model

if TYPE_CHECKING:
    from genai_prices import Usage
    from genai_prices.data_snapshot import DataSnapshot

__all__ = [
    "Pricer", "genai_prices_version", "is_priced", "price_call", "price_provider", "prices_digest",
    "pricer",
]

Pricer = Callable[[str, str, CallUsage, datetime], float | None]
"""(qualified model, genai-prices provider id, usage, as of) -> USD, or None when unpriced."""

_MILLION = Decimal(1_000_000)
_DEFAULT_PROVIDER: dict[Api, str] = {"openai": "openai", "anthropic": "anthropic"}


def genai_prices_version() -> str:
    """The installed genai-prices package's version: which table priced the calls."""
    import genai_prices

    return str(genai_prices.__version__)


def price_provider(upstream: Upstream) -> str:
    """genai-prices' provider id for an upstream: its `price_provider`, else by its api."""
    return upstream.price_provider or _DEFAULT_PROVIDER[upstream.api]


def prices_digest(overrides: Mapping[str, ModelPrice]) -> str:
    """sha256 of the canonical JSON of `[prices]` (an absent price is left out, so
    `cache_read` unset and a file that never mentions it digest the same)."""
    return sha256_json({name: price.model_dump(mode="json", exclude_none=True)
                        for name, price in overrides.items()})


def _dec(x: float) -> Decimal:
    return Decimal(repr(float(x)))


def _override_cost(price: ModelPrice, usage: CallUsage) -> float:
    """Per million tokens; `input_tokens` counts cached ones too, so the uncached input is
    what remains once the cache reads and writes are taken out; the writes' 1-hour part is
    priced at `cache_write_1h`. A cache price not given is the input price (the 1-hour
    write's: the `cache_write` price)."""
    cache_read = usage.cache_read_tokens
    cache_write = usage.cache_write_tokens
    write_1h = min(usage.cache_write_1h_tokens or 0, cache_write)
    plain = max(usage.input_tokens - cache_read - cache_write, 0)
    p_in = _dec(price.input)
    p_read = _dec(price.cache_read) if price.cache_read is not None else p_in
    p_write = _dec(price.cache_write) if price.cache_write is not None else p_in
    p_write_1h = _dec(price.cache_write_1h) if price.cache_write_1h is not None else p_write
    total = (plain * p_in + cache_read * p_read + (cache_write - write_1h) * p_write + write_1h * p_write_1h
             + usage.output_tokens * _dec(price.output)) / _MILLION
    return float(total)


def _snapshot() -> DataSnapshot:  # imported on first use: genai-prices pulls in an HTTP client at import
    # The package's own bundled table, never a custom or auto-updated one (see the module doc).
    from genai_prices import data_snapshot

    return data_snapshot._bundled_snapshot()


def _table_usage(usage: CallUsage) -> Usage:
    from genai_prices import Usage

    if usage.cache_write_1h_tokens:  # its own rate in the table (cache_write_1h_mtok)
        return Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                     cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens,
                     cache_write_1h_tokens=usage.cache_write_1h_tokens)
    return Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                 cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens)


def _aware(as_of: datetime) -> datetime:
    return as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=UTC)


def price_call(overrides: Mapping[str, ModelPrice], model: str, provider: str, usage: CallUsage,
               as_of: datetime) -> float | None:
    """USD for one call of `model` ("<upstream>/<model>") with `usage`, as of `as_of`;
    None when neither `[prices]` nor the table knows the model."""
    override = overrides.get(model)
    if override is not None:
        return _override_cost(override, usage)
    _, bare = split_model(model)
    try:
        calc = _snapshot().calc(_table_usage(usage), bare, provider, None, _aware(as_of))
    except (LookupError, ValueError, ArithmeticError):
        return None
    return float(Decimal(calc.total_price))


def pricer(overrides: Mapping[str, ModelPrice]) -> Pricer:
    """The gateway's and compare's pricer: `[prices]` first, then genai-prices' table."""
    frozen = dict(overrides)

    def price(model: str, provider: str, usage: CallUsage, as_of: datetime) -> float | None:
        return price_call(frozen, model, provider, usage, as_of)

    return price


_PROBE = CallUsage(input_tokens=1000, output_tokens=1000)


def is_priced(overrides: Mapping[str, ModelPrice], model: str, provider: str, as_of: datetime) -> bool:
    """Whether a call of `model` could be priced: what `run` checks of every model a run may
    call before its first attempt (an unpriced call would make cost unmeasured again)."""
    return price_call(overrides, model, provider, _PROBE, as_of) is not None
