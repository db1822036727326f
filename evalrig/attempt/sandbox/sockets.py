"""Listening sockets made inside a sandbox's network namespace before the program in it
starts: a thread enters the namespace with setns (or a forked child enters a user
namespace first and passes the socket back with SCM_RIGHTS), or the rig makes a new
namespace on a thread; bwrap's --info-fd/--block-fd handshake holds its init meanwhile.
The egress proxy (evalrig.attempt.egress, at 127.0.0.1:3128) and the model gateway
(evalrig.attempt.gateway, at 127.0.0.1:4000) serve such listeners, both in the one
namespace when both are granted (docs/security.md).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import resource
import socket
import struct
import time
from typing import TYPE_CHECKING

from evalrig.attempt.sandbox.host import (
    _CLONE_NEWNET,
    _CLONE_NEWUSER,
    _check,
    _libc,
    _on_thread,
    _tool,
)

if TYPE_CHECKING:  # the egress proxy needs pydantic; a launch without one must not
    from evalrig.attempt.egress import Session
    from evalrig.attempt.gateway import Session as GatewaySession
    from evalrig.attempt.sandbox.spec import GatewayGrant
    from evalrig.models.run import NetworkConnection


class _Handshake:
    """bwrap's --info-fd and --block-fd.

    bwrap writes the host pid of its init to the info pipe and closes it; the init then
    waits on the block pipe before it forks the agent. The rig sets the rlimits on the
    init in that pause (the agent inherits them), which spares a `prlimit` exec per
    attempt, and binds the egress proxy's and the model gateway's listeners inside the
    sandbox's network namespace when the launch has them (`_listeners_in`), then releases it.

    With --json-status-fd bwrap also says whether it got as far as running the command:
    it writes an "exit-code" record only when its setup finished and the exec was reached,
    so a sandbox that failed to finish itself (a mount, the loopback) is the rig's fault,
    never counted against the agent (`reached_command`, set by `finish`).

    With `seccomp` (the program of evalrig.attempt.seccomp), bwrap reads it from a pipe
    (--seccomp) and loads it right before it runs the command.
    """

    def __init__(self, rlimits: tuple[tuple[int, int], ...], services: _Services | None = None,
                 *, status: bool = False, seccomp: bytes | None = None) -> None:
        self.rlimits = rlimits
        self.services = services
        self.info_r, self._info_w = os.pipe()
        self._block_r, self._block_w = os.pipe() if rlimits or services else (-1, -1)
        self._status_r, self._status_w = os.pipe() if status else (-1, -1)
        self._seccomp_r = -1
        if seccomp is not None:  # a few hundred bytes: far below a pipe's buffer
            self._seccomp_r, write = os.pipe()
            try:
                os.write(write, seccomp)
            finally:
                os.close(write)
        self._text = b""
        self._read_all = False
        self.pid: int | None = None
        self.reached_command = True  # known once bwrap exited (finish)

    def args(self) -> list[str]:
        args = ["--info-fd", str(self._info_w)]
        if self._block_r >= 0:
            args += ["--block-fd", str(self._block_r)]
        if self._status_w >= 0:
            args += ["--json-status-fd", str(self._status_w)]
        if self._seccomp_r >= 0:
            args += ["--seccomp", str(self._seccomp_r)]
        return args

    def child_fds(self) -> tuple[int, ...]:
        return tuple(fd for fd in (self._info_w, self._block_r, self._status_w, self._seccomp_r) if fd >= 0)

    def spawned(self) -> None:
        """After the spawn: the child's ends belong to bwrap now."""
        for name in ("_info_w", "_block_r", "_status_w", "_seccomp_r"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    def on_readable(self) -> bool:
        """Read what bwrap wrote; at its end set the limits and release. False at EOF."""
        chunk = os.read(self.info_r, 4096)
        if chunk:
            self._text += chunk
            return True
        self._read_all = True
        self.pid = _child_pid(self._text)
        if self.pid is not None:
            try:
                for which, value in self.rlimits:
                    resource.prlimit(self.pid, which, (value, value))
                if self.services is not None:
                    self.services.serve(_listeners_in(self.pid, self.services.addresses()))
            except ProcessLookupError:
                return False  # it died already
            # Any other failure propagates: launch() kills the held sandbox, an infra error.
            self._release()
        return False

    def finish(self) -> int | None:
        """After bwrap exited: the init's pid, reading what is left of the info pipe."""
        if not self._read_all:
            os.set_blocking(self.info_r, True)
            while self.on_readable():
                pass
        self.reached_command = self._reached_command()
        return self.pid

    def _reached_command(self) -> bool:
        """After bwrap exited: whether its setup finished and it ran the command (True
        where bwrap was not asked to say)."""
        if self._status_r < 0:
            return True
        text = b""
        while chunk := os.read(self._status_r, 4096):  # bwrap is gone: the pipe ends
            text += chunk
        return b'"exit-code"' in text

    def _release(self) -> None:
        if self._block_w >= 0:
            try:
                os.write(self._block_w, b"x")
            except BrokenPipeError:
                pass  # bwrap is gone
            os.close(self._block_w)
            self._block_w = -1

    def close(self) -> None:
        # Closing the block pipe unheld would let the init go on: by now every process of
        # the sandbox is dead or being killed, so nothing unlimited can run.
        for name in ("info_r", "_info_w", "_block_r", "_block_w", "_status_r", "_status_w", "_seccomp_r"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


_SIOCGIFFLAGS = 0x8913


_SIOCSIFFLAGS = 0x8914


_IFF_UP = 0x1


_IFREQ = "16sh14x"


_FD_WAIT_S = 10.0


_PROXY_ADDRESS = ("127.0.0.1", 3128)  # evalrig.attempt.egress.PROXY_ADDRESS (tests check they agree)


_GATEWAY_ADDRESS = ("127.0.0.1", 4000)  # evalrig.attempt.gateway.GATEWAY_ADDRESS (tests check they agree)


Address = tuple[str, int]


class _Services:
    """One launch's listeners inside the agent's network namespace, and the sessions
    serving them from the rig's side: the egress proxy's (evalrig.attempt.egress; the
    operator's network grant) and the model gateway's (evalrig.attempt.gateway), each
    where granted, both in the one namespace (docs/security.md)."""

    def __init__(self, allow: tuple[str, ...] | None, gateway: GatewayGrant | None = None) -> None:
        self.allow = allow
        self.gateway = gateway
        self.session: Session | None = None
        self.gateway_session: GatewaySession | None = None
        self._netns = -1

    def addresses(self) -> list[Address]:
        return ([_PROXY_ADDRESS] if self.allow is not None else []) + (
            [_GATEWAY_ADDRESS] if self.gateway is not None else [])

    def own_namespace(self) -> int:
        """process: a new network namespace with the listeners; its fd for nsenter."""
        self._netns, listeners = _new_netns_listeners(self.addresses())
        self.serve(listeners)
        return self._netns

    def spawned(self) -> None:
        """After the spawn: nsenter holds the namespace now (and the agent, after it)."""
        if self._netns >= 0:
            os.close(self._netns)
            self._netns = -1

    def serve(self, listeners: list[socket.socket]) -> None:
        """Hand each listener (in the order of `addresses`) to its session."""
        try:
            rest = list(listeners)
            if self.allow is not None:
                from evalrig.attempt.egress import open_session

                self.session = open_session(rest.pop(0), self.allow)
            if self.gateway is not None:
                grant = self.gateway
                self.gateway_session = grant.gateway.open(rest.pop(0), grant.grant, grant.ledger)
        except BaseException:
            for listener in listeners:
                listener.close()
            raise

    def records(self) -> tuple[NetworkConnection, ...]:
        return tuple(self.session.records) if self.session is not None else ()

    def hosts(self) -> list[str]:
        return self.session.hosts() if self.session is not None else []

    def close(self) -> None:
        """Every process of the launch is dead: end the connections. The gateway's
        session reads a call still in flight upstream to its end (its usage) first."""
        self.spawned()
        try:
            if self.session is not None:
                self.session.close()
        finally:
            if self.gateway_session is not None:
                self.gateway_session.close()


def _nsenter(netns_fd: int) -> list[str]:
    """util-linux nsenter into the namespace the rig holds open as `netns_fd` (inherited)."""
    nsenter = _tool("nsenter")
    assert nsenter is not None  # egress_enforced("process") checked it
    return [nsenter, f"--net=/proc/self/fd/{netns_fd}", "--"]


def _loopback_up() -> None:
    """Bring `lo` up in the calling thread's network namespace (a new one has it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        got = fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0))
        flags = struct.unpack(_IFREQ, got)[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def _listener_at(address: Address, *, own_namespace: bool) -> socket.socket:
    """A listening socket at `address`, made in the calling thread's network namespace.

    In a namespace the rig made (`own_namespace`) the rig brings `lo` up itself. In
    bubblewrap's, bwrap's init sets `lo` up on its own, at the same moment the rig learns
    its pid, and it adds 127.0.0.1 exclusively: had the rig brought `lo` up first (which
    gives `lo` that address), bwrap would die ("loopback: Failed RTM_NEWADDR"). So there
    the rig touches nothing and binds once the address is there (_bind_when_there).
    """
    if own_namespace:
        _loopback_up()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if own_namespace:
            listener.bind(address)
        else:
            _bind_when_there(listener, address)
        listener.listen(64)
    except BaseException:
        listener.close()
        raise
    return listener


def _listeners_at(addresses: list[Address], *, own_namespace: bool) -> list[socket.socket]:
    made: list[socket.socket] = []
    try:
        for address in addresses:
            made.append(_listener_at(address, own_namespace=own_namespace))
    except BaseException:
        for listener in made:
            listener.close()
        raise
    return made


def _proxy_listener(*, own_namespace: bool) -> socket.socket:
    """The egress proxy's listening socket (`_listener_at` _PROXY_ADDRESS)."""
    return _listener_at(_PROXY_ADDRESS, own_namespace=own_namespace)


def _bind_when_there(listener: socket.socket, address: Address = _PROXY_ADDRESS) -> None:
    """Bind to `address`, waiting while bwrap's init has not added it yet.

    The kernel says nothing when the address appears, and the wait is a few system calls
    of bwrap's long, so a short backoff (0.1 ms doubling to 10 ms, within _FD_WAIT_S) is
    the plain answer.
    """
    deadline = time.monotonic() + _FD_WAIT_S
    pause = 0.0001
    while True:
        try:
            listener.bind(address)
            return
        except OSError as e:
            if e.errno != errno.EADDRNOTAVAIL or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _new_netns_listeners(addresses: list[Address]) -> tuple[int, list[socket.socket]]:
    """A new network namespace (loopback up) and listeners at `addresses` in it (root only)."""

    def make() -> tuple[int, list[socket.socket]]:
        _check(_libc().unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return fd, _listeners_at(addresses, own_namespace=True)
        except BaseException:
            os.close(fd)
            raise

    return _on_thread(make)


def _new_netns_listener() -> tuple[int, socket.socket]:
    """A new network namespace (loopback up) and the proxy's listener in it (root only)."""
    fd, listeners = _new_netns_listeners([_PROXY_ADDRESS])
    return fd, listeners[0]


def _listener_in(pid: int) -> socket.socket:
    """The proxy's listener bound inside the network namespace of bwrap's init `pid`."""
    return _listeners_in(pid, [_PROXY_ADDRESS])[0]


def _listeners_in(pid: int, addresses: list[Address]) -> list[socket.socket]:
    """Listeners at `addresses` bound inside the network namespace of bwrap's init `pid`.

    The init is held on --block-fd, so nothing of the agent's runs there yet. Where the
    namespace belongs to the rig's own user namespace (bwrap as root), a thread enters it;
    else (bwrap in a user namespace) only a single-threaded process may enter that user
    namespace first, so a forked child does, and sends the sockets back (SCM_RIGHTS).
    """
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if os.stat(f"/proc/{pid}/ns/user").st_ino == os.stat("/proc/self/ns/user").st_ino:
            def enter() -> list[socket.socket]:
                _check(_libc().setns(net, _CLONE_NEWNET), "setns(network namespace)")
                return _listeners_at(addresses, own_namespace=False)

            return _on_thread(enter)
        return _listeners_by_fork(pid, net, addresses)
    finally:
        os.close(net)


def _listener_by_fork(pid: int, net: int) -> socket.socket:
    """The proxy's listener alone, by `_listeners_by_fork`."""
    return _listeners_by_fork(pid, net, [_PROXY_ADDRESS])[0]


def _listeners_by_fork(pid: int, net: int, addresses: list[Address]) -> list[socket.socket]:
    user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    libc = _libc()  # loaded before the fork: the child only calls into it
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the forked child
            code = 1
            try:
                ours.close()
                if os.stat("/proc/self/ns/user").st_ino != os.fstat(user).st_ino:
                    _check(libc.setns(user, _CLONE_NEWUSER), "setns(user namespace)")
                _check(libc.setns(net, _CLONE_NEWNET), "setns(network namespace)")
                listeners = _listeners_at(addresses, own_namespace=False)
                socket.send_fds(theirs, [b"L"], [s.fileno() for s in listeners])
                code = 0
            finally:
                os._exit(code)
        theirs.close()
        ours.settimeout(_FD_WAIT_S)
        try:
            _, fds, _, _ = socket.recv_fds(ours, 1, len(addresses))
        finally:
            os.waitpid(child, 0)
        got = [socket.socket(fileno=fd) for fd in fds]
        if len(got) != len(addresses):
            for s in got:
                s.close()
            raise OSError(f"could not bind the listeners {addresses} inside the sandbox of pid {pid}")
        return got
    finally:
        ours.close()
        theirs.close()
        os.close(user)


def _child_pid(info: bytes) -> int | None:
    """The "child-pid" of bwrap's --info-fd JSON."""
    try:
        pid = json.loads(info).get("child-pid")
    except (ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None
