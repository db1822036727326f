"""The local executor: `--jobs N` attempts at once on this machine, in threads.

Threads suffice: an attempt spends its time in the agent's process, in copying files
and in fsync, all of which release the GIL.
"""

from __future__ import annotations

import queue
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from evalrig.core.errors import DiskFull
from evalrig.run.executors import AttemptWork, Done, Job
from evalrig.store.clock import utcnow
from evalrig.store.files import disk_full, is_disk_full


class LocalExecutor:
    def __init__(self, slots: int, work: AttemptWork) -> None:
        self.slots = slots
        self._work = work
        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="evalrig-attempt")
        self._done: queue.SimpleQueue[Done] = queue.SimpleQueue()

    def submit(self, job: Job) -> None:
        self._pool.submit(self._run, job)

    def _run(self, job: Job) -> None:
        t0 = time.monotonic()
        try:
            if job.kind == "estimate":
                est = self._work.estimate(job.spec, job.estimate_id, utcnow())
                done = Done(job, estimate=est, wall_s=time.monotonic() - t0)
            else:
                out = self._work.attempt(job.spec)
                done = Done(job, outcome=out, wall_s=time.monotonic() - t0)
        except BaseException as e:  # noqa: BLE001 - a rig fault becomes an infra_error record
            detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            stop = e if isinstance(e, DiskFull) else (
                disk_full(e, e.filename or job.spec.evidence_dir, None) if isinstance(e, OSError) and is_disk_full(e)
                else None)
            done = Done(job, error=detail, wall_s=time.monotonic() - t0, stop=stop)
        self._done.put(done)

    def wait(self, timeout: float | None) -> list[Done]:
        try:
            first = self._done.get(timeout=timeout)
        except queue.Empty:
            return []
        out = [first]
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def cancel(self) -> None:
        # Running attempts watch the cancel event the runner set; nothing is queued here
        # beyond what runs, since the runner never submits more than `slots` jobs.
        pass

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
