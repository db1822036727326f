"""The Ray executor: the same attempts, fanned out over a Ray cluster (docs/ray.md).

Workers only *execute*: each job goes to a runner (an `AttemptRunner` actor, one job at a
time), which rebuilds the attempt's spec on its own node, runs `evalrig.attempt.trial`'s function
there (workspace, sandbox, evidence, verifier) and sends back the record and — for an
attempt — its evidence as packed entries, all in one bytes object. The driver (the
process that called `run`) writes the evidence into `spec.evidence_dir` before it reports
the job done, so the runner stays the only writer of the bundle and cannot tell which
executor ran an attempt.

What travels through the object store, once per run and content-addressed: the
checkpoint directory and each task directory, packed and `ray.put` the first time a job
needs them. A worker unpacks each into a node-local cache keyed by the tree's digest
(checked after unpacking), so a node fetches a tree once however many attempts it runs,
and no shared filesystem is needed. The ref travels *inside* a list, so Ray does not
fetch it for a worker whose cache already has the tree.

Nothing retries by itself: every runner has `max_restarts=0` and `max_task_retries=0`,
and the rig makes no Ray tasks. A worker or node lost mid-job surfaces as an exception
from `ray.get` (ActorDiedError, NodeDiedError, ObjectLostError, ...); it becomes a `Done`
with `error` set, which the runner records as `infra_error` and retries under its own
rules, and the dead runner is replaced when its size is next needed.

Choices written down here and in docs/ray.md:
- The model gateway: each runner's process serves its own attempts' calls, with a
  `Gateway` it makes from the spec's `GatewayUse` (evalrig.attempt.modelcalls) at its first
  attempt; the upstreams' keys reach it in the actor's runtime environment (`env_vars`),
  never in a job or a bundle; `max_concurrent` is per process.
- A checkpoint without an estimate command has nothing to run for the estimate phase:
  that record is made on the driver, saving a round trip per attempt.
- An estimate's `at` is the driver's clock when the job was submitted, so every time in a
  bundle comes from one clock.
- Runners rather than a Ray task per job: a task leases a worker from the raylet each
  time (evalrig.run.loop never queues a second job behind a slot's first, so no lease is
  reused), about twice the CPU of an actor call (see `AttemptRunner`).
- A task's `[resources] cpus` is the `num_cpus` of the runner that runs it; a task
  asking for more CPUs than any live node has is an `infra_error` at once, not a job
  that waits forever.
- Runners are placed SPREAD: attempts share nothing but the node's tree cache, and under
  the default (local node first) attempts wait for a busy node while another is idle,
  its view of the other node's free CPUs being a moment stale.
- Cancel: Ray interrupts no running actor method, so the runner has a `cancel` method
  (a threaded actor runs it beside `run`) that sets the attempt's own cancel event; the
  attempt ends `interrupted` as under `local`.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import re
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from evalrig.attempt.evidence import INDEX_BYTES_MAX
from evalrig.core.errors import invalid
from evalrig.run.executors import AttemptWork, Done, Job
from evalrig.store.clock import utcnow
from evalrig.store.tree import hash_tree

if TYPE_CHECKING:
    from evalrig.attempt.trial import AttemptOutcome, AttemptSpec
    from evalrig.models.run import Estimate
    from evalrig.store.checkpoint import Checkpoint
    from evalrig.store.tasks import LoadedTask

__all__ = [
    "ACTOR_OPTIONS",
    "KEPT_WHERE",
    "AttemptRunner",
    "RayExecutor",
    "Worker",
    "connect",
    "pack_tree",
    "require_ray",
    "resolve_address",
    "unpack_tree",
]

ACTOR_OPTIONS: dict[str, Any] = {"max_restarts": 0, "max_task_retries": 0}
"""Ray must never restart a runner or retry a call by itself: the rig decides retries
(docs/ray.md "What never retries by itself")."""

EVIDENCE_SLACK = 16 << 20
"""Beyond the task's caps, room for the verifier's own output in the evidence sent back."""

PROBE_S = 5.0
_CLOSE_WAIT_S = 30.0
_END_WAIT_S = 5.0


# -- the cluster -------------------------------------------------------------------------


def resolve_address(given: str | None, environ: Mapping[str, str]) -> str:
    """`--ray-address`, else `RAY_ADDRESS`, else `auto` (a cluster started on this node)."""
    return given or environ.get("RAY_ADDRESS") or "auto"


def require_ray() -> Any:
    """The `ray` module, or exit 4 saying how to install it: Ray is an optional extra
    (`evalrig[ray]`), so its absence is a refusal of `--executor ray`, never a crash."""
    try:
        import ray
    except ImportError:
        raise invalid(
            "ray: the Ray package is not installed", field="--executor",
            hint="install the extra: pip install 'evalrig[ray]' (or use --executor local)",
        ) from None
    return ray


def connect(address: str | None, environ: Mapping[str, str] | None = None) -> bool:
    """Join the cluster once per process, reusing a connection a caller already made.
    True when this call joined: the caller is then the one to leave (`ray.shutdown`)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
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
    return True


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


def _largest_node_cpus(ray: Any) -> float:
    return max((n.get("Resources", {}).get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")),
               default=0.0)


# -- trees as values --------------------------------------------------------------------

Entry = tuple[str, str, int, bytes | str]
"""One entry of a packed tree: (kind, relative path, mode, content). Kind "d" is a
directory (content b""), "f" a regular file (its bytes), "l" a symbolic link (its target)."""


def pack_tree(root: Path) -> list[Entry]:
    """`root`'s directories and regular files (modes kept) and links, parents first, in path
    order: a plain list, which Ray and the standard pickler carry at C speed (a tar is
    twice the work for the few small files of most evidence).

    Owners and times are left out: only what the tree digest sees matters.
    """
    out: list[Entry] = []
    for rel, path in _walk(root):
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            out.append(("d", rel, mode, b""))
        elif stat.S_ISLNK(st.st_mode):
            out.append(("l", rel, 0, os.readlink(path)))
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                out.append(("f", rel, mode, f.read()))
        # sockets, FIFOs and devices never reach here: evidence and sealed trees have none
    return out


def packed_bytes(entries: list[Entry]) -> int:
    """The bytes of file content a packed tree carries."""
    return sum(len(content) for kind, _, _, content in entries if kind == "f")


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


def unpack_tree(entries: list[Entry], dest: Path) -> None:
    """Write a `pack_tree` list into `dest` (made here), refusing anything that could
    escape it: absolute paths, `.` or `..`, entries under a link, other kinds."""
    dest.mkdir(parents=True, exist_ok=True)
    links: set[str] = set()
    dirs: list[tuple[str, int]] = []
    for kind, rel, mode, content in entries:
        parts = rel.split("/")
        if rel.startswith("/") or {"", ".", ".."} & set(parts):
            raise OSError(f"tree entry {rel!r}: not a plain relative path")
        if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
            raise OSError(f"tree entry {rel!r}: lies under a symbolic link")
        target = os.path.join(dest, rel)
        if kind == "d" and content == b"":
            os.mkdir(target, stat.S_IRWXU)  # its own bits once its entries are in
            dirs.append((target, mode & 0o7777))
        elif kind == "l" and isinstance(content, str):
            os.symlink(content, target)
            links.add(rel)
        elif kind == "f" and isinstance(content, bytes):
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
                if mode & 0o7777 != 0o600:
                    os.fchmod(f.fileno(), mode & 0o7777)
        else:
            raise OSError(f"tree entry {rel!r}: not a file, directory or link")
    for target, mode in reversed(dirs):  # a folder after the folders in it: it may be read-only
        os.chmod(target, mode)


# -- the worker's side -------------------------------------------------------------------

Loaded = TypeVar("Loaded", "Checkpoint", "LoadedTask")


@dataclass(frozen=True)
class TreeRef(Generic[Loaded]):
    """A tree in the object store: its digest and, boxed in a list so Ray does not fetch
    it eagerly, the ref of its packed entries; and `loaded`, the driver's object for that
    directory (the LoadedTask or the Checkpoint), pickled once per run."""

    digest: str
    box: list[Any]  # [a ray.ObjectRef]
    loaded: bytes


def cache_root() -> Path:
    """The node-local cache of unpacked trees (outside every attempt's view under bwrap)."""
    return Path(tempfile.gettempdir()) / f"evalrig-ray-cache-{os.getuid()}"


def cached_tree(tree: TreeRef[Loaded]) -> Path:
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
        got = hash_tree(tmp / "t", version=2).digest
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
    """What a remote job sends back, pickled as one bytes object: the record, and for an
    attempt its evidence as packed entries."""

    estimate: Estimate | None = None
    outcome: AttemptOutcome | None = None
    evidence: list[Entry] = field(default_factory=list)


def evidence_cap(spec: AttemptSpec) -> int:
    t = spec.task.spec
    return t.max_evidence_bytes + 2 * t.max_output_bytes + EVIDENCE_SLACK + INDEX_BYTES_MAX


@dataclass(frozen=True)
class Call:
    """Everything one job needs, as one argument (Ray serializes each argument apart).

    The attempt's spec travels as bytes of the standard pickler, without its task,
    checkpoint and cancel event: Ray's own pickler visits every object in Python, and a
    spec holds dozens. The task and the checkpoint come with their trees (`TreeRef.loaded`).
    """

    kind: str
    spec: bytes
    estimate_id: str
    now: datetime
    checkpoint: TreeRef[Checkpoint]
    task: TreeRef[LoadedTask]
    work: AttemptWork


def pickled(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


KEPT_WHERE = ("on the nodes of the Ray workers that ran them, under "
              "$EVALRIG_SCRATCH or the system's temporary directory: "
              "evalrig-ray-kept-<uid>/<worker pid>-<random>/scratch/<attempt id>/")
"""Where `--keep-workspaces` leaves an attempt's workspace on Ray (the rig never removes them)."""

LOCAL_OBJECTS_MAX = 4096
"""Tasks and checkpoints a worker keeps with their node-local `dir`; beyond, it starts
afresh (a worker that serves a long run of many tasks stays small)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _make_worker_dir(keep: bool) -> Path:
    """A worker process's directory for its jobs: `scratch/` (the attempts' workspaces,
    which the trial removes unless kept) and `evidence/` (each attempt's, removed once
    sent). It lies where the local executor would put attempt roots on this node
    (`trial.scratch_base`: /dev/shm when it has room). A runner ended gently removes its
    own at exit; Ray kills workers outright too (a lost driver, a runner ended mid-job),
    so the directories of dead workers are swept when a new one makes its own.

    With `--keep-workspaces` it is a directory of its own under `evalrig-ray-kept-<uid>`
    on disk (KEPT_WHERE), which nothing sweeps or removes."""
    from evalrig.attempt.trial import scratch_base

    top = Path(scratch_base(keep) or tempfile.gettempdir())
    if keep:
        base = top / f"evalrig-ray-kept-{os.getuid()}"
        base.mkdir(mode=0o700, exist_ok=True)
        mine = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base))
    else:
        base = top / f"evalrig-ray-work-{os.getuid()}"
        base.mkdir(mode=0o700, exist_ok=True)
        for old in base.iterdir():
            if old.name.isdigit() and (int(old.name) == os.getpid()
                                       or not _alive(int(old.name))):
                shutil.rmtree(old, ignore_errors=True)
        mine = base / str(os.getpid())
        mine.mkdir()
        atexit.register(shutil.rmtree, mine, ignore_errors=True)  # a runner ended gently
    (mine / "scratch").mkdir()
    (mine / "evidence").mkdir()
    return mine


class Worker:
    """What one worker process keeps between its jobs: its directory (made at the first
    job), the tasks and checkpoint with their `dir` in this node's cache, and the cancel
    event of the attempt it runs. `run` and `cancel` may be called from two threads."""

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._objects: dict[bytes, Checkpoint | LoadedTask] = {}  # TreeRef.loaded -> object
        self._cancels: dict[str, threading.Event] = {}  # attempt id -> its event, while it runs
        self._cancelled_early: set[str] = set()  # cancels that arrived before their attempt
        self._lock = threading.Lock()

    def directory(self, keep: bool) -> Path:
        if self._dir is None:
            self._dir = _make_worker_dir(keep)
        return self._dir

    def local(self, tree: TreeRef[Loaded]) -> Loaded:
        """The task or checkpoint of `tree` with its `dir` in this node's cache, made once."""
        obj = self._objects.get(tree.loaded)
        if obj is None:
            if len(self._objects) >= LOCAL_OBJECTS_MAX:
                self._objects.clear()
            obj = self._objects[tree.loaded] = replace(pickle.loads(tree.loaded),
                                                       dir=cached_tree(tree))
        return obj  # type: ignore[return-value]  # keyed by the pickle of a `Loaded`

    def run(self, call: Call) -> bytes:
        """One job: the spec's paths rewritten to this node, the work run with a cancel
        event that `cancel` sets. Returns a pickled `Returned`."""
        kind, work, estimate_id, now = call.kind, call.work, call.estimate_id, call.now
        spec: AttemptSpec = pickle.loads(call.spec)
        here = self.directory(spec.keep_workspace)
        cancel = threading.Event()
        with self._lock:
            self._cancels[spec.attempt_id] = cancel
            if spec.attempt_id in self._cancelled_early:
                self._cancelled_early.discard(spec.attempt_id)
                cancel.set()
        local = replace(
            spec,
            checkpoint=self.local(call.checkpoint),
            task=self.local(call.task),
            scratch_root=here / "scratch",
            evidence_dir=here / "evidence" / spec.attempt_id,
            cancel=cancel,
        )
        try:
            if kind == "estimate":
                return pickled(Returned(estimate=work.estimate(local, estimate_id, now)))
            outcome = work.attempt(local)
            evidence = pack_tree(local.evidence_dir) if local.evidence_dir.is_dir() else []
            size = packed_bytes(evidence)
            if size > evidence_cap(local):
                raise OSError(f"the evidence is {size} bytes, over the "
                              f"{evidence_cap(local)} the task's caps allow")
            return pickled(Returned(outcome=outcome, evidence=evidence))
        finally:
            with self._lock:
                self._cancels.pop(spec.attempt_id, None)
            # The workspace is the trial's to remove (or keep, with --keep-workspaces).
            shutil.rmtree(local.evidence_dir, ignore_errors=True)

    def cancel(self, attempt_id: str) -> None:
        """Stop the attempt `attempt_id`; it ends `interrupted`, as under local."""
        with self._lock:
            event = self._cancels.get(attempt_id)
            if event is None:
                self._cancelled_early.add(attempt_id)
            else:
                event.set()


class AttemptRunner:
    """The actor that runs jobs on a worker process, one at a time: the driver hands it
    the next only after the last returned. Threaded (two calls at once) so that `cancel`
    runs beside `run`: Ray interrupts no running method of a threaded actor itself.

    Why an actor and not a task per job: a task takes a worker lease from the raylet for
    every job (evalrig.run.loop never queues a second job behind a slot's first, so no lease is
    reused), which cost a Ray task about 2 ms of CPU over all processes; an actor's call
    goes straight from the driver to the worker, under 1 ms (bench/bench_ray.py).
    """

    def __init__(self) -> None:
        self._worker = Worker()

    def run(self, call: Call) -> bytes:
        return self._worker.run(call)

    def cancel(self, attempt_id: str) -> None:
        self._worker.cancel(attempt_id)

    def pid(self) -> int:
        return os.getpid()


# -- the driver's side -------------------------------------------------------------------


@dataclass
class _Runner:
    """One AttemptRunner actor: its CPUs, and the ref that resolves once it is placed and
    started."""

    handle: Any
    cpus: float
    ready: Any


@dataclass
class _Queued:
    job: Job
    call: Call
    cpus: float
    t0: float


@dataclass
class _Inflight:
    job: Job
    t0: float
    runner: _Runner


class RayExecutor:
    """Jobs go to AttemptRunner actors, one job per actor at a time, queued here until a
    runner of the job's CPU count is free.

    The pool follows the work: queued jobs with no free runner of their size start as many
    runners as they outnumber those already starting, so the pool grows to what the
    cluster places and `--jobs` allows (at most `--jobs` runners). A runner that starts
    after its job was taken by another stays, idle, for the next. While jobs of one size
    wait, idle runners of other sizes are ended, since they may hold the CPUs the waiting
    jobs need (a run whose tasks ask for different `cpus`).
    """

    def __init__(self, slots: int, work: AttemptWork, address: str | None, *,
                 leave_cluster: bool = False, env: Mapping[str, str] | None = None) -> None:
        self.slots = slots
        # The model gateway's keys (docs/gateway.md "Under Ray"): each runner's process makes
        # its own Gateway and reads them from its environment, set here in the actor's
        # runtime environment; they never travel in a job, a spec or a bundle.
        self._runtime_env = {"env_vars": dict(env)} if env else None
        self._work = work
        self._ray = require_ray()
        self._leave = connect(address) or leave_cluster  # see close()
        self._actor = self._ray.remote(AttemptRunner)
        self._trees: dict[Path, TreeRef[Any]] = {}
        self._queue: deque[_Queued] = deque()
        self._idle: dict[float, list[_Runner]] = {}  # by CPUs: placed, started, no job
        self._starting: dict[Any, _Runner] = {}  # ready ref -> runner not yet placed
        self._inflight: dict[Any, _Inflight] = {}
        self._ready: list[Done] = []  # jobs finished without reaching a runner
        self._cancelled = False
        self._max_cpus = _largest_node_cpus(self._ray)

    # trees -----------------------------------------------------------------------------

    def _tree(self, obj: Loaded) -> TreeRef[Loaded]:
        """The tree of `obj.dir` (a task's or the checkpoint's) in the object store, put
        there the first time it is asked for, with `obj` itself pickled beside it."""
        dir = Path(obj.dir)
        ref = self._trees.get(dir)
        if ref is None:
            # version 2: the cache holds each tree's folders and modes exactly (a checkpoint's
            # copy holds what its seal hashes, docs/checkpoint.md), keyed by a digest of them
            ref = TreeRef(hash_tree(dir, version=2).digest, [self._ray.put(pack_tree(dir))], pickled(obj))
            self._trees[dir] = ref
        return ref

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
            # The task and checkpoint travel as trees (Call), the cancel event stays here.
            bare = replace(spec, task=None, checkpoint=None, cancel=None)  # type: ignore[arg-type]
            call = Call(job.kind, pickled(bare),
                        job.estimate_id, utcnow(), self._tree(spec.checkpoint),
                        self._tree(spec.task), self._work)
        except Exception as e:  # noqa: BLE001 - the job never left: an infra_error record
            self._ready.append(Done(job, error=_describe(e), wall_s=time.monotonic() - t0))
            return
        self._queue.append(_Queued(job, call, cpus, t0))
        self._dispatch()

    def wait(self, timeout: float | None) -> list[Done]:
        out, self._ready = self._ready, []
        refs = [*self._inflight, *self._starting]
        if not refs:
            return out
        ready, _ = self._ray.wait(refs, num_returns=1, timeout=0 if out else timeout)
        if ready:
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            if ref in self._inflight:
                out.append(self._collect(ref, self._inflight.pop(ref)))
            else:
                self._started(ref, self._starting.pop(ref))
        self._dispatch()
        out, self._ready = out + self._ready, []
        return out

    def _collect(self, ref: Any, f: _Inflight) -> Done:
        try:
            got: Returned = pickle.loads(self._ray.get(ref))
        except Exception as e:  # noqa: BLE001 - a lost worker or node, or a rig fault
            self._end(f.runner)  # whatever happened to it, a fresh runner takes the next job
            return Done(f.job, error=_describe(e), wall_s=time.monotonic() - f.t0)
        self._idle.setdefault(f.runner.cpus, []).append(f.runner)
        try:
            if f.job.kind == "estimate":
                return Done(f.job, estimate=got.estimate, wall_s=time.monotonic() - f.t0)
            _place_evidence(got.evidence, Path(f.job.spec.evidence_dir))
            return Done(f.job, outcome=got.outcome, wall_s=time.monotonic() - f.t0)
        except Exception as e:  # noqa: BLE001 - the evidence could not be written here
            return Done(f.job, error=_describe(e), wall_s=time.monotonic() - f.t0)

    def _started(self, ref: Any, runner: _Runner) -> None:
        try:
            self._ray.get(ref)
        except Exception as e:  # noqa: BLE001 - the actor could not start: fail a job of its size
            self._end(runner)
            self._fail_one_waiting(runner.cpus, e)
            return
        self._idle.setdefault(runner.cpus, []).append(runner)

    def _fail_one_waiting(self, cpus: float, why: BaseException) -> None:
        """A runner of this size could not start: one queued job of that size ends as an
        infra_error saying why (the rig's retry rules bound how often that repeats)."""
        waiting = next((q for q in self._queue if q.cpus == cpus), None)
        if waiting is not None:
            self._queue.remove(waiting)
            self._ready.append(Done(waiting.job, wall_s=time.monotonic() - waiting.t0,
                                    error=f"the Ray worker could not start: {_describe(why)}"))

    # the pool --------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Hand queued jobs to idle runners of their size; start or end runners so that
        every queued job has one coming (see the class docstring)."""
        if self._cancelled or not self._queue:
            return
        still: deque[_Queued] = deque()
        waiting: dict[float, int] = {}
        for q in self._queue:
            idle = self._idle.get(q.cpus)
            if idle:
                runner = idle.pop()
                try:
                    ref = runner.handle.run.remote(q.call)
                except Exception as e:  # noqa: BLE001 - the call could not be sent: a rig fault
                    idle.append(runner)
                    self._ready.append(Done(q.job, error=_describe(e),
                                            wall_s=time.monotonic() - q.t0))
                    continue
                self._inflight[ref] = _Inflight(q.job, q.t0, runner)
            else:
                still.append(q)
                waiting[q.cpus] = waiting.get(q.cpus, 0) + 1
        self._queue = still
        coming: dict[float, list[_Runner]] = {}
        for r in self._starting.values():
            coming.setdefault(r.cpus, []).append(r)
        for cpus, need in waiting.items():
            for _ in range(need - len(coming.get(cpus, []))):
                try:
                    self._start(cpus)
                except Exception as e:  # noqa: BLE001 - Ray refused to create the actor
                    self._fail_one_waiting(cpus, e)
        for cpus in [c for c in self._idle if c not in waiting] if waiting else []:
            for r in list(self._idle[cpus]):
                self._end(r)

    def _start(self, cpus: float) -> None:
        extra = {"runtime_env": self._runtime_env} if self._runtime_env else {}
        handle = self._actor.options(num_cpus=cpus, max_concurrency=2,
                                     scheduling_strategy="SPREAD", **ACTOR_OPTIONS, **extra).remote()
        runner = _Runner(handle, cpus, handle.pid.remote())
        self._starting[runner.ready] = runner

    def _end(self, runner: _Runner) -> Any:
        """End a runner: an idle one gently (its exit handlers remove its directory; the
        ref returned resolves when it is gone), any other at once."""
        self._starting.pop(runner.ready, None)
        idle = self._idle.get(runner.cpus, [])
        try:
            if runner in idle:
                idle.remove(runner)
                return runner.handle.__ray_terminate__.remote()
            self._ray.kill(runner.handle, no_restart=True)
        except Exception:  # noqa: BLE001, S110 - already dead: nothing to end
            pass
        return None

    def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        now = time.monotonic()
        while self._queue:  # never started: they end here, `interrupted` by the runner
            q = self._queue.popleft()
            self._ready.append(Done(q.job, error="cancelled before it started", wall_s=now - q.t0))
        for f in self._inflight.values():
            try:
                f.runner.handle.cancel.remote(f.job.spec.attempt_id)
            except Exception:  # noqa: BLE001, S110 - its worker is gone: nothing to stop
                pass

    def close(self) -> None:
        """Let what still runs return (bounded), end the runners, then leave the cluster
        if this run joined it (a cluster the caller joined before, it leaves in place)."""
        if self._inflight:
            self.cancel()
            self._ray.wait(list(self._inflight), num_returns=len(self._inflight),
                           timeout=_CLOSE_WAIT_S)
        gone = [self._end(runner) for runner in
                [*(r for rs in self._idle.values() for r in rs), *self._starting.values(),
                 *(f.runner for f in self._inflight.values())]]
        gone = [ref for ref in gone if ref is not None]
        if gone:  # let the idle ones finish exiting before the driver leaves the cluster
            self._ray.wait(gone, num_returns=len(gone), timeout=_END_WAIT_S)
        self._inflight.clear()
        self._queue.clear()
        self._trees.clear()
        if self._leave:
            self._ray.shutdown()


def _place_evidence(entries: list[Entry], dest: Path) -> None:
    """The worker's evidence into the bundle: a fresh directory, so nothing stale mixes in."""
    if dest.exists():
        shutil.rmtree(dest)
    unpack_tree(entries, dest)


_TERMINAL_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def _describe(e: BaseException) -> str:
    """One line naming what failed. A rig fault on the worker arrives as RayTaskError with
    the original exception as `cause`; Ray's own errors (a lost worker or node) by name.

    Ray's messages carry terminal colour codes (kept out of the bundle) and, for a runner
    whose construction raised, the worker's traceback: its last line, the exception
    itself, follows the first."""
    cause = getattr(e, "cause", None)
    where = ""
    if isinstance(cause, BaseException):
        e, where = cause, " (on the Ray worker)"
    lines = [ln.strip() for ln in _TERMINAL_COLOUR.sub("", str(e)).splitlines() if ln.strip()]
    text = f"{lines[0]} ... {lines[-1]}" if len(lines) > 1 else "".join(lines)
    return f"{type(e).__name__}: {text}{where}"[:2000] if text else f"{type(e).__name__}{where}"
