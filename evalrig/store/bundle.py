"""Run bundles on disk: one process per bundle, reading a whole run, digests, the rule of
which result counts (docs/attempts.md).

The rig process is the only writer of a bundle. Its record files are JSONL
(`evalrig.store.jsonl`); its other files are replaced atomically (`evalrig.store.files`);
their names are `evalrig.store.layout`'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from evalrig.core.digest import canonical_line, loads, sha256_bytes, sha256_json
from evalrig.core.errors import Problem, invalid
from evalrig.core.outcomes import final_of
from evalrig.models.run import Actual, AttemptEvent, Estimate, Result, RunManifest
from evalrig.store.files import exclusive_lock, read_json, sha256_file, write_bytes_atomic
from evalrig.store.invocation import command_name, quoted
from evalrig.store.jsonl import read_records_fast
from evalrig.store.layout import (
    ACTUALS_JSONL,
    ATTEMPTS_JSONL,
    ESTIMATES_JSONL,
    LOCK,
    LOCK_HOLDER,
    MANIFEST,
    NOT_DIGESTED,
    RESULTS_JSONL,
)

M = TypeVar("M", bound=BaseModel)


def bundle_digest(files: dict[str, str]) -> str:
    """The bundle digest (docs/release-flow.md): the sha256 of the canonical JSON of the manifest's file-digest table."""
    return sha256_json(files)


class BundleLock:
    """One process per bundle: an exclusive flock on BUNDLE/.lock, taken without waiting.

    The kernel drops the lock when its holder dies (kill -9 included), so a crashed run
    never leaves the bundle locked. Beside it, `.lock.holder` names the holder (pid, host,
    argv) so that a refused second process can say who has the bundle.
    """

    def __init__(self, bundle: Path, argv: list[str]) -> None:
        self.bundle = Path(bundle)
        self.argv = argv
        self._lock: contextlib.AbstractContextManager[int] | None = None

    def acquire(self) -> BundleLock:
        import socket

        self.bundle.mkdir(parents=True, exist_ok=True)
        for wait_s in (0.02, 0.05, 0.1, None):
            lock = exclusive_lock(self.bundle / LOCK, wait=False)
            try:
                lock.__enter__()
                break
            except BlockingIOError:
                # A reader asking whether the holder lives (`unfinished_state`) holds the
                # lock for an instant: only a holder that keeps it is another run.
                if wait_s is None:
                    raise invalid(
                        f"the bundle is in use by {self._holder()}",
                        file=self.bundle,
                        hint="wait for that run to finish (or stop it), then run the command again",
                    ) from None
                time.sleep(wait_s)
        self._lock = lock
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "argv": self.argv}
        write_bytes_atomic(self.bundle / LOCK_HOLDER, canonical_line(holder))
        return self

    def _holder(self) -> str:
        return holder_of(self.bundle)

    def release(self) -> None:
        if self._lock is not None:
            try:
                (self.bundle / LOCK_HOLDER).unlink(missing_ok=True)
            finally:
                self._lock.__exit__(None, None, None)
                self._lock = None

    def __enter__(self) -> BundleLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder_of(bundle: Path) -> str:
    """Who `.lock.holder` says holds the bundle: "pid N on HOST (ARGV)"."""
    try:
        h = loads((Path(bundle) / LOCK_HOLDER).read_bytes())
        return f"pid {h['pid']} on {h['host']} ({' '.join(h['argv'])})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its pid is not recorded yet)"


def lock_is_held(bundle: Path) -> bool:
    """Whether a live process holds the bundle's lock. The kernel's flock is the authority:
    it goes with its holder, kill -9 included, whatever `.lock.holder` still says. Asked
    without creating or writing anything (a read-only descriptor can take a flock)."""
    try:
        fd = os.open(Path(bundle) / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file: no run ever held it, or it is gone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing releases the probe's own lock at once
    return False


def unfinished_state(bundle: Path) -> str:
    """What a bundle whose manifest says `running` is (docs/release-flow.md, "Resume after a
    crash"): a run that still holds it, or one that stopped without finishing (killed, the
    machine went down) and is interrupted: its bundle is resumable."""
    if lock_is_held(bundle):
        return f"still running: in use by {holder_of(bundle)}"
    return ("interrupted: the run never finished, and no process holds the bundle (it was "
            f"killed, or the machine went down); resume with `{command_name()} run --out {quoted(bundle)} --resume`")


@dataclass(frozen=True)
class RunBundle:
    """A run bundle as read from disk. `torn` maps a JSONL file name to its ignored torn line."""

    dir: Path
    manifest: RunManifest
    attempts: list[AttemptEvent]
    estimates: list[Estimate]
    actuals: list[Actual]
    results: list[Result]
    torn: dict[str, int]


def load_run(dir: Path) -> RunBundle:
    """Read a run bundle: the manifest and every whole record; torn last lines reported."""
    dir = Path(dir)
    torn: dict[str, int] = {}

    def records(name: str, model: type[M]) -> list[M]:
        recs = read_records_fast(dir / name, model)
        if recs.torn_line is not None:
            torn[name] = recs.torn_line
        return recs.records

    manifest = read_json(dir / MANIFEST, RunManifest)
    # In the order an attempt writes them (RUN_JSONL): an error names the first bad file.
    return RunBundle(
        dir=dir,
        manifest=manifest,
        attempts=records(ATTEMPTS_JSONL, AttemptEvent),
        estimates=records(ESTIMATES_JSONL, Estimate),
        actuals=records(ACTUALS_JSONL, Actual),
        results=records(RESULTS_JSONL, Result),
        torn=torn,
    )


def final_results(bundle: RunBundle) -> dict[str, Result]:
    """trial_id → the Result that counts (`evalrig.core.outcomes.final_of`)."""
    return final_of(bundle.results)


def file_digests(dir: Path, exclude: frozenset[str] = NOT_DIGESTED,
                 kept: dict[str, bytes | None] | None = None) -> dict[str, str]:
    """{relative path: sha256} of every regular file under `dir` except top-level `exclude`.

    Temp files of an interrupted atomic write (`.name.tmp.PID`) are left out too. The files
    keyed in `kept` are read whole, once: their digest is of the bytes stored in `kept`
    (None stays for a file that is not there), so
    that a caller parses exactly the bytes it verified (never a second read another writer
    could have swapped in between).
    """
    dir = Path(dir)
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(dir):
        rel_root = os.path.relpath(root, dir)
        dirs.sort()
        for name in sorted(files):
            rel = name if rel_root == "." else f"{rel_root}/{name}"
            if rel_root == "." and (name in exclude or is_atomic_temp(name)):
                continue
            path = os.path.join(root, name)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            if kept is not None and rel in kept:
                with open(path, "rb") as f:
                    data = f.read()
                kept[rel] = data
                out[rel] = sha256_bytes(data)
            else:
                out[rel] = sha256_file(Path(path))
    return out


def is_atomic_temp(name: str) -> bool:
    """Whether `name` is the temp file of an interrupted write_bytes_atomic (`.name.tmp.PID`)."""
    return name.startswith(".") and ".tmp." in name


def check_run_digests(dir: Path, manifest: RunManifest | None = None,
                      kept: dict[str, bytes | None] | None = None) -> list[Problem]:
    """Every file of a finished run against `manifest.files`: changed, missing, or extra.

    A run that never finished (status `running`) has no digests to check; that is a
    problem in itself, since its files may still change. `manifest`: the one the caller
    already read (read here otherwise), so that the digests checked are those of the
    manifest the caller goes on to use. `kept`: files to hand back as the bytes whose
    digest was checked (see `file_digests`).
    """
    dir = Path(dir)
    if manifest is None:
        manifest = read_json(dir / MANIFEST, RunManifest)
    mpath = str(dir / MANIFEST)
    if manifest.status == "running":
        # Without the holder's pid or the bundle's path: compare records this text.
        state = ("still running" if lock_is_held(dir) else
                 "interrupted (no process holds the bundle); resume it with "
                 "`evalrig run --out BUNDLE --resume`")
        if kept is not None:
            file_digests(dir, kept=kept)  # nothing to check them against; still read once
        return [Problem(mpath, f"the run never finished (status running), so its files have no "
                        f"recorded digests: {state}", "status")]
    actual = file_digests(dir, kept=kept)
    problems: list[Problem] = []
    for rel, want in sorted(manifest.files.items()):
        got = actual.get(rel)
        if got is None:
            problems.append(Problem(str(dir / rel), "missing (listed in manifest.json files)"))
        elif got != want:
            problems.append(Problem(str(dir / rel), f"digest {got} differs from manifest.json's {want}"))
    for rel in sorted(set(actual) - set(manifest.files)):
        problems.append(Problem(str(dir / rel), "not listed in manifest.json files (added after the run?)"))
    return problems


def manifest_problems(dir: Path, b: RunBundle) -> list[Problem]:
    """The manifest's status and counts against the records they summarise.

    The bundle digest covers the files, not the manifest; what compare and the gate read
    from it (complete or not, how many scored) must still agree with results.jsonl.
    """
    m = b.manifest
    if m.status == "running":  # a run killed before it could write its last counts
        return []
    final = final_results(b)
    statuses = [r.status for r in final.values()]
    last = {r.trial_id: r for r in b.results}
    derived = {
        "scored": len(final),
        **{s: statuses.count(s) for s in ("passed", "failed", "agent_error", "timeout")},
        "infra_error": sum(r.status == "infra_error" for r in b.results),
        "unscored": m.counts.trials - len(final),
        # trials settled unscored: the last attempt final (docs/attempts.md)
        "final_unscored": sum(t not in final and r.settled_unscored for t, r in last.items()),
    }
    if not m.subset:
        derived["trials"] = m.taskset.count * m.repeat
    path = str(dir / MANIFEST)
    out = [Problem(path, f"counts.{k}: the manifest says {getattr(m.counts, k)}, the records give {v}")
           for k, v in derived.items() if getattr(m.counts, k) != v]
    status = "complete" if derived["unscored"] == derived["final_unscored"] else "incomplete"
    if m.status != status:
        out.append(Problem(path, f"status: the manifest says {m.status}, the records make it {status}"))
    return out



# -- the run manifest, signed by the home that ran it (docs/security.md) -----------------------


def manifest_digest(manifest: RunManifest) -> str:
    """sha256 of the canonical JSON of the whole manifest without `sig`: what `runs.jsonl` records
    of a run, so that a relabelled copy (another checkpoint id, status, settings) is not it."""
    from evalrig.core.digest import sha256_bytes
    from evalrig.store.signing import signed_bytes

    return sha256_bytes(signed_bytes(manifest.model_dump(mode="json")))


def write_run_manifest(dir: Path, manifest: RunManifest, home: Path) -> RunManifest:
    """Write `manifest.json` signed by the home's key (again at every rewrite); returns it as written."""
    from evalrig.store.files import write_json_atomic
    from evalrig.store.signing import home_key

    signed = RunManifest.model_validate(home_key(home).sign(manifest.model_dump(mode="json")))
    write_json_atomic(Path(dir) / MANIFEST, signed)
    return signed


def manifest_signature_problem(manifest: RunManifest, home: Path) -> str | None:
    """Why the manifest's signature is not one this home believes for a run it holds (its own key,
    or a key it trusts for `register`); None when it verifies."""
    from evalrig.store.signing import keyring

    ring = keyring(home)
    plain = manifest.model_dump(mode="json")
    return ring.verifies(plain, None if manifest.key == ring.home else "register")


def refuse_unlike_registration(dir: Path, manifest: RunManifest, home: Path, registered: str | None) -> None:
    """Refuse (exit 4) a run's manifest whose signature does not verify, or that is not the one the
    home registered for its run id (`registered`: the manifest digest `runs.jsonl` holds; None on
    lines from before the rig recorded it: nothing to hold it to)."""
    if registered is None:
        return
    why = manifest_signature_problem(manifest, home)
    if why is not None:
        raise invalid(f"the run's manifest is not as the home that ran it signed it: {why}", file=Path(dir) / MANIFEST,
                      hint="use the run bundle as the rig wrote it; a copy edited after the run is not that run")
    got = manifest_digest(manifest)
    if got != registered:
        raise invalid(f"differs from the manifest this rig's home registered for run {manifest.run_id} (digest "
                      f"{got}, registered {registered}): a relabelled copy is not the registered run",
                      file=Path(dir) / MANIFEST, hint="use the run bundle as the rig wrote it")
