"""`tripwire`: the serving champion checked again after it shipped (docs/release-engineers.md).

A tripwire run is an ordinary run bundle (resumable, the same format) of the serving
champion on the suite the promoting policy's `[tripwires]` names. When it ends, each
check is the gate's own invariant rule applied to the run (compared with itself), and a
run left incomplete after its retries fails. One locked step of the release log then
appends the `tripwire` event and, when a check failed, the automatic `rollback` to
`previous` whose evidence is that event. An interrupted run appends nothing; running the
command again resumes the run, and the events are appended once, even after a kill
between the two lines (the rollback is then appended by the next run of the command).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from evalrig.core.compare import build_comparison, history_check
from evalrig.core.errors import EvalrigError, invalid
from evalrig.core.releases import previous
from evalrig.core.tripwire import tripwire_checks
from evalrig.models.inputs import PolicyFile, PolicyInvariants
from evalrig.models.releases import BundleRef, RollbackEvent, ShipEvent, TripwireEvent
from evalrig.models.run import RunManifest
from evalrig.run.lifecycle import RunSummary, run_eval
from evalrig.run.loop import Hooks
from evalrig.run.progress import Reporter
from evalrig.run.settings import RunRequest
from evalrig.store.bundle import bundle_digest
from evalrig.store.checkpoint import identify, seal_records
from evalrig.store.compare import load_side
from evalrig.store.files import read_json
from evalrig.store.invocation import command_name
from evalrig.store.layout import MANIFEST
from evalrig.store.releases import LogWriter, ReleaseLog, appending, read_log
from evalrig.store.serving import short


def promoting_policy(by: ShipEvent | None) -> PolicyFile:
    """The thresholds the invariant rules read (`allow_network`, `max_infra_error_rate`): the
    promoting policy's `[invariants]` as its ship event recorded them, so that a tripwire
    judges the champion as the gate that promoted it did; the defaults when the event
    recorded none (a decision written before the rig recorded them)."""
    if by is None:
        return PolicyFile(name="default", version=1)
    return PolicyFile(name=by.policy.name, version=by.policy.version,
                      invariants=by.invariants or PolicyInvariants(), tripwires=by.tripwires)


@dataclass(frozen=True)
class TripwireOutcome:
    summary: RunSummary | None
    """The run as this command left it; None when its events were already in the log, or when
    the run refused its own end (`run_error`)."""
    event: TripwireEvent | None
    """None when the run was interrupted (nothing appended)."""
    rollback: RollbackEvent | None = None
    already: bool = False
    no_rollback: str | None = None
    """Why a failed tripwire rolled nothing back (nothing else served, or the checkpoint no
    longer serves), else None."""
    run_error: str | None = None
    """What the run said when it refused its own end (the checkpoint changed during it)."""

    @property
    def interrupted(self) -> bool:
        return self.event is None


def _finished_digest(out: Path) -> str | None:
    """The bundle digest of a finished run at `out`, else None."""
    if not (out / MANIFEST).is_file():
        return None
    try:
        m = read_json(out / MANIFEST, RunManifest)
    except Exception:  # noqa: BLE001 - run_eval reports a broken bundle, naming it
        return None
    return None if m.status == "running" else bundle_digest(dict(m.files))


def _recorded(log: ReleaseLog, digest: str | None) -> TripwireEvent | None:
    found = [i for i in log.seqs("tripwire") if log.rows[i]["bundle"]["digest"] == digest]
    e = log.event(found[-1]) if found and digest is not None else None
    return e if isinstance(e, TripwireEvent) else None


def _rollback_of(log: ReleaseLog, tripwire_seq: int) -> RollbackEvent | None:
    found = [i for i in log.seqs("rollback") if log.rows[i]["evidence"] == tripwire_seq]
    e = log.event(found[-1]) if found else None
    return e if isinstance(e, RollbackEvent) else None


def _roll_back(w: LogWriter, te: TripwireEvent, now: datetime) -> tuple[RollbackEvent | None, str | None]:
    """The automatic rollback of a failed tripwire, once; or why there is none."""
    if te.held:
        return None, None
    done = _rollback_of(w, te.seq)
    if done is not None:
        return done, None
    now_serving = w.serving()
    if now_serving is None or now_serving.checkpoint_id != te.checkpoint_id:
        return None, f"{short(te.checkpoint_id)} no longer serves: nothing to roll back"
    target = previous(w.moves)
    if target is None:
        return None, ("no checkpoint to roll back to (every one that served before left service by a "
                      "rollback): a person must decide what serves")
    failed = ", ".join(c.name for c in te.checks if not c.held)
    event = RollbackEvent.model_validate({
        "seq": 0, "at": now, "from": te.checkpoint_id, "to": target, "trigger": "tripwire", "by": "tripwire",
        "reason": f"tripwire failed: {failed}", "evidence": te.seq})
    return w.append(event), None


def run_tripwire(req: RunRequest, log: Path, home: Path, environ: Mapping[str, str],
                 reporter: Reporter | None = None, hooks: Hooks = Hooks(),
                 clock: Callable[[], datetime] | None = None) -> TripwireOutcome:
    from evalrig.store.clock import utcnow

    now = clock or utcnow
    out = Path(req.out)
    if req.checkpoint is None or req.tasks is None:
        raise invalid("tripwire needs --checkpoint (the serving champion) and --tasks", file=out)
    got = read_log(log)
    cid = identify(Path(req.checkpoint), seal_records(home)).id  # a version-1 champion goes by its first id
    recorded = _recorded(got, _finished_digest(out))
    if recorded is not None:  # a run of the command that ended after its event: finish, never repeat
        with appending(log) as w:
            rb, why = _roll_back(w, recorded, now())
        return TripwireOutcome(None, recorded, rb, already=True, no_rollback=why)
    s = got.serving()
    if s is None:
        raise invalid("nothing serves yet: a tripwire checks the serving champion, and nothing has shipped",
                      file=log, hint=f"ship a signed decision first (`{command_name()} ship`)")
    if s.checkpoint_id != cid:
        raise invalid(
            f"{req.checkpoint} is {short(cid)}, which is not the serving champion: {short(s.checkpoint_id)} "
            f"serves (since event {s.since})", file=req.checkpoint,
            hint=f"a tripwire runs only against the serving champion (`{command_name()} champion` names it)")
    policy = promoting_policy(got.ship(s.promoted_by))
    tripwires = policy.tripwires
    run_error = None
    try:
        summary: RunSummary | None = run_eval(dataclasses.replace(req, suites=(tripwires.suite,)), home, environ,
                                              reporter, hooks)
    except EvalrigError as e:
        if _finished_digest(out) is None:
            raise
        # The run finished and then refused itself: the checkpoint changed under it (its last
        # seal check failed). That is a tripwire's finding, not an input error: `sealed` fails.
        summary, run_error = None, e.render()
    if summary is not None and summary.interrupted:
        return TripwireOutcome(summary, None)
    side = load_side(out, home, allow_incomplete=True)
    comparison = build_comparison(side.view, side.view, history_check(side.history, side.history), True)
    checks = tripwire_checks(side.manifest.status, side.manifest.counts.unscored, comparison,
                             tripwires.checks, policy)
    digest = bundle_digest(dict(side.manifest.files))
    with appending(log) as w:
        te = _recorded(w, digest)
        if te is None:
            te = w.append(TripwireEvent(
                seq=0, at=now(), checkpoint_id=cid, bundle=BundleRef(path=str(out), digest=digest),
                checks=checks, held=all(c.held for c in checks)))
        rb, why = _roll_back(w, te, now())
    return TripwireOutcome(summary, te, rb, no_rollback=why, run_error=run_error)
