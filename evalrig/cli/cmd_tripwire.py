"""`tripwire`: run the promoting policy's tripwires on the serving champion (docs/release-engineers.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, LogOpt, command, emit_json, err, quiet, say
from evalrig.cli.cmd_history import describe, log_of
from evalrig.cli.cmd_run import (
    AllowHostOpt,
    AllowNetworkOpt,
    BarReporter,
    DriverSecretOpt,
    ExecutorOpt,
    PlainReporter,
    QuietReporter,
    RayAddressOpt,
    SandboxChoice,
    _summary_lines,
)
from evalrig.core.errors import ExitCode, UsageError


@command("tripwire", "evalrig tripwire --checkpoint examples/candidate --tasks tasks --out runs/tripwire-1")
def tripwire_cmd(
    checkpoint: Annotated[Path, typer.Option("--checkpoint", help="The serving champion's checkpoint directory.")],
    tasks: Annotated[Path, typer.Option("--tasks", help="The task set directory.")],
    out: Annotated[Path, typer.Option("--out", help="The tripwire run's bundle (new, or one to resume).")],
    log: LogOpt = None,
    repeat: Annotated[int | None, typer.Option("--repeat", min=1, help="Repetitions per task (default 5).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, help="Base of every trial's seed (default 0).")] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", min=1, help="Attempts at once (default: the CPU count).")] = None,
    timeout_scale: Annotated[float | None, typer.Option("--timeout-scale", help="Multiply every time limit (default 1).")] = None,
    max_retries: Annotated[int | None, typer.Option("--max-retries", min=0, help="Retries after infrastructure faults (default 2).")] = None,
    sandbox: Annotated[SandboxChoice | None, typer.Option("--sandbox", help="Isolation level (default auto).")] = None,
    secret: Annotated[list[str] | None, typer.Option("--secret", metavar="<name>", help="Pass this environment variable to the agent (repeatable).")] = None,
    interpreter_prefix: Annotated[list[Path] | None, typer.Option("--interpreter-prefix", metavar="<dir>", help="An interpreter installation the agent's command may run from (repeatable).")] = None,
    keep_workspaces: Annotated[bool, typer.Option("--keep-workspaces", help="Keep attempt workspaces.")] = False,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
    driver_secret: DriverSecretOpt = None,
    allow_network: AllowNetworkOpt = False,
    allow_host: AllowHostOpt = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Run the tripwires of the policy that promoted the serving champion, as a resumable run bundle.

    Each check is judged with the thresholds of the promoting policy's [invariants] (with
    `allow_network = true` there, attempts granted --allow-network do not fail `isolated`).
    Appends a tripwire event; when a check fails (an incomplete run fails), also an automatic
    rollback to `previous`. Exit 0 all held, 3 a tripwire failed (rolled back), 4 DIR is not
    the serving champion, 130 interrupted (nothing appended; run the same command to resume).
    """
    import math

    from evalrig.run.settings import RunRequest
    from evalrig.run.tripwire import run_tripwire
    from evalrig.store.checkpoint import evalrig_home

    if timeout_scale is not None and not (timeout_scale > 0 and math.isfinite(timeout_scale)):
        raise UsageError(f"--timeout-scale {timeout_scale}: must be a finite number greater than 0")
    path = log_of(log)
    req = RunRequest(
        out=out, checkpoint=checkpoint, tasks=tasks, repeat=repeat, seed=seed, jobs=jobs,
        timeout_scale=timeout_scale, max_retries=max_retries, sandbox=sandbox.value if sandbox else None,
        secrets=tuple(secret) if secret else None, keep_workspaces=keep_workspaces,
        interpreter_prefixes=tuple(map(str, interpreter_prefix)) if interpreter_prefix else None,
        argv=tuple(["evalrig", *sys.argv[1:]]),
        executor=executor.value if executor else None, ray_address=ray_address,
        driver_secrets=tuple(driver_secret) if driver_secret else None,
        allow_network=True if allow_network else None, allow_hosts=tuple(allow_host) if allow_host else None,
    )
    reporter: Any = (QuietReporter() if quiet() else BarReporter() if sys.stderr.isatty() and not json_out
                     else PlainReporter())
    try:
        t = run_tripwire(req, path, evalrig_home(), os.environ, reporter)
    finally:
        reporter.close()
    if t.event is None:
        assert t.summary is not None
        if json_out:
            emit_json({"interrupted": True, "bundle": str(t.summary.bundle), "event": None, "rollback": None})
        err(f"interrupted: nothing was appended to the release log; run the same command again to resume "
            f"the tripwire run ({t.summary.bundle})")
        return int(ExitCode.INTERRUPTED)
    if json_out:
        emit_json({"held": t.event.held, "already": t.already, "checks": t.event.checks, "event": t.event,
                   "rollback": t.rollback, "no_rollback": t.no_rollback, "log": str(path),
                   "bundle": str(out), "status": t.summary.status if t.summary else None})
    else:
        lines = [f"tripwire {'held' if t.event.held else 'FAILED'}: "
                 + ", ".join(f"{c.name} {'held' if c.held else 'failed'}" for c in t.event.checks)]
        if t.rollback is not None:
            lines.append(f"rolled back automatically: {t.rollback.to} serves from event #{t.rollback.seq}")
        if t.already:
            lines.append("(recorded before: this bundle's events were already in the release log)")
        lines.append(describe(t.event))
        if t.rollback is not None:
            lines.append(describe(t.rollback))
        lines += [f"  {c.name}: {c.detail}" for c in t.event.checks if not c.held]
        if t.summary is not None:
            lines += _summary_lines(t.summary)
        say(lines, result=2 if t.rollback is not None else 1)
    if t.run_error:
        err(f"error: {t.run_error}\n  (the tripwire run counts as failed: its build changed while it ran)")
    if t.no_rollback:
        err(f"warning: the tripwire failed, and nothing was rolled back: {t.no_rollback}")
    return int(ExitCode.OK if t.event.held else ExitCode.BLOCK)
