"""The Ray executor: the same attempts, fanned out over a Ray cluster (DESIGN §6).

Workers only *execute*: for each job they rebuild the attempt's spec on their own disk,
run `evalrig.trial`'s function there (workspace, sandbox, evidence, verifier) and send
back the record and — for an attempt — its evidence as one tar in bytes. The driver (the
process that called `run`) unpacks the evidence into `spec.evidence_dir` before it
reports the job done, so the runner stays the only writer of the bundle and cannot tell
which executor ran an attempt.

What travels through the object store, once per run and content-addressed: the
checkpoint directory and each task directory, packed as tars and `ray.put` the first time
a job needs them. A worker unpacks each into a node-local cache keyed by the tree's
digest (checked after unpacking), so a node fetches a tree once however many attempts it
runs, and no shared filesystem is needed. The ref travels *inside* a list, so Ray does
not fetch it for a worker whose cache already has the tree.

Nothing retries by itself: every remote call has `max_retries=0` and
`retry_exceptions=False`. A worker or node lost mid-job surfaces as an exception from
`ray.get` (RayActorError, WorkerCrashedError, NodeDiedError, ObjectLostError, ...);
it becomes a `Done` with `error` set, which the runner records as `infra_error` and
retries under its own rules.

Choices written down here and in docs/ray.md:
- A checkpoint without an estimate command has nothing to run for the estimate phase:
  that record is made on the driver, saving a round trip per attempt.
- An estimate's `at` is the driver's clock when the job was submitted, so every time in a
  bundle comes from one clock.
- A task's `[resources] cpus` is the `num_cpus` of its remote calls; a task asking for
  more CPUs than any live node has is an `infra_error` at once, not a job that waits
  forever.
- Jobs are scheduled SPREAD: attempts share nothing but the node's tree cache, and the
  default (local node first) kept attempts waiting for a busy node while another was
  idle, its view of the other node's free CPUs being a moment stale.
- Cancel: `ray.cancel` raises KeyboardInterrupt in the worker, which sets the attempt's
  own cancel event; the attempt ends `interrupted` as under `local`.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import socket
import stat
import tarfile
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from evalrig.clock import utcnow
from evalrig.errors import invalid
from evalrig.executors import AttemptWork, Done, Job
from evalrig.tree import hash_tree

__all__ = [
    "REMOTE_OPTIONS",
    "RayExecutor",
    "connect",
    "disconnect",
    "pack_tree",
    "require_ray",
    "resolve_address",
    "run_remote",
    "unpack_tree",
]

REMOTE_OPTIONS: dict[str, Any] = {"max_retries": 0, "retry_exceptions": False}
"""Ray must never retry by itself: the rig decides retries (DESIGN §6)."""

EVIDENCE_SLACK = 16 << 20
"""Beyond the task's caps, room for the verifier's own output in the evidence tar."""

PROBE_S = 5.0
_CANCEL_POLL_S = 0.05
_CLOSE_WAIT_S = 30.0


# -- the cluster -------------------------------------------------------------------------


def resolve_address(given: str | None, environ: Mapping[str, str]) -> str:
    """`--ray-address`, else `RAY_ADDRESS`, else `auto` (a cluster started on this node)."""
    return given or environ.get("RAY_ADDRESS") or "auto"


_connected_here = False  # True when this module called ray.init (and so shuts Ray down)


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise invalid(
            "ray: the Ray package is not installed", field="--executor",
            hint="install the extra: pip install 'evalrig[ray]' (or use --executor local)",
        ) from None
    return ray


def connect(address: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Join the cluster once per process (reusing a connection a caller already made)."""
    global _connected_here
    ray = require_ray()
    if ray.is_initialized():
        return str(ray.get_runtime_context().gcs_address)
    addr = resolve_address(address, os.environ if environ is None else environ)
    _probe(_found_address() if addr == "auto" else addr)
    try:
        ray.init(address=addr, logging_level=logging.ERROR, log_to_driver=False,
                 configure_logging=True, namespace="evalrig")
    except Exception as e:  # ConnectionError, ValueError, RuntimeError, ... by Ray version
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise invalid(
            f"{addr}: cannot join the Ray cluster ({first})",
            field="--ray-address",
            hint="start one (`ray start --head --node-ip-address 127.0.0.1`, see docs/ray.md) "
            "and give its address with --ray-address or RAY_ADDRESS",
        ) from None
    _connected_here = True
    return str(ray.get_runtime_context().gcs_address)


def _found_address() -> str:
    """What `auto` means here: the cluster last started on this node, as Ray finds it.

    Ray's own lookup is not public API; where it is missing or changed, `auto` is left
    for `ray.init` to resolve."""
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:
        return "auto"
    try:
        found = canonicalize_bootstrap_address("auto")
    except ConnectionError:
        raise invalid(
            "auto: no Ray cluster was started on this node",
            field="--ray-address",
            hint="start one (`ray start --head --node-ip-address 127.0.0.1`, see docs/ray.md), "
            "or give a cluster's address with --ray-address or RAY_ADDRESS",
        ) from None
    except Exception:  # noqa: BLE001 - another Ray version: let ray.init decide
        return "auto"
    return found or "auto"


def _probe(addr: str) -> None:
    """A GCS address that nothing answers at is refused at once: Ray itself would retry
    for minutes, printing warnings, before it gives up."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or "://" in addr:
        return  # `auto`, or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_S).close()
    except OSError as e:
        raise invalid(
            f"{addr}: nothing answers there ({e.strerror or type(e).__name__})",
            field="--ray-address",
            hint="start the cluster first (`ray start --head ...`, see docs/ray.md), or give "
            "the address `ray start` printed, with --ray-address or RAY_ADDRESS",
        ) from None


def disconnect() -> None:
    global _connected_here
    if _connected_here:
        require_ray().shutdown()
        _connected_here = False


def _largest_node_cpus(ray: Any) -> float:
    return max((n.get("Resources", {}).get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")),
               default=0.0)


# -- trees as bytes ----------------------------------------------------------------------


def pack_tree(root: Path) -> bytes:
    """A tar of `root`'s directories, regular files (mode kept) and links, in path order.

    Owners and times are left out: only what the tree digest sees matters.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, path in _walk(root):
            st = os.lstat(path)
            info = tarfile.TarInfo(rel)
            info.mode = stat.S_IMODE(st.st_mode)
            info.uid = info.gid = 0
            info.mtime = 0
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISLNK(st.st_mode):
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info.size = st.st_size
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            # sockets, FIFOs and devices never reach here: evidence and sealed trees have none
    return buf.getvalue()


def _walk(root: Path) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []

    def walk(dir_abs: str, rel: str) -> None:
        with os.scandir(dir_abs) as it:
            for e in sorted(it, key=lambda e: e.name):
                r = f"{rel}/{e.name}" if rel else e.name
                out.append((r, e.path))
                if e.is_dir(follow_symlinks=False):
                    walk(e.path, r)

    walk(os.fspath(root), "")
    return out


def unpack_tree(data: bytes, dest: Path) -> None:
    """Unpack a `pack_tree` tar into `dest` (made here), refusing anything that could
    escape it: absolute paths, `..`, entries under a link, other member types."""
    dest.mkdir(parents=True, exist_ok=True)
    links: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar:
            parts = m.name.split("/")
            if m.name.startswith("/") or ".." in parts or "" in parts:
                raise OSError(f"tar member {m.name!r}: not a plain relative path")
            if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
                raise OSError(f"tar member {m.name!r}: lies under a symbolic link")
            target = os.path.join(dest, m.name)
            if m.isdir():
                os.makedirs(target, exist_ok=True)
                if m.mode != 0o755:  # the usual mode needs no second call
                    os.chmod(target, m.mode | stat.S_IRWXU)
            elif m.issym():
                os.symlink(m.linkname, target)
                links.add(m.name)
            elif m.isreg():
                src = tar.extractfile(m)
                assert src is not None
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as f:
                    shutil.copyfileobj(src, f, 1 << 20)
                    if m.mode != 0o600:
                        os.fchmod(f.fileno(), m.mode)
            else:
                raise OSError(f"tar member {m.name!r}: not a file, directory or link")


# -- the worker's side -------------------------------------------------------------------


@dataclass(frozen=True)
class TreeRef:
    """A tree in the object store: its digest and, boxed in a list so Ray does not fetch
    it eagerly, the ref of its tar."""

    digest: str
    box: list[Any]


def cache_root() -> Path:
    """The node-local cache of unpacked trees (outside every attempt's view under bwrap)."""
    return Path(tempfile.gettempdir()) / f"evalrig-ray-cache-{os.getuid()}"


def cached_tree(tree: TreeRef) -> Path:
    """The tree's directory in this node's cache, fetched and unpacked the first time."""
    root = cache_root()
    final = root / tree.digest.removeprefix("sha256:")
    if final.is_dir():
        return final
    import ray

    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root))
    try:
        unpack_tree(ray.get(tree.box[0]), tmp / "t")
        got = hash_tree(tmp / "t").digest
        if got != tree.digest:
            raise OSError(f"tree unpacked with digest {got}, expected {tree.digest}")
        try:
            os.rename(tmp / "t", final)
        except OSError:
            if not final.is_dir():  # not another worker of this node winning the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


@dataclass(frozen=True)
class Returned:
    """What a remote job sends back: the record, and for an attempt its evidence tar."""

    estimate: Any = None
    outcome: Any = None
    evidence: bytes = b""


def evidence_cap(spec: Any) -> int:
    t = spec.task.spec
    return t.max_evidence_bytes + 2 * t.max_output_bytes + EVIDENCE_SLACK


@dataclass(frozen=True)
class Call:
    """Everything one job needs, as one argument: Ray serializes each argument apart."""

    kind: str
    spec: Any  # the driver's AttemptSpec, without its cancel event
    estimate_id: str
    now: datetime
    checkpoint: TreeRef
    task: TreeRef
    work: AttemptWork


_worker_dir: Path | None = None


def worker_dir() -> Path:
    """This worker process's directory for its jobs, made once: `scratch/` (the attempts'
    workspaces, which the trial removes) and `evidence/` (each attempt's, removed once
    sent). Ray kills its workers rather than asking them to exit, so the directories of
    dead workers are swept when a new one makes its own."""
    global _worker_dir
    if _worker_dir is None:
        base = Path(tempfile.gettempdir()) / f"evalrig-ray-work-{os.getuid()}"
        base.mkdir(mode=0o700, exist_ok=True)
        for old in base.iterdir():
            if old.name.isdigit() and (int(old.name) == os.getpid() or not _alive(int(old.name))):
                shutil.rmtree(old, ignore_errors=True)
        mine = base / str(os.getpid())
        (mine / "scratch").mkdir(parents=True)
        (mine / "evidence").mkdir()
        _worker_dir = mine
    return _worker_dir


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_remote(call: Call) -> Returned:
    """One job on a worker: the spec's paths rewritten to this node, the work run in a
    thread so that a cancel (KeyboardInterrupt here) can set the attempt's cancel event."""
    kind, spec, work = call.kind, call.spec, call.work
    estimate_id, now, checkpoint, task = call.estimate_id, call.now, call.checkpoint, call.task
    here = worker_dir()
    cancel = threading.Event()
    local = replace(
        spec,
        checkpoint=replace(spec.checkpoint, dir=cached_tree(checkpoint)),
        task=replace(spec.task, dir=cached_tree(task)),
        scratch_root=here / "scratch",
        evidence_dir=here / "evidence" / spec.attempt_id,
        cancel=cancel,
    )
    if kind == "estimate":
        return Returned(estimate=_in_thread(lambda: work.estimate(local, estimate_id, now), cancel))
    try:
        outcome = _in_thread(lambda: work.attempt(local), cancel)
        evidence = pack_tree(local.evidence_dir) if local.evidence_dir.is_dir() else b""
        if len(evidence) > evidence_cap(local):
            raise OSError(f"the evidence tar is {len(evidence)} bytes, over the "
                          f"{evidence_cap(local)} the task's caps allow")
        return Returned(outcome=outcome, evidence=evidence)
    finally:
        # The workspace is the trial's to remove (or keep, with --keep-workspaces).
        shutil.rmtree(local.evidence_dir, ignore_errors=True)


def _in_thread(fn: Any, cancel: threading.Event) -> Any:
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the job's thread below
            box["error"] = e

    t = threading.Thread(target=body, name="evalrig-ray-attempt", daemon=True)
    t.start()
    while t.is_alive():
        try:
            t.join(_CANCEL_POLL_S)
        except KeyboardInterrupt:  # ray.cancel: stop the attempt, then return what it gives
            cancel.set()
    if "error" in box:
        raise box["error"]
    return box["value"]


# -- the driver's side -------------------------------------------------------------------


@dataclass
class _Inflight:
    job: Job
    t0: float


class RayExecutor:
    def __init__(self, slots: int, work: AttemptWork, address: str | None) -> None:
        self.slots = slots
        self._work = work
        self._ray = require_ray()
        connect(address)
        self._remote = self._ray.remote(**REMOTE_OPTIONS)(run_remote)
        self._by_cpus: dict[float, Any] = {}
        self._trees: dict[Path, TreeRef] = {}
        self._inflight: dict[Any, _Inflight] = {}
        self._ready: list[Done] = []  # jobs finished without leaving the driver
        self._cancelled = False
        self._max_cpus = _largest_node_cpus(self._ray)

    # trees -----------------------------------------------------------------------------

    def _tree(self, dir: Path) -> TreeRef:
        """The tree of `dir` in the object store, put there the first time it is asked for."""
        ref = self._trees.get(dir)
        if ref is None:
            ref = TreeRef(hash_tree(dir).digest, [self._ray.put(pack_tree(dir))])
            self._trees[dir] = ref
        return ref

    def _remote_for(self, cpus: float) -> Any:
        """The remote function with this task's CPUs, made once per distinct value."""
        fn = self._by_cpus.get(cpus)
        if fn is None:
            fn = self._by_cpus[cpus] = self._remote.options(
                num_cpus=cpus, scheduling_strategy="SPREAD", **REMOTE_OPTIONS)
        return fn

    # the protocol ----------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        t0 = time.monotonic()
        spec = job.spec
        try:
            if job.kind == "estimate" and spec.checkpoint.spec.agent.estimate is None:
                est = self._work.estimate(spec, job.estimate_id, utcnow())
                self._ready.append(Done(job, estimate=est, wall_s=time.monotonic() - t0))
                return
            cpus = float(spec.task.spec.resources.cpus)
            if cpus > self._max_cpus:
                self._max_cpus = _largest_node_cpus(self._ray)  # a node may have joined
                if cpus > self._max_cpus:
                    raise RuntimeError(f"task {spec.task.id} asks for {cpus:g} CPUs and no live "
                                       f"node of the cluster has more than {self._max_cpus:g}")
            call = Call(job.kind, replace(spec, cancel=None), job.estimate_id, utcnow(),
                        self._tree(Path(spec.checkpoint.dir)), self._tree(Path(spec.task.dir)),
                        self._work)
            ref = self._remote_for(cpus).remote(call)
        except Exception as e:  # noqa: BLE001 - the job never left: an infra_error record
            self._ready.append(Done(job, error=_describe(e), wall_s=time.monotonic() - t0))
            return
        self._inflight[ref] = _Inflight(job, t0)

    def wait(self, timeout: float | None) -> list[Done]:
        out, self._ready = self._ready, []
        if not self._inflight:
            return out
        refs = list(self._inflight)
        ready, _ = self._ray.wait(refs, num_returns=1, timeout=0 if out else timeout)
        if ready:
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            out.append(self._collect(ref, self._inflight.pop(ref)))
        return out

    def _collect(self, ref: Any, f: _Inflight) -> Done:
        try:
            got: Returned = self._ray.get(ref)
            if f.job.kind == "estimate":
                return Done(f.job, estimate=got.estimate, wall_s=time.monotonic() - f.t0)
            _place_evidence(got.evidence, Path(f.job.spec.evidence_dir))
            return Done(f.job, outcome=got.outcome, wall_s=time.monotonic() - f.t0)
        except Exception as e:  # noqa: BLE001 - a lost worker or node, or a rig fault
            return Done(f.job, error=_describe(e), wall_s=time.monotonic() - f.t0)

    def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        for ref in list(self._inflight):
            try:
                self._ray.cancel(ref, force=False)
            except Exception:  # noqa: BLE001, S110 - already finished or gone: nothing to stop
                pass

    def close(self) -> None:
        """Let what still runs return (bounded), then leave the cluster if we joined it."""
        if self._inflight:
            self.cancel()
            self._ray.wait(list(self._inflight), num_returns=len(self._inflight),
                           timeout=_CLOSE_WAIT_S)
            self._inflight.clear()
        self._trees.clear()
        disconnect()


def _place_evidence(data: bytes, dest: Path) -> None:
    """The worker's evidence into the bundle: a fresh directory, so nothing stale mixes in."""
    if dest.exists():
        shutil.rmtree(dest)
    if data:
        unpack_tree(data, dest)
    else:
        dest.mkdir(parents=True)


def _describe(e: BaseException) -> str:
    """One line naming what failed. A rig fault on the worker arrives as RayTaskError with
    the original exception as `cause`; Ray's own errors (a lost worker or node) by name."""
    cause = getattr(e, "cause", None)
    where = ""
    if isinstance(cause, BaseException):
        e, where = cause, " (on the Ray worker)"
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first}{where}"[:2000] if first else f"{type(e).__name__}{where}"
