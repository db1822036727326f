"""`retire.json` in a comparison bundle: what `retire` moved out of the task set's fresh/ for
this train (docs/curves.md, "Retiring a train's fresh tasks")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from evalrig.models.base import Digest, Record, Strict, TaskId, Timestamp


class Move(Strict):
    task_id: TaskId
    source: str = Field(description="The task folder before, relative to the task set.")
    dest: str = Field(description="The task folder after, relative to the task set.")
    why: Literal["named", "failed", "sample", "retired"] = Field(
        description="named: --graduate; failed: the kept side failed a trial (--graduate-failed); sample: "
        "drawn from the tasks it passed on every trial (--sample); retired: to retired/.")


class RetireFile(Record):
    kind: Literal["retire"] = "retire"
    comparison_digest: Digest
    train: str = Field(description="The short comparison digest: retired/<train>/ holds the rest.")
    kept: Literal["champion", "candidate"] = Field(
        description="The side the train keeps in service: the candidate when its last non-advisory decision "
        "promotes, else the champion.")
    kept_checkpoint_id: Digest
    decision_digest: Digest | None = Field(description="That decision (from the gate ledger); null when none.")
    tasks_dir: str = Field(description="The task set, as given.")
    sample: int = Field(ge=0, description="--sample N.")
    graduated: list[Move] = Field(description="Into fixed/ (suite rewritten, created_at kept), then locked.")
    retired: list[Move] = Field(description="Into retired/<train>/, which no command reads as a suite.")
    complete: bool = Field(description="false while the moves are under way: retire run again finishes them.")
    at: Timestamp


FORMATS: dict[str, type[BaseModel]] = {"retire": RetireFile}
