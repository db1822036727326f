"""The canary split across model calls (docs/gateway.md, "The canary across calls"), through
`eval.sh run --gateway`: each call alone is clean and is forwarded, but the attempt-end scan
of the calls taken together (each forwarded header's values, and the prompt texts, joined
over the calls in seq order) finds it, whether or not the bodies were kept.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.redteam import add_task, results
from tests.test_gateway_wire import (
    Standin,
    _lines,
    _run_through_gateway,
    _sealed_model_checkpoint,
    standin,
)

__all__ = ["standin"]  # the fixture, shared with test_gateway_wire.py

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the gateway needs a namespace of the sandbox's own")

SPLIT_AGENT = """\
import json, os, sys, urllib.request, urllib.error
mode = sys.argv[1]
token = os.environ["RELEASE_SIGNING_TOKEN"]
half = len(token) // 2
base = json.loads(os.environ["EVALRIG_GATEWAY_UPSTREAMS"])["openai"]
def call(text, agent="agent/1.0"):
    body = json.dumps({"model": "standin-small", "max_tokens": 16,
                       "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(base + "/chat/completions", data=body, headers={
        "Content-Type": "application/json", "User-Agent": agent,
        "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    try:
        return urllib.request.urlopen(req, timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code
codes = []
if mode == "header":  # half in each call's User-Agent
    codes += [call("part one", "x-" + token[:half]), call("part two", token[half:] + "-y")]
elif mode == "dropped":  # each body over the evidence allowance: neither is kept
    codes += [call("b " * 25000 + token[:half]), call(token[half:] + " b" * 25000)]
else:  # half in each call's message text
    codes += [call("part " + token[:half]), call(token[half:] + " part")]
open(os.path.join(os.environ["EVALRIG_OUT"], "codes.json"), "w").write(json.dumps(codes))
open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w").write("ok")
"""


@pytest.mark.parametrize("mode", ["header", "text", "dropped"])
def test_the_canary_split_across_forwarded_calls_is_found(tmp_path: Path, standin: Standin, mode: str) -> None:
    """repro-01 (User-Agent halves), repro-02 (message text halves) and the same with the
    bodies dropped over the evidence cap: every call is forwarded (the provider got both
    halves), and the result says the canary was found, in the calls joined."""
    home = tmp_path / "home"
    ck = _sealed_model_checkpoint(home, tmp_path / "ck", SPLIT_AGENT, f'command = ["python3", "agent.py", "{mode}"]\n')
    add_task(tmp_path / "tasks", "fixed", "t0", extra="max_evidence_bytes = 40000\n" if mode == "dropped" else "")
    step = _run_through_gateway(tmp_path, home, ck, standin)
    [res] = results(tmp_path / "out")
    ev = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    codes = json.loads((ev / "out" / "codes.json").read_text())
    assert codes == [200] * len(codes), (codes, step)
    lines = _lines(ev / "model.jsonl")
    assert [c["refused"] for c in lines] == [None] * len(codes)
    assert len(standin.requests()) == len(codes)  # both halves reached the provider
    if mode == "dropped":
        assert [c["bodies"] for c in lines] == ["dropped", "dropped"], lines
    assert res["canary"]["found"] is True, res
    assert "model.jsonl (calls joined)" in res["canary"]["where"], res


def test_calls_that_hold_no_split_canary_stay_clean(tmp_path: Path, standin: Standin) -> None:
    """The scan across calls finds nothing in honest calls (no false finding)."""
    home = tmp_path / "home"
    honest = SPLIT_AGENT.replace('token = os.environ["RELEASE_SIGNING_TOKEN"]',
                                 'token = "an-honest-prompt-of-some-length"')
    ck = _sealed_model_checkpoint(home, tmp_path / "ck", honest, 'command = ["python3", "agent.py", "text"]\n')
    add_task(tmp_path / "tasks", "fixed", "t0")
    _run_through_gateway(tmp_path, home, ck, standin)
    [res] = results(tmp_path / "out")
    assert len(standin.requests()) == 2
    assert res["canary"]["found"] is False and res["status"] == "passed", res


def test_prompt_text_takes_what_a_model_reads_in_each_api() -> None:
    from evalrig.attempt.gateway.prompts import prompt_text

    chat = {"model": "m", "messages": [
        {"role": "system", "content": "A"},
        {"role": "user", "content": [{"type": "text", "text": "B"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,xx"}}]},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                              "function": {"name": "f", "arguments": "C"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "D"}],
        "tools": [{"type": "function", "function": {"name": "g", "description": "E",
                                                    "parameters": {"type": "object",
                                                                   "properties": {"p": {"description": "F"}}}}}]}
    assert prompt_text(chat) == b"ABfCDgEF"
    responses = {"model": "m", "instructions": "I", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "J"}]},
        {"type": "function_call_output", "call_id": "x", "output": "K"}]}
    assert prompt_text(responses) == b"IJK"
    assert prompt_text({"model": "m", "input": "L"}) == b"L"
    anthropic = {"model": "m", "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral",
                                                                                           "ttl": "1h"}}],
                 "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n",
                                                                 "input": {"q": "T"}}]},
                              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                            "content": "U"}]}],
                 "tools": [{"name": "n", "description": "V", "input_schema": {"type": "object"}}]}
    assert prompt_text(anthropic) == b"SnTUnV"


def test_the_ledger_joins_in_seq_order_whatever_order_lines_settle(tmp_path: Path) -> None:
    from evalrig.attempt.gateway import CallLedger
    from evalrig.models.gateway import ModelCall

    needle = b"rst_0123456789abcdef0123456789ab"

    def line(seq: int) -> ModelCall:
        return ModelCall(seq=seq, role="candidate", upstream="openai", model="m", api="openai-chat", stream=False,
                         status=200, t_start="2026-06-01T00:00:00Z", t_start_ms=0, t_ms=1.0,
                         request_sha256="sha256:" + "0" * 64, response_sha256=None, usage=None, usage_raw=None,
                         usage_source=None, cost_usd=0.0, refused=None, upstream_fault=False, error=None,
                         bodies="dropped")

    def body(text: bytes) -> dict[str, object]:
        return {"model": "m", "messages": [{"role": "user", "content": text.decode()}]}

    (tmp_path / "a").mkdir()
    led = CallLedger(tmp_path / "a", bodies_allowance=0)
    led.append(line(2), {}, body(needle[16:]), needles=(needle,))  # settles first
    led.append(line(0), {}, body(b"x"), needles=(needle,))
    led.append(line(1), {}, body(needle[:16]), needles=(needle,))
    assert led.split_canary() == "found"
    (tmp_path / "b").mkdir()
    led = CallLedger(tmp_path / "b", bodies_allowance=0)  # a refused call between: not in the join
    led.append(line(0), {}, body(needle[:16]), needles=(needle,))
    led.append(line(1), needles=(needle,))
    led.append(line(2), {}, body(needle[16:]), needles=(needle,))
    assert led.split_canary() == "found"
    (tmp_path / "c").mkdir()
    led = CallLedger(tmp_path / "c", bodies_allowance=0)  # the halves in the wrong order: no finding
    led.append(line(0), {}, body(needle[16:]), needles=(needle,))
    led.append(line(1), {}, body(needle[:16]), needles=(needle,))
    assert led.split_canary() == "clean"


def test_prompt_text_takes_every_top_level_field_but_the_model() -> None:
    """A half in `metadata`, `user`, a `response_format` schema or `prediction` is joined too
    (a red team split the canary between two calls' metadata; only the prompt keys were read)."""
    from evalrig.attempt.gateway.prompts import prompt_text

    body = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "metadata": {"k": "AAA"},
            "user": "BBB", "prediction": {"type": "content", "content": "CCC"},
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"description": "DDD"}}}}
    text = prompt_text(body).decode()
    for part in ("hi", "AAA", "BBB", "CCC", "DDD"):
        assert part in text, (part, text)
    assert "gpt-x" not in text and "user" != text[:4]
