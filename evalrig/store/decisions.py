"""Gating a comparison bundle on disk (docs/gate.md): read the comparison and the policy
file, look up what the rig's home knows (registered runs, earlier gates), call the pure
gate (`evalrig.core.gate.decide`), and write the decision, its verdict file for people,
`decisions/issued.jsonl` and the home's gate ledger.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from evalrig.core import report
from evalrig.core.curves import curve_of
from evalrig.core.digest import pretty_json, sha256_bytes
from evalrig.core.errors import EvalrigError, ExitCode, invalid
from evalrig.core.gate import EXIT_OF_VERDICT, decide, what_failed
from evalrig.models.comparison import Comparison, Decision, GateLedgerEntry, Issued
from evalrig.models.inputs import PolicyFile
from evalrig.store import ledger
from evalrig.store.checkpoint import registered_seal
from evalrig.store.comparison_file import RECOMPARE_HINT, read_comparison
from evalrig.store.exports import exported_content
from evalrig.store.files import parse_json, write_bytes_atomic
from evalrig.store.invocation import command_name
from evalrig.store.layout import ADVISORY, COMPARISON_JSON, DECISIONS, ISSUED, REPORT_HTML
from evalrig.store.ledger import REGATE_HINT
from evalrig.store.policy import load_policy


@dataclass(frozen=True)
class GateResult:
    decision: Decision
    decision_file: Path
    verdict_file: Path
    exit_code: ExitCode


def seen_fresh(home: Path, candidate_id: str, comparison_digest: str | None = None,
               comparison_dir: Path | None = None) -> dict[str, str]:
    """content digest -> candidate id, for every fresh task of every earlier gate of another
    candidate in the gate ledger (the earliest gate's candidate where several share one), and
    for every task of a recorded export (whoever ran it: exported tasks may have been trained
    on) -> that export (docs/gate.md, docs/reading.md).

    Only what was recorded before this comparison bundle's first gate counts against it: an
    export (or another candidate's gate) recorded after it cannot have reached the runs it
    compares, and counting it would make the same comparison and policy decide differently
    the second time (a decision file that then "exists with other bytes"). It counts against
    every later comparison."""
    gates = ledger.all_gates(home)
    where = str(Path(comparison_dir).resolve()) if comparison_dir is not None else None
    first = next((i for i, e in enumerate(gates)
                  if e.comparison_digest == comparison_digest and e.comparison_dir == where), None)
    until = gates[first].at if first is not None else None
    out: dict[str, str] = {}
    for e in gates[:first]:
        if e.candidate_id != candidate_id:
            for d in e.fresh_content:
                out.setdefault(d, e.candidate_id)
    for d, label in exported_content(home, until).items():
        out.setdefault(d, label)
    return out


def refuse_unregistered_runs(dir: Path, comparison: Comparison, home: Path) -> None:
    """A comparison counts only for runs this home registered (docs/security.md, "Trust lives
    in the rig's home"): `compare` takes no other, so a comparison naming a run bundle the
    home does not know was written by hand or compared in another home."""
    for role, ref in (("champion", comparison.champion), ("candidate", comparison.candidate)):
        entry = ledger.registered_run(home, ref.bundle_digest)
        if entry is None or entry.checkpoint_id != ref.checkpoint_id:
            raise invalid(
                f"names a {role} run bundle ({ref.run_id}, digest {ref.bundle_digest}) that this rig's home "
                f"did not register ({ledger.runs_path(home)})",
                file=Path(dir) / COMPARISON_JSON, field=f"{role}.bundle_digest",
                hint="gate only a comparison `evalrig compare` wrote with this EVALRIG_HOME; a run "
                "bundle from elsewhere is brought in by `evalrig verify --register BUNDLE`, then compared",
            )


def refuse_unrecorded_comparison(dir: Path, comparison_digest: str, home: Path) -> None:
    """Only a comparison `compare` wrote with this home, as it wrote it, is gated (docs/security.md,
    "What the home registers"): comparison.json edited and its manifest re-digested is not one."""
    if ledger.recorded_comparison(home, comparison_digest) is None:
        raise invalid(
            f"is not a comparison this rig's home recorded: no signed line of {ledger.comparisons_path(home)} "
            f"has its digest {comparison_digest} (it was edited after compare wrote it, or written elsewhere)",
            file=Path(dir) / COMPARISON_JSON,
            hint="compare the two runs again with this EVALRIG_HOME into a new --out, then gate that comparison",
        )


def refuse_unlike_run_manifests(dir: Path, comparison: Comparison, home: Path) -> None:
    """The two run bundles, where the comparison found them, still as the home registered them: a
    manifest whose signature no longer verifies, or that differs from the registered one (a
    relabelled run), is refused (exit 4). A bundle moved away since is not looked for: the
    comparison, recorded by the home, stands for it."""
    from evalrig.models.comparison import ComparisonManifest
    from evalrig.models.run import RunManifest
    from evalrig.store.bundle import refuse_unlike_registration
    from evalrig.store.files import read_json
    from evalrig.store.layout import MANIFEST

    runs = read_json(Path(dir) / MANIFEST, ComparisonManifest).runs or {}
    for role, ref in (("champion", comparison.champion), ("candidate", comparison.candidate)):
        where = runs.get(role)  # type: ignore[call-overload]  # role is one of the two keys
        if where is None or not (Path(where) / MANIFEST).is_file():
            continue
        manifest = read_json(Path(where) / MANIFEST, RunManifest)
        if manifest.run_id != ref.run_id:  # a relabel that changed the run id too
            raise invalid(f"the {role}'s run bundle here is {manifest.run_id}, but the comparison is of "
                          f"{ref.run_id}: it was relabelled or replaced after compare",
                          file=Path(where) / MANIFEST, field="run_id",
                          hint="restore the run bundle as compare found it, or compare the runs again")
        entry = ledger.registered_run(home, ref.bundle_digest)
        if entry is not None:
            refuse_unlike_registration(Path(where), manifest, home, entry.manifest_digest)


def decision_name(policy: PolicyFile, exception: str | None) -> str:
    return f"{policy.name}-v{policy.version}" + (f"+{exception}" if exception else "")


def gate_comparison(dir: Path, policy_path: Path, exception: str | None, advisory: bool, home: Path,
                    now: datetime) -> GateResult:
    """Apply the policy file to the comparison bundle `dir` and write the decision and verdict file."""
    dir = Path(dir)
    comparison, comparison_digest = read_comparison(dir)
    loaded = load_policy(Path(policy_path))
    pins = comparison.facts.policy_pins
    pinned = {d for d in (pins.champion, pins.candidate) if d is not None}
    if pinned and pinned != {loaded.digest} and not advisory:
        raise invalid(
            f"the runs pinned the policy {sorted(pinned)[0]}, but this file's digest is {loaded.digest}",
            file=policy_path, field="digest",
            hint="gate with the policy file the runs pinned (run --policy), or pass --advisory to "
            "preview this policy (an advisory decision cannot be signed)",
        )
    # The home must be usable before its ledger is read or a decision issued.
    ledger.ensure_dir(Path(home))
    refuse_unregistered_runs(dir, comparison, home)
    refuse_unrecorded_comparison(dir, comparison_digest, home)
    refuse_unlike_run_manifests(dir, comparison, home)
    seen = seen_fresh(home, comparison.candidate.checkpoint_id, comparison_digest, dir)
    try:
        decision = decide(comparison, loaded.spec, loaded.digest, exception, advisory, comparison_digest, seen)
    except EvalrigError as e:  # decide() is pure and knows no paths: name the policy it refused
        if e.file is None:
            e.file = str(policy_path)
        raise
    out_dir = dir / DECISIONS / ADVISORY if advisory else dir / DECISIONS
    ledger.ensure_dir(out_dir)
    name = decision_name(loaded.spec, exception)
    path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    data = pretty_json(decision)
    if path.exists():
        if path.read_bytes() != data:
            refuse_other_bytes(path, decision)
    else:
        write_bytes_atomic(path, data)
    digest = sha256_bytes(data)
    ledger.record_issued(out_dir, Issued(decision_digest=digest, decision_file=path.name, issued_at=now))
    ledger.record_gate(home, GateLedgerEntry(
        candidate_id=decision.candidate.checkpoint_id, champion_id=decision.champion.checkpoint_id,
        comparison_digest=comparison_digest, comparison_dir=str(dir.resolve()), policy=decision.policy,
        exception=exception, advisory=advisory, verdict=decision.verdict, reason=decision.reason,
        decision_digest=digest, at=now, fresh_content=sorted(set(comparison.facts.fresh_content.values())),
        curve=curve_of(comparison),
    ))
    write_verdict_file(path, decision, digest, home)
    return GateResult(decision, path, md_path, EXIT_OF_VERDICT[decision.verdict])


def refuse_other_bytes(path: Path, decision: Decision) -> None:
    """A decision file that exists with other bytes is never overwritten (exit 4); say why
    it differs, since what to do depends on it: edited by hand, gated on another
    comparison or policy file, or written by another version of the rig."""
    data = path.read_bytes()
    issued = ledger.issued_of(path.parent, sha256_bytes(data)) if (path.parent / ISSUED).exists() else []
    try:
        before = parse_json(path, data, Decision) if issued else None
    except EvalrigError:
        before = None
    if before is None:
        raise invalid(f"exists with other bytes, and no gate issued it as it now reads (its digest is in no line "
                      f"of {ISSUED}): it was edited after the gate, or not written by one; a decision is never "
                      "overwritten", file=path, hint=REGATE_HINT)
    if before.comparison_digest != decision.comparison_digest:
        raise invalid(f"exists with other bytes: it was gated on the comparison {before.comparison_digest}, and "
                      f"comparison.json is now {decision.comparison_digest}; a decision is never overwritten",
                      file=path, hint=RECOMPARE_HINT)
    if before.policy.digest != decision.policy.digest:
        raise invalid(f"exists with other bytes: it was gated with another policy file of the same name and version "
                      f"(digest {before.policy.digest}; this one is {decision.policy.digest}); a decision is "
                      "never overwritten", file=path,
                      hint="a policy with other rules is a new policy: give it a new version (validate refuses two "
                      "files of one name and version), or gate with the file the decision was made with")
    changed = _rule_changed(before, decision)
    if changed is not None:
        raise invalid(f"exists with other bytes: the same comparison and policy decided otherwise when it was "
                      f"gated ({changed}); a decision is never overwritten", file=path,
                      hint="that decision stands as issued and can be signed; to decide on what the home "
                      "records now, " + RECOMPARE_HINT)
    raise invalid("exists with other bytes: the same comparison and policy were gated by another version of "
                  "evalrig, whose gate decided differently; a decision is never overwritten", file=path,
                  hint="that decision stands as issued and can be signed; to have this version's gate decide, "
                  + RECOMPARE_HINT)


def _rule_changed(before: Decision, now: Decision) -> str | None:
    """The first rule that holds now where it did not (or the reverse), said with its cause,
    or None when every rule decided alike (then the rig itself changed)."""
    was = {r.name: r for r in before.rules}
    for r in now.rules:
        old = was.get(r.name)
        if old is None or old.held == r.held:
            continue
        why = what_failed(r if not r.held else old)
        state = "fails now" if not r.held else "holds now"
        return f"{r.name} {'held' if old.held else 'failed'} then and {state}: {why}"
    return None


def write_verdict_file(path: Path, decision: Decision, digest: str, home: Path) -> Path:
    """(Re)write the verdict file beside the decision at `path` (docs/gate.md): the gates of
    its candidate before the latest that issued this decision, its sign-offs in the home
    (the record check-release believes), and its checkpoints' names from the seal
    registry. The gate writes it, and `sign` rewrites it, so that it says truthfully
    whether and by whom the decision was signed; the decision itself is never rewritten."""
    gates = ledger.gates_of(home, decision.candidate.checkpoint_id)
    last = max((i for i, g in enumerate(gates) if g.decision_digest == digest), default=len(gates))
    names = {}
    for ref in {decision.candidate.checkpoint_id, decision.champion.checkpoint_id, *(g.champion_id for g in gates)}:
        entry = registered_seal(home, ref)
        if entry is not None:
            names[ref] = entry.name
    signoffs = [] if decision.advisory else ledger.home_signoffs_of(home, digest)
    curve = next((g.curve for g in reversed(gates) if g.decision_digest == digest), None)
    md_path = path.with_suffix(".md")
    md = report.verdict_markdown(decision, gates[:last], str(path), signoffs, names, command_name(),
                                 report_link(path, md_path), curve.public_pass_rate if curve else None)
    write_bytes_atomic(md_path, md.encode())
    return md_path


def comparison_dir_of(decision_path: Path) -> Path:
    """The comparison bundle a decision file lies in (decisions/ or decisions/advisory/)."""
    parent = decision_path.parent
    return parent.parent.parent if parent.name == ADVISORY else parent.parent


def report_link(decision_path: Path, md_path: Path) -> report.ReportLink:
    """The verdict file's pointer to the comparison's report.html (docs/report.md)."""
    cmp_dir = comparison_dir_of(decision_path)
    html = cmp_dir / REPORT_HTML
    href = os.path.relpath(html, md_path.parent) if html.is_file() else None
    return report.ReportLink(comparison_dir=str(cmp_dir), href=href)
