"""Which attempt of a trial counts (docs/attempts.md, "Resume"). Pure.

A trial's result is its last scored attempt made with the trial's current inputs (the
inputs id of its latest attempt), so a result kept from before a task changed never
stands in for the rerun. A trial with no scored attempt has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from evalrig.models.run import SCORED


class ResultLike(Protocol):
    @property
    def trial_id(self) -> str: ...
    @property
    def inputs_id(self) -> str: ...
    @property
    def status(self) -> str: ...


R = TypeVar("R", bound=ResultLike)


def final_of(results: Sequence[R]) -> dict[str, R]:
    """trial_id → the result that counts, over any result records in file order (a run
    bundle's Result models, or compare's lighter records)."""
    current = {r.trial_id: r.inputs_id for r in results}
    return {r.trial_id: r for r in results if r.status in SCORED and r.inputs_id == current[r.trial_id]}
