"""Episodes (docs/episodes.md): the frames an agent and a driver exchange through the rig,
and the transcript line the rig keeps of each. (The `[episode]` table of task.toml is
an input: `evalrig.models.inputs.EpisodeSection`.)

Chat messages inside frames are other people's format (the OpenAI chat shape that tau2,
BFCL and the fine-tuning libraries share): keys the rig does not name are kept as they
came. Every frame itself rejects an unknown top-level key, like the rig's own files.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, RootModel, SerializerFunctionWrapHandler, model_serializer

from evalrig.models.base import Digest, PathId, Strict, TaskId, without_null
from evalrig.models.run import Termination


class _Open(Strict):
    """Someone else's object: keys the rig does not name are kept as they came."""

    model_config = ConfigDict(extra="allow")


class ToolFunction(_Open):
    name: str
    arguments: str = Field(description="The JSON text of an object.")


class ToolCall(_Open):
    id: str
    type: Literal["function"] = "function"
    function: ToolFunction


class ChatMessage(_Open):
    """One chat message (user, assistant or tool); a tool message may carry `error: true`."""

    role: Literal["user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class TurnUsage(Strict):
    """One turn's spend as the agent reported it (kept as sent in the transcript)."""

    cost_usd: float | None = Field(default=None, ge=0)
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)


# -- frames --------------------------------------------------------------------------------


class SessionFrame(Strict):
    """driver → rig → agent: the tools and the opening messages (none: the agent speaks first)."""

    type: Literal["session"]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    messages: list[ChatMessage] = Field(default_factory=list)


class TurnFrame(Strict):
    """rig → agent: one delivery (the driver's reply)."""

    type: Literal["turn"]
    messages: list[ChatMessage]


class EndFrame(Strict):
    """rig → agent: the episode ended; stdin closes after it."""

    type: Literal["end"]
    termination: Termination


class MessageFrame(Strict):
    """agent → rig (and rig → driver): one assistant message."""

    type: Literal["message"]
    message: ChatMessage
    usage: TurnUsage | None = None

    @model_serializer(mode="wrap")
    def _no_null_usage(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_null(handler(self), "usage")


class StartFrame(Strict):
    """rig → driver: the first frame."""

    type: Literal["start"]
    task_id: TaskId
    attempt_id: PathId
    seed: int


class ReplyFrame(Strict):
    """driver → rig: the answer to one assistant message."""

    type: Literal["reply"]
    messages: list[ChatMessage]


class DriverEndFrame(Strict):
    """driver → rig: the counterpart ends the episode."""

    type: Literal["end"]
    reason: str


class FinishFrame(Strict):
    """rig → driver: the episode ended; stdin closes after it."""

    type: Literal["finish"]
    termination: Termination


AnyFrame = (SessionFrame | TurnFrame | EndFrame | MessageFrame | StartFrame | ReplyFrame
            | DriverEndFrame | FinishFrame)


class Frame(RootModel[AnyFrame]):
    """One line of either channel: a JSON object with a `type` (docs/episodes.md, "Frames")."""


DriverFrame = Annotated[SessionFrame | ReplyFrame | DriverEndFrame, Field(discriminator="type")]


class DriverLine(RootModel[DriverFrame]):
    """What a driver may write: session, reply or end."""


# -- the transcript ------------------------------------------------------------------------

Party = Literal["rig", "agent", "driver"]


class TranscriptLine(Strict):
    """One line of transcript.jsonl: a frame as it went, in order. `prefix` only on frames
    to or from the agent that carry chat messages; `raw` and `reason` instead of `frame`
    for a line that was not a JSON object."""

    seq: int = Field(ge=0)
    from_: Party = Field(alias="from")
    to: Party
    frame: dict[str, Any] | None = None
    raw: str | None = Field(default=None, description="A line that was not a JSON object, as text.")
    reason: str | None = Field(default=None, description="Why the line is kept raw or was not relayed.")
    t_ms: float = Field(ge=0, description="Milliseconds since the episode began.")
    prefix: Digest | None = Field(
        default=None, description="sha256 of the canonical JSON of the chat messages exchanged "
        "with the agent before this frame's first message.")

    @model_serializer(mode="wrap")
    def _no_nulls(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        for key in ("frame", "raw", "reason", "prefix"):
            out = without_null(out, key)
        return out
