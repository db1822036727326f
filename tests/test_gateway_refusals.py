"""The gateway's refusals, budgets, canary, upstream faults, disconnects, concurrency and
replay (docs/gateway.md), driven over real sockets: raw HTTP for the hostile cases, the
official SDKs where an agent would use them. Nothing refused ever reaches the stand-in."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from evalrig.attempt.gateway import IN_FLIGHT, CallLedger, Gateway, RecordedCall, Replay
from evalrig.models.gateway import Budget, CallUsage
from tests.gateway_kit import KEY, Opened, Standin, gateway, open_session, raw_call, standin

NEEDLE = b"CANARY-7f3a9c-needle"
ALLOWED = ("openai/fail-401+echo-key", "anthropic/fail-401+echo-key", "openai/gpt-test", "anthropic/claude-test", "openai/fail-500", "openai/fail-401",
           "openai/fail-429", "anthropic/fail-429", "openai/fail-403", "openai/reset", "openai/slow-5000",
           "openai/half-stream", "anthropic/half-stream", "openai/slow-400", "openai/slow-300",
           "anthropic/slow-300", "openai/slow-2000", "judgeonly/gpt-test", "openai/no-usage")
CHAT = "/openai/v1/chat/completions"
MSGS = "/anthropic/v1/messages"


@pytest.fixture(scope="module")
def stand(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    with standin(tmp_path_factory.mktemp("standin")) as s:
        yield s


@pytest.fixture(scope="module")
def gw(stand: Standin) -> Iterator[Gateway]:
    g = gateway(stand, timeout_s=3.0)
    yield g
    g.close()


@pytest.fixture
def sess(gw: Gateway, tmp_path: Path, stand: Standin) -> Iterator[Opened]:
    stand.clear()
    o = open_session(gw, tmp_path / "evidence", allowed=ALLOWED, needles=(NEEDLE,))
    yield o
    o.session.close()


def chat(model: str, text: str = "hello", **extra: object) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": text}], **extra}).encode()


def msg(model: str, text: str = "hello", **extra: object) -> bytes:
    return json.dumps({"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": text}],
                       **extra}).encode()


def closed_lines(o: Opened) -> list[dict]:
    o.session.close()
    return sorted(o.lines(), key=lambda x: x["seq"])


def test_every_refusal_answers_in_the_providers_shape_and_is_never_forwarded(
        sess: Opened, stand: Standin) -> None:
    p = sess.port
    cases = [
        # (method, target, body, status, refused, shape)
        ("GET", CHAT, b"", 404, "route", "openai"),
        ("POST", CHAT + "?x=1", chat("gpt-test"), 404, "route", "openai"),
        ("POST", "/openai/v1/chat%2Fcompletions", chat("gpt-test"), 404, "route", "openai"),
        ("POST", "/openai/v1/./chat/completions", chat("gpt-test"), 404, "route", "openai"),
        ("POST", "/openai/v1/models", b"{}", 404, "route", "openai"),
        ("POST", "/openai/v1/messages", msg("gpt-test"), 404, "route", "openai"),  # wrong api
        ("POST", "/anthropic/v1/chat/completions", chat("claude-test"), 404, "route", "anthropic"),
        ("POST", "/nosuch/v1/chat/completions", chat("gpt-test"), 404, "route", "openai"),
        ("POST", "http://evil.example/openai/v1/chat/completions", chat("gpt-test"), 404, "route", "openai"),
        ("POST", CHAT, b"not json", 400, "invalid", "openai"),
        ("POST", CHAT, b"[1, 2]", 400, "invalid", "openai"),
        ("POST", MSGS, b'{"model": 3}', 400, "invalid", "anthropic"),
        ("POST", CHAT, chat("gpt-5-expensive"), 403, "model", "openai"),
        ("POST", MSGS, msg("claude-opus"), 403, "model", "anthropic"),
        ("POST", "/judgeonly/v1/chat/completions", chat("gpt-test"), 403, "role", "openai"),
        ("POST", CHAT, chat("gpt-test", tools=[{"type": "web_search"}]), 403, "feature", "openai"),
        ("POST", "/openai/v1/responses", json.dumps({"model": "gpt-test", "input": "x",
                                                     "tools": [{"type": "code_interpreter"}]}).encode(),
         403, "feature", "openai"),
        ("POST", "/openai/v1/responses", json.dumps({"model": "gpt-test", "input": "x",
                                                     "previous_response_id": "resp_1"}).encode(),
         403, "feature", "openai"),
        ("POST", "/openai/v1/responses", json.dumps({"model": "gpt-test", "input": "x",
                                                     "store": True}).encode(), 403, "feature", "openai"),
        ("POST", "/openai/v1/responses", json.dumps({"model": "gpt-test", "input": "x",
                                                     "background": True}).encode(), 403, "feature", "openai"),
        ("POST", "/openai/v1/responses", json.dumps({"model": "gpt-test", "input": "x",
                                                     "conversation": "c1"}).encode(), 403, "feature", "openai"),
        ("POST", CHAT, chat("gpt-test", service_tier="priority"), 403, "feature", "openai"),
        ("POST", CHAT, chat("gpt-test", web_search_options={}), 403, "feature", "openai"),
        ("POST", MSGS, msg("claude-test", mcp_servers=[{"url": "https://x"}]), 403, "feature", "anthropic"),
        ("POST", MSGS, msg("claude-test", container="c"), 403, "feature", "anthropic"),
        ("POST", MSGS, msg("claude-test", tools=[{"type": "web_search_20250305", "name": "web_search"}]),
         403, "feature", "anthropic"),
    ]
    for method, target, body, status, _refused, shape in cases:
        got, _, data = raw_call(p, method, target, body)
        assert got == status, (target, body, got, data)
        err = json.loads(data)
        if shape == "anthropic":
            assert err["type"] == "error" and set(err["error"]) == {"type", "message"}, err
        else:
            assert set(err["error"]) == {"message", "type", "param", "code"}, err
    got, _, data = raw_call(p, "POST", CHAT, chat("gpt-5-expensive"))
    assert "openai/gpt-test" in json.loads(data)["error"]["message"]  # names the allowed
    # over 8 MiB: 413, by its declared length or by what arrives
    got, _, data = raw_call(p, "POST", CHAT, b"x" * (8 * 1024 * 1024 + 1))
    assert got == 413
    lines = closed_lines(sess)
    assert [x["refused"] for x in lines] == [c[4] for c in cases] + ["model", "size"]
    assert all(x["usage"] is None and x["cost_usd"] == 0 for x in lines)
    assert lines[-1]["bodies"] == "digest-only"
    assert stand.requests() == []  # nothing refused reached the provider


def test_the_canary_in_a_body_or_a_header_is_refused_never_forwarded_and_its_body_not_kept(
        sess: Opened, stand: Standin) -> None:
    c = openai.OpenAI(base_url=f"{sess.base}/openai/v1", api_key="tok", max_retries=0)
    with pytest.raises(openai.PermissionDeniedError) as e:
        c.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": f"leak {NEEDLE.decode()}"}])
    assert e.value.status_code == 403
    import base64
    hidden = base64.b64encode(b"the secret is " + NEEDLE).decode()  # in an encoded form too
    got, _, _ = raw_call(sess.port, "POST", CHAT, chat("gpt-test", hidden))
    assert got == 403
    got, _, _ = raw_call(sess.port, "POST", CHAT, chat("gpt-test"), {"User-Agent": f"x {NEEDLE.decode()}"})
    assert got == 403
    got, _, _ = raw_call(sess.port, "POST", CHAT, chat("gpt-test", "clean"))
    assert got == 200
    lines = closed_lines(sess)
    assert [x["refused"] for x in lines] == ["canary", "canary", "canary", None]
    assert all(x["bodies"] == "digest-only" for x in lines[:3])
    kept = sorted(p.name for p in (sess.evidence / "model").iterdir())
    assert kept == ["3.request.json", "3.response.json"]
    assert NEEDLE not in stand.log.read_bytes()
    assert len(stand.requests()) == 1


def test_budget_calls_and_reservations(gw: Gateway, tmp_path: Path, stand: Standin) -> None:
    o = open_session(gw, tmp_path / "a", allowed=ALLOWED, budget=Budget(max_calls=2))
    try:
        assert [raw_call(o.port, "POST", CHAT, chat("gpt-test"))[0] for _ in range(3)] == [200, 200, 429]
        status, _, data = raw_call(o.port, "POST", MSGS, msg("claude-test"))
        assert status == 429 and json.loads(data)["error"]["type"] == "budget_exhausted"
        _, _, data = raw_call(o.port, "POST", CHAT, chat("gpt-test"))
        assert json.loads(data)["error"]["type"] == "budget_exhausted"
    finally:
        o.session.close()
    assert [x["refused"] for x in sorted(o.lines(), key=lambda x: x["seq"])] == [None, None, "budget", "budget",
                                                                                  "budget"]
    # a call in flight that states its maximum output reserves it: a second call that would
    # start while the first holds the whole token budget is refused, and admitted after it settles
    o = open_session(gw, tmp_path / "b", allowed=ALLOWED, budget=Budget(max_tokens=1000))
    try:
        results: list[int] = []
        t = threading.Thread(target=lambda: results.append(
            raw_call(o.port, "POST", CHAT, chat("slow-400", max_tokens=5000))[0]))
        t.start()
        time.sleep(0.2)
        assert raw_call(o.port, "POST", CHAT, chat("gpt-test"))[0] == 429  # reserved by the call in flight
        t.join()
        assert results == [200]
        assert raw_call(o.port, "POST", CHAT, chat("gpt-test"))[0] == 200  # settled to its real usage
    finally:
        o.session.close()
    # at most IN_FLIGHT calls of one session at once: the rest wait, none is refused
    o = open_session(gw, tmp_path / "c", allowed=ALLOWED)
    try:
        t0 = time.monotonic()
        threads = [threading.Thread(target=raw_call, args=(o.port, "POST", CHAT, chat("slow-300")))
                   for _ in range(IN_FLIGHT + 1)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert time.monotonic() - t0 >= 0.55  # a fifth call waited for a slot
    finally:
        o.session.close()
    assert all(x["status"] == 200 for x in o.lines())


def test_upstream_faults_reach_the_agent_in_the_providers_shape_and_are_recorded(
        sess: Opened) -> None:
    c = openai.OpenAI(base_url=f"{sess.base}/openai/v1", api_key="tok", max_retries=0, timeout=20)
    with pytest.raises(openai.InternalServerError):
        c.chat.completions.create(model="fail-500", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.AuthenticationError):
        c.chat.completions.create(model="fail-401", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.RateLimitError):
        c.chat.completions.create(model="fail-429", messages=[{"role": "user", "content": "x"}])
    a = anthropic.Anthropic(base_url=f"{sess.base}/anthropic", api_key="tok", max_retries=0, timeout=20)
    with pytest.raises(anthropic.RateLimitError):
        a.messages.create(model="fail-429", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    status, _, data = raw_call(sess.port, "POST", CHAT, chat("reset"))
    assert status == 502 and "error" in json.loads(data)
    status, _, data = raw_call(sess.port, "POST", CHAT, chat("slow-5000"))  # the upstream's timeout_s is 3
    assert status == 504 and json.loads(data)["error"]["type"] == "timeout"
    with pytest.raises(openai.APIError):  # a half stream reaches the caller broken, not as a clean end
        for _ in c.chat.completions.create(model="half-stream", stream=True,
                                           messages=[{"role": "user", "content": "a b c d e f g h"}]):
            pass
    status, _, _ = raw_call(sess.port, "POST", CHAT, chat("half-stream"))
    assert status == 502
    lines = closed_lines(sess)
    assert [x["status"] for x in lines] == [500, 401, 429, 429, 502, 504, 200, 502]
    assert all(x["upstream_fault"] for x in lines)
    assert all(x["refused"] is None for x in lines)
    assert sess.ledger.upstream_faults() == 8


def test_streams_pass_on_chunk_by_chunk_and_a_caller_that_leaves_still_has_its_usage_read(
        sess: Opened, stand: Standin) -> None:
    body = chat("slow-300", "one two three four", stream=True)
    s = socket.create_connection(("127.0.0.1", sess.port))
    t0 = time.monotonic()
    s.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    first = s.recv(65536)
    t_first = time.monotonic() - t0
    assert b"200" in first.split(b"\r\n")[0]
    while b"data:" not in first:
        first += s.recv(65536)
        t_first = time.monotonic() - t0
    # the stand-in waits 300 ms between its 7 events: the first arrived long before the last was sent
    assert t_first < 0.25, t_first
    s.close()  # the agent leaves mid-stream
    lines = closed_lines(sess)  # closing waits for the upstream to be read to its end
    (line,) = lines
    assert line["usage_source"] == "provider" and line["usage"]["output_tokens"] == 5
    assert "disconnected" in line["error"]


def test_anthropic_stream_first_event_arrives_before_the_upstream_finishes(gw: Gateway, tmp_path: Path) -> None:
    o = open_session(gw, tmp_path / "e", allowed=ALLOWED)
    try:
        a = anthropic.Anthropic(base_url=f"{o.base}/anthropic", api_key="tok", max_retries=0)
        t0 = time.monotonic()
        with a.messages.stream(model="slow-300", max_tokens=50,
                               messages=[{"role": "user", "content": "a b c"}]) as st:
            next(iter(st))
            t_first = time.monotonic() - t0
            text = "".join(st.text_stream)
        total = time.monotonic() - t0
        assert t_first < 0.25 < 1.0 < total
        assert text == "answer: a b c"
    finally:
        o.session.close()


def test_two_hundred_concurrent_calls_from_two_sessions_are_all_recorded(
        gw: Gateway, tmp_path: Path, stand: Standin) -> None:
    ledger_dirs = [tmp_path / "j1", tmp_path / "j2"]
    opened = [open_session(gw, d, allowed=ALLOWED) for d in ledger_dirs]

    async def many() -> list[str]:
        clients = [openai.AsyncOpenAI(base_url=f"{o.base}/openai/v1", api_key="tok", max_retries=0, timeout=60)
                   for o in opened]
        calls = [clients[i % 2].chat.completions.create(model="gpt-test",
                                                        messages=[{"role": "user", "content": f"n {i}"}])
                 for i in range(200)]
        got = await asyncio.gather(*calls)
        return [r.choices[0].message.content or "" for r in got]

    answers = asyncio.run(many())
    assert answers == [f"answer: n {i}" for i in range(200)]
    for o in opened:
        o.session.close()
        lines = o.lines()
        assert sorted(x["seq"] for x in lines) == list(range(100))
        assert all(x["status"] == 200 and x["usage_source"] == "provider" for x in lines)
        spend = o.ledger.spend("candidate")
        assert spend is not None and spend.calls == 100 and spend.input_tokens == 200


def test_replay_serves_the_recording_and_409s_what_differs_without_touching_an_upstream(
        stand: Standin, tmp_path: Path) -> None:
    body = chat("gpt-test", "recorded question")
    import hashlib
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    recorded = b'{"id": "r1", "object": "chat.completion", "created": 1, "model": "gpt-test", "choices": [' \
               b'{"index": 0, "message": {"role": "assistant", "content": "recorded answer"}, ' \
               b'"finish_reason": "stop"}], "usage": {"prompt_tokens": 2, "completion_tokens": 2}}'
    sse = b'data: {"id":"r2","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":' \
          b'[{"index":0,"delta":{"content":"streamed recorded"},"finish_reason":null}]}\n\ndata: [DONE]\n\n'
    sbody = chat("gpt-test", "streamed", stream=True)
    u = CallUsage(input_tokens=2, output_tokens=2)
    replay = Replay({("t1", 0): [
        RecordedCall("candidate", digest, 200, False, recorded, "application/json", u,
                     {"prompt_tokens": 2, "completion_tokens": 2}, 0.25),
        RecordedCall("candidate", "sha256:" + hashlib.sha256(sbody).hexdigest(), 200, True, sse,
                     "text/event-stream", u, None, 0.5)]})
    g = Gateway({"openai": gateway(stand).upstreams["openai"]}, lambda *a: 99.0, replay=replay)
    stand.clear()
    o = open_session(g, tmp_path / "r", allowed=("openai/gpt-test",))
    try:
        status, _, data = raw_call(o.port, "POST", CHAT, body)
        assert status == 200 and data == recorded
        status, _, data = raw_call(o.port, "POST", CHAT, body)  # served once only
        assert status == 409 and json.loads(data)["error"]["type"] == "not_in_recording"
        status, _, data = raw_call(o.port, "POST", CHAT, chat("gpt-test", "something else"))
        assert status == 409
        status, h, data = raw_call(o.port, "POST", CHAT, sbody)
        assert status == 200 and data == sse and h["content-type"].startswith("text/event-stream")
    finally:
        o.session.close()
        g.close()
    lines = sorted(o.lines(), key=lambda x: x["seq"])
    assert [(x["status"], x["refused"], x["usage_source"]) for x in lines] == [
        (200, None, "replayed"), (409, "replay", None), (409, "replay", None), (200, None, "replayed")]
    assert [x["cost_usd"] for x in lines] == [0.25, 0, 0, 0.5]  # the recording's, not re-priced
    spend = o.ledger.spend("candidate")
    assert spend is not None and spend.source == "replayed" and spend.cost_usd == 0.75
    assert stand.requests() == []


def test_the_key_is_never_in_the_ledger_the_bodies_or_the_answers(sess: Opened) -> None:
    c = openai.OpenAI(base_url=f"{sess.base}/openai/v1", api_key="tok", max_retries=0)
    c.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.AuthenticationError) as e:
        c.chat.completions.create(model="fail-401", messages=[{"role": "user", "content": "x"}])
    assert KEY not in str(e.value.body)
    with pytest.raises(openai.AuthenticationError) as e:  # a provider that quotes the key it got
        c.chat.completions.create(model="fail-401+echo-key", messages=[{"role": "user", "content": "x"}])
    assert "Bearer [key]" in str(e.value.body) and KEY not in str(e.value.body)
    status, _, data = raw_call(sess.port, "POST", MSGS, msg("fail-401+echo-key"))
    assert status == 401 and b"[key]" in data and KEY.encode() not in data
    c.chat.completions.create(model="no-usage", messages=[{"role": "user", "content": "hi"}])
    sess.session.close()
    files = [p for p in sess.evidence.rglob("*") if p.is_file()]
    assert len(files) >= 5
    for p in files:
        assert KEY.encode() not in p.read_bytes(), p


def test_bodies_over_the_allowance_are_dropped_and_the_line_says_so(gw: Gateway, tmp_path: Path) -> None:
    o = open_session(gw, tmp_path / "d", allowed=ALLOWED, bodies_allowance=1000)
    try:
        for _ in range(3):
            assert raw_call(o.port, "POST", CHAT, chat("gpt-test"))[0] == 200
    finally:
        o.session.close()
    lines = sorted(o.lines(), key=lambda x: x["seq"])
    assert [x["bodies"] for x in lines] == ["kept", "dropped", "dropped"]
    assert sorted(p.name for p in (o.evidence / "model").iterdir()) == ["0.request.json", "0.response.json"]


def test_one_ledger_serves_every_role_of_an_attempt(gw: Gateway, tmp_path: Path) -> None:
    ledger = CallLedger(tmp_path / "ev", bodies_allowance=1 << 20)
    cand = open_session(gw, tmp_path / "ev", allowed=ALLOWED, ledger=ledger)
    judge = open_session(gw, tmp_path / "ev", allowed=("judgeonly/gpt-test",), role="judge", ledger=ledger)
    try:
        assert raw_call(cand.port, "POST", CHAT, chat("gpt-test"))[0] == 200
        assert raw_call(judge.port, "POST", "/judgeonly/v1/chat/completions", chat("gpt-test", "a b c"))[0] == 200
        assert raw_call(judge.port, "POST", CHAT, chat("gpt-test"))[0] == 403  # not the judge's model
    finally:
        cand.session.close()
        judge.session.close()
    assert [(x["seq"], x["role"]) for x in sorted(cand.lines(), key=lambda x: x["seq"])] == [
        (0, "candidate"), (1, "judge"), (2, "judge")]
    c, j = ledger.spend("candidate"), ledger.spend("judge")
    assert c is not None and j is not None and c.input_tokens == 1 and j.input_tokens == 3
    assert ledger.spend("driver") is None
    assert sorted(x.seq for x in ledger.calls()) == [0, 1, 2]  # lines land as calls end, not by seq


def test_an_upstreams_max_concurrent_bounds_every_session_of_the_process(stand: Standin, tmp_path: Path) -> None:
    g = gateway(stand, max_concurrent=1)
    opened = [open_session(g, tmp_path / f"s{i}", allowed=ALLOWED) for i in range(3)]
    try:
        t0 = time.monotonic()
        threads = [threading.Thread(target=raw_call, args=(o.port, "POST", CHAT, chat("slow-300")))
                   for o in opened]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert time.monotonic() - t0 >= 0.85  # one at a time: 3 x 300 ms
    finally:
        g.close()
    assert all(o.lines()[0]["status"] == 200 for o in opened)


def test_a_sandbox_cannot_hold_more_than_max_open_connections(sess: Opened) -> None:
    from evalrig.attempt.gateway.server import MAX_OPEN
    held = [socket.create_connection(("127.0.0.1", sess.port)) for _ in range(MAX_OPEN)]
    try:
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", sess.port))
        extra.settimeout(5)
        assert extra.recv(10) == b""  # closed at once
        extra.close()
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    assert raw_call(sess.port, "POST", CHAT, chat("gpt-test"))[0] == 200  # served again once they left


def test_the_sdks_do_not_retry_a_refusal_by_themselves(gw: Gateway, tmp_path: Path) -> None:
    """An exhausted budget (429) or a request not in the recording (409) would be refused
    again: the answer says so (`x-should-retry: false`), so the SDK's default retries do not
    turn one refusal into three lines."""
    o = open_session(gw, tmp_path / "n", allowed=ALLOWED, budget=Budget(max_calls=1))
    try:
        c = openai.OpenAI(base_url=f"{o.base}/openai/v1", api_key="tok", max_retries=2, timeout=20)
        c.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(openai.RateLimitError) as e:
            c.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        assert e.value.response.headers["x-should-retry"] == "false"
        a = anthropic.Anthropic(base_url=f"{o.base}/anthropic", api_key="tok", max_retries=2, timeout=20)
        with pytest.raises(anthropic.RateLimitError):
            a.messages.create(model="claude-test", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    finally:
        o.session.close()
    assert [x["refused"] for x in sorted(o.lines(), key=lambda x: x["seq"])] == [None, "budget", "budget"]


_RIG = r"""
import socket, sys
from pathlib import Path
from evalrig.attempt.gateway import CallLedger, Gateway, Grant, UpstreamConn
port, key, evidence = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
gw = Gateway({"openai": UpstreamConn("openai", "openai", f"http://127.0.0.1:{port}/v1", key, 64,
                                     ("candidate",), "", 30.0)}, lambda *a: 0.0)
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
gw.open(s, Grant("candidate", frozenset({"openai/gpt-test", "openai/slow-200"}), None, (), ("t", 0)),
        CallLedger(evidence, bodies_allowance=1 << 30))
print(s.getsockname()[1], flush=True)
sys.stdin.read()
"""


def test_kill_9_of_the_rig_mid_call_leaves_each_line_whole_or_absent(stand: Standin, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from evalrig.models.gateway import ModelCall
    from evalrig.store.jsonl import read_records
    from tests.gateway_kit import ROOT

    evidence = tmp_path / "ev"
    evidence.mkdir()
    rig = subprocess.Popen([sys.executable, "-c", _RIG, str(stand.port), KEY, str(evidence)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert rig.stdout is not None
        port = int(rig.stdout.readline())

        def caller(i: int) -> None:
            try:
                raw_call(port, "POST", CHAT, chat("gpt-test" if i % 2 else "slow-200", f"call {i}"))
            except OSError:
                pass  # the rig died under it

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(40)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        rig.send_signal(signal.SIGKILL)
        for t in threads:
            t.join(30)
    finally:
        rig.kill()
        rig.wait(10)
    got = read_records(evidence / "model.jsonl", ModelCall)
    assert got.torn_line is None  # every line whole (one synced write each); the cut calls are absent
    assert 0 < len(got.records) < 40
    assert len({r.seq for r in got.records}) == len(got.records)


def test_calls_still_waiting_for_a_slot_when_the_sandbox_ends_are_not_forwarded(
        gw: Gateway, tmp_path: Path, stand: Standin) -> None:
    stand.clear()
    o = open_session(gw, tmp_path / "w", allowed=ALLOWED)
    threads = [threading.Thread(target=lambda: _swallow(raw_call, o.port, "POST", CHAT, chat("slow-2000")))
               for _ in range(IN_FLIGHT + 3)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    o.session.close()  # 4 in flight are read to their end; the 3 waiting never leave
    for t in threads:
        t.join(30)
    lines = o.lines()
    assert len(lines) == IN_FLIGHT + 3
    assert sorted(x["status"] for x in lines) == [200] * IN_FLIGHT + [503] * 3
    assert len(stand.requests()) == IN_FLIGHT


def _swallow(fn, *args):  # type: ignore[no-untyped-def]
    try:
        fn(*args)
    except OSError:
        pass


def _take_every_slot(port: int) -> list[threading.Thread]:
    """IN_FLIGHT calls the stand-in answers after five seconds, started and given time to
    be admitted: the sandbox's slots are all taken while they last (join them)."""
    slow = [threading.Thread(target=_swallow, args=(raw_call, port, "POST", CHAT, chat("slow-5000")))
            for _ in range(IN_FLIGHT)]
    for t in slow:
        t.start()
    time.sleep(0.8)
    return slow


def test_content_the_provider_would_fetch_is_refused_and_inline_content_is_not(
        sess: Opened, stand: Standin) -> None:
    """An image or file given by URL (or by a file stored at the provider) would make the
    provider fetch it: a way to the internet, and state outside the attempt."""
    url = "https://attacker.example/x.png?data=secret"
    refused = [
        (CHAT, json.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": url}}]}]}).encode()),
        (CHAT, json.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": [
            {"type": "file", "file": {"file_id": "file-123"}}]}]}).encode()),
        ("/openai/v1/responses", json.dumps({"model": "gpt-test", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": url}]}]}).encode()),
        ("/openai/v1/responses", json.dumps({"model": "gpt-test", "input": [{"role": "user", "content": [
            {"type": "input_file", "file_url": "HTTPS://attacker.example/doc.pdf"}]}]}).encode()),
        (MSGS, json.dumps({"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": url}}]}]}).encode()),
        (MSGS, json.dumps({"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "document", "source": {"type": "file", "file_id": "file_1"}}]}]}]}).encode()),
    ]
    for target, body in refused:
        status, _, data = raw_call(sess.port, "POST", target, body)
        assert status == 403, (body, data)
    png = "data:image/png;base64,iVBORw0KGgo="
    allowed = [
        (CHAT, json.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": png}}]}]}).encode()),
        (MSGS, json.dumps({"model": "claude-test", "max_tokens": 5, "messages": [
            {"role": "user", "content": "fetch it"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "fetch",
                                               "input": {"url": url}}]},  # the agent's own tool: fine
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]}).encode()),
    ]
    for target, body in allowed:
        status, _, data = raw_call(sess.port, "POST", target, body)
        assert status == 200, (body, data)
    lines = closed_lines(sess)
    assert [x["refused"] for x in lines] == ["feature"] * len(refused) + [None] * len(allowed)
    assert len(stand.requests()) == len(allowed)


def _raw_request(target: str, body: bytes) -> bytes:
    return (f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def test_a_body_of_countless_empty_objects_is_refused_before_it_is_parsed(sess: Opened, stand: Standin) -> None:
    """`[{},{},...]` in 7 MiB parses to ~200 MiB of Python objects: refused by its count of
    JSON containers (strings left out of the count), never built, never forwarded."""
    from evalrig.attempt.gateway.server import MAX_CONTAINERS

    bomb = b'{"model":"gpt-test","messages":[' + b",".join([b"{}"] * 2_500_000) + b"]}"
    status, _, data = raw_call(sess.port, "POST", CHAT, bomb)
    assert status == 413, data
    assert b"JSON arrays and objects" in data
    # braces inside strings are text, not containers: a long code listing passes
    code = "{[" * (MAX_CONTAINERS + 10)
    status, _, data = raw_call(sess.port, "POST", CHAT, chat("gpt-test", code))
    assert status == 200, data
    lines = closed_lines(sess)
    assert [(x["status"], x["refused"]) for x in lines] == [(413, "size"), (200, None)]
    assert len(stand.requests()) == 1


def test_bodies_held_by_calls_not_yet_admitted_are_bounded_per_sandbox(stand: Standin, tmp_path: Path) -> None:
    """While its slots are busy, a sandbox's waiting calls may hold at most HELD_LIMIT bytes
    of bodies in the rig; a call past it gets 503 (and its line) rather than waiting."""
    from evalrig.attempt.gateway.server import HELD_LIMIT

    stand.clear()
    g = gateway(stand, timeout_s=20.0)
    try:
        o = open_session(g, tmp_path / "held", allowed=ALLOWED)
        slow = _take_every_slot(o.port)
        big = chat("gpt-test", "x" * (7 << 20))
        n = HELD_LIMIT // len(big) + 3
        statuses: list[int] = []
        waiting = [threading.Thread(target=lambda: statuses.append(_status(o.port, big))) for _ in range(n)]
        for t in waiting:
            t.start()
        for t in waiting + slow:
            t.join(300)
        lines = closed_lines(o)
    finally:
        g.close()
    assert -1 not in statuses, statuses
    assert sorted(statuses).count(503) >= 3, statuses
    assert sorted(statuses).count(200) >= 1, statuses
    assert len(lines) == IN_FLIGHT + n
    held = [x for x in lines if x["status"] == 503]
    assert all("hold" in x["error"] for x in held)
    assert len(stand.requests()) == IN_FLIGHT + statuses.count(200)


def _status(port: int, body: bytes) -> int:
    # Admitted calls wait their turn behind four slots and each 7 MiB body's canary scan: on a
    # loaded machine that is well past the kit's 20 s, and a client time-out must fail the test
    # rather than pass for the gateway's 503.
    try:
        return raw_call(port, "POST", CHAT, body, timeout=240)[0]
    except TimeoutError:
        return -1
    except (ConnectionResetError, BrokenPipeError):  # closed by the gateway while the body was going out
        return 503


def test_after_close_returns_every_call_has_its_line_and_no_line_comes_later(
        stand: Standin, tmp_path: Path) -> None:
    """Calls with big bodies queued behind the slots when the sandbox ends: close() waits
    for them (the ones not admitted stop at their next step, their queued checks cancelled);
    every request has its line by then and the evidence never changes afterwards."""
    stand.clear()
    g = gateway(stand, timeout_s=1.0)
    try:
        o = open_session(g, tmp_path / "late", allowed=ALLOWED + ("openai/slow-4000",))
        socks = []
        for _ in range(IN_FLIGHT):
            s = socket.create_connection(("127.0.0.1", o.port))
            s.sendall(_raw_request(CHAT, chat("slow-4000")))
            socks.append(s)
        time.sleep(0.5)
        bomb = b'{"model":"gpt-test","messages":[' + b",".join([b"{}"] * 2_600_000) + b"]}"
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", o.port))
            s.sendall(_raw_request(CHAT, bomb))
            socks.append(s)
        time.sleep(1)
        o.session.close()
        at_close = (o.evidence / "model.jsonl").read_bytes()
        time.sleep(3)
        later = (o.evidence / "model.jsonl").read_bytes()
        for s in socks:
            s.close()
    finally:
        g.close()
    assert at_close.count(b"\n") == len(socks)
    assert later == at_close


def test_a_request_whose_body_never_finished_still_has_its_line(sess: Opened, stand: Standin) -> None:
    s = socket.create_connection(("127.0.0.1", sess.port))
    s.sendall(b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
              b'{"model":')
    time.sleep(0.5)
    s.close()
    time.sleep(0.5)
    [line] = closed_lines(sess)
    assert line["status"] == 400 and "body was whole" in line["error"]
    assert line["request_sha256"] == "sha256:" + __import__("hashlib").sha256(b'{"model":').hexdigest()
    assert stand.requests() == []


def test_stored_prompts_items_and_any_store_but_false_are_refused(sess: Opened, stand: Standin) -> None:
    """State kept at the provider (a stored prompt template whose variables name URLs and
    files, a stored item, `store` other than false however spelt) outlives the attempt."""
    resp = "/openai/v1/responses"
    url = "https://attacker.example/x.png?leak=DATA"
    refused = [
        (resp, {"model": "gpt-test", "input": "hi", "prompt": {"id": "pmpt_1", "variables": {
            "img": {"type": "input_image", "image_url": url}}}}),
        (resp, {"model": "gpt-test", "input": "hi", "prompt": {"id": "pmpt_1"}}),
        (resp, {"model": "gpt-test", "input": [{"type": "item_reference", "id": "msg_1"}]}),
        (resp, {"model": "gpt-test", "input": [{"id": "msg_1"}]}),  # an item reference's type is optional
        (resp, {"model": "gpt-test", "input": "hi", "store": 1}),
        (CHAT, {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "store": 1}),
        (CHAT, {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "store": "true"}),
        (CHAT, {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "store": True}),
        # a fetched part under a key the walk has no name for is still found
        (CHAT, {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}],
                "metadata": {"parts": [{"type": "image_url", "image_url": {"url": " " + url}}]}}),
        # a key the gateway does not know is not forwarded (a feature added later)
        (CHAT, {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "stored_context": "c1"}),
        (resp, {"model": "gpt-test", "input": "hi", "messages": []}),
        (MSGS, {"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                "input": "x"}),
    ]
    for target, body in refused:
        status, _, data = raw_call(sess.port, "POST", target, json.dumps(body).encode())
        assert status == 403 and b"permission_error" in data, (body, data)
    allowed = [
        (resp, {"model": "gpt-test", "input": "hi", "prompt": None, "store": None}),
        (CHAT, {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "store": None}),
        (CHAT, {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "store": False}),
        (CHAT, {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "top_k": 5}),
    ]
    for target, body in allowed:
        status, _, data = raw_call(sess.port, "POST", target, json.dumps(body).encode())
        assert status == 200, (body, data)
    got = [r["body"] for r in stand.requests()]
    assert [b.get("store", "absent") for b in got] == [False, False, False, "absent"]
    lines = closed_lines(sess)
    assert [x["refused"] for x in lines] == ["feature"] * len(refused) + [None] * len(allowed)


def test_audio_in_or_out_is_refused_as_the_rig_cannot_price_it(sess: Opened, stand: Standin) -> None:
    refused = [
        {"model": "gpt-test", "modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"},
         "messages": [{"role": "user", "content": "hi"}]},
        {"model": "gpt-test", "modalities": ["audio"], "messages": [{"role": "user", "content": "hi"}]},
        {"model": "gpt-test", "audio": {"voice": "alloy", "format": "wav"},
         "messages": [{"role": "user", "content": "hi"}]},
        {"model": "gpt-test", "messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]},
        {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"},
                                           {"role": "assistant", "audio": {"id": "audio_1"}}]},
    ]
    for body in refused:
        status, _, data = raw_call(sess.port, "POST", CHAT, json.dumps(body).encode())
        assert status == 403 and b"feature_not_allowed" in data, (body, data)
    status, _, data = raw_call(sess.port, "POST", CHAT, chat("gpt-test", modalities=["text"]))
    assert status == 200, data
    assert len(stand.requests()) == 1


def test_the_provider_reads_the_json_the_gateway_checked_whatever_keys_repeat(sess: Opened, stand: Standin) -> None:
    """With `model` given twice, a provider whose parser takes the first would run a model the
    gateway never checked: what goes upstream is the checked JSON re-serialized (one `model`);
    the line's request_sha256 is still over the body as sent."""
    import hashlib

    import orjson

    raw = b'{"model":"not-allowed","max_tokens":20,"model":"claude-test","messages":[{"role":"user","content":"hi"}]}'
    status, _, data = raw_call(sess.port, "POST", MSGS, raw)
    assert status == 200, data
    [got] = stand.requests()
    assert got["body_sha256"] == hashlib.sha256(orjson.dumps(orjson.loads(raw))).hexdigest()
    assert got["body_sha256"] != hashlib.sha256(raw).hexdigest()
    [line] = closed_lines(sess)
    assert line["request_sha256"] == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert line["model"] == "claude-test"


def test_a_body_listing_countless_values_is_refused_before_it_is_parsed(sess: Opened, stand: Standin) -> None:
    """`["ab","ab",...]` holds three containers but parses to ~110 MiB: refused by its count of
    values (commas outside strings), never built, never forwarded; commas in text pass."""
    from evalrig.attempt.gateway.server import MAX_VALUES

    bomb = (b'{"model":"gpt-test","messages":[{"role":"user","content":['
            + b",".join([b'"ab"'] * 1_500_000) + b"]}]}")
    status, _, data = raw_call(sess.port, "POST", CHAT, bomb)
    assert status == 413, data
    assert b"values" in data
    status, _, data = raw_call(sess.port, "POST", CHAT, chat("gpt-test", "a, " * (MAX_VALUES + 10)))
    assert status == 200, data
    assert [(x["status"], x["refused"]) for x in closed_lines(sess)] == [(413, "size"), (200, None)]
    assert len(stand.requests()) == 1


def test_a_compressed_body_is_held_at_its_inflated_size(stand: Standin, tmp_path: Path) -> None:
    """A gzip body declares its compressed length (11 KB) but is held inflated (7 MiB): the
    bytes read past the declared length count against HELD_LIMIT too, so compressed calls
    waiting for a slot cannot hold gigabytes in the rig."""
    import gzip

    from evalrig.attempt.gateway.server import HELD_LIMIT

    stand.clear()
    g = gateway(stand, timeout_s=20.0)
    try:
        o = open_session(g, tmp_path / "gz", allowed=ALLOWED)
        slow = _take_every_slot(o.port)
        inflated = chat("gpt-test", "x" * (7 << 20))
        packed = gzip.compress(inflated)
        n = HELD_LIMIT // len(inflated) + 4
        statuses: list[int] = []

        def call() -> None:
            try:
                statuses.append(raw_call(o.port, "POST", CHAT, packed, {"Content-Encoding": "gzip"},
                                         timeout=240)[0])
            except (ConnectionResetError, BrokenPipeError):
                statuses.append(503)

        waiting = [threading.Thread(target=call) for _ in range(n)]
        for t in waiting:
            t.start()
        for t in waiting + slow:
            t.join(300)
        lines = closed_lines(o)
    finally:
        g.close()
    held = [x for x in lines if x["status"] == 503]
    assert len(held) >= 4, (statuses, [(x["status"], x.get("error")) for x in lines])
    assert all("hold" in x["error"] for x in held)
    assert len(lines) == IN_FLIGHT + n


def test_a_feature_given_as_zero_is_refused_like_any_value_but_false(sess: Opened, stand: Standin) -> None:
    """`0 == False` in Python, yet a provider may read 0 as set: only absent, null or false pass."""
    for key in ("background", "previous_response_id"):
        body = json.dumps({"model": "gpt-test", "input": "hi", key: 0}).encode()
        status, _, data = raw_call(sess.port, "POST", "/openai/v1/responses", body)
        assert status == 403, (key, data)
    assert len(stand.requests()) == 0
