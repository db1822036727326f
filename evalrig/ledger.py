"""Where gates leave their traces: `issued.jsonl` beside the decisions and the gate ledger.

`decisions/issued.jsonl` records each time a decision was issued (its digest and the
time), so that `sign` can tell how long a verdict sat open and refuse a decision whose
bytes no longer match any issued one. `$EVALRIG_HOME/gates.jsonl` records every gate the
rig ran, across comparison bundles, so that re-rolling a train until it passes shows up
in the verdict file of the next gate of the same candidate.
"""

from __future__ import annotations

from pathlib import Path

from evalrig.bundle import append_line, cut_torn_tail, read_records
from evalrig.errors import EvalrigError, invalid
from evalrig.models.comparison import GateLedgerEntry, Issued, SignOff

ISSUED = "issued.jsonl"
SIGNOFFS = "signoffs.jsonl"
GATES = "gates.jsonl"


def ledger_path(home: Path) -> Path:
    return Path(home) / GATES


def _unwritable(path: Path, e: OSError) -> EvalrigError:
    return invalid(f"cannot be written: {e.strerror or e}", file=path,
                   hint="check that the directory exists, is a directory and is writable "
                   "($EVALRIG_HOME for the gate ledger)")


def ensure_dir(dir: Path) -> None:
    """Make `dir` (the rig's home, a decisions folder) or refuse, naming it, with exit 4."""
    try:
        Path(dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _unwritable(Path(dir), e) from e


def _append(path: Path, record: object) -> None:
    ensure_dir(path.parent)
    try:
        cut_torn_tail(path)  # a crash mid-append must not glue two records together
        append_line(path, record)
    except OSError as e:
        raise _unwritable(path, e) from e


def record_gate(home: Path, entry: GateLedgerEntry) -> None:
    _append(ledger_path(home), entry)


def all_gates(home: Path) -> list[GateLedgerEntry]:
    """Every ledger line, oldest first."""
    return list(read_records(ledger_path(home), GateLedgerEntry).records)


def gates_of(home: Path, candidate_id: str) -> list[GateLedgerEntry]:
    """Every ledger line of this candidate checkpoint, oldest first."""
    return [e for e in all_gates(home) if e.candidate_id == candidate_id]


def record_issued(decisions_dir: Path, issued: Issued) -> None:
    _append(decisions_dir / ISSUED, issued)


def issued_of(decisions_dir: Path, decision_digest: str) -> list[Issued]:
    return [i for i in read_records(decisions_dir / ISSUED, Issued).records if i.decision_digest == decision_digest]


def record_signoff(decisions_dir: Path, signoff: SignOff) -> None:
    _append(decisions_dir / SIGNOFFS, signoff)


def signoffs_of(decisions_dir: Path, decision_digest: str) -> list[SignOff]:
    return [s for s in read_records(decisions_dir / SIGNOFFS, SignOff).records
            if s.decision_digest == decision_digest]
