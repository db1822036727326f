"""Where one attempt's time goes, stage by stage (bench/bench_run.py prints it).

Monotonic stamps taken at the seams the attempt passes anyway, a few per attempt, kept on
the attempt's outcome and never written to the bundle: its files are the same with or
without anyone reading them.
"""

from __future__ import annotations

import time

WORKSPACE = "workspace"  # the attempt root: checkpoint copy, task files, prompt, canary file
SPAWN = "spawn and containment"  # the sandbox's helpers and the agent, start to reaped
STREAMS = "streams"  # reading, scanning, redacting and capping stdout and stderr
EVIDENCE = "evidence copy and digest"  # the walk, the copy, the index, the evidence digest
CANARY = "canary scan"  # what the scan of names, the index and network.jsonl costs beyond the copy
VERIFY = "verification"  # the task's verifier on the stored evidence
RECORD = "records"  # usage, the Actual and the Result

ORDER = (WORKSPACE, SPAWN, STREAMS, EVIDENCE, CANARY, VERIFY, RECORD)
"""The attempt's own stages, in the order they run."""


class Laps:
    """Seconds per stage of one attempt: `lap(stage)` charges the time since the last lap."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + (now - self._last)
        self._last = now

    def move(self, seconds: float, from_stage: str, to_stage: str) -> None:
        """Charge `seconds` measured inside `from_stage` to `to_stage` instead."""
        self.seconds[from_stage] = self.seconds.get(from_stage, 0.0) - seconds
        self.seconds[to_stage] = self.seconds.get(to_stage, 0.0) + seconds
