"""A call's tokens: read from the provider's response or stream, else the rig's own count
(docs/gateway.md, "Usage").

- Chat Completions: `usage` {prompt_tokens (cached included), completion_tokens,
  prompt_tokens_details.cached_tokens}; a stream's last chunk carries it (the gateway asks
  for it with `stream_options.include_usage`).
- Responses: `usage` {input_tokens (cached included), output_tokens,
  input_tokens_details.cached_tokens}; a stream's `response.completed` event carries it.
- Anthropic Messages: `usage` {input_tokens, output_tokens, cache_read_input_tokens,
  cache_creation_input_tokens, cache_creation.ephemeral_1h_input_tokens (the part of the
  writes made for 1 hour, priced higher)}, where input_tokens excludes the cached ones; a
  stream's `message_start` has the input side and `message_delta` the (cumulative) output.
- Reasoning (OpenAI `completion_tokens_details.reasoning_tokens`, Responses
  `output_tokens_details.reasoning_tokens`, Anthropic thinking) is inside the output count,
  so it is priced as output. Audio tokens (`prompt_tokens_details.audio_tokens`,
  `completion_tokens_details.audio_tokens`) are billed at audio rates a text count cannot
  price: a usage reporting any is not taken, and the call is `estimated` (never grants).
The rig's `input_tokens` counts every input token (Anthropic: the three added).

Without usage, the rig counts: tiktoken for OpenAI models when its encoding is already on
this machine (it is never fetched), else characters/4; the output is priced at the
request's stated maximum, else counted from the response.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from typing import Any

import orjson

from evalrig.models.gateway import CallApi, CallUsage

__all__ = ["StreamUsage", "count_tokens", "estimate", "from_body", "from_object"]


def _n(obj: Any, *keys: str) -> int | None:
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    if obj is None:
        return 0
    if isinstance(obj, bool) or not isinstance(obj, int) or obj < 0:
        return None
    return obj


def from_object(call_api: CallApi, usage: Any) -> CallUsage | None:
    """The rig's usage from a provider's usage object, or None if it is none or malformed."""
    if not isinstance(usage, dict):
        return None
    if call_api == "anthropic-messages":
        parts = [_n(usage, "input_tokens"), _n(usage, "cache_read_input_tokens"),
                 _n(usage, "cache_creation_input_tokens"), _n(usage, "output_tokens")]
        if any(p is None for p in parts) or "output_tokens" not in usage:
            return None
        ai, ar, aw, ao = (p or 0 for p in parts)
        # the writes to a 1-hour cache cost more than the 5-minute ones: their part is kept
        # (a write count below it is taken as the larger figure: over-count, never under)
        w1h = _n(usage, "cache_creation", "ephemeral_1h_input_tokens") if "cache_creation" in usage else 0
        if w1h is None:
            return None
        aw = max(aw, w1h)
        return CallUsage(input_tokens=ai + ar + aw, output_tokens=ao, cache_read_tokens=ar,
                         cache_write_tokens=aw, cache_write_1h_tokens=w1h or None)
    if call_api == "openai-chat":
        names = ("prompt_tokens", "completion_tokens", "prompt_tokens_details")
    else:
        names = ("input_tokens", "output_tokens", "input_tokens_details")
    i, o, cr = _n(usage, names[0]), _n(usage, names[1]), _n(usage, names[2], "cached_tokens")
    if names[0] not in usage or names[1] not in usage or i is None or o is None:
        return None
    if any(_audio(usage.get(k)) for k in (names[2], "completion_tokens_details", "output_tokens_details")):
        return None  # audio is billed at rates the text count cannot price: the call is estimated
    return CallUsage(input_tokens=i, output_tokens=o, cache_read_tokens=min(cr or 0, i))


def _audio(details: Any) -> bool:
    """Whether a usage details object reports audio tokens (or reports them malformed)."""
    if not isinstance(details, dict) or details.get("audio_tokens") in (None, 0):
        return False
    return True


def from_body(call_api: CallApi, body: bytes) -> tuple[CallUsage | None, dict[str, Any] | None]:
    """(usage, the provider's usage object) of a whole (not streamed) response."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    raw = obj.get("usage") if isinstance(obj, dict) else None
    if not isinstance(raw, dict):
        return None, None
    return from_object(call_api, raw), raw


class StreamUsage:
    """Finds the usage in an SSE stream fed chunk by chunk (events split across chunks
    included). Only the events that can carry usage are parsed."""

    _MARK: dict[CallApi, tuple[bytes, ...]] = {
        "openai-chat": (b'"usage"',),
        "openai-responses": (b"response.completed", b"response.incomplete", b"response.failed"),
        "anthropic-messages": (b"message_start", b"message_delta"),
    }

    def __init__(self, call_api: CallApi) -> None:
        self.call_api = call_api
        self._marks = self._MARK[call_api]
        self._buf = b""
        self.raw: dict[str, Any] | None = None
        self.completed = False

    def feed(self, chunk: bytes) -> None:
        data = self._buf + chunk
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            line = data[start:end]
            start = end + 1
            if line.startswith(b"data:") and any(m in line for m in self._marks):
                self._line(line[5:].strip())
            elif line.startswith(b"data:") and b"[DONE]" in line:
                self.completed = True
        self._buf = data[start:]
        if len(self._buf) > 16 << 20:  # a line longer than any usage event: not one of them
            self._buf = b""

    def _line(self, payload: bytes) -> None:
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if not isinstance(obj, dict):
            return
        if self.call_api == "openai-chat":
            if isinstance(obj.get("usage"), dict):
                self.raw = obj["usage"]
        elif self.call_api == "openai-responses":
            resp = obj.get("response")
            if obj.get("type", "").startswith("response.") and isinstance(resp, dict):
                self.completed = True
                if isinstance(resp.get("usage"), dict):
                    self.raw = resp["usage"]
        else:
            kind = obj.get("type")
            if kind == "message_start" and isinstance(obj.get("message"), dict):
                u = obj["message"].get("usage")
                if isinstance(u, dict):
                    self.raw = dict(u)
            elif kind == "message_delta" and isinstance(obj.get("usage"), dict):
                self.raw = {**(self.raw or {}), **obj["usage"]}
                self.completed = True

    def usage(self) -> CallUsage | None:
        return from_object(self.call_api, self.raw) if self.raw is not None else None


# -- the rig's own count ------------------------------------------------------------------

_TIKTOKEN_FILES = {  # tiktoken_ext.openai_public: the blob each encoding loads, and its sha256
    "o200k_base": ("https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
                   "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
    "cl100k_base": ("https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
                    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
}
_encodings: dict[str, Any] = {}
_enc_lock = threading.Lock()


def _cached_encoding(name: str) -> Any | None:
    """tiktoken's encoding `name` if its file is already in tiktoken's cache and intact (so
    loading it fetches nothing), else None."""
    with _enc_lock:
        if name in _encodings:
            return _encodings[name]
        enc = None
        url, digest = _TIKTOKEN_FILES[name]
        cache = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
        if cache is None:
            cache = os.path.join(tempfile.gettempdir(), "data-gym-cache")
        path = os.path.join(cache, hashlib.sha1(url.encode()).hexdigest())
        try:
            with open(path, "rb") as f:
                ok = cache != "" and hashlib.sha256(f.read()).hexdigest() == digest
        except OSError:
            ok = False
        if ok:
            try:
                import tiktoken  # only here: it is heavy, and only estimates need it

                enc = tiktoken.get_encoding(name)
            except Exception:  # noqa: BLE001 - any failure means: count characters
                enc = None
        _encodings[name] = enc
        return enc


def _encoding_for(model: str) -> Any | None:
    name = "cl100k_base" if model.startswith(("gpt-4-", "gpt-3.5", "gpt-4")) and \
        not model.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5")) else "o200k_base"
    return _cached_encoding(name)


def count_tokens(call_api: CallApi, model: str, text: bytes) -> int:
    """The rig's count of `text`'s tokens: tiktoken for OpenAI models when available
    offline, else characters/4 (rounded up)."""
    s = text.decode("utf-8", "replace")
    if call_api != "anthropic-messages":
        enc = _encoding_for(model)
        if enc is not None:
            return len(enc.encode(s, disallowed_special=()))
    return (len(s) + 3) // 4


def estimate(call_api: CallApi, model: str, request: bytes, max_output: int | None,
             response: bytes) -> CallUsage:
    """A call's usage when the provider gave none: the request body counted, and the
    output at the stated maximum (else the response counted)."""
    out = max_output if max_output is not None else count_tokens(call_api, model, response)
    return CallUsage(input_tokens=count_tokens(call_api, model, request), output_tokens=out)
