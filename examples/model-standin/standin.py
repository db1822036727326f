#!/usr/bin/env python3
"""A STAND-IN model provider for tests, CI and the examples: NOT a model.

It plays an OpenAI-shaped provider (`POST /v1/chat/completions`, `POST /v1/responses`) and
an Anthropic-shaped one (`POST /v1/messages`) on loopback, streamed (SSE) and not, with
deterministic answers and deterministic usage, so the rig's model gateway (docs/gateway.md)
can be exercised with no provider, no key and no money. Standard library only.

    python standin.py --port 0 --port-file PORT [--key K] [--answers FILE] [--log FILE]

Answers: `--answers FILE` is a JSON object {prompt text or a substring of it: answer}; the
last user text is matched exactly first, then by the first key it contains. Otherwise the
answer is "answer: <last user text>". With `tools` in the request and a last user text that
says "call NAME" (a tool's name) or "use a tool", the answer is a call of that tool (or the
first) with arguments {"text": <last user text>}.

Usage is counted in words (a "token" is a whitespace-separated word of the request's texts,
at least 1) and returned as each provider does: Chat Completions `usage` {prompt_tokens,
completion_tokens, total_tokens, prompt_tokens_details.cached_tokens}; Responses {input_tokens,
output_tokens, ...}; Anthropic {input_tokens, output_tokens, cache_read_input_tokens,
cache_creation_input_tokens}.

Fault modes, chosen by the request's model name so a test drives them through the gateway
with no other channel: the model is split on "+" and each part may be
    fail-<status>   answer <status> (e.g. 500, 401, 403, 429) in the provider's error shape
    reset           close the connection with a TCP reset, no response
    slow-<ms>       wait <ms> before the response (streamed: after the first chunk, and
                    between the others)
    half-stream     stop after part of the response (streamed: no usage, no end event;
                    not streamed: fewer bytes than Content-Length), then close
    no-usage        leave usage out of the response (and the stream)
    echo-key        with fail-<status>: the error message quotes the key the request carried
    cached-<n>      report <n> cached input tokens (Anthropic: cache read) on top of the count
    written-<n>     Anthropic: report <n> cache-creation input tokens
    written1h-<n>   Anthropic: report <n> more, written for 1 hour (usage.cache_creation
                    {ephemeral_5m_input_tokens, ephemeral_1h_input_tokens})
e.g. "gpt-4.1-mini", "fail-429", "slow-300+no-usage".

`--key K`: requests must carry `Authorization: Bearer K` or `x-api-key: K` (401 in the
provider's shape otherwise). `--log FILE`: one JSON line per request received: method, path,
headers (the key's value replaced by "<key>"), whether the key was right, the body's sha256
and the body itself (parsed when JSON), so a test can check what a gateway forwarded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OPENAI_PATHS = {"/v1/chat/completions": "chat", "/v1/responses": "responses"}
ANTHROPIC_PATH = "/v1/messages"


class Config:
    key: str | None = None
    answers: dict[str, str] = {}
    log_path: str | None = None
    log_lock = threading.Lock()
    counter = 0
    counter_lock = threading.Lock()


def next_id() -> int:
    with Config.counter_lock:
        Config.counter += 1
        return Config.counter


# -- reading a request ----------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif isinstance(part.get("content"), (str, list)):  # tool results
                    out.append(_text_of(part["content"]))
                elif isinstance(part.get("output"), str):  # Responses function_call_output
                    out.append(part["output"])
        return " ".join(out)
    return ""


def messages_of(body: dict[str, Any], kind: str) -> list[tuple[str, str]]:
    """(role, text) of every input message, the system prompt first."""
    out: list[tuple[str, str]] = []
    if kind == "anthropic":
        if body.get("system") is not None:
            out.append(("system", _text_of(body["system"])))
        for m in body.get("messages") or []:
            if isinstance(m, dict):
                out.append((str(m.get("role")), _text_of(m.get("content"))))
    elif kind == "responses":
        if isinstance(body.get("instructions"), str):
            out.append(("system", body["instructions"]))
        inp = body.get("input")
        if isinstance(inp, str):
            out.append(("user", inp))
        elif isinstance(inp, list):
            for m in inp:
                if not isinstance(m, dict):
                    continue
                if m.get("type") == "function_call_output":
                    out.append(("tool", str(m.get("output", ""))))
                elif "role" in m:
                    out.append((str(m["role"]), _text_of(m.get("content"))))
    else:
        for m in body.get("messages") or []:
            if isinstance(m, dict):
                out.append((str(m.get("role")), _text_of(m.get("content"))))
    return out


def words(text: str) -> int:
    return len(text.split())


def answer_for(last_user: str) -> str:
    if last_user in Config.answers:
        return Config.answers[last_user]
    for k, v in Config.answers.items():
        if k and k in last_user:
            return v
    return f"answer: {last_user}"


def tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str):
            names.append(t["function"]["name"])  # Chat Completions
        elif isinstance(t.get("name"), str):
            names.append(t["name"])  # Responses, Anthropic
    return names


def tool_call_for(body: dict[str, Any], last_user: str) -> str | None:
    """The tool the last user text asks for, if the request offers tools."""
    names = tool_names(body)
    if not names:
        return None
    low = last_user.lower()
    for n in names:
        if f"call {n.lower()}" in low:
            return n
    if "use a tool" in low:
        return names[0]
    return None


def modes_of(model: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    if not isinstance(model, str):
        return out
    for part in model.split("+"):
        for name in ("fail-", "slow-", "cached-", "written-", "written1h-"):
            if part.startswith(name):
                out[name[:-1]] = part[len(name):]
        if part in ("reset", "half-stream", "no-usage", "echo-key"):
            out[part] = ""
    return out


def _int(v: str | None, default: int = 0) -> int:
    try:
        return int(v) if v is not None else default
    except ValueError:
        return default


# -- the handler ----------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "model-standin/1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        # small writes go out at once (as a provider's front end sends them), never held
        # back waiting for the peer's delayed acknowledgement
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # plumbing

    def _send(self, status: int, body: bytes, ctype: str = "application/json",
              *, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, kind: str, status: int, message: str) -> None:
        if kind == "anthropic":
            etype = {400: "invalid_request_error", 401: "authentication_error",
                     403: "permission_error", 404: "not_found_error", 429: "rate_limit_error",
                     529: "overloaded_error"}.get(status, "api_error")
            self._json(status, {"type": "error", "error": {"type": etype, "message": message}})
        else:
            etype, code = {400: ("invalid_request_error", None),
                           401: ("invalid_request_error", "invalid_api_key"),
                           403: ("permission_error", None), 404: ("invalid_request_error", None),
                           429: ("rate_limit_exceeded", "rate_limit_exceeded")}.get(
                               status, ("server_error", None))
            self._json(status, {"error": {"message": message, "type": etype, "param": None,
                                          "code": code}})

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        try:
            self.connection.close()
        except OSError:
            pass

    def _log(self, raw: bytes, body: Any, key_ok: bool | None) -> None:
        if Config.log_path is None:
            return
        headers = {}
        for k, v in self.headers.items():
            if Config.key and Config.key in v:
                v = v.replace(Config.key, "<key>")
            headers[k.lower()] = v
        line = {"t": time.time(), "method": self.command, "path": self.path, "headers": headers,
                "key_ok": key_ok, "body_sha256": hashlib.sha256(raw).hexdigest(), "body": body}
        data = (json.dumps(line) + "\n").encode()
        with Config.log_lock:
            with open(Config.log_path, "ab") as f:
                f.write(data)

    def _read_body(self) -> bytes:
        n = _int(self.headers.get("Content-Length"), 0)
        return self.rfile.read(n) if n > 0 else b""

    def _key_ok(self) -> bool | None:
        if not Config.key:
            return None
        auth = self.headers.get("Authorization", "")
        return auth == f"Bearer {Config.key}" or self.headers.get("x-api-key") == Config.key

    def do_GET(self) -> None:
        raw = self._read_body()
        self._log(raw, None, self._key_ok())
        self._error("openai", 404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        raw = self._read_body()
        path = self.path.split("?", 1)[0]
        kind = OPENAI_PATHS.get(path) or ("anthropic" if path == ANTHROPIC_PATH else None)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        key_ok = self._key_ok()
        self._log(raw, body if body is not None else raw.decode("utf-8", "replace"), key_ok)
        if kind is None:
            return self._error("anthropic" if "messages" in path else "openai", 404,
                               f"no route POST {path}")
        if key_ok is False:
            return self._error(kind, 401, "invalid api key (the stand-in checks the key it was started with)")
        if not isinstance(body, dict):
            return self._error(kind, 400, "the body is not a JSON object")
        modes = modes_of(body.get("model"))
        if "reset" in modes:
            return self._reset()
        if "fail" in modes:
            status = _int(modes["fail"], 500)
            said = ""
            if "echo-key" in modes:  # as a provider that quotes the key it was given
                said = " (you sent " + (self.headers.get("Authorization") or self.headers.get("x-api-key") or "") + ")"
            return self._error(kind, status if 400 <= status <= 599 else 500,
                               f"stand-in fault: status {status}{said}")
        msgs = messages_of(body, kind)
        last_user = next((t for r, t in reversed(msgs) if r in ("user", "tool")), "")
        prompt_tokens = max(1, sum(words(t) for _, t in msgs))
        tool = tool_call_for(body, last_user)
        text = answer_for(last_user) if tool is None else ""
        args = json.dumps({"text": last_user}) if tool else ""
        completion_tokens = max(1, words(text) + words(args))
        slow_s = _int(modes.get("slow"), 0) / 1000
        u = Usage(prompt_tokens, completion_tokens, _int(modes.get("cached")),
                  _int(modes.get("written")), "no-usage" not in modes, _int(modes.get("written1h")))
        stream = body.get("stream") is True
        half = "half-stream" in modes
        model = str(body.get("model"))
        if not stream and slow_s:
            time.sleep(slow_s)
        if kind == "chat":
            include = isinstance(body.get("stream_options"), dict) and \
                body["stream_options"].get("include_usage") is True
            if stream:
                return self._chat_stream(model, text, tool, args, u, include, slow_s, half)
            return self._whole(self._chat(model, text, tool, args, u), half)
        if kind == "responses":
            if stream:
                return self._responses_stream(model, text, tool, args, u, slow_s, half)
            return self._whole(self._response(model, text, tool, args, u), half)
        if stream:
            return self._messages_stream(model, text, tool, last_user, u, slow_s, half)
        return self._whole(self._message(model, text, tool, last_user, u), half)

    def _whole(self, obj: dict[str, Any], half: bool) -> None:
        data = json.dumps(obj).encode()
        if half:
            self._send(200, data[: len(data) // 2], length=len(data))
            self.close_connection = True
            return
        self._send(200, data)

    def _events(self, events: list[bytes], slow_s: float, half: bool) -> None:
        self._start_stream()
        if half:
            events = events[: max(1, len(events) // 2)]
        for i, e in enumerate(events):
            if i and slow_s:
                time.sleep(slow_s)
            self._chunk(e)
        if half:
            self.close_connection = True
            return
        self._end_stream()

    # Chat Completions

    def _chat(self, model: str, text: str, tool: str | None, args: str, u: Usage) -> dict[str, Any]:
        n = next_id()
        msg: dict[str, Any] = {"role": "assistant", "content": text if tool is None else None,
                               "refusal": None}
        if tool:
            msg["tool_calls"] = [{"id": f"call_{n}", "type": "function",
                                  "function": {"name": tool, "arguments": args}}]
        out = {"id": f"chatcmpl-standin-{n}", "object": "chat.completion", "created": int(time.time()),
               "model": model, "choices": [{"index": 0, "message": msg, "logprobs": None,
                                            "finish_reason": "tool_calls" if tool else "stop"}]}
        if u.report:
            out["usage"] = u.chat()
        return out

    def _chat_stream(self, model: str, text: str, tool: str | None, args: str, u: Usage,
                     include_usage: bool, slow_s: float, half: bool) -> None:
        n = next_id()
        base = {"id": f"chatcmpl-standin-{n}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": model}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            c = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish}])
            if include_usage:
                c["usage"] = None
            return sse(c)

        events = [chunk({"role": "assistant", "content": "" if tool is None else None})]
        if tool:
            events.append(chunk({"tool_calls": [{"index": 0, "id": f"call_{n}", "type": "function",
                                                 "function": {"name": tool, "arguments": ""}}]}))
            for piece in pieces(args):
                events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
        else:
            events.extend(chunk({"content": piece}) for piece in pieces(text))
        events.append(chunk({}, "tool_calls" if tool else "stop"))
        if include_usage and u.report:
            events.append(sse(dict(base, choices=[], usage=u.chat())))
        events.append(b"data: [DONE]\n\n")
        self._events(events, slow_s, half)

    # Responses

    def _response(self, model: str, text: str, tool: str | None, args: str, u: Usage,
                  status: str = "completed") -> dict[str, Any]:
        n = next_id()
        if tool:
            item: dict[str, Any] = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                                    "name": tool, "arguments": args, "status": "completed"}
        else:
            item = {"type": "message", "id": f"msg_{n}", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}
        return {"id": f"resp_standin_{n}", "object": "response", "created_at": int(time.time()),
                "status": status, "model": model, "output": [item] if status == "completed" else [],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
                "incomplete_details": None, "instructions": None, "metadata": {},
                "temperature": 1.0, "top_p": 1.0, "store": False,
                "usage": u.responses() if u.report and status == "completed" else None}

    def _responses_stream(self, model: str, text: str, tool: str | None, args: str, u: Usage,
                          slow_s: float, half: bool) -> None:
        done = self._response(model, text, tool, args, u)
        start = dict(done, status="in_progress", output=[], usage=None)
        item = done["output"][0]
        seq = iter(range(1_000_000))

        def ev(kind: str, **fields: Any) -> bytes:
            return sse({"type": kind, "sequence_number": next(seq), **fields}, event=kind)

        events = [ev("response.created", response=start), ev("response.in_progress", response=start)]
        if tool:
            events.append(ev("response.output_item.added", output_index=0,
                             item=dict(item, arguments="", status="in_progress")))
            for piece in pieces(args):
                events.append(ev("response.function_call_arguments.delta", item_id=item["id"],
                                 output_index=0, delta=piece))
            events.append(ev("response.function_call_arguments.done", item_id=item["id"],
                             output_index=0, arguments=args))
        else:
            events.append(ev("response.output_item.added", output_index=0,
                             item=dict(item, content=[], status="in_progress")))
            part = {"type": "output_text", "text": "", "annotations": []}
            events.append(ev("response.content_part.added", item_id=item["id"], output_index=0,
                             content_index=0, part=part))
            for piece in pieces(text):
                events.append(ev("response.output_text.delta", item_id=item["id"], output_index=0,
                                 content_index=0, delta=piece, logprobs=[]))
            events.append(ev("response.output_text.done", item_id=item["id"], output_index=0,
                             content_index=0, text=text, logprobs=[]))
            events.append(ev("response.content_part.done", item_id=item["id"], output_index=0,
                             content_index=0, part=dict(part, text=text)))
        events.append(ev("response.output_item.done", output_index=0, item=item))
        events.append(ev("response.completed", response=done))
        self._events(events, slow_s, half)

    # Anthropic Messages

    def _message(self, model: str, text: str, tool: str | None, last_user: str,
                 u: Usage) -> dict[str, Any]:
        n = next_id()
        block: dict[str, Any] = {"type": "text", "text": text}
        if tool:
            block = {"type": "tool_use", "id": f"toolu_standin_{n}", "name": tool,
                     "input": {"text": last_user}}
        out: dict[str, Any] = {"id": f"msg_standin_{n}", "type": "message", "role": "assistant",
                               "model": model, "content": [block],
                               "stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None}
        if u.report:
            out["usage"] = u.anthropic()
        return out

    def _messages_stream(self, model: str, text: str, tool: str | None, last_user: str, u: Usage,
                         slow_s: float, half: bool) -> None:
        whole = self._message(model, text, tool, last_user, u)
        start = dict(whole, content=[], stop_reason=None)
        if u.report:
            start["usage"] = dict(u.anthropic(), output_tokens=1)

        def ev(kind: str, **fields: Any) -> bytes:
            return sse({"type": kind, **fields}, event=kind)

        events = [ev("message_start", message=start)]
        if tool:
            block = whole["content"][0]
            events.append(ev("content_block_start", index=0, content_block=dict(block, input={})))
            for piece in pieces(json.dumps(block["input"])):
                events.append(ev("content_block_delta", index=0,
                                 delta={"type": "input_json_delta", "partial_json": piece}))
        else:
            events.append(ev("content_block_start", index=0, content_block={"type": "text", "text": ""}))
            events.extend(ev("content_block_delta", index=0, delta={"type": "text_delta", "text": p})
                          for p in pieces(text))
        events.append(ev("content_block_stop", index=0))
        delta: dict[str, Any] = {"delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None}}
        if u.report:
            delta["usage"] = {"output_tokens": u.completion}
        events.append(ev("message_delta", **delta))
        events.append(ev("message_stop"))
        self._events(events, slow_s, half)


class Usage:
    def __init__(self, prompt: int, completion: int, cached: int, written: int, report: bool,
                 written_1h: int = 0) -> None:
        self.prompt, self.completion, self.cached, self.written = prompt, completion, cached, written
        self.report, self.written_1h = report, written_1h

    def chat(self) -> dict[str, Any]:
        p = self.prompt + self.cached
        return {"prompt_tokens": p, "completion_tokens": self.completion,
                "total_tokens": p + self.completion,
                "prompt_tokens_details": {"cached_tokens": self.cached, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0,
                                              "rejected_prediction_tokens": 0}}

    def responses(self) -> dict[str, Any]:
        p = self.prompt + self.cached
        return {"input_tokens": p, "input_tokens_details": {"cached_tokens": self.cached},
                "output_tokens": self.completion, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": p + self.completion}

    def anthropic(self) -> dict[str, Any]:
        # Anthropic's input_tokens excludes the cached ones; they are reported beside.
        out: dict[str, Any] = {"input_tokens": self.prompt, "output_tokens": self.completion,
                               "cache_read_input_tokens": self.cached,
                               "cache_creation_input_tokens": self.written + self.written_1h}
        if self.written_1h:  # the split by lifetime, as the API gives it for cache_control ttl "1h"
            out["cache_creation"] = {"ephemeral_5m_input_tokens": self.written,
                                     "ephemeral_1h_input_tokens": self.written_1h}
        return out


def pieces(text: str) -> list[str]:
    """The text in word-sized pieces (each keeps its leading space), at least one piece."""
    if not text:
        return [""]
    out, cur = [], ""
    for ch in text:
        if ch == " " and cur.strip():
            out.append(cur)
            cur = ""
        cur += ch
    out.append(cur)
    return out


def sse(obj: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(obj) + "\n\n").encode()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="A stand-in model provider (OpenAI and Anthropic shapes) "
                                 "for tests and examples; not a model.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the bound port here (atomically)")
    ap.add_argument("--key", default=None, help="the key requests must carry (default: none checked)")
    ap.add_argument("--answers", help="JSON object: prompt text (or a substring) -> answer")
    ap.add_argument("--log", help="append one JSON line per request here")
    a = ap.parse_args(argv)
    if a.answers:
        with open(a.answers, encoding="utf-8") as f:
            answers = json.load(f)
        if not isinstance(answers, dict) or not all(isinstance(v, str) for v in answers.values()):
            print(f"standin: {a.answers}: must be a JSON object of strings", file=sys.stderr)
            return 2
        Config.answers = answers
    Config.key = a.key or None
    Config.log_path = a.log
    srv = Server((a.host, a.port), Handler)
    port = srv.server_address[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.replace(tmp, a.port_file)
    print(f"model stand-in listening on http://{a.host}:{port}", file=sys.stderr, flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
