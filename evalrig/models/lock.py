"""`tasks/fixed.lock`: the digests of the fixed suite, which only grows (docs/tasks.md, "Locking the fixed suite")."""

from __future__ import annotations

from pydantic import Field

from evalrig.models.base import Digest, Record, TaskId


class FixedLock(Record):
    """Written by `evalrig lock --tasks DIR`; `validate` refuses a removed or edited task."""

    tasks: dict[TaskId, Digest] = Field(
        default_factory=dict, description="Fixed task id → its digest (hash of its folder) when locked."
    )
