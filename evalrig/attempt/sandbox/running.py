"""launch(): start a plan, pump its output into capped, scanned sinks, enforce the wall
clock, the disk watch and cancellation, and return when every process it started is
dead (the leftover sweep where no PID namespace could be made).
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import resource
import select
import selectors
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Literal

from evalrig.attempt.sandbox.disk import _DiskWatch
from evalrig.attempt.sandbox.host import _become_subreaper, _check, _libc, _on_thread
from evalrig.attempt.sandbox.leftovers import sweep
from evalrig.attempt.sandbox.levels import containment_for, gateway_enforced
from evalrig.attempt.sandbox.plan import _chown_tree, _needs_uid, _open_way, _Plan, _plan
from evalrig.attempt.sandbox.sockets import _Handshake, _nsenter, _Services
from evalrig.attempt.sandbox.spec import Finished, Launch
from evalrig.attempt.sandbox.uids import Lease, lease_uid
from evalrig.attempt.sandbox.view import _visible_in_sandbox
from evalrig.attempt.streams import CappedSink, ScanBudget, StreamScanner
from evalrig.core.errors import EvalrigError

_READ_SIZE = 1 << 20


_PIPE_SIZE = 1 << 20


_F_SETPIPE_SZ = 1031


_POLL_S = 0.05  # how often cancel is checked: well under the 100 ms promised


_DRAIN_AFTER_EXIT_S = 2.0  # pipes still open this long after the exit belong to an escapee


_REAP_WAIT_S = 5.0


_MAX_WAIT_S = 1.0  # the longest select(): an infinite limit must not reach epoll


NOT_FOUND = 127
"""A shell's status for a command that is not there (Finished.shell_status)."""
NOT_EXECUTABLE = 126
"""...and for one that is there but cannot be executed."""


def _unstartable(spec: Launch) -> tuple[str, int | None] | None:
    """Why argv[0] cannot start (the agent's fault) and the status a shell would give it
    (NOT_FOUND, NOT_EXECUTABLE, or None), or None."""
    if not spec.argv:
        return "the command is empty", None
    argv0 = spec.argv[0]
    if "/" in argv0:
        path: str | None = str(spec.cwd / argv0) if not os.path.isabs(argv0) else argv0
        assert path is not None
        if not os.path.isfile(path):
            return f"{argv0}: no such file (from {spec.cwd})", NOT_FOUND
    else:
        path = shutil.which(argv0, path=spec.env.get("PATH", os.defpath))
        if path is None:
            return f"{argv0}: not found on PATH={spec.env.get('PATH', os.defpath)}", NOT_FOUND
    if not os.access(path, os.X_OK):
        return f"{argv0}: not executable", NOT_EXECUTABLE
    if spec.level == "bwrap" and not _visible_in_sandbox(Path(path), spec):
        return (
            f"{argv0} resolves to {path}, which is not visible inside the bwrap sandbox; "
            "name its installation with run --interpreter-prefix"
        ), None
    return None


def _missing_paths(spec: Launch) -> str | None:
    """A directory the rig was asked to use that is not there (the rig's fault)."""
    for name, paths in (
        ("cwd", [spec.cwd]),
        ("rw_paths", spec.rw_paths),
        ("ro_paths", spec.ro_paths),
    ):
        for path in paths:
            if not os.path.exists(path):
                return f"{name}: {path} does not exist"
    for name, path in (("stdout_path", spec.stdout_path), ("stderr_path", spec.stderr_path)):
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            return f"{name}: the directory of {path} does not exist"
    return None


def _failed(spec: Launch, message: str, kind: Literal["agent", "infra"],
            shell_status: int | None = None) -> Finished:
    return Finished(
        exit_code=None,
        signal=None,
        timed_out=False,
        interrupted=False,
        killed_for=None,
        wall_s=0.0,
        cpu_s=None,
        peak_rss=None,
        stdout_bytes=0,
        stderr_bytes=0,
        stdout_truncated=False,
        stderr_truncated=False,
        canary_found_in=(),
        containment=containment_for(spec.level),
        level=spec.level,
        network=spec.network,
        error=message,
        error_kind=kind,
        shell_status=shell_status,
    )


def launch(spec: Launch) -> Finished:
    """Run spec.argv to its end or its limit; every process it started is dead on return.

    Never raises for the agent's behaviour. Returns with `error` set when nothing could be
    started (see Finished).
    """
    try:
        return _launch(spec)
    finally:
        if spec.channel is not None:
            spec.channel.release()


def _launch(spec: Launch) -> Finished:
    missing = _missing_paths(spec)
    if missing is not None:
        return _failed(spec, missing, "infra")
    why = _unstartable(spec)
    if why is not None:
        return _failed(spec, why[0], "agent", why[1])
    if spec.gateway is not None and not gateway_enforced(spec.level):
        # a gateway the agent could bypass proves nothing (docs/gateway.md); `run` refuses
        # it before the first attempt, and a launch never starts one unenforced
        return _failed(spec, "the model gateway needs a network namespace of the sandbox's own "
                       "(bwrap, or process as root with util-linux nsenter)", "infra")
    lease: Lease | None = None
    try:
        _become_subreaper()
        if _needs_uid(spec):  # held until every process of the launch is dead (returned)
            lease = lease_uid(spec.pool, spec.slot)
        plan = _plan(spec, lease.uid if lease is not None else None)
        if plan.uid is not None:
            for root in spec.rw_paths:
                _chown_tree(Path(root), plan.uid)
            if spec.level == "process":
                blocked = _open_way(spec, plan.uid)
                if blocked is not None:
                    if lease is not None:
                        lease.release()
                    return _failed(spec, blocked, "infra")
    except OSError as exc:
        if lease is not None:
            lease.release()
        return _failed(spec, f"preparing the sandbox: {exc}", "infra")
    except EvalrigError as exc:  # bwrap asked for, and none works here
        if lease is not None:
            lease.release()
        return _failed(spec, exc.message, "infra")
    try:
        if plan.unshare_flags:
            done = _on_thread(lambda: _Run(spec, plan).run_unshared())
        else:
            done = _Run(spec, plan).run()
        if plan.uid is not None and spec.level == "process" and not plan.private:
            # No private namespaces: what the uid left on the host goes before the lease does.
            done = dataclasses.replace(done, removed=tuple(sweep(plan.uid, [*spec.rw_paths, *spec.ro_paths])))
        return done
    except OSError as exc:
        return _failed(spec, f"starting {spec.argv[0]}: {exc}", "infra")
    finally:
        if lease is not None:
            lease.release()


class _Run:
    """One running process: the selector loop over its pipes, its exit and its limits."""

    def __init__(self, spec: Launch, plan: _Plan) -> None:
        self.spec = spec
        self.plan = plan
        self.killed_for: str | None = None
        self.streams_s = 0.0  # the rig's own time on the streams (Finished.streams_s)
        # the streams' canary scans spend from it (the attempt's, shared with its evidence)
        self.scan = spec.scan_budget if spec.scan_budget is not None else ScanBudget()
        # The namespace's init when it is not our direct child: pid -> pidfd. Its exit
        # means the namespace is empty; as the rig is a subreaper, we reap it (rusage).
        self.inner: dict[int, int] = {}

    def run_unshared(self) -> Finished:
        """run() on a thread of its own, in the new namespaces plan.unshare_flags names.

        The thread starts no other thread (one in a new PID namespace cannot) and ends
        with the launch, taking its namespaces with it; the agent keeps its own."""
        _check(_libc().unshare(self.plan.unshare_flags), "unshare(CLONE_NEWPID)")
        return self.run()

    def run(self) -> Finished:
        spec = self.spec
        secrets = spec.redact or {}
        began = time.perf_counter()
        sinks = {
            "stdout": CappedSink(spec.stdout_path, spec.max_output_bytes, secrets),
            "stderr": CappedSink(spec.stderr_path, spec.max_output_bytes, secrets),
        }
        scanners = {name: StreamScanner(spec.scan_for, shared=self.scan) for name in sinks}
        self.streams_s += time.perf_counter() - began
        wanted = spec.egress is not None or spec.gateway is not None
        egress = _Services(spec.egress, spec.gateway) if wanted and (
            self.plan.handshake or self.plan.netns_at is not None) else None
        shake = _Handshake(self.plan.rlimits, egress, status=self.plan.status_fd,
                           seccomp=self.plan.seccomp) if self.plan.handshake else None
        argv = self.plan.argv
        if shake is not None:
            argv = [argv[0], *shake.args(), *argv[1:]]
        start = time.monotonic()
        try:
            pass_fds = shake.child_fds() if shake else ()
            if egress is not None and self.plan.netns_at is not None:
                netns = egress.own_namespace()
                at = self.plan.netns_at
                argv = [*argv[:at], *_nsenter(netns), *argv[at:]]
                pass_fds = (netns,)
            chan = spec.channel
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL if chan is None else chan.stdin_fd,
                    stdout=subprocess.PIPE if chan is None else chan.stdout_fd,
                    stderr=subprocess.PIPE,
                    env=dict(self.plan.env if self.plan.env is not None else spec.env),
                    cwd=self.plan.popen_cwd,
                    start_new_session=True,
                    pass_fds=pass_fds,
                )
            finally:
                if chan is not None:
                    chan.release()
                if shake is not None:
                    shake.spawned()
                if egress is not None:
                    egress.spawned()
            self.proc = proc
            status, usages = self._supervise(proc, sinks, scanners, start, shake)
        finally:
            self.scan.tick = None
            began = time.perf_counter()
            for sink in sinks.values():
                sink.close()
            self.streams_s += time.perf_counter() - began
            for fd in self.inner.values():
                os.close(fd)
            if shake is not None:
                shake.close()
            if egress is not None:
                egress.close()  # every connection ends with the attempt
        if shake is not None and shake.pid is None and self.killed_for is None:
            # bwrap ended before it made the sandbox: the agent never ran.
            text = spec.stderr_path.read_bytes()[-2000:].decode(errors="replace").strip()
            last = text.splitlines()[-1] if text else f"wait status {status}"
            return _failed(spec, f"bwrap could not make the sandbox: {last}", "infra")
        if (shake is not None and self.killed_for is None and os.WIFEXITED(status)
                and not shake.reached_command):
            # bwrap ended on its own without reaching the command: its init died setting the
            # sandbox up, and the agent never ran. (bwrap killed by a signal from outside
            # cannot say either way; that status is read as before.)
            text = spec.stderr_path.read_bytes()[-2000:].decode(errors="replace").strip()
            last = text.splitlines()[-1] if text else f"wait status {status}"
            return _failed(spec, f"bwrap could not finish the sandbox: {last}", "infra")
        wall = time.monotonic() - start
        exit_code, sig = self._decode(status)
        # Linux charges the rig's peak RSS at the spawn to the child's first exec; the
        # rig's peak only grows, so read after the wait it bounds what was charged.
        peak = _peak_rss(usages, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        began = time.perf_counter()
        found_in = _found_in(scanners)
        self.streams_s += time.perf_counter() - began
        return Finished(
            exit_code=exit_code,
            signal=sig,
            timed_out=self.killed_for == "timeout",
            interrupted=self.killed_for == "interrupt",
            killed_for=self.killed_for,
            wall_s=wall,
            cpu_s=sum(u.ru_utime + u.ru_stime for u in usages),
            peak_rss=peak,
            stdout_bytes=sinks["stdout"].total,
            stderr_bytes=sinks["stderr"].total,
            stdout_truncated=sinks["stdout"].truncated,
            stderr_truncated=sinks["stderr"].truncated,
            canary_found_in=found_in,
            containment=self.plan.containment,
            level=spec.level,
            network=spec.network,
            egress=egress.records() if egress is not None and egress.allow is not None else None,
            egress_hosts=tuple(egress.hosts()) if egress is not None else (),
            streams_s=self.streams_s,
        )

    def _decode(self, status: int) -> tuple[int | None, int | None]:
        if os.WIFSIGNALED(status):
            return None, os.WTERMSIG(status)
        code = os.WEXITSTATUS(status)
        if self.spec.level == "bwrap" and code > 128 and (code - 128) < signal.NSIG:
            # bubblewrap's init reports a child killed by signal N as exit 128 + N.
            return None, code - 128
        return code, None

    def _supervise(
        self,
        proc: subprocess.Popen[bytes],
        sinks: dict[str, CappedSink],
        scanners: dict[str, StreamScanner],
        start: float,
        shake: _Handshake | None,
    ) -> tuple[int, list[resource.struct_rusage]]:
        assert proc.stderr is not None
        pidfd = os.pidfd_open(proc.pid)
        try:
            self._pump_until_exit(proc, pidfd, sinks, scanners, start, shake)
            _, status, rusage = os.wait4(proc.pid, 0)
            proc.returncode = status  # Popen must not wait for it again
            if shake is not None:
                # bwrap is gone; its init is our child (or zombie) now, so its pid
                # cannot have been reused.
                self._adopt(shake.finish())
            return status, [rusage, *self._reap_inner()]
        finally:
            os.close(pidfd)
            if proc.stdout is not None:
                proc.stdout.close()
            proc.stderr.close()
            if proc.returncode is None:  # an exception mid-loop: leave nothing behind
                self._kill(self.killed_for or "interrupt")
                proc.wait()
                self._reap_inner()

    def _pump_until_exit(
        self,
        proc: subprocess.Popen[bytes],
        pidfd: int,
        sinks: dict[str, CappedSink],
        scanners: dict[str, StreamScanner],
        start: float,
        shake: _Handshake | None,
    ) -> None:
        """Read both pipes to their end and watch the limits until the top process exits."""
        assert proc.stderr is not None
        spec = self.spec
        view = memoryview(bytearray(_READ_SIZE))
        deadline = start + spec.timeout_s
        watch = _DiskWatch(spec.disk_watch, spec.disk_watch_entries) if spec.disk_watch else None
        if watch is not None and self.plan.private:
            watch.see_private(proc.pid)
        with selectors.DefaultSelector() as selector:
            pipes = [(n, p) for n, p in (("stdout", proc.stdout), ("stderr", proc.stderr)) if p is not None]
            for name, pipe in pipes:
                _widen_pipe(pipe.fileno())
                os.set_blocking(pipe.fileno(), False)
                selector.register(pipe.fileno(), selectors.EVENT_READ, name)
            selector.register(pidfd, selectors.EVENT_READ, "exit")
            if shake is not None:
                selector.register(shake.info_r, selectors.EVENT_READ, "info")
            if spec.channel is not None:
                selector.register(spec.channel.stop_r, selectors.EVENT_READ, "stop")
            ended_at: float | None = None  # when the top process exited

            def tick() -> None:
                """Between slices of a stream's scan (a bomb on stdout may keep it busy
                for seconds): the limits are watched as the loop watches them."""
                nonlocal deadline
                if ended_at is not None or self.killed_for is not None:
                    return
                now = time.monotonic()
                if spec.paused is not None:
                    deadline = start + spec.timeout_s + spec.paused()
                reason = self._limit_reached(now, deadline, watch)
                if reason is not None:
                    self._kill(reason)

            self.scan.tick = tick  # let go of in run()
            open_pipes = len(pipes)
            while open_pipes or ended_at is None:
                now = time.monotonic()
                if spec.paused is not None:
                    deadline = start + spec.timeout_s + spec.paused()
                if ended_at is None and self.killed_for is None:
                    reason = self._limit_reached(now, deadline, watch)
                    if reason is not None:
                        self._kill(reason)
                elif ended_at is not None and now - ended_at > _DRAIN_AFTER_EXIT_S:
                    break  # only an escapee (subreaper mode) holds a pipe this long
                wait = 0.1 if ended_at or self.killed_for else self._wait_time(now, deadline, watch)
                for key, _ in selector.select(wait):
                    if key.data == "stop":
                        selector.unregister(key.fd)
                        if ended_at is None and self.killed_for is None:
                            self._kill("stopped")
                    elif key.data == "exit":
                        selector.unregister(pidfd)
                        ended_at = time.monotonic()
                        if self.plan.containment == "subreaper":
                            _sweep_tagged(spec, proc.pid)
                    elif key.data == "info":
                        assert shake is not None
                        if not shake.on_readable():
                            selector.unregister(shake.info_r)
                            self._adopt(shake.pid)
                            if watch is not None and shake.pid is not None:
                                watch.see_sandbox(shake.pid)
                    else:
                        began = time.perf_counter()
                        more = self._pump(key.fd, view, scanners[key.data], sinks[key.data])
                        self.streams_s += time.perf_counter() - began
                        if not more:
                            selector.unregister(key.fd)
                            open_pipes -= 1

    @staticmethod
    def _pump(fd: int, view: memoryview, scanner: StreamScanner, sink: CappedSink) -> bool:
        """One read from a pipe into its scanner and sink; False at end of file."""
        n = os.readv(fd, [view])
        if n == 0:
            return False
        chunk = bytes(view[:n])
        scanner.feed(chunk)
        sink.feed(chunk)
        return True

    def _limit_reached(self, now: float, deadline: float, watch: _DiskWatch | None) -> str | None:
        if now >= deadline:
            return "timeout"
        if self.spec.cancel is not None and self.spec.cancel.is_set():
            return "interrupt"
        if watch is not None and watch.exceeded(now):
            return "disk"
        return None

    def _wait_time(self, now: float, deadline: float, watch: _DiskWatch | None) -> float:
        wait = min(max(deadline - now, 0.0), _MAX_WAIT_S)
        if self.spec.cancel is not None:
            wait = min(wait, _POLL_S)
        if watch is not None:
            wait = min(wait, max(watch.next_at - now, 0.0))
        return wait

    def _kill(self, reason: str) -> None:
        """SIGKILL the top process's group and the namespace's init, wherever it is."""
        self.killed_for = reason
        pid = self.proc.pid
        # bwrap's init sits in a session of its own, and unshare's child dies only by
        # PDEATHSIG, after unshare: hold and kill them directly.
        for child in _children(pid):
            self._adopt(child)
        for fd in self.inner.values():
            _pidfd_kill(fd)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.plan.containment == "subreaper":
            _sweep_tagged(self.spec, pid)

    def _adopt(self, pid: int | None) -> None:
        if pid is None or pid in self.inner:
            return
        try:
            self.inner[pid] = os.pidfd_open(pid)
        except OSError:
            pass  # already gone and reaped

    def _reap_inner(self) -> list[resource.struct_rusage]:
        """Wait for each inner init to exit (its namespace is then empty) and reap it.

        bwrap's init would wait for every last process of the sandbox; it dies instead by
        --die-with-parent as soon as bwrap, told of the agent's exit, exits. The kernel
        kills the rest of the namespace before the init's exit completes.
        """
        usages = []
        for pid, fd in self.inner.items():
            waiter = select.poll()  # not select(): a long-lived rig may hold fds past 1024
            waiter.register(fd, select.POLLIN)
            exited = bool(waiter.poll(_REAP_WAIT_S * 1000))
            flags = os.WEXITED | os.WNOWAIT | (0 if exited else os.WNOHANG)
            try:
                if os.waitid(os.P_PIDFD, fd, flags) is None:
                    continue  # still dying after the wait: leave it to the subreaper
            except ChildProcessError:
                continue  # its own parent reaped it
            _, _, rusage = os.wait4(pid, 0)  # our zombie: the pid is still its own
            usages.append(rusage)
        return usages


def _found_in(scanners: dict[str, StreamScanner]) -> tuple[str, ...]:
    """Where the canary was: each stream, and stdout followed directly by stderr (a value
    split across the two), as docs/attempts.md "The canary" says."""
    found = [name for name, s in scanners.items() if s.found]
    if not found and scanners["stdout"].seam_found(scanners["stderr"]):
        found.append("stdout+stderr")
    return tuple(found)


def _peak_rss(usages: list[resource.struct_rusage], rig_peak_kib: int) -> int | None:
    """Peak RSS in bytes of the agent's tree, where it can be told apart from the rig's.

    usages[0] is the direct child's, whose peak starts at the rig's own (its first exec
    ran in the rig's address space); any further ones are of inner inits the rig reaped
    (bwrap's init, or unshare's child after a kill), forked from a small helper and so
    clean: they hold the agent's peak exactly.
    """
    if len(usages) > 1:
        return max(u.ru_maxrss for u in usages[1:]) * 1024
    peak = usages[0].ru_maxrss
    return peak * 1024 if peak > rig_peak_kib else None


def _pidfd_kill(fd: int) -> None:
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _widen_pipe(fd: int) -> None:
    """A 1 MiB pipe: fewer wake-ups for a chatty agent. Best effort."""
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)
    except OSError:
        pass


def _sweep_tagged(spec: Launch, direct_child: int) -> None:
    """Subreaper fallback: kill every process carrying the launch's mark and not its
    `spare` (another launch's), and reap our adoptees.

    The direct child is killed like the rest but left for launch() to reap (wait4)."""
    if not spec.attempt_tag:
        return
    marker = f"{spec.tag_var}={spec.attempt_tag}".encode()
    spare = spec.spare.encode() or None
    me = os.getpid()
    for _ in range(50):  # a forking process may need a few rounds
        found = _tagged_pids(marker, spare)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        for pid in found:
            if pid != direct_child and _parent(pid) == me:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def _tagged_pids(marker: bytes, spare: bytes | None = None) -> list[int]:
    """Processes whose environment holds the entry `marker` and not the entry `spare`."""
    pids: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = b"\0" + f.read() + b"\0"
        except OSError:
            continue
        if b"\0" + marker + b"\0" in environ and not (spare and b"\0" + spare + b"\0" in environ):
            pids.append(int(name))
    return pids


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])
