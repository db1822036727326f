"""The inputs of a run, found and checked before the bundle is touched: the sealed
checkpoint, the task set, the plan (each trial with its inputs id), the policy pin, the
secrets, the interpreters, the sandbox level and the network grant.

Every refusal here is exit 4 naming the file and field, raised before a new bundle's
directory exists; on a resume, `refuse_other_inputs` keeps a bundle to one sealed
checkpoint on one task set (a task whose content changed is not refused: its trials'
inputs ids change and they run again).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import evalrig
from evalrig.attempt.canary import CANARY_ENV
from evalrig.attempt.sandbox import (
    LevelChoice,
    egress_enforced,
    private_view_why,
    resolve_level,
    seccomp_why,
)
from evalrig.attempt.trial import scratch_base
from evalrig.core.environment import DRIVER_RIG_SET, GATEWAY_VARS, RIG_SET
from evalrig.core.errors import EvalrigError, Problem, invalid
from evalrig.core.plan import Filters, OutcomeSettings, Plan, build_plan
from evalrig.core.tomlerr import key_lines, line_of
from evalrig.models.run import (
    InterpreterPin,
    PolicyPin,
    RunManifest,
    RunSettings,
    SealCheck,
    SealEntry,
)
from evalrig.run.gateway import GatewaySetup, setup_for_file, setup_for_replay
from evalrig.run.settings import Resolved, shown
from evalrig.store.checkpoint import (
    CHECKPOINT_TOML,
    Checkpoint,
    check_interpreter_prefixes,
    check_sealed,
    checkpoint_id,
    history_log,
    load_checkpoint,
    program_digest,
    resolve_commands,
)
from evalrig.store.clock import utcnow
from evalrig.store.gateway import (
    GATEWAY_VARS_HINT,
    ModelUse,
    check_models,
    gateway_var_problems,
    load_gateway_file,
    resolve_keys,
)
from evalrig.store.layout import MANIFEST
from evalrig.store.policy import load_policy
from evalrig.store.recording import load_recording
from evalrig.store.tasks import LoadedTask, TaskSet, load_taskset
from evalrig.store.validate import fresh_before_seal


@dataclass(frozen=True)
class Inputs:
    checkpoint: Checkpoint
    seal: SealCheck
    sealed: SealEntry
    taskset: TaskSet
    tasks: dict[str, LoadedTask]  # by task id
    plan: Plan
    policy_pin: PolicyPin | None
    level: LevelChoice
    secrets: dict[str, str]
    home: Path
    driver_secrets: dict[str, str] = field(default_factory=dict)
    interpreters: list[InterpreterPin] = field(default_factory=list)
    network_warning: str | None = None
    gateway: GatewaySetup | None = None
    """The model gateway's inputs (--gateway or --replay); None when the run serves none."""


def gather_inputs(r: Resolved, home: Path, phase: Literal["start", "resume"],
                  environ: Mapping[str, str], out: Path | None = None) -> Inputs:
    s = r.settings
    checkpoint = load_checkpoint(Path(s.checkpoint_dir))
    check, entry, error = seal_check(Path(s.checkpoint_dir), home, phase)
    if error is not None:
        raise error
    assert entry is not None  # a seal that matched has its registry entry
    history_log(checkpoint)  # a declared log that is not there: refused before any bundle exists
    level = resolve_level(s.sandbox)
    pins = pin_interpreters(checkpoint, s, home, out, level)
    taskset = load_taskset(Path(s.tasks_dir))
    outcome = OutcomeSettings(s.timeout_scale, s.max_retries, s.sandbox, tuple(s.secrets),
                              interpreter_prefixes=tuple(s.interpreter_prefixes),
                              interpreters=tuple((p.field, p.program, p.sha256) for p in pins),
                              allow_network=s.allow_network, allow_hosts=tuple(s.allow_hosts))
    filters = Filters(tuple(s.suites), tuple(s.task_ids), tuple(s.tags))
    plan = build_plan(taskset.tasks, entry.checkpoint_id, r.repeat, r.seed, outcome, filters,
                      Path(s.tasks_dir))
    tasks = {t.id: t for t in taskset.tasks}
    asking = refuse_ungranted_network(checkpoint, [tasks[i] for i in plan.task_ids], s.allow_network)
    planned = [tasks[i] for i in plan.task_ids]
    refuse_shared_uid(level.level, planned, s.secrets, os.geteuid() == 0)
    gateway = gateway_setup(s, checkpoint, planned, level.level, home, entry.checkpoint_id, taskset.id,
                            environ)
    return Inputs(
        checkpoint=checkpoint,
        seal=check,
        sealed=entry,
        taskset=taskset,
        tasks=tasks,
        plan=plan,
        policy_pin=pin_policy(s.policy_file),
        level=level,
        secrets=secret_values(s.secrets, environ, gateway=gateway is not None),
        driver_secrets=secret_values(s.driver_secrets or [], environ, "--driver-secret",
                                     gateway=gateway is not None),
        home=home,
        interpreters=pins,
        network_warning=network_warning(level.level, s.allow_network and asking),
        gateway=gateway,
    )


# -- the model gateway (docs/gateway.md) -----------------------------------------------------


def _line(path: Path, *key: str) -> int | None:
    try:
        return line_of(key_lines(path.read_text(encoding="utf-8")), key)
    except (OSError, UnicodeDecodeError):
        return None


def _gateway_users(checkpoint: Checkpoint, tasks: Sequence[LoadedTask]) -> list[Problem]:
    """What in the run calls models: the checkpoint's [models], drivers and verifiers that say
    `models = true`."""
    ckpt = checkpoint.dir / CHECKPOINT_TOML
    found = []
    if checkpoint.spec.models is not None:
        found.append(Problem(str(ckpt), "the checkpoint names models its agent calls", "models.allowed",
                             _line(ckpt, "models", "allowed")))
    for t in tasks:
        toml = t.dir / "task.toml"
        if t.spec.episode is not None and t.spec.episode.models:
            found.append(Problem(str(toml), "the episode's driver calls models", "episode.models",
                                 _line(toml, "episode", "models")))
        if getattr(t.spec.verifier, "models", False):
            found.append(Problem(str(toml), "the verifier calls models", "verifier.models",
                                 _line(toml, "verifier", "models")))
    return found


def refuse_gateway_vars(checkpoint: Checkpoint) -> None:
    """The rig sets the gateway's variables itself (docs/gateway.md): a checkpoint's env that
    sets one would aim the SDKs elsewhere, or shadow the rig's, so it is refused."""
    problems = gateway_var_problems(checkpoint)
    if problems:
        first = problems[0]
        raise invalid(first.message, file=first.file, field=first.field, line=first.line, problems=problems[1:],
                      hint=GATEWAY_VARS_HINT)


def gateway_setup(s: RunSettings, checkpoint: Checkpoint, tasks: Sequence[LoadedTask], level: str,
                  home: Path, checkpoint_id: str, taskset_id: str,
                  environ: Mapping[str, str]) -> GatewaySetup | None:
    """The gateway's inputs, every refusal (exit 4) made before the first attempt: model
    users without --gateway or --replay, a gateway the sandbox could bypass, the gateway
    file's own problems (keys unset, upstreams missing, models unpriced), a recording that
    is not this run's."""
    refuse_gateway_vars(checkpoint)
    users = _gateway_users(checkpoint, tasks)
    if users and s.gateway is None and s.replay is None:
        first = users[0]
        raise invalid(f"{first.message}, and the run has no model gateway", file=first.file,
                      field=first.field, line=first.line, problems=users[1:],
                      hint="give --gateway FILE (the operator's upstreams and keys, docs/gateway.md) "
                      "or --replay BUNDLE (a registered run's recorded calls)")
    if s.gateway is None and s.replay is None:
        return None
    if not egress_enforced(level):  # type: ignore[arg-type]
        flag = "--gateway" if s.gateway is not None else "--replay"
        raise invalid(
            f"{flag}: under --sandbox process {'without root' if os.geteuid() != 0 else 'here'} the "
            "sandbox gets no network namespace of its own, so the agent could reach the upstreams around "
            "the gateway (and would run as the rig's own user, who holds the keys)", field=flag,
            hint="use --sandbox bwrap, or run the rig as root with util-linux nsenter (docs/gateway.md): "
            "a gateway the agent could bypass proves nothing")
    if s.replay is not None:
        return setup_for_replay(load_recording(Path(s.replay), home, checkpoint_id, taskset_id))
    assert s.gateway is not None
    gw = load_gateway_file(Path(s.gateway))
    keys = resolve_keys(gw, environ)
    check_models(gw, model_uses(checkpoint, tasks), utcnow())
    return setup_for_file(gw.spec, gw.facts(), keys)


def model_uses(checkpoint: Checkpoint, tasks: Sequence[LoadedTask]) -> list[ModelUse]:
    """Every model the run may call, by role, with where it is named."""
    ckpt = checkpoint.dir / CHECKPOINT_TOML
    uses = []
    if checkpoint.spec.models is not None:
        line = _line(ckpt, "models", "allowed")
        uses += [ModelUse(m, "candidate", str(ckpt), f"models.allowed[{i}]", line)
                 for i, m in enumerate(checkpoint.spec.models.allowed)]
    for t in tasks:
        toml = t.dir / "task.toml"
        if t.spec.episode is not None and t.spec.episode.models:
            line = _line(toml, "episode", "models_allowed")
            uses += [ModelUse(m, "driver", str(toml), f"episode.models_allowed[{i}]", line)
                     for i, m in enumerate(t.spec.episode.models_allowed)]
        verifier = t.spec.verifier
        if getattr(verifier, "models", False):
            line = _line(toml, "verifier", "models_allowed")
            uses += [ModelUse(m, "judge", str(toml), f"verifier.models_allowed[{i}]", line)
                     for i, m in enumerate(getattr(verifier, "models_allowed", []))]
    return uses


def seal_check(dir: Path, home: Path, phase: Literal["start", "resume", "end"]
               ) -> tuple[SealCheck, SealEntry | None, EvalrigError | None]:
    """Check the seal against the registry; the check is recorded whatever it finds."""
    at = utcnow()
    try:
        entry = check_sealed(dir, home)
    except EvalrigError as e:
        try:
            current: str | None = checkpoint_id(dir).digest
        except EvalrigError:
            current = None
        return SealCheck(phase=phase, at=at, checkpoint_id=current, matched=False,
                         message=e.message), None, e
    return SealCheck(phase=phase, at=at, checkpoint_id=entry.checkpoint_id, matched=True), entry, None


def pin_policy(path: str | None) -> PolicyPin | None:
    if path is None:
        return None
    loaded = load_policy(Path(path))
    return PolicyPin(name=loaded.spec.name, version=loaded.spec.version, digest=loaded.digest)


def secret_values(names: list[str], environ: Mapping[str, str], flag: str = "--secret", *,
                  gateway: bool = False) -> dict[str, str]:
    """The values of --secret (the agent's) or --driver-secret (drivers' and command
    verifiers') names, read from the rig's environment. With a gateway serving the run
    (`gateway`), its variables are the rig's too (docs/gateway.md)."""
    # The rig's own value would silently win over such a secret, and the rig's value would
    # then be redacted from the evidence as if it were secret.
    rig_set, whose = (RIG_SET, "the agent") if flag == "--secret" else (DRIVER_RIG_SET, "drivers and verifiers")
    if gateway:
        rig_set = rig_set | frozenset(GATEWAY_VARS)
    taken = [n for n in names if n in rig_set or n == CANARY_ENV]
    if taken:
        raise invalid(f"{flag} {', '.join(taken)}: the rig sets this variable for {whose} itself",
                      field=flag, hint="export the value under another name and pass that")
    missing = [n for n in names if n not in environ]
    if missing:
        raise invalid(f"{flag} {', '.join(missing)}: not set in this environment",
                      field=flag, hint="export the variable before running the rig")
    return {n: environ[n] for n in names}


def pin_interpreters(checkpoint: Checkpoint, s: RunSettings, home: Path, out: Path | None,
                     level: LevelChoice) -> list[InterpreterPin]:
    """Check the operator's interpreter prefixes and resolve the checkpoint's commands
    (docs/attempts.md "What runs"); exit 4 naming checkpoint.toml and the field for a
    command that would run anything else. Returns the digest of every program that
    resolved under a prefix."""
    guarded = [("the task set", Path(s.tasks_dir), True), ("$EVALRIG_HOME", home, True),
               ("the rig's own files", Path(evalrig.__file__).parent, False),
               ("the attempts' scratch directory",
                Path(scratch_base(s.keep_workspaces) or tempfile.gettempdir()), False)]
    if out is not None:
        guarded.append(("the --out bundle", out, True))
    prefixes = check_interpreter_prefixes(s.interpreter_prefixes, guarded)
    unprivileged = level.level == "process" and os.geteuid() == 0
    return [InterpreterPin(field=p.field, prefix=str(p.prefix), program=str(p.real),  # type: ignore[arg-type]
                           sha256=program_digest(p.real))
            for p in resolve_commands(checkpoint, prefixes, unprivileged)
            if p.where == "prefix"]


def refuse_ungranted_network(checkpoint: Checkpoint, tasks: Sequence[LoadedTask],
                             granted: bool) -> bool:
    """Whether the checkpoint or a planned task says network = true; without the operator's
    --allow-network that is refused before the first attempt (exit 4, naming each file).

    The network is the operator's grant, never the checkpoint's (docs/security.md)."""
    problems = []
    if checkpoint.spec.agent.network:
        problems.append(Problem(str(checkpoint.dir / CHECKPOINT_TOML),
                                "network = true: the agent asks for the network", field="agent.network"))
    for task in tasks:
        if task.spec.network:
            problems.append(Problem(str(task.dir / "task.toml"),
                                    "network = true: the task asks for the network", field="network"))
        if task.spec.episode is not None and task.spec.episode.network:
            problems.append(Problem(str(task.dir / "task.toml"), "network = true: the episode's "
                                    "driver asks for the network", field="episode.network"))
    if problems and not granted:
        first = problems[0]
        raise invalid(
            f"{first.file}: {first.field} = true, and the operator has not granted the network",
            file=first.file, field=first.field, problems=problems,
            hint="the network is the operator's grant, never the checkpoint's: to let this agent "
            "reach chosen hosts, run again with --allow-network --allow-host HOST[:PORT] "
            "(repeatable; the egress proxy lets it reach only those); else set network = false",
        )
    return bool(problems)


def refuse_shared_uid(level: str, tasks: Sequence[LoadedTask], secrets: Sequence[str], root: bool) -> None:
    """Where a sandbox would run as the rig's own uid (`process` when the rig is not root),
    nothing separates the agent from what runs beside it: refuse (exit 4, naming each file)
    command verifiers that use the untrusted-run service (the agent's code would run as the
    verifier's uid), episode drivers (their private data) and --secret (docs/security.md)."""
    if level != "process" or root:
        return
    problems = [Problem(str(t.dir / "task.toml"), "untrusted = true: the verifier runs the agent's "
                        "code, which would run as the rig's own user", field="verifier.untrusted")
                for t in tasks if getattr(t.spec.verifier, "untrusted", False)]
    problems += [Problem(str(t.dir / "task.toml"), "an episode's driver would run as the same user "
                         "as the agent", field="episode.driver")
                 for t in tasks if t.spec.episode is not None]
    problems += [Problem("--secret", f"--secret {name}: the agent would run as the rig's own user, "
                         "who can read every secret of the run") for name in secrets]
    if problems:
        first = problems[0]
        raise invalid(
            f"{first.file}: {first.message} under --sandbox process without root",
            file=first.file, field=first.field, problems=problems,
            hint="under --sandbox process without root every sandbox runs as the rig's own user, "
            "so nothing keeps the agent from the verifier, the driver or the secrets: use "
            "--sandbox bwrap, or run the rig as root (each sandbox then gets a uid of its own)")


def network_warning(level: str, networked: bool) -> str | None:
    """Said on stderr and in the provenance when a grant cannot go through the egress proxy."""
    if not networked or egress_enforced(level):  # type: ignore[arg-type]
        return None
    return ("--allow-network under --sandbox process without root: the grant is unenforced "
            "(the agent reaches the host's network directly, not through the egress proxy, so "
            "--allow-host does not bind it and network.jsonl is not written); run as root or "
            "under bwrap to enforce it")


def train_warnings(inputs: Inputs, checkpoint: Path | str) -> list[str]:
    """Said before the first attempt, not kept: what makes a gate of this run block whatever
    its results (fresh tasks made before the checkpoint's seal)."""
    w = fresh_before_seal(inputs.taskset.fresh_created_at(), inputs.sealed.sealed_at, checkpoint)
    return [w] if w is not None else []


def run_warnings(inputs: Inputs) -> list[str]:
    """The sandbox warnings of this run, said on stderr and kept in the provenance."""
    warnings = [w for w in (inputs.level.warning, inputs.network_warning) if w]
    if inputs.level.level == "process" and os.geteuid() == 0:
        why = private_view_why()
        if why is not None:  # docs/security.md, "What `process` leaves on the host"
            warnings.append(
                "under --sandbox process the agent gets no private mount and IPC namespaces "
                f"here ({why}): it sees the host's /tmp, /var/tmp, /dev/shm and System V IPC; "
                "after each attempt the rig removes what its uid left there and records it "
                "in the result's leftovers_removed")
    if inputs.level.level == "process" and os.geteuid() == 0:
        exposed = _exposed_to_others(inputs)
        if exposed:  # docs/security.md, "What it does not promise" (the untrusted-run service)
            warnings.append(
                f"under --sandbox process the agent can read the verifier/ or driver/ files of "
                f"{len(exposed)} planned task(s) (first: {exposed[0]}): every user may read them "
                "where they lie; make the task set its owner's alone (chmod -R go-rwx on it) "
                "or use --sandbox bwrap")
    why = seccomp_why(inputs.level.level)
    # docs/security.md, "Kernel state outside the sandbox"
    unfiltered = None if why is None else (
        f"the agent runs without the seccomp filter here ({why}): it can keep keys in its "
        "uid's kernel keyrings, which outlive the attempt, and make user namespaces of its "
        "own, whose mounts the disk allowance does not see")
    not_root = inputs.level.level == "process" and os.geteuid() != 0
    if unfiltered is not None and not not_root:
        warnings.append(f"under --sandbox {inputs.level.level} {unfiltered}")
    if not_root:
        # As root the agent gets an unprivileged uid of the pool (docs/attempts.md).
        warnings.append(
            f"under --sandbox process the agent runs as the rig's own user (uid {os.geteuid()}): "
            f"it can write the rig's home ({inputs.home}) and every bundle that user may "
            "write; run the rig as root (the agent then gets an unprivileged uid of its own) "
            "or use --sandbox bwrap" + (f"; and {unfiltered}" if unfiltered else ""))
        if any(t.spec.episode is not None for t in inputs.tasks.values()):
            warnings.append(
                "under --sandbox process the agent runs as the same user as its episode's "
                "driver: it can read and change the driver's files (its copy of driver/, and "
                "EVALRIG_DRIVER_OUT, what the verifier grades); run the rig as root or use "
                "--sandbox bwrap (docs/security.md, \"Episode drivers\")")
    return warnings


def _exposed_to_others(inputs: Inputs) -> list[str]:
    """Files under a planned task's verifier/ or driver/ that any user may read: every folder
    from / down to them searchable by others, the file readable by others. Under `process`
    the agent's uid is such an "other" (as root) or the owner itself (not root: then the run
    already says the agent can read everything its user may)."""
    import stat

    def open_to_others(path: Path) -> bool:
        try:
            for folder in reversed(path.parents):
                if not os.stat(folder).st_mode & stat.S_IXOTH:
                    return False
            return bool(os.stat(path).st_mode & stat.S_IROTH)
        except OSError:
            return False

    exposed = []
    for task in inputs.tasks.values():
        for part in ("verifier", "driver"):
            folder = task.dir / part
            if not folder.is_dir():
                continue
            first = next((f for f in sorted(folder.rglob("*")) if f.is_file() and open_to_others(f)), None)
            if first is not None:
                exposed.append(str(first))
                break
    return exposed


def refuse_other_inputs(manifest: RunManifest, inputs: Inputs, attempted: set[str],
                        out: Path) -> None:
    """A bundle evaluates one checkpoint on one task set; a resume must not mix them.

    A task whose content changed is no reason to refuse: its trials' inputs ids change,
    so they run again. A task that is gone would leave results no plan accounts for.
    """
    problems = []
    if manifest.checkpoint.id != inputs.sealed.checkpoint_id:
        problems.append(Problem(None, f"checkpoint: bundle has {manifest.checkpoint.id}, "
                                      f"this command gives {inputs.sealed.checkpoint_id}"))
    problems += _interpreter_changes(manifest.settings.interpreters, inputs.interpreters)
    facts = inputs.gateway.facts if inputs.gateway is not None else None
    if manifest.gateway != facts:
        problems.append(Problem(None, "--gateway: the gateway file or the price table (genai-prices "
                                      "version, [prices]) differs from the bundle's: "
                                      f"{_facts_said(manifest.gateway)} then, {_facts_said(facts)} now"))
    if manifest.policy_pin != inputs.policy_pin:
        before = manifest.policy_pin.digest if manifest.policy_pin else "none"
        after = inputs.policy_pin.digest if inputs.policy_pin else "none"
        problems.append(Problem(None, f"--policy: bundle pinned {before}, this command gives {after}"))
    gone = sorted(attempted - {t.trial_id for t in inputs.plan.trials})
    if gone:
        problems.append(Problem(None, f"--tasks: the bundle has attempts of trials the task set "
                                      f"no longer has: {shown(gone[:5])}"
                                      + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")))
    if problems:
        raise invalid("resume refused: the inputs differ from the bundle's", file=out / MANIFEST,
                      problems=problems,
                      hint="a bundle evaluates one sealed checkpoint on one task set: "
                      "start a new bundle with a new --out")


def _facts_said(facts: object) -> str:
    from evalrig.models.gateway import GatewayFacts

    if not isinstance(facts, GatewayFacts):
        return "no gateway"
    return (f"file {facts.file_digest}, genai-prices {facts.genai_prices}, [prices] {facts.prices_digest}")


def _interpreter_changes(before: list[InterpreterPin], after: list[InterpreterPin]) -> list[Problem]:
    """Each command that resolves to another interpreter program than when the bundle began."""
    problems = []
    before_pins = {p.field: p for p in before}
    for pin in after:
        was = before_pins.pop(pin.field, None)
        if was is not None and was != pin:
            problems.append(Problem(None, f"{pin.field}: the interpreter {was.program} "
                                          f"(sha256 {was.sha256}) is now {pin.program} "
                                          f"(sha256 {pin.sha256})"))
        elif was is None:
            problems.append(Problem(None, f"{pin.field}: resolves now to {pin.program} under "
                                          f"--interpreter-prefix {pin.prefix}, not so when "
                                          "the bundle began"))
    for was in before_pins.values():
        problems.append(Problem(None, f"{was.field}: resolved to {was.program} under "
                                      f"--interpreter-prefix {was.prefix} when the bundle "
                                      "began, no longer"))
    return problems
