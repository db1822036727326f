"""What a forwarded call shows the provider, kept for the attempt-end canary scan of the
calls taken together (docs/gateway.md, "The canary across calls").

A value split across calls is in no one call's body, so the per-call scan cannot see it.
The ledger (ledger.py) feeds, call after call in `seq` order, two kinds of stream to
scanners that carry their state across calls: each forwarded header's values, and the
prompt text (`prompt_text`), each concatenated with no separator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["prompt_text"]

_NOT_ROOTS = frozenset({"model"})
"""The top-level keys whose strings are not joined. Every other one is: the prompt itself
(`messages`, `input`, `instructions`, `system`, `tools`) and everything else the provider
reads as text or passes on (`response_format` schemas, `prediction`, `metadata`, `user`,
`stop`…), so a half hidden in any of them is joined too (a red team split a value between
two calls' `metadata`)."""
_NOT_TEXT = frozenset({"type", "role", "id", "tool_call_id", "tool_use_id", "call_id", "status", "model",
                       "url", "data", "file_data", "image_url", "media_type", "detail", "format", "ttl",
                       "signature", "encrypted_content"})
"""A string under one of these keys is structure, an identifier or an inline binary (which
the per-call scan sees whole), not text the model reads; every other string under the roots
is (message contents, text parts, tool calls' arguments and inputs, tool results, tool
names and descriptions, schemas, metadata values)."""
_MAX_DEPTH = 64


def prompt_text(body: Mapping[str, Any]) -> bytes:
    """The string contents a model reads in a request body, in document order, joined with
    no separator (UTF-8). Object keys are not taken."""
    out: list[str] = []
    stack: list[tuple[str, Any, int]] = [(k, v, 0) for k, v in reversed(list(body.items())) if k not in _NOT_ROOTS]
    while stack:
        key, node, depth = stack.pop()
        if isinstance(node, str):
            if key not in _NOT_TEXT:
                out.append(node)
        elif depth >= _MAX_DEPTH:
            continue
        elif isinstance(node, list):
            stack.extend((key, x, depth + 1) for x in reversed(node))
        elif isinstance(node, dict):
            stack.extend((k, v, depth + 1) for k, v in reversed(node.items()))
    return "".join(out).encode("utf-8", "surrogatepass")
