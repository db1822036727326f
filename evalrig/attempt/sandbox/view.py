"""What an agent sees under bwrap: the bubblewrap argv of mounts (`/usr`, the `/bin` and
`/lib*` links, an `/etc` of `ETC_FILES`, fresh `/proc`, `/dev`, `/tmp`, `/dev/shm`, and the
launch's binds), and which programs are visible in it (docs/attempts.md "What runs").
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from evalrig.attempt.sandbox.host import HOST, _is_root
from evalrig.attempt.sandbox.spec import Launch
from evalrig.core.environment import MINIMAL_PATH

ETC_FILES = (
    "/etc/ssl",  # certificates, for a network=true agent
    "/etc/ca-certificates",
    "/etc/ld.so.cache",  # the dynamic linker's map of /usr/lib
    "/etc/alternatives",  # Debian's /usr/bin/* links point here (awk, editor, ...)
    "/etc/localtime",
    "/etc/nsswitch.conf",  # name lookup order, for getaddrinfo
    "/etc/hosts",  # localhost
    "/etc/resolv.conf",  # DNS, for a network=true agent
)


"""The only /etc entries visible under bwrap (each bound read-only where it exists).

Not /etc/passwd or /etc/group: the agent gets HOME in its environment, and a slot uid has
no entry there anyway."""


_ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def interpreter_binds(argv0: str) -> list[Path]:
    """The directories to bind read-only so that a task verifier's `argv0` can run inside
    bwrap. For the operator's own commands only: an agent's view gets the operator's
    `--interpreter-prefix` directories instead, never a directory its checkpoint chose
    (docs/attempts.md "What runs").

    argv0 is resolved against minimal_path(); every form of it outside /usr (the path
    itself, e.g. a venv's bin/python, and its realpath, e.g. a pyenv build) contributes its
    prefix: the parent of a `bin`/`sbin` directory, else the directory holding it. A
    relative path (./run.sh) lives in the workspace and needs nothing.
    """
    if "/" in argv0:
        if not os.path.isabs(argv0):
            return []
        found: str | None = argv0
    else:
        found = shutil.which(argv0, path=MINIMAL_PATH)
    if found is None:
        return []
    prefixes: list[Path] = []
    for form in (Path(os.path.abspath(found)), Path(os.path.realpath(found))):
        if _visible_without_binds(form):
            continue
        prefix = form.parent.parent if form.parent.name in ("bin", "sbin") else form.parent
        if prefix not in prefixes and prefix != Path("/"):
            prefixes.append(prefix)
    return prefixes


def _visible_without_binds(path: Path) -> bool:
    return path.is_relative_to("/usr") or any(path.is_relative_to(p) for p in _ROOT_LINKS)


def _root_view() -> list[str]:
    args: list[str] = []
    for name in _ROOT_LINKS:
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    return args


def _bwrap_prefix(
    bwrap: str,
    cwd: Path,
    binds: list[tuple[str, Path]],
    network: bool,
    tmp_size: int | None,
) -> list[str]:
    if _is_root():
        # No user namespace as root: setpriv then drops to a real unprivileged uid.
        args = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not network:
            args.append("--unshare-net")
    else:
        args = [bwrap, "--unshare-all"] + (["--share-net"] if network else [])
    args += ["--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr", *_root_view()]
    view = _etc_view()
    if view is not None:  # one mount instead of one per entry (~2 ms per attempt)
        args += ["--ro-bind", str(view), "/etc"]
    else:
        args += ["--perms", "0755", "--dir", "/etc"]  # else bwrap makes it 0700
        for entry in ETC_FILES:
            args += ["--ro-bind-try", entry, entry]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # Writable by the slot uid: /tmp, and /dev/shm (POSIX semaphores: multiprocessing).
    for scratch in ("/tmp", "/dev/shm"):
        args += ["--perms", "1777"]
        if tmp_size is not None:
            args += ["--size", str(tmp_size)]
        args += ["--tmpfs", scratch]
    # Parents before children, so a read-only bind inside a read-write one stays on top.
    ordered = sorted(binds, key=lambda b: (len(b[1].parts), str(b[1])))
    args += _parent_dirs([path for _, path in ordered])
    for kind, path in ordered:
        args += ["--ro-bind" if kind == "ro" else "--bind", str(path), str(path)]
    args += ["--chdir", str(cwd)]
    if _is_root():
        args += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):  # for setpriv only
            args += ["--cap-add", cap]
    else:
        args += ["--cap-drop", "ALL"]
    return args + ["--"]


def _etc_view() -> Path | None:
    """A copy of the ETC_FILES entries, made once per process, bound as the sandbox's /etc.

    Only what every user may read is copied (not /etc/ssl/private); symbolic links stay
    links (they point into /usr). None where it cannot be made: one bind per entry then.
    A change to /etc/hosts or /etc/resolv.conf during a run is not seen until the next.
    """
    def ask() -> Path | None:
        try:
            return _copy_etc()
        except OSError:
            return None

    return HOST.get("etc view", ask)


def _copy_etc() -> Path:
    _remove_stale_views()
    view = Path(tempfile.mkdtemp(prefix=f"{_VIEW_PREFIX}{os.getpid()}-"))
    atexit.register(shutil.rmtree, view, ignore_errors=True)
    view.chmod(0o755)
    for entry in ETC_FILES:
        source = Path(entry)
        target = view / source.name
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        elif source.is_dir():
            shutil.copytree(source, target, symlinks=True, ignore=_not_world_readable)
        elif source.is_file() and _world_readable(source):
            shutil.copy2(source, target)
    return view


_VIEW_PREFIX = "evalrig-etc-"


def _remove_stale_views() -> None:
    """Views left by rig processes that died without their exit handlers (kill -9)."""
    tmp = Path(tempfile.gettempdir())
    for old in tmp.glob(f"{_VIEW_PREFIX}*-*"):
        pid = old.name[len(_VIEW_PREFIX) :].split("-", 1)[0]
        try:
            if not pid.isdigit() or old.lstat().st_uid != os.geteuid():
                continue
            os.kill(int(pid), 0)  # alive: still in use
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue  # gone already, or a process of another user


def _world_readable(path: Path) -> bool:
    return bool(path.lstat().st_mode & 0o004) or path.is_symlink()


def _not_world_readable(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if not _world_readable(Path(directory) / n)}


def _parent_dirs(targets: list[Path]) -> list[str]:
    """Traversable (0755) empty parents for the bind targets.

    bubblewrap would make missing parents 0700, which a slot uid cannot enter; these hold
    nothing but the way down to the bound directory.
    """
    # /dev/shm and /tmp are fresh tmpfs mounts: directories below them still need making.
    covered = [Path(p) for p in ("/usr", "/proc")] + targets
    mounts = {Path(p) for p in ("/", "/tmp", "/dev", "/dev/shm")}
    made: list[Path] = []
    for target in targets:
        for parent in reversed(target.parents):
            if parent in mounts or parent in made:
                continue
            if any(parent.is_relative_to(c) for c in covered):
                continue
            made.append(parent)
    args: list[str] = []
    for parent in made:
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _visible_in_sandbox(path: Path, spec: Launch) -> bool:
    abspath = Path(os.path.abspath(path))
    roots = [Path(p) for p in (*spec.rw_paths, *spec.ro_paths)]
    return _visible_without_binds(abspath) or any(abspath.is_relative_to(r) for r in roots)
