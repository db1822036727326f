"""The episode's rules as pure functions (docs/episodes.md): which lines are valid frames,
whether a driver answered tool calls rightly, and the transcript's `prefix` digest.

Pure: bytes and values in, models or reasons out. The relay (evalrig.attempt.episode)
applies them to live pipes; `verify` and the tests apply them to a transcript.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from pydantic import ValidationError

from evalrig.core.digest import sha256_json
from evalrig.models.episode import ChatMessage, DriverLine, MessageFrame

MAX_TOOL_CALLS = 64
MAX_FRAME_DEPTH = 128
"""The deepest frame either side may send (docs/episodes.md, \"Frames\")."""
MAX_ARGUMENT_DEPTH = 64
TOOL_CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class BadFrame(ValueError):
    """A line that is not a valid frame; the message says why (never quoting the line)."""


def _depth_within(value: Any, limit: int) -> bool:
    """Whether `value` nests at most `limit` containers deep (iterative)."""
    todo = [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict):
            if d > limit:
                return False
            todo.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            if d > limit:
                return False
            todo.extend((x, d + 1) for x in v)
    return True


def parse_object(line: bytes) -> dict[str, Any]:
    """One JSON object that orjson parses and re-encodes; BadFrame otherwise."""
    try:
        doc = orjson.loads(line)
        orjson.dumps(doc)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, TypeError) as e:
        raise BadFrame(f"not a JSON object ({e})") from None
    if not isinstance(doc, dict):
        raise BadFrame("not a JSON object")
    if not _depth_within(doc, MAX_FRAME_DEPTH):
        # the transcript wraps a frame one level deeper, and orjson writes at most 254 levels:
        # a deeper frame would crash the relay, on the agent's (or the driver's) input
        raise BadFrame(f"nested over {MAX_FRAME_DEPTH} deep")
    return doc


def _problem(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(frame)"
    return f"{where}: {err['msg']}"


def agent_frame(line: bytes, max_bytes: int) -> MessageFrame:
    """The agent's line as a `message` frame, or BadFrame saying what is wrong with it."""
    if len(line) > max_bytes:
        raise BadFrame(f"a line of {len(line)} bytes, over max_output_bytes ({max_bytes})")
    doc = parse_object(line)
    if doc.get("type") != "message":
        raise BadFrame(f"type: expected \"message\", got {str(doc.get('type'))[:40]!r}")
    try:
        frame = MessageFrame.model_validate(doc)
    except ValidationError as e:
        raise BadFrame(_problem(e)) from None
    msg = frame.message
    if msg.role != "assistant":
        raise BadFrame(f"message.role: expected \"assistant\", got {msg.role!r}")
    calls = msg.tool_calls or []
    if not calls and not (msg.content or "").strip():
        # tau2's own loop rejects such a message; passing it on would make the rig's episode
        # and tau2's differ (docs/episodes.md, "Frames")
        raise BadFrame("message: neither content (non-empty after stripping whitespace) nor tool calls")
    if len(calls) > MAX_TOOL_CALLS:
        raise BadFrame(f"message.tool_calls: {len(calls)} calls, over {MAX_TOOL_CALLS}")
    seen: set[str] = set()
    for i, call in enumerate(calls):
        if not TOOL_CALL_ID.fullmatch(call.id):
            raise BadFrame(f"message.tool_calls[{i}].id: expected [A-Za-z0-9_-]{{1,64}}")
        if call.id in seen:
            raise BadFrame(f"message.tool_calls[{i}].id: {call.id!r} is not unique")
        seen.add(call.id)
        try:
            args = orjson.loads(call.function.arguments)
        except orjson.JSONDecodeError:
            raise BadFrame(f"message.tool_calls[{i}].function.arguments: not JSON text") from None
        if not isinstance(args, dict):
            raise BadFrame(f"message.tool_calls[{i}].function.arguments: not the JSON text of an object")
        if not _depth_within(args, MAX_ARGUMENT_DEPTH):
            raise BadFrame(f"message.tool_calls[{i}].function.arguments: nested over {MAX_ARGUMENT_DEPTH} deep")
    return frame


def driver_frame(line: bytes) -> Any:
    """The driver's line as a session, reply or end frame, or BadFrame."""
    doc = parse_object(line)
    try:
        return DriverLine.model_validate(doc).root
    except ValidationError as e:
        raise BadFrame(_problem(e)) from None


def tool_reply_problem(calls: list[str], messages: list[ChatMessage]) -> str | None:
    """Why a reply to an assistant message with these tool-call ids is wrong, or None:
    exactly one tool message per call, in order, and nothing else."""
    if not calls:
        if any(m.role != "user" for m in messages):
            return "a reply to a message without tool calls may hold only user messages"
        return None
    got = [m.tool_call_id if m.role == "tool" else None for m in messages]
    if got != calls:
        return (f"tool calls {calls} answered with {len(messages)} message(s) "
                "(expected one tool message per call, in order)")
    return None


def tool_errors(messages: list[ChatMessage]) -> int:
    """Tool messages the driver marked `"error": true`."""
    return sum(1 for m in messages if m.role == "tool" and (m.model_extra or {}).get("error") is True)


VERIFIER_DECIDES = frozenset({"driver_end", "agent_exit", "max_turns", "max_tool_errors", "budget"})
"""The terminations after which the task's verifier decides the status."""
AFTER_END = "written after end"
"""The reason on an agent's line written after the rig's `end` (it makes the episode an agent_error)."""
UNTERMINATED = "no newline after it: the output ended in the middle of this line"
"""The reason on what a side wrote after its last newline when its output ended: not a
frame, kept as raw text. The agent's makes the episode an agent_error, even after `end`."""
_SPOILS_THE_END = frozenset({AFTER_END, UNTERMINATED})


def termination_of(lines: list[dict[str, Any]]) -> str | None:
    """What ended an episode, read from its transcript's lines: the termination of the rig's
    last `end` or `finish` frame, made `agent_error` by an agent line written after `end` or
    left without its newline.
    None when no such frame was written (a driver at fault after `finish`, say, is not in
    the transcript: its attempt is an infra_error, never re-derived)."""
    found = None
    for line in lines:
        frame = line.get("frame")
        if line.get("from") == "rig" and isinstance(frame, dict) and frame.get("type") in ("end", "finish"):
            found = frame.get("termination")
        elif (line.get("from") == "agent" and line.get("reason") in _SPOILS_THE_END
              and found in VERIFIER_DECIDES):
            found = "agent_error"
    return found if isinstance(found, str) else None


def prefix(messages: list[dict[str, Any]]) -> str:
    """`sha256:<hex>` of the canonical JSON of the chat messages exchanged before a frame."""
    return sha256_json(messages)
