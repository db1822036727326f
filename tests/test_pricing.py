"""core/pricing.py: genai-prices' bundled table and the operator's [prices] (docs/gateway.md, "Prices")."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from evalrig.core import pricing
from evalrig.models.gateway import CallUsage, ModelPrice

AS_OF = datetime(2026, 6, 1, tzinfo=UTC)
MTOK = CallUsage(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=500_000)


def test_table_prices_a_known_model_with_cached_input_at_the_cache_price() -> None:
    # gpt-4.1-mini: $0.40 input, $0.10 cache read, $1.60 output per million tokens;
    # input_tokens counts the cached ones too, so 0.5M at 0.40 + 0.5M at 0.10 + 1M at 1.60
    price = pricing.pricer({})
    assert price("openai/gpt-4.1-mini", "openai", MTOK, AS_OF) == pytest.approx(1.85)


def test_unknown_model_is_unpriced() -> None:
    price = pricing.pricer({})
    assert price("openai/no-such-model-xyz", "openai", MTOK, AS_OF) is None
    assert price("local/gpt-4.1-mini", "no-such-provider", MTOK, AS_OF) is None
    assert not pricing.is_priced({}, "openai/no-such-model-xyz", "openai", AS_OF)
    assert pricing.is_priced({}, "anthropic/claude-haiku-4-5", "anthropic", AS_OF)


def test_override_by_qualified_name_wins_and_cache_defaults_to_input_price() -> None:
    overrides = {"local/qwen3:8b": ModelPrice(input=1, output=2),
                 "openai/gpt-4.1-mini": ModelPrice(input=10, output=20, cache_read=5, cache_write=7)}
    price = pricing.pricer(overrides)
    usage = CallUsage(input_tokens=1_000_000, output_tokens=1_000_000,
                      cache_read_tokens=250_000, cache_write_tokens=250_000)
    # no cache prices: every input token at the input price
    assert price("local/qwen3:8b", "openai", usage, AS_OF) == pytest.approx(1 + 2)
    # 0.5M plain at 10, 0.25M read at 5, 0.25M written at 7, 1M out at 20
    assert price("openai/gpt-4.1-mini", "openai", usage, AS_OF) == pytest.approx(5 + 1.25 + 1.75 + 20)
    assert pricing.is_priced(overrides, "local/qwen3:8b", "openai", AS_OF)
    assert price("local/qwen3:8b", "openai", CallUsage(input_tokens=0, output_tokens=0), AS_OF) == 0


def test_prices_digest_is_canonical() -> None:
    a = pricing.prices_digest({"x/a": ModelPrice(input=1, output=2), "x/b": ModelPrice(input=0, output=0)})
    b = pricing.prices_digest({"x/b": ModelPrice(input=0.0, output=0.0), "x/a": ModelPrice(input=1.0, output=2.0)})
    assert a == b and a.startswith("sha256:")
    assert a != pricing.prices_digest({"x/a": ModelPrice(input=1, output=2)})
    assert pricing.prices_digest({}) != a


def test_version_is_the_installed_package() -> None:
    from importlib.metadata import version

    assert pricing.genai_prices_version() == version("genai-prices")


def test_pricing_reads_the_bundled_snapshot_only() -> None:
    # a snapshot swapped in (what genai-prices' auto-update does after a fetch) changes nothing,
    # and pricing starts no updater thread
    from genai_prices import data_snapshot, update_prices

    data_snapshot.set_custom_snapshot(data_snapshot.DataSnapshot(providers=[], from_auto_update=True))
    try:
        price = pricing.pricer({})
        assert price("openai/gpt-4.1-mini", "openai", MTOK, AS_OF) == pytest.approx(1.85)
    finally:
        data_snapshot.set_custom_snapshot(None)
    assert update_prices._shared_updater.thread is None


def test_one_hour_cache_writes_are_priced_at_the_one_hour_rate() -> None:
    # claude-sonnet-4-5 in the table: $3 input, $3.75 a 5-minute write, $6 a 1-hour write, $15
    # output; 10 plain input tokens, 100,000 written for 1 hour, 5 out (gwe2e repro-04: the
    # provider bills 0.600105, the rig metered 0.375105)
    price = pricing.pricer({})
    written = CallUsage(input_tokens=100_010, output_tokens=5, cache_write_tokens=100_000)
    assert price("anthropic/claude-sonnet-4-5", "anthropic", written, AS_OF) == pytest.approx(0.375105)
    one_hour = written.model_copy(update={"cache_write_1h_tokens": 100_000})
    assert price("anthropic/claude-sonnet-4-5", "anthropic", one_hour, AS_OF) == pytest.approx(0.600105)
    part = written.model_copy(update={"cache_write_1h_tokens": 40_000})  # 60,000 for 5 minutes
    assert price("anthropic/claude-sonnet-4-5", "anthropic", part, AS_OF) == pytest.approx(
        (10 * 3 + 60_000 * 3.75 + 40_000 * 6 + 5 * 15) / 1e6)
    # [prices]: cache_write_1h, else the cache_write price, else the input price
    for override, per_mtok in ((ModelPrice(input=3, output=15, cache_write=3.75, cache_write_1h=6), 6),
                               (ModelPrice(input=3, output=15, cache_write=3.75), 3.75),
                               (ModelPrice(input=3, output=15), 3)):
        assert pricing.pricer({"x/m": override})("x/m", "anthropic", one_hour, AS_OF) == pytest.approx(
            (10 * 3 + 100_000 * per_mtok + 5 * 15) / 1e6)


def test_the_one_hour_part_is_additive_and_bounded() -> None:
    # absent when none, so every line and every [prices] without it keeps its bytes and digest
    assert "cache_write_1h_tokens" not in CallUsage(input_tokens=1, output_tokens=1).model_dump(mode="json")
    assert pricing.prices_digest({"x/m": ModelPrice(input=1, output=2)}) == pricing.prices_digest(
        {"x/m": ModelPrice(input=1, output=2, cache_write_1h=None)})
    with pytest.raises(ValueError, match="part of cache_write_tokens"):
        CallUsage(input_tokens=10, output_tokens=0, cache_write_tokens=5, cache_write_1h_tokens=6)


def test_anthropic_usage_keeps_the_one_hour_part_streamed_and_not() -> None:
    from evalrig.attempt.gateway.usage import StreamUsage, from_object

    raw = {"input_tokens": 10, "cache_creation_input_tokens": 100_000, "cache_read_input_tokens": 0,
           "output_tokens": 5, "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 100_000}}
    got = from_object("anthropic-messages", raw)
    assert got is not None and (got.input_tokens, got.cache_write_tokens, got.cache_write_1h_tokens) == (
        100_010, 100_000, 100_000)
    s = StreamUsage("anthropic-messages")
    start = {"type": "message_start", "message": {"usage": dict(raw, output_tokens=1)}}
    s.feed(b"event: message_start\ndata: " + json.dumps(start).encode() + b"\n\n")
    s.feed(b'event: message_delta\ndata: {"type": "message_delta", "usage": {"output_tokens": 5}}\n\n')
    assert s.usage() == got
    # OpenAI: reasoning tokens are inside completion_tokens, so they are priced as output
    o = from_object("openai-chat", {"prompt_tokens": 10, "completion_tokens": 50,
                                    "completion_tokens_details": {"reasoning_tokens": 40}})
    assert o is not None and o.output_tokens == 50


def test_compare_and_verify_reprice_a_recorded_one_hour_write_the_same() -> None:
    """core/metering.py prices a model.jsonl line again from its recorded usage: a line
    written with the 1-hour part reads back and prices as the gateway priced it."""
    from evalrig.core import metering
    from evalrig.models.gateway import GatewayFacts, ModelCall, UpstreamFacts

    usage = CallUsage(input_tokens=100_010, output_tokens=5, cache_write_tokens=100_000, cache_write_1h_tokens=100_000)
    line = ModelCall(seq=0, role="candidate", upstream="anthropic", model="claude-sonnet-4-5",
                     api="anthropic-messages", stream=False, status=200, t_start="2026-06-01T00:00:00Z",
                     t_start_ms=0, t_ms=1.0, request_sha256="sha256:" + "0" * 64, response_sha256=None,
                     usage=usage, usage_raw=None, usage_source="provider", cost_usd=0.600105, refused=None,
                     upstream_fault=False, error=None, bodies="kept")
    again = ModelCall.model_validate_json(line.model_dump_json())
    facts = GatewayFacts(file_digest="sha256:" + "1" * 64, genai_prices=pricing.genai_prices_version(),
                         prices_digest=pricing.prices_digest({}),
                         upstreams={"anthropic": UpstreamFacts(api="anthropic", base_url="https://api.anthropic.com")},
                         prices={})
    cost = metering.call_cost(again, facts, pricing.pricer({}), AS_OF)
    assert cost == pytest.approx(0.600105)


def test_openai_audio_tokens_make_the_call_estimated_not_priced_as_text() -> None:
    from evalrig.attempt.gateway.usage import from_object

    text = {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}}
    assert from_object("openai-chat", text) == CallUsage(input_tokens=10, output_tokens=5)
    for where in ("prompt_tokens_details", "completion_tokens_details"):
        heard = json.loads(json.dumps(text))
        heard[where]["audio_tokens"] = 7
        assert from_object("openai-chat", heard) is None, where
