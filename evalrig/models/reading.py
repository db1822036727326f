"""Formats of reading the evidence (docs/reading.md): the home's record of every export."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from evalrig.models.base import ChainedRecord, Digest, PathId, Strict, TaskId, Timestamp
from evalrig.models.inputs import Suite

ExportFormat = Literal["trajectories", "pairs", "junit", "csv"]


class ExportedBundle(Strict):
    run_id: PathId
    bundle_digest: Digest
    checkpoint_id: Digest


class ExportEntry(ChainedRecord):
    """$EVALRIG_HOME/exports.jsonl: one line per `export`. A fresh task whose content digest
    is here is no longer fresh to any gate (invariant.fresh-after-seal)."""

    format: ExportFormat
    to: str = Field(description="The file written, as given.")
    bundles: list[ExportedBundle]
    suites: list[Suite] = Field(description="The suites exported.")
    tasks: list[TaskId] = Field(description="The tasks exported (sorted).")
    content: list[Digest] = Field(
        description="The content digests of the tasks exported (distinct, sorted): prompt, files and verifier, "
        "as the gate's fresh-after-seal rule compares them.")
    records: int = Field(ge=0, description="Lines, rows or test cases written.")
    at: Timestamp
