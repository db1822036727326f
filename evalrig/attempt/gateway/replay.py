"""Serving a recorded run's calls instead of an upstream (`run --replay`, docs/gateway.md
"Replay"): per trial, per role, the first unserved recorded call with the same request
digest."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from evalrig.models.gateway import RecordedCall, Role

__all__ = ["RecordedCall", "Replay"]




class Replay:
    """The recorded calls of one bundle, by trial `(task_id, rep)`; thread-safe."""

    def __init__(self, calls: Mapping[tuple[str, int], Sequence[RecordedCall]]) -> None:
        self._calls = {trial: list(seq) for trial, seq in calls.items()}
        self._served: dict[tuple[str, int], set[int]] = {}
        self._lock = threading.Lock()

    def take(self, trial: tuple[str, int], role: Role, request_sha256: str) -> RecordedCall | None:
        """The first unserved call of `trial` with that role and digest (now served), or None."""
        with self._lock:
            served = self._served.setdefault(trial, set())
            for i, call in enumerate(self._calls.get(trial, ())):
                if i not in served and call.role == role and call.request_sha256 == request_sha256:
                    served.add(i)
                    return call
            return None
