"""`run` and `verify`: evaluate a sealed checkpoint into a run bundle; re-derive a bundle."""

from __future__ import annotations

import math
import os
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from evalrig.cli.app import DebugOpt, JsonOpt, command, emit_json, err, quiet, say
from evalrig.core.errors import ExitCode, UsageError
from evalrig.core.words import count
from evalrig.store.layout import MANIFEST, RUNS

if TYPE_CHECKING:  # the run package is imported when a command runs, not at start-up
    from evalrig.run.lifecycle import RunSummary
    from evalrig.run.progress import Progress


class SandboxChoice(StrEnum):
    auto = "auto"
    bwrap = "bwrap"
    process = "process"


class ExecutorChoice(StrEnum):
    local = "local"
    ray = "ray"


# -- progress ----------------------------------------------------------------------------


class PlainReporter:
    """Not a terminal: a plain line on stderr every few seconds, and warnings as they come."""

    EVERY_S = 5.0

    def __init__(self) -> None:
        self._last = 0.0
        self._unsaid: Progress | None = None
        self._said = ""

    def warning(self, message: str) -> None:
        err(f"warning: {message}")

    def started(self, total: int, kept: int, interrupted: bool = False) -> None:
        err(_start_line(total, kept, interrupted))

    def progress(self, p: Progress) -> None:
        now = time.monotonic()
        if now - self._last < self.EVERY_S and p.done < p.total:
            self._unsaid = p
            return
        self._last, self._unsaid = now, None
        self._say(p)

    def _say(self, p: Progress) -> None:
        self._said = f"{p.done}/{p.total} done: {_counts_of(p)}"
        err(f"{self._said}, {_rate(p):.1f} attempts/s")

    def close(self) -> None:
        """The last counts, when the last line shown is older: the summary's, in its words."""
        p, self._unsaid = self._unsaid, None
        if p is not None and f"{p.done}/{p.total} done: {_counts_of(p)}" != self._said:
            self._say(p)


def _start_line(total: int, kept: int, interrupted: bool) -> str:
    if interrupted:
        return (f"resuming an interrupted run (it stopped before it finished): {kept} of {total} "
                f"trials kept, {total - kept} to run")
    if kept:
        return f"resuming: {kept} of {count(total, 'trial')} kept, {total - kept} to run"
    return f"running {count(total, 'trial')}"


def _counts_of(p: Progress) -> str:
    """The progress line's counts, in the words of the summary's (docs/attempts.md)."""
    from evalrig.run.progress import counts_said

    return (f"{counts_said(p.passed, p.failed, p.agent_error, p.timeout)}; "
            f"{p.infra_error} infra_error")


def _rate(p: Progress) -> float:
    return p.ran / p.elapsed_s if p.elapsed_s > 0 else 0.0


class QuietReporter(PlainReporter):
    """--quiet: warnings only; no progress."""

    def started(self, total: int, kept: int, interrupted: bool = False) -> None:
        pass

    def progress(self, p: Any) -> None:
        pass


class BarReporter:
    """A terminal: a rich progress bar on stderr (done/total, passed, failed, errors, rate, ETA)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self._console = Console(stderr=True, no_color="NO_COLOR" in os.environ)
        self._bar = Progress(
            # rich's default bar is a pinkish red, which reads as failure while all is well
            TextColumn("run"), BarColumn(complete_style="green", finished_style="green"), MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"), TimeRemainingColumn(),
            console=self._console, transient=True,
        )
        self._task: Any = None

    def warning(self, message: str) -> None:
        from evalrig.core.untrusted import escaped

        self._console.print(escaped(f"warning: {message}", newlines=True), markup=False, style="yellow")

    def started(self, total: int, kept: int, interrupted: bool = False) -> None:
        if interrupted:
            self._console.print(_start_line(total, kept, interrupted), markup=False)
        self._bar.start()
        self._task = self._bar.add_task("run", total=total, completed=kept, stats="")

    def progress(self, p: Progress) -> None:
        stats = f"{_counts_of(p)}  {_rate(p):.1f} attempts/s"
        self._bar.update(self._task, completed=p.done, stats=stats)

    def close(self) -> None:
        self._bar.stop()


# -- run ---------------------------------------------------------------------------------


def _summary_lines(s: RunSummary) -> list[str]:
    from evalrig.run.progress import counts_said

    c = s.counts
    return [
        f"run {s.run_id}: {s.status}",
        f"  trials {c.trials}: {counts_said(c.passed, c.failed, c.agent_error, c.timeout)}, "
        f"{c.unscored} unscored",
        f"  attempts {c.attempts} ({c.infra_error} infra_error, {c.interrupted} interrupted); "
        f"{s.kept} kept from before, {s.ran} run now",
        f"  bundle {s.bundle}",
    ]


def _check_suites(suites: list[str]) -> None:
    from evalrig.models.inputs import SUITES

    for s in suites:
        if s not in SUITES:
            raise UsageError(f"--suite {s}: expected one of {', '.join(SUITES)}")


# Options `run` shares with `tripwire` (docs/release-engineers.md: a tripwire takes run's options;
# its run may need the network, a driver's key or a cluster, as the train's did)
ExecutorOpt = Annotated[ExecutorChoice | None, typer.Option("--executor", help="Where attempts run (default local).")]
RayAddressOpt = Annotated[str | None, typer.Option("--ray-address", help="The Ray cluster (with --executor ray); default RAY_ADDRESS, else auto.")]
DriverSecretOpt = Annotated[list[str] | None, typer.Option("--driver-secret", metavar="<name>", help="Pass this environment variable to the drivers and command verifiers of tasks that list it in [episode] or [verifier] secrets, never to the agent (repeatable; a simulated user's or a judge's model key).")]
AllowNetworkOpt = Annotated[bool, typer.Option("--allow-network", help="Grant the network to a checkpoint or task that says network = true (through the egress proxy; else refused, exit 4).")]
AllowHostOpt = Annotated[list[str] | None, typer.Option("--allow-host", metavar="<host[:port]>", help="With --allow-network: a host the agent may reach through the egress proxy, any port unless one is named (repeatable; none: no host).")]
GatewayOpt = Annotated[Path | None, typer.Option("--gateway", metavar="<file>", help="The model gateway's file: upstreams, keys' variables, [prices] (docs/gateway.md); needed by a checkpoint with [models].")]
ReplayOpt = Annotated[Path | None, typer.Option("--replay", metavar="<bundle>", help="Serve every model call from this registered run's recorded calls (no key, no upstream; never decides).")]
MaxCostPerAttemptOpt = Annotated[float | None, typer.Option("--max-cost-usd-per-attempt", metavar="<usd>", help="Every task's candidate budget in metered USD (the lower of it and a task's [budget] wins).")]
MaxCostOpt = Annotated[float | None, typer.Option("--max-cost-usd", metavar="<usd>", help="No attempt starts once the run's metered spend reaches it (the run ends incomplete, exit 5).")]


@command("run", "evalrig run --checkpoint examples/champion --tasks tasks --out runs/champion")
def run(
    out: Annotated[Path, typer.Option("--out", help="The run bundle directory (new, or one to resume).")],
    checkpoint: Annotated[Path | None, typer.Option("--checkpoint", help="The sealed checkpoint to evaluate.")] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="The task set directory.")] = None,
    repeat: Annotated[int | None, typer.Option("--repeat", min=1, help="Repetitions per task (default 5).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, help="Base of every trial's seed (default 0).")] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", min=1, help="Attempts at once (default: the CPU count).")] = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="Pin this release policy file (its sha256).")] = None,
    timeout_scale: Annotated[float | None, typer.Option("--timeout-scale", help="Multiply every time limit (default 1).")] = None,
    max_retries: Annotated[int | None, typer.Option("--max-retries", min=0, help="Retries after infrastructure faults (default 2).")] = None,
    sandbox: Annotated[SandboxChoice | None, typer.Option("--sandbox", help="Isolation level (default auto).")] = None,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
    secret: Annotated[list[str] | None, typer.Option("--secret", metavar="<name>", help="Pass this environment variable to the agent (repeatable).")] = None,
    driver_secret: DriverSecretOpt = None,
    interpreter_prefix: Annotated[list[Path] | None, typer.Option("--interpreter-prefix", metavar="<dir>", help="An interpreter installation the agent's command may run from, shown to it read-only (repeatable; a pyenv or conda directory).")] = None,
    keep_workspaces: Annotated[bool, typer.Option("--keep-workspaces", help="Keep attempt workspaces.")] = False,
    allow_network: AllowNetworkOpt = False,
    allow_host: AllowHostOpt = None,
    gateway: GatewayOpt = None,
    replay: ReplayOpt = None,
    max_cost_usd_per_attempt: MaxCostPerAttemptOpt = None,
    max_cost_usd: MaxCostOpt = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue --out, taking every setting from its manifest.")] = False,
    suite: Annotated[list[str] | None, typer.Option("--suite", metavar="<suite>", help="Only this suite (repeatable; marks the run subset).")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", metavar="<id>", help="Only this task id (repeatable; marks the run subset).")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", metavar="<tag>", help="Only tasks with this tag (repeatable; marks the run subset).")] = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Evaluate one sealed checkpoint on a task set: every selected task x --repeat trials.

    Running the same command again on the same --out resumes it (or: --out BUNDLE --resume).
    Exit 0 complete, 5 trials left unscored (incomplete: run again to resume; or unscored for
    good: fix the verifier or driver and run both sides again), 4 invalid input, 130 interrupted.
    """
    from evalrig.models.run import DefaultsUsed
    from evalrig.run.lifecycle import run_eval
    from evalrig.run.settings import RunRequest
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.config import find_run_defaults

    if timeout_scale is not None and not (timeout_scale > 0 and math.isfinite(timeout_scale)):
        raise UsageError(f"--timeout-scale {timeout_scale}: must be a finite number greater than 0")
    for flag, usd in (("--max-cost-usd-per-attempt", max_cost_usd_per_attempt), ("--max-cost-usd", max_cost_usd)):
        if usd is not None and not (usd > 0 and math.isfinite(usd)):
            raise UsageError(f"{flag} {usd}: must be a finite number of US dollars greater than 0")
    _check_suites(suite or [])
    defaults_used = None
    if not resume:
        defaults_file = find_run_defaults(Path.cwd())
        if defaults_file is not None:
            given = defaults_file.values
            supplied: list[str] = []
            if tasks is None and given.tasks is not None:
                tasks, supplied = defaults_file.path(given.tasks), [*supplied, "tasks"]
            if policy is None and given.policy is not None:
                policy, supplied = defaults_file.path(given.policy), [*supplied, "policy"]
            if repeat is None and given.repeat is not None:
                repeat, supplied = given.repeat, [*supplied, "repeat"]
            if jobs is None and given.jobs is not None:
                jobs, supplied = given.jobs, [*supplied, "jobs"]
            if sandbox is None and given.sandbox is not None:
                sandbox, supplied = SandboxChoice(given.sandbox), [*supplied, "sandbox"]
            # a replay reads no gateway: the defaults' file is for runs that call upstreams
            if gateway is None and replay is None and given.gateway is not None:
                gateway, supplied = defaults_file.path(given.gateway), [*supplied, "gateway"]
            if supplied:
                defaults_used = DefaultsUsed(file=str(defaults_file.file), supplied=sorted(supplied))
    req = RunRequest(
        out=out, checkpoint=checkpoint, tasks=tasks, repeat=repeat, seed=seed, jobs=jobs,
        policy=policy, timeout_scale=timeout_scale, max_retries=max_retries,
        sandbox=sandbox.value if sandbox else None, executor=executor.value if executor else None,
        ray_address=ray_address,
        secrets=tuple(secret) if secret else None,
        driver_secrets=tuple(driver_secret) if driver_secret else None, keep_workspaces=keep_workspaces,
        suites=tuple(suite) if suite else None, task_ids=tuple(task) if task else None,
        tags=tuple(tag) if tag else None,
        interpreter_prefixes=tuple(map(str, interpreter_prefix)) if interpreter_prefix else None,
        resume=resume, argv=tuple(["evalrig", *sys.argv[1:]]),
        # None when not given: with --resume the manifest's value stands
        allow_network=True if allow_network else None,
        allow_hosts=tuple(allow_host) if allow_host else None,
        gateway=gateway, replay=replay, max_cost_usd_per_attempt=max_cost_usd_per_attempt,
        max_cost_usd=max_cost_usd,
        defaults=defaults_used,
    )
    reporter: Any = (QuietReporter() if quiet() else BarReporter() if sys.stderr.isatty() and not json_out
                     else PlainReporter())
    try:
        summary = run_eval(req, evalrig_home(), os.environ, reporter)
    finally:
        reporter.close()
    found = summary.findings
    if json_out:
        emit_json({"run_id": summary.run_id, "status": summary.status,
                   "interrupted": summary.interrupted, "counts": summary.counts,
                   "bundle": str(summary.bundle),
                   "verifier_faults": [{**f.as_dict(), "verifier_dir": str(summary.verifier_dirs.get(f.task_id, ""))}
                                       for f in found.verifier_faults],
                   "driver_faults": [vars(d) for d in found.driver_faults],
                   "final_unscored": list(summary.final_unscored),
                   "stopped_for": summary.stopped_for,
                   "warnings": [found.common_failure.as_dict()] if found.common_failure else []})
    else:
        say(_summary_lines(summary))
    for line in _fault_lines(summary):
        err(line)
    if found.common_failure is not None:
        err(_common_failure_line(summary))
    if summary.interrupted:
        err(f"interrupted: the bundle is resumable; run the same command again "
            f"(or evalrig run --out {summary.bundle} --resume)")
        return int(ExitCode.INTERRUPTED)
    if summary.status != "complete":
        err(_incomplete_line(summary))
        return int(ExitCode.INCOMPLETE)
    if summary.counts.unscored:
        err(_final_unscored_line(summary))
        return int(ExitCode.INCOMPLETE)
    return int(ExitCode.OK)


def _final_unscored_line(s: RunSummary) -> str:
    """A complete run with trials unscored for good (docs/attempts.md, "Faults never help the
    candidate"): each named; no resume runs them again, and compare counts them worst for
    the candidate."""
    n = len(s.final_unscored)
    names = ", ".join(s.final_unscored[:20]) + (f" and {n - 20} more" if n > 20 else "")
    return (f"complete, but {count(n, 'trial')} {'is' if n == 1 else 'are'} unscored for good "
            f"(a fault after the agent's first input; no retry or resume runs {'it' if n == 1 else 'them'} "
            f"again): {names}\n"
            "  -> compare counts each against the candidate (a failure on its side, a pass on the "
            "champion's); if the fault is the verifier's or the driver's, fix it and run both "
            "sides again into new bundles")


def _fault_lines(s: RunSummary) -> list[str]:
    """Each task whose verifier kept faulting, with what it wrote on stderr, and why a
    resume alone will not help (docs/attempts.md, "What a run says")."""
    lines = []
    for f in s.findings.verifier_faults:
        trials = ", ".join(f.trials[:5]) + (f" and {len(f.trials) - 5} more" if len(f.trials) > 5 else "")
        lines.append(f"error: the verifier of task {f.task_id} faulted each time it ran "
                     f"(trials {trials} unscored): {f.error}")
        if f.stderr_head:
            lines.append(f"  its stderr ({s.bundle / f.stderr_file if f.stderr_file else '?'}):")
            lines += [f"  | {line}" for line in f.stderr_head]
            if f.stderr_lines > len(f.stderr_head):
                lines.append(f"  | … ({f.stderr_lines - len(f.stderr_head)} more lines)")
        else:
            lines.append("  it wrote nothing on stderr")
        where = s.verifier_dirs.get(f.task_id)
        lines.append(f"  -> fix the verifier ({where}/, or the [verifier] table of its task.toml)"
                     if where else "  -> fix the task's verifier")
    for d in s.findings.driver_faults:
        trials = ", ".join(d.trials[:5]) + (f" and {len(d.trials) - 5} more" if len(d.trials) > 5 else "")
        lines.append(f"error: the driver of task {d.task_id} is at fault, not the agent (trials {trials} "
                     f"unscored: after every retry, or for good once the agent had its first input): {d.error}")
        lines.append("  -> fix the task's driver (its driver/ folder, or the [episode] table of its task.toml)")
    if s.findings.verifier_faults:
        lines.append("resuming will not help until the verifier is fixed: a resume runs the same "
                     "verifier again. A fixed verifier changes the inputs id of its "
                     "task's trials, so the same command then runs only those trials again and "
                     "keeps every other one.")
    return lines


def _incomplete_line(s: RunSummary) -> str:
    unscored = s.counts.unscored
    if s.stopped_for is not None:  # the user's money is a resource like disk (docs/gateway.md)
        return (f"incomplete: {s.stopped_for}; {count(unscored, 'trial')} "
                f"{'has' if unscored == 1 else 'have'} no scored attempt")
    faulted = sum(len(f.trials) for f in s.findings.verifier_faults)
    resume = f"evalrig run --out {s.bundle} --resume"
    if faulted and faulted == unscored:
        return (f"incomplete: {count(unscored, 'trial')} {'has' if unscored == 1 else 'have'} no scored attempt, each because its "
                f"verifier faulted; fix the verifier, then run the same command again ({resume})")
    if faulted:
        return (f"incomplete: {count(unscored, 'trial')} {'has' if unscored == 1 else 'have'} no scored attempt ({faulted} because their "
                f"verifier faulted: fix it first); run again to resume ({resume})")
    return f"incomplete: {count(unscored, 'trial')} {'has' if unscored == 1 else 'have'} no scored attempt; run again to resume ({resume})"


def _common_failure_line(s: RunSummary) -> str:
    c = s.findings.common_failure
    assert c is not None
    if c.status is None:
        why = ("check that the agent writes its answer where the task expects it "
               "($EVALRIG_OUT/answer.txt)")
    else:
        why = "this looks like a broken setup (a typo in the checkpoint's [agent] command?)"
    return (f"warning: {c.message()}\n"
            f"  -> the run is a valid measurement of failures (exit {0 if s.status == 'complete' else 5}), "
            f"but {why}: see {s.bundle / c.example}; fix the checkpoint, seal it again and run "
            f"into a new --out")


# -- verify ------------------------------------------------------------------------------


@command("verify", "evalrig verify runs/champion --register")
def verify(
    bundle: Annotated[Path, typer.Argument(help="The run bundle to re-derive.")],
    register: Annotated[
        bool, typer.Option("--register", help="When it verifies, record the bundle in $EVALRIG_HOME/runs.jsonl "
                           "so that compare takes it (a bundle made on another machine or home).")
    ] = False,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Re-derive every result of a run bundle from its stored evidence and check every digest.

    A run the home registered is also held to the manifest it registered (signed by the home
    that ran it, unchanged). `--register` takes only a bundle whose manifest is signed by a key
    `$EVALRIG_HOME/trusted_keys` trusts for `register`, never a run id the home holds under
    another digest (the same bundle again: exit 0, nothing written), never a bundle this home
    made. Exit 0 when everything agrees, 4 listing each mismatch or saying why it is not
    registered (nothing is registered then).
    """
    from evalrig.run.verify import verify_and_register, verify_run
    from evalrig.store.checkpoint import evalrig_home

    refuse_what_is_not_a_run_bundle(bundle)
    new: bool | None = None
    if register:
        report, new = verify_and_register(bundle, evalrig_home())
    else:
        report = verify_run(bundle, evalrig_home())
    if json_out:
        emit_json({"bundle": str(bundle), "ok": True, "results": report.results,
                   "rederived": report.rederived, "files": report.files,
                   **({"registered": True, "newly_registered": new} if register else {})})
    else:
        lines = [f"verified {bundle}: {report.files} file digests, {report.results} results "
                 f"({report.rederived} re-derived from evidence) agree"]
        if register:
            lines.append(f"registered in {evalrig_home() / RUNS}" if new
                         else "already registered in the rig's home")
        say(lines)
    return 0


def refuse_what_is_not_a_run_bundle(bundle: Path) -> None:
    """Say "not a run bundle" for a file or a comparison bundle, rather than letting the run
    manifest's schema list every field a comparison manifest lacks."""
    from evalrig.core.digest import loads
    from evalrig.core.errors import invalid

    hint = "give the --out directory of an `evalrig run`"
    if bundle.exists() and not bundle.is_dir():
        raise invalid("not a run bundle (a file, not a directory)", file=bundle, hint=hint)
    try:
        kind = loads((bundle / MANIFEST).read_bytes()).get("kind")
    except (OSError, ValueError, AttributeError):
        return  # verify_run reports a missing or broken manifest, naming it
    if kind == "comparison":
        raise invalid("not a run bundle (a comparison bundle)", file=bundle,
                      hint=hint + "; `evalrig validate BUNDLE` checks a comparison bundle's digests")
