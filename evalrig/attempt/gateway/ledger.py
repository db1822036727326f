"""One attempt's record of its model calls: `model.jsonl` and `model/<seq>.*` in its
evidence (docs/gateway.md, "Evidence").

Every role's session of the attempt writes here. A line is whole or absent: lines are
appended through store/jsonl.py (one write, synced), several waiting lines together (a
group commit). Bodies are written first and count against the attempt's evidence
allowance; over it, a call's bodies are dropped and its line says so.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from evalrig.models.gateway import ModelCall, Role
from evalrig.models.run import RoleSpend
from evalrig.store.files import open_nofollow, write_all
from evalrig.store.jsonl import append_lines, read_records
from evalrig.store.layout import MODEL_DIR, MODEL_JSONL

__all__ = ["CallLedger"]


@dataclass
class _Tally:
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    lines: int = 0
    estimated: bool = False
    replayed: bool = False


class CallLedger:
    """One per attempt, shared by every role's session of it; thread-safe."""

    def __init__(self, evidence_dir: Path, *, bodies_allowance: int) -> None:
        self.evidence_dir = Path(evidence_dir)
        self.bodies_allowance = max(0, bodies_allowance)
        self._seq = self._bodies = self._faults = 0
        self.late_lines = 0
        """Lines of calls that ended after their session had closed: dropped, not written."""
        self._tally: dict[str, _Tally] = {}
        self._lock = threading.Lock()
        self._write = threading.Lock()
        self._pending: list[ModelCall] = []
        self._dir_made = False

    @property
    def path(self) -> Path:
        return self.evidence_dir / MODEL_JSONL

    def next_seq(self) -> int:
        """The next call's `seq` (taken when the call starts)."""
        with self._lock:
            seq = self._seq
            self._seq += 1
            return seq

    def keep_bodies(self, n: int) -> bool:
        """Take `n` bytes of the bodies' allowance; False (nothing taken) when over it."""
        with self._lock:
            if self._bodies + n > self.bodies_allowance:
                return False
            self._bodies += n
            return True

    def write_body(self, seq: int, suffix: str, data: bytes) -> None:
        """model/<seq><suffix>: a new file, never through a link."""
        d = self.evidence_dir / MODEL_DIR
        if not self._dir_made:
            d.mkdir(mode=0o755, exist_ok=True)
            if d.is_symlink() or not d.is_dir():
                raise OSError(f"{d} is not a directory the rig made")
            self._dir_made = True
        fd = open_nofollow(d / f"{seq}{suffix}", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)

    def append(self, line: ModelCall) -> None:
        """Append the call's line (synced); several threads' lines go in one write."""
        with self._lock:
            self._pending.append(line)
            t = self._tally.setdefault(line.role, _Tally())
            t.lines += 1
            if line.usage is not None:
                t.calls += 1
                t.cost_usd += line.cost_usd
                t.input_tokens += line.usage.input_tokens
                t.output_tokens += line.usage.output_tokens
                t.estimated |= line.usage_source == "estimated"
                t.replayed |= line.usage_source == "replayed"
            self._faults += line.upstream_fault
        with self._write:
            with self._lock:
                batch, self._pending = self._pending, []
            if batch:
                append_lines(self.path, batch)

    def drop_late(self) -> None:
        """A call ended after its session closed: its line is not written (the evidence is
        final once the session is), only counted."""
        with self._lock:
            self.late_lines += 1

    def calls(self) -> list[ModelCall]:
        """Every whole line written so far, in the order written."""
        return read_records(self.path, ModelCall).records

    def spend(self, role: Role) -> RoleSpend | None:
        """That role's calls summed; None if it made none."""
        with self._lock:
            t = self._tally.get(role)
            if t is None:
                return None
            return RoleSpend(cost_usd=round(t.cost_usd, 10), input_tokens=t.input_tokens,
                             output_tokens=t.output_tokens,
                             source="replayed" if t.replayed else "metered", calls=t.calls,
                             estimated=None if t.replayed else t.estimated)

    def upstream_faults(self) -> int:
        with self._lock:
            return self._faults
