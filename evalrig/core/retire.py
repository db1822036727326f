"""Which of a train's fresh tasks graduate into the fixed suite and which retire (docs/curves.md,
"Retiring a train's fresh tasks"). Pure: the comparison, the decision and where the tasks are
in, the moves out; `evalrig.store.retire` checks the folders and moves them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from evalrig.core.errors import invalid
from evalrig.models.comparison import Comparison, Verdict
from evalrig.models.retire import Move

PROMOTES: frozenset[Verdict] = frozenset({"promote", "promote-maintenance"})


def kept_side(verdict: Verdict | None) -> Literal["champion", "candidate"]:
    """The side a train keeps in service: the candidate when its decision promotes."""
    return "candidate" if verdict in PROMOTES else "champion"


@dataclass(frozen=True)
class Where:
    """What the plan needs to know about the task set."""

    fresh: Mapping[str, str]
    """The train's fresh task ids -> their folder names under fresh/."""
    fixed_ids: frozenset[str]
    fixed_folders: frozenset[str]
    retired_folders: frozenset[str]
    """Folder names already under retired/<train>/."""


def _draw(comparison_digest: str, ids: Sequence[str], n: int) -> list[str]:
    """`n` of `ids`, the same for the same comparison: ordered by sha256(digest, id)."""
    key = {i: hashlib.sha256(f"{comparison_digest}\0{i}".encode()).hexdigest() for i in ids}
    return sorted(sorted(ids, key=lambda i: key[i])[:n])


def plan(c: Comparison, comparison_digest: str, kept: Literal["champion", "candidate"], where: Where,
         graduate: Sequence[str], graduate_failed: bool, sample: int, train: str) -> tuple[list[Move], list[Move]]:
    """(graduated, retired), or an exit-4 error naming every conflict; nothing is moved here."""
    rows = {r.task_id: r for r in c.suites["fresh"].per_task}
    unknown = sorted(set(graduate) - set(rows))
    if unknown:
        raise invalid(f"--graduate {unknown[0]}: not a fresh task of this train"
                      + (f" (nor {', '.join(unknown[1:])})" if unknown[1:] else ""), field="--graduate",
                      hint=f"name fresh tasks of the comparison ({len(rows)} of them: see comparison.json "
                      "suites.fresh.per_task)")
    why: dict[str, Literal["named", "failed", "sample"]] = {t: "named" for t in graduate}

    def counts(task_id: str) -> tuple[int, int]:
        """The kept side's scored passes and scored trials: a trial left unscored (counted
        worst in the comparison) is neither a failure nor a pass here (docs/curves.md)."""
        r = rows[task_id]
        if kept == "candidate":
            return r.candidate_passes, r.candidate_n - (r.candidate_unscored or 0)
        u = r.champion_unscored or 0
        return r.champion_passes - u, r.champion_n - u

    if graduate_failed:
        for t in sorted(rows):
            passes, n = counts(t)
            if n and passes < n:
                why.setdefault(t, "failed")
    clean = [t for t in sorted(rows) if t not in why and counts(t)[1] and counts(t)[0] == counts(t)[1]]
    for t in _draw(comparison_digest, clean, sample):
        why[t] = "sample"
    graduated = [Move(task_id=t, source=f"fresh/{where.fresh[t]}", dest=f"fixed/{where.fresh[t]}", why=why[t])
                 for t in sorted(why)]
    retired = [Move(task_id=t, source=f"fresh/{where.fresh[t]}", dest=f"retired/{train}/{where.fresh[t]}",
                    why="retired") for t in sorted(rows) if t not in why]
    conflicts = [f"{m.task_id}: a fixed task has the same id" for m in graduated if m.task_id in where.fixed_ids]
    conflicts += [f"{m.task_id}: {m.dest} exists" for m in graduated
                  if where.fresh[m.task_id] in where.fixed_folders and m.task_id not in where.fixed_ids]
    conflicts += [f"{m.task_id}: {m.dest} exists" for m in retired if where.fresh[m.task_id] in where.retired_folders]
    if conflicts:
        raise invalid(f"would overwrite: {conflicts[0]}" + (f" (and {len(conflicts) - 1} more: "
                      + "; ".join(conflicts[1:]) + ")" if conflicts[1:] else ""),
                      hint="nothing was moved; rename the task (its folder and id) or the one in the way, "
                      "then retire again")
    return graduated, retired
