"""A person's sign-off on a decision, and the release check that enforces it (docs/gate.md).

`sign` appends to `$EVALRIG_HOME/signoffs.jsonl` and to the bundle's
`decisions/signoffs.jsonl` (a copy for people); the last sign-off of a decision is the one
that counts. `check_release` is what the release flow runs right before shipping: it
believes only the home (docs/security.md) and says yes only for a decision a
gate issued (the gate ledger), whose comparison still verifies, whose last sign-off in the
home approves it, and whose candidate is the sealed directory given.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from evalrig.core.digest import loads, sha256_bytes
from evalrig.core.errors import EvalrigError, UsageError, invalid
from evalrig.core.words import shown
from evalrig.models.comparison import Decision, SignOff
from evalrig.store import ledger
from evalrig.store.checkpoint import identify, seal_records
from evalrig.store.comparison_file import RECOMPARE_HINT, comparison_digest
from evalrig.store.files import parse_json
from evalrig.store.invocation import command_name, quoted
from evalrig.store.layout import ADVISORY, COMPARISON_JSON, ISSUED
from evalrig.store.ledger import REGATE_HINT

PROMOTIONS = frozenset({"promote", "promote-maintenance"})


@dataclass(frozen=True)
class OpenDecision:
    decision: Decision
    digest: str
    path: Path

    @property
    def decisions_dir(self) -> Path:
        return self.path.parent

    @property
    def comparison_dir(self) -> Path:
        return self.path.parent.parent


def read_decision(path: Path) -> OpenDecision:
    path = Path(path)
    if not path.is_file():
        raise invalid("no such decision file", file=path,
                      hint="give the decisions/<policy>-v<version>.json that `evalrig gate` wrote")
    beside = path.with_suffix(".json")
    if path.suffix != ".json" and beside.is_file():  # the verdict .md a person has just read
        raise invalid("not a decision file (the verdict for people beside it)", file=path,
                      hint=f"give the decision itself: {beside}")
    data = path.read_bytes()
    refuse_other_kinds(path, data)
    return OpenDecision(parse_json(path, data, Decision), sha256_bytes(data), path)


def refuse_other_kinds(path: Path, data: bytes) -> None:
    """Another of the rig's files (comparison.json, a manifest) is named as such, rather
    than by every decision field it lacks."""
    try:
        kind = loads(data).get("kind")
    except (ValueError, AttributeError):
        return  # parse_json says what is wrong with it
    if isinstance(kind, str) and kind != "decision":
        raise invalid(f"not a decision file (its kind is {kind!r})", file=path, field="kind",
                      hint="give the decisions/<policy>-v<version>.json that `evalrig gate` wrote")


def _verified(path: Path) -> OpenDecision:
    """The decision, refused (exit 4) when advisory or when it or its comparison changed."""
    d = read_decision(path)
    if d.decision.advisory or d.decisions_dir.name == ADVISORY:
        raise invalid("is an advisory decision; it applies a policy the runs did not pin and cannot be signed",
                      file=path, field="advisory",
                      hint="gate with the pinned policy (without --advisory) and sign that decision")
    if not ledger.issued_of(d.decisions_dir, d.digest):
        raise invalid(f"does not verify: no gate issued it as it now reads (its digest {d.digest} is in no line "
                      f"of {ISSUED}): it was edited after the gate, or not written by one", file=path,
                      hint=REGATE_HINT)
    now = comparison_digest(d.comparison_dir)
    if now != d.decision.comparison_digest:
        raise invalid(
            f"does not verify: the comparison changed after the gate: its digest is now {now}, "
            f"the decision names {d.decision.comparison_digest}",
            file=d.comparison_dir / COMPARISON_JSON, hint=RECOMPARE_HINT,
        )
    return d


def agrees_with_gate(verdict: str, approve: bool) -> bool:
    """Approving a promotion or rejecting anything else agrees with the gate."""
    return approve == (verdict in PROMOTIONS)


def sign(decision_path: Path, approve: bool, by: str, reason: str | None, now: datetime,
         home: Path) -> SignOff:
    if not by.strip():
        raise UsageError("--by: give the name of the person signing")
    d = _verified(Path(decision_path))
    verdict = d.decision.verdict
    agrees = agrees_with_gate(verdict, approve)
    if not agrees and not (reason and reason.strip()):
        action = "approving" if approve else "rejecting"
        raise UsageError(f"{action} a {verdict} decision overrides the gate, and an override needs --reason",
                         hint='add --reason "why the gate is wrong here"')
    issued = ledger.issued_of(d.decisions_dir, d.digest)
    first = min(i.issued_at for i in issued)
    signoff = SignOff(
        decision_digest=d.digest, decision_file=d.path.name,
        candidate_checkpoint_id=d.decision.candidate.checkpoint_id, by=by,
        action="approve" if approve else "reject", verdict=verdict, agrees_with_gate=agrees,
        reason=reason or None, open_s=max(0.0, (now - first).total_seconds()), at=now,
    )
    ledger.record_signoff(d.decisions_dir, home, signoff)
    # Here rather than at the top: the gate's module loads the statistics, which check-release
    # and ship (this module's other users) never need.
    from evalrig.store.decisions import write_verdict_file

    write_verdict_file(d.path, d.decision, d.digest, home)  # it now says who signed
    return signoff


def _edited_in_place(d: OpenDecision) -> bool:
    """Whether the bundle's issued.jsonl says a gate wrote this file with other bytes: never
    believed as a release record, but it tells a decision edited after its gate from one
    written by hand or gated with another home."""
    try:
        issued = ledger.issued(d.decisions_dir)
    except EvalrigError:
        return False
    return any(i.decision_file == d.path.name for i in issued) and all(i.decision_digest != d.digest for i in issued)


def _comparison_problem(d: OpenDecision, gated: str) -> str | None:
    """Why the decision's comparison no longer verifies, or None: comparison.json against
    its bundle's manifest, the decision's comparison digest, and the one the gate recorded."""
    try:
        now = comparison_digest(d.comparison_dir)
    except EvalrigError as e:
        return f"its comparison does not verify: {e.file}: {e.message}"
    if now != d.decision.comparison_digest or now != gated:
        return (f"its comparison does not verify: {d.comparison_dir / COMPARISON_JSON} has the digest "
                f"{now}, the decision and the gate ledger name {gated}")
    return None


@dataclass(frozen=True)
class ReleaseCheck:
    approved: bool
    reason: str
    checkpoint_id: str | None = None
    hint: str | None = None  # what to do next, when not approved


def check_release(decision_path: Path, checkpoint_dir: Path, home: Path, home_key: str | None = None) -> ReleaseCheck:
    """Approved only for a decision a gate issued (the home's gate ledger), whose comparison
    still verifies, whose last sign-off in the home approves it, of this sealed checkpoint.

    The bundle's own `issued.jsonl` and `signoffs.jsonl` are never believed: anyone who can
    write a bundle can write them. A broken hash chain in the home raises (exit 4), and so does
    a home whose key is not the pinned `home_key` (a fingerprint)."""
    from evalrig.store.signing import check_pinned

    check_pinned(home, home_key)
    try:
        d = read_decision(Path(decision_path))
    except EvalrigError as e:
        return ReleaseCheck(False, f"not approved: the decision cannot be read ({e.message}: {e.file})",
                            hint="give the decisions/<policy>-v<version>.json that `evalrig gate` wrote")
    if d.decision.advisory:
        return ReleaseCheck(False, "not approved: an advisory decision cannot be signed",
                            hint="gate with the policy the runs pinned, without --advisory")
    gates = [g for g in ledger.gates_issuing(home, d.digest) if not g.advisory]
    prog, sign_it = command_name(), f"{command_name()} sign {quoted(decision_path)}"
    if not gates:
        if _edited_in_place(d):
            return ReleaseCheck(
                False, f"not approved: no gate issued this decision as it now reads: a gate wrote "
                f"{d.path.name} ({ISSUED}), and it was edited since; its digest {d.digest} is not in the gate "
                f"ledger {ledger.ledger_path(home)}", hint=REGATE_HINT)
        return ReleaseCheck(
            False, f"not approved: no gate issued this decision (as it now reads): its digest {d.digest} "
            f"is not in the gate ledger {ledger.ledger_path(home)}",
            hint=f"only a decision `{prog} gate` wrote with this EVALRIG_HOME can ship: run check-release with "
            "the EVALRIG_HOME the train used, or gate the comparison here with the policy the runs pinned and "
            "have a person sign that decision")
    problem = _comparison_problem(d, gates[-1].comparison_digest)
    if problem is not None:
        return ReleaseCheck(False, f"not approved: {problem}", hint=RECOMPARE_HINT)
    signoffs = ledger.home_signoffs_of(home, d.digest)
    # approving a verdict other than a promotion overrides the gate, which `sign` refuses
    # without a reason: the command suggested must be one that works
    approve = f"{sign_it} --approve --by NAME" + (
        "" if agrees_with_gate(d.decision.verdict, True) else ' --reason "why the gate is wrong here"')
    if not signoffs:
        return ReleaseCheck(False, f"not approved: {decision_path}: no sign-off of this decision (as it now reads)",
                            hint=f"a person signs it: `{approve}`")
    last = signoffs[-1]
    if last.action != "approve":
        return ReleaseCheck(False, f"not approved: the last sign-off ({shown(last.by)}) rejects it",
                            hint=f"only a new approving sign-off changes this: `{approve}`")
    want = d.decision.candidate.checkpoint_id
    seals = seal_records(home)  # a broken registry is exit 4, not a "cannot be hashed"
    try:
        # what the registry knows this content as: its version-2 id, or the version-1 id it
        # was first sealed under (docs/checkpoint.md, "Sealing and what it covers")
        found = identify(Path(checkpoint_dir), seals)
        got = found.id
    except EvalrigError as e:
        return ReleaseCheck(False, f"not approved: the checkpoint cannot be hashed ({e.message}: {e.file})",
                            hint="give --checkpoint the directory of the candidate the decision names")
    except OSError as e:
        return ReleaseCheck(False, f"not approved: the checkpoint cannot be read ({e})",
                            hint="give --checkpoint the directory of the candidate the decision names")
    if got != want:
        return ReleaseCheck(False, f"not approved: {checkpoint_dir} is {got}, the decision names {want}", got,
                            hint="ship the checkpoint the decision names, or gate this one in a train of its own")
    if found.entry is None:
        return ReleaseCheck(False, f"not approved: {got} is not registered in the seal registry", got,
                            hint="run check-release with the EVALRIG_HOME the train used")
    return ReleaseCheck(True, f"approved by {shown(last.by)}: {checkpoint_dir} is the sealed candidate {got}", got)
