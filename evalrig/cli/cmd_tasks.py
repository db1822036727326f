"""`tasks`: what a task set holds, to pick `run --task` ids from and to check a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, command, emit_json, say
from evalrig.core.words import count

SHORT_DIGEST = len("sha256:") + 12
"""A digest as a person compares it by eye; --json gives it whole."""


@command("tasks", "evalrig tasks --tasks tasks --json")
def tasks_cmd(
    tasks: Annotated[Path, typer.Option("--tasks", help="The task set directory.")] = Path("tasks"),
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """List the tasks of a task set: id, suite, verifier kind, tags and digest.

    One line per task, sorted by id; the digest is the task folder's content hash (the
    one fixed.lock records), shortened to 12 hex digits (--json gives every digest whole,
    the verifier's identity and the task set's id). A task set with any problem is refused
    as `evalrig validate` would (exit 4, listing each problem).
    """
    from evalrig.store.tasks import load_taskset

    taskset = load_taskset(tasks)
    if json_out:
        emit_json({
            "tasks_dir": str(tasks),
            "taskset_id": taskset.id,
            "tasks": [{"id": t.id, "suite": t.suite, "tags": list(t.spec.tags),
                       "verifier": t.verifier_identity, "digest": t.digest, "dir": str(t.dir)}
                      for t in taskset.tasks],
        })
        return 0
    rows = [(t.id, t.suite, t.spec.verifier.kind, ",".join(t.spec.tags) or "-", t.digest[:SHORT_DIGEST])
            for t in taskset.tasks]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, [*widths, 0], strict=True)).rstrip()
             for row in rows]
    n = len(rows)
    say([*lines, f"{count(n, 'task')} in {tasks} (task set {taskset.id[:SHORT_DIGEST]})"],
        result=n)
    return 0
