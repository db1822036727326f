"""evalrig-drop, the compiled helper an agent's launch under `process` as root ends with
(drop.c beside this file; docs/security.md, "The two sandboxes").

It does in one exec what util-linux `prlimit` and `setpriv` do in two: the limits, the
capabilities, the uid drop, no new privileges and the parent-death signal; then, what neither
does, the seccomp filter of evalrig.attempt.seccomp, compiled in. Each exec of a
dynamically linked helper costs about what the agent's own start does, and an attempt of a
quick agent is mostly its starts, so this is a good part of an attempt's cost (bench/bench_run.py).

It is built from source by the C compiler on first use, once per machine and version of the
source, into the cache of the user the rig runs as (`~/.cache/evalrig/`, owned by it, closed
to others), and used only when that copy is the rig user's own, closed to others, and runs.
Where no compiler builds it, the rig keeps the `prlimit` and `setpriv` chain, which does the
same in two execs, without the seccomp filter (the run says so in its sandbox warnings:
`evalrig.attempt.sandbox.plan.seccomp_why`).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from evalrig.attempt import seccomp

SOURCE = Path(__file__).with_name("drop.c")
COMPILE_FLAGS = (("-O2", "-static"), ("-O2",))
"""Static first (no dynamic loader at each exec); dynamic where the C library has no static
archive."""


def built(drop_to: int, cache: Path | None = None) -> str | None:
    """The path of a working evalrig-drop for this source, built if needed; None where there
    is none (no compiler, no cache the rig's user owns, or a copy that does not drop to
    `drop_to`, a slot's uid). `cache`: another folder than the user's cache (tests)."""
    try:
        source = SOURCE.read_bytes()
    except OSError:
        return None
    define = _filter_define()
    cache = _own_cache() if cache is None else cache if _owned_and_closed(cache, directory=True) else None
    if cache is None:
        return None
    # The filter is part of what is built: a new filter is a new helper.
    path = cache / f"evalrig-drop-{hashlib.sha256(source + define.encode()).hexdigest()[:16]}"
    if not os.path.lexists(path) and not _compile(path, define):
        return None
    if not _owned_and_closed(path, directory=False) or not _runs(path, drop_to):
        return None
    return str(path)


def _own_cache() -> Path | None:
    """~/.cache/evalrig of the effective user, made 0700 if missing; None unless it and its
    parent are that user's own directories that no one else may write."""
    try:
        home = Path(pwd.getpwuid(os.geteuid()).pw_dir)
        cache = home / ".cache" / "evalrig"
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    except (KeyError, OSError):
        return None
    if not all(_owned_and_closed(d, directory=True) for d in (cache.parent, cache)):
        return None
    return cache


def _owned_and_closed(path: Path, directory: bool) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    return kind_ok and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _filter_define() -> str:
    """The compiler's -D of the seccomp filter (evalrig.attempt.seccomp), or of its absence
    on an architecture it has no table for."""
    program = seccomp.program()
    return "-DEVALRIG_NO_FILTER" if program is None else f"-DEVALRIG_FILTER={seccomp.c_initializer(program)}"


def _compile(path: Path, define: str) -> bool:
    """Build into a temporary file beside `path`, then rename it into place (two rigs that
    build at once each rename a whole file)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return False
    fd, tmp = tempfile.mkstemp(prefix=".evalrig-drop-", dir=path.parent)
    os.close(fd)
    try:
        for flags in COMPILE_FLAGS:
            done = subprocess.run([cc, *flags, define, "-o", tmp, str(SOURCE)], stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=120)
            if done.returncode == 0:
                os.chmod(tmp, 0o755)
                os.replace(tmp, path)
                return True
        return False
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _runs(path: Path, drop_to: int) -> bool:
    """Whether it runs here and drops to `drop_to` (`id -u` run through it says so): a copy
    built for another machine, or a build that went wrong, is not used."""
    try:
        done = subprocess.run([str(path), "-", "-", "-", str(drop_to), "--", "id", "-u"], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == str(drop_to)
