"""The files a run bundle is given once, at its start: where and by what it was made
(`provenance.json`), the checkpoint's declared event log (`history.jsonl`), and what the
manifest says of the task set."""

from __future__ import annotations

import contextlib
import platform
import re
import socket
import sys
from importlib import metadata
from pathlib import Path

from evalrig import __version__
from evalrig.models.run import Provenance, TasksetRef
from evalrig.store import layout
from evalrig.store.checkpoint import Checkpoint, history_log
from evalrig.store.files import write_bytes_atomic
from evalrig.store.tasks import TaskSet

_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def dependency_versions() -> dict[str, str]:
    """The installed version of each of the rig's own (not optional) dependencies."""
    out: dict[str, str] = {}
    try:
        reqs = metadata.requires("evalrig") or []
    except metadata.PackageNotFoundError:
        reqs = []
    for req in reqs:
        if "extra ==" in req:
            continue
        m = _REQUIREMENT_NAME.match(req)
        if m:
            with contextlib.suppress(metadata.PackageNotFoundError):
                out[m.group(0)] = metadata.version(m.group(0))
    return out


def new_provenance(argv: tuple[str, ...], warnings: list[str]) -> Provenance:
    return Provenance(rig_version=__version__, python=sys.version.split()[0],
                      platform=platform.platform(), host=socket.gethostname(), argv=list(argv),
                      dependencies=dependency_versions(), sandbox_warnings=warnings)


def copy_history(checkpoint: Checkpoint, out: Path) -> str:
    """The checkpoint's declared event log, as sealed, into history.jsonl."""
    src = history_log(checkpoint)
    if src is None:
        return "none"
    write_bytes_atomic(out / layout.HISTORY, src.read_bytes())
    return "declared"


def taskset_ref(taskset: TaskSet) -> TasksetRef:
    return TasksetRef(id=taskset.id, count=len(taskset.tasks), suites=taskset.suites(),
                      fresh_created_at=taskset.fresh_created_at(), fresh_content=taskset.fresh_content())
