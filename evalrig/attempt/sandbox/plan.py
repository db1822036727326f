"""The argv chain of one launch, per level: the helpers, the resource limits, the drop to
the slot uid as root and the variables held back from the helpers that run as root
(see evalrig.attempt.sandbox, "Chain per level"); and the attempt root handed to that uid.
"""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evalrig.attempt import privdrop, seccomp
from evalrig.attempt.sandbox.host import _CLONE_NEWNET, _CLONE_NEWPID, HOST, _is_root, _tool
from evalrig.attempt.sandbox.levels import (
    _bwrap_has_size,
    _bwrap_has_status,
    _unshare_argv,
    _unshare_net,
    egress_enforced,
    resolve_level,
)
from evalrig.attempt.sandbox.spec import BASE_UID, Launch
from evalrig.attempt.sandbox.uids import POOLS
from evalrig.attempt.sandbox.view import _bwrap_prefix


def _needs_uid(spec: Launch) -> bool:
    """Whether this launch runs as a uid of a pool: as root, under bwrap always, under
    process an agent's launch (`unprivileged`)."""
    return _is_root() and (spec.level == "bwrap" or spec.unprivileged)


def _slot_uid(spec: Launch) -> int:
    """The uid a lease of the launch's pool starts its search at (its slot's)."""
    first, size = POOLS[spec.pool]
    return first + spec.slot % size


def _setpriv(uid: int | None, pdeathsig: bool = False) -> list[str]:
    """setpriv to the slot uid with every capability gone (execs in place); with
    `pdeathsig`, also killed when the thread that started it ends (set after the uid
    change, which would clear it)."""
    if uid is None:
        return []
    return [
        _tool("setpriv") or "setpriv",  # missing: the probe fails and says so
        *(["--pdeathsig", "KILL"] if pdeathsig else []),
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",  # a set-user-ID file the agent runs runs as the agent
        "--",
    ]


def _rlimits(spec: Launch, own_uid: bool) -> list[tuple[int, int]]:
    """The (resource, limit) pairs for this launch; see the module docstring on NPROC."""
    limits: list[tuple[int, int]] = []
    if spec.memory_bytes is not None:
        limits.append((resource.RLIMIT_AS, spec.memory_bytes))
    if spec.max_file_bytes is not None:
        limits.append((resource.RLIMIT_FSIZE, spec.max_file_bytes))
    if spec.max_processes is not None and own_uid:
        limits.append((resource.RLIMIT_NPROC, spec.max_processes))
    return limits


_PRLIMIT_FLAG = {resource.RLIMIT_AS: "--as", resource.RLIMIT_FSIZE: "--fsize",
                 resource.RLIMIT_NPROC: "--nproc"}


def _prlimit(limits: list[tuple[int, int]]) -> list[str]:
    """util-linux prlimit setting the limits and exec-ing the rest of the argv."""
    if not limits:
        return []
    prlimit = _tool("prlimit")
    if prlimit is None:
        return []  # the limits are "where the platform allows" (docs/attempts.md, "Limits")
    return [prlimit, *(f"{_PRLIMIT_FLAG[r]}={v}" for r, v in limits), "--"]


_DROP_LIMITS = (resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_NPROC)


"""evalrig-drop's limit arguments, in its order."""


def _drop_helper() -> str | None:
    """evalrig-drop, built once per machine where a C compiler is (evalrig.attempt.privdrop);
    None: the prlimit and setpriv chain instead."""
    return HOST.get("tool: evalrig-drop", lambda: privdrop.built(BASE_UID))


def _pdeathsig() -> list[str]:
    """setpriv --pdeathsig: the top process dies with the rig (as bwrap --die-with-parent)."""
    setpriv = _tool("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


@dataclass(frozen=True)
class _Plan:
    argv: list[str]
    popen_cwd: Path | None
    containment: Literal["namespace", "subreaper"]
    uid: int | None
    handshake: bool = False  # bwrap: --info-fd (its init's host pid) and --block-fd
    rlimits: tuple[tuple[int, int], ...] = ()  # set on bwrap's init while it is held
    env: Mapping[str, str] | None = None  # the helpers' environment; None: spec.env
    netns_at: int | None = None  # process + egress: where `nsenter --net=...` goes in argv
    unshare_flags: int = 0  # process as root: namespaces the launching thread makes (unshare(2))
    status_fd: bool = False  # bwrap: --json-status-fd (did it reach the command?)
    private: bool = False  # process as root: evalrig-drop --private (own mounts, IPC, tmpfs)
    seccomp: bytes | None = None  # bwrap: the filter it loads before the command (--seccomp)


# Variables that make the dynamic loader or libc load code or data: the agent may set
# them (a checkpoint's env), but bwrap and setpriv run as root and must not see them.
_LOADER_VARS = frozenset(
    "GCONV_PATH GETCONF_DIR GLIBC_TUNABLES HOSTALIASES LOCALDOMAIN LOCPATH MALLOC_TRACE "
    "NIS_PATH NLSPATH RESOLV_HOST_CONF RES_OPTIONS TZDIR".split()
)


def _loader_var(name: str) -> bool:
    return name.startswith("LD_") or name in _LOADER_VARS


def _held(spec: Launch) -> dict[str, str]:
    """The variables the helpers that run as root must not have: the loader's, and the
    ones the caller names (the checkpoint's env, which a checkpoint wrote)."""
    return {k: v for k, v in spec.env.items() if _loader_var(k) or k in spec.agent_only}


def _final_env(env: Mapping[str, str], loader: Mapping[str, str]) -> list[str]:
    """`env` as the last helper: undo bwrap's PWD, hand the agent the held variables.

    They travel in this argv (the checkpoint's pinned settings, no secret: a secret of
    the same name takes the variable, so it is not held) so that the helpers before it
    never have them in their environment.
    """
    unset = [] if "PWD" in env else ["-u", "PWD"]  # bwrap always sets PWD
    assign = [f"{k}={v}" for k, v in loader.items()]
    if "PWD" in env:
        assign.append(f"PWD={env['PWD']}")  # bwrap replaced it with the directory
    return [_tool("env") or "env", *unset, "--", *assign]


def _plan(spec: Launch, leased: int | None = None) -> _Plan:
    """The argv chain; `leased`: the uid launch() leased (None: the slot's, for a plan
    looked at without running it)."""
    uid = (leased if leased is not None else _slot_uid(spec)) if _needs_uid(spec) else None
    if spec.level == "bwrap":
        bwrap = spec.bwrap_path or resolve_level("bwrap").bwrap_path
        assert bwrap is not None
        binds = [("ro", Path(p)) for p in spec.ro_paths] + [("rw", Path(p)) for p in spec.rw_paths]
        tmp_size = spec.disk_watch[1] if spec.disk_watch and _bwrap_has_size(bwrap) else None
        prefix = _bwrap_prefix(bwrap, spec.cwd, binds, spec.network, tmp_size)
        held = _held(spec)
        chain = _setpriv(uid) + _final_env(spec.env, held)
        limits = tuple(_rlimits(spec, own_uid=uid is not None))
        argv = prefix + chain + list(spec.argv)
        return _Plan(argv, None, "namespace", uid, True, limits,
                     {k: v for k, v in spec.env.items() if k not in held},
                     status_fd=_bwrap_has_status(bwrap), seccomp=seccomp.program())
    unshare = _unshare_argv()
    limits_argv = _prlimit(_rlimits(spec, own_uid=uid is not None))
    helpers_env: Mapping[str, str] | None = None
    drop: list[str] = []
    if uid is not None:
        # As root: unshare and prlimit run as root, then setpriv drops to the slot uid, so
        # the agent cannot write the rig's home or its bundles (docs/attempts.md).
        held = _held(spec)
        drop = _setpriv(uid) + _process_env(spec.env, held)
        helpers_env = {k: v for k, v in spec.env.items() if k not in held}
    if unshare is not None and uid is not None and _namespaces_on_thread(unshare, spec):
        # The rig makes the namespaces on the launching thread (unshare(2)): the chain is
        # then evalrig-drop (or prlimit and the uid drop's setpriv), whose parent-death
        # signal, set after the uid change, outlasts it, so the agent (PID 1 of its
        # namespace) dies with that thread, which lives until it is reaped. Each helper
        # exec costs about as much as the agent's own start.
        flags = _CLONE_NEWPID | (0 if spec.network else _CLONE_NEWNET)
        helper = _drop_helper()
        private = helper is not None and private_view_why() is None
        if helper is not None:  # the same steps in one exec (evalrig.attempt.privdrop)
            given = dict(_rlimits(spec, own_uid=True))
            drop_argv = [helper, *(str(given[r]) if r in given else "-" for r in _DROP_LIMITS), str(uid),
                         *(_private_args(spec) if private else []), "--"]
            chain = drop_argv + _process_env(spec.env, _held(spec))
        else:
            chain = limits_argv + _setpriv(uid, pdeathsig=True) + _process_env(spec.env, _held(spec))
        return _Plan(chain + list(spec.argv), spec.cwd, "namespace", uid, env=helpers_env,
                     unshare_flags=flags, private=private)
    private = False
    helper = _drop_helper() if uid is not None else None
    if helper is not None:
        # evalrig-drop sets the limits and the uid as prlimit and setpriv would, and the
        # seccomp filter, which they cannot. After `unshare --pid --fork`, as PID 1 of the
        # new namespace, it also makes the same private view as above.
        private = unshare is not None and private_view_why() is None
        given = dict(_rlimits(spec, own_uid=True))
        limits_argv = []
        drop = [helper, *(str(given[r]) if r in given else "-" for r in _DROP_LIMITS), str(uid),
                *(_private_args(spec) if private else []), "--", *_process_env(spec.env, _held(spec))]
    top = _pdeathsig()
    # A grant the rig can enforce: the agent joins the namespace the rig made for its proxy
    # (nsenter goes right after the top helper, while it is still root). Unenforced
    # (egress_enforced): the host's.
    proxied = (spec.egress is not None or spec.gateway is not None) and egress_enforced("process")
    netns_at = len(top) if proxied else None
    tail = limits_argv + drop + list(spec.argv)
    if unshare is None:
        return _Plan(top + tail, spec.cwd, "subreaper", uid, env=helpers_env, netns_at=netns_at)
    net = [] if spec.network or proxied or spec.egress is not None else _unshare_net()
    argv = top + unshare[:-2] + net + unshare[-2:] + tail
    return _Plan(argv, spec.cwd, "namespace", uid, env=helpers_env, netns_at=netns_at, private=private)


def _private_args(spec: Launch) -> list[str]:
    """evalrig-drop's --private: the tmpfs size and inodes (the disk allowance: each of the
    three is capped at the whole of it, and the disk watch counts them with the attempt
    root), and the launch's directories bound back, parents first."""
    size = str(spec.disk_watch[1]) if spec.disk_watch else "-"
    inodes = str(spec.disk_watch_entries) if spec.disk_watch_entries else "-"
    binds = [("ro", Path(p)) for p in spec.ro_paths] + [("rw", Path(p)) for p in spec.rw_paths]
    ordered = sorted(binds, key=lambda b: (len(b[1].parts), str(b[1])))
    return ["--private", size, inodes, *(f"{kind}:{os.path.abspath(path)}" for kind, path in ordered)]


def private_view_why() -> str | None:
    """None where an agent's launch under process as root gets its own mount and IPC
    namespaces, fresh tmpfs and read-only host mounts (evalrig-drop --private, tried once on
    this host); else why not (the rig then removes what the agent's uid leaves, after each
    attempt: evalrig.attempt.sandbox.leftovers)."""
    def ask() -> str | None:
        helper = _drop_helper()
        if helper is None:
            return "the compiled helper evalrig-drop could not be built (no C compiler?)"
        try:
            done = subprocess.run([helper, "-", "-", "-", str(BASE_UID), "--private", "4096", "16",
                                   "--", "/bin/true"], capture_output=True, text=True, env={},
                                  cwd="/", timeout=30, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            return str(e)
        if done.returncode != 0:
            return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        return None

    if not _is_root():
        return "the rig is not root"
    return HOST.get("private view", ask)


def seccomp_why(level: str) -> str | None:
    """None where every agent's launch at `level` runs under the seccomp filter of
    evalrig.attempt.seccomp (bwrap's --seccomp; evalrig-drop under process as root); else
    why not, said in the run's sandbox warnings."""
    if seccomp.program() is None:
        return f"the rig has no seccomp filter for this architecture ({platform.machine()})"
    if level == "bwrap":
        return None
    if not _is_root():
        return "the rig is not root; evalrig-drop, which installs it, is used as root only"
    if _drop_helper() is None:
        return "the compiled helper evalrig-drop could not be built (no C compiler?)"
    return None


def _namespaces_on_thread(unshare: list[str], spec: Launch) -> bool:
    """Whether the rig makes this launch's PID (and network) namespace itself: for an
    agent's launch as root (the one every attempt makes; a command verifier's keeps the
    `unshare` chain), where `unshare` needs no user namespace (a process that has threads
    cannot enter a new one), and without an egress proxy or a model gateway (whose namespace
    `nsenter` joins)."""
    return spec.unprivileged and "--user" not in unshare and spec.egress is None and spec.gateway is None


def _process_env(env: Mapping[str, str], held: Mapping[str, str]) -> list[str]:
    """`env` as the last helper under process, only when it has variables to hand over:
    no helper of this level sets PWD, so there is nothing else for it to undo."""
    return _final_env(env, held) if held or "PWD" in env else []


def _chown_tree(root: Path, uid: int) -> None:
    """Give the slot uid its attempt root (the agent writes there as that uid)."""
    os.chown(root, uid, uid, follow_symlinks=False)
    if not root.is_dir():
        return
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                os.chown(entry.path, uid, uid, follow_symlinks=False)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))


def _open_way(spec: Launch, uid: int) -> str | None:
    """Under process as root: make the attempt root the slot uid's alone, and let that uid
    reach it by its host path (no view is made for it). The rig's own scratch folders on
    the way (owned by the rig, below a temporary base) get search permission for others,
    not listing; any other folder others cannot search is a reason not to start (why)."""
    bases = [Path(b) for b in ("/dev/shm", tempfile.gettempdir(), os.environ.get("EVALRIG_SCRATCH"))
             if b]
    for root in spec.rw_paths:
        os.chmod(root, 0o700)  # other attempts' uids may not look in
        for parent in Path(root).parents:
            st = os.stat(parent)
            if st.st_mode & 0o001:
                continue
            if st.st_uid == os.geteuid() and any(parent != b and parent.is_relative_to(b)
                                                 for b in bases):
                os.chmod(parent, (st.st_mode & 0o7777) | 0o001)
                continue
            return (f"the agent's uid {uid} cannot reach its workspace {root}: {parent} is not "
                    "searchable by other users (chmod o+x it, or point EVALRIG_SCRATCH at a "
                    "folder under /tmp or /dev/shm)")
    return None
