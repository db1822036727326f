"""The settings of a run: what the command asks for, its defaults, and on a resume the
bundle's, refusing every change that could change an outcome (docs/cli.md, `run`).

What `resolve_settings` returns is what enters the manifest's `settings` and, through
`core.plan.OutcomeSettings`, every trial's inputs id.

Choices the contract leaves open:
- Resume by the same command: an option the command leaves out takes its default, so
  leaving out a flag the first run gave is a difference (refused when it can change an
  outcome). With `--resume`, a left-out option takes the manifest's value.
- What may differ on a resume (`models.run.MAY_CHANGE_ON_RESUME`: where and how many at
  once, never what) is taken from this command or its defaults, never from the manifest.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalrig.attempt.egress import parse_allow_host
from evalrig.core.errors import Problem, UsageError, invalid
from evalrig.models.run import MAY_CHANGE_ON_RESUME, DefaultsUsed, RunManifest, RunSettings
from evalrig.store.layout import MANIFEST

DEFAULT_REPEAT = 5
DEFAULT_MAX_RETRIES = 2


@dataclass(frozen=True)
class RunRequest:
    """The options of `run`. None means "not given": a default, or with --resume the manifest's."""

    out: Path
    checkpoint: Path | None = None
    tasks: Path | None = None
    repeat: int | None = None
    seed: int | None = None
    jobs: int | None = None
    policy: Path | None = None
    timeout_scale: float | None = None
    max_retries: int | None = None
    sandbox: str | None = None
    executor: str | None = None
    ray_address: str | None = None
    secrets: tuple[str, ...] | None = None
    driver_secrets: tuple[str, ...] | None = None
    keep_workspaces: bool | None = None
    suites: tuple[str, ...] | None = None
    task_ids: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    interpreter_prefixes: tuple[str, ...] | None = None
    resume: bool = False
    argv: tuple[str, ...] = ()
    allow_network: bool | None = None
    allow_hosts: tuple[str, ...] | None = None
    gateway: Path | None = None
    replay: Path | None = None
    max_cost_usd_per_attempt: float | None = None
    max_cost_usd: float | None = None
    defaults: DefaultsUsed | None = None
    """Which of these a defaults file supplied (recorded in a new bundle's manifest)."""


@dataclass(frozen=True)
class Resolved:
    settings: RunSettings
    repeat: int
    seed: int


FLAG = {
    "repeat": "--repeat",
    "seed": "--seed",
    "timeout_scale": "--timeout-scale",
    "max_retries": "--max-retries",
    "sandbox": "--sandbox",
    "secrets": "--secret",
    "driver_secrets": "--driver-secret",
    "suites": "--suite",
    "task_ids": "--task",
    "tags": "--tag",
    "tasks_dir": "--tasks",
    "checkpoint_dir": "--checkpoint",
    "policy_file": "--policy",
    "jobs": "--jobs",
    "executor": "--executor",
    "ray_address": "--ray-address",
    "keep_workspaces": "--keep-workspaces",
    "interpreter_prefixes": "--interpreter-prefix",
    "allow_network": "--allow-network",
    "allow_hosts": "--allow-host",
    "gateway": "--gateway",
    "replay": "--replay",
    "max_cost_usd_per_attempt": "--max-cost-usd-per-attempt",
    "max_cost_usd": "--max-cost-usd",
}


def _abs(p: Path | None) -> str | None:
    return str(Path(p).resolve()) if p is not None else None


def _given(req: RunRequest) -> dict[str, Any]:
    """The options the command gave, under their RunSettings names."""
    vals = {
        "repeat": req.repeat,
        "seed": req.seed,
        "timeout_scale": req.timeout_scale,
        "max_retries": req.max_retries,
        "sandbox": req.sandbox,
        "secrets": sorted(set(req.secrets)) if req.secrets else None,
        "driver_secrets": sorted(set(req.driver_secrets)) if req.driver_secrets else None,
        "suites": sorted(set(req.suites)) if req.suites else None,
        "task_ids": sorted(set(req.task_ids)) if req.task_ids else None,
        "tags": sorted(set(req.tags)) if req.tags else None,
        "tasks_dir": _abs(req.tasks),
        "checkpoint_dir": _abs(req.checkpoint),
        "policy_file": _abs(req.policy),
        "jobs": req.jobs,
        "executor": req.executor,
        "ray_address": req.ray_address,
        "keep_workspaces": req.keep_workspaces,
        "interpreter_prefixes": (sorted({str(Path(p).resolve()) for p in req.interpreter_prefixes})
                                 if req.interpreter_prefixes else None),
        "allow_network": req.allow_network,
        "allow_hosts": allow_hosts(req.allow_hosts) if req.allow_hosts else None,
        "gateway": _abs(req.gateway),
        "replay": _abs(req.replay),
        "max_cost_usd_per_attempt": req.max_cost_usd_per_attempt,
        "max_cost_usd": req.max_cost_usd,
    }
    return {k: v for k, v in vals.items() if v is not None}


def allow_hosts(values: Sequence[str]) -> list[str]:
    """`--allow-host` values normalised and sorted; a malformed one is a usage error (exit 2)."""
    out = set()
    for value in values:
        try:
            out.add(parse_allow_host(value))
        except ValueError as e:
            raise UsageError(f"--allow-host {e}",
                             hint="give a host name or an IP address, with an optional port "
                             "1..65535: --allow-host api.example.com:443") from None
    return sorted(out)


def _defaults() -> dict[str, Any]:
    return {
        "repeat": DEFAULT_REPEAT,
        "seed": 0,
        "timeout_scale": 1.0,
        "max_retries": DEFAULT_MAX_RETRIES,
        "sandbox": "auto",
        "secrets": [],
        "driver_secrets": None,
        "suites": [],
        "task_ids": [],
        "tags": [],
        "policy_file": None,
        "jobs": os.cpu_count() or 1,
        "executor": "local",
        "ray_address": None,
        "keep_workspaces": False,
        "interpreter_prefixes": [],
        "allow_network": False,
        "allow_hosts": [],
        "gateway": None,
        "replay": None,
        "max_cost_usd_per_attempt": None,
        "max_cost_usd": None,
    }


def _manifest_values(m: RunManifest) -> dict[str, Any]:
    vals = m.settings.model_dump()
    vals.update(repeat=m.repeat, seed=m.seed)
    # Found, not given: gather_inputs pins them anew and refuse_other_inputs compares.
    vals.pop("interpreters", None)
    # What may change on resume is taken from this command (or its defaults), not the manifest.
    for k in MAY_CHANGE_ON_RESUME:
        vals.pop(k, None)
    return vals


def resolve_settings(req: RunRequest, manifest: RunManifest | None) -> Resolved:
    """The settings of this run; on a resume, refuse (exit 4) every outcome-affecting change."""
    given = _given(req)
    vals = _defaults()
    if req.resume:
        if manifest is None:
            raise invalid("--resume: no run bundle here (no manifest.json)", file=req.out,
                          hint="start the run without --resume, giving --checkpoint and --tasks")
        vals.update(_manifest_values(manifest))
    vals.update(given)
    for need, flag in (("checkpoint_dir", "--checkpoint"), ("tasks_dir", "--tasks")):
        if vals.get(need) is None:
            raise UsageError(f"{flag} is required to start a run",
                             hint="give --checkpoint DIR --tasks DIR, or --resume to continue a bundle")
    refuse_nesting(Path(req.out), Path(vals["checkpoint_dir"]), Path(vals["tasks_dir"]))
    if vals["allow_hosts"] and not vals["allow_network"]:
        raise UsageError("--allow-host needs --allow-network",
                         hint="the operator grants the network with --allow-network, then names "
                         "each host it may reach with --allow-host HOST[:PORT]")
    if vals["gateway"] is not None and vals["replay"] is not None:
        raise UsageError("--gateway and --replay: give one",
                         hint="--replay serves the recorded calls and reads no key: it needs no --gateway")
    repeat, seed = vals.pop("repeat"), vals.pop("seed")
    try:
        settings = RunSettings(**vals)
    except Exception as e:  # a value out of range reaches here only from a hand-edited manifest
        raise invalid(f"settings: {e}", file=req.out / MANIFEST) from None
    resolved = Resolved(settings, repeat, seed)
    if manifest is not None:
        refuse_changes(manifest, resolved, req.out)
    return resolved


def _inside(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or b in a.parents


def refuse_nesting(out: Path, checkpoint: Path, tasks: Path) -> None:
    """A bundle inside the checkpoint changes the sealed content (the run ends void); one
    inside the task set makes it an extra folder there; a task set inside the checkpoint is
    copied, verifiers and all, into every agent's workspace."""
    for inner, outer, flag_in, flag_out in ((out, checkpoint, "--out", "--checkpoint"),
                                            (out, tasks, "--out", "--tasks"),
                                            (tasks, checkpoint, "--tasks", "--checkpoint")):
        if _inside(inner, outer):
            raise UsageError(f"{flag_in} {inner} is inside {flag_out} {outer}",
                             hint=f"keep {flag_in} outside {flag_out}")
    # Inside another bundle, the new files are ones its manifest does not list: that bundle
    # would never verify again.
    for parent in out.resolve().parents:
        if (parent / MANIFEST).is_file():
            raise UsageError(f"--out {out} is inside the bundle {parent}",
                             hint="give --out a directory outside every bundle")


def shown(v: object) -> str:
    """A setting's value as a refusal names it: a list comma-separated, nothing as "none"."""
    if isinstance(v, list):
        return ", ".join(map(str, v)) if v else "none"
    return "none" if v is None else str(v)


def setting_differences(manifest: RunManifest, now: Resolved) -> list[str]:
    """Each outcome-affecting setting that differs: "--seed: bundle has 0, this command gives 1"."""
    before = _manifest_values(manifest)
    after = now.settings.model_dump()
    after.update(repeat=now.repeat, seed=now.seed)
    diffs = []
    for key in sorted(before, key=lambda k: FLAG.get(k, k)):
        if key in MAY_CHANGE_ON_RESUME:
            continue
        b, a = before[key], after.get(key)
        if isinstance(b, list):
            b, a = sorted(b), sorted(a or [])
        if b != a:
            diffs.append(f"{FLAG.get(key, key)}: bundle has {shown(b)}, this command gives {shown(a)}")
    return diffs


def refuse_changes(manifest: RunManifest, now: Resolved, out: Path) -> None:
    diffs = setting_differences(manifest, now)
    if diffs:
        raise invalid(
            "resume refused: settings that can change outcomes differ from the bundle's",
            file=out / MANIFEST,
            problems=[Problem(None, d) for d in diffs],
            hint="run the original command again (or `evalrig run --out BUNDLE --resume`), "
            "or start a new bundle with a new --out",
        )
