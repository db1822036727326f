"""The model gateway (docs/gateway.md): the official `openai` and `anthropic` SDKs and raw
HTTP drive it over real loopback sockets; the stand-in provider (examples/model-standin/)
runs as a real process behind it and logs what reached it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from evalrig.attempt.gateway import Gateway
from tests.gateway_kit import Opened, Standin, gateway, open_session, standin

ALLOWED = ("openai/gpt-test", "anthropic/claude-test", "openai/no-usage", "anthropic/no-usage",
           "openai/cached-7", "anthropic/cached-5+written-3", "openai/slow-400", "anthropic/slow-400",
           "openai/fail-500", "openai/fail-401", "openai/fail-429", "anthropic/fail-429", "openai/reset",
           "openai/slow-5000", "openai/half-stream", "anthropic/half-stream", "openai/slow-300",
           "judgeonly/gpt-test")
AGENT_TOKEN = "evalrig-attempt-token-xyz"


@pytest.fixture(scope="module")
def stand(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    with standin(tmp_path_factory.mktemp("standin")) as s:
        yield s


@pytest.fixture(scope="module")
def gw(stand: Standin) -> Iterator[Gateway]:
    g = gateway(stand)
    yield g
    g.close()


@pytest.fixture
def sess(gw: Gateway, tmp_path: Path, stand: Standin) -> Iterator[Opened]:
    stand.clear()
    o = open_session(gw, tmp_path / "evidence", allowed=ALLOWED, needles=(b"CANARY-abc123",))
    yield o
    o.session.close()


def oa(o: Opened) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{o.base}/openai/v1", api_key=AGENT_TOKEN, max_retries=0, timeout=20)


def an(o: Opened) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"{o.base}/anthropic", api_key=AGENT_TOKEN, max_retries=0, timeout=20)


def closed_lines(o: Opened) -> list[dict]:
    o.session.close()
    return sorted(o.lines(), key=lambda x: x["seq"])


def test_chat_completions_streamed_and_not_reach_the_provider_with_the_real_key_only(
        sess: Opened, stand: Standin) -> None:
    c = oa(sess)
    r = c.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "two words"}])
    assert r.choices[0].message.content == "answer: two words"
    chunks = list(c.chat.completions.create(model="gpt-test", stream=True,
                                            messages=[{"role": "user", "content": "a b c"}]))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "answer: a b c"
    got = stand.requests()
    assert [g["path"] for g in got] == ["/v1/chat/completions"] * 2
    for g in got:
        assert g["key_ok"] is True and g["headers"]["authorization"] == "Bearer <key>"
        assert AGENT_TOKEN not in json.dumps(g)
    assert got[1]["body"]["stream_options"] == {"include_usage": True}  # added by the rig
    lines = closed_lines(sess)
    assert [(x["api"], x["stream"], x["status"], x["usage_source"]) for x in lines] == [
        ("openai-chat", False, 200, "provider"), ("openai-chat", True, 200, "provider")]
    assert lines[0]["usage"] == {"input_tokens": 2, "output_tokens": 3, "cache_read_tokens": 0,
                                 "cache_write_tokens": 0}
    assert lines[1]["usage"]["input_tokens"] == 3 and lines[1]["usage"]["output_tokens"] == 4
    assert lines[0]["cost_usd"] == pytest.approx((2 * 1 + 3 * 2) / 1e6)
    assert lines[0]["usage_raw"]["prompt_tokens"] == 2
    ev = sess.evidence / "model"
    assert (ev / "0.request.json").read_bytes().startswith(b"{")
    assert json.loads((ev / "0.response.json").read_bytes())["choices"][0]["message"]["content"]
    assert b"data: [DONE]" in (ev / "1.response.sse").read_bytes()
    # the request digest is over the body as the agent sent it (before include_usage was added)
    import hashlib
    assert lines[1]["request_sha256"] == "sha256:" + hashlib.sha256((ev / "1.request.json").read_bytes()).hexdigest()
    assert "include_usage" not in (ev / "1.request.json").read_text()
    assert lines[0]["t_start"].endswith("Z") and lines[0]["t_start_ms"] > 0 and lines[0]["t_ms"] > 0


def test_chat_tool_calls_pass_through(sess: Opened) -> None:
    c = oa(sess)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    r = c.chat.completions.create(model="gpt-test", tools=tools,  # type: ignore[arg-type]
                                  messages=[{"role": "user", "content": "please call lookup"}])
    call = r.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "lookup" and json.loads(call.function.arguments) == {"text": "please call lookup"}
    chunks = list(c.chat.completions.create(model="gpt-test", tools=tools, stream=True,  # type: ignore[arg-type]
                                            messages=[{"role": "user", "content": "call lookup"}]))
    assert any(ch.choices and ch.choices[0].delta.tool_calls for ch in chunks)


def test_responses_streamed_and_not_are_forwarded_with_store_false(sess: Opened, stand: Standin) -> None:
    c = oa(sess)
    r = c.responses.create(model="gpt-test", input="hello you")
    assert r.output_text == "answer: hello you"
    with c.responses.stream(model="gpt-test", input="one two three") as st:
        deltas = [e.delta for e in st if e.type == "response.output_text.delta"]
        final = st.get_final_response()
    assert "".join(deltas) == "answer: one two three" == final.output_text
    got = stand.requests()
    assert [g["body"]["store"] for g in got] == [False, False]
    lines = closed_lines(sess)
    assert [(x["api"], x["stream"], x["usage_source"]) for x in lines] == [
        ("openai-responses", False, "provider"), ("openai-responses", True, "provider")]
    assert lines[1]["usage"]["input_tokens"] == 3 and lines[1]["usage"]["output_tokens"] == 4


def test_anthropic_messages_streamed_and_not_count_cached_input(sess: Opened, stand: Standin) -> None:
    c = an(sess)
    m = c.messages.create(model="claude-test", max_tokens=50, messages=[{"role": "user", "content": "hi there"}])
    assert m.content[0].text == "answer: hi there"  # type: ignore[union-attr]
    with c.messages.stream(model="cached-5+written-3", max_tokens=50,
                           messages=[{"role": "user", "content": "a b"}]) as st:
        text = "".join(st.text_stream)
    assert text == "answer: a b"
    got = stand.requests()
    assert all(g["headers"]["x-api-key"] == "<key>" and g["key_ok"] for g in got)
    assert all("authorization" not in g["headers"] for g in got)
    lines = closed_lines(sess)
    assert lines[0]["usage"] == {"input_tokens": 2, "output_tokens": 3, "cache_read_tokens": 0,
                                 "cache_write_tokens": 0}
    # Anthropic's input_tokens excludes the cached ones: the rig counts 2 + 5 + 3
    assert lines[1]["usage"] == {"input_tokens": 10, "output_tokens": 3, "cache_read_tokens": 5,
                                 "cache_write_tokens": 3}
    assert lines[1]["usage_raw"]["cache_read_input_tokens"] == 5
    assert (lines[1]["api"], lines[1]["stream"]) == ("anthropic-messages", True)


def test_openai_cached_tokens_are_part_of_input(sess: Opened) -> None:
    oa(sess).chat.completions.create(model="cached-7", messages=[{"role": "user", "content": "x y"}])
    (line,) = closed_lines(sess)
    assert line["usage"]["input_tokens"] == 9 and line["usage"]["cache_read_tokens"] == 7


def test_no_usage_is_estimated_and_output_priced_at_the_stated_maximum(sess: Opened) -> None:
    oa(sess).chat.completions.create(model="no-usage", max_tokens=321,
                                     messages=[{"role": "user", "content": "estimate me"}])
    list(an(sess).messages.create(model="no-usage", max_tokens=77, stream=True,
                                  messages=[{"role": "user", "content": "estimate me"}]))
    lines = closed_lines(sess)
    assert [x["usage_source"] for x in lines] == ["estimated", "estimated"]
    assert [x["usage"]["output_tokens"] for x in lines] == [321, 77]
    assert all(x["usage"]["input_tokens"] > 0 for x in lines)
    assert lines[0]["cost_usd"] == pytest.approx((lines[0]["usage"]["input_tokens"] + 321 * 2) / 1e6)
    spend = sess.ledger.spend("candidate")
    assert spend is not None and spend.estimated is True and spend.source == "metered" and spend.calls == 2


def test_the_estimate_never_fetches_tiktokens_encoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the encoding on the machine (or with a file that is not it) the count is
    characters/4, and nothing is fetched or removed: the rig has no network to wait on."""
    import hashlib

    from evalrig.attempt.gateway import usage

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(usage, "_encodings", {})
    t0 = time.monotonic()
    assert usage.count_tokens("openai-chat", "gpt-4.1-mini", b"x" * 41) == 11
    url = usage._TIKTOKEN_FILES["o200k_base"][0]
    bogus = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    bogus.write_bytes(b"not the encoding")
    monkeypatch.setattr(usage, "_encodings", {})
    assert usage.count_tokens("openai-chat", "gpt-4.1-mini", b"x" * 41) == 11
    assert bogus.read_bytes() == b"not the encoding"  # tiktoken would have removed it and fetched
    assert usage.count_tokens("anthropic-messages", "claude", b"y" * 8) == 2
    assert time.monotonic() - t0 < 5


def test_a_calls_line_is_in_the_ledger_before_its_caller_has_the_end_of_the_answer(sess: Opened) -> None:
    """What the rig reads of the ledger when the agent's next message arrives (an episode's
    spend against its budget) already holds every call the agent has had an answer to:
    whole answers are sent after the line is written, a stream's last event after it too."""
    c, a = oa(sess), an(sess)
    for i in range(12):
        c.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": f"hi {i}"}])
        assert len(sess.lines()) == 2 * i + 1 and sess.ledger.spend("candidate").calls == 2 * i + 1  # type: ignore[union-attr]
        for _ in c.chat.completions.create(model="gpt-test", stream=True,
                                           messages=[{"role": "user", "content": f"hey {i}"}]):
            pass
        assert len(sess.lines()) == 2 * i + 2, i
    with a.messages.stream(model="claude-test", max_tokens=20, messages=[{"role": "user", "content": "x"}]) as st:
        st.get_final_message()
    with c.responses.stream(model="gpt-test", input="one two") as rs:
        rs.get_final_response()
    lines = sess.lines()
    assert len(lines) == 26 and all(x["usage_source"] == "provider" and x["cost_usd"] > 0 for x in lines)
