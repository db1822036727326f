"""`retire`: a train's fresh tasks leave fresh/ (docs/curves.md, "Retiring a train's fresh
tasks"). Every move is planned and checked first (a conflict refuses with nothing moved);
the plan is written to the comparison bundle's `retire.json` before the first move, so that
a crash half-way is finished by running `retire` again, never left half-moved; graduated
tasks have their `suite` rewritten and are then locked, and the plan is marked complete.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

from evalrig.core import retire as core
from evalrig.core.digest import short_digest
from evalrig.core.errors import invalid
from evalrig.core.words import count
from evalrig.models.retire import Move, RetireFile
from evalrig.store import ledger
from evalrig.store.comparison_file import read_comparison
from evalrig.store.files import read_json, write_bytes_atomic, write_json_atomic
from evalrig.store.layout import RETIRE_JSON, RETIRED
from evalrig.store.tasks import TASK_TOML, load_taskset, lock_fixed, write_lock

_SUITE = re.compile(r'(?m)^(\s*suite\s*=\s*)(["\'])fresh\2')


def _folders(dir: Path) -> frozenset[str]:
    try:
        return frozenset(e.name for e in os.scandir(dir))
    except FileNotFoundError:
        return frozenset()


def _rewrite_suite(task_dir: Path) -> None:
    """`suite = "fresh"` becomes `suite = "fixed"`; every other byte (created_at) is kept."""
    toml = task_dir / TASK_TOML
    text = toml.read_text(encoding="utf-8")
    new = _SUITE.sub(lambda m: f'{m.group(1)}"fixed"', text, count=1)
    if new != text:
        write_bytes_atomic(toml, new.encode())


def _move(tasks: Path, m: Move) -> None:
    src, dest = tasks / m.source, tasks / m.dest
    if not src.exists() and dest.is_dir():
        return  # moved before a crash: the plan goes on
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.rename(src, dest)  # one folder, atomic: a task is wholly in one place


def _plan(dir: Path, tasks: Path, graduate: list[str], graduate_failed: bool, sample: int, home: Path,
          now: datetime) -> RetireFile:
    c, digest = read_comparison(dir)
    train = short_digest(digest)
    taskset = load_taskset(tasks)
    by_id = taskset.by_id()
    fresh_ids = sorted(r.task_id for r in c.suites["fresh"].per_task)
    fresh_dir = (tasks / "fresh").resolve()
    missing = [t for t in fresh_ids if t not in by_id or by_id[t].suite != "fresh"
               or by_id[t].dir.is_symlink() or by_id[t].dir.resolve().parent != fresh_dir]
    if missing:
        raise invalid(f"{len(missing)} of the train's {count(len(fresh_ids), 'fresh task')} "
                      f"{'is' if len(missing) == 1 else 'are'} not in {tasks / 'fresh'}/: "
                      + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""), file=tasks,
                      hint="give --tasks the task set this train ran on (its fresh tasks still in fresh/)")
    gates = [g for g in ledger.all_gates(home) if g.comparison_digest == digest and not g.advisory]
    decision = gates[-1] if gates else None
    kept = core.kept_side(decision.verdict if decision else None)
    where = core.Where(
        fresh={t: by_id[t].dir.name for t in fresh_ids},
        fixed_ids=frozenset(t.id for t in taskset.tasks if t.suite == "fixed"),
        fixed_folders=_folders(tasks / "fixed"), retired_folders=_folders(tasks / RETIRED / train))
    graduated, retired = core.plan(c, digest, kept, where, graduate, graduate_failed, sample, train)
    side = c.candidate if kept == "candidate" else c.champion
    return RetireFile(
        comparison_digest=digest, train=train, kept=kept, kept_checkpoint_id=side.checkpoint_id,
        decision_digest=decision.decision_digest if decision else None, tasks_dir=str(tasks), sample=sample,
        graduated=graduated, retired=retired, complete=False, at=now)


def retire(dir: Path, tasks: Path, graduate: list[str], graduate_failed: bool, sample: int, home: Path,
           now: datetime) -> tuple[RetireFile, bool]:
    """Plan and move; (the record, whether this call finished a plan a crash had left half-done)."""
    dir, tasks = Path(dir), Path(tasks)
    path = dir / RETIRE_JSON
    resumed = path.exists()
    if resumed:
        record = read_json(path, RetireFile)
        if record.complete:
            raise invalid(f"this train's fresh tasks were retired already ({record.at:%Y-%m-%d %H:%M} UTC: "
                          f"{len(record.graduated)} graduated, {len(record.retired)} retired)", file=path,
                          hint="nothing to do: each train retires once")
        read_comparison(dir)  # still the comparison the plan was made for
    else:
        record = _plan(dir, tasks, graduate, graduate_failed, sample, home, now)
        write_json_atomic(path, record)
    for m in record.graduated:
        _move(tasks, m)
        _rewrite_suite(tasks / m.dest)
    for m in record.retired:
        _move(tasks, m)
    if record.graduated:
        write_lock(tasks, lock_fixed(tasks))
    record = record.model_copy(update={"complete": True})
    write_json_atomic(path, record)
    return record, resumed
