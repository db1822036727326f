"""One attempt's record of its model calls: `model.jsonl` and `model/<seq>.*` in its
evidence (docs/gateway.md, "Evidence").

Every role's session of the attempt writes here. A line is whole or absent: lines are
appended through store/jsonl.py (one write, synced), several waiting lines together (a
group commit). Bodies are written first and count against the attempt's evidence
allowance; over it, a call's bodies are dropped and its line says so.

What each forwarded call showed the provider (its forwarded header values and its prompt
text, prompts.py) is fed as the call's line is written, in `seq` order, to scanners that
carry their state across calls (`split_canary`): a canary split across calls is found
there whether or not the bodies were kept, within the ledger's scan budget.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalrig.attempt.gateway.prompts import prompt_text
from evalrig.attempt.streams import GZIP_BUDGET, ScanBudget, StreamScanner
from evalrig.core.metering import SPEND_DECIMALS
from evalrig.models.gateway import ModelCall, Role
from evalrig.models.run import RoleSpend
from evalrig.store.files import open_nofollow, write_all
from evalrig.store.jsonl import append_lines, read_records
from evalrig.store.layout import MODEL_DIR, MODEL_JSONL

__all__ = ["SPLIT_SCAN_CPU_S", "CallLedger", "Shown"]

SPLIT_SCAN_CPU_S = 30.0
"""The CPU bound of one attempt's scan of its calls taken together (with GZIP_BUDGET
decompressed bytes); a scan it cuts short is not clean."""
HELD_BYTES = 32 << 20
"""What calls settled after a gap in `seq` (an earlier call still running) may hold for the
join; past it they are fed at once, the gap's call after them."""


@dataclass(frozen=True)
class Shown:
    """What one forwarded call showed the provider, for the scan across calls."""

    needles: tuple[bytes, ...]
    headers: tuple[tuple[str, bytes], ...]  # (name, value) of each forwarded header
    text: bytes  # prompts.prompt_text of its body


def _size(shown: Shown | None) -> int:
    return 0 if shown is None else len(shown.text) + sum(len(v) for _, v in shown.headers)


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
        # the scan across calls: what each settled seq showed (None: not forwarded), fed in
        # seq order from _fed on; one scanner per kind (the prompt text, each header name)
        self._shown: dict[int, Shown | None] = {}
        self._fed = 0
        self._held = 0  # bytes of text and headers in _shown
        self._scan = threading.Lock()
        self._budget = ScanBudget(GZIP_BUDGET, cpu_s=SPLIT_SCAN_CPU_S)
        self._scanners: dict[str, StreamScanner] = {}
        self._needles: tuple[bytes, ...] = ()

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

    def append(self, line: ModelCall, headers: Mapping[str, str] | None = None,
               body: Mapping[str, Any] | None = None, *, needles: tuple[bytes, ...] = ()) -> None:
        """Append the call's line (synced); several threads' lines go in one write. `headers`
        and `body`: what a forwarded call showed the provider (None: it was not forwarded),
        for the scan across calls with the attempt's `needles`."""
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
        shown = None  # the line is written first: nothing here can lose it
        if body is not None:
            try:
                shown = Shown(needles, tuple((h, v.encode("utf-8", "replace")) for h, v in (headers or {}).items()),
                              prompt_text(body))
            except Exception:  # noqa: BLE001 - a body the join cannot read leaves the scan incomplete
                self._budget.out_of_room()
        with self._lock:
            self._shown[line.seq] = shown
            self._held += _size(shown)
        self._feed(flush=False)

    def _feed(self, *, flush: bool) -> None:
        """Feed the settled calls' pieces in seq order (`flush`: every one held, skipping
        the seqs never settled). Not `flush`: when another thread is feeding, return at once
        (it feeds what is settled; what it leaves, the next call or the flush feeds), so the
        write pool's threads never queue behind a scan."""
        if not self._scan.acquire(blocking=flush):
            return
        try:
            while True:
                with self._lock:
                    if self._fed not in self._shown and self._shown and (flush or self._held > HELD_BYTES):
                        self._fed = min(self._shown)
                    if self._fed not in self._shown:
                        return
                    shown = self._shown.pop(self._fed)
                    self._held -= _size(shown)
                    self._fed += 1
                if shown is None or not shown.needles or self._budget.expired():
                    continue
                if not self._needles:
                    self._needles = shown.needles
                for kind, data in (("", shown.text), *shown.headers):
                    if data:
                        scanner = self._scanners.get(kind)
                        if scanner is None:
                            scanner = self._scanners[kind] = StreamScanner(self._needles, shared=self._budget)
                        scanner.feed(data)
        finally:
            self._scan.release()

    def split_canary(self) -> str:
        """The scan across calls (docs/gateway.md, "The canary across calls"): "found" (a needle
        in the forwarded header values of one name, or in the prompt texts, each joined over
        the calls in seq order), "unfinished" (its budget ran out) or "clean". Call it once
        no more calls come (the attempt ended)."""
        self._feed(flush=True)
        with self._scan:
            for scanner in self._scanners.values():
                if scanner.found:
                    return "found"
            return "unfinished" if self._budget.incomplete else "clean"

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
            return RoleSpend(cost_usd=round(t.cost_usd, SPEND_DECIMALS), input_tokens=t.input_tokens,
                             output_tokens=t.output_tokens,
                             source="replayed" if t.replayed else "metered", calls=t.calls,
                             estimated=None if t.replayed else t.estimated)

    def upstream_faults(self) -> int:
        with self._lock:
            return self._faults
