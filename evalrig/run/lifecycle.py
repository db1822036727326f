"""A run bundle's life: created (or resumed) under its lock, run, finished, registered in
the home. `run_eval` is the outline of a run; each step is a module of `evalrig.run`.

`manifest.json` is written at the start (status `running`) and last of all at the end,
with the digest of every other file; the finished run is then registered in the home's
`runs.jsonl` (docs/security.md), since compare takes only registered bundles.

Choices the contract leaves open:
- A bundle evaluates one checkpoint: a resume whose checkpoint has another id (sealed
  anew) is refused, as is a task set that lost a task the bundle has attempts of
  (run.inputs).
- An attempt killed with the rig keeps its partial evidence in the bundle and in
  `manifest.files`.
- Running the command again on a complete bundle with nothing to rerun writes nothing.
- A checkpoint that changed during the run fails the `end` seal check: the manifest
  records it and the command exits 4.
"""

from __future__ import annotations

import contextlib
import os
import secrets as pysecrets
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from evalrig import __version__
from evalrig.attempt import modelcalls
from evalrig.attempt.evidence import remove_tree
from evalrig.attempt.modelcalls import GatewayUse
from evalrig.attempt.trial import (
    SHM,
    flush_removals,
    scratch_base,
    scratch_owner,
    scratch_owner_dead,
)
from evalrig.core.errors import Problem, invalid
from evalrig.core.plan import Trial
from evalrig.models.run import (
    CheckpointRef,
    DefaultsUsed,
    Provenance,
    Resume,
    RunCounts,
    RunEntry,
    RunManifest,
    RunSettings,
)
from evalrig.run.book import (
    BundleRows,
    TrialBook,
    book_from_rows,
    read_bundle_rows,
    repair_dangling,
)
from evalrig.run.executors import check_executor
from evalrig.run.findings import Findings, find
from evalrig.run.inputs import Inputs, gather_inputs, refuse_other_inputs, run_warnings, seal_check
from evalrig.run.loop import Hooks, Loop, Stop, gateway_use
from evalrig.run.progress import Reporter, SilentReporter
from evalrig.run.provenance import copy_history, new_provenance, taskset_ref
from evalrig.run.reverify import reverify
from evalrig.run.settings import Resolved, RunRequest, resolve_settings
from evalrig.store.bundle import (
    BundleLock,
    bundle_digest,
    check_run_digests,
    file_digests,
    is_atomic_temp,
    manifest_digest,
    write_run_manifest,
)
from evalrig.store.clock import utcnow
from evalrig.store.compare import refuse_unregistered
from evalrig.store.files import read_json, why_no_dir_here, write_json_atomic
from evalrig.store.jsonl import cut_torn_tail, tallying
from evalrig.store.layout import HISTORY, LOCK, LOCK_HOLDER, MANIFEST, PROVENANCE, RUN_JSONL
from evalrig.store.ledger import register_run


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    status: str
    counts: RunCounts
    bundle: Path
    interrupted: bool
    kept: int
    ran: int
    findings: Findings = Findings([], None)
    """What the records say beyond the counters: verifiers that kept faulting, a way most
    attempts failed (run.findings)."""
    verifier_dirs: Mapping[str, Path] = field(default_factory=dict)
    """task id -> the verifier/ folder to fix, for each task in `findings.verifier_faults`."""
    stopped_for: str | None = None
    """Why the run stopped starting attempts before its plan was done (--max-cost-usd reached)."""
    final_unscored: tuple[str, ...] = ()
    """Trials left unscored for good (a fault after the agent's first input, or a verifier
    that kept faulting when re-verified), in plan order: `run` exits 5 naming each."""


@dataclass(frozen=True)
class Turn:
    """This process's turn at a bundle, its settings and inputs checked."""

    out: Path
    argv: tuple[str, ...]
    resolved: Resolved
    inputs: Inputs
    reporter: Reporter
    hooks: Hooks
    leave_cluster: bool
    """This turn joined a Ray cluster to check it: its executor leaves it when closed."""
    defaults: DefaultsUsed | None = None
    """The defaults file that supplied options of this turn's command, if any."""


def run_eval(req: RunRequest, home: Path, environ: Mapping[str, str],
             reporter: Reporter | None = None, hooks: Hooks = Hooks()) -> RunSummary:
    """Start or resume the run bundle at `req.out`; returns how it stands when this ends."""
    reporter = reporter or SilentReporter()
    out = Path(req.out)
    refuse_unusable_out(out)
    if not (out / MANIFEST).exists():
        return _new_bundle(req, home, environ, reporter, hooks)
    with _locked(out, req.argv):
        manifest = _bundle_state(out)
        assert manifest is not None
        turn = _checked_turn(req, manifest, home, "resume", environ, reporter, hooks)
        for name in RUN_JSONL:
            cut_torn_tail(out / name)
        found = _records_as_registered(out, manifest, home)
        with tallying(found) as tallied:
            rows = read_bundle_rows(out)
            refuse_other_inputs(manifest, turn.inputs, {ev["trial_id"] for ev in rows.attempts}, out)
            return _resume(turn, manifest, rows, tallied)


def _records_as_registered(out: Path, manifest: RunManifest, home: Path) -> dict[Path, bytes]:
    """The bundle's record files as a resume finds them, read once. A run that finished
    (incomplete, or complete) has digests, signed and registered in the home: its files must
    still be the ones they name, or the resume would keep lines another writer changed
    (exit 4, naming the file). A run killed before its first finish has none to check
    (docs/security.md, "A run's records are the rig's")."""
    kept: dict[str, bytes | None] = dict.fromkeys(RUN_JSONL)
    problems = check_run_digests(out, manifest, kept=kept)
    if manifest.status != "running":
        if problems:
            first = problems[0]
            raise invalid(f"does not verify: {first.message}: changed by another writer since the run "
                          "last finished", file=first.file, field=first.field, problems=problems[1:],
                          hint="the run's results are void; restore the bundle, or run again into a new --out")
        refuse_unregistered(out, manifest, home)
    return {out / n: b or b"" for n, b in kept.items()}


def _new_bundle(req: RunRequest, home: Path, environ: Mapping[str, str], reporter: Reporter,
                hooks: Hooks) -> RunSummary:
    """Every input checked before the bundle directory exists at all."""
    out = Path(req.out)
    if req.resume:
        resolve_settings(req, None)  # refuses: nothing to resume (and creates nothing)
    _bundle_state(out)
    turn = _checked_turn(req, None, home, "start", environ, reporter, hooks)
    with _locked(out, req.argv):
        if (out / MANIFEST).exists():  # another process got here between the checks
            raise invalid("another run created this bundle meanwhile", file=out,
                          hint="run the command again to resume it")
        return _start(turn)


def refuse_unusable_out(out: Path) -> None:
    """`--out` is the user's input: a path where no bundle directory can be made is refused
    (exit 4) before anything else, naming the path and why."""
    why = why_no_dir_here(out)
    if why is not None:
        raise invalid(f"--out: no bundle directory can be made there: {why}", file=out,
                      hint="give --out a new directory in one you may write (or an existing run bundle)")


@contextlib.contextmanager
def _locked(out: Path, argv: tuple[str, ...]) -> Iterator[BundleLock]:
    """The bundle's lock; a directory that cannot be made or written is the user's --out
    (exit 4), not a bug."""
    lock = BundleLock(out, list(argv))
    try:
        lock.acquire()
    except OSError as e:
        raise invalid(f"--out cannot be written: {e.strerror or e}", file=out,
                      hint="give --out a new directory in one you may write (or an existing "
                      "run bundle you may write)") from None
    try:
        yield lock
    finally:
        lock.release()


def _checked_turn(req: RunRequest, manifest: RunManifest | None, home: Path,
                  phase: Literal["start", "resume"], environ: Mapping[str, str],
                  reporter: Reporter, hooks: Hooks) -> Turn:
    """Settings, executor and inputs, each refused (exit 4) before the bundle is touched."""
    resolved = resolve_settings(req, manifest)
    s = resolved.settings
    joined = check_executor(s.executor, s.ray_address, join=True)
    inputs = gather_inputs(resolved, home, phase, environ, Path(req.out))
    return Turn(Path(req.out), req.argv, resolved, inputs, reporter, hooks, joined, req.defaults)


def _bundle_state(out: Path) -> RunManifest | None:
    """The bundle's manifest; None for a new (absent or empty) --out."""
    if (out / MANIFEST).exists():
        return read_json(out / MANIFEST, RunManifest)
    if out.exists():
        if not out.is_dir():
            raise invalid("--out is a file, not a directory", file=out, hint="give a new directory")
        # A run killed before its first manifest leaves only what `_start` writes before
        # it (no records yet): such a directory starts afresh.
        leftovers = [p.name for p in out.iterdir() if not _start_leftover(p)]
        if leftovers:
            raise invalid("--out exists and is not a run bundle (no manifest.json)", file=out,
                          hint="give a new or empty directory for --out")
    return None


def _start_leftover(p: Path) -> bool:
    name = p.name
    if name in (LOCK, LOCK_HOLDER, PROVENANCE, HISTORY) or is_atomic_temp(name):
        return True
    return name in RUN_JSONL and p.stat().st_size == 0


def _start(turn: Turn) -> RunSummary:
    out, inputs = turn.out, turn.inputs
    warnings = run_warnings(inputs)
    for w in warnings:
        turn.reporter.warning(w)
    write_json_atomic(out / PROVENANCE, new_provenance(turn.argv, warnings))
    history = copy_history(inputs.checkpoint, out)
    for name in RUN_JSONL:
        (out / name).touch()
    book = TrialBook(inputs.plan)
    with tallying({out / name: b"" for name in RUN_JSONL}) as tallied:
        return _start_run(turn, book, history, tallied)


def _start_run(turn: Turn, book: TrialBook, history: str, tallied: Callable[[Path], str]) -> RunSummary:
    out, r, inputs = turn.out, turn.resolved, turn.inputs
    manifest = RunManifest(
        run_id=f"run-{pysecrets.token_hex(8)}", rig_version=__version__,
        checkpoint=CheckpointRef(id=inputs.sealed.checkpoint_id, name=inputs.sealed.name,
                                 sealed_at=inputs.sealed.sealed_at, hash_version=inputs.sealed.version),
        taskset=taskset_ref(inputs.taskset), repeat=r.repeat, seed=r.seed,
        settings=r.settings.model_copy(update={"interpreters": inputs.interpreters}),
        subset=inputs.plan.subset, policy_pin=inputs.policy_pin, plan_digest=inputs.plan.digest,
        status="running", counts=book.counts(), seal_checks=[inputs.seal], history=history,  # type: ignore[arg-type]
        created_at=utcnow(), defaults=turn.defaults,
        gateway=inputs.gateway.facts if inputs.gateway is not None else None,
        replay_of=inputs.gateway.replay_of if inputs.gateway is not None else None,
    )
    manifest = write_run_manifest(out, manifest, inputs.home)
    turn.reporter.started(len(inputs.plan), 0)
    return _run(turn, manifest, book, book.to_run(), 0, tallied)


def _resume(turn: Turn, manifest: RunManifest, rows: BundleRows, tallied: Callable[[Path], str]) -> RunSummary:
    out, inputs = turn.out, turn.inputs
    was_running = manifest.status == "running"
    book = book_from_rows(inputs.plan, rows)
    repaired = repair_dangling(out, rows, book)
    to_run = book.to_run()
    to_reverify = book.to_reverify()
    kept = len(inputs.plan) - len(to_run)
    if not to_run and not to_reverify and not repaired and manifest.status == "complete":
        # Nothing to do: leave a finished bundle byte for byte as it was.
        return RunSummary(manifest.run_id, manifest.status, manifest.counts, out, False, kept, 0,
                          *_findings(turn, manifest.counts), final_unscored=_settled(book))
    prov = read_json(out / PROVENANCE, Provenance)
    said = run_warnings(inputs)
    new_warnings = [w for w in said if w not in prov.sandbox_warnings]
    for w in said:
        turn.reporter.warning(w)
    prov = prov.model_copy(update={
        "sandbox_warnings": prov.sandbox_warnings + new_warnings,
        "resumes": prov.resumes + [Resume(at=utcnow(), kept=kept, rerun=len(to_run))]})
    write_json_atomic(out / PROVENANCE, prov)
    manifest = manifest.model_copy(update={
        "settings": turn.resolved.settings.model_copy(update={"interpreters": inputs.interpreters}),
        "taskset": taskset_ref(inputs.taskset),
        "plan_digest": inputs.plan.digest, "status": "running", "counts": book.counts(),
        "seal_checks": manifest.seal_checks + [inputs.seal], "finished_at": None, "files": {}})
    manifest = write_run_manifest(out, manifest, inputs.home)
    # A manifest still `running` is one its run never finished: killed (kill -9, the machine
    # went down), since a run that stops in any other way writes its last manifest.
    turn.reporter.started(len(inputs.plan), kept, interrupted=was_running)
    return _run(turn, manifest, book, to_run, kept, tallied, to_reverify=to_reverify)


def _run(turn: Turn, manifest: RunManifest, book: TrialBook, to_run: list[Trial],
         kept: int, tallied: Callable[[Path], str],
         to_reverify: list[tuple[Trial, str]] | None = None) -> RunSummary:
    """The re-verifications a resume owes, then the loop, in a scratch directory of its own
    that goes when the loop ends."""
    s = turn.resolved.settings
    stop = Stop()
    scratch = scratch_dir("evalrig-attempts-", keep=s.keep_workspaces)
    try:
        reverify(turn.out, book, to_reverify or [], turn.inputs.tasks, turn.inputs.level.level,
                 s.max_retries, scratch / "reverify", turn.inputs.driver_secrets, s.timeout_scale,
                 _reverify_gateway(turn.inputs, s))
        with stop.handlers():
            loop = Loop(turn.out, turn.inputs, s, book, turn.reporter, turn.hooks, stop, scratch,
                        leave_cluster=turn.leave_cluster)
            loop.execute(to_run)
    finally:
        flush_removals()  # the trial removes attempt roots in the background: wait for that first
        if s.keep_workspaces and s.executor == "local":
            turn.reporter.warning(f"--keep-workspaces: the attempt workspaces are in {scratch}")
        else:
            _remove_scratch(scratch)
        if s.keep_workspaces and s.executor == "ray":
            from evalrig.run.executors.ray import KEPT_WHERE  # the optional extra's module

            turn.reporter.warning(f"--keep-workspaces: the attempt workspaces are {KEPT_WHERE}")
    return _finish(turn, manifest, book, stop.signal is not None, kept, loop.ran, tallied,
                   stopped_for=loop.spent_out)


def _reverify_gateway(inputs: Inputs, s: RunSettings) -> GatewayUse | None:
    """The run's gateway for a resume's re-verifications (a judge that calls models); this
    process serves them with the Gateway its setup made."""
    use = gateway_use(inputs, s)
    if use is not None and inputs.gateway is not None:
        modelcalls.register(use, inputs.gateway.gateway)
    return use


SCRATCH_PREFIXES = ("evalrig-attempts-", "evalrig-verify-")


def scratch_dir(prefix: str, keep: bool) -> Path:
    """Where this run's attempt roots are made: outside every bundle and task set, in the
    place `trial.scratch_base` chooses. Its name carries its owner (`trial.scratch_owner`)
    unless it is kept, so that a later run can remove it once its owner is dead; first,
    the scratch directories of dead owners are swept (docs/attempts.md, "The workspace")."""
    assert prefix in SCRATCH_PREFIXES
    sweep_dead_scratch()
    owner = None if keep else scratch_owner()
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{owner}-" if owner else prefix,
                                 dir=scratch_base(keep)))


def sweep_dead_scratch() -> list[Path]:
    """Remove the scratch directories a killed rig left (kill -9 runs no clean-up): those
    whose name carries an owner that is certainly dead, owned by this user; never one whose
    owner may live (`trial.scratch_owner_dead`), nor a kept one (its name has no owner).
    Returns what was removed."""
    removed = []
    bases = {str(SHM), tempfile.gettempdir(), scratch_base(False) or tempfile.gettempdir()}
    for base in sorted(bases):
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for entry in entries:
            prefix = next((p for p in SCRATCH_PREFIXES if entry.name.startswith(p)), None)
            if prefix is None:
                continue
            owner = entry.name[len(prefix):].rpartition("-")[0]
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (owner and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
                    and scratch_owner_dead(owner)):
                _remove_scratch(Path(entry.path))
                removed.append(Path(entry.path))
    return removed


def _remove_scratch(scratch: Path) -> None:
    """The run's scratch directory, whatever an agent left in it (evidence.remove_tree:
    any depth or name length); what cannot be removed stays, and never fails the run."""
    try:
        remove_tree(scratch)
    except OSError:
        pass


def _finish(turn: Turn, manifest: RunManifest, book: TrialBook, stopped: bool, kept: int,
            ran: int, tallied: Callable[[Path], str], stopped_for: str | None = None) -> RunSummary:
    counts = book.counts()
    checks = list(manifest.seal_checks)
    error = None
    if not stopped:
        check, _, error = seal_check(Path(manifest.settings.checkpoint_dir), turn.inputs.home, "end")
        checks.append(check)
    # complete: every trial scored or final unscored (docs/attempts.md); run still exits 5
    status = "complete" if counts.unscored == counts.final_unscored else "incomplete"
    files = file_digests(turn.out, kept=dict.fromkeys(RUN_JSONL))
    # The record files' digests are of what the rig wrote; another writer's edit is refused.
    wrote = {name: tallied(turn.out / name) for name in RUN_JSONL}
    changed = [name for name in RUN_JSONL if files.get(name) != wrote[name]]
    if changed:
        # Signed with the digests of what the rig wrote, never registered: compare refuses it
        # (not registered) and so does a resume (its files do not verify).
        void = manifest.model_copy(update={
            "status": "incomplete", "counts": counts, "seal_checks": checks, "finished_at": utcnow(),
            "files": {**files, **wrote}})
        write_run_manifest(turn.out, void, turn.inputs.home)
        name = changed[0]
        raise invalid(f"changed by another writer while the run was going: its digest "
                      f"{files.get(name, '(missing)')} is not that of the lines the rig wrote, {wrote[name]}",
                      file=turn.out / name,
                      problems=[Problem(str(turn.out / n), "changed by another writer while the run was going")
                                for n in changed[1:]],
                      hint="the run's results are void and it is not registered; run it again into a new "
                      "--out, in a directory no other process may write")
    final = manifest.model_copy(update={
        "status": status, "counts": counts, "seal_checks": checks, "finished_at": utcnow(),
        "files": files})
    final = write_run_manifest(turn.out, final, turn.inputs.home)
    register_finished(turn.inputs.home, final)
    if error is not None:
        raise invalid(f"the checkpoint changed during the run: {error.message}",
                      file=manifest.settings.checkpoint_dir,
                      hint="the run's results are void for a release; restore the checkpoint "
                      "and run again into a new --out")
    interrupted = stopped and status != "complete"
    return RunSummary(final.run_id, status, counts, turn.out, interrupted, kept, ran, *_findings(turn, counts),
                      final_unscored=_settled(book), stopped_for=stopped_for if status != "complete" else None)


def _settled(book: TrialBook) -> tuple[str, ...]:
    return tuple(t.trial_id for t in book.plan.trials if t.trial_id in book.settled)


def _findings(turn: Turn, counts: RunCounts) -> tuple[Findings, dict[str, Path]]:
    found = find(turn.out, counts)
    dirs = {f.task_id: turn.inputs.tasks[f.task_id].verifier_dir
            for f in found.verifier_faults if f.task_id in turn.inputs.tasks}
    return found, dirs


def register_finished(home: Path, m: RunManifest, brought_in: bool = False) -> bool:
    """Record a finished run in the home's `runs.jsonl` (docs/security.md): compare
    takes only bundles registered there. False when its digest already was. `brought_in`:
    `verify --register` (a run id held under another digest is refused)."""
    assert m.status != "running" and m.finished_at is not None, "only a finished run is registered"
    return register_run(home, RunEntry(run_id=m.run_id, bundle_digest=bundle_digest(dict(m.files)),
                                       checkpoint_id=m.checkpoint.id, status=m.status,  # type: ignore[arg-type]
                                       finished_at=m.finished_at, manifest_digest=manifest_digest(m)), brought_in)
