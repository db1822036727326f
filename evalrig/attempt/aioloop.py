"""The rig process's one asyncio loop, on one daemon thread, started at first use.

The egress proxy (attempt/egress.py) and the model gateway (attempt/gateway/) serve every
attempt's sandbox from it: the sandboxes' sockets are served in the rig's process, outside
the agent's view, and one loop keeps that to one thread however many attempts run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LOOP", "Loop"]

T = TypeVar("T")


class Loop:
    """One asyncio loop on a daemon thread, started at the first call of the process."""

    def __init__(self, name: str = "evalrig-loop") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or not self._loop.is_running():
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                loop.call_soon(ready.set)
                threading.Thread(target=loop.run_forever, name=self._name, daemon=True).start()
                ready.wait()
                self._loop = loop
            return self._loop

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        """Run `coro` on the loop and wait for its result (from any thread but the loop's)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop()).result(timeout)


LOOP = Loop()
