"""What the gateway serves and what it refuses, and its refusals in each provider's error
shape (docs/gateway.md, "Exact points").

Only three endpoints: `POST /NAME/v1/chat/completions` and `POST /NAME/v1/responses` for an
upstream of api `openai`, `POST /NAME/v1/messages` for one of api `anthropic`. The request
target must be exactly that: no query, no encoded byte, no dot segment, no absolute form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from evalrig.models.gateway import Api, CallApi, Refusal

__all__ = [
    "ALLOWED_KEYS", "FEATURES", "Route", "error_body", "feature_problem", "fetch_problem", "max_output_tokens", "parse_route",
    "refusal", "shape_of",
]

_TARGET = re.compile(r"^/([A-Za-z0-9][A-Za-z0-9_-]{0,63})/(v1/chat/completions|v1/responses|v1/messages)$")
_ENDPOINTS: dict[str, tuple[Api, CallApi]] = {
    "v1/chat/completions": ("openai", "openai-chat"),
    "v1/responses": ("openai", "openai-responses"),
    "v1/messages": ("anthropic", "anthropic-messages"),
}


@dataclass(frozen=True)
class Route:
    upstream: str
    call_api: CallApi
    rest: str
    """What follows the upstream's base URL: `chat/completions`, `responses` (an OpenAI
    base URL ends in `/v1`) or `v1/messages` (the Anthropic SDK adds the version)."""


def parse_route(method: str, raw_target: str, apis: Mapping[str, Api]) -> Route | None:
    """The route of a request, or None (404): an exact POST to one of the three endpoints of
    an upstream of the matching api."""
    if method != "POST":
        return None
    m = _TARGET.match(raw_target)
    if m is None:
        return None
    name, endpoint = m.group(1), m.group(2)
    api, call_api = _ENDPOINTS[endpoint]
    if apis.get(name) != api:
        return None
    return Route(name, call_api, endpoint[len("v1/"):] if api == "openai" else endpoint)


def shape_of(raw_target: str, apis: Mapping[str, Api]) -> Api:
    """Whose error shape answers a request: the api of the upstream its first segment names,
    else Anthropic's for a path ending in /messages, else OpenAI's."""
    first = raw_target.lstrip("/").split("/", 1)[0]
    api = apis.get(first)
    if api is not None:
        return api
    return "anthropic" if raw_target.split("?", 1)[0].endswith("/messages") else "openai"


# -- errors -------------------------------------------------------------------------------

_STATUS: dict[Refusal, int] = {
    "route": 404, "size": 413, "invalid": 400, "model": 403, "role": 403, "feature": 403,
    "budget": 429, "canary": 403, "scan": 403, "replay": 409,
}
_TYPE: dict[Refusal, str] = {
    "route": "not_found_error", "size": "invalid_request_error", "invalid": "invalid_request_error",
    "model": "permission_error", "role": "permission_error", "feature": "permission_error",
    "budget": "budget_exhausted", "canary": "permission_error", "scan": "permission_error",
    "replay": "not_in_recording",
}
_CODE: dict[Refusal, str] = {
    "route": "route", "size": "request_too_large", "invalid": "invalid", "model": "model_not_allowed",
    "role": "role_not_allowed", "feature": "feature_not_allowed", "budget": "budget_exhausted",
    "canary": "canary", "scan": "scan", "replay": "not_in_recording",
}


def error_body(shape: Api, etype: str, message: str, code: str | None = None) -> bytes:
    """An error as the provider words it: OpenAI `{"error": {"message", "type", "param",
    "code"}}`, Anthropic `{"type": "error", "error": {"type", "message"}}`."""
    if shape == "anthropic":
        return orjson.dumps({"type": "error", "error": {"type": etype, "message": message}})
    return orjson.dumps({"error": {"message": message, "type": etype, "param": None, "code": code}})


def refusal(shape: Api, refused: Refusal, message: str) -> tuple[int, bytes]:
    """(status, body) of the gateway's own refusal."""
    etype = _TYPE[refused]
    if refused == "size" and shape == "anthropic":
        etype = "request_too_large"
    return _STATUS[refused], error_body(shape, etype, f"evalrig gateway: {message}", _CODE[refused])


# -- features the gateway refuses ---------------------------------------------------------

FEATURES = ("mcp_servers", "container", "background", "previous_response_id", "conversation",
            "web_search_options", "prompt", "audio")
"""Body keys that reach state or services outside the attempt (docs/gateway.md). Present
with any value but null/false, they are refused. `web_search_options` is Chat Completions'
provider-hosted web search; `prompt` is a Responses prompt template stored in the
provider's organisation (its variables may name URLs and stored files); `audio` asks for
spoken output, billed at audio rates the rig cannot price."""

_DEFAULT_TIERS = (None, "auto", "default")

_SAMPLING = frozenset({"model", "stream", "temperature", "top_p", "metadata", "tools", "tool_choice",
                       "parallel_tool_calls", "service_tier", "store", "user", "top_logprobs",
                       "safety_identifier", "prompt_cache_key", "prompt_cache_retention"})
ALLOWED_KEYS: dict[CallApi, frozenset[str]] = {
    "openai-chat": _SAMPLING | {
        "messages", "frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "max_tokens",
        "max_completion_tokens", "n", "prediction", "reasoning_effort", "response_format", "seed", "stop",
        "stream_options", "verbosity", "functions", "function_call", "modalities", "audio",
        "web_search_options",
        # sampling parameters OpenAI-compatible servers (vLLM, llama.cpp, ...) take
        "top_k", "min_p", "repetition_penalty", "chat_template_kwargs"},
    "openai-responses": _SAMPLING | {
        "input", "instructions", "include", "max_output_tokens", "max_tool_calls", "reasoning", "text",
        "truncation", "stream_options", "background", "conversation", "previous_response_id", "prompt"},
    "anthropic-messages": frozenset({
        "model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream", "temperature",
        "top_k", "top_p", "thinking", "tools", "tool_choice", "service_tier", "container", "mcp_servers",
        "context_management", "output_format", "output_config"}),
}
"""The top-level keys each endpoint forwards (docs/gateway.md): a key the gateway does not
know is refused, so a feature a provider adds later is not passed on unchecked. Some listed
keys are then refused by value (FEATURES, `store`, `modalities`)."""


def feature_problem(body: Mapping[str, Any], api: CallApi | None = None) -> str | None:
    """Why the body asks for something the gateway does not pass on, or None."""
    for key in FEATURES:
        value = body.get(key)
        if value is not None and value is not False:  # identity: `0 == False`, yet 0 is not false
            return f"{key!r} is not served (no state or service outside the attempt)"
    store = body.get("store")
    if store is not None and store is not False:  # identity: 0 == False, and a provider may read 0 as true
        return "'store' other than false is not served (nothing outlives the attempt)"
    modalities = body.get("modalities")
    if modalities is not None and (not isinstance(modalities, list) or any(m != "text" for m in modalities)):
        return ("'modalities' other than [\"text\"] is not served (audio is billed at rates the rig "
                "cannot price)")
    if body.get("service_tier") not in _DEFAULT_TIERS:
        return "a 'service_tier' other than the default is not served (the call could not be priced)"
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "'tools' must be a list"
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                return f"tools[{i}] must be an object"
            kind = tool.get("type", "custom" if "input_schema" in tool or "name" in tool else None)
            if kind not in ("function", "custom"):
                return (f"tools[{i}] has type {kind!r}: only function (and custom) tools are served, "
                        "no provider-hosted tool")
    if api is not None:
        unknown = sorted(k for k in body if k not in ALLOWED_KEYS[api])
        if unknown:
            return (f"{', '.join(repr(k) for k in unknown[:5])} is not among the keys the gateway "
                    f"forwards to {api} (docs/models.md lists them)")
    return None


_FETCHED = {
    # a content part whose `type` is one of these names something the provider would go and get
    "image_url": ("image_url",),          # Chat Completions: {"image_url": {"url": ...}}
    "file": ("file",),                    # Chat Completions: {"file": {"file_id": ...}}
    "input_image": ("image_url", "file_id"),  # Responses
    "input_file": ("file_url", "file_id"),    # Responses
    "image": ("source",),                 # Anthropic: {"source": {"type": "url" | "file", ...}}
    "document": ("source",),
}
_REFUSED_PARTS = {
    "item_reference": "an 'item_reference' (an item stored in the provider's organisation) is not served",
    "input_audio": "an 'input_audio' part is not served (audio is billed at rates the rig cannot price)",
}
_MAX_DEPTH = 64


def _remote(value: Any) -> bool:
    """Whether a content part's reference is fetched by the provider: an http(s) URL, a
    stored file (`file_id`), an Anthropic source of type url or file. Inline data is not."""
    if isinstance(value, str):
        return value.lstrip()[:8].lower().startswith(("http://", "https://"))
    if isinstance(value, dict):
        if value.get("type") in ("url", "file") or "file_id" in value:
            return True
        return any(_remote(value.get(k)) for k in ("url", "file_url"))
    return False


def fetch_problem(body: Mapping[str, Any]) -> str | None:
    """A content part (an image, a file, a document) the provider would fetch from a URL or
    from its own stored files: refused, since the gateway is no way to the internet and keeps
    no state outside the attempt (send the data inline, as base64)."""
    stack: list[tuple[Any, int]] = [(body, 0)]  # the whole body: every key a part could hide under
    items, messages = body.get("input"), body.get("messages")
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("type") is None and "id" in item and "role" not in item:
            return "an input item naming only an 'id' (a stored item) is not served; send its content"
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict) and message.get("audio") is not None:
            return "a message's 'audio' (a stored audio answer) is not served"
    while stack:
        node, depth = stack.pop()
        if depth > _MAX_DEPTH:
            return "the request nests deeper than the gateway reads"
        if isinstance(node, list):
            stack.extend((x, depth + 1) for x in node)
        elif isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str) and kind in _REFUSED_PARTS:
                return _REFUSED_PARTS[kind]
            keys = _FETCHED.get(kind) if isinstance(kind, str) else None
            if keys is not None:
                for k in keys:
                    if k == "file_id" and node.get(k) is not None:
                        return f"a {node['type']} part naming a stored file ({k}) is not served; send it inline"
                    if k != "file_id" and _remote(node.get(k)):
                        return (f"a {node['type']} part the provider would fetch ({k}) is not served: "
                                "the gateway is no way to the internet; send it inline (base64)")
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, (list, dict)))
    return None


def max_output_tokens(body: Mapping[str, Any]) -> int | None:
    """The output bound the request states (`max_tokens`, `max_output_tokens`,
    `max_completion_tokens`), the largest when several, or None."""
    found = [v for k in ("max_tokens", "max_output_tokens", "max_completion_tokens")
             if isinstance(v := body.get(k), int) and not isinstance(v, bool) and v > 0]
    return max(found) if found else None
