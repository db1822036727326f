"""Where gates, sign-offs and runs leave their traces: beside the decisions, and in the home.

`decisions/issued.jsonl` records each time a decision was issued (its digest and the
time), so that `sign` can tell how long a verdict sat open and refuse a decision whose
bytes no longer match any issued one; `decisions/signoffs.jsonl` is the bundle's copy of
its sign-offs, for people. Trust lives in the rig's home (docs/security.md):
`$EVALRIG_HOME/gates.jsonl` records every gate the rig ran (so that re-rolling a train
until it passes shows up in the next verdict file of the same candidate, and so that
`check-release` can tell a decision a gate issued from a hand-written one),
`$EVALRIG_HOME/signoffs.jsonl` every sign-off, `$EVALRIG_HOME/runs.jsonl` every run
that finished here, and `$EVALRIG_HOME/comparisons.jsonl` every comparison `compare` wrote. The home's files are hash-chained (`evalrig.store.jsonl.chained_append`).
"""

from __future__ import annotations

from pathlib import Path

from evalrig.core.errors import EvalrigError, invalid
from evalrig.models.comparison import ComparisonEntry, GateLedgerEntry, Issued, SignOff
from evalrig.models.run import RunEntry
from evalrig.store.files import why_no_dir_here
from evalrig.store.jsonl import (
    append_line,
    chained_append,
    cut_torn_tail,
    read_chained,
    read_records,
)
from evalrig.store.layout import COMPARISONS, GATES, HOME_SIGNOFFS, ISSUED, RUNS, SIGNOFFS
from evalrig.store.signing import believed


def ledger_path(home: Path) -> Path:
    return Path(home) / GATES


def runs_path(home: Path) -> Path:
    return Path(home) / RUNS


def home_signoffs_path(home: Path) -> Path:
    return Path(home) / HOME_SIGNOFFS


def _unwritable(path: Path, e: OSError) -> EvalrigError:
    return invalid(f"cannot be written: {e.strerror or e}", file=path,
                   hint="check that the directory exists, is a directory and is writable "
                   "($EVALRIG_HOME for the gate ledger)")


def refuse_unusable_home(home: Path) -> None:
    """`$EVALRIG_HOME` where no directory can be (a file there or on the way, /proc, /sys)
    is refused, naming it (exit 4), before a command reads or writes anything there."""
    why = why_no_dir_here(home)
    if why is not None:
        raise invalid(f"EVALRIG_HOME cannot be the rig's home: {why}", file=home,
                      hint="point EVALRIG_HOME at a directory (it is made when missing; default "
                      "~/.local/state/evalrig): it holds the rig's seals, runs, gates and sign-offs")


def ensure_dir(dir: Path) -> None:
    """Make `dir` (the rig's home, a decisions folder) or refuse, naming it, with exit 4."""
    try:
        Path(dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _unwritable(Path(dir), e) from e


def _append(path: Path, record: object) -> None:
    """Append to a bundle's record file (not chained)."""
    ensure_dir(path.parent)
    try:
        cut_torn_tail(path)  # a crash mid-append must not glue two records together
        append_line(path, record)
    except OSError as e:
        raise _unwritable(path, e) from e


def _append_home(path: Path, record: GateLedgerEntry | SignOff) -> None:
    ensure_dir(path.parent)
    try:
        with chained_append(path, type(record), home=path.parent) as chain:
            chain.append(record)
    except OSError as e:
        raise _unwritable(path, e) from e


def comparisons_path(home: Path) -> Path:
    return Path(home) / COMPARISONS


def record_comparison(home: Path, entry: ComparisonEntry) -> None:
    """Record a comparison `compare` wrote (once per digest: the first line counts)."""
    path = comparisons_path(home)
    ensure_dir(path.parent)
    try:
        with chained_append(path, ComparisonEntry, home=home) as chain:
            if not any(e.comparison_digest == entry.comparison_digest and believed(e) for e in chain.records):
                chain.append(entry)
    except OSError as e:
        raise _unwritable(path, e) from e


def recorded_comparison(home: Path, comparison_digest: str) -> ComparisonEntry | None:
    """The home's signed record of a comparison with this digest, if `compare` wrote one here."""
    for e in read_chained(comparisons_path(home), ComparisonEntry, home=home).records:
        if e.comparison_digest == comparison_digest and believed(e):
            return e
    return None


def record_gate(home: Path, entry: GateLedgerEntry) -> None:
    _append_home(ledger_path(home), entry)


def all_gates(home: Path) -> list[GateLedgerEntry]:
    """Every ledger line, oldest first."""
    return list(read_chained(ledger_path(home), GateLedgerEntry, home=home).records)


def gates_of(home: Path, candidate_id: str) -> list[GateLedgerEntry]:
    """Every ledger line of this candidate checkpoint, oldest first."""
    return [e for e in all_gates(home) if e.candidate_id == candidate_id]


def gates_issuing(home: Path, decision_digest: str) -> list[GateLedgerEntry]:
    """Every signed ledger line of a gate that issued the decision with this digest, oldest first
    (a legacy line, from before the home signed, is shown but never believed)."""
    return [e for e in all_gates(home) if e.decision_digest == decision_digest and believed(e)]


def record_issued(decisions_dir: Path, issued: Issued) -> None:
    _append(decisions_dir / ISSUED, issued)


REGATE_HINT = ("move the edited file aside and gate the comparison again with the policy the runs pinned "
               "(the gate writes its decision afresh), then sign that decision")
"""What to do about a decision file edited after the gate wrote it, said the same way by
gate, sign and check-release (docs/gate.md): the gate is deterministic, so moving the edited
file aside and gating again writes the decision it issued."""


def issued(decisions_dir: Path) -> list[Issued]:
    """Every line of a decisions directory's issued.jsonl, oldest first."""
    return read_records(decisions_dir / ISSUED, Issued).records


def issued_of(decisions_dir: Path, decision_digest: str) -> list[Issued]:
    return [i for i in issued(decisions_dir) if i.decision_digest == decision_digest]


def record_signoff(decisions_dir: Path, home: Path, signoff: SignOff) -> None:
    """The bundle's copy, then the home's record (the one `check-release` believes), under the
    home file's lock: a refusal of either (a symlinked copy, a broken chain) records nothing
    that releases."""
    path = home_signoffs_path(home)
    ensure_dir(path.parent)
    try:
        with chained_append(path, SignOff, home=home) as chain:
            line = chain.line(signoff)  # the copy is the home's signed line, without its prev
            _append(decisions_dir / SIGNOFFS, {k: v for k, v in line.items() if k != "prev"})
            chain.append_line(line)
    except OSError as e:
        raise _unwritable(path, e) from e


def signoffs_of(decisions_dir: Path, decision_digest: str) -> list[SignOff]:
    """The bundle's copy of a decision's sign-offs (for people; never trusted)."""
    return [s for s in read_records(decisions_dir / SIGNOFFS, SignOff).records
            if s.decision_digest == decision_digest]


def home_signoffs_of(home: Path, decision_digest: str) -> list[SignOff]:
    """A decision's sign-offs as the home recorded and signed them, oldest first (legacy lines,
    from before the home signed, are never believed)."""
    return [s for s in read_chained(home_signoffs_path(home), SignOff, home=home).records
            if s.decision_digest == decision_digest and believed(s)]


def registered_run(home: Path, bundle_digest: str) -> RunEntry | None:
    """The first signed registration of a run bundle with this digest, if any."""
    for e in read_chained(runs_path(home), RunEntry, home=home).records:
        if e.bundle_digest == bundle_digest and believed(e):
            return e
    return None


def registrations_of(home: Path, run_id: str) -> list[RunEntry]:
    """Every signed registration of this run id, oldest first."""
    return [e for e in read_chained(runs_path(home), RunEntry, home=home).records
            if e.run_id == run_id and believed(e)]


def register_run(home: Path, entry: RunEntry, brought_in: bool = False) -> bool:
    """Record a finished run bundle in the home; False when its digest was already there.
    `brought_in` (`verify --register`): a run id the home holds under another bundle digest is
    refused (exit 4). A run of this home that resumes finishes again under a new digest."""
    path = runs_path(home)
    ensure_dir(path.parent)
    try:
        with chained_append(path, RunEntry, home=home) as chain:
            if any(e.bundle_digest == entry.bundle_digest and believed(e) for e in chain.records):
                return False
            other = next((e for e in chain.records if e.run_id == entry.run_id and believed(e)), None) \
                if brought_in else None
            if other is not None:
                raise invalid(f"the home already holds run {entry.run_id} under the bundle digest "
                              f"{other.bundle_digest}, not {entry.bundle_digest}: a bundle re-made under a known "
                              "run id is not that run", file=path,
                              hint="compare the run bundle the home registered; a run made elsewhere keeps "
                              "its own run id")
            chain.append(entry)
            return True
    except OSError as e:
        raise _unwritable(path, e) from e
