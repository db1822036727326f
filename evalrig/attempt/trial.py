"""One attempt, end to end: workspace, estimate, agent, evidence, canary, verdict (docs/attempts.md).

Used by every executor, from worker threads: `run_estimate` then `run_attempt`. Neither
raises for anything the agent or the verifier does (those are statuses); a rig bug
raises, and the runner records it as `infra_error`.

Choices the contract leaves open, written down here and in docs/:
- The attempt root is `scratch_root/<attempt_id>/` with `agent/` (the checkpoint,
  copied with os.copy_file_range — a reflink where the filesystem can, never a hard
  link), `work/` (the task's files/), `out/`, `prompt.md`, `home/` (the fresh HOME) and,
  under `process`, `tmp/` (TMPDIR; bwrap gives a fresh /tmp instead). It is removed
  afterwards on a background thread (`flush_removals()` waits for that).
- The estimate runs in `scratch_root/<attempt_id>.estimate/`, laid out the same, under
  the same sandbox, with a limit of min(30 s, the attempt's deadline) and 64 KiB of
  stdout. It gets no canary: its output is never evidence.
- Environment precedence: the checkpoint's env, then the secrets, then the rig's own
  variables (PATH, HOME, LANG, TMPDIR, EVALRIG_*, the canary); a checkpoint cannot
  override what the rig sets.
- Disk: the attempt root may grow by 4 × max_evidence_bytes (at least 64 MiB) past its
  initial size, every entry counted (sandbox.entry_bytes: whole 4 KiB blocks, at least
  one per file, folder, link or FIFO), and by at most 100,000 entries; beyond either the
  agent is killed (an `agent_error`). No single file may exceed the allowance
  (RLIMIT_FSIZE).
- An agent whose argv[0] does not exist is an `agent_error`: its checkpoint names a
  program that is not there, which is the agent's fault, not the rig's.
- A timed-out or failed agent's evidence is still judged; the verdict goes in
  `diagnostic` and never changes the status. Its reward is 0.
- A malformed out/usage.json means usage "missing" (all null); the reason is in
  `result.error`.
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import stat
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from evalrig.attempt import egress, episode, modelcalls, sandbox, stages
from evalrig.attempt.canary import (
    CANARY_FILE,
    WHERE_MAX,
    needle,
    new_canary,
    plant_file,
)
from evalrig.attempt.evidence import collect, evidence_digest
from evalrig.attempt.evidence import remove_tree as _remove_tree
from evalrig.attempt.modelcalls import GatewayUse
from evalrig.attempt.streams import SCAN_INCOMPLETE, ScanBudget, StreamScanner, scan
from evalrig.attempt.verifiers import (
    VERIFIER_OUTPUT_CAP,
    JudgeModels,
    Verdict,
    is_finite_number,
    verify_evidence,
)
from evalrig.core import environment
from evalrig.core.digest import canonical_line
from evalrig.models.agent import EstimateLine, UsageFile
from evalrig.models.gateway import Budget
from evalrig.models.run import (
    Actual,
    Canary,
    Diagnostic,
    Estimate,
    FaultPhase,
    Result,
    RoleSpend,
    Spend,
)
from evalrig.store.checkpoint import SEAL_JSON, Checkpoint
from evalrig.store.files import disk_full, is_disk_full, read_answer
from evalrig.store.layout import (
    DRIVER_DIR,
    MODEL_DIR,
    MODEL_JSONL,
    NETWORK_JSONL,
    TRANSCRIPT,
    VERIFIER_DIR,
)
from evalrig.store.tasks import LoadedTask

if TYPE_CHECKING:
    from evalrig.attempt.gateway import CallLedger

__all__ = [
    "AttemptOutcome",
    "AttemptSpec",
    "Verdict",
    "fault_outcome",
    "flush_removals",
    "run_attempt",
    "run_estimate",
    "verify_evidence",
]

ESTIMATE_LIMIT_S = 30.0
ESTIMATE_OUTPUT_CAP = 64 * 1024


@dataclass(frozen=True)
class AttemptSpec:
    trial_id: str
    attempt_id: str
    attempt: int  # 1-based
    rep: int
    seed: int
    inputs_id: str
    task: LoadedTask
    checkpoint: Checkpoint  # the sealed source dir: never modified
    level: Literal["bwrap", "process"]
    slot: int
    timeout_scale: float
    secrets: Mapping[str, str]  # name → value; never written anywhere
    scratch_root: Path  # attempt roots are made here, outside the bundle and the tasks
    evidence_dir: Path  # bundle/attempts/<attempt_id>/
    keep_workspace: bool
    verifier_retries: int
    cancel: threading.Event | None = None
    # --interpreter-prefix: the only host directories beyond the system ones the agent sees
    # (docs/attempts.md "What runs"); never one the checkpoint chose.
    interpreter_prefixes: tuple[Path, ...] = ()
    allow_network: bool = False  # run --allow-network (docs/security.md)
    allow_hosts: tuple[str, ...] = ()  # run --allow-host, normalised
    # run --driver-secret: name → value, for the drivers and command verifiers whose task
    # lists the name; never the agent's, never written anywhere (docs/episodes.md)
    driver_secrets: Mapping[str, str] = field(default_factory=dict)
    # run --gateway / --replay: the model gateway serves the agent, and the driver and the
    # command verifier where their task says `models = true` (docs/gateway.md)
    gateway: GatewayUse | None = None

    @property
    def deadline_s(self) -> float:
        return self.task.spec.timeout_s * self.timeout_scale


@dataclass(frozen=True)
class AttemptOutcome:
    actual: Actual
    result: Result
    # seconds per stage (evalrig.attempt.stages), for bench/bench_run.py; never recorded
    stages: Mapping[str, float] = field(default_factory=dict)


# -- the workspace -----------------------------------------------------------------------


def _copy_file(src: str, dst: str, mode: int) -> int:
    fin = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fout, stat.S_IMODE(mode))  # the source's bits, whatever the umask
            total = 0
            try:
                while n := os.copy_file_range(fin, fout, 1 << 30):
                    total += n
            except OSError:  # a filesystem without copy_file_range: plain copy from here on
                while block := os.read(fin, 1 << 20):
                    os.write(fout, block)
                    total += len(block)
            return total
        finally:
            os.close(fout)
    finally:
        os.close(fin)


SEALED_ROOT_MODE = 0o755
"""The mode of the attempt's copy of a checkpoint's root (`agent/`): the hash leaves the
root's own bits out, so the copy never takes them from the checkpoint."""


def copy_tree(src: Path | str, dst: Path | str, sealed: bool = False) -> tuple[int, int]:
    """Copy a directory tree (links as links, modes kept, no extended attributes); returns
    its disk use as the disk allowance counts it (sandbox.entry_bytes of every entry,
    folders included) and its number of entries.

    Never hard links: the agent may write to its copy, and the sealed source must not
    change; files linked to each other in the source are separate files in the copy.
    Iterative: no depth of the source makes it recurse. A folder's owner may write it
    (the agent works in its copy), except with `sealed`: the copy of a checkpoint holds
    exactly what its seal hashes (docs/checkpoint.md, "Sealing and what it covers"), so
    every folder below the top keeps its bits as hashed, the top itself (not hashed) is
    SEALED_ROOT_MODE, and a top-level `SEAL.json` file, which the hash leaves out, is not
    copied.
    """
    total, count = sandbox.entry_bytes(0), 1
    top = os.fspath(src)
    todo = [(top, os.fspath(dst))]
    modes: list[tuple[str, int]] = []
    while todo:
        src_s, dst_s = todo.pop()
        os.mkdir(dst_s, 0o700)
        if sealed and src_s == top:
            # The seal leaves the root's own bits out (it is not an entry), so two trees of
            # one id may differ there: the copy's root is the rig's, whatever the source's.
            modes.append((dst_s, SEALED_ROOT_MODE))
        else:
            writable = stat.S_IWUSR if src_s == top or not sealed else 0
            modes.append((dst_s, stat.S_IMODE(os.stat(src_s).st_mode) | writable))
        with os.scandir(src_s) as it:
            for e in it:
                d = os.path.join(dst_s, e.name)
                st = e.stat(follow_symlinks=False)
                if sealed and src_s == top and e.name == SEAL_JSON and not stat.S_ISDIR(st.st_mode):
                    continue
                total += sandbox.entry_bytes(st.st_size)
                count += 1
                if stat.S_ISDIR(st.st_mode):
                    todo.append((e.path, d))
                elif stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(e.path), d)
                elif stat.S_ISREG(st.st_mode):
                    _copy_file(e.path, d, st.st_mode)
                else:
                    raise OSError(f"{e.path}: not a regular file, directory or link")
    for path, mode in reversed(modes):  # after the folder's own entries: it may be read-only
        os.chmod(path, mode)
    return total, count


@dataclass(frozen=True)
class Workspace:
    root: Path
    agent: Path
    work: Path
    out: Path
    prompt: Path
    home: Path
    tmpdir: str
    bytes: int  # its size when made, for the disk allowance (sandbox.entry_bytes)
    entries: int  # its entries when made, for the cap on entries


def make_workspace(root: Path, task: LoadedTask, checkpoint_dir: Path, level: str) -> Workspace:
    root.mkdir(parents=True)
    size, entries = copy_tree(checkpoint_dir, root / "agent", sealed=True)
    if task.files_dir.is_dir():
        more, n = copy_tree(task.files_dir, root / "work")
        size, entries = size + more, entries + n
    else:
        (root / "work").mkdir()
        size, entries = size + sandbox.entry_bytes(0), entries + 1
    (root / "out").mkdir()
    (root / "home").mkdir()
    shutil.copyfile(task.prompt_path, root / "prompt.md")
    # the root, out/, home/ and prompt.md (the canary file, planted next, is the agent's)
    size += 3 * sandbox.entry_bytes(0) + sandbox.entry_bytes(os.lstat(root / "prompt.md").st_size)
    entries += 4
    if level == "bwrap":
        tmpdir = "/tmp"
    else:
        (root / "tmp").mkdir()
        size, entries = size + sandbox.entry_bytes(0), entries + 1
        tmpdir = str(root / "tmp")
    return Workspace(root, root / "agent", root / "work", root / "out", root / "prompt.md",
                     root / "home", tmpdir, size, entries)


SHM = Path("/dev/shm")
SHM_MIN_FREE = 1 << 30


def scratch_base(keep: bool) -> str | None:
    """The directory attempt roots are made under (None: the system's temporary directory).

    `$EVALRIG_SCRATCH` when set; else a RAM-backed /dev/shm when it has room, because an
    attempt's workspace is written once and thrown away, and on a disk the directory
    creations and removals of each attempt alone cost more than the rest of the rig's
    work (ext4 searches its inode bitmap past recently deleted inodes on every create);
    else the system's temporary directory. Kept workspaces (--keep-workspaces) stay on
    disk, where they survive the rig and cost no memory. The runner and every Ray worker
    choose by this same rule.
    """
    base = os.environ.get("EVALRIG_SCRATCH")
    if base is None and not keep and _has_room(SHM):
        base = str(SHM)
    return base


def scratch_owner() -> str | None:
    """This process as the owner of a scratch directory, written into the directory's name
    (docs/attempts.md, "The workspace"): `<pid>-<start>-<where>`, where `start` is the
    process's start time in clock ticks since boot (/proc/<pid>/stat), so that a reused pid
    is not taken for the owner, and `where` a short digest of the boot id and the pid
    namespace, so that a directory shared with another machine or container is never
    judged by this one's processes. None where /proc cannot tell (not Linux)."""
    start = _start_ticks(os.getpid())
    where = _where()
    return None if start is None or where is None else f"{os.getpid()}-{start}-{where}"


def scratch_owner_dead(owner: str) -> bool:
    """Whether the owner a scratch directory's name carries is certainly gone: same boot
    and pid namespace as this process, and no process with that pid and start time. Any
    doubt (another machine, another namespace, an unreadable /proc) answers False."""
    parts = owner.split("-")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return False
    if parts[2] != _where():
        return False
    if not os.path.exists(f"/proc/{parts[0]}"):
        return True
    start = _start_ticks(int(parts[0]))
    return start is not None and start != int(parts[1])


def _start_ticks(pid: int) -> int | None:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces or ")": fields follow the last ")".
    fields = stat_line[stat_line.rfind(b")") + 2:].split()
    try:
        return int(fields[19])  # field 22 of proc(5), "starttime"
    except (IndexError, ValueError):
        return None


def _where() -> str | None:
    import hashlib

    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_bytes().strip()
        pid_ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return hashlib.sha256(boot + b"/" + str(pid_ns).encode()).hexdigest()[:8]


def _has_room(path: Path) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK) and st.f_bavail * st.f_frsize >= SHM_MIN_FREE


def remove_tree(path: Path) -> None:
    """Remove an attempt root, whatever the agent left in it (evidence.remove_tree:
    iterative, any depth or name length, read-only folders opened up)."""
    _remove_tree(path)


class _Reaper:
    """Removes finished attempt roots on a background thread.

    Removing a directory waits on the disk (on this machine's ext4, ~1 ms of I/O per rmdir
    for a few µs of CPU), so doing it inline would cost every attempt that wait. The queue
    is bounded: when removal falls behind, the attempts wait for it instead of filling the
    disk. `flush_removals()` waits until every queued root is gone (atexit does too).
    """

    def __init__(self) -> None:
        self.queue: queue.Queue[Path] = queue.Queue(maxsize=64)
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def remove(self, path: Path) -> None:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="evalrig-reaper", daemon=True)
                self.thread.start()
        self.queue.put(path)

    def _run(self) -> None:
        while True:
            path = self.queue.get()
            try:
                remove_tree(path)
            except Exception:  # noqa: BLE001 - nothing a tree holds may stop this thread
                pass  # left for the scratch directory's own cleanup; never fails an attempt
            finally:
                self.queue.task_done()

    def flush(self) -> None:
        self.queue.join()


_reaper = _Reaper()
atexit.register(_reaper.flush)


def flush_removals() -> None:
    """Wait until every attempt root queued for removal is gone."""
    _reaper.flush()


# -- environment -------------------------------------------------------------------------


def agent_env(spec: AttemptSpec, ws: Workspace, canary: str | None,
              episode: bool = False) -> dict[str, str]:
    """Exactly the documented variables (evalrig.core.environment), nothing inherited from the
    rig; the model gateway's for the attempt's own run (never its estimate)."""
    return environment.agent_env(
        spec.checkpoint.spec.agent.env, spec.secrets, home=str(ws.home), tmpdir=ws.tmpdir,
        prompt=str(ws.prompt), work=str(ws.work), out=str(ws.out), task_id=spec.task.id,
        attempt_id=spec.attempt_id, deadline_s=spec.deadline_s, seed=spec.seed, canary=canary,
        # the agent's own run, not its estimate: the proxy's address
        proxy_url=egress.PROXY_URL if canary is not None and network_of(spec) else None,
        episode=episode,
        gateway=modelcalls.env_for(spec.gateway) if canary is not None and spec.gateway is not None else None)


def network_of(spec: AttemptSpec) -> bool:
    """The attempt "had network": the operator granted it and the checkpoint or task asks.

    The runner refuses a checkpoint or task that asks without the grant before the first
    attempt; whether the agent then used it is in network.jsonl."""
    return spec.allow_network and (spec.checkpoint.spec.agent.network or spec.task.spec.network)


def _secret_values(spec: AttemptSpec) -> dict[str, str]:
    """Every value redacted from this attempt's evidence: the agent's and the drivers'."""
    return {name: value for name, value in {**spec.driver_secrets, **spec.secrets}.items() if value}


def _secret_bytes(spec: AttemptSpec) -> dict[str, bytes]:
    return {name: value.encode() for name, value in _secret_values(spec).items()}


def _disk_allowance(spec: AttemptSpec) -> int:
    return sandbox.disk_allowance(spec.task.spec.max_evidence_bytes)


def _launch(spec: AttemptSpec, ws: Workspace, argv: list[str], env: dict[str, str],
            timeout_s: float, max_output: int, stdout: Path, stderr: Path,
            scan_for: list[bytes], networked: bool = False,
            channel: sandbox.Channel | None = None, spare: str = "",
            scan_budget: ScanBudget | None = None,
            gateway: sandbox.GatewayGrant | None = None) -> Any:
    allowance = _disk_allowance(spec)
    return sandbox.launch(
        sandbox.Launch(
            argv=argv,
            cwd=ws.agent,
            env=env,
            level=spec.level,
            rw_paths=[ws.root],
            ro_paths=list(spec.interpreter_prefixes),
            network=False,  # an agent never shares the host's network (docs/security.md)
            egress=spec.allow_hosts if networked else None,
            gateway=gateway,
            timeout_s=timeout_s,
            max_output_bytes=max_output,
            stdout_path=stdout,
            stderr_path=stderr,
            memory_bytes=spec.task.spec.resources.memory_mb << 20,
            max_processes=spec.task.spec.resources.max_processes,
            max_file_bytes=allowance,
            disk_watch=(ws.root, ws.bytes + allowance),
            disk_watch_entries=ws.entries + sandbox.MAX_NEW_ENTRIES,
            slot=spec.slot,
            attempt_tag=spec.attempt_id,
            spare=spare,
            scan_for=scan_for,
            scan_budget=scan_budget,
            redact=_secret_bytes(spec),
            cancel=spec.cancel,
            unprivileged=True,
            agent_only=frozenset(k for k in spec.checkpoint.spec.agent.env
                                 if env.get(k) == spec.checkpoint.spec.agent.env[k]),
            channel=channel,
        )
    )


def write_network_log(evidence_dir: Path, records: Any, needles: list[bytes]) -> bool:
    """network.jsonl at the evidence root: one line per connection to the egress proxy.

    Written whenever the proxy ran (an empty file: it had network and used none); the
    evidence walk refuses an agent's own file of that name (layout EVIDENCE_RESERVED). The
    hosts in it are the agent's choice (a host named after the canary is a leak), so it is
    scanned like every evidence file; True when it holds the canary."""
    if records is None:
        return False
    data = b"".join(canonical_line(r) for r in records)
    fd = os.open(evidence_dir / NETWORK_JSONL,
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return scan(data, needles)


# -- the estimate ------------------------------------------------------------------------


def _range(name: str, v: Any) -> tuple[float, float]:
    if not (isinstance(v, list) and len(v) == 2 and all(is_finite_number(x) for x in v)):
        raise ValueError(f"{name}: expected [low, high], two numbers")
    lo, hi = float(v[0]), float(v[1])
    if lo < 0 or hi < lo:
        raise ValueError(f"{name}: expected 0 <= low <= high, got [{lo:g}, {hi:g}]")
    return lo, hi


def parse_estimate(stdout: bytes) -> dict[str, Any]:
    """The estimate's fields from its stdout; ValueError says what is wrong (never echoing it)."""
    try:
        doc = orjson.loads(stdout.strip())
    except orjson.JSONDecodeError as e:
        raise ValueError(f"stdout is not one JSON object ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError("stdout is not one JSON object")
    unknown = sorted(set(doc) - {"p_success", "time_s", "cost_usd", "level"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (allowed: cost_usd, level, p_success, time_s)")
    out: dict[str, Any] = {}
    if "p_success" in doc:
        p = doc["p_success"]
        if not (is_finite_number(p) and 0 <= p <= 1):
            raise ValueError("p_success: expected a number in [0, 1]")
        out["p_success"] = float(p)
    for key in ("time_s", "cost_usd"):
        if key in doc:
            out[key] = _range(key, doc[key])
    if "level" in doc:
        lv = doc["level"]
        if not (is_finite_number(lv) and 0 < lv < 1):
            raise ValueError("level: expected a number strictly between 0 and 1")
        out["level"] = float(lv)
    return EstimateLine.model_validate(out).model_dump(exclude_none=True)


def run_estimate(spec: AttemptSpec, estimate_id: str, now: datetime) -> Estimate:
    """Run the checkpoint's estimate command on its own fresh copy; never a fault of the attempt."""
    argv = spec.checkpoint.spec.agent.estimate
    if argv is None:
        fields: dict[str, Any] = {"state": "none"}
    else:
        root = spec.scratch_root / f"{spec.attempt_id}.estimate"
        try:
            fields = _estimate_fields(spec, root, list(argv))
        finally:
            if not spec.keep_workspace:
                _reaper.remove(root)
    return Estimate.model_validate({
        "estimate_id": estimate_id, "attempt_id": spec.attempt_id, "trial_id": spec.trial_id,
        "task_id": spec.task.id, "rep": spec.rep, "at": now, **fields,
    })


def _estimate_fields(spec: AttemptSpec, root: Path, argv: list[str]) -> dict[str, Any]:
    """state, error and the parsed values; the error never quotes what the agent printed."""
    try:
        ws = make_workspace(root, spec.task, spec.checkpoint.dir, spec.level)
    except OSError as e:
        return {"state": "missing", "error": f"the rig could not make its workspace: {e}"}
    fin = _launch(spec, ws, argv, agent_env(spec, ws, None),
                  min(ESTIMATE_LIMIT_S, spec.deadline_s), ESTIMATE_OUTPUT_CAP,
                  root / "estimate.stdout", root / "estimate.stderr", [])
    if fin.error or fin.timed_out or fin.interrupted or fin.exit_code != 0:
        why = (fin.error or ("timed out" if fin.timed_out else None)
               or ("interrupted" if fin.interrupted else None)
               or (f"killed by signal {fin.signal}" if fin.signal else f"exited {fin.exit_code}"))
        return {"state": "missing", "error": f"estimate command {why}"}
    if fin.stdout_truncated:
        return {"state": "malformed", "error": f"stdout over {ESTIMATE_OUTPUT_CAP} bytes"}
    data = (root / "estimate.stdout").read_bytes()
    if not data.strip():
        return {"state": "missing", "error": "estimate command printed nothing"}
    try:
        return {"state": "valid", **parse_estimate(data)}
    except ValueError as e:
        return {"state": "malformed", "error": str(e)}


# -- usage -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    source: Literal["reported", "missing", "metered", "replayed"]
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None


def read_usage(evidence_dir: Path, rel: str = "out/usage.json") -> Usage:
    """A usage.json as its writer reported it (the agent's out/usage.json, a driver's
    driver/usage.json); a missing figure stays null, never 0."""
    data = read_answer(evidence_dir, rel)
    if data is None:
        return Usage("missing")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        return Usage("missing", error=f"{rel} ignored: not JSON ({e})")
    return usage_of(doc, rel)


def usage_of(doc: Any, rel: str) -> Usage:
    """The spend figures of a parsed usage document (or a frame's `usage`)."""
    if not isinstance(doc, dict):
        return Usage("missing", error=f"{rel} ignored: not a JSON object")
    cost = doc.get("cost_usd")
    if cost is not None and not (is_finite_number(cost) and cost >= 0):
        return Usage("missing", error=f"{rel} ignored: cost_usd: expected a number >= 0")
    tokens: dict[str, int | None] = {}
    for key in ("input_tokens", "output_tokens"):
        v = doc.get(key)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return Usage("missing", error=f"{rel} ignored: {key}: expected an integer >= 0")
        tokens[key] = v
    got = UsageFile.model_validate({"cost_usd": cost, **tokens})
    return Usage("reported", got.cost_usd, got.input_tokens, got.output_tokens)


def _role(u: Usage) -> RoleSpend | None:
    if u.source == "missing" or (u.cost_usd is None and u.input_tokens is None and u.output_tokens is None):
        return None
    return RoleSpend(cost_usd=u.cost_usd, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                     source="reported")


def turn_usage(evidence_dir: Path) -> Usage:
    """The sum of the per-turn `usage` the agent sent in its message frames, read back from
    the stored transcript (docs/episodes.md): each figure summed over the turns that carry
    it, null when none does. Lines that are not the agent's valid frames are skipped."""
    data = read_answer(evidence_dir, TRANSCRIPT)
    if data is None:
        return Usage("missing")
    sums: dict[str, float | int | None] = dict.fromkeys(("cost_usd", "input_tokens", "output_tokens"))
    for line in data.splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        frame = rec.get("frame") if isinstance(rec, dict) and rec.get("from") == "agent" else None
        if not isinstance(frame, dict) or frame.get("type") != "message" or "usage" not in frame:
            continue
        u = usage_of(frame["usage"], TRANSCRIPT)
        for key in sums:
            v = getattr(u, key)
            if v is not None:
                sums[key] = (sums[key] or 0) + v
    if all(v is None for v in sums.values()):
        return Usage("missing")
    return usage_of(sums, TRANSCRIPT)


def spend_of(evidence_dir: Path, usage: Usage, verifier_usage: dict[str, Any] | None) -> Spend:
    """Spend by role, from the evidence alone: the candidate's (its out/usage.json, else its
    per-turn usage in the transcript), the driver's (driver/usage.json) and the judge's (the
    command verifier's usage.json). None of the three includes another."""
    candidate = usage if usage.source == "reported" else turn_usage(evidence_dir)
    judge = usage_of(verifier_usage, "verifier usage.json") if verifier_usage is not None else Usage("missing")
    return Spend(candidate=_role(candidate), driver=_role(read_usage(evidence_dir, f"{DRIVER_DIR}/usage.json")),
                 judge=_role(judge))


# -- the attempt -------------------------------------------------------------------------


def _status_of(fin: Any, cancel: threading.Event | None) -> tuple[str, str | None]:
    """The agent's part of the status: before any verdict."""
    if fin.interrupted or (cancel is not None and cancel.is_set()):
        return "interrupted", "the rig stopped during the attempt"
    if fin.error:
        if fin.error_kind == "agent":  # its checkpoint names a program that is not there
            return "agent_error", f"the agent could not start: {fin.error}"
        return "infra_error", f"the sandbox could not run the agent: {fin.error}"
    if fin.timed_out:
        return "timeout", None
    if fin.killed_for == "disk":
        return "agent_error", ("killed: the attempt root grew past its disk allowance "
                               "(bytes of every entry, or its number of entries)")
    if fin.killed_for:
        return "agent_error", f"killed: {fin.killed_for}"
    if fin.signal:
        return "agent_error", f"the agent was killed by signal {fin.signal}"
    if fin.exit_code != 0:
        return "agent_error", f"the agent exited {fin.exit_code}"
    return "ok", None


def _spent_on_streams(evidence_dir: Path) -> int:
    total = 0
    for name in ("stdout.txt", "stderr.txt"):
        try:
            total += os.lstat(evidence_dir / name).st_size
        except FileNotFoundError:
            pass
    return total


def _ensure_streams(evidence_dir: Path) -> None:
    """stdout.txt and stderr.txt exist in every evidence dir (empty if nothing ran)."""
    for name in ("stdout.txt", "stderr.txt"):
        p = evidence_dir / name
        if not p.exists():
            p.touch()


@dataclass
class _Record:
    """What the attempt accumulates on its way to an Actual and a Result."""

    status: str = "infra_error"
    error: str | None = None
    verdict: Verdict | None = None
    fin: sandbox.Finished | None = None
    canary_where: tuple[str, ...] = ()
    evidence_truncated: bool = False
    evidence_skipped: tuple[str, ...] = ()
    evidence_skipped_count: int = 0
    termination: str | None = None  # an episode's (docs/episodes.md)
    fault: FaultPhase | None = None  # where an infra_error's fault lay (models.run.Result.fault)
    final: bool = False  # an unscored attempt never run or verified again, whatever its fault
    driver_hosts: tuple[str, ...] | None = None  # an episode's driver had network: the hosts it reached
    turn_usage: dict[str, Any] | None = None  # an episode's per-turn usage, summed
    # the model gateway's records of the attempt (candidate and driver) and of its judge
    ledger: CallLedger | None = None
    judge_ledger: CallLedger | None = None
    # the canary scans of the agent's streams and evidence, in all (docs/attempts.md "The canary")
    scan: ScanBudget = field(default_factory=ScanBudget)


def run_attempt(spec: AttemptSpec) -> AttemptOutcome:
    """Run one attempt and judge its stored evidence; see the module docstring."""
    laps = stages.Laps()
    spec.evidence_dir.mkdir(parents=True, exist_ok=True)
    root = spec.scratch_root / spec.attempt_id
    canary = new_canary()
    rec = _Record()
    try:
        _attempt(spec, root, canary, rec, laps)
    finally:
        if not spec.keep_workspace:
            _reaper.remove(root)
        if spec.task.spec.verifier.kind == "command":
            _reaper.remove(_verify_scratch(spec))
        if spec.task.spec.episode is not None:
            _reaper.remove(_driver_root(spec))
    if rec.fin is None or rec.fin.error is not None:  # a launch that ran made both files
        _ensure_streams(spec.evidence_dir)
    return _outcome(spec, canary, rec, laps)


def _verify_scratch(spec: AttemptSpec) -> Path:
    """Beside the attempt root, not in it: the agent could have planted a link there."""
    return spec.scratch_root / f"{spec.attempt_id}.verify"


def _attempt(spec: AttemptSpec, root: Path, canary: str, rec: _Record, laps: stages.Laps) -> None:
    try:
        ws = make_workspace(root, spec.task, spec.checkpoint.dir, spec.level)
        plant_file(ws.home, canary)
    except OSError as e:
        rec.status, rec.error, rec.fault = "infra_error", f"the rig could not make the workspace: {e}", "start"
        return
    finally:
        laps.lap(stages.WORKSPACE)
    argv = list(spec.checkpoint.spec.agent.command)
    if spec.gateway is not None:
        rec.ledger = modelcalls.new_ledger(spec.evidence_dir, spec.task.spec.max_evidence_bytes)
    if spec.task.spec.episode is not None:
        if not _episode(spec, ws, argv, canary, rec):
            return
    else:
        rec.fin = _launch(spec, ws, argv, agent_env(spec, ws, canary), spec.deadline_s,
                          spec.task.spec.max_output_bytes, spec.evidence_dir / "stdout.txt",
                          spec.evidence_dir / "stderr.txt", [needle(canary)],
                          networked=network_of(spec), scan_budget=rec.scan,
                          gateway=_gateway_grant(spec, rec, "candidate", canary))
        rec.status, rec.error = _status_of(rec.fin, spec.cancel)
        rec.fault = "start"  # an infra_error here: the sandbox never ran the agent
    assert rec.fin is not None
    laps.lap(stages.SPAWN)
    laps.move(rec.fin.streams_s, stages.SPAWN, stages.STREAMS)
    rec.canary_where += tuple(rec.fin.canary_found_in or ())
    if write_network_log(spec.evidence_dir, rec.fin.egress, [needle(canary)]):
        rec.canary_where += (NETWORK_JSONL,)
    rec.canary_where += _model_canary(spec.evidence_dir, rec.ledger, canary, rec.scan)
    laps.lap(stages.CANARY)
    if rec.fin.error:  # nothing ran: no evidence to take
        return
    try:
        got = collect(ws.root, spec.evidence_dir, spec.task.spec.evidence,
                      spec.task.spec.max_evidence_bytes,
                      _secret_bytes(spec), [needle(canary)],
                      already=_spent_on_streams(spec.evidence_dir) + _spent_on_models(spec.evidence_dir),
                      make_out=spec.task.spec.verifier.kind == "command",
                      # the planted file is the rig's, not a leak (a copy of it elsewhere is)
                      exclude=frozenset({f"home/{CANARY_FILE}"}), scan=rec.scan)
    except OSError as e:  # writing the evidence failed (what the agent left is only skipped)
        if is_disk_full(e):  # the bundle's disk is full: the operator's to fix, the run stops
            raise disk_full(e, e.filename or spec.evidence_dir, spec.task.spec.max_evidence_bytes,
                            at_most=True) from None  # the evidence of one attempt, within its cap
        # after the agent ran: its tree may be what failed the copy, so never a new attempt
        rec.status, rec.error, rec.fault = "infra_error", f"the rig could not copy the evidence: {e}", "agent"
        return
    finally:
        laps.lap(stages.EVIDENCE)
    laps.move(got.scan_s, stages.EVIDENCE, stages.CANARY)
    rec.canary_where += tuple(got.canary_in)
    # a scan that ran out of its budget is not clean: it is not known what it did not read
    rec.canary_where += rec.scan.incomplete
    rec.evidence_truncated, rec.evidence_skipped = got.truncated, tuple(got.skipped)
    rec.evidence_skipped_count = got.skipped_count
    if rec.status in ("interrupted", "infra_error"):  # infra_error here: an episode's driver fault
        return
    faults = rec.ledger.upstream_faults() if rec.ledger is not None else 0
    if faults:
        # docs/gateway.md "Upstream faults": a dead key or a rate limit is never scored as the
        # side's failure; after the agent's input, the attempt is final and unscored
        rec.status, rec.fault, rec.final = "infra_error", "agent", True
        rec.error = (f"upstream fault: {faults} model call(s) failed upstream (refused, reset or timed "
                     f"out; {MODEL_JSONL} says which): final, unscored, counted worst for the candidate")
        return
    rec.verdict = verify_evidence(
        spec.task, spec.evidence_dir, rec.fin.level, spec.slot, spec.verifier_retries,
        _verify_scratch(spec),
        output_dir=spec.evidence_dir / VERIFIER_DIR, cancel=spec.cancel,
        secrets=spec.driver_secrets, timeout_scale=spec.timeout_scale,
        models=_judge_models(spec, rec, canary),
    )
    laps.lap(stages.VERIFY)
    if spec.cancel is not None and spec.cancel.is_set() and rec.verdict.outcome == "fault":
        rec.status, rec.error = "interrupted", "the rig stopped while the verifier ran"
    elif rec.status == "ok":
        if rec.verdict.outcome == "fault":
            rec.status, rec.error = "infra_error", f"verifier fault: {rec.verdict.error}"
            rec.fault = "verifier"
        else:
            rec.status = rec.verdict.outcome
    elif rec.verdict.outcome == "fault":
        rec.error = f"{rec.error}; the diagnostic verifier run faulted: {rec.verdict.error}"


def _gateway_grant(spec: AttemptSpec, rec: _Record, role: Literal["candidate", "driver"],
                   canary: str) -> sandbox.GatewayGrant | None:
    """The launch's way to the model gateway: the candidate's (the checkpoint's `[models]`;
    the task's `[budget]` with --max-cost-usd-per-attempt, the lower wins) or the episode
    driver's (`[episode] models = true`: its `models_allowed` and `budget`); None without."""
    use, ledger = spec.gateway, rec.ledger
    if use is None or ledger is None:
        return None
    if role == "candidate":
        models = spec.checkpoint.spec.models
        allowed: list[str] = list(models.allowed) if models is not None else []
        per_attempt = (Budget(max_cost_usd=use.max_cost_usd_per_attempt)
                       if use.max_cost_usd_per_attempt is not None else None)
        budget = modelcalls.merged_budget(spec.task.spec.budget, per_attempt)
    else:
        ep = spec.task.spec.episode
        if ep is None or not ep.models:
            return None
        allowed, budget = list(ep.models_allowed), ep.budget
    grant = modelcalls.grant_for(role, allowed, budget, [needle(canary)], (spec.task.id, spec.rep))
    return sandbox.GatewayGrant(modelcalls.process_gateway(use), grant, ledger)


def _judge_models(spec: AttemptSpec, rec: _Record, canary: str) -> JudgeModels | None:
    """`[verifier] models = true`: the judge's grant, its calls in verifier/model.jsonl
    (evalrig.attempt.modelcalls: out of the evidence digest, as every verifier output)."""
    got = modelcalls.judge_models(spec.gateway, spec.task.spec.verifier, spec.evidence_dir / VERIFIER_DIR,
                                  spec.task.spec.max_evidence_bytes, [needle(canary)],
                                  (spec.task.id, spec.rep))
    if got is None:
        return None
    rec.judge_ledger = got[1]
    return got[0]


def _metered_cost(ledger: CallLedger | None) -> Callable[[], float] | None:
    """The candidate's metered spend so far (an episode's `max_cost_usd` under a gateway)."""
    if ledger is None:
        return None

    def cost() -> float:
        got = ledger.spend("candidate")
        return got.cost_usd or 0.0 if got is not None else 0.0

    return cost


def _model_canary(evidence_dir: Path, ledger: CallLedger | None, canary: str,
                  budget: ScanBudget) -> tuple[str, ...]:
    """Where the canary was in the attempt's model calls: a call the gateway refused for it
    (its line says so; the request never left the rig); the forwarded calls taken together,
    each forwarded header's values and the prompt texts joined over the calls in `seq` order
    (a value split across calls, kept bodies or not; the ledger scans them within its own
    budget, a scan it cuts short is not clean); and every kept request body joined in `seq`
    order, within the attempt's scan budget (`budget.incomplete`). docs/gateway.md "The
    canary across calls"."""
    if ledger is None:
        return ()
    found: tuple[str, ...] = ()
    if any(c.refused == "canary" for c in ledger.calls()):
        found += (MODEL_JSONL,)
    split = ledger.split_canary()
    if split != "clean":
        found += (f"{MODEL_JSONL} (calls joined)" if split == "found" else
                  f"{SCAN_INCOMPLETE}: {MODEL_JSONL} (calls joined)",)
    joined = modelcalls.joined_requests(evidence_dir)
    if joined and StreamScanner([needle(canary)], shared=budget).feed_found(joined):
        found += (f"{MODEL_DIR}/ (requests joined)",)
    return found


def _spent_on_models(evidence_dir: Path) -> int:
    """The bytes the gateway's ledger kept in the evidence (they count against its cap)."""
    total = 0
    for p in (evidence_dir / MODEL_JSONL, *((evidence_dir / MODEL_DIR).iterdir()
                                           if (evidence_dir / MODEL_DIR).is_dir() else ())):
        try:
            total += os.lstat(p).st_size
        except FileNotFoundError:
            pass
    return total


def _driver_root(spec: AttemptSpec) -> Path:
    """Beside the attempt root, never in the agent's view: the driver's fresh copy of
    driver/, its EVALRIG_DRIVER_OUT, HOME and TMPDIR."""
    return spec.scratch_root / f"{spec.attempt_id}.driver"




def _episode(spec: AttemptSpec, ws: Workspace, argv: list[str], canary: str, rec: _Record) -> bool:
    """Run the agent and the task's driver through the relay (evalrig.attempt.episode);
    sets the status, the termination and the agent's Finished. False: nothing ran."""
    ep = spec.task.spec.episode
    assert ep is not None
    # --timeout-scale multiplies every time limit, the per-turn ones too (docs/episodes.md)
    ep = ep.model_copy(update={"turn_timeout_s": ep.turn_timeout_s * spec.timeout_scale,
                               "driver_timeout_s": ep.driver_timeout_s * spec.timeout_scale})
    root = _driver_root(spec)
    try:
        root.mkdir(parents=True)
        if spec.level == "process":
            # The driver's alone (docs/security.md, "Episode drivers"): its copy holds the
            # task's private data, out/ its verifier's evidence. As root the driver runs as a
            # uid of the judges' pool (the launch chowns this folder to it), never the agent's
            # nor root; the agent, a pool uid, may search the scratch folder beside it. Not
            # under bwrap: the agent's view has no such folder, and bwrap enters it
            # (--chdir) as uid 0 with every capability but setuid's dropped, so a folder of
            # the driver's uid must stay searchable by others there.
            root.chmod(0o700)
        copy_tree(spec.task.dir / DRIVER_DIR, root / "driver")
        for sub in ("out", "home", "tmp"):
            (root / sub).mkdir()
    except OSError as e:
        rec.status, rec.error, rec.fault = "infra_error", f"the rig could not copy the driver: {e}", "start"
        return False
    tmp = "/tmp" if spec.level == "bwrap" else str(root / "tmp")
    # Each launch's leftover sweep (no PID namespace) kills its own alone: the agent's by the
    # attempt id, sparing what carries this tag; the driver's by this tag, which the agent
    # cannot guess and so cannot put on processes of its own.
    tag = os.urandom(16).hex()
    # [episode] models = true: the driver reaches the gateway as role driver (docs/gateway.md)
    dgate = _gateway_grant(spec, rec, "driver", canary)
    denv = environment.driver_env(home=str(root / "home"), tmpdir=tmp, out=str(root / "out"),
                                  task_id=spec.task.id, attempt_id=spec.attempt_id, seed=spec.seed,
                                  tag=tag, secrets=environment.granted(ep.secrets, spec.driver_secrets),
                                  gateway=modelcalls.env_for(spec.gateway)
                                  if dgate is not None and spec.gateway is not None else None)
    grace = episode.GRACE_S + ep.driver_timeout_s
    # The driver's network is the operator's grant like the agent's (--allow-network,
    # --allow-host): the egress proxy in the driver's own namespace, never the host's network.
    networked = spec.allow_network and ep.network
    if networked:
        denv.update(egress.proxy_env())

    def start_driver(channel: sandbox.Channel) -> sandbox.Finished:
        return sandbox.launch(sandbox.Launch(
            argv=list(ep.driver), cwd=root / "driver", env=denv, level=spec.level,
            rw_paths=[root], ro_paths=sandbox.interpreter_binds(ep.driver[0]),
            network=False, egress=spec.allow_hosts if networked else None, gateway=dgate,
            timeout_s=spec.deadline_s + grace,
            max_output_bytes=VERIFIER_OUTPUT_CAP, stdout_path=root / "stdout.txt",
            stderr_path=root / "stderr.txt", slot=spec.slot, pool="judges",
            attempt_tag=tag, tag_var=environment.DRIVER_TAG_ENV, cancel=spec.cancel,
            channel=channel, unprivileged=True))  # process as root: the judges' pool

    def start_agent(channel: sandbox.Channel) -> sandbox.Finished:
        return _launch(spec, ws, argv, agent_env(spec, ws, canary, episode=True), spec.deadline_s,
                       spec.task.spec.max_output_bytes, spec.evidence_dir / "stdout.txt",
                       spec.evidence_dir / "stderr.txt", [needle(canary)],
                       networked=network_of(spec), channel=channel,
                       spare=f"{environment.DRIVER_TAG_ENV}={tag}", scan_budget=rec.scan,
                       gateway=_gateway_grant(spec, rec, "candidate", canary))

    got = episode.Relay(
        episode=ep, max_output_bytes=spec.task.spec.max_output_bytes, deadline_s=spec.deadline_s,
        transcript=spec.evidence_dir / TRANSCRIPT, task_id=spec.task.id,
        attempt_id=spec.attempt_id, seed=spec.seed, start_agent=start_agent,
        start_driver=start_driver, driver_stderr=root / "stderr.txt", secrets=_secret_values(spec),
        cancel=spec.cancel, metered_cost=_metered_cost(rec.ledger)).run()
    rec.fin = got.agent
    rec.termination = got.termination
    if networked:
        rec.driver_hosts = got.driver.egress_hosts if got.driver is not None else ()
    rec.turn_usage = got.usage
    # docs/attempts.md: a fault once the agent has had its first input never starts the trial again
    # (an agent that could not start never ran: its sandbox's fault is a start fault)
    rec.fault = "agent" if got.agent_fed and not (got.agent is not None and got.agent.error) else "start"
    try:
        left = episode.keep_driver_out(root / "out", spec.evidence_dir / DRIVER_DIR,
                                       spec.task.spec.max_evidence_bytes, _secret_values(spec))
    except OSError as e:
        rec.status, rec.error, rec.fault = "infra_error", f"the rig could not keep the driver's files: {e}", "agent"
        return False
    rec.evidence_skipped += tuple(left)
    rec.evidence_skipped_count += len(left)
    rec.canary_where += tuple(episode.canary_in(spec.evidence_dir, [needle(canary)]))
    if got.interrupted or (spec.cancel is not None and spec.cancel.is_set()):
        rec.status, rec.error, rec.termination = "interrupted", "the rig stopped during the attempt", None
    elif got.infra_error is not None:
        rec.status, rec.error, rec.termination = "infra_error", got.infra_error, None
    elif got.termination == "driver_fault":
        rec.status, rec.error = "infra_error", f"{episode.DRIVER_AT_FAULT}: {got.error}"
    elif got.termination == "agent_timeout":
        rec.status, rec.error = "timeout", got.error
    elif got.termination == "agent_error":
        rec.status, rec.error = "agent_error", got.error
    else:
        rec.status, rec.error = "ok", None
    return rec.fin is not None


def _outcome(spec: AttemptSpec, canary: str, rec: _Record, laps: stages.Laps) -> AttemptOutcome:
    usage = read_usage(spec.evidence_dir)
    if usage.source == "missing" and rec.turn_usage and any(v is not None for v in rec.turn_usage.values()):
        usage = Usage("reported", rec.turn_usage.get("cost_usd"), rec.turn_usage.get("input_tokens"),
                      rec.turn_usage.get("output_tokens"), usage.error)
    found = Canary(value=canary, found=bool(rec.canary_where), where=list(rec.canary_where[:WHERE_MAX]))
    network = network_of(spec) or rec.driver_hosts is not None  # a driver with network: the attempt had it
    return _records(spec, rec, usage, found, network, rec.fin.wall_s if rec.fin else 0.0, laps)


def fault_outcome(spec: AttemptSpec, status: str, error: str, wall_s: float) -> AttemptOutcome:
    """The records of an attempt whose own code raised (the runner records it): the
    evidence there is, and no usage, canary or network claimed. Once the agent was launched
    (its streams or transcript are in the evidence) the fault may have followed its first
    input: an `agent` fault, never run again; before that, a `start` fault (docs/attempts.md,
    "Faults never help the candidate")."""
    launched = any((spec.evidence_dir / name).exists() for name in ("stdout.txt", TRANSCRIPT))
    return _records(spec, _Record(status=status, error=error, fault="agent" if launched else "start"),
                    Usage("missing"),
                    Canary(value="", found=False), False, wall_s, stages.Laps())


def fault_fields(rec: _Record) -> dict[str, Any]:
    """A result's `fault` and `final` (docs/attempts.md, "Faults never help the candidate"):
    only on an infra_error; final when the fault followed the agent's first input, or when
    the attempt was marked final (a verification that must never run again)."""
    if rec.status != "infra_error":
        return {}
    fault = rec.fault or "agent"  # a fault of unknown phase may have followed the agent's input
    return {"fault": fault, "final": True if rec.final or fault == "agent" else None}


def _metered_spend(spec: AttemptSpec, rec: _Record, spend: Spend) -> Spend:
    """Under the model gateway (docs/gateway.md "Spend"): the candidate's spend is the sum of
    its calls (zero when it made none: the rig saw every call it could make), its own
    usage.json kept beside as `reported`, never used; the driver's and the judge's are
    metered where they reached the gateway (`models = true`), else what they reported."""
    use = spec.gateway
    if use is None:
        return spend
    source = "replayed" if use.replayed else "metered"
    candidate = modelcalls.metered(rec.ledger, "candidate") or RoleSpend(
        cost_usd=0.0, input_tokens=0, output_tokens=0, source=source, calls=0,  # type: ignore[arg-type]
        estimated=False if source == "metered" else None)
    ep, ver = spec.task.spec.episode, spec.task.spec.verifier
    driver = modelcalls.metered(rec.ledger, "driver") if ep is not None and ep.models else None
    judge = (modelcalls.metered(rec.judge_ledger, "judge")
             if getattr(ver, "models", False) else None)
    return Spend(candidate=candidate, driver=driver or spend.driver, judge=judge or spend.judge,
                 reported=spend.candidate)


def _records(spec: AttemptSpec, rec: _Record, usage: Usage, canary: Canary, network: bool,
             wall_s: float, laps: stages.Laps) -> AttemptOutcome:
    """The attempt's Actual and Result: the one place either is made."""
    fin = rec.fin
    error = rec.error
    if usage.error:
        error = f"{error}; {usage.error}" if error else usage.error
    spend = _metered_spend(spec, rec, spend_of(spec.evidence_dir, usage,
                                               rec.verdict.usage if rec.verdict else None))
    if spec.gateway is not None and spend.candidate is not None:
        # the cost, tokens and source of the attempt are the metered ones
        c = spend.candidate
        usage = Usage(c.source, c.cost_usd, c.input_tokens, c.output_tokens)  # type: ignore[arg-type]
    ids: dict[str, Any] = {"trial_id": spec.trial_id, "attempt_id": spec.attempt_id,
                           "task_id": spec.task.id, "rep": spec.rep}
    actual = Actual(
        **ids,
        wall_s=wall_s,
        cpu_s=fin.cpu_s if fin else None,
        peak_rss=fin.peak_rss if fin else None,
        exit_code=fin.exit_code if fin else None,
        timed_out=bool(fin and fin.timed_out),
        cost_usd=usage.cost_usd,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        usage_source=usage.source,
        stdout_bytes=fin.stdout_bytes if fin else 0,
        stderr_bytes=fin.stderr_bytes if fin else 0,
        stdout_truncated=bool(fin and fin.stdout_truncated),
        stderr_truncated=bool(fin and fin.stderr_truncated),
        spend=spend,
    )
    v = rec.verdict
    if rec.status == "infra_error" and v is not None and v.runs > 0 and v.untrusted_calls > 0:
        # docs/tasks.md: a verification that ran the agent's code and then faulted is final;
        # another one would give the agent's code another draw
        rec.final = True
    scored_by_verdict = rec.status in ("passed", "failed")
    passed: bool | None
    if scored_by_verdict:
        passed = rec.status == "passed"
    elif rec.status in ("agent_error", "timeout"):
        passed = False
    else:
        passed = None
    diagnostic = None
    if rec.status in ("agent_error", "timeout") and v is not None:
        diagnostic = Diagnostic(passed=v.passed, reward=v.reward)
    laps.lap(stages.RECORD)
    digest, size = evidence_digest(spec.evidence_dir)
    laps.lap(stages.EVIDENCE)
    result = Result(
        **ids,
        attempt=spec.attempt,
        suite=spec.task.suite,
        inputs_id=spec.inputs_id,
        status=rec.status,  # type: ignore[arg-type]
        passed=passed,
        reward=(v.reward if scored_by_verdict and v else (0.0 if passed is False else None)),
        checks=(v.checks if scored_by_verdict and v else {}),
        verifier=spec.task.verifier_identity,
        verifier_runs=v.runs if v else 0,
        verifier_usage=v.usage if v else None,
        diagnostic=diagnostic,
        sandbox=fin.level if fin else spec.level,
        # never launched (the workspace failed): claim no more than best effort
        containment=fin.containment if fin else "subreaper",
        leftovers_removed=list(fin.removed) if fin else [],
        network=network,
        network_hosts=sorted({*(fin.egress_hosts if fin else ()), *(rec.driver_hosts or ())}),
        canary=canary,
        evidence_digest=digest,
        evidence_bytes=size,
        evidence_truncated=rec.evidence_truncated,
        evidence_skipped=list(rec.evidence_skipped),
        evidence_skipped_count=rec.evidence_skipped_count,
        error=error,
        termination=rec.termination,  # type: ignore[arg-type]
        verifier_untrusted_calls=(v.untrusted_calls if v and getattr(spec.task.spec.verifier, "untrusted", False)
                                  else None),
        **fault_fields(rec),
    )
    laps.lap(stages.RECORD)
    return AttemptOutcome(actual, result, laps.seconds)
