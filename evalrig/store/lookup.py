"""The one task lookup of the readers (`show`, `export`, `report`, `verify`): the tasks a run
judged, found in the task set it names (or `--tasks`), retired ones included.

After `retire` a train's fresh tasks have left `fresh/`: they are in `retired/<train>/`, or
graduated into `fixed/` (docs/curves.md, "Retiring a train's fresh tasks"), and a later
train's fresh task may even carry a retired one's id. The run's manifest recorded every
fresh task's content digest (`taskset.fresh_content`), so a fresh task is found by id and
digest: in the live suites first, else in any `retired/<train>/` folder of the set. Given a
`retired/<train>/` folder itself, the set that holds it is read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from evalrig.store.layout import RETIRED
from evalrig.store.tasks import LoadedTask, TaskSet, content_digest, load_task, load_taskset


@dataclass(frozen=True)
class RunTasks:
    """The tasks of a run, by id: the live set's, a fresh task's retired copy where the live
    one is absent or not the content the run judged. `same_set`: the live set is the run's,
    byte for byte (its digest is the manifest's)."""

    dir: Path
    taskset: TaskSet
    by_id: dict[str, LoadedTask]
    same_set: bool

    def get(self, task_id: str) -> LoadedTask | None:
        return self.by_id.get(task_id)

    def known(self, task_id: str, fresh_content: Mapping[str, str]) -> bool:
        """Whether this copy of the task is certainly the one the run judged: the whole set is
        the run's, or a fresh task's content digest is the one recorded."""
        task = self.by_id.get(task_id)
        if task is None:
            return False
        want = fresh_content.get(task_id)
        return self.same_set or (want is not None and content_digest(task) == want)


def task_set_dir(tasks_dir: Path) -> Path:
    """The task set meant: a `retired/<train>/` folder is read as the set that holds it."""
    tasks_dir = Path(tasks_dir)
    if tasks_dir.parent.name == RETIRED and not (tasks_dir / "fresh").is_dir():
        return tasks_dir.parent.parent
    return tasks_dir


def _retired_tasks(dir: Path) -> list[LoadedTask]:
    out: list[LoadedTask] = []
    root = dir / RETIRED
    try:
        trains = sorted(e.path for e in os.scandir(root) if e.is_dir())
    except OSError:
        return out
    for train in trains:
        try:
            folders = sorted(e.path for e in os.scandir(train) if e.is_dir() and not e.name.startswith("."))
        except OSError:
            continue
        for folder in folders:
            got = load_task(Path(folder), "fresh")
            if not isinstance(got, list):
                out.append(got)
    return out


def run_tasks(tasks_dir: Path, taskset_id: str, fresh_content: Mapping[str, str]) -> RunTasks:
    """The run's tasks (the set must load: its errors are exit 4 as `load_taskset`'s)."""
    dir = task_set_dir(tasks_dir)
    taskset = load_taskset(dir)
    by_id = taskset.by_id()
    same = taskset.id == taskset_id
    wanted = {tid: d for tid, d in fresh_content.items()
              if not same and (tid not in by_id or content_digest(by_id[tid]) != d)}
    if wanted:
        for task in _retired_tasks(dir):
            if wanted.get(task.id) == content_digest(task):
                by_id[task.id] = task
                del wanted[task.id]
    return RunTasks(dir, taskset, by_id, same)
