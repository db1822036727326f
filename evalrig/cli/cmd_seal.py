"""`seal` and `lock`: fixing a checkpoint's content and the fixed suite's digests."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, command, emit_json, say
from evalrig.core.words import count


@command("seal", "evalrig seal examples/champion")
def seal_cmd(
    checkpoint_dir: Annotated[Path, typer.Argument(help="The checkpoint directory (with checkpoint.toml).")],
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Compute a checkpoint's content hash and register it in the seal registry.

    The hash (version 2) covers every file, folder and link and every permission bit. The
    first sealing of an id is the one that counts: sealing again changes nothing. Content
    an older rig sealed under hash version 1 keeps that id: its version-2 id is recorded
    with same_as. The registry ($EVALRIG_HOME/seals.jsonl) is the authority; SEAL.json,
    written into the checkpoint, is a convenience copy. Exit 4 for a missing directory, a
    missing or malformed checkpoint.toml, or a socket, FIFO or device inside.
    """
    from evalrig.models.base import format_ts
    from evalrig.store.checkpoint import evalrig_home, seal
    from evalrig.store.clock import utcnow

    now = utcnow()
    sealed = seal(checkpoint_dir, evalrig_home(), now)
    if json_out:
        emit_json(sealed)
        return 0
    from evalrig.core.words import shown

    first = sealed.sealed_at == now
    if sealed.same_as is not None:
        said = f"sealed under hash version 2, same as {sealed.same_as} (sealed by an older rig; it keeps that id)"
    else:
        said = "sealed" if first else "already sealed (the first sealing counts)"
    say([
        f"{said}: {checkpoint_dir}",
        f"  id         {sealed.checkpoint_id}",
        *([f"  same as    {sealed.same_as}"] if sealed.same_as is not None else []),
        f"  name       {shown(sealed.name)}",  # the checkpoint's own words: on one line
        f"  sealed_at  {format_ts(sealed.sealed_at)}",
        f"  files      {sealed.files}",
        f"  bytes      {sealed.bytes}",
    ])
    return 0


@command("lock", "evalrig lock --tasks tasks")
def lock_cmd(
    tasks: Annotated[Path, typer.Option("--tasks", help="The task set directory.")] = Path("tasks"),
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Record the fixed suite's task digests in TASKS/fixed.lock.

    Adds every fixed task not yet locked and never removes one. Refuses (exit 4) a task
    set that removed, moved or edited a locked task, or has any other problem: the fixed
    suite only grows (a changed task is a new task, under a new id).
    """
    from evalrig.store.tasks import lock_fixed, read_lock, write_lock

    old = read_lock(tasks) if (tasks / "fixed.lock").exists() else None
    lock = lock_fixed(tasks)
    added = sorted(set(lock.tasks) - set(old.tasks if old else {}))
    path = write_lock(tasks, lock)
    if json_out:
        emit_json({"lock": str(path), "tasks": lock.tasks, "added": added})
        return 0
    say([f"locked {count(len(lock.tasks), 'fixed task')} in {path} "
         f"({len(added)} new)",
         *(f"  + {task_id}  {lock.tasks[task_id]}" for task_id in added)])
    return 0
