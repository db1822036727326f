"""Gating a comparison bundle on disk (docs/gate.md): read the comparison and the policy
file, look up what the rig's home knows (registered runs, earlier gates), call the pure
gate (`evalrig.core.gate.decide`), and write the decision, its verdict file for people,
`decisions/issued.jsonl` and the home's gate ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from evalrig.core import report
from evalrig.core.digest import pretty_json, sha256_bytes
from evalrig.core.errors import EvalrigError, ExitCode, invalid
from evalrig.core.gate import EXIT_OF_VERDICT, decide
from evalrig.models.comparison import Comparison, Decision, GateLedgerEntry, Issued
from evalrig.models.inputs import PolicyFile
from evalrig.store import ledger
from evalrig.store.compare import read_comparison
from evalrig.store.files import write_bytes_atomic
from evalrig.store.layout import ADVISORY, COMPARISON_JSON, DECISIONS
from evalrig.store.policy import load_policy


@dataclass(frozen=True)
class GateResult:
    decision: Decision
    decision_file: Path
    verdict_file: Path
    exit_code: ExitCode


def seen_fresh(home: Path, candidate_id: str) -> dict[str, str]:
    """content digest -> candidate id, for every fresh task of every earlier gate of another
    candidate in the gate ledger (the earliest gate's candidate where several share one).
    Exports of fresh tasks recorded in the home would be added here once `export` exists
    (docs/gate.md)."""
    out: dict[str, str] = {}
    for e in ledger.all_gates(home):
        if e.candidate_id != candidate_id:
            for d in e.fresh_content:
                out.setdefault(d, e.candidate_id)
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
    seen = seen_fresh(home, comparison.candidate.checkpoint_id)
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
            raise invalid(
                "exists with other bytes; a decision is never overwritten",
                file=path,
                hint="this comparison was already gated under this policy name and version with a different "
                "outcome: bump the policy's version, or compare into a new directory",
            )
    else:
        write_bytes_atomic(path, data)
    digest = sha256_bytes(data)
    earlier = ledger.gates_of(home, decision.candidate.checkpoint_id)
    write_bytes_atomic(md_path, report.verdict_markdown(decision, earlier, str(path)).encode())
    ledger.record_issued(out_dir, Issued(decision_digest=digest, decision_file=path.name, issued_at=now))
    ledger.record_gate(home, GateLedgerEntry(
        candidate_id=decision.candidate.checkpoint_id, champion_id=decision.champion.checkpoint_id,
        comparison_digest=comparison_digest, comparison_dir=str(dir.resolve()), policy=decision.policy,
        exception=exception, advisory=advisory, verdict=decision.verdict, reason=decision.reason,
        decision_digest=digest, at=now, fresh_content=sorted(set(comparison.facts.fresh_content.values())),
    ))
    return GateResult(decision, path, md_path, EXIT_OF_VERDICT[decision.verdict])

